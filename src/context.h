/* context.h - a context: scratch and output memory, the KV cache and the router. */
#ifndef MOR_CONTEXT_H
#define MOR_CONTEXT_H
#include "kernels_threads.h"
#include "kv_cache.h"
#include "lora.h"
#include "router.h"

/* Scratch for one decoder layer over up to n_batch rows (see layer.c). */
typedef struct {
    float   *xn, *q, *k, *v, *att, *o, *gate, *up;
    exec_ctx exec;             /* kernels, threads and their per-thread scratch */
    attn_dims dims;            /* the model's attention heads */
    lora_scratch lora;         /* the unfolded LoRA product's (lora.h) */
    float   *inv_freq;         /* [head_dim/2]: RoPE frequencies */
    /* [n][head_dim] cos | sin of each row's RoPE angles for the next
     * layer_forward only (it resets this to NULL), set by its caller
     * (layer_rope_cs), or NULL: computed there into cs_own */
    const float *rope_cs;
    float   *cs_own;           /* [n_batch][head_dim] */
    /* [n] or NULL, set by the caller for its calls: rows i with
     * skip_store[i] != 0 store no K/V (their results are to be discarded) */
    const uint8_t *skip_store;
} layer_scratch;

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
    /* recursion scheduling scratch, [n_batch] rows unless noted */
    float   *x, *y, *h1, *rtmp;          /* rows x n_embd; rtmp: 3*n_embd router scratch */
    float   *z, *g, *p;                  /* router logits / f(z) / gates, rows x n_rec */
    int32_t *idx, *pos, *seq, *depth, *seq_rows /* [n_seq_max] */;
    uint8_t *active, *sel, *done;
    router_rank *rank;
    float   *st_scores;                  /* staged router scores, rows x n_rec */
    float   *cs;                         /* [n_batch][head_dim]: RoPE cos|sin of each batch row */
    /* outputs */
    float   *logits;                     /* [cap_logits][n_vocab] */
    int32_t  cap_logits, n_rows;
    int32_t *logit_row;                  /* [n_batch]: row -> logits slot or -1 */
    float   *hidden, *st_hidden;         /* [n_boundaries][n_batch][n_embd] when captured */
    int32_t  n_boundaries;
    /* Internal (serve.c's sequence-level baseline): every row runs every
     * recursion, as an engine that knows nothing of MoR would; the results of
     * rows the router did not pick are discarded and their K/V not stored, so
     * the outputs are those of a normal decode. */
    int      lockstep;
};
#endif
