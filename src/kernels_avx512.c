/* kernels_avx512.c - the AVX-512 kernel set (F, BW, VL, DQ, VNNI; x86-64).
 *
 * The matmuls are the AVX2 set's with 16-lane accumulators and larger tiles
 * (float GEMM 6 x 4, quantized 4 x 4: the 32 zmm registers), and the
 * quantized dot products use VNNI (vpdpbusd).
 * Canonical order as in kernels_avx2.c, with 16 lanes (so results differ
 * from the AVX2 set's in rounding), but for Q8_0 and Q4_0 weights, which
 * round as the reference kernels do (weight rows in lanes, exact block
 * sums: see below), and Q4_1 / Q5_0 / Q5_1 (two blocks per register).
 * Attention takes the query heads of a KV group together (below). RMSNorm,
 * SwiGLU and the activation quantizer are the AVX2 set's: on the CPUs
 * measured they are not where the time goes. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "kernels_lora.h"
#include "quant.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#endif

#define AI static inline __attribute__((always_inline))
#include "kernels_vnni.h"   /* after the target pragma: compiled for this set */
/* short names of the types, for the token-pasted kernel names */
enum { TF32 = GGML_F32, TF16 = GGML_F16, TBF16 = GGML_BF16 };

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

/* hsum16 of four vectors at once, each by exactly hsum16's tree (so a tile
 * that uses this gives the bits a tile that does not would): out[i] = sum of
 * v[i]. */
AI void hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d, float *out)
{
    /* x_j + x_(j+8), for a|b and c|d */
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    /* then the 128-bit halves of each 8: lanes [a 0-3 | b 0-3 | c 0-3 | d 0-3] */
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4E));   /* x0 + x2, x1 + x3 */
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xB1));   /* (x0 + x2) + (x1 + x3) */
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, s)));
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

AI void pf_step_to(pf_cursor *c, int l2)
{
    c->done += c->per;
    const size_t end = c->done < c->n ? c->done : c->n;
    for (; c->next < end; c->next += 64) {
        if (l2) _mm_prefetch(c->pf + c->next, _MM_HINT_T1);
        else _mm_prefetch(c->pf + c->next, _MM_HINT_T0);
    }
}

/* into L1 */
AI void pf_step(pf_cursor *c) { pf_step_to(c, 0); }

/* What the tile at rows [o, o+R) of a range ending at o1 prefetches. */
AI const char *pf_ahead(const char *W, size_t rb, int64_t o, int64_t R, int64_t o1, size_t *pfn)
{
    size_t d = (size_t)R * rb > PF_DIST ? (size_t)R * rb : PF_DIST, start = (size_t)o * rb + d, end = (size_t)o1 * rb;
    if (start >= end) { *pfn = 0; return NULL; }
    *pfn = end - start < (size_t)R * rb ? end - start : (size_t)R * rb;
    return W + start;
}

/* The R x C accumulators' dot products into y (rows r, activation rows c): each accumulator's 16 lanes
 * summed by hsum16's tree (hsum16x4 for four at once, the same bits) in every tile shape. */
AI void tile_finish(__m512 (*a)[4], int R, int C, float *y, int64_t ldy, int acc)
{
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        float sum[4];
        if (C == 4) hsum16x4(a[r][0], a[r][1], a[r][2], a[r][3], sum);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float s = C == 4 ? sum[c] : hsum16(a[r][c]), *p = y + (int64_t)c * ldy + r;
            *p = acc ? *p + s : s;
        }
    }
}

/* ain: start from these partial sums (16 floats per accumulator, at (r * 4 + c) * 16) instead of 0;
 * aout: store the partial sums there instead of finishing the dot products into y. Both NULL: the
 * whole dot product. */
AI void tile_f(const char *w, size_t rb, int t, const char *x, size_t xs, int64_t K, int R, int C,
               float *y, int64_t ldy, int acc, const char *pf, size_t pfn, const float *ain, float *aout)
{
    __m512 a[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) a[r][c] = ain ? _mm512_loadu_ps(ain + (r * 4 + c) * 16) : _mm512_setzero_ps();
    int64_t k = 0;
    pf_cursor pc = pf_start(pf, pfn, (K + 15) / 16);
    for (; k + 16 <= K; k += 16) {
        if (C <= 2 || pc.n) pf_step(&pc);   /* streaming tiles only: GEMM tiles reuse their strip from L1 */
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
    if (aout) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) _mm512_storeu_ps(aout + (r * 4 + c) * 16, a[r][c]);
        return;
    }
    tile_finish(a, R, C, y, ldy, acc);
}

typedef void (*tile_fn)(const char *w, size_t rb, const char *x, size_t xs, int64_t K, float *y,
                        int64_t ldy, int acc, const char *pf, size_t pfn);
#define TILE(T, R, C) \
    static void tile_##T##_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, \
                                     float *y, int64_t ldy, int acc, const char *pf, size_t pfn) \
    { tile_f(w, rb, T, x, xs, K, R, C, y, ldy, acc, pf, pfn, NULL, NULL); }
#define ROW(T, R) TILE(T, R, 1) TILE(T, R, 2) TILE(T, R, 3) TILE(T, R, 4)
#define TILES(T) ROW(T, 1) ROW(T, 2) ROW(T, 3) ROW(T, 4) ROW(T, 5) ROW(T, 6)
TILES(TF32)
TILES(TF16)
TILES(TBF16)
#define GROW(T, R) { tile_##T##_##R##_1, tile_##T##_##R##_2, tile_##T##_##R##_3, tile_##T##_##R##_4 }
#define GRID(T) { GROW(T, 1), GROW(T, 2), GROW(T, 3), GROW(T, 4), GROW(T, 5), GROW(T, 6) }
static const tile_fn grid_f32[6][4] = GRID(TF32), grid_f16[6][4] = GRID(TF16), grid_bf16[6][4] = GRID(TBF16);
/* F32 tiles over one block of columns of a K-blocked GEMM (below) */
typedef void (*ktile_fn)(const char *w, size_t rb, const char *x, size_t xs, int64_t K, float *y, int64_t ldy,
                         int acc, const float *ain, float *aout);
#define KTILE(R, C) \
    static void ktile_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, float *y, \
                                int64_t ldy, int acc, const float *ain, float *aout) \
    { tile_f(w, rb, TF32, x, xs, K, R, C, y, ldy, acc, NULL, 0, ain, aout); }
#define KROW(R) KTILE(R, 1) KTILE(R, 2) KTILE(R, 3) KTILE(R, 4)
KROW(1) KROW(2) KROW(3) KROW(4) KROW(5) KROW(6)
#define KGROW(R) { ktile_##R##_1, ktile_##R##_2, ktile_##R##_3, ktile_##R##_4 }
static const ktile_fn kgrid[6][4] = { KGROW(1), KGROW(2), KGROW(3), KGROW(4), KGROW(5), KGROW(6) };
/* GEMM tiles: GR weight rows x GC activation rows, 24 accumulators (+ 4
 * activation vectors + 1 weight vector = 29 of the 32 zmm registers). The
 * weight strip stays in L1 while the activation rows stream from L2, so
 * more weight rows per tile means fewer L2 reads per FMA (6 x 4 ran 8-15%
 * faster than 4 x 4 here). The tile shape changes no result: each output is
 * the same accumulator over the same columns whatever tile it is in. */
enum { GR = 6, GC = 4 };

/* Activation rows per block of a GEMM: a block stays in L2 (~512 KiB of it)
 * while the weights stream by once per block; the weights' next strip is
 * prefetched a slice per activation tile. */
static int32_t i_block(int64_t row_bytes)
{
    int64_t ib = (512 * 1024) / (row_bytes > 0 ? row_bytes : 1);
    ib = ib < 16 ? 16 : ib > 256 ? 256 : ib;
    return (int32_t)(ib / 4 * 4);
}

AI void prefetch_slice(const char *next, size_t bytes, int32_t part, int32_t parts)
{
    size_t lo = bytes * (size_t)part / (size_t)parts, hi = bytes * (size_t)(part + 1) / (size_t)parts;
    for (size_t off = lo & ~(size_t)63; off < hi; off += 64) _mm_prefetch(next + off, _MM_HINT_T0);
}

/* Columns [k0, k0 + kn) of R weight rows of type t (rows rb bytes apart) as floats into dst (rows ds floats apart). */
static void to_f32(float *dst, int64_t ds, const char *src, size_t rb, int R, int64_t k0, int64_t kn, int t)
{
    for (int r = 0; r < R; r++) {
        const char *row = src + (size_t)r * rb;
        float *d = dst + (size_t)r * (size_t)ds - k0;
        int64_t k = k0;
        for (; k + 16 <= k0 + kn; k += 16) _mm512_storeu_ps(d + k, ldw(row, k, t));
        if (k < k0 + kn) {
            const __mmask16 m = (__mmask16)((1u << (k0 + kn - k)) - 1);
            _mm512_mask_storeu_ps(d + k, m, ldw_tail(row, k, m, t));
        }
    }
}

/* K-blocked GEMM, for rows longer than KB_MIN columns: the columns go in
 * blocks of about KB_COLS (a multiple of 16), each block of a weight strip
 * staying in L1 while the activation tiles stream by; between blocks each
 * tile's accumulators are stored to the scratch and loaded back, exactly.
 * So every output is the same accumulator over the same columns in the same
 * order as unblocked, the same bits. (A strip of 1536 floats, its next one
 * and an activation tile overflow L1 together: unblocked, 576x1536 ran at
 * 0.8-0.9x 1536x576's rate on one core; blocks of 512 made it 1.06-1.25x
 * faster, blocks of 384 or 768 no better.) */
enum { KB_MIN = 768, KB_COLS = 512, ACC_TILE = GR * GC * 16 };

static void mm_float_kblocked(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                              int64_t o0, int64_t o1, int acc, float *scratch)
{
    const int t = (int)w->type;
    const int64_t K = w->cols, nkb = (K + KB_COLS - 1) / KB_COLS, KB = ((K + nkb - 1) / nkb + 15) / 16 * 16;
    const size_t rb = tensor_row_bytes(w->type, K), es = rb / (size_t)K;   /* es: bytes per weight */
    const char *W = (const char *)w->data;
    float *cv = scratch, *abuf = scratch + GR * KB;   /* converted block (F16, BF16); accumulators per tile */
    const int32_t IB = i_block((int64_t)xs);
    for (int32_t i0 = 0; i0 < n; i0 += IB) {
        const int32_t i1 = n - i0 < IB ? n : i0 + IB, tiles = (i1 - i0 + GC - 1) / GC;
        for (int64_t o = o0; o < o1; o += GR) {
            const int R = o1 - o < GR ? (int)(o1 - o) : GR;
            for (int64_t k0 = 0; k0 < K; k0 += KB) {
                const int64_t kn = K - k0 < KB ? K - k0 : KB;
                const int last = k0 + kn >= K;
                /* the next block: this strip's next columns, else the next strip's first */
                const int64_t no = last ? o + GR : o, nk = last ? 0 : k0 + KB;
                const int nR = no >= o1 ? 0 : o1 - no < GR ? (int)(o1 - no) : GR;
                const size_t nbytes = (size_t)(K - nk < KB ? K - nk : KB) * es;
                const char *ws = W + (size_t)o * rb + (size_t)k0 * es;
                size_t wrb = rb;
                if (t != TF32) { to_f32(cv, KB, W + (size_t)o * rb, rb, R, k0, kn, t); ws = (const char *)cv; wrb = sizeof(float) * (size_t)KB; }
                const ktile_fn *g = kgrid[R - 1];
                for (int32_t i = i0, p = 0; i < i1; i += GC, p++) {
                    for (int r = 0; r < nR; r++)
                        prefetch_slice(W + (size_t)(no + r) * rb + (size_t)nk * es, nbytes, p, tiles);
                    float *ab = abuf + (size_t)p * ACC_TILE;
                    const int C = i1 - i < GC ? i1 - i : GC;
                    g[C - 1](ws, wrb, x + (size_t)i * xs + (size_t)k0 * sizeof(float), xs, kn,
                             y + (int64_t)i * ldy + o, ldy, acc, k0 ? ab : NULL, last ? NULL : ab);
                }
            }
        }
    }
}

/* Up to this many activation rows a float matmul streams its weights
 * (mm_float) instead of running the GEMM tiles: a speculative verify of 4
 * rows on the 135M MoR shape in F32 took 24-25 ms a step instead of 27 (N 3),
 * 5 rows 30 instead of 36 (N 4), and the bundled F16 model's speculation
 * 0.80x plain instead of 0.70x (N 3), in A B runs of mor-bench --speculate
 * on the Zen 5 machine; past 8 rows the GEMM's strip conversion and L2
 * blocking win. */
enum { STREAM_MAX = 8 };

/* The float matmuls' loops over the tiles of `grid` (weights of w's type against x's rows). scratch
 * (F16/BF16 weights) lets the GEMM convert each strip to floats once and run the F32 tiles on it, and
 * long rows go K-blocked; without it the grid's tiles read the weights as they are stored. */
static void mm_tiles(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc, float *scratch, const tile_fn (*grid)[4])
{
    const int t = (int)w->type;
    const int64_t K = w->cols;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    if (n <= STREAM_MAX) {
        /* Few rows (a decode, a speculative verify): the weights stream from
         * memory once, 4 rows at a time with prefetch, each strip serving
         * every activation row in groups of up to 4 (the later groups find it
         * in L1). With 8 rows at a time (more loads in flight per thread) two
         * threads read less, not more. */
        for (int64_t o = o0; o < o1; o += 4) {
            const int R = o1 - o < 4 ? (int)(o1 - o) : 4;
            size_t pn;
            const char *pf = pf_ahead(W, rb, o, R, o1, &pn);
            for (int32_t i = 0; i < n; i += 4)
                grid[R - 1][(n - i < 4 ? n - i : 4) - 1](W + (size_t)o * rb, rb, x + (size_t)i * xs, xs, K,
                                                         y + (int64_t)i * ldy + o, ldy, acc, i ? NULL : pf, i ? 0 : pn);
        }
        return;
    }
    if (K > KB_MIN && scratch) { mm_float_kblocked(w, x, xs, y, ldy, n, o0, o1, acc, scratch); return; }
    const int32_t IB = i_block((int64_t)xs);
    for (int32_t i0 = 0; i0 < n; i0 += IB) {
        const int32_t i1 = n - i0 < IB ? n : i0 + IB, tiles = (i1 - i0 + GC - 1) / GC;
        for (int64_t o = o0; o < o1; o += GR) {
            const int R = o1 - o < GR ? (int)(o1 - o) : GR;
            const char *ws = W + (size_t)o * rb;
            const size_t next = o + GR < o1 ? (size_t)(o1 - o - GR < GR ? o1 - o - GR : GR) * rb : 0;
            size_t wrb = rb;
            const tile_fn (*g)[4] = grid;
            if (t != TF32 && scratch) {   /* convert the strip once for all rows of the block */
                to_f32(scratch, K, ws, rb, R, 0, K, t);
                ws = (const char *)scratch; wrb = sizeof(float) * (size_t)K; g = grid_f32;
            }
            int32_t i = i0;
            for (; i + GC <= i1; i += GC) {
                if (next) prefetch_slice(W + (size_t)(o + GR) * rb, next, (i - i0) / GC, tiles);
                g[R - 1][GC - 1](ws, wrb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
            }
            if (i < i1) g[R - 1][i1 - i - 1](ws, wrb, x + (size_t)i * xs, xs, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
        }
    }
}

static void mm_float(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc, float *scratch)
{
    const int t = (int)w->type;
    mm_tiles(w, x, xs, y, ldy, n, o0, o1, acc, scratch, t == TF16 ? grid_f16 : t == TBF16 ? grid_bf16 : grid_f32);
}

/* ---- Q4_1, Q5_0, Q5_1 weights x Q8_0 / Q8_1 activations, VNNI ----
 *
 * (Q8_0 and Q4_0 have kernels of their own below, with the reference's
 * rounding.) Blocks go two at a time through 512-bit registers (this set's
 * canonical order for these types: 16 float lanes, lanes 0-7 from the even
 * block of a pair, 8-15 from the odd one; an odd last block pairs with
 * zeros). vpdpbusd multiplies unsigned by signed bytes, so the weights go in
 * as unsigned codes (Q5_0's q = w + 16 as stored, with its fifth bit), and
 * the offset comes back out by starting each sum at -16 times the
 * activations' lane sums (one vpdpbusd per activation pair, shared by every
 * weight row of the tile); Q4_1 and Q5_1 have no offset but a min, added
 * with the activations' block sums. The integers are exact; each block's
 * scale is the float product d_w * d_x.
 *
 * Matrix-vector products (up to Q_STREAM_ROWS activation rows) also compute
 * the activations' part of every pair (lane sums times the offset, scales)
 * once per call into the scratch, instead of once per tile. */

enum { QPAIR_PRE = 128 };   /* precomputed bytes per pair and activation row: 16 int32 offsets, 16 float scales */

/* The activation side of the pair (b, b+1) of activation row xr (two = 0:
 * block b and zeros): its codes, -offset x its lane sums, its scales;
 * from pre (this row's precomputed pairs) when given. */
AI int q81(int t) { return t == GGML_Q4_1 || t == GGML_Q5_1; }

AI void qx_get(const char *xr, const char *pre, int64_t K, int t, int64_t b, int two,
               __m512i *xv, __m512i *base, __m512 *xd)
{
    const int8_t *q = act_q8_qs(xr) + b * QK;
    if (two) {
        *xv = _mm512_load_si512((const void *)q);
        if (pre) {
            *base = _mm512_loadu_si512((const void *)(pre + (size_t)(b / 2) * QPAIR_PRE));
            *xd = _mm512_loadu_ps((const void *)(pre + (size_t)(b / 2) * QPAIR_PRE + 64));
            return;
        }
    } else {
        *xv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i *)q)), _mm256_setzero_si256(), 1);
    }
    const float *d = act_q8_d(xr, K) + b;
    *xd = _mm512_insertf32x8(_mm512_set1_ps(d[0]), _mm256_set1_ps(two ? d[1] : 0.0f), 1);
    if (q81(t)) {   /* unsigned codes, no offset: the slot carries the activations' block sums s in lanes 0 and 8 */
        const float *s = act_q8_1_s(xr, K) + b;
        *base = _mm512_castps_si512(_mm512_maskz_mov_ps(0x0101, _mm512_insertf32x8(_mm512_set1_ps(s[0]),
                                                                                   _mm256_set1_ps(two ? s[1] : 0.0f), 1)));
        return;
    }
    /* the code offset (Q5_0: 16), as u8 */
    const __m512i off = _mm512_set1_epi8(16);
    *base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, *xv));
}

/* Precompute qx_get's offsets and scales of every whole pair of n activation rows into pre
 * (nb / 2 * QPAIR_PRE bytes per row, rows ps bytes apart). */
static void qx_prepare(const char *x, size_t xs, int32_t n, int64_t K, int t, char *pre, size_t ps)
{
    for (int32_t c = 0; c < n; c++)
        for (int64_t b = 0; b + 2 <= K / QK; b += 2) {
            __m512i xv, base;
            __m512 xd;
            qx_get(x + (size_t)c * xs, NULL, K, t, b, 1, &xv, &base, &xd);
            char *p = pre + (size_t)c * ps + (size_t)(b / 2) * QPAIR_PRE;
            _mm512_storeu_si512((void *)p, base);
            _mm512_storeu_ps((void *)(p + 64), xd);
        }
}

/* Bytes per block of Q4_1, Q5_0, Q5_1 (their 16 nibble bytes last) */
AI size_t qbs(int t) { return t == GGML_Q4_1 ? 20 : t == GGML_Q5_0 ? 22 : 24; }

/* The unsigned codes of blocks b and b+1 (two = 0: block b only, zeros after). */
AI __m512i ldq2(const char *row, int64_t b, int t, int two)
{
    const size_t bs = qbs(t);
    const char *p = row + (size_t)b * bs;
    const __m128i v0 = _mm_loadu_si128((const __m128i *)(p + bs - 16));
    const __m256i y0 = _mm256_set_m128i(_mm_srli_epi16(v0, 4), v0);   /* values 0..15, then 16..31 */
    __m256i y1 = _mm256_setzero_si256();
    if (two) {
        const __m128i v1 = _mm_loadu_si128((const __m128i *)(p + 2 * bs - 16));
        y1 = _mm256_set_m128i(_mm_srli_epi16(v1, 4), v1);
    }
    __m512i u = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(y0), y1, 1), _mm512_set1_epi8(15));
    if (t != GGML_Q4_1) {   /* the fifth bit of value j: bit j of qh, a byte mask as it is */
        uint32_t h0, h1 = 0;
        const size_t ho = t == GGML_Q5_0 ? 2 : 4;
        memcpy(&h0, p + ho, 4);
        if (two) memcpy(&h1, p + bs + ho, 4);
        u = _mm512_mask_add_epi8(u, (__mmask64)h0 | (__mmask64)h1 << 32, u, _mm512_set1_epi8(16));
    }
    return u;
}

/* d of blocks b and b+1 as 8 + 8 floats (0 for a missing b+1; d first in every block) */
AI __m512 ldd2(const char *row, int64_t b, int t, int two)
{
    uint16_t d0, d1 = 0;
    const size_t bs = qbs(t);
    memcpy(&d0, row + (size_t)b * bs, 2);
    if (two) memcpy(&d1, row + (size_t)(b + 1) * bs, 2);
    return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16((short)d1), _mm_set1_epi16((short)d0)));
}

/* Q4_1 / Q5_1: the mins m of blocks b and b+1 in lanes 0 and 8 (0 for a missing b+1) */
AI __m512 ldm2(const char *row, int64_t b, int t, int two)
{
    uint16_t m0, m1 = 0;
    const size_t bs = qbs(t);
    memcpy(&m0, row + (size_t)b * bs + 2, 2);
    if (two) memcpy(&m1, row + (size_t)(b + 1) * bs + 2, 2);
    return _mm512_maskz_mov_ps(0x0101, _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16((short)m1), _mm_set1_epi16((short)m0))));
}

/* Functions compiled for VBMI and GFNI (Ice Lake, Zen 4 and later) are
 * only inlined into functions compiled for them (flatten); the novbmi set
 * never calls them. */
#define VBMI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,gfni,avx2,fma,f16c")))

/* The high nibble of every byte (x >> 4), one affine byte transform */
VBMI_TARGET static inline __m512i q4_hi_gfni(__m512i v)
{
    return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x1020408000000000ll), 0);
}

/* One pair of blocks (b, b+1; two = 0: block b and zeros) into the tile's accumulators. */
AI void qpair(__m512 a[4][4], const char *w, size_t rb, int t, const char *x, size_t xs, const char *pre, size_t ps,
              int64_t K, int R, int C, int64_t b, int two)
{
    __m512i xv[4], base[4];
    __m512 xd[4];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        qx_get(x + (size_t)c * xs, pre ? pre + (size_t)c * ps : NULL, K, t, b, two, &xv[c], &base[c], &xd[c]);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const char *wr = w + (size_t)r * rb;
        __m512i wu;
        __m512 wd;
        wu = ldq2(wr, b, t, two);
        wd = ldd2(wr, b, t, two);
        if (q81(t)) {   /* Q4_1 / Q5_1: d_w d_x (u . x) in the lanes, m_w s_x added to lanes 0 and 8 */
            const __m512 wm = ldm2(wr, b, t, two);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const __m512 v = _mm512_fmadd_ps(_mm512_mul_ps(wd, xd[c]),
                                                 _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wu, xv[c])),
                                                 a[r][c]);
                a[r][c] = _mm512_fmadd_ps(wm, _mm512_castsi512_ps(base[c]), v);
            }
            continue;
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            a[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(wd, xd[c]),
                                      _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base[c], wu, xv[c])), a[r][c]);
    }
}

/* R weight rows x C activation rows. pf (matrix-vector products): bytes to
 * prefetch over the loop; pre: the activations' precomputed pairs or NULL. */
AI void tile_q_body(const char *w, size_t rb, int t, const char *x, size_t xs, const char *pre, size_t ps, int64_t K,
                    int R, int C, float *y, int64_t ldy, int acc, const char *pf, size_t pfn)
{
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) a[r][c] = _mm512_setzero_ps();
    const int64_t nb = K / QK;
    pf_cursor pc = pf_start(pf, pfn, (nb + 1) / 2);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        if (pf) pf_step(&pc);   /* matrix-vector tiles only: GEMM tiles reuse their strip from L1 */
        qpair(a, w, rb, t, x, xs, pre, ps, K, R, C, b, 1);
    }
    if (b < nb) qpair(a, w, rb, t, x, xs, pre, ps, K, R, C, b, 0);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float s = hsum16(a[r][c]), *p = y + (int64_t)c * ldy + r;
            *p = acc ? *p + s : s;
        }
}

/* The body twice, so that GEMM tiles (no pre, no prefetch) carry no test of either in their loop
 * (with them, Q8_0 GEMM tiles ran 2-10% slower) */
AI void tile_q(const char *w, size_t rb, int t, const char *x, size_t xs, const char *pre, size_t ps, int64_t K,
               int R, int C, float *y, int64_t ldy, int acc, const char *pf, size_t pfn)
{
    if (pre || pf) tile_q_body(w, rb, t, x, xs, pre, ps, K, R, C, y, ldy, acc, pf, pfn);
    else tile_q_body(w, rb, t, x, xs, NULL, 0, K, R, C, y, ldy, acc, NULL, 0);
}

typedef void (*qtile_fn)(const char *w, size_t rb, const char *x, size_t xs, const char *pre, size_t ps, int64_t K,
                         float *y, int64_t ldy, int acc, const char *pf, size_t pfn);
#define QTILE(T, R, C) \
    static void qtile_##T##_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, const char *pre, size_t ps, \
                                      int64_t K, float *y, int64_t ldy, int acc, const char *pf, size_t pfn) \
    { tile_q(w, rb, T, x, xs, pre, ps, K, R, C, y, ldy, acc, pf, pfn); }
#define QROW(T, R) QTILE(T, R, 1) QTILE(T, R, 2) QTILE(T, R, 3) QTILE(T, R, 4)
#define QTILES(T) QROW(T, 1) QROW(T, 2) QROW(T, 3) QROW(T, 4)
enum { TQ41 = GGML_Q4_1, TQ50 = GGML_Q5_0, TQ51 = GGML_Q5_1 };
QTILES(TQ41)
QTILES(TQ50)
QTILES(TQ51)
#define QGROW(T, R) { qtile_##T##_##R##_1, qtile_##T##_##R##_2, qtile_##T##_##R##_3, qtile_##T##_##R##_4 }
#define QGRID(T) { QGROW(T, 1), QGROW(T, 2), QGROW(T, 3), QGROW(T, 4) }
static const qtile_fn grid_q41[4][4] = QGRID(TQ41), grid_q50[4][4] = QGRID(TQ50), grid_q51[4][4] = QGRID(TQ51);

/* ---- Q8_0 and Q4_0: exact block sums, scaled in block order ----
 *
 * These two types round as the reference kernels do (kernels_ref.c):
 *     s = 0;  for each block b:  s = s + (float)isum_b * (d_w[b] * d_x[b])
 * (a multiply, a multiply and an add, no FMA), with isum_b each block's
 * exact integer sum, so they give the reference's bits, for any number of
 * rows, tile or thread split (and the AMX set's, which sums the same way).
 *
 * GEMM (more than Q_STREAM_ROWS activation rows): weight rows in lanes. A
 * strip of 16 weight rows is packed once per block of activation rows into
 * the thread's scratch, per 32-value block 8 vectors of unsigned codes
 * (vector k: codes 4k..4k+3 of each of the 16 rows, one dword per row) and
 * the 16 rows' d. Then each vpdpbusd multiplies one vector by 4 activation
 * codes broadcast to every lane, and 8 of them give the 16 rows' exact sums
 * of a block against one activation row, which are scaled in one go:
 * 8 vpdpbusd per 3 float operations, where the 4 x 4 tiles below
 * (values in lanes) need 3 per vpdpbusd. The code offset (codes are q + 8,
 * q + 128) comes back out by starting each block's sums at -offset x the
 * activation row's block sum, computed once per block of activation rows.
 * On a Zen 5 core, 1536 x 576 Q4_0 x 128 rows ran 2.5-2.8x as fast as the 4 x
 * 4 tiles of the pair order before it (Q8_0 2.2-2.5x), and a 135M model's
 * prefill 1.6-1.9x.
 *
 * Matrix-vector products (up to Q_STREAM_ROWS rows) take the same shape
 * without the packing (vt_rows, below). */

enum { QG_PACK = 8 * 64 + 16 * 4 };   /* bytes of a packed block of a strip: 8 code vectors, 16 scales */
enum { QG_C = 8 };                    /* activation rows per GEMM tile */

/* Reading a strip, rows in lanes, straight from the weights (used by the
 * GEMM's packing and by the matrix-vector products, below): per block the 16
 * rows' codes are loaded and transposed as dwords in registers (Q4_0: the 16
 * nibble bytes of 4 rows to a register, 8 unpacks, after which one and /
 * shift gives two code vectors; Q8_0: the 32 code bytes of 2 rows to a
 * register, tr16x8); the scales of 8 blocks of a row come in two loads and a
 * word permute (16-row gathers took 40% of a matrix-vector product) and are
 * transposed the same way. Packing this way instead of through 32-byte rows
 * and scalar scale stores made a 12-row GEMM 1.45x as fast. */

/* The code dwords of block b of R (<= 16) rows, rows in lanes (lanes R..15 zero). Q4_0: d[k] (k < 4)
 * holds nibble bytes 4k..4k+3, whose low nibbles are codes 4k.. and high nibbles codes 16 + 4k..;
 * Q8_0: d[k] (k < 8) holds the unsigned codes 4k..4k+3. */
AI void vt_raw(const char *w, size_t rb, int R, int64_t b, int q4, __m512i d[8])
{
    if (q4) {
        __m512i v[4];
        const size_t o = (size_t)b * sizeof(block_q4_0) + 2;
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {   /* v[m], 128-bit lane L: row 4L + m */
            __m512i t = m < R ? _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(w + (size_t)m * rb + o)))
                              : _mm512_setzero_si512();
            if (4 + m < R) t = _mm512_inserti32x4(t, _mm_loadu_si128((const __m128i *)(w + (size_t)(4 + m) * rb + o)), 1);
            if (8 + m < R) t = _mm512_inserti32x4(t, _mm_loadu_si128((const __m128i *)(w + (size_t)(8 + m) * rb + o)), 2);
            if (12 + m < R) t = _mm512_inserti32x4(t, _mm_loadu_si128((const __m128i *)(w + (size_t)(12 + m) * rb + o)), 3);
            v[m] = t;
        }
        const __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
        const __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
        d[0] = _mm512_unpacklo_epi64(t0, t2);
        d[1] = _mm512_unpackhi_epi64(t0, t2);
        d[2] = _mm512_unpacklo_epi64(t1, t3);
        d[3] = _mm512_unpackhi_epi64(t1, t3);
        return;
    }
    __m512i z[8];
    const size_t o = (size_t)b * sizeof(block_q8_0) + 2;
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const __m256i lo = j < R ? _mm256_loadu_si256((const __m256i *)(w + (size_t)j * rb + o)) : _mm256_setzero_si256();
        const __m256i hi = j + 8 < R ? _mm256_loadu_si256((const __m256i *)(w + (size_t)(j + 8) * rb + o)) : _mm256_setzero_si256();
        z[j] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8((char)0x80));
    }
    tr16x8(z, d);
}

/* A Q4_0 dword vector of vt_raw as its two code vectors: low nibbles (codes 4k..) and high (16 + 4k..);
 * vbmi: the high ones by one affine byte transform */
AI void q4_nibbles(__m512i d, int vbmi, __m512i *lo, __m512i *hi)
{
    const __m512i m4 = _mm512_set1_epi8(15);
    *hi = vbmi ? q4_hi_gfni(d) : _mm512_and_si512(_mm512_srli_epi16(d, 4), m4);
    *lo = _mm512_and_si512(d, m4);
}

/* The d of blocks b..b+nblk-1 (nblk <= 8) of R (<= 16) rows as floats, rows in lanes (lanes R..15
 * zero): per row the words at the block starts (bytes b * bs on) by word permutes of at most 256
 * bytes read (only the blocks' own bytes), then a 16 x 8 transpose. */
AI void vt_scales8(const char *w, size_t rb, int R, int64_t b, int nblk, int q4, __m512 sc[8])
{
    const size_t bs = q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    const int bytes = nblk * (int)bs, nl = q4 ? 2 : 4;   /* 8 blocks: 144 or 272 bytes, read up to 128 or 256 */
    __mmask64 m[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        m[i] = bytes >= 64 * (i + 1) ? ~0ull : bytes <= 64 * i ? 0 : (1ull << (bytes - 64 * i)) - 1;
    /* word 9k (Q4_0) or 17k (Q8_0) of the loaded bytes into word k; Q8_0's blocks 4-7 from the second pair */
    const __m512i i4 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, 0, 0, 0, 0, 0, 0, 63, 54, 45, 36, 27, 18, 9, 0);
    const __m512i i8a = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 51, 34, 17, 0);
    const __m512i i8b = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 0, 55, 38, 21, 4, 0, 0, 0, 0);
    __m512i z[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        __m256i h[2];
#pragma GCC unroll 2
        for (int e = 0; e < 2; e++) {
            const int r = j + 8 * e;
            if (r >= R) { h[e] = _mm256_setzero_si256(); continue; }
            const char *p = w + (size_t)r * rb + (size_t)b * bs;
            __m512i l[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) l[i] = i < nl ? _mm512_maskz_loadu_epi8(m[i], p + 64 * i) : _mm512_setzero_si512();
            __m512i wd = _mm512_permutex2var_epi16(l[0], q4 ? i4 : i8a, l[1]);
            if (!q4) wd = _mm512_mask_blend_epi16(0xF0, wd, _mm512_permutex2var_epi16(l[2], i8b, l[3]));
            h[e] = _mm256_castps_si256(_mm256_cvtph_ps(_mm512_castsi512_si128(wd)));
        }
        z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);
    }
    __m512i out[8];
    tr16x8(z, out);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) sc[k] = _mm512_castsi512_ps(out[k]);
}

/* The R (<= 16) weight rows at w, all nb blocks, packed (QG_PACK bytes per block; rows from R on zero):
 * the code vectors of vt_raw (Q4_0 split into nibbles) and the scales of vt_scales8 */
static void qg_pack(char *pack, const char *w, size_t rb, int R, int64_t nb, int q4)
{
    for (int64_t b = 0; b < nb; b += 8) {
        const int nblk = nb - b < 8 ? (int)(nb - b) : 8;
        __m512 sc[8];
        vt_scales8(w, rb, R, b, nblk, q4, sc);
        for (int k = 0; k < nblk; k++) {
            __m512i d[8];
            vt_raw(w, rb, R, b + k, q4, d);
            if (q4)
#pragma GCC unroll 4
                for (int j = 3; j >= 0; j--) q4_nibbles(d[j], 0, &d[j], &d[j + 4]);
            char *p = pack + (size_t)(b + k) * QG_PACK;
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) _mm512_store_si512((void *)(p + 64 * j), d[j]);
            _mm512_store_ps((void *)(p + 512), sc[k]);
        }
    }
}

/* -offset x the block sums of n activation rows, nb per row */
static void qg_offsets(const char *x, size_t xs, int32_t n, int64_t K, int q4, int32_t *xo)
{
    const int32_t off = q4 ? 8 : 128;
    for (int32_t c = 0; c < n; c++) {
        const int8_t *q = act_q8_qs(x + (size_t)c * xs);
        for (int64_t b = 0; b < K / QK; b++) {
            int32_t s = 0;
            for (int j = 0; j < QK; j++) s += q[b * QK + j];
            xo[(int64_t)c * (K / QK) + b] = -off * s;
        }
    }
}

/* y row (R outputs from y, mask of R lanes) = a, or += a */
AI void store_lanes(float *y, __m512 a, int R, int acc)
{
    const __mmask16 m = (__mmask16)((1u << R) - 1);
    if (acc) a = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y), a);
    _mm512_mask_storeu_ps(y, m, a);
}

/* C (<= QG_C) activation rows x one packed strip of R weight rows, all blocks */
AI void qg_tile(const char *pack, int64_t nb, const char *x, size_t xs, const int32_t *xo, int64_t K, int C, int R,
                float *y, int64_t ldy, int acc)
{
    __m512 a[QG_C];
    const int8_t *xq[QG_C];
    const float *xd[QG_C];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        a[c] = _mm512_setzero_ps();
        xq[c] = act_q8_qs(x + (size_t)c * xs);
        xd[c] = act_q8_d(x + (size_t)c * xs, K);
    }
    for (int64_t b = 0; b < nb; b++) {
        const char *p = pack + (size_t)b * QG_PACK;
        __m512i s[QG_C];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) s[c] = _mm512_set1_epi32(xo[(int64_t)c * nb + b]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i wv = _mm512_load_si512((const void *)(p + 64 * k));
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) {
                int32_t x4;
                memcpy(&x4, xq[c] + QK * b + 4 * k, 4);
                s[c] = _mm512_dpbusd_epi32(s[c], wv, _mm512_set1_epi32(x4));
            }
        }
        const __m512 dw = _mm512_load_ps((const void *)(p + 512));
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            a[c] = _mm512_add_ps(a[c], _mm512_mul_ps(_mm512_cvtepi32_ps(s[c]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[c][b]))));
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) store_lanes(y + (int64_t)c * ldy, a[c], R, acc);
}

typedef void (*qg_tile_fn)(const char *pack, int64_t nb, const char *x, size_t xs, const int32_t *xo, int64_t K,
                           int R, float *y, int64_t ldy, int acc);
#define QG_TILE(C) \
    static void qg_tile_##C(const char *pack, int64_t nb, const char *x, size_t xs, const int32_t *xo, int64_t K, \
                            int R, float *y, int64_t ldy, int acc) \
    { qg_tile(pack, nb, x, xs, xo, K, C, R, y, ldy, acc); }
QG_TILE(1) QG_TILE(2) QG_TILE(3) QG_TILE(4) QG_TILE(5) QG_TILE(6) QG_TILE(7) QG_TILE(8)
static const qg_tile_fn qg_tiles[QG_C] = { qg_tile_1, qg_tile_2, qg_tile_3, qg_tile_4,
                                           qg_tile_5, qg_tile_6, qg_tile_7, qg_tile_8 };

/* Scratch bytes the GEMM needs for a block of nx activation rows */
AI size_t qg_scratch(int64_t nb, int32_t nx) { return (size_t)nb * QG_PACK + (size_t)nx * (size_t)nb * 4 + 64; }

/* The GEMM: activation rows in blocks (each block's offsets computed once, the block staying in L2),
 * weight strips of 16 rows packed once per block of activation rows. */
static void qg_gemm(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                    int64_t o0, int64_t o1, int acc, float *scratch, int32_t IB)
{
    const int q4 = w->type == GGML_Q4_0;
    const int64_t K = w->cols, nb = K / QK;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    char *pack = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    int32_t *xo = (int32_t *)(void *)(pack + (size_t)nb * QG_PACK);
    for (int32_t i0 = 0; i0 < n; i0 += IB) {
        const int32_t i1 = n - i0 < IB ? n : i0 + IB, tiles = (i1 - i0 + QG_C - 1) / QG_C;
        qg_offsets(x + (size_t)i0 * xs, xs, i1 - i0, K, q4, xo);
        for (int64_t o = o0; o < o1; o += 16) {
            const int R = o1 - o < 16 ? (int)(o1 - o) : 16;
            qg_pack(pack, W + (size_t)o * rb, rb, R, nb, q4);
            const size_t next = o + 16 < o1 ? (size_t)(o1 - o - 16 < 16 ? o1 - o - 16 : 16) * rb : 0;
            for (int32_t i = i0; i < i1; i += QG_C) {
                const int C = i1 - i < QG_C ? i1 - i : QG_C;
                if (next) prefetch_slice(W + (size_t)(o + 16) * rb, next, (i - i0) / QG_C, tiles);
                qg_tiles[C - 1](pack, nb, x + (size_t)i * xs, xs, xo + (int64_t)(i - i0) * nb, K, R,
                                y + (int64_t)i * ldy + o, ldy, acc);
            }
        }
    }
}

/* Matrix-vector products (up to Q_STREAM_ROWS activation rows) take the
 * GEMM's shape without its packing, which would cost more than the product:
 * each block's code vectors (vt_raw) serve up to VQ_ROWS activation rows. */
enum { VQ_ROWS = 4 };   /* activation rows per pass over a strip */

/* One block b (d: vt_raw's, dw: its scales) into the accumulators of N activation rows */
AI void vt_block(__m512 a[VQ_ROWS], const __m512i d[8], __m512 dw, const int8_t *const xq[VQ_ROWS],
                 const float *const xd[VQ_ROWS], const int32_t *xo, int64_t nb, int N, int64_t b, int q4, int vbmi)
{
    /* per activation row four chains of two vpdpbusd (one chain of 8 is latency-bound), added exactly */
    __m512i s4[VQ_ROWS][4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512i lo = d[k], hi = d[k + 4];   /* codes 4k.. and 16 + 4k.. */
        if (q4) q4_nibbles(d[k], vbmi, &lo, &hi);
#pragma GCC unroll 4
        for (int j = 0; j < N; j++) {
            int32_t x0, x1;
            memcpy(&x0, xq[j] + QK * b + 4 * k, 4);
            memcpy(&x1, xq[j] + QK * b + 16 + 4 * k, 4);
            const __m512i s0 = k ? _mm512_setzero_si512() : _mm512_set1_epi32(xo[(int64_t)j * nb + b]);
            s4[j][k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(s0, lo, _mm512_set1_epi32(x0)), hi, _mm512_set1_epi32(x1));
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < N; j++) {
        const __m512i s = _mm512_add_epi32(_mm512_add_epi32(s4[j][0], s4[j][1]), _mm512_add_epi32(s4[j][2], s4[j][3]));
        a[j] = _mm512_add_ps(a[j], _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xd[j][b]))));
    }
}

/* R (<= 16) weight rows x N (<= VQ_ROWS) activation rows (xo: their offsets, nb per row); pf: bytes to
 * prefetch over the loop */
AI void vt_strip(const char *w, size_t rb, int R, const char *x, size_t xs, const int32_t *xo, int N, int64_t K,
                 float *y, int64_t ldy, int acc, const char *pf, size_t pfn, int q4, int vbmi)
{
    const int64_t nb = K / QK;
    __m512 a[VQ_ROWS];
    const int8_t *xq[VQ_ROWS];
    const float *xd[VQ_ROWS];
#pragma GCC unroll 4
    for (int j = 0; j < N; j++) {
        a[j] = _mm512_setzero_ps();
        xq[j] = act_q8_qs(x + (size_t)j * xs);
        xd[j] = act_q8_d(x + (size_t)j * xs, K);
    }
    pf_cursor pc = pf_start(pf, pfn, nb);
    for (int64_t b = 0; b < nb; b += 8) {
        const int nblk = nb - b < 8 ? (int)(nb - b) : 8;
        __m512 sc[8];
        vt_scales8(w, rb, R, b, nblk, q4, sc);
#pragma GCC unroll 1
        for (int k = 0; k < nblk; k++) {
            pf_step_to(&pc, 1);   /* into L2: the stream prefetch (kernels_vnni.h) */
            __m512i d[8];
            vt_raw(w, rb, R, b + k, q4, d);
            vt_block(a, d, sc[k], xq, xd, xo, nb, N, b + k, q4, vbmi);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < N; j++) store_lanes(y + (int64_t)j * ldy, a[j], R, acc);
}

/* The strips, compiled per type (Q4_0 with and without VBMI + GFNI), activation rows and 16 or R rows */
typedef void (*vt_strip_fn)(const char *w, size_t rb, int R, const char *x, size_t xs, const int32_t *xo,
                            int64_t K, float *y, int64_t ldy, int acc, const char *pf, size_t pfn);
#define VBMI_FLAT VBMI_TARGET __attribute__((flatten))
#define VT_STRIP(T, N, RR, S, Q4, V, ATTR) \
    ATTR static void vt_##T##_##N##_##S(const char *w, size_t rb, int R, const char *x, size_t xs, const int32_t *xo, \
                                        int64_t K, float *y, int64_t ldy, int acc, const char *pf, size_t pfn) \
    { (void)R; vt_strip(w, rb, RR, x, xs, xo, N, K, y, ldy, acc, pf, pfn, Q4, V); }
#define VT_STRIPS(T, Q4, V, ATTR) \
    VT_STRIP(T, 1, 16, 16, Q4, V, ATTR) VT_STRIP(T, 2, 16, 16, Q4, V, ATTR) VT_STRIP(T, 3, 16, 16, Q4, V, ATTR) \
    VT_STRIP(T, 4, 16, 16, Q4, V, ATTR) VT_STRIP(T, 1, R, r, Q4, V, ATTR) VT_STRIP(T, 2, R, r, Q4, V, ATTR) \
    VT_STRIP(T, 3, R, r, Q4, V, ATTR) VT_STRIP(T, 4, R, r, Q4, V, ATTR)
VT_STRIPS(q8, 0, 0, )
VT_STRIPS(q4, 1, 0, )
VT_STRIPS(q4v, 1, 1, VBMI_FLAT)
#define VT_GRID(T) { { vt_##T##_1_16, vt_##T##_2_16, vt_##T##_3_16, vt_##T##_4_16 }, \
                     { vt_##T##_1_r, vt_##T##_2_r, vt_##T##_3_r, vt_##T##_4_r } }
static const vt_strip_fn vt_q8[2][VQ_ROWS] = VT_GRID(q8), vt_q4[2][VQ_ROWS] = VT_GRID(q4), vt_q4v[2][VQ_ROWS] = VT_GRID(q4v);

/* xo: scratch for n x K / 32 offsets */
static void vt_rows(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                    int64_t o0, int64_t o1, int acc, int32_t *xo, int vbmi)
{
    const int q4 = w->type == GGML_Q4_0;
    const int64_t K = w->cols;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    const vt_strip_fn (*g)[VQ_ROWS] = !q4 ? vt_q8 : vbmi ? vt_q4v : vt_q4;
    qg_offsets(x, xs, n, K, q4, xo);
    stream_start(W, rb, o0, o1);
    for (int64_t o = o0; o < o1; o += 16) {
        const int R = o1 - o < 16 ? (int)(o1 - o) : 16;
        size_t pfn;
        const char *pf = stream_next(W, rb, o, o1, &pfn);
        for (int32_t i = 0; i < n; i += VQ_ROWS) {
            const int nx = n - i < VQ_ROWS ? n - i : VQ_ROWS;
            g[R != 16][nx - 1](W + (size_t)o * rb, rb, R, x + (size_t)i * xs, xs, xo + (int64_t)i * (K / QK), K,
                               y + (int64_t)i * ldy + o, ldy, acc, i == 0 ? pf : NULL, i == 0 ? pfn : 0);
        }
    }
}

/* Up to this many activation rows, a matmul streams its weights as a
 * matrix-vector product does (tiles of 4 weight rows x up to 4 activation
 * rows, prefetching ahead; more rows go in groups of 4 over the same strip,
 * which the later groups find in L1): decoding one token of a few
 * sequences, a speculative verify. */
enum { Q_STREAM_ROWS = 8 };

static void mm_quant(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc, float *scratch, int vbmi)
{
    const int64_t K = w->cols;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    if (w->type == GGML_Q8_0 || w->type == GGML_Q4_0) {   /* the reference's bits, every shape */
        const int32_t IB = i_block((int64_t)xs);
        if (!scratch || qg_scratch(K / QK, IB) > sizeof(float) * MM_SCRATCH_FLOATS(K))
            k_matmul_ref_range(w, x, xs, y, ldy, n, o0, o1, acc, scratch);   /* never with a scratch */
        else if (n > Q_STREAM_ROWS)
            qg_gemm(w, x, xs, y, ldy, n, o0, o1, acc, scratch, IB);
        else
            vt_rows(w, x, xs, y, ldy, n, o0, o1, acc, (int32_t *)scratch, vbmi);
        return;
    }
    const qtile_fn (*g)[4] = w->type == GGML_Q4_1 ? grid_q41 : w->type == GGML_Q5_0 ? grid_q50 : grid_q51;
    if (n <= Q_STREAM_ROWS) {
        /* the scratch holds MM_SCRATCH_FLOATS(K) floats: 64 K bytes, and this needs n x K / 64 x 128 */
        const size_t ps = (size_t)(K / QK / 2) * QPAIR_PRE;
        char *pre = scratch && ps ? (char *)scratch : NULL;
        if (pre) qx_prepare(x, xs, n, K, (int)w->type, pre, ps);
        for (int64_t o = o0; o < o1; o += 4) {
            const int R = o1 - o < 4 ? (int)(o1 - o) : 4;
            size_t pn;
            const char *pf = pf_ahead(W, rb, o, R, o1, &pn);
            for (int32_t i = 0; i < n; i += 4)
                g[R - 1][(n - i < 4 ? n - i : 4) - 1](W + (size_t)o * rb, rb, x + (size_t)i * xs, xs,
                                                      pre ? pre + (size_t)i * ps : NULL, ps, K,
                                                      y + (int64_t)i * ldy + o, ldy, acc, i ? NULL : pf, i ? 0 : pn);
        }
        return;
    }
    const int32_t IB = i_block((int64_t)xs);
    for (int32_t i0 = 0; i0 < n; i0 += IB) {
        const int32_t i1 = n - i0 < IB ? n : i0 + IB, tiles = (i1 - i0 + 3) / 4;
        for (int64_t o = o0; o < o1; o += 4) {
            const int R = o1 - o < 4 ? (int)(o1 - o) : 4;
            const char *ws = W + (size_t)o * rb;
            const size_t next = o + 4 < o1 ? (size_t)(o1 - o - 4 < 4 ? o1 - o - 4 : 4) * rb : 0;
            int32_t i = i0;
            for (; i + 4 <= i1; i += 4) {
                if (next) prefetch_slice(W + (size_t)(o + 4) * rb, next, (i - i0) / 4, tiles);
                g[R - 1][3](ws, rb, x + (size_t)i * xs, xs, NULL, 0, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
            }
            if (i < i1) g[R - 1][i1 - i - 1](ws, rb, x + (size_t)i * xs, xs, NULL, 0, K, y + (int64_t)i * ldy + o, ldy, acc, NULL, 0);
        }
    }
}

/* ---- k-quants (Q2_K .. Q6_K) x Q8_K activations: bitwise the reference ----
 *
 * As the AVX2 set's (kernels_avx2.c, k_matmul_kquant_x86), with 64 codes per
 * register: a super-block is taken apart in registers into 4 vectors of
 * unsigned codes u = q + bias in value order and, per vector, the 16-bit
 * scale of each of its 16-value groups; vpmaddubsw then vpdpwssd (VNNI)
 * accumulate sum_g sc_g (u . x)_g exactly, the bias and the mins come from
 * the Q8_K block sums, and kq_step adds the super-block as the reference
 * does. The same integers and the same float step: the reference's bits.
 * Matrix-vector products take each super-block apart once for up to 4
 * activation rows; larger products repack 16 weight rows at a time into the
 * scratch (below, ktile). */

typedef struct { __m512i u[4], sc[4]; __m256i sc16, mn16; float d, dmin; } kqz;

/* The bias shift of a type: u = q + (1 << shift); 0 without. */
#define KQZ_SHIFT(t) ((t) == GGML_Q6_K ? 5 : (t) == GGML_Q3_K ? 2 : 0)

static const int16_t kqz_iota[32] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                      16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31 };

/* word w of the result: word base + (w >> sh) of v (16 words) */
AI __m512i zspread(__m256i v, int base, int sh)
{
    const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)base),
                                         _mm512_srli_epi16(_mm512_loadu_si512((const void *)kqz_iota), (unsigned)sh));
    return _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(v));
}
AI __m256i yspread(__m256i v, int base, int sh) { return _mm512_castsi512_si256(zspread(v, base, sh)); }
AI __m512i z15(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(15)); }
AI __m512i zhi4(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15)); }
AI float zf16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return _cvtsh_ss(h); }
/* the 32 bytes at p in both halves */
AI __m512i zdup(const uint8_t *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }
/* bytes of v whose bit m (first 32 bytes) / m2 (last 32) is set, as the mask of a masked add */
AI __mmask64 zbits(__m512i v, int m, int m2)
{
    const __m512i b = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << m)), _mm256_set1_epi8((char)(1 << m2)), 1);
    return _mm512_test_epi8_mask(v, b);
}

/* The 12 packed 6-bit scales and mins at p as bytes: sc0..7 then mn0..7 (kq_scales_mins, in lanes) */
AI __m128i k4_scales_bytes(const uint8_t *p)
{
    const __m128i s = _mm_loadu_si128((const __m128i *)p);   /* bytes 12..15 (codes) unused */
    /* j < 4: sc = s[j] & 63, mn = s[j + 4] & 63; j >= 4: sc = s[j + 4] & 15, mn = s[j + 4] >> 4, each
     * with the top bits of s[j - 4] (sc) or s[j] (mn) above them */
    const __m128i lo = _mm_shuffle_epi8(s, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i top = _mm_shuffle_epi8(s, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i m = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0);
    const __m128i hi4 = _mm_and_si128(_mm_srli_epi16(lo, 4), _mm_setr_epi32(0, 0, 0, 0x0F0F0F0F));
    const __m128i t2 = _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30));
    return _mm_or_si128(_mm_or_si128(_mm_and_si128(lo, m), hi4), t2);
}

/* Q4_K / Q5_K: the 8 scales then the 8 mins (kq_scales_mins) as 16-bit words. Not k4_scales_bytes
 * widened: that measured 4% slower in the GEMM's packing (k256 Q4_K_M pp128, 2 pairs). */
AI __m256i k4_scale_words(const uint8_t *p)
{
    uint8_t sm[16];
    kq_scales_mins(p, sm);
    return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)sm));
}

/* Super-block p of type t (a constant where this is inlined) into registers. */
AI void kqz_load(uint32_t t, const uint8_t *p, kqz *o)
{
    if (t == GGML_Q4_K || t == GGML_Q5_K) {
        const __m256i w = k4_scale_words(p + 4);   /* 8 scales then 8 mins, one per 32 values */
        o->d = zf16(p); o->dmin = zf16(p + 2);
        o->sc16 = yspread(w, 0, 1);
        o->mn16 = yspread(w, 8, 1);
        const uint8_t *qs = p + (t == GGML_Q4_K ? 16 : 48);
        const __m512i qh = t == GGML_Q5_K ? zdup(p + 16) : _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            /* 64 bytes: low nibbles are values 128h + 0..31 and 128h + 64..95, high ones 32..63 and 96..127 */
            const __m512i q = _mm512_loadu_si512((const void *)(qs + 64 * h)), lo = z15(q), hi = zhi4(q);
            __m512i a = _mm512_shuffle_i64x2(lo, hi, 0x44), b = _mm512_shuffle_i64x2(lo, hi, 0xEE);
            if (t == GGML_Q5_K) {   /* the fifth bit of value 32m + l: bit m of qh[l] */
                a = _mm512_mask_add_epi8(a, zbits(qh, 4 * h, 4 * h + 1), a, _mm512_set1_epi8(16));
                b = _mm512_mask_add_epi8(b, zbits(qh, 4 * h + 2, 4 * h + 3), b, _mm512_set1_epi8(16));
            }
            o->u[2 * h] = a; o->u[2 * h + 1] = b;
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) o->sc[c] = zspread(w, 2 * c, 4);
        return;
    }
    if (t == GGML_Q6_K) {   /* ql[128], qh[64], int8 scales[16], d */
        o->d = zf16(p + 208); o->dmin = 0.0f;
        o->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192)));
        o->mn16 = _mm256_setzero_si256();
        const __m512i m0 = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0C), 1);
        const __m512i m1 = _mm512_inserti64x4(_mm512_set1_epi8(0x30), _mm256_set1_epi8((char)0xC0), 1);
        const __m512i s0 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
        const __m512i s1 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            /* ql[64h..]: low nibbles values 128h + 0..63, high ones 64..127; 2 more bits each from qh[32h + l] */
            const __m512i q = _mm512_loadu_si512((const void *)(p + 64 * h)), hb = zdup(p + 128 + 32 * h);
            o->u[2 * h] = _mm512_or_si512(z15(q), _mm512_sllv_epi16(_mm512_and_si512(hb, m0), s0));
            o->u[2 * h + 1] = _mm512_or_si512(zhi4(q), _mm512_srlv_epi16(_mm512_and_si512(hb, m1), s1));
        }
    } else if (t == GGML_Q3_K) {   /* hmask[32], qs[64], scales[12], d: u = 2 low bits + 4 x high bit */
        o->d = zf16(p + 108); o->dmin = 0.0f;
        int16_t s[16];
        for (int j = 0; j < 16; j++) s[j] = (int16_t)q3k_scale(p + 96, j);
        o->sc16 = _mm256_loadu_si256((const __m256i *)s);
        o->mn16 = _mm256_setzero_si256();
        const __m512i hm = zdup(p);
        const __m512i s0 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
        const __m512i s1 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i q = zdup(p + 32 + 32 * h), three = _mm512_set1_epi8(3);
            const __m512i a = _mm512_and_si512(_mm512_srlv_epi16(q, s0), three);
            const __m512i b = _mm512_and_si512(_mm512_srlv_epi16(q, s1), three);
            o->u[2 * h] = _mm512_mask_add_epi8(a, zbits(hm, 4 * h, 4 * h + 1), a, _mm512_set1_epi8(4));
            o->u[2 * h + 1] = _mm512_mask_add_epi8(b, zbits(hm, 4 * h + 2, 4 * h + 3), b, _mm512_set1_epi8(4));
        }
    } else {   /* Q2_K: scales[16] (scale | min << 4), qs[64], d, dmin */
        o->d = zf16(p + 80); o->dmin = zf16(p + 82);
        const __m256i sm = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
        o->sc16 = _mm256_and_si256(sm, _mm256_set1_epi16(15));
        o->mn16 = _mm256_srli_epi16(sm, 4);
        const __m512i s0 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
        const __m512i s1 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i q = zdup(p + 16 + 32 * h), three = _mm512_set1_epi8(3);
            o->u[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(q, s0), three);
            o->u[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, s1), three);
        }
    }
    /* one scale per 16 values: vector c covers groups 4c .. 4c + 3 */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) o->sc[c] = zspread(o->sc16, 4 * c, 3);
}

/* One super-block of weights (w, bias shift sh) against 256 activation codes x with their 16 block
 * sums and scale xd: s plus its contribution, as the reference adds it. */
AI float kqz_dot(const kqz *w, int sh, const int8_t *x, const int16_t *bsum, float xd, float s)
{
    __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(w->u[c], _mm512_loadu_si512((const void *)(x + 64 * c))),
                                  w->sc[c]);
    const __m256i bs = _mm256_loadu_si256((const __m256i *)bsum);
    __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
    if (sh) a = _mm256_sub_epi32(a, _mm256_slli_epi32(_mm256_madd_epi16(w->sc16, bs), (unsigned)sh));
    const __m256i h = _mm256_hadd_epi32(a, _mm256_madd_epi16(w->mn16, bs));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    t = _mm_hadd_epi32(t, t);
    return kq_step(s, w->d, w->dmin, xd, _mm_cvtsi128_si32(t), _mm_extract_epi32(t, 1));
}

enum { KQZ_STREAM_ROWS = 4 };


/* k-quant GEMM (more than KQZ_STREAM_ROWS activation rows): 16 weight rows
 * at a time, repacked once into the scratch so that one vpdpbusd lane is one
 * weight row (ggml's repacked layouts do the same): per super-block, 4 codes
 * of each of the 16 rows per 64 bytes, and each group's scale and min per
 * row in int32 lanes. An activation row's 4 codes are broadcast, so a
 * group's sums land in the rows' lanes with no horizontal sums: a group
 * (16 or 32 values) accumulates from -bias x its activation sum, is scaled
 * by the rows' scales (vpmulld) into the super-block's integer sum, the mins
 * times the group sums into the other, and kq_step's float operations run
 * 16 rows at once. The reference's integers and float steps: its bits. */
enum { KT_ROWS = 16, KT_COLS = 4 };
typedef struct {
    uint8_t u[QK_K / 4][64];        /* quad q (values 4q .. 4q+3): 4 codes of row r at bytes 4r .. 4r+3 */
    int32_t sc[16][KT_ROWS];        /* group j's scale per row (groups of 16 values, or of 32: 8 used) */
    int32_t mn[16][KT_ROWS];        /* group j's min per row (types with mins) */
    float   d[KT_ROWS], dmin[KT_ROWS];
} ktile;
_Static_assert(sizeof(ktile) % 64 == 0 && sizeof(ktile) <= 16 * sizeof(float) * QK_K,
               "a repacked super-block of 16 rows fits the matmul scratch");

/* Repack rows [o, o + R) (R <= 16; the rest repeat row o) of super-blocks 0 .. nb-1 into kt. */
AI void ktile_pack(uint32_t t, const uint8_t *W, size_t rb, size_t bs, int64_t o, int R, int64_t nb, ktile *kt)
{
    const int sub32 = t == GGML_Q4_K || t == GGML_Q5_K;
    for (int r = 0; r < KT_ROWS; r++) {
        const uint8_t *row = W + (size_t)(o + (r < R ? r : 0)) * rb;
        for (int64_t b = 0; b < nb; b++) {
            kqz v;
            kqz_load(t, row + (size_t)b * bs, &v);
            _Alignas(64) uint8_t u[QK_K];
            _Alignas(32) int16_t sc[16], mn[16];
            for (int c = 0; c < 4; c++) _mm512_store_si512((void *)(u + 64 * c), v.u[c]);
            _mm256_store_si256((__m256i *)sc, v.sc16);
            _mm256_store_si256((__m256i *)mn, v.mn16);
            ktile *k = kt + b;
            for (int q = 0; q < QK_K / 4; q++) memcpy(k->u[q] + 4 * r, u + 4 * q, 4);
            for (int j = 0; j < 16; j++) {
                k->sc[j][r] = sc[sub32 ? (2 * j) % 16 : j];
                k->mn[j][r] = mn[sub32 ? (2 * j) % 16 : j];
            }
            k->d[r] = v.d;
            k->dmin[r] = v.dmin;
        }
    }
}

/* C activation rows (x[c]: prepared Q8_K rows) against the packed tiles of nb super-blocks: y[c][r] */
AI void ktile_mul(uint32_t t, const ktile *kt, int64_t nb, const char *const x[KT_COLS], int64_t K, int C, __m512 out[KT_COLS])
{
    const int sh = KQZ_SHIFT(t), sub32 = t == GGML_Q4_K || t == GGML_Q5_K, mins = sub32 || t == GGML_Q2_K;
    const int ng = sub32 ? 8 : 16, qpg = sub32 ? 8 : 4;   /* groups, quads per group */
    const int32_t bias = sh ? 1 << sh : 0;
    __m512 s[KT_COLS];
#pragma GCC unroll 4
    for (int c = 0; c < KT_COLS; c++) s[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const ktile *k = kt + b;
        __m512i isum[KT_COLS], msum[KT_COLS];
        const int8_t *xq[KT_COLS];
        const int16_t *bsum[KT_COLS];
#pragma GCC unroll 4
        for (int c = 0; c < KT_COLS; c++) {
            isum[c] = msum[c] = _mm512_setzero_si512();
            if (c < C) { xq[c] = act_q8_qs(x[c]) + b * QK_K; bsum[c] = act_q8k_bsums(x[c], K) + b * 16; }
        }
        for (int j = 0; j < ng; j++) {
            __m512i a[KT_COLS];
            int32_t gs[KT_COLS];
#pragma GCC unroll 4
            for (int c = 0; c < KT_COLS; c++) {
                if (c >= C) break;
                gs[c] = sub32 ? bsum[c][2 * j] + bsum[c][2 * j + 1] : bsum[c][j];
                a[c] = _mm512_set1_epi32(-gs[c] * bias);   /* sum (u - bias) x = sum u x - bias sum x */
            }
#pragma GCC unroll 8
            for (int q = 0; q < qpg; q++) {
                const int qq = j * qpg + q;
                const __m512i w = _mm512_load_si512((const void *)k->u[qq]);
#pragma GCC unroll 4
                for (int c = 0; c < KT_COLS; c++) {
                    if (c >= C) break;
                    int32_t x4;
                    memcpy(&x4, xq[c] + 4 * qq, 4);
                    a[c] = _mm512_dpbusd_epi32(a[c], w, _mm512_set1_epi32(x4));
                }
            }
            const __m512i scv = _mm512_load_si512((const void *)k->sc[j]);
            const __m512i mnv = mins ? _mm512_load_si512((const void *)k->mn[j]) : _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int c = 0; c < KT_COLS; c++) {
                if (c >= C) break;
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(a[c], scv));
                if (mins) msum[c] = _mm512_add_epi32(msum[c], _mm512_mullo_epi32(mnv, _mm512_set1_epi32(gs[c])));
            }
        }
        const __m512 d = _mm512_load_ps(k->d), dmin = _mm512_load_ps(k->dmin);
#pragma GCC unroll 4
        for (int c = 0; c < KT_COLS; c++) {
            if (c >= C) break;
            const __m512 xd = _mm512_set1_ps(act_q8k_d(x[c], K)[b]);
            const __m512 tt = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(d, xd), _mm512_cvtepi32_ps(isum[c])),
                                            _mm512_mul_ps(_mm512_mul_ps(dmin, xd), _mm512_cvtepi32_ps(msum[c])));
            s[c] = _mm512_add_ps(s[c], tt);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < KT_COLS; c++) out[c] = s[c];
}

AI void mm_kquant_gemm(uint32_t t, const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                       int64_t o0, int64_t o1, int acc, ktile *kt)
{
    const int64_t K = w->cols, nb = K / QK_K;
    const size_t rb = tensor_row_bytes(t, K), bs = (size_t)tensor_row_bytes(t, QK_K);
    for (int64_t o = o0; o < o1; o += KT_ROWS) {
        const int R = o1 - o < KT_ROWS ? (int)(o1 - o) : KT_ROWS;
        const __mmask16 m = (__mmask16)((1u << R) - 1);
        ktile_pack(t, (const uint8_t *)w->data, rb, bs, o, R, nb, kt);
        for (int32_t i = 0; i < n; i += KT_COLS) {
            const int C = n - i < KT_COLS ? n - i : KT_COLS;
            const char *xr[KT_COLS];
            __m512 out[KT_COLS];
            for (int c = 0; c < KT_COLS; c++) xr[c] = x + (size_t)(i + (c < C ? c : 0)) * xs;
            if (C == KT_COLS) ktile_mul(t, kt, nb, xr, K, KT_COLS, out);
            else if (C == 3) ktile_mul(t, kt, nb, xr, K, 3, out);
            else if (C == 2) ktile_mul(t, kt, nb, xr, K, 2, out);
            else ktile_mul(t, kt, nb, xr, K, 1, out);
            for (int c = 0; c < C; c++) {
                float *yo = y + (int64_t)(i + c) * ldy + o;
                __m512 v = out[c];
                if (acc) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, yo), v);
                _mm512_mask_storeu_ps(yo, m, v);
            }
        }
    }
}

/* ---- one activation row, KQV_ROWS weight rows at a time ----
 *
 * The activation vectors of a super-block are loaded once for all the
 * rows, and the rows' integer sums are reduced together (one transpose-add
 * tree instead of a horizontal sum per row); kq_step then runs in the rows'
 * lanes: the same float operations in the same order, the reference's bits.
 * Q4_K / Q5_K are not reordered into value order: the activations are
 * instead (the codes of 64 bytes of qs are sub-blocks 4h, 4h + 2 in the low
 * nibbles and 4h + 1, 4h + 3 in the high ones), their 6-bit scales unpacked
 * with byte shuffles. An exact integer sum has no order to keep. */
/* KQV_PF: how far ahead of a group the weights are prefetched, in bytes. The
 * group's rows are read in 4 short interleaved streams, which the hardware
 * prefetchers do not follow as they do one row after the other. */
enum { KQV_ROWS = 4, KQV_PF = 16384 };

/* A super-block of the activation row as the pass reads it. */
typedef struct { __m512i x[4]; __m256i bs, gs; float xd; } kqv_act;

AI void kqv_act_load(const int8_t *xq, const int16_t *bsum, float xd, kqv_act *a)
{
    a->bs = _mm256_loadu_si256((const __m256i *)bsum);
    a->xd = xd;
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {   /* values 128h + 0..31 | 64..95, then 32..63 | 96..127 */
        const __m512i v0 = _mm512_loadu_si512((const void *)(xq + 128 * h));
        const __m512i v1 = _mm512_loadu_si512((const void *)(xq + 128 * h + 64));
        a->x[2 * h] = _mm512_shuffle_i64x2(v0, v1, 0x44);
        a->x[2 * h + 1] = _mm512_shuffle_i64x2(v0, v1, 0xEE);
    }
    /* words 8..15: the sums of the 8 sub-blocks of 32, for the mins (words 0..7: 0, under the scales) */
    const __m256i g = _mm256_hadd_epi16(a->bs, a->bs);   /* g0-3 g0-3 | g4-7 g4-7 */
    a->gs = _mm256_maskz_permutex_epi64(0xC, g, 0x80);     /* qwords -, -, g0-3, g4-7 */
}


/* Q4_K / Q5_K super-block p against a: the lanes of sumi (8) and of summ (8) */
AI void k4v_row(uint32_t t, const uint8_t *p, const kqv_act *a, __m256i *si, __m256i *sm)
{
    const __m128i scm = k4_scales_bytes(p + 4);
    *sm = _mm256_madd_epi16(_mm256_cvtepu8_epi16(scm), a->gs);
    const __m512i sb = _mm512_broadcast_i32x4(scm);
    const uint8_t *qs = p + (t == GGML_Q4_K ? 16 : 48);
    const __m512i qh = t == GGML_Q5_K ? zdup(p + 16) : _mm512_setzero_si512();
    __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i q = _mm512_loadu_si512((const void *)(qs + 64 * h));
        __m512i u[2] = { z15(q), zhi4(q) };
#pragma GCC unroll 2
        for (int e = 0; e < 2; e++) {   /* sub-blocks 4h + e (bytes 0..31) and 4h + e + 2 (32..63) */
            const int j = 4 * h + e;
            if (t == GGML_Q5_K)   /* the fifth bit of value 32m + l: bit m of qh[l] */
                u[e] = _mm512_mask_add_epi8(u[e], zbits(qh, j, j + 2), u[e], _mm512_set1_epi8(16));
            /* each word the scale byte of its sub-block (high byte 0x80: zero) */
            const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(0x8000 | j)),
                                                   _mm256_set1_epi16((short)(0x8000 | (j + 2))), 1);
            acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u[e], a->x[2 * h + e]), _mm512_shuffle_epi8(sb, idx));
        }
    }
    *si = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
}

/* d and dmin of super-block p of each row (F16, at offsets 0 and 2 in Q4_K and Q5_K) */
AI void kqv_scales(const uint8_t *const p[KQV_ROWS], __m128 *d, __m128 *dmin)
{
    int32_t h[KQV_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < KQV_ROWS; r++) memcpy(&h[r], p[r], 4);
    const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));   /* d0 dmin0 d1 dmin1 ... */
    const __m128 lo = _mm256_castps256_ps128(f), hi = _mm256_extractf128_ps(f, 1);
    *d = _mm_shuffle_ps(lo, hi, 0x88);
    *dmin = _mm_shuffle_ps(lo, hi, 0xDD);
}

/* Q4_K / Q5_K rows o .. o + KQV_ROWS - 1 against the activation row (xq, bsum, xd): their dots, in lanes; the
 * bytes of W from offset pf (up to pend) prefetched at the pace the rows are read */
AI __m128 kqv_rows(uint32_t t, const uint8_t *W, size_t rb, size_t bs, int64_t o, int64_t nb, const int8_t *xq,
                   const int16_t *bsum, const float *xd, size_t pf, size_t pend)
{
    __m128 s = _mm_setzero_ps();
    const size_t pstep = KQV_ROWS * bs;
    for (int64_t b = 0; b < nb; b++, pf += pstep) {
        if (pf + pstep <= pend)
            for (size_t l = 0; l < pstep; l += 64) _mm_prefetch((const char *)W + pf + l, _MM_HINT_T0);
        kqv_act a;
        kqv_act_load(xq + b * QK_K, bsum + b * 16, xd[b], &a);
        const uint8_t *p[KQV_ROWS];
        __m512i c[KQV_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < KQV_ROWS; r++) {
            __m256i si, sm;
            p[r] = W + (size_t)(o + r) * rb + (size_t)b * bs;
            k4v_row(t, p[r], &a, &si, &sm);
            c[r] = _mm512_inserti64x4(_mm512_castsi256_si512(si), sm, 1);   /* sumi's lanes | summ's */
        }
        /* transpose-add: 128-bit lane k of u holds the 4 rows' sums of lane k of each c */
        const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(c[0], c[1]), _mm512_unpackhi_epi32(c[0], c[1]));
        const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(c[2], c[3]), _mm512_unpackhi_epi32(c[2], c[3]));
        __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
        u = _mm512_add_epi32(u, _mm512_shuffle_i64x2(u, u, 0xB1));   /* lane 0: the sumi, lane 2: the summ */
        __m128 d, dmin;
        kqv_scales(p, &d, &dmin);
        const __m128 xdv = _mm_set1_ps(a.xd);
        /* kq_step, each operation as there (no FMA: -std=c11) */
        const __m128 ti = _mm_mul_ps(_mm_mul_ps(d, xdv), _mm_cvtepi32_ps(_mm512_castsi512_si128(u)));
        const __m128 tm = _mm_mul_ps(_mm_mul_ps(dmin, xdv), _mm_cvtepi32_ps(_mm512_extracti32x4_epi32(u, 2)));
        s = _mm_add_ps(s, _mm_sub_ps(ti, tm));
    }
    return s;
}

/* One activation row (decode): the row's sum stays in a register from
 * super-block to super-block (the 4-row loop below keeps its sums in
 * memory, a store and a load on the float chain of every super-block). */
AI void mm_kquant_vec(uint32_t t, const tensor *w, const char *x, float *y, int64_t o0, int64_t o1, int acc)
{
    const int sh = KQZ_SHIFT(t);
    const int64_t K = w->cols, nb = K / QK_K;
    const size_t rb = tensor_row_bytes(t, K), bs = (size_t)tensor_row_bytes(t, QK_K);
    const uint8_t *W = (const uint8_t *)w->data;
    const int8_t *xq = act_q8_qs(x);
    const int16_t *bsum = act_q8k_bsums(x, K);
    const float *xd = act_q8k_d(x, K);
    int64_t o = o0;
    /* Q4_K / Q5_K only: the others (k256's Q6_K) measured no faster this way (their codes are unpacked
     * the same per row, and the prefetches cost more than they save where the weights sit in L3) */
    for (; (t == GGML_Q4_K || t == GGML_Q5_K) && o + KQV_ROWS <= o1; o += KQV_ROWS) {
        __m128 s = kqv_rows(t, W, rb, bs, o, nb, xq, bsum, xd, (size_t)o * rb + KQV_PF, (size_t)o1 * rb);
        if (acc) s = _mm_add_ps(_mm_loadu_ps(y + o), s);
        _mm_storeu_ps(y + o, s);
    }
    for (; o < o1; o++) {   /* the last rows one by one: the same operations per row */
        const uint8_t *row = W + (size_t)o * rb;
        float s = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            kqz v;
            kqz_load(t, row + (size_t)b * bs, &v);
            s = kqz_dot(&v, sh, xq + b * QK_K, bsum + b * 16, xd[b], s);
        }
        y[o] = acc ? y[o] + s : s;
    }
}

AI void mm_kquant_t(uint32_t t, const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                    int64_t o0, int64_t o1, int acc, float *scratch)
{
    if (n == 1) { mm_kquant_vec(t, w, x, y, o0, o1, acc); return; }
    const int sh = KQZ_SHIFT(t);
    const int64_t K = w->cols, nb = K / QK_K;
    const size_t rb = tensor_row_bytes(t, K), bs = (size_t)tensor_row_bytes(t, QK_K);
    const uint8_t *W = (const uint8_t *)w->data;
    /* the scratch holds 64 bytes per value; a 16-row repacked tile takes 6272 bytes per 256 */
    if (scratch && n > KQZ_STREAM_ROWS && ((uintptr_t)scratch & 63) == 0) {
        mm_kquant_gemm(t, w, x, xs, y, ldy, n, o0, o1, acc, (ktile *)scratch);
        return;
    }
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *row = W + (size_t)o * rb;
        for (int32_t i0 = 0; i0 < n; i0 += KQZ_STREAM_ROWS) {
            const int32_t m = n - i0 < KQZ_STREAM_ROWS ? n - i0 : KQZ_STREAM_ROWS;
            float s[KQZ_STREAM_ROWS] = { 0 };
            for (int64_t b = 0; b < nb; b++) {
                if (o + 1 < o1) _mm_prefetch((const char *)row + rb + (size_t)b * bs, _MM_HINT_T0);
                kqz v;
                kqz_load(t, row + (size_t)b * bs, &v);
#pragma GCC unroll 4
                for (int32_t c = 0; c < KQZ_STREAM_ROWS; c++) {
                    if (c >= m) break;
                    const char *xi = x + (size_t)(i0 + c) * xs;
                    s[c] = kqz_dot(&v, sh, act_q8_qs(xi) + b * QK_K, act_q8k_bsums(xi, K) + b * 16, act_q8k_d(xi, K)[b], s[c]);
                }
            }
            for (int32_t c = 0; c < m; c++) {
                float *yo = y + (int64_t)(i0 + c) * ldy + o;
                *yo = acc ? *yo + s[c] : s[c];
            }
        }
    }
}

#define KQZ_FN(T) \
    static void mm_kquant_##T(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n, \
                              int64_t o0, int64_t o1, int acc, float *scratch) \
    { mm_kquant_t(GGML_##T, w, x, xs, y, ldy, n, o0, o1, acc, scratch); }
KQZ_FN(Q2_K) KQZ_FN(Q3_K) KQZ_FN(Q4_K) KQZ_FN(Q5_K) KQZ_FN(Q6_K)

static void mm_kquant(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                      int64_t o0, int64_t o1, int acc, float *scratch)
{
    switch (w->type) {
    case GGML_Q2_K: mm_kquant_Q2_K(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    case GGML_Q3_K: mm_kquant_Q3_K(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    case GGML_Q4_K: mm_kquant_Q4_K(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    case GGML_Q5_K: mm_kquant_Q5_K(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    case GGML_Q6_K: mm_kquant_Q6_K(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    default: k_matmul_ref_range(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;   /* Q8_K: never in a file */
    }
}

static void matmul_any(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n,
                       int64_t o0, int64_t o1, int acc, float *scratch, int vbmi)
{
    switch (w->type) {
    case GGML_F32: case GGML_F16: case GGML_BF16:
        mm_float(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    case GGML_Q8_0: case GGML_Q4_0: case GGML_Q4_1: case GGML_Q5_0: case GGML_Q5_1:
        mm_quant(w, x, xs, y, ldy, n, o0, o1, acc, scratch, vbmi); break;
    case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K: case GGML_Q8_K:
        mm_kquant(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    default:
        k_matmul_ref_range(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    }
}

static void matmul_avx512(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n,
                          int64_t o0, int64_t o1, int acc, float *scratch)
{
    matmul_any(w, x, xs, y, ldy, n, o0, o1, acc, scratch, 1);
}

static void matmul_avx512_novbmi(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n,
                                 int64_t o0, int64_t o1, int acc, float *scratch)
{
    matmul_any(w, x, xs, y, ldy, n, o0, o1, acc, scratch, 0);
}

/* ---- BF16 weights on bfloat16-rounded activations (kernels_avx512_bf16) ----
 *
 * The opt-in MOR_CTX_FAST_BF16, as llama.cpp computes BF16 weights: each
 * activation is rounded to bfloat16 once per matmul (ACT_BF16 rows) and
 * vdpbf16ps multiplies 32 weight-activation pairs per instruction, where the
 * float tiles do 16 FMAs after converting the weights (measured here: 1.78x
 * the FMA rate in floats, and no conversion). The tiles are the float tiles'
 * (rows x activation rows of accumulators, weights streamed with prefetch
 * for up to STREAM_MAX activation rows, else GR x GC tiles over a strip in
 * L1), so each output is one accumulator whose lane j adds the products of
 * columns 2j and 2j+1 of every 32, then the lanes' hsum16: the same in every
 * tile, whatever the number of rows or the range. */
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c")))

BF16_TARGET static inline __attribute__((always_inline)) void
tile_b(const char *w, size_t rb, const char *x, size_t xs, int64_t K, int R, int C, float *y, int64_t ldy, int acc,
       const char *pf, size_t pfn)
{
    __m512 a[GR][GC];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) a[r][c] = _mm512_setzero_ps();
    pf_cursor pc = pf_start(pf, pfn, (K + 31) / 32);
    int64_t k = 0;
    for (; k < K; k += 32) {
        /* the last 32 columns of a row may be partial: the weights masked (the activations are padded
         * with zeros to whole 32s) */
        const __mmask32 m = K - k >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << (K - k)) - 1);
        if (pc.n) pf_step(&pc);
        __m512i xv[GC];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) xv[c] = _mm512_loadu_si512(x + (size_t)c * xs + 2 * (size_t)k);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m512i wv = _mm512_maskz_loadu_epi16(m, w + (size_t)r * rb + 2 * (size_t)k);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) a[r][c] = _mm512_dpbf16_ps(a[r][c], (__m512bh)wv, (__m512bh)xv[c]);
        }
    }
    tile_finish(a, R, C, y, ldy, acc);
}

#define BTILE(R, C) \
    BF16_TARGET static void btile_##R##_##C(const char *w, size_t rb, const char *x, size_t xs, int64_t K, \
                                            float *y, int64_t ldy, int acc, const char *pf, size_t pfn) \
    { tile_b(w, rb, x, xs, K, R, C, y, ldy, acc, pf, pfn); }
#define BROW(R) BTILE(R, 1) BTILE(R, 2) BTILE(R, 3) BTILE(R, 4)
BROW(1) BROW(2) BROW(3) BROW(4) BROW(5) BROW(6)
#define BGROW(R) { btile_##R##_1, btile_##R##_2, btile_##R##_3, btile_##R##_4 }
static const tile_fn bgrid[6][4] = { BGROW(1), BGROW(2), BGROW(3), BGROW(4), BGROW(5), BGROW(6) };

static void matmul_avx512_bf16(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n,
                               int64_t o0, int64_t o1, int acc, float *scratch)
{
    /* mm_float's loops without its strip conversion (no scratch): the bf16 rows are read as stored */
    if (w->type == GGML_BF16) mm_tiles(w, (const char *)x, xs, y, ldy, n, o0, o1, acc, NULL, bgrid);
    else kernels_get(ISA_AVX512)->matmul(w, x, xs, y, ldy, n, o0, o1, acc, scratch);
}

/* A row of k floats as ACT_BF16 (quant.h): the hardware's rounding, which act_bf16_ref spells out. */
BF16_TARGET static void act_bf16_avx512(const float *x, void *row, int64_t k)
{
    uint16_t *h = row;
    for (int64_t i = 0; i < act_bf16_cols(k); i += 16) {
        const __mmask16 m = i + 16 <= k ? 0xFFFF : i < k ? (__mmask16)((1u << (k - i)) - 1) : 0;
        _mm256_storeu_si256((__m256i *)(h + i), (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* ---- attention ----
 *
 * The query heads of a KV group go together: each K and V row is loaded
 * (and converted) once for all of them, scores come four cells at a time
 * through one reduction tree (hsum16x4), and the group's outputs stay in
 * registers while the V rows stream by. Same math as the reference
 * (scores, max-subtracted softmax, weighted sum of V), rounded differently. */

/* 16 cache values from element i (a multiple of 16) of a row of type t. */
AI __m512 ldkv16(const char *row, int32_t i, uint32_t t)
{
    if (t == GGML_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)i)));
    if (t == GGML_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)row + i / QK;
        const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + i % QK))));
        return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b->d)), q);
    }
    return _mm512_loadu_ps((const float *)row + i);
}

/* e^x, the AVX2 set's exp8 (Cephes expf) on 16 lanes */
AI __m512 exp16(__m512 x)
{
    x = _mm512_min_ps(_mm512_set1_ps(88.3762626647949f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-88.3762626647949f), x);
    __m512 fx = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                     _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 z = _mm512_mul_ps(x, x);
    __m512 y = _mm512_set1_ps(1.9875691500E-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507E-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073E-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894E-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459E-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201E-1f));
    y = _mm512_fmadd_ps(y, z, _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

/* In-place softmax of p[0..n) */
AI void softmax16(float *p, int32_t n)
{
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int32_t c = 0;
    for (; c + 16 <= n; c += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(p + c));
    if (c < n) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, (__mmask16)((1u << (n - c)) - 1), p + c));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sv = _mm512_setzero_ps();
    for (c = 0; c + 16 <= n; c += 16) {
        const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p + c), m));
        _mm512_storeu_ps(p + c, e);
        sv = _mm512_add_ps(sv, e);
    }
    if (c < n) {
        const __mmask16 k = (__mmask16)((1u << (n - c)) - 1);
        const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + c), m)));
        _mm512_mask_storeu_ps(p + c, k, e);
        sv = _mm512_add_ps(sv, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / hsum16(sv));
    for (c = 0; c + 16 <= n; c += 16) _mm512_storeu_ps(p + c, _mm512_mul_ps(_mm512_loadu_ps(p + c), inv));
    if (c < n) {
        const __mmask16 k = (__mmask16)((1u << (n - c)) - 1);
        _mm512_mask_storeu_ps(p + c, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + c), inv));
    }
}

/* Scores of cells [c0, c1) (c0 a multiple of 4) for G query heads of NJ x 16
 * values: probs[g * nv + c] = scale * q[g] . K[cells[c]]. Cells go four at a
 * time from c0, the rest one by one, so ranges split at multiples of 4 give
 * the bits of one whole range. */
AI void att_scores(const float *q, int G, int NJ, const char *k, size_t stride, uint32_t t, const int32_t *cells,
                   int32_t c0, int32_t c1, int32_t nv, float scale, float *probs)
{
    const int32_t hd = 16 * NJ;
    __m512 qv[4][8];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int j = 0; j < NJ; j++) qv[g][j] = _mm512_loadu_ps(q + g * hd + 16 * j);
    int32_t c = c0;
    for (; c + 4 <= c1; c += 4) {   /* scores of 4 cells, each K row loaded once for the group */
        __m512 a[4][4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            const char *kr = k + (size_t)cells[c + u] * stride;
            __m512 kv[8];
#pragma GCC unroll 8
            for (int j = 0; j < NJ; j++) kv[j] = ldkv16(kr, 16 * j, t);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                __m512 s = _mm512_mul_ps(qv[g][0], kv[0]);
#pragma GCC unroll 8
                for (int j = 1; j < NJ; j++) s = _mm512_fmadd_ps(qv[g][j], kv[j], s);
                a[g][u] = s;
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            float sc[4];
            hsum16x4(a[g][0], a[g][1], a[g][2], a[g][3], sc);
            _mm_storeu_ps(probs + (int64_t)g * nv + c, _mm_mul_ps(_mm_loadu_ps(sc), _mm_set1_ps(scale)));
        }
    }
    for (; c < c1; c++) {
        const char *kr = k + (size_t)cells[c] * stride;
        __m512 kv[8];
#pragma GCC unroll 8
        for (int j = 0; j < NJ; j++) kv[j] = ldkv16(kr, 16 * j, t);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m512 s = _mm512_mul_ps(qv[g][0], kv[0]);
#pragma GCC unroll 8
            for (int j = 1; j < NJ; j++) s = _mm512_fmadd_ps(qv[g][j], kv[j], s);
            probs[(int64_t)g * nv + c] = hsum16(s) * scale;
        }
    }
}

/* out[g] = (first ? 0 : out[g]) + sum over c in [c0, c1), in order, of
 * probs[g * nv + c] * V[cells[c]]: each V row loaded once for the group, the
 * outputs in registers. Each lane is one running sum in cell order, so
 * ranges taken one after another give the bits of one whole range. */
AI void att_values(int G, int NJ, const char *v, size_t stride, uint32_t t, const int32_t *cells, int32_t c0,
                   int32_t c1, int32_t nv, const float *probs, float *out, int first)
{
    const int32_t hd = 16 * NJ;
    __m512 o[4][8];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int j = 0; j < NJ; j++) o[g][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + g * hd + 16 * j);
    for (int32_t c = c0; c < c1; c++) {
        const char *vr = v + (size_t)cells[c] * stride;
        __m512 vv[8];
#pragma GCC unroll 8
        for (int j = 0; j < NJ; j++) vv[j] = ldkv16(vr, 16 * j, t);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const __m512 pv = _mm512_set1_ps(probs[(int64_t)g * nv + c]);
#pragma GCC unroll 8
            for (int j = 0; j < NJ; j++) o[g][j] = _mm512_fmadd_ps(pv, vv[j], o[g][j]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int j = 0; j < NJ; j++) _mm512_storeu_ps(out + g * hd + 16 * j, o[g][j]);
}

typedef void (*att_scores_fn)(const float *, const char *, size_t, uint32_t, const int32_t *, int32_t, int32_t,
                              int32_t, float, float *);
typedef void (*att_values_fn)(const char *, size_t, uint32_t, const int32_t *, int32_t, int32_t, int32_t,
                              const float *, float *, int);
#define ATT(G, NJ) \
    static void att_s_##G##_##NJ(const float *q, const char *k, size_t stride, uint32_t t, const int32_t *cells, \
                                 int32_t c0, int32_t c1, int32_t nv, float scale, float *probs) \
    { att_scores(q, G, NJ, k, stride, t, cells, c0, c1, nv, scale, probs); } \
    static void att_v_##G##_##NJ(const char *v, size_t stride, uint32_t t, const int32_t *cells, int32_t c0, \
                                 int32_t c1, int32_t nv, const float *probs, float *out, int first) \
    { att_values(G, NJ, v, stride, t, cells, c0, c1, nv, probs, out, first); }
ATT(1, 4) ATT(2, 4) ATT(3, 4) ATT(4, 4) ATT(1, 8) ATT(2, 8)

/* Head_dim 64 (up to 4 heads in registers at once) or 128 (up to 2); a
 * larger group goes in parts of that many heads. The parts then take the
 * cells in tiles of 16 KiB of F32 rows, every part one tile after another,
 * so that each K and V row comes from memory once for the whole group and
 * from L1 for the other parts (tl1b's 8 heads per KV head read the cache
 * once, not twice). Tiles start at multiples of 4 and the sums continue
 * across them: the bits of untiled parts. */
void k_attend_avx512(const float *q, int32_t group, int32_t hd, const void *k, const void *v,
                          size_t stride, uint32_t kv_type, const int32_t *cells, int32_t nv,
                          float scale, float *probs, float *out)
{
    static const att_scores_fn s64[5] = { NULL, att_s_1_4, att_s_2_4, att_s_3_4, att_s_4_4 },
                               s128[3] = { NULL, att_s_1_8, att_s_2_8 };
    static const att_values_fn v64[5] = { NULL, att_v_1_4, att_v_2_4, att_v_3_4, att_v_4_4 },
                               v128[3] = { NULL, att_v_1_8, att_v_2_8 };
    if (nv <= 0 || (hd != 64 && hd != 128) || (kv_type != GGML_F32 && kv_type != GGML_F16 && kv_type != GGML_Q8_0)) {
        k_attend_avx2(q, group, hd, k, v, stride, kv_type, cells, nv, scale, probs, out);
        return;
    }
    const int32_t part = hd == 64 ? 4 : 2, tile = group <= part ? nv : 4096 / hd;
    const att_scores_fn *sf = hd == 64 ? s64 : s128;
    const att_values_fn *vf = hd == 64 ? v64 : v128;
    for (int32_t c0 = 0; c0 < nv; c0 += tile) {
        const int32_t c1 = c0 + tile < nv ? c0 + tile : nv;
        for (int32_t g0 = 0; g0 < group; g0 += part)
            sf[group - g0 < part ? group - g0 : part](q + (int64_t)g0 * hd, (const char *)k, stride, kv_type, cells,
                                                      c0, c1, nv, scale, probs + (int64_t)g0 * nv);
    }
    for (int32_t g = 0; g < group; g++) softmax16(probs + (int64_t)g * nv, nv);
    for (int32_t c0 = 0; c0 < nv; c0 += tile) {
        const int32_t c1 = c0 + tile < nv ? c0 + tile : nv;
        for (int32_t g0 = 0; g0 < group; g0 += part)
            vf[group - g0 < part ? group - g0 : part]((const char *)v, stride, kv_type, cells, c0, c1, nv,
                                                      probs + (int64_t)g0 * nv, out + (int64_t)g0 * hd, c0 == 0);
    }
}

KERNELS_LORA_AXPY(lora_axpy_avx512, 16)

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

/* The set for CPUs with VBMI and GFNI, and the same without them (the same bits). */
const kernel_set kernels_avx512 = {
    "avx512", act_q8_avx2, matmul_avx512, k_attend_avx512, k_rms_norm_avx2, k_swiglu_avx2, lora_axpy_avx512, 0, NULL,
    0, NULL
};
const kernel_set kernels_avx512_novbmi = {
    "avx512-novbmi", act_q8_avx2, matmul_avx512_novbmi, k_attend_avx512, k_rms_norm_avx2, k_swiglu_avx2,
    lora_axpy_avx512, 0, NULL, 0, NULL
};
/* Either of them (kernels_get(ISA_AVX512)), with BF16 weights on bfloat16-rounded activations. */
const kernel_set kernels_avx512_bf16 = {
    "avx512-bf16", act_q8_avx2, matmul_avx512_bf16, k_attend_avx512, k_rms_norm_avx2, k_swiglu_avx2,
    lora_axpy_avx512, 0, NULL, 1ull << GGML_BF16, act_bf16_avx512
};
#endif
