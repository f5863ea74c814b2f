/* kernels_avx2.c - the AVX2 + FMA + F16C kernel set (x86-64).
 *
 * Compiled for those instructions with a target pragma, so the library as a
 * whole needs no -march flag; kernels_dispatch.c hands this set out only
 * when the CPU has them.
 *
 * Canonical order (what makes results independent of tiling and threads):
 * each output (o, i) has one 8-lane accumulator that runs over the columns
 * in order, 8 at a time (the last 8 zero-padded); the lanes are then summed
 * by hsum8's fixed tree. Quantized weights: per 32-block, the 8 int32 lanes
 * of 4 products each, converted to float, go into the accumulator by one FMA
 * with the block's scale d_w * d_x. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "kernels_lora.h"
#include "quant.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#define AI static inline __attribute__((always_inline))
/* short names of the types, for the token-pasted kernel names */
enum { TF32 = GGML_F32, TF16 = GGML_F16, TBF16 = GGML_BF16 };

AI float hsum8(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
}

/* 8 weights from element k of a row of type t, as floats (exact). */
AI __m256 ldw(const char *row, int64_t k, int t)
{
    if (t == TF16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k)));
    if (t == TBF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * k))), 16));
    return _mm256_loadu_ps((const float *)row + k);
}

/* The last rem (< 8) weights, zero-padded. */
AI __m256 ldw_tail(const char *row, int64_t k, int rem, int t)
{
    _Alignas(32) unsigned char tmp[32] = { 0 };
    size_t es = t == TF32 ? 4 : 2;
    memcpy(tmp, row + es * (size_t)k, es * (size_t)rem);
    return ldw((const char *)tmp, 0, t);
}

AI __m256i tail_mask(int rem)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The R x C tile of outputs (o..o+R, i..i+C): w at row o (rows rb bytes
 * apart), x at row i (rows xs bytes apart), y at (i, o). */
/* Matrix-vector products stream the weights once, and this machine's
 * hardware prefetchers do not keep enough of that stream in flight, so
 * the weight tiles prefetch ahead themselves: a tile of rows [o, o+R)
 * prefetches, spread over its own column loop, the same number of bytes
 * PF_DIST further on (never past the end of its output range). Prefetches
 * change no result. */
#define PF_DIST 8192

/* Prefetch cursor of a tile: the pfn bytes at pf, spread evenly over the
 * tile's `steps` loop iterations (integer arithmetic: this runs every
 * iteration). */
typedef struct { const char *pf; size_t n, next, per, done; } pf_cursor;

AI pf_cursor pf_start(const char *pf, size_t pfn, int64_t steps)
{
    pf_cursor c = { pf, pf ? pfn : 0, 0, 0, 0 };
    c.per = steps > 0 ? (c.n + (size_t)steps - 1) / (size_t)steps : c.n;
    return c;
}

AI void pf_step(pf_cursor *c)
{
    c->done += c->per;
    const size_t end = c->done < c->n ? c->done : c->n;
    for (; c->next < end; c->next += 64) _mm_prefetch(c->pf + c->next, _MM_HINT_T0);
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
    __m256 a[8][3];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int c = 0; c < C; c++) a[r][c] = _mm256_setzero_ps();
    int64_t k = 0;
    pf_cursor pc = pf_start(pf, pfn, (K + 7) / 8);
    for (; k + 8 <= K; k += 8) {
        if (C <= 2) pf_step(&pc);   /* matrix-vector tiles only: GEMM tiles reuse their strip from L1 */
        __m256 xv[3];
#pragma GCC unroll 3
        for (int c = 0; c < C; c++) xv[c] = _mm256_loadu_ps((const float *)(x + (size_t)c * xs) + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256 wv = ldw(w + (size_t)r * rb, k, t);
#pragma GCC unroll 3
            for (int c = 0; c < C; c++) a[r][c] = _mm256_fmadd_ps(wv, xv[c], a[r][c]);
        }
    }
    if (k < K) {
        const int rem = (int)(K - k);
        const __m256i m = tail_mask(rem);
        __m256 xv[3];
#pragma GCC unroll 3
        for (int c = 0; c < C; c++) xv[c] = _mm256_maskload_ps((const float *)(x + (size_t)c * xs) + k, m);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256 wv = ldw_tail(w + (size_t)r * rb, k, rem, t);
#pragma GCC unroll 3
            for (int c = 0; c < C; c++) a[r][c] = _mm256_fmadd_ps(wv, xv[c], a[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int c = 0; c < C; c++) {
            float s = hsum8(a[r][c]), *p = y + (int64_t)c * ldy + r;
            *p = acc ? *p + s : s;
        }
}

typedef void (*tile_fn)(const char *w, size_t rb, const char *x, size_t xs, int64_t K, float *y,
                        int64_t ldy, int acc, const char *pf, size_t pfn);
#define TILE(T, R, C) \
    static void tile_##T##_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, \
                                     float *y, int64_t ldy, int acc, const char *pf, size_t pfn) \
    { tile_f(w, rb, T, x, xs, K, R, C, y, ldy, acc, pf, pfn); }
#define TILES(T) TILE(T, 4, 1) TILE(T, 4, 2) TILE(T, 1, 1) TILE(T, 1, 2) TILE(T, 1, 3) TILE(T, 2, 1) \
                 TILE(T, 2, 2) TILE(T, 2, 3) TILE(T, 3, 1) TILE(T, 3, 2) TILE(T, 3, 3)
TILES(TF32)
TILES(TF16)
TILES(TBF16)

/* [R][C] for R, C in 1..3 (GEMM tiles and their edges) */
#define GRID(T) { { tile_##T##_1_1, tile_##T##_1_2, tile_##T##_1_3 }, \
                  { tile_##T##_2_1, tile_##T##_2_2, tile_##T##_2_3 }, \
                  { tile_##T##_3_1, tile_##T##_3_2, tile_##T##_3_3 } }
static const tile_fn grid_f32[3][3] = GRID(TF32), grid_f16[3][3] = GRID(TF16), grid_bf16[3][3] = GRID(TBF16);

/* Activation rows per block of a GEMM: a block stays in L2 (~512 KiB of it)
 * while the weights stream by once per block. */
static int32_t i_block(int64_t row_bytes)
{
    int64_t ib = (512 * 1024) / (row_bytes > 0 ? row_bytes : 1);
    ib = ib < 16 ? 16 : ib > 256 ? 256 : ib;
    return (int32_t)(ib / 4 * 4);
}

  /* x rows per block: a block of activations stays in L2 while W streams by */

static void mm_float(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc, float *scratch)
{
    const int t = (int)w->type;
    const int64_t K = w->cols;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    const tile_fn (*grid)[3] = t == TF16 ? grid_f16 : t == TBF16 ? grid_bf16 : grid_f32;
    if (n <= 2) {   /* matrix-vector: many rows in flight, weights converted on the fly */
        int64_t o = o0;
        /* 4 rows at a time: with 8 (more loads in flight per thread) two threads read less, not more */
        tile_fn wide = n == 1 ? (t == TF16 ? tile_TF16_4_1 : t == TBF16 ? tile_TBF16_4_1 : tile_TF32_4_1)
                              : (t == TF16 ? tile_TF16_4_2 : t == TBF16 ? tile_TBF16_4_2 : tile_TF32_4_2);
        const int R = 4;
        for (; o + R <= o1; o += R) { size_t pn; const char *pf = pf_ahead(W, rb, o, R, o1, &pn); wide(W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc, pf, pn); }
        for (; o < o1; o++) { size_t pn; const char *pf = pf_ahead(W, rb, o, 1, o1, &pn); grid[0][n - 1](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc, pf, pn); }
        return;
    }
    const int32_t IB = i_block((int64_t)xs);
    for (int32_t i0 = 0; i0 < n; i0 += IB) {
        const int32_t i1 = n - i0 < IB ? n : i0 + IB;
        for (int64_t o = o0; o < o1; o += 3) {
            const int R = o1 - o < 3 ? (int)(o1 - o) : 3;
            const char *ws = W + (size_t)o * rb;
            size_t wrb = rb;
            const tile_fn (*g)[3] = grid;
            if (t != TF32 && scratch) {   /* convert the strip once for all rows of the block */
                for (int r = 0; r < R; r++) {
                    const char *src = ws + (size_t)r * rb;
                    float *dst = scratch + (size_t)r * (size_t)K;
                    int64_t k = 0;
                    for (; k + 8 <= K; k += 8) _mm256_storeu_ps(dst + k, ldw(src, k, t));
                    for (; k < K; k++)
                        dst[k] = t == TF16 ? _cvtsh_ss(((const uint16_t *)src)[k])
                                           : bf16_to_f32(((const uint16_t *)src)[k]);
                }
                ws = (const char *)scratch; wrb = sizeof(float) * (size_t)K; g = grid_f32;
            }
            int32_t i = i0;
            for (; i + 3 <= i1; i += 3) g[R - 1][2](ws, wrb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
            if (i < i1) g[R - 1][i1 - i - 1](ws, wrb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
        }
    }
}

/* ---- quantized weights x Q8_0 activations ---- */

AI __m256i ldq(const char *row, int64_t b, int t)
{
    if (t == GGML_Q4_0) {
        const block_q4_0 *q = (const block_q4_0 *)row + b;
        __m128i v = _mm_loadu_si128((const __m128i *)q->qs);
        __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
        return _mm256_sub_epi8(u, _mm256_set1_epi8(8));   /* low nibbles are 0..15, high 16..31 */
    }
    return _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)row + b)->qs);
}

AI float ldd(const char *row, int64_t b, int t)
{
    uint16_t d = t == GGML_Q4_0 ? ((const block_q4_0 *)row + b)->d : ((const block_q8_0 *)row + b)->d;
    return _cvtsh_ss(d);
}

/* 8 lanes, lane j = sum of products 4j..4j+3 (exact), as floats. */
AI __m256 dotq(__m256i w, __m256i x)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

AI void tile_q(const char *w, size_t rb, int t, const char *x, size_t xs, int64_t K, int R, int C,
               float *y, int64_t ldy, int acc, const char *pf, size_t pfn)
{
    __m256 a[4][3];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int c = 0; c < C; c++) a[r][c] = _mm256_setzero_ps();
    const int64_t nb = K / QK;
    pf_cursor pc = pf_start(pf, pfn, nb);
    for (int64_t b = 0; b < nb; b++) {
        if (C <= 2) pf_step(&pc);   /* matrix-vector tiles only: GEMM tiles reuse their strip from L1 */
        __m256i xv[3];
        float xd[3];
#pragma GCC unroll 3
        for (int c = 0; c < C; c++) {
            const char *xr = x + (size_t)c * xs;
            xv[c] = _mm256_load_si256((const __m256i *)(act_q8_qs(xr) + b * QK));
            xd[c] = act_q8_d(xr, K)[b];
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const char *wr = w + (size_t)r * rb;
            __m256i wv = ldq(wr, b, t);
            float wd = ldd(wr, b, t);
#pragma GCC unroll 3
            for (int c = 0; c < C; c++)
                a[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(wd * xd[c]), dotq(wv, xv[c]), a[r][c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int c = 0; c < C; c++) {
            float s = hsum8(a[r][c]), *p = y + (int64_t)c * ldy + r;
            *p = acc ? *p + s : s;
        }
}

#define QTILE(T, R, C) \
    static void qtile_##T##_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, \
                                      float *y, int64_t ldy, int acc, const char *pf, size_t pfn) \
    { tile_q(w, rb, T, x, xs, K, R, C, y, ldy, acc, pf, pfn); }
#define QTILES(T) QTILE(T, 4, 1) QTILE(T, 1, 1) QTILE(T, 1, 2) QTILE(T, 1, 3) QTILE(T, 2, 1) \
                  QTILE(T, 2, 2) QTILE(T, 2, 3) QTILE(T, 3, 1) QTILE(T, 3, 2) QTILE(T, 3, 3)
enum { TQ8 = GGML_Q8_0, TQ4 = GGML_Q4_0 };
QTILES(TQ8)
QTILES(TQ4)
#define QGRID(T) { { qtile_##T##_1_1, qtile_##T##_1_2, qtile_##T##_1_3 }, \
                   { qtile_##T##_2_1, qtile_##T##_2_2, qtile_##T##_2_3 }, \
                   { qtile_##T##_3_1, qtile_##T##_3_2, qtile_##T##_3_3 } }
static const tile_fn grid_q8[3][3] = QGRID(TQ8), grid_q4[3][3] = QGRID(TQ4);

static void mm_quant(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc)
{
    const int64_t K = w->cols;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    const tile_fn (*g)[3] = w->type == GGML_Q4_0 ? grid_q4 : grid_q8;
    if (n == 1) {
        tile_fn wide = w->type == GGML_Q4_0 ? qtile_TQ4_4_1 : qtile_TQ8_4_1;
        int64_t o = o0;
        for (; o + 4 <= o1; o += 4) { size_t pn; const char *pf = pf_ahead(W, rb, o, 4, o1, &pn); wide(W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc, pf, pn); }
        for (; o < o1; o++) { size_t pn; const char *pf = pf_ahead(W, rb, o, 1, o1, &pn); g[0][0](W + (size_t)o * rb, rb, x, xs, K, y + o, ldy, acc, pf, pn); }
        return;
    }
    /* tiles of 2 weight rows x 3 activation rows fit the 16 ymm registers */
    const int32_t IB = i_block((int64_t)xs);
    for (int32_t i0 = 0; i0 < n; i0 += IB) {
        const int32_t i1 = n - i0 < IB ? n : i0 + IB;
        for (int64_t o = o0; o < o1; o += 2) {
            const int R = o1 - o < 2 ? 1 : 2;
            const char *ws = W + (size_t)o * rb;
            int32_t i = i0;
            for (; i + 3 <= i1; i += 3) g[R - 1][2](ws, rb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
            if (i < i1) g[R - 1][i1 - i - 1](ws, rb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
        }
    }
}

/* ---- k-quants (Q2_K .. Q6_K) x Q8_K activations: bitwise the reference ----
 *
 * A super-block is taken apart into 8 vectors of 32 unsigned codes u = q +
 * bias in value order (bias: Q3_K 4, Q6_K 32, else 0) and a 16-bit scale per
 * 16 values (kq_x86). vpmaddubsw and vpmaddwd then give sum_g sc_g (u . x)_g
 * exactly (|u x + u x| <= 2 * 63 * 128 fits 16 bits); the bias comes back
 * out as bias * sum_g sc_g bsum_g and the mins as sum_g mn_g bsum_g, from
 * the block sums the Q8_K activations carry. These are the reference
 * kernels' integers, and the float step per super-block is theirs
 * (kq_step), so every output is the reference's, bit for bit. The AVX-512
 * set uses these too (kernels.h). */

typedef struct {
    uint8_t u[QK_K];          /* codes of the values in order */
    int16_t sc[8][16];        /* per 32 values: the scale of the first 16 in words 0-7, of the next 16 in 8-15 */
    int16_t sc16[16], mn16[16];   /* the scale and the min (0 without) of each 16 values */
    float   d, dmin;
    int32_t shift;            /* bias = 1 << shift; 0: no bias */
} kq_x86;

AI __m256i nib_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
AI __m256i nib_hi(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }
/* 1 << sh in the bytes of v that have bit m set, else 0 */
AI __m256i bit_to(__m256i v, int m, int sh)
{
    const __m256i b = _mm256_set1_epi8((char)(1 << m));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, b), b), _mm256_set1_epi8((char)(1 << sh)));
}
AI __m256i ld(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
AI void st(void *p, __m256i v) { _mm256_storeu_si256((__m256i *)p, v); }
AI float f16at(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return _cvtsh_ss(h); }

/* the per-32 scale words from the 16 scales */
AI void kq_pairs(kq_x86 *o)
{
    for (int c = 0; c < 8; c++)
        st(o->sc[c], _mm256_set_m128i(_mm_set1_epi16(o->sc16[2 * c + 1]), _mm_set1_epi16(o->sc16[2 * c])));
}

static void kq_unpack_x86(uint32_t type, const uint8_t *p, kq_x86 *o)
{
    switch (type) {
    case GGML_Q4_K: case GGML_Q5_K: {
        uint8_t sm[16];
        kq_scales_mins(p + 4, sm);
        o->d = f16at(p); o->dmin = f16at(p + 2); o->shift = 0;
        const uint8_t *qs = p + (type == GGML_Q4_K ? 16 : 48);
        const __m256i qh = type == GGML_Q5_K ? ld(p + 16) : _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const __m256i q = ld(qs + 32 * g);
            __m256i lo = nib_lo(q), hi = nib_hi(q);
            if (type == GGML_Q5_K) {   /* the fifth bit of value 32m + l: bit m of qh[l] */
                lo = _mm256_or_si256(lo, bit_to(qh, 2 * g, 4));
                hi = _mm256_or_si256(hi, bit_to(qh, 2 * g + 1, 4));
            }
            st(o->u + 64 * g, lo);
            st(o->u + 64 * g + 32, hi);
        }
        for (int j = 0; j < 8; j++) {
            o->sc16[2 * j] = o->sc16[2 * j + 1] = sm[j];
            o->mn16[2 * j] = o->mn16[2 * j + 1] = sm[8 + j];
        }
        break;
    }
    case GGML_Q6_K: {   /* ql[128], qh[64], int8 scales[16], d */
        o->d = f16at(p + 208); o->dmin = 0.0f; o->shift = 5;
        const __m256i m3 = _mm256_set1_epi8(3), mc = _mm256_set1_epi8(0x0C), m30 = _mm256_set1_epi8(0x30),
                      mc0 = _mm256_set1_epi8((char)0xC0);
        for (int h = 0; h < 2; h++) {
            const __m256i a = ld(p + 64 * h), b = ld(p + 64 * h + 32), hb = ld(p + 128 + 32 * h);
            st(o->u + 128 * h, _mm256_or_si256(nib_lo(a), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4)));
            st(o->u + 128 * h + 32, _mm256_or_si256(nib_lo(b), _mm256_slli_epi16(_mm256_and_si256(hb, mc), 2)));
            st(o->u + 128 * h + 64, _mm256_or_si256(nib_hi(a), _mm256_and_si256(hb, m30)));
            st(o->u + 128 * h + 96, _mm256_or_si256(nib_hi(b), _mm256_srli_epi16(_mm256_and_si256(hb, mc0), 2)));
        }
        for (int j = 0; j < 16; j++) { o->sc16[j] = (int8_t)p[192 + j]; o->mn16[j] = 0; }
        break;
    }
    case GGML_Q3_K: {   /* hmask[32], qs[64], scales[12], d: u = 2 low bits + 4 x high bit, q = u - 4 */
        o->d = f16at(p + 108); o->dmin = 0.0f; o->shift = 2;
        const __m256i hm = ld(p);
        for (int h = 0; h < 2; h++) {
            const __m256i q = ld(p + 32 + 32 * h);
            for (int j = 0; j < 4; j++)
                st(o->u + 128 * h + 32 * j, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3)),
                                                            bit_to(hm, 4 * h + j, 2)));
        }
        for (int j = 0; j < 16; j++) { o->sc16[j] = (int16_t)q3k_scale(p + 96, j); o->mn16[j] = 0; }
        break;
    }
    default: {   /* Q2_K: scales[16] (scale | min << 4), qs[64], d, dmin */
        o->d = f16at(p + 80); o->dmin = f16at(p + 82); o->shift = 0;
        for (int h = 0; h < 2; h++) {
            const __m256i q = ld(p + 16 + 32 * h);
            for (int j = 0; j < 4; j++)
                st(o->u + 128 * h + 32 * j, _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3)));
        }
        for (int j = 0; j < 16; j++) { o->sc16[j] = p[j] & 15; o->mn16[j] = p[j] >> 4; }
        break;
    }
    }
    kq_pairs(o);
}

/* One super-block of weights against one of activations (x: 256 codes, bsum: their 16 block sums):
 * s plus its contribution, as the reference adds it. */
AI float kq_dot_x86(const kq_x86 *w, const int8_t *x, const int16_t *bsum, float xd, float s)
{
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++)
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(ld(w->u + 32 * c), ld(x + 32 * c)),
                                                      ld(w->sc[c])));
    const __m256i bs = ld(bsum);
    if (w->shift)
        acc = _mm256_sub_epi32(acc, _mm256_sll_epi32(_mm256_madd_epi16(ld(w->sc16), bs), _mm_cvtsi32_si128(w->shift)));
    const __m256i mm = _mm256_madd_epi16(ld(w->mn16), bs);
    /* both sums at once: [acc 0+1, 2+3, mm 0+1, 2+3 | acc 4+5, 6+7, mm 4+5, 6+7], halves added, pairs added */
    const __m256i h = _mm256_hadd_epi32(acc, mm);
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    t = _mm_hadd_epi32(t, t);
    return kq_step(s, w->d, w->dmin, xd, _mm_cvtsi128_si32(t), _mm_extract_epi32(t, 1));
}

/* Up to this many activation rows, each super-block is taken apart once for all of them on the way;
 * more (with scratch), each weight row once into the scratch for all of them. */
enum { KQ_STREAM_ROWS = 4 };

void k_matmul_kquant_x86(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n, int64_t o0,
                         int64_t o1, int acc, float *scratch)
{
    if (w->type == GGML_Q8_K) {   /* never in a model file: the reference */
        k_matmul_ref_range(w, x, xs, y, ldy, n, o0, o1, acc, scratch);
        return;
    }
    const int64_t K = w->cols, nb = K / QK_K;
    const size_t rb = tensor_row_bytes(w->type, K), bs = (size_t)tensor_row_bytes(w->type, QK_K);
    const char *X = x;
    kq_x86 *rowbuf = scratch && n > KQ_STREAM_ROWS ? (kq_x86 *)scratch : NULL;
    _Static_assert(sizeof(kq_x86) <= 16 * sizeof(float) * QK_K, "an unpacked row fits the matmul scratch");
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * rb;
        if (o + 1 < o1) _mm_prefetch((const char *)row + rb, _MM_HINT_T0);
        if (rowbuf) {
            for (int64_t b = 0; b < nb; b++) kq_unpack_x86(w->type, row + (size_t)b * bs, rowbuf + b);
            for (int32_t i = 0; i < n; i++) {
                const char *xi = X + (size_t)i * xs;
                const int8_t *xq = act_q8_qs(xi);
                const float *xd = act_q8k_d(xi, K);
                const int16_t *bsum = act_q8k_bsums(xi, K);
                float s = 0.0f;
                for (int64_t b = 0; b < nb; b++) s = kq_dot_x86(rowbuf + b, xq + b * QK_K, bsum + b * 16, xd[b], s);
                float *yo = y + (int64_t)i * ldy + o;
                *yo = acc ? *yo + s : s;
            }
            continue;
        }
        for (int32_t i0 = 0; i0 < n; i0 += KQ_STREAM_ROWS) {
            const int32_t m = n - i0 < KQ_STREAM_ROWS ? n - i0 : KQ_STREAM_ROWS;
            float s[KQ_STREAM_ROWS] = { 0 };
            kq_x86 one;
            for (int64_t b = 0; b < nb; b++) {
                kq_unpack_x86(w->type, row + (size_t)b * bs, &one);
                for (int32_t c = 0; c < m; c++) {
                    const char *xi = X + (size_t)(i0 + c) * xs;
                    s[c] = kq_dot_x86(&one, act_q8_qs(xi) + b * QK_K, act_q8k_bsums(xi, K) + b * 16,
                                      act_q8k_d(xi, K)[b], s[c]);
                }
            }
            for (int32_t c = 0; c < m; c++) {
                float *yo = y + (int64_t)(i0 + c) * ldy + o;
                *yo = acc ? *yo + s[c] : s[c];
            }
        }
    }
}

static void matmul_avx2(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n,
                        int64_t o0, int64_t o1, int acc, float *scratch)
{
    switch (w->type) {
    case GGML_F32: case GGML_F16: case GGML_BF16:
        mm_float(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    case GGML_Q8_0: case GGML_Q4_0:
        mm_quant(w, x, xs, y, ldy, n, o0, o1, acc); break;
    case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K: case GGML_Q8_K:
        k_matmul_kquant_x86(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    default:
        k_matmul_ref_range(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    }
}

/* ---- activations to Q8_0: bitwise the reference quantizer ---- */

/* roundf (half away from zero) of integral-range floats, exactly. */
AI __m256 round_away(__m256 v)
{
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_sub_ps(v, t);   /* exact */
    __m256 absf = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), frac);
    __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    return _mm256_add_ps(t, _mm256_and_ps(one, _mm256_cmp_ps(absf, _mm256_set1_ps(0.5f), _CMP_GE_OQ)));
}

void act_q8_avx2(const float *x, void *row, int64_t k)
{
    int8_t *qs = (int8_t *)row;
    float *dd = (float *)(qs + k);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        __m256 v[4];
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(xb + 8 * j);
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[j]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float amax = _mm_cvtss_f32(m4), d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        dd[b] = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
        __m256i q[4];
        for (int j = 0; j < 4; j++)
            q[j] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[j], _mm256_set1_ps(id))));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(qs + b * QK), p);
    }
}

/* ---- exp, SwiGLU, RMSNorm ---- */

/* e^x (Cephes expf: range reduction by ln 2, degree-6 polynomial), a few ulp;
 * NaN stays NaN, large |x| saturates. */
AI __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), x);
    x = _mm256_max_ps(_mm256_set1_ps(-88.3762626647949f), x);
    __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, z, _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

void k_swiglu_avx2(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        __m256 s = _mm256_div_ps(v, _mm256_add_ps(one, exp8(_mm256_xor_ps(v, neg))));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = k_silu(g[i]) * u[i];
}

void k_rms_norm_avx2(float *out, const float *x, const float *w, int32_t n, float eps)
{
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {   /* x*x is exact in double, as in the reference */
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(lo, lo, s0);
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    _Alignas(32) double t[4];
    _mm256_store_pd(t, _mm256_add_pd(s0, s1));
    double ss = (t[0] + t[2]) + (t[1] + t[3]);
    for (; i < n; i++) ss += (double)x[i] * x[i];
    const float r = 1.0f / sqrtf((float)(ss / n) + eps);
    const __m256 rv = _mm256_set1_ps(r);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(x + i), rv)));
    for (; i < n; i++) out[i] = w[i] * (x[i] * r);
}

/* ---- attention ---- */

/* 8 cache values from element i (a multiple of 8) of a row of type t. */
AI __m256 ldkv(const char *row, int32_t i, uint32_t t)
{
    if (t == GGML_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * (size_t)i)));
    if (t == GGML_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)row + i / QK;
        __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + i % QK))));
        return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->d)), q);
    }
    return _mm256_loadu_ps((const float *)row + i);
}

AI void attend_t(const float *q, int32_t group, int32_t hd, const char *k, const char *v, size_t stride,
                 uint32_t t, const int32_t *cells, int32_t nv, float scale, float *probs, float *out)
{
    for (int32_t g = 0; g < group; g++) {
        const float *qh = q + (int64_t)g * hd;
        float *p = probs + (int64_t)g * nv;
        __m256 mx = _mm256_set1_ps(-INFINITY);
        for (int32_t c = 0; c < nv; c++) {
            const char *kr = k + (size_t)cells[c] * stride;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            int32_t i = 0;
            for (; i + 16 <= hd; i += 16) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i), ldkv(kr, i, t), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i + 8), ldkv(kr, i + 8, t), a1);
            }
            if (i < hd) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i), ldkv(kr, i, t), a0);
            p[c] = hsum8(_mm256_add_ps(a0, a1)) * scale;
            mx = _mm256_max_ps(mx, _mm256_set1_ps(p[c]));
        }
        const float m = _mm_cvtss_f32(_mm256_castps256_ps128(mx));
        __m256 sv = _mm256_setzero_ps();
        int32_t c = 0;
        for (; c + 8 <= nv; c += 8) {
            __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + c), _mm256_set1_ps(m)));
            _mm256_storeu_ps(p + c, e);
            sv = _mm256_add_ps(sv, e);
        }
        float sum = hsum8(sv);
        for (; c < nv; c++) { p[c] = expf(p[c] - m); sum += p[c]; }
        const __m256 sum8 = _mm256_set1_ps(sum);
        for (c = 0; c + 8 <= nv; c += 8) _mm256_storeu_ps(p + c, _mm256_div_ps(_mm256_loadu_ps(p + c), sum8));
        for (; c < nv; c++) p[c] /= sum;
        float *oh = out + (int64_t)g * hd;
        int32_t i0 = 0;
        for (; i0 + 64 <= hd; i0 += 64) {   /* 8 accumulators: 64 output values at a time */
            __m256 o[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) o[j] = _mm256_setzero_ps();
            for (int32_t cc = 0; cc < nv; cc++) {
                const char *vr = v + (size_t)cells[cc] * stride;
                const __m256 pv = _mm256_set1_ps(p[cc]);
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) o[j] = _mm256_fmadd_ps(pv, ldkv(vr, i0 + 8 * j, t), o[j]);
            }
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(oh + i0 + 8 * j, o[j]);
        }
        for (; i0 < hd; i0 += 8) {
            __m256 o = _mm256_setzero_ps();
            for (int32_t cc = 0; cc < nv; cc++)
                o = _mm256_fmadd_ps(_mm256_set1_ps(p[cc]), ldkv(v + (size_t)cells[cc] * stride, i0, t), o);
            _mm256_storeu_ps(oh + i0, o);
        }
    }
}

void k_attend_avx2(const float *q, int32_t group, int32_t hd, const void *k, const void *v,
                        size_t stride, uint32_t kv_type, const int32_t *cells, int32_t nv,
                        float scale, float *probs, float *out)
{
    if (hd % 8 || nv == 0) {
        k_attend_ref(q, group, hd, k, v, stride, kv_type, cells, nv, scale, probs, out);
        return;
    }
    switch (kv_type) {
    case GGML_F16:  attend_t(q, group, hd, k, v, stride, GGML_F16, cells, nv, scale, probs, out); break;
    case GGML_Q8_0: attend_t(q, group, hd, k, v, stride, GGML_Q8_0, cells, nv, scale, probs, out); break;
    default:        attend_t(q, group, hd, k, v, stride, GGML_F32, cells, nv, scale, probs, out); break;
    }
}

KERNELS_LORA_AXPY(lora_axpy_avx2, 8)

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

const kernel_set kernels_avx2 = {
    "avx2", act_q8_avx2, matmul_avx2, k_attend_avx2, k_rms_norm_avx2, k_swiglu_avx2, lora_axpy_avx2, 0, NULL, 0, NULL
};
#endif
