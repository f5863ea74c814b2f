/* sampling_req.h - a request's llama.cpp sampling fields (api.h) for its
 * jobs: the sampler params, the logit bias (ids; texts tokenized, as
 * llama.cpp), DRY's breakers (strings into token sequences over the
 * vocabulary, llama.cpp's defaults when DRY is on and none are given) and
 * ignore_eos (the end tokens banned, as llama.cpp's logit_bias_eog). */
#ifndef MORSRV_SAMPLING_REQ_H
#define MORSRV_SAMPLING_REQ_H
#include "api.h"
#include "engine.h"

typedef struct {
    mor_token *bias_id;
    float     *bias;
    int32_t    n_bias;
    mor_token *brk;
    int32_t   *brk_len;
    int32_t    n_brk;
} req_sampling;

/* Resolve them: 0, or -1 with *err (400: an id out of range, a text
 * without a tokenizer; 500: out of memory). Free with req_sampling_free. */
int  req_sampling_make(const api_request *ar, int kind, req_sampling *rs, api_error *err);
void req_sampling_free(req_sampling *rs);
/* The request's fields into a job's params (after the OpenAI ones), and a
 * copy of the bias and breakers into the job: 0, or -1 out of memory. */
int  req_sampling_apply(const api_request *ar, const req_sampling *rs, job *j);
#endif
