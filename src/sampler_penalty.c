/* sampler_penalty.c - the stages that move logits by what came before:
 * the logit bias, the penalties (repeat, frequency, presence: llama.cpp's
 * "penalties" sampler) and DRY (llama.cpp's "dry", from koboldcpp). They
 * work on candidates in any order, finding a token's count by its id. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdint.h>

#include "sampler_impl.h"

/* The i-th most recent token of the history (i < hist_len). */
mor_token sampler_hist_back(const mor_sampler *s, int32_t i)
{
    int32_t k = s->hist_pos - 1 - i;
    if (k < 0) k += s->hist_cap;
    return s->hist[k];
}

/* logit[id] += bias, in the list's order, for the ids below n_vocab; c is in
 * id order (before anything moved it). */
void sampler_apply_bias(const mor_sampler *s, sampler_cand *c, int32_t n_vocab)
{
    for (int32_t i = 0; i < s->n_bias; i++)
        if (s->bias_id[i] < n_vocab) c[s->bias_id[i]].l += s->bias[i];
}

int sampler_penalties_on(const mor_sampler *s)
{
    const mor_sampler_params *p = &s->p;
    return p->repeat_last_n > 0 && s->hist_len > 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

/* Each token seen c > 0 times among the last repeat_last_n: the repetition
 * penalty once (logit > 0 ? logit / penalty : logit * penalty, CTRL), then
 * logit -= c * frequency + presence. */
void stage_penalties(mor_sampler *s, sampler_cand *c, int32_t n, int32_t n_vocab)
{
    if (!sampler_penalties_on(s)) return;
    const int32_t last = s->hist_len < s->p.repeat_last_n ? s->hist_len : s->p.repeat_last_n;
    const double pen = (double)s->p.repeat_penalty, freq = (double)s->p.frequency_penalty,
                 pres = (double)s->p.presence_penalty;
    const int fp = freq != 0.0 || pres != 0.0;
    for (int32_t j = 0; j < last; j++) {
        mor_token t = sampler_hist_back(s, j);
        if (t >= 0 && t < n_vocab) s->cnt[t]++;
    }
    for (int32_t i = 0; i < n; i++) {
        const int32_t k = s->cnt[c[i].id];
        if (!k) continue;
        if (pen != 1.0) c[i].l = c[i].l > 0.0 ? c[i].l / pen : c[i].l * pen;
        if (fp) c[i].l -= (double)k * freq + pres;
    }
    for (int32_t j = 0; j < last; j++) {
        mor_token t = sampler_hist_back(s, j);
        if (t >= 0 && t < n_vocab) s->cnt[t] = 0;
    }
    s->w_ok = 0;
}

int sampler_dry_on(const mor_sampler *s)
{
    const mor_sampler_params *p = &s->p;
    return p->dry_multiplier != 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n > 0;
}

/* How far a repetition may reach back: the distance to the most recent
 * breaker (its head i tokens back, its tail the tokens after it), or m. */
static int32_t dry_rep_limit(const mor_sampler *s, int32_t m)
{
    for (int32_t i = 0; i < m; i++) {
        const mor_token t = sampler_hist_back(s, i);
        int32_t longest = -1;
        for (int32_t b = 0; b < s->n_brk; b++) {
            const mor_token *seq = s->brk + s->brk_off[b];
            const int32_t tail = s->brk_off[b + 1] - s->brk_off[b] - 1;
            if (seq[0] != t || tail <= longest || tail > i) continue;
            int32_t o = 0;
            while (o < tail && seq[1 + o] == sampler_hist_back(s, i - o - 1)) o++;
            if (o == tail) longest = tail;
        }
        if (longest >= 0) return i - longest;
    }
    return m;
}

/* rep[m - 1 - k], k in [1, m): the length of the longest match of the
 * history's end with the tokens ending k back, capped at lim (the
 * Z-algorithm over the reversed history; linear). */
static void dry_repeats(const mor_sampler *s, int32_t m, int32_t lim, int32_t *rep)
{
    const int32_t last = m - 1;
    int32_t lt = 0, rt = 0;
    for (int32_t k = 0; k < m; k++) rep[k] = 0;
    for (int32_t k = 1; k < m; k++) {
        if (k > rt) {
            int32_t n = 0;
            while (n + k < m && sampler_hist_back(s, n) == sampler_hist_back(s, n + k)) n++;
            rep[last - k] = n < lim ? n : lim;
            if (n > 0) { lt = k; rt = k + n - 1; }
        } else {
            const int32_t p = k - lt, right = rt - k + 1;
            if (rep[last - p] < right) {
                rep[last - k] = rep[last - p] < lim ? rep[last - p] : lim;
            } else {
                int32_t i = rt + 1;
                while (i < m && sampler_hist_back(s, i) == sampler_hist_back(s, i - k)) i++;
                rep[last - k] = i - k < lim ? i - k : lim;
                lt = k;
                rt = i - 1;
            }
        }
    }
}

static int dry_single_breaker(const mor_sampler *s, mor_token t)
{
    for (int32_t b = 0; b < s->n_brk; b++)
        if (s->brk[s->brk_off[b]] == t && s->brk_off[b + 1] - s->brk_off[b] == 1) return 1;
    return 0;
}

/* DRY: a token that would extend a repetition of length L >= allowed gets
 * logit -= multiplier * base^(L - allowed), the exponent capped where
 * base^e would pass FLT_MAX (as llama.cpp: 88.7228391 / ln base). */
void stage_dry(mor_sampler *s, sampler_cand *c, int32_t n, int32_t n_vocab)
{
    const mor_sampler_params *p = &s->p;
    if (!sampler_dry_on(s)) return;
    const int32_t m = s->hist_len < p->dry_penalty_last_n ? s->hist_len : p->dry_penalty_last_n;
    const int32_t allowed = p->dry_allowed_length;
    if (m <= allowed) return;
    const int32_t lim = dry_rep_limit(s, m);
    if (lim < allowed) return;
    dry_repeats(s, m, lim, s->dry_rep);
    /* cnt[t] = 1 + the longest repetition the token t would extend */
    for (int32_t i = 0; i < m - 1; i++) {
        const mor_token t = sampler_hist_back(s, m - 2 - i);
        if (s->dry_rep[i] >= allowed && t >= 0 && t < n_vocab && s->cnt[t] < s->dry_rep[i] + 1)
            s->cnt[t] = s->dry_rep[i] + 1;
    }
    const double base = (double)p->dry_base, mult = (double)p->dry_multiplier;
    int32_t max_exp = 0;
    if (p->dry_base > 1.000001f) max_exp = (int32_t)(88.7228391 / det_log(base));
    for (int32_t i = 0; i < n; i++) {
        const int32_t k = s->cnt[c[i].id];
        if (!k || dry_single_breaker(s, c[i].id)) continue;
        int32_t e = k - 1 - allowed;
        if (max_exp > 0 && e > max_exp) e = max_exp;
        double pw = 1.0;
        for (int32_t j = 0; j < e; j++) pw *= base;
        c[i].l -= mult * pw;
    }
    for (int32_t i = 0; i < m - 1; i++) {
        const mor_token t = sampler_hist_back(s, m - 2 - i);
        if (t >= 0 && t < n_vocab) s->cnt[t] = 0;
    }
    s->w_ok = 0;
}
