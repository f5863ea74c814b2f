/* gguf_build.h - write GGUF v3 files of any tensor type (F32, F16, BF16,
 * Q8_0, Q4_0), for mor-quantize, mor-bench and the tests. Header-only
 * (static functions): the library itself never writes files.
 *
 * Keys are serialized as they are added (or copied verbatim from another
 * file); tensors are borrowed (or owned, then freed by gb_free) and written
 * in the order added, each at an offset aligned to 32. Errors are sticky:
 * b->err is set by the first failure and gb_write_file reports it. */
#ifndef MOR_GGUF_BUILD_H
#define MOR_GGUF_BUILD_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define GB_ALIGN 32

typedef struct {
    char        name[128];
    uint32_t    type;
    int         n_dims;
    int64_t     ne[2];
    const void *data;
    size_t      nbytes;
    int         owned;
} gb_tensor;

typedef struct {
    unsigned char *kv;          /* serialized key-value pairs */
    size_t         kv_len, kv_cap;
    uint64_t       n_kv;
    gb_tensor     *t;
    size_t         n_t, cap_t;
    uint32_t       align;       /* tensor data alignment; 0: 32 */
    int            err;
} gguf_build;

static inline void gb_init(gguf_build *b) { memset(b, 0, sizeof *b); }

static inline void gb_free(gguf_build *b)
{
    for (size_t i = 0; i < b->n_t; i++)
        if (b->t[i].owned) free((void *)b->t[i].data);
    free(b->t);
    free(b->kv);
    memset(b, 0, sizeof *b);
}

static inline void gb_put(gguf_build *b, const void *p, size_t n)
{
    if (b->err) return;
    if (b->kv_len + n > b->kv_cap) {
        size_t cap = b->kv_cap ? b->kv_cap : 4096;
        while (cap < b->kv_len + n) cap *= 2;
        unsigned char *nk = realloc(b->kv, cap);
        if (!nk) { b->err = 1; return; }
        b->kv = nk; b->kv_cap = cap;
    }
    memcpy(b->kv + b->kv_len, p, n);
    b->kv_len += n;
}

static inline void gb_put_u32(gguf_build *b, uint32_t v) { gb_put(b, &v, 4); }
static inline void gb_put_u64(gguf_build *b, uint64_t v) { gb_put(b, &v, 8); }
static inline void gb_put_str(gguf_build *b, const char *s) { gb_put_u64(b, strlen(s)); gb_put(b, s, strlen(s)); }
static inline void gb_key(gguf_build *b, const char *k, uint32_t type) { gb_put_str(b, k); gb_put_u32(b, type); b->n_kv++; }

static inline void gb_u32(gguf_build *b, const char *k, uint32_t v) { gb_key(b, k, GGUF_U32); gb_put_u32(b, v); }
static inline void gb_f32(gguf_build *b, const char *k, float v) { gb_key(b, k, GGUF_F32); gb_put(b, &v, 4); }
static inline void gb_bool(gguf_build *b, const char *k, int v) { uint8_t x = (uint8_t)!!v; gb_key(b, k, GGUF_BOOL); gb_put(b, &x, 1); }
static inline void gb_str(gguf_build *b, const char *k, const char *v) { gb_key(b, k, GGUF_STR); gb_put_str(b, v); }

static inline void gb_arr(gguf_build *b, const char *k, uint32_t et, const void *v, size_t n, size_t es)
{
    gb_key(b, k, GGUF_ARR);
    gb_put_u32(b, et);
    gb_put_u64(b, n);
    gb_put(b, v, n * es);
}
static inline void gb_arr_i32(gguf_build *b, const char *k, const int32_t *v, size_t n) { gb_arr(b, k, GGUF_I32, v, n, 4); }
static inline void gb_arr_f32(gguf_build *b, const char *k, const float *v, size_t n) { gb_arr(b, k, GGUF_F32, v, n, 4); }
static inline void gb_arr_f64(gguf_build *b, const char *k, const double *v, size_t n) { gb_arr(b, k, GGUF_F64, v, n, 8); }

/* n serialized key-value pairs, copied as they are (e.g. from a parsed file) */
static inline void gb_raw_kv(gguf_build *b, const void *bytes, size_t len, uint64_t n)
{
    gb_put(b, bytes, len);
    b->n_kv += n;
}

/* A matrix ne1 x ne0 (ne1 = 0: a vector of ne0) of `type`, nbytes of data. */
static inline void gb_tensor_add(gguf_build *b, const char *name, uint32_t type, int64_t ne0, int64_t ne1,
                          const void *data, size_t nbytes, int owned)
{
    if (b->err) { if (owned) free((void *)data); return; }
    if (tensor_row_bytes(type, ne0) * (size_t)(ne1 ? ne1 : 1) != nbytes || strlen(name) >= sizeof b->t[0].name) {
        b->err = 2;
        if (owned) free((void *)data);
        return;
    }
    if (b->n_t == b->cap_t) {
        size_t cap = b->cap_t ? 2 * b->cap_t : 64;
        gb_tensor *nt = realloc(b->t, cap * sizeof *nt);
        if (!nt) { b->err = 1; if (owned) free((void *)data); return; }
        b->t = nt; b->cap_t = cap;
    }
    gb_tensor *t = &b->t[b->n_t++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type; t->n_dims = ne1 ? 2 : 1; t->ne[0] = ne0; t->ne[1] = ne1;
    t->data = data; t->nbytes = nbytes; t->owned = owned;
}

/* Convert a float matrix (rows x cols, or a vector with rows = 0) to `type`
 * and add it (owned). */
static inline void gb_tensor_from_f32(gguf_build *b, const char *name, uint32_t type, const float *x, int64_t cols, int64_t rows)
{
    size_t rb = tensor_row_bytes(type, cols), nr = (size_t)(rows ? rows : 1);
    if (!rb) { b->err = 2; return; }
    unsigned char *d = malloc(rb * nr);
    if (!d) { b->err = 1; return; }
    for (size_t r = 0; r < nr; r++) quant_row(type, x + r * (size_t)cols, d + r * rb, cols);
    gb_tensor_add(b, name, type, cols, rows, d, rb * nr, 1);
}

static inline int gb_write_file(gguf_build *b, const char *path)
{
    if (b->err) return -1;
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = 1;
    uint32_t magic = 0x46554747u, version = 3;
    uint64_t nt = b->n_t, nkv = b->n_kv;
    ok &= fwrite(&magic, 4, 1, f) == 1 && fwrite(&version, 4, 1, f) == 1;
    ok &= fwrite(&nt, 8, 1, f) == 1 && fwrite(&nkv, 8, 1, f) == 1;
    ok &= b->kv_len == 0 || fwrite(b->kv, 1, b->kv_len, f) == b->kv_len;
    const uint64_t al = b->align ? b->align : GB_ALIGN;
    uint64_t off = 0;
    for (size_t i = 0; i < b->n_t; i++) {
        const gb_tensor *t = &b->t[i];
        uint64_t len = strlen(t->name), ne[2] = { (uint64_t)t->ne[0], (uint64_t)t->ne[1] };
        uint32_t nd = (uint32_t)t->n_dims;
        ok &= fwrite(&len, 8, 1, f) == 1 && fwrite(t->name, 1, len, f) == len;
        ok &= fwrite(&nd, 4, 1, f) == 1 && fwrite(ne, 8, nd, f) == nd;
        ok &= fwrite(&t->type, 4, 1, f) == 1 && fwrite(&off, 8, 1, f) == 1;
        off += (t->nbytes + al - 1) / al * al;
    }
    static const unsigned char zeros[4096];
    long pos = ftell(f);
    if (pos < 0 || al > sizeof zeros) ok = 0;
    else if (pos % (long)al) ok &= fwrite(zeros, 1, al - (size_t)(pos % (long)al), f) == al - (size_t)(pos % (long)al);
    for (size_t i = 0; ok && i < b->n_t; i++) {
        const gb_tensor *t = &b->t[i];
        size_t pad = (size_t)((al - t->nbytes % al) % al);
        ok &= fwrite(t->data, 1, t->nbytes, f) == t->nbytes && (pad == 0 || fwrite(zeros, 1, pad, f) == pad);
    }
    ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

/* ---- re-typing a model's matrices (mor-quantize) ---- */

/* What gb_retype turns a tensor of g into: norms, routers, LoRA factors and
 * every other 1-D or F32-only tensor stay as they are; token_embd (and an
 * untied output) become embd_type; every other matrix becomes type. A
 * quantized type needs whole blocks along the row: other rows fall back to
 * F16 (the count is returned through *n_fallback). */
static inline uint32_t gb_retype_target(const gguf_tensor *t, uint32_t type, uint32_t embd_type)
{
    static const char *const keep[] = { "rtr", "lora.", NULL };
    for (int i = 0; keep[i]; i++)
        if (t->name.n >= strlen(keep[i]) && !memcmp(t->name.p, keep[i], strlen(keep[i]))) return t->type;
    if (t->n_dims != 2) return t->type;
    if (gguf_str_eq(t->name, "token_embd.weight") || gguf_str_eq(t->name, "output.weight")) return embd_type;
    return type;
}

/* Copy g's keys verbatim and add every tensor of g converted by the policy
 * above (through float: exact from F32/F16/BF16). Tensors are owned. */
static inline void gb_retype(gguf_build *b, const gguf_file *g, uint32_t type, uint32_t embd_type, int *n_fallback)
{
    *n_fallback = 0;
    if (!g->n_tensors) { b->err = 2; return; }
    /* the keys: from just after the header (magic, version, two counts) to the first tensor info */
    const unsigned char *kv0 = g->buf + 24, *kv1 = (const unsigned char *)g->tensors[0].name.p - 8;
    for (uint64_t i = 1; i < g->n_tensors; i++)
        if ((const unsigned char *)g->tensors[i].name.p - 8 < kv1) kv1 = (const unsigned char *)g->tensors[i].name.p - 8;
    gb_raw_kv(b, kv0, (size_t)(kv1 - kv0), g->n_kv);
    b->align = g->alignment;
    for (uint64_t i = 0; i < g->n_tensors && !b->err; i++) {
        const gguf_tensor *t = &g->tensors[i];
        uint32_t to = gb_retype_target(t, type, embd_type);
        if (!tensor_row_bytes(to, t->ne[0])) { to = GGML_F16; (*n_fallback)++; }
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.p);
        const int64_t cols = t->ne[0], rows = t->n_dims == 2 ? t->ne[1] : 0;
        if (t->n_dims > 2) { b->err = 2; return; }   /* no such tensor in a mor model */
        if (to == t->type) {   /* as it is */
            gb_tensor_add(b, name, t->type, cols, rows, t->data, (size_t)t->nbytes, 0);
            continue;
        }
        const size_t rb_in = tensor_row_bytes(t->type, cols), rb = tensor_row_bytes(to, cols), nr = (size_t)(rows ? rows : 1);
        float *row = malloc(sizeof(float) * (size_t)cols);
        unsigned char *out = malloc(rb * nr);
        if (!row || !out) { free(row); free(out); b->err = 1; return; }
        for (size_t r = 0; r < nr; r++) {
            dequant_row(t->type, t->data + r * rb_in, row, cols);
            quant_row(to, row, out + r * rb, cols);
        }
        free(row);
        gb_tensor_add(b, name, to, cols, rows, out, rb * nr, 1);
    }
}
#endif
