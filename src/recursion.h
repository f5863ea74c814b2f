/* recursion.h - recursion scheduling: the rows (tokens) in flight through a
 * MoR model and the four operations that move them.
 *
 *   enter   a token becomes a row: its embedding, position, sequence
 *   layers  unique layers (the first ones, or the last) over a list of rows
 *   decide  the verdict for each row's next recursion (router.c decides,
 *           kv_cache.c says which recursions cache every row's K/V)
 *   pass    one application of the shared block over rows at any
 *           recursions: one run of each block layer per group of rows with
 *           the same weights, each row on its own recursion's KV cache and
 *           LoRA deltas, then the gated residual update of each row
 *   finish  the unique last layers, the final norm and the output matrix
 *
 * mor_decode (decode.c) enters a whole batch, then decides and passes until
 * every row has exited, and finishes; depth-wise serving (serve.c) keeps rows
 * across calls, runs one pass per step over the rows of many sequences at
 * different depths, and refills the rows that exited.
 *
 * A row's verdict before recursion r:
 *   RUN      it is taken: the block's output updates it (x += gate * f(x)
 *            for expert-choice, the token-choice trajectory, or x = f(x)
 *            without routers)
 *   KVONLY   not taken, but r caches every row (kv_caches_every_row): the
 *            block runs over it for its K/V, its output is discarded
 *   DISCARD  only under the lockstep policy (rec_set_lockstep) (a sequence-level engine that
 *            knows nothing of MoR): computed, discarded, nothing stored
 *   EXITED   done with the recursions
 * router.c (router_verdicts) makes every depth decision: taken, dropped (a
 * row not taken once is never taken again), or done (past the depth cap);
 * the engine turns them into these states.
 *
 * The engine owns the rows' lifecycle: callers enter tokens (each takes the
 * lowest free row), ask which rows are runnable or have exited, and free
 * them; no caller reads or writes a row's state. Rows live in one block of
 * fixed-size records, so that rec_save / rec_restore keep every row in
 * flight with one copy. */
#ifndef MOR_RECURSION_H
#define MOR_RECURSION_H
#include "layer.h"
#include "router.h"


/* Called with the hidden states of the rows in list, in the order given
 * (gx: n rows of n_embd), at each capture point inside rec_layers /
 * rec_pass / rec_finish (decode.c's mor_get_hidden). */
typedef void (*rec_capture_fn)(void *ud, const float *gx, const int32_t *list, int32_t n);

typedef struct {
    const mor_model *m;
    mor_kv_cache    *kv;
    mor_router      *router;
    layer_scratch   *ls;
    uint8_t          drop_life;    /* where a row not taken goes when its K/V are not wanted */
    int32_t          cap;          /* rows */
    size_t           stride;       /* bytes per record */
    unsigned char   *rows;         /* cap records */
    /* scratch for up to cap gathered rows */
    float   *gx, *gcs, *tmp, *vocab, *zb, *pb;
    int32_t *gpos, *gseq, *glayer, *gseqv, *glist, *tmp_list;
    uint8_t *gskip, *gsel, *gverdict;
    const float **gxp;
    router_rank   *rank;
    router_cand   *cand;
    router_scratch rs;             /* router_verdicts' view of the scratch above */
    /* abort polling (before each layer) and hidden-state capture */
    int32_t (*abort_cb)(void *);
    void    *abort_ud;
    rec_capture_fn capture;        /* NULL: none */
    void          *capture_ud;
    int            capture_in_pass; /* capture before each block layer too (models without routers) */
} rec_engine;

/* Bytes of the engine's memory for cap rows (rec_bind lays it out). */
size_t rec_bytes(const mor_model *m, int32_t cap);
/* Lay the engine out in mem (rec_bytes(m, cap), 64-byte aligned, zeroed: every row FREE). */
void   rec_bind(rec_engine *e, const mor_model *m, mor_kv_cache *kv, mor_router *router, layer_scratch *ls,
                int32_t cap, void *mem);
/* The verdict policy for rows not taken whose K/V no deeper recursion
 * wants: done (the default), or, with lockstep on (a benchmark's
 * sequence-level baseline, serve.h; models with routers), computed to the
 * last recursion and discarded. Chosen once, before rows are entered. */
void   rec_set_lockstep(rec_engine *e, int on);

/* Row i's depth so far (the recursions that took it) and the caller's tag
 * (serve.c: its slot). A row's record is private to recursion.c. */
int32_t rec_depth(const rec_engine *e, int32_t i);
int32_t rec_tag(const rec_engine *e, int32_t i);
float *rec_x(const rec_engine *e, int32_t i);       /* [n_embd] the residual stream */
float *rec_h(const rec_engine *e, int32_t i);       /* [n_embd] token-choice: the trajectory state */
float *rec_z(const rec_engine *e, int32_t i);       /* [n_rec] router logits (NaN where not evaluated) */
float *rec_p(const rec_engine *e, int32_t i);       /* [n_rec] router scores (gates) */
/* Bytes of rows [0, n) in the block: a save buffer for every row holds
 * rec_span(e, e->cap). */
static inline size_t rec_span(const rec_engine *e, int32_t n) { return (size_t)n * e->stride; }

/* ---- the rows' lifecycle ---- */

/* Every row free (mor_decode's start: its k-th enter then gets row k - 1). */
void       rec_reset(rec_engine *e);
/* Rows in use: entered and not freed. */
int32_t    rec_n_live(const rec_engine *e);
/* The lowest free row becomes token `token` at (seq, pos): embedded, RoPE
 * angles, taken at recursion 0, and its token-log cell appended to the KV
 * cache (inside the caller's KV transaction); *row is its index. Nothing
 * changes on failure: MOR_E_KV_FULL if the log is full, MOR_E_INTERNAL if
 * no row is free. */
mor_status rec_enter(rec_engine *e, mor_token token, mor_pos pos, mor_seq_id seq, int32_t tag, int32_t *row);
/* The rows that run the next pass (taken, KV-only or discarded), into list,
 * ordered by recursion, then by row; returns their number. */
int32_t    rec_runnable(const rec_engine *e, int32_t *list);
/* The rows of list that have not exited, into out (list order); returns
 * their number. out may be list. */
int32_t    rec_recursing(const rec_engine *e, const int32_t *list, int32_t n, int32_t *out);
/* The rows of list that have exited, into out (list order); returns their
 * number. out may be list. */
int32_t    rec_exited(const rec_engine *e, const int32_t *list, int32_t n, int32_t *out);
/* The exited rows with the given tag, into out in position order; returns
 * their number (serve.c: a slot's group, ready for rec_finish). */
int32_t    rec_exited_of(const rec_engine *e, int32_t tag, int32_t *out);
/* The rows of list become free. */
void       rec_free(rec_engine *e, const int32_t *list, int32_t n);
/* Copy every row in flight into buf (rec_span(e, e->cap) bytes); returns
 * what rec_restore needs: one past the highest row in use. */
int32_t    rec_save(const rec_engine *e, void *buf);
/* The rows as rec_save found them; rows entered since are free again. */
void       rec_restore(rec_engine *e, const void *buf, int32_t n_hi);
/* Unrolled layers [l0, l1) over the rows in list (all at every layer). */
mor_status rec_layers(rec_engine *e, const int32_t *list, int32_t n, int32_t l0, int32_t l1);
/* The verdict (ROW_*) of each row in list for its next recursion. Rows may
 * be at different recursions; TOPK routing ranks the rows of one sequence at
 * one recursion together, T being seq_rows[seq] (decode.c; NULL for causal
 * routing). */
void       rec_decide(rec_engine *e, const int32_t *list, int32_t n, const int32_t *seq_rows);
/* One pass of the shared block over the rows in list (RUN, KVONLY or
 * DISCARD), ordered by recursion, each then one recursion further. */
mor_status rec_pass(rec_engine *e, const int32_t *list, int32_t n);
/* The unique last layers over the rows in list (of one call: a sequence's
 * rows in position order), then the final norm and the output matrix (w,
 * or the model's when NULL) for the n_out rows of list at indices
 * out_idx[] (ascending) into logits [n_out][n_vocab]. With a capture hook
 * every row is normed and captured. */
mor_status rec_finish(rec_engine *e, const int32_t *list, int32_t n, const int32_t *out_idx, int32_t n_out,
                      const tensor *w, float *logits);
#endif
