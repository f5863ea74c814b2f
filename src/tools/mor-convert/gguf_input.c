/* gguf_input.c - a `mor` GGUF file as a plain checkpoint. See gguf_input.h. */
#include "gguf_input.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "internal.h"
#include "layout.h"
#include "util.h"

/* A `mor` file's features and roles are read by model.h's names, the same numbers as hf_config.h's and layout.h's. */
_Static_assert((int)ROLE_ALL == (int)CV_ROLE_ALL && (int)ROLE_ATTN_POST_NORM == (int)CV_ROLE_ATTN_POST_NORM &&
               (int)ROLE_FFN_DOWN_B == (int)CV_ROLE_FFN_DOWN_B && (int)FAMILY_GPTNEOX == (int)CV_FAMILY_GPTNEOX &&
               (int)FAMILY_GEMMA2 == (int)CV_FAMILY_GEMMA2 && (int)FFN_ACT_GELU == (int)CV_ACT_GELU &&
               (int)FFN_ACT_GELU_TANH == (int)CV_ACT_GELU_TANH,
               "model.h and the converter number roles, families and activations alike");

int gguf_input_is_gguf(const char *path)
{
    unsigned char magic[4];
    FILE *f = fopen(path, "rb");
    int yes = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f) fclose(f);
    return yes;
}

void gguf_input_close(gguf_input *gi)
{
    for (size_t i = 0; i < gi->n_own; i++) free(gi->own[i]);
    free(gi->own);
    if (!gi->model) gguf_free(gi->g);
    cv_file_close(&gi->file);
    mor_model_free(gi->model);
    memset(gi, 0, sizeof *gi);
}

/* n bytes owned by gi until it closes; NULL when out of memory. */
static void *own_alloc(gguf_input *gi, size_t n)
{
    void *p = malloc(n ? n : 1);
    void **no = p ? realloc(gi->own, (gi->n_own + 1) * sizeof *no) : NULL;
    if (!no) { free(p); return NULL; }
    gi->own = no;
    gi->own[gi->n_own++] = p;
    return p;
}

/* Add a weight as tensor `name` with PyTorch shape [rows, cols] (or [cols]
 * for a vector): F32/F16/BF16 as stored; a quantized matrix as stored when
 * gi->keep_quant (a plain conversion), else dequantized to F32. */
static int add_weight(gguf_input *gi, checkpoint *ck, const char *name, const tensor *w, int vector, char *err,
                      size_t errcap)
{
    uint64_t shape[2] = {(uint64_t)w->rows, (uint64_t)w->cols};
    int dtype = (int)w->type;
    const uint8_t *data = w->data;
    if (vector) shape[0] = (uint64_t)w->cols;
    const int keep = gi->keep_quant && !vector && cv_dtype_is_quant(dtype);
    if (dtype != GGML_F32 && dtype != GGML_F16 && dtype != GGML_BF16 && !keep) {
        float *f = own_alloc(gi, sizeof(float) * (size_t)(w->rows * w->cols));
        if (!f) return cv_fail(err, errcap, "out of memory");
        for (int64_t r = 0; r < w->rows; r++) k_embed_row(w, (int32_t)r, f + r * w->cols);
        dtype = GGML_F32;
        data = (const uint8_t *)f;
    }
    return ckpt_add(ck, name, strlen(name), dtype, vector ? 1 : 2, shape, data,
                    keep ? (uint64_t)tensor_row_bytes(w->type, w->cols) * (uint64_t)w->rows
                         : (uint64_t)(w->rows * w->cols) * cv_dtype_size(dtype), err, errcap);
}

/* ---- a llama.cpp Llama (general.architecture = "llama") ---- */

/* The file's tensor `name` as a weight (rows = ne[1]; a vector is 1 x ne[0]);
 * NULL when missing. */
static int llama_tensor(const gguf_file *g, const char *name, int vector, tensor *w, char *err, size_t errcap)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return cv_fail(err, errcap, "llama GGUF: tensor '%s' is missing", name);
    if (!tensor_block_size(t->type))   /* every type of tensor.h: the quants are dequantized (add_weight) */
        return cv_fail(err, errcap, "llama GGUF: tensor '%s' has type %u; F32, F16, BF16 and ggml's Q4_0, Q4_1, "
                       "Q5_0, Q5_1, Q8_0, Q2_K .. Q6_K convert", name, t->type);
    if ((vector && t->n_dims != 1) || (!vector && t->n_dims != 2))
        return cv_fail(err, errcap, "llama GGUF: tensor '%s' has %u dimensions, not %d", name, t->n_dims, vector ? 1 : 2);
    *w = (tensor){ t->data, t->type, vector ? 1 : t->ne[1], t->ne[0] };
    return 0;
}

/* llama.cpp's converter permutes the rows of Q and K within each head (HF's
 * rotate_half RoPE pairs dims i and i + hd/2, GGML's "normal" RoPE 2i and
 * 2i + 1): its row h*hd + 2j + t is HF row h*hd + t*hd/2 + j. Undo it into
 * an owned copy (whole rows: any type). */
static int unpermute(gguf_input *gi, tensor *w, int64_t hd, char *err, size_t errcap)
{
    const size_t rb = tensor_row_bytes(w->type, w->cols);
    uint8_t *dst = own_alloc(gi, rb * (size_t)w->rows);
    if (!dst) return cv_fail(err, errcap, "out of memory");
    if (w->rows % hd || hd % 2) return cv_fail(err, errcap, "llama GGUF: Q/K rows %lld are not whole heads of %lld",
                                               (long long)w->rows, (long long)hd);
    for (int64_t r = 0; r < w->rows; r++) {
        const int64_t h = r / hd, i = r % hd, t = i / (hd / 2), j = i % (hd / 2);
        memcpy(dst + (size_t)r * rb, (const uint8_t *)w->data + (size_t)(h * hd + 2 * j + t) * rb, rb);
    }
    w->data = dst;
    return 0;
}

/* The llama.cpp architectures that convert, and their families. */
static const struct { const char *arch; int family; } lcpp_arch[] = {
    {"llama", CV_FAMILY_LLAMA}, {"gemma", CV_FAMILY_GEMMA}, {"gemma2", CV_FAMILY_GEMMA2}, {"gptneox", CV_FAMILY_GPTNEOX},
    {"nanbeige", CV_FAMILY_LLAMA},
};
#define N_LCPP_ARCH (sizeof lcpp_arch / sizeof lcpp_arch[0])

/* Key "<arch>.<suffix>" into buf. */
static const char *akey(char *buf, size_t cap, const char *arch, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

static int llama_u32(const gguf_file *g, const char *key, uint32_t def, uint32_t *out, char *err, size_t errcap)
{
    mor_status st = gguf_get_u32(g, key, out);
    if (st == MOR_E_OUT_OF_RANGE && def) { *out = def; return 0; }
    if (st || !*out) return cv_fail(err, errcap, "llama GGUF: key '%s' is %s", key, st ? "missing or not an integer" : "0");
    return 0;
}

/* An optional positive float key (def when absent). */
static int llama_f32(const gguf_file *g, const char *key, float def, float *out, char *err, size_t errcap)
{
    mor_status st = gguf_get_f32(g, key, out);
    if (st == MOR_E_OUT_OF_RANGE) { *out = def; return 0; }
    if (st || !(*out > 0) || !(*out < 3e38f)) return cv_fail(err, errcap, "llama GGUF: key '%s' is not a positive number", key);
    return 0;
}

/* The tensor "blk.<l>.<stem>.<suffix>" (or "<stem>.<suffix>" when l < 0)
 * added as HF-grammar tensor hf (a format string with the layer, or plain). */
static int move(gguf_input *gi, checkpoint *ck, const gguf_file *g, int l, const char *stem, const char *suffix,
                const char *hf, char *err, size_t errcap)
{
    char name[160], to[160];
    tensor w;
    const int vec = strcmp(suffix, "bias") == 0 || strstr(stem, "norm") != NULL;
    if (l >= 0) snprintf(name, sizeof name, "blk.%d.%s.%s", l, stem, suffix);
    else snprintf(name, sizeof name, "%s.%s", stem, suffix);
    if (llama_tensor(g, name, vec, &w, err, errcap)) return -1;
    if (l >= 0) snprintf(to, sizeof to, "model.layers.%d.%s", l, hf);
    else snprintf(to, sizeof to, "%s", hf);
    return add_weight(gi, ck, to, &w, vec, err, errcap);
}

/* GPT-NeoX's attn_qkv, [all q; all k; all v] as llama.cpp's converter wrote
 * it (from HF's per-head [q; k; v]), as three row blocks. */
static int split_qkv(gguf_input *gi, checkpoint *ck, const gguf_file *g, int l, const hf_config *cfg, int bias, char *err,
                     size_t errcap)
{
    static const char *const hf[3] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"};
    char name[128], to[128];
    tensor w;
    const int64_t qd = (int64_t)cfg->n_head * cfg->head_dim;
    snprintf(name, sizeof name, "blk.%d.attn_qkv.%s", l, bias ? "bias" : "weight");
    if (llama_tensor(g, name, bias, &w, err, errcap)) return -1;
    if ((bias ? w.cols : w.rows) != 3 * qd || (!bias && w.cols != cfg->hidden))
        return cv_fail(err, errcap, "llama GGUF: tensor '%s' is not 3 x %lld rows of %u", name, (long long)qd, cfg->hidden);
    for (int p = 0; p < 3; p++) {
        tensor part = w;
        if (bias) { part.cols = qd; part.data = (const float *)w.data + p * qd; }
        else { part.rows = qd; part.data = (const uint8_t *)w.data + (size_t)(p * qd) * tensor_row_bytes(w.type, w.cols); }
        snprintf(to, sizeof to, "model.layers.%d.%s.%s", l, hf[p], bias ? "bias" : "weight");
        if (add_weight(gi, ck, to, &part, bias, err, errcap)) return -1;
    }
    return 0;
}

/* llama.cpp's nanbeige: a Llama whose block_count layers run num_loops
 * times (default 1), the final norm applied to the stream between loops
 * unless skip_loop_final_norm (src/models/nanbeige.cpp); and, as for a
 * llama, attention.scale when the file sets it. */
static int nanbeige_keys(const gguf_file *g, const char *path, hf_config *cfg, char *err, size_t errcap)
{
    char k[128];
    int skip = 0;
    float sc;
    if (llama_u32(g, akey(k, sizeof k, "nanbeige", "num_loops"), 1, &cfg->n_loops, err, errcap)) return -1;
    mor_status st = gguf_get_bool(g, akey(k, sizeof k, "nanbeige", "skip_loop_final_norm"), &skip);
    if (st && st != MOR_E_OUT_OF_RANGE) return cv_fail(err, errcap, "%s: key '%s' is not a bool", path, k);
    if (cfg->n_loops > MOR_MAX_RECURSIONS || (uint64_t)cfg->n_loops * cfg->n_layer > CV_MAX_LAYERS)
        return cv_fail(err, errcap, "%s: %u loops of %u layers; libmor runs up to %d recursions, %d layers", path,
                       cfg->n_loops, cfg->n_layer, MOR_MAX_RECURSIONS, CV_MAX_LAYERS);
    cfg->arch.loop_norm = cfg->n_loops > 1 && !skip;
    if (!gguf_get_f32(g, akey(k, sizeof k, "nanbeige", "attention.scale"), &sc) && sc != 0) {
        if (!(sc > 0) || !(sc < 3e38f)) return cv_fail(err, errcap, "%s: key '%s' is not a positive number", path, k);
        cfg->arch.attn_scale = sc;
    }
    return 0;
}

/* A llama.cpp file of architecture `arch`: the dimensions and features from
 * its <arch>.* keys, the tensors renamed into the HF grammar (layout.h), Q
 * and K of the "llama" architecture put back in HF order. What llama.cpp
 * does not store, it implies; libmor takes the same: Gemma's embedding
 * scale sqrt(n_embd), tied output and tanh GELU, Gemma 2's score scale
 * 1/sqrt(head_dim) (n_embd / n_head for its 46-layer model), and its
 * soft-caps, window (4096) and window pattern (2) defaults. For GPT-NeoX,
 * whose files do not say which GELU the model uses, libmor computes the
 * exact (erf) GELU of Pythia's hidden_act "gelu" (llama.cpp approximates
 * every GPT-NeoX's GELU by a tanh GELU, in an F16 table). */
static int open_llamacpp(gguf_input *gi, const char *path, const char *arch, int family, checkpoint *ck, hf_config *cfg,
                         char *err, size_t errcap)
{
    const gguf_file *g = gi->g;
    cv_arch *a = &cfg->arch;
    tensor emb, w;
    char name[128], k[128];
    gguf_str s;
    uint32_t v;
    const int neox = family == CV_FAMILY_GPTNEOX, gem = family == CV_FAMILY_GEMMA || family == CV_FAMILY_GEMMA2;
    a->family = family;
    if (gguf_find_tensor(g, "rope_freqs.weight") || !gguf_get_str(g, akey(k, sizeof k, arch, "rope.scaling.type"), &s))
        return cv_fail(err, errcap, "%s: RoPE scaling (rope_freqs / %s.rope.scaling) is not supported", path, arch);
    if (llama_u32(g, akey(k, sizeof k, arch, "embedding_length"), 0, &cfg->hidden, err, errcap) ||
        llama_u32(g, akey(k, sizeof k, arch, "feed_forward_length"), 0, &cfg->intermediate, err, errcap) ||
        llama_u32(g, akey(k, sizeof k, arch, "block_count"), 0, &cfg->n_layer, err, errcap) ||
        llama_u32(g, akey(k, sizeof k, arch, "attention.head_count"), 0, &cfg->n_head, err, errcap) ||
        llama_u32(g, akey(k, sizeof k, arch, "attention.head_count_kv"), cfg->n_head, &cfg->n_head_kv, err, errcap) ||
        llama_u32(g, akey(k, sizeof k, arch, "context_length"), 2048, &cfg->ctx, err, errcap) ||
        llama_u32(g, akey(k, sizeof k, arch, "attention.key_length"), cfg->hidden / cfg->n_head, &cfg->head_dim, err,
                  errcap) ||
        llama_u32(g, akey(k, sizeof k, arch, "attention.value_length"), cfg->head_dim, &v, err, errcap))
        return -1;
    if (v != cfg->head_dim)
        return cv_fail(err, errcap, "%s: value_length %u differs from key_length %u", path, v, cfg->head_dim);
    if (cfg->n_layer > CV_MAX_LAYERS || cfg->n_head % cfg->n_head_kv)
        return cv_fail(err, errcap, "%s: %u layers, %u heads, %u KV heads", path, cfg->n_layer, cfg->n_head, cfg->n_head_kv);
    if (strcmp(arch, "nanbeige") == 0 && nanbeige_keys(g, path, cfg, err, errcap)) return -1;
    if (neox && cfg->n_head_kv != cfg->n_head)
        return cv_fail(err, errcap, "%s: a GPT-NeoX model has as many KV heads as heads", path);
    if (llama_u32(g, akey(k, sizeof k, arch, "rope.dimension_count"), cfg->head_dim, &v, err, errcap)) return -1;
    /* GGML's "normal" RoPE (llama) pairs other dims than HF; partial rotary converts for the NeoX-style ones */
    if (v > cfg->head_dim || v % 2 || (family == CV_FAMILY_LLAMA && v != cfg->head_dim))
        return cv_fail(err, errcap, "%s: partial RoPE (%u of %u dims) is not supported for %s", path, v, cfg->head_dim, arch);
    a->rope_dims = v == cfg->head_dim ? 0 : v;
    if (llama_f32(g, akey(k, sizeof k, arch, "rope.freq_base"), 10000.0f, &cfg->rope_theta, err, errcap)) return -1;
    if (neox) {
        int par;
        if (gguf_get_f32(g, akey(k, sizeof k, arch, "attention.layer_norm_epsilon"), &cfg->eps) || !(cfg->eps > 0))
            return cv_fail(err, errcap, "%s: key '%s' is missing", path, k);
        if (gguf_get_bool(g, akey(k, sizeof k, arch, "use_parallel_residual"), &par))
            return cv_fail(err, errcap, "%s: key '%s' is missing", path, k);
        a->layer_norm = 1;
        a->gated = 0;
        a->attn_bias = a->ffn_bias = 1;
        a->parallel = par;
        a->act = CV_ACT_GELU;
    } else if (gguf_get_f32(g, akey(k, sizeof k, arch, "attention.layer_norm_rms_epsilon"), &cfg->eps) || !(cfg->eps > 0)) {
        return cv_fail(err, errcap, "%s: key '%s' is missing", path, k);
    }
    if (gem) {
        a->act = CV_ACT_GELU_TANH;
        a->embd_scale = sqrtf((float)cfg->hidden);   /* llama.cpp: sqrtf(n_embd) */
    }
    if (family == CV_FAMILY_GEMMA2) {
        uint32_t pat = 2;
        float base_swa;
        a->post_norms = 1;
        if (llama_f32(g, akey(k, sizeof k, arch, "attn_logit_softcapping"), 50.0f, &a->attn_softcap, err, errcap) ||
            llama_f32(g, akey(k, sizeof k, arch, "final_logit_softcapping"), 30.0f, &a->final_softcap, err, errcap) ||
            llama_u32(g, akey(k, sizeof k, arch, "attention.sliding_window"), 4096, &a->window, err, errcap))
            return -1;
        mor_status st = gguf_get_u32(g, akey(k, sizeof k, arch, "attention.sliding_window_pattern"), &pat);
        if (st && st != MOR_E_OUT_OF_RANGE) return cv_fail(err, errcap, "%s: bad key '%s'", path, k);
        for (uint32_t l = 0; l < cfg->n_layer; l++) a->local[l] = pat == 0 || l % pat < pat - 1;
        if (!gguf_get_f32(g, akey(k, sizeof k, arch, "rope.freq_base_swa"), &base_swa) && base_swa != cfg->rope_theta)
            return cv_fail(err, errcap, "%s: a RoPE base of its own for the sliding-window layers is not supported", path);
        if (cfg->n_layer == 46)   /* Gemma 2 27B: query_pre_attn_scalar = n_embd / n_head */
            a->attn_scale = 1.0f / sqrtf((float)(cfg->hidden / cfg->n_head));
    }
    if (llama_tensor(g, "token_embd.weight", 0, &emb, err, errcap)) return -1;
    cfg->vocab = (uint32_t)emb.rows;
    cfg->tie_embeddings = !gguf_find_tensor(g, "output.weight");
    if (gem && !cfg->tie_embeddings) return cv_fail(err, errcap, "%s: a %s model's output is its embedding; it has output.weight", path, arch);
    if (neox && cfg->tie_embeddings) return cv_fail(err, errcap, "%s: output.weight is missing", path);
    cfg->bos = cfg->eos = cfg->pad = -1;
    ck->format = CKPT_SAFETENSORS;
    if (add_weight(gi, ck, "model.embed_tokens.weight", &emb, 0, err, errcap) ||
        move(gi, ck, g, -1, "output_norm", "weight", "model.norm.weight", err, errcap) ||
        (neox && move(gi, ck, g, -1, "output_norm", "bias", "model.norm.bias", err, errcap)))
        return -1;
    if (!cfg->tie_embeddings &&
        (llama_tensor(g, "output.weight", 0, &w, err, errcap) || add_weight(gi, ck, "lm_head.weight", &w, 0, err, errcap)))
        return -1;
    for (int l = 0; l < (int)cfg->n_layer; l++) {
        if (neox) {
            static const char *const stems[][2] = {
                {"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"},
                {"attn_output", "self_attn.o_proj"}, {"ffn_up", "mlp.up_proj"}, {"ffn_down", "mlp.down_proj"},
            };
            char hf[96];
            if (split_qkv(gi, ck, g, l, cfg, 0, err, errcap) || split_qkv(gi, ck, g, l, cfg, 1, err, errcap)) return -1;
            for (size_t i = 0; i < sizeof stems / sizeof stems[0]; i++)
                for (int b = 0; b < 2; b++) {
                    snprintf(hf, sizeof hf, "%s.%s", stems[i][1], b ? "bias" : "weight");
                    if (move(gi, ck, g, l, stems[i][0], b ? "bias" : "weight", hf, err, errcap)) return -1;
                }
            continue;
        }
        for (int role = 0; role < CV_ROLE_COUNT; role++) {
            const int vec = role == CV_ROLE_ATTN_NORM || role == CV_ROLE_FFN_NORM;
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, cv_role_gguf[role]);
            if (llama_tensor(g, name, vec, &w, err, errcap) ||
                (family == CV_FAMILY_LLAMA && (role == CV_ROLE_ATTN_Q || role == CV_ROLE_ATTN_K) &&
                 unpermute(gi, &w, cfg->head_dim, err, errcap)))
                return -1;
            /* a looped model's layer l is also unrolled layer r*K + l of each loop r: the same bytes */
            for (uint32_t r = 0; r < (cfg->n_loops ? cfg->n_loops : 1); r++) {
                snprintf(name, sizeof name, "model.layers.%u.%s", r * cfg->n_layer + (uint32_t)l, cv_role_hf[role]);
                if (add_weight(gi, ck, name, &w, vec, err, errcap)) return -1;
            }
        }
        if (family == CV_FAMILY_GEMMA2 &&
            (move(gi, ck, g, l, "post_attention_norm", "weight", "attn_post_norm.weight", err, errcap) ||
             move(gi, ck, g, l, "post_ffw_norm", "weight", "ffn_post_norm.weight", err, errcap)))
            return -1;
    }
    if (cfg->n_loops > 1) cfg->n_layer *= cfg->n_loops;   /* unrolled, as the layers were named */
    /* The tokenizer is copied when libmor can run it; otherwise the reason
     * goes into the converter's summary. */
    if (!gguf_get_str(g, "tokenizer.ggml.model", &s) && (gguf_str_eq(s, "no_vocab") || gguf_str_eq(s, "none"))) {
        snprintf(gi->tokenizer_note, sizeof gi->tokenizer_note, "the file has none: tokenizer.ggml.model = no_vocab");
    } else if (gguf_find_kv(g, "tokenizer.ggml.model")) {
        tokenizer *tk = NULL;
        gi->has_tokenizer = tokenizer_load(g, (int32_t)cfg->vocab, &tk) == MOR_OK && tk;
        if (!gi->has_tokenizer) snprintf(gi->tokenizer_note, sizeof gi->tokenizer_note, "%s", mor_last_error());
        tokenizer_free(tk);
    }
    return ckpt_finish(ck, err, errcap);
}

/* The GGUF file at path: a llama.cpp file of an architecture that converts
 * (1, mapped into gi, *family set), or a `mor` file for libmor's loader (0);
 * -1 when it cannot be read or its architecture is another. */
static int map_if_llamacpp(gguf_input *gi, const char *path, int *family, const char **arch_name, char *err, size_t errcap)
{
    gguf_str arch;
    if (cv_file_open(&gi->file, path, err, errcap)) return -1;
    if (gguf_parse(gi->file.data, gi->file.size, &gi->g) || gguf_get_str(gi->g, "general.architecture", &arch) ||
        gguf_str_eq(arch, "mor")) {
        gguf_free(gi->g);   /* not ours to judge: the loader gives the message */
        gi->g = NULL;
        cv_file_close(&gi->file);
        return 0;
    }
    for (size_t i = 0; i < N_LCPP_ARCH; i++)
        if (gguf_str_eq(arch, lcpp_arch[i].arch)) {
            *family = lcpp_arch[i].family;
            *arch_name = lcpp_arch[i].arch;
            return 1;
        }
    return cv_fail(err, errcap, "%s: llama.cpp architecture '%.*s' is not supported (llama, gemma, gemma2, gptneox, nanbeige)", path,
                   (int)(arch.n > 40 ? 40 : arch.n), arch.p);
}

int gguf_input_open(gguf_input *gi, const char *path, int keep_quant, checkpoint *ck, hf_config *cfg, char *err,
                    size_t errcap)
{
    mor_model_params mp;
    mor_model *m;
    char name[128];
    memset(gi, 0, sizeof *gi);
    gi->keep_quant = keep_quant;
    memset(ck, 0, sizeof *ck);
    memset(cfg, 0, sizeof *cfg);
    cv_arch_llama(&cfg->arch);
    int family = CV_FAMILY_LLAMA;
    const char *arch = NULL;
    const int lcpp = map_if_llamacpp(gi, path, &family, &arch, err, errcap);
    if (lcpp) return lcpp < 0 ? -1 : open_llamacpp(gi, path, arch, family, ck, cfg, err, errcap);
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_FOLD_LORA;
    if (mor_model_load_file(path, &mp, &gi->model)) return cv_fail(err, errcap, "%s: %s", path, mor_last_error());
    m = gi->model;
    gi->g = (struct gguf_file *)m->gguf;
    if (m->router_type != MOR_ROUTER_TYPE_NONE)
        return cv_fail(err, errcap, "%s has routers; only GGUF models without routers can be converted", path);
    cfg->hidden = (uint32_t)m->n_embd;
    cfg->intermediate = (uint32_t)m->n_ff;
    cfg->n_head = (uint32_t)m->n_head;
    cfg->n_head_kv = (uint32_t)m->n_head_kv;
    cfg->head_dim = (uint32_t)m->head_dim;
    cfg->n_layer = (uint32_t)m->n_layer;
    cfg->vocab = (uint32_t)m->n_vocab;
    cfg->ctx = (uint32_t)m->n_ctx_train;
    cfg->eps = m->eps;
    cfg->rope_theta = m->rope_theta;
    cfg->tie_embeddings = m->output.data == m->tok_embd.data;
    cfg->bos = cfg->eos = cfg->pad = -1;
    {   /* the architecture features, as the file has them (its norms already hold Gemma's 1 + w) */
        const model_arch *ma = &m->arch;
        cv_arch *a = &cfg->arch;
        a->family = ma->family;   /* FAMILY_* and CV_FAMILY_* are both FORMAT.md's order */
        a->layer_norm = ma->layer_norm;
        a->act = ma->ffn_act;
        a->gated = ma->ffn_gated;
        a->attn_bias = ma->attn_bias;
        a->ffn_bias = ma->ffn_bias;
        a->parallel = ma->parallel_residual;
        a->post_norms = ma->post_norms;
        a->rope_dims = ma->rope_dims == m->head_dim ? 0 : (uint32_t)ma->rope_dims;
        a->attn_scale = ma->attn_scale == 1.0f / sqrtf((float)m->head_dim) ? 0 : ma->attn_scale;
        a->attn_softcap = ma->attn_softcap;
        a->final_softcap = ma->final_softcap;
        a->embd_scale = ma->embd_scale;
        a->window = (uint32_t)ma->window;
        a->loop_norm = ma->loop_norm;
        if (ma->loop_norm) cfg->n_loops = (uint32_t)m->n_rec;   /* its layers unrolled already; they stay looped */
        for (int32_t l = 0; ma->local && l < m->n_layer && l < CV_MAX_LAYERS; l++) a->local[l] = ma->local[l];
    }
    ck->format = CKPT_SAFETENSORS;
    if (add_weight(gi, ck, "model.embed_tokens.weight", &m->tok_embd, 0, err, errcap) ||
        add_weight(gi, ck, "model.norm.weight", &m->output_norm, 1, err, errcap) ||
        (m->output_norm_b.data && add_weight(gi, ck, "model.norm.bias", &m->output_norm_b, 1, err, errcap)) ||
        (!cfg->tie_embeddings && add_weight(gi, ck, "lm_head.weight", &m->output, 0, err, errcap)) ||
        (m->exit_gate.data && (add_weight(gi, ck, "model.early_exit_gate.weight", &m->exit_gate, 0, err, errcap) ||
                               add_weight(gi, ck, "model.early_exit_gate.bias", &m->exit_gate_b, 1, err, errcap))))
        return -1;
    for (int32_t l = 0; l < m->n_layer; l++)
        for (int role = 0; role < CV_ROLE_ALL; role++) {   /* model.h's ROLE_* are CV_ROLE_*, in FORMAT.md's order */
            if (!m->layers[l].w[role].data) continue;
            snprintf(name, sizeof name, "model.layers.%d.%s", l, cv_role_hf[role]);
            if (add_weight(gi, ck, name, &m->layers[l].w[role], cv_role_is_vector(role), err, errcap)) return -1;
        }
    for (uint64_t i = 0; i < m->gguf->n_kv; i++) {
        gguf_str k = m->gguf->kv[i].key;
        if (k.n > 14 && memcmp(k.p, "tokenizer.ggml", 14) == 0) gi->has_tokenizer = 1;
    }
    return ckpt_finish(ck, err, errcap);
}

int gguf_input_copy_keys(const gguf_input *gi, gguf_writer *w, int name_too, char *err, size_t errcap)
{
    const gguf_file *g = gi->g;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        char key[256];
        if (kv->key.n >= sizeof key) continue;
        memcpy(key, kv->key.p, kv->key.n);
        key[kv->key.n] = 0;
        if (strncmp(key, "tokenizer.ggml.", 15) != 0 && !(name_too && strcmp(key, "general.name") == 0)) continue;
        if (kv->type == GGUF_STR) {
            gguf_str s;
            char *c;
            gguf_get_str(g, key, &s);
            if (!(c = cv_strndup(s.p, (size_t)s.n))) return cv_fail(err, errcap, "out of memory");
            gguf_writer_add_str(w, key, c);
            free(c);
        } else if (kv->type == GGUF_BOOL) {
            int b = 0;
            gguf_get_bool(g, key, &b);
            gguf_writer_add_bool(w, key, b);
        } else if (kv->type != GGUF_ARR) {
            int64_t v;
            if (gguf_get_i64(g, key, &v) || v < 0 || v > UINT32_MAX)
                return cv_fail(err, errcap, "cannot copy key '%s' (type %u)", key, kv->type);
            gguf_writer_add_u32(w, key, (uint32_t)v);
        } else if (kv->arr_type == GGUF_STR) {
            char **v = calloc(kv->arr_n ? (size_t)kv->arr_n : 1, sizeof *v);
            int ok = v != NULL;
            for (uint64_t j = 0; ok && j < kv->arr_n; j++) ok = (v[j] = cv_strndup(kv->strs[j].p, (size_t)kv->strs[j].n)) != NULL;
            if (ok) gguf_writer_add_arr_str(w, key, (const char *const *)v, (size_t)kv->arr_n);
            for (uint64_t j = 0; v && j < kv->arr_n; j++) free(v[j]);
            free(v);
            if (!ok) return cv_fail(err, errcap, "out of memory");
        } else if (kv->arr_type == GGUF_F32 || kv->arr_type == GGUF_I32 || kv->arr_type == GGUF_U32) {
            void *v = malloc(4 * (kv->arr_n ? (size_t)kv->arr_n : 1));
            if (!v) return cv_fail(err, errcap, "out of memory");
            if (kv->arr_type == GGUF_F32) {
                gguf_get_arr_f32(g, key, v, kv->arr_n);
                gguf_writer_add_arr_f32(w, key, v, (size_t)kv->arr_n);
            } else {
                gguf_get_arr_i32(g, key, v, kv->arr_n);
                gguf_writer_add_arr_i32(w, key, v, (size_t)kv->arr_n);
            }
            free(v);
        } else {
            return cv_fail(err, errcap, "cannot copy key '%s' (an array of type %u)", key, kv->arr_type);
        }
    }
    return 0;
}
