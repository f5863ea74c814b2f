/* kernels_neon.c - the NEON kernel set (aarch64), with the dot-product
 * extension (SDOT) for Q8_0 / Q4_0 weights where the CPU has it, and the
 * k-quants bitwise the reference kernels (below).
 *
 * Canonical order as in kernels_avx2.c with 4-lane accumulators: each output
 * has one float32x4 accumulator over the columns, 4 at a time (the last 4
 * zero-padded), summed by hsum4's fixed tree. Quantized weights: per 32-block
 * the 4 int32 lanes (lane j = products 4j..4j+3 of each half of the block)
 * go into the accumulator by one FMA with d_w * d_x; the SDOT and the plain
 * NEON paths make the same exact integers, so results do not depend on the
 * extension. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>
#include "cpu.h"
#include "kernels.h"
#include "kernels_lora.h"
#include "quant.h"

#define AI static inline __attribute__((always_inline))
/* short names of the types, for the token-pasted kernel names */
enum { TF32 = GGML_F32, TF16 = GGML_F16, TBF16 = GGML_BF16 };

AI float hsum4(float32x4_t v)
{
    float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
}

AI float32x4_t ldw(const char *row, int64_t k, int t)
{
    if (t == TF16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)row + k)));
    if (t == TBF16) return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)row + k), 16));
    return vld1q_f32((const float *)row + k);
}

AI float32x4_t ldw_tail(const char *row, int64_t k, int rem, int t)
{
    unsigned char tmp[16] = { 0 };
    size_t es = t == TF32 ? 4 : 2;
    memcpy(tmp, row + es * (size_t)k, es * (size_t)rem);
    return ldw((const char *)tmp, 0, t);
}

AI float32x4_t ldx_tail(const float *x, int rem)
{
    float tmp[4] = { 0, 0, 0, 0 };
    memcpy(tmp, x, sizeof(float) * (size_t)rem);
    return vld1q_f32(tmp);
}

AI void tile_f(const char *w, size_t rb, int t, const char *x, size_t xs, int64_t K, int R, int C,
               float *y, int64_t ldy, int acc)
{
    float32x4_t a[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) a[r][c] = vdupq_n_f32(0);
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
        float32x4_t xv[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) xv[c] = vld1q_f32((const float *)(x + (size_t)c * xs) + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            float32x4_t wv = ldw(w + (size_t)r * rb, k, t);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) a[r][c] = vfmaq_f32(a[r][c], wv, xv[c]);
        }
    }
    if (k < K) {
        const int rem = (int)(K - k);
        float32x4_t xv[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) xv[c] = ldx_tail((const float *)(x + (size_t)c * xs) + k, rem);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            float32x4_t wv = ldw_tail(w + (size_t)r * rb, k, rem, t);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) a[r][c] = vfmaq_f32(a[r][c], wv, xv[c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float s = hsum4(a[r][c]), *p = y + (int64_t)c * ldy + r;
            *p = acc ? *p + s : s;
        }
}

typedef void (*tile_fn)(const char *w, size_t rb, const char *x, size_t xs, int64_t K, float *y,
                        int64_t ldy, int acc);
#define TILE(T, R, C) \
    static void tile_##T##_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, \
                                     float *y, int64_t ldy, int acc) \
    { tile_f(w, rb, T, x, xs, K, R, C, y, ldy, acc); }
#define ROW(T, R) TILE(T, R, 1) TILE(T, R, 2) TILE(T, R, 3) TILE(T, R, 4)
#define TILES(T) TILE(T, 8, 1) ROW(T, 1) ROW(T, 2) ROW(T, 3) ROW(T, 4)
TILES(TF32)
TILES(TF16)
TILES(TBF16)
#define GROW(T, R) { tile_##T##_##R##_1, tile_##T##_##R##_2, tile_##T##_##R##_3, tile_##T##_##R##_4 }
#define GRID(T) { GROW(T, 1), GROW(T, 2), GROW(T, 3), GROW(T, 4) }
static const tile_fn grid_f32[4][4] = GRID(TF32), grid_f16[4][4] = GRID(TF16), grid_bf16[4][4] = GRID(TBF16);

#define IB 64

static void mm_float(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc, float *scratch)
{
    const int t = (int)w->type;
    const int64_t K = w->cols;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    const tile_fn (*grid)[4] = t == TF16 ? grid_f16 : t == TBF16 ? grid_bf16 : grid_f32;
    if (n <= 2) {
        int64_t o = o0;
        if (n == 1) {
            tile_fn wide = t == TF16 ? tile_TF16_8_1 : t == TBF16 ? tile_TBF16_8_1 : tile_TF32_8_1;
            for (; o + 8 <= o1; o += 8) wide(W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc);
        } else {
            for (; o + 4 <= o1; o += 4) grid[3][1](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc);
        }
        for (; o < o1; o++) grid[0][n - 1](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc);
        return;
    }
    for (int32_t i0 = 0; i0 < n; i0 += IB) {
        const int32_t i1 = n - i0 < IB ? n : i0 + IB;
        for (int64_t o = o0; o < o1; o += 4) {
            const int R = o1 - o < 4 ? (int)(o1 - o) : 4;
            const char *ws = W + (size_t)o * rb;
            size_t wrb = rb;
            const tile_fn (*g)[4] = grid;
            if (t != TF32 && scratch) {   /* convert the strip once for all rows of the block */
                for (int r = 0; r < R; r++) {
                    const char *src = ws + (size_t)r * rb;
                    float *dst = scratch + (size_t)r * (size_t)K;
                    int64_t k = 0;
                    for (; k + 4 <= K; k += 4) vst1q_f32(dst + k, ldw(src, k, t));
                    for (; k < K; k++)
                        dst[k] = t == TF16 ? f16_to_f32(((const uint16_t *)src)[k]) : bf16_to_f32(((const uint16_t *)src)[k]);
                }
                ws = (const char *)scratch; wrb = sizeof(float) * (size_t)K; g = grid_f32;
            }
            int32_t i = i0;
            for (; i + 4 <= i1; i += 4) g[R - 1][3](ws, wrb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc);
            if (i < i1) g[R - 1][i1 - i - 1](ws, wrb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc);
        }
    }
}

/* ---- quantized weights x Q8_0 activations ---- */

AI void ldq(const char *row, int64_t b, int t, int8x16_t *lo, int8x16_t *hi)
{
    if (t == GGML_Q4_0) {
        const block_q4_0 *q = (const block_q4_0 *)row + b;
        uint8x16_t v = vld1q_u8(q->qs);
        *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), vdupq_n_s8(8));   /* values 0..15 */
        *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));               /* values 16..31 */
        return;
    }
    const block_q8_0 *q = (const block_q8_0 *)row + b;
    *lo = vld1q_s8(q->qs);
    *hi = vld1q_s8(q->qs + 16);
}

AI float ldd(const char *row, int64_t b, int t)
{
    return f16_to_f32(t == GGML_Q4_0 ? ((const block_q4_0 *)row + b)->d : ((const block_q8_0 *)row + b)->d);
}

/* lane j = products 4j..4j+3 of both 16-value halves (exact) */
AI int32x4_t dot16_plain(int8x16_t w, int8x16_t x)
{
    int16x8_t p0 = vmull_s8(vget_low_s8(w), vget_low_s8(x)), p1 = vmull_s8(vget_high_s8(w), vget_high_s8(x));
    return vpaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1));
}

AI float32x4_t dotq_plain(int8x16_t wl, int8x16_t wh, int8x16_t xl, int8x16_t xh)
{
    return vcvtq_f32_s32(vaddq_s32(dot16_plain(wl, xl), dot16_plain(wh, xh)));
}

#define QTILE_BODY(DOTQ) \
    float32x4_t a[4][4]; \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) a[r][c] = vdupq_n_f32(0); \
    const int64_t nb = K / QK; \
    for (int64_t b = 0; b < nb; b++) { \
        int8x16_t xl[4], xh[4]; \
        float xd[4]; \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) { \
            const char *xr = x + (size_t)c * xs; \
            xl[c] = vld1q_s8(act_q8_qs(xr) + b * QK); \
            xh[c] = vld1q_s8(act_q8_qs(xr) + b * QK + 16); \
            xd[c] = act_q8_d(xr, K)[b]; \
        } \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) { \
            const char *wr = w + (size_t)r * rb; \
            int8x16_t wl, wh; \
            ldq(wr, b, t, &wl, &wh); \
            float wd = ldd(wr, b, t); \
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) \
                a[r][c] = vfmaq_f32(a[r][c], vdupq_n_f32(wd * xd[c]), DOTQ(wl, wh, xl[c], xh[c])); \
        } \
    } \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) { \
            float s = hsum4(a[r][c]), *p = y + (int64_t)c * ldy + r; \
            *p = acc ? *p + s : s; \
        }

AI void tile_q(const char *w, size_t rb, int t, const char *x, size_t xs, int64_t K, int R, int C,
               float *y, int64_t ldy, int acc)
{
    QTILE_BODY(dotq_plain)
}

#define QTILE(T, R, C) \
    static void qtile_##T##_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, \
                                      float *y, int64_t ldy, int acc) \
    { tile_q(w, rb, T, x, xs, K, R, C, y, ldy, acc); }
#define QROW(T, R) QTILE(T, R, 1) QTILE(T, R, 2) QTILE(T, R, 3) QTILE(T, R, 4)
#define QTILES(T) QROW(T, 1) QROW(T, 2) QROW(T, 3) QROW(T, 4)
enum { TQ8 = GGML_Q8_0, TQ4 = GGML_Q4_0 };
QTILES(TQ8)
QTILES(TQ4)
#define QGROW(P, T, R) { P##_##T##_##R##_1, P##_##T##_##R##_2, P##_##T##_##R##_3, P##_##T##_##R##_4 }
#define QGRID(P, T) { QGROW(P, T, 1), QGROW(P, T, 2), QGROW(P, T, 3), QGROW(P, T, 4) }
static const tile_fn grid_q8[4][4] = QGRID(qtile, TQ8), grid_q4[4][4] = QGRID(qtile, TQ4);

/* The same tiles with SDOT, compiled for the dot-product extension and used
 * only where the CPU has it. */
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
AI float32x4_t dotq_sdot(int8x16_t wl, int8x16_t wh, int8x16_t xl, int8x16_t xh)
{
    return vcvtq_f32_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), wl, xl), wh, xh));
}

AI void tile_qd(const char *w, size_t rb, int t, const char *x, size_t xs, int64_t K, int R, int C,
                float *y, int64_t ldy, int acc)
{
    QTILE_BODY(dotq_sdot)
}

#define DTILE(T, R, C) \
    static void dtile_##T##_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, \
                                      float *y, int64_t ldy, int acc) \
    { tile_qd(w, rb, T, x, xs, K, R, C, y, ldy, acc); }
#define DROW(T, R) DTILE(T, R, 1) DTILE(T, R, 2) DTILE(T, R, 3) DTILE(T, R, 4)
DROW(TQ8, 1) DROW(TQ8, 2) DROW(TQ8, 3) DROW(TQ8, 4)
DROW(TQ4, 1) DROW(TQ4, 2) DROW(TQ4, 3) DROW(TQ4, 4)
#pragma GCC pop_options
static const tile_fn grid_q8d[4][4] = QGRID(dtile, TQ8), grid_q4d[4][4] = QGRID(dtile, TQ4);

static void mm_quant(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc)
{
    const int64_t K = w->cols;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    const int sdot = (cpu_features() & CPU_DOTPROD) != 0;
    const tile_fn (*g)[4] = w->type == GGML_Q4_0 ? (sdot ? grid_q4d : grid_q4) : (sdot ? grid_q8d : grid_q8);
    if (n == 1) {
        int64_t o = o0;
        for (; o + 4 <= o1; o += 4) g[3][0](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc);
        for (; o < o1; o++) g[0][0](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc);
        return;
    }
    for (int32_t i0 = 0; i0 < n; i0 += IB) {
        const int32_t i1 = n - i0 < IB ? n : i0 + IB;
        for (int64_t o = o0; o < o1; o += 4) {
            const int R = o1 - o < 4 ? (int)(o1 - o) : 4;
            const char *ws = W + (size_t)o * rb;
            int32_t i = i0;
            for (; i + 4 <= i1; i += 4) g[R - 1][3](ws, rb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc);
            if (i < i1) g[R - 1][i1 - i - 1](ws, rb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc);
        }
    }
}

/* ---- k-quants (Q2_K .. Q6_K) x Q8_K activations: bitwise the reference ----
 * As the AVX2 set's (kernels_avx2.c): a super-block taken apart into 256
 * unsigned codes u = q + bias in value order (bias: Q3_K 4, Q6_K 32, else 0)
 * and a 16-bit scale and min per 16 values; per 16 values vmull_s8 +
 * vmlal_high_s8 (|u x + u x| <= 2 * 63 * 128 fits 16 bits) and vmlal_n_s16 by
 * the scale give sum_g sc_g (u . x)_g exactly; the bias and the mins come
 * from the Q8_K block sums; kq_step adds the super-block as the reference
 * does. The reference's integers and float step: its bits. */
typedef struct {
    uint8_t u[QK_K];
    int16_t sc16[16], mn16[16];
    float   d, dmin;
    int32_t shift;   /* bias = 1 << shift; 0: none */
} kq_arm;

AI float f16at_arm(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return f16_to_f32(h); }
/* 1 << sh where byte of v has bit m, else 0 */
AI uint8x16_t bit_to_arm(uint8x16_t v, int m, int sh)
{
    return vandq_u8(vtstq_u8(v, vdupq_n_u8((uint8_t)(1 << m))), vdupq_n_u8((uint8_t)(1 << sh)));
}

static void kq_unpack_arm(uint32_t type, const uint8_t *p, kq_arm *o)
{
    const uint8x16_t m15 = vdupq_n_u8(15), m3 = vdupq_n_u8(3);
    switch (type) {
    case GGML_Q4_K: case GGML_Q5_K: {
        uint8_t sm[16];
        kq_scales_mins(p + 4, sm);
        o->d = f16at_arm(p); o->dmin = f16at_arm(p + 2); o->shift = 0;
        const uint8_t *qs = p + (type == GGML_Q4_K ? 16 : 48);
        for (int g = 0; g < 4; g++)
            for (int h = 0; h < 2; h++) {
                const uint8x16_t q = vld1q_u8(qs + 32 * g + 16 * h);
                uint8x16_t lo = vandq_u8(q, m15), hi = vshrq_n_u8(q, 4);
                if (type == GGML_Q5_K) {   /* the fifth bit of value 32m + l: bit m of qh[l] */
                    const uint8x16_t qh = vld1q_u8(p + 16 + 16 * h);
                    lo = vorrq_u8(lo, bit_to_arm(qh, 2 * g, 4));
                    hi = vorrq_u8(hi, bit_to_arm(qh, 2 * g + 1, 4));
                }
                vst1q_u8(o->u + 64 * g + 16 * h, lo);
                vst1q_u8(o->u + 64 * g + 32 + 16 * h, hi);
            }
        for (int j = 0; j < 8; j++) {
            o->sc16[2 * j] = o->sc16[2 * j + 1] = sm[j];
            o->mn16[2 * j] = o->mn16[2 * j + 1] = sm[8 + j];
        }
        return;
    }
    case GGML_Q6_K: {   /* ql[128], qh[64], int8 scales[16], d */
        o->d = f16at_arm(p + 208); o->dmin = 0.0f; o->shift = 5;
        for (int hh = 0; hh < 2; hh++)
            for (int h = 0; h < 2; h++) {
                const uint8x16_t a = vld1q_u8(p + 64 * hh + 16 * h), b = vld1q_u8(p + 64 * hh + 32 + 16 * h);
                const uint8x16_t hb = vld1q_u8(p + 128 + 32 * hh + 16 * h);
                uint8_t *u = o->u + 128 * hh + 16 * h;
                vst1q_u8(u, vorrq_u8(vandq_u8(a, m15), vshlq_n_u8(vandq_u8(hb, m3), 4)));
                vst1q_u8(u + 32, vorrq_u8(vandq_u8(b, m15), vshlq_n_u8(vandq_u8(hb, vdupq_n_u8(0x0C)), 2)));
                vst1q_u8(u + 64, vorrq_u8(vshrq_n_u8(a, 4), vandq_u8(hb, vdupq_n_u8(0x30))));
                vst1q_u8(u + 96, vorrq_u8(vshrq_n_u8(b, 4), vshrq_n_u8(vandq_u8(hb, vdupq_n_u8(0xC0)), 2)));
            }
        for (int j = 0; j < 16; j++) { o->sc16[j] = (int8_t)p[192 + j]; o->mn16[j] = 0; }
        return;
    }
    case GGML_Q3_K: {   /* hmask[32], qs[64], scales[12], d: u = 2 low bits + 4 x high bit */
        o->d = f16at_arm(p + 108); o->dmin = 0.0f; o->shift = 2;
        for (int hh = 0; hh < 2; hh++)
            for (int h = 0; h < 2; h++) {
                const uint8x16_t q = vld1q_u8(p + 32 + 32 * hh + 16 * h), hm = vld1q_u8(p + 16 * h);
                uint8_t *u = o->u + 128 * hh + 16 * h;
                vst1q_u8(u, vorrq_u8(vandq_u8(q, m3), bit_to_arm(hm, 4 * hh, 2)));
                vst1q_u8(u + 32, vorrq_u8(vandq_u8(vshrq_n_u8(q, 2), m3), bit_to_arm(hm, 4 * hh + 1, 2)));
                vst1q_u8(u + 64, vorrq_u8(vandq_u8(vshrq_n_u8(q, 4), m3), bit_to_arm(hm, 4 * hh + 2, 2)));
                vst1q_u8(u + 96, vorrq_u8(vshrq_n_u8(q, 6), bit_to_arm(hm, 4 * hh + 3, 2)));
            }
        for (int j = 0; j < 16; j++) { o->sc16[j] = (int16_t)q3k_scale(p + 96, j); o->mn16[j] = 0; }
        return;
    }
    default: {   /* Q2_K: scales[16] (scale | min << 4), qs[64], d, dmin */
        o->d = f16at_arm(p + 80); o->dmin = f16at_arm(p + 82); o->shift = 0;
        for (int hh = 0; hh < 2; hh++)
            for (int h = 0; h < 2; h++) {
                const uint8x16_t q = vld1q_u8(p + 16 + 32 * hh + 16 * h);
                uint8_t *u = o->u + 128 * hh + 16 * h;
                vst1q_u8(u, vandq_u8(q, m3));
                vst1q_u8(u + 32, vandq_u8(vshrq_n_u8(q, 2), m3));
                vst1q_u8(u + 64, vandq_u8(vshrq_n_u8(q, 4), m3));
                vst1q_u8(u + 96, vshrq_n_u8(q, 6));
            }
        for (int j = 0; j < 16; j++) { o->sc16[j] = p[j] & 15; o->mn16[j] = p[j] >> 4; }
        return;
    }
    }
}

/* One super-block of weights against 256 activation codes x with their 16 block sums: s plus its
 * contribution, as the reference adds it. */
AI float kq_dot_arm(const kq_arm *w, const int8_t *x, const int16_t *bsum, float xd, float s)
{
    int32x4_t acc = vdupq_n_s32(0);
    for (int g = 0; g < 16; g++) {
        const int8x16_t u = vreinterpretq_s8_u8(vld1q_u8(w->u + 16 * g)), xv = vld1q_s8(x + 16 * g);
        const int16x8_t t = vmlal_high_s8(vmull_s8(vget_low_s8(u), vget_low_s8(xv)), u, xv);
        acc = vmlal_n_s16(acc, vget_low_s16(t), w->sc16[g]);
        acc = vmlal_high_n_s16(acc, t, w->sc16[g]);
    }
    const int16x8_t b0 = vld1q_s16(bsum), b1 = vld1q_s16(bsum + 8);
    const int16x8_t s0 = vld1q_s16(w->sc16), s1 = vld1q_s16(w->sc16 + 8);
    const int16x8_t n0 = vld1q_s16(w->mn16), n1 = vld1q_s16(w->mn16 + 8);
    int32_t sumi = vaddvq_s32(acc);
    if (w->shift) {
        int32x4_t c = vmull_s16(vget_low_s16(s0), vget_low_s16(b0));
        c = vmlal_high_s16(c, s0, b0);
        c = vmlal_s16(c, vget_low_s16(s1), vget_low_s16(b1));
        c = vmlal_high_s16(c, s1, b1);
        sumi -= vaddvq_s32(c) * (1 << w->shift);
    }
    int32x4_t m = vmull_s16(vget_low_s16(n0), vget_low_s16(b0));
    m = vmlal_high_s16(m, n0, b0);
    m = vmlal_s16(m, vget_low_s16(n1), vget_low_s16(b1));
    m = vmlal_high_s16(m, n1, b1);
    return kq_step(s, w->d, w->dmin, xd, sumi, vaddvq_s32(m));
}

enum { KQ_ARM_STREAM = 4 };

static void mm_kquant_neon(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n, int64_t o0,
                           int64_t o1, int acc, float *scratch)
{
    if (w->type == GGML_Q8_K) {   /* never in a model file: the reference */
        k_matmul_ref_range(w, x, xs, y, ldy, n, o0, o1, acc, scratch);
        return;
    }
    const int64_t K = w->cols, nb = K / QK_K;
    const size_t rb = tensor_row_bytes(w->type, K), bs = (size_t)tensor_row_bytes(w->type, QK_K);
    const char *X = x;
    _Static_assert(sizeof(kq_arm) <= 16 * sizeof(float) * QK_K, "an unpacked row fits the matmul scratch");
    kq_arm *rowbuf = scratch && n > KQ_ARM_STREAM ? (kq_arm *)scratch : NULL;
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * rb;
        if (rowbuf) {   /* each weight row taken apart once for all activation rows */
            for (int64_t b = 0; b < nb; b++) kq_unpack_arm(w->type, row + (size_t)b * bs, rowbuf + b);
            for (int32_t i = 0; i < n; i++) {
                const char *xi = X + (size_t)i * xs;
                const float *xd = act_q8k_d(xi, K);
                float s = 0.0f;
                for (int64_t b = 0; b < nb; b++)
                    s = kq_dot_arm(rowbuf + b, act_q8_qs(xi) + b * QK_K, act_q8k_bsums(xi, K) + b * 16, xd[b], s);
                float *yo = y + (int64_t)i * ldy + o;
                *yo = acc ? *yo + s : s;
            }
            continue;
        }
        for (int32_t i0 = 0; i0 < n; i0 += KQ_ARM_STREAM) {
            const int32_t m = n - i0 < KQ_ARM_STREAM ? n - i0 : KQ_ARM_STREAM;
            float s[KQ_ARM_STREAM] = { 0 };
            kq_arm one;
            for (int64_t b = 0; b < nb; b++) {
                kq_unpack_arm(w->type, row + (size_t)b * bs, &one);
                for (int32_t c = 0; c < m; c++) {
                    const char *xi = X + (size_t)(i0 + c) * xs;
                    s[c] = kq_dot_arm(&one, act_q8_qs(xi) + b * QK_K, act_q8k_bsums(xi, K) + b * 16, act_q8k_d(xi, K)[b], s[c]);
                }
            }
            for (int32_t c = 0; c < m; c++) {
                float *yo = y + (int64_t)(i0 + c) * ldy + o;
                *yo = acc ? *yo + s[c] : s[c];
            }
        }
    }
}

static void matmul_neon(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n,
                        int64_t o0, int64_t o1, int acc, float *scratch)
{
    switch (w->type) {
    case GGML_F32: case GGML_F16: case GGML_BF16:
        mm_float(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    case GGML_Q8_0: case GGML_Q4_0:
        mm_quant(w, x, xs, y, ldy, n, o0, o1, acc); break;
    case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K: case GGML_Q8_K:
        mm_kquant_neon(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    default:
        k_matmul_ref_range(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    }
}

/* ---- activations to Q8_0: bitwise the reference quantizer ---- */

static void act_q8_neon(const float *x, void *row, int64_t k)
{
    int8_t *qs = (int8_t *)row;
    float *dd = (float *)(qs + k);
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        float32x4_t v[8], mx = vdupq_n_f32(0);
        for (int j = 0; j < 8; j++) { v[j] = vld1q_f32(xb + 4 * j); mx = vmaxq_f32(mx, vabsq_f32(v[j])); }
        const float amax = vmaxvq_f32(mx), d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        dd[b] = f16_to_f32(f32_to_f16(d));
        for (int j = 0; j < 8; j += 2) {
            /* vrndaq: round to nearest, ties away from zero, as roundf */
            int32x4_t q0 = vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(v[j], id)));
            int32x4_t q1 = vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(v[j + 1], id)));
            int16x8_t q = vcombine_s16(vqmovn_s32(q0), vqmovn_s32(q1));
            vst1_s8(qs + b * QK + 4 * j, vqmovn_s16(q));
        }
    }
}

/* ---- exp, SwiGLU, RMSNorm ---- */

AI float32x4_t exp4(float32x4_t x)
{
    x = vminq_f32(x, vdupq_n_f32(88.3762626647949f));
    x = vmaxq_f32(x, vdupq_n_f32(-88.3762626647949f));
    float32x4_t fx = vrndmq_f32(vfmaq_f32(vdupq_n_f32(0.5f), x, vdupq_n_f32(1.44269504088896341f)));
    x = vfmsq_f32(x, fx, vdupq_n_f32(0.693359375f));
    x = vfmsq_f32(x, fx, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t z = vmulq_f32(x, x), y = vdupq_n_f32(1.9875691500E-4f);
    y = vfmaq_f32(vdupq_n_f32(1.3981999507E-3f), y, x);
    y = vfmaq_f32(vdupq_n_f32(8.3334519073E-3f), y, x);
    y = vfmaq_f32(vdupq_n_f32(4.1665795894E-2f), y, x);
    y = vfmaq_f32(vdupq_n_f32(1.6666665459E-1f), y, x);
    y = vfmaq_f32(vdupq_n_f32(5.0000001201E-1f), y, x);
    y = vfmaq_f32(vaddq_f32(x, vdupq_n_f32(1.0f)), y, z);
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(fx), vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(e));
}

static void swiglu_neon(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vld1q_f32(g + i);
        float32x4_t s = vdivq_f32(v, vaddq_f32(vdupq_n_f32(1.0f), exp4(vnegq_f32(v))));
        vst1q_f32(g + i, vmulq_f32(s, vld1q_f32(u + i)));
    }
    for (; i < n; i++) g[i] = k_silu(g[i]) * u[i];
}

static void rms_norm_neon(float *out, const float *x, const float *w, int32_t n, float eps)
{
    float64x2_t s0 = vdupq_n_f64(0), s1 = vdupq_n_f64(0);
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {   /* x*x is exact in double, as in the reference */
        float32x4_t v = vld1q_f32(x + i);
        float64x2_t lo = vcvt_f64_f32(vget_low_f32(v)), hi = vcvt_high_f64_f32(v);
        s0 = vfmaq_f64(s0, lo, lo);
        s1 = vfmaq_f64(s1, hi, hi);
    }
    float64x2_t s = vaddq_f64(s0, s1);
    double ss = vgetq_lane_f64(s, 0) + vgetq_lane_f64(s, 1);
    for (; i < n; i++) ss += (double)x[i] * x[i];
    const float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (i = 0; i + 4 <= n; i += 4)
        vst1q_f32(out + i, vmulq_f32(vld1q_f32(w + i), vmulq_n_f32(vld1q_f32(x + i), r)));
    for (; i < n; i++) out[i] = w[i] * (x[i] * r);
}

/* ---- attention ---- */

AI float32x4_t ldkv(const char *row, int32_t i, uint32_t t)
{
    if (t == GGML_F16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)row + i)));
    if (t == GGML_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)row + i / QK;
        uint32_t four;   /* 4 values: a wider load could run past the cache's last row */
        memcpy(&four, b->qs + i % QK, 4);
        int32x4_t q = vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(four)))));
        return vmulq_n_f32(vcvtq_f32_s32(q), f16_to_f32(b->d));
    }
    return vld1q_f32((const float *)row + i);
}

static void attend_neon(const float *q, int32_t group, int32_t hd, const void *kp, const void *vp, size_t stride,
                        uint32_t t, const int32_t *cells, int32_t nv, float scale, float *probs, float *out)
{
    if (hd % 4 || nv == 0) {
        k_attend_ref(q, group, hd, kp, vp, stride, t, cells, nv, scale, probs, out);
        return;
    }
    const char *k = kp, *v = vp;
    for (int32_t g = 0; g < group; g++) {
        const float *qh = q + (int64_t)g * hd;
        float *p = probs + (int64_t)g * nv, m = -INFINITY;
        for (int32_t c = 0; c < nv; c++) {
            const char *kr = k + (size_t)cells[c] * stride;
            float32x4_t a = vdupq_n_f32(0);
            for (int32_t i = 0; i < hd; i += 4) a = vfmaq_f32(a, vld1q_f32(qh + i), ldkv(kr, i, t));
            p[c] = hsum4(a) * scale;
            if (p[c] > m) m = p[c];
        }
        float32x4_t sv = vdupq_n_f32(0);
        int32_t c = 0;
        for (; c + 4 <= nv; c += 4) {
            float32x4_t e = exp4(vsubq_f32(vld1q_f32(p + c), vdupq_n_f32(m)));
            vst1q_f32(p + c, e);
            sv = vaddq_f32(sv, e);
        }
        float sum = hsum4(sv);
        for (; c < nv; c++) { p[c] = expf(p[c] - m); sum += p[c]; }
        for (c = 0; c + 4 <= nv; c += 4) vst1q_f32(p + c, vdivq_f32(vld1q_f32(p + c), vdupq_n_f32(sum)));
        for (; c < nv; c++) p[c] /= sum;
        float *oh = out + (int64_t)g * hd;
        for (int32_t i0 = 0; i0 < hd; i0 += 4) {
            float32x4_t o = vdupq_n_f32(0);
            for (int32_t cc = 0; cc < nv; cc++)
                o = vfmaq_n_f32(o, ldkv(v + (size_t)cells[cc] * stride, i0, t), p[cc]);
            vst1q_f32(oh + i0, o);
        }
    }
}

KERNELS_LORA_AXPY(lora_axpy_neon, 4)

const kernel_set kernels_neon = {
    "neon", act_q8_neon, matmul_neon, attend_neon, rms_norm_neon, swiglu_neon, lora_axpy_neon, 0, NULL, 0, NULL
};
#endif
