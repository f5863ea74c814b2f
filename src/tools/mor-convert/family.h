/* family.h - checkpoints of the model families beyond Llama (Gemma, Gemma 2,
 * GPT-NeoX, the looped Llama Nanbeige), mapped onto the key grammar of
 * layout.h, so that the rest of the converter (layout, tying, LoRA, writing)
 * sees one kind of layer:
 *
 *   Gemma      names as Llama's; every norm weight w becomes the F32 1 + w
 *              that GemmaRMSNorm multiplies by (so libmor's RMSNorm computes
 *              it bit for bit, as llama.cpp's converter stores it too)
 *   Gemma 2    the same, and its four norms per layer: input_layernorm ->
 *              input_layernorm (attn_norm), post_attention_layernorm ->
 *              attn_post_norm, pre_feedforward_layernorm ->
 *              post_attention_layernorm (ffn_norm), post_feedforward_layernorm
 *              -> ffn_post_norm
 *   GPT-NeoX   gpt_neox.embed_in -> model.embed_tokens, embed_out -> lm_head,
 *              gpt_neox.final_layer_norm -> model.norm (.weight, .bias),
 *              attention.dense -> self_attn.o_proj, mlp.dense_h_to_4h ->
 *              mlp.up_proj, mlp.dense_4h_to_h -> mlp.down_proj (with biases);
 *              attention.query_key_value, whose rows are per head [q; k; v]
 *              (head h: q at rows 3 h hd .. 3 h hd + hd, then k, then v, as
 *              GPTNeoXAttention views them), split into q_proj, k_proj and
 *              v_proj (weights and biases); the buffers attention.bias,
 *              attention.masked_bias and rotary_emb.inv_freq are dropped.
 *   Nanbeige   a looped Llama (hf_config.h's n_loops > 1): each of its K
 *              layers' tensors also under the names of unrolled layers
 *              r*K + l, r < n_loops (the same bytes), as a llama.cpp file's.
 * Keys outside a family's grammar are left for layout.c to refuse. */
#ifndef CV_FAMILY_H
#define CV_FAMILY_H
#include <stddef.h>
#include "checkpoint.h"
#include "hf_config.h"

typedef struct {
    checkpoint ck;       /* the mapped tensors; their data points into the input or own */
    void **own;          /* buffers made here (split, offset) */
    size_t n_own;
} family_ckpt;

/* Map in (which must outlive out) for cfg's family; a plain Llama's is copied as it is. */
int  family_map(family_ckpt *out, const checkpoint *in, const hf_config *cfg, char *err, size_t errcap);
void family_free(family_ckpt *f);
#endif
