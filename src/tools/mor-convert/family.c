/* family.c - the model families' checkpoints in the Llama key grammar. See family.h. */
#include "family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "util.h"

void family_free(family_ckpt *f)
{
    for (size_t i = 0; i < f->n_own; i++) free(f->own[i]);
    free(f->own);
    ckpt_free(&f->ck);
    memset(f, 0, sizeof *f);
}

static void *own_alloc(family_ckpt *f, size_t n)
{
    void *p = malloc(n ? n : 1);
    void **no = p ? realloc(f->own, (f->n_own + 1) * sizeof *no) : NULL;
    if (!no) { free(p); return NULL; }
    f->own = no;
    f->own[f->n_own++] = p;
    return p;
}

static int add(family_ckpt *f, const char *name, const ckpt_tensor *t, int dtype, const uint64_t *shape,
               const void *data, char *err, size_t errcap)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= shape[i];
    return ckpt_add(&f->ck, name, strlen(name), dtype, t->ndim, shape, data, n * cv_dtype_size(dtype), err, errcap);
}

/* t as F32 with off added to every value (GemmaRMSNorm's 1 + w, in float). */
static int add_offset(family_ckpt *f, const char *name, const ckpt_tensor *t, float off, char *err, size_t errcap)
{
    float *v = own_alloc(f, sizeof(float) * (size_t)t->numel);
    if (!v) return cv_fail(err, errcap, "out of memory");
    cv_convert(v, GGML_F32, t->data, t->dtype, (size_t)t->numel);
    for (uint64_t i = 0; i < t->numel; i++) v[i] = v[i] + off;
    return add(f, name, t, GGML_F32, t->shape, v, err, errcap);
}

/* Does s start with pfx? Then *rest is what follows. */
static int take(const char *s, const char *pfx, const char **rest)
{
    size_t n = strlen(pfx);
    if (strncmp(s, pfx, n) != 0) return 0;
    *rest = s + n;
    return 1;
}

/* "<layer>.<tail>" -> the layer's text (with its dot) and the tail. */
static int split_layer(const char *s, char *layer, size_t cap, const char **tail)
{
    const char *dot = strchr(s, '.');
    if (!dot || dot == s || (size_t)(dot - s) + 2 > cap) return 0;
    memcpy(layer, s, (size_t)(dot - s) + 1);
    layer[dot - s + 1] = 0;
    *tail = dot + 1;
    return 1;
}

static int is_norm_weight(const char *name)
{
    size_t n = strlen(name);
    return n >= 11 && strcmp(name + n - 11, "norm.weight") == 0;
}

static int map_gemma(family_ckpt *f, const checkpoint *in, const hf_config *cfg, char *err, size_t errcap)
{
    static const char *const g2[][2] = {   /* Gemma 2's norms onto libmor's roles */
        {"input_layernorm.weight", "input_layernorm.weight"},
        {"post_attention_layernorm.weight", "attn_post_norm.weight"},
        {"pre_feedforward_layernorm.weight", "post_attention_layernorm.weight"},
        {"post_feedforward_layernorm.weight", "ffn_post_norm.weight"},
    };
    for (size_t i = 0; i < in->n; i++) {
        const ckpt_tensor *t = &in->t[i];
        const char *rest, *tail;
        char name[300], layer[32];
        snprintf(name, sizeof name, "%s", t->name);
        if (cfg->arch.family == CV_FAMILY_GEMMA2 && take(t->name, "model.layers.", &rest) &&
            split_layer(rest, layer, sizeof layer, &tail)) {
            for (size_t k = 0; k < sizeof g2 / sizeof g2[0]; k++)
                if (strcmp(tail, g2[k][0]) == 0) snprintf(name, sizeof name, "model.layers.%s%s", layer, g2[k][1]);
        }
        int rc = is_norm_weight(t->name) && cfg->arch.norm_offset != 0
               ? add_offset(f, name, t, cfg->arch.norm_offset, err, errcap)
               : add(f, name, t, t->dtype, t->shape, t->data, err, errcap);
        if (rc) return -1;
    }
    return 0;
}

/* GPT-NeoX's query_key_value (rows per head [q; k; v]) split into three. */
static int split_qkv(family_ckpt *f, const char *layer, const ckpt_tensor *t, const hf_config *cfg, int bias, char *err,
                     size_t errcap)
{
    static const char *const which[3] = {"q_proj", "k_proj", "v_proj"};
    const uint64_t H = cfg->n_head, hd = cfg->head_dim, d = cfg->hidden;
    const uint64_t cols = bias ? 1 : d, es = cv_dtype_size(t->dtype);
    if (t->ndim != (bias ? 1 : 2) || t->shape[0] != 3 * H * hd || (!bias && t->shape[1] != d))
        return cv_fail(err, errcap, "tensor '%.200s' should have shape [%llu%s%llu]", t->name,
                       (unsigned long long)(3 * H * hd), bias ? "" : ", ", bias ? 0ull : (unsigned long long)d);
    for (int p = 0; p < 3; p++) {
        uint8_t *dst = own_alloc(f, (size_t)(H * hd * cols * es));
        char name[128];
        if (!dst) return cv_fail(err, errcap, "out of memory");
        for (uint64_t h = 0; h < H; h++)   /* head h's part p: rows (3 h + p) hd .. + hd */
            memcpy(dst + h * hd * cols * es, t->data + ((3 * h + (uint64_t)p) * hd) * cols * es, (size_t)(hd * cols * es));
        uint64_t shape[2] = {H * hd, d};
        snprintf(name, sizeof name, "model.layers.%sself_attn.%s.%s", layer, which[p], bias ? "bias" : "weight");
        if (add(f, name, t, t->dtype, shape, dst, err, errcap)) return -1;
    }
    return 0;
}

static int map_neox(family_ckpt *f, const checkpoint *in, const hf_config *cfg, char *err, size_t errcap)
{
    static const char *const top[][2] = {
        {"gpt_neox.embed_in.weight", "model.embed_tokens.weight"},
        {"embed_out.weight", "lm_head.weight"},
        {"gpt_neox.final_layer_norm.weight", "model.norm.weight"},
        {"gpt_neox.final_layer_norm.bias", "model.norm.bias"},
    };
    static const char *const mod[][2] = {   /* per layer, without .weight / .bias */
        {"input_layernorm", "input_layernorm"},
        {"post_attention_layernorm", "post_attention_layernorm"},
        {"attention.dense", "self_attn.o_proj"},
        {"mlp.dense_h_to_4h", "mlp.up_proj"},
        {"mlp.dense_4h_to_h", "mlp.down_proj"},
    };
    for (size_t i = 0; i < in->n; i++) {
        const ckpt_tensor *t = &in->t[i];
        const char *rest, *tail, *name = t->name;
        char buf[300], layer[32];
        int done = 0;
        for (size_t k = 0; k < sizeof top / sizeof top[0]; k++)
            if (strcmp(t->name, top[k][0]) == 0) name = top[k][1];
        if (take(t->name, "gpt_neox.layers.", &rest) && split_layer(rest, layer, sizeof layer, &tail)) {
            if (!strcmp(tail, "attention.bias") || !strcmp(tail, "attention.masked_bias") ||
                !strcmp(tail, "attention.rotary_emb.inv_freq"))
                continue;   /* buffers (the causal mask, RoPE frequencies), not weights */
            if (!strcmp(tail, "attention.query_key_value.weight") || !strcmp(tail, "attention.query_key_value.bias")) {
                if (split_qkv(f, layer, t, cfg, tail[strlen(tail) - 1] == 's', err, errcap)) return -1;
                continue;
            }
            for (size_t k = 0; k < sizeof mod / sizeof mod[0] && !done; k++) {
                size_t n = strlen(mod[k][0]);
                if (strncmp(tail, mod[k][0], n) == 0 && (!strcmp(tail + n, ".weight") || !strcmp(tail + n, ".bias"))) {
                    snprintf(buf, sizeof buf, "model.layers.%s%s%s", layer, mod[k][1], tail + n);
                    name = buf;
                    done = 1;
                }
            }
        }
        if (add(f, name, t, t->dtype, t->shape, t->data, err, errcap)) return -1;
    }
    return 0;
}

/* Ouro's sandwich norms onto libmor's post-norm roles: its
 * post_attention_layernorm is the pre-FFN norm, as Llama's. */
static const char *ouro_tail(const char *tail)
{
    if (strcmp(tail, "input_layernorm_2.weight") == 0) return "attn_post_norm.weight";
    if (strcmp(tail, "post_attention_layernorm_2.weight") == 0) return "ffn_post_norm.weight";
    return tail;
}

/* A looped Llama (Nanbeige, Ouro): physical layer l is also unrolled layer
 * r*K + l of each loop r, the same bytes, as the GGUF route names them; the
 * dedup that follows stores them once, the block that cycle sharing repeats.
 * Ouro's norms are plain RMSNorm weights (w * x_hat): only renamed. */
static int map_loops(family_ckpt *f, const checkpoint *in, const hf_config *cfg, char *err, size_t errcap)
{
    const uint32_t K = cfg->n_layer / cfg->n_loops;
    for (size_t i = 0; i < in->n; i++) {
        const ckpt_tensor *t = &in->t[i];
        const char *rest, *tail;
        char layer[32], name[300], *end;
        unsigned long l;
        if (!take(t->name, "model.layers.", &rest) || !split_layer(rest, layer, sizeof layer, &tail)) {
            if (add(f, t->name, t, t->dtype, t->shape, t->data, err, errcap)) return -1;
            continue;
        }
        l = strtoul(layer, &end, 10);
        if (end == layer || *end != '.' || l >= K)
            return cv_fail(err, errcap, "tensor '%.200s' is not in one of the %u layers that config.json's "
                                        "num_hidden_layers loops", t->name, K);
        for (uint32_t r = 0; r < cfg->n_loops; r++) {
            snprintf(name, sizeof name, "model.layers.%lu.%s", r * K + l, cfg->ouro ? ouro_tail(tail) : tail);
            if (add(f, name, t, t->dtype, t->shape, t->data, err, errcap)) return -1;
        }
    }
    return 0;
}

int family_map(family_ckpt *out, const checkpoint *in, const hf_config *cfg, char *err, size_t errcap)
{
    int rc;
    memset(out, 0, sizeof *out);
    out->ck.format = in->format;
    switch (cfg->arch.family) {
    case CV_FAMILY_GEMMA:
    case CV_FAMILY_GEMMA2: rc = map_gemma(out, in, cfg, err, errcap); break;
    case CV_FAMILY_GPTNEOX: rc = map_neox(out, in, cfg, err, errcap); break;
    default:
        if (cfg->n_loops > 1 || cfg->ouro) { rc = map_loops(out, in, cfg, err, errcap); break; }
        rc = 0;
        for (size_t i = 0; i < in->n && !rc; i++) rc = add(out, in->t[i].name, &in->t[i], in->t[i].dtype, in->t[i].shape,
                                                         in->t[i].data, err, errcap);
    }
    if (rc || ckpt_finish(&out->ck, err, errcap)) { family_free(out); return -1; }
    return 0;
}
