/* synth_model.h - random-weight `mor` models of a given shape, written as
 * GGUF: a dense Llama, or a MoR middle-cycle model (unique first and last
 * layers, a shared block of K layers run N_r times, a linear expert-choice
 * router per recursion), optionally relaxed (per-layer LoRA deltas on the
 * shared block). Used by mor-bench (SmolLM-135M/-360M, TinyLlama-1.1B shapes)
 * and by the tests. Header-only, static functions. */
#ifndef MOR_SYNTH_MODEL_H
#define MOR_SYNTH_MODEL_H
#include <math.h>
#include "gguf_write.h"

typedef struct {
    int32_t  n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    int32_t  n_rec;          /* 1: dense Llama (no routers); > 1: MoR middle-cycle */
    uint32_t type;           /* the layers' matrices: F32, F16, BF16, Q8_0, Q4_0 */
    uint32_t embd_type;      /* token_embd (tied to the output) */
    uint64_t seed;
    uint32_t more_type;      /* 0, or attn_v and ffn_down of the first and last eighth of the stored blocks
                              * and every third between in this type (llama-quantize's Q4_K_M / Q5_K_M
                              * use_more_bits rule, with Q6_K) */
} synth_spec;

/* Weights ~ N(0, 0.02) (a sum of 4 uniforms: cheap, and only the shape of
 * the distribution's middle matters for timing and drift). */
static inline float synth_normal(uint64_t *s)
{
    float acc = 0;
    for (int i = 0; i < 4; i++) {
        *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
        acc += (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
    }
    return acc * (0.02f / 0.57735027f);   /* sd of the sum is sqrt(4/12) */
}

static inline void synth_matrix(gguf_writer *b, const char *name, uint32_t type, int64_t cols, int64_t rows, uint64_t *s)
{
    float *x = malloc(sizeof(float) * (size_t)(cols * (rows ? rows : 1)));
    if (!x) { gguf_writer_fail(b, "out of memory"); return; }
    for (int64_t i = 0; i < cols * (rows ? rows : 1); i++) x[i] = synth_normal(s);
    gguf_writer_add_matrix_f32(b, name, gguf_row_type(type, cols), x, cols, rows);   /* as llama-quantize's files */
    free(x);
}

static inline void synth_ones(gguf_writer *b, const char *name, int64_t n)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    if (!x) { gguf_writer_fail(b, "out of memory"); return; }
    for (int64_t i = 0; i < n; i++) x[i] = 1.0f;
    gguf_writer_add_matrix(b, name, GGML_F32, n, 0, x, sizeof(float) * (size_t)n, 1);
}

/* The keys: shape, layer map, router. */
static inline void synth_keys(gguf_writer *b, const synth_spec *sp, int32_t K, int lora)
{
    const int mor = sp->n_rec > 1;
    const int32_t L = sp->n_layer;
    int32_t *map = malloc(sizeof(int32_t) * (size_t)L);
    if (!map) { gguf_writer_fail(b, "out of memory"); return; }
    for (int32_t l = 0; l < L; l++)
        map[l] = !mor ? l : l == 0 ? 0 : l == L - 1 ? K + 1 : 1 + (l - 1) % K;
    gguf_writer_add_str(b, "general.architecture", "mor");
    gguf_writer_add_str(b, "general.name", mor ? "synthetic MoR middle-cycle" : "synthetic dense Llama");
    gguf_writer_add_u32(b, "mor.format_version", lora ? 2 : 1);   /* 2: with LoRA tensors (docs/FORMAT.md) */
    gguf_writer_add_u32(b, "mor.vocab_size", (uint32_t)sp->n_vocab);
    gguf_writer_add_u32(b, "mor.context_length", (uint32_t)sp->n_ctx);
    gguf_writer_add_u32(b, "mor.embedding_length", (uint32_t)sp->n_embd);
    gguf_writer_add_u32(b, "mor.feed_forward_length", (uint32_t)sp->n_ff);
    gguf_writer_add_u32(b, "mor.attention.head_count", (uint32_t)sp->n_head);
    gguf_writer_add_u32(b, "mor.attention.head_count_kv", (uint32_t)sp->n_head_kv);
    gguf_writer_add_u32(b, "mor.attention.key_length", (uint32_t)sp->head_dim);
    gguf_writer_add_f32(b, "mor.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_f32(b, "mor.rope.freq_base", 10000.0f);
    gguf_writer_add_u32(b, "mor.layer_count", (uint32_t)L);
    gguf_writer_add_u32(b, "mor.recursion.count", (uint32_t)(mor ? sp->n_rec : 1));
    gguf_writer_add_u32(b, "mor.recursion.base_depth", (uint32_t)K);
    gguf_writer_add_u32(b, "mor.recursion.prelude", mor ? 1 : 0);
    gguf_writer_add_u32(b, "mor.recursion.coda", mor ? 1 : 0);
    gguf_writer_add_str(b, "mor.recursion.sharing", mor ? "middle_cycle" : "none");
    gguf_writer_add_arr_i32(b, "mor.layer_map", map, (size_t)L);
    free(map);
    if (mor) {
        double cap[16];
        for (int32_t r = 0; r < sp->n_rec; r++) cap[r] = (double)(sp->n_rec - r) / sp->n_rec;
        gguf_writer_add_str(b, "mor.router.type", "expert");
        gguf_writer_add_str(b, "mor.router.arch", "linear");
        gguf_writer_add_str(b, "mor.router.func", "sigmoid");
        gguf_writer_add_f32(b, "mor.router.alpha", 1.0f);
        gguf_writer_add_str(b, "mor.router.gating", "weighted");
        gguf_writer_add_arr_f64(b, "mor.router.capacity", cap, (size_t)sp->n_rec);
    } else {
        gguf_writer_add_str(b, "mor.router.type", "none");
    }
}

/* The n_stored layers' tensors. */
static inline void synth_layers(gguf_writer *b, const synth_spec *sp, int32_t n_stored, uint64_t *s)
{
    const int64_t d = sp->n_embd, qd = (int64_t)sp->n_head * sp->head_dim, kvd = (int64_t)sp->n_head_kv * sp->head_dim;
    for (int32_t i = 0; i < n_stored && !gguf_writer_failed(b); i++) {
        char name[96];
#define BLK(role) (snprintf(name, sizeof name, "blk.%d.%s.weight", i, role), name)
        const int more = sp->more_type && (i < n_stored / 8 || i >= 7 * n_stored / 8 || (i - n_stored / 8) % 3 == 2);
        const uint32_t vt = more ? sp->more_type : sp->type;
        synth_ones(b, BLK("attn_norm"), d);
        synth_matrix(b, BLK("attn_q"), sp->type, d, qd, s);
        synth_matrix(b, BLK("attn_k"), sp->type, d, kvd, s);
        synth_matrix(b, BLK("attn_v"), vt, d, kvd, s);
        synth_matrix(b, BLK("attn_output"), sp->type, qd, d, s);
        synth_ones(b, BLK("ffn_norm"), d);
        synth_matrix(b, BLK("ffn_gate"), sp->type, d, sp->n_ff, s);
        synth_matrix(b, BLK("ffn_up"), sp->type, d, sp->n_ff, s);
        synth_matrix(b, BLK("ffn_down"), vt, sp->n_ff, d, s);
#undef BLK
    }
}

/* A relaxed model's deltas (docs/FORMAT.md, "Depth-wise LoRA"): every projection of every unrolled layer
 * of the shared block gets one of rank min(rank, in, out), F32, scale 1. A ~ N(0, 0.02) like the weights,
 * B scaled so that B A x is about a tenth of W x whatever the rank. */
static inline void synth_lora(gguf_writer *b, const synth_spec *sp, int32_t rank, uint64_t *s)
{
    static const char *const proj[7] = { "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down" };
    const int64_t d = sp->n_embd, qd = (int64_t)sp->n_head * sp->head_dim, kvd = (int64_t)sp->n_head_kv * sp->head_dim;
    const int64_t in[7] = { d, d, d, qd, d, d, sp->n_ff }, out[7] = { qd, kvd, kvd, d, sp->n_ff, sp->n_ff, d };
    for (int32_t l = 1; l < sp->n_layer - 1 && !gguf_writer_failed(b); l++)
        for (int p = 0; p < 7; p++) {
            const int64_t r = rank < in[p] && rank < out[p] ? rank : in[p] < out[p] ? in[p] : out[p];
            const float bscale = 5.0f / sqrtf((float)r);   /* sd 0.1 / sqrt(r) */
            for (int part = 0; part < 2; part++) {
                const int64_t n = r * (part ? out[p] : in[p]);
                float *v = malloc(sizeof(float) * (size_t)n);
                if (!v) { gguf_writer_fail(b, "out of memory"); return; }
                for (int64_t i = 0; i < n; i++) v[i] = synth_normal(s) * (part ? bscale : 1.0f);
                char name[96];
                snprintf(name, sizeof name, "lora.%d.%s.%c", l, proj[p], part ? 'b' : 'a');
                gguf_writer_add_matrix(b, name, GGML_F32, part ? r : in[p], part ? out[p] : r, v, sizeof(float) * (size_t)n, 1);
            }
        }
}

/* Write the model to path, a relaxed MoR with LoRA deltas of lora_rank (> 0) on its shared block's unrolled
 * layers; 0 on success (else err says why). The deltas come after every other tensor, so the base weights
 * are those of the model without them. */
static inline int synth_write_lora(const synth_spec *sp, int32_t lora_rank, const char *path, char *err, size_t errcap)
{
    const int mor = sp->n_rec > 1;
    const int32_t L = sp->n_layer, K = mor ? (L - 2) / sp->n_rec : L;
    if (mor && 2 + K * sp->n_rec != L) { snprintf(err, errcap, "%d layers are not 1 + %d x K + 1", L, sp->n_rec); return -1; }
    if (!mor && lora_rank > 0) { snprintf(err, errcap, "LoRA deltas need a MoR (N_r > 1)"); return -1; }
    gguf_writer *b = gguf_writer_new();
    if (!b) { snprintf(err, errcap, "out of memory"); return -1; }
    synth_keys(b, sp, K, lora_rank > 0);
    uint64_t s = sp->seed * 0x9E3779B97F4A7C15ull + 1;
    const int64_t d = sp->n_embd;
    synth_matrix(b, "token_embd.weight", sp->embd_type, d, sp->n_vocab, &s);
    synth_ones(b, "output_norm.weight", d);
    synth_layers(b, sp, mor ? K + 2 : L, &s);
    for (int32_t r = 0; mor && r < sp->n_rec; r++) {
        char name[32];
        snprintf(name, sizeof name, "rtr.%d.weight", r);
        synth_matrix(b, name, GGML_F32, d, 1, &s);
    }
    if (lora_rank > 0) synth_lora(b, sp, lora_rank, &s);
    int rc = gguf_writer_write_file(b, path, err, errcap);
    gguf_writer_free(b);
    return rc;
}

/* Write the model to path; 0 on success. */
static inline int synth_write(const synth_spec *sp, const char *path)
{
    char err[256];
    return synth_write_lora(sp, 0, path, err, sizeof err);
}
#endif
