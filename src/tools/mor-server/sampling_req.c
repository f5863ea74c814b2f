/* sampling_req.c - see sampling_req.h. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sampling.h"
#include "sampling_req.h"
#include "server.h"
#include "text.h"

static int fail(api_error *err, int status, const char *param, const char *fmt, ...)
{
    va_list ap;
    err->status = status;
    snprintf(err->param, sizeof err->param, "%s", param);
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static int push_bias(req_sampling *rs, int32_t *cap, mor_token t, float b)
{
    if (rs->n_bias == *cap) {
        int32_t nc = *cap ? 2 * *cap : 16;
        mor_token *ni = realloc(rs->bias_id, sizeof *ni * (size_t)nc);
        if (ni) rs->bias_id = ni;
        float *nb = realloc(rs->bias, sizeof *nb * (size_t)nc);
        if (nb) rs->bias = nb;
        if (!ni || !nb) return -1;
        *cap = nc;
    }
    rs->bias_id[rs->n_bias] = t;
    rs->bias[rs->n_bias++] = b;
    return 0;
}

/* One logit_bias entry: a token id (key given as text when is_text) or a
 * text, tokenized without BOS or special tokens as llama.cpp does. */
static int bias_entry(req_sampling *rs, int32_t *cap, const char *text, size_t len, int64_t id, const json *v,
                      api_error *err)
{
    const float b = v->type == JSON_BOOL ? -HUGE_VALF : (float)v->num;
    if (!text) {
        if (id < 0 || id >= S.n_vocab)
            return fail(err, 400, "logit_bias", "logit_bias: token id %lld is out of range (the vocabulary has %d)",
                        (long long)id, S.n_vocab);
        return push_bias(rs, cap, (mor_token)id, b) ? fail(err, 500, "", "out of memory") : 0;
    }
    if (!S.has_tokenizer)
        return fail(err, 400, "logit_bias", "logit_bias: a text key needs a model with a tokenizer (give token ids)");
    mor_token *ids = NULL;
    int32_t n = 0;
    if (text_tokenize(S.model, text, len, 0, &ids, &n)) return fail(err, 500, "logit_bias", "logit_bias: %s", mor_last_error());
    for (int32_t i = 0; i < n; i++)
        if (push_bias(rs, cap, ids[i], b)) { free(ids); return fail(err, 500, "", "out of memory"); }
    free(ids);
    return 0;
}

/* A key that is all digits (llama.cpp: strtol to the end) is an id. */
static int key_id(const char *k, int64_t *id)
{
    char *end = NULL;
    long long v = strtoll(k, &end, 10);
    if (!*k || *end) return 0;
    *id = v;
    return 1;
}

static int make_bias(const api_request *ar, int kind, req_sampling *rs, api_error *err)
{
    int32_t cap = 0;
    const json *lb = ar->logit_bias;
    for (size_t i = 0; lb && i < lb->n; i++) {
        int64_t id = 0;
        const char *text = NULL;
        size_t len = 0;
        const json *v;
        if (lb->type == JSON_OBJECT) {
            v = lb->items[i];
            if (!key_id(lb->keys[i], &id)) { text = lb->keys[i]; len = strlen(text); }
        } else {
            const json *k = lb->items[i]->items[0];
            v = lb->items[i]->items[1];
            if (k->type == JSON_STRING) { text = k->str; len = k->str_len; }
            else id = (int64_t)k->num;
        }
        if (bias_entry(rs, &cap, text, len, id, v, err)) return -1;
    }
    if (ar->ignore_eos) {   /* llama.cpp bans the end-of-generation tokens */
        if (S.eos >= 0 && push_bias(rs, &cap, S.eos, -HUGE_VALF)) return fail(err, 500, "", "out of memory");
        if (kind == API_CHAT && S.chat_end_token >= 0 && S.chat_end_token != S.eos &&
            push_bias(rs, &cap, S.chat_end_token, -HUGE_VALF))
            return fail(err, 500, "", "out of memory");
    }
    return 0;
}

/* llama.cpp's default breakers' sequences, made once (a walk over the
 * vocabulary per breaker) and shared by every request. */
static pthread_mutex_t dflt_mu = PTHREAD_MUTEX_INITIALIZER;
static mor_token *dflt_tok;
static int32_t *dflt_len, dflt_n = -1;

static int default_breakers(req_sampling *rs)
{
    pthread_mutex_lock(&dflt_mu);
    if (dflt_n < 0) {
        size_t lens[4];
        for (int i = 0; i < 4; i++) lens[i] = strlen(SAMPLING_DRY_DEFAULT_BREAKERS[i]);
        if (sampling_dry_breakers(S.model, SAMPLING_DRY_DEFAULT_BREAKERS, lens, 4, &dflt_tok, &dflt_len, &dflt_n))
            dflt_n = -1;
    }
    int32_t n = dflt_n, total = 0;
    for (int32_t i = 0; i < n; i++) total += dflt_len[i];
    if (n > 0) {
        rs->brk = malloc(sizeof *rs->brk * (size_t)total);
        rs->brk_len = malloc(sizeof *rs->brk_len * (size_t)n);
        if (rs->brk && rs->brk_len) {
            memcpy(rs->brk, dflt_tok, sizeof *rs->brk * (size_t)total);
            memcpy(rs->brk_len, dflt_len, sizeof *rs->brk_len * (size_t)n);
            rs->n_brk = n;
        }
    }
    pthread_mutex_unlock(&dflt_mu);
    return n < 0 || (n > 0 && !rs->n_brk) ? -1 : 0;
}

static int make_breakers(const api_request *ar, req_sampling *rs, api_error *err)
{
    const int on = ar->num_set[API_DRY_MULTIPLIER] && ar->num[API_DRY_MULTIPLIER] != 0;
    if (!on) return 0;
    if (!S.has_tokenizer) {
        if (ar->n_breakers < 0) return 0;
        return fail(err, 400, "dry_sequence_breakers", "dry_sequence_breakers needs a model with a tokenizer");
    }
    if (ar->n_breakers < 0) return default_breakers(rs) ? fail(err, 500, "", "DRY's breakers: %s", mor_last_error()) : 0;
    if (sampling_dry_breakers(S.model, ar->breakers, ar->breaker_len, ar->n_breakers, &rs->brk, &rs->brk_len,
                              &rs->n_brk))
        return fail(err, 500, "dry_sequence_breakers", "dry_sequence_breakers: %s", mor_last_error());
    return 0;
}

int req_sampling_make(const api_request *ar, int kind, req_sampling *rs, api_error *err)
{
    memset(rs, 0, sizeof *rs);
    memset(err, 0, sizeof *err);
    if (make_bias(ar, kind, rs, err) || make_breakers(ar, rs, err)) {
        req_sampling_free(rs);
        return -1;
    }
    return 0;
}

void req_sampling_free(req_sampling *rs)
{
    free(rs->bias_id);
    free(rs->bias);
    free(rs->brk);
    free(rs->brk_len);
    memset(rs, 0, sizeof *rs);
}

static void apply_params(const api_request *ar, mor_sampler_params *sp)
{
    const double *v = ar->num;
    const unsigned char *set = ar->num_set;
    if (set[API_PRESENCE_PENALTY]) sp->presence_penalty = (float)v[API_PRESENCE_PENALTY];
    if (set[API_FREQUENCY_PENALTY]) sp->frequency_penalty = (float)v[API_FREQUENCY_PENALTY];
    if (set[API_MIN_KEEP]) sp->min_keep = (int32_t)v[API_MIN_KEEP];
    if (set[API_TYPICAL_P]) sp->typical_p = (float)v[API_TYPICAL_P];
    if (set[API_TOP_N_SIGMA]) sp->top_n_sigma = (float)v[API_TOP_N_SIGMA];
    if (set[API_DYNATEMP_RANGE]) sp->dynatemp_range = (float)v[API_DYNATEMP_RANGE];
    if (set[API_DYNATEMP_EXPONENT]) sp->dynatemp_exponent = (float)v[API_DYNATEMP_EXPONENT];
    if (set[API_XTC_PROBABILITY]) sp->xtc_probability = (float)v[API_XTC_PROBABILITY];
    if (set[API_XTC_THRESHOLD]) sp->xtc_threshold = (float)v[API_XTC_THRESHOLD];
    if (set[API_MIROSTAT]) sp->mirostat = (int32_t)v[API_MIROSTAT];
    if (set[API_MIROSTAT_TAU]) sp->mirostat_tau = (float)v[API_MIROSTAT_TAU];
    if (set[API_MIROSTAT_ETA]) sp->mirostat_eta = (float)v[API_MIROSTAT_ETA];
    if (set[API_DRY_MULTIPLIER]) sp->dry_multiplier = (float)v[API_DRY_MULTIPLIER];
    if (set[API_DRY_BASE] && v[API_DRY_BASE] >= 1) sp->dry_base = (float)v[API_DRY_BASE];   /* < 1: the default */
    if (set[API_DRY_ALLOWED_LENGTH]) sp->dry_allowed_length = (int32_t)v[API_DRY_ALLOWED_LENGTH];
    if (set[API_DRY_PENALTY_LAST_N])   /* -1: the context */
        sp->dry_penalty_last_n = v[API_DRY_PENALTY_LAST_N] < 0 ? S.ctx_limit : (int32_t)v[API_DRY_PENALTY_LAST_N];
    if (ar->repeat_last_n_set && ar->repeat_last_n < 0) sp->repeat_last_n = S.ctx_limit;
    if (ar->n_samplers >= 0) {
        sp->n_samplers = ar->n_samplers;
        memcpy(sp->samplers, ar->samplers, sizeof(int32_t) * (size_t)ar->n_samplers);
    }
}

int req_sampling_apply(const api_request *ar, const req_sampling *rs, job *j)
{
    apply_params(ar, &j->sp);
    int32_t total = 0;
    for (int32_t i = 0; i < rs->n_brk; i++) total += rs->brk_len[i];
    if (rs->n_bias) {
        j->bias_id = malloc(sizeof *j->bias_id * (size_t)rs->n_bias);
        j->bias = malloc(sizeof *j->bias * (size_t)rs->n_bias);
        if (!j->bias_id || !j->bias) return -1;
        memcpy(j->bias_id, rs->bias_id, sizeof *j->bias_id * (size_t)rs->n_bias);
        memcpy(j->bias, rs->bias, sizeof *j->bias * (size_t)rs->n_bias);
        j->n_bias = rs->n_bias;
    }
    if (rs->n_brk) {
        j->brk = malloc(sizeof *j->brk * (size_t)total);
        j->brk_len = malloc(sizeof *j->brk_len * (size_t)rs->n_brk);
        if (!j->brk || !j->brk_len) return -1;
        memcpy(j->brk, rs->brk, sizeof *j->brk * (size_t)total);
        memcpy(j->brk_len, rs->brk_len, sizeof *j->brk_len * (size_t)rs->n_brk);
        j->n_brk = rs->n_brk;
    }
    return 0;
}
