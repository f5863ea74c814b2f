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
    mor_model_free(gi->model);
    memset(gi, 0, sizeof *gi);
}

/* Add a weight as tensor `name` with PyTorch shape [rows, cols] (or [cols]
 * for a vector): F32/F16/BF16 as stored, anything else dequantized to F32. */
static int add_weight(gguf_input *gi, checkpoint *ck, const char *name, const mor_weight *w, int vector, char *err,
                      size_t errcap)
{
    uint64_t shape[2] = {(uint64_t)w->rows, (uint64_t)w->cols};
    int dtype = (int)w->type;
    const uint8_t *data = w->data;
    if (vector) shape[0] = (uint64_t)w->cols;
    if (dtype != CV_F32 && dtype != CV_F16 && dtype != CV_BF16) {
        float *f = malloc(sizeof(float) * (size_t)(w->rows * w->cols));
        void **no = realloc(gi->own, (gi->n_own + 1) * sizeof *no);
        if (no) gi->own = no;
        if (!f || !no) { free(f); return cv_fail(err, errcap, "out of memory"); }
        gi->own[gi->n_own++] = f;
        for (int64_t r = 0; r < w->rows; r++) mor_embed_row(w, (int32_t)r, f + r * w->cols);
        dtype = CV_F32;
        data = (const uint8_t *)f;
    }
    return ckpt_add(ck, name, strlen(name), dtype, vector ? 1 : 2, shape, data,
                    (uint64_t)(w->rows * w->cols) * cv_dtype_size(dtype), err, errcap);
}

int gguf_input_open(gguf_input *gi, const char *path, checkpoint *ck, hf_config *cfg, char *err, size_t errcap)
{
    mor_model_params mp;
    mor_model *m;
    char name[128];
    memset(gi, 0, sizeof *gi);
    memset(ck, 0, sizeof *ck);
    memset(cfg, 0, sizeof *cfg);
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_FOLD_LORA;
    if (mor_model_load_file(path, &mp, &gi->model)) return cv_fail(err, errcap, "%s: %s", path, mor_last_error());
    m = gi->model;
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
    const gguf_file *g = gi->model->gguf;
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
