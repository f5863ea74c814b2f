/* load.c - load a `mor` GGUF file into an immutable mor_model, and free it.
 *
 * The file is mapped read-only and weights are used in place. Loading is
 * strict (docs/FORMAT.md): a key under `mor.` that this version does not know,
 * a missing or unused tensor, a shape that disagrees with the hyperparameters
 * or a layer map pointing nowhere are all MOR_E_FORMAT, never a crash. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "abi.h"
#include "lora.h"
#include "model.h"
#include "quant.h"
#include "status.h"

/* 2 adds the depth-wise LoRA tensors and keys, 3 the model-family features */
#define MOR_FORMAT_VERSION 3

/* Every key under "mor." this version understands (plus mor.layer_map.<role>). */
static const char *const known_keys[] = {
    "mor.format_version", "mor.vocab_size", "mor.context_length", "mor.embedding_length",
    "mor.feed_forward_length", "mor.attention.head_count", "mor.attention.head_count_kv",
    "mor.attention.key_length", "mor.attention.layer_norm_rms_epsilon", "mor.rope.freq_base",
    "mor.layer_count", "mor.recursion.count", "mor.recursion.base_depth", "mor.recursion.prelude",
    "mor.recursion.coda", "mor.recursion.sharing", "mor.layer_map", "mor.router.type",
    "mor.router.arch", "mor.router.func", "mor.router.alpha", "mor.router.temp",
    "mor.router.gating", "mor.router.capacity", "mor.router.threshold", "mor.router.sampling",
    "mor.kv.shared", "mor.attention.tied_across_recursions", "mor.lora.scale", "mor.tokenizer.prefix_space",
    "mor.tokenizer.normalizer",
    NULL
};
/* Format version 3: the architecture features of the model families. */
static const char *const family_keys[] = {
    "mor.family", "mor.norm.type", "mor.attention.layer_norm_epsilon", "mor.norm.post", "mor.ffn.activation",
    "mor.ffn.gated", "mor.attention.bias", "mor.ffn.bias", "mor.residual.parallel", "mor.rope.dimension_count",
    "mor.attention.scale", "mor.attention.logit_softcap", "mor.output.logit_softcap", "mor.embedding.scale",
    "mor.attention.sliding_window", "mor.attention.sliding_window_layers", "mor.recursion.loop_norm", NULL
};


static int key_known(gguf_str k)
{
    for (int i = 0; known_keys[i]; i++)
        if (gguf_str_eq(k, known_keys[i])) return 1;
    for (int i = 0; family_keys[i]; i++)
        if (gguf_str_eq(k, family_keys[i])) return 1;
    static const char pfx[] = "mor.layer_map.";
    if (k.n > sizeof pfx - 1 && memcmp(k.p, pfx, sizeof pfx - 1) == 0)
        for (int r = 0; r < ROLE_ALL; r++) {
            gguf_str tail = { k.p + sizeof pfx - 1, k.n - (sizeof pfx - 1) };
            if (gguf_str_eq(tail, role_names[r])) return 1;
        }
    static const char lpfx[] = "mor.lora.scale.";   /* per-projection LoRA scale */
    if (k.n > sizeof lpfx - 1 && memcmp(k.p, lpfx, sizeof lpfx - 1) == 0)
        for (int r = 0; r < ROLE_COUNT; r++) {
            gguf_str tail = { k.p + sizeof lpfx - 1, k.n - (sizeof lpfx - 1) };
            if (role_is_projection(r) && gguf_str_eq(tail, role_names[r])) return 1;
        }
    return 0;
}

/* ---- small typed readers that name the key in their message ---- */

static mor_status req_u32(const gguf_file *g, const char *key, int32_t lo, int32_t hi, int32_t *out)
{
    uint32_t v;
    mor_status st = gguf_get_u32(g, key, &v);
    if (st == MOR_E_OUT_OF_RANGE) return err_set(MOR_E_FORMAT, "missing key '%s'", key);
    if (st) return st;
    if ((int64_t)v < lo || (int64_t)v > hi)
        return err_set(MOR_E_FORMAT, "key '%s' = %u is out of range [%d, %d]", key, v, lo, hi);
    *out = (int32_t)v;
    return MOR_OK;
}

static mor_status opt_str_choice(const gguf_file *g, const char *key, const char *const *choices,
                                 int def, int *out)
{
    gguf_str s;
    mor_status st = gguf_get_str(g, key, &s);
    if (st == MOR_E_OUT_OF_RANGE) {
        if (def < 0) return err_set(MOR_E_FORMAT, "missing key '%s'", key);
        *out = def; return MOR_OK;
    }
    if (st) return st;
    for (int i = 0; choices[i]; i++)
        if (gguf_str_eq(s, choices[i])) { *out = i; return MOR_OK; }
    return err_set(MOR_E_FORMAT, "key '%s' has unknown value '%.*s'", key, (int)(s.n > 64 ? 64 : s.n), s.p);
}

/* ---- tensors ---- */

typedef struct {
    const gguf_file *g;
    unsigned char   *used;     /* per tensor: referenced by the model */
} loader;

/* Every type of tensor.h: the quants are ggml's blocks of 32 or 256 along a
 * row (quant.h); the GGUF reader already rejects a row that is not a whole
 * number of blocks. */
static int is_matrix_type(uint32_t t)
{
    return tensor_block_size(t) > 0;
}

/* Find tensor `name` with GGUF dims [ne0, ne1] (ne1 = 0 for a vector); F32
 * only when f32_only. Marks it used. */
static mor_status get_tensor(loader *ld, const char *name, int64_t ne0, int64_t ne1, int f32_only,
                             tensor *w)
{
    const gguf_tensor *t = gguf_find_tensor(ld->g, name);
    if (!t) return err_set(MOR_E_FORMAT, "missing tensor '%s'", name);
    int want_dims = ne1 ? 2 : 1;
    if ((int)t->n_dims != want_dims || t->ne[0] != ne0 || (ne1 && t->ne[1] != ne1))
        return err_set(MOR_E_FORMAT, "tensor '%s' has shape [%lld, %lld] (%u dims), expected [%lld, %lld]",
                       name, (long long)t->ne[0], (long long)t->ne[1], t->n_dims, (long long)ne0, (long long)ne1);
    if (f32_only ? t->type != GGML_F32 : !is_matrix_type(t->type))
        return err_set(MOR_E_FORMAT, "tensor '%s' has type %s; %s", name, tensor_type_name(t->type),
                       f32_only ? "must be F32" : "weights must be F32, F16, BF16 or a ggml quant type");
    ld->used[t - ld->g->tensors] = 1;
    w->data = t->data; w->type = t->type; w->cols = ne0; w->rows = ne1 ? ne1 : 1;
    return MOR_OK;
}

static mor_status load_router(loader *ld, const char *prefix, int mlp, int32_t d, int32_t n_out,
                              router_weights *rw)
{
    char name[96];
    mor_status st;
    rw->mlp = mlp;
    if (!mlp) {
        snprintf(name, sizeof name, "%s.weight", prefix);
        return get_tensor(ld, name, d, n_out, 1, &rw->w);
    }
    snprintf(name, sizeof name, "%s.fc1.weight", prefix);
    if ((st = get_tensor(ld, name, d, 2 * (int64_t)d, 1, &rw->fc1))) return st;
    snprintf(name, sizeof name, "%s.fc2.weight", prefix);
    return get_tensor(ld, name, 2 * (int64_t)d, n_out, 1, &rw->fc2);
}

/* Aux routers (sampling: aux_router) are accepted and validated but not used
 * by any routing mode of this version. */
static mor_status skip_aux_routers(loader *ld, const mor_model *m)
{
    char pfx[64];
    for (int r = 0; r < m->n_rec; r++) {
        snprintf(pfx, sizeof pfx, "rtr_aux.%d.weight", r);
        const gguf_tensor *t = gguf_find_tensor(ld->g, pfx);
        router_weights tmp;
        snprintf(pfx, sizeof pfx, "rtr_aux.%d", r);
        if (t) { mor_status st = load_router(ld, pfx, 0, m->n_embd, 1, &tmp); if (st) return st; continue; }
        snprintf(pfx, sizeof pfx, "rtr_aux.%d.fc1.weight", r);
        if (gguf_find_tensor(ld->g, pfx)) {
            snprintf(pfx, sizeof pfx, "rtr_aux.%d", r);
            mor_status st = load_router(ld, pfx, 1, m->n_embd, 1, &tmp);
            if (st) return st;
        }
    }
    return MOR_OK;
}

/* MOR_MODEL_VOCAB_ONLY on a file of another architecture (a llama.cpp model
 * or vocab file): only its tokenizer.ggml.* keys are read, and the
 * vocabulary size is <arch>.vocab_size if the file has it, else the number
 * of tokens. */
static mor_status foreign_vocab_size(const gguf_file *g, gguf_str arch, mor_model *m)
{
    char key[96];
    uint32_t v;
    const gguf_kv *tok = gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (arch.n > sizeof key - 16) return err_set(MOR_E_FORMAT, "general.architecture is too long");
    snprintf(key, sizeof key, "%.*s.vocab_size", (int)arch.n, arch.p);
    mor_status st = gguf_get_u32(g, key, &v);
    if (st == MOR_E_OUT_OF_RANGE) {
        if (!tok || tok->type != GGUF_ARR) return err_set(MOR_E_FORMAT, "vocab-only load of a file without tokenizer");
        v = tok->arr_n > INT32_MAX ? 0 : (uint32_t)tok->arr_n;
    } else if (st != MOR_OK) {
        return st;
    }
    if (v < 1 || v > INT32_MAX) return err_set(MOR_E_FORMAT, "%s = %u is out of range", key, v);
    m->n_vocab = (int32_t)v;
    return MOR_OK;
}

static mor_status load_hparams(const gguf_file *g, mor_model *m, uint32_t flags)
{
    mor_status st;
    int32_t fv;
    gguf_str arch;
    if (gguf_get_str(g, "general.architecture", &arch))
        return err_set(MOR_E_FORMAT, "general.architecture is missing");
    if (!gguf_str_eq(arch, "mor")) {
        if (flags & MOR_MODEL_VOCAB_ONLY) return foreign_vocab_size(g, arch, m);
        return err_set(MOR_E_FORMAT, "general.architecture is \"%.*s\", not \"mor\" (mor-convert converts "
                       "llama.cpp Llama files; MOR_MODEL_VOCAB_ONLY loads the tokenizer of any GGUF)",
                       (int)(arch.n < 40 ? arch.n : 40), arch.p);
    }
    if ((st = req_u32(g, "mor.format_version", 1, INT32_MAX, &fv))) return st;
    if (fv > MOR_FORMAT_VERSION)
        return err_set(MOR_E_UNSUPPORTED, "mor.format_version %d is newer than this libmor supports (%d)",
                       fv, MOR_FORMAT_VERSION);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        gguf_str k = g->kv[i].key;
        if (k.n >= 4 && memcmp(k.p, "mor.", 4) == 0 && !key_known(k))
            return err_set(MOR_E_FORMAT, "unknown key '%.*s'", (int)k.n, k.p);
    }
    return req_u32(g, "mor.vocab_size", 1, INT32_MAX, &m->n_vocab);
}

static mor_status opt_bool(const gguf_file *g, const char *key, int *out)
{
    mor_status st = gguf_get_bool(g, key, out);
    if (st == MOR_E_OUT_OF_RANGE) { *out = 0; return MOR_OK; }
    return st;
}

/* An optional positive finite float32 key (0 when absent). */
static mor_status opt_pos_f32(const gguf_file *g, const char *key, float *out)
{
    mor_status st = gguf_get_f32(g, key, out);
    if (st == MOR_E_OUT_OF_RANGE) { *out = 0; return MOR_OK; }
    if (st) return st;
    if (!(*out > 0) || !isfinite(*out)) return err_set(MOR_E_FORMAT, "key '%s' = %g must be positive and finite", key, *out);
    return MOR_OK;
}

/* The architecture features (format version 3; FORMAT.md "Model families").
 * Every one is off when its key is absent: a Llama model. */
static mor_status load_family(const gguf_file *g, mor_model *m)
{
    model_arch *a = &m->arch;
    mor_status st;
    uint32_t fv = 0;
    gguf_get_u32(g, "mor.format_version", &fv);
    for (int i = 0; family_keys[i]; i++)
        if (fv < 3 && gguf_find_kv(g, family_keys[i]))
            return err_set(MOR_E_FORMAT, "key '%s' needs mor.format_version >= 3 (the file says %u)", family_keys[i], fv);
    static const char *const norms[] = { "rms", "layer", NULL };
    static const char *const acts[] = { "silu", "gelu", "gelu_tanh", NULL };
    const char *fams[FAMILY_COUNT + 1] = { NULL };
    for (int i = 0; i < FAMILY_COUNT; i++) fams[i] = family_names[i];
    if ((st = opt_str_choice(g, "mor.family", fams, FAMILY_LLAMA, &a->family)) ||
        (st = opt_str_choice(g, "mor.norm.type", norms, 0, &a->layer_norm)) ||
        (st = opt_str_choice(g, "mor.ffn.activation", acts, FFN_ACT_SILU, &a->ffn_act)))
        return st;
    a->ffn_gated = 1;
    st = gguf_get_bool(g, "mor.ffn.gated", &a->ffn_gated);
    if (st && st != MOR_E_OUT_OF_RANGE) return st;
    if ((st = opt_bool(g, "mor.attention.bias", &a->attn_bias)) || (st = opt_bool(g, "mor.ffn.bias", &a->ffn_bias)) ||
        (st = opt_bool(g, "mor.residual.parallel", &a->parallel_residual)) ||
        (st = opt_bool(g, "mor.norm.post", &a->post_norms)))
        return st;
    if (a->post_norms && a->layer_norm)
        return err_set(MOR_E_UNSUPPORTED, "post-sub-layer norms (mor.norm.post) are RMSNorms only");
    if (a->post_norms && a->parallel_residual)
        return err_set(MOR_E_UNSUPPORTED, "mor.norm.post and mor.residual.parallel together are not supported");
    a->rope_dims = m->head_dim;
    uint32_t v;
    st = gguf_get_u32(g, "mor.rope.dimension_count", &v);
    if (st == MOR_OK) {
        if (v < 2 || v > (uint32_t)m->head_dim || v % 2)
            return err_set(MOR_E_FORMAT, "mor.rope.dimension_count %u must be even and in [2, key_length %d]", v, m->head_dim);
        a->rope_dims = (int32_t)v;
    } else if (st != MOR_E_OUT_OF_RANGE) return st;
    if ((st = opt_pos_f32(g, "mor.attention.scale", &a->attn_scale)) ||
        (st = opt_pos_f32(g, "mor.attention.logit_softcap", &a->attn_softcap)) ||
        (st = opt_pos_f32(g, "mor.output.logit_softcap", &a->final_softcap)) ||
        (st = opt_pos_f32(g, "mor.embedding.scale", &a->embd_scale)))
        return st;
    if (!a->attn_scale) a->attn_scale = 1.0f / sqrtf((float)m->head_dim);   /* as HF: 1/sqrt(head_dim) */
    const int has_w = gguf_find_kv(g, "mor.attention.sliding_window") != NULL;
    const int has_l = gguf_find_kv(g, "mor.attention.sliding_window_layers") != NULL;
    if (has_w != has_l)
        return err_set(MOR_E_FORMAT, "mor.attention.sliding_window and mor.attention.sliding_window_layers come together");
    if (has_w) {
        if ((st = req_u32(g, "mor.attention.sliding_window", 1, INT32_MAX, &a->window))) return st;
        int32_t *fl = malloc(sizeof(int32_t) * (size_t)m->n_layer);
        a->local = malloc((size_t)m->n_layer);
        if (!fl || !a->local) { free(fl); return err_set(MOR_E_NOMEM, "out of memory"); }
        st = gguf_get_arr_i32(g, "mor.attention.sliding_window_layers", fl, (uint64_t)m->n_layer);
        for (int32_t l = 0; !st && l < m->n_layer; l++) {
            if (fl[l] != 0 && fl[l] != 1)
                st = err_set(MOR_E_FORMAT, "mor.attention.sliding_window_layers[%d] = %d is neither 0 nor 1", l, fl[l]);
            a->local[l] = (uint8_t)fl[l];
        }
        free(fl);
        if (st) return st == MOR_E_OUT_OF_RANGE ? err_set(MOR_E_FORMAT, "bad mor.attention.sliding_window_layers") : st;
    }
    return MOR_OK;
}

/* Whether a model with these features has tensors of role r. */
static int role_present(const model_arch *a, int r)
{
    switch (r) {
    case ROLE_FFN_GATE: return a->ffn_gated;
    case ROLE_ATTN_NORM_B: case ROLE_FFN_NORM_B: return a->layer_norm;
    case ROLE_ATTN_Q_B: case ROLE_ATTN_K_B: case ROLE_ATTN_V_B: case ROLE_ATTN_OUT_B: return a->attn_bias;
    case ROLE_FFN_GATE_B: return a->ffn_bias && a->ffn_gated;
    case ROLE_FFN_UP_B: case ROLE_FFN_DOWN_B: return a->ffn_bias;
    case ROLE_ATTN_POST_NORM: case ROLE_FFN_POST_NORM: return a->post_norms;
    default: return 1;
    }
}

/* mor.recursion.loop_norm (format version 3, checked with the family keys):
 * the final norm between recursions (a looped model's, Nanbeige's). Only
 * without routers: a gated update would mix a normed and an unnormed stream. */
static mor_status load_loop_norm(const gguf_file *g, mor_model *m)
{
    mor_status st = opt_bool(g, "mor.recursion.loop_norm", &m->arch.loop_norm);
    if (st) return st;
    if (m->arch.loop_norm && m->router_type != MOR_ROUTER_TYPE_NONE)
        return err_set(MOR_E_UNSUPPORTED, "mor.recursion.loop_norm with routers is not supported");
    if (m->arch.loop_norm && m->n_rec < 2)
        return err_set(MOR_E_FORMAT, "mor.recursion.loop_norm needs at least 2 recursions (recursion.count %d)", m->n_rec);
    return MOR_OK;
}

static mor_status load_arch(const gguf_file *g, mor_model *m)
{
    mor_status st;
    const int32_t BIG = 1 << 20;
    if ((st = req_u32(g, "mor.context_length", 1, INT32_MAX, &m->n_ctx_train)) ||
        (st = req_u32(g, "mor.embedding_length", 1, BIG, &m->n_embd)) ||
        (st = req_u32(g, "mor.feed_forward_length", 1, BIG, &m->n_ff)) ||
        (st = req_u32(g, "mor.attention.head_count", 1, 4096, &m->n_head)) ||
        (st = req_u32(g, "mor.attention.head_count_kv", 1, 4096, &m->n_head_kv)) ||
        (st = req_u32(g, "mor.attention.key_length", 2, 4096, &m->head_dim)) ||
        (st = req_u32(g, "mor.layer_count", 1, 4096, &m->n_layer)) ||
        (st = req_u32(g, "mor.recursion.count", 1, MOR_MAX_RECURSIONS, &m->n_rec)) ||
        (st = req_u32(g, "mor.recursion.base_depth", 1, 4096, &m->base_depth)) ||
        (st = req_u32(g, "mor.recursion.prelude", 0, 4096, &m->prelude)) ||
        (st = req_u32(g, "mor.recursion.coda", 0, 4096, &m->coda)))
        return st;
    if (m->n_head % m->n_head_kv)
        return err_set(MOR_E_FORMAT, "head_count %d is not a multiple of head_count_kv %d", m->n_head, m->n_head_kv);
    if (m->head_dim % 2) return err_set(MOR_E_FORMAT, "key_length %d is odd (RoPE needs pairs)", m->head_dim);
    if ((int64_t)m->prelude + (int64_t)m->n_rec * m->base_depth + m->coda != m->n_layer)
        return err_set(MOR_E_FORMAT, "layer_count %d != prelude %d + recursion.count %d * base_depth %d + coda %d",
                       m->n_layer, m->prelude, m->n_rec, m->base_depth, m->coda);
    if ((st = load_family(g, m))) return st;
    /* the epsilon of the norm the model has */
    const char *eps_key = m->arch.layer_norm ? "mor.attention.layer_norm_epsilon" : "mor.attention.layer_norm_rms_epsilon";
    const char *other = m->arch.layer_norm ? "mor.attention.layer_norm_rms_epsilon" : "mor.attention.layer_norm_epsilon";
    if (gguf_find_kv(g, other))
        return err_set(MOR_E_FORMAT, "key '%s' does not fit a model whose norms are %s", other,
                       m->arch.layer_norm ? "LayerNorms" : "RMSNorms");
    if ((st = gguf_get_f32(g, eps_key, &m->eps)) ||
        (st = gguf_get_f32(g, "mor.rope.freq_base", &m->rope_theta)))
        return st == MOR_E_OUT_OF_RANGE ? err_set(MOR_E_FORMAT, "missing %s or mor.rope.freq_base", eps_key) : st;
    if (!(m->eps > 0 && m->eps < 1) || !(m->rope_theta > 1) || !isfinite(m->rope_theta))
        return err_set(MOR_E_FORMAT, "bad rms epsilon %g or rope.freq_base %g", m->eps, m->rope_theta);

    /* routing */
    static const char *const rtypes[] = { "none", "expert", "token", NULL };
    static const char *const funcs[] = { "sigmoid", "tanh", "softmax", "none", NULL };
    static const char *const gatings[] = { "weighted", "additive", NULL };
    int v;
    if ((st = opt_str_choice(g, "mor.router.type", rtypes, 0, &v))) return st;
    m->router_type = v;
    m->alpha = 1.0f; m->temp = 1.0f;
    for (int r = 0; r < m->n_rec; r++) { m->capacity[r] = (double)(m->n_rec - r) / m->n_rec; m->threshold[r] = 0.5f; }
    if (m->router_type != MOR_ROUTER_TYPE_NONE) {
        gguf_str sh;
        if (!gguf_get_str(g, "mor.recursion.sharing", &sh) && !gguf_str_eq(sh, "cycle") && !gguf_str_eq(sh, "middle_cycle"))
            return err_set(MOR_E_FORMAT, "routers need cycle or middle_cycle sharing");
        if ((st = opt_str_choice(g, "mor.router.func", funcs, -1, &m->router_func))) return st;
        if (m->router_func == ROUTER_FUNC_SOFTMAX && m->router_type == MOR_ROUTER_TYPE_EXPERT)
            return err_set(MOR_E_FORMAT, "an expert-choice router cannot use softmax");
        if ((st = opt_str_choice(g, "mor.router.gating", gatings, 0, &m->gating_additive))) return st;
        if ((st = gguf_get_f32(g, "mor.router.alpha", &m->alpha)) && st != MOR_E_OUT_OF_RANGE) return st;
        if ((st = gguf_get_f32(g, "mor.router.temp", &m->temp)) && st != MOR_E_OUT_OF_RANGE) return st;
        if (!isfinite(m->alpha) || !isfinite(m->temp) || m->temp == 0)
            return err_set(MOR_E_FORMAT, "bad router alpha %g or temp %g", m->alpha, m->temp);
        st = gguf_get_arr_f64(g, "mor.router.capacity", m->capacity, (uint64_t)m->n_rec);
        if (st && st != MOR_E_OUT_OF_RANGE) return st;
        for (int r = 0; r < m->n_rec; r++)
            if (!(m->capacity[r] > 0 && m->capacity[r] <= 1) || (r && m->capacity[r] > m->capacity[r - 1]))
                return err_set(MOR_E_FORMAT, "router capacities must be in (0,1] and non-increasing");
        st = gguf_get_arr_f32(g, "mor.router.threshold", m->threshold, (uint64_t)m->n_rec);
        if (st && st != MOR_E_OUT_OF_RANGE) return st;
        for (int r = 0; r < m->n_rec; r++)
            if (isnan(m->threshold[r])) return err_set(MOR_E_FORMAT, "router threshold is NaN");
    }
    st = gguf_get_bool(g, "mor.kv.shared", &m->kv_shared);
    if (st && st != MOR_E_OUT_OF_RANGE) return st;
    if (st == MOR_E_OUT_OF_RANGE) m->kv_shared = 0;
    if ((st = load_loop_norm(g, m))) return st;
    err_clear();
    return MOR_OK;
}

/* Report load progress f in [0,1] to the user's callback; a non-zero return
 * cancels the load. Called at every stage, so a cancel takes effect soon. */
static mor_status report(const mor_model_params *p, float f)
{
    if (p->progress && p->progress(f, p->progress_user_data))
        return err_set(MOR_E_ABORTED, "model load cancelled by the progress callback");
    return MOR_OK;
}

/* A NaN or infinity in a weight is a broken file: it would turn every output
 * into NaN, silently. Norms and routers (vectors and rtr.*: small) are always
 * checked; every tensor with MOR_MODEL_CHECK_TENSORS (one read of the file). */
static mor_status check_finite(const gguf_file *g, const mor_model_params *p)
{
    const int all = (p->flags & MOR_MODEL_CHECK_TENSORS) != 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const int cheap = t->n_dims == 1 || (t->name.n >= 4 && !memcmp(t->name.p, "rtr", 3));
        if (!cheap && !all) continue;
        if (all && i % 16 == 0) { mor_status st = report(p, 0.9f); if (st) return st; }
        int64_t n = 1;
        for (uint32_t k = 0; k < t->n_dims; k++) n *= t->ne[k];
        int64_t bad = quant_find_nonfinite(t->type, t->data, n);
        if (bad >= 0)
            return err_set(MOR_E_FORMAT, "tensor '%.*s' holds a NaN or infinity (at element %lld): the file is "
                           "broken", (int)(t->name.n > 96 ? 96 : t->name.n), t->name.p, (long long)bad);
    }
    return MOR_OK;
}

/* The decoder layers' tensors, by role: each unrolled layer's through the
 * role's layer map (mor.layer_map, overridden per role). map: L x
 * (ROLE_ALL + 1) scratch. */
static mor_status load_layers(loader *ld, mor_model *m, const mor_model_params *p, int32_t *map)
{
    const gguf_file *g = ld->g;
    const int32_t L = m->n_layer, d = m->n_embd;
    mor_status st;
    /* per-role layer maps: the default map, overridden per role */
    int32_t *defmap = map + (size_t)L * ROLE_ALL;
    st = gguf_get_arr_i32(g, "mor.layer_map", defmap, (uint64_t)L);
    if (st) return st == MOR_E_OUT_OF_RANGE ? err_set(MOR_E_FORMAT, "missing key 'mor.layer_map'") : st;
    const int64_t hd = m->head_dim, qd = hd * m->n_head, kvd = hd * m->n_head_kv;
    /* GGUF dims of each role; a bias (role r + 9) is a vector of role r's outputs */
    int64_t shape[ROLE_ALL][2] = {
        { d, 0 }, { d, qd }, { d, kvd }, { d, kvd }, { qd, d }, { d, 0 }, { d, m->n_ff }, { d, m->n_ff }, { m->n_ff, d }
    };
    for (int r = ROLE_ATTN_NORM_B; r <= ROLE_FFN_DOWN_B; r++) {
        const int64_t *ws = shape[r - ROLE_BIAS_OFFSET];
        shape[r][0] = ws[1] ? ws[1] : ws[0];
        shape[r][1] = 0;
    }
    shape[ROLE_ATTN_POST_NORM][0] = shape[ROLE_FFN_POST_NORM][0] = d;
    for (int role = 0; role < ROLE_ALL; role++) {
        char key[64], name[96];
        if (role < ROLE_COUNT && (st = report(p, 0.6f + 0.3f * (float)role / ROLE_COUNT))) return st;
        int32_t *rm = map + (size_t)L * role;
        snprintf(key, sizeof key, "mor.layer_map.%s", role_names[role]);
        const int present = role_present(&m->arch, role);
        if (!present) {
            if (gguf_find_kv(g, key)) return err_set(MOR_E_FORMAT, "key '%s' names a role this model does not have", key);
            continue;
        }
        st = gguf_get_arr_i32(g, key, rm, (uint64_t)L);
        if (st == MOR_E_OUT_OF_RANGE) memcpy(rm, defmap, sizeof(int32_t) * (size_t)L);
        else if (st) return st;
        for (int32_t l = 0; l < L; l++) {
            if (rm[l] < 0 || rm[l] >= 4096) return err_set(MOR_E_FORMAT, "%s[%d] = %d is out of range", key, l, rm[l]);
            snprintf(name, sizeof name, "blk.%d.%s", rm[l], role_tensor[role]);
            int vec = shape[role][1] == 0;   /* norms and biases: F32 vectors */
            if ((st = get_tensor(ld, name, shape[role][0], shape[role][1], vec, &m->layers[l].w[role]))) return st;
        }
    }
    return MOR_OK;
}

/* The routers: one per recursion (expert-choice, and the auxiliary ones the
 * official code trains, skipped) or one for all (token-choice, with its
 * selection bias). */
static mor_status load_routers(loader *ld, mor_model *m)
{
    const gguf_file *g = ld->g;
    const int32_t d = m->n_embd;
    mor_status st;
    if (m->router_type == MOR_ROUTER_TYPE_NONE) return MOR_OK;
    int mlp;
    static const char *const archs[] = { "linear", "mlp", NULL };
    if ((st = opt_str_choice(g, "mor.router.arch", archs, -1, &mlp))) return st;
    if (m->router_type == MOR_ROUTER_TYPE_EXPERT) {
        for (int r = 0; r < m->n_rec; r++) {
            char pfx[32];
            snprintf(pfx, sizeof pfx, "rtr.%d", r);
            if ((st = load_router(ld, pfx, mlp, d, 1, &m->router[r]))) return st;
        }
        if ((st = skip_aux_routers(ld, m))) return st;
    } else {
        if ((st = load_router(ld, "rtr", mlp, d, m->n_rec, &m->router_tc))) return st;
        if (gguf_find_tensor(g, "rtr.bias")) {
            tensor b;
            if ((st = get_tensor(ld, "rtr.bias", m->n_rec, 0, 1, &b))) return st;
            m->router_bias = b.data;
        }
    }
    return MOR_OK;
}

/* Ouro's early-exit gate (FORMAT.md): exit_gate.weight [n_embd, 1] and
 * exit_gate.bias [1], F32, both or neither; sigmoid(w . x + b) is a token's
 * exit probability after a loop, x the stream the loop norm makes. */
static mor_status load_exit_gate(loader *ld, mor_model *m)
{
    const int w = gguf_find_tensor(ld->g, "exit_gate.weight") != NULL, b = gguf_find_tensor(ld->g, "exit_gate.bias") != NULL;
    mor_status st;
    if (!w && !b) return MOR_OK;
    if (!w || !b) return err_set(MOR_E_FORMAT, "the exit gate needs both exit_gate.weight and exit_gate.bias");
    if ((st = get_tensor(ld, "exit_gate.weight", m->n_embd, 1, 1, &m->exit_gate))) return st;
    return get_tensor(ld, "exit_gate.bias", 1, 0, 1, &m->exit_gate_b);
}

static mor_status load_weights(const gguf_file *g, mor_model *m, const mor_model_params *p)
{
    mor_status st;
    loader ld = { g, calloc(g->n_tensors ? g->n_tensors : 1, 1) };
    if (!ld.used) return err_set(MOR_E_NOMEM, "out of memory");
    const int32_t L = m->n_layer, d = m->n_embd;
    int32_t *map = malloc(sizeof(int32_t) * (size_t)L * (ROLE_ALL + 1));
    m->layers = calloc((size_t)L, sizeof(layer_weights));
    if (!map || !m->layers) { st = err_set(MOR_E_NOMEM, "out of memory"); goto done; }

    if ((st = get_tensor(&ld, "token_embd.weight", d, m->n_vocab, 0, &m->tok_embd))) goto done;
    if ((st = get_tensor(&ld, "output_norm.weight", d, 0, 1, &m->output_norm))) goto done;
    if (m->arch.layer_norm && (st = get_tensor(&ld, "output_norm.bias", d, 0, 1, &m->output_norm_b))) goto done;
    if (gguf_find_tensor(g, "output.weight")) {
        if ((st = get_tensor(&ld, "output.weight", d, m->n_vocab, 0, &m->output))) goto done;
    } else {
        m->output = m->tok_embd;   /* tied, as SmolLM and the MoR checkpoints are */
    }

    if ((st = load_layers(&ld, m, p, map))) goto done;
    if ((st = load_routers(&ld, m))) goto done;
    if ((st = load_exit_gate(&ld, m))) goto done;

    if ((st = lora_load(g, m, ld.used))) goto done;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (!ld.used[i]) {
            st = err_set(MOR_E_FORMAT, "tensor '%.*s' is not used by the model (unknown name or wrong map)",
                         (int)g->tensors[i].name.n, g->tensors[i].name.p);
            goto done;
        }
        m->weight_bytes += g->tensors[i].nbytes;
    }
    /* float data must be 4-byte aligned for direct use; GGUF alignment >= 32 guarantees it
     * when the image itself is aligned, which mmap and malloc ensure; a borrowed buffer may not be. */
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((uintptr_t)g->tensors[i].data % 4) { st = err_set(MOR_E_INVALID_ARG, "model buffer is not 4-byte aligned"); goto done; }
    if ((st = check_finite(g, p))) goto done;
    if ((p->flags & MOR_MODEL_FOLD_LORA) && (st = lora_fold(m))) goto done;
    st = MOR_OK;
done:
    free(map);
    free(ld.used);
    return st;
}

/* ---- public API ---- */

void mor_model_params_init(mor_model_params *p, size_t size)
{
    const mor_model_params d = { 0 };
    abi_init(p, size, &d, sizeof d);
}

/* Copy caller params into a full struct of this version's defaults. */
static mor_status model_params_read(const mor_model_params *in, mor_model_params *out)
{
    mor_model_params_init(out, sizeof *out);
    return abi_read(out, sizeof *out, in, sizeof(abi_model_params_v1), "mor_model_params");
}

void mor_model_free(mor_model *m)
{
    if (!m) return;
    tokenizer_free(m->tok);
    lora_free(m->lora);
    free(m->arch.local);
    gguf_free(m->gguf);
    free(m->layers);
    if (m->map) {
        if (m->map_is_mmap) munmap(m->map, m->map_size);
        else free(m->map_alloc ? m->map_alloc : m->map);
    }
    free(m);
}

/* Progress: 0 at the start, up to 0.5 while a file is read (NO_MMAP), 0.55
 * after parsing, 0.6 after the hyperparameters, 0.6-0.9 over the nine weight
 * roles, 0.95 after the tokenizer, 1 at the end. */
static mor_status load_image(const void *buf, size_t size, const mor_model_params *p, mor_model *m)
{
    mor_status st;
    if ((st = gguf_parse(buf, size, &m->gguf)) || (st = report(p, 0.55f))) return st;
    if ((st = load_hparams(m->gguf, m, p->flags)) || (st = report(p, 0.6f))) return st;
    if (!(p->flags & MOR_MODEL_VOCAB_ONLY)) {
        if ((st = load_arch(m->gguf, m))) return st;
        if ((st = load_weights(m->gguf, m, p)) || (st = report(p, 0.9f))) return st;
    }
    if ((st = tokenizer_load(m->gguf, m->n_vocab, &m->tok)) || (st = report(p, 0.95f))) return st;
    if ((p->flags & MOR_MODEL_VOCAB_ONLY) && !m->tok)
        return err_set(MOR_E_FORMAT, "vocab-only load of a file without tokenizer");
    return report(p, 1.0f);
}

/* The start of both loaders: out and the source (what, named) checked, the
 * params read, progress 0. */
static mor_status load_start(const char *fn, const void *src, const char *what, const mor_model_params *params,
                             mor_model **out, mor_model_params *p)
{
    err_clear();
    if (!out) return err_set(MOR_E_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!src) return err_set(MOR_E_INVALID_ARG, "%s: %s is NULL", fn, what);
    mor_status st = model_params_read(params, p);
    return st ? st : report(p, 0.0f);
}

mor_status mor_model_load_memory(const void *data, size_t size, const mor_model_params *params, mor_model **out)
{
    mor_model_params p;
    mor_status st = load_start("mor_model_load_memory", data, "data", params, out, &p);
    if (st) return st;
    mor_model *m = calloc(1, sizeof *m);
    if (!m) return err_set(MOR_E_NOMEM, "out of memory");
    if ((st = load_image(data, size, &p, m))) { mor_model_free(m); return st; }
    *out = m;
    return MOR_OK;
}

/* Ask for transparent huge pages on [p, p + n) (whole 2 MiB pages only). A
 * hint: the result does not depend on it, and failure is ignored. */
static void advise_huge(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n, MADV_HUGEPAGE);
#else
    (void)p; (void)n;
#endif
}

mor_status mor_model_load_file(const char *path, const mor_model_params *params, mor_model **out)
{
    mor_model_params p;
    mor_status st = load_start("mor_model_load_file", path, "path", params, out, &p);
    if (st) return st;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(MOR_E_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(MOR_E_IO, "'%s' is not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size == 0) { close(fd); return err_set(MOR_E_FORMAT, "'%s' is empty", path); }
    mor_model *m = calloc(1, sizeof *m);
    if (!m) { close(fd); return err_set(MOR_E_NOMEM, "out of memory"); }
    m->map_size = size;
    if (!(p.flags & MOR_MODEL_NO_MMAP)) {
        void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map != MAP_FAILED) {
            m->map = map; m->map_is_mmap = 1;
            /* Best effort: where the file system keeps files in 2 MiB
             * page-cache folios, map them with 2 MiB pages (fewer TLB misses
             * while the weights stream by). Pages already cached in smaller
             * folios stay as they are. */
            advise_huge(map, size);
        }
    }
    if (!m->map) {   /* NO_MMAP, or mmap unavailable: read the file */
        /* into 2 MiB-aligned memory that the kernel may back with 2 MiB
         * pages (transparent huge pages, "madvise" mode included): a matrix-
         * vector product streams every weight once per token, and a TLB miss
         * per 4 KiB costs read bandwidth, most under virtualization */
        const size_t huge = (size_t)2 << 20, extra = size >= huge ? huge : 0;
        m->map_alloc = malloc(size + extra);
        if (!m->map_alloc) { close(fd); free(m); return err_set(MOR_E_NOMEM, "cannot allocate %zu bytes for '%s'", size, path); }
        m->map = extra ? (void *)(((uintptr_t)m->map_alloc + huge - 1) & ~(uintptr_t)(huge - 1)) : m->map_alloc;
        if (extra) advise_huge(m->map, size);
        /* in chunks of 1/16 of the file (at least 1 MiB), reporting each */
        size_t got = 0, chunk = size / 16 > (1u << 20) ? size / 16 : (1u << 20);
        while (got < size) {
            ssize_t n = read(fd, (char *)m->map + got, size - got < chunk ? size - got : chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) { close(fd); mor_model_free(m); return err_set(MOR_E_IO, "read error on '%s'", path); }
            got += (size_t)n;
            if ((st = report(&p, 0.5f * (float)got / (float)size))) { close(fd); mor_model_free(m); return st; }
        }
    }
    close(fd);
    if ((st = load_image(m->map, size, &p, m))) { mor_model_free(m); return st; }
    *out = m;
    return MOR_OK;
}
