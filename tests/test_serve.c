/* test_serve.c - the server (serve.c) on converted fixtures:
 *  - SERIAL, SEQUENCE and DEPTHWISE give the tokens, depths and logits
 *    (bitwise) of a plain per-request mor_decode loop (THRESHOLD, or the
 *    token-choice router), for 1, 7 and 32 concurrent requests of different
 *    prompt and output lengths, half submitted while stepping;
 *  - the same under a KV budget so small that requests run on cells others
 *    freed, out of position order (also on random-weight F32 and Q8_0
 *    models), and with prompts longer than n_batch, prefilled in chunks
 *    across steps (n_batch 4, 3, 1; cancelled before, between and during
 *    the chunks);
 *  - confidence exits: a threshold no token reaches changes nothing, one
 *    every token reaches equals a depth cap of 1, and the skipped
 *    recursions then cache nothing (the missing-KV rule); outputs do not
 *    depend on the other requests;
 *  - KV sharing with a first capacity below 1 (tokens that skip recursion 0
 *    still cache their K/V there): every mode equals mor_decode;
 *  - MOR_KV_DENSE on KV-sharing models (expert with a first capacity below 1,
 *    token-choice): every mode equals mor_decode under it (rows the router
 *    dropped run on for their K/V only), confidence exits are refused;
 *  - context shift (MOR_SERVE_CONTEXT_SHIFT, recursion-wise and shared KV):
 *    requests longer than their sequence's context (n_ctx_seq) in every
 *    mode, 4 at once, prompts in chunks, speculating: tokens, depths and
 *    logits bitwise a plain context's with the prompt truncated and the
 *    sequence shifted by hand (mor_kv_seq_rm + mor_kv_seq_add), n_keep
 *    honoured, only n_keep cells reused afterwards; requests that fit are
 *    unchanged; without the flag they are refused as before;
 *  - cancel, the KV budget queue, misuse statuses;
 *  - all of the fixtures' checks again on relaxed copies of two of them (an
 *    unfolded LoRA delta on every projection of every looped layer): rows at
 *    different recursions share the shared weight's product, each with its
 *    own delta, and must get bit for bit what they get alone;
 *  - relaxed recursive Gemma 2 and GPT-NeoX models (other families, no
 *    router): every mode equals mor_decode bit for bit, with rows of
 *    several recursions in one layer call (Gemma 2's tied layers differ in
 *    their sliding window, which each row takes from its own layer). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "context.h"
#include "kernels.h"
#include "mor.h"
#include "serve.h"
#include "synth_model.h"

#define NREQ 32
#define MAXT 16
#define MOR_MAX_DEPTHS 17

typedef struct {
    int32_t n_prompt, max_tokens, n_stop;
    mor_token prompt[16], stop[1];
    mor_sampler_params sp;
    /* reference */
    int32_t n_out, depth[MAXT];
    mor_token out[MAXT];
    float *logits;   /* [MAXT][n_vocab] */
} request;

static char fixture_dir[512];
static int lockstep;   /* serve_set_lockstep for the next servers */
static int finish_every = 1;   /* serve_set_finish_every for the next servers */
static int drain;              /* serve_set_drain for the next servers */
static uint32_t budget = 1024; /* mor_server_params.n_ctx of serve_and_compare's servers */
static uint32_t nbatch = 128;  /* mor_server_params.n_batch of the next servers */
static uint32_t sflags;        /* mor_server_params.flags of the next servers */
static int32_t kvmode;         /* kv_mode of the reference contexts and the next servers */
static uint32_t cflags;        /* mor_context_params.flags of the reference contexts */
static mor_server *cur;        /* the server serve_and_compare runs */
static int32_t max_descents;   /* most cells of one sequence out of position order seen by hook */
static request reqs[NREQ];
static int32_t n_vocab;
static int32_t spec_n, spec_d = 1;         /* mor_server_set_speculate of the requests submitted (0: off) */
static int64_t spec_drafted, spec_accepted; /* what serve_and_compare's requests drafted and accepted */
/* what the server produced */
static float *got_logits[NREQ];
static int32_t got_n[NREQ];

static void hook(void *ud, mor_request_id id, const float *logits, int32_t nv)
{
    int32_t *map = ud, r = map[id];
    if (got_n[r] < MAXT) memcpy(got_logits[r] + (size_t)got_n[r] * nv, logits, sizeof(float) * (size_t)nv);
    got_n[r]++;
    if (!cur) return;
    /* how shuffled the cache is: a sequence's positions that descend in cell order (unique first layer) */
    const mor_kv_cache *kv = mor_context_kv(serve_context(cur));
    const kv_layer *L = &kv->layers[0];
    for (int32_t sq = 0; sq < kv->n_seq_max; sq++) {
        int32_t last = -1, desc = 0;
        for (int32_t c = 0; c < L->n_hi; c++)
            if (L->seq[c] == sq) { desc += L->pos[c] < last; last = L->pos[c]; }
        if (desc > max_descents) max_descents = desc;
    }
}

static void make_requests(int32_t nv)
{
    for (int32_t i = 0; i < NREQ; i++) {
        request *q = &reqs[i];
        q->n_prompt = 1 + (i * 5) % 9;
        q->max_tokens = 2 + (i * 7) % 11;
        for (int32_t t = 0; t < q->n_prompt; t++) q->prompt[t] = (i * 31 + t * 17 + 3) % nv;
        MOR_SAMPLER_PARAMS_INIT(&q->sp);
        q->sp.seed = 1000 + (uint64_t)i;
        if (i % 2) q->sp.temperature = 0;   /* greedy */
        q->n_stop = i % 5 == 0;
        q->stop[0] = (i * 13) % nv;
    }
}

/* The reference: each request alone, prompt then one token per mor_decode. */
static int reference(mor_model *m, int32_t mode, int32_t max_depth)
{
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 64; cp.n_batch = 32; cp.kv_mode = kvmode; cp.flags = cflags;
    for (int32_t i = 0; i < NREQ; i++) {
        request *q = &reqs[i];
        mor_context *c = NULL; mor_batch *b = NULL; mor_sampler *s = NULL;
        if (mor_context_create(m, &cp, &c) || mor_batch_create(32, &b) || mor_sampler_create(&q->sp, &s)) return 0;
        if (mode) mor_router_set_mode(mor_context_router(c), mode, 0);
        if (max_depth) mor_router_set_max_depth(mor_context_router(c), max_depth);
        for (int32_t t = 0; t < q->n_prompt; t++) {
            mor_batch_add(b, q->prompt[t], t, 0, t == q->n_prompt - 1);
            mor_sampler_accept(s, q->prompt[t]);
        }
        q->n_out = 0;
        for (;;) {
            if (mor_decode(c, b)) return 0;
            int32_t depths[32];
            mor_router_get_depths(mor_context_router(c), depths, 32);
            const float *lg = mor_get_logits(c, mor_batch_size(b) - 1);
            memcpy(q->logits + (size_t)q->n_out * n_vocab, lg, sizeof(float) * (size_t)n_vocab);
            mor_token t;
            mor_sampler_sample(s, lg, n_vocab, &t);
            q->out[q->n_out] = t; q->depth[q->n_out] = depths[mor_batch_size(b) - 1];
            q->n_out++;
            if (q->n_out >= q->max_tokens || (q->n_stop && t == q->stop[0])) break;
            mor_batch_clear(b);
            mor_batch_add(b, t, q->n_prompt + q->n_out - 1, 0, 1);
        }
        mor_batch_free(b); mor_context_free(c); mor_sampler_free(s);
    }
    return 1;
}

static mor_server *make_server(mor_model *m, int32_t mode, uint32_t n_slots, uint32_t n_ctx,
                               int32_t exit_mode, float thr)
{
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    p.mode = mode; p.n_slots = n_slots; p.n_ctx = n_ctx; p.n_batch = nbatch; p.n_threads = 2;
    p.exit_mode = exit_mode; p.exit_threshold = thr; p.kv_mode = kvmode; p.flags = sflags;
    mor_server *s = NULL;
    mor_status st = mor_server_create(m, &p, &s);
    REQUIRE(st == MOR_OK, "server create: %s %s", mor_status_str(st), mor_last_error());
    serve_set_lockstep(s, lockstep);
    serve_set_finish_every(s, finish_every);
    serve_set_drain(s, drain);
    return s;
}

/* mor_server_submit, then speculation as spec_n and spec_d say. */
static mor_status sub(mor_server *s, const mor_token *prompt, int32_t n, const mor_sampler_params *sp, int32_t max_tokens,
                      const mor_token *stop, int32_t n_stop, mor_request_id *id)
{
    mor_status st = mor_server_submit(s, prompt, n, sp, max_tokens, stop, n_stop, id);
    if (!st && spec_n) st = mor_server_set_speculate(s, *id, spec_n, spec_d);
    return st;
}

/* Submit request i; ids[i] its id, map[id] = i. */
static mor_status submit(mor_server *s, int32_t i, mor_request_id *ids, int32_t *map)
{
    const request *q = &reqs[i];
    mor_status st = sub(s, q->prompt, q->n_prompt, &q->sp, q->max_tokens, q->stop, q->n_stop, &ids[i]);
    if (!st) map[ids[i]] = i;
    return st;
}

/* Serve requests [0, n) with n_slots slots, half submitted up front and the
 * rest one per step; compare with the reference. */
static void serve_and_compare(mor_model *m, const char *what, int32_t mode, int32_t n, int32_t n_slots,
                              int32_t exit_mode, float thr, int32_t max_depth)
{
    SCENARIO("%s", what);
    mor_server *s = make_server(m, mode, (uint32_t)n_slots, budget, exit_mode, thr);
    if (!s) return;
    cur = s;
    if (max_depth) mor_router_set_max_depth(mor_server_router(s), max_depth);
    int32_t map[NREQ], ids[NREQ], next = 0, pend = 1, steps = 0;
    mor_status st = MOR_OK;
    serve_set_logits_hook(s, hook, map);
    for (int32_t i = 0; i < n; i++) got_n[i] = 0;
    while (next < n && next < (n + 1) / 2 && !st) st = submit(s, next++, ids, map);
    while ((pend || next < n) && !st && steps < 10000) {
        if (next < n && (st = submit(s, next++, ids, map))) break;
        st = mor_server_step(s, &pend);
        steps++;
    }
    if (!REQUIRE(st == MOR_OK, "%s: submits and steps (%s %s)", what, mor_status_str(st), mor_last_error())) {
        cur = NULL; mor_server_free(s); return;
    }
    int tok_ok = 1, dep_ok = 1, state_ok = 1, same = 1;
    double maxd = 0;
    for (int32_t i = 0; i < n; i++) {
        mor_token out[MAXT]; int32_t dep[MAXT], no = -1;
        int64_t dr = 0, ac = 0;
        mor_server_get_tokens(s, ids[i], out, dep, MAXT, &no);
        state_ok &= mor_server_request_speculation(s, ids[i], &dr, &ac) == MOR_OK && ac <= dr && (spec_n || !dr);
        spec_drafted += dr; spec_accepted += ac;
        state_ok &= mor_server_request_state(s, ids[i]) == MOR_REQ_DONE;
        if (no != reqs[i].n_out || got_n[i] != no) { tok_ok = 0; continue; }
        for (int32_t t = 0; t < no; t++) {
            tok_ok &= out[t] == reqs[i].out[t];
            dep_ok &= dep[t] == reqs[i].depth[t];
            double md = check_maxdiff(got_logits[i] + (size_t)t * n_vocab, reqs[i].logits + (size_t)t * n_vocab, n_vocab);
            if (md > maxd) maxd = md;
            same &= !memcmp(got_logits[i] + (size_t)t * n_vocab, reqs[i].logits + (size_t)t * n_vocab,
                            sizeof(float) * (size_t)n_vocab);
        }
    }
    /* the scenario's one claim: served, each request is the per-request loop */
    CHECK(state_ok && tok_ok && dep_ok && same, "%s: every request done with the per-request mor_decode loop's "
          "tokens, depths and logits, bitwise (requests done%s: %s, tokens: %s, depths: %s, logits: max diff %.3g)",
          what, spec_n ? " and drafts counted" : "", state_ok ? "yes" : "NO", tok_ok ? "equal" : "DIFFER",
          dep_ok ? "equal" : "DIFFER", maxd);
    cur = NULL;
    mor_server_free(s);
}

static const char *mode_name[] = { "SERIAL", "SEQUENCE", "DEPTHWISE" };

static void misuse(mor_model *m)
{
    SCENARIO("misuse");
    mor_server *s = NULL;
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    CHECK(mor_server_create(NULL, &p, &s) == MOR_E_INVALID_ARG && !s, "create: NULL model");
    p.size = 3;
    CHECK(mor_server_create(m, &p, &s) == MOR_E_ABI, "create: bad params size");
    MOR_SERVER_PARAMS_INIT(&p);
    p.mode = 7;
    CHECK(mor_server_create(m, &p, &s) == MOR_E_INVALID_ARG, "create: unknown mode");
    p.mode = MOR_SERVE_SEQUENCE; p.exit_mode = MOR_EXIT_MARGIN;
    CHECK(mor_server_create(m, &p, &s) == MOR_E_UNSUPPORTED, "create: confidence exits need DEPTHWISE");
    p.mode = MOR_SERVE_DEPTHWISE; p.exit_mode = MOR_EXIT_LEARNED; p.exit_threshold = 0.5f;
    CHECK(mor_server_create(m, &p, &s) == MOR_E_UNSUPPORTED && !s, "create: the learned exit needs an exit gate");
    MOR_SERVER_PARAMS_INIT(&p);
    p.flags = 1u << 5;
    CHECK(mor_server_create(m, &p, &s) == MOR_E_INVALID_ARG && !s, "create: unknown flags");
    s = make_server(m, MOR_SERVE_DEPTHWISE, 2, 64, 0, 0);
    if (!s) return;
    mor_token pr[3] = { 1, 2, 3 }, bad = n_vocab;
    mor_request_id id = -1;
    CHECK(mor_server_submit(s, NULL, 3, NULL, 4, NULL, 0, &id) == MOR_E_INVALID_ARG, "submit: NULL prompt");
    CHECK(mor_server_submit(s, pr, 0, NULL, 4, NULL, 0, &id) == MOR_E_INVALID_ARG, "submit: empty prompt");
    CHECK(mor_server_submit(s, pr, 3, NULL, 0, NULL, 0, &id) == MOR_E_INVALID_ARG, "submit: max_tokens 0");
    CHECK(mor_server_submit(s, &bad, 1, NULL, 4, NULL, 0, &id) == MOR_E_OUT_OF_RANGE, "submit: bad token");
    CHECK(mor_server_submit(s, pr, 3, NULL, 4, &bad, 1, &id) == MOR_E_OUT_OF_RANGE, "submit: bad stop token");
    CHECK(mor_server_submit(s, pr, 3, NULL, 62, NULL, 0, &id) == MOR_E_KV_FULL, "submit: larger than the KV budget");
    mor_sampler_params sp; MOR_SAMPLER_PARAMS_INIT(&sp); sp.top_p = -1;
    CHECK(mor_server_submit(s, pr, 3, &sp, 4, NULL, 0, &id) == MOR_E_INVALID_ARG, "submit: bad sampler params");
    CHECK(id == -1, "failed submits give no id");
    const mor_status est = mor_router_set_exit(mor_server_router(s), MOR_EXIT_MARGIN, 0.5f);
    router_settings rs;
    router_get_settings(mor_server_router(s), &rs);
    CHECK(est == MOR_E_UNSUPPORTED && rs.exit_mode == MOR_EXIT_NONE, "a server's router: its exits are its params'");
    CHECK(mor_server_submit(s, pr, 3, NULL, 4, NULL, 0, &id) == MOR_OK && id == 0, "submit ok");
    CHECK(mor_server_release(s, id) == MOR_E_INVALID_ARG, "release: still queued");
    CHECK(mor_server_cancel(s, 99) == MOR_E_OUT_OF_RANGE, "cancel: unknown id");
    CHECK(mor_server_request_state(s, 99) == MOR_E_OUT_OF_RANGE, "state: unknown id");
    int32_t n = -1; mor_token out[4];
    CHECK(mor_server_step(s, NULL) == MOR_OK, "one step");
    CHECK(mor_server_get_tokens(s, id, out, NULL, 4, NULL) == MOR_E_INVALID_ARG, "get_tokens: NULL count");
    if (mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT) {
        mor_router_set_mode(mor_server_router(s), MOR_ROUTE_TOPK, 0);
        CHECK(mor_server_step(s, NULL) == MOR_E_UNSUPPORTED, "step: TOPK is not causal");
        mor_router_set_mode(mor_server_router(s), MOR_ROUTE_THRESHOLD, 0);
    }
    CHECK(mor_server_run(s) == MOR_OK, "run to the end");
    CHECK(mor_server_get_tokens(s, id, out, NULL, 0, &n) == MOR_E_BUFFER_TOO_SMALL && n == 4, "get_tokens: too small gives the count");
    CHECK(mor_server_release(s, id) == MOR_OK && mor_server_request_state(s, id) < 0, "release a finished request");
    CHECK(mor_server_step(NULL, NULL) == MOR_E_INVALID_ARG, "step: NULL");
    mor_server_free(s);
    mor_server_free(NULL);
}

/* Cancel (queued and running) and the KV budget: only as many requests run
 * as their reserved cells allow; the others wait, then run unchanged. */
static void cancel_and_budget(mor_model *m, int32_t mode)
{
    /* requests 0..5 need n_prompt + max_tokens cells: 4 slots but 30 cells */
    SCENARIO("%s: cancel and the KV budget", mode_name[mode]);
    mor_server *s = make_server(m, mode, 4, 30, 0, 0);
    if (!s) return;
    int32_t map[NREQ], ids[6];
    serve_set_logits_hook(s, hook, map);
    for (int32_t i = 0; i < 6; i++) {
        got_n[i] = 0;
        mor_server_submit(s, reqs[i].prompt, reqs[i].n_prompt, &reqs[i].sp, reqs[i].max_tokens, reqs[i].stop,
                          reqs[i].n_stop, &ids[i]);
        map[ids[i]] = i;
    }
    mor_server_step(s, NULL);
    int32_t running = 0, cells = 0;
    for (int32_t i = 0; i < 6; i++)
        if (mor_server_request_state(s, ids[i]) == MOR_REQ_RUNNING) { running++; cells += reqs[i].n_prompt + reqs[i].max_tokens; }
    CHECK(running >= 1 && running < 4 && cells <= 30, "%s: the KV budget admits %d requests (%d cells of 30), the rest queue",
          mode_name[mode], running, cells);
    mor_server_cancel(s, ids[1]);   /* running */
    mor_server_cancel(s, ids[5]);   /* queued */
    CHECK(mor_server_request_state(s, ids[1]) == MOR_REQ_CANCELLED && mor_server_request_state(s, ids[5]) == MOR_REQ_CANCELLED,
          "%s: cancelled", mode_name[mode]);
    CHECK(mor_server_cancel(s, ids[5]) == MOR_OK, "%s: cancel twice is a no-op", mode_name[mode]);
    CHECK(mor_server_run(s) == MOR_OK, "%s: run after cancel", mode_name[mode]);
    int ok = 1;
    for (int32_t i = 0; i < 5; i++) {
        if (i == 1) continue;
        mor_token out[MAXT]; int32_t no = 0;
        mor_server_get_tokens(s, ids[i], out, NULL, MAXT, &no);
        ok &= no == reqs[i].n_out && !memcmp(out, reqs[i].out, sizeof(mor_token) * (size_t)no);
    }
    int32_t n5 = -1;
    mor_server_get_tokens(s, ids[5], NULL, NULL, 0, &n5);
    CHECK(ok && n5 == 0, "%s: the others are unchanged by the queue and the cancellations", mode_name[mode]);
    mor_server_free(s);
}

/* Confidence exits and the missing-KV rule. */
static void confidence_exits(mor_model *m, int32_t kvshared)
{
    /* a threshold no token reaches: the router's own exits only */
    serve_and_compare(m, "SATURATION threshold 2 (never)", MOR_SERVE_DEPTHWISE, 7, 7, MOR_EXIT_SATURATION, 2.0f, 0);
    serve_and_compare(m, "MARGIN threshold 2 (never)", MOR_SERVE_DEPTHWISE, 7, 7, MOR_EXIT_MARGIN, 2.0f, 0);
    /* one every token reaches before recursion 1: a depth cap of 1 */
    for (int32_t i = 0; i < NREQ; i++) reqs[i].logits = reqs[i].logits;
    if (!reference(m, mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT ? MOR_ROUTE_THRESHOLD : 0, 1)) {
        REQUIRE(0, "reference with max depth 1");
        return;
    }
    serve_and_compare(m, "SATURATION threshold -2 (always) = depth cap 1", MOR_SERVE_DEPTHWISE, 7, 7,
                      MOR_EXIT_SATURATION, -2.0f, 0);
    serve_and_compare(m, "MARGIN threshold -1 (always) = depth cap 1", MOR_SERVE_DEPTHWISE, 7, 7,
                      MOR_EXIT_MARGIN, -1.0f, 0);
    /* missing KV: the recursions a token skipped hold nothing of it */
    SCENARIO("missing KV (%s)", kvshared ? "shared" : "recursion-wise");
    mor_server *s = make_server(m, MOR_SERVE_DEPTHWISE, 4, 256, MOR_EXIT_SATURATION, -2.0f);
    if (!s) return;
    mor_request_id id;
    mor_server_submit(s, reqs[3].prompt, reqs[3].n_prompt, &reqs[3].sp, 12, NULL, 0, &id);
    for (int k = 0; k < 5; k++) mor_server_step(s, NULL);
    mor_kv_cache *kv = mor_context_kv(serve_context(s));
    int64_t c0 = mor_kv_n_cells_used(kv, 0), c1 = mor_kv_n_cells_used(kv, 1), c2 = mor_kv_n_cells_used(kv, 2);
    CHECK(c0 > 0 && c1 == 0 && c2 == 0, "missing KV (%s): recursion 0 caches %lld cells, 1 and 2 none (%lld, %lld)",
          kvshared ? "shared" : "recursion-wise", (long long)c0, (long long)c1, (long long)c2);
    mor_server_free(s);
    /* the exits of a request do not depend on the others (a middling threshold) */
    float thr = 0.9f;
    int32_t depth1[MAXT], n1 = 0, depth7[MAXT], n7 = 0, ids7[7];
    mor_token out1[MAXT], out7[MAXT];
    SCENARIO("saturation exits alone and among 7");
    s = make_server(m, MOR_SERVE_DEPTHWISE, 1, 512, MOR_EXIT_SATURATION, thr);
    if (!s) return;
    mor_server_submit(s, reqs[6].prompt, reqs[6].n_prompt, &reqs[6].sp, reqs[6].max_tokens, NULL, 0, &id);
    mor_server_run(s);
    mor_server_get_tokens(s, id, out1, depth1, MAXT, &n1);
    mor_server_free(s);
    s = make_server(m, MOR_SERVE_DEPTHWISE, 7, 512, MOR_EXIT_SATURATION, thr);
    if (!s) return;
    for (int32_t i = 0; i < 7; i++)
        mor_server_submit(s, reqs[i].prompt, reqs[i].n_prompt, &reqs[i].sp, reqs[i].max_tokens, NULL, 0, &ids7[i]);
    mor_server_run(s);
    mor_server_get_tokens(s, ids7[6], out7, depth7, MAXT, &n7);
    mor_server_free(s);
    CHECK(n1 == n7 && n1 > 0 && !memcmp(out1, out7, sizeof(mor_token) * (size_t)n1) &&
          !memcmp(depth1, depth7, sizeof(int32_t) * (size_t)n1),
          "saturation exits: a request's tokens and depths alone equal those among 7");
}

/* MOR_KV_DENSE (the official code's path without its sharing cache): every
 * recursion runs every row for its K/V, the rows the router dropped included
 * (DEPTHWISE: K/V-only passes); every mode equals mor_decode under it, its
 * outputs differ from the trained semantics', and confidence exits, which
 * skip recursions, are refused with it. Leaves the trained reference. */
static void small_budget(mor_model *m, const char *name);

static void dense_serving(mor_model *m, const char *name)
{
    char what[200];
    float *trained = malloc(sizeof(float) * MAXT * (size_t)n_vocab);
    if (trained) memcpy(trained, reqs[1].logits, sizeof(float) * MAXT * (size_t)n_vocab);
    const int32_t n1 = reqs[1].n_out;
    const int expert = mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT;
    kvmode = MOR_KV_DENSE;
    if (REQUIRE(trained && reference(m, expert ? MOR_ROUTE_THRESHOLD : 0, 0), "%s: dense reference decode", name)) {
        double dd = check_maxdiff(trained, reqs[1].logits, n_vocab * (n1 < reqs[1].n_out ? n1 : reqs[1].n_out));
        CHECK(dd > 1e-3, "%s: MOR_KV_DENSE changes the logits (by up to %.3g)", name, dd);
        for (int mode = 0; mode < 3; mode++) {
            snprintf(what, sizeof what, "%s, MOR_KV_DENSE: %s 32 requests in 9 slots", name, mode_name[mode]);
            serve_and_compare(m, what, mode, 32, 9, 0, 0, 0);
        }
        lockstep = 1;
        snprintf(what, sizeof what, "%s, MOR_KV_DENSE: SEQUENCE lockstep 7 requests", name);
        serve_and_compare(m, what, MOR_SERVE_SEQUENCE, 7, 7, 0, 0, 0);
        lockstep = 0;
        drain = 1;
        snprintf(what, sizeof what, "%s, MOR_KV_DENSE: DEPTHWISE with drain, 7 requests", name);
        serve_and_compare(m, what, MOR_SERVE_DEPTHWISE, 7, 7, 0, 0, 0);
        drain = 0;
        snprintf(what, sizeof what, "%s, MOR_KV_DENSE", name);
        small_budget(m, what);
        if (expert) {
            mor_server_params p;
            MOR_SERVER_PARAMS_INIT(&p);
            p.kv_mode = MOR_KV_DENSE; p.exit_mode = MOR_EXIT_MARGIN;
            mor_server *s = NULL;
            CHECK(mor_server_create(m, &p, &s) == MOR_E_UNSUPPORTED && !s, "%s: confidence exits with MOR_KV_DENSE: "
                  "MOR_E_UNSUPPORTED (%s)", name, mor_last_error());
        }
    }
    kvmode = 0;
    REQUIRE(reference(m, expert ? MOR_ROUTE_THRESHOLD : 0, 0), "%s: trained reference again", name);
    free(trained);
}

/* A KV budget of 48 cells: two or three requests run at once and each new
 * one takes cells others freed, so its cells are out of position order (and
 * in another order in every mode); outputs are still bitwise each request's
 * alone (attention sums in position order). */
static void small_budget(mor_model *m, const char *name)
{
    budget = 48;
    max_descents = 0;
    char what[160];
    for (int mode = 0; mode < 3; mode++) {
        snprintf(what, sizeof what, "%s %s 32 requests, KV budget 48", name, mode_name[mode]);
        serve_and_compare(m, what, mode, 32, 8, 0, 0, 0);
    }
    lockstep = 1;
    snprintf(what, sizeof what, "%s SEQUENCE lockstep 32 requests, KV budget 48", name);
    serve_and_compare(m, what, MOR_SERVE_SEQUENCE, 32, 8, 0, 0, 0);
    lockstep = 0;
    budget = 1024;
    CHECK(max_descents > 0, "%s: with a budget of 48 cells, requests ran on cells out of position order "
          "(up to %d descents in one sequence)", name, max_descents);
}

/* Prompts (up to 9 tokens) longer than n_batch are prefilled in chunks
 * across steps: same outputs, bitwise, in every mode; a request cancelled
 * between or during its chunks leaves nothing in the cache. */
static void chunked_prefill(mor_model *m, const char *name)
{
    static const uint32_t nbs[3] = { 4, 3, 1 };
    char what[200];
    for (int k = 0; k < 3; k++) {
        nbatch = nbs[k];
        for (int mode = 0; mode < 3; mode++) {
            snprintf(what, sizeof what, "%s %s 32 requests, prompts of 1-9 tokens, n_batch %u", name, mode_name[mode], nbatch);
            serve_and_compare(m, what, mode, 32, 8, 0, 0, 0);
        }
    }
    /* n_batch 4 with the other switches: lockstep, finishing every 3 steps, drain, a 48-cell budget */
    static const struct { const char *what; int32_t mode, lockstep, finish_every, drain; uint32_t budget; } v[4] = {
        { "SEQUENCE lockstep", MOR_SERVE_SEQUENCE, 1, 1, 0, 1024 },
        { "DEPTHWISE finishing every 3 steps", MOR_SERVE_DEPTHWISE, 0, 3, 0, 1024 },
        { "DEPTHWISE with drain", MOR_SERVE_DEPTHWISE, 0, 1, 1, 1024 },
        { "DEPTHWISE KV budget 48", MOR_SERVE_DEPTHWISE, 0, 1, 0, 48 },
    };
    nbatch = 4;
    for (int k = 0; k < 4; k++) {
        lockstep = v[k].lockstep; finish_every = v[k].finish_every; drain = v[k].drain; budget = v[k].budget;
        snprintf(what, sizeof what, "%s %s 32 requests, n_batch 4", name, v[k].what);
        serve_and_compare(m, what, v[k].mode, 32, 8, 0, 0, 0);
    }
    lockstep = 0; finish_every = 1; drain = 0; budget = 1024;
    /* cancel request 7 (9 prompt tokens) after 0-4 steps, i.e. before, between and during its chunks */
    nbatch = 2;
    sflags = MOR_SERVE_NO_PROMPT_REUSE;   /* no cell kept for reuse: none may be left */
    for (int mode = 1; mode < 3; mode++) {
        int ok = 1;
        SCENARIO("%s %s: a chunked prompt cancelled", name, mode_name[mode]);
        for (int32_t at = 0; at <= 4; at++) {
            mor_server *s = make_server(m, mode, 4, 256, 0, 0);
            if (!s) return;
            mor_request_id id[3] = { -1, -1, -1 };
            for (int32_t i = 0; i < 3; i++) {
                const request *q = &reqs[i == 2 ? 7 : i];
                ok &= mor_server_submit(s, q->prompt, q->n_prompt, &q->sp, q->max_tokens, q->stop, q->n_stop, &id[i]) == MOR_OK;
            }
            for (int32_t k = 0; k < at; k++) ok &= mor_server_step(s, NULL) == MOR_OK;
            ok &= mor_server_cancel(s, id[2]) == MOR_OK && mor_server_run(s) == MOR_OK;
            int32_t n2 = -1;
            mor_server_get_tokens(s, id[2], NULL, NULL, 0, &n2);
            ok &= reqs[7].n_prompt == 9 && mor_server_request_state(s, id[2]) == MOR_REQ_CANCELLED && n2 == 0;
            for (int32_t i = 0; i < 2; i++) {
                mor_token out[MAXT]; int32_t no = 0;
                mor_server_get_tokens(s, id[i], out, NULL, MAXT, &no);
                ok &= no == reqs[i].n_out && !memcmp(out, reqs[i].out, sizeof(mor_token) * (size_t)no);
            }
            ok &= mor_kv_n_cells_used(mor_context_kv(serve_context(s)), MOR_KV_ALL) == 0;
            mor_server_free(s);
        }
        CHECK(ok, "%s %s n_batch 2: a 9-token prompt cancelled after 0-4 steps (before, between, during its "
              "chunks) ends with no tokens, the others unchanged, no cell left", name, mode_name[mode]);
    }
    sflags = 0;
    nbatch = 128;
}

/* One request on server s (stepped to the end): its tokens, and the prompt
 * tokens it reused; 0 if anything failed. */
static int run_one(mor_server *s, const mor_token *prompt, int32_t n, const mor_sampler_params *sp, int32_t max_tokens,
                   mor_token *out, int32_t *n_out, int32_t *cached)
{
    mor_request_id id;
    if (sub(s, prompt, n, sp, max_tokens, NULL, 0, &id) || mor_server_run(s)) return 0;
    *cached = mor_server_request_cached(s, id);
    return mor_server_get_tokens(s, id, out, NULL, MAXT, n_out) == MOR_OK && mor_server_release(s, id) == MOR_OK;
}

/* The tokens of one request on a fresh server without prompt reuse (max_depth: the router's cap, 0 none). */
static int fresh(mor_model *m, int32_t mode, int32_t max_depth, const mor_token *prompt, int32_t n,
                 const mor_sampler_params *sp, int32_t max_tokens, mor_token *out, int32_t *n_out)
{
    sflags = MOR_SERVE_NO_PROMPT_REUSE;
    mor_server *s = make_server(m, mode, 2, 256, 0, 0);
    sflags = 0;
    const int32_t sn = spec_n;
    spec_n = 0;   /* the reference: plain steps */
    int32_t cached = -1;
    int ok = s && (!max_depth || mor_router_set_max_depth(mor_server_router(s), max_depth) == MOR_OK) &&
             run_one(s, prompt, n, sp, max_tokens, out, n_out, &cached) && cached == 0;
    spec_n = sn;
    mor_server_free(s);
    return ok;
}

/* Prompt reuse: a request whose prompt starts with what a free slot keeps
 * decodes only the rest and gives the tokens of a fresh slot; a prefix kept
 * under other router settings is not reused; kept cells make way for a
 * request that needs them. */
static void prompt_reuse(mor_model *m, const char *name)
{
    for (int mode = 1; mode < 3; mode++) {
        const request *a = &reqs[8];   /* 5 prompt tokens */
        mor_token pa[16], pb[32], pd[32], oa[MAXT], ob[MAXT], oc[MAXT], od[MAXT], oe[MAXT], ref[MAXT];
        int32_t na = a->n_prompt, nb = 0, n_oa = 0, n_ob = 0, n_oc = 0, n_od = 0, n_oe = 0, n_ref = 0;
        int32_t ca = -1, cb = -1, cc = -1, cd = -1, ce = -1;
        memcpy(pa, a->prompt, sizeof(mor_token) * (size_t)na);
        SCENARIO("%s %s: prompt reuse", name, mode_name[mode]);
        mor_server *s = make_server(m, mode, 2, 256, 0, 0);
        int ok = s && run_one(s, pa, na, &a->sp, 6, oa, &n_oa, &ca) && ca == 0 && n_oa == 6;
        /* B: A's prompt, A's tokens that entered the cache (all but the last), three more */
        memcpy(pb, pa, sizeof(mor_token) * (size_t)na);
        nb = na;
        for (int32_t i = 0; ok && i < n_oa - 1; i++) pb[nb++] = oa[i];
        for (int32_t i = 0; i < 3; i++) pb[nb++] = (mor_token)((7 + 13 * i) % n_vocab);
        ok = ok && run_one(s, pb, nb, &reqs[1].sp, 5, ob, &n_ob, &cb);
        CHECK(ok && cb == na + n_oa - 1, "%s %s reuse: a prompt continuing a finished request reuses its prompt and the "
              "tokens it generated (%d of %d)", name, mode_name[mode], cb, nb);
        ok = ok && fresh(m, mode, 0, pb, nb, &reqs[1].sp, 5, ref, &n_ref);
        CHECK(ok && n_ref == n_ob && !memcmp(ref, ob, sizeof(mor_token) * (size_t)n_ob),
              "%s %s reuse: its tokens are a fresh slot's", name, mode_name[mode]);
        /* D: B's prompt but its last token */
        memcpy(pd, pb, sizeof(mor_token) * (size_t)nb);
        pd[nb - 1] = (mor_token)((pb[nb - 1] + 1) % n_vocab);
        ok = ok && run_one(s, pd, nb, &reqs[3].sp, 4, od, &n_od, &cd) && fresh(m, mode, 0, pd, nb, &reqs[3].sp, 4, ref, &n_ref);
        CHECK(ok && cd == nb - 1 && n_ref == n_od && !memcmp(ref, od, sizeof(mor_token) * (size_t)n_od),
              "%s %s reuse: a prompt parting at its last token reuses the rest (%d), a fresh slot's tokens",
              name, mode_name[mode], cd);
        /* C: A's prompt again: all but its last token reused */
        ok = ok && run_one(s, pa, na, &a->sp, 6, oc, &n_oc, &cc);
        CHECK(ok && cc == na - 1 && n_oc == n_oa && !memcmp(oc, oa, sizeof(mor_token) * (size_t)n_oa),
              "%s %s reuse: the same prompt again reuses all but its last token (%d) and gives the same tokens",
              name, mode_name[mode], cc);
        /* E: under other router settings nothing kept is reused */
        ok = ok && mor_router_set_max_depth(mor_server_router(s), 1) == MOR_OK &&
             run_one(s, pb, nb, &reqs[1].sp, 5, oe, &n_oe, &ce) && fresh(m, mode, 1, pb, nb, &reqs[1].sp, 5, ref, &n_ref);
        CHECK(ok && ce == 0 && n_ref == n_oe && !memcmp(ref, oe, sizeof(mor_token) * (size_t)n_oe),
              "%s %s reuse: after a router change nothing is reused; a fresh slot's tokens", name, mode_name[mode]);
        mor_server_free(s);
        /* room: a budget of 40 cells, 2 slots; what A's slot keeps gives way */
        s = make_server(m, mode, 2, 40, 0, 0);
        mor_token pf[32], of[MAXT];
        int32_t n_of = 0, cf = -1;
        for (int32_t i = 0; i < 30; i++) pf[i] = (mor_token)((101 + 7 * i) % n_vocab);
        ok = s && run_one(s, pa, na, &a->sp, 6, oa, &n_oa, &ca) && run_one(s, pf, 30, &reqs[2].sp, 10, of, &n_of, &cf) &&
             fresh(m, mode, 0, pf, 30, &reqs[2].sp, 10, ref, &n_ref);
        CHECK(ok && cf == 0 && n_ref == n_of && !memcmp(ref, of, sizeof(mor_token) * (size_t)n_of),
              "%s %s reuse: kept cells make way for a request that needs the whole budget (40 cells)",
              name, mode_name[mode]);
        mor_server_free(s);
    }
}

/* Prompt sharing: requests queued together with one prompt (n choices)
 * copy the first one's prompt cells once it has them (the others wait a
 * step for it) and give, bitwise, the tokens of fresh slots. */
static void prompt_sharing(mor_model *m, const char *name)
{
    for (int32_t mode = MOR_SERVE_SEQUENCE; mode <= MOR_SERVE_DEPTHWISE; mode++) {
        SCENARIO("%s %s: prompt sharing", name, mode_name[mode]);
        mor_server *s = make_server(m, mode, 4, 256, 0, 0);
        mor_token p[24];
        for (int32_t i = 0; i < 24; i++) p[i] = (mor_token)((13 + 11 * i) % n_vocab);
        mor_request_id id[3];
        int ok = s != NULL;
        for (int32_t k = 0; ok && k < 3; k++) ok = sub(s, p, 24, &reqs[k].sp, 6, NULL, 0, &id[k]) == MOR_OK;
        ok = ok && mor_server_run(s) == MOR_OK;
        int same = ok;
        int32_t cached[3] = { -1, -1, -1 };
        for (int32_t k = 0; ok && k < 3; k++) {
            mor_token got[MAXT], ref[MAXT];
            int32_t n_got = 0, n_ref = 0;
            cached[k] = mor_server_request_cached(s, id[k]);
            same &= mor_server_get_tokens(s, id[k], got, NULL, MAXT, &n_got) == MOR_OK &&
                    fresh(m, mode, 0, p, 24, &reqs[k].sp, 6, ref, &n_ref) && n_ref == n_got &&
                    !memcmp(ref, got, sizeof(mor_token) * (size_t)n_got);
        }
        CHECK(ok && same && cached[0] == 0 && cached[1] == 23 && cached[2] == 23,
              "%s %s sharing: 3 requests of one prompt: the 2nd and 3rd copy 23 cells of the 1st (%d, %d, %d), "
              "each bitwise a fresh slot's tokens", name, mode_name[mode], cached[0], cached[1], cached[2]);
        mor_server_free(s);
    }
}

static int abort_at, abort_polls;
static int32_t abort_cb(void *ud) { (void)ud; return abort_at > 0 && ++abort_polls == abort_at; }

/* Self-speculative requests (mor_server_set_speculate): in every mode the
 * tokens, depths and logits of the per-request mor_decode loop, bitwise,
 * whatever the draft count and depth (a full-depth draft is always taken,
 * so stop tokens and max_tokens fall inside a run of accepted drafts); the
 * cells of rejected drafts are gone (none left once every request ended
 * without prompt reuse; a finished request keeps exactly its positions for
 * reuse, and reuse, sharing and the small budget give a fresh slot's
 * tokens); a step aborted anywhere changes nothing. Under emulation
 * (MOR_TEST_EMULATED, tests/cross-test.sh; the logic is the same on every
 * CPU, the kernels are what the cross runs check) only the first draft
 * setting on 7 requests and the cells, on the first two fixtures. */
static void speculation(mor_model *m, const char *name)
{
    const int32_t nr = mor_model_n_recursion(m);
    const int32_t cfg[3][2] = { { 3, 1 }, { 2, 0 /* full depth */ }, { 8, 2 } };
    const int emulated = getenv("MOR_TEST_EMULATED") != NULL;
    for (int c = 0; c < (emulated ? 1 : 3); c++) {
        spec_n = cfg[c][0]; spec_d = cfg[c][1] ? cfg[c][1] : nr;
        spec_drafted = spec_accepted = 0;
        for (int mode = 0; mode < 3; mode++) {
            char what[200];
            snprintf(what, sizeof what, "%s speculating N %d D %d: %s 32 requests in 9 slots", name, spec_n, spec_d,
                     mode_name[mode]);
            if (!emulated) serve_and_compare(m, what, mode, 32, 9, 0, 0, 0);
            snprintf(what, sizeof what, "%s speculating N %d D %d: %s 7 requests", name, spec_n, spec_d, mode_name[mode]);
            serve_and_compare(m, what, mode, 7, 7, 0, 0, 0);
        }
        CHECK(spec_drafted > 0 && spec_accepted > 0 && spec_accepted <= spec_drafted,
              "%s N %d D %d: %lld drafted, %lld accepted", name, spec_n, spec_d, (long long)spec_drafted,
              (long long)spec_accepted);
    }
    spec_n = 3; spec_d = 1;
    const uint32_t nb = nbatch;
    nbatch = 4;   /* rows in flight fill the batch: a speculating request waits or drafts fewer */
    if (!emulated)
        serve_and_compare(m, "speculating N 3 with n_batch 4: DEPTHWISE 32 requests in 9 slots", MOR_SERVE_DEPTHWISE, 32, 9, 0, 0, 0);
    nbatch = nb;
    if (!emulated && mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT) {
        serve_and_compare(m, "speculating: SATURATION threshold 2 (never)", MOR_SERVE_DEPTHWISE, 7, 7, MOR_EXIT_SATURATION, 2.0f, 0);
        serve_and_compare(m, "speculating: MARGIN threshold 2 (never)", MOR_SERVE_DEPTHWISE, 7, 7, MOR_EXIT_MARGIN, 2.0f, 0);
    }
    char sname[200];
    snprintf(sname, sizeof sname, "%s speculating N 3 D 1", name);
    if (!emulated) {
        small_budget(m, sname);
        prompt_reuse(m, sname);
        prompt_sharing(m, sname);
    }
    /* the cells: none left without prompt reuse; with it, a request's positions exactly */
    for (int mode = 0; mode < 3; mode++) {
        SCENARIO("%s %s speculating: the cells", name, mode_name[mode]);
        sflags = MOR_SERVE_NO_PROMPT_REUSE;
        mor_server *s = make_server(m, mode, 7, 512, 0, 0);
        sflags = 0;
        mor_request_id id;
        int ok = s != NULL;
        for (int32_t i = 0; ok && i < 7; i++)
            ok = sub(s, reqs[i].prompt, reqs[i].n_prompt, &reqs[i].sp, reqs[i].max_tokens, reqs[i].stop, reqs[i].n_stop, &id) == MOR_OK;
        ok = ok && mor_server_run(s) == MOR_OK;
        int64_t used = 0;
        const mor_kv_cache *kv = s ? mor_context_kv(serve_context(s)) : NULL;
        if (ok) used = mor_kv_n_cells_used(kv, MOR_KV_ALL);
        CHECK(ok && used == 0, "%s %s speculating: no cell left after 7 requests without prompt reuse (%lld)", name,
              mode_name[mode], (long long)used);
        mor_server_free(s);
        /* with prompt reuse: what a finished request keeps, recursion by recursion, is what it keeps
         * after plain steps (its positions, at the depths they ran) */
        const request *q = &reqs[12];
        mor_token out[MAXT];
        int32_t n_out = 0, cached = 0, nr1 = mor_model_n_recursion(m) + 1;
        int64_t cells[2][MOR_MAX_DEPTHS + 1];
        for (int pass = 0; pass < 2; pass++) {
            const int32_t sn = spec_n;
            if (!pass) spec_n = 0;
            s = make_server(m, mode, 2, 512, 0, 0);
            ok = s && run_one(s, q->prompt, q->n_prompt, &q->sp, q->max_tokens, out, &n_out, &cached);
            spec_n = sn;
            kv = s ? mor_context_kv(serve_context(s)) : NULL;
            for (int32_t r = 0; r < nr1; r++) cells[pass][r] = ok ? mor_kv_n_cells_used(kv, r < nr1 - 1 ? r : MOR_KV_UNIQUE_LAYERS) : -1 - pass;
            mor_server_free(s);
        }
        CHECK(!memcmp(cells[0], cells[1], sizeof(int64_t) * (size_t)nr1) && cells[1][nr1 - 1] > 0,
              "%s %s speculating: a finished request keeps the cells of plain steps in every recursion (%lld in the "
              "unique layers)", name, mode_name[mode], (long long)cells[1][nr1 - 1]);
    }
    /* a step aborted at its k-th poll changes nothing: stepping again gives the reference */
    for (int mode = 0; mode < (emulated ? 0 : 3); mode++) {
        int same = 1, aborted = 0;
        SCENARIO("%s %s speculating: aborted steps", name, mode_name[mode]);
        for (abort_at = 1; abort_at <= 40; abort_at += 3) {
            mor_server_params p;
            MOR_SERVER_PARAMS_INIT(&p);
            p.mode = mode; p.n_slots = 4; p.n_ctx = 512; p.n_batch = nbatch; p.kv_mode = kvmode;
            p.abort_callback = abort_cb;
            mor_server *s = NULL;
            if (mor_server_create(m, &p, &s)) { same = 0; break; }
            mor_request_id ids[4];
            for (int32_t i = 0; i < 4; i++)
                same &= sub(s, reqs[i + 4].prompt, reqs[i + 4].n_prompt, &reqs[i + 4].sp, reqs[i + 4].max_tokens,
                            reqs[i + 4].stop, reqs[i + 4].n_stop, &ids[i]) == MOR_OK;
            abort_polls = 0;
            int32_t pend = 1;
            for (int guard = 0; pend && guard < 1000 && same; guard++) {
                mor_status st = mor_server_step(s, &pend);
                if (st == MOR_E_ABORTED) { aborted++; abort_polls = -1000000; pend = 1; }
                else same &= st == MOR_OK;
            }
            for (int32_t i = 0; i < 4 && same; i++) {
                const request *q = &reqs[i + 4];
                mor_token out[MAXT]; int32_t no = 0;
                same &= mor_server_get_tokens(s, ids[i], out, NULL, MAXT, &no) == MOR_OK && no == q->n_out &&
                        !memcmp(out, q->out, sizeof(mor_token) * (size_t)no);
            }
            mor_server_free(s);
        }
        abort_at = 0;
        CHECK(same && aborted > 5, "%s %s speculating: steps aborted at 14 different points (%d aborts) change nothing",
              name, mode_name[mode], aborted);
    }
    spec_n = 0; spec_d = 1;
}

/* ---- context shift (MOR_SERVE_CONTEXT_SHIFT) ---- */

#define CS_N 5          /* requests */
#define CS_L 24         /* n_ctx_seq: the context of each sequence */
#define CS_MAXT 50

typedef struct {
    int32_t n, max_tokens, keep;   /* keep: mor_server_set_keep's argument (-2: not called) */
    mor_token prompt[48];
    mor_sampler_params sp;
    /* reference */
    int32_t n_out, n_prompt, n_shifts, n_discarded, depth[CS_MAXT];
    mor_token out[CS_MAXT];
    float *logits;   /* [CS_MAXT][n_vocab] */
} cs_request;

static cs_request cs[CS_N];
static float *cs_got[CS_N];
static int32_t cs_got_n[CS_N], cs_map[64];

static void cs_on_logits(mor_request_id id, mor_token t, int32_t d, const float *lg, int32_t nv, void *ud)
{
    (void)t; (void)d; (void)ud;
    const int32_t r = id < 64 ? cs_map[id] : -1;
    if (r < 0) return;
    if (cs_got_n[r] < CS_MAXT) memcpy(cs_got[r] + (size_t)cs_got_n[r] * nv, lg, sizeof(float) * (size_t)nv);
    cs_got_n[r]++;
}

/* The reference of one request: a plain context of CS_L positions, the
 * prompt truncated by hand with llama.cpp's rule, one mor_decode per token,
 * and the sequence shifted by hand (mor_kv_seq_rm + mor_kv_seq_add) when
 * the next token has no position, as mor-run does. */
static int cs_reference(mor_model *m, cs_request *q)
{
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = CS_L; cp.n_batch = 64; cp.kv_mode = kvmode;
    mor_context *c = NULL; mor_batch *b = NULL; mor_sampler *s = NULL;
    if (mor_context_create(m, &cp, &c) || mor_batch_create(64, &b) || mor_sampler_create(&q->sp, &s)) return 0;
    if (mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT) mor_router_set_mode(mor_context_router(c), MOR_ROUTE_THRESHOLD, 0);
    const int32_t keep = q->keep < -1 ? 0 : q->keep < 0 || q->keep > q->n ? q->n : q->keep;
    mor_token p[48];
    int32_t np = q->n;
    memcpy(p, q->prompt, sizeof(mor_token) * (size_t)q->n);
    if (np > CS_L) {   /* keep, then whole blocks of (L - keep) / 2 dropped until it fits */
        const int32_t block = (CS_L - keep) / 2;
        while (np - keep - block >= block) {
            memmove(p + keep, p + keep + block, sizeof(mor_token) * (size_t)(np - keep - block));
            np -= block;
        }
    }
    q->n_prompt = np; q->n_shifts = q->n_discarded = 0; q->n_out = 0;
    for (int32_t t = 0; t < np; t++) {
        mor_batch_add(b, p[t], t, 0, t == np - 1);
        mor_sampler_accept(s, p[t]);
    }
    int32_t n_pos = np, ok = 1;
    for (;;) {
        if (mor_decode(c, b)) { ok = 0; break; }
        int32_t depths[64];
        mor_router_get_depths(mor_context_router(c), depths, 64);
        const float *lg = mor_get_logits(c, mor_batch_size(b) - 1);
        memcpy(q->logits + (size_t)q->n_out * n_vocab, lg, sizeof(float) * (size_t)n_vocab);
        mor_token t;
        mor_sampler_sample(s, lg, n_vocab, &t);
        q->out[q->n_out] = t; q->depth[q->n_out] = depths[mor_batch_size(b) - 1];
        if (++q->n_out >= q->max_tokens) break;
        if (n_pos >= CS_L) {
            const int32_t disc = (n_pos - keep) / 2;
            mor_kv_cache *kv = mor_context_kv(c);
            if (mor_kv_seq_rm(kv, 0, keep, keep + disc) || mor_kv_seq_add(kv, 0, keep + disc, -1, -disc)) { ok = 0; break; }
            n_pos -= disc; q->n_shifts++; q->n_discarded += disc;
        }
        mor_batch_clear(b);
        mor_batch_add(b, t, n_pos++, 0, 1);
    }
    mor_batch_free(b); mor_context_free(c); mor_sampler_free(s);
    return ok;
}

static mor_server *cs_server(mor_model *m, int32_t mode, uint32_t flags, uint32_t n_ctx_seq, uint32_t n_batch)
{
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    p.mode = mode; p.n_slots = 4; p.n_ctx = 128; p.n_batch = n_batch; p.kv_mode = kvmode;
    p.flags = flags; p.n_ctx_seq = n_ctx_seq; p.on_token_logits = cs_on_logits;
    mor_server *s = NULL;
    return mor_server_create(m, &p, &s) == MOR_OK ? s : NULL;
}

/* Submit the requests (spec: self-speculation's drafts, 0 off), run the
 * server, compare each with its reference: tokens, depths, logits bitwise,
 * and what mor_server_request_shift reports. */
static int cs_run(mor_server *s, int32_t spec, mor_request_id *id)
{
    int ok = 1;
    for (int32_t i = 0; i < CS_N && ok; i++) {
        cs_got_n[i] = 0;
        ok = mor_server_submit(s, cs[i].prompt, cs[i].n, &cs[i].sp, cs[i].max_tokens, NULL, 0, &id[i]) == MOR_OK &&
             id[i] < 64 && (cs[i].keep < -1 || mor_server_set_keep(s, id[i], cs[i].keep) == MOR_OK) &&
             (!spec || mor_server_set_speculate(s, id[i], spec, 1) == MOR_OK);
        if (ok) cs_map[id[i]] = i;
    }
    if (!ok || mor_server_run(s)) return 0;
    for (int32_t i = 0; i < CS_N; i++) {
        const cs_request *q = &cs[i];
        mor_token got[CS_MAXT];
        int32_t dep[CS_MAXT], n_got = 0, np = -1, nsh = -1, ndi = -1;
        ok &= mor_server_get_tokens(s, id[i], got, dep, CS_MAXT, &n_got) == MOR_OK && n_got == q->n_out &&
              cs_got_n[i] == q->n_out && !memcmp(got, q->out, sizeof(mor_token) * (size_t)n_got) &&
              !memcmp(dep, q->depth, sizeof(int32_t) * (size_t)n_got) &&
              !memcmp(cs_got[i], q->logits, sizeof(float) * (size_t)n_got * (size_t)n_vocab) &&
              mor_server_request_shift(s, id[i], &np, &nsh, &ndi) == MOR_OK && np == q->n_prompt &&
              nsh == q->n_shifts && ndi == q->n_discarded;
    }
    return ok;
}

static void context_shift(mor_model *m, const char *name)
{
    /* llama.cpp's truncation on numbers worked out by hand */
    mor_token t[100];
    for (int32_t i = 0; i < 100; i++) t[i] = i;
    int32_t n0 = mor_prompt_truncate(t, 100, 64, 0);
    CHECK(n0 == 36 && t[0] == 64 && t[35] == 99, "mor_prompt_truncate: 100 tokens into 64, none kept: the last 36 "
          "(two blocks of 32 dropped)");
    for (int32_t i = 0; i < 100; i++) t[i] = i;
    int32_t n4 = mor_prompt_truncate(t, 100, 64, 4);
    CHECK(n4 == 40 && t[3] == 3 && t[4] == 64 && t[39] == 99, "mor_prompt_truncate: 4 kept: 0..3 then 64..99");
    CHECK(mor_prompt_truncate(t, 50, 64, 63) == 50 && t[4] == 64, "mor_prompt_truncate: a prompt that fits is unchanged");
    CHECK(mor_prompt_truncate(t, 100, 64, 63) == MOR_E_INVALID_ARG && t[4] == 64 &&
          mor_prompt_truncate(NULL, 3, 64, 0) == MOR_E_INVALID_ARG && mor_prompt_truncate(t, 100, 64, -1) == MOR_E_INVALID_ARG,
          "mor_prompt_truncate: keeping more than n_ctx - 2, NULL, a negative n_keep: MOR_E_INVALID_ARG, nothing changed");

    /* the requests: shifts with n_keep 3, a truncated prompt with n_keep 5,
     * n_keep -1 (the prompt), one that never reaches the context, a
     * truncated one with the default n_keep */
    static const int32_t shape[CS_N][3] = { { 10, 50, 3 }, { 40, 30, 5 }, { 6, 40, -1 }, { 8, 10, 0 }, { 30, 12, -2 } };
    int ok = 1;
    for (int32_t i = 0; i < CS_N; i++) {
        cs_request *q = &cs[i];
        q->n = shape[i][0]; q->max_tokens = shape[i][1]; q->keep = shape[i][2];
        for (int32_t k = 0; k < q->n; k++) q->prompt[k] = (mor_token)((i * 37 + k * 11 + 5) % n_vocab);
        MOR_SAMPLER_PARAMS_INIT(&q->sp);
        q->sp.seed = 77 + (uint64_t)i;
        if (i == 1) q->sp.temperature = 0;
        if (i < 2) { q->sp.repeat_penalty = 1.3f; q->sp.repeat_last_n = 16; }   /* the history counts */
        q->logits = malloc(sizeof(float) * CS_MAXT * (size_t)n_vocab);
        cs_got[i] = malloc(sizeof(float) * CS_MAXT * (size_t)n_vocab);
        ok &= q->logits && cs_got[i] && cs_reference(m, q);
    }
    if (!REQUIRE(ok, "%s: context shift references", name)) goto out;
    CHECK(cs[0].n_shifts >= 2 && cs[1].n_prompt < cs[1].n && cs[1].n_shifts >= 1 && cs[2].n_shifts >= 1 &&
          cs[3].n_shifts == 0 && cs[4].n_prompt < cs[4].n,
          "%s: the references shift (%d, %d, %d times) and truncate (%d of %d, %d of %d tokens)", name, cs[0].n_shifts,
          cs[1].n_shifts, cs[2].n_shifts, cs[1].n_prompt, cs[1].n, cs[4].n_prompt, cs[4].n);
    for (int32_t mode = 0; mode < 3; mode++)
        for (int v = 0; v < (mode ? 3 : 1); v++) {   /* plain; prompts in chunks of 5 rows; speculating */
            SCENARIO("%s %s: context shift%s", name, mode_name[mode], v == 1 ? ", n_batch 5" : v == 2 ? ", speculating" : "");
            mor_server *s = cs_server(m, mode, MOR_SERVE_CONTEXT_SHIFT, CS_L, v == 1 ? 5 : 128);
            mor_request_id id[CS_N];
            CHECK(s && cs_run(s, v == 2 ? 3 : 0, id), "%s %s%s: 5 requests of sequences of %d positions, 4 slots: "
                  "tokens, depths and logits bitwise the plain context's with the same truncation and shifts",
                  name, mode_name[mode], v == 1 ? " (n_batch 5)" : v == 2 ? " (speculating 3)" : "", CS_L);
            /* prompt reuse after a shift: only the first n_keep cells */
            mor_request_id again;
            mor_token got[CS_MAXT];
            int32_t n_got = 0;
            cs_got_n[0] = 0;
            int reuse = s && mor_server_submit(s, cs[0].prompt, cs[0].n, &cs[0].sp, cs[0].max_tokens, NULL, 0, &again) == MOR_OK &&
                        again < 64 && mor_server_set_keep(s, again, cs[0].keep) == MOR_OK;
            if (reuse) cs_map[again] = 0;
            reuse = reuse && mor_server_run(s) == MOR_OK && mor_server_get_tokens(s, again, got, NULL, CS_MAXT, &n_got) == MOR_OK;
            /* (SERIAL: its one slot was last the 5th request's, shifted with n_keep 0: nothing kept) */
            const int32_t want = mode == MOR_SERVE_SERIAL ? 0 : cs[0].keep;
            CHECK(reuse && mor_server_request_cached(s, again) == want && n_got == cs[0].n_out &&
                  !memcmp(got, cs[0].out, sizeof(mor_token) * (size_t)n_got),
                  "%s %s%s: a shifted request's prompt again reuses only its n_keep cells (%d) and gives the same tokens",
                  name, mode_name[mode], v == 1 ? " (n_batch 5)" : v == 2 ? " (speculating 3)" : "",
                  s ? mor_server_request_cached(s, again) : -1);
            mor_server_free(s);
        }
    /* without the flag: refused at submit, as before */
    mor_server *s = cs_server(m, MOR_SERVE_DEPTHWISE, 0, CS_L, 128);
    mor_request_id id;
    CHECK(s && mor_server_submit(s, cs[0].prompt, cs[0].n, &cs[0].sp, cs[0].max_tokens, NULL, 0, &id) == MOR_E_KV_FULL &&
          mor_server_submit(s, cs[1].prompt, cs[1].n, &cs[1].sp, 1, NULL, 0, &id) == MOR_E_KV_FULL &&
          mor_server_submit(s, cs[3].prompt, cs[3].n, &cs[3].sp, cs[3].max_tokens, NULL, 0, &id) == MOR_OK &&
          mor_server_set_keep(s, id, 0) == MOR_E_INVALID_ARG,
          "%s: without MOR_SERVE_CONTEXT_SHIFT a request longer than its sequence's %d positions is MOR_E_KV_FULL, "
          "mor_server_set_keep MOR_E_INVALID_ARG", name, CS_L);
    mor_server_free(s);
    /* misuse of mor_server_set_keep changes nothing */
    s = cs_server(m, MOR_SERVE_DEPTHWISE, MOR_SERVE_CONTEXT_SHIFT, CS_L, 128);
    int32_t np = -1, np2 = -1;
    mor_token tr[48];
    memcpy(tr, cs[1].prompt, sizeof(mor_token) * (size_t)cs[1].n);
    const int32_t n_tr = mor_prompt_truncate(tr, cs[1].n, CS_L, 0);   /* at submit: n_keep 0 */
    ok = s && mor_server_submit(s, cs[1].prompt, cs[1].n, &cs[1].sp, cs[1].max_tokens, NULL, 0, &id) == MOR_OK &&
         mor_server_request_shift(s, id, &np, NULL, NULL) == MOR_OK;
    CHECK(ok && mor_server_set_keep(s, id, CS_L - 1) == MOR_E_INVALID_ARG && mor_server_set_keep(s, id, -2) == MOR_E_INVALID_ARG &&
          mor_server_set_keep(s, id + 1, 0) == MOR_E_OUT_OF_RANGE && mor_server_set_keep(NULL, id, 0) == MOR_E_INVALID_ARG &&
          mor_server_request_shift(s, id, &np2, NULL, NULL) == MOR_OK && np2 == np && np == n_tr,
          "%s: mor_server_set_keep refuses keeping more than L - 2 of a long request, n_keep < -1, an unknown id, "
          "a NULL server, changing nothing (prompt still %d tokens)", name, np2);
    ok = ok && mor_server_step(s, NULL) == MOR_OK;
    CHECK(ok && mor_server_set_keep(s, id, 0) == MOR_E_INVALID_ARG, "%s: mor_server_set_keep on a running request: "
          "MOR_E_INVALID_ARG", name);
    mor_server_free(s);
    CHECK(!cs_server(m, MOR_SERVE_DEPTHWISE, MOR_SERVE_CONTEXT_SHIFT, 129, 128), "%s: n_ctx_seq above n_ctx is refused",
          name);
out:
    for (int32_t i = 0; i < CS_N; i++) { free(cs[i].logits); free(cs_got[i]); cs[i].logits = cs_got[i] = NULL; }
}

/* ---- mor_server_submit_request ---- */

/* What one run of pv_run gave each request: tokens, depths, a hash of the
 * logits each token was sampled from (bitwise), drafts, shifts. */
typedef struct {
    int32_t   n_out, depth[MAXT], np, nsh, ndi;
    mor_token out[MAXT];
    int64_t   drafted, accepted;
    uint64_t  hash;
} pv_result;
static pv_result pv[2][NREQ];

static void pv_hook(void *ud, mor_request_id id, const float *logits, int32_t nv)
{
    pv_result *r = ud;
    uint64_t h = r[id].hash ? r[id].hash : 1469598103934665603ull;   /* FNV-1a over the bytes */
    const unsigned char *b = (const unsigned char *)logits;
    for (size_t i = 0; i < sizeof(float) * (size_t)nv; i++) h = (h ^ b[i]) * 1099511628211ull;
    r[id].hash = h;
}

/* Request i's settings: speculating every other one, an exit threshold
 * every fourth and n_keep every third where the server has them. */
static void pv_settings(int32_t i, int exits, int shift, int32_t *n_draft, float *thr, int32_t *keep)
{
    *n_draft = i % 2 ? 2 : 0;
    *thr = !exits || i % 4 == 0 ? NAN : i % 4 == 1 ? -2.0f : i % 4 == 2 ? 2.0f : 0.95f;
    *keep = !shift || i % 3 == 2 ? 0 : i % 3 ? -1 : 2;
}

/* Requests [0, n) on a new server, through mor_server_submit and the
 * setters (via 0) or mor_server_submit_request (via 1), into pv[via]. */
static int pv_run(mor_model *m, int32_t mode, int32_t exit_mode, uint32_t flags, uint32_t n_ctx_seq, int32_t n, int via)
{
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    p.mode = mode; p.n_slots = 5; p.n_ctx = 256; p.n_batch = 16; p.kv_mode = kvmode;
    p.exit_mode = exit_mode; p.exit_threshold = 0.9f; p.flags = flags; p.n_ctx_seq = n_ctx_seq;
    mor_server *s = NULL;
    if (mor_server_create(m, &p, &s)) return 0;
    memset(pv[via], 0, sizeof pv[via]);
    serve_set_logits_hook(s, pv_hook, pv[via]);
    int ok = 1;
    for (int32_t i = 0; i < n && ok; i++) {
        const request *q = &reqs[i];
        int32_t nd, keep;
        float thr;
        pv_settings(i, exit_mode != MOR_EXIT_NONE, (flags & MOR_SERVE_CONTEXT_SHIFT) != 0, &nd, &thr, &keep);
        mor_request_id id = -1;
        if (via) {
            mor_request_params rp;
            MOR_REQUEST_PARAMS_INIT(&rp);
            rp.sampling = &q->sp; rp.max_tokens = q->max_tokens; rp.stop = q->stop; rp.n_stop = q->n_stop;
            rp.n_draft = nd; rp.draft_depth = 1; rp.exit_threshold = thr; rp.n_keep = keep;
            ok = mor_server_submit_request(s, q->prompt, q->n_prompt, &rp, &id) == MOR_OK;
        } else {
            ok = mor_server_submit(s, q->prompt, q->n_prompt, &q->sp, q->max_tokens, q->stop, q->n_stop, &id) ==
                     MOR_OK &&
                 (!nd || mor_server_set_speculate(s, id, nd, 1) == MOR_OK) &&
                 (isnan(thr) || mor_server_set_exit(s, id, thr) == MOR_OK) &&
                 (!keep || mor_server_set_keep(s, id, keep) == MOR_OK);
        }
        ok = ok && id == i;
        if (i % 3 == 0) ok = ok && mor_server_step(s, NULL) == MOR_OK;   /* some queued while others run */
    }
    ok = ok && mor_server_run(s) == MOR_OK;
    for (int32_t i = 0; i < n && ok; i++) {
        pv_result *r = &pv[via][i];
        ok = mor_server_get_tokens(s, i, r->out, r->depth, MAXT, &r->n_out) == MOR_OK &&
             mor_server_request_speculation(s, i, &r->drafted, &r->accepted) == MOR_OK &&
             mor_server_request_shift(s, i, &r->np, &r->nsh, &r->ndi) == MOR_OK;
    }
    mor_server_free(s);
    return ok;
}

/* The same requests and settings through both ways: the same outputs, bit for bit. */
static void params_vs_setters(mor_model *m, const char *name)
{
    static const struct { const char *what; int32_t mode, exit_mode; uint32_t flags, n_ctx_seq; } v[7] = {
        { "SERIAL", MOR_SERVE_SERIAL, 0, 0, 0 },
        { "SEQUENCE", MOR_SERVE_SEQUENCE, 0, 0, 0 },
        { "DEPTHWISE", MOR_SERVE_DEPTHWISE, 0, 0, 0 },
        { "DEPTHWISE, SATURATION exits", MOR_SERVE_DEPTHWISE, MOR_EXIT_SATURATION, 0, 0 },
        { "DEPTHWISE, MARGIN exits", MOR_SERVE_DEPTHWISE, MOR_EXIT_MARGIN, 0, 0 },
        { "SEQUENCE, context shift L 12", MOR_SERVE_SEQUENCE, 0, MOR_SERVE_CONTEXT_SHIFT, 12 },
        { "DEPTHWISE, context shift L 12", MOR_SERVE_DEPTHWISE, 0, MOR_SERVE_CONTEXT_SHIFT, 12 },
    };
    const int exits_ok = mor_model_router_type(m) != MOR_ROUTER_TYPE_TOKEN;
    for (int k = 0; k < 7; k++) {
        if (v[k].exit_mode && !exits_ok) continue;
        SCENARIO("%s %s: mor_server_submit_request = mor_server_submit + setters", name, v[k].what);
        const int32_t n = 16;
        int ok = pv_run(m, v[k].mode, v[k].exit_mode, v[k].flags, v[k].n_ctx_seq, n, 0) &&
                 pv_run(m, v[k].mode, v[k].exit_mode, v[k].flags, v[k].n_ctx_seq, n, 1);
        int same = ok, drafted = 0, shifted = 0;
        for (int32_t i = 0; i < n && same; i++) {
            const pv_result *a = &pv[0][i], *b = &pv[1][i];
            same = a->n_out == b->n_out && a->n_out > 0 &&
                   !memcmp(a->out, b->out, sizeof(mor_token) * (size_t)a->n_out) &&
                   !memcmp(a->depth, b->depth, sizeof(int32_t) * (size_t)a->n_out) && a->hash == b->hash &&
                   a->drafted == b->drafted && a->accepted == b->accepted && a->np == b->np && a->nsh == b->nsh &&
                   a->ndi == b->ndi;
            drafted += a->drafted > 0;
            shifted += a->nsh > 0;
        }
        CHECK(same && drafted > 0 && (!v[k].flags || shifted > 0),
              "%s %s: 16 requests (stop tokens, speculation%s%s): tokens, depths, logits, drafts and shifts bitwise "
              "those of mor_server_submit and the setters (%d speculated, %d shifted)", name, v[k].what,
              v[k].exit_mode ? ", exit thresholds" : "", v[k].flags ? ", n_keep" : "", drafted, shifted);
    }
}

/* Queued requests: the state of a server after failed submits must be as
 * before; *n_pending of a step with nothing else queued tells. */
static int32_t pending_after_step(mor_server *s)
{
    int32_t pend = -1;
    return mor_server_step(s, &pend) == MOR_OK ? pend : -1;
}

static mor_request_params *rp_init(mor_request_params *rp)
{
    MOR_REQUEST_PARAMS_INIT(rp);
    return rp;
}

/* mor_server_submit_request's errors: each refused with the old calls'
 * status, nothing queued, no id used, the grammar still the caller's (a
 * grammar the server had taken and freed would be used after free below:
 * ASan and valgrind see it); params NULL and the defaults; the struct's
 * size rule. */
static void request_params_misuse(mor_model *m)
{
    SCENARIO("mor_server_submit_request: errors change nothing");
    mor_server *s = make_server(m, MOR_SERVE_DEPTHWISE, 2, 64, 0, 0);
    if (!s) return;
    mor_token pr[3] = { 1, 2, 3 }, bad = n_vocab, stop = 5;
    mor_request_id id = -1;
    mor_request_params rp;
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);
#define RP(field, value) (rp_init(&rp)->field = (value), &rp)
    CHECK(mor_server_submit_request(NULL, pr, 3, NULL, &id) == MOR_E_INVALID_ARG &&
          mor_server_submit_request(s, NULL, 3, NULL, &id) == MOR_E_INVALID_ARG &&
          mor_server_submit_request(s, pr, 0, NULL, &id) == MOR_E_INVALID_ARG &&
          mor_server_submit_request(s, pr, 3, NULL, NULL) == MOR_E_INVALID_ARG &&
          mor_server_submit_request(s, &bad, 1, NULL, &id) == MOR_E_OUT_OF_RANGE,
          "NULL server, prompt or id_out, an empty prompt: MOR_E_INVALID_ARG; a bad prompt token: MOR_E_OUT_OF_RANGE");
    CHECK(mor_server_submit_request(s, pr, 3, RP(max_tokens, -1), &id) == MOR_E_INVALID_ARG &&
          mor_server_submit_request(s, pr, 3, RP(max_tokens, 0), &id) == MOR_E_INVALID_ARG &&
          mor_server_submit_request(s, pr, 3, RP(max_tokens, 62), &id) == MOR_E_KV_FULL,
          "max_tokens -1 and 0: MOR_E_INVALID_ARG; 62 with 3 prompt tokens in 64 cells: MOR_E_KV_FULL");
    CHECK(mor_server_submit_request(s, pr, 3, RP(n_stop, -1), &id) == MOR_E_INVALID_ARG &&
          mor_server_submit_request(s, pr, 3, RP(n_stop, 1), &id) == MOR_E_INVALID_ARG &&
          (rp_init(&rp)->stop = &bad, rp.n_stop = 1,
           mor_server_submit_request(s, pr, 3, &rp, &id) == MOR_E_OUT_OF_RANGE),
          "n_stop -1, a NULL stop with n_stop 1: MOR_E_INVALID_ARG; a bad stop token: MOR_E_OUT_OF_RANGE");
    sp.top_p = -1;
    CHECK(mor_server_submit_request(s, pr, 3, RP(sampling, &sp), &id) == MOR_E_INVALID_ARG,
          "bad sampling values: MOR_E_INVALID_ARG");
    MOR_SAMPLER_PARAMS_INIT(&sp);
    sp.size = 3;
    CHECK(mor_server_submit_request(s, pr, 3, RP(sampling, &sp), &id) == MOR_E_ABI, "a bad sampling size: MOR_E_ABI");
    MOR_SAMPLER_PARAMS_INIT(&sp);
    CHECK(mor_server_submit_request(s, pr, 3, RP(n_draft, -1), &id) == MOR_E_INVALID_ARG &&
          mor_server_submit_request(s, pr, 3, RP(n_draft, (int32_t)nbatch), &id) == MOR_E_INVALID_ARG &&
          (rp_init(&rp)->n_draft = 2, rp.draft_depth = 0,
           mor_server_submit_request(s, pr, 3, &rp, &id) == MOR_E_OUT_OF_RANGE) &&
          (rp_init(&rp)->n_draft = 2, rp.draft_depth = mor_model_n_recursion(m) + 1,
           mor_server_submit_request(s, pr, 3, &rp, &id) == MOR_E_OUT_OF_RANGE),
          "n_draft -1 or n_batch: MOR_E_INVALID_ARG; draft_depth 0 or N_r + 1: MOR_E_OUT_OF_RANGE");
    CHECK(mor_server_submit_request(s, pr, 3, RP(exit_threshold, 0.5f), &id) == MOR_E_UNSUPPORTED,
          "an exit threshold on a server without exits: MOR_E_UNSUPPORTED");
    CHECK(mor_server_submit_request(s, pr, 3, RP(n_keep, 2), &id) == MOR_E_INVALID_ARG &&
          mor_server_submit_request(s, pr, 3, RP(n_keep, -1), &id) == MOR_E_INVALID_ARG,
          "n_keep 2 or -1 on a server without MOR_SERVE_CONTEXT_SHIFT: MOR_E_INVALID_ARG");
    rp.size = (uint32_t)sizeof rp - 1;
    CHECK(mor_server_submit_request(s, pr, 3, &rp, &id) == MOR_E_ABI && strstr(mor_last_error(), "mor_request_params"),
          "a size smaller than any release's: MOR_E_ABI naming the struct");
    {
        struct { mor_request_params p; uint64_t more; } big;   /* a newer header's */
        mor_request_params_init(&big.p, sizeof big);
        CHECK(mor_server_submit_request(s, pr, 3, &big.p, &id) == MOR_E_ABI,
              "a newer header's bigger struct: MOR_E_ABI");
    }
    CHECK(id == -1 && pending_after_step(s) == 0, "after all of these: no id given, nothing queued");
    /* the defaults: n_draft 0 leaves draft_depth unread, NaN the server's threshold, n_keep 0 on any server */
    mor_token a[MAXT], b[MAXT];
    int32_t na = -1, nb = -2;
    mor_request_id i1 = -1, i2 = -1;
    int ok = mor_server_submit_request(s, pr, 3, NULL, &i1) == MOR_OK && i1 == 0 &&
             (rp_init(&rp)->draft_depth = 0, rp.stop = &stop,
              mor_server_submit_request(s, pr, 3, &rp, &i2) == MOR_OK) && i2 == 1 &&
             mor_server_run(s) == MOR_OK && mor_server_get_tokens(s, i1, a, NULL, MAXT, &na) == MOR_OK;
    mor_server_free(s);
    s = make_server(m, MOR_SERVE_DEPTHWISE, 2, 64, 0, 0);
    ok = ok && s && mor_server_submit(s, pr, 3, NULL, 16, NULL, 0, &i1) == MOR_OK && mor_server_run(s) == MOR_OK &&
         mor_server_get_tokens(s, i1, b, NULL, MAXT, &nb) == MOR_OK;
    CHECK(ok && na == 16 && nb == na && !memcmp(a, b, sizeof(mor_token) * (size_t)na),
          "params NULL: mor_server_submit's defaults with max_tokens 16 (the same %d tokens); n_draft 0 with "
          "draft_depth 0 and a NULL stop with n_stop 0 accepted", (int)na);
    mor_server_free(s);
    /* an exit threshold's and n_keep's refusals on servers that have them */
    const int exits = mor_model_router_type(m) != MOR_ROUTER_TYPE_TOKEN;
    s = make_server(m, MOR_SERVE_DEPTHWISE, 2, 64, exits ? MOR_EXIT_MARGIN : 0, 0.9f);
    if (s && exits)
        CHECK(mor_server_submit_request(s, pr, 3, RP(exit_threshold, 0.5f), &id) == MOR_OK && id == 0,
              "an exit threshold on a server with exits: taken");
    mor_server_free(s);
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    p.n_ctx = 64; p.n_ctx_seq = 8; p.flags = MOR_SERVE_CONTEXT_SHIFT;
    s = NULL;
    mor_token lp[12];
    for (int32_t i = 0; i < 12; i++) lp[i] = (mor_token)(i + 1);
    id = -1;
    ok = mor_server_create(m, &p, &s) == MOR_OK;
    CHECK(ok && (rp_init(&rp)->n_keep = -2, mor_server_submit_request(s, lp, 12, &rp, &id) == MOR_E_INVALID_ARG) &&
          (rp_init(&rp)->n_keep = 7, mor_server_submit_request(s, lp, 12, &rp, &id) == MOR_E_INVALID_ARG) && id == -1 &&
          pending_after_step(s) == 0 &&
          (rp_init(&rp)->n_keep = 6, mor_server_submit_request(s, lp, 12, &rp, &id) == MOR_OK) && id == 0,
          "context shift, L 8: n_keep -2, or 7 (> L - 2) of a 12-token prompt: MOR_E_INVALID_ARG, nothing queued; "
          "6 taken");
    mor_server_free(s);
    /* a grammar: refused with another vocabulary (the caller's still); with the other fields' errors too */
    mor_model *brown = NULL;
    mor_grammar *g = NULL;
    static const char gbnf[] = "root ::= [a-z ]+";
    if (mor_model_load_file("models/brown-mor.gguf", NULL, &brown) ||
        mor_grammar_create(brown, gbnf, strlen(gbnf), NULL, NULL, 0, &g)) {
        SKIP("models/brown-mor.gguf and a grammar on it: %s", mor_last_error());
        mor_model_free(brown);
        return;
    }
    s = make_server(m, MOR_SERVE_DEPTHWISE, 2, 64, 0, 0);
    id = -1;
    CHECK(s && mor_server_submit_request(s, pr, 3, RP(grammar, g), &id) == MOR_E_INVALID_ARG && id == -1 &&
          strstr(mor_last_error(), "vocabulary") != NULL && pending_after_step(s) == 0,
          "a grammar of another vocabulary: MOR_E_INVALID_ARG, nothing queued");
    mor_server_free(s);
    if (id != -1) g = NULL;   /* (wrongly taken: the server freed it) */
    mor_token bp[4];
    int32_t nbp = 0;
    mor_tokenize(brown, "the jury", 8, 0, bp, 4, &nbp);
    p.n_ctx = 64; p.n_ctx_seq = 0; p.flags = 0; p.n_batch = 8;
    s = NULL;
    ok = mor_server_create(brown, &p, &s) == MOR_OK && nbp > 0;
    static const mor_status want[5] = { MOR_E_INVALID_ARG, MOR_E_OUT_OF_RANGE, MOR_E_UNSUPPORTED, MOR_E_INVALID_ARG,
                                        MOR_E_INVALID_ARG };
    int refused = ok && g;
    for (int k = 0; k < 5 && refused; k++) {
        rp_init(&rp)->grammar = g;
        if (k == 0) rp.n_draft = -1;
        if (k == 1) { rp.n_draft = 1; rp.draft_depth = 99; }
        if (k == 2) rp.exit_threshold = 0.5f;
        if (k == 3) rp.n_keep = 1;
        if (k == 4) rp.max_tokens = 0;
        refused = mor_server_submit_request(s, bp, nbp, &rp, &id) == want[k] && id == -1;
    }
    if (id != -1) g = NULL;   /* (wrongly taken: the server's now) */
    CHECK(refused && pending_after_step(s) == 0, "a grammar with a bad n_draft, draft_depth, exit threshold, n_keep "
          "or max_tokens: refused (the old calls' statuses), nothing queued");
    /* g is still the caller's: the server takes it on success and frees it with itself */
    mor_token out[MAXT];
    int32_t no = 0, bad_tok = 0;
    const int taken = refused && (rp_init(&rp)->grammar = g, rp.max_tokens = 6,
                                  mor_server_submit_request(s, bp, nbp, &rp, &id) == MOR_OK);
    ok = taken && mor_server_run(s) == MOR_OK && mor_server_get_tokens(s, id, out, NULL, MAXT, &no) == MOR_OK;
    for (int32_t i = 0; ok && i < no; i++) {
        char piece[64];
        size_t len = 0;
        if (out[i] == mor_model_token_eos(brown)) continue;   /* the grammar's end */
        if (mor_token_to_piece(brown, out[i], piece, sizeof piece, &len)) { bad_tok = 1; break; }
        for (size_t c = 0; c < len; c++) bad_tok |= !(piece[c] == ' ' || (piece[c] >= 'a' && piece[c] <= 'z'));
    }
    CHECK(ok && no > 0 && !bad_tok, "the refused grammar then taken: %d tokens of [a-z ]", (int)no);
    mor_server_free(s);
    if (!taken) mor_grammar_free(g);
    mor_model_free(brown);
#undef RP
}

/* The requests and their reference outputs on m; 0 if the reference failed. */
static int prepare(mor_model *m, const char *name)
{
    n_vocab = mor_model_n_vocab(m);
    make_requests(n_vocab);
    for (int32_t i = 0; i < NREQ; i++) {
        reqs[i].logits = malloc(sizeof(float) * MAXT * (size_t)n_vocab);
        got_logits[i] = malloc(sizeof(float) * MAXT * (size_t)n_vocab);
        if (!reqs[i].logits || !got_logits[i]) return 0;
    }
    const int expert = mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT;
    if (!REQUIRE(reference(m, expert ? MOR_ROUTE_THRESHOLD : 0, 0), "%s: reference decode", name)) return 0;
    int32_t seen[MOR_MAX_DEPTHS] = { 0 }, kinds = 0;
    for (int32_t i = 0; i < NREQ; i++)
        for (int32_t t = 0; t < reqs[i].n_out; t++) seen[reqs[i].depth[t]] = 1;
    for (int32_t dd = 0; dd < MOR_MAX_DEPTHS; dd++) kinds += seen[dd];
    CHECK(kinds >= 2, "%s: the requests' tokens run %d different depths", name, kinds);
    return 1;
}

static void unprepare(void)
{
    for (int32_t i = 0; i < NREQ; i++) { free(reqs[i].logits); free(got_logits[i]); reqs[i].logits = got_logits[i] = NULL; }
}

/* MOR_SERVE_FAST_BF16 on BF16 weights: every request is, bitwise, the
 * per-request loop on a context created with MOR_CTX_FAST_BF16. Where that
 * flag picks another kernel set (avx512-bf16: bfloat16-rounded activations)
 * its outputs differ from the default context's, so a server that dropped
 * the flag would fail the equality; elsewhere (this flag then picks the
 * default set) the equality holds either way and the difference is a SKIP. */
static void fast_bf16_serving(const char *dir)
{
    /* d 256, 8 layers (1 + 3 x 2 + 1), heads 4/2 of 64, ffn 512, vocab 256, BF16 throughout */
    synth_spec sp = { 256, 8, 4, 2, 64, 512, 256, 256, 3, GGML_BF16, GGML_BF16, 11, 0 };
    char path[760];
    snprintf(path, sizeof path, "%s/serve-synth-bf16-%ld.gguf", dir, (long)getpid());
    mor_model *m = NULL;
    SCENARIO("BF16 weights served with MOR_SERVE_FAST_BF16");
    const int loaded = REQUIRE(synth_write(&sp, path) == 0 && mor_model_load_file(path, NULL, &m) == MOR_OK,
                               "random-weight BF16 model");
    remove(path);
    if (!loaded) return;
    const size_t per = sizeof(float) * MAXT * (size_t)mor_model_n_vocab(m);
    float *plain = malloc(per * NREQ);
    int32_t plain_n[NREQ];
    if (REQUIRE(plain != NULL, "memory for the BF16 reference logits") && prepare(m, "random-weight BF16")) {
        for (int32_t i = 0; i < NREQ; i++) { memcpy((char *)plain + per * (size_t)i, reqs[i].logits, per); plain_n[i] = reqs[i].n_out; }
        cflags = MOR_CTX_FAST_BF16;
        const int expert = mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT;
        if (REQUIRE(reference(m, expert ? MOR_ROUTE_THRESHOLD : 0, 0), "BF16 reference with MOR_CTX_FAST_BF16")) {
            sflags = MOR_SERVE_FAST_BF16;
            /* emulated (cross-test.sh): DEPTHWISE alone, the mode that mixes the most */
            for (int mode = getenv("MOR_TEST_EMULATED") ? 2 : 0; mode < 3; mode++) {
                char what[160];
                snprintf(what, sizeof what, "BF16 weights, MOR_SERVE_FAST_BF16 = MOR_CTX_FAST_BF16: %s 32 requests in 9 slots",
                         mode_name[mode]);
                serve_and_compare(m, what, mode, 32, 9, 0, 0, 0);
            }
            sflags = 0;
            const kernel_set *def = kernels_best(), *fast = kernels_fast_bf16(def);
            if (fast != def) {
                int differ = 0;
                for (int32_t i = 0; i < NREQ; i++)
                    differ |= plain_n[i] != reqs[i].n_out ||
                              memcmp((char *)plain + per * (size_t)i, reqs[i].logits,
                                     sizeof(float) * (size_t)n_vocab * (size_t)reqs[i].n_out);
                CHECK(differ, "BF16 weights: MOR_CTX_FAST_BF16 (kernel set %s) gives other logits than the default "
                      "(%s), so the served equality above needs the flag", fast->name, def->name);
            } else {
                SKIP("BF16 weights: MOR_CTX_FAST_BF16 differing from the default: needs the avx512-bf16 kernel set "
                     "(a CPU with AVX-512 and AVX512_BF16, without AMX); here the flag picks the default set %s",
                     def->name);
            }
        }
        cflags = 0;
    }
    free(plain);
    unprepare();
    mor_model_free(m);
}

/* The fixture at `in` with random LoRA deltas (ranks 1-4, scale 0.5) on
 * every projection of every looped layer, written to `out` (format version 2). */
static int write_relaxed(const char *in, const char *out)
{
    FILE *f = fopen(in, "rb");
    long size = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
    uint8_t *buf = size > 0 ? malloc((size_t)size) : NULL;
    int ok = buf && !fseek(f, 0, SEEK_SET) && fread(buf, 1, (size_t)size, f) == (size_t)size;
    if (f) fclose(f);
    gguf_file *g = NULL;
    mor_model *m = NULL;
    ok = ok && !gguf_parse(buf, (size_t)size, &g) && !mor_model_load_memory(buf, (size_t)size, NULL, &m);
    const gguf_kv *kv = ok ? gguf_find_kv(g, "mor.format_version") : NULL;
    ok = ok && kv && kv->type == GGUF_U32;
    if (ok) { const uint32_t two = 2; memcpy(buf + (kv->data - buf), &two, 4); }   /* m reads the old keys no more */
    gguf_writer *b = gguf_writer_new();
    ok = ok && b;
    int fallback = 0;
    uint64_t rng = 99;
    if (ok) {
        gguf_writer_add_retyped(b, g, GGML_F32, GGML_F32, &fallback);   /* the fixture's tensors, as they are */
        gguf_writer_add_f32(b, "mor.lora.scale", 0.5f);
        for (int32_t l = m->prelude; l < m->n_layer - m->coda; l++)
            for (int role = 0; role < ROLE_COUNT; role++) {
                const tensor *w = &m->layers[l].w[role];
                if (role == ROLE_ATTN_NORM || role == ROLE_FFN_NORM) continue;
                const int64_t r = 1 + (l + role) % 4;
                for (int part = 0; part < 2; part++) {
                    const int64_t n = r * (part ? w->rows : w->cols);
                    float *v = malloc(sizeof(float) * (size_t)n);
                    if (!v) { gguf_writer_fail(b, "out of memory"); break; }
                    for (int64_t i = 0; i < n; i++) {
                        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                        v[i] = (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5) * 0.4f;
                    }
                    char name[96];
                    snprintf(name, sizeof name, "lora.%d.%s.%c", l, role_names[role], part ? 'b' : 'a');
                    gguf_writer_add_matrix(b, name, GGML_F32, part ? r : w->cols, part ? w->rows : r, v, sizeof(float) * (size_t)n, 1);
                }
            }
        ok = !fallback && gguf_writer_write_file(b, out, NULL, 0) == 0;
    }
    gguf_writer_free(b);
    mor_model_free(m);
    gguf_free(g);
    free(buf);
    return ok;
}

int main(void)
{
    const char *out = getenv("OUT");
    snprintf(fixture_dir, sizeof fixture_dir, "%s/build/fixtures", out && *out ? out : ".");
    /* the last two: relaxed copies of the first two (write_relaxed) */
    const char *variants[] = { "expert_mc3_fix_perturbed", "token_mc3_perturbed", "expert_mc3_kvshare_fix_perturbed",
                               "expert_mc3_fix_perturbed", "token_mc3_perturbed" };
    float *plain_first[2] = { NULL, NULL };   /* the first logits of request 0 without the deltas */
    for (int v = 0; v < 5; v++) {
        char path[800], lpath[800];
        snprintf(path, sizeof path, "%s/%s.st.gguf", fixture_dir, variants[v]);
        if (v >= 3) {
            snprintf(lpath, sizeof lpath, "%s/%s-lora-%ld.gguf", fixture_dir, variants[v], (long)getpid());
            REQUIRE(write_relaxed(path, lpath), "%s with LoRA deltas written", variants[v]);
            snprintf(path, sizeof path, "%s", lpath);
        }
        mor_model *m = NULL;
        mor_status st = mor_model_load_file(path, NULL, &m);
        REQUIRE(st == MOR_OK, "load %s%s: %s", variants[v], v >= 3 ? " (LoRA)" : "", mor_last_error());
        if (v >= 3) remove(path);
        if (!m) continue;
        CHECK((v >= 3) == (m->lora != NULL && !m->lora->folded), "%s: unfolded deltas %s", variants[v],
              v >= 3 ? "present" : "absent");
        if (!prepare(m, variants[v])) { unprepare(); mor_model_free(m); continue; }
        if (v < 2) {
            plain_first[v] = malloc(sizeof(float) * (size_t)n_vocab);
            if (plain_first[v]) memcpy(plain_first[v], reqs[0].logits, sizeof(float) * (size_t)n_vocab);
        } else if (v >= 3 && plain_first[v - 3]) {
            double dd = check_maxdiff(plain_first[v - 3], reqs[0].logits, n_vocab);
            CHECK(dd > 1e-3, "%s: the deltas change the logits (by up to %.3g)", variants[v], dd);
        }
        const int expert = mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT;
        const int32_t ns[3] = { 1, 7, 32 };
        for (int mode = 0; mode < 3; mode++)
            for (int k = 0; k < 3; k++) {
                char what[160];
                snprintf(what, sizeof what, "%s %s %d requests", variants[v], mode_name[mode], ns[k]);
                serve_and_compare(m, what, mode, ns[k], ns[k], 0, 0, 0);
            }
        serve_and_compare(m, "DEPTHWISE 32 requests in 5 slots", MOR_SERVE_DEPTHWISE, 32, 5, 0, 0, 0);
        sflags = MOR_SERVE_FAST_BF16;   /* the fixtures' weights are F32: the flag changes nothing (BF16: fast_bf16_serving) */
        serve_and_compare(m, "DEPTHWISE with MOR_SERVE_FAST_BF16 (F32 weights: unchanged), 7 requests",
                          MOR_SERVE_DEPTHWISE, 7, 7, 0, 0, 0);
        sflags = 0;
        lockstep = 1;   /* the benchmark's baseline: dropped rows computed and discarded, same outputs */
        serve_and_compare(m, "SEQUENCE lockstep (every row every recursion) 32 requests", MOR_SERVE_SEQUENCE, 32, 32, 0, 0, 0);
        serve_and_compare(m, "SEQUENCE lockstep 7 requests in 3 slots", MOR_SERVE_SEQUENCE, 7, 3, 0, 0, 0);
        lockstep = 0;
        finish_every = 3;   /* finished tokens wait for every third step: same outputs */
        serve_and_compare(m, "DEPTHWISE finishing every 3 steps, 32 requests in 9 slots", MOR_SERVE_DEPTHWISE, 32, 9, 0, 0, 0);
        finish_every = 1;
        drain = 1;   /* all recursions in one step while nothing is queued: same outputs */
        serve_and_compare(m, "DEPTHWISE with drain, 32 requests in 9 slots", MOR_SERVE_DEPTHWISE, 32, 9, 0, 0, 0);
        serve_and_compare(m, "DEPTHWISE with drain, 7 requests", MOR_SERVE_DEPTHWISE, 7, 7, 0, 0, 0);
        drain = 0;
        for (int mode = 0; mode < 3; mode++) cancel_and_budget(m, mode);
        if (v == 0) { misuse(m); request_params_misuse(m); }
        if (v < 3) params_vs_setters(m, variants[v]);
        small_budget(m, variants[v]);
        chunked_prefill(m, variants[v]);
        prompt_reuse(m, variants[v]);
        prompt_sharing(m, variants[v]);
        if (v < 3) context_shift(m, variants[v]);
        sflags = MOR_SERVE_CONTEXT_SHIFT;   /* requests that fit: not a bit different */
        serve_and_compare(m, "DEPTHWISE with MOR_SERVE_CONTEXT_SHIFT, 32 requests that fit, in 9 slots",
                          MOR_SERVE_DEPTHWISE, 32, 9, 0, 0, 0);
        serve_and_compare(m, "SEQUENCE with MOR_SERVE_CONTEXT_SHIFT, 7 requests that fit", MOR_SERVE_SEQUENCE, 7, 7, 0, 0, 0);
        sflags = 0;
        if (v < 2 || !getenv("MOR_TEST_EMULATED")) speculation(m, variants[v]);
        if (expert) confidence_exits(m, v == 2);   /* (last: it redoes the reference with a depth cap) */
        unprepare();
        mor_model_free(m);
    }
    free(plain_first[0]);
    free(plain_first[1]);
    /* KV sharing with a first capacity below 1: THRESHOLD drops tokens before
     * recursion 0, which still caches their K/V (decode.c runs them through
     * its block for that; DEPTHWISE keeps such a row for one K/V-only pass) */
    {
        char path[800];
        snprintf(path, sizeof path, "%s/expert_mc3_kvshare_c0half.gguf", fixture_dir);
        mor_model *m = NULL;
        if (REQUIRE(mor_model_load_file(path, NULL, &m) == MOR_OK, "load the KV-sharing model with capacity 0.5 first") &&
            prepare(m, "KV sharing, first capacity 0.5")) {
            int zero = 0;
            for (int32_t i = 0; i < NREQ; i++)
                for (int32_t t = 0; t < reqs[i].n_out; t++) zero |= reqs[i].depth[t] == 0;
            CHECK(zero, "KV sharing, first capacity 0.5: some tokens skip recursion 0");
            for (int mode = 0; mode < 3; mode++) {
                char what[160];
                snprintf(what, sizeof what, "KV sharing, first capacity 0.5: %s 32 requests in 9 slots", mode_name[mode]);
                serve_and_compare(m, what, mode, 32, 9, 0, 0, 0);
            }
            lockstep = 1;
            serve_and_compare(m, "KV sharing, first capacity 0.5: SEQUENCE lockstep 7 requests", MOR_SERVE_SEQUENCE, 7, 7, 0, 0, 0);
            lockstep = 0;
            drain = 1;
            serve_and_compare(m, "KV sharing, first capacity 0.5: DEPTHWISE with drain, 7 requests", MOR_SERVE_DEPTHWISE, 7, 7, 0, 0, 0);
            drain = 0;
            small_budget(m, "KV sharing, first capacity 0.5");
            dense_serving(m, "expert, KV sharing, first capacity 0.5");
        }
        unprepare();
        mor_model_free(m);
        snprintf(path, sizeof path, "%s/token_mc3_kvshare.gguf", fixture_dir);
        m = NULL;
        if (REQUIRE(mor_model_load_file(path, NULL, &m) == MOR_OK, "load the token-choice model with KV sharing") &&
            prepare(m, "token-choice, KV sharing"))
            dense_serving(m, "token-choice, KV sharing");
        unprepare();
        mor_model_free(m);
    }
    /* other model families, relaxed recursive, without routers: rows of different recursions of one
     * tied block run in one layer call under DEPTHWISE; Gemma 2's tied layers differ in their window */
    /* and llama.cpp's looped Llama (nanbeige), 3 loops with the norm between them, where the
     * confidence exits (no router needed) stop tokens after fewer loops */
    static const char *const fams[] = { "gemma2_cycle3", "gptneox_cycle2", "nanbeige_n3t" };
    for (int f = 0; f < 3; f++) {
        char path[800];
        snprintf(path, sizeof path, "%s/%s.gguf", fixture_dir, fams[f]);
        mor_model *m = NULL;
        const int looped = f == 2;
        if (!REQUIRE(mor_model_load_file(path, NULL, &m) == MOR_OK &&
                     (looped ? m->arch.loop_norm && m->n_rec == 3 : m->arch.family != FAMILY_LLAMA && m->lora),
                   "load %s (%s): %s", fams[f], looped ? "a looped model" : "a relaxed model of another family",
                   mor_last_error())) {
            mor_model_free(m);
            continue;
        }
        n_vocab = mor_model_n_vocab(m);
        make_requests(n_vocab);
        int ok = 1;
        for (int32_t i = 0; i < NREQ; i++) {
            reqs[i].logits = malloc(sizeof(float) * MAXT * (size_t)n_vocab);
            got_logits[i] = malloc(sizeof(float) * MAXT * (size_t)n_vocab);
            ok &= reqs[i].logits && got_logits[i];
        }
        if (REQUIRE(ok && reference(m, 0, 0), "%s: reference decode", fams[f]))
            for (int mode = 0; mode < 3; mode++)
                for (int k = 0; k < 2; k++) {   /* 32 slots: requests enter at every step, so a DEPTHWISE
                                                 * layer call has rows of several recursions */
                    char what[160];
                    snprintf(what, sizeof what, "%s %s 32 requests in %d slots", fams[f], mode_name[mode], k ? 32 : 9);
                    serve_and_compare(m, what, mode, 32, k ? 32 : 9, 0, 0, 0);
                }
        if (looped) confidence_exits(m, 0);
        unprepare();
        mor_model_free(m);
    }
    /* random-weight models in F32 and Q8_0 (where the budget's cell reuse first showed as other tokens) */
    char dir[600], cmd[700];
    snprintf(dir, sizeof dir, "%s/build/tmp", out && *out ? out : ".");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    REQUIRE(system(cmd) == 0, "scratch directory %s", dir);
    static const uint32_t types[2] = { GGML_F32, GGML_Q8_0 };
    for (int t = 0; t < 2; t++) {
        /* d 256, 8 layers (1 + 3 x 2 + 1), heads 4/2 of 64, ffn 512, vocab 256; on the code before
         * attention summed in position order, this Q8_0 model gave other tokens */
        synth_spec sp = { 256, 8, 4, 2, 64, 512, 256, 256, 3, types[t], types[t], 11, 0 };
        char path[760], name[64];
        snprintf(path, sizeof path, "%s/serve-synth-%d-%ld.gguf", dir, t, (long)getpid());
        snprintf(name, sizeof name, "random-weight %s", t ? "Q8_0" : "F32");
        mor_model *m = NULL;
        if (!REQUIRE(synth_write(&sp, path) == 0 && mor_model_load_file(path, NULL, &m) == MOR_OK, "%s model", name))
            continue;
        if (prepare(m, name)) { small_budget(m, name); chunked_prefill(m, name); }
        unprepare();
        mor_model_free(m);
        remove(path);
    }
    fast_bf16_serving(dir);
    return check_done();
}
