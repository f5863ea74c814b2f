/* layer.c - a Llama decoder layer, as HF's LlamaDecoderLayer computes it:
 *   h = x + o(attn(rms1(x)))          (causal, GQA, RoPE, softmax in fp32)
 *   y = h + down(silu(gate(n)) * up(n)),  n = rms2(h)
 * over n rows that may belong to different sequences and positions.
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
    const int32_t hd = m->head_dim, half = hd / 2;
    for (int32_t i = 0; i < n; i++) {
        float *c = cs + (int64_t)i * hd;
        for (int32_t j = 0; j < half; j++) {
            float ang = (float)pos[i] * s->inv_freq[j];
            c[j] = cosf(ang);
            c[half + j] = sinf(ang);
        }
    }
}

mor_status layer_forward(const mor_model *m, int32_t l, mor_kv_cache *kv, layer_scratch *s,
                         float *x, const int32_t *pos, const int32_t *seq, int32_t n)
{
    return layer_forward_rows(m, l, NULL, kv, s, x, pos, seq, n);
}

/* Row i's cache and LoRA layer: row_layer[i], or l for every row. */
#define ROW_LAYER(i) (row_layer ? row_layer[i] : l)
#define ROW_STORES(i) (kv_layer_stores(kv, ROW_LAYER(i)) && !(s->skip_store && s->skip_store[i]))
#define LORA(role, xin, ldx, y, ldy) lora_apply_exec(e, &s->lora, m, l, row_layer, role, xin, ldx, y, ldy, n)

mor_status layer_forward_rows(const mor_model *m, int32_t l, const int32_t *row_layer, mor_kv_cache *kv,
                              layer_scratch *s, float *x, const int32_t *pos, const int32_t *seq, int32_t n)
{
    const layer_weights *w = &m->layers[l];
    const int32_t d = m->n_embd, hd = m->head_dim, qd = m->n_head * hd, kvd = m->n_head_kv * hd;
    int stores = 0;   /* some row stores K/V (under sharing, recursion-0 rows only) */
    for (int32_t i = 0; i < n && !stores; i++) stores = ROW_STORES(i);
    exec_ctx *e = &s->exec;
    const kernel_set *k = e->k;
    const float *cs = s->rope_cs;
    s->rope_cs = NULL;   /* it describes these rows only */
    if (!cs) { layer_rope_cs(m, s, pos, n, s->cs_own); cs = s->cs_own; }

    for (int32_t i = 0; i < n; i++)
        k->rms_norm(s->xn + (int64_t)i * d, x + (int64_t)i * d, w->w[ROLE_ATTN_NORM].data, d, m->eps);
    if (stores) {   /* under KV sharing, recursions >= 1 skip the K/V projections entirely */
        const tensor *qkv[3] = { &w->w[ROLE_ATTN_Q], &w->w[ROLE_ATTN_K], &w->w[ROLE_ATTN_V] };
        float *const out[3] = { s->q, s->k, s->v };
        exec_matmul_multi(e, 3, qkv, s->xn, d, out, n);
    } else {
        exec_matmul(e, &w->w[ROLE_ATTN_Q], s->xn, d, s->q, qd, n, 0);
    }
    /* depth-wise LoRA (lora.h): y += s B (A x) per row, after the shared weight; no-op without */
    LORA(ROLE_ATTN_Q, s->xn, d, s->q, qd);
    if (stores) { LORA(ROLE_ATTN_K, s->xn, d, s->k, kvd); LORA(ROLE_ATTN_V, s->xn, d, s->v, kvd); }
    for (int32_t i = 0; i < n; i++) k_rope_cs(s->q + (int64_t)i * qd, m->n_head, hd, cs + (int64_t)i * hd);

    if (stores) {
        for (int32_t i = 0; i < n; i++) {
            if (!ROW_STORES(i)) continue;
            kv_layer *L = &kv->layers[ROW_LAYER(i)];
            k_rope_cs(s->k + (int64_t)i * kvd, m->n_head_kv, hd, cs + (int64_t)i * hd);
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
        exec_attention(e, &s->dims, &R, s->q + (int64_t)i0 * qd, pos + i0, seq + i0, s->att + (int64_t)i0 * qd, i1 - i0);
    }
    exec_matmul(e, &w->w[ROLE_ATTN_OUT], s->att, qd, x, d, n, 1);   /* x += o(att) */
    LORA(ROLE_ATTN_OUT, s->att, qd, x, d);

    for (int32_t i = 0; i < n; i++)
        k->rms_norm(s->xn + (int64_t)i * d, x + (int64_t)i * d, w->w[ROLE_FFN_NORM].data, d, m->eps);
    int ffn_lora = 0;
    for (int32_t i = 0; i < n && !ffn_lora; i++)
        ffn_lora = lora_on(m, ROW_LAYER(i), ROLE_FFN_GATE) || lora_on(m, ROW_LAYER(i), ROLE_FFN_UP);
    if (ffn_lora) {   /* LoRA deltas go in before SwiGLU */
        const tensor *gu[2] = { &w->w[ROLE_FFN_GATE], &w->w[ROLE_FFN_UP] };
        float *const gu_out[2] = { s->gate, s->up };
        exec_matmul_multi(e, 2, gu, s->xn, d, gu_out, n);
        LORA(ROLE_FFN_GATE, s->xn, d, s->gate, m->n_ff);
        LORA(ROLE_FFN_UP, s->xn, d, s->up, m->n_ff);
        k->swiglu(s->gate, s->up, (int64_t)n * m->n_ff);
    } else {
        exec_ffn_up(e, &w->w[ROLE_FFN_GATE], &w->w[ROLE_FFN_UP], s->xn, d, s->gate, s->up, n);
    }
    exec_matmul(e, &w->w[ROLE_FFN_DOWN], s->gate, m->n_ff, x, d, n, 1);   /* x += down(...) */
    LORA(ROLE_FFN_DOWN, s->gate, m->n_ff, x, d);
    return MOR_OK;
}
#undef LORA
#undef ROW_STORES
#undef ROW_LAYER
