/* gguf_write.c - the GGUF v3 writer. The whole header (keys and tensor infos)
 * is serialized into memory first, so its size, and hence every tensor
 * offset, is known before anything is written. */
#include "gguf_write.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* GGUF value types */
enum { GV_U32 = 4, GV_I32 = 5, GV_F32 = 6, GV_BOOL = 7, GV_STR = 8, GV_ARR = 9, GV_F64 = 12 };

typedef struct {
    char *name;
    int type, n_dims;
    uint64_t dims[4];
    const void *data;
    uint64_t nbytes, offset;
    int owned;                /* the writer frees data */
} gw_tensor;

struct gguf_writer {
    uint8_t *kv;              /* serialized key-value pairs */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    char **keys;              /* the keys added one by one, for duplicate detection */
    size_t n_keys;
    gw_tensor *t;
    size_t n_t, cap_t;
    uint32_t align;           /* of the tensor data: GGUF_WRITE_ALIGNMENT unless copied from a file */
    char err[256];            /* first error, sticky */
    cv_progress_fn progress;
    void *progress_ud;
};

void gguf_writer_set_progress(gguf_writer *w, cv_progress_fn fn, void *user_data)
{
    if (w) { w->progress = fn; w->progress_ud = user_data; }
}

gguf_writer *gguf_writer_new(void)
{
    gguf_writer *w = calloc(1, sizeof(gguf_writer));
    if (w) w->align = GGUF_WRITE_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_keys; i++) free(w->keys[i]);
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        if (w->t[i].owned) free((void *)w->t[i].data);
    }
    free(w->keys);
    free(w->kv);
    free(w->t);
    free(w);
}

static int failed(const gguf_writer *w) { return w->err[0] != 0; }

int gguf_writer_failed(const gguf_writer *w) { return !w || failed(w); }

uint64_t gguf_writer_data_bytes(const gguf_writer *w)
{
    uint64_t n = 0;
    for (size_t i = 0; w && i < w->n_t; i++) n += w->t[i].nbytes;
    return n;
}

void gguf_writer_fail(gguf_writer *w, const char *what)
{
    if (w && !failed(w)) cv_fail(w->err, sizeof w->err, "%s", what);
}

static void put(gguf_writer *w, const void *p, size_t n)
{
    if (failed(w)) return;
    if (n > w->kv_cap - w->kv_len) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        uint8_t *b;
        while (cap - w->kv_len < n) {
            if (cap > SIZE_MAX / 2) { cv_fail(w->err, sizeof w->err, "GGUF header too large"); return; }
            cap *= 2;
        }
        b = realloc(w->kv, cap);
        if (!b) { cv_fail(w->err, sizeof w->err, "out of memory"); return; }
        w->kv = b;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}

/* All multi-byte values are little-endian, whatever the host. */
static void put_u32(gguf_writer *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(w, b, 4);
}

static void put_u64(gguf_writer *w, uint64_t v)
{
    put_u32(w, (uint32_t)v);
    put_u32(w, (uint32_t)(v >> 32));
}

static void put_str(gguf_writer *w, const char *s)
{
    size_t n = strlen(s);
    put_u64(w, n);
    put(w, s, n);
}

static void put_f32(gguf_writer *w, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(w, u);
}

static void put_f64(gguf_writer *w, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    put_u64(w, u);
}

/* Start a key: record it (rejecting duplicates) and write its name and type. */
static int key(gguf_writer *w, const char *k, uint32_t type)
{
    char **keys;
    if (failed(w)) return 0;
    for (size_t i = 0; i < w->n_keys; i++)
        if (strcmp(w->keys[i], k) == 0) {
            cv_fail(w->err, sizeof w->err, "GGUF key '%s' added twice", k);
            return 0;
        }
    keys = realloc(w->keys, (w->n_keys + 1) * sizeof *keys);
    if (!keys) { cv_fail(w->err, sizeof w->err, "out of memory"); return 0; }
    w->keys = keys;
    if (!(w->keys[w->n_keys] = cv_strdup(k))) { cv_fail(w->err, sizeof w->err, "out of memory"); return 0; }
    w->n_keys++;
    w->n_kv++;
    put_str(w, k);
    put_u32(w, type);
    return !failed(w);
}

void gguf_writer_add_u32(gguf_writer *w, const char *k, uint32_t v)
{
    if (key(w, k, GV_U32)) put_u32(w, v);
}

void gguf_writer_add_f32(gguf_writer *w, const char *k, float v)
{
    if (key(w, k, GV_F32)) put_f32(w, v);
}

void gguf_writer_add_bool(gguf_writer *w, const char *k, int v)
{
    uint8_t b = v ? 1 : 0;
    if (key(w, k, GV_BOOL)) put(w, &b, 1);
}

void gguf_writer_add_str(gguf_writer *w, const char *k, const char *v)
{
    if (key(w, k, GV_STR)) put_str(w, v);
}

static int arr(gguf_writer *w, const char *k, uint32_t elem, size_t n)
{
    if (!key(w, k, GV_ARR)) return 0;
    put_u32(w, elem);
    put_u64(w, n);
    return !failed(w);
}

void gguf_writer_add_arr_i32(gguf_writer *w, const char *k, const int32_t *v, size_t n)
{
    if (arr(w, k, GV_I32, n))
        for (size_t i = 0; i < n; i++) put_u32(w, (uint32_t)v[i]);
}

void gguf_writer_add_arr_f32(gguf_writer *w, const char *k, const float *v, size_t n)
{
    if (arr(w, k, GV_F32, n))
        for (size_t i = 0; i < n; i++) put_f32(w, v[i]);
}

void gguf_writer_add_arr_f64(gguf_writer *w, const char *k, const double *v, size_t n)
{
    if (arr(w, k, GV_F64, n))
        for (size_t i = 0; i < n; i++) put_f64(w, v[i]);
}

void gguf_writer_add_arr_str(gguf_writer *w, const char *k, const char *const *v, size_t n)
{
    if (arr(w, k, GV_STR, n))
        for (size_t i = 0; i < n; i++) put_str(w, v[i]);
}

static void add_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const uint64_t *dims,
                       const void *data, uint64_t nbytes, int owned)
{
    gw_tensor *t;
    uint64_t want = 0;
    if (failed(w)) goto drop;
    if (n_dims < 1 || n_dims > 4 || dims[0] == 0 || dims[0] > (uint64_t)INT64_MAX ||
        !(want = tensor_row_bytes(type, (int64_t)dims[0]))) {
        cv_fail(w->err, sizeof w->err, "tensor '%s': bad type, rank or row length", name);
        goto drop;
    }
    for (int i = 1; i < n_dims; i++)
        if (dims[i] == 0 || dims[i] > (uint64_t)INT64_MAX || !cv_mul_u64(want, dims[i], &want)) {
            cv_fail(w->err, sizeof w->err, "tensor '%s': bad dimensions", name);
            goto drop;
        }
    if (want != nbytes) {
        cv_fail(w->err, sizeof w->err, "tensor '%s': %llu bytes for its dimensions, %llu given", name,
                (unsigned long long)want, (unsigned long long)nbytes);
        goto drop;
    }
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            cv_fail(w->err, sizeof w->err, "tensor '%s' added twice", name);
            goto drop;
        }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        gw_tensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) { cv_fail(w->err, sizeof w->err, "out of memory"); goto drop; }
        w->t = nt;
        w->cap_t = cap;
    }
    t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = cv_strdup(name))) { cv_fail(w->err, sizeof w->err, "out of memory"); goto drop; }
    t->type = (int)type;
    t->n_dims = n_dims;
    memcpy(t->dims, dims, (size_t)n_dims * sizeof *dims);
    t->data = data;
    t->nbytes = nbytes;
    t->owned = owned;
    w->n_t++;
    return;
drop:
    if (owned) free((void *)data);
}

void gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, int n_dims, const uint64_t *dims,
                            const void *data, uint64_t nbytes)
{
    add_tensor(w, name, (uint32_t)type, n_dims, dims, data, nbytes, 0);
}

void gguf_writer_add_matrix(gguf_writer *w, const char *name, uint32_t type, int64_t cols, int64_t rows,
                            const void *data, uint64_t nbytes, int owned)
{
    const uint64_t dims[2] = { (uint64_t)(cols > 0 ? cols : 0), (uint64_t)(rows > 0 ? rows : 0) };
    add_tensor(w, name, type, rows ? 2 : 1, dims, data, nbytes, owned);
}

void gguf_writer_add_matrix_f32(gguf_writer *w, const char *name, uint32_t type, const float *x, int64_t cols,
                                int64_t rows)
{
    const uint64_t rb = tensor_row_bytes(type, cols), nr = (uint64_t)(rows ? rows : 1);
    unsigned char *d = rb && nr <= SIZE_MAX / rb ? malloc((size_t)(rb * nr)) : NULL;
    if (!d) {
        if (!failed(w)) cv_fail(w->err, sizeof w->err, rb ? "out of memory" : "tensor '%s': bad type or row length", name);
        return;
    }
    for (uint64_t r = 0; r < nr; r++) quant_row(type, x + r * (uint64_t)cols, d + r * rb, cols);
    gguf_writer_add_matrix(w, name, type, cols, rows, d, rb * nr, 1);
}

int gguf_retype_keeps(const char *name, uint32_t n_dims)
{
    return n_dims != 2 || !strncmp(name, "rtr", 3) || !strncmp(name, "lora.", 5) || !strncmp(name, "exit_gate.", 10);
}

/* llama-quantize's type for rows that are not whole blocks of `type`
 * (tensor_type_fallback): a 32-value type of about as many bits. */
static uint32_t row_fallback(uint32_t type)
{
    switch (type) {
    case GGML_Q2_K: case GGML_Q3_K: return GGML_Q4_0;
    case GGML_Q4_K: return GGML_Q5_0;
    case GGML_Q5_K: return GGML_Q5_1;
    case GGML_Q6_K: return GGML_Q8_0;
    default: return GGML_F16;
    }
}

uint32_t gguf_row_type(uint32_t type, int64_t cols)
{
    if (tensor_row_bytes(type, cols)) return type;
    type = row_fallback(type);
    return tensor_row_bytes(type, cols) ? type : GGML_F16;
}

void gguf_writer_add_retyped_fn(gguf_writer *w, const gguf_file *g, gguf_type_pick_fn pick, void *user,
                                int *n_fallback)
{
    *n_fallback = 0;
    if (failed(w)) return;
    if (!g->n_tensors) { cv_fail(w->err, sizeof w->err, "the file has no tensors"); return; }
    /* the keys: from just after the header (magic, version, two counts) to the first tensor info */
    const unsigned char *kv0 = g->buf + 24, *kv1 = (const unsigned char *)g->tensors[0].name.p - 8;
    for (uint64_t i = 1; i < g->n_tensors; i++)
        if ((const unsigned char *)g->tensors[i].name.p - 8 < kv1) kv1 = (const unsigned char *)g->tensors[i].name.p - 8;
    put(w, kv0, (size_t)(kv1 - kv0));   /* verbatim: not checked for duplicates */
    w->n_kv += g->n_kv;
    w->align = g->alignment;
    for (uint64_t i = 0; i < g->n_tensors && !failed(w); i++) {
        const gguf_tensor *t = &g->tensors[i];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.p);
        uint32_t to = pick(name, t->n_dims, t->ne, t->type, user);
        if (!tensor_row_bytes(to, t->ne[0])) { (*n_fallback)++; to = gguf_row_type(to, t->ne[0]); }
        const int64_t cols = t->ne[0], rows = t->n_dims == 2 ? t->ne[1] : 0;
        if (t->n_dims > 2) { cv_fail(w->err, sizeof w->err, "tensor '%s': more than 2 dimensions", name); return; }
        if (to == t->type) {   /* as it is */
            gguf_writer_add_matrix(w, name, t->type, cols, rows, t->data, t->nbytes, 0);
            continue;
        }
        const uint64_t rb_in = tensor_row_bytes(t->type, cols), rb = tensor_row_bytes(to, cols), nr = (uint64_t)(rows ? rows : 1);
        float *row = malloc(sizeof(float) * (size_t)cols);
        unsigned char *out = malloc((size_t)(rb * nr));
        if (!row || !out) { free(row); free(out); cv_fail(w->err, sizeof w->err, "out of memory"); return; }
        for (uint64_t r = 0; r < nr; r++) {
            dequant_row(t->type, t->data + r * rb_in, row, cols);
            quant_row(to, row, out + r * rb, cols);
        }
        free(row);
        gguf_writer_add_matrix(w, name, to, cols, rows, out, rb * nr, 1);
    }
}

/* gguf_writer_add_retyped's rule as a pick function: user holds the two types. */
static uint32_t pick_uniform(const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, void *user)
{
    (void)ne;
    const uint32_t *types = user;
    if (gguf_retype_keeps(name, n_dims)) return type;
    return !strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight") ? types[1] : types[0];
}

void gguf_writer_add_retyped(gguf_writer *w, const gguf_file *g, uint32_t type, uint32_t embd_type, int *n_fallback)
{
    uint32_t types[2] = { type, embd_type };
    gguf_writer_add_retyped_fn(w, g, pick_uniform, types, n_fallback);
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int gguf_writer_write(gguf_writer *w, FILE *f, char *err, size_t errcap)
{
    static const uint8_t zeros[4096];
    const uint64_t al = w->align;
    uint8_t *kv_part;
    size_t kv_len;
    uint64_t off = 0, hdr;
    if (failed(w)) return cv_fail(err, errcap, "%s", w->err);
    if (!al || al > sizeof zeros || (al & (al - 1))) return cv_fail(err, errcap, "alignment %llu", (unsigned long long)al);

    /* Tensor infos go after the keys, in the same buffer. */
    kv_len = w->kv_len;
    for (size_t i = 0; i < w->n_t; i++) {
        gw_tensor *t = &w->t[i];
        t->offset = off;
        put_str(w, t->name);
        put_u32(w, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(w, t->dims[d]);
        put_u32(w, (uint32_t)t->type);
        put_u64(w, t->offset);
        off = pad_to(off + t->nbytes, al);
    }
    if (failed(w)) {
        w->kv_len = kv_len;
        return cv_fail(err, errcap, "%s", w->err);
    }
    kv_part = w->kv;

    {
        uint8_t head[24];
        memcpy(head, "GGUF", 4);
        head[4] = 3; head[5] = head[6] = head[7] = 0;
        for (int i = 0; i < 8; i++) head[8 + i] = (uint8_t)((uint64_t)w->n_t >> (8 * i));
        for (int i = 0; i < 8; i++) head[16 + i] = (uint8_t)(w->n_kv >> (8 * i));
        if (fwrite(head, 1, 24, f) != 24) goto io;
    }
    if (w->kv_len && fwrite(kv_part, 1, w->kv_len, f) != w->kv_len) goto io;
    hdr = 24 + (uint64_t)w->kv_len;
    if (pad_to(hdr, al) != hdr &&
        fwrite(zeros, 1, (size_t)(pad_to(hdr, al) - hdr), f) != (size_t)(pad_to(hdr, al) - hdr))
        goto io;
    for (size_t i = 0; i < w->n_t; i++) {
        const gw_tensor *t = &w->t[i];
        uint64_t padded = pad_to(t->nbytes, al);
        const uint8_t *p = t->data;
        uint64_t left = t->nbytes;
        while (left) {   /* in chunks: fwrite takes a size_t */
            size_t chunk = left > (1u << 30) ? (size_t)1 << 30 : (size_t)left;
            if (fwrite(p, 1, chunk, f) != chunk) goto io;
            p += chunk;
            left -= chunk;
        }
        if (padded != t->nbytes && fwrite(zeros, 1, (size_t)(padded - t->nbytes), f) != (size_t)(padded - t->nbytes))
            goto io;
        if (w->progress) w->progress("writing tensors", (int64_t)i + 1, (int64_t)w->n_t, w->progress_ud);
    }
    w->kv_len = kv_len;   /* the writer may be written again */
    if (fflush(f) != 0 || ferror(f)) return cv_fail(err, errcap, "write error");
    return 0;
io:
    w->kv_len = kv_len;
    return cv_fail(err, errcap, "write error");
}

int gguf_writer_write_file(gguf_writer *w, const char *path, char *err, size_t errcap)
{
    char dummy[8];
    if (!err) { err = dummy; errcap = sizeof dummy; }
    FILE *f = fopen(path, "wb");
    if (!f) return cv_fail(err, errcap, "cannot create %s", path);
    int rc = gguf_writer_write(w, f, err, errcap);
    if (fclose(f) != 0 && !rc) rc = cv_fail(err, errcap, "write error");
    return rc;
}
