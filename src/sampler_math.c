/* sampler_math.c - the sampler's arithmetic: the seeded PRNG, exp and log
 * with + - * / only (the same bits on every platform, see sampler.c), and
 * the candidates' total order. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>   /* HUGE_VAL only */
#include <stdint.h>
#include <stdlib.h>

#include "sampler_impl.h"

/* ------------------------------------------------------------------------ */
/* PRNG: splitmix64 to seed, xoshiro256** to draw (Blackman & Vigna).        */
/* ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

void rng_seed(uint64_t s[4], uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s[i] = splitmix64(&x);
    /* splitmix64 never yields four zeros in a row, but be explicit: the
     * all-zero state is the one xoshiro cannot leave. */
    if ((s[0] | s[1] | s[2] | s[3]) == 0) s[0] = 1;
}

/* Uniform double in [0, 1), 53 random bits. */
double rng_uniform(uint64_t s[4])
{
    return (double)(xoshiro_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------------ */
/* exp(x) for x <= 0 with + - * / only, so every platform gets the same bits. */
/* Relative error ~1e-16; exactly 1 at x == 0; 0 below -700 (no subnormals). */
/* ------------------------------------------------------------------------ */

double det_exp_nonpos(double x)
{
    /* fdlibm's split of ln 2: k * LN2_HI is exact for |k| < 2^11. */
    const double LN2_HI  = 6.93147180369123816490e-01;
    const double LN2_LO  = 1.90821492927058770002e-10;
    const double INV_LN2 = 1.44269504088896338700e+00;
    if (!(x > -700.0)) return 0.0;        /* also catches -inf and NaN */
    if (x >= 0.0) return 1.0;
    double kd = x * INV_LN2;
    int k = (int)(kd - 0.5);              /* kd < 0: round to nearest-ish */
    double r = (x - (double)k * LN2_HI) - (double)k * LN2_LO;   /* |r| < 0.35 */
    /* Taylor series to r^13 / 13!: truncation error < 1e-17 for |r| < 0.35. */
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* 2^k, k in [-1011, 0]: a normal double built from its bits. */
    union { uint64_t u; double d; } two_k;
    two_k.u = (uint64_t)(k + 1023) << 52;
    return p * two_k.d;
}

/* exp(x) for any x: 1 / exp(-x) above 0 (relative error ~2e-16), +inf
 * above 700. */
double det_exp(double x)
{
    if (x <= 0.0 || x != x) return det_exp_nonpos(x);
    if (x >= 700.0) return HUGE_VAL;
    return 1.0 / det_exp_nonpos(-x);
}

/* log(x) for finite x > 0 with + - * / only: x = 2^e m, m in
 * [sqrt(1/2), sqrt(2)] (exact scalings by 2), and log m = 2 atanh(s),
 * s = (m - 1) / (m + 1), |s| <= 0.172, summed to s^41 (truncation < 1e-30).
 * Relative error ~1e-16. */
double det_log(double x)
{
    const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
    int e = 0;
    while (x < 1.0) { x *= 2.0; e--; }    /* exact */
    while (x >= 2.0) { x *= 0.5; e++; }   /* exact */
    if (x > 1.41421356237309504880) { x *= 0.5; e++; }
    const double s = (x - 1.0) / (x + 1.0), s2 = s * s;
    double term = s, sum = 0.0;
    for (int k = 1; k <= 41; k += 2) { sum += term / (double)k; term *= s2; }
    return ((double)e * LN2_HI + 2.0 * sum) + (double)e * LN2_LO;
}

/* x^y for x >= 0: exp(y log x); 0^y is 0 (y > 0), 1 (y == 0), +inf (y < 0). */
double det_pow(double x, double y)
{
    if (y == 0.0) return 1.0;
    if (x == 0.0) return y > 0.0 ? 0.0 : HUGE_VAL;
    return det_exp(y * det_log(x));
}

/* ------------------------------------------------------------------------ */
/* Ordering: logit descending, then id ascending (a total order).            */
/* ------------------------------------------------------------------------ */

int cand_before(const sampler_cand *a, const sampler_cand *b)
{
    if (a->l != b->l) return a->l > b->l;
    return a->id < b->id;
}

static int cand_cmp(const void *pa, const void *pb)
{
    const sampler_cand *a = (const sampler_cand *)pa, *b = (const sampler_cand *)pb;
    if (cand_before(a, b)) return -1;
    if (cand_before(b, a)) return 1;
    return 0;
}

/* A total order: the result does not depend on the libc's qsort. */
void cand_sort(sampler_cand *c, int32_t n)
{
    qsort(c, (size_t)n, sizeof(*c), cand_cmp);
}

static void cand_swap(sampler_cand *a, sampler_cand *b)
{
    sampler_cand t = *a; *a = *b; *b = t;
}

/* Reorder c[0..n-1] so that c[0..k-1] are the k first in cand order
 * (unordered among themselves); 0 < k < n. Quickselect with a
 * median-of-three pivot; deterministic. */
void cand_select(sampler_cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (cand_before(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[hi], &c[lo])) cand_swap(&c[hi], &c[lo]);
        if (cand_before(&c[hi], &c[mid])) cand_swap(&c[hi], &c[mid]);
        /* c[lo] <= c[mid] <= c[hi]; the pivot goes to hi - 1. */
        if (hi - lo < 3) return;   /* three or fewer elements: now sorted */
        cand_swap(&c[mid], &c[hi - 1]);
        sampler_cand piv = c[hi - 1];
        int32_t i = lo, j = hi - 1;
        for (;;) {
            while (cand_before(&c[++i], &piv)) {}
            while (cand_before(&piv, &c[--j])) {}
            if (i >= j) break;
            cand_swap(&c[i], &c[j]);
        }
        cand_swap(&c[i], &c[hi - 1]);
        /* c[lo..i-1] before the pivot, c[i] the pivot, c[i+1..hi] after. */
        if (i == k || i == k - 1) return;
        if (i < k) lo = i + 1; else hi = i - 1;
    }
}

void cand_weights(mor_sampler *s, sampler_cand *c, int32_t n)
{
    if (s->w_ok) return;
    double lmax = c[0].l;
    for (int32_t i = 1; i < n; i++)
        if (c[i].l > lmax) lmax = c[i].l;
    const double T = s->T;
    for (int32_t i = 0; i < n; i++) c[i].w = det_exp_nonpos((c[i].l - lmax) / T);
    s->w_ok = 1;
}
