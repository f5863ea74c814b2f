/* quant.h - the block formats: ggml's Q8_0 and Q4_0 (byte for byte as GGUF
 * stores them), the activation rows quantized weights are multiplied with,
 * and the reference conversions between them and float. Every fast kernel's
 * input format is defined here or in tensor.h. */
#ifndef MOR_QUANT_H
#define MOR_QUANT_H
#include <stddef.h>
#include <stdint.h>
#include "tensor.h"

/* ggml block_q8_0: value j = d * qs[j]. */
typedef struct { uint16_t d; int8_t qs[QK]; } block_q8_0;
/* ggml block_q4_0: value j = d * ((qs[j] & 15) - 8), value j+16 = d * ((qs[j] >> 4) - 8). */
typedef struct { uint16_t d; uint8_t qs[QK / 2]; } block_q4_0;
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 is 34 bytes, as in ggml");
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 is 18 bytes, as in ggml");

/* ggml's reference quantizers (quantize_row_q8_0_ref / q4_0_ref): k is a
 * multiple of 32. Q8_0: d = amax/127, q = roundf(x/d). Q4_0: d = max/-8 with
 * max the value of largest magnitude, q = min(15, (int8)(x/d + 8.5)). */
void quant_row_q8_0(const float *x, block_q8_0 *y, int64_t k);
void quant_row_q4_0(const float *x, block_q4_0 *y, int64_t k);
/* Convert a row of k values of any of the five types to float (exact for
 * F32/F16/BF16; d * q for the blocks, also exact in float). */
void dequant_row(uint32_t type, const void *row, float *out, int64_t k);
/* The index of the first NaN or infinite value among the n values of a
 * tensor of `type` (any of the five; Q8_0 / Q4_0: the first value of the
 * first block whose scale is), or -1 when every value is finite. */
int64_t quant_find_nonfinite(uint32_t type, const void *data, int64_t n);
/* Convert a row of k floats to `type` (any of the five). */
void quant_row(uint32_t type, const float *x, void *out, int64_t k);

/* Activations for quantized weights: each row of x quantized like Q8_0, but
 * stored for SIMD: the k int8 values first (32-byte aligned), then the k/32
 * block scales as floats (each an F16-rounded value, as ggml's block d).
 * Rows are act_q8_stride(k) bytes apart. */
size_t act_q8_stride(int64_t k);
static inline const int8_t *act_q8_qs(const void *row) { return (const int8_t *)row; }
static inline const float *act_q8_d(const void *row, int64_t k) { return (const float *)((const int8_t *)row + k); }
/* The reference activation quantizer: the same numbers as quant_row_q8_0. */
void act_q8_ref(const float *x, void *row, int64_t k);

/* Activations for bfloat16 tile products (the AMX set's BF16 weights): each
 * float x split into three bfloat16, hi = bf16(x), mid = bf16(x - hi),
 * lo = bf16(x - hi - mid) (round to nearest even; inputs below FLT_MIN count
 * as zero, as the hardware conversion does), so that hi + mid + lo is x to
 * about 2^-24 of it and the product of each with a bfloat16 weight is exact
 * in float. A row is the k values of hi, then of mid, then of lo, each padded
 * with zeros to act_bf16x3_cols(k) values; where hi is infinite, mid and
 * lo are zero. Rows are act_bf16x3_stride(k) bytes apart. */
static inline int64_t act_bf16x3_cols(int64_t k) { return (k + 31) / 32 * 32; }
size_t act_bf16x3_stride(int64_t k);
static inline const uint16_t *act_bf16x3_part(const void *row, int64_t k, int part)
{
    return (const uint16_t *)row + (size_t)part * (size_t)act_bf16x3_cols(k);
}
/* The reference splitter. */
void act_bf16x3_ref(const float *x, void *row, int64_t k);
#endif
