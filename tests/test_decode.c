/* test_decode.c - the decode API on converted fixture models:
 *  - causal routing (THRESHOLD, FORCED, token-choice): prefill then one token at
 *    a time, for several sequences of different lengths decoded in the same
 *    batches, equals one forward over each whole sequence (1e-5);
 *  - KV accounting matches the formulas (recursion-wise and shared);
 *  - sequence operations (copy a prefix, remove a range, keep one);
 *  - every misuse returns a named status and changes nothing.
 * Models come from $OUT/build/fixtures/<variant>.st.gguf (made by `make test`). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "mor.h"

static char fixture_dir[512];

static mor_model *load(const char *variant)
{
    char path[768];
    snprintf(path, sizeof path, "%s/%s%s", fixture_dir, variant, strstr(variant, ".gguf") ? "" : ".st.gguf");
    mor_model *m = NULL;
    mor_status st = mor_model_load_file(path, NULL, &m);
    CHECK(st == MOR_OK, "load %s: %s %s", variant, mor_status_str(st), mor_last_error());
    return m;
}

static mor_context *make_ctx(mor_model *m, int32_t kv_mode, uint32_t n_ctx, uint32_t n_seq, int32_t mode, int32_t forced)
{
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.kv_mode = kv_mode; cp.n_ctx = n_ctx; cp.n_seq_max = n_seq; cp.n_batch = 64;
    mor_context *c = NULL;
    if (mor_context_create(m, &cp, &c)) return NULL;
    if (mode != MOR_ROUTE_DEFAULT && mor_router_set_mode(mor_context_router(c), mode, forced)) {
        mor_context_free(c);
        return NULL;
    }
    return c;
}

/* Deterministic token streams, different per sequence. */
static mor_token tok(int32_t seq, int32_t pos, int32_t n_vocab) { return (mor_token)((seq * 7919 + pos * 104729 + 13) % n_vocab); }

enum { NSEQ = 3, MAXLEN = 14 };
static const int32_t seq_len[NSEQ] = { 14, 9, 5 };
static const int32_t prefill[NSEQ] = { 6, 1, 3 };

/* mor_embeddings_seq: the pooled final hidden state of a sequence's rows of
 * the last decode: the mean / last of mor_get_hidden's last point, the same
 * bits whether the sequence is decoded alone or beside another one (causal
 * routing), normalized to unit length; misuse changes nothing. */
static void check_embeddings(mor_model *m, const char *name, int32_t mode)
{
    const int32_t d = mor_model_n_embd(m), nb = mor_model_n_boundaries(m), L = 7;
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.flags = MOR_CTX_CAPTURE_HIDDEN; cp.n_ctx = 64; cp.n_seq_max = 2; cp.n_batch = 32;
    mor_context *c = NULL, *plain = NULL;
    mor_batch *b = NULL;
    float *e = calloc((size_t)d * 8, sizeof(float)), *ref = e + d, *alone = e + 2 * d, *lst = e + 3 * d;
    int ok = mor_context_create(m, &cp, &c) == MOR_OK && mor_batch_create(32, &b) == MOR_OK && e &&
             mor_router_set_mode(mor_context_router(c), mode, 0) == MOR_OK;
    CHECK(ok, "%s embeddings: context", name);
    if (!ok) goto done;
    /* sequence 1 alone */
    for (int32_t p = 0; p < L; p++) mor_batch_add(b, tok(1, p, mor_model_n_vocab(m)), p, 1, 0);
    ok = mor_decode(c, b) == MOR_OK && mor_embeddings_seq(c, 1, MOR_POOL_MEAN, 0, alone, d) == MOR_OK;
    CHECK(ok, "%s embeddings: mean of a sequence decoded alone (%s)", name, mor_last_error());
    double worst = 0;
    for (int32_t j = 0; j < d && ok; j++) {
        double s = 0;
        for (int32_t i = 0; i < L; i++) s += mor_get_hidden(c, nb - 1, i)[j];
        double diff = fabs(s / L - alone[j]);
        if (diff > worst) worst = diff;
    }
    CHECK(ok && worst < 1e-6, "%s embeddings: MOR_POOL_MEAN is the mean of the final hidden states (%.3g)", name, worst);
    ok = mor_embeddings_seq(c, 1, MOR_POOL_LAST, 0, lst, d) == MOR_OK;
    CHECK(ok && memcmp(lst, mor_get_hidden(c, nb - 1, L - 1), sizeof(float) * (size_t)d) == 0,
          "%s embeddings: MOR_POOL_LAST is the last row's final hidden state", name);
    /* interleaved with sequence 0 in one batch: the same bits */
    mor_kv_clear(mor_context_kv(c));
    mor_batch_clear(b);
    for (int32_t p = 0; p < L; p++) {
        mor_batch_add(b, tok(0, p, mor_model_n_vocab(m)), p, 0, 0);
        mor_batch_add(b, tok(1, p, mor_model_n_vocab(m)), p, 1, 0);
    }
    ok = mor_decode(c, b) == MOR_OK && mor_embeddings_seq(c, 1, MOR_POOL_MEAN, 0, ref, d) == MOR_OK;
    CHECK(ok && memcmp(ref, alone, sizeof(float) * (size_t)d) == 0,
          "%s embeddings: a sequence pooled from a batch shared with another gives the same bits", name);
    ok = mor_embeddings_seq(c, 1, MOR_POOL_MEAN, MOR_EMBD_NORMALIZE, ref, d) == MOR_OK;
    double n2 = 0, cosv = 0, a2 = 0;
    for (int32_t j = 0; j < d; j++) { n2 += (double)ref[j] * ref[j]; cosv += (double)ref[j] * alone[j]; a2 += (double)alone[j] * alone[j]; }
    CHECK(ok && fabs(n2 - 1) < 1e-5 && fabs(cosv / sqrt(a2) - 1) < 1e-5,
          "%s embeddings: MOR_EMBD_NORMALIZE gives unit length, the same direction (|e|^2 = %.7f)", name, n2);
    /* misuse: a status, out untouched */
    for (int32_t j = 0; j < d; j++) lst[j] = 42.0f;
    int bad = mor_embeddings_seq(c, 1, 0, 0, lst, d) == MOR_E_INVALID_ARG &&
              mor_embeddings_seq(c, 1, MOR_POOL_MEAN, 2, lst, d) == MOR_E_INVALID_ARG &&
              mor_embeddings_seq(c, 1, MOR_POOL_MEAN, 0, lst, d - 1) == MOR_E_BUFFER_TOO_SMALL &&
              mor_embeddings_seq(c, 1, MOR_POOL_MEAN, 0, NULL, d) == MOR_E_INVALID_ARG &&
              mor_embeddings_seq(NULL, 1, MOR_POOL_MEAN, 0, lst, d) == MOR_E_INVALID_ARG;
    mor_kv_seq_rm(mor_context_kv(c), 1, -1, -1);
    mor_batch_clear(b);
    mor_batch_add(b, tok(0, L, mor_model_n_vocab(m)), L, 0, 0);
    bad = bad && mor_decode(c, b) == MOR_OK && mor_embeddings_seq(c, 1, MOR_POOL_MEAN, 0, lst, d) == MOR_E_OUT_OF_RANGE;
    int untouched = 1;
    for (int32_t j = 0; j < d; j++) untouched &= lst[j] == 42.0f;
    CHECK(bad && untouched, "%s embeddings: bad pooling, flags, cap, NULL, a sequence absent from the last decode: "
          "a status each, out untouched", name);
    cp.flags = 0;
    ok = mor_context_create(m, &cp, &plain) == MOR_OK && mor_decode(plain, b) == MOR_OK;
    CHECK(ok && mor_embeddings_seq(plain, 0, MOR_POOL_MEAN, 0, lst, d) == MOR_E_INVALID_ARG &&
          strstr(mor_last_error(), "MOR_CTX_CAPTURE_HIDDEN"),
          "%s embeddings: a context without MOR_CTX_CAPTURE_HIDDEN is refused by name", name);
done:
    mor_context_free(plain);
    mor_context_free(c);
    mor_batch_free(b);
    free(e);
}

/* logits of every position of sequence s, from one forward over it alone */
static int reference(mor_model *m, int32_t kv_mode, int32_t mode, int32_t forced, float *out /* [NSEQ][MAXLEN][V] */)
{
    const int32_t V = mor_model_n_vocab(m);
    mor_batch *b;
    mor_batch_create(64, &b);
    int ok = 1;
    for (int32_t s = 0; s < NSEQ && ok; s++) {
        mor_context *c = make_ctx(m, kv_mode, 64, 1, mode, forced);
        mor_batch_clear(b);
        for (int32_t p = 0; p < seq_len[s]; p++) mor_batch_add(b, tok(s, p, V), p, 0, 1);
        ok = c && mor_decode(c, b) == MOR_OK;
        for (int32_t p = 0; ok && p < seq_len[s]; p++)
            memcpy(out + ((size_t)s * MAXLEN + p) * V, mor_get_logits(c, p), sizeof(float) * (size_t)V);
        mor_context_free(c);
    }
    mor_batch_free(b);
    return ok;
}

/* Prefill each sequence's first prefill[s] tokens in one batch, then add one
 * token per unfinished sequence per batch; compare every logits row. */
static void check_incremental(mor_model *m, const char *name, int32_t kv_mode, int32_t mode, int32_t forced)
{
    const int32_t V = mor_model_n_vocab(m);
    float *ref = malloc(sizeof(float) * NSEQ * MAXLEN * (size_t)V);
    if (!CHECK(ref && reference(m, kv_mode, mode, forced, ref), "%s: reference forward", name)) { free(ref); return; }
    mor_context *c = make_ctx(m, kv_mode, 64, NSEQ, mode, forced);
    mor_batch *b;
    mor_batch_create(64, &b);
    double worst = 0;
    int32_t next[NSEQ];
    int ok = c != NULL;
    /* prefill: sequences interleaved row by row */
    mor_batch_clear(b);
    for (int32_t p = 0; p < MAXLEN; p++)
        for (int32_t s = 0; s < NSEQ; s++)
            if (p < prefill[s]) mor_batch_add(b, tok(s, p, V), p, s, 1);
    int32_t rows[NSEQ * MAXLEN][2], nrows = 0;
    for (int32_t p = 0; p < MAXLEN; p++)
        for (int32_t s = 0; s < NSEQ; s++)
            if (p < prefill[s]) { rows[nrows][0] = s; rows[nrows][1] = p; nrows++; }
    for (int32_t s = 0; s < NSEQ; s++) next[s] = prefill[s];
    for (int step = 0; ok; step++) {
        ok = mor_decode(c, b) == MOR_OK;
        for (int32_t i = 0; ok && i < nrows; i++) {
            const float *l = mor_get_logits(c, i);
            double d = check_maxdiff(l, ref + ((size_t)rows[i][0] * MAXLEN + rows[i][1]) * V, V);
            if (d > worst) worst = d;
        }
        mor_batch_clear(b);
        nrows = 0;
        for (int32_t s = NSEQ - 1; s >= 0; s--)   /* reversed order: sequences need not be sorted */
            if (next[s] < seq_len[s]) {
                mor_batch_add(b, tok(s, next[s], V), next[s], s, 1);
                rows[nrows][0] = s; rows[nrows][1] = next[s]; nrows++;
                next[s]++;
            }
        if (!nrows) break;
    }
    CHECK(ok && worst <= 1e-5, "%s: prefill + decode of %d sequences equals one forward each (max diff %.3g)",
          name, NSEQ, worst);
    mor_batch_free(b);
    mor_context_free(c);
    free(ref);
}

/* KV bytes per recursion follow from the depths: recursion-wise caching stores
 * a token at recursion r iff its depth > r; sharing stores every token at
 * r = 0 (even those of depth 0, below a first capacity of 1) and nothing past it;
 * dense caching stores every token at every recursion. */
static void check_kv_accounting(mor_model *m, const char *name, int32_t kv_mode)
{
    const int32_t V = mor_model_n_vocab(m), nr = mor_model_n_recursion(m);
    const int32_t n_ctx = 32, T = 16;
    mor_context *c = make_ctx(m, kv_mode, (uint32_t)n_ctx, 1, MOR_ROUTE_DEFAULT, 0);
    mor_batch *b;
    mor_batch_create(64, &b);
    for (int32_t p = 0; p < T; p++) mor_batch_add(b, tok(0, p, V), p, 0, 0);
    int ok = c && mor_decode(c, b) == MOR_OK;
    int32_t depth[16];
    mor_router_get_depths(mor_context_router(c), depth, T);
    const uint64_t cell = 2ull * (uint64_t)mor_model_n_head_kv(m) * (uint64_t)mor_model_head_dim(m) * 4;
    /* K (layers per recursion) = (L - unique) / N_r; unique layers are 0 or 2 here */
    uint64_t ua = 0, uu = 0;
    mor_kv_bytes(mor_context_kv(c), MOR_KV_UNIQUE_LAYERS, &ua, &uu);
    int32_t n_unique = (int32_t)(ua / (cell * (uint64_t)n_ctx));
    int32_t K = (mor_model_n_layer(m) - n_unique) / nr;
    CHECK(uu == (uint64_t)n_unique * T * cell, "%s: unique layers use %llu bytes (expect %llu)", name,
          (unsigned long long)uu, (unsigned long long)n_unique * T * cell);
    uint64_t total_a = 0, total_u = 0, sum_a = ua, sum_u = uu;
    for (int32_t r = 0; ok && r < nr; r++) {
        uint64_t a, u;
        int32_t active = 0;
        for (int32_t i = 0; i < T; i++) active += depth[i] > r;
        mor_kv_bytes(mor_context_kv(c), r, &a, &u);
        const int shared = mor_kv_mode(mor_context_kv(c)) == MOR_KV_SHARED, stores = !shared || r == 0;
        if ((shared && r == 0) || mor_kv_mode(mor_context_kv(c)) == MOR_KV_DENSE) active = T;
        CHECK(a == (stores ? (uint64_t)K * n_ctx * cell : 0), "%s: recursion %d allocates %llu bytes", name, r,
              (unsigned long long)a);
        CHECK(u == (stores ? (uint64_t)K * active * cell : 0), "%s: recursion %d uses %llu bytes (%d active tokens)",
              name, r, (unsigned long long)u, active);
        CHECK(mor_kv_n_cells_used(mor_context_kv(c), r) == (stores ? K * active : 0), "%s: recursion %d cell count", name, r);
        sum_a += a; sum_u += u;
    }
    mor_kv_bytes(mor_context_kv(c), MOR_KV_ALL, &total_a, &total_u);
    CHECK(ok && total_a == sum_a && total_u == sum_u, "%s: MOR_KV_ALL is the sum", name);
    mor_batch_free(b);
    mor_context_free(c);
}

/* Copy a prefix to another sequence and continue it; remove a tail and redo it. */
static void check_seq_ops(mor_model *m, const char *name, int32_t mode)
{
    const int32_t V = mor_model_n_vocab(m);
    float *ref = malloc(sizeof(float) * NSEQ * MAXLEN * (size_t)V);
    int ok = ref && reference(m, MOR_KV_MODEL_DEFAULT, mode, 0, ref);
    mor_context *c = make_ctx(m, MOR_KV_MODEL_DEFAULT, 64, 2, mode, 0);
    mor_kv_cache *kv = mor_context_kv(c);
    mor_batch *b;
    mor_batch_create(64, &b);
    /* seq 1 gets sequence 0's first 6 tokens by copy, then decodes the rest of sequence 0 */
    for (int32_t p = 0; p < 6; p++) mor_batch_add(b, tok(0, p, V), p, 0, 0);
    ok = ok && mor_decode(c, b) == MOR_OK;
    ok = ok && mor_kv_seq_cp(kv, 0, 1, -1, -1) == MOR_OK;
    CHECK(ok && mor_kv_seq_pos_max(kv, 1) == 5, "%s: seq_cp copies the prefix (pos_max 5)", name);
    double worst = 0;
    for (int32_t p = 6; ok && p < seq_len[0]; p++) {
        mor_batch_clear(b);
        mor_batch_add(b, tok(0, p, V), p, 1, 1);
        ok = mor_decode(c, b) == MOR_OK;
        double d = ok ? check_maxdiff(mor_get_logits(c, 0), ref + (size_t)p * V, V) : 1;
        if (d > worst) worst = d;
    }
    CHECK(ok && worst <= 1e-5, "%s: decoding after a copied prefix equals the full forward (%.3g)", name, worst);
    /* remove the last 4 positions of seq 1 and decode them again */
    ok = ok && mor_kv_seq_rm(kv, 1, seq_len[0] - 4, -1) == MOR_OK;
    CHECK(ok && mor_kv_seq_pos_max(kv, 1) == seq_len[0] - 5, "%s: seq_rm removes a tail", name);
    mor_batch_clear(b);
    for (int32_t p = seq_len[0] - 4; p < seq_len[0]; p++) mor_batch_add(b, tok(0, p, V), p, 1, 1);
    ok = ok && mor_decode(c, b) == MOR_OK;
    worst = 0;
    for (int32_t i = 0; ok && i < 4; i++) {
        double d = check_maxdiff(mor_get_logits(c, i), ref + (size_t)(seq_len[0] - 4 + i) * V, V);
        if (d > worst) worst = d;
    }
    CHECK(ok && worst <= 1e-5, "%s: re-decoding a removed tail equals the full forward (%.3g)", name, worst);
    ok = ok && mor_kv_seq_keep(kv, 1) == MOR_OK;
    CHECK(ok && mor_kv_seq_pos_max(kv, 0) == -1 && mor_kv_seq_pos_max(kv, 1) == seq_len[0] - 1,
          "%s: seq_keep keeps only that sequence", name);
    mor_kv_clear(kv);
    CHECK(mor_kv_seq_pos_max(kv, 1) == -1 && mor_kv_n_cells_used(kv, MOR_KV_ALL) == 0, "%s: clear empties the cache", name);
    mor_batch_free(b);
    mor_context_free(c);
    free(ref);
}

static int abort_now(void *ud) { return --*(int *)ud < 0; }

/* Each failing call returns its named status and leaves cache and outputs alone. */
static void check_misuse(mor_model *m)
{
    const int32_t V = mor_model_n_vocab(m);
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 8; cp.n_batch = 16; cp.n_seq_max = 2;
    int abort_budget = 1 << 30;
    cp.abort_callback = abort_now; cp.abort_user_data = &abort_budget;
    mor_context *c = NULL;
    CHECK(mor_context_create(m, &cp, &c) == MOR_OK, "context with n_ctx 8");
    mor_kv_cache *kv = mor_context_kv(c);
    mor_batch *b;
    mor_batch_create(16, &b);
    for (int32_t p = 0; p < 4; p++) mor_batch_add(b, tok(0, p, V), p, 0, p == 3);
    CHECK(mor_decode(c, b) == MOR_OK, "decode 4 tokens");
    float saved[4096];
    memcpy(saved, mor_get_logits(c, 3), sizeof(float) * (size_t)(V < 4096 ? V : 4096));
    int64_t cells = mor_kv_n_cells_used(kv, MOR_KV_ALL);

#define UNCHANGED(what) CHECK(mor_kv_n_cells_used(kv, MOR_KV_ALL) == cells && mor_kv_seq_pos_max(kv, 0) == 3 && \
        mor_get_logits(c, 3) && memcmp(saved, mor_get_logits(c, 3), sizeof(float) * (size_t)(V < 4096 ? V : 4096)) == 0, \
        "%s leaves the cache and the outputs unchanged", what)

    mor_batch_clear(b); mor_batch_add(b, V, 4, 0, 1);
    CHECK(mor_decode(c, b) == MOR_E_OUT_OF_RANGE && strlen(mor_last_error()) > 0, "token id out of range -> MOR_E_OUT_OF_RANGE (%s)", mor_last_error());
    UNCHANGED("a bad token");
    mor_batch_clear(b); mor_batch_add(b, -1, 4, 0, 1);
    CHECK(mor_decode(c, b) == MOR_E_OUT_OF_RANGE, "negative token id -> MOR_E_OUT_OF_RANGE");
    mor_batch_clear(b); mor_batch_add(b, 1, 4, 2, 1);
    CHECK(mor_decode(c, b) == MOR_E_OUT_OF_RANGE, "sequence id >= n_seq_max -> MOR_E_OUT_OF_RANGE");
    mor_batch_clear(b); mor_batch_add(b, 1, 3, 0, 1);
    CHECK(mor_decode(c, b) == MOR_E_POSITION, "position already cached -> MOR_E_POSITION");
    mor_batch_clear(b); mor_batch_add(b, 1, 6, 0, 1); mor_batch_add(b, 1, 5, 0, 1);
    CHECK(mor_decode(c, b) == MOR_E_POSITION, "positions out of order in a batch -> MOR_E_POSITION");
    UNCHANGED("a bad position");
    mor_batch_clear(b);
    for (int32_t p = 4; p < 10; p++) mor_batch_add(b, tok(0, p, V), p, 0, 1);
    CHECK(mor_decode(c, b) == MOR_E_KV_FULL, "a full cache -> MOR_E_KV_FULL");
    UNCHANGED("a full cache");
    mor_batch_clear(b); mor_batch_add(b, tok(0, 4, V), 4, 0, 1);
    abort_budget = 1;   /* let one recursion step through, then abort */
    CHECK(mor_decode(c, b) == MOR_E_ABORTED, "the abort callback -> MOR_E_ABORTED");
    UNCHANGED("an aborted decode");
    abort_budget = 1 << 30;
    CHECK(mor_decode(c, b) == MOR_OK && mor_kv_seq_pos_max(kv, 0) == 4, "the same decode then succeeds");
    mor_batch_clear(b);
    CHECK(mor_decode(c, b) == MOR_E_INVALID_ARG, "empty batch -> MOR_E_INVALID_ARG");
    CHECK(mor_decode(NULL, b) == MOR_E_INVALID_ARG && mor_decode(c, NULL) == MOR_E_INVALID_ARG, "NULL handles -> MOR_E_INVALID_ARG");
    mor_batch *big;
    mor_batch_create(32, &big);
    for (int32_t p = 5; p < 25; p++) mor_batch_add(big, 1, p, 0, 0);
    CHECK(mor_decode(c, big) == MOR_E_INVALID_ARG, "more tokens than n_batch -> MOR_E_INVALID_ARG");
    mor_batch_free(big);
    CHECK(mor_get_logits(c, 99) == NULL && mor_get_logits(c, -1) == NULL && mor_get_logits(NULL, 0) == NULL, "logits out of range -> NULL");
    CHECK(mor_kv_seq_rm(kv, 7, -1, -1) == MOR_E_OUT_OF_RANGE && mor_kv_seq_cp(kv, 0, 9, -1, -1) == MOR_E_OUT_OF_RANGE,
          "kv sequence ops check ids");
    int64_t before = mor_kv_n_cells_used(kv, MOR_KV_ALL);
    int ok1 = mor_kv_seq_cp(kv, 0, 1, 0, 1) == MOR_OK;
    int64_t once = mor_kv_n_cells_used(kv, MOR_KV_ALL);
    int ok2 = mor_kv_seq_cp(kv, 0, 1, 0, 1) == MOR_OK;
    CHECK(ok1 && ok2 && once > before && mor_kv_n_cells_used(kv, MOR_KV_ALL) == once && mor_kv_seq_pos_max(kv, 1) == 0,
          "seq_cp twice replaces, not duplicates");
    CHECK(mor_kv_seq_cp(kv, 0, 1, -1, -1) == MOR_E_KV_FULL && mor_kv_n_cells_used(kv, MOR_KV_ALL) == once,
          "seq_cp without room -> MOR_E_KV_FULL, nothing copied");
    CHECK(mor_kv_bytes(NULL, 0, NULL, NULL) == MOR_E_INVALID_ARG && mor_kv_bytes(kv, 99, NULL, NULL) == MOR_E_OUT_OF_RANGE,
          "kv_bytes checks its arguments");
    mor_router *r = mor_context_router(c);
    CHECK(mor_router_set_mode(r, MOR_ROUTE_FORCED, 0) == MOR_E_OUT_OF_RANGE &&
          mor_router_set_mode(r, MOR_ROUTE_FORCED, mor_model_n_recursion(m) + 1) == MOR_E_OUT_OF_RANGE,
          "forced depth out of range");
    CHECK(mor_router_set_mode(r, 77, 0) == MOR_E_INVALID_ARG, "unknown routing mode");
    CHECK(mor_router_set_threshold(r, 99, 0.5f) == MOR_E_OUT_OF_RANGE && mor_router_set_max_depth(r, -1) == MOR_E_OUT_OF_RANGE,
          "router setters check ranges");
    mor_router_stats rs;
    rs.size = 4;
    CHECK(mor_router_get_stats(r, &rs) == MOR_E_ABI, "stats struct too small -> MOR_E_ABI");
    mor_context_params bad;
    MOR_CONTEXT_PARAMS_INIT(&bad);
    bad.size = 3;
    mor_context *c2 = NULL;
    CHECK(mor_context_create(m, &bad, &c2) == MOR_E_ABI && c2 == NULL, "params with a foreign size -> MOR_E_ABI");
    CHECK(mor_context_create(NULL, NULL, &c2) == MOR_E_INVALID_ARG, "NULL model -> MOR_E_INVALID_ARG");
    mor_batch_free(b);
    mor_context_free(c);
    mor_context_free(NULL);
    mor_model_free(NULL);
    mor_batch_free(NULL);
#undef UNCHANGED
}

/* Truncations and bit flips of a real file: a named error or a valid load, never a crash. */
static void check_corrupt_files(const char *variant)
{
    char path[768];
    snprintf(path, sizeof path, "%s/%s.st.gguf", fixture_dir, variant);
    FILE *f = fopen(path, "rb");
    if (!CHECK(f != NULL, "open %s", path)) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n), *work = malloc((size_t)n);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    int all_format = 1, crashes = 0;
    for (long cut = 0; cut < n; cut += cut < 4096 ? 7 : 4093) {
        mor_model *m = NULL;
        memcpy(work, buf, (size_t)cut);
        mor_status st = mor_model_load_memory(work, (size_t)cut, NULL, &m);
        if (st != MOR_E_FORMAT || m) all_format = 0;
        mor_model_free(m);
    }
    CHECK(got == (size_t)n && all_format, "every truncation of %s -> MOR_E_FORMAT", variant);
    uint32_t rng = 12345;
    int loaded = 0, rejected = 0;
    for (int t = 0; t < 400; t++) {
        memcpy(work, buf, (size_t)n);
        for (int k = 0; k < 3; k++) {
            rng = rng * 1664525u + 1013904223u;
            long at = (long)(rng % (uint32_t)(t < 300 ? (n < 6000 ? n : 6000) : n));   /* mostly the header */
            work[at] ^= (uint8_t)(1u << ((rng >> 24) & 7));
        }
        mor_model *m = NULL;
        mor_status st = mor_model_load_memory(work, (size_t)n, NULL, &m);
        if (st == MOR_OK) {
            loaded++;
            mor_context *c = NULL;   /* a model that loads must also run without crashing */
            if (mor_context_create(m, NULL, &c) == MOR_OK) {
                mor_batch *b;
                mor_batch_create(4, &b);
                mor_batch_add(b, 1, 0, 0, 1); mor_batch_add(b, 2, 1, 0, 1);
                mor_decode(c, b);
                mor_batch_free(b);
                mor_context_free(c);
            }
        } else if (st < 0 && st >= MOR_E_INTERNAL && st != MOR_E_INTERNAL) rejected++;
        else crashes++;
        mor_model_free(m);
    }
    CHECK(crashes == 0, "400 bit-flipped files: %d rejected with a named status, %d still valid", rejected, loaded);
    /* targeted edits */
    const char *edits[][2] = { { "mor.vocab_size", "mor.vocab_sizf" }, { "general.architecture", "general.architectur3" } };
    for (int e = 0; e < 2; e++) {
        memcpy(work, buf, (size_t)n);
        uint8_t *p = memmem(work, (size_t)n, edits[e][0], strlen(edits[e][0]));
        if (p) memcpy(p, edits[e][1], strlen(edits[e][1]));
        mor_model *m = NULL;
        mor_status st = mor_model_load_memory(work, (size_t)n, NULL, &m);
        CHECK(p && st == MOR_E_FORMAT && !m, "renamed key %s -> MOR_E_FORMAT (%s)", edits[e][0], mor_last_error());
        mor_model_free(m);
    }
    memcpy(work, buf, (size_t)n);
    uint8_t *p = memmem(work, (size_t)n, "token_embd.weight", 17);
    if (p) { uint64_t bad = 63; memcpy(p + 17 + 4, &bad, 8); }   /* first dim 64 -> 63 */
    mor_model *m = NULL;
    mor_status st = mor_model_load_memory(work, (size_t)n, NULL, &m);
    CHECK(p && st == MOR_E_FORMAT, "a tensor of the wrong shape -> MOR_E_FORMAT (%s)", mor_last_error());
    mor_model_free(m);
    work[4] = 2;
    CHECK(mor_model_load_memory(work, (size_t)n, NULL, &m) == MOR_E_FORMAT, "GGUF version 2 -> MOR_E_FORMAT");
    CHECK(mor_model_load_file("/nonexistent/x.gguf", NULL, &m) == MOR_E_IO && m == NULL, "missing file -> MOR_E_IO");
    CHECK(mor_model_load_file(NULL, NULL, &m) == MOR_E_INVALID_ARG, "NULL path -> MOR_E_INVALID_ARG");
    free(buf); free(work);
}

int main(void)
{
    const char *out = getenv("OUT");
    snprintf(fixture_dir, sizeof fixture_dir, "%s/build/fixtures", out && *out ? out : ".");

    mor_model *ex = load("expert_mc3_fix_perturbed");
    mor_model *exu = load("expert_mc3_perturbed");
    mor_model *tc = load("token_mc3_perturbed");
    mor_model *ks = load("expert_mc3_kvshare_fix_perturbed");
    mor_model *cy = load("expert_cycle2_alpha1_perturbed");
    mor_model *kh = load("expert_mc3_kvshare_c0half.gguf");   /* capacities 0.5, 0.5, 0.25 */
    mor_model *tk = load("token_mc3_kvshare.gguf");           /* token-choice with KV sharing */
    if (!ex || !exu || !tc || !ks || !cy || !kh || !tk) return check_done();

    check_incremental(ex, "expert THRESHOLD", MOR_KV_MODEL_DEFAULT, MOR_ROUTE_THRESHOLD, 0);
    check_incremental(exu, "expert (untied attention) THRESHOLD", MOR_KV_MODEL_DEFAULT, MOR_ROUTE_THRESHOLD, 0);
    for (int32_t d = 1; d <= 3; d++) {
        char name[64];
        snprintf(name, sizeof name, "expert FORCED:%d", d);
        check_incremental(ex, name, MOR_KV_MODEL_DEFAULT, MOR_ROUTE_FORCED, d);
    }
    check_incremental(tc, "token-choice", MOR_KV_MODEL_DEFAULT, MOR_ROUTE_TOKEN, 0);
    check_incremental(tc, "token-choice FORCED:2", MOR_KV_MODEL_DEFAULT, MOR_ROUTE_FORCED, 2);
    check_incremental(tc, "token-choice, KV shared", MOR_KV_SHARED, MOR_ROUTE_TOKEN, 0);
    check_incremental(ks, "expert THRESHOLD, KV shared", MOR_KV_MODEL_DEFAULT, MOR_ROUTE_THRESHOLD, 0);
    check_incremental(ks, "expert FORCED:3, KV shared", MOR_KV_MODEL_DEFAULT, MOR_ROUTE_FORCED, 3);
    check_incremental(cy, "cycle THRESHOLD", MOR_KV_MODEL_DEFAULT, MOR_ROUTE_THRESHOLD, 0);
    check_incremental(kh, "expert THRESHOLD, KV shared, first capacity 0.5", MOR_KV_MODEL_DEFAULT, MOR_ROUTE_THRESHOLD, 0);
    check_incremental(kh, "expert THRESHOLD, MOR_KV_DENSE, first capacity 0.5", MOR_KV_DENSE, MOR_ROUTE_THRESHOLD, 0);
    check_incremental(ks, "expert FORCED:2, MOR_KV_DENSE", MOR_KV_DENSE, MOR_ROUTE_FORCED, 2);
    check_incremental(tk, "token-choice, MOR_KV_DENSE", MOR_KV_DENSE, MOR_ROUTE_TOKEN, 0);
    check_incremental(tk, "token-choice, KV shared (file default)", MOR_KV_MODEL_DEFAULT, MOR_ROUTE_TOKEN, 0);
    /* MOR_KV_DENSE is a mode of KV-sharing models; without sharing it is the default, recursion-wise */
    {
        mor_context *a = make_ctx(ks, MOR_KV_DENSE, 64, 1, 0, 0), *b = make_ctx(ex, MOR_KV_DENSE, 64, 1, 0, 0);
        CHECK(a && b && mor_kv_mode(mor_context_kv(a)) == MOR_KV_DENSE &&
              mor_kv_mode(mor_context_kv(b)) == MOR_KV_RECURSION_WISE,
              "MOR_KV_DENSE: in effect on a KV-sharing model, recursion-wise on one without sharing");
        mor_context_free(a);
        mor_context_free(b);
    }

    /* THRESHOLD with every threshold at -inf equals FORCED full depth */
    {
        mor_context *a = make_ctx(ex, 0, 64, 1, MOR_ROUTE_THRESHOLD, 0), *f = make_ctx(ex, 0, 64, 1, MOR_ROUTE_FORCED, 3);
        for (int r = 0; r < 3; r++) mor_router_set_threshold(mor_context_router(a), r, -INFINITY);
        mor_batch *b;
        mor_batch_create(16, &b);
        for (int32_t p = 0; p < 10; p++) mor_batch_add(b, tok(1, p, 256), p, 0, 1);
        int ok = mor_decode(a, b) == MOR_OK && mor_decode(f, b) == MOR_OK;
        double d = ok ? check_maxdiff(mor_get_logits(a, 9), mor_get_logits(f, 9), 256) : 1;
        int32_t depth[10];
        mor_router_get_depths(mor_context_router(a), depth, 10);
        CHECK(ok && d == 0 && depth[0] == 3 && depth[9] == 3, "THRESHOLD at -inf equals FORCED full depth");
        /* a max-depth cap of 1 gives depth 1 everywhere */
        mor_router_set_max_depth(mor_context_router(a), 1);
        mor_kv_clear(mor_context_kv(a));
        ok = mor_decode(a, b) == MOR_OK;
        mor_router_get_depths(mor_context_router(a), depth, 10);
        CHECK(ok && depth[0] == 1 && depth[5] == 1, "max depth 1 caps every token");
        float sc[3];
        CHECK(mor_router_get_scores(mor_context_router(a), 0, sc, 3) == 3 && sc[0] > 0 && isnan(sc[1]),
              "scores: the gate where the token was a candidate, NaN where it was not");
        mor_router_stats rs = { sizeof rs, 0, 0, { 0 } };
        CHECK(mor_router_get_stats(mor_context_router(a), &rs) == MOR_OK && rs.n_tokens == 20 && rs.n_at_depth[1] == 10,
              "router stats count tokens per depth (%llu tokens)", (unsigned long long)rs.n_tokens);
        mor_batch_free(b);
        mor_context_free(a);
        mor_context_free(f);
    }

    check_kv_accounting(ex, "expert recursion-wise", MOR_KV_RECURSION_WISE);
    check_kv_accounting(ex, "expert shared", MOR_KV_SHARED);
    check_kv_accounting(ks, "kv-share model default", MOR_KV_MODEL_DEFAULT);
    check_kv_accounting(kh, "kv-share model, first capacity 0.5", MOR_KV_MODEL_DEFAULT);
    check_kv_accounting(kh, "kv-share model, first capacity 0.5, MOR_KV_DENSE", MOR_KV_DENSE);
    check_kv_accounting(cy, "cycle recursion-wise", MOR_KV_RECURSION_WISE);
    check_kv_accounting(tc, "token recursion-wise", MOR_KV_RECURSION_WISE);
    check_seq_ops(ex, "expert THRESHOLD", MOR_ROUTE_THRESHOLD);
    check_seq_ops(tc, "token-choice", MOR_ROUTE_TOKEN);
    check_misuse(ex);
    check_embeddings(ex, "expert THRESHOLD", MOR_ROUTE_THRESHOLD);
    check_embeddings(tc, "token-choice", MOR_ROUTE_TOKEN);
    check_corrupt_files("expert_mc3_fix_perturbed");
    check_corrupt_files("token_mc3_perturbed");

    mor_model_free(ex); mor_model_free(exu); mor_model_free(tc); mor_model_free(ks); mor_model_free(cy); mor_model_free(kh); mor_model_free(tk);
    return check_done();
}
