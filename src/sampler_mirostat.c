/* sampler_mirostat.c - Mirostat 1 and 2 (Basu et al. 2020, as llama.cpp's
 * "mirostat" and "mirostat-v2" samplers): a truncation steered so that the
 * surprise -log2 p of the drawn tokens tracks tau, through the state mu
 * (2 tau at the start and after mor_sampler_reset). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdint.h>

#include "sampler_impl.h"

static const double LN2 = 6.93147180559945309417e-01;

/* Mirostat 1's k: Zipf's exponent s estimated from the m = 100 most likely
 * tokens, k = (eps 2^mu / (1 - V^-eps))^(1 / s), eps = s - 1, in [1, n]. */
static int32_t mirostat1_k(const mor_sampler *s, const sampler_cand *c, int32_t n, int32_t n_vocab)
{
    double sum_tb = 0.0, sum_tt = 0.0;
    for (int32_t i = 0; i < 99 && i < n - 1; i++) {
        const double t = det_log((double)(i + 2) / (double)(i + 1));
        const double b = det_log(c[i].w / c[i + 1].w);
        sum_tb += t * b;
        sum_tt += t * t;
    }
    if (n < 2) return 1;
    const double sh = sum_tb / sum_tt, eps = sh - 1.0;
    const double x = eps * det_exp(s->mu * LN2) / (1.0 - det_exp(-eps * det_log((double)n_vocab)));
    if (!(x > 0.0) || sh == 0.0) return 1;
    const double k = det_exp(det_log(x) / sh);
    if (!(k >= 1.0)) return 1;
    return k >= (double)n ? n : (int32_t)k;
}

mor_token sampler_mirostat(mor_sampler *s, sampler_cand *c, int32_t n, int32_t n_vocab)
{
    s->T = (double)s->p.temperature;
    s->w_ok = 0;
    cand_sort(c, n);
    cand_weights(s, c, n);
    while (n > 1 && !(c[n - 1].w > 0.0)) n--;   /* weights below e^-700: never drawn */
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) z += c[i].w;
    int32_t k;
    if (s->p.mirostat == 1) {
        k = mirostat1_k(s, c, n, n_vocab);
    } else {   /* the tokens of surprise <= mu, at least one */
        k = 1;
        while (k < n && -det_log(c[k].w / z) / LN2 <= s->mu) k++;
    }
    double zk = 0.0;
    for (int32_t i = 0; i < k; i++) zk += c[i].w;
    const int32_t idx = sampler_draw(s, c, k);
    const double surprise = -det_log(c[idx].w / zk) / LN2;
    s->mu -= (double)s->p.mirostat_eta * (surprise - (double)s->p.mirostat_tau);
    return c[idx].id;
}
