/* decode.c - recursion scheduling: one forward pass over a batch.
 *
 *   x = embed(tokens)
 *   prelude layers (all rows)
 *   expert-choice: for r in 0..N_r-1:
 *       z = router_r(x[active]); choose sel ⊆ active (router.c)
 *       y = block_r(x[sel]);  x[sel] += gate * y     (block output includes its residuals)
 *       active = sel
 *     (where recursion r caches every token's K/V, kv_caches_every_row, the
 *     block runs over every row and only sel's outputs are used)
 *   token-choice: i_t = argmax router(x); recursion r runs rows with i_t >= r,
 *       intermediate recursions ungated; x = x_in + gate * y at the token's last one
 *     (where r caches every row, rows past their depth run too, from the input
 *     of their last recursion, for their K/V)
 *   no router: every recursion (up to a FORCED depth), ungated
 *   coda layers (all rows); final RMSNorm; logits for the rows that asked
 *
 * The whole call is one KV transaction: on any error (full cache, abort) the
 * appended cells are removed again, and the outputs of the previous call
 * stay as they were (results are staged and published at the end). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "context.h"
#include "embed_output.h"
#include "kernels.h"
#include "layer.h"
#include "status.h"

static void capture(mor_context *c, int32_t *b, int32_t n)
{
    if (c->st_hidden) {
        size_t row = (size_t)c->model->n_embd;
        memcpy(c->st_hidden + (size_t)(*b) * c->params.n_batch * row, c->x, sizeof(float) * row * (size_t)n);
    }
    (*b)++;
}

static mor_status check_abort(mor_context *c)
{
    if (c->params.abort_callback && c->params.abort_callback(c->params.abort_user_data))
        return err_set(MOR_E_ABORTED, "decode aborted by the abort callback");
    return MOR_OK;
}

/* Gather rows idx of src into c->y with their positions, sequences and RoPE
 * cos/sin (into ls.cs_own, for run_block). */
static void gather(mor_context *c, const mor_batch *b, const float *src, const int32_t *idx, int32_t n)
{
    const int32_t d = c->model->n_embd, hd = c->model->head_dim;
    for (int32_t i = 0; i < n; i++) {
        memcpy(c->y + (size_t)i * d, src + (size_t)idx[i] * d, sizeof(float) * (size_t)d);
        memcpy(c->ls.cs_own + (size_t)i * hd, c->cs + (size_t)idx[i] * hd, sizeof(float) * (size_t)hd);
        c->pos[i] = b->pos[idx[i]];
        c->seq[i] = b->seq[idx[i]];
    }
}

/* The K layers of recursion r over c->y (n rows gathered by gather()). */
static mor_status run_block(mor_context *c, int32_t r, int32_t n)
{
    const mor_model *m = c->model;
    for (int32_t j = 0; j < m->base_depth; j++) {
        c->ls.rope_cs = c->ls.cs_own;
        mor_status st = layer_forward(m, model_layer_of(m, r, j), c->kv, &c->ls, c->y, c->pos, c->seq, n);
        if (st) return st;
    }
    return MOR_OK;
}

static mor_status run_all_rows(mor_context *c, const mor_batch *b, int32_t l)
{
    c->ls.rope_cs = c->cs;
    return layer_forward(c->model, l, c->kv, &c->ls, c->x, b->pos, b->seq, b->n);
}

static mor_status expert_recursions(mor_context *c, const mor_batch *b, int32_t *bnd)
{
    const mor_model *m = c->model;
    const int32_t n = b->n, d = m->n_embd, nr = m->n_rec;
    const int32_t cap = router_depth_cap(c->router);
    for (int32_t i = 0; i < n; i++) c->active[i] = 1;
    for (int32_t r = 0; r < nr; r++) {
        mor_status st;
        capture(c, bnd, n);
        if ((st = check_abort(c))) return st;
        if (r >= cap) memset(c->active, 0, (size_t)n);   /* past the cap no router is evaluated */
        for (int32_t i = 0; i < n; i++) {
            float *zi = c->z + (size_t)i * nr;
            if (!c->active[i]) { zi[r] = NAN; c->st_scores[(size_t)i * nr + r] = NAN; continue; }
            zi[r] = router_expert_logit(m, r, c->x + (size_t)i * d, c->rtmp);
            c->g[i] = router_func(m, zi[r]);
            c->p[i] = router_gate(m, zi[r]);
            c->st_scores[(size_t)i * nr + r] = c->p[i];
        }
        router_select_expert(c->router, r, n, c->active, c->g, c->p, b->seq, c->seq_rows,
                             c->done, c->rank, c->sel);
        /* The block runs over the selected rows, and over the others too when
         * recursion r caches every token's K/V (kv_caches_every_row: KV
         * sharing at r = 0, dense at every r) or in lockstep; their outputs
         * are discarded, and lockstep's own extra rows store no K/V (done,
         * router scratch free again, indexed by gathered row). */
        const int every = r < cap && kv_caches_every_row(c->kv, r);
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++) {
            if (c->sel[i]) c->depth[i] = r + 1;
            if (c->sel[i] || every || c->lockstep) { c->done[k] = !c->sel[i] && !every; c->idx[k++] = i; }
        }
        if (k) {
            gather(c, b, c->x, c->idx, k);
            c->ls.skip_store = c->lockstep ? c->done : NULL;
            st = run_block(c, r, k);
            c->ls.skip_store = NULL;
            if (st) return st;
            for (int32_t t = 0; t < k; t++) {
                if (!c->sel[c->idx[t]]) continue;
                float *xi = c->x + (size_t)c->idx[t] * d;
                const float *yt = c->y + (size_t)t * d;
                float w = m->gating_additive ? 1.0f : c->p[c->idx[t]];
                for (int32_t e = 0; e < d; e++) xi[e] += w * yt[e];   /* x + w * f(x) */
            }
        }
        memcpy(c->active, c->sel, (size_t)n);
    }
    return MOR_OK;
}

static mor_status token_recursions(mor_context *c, const mor_batch *b, int32_t *bnd)
{
    const mor_model *m = c->model;
    const int32_t n = b->n, d = m->n_embd, nr = m->n_rec, cap = router_depth_cap(c->router);
    capture(c, bnd, n);
    for (int32_t i = 0; i < n; i++) {
        float *zi = c->z + (size_t)i * nr, *pi = c->st_scores + (size_t)i * nr;
        router_token_logits(m, c->x + (size_t)i * d, zi, c->rtmp);
        if (m->router_func == ROUTER_FUNC_SOFTMAX) {
            memcpy(pi, zi, sizeof(float) * (size_t)nr);
            k_softmax(pi, nr);
            for (int32_t t = 0; t < nr; t++) pi[t] *= m->alpha;
        } else {
            for (int32_t t = 0; t < nr; t++) pi[t] = router_gate(m, zi[t]);
        }
        c->depth[i] = router_choose_token(c->router, pi) + 1;
        c->p[i] = pi[c->depth[i] - 1];                       /* gate without the bias */
    }
    /* cur (c->h1) follows each token's own trajectory; x keeps H^1 for the output */
    memcpy(c->h1, c->x, sizeof(float) * (size_t)n * d);
    for (int32_t r = 0; r < nr; r++) {
        mor_status st;
        if ((st = check_abort(c))) return st;
        /* as in expert_recursions: rows past their depth run too where r caches every row */
        const int every = r < cap && kv_caches_every_row(c->kv, r);
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (c->depth[i] > r || every || c->lockstep) { c->done[k] = c->depth[i] <= r && !every; c->idx[k++] = i; }
        if (!k) break;
        gather(c, b, c->h1, c->idx, k);
        c->ls.skip_store = c->lockstep ? c->done : NULL;
        st = run_block(c, r, k);
        c->ls.skip_store = NULL;
        if (st) return st;
        for (int32_t t = 0; t < k; t++) {
            int32_t i = c->idx[t];
            const float *yt = c->y + (size_t)t * d;
            if (c->depth[i] <= r) continue;
            if (c->depth[i] == r + 1) {     /* finished here: H^1 + g * f^(r+1)(H^1) */
                float w = m->gating_additive ? 1.0f : c->p[i];
                float *xi = c->x + (size_t)i * d;
                for (int32_t e = 0; e < d; e++) xi[e] += w * yt[e];
            } else {                        /* goes deeper: ungated */
                memcpy(c->h1 + (size_t)i * d, yt, sizeof(float) * (size_t)d);
            }
        }
    }
    return MOR_OK;
}

/* Models without routers: every recursion (up to the depth cap), ungated.
 * Each layer is a module of its own for the capture points. */
static mor_status plain_recursions(mor_context *c, const mor_batch *b, int32_t *bnd)
{
    const mor_model *m = c->model;
    int32_t cap = router_depth_cap(c->router);
    for (int32_t i = 0; i < b->n; i++) c->depth[i] = cap;
    for (int32_t r = 0; r < m->n_rec; r++) {
        mor_status st;
        if ((st = check_abort(c))) return st;
        for (int32_t j = 0; j < m->base_depth; j++) {
            capture(c, bnd, b->n);
            if (r < cap && (st = run_all_rows(c, b, model_layer_of(m, r, j)))) return st;
        }
    }
    return MOR_OK;
}

static mor_status validate(mor_context *c, const mor_batch *b)
{
    const mor_model *m = c->model;
    const int32_t ns = (int32_t)c->params.n_seq_max;
    const int32_t max_pos = c->params.max_pos > 0 ? c->params.max_pos
                          : c->params.max_pos < 0 ? INT32_MAX : m->n_ctx_train;
    if (b->n <= 0) return err_set(MOR_E_INVALID_ARG, "mor_decode: empty batch");
    if (b->n > (int32_t)c->params.n_batch)
        return err_set(MOR_E_INVALID_ARG, "mor_decode: %d tokens exceed n_batch %u", b->n, c->params.n_batch);
    for (int32_t s = 0; s < ns; s++) c->seq_rows[s] = 0;
    for (int32_t i = 0; i < b->n; i++) {
        if (b->token[i] < 0 || b->token[i] >= m->n_vocab)
            return err_set(MOR_E_OUT_OF_RANGE, "mor_decode: token %d at row %d is out of range [0, %d)",
                           b->token[i], i, m->n_vocab);
        if (b->seq[i] < 0 || b->seq[i] >= ns)
            return err_set(MOR_E_OUT_OF_RANGE, "mor_decode: sequence %d at row %d is out of range [0, %d)",
                           b->seq[i], i, ns);
        if (b->pos[i] < 0) return err_set(MOR_E_POSITION, "mor_decode: negative position at row %d", i);
        if (b->pos[i] >= max_pos)
            return err_set(MOR_E_POSITION, "mor_decode: position %d at row %d is past the maximum context %d "
                           "(mor_context_params.max_pos)", b->pos[i], i, max_pos);
        c->seq_rows[b->seq[i]]++;
    }
    /* positions strictly increase within each sequence, after what is cached */
    for (int32_t i = 0; i < b->n; i++) {
        mor_pos last = c->kv->seq_pos_max[b->seq[i]];
        for (int32_t j = 0; j < i; j++)
            if (b->seq[j] == b->seq[i] && b->pos[j] > last) last = b->pos[j];
        if (b->pos[i] <= last)
            return err_set(MOR_E_POSITION, "mor_decode: row %d (sequence %d) has position %d, but position %d "
                           "is already cached or earlier in the batch", i, b->seq[i], b->pos[i], last);
    }
    int32_t want = 0;
    for (int32_t i = 0; i < b->n; i++) want += b->want[i];
    if (want > c->cap_logits) {   /* grow the output buffer before anything changes */
        float *nl = realloc(c->logits, sizeof(float) * (size_t)want * m->n_vocab);
        if (!nl) return err_set(MOR_E_NOMEM, "cannot allocate logits for %d rows", want);
        c->logits = nl; c->cap_logits = want;
    }
    return MOR_OK;
}

static mor_status forward(mor_context *c, const mor_batch *b)
{
    const mor_model *m = c->model;
    const int32_t n = b->n, d = m->n_embd, nr = m->n_rec;
    mor_status st;
    int32_t bnd = 0;

    for (int32_t i = 0; i < n; i++) {
        if (kv_append(c->kv, -1, b->seq[i], b->pos[i]) < 0)
            return err_set(MOR_E_KV_FULL, "KV cache full (%d cells)", c->kv->n_ctx);
        model_embed_row(m, b->token[i], c->x + (size_t)i * d);
        c->depth[i] = 0;
        for (int32_t r = 0; r < nr; r++) {
            c->z[(size_t)i * nr + r] = NAN;
            c->st_scores[(size_t)i * nr + r] = NAN;
        }
    }
    layer_rope_cs(m, &c->ls, b->pos, n, c->cs);   /* once per decode, for every layer */
    for (int32_t l = 0; l < m->prelude; l++) {
        capture(c, &bnd, n);
        if ((st = run_all_rows(c, b, l))) return st;
    }
    switch (m->router_type) {
    case MOR_ROUTER_TYPE_EXPERT: st = expert_recursions(c, b, &bnd); break;
    case MOR_ROUTER_TYPE_TOKEN:  st = token_recursions(c, b, &bnd); break;
    default:                     st = plain_recursions(c, b, &bnd); break;
    }
    if (st) return st;
    if ((st = check_abort(c))) return st;
    for (int32_t l = m->n_layer - m->coda; l < m->n_layer; l++) {
        capture(c, &bnd, n);
        if ((st = run_all_rows(c, b, l))) return st;
    }
    /* Nothing can fail from here on: publish into the outputs directly. */
    for (int32_t i = 0; i < n; i++)
        model_output_norm(m, c->x + (size_t)i * d, c->x + (size_t)i * d);
    capture(c, &bnd, n);
    /* the rows that want logits, packed, through one pass over the output matrix */
    int32_t slot = 0;
    for (int32_t i = 0; i < n; i++) {
        c->logit_row[i] = b->want[i] ? slot : -1;
        if (b->want[i]) memcpy(c->y + (size_t)slot++ * d, c->x + (size_t)i * d, sizeof(float) * (size_t)d);
    }
    if (slot) model_logits(m, &c->ls.exec, c->y, slot, c->logits);
    return MOR_OK;
}

mor_status mor_decode(mor_context *c, const mor_batch *b)
{
    if (!c || !b) return err_set(MOR_E_INVALID_ARG, "mor_decode: NULL %s", c ? "batch" : "context");
    mor_status st = validate(c, b);
    if (st) return st;
    kv_begin(c->kv);
    st = forward(c, b);
    if (st) { kv_rollback(c->kv); return st; }
    kv_commit(c->kv);
    c->n_rows = b->n;
    router_publish(c->router, b->n, c->depth, c->st_scores, c->z);
    if (c->st_hidden) {
        float *t = c->hidden; c->hidden = c->st_hidden; c->st_hidden = t;
    }
    err_clear();
    return MOR_OK;
}

const float *mor_get_logits(mor_context *c, int32_t i)
{
    if (!c || i < 0 || i >= c->n_rows || c->logit_row[i] < 0) return NULL;
    return c->logits + (size_t)c->logit_row[i] * c->model->n_vocab;
}

const float *mor_get_hidden(mor_context *c, int32_t bnd, int32_t i)
{
    if (!c || !c->hidden || i < 0 || i >= c->n_rows || bnd < 0 || bnd >= c->n_boundaries) return NULL;
    return c->hidden + ((size_t)bnd * c->params.n_batch + (size_t)i) * c->model->n_embd;
}
