/* relax.h - Relaxed Recursive Transformers (Bae et al., 2024) in the
 * converter: tie a vanilla Llama's layers into N_r loops of a shared block,
 * initialised as the official code does (model/sharing_strategy/llama.py:
 * Stepwise, Average, Lower, Upper), and give every looped layer its own
 * LoRA delta, the truncated SVD of what tying lost (B = U_r S_r,
 * A = V_r^T; a zero residual gets the standard init, A Gaussian, B zero).
 * Also the deltas of relaxed PEFT checkpoints of the official code, with
 * PEFT's scale alpha / r. The deltas are written as docs/FORMAT.md's
 * lora.<l>.<proj>.{a,b} tensors by convert.c. */
#ifndef CV_RELAX_H
#define CV_RELAX_H
#include <stddef.h>
#include <stdint.h>
#include "hf_config.h"
#include "layout.h"
#include "settings.h"

enum { INIT_NONE = -1, INIT_STEPWISE, INIT_AVERAGE, INIT_LOWER, INIT_UPPER };
extern const char *const relax_init_names[];   /* "stepwise", "average", "lower", "upper", NULL */

/* One delta: y += scale * B (A x); a: r x in, b: out x r, row-major F32. */
typedef struct {
    int r;
    const float *a, *b;
    float scale;
} cv_delta;

typedef struct {
    /* relax_tie */
    int n_orig;                                   /* layers of the vanilla checkpoint */
    int *kept;                                    /* [n_layer]: its source layer (linspace selection) */
    const ckpt_tensor *(*orig)[CV_ROLE_ALL];      /* [n_layer]: each layer's own weights */
    ckpt_tensor *synth;                           /* averaged weights (their data is owned) */
    int n_synth;
    /* relax_svd / relax_peft */
    cv_delta (*delta)[CV_ROLE_COUNT];             /* [n_layer]; r == 0: none */
    int n_delta;
    double residual2, captured2;                  /* SVD: sum ||R||^2 and of the kept sigma^2 */
    int n_zero;                                   /* SVD: zero residuals (standard init) */
    cv_progress_fn progress;                      /* relax_svd: each SVD done (NULL: none) */
    void *progress_ud;
    void **own;                                   /* buffers to free */
    size_t n_own, cap_own;
} relax_state;

void relax_free(relax_state *rs);

/* Tie the layers of a plain layout into n_rec loops under `sharing`
 * (SHARE_CYCLE, _MIDDLE_CYCLE, _SEQUENCE, _MIDDLE_SEQUENCE). When the
 * layers do not divide evenly, the official selection keeps those at
 * round(linspace(...)) first (cfg->n_layer and lo->n_layer shrink). Each
 * shared slot takes the weights `init` says, norms and biases included
 * unless keep_norms (then every layer keeps its own norm weights and biases,
 * the vectors of CV_ROLE_* that cv_role_is_vector names, so that a full-rank
 * relaxation reproduces the original model exactly). Per-layer features
 * (the sliding-window layers) follow the layers kept. */
int relax_tie(relax_state *rs, cv_layout *lo, hf_config *cfg, int sharing, int n_rec, int init, int keep_norms,
              char *err, size_t errcap);

/* SVD deltas for the looped layers [first, last) of a tied layout:
 * rank[role] (0: none; clamped to min(in, out)) per CV role. shared[l * CV_ROLE_COUNT
 * + role] and type[role] are the shared weights as the file will store them
 * (the residual is against those). exact: full Jacobi SVD even for small
 * ranks; threads: SVDs run in parallel. */
int relax_svd(relax_state *rs, const cv_layout *lo, int first, int last, const int *rank,
              const void *const *shared, const int *type, int exact, int threads, char *err, size_t errcap);

/* The deltas of a relaxed PEFT checkpoint (lo->lora), as F32 with PEFT's
 * scale (alpha_pattern, else alpha / r), checked against the settings. */
int relax_peft(relax_state *rs, const cv_layout *lo, const cv_settings *s, char *err, size_t errcap);

#endif
