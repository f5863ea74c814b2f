/* gguf_input.c - a `mor` GGUF file as a plain checkpoint. See gguf_input.h. */
#include "gguf_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "gguf.h"
#include "kernels.h"
#include "layout.h"
#include "model.h"
#include "quant.h"
#include "tokenizer.h"
#include "util.h"

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
 * for a vector): F32/F16/BF16 as stored, anything else dequantized to F32. */
static int add_weight(gguf_input *gi, checkpoint *ck, const char *name, const tensor *w, int vector, char *err,
                      size_t errcap)
{
    uint64_t shape[2] = {(uint64_t)w->rows, (uint64_t)w->cols};
    int dtype = (int)w->type;
    const uint8_t *data = w->data;
    if (vector) shape[0] = (uint64_t)w->cols;
    if (dtype != GGML_F32 && dtype != GGML_F16 && dtype != GGML_BF16) {
        float *f = own_alloc(gi, sizeof(float) * (size_t)(w->rows * w->cols));
        if (!f) return cv_fail(err, errcap, "out of memory");
        for (int64_t r = 0; r < w->rows; r++) k_embed_row(w, (int32_t)r, f + r * w->cols);
        dtype = GGML_F32;
        data = (const uint8_t *)f;
    }
    return ckpt_add(ck, name, strlen(name), dtype, vector ? 1 : 2, shape, data,
                    (uint64_t)(w->rows * w->cols) * cv_dtype_size(dtype), err, errcap);
}

/* ---- a llama.cpp Llama (general.architecture = "llama") ---- */

/* The file's tensor `name` as a weight (rows = ne[1]; a vector is 1 x ne[0]);
 * NULL when missing. */
static int llama_tensor(const gguf_file *g, const char *name, int vector, tensor *w, char *err, size_t errcap)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return cv_fail(err, errcap, "llama GGUF: tensor '%s' is missing", name);
    if (t->type != GGML_F32 && t->type != GGML_F16 && t->type != GGML_BF16 && t->type != GGML_Q8_0 &&
        t->type != GGML_Q4_0)
        return cv_fail(err, errcap, "llama GGUF: tensor '%s' has type %s; F32, F16, BF16, Q8_0 and Q4_0 convert", name,
                       tensor_type_name(t->type));
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

static int llama_u32(const gguf_file *g, const char *key, uint32_t def, uint32_t *out, char *err, size_t errcap)
{
    mor_status st = gguf_get_u32(g, key, out);
    if (st == MOR_E_OUT_OF_RANGE && def) { *out = def; return 0; }
    if (st || !*out) return cv_fail(err, errcap, "llama GGUF: key '%s' is %s", key, st ? "missing or not an integer" : "0");
    return 0;
}

static int open_llama(gguf_input *gi, const char *path, checkpoint *ck, hf_config *cfg, char *err, size_t errcap)
{
    const gguf_file *g = gi->g;
    tensor emb, w;
    char name[128];
    gguf_str s;
    uint32_t v;
    if (gguf_find_tensor(g, "rope_freqs.weight") || !gguf_get_str(g, "llama.rope.scaling.type", &s))
        return cv_fail(err, errcap, "%s: RoPE scaling (rope_freqs / llama.rope.scaling) is not supported", path);
    if (llama_u32(g, "llama.embedding_length", 0, &cfg->hidden, err, errcap) ||
        llama_u32(g, "llama.feed_forward_length", 0, &cfg->intermediate, err, errcap) ||
        llama_u32(g, "llama.block_count", 0, &cfg->n_layer, err, errcap) ||
        llama_u32(g, "llama.attention.head_count", 0, &cfg->n_head, err, errcap) ||
        llama_u32(g, "llama.attention.head_count_kv", cfg->n_head, &cfg->n_head_kv, err, errcap) ||
        llama_u32(g, "llama.context_length", 2048, &cfg->ctx, err, errcap) ||
        llama_u32(g, "llama.attention.key_length", cfg->hidden / cfg->n_head, &cfg->head_dim, err, errcap) ||
        llama_u32(g, "llama.rope.dimension_count", cfg->head_dim, &v, err, errcap))
        return -1;
    if (v != cfg->head_dim)
        return cv_fail(err, errcap, "%s: partial RoPE (%u of %u dims) is not supported", path, v, cfg->head_dim);
    if (gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &cfg->eps))
        return cv_fail(err, errcap, "%s: key 'llama.attention.layer_norm_rms_epsilon' is missing", path);
    if (gguf_get_f32(g, "llama.rope.freq_base", &cfg->rope_theta)) cfg->rope_theta = 10000.0f;
    if (llama_tensor(g, "token_embd.weight", 0, &emb, err, errcap)) return -1;
    cfg->vocab = (uint32_t)emb.rows;
    cfg->tie_embeddings = !gguf_find_tensor(g, "output.weight");
    cfg->bos = cfg->eos = cfg->pad = -1;
    ck->format = CKPT_SAFETENSORS;
    if (add_weight(gi, ck, "model.embed_tokens.weight", &emb, 0, err, errcap) ||
        llama_tensor(g, "output_norm.weight", 1, &w, err, errcap) ||
        add_weight(gi, ck, "model.norm.weight", &w, 1, err, errcap))
        return -1;
    if (!cfg->tie_embeddings &&
        (llama_tensor(g, "output.weight", 0, &w, err, errcap) || add_weight(gi, ck, "lm_head.weight", &w, 0, err, errcap)))
        return -1;
    for (uint32_t l = 0; l < cfg->n_layer; l++)
        for (int role = 0; role < CV_ROLE_COUNT; role++) {
            const int vec = role == CV_ROLE_ATTN_NORM || role == CV_ROLE_FFN_NORM;
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, cv_role_gguf[role]);
            if (llama_tensor(g, name, vec, &w, err, errcap) ||
                ((role == CV_ROLE_ATTN_Q || role == CV_ROLE_ATTN_K) && unpermute(gi, &w, cfg->head_dim, err, errcap)))
                return -1;
            snprintf(name, sizeof name, "model.layers.%u.%s", l, cv_role_hf[role]);
            if (add_weight(gi, ck, name, &w, vec, err, errcap)) return -1;
        }
    /* The tokenizer is copied when libmor can run it; otherwise the reason
     * goes into the converter's summary. */
    if (gguf_find_kv(g, "tokenizer.ggml.model")) {
        tokenizer *tk = NULL;
        gi->has_tokenizer = tokenizer_load(g, (int32_t)cfg->vocab, &tk) == MOR_OK && tk;
        if (!gi->has_tokenizer) snprintf(gi->tokenizer_note, sizeof gi->tokenizer_note, "%s", mor_last_error());
        tokenizer_free(tk);
    }
    return ckpt_finish(ck, err, errcap);
}

/* general.architecture of the GGUF file at path is "llama": map it into gi
 * (1), or leave it to libmor's loader (0); -1 when it cannot be read. */
static int map_if_llama(gguf_input *gi, const char *path, char *err, size_t errcap)
{
    gguf_str arch;
    if (cv_file_open(&gi->file, path, err, errcap)) return -1;
    if (gguf_parse(gi->file.data, gi->file.size, &gi->g) || gguf_get_str(gi->g, "general.architecture", &arch) ||
        !gguf_str_eq(arch, "llama")) {
        gguf_free(gi->g);   /* not ours to judge: the loader gives the message */
        gi->g = NULL;
        cv_file_close(&gi->file);
        return 0;
    }
    return 1;
}

int gguf_input_open(gguf_input *gi, const char *path, checkpoint *ck, hf_config *cfg, char *err, size_t errcap)
{
    mor_model_params mp;
    mor_model *m;
    char name[128];
    memset(gi, 0, sizeof *gi);
    memset(ck, 0, sizeof *ck);
    memset(cfg, 0, sizeof *cfg);
    const int llama = map_if_llama(gi, path, err, errcap);
    if (llama) return llama < 0 ? -1 : open_llama(gi, path, ck, cfg, err, errcap);
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
    ck->format = CKPT_SAFETENSORS;
    if (add_weight(gi, ck, "model.embed_tokens.weight", &m->tok_embd, 0, err, errcap) ||
        add_weight(gi, ck, "model.norm.weight", &m->output_norm, 1, err, errcap) ||
        (!cfg->tie_embeddings && add_weight(gi, ck, "lm_head.weight", &m->output, 0, err, errcap)))
        return -1;
    for (int32_t l = 0; l < m->n_layer; l++)
        for (int role = 0; role < CV_ROLE_COUNT; role++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, cv_role_hf[role]);
            if (add_weight(gi, ck, name, &m->layers[l].w[role], role == CV_ROLE_ATTN_NORM || role == CV_ROLE_FFN_NORM,
                           err, errcap))
                return -1;
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
