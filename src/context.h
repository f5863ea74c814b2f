/* context.h - a context: scratch and output memory, the KV cache and the router. */
#ifndef MOR_CONTEXT_H
#define MOR_CONTEXT_H
#include "recursion.h"


struct mor_batch {
    int32_t    n, cap;
    mor_token *token;
    mor_pos   *pos;
    mor_seq_id *seq;
    int8_t    *want;
};

struct mor_context {
    mor_model         *model;
    mor_context_params params;
    mor_kv_cache      *kv;
    mor_router        *router;
    layer_scratch      ls;
    rec_engine         eng;              /* the rows of a decode (or of a server's steps) */
    /* mor_decode's lists and staged results, [n_batch] unless noted */
    int32_t *idx, *pos, *seq, *depth, *seq_rows /* [n_seq_max] */;
    int32_t *hist;                       /* mor_speculate: sampler history its drafts overwrite */
    float   *z, *st_scores;              /* router logits and scores, rows x n_rec */
    /* outputs */
    float   *logits;                     /* [n_outputs][n_vocab] */
    int32_t  n_rows;
    int32_t *row_seq;                    /* [n_batch]: the sequence of each row of the last decode */
    int32_t *logit_row;                  /* [n_batch]: row -> logits slot or -1 */
    float   *hidden, *st_hidden;         /* [n_boundaries][n_batch][n_embd] when captured */
    int32_t  n_boundaries;
    void    *mem;                        /* the one block all of the above (and eng) point into */
    tensor   draft_out;                  /* mor_speculate's drafts' output matrix (speculate.c) */
    void    *draft_mem;                  /* its Q8_0 copy, made on the first call that needs one */
};
/* The first position a context refuses (mor_context_params.max_pos: > 0 as
 * given, < 0 none, 0 the model's training context). */
static inline int32_t context_max_pos(const mor_context *c)
{
    return c->params.max_pos > 0 ? c->params.max_pos : c->params.max_pos < 0 ? INT32_MAX : c->model->n_ctx_train;
}

/* Stage engine row `row` as output row i of the call being published: its
 * logits slot (-1: none), and its depth, router logits and scores for
 * router_publish (context.c; mor_decode and mor_speculate). */
void       context_stage_row(mor_context *c, int32_t i, int32_t row, int32_t logit_slot);
/* The kernel set a context with these MOR_CTX_* flags runs: the CPU's best, or with MOR_CTX_FAST_BF16
 * kernels_fast_bf16 of it. */
const kernel_set *context_kernels(uint32_t flags);

/* mor_decode in two halves, for a caller that holds its own KV transaction
 * (serve.c: one per serving step). decode_run checks and runs batch b inside
 * the caller's transaction and stages its results, publishing nothing (on
 * failure the caller rolls back); decode_staged_logits(c, i) are row i's
 * staged logits (NULL: it asked for none); decode_publish, once the caller
 * can no longer fail, makes them the context's outputs (mor_get_logits,
 * depths, hidden states) as a successful mor_decode does. */
mor_status   decode_run(mor_context *c, const mor_batch *b);
const float *decode_staged_logits(const mor_context *c, int32_t i);
void         decode_publish(mor_context *c, const mor_batch *b);

/* speculate.c: the fallible part of one self-speculative step, shared by
 * mor_speculate and the server's speculating requests. The caller holds a
 * KV transaction open and n + 1 engine rows free; spec_run enters `token`
 * at pos, drafts n tokens at depth D (drawn by smpl and put back when
 * `coupled`, else the argmax), verifies, and leaves: b->rows[k] the row of
 * input k (still in the engine), b->drafts[k] row k + 1's input, b->logits
 * row k's verified logits, every input's cells appended (the drafts' last-
 * layer cells taken back). On failure the caller rolls back and frees the
 * rows. */
typedef struct {
    int32_t   *rows, *tmp;        /* [n + 1]: the inputs' rows; scratch */
    mor_token *drafts, *hist;     /* [n]: the drafts; the sampler history the draws overwrite */
    float     *logits;            /* [n + 1][n_vocab] */
} spec_bufs;
mor_status spec_run(mor_context *c, mor_seq_id seq, mor_token token, mor_pos pos, int32_t n, int32_t D,
                    mor_sampler *smpl, int coupled, const spec_bufs *b);
/* The acceptance rule of self-speculation, the one loop mor_speculate and
 * the server's speculating requests share: position k = 0, 1, ... draws its
 * token (draw: 0, or 1 when the output ends with that token, or -1 when
 * position k cannot be drawn: the run stops before it), and the run goes on
 * while the token is the draft fed after it (drafts[k], k < n). Returns the
 * positions drawn; *n_match the drafts that matched. Cannot fail. */
typedef int (*spec_draw_fn)(void *ud, int32_t k, mor_token *t);
int32_t spec_accept(const mor_token *drafts, int32_t n, spec_draw_fn draw, void *ud, int32_t *n_match);
#endif
