/* router.c - token-level depth routing.
 *
 * Expert-choice (the main MoR variant): each recursion has a router; at
 * recursion r the candidates are the tokens selected at r-1, and the mode
 * decides which go on:
 *   TOPK       per sequence and per call, k = max(1, int(c_r * T)) of the
 *              candidates with the largest gate, as the official forward does
 *              (ties go to the earlier token); not causal.
 *   THRESHOLD  causal: f(z_r) >= threshold_r, a capacity-1.0 recursion always.
 *   FORCED     the first n recursions.
 * Token-choice: one router picks the depth once, argmax of probs + bias. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "abi.h"
#include "embed_output.h"
#include "kernels.h"
#include "kernels_threads.h"
#include "router.h"
#include "status.h"

struct mor_router {
    const mor_model *m;
    int32_t mode, forced_depth, max_depth;
    float   threshold[MOR_MAX_RECURSIONS];
    /* read-back of the last successful decode: [n_rows], [n_rows * n_rec] */
    int32_t n_rows, cap_rows;
    int32_t *depth;
    float   *scores, *logits;
    /* exits (MOR_EXIT_*, threshold): the server's params, or mor_router_set_exit */
    int32_t exit_mode;
    float   exit_threshold;
    uint8_t server_owned;   /* a server's: its exits are fixed at creation */
    /* per sequence (a server's slots, router_seq_exits): the exit threshold
     * of the request in it, NaN for exit_threshold */
    float  *seq_exit;
    int32_t n_seq_exit;
    /* statistics since the last reset */
    uint64_t n_tokens, depth_sum, n_at_depth[MOR_MAX_RECURSIONS + 1];
};

void router_get_settings(const mor_router *r, router_settings *out)
{
    out->mode = r->mode;
    out->forced_depth = r->forced_depth;
    out->max_depth = r->max_depth;
    memcpy(out->threshold, r->threshold, sizeof out->threshold);
    out->exit_mode = r->exit_mode;
    out->exit_threshold = r->exit_threshold;
}

void router_own_exits(mor_router *r, int32_t mode, float threshold)
{
    r->exit_mode = mode;
    r->exit_threshold = threshold;
    r->server_owned = 1;
}

void router_get_stats(const mor_router *r, router_stats *out)
{
    out->n_tokens = r->n_tokens;
    out->depth_sum = r->depth_sum;
    memcpy(out->n_at_depth, r->n_at_depth, sizeof out->n_at_depth);
}

void router_set_stats(mor_router *r, const router_stats *st)
{
    r->n_tokens = st->n_tokens;
    r->depth_sum = st->depth_sum;
    memcpy(r->n_at_depth, st->n_at_depth, sizeof r->n_at_depth);
}

/* The router and its per-row arrays in one allocation. */
mor_status router_create(const mor_model *m, int32_t cap_rows, mor_router **out)
{
    *out = NULL;
    const size_t n = (size_t)cap_rows, head = (sizeof(mor_router) + 7) / 8 * 8;
    mor_router *r = calloc(1, head + sizeof(int32_t) * n + 2 * sizeof(float) * n * (size_t)m->n_rec);
    if (!r) return err_set(MOR_E_NOMEM, "out of memory");
    r->m = m; r->cap_rows = cap_rows;
    memcpy(r->threshold, m->threshold, sizeof r->threshold);
    r->scores = (float *)((char *)r + head);
    r->logits = r->scores + n * (size_t)m->n_rec;
    r->depth = (int32_t *)(r->logits + n * (size_t)m->n_rec);
    *out = r;
    return MOR_OK;
}

void router_free(mor_router *r)
{
    if (r) free(r->seq_exit);
    free(r);
}

mor_status router_seq_exits(mor_router *r, int32_t n_seq)
{
    float *t = malloc(sizeof *t * (size_t)(n_seq > 0 ? n_seq : 1));
    if (!t) return err_set(MOR_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < n_seq; i++) t[i] = NAN;
    free(r->seq_exit);
    r->seq_exit = t;
    r->n_seq_exit = n_seq;
    return MOR_OK;
}

void router_set_seq_exit(mor_router *r, int32_t seq, float thr)
{
    if (seq >= 0 && seq < r->n_seq_exit) r->seq_exit[seq] = thr;
}

float router_exit_threshold(const mor_router *r, int32_t seq)
{
    if (seq >= 0 && seq < r->n_seq_exit && !isnan(r->seq_exit[seq])) return r->seq_exit[seq];
    return r->exit_threshold;
}

int32_t router_mode(const mor_router *r)
{
    if (r->mode != MOR_ROUTE_DEFAULT) return r->mode;
    switch (r->m->router_type) {
    case MOR_ROUTER_TYPE_EXPERT: return MOR_ROUTE_TOPK;
    case MOR_ROUTER_TYPE_TOKEN:  return MOR_ROUTE_TOKEN;
    default:                     return MOR_ROUTE_FORCED;
    }
}

int32_t router_depth_cap(const mor_router *r)
{
    int32_t cap = r->m->n_rec;
    if (r->mode == MOR_ROUTE_FORCED && r->forced_depth < cap) cap = r->forced_depth;
    if (r->max_depth > 0 && r->max_depth < cap) cap = r->max_depth;
    return cap;
}

static float router_apply(const router_weights *rw, const float *x, int32_t d, float *z, float *tmp)
{
    if (!rw->mlp) { k_matmul(&rw->w, x, z, 1); return z[0]; }
    k_matmul(&rw->fc1, x, tmp, 1);
    for (int32_t i = 0; i < 2 * d; i++) tmp[i] = k_gelu(tmp[i]);
    k_matmul(&rw->fc2, tmp, z, 1);
    return z[0];
}

/* The router reads x / temp (the official `mor_router(x / temp)`). */
static const float *scaled_input(const mor_model *m, const float *x, float *buf)
{
    if (m->temp == 1.0f) return x;
    for (int32_t i = 0; i < m->n_embd; i++) buf[i] = x[i] / m->temp;
    return buf;
}

static float func(const mor_model *m, float z)
{
    switch (m->router_func) {
    case ROUTER_FUNC_SIGMOID: return 1.0f / (1.0f + expf(-z));
    case ROUTER_FUNC_TANH:    return tanhf(z);
    default:                  return z;
    }
}

static float gate(const mor_model *m, float z)
{
    return m->router_func == ROUTER_FUNC_NONE ? z : m->alpha * func(m, z);
}

/* Gate descending, then row ascending: ties go to the earlier token. */
static int cmp_rank(const void *a, const void *b)
{
    const router_rank *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

void router_decide_expert(const mor_router *r, int32_t rec, int32_t n, const float *const *x,
                          const int32_t *seq, const int32_t *seq_rows, float *z, float *p, uint8_t *sel,
                          float *tmp, router_rank *rank)
{
    const mor_model *m = r->m;
    const int32_t mode = router_mode(r);
    for (int32_t t = 0; t < n; t++) {
        float zt;
        z[t] = router_apply(&m->router[rec], scaled_input(m, x[t], tmp + 2 * m->n_embd), m->n_embd, &zt, tmp);
        p[t] = gate(m, z[t]);
        sel[t] = mode == MOR_ROUTE_FORCED ||
                 (mode == MOR_ROUTE_THRESHOLD && (m->capacity[rec] == 1.0 || func(m, z[t]) >= r->threshold[rec]));
    }
    if (mode != MOR_ROUTE_TOPK) return;
    /* TOPK: one group per sequence; sel marks the rows already grouped until
     * the group's top k are set */
    for (int32_t t = 0; t < n; t++) sel[t] = 0;
    for (int32_t t = 0; t < n; t++) {
        if (sel[t] & 2) continue;
        int32_t nc = 0;
        for (int32_t u = t; u < n; u++) {
            if (seq[u] != seq[t]) continue;
            sel[u] = 2;
            rank[nc].p = p[u]; rank[nc].row = u; nc++;
        }
        /* k_r = max(1, int(c_r * T)) with c_r a double, as Python computes it */
        int64_t k = (int64_t)(m->capacity[rec] * (double)seq_rows[seq[t]]);
        if (k < 1) k = 1;
        if (k > nc) k = nc;
        qsort(rank, (size_t)nc, sizeof *rank, cmp_rank);
        for (int64_t q = 0; q < nc; q++) sel[rank[q].row] = q < k ? 3 : 2;
    }
    for (int32_t t = 0; t < n; t++) sel[t] = sel[t] == 3;
}

int32_t router_decide_token(const mor_router *r, const float *x, float *z, float *probs, float *gate_out, float *tmp)
{
    const mor_model *m = r->m;
    const int32_t nr = m->n_rec;
    router_apply(&m->router_tc, scaled_input(m, x, tmp + 2 * m->n_embd), m->n_embd, z, tmp);
    if (m->router_func == ROUTER_FUNC_SOFTMAX) {
        memcpy(probs, z, sizeof(float) * (size_t)nr);
        k_softmax(probs, nr);
        for (int32_t t = 0; t < nr; t++) probs[t] *= m->alpha;
    } else {
        for (int32_t t = 0; t < nr; t++) probs[t] = gate(m, z[t]);
    }
    int32_t best = 0;
    float bestq = -INFINITY;
    for (int32_t i = 0; i < nr; i++) {
        float q = probs[i] + (m->router_bias ? m->router_bias[i] : 0.0f);   /* bias: selection only */
        if (q > bestq) { bestq = q; best = i; }
    }
    const int32_t cap = router_depth_cap(r);
    if (router_mode(r) == MOR_ROUTE_FORCED) best = cap - 1;
    if (best > cap - 1) best = cap - 1;
    *gate_out = probs[best];
    return best + 1;
}

/* Whether row c exits before recursion rec >= 1 by the router's exit mode.
 * LEARNED (Ouro's Q-exit): lambda of the loop just run joins the row's CDF,
 * and the row exits at the first loop where the CDF reaches q; q >= 1
 * never exits early (the remainder of the exit distribution belongs to the
 * last loop, which every row that gets there runs). */
static int exits_now(const mor_router *r, exec_ctx *ex, const router_cand *c, router_scratch *s)
{
    if (r->exit_mode == MOR_EXIT_NONE) return 0;
    const float thr = router_exit_threshold(r, c->seq);
    if (r->exit_mode != MOR_EXIT_LEARNED)
        return router_confidence(r->m, ex, r->exit_mode, c->x, c->xprev, s->tmp, s->vocab) >= thr;
    const double lambda = router_exit_lambda(r->m, c->x, s->tmp);
    c->rr->exit_cdf = 1.0 - (1.0 - c->rr->exit_cdf) * (1.0 - lambda);   /* 1 - prod (1 - lambda_j) */
    return thr < 1.0f && c->rr->exit_cdf >= (double)thr;
}

double router_exit_lambda(const mor_model *m, const float *x, float *tmp)
{
    const float *w = m->exit_gate.data;
    double z = *(const float *)m->exit_gate_b.data;
    model_output_norm(m, tmp, x);   /* the gate reads the loop-normed stream, as Ouro trains it */
    for (int32_t i = 0; i < m->n_embd; i++) z += (double)w[i] * tmp[i];
    return 1.0 / (1.0 + exp(-z));
}

mor_status router_exit_check(const mor_model *m, int32_t mode, float thr, const char *who)
{
    if (mode < MOR_EXIT_NONE || mode > MOR_EXIT_LEARNED || isnan(thr))
        return err_set(MOR_E_INVALID_ARG, "%s: exit mode %d or its threshold (NaN) invalid", who, mode);
    if (mode == MOR_EXIT_LEARNED && !m->exit_gate.data)
        return err_set(MOR_E_UNSUPPORTED, "%s: the learned exit needs a model with an exit gate (Ouro's "
                       "exit_gate.weight); this one has none", who);
    if (mode == MOR_EXIT_LEARNED && !(thr >= 0.0f && thr <= 1.0f))
        return err_set(MOR_E_INVALID_ARG, "%s: the learned exit's threshold q %g is not in [0, 1]", who, (double)thr);
    if (mode != MOR_EXIT_NONE && m->router_type == MOR_ROUTER_TYPE_TOKEN)
        return err_set(MOR_E_UNSUPPORTED, "%s: exits need a model with expert-choice routers or none", who);
    return MOR_OK;
}

void router_verdicts(const mor_router *r, exec_ctx *ex, int32_t rec, const router_cand *c, int32_t n,
                     const int32_t *seq_rows, router_scratch *s, uint8_t *verdict)
{
    const mor_model *m = r->m;
    if (rec >= m->n_rec || rec >= router_depth_cap(r)) {   /* past the cap no router is evaluated */
        for (int32_t t = 0; t < n; t++) verdict[t] = ROUTE_DONE;
        return;
    }
    int32_t nc = 0;   /* candidates: not dropped, not confident enough to exit */
    for (int32_t t = 0; t < n; t++) {
        verdict[t] = ROUTE_DROPPED;
        if (c[t].rr->dropped) continue;
        if (rec >= 1 && exits_now(r, ex, &c[t], s)) {
            c[t].rr->dropped = 1;
            continue;
        }
        s->idx[nc++] = t;
    }
    if (m->router_type == MOR_ROUTER_TYPE_EXPERT) {
        for (int32_t k = 0; k < nc; k++) {
            s->x[k] = c[s->idx[k]].x;
            s->seq[k] = c[s->idx[k]].seq;
        }
        router_decide_expert(r, rec, nc, s->x, s->seq, seq_rows, s->z, s->p, s->sel, s->tmp, s->rank);
        for (int32_t k = 0; k < nc; k++) {
            const router_cand *ct = &c[s->idx[k]];
            ct->z[rec] = s->z[k];
            ct->p[rec] = ct->rr->gate = s->p[k];
            if (s->sel[k]) verdict[s->idx[k]] = ROUTE_TAKEN;
            else ct->rr->dropped = 1;
        }
        return;
    }
    for (int32_t k = 0; k < nc; k++) {
        const router_cand *ct = &c[s->idx[k]];
        if (m->router_type == MOR_ROUTER_TYPE_TOKEN && rec == 0)   /* the depth, once, on H^1 */
            ct->rr->tdepth = router_decide_token(r, ct->x, ct->z, ct->p, &ct->rr->gate, s->tmp);
        if (m->router_type != MOR_ROUTER_TYPE_TOKEN || rec < ct->rr->tdepth) verdict[s->idx[k]] = ROUTE_TAKEN;
        else ct->rr->dropped = 1;
    }
}

void router_update(const mor_model *m, float *x, const float *y, float g)
{
    const float w = m->gating_additive ? 1.0f : g;
    for (int32_t e = 0; e < m->n_embd; e++) x[e] += w * y[e];   /* x + w * f(x) */
}

float router_confidence(const mor_model *m, exec_ctx *e, int32_t mode, const float *x, const float *xprev,
                        float *tmp, float *vocab)
{
    const int32_t d = m->n_embd;
    if (mode == MOR_EXIT_SATURATION) {
        double xy = 0, xx = 0, yy = 0;
        for (int32_t i = 0; i < d; i++) {
            xy += (double)x[i] * xprev[i]; xx += (double)x[i] * x[i]; yy += (double)xprev[i] * xprev[i];
        }
        return xx > 0 && yy > 0 ? (float)(xy / sqrt(xx * yy)) : 0.0f;
    }
    model_output_norm(m, tmp, x);
    model_logits(m, e, tmp, 1, vocab);
    float l1 = -INFINITY, l2 = -INFINITY;
    for (int32_t v = 0; v < m->n_vocab; v++) {
        float l = vocab[v];
        if (l > l1) { l2 = l1; l1 = l; } else if (l > l2) l2 = l;
    }
    double sum = 0;
    for (int32_t v = 0; v < m->n_vocab; v++) sum += exp((double)vocab[v] - l1);
    return (float)((1.0 - exp((double)l2 - l1)) / sum);
}

void router_publish(mor_router *r, int32_t n, const int32_t *depth, const float *scores, const float *logits)
{
    int32_t nr = r->m->n_rec;
    r->n_rows = n;
    memcpy(r->depth, depth, sizeof(int32_t) * (size_t)n);
    memcpy(r->scores, scores, sizeof(float) * (size_t)n * nr);
    memcpy(r->logits, logits, sizeof(float) * (size_t)n * nr);
    for (int32_t i = 0; i < n; i++) {
        r->n_tokens++;
        r->depth_sum += (uint64_t)depth[i];
        r->n_at_depth[depth[i] < MOR_MAX_RECURSIONS ? depth[i] : MOR_MAX_RECURSIONS]++;
    }
}

/* ---- public API ---- */


mor_status mor_router_set_mode(mor_router *r, int32_t mode, int32_t forced_depth)
{
    err_clear();
    if (!r) return err_set(MOR_E_INVALID_ARG, "mor_router_set_mode: router is NULL");
    const mor_model *m = r->m;
    switch (mode) {
    case MOR_ROUTE_DEFAULT: break;
    case MOR_ROUTE_TOPK:
    case MOR_ROUTE_THRESHOLD:
        if (m->router_type != MOR_ROUTER_TYPE_EXPERT)
            return err_set(MOR_E_UNSUPPORTED, "%s routing needs an expert-choice model",
                           mode == MOR_ROUTE_TOPK ? "TOPK" : "THRESHOLD");
        break;
    case MOR_ROUTE_TOKEN:
        if (m->router_type != MOR_ROUTER_TYPE_TOKEN)
            return err_set(MOR_E_UNSUPPORTED, "TOKEN routing needs a token-choice model");
        break;
    case MOR_ROUTE_FORCED:
        if (forced_depth < 1 || forced_depth > m->n_rec)
            return err_set(MOR_E_OUT_OF_RANGE, "forced depth %d out of range [1, %d]", forced_depth, m->n_rec);
        break;
    default:
        return err_set(MOR_E_INVALID_ARG, "unknown routing mode %d", mode);
    }
    r->mode = mode;
    r->forced_depth = mode == MOR_ROUTE_FORCED ? forced_depth : 0;
    return MOR_OK;
}

mor_status mor_router_set_exit(mor_router *r, int32_t exit_mode, float threshold)
{
    err_clear();
    if (!r) return err_set(MOR_E_INVALID_ARG, "mor_router_set_exit: router is NULL");
    if (r->server_owned)   /* its prompt reuse and modes were checked against the params' exits */
        return err_set(MOR_E_UNSUPPORTED, "mor_router_set_exit: a server's exits are its mor_server_params'");
    mor_status st = router_exit_check(r->m, exit_mode, threshold, "mor_router_set_exit");
    if (st) return st;
    r->exit_mode = exit_mode;
    r->exit_threshold = threshold;
    return MOR_OK;
}

int32_t mor_router_get_mode(const mor_router *r)
{
    if (!r) return err_set(MOR_E_INVALID_ARG, "mor_router_get_mode: router is NULL");
    err_clear();
    return r->mode;
}

mor_status mor_router_set_threshold(mor_router *r, int32_t rec, float thr)
{
    err_clear();
    if (!r) return err_set(MOR_E_INVALID_ARG, "mor_router_set_threshold: router is NULL");
    if (rec < 0 || rec >= r->m->n_rec) return err_set(MOR_E_OUT_OF_RANGE, "recursion %d out of range", rec);
    if (isnan(thr)) return err_set(MOR_E_INVALID_ARG, "threshold is NaN");
    r->threshold[rec] = thr;
    return MOR_OK;
}

float mor_router_get_threshold(const mor_router *r, int32_t rec)
{
    if (!r || rec < 0 || rec >= r->m->n_rec) return NAN;
    return r->threshold[rec];
}

mor_status mor_router_set_max_depth(mor_router *r, int32_t max_depth)
{
    err_clear();
    if (!r) return err_set(MOR_E_INVALID_ARG, "mor_router_set_max_depth: router is NULL");
    if (max_depth < 0 || max_depth > r->m->n_rec)
        return err_set(MOR_E_OUT_OF_RANGE, "max depth %d out of range [0, %d]", max_depth, r->m->n_rec);
    r->max_depth = max_depth;
    return MOR_OK;
}

int32_t mor_router_get_depths(const mor_router *r, int32_t *depths, int32_t n)
{
    err_clear();
    if (!r || (!depths && n > 0) || n < 0) return err_set(MOR_E_INVALID_ARG, "mor_router_get_depths: bad arguments");
    int32_t c = n < r->n_rows ? n : r->n_rows;
    if (c > 0) memcpy(depths, r->depth, sizeof(int32_t) * (size_t)c);
    return r->n_rows;
}

static int32_t get_row(const mor_router *r, const float *src, int32_t i, float *out, int32_t n)
{
    if (!r || !out || n < 0) return err_set(MOR_E_INVALID_ARG, "mor_router_get_scores/logits: bad arguments");
    if (i < 0 || i >= r->n_rows) return err_set(MOR_E_OUT_OF_RANGE, "row %d out of range [0, %d)", i, r->n_rows);
    int32_t nr = r->m->n_rec, c = n < nr ? n : nr;
    memcpy(out, src + (size_t)i * nr, sizeof(float) * (size_t)c);
    return nr;
}

int32_t mor_router_get_scores(const mor_router *r, int32_t i, float *out, int32_t n)
{
    err_clear();
    return get_row(r, r ? r->scores : NULL, i, out, n);
}

int32_t mor_router_get_logits(const mor_router *r, int32_t i, float *out, int32_t n)
{
    err_clear();
    return get_row(r, r ? r->logits : NULL, i, out, n);
}

mor_status mor_router_get_stats(const mor_router *r, mor_router_stats *out)
{
    err_clear();
    if (!r || !out) return err_set(MOR_E_INVALID_ARG, "mor_router_get_stats: NULL argument");
    mor_router_stats full = { .size = sizeof full, .n_tokens = r->n_tokens };
    full.mean_depth = r->n_tokens ? (double)r->depth_sum / (double)r->n_tokens : 0.0;
    memcpy(full.n_at_depth, r->n_at_depth, sizeof full.n_at_depth);
    return abi_write(out, &full, sizeof full, sizeof(abi_router_stats_v1), "mor_router_stats");
}

void mor_router_reset_stats(mor_router *r)
{
    if (!r) return;
    r->n_tokens = 0; r->depth_sum = 0;
    memset(r->n_at_depth, 0, sizeof r->n_at_depth);
}
