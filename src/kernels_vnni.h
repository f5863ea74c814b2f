/* kernels_vnni.h - pieces the AVX-512 and AMX sets share for quantized
 * weights (kernels_avx512.c, kernels_amx.c): the 16 x 8 dword transpose that
 * puts weight rows in lanes, and the prefetching of a matrix-vector
 * product's weight stream. Include after the file's AVX-512 target pragma:
 * these functions are compiled with each set's target. */
#ifndef MOR_KERNELS_VNNI_H
#define MOR_KERNELS_VNNI_H
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define VNNI_AI static inline __attribute__((always_inline))

/* 16 rows of 8 dwords as 8 rows of 16 dwords: out[k][m] = row m's dword k.
 * z[j] holds rows j (lanes 0-7) and j + 8 (lanes 8-15). */
VNNI_AI void tr16x8(const __m512i z[8], __m512i out[8])
{
    __m512i t[8], u[8];
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
        t[j] = _mm512_unpacklo_epi32(z[j], z[j + 1]);
        t[j + 1] = _mm512_unpackhi_epi32(z[j], z[j + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 8; h += 4) {
        u[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);
        u[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]);
        u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
        u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
    const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        out[e] = _mm512_permutex2var_epi64(u[e], lo, u[e + 4]);
        out[e + 4] = _mm512_permutex2var_epi64(u[e], hi, u[e + 4]);
    }
}

/* Matrix-vector products read each weight once per token, from L3 or DRAM, and neither the hardware
 * prefetchers nor a lead of one strip of 16 rows keep enough of that stream in flight (the first
 * strip of each range was not prefetched at all). So a range requests its first STREAM_AHEAD strips
 * at once, and each strip then requests, spread over its loop, the strip STREAM_AHEAD further on,
 * into L2 (prefetcht1: the lines are read once, by this core, a few microseconds later). In-process,
 * one thread, Q8_0 rows streamed from L3: 16.2 GB/s with a lead of one strip into L1, 17.8 with two
 * into L2, 18.2-18.3 with three or four; with the burst at the start, decode of the 135M shape on two
 * threads ~10% faster than without. */
enum { STREAM_AHEAD = 2 };

/* The first strips of the rows [o0, o1) (rb bytes each, from row 0 at W), prefetched. */
VNNI_AI void stream_start(const char *W, size_t rb, int64_t o0, int64_t o1)
{
    const int64_t e = o0 + 16 * STREAM_AHEAD < o1 ? o0 + 16 * STREAM_AHEAD : o1;
    for (size_t off = (size_t)o0 * rb & ~(size_t)63; off < (size_t)e * rb; off += 64) _mm_prefetch(W + off, _MM_HINT_T1);
}

/* The bytes strip o (of a range ending at o1) prefetches over its loop: *pfn bytes from the return. */
VNNI_AI const char *stream_next(const char *W, size_t rb, int64_t o, int64_t o1, size_t *pfn)
{
    const int64_t no = o + 16 * STREAM_AHEAD;
    *pfn = no < o1 ? (size_t)(o1 - no < 16 ? o1 - no : 16) * rb : 0;
    return *pfn ? W + (size_t)no * rb : NULL;
}

#endif
