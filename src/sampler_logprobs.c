/* sampler_logprobs.c - mor_logprobs: the log-softmax of logits and their k
 * most likely tokens, with the sampler's arithmetic (the same bits on every
 * platform: double, + - * / only, no FMA contraction; see sampler.c). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>   /* HUGE_VAL only */
#include <stdint.h>

#include "mor.h"
#include "sampler_impl.h"
#include "status.h"

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
    const double lse = mx + det_log(sum);
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
