/* kernels_avx512.c - the AVX-512 kernel set (F, BW, VL, DQ, VNNI; x86-64).
 *
 * The matmuls are the AVX2 set's with 16-lane accumulators and 4 x 4 tiles
 * (32 zmm registers), and the quantized dot products use VNNI (vpdpbusd).
 * Canonical order as in kernels_avx2.c, with 16 lanes for float weights (so
 * float results differ from the AVX2 set's in rounding); the quantized path
 * keeps 8 int32 lanes of 4 products per block, bit for bit the AVX2 set's.
 * RMSNorm, SwiGLU, attention and the activation quantizer are the AVX2
 * set's: on the CPUs measured they are not where the time goes. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
#include "kernels.h"
#include "quant.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#endif

#define AI static inline __attribute__((always_inline))
enum { TF32 = 0, TF16 = 1, TBF16 = 30 };

AI float hsum8(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
}

AI float hsum16(__m512 v)
{
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

AI __m512 ldw(const char *row, int64_t k, int t)
{
    if (t == TF16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * k)));
    if (t == TBF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * k))), 16));
    return _mm512_loadu_ps((const float *)row + k);
}

AI __m512 ldw_tail(const char *row, int64_t k, __mmask16 m, int t)
{
    if (t == TF16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
    if (t == TBF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * k)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)row + k);
}

/* Matrix-vector products stream the weights once, and this machine's
 * hardware prefetchers do not keep enough of that stream in flight, so
 * the weight tiles prefetch ahead themselves: a tile of rows [o, o+R)
 * prefetches, spread over its own column loop, the same number of bytes
 * PF_DIST further on (never past the end of its output range). Prefetches
 * change no result. */
#define PF_DIST 8192

/* The part [i, i+step) of n of the pfn bytes at pf. */
AI void prefetch_part(const char *pf, size_t pfn, int64_t i, int64_t step, int64_t n)
{
    size_t lo = (size_t)((double)pfn * (double)i / (double)n), hi = (size_t)((double)pfn * (double)(i + step) / (double)n);
    for (size_t off = lo & ~(size_t)63; off < hi; off += 64) _mm_prefetch(pf + off, _MM_HINT_T0);
}

/* What the tile at rows [o, o+R) of a range ending at o1 prefetches. */
AI const char *pf_ahead(const char *W, size_t rb, int64_t o, int64_t R, int64_t o1, size_t *pfn)
{
    size_t d = (size_t)R * rb > PF_DIST ? (size_t)R * rb : PF_DIST, start = (size_t)o * rb + d, end = (size_t)o1 * rb;
    if (start >= end) { *pfn = 0; return NULL; }
    *pfn = end - start < (size_t)R * rb ? end - start : (size_t)R * rb;
    return W + start;
}

AI void tile_f(const char *w, size_t rb, int t, const char *x, size_t xs, int64_t K, int R, int C,
               float *y, int64_t ldy, int acc, const char *pf, size_t pfn)
{
    __m512 a[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) a[r][c] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        if (pf) prefetch_part(pf, pfn, k, 16, K);
        __m512 xv[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) xv[c] = _mm512_loadu_ps((const float *)(x + (size_t)c * xs) + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 wv = ldw(w + (size_t)r * rb, k, t);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) a[r][c] = _mm512_fmadd_ps(wv, xv[c], a[r][c]);
        }
    }
    if (k < K) {
        const __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 xv[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) xv[c] = _mm512_maskz_loadu_ps(m, (const float *)(x + (size_t)c * xs) + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 wv = ldw_tail(w + (size_t)r * rb, k, m, t);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) a[r][c] = _mm512_fmadd_ps(wv, xv[c], a[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float s = hsum16(a[r][c]), *p = y + (int64_t)c * ldy + r;
            *p = acc ? *p + s : s;
        }
}

typedef void (*tile_fn)(const char *w, size_t rb, const char *x, size_t xs, int64_t K, float *y,
                        int64_t ldy, int acc, const char *pf, size_t pfn);
#define TILE(T, R, C) \
    static void tile_##T##_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, \
                                     float *y, int64_t ldy, int acc, const char *pf, size_t pfn) \
    { tile_f(w, rb, T, x, xs, K, R, C, y, ldy, acc, pf, pfn); }
#define ROW(T, R) TILE(T, R, 1) TILE(T, R, 2) TILE(T, R, 3) TILE(T, R, 4)
#define TILES(T) TILE(T, 8, 1) ROW(T, 1) ROW(T, 2) ROW(T, 3) ROW(T, 4)
TILES(TF32)
TILES(TF16)
TILES(TBF16)
#define GROW(T, R) { tile_##T##_##R##_1, tile_##T##_##R##_2, tile_##T##_##R##_3, tile_##T##_##R##_4 }
#define GRID(T) { GROW(T, 1), GROW(T, 2), GROW(T, 3), GROW(T, 4) }
static const tile_fn grid_f32[4][4] = GRID(TF32), grid_f16[4][4] = GRID(TF16), grid_bf16[4][4] = GRID(TBF16);

#define IB 64

static void mm_float(const mor_weight *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc, float *scratch)
{
    const int t = (int)w->type;
    const int64_t K = w->cols;
    const size_t rb = mor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    const tile_fn (*grid)[4] = t == TF16 ? grid_f16 : t == TBF16 ? grid_bf16 : grid_f32;
    if (n <= 2) {
        int64_t o = o0;
        if (n == 1) {
            tile_fn wide = t == TF16 ? tile_TF16_8_1 : t == TBF16 ? tile_TBF16_8_1 : tile_TF32_8_1;
            for (; o + 8 <= o1; o += 8) { size_t pn; const char *pf = pf_ahead(W, rb, o, 8, o1, &pn); wide(W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc, pf, pn); }
        } else {
            for (; o + 4 <= o1; o += 4) { size_t pn; const char *pf = pf_ahead(W, rb, o, 4, o1, &pn); grid[3][1](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc, pf, pn); }
        }
        for (; o < o1; o++) { size_t pn; const char *pf = pf_ahead(W, rb, o, 1, o1, &pn); grid[0][n - 1](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc, pf, pn); }
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
                    for (; k + 16 <= K; k += 16) _mm512_storeu_ps(dst + k, ldw(src, k, t));
                    if (k < K) {
                        const __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
                        _mm512_mask_storeu_ps(dst + k, m, ldw_tail(src, k, m, t));
                    }
                }
                ws = (const char *)scratch; wrb = sizeof(float) * (size_t)K; g = grid_f32;
            }
            int32_t i = i0;
            for (; i + 4 <= i1; i += 4) g[R - 1][3](ws, wrb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
            if (i < i1) g[R - 1][i1 - i - 1](ws, wrb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
        }
    }
}

/* ---- quantized weights x Q8_0 activations, VNNI ----
 *
 * vpdpbusd multiplies unsigned by signed bytes, so the weights go in as
 * unsigned codes: Q4_0's nibbles q = w + 8 as they are stored, Q8_0's w + 128
 * (w xor 0x80), and the offset comes back out by starting each block's sum
 * at -8 (or -128) times the activations' lane sums (one vpdpbusd per
 * activation block, shared by every weight row of the tile). The lanes are
 * the same exact integers as kernels_avx2.c's, and the scale d_w * d_x the
 * same float product, so the two sets agree bit for bit on quantized
 * weights. */

AI __m256i ldq_u(const char *row, int64_t b, int t)
{
    if (t == GGML_Q4_0) {
        const mor_block_q4_0 *q = (const mor_block_q4_0 *)row + b;
        __m128i v = _mm_loadu_si128((const __m128i *)q->qs);   /* low nibbles are 0..15, high 16..31 */
        return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
    }
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)((const mor_block_q8_0 *)row + b)->qs),
                            _mm256_set1_epi8((char)0x80));
}

/* d of block b, as 8 equal floats */
AI __m256 ldd8(const char *row, int64_t b, int t)
{
    uint16_t d = t == GGML_Q4_0 ? ((const mor_block_q4_0 *)row + b)->d : ((const mor_block_q8_0 *)row + b)->d;
    return _mm256_cvtph_ps(_mm_set1_epi16((short)d));
}

AI void tile_q(const char *w, size_t rb, int t, const char *x, size_t xs, int64_t K, int R, int C,
               float *y, int64_t ldy, int acc, const char *pf, size_t pfn)
{
    __m256 a[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) a[r][c] = _mm256_setzero_ps();
    const int64_t nb = K / MOR_QK;
    const __m256i off = _mm256_set1_epi8(t == GGML_Q4_0 ? 8 : (char)0x80);   /* the code offset, as u8 */
    for (int64_t b = 0; b < nb; b++) {
        if (pf) prefetch_part(pf, pfn, b, 1, nb);
        __m256i xv[4], base[4];
        __m256 xd[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const char *xr = x + (size_t)c * xs;
            xv[c] = _mm256_load_si256((const __m256i *)(mor_act_q8_qs(xr) + b * MOR_QK));
            xd[c] = _mm256_set1_ps(mor_act_q8_d(xr, K)[b]);
            /* -offset x (sum of each lane's 4 activations) */
            base[c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), off, xv[c]));
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const char *wr = w + (size_t)r * rb;
            const __m256i wu = ldq_u(wr, b, t);
            const __m256 wd = ldd8(wr, b, t);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                a[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(wd, xd[c]),
                                          _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(base[c], wu, xv[c])), a[r][c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float s = hsum8(a[r][c]), *p = y + (int64_t)c * ldy + r;
            *p = acc ? *p + s : s;
        }
}

#define QTILE(T, R, C) \
    static void qtile_##T##_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, \
                                      float *y, int64_t ldy, int acc, const char *pf, size_t pfn) \
    { tile_q(w, rb, T, x, xs, K, R, C, y, ldy, acc, pf, pfn); }
#define QROW(T, R) QTILE(T, R, 1) QTILE(T, R, 2) QTILE(T, R, 3) QTILE(T, R, 4)
#define QTILES(T) QROW(T, 1) QROW(T, 2) QROW(T, 3) QROW(T, 4)
enum { TQ8 = GGML_Q8_0, TQ4 = GGML_Q4_0 };
QTILES(TQ8)
QTILES(TQ4)
#define QGROW(T, R) { qtile_##T##_##R##_1, qtile_##T##_##R##_2, qtile_##T##_##R##_3, qtile_##T##_##R##_4 }
#define QGRID(T) { QGROW(T, 1), QGROW(T, 2), QGROW(T, 3), QGROW(T, 4) }
static const tile_fn grid_q8[4][4] = QGRID(TQ8), grid_q4[4][4] = QGRID(TQ4);

static void mm_quant(const mor_weight *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc)
{
    const int64_t K = w->cols;
    const size_t rb = mor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    const tile_fn (*g)[4] = w->type == GGML_Q4_0 ? grid_q4 : grid_q8;
    if (n == 1) {
        int64_t o = o0;
        for (; o + 4 <= o1; o += 4) { size_t pn; const char *pf = pf_ahead(W, rb, o, 4, o1, &pn); g[3][0](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc, pf, pn); }
        for (; o < o1; o++) { size_t pn; const char *pf = pf_ahead(W, rb, o, 1, o1, &pn); g[0][0](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc, pf, pn); }
        return;
    }
    for (int32_t i0 = 0; i0 < n; i0 += IB) {
        const int32_t i1 = n - i0 < IB ? n : i0 + IB;
        for (int64_t o = o0; o < o1; o += 4) {
            const int R = o1 - o < 4 ? (int)(o1 - o) : 4;
            const char *ws = W + (size_t)o * rb;
            int32_t i = i0;
            for (; i + 4 <= i1; i += 4) g[R - 1][3](ws, rb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
            if (i < i1) g[R - 1][i1 - i - 1](ws, rb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
        }
    }
}

static void matmul_avx512(const mor_weight *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n,
                          int64_t o0, int64_t o1, int acc, float *scratch)
{
    switch (w->type) {
    case GGML_F32: case GGML_F16: case GGML_BF16:
        mm_float(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    case GGML_Q8_0: case GGML_Q4_0:
        mm_quant(w, x, xs, y, ldy, n, o0, o1, acc); break;
    default:
        mor_matmul_ref_range(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

const mor_kernels mor_kernels_avx512 = {
    "avx512", mor_act_q8_avx2, matmul_avx512, mor_attend_avx2, mor_rms_norm_avx2, mor_swiglu_avx2
};
#endif
