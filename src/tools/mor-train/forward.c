/* forward.c - the forward and backward pass of a whole model over a batch.
 *
 *   X = embed(tokens); prelude layers
 *   none:   every recursion over every token, ungated
 *   expert: for r: z = w_r . X[cand]; p = alpha sigmoid(z); per sequence the
 *           k_r = max(1, int(c_r T)) candidates of largest p (ties: earlier
 *           token) go on (TOPK), or those with sigmoid(z) >= 0.5 (THRESHOLD;
 *           a capacity-1.0 recursion takes all); the block runs on them only
 *           (attention among them, RoPE at their own positions);
 *           X[sel] += p * block(X[sel]); cand = sel. Aux loss: BCE(z, sel).
 *   token:  z = W X; P = alpha softmax(z) (or sigmoid); depth = argmax(P + bias);
 *           recursion r runs the tokens with depth > r, ungated in between;
 *           X = X + P[depth] * f^depth(X). Balancing loss, z-loss.
 *   coda layers; final RMSNorm; logits = X E^T (tied); cross-entropy.
 *
 * Every layer application ("app") keeps what its backward needs. The
 * backward walks the same structure in reverse; gradients of weights that
 * several unrolled layers share are added into the one tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ops.h"
#ifndef TR_DOUBLE
#include "internal.h"
#endif

typedef struct {
    int32_t l, rec;           /* unrolled layer; recursion (-1 outside) */
    int32_t n;                /* rows */
    int32_t *rows, *pos;      /* [BT] row b*T+t and its position */
    int32_t ng, *goff;        /* groups (sequences): rows goff[g] .. goff[g+1] */
    size_t  *poff;            /* probs offset of each group */
    real *x, *r1, *xn1, *q, *k, *v, *probs, *ao, *h, *r2, *xn2, *gt, *up, *act, *out;
    real *lt[TR_NROLE];       /* LoRA: x A^T of each projection [n][rank] */
} app_t;

typedef struct {
    int32_t nc, ns;           /* candidates, selected */
    int32_t *cand;            /* rows of the candidates (ascending) */
    real *xc, *z, *p;         /* router input [nc][d], logit, gate */
    uint8_t *sel;             /* [nc] */
    int32_t *scand;           /* selected: their index in cand */
    int32_t app0;             /* first app of the block */
} rec_t;

struct tr_state {
    const tr_model *m;
    int32_t Bmax, Tmax, B, T, BT, select, has_targets;
    tr_rope rope;
    app_t *app; int32_t n_app, cap_app;
    rec_t rec[TR_MAX_REC];
    real *X, *xf, *rf, *logits, *dlogits;
    int32_t *tokens, *targets, *depth, *all_rows, *all_pos;
    /* token-choice */
    real *tz, *tP, *H1, *cur;    /* [BT][N_r], [BT][N_r], [BT][d], [BT][d] */
    int32_t *choice;
    int64_t counts[TR_MAX_REC];
    /* backward scratch */
    real *dX, *dA, *dB, *dxn, *dh, *dao, *dq, *dk, *dv, *dact, *dgt, *dup, *dcur, *dH1, *dtz;
    double n_cand_total[TR_MAX_REC];
    tr_result res;
};

static real *W(const tr_model *m, size_t off) { return m->p + off; }
static real *G(tr_model *m, size_t off) { return m->g + off; }

/* ------------------------------------------------------------------------ */
/* State                                                                    */
/* ------------------------------------------------------------------------ */

static void *xalloc(size_t n, int *fail)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) *fail = 1;
    return p;
}

void tr_state_free(tr_state *s)
{
    if (!s) return;
    for (int i = 0; i < s->cap_app; i++) {
        app_t *a = &s->app[i];
        free(a->rows); free(a->pos); free(a->goff); free(a->poff);
        free(a->x); free(a->r1); free(a->xn1); free(a->q); free(a->k); free(a->v); free(a->probs);
        free(a->ao); free(a->h); free(a->r2); free(a->xn2); free(a->gt); free(a->up); free(a->act); free(a->out);
        for (int r = 0; r < TR_NROLE; r++) free(a->lt[r]);
    }
    free(s->app);
    for (int r = 0; r < TR_MAX_REC; r++) {
        rec_t *c = &s->rec[r];
        free(c->cand); free(c->xc); free(c->z); free(c->p); free(c->sel); free(c->scand);
    }
    tr_rope_free(&s->rope);
    free(s->X); free(s->xf); free(s->rf); free(s->logits); free(s->dlogits);
    free(s->tokens); free(s->targets); free(s->depth); free(s->all_rows); free(s->all_pos);
    free(s->tz); free(s->tP); free(s->H1); free(s->cur); free(s->choice);
    free(s->dX); free(s->dA); free(s->dB); free(s->dxn); free(s->dh); free(s->dao); free(s->dq); free(s->dk);
    free(s->dv); free(s->dact); free(s->dgt); free(s->dup); free(s->dcur); free(s->dH1); free(s->dtz);
    free(s);
}

tr_state *tr_state_new(const tr_model *m, int32_t B, int32_t T)
{
    const tr_config *c = &m->c;
    if (B < 1 || T < 1 || T > c->ctx) return NULL;
    tr_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    int fail = 0;
    const size_t BT = (size_t)B * T, d = (size_t)c->d, qd = (size_t)c->n_head * c->head_dim,
                 kvd = (size_t)c->n_kv * c->head_dim, F = (size_t)c->ff, R = (size_t)m->lora_rmax,
                 V = (size_t)c->vocab, nr = (size_t)c->n_rec, sz = sizeof(real);
    s->m = m; s->Bmax = B; s->Tmax = T;
    if (tr_rope_init(&s->rope, T, c->head_dim, c->theta)) fail = 1;
    s->cap_app = m->L;
    s->app = xalloc(sizeof(app_t) * (size_t)s->cap_app, &fail);
    for (int i = 0; i < s->cap_app && !fail; i++) {
        app_t *a = &s->app[i];
        a->rows = xalloc(4 * BT, &fail); a->pos = xalloc(4 * BT, &fail);
        a->goff = xalloc(4 * (size_t)(B + 1), &fail); a->poff = xalloc(sizeof(size_t) * (size_t)(B + 1), &fail);
        a->x = xalloc(sz * BT * d, &fail); a->r1 = xalloc(sz * BT, &fail); a->xn1 = xalloc(sz * BT * d, &fail);
        a->q = xalloc(sz * BT * qd, &fail); a->k = xalloc(sz * BT * kvd, &fail); a->v = xalloc(sz * BT * kvd, &fail);
        a->probs = xalloc(sz * (size_t)c->n_head * B * (size_t)T * T, &fail);
        a->ao = xalloc(sz * BT * qd, &fail); a->h = xalloc(sz * BT * d, &fail); a->r2 = xalloc(sz * BT, &fail);
        a->xn2 = xalloc(sz * BT * d, &fail); a->gt = xalloc(sz * BT * F, &fail); a->up = xalloc(sz * BT * F, &fail);
        a->act = xalloc(sz * BT * F, &fail); a->out = xalloc(sz * BT * d, &fail);
        if (R) for (int r = 0; r < TR_NROLE; r++) a->lt[r] = xalloc(sz * BT * R, &fail);
    }
    for (size_t r = 0; r < nr && !fail; r++) {
        rec_t *rc = &s->rec[r];
        rc->cand = xalloc(4 * BT, &fail); rc->xc = xalloc(sz * BT * d, &fail);
        rc->z = xalloc(sz * BT, &fail); rc->p = xalloc(sz * BT, &fail); rc->sel = xalloc(BT, &fail);
        rc->scand = xalloc(4 * BT, &fail);
    }
    s->X = xalloc(sz * BT * d, &fail); s->xf = xalloc(sz * BT * d, &fail); s->rf = xalloc(sz * BT, &fail);
    s->logits = xalloc(sz * BT * V, &fail); s->dlogits = xalloc(sz * BT * V, &fail);
    s->tokens = xalloc(4 * BT, &fail); s->targets = xalloc(4 * BT, &fail); s->depth = xalloc(4 * BT, &fail);
    s->all_rows = xalloc(4 * BT, &fail); s->all_pos = xalloc(4 * BT, &fail);
    if (c->router == TR_ROUTER_TOKEN) {
        s->tz = xalloc(sz * BT * nr, &fail); s->tP = xalloc(sz * BT * nr, &fail);
        s->H1 = xalloc(sz * BT * d, &fail); s->cur = xalloc(sz * BT * d, &fail);
        s->choice = xalloc(4 * BT, &fail); s->dtz = xalloc(sz * BT * nr, &fail);
    }
    s->dX = xalloc(sz * BT * d, &fail); s->dA = xalloc(sz * BT * d, &fail); s->dB = xalloc(sz * BT * d, &fail);
    s->dxn = xalloc(sz * BT * d, &fail); s->dh = xalloc(sz * BT * d, &fail); s->dao = xalloc(sz * BT * qd, &fail);
    s->dq = xalloc(sz * BT * qd, &fail); s->dk = xalloc(sz * BT * kvd, &fail); s->dv = xalloc(sz * BT * kvd, &fail);
    s->dact = xalloc(sz * BT * F, &fail); s->dgt = xalloc(sz * BT * F, &fail); s->dup = xalloc(sz * BT * F, &fail);
    s->dcur = xalloc(sz * BT * d, &fail); s->dH1 = xalloc(sz * BT * d, &fail);
    if (fail) { tr_state_free(s); return NULL; }
    return s;
}

const real *tr_state_logits(const tr_state *s) { return s->logits; }
const int32_t *tr_state_depth(const tr_state *s) { return s->depth; }

/* ------------------------------------------------------------------------ */
/* One layer                                                                */
/* ------------------------------------------------------------------------ */

/* Set an app's rows (ascending, hence grouped by sequence) and groups. */
static void app_rows(tr_state *s, app_t *a, int32_t l, int32_t rec, const int32_t *rows, int32_t n)
{
    const int H = s->m->c.n_head;
    a->l = l; a->rec = rec; a->n = n; a->ng = 0;
    size_t po = 0;
    for (int32_t i = 0; i < n; i++) {
        a->rows[i] = rows[i];
        a->pos[i] = rows[i] % s->T;
        if (i == 0 || rows[i] / s->T != rows[i - 1] / s->T) a->goff[a->ng++] = i;
    }
    a->goff[a->ng] = n;
    for (int32_t g = 0; g < a->ng; g++) {
        int32_t ng = a->goff[g + 1] - a->goff[g];
        a->poff[g] = po;
        po += (size_t)H * ng * ng;
    }
}

/* y[n][out] = x W^T (+ LoRA of recursion rec, block position j) */
static void proj_fwd(tr_state *s, app_t *a, int role, const real *x, real *y, int in, int out)
{
    const tr_model *m = s->m;
    const int b = m->map[a->l];
    tr_linear_fwd(y, x, W(m, m->blk[b][role]), a->n, in, out);
    const int j = a->rec >= 0 ? a->l - tr_layer_of(m, a->rec, 0) : 0;
    const int R = a->rec >= 0 ? m->lora.rank[a->rec][j][role] : 0;
    if (R > 0) {
        const real sc = (real)m->lora.scale[role];
        real *t = a->lt[role];
        tr_linear_fwd(t, x, W(m, m->lora_a[a->rec][j][role]), a->n, in, R);
        for (size_t i = 0; i < (size_t)a->n * R; i++) t[i] *= sc;
        tr_gemm(a->n, out, R, t, R, 0, W(m, m->lora_b[a->rec][j][role]), R, 1, y, out, 1);
    }
}

/* dx (+)= dy W_eff; dW, dA, dB += ... */
static void proj_bwd(tr_state *s, tr_model *mm, app_t *a, int role, const real *x, const real *dy, real *dx,
                     int acc, int in, int out)
{
    const tr_model *m = s->m;
    const int b = m->map[a->l];
    tr_linear_bwd(dx, acc, G(mm, m->blk[b][role]), dy, x, W(m, m->blk[b][role]), a->n, in, out);
    const int j = a->rec >= 0 ? a->l - tr_layer_of(m, a->rec, 0) : 0;
    const int R = a->rec >= 0 ? m->lora.rank[a->rec][j][role] : 0;
    if (R > 0) {
        const real sc = (real)m->lora.scale[role];
        /* y += t B^T with t = sc x A^T:  dB += dy^T t;  dt = dy B;  dA += sc dt^T x;  dx += sc dt A */
        real *dt = s->dA;   /* free while a layer's backward runs: [n][R] fits in [BT][d] (R <= min(in, out) <= d) */
        tr_gemm(out, R, a->n, dy, out, 1, a->lt[role], R, 0, G(mm, m->lora_b[a->rec][j][role]), R, 1);
        tr_gemm(a->n, R, out, dy, out, 0, W(m, m->lora_b[a->rec][j][role]), R, 0, dt, R, 0);
        for (size_t i = 0; i < (size_t)a->n * R; i++) dt[i] *= sc;
        tr_gemm(R, in, a->n, dt, R, 1, x, in, 0, G(mm, m->lora_a[a->rec][j][role]), in, 1);
        tr_gemm(a->n, in, R, dt, R, 0, W(m, m->lora_a[a->rec][j][role]), in, 0, dx, in, 1);
    }
}

typedef struct { tr_state *s; app_t *a; const real *dout; } attn_job;

static void attn_fwd_task(void *ctx, int task, int thread)
{
    attn_job *j = ctx;
    const tr_config *c = &j->s->m->c;
    app_t *a = j->a;
    const int qd = c->n_head * c->head_dim, kvd = c->n_kv * c->head_dim, g = task;
    const int32_t r0 = a->goff[g], n = a->goff[g + 1] - r0;
    tr_attn_fwd(a->ao + (size_t)r0 * qd, a->probs + a->poff[g], a->q + (size_t)r0 * qd, a->k + (size_t)r0 * kvd,
                a->v + (size_t)r0 * kvd, n, c->n_head, c->n_kv, c->head_dim, thread);
}

static void attn_bwd_task(void *ctx, int task, int thread)
{
    attn_job *j = ctx;
    tr_state *s = j->s;
    const tr_config *c = &s->m->c;
    app_t *a = j->a;
    const int qd = c->n_head * c->head_dim, kvd = c->n_kv * c->head_dim;
    const int g = task / c->n_kv, kvh = task % c->n_kv;
    const int32_t r0 = a->goff[g], n = a->goff[g + 1] - r0;
    tr_attn_bwd(s->dq + (size_t)r0 * qd, s->dk + (size_t)r0 * kvd, s->dv + (size_t)r0 * kvd,
                j->dout + (size_t)r0 * qd, a->probs + a->poff[g], a->q + (size_t)r0 * qd,
                a->k + (size_t)r0 * kvd, a->v + (size_t)r0 * kvd, n, c->n_head, c->n_kv, c->head_dim, kvh, thread);
}

static double layer_fwd(tr_state *s, app_t *a)
{
    const tr_model *m = s->m;
    const tr_config *c = &m->c;
    const int d = c->d, qd = c->n_head * c->head_dim, kvd = c->n_kv * c->head_dim, F = c->ff, n = a->n;
    const int b = m->map[a->l];
    if (n == 0) return 0;
    tr_rmsnorm_fwd(a->xn1, a->r1, a->x, W(m, m->blk[b][TR_NORM1]), n, d, c->eps);
    proj_fwd(s, a, TR_Q, a->xn1, a->q, d, qd);
    proj_fwd(s, a, TR_K, a->xn1, a->k, d, kvd);
    proj_fwd(s, a, TR_V, a->xn1, a->v, d, kvd);
    tr_rope_apply(&s->rope, a->q, n, c->n_head, c->head_dim, a->pos, 1);
    tr_rope_apply(&s->rope, a->k, n, c->n_kv, c->head_dim, a->pos, 1);
    attn_job j = { s, a, NULL };
    tr_parallel(a->ng, attn_fwd_task, &j);
    proj_fwd(s, a, TR_O, a->ao, a->h, qd, d);
    for (size_t i = 0; i < (size_t)n * d; i++) a->h[i] += a->x[i];
    tr_rmsnorm_fwd(a->xn2, a->r2, a->h, W(m, m->blk[b][TR_NORM2]), n, d, c->eps);
    proj_fwd(s, a, TR_GATE, a->xn2, a->gt, d, F);
    proj_fwd(s, a, TR_UP, a->xn2, a->up, d, F);
    tr_swiglu_fwd(a->act, a->gt, a->up, (size_t)n * F);
    proj_fwd(s, a, TR_DOWN, a->act, a->out, F, d);
    for (size_t i = 0; i < (size_t)n * d; i++) a->out[i] += a->h[i];
    /* multiply-adds: the seven projections, attention (QK and PV over the causal half) */
    double fl = 2.0 * n * ((double)d * qd * 2 + (double)d * kvd * 2 + 3.0 * d * F);
    for (int g = 0; g < a->ng; g++) {
        double ng = a->goff[g + 1] - a->goff[g];
        fl += 2.0 * 2.0 * ng * (ng + 1) / 2 * c->head_dim * c->n_head;
    }
    if (a->rec >= 0) {   /* LoRA: R (in + out) per row and projection */
        const int jb = a->l - tr_layer_of(m, a->rec, 0);
        const double io[TR_NROLE] = { 0, (double)d + qd, (double)d + kvd, (double)d + kvd, (double)qd + d, 0,
                                      (double)d + F, (double)d + F, (double)F + d };
        for (int role = 0; role < TR_NROLE; role++) fl += 2.0 * n * m->lora.rank[a->rec][jb][role] * io[role];
    }
    return fl;
}

/* dout [n][d] -> dx [n][d] (written); weight gradients added. */
static void layer_bwd(tr_state *s, tr_model *mm, app_t *a, const real *dout, real *dx)
{
    const tr_model *m = s->m;
    const tr_config *c = &m->c;
    const int d = c->d, qd = c->n_head * c->head_dim, kvd = c->n_kv * c->head_dim, F = c->ff, n = a->n;
    const int b = m->map[a->l];
    if (n == 0) return;
    /* out = h + down(act) */
    proj_bwd(s, mm, a, TR_DOWN, a->act, dout, s->dact, 0, F, d);
    tr_swiglu_bwd(s->dgt, s->dup, s->dact, a->gt, a->up, (size_t)n * F);
    proj_bwd(s, mm, a, TR_GATE, a->xn2, s->dgt, s->dxn, 0, d, F);
    proj_bwd(s, mm, a, TR_UP, a->xn2, s->dup, s->dxn, 1, d, F);
    memcpy(s->dh, dout, sizeof(real) * (size_t)n * d);
    tr_rmsnorm_bwd(s->dh, 1, G(mm, m->blk[b][TR_NORM2]), s->dxn, a->h, W(m, m->blk[b][TR_NORM2]), a->r2, n, d);
    /* h = x + o(attn) */
    proj_bwd(s, mm, a, TR_O, a->ao, s->dh, s->dao, 0, qd, d);
    attn_job j = { s, a, s->dao };
    tr_parallel(a->ng * c->n_kv, attn_bwd_task, &j);
    tr_rope_apply(&s->rope, s->dq, n, c->n_head, c->head_dim, a->pos, -1);
    tr_rope_apply(&s->rope, s->dk, n, c->n_kv, c->head_dim, a->pos, -1);
    proj_bwd(s, mm, a, TR_Q, a->xn1, s->dq, s->dxn, 0, d, qd);
    proj_bwd(s, mm, a, TR_K, a->xn1, s->dk, s->dxn, 1, d, kvd);
    proj_bwd(s, mm, a, TR_V, a->xn1, s->dv, s->dxn, 1, d, kvd);
    memcpy(dx, s->dh, sizeof(real) * (size_t)n * d);
    tr_rmsnorm_bwd(dx, 1, G(mm, m->blk[b][TR_NORM1]), s->dxn, a->x, W(m, m->blk[b][TR_NORM1]), a->r1, n, d);
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                  */
/* ------------------------------------------------------------------------ */

static app_t *next_app(tr_state *s) { return &s->app[s->n_app++]; }

/* Run layers l0.. l0+cnt-1 on rows (gathered from src); the output stays in the last app. */
static app_t *run_layers(tr_state *s, int32_t l0, int32_t cnt, int32_t rec, const int32_t *rows, int32_t n,
                         const real *src)
{
    const int d = s->m->c.d;
    app_t *a = NULL;
    for (int32_t j = 0; j < cnt; j++) {
        app_t *prev = a;
        a = next_app(s);
        app_rows(s, a, l0 + j, rec, rows, n);
        for (int32_t i = 0; i < n; i++)
            memcpy(a->x + (size_t)i * d, prev ? prev->out + (size_t)i * d : src + (size_t)rows[i] * d,
                   sizeof(real) * (size_t)d);
        s->res.flops += layer_fwd(s, a);
    }
    return a;
}

static void scatter_out(tr_state *s, const app_t *a, real *dst)
{
    const int d = s->m->c.d;
    for (int32_t i = 0; i < a->n; i++)
        memcpy(dst + (size_t)a->rows[i] * d, a->out + (size_t)i * d, sizeof(real) * (size_t)d);
}

static real router_logit(const tr_model *m, int r, const real *x)
{
#ifndef TR_DOUBLE
    /* the library's own kernel, so that routing decisions tie-break alike */
    tensor w = { W(m, m->rtr[r]), 0, 1, m->c.d };
    float z;
    k_matmul(&w, x, &z, 1);
    return z;
#else
    const real *w = W(m, m->rtr[r]);
    real z = 0;
    for (int e = 0; e < m->c.d; e++) z += w[e] * x[e];
    return z;
#endif
}

typedef struct { real p; int32_t i; } rank_t;

static int cmp_rank(const void *a, const void *b)
{
    const rank_t *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static void expert_forward(tr_state *s)
{
    const tr_model *m = s->m;
    const tr_config *c = &m->c;
    const int d = c->d, T = s->T;
    int64_t agree = 0, judged = 0;
    rank_t *buf = malloc(sizeof *buf * (size_t)T);
    int32_t *rows = malloc(sizeof *rows * (size_t)s->BT);
    if (!buf || !rows) abort();   /* tools only */
    for (int r = 0; r < c->n_rec; r++) {
        rec_t *rc = &s->rec[r];
        if (r == 0) { rc->nc = s->BT; for (int32_t i = 0; i < s->BT; i++) rc->cand[i] = i; }
        else {
            const rec_t *pr = &s->rec[r - 1];
            rc->nc = pr->ns;
            for (int32_t t = 0; t < pr->ns; t++) rc->cand[t] = pr->cand[pr->scand[t]];
        }
        for (int32_t i = 0; i < rc->nc; i++) {
            real *xc = rc->xc + (size_t)i * d;
            memcpy(xc, s->X + (size_t)rc->cand[i] * d, sizeof(real) * (size_t)d);
            rc->z[i] = router_logit(m, r, xc);
            rc->p[i] = c->alpha * ((real)1 / ((real)1 + TR_EXP(-rc->z[i])));
            rc->sel[i] = 0;
        }
        s->res.flops += 2.0 * rc->nc * d;
        /* per sequence: candidates are contiguous in cand (ascending rows) */
        int64_t k_r = (int64_t)(c->cap[r] * (double)T);
        if (k_r < 1) k_r = 1;
        for (int32_t i0 = 0; i0 < rc->nc;) {
            int32_t seq = rc->cand[i0] / T, i1 = i0;
            while (i1 < rc->nc && rc->cand[i1] / T == seq) i1++;
            if (s->select == TR_SELECT_THRESHOLD) {
                for (int32_t i = i0; i < i1; i++)
                    rc->sel[i] = c->cap[r] == 1.0 || (real)1 / ((real)1 + TR_EXP(-rc->z[i])) >= (real)0.5;
            } else {
                int32_t nc = i1 - i0;
                for (int32_t i = 0; i < nc; i++) { buf[i].p = rc->p[i0 + i]; buf[i].i = i0 + i; }
                qsort(buf, (size_t)nc, sizeof *buf, cmp_rank);
                int64_t k = k_r < nc ? k_r : nc;
                for (int64_t t = 0; t < k; t++) rc->sel[buf[t].i] = 1;
            }
            i0 = i1;
        }
        rc->ns = 0;
        for (int32_t i = 0; i < rc->nc; i++)
            if (rc->sel[i]) { rc->scand[rc->ns] = i; rows[rc->ns++] = rc->cand[i]; s->depth[rc->cand[i]] = r + 1; }
        rc->app0 = s->n_app;
        s->n_cand_total[r] = rc->nc;
        /* aux BCE against the selection, over every candidate */
        double aux = 0;
        for (int32_t i = 0; i < rc->nc; i++) {
            double z = rc->z[i], t = rc->sel[i];
            aux += (z > 0 ? z : 0) - z * t + log1p(exp(-fabs(z)));
        }
        s->res.aux += rc->nc ? aux / rc->nc : 0;
        if (c->cap[r] < 1.0) {
            for (int32_t i = 0; i < rc->nc; i++) agree += (rc->z[i] >= 0) == (rc->sel[i] != 0);
            judged += rc->nc;
        }
        if (rc->ns == 0) continue;
        app_t *a = run_layers(s, tr_layer_of(m, r, 0), c->K, r, rows, rc->ns, s->X);
        for (int32_t t = 0; t < rc->ns; t++) {
            real *x = s->X + (size_t)rows[t] * d, p = rc->p[rc->scand[t]];
            const real *y = a->out + (size_t)t * d;
            for (int e = 0; e < d; e++) x[e] += p * y[e];   /* x + p * f(x) */
        }
    }
    s->res.router_acc = judged ? (double)agree / judged : 1.0;
    free(buf); free(rows);
}

static void token_forward(tr_state *s)
{
    const tr_model *m = s->m;
    const tr_config *c = &m->c;
    const int d = c->d, nr = c->n_rec;
    const int32_t BT = s->BT;
    int32_t *rows = malloc(sizeof *rows * (size_t)BT);
    if (!rows) abort();
    tr_linear_fwd(s->tz, s->X, W(m, m->rtr_tc), BT, d, nr);
    s->res.flops += 2.0 * BT * d * nr;
    memset(s->counts, 0, sizeof s->counts);
    double bal_P[TR_MAX_REC] = { 0 }, zl = 0;
    for (int32_t i = 0; i < BT; i++) {
        real *z = s->tz + (size_t)i * nr, *P = s->tP + (size_t)i * nr, mx = -INFINITY, sum = 0;
        for (int r = 0; r < nr; r++) if (z[r] > mx) mx = z[r];
        for (int r = 0; r < nr; r++) sum += TR_EXP(z[r] - mx);
        double lse = mx + log(sum);
        zl += lse * lse;
        for (int r = 0; r < nr; r++)
            P[r] = c->func == TR_FUNC_SOFTMAX ? c->alpha * (TR_EXP(z[r] - mx) / sum)
                                              : c->alpha * ((real)1 / ((real)1 + TR_EXP(-z[r])));
        int best = 0;
        real bq = -INFINITY;
        for (int r = 0; r < nr; r++) {
            real q = P[r] + (real)m->bias[r];   /* the bias is for selection only */
            if (q > bq) { bq = q; best = r; }
        }
        s->choice[i] = best;
        s->depth[i] = best + 1;
        s->counts[best]++;
        for (int r = 0; r < nr; r++) bal_P[r] += P[r];
    }
    for (int r = 0; r < nr; r++)
        s->res.bal += ((double)nr * s->counts[r] / BT) * (bal_P[r] / BT);
    s->res.zloss = zl / BT;
    memcpy(s->H1, s->X, sizeof(real) * (size_t)BT * d);
    memcpy(s->cur, s->X, sizeof(real) * (size_t)BT * d);
    for (int r = 0; r < nr; r++) {
        rec_t *rc = &s->rec[r];
        int32_t n = 0;
        for (int32_t i = 0; i < BT; i++) if (s->choice[i] >= r) rows[n++] = i;
        rc->ns = n;
        rc->app0 = s->n_app;
        if (!n) continue;
        app_t *a = run_layers(s, tr_layer_of(m, r, 0), c->K, r, rows, n, s->cur);
        for (int32_t t = 0; t < n; t++) {
            int32_t i = rows[t];
            const real *y = a->out + (size_t)t * d;
            if (s->choice[i] == r) {   /* finished: H1 + g f^(r+1)(H1) */
                real g = s->tP[(size_t)i * nr + r], *x = s->X + (size_t)i * d;
                for (int e = 0; e < d; e++) x[e] = s->H1[(size_t)i * d + e] + g * y[e];
            } else {                   /* goes deeper, ungated */
                memcpy(s->cur + (size_t)i * d, y, sizeof(real) * (size_t)d);
            }
        }
    }
    free(rows);
}

int tr_forward(const tr_model *m, tr_state *s, const int32_t *tokens, const int32_t *targets, int32_t B,
               int32_t T, int select, int want_logits, tr_result *res)
{
    const tr_config *c = &m->c;
    if (B < 1 || T < 1 || B > s->Bmax || T > s->Tmax || s->m != m) return -1;
    const int d = c->d;
    s->B = B; s->T = T; s->BT = B * T; s->select = select; s->n_app = 0;
    s->has_targets = targets != NULL;
    memset(&s->res, 0, sizeof s->res);
    (void)want_logits;
    for (int32_t i = 0; i < s->BT; i++) {
        if (tokens[i] < 0 || tokens[i] >= c->vocab) return -1;
        s->tokens[i] = tokens[i];
        s->targets[i] = targets ? targets[i] : -1;
        s->all_rows[i] = i;
        memcpy(s->X + (size_t)i * d, W(m, m->embd) + (size_t)tokens[i] * d, sizeof(real) * (size_t)d);
        s->depth[i] = c->router == TR_ROUTER_NONE ? c->n_rec : 0;
    }
    if (c->prelude) {
        app_t *a = run_layers(s, 0, c->prelude, -1, s->all_rows, s->BT, s->X);
        scatter_out(s, a, s->X);
    }
    if (c->router == TR_ROUTER_EXPERT) expert_forward(s);
    else if (c->router == TR_ROUTER_TOKEN) token_forward(s);
    else {
        for (int r = 0; r < c->n_rec; r++) {
            s->rec[r].app0 = s->n_app;
            app_t *a = run_layers(s, tr_layer_of(m, r, 0), c->K, r, s->all_rows, s->BT, s->X);
            scatter_out(s, a, s->X);
        }
    }
    if (c->coda) {
        app_t *a = run_layers(s, m->L - c->coda, c->coda, -1, s->all_rows, s->BT, s->X);
        scatter_out(s, a, s->X);
    }
    tr_rmsnorm_fwd(s->xf, s->rf, s->X, W(m, m->onorm), s->BT, d, c->eps);
    tr_linear_fwd(s->logits, s->xf, W(m, m->embd), s->BT, d, c->vocab);
    s->res.flops += 2.0 * s->BT * d * c->vocab;
    if (targets) s->res.ce = tr_xent(s->dlogits, s->logits, s->targets, s->BT, c->vocab, 1.0);
    s->res.total = s->res.ce;
    if (c->router == TR_ROUTER_EXPERT) s->res.total += c->aux_coef * s->res.aux;
    if (c->router == TR_ROUTER_TOKEN) s->res.total += c->bal_coef * s->res.bal + c->z_coef * s->res.zloss;
    for (int32_t i = 0; i < s->BT; i++) s->res.n_depth[s->depth[i] <= TR_MAX_REC ? s->depth[i] : TR_MAX_REC]++;
    if (res) *res = s->res;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                 */
/* ------------------------------------------------------------------------ */

/* Back through apps a0..a0+cnt-1 (one block on the same rows): dY [n][d] in,
 * dIn [n][d] out; they may be the same buffer (layer_bwd reads its dout
 * before it writes its dx). */
static void back_layers(tr_state *s, tr_model *mm, int32_t a0, int32_t cnt, const real *dY, real *dIn)
{
    const int d = s->m->c.d;
    if (dIn != dY) memcpy(dIn, dY, sizeof(real) * (size_t)s->app[a0].n * d);
    for (int32_t j = cnt - 1; j >= 0; j--) layer_bwd(s, mm, &s->app[a0 + j], dIn, dIn);
}

/* Layers that ran on every row (their rows are in row order): dX in place. */
static void back_all_rows(tr_state *s, tr_model *mm, int32_t a0, int32_t cnt)
{
    back_layers(s, mm, a0, cnt, s->dX, s->dX);
}

static void expert_backward(tr_state *s, tr_model *mm)
{
    const tr_model *m = s->m;
    const tr_config *c = &m->c;
    const int d = c->d;
    real *dY = s->dH1, *dIn = s->dH1;   /* [ns][d]; dIn overwrites dY after use */
    real *dp = malloc(sizeof(real) * (size_t)s->BT);
    if (!dp) abort();
    for (int r = c->n_rec - 1; r >= 0; r--) {
        rec_t *rc = &s->rec[r];
        const real *w = W(m, m->rtr[r]);
        real *gw = G(mm, m->rtr[r]);
        for (int32_t i = 0; i < rc->nc; i++) dp[i] = 0;
        if (rc->ns) {
            const app_t *last = &s->app[rc->app0 + c->K - 1];
            for (int32_t t = 0; t < rc->ns; t++) {
                int32_t ci = rc->scand[t];
                const real *dx = s->dX + (size_t)rc->cand[ci] * d, *y = last->out + (size_t)t * d;
                real p = rc->p[ci], acc = 0;
                for (int e = 0; e < d; e++) { dY[(size_t)t * d + e] = p * dx[e]; acc += dx[e] * y[e]; }
                dp[ci] = acc;
            }
            back_layers(s, mm, rc->app0, c->K, dY, dIn);
            for (int32_t t = 0; t < rc->ns; t++) {
                real *dx = s->dX + (size_t)rc->cand[rc->scand[t]] * d;
                for (int e = 0; e < d; e++) dx[e] += dIn[(size_t)t * d + e];
            }
        }
        /* router: gate path (selected) and the aux BCE (every candidate) */
        const double aux_scale = rc->nc ? c->aux_coef / (double)rc->nc : 0;
        for (int32_t i = 0; i < rc->nc; i++) {
            real sg = (real)1 / ((real)1 + TR_EXP(-rc->z[i]));
            real dz = dp[i] * c->alpha * sg * ((real)1 - sg) + (real)(aux_scale * (sg - (real)rc->sel[i]));
            const real *xc = rc->xc + (size_t)i * d;
            real *dx = s->dX + (size_t)rc->cand[i] * d;
            for (int e = 0; e < d; e++) { gw[e] += dz * xc[e]; dx[e] += dz * w[e]; }
        }
    }
    free(dp);
}

static void token_backward(tr_state *s, tr_model *mm)
{
    const tr_model *m = s->m;
    const tr_config *c = &m->c;
    const int d = c->d, nr = c->n_rec;
    const int32_t BT = s->BT;
    real *dg = malloc(sizeof(real) * (size_t)BT);
    if (!dg) abort();
    real *dH1 = s->dH1, *dcur = s->dcur;   /* dcur: gradient wrt cur (the trajectory), by row */
    memcpy(dH1, s->dX, sizeof(real) * (size_t)BT * d);
    for (int r = nr - 1; r >= 0; r--) {
        rec_t *rc = &s->rec[r];
        if (!rc->ns) continue;
        const app_t *last = &s->app[rc->app0 + c->K - 1];
        const app_t *first = &s->app[rc->app0];
        real *tmp = s->dB;   /* [ns][d] staging of the block's output gradient */
        for (int32_t t = 0; t < rc->ns; t++) {
            int32_t i = first->rows[t];
            const real *y = last->out + (size_t)t * d;
            if (s->choice[i] == r) {
                real g = s->tP[(size_t)i * nr + r], acc = 0;
                const real *dx = s->dX + (size_t)i * d;
                for (int e = 0; e < d; e++) { tmp[(size_t)t * d + e] = g * dx[e]; acc += dx[e] * y[e]; }
                dg[i] = acc;
            } else {
                memcpy(tmp + (size_t)t * d, dcur + (size_t)i * d, sizeof(real) * (size_t)d);
            }
        }
        back_layers(s, mm, rc->app0, c->K, tmp, tmp);
        for (int32_t t = 0; t < rc->ns; t++)
            memcpy(dcur + (size_t)first->rows[t] * d, tmp + (size_t)t * d, sizeof(real) * (size_t)d);
    }
    /* recursion 0 runs every token from H1 */
    for (size_t i = 0; i < (size_t)BT * d; i++) dH1[i] += dcur[i];
    /* router: dP from the gate, the balancing loss; then P -> z; z-loss */
    for (int32_t i = 0; i < BT; i++) {
        real *z = s->tz + (size_t)i * nr, *dz = s->dtz + (size_t)i * nr;
        real dP[TR_MAX_REC];
        for (int r = 0; r < nr; r++)
            dP[r] = (real)(c->bal_coef * ((double)nr * s->counts[r] / BT) / BT);
        dP[s->choice[i]] += dg[i];
        real mx = -INFINITY, sum = 0, sm[TR_MAX_REC];
        for (int r = 0; r < nr; r++) if (z[r] > mx) mx = z[r];
        for (int r = 0; r < nr; r++) { sm[r] = TR_EXP(z[r] - mx); sum += sm[r]; }
        for (int r = 0; r < nr; r++) sm[r] /= sum;
        real lse = mx + log(sum);
        if (c->func == TR_FUNC_SOFTMAX) {
            /* P = a s: dz_r = a s_r (dP_r - sum_k s_k dP_k) */
            for (int r = 0; r < nr; r++) {
                real sdot = 0;
                for (int k = 0; k < nr; k++) sdot += sm[k] * dP[k];
                dz[r] = c->alpha * sm[r] * (dP[r] - sdot);
            }
        } else {
            for (int r = 0; r < nr; r++) {
                real sg = (real)1 / ((real)1 + TR_EXP(-z[r]));
                dz[r] = dP[r] * c->alpha * sg * ((real)1 - sg);
            }
        }
        for (int r = 0; r < nr; r++) dz[r] += (real)(c->z_coef * 2.0 * lse * sm[r] / BT);
    }
    tr_linear_bwd(dH1, 1, G(mm, m->rtr_tc), s->dtz, s->H1, W(m, m->rtr_tc), BT, d, nr);
    memcpy(s->dX, dH1, sizeof(real) * (size_t)BT * d);
    free(dg);
}

void tr_backward(tr_model *mm, tr_state *s)
{
    const tr_model *m = s->m;
    const tr_config *c = &m->c;
    const int d = c->d;
    if (!s->has_targets) return;
    /* logits = xf E^T: dE += dlogits^T xf, dxf = dlogits E */
    tr_linear_bwd(s->dA, 0, G(mm, m->embd), s->dlogits, s->xf, W(m, m->embd), s->BT, d, c->vocab);
    tr_rmsnorm_bwd(s->dX, 0, G(mm, m->onorm), s->dA, s->X, W(m, m->onorm), s->rf, s->BT, d);
    int32_t a_end = s->n_app;
    if (c->coda) {
        back_all_rows(s, mm, a_end - c->coda, c->coda);
        a_end -= c->coda;
    }
    if (c->router == TR_ROUTER_EXPERT) expert_backward(s, mm);
    else if (c->router == TR_ROUTER_TOKEN) token_backward(s, mm);
    else
        for (int r = c->n_rec - 1; r >= 0; r--) back_all_rows(s, mm, s->rec[r].app0, c->K);
    if (c->prelude) back_all_rows(s, mm, 0, c->prelude);
    real *gE = G(mm, m->embd);
    for (int32_t i = 0; i < s->BT; i++) {
        real *ge = gE + (size_t)s->tokens[i] * d;
        const real *dx = s->dX + (size_t)i * d;
        for (int e = 0; e < d; e++) ge[e] += dx[e];
    }
}

void tr_update_bias(tr_model *m, const tr_state *s)
{
    const int nr = m->c.n_rec;
    if (m->c.router != TR_ROUTER_TOKEN || !m->c.loss_free) return;
    double mean = 0, ratio[TR_MAX_REC];
    for (int r = 0; r < nr; r++) { ratio[r] = (double)s->counts[r] / s->BT; mean += ratio[r] / nr; }
    for (int r = 0; r < nr; r++) {
        double e = mean - ratio[r];
        m->bias[r] += m->c.bias_rate * (float)((e > 0) - (e < 0));
    }
}
