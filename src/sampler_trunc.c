/* sampler_trunc.c - the temperature (with llama.cpp's dynamic temperature)
 * and the truncations: top-k, top-p, min-p, locally typical, top-n-sigma,
 * XTC. Each takes the candidates c[0..n), n >= 1, and returns how many it
 * keeps (>= 1) at the front of c. The weights (cand_weights) are computed
 * when a stage needs them and stay valid while no logit, no temperature
 * and not the top candidate changes. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>   /* HUGE_VAL; sqrt, which IEEE-754 rounds exactly */
#include <stdint.h>
#include <stdlib.h>

#include "sampler_impl.h"

static void swap_c(sampler_cand *a, sampler_cand *b) { sampler_cand t = *a; *a = *b; *b = t; }

/* The first candidate in the candidates' order alone. */
static int32_t keep_best(sampler_cand *c, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (cand_before(&c[i], &c[b])) b = i;
    swap_c(&c[0], &c[b]);
    return 1;
}

/* Entropy -sum p log p of the candidates' probabilities (in their order). */
static double entropy(const sampler_cand *c, int32_t n, double z)
{
    double h = 0.0;
    for (int32_t i = 0; i < n; i++) {
        const double p = c[i].w / z;
        if (p > 0.0) h -= p * det_log(p);
    }
    return h;
}

/* The temperature: divides the logits by T (the weights then use l / T),
 * or, with dynatemp_range > 0 (and two candidates or more), by
 * max(0, T - range) + 2 range (H / log n)^exponent, H the entropy of the
 * candidates' probabilities so far. A temperature <= 0 here keeps the best
 * candidate alone. */
int32_t stage_temperature(mor_sampler *s, sampler_cand *c, int32_t n)
{
    const mor_sampler_params *p = &s->p;
    double t = (double)p->temperature;
    if (p->dynatemp_range > 0.0f) {
        if (n <= 1) return n;
        const double lo = t - (double)p->dynatemp_range > 0.0 ? t - (double)p->dynatemp_range : 0.0;
        const double hi = t + (double)p->dynatemp_range;
        cand_weights(s, c, n);
        double z = 0.0;
        for (int32_t i = 0; i < n; i++) z += c[i].w;
        const double h = entropy(c, n, z) / det_log((double)n);
        t = lo + (hi - lo) * det_pow(h, (double)p->dynatemp_exponent);
    }
    if (!(t > 0.0)) return keep_best(c, n);
    s->T *= t;
    s->w_ok = 0;
    return n;
}

int32_t stage_top_k(mor_sampler *s, sampler_cand *c, int32_t n)
{
    const int32_t k = s->p.top_k;
    if (k <= 0 || k >= n) return n;
    cand_select(c, n, k);
    return k;
}

/* min-p: w >= min_p * w_max, and w_max is 1; at least min_keep (the best). */
static int32_t min_p_cut(mor_sampler *s, sampler_cand *c, int32_t n)
{
    const double mp = (double)s->p.min_p;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].w >= mp) swap_c(&c[m++], &c[i]);
    if (m >= s->p.min_keep || m == n) return m;
    cand_sort(c, n);
    return s->p.min_keep < n ? s->p.min_keep : n;
}

int32_t stage_min_p(mor_sampler *s, sampler_cand *c, int32_t n)
{
    if (s->p.min_p <= 0.0f) return n;
    cand_weights(s, c, n);
    return min_p_cut(s, c, n);
}

/* top-p: the shortest prefix in the candidates' order whose probability
 * reaches top_p, and at least min_keep. With fuse_min_p (min-p comes next,
 * min_keep <= 1), min-p is applied first to what needs sorting: its set is
 * a prefix of the same order, so the result is the same, only faster. */
int32_t stage_top_p(mor_sampler *s, sampler_cand *c, int32_t n, int fuse_min_p)
{
    if (s->p.top_p >= 1.0f) return n;
    cand_weights(s, c, n);
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) z += c[i].w;
    if (fuse_min_p) n = min_p_cut(s, c, n);
    cand_sort(c, n);
    const double target = (double)s->p.top_p * z;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].w;
        if (cum >= target && i + 1 >= s->p.min_keep) return i + 1;
    }
    return n;
}

static int tkey_cmp(const void *pa, const void *pb)
{
    const sampler_tkey *a = (const sampler_tkey *)pa, *b = (const sampler_tkey *)pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

/* Locally typical sampling: the candidates in order of |-log p - H| (ties:
 * the candidates' order), up to the first where their probability passes
 * typical_p, and at least min_keep. The kept ones stay in that order. */
int32_t stage_typical(mor_sampler *s, sampler_cand *c, int32_t n)
{
    if (s->p.typical_p >= 1.0f) return n;
    cand_sort(c, n);
    cand_weights(s, c, n);
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) z += c[i].w;
    const double h = entropy(c, n, z);
    sampler_tkey *k = s->tkey;
    for (int32_t i = 0; i < n; i++) {
        k[i].p = c[i].w / z;
        k[i].key = k[i].p > 0.0 ? -det_log(k[i].p) - h : HUGE_VAL;
        if (k[i].key < 0.0) k[i].key = -k[i].key;
        k[i].rank = i;
        k[i].c = c[i];
    }
    qsort(k, (size_t)n, sizeof *k, tkey_cmp);
    const double tp = (double)s->p.typical_p;
    const int32_t mk = s->p.min_keep;
    int32_t m = n;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += k[i].p;
        if (cum > tp && (mk == 0 || i >= mk - 1)) { m = i + 1; break; }
    }
    for (int32_t i = 0; i < m; i++) c[i] = k[i].c;
    s->w_ok = 0;   /* the best candidate may be gone */
    return m;
}

/* top-n-sigma: keep l >= l_max - n * sigma, sigma the standard deviation of
 * the candidates' logits (a scale-free rule: the temperature's place does
 * not change it). */
int32_t stage_top_n_sigma(mor_sampler *s, sampler_cand *c, int32_t n)
{
    if (!(s->p.top_n_sigma > 0.0f) || n <= 1) return n;
    double mx = c[0].l, sum = 0.0, acc = 0.0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].l > mx) mx = c[i].l;
        sum += c[i].l;
    }
    const double mean = sum / (double)n;
    for (int32_t i = 0; i < n; i++) acc += (c[i].l - mean) * (c[i].l - mean);
    const double floor_l = mx - (double)s->p.top_n_sigma * sqrt(acc / (double)n);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (!(c[i].l < floor_l)) swap_c(&c[m++], &c[i]);
    return m;
}

/* XTC: with probability xtc_probability (one PRNG draw, taken only when
 * the stage is on and there are two candidates or more), drop the tokens of
 * probability >= xtc_threshold except the least likely of them, if that
 * leaves min_keep. */
int32_t stage_xtc(mor_sampler *s, sampler_cand *c, int32_t n)
{
    const mor_sampler_params *p = &s->p;
    if (p->xtc_probability <= 0.0f || p->xtc_threshold > 0.5f || n < 2) return n;
    if (rng_uniform(s->rng) > (double)p->xtc_probability) return n;
    cand_sort(c, n);
    cand_weights(s, c, n);
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) z += c[i].w;
    const double thr = (double)p->xtc_threshold;
    int32_t last = 0;
    for (int32_t i = 0; i < n && c[i].w / z >= thr; i++) last = i;
    if (last == 0 || n - last < p->min_keep) return n;
    for (int32_t i = last; i < n; i++) c[i - last] = c[i];
    s->w_ok = 0;
    return n - last;
}
