/* dtype.c - arrays converted between F32, F16 and BF16 (the element
 * conversions are tensor.h's). See dtype.h. */
#include "dtype.h"

#include <string.h>

size_t cv_dtype_size(int dtype)
{
    switch (dtype) {
    case GGML_F32: return 4;
    case GGML_F16: return 2;
    case GGML_BF16: return 2;
    default: return 0;
    }
}

const char *cv_dtype_name(int dtype)
{
    switch (dtype) {
    case GGML_F32: return "F32";
    case GGML_F16: return "F16";
    case GGML_BF16: return "BF16";
    default: return tensor_block_size((uint32_t)dtype) > 1 ? tensor_type_name((uint32_t)dtype) : "?";
    }
}

int cv_dtype_is_quant(int dtype) { return dtype >= 0 && tensor_block_size((uint32_t)dtype) > 1; }

int cv_dtype_bytes(int dtype, uint64_t numel, uint64_t cols, uint64_t *bytes)
{
    if (!cv_dtype_is_quant(dtype)) {
        const size_t es = cv_dtype_size(dtype);
        if (!es || (es > 1 && numel > UINT64_MAX / es)) return -1;
        *bytes = numel * es;
        return 0;
    }
    const uint64_t bk = (uint64_t)tensor_block_size((uint32_t)dtype);
    if (!cols || cols % bk || numel % cols) return -1;
    *bytes = numel / bk * (uint64_t)tensor_row_bytes((uint32_t)dtype, (int64_t)bk);
    return 0;
}

static float load_f32(const uint8_t *p, int from)
{
    uint16_t h;
    float f;
    if (from == GGML_F32) { memcpy(&f, p, 4); return f; }
    memcpy(&h, p, 2);
    return from == GGML_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

static int is_inf_bits16(uint16_t h, int to)
{
    return to == GGML_F16 ? (h & 0x7fff) == 0x7c00 : (h & 0x7fff) == 0x7f80;
}

size_t cv_convert(void *dst, int to, const void *src, int from, size_t n)
{
    const uint8_t *s = src;
    uint8_t *d = dst;
    size_t ss = cv_dtype_size(from), ds = cv_dtype_size(to), overflow = 0;
    if (n == 0) return 0;
    if (to == from) {
        memcpy(dst, src, n * ss);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        float f = load_f32(s + i * ss, from);
        if (to == GGML_F32) {
            memcpy(d + i * ds, &f, 4);
        } else {
            uint16_t h = to == GGML_F16 ? f32_to_f16(f) : f32_to_bf16(f);
            if (is_inf_bits16(h, to) && f == f && f - f == 0.0f) overflow++;
            memcpy(d + i * ds, &h, 2);
        }
    }
    return overflow;
}
