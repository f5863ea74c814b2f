/* fuzz_sampler.c - any bytes as a sampler's whole input: its params (every
 * field of mor_sampler_params, the order of the stages), logit bias, DRY
 * breakers, history (ids in and out of the vocabulary) and logits (finite,
 * -inf, NaN). Checks: a refused create or setter has a message and writes
 * nothing; a sample is a token of finite logit not banned by the bias, or a
 * refusal (a NaN or +inf logit, nothing left after -inf logits and bans)
 * that changes nothing; the same inputs give the same tokens twice, and
 * mor_sampler_reset gives the fresh sampler's tokens again. */
#include <math.h>
#include "fuzz.h"
#include "mor.h"

FUZZ_TARGET(sampler)

typedef struct { const uint8_t *p; size_t n, at; } rd;

static unsigned byte(rd *r) { return r->at < r->n ? r->p[r->at++] : 0; }
static float real(rd *r, float lo, float step) { return lo + (float)byte(r) * step; }

static void read_params(rd *r, mor_sampler_params *p)
{
    MOR_SAMPLER_PARAMS_INIT(p);
    for (int i = 0; i < 8; i++) p->seed = p->seed << 8 | byte(r);
    p->temperature = real(r, -0.5f, 1.0f / 64);
    p->top_k = (int32_t)byte(r) % 50;
    p->top_p = real(r, 1.0f / 256, 1.0f / 256);
    p->min_p = real(r, 0, 1.0f / 512);
    p->repeat_penalty = real(r, 0.5f, 1.0f / 128);
    p->repeat_last_n = (int32_t)byte(r) % 80;
    p->presence_penalty = real(r, -2, 1.0f / 64);
    p->frequency_penalty = real(r, -2, 1.0f / 64);
    p->min_keep = (int32_t)byte(r) % 8;
    p->typical_p = real(r, 0, 1.0f / 200);
    p->top_n_sigma = real(r, -1, 1.0f / 32);
    p->dynatemp_range = real(r, -0.5f, 1.0f / 128);
    p->dynatemp_exponent = real(r, -1, 1.0f / 32);
    p->xtc_probability = real(r, 0, 1.0f / 200);
    p->xtc_threshold = real(r, 0, 1.0f / 400);
    unsigned m = byte(r);
    p->mirostat = m < 200 ? 0 : (int32_t)(m % 4);   /* 3: refused */
    p->mirostat_tau = real(r, 0, 1.0f / 20);
    p->mirostat_eta = real(r, 0, 1.0f / 256);
    unsigned d = byte(r);
    p->dry_multiplier = d < 128 ? 0.0f : (float)(d - 128) / 32;
    p->dry_base = real(r, 0.5f, 1.0f / 64);
    p->dry_allowed_length = (int32_t)byte(r) % 6;
    p->dry_penalty_last_n = (int32_t)byte(r) % 120;
    p->n_samplers = (int32_t)(byte(r) % 18) - 1;   /* -1, 17: refused */
    for (int i = 0; i < MOR_SAMPLERS_MAX; i++) p->samplers[i] = (int32_t)(byte(r) % 10);   /* 0: refused */
}

typedef struct {
    mor_token bias_id[8], brk[24], hist[256];
    float     bias[8];
    int32_t   brk_len[8];
    int32_t   n_bias, n_brk, n_hist, n_vocab;
    float     logits[300];
} inputs;

static void read_inputs(rd *r, inputs *in)
{
    in->n_bias = (int32_t)(byte(r) % 8);
    for (int i = 0; i < in->n_bias; i++) {
        in->bias_id[i] = (mor_token)byte(r);
        unsigned b = byte(r);
        in->bias[i] = b == 255 ? -INFINITY : (float)((int)b - 128) / 8;
    }
    in->n_brk = (int32_t)(byte(r) % 8);
    for (int i = 0, at = 0; i < in->n_brk; i++) {
        in->brk_len[i] = 1 + (int32_t)(byte(r) % 3);
        for (int k = 0; k < in->brk_len[i]; k++) in->brk[at++] = (mor_token)(byte(r) % 40);
    }
    in->n_vocab = 1 + (int32_t)((byte(r) << 8 | byte(r)) % 300);
    for (int i = 0; i < in->n_vocab; i++) {
        unsigned b = byte(r);
        in->logits[i] = b == 255 ? -INFINITY : b == 254 ? NAN : (float)((int)b - 128) / 16;
    }
    in->n_hist = 0;
    while (r->at < r->n && in->n_hist < 256) in->hist[in->n_hist++] = (mor_token)(byte(r) % 64) - 2;
}

/* A sampler of these inputs (NULL when refused, with a message). */
static mor_sampler *make(const mor_sampler_params *p, const inputs *in)
{
    mor_sampler *s = (mor_sampler *)(uintptr_t)1;
    mor_status st = mor_sampler_create(p, &s);
    if (st) {
        FUZZ_ASSERT(s == (mor_sampler *)(uintptr_t)1 && mor_last_error()[0], "a refused create wrote out or said nothing");
        return NULL;
    }
    FUZZ_ASSERT(mor_sampler_set_logit_bias(s, in->bias_id, in->bias, in->n_bias) == MOR_OK, "%s", mor_last_error());
    FUZZ_ASSERT(mor_sampler_set_dry_breakers(s, in->brk, in->brk_len, in->n_brk) == MOR_OK, "%s", mor_last_error());
    for (int i = 0; i < in->n_hist; i++) mor_sampler_accept(s, in->hist[i]);
    return s;
}

/* Eight samples (each a token the bias leaves, or a refusal); returns the
 * tokens in out (a refusal: -1). */
static void draws(mor_sampler *s, const inputs *in, mor_token *out)
{
    for (int k = 0; k < 8; k++) {
        mor_token t = -7;
        mor_status st = mor_sampler_sample(s, in->logits, in->n_vocab, &t);
        if (st) {
            FUZZ_ASSERT(st == MOR_E_INVALID_ARG && t == -7 && mor_last_error()[0], "status %d", (int)st);
            out[k] = -1;
            continue;
        }
        FUZZ_ASSERT(t >= 0 && t < in->n_vocab, "token %d of %d", (int)t, (int)in->n_vocab);
        FUZZ_ASSERT(isfinite(in->logits[t]), "token %d has logit %g", (int)t, (double)in->logits[t]);
        for (int i = 0; i < in->n_bias; i++)
            FUZZ_ASSERT(!(in->bias_id[i] == t && in->bias[i] == -INFINITY), "token %d is banned", (int)t);
        out[k] = t;
    }
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    rd r = { data, size, 0 };
    mor_sampler_params p;
    static inputs in;
    read_params(&r, &p);
    read_inputs(&r, &in);
    mor_sampler *a = make(&p, &in);
    if (!a) return 0;
    mor_sampler *b = make(&p, &in);
    FUZZ_ASSERT(b, "the same params refused once and accepted once");
    mor_token ta[8], tb[8], tc[8];
    draws(a, &in, ta);
    draws(b, &in, tb);
    FUZZ_ASSERT(!memcmp(ta, tb, sizeof ta), "the same inputs gave other tokens");
    /* a refusal changed nothing: a's later draws are b's, refusals and all */
    mor_sampler_reset(a);
    for (int i = 0; i < in.n_hist; i++) mor_sampler_accept(a, in.hist[i]);
    draws(a, &in, tc);
    FUZZ_ASSERT(!memcmp(ta, tc, sizeof ta), "mor_sampler_reset did not give the fresh sampler's tokens");
    mor_token bad = -1;
    float nan_b = NAN;
    FUZZ_ASSERT(mor_sampler_set_logit_bias(a, &bad, &nan_b, 1) != MOR_OK && mor_last_error()[0], "a bad bias set");
    mor_sampler_free(a);
    mor_sampler_free(b);
    return 1;
}
