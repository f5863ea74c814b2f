/* tensor.h - the bottom of libmor: what a stored tensor is.
 *
 * One enum of element types (ggml's type numbers, as GGUF stores them), a
 * view of a stored matrix, the bytes of one of its rows, and the exact
 * conversions between F32 and the two 16-bit float formats. The kernels, the
 * GGUF reader, the model, the converter and the trainer all build on this
 * header; it includes nothing of libmor. */
#ifndef MOR_TENSOR_H
#define MOR_TENSOR_H
#include <stddef.h>
#include <stdint.h>

/* Element types, numbered as in ggml (and GGUF). The legacy quants (Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0) are blocks of QK values with an F16 scale; the
 * k-quants (Q2_K .. Q6_K, and Q8_K, ggml's activation format) super-blocks of
 * QK_K values (quant.h has their layouts). */
enum tensor_type {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
    GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_Q8_K = 15,
    GGML_BF16 = 30
};
#define QK 32     /* values per legacy block (Q4_0 .. Q8_0) */
#define QK_K 256  /* values per k-quant super-block */

/* A view of a stored matrix: `rows` outputs of `cols` inputs each, row-major,
 * in `type` (a vector is one row). The data is borrowed: usually the mapped
 * model file. */
typedef struct {
    const void *data;
    uint32_t    type;
    int64_t     rows, cols;
} tensor;

/* Values per block of `type` (1 for the float types, 0 for an unknown type). */
int64_t     tensor_block_size(uint32_t type);
/* Bytes of a row of k values of `type`; 0 for an unknown type, k < 0, or a
 * k that is not a multiple of the block size. 64-bit also on 32-bit
 * targets, so that a reader can check a file's sizes without overflow. */
uint64_t    tensor_row_bytes(uint32_t type, int64_t k);
/* "F32", "F16", "BF16", "Q8_0", "Q4_K", ... (ggml's names), or "unknown". */
const char *tensor_type_name(uint32_t type);

/* Exact widening; narrowing rounds to nearest even (F16: overflow -> inf,
 * values below half the smallest subnormal -> 0); NaN stays NaN (quiet). */
float    f16_to_f32(uint16_t h);
float    bf16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);
#endif
