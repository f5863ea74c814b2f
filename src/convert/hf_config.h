/* hf_config.h - the dimensions of a Llama / MoR-Llama model from its Hugging
 * Face config.json (a LlamaConfig), with LlamaConfig's defaults. */
#ifndef CV_HF_CONFIG_H
#define CV_HF_CONFIG_H
#include <stddef.h>
#include <stdint.h>

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
} hf_config;

int hf_config_parse(hf_config *c, const char *text, size_t len, char *err, size_t errcap);
int hf_config_load(hf_config *c, const char *path, char *err, size_t errcap);

/* Only bos/eos/pad_token_id of a config.json (-1 when absent), for a
 * tokenizer-only conversion where the model dimensions do not matter. */
int hf_config_token_ids(const char *path, int64_t *bos, int64_t *eos, int64_t *pad, char *err, size_t errcap);

#endif
