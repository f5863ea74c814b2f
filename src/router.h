/* router.h - token-level depth routing: router outputs and the decisions of
 * each routing mode, plus the read-back of the last decode. */
#ifndef MOR_ROUTER_H
#define MOR_ROUTER_H
#include "kernels_threads.h"
#include "model.h"

/* A router (mor_router, opaque outside router.c): its mode and thresholds,
 * exits, the read-back of the last decode and statistics. */

/* The settings a token's depth depends on: a server reuses kept K/V only
 * where they were computed under the same (serve.c). */
typedef struct {
    int32_t mode, forced_depth, max_depth;
    float   threshold[MOR_MAX_RECURSIONS];
    int32_t exit_mode;        /* MOR_EXIT_* */
    float   exit_threshold;   /* the default one (a sequence may have its own) */
} router_settings;
void router_get_settings(const mor_router *r, router_settings *out);
/* A server's exits, fixed from its creation on (mor_router_set_exit then
 * refuses to change them). */
void router_own_exits(mor_router *r, int32_t mode, float threshold);

/* The statistics mor_decode adds to (a server's failed step puts them back). */
typedef struct { uint64_t n_tokens, depth_sum, n_at_depth[MOR_MAX_RECURSIONS + 1]; } router_stats;
void router_get_stats(const mor_router *r, router_stats *out);
void router_set_stats(mor_router *r, const router_stats *st);

mor_status router_create(const mor_model *m, int32_t cap_rows, mor_router **out);
void       router_free(mor_router *r);
/* The mode a decode runs: DEFAULT resolved against the model (router-less
 * models resolve to FORCED with full depth). */
int32_t    router_mode(const mor_router *r);
/* Depth cap from max_depth and FORCED (N_r when none). */
int32_t    router_depth_cap(const mor_router *r);

/* Room for a threshold per sequence 0 .. n_seq - 1 (a server's slots, whose
 * requests may each set their own), all NaN: exit_threshold. MOR_E_NOMEM. */
mor_status router_seq_exits(mor_router *r, int32_t n_seq);
/* Sequence seq's exit threshold from now on (NaN: exit_threshold). */
void       router_set_seq_exit(mor_router *r, int32_t seq, float thr);
/* The threshold the rows of sequence seq exit by. */
float      router_exit_threshold(const mor_router *r, int32_t seq);

/* Scratch element of the TOPK ranking (the caller provides n of them). */
typedef struct { float p; int32_t row; } router_rank;

/* Expert-choice verdict at recursion rec for n candidate rows (still taken
 * at rec - 1), in row order: x[t] a row's hidden state, seq[t] its sequence.
 * Writes each row's router logit z[t] and gate p[t] = alpha * f(z) (f(z)
 * alone for func "none") and sel[t] (taken). TOPK ranks the candidates of
 * one sequence together, k = max(1, int(c_rec * T)) with T = seq_rows[seq]
 * (the rows of that sequence in the call), ties to the earlier row;
 * THRESHOLD (f(z) >= threshold_rec, a capacity-1 recursion always) and
 * FORCED decide row by row. tmp: 3 n_embd floats; rank: n elements. */
void    router_decide_expert(const mor_router *r, int32_t rec, int32_t n, const float *const *x,
                             const int32_t *seq, const int32_t *seq_rows, float *z, float *p, uint8_t *sel,
                             float *tmp, router_rank *rank);
/* Token-choice verdict, once per token on H^1 = x: its depth (1 .. the depth
 * cap), argmax of the probabilities plus the selection bias. z: the N_r
 * router logits; probs: alpha * softmax(z) (or the gates of a sigmoid
 * router); *gate: the chosen recursion's probability (without the bias). */
int32_t router_decide_token(const mor_router *r, const float *x, float *z, float *probs, float *gate, float *tmp);
/* x += w * y for a row a recursion took, y the block's output (with its
 * residuals): w = gate, or 1 under additive gating. */
void    router_update(const mor_model *m, float *x, const float *y, float gate);
/* Confidence of an early exit before a recursion (serving, CALM family):
 * MOR_EXIT_MARGIN: softmax top-1 minus top-2 of the logits of x (final norm,
 * output matrix on e's threads; tmp: n_embd floats, vocab: n_vocab);
 * MOR_EXIT_SATURATION: cos(x, xprev), xprev the state before the last pass. */
float   router_confidence(const mor_model *m, exec_ctx *e, int32_t mode, const float *x, const float *xprev,
                          float *tmp, float *vocab);
/* Ouro's exit probability lambda = sigmoid(w . norm(x) + b) of the model's
 * exit gate, norm the final norm (the loop norm the gate was trained
 * behind); tmp: n_embd floats. The model must have a gate. */
double  router_exit_lambda(const mor_model *m, const float *x, float *tmp);
/* Whether an exit mode and threshold can run on m: MOR_OK, or the status
 * (message set, prefixed by who) why not. */
mor_status router_exit_check(const mor_model *m, int32_t mode, float threshold, const char *who);

/* ---- verdicts: every depth decision of a row in flight ---- */

/* The router's record of one row in flight (the recursion engine keeps it in
 * the row's record and hands it back at each verdict). */
typedef struct {
    float   gate;       /* of its last verdict */
    int32_t tdepth;     /* token-choice: the depth chosen at recursion 0 */
    uint8_t dropped;    /* not taken once: never taken again */
    double  exit_cdf;   /* MOR_EXIT_LEARNED: 1 - prod (1 - lambda_j) over its loops so far */
} router_row;

/* One row before its verdict at a recursion. */
typedef struct {
    router_row  *rr;
    const float *x;       /* its hidden state */
    const float *xprev;   /* before its last pass (MOR_EXIT_SATURATION) */
    float       *z, *p;   /* [n_rec]: the router logit and score of the recursion are written */
    int32_t      seq;
} router_cand;

/* The verdict of a row before recursion rec. */
enum {
    ROUTE_TAKEN,     /* the block's output updates it */
    ROUTE_DROPPED,   /* not taken (now or before): deeper recursions may still want its K/V */
    ROUTE_DONE       /* rec is past the depth cap (or N_r): no router ran, nothing deeper */
};

/* Scratch of router_verdicts for up to n rows. */
typedef struct {
    float       *z, *p, *tmp, *vocab;   /* [n], [n], 3 n_embd, n_vocab */
    const float **x;                    /* [n] */
    int32_t     *seq, *idx;             /* [n] */
    uint8_t     *sel;                   /* [n] */
    router_rank *rank;                  /* [n] */
} router_scratch;

/* The verdicts (ROUTE_*) of the n rows of c, all before recursion rec, into
 * verdict[]: past the depth cap every row is DONE; a row dropped before
 * stays dropped; from recursion 1 on, a row whose exit confidence reaches the
 * router's exit threshold is dropped; the rest are routed: expert-choice by
 * the mode (TOPK ranks the rows of one sequence together, T = seq_rows[seq]),
 * token-choice by the depth its router picks at recursion 0 (written to
 * rr->tdepth), router-less models all taken. Each routed row's rr->gate is
 * set. Exit confidences run on ex's threads. */
void    router_verdicts(const mor_router *r, exec_ctx *ex, int32_t rec, const router_cand *c, int32_t n,
                        const int32_t *seq_rows, router_scratch *s, uint8_t *verdict);

/* Publish a successful decode's decisions (copied) and add them to the stats. */
void       router_publish(mor_router *r, int32_t n, const int32_t *depth, const float *scores,
                          const float *logits);
#endif
