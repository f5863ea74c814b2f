/* model.h - the loaded model: hyperparameters, the unrolled-layer plan, weight views.
 *
 * A model is immutable after mor_model_load_*: every field below is written
 * once by model.c and only read afterwards, by any number of threads. */
#ifndef MOR_MODEL_H
#define MOR_MODEL_H
#include "mor.h"
#include "gguf.h"
#include "tensor.h"
#include "tokenizer.h"

#define MOR_MAX_RECURSIONS 16

/* The nine weights of a Llama decoder layer, in FORMAT.md's role order. */
enum { ROLE_ATTN_NORM, ROLE_ATTN_Q, ROLE_ATTN_K, ROLE_ATTN_V, ROLE_ATTN_OUT,
       ROLE_FFN_NORM, ROLE_FFN_GATE, ROLE_FFN_UP, ROLE_FFN_DOWN, ROLE_COUNT };
extern const char *const role_names[ROLE_COUNT];

typedef struct { tensor w[ROLE_COUNT]; } layer_weights;   /* one unrolled layer */

/* A router: linear (w) or MLP (fc1, then exact GELU, then fc2). n_out is 1 for
 * expert-choice, N_r for token-choice. */
typedef struct {
    int        mlp;
    tensor w, fc1, fc2;
} router_weights;

enum { ROUTER_FUNC_SIGMOID, ROUTER_FUNC_TANH, ROUTER_FUNC_SOFTMAX, ROUTER_FUNC_NONE };

struct mor_model {
    /* dimensions */
    int32_t n_vocab, n_embd, n_ff, n_head, n_head_kv, head_dim, n_ctx_train;
    float   eps, rope_theta;
    /* the unrolled plan: L = prelude + n_rec * base_depth + coda layers */
    int32_t n_layer, n_rec, base_depth, prelude, coda;
    /* routing */
    int32_t router_type;                   /* MOR_ROUTER_TYPE_* */
    int32_t router_func;                   /* ROUTER_FUNC_* */
    float   alpha, temp;
    int     gating_additive;
    double  capacity[MOR_MAX_RECURSIONS];  /* expert-choice c_r */
    float   threshold[MOR_MAX_RECURSIONS]; /* THRESHOLD-mode defaults */
    int     kv_shared;                     /* file default for the KV mode */
    router_weights router[MOR_MAX_RECURSIONS]; /* expert: one per recursion */
    router_weights router_tc;          /* token-choice: one router, n_out = N_r */
    const float *router_bias;              /* token-choice selection bias, or NULL */
    /* weights */
    tensor  tok_embd, output, output_norm;
    layer_weights  *layers;                    /* [n_layer], views into the file */
    /* tokenizer, file */
    tokenizer *tok;
    gguf_file  *gguf;
    void       *map;          /* mmap'd or malloc'd image, or NULL (borrowed memory) */
    void       *map_alloc;    /* what malloc returned, when map was aligned inside it */
    size_t      map_size;
    int         map_is_mmap;
    uint64_t    weight_bytes;
    /* depth-wise LoRA deltas (lora.h), or NULL when the file has none */
    struct lora_set *lora;
};

/* Borrowed view of the model's tokenizer (NULL if it has none). */
const tokenizer *model_tokenizer(const mor_model *m);

/* Unrolled layer index of block position j of recursion r. */
static inline int32_t model_layer_of(const mor_model *m, int32_t r, int32_t j)
{
    return m->prelude + r * m->base_depth + j;
}

#endif
