/* serve.h - the server's internals that tests reach (serve.c). */
#ifndef MOR_SERVE_H
#define MOR_SERVE_H
#include "mor.h"

/* Called with the logits each generated token was sampled from (tests
 * compare them with a plain mor_decode loop). */
typedef void (*serve_logits_fn)(void *ud, mor_request_id id, const float *logits, int32_t n_vocab);
void serve_set_logits_hook(mor_server *srv, serve_logits_fn fn, void *ud);
/* SEQUENCE and SERIAL only: run every row through every recursion, as a
 * sequence-level engine that knows nothing of MoR would (the rows the router
 * dropped are computed and discarded; outputs unchanged): the baseline (b)
 * of mor-bench --serve. */
void serve_set_lockstep(mor_server *srv, int on);
/* The server's context (for tests: its KV cache accounting). */
mor_context *serve_context(mor_server *srv);
#endif
