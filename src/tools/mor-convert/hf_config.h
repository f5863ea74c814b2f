/* hf_config.h - the dimensions of a model from its Hugging Face config.json:
 * a Llama / MoR-Llama (LlamaConfig, with its defaults), or one of the other
 * model families libmor runs (GemmaConfig, Gemma2Config, GPTNeoXConfig, with
 * theirs), whose architecture features go to `arch` (docs/FORMAT.md "Model
 * families"), or the looped Llama NanbeigeForCausalLM (num_loops, n_layer
 * counted unrolled), or Ouro's OuroForCausalLM (total_ut_steps loops, sandwich
 * norms, its exit gate). Another architecture is refused, by name. */
#ifndef CV_HF_CONFIG_H
#define CV_HF_CONFIG_H
#include <stddef.h>
#include <stdint.h>

#define CV_MAX_LAYERS 4096

/* the families, as mor.family names them */
enum { CV_FAMILY_LLAMA, CV_FAMILY_GEMMA, CV_FAMILY_GEMMA2, CV_FAMILY_GPTNEOX };
extern const char *const cv_family_names[];     /* "llama", "gemma", "gemma2", "gptneox", NULL */
enum { CV_ACT_SILU, CV_ACT_GELU, CV_ACT_GELU_TANH };
extern const char *const cv_act_names[];        /* "silu", "gelu", "gelu_tanh", NULL (mor.ffn.activation) */

/* The architecture features: a Llama's are all 0 but gated (1). */
typedef struct {
    int family;                 /* CV_FAMILY_* */
    int layer_norm;             /* LayerNorm with bias instead of RMSNorm */
    int act, gated;             /* CV_ACT_*; gate_proj exists */
    int attn_bias, ffn_bias;    /* the projections have biases */
    int parallel;               /* use_parallel_residual */
    int post_norms;             /* Gemma 2's post-attention / post-feed-forward norms */
    float norm_offset;          /* added to a checkpoint's norm weights on conversion (Gemma's 1 + w) */
    uint32_t rope_dims;         /* rotated dims per head; 0: all of them */
    float attn_scale;           /* 0: 1/sqrt(head_dim) */
    float attn_softcap, final_softcap, embd_scale;   /* 0: none */
    uint32_t window;            /* sliding window, 0: none */
    unsigned char local[CV_MAX_LAYERS];              /* per layer: the window applies */
    int loop_norm;              /* a looped model's final norm between its loops (Nanbeige) */
} cv_arch;

/* Whether arch is a plain Llama's (else the file is format version 3). */
int cv_arch_is_llama(const cv_arch *a);
/* A Llama's arch. */
void cv_arch_llama(cv_arch *a);

typedef struct {
    uint32_t hidden, intermediate, n_head, n_head_kv, head_dim, n_layer, vocab, ctx;
    float eps, rope_theta;
    int tie_embeddings;          /* tie_word_embeddings (LlamaConfig default: false) */
    int is_mor;                  /* architectures names MoRLlamaForCausalLM */
    /* the "kv_sharing" block that MoR adds when KV sharing is on */
    int has_kv_block, kv_enable;
    int64_t kv_base_depth, kv_num_recursion;   /* 0 when null/absent */
    char kv_sharing[32];                       /* "" when null/absent */
    int64_t bos, eos, pad;       /* -1 when absent or null */
    uint32_t n_loops;            /* a looped model (nanbeige, NanbeigeForCausalLM): its n_layer / n_loops layers run
                                    this many times; 0 or 1: not */
    int ouro;                    /* OuroForCausalLM: a looped model with sandwich norms and an early-exit gate */
    cv_arch arch;
} hf_config;

int hf_config_parse(hf_config *c, const char *text, size_t len, char *err, size_t errcap);
int hf_config_load(hf_config *c, const char *path, char *err, size_t errcap);

/* Only bos/eos/pad_token_id of a config.json (-1 when absent), for a
 * tokenizer-only conversion where the model dimensions do not matter. */
int hf_config_token_ids(const char *path, int64_t *bos, int64_t *eos, int64_t *pad, char *err, size_t errcap);

#endif
