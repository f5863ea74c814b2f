/* layout.h - the state-dict key grammar of MoR / recursive / plain Llama
 * checkpoints (mor-spec section 12.2), resolved into unrolled layers.
 *
 *   model.embed_tokens.weight, model.norm.weight, lm_head.weight (optional)
 *   model.layers.{i}.<role>                       a plain decoder layer
 *   model.layers.{i}.block.{j}.<role>             expert-choice MoR layer i, block j
 *   model.layers.{i}.mor_router.router.weight     its linear router [1, d], or
 *   model.layers.{i}.mor_router.router.{0,2}.weight   an MLP router
 *   model.layers.{i}.mlp_router.router.*          its aux router (sampling: aux_router)
 *   model.layers.{i}.block_list.{r}.{j}.<role>    token-choice MoR layer (one), recursion r, block j
 *   model.layers.{i}.router_bias                  token-choice selection bias [N_r]
 * where <role> is input_layernorm.weight, self_attn.{q,k,v,o}_proj.weight,
 * post_attention_layernorm.weight or mlp.{gate,up,down}_proj.weight, and for
 * the other families (family.h maps their checkpoints onto this grammar)
 * the same with .bias, attn_post_norm.weight and ffn_post_norm.weight, and
 * model.norm.bias, and Ouro's model.early_exit_gate.{weight [1, d], bias [1]}.
 * A relaxed (PEFT LoRA) checkpoint names a projection's weight
 * <proj>.base_layer.weight instead and adds <proj>.lora_A.default.weight
 * [r, in] and <proj>.lora_B.default.weight [out, r] (adapter "default").
 * The MoR layers must be consecutive, with either no plain layer around them
 * (cycle sharing) or exactly one before and one after (middle_cycle). N_r and
 * K come from the keys. Unrolled layer l = P + r*K + j, as in FORMAT.md.
 * Keys outside the grammar are refused ("*.rotary_emb.inv_freq" buffers, which
 * old transformers versions saved, are ignored). */
#ifndef CV_LAYOUT_H
#define CV_LAYOUT_H
#include <stddef.h>
#include "checkpoint.h"
#include "hf_config.h"

#define LAYOUT_MAX_INDEX 4096   /* bound on layer / block / recursion indices */

/* the decoder-layer roles, in FORMAT.md's order: the nine of a Llama layer
 * (CV_ROLE_COUNT; ffn_gate only in gated FFNs), then the biases (role r's at
 * r + CV_ROLE_COUNT) and Gemma 2's extra norms (format version 3) */
enum { CV_ROLE_ATTN_NORM, CV_ROLE_ATTN_Q, CV_ROLE_ATTN_K, CV_ROLE_ATTN_V, CV_ROLE_ATTN_OUT,
       CV_ROLE_FFN_NORM, CV_ROLE_FFN_GATE, CV_ROLE_FFN_UP, CV_ROLE_FFN_DOWN, CV_ROLE_COUNT,
       CV_ROLE_ATTN_NORM_B = CV_ROLE_COUNT, CV_ROLE_ATTN_Q_B, CV_ROLE_ATTN_K_B, CV_ROLE_ATTN_V_B, CV_ROLE_ATTN_OUT_B,
       CV_ROLE_FFN_NORM_B, CV_ROLE_FFN_GATE_B, CV_ROLE_FFN_UP_B, CV_ROLE_FFN_DOWN_B,
       CV_ROLE_ATTN_POST_NORM, CV_ROLE_FFN_POST_NORM, CV_ROLE_ALL };
extern const char *const cv_role_gguf[CV_ROLE_ALL];     /* "attn_norm", "attn_q", ..., "attn_q.bias", ... */
extern const char *const cv_role_tensor[CV_ROLE_ALL];   /* after "blk.N.": "attn_norm.weight", ..., "attn_q.bias" */
extern const char *const cv_role_hf[CV_ROLE_ALL];       /* "input_layernorm.weight", ..., "self_attn.q_proj.bias" */
/* Norms, biases: 1-D, always F32. */
int cv_role_is_vector(int role);

/* A router: linear (w) or MLP (fc1 = router.0, fc2 = router.2). */
typedef struct {
    const ckpt_tensor *w, *fc1, *fc2;
} lo_router;

typedef struct {
    int kind;                 /* ROUTE_NONE (only plain layers), ROUTE_EXPERT or ROUTE_TOKEN */
    int n_layer;              /* L, unrolled */
    int prelude, coda;        /* plain layers before / after the MoR layers (routed only) */
    int n_rec, base_depth;    /* N_r and K (routed only; 0 for plain) */
    /* [n_layer][role]: the nine but ffn_gate in every layer; ffn_gate and
     * the others in every layer or none (NULL) */
    const ckpt_tensor *(*role)[CV_ROLE_ALL];
    const ckpt_tensor *embed, *norm, *lm_head;   /* lm_head may be NULL */
    const ckpt_tensor *norm_b;                   /* model.norm.bias (LayerNorm), or NULL */
    const ckpt_tensor *exit_w, *exit_b;          /* Ouro's model.early_exit_gate weight and bias, or NULL */
    int arch;                 /* ARCH_LINEAR / ARCH_MLP of the routers; -1 for plain */
    lo_router *router;        /* expert: [n_rec]; token: [1] */
    lo_router *aux;           /* expert with mlp_router: [n_rec]; else NULL */
    const ckpt_tensor *bias;  /* token: router_bias, or NULL */
    /* PEFT LoRA factors per unrolled layer and role: [n_layer][role][0 = A, 1 = B],
     * NULL where absent; the array is NULL when the checkpoint has none */
    const ckpt_tensor *(*lora)[CV_ROLE_COUNT][2];
} cv_layout;

int  layout_build(cv_layout *lo, const checkpoint *ck, char *err, size_t errcap);
void layout_free(cv_layout *lo);

/* Check every tensor's shape against the config's dimensions, and that the
 * layers have exactly the roles the config's architecture features need. */
int layout_check_shapes(const cv_layout *lo, const hf_config *c, char *err, size_t errcap);
/* Whether a model of these features has role (CV_ROLE_*) tensors. */
int cv_arch_has_role(const cv_arch *a, int role);

#endif
