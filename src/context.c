/* context.c - creating a context: every buffer mor_decode needs, allocated once. */
#include <stdlib.h>
#include <string.h>
#include "context.h"
#include "kernels.h"
#include "status.h"

void mor_context_params_init(mor_context_params *p, size_t size)
{
    if (!p || size < sizeof(uint32_t)) return;
    mor_context_params d = { 0 };
    d.n_ctx = 0;          /* resolved against the model at create time */
    d.n_batch = 512;
    d.n_seq_max = 1;
    d.kv_mode = MOR_KV_MODEL_DEFAULT;
    d.n_threads = 1;
    d.size = (uint32_t)(size < sizeof d ? size : sizeof d);
    memcpy(p, &d, d.size);
}

void mor_context_free(mor_context *c)
{
    if (!c) return;
    kv_free(c->kv);
    router_free(c->router);
    layer_scratch *s = &c->ls;
    free(s->xn); free(s->q); free(s->k); free(s->v); free(s->att); free(s->o);
    free(s->gate); free(s->up); free(s->inv_freq); free(s->cs_own);
    exec_free(&s->exec);
    lora_scratch_free(&s->lora);
    free(c->x); free(c->y); free(c->h1); free(c->rtmp);
    free(c->z); free(c->g); free(c->p);
    free(c->idx); free(c->pos); free(c->seq); free(c->depth); free(c->seq_rows);
    free(c->active); free(c->sel); free(c->done); free(c->rank);
    free(c->st_scores); free(c->cs);
    free(c->logits); free(c->logit_row); free(c->hidden); free(c->st_hidden);
    free(c);
}

static void *alloc_n(size_t n, size_t size, int *ok)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) *ok = 0;
    return p;
}

mor_status mor_context_create(mor_model *m, const mor_context_params *params, mor_context **out)
{
    mor_status st;
    if (!out) return err_set(MOR_E_INVALID_ARG, "mor_context_create: out is NULL");
    *out = NULL;
    if (!m) return err_set(MOR_E_INVALID_ARG, "mor_context_create: model is NULL");
    if (!m->layers) return err_set(MOR_E_INVALID_ARG, "mor_context_create: the model was loaded vocab-only");

    mor_context_params p;
    mor_context_params_init(&p, sizeof p);
    if (params) {
        if (params->size < offsetof(mor_context_params, abort_callback) || params->size > sizeof p)
            return err_set(MOR_E_ABI, "mor_context_params.size %u is not one this libmor knows (max %zu)",
                           params->size, sizeof p);
        memcpy(&p, params, params->size);
        p.size = sizeof p;
    }
    if (p.n_ctx == 0) p.n_ctx = (uint32_t)(m->n_ctx_train < 4096 ? m->n_ctx_train : 4096);
    if (p.n_batch == 0 || p.n_batch > (1u << 20) || p.n_ctx > (1u << 24) || p.n_seq_max == 0 || p.n_seq_max > (1u << 16))
        return err_set(MOR_E_INVALID_ARG, "mor_context_create: n_batch %u, n_ctx %u or n_seq_max %u out of range",
                       p.n_batch, p.n_ctx, p.n_seq_max);
    int32_t mode = p.kv_mode;
    if (mode == MOR_KV_MODEL_DEFAULT) mode = m->kv_shared ? MOR_KV_SHARED : MOR_KV_RECURSION_WISE;
    /* without KV sharing the official code has one path: the trained one */
    if (mode == MOR_KV_DENSE && !m->kv_shared) mode = MOR_KV_RECURSION_WISE;
    if (mode != MOR_KV_RECURSION_WISE && mode != MOR_KV_SHARED && mode != MOR_KV_DENSE)
        return err_set(MOR_E_INVALID_ARG, "mor_context_create: unknown kv_mode %d", p.kv_mode);
    if (p.kv_type != MOR_KV_TYPE_F32 && p.kv_type != MOR_KV_TYPE_F16 && p.kv_type != MOR_KV_TYPE_Q8_0)
        return err_set(MOR_E_INVALID_ARG, "mor_context_create: unknown kv_type %d", p.kv_type);
    if (p.kv_type == MOR_KV_TYPE_Q8_0 && m->head_dim % 32)
        return err_set(MOR_E_UNSUPPORTED, "a Q8_0 KV cache needs head_dim %d to be a multiple of 32", m->head_dim);
    if (mode == MOR_KV_SHARED && m->n_rec < 2)
        return err_set(MOR_E_UNSUPPORTED, "KV sharing needs a model with at least 2 recursions");

    mor_context *c = calloc(1, sizeof *c);
    if (!c) return err_set(MOR_E_NOMEM, "out of memory");
    c->model = m; c->params = p;
    const size_t n = p.n_batch, d = (size_t)m->n_embd, nr = (size_t)m->n_rec;
    const size_t qd = (size_t)m->n_head * m->head_dim, kvd = (size_t)m->n_head_kv * m->head_dim;
    int ok = 1;
    layer_scratch *s = &c->ls;
    s->xn = alloc_n(n * d, sizeof(float), &ok);
    s->q = alloc_n(n * qd, sizeof(float), &ok);
    s->k = alloc_n(n * kvd, sizeof(float), &ok);
    s->v = alloc_n(n * kvd, sizeof(float), &ok);
    s->att = alloc_n(n * qd, sizeof(float), &ok);
    s->o = alloc_n(n * d, sizeof(float), &ok);
    s->gate = alloc_n(n * (size_t)m->n_ff, sizeof(float), &ok);
    s->up = alloc_n(n * (size_t)m->n_ff, sizeof(float), &ok);
    s->inv_freq = alloc_n((size_t)m->head_dim / 2, sizeof(float), &ok);
    s->cs_own = alloc_n(n * (size_t)m->head_dim, sizeof(float), &ok);
    if (s->inv_freq) k_rope_inv_freq(s->inv_freq, m->arch.rope_dims, m->rope_theta);
    c->x = alloc_n(n * d, sizeof(float), &ok);
    c->y = alloc_n(n * d, sizeof(float), &ok);
    c->h1 = alloc_n(n * d, sizeof(float), &ok);
    c->rtmp = alloc_n(3 * d, sizeof(float), &ok);
    c->z = alloc_n(n * nr, sizeof(float), &ok);
    c->g = alloc_n(n, sizeof(float), &ok);
    c->p = alloc_n(n, sizeof(float), &ok);
    c->idx = alloc_n(n, sizeof(int32_t), &ok);
    c->pos = alloc_n(n, sizeof(int32_t), &ok);
    c->seq = alloc_n(n, sizeof(int32_t), &ok);
    c->depth = alloc_n(n, sizeof(int32_t), &ok);
    c->seq_rows = alloc_n(p.n_seq_max, sizeof(int32_t), &ok);
    c->active = alloc_n(n, 1, &ok);
    c->sel = alloc_n(n, 1, &ok);
    c->done = alloc_n(n, 1, &ok);
    c->rank = alloc_n(n, sizeof(router_rank), &ok);
    c->st_scores = alloc_n(n * nr, sizeof(float), &ok);
    c->cs = alloc_n(n * (size_t)m->head_dim, sizeof(float), &ok);
    c->logit_row = alloc_n(n, sizeof(int32_t), &ok);
    c->n_boundaries = mor_model_n_boundaries(m);
    if (p.flags & MOR_CTX_CAPTURE_HIDDEN) {
        c->hidden = alloc_n((size_t)c->n_boundaries * n * d, sizeof(float), &ok);
        c->st_hidden = alloc_n((size_t)c->n_boundaries * n * d, sizeof(float), &ok);
    }
    if (!ok) { mor_context_free(c); return err_set(MOR_E_NOMEM, "cannot allocate context scratch for n_batch %u", p.n_batch); }
    int64_t kmax = m->n_embd;   /* the widest matmul input: n_embd, H*hd or n_ff */
    if ((int64_t)m->n_head * m->head_dim > kmax) kmax = (int64_t)m->n_head * m->head_dim;
    if (m->n_ff > kmax) kmax = m->n_ff;
    s->dims = (attn_dims){ m->n_head, m->n_head_kv, m->head_dim, 0, 0, 0 };
    if ((st = exec_init(&s->exec, p.n_threads, p.n_batch, kmax, m->n_head / m->n_head_kv, p.n_ctx)) || (st = lora_scratch_init(&s->lora, m, p.n_batch))) {
        mor_context_free(c);
        return st;
    }
    if ((st = kv_create(m, mode, (uint32_t)p.kv_type, (int32_t)p.n_ctx, (int32_t)p.n_seq_max, (int32_t)p.n_batch, &c->kv)) ||
        (st = router_create(m, (int32_t)p.n_batch, &c->router))) {
        mor_context_free(c);
        return st;
    }
    *out = c;
    return MOR_OK;
}

const mor_model *mor_context_model(const mor_context *c) { return c ? c->model : NULL; }
mor_kv_cache *mor_context_kv(mor_context *c) { return c ? c->kv : NULL; }
mor_router *mor_context_router(mor_context *c) { return c ? c->router : NULL; }
