/* sampler.c - the token sampler of mor.h: its params, its lifetime, the
 * chain of stages and the seeded draw. The stages live in
 * sampler_penalty.c (logit bias, penalties, DRY), sampler_trunc.c
 * (temperature, top-k, top-p, min-p, typical, top-n-sigma, XTC) and
 * sampler_mirostat.c; the arithmetic in sampler_math.c; mor_logprobs in
 * sampler_logprobs.c. Each stage has llama.cpp's semantics (src/llama-
 * sampler.cpp, common/sampling.cpp), in this library's arithmetic.
 *
 * Determinism. The same params (seed included), the same history, the same
 * logit bias and breakers and the same logits give the same token on every
 * platform whose double arithmetic is IEEE-754 binary64 with
 * round-to-nearest and FLT_EVAL_METHOD == 0 (x86-64 SSE2, AArch64,
 * RISC-V, ...; not x87). To get there:
 *  - every computation after reading the logits is done in double with the
 *    basic operations (+ - * /, sqrt and compares) only, which IEEE-754
 *    rounds exactly; no other libm call is made (exp and log are our own,
 *    sampler_math.c), since libm's exp/log differ between libcs in the
 *    last bit;
 *  - floating-point contraction (fused multiply-add) is switched off for the
 *    module's files, so a compiler cannot round differently on FMA hardware;
 *  - subnormals are never produced (weights below e^-700 are 0), so a host
 *    that sets flush-to-zero (e.g. a -ffast-math program) sees the same values;
 *  - every sum is taken in an order fixed by this code, and every sort uses
 *    a total order (logit descending, then id ascending), so the result does
 *    not depend on the libc's qsort;
 *  - the PRNG is xoshiro256** seeded through splitmix64, with 53-bit
 *    uniforms; XTC and the draw take their numbers from the one stream.
 *
 * Semantics (the header leaves these open):
 *  - Logits must be finite or -inf (a banned token, never drawn). A NaN or
 *    +inf logit, or every logit -inf (or banned by the logit bias), is
 *    refused with MOR_E_INVALID_ARG before anything changes (history,
 *    PRNG): such logits come from broken weights or overflowed activations,
 *    and any token picked from them (token 0, say) would only hide that.
 *  - The penalties look at the last repeat_last_n tokens of the history
 *    (sampled and accepted) and penalise each distinct token among them
 *    once: logit > 0 ? logit / penalty : logit * penalty (CTRL, as in
 *    llama.cpp), then logit -= count * frequency + presence. History ids
 *    outside [0, n_vocab) are ignored.
 *  - top-k keeps the k highest logits (ties: lower ids first); top-p keeps the
 *    shortest prefix, in that order, whose probability reaches top_p (at least
 *    one token); min-p keeps p >= min_p * p_max. top-p uses the probabilities
 *    renormalised over what the stages before it kept; min-p is relative, so
 *    the order of top-p and min-p only matters through top-p's normalisation.
 *  - In the default order the temperature comes before the truncations (as
 *    this sampler always had it); an explicit order puts it where it is
 *    listed. Greedy (temperature <= 0) applies the bias, the penalties and
 *    DRY and takes the first maximum; the truncations cannot change it
 *    except typical-p and XTC, which greedy skips.
 *  - top-n-sigma removes the tokens below its floor (llama.cpp sets them to
 *    -inf, which no later stage but a count of candidates tells apart).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>   /* HUGE_VAL only */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "mor.h"
#include "sampler.h"
#include "sampler_impl.h"
#include "status.h"

static const int32_t default_order[] = {
    MOR_STAGE_PENALTIES, MOR_STAGE_DRY, MOR_STAGE_TOP_N_SIGMA, MOR_STAGE_TEMPERATURE, MOR_STAGE_TOP_K,
    MOR_STAGE_TYPICAL_P, MOR_STAGE_TOP_P, MOR_STAGE_MIN_P, MOR_STAGE_XTC,
};

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
    d->typical_p          = 1.0f;
    d->top_n_sigma        = -1.0f;
    d->dynatemp_exponent  = 1.0f;
    d->xtc_threshold      = 0.1f;
    d->mirostat_tau       = 5.0f;
    d->mirostat_eta       = 0.1f;
    d->dry_base           = 1.75f;
    d->dry_allowed_length = 2;
    d->dry_penalty_last_n = 64;
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

static mor_status bad_f(const char *field, const char *rule, float v)
{
    return err_set(MOR_E_INVALID_ARG, "mor_sampler_create: %s must be %s, got %g", field, rule, (double)v);
}

static mor_status bad_i(const char *field, const char *rule, int32_t v)
{
    return err_set(MOR_E_INVALID_ARG, "mor_sampler_create: %s must be %s, got %d", field, rule, (int)v);
}

/* The fields of libmor 0.1. */
static mor_status check_v1(const mor_sampler_params *p)
{
    if (!is_finite_f(p->temperature)) return bad_f("temperature", "a finite number (<= 0: greedy)", p->temperature);
    if (is_nan_f(p->top_p) || p->top_p <= 0.0f) return bad_f("top_p", "in (0, 1] (>= 1: off)", p->top_p);
    if (is_nan_f(p->min_p) || p->min_p > 1.0f) return bad_f("min_p", "in [0, 1] (<= 0: off)", p->min_p);
    if (!is_finite_f(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
        return bad_f("repeat_penalty", "finite and > 0 (1: off)", p->repeat_penalty);
    if (p->repeat_last_n < 0) return bad_i("repeat_last_n", ">= 0 (0: off)", p->repeat_last_n);
    return MOR_OK;
}

/* The fields of the llama.cpp sampling set. */
static mor_status check_v2(const mor_sampler_params *p)
{
    if (!is_finite_f(p->presence_penalty)) return bad_f("presence_penalty", "finite (0: off)", p->presence_penalty);
    if (!is_finite_f(p->frequency_penalty)) return bad_f("frequency_penalty", "finite (0: off)", p->frequency_penalty);
    if (p->min_keep < 0) return bad_i("min_keep", ">= 0", p->min_keep);
    if (is_nan_f(p->typical_p)) return bad_f("typical_p", "a number (>= 1: off)", p->typical_p);
    if (is_nan_f(p->top_n_sigma)) return bad_f("top_n_sigma", "a number (<= 0: off)", p->top_n_sigma);
    if (!is_finite_f(p->dynatemp_range)) return bad_f("dynatemp_range", "finite (<= 0: off)", p->dynatemp_range);
    if (!is_finite_f(p->dynatemp_exponent)) return bad_f("dynatemp_exponent", "finite", p->dynatemp_exponent);
    if (is_nan_f(p->xtc_probability)) return bad_f("xtc_probability", "a number (<= 0: off)", p->xtc_probability);
    if (is_nan_f(p->xtc_threshold)) return bad_f("xtc_threshold", "a number (> 0.5: off)", p->xtc_threshold);
    if (p->mirostat < 0 || p->mirostat > 2) return bad_i("mirostat", "0 (off), 1 or 2", p->mirostat);
    if (!is_finite_f(p->mirostat_tau)) return bad_f("mirostat_tau", "finite", p->mirostat_tau);
    if (!is_finite_f(p->mirostat_eta)) return bad_f("mirostat_eta", "finite", p->mirostat_eta);
    if (!is_finite_f(p->dry_multiplier)) return bad_f("dry_multiplier", "finite (0: off)", p->dry_multiplier);
    if (!is_finite_f(p->dry_base)) return bad_f("dry_base", "finite (< 1: off)", p->dry_base);
    if (p->dry_allowed_length < 0) return bad_i("dry_allowed_length", ">= 0", p->dry_allowed_length);
    if (p->dry_penalty_last_n < 0)
        return bad_i("dry_penalty_last_n", ">= 0 (0: off; llama.cpp's -1, the context, is the caller's to turn "
                     "into a count)", p->dry_penalty_last_n);
    if (p->n_samplers < 0 || p->n_samplers > MOR_SAMPLERS_MAX)
        return bad_i("n_samplers", "in [0, MOR_SAMPLERS_MAX] (0: the default order)", p->n_samplers);
    for (int32_t i = 0; i < p->n_samplers; i++)
        if (p->samplers[i] < MOR_STAGE_PENALTIES || p->samplers[i] > MOR_STAGE_TEMPERATURE)
            return err_set(MOR_E_INVALID_ARG, "mor_sampler_create: samplers[%d] must be a MOR_STAGE_* id "
                           "(%d..%d), got %d", (int)i, MOR_STAGE_PENALTIES, MOR_STAGE_TEMPERATURE, (int)p->samplers[i]);
    return MOR_OK;
}

/* Check `in` and copy it, completed with defaults, into *out. */
static mor_status sampler_params_get(const mor_sampler_params *in, mor_sampler_params *out)
{
    sampler_defaults(out);
    if (!in) return MOR_OK;
    /* the sizes of the two structs a header declared, none between them */
    if (in->size != sizeof(abi_sampler_params_v1) && in->size != sizeof *out)
        return err_set(MOR_E_ABI, "mor_sampler_params.size is %u; this libmor accepts %zu (its first release) or "
                       "%zu (set it with the _INIT macro of the header you compile with)", (unsigned)in->size,
                       sizeof(abi_sampler_params_v1), sizeof *out);
    mor_status st = abi_read(out, sizeof *out, in, sizeof(abi_sampler_params_v1), "mor_sampler_params");
    if (st) return st;
    st = check_v1(out);
    return st ? st : check_v2(out);
}

/* ------------------------------------------------------------------------ */
/* Sampler                                                                   */
/* ------------------------------------------------------------------------ */

static mor_status sampler_alloc(mor_sampler *s)
{
    const mor_sampler_params *p = &s->p;
    int32_t cap = p->repeat_last_n;
    if (sampler_dry_on(s) && p->dry_penalty_last_n > cap) cap = p->dry_penalty_last_n;
    if ((size_t)cap > SIZE_MAX / sizeof(mor_token) / 2)
        return err_set(MOR_E_NOMEM, "mor_sampler_create: a history of %d tokens is too large", (int)cap);
    s->hist_cap = cap;
    if (cap > 0 && !(s->hist = (mor_token *)malloc((size_t)cap * sizeof(mor_token))))
        return err_set(MOR_E_NOMEM, "mor_sampler_create: out of memory for a history of %d tokens", (int)cap);
    if (sampler_dry_on(s) && !(s->dry_rep = (int32_t *)malloc((size_t)p->dry_penalty_last_n * sizeof(int32_t))))
        return err_set(MOR_E_NOMEM, "mor_sampler_create: out of memory for DRY's %d tokens",
                       (int)p->dry_penalty_last_n);
    return MOR_OK;
}

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
    if ((st = sampler_alloc(s)) != MOR_OK) {
        mor_sampler_free(s);
        return st;
    }
    if (p.n_samplers > 0) {
        memcpy(s->order, p.samplers, sizeof(int32_t) * (size_t)p.n_samplers);
        s->n_order = p.n_samplers;
    } else {
        memcpy(s->order, default_order, sizeof default_order);
        s->n_order = (int32_t)(sizeof default_order / sizeof default_order[0]);
    }
    rng_seed(s->rng, p.seed);
    s->mu = 2.0 * (double)p.mirostat_tau;
    *out = s;
    return MOR_OK;
}

MOR_API void mor_sampler_free(mor_sampler *s)
{
    if (!s) return;
    free(s->hist);
    free(s->dry_rep);
    free(s->bias_id);
    free(s->bias);
    free(s->brk);
    free(s->brk_off);
    free(s->cand);
    free(s->cnt);
    free(s->tkey);
    free(s);
}

MOR_API void mor_sampler_accept(mor_sampler *s, mor_token token)
{
    if (!s || s->hist_cap <= 0) return;
    s->hist[s->hist_pos] = token;
    s->hist_pos = s->hist_pos + 1 == s->hist_cap ? 0 : s->hist_pos + 1;
    if (s->hist_len < s->hist_cap) s->hist_len++;
}

void sampler_save(const mor_sampler *s, sampler_state *st, mor_token *hist, int32_t n)
{
    memcpy(st->rng, s->rng, sizeof st->rng);
    st->mu = s->mu;
    st->hist_len = s->hist_len; st->hist_pos = s->hist_pos;
    for (int32_t i = 0, k = s->hist_pos; i < n && s->hist_cap > 0; i++) {
        hist[i] = s->hist[k];
        k = k + 1 == s->hist_cap ? 0 : k + 1;
    }
}

void sampler_restore(mor_sampler *s, const sampler_state *st, const mor_token *hist, int32_t n)
{
    memcpy(s->rng, st->rng, sizeof st->rng);
    s->mu = st->mu;
    s->hist_len = st->hist_len; s->hist_pos = st->hist_pos;
    for (int32_t i = 0, k = s->hist_pos; i < n && s->hist_cap > 0; i++) {
        s->hist[k] = hist[i];
        k = k + 1 == s->hist_cap ? 0 : k + 1;
    }
}

MOR_API void mor_sampler_reset(mor_sampler *s)
{
    if (!s) return;
    s->hist_len = 0;
    s->hist_pos = 0;
    s->mu = 2.0 * (double)s->p.mirostat_tau;
    rng_seed(s->rng, s->p.seed);
}

MOR_API mor_status mor_sampler_set_logit_bias(mor_sampler *s, const mor_token *ids, const float *bias, int32_t n)
{
    err_clear();
    if (!s || n < 0 || (n > 0 && (!ids || !bias)))
        return err_set(MOR_E_INVALID_ARG, "mor_sampler_set_logit_bias: NULL sampler or arrays, or n < 0");
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0)
            return err_set(MOR_E_OUT_OF_RANGE, "mor_sampler_set_logit_bias: ids[%d] is %d", (int)i, (int)ids[i]);
        if (bias[i] != bias[i] || bias[i] == HUGE_VAL)
            return err_set(MOR_E_INVALID_ARG, "mor_sampler_set_logit_bias: bias[%d] (token %d) must be a number "
                           "below +inf (-inf bans), got %g", (int)i, (int)ids[i], (double)bias[i]);
    }
    mor_token *ni = n ? (mor_token *)malloc(sizeof(mor_token) * (size_t)n) : NULL;
    double *nb = n ? (double *)malloc(sizeof(double) * (size_t)n) : NULL;
    if (n && (!ni || !nb)) {
        free(ni);
        free(nb);
        return err_set(MOR_E_NOMEM, "mor_sampler_set_logit_bias: out of memory for %d entries", (int)n);
    }
    for (int32_t i = 0; i < n; i++) { ni[i] = ids[i]; nb[i] = (double)bias[i]; }
    free(s->bias_id);
    free(s->bias);
    s->bias_id = ni; s->bias = nb; s->n_bias = n;
    return MOR_OK;
}

MOR_API mor_status mor_sampler_set_dry_breakers(mor_sampler *s, const mor_token *tokens, const int32_t *lens,
                                                int32_t n)
{
    err_clear();
    if (!s || n < 0 || (n > 0 && (!tokens || !lens)))
        return err_set(MOR_E_INVALID_ARG, "mor_sampler_set_dry_breakers: NULL sampler or arrays, or n < 0");
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (lens[i] < 1)
            return err_set(MOR_E_INVALID_ARG, "mor_sampler_set_dry_breakers: lens[%d] must be >= 1, got %d",
                           (int)i, (int)lens[i]);
        total += lens[i];
    }
    if (total > INT32_MAX / 2) return err_set(MOR_E_NOMEM, "mor_sampler_set_dry_breakers: too many tokens");
    mor_token *nt = n ? (mor_token *)malloc(sizeof(mor_token) * (size_t)total) : NULL;
    int32_t *no = n ? (int32_t *)malloc(sizeof(int32_t) * ((size_t)n + 1)) : NULL;
    if (n && (!nt || !no)) {
        free(nt);
        free(no);
        return err_set(MOR_E_NOMEM, "mor_sampler_set_dry_breakers: out of memory for %d breakers", (int)n);
    }
    if (n) {
        memcpy(nt, tokens, sizeof(mor_token) * (size_t)total);
        no[0] = 0;
        for (int32_t i = 0; i < n; i++) no[i + 1] = no[i] + lens[i];
    }
    free(s->brk);
    free(s->brk_off);
    s->brk = nt; s->brk_off = no; s->n_brk = n;
    return MOR_OK;
}

/* Make room for n_vocab candidates. Nothing changes on failure. */
mor_status sampler_reserve(mor_sampler *s, int32_t n)
{
    if (n <= s->cap) return MOR_OK;
    if ((size_t)n > SIZE_MAX / sizeof(sampler_tkey))
        return err_set(MOR_E_NOMEM, "mor_sampler_sample: n_vocab %d is too large", (int)n);
    const int typical = s->p.typical_p < 1.0f;
    sampler_cand *c = (sampler_cand *)malloc((size_t)n * sizeof(*c));
    int32_t *k = (int32_t *)calloc((size_t)n, sizeof(int32_t));
    sampler_tkey *t = typical ? (sampler_tkey *)malloc((size_t)n * sizeof(*t)) : NULL;
    if (!c || !k || (typical && !t)) {
        free(c);
        free(k);
        free(t);
        return err_set(MOR_E_NOMEM, "mor_sampler_sample: out of memory for n_vocab %d", (int)n);
    }
    free(s->cand);
    free(s->cnt);
    free(s->tkey);
    s->cand = c;
    s->cnt = k;
    s->tkey = t;
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

/* MOR_OK when a token of finite logit is left after the logit bias (the
 * logits are checked); cnt[] is used and left all 0. */
mor_status sampler_check_bias(mor_sampler *s, const float *logits, int32_t n)
{
    int banning = 0;
    for (int32_t i = 0; i < s->n_bias; i++) banning |= s->bias[i] == -HUGE_VAL && s->bias_id[i] < n;
    if (!banning) return MOR_OK;
    for (int32_t i = 0; i < s->n_bias; i++)
        if (s->bias[i] == -HUGE_VAL && s->bias_id[i] < n) s->cnt[s->bias_id[i]] = 1;
    int32_t left = 0;
    for (int32_t i = 0; i < n && !left; i++) left = logits[i] > -HUGE_VAL && !s->cnt[i];
    for (int32_t i = 0; i < s->n_bias; i++)
        if (s->bias_id[i] < n) s->cnt[s->bias_id[i]] = 0;
    if (!left) return err_set(MOR_E_INVALID_ARG, "mor_sampler_sample: the logit bias bans every token whose logit is "
                              "not -inf: no token can be drawn");
    return MOR_OK;
}

int32_t sampler_argmax(const float *v, int32_t n)
{
    float best = v[0];
    int32_t tok = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > best) { best = v[i]; tok = i; }
    return tok;
}

/* Draw by weight over c[0..n) (n >= 1, a weight > 0 among them): the index. */
int32_t sampler_draw(mor_sampler *s, const sampler_cand *c, int32_t n)
{
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) z += c[i].w;
    const double target = rng_uniform(s->rng) * z;
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].w <= 0.0) continue;
        cum += c[i].w;
        last = i;
        if (cum > target) return i;
    }
    return last;   /* rounding put target at the very top */
}

/* The stages that work on the whole vocabulary by id: greedy's, and the
 * first of the chain's. */
static void sampler_load(mor_sampler *s, const float *logits, int32_t n_vocab)
{
    sampler_cand *c = s->cand;
    for (int32_t i = 0; i < n_vocab; i++) {
        c[i].l = (double)logits[i];
        c[i].w = 0.0;
        c[i].id = i;
    }
    sampler_apply_bias(s, c, n_vocab);
}

static mor_token sampler_greedy(mor_sampler *s, int32_t n_vocab)
{
    sampler_cand *c = s->cand;
    for (int32_t j = 0; j < s->n_order; j++) {
        if (s->order[j] == MOR_STAGE_PENALTIES) stage_penalties(s, c, n_vocab, n_vocab);
        if (s->order[j] == MOR_STAGE_DRY) stage_dry(s, c, n_vocab, n_vocab);
    }
    /* the first maximum in id order (a finite logit is left) */
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (c[i].l > c[best].l) best = i;
    return best;
}

static int32_t sampler_stage(mor_sampler *s, int32_t j, sampler_cand *c, int32_t n, int32_t n_vocab)
{
    switch (s->order[j]) {
    case MOR_STAGE_PENALTIES:   stage_penalties(s, c, n, n_vocab); return n;
    case MOR_STAGE_DRY:         stage_dry(s, c, n, n_vocab); return n;
    case MOR_STAGE_TOP_N_SIGMA: return stage_top_n_sigma(s, c, n);
    case MOR_STAGE_TOP_K:       return stage_top_k(s, c, n);
    case MOR_STAGE_TYPICAL_P:   return stage_typical(s, c, n);
    case MOR_STAGE_MIN_P:       return stage_min_p(s, c, n);
    case MOR_STAGE_XTC:         return stage_xtc(s, c, n);
    case MOR_STAGE_TEMPERATURE: return stage_temperature(s, c, n);
    default:                    return n;
    }
}

/* The stages in order over the loaded candidates: how many are left. */
static int32_t sampler_stages(mor_sampler *s, int32_t n_vocab)
{
    sampler_cand *c = s->cand;
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++)   /* what can be drawn, in id order */
        if (c[i].l > -HUGE_VAL) c[n++] = c[i];
    s->T = 1.0;
    s->w_ok = 0;
    for (int32_t j = 0; j < s->n_order; j++) {
        if (s->order[j] == MOR_STAGE_TOP_P) {
            /* top-p then min-p: one pass (stage_top_p), the same result */
            const int fuse = j + 1 < s->n_order && s->order[j + 1] == MOR_STAGE_MIN_P && s->p.top_p < 1.0f &&
                             s->p.min_p > 0.0f && s->p.min_keep <= 1;
            n = stage_top_p(s, c, n, fuse);
            j += fuse;
        } else {
            n = sampler_stage(s, j, c, n, n_vocab);
        }
    }
    cand_weights(s, c, n);
    return n;
}

static mor_token sampler_chain(mor_sampler *s, int32_t n_vocab)
{
    if (s->p.mirostat) {
        sampler_cand *c = s->cand;
        int32_t n = 0;
        for (int32_t i = 0; i < n_vocab; i++)
            if (c[i].l > -HUGE_VAL) c[n++] = c[i];
        return sampler_mirostat(s, c, n, n_vocab);
    }
    const int32_t n = sampler_stages(s, n_vocab);
    return s->cand[sampler_draw(s, s->cand, n)].id;
}

int32_t sampler_candidates(mor_sampler *s, const float *logits, int32_t n_vocab)
{
    if (sampler_check_logits(logits, n_vocab) || sampler_reserve(s, n_vocab) || sampler_check_bias(s, logits, n_vocab))
        return -1;
    sampler_load(s, logits, n_vocab);
    return sampler_stages(s, n_vocab);
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
    if (st == MOR_OK) st = sampler_check_bias(s, logits, n_vocab);
    if (st != MOR_OK) return st;

    if (s->p.temperature <= 0.0f && !s->n_bias && !sampler_penalties_on(s) && !sampler_dry_on(s)) {
        /* greedy without a bias or penalty: the first maximum, found on
         * the floats themselves, without loading the candidates (a large
         * share of a small model's step) */
        tok = sampler_argmax(logits, n_vocab);
    } else {
        sampler_load(s, logits, n_vocab);
        tok = s->p.temperature <= 0.0f ? sampler_greedy(s, n_vocab) : sampler_chain(s, n_vocab);
    }
    mor_sampler_accept(s, tok);
    *out = tok;
    return MOR_OK;
}
