/* io.c - checkpoints: the model as the `mor` GGUF file the library loads
 * (docs/FORMAT.md), written with the converter's GGUF writer, and read back
 * for resuming; the optimizer state in a sidecar GGUF (PATH.opt).
 *
 * Training-only settings the format has no key for (loss coefficients) are
 * kept under `train.*`, a namespace the loader ignores. A LoRA model is
 * written unfolded (format version 2: the shared weights once, the factors
 * of every unrolled layer as lora.<l>.<proj>.a|b), so that the file is as
 * small as the model, resumes, and loads in the library with the same
 * deltas; the trainer's tensor names are the file's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train.h"
#include "internal.h"
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
        cv_convert(h, GGML_F16, f, GGML_F32, n);
        gguf_writer_add_tensor(w, name, GGML_F16, 2, dims, h, n * 2);
    } else {
        gguf_writer_add_tensor(w, name, GGML_F32, vec ? 1 : 2, dims, f, n * sizeof(float));
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
    const int L = m->L, lora = m->lora_rmax > 0;
    const char *sharing = c->n_rec == 1 ? "none" : c->prelude ? "middle_cycle" : "cycle";
    gguf_writer_add_str(w, "general.architecture", "mor");
    if (o->name) gguf_writer_add_str(w, "general.name", o->name);
    gguf_writer_add_u32(w, "mor.format_version", lora ? 2 : 1);   /* 2: LoRA tensors (FORMAT.md) */
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
    if (lora) {
        /* one mor.lora.scale when every relaxed projection has the same, else one per projection */
        int first = -1, same = 1, has[TR_NROLE] = { 0 };
        for (int r = 0; r < c->n_rec; r++)
            for (int j = 0; j < c->K; j++)
                for (int role = 0; role < TR_NROLE; role++) has[role] |= m->lora.rank[r][j][role] > 0;
        for (int role = 0; role < TR_NROLE; role++) {
            if (!has[role]) continue;
            if (first < 0) first = role;
            else same &= m->lora.scale[role] == m->lora.scale[first];
        }
        if (same) gguf_writer_add_f32(w, "mor.lora.scale", m->lora.scale[first]);
        else
            for (int role = 0; role < TR_NROLE; role++) {
                if (!has[role]) continue;
                char key[64];
                snprintf(key, sizeof key, "mor.lora.scale.%s", tr_role_names[role]);
                gguf_writer_add_f32(w, key, m->lora.scale[role]);
            }
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
            snprintf(name, sizeof name, "blk.%d.%s.weight", b, tr_role_names[role]);
            if (put(w, &k, name, m->p + t->off, t->rows, t->cols, norm, norm ? 0 : o->f16)) goto oom;
        }
    /* LoRA factors: F32 whatever the weights' type (the format's rule) */
    for (int i = 0; i < m->n_t; i++)
        if (m->t[i].rec >= 0 && put(w, &k, m->t[i].name, m->p + m->t[i].off, m->t[i].rows, m->t[i].cols, 0, 0))
            goto oom;
    if (c->router == TR_ROUTER_EXPERT)
        for (int r = 0; r < c->n_rec; r++) {
            snprintf(name, sizeof name, "rtr.%d.weight", r);
            if (put(w, &k, name, m->p + m->rtr[r], 1, c->d, 0, 0)) goto oom;
        }
    if (c->router == TR_ROUTER_TOKEN) {
        if (put(w, &k, "rtr.weight", m->p + m->rtr_tc, c->n_rec, c->d, 0, 0)) goto oom;
        int any_bias = c->loss_free;   /* a bias read from a file is part of the model too */
        for (int r = 0; r < c->n_rec; r++) any_bias |= m->bias[r] != 0;
        if (any_bias) {
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

static int load_tensor(const gguf_file *g, const char *name, real *dst, int64_t rows, int64_t cols, int f32_only,
                       char *err, size_t errcap)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return fail(err, errcap, "missing tensor", name);
    if (t->ne[0] != cols || (t->n_dims == 2 && t->ne[1] != rows) || (t->n_dims == 1 && rows != 1) || t->n_dims > 2) {
        char msg[160];
        snprintf(msg, sizeof msg, "tensor %s has shape [%lld, %lld]; the model needs [%lld, %lld]", name,
                 (long long)t->ne[0], (long long)(t->n_dims > 1 ? t->ne[1] : 1), (long long)cols, (long long)rows);
        return fail(err, errcap, msg, NULL);
    }
    if (t->type != GGML_F32 && (f32_only || t->type != GGML_F16)) {
        char msg[160];
        snprintf(msg, sizeof msg, "tensor %s has type %s; mor-train reads %s", name, tensor_type_name(t->type),
                 f32_only ? "F32 LoRA factors" : "F32 or F16 weights (train from the unquantized file)");
        return fail(err, errcap, msg, NULL);
    }
    size_t n = (size_t)(rows * cols);
    for (size_t i = 0; i < n; i++) {
        if (t->type == GGML_F32) { float f; memcpy(&f, t->data + 4 * i, 4); dst[i] = f; }
        else { uint16_t h; memcpy(&h, t->data + 2 * i, 2); dst[i] = f16_to_f32(h); }
    }
    return 0;
}

/* "lora.<l>.<role>.<a|b>": l, role and part (0 a, 1 b); 0 if it does not parse. */
static int parse_lora_name(gguf_str nm, int32_t *l, int *role, int *part)
{
    char buf[96];
    if (nm.n >= sizeof buf) return 0;
    memcpy(buf, nm.p, nm.n);
    buf[nm.n] = 0;
    int n = 0;
    unsigned v;
    char rest[64];
    if (sscanf(buf, "lora.%u.%63[a-z_].%n", &v, rest, &n) != 2 || n == 0 || buf[n + 1] != 0 ||
        (buf[n] != 'a' && buf[n] != 'b') || v > 255 || (buf[5] == '0' && buf[6] != '.'))
        return 0;
    for (int r = 0; r < TR_NROLE; r++)
        if (r != TR_NORM1 && r != TR_NORM2 && !strcmp(rest, tr_role_names[r])) {
            *l = (int32_t)v; *role = r; *part = buf[n] == 'b';
            return 1;
        }
    return 0;
}

/* The LoRA deltas of g in the trainer's layout: ranks from the factors'
 * shapes, scales from mor.lora.scale[.<proj>]. Deltas only on the looped
 * layers (the unique prelude and coda layers have none in the trainer). */
static int read_lora_layout(const gguf_file *g, const tr_config *c, tr_lora_layout *lo, int *any, char *err,
                            size_t errcap)
{
    const int64_t d = c->d, qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_kv * c->head_dim, F = c->ff;
    const int64_t in[TR_NROLE] = { d, d, d, d, qd, d, d, d, F }, out[TR_NROLE] = { d, qd, kvd, kvd, d, d, F, F, d };
    int32_t rank_b[TR_MAX_REC][16][TR_NROLE];
    char msg[200];
    memset(lo, 0, sizeof *lo);
    memset(rank_b, 0, sizeof rank_b);
    *any = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        int32_t l;
        int role, part;
        if (t->name.n < 5 || memcmp(t->name.p, "lora.", 5) != 0) continue;
        const int nn = (int)(t->name.n > 80 ? 80 : t->name.n);
        if (!parse_lora_name(t->name, &l, &role, &part)) {
            snprintf(msg, sizeof msg, "tensor %.*s is not lora.<layer>.<projection>.<a|b>", nn, t->name.p);
            return fail(err, errcap, msg, NULL);
        }
        const int32_t l0 = l - c->prelude;
        if (l0 < 0 || l0 >= c->n_rec * c->K) {
            snprintf(msg, sizeof msg, "tensor %.*s: a delta on unique layer %d (prelude or coda) is not trainable",
                     nn, t->name.p, l);
            return fail(err, errcap, msg, NULL);
        }
        const int64_t rmax = in[role] < out[role] ? in[role] : out[role];
        const int64_t r = part ? t->ne[0] : t->ne[1];
        if (t->n_dims != 2 || (part ? t->ne[1] != out[role] : t->ne[0] != in[role]) || r < 1 || r > rmax) {
            snprintf(msg, sizeof msg, "tensor %.*s has shape [%lld, %lld]; expected [%s] with 1 <= r <= %lld", nn,
                     t->name.p, (long long)t->ne[0], (long long)t->ne[1], part ? "r, out" : "in, r", (long long)rmax);
            return fail(err, errcap, msg, NULL);
        }
        int32_t *slot = part ? &rank_b[l0 / c->K][l0 % c->K][role] : &lo->rank[l0 / c->K][l0 % c->K][role];
        *slot = (int32_t)r;
        *any = 1;
    }
    for (int r = 0; r < c->n_rec; r++)
        for (int j = 0; j < c->K; j++)
            for (int role = 0; role < TR_NROLE; role++)
                if (lo->rank[r][j][role] != rank_b[r][j][role]) {
                    const int l = c->prelude + r * c->K + j;
                    if (!lo->rank[r][j][role] || !rank_b[r][j][role])
                        snprintf(msg, sizeof msg, "lora.%d.%s has %s but not %s", l, tr_role_names[role],
                                 lo->rank[r][j][role] ? "a" : "b", lo->rank[r][j][role] ? "b" : "a");
                    else
                        snprintf(msg, sizeof msg, "lora.%d.%s: a has rank %d but b has %d", l, tr_role_names[role],
                                 lo->rank[r][j][role], rank_b[r][j][role]);
                    return fail(err, errcap, msg, NULL);
                }
    if (!*any) return 0;
    if (c->n_rec < 2) return fail(err, errcap, "LoRA deltas need recursions", NULL);
    float all = 1.0f;
    if (gguf_find_kv(g, "mor.lora.scale") && gguf_get_f32(g, "mor.lora.scale", &all))
        return fail(err, errcap, "mor.lora.scale is not a float", NULL);
    for (int role = 0; role < TR_NROLE; role++) {
        char key[64];
        snprintf(key, sizeof key, "mor.lora.scale.%s", tr_role_names[role]);
        lo->scale[role] = all;
        if (gguf_find_kv(g, key) && gguf_get_f32(g, key, &lo->scale[role])) return fail(err, errcap, "not a float:", key);
        if (!isfinite(lo->scale[role])) return fail(err, errcap, "LoRA scale is not finite:", key);
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
    unsigned char *used = NULL;
    tr_lora_layout *lo = NULL;
    memset(m, 0, sizeof *m);
    if (gguf_parse(buf, size, &g)) { free(buf); return fail(err, errcap, "not a GGUF file", path); }
    tr_config c;
    tr_config_defaults(&c);
    gguf_str s;
    int32_t L, ver = 1;
    char msg[256];
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
    get_u32(g, "mor.format_version", &ver);
    if (ver > 2) {   /* 3: the other model families (FORMAT.md), which mor-train does not train */
        fail(err, errcap, gguf_find_kv(g, "mor.family") ? "mor-train trains Llama-family models; not the model family of"
                                                          : "format version newer than 2 in", path);
        goto done;
    }
    c.router = TR_ROUTER_NONE;
    if (!gguf_get_str(g, "mor.router.type", &s)) {
        if (gguf_str_eq(s, "expert")) c.router = TR_ROUTER_EXPERT;
        else if (gguf_str_eq(s, "token")) c.router = TR_ROUTER_TOKEN;
        else if (!gguf_str_eq(s, "none")) { fail(err, errcap, "unknown router type in", path); goto done; }
    }
    if (c.router != TR_ROUTER_NONE) {
        if (!gguf_get_str(g, "mor.router.arch", &s) && !gguf_str_eq(s, "linear")) {
            fail(err, errcap, "mor-train trains linear routers only; not", path);
            goto done;
        }
        gguf_get_f32(g, "mor.router.alpha", &c.alpha);
        if (!gguf_get_str(g, "mor.router.func", &s)) c.func = gguf_str_eq(s, "softmax") ? TR_FUNC_SOFTMAX : TR_FUNC_SIGMOID;
        if (c.router == TR_ROUTER_EXPERT) gguf_get_arr_f64(g, "mor.router.capacity", c.cap, (uint64_t)c.n_rec);
    }
    int kv_shared = 0;
    if (!gguf_get_bool(g, "mor.kv.shared", &kv_shared) && kv_shared) {
        fail(err, errcap, "mor-train does not train shared-KV models:", path);
        goto done;
    }
    gguf_get_f32(g, "train.aux_coef", &c.aux_coef);
    gguf_get_f32(g, "train.bal_coef", &c.bal_coef);
    gguf_get_f32(g, "train.z_coef", &c.z_coef);
    get_u32(g, "train.loss_free", &c.loss_free);
    gguf_get_f32(g, "train.bias_rate", &c.bias_rate);
    if (tr_config_check(&c) || c.prelude + c.n_rec * c.K + c.coda != L) { fail(err, errcap, "unusable model shape in", path); goto done; }
    if (!(lo = malloc(sizeof *lo))) { fail(err, errcap, "out of memory loading", path); goto done; }
    int any_lora;
    if (read_lora_layout(g, &c, lo, &any_lora, err, errcap)) goto done;
    if (tr_model_init_lora(m, &c, any_lora ? lo : NULL, 0)) { fail(err, errcap, "out of memory loading", path); goto done; }
    /* the trainer's layer plan must be the file's: other sharings (sequence,
     * --keep-norms, an older mor-train's folded LoRA copies) are refused */
    int32_t map[256];
    if (gguf_get_arr_i32(g, "mor.layer_map", map, (uint64_t)L) || memcmp(map, m->map, sizeof *map * (size_t)L)) {
        fail(err, errcap, "mor.layer_map is not the cycle / middle-cycle plan mor-train trains, in", path);
        goto fail_model;
    }
    for (int role = 0; role < TR_NROLE; role++) {
        char key[64];
        snprintf(key, sizeof key, "mor.layer_map.%s", tr_role_names[role]);
        if (!gguf_find_kv(g, key)) continue;
        if (gguf_get_arr_i32(g, key, map, (uint64_t)L) || memcmp(map, m->map, sizeof *map * (size_t)L)) {
            snprintf(msg, sizeof msg, "%s gives %s its own layer map (folded LoRA or --keep-norms); mor-train "
                     "trains one map for every weight", path, tr_role_names[role]);
            fail(err, errcap, msg, NULL);
            goto fail_model;
        }
    }
    if (!(used = calloc(g->n_tensors ? g->n_tensors : 1, 1))) { fail(err, errcap, "out of memory loading", path); goto fail_model; }
    for (int i = 0; i < m->n_t; i++) {
        const tr_tensor *t = &m->t[i];
        if (load_tensor(g, t->name, m->p + t->off, t->rows, t->cols, t->rec >= 0, err, errcap)) goto fail_model;
        used[gguf_find_tensor(g, t->name) - g->tensors] = 1;
    }
    if (c.router == TR_ROUTER_TOKEN && gguf_find_tensor(g, "rtr.bias")) {
        real b[TR_MAX_REC];
        if (load_tensor(g, "rtr.bias", b, 1, c.n_rec, 1, err, errcap)) goto fail_model;
        for (int r = 0; r < c.n_rec; r++) m->bias[r] = (float)b[r];
        used[gguf_find_tensor(g, "rtr.bias") - g->tensors] = 1;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!used[i]) {
            /* e.g. an untied output.weight or an MLP router: dropping it would train another model */
            snprintf(msg, sizeof msg, "tensor %.*s of %s is not one mor-train trains",
                     (int)(g->tensors[i].name.n > 80 ? 80 : g->tensors[i].name.n), g->tensors[i].name.p, path);
            fail(err, errcap, msg, NULL);
            goto fail_model;
        }
    rc = 0;
    goto done;
fail_model:
    tr_model_free(m);
done:
    free(used);
    free(lo);
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
    gguf_writer_add_tensor(w, "adam.m", GGML_F32, 1, dims, o->m, o->n * sizeof(float));
    gguf_writer_add_tensor(w, "adam.v", GGML_F32, 1, dims, o->v, o->n * sizeof(float));
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
