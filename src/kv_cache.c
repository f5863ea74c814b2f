/* kv_cache.c - the KV cache: cells per unrolled layer, recursion-wise, shared or dense.
 *
 * Recursion-wise caching (the MoR default): the layer of recursion r holds
 * only the tokens that were active at r, so deeper recursions fill fewer
 * cells. Recursive KV sharing: recursion 0 holds every token (active there or
 * not), layers of recursions >= 1 hold nothing and read the recursion-0 layer
 * of the same block position. Dense (the official code's no-cache path of a
 * KV-sharing model): every recursion holds every token, in its own layers.
 * A token log (no K/V) records every decoded (seq, pos) so that positions
 * can be checked and sequence operations know every token, whatever depth
 * it reached.
 *
 * mor_decode appends through a transaction: every appended cell is logged, and
 * a failed or aborted decode frees exactly those cells again. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"
#include "kv_cache.h"
#include "quant.h"
#include "status.h"

static int layer_recursion(const mor_model *m, int32_t l)
{
    if (l < m->prelude || l >= m->prelude + m->n_rec * m->base_depth) return -1;
    return (l - m->prelude) / m->base_depth;
}

int kv_layer_stores(const mor_kv_cache *kv, int32_t l)
{
    return kv->mode != MOR_KV_SHARED || layer_recursion(kv->m, l) <= 0;
}

int kv_caches_every_row(const mor_kv_cache *kv, int32_t r)
{
    return kv->mode == MOR_KV_DENSE || (kv->mode == MOR_KV_SHARED && r == 0);
}

kv_layer *kv_read_layer(mor_kv_cache *kv, int32_t l)
{
    if (!kv_layer_stores(kv, l))
        l = kv->m->prelude + (l - kv->m->prelude) % kv->m->base_depth;
    return &kv->layers[l];
}

kv_rows kv_layer_rows(const mor_kv_cache *kv, int32_t l)
{
    const kv_layer *L = kv_read_layer((mor_kv_cache *)kv, l);
    kv_rows r = { L->n_hi, L->seq, L->pos, L->k, L->v, kv->row_bytes, kv->type };
    return r;
}

/* A kv_cache is two allocations: its bookkeeping (the struct, the layers,
 * every cell's sequence and position, the undo log, the shift scratch) in
 * one block, and every layer's K and V rows in another, calloc'd: pages are
 * committed only when cells are first used. */
static size_t align8(size_t n) { return (n + 7) / 8 * 8; }
static size_t align16(size_t n) { return (n + 15) / 16 * 16; }   /* K/V arrays: as calloc aligned them */

/* Cell arrays of layer L at *at (n_cells cells; K/V from *kvat, row_bytes each). */
static void layer_bind(kv_layer *L, int32_t n_cells, size_t row_bytes, unsigned char **at, unsigned char **kvat)
{
    L->n_cells = n_cells;
    L->pos = (int32_t *)*at; *at += align8(sizeof(int32_t) * (size_t)n_cells);
    L->seq = (int32_t *)*at; *at += align8(sizeof(int32_t) * (size_t)n_cells);
    for (int32_t i = 0; i < n_cells; i++) L->seq[i] = -1;
    if (row_bytes && n_cells) {
        L->k = *kvat; *kvat += align16((size_t)n_cells * row_bytes);
        L->v = *kvat; *kvat += align16((size_t)n_cells * row_bytes);
    }
}

void kv_free(mor_kv_cache *kv)
{
    if (!kv) return;
    free(kv->kv_mem);
    free(kv);
}

mor_status kv_create(const mor_model *m, int32_t mode, uint32_t type, int32_t n_ctx, int32_t n_seq_max,
                     int32_t max_batch, mor_kv_cache **out)
{
    *out = NULL;
    const int32_t L = m->n_layer, kv_dim = m->n_head_kv * m->head_dim, cap_undo = 2 * max_batch * (L + 1);
    const size_t row_bytes = (size_t)tensor_row_bytes(type, kv_dim);
    mor_kv_cache probe = { .m = m, .mode = mode };   /* for kv_layer_stores */
    int32_t n_store = 0;
    for (int32_t l = 0; l < L; l++) n_store += kv_layer_stores(&probe, l);
    const size_t cells = align8(sizeof(int32_t) * (size_t)n_ctx) * 2;
    size_t total = align8(sizeof(mor_kv_cache)) + align8(sizeof(kv_layer) * (size_t)L) + cells * (size_t)(n_store + 1) +
                   align8(sizeof(int32_t) * (size_t)n_seq_max) + align8(sizeof(int32_t) * (size_t)cap_undo) +
                   align8(sizeof(float) * (size_t)(m->head_dim / 2 + 1)) + align8(sizeof(double) * (size_t)(m->head_dim + 1)) +
                   align8(sizeof(float) * (size_t)(kv_dim + 1));
    unsigned char *mem = calloc(1, total), *at = mem;
    unsigned char *kvat = n_store && row_bytes && n_ctx ? calloc((size_t)n_store * 2, align16((size_t)n_ctx * row_bytes)) : NULL;
    if (!mem || (n_store && row_bytes && n_ctx && !kvat)) {
        free(mem); free(kvat);
        return err_set(MOR_E_NOMEM, "cannot allocate the KV cache (%d cells x %d layers)", n_ctx, L);
    }
    mor_kv_cache *kv = (mor_kv_cache *)at; at += align8(sizeof *kv);
    kv->m = m; kv->mode = mode; kv->n_ctx = n_ctx; kv->n_seq_max = n_seq_max;
    kv->kv_dim = kv_dim; kv->type = type; kv->row_bytes = row_bytes;
    kv->kv_mem = kvat;
    kv->layers = (kv_layer *)at; at += align8(sizeof(kv_layer) * (size_t)L);
    kv->seq_pos_max = (int32_t *)at; at += align8(sizeof(int32_t) * (size_t)n_seq_max);
    kv->cap_undo = cap_undo;
    kv->undo = (int32_t *)at; at += align8(sizeof(int32_t) * (size_t)cap_undo);
    kv->inv_freq = (float *)at; at += align8(sizeof(float) * (size_t)(m->head_dim / 2 + 1));
    kv->shift_cs = (double *)at; at += align8(sizeof(double) * (size_t)(m->head_dim + 1));
    kv->shift_row = (float *)at; at += align8(sizeof(float) * (size_t)(kv_dim + 1));
    k_rope_inv_freq(kv->inv_freq, m->arch.rope_dims, m->rope_theta);   /* as the layers compute them */
    layer_bind(&kv->tokens, n_ctx, 0, &at, &kvat);
    for (int32_t l = 0; l < L; l++) layer_bind(&kv->layers[l], kv_layer_stores(kv, l) ? n_ctx : 0, row_bytes, &at, &kvat);
    for (int32_t s = 0; s < n_seq_max; s++) kv->seq_pos_max[s] = -1;
    *out = kv;
    return MOR_OK;
}

static kv_layer *layer_at(mor_kv_cache *kv, int32_t l) { return l < 0 ? &kv->tokens : &kv->layers[l]; }

void kv_begin(mor_kv_cache *kv) { kv->n_undo = 0; }

int32_t kv_append(mor_kv_cache *kv, int32_t l, mor_seq_id seq, mor_pos pos)
{
    kv_layer *L = layer_at(kv, l);
    if (L->n_used >= L->n_cells || kv->n_undo + 2 > kv->cap_undo) return -1;
    int32_t c = L->hint;
    while (L->seq[c] >= 0) c = (c + 1) % L->n_cells;
    L->seq[c] = seq; L->pos[c] = pos; L->n_used++;
    if (c >= L->n_hi) L->n_hi = c + 1;
    L->hint = (c + 1) % L->n_cells;
    kv->undo[kv->n_undo++] = l;
    kv->undo[kv->n_undo++] = c;
    if (l < 0 && pos > kv->seq_pos_max[seq]) kv->seq_pos_max[seq] = pos;
    return c;
}

static void recompute_pos_max(mor_kv_cache *kv)
{
    for (int32_t s = 0; s < kv->n_seq_max; s++) kv->seq_pos_max[s] = -1;
    for (int32_t c = 0; c < kv->tokens.n_cells; c++) {
        int32_t s = kv->tokens.seq[c];
        if (s >= 0 && kv->tokens.pos[c] > kv->seq_pos_max[s]) kv->seq_pos_max[s] = kv->tokens.pos[c];
    }
}

void kv_rollback(mor_kv_cache *kv)
{
    for (int32_t i = kv->n_undo - 2; i >= 0; i -= 2) {
        kv_layer *L = layer_at(kv, kv->undo[i]);
        int32_t c = kv->undo[i + 1];
        L->seq[c] = -1; L->n_used--;
        L->hint = c;
    }
    kv->n_undo = 0;
    recompute_pos_max(kv);
}

void kv_commit(mor_kv_cache *kv) { kv->n_undo = 0; }

void kv_unappend(mor_kv_cache *kv, int32_t l0, int32_t l1, int with_tokens, mor_seq_id seq, mor_pos p0)
{
    int32_t k = 0;
    for (int32_t i = 0; i < kv->n_undo; i += 2) {
        const int32_t l = kv->undo[i], c = kv->undo[i + 1];
        kv_layer *L = layer_at(kv, l);
        if ((l < 0 ? with_tokens : l >= l0 && l < l1) && L->seq[c] == seq && L->pos[c] >= p0) {
            L->seq[c] = -1; L->n_used--;
            if (c < L->hint) L->hint = c;
            continue;
        }
        kv->undo[k++] = l; kv->undo[k++] = c;
    }
    kv->n_undo = k;
    if (with_tokens) recompute_pos_max(kv);
}

/* ---- public sequence operations ---- */

static int in_range(mor_pos p, mor_pos p0, mor_pos p1)
{
    return (p0 < 0 || p >= p0) && (p1 < 0 || p < p1);
}

static void layer_rm(kv_layer *L, mor_seq_id seq, mor_pos p0, mor_pos p1)
{
    for (int32_t c = 0; c < L->n_cells; c++)
        if (L->seq[c] >= 0 && (seq < 0 || L->seq[c] == seq) && in_range(L->pos[c], p0, p1)) {
            L->seq[c] = -1; L->n_used--;
        }
    if (L->n_used == 0) L->n_hi = 0;
}

static void for_each_layer_rm(mor_kv_cache *kv, mor_seq_id seq, mor_pos p0, mor_pos p1)
{
    layer_rm(&kv->tokens, seq, p0, p1);
    for (int32_t l = 0; l < kv->m->n_layer; l++) layer_rm(&kv->layers[l], seq, p0, p1);
    recompute_pos_max(kv);
}

void mor_kv_clear(mor_kv_cache *kv)
{
    if (kv) for_each_layer_rm(kv, -1, -1, -1);
}

static mor_status check_seq(const mor_kv_cache *kv, mor_seq_id s, int allow_any, const char *fn)
{
    if (!kv) return err_set(MOR_E_INVALID_ARG, "%s: kv is NULL", fn);
    if ((s < 0 && !allow_any) || s >= kv->n_seq_max)
        return err_set(MOR_E_OUT_OF_RANGE, "%s: sequence id %d out of range [0, %d)", fn, s, kv->n_seq_max);
    return MOR_OK;
}

mor_status mor_kv_seq_rm(mor_kv_cache *kv, mor_seq_id seq, mor_pos p0, mor_pos p1)
{
    err_clear();
    mor_status st = check_seq(kv, seq, 1, "mor_kv_seq_rm");
    if (st) return st;
    for_each_layer_rm(kv, seq, p0, p1);
    return MOR_OK;
}

mor_status mor_kv_seq_keep(mor_kv_cache *kv, mor_seq_id seq)
{
    err_clear();
    mor_status st = check_seq(kv, seq, 0, "mor_kv_seq_keep");
    if (st) return st;
    for (int32_t s = 0; s < kv->n_seq_max; s++)
        if (s != seq) for_each_layer_rm(kv, s, -1, -1);
    return MOR_OK;
}

static int32_t layer_count(const kv_layer *L, mor_seq_id seq, mor_pos p0, mor_pos p1)
{
    int32_t n = 0;
    for (int32_t c = 0; c < L->n_cells; c++)
        if (L->seq[c] == seq && in_range(L->pos[c], p0, p1)) n++;
    return n;
}

static void layer_cp(kv_layer *L, size_t row_bytes, mor_seq_id src, mor_seq_id dst, mor_pos p0, mor_pos p1)
{
    int32_t n = L->n_cells, free_c = 0;
    for (int32_t c = 0; c < n; c++) {
        if (L->seq[c] != src || !in_range(L->pos[c], p0, p1)) continue;
        while (L->seq[free_c] >= 0) free_c++;   /* room was checked by the caller */
        L->seq[free_c] = dst; L->pos[free_c] = L->pos[c]; L->n_used++;
        if (free_c >= L->n_hi) L->n_hi = free_c + 1;
        if (row_bytes) {
            memcpy(L->k + (size_t)free_c * row_bytes, L->k + (size_t)c * row_bytes, row_bytes);
            memcpy(L->v + (size_t)free_c * row_bytes, L->v + (size_t)c * row_bytes, row_bytes);
        }
    }
}

mor_status mor_kv_seq_cp(mor_kv_cache *kv, mor_seq_id src, mor_seq_id dst, mor_pos p0, mor_pos p1)
{
    err_clear();
    mor_status st;
    if ((st = check_seq(kv, src, 0, "mor_kv_seq_cp")) || (st = check_seq(kv, dst, 0, "mor_kv_seq_cp"))) return st;
    if (src == dst) return MOR_OK;
    /* dst's own cells in the range are replaced; check room everywhere first so
     * that a KV_FULL leaves everything as it was */
    for (int32_t l = -1; l < kv->m->n_layer; l++) {
        kv_layer *L = layer_at(kv, l);
        int32_t need = layer_count(L, src, p0, p1) - layer_count(L, dst, p0, p1);
        if (L->n_used + need > L->n_cells)
            return err_set(MOR_E_KV_FULL, "mor_kv_seq_cp: no room to copy sequence %d into %d", src, dst);
    }
    for (int32_t l = -1; l < kv->m->n_layer; l++) {
        kv_layer *L = layer_at(kv, l);
        layer_rm(L, dst, p0, p1);
        layer_cp(L, l < 0 ? 0 : kv->row_bytes, src, dst, p0, p1);
    }
    recompute_pos_max(kv);
    return MOR_OK;
}

/* Rotate every K row of sequence seq in [p0,p1) of layer L by the angles of
 * kv->shift_cs, in the cache's type (F16 / Q8_0: dequantized, rotated in
 * double, stored again), and move its positions by delta. */
static void layer_shift(mor_kv_cache *kv, kv_layer *L, int rotate, mor_seq_id seq, mor_pos p0, mor_pos p1,
                        mor_pos delta)
{
    const int32_t hd = kv->m->head_dim, half = kv->m->arch.rope_dims / 2, nh = kv->m->n_head_kv;   /* rope_dims: hd unless partial */
    const double *c = kv->shift_cs, *s = kv->shift_cs + half;
    float *row = kv->shift_row;
    for (int32_t cell = 0; cell < L->n_cells; cell++) {
        if (L->seq[cell] != seq || !in_range(L->pos[cell], p0, p1)) continue;
        L->pos[cell] += delta;
        if (!rotate) continue;
        unsigned char *k = L->k + (size_t)cell * kv->row_bytes;
        dequant_row(kv->type, k, row, kv->kv_dim);
        for (int32_t h = 0; h < nh; h++) {   /* the pairs (i, i + half) that k_rope_cs rotates */
            float *q = row + (int64_t)h * hd;
            for (int32_t i = 0; i < half; i++) {
                double a = q[i], b = q[i + half];
                q[i] = (float)(a * c[i] - b * s[i]);
                q[i + half] = (float)(b * c[i] + a * s[i]);
            }
        }
        quant_row(kv->type, row, k, kv->kv_dim);
    }
}

mor_status mor_kv_seq_add(mor_kv_cache *kv, mor_seq_id seq, mor_pos p0, mor_pos p1, mor_pos delta)
{
    mor_status st = check_seq(kv, seq, 0, "mor_kv_seq_add");
    if (st) return st;
    if (p0 < 0) p0 = 0;
    if (p1 >= 0 && p1 <= p0) return MOR_OK;   /* an empty range */
    /* what moves, and the nearest positions that stay, from the token log */
    const kv_layer *T = &kv->tokens;
    int64_t lo = INT64_MAX, hi = -1, below = -1, above = INT64_MAX;
    for (int32_t c = 0; c < T->n_cells; c++) {
        if (T->seq[c] != seq) continue;
        int64_t p = T->pos[c];
        if (in_range((mor_pos)p, p0, p1)) { if (p < lo) lo = p; if (p > hi) hi = p; }
        else if (p < p0) { if (p > below) below = p; }
        else if (p < above) above = p;
    }
    if (hi < 0 || delta == 0) return MOR_OK;   /* nothing to move */
    const int64_t nlo = lo + delta, nhi = hi + delta;
    if (nlo < 0 || nhi > INT32_MAX - 1)
        return err_set(MOR_E_POSITION, "mor_kv_seq_add: sequence %d: positions %lld..%lld moved by %d would be "
                       "%lld..%lld, outside [0, %d]", seq, (long long)lo, (long long)hi, delta, (long long)nlo,
                       (long long)nhi, INT32_MAX - 1);
    if (nlo <= below || nhi >= above)
        return err_set(MOR_E_POSITION, "mor_kv_seq_add: sequence %d: positions %lld..%lld moved by %d would reach "
                       "its position %lld, which stays (remove it first with mor_kv_seq_rm)", seq, (long long)lo,
                       (long long)hi, delta, (long long)(nlo <= below ? below : above));
    /* cos/sin of delta positions, in double: RoPE at p then a rotation by
     * delta is RoPE at p + delta, up to rounding */
    const int32_t half = kv->m->arch.rope_dims / 2;
    for (int32_t i = 0; i < half; i++) {
        double ang = (double)delta * (double)kv->inv_freq[i];
        kv->shift_cs[i] = cos(ang);
        kv->shift_cs[half + i] = sin(ang);
    }
    layer_shift(kv, &kv->tokens, 0, seq, p0, p1, delta);
    for (int32_t l = 0; l < kv->m->n_layer; l++)
        if (kv->layers[l].n_cells && kv->row_bytes) layer_shift(kv, &kv->layers[l], 1, seq, p0, p1, delta);
    recompute_pos_max(kv);
    return MOR_OK;
}

mor_pos mor_kv_seq_pos_max(const mor_kv_cache *kv, mor_seq_id seq)
{
    if (!kv || seq < 0 || seq >= kv->n_seq_max) return -1;
    return kv->seq_pos_max[seq];
}

int32_t mor_kv_mode(const mor_kv_cache *kv) { return kv ? kv->mode : 0; }

/* Layers that belong to selector r (a recursion, the unique layers, or all). */
static int layer_selected(const mor_kv_cache *kv, int32_t l, int32_t r)
{
    return r == MOR_KV_ALL || layer_recursion(kv->m, l) == (r == MOR_KV_UNIQUE_LAYERS ? -1 : r);
}

static mor_status check_selector(const mor_kv_cache *kv, int32_t r, const char *fn)
{
    if (!kv) return err_set(MOR_E_INVALID_ARG, "%s: kv is NULL", fn);
    if (r != MOR_KV_ALL && r != MOR_KV_UNIQUE_LAYERS && (r < 0 || r >= kv->m->n_rec))
        return err_set(MOR_E_OUT_OF_RANGE, "%s: recursion %d out of range", fn, r);
    return MOR_OK;
}

mor_status mor_kv_bytes(const mor_kv_cache *kv, int32_t r, uint64_t *allocated, uint64_t *used)
{
    err_clear();
    mor_status st = check_selector(kv, r, "mor_kv_bytes");
    if (st) return st;
    uint64_t a = 0, u = 0, cell = 2ull * (uint64_t)kv->row_bytes;
    for (int32_t l = 0; l < kv->m->n_layer; l++)
        if (layer_selected(kv, l, r)) {
            a += (uint64_t)kv->layers[l].n_cells * cell;
            u += (uint64_t)kv->layers[l].n_used * cell;
        }
    if (allocated) *allocated = a;
    if (used) *used = u;
    return MOR_OK;
}

int64_t mor_kv_n_cells_used(const mor_kv_cache *kv, int32_t r)
{
    err_clear();
    mor_status st = check_selector(kv, r, "mor_kv_n_cells_used");
    if (st) return st;
    int64_t n = 0;
    for (int32_t l = 0; l < kv->m->n_layer; l++)
        if (layer_selected(kv, l, r)) n += kv->layers[l].n_used;
    return n;
}
