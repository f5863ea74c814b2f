/* hf_config.c - read config.json. Every value a converted model depends on is
 * range-checked here, so later code can trust the dimensions. */
#include "hf_config.h"

#include <stdio.h>
#include <string.h>

#include "json.h"
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

int hf_config_parse(hf_config *c, const char *text, size_t len, char *err, size_t errcap)
{
    json *root = json_parse(text, len, err, errcap);
    const json *a, *v;
    int rc = -1;
    memset(c, 0, sizeof *c);
    if (!root) return cv_prefix(err, errcap, "config.json");
    if (root->type != JSON_OBJECT) { cv_fail(err, errcap, "config.json is not a JSON object"); goto done; }

    a = json_get(root, "architectures");
    if (a && a->type == JSON_ARRAY) {
        int known = 0;
        for (size_t i = 0; i < a->n; i++) {
            const char *s = json_as_str(a->items[i]);
            if (s && strcmp(s, "MoRLlamaForCausalLM") == 0) { known = 1; c->is_mor = 1; }
            if (s && strcmp(s, "LlamaForCausalLM") == 0) known = 1;
        }
        if (!known) {
            cv_fail(err, errcap, "config.json: architecture '%.60s' is not supported (LlamaForCausalLM or MoRLlamaForCausalLM)",
                    a->n && json_as_str(a->items[0]) ? a->items[0]->str : "?");
            goto done;
        }
    } else {
        const char *mt = json_as_str(json_get(root, "model_type"));
        if (!mt || strcmp(mt, "llama") != 0) {
            cv_fail(err, errcap, "config.json: neither 'architectures' nor model_type \"llama\"");
            goto done;
        }
    }
    v = json_get(root, "rope_scaling");
    if (v && v->type != JSON_NULL) { cv_fail(err, errcap, "config.json: rope_scaling is not supported"); goto done; }
    v = json_get(root, "hidden_act");
    if (v && (!json_as_str(v) || strcmp(v->str, "silu") != 0)) {
        cv_fail(err, errcap, "config.json: hidden_act must be \"silu\"");
        goto done;
    }
    if (must_be_false(root, "attention_bias", "attention_bias", err, errcap) ||
        must_be_false(root, "mlp_bias", "mlp_bias", err, errcap))
        goto done;

    if (get_dim(root, "hidden_size", 0, &c->hidden, err, errcap) ||
        get_dim(root, "intermediate_size", 0, &c->intermediate, err, errcap) ||
        get_dim(root, "num_attention_heads", 0, &c->n_head, err, errcap) ||
        get_dim(root, "num_hidden_layers", 0, &c->n_layer, err, errcap) ||
        get_dim(root, "vocab_size", 0, &c->vocab, err, errcap) ||
        get_dim(root, "num_key_value_heads", c->n_head, &c->n_head_kv, err, errcap) ||
        get_dim(root, "max_position_embeddings", 2048, &c->ctx, err, errcap))
        goto done;
    if (!json_get(root, "head_dim") && c->hidden % c->n_head != 0) {
        cv_fail(err, errcap, "config.json: hidden_size is not a multiple of num_attention_heads and head_dim is not given");
        goto done;
    }
    if (get_dim(root, "head_dim", c->hidden / c->n_head ? c->hidden / c->n_head : 1, &c->head_dim, err, errcap)) goto done;
    if (c->n_head % c->n_head_kv != 0) {
        cv_fail(err, errcap, "config.json: num_key_value_heads (%u) does not divide num_attention_heads (%u)", c->n_head_kv, c->n_head);
        goto done;
    }
    if ((uint64_t)c->n_head * c->head_dim > INT32_MAX) { cv_fail(err, errcap, "config.json: attention too wide"); goto done; }
    if (get_float(root, "rms_norm_eps", 1e-6, &c->eps, err, errcap) ||
        get_float(root, "rope_theta", 10000.0, &c->rope_theta, err, errcap))
        goto done;
    v = json_get(root, "tie_word_embeddings");
    if (v && v->type != JSON_BOOL) { cv_fail(err, errcap, "config.json: tie_word_embeddings is not a boolean"); goto done; }
    c->tie_embeddings = v ? v->boolean : 0;
    if (get_token(root, "bos_token_id", &c->bos, err, errcap) || get_token(root, "eos_token_id", &c->eos, err, errcap) ||
        get_token(root, "pad_token_id", &c->pad, err, errcap))
        goto done;

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
