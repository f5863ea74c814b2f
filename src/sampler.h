/* sampler.h - the sampler's internals that the server reaches (serve.c). */
#ifndef MOR_SAMPLER_H
#define MOR_SAMPLER_H
#include "mor.h"

/* Make room for n candidates now, so that a later mor_sampler_sample over n
 * logits cannot fail (a server step samples only after nothing else can
 * fail). Nothing changes on failure (MOR_E_NOMEM). */
mor_status sampler_reserve(mor_sampler *s, int32_t n);
/* MOR_OK when mor_sampler_sample can draw from logits[0..n): none NaN or
 * +inf, not all -inf; else MOR_E_INVALID_ARG with a message. The server
 * checks every request's logits with it before its step publishes anything. */
mor_status sampler_check_logits(const float *logits, int32_t n);
/* MOR_OK when the sampler's logit bias leaves a token of finite logit among
 * logits[0..n) (checked by sampler_check_logits, candidates reserved); else
 * MOR_E_INVALID_ARG with a message. Changes nothing. */
mor_status sampler_check_bias(mor_sampler *s, const float *logits, int32_t n);
/* The first maximum of v[0..n) (ties: the lowest id): greedy sampling's
 * token (widening to double, as the sampler's candidates do, keeps the
 * order). */
int32_t    sampler_argmax(const float *v, int32_t n);

/* Draws taken back (speculate.c samples its drafts with the caller's
 * sampler, so that a draft uses the random number the real draw at that
 * position will use): sampler_save before at most n draws, keeping the n
 * history entries they may overwrite in hist[n]; sampler_restore puts the
 * sampler back as it was (PRNG, history, mirostat's mu). */
typedef struct { uint64_t rng[4]; double mu; int32_t hist_len, hist_pos; } sampler_state;
void sampler_save(const mor_sampler *s, sampler_state *st, mor_token *hist, int32_t n);
void sampler_restore(mor_sampler *s, const sampler_state *st, const mor_token *hist, int32_t n);
#endif
