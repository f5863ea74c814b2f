/* ops.h - the training kernels, forward and backward, and their thread pool.
 * Internal to src/tools/mor-train; the gradient tests call them one by one. */
#ifndef TR_OPS_H
#define TR_OPS_H
#include "train.h"

/* Math in the build's own precision: expf for float (as the inference
 * kernels compute), exp for double. */
#ifdef TR_DOUBLE
#define TR_EXP exp
#define TR_SQRT sqrt
#else
#define TR_EXP expf
#define TR_SQRT sqrtf
#endif

/* ---- threads ---- */
typedef void (*tr_task_fn)(void *ctx, int task, int thread);
/* Run fn(ctx, task, thread) for task = 0..n-1 on the pool; every task writes
 * its own outputs, so the result does not depend on the thread count. */
void tr_parallel(int n_tasks, tr_task_fn fn, void *ctx);
/* Per-thread scratch of at least n reals (valid until the next call by that thread). */
real *tr_scratch(int thread, int slot, size_t n);

/* ---- matrix products ---- */
/* C[M,N] = op(A)[M,K] op(B)[K,N] (+ C when acc); op(X) = X^T when its flag is
 * set. Row-major with leading dimensions. Deterministic: each element is
 * summed in the same order whatever the threads. */
void tr_gemm(int M, int N, int K, const real *A, int lda, int ta, const real *B, int ldb, int tb,
             real *C, int ldc, int acc);
/* The same on the calling thread only (inside a tr_parallel task). */
void tr_gemm_on(int thread, int M, int N, int K, const real *A, int lda, int ta, const real *B, int ldb, int tb,
                real *C, int ldc, int acc);
/* y[n,out] = x[n,in] W[out,in]^T */
static inline void tr_linear_fwd(real *y, const real *x, const real *W, int n, int in, int out)
{
    tr_gemm(n, out, in, x, in, 0, W, in, 1, y, out, 0);
}
/* dx[n,in] (+)= dy[n,out] W ; dW[out,in] += dy^T x */
static inline void tr_linear_bwd(real *dx, int acc_dx, real *dW, const real *dy, const real *x,
                                 const real *W, int n, int in, int out)
{
    if (dx) tr_gemm(n, in, out, dy, out, 0, W, in, 0, dx, in, acc_dx);
    if (dW) tr_gemm(out, in, n, dy, out, 1, x, in, 0, dW, in, 1);
}

/* ---- elementwise and row kernels ---- */
/* out = w * x * rstd, rstd = 1/sqrt(mean(x^2) + eps), per row of d. */
void tr_rmsnorm_fwd(real *out, real *rstd, const real *x, const real *w, int n, int d, float eps);
/* dx (+)= ..., dw += ... */
void tr_rmsnorm_bwd(real *dx, int acc, real *dw, const real *dy, const real *x, const real *w,
                    const real *rstd, int n, int d);

/* RoPE tables [ctx][hd/2] as the library computes angles (in float for the
 * float build, so that training and inference rotate identically). */
typedef struct { real *cos, *sin; int ctx, half; } tr_rope;
int  tr_rope_init(tr_rope *r, int ctx, int head_dim, float theta);
void tr_rope_free(tr_rope *r);
/* Rotate (dir = +1) or apply the transpose (dir = -1, the backward) to n rows
 * of n_heads heads at positions pos[]. */
void tr_rope_apply(const tr_rope *r, real *v, int n, int n_heads, int head_dim, const int32_t *pos, int dir);

/* act = silu(g) * u */
void tr_swiglu_fwd(real *act, const real *g, const real *u, size_t n);
void tr_swiglu_bwd(real *dg, real *du, const real *dact, const real *g, const real *u, size_t n);

/* Causal attention among the n rows of one group (positions ascending):
 * q [n][H*hd], k, v [n][Hkv*hd], probs [H][n][n] (lower triangle), out [n][H*hd]. */
void tr_attn_fwd(real *out, real *probs, const real *q, const real *k, const real *v, int n, int H,
                 int Hkv, int hd, int thread);
/* dq, dk, dv are written (not accumulated); probs from the forward. The kv
 * heads of this group are independent: call with kvh < 0 for all of them, or
 * one kv head (its query heads) for parallel work. thread: the pool thread
 * running the call (its scratch and products are used), 0 outside the pool. */
void tr_attn_bwd(real *dq, real *dk, real *dv, const real *dout, const real *probs, const real *q,
                 const real *k, const real *v, int n, int H, int Hkv, int hd, int kvh, int thread);

/* Mean cross-entropy of rows with target >= 0 over logits [n][V]; writes the
 * softmax into dlogits scaled as the gradient of the mean (times scale). */
double tr_xent(real *dlogits, const real *logits, const int32_t *targets, int n, int V, double scale);

real tr_sigmoid(real z);

#endif
