/* server.h - what the parts of mor-server share: the options, the one
 * server state, a connection, and the endpoints.
 *
 *   main.c      options, the model, the listening socket, signals, drain
 *   conn.c      a connection's thread: read requests, write responses
 *   handlers.c  the endpoints (completions, chat, models, health, metrics)
 *   llama_endpoints.c  llama.cpp's own: tokenize, detokenize, props
 *   completion_native.c  llama.cpp's POST /completion
 *   embeddings.c  POST /v1/embeddings, on a context of its own
 *   sampling_req.c  a request's llama.cpp sampling fields for its jobs
 *   engine.c    the thread that owns the mor_server (engine.h) */
#ifndef MORSRV_SERVER_H
#define MORSRV_SERVER_H
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "buf.h"
#include "engine.h"
#include "http.h"
#include "jsonw.h"
#include "mor.h"

typedef struct {
    const char *model_path, *host, *alias, *api_key, *chat_template;
    const char *chat_template_file;    /* --chat-template-file: a Jinja template */
    int32_t     no_jinja;              /* --no-jinja: the model's template by its family's built-in format */
    int32_t     port, n_slots, mode, n_threads, n_ctx, n_batch, kv_mode, max_depth;
    float       thresholds[16];
    int32_t     n_thresholds;
    int         exit_mode;             /* --exit MODE:T (MOR_EXIT_*; NONE: off) */
    float       exit_threshold;
    int64_t     max_body, max_header;
    int32_t     max_conns, max_queue, timeout_s, drain_timeout_s, quiet, no_check_tensors;
    int32_t     max_conns_per_client;   /* open connections from one address at most (0: no cap) */
    int32_t     no_prompt_reuse;   /* --no-prompt-reuse */
    int32_t     fast_bf16;         /* --fast-bf16 (MOR_SERVE_FAST_BF16) */
    int32_t     context_shift;     /* --context-shift (MOR_SERVE_CONTEXT_SHIFT) */
    int32_t     speculate, speculate_depth;   /* --speculate, --speculate-depth: a request's default */
    int32_t     test_hooks;   /* --test-hooks: the request field "test_hold" (tests only) */
    const char *cors_origins;          /* --cors-origins (cors.h) */
    int32_t     cors_credentials;      /* --cors-credentials */
    int32_t     reject_unknown_model;  /* --reject-unknown-model: a "model" other than the alias gets 404 */
} options;

/* Why the accept thread closed a connection (conn.evicted). */
enum { EVICT_NONE, EVICT_SERVER_CAP, EVICT_CLIENT_CAP };

/* The HTTP counters of /metrics: requests by endpoint and status. */
enum { EP_COMPLETIONS, EP_CHAT, EP_MODELS, EP_HEALTH, EP_METRICS, EP_TOKENIZE, EP_DETOKENIZE, EP_PROPS, EP_EMBEDDINGS,
       EP_APPLY_TEMPLATE, EP_SLOTS, EP_COMPLETION, EP_OTHER, EP_N };

typedef struct {
    options     o;
    mor_model  *model;
    engine     *eng;
    char        model_id[128];
    int32_t     n_vocab, n_ctx_train, ctx_limit;   /* ctx_limit: prompt + completion of one request */
    mor_token   eos;
    int         add_bos, has_tokenizer;
    int         chat_family;                       /* CHAT_*, or CHAT_UNKNOWN with chat_error set */
    char        chat_error[200];
    mor_token   chat_end_token;                    /* -1: the end marker is not one token */
    mor_chat_template *chat_tpl;                   /* the Jinja template chats render with, or NULL (template.h) */
    char       *chat_source;                       /* its source */
    int         tools_format;                      /* TOOLS_* of that source (tools.h) */
    int64_t     started;                           /* Unix time */
    int         drain_pipe[2];                     /* readable once draining */
    atomic_int  draining;                          /* set once by main, read by every connection */
    pthread_mutex_t mu;                            /* guards what follows */
    pthread_cond_t  cv;
    int32_t     n_conns;                           /* registered, evicted ones included until they end */
    int32_t     n_evicted;                         /* of those, closed by the accept thread (conn.evicted) */
    struct conn *conns;                            /* open connections, newest first */
    uint64_t    http_count[EP_N][6];               /* by status class: 2xx, 400, 404, 4xx other, 503, 5xx other */
    uint64_t    rng;
} server;

extern server S;

typedef struct conn {
    int          fd;
    char         peer[64];
    char         host[48];     /* the client's address, for --max-conns-per-client */
    /* Under S.mu: when the connection is full, the accept thread closes the
     * oldest one that has no whole request in hand (waiting, or still sending
     * a head or body), so slow or idle clients cannot lock others out. */
    int          in_request;   /* a whole request received, not yet answered */
    double       since;        /* when it began waiting for its current request */
    int          evicted;      /* closed by the accept thread to make room: an EVICT_* */
    buf          in;           /* bytes received, not yet consumed */
    buf          out;          /* a response being built */
    int          gone;         /* the peer closed or an I/O error */
    int          watch_in;     /* watch reads for a disconnect while generating */
    struct conn *next, *prev;
} conn;

/* What handlers need of a request (copied: the head's bytes move). */
typedef struct {
    char     method[16], path[256];
    char     origin[256];   /* its Origin header ("" without one): CORS answers */
    int      minor, keep_alive;
    double   t_start;
} request;

/* conn.c */
void *conn_main(void *arg);                       /* the thread of one accepted connection */
int   conn_send(conn *c, const void *p, size_t n);   /* 0, or -1 (c->gone set) */
/* A whole response with a body. extra: more header lines, each ending in CRLF (or NULL). */
void  conn_respond(conn *c, request *rq, int status, const char *ctype, const char *body, size_t n,
                   const char *extra);
/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}}. */
void  conn_error(conn *c, request *rq, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Wait for news from the job or a disconnect: 0 news, -1 the peer is gone. */
int   conn_wait(conn *c, job *j);
void  count_request(int ep, int status);

/* handlers.c */
int   endpoint_of(const char *path);
void  handle(conn *c, request *rq, const char *body, size_t n);
/* GET /health's JSON into b; its status (200, or 503 while draining). */
int   health_json(buf *b);
/* The body as a JSON object whose keys are all in `allowed` (NULL-ended);
 * NULL after answering 400. */
struct json;
struct json *parse_object(conn *c, request *rq, const char *body, size_t n, const char *const *allowed);
/* A JSON reply: b's text and a newline. */
void  send_json(conn *c, request *rq, int status, buf *b);

/* llama_endpoints.c: llama.cpp's /tokenize, /detokenize and /props */
void  handle_tokenize(conn *c, request *rq, const char *body, size_t n);
void  handle_detokenize(conn *c, request *rq, const char *body, size_t n);
void  handle_props(conn *c, request *rq);
void  handle_apply_template(conn *c, request *rq, const char *body, size_t n);
void  handle_slots(conn *c, request *rq);
/* The sampler's fields in llama.cpp's names, as keys of the open object. */
void  sampler_settings(jsonw *w, const mor_sampler_params *sp);

/* completion_native.c: llama.cpp's POST /completion (and /completions) */
void  handle_completion_native(conn *c, request *rq, const char *body, size_t n);

/* embeddings.c: POST /v1/embeddings; embeddings_free before the model goes */
void  handle_embeddings(conn *c, request *rq, const char *body, size_t n);
void  embeddings_free(void);
#endif
