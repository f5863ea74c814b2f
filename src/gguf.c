/* gguf.c - a strict GGUF v3 reader over a byte buffer.
 *
 * The buffer may come from anywhere (a fuzzer, a truncated download), so every
 * count, length and offset is checked against the bytes that remain before it
 * is used, with overflow-safe arithmetic. Nothing is copied except small index
 * arrays: keys, strings and tensor data are views into the buffer. */
#include <stdlib.h>
#include <string.h>
#include "gguf.h"
#include "status.h"

#define GGUF_MAGIC 0x46554747u   /* "GGUF" little-endian */
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 256        /* longer keys/tensor names are surely corrupt */

typedef struct { const uint8_t *p; size_t left; } cursor;

static int take(cursor *c, void *dst, size_t n)
{
    if (c->left < n) return 0;
    if (dst) memcpy(dst, c->p, n);
    c->p += n; c->left -= n;
    return 1;
}

static int rd_u32(cursor *c, uint32_t *v) { return take(c, v, 4); }
static int rd_u64(cursor *c, uint64_t *v) { return take(c, v, 8); }

static int rd_str(cursor *c, gguf_str *s)
{
    uint64_t n;
    if (!rd_u64(c, &n) || n > c->left) return 0;
    s->p = (const char *)c->p; s->n = n;
    c->p += n; c->left -= (size_t)n;
    return 1;
}

static size_t vtype_size(uint32_t t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

int gguf_str_eq(gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.n == n && memcmp(s.p, c, n) == 0;
}

static mor_status parse_kv(cursor *c, gguf_kv *kv, uint64_t idx)
{
    if (!rd_str(c, &kv->key) || kv->key.n == 0 || kv->key.n > GGUF_MAX_NAME)
        return err_set(MOR_E_FORMAT, "gguf: key %llu: bad or truncated name", (unsigned long long)idx);
    if (!rd_u32(c, &kv->type))
        return err_set(MOR_E_FORMAT, "gguf: key '%.*s': truncated type", (int)kv->key.n, kv->key.p);
    kv->data = c->p;
    if (kv->type == GGUF_STR) {
        gguf_str s;
        if (!rd_str(c, &s)) goto truncated;
        return MOR_OK;
    }
    if (kv->type == GGUF_ARR) {
        if (!rd_u32(c, &kv->arr_type) || !rd_u64(c, &kv->arr_n)) goto truncated;
        kv->data = c->p;
        if (kv->arr_type == GGUF_STR) {
            /* each string needs at least its 8-byte length: bounds n before allocating */
            if (kv->arr_n > c->left / 8) goto truncated;
            kv->strs = malloc(sizeof(gguf_str) * (kv->arr_n ? kv->arr_n : 1));
            if (!kv->strs) return err_set(MOR_E_NOMEM, "gguf: out of memory");
            for (uint64_t i = 0; i < kv->arr_n; i++)
                if (!rd_str(c, &kv->strs[i])) goto truncated;
            return MOR_OK;
        }
        size_t es = vtype_size(kv->arr_type);
        if (!es)
            return err_set(MOR_E_FORMAT, "gguf: key '%.*s': unsupported array element type %u",
                           (int)kv->key.n, kv->key.p, kv->arr_type);
        if (kv->arr_n > c->left / es || !take(c, NULL, (size_t)kv->arr_n * es)) goto truncated;
        return MOR_OK;
    }
    size_t sz = vtype_size(kv->type);
    if (!sz)
        return err_set(MOR_E_FORMAT, "gguf: key '%.*s': unknown value type %u",
                       (int)kv->key.n, kv->key.p, kv->type);
    if (!take(c, NULL, sz)) goto truncated;
    if (kv->type == GGUF_BOOL && *kv->data > 1)
        return err_set(MOR_E_FORMAT, "gguf: key '%.*s': bool value %u", (int)kv->key.n, kv->key.p, *kv->data);
    return MOR_OK;
truncated:
    return err_set(MOR_E_FORMAT, "gguf: key '%.*s': value truncated or too long", (int)kv->key.n, kv->key.p);
}

static int name_eq(gguf_str a, gguf_str b) { return a.n == b.n && memcmp(a.p, b.p, a.n) == 0; }

void gguf_free(gguf_file *g)
{
    if (!g) return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) free(g->kv[i].strs);
    free(g->kv);
    free(g->tensors);
    free(g);
}

static int cmp_u64_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The keys, each once, then general.alignment if given. */
static mor_status parse_keys(cursor *c, gguf_file *g, uint64_t n_kv)
{
    mor_status st;
    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = i + 1;   /* so gguf_free releases what was parsed */
        if ((st = parse_kv(c, &g->kv[i], i)) != MOR_OK) return st;
        for (uint64_t j = 0; j < i; j++)
            if (name_eq(g->kv[j].key, g->kv[i].key))
                return err_set(MOR_E_FORMAT, "gguf: duplicate key '%.*s'", (int)g->kv[i].key.n, g->kv[i].key.p);
    }
    const gguf_kv *al = gguf_find_kv(g, "general.alignment");
    if (al) {
        uint32_t a;
        if (al->type != GGUF_U32) return err_set(MOR_E_FORMAT, "gguf: general.alignment must be uint32");
        memcpy(&a, al->data, 4);
        if (a == 0 || (a & (a - 1)) || a > 4096) return err_set(MOR_E_FORMAT, "gguf: bad alignment %u", a);
        g->alignment = a;
    }
    return MOR_OK;
}

/* Tensor info i: name, dims, type, offset; its byte size, checked. */
static mor_status parse_tensor_info(cursor *c, gguf_file *g, uint64_t i)
{
    gguf_tensor *t = &g->tensors[i];
    if (!rd_str(c, &t->name) || t->name.n == 0 || t->name.n > GGUF_MAX_NAME || !rd_u32(c, &t->n_dims))
        return err_set(MOR_E_FORMAT, "gguf: tensor info %llu truncated or bad name", (unsigned long long)i);
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return err_set(MOR_E_FORMAT, "gguf: tensor '%.*s' has %u dims", (int)t->name.n, t->name.p, t->n_dims);
    uint64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && !rd_u64(c, &ne)) return err_set(MOR_E_FORMAT, "gguf: tensor info truncated");
        if (ne == 0 || ne > (uint64_t)INT32_MAX || nel > UINT64_MAX / ne)
            return err_set(MOR_E_FORMAT, "gguf: tensor '%.*s' has a bad dimension", (int)t->name.n, t->name.p);
        t->ne[d] = (int64_t)ne; nel *= ne;
    }
    if (!rd_u32(c, &t->type) || !rd_u64(c, &t->offset)) return err_set(MOR_E_FORMAT, "gguf: tensor info truncated");
    uint64_t rb = tensor_row_bytes(t->type, t->ne[0]);
    if (!rb)
        return err_set(MOR_E_FORMAT, "gguf: tensor '%.*s': unsupported type %u or row size", (int)t->name.n, t->name.p,
                       t->type);
    uint64_t rows = nel / (uint64_t)t->ne[0];
    if (rows > UINT64_MAX / rb) return err_set(MOR_E_FORMAT, "gguf: tensor too large");
    t->nbytes = rb * rows;
    if (t->offset % g->alignment)
        return err_set(MOR_E_FORMAT, "gguf: tensor '%.*s' offset not aligned", (int)t->name.n, t->name.p);
    for (uint64_t j = 0; j < i; j++)
        if (name_eq(g->tensors[j].name, t->name))
            return err_set(MOR_E_FORMAT, "gguf: duplicate tensor '%.*s'", (int)t->name.n, t->name.p);
    return MOR_OK;
}

/* The data section, aligned after the infos at pos: every tensor inside the
 * file, none overlapping. */
static mor_status place_data(gguf_file *g, uint64_t pos)
{
    const uint64_t n = g->n_tensors, data = (pos + g->alignment - 1) / g->alignment * g->alignment;
    if (n && data > g->size) return err_set(MOR_E_FORMAT, "gguf: truncated before the data section");
    g->data_offset = data;
    uint64_t *ranges = malloc(sizeof(uint64_t) * 2 * (n ? n : 1));
    if (!ranges) return err_set(MOR_E_NOMEM, "gguf: out of memory");
    for (uint64_t i = 0; i < n; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t avail = g->size - data;
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            mor_status st = err_set(MOR_E_FORMAT, "gguf: tensor '%.*s' data lies outside the file (truncated?)",
                                    (int)t->name.n, t->name.p);
            free(ranges);
            return st;
        }
        t->data = g->buf + data + t->offset;
        ranges[2 * i] = t->offset; ranges[2 * i + 1] = t->offset + t->nbytes;
    }
    qsort(ranges, n, 2 * sizeof(uint64_t), cmp_u64_pair);
    for (uint64_t i = 1; i < n; i++)
        if (ranges[2 * i] < ranges[2 * i - 1]) { free(ranges); return err_set(MOR_E_FORMAT, "gguf: tensor data regions overlap"); }
    free(ranges);
    return MOR_OK;
}

mor_status gguf_parse(const void *buf, size_t size, gguf_file **out)
{
    *out = NULL;
    cursor c = { buf, size };
    uint32_t magic, version;
    uint64_t n_tensors, n_kv;
    if (!rd_u32(&c, &magic) || magic != GGUF_MAGIC)
        return err_set(MOR_E_FORMAT, "not a GGUF file (bad magic)");
    if (!rd_u32(&c, &version))
        return err_set(MOR_E_FORMAT, "gguf: truncated header");
    if (version != 3)
        return err_set(MOR_E_FORMAT, "gguf: version %u not supported (need 3; big-endian files are rejected)", version);
    if (!rd_u64(&c, &n_tensors) || !rd_u64(&c, &n_kv))
        return err_set(MOR_E_FORMAT, "gguf: truncated header");
    /* a key needs >= 12 bytes, a tensor info >= 24: reject absurd counts before allocating */
    if (n_kv > c.left / 12 || n_tensors > c.left / 24)
        return err_set(MOR_E_FORMAT, "gguf: counts (%llu keys, %llu tensors) exceed the file size",
                       (unsigned long long)n_kv, (unsigned long long)n_tensors);

    gguf_file *g = calloc(1, sizeof *g);
    if (!g) return err_set(MOR_E_NOMEM, "gguf: out of memory");
    g->buf = buf; g->size = size; g->version = version; g->alignment = 32;
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    mor_status st = !g->kv || !g->tensors ? err_set(MOR_E_NOMEM, "gguf: out of memory") : parse_keys(&c, g, n_kv);
    for (uint64_t i = 0; !st && i < n_tensors; i++) st = parse_tensor_info(&c, g, i);
    if (!st) {
        g->n_tensors = n_tensors;
        st = place_data(g, size - c.left);
    }
    if (st) { gguf_free(g); return st; }
    *out = g;
    return MOR_OK;
}

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (gguf_str_eq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (gguf_str_eq(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

/* Read one integer element of type t at p into *v; 0 if t is not an integer type. */
static int read_int(uint32_t t, const uint8_t *p, int64_t *v)
{
    switch (t) {
    case GGUF_U8:  { uint8_t x;  memcpy(&x, p, 1); *v = x; return 1; }
    case GGUF_I8:  { int8_t x;   memcpy(&x, p, 1); *v = x; return 1; }
    case GGUF_U16: { uint16_t x; memcpy(&x, p, 2); *v = x; return 1; }
    case GGUF_I16: { int16_t x;  memcpy(&x, p, 2); *v = x; return 1; }
    case GGUF_U32: { uint32_t x; memcpy(&x, p, 4); *v = x; return 1; }
    case GGUF_I32: { int32_t x;  memcpy(&x, p, 4); *v = x; return 1; }
    case GGUF_I64: { int64_t x;  memcpy(&x, p, 8); *v = x; return 1; }
    case GGUF_U64: { uint64_t x; memcpy(&x, p, 8); if (x > INT64_MAX) return 0; *v = (int64_t)x; return 1; }
    }
    return 0;
}

static mor_status lookup(const gguf_file *g, const char *key, const gguf_kv **kv)
{
    *kv = gguf_find_kv(g, key);
    return *kv ? MOR_OK : MOR_E_OUT_OF_RANGE;
}

static mor_status wrong_type(const char *key, const char *want)
{
    return err_set(MOR_E_FORMAT, "key '%s' must be %s", key, want);
}

mor_status gguf_get_i64(const gguf_file *g, const char *key, int64_t *out)
{
    const gguf_kv *kv;
    if (lookup(g, key, &kv)) return MOR_E_OUT_OF_RANGE;
    if (!read_int(kv->type, kv->data, out)) return wrong_type(key, "an integer");
    return MOR_OK;
}

mor_status gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out)
{
    int64_t v;
    mor_status st = gguf_get_i64(g, key, &v);
    if (st) return st;
    if (v < 0 || v > (int64_t)UINT32_MAX) return wrong_type(key, "a uint32 value");
    *out = (uint32_t)v;
    return MOR_OK;
}

mor_status gguf_get_f32(const gguf_file *g, const char *key, float *out)
{
    const gguf_kv *kv;
    if (lookup(g, key, &kv)) return MOR_E_OUT_OF_RANGE;
    if (kv->type == GGUF_F32) { memcpy(out, kv->data, 4); return MOR_OK; }
    if (kv->type == GGUF_F64) { double d; memcpy(&d, kv->data, 8); *out = (float)d; return MOR_OK; }
    return wrong_type(key, "float32");
}

mor_status gguf_get_bool(const gguf_file *g, const char *key, int *out)
{
    const gguf_kv *kv;
    if (lookup(g, key, &kv)) return MOR_E_OUT_OF_RANGE;
    if (kv->type != GGUF_BOOL) return wrong_type(key, "bool");
    *out = kv->data[0] != 0;
    return MOR_OK;
}

mor_status gguf_get_str(const gguf_file *g, const char *key, gguf_str *out)
{
    const gguf_kv *kv;
    if (lookup(g, key, &kv)) return MOR_E_OUT_OF_RANGE;
    if (kv->type != GGUF_STR) return wrong_type(key, "a string");
    uint64_t n; memcpy(&n, kv->data, 8);
    out->p = (const char *)kv->data + 8; out->n = n;
    return MOR_OK;
}

static mor_status get_arr(const gguf_file *g, const char *key, uint64_t n, const gguf_kv **kv)
{
    if (lookup(g, key, kv)) return MOR_E_OUT_OF_RANGE;
    if ((*kv)->type != GGUF_ARR) return wrong_type(key, "an array");
    if ((*kv)->arr_n != n)
        return err_set(MOR_E_FORMAT, "key '%s' has %llu elements, expected %llu", key,
                       (unsigned long long)(*kv)->arr_n, (unsigned long long)n);
    return MOR_OK;
}

mor_status gguf_get_arr_i32(const gguf_file *g, const char *key, int32_t *out, uint64_t n)
{
    const gguf_kv *kv;
    mor_status st = get_arr(g, key, n, &kv);
    if (st) return st;
    size_t es = vtype_size(kv->arr_type);
    for (uint64_t i = 0; i < n; i++) {
        int64_t v;
        if (kv->arr_type == GGUF_F32 || kv->arr_type == GGUF_F64 || kv->arr_type == GGUF_BOOL ||
            !read_int(kv->arr_type, kv->data + i * es, &v) || v < INT32_MIN || v > INT32_MAX)
            return wrong_type(key, "an array of int32");
        out[i] = (int32_t)v;
    }
    return MOR_OK;
}

mor_status gguf_get_arr_f32(const gguf_file *g, const char *key, float *out, uint64_t n)
{
    const gguf_kv *kv;
    mor_status st = get_arr(g, key, n, &kv);
    if (st) return st;
    if (kv->arr_type != GGUF_F32) return wrong_type(key, "an array of float32");
    memcpy(out, kv->data, n * 4);
    return MOR_OK;
}

mor_status gguf_get_arr_f64(const gguf_file *g, const char *key, double *out, uint64_t n)
{
    const gguf_kv *kv;
    mor_status st = get_arr(g, key, n, &kv);
    if (st) return st;
    if (kv->arr_type == GGUF_F64) { memcpy(out, kv->data, n * 8); return MOR_OK; }
    if (kv->arr_type == GGUF_F32) {
        for (uint64_t i = 0; i < n; i++) { float f; memcpy(&f, kv->data + 4 * i, 4); out[i] = f; }
        return MOR_OK;
    }
    return wrong_type(key, "an array of float64");
}

mor_status gguf_get_arr_str(const gguf_file *g, const char *key, const gguf_kv **out)
{
    const gguf_kv *kv;
    if (lookup(g, key, &kv)) return MOR_E_OUT_OF_RANGE;
    if (kv->type != GGUF_ARR || kv->arr_type != GGUF_STR) return wrong_type(key, "an array of strings");
    *out = kv;
    return MOR_OK;
}
