/* layer.c - a decoder layer, as HF's LlamaDecoderLayer computes it:
 *   h = x + o(attn(rms1(x)))          (causal, GQA, RoPE, softmax in fp32)
 *   y = h + down(silu(gate(n)) * up(n)),  n = rms2(h)
 * over n rows that may belong to different sequences and positions; and with
 * the features of the other model families (model_arch, FORMAT.md "Model
 * families"), each where HF's modelling code has it:
 *   LayerNorm with bias for the RMSNorms (GPT-NeoX), biases after the
 *   projections, partial RoPE (the first rope_dims of each head), a score
 *   scale, score soft-capping and a sliding window (Gemma 2); GELU or tanh
 *   GELU in place of SiLU, gated (GeGLU, Gemma) or not (GPT-NeoX);
 *   post-sub-layer norms, h = x + norm(o(attn)), y = h + norm(down(...))
 *   (Gemma 2); the parallel residual y = x + o(attn(n1(x))) + ffn(n2(x))
 *   (GPT-NeoX). The embedding scale and the final soft-cap are outside the
 *   layers (embed_output.c).
 *
 * Each weight matrix is read once for all n rows (one pass per matmul, rows
 * split across threads), so a batch of rows, whatever their sequences or
 * recursion depths, costs one read of the layer's weights. The residual adds
 * are fused into the O and down projections (y += W x). */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "layer.h"
#include "lora.h"
#include "quant.h"
#include "status.h"

void layer_rope_cs(const mor_model *m, const layer_scratch *s, const int32_t *pos, int32_t n, float *cs)
{
    const int32_t hd = m->head_dim, half = m->arch.rope_dims / 2;   /* rope_dims = hd unless partial */
    for (int32_t i = 0; i < n; i++) {
        float *c = cs + (int64_t)i * hd;
        for (int32_t j = 0; j < half; j++) {
            float ang = (float)pos[i] * s->inv_freq[j];
            c[j] = cosf(ang);
            c[half + j] = sinf(ang);
        }
    }
}

/* Row i's cache and LoRA layer: row_layer[i], or l for every row. */
#define ROW_LAYER(i) (row_layer ? row_layer[i] : l)
#define ROW_STORES(i) (kv_layer_stores(kv, ROW_LAYER(i)) && !(rows->skip_store && rows->skip_store[i]))
#define LORA(role, xin, ldx, y, ldy) lora_apply_exec(e, &s->lora, m, l, row_layer, role, xin, ldx, y, ldy, n)

/* The norm of role r (RMSNorm, or LayerNorm with its bias role) over n rows
 * of d values, x ldx floats apart, into out (ldo apart; may be x). */
static void norm_rows(const mor_model *m, const kernel_set *k, const layer_weights *w, int r, float *out, int64_t ldo,
                      const float *x, int64_t ldx, int32_t n)
{
    const int32_t d = m->n_embd;
    for (int32_t i = 0; i < n; i++) {
        if (m->arch.layer_norm)
            k_layer_norm(out + i * ldo, x + i * ldx, w->w[r].data, w->w[r + ROLE_BIAS_OFFSET].data, d, m->eps);
        else
            k->rms_norm(out + i * ldo, x + i * ldx, w->w[r].data, d, m->eps);
    }
}

/* y (rows of the role's outputs, ldy apart) += role r's bias, if the model has one. */
static void bias_rows(const layer_weights *w, int r, float *y, int64_t ldy, int32_t n)
{
    const tensor *b = &w->w[r + ROLE_BIAS_OFFSET];
    if (b->data) k_add_bias(y, ldy, b->data, b->cols, n);
}

static void rope_rows(const mor_model *m, float *v, int32_t n_heads, const float *cs)
{
    if (m->arch.rope_dims == m->head_dim) k_rope_cs(v, n_heads, m->head_dim, cs);
    else k_rope_cs_part(v, n_heads, m->head_dim, m->arch.rope_dims, cs);
}

/* The attention half: x += o(attn(norm(x))) (post-norms: x += norm(o(...))),
 * the rows' K/V appended to their cache layers first. Under the parallel
 * residual the FFN's input is normed here, before x changes. */
static mor_status attention(const mor_model *m, int32_t l, mor_kv_cache *kv, layer_scratch *s, float *x,
                             const layer_rows *rows)
{
    const int32_t *row_layer = rows->layer, *pos = rows->pos, *seq = rows->seq, n = rows->n;
    const layer_weights *w = &m->layers[l];
    const model_arch *a = &m->arch;
    const int32_t d = m->n_embd, hd = m->head_dim, qd = m->n_head * hd, kvd = m->n_head_kv * hd;
    int stores = 0;   /* some row stores K/V (under sharing, recursion-0 rows only) */
    for (int32_t i = 0; i < n && !stores; i++) stores = ROW_STORES(i);
    exec_ctx *e = &s->exec;
    const kernel_set *k = e->k;
    const float *cs = rows->rope_cs;
    if (!cs) { layer_rope_cs(m, s, pos, n, s->cs_own); cs = s->cs_own; }

    norm_rows(m, k, w, ROLE_ATTN_NORM, s->xn, d, x, d, n);
    if (stores) {   /* under KV sharing, recursions >= 1 skip the K/V projections entirely */
        const tensor *qkv[3] = { &w->w[ROLE_ATTN_Q], &w->w[ROLE_ATTN_K], &w->w[ROLE_ATTN_V] };
        float *const out[3] = { s->q, s->k, s->v };
        exec_matmul_multi(e, 3, qkv, s->xn, d, out, n);
        bias_rows(w, ROLE_ATTN_K, s->k, kvd, n);
        bias_rows(w, ROLE_ATTN_V, s->v, kvd, n);
    } else {
        exec_matmul(e, &w->w[ROLE_ATTN_Q], s->xn, d, s->q, qd, n, 0);
    }
    bias_rows(w, ROLE_ATTN_Q, s->q, qd, n);
    /* depth-wise LoRA (lora.h): y += s B (A x) per row, after the shared weight; no-op without */
    LORA(ROLE_ATTN_Q, s->xn, d, s->q, qd);
    if (stores) { LORA(ROLE_ATTN_K, s->xn, d, s->k, kvd); LORA(ROLE_ATTN_V, s->xn, d, s->v, kvd); }
    for (int32_t i = 0; i < n; i++) rope_rows(m, s->q + (int64_t)i * qd, m->n_head, cs + (int64_t)i * hd);

    if (stores) {
        for (int32_t i = 0; i < n; i++) {
            if (!ROW_STORES(i)) continue;
            kv_layer *L = &kv->layers[ROW_LAYER(i)];
            rope_rows(m, s->k + (int64_t)i * kvd, m->n_head_kv, cs + (int64_t)i * hd);
            int32_t c = kv_append(kv, ROW_LAYER(i), seq[i], pos[i]);
            if (c < 0) return err_set(MOR_E_KV_FULL, "KV cache full at layer %d (%d cells)", ROW_LAYER(i), L->n_cells);
            /* into the cache's type (F32: a copy) */
            quant_row(kv->type, s->k + (int64_t)i * kvd, L->k + (size_t)c * kv->row_bytes, kvd);
            quant_row(kv->type, s->v + (int64_t)i * kvd, L->v + (size_t)c * kv->row_bytes, kvd);
        }
    }
    for (int32_t i0 = 0, i1; i0 < n; i0 = i1) {   /* one call per run of rows on the same cache layer */
        for (i1 = i0 + 1; i1 < n && ROW_LAYER(i1) == ROW_LAYER(i0); i1++) {}
        const kv_rows R = kv_layer_rows(kv, ROW_LAYER(i0));
        attn_dims ad = s->dims;   /* with the family's scores; the window is the row's unrolled layer's */
        ad.scale = a->attn_scale;
        ad.softcap = a->attn_softcap;
        ad.window = a->local && a->local[ROW_LAYER(i0)] ? a->window : 0;
        exec_attention(e, &ad, &R, s->q + (int64_t)i0 * qd, pos + i0, seq + i0, s->att + (int64_t)i0 * qd, i1 - i0);
    }
    /* The parallel residual's FFN reads the layer's input: normed before x changes. */
    if (a->parallel_residual) norm_rows(m, k, w, ROLE_FFN_NORM, s->xn, d, x, d, n);
    if (a->post_norms) {   /* x += norm(o(att)) */
        exec_matmul(e, &w->w[ROLE_ATTN_OUT], s->att, qd, s->o, d, n, 0);
        bias_rows(w, ROLE_ATTN_OUT, s->o, d, n);
        LORA(ROLE_ATTN_OUT, s->att, qd, s->o, d);
        norm_rows(m, k, w, ROLE_ATTN_POST_NORM, s->o, d, s->o, d, n);
        for (int64_t i = 0; i < (int64_t)n * d; i++) x[i] += s->o[i];
    } else {
        exec_matmul(e, &w->w[ROLE_ATTN_OUT], s->att, qd, x, d, n, 1);   /* x += o(att) */
        bias_rows(w, ROLE_ATTN_OUT, x, d, n);
        LORA(ROLE_ATTN_OUT, s->att, qd, x, d);
    }
    return MOR_OK;
}

/* The feed-forward half: x += down(act(gate x) * up x) (ungated: down(act(up
 * x)); post-norms: x += norm(down(...))), on the normed input in s->xn. */
static void feed_forward(const mor_model *m, int32_t l, mor_kv_cache *kv, layer_scratch *s, float *x,
                         const layer_rows *rows)
{
    const int32_t *row_layer = rows->layer, n = rows->n;
    const layer_weights *w = &m->layers[l];
    const model_arch *a = &m->arch;
    const int32_t d = m->n_embd, F = m->n_ff;
    exec_ctx *e = &s->exec;
    const kernel_set *k = e->k;
    if (!a->parallel_residual) norm_rows(m, k, w, ROLE_FFN_NORM, s->xn, d, x, d, n);
    int ffn_lora = 0;
    for (int32_t i = 0; i < n && !ffn_lora; i++)
        ffn_lora = lora_on(m, ROW_LAYER(i), ROLE_FFN_GATE) || lora_on(m, ROW_LAYER(i), ROLE_FFN_UP);
    float *act = s->gate;   /* the down projection's input */
    if (!a->ffn_gated) {    /* down(act(up x)) */
        act = s->up;
        exec_matmul(e, &w->w[ROLE_FFN_UP], s->xn, d, s->up, F, n, 0);
        bias_rows(w, ROLE_FFN_UP, s->up, F, n);
        LORA(ROLE_FFN_UP, s->xn, d, s->up, F);
        k_act(s->up, (int64_t)n * F, a->ffn_act);
    } else if (ffn_lora || a->ffn_bias) {   /* LoRA deltas and biases go in before the activation */
        const tensor *gu[2] = { &w->w[ROLE_FFN_GATE], &w->w[ROLE_FFN_UP] };
        float *const gu_out[2] = { s->gate, s->up };
        exec_matmul_multi(e, 2, gu, s->xn, d, gu_out, n);
        bias_rows(w, ROLE_FFN_GATE, s->gate, F, n);
        bias_rows(w, ROLE_FFN_UP, s->up, F, n);
        LORA(ROLE_FFN_GATE, s->xn, d, s->gate, F);
        LORA(ROLE_FFN_UP, s->xn, d, s->up, F);
        if (a->ffn_act == FFN_ACT_SILU) k->swiglu(s->gate, s->up, (int64_t)n * F);
        else k_glu(s->gate, s->up, (int64_t)n * F, a->ffn_act);
    } else if (a->ffn_act == FFN_ACT_SILU) {
        exec_ffn_up(e, &w->w[ROLE_FFN_GATE], &w->w[ROLE_FFN_UP], s->xn, d, s->gate, s->up, n);
    } else {
        exec_ffn_up_act(e, &w->w[ROLE_FFN_GATE], &w->w[ROLE_FFN_UP], s->xn, d, s->gate, s->up, n, a->ffn_act);
    }
    if (a->post_norms) {   /* x += norm(down(...)) */
        exec_matmul(e, &w->w[ROLE_FFN_DOWN], act, F, s->o, d, n, 0);
        bias_rows(w, ROLE_FFN_DOWN, s->o, d, n);
        LORA(ROLE_FFN_DOWN, act, F, s->o, d);
        norm_rows(m, k, w, ROLE_FFN_POST_NORM, s->o, d, s->o, d, n);
        for (int64_t i = 0; i < (int64_t)n * d; i++) x[i] += s->o[i];
    } else {
        exec_matmul(e, &w->w[ROLE_FFN_DOWN], act, F, x, d, n, 1);   /* x += down(...) */
        bias_rows(w, ROLE_FFN_DOWN, x, d, n);
        LORA(ROLE_FFN_DOWN, act, F, x, d);
    }
}

mor_status layer_forward(const mor_model *m, int32_t l, mor_kv_cache *kv, layer_scratch *s, float *x,
                         const layer_rows *r)
{
    mor_status st = attention(m, l, kv, s, x, r);
    if (st) return st;
    feed_forward(m, l, kv, s, x, r);
    return MOR_OK;
}
#undef LORA
#undef ROW_STORES
#undef ROW_LAYER
