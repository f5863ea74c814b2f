/* layer.h - one Llama decoder layer over a set of rows, with its KV cache. */
#ifndef MOR_LAYER_H
#define MOR_LAYER_H
#include "kernels_threads.h"
#include "kv_cache.h"
#include "lora.h"
#include "model.h"

/* Scratch for one decoder layer over up to n_batch rows (see layer.c). */
typedef struct {
    float   *xn, *q, *k, *v, *att, *o, *gate, *up;
    exec_ctx exec;             /* kernels, threads and their per-thread scratch */
    attn_dims dims;            /* the model's attention heads */
    lora_scratch lora;         /* the unfolded LoRA product's (lora.h) */
    float   *inv_freq;         /* [head_dim/2]: RoPE frequencies */
    float   *cs_own;           /* [n_batch][head_dim]: RoPE cos/sin computed here */
} layer_scratch;

/* The rows of one layer call and what the caller knows of them. */
typedef struct {
    int32_t        n;
    const int32_t *pos, *seq;      /* [n]: each row's position and sequence */
    /* [n] or NULL (l for every row): row i appends to and attends over the
     * cache (and depth-wise LoRA) of unrolled layer layer[i], for continuous
     * depth-wise batching (serve.c). The weights are those of layer l: every
     * layer[i] must have the same weights (tied block positions). Attention
     * runs once per run of consecutive rows with the same layer, so callers
     * group rows by layer. */
    const int32_t *layer;
    const float   *rope_cs;        /* [n][head_dim] cos | sin of the rows' RoPE
                                      angles (layer_rope_cs), or NULL: computed */
    const uint8_t *skip_store;     /* [n] or NULL: rows i with skip_store[i] != 0
                                      store no K/V (their results are discarded) */
} layer_rows;

/* x (r->n rows of n_embd) <- layer l(x), in place. The rows' keys and values
 * are appended to their cache layers (unless the cache mode shares them from
 * recursion 0; then only queries are computed); every row then attends to
 * the visible cells of its sequence with position <= its own.
 * MOR_E_KV_FULL if a cell is missing. The work runs on s->exec's threads. */
mor_status layer_forward(const mor_model *m, int32_t l, mor_kv_cache *kv, layer_scratch *s, float *x,
                         const layer_rows *r);

/* cs[i] (head_dim floats: cos then sin of the half-dim angles) for the n
 * positions pos, as k_rope computes them. */
void layer_rope_cs(const mor_model *m, const layer_scratch *s, const int32_t *pos, int32_t n, float *cs);
#endif
