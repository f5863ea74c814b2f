/* embeddings.c - mor_embeddings_seq: a sequence's embedding, pooled from the
 * final hidden states that the last mor_decode captured (mor_get_hidden's
 * last point). Reads the decode's published outputs only, so a failed
 * decode (which publishes nothing) leaves the last good embedding. */
#include <math.h>
#include <string.h>
#include "context.h"
#include "status.h"

mor_status mor_embeddings_seq(mor_context *c, mor_seq_id seq, int32_t pooling, uint32_t flags, float *out,
                              int32_t cap)
{
    if (!c || !out) return err_set(MOR_E_INVALID_ARG, "mor_embeddings_seq: NULL %s", c ? "out" : "context");
    if (!c->hidden)
        return err_set(MOR_E_INVALID_ARG, "mor_embeddings_seq: the context was created without "
                       "MOR_CTX_CAPTURE_HIDDEN");
    if (pooling != MOR_POOL_MEAN && pooling != MOR_POOL_LAST)
        return err_set(MOR_E_INVALID_ARG, "mor_embeddings_seq: unknown pooling %d (MOR_POOL_MEAN or MOR_POOL_LAST)",
                       pooling);
    if (flags & ~(uint32_t)MOR_EMBD_NORMALIZE)
        return err_set(MOR_E_INVALID_ARG, "mor_embeddings_seq: unknown flags 0x%x", flags);
    const int32_t d = c->model->n_embd;
    if (cap < d) return err_set(MOR_E_BUFFER_TOO_SMALL, "mor_embeddings_seq: cap %d < n_embd %d", cap, d);
    /* the final norm's output is the last capture point */
    const float *h = c->hidden + (size_t)(c->n_boundaries - 1) * c->params.n_batch * (size_t)d;
    int32_t n = 0, last = -1;
    for (int32_t i = 0; i < c->n_rows; i++)
        if (c->row_seq[i] == seq) { n++; last = i; }   /* positions increase along the batch within a sequence */
    if (!n) return err_set(MOR_E_OUT_OF_RANGE, "mor_embeddings_seq: the last decode had no row of sequence %d", seq);

    double norm2 = 0;
    for (int32_t j = 0; j < d; j++) {
        double v;
        if (pooling == MOR_POOL_LAST) v = h[(size_t)last * d + j];
        else {
            double s = 0;
            for (int32_t i = 0; i <= last; i++)
                if (c->row_seq[i] == seq) s += h[(size_t)i * d + j];
            v = s / n;
        }
        out[j] = (float)v;
        norm2 += (double)out[j] * out[j];
    }
    if ((flags & MOR_EMBD_NORMALIZE) && norm2 > 0) {
        const double inv = 1.0 / sqrt(norm2);
        for (int32_t j = 0; j < d; j++) out[j] = (float)(out[j] * inv);
    }
    err_clear();
    return MOR_OK;
}
