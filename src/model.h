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

/* The tensors of a decoder layer, in FORMAT.md's role order: the nine of a
 * Llama layer, then the biases and extra norms of the other model families
 * (format version 3). A role the model does not have has data == NULL. */
enum { ROLE_ATTN_NORM, ROLE_ATTN_Q, ROLE_ATTN_K, ROLE_ATTN_V, ROLE_ATTN_OUT,
       ROLE_FFN_NORM, ROLE_FFN_GATE, ROLE_FFN_UP, ROLE_FFN_DOWN, ROLE_COUNT,
       ROLE_ATTN_NORM_B = ROLE_COUNT, ROLE_ATTN_Q_B, ROLE_ATTN_K_B, ROLE_ATTN_V_B, ROLE_ATTN_OUT_B,
       ROLE_FFN_NORM_B, ROLE_FFN_GATE_B, ROLE_FFN_UP_B, ROLE_FFN_DOWN_B,
       ROLE_ATTN_POST_NORM, ROLE_FFN_POST_NORM, ROLE_ALL };
/* ROLE_COUNT: the nine roles of a Llama layer (every model has them, but
 * ffn_gate only a gated FFN); role r < ROLE_COUNT has its bias at r + 9. */
#define ROLE_BIAS_OFFSET ROLE_COUNT
/* Layer-map names ("attn_q", "attn_q.bias", "attn_post_norm", ...) and
 * tensor names after "blk.N." ("attn_q.weight", "attn_q.bias", ...). */
extern const char *const role_names[ROLE_ALL];
extern const char *const role_tensor[ROLE_ALL];
/* The seven projections (the roles a LoRA delta may relax). */
static inline int role_is_projection(int r) { return r >= ROLE_ATTN_Q && r <= ROLE_FFN_DOWN && r != ROLE_FFN_NORM; }

typedef struct { tensor w[ROLE_ALL]; } layer_weights;   /* one unrolled layer */

/* A router: linear (w) or MLP (fc1, then exact GELU, then fc2). n_out is 1 for
 * expert-choice, N_r for token-choice. */
typedef struct {
    int        mlp;
    tensor w, fc1, fc2;
} router_weights;

enum { ROUTER_FUNC_SIGMOID, ROUTER_FUNC_TANH, ROUTER_FUNC_SOFTMAX, ROUTER_FUNC_NONE };

/* The architecture features of the model families (FORMAT.md, "Model
 * families"); a Llama model has every one off. */
enum { FAMILY_LLAMA, FAMILY_GEMMA, FAMILY_GEMMA2, FAMILY_GPTNEOX, FAMILY_COUNT };
enum { FFN_ACT_SILU, FFN_ACT_GELU, FFN_ACT_GELU_TANH };   /* = kernels.h's K_ACT_* */
typedef struct {
    int32_t family;            /* FAMILY_*, informational */
    int     layer_norm;        /* LayerNorm with bias, else RMSNorm */
    int     ffn_act;           /* FFN_ACT_* */
    int     ffn_gated;         /* down(act(gate x) * up x), else down(act(up x)) */
    int     attn_bias, ffn_bias;
    int     parallel_residual; /* x + attn(n1(x)) + ffn(n2(x)) */
    int     post_norms;        /* each sub-layer's output normed before its residual add */
    int     loop_norm;         /* a row entering recursion r >= 1 is first normed by the final norm */
    int32_t rope_dims;         /* dimensions RoPE rotates, from the start of each head (<= head_dim) */
    float   attn_scale;        /* query . key scale: 1/sqrt(head_dim) unless the file says */
    float   attn_softcap;      /* 0: none; else c * tanh(s / c) on the scaled scores */
    float   final_softcap;     /* 0: none; the same on the logits */
    float   embd_scale;        /* 0: none; else embeddings are multiplied by it */
    int32_t window;            /* sliding window (0: none) of the layers with local[l] */
    uint8_t *local;            /* [n_layer] or NULL: layer l attends to pos - window < p <= pos */
} model_arch;
extern const char *const family_names[FAMILY_COUNT];

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
    model_arch arch;
    tensor  tok_embd, output, output_norm, output_norm_b;   /* output_norm_b: LayerNorm only */
    tensor  exit_gate, exit_gate_b;   /* Ouro's early-exit gate [d] -> 1 and its bias, or data NULL */
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

/* Unrolled layer index of block position j of recursion r. */
static inline int32_t model_layer_of(const mor_model *m, int32_t r, int32_t j)
{
    return m->prelude + r * m->base_depth + j;
}

#endif
