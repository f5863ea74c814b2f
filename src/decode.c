/* decode.c - mor_decode: one forward pass over a batch, as one KV
 * transaction around the recursion engine (recursion.h):
 *
 *   validate the batch (nothing has changed if it fails)
 *   enter every row: embedding, the unique first layers
 *   until every row has exited: the verdicts for its next recursion, then a
 *       pass of the shared block over the rows that run it
 *   the unique last layers, the final norm, logits for the rows that asked
 *
 * On any error (full cache, abort) the cells appended are removed again and
 * the outputs of the previous call stay as they were: logits, depths and
 * hidden states are staged and published only once nothing can fail. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "context.h"
#include "kernels.h"
#include "recursion.h"
#include "status.h"

/* The capture points of mor_get_hidden: every row's hidden state, in batch
 * order, into the staged buffer's next boundary. */
typedef struct { mor_context *c; int32_t bnd; } capture_state;

static void capture_gathered(void *ud, const float *gx, const int32_t *list, int32_t n)
{
    capture_state *cs = ud;
    const size_t d = (size_t)cs->c->model->n_embd;
    float *dst = cs->c->st_hidden + (size_t)cs->bnd++ * cs->c->params.n_batch * d;
    for (int32_t t = 0; t < n; t++) memcpy(dst + (size_t)list[t] * d, gx + (size_t)t * d, sizeof(float) * d);
}

static void capture_rows(capture_state *cs, int32_t n)
{
    if (!cs->c->st_hidden) return;
    const rec_engine *e = &cs->c->eng;
    const size_t d = (size_t)cs->c->model->n_embd;
    float *dst = cs->c->st_hidden + (size_t)cs->bnd++ * cs->c->params.n_batch * d;
    for (int32_t i = 0; i < n; i++) memcpy(dst + (size_t)i * d, rec_x(e, i), sizeof(float) * d);
}

static mor_status validate(mor_context *c, const mor_batch *b)
{
    const mor_model *m = c->model;
    const int32_t ns = (int32_t)c->params.n_seq_max;
    const int32_t max_pos = context_max_pos(c);
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
    if (want > (int32_t)c->params.n_outputs)
        return err_set(MOR_E_INVALID_ARG, "mor_decode: %d rows ask for logits, more than n_outputs %u "
                       "(mor_context_params.n_outputs)", want, c->params.n_outputs);
    return MOR_OK;
}

static mor_status forward(mor_context *c, const mor_batch *b)
{
    const mor_model *m = c->model;
    rec_engine *e = &c->eng;
    const int32_t n = b->n, nr = m->n_rec;
    capture_state cap = { c, 0 };
    mor_status st;
    e->capture = c->st_hidden ? capture_gathered : NULL;
    e->capture_ud = &cap;
    e->capture_in_pass = m->router_type == MOR_ROUTER_TYPE_NONE;   /* each layer is a module of its own */
    rec_reset(e);   /* the k-th row entered is row k - 1: rows are batch indices */
    for (int32_t i = 0; i < n; i++)
        if ((st = rec_enter(e, b->token[i], b->pos[i], b->seq[i], i, &c->idx[i]))) return st;
    if ((st = rec_layers(e, c->idx, n, 0, m->prelude))) return st;
    if (m->router_type == MOR_ROUTER_TYPE_TOKEN) capture_rows(&cap, n);
    for (int32_t r = 0; r < nr; r++) {
        if (m->router_type == MOR_ROUTER_TYPE_EXPERT) capture_rows(&cap, n);
        /* the rows that have not exited, all at recursion r, in batch order */
        rec_decide(e, c->pos, rec_runnable(e, c->pos), c->seq_rows);
        const int32_t np = rec_runnable(e, c->pos);
        if (!np && e->capture_in_pass)   /* past the depth cap: the points are there all the same */
            for (int32_t j = 0; j < m->base_depth; j++) capture_rows(&cap, n);
        if ((st = rec_pass(e, c->pos, np))) return st;
    }
    /* the rows that want logits, packed, through one pass over the output matrix */
    int32_t n_out = 0;
    for (int32_t i = 0; i < n; i++)
        if (b->want[i]) c->seq[n_out++] = i;
    if ((st = rec_finish(e, c->idx, n, c->seq, n_out, NULL, c->logits))) return st;
    for (int32_t i = 0, o = 0; i < n; i++)   /* published: nothing failed */
        context_stage_row(c, i, i, b->want[i] ? o++ : -1);
    return MOR_OK;
}

mor_status decode_run(mor_context *c, const mor_batch *b)
{
    mor_status st = validate(c, b);
    return st ? st : forward(c, b);
}

const float *decode_staged_logits(const mor_context *c, int32_t i)
{
    return c->logit_row[i] < 0 ? NULL : c->logits + (size_t)c->logit_row[i] * c->model->n_vocab;
}

mor_status mor_decode(mor_context *c, const mor_batch *b)
{
    if (!c || !b) return err_set(MOR_E_INVALID_ARG, "mor_decode: NULL %s", c ? "batch" : "context");
    kv_begin(c->kv);
    mor_status st = decode_run(c, b);
    if (st) { kv_rollback(c->kv); return st; }
    kv_commit(c->kv);
    decode_publish(c, b);
    return MOR_OK;
}

void decode_publish(mor_context *c, const mor_batch *b)
{
    c->n_rows = b->n;
    memcpy(c->row_seq, b->seq, sizeof(int32_t) * (size_t)b->n);
    router_publish(c->router, b->n, c->depth, c->st_scores, c->z);
    if (c->st_hidden) {
        float *t = c->hidden; c->hidden = c->st_hidden; c->st_hidden = t;
    }
    err_clear();
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
