/* speculate.c - mor_speculate: self-speculative decoding by recursion depth,
 * the recursion engine's third caller (beside mor_decode and depth-wise
 * serving). One call is one KV transaction:
 *
 *   draft   the input token, then each draft, through the unique first
 *           layers and the recursions below the draft depth D, exactly as
 *           plain decoding runs them (one row at a time, the router's own
 *           verdicts); each row's recursion state is kept in the engine.
 *           The draft's next token is drawn from logits taken from that
 *           partial state (the unique last layers run on it, and their K/V
 *           are taken back before the verify).
 *   verify  every row resumes at recursion D: the deeper recursions of all
 *           n_draft + 1 rows in one pass per recursion (matrix-matrix), then
 *           the last layers and the logits of every row.
 *   accept  position by position, the caller's sampler (and grammar) picks
 *           the token from the verified logits, as plain decoding would; the
 *           first token that differs from the draft ends the step. The cells
 *           of the inputs after it are taken back.
 *
 * Why it is exact: under causal routing a token's recursion-r state depends
 * only on its own input and on the recursion-r K/V of the tokens before it.
 * The draft computes recursions 0..D-1 of each input as plain decoding does
 * (the same rows, the same routers, the same cache cells in the same
 * order); the verify computes the rest, and the kernels' results do not
 * depend on how many rows a call has (kernels.h). So a verified row whose
 * input equals the token plain decoding would have fed gets plain
 * decoding's logits, bit for bit, and the sampler, fed the same logits in
 * the same order, draws the same tokens. */
#include <stdlib.h>
#include <string.h>
#include "context.h"
#include "quant.h"
#include "sampler.h"
#include "kernels.h"
#include "status.h"

/* Recursions [r0, r1) of the rows of list that still recurse, one verdict
 * and one pass per recursion (as mor_decode runs them). */
static mor_status recurse(rec_engine *e, const int32_t *list, int32_t n, int32_t r0, int32_t r1, int32_t *tmp)
{
    for (int32_t r = r0; r < r1; r++) {
        int32_t k = rec_recursing(e, list, n, tmp);
        if (!k) break;
        rec_decide(e, tmp, k, NULL);
        k = rec_recursing(e, tmp, k, tmp);
        mor_status st = rec_pass(e, tmp, k);
        if (st) return st;
    }
    return MOR_OK;
}

/* The drafts' output matrix: a Q8_0 copy of a float one (a quarter of F32's
 * bytes, half of F16's: the output matrix is a large share of what a draft
 * reads, and a draft only proposes), made once per context on the first
 * call; the model's own when it is already 8-bit or less. */
static mor_status draft_head(mor_context *c, const tensor **out)
{
    const tensor *o = &c->model->output;
    *out = o;
    if ((o->type != GGML_F32 && o->type != GGML_F16 && o->type != GGML_BF16) || o->cols % QK) return MOR_OK;
    if (!c->draft_mem) {
        const size_t rb = (size_t)tensor_row_bytes(GGML_Q8_0, o->cols), sb = (size_t)tensor_row_bytes(o->type, o->cols);
        unsigned char *mem = malloc(rb * (size_t)o->rows);
        float *row = malloc(sizeof(float) * (size_t)o->cols);
        if (!mem || !row) {
            free(mem); free(row);
            return err_set(MOR_E_NOMEM, "mor_speculate: no memory for the drafts' Q8_0 output matrix (%zu bytes)",
                           rb * (size_t)o->rows);
        }
        for (int64_t r = 0; r < o->rows; r++) {
            dequant_row(o->type, (const unsigned char *)o->data + (size_t)r * sb, row, o->cols);
            quant_row_q8_0(row, (block_q8_0 *)(mem + (size_t)r * rb), o->cols);
        }
        free(row);
        c->draft_mem = mem;
        c->draft_out = (tensor){ mem, GGML_Q8_0, o->rows, o->cols };
    }
    *out = &c->draft_out;
    return MOR_OK;
}

static mor_status check(const mor_context *c, mor_seq_id seq, mor_token token, mor_pos pos, int32_t n_draft,
                        int32_t depth, const mor_sampler *smpl, const mor_token *out, int32_t n_max,
                        const int32_t *n_out)
{
    const mor_model *m = c->model;
    const int32_t max_pos = context_max_pos(c);
    if (!smpl || !out || !n_out || n_max < 1 || n_draft < 0)
        return err_set(MOR_E_INVALID_ARG, "mor_speculate: NULL sampler or output, n_max < 1 or n_draft < 0");
    if (c->params.flags & MOR_CTX_CAPTURE_HIDDEN)
        return err_set(MOR_E_UNSUPPORTED, "mor_speculate: the context captures hidden states (use mor_decode)");
    if (router_mode(c->router) == MOR_ROUTE_TOPK)
        return err_set(MOR_E_UNSUPPORTED, "mor_speculate: TOPK routing is not causal; use THRESHOLD or FORCED");
    if (depth < 1 || depth > m->n_rec)
        return err_set(MOR_E_OUT_OF_RANGE, "mor_speculate: draft depth %d out of range [1, %d]", depth, m->n_rec);
    if (token < 0 || token >= m->n_vocab)
        return err_set(MOR_E_OUT_OF_RANGE, "mor_speculate: token %d out of range [0, %d)", token, m->n_vocab);
    if (seq < 0 || seq >= (int32_t)c->params.n_seq_max)
        return err_set(MOR_E_OUT_OF_RANGE, "mor_speculate: sequence %d out of range [0, %u)", seq,
                       c->params.n_seq_max);
    if (pos < 0 || pos <= c->kv->seq_pos_max[seq])
        return err_set(MOR_E_POSITION, "mor_speculate: position %d is not after the %d cached for sequence %d",
                       pos, c->kv->seq_pos_max[seq], seq);
    if (pos >= max_pos)
        return err_set(MOR_E_POSITION, "mor_speculate: position %d is past the maximum context %d", pos, max_pos);
    return MOR_OK;
}

/* The draft depth in effect: D, or every recursion when D reaches the
 * router's depth cap (no deeper recursion is left to verify). */
static int32_t spec_depth(const mor_context *c, int32_t D)
{
    return D < router_depth_cap(c->router) ? D : c->model->n_rec;
}

mor_status spec_run(mor_context *c, mor_seq_id seq, mor_token token, mor_pos pos, int32_t n, int32_t D,
                    mor_sampler *smpl, int coupled, const spec_bufs *b)
{
    const tensor *head = NULL;
    mor_status st = draft_head(c, &head);
    if (st) return st;
    const mor_model *m = c->model;
    rec_engine *e = &c->eng;
    const int32_t nv = m->n_vocab, nr = m->n_rec;
    D = spec_depth(c, D);
    e->capture = NULL; e->capture_in_pass = 0;
    /* Coupled drafts are drawn by the caller's sampler itself, then taken
     * back: a draft at position k uses the random number the real draw there
     * will use when the drafts before it were taken, so it lands on the same
     * token whenever the draft logits are close enough (greedy: the argmax).
     * With a grammar (not coupled), the argmax. */
    sampler_state saved;
    if (coupled) sampler_save(smpl, &saved, b->hist, n);
    mor_token tok = token;
    for (int32_t k = 0; k <= n && !st; k++) {   /* draft */
        if ((st = rec_enter(e, tok, pos + k, seq, k, &b->rows[k]))) break;
        if ((st = rec_layers(e, &b->rows[k], 1, 0, m->prelude))) break;
        if ((st = recurse(e, &b->rows[k], 1, 0, D, b->tmp))) break;
        if (k == n) break;
        if ((st = rec_finish(e, &b->rows[k], 1, (const int32_t[]){ 0 }, 1, head, e->vocab))) break;
        if (!coupled || mor_sampler_sample(smpl, e->vocab, nv, &tok)) tok = sampler_argmax(e->vocab, nv);
        b->drafts[k] = tok;
    }
    if (coupled) sampler_restore(smpl, &saved, b->hist, n);
    if (st) return st;
    /* verify: the last layers' draft K/V go; every row to its own depth */
    kv_unappend(c->kv, m->n_layer - m->coda, m->n_layer, 0, seq, pos);
    if (D < nr && (st = recurse(e, b->rows, n + 1, D, nr, b->tmp))) return st;
    for (int32_t k = 0; k <= n; k++) b->tmp[k] = k;
    return rec_finish(e, b->rows, n + 1, b->tmp, n + 1, NULL, b->logits);
}

int32_t spec_accept(const mor_token *drafts, int32_t n, spec_draw_fn draw, void *ud, int32_t *n_match)
{
    int32_t k = 0, acc = 0;
    for (; k <= n; k++) {
        mor_token t;
        const int r = draw(ud, k, &t);
        if (r < 0) break;
        const int match = k < n && t == drafts[k];
        acc += match;
        if (!match || r > 0) { k++; break; }
    }
    *n_match = acc;
    return k;
}

/* mor_speculate's draw: the caller's sampler (and grammar) on position k's
 * logits, into out[k]; the output ends at the EOS or where the grammar must. */
typedef struct {
    const float *logits;
    float       *masked;
    int32_t      nv;
    mor_sampler *smpl;
    mor_grammar *g;
    mor_token    eos, *out;
} spec_draw_ctx;

static int spec_draw(void *ud, int32_t k, mor_token *t)
{
    spec_draw_ctx *d = ud;
    const float *from = d->logits + (size_t)k * d->nv;
    if (d->g) {
        memcpy(d->masked, from, sizeof(float) * (size_t)d->nv);
        if (mor_grammar_apply(d->g, d->masked, d->nv)) return -1;
        from = d->masked;
    }
    if (mor_sampler_sample(d->smpl, from, d->nv, t)) return -1;
    if (d->g) mor_grammar_accept(d->g, *t);   /* allowed: the mask let it through */
    d->out[k] = *t;
    return *t == d->eos || (d->g && (mor_grammar_state(d->g) & MOR_GRAMMAR_MUST_END));
}

mor_status mor_speculate(mor_context *c, mor_seq_id seq, mor_token token, mor_pos pos, int32_t n_draft,
                         int32_t draft_depth, mor_sampler *smpl, mor_grammar *g, mor_token *out, int32_t n_max,
                         int32_t *n_out, int32_t *n_accepted)
{
    if (!c) return err_set(MOR_E_INVALID_ARG, "mor_speculate: NULL context");
    mor_status st = check(c, seq, token, pos, n_draft, draft_depth, smpl, out, n_max, n_out);
    if (st) return st;
    const mor_model *m = c->model;
    rec_engine *e = &c->eng;
    const int32_t nv = m->n_vocab;
    const int32_t max_pos = context_max_pos(c);
    /* the drafts that can be used: n_draft + 1 rows and logits, positions, outputs */
    int32_t n = n_draft;
    if (n > (int32_t)c->params.n_batch - 1) n = (int32_t)c->params.n_batch - 1;
    if (n > (int32_t)c->params.n_outputs - 1) n = (int32_t)c->params.n_outputs - 1;
    if (n > n_max - 1) n = n_max - 1;
    if ((int64_t)pos + n >= max_pos) n = max_pos - 1 - pos;
    /* (drafts[k] is row k + 1's input) */
    const spec_bufs b = { .rows = c->idx, .tmp = c->pos, .drafts = c->depth, .hist = c->hist, .logits = c->logits };
    const int32_t *rows = b.rows;
    const mor_token *drafts = b.drafts;

    kv_begin(c->kv);
    rec_reset(e);
    if ((st = spec_run(c, seq, token, pos, n, draft_depth, smpl, !g, &b))) { kv_rollback(c->kv); return st; }

    /* accept: nothing below can fail the call */
    spec_draw_ctx d = { c->logits, e->vocab, nv, smpl, g, mor_model_token_eos(m), out };
    int32_t acc = 0;
    const int32_t k = spec_accept(drafts, n, spec_draw, &d, &acc);
    /* keep the inputs whose outputs were taken (at least the first: its
     * logits stay readable when its token could not be sampled) */
    const int32_t keep = k ? k : 1;
    kv_unappend(c->kv, 0, m->n_layer, 1, seq, pos + keep);
    kv_commit(c->kv);
    for (int32_t i = 0; i < keep; i++) {   /* published as a decode of the kept inputs */
        context_stage_row(c, i, rows[i], i);
        c->row_seq[i] = seq;
    }
    c->n_rows = keep;
    router_publish(c->router, keep, c->depth, c->st_scores, c->z);
    *n_out = k;
    if (n_accepted) *n_accepted = acc;
    err_clear();
    return MOR_OK;
}
