/* quant.c - reference conversions between float and F16, BF16, Q8_0, Q4_0.
 * The block formats and rounding follow ggml exactly, so that a file made by
 * mor-quantize holds the same bytes llama-quantize would write from the same
 * float weights, and the activations are quantized as ggml does it. */
#include <math.h>
#include <string.h>
#include "quant.h"



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
    case GGML_F16: for (int64_t i = 0; i < k; i++) out[i] = f16_to_f32(((const uint16_t *)row)[i]); break;
    case GGML_BF16: for (int64_t i = 0; i < k; i++) out[i] = bf16_to_f32(((const uint16_t *)row)[i]); break;
    case GGML_Q8_0:
        for (int64_t b = 0; b < k / QK; b++) {
            const block_q8_0 *y = (const block_q8_0 *)row + b;
            const float d = f16_to_f32(y->d);
            for (int j = 0; j < QK; j++) out[b * QK + j] = d * (float)y->qs[j];
        }
        break;
    case GGML_Q4_0:
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

int64_t quant_find_nonfinite(uint32_t type, const void *data, int64_t n)
{
    const unsigned char *p = data;
    switch (type) {
    case GGML_F32:
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            if ((u & 0x7f800000u) == 0x7f800000u) return i;   /* exponent all ones: inf or NaN */
        }
        return -1;
    case GGML_F16: case GGML_BF16: {
        const uint16_t mask = type == GGML_F16 ? 0x7c00 : 0x7f80;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            if ((h & mask) == mask) return i;
        }
        return -1;
    }
    case GGML_Q8_0: case GGML_Q4_0: {   /* the blocks' F16 scales; the quants are integers */
        const size_t bs = type == GGML_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
        for (int64_t b = 0; b < n / QK; b++) {
            uint16_t d;
            memcpy(&d, p + (size_t)b * bs, 2);
            if ((d & 0x7c00) == 0x7c00) return b * QK;
        }
        return -1;
    }
    default: return -1;
    }
}

void quant_row(uint32_t type, const float *x, void *out, int64_t k)
{
    switch (type) {
    case GGML_F16: for (int64_t i = 0; i < k; i++) ((uint16_t *)out)[i] = f32_to_f16(x[i]); break;
    case GGML_BF16: for (int64_t i = 0; i < k; i++) ((uint16_t *)out)[i] = f32_to_bf16(x[i]); break;
    case GGML_Q8_0: quant_row_q8_0(x, out, k); break;
    case GGML_Q4_0: quant_row_q4_0(x, out, k); break;
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

size_t act_bf16x3_stride(int64_t k)
{
    return (size_t)act_bf16x3_cols(k) * 3 * sizeof(uint16_t);   /* 192 bytes per 32 values: whole cache lines */
}

/* bf16 of x as the AVX512-BF16 conversion makes it: round to nearest even, below FLT_MIN zero */
static uint16_t bf16_daz(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000);
    return f32_to_bf16(x);
}

void act_bf16x3_ref(const float *x, void *row, int64_t k)
{
    const int64_t kp = act_bf16x3_cols(k);
    uint16_t *hi = row, *mid = hi + kp, *lo = mid + kp;
    for (int64_t i = 0; i < kp; i++) {
        if (i >= k) { hi[i] = mid[i] = lo[i] = 0; continue; }
        float v = x[i], h, m;
        hi[i] = bf16_daz(v);
        h = bf16_to_f32(hi[i]);
        if (isinf(h)) { mid[i] = lo[i] = 0; continue; }
        v -= h;   /* exact: h is v rounded to 8 significant bits */
        mid[i] = bf16_daz(v);
        m = bf16_to_f32(mid[i]);
        lo[i] = bf16_daz(v - m);
    }
}
