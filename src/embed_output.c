/* embed_output.c - token embedding and output head. See embed_output.h. */
#include "embed_output.h"
#include "kernels.h"

void model_embed_row(const mor_model *m, int32_t t, float *out)
{
    k_embed_row(&m->tok_embd, t, out);
    const float sc = m->arch.embd_scale;
    if (sc != 0)   /* as HF: embeds * normalizer, in the embedding's float type */
        for (int32_t i = 0; i < m->n_embd; i++) out[i] *= sc;
}

void model_output_norm(const mor_model *m, float *out, const float *x)
{
    if (m->arch.layer_norm) k_layer_norm(out, x, m->output_norm.data, m->output_norm_b.data, m->n_embd, m->eps);
    else k_rms_norm(out, x, m->output_norm.data, m->n_embd, m->eps);
}

void model_logits(const mor_model *m, exec_ctx *e, const float *xn, int32_t n, float *logits)
{
    model_logits_with(m, &m->output, e, xn, n, logits);
}

void model_logits_with(const mor_model *m, const tensor *w, exec_ctx *e, const float *xn, int32_t n, float *logits)
{
    exec_matmul(e, w, xn, m->n_embd, logits, m->n_vocab, n, 0);
    if (m->arch.final_softcap > 0) k_softcap(logits, (int64_t)n * m->n_vocab, m->arch.final_softcap);
}
