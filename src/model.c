/* model.c - a loaded model (load.c makes it): its role and family names,
 * the public getters, and the tokenizer functions of the public API. */
#include <stdio.h>
#include <string.h>
#include "model.h"
#include "status.h"

/* Each role's layer-map name and, with its suffix, tensor name after "blk.N."
 * (a bias's name is its tensor's). */
#define ROLES(X)                                                                                 \
    X("attn_norm", ".weight") X("attn_q", ".weight") X("attn_k", ".weight") X("attn_v", ".weight") \
    X("attn_output", ".weight") X("ffn_norm", ".weight") X("ffn_gate", ".weight")                \
    X("ffn_up", ".weight") X("ffn_down", ".weight")                                               \
    X("attn_norm.bias", "") X("attn_q.bias", "") X("attn_k.bias", "") X("attn_v.bias", "")        \
    X("attn_output.bias", "") X("ffn_norm.bias", "") X("ffn_gate.bias", "") X("ffn_up.bias", "")  \
    X("ffn_down.bias", "") X("attn_post_norm", ".weight") X("ffn_post_norm", ".weight")
#define ROLE_NAME(name, suffix) name,
#define ROLE_TENSOR(name, suffix) name suffix,
const char *const role_names[ROLE_ALL] = { ROLES(ROLE_NAME) };
const char *const role_tensor[ROLE_ALL] = { ROLES(ROLE_TENSOR) };
#undef ROLE_NAME
#undef ROLE_TENSOR
#undef ROLES
const char *const family_names[FAMILY_COUNT] = { "llama", "gemma", "gemma2", "gptneox" };

/* The public tokenizer functions: the model's tokenizer (tokenize.c). */
mor_status mor_tokenize(const mor_model *model, const char *text, size_t len,
                        uint32_t flags, mor_token *out, int32_t cap, int32_t *n_out)
{
    err_clear();
    if (!model) return err_set(MOR_E_INVALID_ARG, "mor_tokenize: model is NULL");
    const tokenizer *t = model->tok;
    if (!t) return err_set(MOR_E_UNSUPPORTED, "mor_tokenize: the model has no tokenizer");
    return tokenizer_encode(t, text, len, flags, out, cap, n_out);
}

mor_status mor_detokenize(const mor_model *model, const mor_token *tokens, int32_t n,
                          char *buf, size_t cap, size_t *len_out)
{
    err_clear();
    if (!model) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: model is NULL");
    const tokenizer *t = model->tok;
    if (!t) return err_set(MOR_E_UNSUPPORTED, "mor_detokenize: the model has no tokenizer");
    return tokenizer_decode(t, tokens, n, buf, cap, len_out);
}

mor_status mor_token_to_piece(const mor_model *model, mor_token token, char *buf, size_t cap, size_t *len_out)
{
    err_clear();
    if (!model) return err_set(MOR_E_INVALID_ARG, "mor_token_to_piece: model is NULL");
    const tokenizer *t = model->tok;
    if (!t) return err_set(MOR_E_UNSUPPORTED, "mor_token_to_piece: the model has no tokenizer");
    return tokenizer_piece(t, token, buf, cap, len_out);
}

int32_t mor_model_n_vocab(const mor_model *m)     { return m ? m->n_vocab : 0; }
int32_t mor_model_n_embd(const mor_model *m)      { return m ? m->n_embd : 0; }
int32_t mor_model_n_layer(const mor_model *m)     { return m ? m->n_layer : 0; }
int32_t mor_model_n_recursion(const mor_model *m) { return m ? m->n_rec : 0; }
int32_t mor_model_n_head(const mor_model *m)      { return m ? m->n_head : 0; }
int32_t mor_model_n_head_kv(const mor_model *m)   { return m ? m->n_head_kv : 0; }
int32_t mor_model_head_dim(const mor_model *m)    { return m ? m->head_dim : 0; }
int32_t mor_model_n_ctx_train(const mor_model *m) { return m ? m->n_ctx_train : 0; }
int32_t mor_model_router_type(const mor_model *m) { return m ? m->router_type : 0; }
uint64_t mor_model_size_bytes(const mor_model *m) { return m ? m->weight_bytes : 0; }
mor_token mor_model_token_bos(const mor_model *m) { return m && m->tok ? tokenizer_bos(m->tok) : -1; }
int32_t mor_model_add_bos(const mor_model *m) { return m && m->tok ? tokenizer_add_bos(m->tok) : 0; }
mor_token mor_model_token_eos(const mor_model *m) { return m && m->tok ? tokenizer_eos(m->tok) : -1; }
int32_t mor_max_recursions(void) { return MOR_MAX_RECURSIONS; }

/* Modules as the official model lists them: each prelude/coda layer, each
 * expert-choice recursion, the single token-choice block; without routers,
 * every layer. Capture points = modules + 1 (see mor_get_hidden). */
int32_t mor_model_n_boundaries(const mor_model *m)
{
    if (!m || !m->layers) return 0;
    switch (m->router_type) {
    case MOR_ROUTER_TYPE_EXPERT: return m->prelude + m->n_rec + m->coda + 1;
    case MOR_ROUTER_TYPE_TOKEN:  return m->prelude + 1 + m->coda + 1;
    default:                     return m->n_layer + 1;
    }
}

mor_status mor_model_meta_str(const mor_model *m, const char *key, char *buf, size_t cap, size_t *len_out)
{
    err_clear();
    if (!m || !key || (!buf && cap)) return err_set(MOR_E_INVALID_ARG, "mor_model_meta_str: NULL argument");
    const gguf_kv *kv = gguf_find_kv(m->gguf, key);
    if (!kv) return err_set(MOR_E_OUT_OF_RANGE, "no metadata key '%s'", key);
    char tmp[64];
    const char *s = tmp;
    size_t n;
    int64_t iv;
    float f;
    int b;
    gguf_str str;
    if (kv->type == GGUF_STR) { gguf_get_str(m->gguf, key, &str); s = str.p; n = (size_t)str.n; }
    else if (kv->type == GGUF_BOOL) { gguf_get_bool(m->gguf, key, &b); n = (size_t)snprintf(tmp, sizeof tmp, "%s", b ? "true" : "false"); }
    else if (kv->type == GGUF_F32 || kv->type == GGUF_F64) { gguf_get_f32(m->gguf, key, &f); n = (size_t)snprintf(tmp, sizeof tmp, "%.9g", f); }
    else if (!gguf_get_i64(m->gguf, key, &iv)) n = (size_t)snprintf(tmp, sizeof tmp, "%lld", (long long)iv);
    else return err_set(MOR_E_UNSUPPORTED, "metadata key '%s' is an array", key);
    if (len_out) *len_out = n;
    if (cap) {
        size_t c = n < cap - 1 ? n : cap - 1;
        memcpy(buf, s, c);
        buf[c] = 0;
    }
    if (n >= cap) return err_set(MOR_E_BUFFER_TOO_SMALL, "metadata value needs %zu bytes", n + 1);
    return MOR_OK;
}
