/* router.h - token-level depth routing: router outputs and the decisions of
 * each routing mode, plus the read-back of the last decode. */
#ifndef MOR_ROUTER_H
#define MOR_ROUTER_H
#include "model.h"

struct mor_router {
    const mor_model *m;
    int32_t mode, forced_depth, max_depth;
    float   threshold[MOR_MAX_RECURSIONS];
    /* read-back of the last successful decode: [n_rows], [n_rows * n_rec] */
    int32_t n_rows, cap_rows;
    int32_t *depth;
    float   *scores, *logits;
    /* statistics since the last reset */
    uint64_t n_tokens, depth_sum, n_at_depth[17];
};

mor_status router_create(const mor_model *m, int32_t cap_rows, mor_router **out);
void       router_free(mor_router *r);
/* The mode a decode runs: DEFAULT resolved against the model (router-less
 * models resolve to FORCED with full depth). */
int32_t    router_mode(const mor_router *r);
/* Depth cap from max_depth and FORCED (N_r when none). */
int32_t    router_depth_cap(const mor_router *r);

/* Router logits for one row: expert-choice recursion `rec` (one value) or the
 * token-choice router (N_r values). tmp holds 2*n_embd floats. */
float      router_expert_logit(const mor_model *m, int32_t rec, const float *x, float *tmp);
void       router_token_logits(const mor_model *m, const float *x, float *z, float *tmp);
/* The router function f(z) (sigmoid, tanh, or z); the gate is alpha*f(z)
 * (f(z) alone for func "none", as the official code does). */
float      router_func(const mor_model *m, float z);
float      router_gate(const mor_model *m, float z);

/* Scratch element of the TOPK ranking (the caller provides n of them). */
typedef struct { float p; int32_t row; } router_rank;

/* Expert-choice decision of recursion rec for n rows. cand[i]: row i is still
 * active; g[i] = f(z), p[i] = gate; seq[i] and seq_rows[seq] (rows of that
 * sequence in this call, TOPK's T) give the per-sequence top-k groups;
 * done and rank are scratch of n elements. Writes sel[i]. */
void       router_select_expert(const mor_router *r, int32_t rec, int32_t n, const uint8_t *cand,
                                const float *g, const float *p, const int32_t *seq,
                                const int32_t *seq_rows, uint8_t *done, router_rank *rank,
                                uint8_t *sel);
/* Token-choice: the chosen recursion (0-based) from the N_r probabilities. */
int32_t    router_choose_token(const mor_router *r, const float *probs);

/* Publish a successful decode's decisions (copied) and add them to the stats. */
void       router_publish(mor_router *r, int32_t n, const int32_t *depth, const float *scores,
                          const float *logits);
#endif
