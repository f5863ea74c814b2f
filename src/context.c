/* context.c - creating a context: every buffer mor_decode needs, allocated once. */
#include <stdlib.h>
#include <string.h>
#include "abi.h"
#include "context.h"
#include "kernels.h"
#include "status.h"

void mor_context_params_init(mor_context_params *p, size_t size)
{
    mor_context_params d = { 0 };
    d.n_ctx = 0;          /* resolved against the model at create time */
    d.n_batch = 512;
    d.n_seq_max = 1;
    d.kv_mode = MOR_KV_MODEL_DEFAULT;
    d.n_threads = 1;
    abi_init(p, size, &d, sizeof d);
}

void mor_context_free(mor_context *c)
{
    if (!c) return;
    kv_free(c->kv);
    router_free(c->router);
    exec_free(&c->ls.exec);
    lora_scratch_free(&c->ls.lora);
    free(c->draft_mem);
    free(c->mem);
    free(c);
}

/* Every buffer of a context but the KV cache, the router's read-back and
 * the threads' scratch, in one block: (type, member, count). */
#define CTX_BUFFERS(X)                                                                                  \
    X(float, ls.xn, n * d) X(float, ls.q, n * qd) X(float, ls.k, n * kvd) X(float, ls.v, n * kvd)       \
    X(float, ls.att, n * qd) X(float, ls.o, n * d) X(float, ls.gate, n * ff) X(float, ls.up, n * ff)    \
    X(float, ls.inv_freq, hd / 2) X(float, ls.cs_own, n * hd)                                          \
    X(int32_t, idx, n) X(int32_t, pos, n) X(int32_t, seq, n) X(int32_t, depth, n) X(int32_t, hist, n)  \
    X(int32_t, seq_rows, p.n_seq_max) X(int32_t, logit_row, n) X(int32_t, row_seq, n) X(float, z, n * nr) X(float, st_scores, n * nr) \
    X(float, hidden, hid) X(float, st_hidden, hid) X(float, logits, (size_t)p.n_outputs * (size_t)m->n_vocab)

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

mor_status mor_context_create(mor_model *m, const mor_context_params *params, mor_context **out)
{
    err_clear();
    mor_status st;
    if (!out) return err_set(MOR_E_INVALID_ARG, "mor_context_create: out is NULL");
    *out = NULL;
    if (!m) return err_set(MOR_E_INVALID_ARG, "mor_context_create: model is NULL");
    if (!m->layers) return err_set(MOR_E_INVALID_ARG, "mor_context_create: the model was loaded vocab-only");

    mor_context_params p;
    mor_context_params_init(&p, sizeof p);
    if ((st = abi_read(&p, sizeof p, params, sizeof(abi_context_params_v1), "mor_context_params"))) return st;
    if (p.n_ctx == 0) p.n_ctx = (uint32_t)(m->n_ctx_train < 4096 ? m->n_ctx_train : 4096);
    if (p.n_batch == 0 || p.n_batch > (1u << 20) || p.n_ctx > (1u << 24) || p.n_seq_max == 0 || p.n_seq_max > (1u << 16))
        return err_set(MOR_E_INVALID_ARG, "mor_context_create: n_batch %u, n_ctx %u or n_seq_max %u out of range",
                       p.n_batch, p.n_ctx, p.n_seq_max);
    if (p.n_outputs == 0 || p.n_outputs > p.n_batch) p.n_outputs = p.n_batch;
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
    const size_t n = p.n_batch, d = (size_t)m->n_embd, nr = (size_t)m->n_rec, hd = (size_t)m->head_dim;
    const size_t qd = (size_t)m->n_head * hd, kvd = (size_t)m->n_head_kv * hd, ff = (size_t)m->n_ff;
    c->n_boundaries = mor_model_n_boundaries(m);
    const size_t hid = p.flags & MOR_CTX_CAPTURE_HIDDEN ? (size_t)c->n_boundaries * n * d : 0;
    /* plan the block, then lay it out: 64-byte aligned pieces, zeroed */
    size_t total = rec_bytes(m, (int32_t)n);
#define SIZE(T, member, count) total += align64(sizeof(T) * (count));
    CTX_BUFFERS(SIZE)
#undef SIZE
    /* malloc and align by hand: malloc is the one allocator users and tests can hook */
    c->mem = malloc(total + 63);
    if (!c->mem) { free(c); return err_set(MOR_E_NOMEM, "cannot allocate %zu bytes of context memory for n_batch %u", total, p.n_batch); }
    unsigned char *at = (unsigned char *)(((uintptr_t)c->mem + 63) & ~(uintptr_t)63);
    memset(at, 0, total);
#define LAY(T, member, count) c->member = (count) != 0 ? (void *)at : NULL; at += align64(sizeof(T) * (count));
    CTX_BUFFERS(LAY)
#undef LAY
    layer_scratch *s = &c->ls;
    k_rope_inv_freq(s->inv_freq, m->arch.rope_dims, m->rope_theta);
    int64_t kmax = m->n_embd;   /* the widest matmul input: n_embd, H*hd or n_ff */
    if ((int64_t)m->n_head * m->head_dim > kmax) kmax = (int64_t)m->n_head * m->head_dim;
    if (m->n_ff > kmax) kmax = m->n_ff;
    s->dims = (attn_dims){ m->n_head, m->n_head_kv, m->head_dim, 0, 0, 0 };
    if ((st = exec_init(&s->exec, p.n_threads, p.n_batch, kmax, m->n_head / m->n_head_kv, p.n_ctx)) || (st = lora_scratch_init(&s->lora, m, p.n_batch))) {
        mor_context_free(c);
        return st;
    }
    s->exec.k = context_kernels(p.flags);
    if ((st = kv_create(m, mode, (uint32_t)p.kv_type, (int32_t)p.n_ctx, (int32_t)p.n_seq_max, (int32_t)p.n_batch, &c->kv)) ||
        (st = router_create(m, (int32_t)p.n_batch, &c->router))) {
        mor_context_free(c);
        return st;
    }
    rec_bind(&c->eng, m, c->kv, c->router, s, (int32_t)n, at);
    c->eng.abort_cb = p.abort_callback;
    c->eng.abort_ud = p.abort_user_data;
    *out = c;
    return MOR_OK;
}

const kernel_set *context_kernels(uint32_t flags)
{
    return flags & MOR_CTX_FAST_BF16 ? kernels_fast_bf16(kernels_best()) : kernels_best();
}

void context_stage_row(mor_context *c, int32_t i, int32_t row, int32_t logit_slot)
{
    const rec_engine *e = &c->eng;
    const int32_t nr = c->model->n_rec;
    c->logit_row[i] = logit_slot;
    c->depth[i] = rec_depth(e, row);
    memcpy(c->z + (size_t)i * nr, rec_z(e, row), sizeof(float) * (size_t)nr);
    memcpy(c->st_scores + (size_t)i * nr, rec_p(e, row), sizeof(float) * (size_t)nr);
}

const mor_model *mor_context_model(const mor_context *c) { return c ? c->model : NULL; }
mor_kv_cache *mor_context_kv(mor_context *c) { return c ? c->kv : NULL; }
mor_router *mor_context_router(mor_context *c) { return c ? c->router : NULL; }
