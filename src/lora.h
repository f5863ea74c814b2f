/* lora.h - depth-wise LoRA (Relaxed Recursive Transformers): the projection
 * `role` of unrolled layer l computes
 *     y = W x + s * B (A x)
 * where W is the weight its layer map points to (shared across recursions)
 * and A [r x in], B [out x r] belong to layer l alone (docs/FORMAT.md,
 * "Depth-wise LoRA"). Applied either unfolded, a small product per row
 * right after the shared matmul (layer.c; lora_apply_exec), so that rows of
 * any depth share the one pass over W, whatever W's type (F32, F16, BF16,
 * Q8_0, Q4_0); or
 * folded at load (MOR_MODEL_FOLD_LORA) into a per-layer F32 weight
 * W + s B A, which costs memory and dequantizes quantized shared weights. */
#ifndef MOR_LORA_H
#define MOR_LORA_H
#include "kernels_threads.h"
#include "model.h"

typedef struct {
    const float *a, *b;   /* a: r rows of `in`, b: `out` rows of r (in the file); NULL: no delta */
    float       *bt;      /* b transposed, r rows of `out` (owned; unfolded deltas only) */
    int32_t      r;
    float        s;
} lora_delta;

struct lora_set {
    int32_t          n_layer;
    int              folded;          /* the deltas live in m->layers (folded), not applied at run time */
    lora_delta (*d)[ROLE_COUNT];  /* [n_layer][role] */
    float          **own;             /* folded weights, owned; [n_own] */
    int32_t          n_own;
};

/* Read the lora.* tensors and mor.lora.* keys of g, checking every name,
 * shape and type against the model, and mark the tensors in used[]. m->lora
 * stays NULL when the file has no deltas. MOR_E_FORMAT, MOR_E_NOMEM. */
mor_status lora_load(const gguf_file *g, mor_model *m, unsigned char *used);
/* Fold every delta: layer l's weight becomes an owned F32 copy of
 * W + s B A (computed in double), and m->weight_bytes counts what the model
 * now reads. MOR_E_NOMEM leaves the model unfolded. */
mor_status lora_fold(mor_model *m);
void       lora_free(struct lora_set *lo);

/* Does unrolled layer l carry a delta on role that layer_forward must apply? */
static inline int lora_on(const mor_model *m, int32_t l, int role)
{
    return m->lora && !m->lora->folded && m->lora->d[l][role].a;
}

/* The context's scratch for the unfolded product, sized at context creation:
 * nothing when the model has no unfolded delta. */
typedef struct {
    const lora_delta *d;
    int32_t i0, n;   /* the group's rows [i0, i0 + n): consecutive rows at one unrolled layer */
    int64_t c0;      /* its first chunk in the current pass */
} lora_group;
/* y[i*ldy + o] += sum_q t[i*ldt + q] * bt[q*ldb + o] for i < rows, o < n (lora.c) */
typedef void (*lora_axpy_fn)(const float *t, int64_t ldt, int32_t rows, int32_t r, const float *bt, int64_t ldb,
                             float *y, int64_t ldy, int64_t n);
/* That loop `width` floats at a time (4, 8 or 16; 0: the widest this CPU
 * runs), NULL if this CPU cannot. Every width gives the same bits. */
lora_axpy_fn lora_axpy(int width);
typedef struct {
    float      *t;      /* [cap][rmax]: s (A x) of each row */
    lora_group *g;      /* [cap] */
    int32_t     rmax, cap;
} lora_scratch;
mor_status lora_scratch_init(lora_scratch *s, const mor_model *m, uint32_t n_batch);   /* MOR_E_NOMEM */
void       lora_scratch_free(lora_scratch *s);

/* y[i] += s B (A x[i]) for the n rows of x (rows ldx floats apart) into y
 * (rows ldy apart), with row i taking the delta of unrolled layer
 * row_layer[i] (NULL: l for every row; the layers must share role's weight),
 * rows without a delta left alone. Rows at one layer are batched: one pass
 * over A and one over B per run of consecutive such rows (so callers order
 * rows by layer), split over e's threads and run with e's kernels. A row's
 * result is bitwise the same whatever the other rows and the thread count. */
void lora_apply_exec(exec_ctx *e, lora_scratch *s, const mor_model *m, int32_t l, const int32_t *row_layer, int role,
                     const float *x, int64_t ldx, float *y, int64_t ldy, int32_t n);
#endif
