/* gguf_write.c - the GGUF v3 writer. The whole header (keys and tensor infos)
 * is serialized into memory first, so its size, and hence every tensor
 * offset, is known before anything is written. */
#include "gguf_write.h"

#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "util.h"

/* GGUF value types */
enum { GV_U32 = 4, GV_I32 = 5, GV_F32 = 6, GV_BOOL = 7, GV_STR = 8, GV_ARR = 9, GV_F64 = 12 };

typedef struct {
    char *name;
    int type, n_dims;
    uint64_t dims[4];
    const void *data;
    uint64_t nbytes, offset;
} gw_tensor;

struct gguf_writer {
    uint8_t *kv;              /* serialized key-value pairs */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    char **keys;              /* for duplicate detection */
    gw_tensor *t;
    size_t n_t, cap_t;
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
    return calloc(1, sizeof(gguf_writer));
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->keys);
    free(w->kv);
    free(w->t);
    free(w);
}

static int failed(gguf_writer *w) { return w->err[0] != 0; }

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
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], k) == 0) {
            cv_fail(w->err, sizeof w->err, "GGUF key '%s' added twice", k);
            return 0;
        }
    keys = realloc(w->keys, (size_t)(w->n_kv + 1) * sizeof *keys);
    if (!keys) { cv_fail(w->err, sizeof w->err, "out of memory"); return 0; }
    w->keys = keys;
    if (!(w->keys[w->n_kv] = cv_strdup(k))) { cv_fail(w->err, sizeof w->err, "out of memory"); return 0; }
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

void gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, int n_dims, const uint64_t *dims,
                            const void *data, uint64_t nbytes)
{
    gw_tensor *t;
    uint64_t want = cv_dtype_size(type);
    /* ggml's Q4_0 (type 2) and Q8_0 (type 8): 18- and 34-byte blocks of 32 along the first dimension */
    const uint64_t block = type == 2 ? 18 : type == 8 ? 34 : 0;
    if (failed(w)) return;
    if (block) want = block;
    if (!want || n_dims < 1 || n_dims > 4 || (block && dims[0] % 32)) {
        cv_fail(w->err, sizeof w->err, "tensor '%s': bad type or rank", name);
        return;
    }
    for (int i = 0; i < n_dims; i++)
        if (dims[i] == 0 || dims[i] > (uint64_t)INT64_MAX || !cv_mul_u64(want, block && i == 0 ? dims[i] / 32 : dims[i], &want)) {
            cv_fail(w->err, sizeof w->err, "tensor '%s': bad dimensions", name);
            return;
        }
    if (want != nbytes) {
        cv_fail(w->err, sizeof w->err, "tensor '%s': %llu bytes for its dimensions, %llu given", name,
                (unsigned long long)want, (unsigned long long)nbytes);
        return;
    }
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            cv_fail(w->err, sizeof w->err, "tensor '%s' added twice", name);
            return;
        }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        gw_tensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) { cv_fail(w->err, sizeof w->err, "out of memory"); return; }
        w->t = nt;
        w->cap_t = cap;
    }
    t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = cv_strdup(name))) { cv_fail(w->err, sizeof w->err, "out of memory"); return; }
    t->type = type;
    t->n_dims = n_dims;
    memcpy(t->dims, dims, (size_t)n_dims * sizeof *dims);
    t->data = data;
    t->nbytes = nbytes;
    w->n_t++;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int gguf_writer_write(gguf_writer *w, FILE *f, char *err, size_t errcap)
{
    static const uint8_t zeros[GGUF_WRITE_ALIGNMENT];
    uint8_t *kv_part;
    size_t kv_len;
    uint64_t off = 0, hdr;
    if (failed(w)) return cv_fail(err, errcap, "%s", w->err);

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
        off = pad_to(off + t->nbytes, GGUF_WRITE_ALIGNMENT);
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
    if (pad_to(hdr, GGUF_WRITE_ALIGNMENT) != hdr &&
        fwrite(zeros, 1, (size_t)(pad_to(hdr, GGUF_WRITE_ALIGNMENT) - hdr), f) != (size_t)(pad_to(hdr, GGUF_WRITE_ALIGNMENT) - hdr))
        goto io;
    for (size_t i = 0; i < w->n_t; i++) {
        const gw_tensor *t = &w->t[i];
        uint64_t padded = pad_to(t->nbytes, GGUF_WRITE_ALIGNMENT);
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
