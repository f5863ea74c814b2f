/* sampler.c - the token sampler of mor.h: repetition penalty, then greedy, or
 * temperature, top-k, top-p, min-p and a draw from a seeded PRNG.
 *
 * Determinism. The same params (seed included), the same history and the same
 * logits give the same token on every platform whose double arithmetic is
 * IEEE-754 binary64 with round-to-nearest and FLT_EVAL_METHOD == 0 (x86-64
 * SSE2, AArch64, RISC-V, ...; not x87). To get there:
 *  - every computation after reading the logits is done in double with the
 *    basic operations (+ - * / and compares) only, which IEEE-754 rounds
 *    exactly; no libm call is made (exp is our own polynomial, below), since
 *    libm's expf/exp differ between libcs in the last bit;
 *  - floating-point contraction (fused multiply-add) is switched off for this
 *    file, so a compiler cannot round differently on FMA hardware;
 *  - subnormals are never produced (weights below e^-700 are 0), so a host
 *    that sets flush-to-zero (e.g. a -ffast-math program) sees the same values;
 *  - every sum is taken in an order fixed by this code, and the only sort uses
 *    a total order (logit descending, then id ascending), so the result does
 *    not depend on the libc's qsort;
 *  - the PRNG is xoshiro256** seeded through splitmix64, with 53-bit uniforms.
 *
 * Semantics (the header leaves these open):
 *  - Logits must be finite or -inf (a banned token, never drawn). A NaN or
 *    +inf logit, or every logit -inf, is refused with MOR_E_INVALID_ARG
 *    before anything changes (history, PRNG): such logits come from broken
 *    weights or overflowed activations, and any token picked from them
 *    (token 0, say) would only hide that.
 *  - The repetition penalty looks at the last repeat_last_n tokens of the
 *    history (sampled and accepted) and penalises each distinct token among
 *    them once: logit > 0 ? logit / penalty : logit * penalty (CTRL, as in
 *    llama.cpp). History ids outside [0, n_vocab) are ignored.
 *  - top-k keeps the k highest logits (ties: lower ids first); top-p keeps the
 *    shortest prefix, in that order, whose probability reaches top_p (at least
 *    one token); min-p keeps p >= min_p * p_max. top-p uses the probabilities
 *    renormalised over what top-k kept; min-p is relative, so the order of
 *    top-p and min-p only matters through top-p's normalisation.
 *  - Validation: temperature must not be NaN or infinite (<= 0 is greedy);
 *    top_p must be > 0 (>= 1: off); min_p must be <= 1 (<= 0: off);
 *    repeat_penalty must be finite and > 0 (1: off); repeat_last_n >= 0
 *    (0: off); top_k any (<= 0: off).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>   /* HUGE_VAL only: no libm function is called */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "mor.h"
#include "sampler.h"
#include "status.h"

typedef struct {
    double  l;   /* penalised logit; NaN already mapped to -inf */
    double  w;   /* unnormalised probability exp((l - l_max) / T), in [0, 1] */
    int32_t id;
} sampler_cand;

struct mor_sampler {
    mor_sampler_params p;      /* validated copy, every field set */
    uint64_t      rng[4];      /* xoshiro256** state */
    mor_token    *hist;        /* ring of the last p.repeat_last_n tokens */
    int32_t       hist_len;    /* tokens held, <= p.repeat_last_n */
    int32_t       hist_pos;    /* where the next one goes */
    sampler_cand *cand;        /* scratch [cap] */
    uint8_t      *mark;        /* scratch [cap], all 0 between calls */
    int32_t       cap;
};

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

static void rng_seed(uint64_t s[4], uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s[i] = splitmix64(&x);
    /* splitmix64 never yields four zeros in a row, but be explicit: the
     * all-zero state is the one xoshiro cannot leave. */
    if ((s[0] | s[1] | s[2] | s[3]) == 0) s[0] = 1;
}

/* Uniform double in [0, 1), 53 random bits. */
static double rng_uniform(uint64_t s[4])
{
    return (double)(xoshiro_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------------ */
/* exp(x) for x <= 0 with + - * / only, so every platform gets the same bits. */
/* Relative error ~1e-16; exactly 1 at x == 0; 0 below -700 (no subnormals). */
/* ------------------------------------------------------------------------ */

static double det_exp_nonpos(double x)
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

/* ------------------------------------------------------------------------ */
/* Ordering: logit descending, then id ascending (a total order).            */
/* ------------------------------------------------------------------------ */

static int cand_before(const sampler_cand *a, const sampler_cand *b)
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

static void cand_swap(sampler_cand *a, sampler_cand *b)
{
    sampler_cand t = *a; *a = *b; *b = t;
}

/* Reorder c[0..n-1] so that c[0..k-1] are the k first in cand order
 * (unordered among themselves); 0 < k < n. Quickselect with a
 * median-of-three pivot; deterministic. */
static void cand_select(sampler_cand *c, int32_t n, int32_t k)
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

/* ------------------------------------------------------------------------ */
/* Params                                                                    */
/* ------------------------------------------------------------------------ */

static void sampler_defaults(mor_sampler_params *d)
{
    memset(d, 0, sizeof(*d));
    d->size           = (uint32_t)sizeof(*d);
    d->seed           = 0;
    d->temperature    = 0.8f;
    d->top_k          = 40;
    d->top_p          = 0.95f;
    d->min_p          = 0.05f;
    d->repeat_penalty = 1.0f;
    d->repeat_last_n  = 64;
}

MOR_API void mor_sampler_params_init(mor_sampler_params *p, size_t size)
{
    mor_sampler_params d;
    sampler_defaults(&d);
    abi_init(p, size, &d, sizeof d);
}

MOR_API size_t mor_sizeof_sampler_params(void)
{
    return sizeof(mor_sampler_params);
}

static int is_nan_f(float x) { return x != x; }
static int is_finite_f(float x) { return x == x && x - x == 0.0f; }

/* Check `in` and copy it, completed with defaults, into *out. */
static mor_status sampler_params_get(const mor_sampler_params *in, mor_sampler_params *out)
{
    sampler_defaults(out);
    if (!in) return MOR_OK;
    mor_status st = abi_read(out, sizeof *out, in, sizeof(abi_sampler_params_v1), "mor_sampler_params");
    if (st) return st;

    if (!is_finite_f(out->temperature))
        return err_set(MOR_E_INVALID_ARG,
                       "mor_sampler_create: temperature must be a finite number (<= 0: greedy), got %g",
                       (double)out->temperature);
    if (is_nan_f(out->top_p) || out->top_p <= 0.0f)
        return err_set(MOR_E_INVALID_ARG,
                       "mor_sampler_create: top_p must be in (0, 1] (>= 1: off), got %g",
                       (double)out->top_p);
    if (is_nan_f(out->min_p) || out->min_p > 1.0f)
        return err_set(MOR_E_INVALID_ARG,
                       "mor_sampler_create: min_p must be in [0, 1] (<= 0: off), got %g",
                       (double)out->min_p);
    if (!is_finite_f(out->repeat_penalty) || out->repeat_penalty <= 0.0f)
        return err_set(MOR_E_INVALID_ARG,
                       "mor_sampler_create: repeat_penalty must be finite and > 0 (1: off), got %g",
                       (double)out->repeat_penalty);
    if (out->repeat_last_n < 0)
        return err_set(MOR_E_INVALID_ARG,
                       "mor_sampler_create: repeat_last_n must be >= 0 (0: off), got %d",
                       (int)out->repeat_last_n);
    return MOR_OK;
}

/* ------------------------------------------------------------------------ */
/* Sampler                                                                   */
/* ------------------------------------------------------------------------ */

MOR_API mor_status mor_sampler_create(const mor_sampler_params *params, mor_sampler **out)
{
    mor_sampler_params p;
    mor_status st;
    mor_sampler *s;

    err_clear();
    if (!out) return err_set(MOR_E_INVALID_ARG, "mor_sampler_create: out is NULL");
    st = sampler_params_get(params, &p);
    if (st != MOR_OK) return st;

    s = (mor_sampler *)calloc(1, sizeof(*s));
    if (!s) return err_set(MOR_E_NOMEM, "mor_sampler_create: out of memory");
    s->p = p;
    if (p.repeat_last_n > 0) {
        if ((size_t)p.repeat_last_n > SIZE_MAX / sizeof(mor_token)) {
            free(s);
            return err_set(MOR_E_NOMEM, "mor_sampler_create: repeat_last_n %d is too large",
                           (int)p.repeat_last_n);
        }
        s->hist = (mor_token *)malloc((size_t)p.repeat_last_n * sizeof(mor_token));
        if (!s->hist) {
            free(s);
            return err_set(MOR_E_NOMEM,
                           "mor_sampler_create: out of memory for a history of %d tokens",
                           (int)p.repeat_last_n);
        }
    }
    rng_seed(s->rng, p.seed);
    *out = s;
    return MOR_OK;
}

MOR_API void mor_sampler_free(mor_sampler *s)
{
    if (!s) return;
    free(s->hist);
    free(s->cand);
    free(s->mark);
    free(s);
}

MOR_API void mor_sampler_accept(mor_sampler *s, mor_token token)
{
    if (!s || s->p.repeat_last_n <= 0) return;
    s->hist[s->hist_pos] = token;
    s->hist_pos = s->hist_pos + 1 == s->p.repeat_last_n ? 0 : s->hist_pos + 1;
    if (s->hist_len < s->p.repeat_last_n) s->hist_len++;
}

void sampler_save(const mor_sampler *s, sampler_state *st, mor_token *hist, int32_t n)
{
    memcpy(st->rng, s->rng, sizeof st->rng);
    st->hist_len = s->hist_len; st->hist_pos = s->hist_pos;
    for (int32_t i = 0, k = s->hist_pos; i < n && s->p.repeat_last_n > 0; i++) {
        hist[i] = s->hist[k];
        k = k + 1 == s->p.repeat_last_n ? 0 : k + 1;
    }
}

void sampler_restore(mor_sampler *s, const sampler_state *st, const mor_token *hist, int32_t n)
{
    memcpy(s->rng, st->rng, sizeof st->rng);
    s->hist_len = st->hist_len; s->hist_pos = st->hist_pos;
    for (int32_t i = 0, k = s->hist_pos; i < n && s->p.repeat_last_n > 0; i++) {
        s->hist[k] = hist[i];
        k = k + 1 == s->p.repeat_last_n ? 0 : k + 1;
    }
}

MOR_API void mor_sampler_reset(mor_sampler *s)
{
    if (!s) return;
    s->hist_len = 0;
    s->hist_pos = 0;
    rng_seed(s->rng, s->p.seed);
}

/* Make room for n_vocab candidates. Nothing changes on failure. */
mor_status sampler_reserve(mor_sampler *s, int32_t n)
{
    sampler_cand *c;
    uint8_t *m;
    if (n <= s->cap) return MOR_OK;
    if ((size_t)n > SIZE_MAX / sizeof(sampler_cand))
        return err_set(MOR_E_NOMEM, "mor_sampler_sample: n_vocab %d is too large", (int)n);
    c = (sampler_cand *)malloc((size_t)n * sizeof(*c));
    m = (uint8_t *)calloc((size_t)n, 1);
    if (!c || !m) {
        free(c);
        free(m);
        return err_set(MOR_E_NOMEM, "mor_sampler_sample: out of memory for n_vocab %d", (int)n);
    }
    free(s->cand);
    free(s->mark);
    s->cand = c;
    s->mark = m;
    s->cap = n;
    return MOR_OK;
}

mor_status sampler_check_logits(const float *logits, int32_t n)
{
    int32_t finite = 0;
    for (int32_t i = 0; i < n; i++) {
        float x = logits[i];
        if (x != x || x == HUGE_VAL)
            return err_set(MOR_E_INVALID_ARG, "mor_sampler_sample: logit %d is %s (the model's output is not finite: "
                           "non-finite weights or overflowed activations?)", (int)i, x != x ? "NaN" : "+inf");
        finite += x > -HUGE_VAL;
    }
    if (!finite) return err_set(MOR_E_INVALID_ARG, "mor_sampler_sample: every logit is -inf: no token can be drawn");
    return MOR_OK;
}

/* c[id].l = logits[id] (checked: finite or -inf), then the repetition penalty. */
/* The repetition penalty changes some logits (it is on and there is history). */
static int sampler_penalizes(const mor_sampler *s) { return s->p.repeat_penalty != 1.0f && s->hist_len != 0; }

int32_t sampler_argmax(const float *v, int32_t n)
{
    float best = v[0];
    int32_t tok = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > best) { best = v[i]; tok = i; }
    return tok;
}

static void sampler_load_logits(mor_sampler *s, const float *logits, int32_t n)
{
    sampler_cand *c = s->cand;
    for (int32_t i = 0; i < n; i++) {
        c[i].l = (double)logits[i];
        c[i].w = 0.0;
        c[i].id = i;
    }
    if (!sampler_penalizes(s)) return;

    const double pen = (double)s->p.repeat_penalty;
    const int32_t cap = s->p.repeat_last_n;
    /* Oldest to newest; order does not matter, each id is penalised once. */
    int32_t start = s->hist_pos - s->hist_len;
    if (start < 0) start += cap;
    for (int32_t j = 0, k = start; j < s->hist_len; j++, k = (k + 1 == cap ? 0 : k + 1)) {
        mor_token t = s->hist[k];
        if (t < 0 || t >= n || s->mark[t]) continue;
        s->mark[t] = 1;
        c[t].l = c[t].l > 0.0 ? c[t].l / pen : c[t].l * pen;
    }
    for (int32_t j = 0, k = start; j < s->hist_len; j++, k = (k + 1 == cap ? 0 : k + 1)) {
        mor_token t = s->hist[k];
        if (t >= 0 && t < n) s->mark[t] = 0;
    }
}

static mor_token sampler_pick(mor_sampler *s, int32_t n_vocab)
{
    sampler_cand *c = s->cand;
    const mor_sampler_params *p = &s->p;

    /* Greedy: first maximum in id order (at least one logit is finite). */
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (c[i].l > c[best].l) best = i;
    if (p->temperature <= 0.0f) return best;

    const double lmax = c[best].l;   /* finite */

    /* Candidates: tokens that can be drawn, compacted in id order. */
    int32_t n = 0;
    const double T = (double)p->temperature;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (!(c[i].l > -HUGE_VAL)) continue;
        c[n] = c[i];
        c[n].w = det_exp_nonpos((c[i].l - lmax) / T);
        n++;
    }

    /* top-k */
    if (p->top_k > 0 && p->top_k < n) {
        cand_select(c, n, p->top_k);
        n = p->top_k;
    }

    if (p->top_p < 1.0f) {
        /* Probability mass of what top-k kept, before min-p removes anything. */
        double z = 0.0;
        for (int32_t i = 0; i < n; i++) z += c[i].w;
        /* min-p: w / w_max >= min_p, and w_max == 1 (the top token). Only
         * what survives it needs sorting: the min-p set is a prefix of the
         * sorted order, so the final set is the shorter of the two prefixes. */
        if (p->min_p > 0.0f) {
            const double mp = (double)p->min_p;
            int32_t m = 0;
            for (int32_t i = 0; i < n; i++)
                if (c[i].w >= mp) cand_swap(&c[m++], &c[i]);
            n = m;
        }
        qsort(c, (size_t)n, sizeof(*c), cand_cmp);
        const double target = (double)p->top_p * z;
        double cum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            cum += c[i].w;
            if (cum >= target) { n = i + 1; break; }
        }
    } else if (p->min_p > 0.0f) {
        const double mp = (double)p->min_p;
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (c[i].w >= mp) cand_swap(&c[m++], &c[i]);
        n = m;
    }

    /* Draw. n >= 1 and c[] holds the token of weight 1 (the maximum). */
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) z += c[i].w;
    const double target = rng_uniform(s->rng) * z;
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].w <= 0.0) continue;
        cum += c[i].w;
        last = i;
        if (cum > target) return c[i].id;
    }
    return c[last].id;   /* rounding put target at the very top */
}

MOR_API mor_status mor_sampler_sample(mor_sampler *s, const float *logits, int32_t n_vocab,
                                      mor_token *out)
{
    mor_status st;
    mor_token tok;

    err_clear();
    if (!s || !logits || !out)
        return err_set(MOR_E_INVALID_ARG, "mor_sampler_sample: %s is NULL",
                       !s ? "sampler" : !logits ? "logits" : "out");
    if (n_vocab <= 0)
        return err_set(MOR_E_INVALID_ARG, "mor_sampler_sample: n_vocab must be > 0, got %d",
                       (int)n_vocab);
    st = sampler_check_logits(logits, n_vocab);   /* before anything changes */
    if (st == MOR_OK) st = sampler_reserve(s, n_vocab);
    if (st != MOR_OK) return st;

    if (s->p.temperature <= 0.0f && !sampler_penalizes(s)) {
        /* greedy without a penalty: sampler_pick's first maximum, found on
         * the floats themselves, without loading the candidates (a large
         * share of a small model's step) */
        tok = sampler_argmax(logits, n_vocab);
    } else {
        sampler_load_logits(s, logits, n_vocab);
        tok = sampler_pick(s, n_vocab);
    }
    mor_sampler_accept(s, tok);
    *out = tok;
    return MOR_OK;
}

/* ---- log-probabilities ---------------------------------------------------- */

/* log(x) for x >= 1 (a sum of weights whose largest is 1) with + - * /
 * only, as det_exp_nonpos: x = 2^e m, m in [sqrt(1/2), sqrt(2)], and
 * log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, summed to s^41
 * (truncation < 1e-30). Relative error ~1e-16. */
static double det_log_ge1(double x)
{
    const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
    int e = 0;
    while (x >= 2.0) { x *= 0.5; e++; }   /* exact */
    if (x > 1.41421356237309504880) { x *= 0.5; e++; }
    const double s = (x - 1.0) / (x + 1.0), s2 = s * s;
    double term = s, sum = 0.0;
    for (int k = 1; k <= 41; k += 2) { sum += term / (double)k; term *= s2; }
    return ((double)e * LN2_HI + 2.0 * sum) + (double)e * LN2_LO;
}

/* a ranks below b: a lower logit, or the same logit and a higher id (greedy
 * picks the lowest id on ties, so that id ranks first). */
static int lp_below(float la, mor_token a, float lb, mor_token b) { return la < lb || (la == lb && a > b); }

/* Sift entry i of the min-heap (the lowest-ranked entry at the root) of n
 * entries down. */
static void lp_sift(mor_token *id, float *l, int32_t n, int32_t i)
{
    for (;;) {
        int32_t lo = i, c1 = 2 * i + 1, c2 = 2 * i + 2;
        if (c1 < n && lp_below(l[c1], id[c1], l[lo], id[lo])) lo = c1;
        if (c2 < n && lp_below(l[c2], id[c2], l[lo], id[lo])) lo = c2;
        if (lo == i) return;
        float tl = l[i]; l[i] = l[lo]; l[lo] = tl;
        mor_token ti = id[i]; id[i] = id[lo]; id[lo] = ti;
        i = lo;
    }
}

MOR_API mor_status mor_logprobs(const float *logits, int32_t n_vocab, mor_token token, float *logprob_out,
                                int32_t k, mor_token *top_tokens, float *top_logprobs)
{
    err_clear();
    if (!logits) return err_set(MOR_E_INVALID_ARG, "mor_logprobs: logits is NULL");
    if (n_vocab <= 0) return err_set(MOR_E_INVALID_ARG, "mor_logprobs: n_vocab must be > 0, got %d", (int)n_vocab);
    if (k < 0 || k > n_vocab)
        return err_set(MOR_E_INVALID_ARG, "mor_logprobs: k must be in [0, n_vocab = %d], got %d", (int)n_vocab, (int)k);
    if (k > 0 && (!top_tokens || !top_logprobs))
        return err_set(MOR_E_INVALID_ARG, "mor_logprobs: k = %d but %s is NULL", (int)k,
                       !top_tokens ? "top_tokens" : "top_logprobs");
    if (logprob_out && (token < 0 || token >= n_vocab))
        return err_set(MOR_E_OUT_OF_RANGE, "mor_logprobs: token %d is not in [0, %d)", (int)token, (int)n_vocab);
    int32_t finite = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float x = logits[i];
        if (x != x || x == HUGE_VAL)
            return err_set(MOR_E_INVALID_ARG, "mor_logprobs: logit %d is %s", (int)i, x != x ? "NaN" : "+inf");
        finite += x > -HUGE_VAL;
    }
    if (!finite) return err_set(MOR_E_INVALID_ARG, "mor_logprobs: every logit is -inf");
    /* log-softmax in double: lse = max + log(sum exp(l - max)) */
    double mx = -HUGE_VAL, sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) if ((double)logits[i] > mx) mx = (double)logits[i];
    for (int32_t i = 0; i < n_vocab; i++) sum += det_exp_nonpos((double)logits[i] - mx);
    const double lse = mx + det_log_ge1(sum);
    if (logprob_out) *logprob_out = (float)((double)logits[token] - lse);
    if (k == 0) return MOR_OK;
    /* the k best: a min-heap of the logits, then sorted best first */
    for (int32_t i = 0; i < k; i++) { top_tokens[i] = i; top_logprobs[i] = logits[i]; }
    for (int32_t i = k / 2 - 1; i >= 0; i--) lp_sift(top_tokens, top_logprobs, k, i);
    for (int32_t i = k; i < n_vocab; i++)
        if (lp_below(top_logprobs[0], top_tokens[0], logits[i], i)) {
            top_tokens[0] = i;
            top_logprobs[0] = logits[i];
            lp_sift(top_tokens, top_logprobs, k, 0);
        }
    for (int32_t n = k - 1; n > 0; n--) {   /* the lowest-ranked to the end */
        float tl = top_logprobs[0]; top_logprobs[0] = top_logprobs[n]; top_logprobs[n] = tl;
        mor_token ti = top_tokens[0]; top_tokens[0] = top_tokens[n]; top_tokens[n] = ti;
        lp_sift(top_tokens, top_logprobs, n, 0);
    }
    for (int32_t i = 0; i < k; i++) top_logprobs[i] = (float)((double)top_logprobs[i] - lse);
    return MOR_OK;
}
