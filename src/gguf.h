/* gguf.h - a strict, read-only GGUF v3 parser over a byte buffer (no ggml). */
#ifndef MOR_GGUF_H
#define MOR_GGUF_H
#include <stddef.h>
#include <stdint.h>
#include "mor.h"
#include "tensor.h"

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9, GGUF_U64 = 10, GGUF_I64 = 11,
    GGUF_F64 = 12, GGUF_VTYPE_COUNT
};

typedef struct { const char *p; uint64_t n; } gguf_str;   /* not NUL-terminated */

typedef struct {
    gguf_str    key;
    uint32_t    type;       /* enum gguf_vtype */
    uint32_t    arr_type;   /* element type when type == GGUF_ARR */
    uint64_t    arr_n;      /* element count when type == GGUF_ARR */
    const uint8_t *data;    /* scalar value or first array element, in the file (LE, unaligned) */
    gguf_str   *strs;       /* for string arrays: arr_n entries, owned by the gguf_file */
} gguf_kv;

typedef struct {
    gguf_str    name;
    uint32_t    n_dims;
    int64_t     ne[4];      /* ne[0] fastest; unused dims are 1 */
    uint32_t    type;       /* enum tensor_type */
    uint64_t    offset;     /* from the data section */
    uint64_t    nbytes;
    const uint8_t *data;    /* in the buffer */
} gguf_tensor;

typedef struct gguf_file {
    const uint8_t *buf;
    size_t      size;
    uint32_t    version;
    uint32_t    alignment;
    uint64_t    n_kv, n_tensors;
    gguf_kv    *kv;
    gguf_tensor *tensors;
    uint64_t    data_offset;
} gguf_file;

/* Parse `buf` (borrowed, must outlive the result). Every count, length, offset
 * and type is checked against the buffer; errors are MOR_E_FORMAT or
 * MOR_E_NOMEM with a message. */
mor_status gguf_parse(const void *buf, size_t size, gguf_file **out);
void       gguf_free(gguf_file *g);

const gguf_kv     *gguf_find_kv(const gguf_file *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);
int                gguf_str_eq(gguf_str s, const char *c);

/* Typed getters: MOR_OK, MOR_E_OUT_OF_RANGE (missing) or MOR_E_FORMAT (wrong
 * type, with a message naming the key). Integer getters accept any integer
 * type whose value fits. */
mor_status gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out);
mor_status gguf_get_i64(const gguf_file *g, const char *key, int64_t *out);
mor_status gguf_get_f32(const gguf_file *g, const char *key, float *out);
mor_status gguf_get_bool(const gguf_file *g, const char *key, int *out);
mor_status gguf_get_str(const gguf_file *g, const char *key, gguf_str *out);
/* Array getters: the element type must match exactly (or be any integer type
 * for the int32 getter, with values that fit), and the length must be n. */
mor_status gguf_get_arr_i32(const gguf_file *g, const char *key, int32_t *out, uint64_t n);
mor_status gguf_get_arr_f32(const gguf_file *g, const char *key, float *out, uint64_t n);
mor_status gguf_get_arr_f64(const gguf_file *g, const char *key, double *out, uint64_t n);
/* A string array: the kv (for arr_n and strs), MOR_E_OUT_OF_RANGE if missing. */
mor_status gguf_get_arr_str(const gguf_file *g, const char *key, const gguf_kv **out);

#endif
