/* bench_speculate.h - `mor-bench --speculate`: self-speculative decoding
 * (mor_speculate) beside plain decoding, one token per mor_decode, in one run.
 *
 * Part 1, trained models (--model, default the bundled models/brown-mor.gguf):
 * for each draft count N and draft depth D, the same prompts generate the
 * same number of tokens plainly and speculatively, alternating (A B A B) for
 * --rounds rounds, greedy and seeded sampling; the tokens must be identical
 * (the benchmark fails otherwise). Printed: plain and speculative tok/s
 * (medians over rounds of the total over the prompts), their ratio,
 * acceptance (drafts taken / drafted) and tokens per step.
 *
 * Part 2, a random-weight MoR model (--synth FILE, the 135M MoR shape that
 * mor-bench writes; THRESHOLD routing with the routers' random verdicts,
 * and FORCED full depth): acceptance means nothing there, so the cost of a
 * step is measured instead: a plain decode of one token, and a speculative
 * step of N drafts (N draft passes plus one verify of N + 1 rows; with
 * random weights nearly every draft is rejected, so one token per step).
 * The speed acceptance rate a would give is projected as
 * E(N, a) / t_step(N), E = (1 - a^(N+1)) / (1 - a) tokens per step.
 *
 *   mor-bench --speculate [--model FILE,...] [--synth FILE] [--drafts 1,2,3,4,6,8] [--depths 1,2]
 *                         [--prompts 20] [--tokens 200] [--rounds 3] [-t THREADS]
 *
 * Header-only (static functions), included by mor-bench.c. */
#ifndef MOR_BENCH_SPECULATE_H
#define MOR_BENCH_SPECULATE_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mor.h"
#include "cli.h"
#include "bench_util.h"

static const char *const bsp_prompts[20] = {
    "The jury said that", "In the morning", "He was not sure whether", "The city of", "It is a question of",
    "She looked at the", "There are many reasons", "The president of the", "We have found that",
    "After the war", "The church was", "Most of the people", "The new law", "In his first year",
    "The man who", "This is the first", "They did not know", "The state government", "One of the most",
    "When the time came",
};

typedef struct {
    double seconds;            /* generation only */
    int64_t tokens, steps, drafted, accepted;
} bsp_run;

/* Generate n tokens after prompt ids (greedy when seed is 0) with n_draft
 * drafts at depth (0: plain decoding), tokens into out; 0 on success. */
static int bsp_generate(mor_context *c, mor_batch *b, const mor_token *ids, int32_t np, int32_t n, uint64_t seed,
                        int32_t n_draft, int32_t depth, mor_token *out, bsp_run *r)
{
    const int32_t nv = mor_model_n_vocab(mor_context_model(c));
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);
    sp.seed = seed; sp.temperature = seed ? 0.8f : 0.0f;
    mor_sampler *s = NULL;
    if (mor_sampler_create(&sp, &s)) return -1;
    mor_kv_clear(mor_context_kv(c));
    mor_batch_clear(b);
    for (int32_t i = 0; i < np; i++) {
        mor_batch_add(b, ids[i], i, 0, i == np - 1);
        mor_sampler_accept(s, ids[i]);
    }
    int rc = mor_decode(c, b) ? -1 : 0;
    const double t0 = bench_now();
    int32_t k = 0;
    if (!rc) rc = mor_sampler_sample(s, mor_get_logits(c, np - 1), nv, &out[k++]) ? -1 : 0;
    while (!rc && k < n) {
        const mor_pos pos = np + k - 1;
        if (n_draft) {
            int32_t n_out = 0, acc = 0, room = n - k;
            if (mor_speculate(c, 0, out[k - 1], pos, n_draft, depth, s, NULL, out + k, room, &n_out, &acc) || !n_out) {
                rc = -1;
                break;
            }
            r->steps++;
            r->drafted += n_draft < room - 1 ? n_draft : room - 1;
            r->accepted += acc;
            k += n_out;
        } else {
            mor_batch_clear(b);
            mor_batch_add(b, out[k - 1], pos, 0, 1);
            if (mor_decode(c, b) || mor_sampler_sample(s, mor_get_logits(c, 0), nv, &out[k])) { rc = -1; break; }
            k++;
            r->steps++;
        }
    }
    r->seconds += bench_now() - t0;
    r->tokens += k - 1;   /* the first came from the prompt's logits */
    mor_sampler_free(s);
    return rc;
}

static int bsp_parse_list(const char *s, int32_t *v, int cap, int lo, int hi, const char *flag)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *p = strtok(buf, ","); p && n < cap; p = strtok(NULL, ",")) v[n++] = (int32_t)cli_int(flag, p, lo, hi);
    return n;
}

/* Part 1: one trained model. Returns 0, or 1 when an output differed. */
static int bsp_trained(const char *path, const int32_t *drafts, int nd, const int32_t *depths, int ndp, int n_prompts,
                       int32_t n_tok, int rounds, int threads)
{
    mor_model *m = NULL;
    if (mor_model_load_file(path, NULL, &m)) { fprintf(stderr, "%s: %s\n", path, mor_last_error()); return 1; }
    const int32_t nr = mor_model_n_recursion(m);
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 512; cp.n_batch = 64; cp.n_threads = threads;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    mor_token *ref = malloc(sizeof *ref * (size_t)n_tok), *got = malloc(sizeof *got * (size_t)n_tok);
    mor_token ids[64];
    int bad = 0;
    if (mor_context_create(m, &cp, &c) || mor_batch_create(64, &b) || !ref || !got) { bad = 1; goto done; }
    if (mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT) mor_router_set_mode(mor_context_router(c), MOR_ROUTE_THRESHOLD, 0);
    printf("\n### %s (%d recursions, %d tokens after each of %d prompts, %d rounds A B A B)\n\n", path, nr, n_tok,
           n_prompts, rounds);
    printf("| sampling | N | D | plain tok/s | speculative tok/s | ratio | acceptance | tokens/step |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int smp = 0; smp < 2; smp++)
        for (int di = 0; di < ndp; di++)
            for (int ni = 0; ni < nd; ni++) {
                if (depths[di] >= nr) continue;
                double tp[16], ts[16];
                bsp_run sum = { 0, 0, 0, 0, 0 };
                for (int rd = 0; rd < rounds && !bad; rd++) {
                    bsp_run a = { 0, 0, 0, 0, 0 }, s = { 0, 0, 0, 0, 0 };
                    for (int p = 0; p < n_prompts && !bad; p++) {
                        const char *txt = bsp_prompts[p % 20];
                        int32_t np = 0;
                        if (mor_tokenize(m, txt, strlen(txt), MOR_TOKENIZE_ADD_BOS, ids, 64, &np) || np <= 0) {
                            bad = 1;
                            break;
                        }
                        const uint64_t seed = smp ? 1000u + (uint64_t)p : 0;
                        /* alternate which goes first, so drift favours neither */
                        for (int w = 0; w < 2 && !bad; w++) {
                            const int spec = (w + rd + p) % 2;
                            if (bsp_generate(c, b, ids, np, n_tok, seed, spec ? drafts[ni] : 0, depths[di],
                                             spec ? got : ref, spec ? &s : &a)) bad = 1;
                        }
                        if (!bad && memcmp(ref, got, sizeof *ref * (size_t)n_tok)) {
                            fprintf(stderr, "%s: N %d D %d prompt %d: speculative tokens differ from plain\n", path,
                                    drafts[ni], depths[di], p);
                            bad = 1;
                        }
                    }
                    tp[rd] = (double)a.tokens / a.seconds;
                    ts[rd] = (double)s.tokens / s.seconds;
                    sum.steps += s.steps; sum.drafted += s.drafted; sum.accepted += s.accepted; sum.tokens += s.tokens;
                }
                if (bad) goto done;
                const double mp = bench_median(tp, rounds), ms = bench_median(ts, rounds);
                printf("| %s | %d | %d | %.0f | %.0f | %.2f | %.1f%% | %.2f |\n", smp ? "seeded, T 0.8" : "greedy",
                       drafts[ni], depths[di], mp, ms, ms / mp,
                       sum.drafted ? 100.0 * (double)sum.accepted / (double)sum.drafted : 0.0,
                       sum.steps ? (double)(sum.tokens + rounds * n_prompts) / (double)sum.steps : 0.0);
                fflush(stdout);
            }
done:
    free(ref); free(got);
    mor_batch_free(b); mor_context_free(c); mor_model_free(m);
    return bad;
}

/* Part 2: step costs on a random-weight model. */
static int bsp_synth(const char *path, const int32_t *drafts, int nd, const int32_t *depths, int ndp, int rounds,
                     int threads)
{
    mor_model *m = NULL;
    if (mor_model_load_file(path, NULL, &m)) { fprintf(stderr, "%s: %s\n", path, mor_last_error()); return 1; }
    const int32_t nr = mor_model_n_recursion(m), nv = mor_model_n_vocab(m);
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 1024; cp.n_batch = 64; cp.n_threads = threads;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    mor_token ids[16], out[64];
    int bad = mor_context_create(m, &cp, &c) || mor_batch_create(64, &b);
    static const double accs[3] = { 0.6, 0.75, 0.9 };
    printf("\n### %s (random weights, %d recursions; FORCED %d: every token at full depth)\n\n", path, nr, nr);
    printf("| N | D | plain ms/token | step ms (N drafts + verify of N+1) | draft ms | projected speed-up at "
           "acceptance 0.6 / 0.75 / 0.9 |\n|---:|---:|---:|---:|---:|---|\n");
    if (!bad) mor_router_set_mode(mor_context_router(c), MOR_ROUTE_FORCED, nr);
    for (int i = 0; i < 16; i++) ids[i] = (mor_token)((37 * i + 11) % nv);
    for (int di = 0; di < ndp && !bad; di++)
        for (int ni = 0; ni < nd && !bad; ni++) {
            if (depths[di] >= nr) continue;
            double tp[16], ts[16], tdr[16];
            for (int rd = 0; rd < rounds && !bad; rd++) {
                bsp_run a = { 0, 0, 0, 0, 0 }, s = { 0, 0, 0, 0, 0 }, d = { 0, 0, 0, 0, 0 };
                /* plain: 16 tokens; speculative: 16 steps; the draft alone: steps at a depth past the cap */
                if (bsp_generate(c, b, ids, 16, 17, 0, 0, 1, out, &a)) bad = 1;
                mor_kv_clear(mor_context_kv(c));
                mor_batch_clear(b);
                for (int i = 0; i < 16; i++) mor_batch_add(b, ids[i], i, 0, i == 15);
                if (!bad && mor_decode(c, b)) bad = 1;
                mor_sampler_params sp;
                MOR_SAMPLER_PARAMS_INIT(&sp);
                sp.temperature = 0;
                mor_sampler *smp = NULL;
                if (!bad && mor_sampler_create(&sp, &smp)) bad = 1;
                mor_token t = ids[15];
                mor_pos pos = 16;
                double t0 = bench_now();
                for (int k = 0; k < 16 && !bad; k++) {
                    int32_t n_out = 0;
                    if (mor_speculate(c, 0, t, pos, drafts[ni], depths[di], smp, NULL, out, 64, &n_out, NULL) || !n_out)
                        bad = 1;
                    else { t = out[n_out - 1]; pos += n_out; s.steps++; }
                }
                s.seconds = bench_now() - t0;
                /* a draft pass alone: N = 1 at D = the draft depth minus a verify of 2 rows is not separable;
                 * measure plain decoding capped at the draft depth instead (what a draft row computes) */
                mor_kv_clear(mor_context_kv(c));
                mor_router_set_max_depth(mor_context_router(c), depths[di]);
                if (!bad && bsp_generate(c, b, ids, 16, 17, 0, 0, 1, out, &d)) bad = 1;
                mor_router_set_max_depth(mor_context_router(c), 0);
                mor_sampler_free(smp);
                tp[rd] = a.seconds / (double)a.tokens;
                ts[rd] = s.steps ? s.seconds / (double)s.steps : 0;
                tdr[rd] = d.seconds / (double)d.tokens;
            }
            if (bad) break;
            const double mp = bench_median(tp, rounds), ms = bench_median(ts, rounds), md = bench_median(tdr, rounds);
            printf("| %d | %d | %.2f | %.2f | %.2f |", drafts[ni], depths[di], 1e3 * mp, 1e3 * ms, 1e3 * md);
            for (int q = 0; q < 3; q++) {
                const double e = (1.0 - pow(accs[q], drafts[ni] + 1)) / (1.0 - accs[q]);
                printf("%s %.2f", q ? " /" : "", e / ms * mp);
            }
            printf(" |\n");
            fflush(stdout);
        }
    mor_batch_free(b); mor_context_free(c); mor_model_free(m);
    return bad;
}

static int bench_speculate_main(int argc, char **argv, const char *synth_default)
{
    const char *models = "models/brown-mor.gguf", *synth = synth_default;
    const char *dlist = "1,2,3,4,6,8", *plist = "1,2";
    int n_prompts = 20, rounds = 3, threads = 2;
    int32_t n_tok = 200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--model")) models = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--synth")) synth = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--no-synth")) synth = NULL;
        else if (!strcmp(a, "--drafts")) dlist = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--depths")) plist = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--prompts")) n_prompts = (int)cli_int(a, cli_value(argc, argv, &i), 1, 20);
        else if (!strcmp(a, "--tokens")) n_tok = (int32_t)cli_int(a, cli_value(argc, argv, &i), 2, 400);
        else if (!strcmp(a, "--rounds")) rounds = (int)cli_int(a, cli_value(argc, argv, &i), 1, 15);
        else if (!strcmp(a, "-t")) threads = (int)cli_int(a, cli_value(argc, argv, &i), 1, 256);
        else cli_usage_error("unknown option '%s'", a);
    }
    int32_t drafts[16], depths[16];
    const int nd = bsp_parse_list(dlist, drafts, 16, 1, 32, "--drafts");
    const int ndp = bsp_parse_list(plist, depths, 16, 1, MOR_MAX_RECURSIONS, "--depths");
    printf("## mor-bench --speculate: %d threads\n", threads);
    int bad = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", models);
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p && !bad; p = strtok_r(NULL, ",", &save))
        bad = bsp_trained(p, drafts, nd, depths, ndp, n_prompts, n_tok, rounds, threads);
    if (!bad && synth) bad = bsp_synth(synth, drafts, nd, depths, ndp, rounds, threads);
    return bad;
}
#endif
