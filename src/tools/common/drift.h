/* drift.h - how far a re-typed (quantized) model's predictions move from the
 * original's: over one batch of n tokens, the mean and max over positions of
 * KL(softmax(logits_a) || softmax(logits_b)) in nats, the fraction of
 * positions whose top-1 token agrees, and each model's mean depth. Tokens
 * come from the reference model's tokenizer on a fixed English text when it
 * has one, else are random ids. Header-only, for mor-quantize and tests. */
#ifndef MOR_DRIFT_H
#define MOR_DRIFT_H
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mor.h"

typedef struct { int n, text; double mean_kl, max_kl, top1, depth_a, depth_b; } drift_result;

static const char drift_text[] =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
    "it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had "
    "everything before us, we had nothing before us, we were all going direct to Heaven, we were all going "
    "direct the other way - in short, the period was so far like the present period, that some of its "
    "noisiest authorities insisted on its being received, for good or for evil, in the superlative degree "
    "of comparison only. There were a king with a large jaw and a queen with a plain face, on the throne of "
    "England; there were a king with a large jaw and a queen with a fair face, on the throne of France. In "
    "both countries it was clearer than crystal to the lords of the State preserves of loaves and fishes, "
    "that things in general were settled for ever.";

/* Logits of every row of one batch; 0 on success. depth: mean recursions. */
static inline int drift_run(mor_model *m, const mor_token *toks, int n, float *logits, double *depth)
{
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = (uint32_t)n + 1;
    cp.n_batch = (uint32_t)n;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    int rc = -1;
    if (mor_context_create(m, &cp, &c) || mor_batch_create(n, &b)) goto done;
    for (int i = 0; i < n; i++) mor_batch_add(b, toks[i], i, 0, 1);
    if (mor_decode(c, b)) goto done;
    const int32_t V = mor_model_n_vocab(m);
    for (int i = 0; i < n; i++) memcpy(logits + (size_t)i * V, mor_get_logits(c, i), sizeof(float) * (size_t)V);
    mor_router_stats st = { .size = sizeof st };
    mor_router_get_stats(mor_context_router(c), &st);
    *depth = st.mean_depth;
    rc = 0;
done:
    mor_batch_free(b);
    mor_context_free(c);
    return rc;
}

static inline int drift_measure(mor_model *a, mor_model *bm, int n, uint64_t seed, drift_result *r)
{
    const int32_t V = mor_model_n_vocab(a);
    if (n < 1 || V != mor_model_n_vocab(bm)) return -1;
    if (mor_model_n_ctx_train(a) > 0 && n > mor_model_n_ctx_train(a)) n = mor_model_n_ctx_train(a);   /* positions < max_pos */
    mor_token *toks = malloc(sizeof(mor_token) * (size_t)n);
    float *la = malloc(sizeof(float) * (size_t)n * V), *lb = malloc(sizeof(float) * (size_t)n * V);
    int rc = -1;
    if (!toks || !la || !lb) goto done;
    memset(r, 0, sizeof *r);
    int32_t nt = 0;
    mor_token *tt = NULL;
    mor_tokenize(a, drift_text, sizeof drift_text - 1, 0, NULL, 0, &nt);   /* the count it needs */
    if (nt > 1 && (tt = malloc(sizeof(mor_token) * (size_t)nt)) &&
        mor_tokenize(a, drift_text, sizeof drift_text - 1, 0, tt, nt, &nt) == MOR_OK) {
        r->text = 1;
        if (nt < n) n = nt;                    /* the text's tokens, at most n of them */
        memcpy(toks, tt, sizeof(mor_token) * (size_t)n);
        free(tt);
    } else {
        free(tt);
        for (int i = 0; i < n; i++) {
            seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
            toks[i] = (mor_token)(seed % (uint64_t)V);
        }
    }
    if (drift_run(a, toks, n, la, &r->depth_a) || drift_run(bm, toks, n, lb, &r->depth_b)) goto done;
    int agree = 0;
    for (int i = 0; i < n; i++) {
        const float *p = la + (size_t)i * V, *q = lb + (size_t)i * V;
        double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, kl = 0;
        int ap = 0, aq = 0;
        for (int32_t v = 0; v < V; v++) {
            if (p[v] > mp) { mp = p[v]; ap = v; }
            if (q[v] > mq) { mq = q[v]; aq = v; }
        }
        for (int32_t v = 0; v < V; v++) { sp += exp(p[v] - mp); sq += exp(q[v] - mq); }
        const double lzp = mp + log(sp), lzq = mq + log(sq);
        for (int32_t v = 0; v < V; v++) {
            double lp = p[v] - lzp, lq = q[v] - lzq;
            kl += exp(lp) * (lp - lq);
        }
        r->mean_kl += kl / n;
        if (kl > r->max_kl) r->max_kl = kl;
        agree += ap == aq;
    }
    r->top1 = (double)agree / n;
    r->n = n;
    rc = 0;
done:
    free(toks); free(la); free(lb);
    return rc;
}
#endif
