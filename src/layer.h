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
    /* [n][head_dim] cos | sin of each row's RoPE angles for the next
     * layer_forward only (it resets this to NULL), set by its caller
     * (layer_rope_cs), or NULL: computed there into cs_own */
    const float *rope_cs;
    float   *cs_own;           /* [n_batch][head_dim] */
    /* [n] or NULL, set by the caller for its calls: rows i with
     * skip_store[i] != 0 store no K/V (their results are to be discarded) */
    const uint8_t *skip_store;
} layer_scratch;

/* x (n rows of n_embd) <- layer(x), in place. Rows carry their own position
 * and sequence. The rows' keys and values are appended to the cache of
 * unrolled layer l (unless the cache mode shares them from recursion 0; then
 * only queries are computed); every row then attends to the visible cells of
 * its sequence with position <= its own. MOR_E_KV_FULL if a cell is missing.
 * The work runs on s->exec's threads; s->rope_cs may carry the rows'
 * RoPE cos/sin (layer_rope_cs), else they are computed here. */
mor_status layer_forward(const mor_model *m, int32_t l, mor_kv_cache *kv, layer_scratch *s,
                         float *x, const int32_t *pos, const int32_t *seq, int32_t n);

/* The same over rows whose cache (and depth-wise LoRA) layer differs: row i
 * appends to and attends over the cache of unrolled layer row_layer[i]
 * (NULL: l for every row), for continuous depth-wise batching (serve.c).
 * The weights are those of layer l: every row_layer[i] must have the same
 * weights as l (tied block positions). Attention runs once per run of
 * consecutive rows with the same layer, so callers group rows by layer. */
mor_status layer_forward_rows(const mor_model *m, int32_t l, const int32_t *row_layer, mor_kv_cache *kv,
                              layer_scratch *s, float *x, const int32_t *pos, const int32_t *seq, int32_t n);

/* cs[i] (head_dim floats: cos then sin of the half-dim angles) for the n
 * positions pos, as k_rope computes them. */
void layer_rope_cs(const mor_model *m, const layer_scratch *s, const int32_t *pos, int32_t n, float *cs);
#endif
