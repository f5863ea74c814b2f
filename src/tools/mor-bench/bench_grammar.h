/* bench_grammar.h - `mor-bench --grammar`: what a grammar constraint costs
 * per generated token (mor_grammar_apply over the whole vocabulary, then
 * mor_grammar_accept), beside what decoding a token costs.
 *
 * For each vocabulary (models given with --vocab; default the bundled
 * model's 4096 tokens and llama.cpp's GPT-2 and StarCoder vocabularies of
 * 50257 and 49152 tokens, SmolLM's size) and each grammar (any JSON object,
 * a small record, free text), a seeded walk of --tokens steps: mask, then
 * the allowed token a seeded PRNG picks (a stand-in for sampling: the walk
 * goes wherever the grammar lets it), accepted; restarted when the grammar
 * must end. The median over --reps walks of the mean time per step is
 * printed, with the bundled model's decode time per generated token measured
 * in the same run, so the overhead reads as a share of a token's time.
 *
 *   mor-bench --grammar [--vocab FILE,...] [--model MODEL] [--tokens 200] [--reps 5]
 *
 * Header-only (static functions), included by mor-bench.c. */
#ifndef MOR_BENCH_GRAMMAR_H
#define MOR_BENCH_GRAMMAR_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mor.h"
#include "cli.h"
#include "bench_util.h"

static const char *const bg_names[3] = { "json_object", "record", "free text" };
static const char *const bg_grammars[3] = {
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n",
    "root ::= \" {\" pair (\",\" pair){0,2} \"}\"\n"
    "pair ::= \"\\\"\" [a-z]{1,8} \"\\\": \" (\"true\" | \"false\" | [0-9]{1,4})\n",
    "root ::= [^\\x00]*\n",
};

/* Seconds per step of one seeded walk of n steps; -1 on error. */
static double bg_walk(mor_grammar *g, int32_t V, float *l, int n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    mor_grammar_reset(g);
    double t0 = bench_now();
    for (int i = 0; i < n; i++) {
        if (mor_grammar_state(g) & MOR_GRAMMAR_MUST_END) mor_grammar_reset(g);
        for (int32_t t = 0; t < V; t++) l[t] = 0.0f;
        if (mor_grammar_apply(g, l, V)) return -1;
        int32_t k = 0;
        for (int32_t t = 0; t < V; t++) k += l[t] == 0.0f;
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int32_t pick = (int32_t)(x % (uint64_t)k), tok = -1;
        for (int32_t t = 0; t < V && tok < 0; t++)
            if (l[t] == 0.0f && pick-- == 0) tok = t;
        /* an end token where the grammar may end: start over */
        if (mor_grammar_accept(g, tok)) return -1;
        if (mor_grammar_state(g) & MOR_GRAMMAR_MUST_END) mor_grammar_reset(g);
    }
    return (bench_now() - t0) / n;
}

/* Seconds per generated token of the model (greedy, one token per decode). */
static double bg_decode(const char *path, int n, int reps)
{
    mor_model *m = NULL;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    if (mor_model_load_file(path, NULL, &m)) return -1;
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = (uint32_t)n + 8;
    cp.n_threads = 1;
    double *v = malloc(sizeof *v * (size_t)reps), r = -1;
    if (v && !mor_context_create(m, &cp, &c) && !mor_batch_create(1, &b)) {
        if (mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT) mor_router_set_mode(mor_context_router(c), MOR_ROUTE_THRESHOLD, 0);
        int ok = 1;
        for (int k = 0; k < reps && ok; k++) {
            mor_kv_clear(mor_context_kv(c));
            mor_token t = 1;
            double t0 = bench_now();
            for (int i = 0; i < n && ok; i++) {
                mor_batch_clear(b);
                mor_batch_add(b, t, i, 0, 1);
                ok = !mor_decode(c, b);
                const float *lg = ok ? mor_get_logits(c, 0) : NULL;
                int32_t best = 0, V = mor_model_n_vocab(m);
                for (int32_t j = 1; lg && j < V; j++) if (lg[j] > lg[best]) best = j;
                t = best;
            }
            v[k] = (bench_now() - t0) / n;
        }
        if (ok) { qsort(v, (size_t)reps, sizeof *v, bench_cmp_d); r = v[reps / 2]; }
    }
    free(v);
    mor_batch_free(b);
    mor_context_free(c);
    mor_model_free(m);
    return r;
}

static int bench_grammar_main(int argc, char **argv)
{
    const char *vocabs = "models/brown-mor.gguf,tests/data/tokenizer/llama.cpp/ggml-vocab-gpt-2.gguf,"
                         "tests/data/tokenizer/llama.cpp/ggml-vocab-starcoder.gguf";
    const char *model = "models/brown-mor.gguf";
    int n = 200, reps = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: mor-bench --grammar [--vocab FILE,...] [--model MODEL] [--tokens 200] [--reps 5]\n"
                   "  the time a grammar constraint takes per generated token (mask + accept) on each\n"
                   "  vocabulary, beside MODEL's decode time per token (one thread), in one run\n");
            return 0;
        }
        else if (!strcmp(a, "--vocab")) vocabs = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--model")) model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--tokens")) n = (int)cli_int(a, cli_value(argc, argv, &i), 1, 100000);
        else if (!strcmp(a, "--reps")) reps = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else cli_usage_error("unknown option '%s'", a);
    }
    double dec = bg_decode(model, 64, reps);
    if (dec < 0) return cli_error("decoding with %s failed: %s", model, mor_last_error());
    printf("decode: %s, %.3f ms per generated token (1 thread, median of %d)\n", model, 1e3 * dec, reps);
    printf("%-48s %7s  %-12s %12s %12s\n", "vocabulary", "tokens", "grammar", "ms/token", "of decode");
    char *list = malloc(strlen(vocabs) + 1);
    if (!list) return cli_error("out of memory");
    strcpy(list, vocabs);
    int rc = 0;
    for (char *save = NULL, *f = strtok_r(list, ",", &save); f && !rc; f = strtok_r(NULL, ",", &save)) {
        mor_model_params mp;
        MOR_MODEL_PARAMS_INIT(&mp);
        mp.flags = MOR_MODEL_VOCAB_ONLY;
        mor_model *m = NULL;
        if (mor_model_load_file(f, &mp, &m)) { rc = cli_error("%s: %s", f, mor_last_error()); break; }
        int32_t V = mor_model_n_vocab(m);
        float *l = malloc(sizeof *l * (size_t)V);
        double *v = malloc(sizeof *v * (size_t)reps);
        for (int gi = 0; gi < 3 && l && v && !rc; gi++) {
            mor_grammar *g = NULL;
            if (mor_grammar_create(m, bg_grammars[gi], strlen(bg_grammars[gi]), NULL, NULL, 0, &g)) {
                rc = cli_error("%s: %s", bg_names[gi], mor_last_error());
                break;
            }
            for (int k = 0; k < reps && !rc; k++)
                if ((v[k] = bg_walk(g, V, l, n, (uint64_t)k + 1)) < 0) rc = cli_error("walk: %s", mor_last_error());
            if (!rc) {
                qsort(v, (size_t)reps, sizeof *v, bench_cmp_d);
                printf("%-48s %7d  %-12s %12.3f %11.1f%%\n", f, (int)V, bg_names[gi], 1e3 * v[reps / 2],
                       100.0 * v[reps / 2] / dec);
            }
            mor_grammar_free(g);
        }
        free(l);
        free(v);
        mor_model_free(m);
    }
    free(list);
    return rc;
}
#endif
