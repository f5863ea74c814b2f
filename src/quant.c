/* quant.c - reference conversions between float and F16, BF16 and ggml's
 * blocks (legacy quants and k-quants). The block formats and rounding follow
 * ggml exactly (quantize_row_*_ref, dequantize_row_*: the same float
 * operations in the same order), so that a file made by mor-quantize holds
 * the same bytes llama-quantize would write from the same float weights
 * without an importance matrix, and the activations are quantized as ggml
 * does it. */
#include <float.h>
#include <math.h>
#include <string.h>
#include "quant.h"

/* ggml's nearest_int: round half to even through the float mantissa (exact
 * for |x| < 2^22, what every caller passes; never traps on other input). */
static int nearest_int(float x)
{
    float v = x + 12582912.0f;
    uint32_t u;
    memcpy(&u, &v, 4);
    return (int)(u & 0x007fffffu) - 0x00400000;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }


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

/* Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min, q = (x - min)/d + 0.5 truncated */
static void min_max(const float *x, int n, float *mn, float *mx)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo; *mx = hi;
}

void quant_row_q4_1(const float *x, block_q4_1 *y, int64_t k)
{
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        float min, max;
        min_max(xb, QK, &min, &max);
        const float d = (max - min) / 15.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        y[b].m = f32_to_f16(min);
        for (int j = 0; j < QK / 2; j++) {
            int8_t a = (int8_t)((xb[j] - min) * id + 0.5f), c = (int8_t)((xb[j + QK / 2] - min) * id + 0.5f);
            y[b].qs[j] = (uint8_t)((a < 15 ? a : 15) | (c < 15 ? c : 15) << 4);
        }
    }
}

/* The fifth bits of a Q5 block: bit j of qh for value j (little-endian). */
static void put_qh(uint8_t qh[4], uint32_t bits)
{
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(bits >> (8 * i));
}

static uint32_t get_qh(const uint8_t qh[4])
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

void quant_row_q5_0(const float *x, block_q5_0 *y, int64_t k)
{
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        float amax = 0, max = 0;
        for (int j = 0; j < QK; j++)
            if (amax < fabsf(xb[j])) { amax = fabsf(xb[j]); max = xb[j]; }
        const float d = max / -16.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            int8_t a = (int8_t)(xb[j] * id + 16.5f), c = (int8_t)(xb[j + QK / 2] * id + 16.5f);
            uint8_t lo = (uint8_t)(a < 31 ? a : 31), hi = (uint8_t)(c < 31 ? c : 31);
            y[b].qs[j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            qh |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + QK / 2);
        }
        put_qh(y[b].qh, qh);
    }
}

void quant_row_q5_1(const float *x, block_q5_1 *y, int64_t k)
{
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        float min, max;
        min_max(xb, QK, &min, &max);
        const float d = (max - min) / 31.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        y[b].m = f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            /* (max - min) * id rounds to at most 31.5: no clamp needed, as in ggml */
            uint8_t lo = (uint8_t)((xb[j] - min) * id + 0.5f), hi = (uint8_t)((xb[j + QK / 2] - min) * id + 0.5f);
            y[b].qs[j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            qh |= (uint32_t)((lo >> 4) & 1) << j | (uint32_t)((hi >> 4) & 1) << (j + QK / 2);
        }
        put_qh(y[b].qh, qh);
    }
}

/* ---- k-quants: ggml's reference fits ---- */

/* make_qkx2_quants: n values as scale * L + min (L in 0..nmax, min <= 0),
 * weighted least squares over nstep + 1 trial scales around nmax / range.
 * Returns the scale, *neg_min = -min. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                           float rmin, float rdelta, int nstep, int use_mad)
{
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        best += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    uint8_t Laux[32];
    for (int is = 0; nstep >= 1 && is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) { this_min = 0; this_scale = sum_xl / sum_l2; }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
        }
        if (err < best) {
            memcpy(L, Laux, (size_t)n);
            best = err; scale = this_scale; min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* sum w x l and sum w l l of the rounded l = nearest(iscale x) in [-nmax, nmax-1] (weights x^2) */
static void qx_sums(int n, int nmax, const float *x, float iscale, int8_t *L, float *sumlx, float *suml2)
{
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        if (L) L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        a += w * x[i] * l;
        b += w * l * l;
    }
    *sumlx = a; *suml2 = b;
}

/* make_qx_quants with rmse_type 1 and no importance (Q6_K): symmetric
 * scale * (L - nmax), the best of 19 trial scales in x^2-weighted error. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < 1e-15f) { memset(L, 0, (size_t)n); return 0.0f; }
    float sumlx, suml2;
    qx_sums(n, nmax, x, -nmax / max, L, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        const float iscale = -(nmax + 0.1f * is) / max;
        qx_sums(n, nmax, x, iscale, NULL, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            qx_sums(n, nmax, x, iscale, L, &sumlx, &suml2);
            scale = sumlx / suml2; best = scale * sumlx;
        }
    }
    return scale;
}

/* make_q3_quants with do_rmse (Q3_K): symmetric levels -nmax..nmax-1, then
 * up to 5 passes of coordinate descent on the x^2-weighted error. L gets
 * l + nmax. */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < 1e-15f) { memset(L, 0, (size_t)n); return 0.0f; }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i], slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            int nl = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (nl == L[i]) continue;
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl; sumlx = slx; suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Q4_K / Q5_K: 8 sub-blocks of 32 fitted as scale * q - min (q in 0..nmax),
 * the scales and mins quantized to 6 bits against the super-block's d and
 * dmin and packed in 12 bytes; then every q recomputed from the rounded
 * scales. L gets the 256 quants. */
static void fit_k32(const float *x, int nmax, float rmin, int nstep, uint8_t sc12[12], uint16_t *dh,
                    uint16_t *dminh, uint8_t L[QK_K])
{
    float scales[8], mins[8], w[32], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xj[l] * xj[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xj[l]);
        scales[j] = fit_scale_min(32, nmax, xj, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    memset(sc12, 0, 12);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]), lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) { sc12[j] = ls; sc12[j + 4] = lm; continue; }
        sc12[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
        sc12[j - 4] |= (uint8_t)((ls >> 4) << 6);
        sc12[j] |= (uint8_t)((lm >> 4) << 6);
    }
    *dh = f32_to_f16(max_scale / 63.0f);
    *dminh = f32_to_f16(max_min / 63.0f);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        kq_scale_min(sc12, j, &sc, &m);
        const float d = f16_to_f32(*dh) * sc;
        if (!d) continue;
        const float dm = f16_to_f32(*dminh) * m;
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)clampi(nearest_int((x[32 * j + i] + dm) / d), 0, nmax);
    }
}

void quant_row_q4_k(const float *x, block_q4_k *y, int64_t k)
{
    uint8_t L[QK_K];
    for (int64_t b = 0; b < k / QK_K; b++, x += QK_K) {
        fit_k32(x, 15, -1.0f, 20, y[b].scales, &y[b].d, &y[b].dmin, L);
        for (int j = 0; j < QK_K; j += 64)
            for (int l = 0; l < 32; l++) y[b].qs[j / 2 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

void quant_row_q5_k(const float *x, block_q5_k *y, int64_t k)
{
    uint8_t L[QK_K];
    for (int64_t b = 0; b < k / QK_K; b++, x += QK_K) {
        fit_k32(x, 31, -0.5f, 15, y[b].scales, &y[b].d, &y[b].dmin, L);
        memset(y[b].qh, 0, sizeof y[b].qh);
        for (int i = 0; i < QK_K; i++) {
            /* low nibble: the first 32 of each 64; the fifth bit of value i in qh[i % 32], bit i / 32 */
            uint8_t *q = &y[b].qs[32 * (i / 64) + i % 32];
            if (i % 64 < 32) *q = (uint8_t)(L[i] & 15);
            else *q |= (uint8_t)((L[i] & 15) << 4);
            y[b].qh[i % 32] |= (uint8_t)((L[i] >> 4) << (i / 32));
        }
    }
}

/* 2-bit quants of value i in byte 32 * (i / 128) + i % 32, bits 2 * ((i % 128) / 32) (Q2_K, Q3_K) */
static void pack_2bit(const uint8_t L[QK_K], uint8_t qs[QK_K / 4])
{
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

void quant_row_q2_k(const float *x, block_q2_k *y, int64_t k)
{
    uint8_t L[QK_K];
    float w[16], scales[16], mins[16];
    for (int64_t b = 0; b < k / QK_K; b++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        /* scales in the low nibble, mins in the high one, each against a 15-step super-block scale */
        memset(y[b].scales, 0, 16);
        if (max_scale > 0)
            for (int j = 0; j < 16; j++) y[b].scales[j] = (uint8_t)nearest_int(15.0f / max_scale * scales[j]);
        y[b].d = f32_to_f16(max_scale > 0 ? max_scale / 15.0f : 0.0f);
        if (max_min > 0)
            for (int j = 0; j < 16; j++) y[b].scales[j] |= (uint8_t)(nearest_int(15.0f / max_min * mins[j]) << 4);
        y[b].dmin = f32_to_f16(max_min > 0 ? max_min / 15.0f : 0.0f);
        for (int j = 0; j < 16; j++) {
            const float d = f16_to_f32(y[b].d) * (y[b].scales[j] & 15);
            if (!d) continue;
            const float dm = f16_to_f32(y[b].dmin) * (y[b].scales[j] >> 4);
            for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)clampi(nearest_int((x[16 * j + i] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[b].qs);
    }
}

void quant_row_q3_k(const float *x, block_q3_k *y, int64_t k)
{
    int8_t L[QK_K];
    float scales[16];
    for (int64_t b = 0; b < k / QK_K; b++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) { amax = fabsf(scales[j]); max_scale = scales[j]; }
        }
        memset(y[b].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                l = (int8_t)(clampi(l, -32, 31) + 32);
                if (j < 8) y[b].scales[j] = (uint8_t)(l & 15);
                else y[b].scales[j - 8] |= (uint8_t)((l & 15) << 4);
                y[b].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[b].d = f32_to_f16(1 / iscale);
        } else {
            y[b].d = f32_to_f16(0.0f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = f16_to_f32(y[b].d) * q3k_scale(y[b].scales, j);
            if (!d) continue;
            for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(clampi(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
        }
        /* the high bit of value i in hmask[i % 32], bit i / 32; the low two bits as Q2_K */
        uint8_t lo[QK_K];
        memset(y[b].hmask, 0, sizeof y[b].hmask);
        for (int i = 0; i < QK_K; i++) {
            if (L[i] > 3) y[b].hmask[i % 32] |= (uint8_t)(1u << (i / 32));
            lo[i] = (uint8_t)(L[i] & 3);
        }
        pack_2bit(lo, y[b].qs);
    }
}

void quant_row_q6_k(const float *x, block_q6_k *y, int64_t k)
{
    int8_t L[QK_K];
    float scales[16];
    for (int64_t b = 0; b < k / QK_K; b++, x += QK_K) {
        float max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale_sym(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) { max_abs = fabsf(scales[j]); max_scale = scales[j]; }
        }
        if (max_abs < 1e-15f) { memset(&y[b], 0, sizeof y[b]); continue; }
        const float iscale = -128.0f / max_scale;
        y[b].d = f32_to_f16(1 / iscale);
        for (int j = 0; j < 16; j++) {
            int l = nearest_int(iscale * scales[j]);
            y[b].scales[j] = (int8_t)(l < 127 ? l : 127);
        }
        for (int j = 0; j < 16; j++) {
            const float d = f16_to_f32(y[b].d) * y[b].scales[j];
            if (!d) continue;
            for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(clampi(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
        }
        /* low 4 bits of value i: ql[64 * (i/128) + i % 64], high nibble for (i % 128) >= 64;
         * high 2 bits: qh[32 * (i/128) + i % 32] at bit 2 * ((i % 128) / 32) */
        memset(y[b].ql, 0, sizeof y[b].ql);
        memset(y[b].qh, 0, sizeof y[b].qh);
        for (int i = 0; i < QK_K; i++) {
            const int h = i / 128, r = i % 128;
            y[b].ql[64 * h + r % 64] |= (uint8_t)((L[i] & 15) << (r < 64 ? 0 : 4));
            y[b].qh[32 * h + r % 32] |= (uint8_t)((L[i] >> 4) << (2 * (r / 32)));
        }
    }
}

void quant_row_q8_k(const float *x, block_q8_k *y, int64_t k)
{
    for (int64_t b = 0; b < k / QK_K; b++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        memset(&y[b], 0, sizeof y[b]);   /* ggml leaves an all-zero block's sums unset; here they are 0 */
        if (!amax) continue;
        /* -127 / max, not 128: the top quant is then +-127 only, as in ggml */
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            y[b].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += y[b].qs[16 * j + i];
            y[b].bsums[j] = (int16_t)s;
        }
        y[b].d = 1 / iscale;
    }
}

/* ---- dequantization: ggml's dequantize_row_*, value by value ---- */

static void dequant_legacy(uint32_t type, const void *row, float *out, int64_t k)
{
    for (int64_t b = 0; b < k / QK; b++, out += QK) {
        const unsigned char *p = (const unsigned char *)row + (size_t)b * (size_t)tensor_row_bytes(type, QK);
        if (type == GGML_Q4_1) {
            const block_q4_1 *y = (const block_q4_1 *)p;
            const float d = f16_to_f32(y->d), m = f16_to_f32(y->m);
            for (int j = 0; j < QK / 2; j++) {
                out[j] = (y->qs[j] & 15) * d + m;
                out[j + QK / 2] = (y->qs[j] >> 4) * d + m;
            }
        } else if (type == GGML_Q5_0) {
            const block_q5_0 *y = (const block_q5_0 *)p;
            const float d = f16_to_f32(y->d);
            const uint32_t qh = get_qh(y->qh);
            for (int j = 0; j < QK / 2; j++) {
                out[j] = (float)((int)((y->qs[j] & 15) | ((qh >> j) & 1) << 4) - 16) * d;
                out[j + QK / 2] = (float)((int)((y->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16) * d;
            }
        } else {   /* Q5_1 */
            const block_q5_1 *y = (const block_q5_1 *)p;
            const float d = f16_to_f32(y->d), m = f16_to_f32(y->m);
            const uint32_t qh = get_qh(y->qh);
            for (int j = 0; j < QK / 2; j++) {
                out[j] = (float)((y->qs[j] & 15) | ((qh >> j) & 1) << 4) * d + m;
                out[j + QK / 2] = (float)((y->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) * d + m;
            }
        }
    }
}


static float f16_at(const void *p) { uint16_t h; memcpy(&h, p, 2); return f16_to_f32(h); }

/* The 2-bit fields of Q2_K / Q3_K: value 128h + 32j + l in byte 32h + l at bit 2j. */
static void unpack_2bit(const uint8_t *qs, int8_t *q)
{
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) q[128 * h + 32 * j + l] = (int8_t)((qs[32 * h + l] >> (2 * j)) & 3);
}

/* Loops in the layouts' own order (quant.h), so that they vectorize: the
 * unpacking is most of the reference kernels' time. */
void kq_unpack(uint32_t type, const void *blk, kq_block *o)
{
    memset(o->mn, 0, sizeof o->mn);
    o->dmin = 0.0f;
    o->sub = 16;
    switch (type) {
    case GGML_Q2_K: {
        const block_q2_k *y = blk;
        o->d = f16_to_f32(y->d); o->dmin = f16_to_f32(y->dmin);
        for (int j = 0; j < 16; j++) { o->sc[j] = y->scales[j] & 15; o->mn[j] = y->scales[j] >> 4; }
        unpack_2bit(y->qs, o->q);
        return;
    }
    case GGML_Q3_K: {
        const block_q3_k *y = blk;
        o->d = f16_to_f32(y->d);
        for (int j = 0; j < 16; j++) o->sc[j] = (int16_t)q3k_scale(y->scales, j);
        unpack_2bit(y->qs, o->q);
        /* the high bit of value 32m + l: bit m of hmask[l]; without it the value is 4 lower */
        for (int m = 0; m < 8; m++)
            for (int l = 0; l < 32; l++) o->q[32 * m + l] = (int8_t)(o->q[32 * m + l] + 4 * ((y->hmask[l] >> m) & 1) - 4);
        return;
    }
    case GGML_Q4_K: case GGML_Q5_K: {
        /* the two lay out d, dmin and the 12 scale bytes alike, first */
        const uint8_t *p = blk, *qs = p + (type == GGML_Q4_K ? 16 : 48), *qh = p + 16;
        o->d = f16_at(p); o->dmin = f16_at(p + 2); o->sub = 32;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            kq_scale_min(p + 4, j, &sc, &m);
            o->sc[j] = (int16_t)sc; o->mn[j] = (int16_t)m;
        }
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                o->q[64 * g + l] = (int8_t)(qs[32 * g + l] & 15);
                o->q[64 * g + 32 + l] = (int8_t)(qs[32 * g + l] >> 4);
            }
        if (type == GGML_Q5_K)   /* the fifth bit of value 32m + l: bit m of qh[l] */
            for (int m = 0; m < 8; m++)
                for (int l = 0; l < 32; l++) o->q[32 * m + l] = (int8_t)(o->q[32 * m + l] | ((qh[l] >> m) & 1) << 4);
        return;
    }
    case GGML_Q6_K: {
        const block_q6_k *y = blk;
        o->d = f16_to_f32(y->d);
        for (int j = 0; j < 16; j++) o->sc[j] = y->scales[j];
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *ql = y->ql + 64 * h, hb = y->qh[32 * h + l];
                int8_t *q = o->q + 128 * h;
                q[l] = (int8_t)(((ql[l] & 15) | (hb & 3) << 4) - 32);
                q[l + 32] = (int8_t)(((ql[l + 32] & 15) | ((hb >> 2) & 3) << 4) - 32);
                q[l + 64] = (int8_t)(((ql[l] >> 4) | ((hb >> 4) & 3) << 4) - 32);
                q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | ((hb >> 6) & 3) << 4) - 32);
            }
        return;
    }
    default: {   /* Q8_K */
        const block_q8_k *y = blk;
        o->d = y->d;
        for (int j = 0; j < 16; j++) o->sc[j] = 1;
        memcpy(o->q, y->qs, QK_K);
    }
    }
}

/* One super-block to 256 floats in ggml's float operations, (d * sc) * q -
 * dmin * mn (for Q3_K, Q6_K and Q8_K dmin * mn is 0 and changes nothing;
 * Q8_K's sc is 1, so d * sc is d). */
static void dequant_kblock(uint32_t type, const void *blk, float *out)
{
    kq_block b;
    kq_unpack(type, blk, &b);
    for (int i = 0; i < QK_K; i++) out[i] = b.d * b.sc[i / b.sub] * b.q[i] - b.dmin * b.mn[i / b.sub];
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
    case GGML_Q4_1: case GGML_Q5_0: case GGML_Q5_1: dequant_legacy(type, row, out, k); break;
    case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K: case GGML_Q8_K: {
        const size_t bs = (size_t)tensor_row_bytes(type, QK_K);
        for (int64_t b = 0; b < k / QK_K; b++) dequant_kblock(type, (const unsigned char *)row + (size_t)b * bs, out + b * QK_K);
        break;
    }
    default: memcpy(out, row, sizeof(float) * (size_t)k); break;
    }
}

/* Where a block keeps its F16 scales (and mins): byte offsets, -1 ends. */
static const int16_t *scale_offsets(uint32_t type)
{
    static const int16_t d0[] = { 0, -1 }, dm[] = { 0, 2, -1 }, q2k[] = { 80, 82, -1 }, q3k[] = { 108, -1 },
                         q6k[] = { 208, -1 };
    switch (type) {
    case GGML_Q4_0: case GGML_Q5_0: case GGML_Q8_0: return d0;
    case GGML_Q4_1: case GGML_Q5_1: case GGML_Q4_K: case GGML_Q5_K: return dm;
    case GGML_Q2_K: return q2k;
    case GGML_Q3_K: return q3k;
    case GGML_Q6_K: return q6k;
    default: return NULL;
    }
}

int64_t quant_find_nonfinite(uint32_t type, const void *data, int64_t n)
{
    const unsigned char *p = data;
    switch (type) {
    case GGML_F32: case GGML_Q8_K: {
        /* Q8_K: the float d heads each block; the quants are integers */
        const int64_t step = type == GGML_F32 ? 1 : QK_K;
        const size_t bs = type == GGML_F32 ? 4 : sizeof(block_q8_k);
        for (int64_t i = 0; i < n / step; i++) {
            uint32_t u;
            memcpy(&u, p + (size_t)i * bs, 4);
            if ((u & 0x7f800000u) == 0x7f800000u) return i * step;   /* exponent all ones: inf or NaN */
        }
        return -1;
    }
    case GGML_F16: case GGML_BF16: {
        const uint16_t mask = type == GGML_F16 ? 0x7c00 : 0x7f80;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            if ((h & mask) == mask) return i;
        }
        return -1;
    }
    default: {   /* the blocks' F16 scales and mins; the quants are integers */
        const int16_t *off = scale_offsets(type);
        if (!off) return -1;
        const int64_t bk = tensor_block_size(type);
        const size_t bs = (size_t)tensor_row_bytes(type, bk);
        for (int64_t b = 0; b < n / bk; b++)
            for (const int16_t *o = off; *o != -1; o++) {
                uint16_t d;
                memcpy(&d, p + (size_t)b * bs + (size_t)*o, 2);
                if ((d & 0x7c00) == 0x7c00) return b * bk;
            }
        return -1;
    }
    }
}

void quant_row(uint32_t type, const float *x, void *out, int64_t k)
{
    switch (type) {
    case GGML_F16: for (int64_t i = 0; i < k; i++) ((uint16_t *)out)[i] = f32_to_f16(x[i]); break;
    case GGML_BF16: for (int64_t i = 0; i < k; i++) ((uint16_t *)out)[i] = f32_to_bf16(x[i]); break;
    case GGML_Q8_0: quant_row_q8_0(x, out, k); break;
    case GGML_Q4_0: quant_row_q4_0(x, out, k); break;
    case GGML_Q4_1: quant_row_q4_1(x, out, k); break;
    case GGML_Q5_0: quant_row_q5_0(x, out, k); break;
    case GGML_Q5_1: quant_row_q5_1(x, out, k); break;
    case GGML_Q2_K: quant_row_q2_k(x, out, k); break;
    case GGML_Q3_K: quant_row_q3_k(x, out, k); break;
    case GGML_Q4_K: quant_row_q4_k(x, out, k); break;
    case GGML_Q5_K: quant_row_q5_k(x, out, k); break;
    case GGML_Q6_K: quant_row_q6_k(x, out, k); break;
    case GGML_Q8_K: quant_row_q8_k(x, out, k); break;
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

size_t act_q8_1_stride(int64_t k)
{
    size_t n = (size_t)k + (size_t)(k / QK) * 2 * sizeof(float);
    return (n + 63) & ~(size_t)63;
}

void act_q8_1_ref(const float *x, void *row, int64_t k)
{
    int8_t *qs = (int8_t *)row;
    float *d = (float *)(qs + k), *s = d + k / QK;
    for (int64_t b = 0; b < k / QK; b++) {
        block_q8_0 blk;
        quant_row_q8_0(x + b * QK, &blk, QK);   /* Q8_1's quants and d are Q8_0's */
        memcpy(qs + b * QK, blk.qs, QK);
        d[b] = f16_to_f32(blk.d);
        /* two loops: one mixing a float max and an int sum crashes gcc 12's aarch64 vectoriser */
        float amax = 0;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[b * QK + j]));
        int sum = 0;
        for (int j = 0; j < QK; j++) sum += blk.qs[j];
        s[b] = f16_to_f32(f32_to_f16((float)sum * (amax / 127.0f)));   /* ggml: F16 of sum * d, d unrounded */
    }
}

size_t act_q8k_stride(int64_t k)
{
    size_t n = (size_t)k + (size_t)(k / QK_K) * sizeof(float) + (size_t)(k / 16) * sizeof(int16_t);
    return (n + 63) & ~(size_t)63;
}

void act_q8k_ref(const float *x, void *row, int64_t k)
{
    int8_t *qs = (int8_t *)row;
    float *d = (float *)(qs + k);
    int16_t *bsums = (int16_t *)(d + k / QK_K);
    for (int64_t b = 0; b < k / QK_K; b++) {
        block_q8_k blk;
        quant_row_q8_k(x + b * QK_K, &blk, QK_K);
        memcpy(qs + b * QK_K, blk.qs, QK_K);
        d[b] = blk.d;
        memcpy(bsums + b * (QK_K / 16), blk.bsums, sizeof blk.bsums);
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

size_t act_bf16_stride(int64_t k)
{
    return (size_t)act_bf16_cols(k) * sizeof(uint16_t);   /* 64 bytes per 32 values */
}

void act_bf16_ref(const float *x, void *row, int64_t k)
{
    uint16_t *h = row;
    for (int64_t i = 0; i < act_bf16_cols(k); i++) h[i] = i < k ? bf16_daz(x[i]) : 0;
}
