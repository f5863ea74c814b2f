/* io.c - checkpoints: the model as the `mor` GGUF file the library loads
 * (docs/FORMAT.md), written with the converter's GGUF writer, and read back
 * for resuming; the optimizer state in a sidecar GGUF (PATH.opt).
 *
 * Training-only settings the format has no key for (loss coefficients) are
 * kept under `train.*`, a namespace the loader ignores. A LoRA model is
 * written with its deltas folded in: every unrolled layer gets its own copy
 * of each relaxed weight through mor.layer_map.<role>; such a file loads in
 * the library but cannot be resumed (the deltas are gone). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train.h"
#include "gguf.h"
#include "gguf_write.h"
#include "dtype.h"

extern const char *const tr_role_names[TR_NROLE];

static int fail(char *err, size_t cap, const char *msg, const char *arg)
{
    snprintf(err, cap, "%s%s%s", msg, arg ? ": " : "", arg ? arg : "");
    return -1;
}

/* A tensor's data as the file stores it, kept alive until the write. */
typedef struct { void **bufs; int n, cap; } keep_t;

static void *keep(keep_t *k, size_t bytes)
{
    if (k->n == k->cap) {
        int cap = k->cap ? k->cap * 2 : 64;
        void **b = realloc(k->bufs, sizeof *b * (size_t)cap);
        if (!b) return NULL;
        k->bufs = b; k->cap = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) k->bufs[k->n++] = p;
    return p;
}

static void keep_free(keep_t *k)
{
    for (int i = 0; i < k->n; i++) free(k->bufs[i]);
    free(k->bufs);
}

/* Add `rows x cols` reals as a GGUF tensor ([cols, rows], or [cols] for a
 * vector when vec), F16 when f16 and it is a matrix. */
static int put(gguf_writer *w, keep_t *k, const char *name, const real *src, int64_t rows, int64_t cols,
               int vec, int f16)
{
    size_t n = (size_t)(rows * cols);
    float *f = keep(k, n * sizeof(float));
    if (!f) return -1;
    for (size_t i = 0; i < n; i++) f[i] = (float)src[i];
    uint64_t dims[2] = { (uint64_t)cols, (uint64_t)rows };
    if (f16 && !vec) {
        uint16_t *h = keep(k, n * 2);
        if (!h) return -1;
        cv_convert(h, CV_F16, f, CV_F32, n);
        gguf_writer_add_tensor(w, name, CV_F16, 2, dims, h, n * 2);
    } else {
        gguf_writer_add_tensor(w, name, CV_F32, vec ? 1 : 2, dims, f, n * sizeof(float));
    }
    return 0;
}

int tr_save_gguf(const tr_model *m, const char *path, const tr_save_opts *o, char *err, size_t errcap)
{
    const tr_config *c = &m->c;
    tr_save_opts none = { 0 };
    if (!o) { o = &none; none.eos = -1; }
    gguf_writer *w = gguf_writer_new();
    keep_t k = { 0 };
    int rc = -1;
    if (!w) return fail(err, errcap, "out of memory", NULL);
    const int L = m->L, lora = c->lora_rank > 0;
    const char *sharing = c->n_rec == 1 ? "none" : c->prelude ? "middle_cycle" : "cycle";
    gguf_writer_add_str(w, "general.architecture", "mor");
    if (o->name) gguf_writer_add_str(w, "general.name", o->name);
    gguf_writer_add_u32(w, "mor.format_version", 1);
    gguf_writer_add_u32(w, "mor.vocab_size", (uint32_t)c->vocab);
    gguf_writer_add_u32(w, "mor.context_length", (uint32_t)c->ctx);
    gguf_writer_add_u32(w, "mor.embedding_length", (uint32_t)c->d);
    gguf_writer_add_u32(w, "mor.feed_forward_length", (uint32_t)c->ff);
    gguf_writer_add_u32(w, "mor.attention.head_count", (uint32_t)c->n_head);
    gguf_writer_add_u32(w, "mor.attention.head_count_kv", (uint32_t)c->n_kv);
    gguf_writer_add_u32(w, "mor.attention.key_length", (uint32_t)c->head_dim);
    gguf_writer_add_f32(w, "mor.attention.layer_norm_rms_epsilon", c->eps);
    gguf_writer_add_f32(w, "mor.rope.freq_base", c->theta);
    gguf_writer_add_u32(w, "mor.layer_count", (uint32_t)L);
    gguf_writer_add_u32(w, "mor.recursion.count", (uint32_t)c->n_rec);
    gguf_writer_add_u32(w, "mor.recursion.base_depth", (uint32_t)c->K);
    gguf_writer_add_u32(w, "mor.recursion.prelude", (uint32_t)c->prelude);
    gguf_writer_add_u32(w, "mor.recursion.coda", (uint32_t)c->coda);
    gguf_writer_add_str(w, "mor.recursion.sharing", sharing);
    gguf_writer_add_arr_i32(w, "mor.layer_map", m->map, (size_t)L);
    int32_t ident[256];
    for (int l = 0; l < L; l++) ident[l] = l;
    if (lora)
        for (int role = 0; role < TR_NROLE; role++) {
            if (role == TR_NORM1 || role == TR_NORM2) continue;
            char key[64];
            snprintf(key, sizeof key, "mor.layer_map.%s", tr_role_names[role]);
            gguf_writer_add_arr_i32(w, key, ident, (size_t)L);
        }
    static const char *const rtype[] = { "none", "expert", "token" };
    gguf_writer_add_str(w, "mor.router.type", rtype[c->router]);
    if (c->router != TR_ROUTER_NONE) {
        gguf_writer_add_str(w, "mor.router.arch", "linear");
        gguf_writer_add_str(w, "mor.router.func",
                            c->router == TR_ROUTER_EXPERT || c->func == TR_FUNC_SIGMOID ? "sigmoid" : "softmax");
        gguf_writer_add_f32(w, "mor.router.alpha", c->alpha);
        gguf_writer_add_f32(w, "mor.router.temp", 1.0f);
        gguf_writer_add_str(w, "mor.router.gating", "weighted");
        if (c->router == TR_ROUTER_EXPERT) {
            gguf_writer_add_arr_f64(w, "mor.router.capacity", c->cap, (size_t)c->n_rec);
            gguf_writer_add_str(w, "mor.router.sampling", "aux_loss");
        }
    }
    gguf_writer_add_bool(w, "mor.kv.shared", 0);
    /* training-only settings (ignored by the loader) */
    gguf_writer_add_f32(w, "train.aux_coef", c->aux_coef);
    gguf_writer_add_f32(w, "train.bal_coef", c->bal_coef);
    gguf_writer_add_f32(w, "train.z_coef", c->z_coef);
    gguf_writer_add_u32(w, "train.loss_free", (uint32_t)c->loss_free);
    gguf_writer_add_f32(w, "train.bias_rate", c->bias_rate);
    gguf_writer_add_u32(w, "train.lora_rank", (uint32_t)c->lora_rank);
    if (o->tok_tokens && o->n_tok > 0) {
        gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_add_str(w, "tokenizer.ggml.pre", "gpt2");
        gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", o->tok_tokens, (size_t)o->n_tok);
        gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", o->tok_types, (size_t)o->n_tok);
        gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", o->tok_merges, (size_t)o->n_merges);
        if (o->eos >= 0) gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)o->eos);
    }

    if (put(w, &k, "token_embd.weight", m->p + m->embd, c->vocab, c->d, 0, o->f16) ||
        put(w, &k, "output_norm.weight", m->p + m->onorm, 1, c->d, 1, 0))
        goto oom;
    char name[96];
    for (int b = 0; b < m->n_blocks; b++)
        for (int role = 0; role < TR_NROLE; role++) {
            const tr_tensor *t = NULL;
            for (int i = 0; i < m->n_t; i++) if (m->t[i].off == m->blk[b][role]) { t = &m->t[i]; break; }
            int norm = role == TR_NORM1 || role == TR_NORM2;
            if (lora && !norm) continue;   /* written per unrolled layer below */
            snprintf(name, sizeof name, "blk.%d.%s.weight", b, tr_role_names[role]);
            if (put(w, &k, name, m->p + t->off, t->rows, t->cols, norm, norm ? 0 : o->f16)) goto oom;
        }
    if (lora)
        for (int l = 0; l < L; l++)
            for (int role = 0; role < TR_NROLE; role++) {
                if (role == TR_NORM1 || role == TR_NORM2) continue;
                const tr_tensor *t = NULL;
                for (int i = 0; i < m->n_t; i++) if (m->t[i].off == m->blk[m->map[l]][role]) { t = &m->t[i]; break; }
                size_t n = (size_t)(t->rows * t->cols);
                real *wf = keep(&k, n * sizeof(real));
                if (!wf) goto oom;
                memcpy(wf, m->p + t->off, n * sizeof(real));
                int in_rec = l >= c->prelude && l < c->prelude + c->n_rec * c->K;
                if (in_rec) {   /* W + (alpha/R) B A */
                    int r = (l - c->prelude) / c->K, j = (l - c->prelude) % c->K, R = c->lora_rank;
                    const real *A = m->p + m->lora_a[r][j][role], *B = m->p + m->lora_b[r][j][role];
                    real sc = (real)(c->lora_alpha / R);
                    for (int64_t oi = 0; oi < t->rows; oi++)
                        for (int q = 0; q < R; q++) {
                            real bq = sc * B[oi * R + q];
                            for (int64_t ii = 0; ii < t->cols; ii++) wf[oi * t->cols + ii] += bq * A[(int64_t)q * t->cols + ii];
                        }
                }
                snprintf(name, sizeof name, "blk.%d.%s.weight", l, tr_role_names[role]);
                if (put(w, &k, name, wf, t->rows, t->cols, 0, o->f16)) goto oom;
            }
    if (c->router == TR_ROUTER_EXPERT)
        for (int r = 0; r < c->n_rec; r++) {
            snprintf(name, sizeof name, "rtr.%d.weight", r);
            if (put(w, &k, name, m->p + m->rtr[r], 1, c->d, 0, 0)) goto oom;
        }
    if (c->router == TR_ROUTER_TOKEN) {
        if (put(w, &k, "rtr.weight", m->p + m->rtr_tc, c->n_rec, c->d, 0, 0)) goto oom;
        if (c->loss_free) {
            real b[TR_MAX_REC];
            for (int r = 0; r < c->n_rec; r++) b[r] = m->bias[r];
            if (put(w, &k, "rtr.bias", b, 1, c->n_rec, 1, 0)) goto oom;
        }
    }
    {
        /* write to PATH.tmp and rename: a crash never leaves half a checkpoint */
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f) { rc = fail(err, errcap, "cannot create", tmp); goto done; }
        char werr[256] = "";
        int wr = gguf_writer_write(w, f, werr, sizeof werr);
        if (fclose(f) != 0) wr = -1;
        if (wr != 0) { remove(tmp); rc = fail(err, errcap, "cannot write GGUF", werr[0] ? werr : path); goto done; }
        if (rename(tmp, path) != 0) { remove(tmp); rc = fail(err, errcap, "cannot rename to", path); goto done; }
    }
    rc = 0;
    goto done;
oom:
    rc = fail(err, errcap, "out of memory writing", path);
done:
    gguf_writer_free(w);
    keep_free(&k);
    return rc;
}

/* ---- reading back ---- */

static void *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) { char *b = realloc(buf, cap *= 2); if (!b) { free(buf); buf = NULL; break; } buf = b; }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *size = n;
    return buf;
}

static int get_u32(const gguf_file *g, const char *key, int32_t *out)
{
    uint32_t v;
    if (gguf_get_u32(g, key, &v)) return -1;
    *out = (int32_t)v;
    return 0;
}

static int load_tensor(const gguf_file *g, const char *name, real *dst, int64_t rows, int64_t cols)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t || t->ne[0] != cols || (t->n_dims == 2 && t->ne[1] != rows) || (t->n_dims == 1 && rows != 1)) return -1;
    size_t n = (size_t)(rows * cols);
    for (size_t i = 0; i < n; i++) {
        if (t->type == GGML_F32) { float f; memcpy(&f, t->data + 4 * i, 4); dst[i] = f; }
        else if (t->type == GGML_F16) { uint16_t h; memcpy(&h, t->data + 2 * i, 2); dst[i] = cv_f16_to_f32(h); }
        else return -1;
    }
    return 0;
}

int tr_load_gguf(tr_model *m, const char *path, char *err, size_t errcap)
{
    size_t size;
    void *buf = read_all(path, &size);
    if (!buf) return fail(err, errcap, "cannot read", path);
    gguf_file *g = NULL;
    int rc = -1;
    if (gguf_parse(buf, size, &g)) { free(buf); return fail(err, errcap, "not a GGUF file", path); }
    tr_config c;
    tr_config_defaults(&c);
    gguf_str s;
    int32_t L;
    if (get_u32(g, "mor.vocab_size", &c.vocab) || get_u32(g, "mor.context_length", &c.ctx) ||
        get_u32(g, "mor.embedding_length", &c.d) || get_u32(g, "mor.feed_forward_length", &c.ff) ||
        get_u32(g, "mor.attention.head_count", &c.n_head) || get_u32(g, "mor.attention.head_count_kv", &c.n_kv) ||
        get_u32(g, "mor.attention.key_length", &c.head_dim) || get_u32(g, "mor.layer_count", &L) ||
        get_u32(g, "mor.recursion.count", &c.n_rec) || get_u32(g, "mor.recursion.base_depth", &c.K) ||
        get_u32(g, "mor.recursion.prelude", &c.prelude) || get_u32(g, "mor.recursion.coda", &c.coda) ||
        gguf_get_f32(g, "mor.attention.layer_norm_rms_epsilon", &c.eps) ||
        gguf_get_f32(g, "mor.rope.freq_base", &c.theta)) {
        fail(err, errcap, "missing model keys in", path);
        goto done;
    }
    if (gguf_find_kv(g, "mor.layer_map.attn_q")) { fail(err, errcap, "a LoRA-folded file cannot be resumed", path); goto done; }
    c.router = TR_ROUTER_NONE;
    if (!gguf_get_str(g, "mor.router.type", &s)) {
        if (gguf_str_eq(s, "expert")) c.router = TR_ROUTER_EXPERT;
        else if (gguf_str_eq(s, "token")) c.router = TR_ROUTER_TOKEN;
    }
    if (c.router != TR_ROUTER_NONE) {
        gguf_get_f32(g, "mor.router.alpha", &c.alpha);
        if (!gguf_get_str(g, "mor.router.func", &s)) c.func = gguf_str_eq(s, "softmax") ? TR_FUNC_SOFTMAX : TR_FUNC_SIGMOID;
        if (c.router == TR_ROUTER_EXPERT) gguf_get_arr_f64(g, "mor.router.capacity", c.cap, (uint64_t)c.n_rec);
    }
    gguf_get_f32(g, "train.aux_coef", &c.aux_coef);
    gguf_get_f32(g, "train.bal_coef", &c.bal_coef);
    gguf_get_f32(g, "train.z_coef", &c.z_coef);
    get_u32(g, "train.loss_free", &c.loss_free);
    gguf_get_f32(g, "train.bias_rate", &c.bias_rate);
    if (tr_config_check(&c) || c.prelude + c.n_rec * c.K + c.coda != L) { fail(err, errcap, "unusable model shape in", path); goto done; }
    if (tr_model_init(m, &c, 0)) { fail(err, errcap, "out of memory loading", path); goto done; }
    for (int i = 0; i < m->n_t; i++) {
        const tr_tensor *t = &m->t[i];
        if (load_tensor(g, t->name, m->p + t->off, t->rows, t->cols)) {
            fail(err, errcap, "missing or mis-shaped tensor", t->name);
            tr_model_free(m);
            goto done;
        }
    }
    if (c.router == TR_ROUTER_TOKEN && c.loss_free) {
        real b[TR_MAX_REC];
        if (!load_tensor(g, "rtr.bias", b, 1, c.n_rec))
            for (int r = 0; r < c.n_rec; r++) m->bias[r] = (float)b[r];
    }
    rc = 0;
done:
    gguf_free(g);
    free(buf);
    return rc;
}

/* ---- optimizer sidecar ---- */

int tr_save_optim(const tr_optim *o, const tr_model *m, const char *path, char *err, size_t errcap)
{
    gguf_writer *w = gguf_writer_new();
    if (!w) return fail(err, errcap, "out of memory", NULL);
    gguf_writer_add_str(w, "general.architecture", "mor-train-state");
    gguf_writer_add_u32(w, "train.step", (uint32_t)o->step);
    gguf_writer_add_u32(w, "train.n_params", (uint32_t)m->n_params);
    uint64_t dims[1] = { (uint64_t)o->n };
    gguf_writer_add_tensor(w, "adam.m", CV_F32, 1, dims, o->m, o->n * sizeof(float));
    gguf_writer_add_tensor(w, "adam.v", CV_F32, 1, dims, o->v, o->n * sizeof(float));
    char tmp[4096], werr[256] = "";
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int rc = -1;
    if (!f) { gguf_writer_free(w); return fail(err, errcap, "cannot create", tmp); }
    int wr = gguf_writer_write(w, f, werr, sizeof werr);
    if (fclose(f) != 0) wr = -1;
    if (wr == 0 && rename(tmp, path) == 0) rc = 0;
    else { remove(tmp); fail(err, errcap, "cannot write", path); }
    gguf_writer_free(w);
    return rc;
}

int tr_load_optim(tr_optim *o, const tr_model *m, const char *path, char *err, size_t errcap)
{
    size_t size;
    void *buf = read_all(path, &size);
    if (!buf) return fail(err, errcap, "cannot read", path);
    gguf_file *g = NULL;
    int rc = -1;
    uint32_t step, np;
    if (gguf_parse(buf, size, &g) || gguf_get_u32(g, "train.step", &step) || gguf_get_u32(g, "train.n_params", &np)) {
        fail(err, errcap, "not an optimizer state file", path);
        goto done;
    }
    const gguf_tensor *tm = gguf_find_tensor(g, "adam.m"), *tv = gguf_find_tensor(g, "adam.v");
    if (np != m->n_params || np != o->n || !tm || !tv || tm->type != GGML_F32 || tv->type != GGML_F32 ||
        tm->ne[0] != (int64_t)np || tv->ne[0] != (int64_t)np) {
        fail(err, errcap, "optimizer state does not match the model", path);
        goto done;
    }
    memcpy(o->m, tm->data, np * sizeof(float));
    memcpy(o->v, tv->data, np * sizeof(float));
    o->step = step;
    rc = 0;
done:
    gguf_free(g);
    free(buf);
    return rc;
}
