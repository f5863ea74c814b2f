/* engine.h - the one thread that owns the mor_server.
 *
 * libmor's server is used by one thread at a time; this thread is it. It
 * takes jobs (a request: prompt tokens, sampling, limits) from the
 * connection threads through a queue, submits them, steps the server while
 * anything runs, and hands each generated token to its job from the
 * on_token callback: the token, its recursion depth, and the text it
 * releases (textstream.h). A job's connection waits on the job's pipe,
 * which the engine writes after each step that gave the job something, so
 * the connection can wait for the job and watch its socket at once. All
 * the requests share one mor_server: its continuous batching, never a
 * decode per request. A connection that goes away cancels its job, which
 * frees the job's slot and KV cells at the next step.
 *
 * Lifetime: a job has two references, the connection's and the engine's
 * (from engine_submit until the request is released from the server); the
 * last job_unref frees it. */
#ifndef MORSRV_ENGINE_H
#define MORSRV_ENGINE_H
#include <pthread.h>
#include <stdint.h>
#include "buf.h"
#include "mor.h"
#include "textstream.h"

enum { FINISH_NONE = 0, FINISH_LENGTH, FINISH_STOP, FINISH_CANCELLED, FINISH_ERROR };

typedef struct job job;
struct job {
    /* Set by the connection before engine_submit, then read-only. */
    mor_token         *prompt;
    int32_t            n_prompt, max_tokens;
    mor_sampler_params sp;
    mor_token          stop_tokens[8];   /* end the request; their text is not shown */
    int32_t            n_stop_tokens;
    int                detok;            /* the model has a tokenizer: produce text */
    int                each_token;       /* wake the connection at every token (a stream),
                                            else only when the job has finished */
    int32_t            n_top;            /* logprobs: -1 none, else the log-probability of
                                            each token and of the n_top most likely
                                            (mor_logprobs of the logits it was sampled from) */
    textstream         ts;               /* stop strings (then the engine's) */
    mor_grammar       *grammar;          /* constrained output, or NULL: owned until the
                                            engine hands it to the server (set_grammar) */
    int32_t            spec_n, spec_d;   /* self-speculative decoding: drafts per step (0: off), depth */
    float              exit_thr;         /* mor_server_set_exit (NaN: the server's --exit threshold) */
    int32_t            n_keep;           /* context shift: the tokens it keeps (mor_server_set_keep);
                                            -1: not set (a server without --context-shift) */
    mor_token         *bias_id;          /* logit bias [n_bias] (malloc'd, the job frees them; */
    float             *bias;             /*   mor_sampler_set_logit_bias after the submit) */
    int32_t            n_bias;
    mor_token         *brk;              /* DRY's breakers as token sequences (malloc'd; */
    int32_t           *brk_len;          /*   mor_sampler_set_dry_breakers) */
    int32_t            n_brk;
    int                hold;             /* a test hook (mor-server --test-hooks): once this
                                            job has its first token the engine parks, stepping
                                            nothing while no other job needs a step (a first
                                            token, a free slot to take), until the job ends
                                            (its client goes away) or engine_release_holds; so
                                            a test can act while requests are surely in
                                            flight, at any speed */

    /* Shared with the connection, under mu. Token i released the text
     * text[text_end[i-1], text_end[i]). */
    pthread_mutex_t mu;
    mor_token *tokens;
    int32_t   *depths;
    size_t    *text_end;
    float     *logprob;                  /* n_top >= 0: [max_tokens] */
    mor_token *top_ids;                  /* n_top > 0: [max_tokens][n_top], best first */
    float     *top_logprob;              /* n_top > 0: [max_tokens][n_top] */
    int32_t   *text_offset;              /* n_top >= 0: [max_tokens], where token i's piece
                                            starts in the text, in characters (UTF-8
                                            lead bytes of the pieces before it) */
    int32_t    n_chars;                  /* the engine's: lead bytes pushed so far */
    int32_t    n_tokens;
    buf        text;
    int        finish;                   /* FINISH_*, set once at the end */
    int        stop_word;                /* FINISH_STOP by a stop string: its index in the
                                            job's ts (the request's stop list first); else -1 */
    int32_t    n_cached;                 /* prompt tokens reused from a slot's kept K/V */
    int32_t    n_discarded;              /* tokens its context shifts dropped (mor_server_request_shift) */
    char       error[200];               /* FINISH_ERROR: why */
    int        signalled;                /* a byte is in the pipe */
    int        notify[2];                /* pipe: the engine writes, the connection polls */
    int        refs;
    double     t_submit, t_first, t_done; /* monotonic seconds: queued, first token, finished */

    /* The engine's. */
    mor_request_id id;
    int        state;                    /* J_* (engine.c) */
    int        cancel_req, in_cmd, queue_ref;   /* under the engine's lock */
    int        touched;                  /* got something in the current step */
    int        cached_known;             /* n_cached read (once it has a token) */
    int64_t    spec_seen[2];             /* drafted, accepted: counted in the stats so far */
    job       *cmd_next, *hnext, *anext, *aprev, *tnext;
};

typedef struct {
    uint32_t n_slots, n_ctx, n_batch;
    int32_t  mode, n_threads, kv_mode, max_depth;
    float    thresholds[16];
    int32_t  n_thresholds;
    int32_t  exit_mode;   /* mor_server_params.exit_mode, exit_threshold */
    float    exit_threshold;
    int      no_prompt_reuse;
    int      fast_bf16;   /* MOR_SERVE_FAST_BF16 */
    int      context_shift;   /* MOR_SERVE_CONTEXT_SHIFT */
} engine_params;

/* Counters for /metrics (engine_stats copies them under the lock). */
typedef struct {
    uint64_t requests[5];           /* finished, by FINISH_* */
    uint64_t prompt_tokens, gen_tokens, depth_sum, at_depth[17], steps;
    uint64_t cached_tokens;         /* prompt tokens reused from kept K/V */
    uint64_t spec_drafted, spec_accepted;   /* self-speculative requests' drafts, those accepted */
    double   busy_seconds;          /* inside mor_server_step */
    uint64_t slot_steps;            /* running requests summed over the steps (busy slots per step) */
    int32_t  queued, running;       /* now */
    double   tokens_per_second;     /* over the last 10 s */
} engine_stats;

/* What one slot is doing, for GET /slots (engine_get_slots). */
typedef struct {
    int32_t id_task;      /* the request's id, -1 when idle */
    int32_t n_prompt;     /* its prompt tokens */
    int32_t n_decoded;    /* tokens it has generated */
} engine_slot;

typedef struct engine engine;

/* Create the mor_server on `model` and start the thread. NULL on failure
 * (message in err). */
engine *engine_start(mor_model *model, const engine_params *p, char *err, size_t errcap);
/* Cancel every job (they end with FINISH_CANCELLED or FINISH_ERROR) and
 * refuse new ones; the thread ends once the server is empty. */
void    engine_quit(engine *e);
/* End every test hold (job.hold), for good: a drain lets held jobs finish. */
void    engine_release_holds(engine *e);
/* The slots as of the last step into out[0..n_slots-1] (cap at least
 * that); the number of slots. */
int     engine_get_slots(engine *e, engine_slot *out, int cap);
/* engine_quit, wait for the thread, free the server. No connection may use
 * the engine any more. */
void    engine_stop(engine *e);

/* A new job with one reference (the caller's); NULL when out of memory.
 * Fill prompt (malloc'd; the job frees it), the limits, the stop lists and
 * n_top (job_new sets -1). */
job    *job_new(void);
void    job_unref(job *j);

/* Queue a job. 0: queued (the engine takes a reference); -1: max_queue jobs
 * are already waiting; -2: the engine is stopping. */
int     engine_submit(engine *e, job *j, int32_t max_queue);
/* Ask the engine to cancel a job (the connection is gone). */
void    engine_cancel(engine *e, job *j);
void    engine_get_stats(engine *e, engine_stats *out);
/* Monotonic seconds. */
double  engine_now(void);
#endif
