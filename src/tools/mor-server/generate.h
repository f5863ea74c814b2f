/* generate.h - what the generation endpoints share: a request parsed,
 * tokenized, checked and its jobs submitted (gen_start), waited for
 * (gen_wait), the server-sent-events writer, a token's bytes. OpenAI's
 * /v1/completions and /v1/chat/completions (handlers.c) and llama.cpp's
 * /completion (completion_native.c) answer from the same jobs, so a seeded
 * request generates the same tokens on each. */
#ifndef MORSRV_GENERATE_H
#define MORSRV_GENERATE_H
#include "api.h"
#include "jsonw.h"
#include "sampling_req.h"
#include "server.h"

typedef struct {
    api_request  ar;
    job         *js[API_MAX_N];
    int          n_jobs;
    int          submitted;     /* 0: llama.cpp's n_predict 0, jobs made but nothing to generate */
    mor_token   *prompt;
    int32_t      n_prompt;
    int64_t      max_tokens;    /* of each job */
    int          ctx_bound;     /* max_tokens is the context's room, not the request's limit */
    int          truncated;     /* --context-shift: the prompt was longer than the context, and cut */
    int32_t      n_keep;        /* --context-shift: the tokens kept (BOS included); else -1 */
    req_sampling rs;
    char        *gown;          /* a grammar's text made here */
    const char  *trigger;       /* tool_choice "auto": the grammar waits for this word (lazy) */
    buf          text;          /* a chat's rendered prompt */
} gen;

/* Parse body as a request of `kind` (API_*), tokenize and check it, make and
 * submit its jobs: 0, or -1 after answering with an error (gen_free either
 * way). */
int  gen_start(conn *c, request *rq, int kind, const char *body, size_t n, gen *g);
void gen_free(gen *g);
/* Wait until every job has finished: 0; -1 when the client went away (the
 * jobs cancelled) or a job failed (answered with the error). */
int  gen_wait(conn *c, request *rq, gen *g);
/* The head of a text/event-stream response (chunked on HTTP/1.1). */
void sse_begin(conn *c, request *rq);
/* One event "data: ...\n\n": 0, or -1 (c->gone set). */
int  sse(conn *c, request *rq, const char *data, size_t n);
/* The end of a chunked stream. */
void sse_end(conn *c, request *rq);
/* The bytes of token t as logprobs show it, into *b (reset first): its piece;
 * without a tokenizer, its id in decimal. */
void token_bytes(buf *b, mor_token t);
/* A log-probability as JSON: -inf (ruled out) as -9999. */
void jw_logprob(jsonw *w, float v);
/* "mor": {"token_ids", "depths"} of job j's tokens [a, b): libmor's own
 * fields beside every endpoint's response. */
void mor_object(jsonw *w, const job *j, int32_t a, int32_t b);
#endif
