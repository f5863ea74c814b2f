/* layer.c - a Llama decoder layer, as HF's LlamaDecoderLayer computes it:
 *   h = x + o(attn(rms1(x)))          (causal, GQA, RoPE, softmax in fp32)
 *   y = h + down(silu(gate(n)) * up(n)),  n = rms2(h)
 * over n rows that may belong to different sequences and positions. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "layer.h"
#include "lora.h"
#include "status.h"

/* Attention of one row over the visible cells of its sequence. */
static void attend(const mor_model *m, const kv_layer *L, layer_scratch *s, const float *q,
                   int32_t seq, int32_t pos, float *out)
{
    const int32_t hd = m->head_dim, kvd = m->n_head_kv * hd, group = m->n_head / m->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    int32_t nv = 0;
    for (int32_t c = 0; c < L->n_cells; c++)
        if (L->seq[c] == seq && L->pos[c] <= pos) s->vis[nv++] = c;
    for (int32_t h = 0; h < m->n_head; h++) {
        const float *qh = q + (int64_t)h * hd;
        const int32_t kvh = h / group;   /* repeat_kv: query head h reads KV head h / group */
        for (int32_t t = 0; t < nv; t++) {
            const float *k = L->k + (int64_t)s->vis[t] * kvd + (int64_t)kvh * hd;
            float d = 0;
            for (int32_t i = 0; i < hd; i++) d += qh[i] * k[i];
            s->probs[t] = d * scale;
        }
        mor_softmax(s->probs, nv);
        float *oh = out + (int64_t)h * hd;
        memset(oh, 0, sizeof(float) * (size_t)hd);
        for (int32_t t = 0; t < nv; t++) {
            const float *v = L->v + (int64_t)s->vis[t] * kvd + (int64_t)kvh * hd;
            for (int32_t i = 0; i < hd; i++) oh[i] += s->probs[t] * v[i];
        }
    }
}

mor_status layer_forward(const mor_model *m, int32_t l, mor_kv_cache *kv, layer_scratch *s,
                         float *x, const int32_t *pos, const int32_t *seq, int32_t n)
{
    const mor_layer *w = &m->layers[l];
    const int32_t d = m->n_embd, hd = m->head_dim, qd = m->n_head * hd, kvd = m->n_head_kv * hd, F = m->n_ff;
    const int stores = kv_layer_stores(kv, l);

    for (int32_t i = 0; i < n; i++)
        mor_rms_norm(s->xn + (int64_t)i * d, x + (int64_t)i * d, w->w[ROLE_ATTN_NORM].data, d, m->eps);
    mor_matmul(&w->w[ROLE_ATTN_Q], s->xn, s->q, n);
    /* depth-wise LoRA (lora.h): y += s B (A x) per row, after the shared weight; no-op without */
    lora_apply(m, l, ROLE_ATTN_Q, s->xn, d, s->q, qd, n);
    for (int32_t i = 0; i < n; i++) mor_rope(s->q + (int64_t)i * qd, m->n_head, hd, pos[i], m->rope_theta);

    if (stores) {   /* under KV sharing, recursions >= 1 skip the K/V projections entirely */
        kv_layer *L = &kv->layers[l];
        mor_matmul(&w->w[ROLE_ATTN_K], s->xn, s->k, n);
        mor_matmul(&w->w[ROLE_ATTN_V], s->xn, s->v, n);
        lora_apply(m, l, ROLE_ATTN_K, s->xn, d, s->k, kvd, n);
        lora_apply(m, l, ROLE_ATTN_V, s->xn, d, s->v, kvd, n);
        for (int32_t i = 0; i < n; i++) {
            mor_rope(s->k + (int64_t)i * kvd, m->n_head_kv, hd, pos[i], m->rope_theta);
            int32_t c = kv_append(kv, l, seq[i], pos[i]);
            if (c < 0) return mor_err(MOR_E_KV_FULL, "KV cache full at layer %d (%d cells)", l, L->n_cells);
            memcpy(L->k + (int64_t)c * kvd, s->k + (int64_t)i * kvd, sizeof(float) * (size_t)kvd);
            memcpy(L->v + (int64_t)c * kvd, s->v + (int64_t)i * kvd, sizeof(float) * (size_t)kvd);
        }
    }
    const kv_layer *R = kv_read_layer(kv, l);
    for (int32_t i = 0; i < n; i++)
        attend(m, R, s, s->q + (int64_t)i * qd, seq[i], pos[i], s->att + (int64_t)i * qd);
    mor_matmul(&w->w[ROLE_ATTN_OUT], s->att, s->o, n);
    lora_apply(m, l, ROLE_ATTN_OUT, s->att, qd, s->o, d, n);
    for (int64_t i = 0; i < (int64_t)n * d; i++) x[i] += s->o[i];

    for (int32_t i = 0; i < n; i++)
        mor_rms_norm(s->xn + (int64_t)i * d, x + (int64_t)i * d, w->w[ROLE_FFN_NORM].data, d, m->eps);
    mor_matmul(&w->w[ROLE_FFN_GATE], s->xn, s->gate, n);
    mor_matmul(&w->w[ROLE_FFN_UP], s->xn, s->up, n);
    lora_apply(m, l, ROLE_FFN_GATE, s->xn, d, s->gate, F, n);   /* before SwiGLU */
    lora_apply(m, l, ROLE_FFN_UP, s->xn, d, s->up, F, n);
    for (int64_t i = 0; i < (int64_t)n * F; i++) s->gate[i] = mor_silu(s->gate[i]) * s->up[i];
    mor_matmul(&w->w[ROLE_FFN_DOWN], s->gate, s->o, n);
    lora_apply(m, l, ROLE_FFN_DOWN, s->gate, F, s->o, d, n);
    for (int64_t i = 0; i < (int64_t)n * d; i++) x[i] += s->o[i];
    return MOR_OK;
}
