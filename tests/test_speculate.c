/* test_speculate.c - mor_speculate (self-speculative decoding by recursion
 * depth) against plain decoding, one token per mor_decode, sampled with the
 * same seeded sampler:
 *  - the same tokens and the same logits, bit for bit, on every fixture
 *    (expert-choice THRESHOLD and FORCED, with depth caps; token-choice;
 *    KV sharing and MOR_KV_DENSE), on the relaxed (LoRA) Gemma 2 and
 *    GPT-NeoX models without routers, and on the bundled trained model,
 *    greedy and sampled, for n_draft 1, 3, 8 (3 alone under MOR_TEST_EMULATED)
 *    and draft depths 1 and 2;
 *  - the same with a repetition penalty (above and below 1, windows of 1, 2,
 *    5 and 64 tokens, shorter than the drafts too), greedy and three seeds
 *    sampled, on the trained model and a fixture: the drafts' draws must
 *    leave the sampler's history as it was;
 *  - rejected drafts leave nothing: afterwards every recursion's cache holds
 *    as many cells and bytes as plain decoding's, and the sequence's last
 *    position is the same;
 *  - the trained model accepts drafts (its acceptance is real);
 *  - a failed call changes nothing (a full cache, an abort, bad arguments);
 *  - TOPK routing and hidden-state contexts are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "mor.h"

#define GEN 40
#define MAXV 70000

static float *ref_logits;   /* [GEN][n_vocab] */

typedef struct {
    int32_t kv_mode, route, forced, max_depth;
    int greedy;
} setup;

/* The sampler's penalty and seed for penalties(); zero: off, 64, 1234. */
static struct { float penalty; int32_t last_n; uint64_t seed; } pen_now;
/* llama_stages(): 1 mirostat 2; 2 DRY, presence, XTC, dynamic temperature */
static int stages_now;

static mor_context *make_ctx(mor_model *m, const setup *u, uint32_t n_ctx, uint32_t flags)
{
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = n_ctx; cp.n_batch = 16; cp.kv_mode = u->kv_mode; cp.flags = flags;
    mor_context *c = NULL;
    if (mor_context_create(m, &cp, &c)) return NULL;
    if (u->route) mor_router_set_mode(mor_context_router(c), u->route, u->forced);
    if (u->max_depth) mor_router_set_max_depth(mor_context_router(c), u->max_depth);
    return c;
}

static mor_sampler *make_sampler(const setup *u, const mor_token *prompt, int32_t np)
{
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);
    sp.seed = pen_now.seed ? pen_now.seed : 1234; sp.temperature = u->greedy ? 0.0f : 0.9f; sp.top_k = 0; sp.top_p = 1.0f; sp.min_p = 0;
    if (pen_now.penalty) sp.repeat_penalty = pen_now.penalty;
    if (pen_now.last_n) sp.repeat_last_n = pen_now.last_n;
    if (stages_now == 1) { sp.mirostat = 2; sp.mirostat_tau = 3.0f; }
    if (stages_now == 2) {
        sp.dry_multiplier = 1.0f; sp.dry_allowed_length = 1; sp.presence_penalty = 0.5f;
        sp.xtc_probability = 0.5f; sp.xtc_threshold = 0.05f; sp.dynatemp_range = 0.3f;
    }
    mor_sampler *s = NULL;
    if (mor_sampler_create(&sp, &s)) return NULL;
    for (int32_t i = 0; i < np; i++) mor_sampler_accept(s, prompt[i]);
    return s;
}

static int prefill(mor_context *c, const mor_token *prompt, int32_t np)
{
    mor_batch *b = NULL;
    if (mor_batch_create(np, &b)) return 0;
    for (int32_t i = 0; i < np; i++) mor_batch_add(b, prompt[i], i, 0, i == np - 1);
    const int ok = mor_decode(c, b) == MOR_OK;
    mor_batch_free(b);
    return ok;
}

/* Plain decoding: GEN tokens, their logits into ref_logits. */
static int plain(mor_model *m, const setup *u, const mor_token *prompt, int32_t np, mor_token *toks,
                 uint64_t *cells)
{
    const int32_t nv = mor_model_n_vocab(m), nr = mor_model_n_recursion(m);
    mor_context *c = make_ctx(m, u, 256, 0);
    mor_sampler *s = make_sampler(u, prompt, np);
    mor_batch *b = NULL;
    int ok = c && s && !mor_batch_create(1, &b) && prefill(c, prompt, np);
    const float *lg = ok ? mor_get_logits(c, np - 1) : NULL;
    for (int32_t k = 0; ok && k < GEN; k++) {
        memcpy(ref_logits + (size_t)k * nv, lg, sizeof(float) * (size_t)nv);
        ok = !mor_sampler_sample(s, lg, nv, &toks[k]);
        if (!ok || k == GEN - 1) break;
        mor_batch_clear(b);
        mor_batch_add(b, toks[k], np + k, 0, 1);
        ok = !mor_decode(c, b);
        lg = mor_get_logits(c, 0);
    }
    for (int32_t r = 0; ok && r < nr; r++) cells[r] = (uint64_t)mor_kv_n_cells_used(mor_context_kv(c), r);
    if (ok) mor_kv_bytes(mor_context_kv(c), MOR_KV_ALL, NULL, &cells[nr]);
    mor_batch_free(b); mor_sampler_free(s); mor_context_free(c);
    return ok;
}

/* The same with mor_speculate; returns the drafts accepted (-1: failed). */
static int32_t speculative(mor_model *m, const setup *u, const mor_token *prompt, int32_t np, int32_t n_draft,
                           int32_t depth, mor_token *toks, int32_t *n_logits_ok, uint64_t *cells, int32_t *calls)
{
    const int32_t nv = mor_model_n_vocab(m), nr = mor_model_n_recursion(m);
    mor_context *c = make_ctx(m, u, 256, 0);
    mor_sampler *s = make_sampler(u, prompt, np);
    int ok = c && s && prefill(c, prompt, np);
    int32_t acc = 0, n = 0;
    *n_logits_ok = 0; *calls = 0;
    if (ok) {
        const float *lg = mor_get_logits(c, np - 1);
        ok = !memcmp(lg, ref_logits, sizeof(float) * (size_t)nv);
        *n_logits_ok += ok;
        ok = ok && !mor_sampler_sample(s, lg, nv, &toks[0]);
        n = 1;
    }
    while (ok && n < GEN) {
        mor_token out[32];
        int32_t n_out = 0, a = 0;
        ok = !mor_speculate(c, 0, toks[n - 1], np + n - 1, n_draft, depth, s, NULL, out, GEN - n, &n_out, &a);
        ok = ok && n_out >= 1 && n_out <= n_draft + 1 && a <= n_out;
        for (int32_t i = 0; ok && i < n_out; i++) {
            const float *lg = mor_get_logits(c, i);
            if (lg && !memcmp(lg, ref_logits + (size_t)(n + i) * nv, sizeof(float) * (size_t)nv)) ++*n_logits_ok;
            toks[n + i] = out[i];
        }
        n += n_out; acc += a; ++*calls;
    }
    for (int32_t r = 0; ok && r < nr; r++) cells[r] = (uint64_t)mor_kv_n_cells_used(mor_context_kv(c), r);
    if (ok) mor_kv_bytes(mor_context_kv(c), MOR_KV_ALL, NULL, &cells[nr]);
    mor_sampler_free(s); mor_context_free(c);
    return ok ? acc : -1;
}

static int32_t compare(mor_model *m, const char *name, const setup *u, const char *what)
{
    const int32_t nv = mor_model_n_vocab(m), nr = mor_model_n_recursion(m);
    mor_token prompt[6];
    for (int32_t i = 0; i < 6; i++) prompt[i] = (7 + 31 * i) % nv;
    mor_token ref[GEN], got[GEN];
    uint64_t rc[20] = { 0 }, gc[20] = { 0 };
    SCENARIO("%s %s", name, what);
    if (!REQUIRE(plain(m, u, prompt, 6, ref, rc), "%s %s: plain decoding", name, what)) return 0;
    int32_t acc_all = 0;
    static const int32_t drafts[3] = { 3, 1, 8 };
    /* under an emulator (tests/cross-test.sh) one draft count per depth: the same paths, a third the time */
    const int nk = getenv("MOR_TEST_EMULATED") ? 1 : 3;
    for (int32_t d = 1; d <= 2 && d <= nr; d++)
        for (int k = 0; k < nk; k++) {
            int32_t nl = 0, calls = 0;
            const int32_t acc = speculative(m, u, prompt, 6, drafts[k], d, got, &nl, gc, &calls);
            const int same = acc >= 0 && !memcmp(ref, got, sizeof ref);
            CHECK(same && nl == GEN && !memcmp(rc, gc, sizeof rc),
                  "%s %s, %d drafts at depth %d: the same %d tokens, logits bitwise (%d/%d), cells and bytes as "
                  "plain decoding (%d drafts accepted in %d calls)", name, what, drafts[k], d, GEN, nl, GEN, acc,
                  calls);
            if (acc > 0) acc_all += acc;
        }
    return acc_all;
}

static void models(void)
{
    const char *out = getenv("OUT");
    char dir[512], path[800];
    snprintf(dir, sizeof dir, "%s/build/fixtures", out && *out ? out : ".");
    static const struct { const char *file; setup u; const char *what; } cases[] = {
        { "expert_mc3_fix_perturbed.st.gguf", { 0, MOR_ROUTE_THRESHOLD, 0, 0, 1 }, "THRESHOLD greedy" },
        { "expert_mc3_fix_perturbed.st.gguf", { 0, MOR_ROUTE_THRESHOLD, 0, 0, 0 }, "THRESHOLD sampled" },
        { "expert_mc3_fix_perturbed.st.gguf", { 0, MOR_ROUTE_THRESHOLD, 0, 2, 0 }, "THRESHOLD max depth 2" },
        { "expert_mc3_fix_perturbed.st.gguf", { 0, MOR_ROUTE_FORCED, 2, 0, 0 }, "FORCED 2" },
        { "expert_mc3_perturbed.st.gguf", { 0, MOR_ROUTE_THRESHOLD, 0, 0, 0 }, "THRESHOLD sampled" },
        { "expert_cycle2_alpha1_perturbed.st.gguf", { 0, MOR_ROUTE_THRESHOLD, 0, 0, 1 }, "THRESHOLD greedy" },
        { "expert_mc3_bf16_perturbed.st.gguf", { 0, MOR_ROUTE_THRESHOLD, 0, 0, 0 }, "THRESHOLD sampled" },
        { "expert_mc3_kvshare_fix_perturbed.st.gguf", { 0, MOR_ROUTE_THRESHOLD, 0, 0, 0 }, "KV sharing, sampled" },
        { "expert_mc3_kvshare_c0half.gguf", { MOR_KV_DENSE, MOR_ROUTE_THRESHOLD, 0, 0, 0 }, "MOR_KV_DENSE, sampled" },
        { "expert_mc3_kvshare_c0half.gguf", { 0, MOR_ROUTE_THRESHOLD, 0, 0, 1 }, "KV sharing c0 0.5, greedy" },
        { "token_mc3_perturbed.st.gguf", { 0, 0, 0, 0, 0 }, "token-choice sampled" },
        { "token_mc3_perturbed.st.gguf", { 0, 0, 0, 2, 1 }, "token-choice max depth 2, greedy" },
        { "token_mc3_kvshare.gguf", { MOR_KV_DENSE, 0, 0, 0, 0 }, "token-choice MOR_KV_DENSE, sampled" },
        { "gemma2_cycle3.gguf", { 0, 0, 0, 0, 0 }, "relaxed (LoRA), no router, sampled" },
        { "gptneox_cycle2.gguf", { 0, 0, 0, 0, 1 }, "relaxed (LoRA), no router, greedy" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        mor_model *m = NULL;
        if (!REQUIRE(mor_model_load_file(path, NULL, &m) == MOR_OK, "load %s", cases[i].file)) continue;
        compare(m, cases[i].file, &cases[i].u, cases[i].what);
        mor_model_free(m);
    }
    /* the bundled trained model: the drafts are accepted often */
    mor_model *m = NULL;
    if (REQUIRE(mor_model_load_file("models/brown-mor.gguf", NULL, &m) == MOR_OK, "load models/brown-mor.gguf")) {
        const setup g = { 0, MOR_ROUTE_THRESHOLD, 0, 0, 1 }, s = { 0, MOR_ROUTE_THRESHOLD, 0, 0, 0 };
        const int32_t ag = compare(m, "brown-mor", &g, "THRESHOLD greedy");
        const int32_t as = compare(m, "brown-mor", &s, "THRESHOLD sampled");
        CHECK(ag > 0 && as > 0, "brown-mor: drafts accepted (%d greedy, %d sampled, over 6 runs of %d tokens each)",
              ag, as, GEN);
        mor_model_free(m);
    }
}

/* The drafts' draws push tokens into the sampler's history and speculate
 * takes them back (sampler_save/restore): only a repetition penalty reads
 * that history, so only with one on does a wrong restore change tokens.
 * A window shorter than the drafts (last_n 1, 2 < n_draft 3, 8) wraps the
 * ring within one call. brown-mor accepts drafts (so the history that must
 * survive holds accepted drafts too); the fixture rejects more. */
static void penalties(void)
{
    const char *out = getenv("OUT");
    char path[800];
    snprintf(path, sizeof path, "%s/build/fixtures/expert_mc3_fix_perturbed.st.gguf", out && *out ? out : ".");
    static const struct { float penalty; int32_t last_n; } pen[] = { { 1.3f, 64 }, { 1.5f, 2 }, { 0.7f, 1 }, { 2.0f, 5 } };
    static const uint64_t seeds[] = { 1234, 7, 987654321 };
    const char *files[2] = { "models/brown-mor.gguf", path };
    const int n_seeds = getenv("MOR_TEST_EMULATED") ? 1 : 3;   /* emulated (cross-test.sh): one sampled seed */
    for (int f = 0; f < 2; f++) {
        mor_model *m = NULL;
        if (!REQUIRE(mor_model_load_file(files[f], NULL, &m) == MOR_OK, "load %s", files[f])) continue;
        const char *name = f ? "expert_mc3_fix" : "brown-mor";
        int32_t acc = 0;
        for (size_t p = 0; p < sizeof pen / sizeof *pen; p++)
            for (int greedy = 1; greedy >= 0; greedy--)
                for (int k = 0; k < (greedy ? 1 : n_seeds); k++) {
                    const setup u = { 0, MOR_ROUTE_THRESHOLD, 0, 0, greedy };
                    pen_now.penalty = pen[p].penalty; pen_now.last_n = pen[p].last_n; pen_now.seed = seeds[k];
                    char what[160];
                    snprintf(what, sizeof what, "%s, repeat_penalty %.1f, last_n %d, seed %llu",
                             greedy ? "greedy" : "sampled", (double)pen[p].penalty, (int)pen[p].last_n,
                             (unsigned long long)seeds[k]);
                    acc += compare(m, name, &u, what);
                }
        if (!f) CHECK(acc > 0, "%s with penalties: drafts accepted (%d), so restored histories were used", name, acc);
        mor_model_free(m);
    }
    memset(&pen_now, 0, sizeof pen_now);
}

/* The stages with a state the drafts' draws move and speculate puts back
 * (sampler_save/restore): mirostat's mu; DRY's history, XTC's PRNG draws. */
static void llama_stages(void)
{
    mor_model *m = NULL;
    if (!REQUIRE(mor_model_load_file("models/brown-mor.gguf", NULL, &m) == MOR_OK, "load brown-mor")) return;
    int32_t acc = 0;
    for (stages_now = 1; stages_now <= 2; stages_now++)
        for (int greedy = 1; greedy >= 0; greedy--) {
            const setup u = { 0, MOR_ROUTE_THRESHOLD, 0, 0, greedy };
            acc += compare(m, "brown-mor", &u, stages_now == 1 ? (greedy ? "greedy, mirostat 2" : "sampled, mirostat 2")
                           : (greedy ? "greedy, DRY, presence" : "sampled, DRY, presence, XTC, dynamic temperature"));
        }
    stages_now = 0;
    CHECK(acc > 0, "brown-mor with mirostat, DRY, XTC: drafts accepted (%d)", acc);
    mor_model_free(m);
}

static int abort_now(void *ud) { return *(int *)ud; }

/* A failed call changes nothing: cache, sampler, outputs. */
static void failures(void)
{
    const char *out = getenv("OUT");
    char path[800];
    snprintf(path, sizeof path, "%s/build/fixtures/expert_mc3_fix_perturbed.st.gguf", out && *out ? out : ".");
    mor_model *m = NULL;
    if (!REQUIRE(mor_model_load_file(path, NULL, &m) == MOR_OK, "load the expert fixture")) return;
    const int32_t nv = mor_model_n_vocab(m), nr = mor_model_n_recursion(m);
    const setup u = { 0, MOR_ROUTE_THRESHOLD, 0, 0, 0 };
    const mor_token prompt[4] = { 3, 9, 27, 81 % nv };
    /* a full cache: 4 prompt + 3 cells, 5 drafts */
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    int stop = 0;
    cp.n_ctx = 7; cp.n_batch = 16; cp.abort_callback = abort_now; cp.abort_user_data = &stop;
    mor_context *c = NULL;
    mor_sampler *s = make_sampler(&u, prompt, 4), *s2 = make_sampler(&u, prompt, 4);
    if (!CHECK(!mor_context_create(m, &cp, &c) && s && s2, "a context of 7 cells")) goto done;
    mor_router_set_mode(mor_context_router(c), MOR_ROUTE_THRESHOLD, 0);
    CHECK(prefill(c, prompt, 4), "prefill");
    float *before = malloc(sizeof(float) * (size_t)nv);
    memcpy(before, mor_get_logits(c, 3), sizeof(float) * (size_t)nv);
    uint64_t used0 = 0, used1 = 0;
    mor_kv_bytes(mor_context_kv(c), MOR_KV_ALL, NULL, &used0);
    mor_token o[16], t1, t2;
    int32_t n_out = -5, acc = -5;
    mor_status st = mor_speculate(c, 0, 5, 4, 5, 1, s, NULL, o, 16, &n_out, &acc);
    char why[256];
    snprintf(why, sizeof why, "%s", mor_last_error());
    mor_kv_bytes(mor_context_kv(c), MOR_KV_ALL, NULL, &used1);
    CHECK(st == MOR_E_KV_FULL && used0 == used1 && n_out == -5 && mor_kv_seq_pos_max(mor_context_kv(c), 0) == 3 &&
          !memcmp(before, mor_get_logits(c, 3), sizeof(float) * (size_t)nv),
          "a full cache: MOR_E_KV_FULL, cache, outputs and n_out unchanged (%s)", why);
    stop = 1;
    st = mor_speculate(c, 0, 5, 4, 2, 1, s, NULL, o, 16, &n_out, &acc);
    mor_kv_bytes(mor_context_kv(c), MOR_KV_ALL, NULL, &used1);
    CHECK(st == MOR_E_ABORTED && used0 == used1 && !memcmp(before, mor_get_logits(c, 3), sizeof(float) * (size_t)nv),
          "aborted: MOR_E_ABORTED, nothing changed");
    stop = 0;
    /* the sampler drew nothing: it still matches a fresh one */
    mor_sampler_sample(s, before, nv, &t1);
    mor_sampler_sample(s2, before, nv, &t2);
    CHECK(t1 == t2, "the failed calls left the sampler as it was");
    CHECK(mor_speculate(c, 0, -1, 4, 2, 1, s, NULL, o, 16, &n_out, &acc) == MOR_E_OUT_OF_RANGE &&
          mor_speculate(c, 0, 5, 3, 2, 1, s, NULL, o, 16, &n_out, &acc) == MOR_E_POSITION &&
          mor_speculate(c, 0, 5, 4, 2, 0, s, NULL, o, 16, &n_out, &acc) == MOR_E_OUT_OF_RANGE &&
          mor_speculate(c, 0, 5, 4, 2, nr + 1, s, NULL, o, 16, &n_out, &acc) == MOR_E_OUT_OF_RANGE &&
          mor_speculate(c, 0, 5, 4, 2, 1, NULL, NULL, o, 16, &n_out, &acc) == MOR_E_INVALID_ARG &&
          mor_speculate(c, 0, 5, 4, 2, 1, s, NULL, o, 0, &n_out, &acc) == MOR_E_INVALID_ARG &&
          mor_speculate(c, 3, 5, 4, 2, 1, s, NULL, o, 16, &n_out, &acc) == MOR_E_OUT_OF_RANGE &&
          mor_speculate(NULL, 0, 5, 4, 2, 1, s, NULL, o, 16, &n_out, &acc) == MOR_E_INVALID_ARG,
          "bad arguments: token, position, draft depth, sampler, n_max, sequence, context");
    /* a fitting call: n_draft reduced to the cells left */
    st = mor_speculate(c, 0, 5, 4, 8, 1, s, NULL, o, 3, &n_out, &acc);
    CHECK(st == MOR_OK && n_out >= 1 && n_out <= 3, "n_max 3 within 7 cells: %d tokens", n_out);
    mor_router_set_mode(mor_context_router(c), MOR_ROUTE_TOPK, 0);
    CHECK(mor_speculate(c, 0, o[n_out - 1], 4 + n_out, 1, 1, s, NULL, o, 1, &n_out, &acc) == MOR_E_UNSUPPORTED,
          "TOPK routing refused");
    free(before);
    mor_context_free(c);
    cp.n_ctx = 64; cp.abort_callback = NULL; cp.flags = MOR_CTX_CAPTURE_HIDDEN;
    c = NULL;
    if (CHECK(!mor_context_create(m, &cp, &c), "a context capturing hidden states"))
        CHECK(mor_speculate(c, 0, 5, 0, 2, 1, s, NULL, o, 4, &n_out, &acc) == MOR_E_UNSUPPORTED,
              "hidden-state capture refused");
done:
    mor_context_free(c);
    mor_sampler_free(s); mor_sampler_free(s2);
    mor_model_free(m);
}

int main(void)
{
    ref_logits = malloc(sizeof(float) * (size_t)GEN * MAXV);
    if (!ref_logits) return 1;
    models();
    penalties();
    llama_stages();
    failures();
    free(ref_logits);
    return check_done();
}
