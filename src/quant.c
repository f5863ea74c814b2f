/* quant.c - reference conversions between float and F16, BF16, Q8_0, Q4_0.
 * The block formats and rounding follow ggml exactly, so that a file made by
 * mor-quantize holds the same bytes llama-quantize would write from the same
 * float weights, and the activations are quantized as ggml does it. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "model.h"
#include "quant.h"

uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));   /* NaN stays NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);   /* rounds to >= 65536: inf */
    if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;           /* below half the smallest subnormal */
        uint32_t man = (ax & 0x7fffff) | 0x800000, e = ax >> 23;   /* value = man * 2^(e-150) */
        uint32_t shift = 126 - e;                                   /* to units of 2^-24 */
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1);   /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);   /* quiet NaN */
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

size_t tensor_row_bytes(uint32_t type, int64_t k)
{
    if (k < 0) return 0;
    switch (type) {
    case 0:  return (size_t)k * 4;                                            /* F32 */
    case 1:  case 30: return (size_t)k * 2;                                   /* F16, BF16 */
    case 8:  return k % QK ? 0 : (size_t)(k / QK) * sizeof(block_q8_0);
    case 2:  return k % QK ? 0 : (size_t)(k / QK) * sizeof(block_q4_0);
    default: return 0;
    }
}

void quant_row_q8_0(const float *x, block_q8_0 *y, int64_t k)
{
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        float amax = 0;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int j = 0; j < QK; j++) y[b].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

void quant_row_q4_0(const float *x, block_q4_0 *y, int64_t k)
{
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        float amax = 0, max = 0;
        for (int j = 0; j < QK; j++)
            if (amax < fabsf(xb[j])) { amax = fabsf(xb[j]); max = xb[j]; }
        const float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int j = 0; j < QK / 2; j++) {
            int8_t a = (int8_t)(xb[j] * id + 8.5f), c = (int8_t)(xb[j + QK / 2] * id + 8.5f);
            uint8_t lo = (uint8_t)(a < 15 ? a : 15), hi = (uint8_t)(c < 15 ? c : 15);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void dequant_row(uint32_t type, const void *row, float *out, int64_t k)
{
    switch (type) {
    case 1: for (int64_t i = 0; i < k; i++) out[i] = f16_to_f32(((const uint16_t *)row)[i]); break;
    case 30: for (int64_t i = 0; i < k; i++) out[i] = bf16_to_f32(((const uint16_t *)row)[i]); break;
    case 8:
        for (int64_t b = 0; b < k / QK; b++) {
            const block_q8_0 *y = (const block_q8_0 *)row + b;
            const float d = f16_to_f32(y->d);
            for (int j = 0; j < QK; j++) out[b * QK + j] = d * (float)y->qs[j];
        }
        break;
    case 2:
        for (int64_t b = 0; b < k / QK; b++) {
            const block_q4_0 *y = (const block_q4_0 *)row + b;
            const float d = f16_to_f32(y->d);
            for (int j = 0; j < QK / 2; j++) {
                out[b * QK + j] = d * (float)((y->qs[j] & 15) - 8);
                out[b * QK + j + QK / 2] = d * (float)((y->qs[j] >> 4) - 8);
            }
        }
        break;
    default: memcpy(out, row, sizeof(float) * (size_t)k); break;
    }
}

void quant_row(uint32_t type, const float *x, void *out, int64_t k)
{
    switch (type) {
    case 1: for (int64_t i = 0; i < k; i++) ((uint16_t *)out)[i] = f32_to_f16(x[i]); break;
    case 30: for (int64_t i = 0; i < k; i++) ((uint16_t *)out)[i] = f32_to_bf16(x[i]); break;
    case 8: quant_row_q8_0(x, out, k); break;
    case 2: quant_row_q4_0(x, out, k); break;
    default: memcpy(out, x, sizeof(float) * (size_t)k); break;
    }
}

size_t act_q8_stride(int64_t k)
{
    size_t n = (size_t)k + (size_t)(k / QK) * sizeof(float);
    return (n + 63) & ~(size_t)63;   /* rows start on a cache line: aligned SIMD loads */
}

void act_q8_ref(const float *x, void *row, int64_t k)
{
    int8_t *qs = (int8_t *)row;
    float *d = (float *)(qs + k);
    for (int64_t b = 0; b < k / QK; b++) {
        block_q8_0 blk;
        quant_row_q8_0(x + b * QK, &blk, QK);
        memcpy(qs + b * QK, blk.qs, QK);
        d[b] = f16_to_f32(blk.d);
    }
}
