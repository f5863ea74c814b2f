/* layer.h - one Llama decoder layer over a set of rows, with its KV cache. */
#ifndef MOR_LAYER_H
#define MOR_LAYER_H
#include "context.h"

/* x (n rows of n_embd) <- layer(x), in place. Rows carry their own position
 * and sequence. The rows' keys and values are appended to the cache of
 * unrolled layer l (unless the cache mode shares them from recursion 0; then
 * only queries are computed); every row then attends to the visible cells of
 * its sequence with position <= its own. MOR_E_KV_FULL if a cell is missing.
 * The work runs on s->exec's threads; s->rope_cs may carry the rows'
 * RoPE cos/sin (layer_rope_cs), else they are computed here. */
mor_status layer_forward(const mor_model *m, int32_t l, mor_kv_cache *kv, layer_scratch *s,
                         float *x, const int32_t *pos, const int32_t *seq, int32_t n);

/* cs[i] (head_dim floats: cos then sin of the half-dim angles) for the n
 * positions pos, as mor_rope computes them. */
void layer_rope_cs(const mor_model *m, const layer_scratch *s, const int32_t *pos, int32_t n, float *cs);
#endif
