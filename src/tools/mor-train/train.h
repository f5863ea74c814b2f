/* train.h - training MoR models in C: forward and backward side by side.
 *
 * The arithmetic type is `real`: float for the tools, double when compiled
 * with -DTR_DOUBLE (the gradient tests check every backward kernel and the
 * whole model against finite differences in double). The two builds are
 * separate archives with the same symbol names and are never linked together.
 *
 * A model is a Llama stack in the unrolled-layer plan of docs/FORMAT.md:
 * `prelude` unique layers, the `K` shared layers applied `n_rec` times, `coda`
 * unique layers (vanilla: n_rec = 1, K = L). Routing is none (every token,
 * every recursion: the recursive baseline), expert-choice (per recursion a
 * linear router, hierarchical top-k per sequence, x[sel] += alpha*sigmoid(z) *
 * block(x[sel]), the auxiliary BCE loss) or token-choice (one router, depth =
 * argmax, balancing loss, z-loss, optional loss-free bias). Parameters shared
 * across recursions are one tensor: their gradients accumulate over uses. */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef TR_DOUBLE
typedef double real;
#else
typedef float real;
#endif

#define TR_MAX_REC 16

enum { TR_ROUTER_NONE = 0, TR_ROUTER_EXPERT = 1, TR_ROUTER_TOKEN = 2 };
/* Token-choice router function (expert-choice is always sigmoid). */
enum { TR_FUNC_SIGMOID = 0, TR_FUNC_SOFTMAX = 2 };
/* How an expert-choice forward selects tokens: the official top-k (training),
 * or the causal threshold rule the aux loss trains for (inference). */
enum { TR_SELECT_TOPK = 0, TR_SELECT_THRESHOLD = 1 };
/* The nine weights of a layer, in FORMAT.md's role order. */
enum { TR_NORM1, TR_Q, TR_K, TR_V, TR_O, TR_NORM2, TR_GATE, TR_UP, TR_DOWN, TR_NROLE };

typedef struct {
    int32_t vocab, d, ff, n_head, n_kv, head_dim, ctx;
    float   eps, theta;
    int32_t n_rec, K, prelude, coda;      /* L = prelude + n_rec*K + coda */
    int32_t router;                       /* TR_ROUTER_* */
    int32_t func;                         /* token-choice: TR_FUNC_* */
    float   alpha;                        /* gate scale (0.1 expert, 1.0 token softmax) */
    double  cap[TR_MAX_REC];              /* expert-choice capacities c_r */
    float   aux_coef;                     /* expert: BCE coefficient (0.001) */
    float   bal_coef, z_coef;             /* token: balancing (0.1), z-loss (1e-5) */
    int32_t loss_free;                    /* token: loss-free bias instead of/with the loss */
    float   bias_rate;                    /* its update rate u (0.001) */
    int32_t lora_rank;                    /* > 0: a LoRA delta per recursion on the shared block
                                             (tr_model_init: this rank on every projection, capped
                                             at min(in, out); a model read from a file: its
                                             largest rank) */
    float   lora_alpha;                   /* tr_model_init: delta = (lora_alpha / rank) * B A */
} tr_config;

/* Where the LoRA deltas are and their ranks: rank[r][j][role] for block
 * position j at recursion r (0: no delta; always 0 for the norms), and the
 * scale s of each role's deltas, y = W x + s B (A x) (FORMAT.md v2: one scale
 * per projection). */
typedef struct {
    int32_t rank[TR_MAX_REC][16][TR_NROLE];
    float   scale[TR_NROLE];
} tr_lora_layout;

/* Defaults for everything but the shape (vocab, d, ff, heads, layers). */
void tr_config_defaults(tr_config *c);
/* A readable problem with the config, or NULL. */
const char *tr_config_check(const tr_config *c);

typedef struct {
    char    name[48];
    int64_t rows, cols;      /* [out, in] as PyTorch; a vector has rows = 1 */
    size_t  off;             /* into the parameter buffer */
    int     decay;           /* AdamW weight decay applies */
    int     layer_role;      /* TR_* of a block weight, else -1 */
    int     rec;             /* LoRA: recursion, else -1 */
} tr_tensor;

typedef struct {
    tr_config c;
    int32_t   L, n_blocks;
    int32_t   map[256];                    /* unrolled layer -> stored block */
    tr_tensor *t;
    int        n_t;
    size_t     n_params;
    real      *p, *g;                      /* parameters and their gradients */
    /* views into p (the same offsets index g) */
    size_t     embd, onorm, blk[64][TR_NROLE], rtr[TR_MAX_REC], rtr_tc;
    /* LoRA (A [rank, in], B [out, rank]) per recursion, block position and
     * role; (size_t)-1 where absent (norms, or no LoRA). The tensors are
     * named as FORMAT.md stores them: lora.<unrolled layer>.<role>.a|b. */
    size_t     lora_a[TR_MAX_REC][16][TR_NROLE], lora_b[TR_MAX_REC][16][TR_NROLE];
    tr_lora_layout lora;                   /* ranks (0 where absent) and scales */
    int32_t    lora_rmax;                  /* the largest rank, 0 without LoRA */
    float      bias[TR_MAX_REC];           /* token-choice loss-free bias (not trained by Adam) */
} tr_model;

int  tr_model_init(tr_model *m, const tr_config *c, uint64_t seed);   /* 0 ok, -1 no memory / bad config */
/* The same with the LoRA deltas of lo (NULL: none) instead of c->lora_rank
 * and c->lora_alpha; every rank must be in [0, min(in, out)], at a recursion
 * and block position of c, and 0 on the norms. m->c.lora_rank becomes the
 * largest rank. New deltas start as B = 0, A ~ N(0, 1/in). */
int  tr_model_init_lora(tr_model *m, const tr_config *c, const tr_lora_layout *lo, uint64_t seed);
void tr_model_free(tr_model *m);
const tr_tensor *tr_model_find(const tr_model *m, const char *name);
/* Unrolled layer index of block position j of recursion r. */
static inline int32_t tr_layer_of(const tr_model *m, int32_t r, int32_t j)
{
    return m->c.prelude + r * m->c.K + j;
}

/* ---- forward and backward -------------------------------------------- */

typedef struct tr_state tr_state;

typedef struct {
    double ce;               /* mean cross-entropy over the targets */
    double aux;              /* sum over recursions of the aux BCE (unscaled) */
    double bal, zloss;       /* token-choice balancing and z-loss (unscaled) */
    double total;            /* what backward differentiates */
    int64_t n_depth[TR_MAX_REC + 1];  /* tokens that ran exactly d recursions */
    double  flops;           /* multiply-adds * 2 of the forward just run */
    double  router_acc;      /* expert: share of candidates (recursions with c_r < 1) where
                                sigmoid(z) >= 0.5 agrees with the top-k choice */
} tr_result;

/* Activations for batches of up to B sequences of T tokens. */
tr_state *tr_state_new(const tr_model *m, int32_t B, int32_t T);
void      tr_state_free(tr_state *s);
/* Forward over B sequences of T tokens (tokens[b*T + t]); targets may be NULL
 * (no loss; logits only) and a target < 0 is ignored. select: TR_SELECT_*.
 * want_logits keeps the logits of every row (tr_state_logits). */
int  tr_forward(const tr_model *m, tr_state *s, const int32_t *tokens, const int32_t *targets,
                int32_t B, int32_t T, int select, int want_logits, tr_result *res);
/* Backward of the last forward (which must have had targets): adds d(total)/d(params) to m->g. */
void tr_backward(tr_model *m, tr_state *s);
const real *tr_state_logits(const tr_state *s);    /* [B*T][vocab] after want_logits */
const int32_t *tr_state_depth(const tr_state *s);  /* [B*T] recursions each token ran */
/* Token-choice loss-free bias update from the last forward's depth counts. */
void tr_update_bias(tr_model *m, const tr_state *s);
/* Threads for the matrix products and attention (<= 0: 1); tr_set_threads(1)
 * also stops the workers and frees their scratch. */
void tr_set_threads(int n);
int  tr_threads(void);

/* ---- optimizer -------------------------------------------------------- */

typedef struct {
    float lr, min_lr, beta1, beta2, eps, wd, clip;
    int64_t warmup, steps;
    int     schedule;        /* TR_SCHED_* */
    float   decay_frac;      /* WSD: the last fraction of steps decays */
} tr_optim_config;
enum { TR_SCHED_COSINE = 0, TR_SCHED_WSD = 1, TR_SCHED_CONSTANT = 2 };

typedef struct {
    tr_optim_config oc;
    int64_t step;            /* steps taken */
    float  *m, *v;           /* Adam moments, float in both builds */
    size_t  n;
} tr_optim;

void  tr_optim_defaults(tr_optim_config *oc);
int   tr_optim_init(tr_optim *o, const tr_optim_config *oc, size_t n_params);
void  tr_optim_free(tr_optim *o);
float tr_lr_at(const tr_optim_config *oc, int64_t step);
/* Clip the gradient to norm oc.clip, take one AdamW step, zero the gradient.
 * Returns the gradient norm before clipping. */
double tr_optim_step(tr_optim *o, tr_model *m);

/* ---- files ------------------------------------------------------------ */

typedef struct {
    /* optional tokenizer metadata copied into the model file */
    const char *const *tok_tokens;
    const int32_t     *tok_types;
    int32_t            n_tok;
    const char *const *tok_merges;
    int32_t            n_merges;
    int32_t            eos;       /* -1 none */
    const char        *name;      /* general.name, optional */
    int                f16;       /* store matrices as F16 (else F32) */
} tr_save_opts;

/* Write the model as a `mor` GGUF file (docs/FORMAT.md) that
 * mor_model_load_file loads. LoRA deltas are written unfolded, as the
 * format's version 2 lora.<l>.<proj>.a|b tensors (F32) with their scales.
 * 0 ok, else -1 with err. */
int tr_save_gguf(const tr_model *m, const char *path, const tr_save_opts *o, char *err, size_t errcap);
/* Read a `mor` file the trainer can train into a freshly initialised m:
 * what tr_save_gguf writes, or mor-convert's recursive and relaxed files
 * (F32 or F16 weights, the LoRA deltas with their ranks and scales). Every
 * tensor of the file must be one the trainer trains, and the layer map the
 * trainer's; anything else is refused. 0 ok, else -1 with err. */
int tr_load_gguf(tr_model *m, const char *path, char *err, size_t errcap);
/* Optimizer sidecar (PATH.opt): step, the Adam moments and a checksum of the
 * shape, as a small GGUF file of its own. */
int tr_save_optim(const tr_optim *o, const tr_model *m, const char *path, char *err, size_t errcap);
int tr_load_optim(tr_optim *o, const tr_model *m, const char *path, char *err, size_t errcap);

/* ---- BPE tokenizer trainer -------------------------------------------- */

typedef struct {
    char   **tokens;         /* byte-level texts (GPT-2 alphabet), [n_tokens] */
    int32_t *types;          /* 1 normal, 3 control */
    int32_t  n_tokens;
    char   **merges;         /* "left right", rank order */
    int32_t  n_merges;
    int32_t  eos;            /* id of <|endoftext|> */
} tr_bpe;

/* Learn merges on text until the vocabulary has vocab_size tokens (256 bytes,
 * the merges' results, and <|endoftext|> last). Pre-tokenization is GPT-2's. */
int  tr_bpe_train(const char *text, size_t len, int32_t vocab_size, tr_bpe *out, int verbose);
void tr_bpe_free(tr_bpe *b);
/* Write a vocab-only `mor` GGUF (FORMAT.md, tokenizer keys). */
int  tr_bpe_save(const tr_bpe *b, const char *path, char *err, size_t errcap);

/* ---- misc -------------------------------------------------------------- */

/* Deterministic generator (splitmix64), and a standard normal from it. */
uint64_t tr_rand_u64(uint64_t *state);
double   tr_rand_normal(uint64_t *state);

#endif
