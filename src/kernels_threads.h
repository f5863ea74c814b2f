/* kernels_threads.h - the kernels run across a context's thread pool.
 *
 * Work is split by output rows (matmuls) or by (row, KV head) (attention),
 * never inside a reduction, and every kernel computes each output the same
 * way whatever range it is given, so results do not depend on the number of
 * threads. */
#ifndef MOR_KERNELS_THREADS_H
#define MOR_KERNELS_THREADS_H
#include "kernels.h"
#include "threadpool.h"

typedef struct {
    const kernel_set *k;
    thread_pool   *pool;
    int32_t     nth;            /* pool_size(pool) */
    float     **mm_scratch;     /* [nth]: MM_SCRATCH_FLOATS(max cols) each */
    float     **probs;          /* [nth]: group * n_ctx attention weights each */
    int32_t   **vis;            /* [nth]: n_ctx visible cells, then n_ctx of sort scratch, each */
    void       *act;            /* prepared activations, 64-aligned: one region per kind (ACT_Q8, ACT_BF16X3,
                                   ACT_Q8_1, ACT_Q8K, ACT_BF16), n_batch rows of max_cols each, at act_off[kind] bytes, so
                                   that matrices of different kinds in one job keep their own rows */
    size_t      act_off[ACT_BF16 + 1];
    void       *mem;            /* the one allocation all of the above point into */
    uint64_t    weight_bytes;   /* bytes of the matrices (and LoRA factors) the matmuls below were given, one
                                   pass per call: mor-bench --serve's count of what a way reads (hooks.h) */
} exec_ctx;

/* Start n_threads (<= 0: one) with the best kernel set of this CPU and the
 * scratch for batches of n_batch rows: matmuls over rows of at most max_cols
 * values, attention of `group` query heads per KV head over at most n_ctx
 * cells. */
mor_status exec_init(exec_ctx *e, int32_t n_threads, uint32_t n_batch, int64_t max_cols, int32_t group,
                     uint32_t n_ctx);
void       exec_free(exec_ctx *e);

/* y[i*ldy + o] (+)= W[o] . x[i] for the n rows of x (ldx floats apart). */
void exec_matmul(exec_ctx *e, const tensor *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                 int32_t n, int acc);
/* Up to 3 matrices reading the same x (e.g. Q, K, V) in one parallel pass;
 * y[j] has w[j]->rows floats per row. */
void exec_matmul_multi(exec_ctx *e, int32_t nw, const tensor *const *w, const float *x, int64_t ldx,
                       float *const *y, int32_t n);
/* g = silu(x Wg^T) * (x Wu^T), n rows of F = wg->rows values; u is scratch
 * of the same size. */
void exec_ffn_up(exec_ctx *e, const tensor *wg, const tensor *wu, const float *x, int64_t ldx,
                 float *g, float *u, int32_t n);
/* The same with act(g) * u for act a K_ACT_* (GeGLU: K_ACT_GELU_TANH). */
void exec_ffn_up_act(exec_ctx *e, const tensor *wg, const tensor *wu, const float *x, int64_t ldx,
                     float *g, float *u, int32_t n, int act);
/* Attention of n query rows (q: n x n_head*head_dim, out: the same) over the
 * cells of kv visible to each row: same sequence, position <= its own,
 * summed in (position, cell) order. */
void exec_attention(exec_ctx *e, const attn_dims *dims, const kv_rows *kv,
                    const float *q, const int32_t *pos, const int32_t *seq, float *out, int32_t n);
/* Run n_chunks chunks of a job of about macs multiply-adds: on e's pool, or
 * on the calling thread when it is too small to gain from more threads. */
void exec_run(exec_ctx *e, int64_t n_chunks, chunk_fn fn, void *arg, int64_t macs);
#endif
