/* kernels_amx.c - the AMX kernel set (x86-64 with AMX-TILE, AMX-INT8 and
 * AMX-BF16 beside AVX-512 F/BW/VL/DQ/VNNI/BF16: Sapphire Rapids and later).
 *
 * Matrix products run on AMX tiles; everything else (attention, RMSNorm,
 * SwiGLU, the activation quantizer) is the AVX-512 set's.
 *
 * Quantized weights (Q8_0, Q4_0). A tile is up to 16 rows of up to 64
 * bytes; tdpbssd adds the int8 product of an A tile (M rows x K bytes) and a
 * B tile (K/4 rows of N groups of 4 bytes, "VNNI" order) into an int32 C
 * tile (M x N). With more than ROWS_MAX activation rows (prefill, batches),
 * 16 activation rows are the A tile (in place, the prepared rows' stride)
 * and 16 weight rows the B tile, which needs the weights in VNNI order: each
 * strip of 16 weight rows is transposed (Q4_0 unpacked first) into the
 * thread's scratch once per call and used by every activation tile; a tile
 * product per 32-column block gives each (activation row, weight row) that
 * block's integer sum, stored and scaled by AVX-512. Up to ROWS_MAX rows
 * (generation) take VNNI instead (see vq_rows for why), forming the same
 * exact block sums. Either way the sums are then scaled and added in block
 * order as the reference kernels do it:
 *     s = 0;  for each block b:  s = s + (float)isum_b * (d_w[b] * d_x[b])
 * (a multiply, a multiply and an add, no FMA), so this set's quantized
 * matmuls are bitwise equal to the reference kernels' (kernels_ref.c), for
 * any number of rows, tile or thread split, and to the AVX-512 set's, which
 * sums the same way.
 *
 * GCC 12's _tile_loadconfig intrinsic is miscompiled (it passes an 8-byte
 * operand, so the 64-byte configuration is never stored), so every tile
 * instruction here is written as inline assembly with its operands spelled
 * out; the configuration is loaded with ldtilecfg on a 64-byte object. Each
 * matmul call loads its configuration and releases the tiles when it ends
 * (tilerelease: the tile state is back to its initial state, cheap to save
 * at a context switch). */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
#include "kernels.h"
#include "kernels_lora.h"
#include "quant.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx512vbmi,gfni,avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx512vbmi,gfni,avx2,fma,f16c")
#endif

#define AI static inline __attribute__((always_inline))
#include "kernels_vnni.h"   /* after the target pragma: compiled for this set */

/* ---- tiles ---- */

/* The 64-byte tile configuration (palette 1): rows and bytes per row of
 * tiles 0-7. */
typedef struct {
    uint8_t  palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t  rows[16];
} __attribute__((aligned(64))) tile_config;
_Static_assert(sizeof(tile_config) == 64, "the tile configuration is 64 bytes");

AI void tile_set(tile_config *c, int t, int rows, int colsb)
{
    c->rows[t] = (uint8_t)rows;
    c->colsb[t] = (uint16_t)colsb;
}
AI void tile_load_config(const tile_config *c) { __asm__ volatile("ldtilecfg %0" : : "m"(*c)); }
AI void tile_release(void) { __asm__ volatile("tilerelease" : : : "memory"); }
/* Tile numbers are part of the instruction, so these are macros. Loads and
 * stores clobber memory: a load must see the stores before it, the plain
 * loads after a store must see what it wrote. */
#define TLOAD(t, p, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t : : "r"((const void *)(p)), "r"((long)(stride)) : "memory")
#define TSTORE(t, p, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" : : "r"((void *)(p)), "r"((long)(stride)) : "memory")
#define TZERO(t) __asm__ volatile("tilezero %%tmm" #t : :)
#define TDPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c : :)

/* ---- quantized weights ---- */

enum { ROWS_MAX = 4 };   /* up to this many activation rows take the weights-as-A shape */

/* Bytes of a block and offset of its codes. */
AI size_t q_block_bytes(int q4) { return q4 ? sizeof(block_q4_0) : sizeof(block_q8_0); }

/* d of block b of R rows (rows rb bytes apart, from row 0 at w) as floats,
 * lanes R..15 zero: one gather of the 4 bytes at each block start. */
AI __m512 q_scales(const char *w, size_t rb, int R, int64_t b, int q4)
{
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)rb));
    const __mmask16 m = (__mmask16)((1u << R) - 1);
    const __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, w + (size_t)b * q_block_bytes(q4), 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
}

/* Q4_0 codes of block b of R rows as int8 values (q - 8), 32 per row in
 * value order, rows 32 bytes apart at dst (64-byte aligned). Rows from R on
 * are not read (their bytes are left as they are). */
AI void q4_unpack(int8_t *dst, const char *w, size_t rb, int R, int64_t b)
{
    const __m512i m4 = _mm512_set1_epi8(15), e8 = _mm512_set1_epi8(8);
    /* [lo r | hi r | lo r+1 | hi r+1] and the same for r+2, r+3 (qwords of lo, then of hi) */
    const __m512i i01 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), i23 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    const char *q = w + (size_t)b * sizeof(block_q4_0) + 2;
    for (int r = 0; r < R; r += 4) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(q + (size_t)r * rb)));
        if (r + 1 < R) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(q + (size_t)(r + 1) * rb)), 1);
        if (r + 2 < R) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(q + (size_t)(r + 2) * rb)), 2);
        if (r + 3 < R) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(q + (size_t)(r + 3) * rb)), 3);
        const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        _mm512_store_si512((void *)(dst + 32 * r), _mm512_sub_epi8(_mm512_permutex2var_epi64(lo, i01, hi), e8));
        _mm512_store_si512((void *)(dst + 32 * r + 64), _mm512_sub_epi8(_mm512_permutex2var_epi64(lo, i23, hi), e8));
    }
}

/* y row (R outputs from y, mask of R lanes) = a, or += a */
AI void store_row(float *y, __m512 a, int R, int acc)
{
    const __mmask16 m = (__mmask16)((1u << R) - 1);
    if (acc) a = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y), a);
    _mm512_mask_storeu_ps(y, m, a);
}

/* Prefetch part `part` of `parts` of the bytes [p, p + bytes): the next strip of a GEMM, a slice per
 * activation tile, so that packing it finds it in cache (packing a strip straight from memory was half
 * of the packing time). */
AI void prefetch_part(const char *p, size_t bytes, int64_t part, int64_t parts)
{
    const size_t lo = bytes * (size_t)part / (size_t)parts, hi = bytes * (size_t)(part + 1) / (size_t)parts;
    for (size_t off = lo & ~(size_t)63; off < hi; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

/* ---- quantized matrix-vector products: exact block sums with VNNI ----
 *
 * For up to ROWS_MAX activation rows a tile product does little work per
 * byte of weights, and here tile and vector instructions hardly overlap: on
 * tiles (the weights as A tiles in place, each activation row a B tile of
 * one column) a one-row product ran 1.5-1.7x (Q8_0) and 4-8x (Q4_0, unpacked
 * to a buffer for the tile load) slower than the AVX-512 set's VNNI kernel
 * (one core, from L2). So these rows take VNNI, with the same exact sums:
 * vpdpbusd gives each block 8 lanes of 4-byte products (weights as unsigned
 * codes, the offset taken back out by starting the lanes at -offset x the
 * activations' lane sums), and a fixed tree of adds makes them one int32 per
 * (row, block), exactly. Then the same scaling as the tiles. */

/* The unsigned codes of blocks b, b+1 of a row (two = 0: block b, then zeros). A Q4_0 pair is one
 * 64-byte load with `over` (the 28 bytes after the pair exist), else a masked load of the pair. */
AI __m512i vq_codes(const char *row, int64_t b, int two, int q4, int over)
{
    if (q4) {
        const char *p = row + (size_t)b * sizeof(block_q4_0);
        const __m512i raw = over ? _mm512_loadu_si512((const void *)p)
                                 : _mm512_maskz_loadu_epi8(two ? 0xFFFFFFFFFull : 0x3FFFFull, p);
        /* byte j of lanes 0-15 and 16-31 <- nibble byte j of block b (bytes 2 + j), lanes 32-63 of b+1;
         * then per 64-bit lane x & 15 or x >> 4 (an affine byte transform) */
        const __m512i perm = _mm512_set_epi8(
            35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
            35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
            17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
            17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2);
        const long long lo = 0x0102040800000000ll, hi = 0x1020408000000000ll;
        const __m512i nib = _mm512_set_epi64(hi, hi, lo, lo, hi, hi, lo, lo);
        return _mm512_gf2p8affine_epi64_epi8(_mm512_permutexvar_epi8(perm, raw), nib, 0);
    }
    const char *p = row + (size_t)b * sizeof(block_q8_0) + 2;
    __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p));
    if (two) v = _mm512_mask_loadu_epi8(v, 0xFFFFFFFF00000000ull, p + sizeof(block_q8_0) - 32);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}

/* The 16 rows' exact sums of blocks b (*s0) and b+1 (*s1) against activation codes xv (the pair's 64
 * bytes; base: -offset x their lane sums). Row r's vpdpbusd gives lanes 0-7 for block b and 8-15 for b+1;
 * then a fixed tree: lanes 0+2 and 1+3 per 128 bits (rows in pairs), then pairs of those (rows in
 * fours), then the two 128-bit halves of each block. Rows from R on are zeros. */
AI void vq_sums(const char *w, size_t rb, int R, int64_t b, int two, int q4, int over, __m512i xv, __m512i base,
                __m512i *s0, __m512i *s1)
{
    __m512i u[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m512i q[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const int r = 4 * i + 2 * h;
            const __m512i p0 = r < R ? _mm512_dpbusd_epi32(base, vq_codes(w + (size_t)r * rb, b, two, q4, over), xv) : _mm512_setzero_si512();
            const __m512i p1 = r + 1 < R ? _mm512_dpbusd_epi32(base, vq_codes(w + (size_t)(r + 1) * rb, b, two, q4, over), xv) : _mm512_setzero_si512();
            q[h] = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
        }
        u[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(q[0], q[1]), _mm512_unpackhi_epi64(q[0], q[1]));
    }
    /* u[i], 128-bit quarter k: rows 4i..4i+3, summed over lanes 4k..4k+3 */
    const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88), _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
    const __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x88), _mm512_shuffle_i32x4(u[2], u[3], 0xDD));
    *s0 = _mm512_shuffle_i32x4(s01, s23, 0x88);
    *s1 = _mm512_shuffle_i32x4(s01, s23, 0xDD);
}

/* R (<= 16) weight rows from w x nx (<= ROWS_MAX) activation rows, all blocks; over: Q4_0 pairs may
 * be read as 64 bytes (more of the matrix follows the strip). */
AI void vq_strip(const char *w, size_t rb, int q4, int R, int over, const char *x, size_t xs, int nx, int64_t K,
                 float *y, int64_t ldy, int acc, const char *pf, size_t pfn)
{
    const int64_t nb = K / QK;
    __m512 a[ROWS_MAX];
    const int8_t *xq[ROWS_MAX];
    const float *xd[ROWS_MAX];
    for (int j = 0; j < ROWS_MAX; j++) {
        a[j] = _mm512_setzero_ps();
        xq[j] = act_q8_qs(x + (size_t)(j < nx ? j : 0) * xs);
        xd[j] = act_q8_d(x + (size_t)(j < nx ? j : 0) * xs, K);
    }
    const __m512i off = _mm512_set1_epi8(q4 ? 8 : (char)0x80);
    const size_t pf_per = pf ? (pfn + (size_t)(nb + 1) / 2 - 1) / (size_t)((nb + 1) / 2) : 0;
    size_t pf_next = 0;
    for (int64_t b = 0; b < nb; b += 2) {
        for (size_t e = pf_next + pf_per; pf_next < e && pf_next < pfn; pf_next += 64) _mm_prefetch(pf + pf_next, _MM_HINT_T1);
        if (b + 1 < nb) {   /* a pair */
            const __m512 d0 = q_scales(w, rb, R, b, q4), d1 = q_scales(w, rb, R, b + 1, q4);
            for (int j = 0; j < nx; j++) {
                const __m512i xv = _mm512_loadu_si512((const void *)(xq[j] + 32 * b));
                const __m512i base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xv));
                __m512i s0, s1;
                vq_sums(w, rb, R, b, 1, q4, over, xv, base, &s0, &s1);
                a[j] = _mm512_add_ps(a[j], _mm512_mul_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(d0, _mm512_set1_ps(xd[j][b]))));
                a[j] = _mm512_add_ps(a[j], _mm512_mul_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(d1, _mm512_set1_ps(xd[j][b + 1]))));
            }
        } else {            /* the last of an odd number of blocks, with zeros */
            const __m512 d0 = q_scales(w, rb, R, b, q4);
            for (int j = 0; j < nx; j++) {
                const __m512i xv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(xq[j] + 32 * b)));
                const __m512i base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xv));
                __m512i s0, s1;
                vq_sums(w, rb, R, b, 0, q4, 0, xv, base, &s0, &s1);
                a[j] = _mm512_add_ps(a[j], _mm512_mul_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(d0, _mm512_set1_ps(xd[j][b]))));
            }
        }
    }
    for (int j = 0; j < nx; j++) store_row(y + (int64_t)j * ldy, a[j], R, acc);
}

/* The strips, compiled for each weight type with 16 rows (the inner loops unrolled) and for a short
 * or last strip. */
typedef void (*vq_strip_fn)(const char *w, size_t rb, int R, const char *x, size_t xs, int nx, int64_t K,
                            float *y, int64_t ldy, int acc, const char *pf, size_t pfn);
#define VQ_STRIP(name, Q4, RR, OVER) \
    static void name(const char *w, size_t rb, int R, const char *x, size_t xs, int nx, int64_t K, float *y, \
                     int64_t ldy, int acc, const char *pf, size_t pfn) \
    { vq_strip(w, rb, Q4, RR, OVER, x, xs, nx, K, y, ldy, acc, pf, pfn); }
VQ_STRIP(vq_q8_16, 0, 16, 0)
VQ_STRIP(vq_q8_r, 0, R, 0)
VQ_STRIP(vq_q4_16, 1, 16, 1)
VQ_STRIP(vq_q4_r, 1, R, 0)

static void vq_rows(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                    int64_t o0, int64_t o1, int acc)
{
    const int q4 = w->type == GGML_Q4_0;
    const int64_t K = w->cols;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    stream_start(W, rb, o0, o1);
    for (int64_t o = o0; o < o1; o += 16) {
        const int R = o1 - o < 16 ? (int)(o1 - o) : 16;
        /* a Q4_0 pair read as 64 bytes ends at most 28 bytes into the next row: not past the matrix */
        const vq_strip_fn f = q4 ? (R == 16 && o + 16 < w->rows ? vq_q4_16 : vq_q4_r) : (R == 16 ? vq_q8_16 : vq_q8_r);
        size_t pfn;
        const char *pf = stream_next(W, rb, o, o1, &pfn);
        for (int32_t i = 0; i < n; i += ROWS_MAX) {
            const int nx = n - i < ROWS_MAX ? n - i : ROWS_MAX;
            f(W + (size_t)o * rb, rb, R, x + (size_t)i * xs, xs, nx, K, y + (int64_t)i * ldy + o, ldy, acc,
              i == 0 ? pf : NULL, i == 0 ? pfn : 0);
        }
    }
}

/* ---- quantized GEMM: activations as A, weights as B ---- */

/* Bytes of a packed weight block: the 8 x 64-byte B tile, then the 16 scales. */
enum { QPACK = 8 * 64 + 16 * 4 };

/* The R weight rows at w, all blocks, as B tiles (VNNI order: tile row k holds bytes 4k..4k+3 of every
 * weight row's block) with their scales, into pack (QPACK bytes per block). Rows from R on are zeros. */
static void q_pack_strip(char *pack, const char *w, size_t rb, int R, int64_t nb, int q4)
{
    _Alignas(64) int8_t ub[16 * 32];
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *src;
        size_t ss;
        if (q4) { q4_unpack(ub, w, rb, R, b); src = ub; ss = 32; }
        else { src = (const int8_t *)(w + (size_t)b * sizeof(block_q8_0) + 2); ss = rb; }
        __m512i z[8], out[8];
        for (int j = 0; j < 8; j++) {
            const __m256i lo = j < R ? _mm256_loadu_si256((const __m256i *)(src + (size_t)j * ss)) : _mm256_setzero_si256();
            const __m256i hi = j + 8 < R ? _mm256_loadu_si256((const __m256i *)(src + (size_t)(j + 8) * ss)) : _mm256_setzero_si256();
            z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        tr16x8(z, out);
        char *p = pack + (size_t)b * QPACK;
        for (int k = 0; k < 8; k++) _mm512_store_si512((void *)(p + 64 * k), out[k]);
        _mm512_store_ps((void *)(p + 512), q_scales(w, rb, R, b, q4));
    }
}

/* One block into the accumulators: C tile t holds the int32 sums of activation rows 0..15 (tile rows,
 * cb rows) x weight rows (lanes); a[i] += sums[i] * (d_w * d_x[i]). */
AI void q_gemm_scale(__m512 a[16], const int32_t *cb, const char *pk, const float *const xd[16], int64_t b)
{
    const __m512 dw = _mm512_load_ps((const void *)(pk + 512));
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cb + 16 * i)));
        a[i] = _mm512_add_ps(a[i], _mm512_mul_ps(c, _mm512_mul_ps(dw, _mm512_set1_ps(xd[i][b]))));
    }
}

/* N (<= 16) activation rows x one packed strip of R weight rows, all blocks. Tiles: 0 A (N x 32),
 * 1 B (8 x 4R), 2 and 3 C (N x 4R), alternating so that one block's scaling overlaps the next one's
 * tile product. */
static void q_gemm_tile(const char *pack, int64_t nb, const char *x, size_t xs, int N, int64_t K, int R,
                        float *y, int64_t ldy, int acc, int32_t *cb)
{
    __m512 a[16];
    const float *xd[16];
    for (int i = 0; i < 16; i++) {
        a[i] = _mm512_setzero_ps();
        xd[i] = act_q8_d(x + (size_t)(i < N ? i : 0) * xs, K);   /* rows past N: any valid row */
    }
    const int8_t *xq = act_q8_qs(x);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const char *p0 = pack + (size_t)b * QPACK, *p1 = p0 + QPACK;
        TLOAD(0, xq + 32 * b, xs);
        TLOAD(1, p0, 64);
        TZERO(2);
        TDPBSSD(2, 0, 1);
        TSTORE(2, cb, 64);
        TLOAD(0, xq + 32 * (b + 1), xs);
        TLOAD(1, p1, 64);
        TZERO(3);
        TDPBSSD(3, 0, 1);
        TSTORE(3, cb + 256, 64);
        q_gemm_scale(a, cb, p0, xd, b);
        q_gemm_scale(a, cb + 256, p1, xd, b + 1);
    }
    if (b < nb) {
        const char *p0 = pack + (size_t)b * QPACK;
        TLOAD(0, xq + 32 * b, xs);
        TLOAD(1, p0, 64);
        TZERO(2);
        TDPBSSD(2, 0, 1);
        TSTORE(2, cb, 64);
        q_gemm_scale(a, cb, p0, xd, b);
    }
    for (int i = 0; i < N; i++) store_row(y + (int64_t)i * ldy, a[i], R, acc);
}

/* Scratch of the GEMM shape: the packed strip and the C buffers (64-byte aligned). */
AI size_t q_gemm_scratch(int64_t nb) { return (size_t)nb * QPACK + 2 * 1024 + 64; }

static void q_gemm(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                   int64_t o0, int64_t o1, int acc, float *scratch)
{
    const int q4 = w->type == GGML_Q4_0;
    const int64_t K = w->cols, nb = K / QK;
    const size_t rb = tensor_row_bytes(w->type, K);
    const char *W = (const char *)w->data;
    char *pack = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    int32_t *cb = (int32_t *)(void *)(pack + (size_t)nb * QPACK);
    tile_config cfg;
    int R = -1, N = -1;
    for (int64_t o = o0; o < o1; o += 16) {
        const int r = o1 - o < 16 ? (int)(o1 - o) : 16;
        q_pack_strip(pack, W + (size_t)o * rb, rb, r, nb, q4);
        const size_t next = o + 16 < o1 ? (size_t)(o1 - o - 16 < 16 ? o1 - o - 16 : 16) * rb : 0;
        for (int32_t i = 0; i < n; i += 16) {
            const int nn = n - i < 16 ? n - i : 16;
            if (next) prefetch_part(W + (size_t)(o + 16) * rb, next, i / 16, (n + 15) / 16);
            if (r != R || nn != N) {
                R = r; N = nn;
                memset(&cfg, 0, sizeof cfg);
                cfg.palette = 1;
                tile_set(&cfg, 0, N, 32);
                tile_set(&cfg, 1, 8, 4 * R);
                tile_set(&cfg, 2, N, 4 * R);
                tile_set(&cfg, 3, N, 4 * R);
                tile_load_config(&cfg);
            }
            q_gemm_tile(pack, nb, x + (size_t)i * xs, xs, N, K, R, y + (int64_t)i * ldy + o, ldy, acc, cb);
        }
    }
    tile_release();
}

/* ---- bfloat16 weights ----
 *
 * tdpbf16ps adds to each float of a C tile the products of 16 pairs of
 * bfloat16 (a row of an A tile, a column of a B tile), each product exact,
 * the sums rounded (to nearest even, denormals flushed). The activations come
 * split into three bfloat16 parts (ACT_BF16X3), so 32 columns are three
 * tile products, hi, mid, lo, into the same accumulators, and a whole row is
 * those for each 32 columns in order. Both shapes issue, for every output,
 * the same tile products in the same order, and an output's value does not
 * depend on the tile it is in (exact products, summed in the instruction's
 * fixed order), so one row at a time, tiles, and any split of the outputs
 * give the same bits. Against the reference kernels (float products summed
 * in column order) they differ by rounding. */
#define TDPBF16PS(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c : :)

/* y row = the R floats at c, or += them */
AI void store_rowf(float *y, const float *c, int R, int acc)
{
    store_row(y, _mm512_maskz_loadu_ps((__mmask16)((1u << R) - 1), c), R, acc);
}

/* Rows: the weights as A tiles (R weight rows x 32 bf16 of a chunk, in place; a last chunk that is not
 * whole copied with zeros after it), each activation row's parts as B tiles of one column (16 pairs
 * 4 bytes apart: in place). Tiles: 0 A, 1 B, 2-5 C (R x 4) of up to 4 activation rows. */
#define BF_ROW(j, c)                                             \
    do {                                                         \
        const char *xr = x + (size_t)(i + (j)) * xs + 64 * ch;   \
        TLOAD(1, xr, 4);                                         \
        TDPBF16PS(c, 0, 1);                                      \
        TLOAD(1, xr + part, 4);                                  \
        TDPBF16PS(c, 0, 1);                                      \
        TLOAD(1, xr + 2 * part, 4);                              \
        TDPBF16PS(c, 0, 1);                                      \
    } while (0)

static void bf_rows(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                    int64_t o0, int64_t o1, int acc)
{
    const int64_t K = w->cols, nch = act_bf16x3_cols(K) / 32, full = K / 32;
    const size_t rb = (size_t)K * 2, part = (size_t)act_bf16x3_cols(K) * 2;
    const char *W = (const char *)w->data;
    _Alignas(64) uint16_t tail[16 * 32];
    _Alignas(64) float cb[4 * 16];
    tile_config cfg;
    int R = -1;
    stream_start(W, rb, o0, o1);
    for (int64_t o = o0; o < o1; o += 16) {
        const int r = o1 - o < 16 ? (int)(o1 - o) : 16;
        if (r != R) {
            R = r;
            memset(&cfg, 0, sizeof cfg);
            cfg.palette = 1;
            tile_set(&cfg, 0, R, 64);
            tile_set(&cfg, 1, 16, 4);
            for (int t = 2; t < 6; t++) tile_set(&cfg, t, R, 4);
            tile_load_config(&cfg);
        }
        const char *ws = W + (size_t)o * rb;
        if (full < nch) {
            const __mmask32 m = (__mmask32)((1ull << (K - 32 * full)) - 1);
            for (int q = 0; q < R; q++)
                _mm512_store_si512((void *)(tail + 32 * q), _mm512_maskz_loadu_epi16(m, ws + (size_t)q * rb + 64 * full));
        }
        /* a strip further on, spread over this one's chunks */
        size_t pfn;
        const char *pf = stream_next(W, rb, o, o1, &pfn);
        const size_t pf_per = (pfn + (size_t)nch - 1) / (size_t)nch;
        for (int32_t i = 0; i < n; i += ROWS_MAX) {
            const int nx = n - i < ROWS_MAX ? n - i : ROWS_MAX;
            TZERO(2); TZERO(3); TZERO(4); TZERO(5);
            size_t pf_next = 0;
            for (int64_t ch = 0; ch < nch; ch++) {
                if (i == 0)
                    for (size_t e = pf_next + pf_per; pf_next < e && pf_next < pfn; pf_next += 64) _mm_prefetch(pf + pf_next, _MM_HINT_T1);
                if (ch < full) TLOAD(0, ws + 64 * ch, rb);
                else TLOAD(0, tail, 64);
                BF_ROW(0, 2);
                if (nx > 1) BF_ROW(1, 3);
                if (nx > 2) BF_ROW(2, 4);
                if (nx > 3) BF_ROW(3, 5);
            }
            TSTORE(2, cb, 4);
            if (nx > 1) TSTORE(3, cb + 16, 4);
            if (nx > 2) TSTORE(4, cb + 32, 4);
            if (nx > 3) TSTORE(5, cb + 48, 4);
            for (int j = 0; j < nx; j++) store_rowf(y + (int64_t)(i + j) * ldy + o, cb + 16 * j, R, acc);
        }
    }
    tile_release();
}

/* 16 rows of 16 dwords as their transpose: out[k][m] = r[m][k]. */
AI void tr16x16(const __m512i r[16], __m512i out[16])
{
    __m512i t[16], u[16];
    for (int j = 0; j < 16; j += 2) {
        t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
    }
    /* u[4g + e], 128-bit quarter k: rows 4g..4g+3, element 4k + e */
    for (int g = 0; g < 16; g += 4) {
        u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    const __m512i i01 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), i23 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (int e = 0; e < 4; e++) {
        /* quarters 0, 1 (then 2, 3) of rows 0-3 and 4-7, and of rows 8-11 and 12-15 */
        const __m512i v1 = _mm512_permutex2var_epi64(u[e], i01, u[4 + e]), v2 = _mm512_permutex2var_epi64(u[e], i23, u[4 + e]);
        const __m512i w1 = _mm512_permutex2var_epi64(u[8 + e], i01, u[12 + e]), w2 = _mm512_permutex2var_epi64(u[8 + e], i23, u[12 + e]);
        out[e] = _mm512_shuffle_i32x4(v1, w1, 0x44);
        out[4 + e] = _mm512_shuffle_i32x4(v1, w1, 0xEE);
        out[8 + e] = _mm512_shuffle_i32x4(v2, w2, 0x44);
        out[12 + e] = _mm512_shuffle_i32x4(v2, w2, 0xEE);
    }
}

/* The R weight rows at w (rb bytes apart) as B tiles, one per chunk of 32 columns (1 KB): tile row p
 * holds pair p of each weight row (VNNI order). Rows from R on and columns from K on are zeros. */
static void bf_pack_strip(char *pack, const char *w, size_t rb, int R, int64_t K, int64_t nch)
{
    for (int64_t ch = 0; ch < nch; ch++) {
        const int64_t left = K - 32 * ch;
        const __mmask32 m = left >= 32 ? 0xFFFFFFFFu : (__mmask32)((1ull << left) - 1);
        __m512i r[16], out[16];
        for (int q = 0; q < 16; q++)
            r[q] = q < R ? _mm512_maskz_loadu_epi16(m, w + (size_t)q * rb + 64 * ch) : _mm512_setzero_si512();
        tr16x16(r, out);
        for (int p = 0; p < 16; p++) _mm512_store_si512((void *)(pack + 1024 * ch + 64 * p), out[p]);
    }
}

/* GEMM: up to 32 activation rows (their parts as A tiles, in place) x up to 32 weight rows (two packed
 * strips) at a time, in four C tiles: four independent chains of tile products, so that the unit is not
 * left waiting out each product's latency, as it is with one C tile. C tile 2a + b holds activation
 * tile a x strip b. Every output still gets the products of its chunks in order, hi, mid, lo each. Tiles:
 * 0-3 C, 4 and 5 A (the two activation tiles, one part at a time), 6 and 7 B (the two strips' chunk).
 * TA, TB: whether there is a second activation tile, a second strip (constants where inlined). */
AI void bf_block(const char *pack, size_t strip, int64_t nch, const char *xi, size_t xs, size_t part, int TA, int TB,
              const char *pf, size_t pfn)
{
    const size_t pf_per = (pfn + (size_t)nch - 1) / (size_t)nch;
    size_t pf_next = 0;
    TZERO(0);
    if (TB) TZERO(1);
    if (TA) TZERO(2);
    if (TA && TB) TZERO(3);
    const char *xj = xi + 16 * xs;
    for (int64_t ch = 0; ch < nch; ch++) {
        for (size_t e = pf_next + pf_per; pf_next < e && pf_next < pfn; pf_next += 64) _mm_prefetch(pf + pf_next, _MM_HINT_T0);
        TLOAD(6, pack + 1024 * ch, 64);
        if (TB) TLOAD(7, pack + strip + 1024 * ch, 64);
#pragma GCC unroll 3
        for (int p = 0; p < 3; p++) {
            TLOAD(4, xi + (size_t)p * part + 64 * ch, xs);
            if (TA) TLOAD(5, xj + (size_t)p * part + 64 * ch, xs);
            TDPBF16PS(0, 4, 6);
            if (TB) TDPBF16PS(1, 4, 7);
            if (TA) TDPBF16PS(2, 5, 6);
            if (TA && TB) TDPBF16PS(3, 5, 7);
        }
    }
}

static void bf_gemm(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                    int64_t o0, int64_t o1, int acc, float *scratch)
{
    const int64_t K = w->cols, nch = act_bf16x3_cols(K) / 32;
    const size_t rb = (size_t)K * 2, part = (size_t)act_bf16x3_cols(K) * 2, strip = 1024 * (size_t)nch;
    const char *W = (const char *)w->data;
    char *pack = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *cb = (float *)(void *)(pack + 2 * strip);
    tile_config cfg;
    int shape[4] = { -1, -1, -1, -1 };
    for (int64_t o = o0; o < o1; o += 32) {
        const int r0 = o1 - o < 16 ? (int)(o1 - o) : 16, r1 = o1 - o <= 16 ? 0 : o1 - o < 32 ? (int)(o1 - o - 16) : 16;
        bf_pack_strip(pack, W + (size_t)o * rb, rb, r0, K, nch);
        if (r1) bf_pack_strip(pack + strip, W + (size_t)(o + 16) * rb, rb, r1, K, nch);
        const size_t next = o + 32 < o1 ? (size_t)(o1 - o - 32 < 32 ? o1 - o - 32 : 32) * rb : 0;
        for (int32_t i = 0; i < n; i += 32) {
            const int n0 = n - i < 16 ? n - i : 16, n1 = n - i <= 16 ? 0 : n - i < 32 ? n - i - 16 : 16;
            /* the next strips, a slice per activation block, spread over its chunks */
            const size_t plo = next * (size_t)(i / 32) / (size_t)((n + 31) / 32) & ~(size_t)63;
            const size_t phi = next * (size_t)(i / 32 + 1) / (size_t)((n + 31) / 32);
            const size_t pfn = next && phi > plo ? phi - plo : 0;
            const char *pf = pfn ? W + (size_t)(o + 32) * rb + plo : NULL;
            if (r0 != shape[0] || r1 != shape[1] || n0 != shape[2] || n1 != shape[3]) {
                shape[0] = r0; shape[1] = r1; shape[2] = n0; shape[3] = n1;
                memset(&cfg, 0, sizeof cfg);
                cfg.palette = 1;
                tile_set(&cfg, 0, n0, 4 * r0);
                tile_set(&cfg, 4, n0, 64);
                tile_set(&cfg, 6, 16, 4 * r0);
                if (r1) { tile_set(&cfg, 1, n0, 4 * r1); tile_set(&cfg, 7, 16, 4 * r1); }
                if (n1) { tile_set(&cfg, 2, n1, 4 * r0); tile_set(&cfg, 5, n1, 64); }
                if (r1 && n1) tile_set(&cfg, 3, n1, 4 * r1);
                tile_load_config(&cfg);
            }
            const char *xi = x + (size_t)i * xs;
            if (n1 && r1) bf_block(pack, strip, nch, xi, xs, part, 1, 1, pf, pfn);
            else if (n1) bf_block(pack, strip, nch, xi, xs, part, 1, 0, pf, pfn);
            else if (r1) bf_block(pack, strip, nch, xi, xs, part, 0, 1, pf, pfn);
            else bf_block(pack, strip, nch, xi, xs, part, 0, 0, pf, pfn);
            TSTORE(0, cb, 64);
            if (r1) TSTORE(1, cb + 256, 64);
            if (n1) TSTORE(2, cb + 512, 64);
            if (n1 && r1) TSTORE(3, cb + 768, 64);
            for (int q = 0; q < n0; q++) {
                float *yq = y + (int64_t)(i + q) * ldy + o;
                store_rowf(yq, cb + 16 * q, r0, acc);
                if (r1) store_rowf(yq + 16, cb + 256 + 16 * q, r1, acc);
            }
            for (int q = 0; q < n1; q++) {
                float *yq = y + (int64_t)(i + 16 + q) * ldy + o;
                store_rowf(yq, cb + 512 + 16 * q, r0, acc);
                if (r1) store_rowf(yq + 16, cb + 768 + 16 * q, r1, acc);
            }
        }
    }
    tile_release();
}

static void mm_bf16(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                    int64_t o0, int64_t o1, int acc, float *scratch)
{
    if (o1 <= o0 || n <= 0) return;
    const size_t need = 2 * 1024 * (size_t)(act_bf16x3_cols(w->cols) / 32) + 4 * 1024 + 64;
    if (n > ROWS_MAX && scratch && need <= sizeof(float) * MM_SCRATCH_FLOATS(w->cols))
        bf_gemm(w, x, xs, y, ldy, n, o0, o1, acc, scratch);
    else
        bf_rows(w, x, xs, y, ldy, n, o0, o1, acc);
}

/* A row of k floats split into the three bfloat16 parts of ACT_BF16X3 (quant.h). */
AI __m512 bf16_widen(__m256bh h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
}

static void act_bf16x3_amx(const float *x, void *row, int64_t k)
{
    const int64_t kp = act_bf16x3_cols(k);
    uint16_t *hi = (uint16_t *)row, *mid = hi + kp, *lo = mid + kp;
    for (int64_t i = 0; i < kp; i += 16) {
        const __mmask16 m = i + 16 <= k ? 0xFFFF : i < k ? (__mmask16)((1u << (k - i)) - 1) : 0;
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        const __m256bh h = _mm512_cvtneps_pbh(v);
        const __m512 hf = bf16_widen(h);
        const __m512 r = _mm512_maskz_sub_ps((__mmask16)~_mm512_fpclass_ps_mask(hf, 0x18), v, hf);   /* 0 where hi is infinite */
        const __m256bh md = _mm512_cvtneps_pbh(r);
        const __m256bh l = _mm512_cvtneps_pbh(_mm512_sub_ps(r, bf16_widen(md)));
        _mm256_storeu_si256((__m256i *)(hi + i), (__m256i)h);
        _mm256_storeu_si256((__m256i *)(mid + i), (__m256i)md);
        _mm256_storeu_si256((__m256i *)(lo + i), (__m256i)l);
    }
}

static void mm_quant(const tensor *w, const char *x, size_t xs, float *y, int64_t ldy, int32_t n,
                     int64_t o0, int64_t o1, int acc, float *scratch)
{
    if (o1 <= o0 || n <= 0) return;
    /* both shapes give the same bits: the GEMM shape when there are rows enough to share a packed strip
     * and scratch to pack it in */
    if (n > ROWS_MAX && scratch &&
        q_gemm_scratch(w->cols / QK) <= sizeof(float) * MM_SCRATCH_FLOATS(w->cols))
        q_gemm(w, x, xs, y, ldy, n, o0, o1, acc, scratch);
    else
        vq_rows(w, x, xs, y, ldy, n, o0, o1, acc);
}

static void matmul_amx(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n,
                       int64_t o0, int64_t o1, int acc, float *scratch)
{
    switch (w->type) {
    case GGML_Q8_0: case GGML_Q4_0:
        mm_quant(w, (const char *)x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    case GGML_BF16:
        mm_bf16(w, (const char *)x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    default:
        kernels_avx512.matmul(w, x, xs, y, ldy, n, o0, o1, acc, scratch); break;
    }
}

KERNELS_LORA_AXPY(lora_axpy_amx, 16)

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

const kernel_set kernels_amx = {
    "amx", act_q8_avx2, matmul_amx, k_attend_avx512, k_rms_norm_avx2, k_swiglu_avx2, lora_axpy_amx,
    1ull << GGML_BF16, act_bf16x3_amx, 0, NULL
};
#endif
