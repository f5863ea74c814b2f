/* quant.h - the block formats: ggml's legacy quants (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0) and k-quants (Q2_K .. Q6_K, Q8_K), byte for byte as GGUF
 * stores them, the activation rows quantized weights are multiplied with,
 * and the reference conversions between them and float. Every fast kernel's
 * input format is defined here or in tensor.h. */
#ifndef MOR_QUANT_H
#define MOR_QUANT_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "tensor.h"

/* ggml block_q8_0: value j = d * qs[j]. */
typedef struct { uint16_t d; int8_t qs[QK]; } block_q8_0;
/* ggml block_q4_0: value j = d * ((qs[j] & 15) - 8), value j+16 = d * ((qs[j] >> 4) - 8). */
typedef struct { uint16_t d; uint8_t qs[QK / 2]; } block_q4_0;
/* ggml block_q4_1: value j = d * (qs[j] & 15) + m, value j+16 = d * (qs[j] >> 4) + m. */
typedef struct { uint16_t d, m; uint8_t qs[QK / 2]; } block_q4_1;
/* ggml block_q5_0: as Q4_0 with a fifth bit, bit j of the little-endian
 * 32-bit qh for value j: value = d * ((nibble | bit << 4) - 16). */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_0;
/* ggml block_q5_1: value = d * (nibble | bit << 4) + m. */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_1;
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 is 34 bytes, as in ggml");
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 is 18 bytes, as in ggml");
_Static_assert(sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24,
               "the legacy blocks are 20, 22 and 24 bytes, as in ggml");

/* The k-quants: super-blocks of QK_K = 256 values in sub-blocks of 16 or 32,
 * each sub-block with its own quantized scale (and min) relative to the
 * super-block's F16 d (and dmin). Value i of a super-block lives in:
 *  Q2_K  16 x 16: sub-block i/16 with scale scales[i/16] & 15 and min
 *        scales[i/16] >> 4; 2-bit q in qs[32*(i/128) + i%32] at bit
 *        2*((i%128)/32); value = d*scale*q - dmin*min.
 *  Q3_K  16 x 16: signed 6-bit scale s (12 packed bytes: low 4 bits of
 *        sub-block j in byte j%8, nibble j/8; high 2 bits in byte 8 + j%4, at
 *        bit 2*(j/4)) minus 32; q = 2 low bits (as Q2_K) | high bit (hmask[i%32]
 *        bit i/32) << 2, minus 4; value = d * s * q.
 *  Q4_K  8 x 32: 6-bit scale and min of sub-block j (12 packed bytes, below);
 *        4-bit q in qs[32*(i/64) + i%32], low nibble for (i%64) < 32;
 *        value = d*scale*q - dmin*min.
 *  Q5_K  as Q4_K, with a fifth bit in qh[i%32] at bit i/32.
 *  Q6_K  16 x 16: int8 scale; q = low 4 bits (ql[64*(i/128) + i%64], low nibble
 *        for (i%128) < 64) | 2 high bits (qh[32*(i/128) + i%32] at bit
 *        2*((i%128)/32)) << 4, minus 32; value = d * scale * q.
 *  Q8_K  float d, value = d * qs[i]; bsums[j] = sum of qs[16j .. 16j+15] (the
 *        activation format of the k-quants' dot products, as in ggml).
 * Q4_K/Q5_K scales: for j < 4, scale = scales[j] & 63, min = scales[j+4] & 63;
 * for j >= 4, scale = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4, min =
 * (scales[j+4] >> 4) | (scales[j] >> 6) << 4. */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; } block_q2_k;
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; } block_q3_k;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } block_q4_k;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_k;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_k;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_k;
_Static_assert(sizeof(block_q2_k) == 84 && sizeof(block_q3_k) == 110 && sizeof(block_q4_k) == 144 &&
               sizeof(block_q5_k) == 176 && sizeof(block_q6_k) == 210 && sizeof(block_q8_k) == 292,
               "the k-quant blocks are 84, 110, 144, 176, 210 and 292 bytes, as in ggml");
/* A k-quant super-block (Q2_K .. Q6_K, Q8_K) in integers: value i = d *
 * sc[i / sub] * q[i] - dmin * mn[i / sub], sub-blocks of `sub` (16 or 32)
 * values; q centred for Q3_K (-4..3) and Q6_K (-32..31), else unsigned;
 * mn and dmin 0 for the types without mins. */
typedef struct { float d, dmin; int sub; int16_t sc[16], mn[16]; int8_t q[QK_K]; } kq_block;
void kq_unpack(uint32_t type, const void *blk, kq_block *out);
/* Scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's 12 packed bytes. */
static inline void kq_scale_min(const uint8_t *q, int j, int *sc, int *mn)
{
    if (j < 4) { *sc = q[j] & 63; *mn = q[j + 4] & 63; return; }
    *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
}
/* All 8 scales (out[0..7]) and mins (out[8..15]) of a Q4_K / Q5_K block's 12
 * packed bytes: kq_scale_min's fields, four at a time in 32-bit words (6 low
 * bits for sub-blocks 0-3; a nibble plus the top 2 bits of bytes 0-7 for
 * 4-7). The SIMD sets' (little-endian hosts: the words are the bytes in
 * order). */
static inline void kq_scales_mins(const uint8_t *p, uint8_t out[16])
{
    uint32_t t[4];
    memcpy(t, p, 12);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    t[3] = ((t[2] >> 4) & m4) | (((t[1] >> 6) & m2) << 4);
    const uint32_t mn = t[1] & m6;
    t[1] = (t[2] & m4) | (((t[0] >> 6) & m2) << 4);
    t[2] = mn;
    t[0] &= m6;
    memcpy(out, t, 16);
}
/* A k-quant super-block's float step, as ggml's vec_dot_*_q8_K: the exact
 * integer sums sumi = sum_j sc_j (q . x)_j and summ = sum_j mn_j (sum of x)_j
 * scaled by the weights' d, dmin and the activations' d, added to s. Every
 * kernel set calls this one expression, so all give the reference's bits
 * (never contracted into an FMA: -std=c11 keeps GCC from it, the pragma
 * clang). */
static inline float kq_step(float s, float d, float dmin, float xd, int32_t sumi, int32_t summ)
{
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
    return s + ((d * xd) * (float)sumi - (dmin * xd) * (float)summ);
}
/* Scale of sub-block j (0..15) of a Q3_K block, -32..31. */
static inline int q3k_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* ggml's reference quantizers (quantize_row_q8_0_ref / q4_0_ref): k is a
 * multiple of 32. Q8_0: d = amax/127, q = roundf(x/d). Q4_0: d = max/-8 with
 * max the value of largest magnitude, q = min(15, (int8)(x/d + 8.5)). */
void quant_row_q8_0(const float *x, block_q8_0 *y, int64_t k);
void quant_row_q4_0(const float *x, block_q4_0 *y, int64_t k);
/* The other reference quantizers of ggml (quantize_row_*_ref: no importance
 * matrix), the same bytes for the same floats: k a multiple of the block. */
void quant_row_q4_1(const float *x, block_q4_1 *y, int64_t k);
void quant_row_q5_0(const float *x, block_q5_0 *y, int64_t k);
void quant_row_q5_1(const float *x, block_q5_1 *y, int64_t k);
void quant_row_q2_k(const float *x, block_q2_k *y, int64_t k);
void quant_row_q3_k(const float *x, block_q3_k *y, int64_t k);
void quant_row_q4_k(const float *x, block_q4_k *y, int64_t k);
void quant_row_q5_k(const float *x, block_q5_k *y, int64_t k);
void quant_row_q6_k(const float *x, block_q6_k *y, int64_t k);
void quant_row_q8_k(const float *x, block_q8_k *y, int64_t k);
/* Convert a row of k values of any type of tensor.h to float (F32/F16/BF16
 * exactly; the blocks as ggml's dequantize_row_*, in the same float operations). */
void dequant_row(uint32_t type, const void *row, float *out, int64_t k);
/* The index of the first NaN or infinite value among the n values of a
 * tensor of `type` (any type; for the blocks: the first value of the first
 * block with a non-finite scale or min), or -1 when every value is finite. */
int64_t quant_find_nonfinite(uint32_t type, const void *data, int64_t n);
/* Convert a row of k floats to `type` (any type of tensor.h). */
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

/* Activations for Q4_1 / Q5_1 weights: ggml's Q8_1 (the quants of Q8_0, and
 * per block s = d * sum of the quants, F16-rounded with the unrounded d, as
 * ggml's block s): an act_q8 row followed by the k/32 values of s as floats.
 * Rows are act_q8_1_stride(k) bytes apart. */
size_t act_q8_1_stride(int64_t k);
static inline const float *act_q8_1_s(const void *row, int64_t k) { return act_q8_d(row, k) + k / QK; }
void act_q8_1_ref(const float *x, void *row, int64_t k);

/* Activations for the k-quants: ggml's Q8_K per 256 values (k a multiple of
 * 256), stored as the k int8 quants, then the k/256 scales d (floats), then
 * the k/16 sums of 16 quants (int16). Rows are act_q8k_stride(k) bytes apart. */
size_t act_q8k_stride(int64_t k);
static inline const float *act_q8k_d(const void *row, int64_t k) { return (const float *)((const int8_t *)row + k); }
static inline const int16_t *act_q8k_bsums(const void *row, int64_t k)
{
    return (const int16_t *)(act_q8k_d(row, k) + k / QK_K);
}
void act_q8k_ref(const float *x, void *row, int64_t k);

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

/* Activations rounded to bfloat16 (MOR_CTX_FAST_BF16: the BF16 weights of the
 * AVX-512 set that uses the CPU's bfloat16 dot products): each float x as
 * bf16(x), rounded to nearest even, inputs below FLT_MIN as zero (as the
 * hardware conversion does), so within 2^-8 of x relatively. A row is the k
 * values padded with zeros to act_bf16_cols(k); rows are act_bf16_stride(k)
 * bytes apart. */
static inline int64_t act_bf16_cols(int64_t k) { return (k + 31) / 32 * 32; }
size_t act_bf16_stride(int64_t k);
/* The reference rounding. */
void act_bf16_ref(const float *x, void *row, int64_t k);
#endif
