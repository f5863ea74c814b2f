/* kernels_threads.c - matmuls and attention split across the thread pool:
 * each job is cut into chunks of output rows (or of (row, KV head) pairs for
 * attention), about four per thread, that the pool's threads take in any
 * order (threadpool.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels_threads.h"
#include "quant.h"
#include "status.h"

#define ROW_ALIGN 16   /* output rows per unit of work: whole tiles for every kernel set */

/* Output rows per chunk of a matmul over n activation rows. One or two rows
 * (generation): one chunk per thread, one contiguous stream of weights that
 * the kernels prefetch ahead within; each chunk starts that stream cold, and
 * with four chunks per thread Q8_0 decode of the 135M shape ran ~10% slower
 * on two threads (the matrices are small: 576 x 576 is 24 strips of 16 rows).
 * Several rows (prefill): about eight per thread, so that the thread left
 * alone at the end of a job waits less, in multiples of 48 rows (whole 6-row
 * and 16-row tiles). */
static int64_t mm_chunk(int64_t rows, int32_t n, int32_t nth)
{
    if (n > 2) return pool_chunk(rows, 48, 2 * nth);
    const int64_t per = (rows + nth - 1) / nth;
    return (per + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
}

#define MAX_THREADS 512
/* Below this many multiply-adds a job runs on the calling thread alone:
 * waking the workers would cost more than it saves (results are the same
 * either way). */
#define MIN_PARALLEL_MACS 65536

/* Run n_chunks chunks of a job: on the pool, or here when the job is small. */
static void run(exec_ctx *e, int64_t n_chunks, chunk_fn fn, void *arg, int64_t macs)
{
    if (e->nth > 1 && macs >= MIN_PARALLEL_MACS) pool_run(e->pool, n_chunks, fn, arg);
    else for (int64_t c = 0; c < n_chunks; c++) fn(arg, c, 0);
}

void exec_free(exec_ctx *e)
{
    pool_free(e->pool);
    free(e->mem);
    memset(e, 0, sizeof *e);
}

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

mor_status exec_init(exec_ctx *e, int32_t n_threads, uint32_t n_batch, int64_t kmax, int32_t group, uint32_t n_ctx)
{
    memset(e, 0, sizeof *e);
    if (n_threads < 1) n_threads = 1;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    e->k = kernels_best();
    e->nth = n_threads;
    /* One allocation, planned here: the prepared activations (one region per kind, as a job's matrices
     * may need rows of several kinds at once; the bf16-split and bf16 regions always, as the kernel set can be
     * changed after this by tests and mor-bench), then each thread's matmul scratch, attention weights and
     * visible cells, every piece 64-aligned so that no two threads write one cache line, then the pointer
     * arrays. malloc + manual alignment: the one allocator users and tests can hook. */
    const size_t nt = (size_t)n_threads, nc = n_ctx ? n_ctx : 1;
    const size_t mm = up64(sizeof(float) * MM_SCRATCH_FLOATS(kmax)), pr = up64(sizeof(float) * (size_t)group * nc),
                 vi = up64(sizeof(int32_t) * 2 * nc);   /* the visible list, then sort scratch */
    size_t act_total = 0;   /* each kind's rows */
    for (int kind = ACT_Q8; kind <= ACT_BF16; kind++) {
        e->act_off[kind] = act_total;
        act_total += up64((size_t)n_batch * act_kind_stride(kind, kmax));
    }
    e->mem = malloc(64 + act_total + nt * (mm + pr + vi) + 3 * nt * sizeof(void *));
    if (!e->mem) return err_set(MOR_E_NOMEM, "cannot allocate per-thread scratch for %d threads", n_threads);
    char *at = (char *)(((uintptr_t)e->mem + 63) & ~(uintptr_t)63);
    e->act = at; at += act_total;
    char *per = at; at += nt * (mm + pr + vi);
    e->mm_scratch = (float **)at; e->probs = (float **)at + nt; e->vis = (int32_t **)((float **)at + 2 * nt);
    for (size_t t = 0; t < nt; t++, per += mm + pr + vi) {
        e->mm_scratch[t] = (float *)per;
        e->probs[t] = (float *)(per + mm);
        e->vis[t] = (int32_t *)(per + mm + pr);
    }
    mor_status st = pool_create(n_threads, &e->pool);
    if (st) { exec_free(e); return st; }
    e->nth = pool_size(e->pool);
    return MOR_OK;
}

/* ---- activation preparation (quantized or split rows, kernels.h) ---- */

typedef struct { exec_ctx *e; const float *x; int64_t ldx, k, chunk; int32_t n; size_t stride; uint32_t t; char *out; } prep_job;

static void prep_task(void *arg, int64_t c, int32_t ith)
{
    prep_job *j = arg;
    const int64_t b = c * j->chunk, end = b + j->chunk < j->n ? b + j->chunk : j->n;
    for (int64_t i = b; i < end; i++) act_prepare(j->e->k, j->t, j->x + i * j->ldx, j->out + (size_t)i * j->stride, j->k);
}

/* The activations a matmul with weights of type t reads: x itself (ACT_F32),
 * else x prepared into e->act's region for that kind. Returns the pointer and
 * row stride. */
static const void *prepare(exec_ctx *e, uint32_t t, const float *x, int64_t ldx, int64_t k, int32_t n, size_t *xs)
{
    const int kind = act_kind(e->k, t);
    if (kind == ACT_F32) { *xs = sizeof(float) * (size_t)ldx; return x; }
    char *out = (char *)e->act + e->act_off[kind];
    prep_job j = { e, x, ldx, k, pool_chunk(n, 1, e->nth), n, act_stride(e->k, t, k), t, out };
    *xs = j.stride;
    run(e, (n + j.chunk - 1) / j.chunk, prep_task, &j, (int64_t)n * k / 4);
    return out;
}

/* ---- matmul ---- */

typedef struct {
    exec_ctx *e;
    int32_t nw, n, acc;
    int64_t total, chunk;        /* rows of all matrices; rows per chunk */
    const tensor *w[3];
    const void *x[3];
    size_t xs[3];
    float *y[3];
    int64_t ldy[3];
} mm_job;

static void mm_task(void *arg, int64_t c, int32_t ith)
{
    mm_job *j = arg;
    const int64_t b = c * j->chunk, end = b + j->chunk < j->total ? b + j->chunk : j->total;
    int64_t base = 0;
    for (int32_t q = 0; q < j->nw; q++) {   /* the concatenated rows of all matrices */
        const int64_t rows = j->w[q]->rows, o0 = b - base, o1 = end - base;
        if (o1 > 0 && o0 < rows)
            j->e->k->matmul(j->w[q], j->x[q], j->xs[q], j->y[q], j->ldy[q], j->n,
                            o0 < 0 ? 0 : o0, o1 > rows ? rows : o1, j->acc, j->e->mm_scratch[ith]);
        base += rows;
    }
}

void exec_matmul(exec_ctx *e, const tensor *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                 int32_t n, int acc)
{
    mm_job j = { .e = e, .nw = 1, .n = n, .acc = acc };
    j.w[0] = w; j.y[0] = y; j.ldy[0] = ldy;
    j.x[0] = prepare(e, w->type, x, ldx, w->cols, n, &j.xs[0]);
    j.total = w->rows;
    if (n > 0) e->weight_bytes += tensor_row_bytes(w->type, w->cols) * (uint64_t)w->rows;
    j.chunk = mm_chunk(j.total, n, e->nth);
    run(e, (j.total + j.chunk - 1) / j.chunk, mm_task, &j, (int64_t)n * w->rows * w->cols);
}

void exec_matmul_multi(exec_ctx *e, int32_t nw, const tensor *const *w, const float *x, int64_t ldx,
                       float *const *y, int32_t n)
{
    mm_job j = { .e = e, .nw = nw, .n = n, .acc = 0 };
    for (int32_t q = 0; q < nw; q++) {
        j.w[q] = w[q]; j.y[q] = y[q]; j.ldy[q] = w[q]->rows;
        int p = 0;   /* one preparation serves every matrix of its kind */
        while (p < q && act_kind(e->k, w[p]->type) != act_kind(e->k, w[q]->type)) p++;
        if (p < q) { j.x[q] = j.x[p]; j.xs[q] = j.xs[p]; }
        else j.x[q] = prepare(e, w[q]->type, x, ldx, w[q]->cols, n, &j.xs[q]);
    }
    int64_t macs = 0;
    for (int32_t q = 0; q < nw; q++) {
        macs += (int64_t)n * w[q]->rows * w[q]->cols;
        j.total += w[q]->rows;
        if (n > 0) e->weight_bytes += tensor_row_bytes(w[q]->type, w[q]->cols) * (uint64_t)w[q]->rows;
    }
    j.chunk = mm_chunk(j.total, n, e->nth);
    run(e, (j.total + j.chunk - 1) / j.chunk, mm_task, &j, macs);
}

/* ---- gate/up + SwiGLU ---- */

typedef struct {
    exec_ctx *e;
    const tensor *wg, *wu;
    const void *xg, *xu;
    size_t xgs, xus;
    float *g, *u;
    int32_t n, act;
    int64_t chunk;
} ffn_job;

static void ffn_task(void *arg, int64_t c, int32_t ith)
{
    ffn_job *j = arg;
    const int64_t F = j->wg->rows, b = c * j->chunk, end = b + j->chunk < F ? b + j->chunk : F;
    const kernel_set *k = j->e->k;
    k->matmul(j->wg, j->xg, j->xgs, j->g, F, j->n, b, end, 0, j->e->mm_scratch[ith]);
    k->matmul(j->wu, j->xu, j->xus, j->u, F, j->n, b, end, 0, j->e->mm_scratch[ith]);
    if (j->act == K_ACT_SILU)
        for (int32_t i = 0; i < j->n; i++) k->swiglu(j->g + i * F + b, j->u + i * F + b, end - b);
    else
        for (int32_t i = 0; i < j->n; i++) k_glu(j->g + i * F + b, j->u + i * F + b, end - b, j->act);
}

void exec_ffn_up(exec_ctx *e, const tensor *wg, const tensor *wu, const float *x, int64_t ldx,
                 float *g, float *u, int32_t n)
{
    exec_ffn_up_act(e, wg, wu, x, ldx, g, u, n, K_ACT_SILU);
}

void exec_ffn_up_act(exec_ctx *e, const tensor *wg, const tensor *wu, const float *x, int64_t ldx,
                     float *g, float *u, int32_t n, int act)
{
    ffn_job j = { .e = e, .wg = wg, .wu = wu, .g = g, .u = u, .n = n, .act = act };
    j.xg = prepare(e, wg->type, x, ldx, wg->cols, n, &j.xgs);
    if (act_kind(e->k, wu->type) == act_kind(e->k, wg->type)) { j.xu = j.xg; j.xus = j.xgs; }
    else j.xu = prepare(e, wu->type, x, ldx, wu->cols, n, &j.xus);
    if (n > 0)
        e->weight_bytes += tensor_row_bytes(wg->type, wg->cols) * (uint64_t)wg->rows
                           + tensor_row_bytes(wu->type, wu->cols) * (uint64_t)wu->rows;
    j.chunk = mm_chunk(wg->rows, n, e->nth);
    run(e, (wg->rows + j.chunk - 1) / j.chunk, ffn_task, &j, 2 * (int64_t)n * wg->rows * wg->cols);
}

/* ---- attention ---- */

typedef struct {
    exec_ctx *e;
    const attn_dims *d;
    const kv_rows *L;
    const float *q;
    const int32_t *pos, *seq;
    float *out;
    int32_t n;
    int64_t chunk;
} att_job;

/* (pos, cell) of cell a before that of cell b */
static int vis_before(const int32_t *pos, int32_t a, int32_t b)
{
    return pos[a] < pos[b] || (pos[a] == pos[b] && a < b);
}

/* Sort cells[0..n) by (position, cell index): the order attention sums in,
 * so that a row's result does not depend on where the cache put its cells
 * (cells are reused once freed, in an order that depends on what else ran).
 * A bottom-up natural merge sort through tmp (n cells): O(n) for the few
 * ascending runs a reused cache leaves, O(n log n) at worst, no allocation. */
static void vis_sort(int32_t *cells, int32_t *tmp, int32_t n, const int32_t *pos)
{
    int32_t *src = cells, *dst = tmp;
    for (;;) {
        int32_t runs = 0;
        for (int32_t a = 0; a < n; runs++) {   /* merge the next two ascending runs into dst */
            int32_t b = a + 1, c;
            while (b < n && !vis_before(pos, src[b], src[b - 1])) b++;
            for (c = b < n ? b + 1 : n; c < n && !vis_before(pos, src[c], src[c - 1]); c++) {}
            int32_t x = a, y = b, o = a;
            while (x < b && y < c) dst[o++] = vis_before(pos, src[y], src[x]) ? src[y++] : src[x++];
            while (x < b) dst[o++] = src[x++];
            while (y < c) dst[o++] = src[y++];
            a = c;
        }
        int32_t *t = src; src = dst; dst = t;
        if (runs <= 1) break;
    }
    if (src != cells) memcpy(cells, src, sizeof(int32_t) * (size_t)n);
}

static void att_task(void *arg, int64_t ch, int32_t ith)
{
    att_job *j = arg;
    const kv_rows *L = j->L;
    const int32_t hd = j->d->head_dim, nkv = j->d->n_head_kv, group = j->d->n_head / nkv, qd = j->d->n_head * hd;
    const size_t head_bytes = L->row_bytes / (size_t)nkv;
    const float scale = j->d->scale > 0 ? j->d->scale : 1.0f / sqrtf((float)hd), cap = j->d->softcap;
    const int32_t window = j->d->window;
    const int64_t units = (int64_t)j->n * nkv, b = ch * j->chunk;   /* units: (row, KV head) */
    const int64_t end = b + j->chunk < units ? b + j->chunk : units;
    int32_t *vis = j->e->vis[ith], nv = 0, vis_row = -1;
    for (int64_t u = b; u < end; u++) {
        const int32_t i = (int32_t)(u / nkv), h = (int32_t)(u % nkv);
        if (i != vis_row) {   /* the visible cells of row i, shared by its heads */
            int32_t sorted = 1, last = -1;   /* positions are >= 0 */
            nv = 0;
            for (int32_t c = 0; c < L->n; c++)
                if (L->seq[c] == j->seq[i] && L->pos[c] <= j->pos[i] && (!window || j->pos[i] - L->pos[c] < window)) {
                    sorted &= L->pos[c] >= last;
                    last = L->pos[c];
                    vis[nv++] = c;
                }
            if (!sorted) vis_sort(vis, vis + nv, nv, L->pos);   /* vis has 2 n_ctx >= 2 nv */
            vis_row = i;
        }
        const size_t off = (size_t)h * head_bytes;
        if (cap > 0) {
            k_attend_capped(j->q + (int64_t)i * qd + (int64_t)h * group * hd, group, hd, (const char *)L->k + off,
                            (const char *)L->v + off, L->row_bytes, L->type, vis, nv, scale, cap, j->e->probs[ith],
                            j->out + (int64_t)i * qd + (int64_t)h * group * hd);
            continue;
        }
        j->e->k->attend(j->q + (int64_t)i * qd + (int64_t)h * group * hd, group, hd,
                        (const char *)L->k + off, (const char *)L->v + off, L->row_bytes, L->type,
                        vis, nv, scale, j->e->probs[ith], j->out + (int64_t)i * qd + (int64_t)h * group * hd);
    }
}

void exec_attention(exec_ctx *e, const attn_dims *d, const kv_rows *kv,
                    const float *q, const int32_t *pos, const int32_t *seq, float *out, int32_t n)
{
    att_job j = { e, d, kv, q, pos, seq, out, n, 0 };
    const int64_t units = (int64_t)n * d->n_head_kv;
    j.chunk = pool_chunk(units, 1, e->nth);
    run(e, (units + j.chunk - 1) / j.chunk, att_task, &j, 2 * (int64_t)n * d->n_head * d->head_dim * kv->n);
}

/* ---- jobs defined elsewhere (lora.c) ---- */

void exec_run(exec_ctx *e, int64_t n_chunks, chunk_fn fn, void *arg, int64_t macs)
{
    run(e, n_chunks, fn, arg, macs);
}
