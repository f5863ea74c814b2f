/* serve.h - the server's internals that tests reach (serve.c). */
#ifndef MOR_SERVE_H
#define MOR_SERVE_H
#include "mor.h"

/* Called with the logits each generated token was sampled from (tests
 * compare them with a plain mor_decode loop). */
typedef void (*serve_logits_fn)(void *ud, mor_request_id id, const float *logits, int32_t n_vocab);
/* What the hooks below set (serve.c consults it once per step). */
typedef struct {
    serve_logits_fn logits;
    void           *logits_ud;
    int32_t         finish_every;
    int             drain;
} serve_hooks;
void serve_set_logits_hook(mor_server *srv, serve_logits_fn fn, void *ud);
/* SEQUENCE and SERIAL only: run every row through every recursion, as a
 * sequence-level engine that knows nothing of MoR would (the rows the router
 * dropped are computed and discarded; outputs unchanged): the baseline (b)
 * of mor-bench --serve. */
void serve_set_lockstep(mor_server *srv, int on);
/* DEPTHWISE: a token group whose rows have all exited is finished (last
 * layers, output matrix, sampling) only every k steps (it waits at most
 * k - 1; at once when no other row runs), so that those weights are read
 * once for more rows; 1 (default): every step. Outputs do not change, only
 * when tokens come out. */
void serve_set_finish_every(mor_server *srv, int32_t k);
/* DEPTHWISE: while no request is queued (nothing can take the place of a
 * row that exits), each step runs the shared block again over the rows
 * still recursing until all have exited, as sequence-level batching does:
 * a row's token then comes out in one step instead of one per recursion, so
 * the last layers and the output matrix are read once for every running
 * request, and sequences that go deeper do not drag a tail of thin steps.
 * Outputs do not change. Off by default. */
void serve_set_drain(mor_server *srv, int on);
/* The server's context (for tests: its KV cache accounting). */
mor_context *serve_context(mor_server *srv);
#endif
