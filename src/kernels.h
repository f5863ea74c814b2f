/* kernels.h - the compute kernels.
 *
 * The portable C reference kernels (kernels_ref.c) favour clarity over speed;
 * every fast kernel is tested against them (tests/test_kernels.c). Fast
 * kernel sets for AVX2, AVX-512 and NEON (kernels_<isa>.c) are chosen at run
 * time from what the CPU has (kernels_dispatch.c): one binary runs anywhere.
 *
 * Determinism: in every kernel set, each output of a matmul is computed by
 * the same sequence of operations whatever the number of rows, the tile it
 * falls in or the output range a thread was given, so results do not depend
 * on batch composition or thread count (bitwise). Different kernel sets may
 * round differently; what holds between them:
 *  - quantized weights (Q8_0, Q4_0): the AVX-512 and AMX sets are bitwise
 *    the reference kernels (exact integer sum per block, then d_w * d_x
 *    scaling in block order, no FMA: kernels_avx512.c, kernels_amx.c), so
 *    those matmuls give the same outputs on any x86-64 CPU with AVX-512 and
 *    on the reference set (a whole model's logits only within rounding: each
 *    set's RMSNorm and attention are its own; test_kernels checks the
 *    matmuls' bits inside the reference set); the AVX2 and NEON sets split
 *    each block's sum into lanes and round differently;
 *  - Q4_1, Q5_0, Q5_1: the AVX-512 set (and AMX, which takes them from it)
 *    splits each block's sum into lanes (its own rounding); the other sets
 *    run the reference kernels;
 *  - the k-quants (Q2_K .. Q6_K): every set gives the reference's bits. The
 *    AVX2, AVX-512 and NEON kernels (k_matmul_kquant_x86, kernels_avx512.c,
 *    kernels_neon.c) make the reference's exact integer sums per super-block
 *    and add them by its float step (quant.h, kq_step), super-blocks in
 *    order; Q8_K weights (never in a file) run the reference kernels;
 *  - BF16 weights in the AMX set: bfloat16 tile products of the weights and
 *    the activations split in three bfloat16 parts (ACT_BF16X3), float
 *    sums in the tiles' order: within rounding of the reference, bitwise
 *    equal to no other set;
 *  - BF16 weights in kernels_avx512_bf16 (the opt-in MOR_CTX_FAST_BF16): the
 *    activations are rounded to bfloat16 first (ACT_BF16), so results are
 *    within that rounding (2^-8 of each activation) of the others'. */
#ifndef MOR_KERNELS_H
#define MOR_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#include "tensor.h"

/* y[i][o] = sum_c W[o][c] * x[i][c] for n input rows: W is rows x cols in
 * any stored type; x is n x cols; y is n x rows. Uses the best kernel set of
 * this CPU, on the calling thread. For quantized weights x is quantized
 * first, as ggml does (Q8_0, Q8_1 or Q8_K blocks: ACT_* below). */
void k_matmul(const tensor *w, const float *x, float *y, int32_t n);
/* The same with the reference kernels (the oracle of the fast ones). */
void k_matmul_ref(const tensor *w, const float *x, float *y, int32_t n);
/* Row `row` of an embedding table, converted to float. */
void k_embed_row(const tensor *w, int32_t row, float *out);
/* out = w * (x / sqrt(mean(x^2) + eps)), as HF LlamaRMSNorm in fp32. */
void k_rms_norm(float *out, const float *x, const float *w, int32_t n, float eps);
/* Rotate n_heads heads of head_dim at position pos, HF default RoPE (rotate_half). */
void k_rope(float *v, int32_t n_heads, int32_t head_dim, int32_t pos, float theta);
/* The same rotation with precomputed cos/sin of the row's angles:
 * cs[i] = cos(pos * inv_freq[i]), cs[half + i] = sin(...), i < head_dim/2. */
void k_rope_cs(float *v, int32_t n_heads, int32_t head_dim, const float *cs);
/* inv_freq[i] = 1 / theta^(2i/head_dim), in fp32 as HF computes it. */
void k_rope_inv_freq(float *inv_freq, int32_t head_dim, float theta);
float k_silu(float x);
float k_gelu(float x);   /* exact (erf) GELU, as nn.GELU() */
/* In-place softmax of n floats, max-subtracted, in float like torch's fp32 softmax. */
void k_softmax(float *x, int32_t n);

/* ---- the model families' kernels (kernels_family.c) ----
 * Portable C, the same in every kernel set (and so the same bits on every
 * CPU): element-wise work beside the matmuls, and soft-capped attention. */
enum { K_ACT_SILU, K_ACT_GELU, K_ACT_GELU_TANH };   /* activations: silu, erf GELU, tanh GELU */
float k_gelu_tanh(float x);   /* torch's gelu(approximate="tanh") */
/* x[i] = act(x[i]) */
void k_act(float *x, int64_t n, int act);
/* g[i] = act(g[i]) * u[i] (SwiGLU, GeGLU, ...) */
void k_glu(float *g, const float *u, int64_t n, int act);
/* out = (x - mean) / sqrt(var + eps) * w + b (torch's LayerNorm, biased
 * variance); out may be x. */
void k_layer_norm(float *out, const float *x, const float *w, const float *b, int32_t n, float eps);
/* y[i*ldy + o] += b[o] for o < n_out, i < rows. */
void k_add_bias(float *y, int64_t ldy, const float *b, int64_t n_out, int32_t rows);
/* x[i] = cap * tanh(x[i] / cap) (logit soft-capping). */
void k_softcap(float *x, int64_t n, float cap);
/* k_rope_cs over the first rot (even, <= head_dim) dims of each head, the
 * rest passed through (GPT-NeoX's partial rotary): cs[i] = cos, cs[rot/2 + i]
 * = sin of the angle of pair (i, i + rot/2), i < rot/2. */
void k_rope_cs_part(float *v, int32_t n_heads, int32_t head_dim, int32_t rot, const float *cs);
/* attend_fn with the scaled scores soft-capped before the softmax:
 * s = cap * tanh(scale * q.k / cap) (Gemma 2). */
void k_attend_capped(const float *q, int32_t group, int32_t hd, const void *k, const void *v, size_t stride,
                     uint32_t kv_type, const int32_t *cells, int32_t nv, float scale, float cap, float *probs,
                     float *out);

/* ---- kernel sets ---- */

/* Activations as a matmul reads them ("prepared"), by kind:
 *   ACT_F32     the float rows themselves: F32/F16/BF16 weights (but below);
 *   ACT_Q8      quantized rows (quant.h, act_q8): Q8_0/Q4_0/Q5_0 weights, in
 *               every set;
 *   ACT_BF16X3  each float split into three bfloat16 (quant.h, act_bf16x3):
 *               the weight types in a set's bf16x3_types (the AMX set's BF16
 *               weights);
 *   ACT_Q8_1    ggml's Q8_1 rows (quant.h, act_q8_1): Q4_1/Q5_1 weights;
 *   ACT_Q8K     ggml's Q8_K rows (quant.h, act_q8k): the k-quants' weights
 *               (Q2_K .. Q6_K, Q8_K), as ggml's vec_dot_*_q8_K.
 *   ACT_BF16    each float rounded to bfloat16 (quant.h, act_bf16): the
 *               weight types in a set's bf16_types (kernels_avx512_bf16's
 *               BF16 weights, MOR_CTX_FAST_BF16).
 * ACT_Q8_1 and ACT_Q8K rows are made by the reference quantizers in every set.
 * act_kind, act_stride and act_prepare (below) say which, how far apart the
 * rows are and how to make them, for a set and a type. */
enum { ACT_F32, ACT_Q8, ACT_BF16X3, ACT_Q8_1, ACT_Q8K, ACT_BF16 };
/* Weights whose activations are ACT_Q8 rows in every set. */
int    act_is_q8(uint32_t weight_type);
/* Weights whose activations are quantized (ACT_Q8, ACT_Q8_1, ACT_Q8K). */
int    act_is_quantized(uint32_t weight_type);

/* Floats of per-thread scratch a matmul over rows of k values may use
 * (the AVX-512 set's K-blocked GEMM keeps up to 64 tiles of 6 x 4 x 16
 * partial sums there; the AMX set's BF16 GEMM two packed strips of 16
 * weight rows, 32 bytes per column each, and four C tiles). */
#define MM_SCRATCH_FLOATS(k) (16 * (size_t)(k) + 64 + 64 * 384)

/* For o in [o0, o1) and i in [0, n):
 *     y[i*ldy + o] = dot(W row o, x row i)      (acc != 0: y[...] += dot)
 * x holds n prepared activation rows, xs bytes apart. scratch: NULL, or
 * MM_SCRATCH_FLOATS(w->cols) floats private to the calling thread (it
 * only makes the kernel faster, never changes a result). */
typedef void (*matmul_fn)(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy,
                              int32_t n, int64_t o0, int64_t o1, int acc, float *scratch);

/* Attention of one query row for `group` query heads that share one KV head:
 *   out[g] = sum_t softmax_t(scale * q[g] . K[cells[t]]) * V[cells[t]]
 * q and out: group * hd floats (head after head); k and v point at this KV
 * head's part of cache row 0, rows `stride` bytes apart, of kv_type (F32,
 * F16 or Q8_0 with hd a multiple of 32); probs: scratch of group * nv floats. */
typedef void (*attend_fn)(const float *q, int32_t group, int32_t hd, const void *k, const void *v,
                              size_t stride, uint32_t kv_type, const int32_t *cells, int32_t nv,
                              float scale, float *probs, float *out);

/* Cached keys and values as attention reads them: cells [0, n), each the
 * sequence (< 0: empty) and position of a token and one K and one V row of
 * row_bytes bytes in `type` (F32, F16 or Q8_0), K after RoPE. */
typedef struct {
    int32_t        n;
    const int32_t *seq, *pos;
    const void    *k, *v;
    size_t         row_bytes;
    uint32_t       type;
} kv_rows;

/* The attention heads: n_head query heads, n_head_kv KV heads (query head h
 * reads KV head h / (n_head / n_head_kv)), head_dim values each; and how
 * scores are made (all 0 for Llama): scaled by `scale` (0: 1/sqrt(head_dim)),
 * soft-capped to softcap * tanh(s / softcap) when softcap > 0
 * (k_attend_capped), and with window > 0 only the cells of positions
 * pos - window < p <= pos visible (sliding-window attention). */
typedef struct {
    int32_t n_head, n_head_kv, head_dim;
    float   scale, softcap;
    int32_t window;
} attn_dims;

/* y[i*ldy + o] += sum_q t[i*ldt + q] * bt[q*ldb + o] for i < rows, o < n:
 * the second pass of the unfolded LoRA product (lora.c, kernels_lora.h).
 * Every set gives the same bits. */
typedef void (*lora_axpy_fn)(const float *t, int64_t ldt, int32_t rows, int32_t r, const float *bt, int64_t ldb,
                             float *y, int64_t ldy, int64_t n);

typedef struct kernel_set {
    const char   *name;                 /* "ref", "avx2", "avx512" (or "avx512-novbmi"), "amx", "neon" */
    /* one row of k floats (k a multiple of 32) into a mor_act_q8 row */
    void        (*act_q8)(const float *x, void *row, int64_t k);
    matmul_fn matmul;
    attend_fn attend;
    void        (*rms_norm)(float *out, const float *x, const float *w, int32_t n, float eps);
    /* g[i] = silu(g[i]) * u[i] */
    void        (*swiglu)(float *g, const float *u, int64_t n);
    lora_axpy_fn  lora_axpy;
    /* the weight types whose activations are ACT_BF16X3 rows (bit 1 << type; 0: none), and the
     * function that makes such a row of k floats (NULL when there are none) */
    uint64_t      bf16x3_types;
    void        (*act_bf16x3)(const float *x, void *row, int64_t k);
    /* the same for ACT_BF16 rows (bfloat16-rounded activations) */
    uint64_t      bf16_types;
    void        (*act_bf16)(const float *x, void *row, int64_t k);
} kernel_set;

enum { ISA_REF, ISA_AVX2, ISA_AVX512, ISA_AMX, ISA_NEON, ISA_COUNT };

/* The kernel set for isa if it is compiled in and this CPU runs it, else
 * NULL. ISA_REF always exists. Thread-safe; tables are immutable. */
const kernel_set *kernels_get(int isa);
/* The fastest kernel set this CPU runs. */
const kernel_set *kernels_best(void);
/* The set MOR_CTX_FAST_BF16 asks for in place of base: kernels_avx512_bf16
 * where base is an AVX-512 set (not AMX) and the CPU has AVX512_BF16, else
 * base itself. */
const kernel_set *kernels_fast_bf16(const kernel_set *base);
/* Names of the kernel sets compiled in, e.g. "ref,avx2,avx512". */
const char *kernels_compiled(void);

/* The kind of activations (ACT_*) set ks reads for weights of type wtype. */
int    act_kind(const kernel_set *ks, uint32_t wtype);
/* Bytes between prepared activation rows of k values for weights of type wtype in set ks. */
size_t act_stride(const kernel_set *ks, uint32_t wtype, int64_t k);
/* Bytes between rows of k values of activation kind `kind` (ACT_*; the same in every set). */
size_t act_kind_stride(int kind, int64_t k);
/* The largest of those for any set and type (a buffer that holds rows of every kind). */
size_t act_stride_max(int64_t k);
/* Prepare row x (k floats) for weights of type wtype in set ks into out. */
void   act_prepare(const kernel_set *ks, uint32_t wtype, const float *x, void *out, int64_t k);

/* The reference set's members, also used by the fast sets for what they do
 * not speed up (tests compare against these). */
extern const kernel_set kernels_ref;
void k_matmul_ref_range(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy,
                          int32_t n, int64_t o0, int64_t o1, int acc, float *scratch);
void k_attend_ref(const float *q, int32_t group, int32_t hd, const void *k, const void *v,
                    size_t stride, uint32_t kv_type, const int32_t *cells, int32_t nv,
                    float scale, float *probs, float *out);

/* The fast sets (kernels_<isa>.c), defined only where compiled in. */
extern const kernel_set kernels_avx2, kernels_avx512, kernels_amx, kernels_neon;
/* The AVX-512 set for CPUs without VBMI and GFNI (kernels_get picks it
 * there): the same results as kernels_avx512, bitwise. */
extern const kernel_set kernels_avx512_novbmi;
/* The AVX-512 set with BF16 weights' products in bfloat16 (vdpbf16ps) on
 * activations rounded to bfloat16 (ACT_BF16): within 2^-8 of each activation,
 * so not the bits of any other set; its other weight types are the AVX-512
 * set's (kernels_get(ISA_AVX512)), bitwise. Only where the CPU has
 * AVX512_BF16 (kernels_fast_bf16). */
extern const kernel_set kernels_avx512_bf16;
/* AVX2 members the AVX-512 set shares (only to be called where AVX2 runs). */
void act_q8_avx2(const float *x, void *row, int64_t k);
void k_swiglu_avx2(float *g, const float *u, int64_t n);
void k_rms_norm_avx2(float *out, const float *x, const float *w, int32_t n, float eps);
/* k-quant weights (Q2_K .. Q6_K; Q8_K by the reference) x Q8_K rows, bitwise the reference kernels:
 * a matmul_fn */
void k_matmul_kquant_x86(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n, int64_t o0,
                         int64_t o1, int acc, float *scratch);
void k_attend_avx2(const float *q, int32_t group, int32_t hd, const void *k, const void *v,
                     size_t stride, uint32_t kv_type, const int32_t *cells, int32_t nv,
                     float scale, float *probs, float *out);
/* AVX-512 members the AMX set shares (only to be called where AVX-512 runs). */
void k_attend_avx512(const float *q, int32_t group, int32_t hd, const void *k, const void *v,
                       size_t stride, uint32_t kv_type, const int32_t *cells, int32_t nv,
                       float scale, float *probs, float *out);
#endif
