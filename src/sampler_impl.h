/* sampler_impl.h - the sampler's state and its stages, shared by the files
 * of the sampler module (sampler.c: params, lifetime, the chain and the
 * draw; sampler_math.c: the PRNG, exp and log, the candidates' order;
 * sampler_penalty.c: logit bias, penalties, DRY; sampler_trunc.c:
 * temperature and the truncations; sampler_mirostat.c). Not for the rest of
 * the library (serve.c and speculate.c use sampler.h).
 *
 * Every file of the module is compiled without floating-point contraction
 * and computes in double with + - * / and sqrt only (see sampler.c). */
#ifndef MOR_SAMPLER_IMPL_H
#define MOR_SAMPLER_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include "mor.h"

typedef struct {
    double  l;   /* the logit after the stages so far; finite */
    double  w;   /* exp((l - l_max) / T) when the weights are valid, in [0, 1] */
    int32_t id;
} sampler_cand;

/* typical-p's sort key: the distance of a candidate's surprise to the
 * entropy, its probability and its rank in the candidates' order */
typedef struct {
    double       key, p;
    int32_t      rank;
    sampler_cand c;
} sampler_tkey;

struct mor_sampler {
    mor_sampler_params p;      /* validated copy, every field set */
    uint64_t      rng[4];      /* xoshiro256** state */
    double        mu;          /* mirostat's state */
    mor_token    *hist;        /* ring of the last hist_cap tokens */
    int32_t       hist_cap;    /* max(repeat_last_n, DRY's window when DRY is on) */
    int32_t       hist_len;    /* tokens held, <= hist_cap */
    int32_t       hist_pos;    /* where the next one goes */
    int32_t       order[MOR_SAMPLERS_MAX], n_order;   /* the stages */
    mor_token    *bias_id;     /* logit bias [n_bias] */
    double       *bias;
    int32_t       n_bias;
    mor_token    *brk;         /* DRY breakers: breaker i is brk[brk_off[i] .. brk_off[i + 1]) */
    int32_t      *brk_off;     /* [n_brk + 1] */
    int32_t       n_brk;
    int32_t      *dry_rep;     /* [dry_penalty_last_n] when DRY is on */
    sampler_cand *cand;        /* scratch [cap] */
    int32_t      *cnt;         /* scratch [cap], all 0 between calls (penalties, DRY) */
    sampler_tkey *tkey;        /* scratch [cap] when typical-p is on */
    int32_t       cap;
    /* during one sample */
    double        T;           /* the temperature applied so far (1: none) */
    int           w_ok;        /* cand[].w are valid for l and T */
};

/* sampler_math.c */
void     rng_seed(uint64_t s[4], uint64_t seed);
double   rng_uniform(uint64_t s[4]);       /* [0, 1), 53 bits */
double   det_exp_nonpos(double x);          /* exp(x), x <= 0; 0 below -700 */
double   det_exp(double x);                 /* exp(x), any x; +inf above 709 */
double   det_log(double x);                 /* log(x), x > 0 finite */
double   det_pow(double x, double y);       /* x^y, x >= 0 */
int      cand_before(const sampler_cand *a, const sampler_cand *b);   /* logit desc, then id asc */
void     cand_sort(sampler_cand *c, int32_t n);
void     cand_select(sampler_cand *c, int32_t n, int32_t k);          /* the k first, unordered */
/* c[i].w = exp((l - max l) / s->T) over c[0..n) unless already valid. */
void     cand_weights(mor_sampler *s, sampler_cand *c, int32_t n);

/* sampler_penalty.c: on candidates of any order (by id). */
void     sampler_apply_bias(const mor_sampler *s, sampler_cand *c, int32_t n_vocab);
int      sampler_penalties_on(const mor_sampler *s);
int      sampler_dry_on(const mor_sampler *s);
void     stage_penalties(mor_sampler *s, sampler_cand *c, int32_t n, int32_t n_vocab);
void     stage_dry(mor_sampler *s, sampler_cand *c, int32_t n, int32_t n_vocab);
mor_token sampler_hist_back(const mor_sampler *s, int32_t i);   /* i-th most recent token */

/* sampler_trunc.c: each returns the candidates kept, >= 1. */
int32_t  stage_temperature(mor_sampler *s, sampler_cand *c, int32_t n);
int32_t  stage_top_k(mor_sampler *s, sampler_cand *c, int32_t n);
int32_t  stage_top_p(mor_sampler *s, sampler_cand *c, int32_t n, int fuse_min_p);
int32_t  stage_min_p(mor_sampler *s, sampler_cand *c, int32_t n);
int32_t  stage_typical(mor_sampler *s, sampler_cand *c, int32_t n);
int32_t  stage_top_n_sigma(mor_sampler *s, sampler_cand *c, int32_t n);
int32_t  stage_xtc(mor_sampler *s, sampler_cand *c, int32_t n);

/* sampler_mirostat.c: the token of mirostat 1 or 2 over c[0..n) (at the
 * params' temperature), mu updated. */
mor_token sampler_mirostat(mor_sampler *s, sampler_cand *c, int32_t n, int32_t n_vocab);

/* sampler.c: the index in c[0..n) of a draw by weight (one PRNG draw). */
int32_t  sampler_draw(mor_sampler *s, const sampler_cand *c, int32_t n);
/* For the tests: the stages of a sample at temperature > 0 without
 * mirostat, without the draw (XTC may take its PRNG draw): s->cand[0..n)
 * with valid weights, n returned; -1 when the logits cannot be sampled.
 * Adds nothing to the history. */
int32_t  sampler_candidates(mor_sampler *s, const float *logits, int32_t n_vocab);
#endif
