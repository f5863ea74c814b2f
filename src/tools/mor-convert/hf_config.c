/* hf_config.c - read config.json. Every value a converted model depends on is
 * range-checked here, so later code can trust the dimensions. */
#include "hf_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "mor.h"
#include "util.h"

/* A positive integer key; `def` when absent (0 = required). */
static int get_dim(const json *o, const char *k, uint32_t def, uint32_t *out, char *err, size_t errcap)
{
    const json *v = json_get(o, k);
    int64_t x;
    if (!v || v->type == JSON_NULL) {
        if (!def) return cv_fail(err, errcap, "config.json: '%s' is missing", k);
        *out = def;
        return 0;
    }
    if (!json_as_int(v, 1, INT32_MAX, &x)) return cv_fail(err, errcap, "config.json: '%s' is not a positive integer", k);
    *out = (uint32_t)x;
    return 0;
}

static int get_float(const json *o, const char *k, double def, float *out, char *err, size_t errcap)
{
    const json *v = json_get(o, k);
    if (!v || v->type == JSON_NULL) { *out = (float)def; return 0; }
    if (v->type != JSON_NUMBER || !(v->num > 0) || v->num > 3.0e38)
        return cv_fail(err, errcap, "config.json: '%s' is not a positive number", k);
    *out = (float)v->num;
    return 0;
}

/* A token id: an integer, null, or (for eos) a list whose first id is used. */
static int get_token(const json *o, const char *k, int64_t *out, char *err, size_t errcap)
{
    const json *v = json_get(o, k);
    *out = -1;
    if (v && v->type == JSON_ARRAY) v = v->n ? v->items[0] : NULL;
    if (!v || v->type == JSON_NULL) return 0;
    if (!json_as_int(v, 0, INT32_MAX, out)) return cv_fail(err, errcap, "config.json: '%s' is not a token id", k);
    return 0;
}

static int must_be_false(const json *o, const char *k, const char *what, char *err, size_t errcap)
{
    const json *v = json_get(o, k);
    if (v && !(v->type == JSON_NULL || (v->type == JSON_BOOL && !v->boolean)))
        return cv_fail(err, errcap, "config.json: %s is not supported", what);
    return 0;
}

const char *const cv_family_names[] = {"llama", "gemma", "gemma2", "gptneox", NULL};
const char *const cv_act_names[] = {"silu", "gelu", "gelu_tanh", NULL};

void cv_arch_llama(cv_arch *a)
{
    memset(a, 0, sizeof *a);
    a->family = CV_FAMILY_LLAMA;
    a->act = CV_ACT_SILU;
    a->gated = 1;
}

int cv_arch_is_llama(const cv_arch *a)
{
    cv_arch l;
    cv_arch_llama(&l);
    return memcmp(a, &l, sizeof l) == 0;
}

/* The architecture classes config.json may name, and their family. */
static const struct { const char *cls, *model_type; int family, mor, looped; } known_arch[] = {
    {"LlamaForCausalLM", "llama", CV_FAMILY_LLAMA, 0, 0},
    {"MoRLlamaForCausalLM", NULL, CV_FAMILY_LLAMA, 1, 0},
    {"GemmaForCausalLM", "gemma", CV_FAMILY_GEMMA, 0, 0},
    {"Gemma2ForCausalLM", "gemma2", CV_FAMILY_GEMMA2, 0, 0},
    {"GPTNeoXForCausalLM", "gpt_neox", CV_FAMILY_GPTNEOX, 0, 0},
    {"NanbeigeForCausalLM", NULL, CV_FAMILY_LLAMA, 0, 1},
    {"OuroForCausalLM", NULL, CV_FAMILY_LLAMA, 0, 2},   /* looped 2: Ouro's keys (loop_keys) */
};
#define N_KNOWN_ARCH (sizeof known_arch / sizeof known_arch[0])

static int family_of(const json *root, hf_config *c, char *err, size_t errcap)
{
    const json *a = json_get(root, "architectures");
    if (a && a->type == JSON_ARRAY) {
        for (size_t i = 0; i < a->n; i++) {
            const char *s = json_as_str(a->items[i]);
            for (size_t k = 0; s && k < N_KNOWN_ARCH; k++)
                if (strcmp(s, known_arch[k].cls) == 0) {
                    c->arch.family = known_arch[k].family;
                    c->is_mor |= known_arch[k].mor;
                    c->n_loops = known_arch[k].looped > 0;   /* 1 marks a looped architecture until loop_keys */
                    c->ouro = known_arch[k].looped == 2;
                    return 0;
                }
        }
        return cv_fail(err, errcap, "config.json: architecture '%.60s' is not supported (LlamaForCausalLM, "
                                    "MoRLlamaForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, GPTNeoXForCausalLM, "
                                    "NanbeigeForCausalLM, OuroForCausalLM)",
                       a->n && json_as_str(a->items[0]) ? a->items[0]->str : "?");
    }
    const char *mt = json_as_str(json_get(root, "model_type"));
    for (size_t k = 0; mt && k < N_KNOWN_ARCH; k++)
        if (known_arch[k].model_type && strcmp(mt, known_arch[k].model_type) == 0) {
            c->arch.family = known_arch[k].family;
            return 0;
        }
    return cv_fail(err, errcap, "config.json: neither 'architectures' nor a known model_type (llama, gemma, gemma2, "
                                "gpt_neox)%s%.60s", mt ? "; it says " : "", mt ? mt : "");
}

/* An activation name of transformers' ACT2FN that libmor computes. */
static int act_of(const json *root, const char *key, const char *def, int *act, char *err, size_t errcap)
{
    const json *v = json_get(root, key);
    const char *s = v && v->type != JSON_NULL ? json_as_str(v) : def;
    if (!s) return cv_fail(err, errcap, "config.json: '%s' is not a string", key);
    if (strcmp(s, "silu") == 0) *act = CV_ACT_SILU;
    else if (strcmp(s, "gelu") == 0) *act = CV_ACT_GELU;
    else if (strcmp(s, "gelu_pytorch_tanh") == 0 || strcmp(s, "gelu_new") == 0) *act = CV_ACT_GELU_TANH;
    else return cv_fail(err, errcap, "config.json: %s '%.40s' is not supported (silu, gelu, gelu_pytorch_tanh, gelu_new)", key, s);
    return 0;
}

/* A positive number, or null / absent: 0 when null, def when absent. */
static int get_opt_pos(const json *o, const char *k, double def, float *out, char *err, size_t errcap)
{
    const json *v = json_get(o, k);
    if (!v) { *out = (float)def; return 0; }
    if (v->type == JSON_NULL) { *out = 0; return 0; }
    if (v->type != JSON_NUMBER || !(v->num > 0) || v->num > 3.0e38)
        return cv_fail(err, errcap, "config.json: '%s' is not a positive number", k);
    *out = (float)v->num;
    return 0;
}

static int get_bool(const json *o, const char *k, int def, int *out, char *err, size_t errcap)
{
    const json *v = json_get(o, k);
    if (!v || v->type == JSON_NULL) { *out = def; return 0; }
    if (v->type != JSON_BOOL) return cv_fail(err, errcap, "config.json: '%s' is not a boolean", k);
    *out = v->boolean;
    return 0;
}

/* NanbeigeForCausalLM (Nanbeige4.2): a Llama whose num_hidden_layers layers
 * run num_loops times, the final norm between loops unless
 * skip_loop_final_norm. As llama.cpp's converter reads them
 * (conversion/nanbeige.py): num_loops absent, null or 0 is 1 loop, and
 * skip_loop_final_norm defaults to false. OuroForCausalLM: total_ut_steps
 * loops (absent: 4, as vLLM's ouro.py), the final norm after every loop, and
 * each layer sandwich-normed (post_norms: its input_layernorm_2 and
 * post_attention_layernorm_2). The layers are counted unrolled, as the GGUF
 * route counts them; family_map names the copies. */
static int loop_keys(const json *root, hf_config *c, char *err, size_t errcap)
{
    const char *key = c->ouro ? "total_ut_steps" : "num_loops";
    const json *v = json_get(root, key);
    int64_t n = c->ouro ? 4 : 1;
    int skip = 0;
    if (c->ouro ? v && !json_as_int(v, 1, INT32_MAX, &n)
                : v && v->type != JSON_NULL && !json_as_int(v, 0, INT32_MAX, &n))
        return cv_fail(err, errcap, c->ouro ? "config.json: total_ut_steps is not a positive integer"
                                            : "config.json: num_loops is not a non-negative integer (absent, null or 0: 1 loop)");
    if (n == 0) n = 1;
    if (n > MOR_MAX_RECURSIONS || (uint64_t)n * c->n_layer > CV_MAX_LAYERS)
        return cv_fail(err, errcap, "config.json: %lld loops of %u layers; libmor runs up to %d recursions, %d layers",
                       (long long)n, c->n_layer, MOR_MAX_RECURSIONS, CV_MAX_LAYERS);
    if (!c->ouro && get_bool(root, "skip_loop_final_norm", 0, &skip, err, errcap)) return -1;
    c->n_loops = (uint32_t)n;
    c->arch.loop_norm = n > 1 && !skip;
    c->arch.post_norms = c->ouro;
    c->n_layer *= c->n_loops;
    return 0;
}

/* The features of the families beyond Llama, with their configs' defaults
 * (GemmaConfig, Gemma2Config, GPTNeoXConfig). */
static int family_features(const json *root, hf_config *c, char *err, size_t errcap)
{
    cv_arch *a = &c->arch;
    const json *v;
    if (a->family == CV_FAMILY_GEMMA || a->family == CV_FAMILY_GEMMA2) {
        /* GemmaRMSNorm: x_hat * (1 + w); embeddings * sqrt(hidden_size); GeGLU */
        a->norm_offset = 1.0f;
        a->embd_scale = (float)sqrt((double)c->hidden);
        if (act_of(root, "hidden_activation", "gelu_pytorch_tanh", &a->act, err, errcap)) return -1;
    }
    if (a->family == CV_FAMILY_GEMMA2) {
        float qs;
        a->post_norms = 1;
        if (get_opt_pos(root, "query_pre_attn_scalar", 256, &qs, err, errcap) ||
            get_opt_pos(root, "attn_logit_softcapping", 50.0, &a->attn_softcap, err, errcap) ||
            get_opt_pos(root, "final_logit_softcapping", 30.0, &a->final_softcap, err, errcap))
            return -1;
        if (!(qs > 0)) return cv_fail(err, errcap, "config.json: query_pre_attn_scalar is null");
        a->attn_scale = (float)pow((double)qs, -0.5);   /* HF: query_pre_attn_scalar ** -0.5 */
        v = json_get(root, "sliding_window");
        if (!v) a->window = 4096;
        else if (v->type != JSON_NULL) {
            int64_t w;
            if (!json_as_int(v, 1, INT32_MAX, &w)) return cv_fail(err, errcap, "config.json: bad sliding_window");
            a->window = (uint32_t)w;
        }
        v = json_get(root, "layer_types");
        for (uint32_t l = 0; a->window && l < c->n_layer; l++) {
            const char *t = v && v->type == JSON_ARRAY && l < v->n ? json_as_str(v->items[l]) : NULL;
            if (v && v->type == JSON_ARRAY) {
                if (v->n != c->n_layer || !t || (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")))
                    return cv_fail(err, errcap, "config.json: layer_types must list sliding_attention or full_attention "
                                                "for each of the %u layers", c->n_layer);
                a->local[l] = strcmp(t, "sliding_attention") == 0;
            } else {
                a->local[l] = l % 2 == 0;   /* Gemma 2: every other layer, from the first */
            }
        }
    }
    if (a->family == CV_FAMILY_GPTNEOX) {
        float pct;
        a->layer_norm = 1;
        a->gated = 0;
        a->ffn_bias = 1;
        if (get_bool(root, "attention_bias", 1, &a->attn_bias, err, errcap) ||
            get_bool(root, "use_parallel_residual", 1, &a->parallel, err, errcap) ||
            act_of(root, "hidden_act", "gelu", &a->act, err, errcap))
            return -1;
        v = json_get(root, "partial_rotary_factor");
        if (get_float(root, v ? "partial_rotary_factor" : "rotary_pct", 0.25, &pct, err, errcap)) return -1;
        if (pct > 1) return cv_fail(err, errcap, "config.json: rotary_pct %g is above 1", pct);
        uint32_t rd = (uint32_t)(c->head_dim * (double)pct);   /* int(head_size * rotary_pct) */
        if (rd < 2 || rd % 2)
            return cv_fail(err, errcap, "config.json: %u rotary dims (head_dim %u x rotary_pct %g) are not an even number >= 2",
                           rd, c->head_dim, pct);
        a->rope_dims = rd == c->head_dim ? 0 : rd;
    }
    return 0;
}

int hf_config_parse(hf_config *c, const char *text, size_t len, char *err, size_t errcap)
{
    json *root = json_parse(text, len, err, errcap);
    const json *v;
    int rc = -1;
    memset(c, 0, sizeof *c);
    cv_arch_llama(&c->arch);
    if (!root) return cv_prefix(err, errcap, "config.json");
    if (root->type != JSON_OBJECT) { cv_fail(err, errcap, "config.json is not a JSON object"); goto done; }
    if (family_of(root, c, err, errcap)) goto done;
    const int fam = c->arch.family, neox = fam == CV_FAMILY_GPTNEOX, gemma = fam == CV_FAMILY_GEMMA || fam == CV_FAMILY_GEMMA2;

    v = json_get(root, "rope_scaling");
    if (v && v->type != JSON_NULL) { cv_fail(err, errcap, "config.json: rope_scaling is not supported"); goto done; }
    if (fam == CV_FAMILY_LLAMA) {
        v = json_get(root, "hidden_act");
        if (v && (!json_as_str(v) || strcmp(v->str, "silu") != 0)) {
            cv_fail(err, errcap, "config.json: hidden_act must be \"silu\"");
            goto done;
        }
        if (must_be_false(root, "mlp_bias", "mlp_bias", err, errcap)) goto done;
    }
    if (!neox && must_be_false(root, "attention_bias", "attention_bias", err, errcap)) goto done;

    if (get_dim(root, "hidden_size", 0, &c->hidden, err, errcap) ||
        get_dim(root, "intermediate_size", 0, &c->intermediate, err, errcap) ||
        get_dim(root, "num_attention_heads", 0, &c->n_head, err, errcap) ||
        get_dim(root, "num_hidden_layers", 0, &c->n_layer, err, errcap) ||
        get_dim(root, "vocab_size", 0, &c->vocab, err, errcap) ||
        get_dim(root, "num_key_value_heads", c->n_head, &c->n_head_kv, err, errcap) ||
        get_dim(root, "max_position_embeddings", gemma ? 8192 : 2048, &c->ctx, err, errcap))
        goto done;
    if (c->n_layer > CV_MAX_LAYERS) { cv_fail(err, errcap, "config.json: more than %d layers", CV_MAX_LAYERS); goto done; }
    if (neox && c->n_head_kv != c->n_head) {
        cv_fail(err, errcap, "config.json: GPT-NeoX has as many key/value heads as query heads");
        goto done;
    }
    if (!gemma && !json_get(root, "head_dim") && c->hidden % c->n_head != 0) {
        cv_fail(err, errcap, "config.json: hidden_size is not a multiple of num_attention_heads and head_dim is not given");
        goto done;
    }
    if (neox) c->head_dim = c->hidden / c->n_head;   /* GPTNeoXConfig has no head_dim */
    else if (get_dim(root, "head_dim", gemma ? 256 : c->hidden / c->n_head ? c->hidden / c->n_head : 1, &c->head_dim, err,
                     errcap))
        goto done;
    if (c->n_head % c->n_head_kv != 0) {
        cv_fail(err, errcap, "config.json: num_key_value_heads (%u) does not divide num_attention_heads (%u)", c->n_head_kv, c->n_head);
        goto done;
    }
    if ((uint64_t)c->n_head * c->head_dim > INT32_MAX) { cv_fail(err, errcap, "config.json: attention too wide"); goto done; }
    if (neox) {
        if (get_float(root, "layer_norm_eps", 1e-5, &c->eps, err, errcap) ||
            get_float(root, json_get(root, "rope_theta") ? "rope_theta" : "rotary_emb_base", 10000.0, &c->rope_theta, err,
                      errcap))
            goto done;
    } else if (get_float(root, "rms_norm_eps", 1e-6, &c->eps, err, errcap) ||
               get_float(root, "rope_theta", 10000.0, &c->rope_theta, err, errcap)) {
        goto done;
    }
    v = json_get(root, "tie_word_embeddings");
    if (v && v->type != JSON_BOOL) { cv_fail(err, errcap, "config.json: tie_word_embeddings is not a boolean"); goto done; }
    c->tie_embeddings = v ? v->boolean : gemma;   /* GemmaConfig and Gemma2Config tie by default */
    if (get_token(root, "bos_token_id", &c->bos, err, errcap) || get_token(root, "eos_token_id", &c->eos, err, errcap) ||
        get_token(root, "pad_token_id", &c->pad, err, errcap))
        goto done;
    if (family_features(root, c, err, errcap) || (c->n_loops && loop_keys(root, c, err, errcap))) goto done;

    v = json_get(root, "kv_sharing");
    if (v && v->type == JSON_OBJECT) {
        const json *e = json_get(v, "enable"), *s = json_get(v, "sharing");
        c->has_kv_block = 1;
        if (!e || e->type != JSON_BOOL) { cv_fail(err, errcap, "config.json: kv_sharing.enable is not a boolean"); goto done; }
        c->kv_enable = e->boolean;
        if (json_get(v, "base_depth") && json_get(v, "base_depth")->type != JSON_NULL &&
            !json_as_int(json_get(v, "base_depth"), 1, 1 << 20, &c->kv_base_depth)) {
            cv_fail(err, errcap, "config.json: bad kv_sharing.base_depth");
            goto done;
        }
        if (json_get(v, "num_recursion") && json_get(v, "num_recursion")->type != JSON_NULL &&
            !json_as_int(json_get(v, "num_recursion"), 1, 1 << 20, &c->kv_num_recursion)) {
            cv_fail(err, errcap, "config.json: bad kv_sharing.num_recursion");
            goto done;
        }
        if (s && s->type == JSON_STRING) snprintf(c->kv_sharing, sizeof c->kv_sharing, "%s", s->str);
        v = json_get(v, "update_cache");
        if (v && v->type == JSON_BOOL && v->boolean) {
            cv_fail(err, errcap, "config.json: kv_sharing.update_cache=true is not supported");
            goto done;
        }
    } else if (v && v->type != JSON_NULL) {
        cv_fail(err, errcap, "config.json: kv_sharing is not an object");
        goto done;
    }
    rc = 0;
done:
    json_free(root);
    return rc;
}

int hf_config_load(hf_config *c, const char *path, char *err, size_t errcap)
{
    cv_file f;
    int rc;
    if (cv_file_open(&f, path, err, errcap)) return -1;
    rc = hf_config_parse(c, (const char *)f.data, f.size, err, errcap);
    cv_file_close(&f);
    return rc;
}

int hf_config_token_ids(const char *path, int64_t *bos, int64_t *eos, int64_t *pad, char *err, size_t errcap)
{
    cv_file f;
    json *root;
    int rc = -1;
    if (cv_file_open(&f, path, err, errcap)) return -1;
    root = json_parse((const char *)f.data, f.size, err, errcap);
    cv_file_close(&f);
    if (!root) return cv_prefix(err, errcap, "config.json");
    if (root->type != JSON_OBJECT) cv_fail(err, errcap, "config.json is not a JSON object");
    else if (!get_token(root, "bos_token_id", bos, err, errcap) && !get_token(root, "eos_token_id", eos, err, errcap) &&
             !get_token(root, "pad_token_id", pad, err, errcap))
        rc = 0;
    json_free(root);
    return rc;
}
