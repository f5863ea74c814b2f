/* fuzz_decode.c - the decode API driven by random operations on the tiny
 * models of tests/fuzz/models/: batches of random tokens, positions and
 * sequences (valid or not), KV sequence operations, routing settings and an
 * abort callback. After every call the observable state is checked: a
 * successful decode gives the rows it promised; a failed one (any status)
 * leaves the cache accounting, the positions and the previous outputs as
 * they were.
 *
 * Input: 4 header bytes, then operations.
 *   [0] model (tests/fuzz/models, in the order of model_names)
 *   [1] bits 0-1 kv mode (default, recursion-wise, shared), bit 2 capture
 *       hidden states, bit 3 no maximum context (max_pos -1)
 *   [2] n_ctx = 2 + [2] % 40        [3] n_batch = 1 + [3] % 16,
 *                                       n_seq_max = 1 + ([3] >> 4) % 4
 *   ops (high nibble % 8):
 *     0x0s T, 0x1s T: add token T to sequence s & 3; bits 2-3 of s: 0 the
 *             next position, 1 the last position again, 2 three ahead,
 *             3 far ahead; low bit of T also asks for logits
 *     0x2_      decode the batch, then clear it
 *     0x3k A B C  sequence op k & 3: seq_rm(A-1, B-1, C-1),
 *             seq_cp(A, B, -1, C-1), seq_keep(A), clear
 *     0x4_ M D  router mode M % 6 (forced depth D % 5)
 *     0x5_ D    max depth D % 5
 *     0x6_ R T  threshold of recursion R % 4 = T / 255
 *     0x7_ K    abort at the K-th poll of the next decodes (0: never) */
#include <math.h>
#include "fuzz.h"
#include "mor.h"

FUZZ_TARGET(decode)

static const char *const model_names[] = {
    "plain.gguf", "expert_mc.gguf", "expert_kvshare.gguf", "token_mc.gguf",
    "expert_cycle.gguf", "plain_f16.gguf", "plain_bf16.gguf",
};
#define N_MODELS ((int)(sizeof model_names / sizeof model_names[0]))
static mor_model *models[N_MODELS];

static mor_model *model(int i)
{
    if (!models[i]) {
        char path[512];
        mor_status st = mor_model_load_file(fuzz_model_path(model_names[i], path, sizeof path), NULL, &models[i]);
        FUZZ_ASSERT(st == MOR_OK, "cannot load %s (run from the repository root or set MOR_FUZZ_MODELS): %s",
                    path, mor_last_error());
    }
    return models[i];
}

typedef struct { int32_t polls, abort_at; } abort_state;

static int32_t abort_cb(void *ud)
{
    abort_state *a = ud;
    return a->abort_at > 0 && ++a->polls == a->abort_at;
}

/* What a failed call must not change. */
typedef struct {
    int64_t cells[MOR_KV_ALL < 0 ? 20 : 20];   /* per recursion, unique layers, all */
    mor_pos pos_max[4];
    int32_t n_rows, depth[16];
    float  *logits;                            /* [rows][V], rows that had logits */
} snapshot;

static void take(mor_context *c, const mor_model *m, int32_t n_seq, int32_t n_rows, snapshot *s)
{
    mor_kv_cache *kv = mor_context_kv(c);
    int32_t nr = mor_model_n_recursion(m), V = mor_model_n_vocab(m);
    for (int32_t r = 0; r < nr; r++) s->cells[r] = mor_kv_n_cells_used(kv, r);
    s->cells[nr] = mor_kv_n_cells_used(kv, MOR_KV_UNIQUE_LAYERS);
    s->cells[nr + 1] = mor_kv_n_cells_used(kv, MOR_KV_ALL);
    for (int32_t q = 0; q < n_seq; q++) s->pos_max[q] = mor_kv_seq_pos_max(kv, q);
    s->n_rows = n_rows;
    mor_router_get_depths(mor_context_router(c), s->depth, 16);
    for (int32_t i = 0; i < n_rows; i++) {
        const float *l = mor_get_logits(c, i);
        if (l) memcpy(s->logits + (size_t)i * V, l, sizeof(float) * (size_t)V);
    }
}

static void same(mor_context *c, const mor_model *m, int32_t n_seq, const snapshot *a, const char *what)
{
    int32_t nr = mor_model_n_recursion(m), V = mor_model_n_vocab(m);
    mor_kv_cache *kv = mor_context_kv(c);
    for (int32_t r = 0; r < nr; r++) FUZZ_ASSERT(a->cells[r] == mor_kv_n_cells_used(kv, r), "%s: cells of recursion %d", what, r);
    FUZZ_ASSERT(a->cells[nr] == mor_kv_n_cells_used(kv, MOR_KV_UNIQUE_LAYERS), "%s: unique cells", what);
    FUZZ_ASSERT(a->cells[nr + 1] == mor_kv_n_cells_used(kv, MOR_KV_ALL), "%s: all cells", what);
    for (int32_t q = 0; q < n_seq; q++) FUZZ_ASSERT(a->pos_max[q] == mor_kv_seq_pos_max(kv, q), "%s: pos_max %d", what, q);
    int32_t depth[16];
    int32_t n = mor_router_get_depths(mor_context_router(c), depth, 16);
    FUZZ_ASSERT(n == a->n_rows || (n < 0 && a->n_rows == 0), "%s: rows %d vs %d", what, n, a->n_rows);
    for (int32_t i = 0; i < a->n_rows && i < 16; i++) {
        FUZZ_ASSERT(depth[i] == a->depth[i], "%s: depth of row %d", what, i);
        const float *l = mor_get_logits(c, i);
        if (l) FUZZ_ASSERT(!memcmp(l, a->logits + (size_t)i * V, sizeof(float) * (size_t)V), "%s: logits of row %d", what, i);
    }
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    const int mi = data[0] % N_MODELS;
    mor_model *m = model(mi);
    static const int32_t kv_modes[4] = { MOR_KV_MODEL_DEFAULT, MOR_KV_RECURSION_WISE, MOR_KV_SHARED, MOR_KV_MODEL_DEFAULT };
    abort_state ab = { 0, 0 };
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.kv_mode = kv_modes[data[1] & 3];
    cp.flags = data[1] & 4 ? MOR_CTX_CAPTURE_HIDDEN : 0;
    cp.max_pos = data[1] & 8 ? -1 : 0;
    cp.n_ctx = 2 + data[2] % 40;
    cp.n_batch = 1 + data[3] % 16;
    cp.n_seq_max = 1 + (data[3] >> 4) % 4;
    cp.abort_callback = abort_cb;
    cp.abort_user_data = &ab;
    mor_context *c = NULL;
    mor_status st = mor_context_create(m, &cp, &c);
    if (st) {
        FUZZ_ASSERT(st == MOR_E_UNSUPPORTED && cp.kv_mode == MOR_KV_SHARED, "context: %s %s", mor_status_str(st), mor_last_error());
        return 0;
    }
    const int32_t V = mor_model_n_vocab(m), nr = mor_model_n_recursion(m), n_seq = (int32_t)cp.n_seq_max;
    mor_batch *b = NULL;
    st = mor_batch_create((int32_t)cp.n_batch + 2, &b);
    FUZZ_ASSERT(st == MOR_OK, "batch");
    snapshot snap;
    snap.logits = malloc(sizeof(float) * 16 * (size_t)V);
    int32_t rows = 0, n_ok = 0;
    mor_pos next[4] = { 0, 0, 0, 0 };       /* next position per sequence, as the fuzzer sees it */
    mor_kv_cache *kv = mor_context_kv(c);
    mor_router *rt = mor_context_router(c);
    const int trace = getenv("MOR_FUZZ_TRACE") != NULL;   /* to read what a finding does */
    if (trace) fprintf(stderr, "model %s, kv_mode %d, n_ctx %u, n_batch %u, n_seq %u\n", model_names[mi],
                       cp.kv_mode, cp.n_ctx, cp.n_batch, cp.n_seq_max);

    for (size_t i = 4; i < size;) {
        uint8_t op = data[i++];
        uint8_t a0 = i < size ? data[i] : 0, a1 = i + 1 < size ? data[i + 1] : 0, a2 = i + 2 < size ? data[i + 2] : 0;
        switch ((op >> 4) & 7) {
        case 0: case 1: {
            i++;
            int32_t s = op & 3, pm = (op >> 2) & 3;
            mor_token t = a0 >= 0xF8 ? V - 4 + (a0 - 0xF8) : (a0 == 0xF7 ? -1 : a0 % V);
            /* in 64 bits, saturated: the harness itself must not overflow */
            int64_t p64 = pm == 0 ? next[s] : pm == 1 ? (int64_t)next[s] - 1 : pm == 2 ? (int64_t)next[s] + 3
                        : (int64_t)next[s] + (a0 & 2 ? 1000 : INT32_MAX / 2);   /* past n_ctx_train: needs max_pos -1 */
            mor_pos p = (mor_pos)(p64 > INT32_MAX ? INT32_MAX : p64);
            if (mor_batch_add(b, t, p, s, a0 & 1) == MOR_OK && pm != 1) next[s] = p < INT32_MAX ? p + 1 : p;
            if (trace) fprintf(stderr, "add token %d pos %d seq %d\n", t, p, s);
            break;
        }
        case 2: {
            take(c, m, n_seq, rows, &snap);
            int32_t n = mor_batch_size(b);
            ab.polls = 0;
            st = mor_decode(c, b);
            if (trace) fprintf(stderr, "decode %d rows: %s %s\n", n, mor_status_str(st), mor_last_error());
            if (st == MOR_OK) {
                n_ok++;
                rows = n;
                int32_t depth[18];
                FUZZ_ASSERT(mor_router_get_depths(rt, depth, 18) == n, "rows after decode");
                for (int32_t r = 0; r < n && r < 18; r++)
                    FUZZ_ASSERT(depth[r] >= 0 && depth[r] <= nr, "depth %d of row %d", depth[r], r);
                for (int32_t r = 0; r < n; r++) {
                    const float *l = mor_get_logits(c, r);
                    if (!l) continue;
                    for (int32_t v = 0; v < V; v++) FUZZ_ASSERT(isfinite(l[v]), "logit %d of row %d", v, r);
                }
                FUZZ_ASSERT(mor_kv_n_cells_used(kv, MOR_KV_ALL) >= snap.cells[nr + 1], "cells shrank");
            } else {
                FUZZ_ASSERT(st == MOR_E_INVALID_ARG || st == MOR_E_OUT_OF_RANGE || st == MOR_E_POSITION ||
                            st == MOR_E_KV_FULL || st == MOR_E_ABORTED, "decode: %s %s", mor_status_str(st), mor_last_error());
                FUZZ_ASSERT(*mor_last_error(), "no message");
                same(c, m, n_seq, &snap, mor_status_str(st));
            }
            for (int32_t q = 0; q < n_seq; q++) next[q] = mor_kv_seq_pos_max(kv, q) + 1;
            mor_batch_clear(b);
            break;
        }
        case 3: {
            i += 3;
            int32_t sa = (int32_t)(a0 % 6) - 1, sb = (int32_t)(a1 % 6) - 1;
            mor_pos p0 = (mor_pos)a1 - 1, p1 = (mor_pos)a2 - 1;
            take(c, m, n_seq, rows, &snap);
            switch (op & 3) {
            case 0: st = mor_kv_seq_rm(kv, sa, p0 % 8, p1 % 40); break;
            case 1: st = mor_kv_seq_cp(kv, sa, sb, -1, p1 % 40); break;
            case 2: st = mor_kv_seq_keep(kv, sa); break;
            default: mor_kv_clear(kv); st = MOR_OK; break;
            }
            if (trace) fprintf(stderr, "seq op %d (%d, %d): %s\n", op & 3, sa, sb, mor_status_str(st));
            if (st != MOR_OK) {
                FUZZ_ASSERT(st == MOR_E_OUT_OF_RANGE || st == MOR_E_KV_FULL, "seq op: %s", mor_status_str(st));
                same(c, m, n_seq, &snap, "seq op");
            }
            for (int32_t q = 0; q < n_seq; q++) {
                next[q] = mor_kv_seq_pos_max(kv, q) + 1;
                FUZZ_ASSERT(next[q] >= 0, "pos_max");
            }
            FUZZ_ASSERT(mor_kv_n_cells_used(kv, MOR_KV_ALL) <= (int64_t)mor_model_n_layer(m) * cp.n_ctx, "cells");
            break;
        }
        case 4:
            i += 2;
            st = mor_router_set_mode(rt, a0 % 6, a1 % 5);
            FUZZ_ASSERT(st == MOR_OK || st == MOR_E_UNSUPPORTED || st == MOR_E_INVALID_ARG || st == MOR_E_OUT_OF_RANGE,
                        "set_mode: %s", mor_status_str(st));
            break;
        case 5:
            i += 1;
            st = mor_router_set_max_depth(rt, a0 % 5);
            FUZZ_ASSERT(st == MOR_OK || st == MOR_E_INVALID_ARG || st == MOR_E_OUT_OF_RANGE, "max_depth: %s", mor_status_str(st));
            break;
        case 6:
            i += 2;
            mor_router_set_threshold(rt, a0 % 4, (float)a1 / 255.0f);
            break;
        default:
            i += 1;
            ab.abort_at = a0;
            break;
        }
    }
    free(snap.logits);
    mor_batch_free(b);
    mor_context_free(c);
    return n_ok > 0;
}
