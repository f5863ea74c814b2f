/* serve.c - serving many requests at once: a FIFO queue, slots (one sequence
 * of the server's context each), a KV budget, and three ways to step:
 *
 *   SERIAL, SEQUENCE: one mor_decode per step over the next input of every
 *     running request (SERIAL runs one request at a time).
 *   DEPTHWISE (continuous depth-wise batching): tokens are rows that live
 *     across steps. A step (1) embeds the entering rows and runs the unique
 *     first layers over them, (2) runs the shared block once over every
 *     row still recursing, whatever its recursion (layer_forward with a per-row layer: same
 *     weights, per-row cache layer and LoRA), (3) decides after each
 *     recursion whether the row goes on (THRESHOLD router, depth cap,
 *     confidence; a row not taken where the recursion caches every token's
 *     K/V, kv_caches_every_row, still runs it, for its K/V only, as
 *     mor_decode does), and (4) finishes the rows that stopped: unique last
 *     layers, norm, output matrix, sampling. The slot's next token enters at
 *     the next step, so a depth-d token takes d steps, and a row's place in
 *     the batch goes to another sequence as soon as it exits.
 *
 * Prompts longer than the rows free in a step (n_batch at most) enter in
 * chunks, one per step: a chunk runs every layer (its K/V is cached in all
 * of them) but gives no logits, and the next chunk enters once it is done.
 *
 * Prompt reuse: a slot whose request ended keeps its sequence's cells and
 * the tokens they hold (kept[], with the router settings they were computed
 * under). Admission gives a request the free slot with the longest common
 * prefix, drops the rest of that slot's cells, and starts its prompt past
 * the prefix (never past its last token, which gives the logits). Kept
 * cells of other free slots are dropped, least recently used first, until
 * the running requests' reservations and the kept cells fit in n_ctx.
 *
 * Context shift (MOR_SERVE_CONTEXT_SHIFT): a sequence holds n_ctx_seq
 * positions at most. A longer prompt is truncated at submit
 * (mor_prompt_truncate, serve_shift.c); a running sequence that is full
 * when its next token is to enter is shifted once the step that sampled
 * that token has succeeded (shift_slots), so a step stays a transaction and
 * the shift meets no row of the slot in flight: every recursion's cells of
 * the sequence are in place for mor_kv_seq_rm and mor_kv_seq_add.
 *
 * Why outputs equal a per-sequence decode: routing is causal (THRESHOLD,
 * TOKEN, FORCED), so a row's decisions depend on itself only; a sequence
 * has one group of rows in flight at a time (a chunk of its prompt, or its
 * last token), whose rows move through the recursions in lockstep, so when a
 * row attends at recursion r every earlier token of its sequence that
 * reached r is cached there; attention sums a row's cells in position order
 * (kernels_threads.c), so it does not matter which step or which cells they
 * came in; and the group runs the last layers only once all its rows have
 * exited, in one call, as mor_decode does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "abi.h"
#include "context.h"
#include "grammar.h"
#include "kernels.h"
#include "recursion.h"
#include "sampler.h"
#include "serve.h"
#include "status.h"

typedef struct {
    mor_request_id id;
    int32_t    state, slot;
    mor_token *prompt, *stop, *out;
    int32_t   *depth;
    int32_t    n_prompt, n_stop, max_tokens, n_out;
    int32_t    n_cached;     /* prompt tokens reused from the slot's kept cells */
    mor_sampler *smp;
    mor_grammar *gr;         /* owned, or NULL: the output's grammar */
    uint8_t     *gr_ok;      /* [n_vocab]: the tokens it allows next (check_logits) */
    /* self-speculative decoding (mor_server_set_speculate): drafts per step
     * (0: off), their depth, the step's buffers (one allocation), counts */
    int32_t      spec_n, spec_d;
    float        exit_thr;   /* mor_server_set_exit: its rows' exit threshold (NaN: the server's) */
    spec_bufs    spec;
    int32_t     *spec_depth; /* [spec_n + 1]: each verified input's depth */
    void        *spec_mem;
    int64_t      drafted, accepted;
    /* context shift (MOR_SERVE_CONTEXT_SHIFT): the tokens kept, the prompt
     * as submitted when it was truncated (n_full 0: it was not), the
     * shifts and the tokens they dropped */
    int32_t      n_keep, n_full;
    mor_token   *full;
    int32_t      n_shifts, n_discarded;
} serve_req;

/* What a free slot keeps for reuse: its cells' tokens (positions 0..n-1),
 * the router settings they were computed under, when it was freed. */
typedef struct {
    int32_t  n;
    uint64_t stamp;
    int32_t  mode, forced_depth, max_depth;
    float    threshold[MOR_MAX_RECURSIONS];
    float    exit_thr;   /* the exit threshold its rows ran under (0 without exits) */
} serve_kept;

typedef struct {
    serve_req *req;          /* NULL: free */
    int32_t    n_pos;        /* next position (while the prompt enters: prompt tokens entered) */
    int32_t    entered;      /* the whole prompt has entered */
    mor_token  next;         /* the token to enter next (after the prompt) */
    int32_t    waiting;      /* an input is waiting to enter */
    int32_t    n_rows, n_exited;   /* rows of the group in flight (DEPTHWISE) */
    serve_kept made;         /* the router settings when the request was admitted */
    int32_t    copied;       /* admitted with cells copied from a running slot (this step) */
    int32_t    spec_rows;    /* inputs verified by this step's speculation (0: none) */
} serve_slot;

struct mor_server {
    mor_model        *m;
    mor_server_params p;
    mor_context      *ctx;
    mor_batch        *batch;
    serve_req       **reqs;  int32_t n_reqs, cap_reqs;
    int32_t          *queue; int32_t q_head, q_len, q_cap;
    serve_slot       *slots;
    int64_t           reserved;       /* KV cells promised to running requests */
    serve_hooks       hooks;          /* the bench hooks of serve.h */
    int64_t           n_steps, sv_n_steps;
    /* DEPTHWISE: the rows are the context's engine rows (recursion.h), a
     * slot's rows tagged with the slot */
    int32_t *list, *list2;                /* [n_batch] */
    int32_t  spec_used;                   /* rows the step's speculation ran (step_speculate) */
    float   *logits;                      /* [n_slots][n_vocab] */
    float   *masked;                      /* [n_vocab]: logits under a request's grammar */
    /* The state before the step in progress, put back if it fails (a failed
     * step changes nothing): rows (one copy of the records below sv_n_hi),
     * slots, admissions. */
    unsigned char *sv_rows;
    int32_t     sv_n_hi;
    serve_slot *sv_slots;
    int32_t *admitted, n_admitted, sv_q_head, sv_q_len;
    void    *mem;                         /* the one allocation slots, lists, logits and saved copies are in */
    int64_t  sv_reserved;
    /* prompt reuse (not part of a step's saved state: see admit) */
    serve_kept *kept;                     /* [n_slots] */
    mor_token  *kept_tok;                 /* [n_slots][n_ctx] */
    uint64_t    stamp;
    router_stats sv_stats;   /* the router's statistics (mor_decode adds to them) */
};

static size_t up8(size_t n) { return (n + 7) / 8 * 8; }

void mor_server_params_init(mor_server_params *p, size_t size)
{
    mor_server_params d;
    memset(&d, 0, sizeof d);
    d.mode = MOR_SERVE_DEPTHWISE;
    d.n_slots = 8;
    d.n_batch = 512;
    d.n_threads = 1;
    d.exit_threshold = 0.9f;
    abi_init(p, size, &d, sizeof d);
}

size_t mor_sizeof_server_params(void) { return sizeof(mor_server_params); }

void serve_set_logits_hook(mor_server *srv, serve_logits_fn fn, void *ud)
{
    if (srv) { srv->hooks.logits = fn; srv->hooks.logits_ud = ud; }
}

static void req_free(serve_req *q)
{
    if (!q) return;
    mor_sampler_free(q->smp);
    mor_grammar_free(q->gr);
    free(q->gr_ok);
    free(q->spec_mem);
    free(q);
}

void mor_server_free(mor_server *s)
{
    if (!s) return;
    for (int32_t i = 0; i < s->n_reqs; i++) req_free(s->reqs[i]);
    free(s->reqs); free(s->queue); free(s->mem); free(s->kept); free(s->kept_tok);
    mor_batch_free(s->batch);
    mor_context_free(s->ctx);
    free(s);
}

mor_status mor_server_create(mor_model *m, const mor_server_params *params, mor_server **out)
{
    if (!out) return err_set(MOR_E_INVALID_ARG, "mor_server_create: out is NULL");
    *out = NULL;
    if (!m) return err_set(MOR_E_INVALID_ARG, "mor_server_create: model is NULL");
    mor_server_params p;
    mor_server_params_init(&p, sizeof p);
    mor_status st = abi_read(&p, sizeof p, params, sizeof(abi_server_params_v1), "mor_server_params");
    if (st) return st;
    if (p.mode < MOR_SERVE_SERIAL || p.mode > MOR_SERVE_DEPTHWISE)
        return err_set(MOR_E_INVALID_ARG, "mor_server_create: unknown mode %d", p.mode);
    if (p.n_slots == 0 || p.n_slots > 4096 || p.n_batch == 0 || p.n_batch > (1u << 16))
        return err_set(MOR_E_INVALID_ARG, "mor_server_create: n_slots %u or n_batch %u out of range",
                       p.n_slots, p.n_batch);
    if ((st = router_exit_check(m, p.exit_mode, p.exit_threshold, "mor_server_create"))) return st;
    if (p.exit_mode != MOR_EXIT_NONE && p.mode != MOR_SERVE_DEPTHWISE)
        return err_set(MOR_E_UNSUPPORTED, "mor_server_create: exits need MOR_SERVE_DEPTHWISE");
    if (p.mode == MOR_SERVE_SERIAL) p.n_slots = 1;
    if (p.flags & ~(uint32_t)(MOR_SERVE_NO_PROMPT_REUSE | MOR_SERVE_FAST_BF16 | MOR_SERVE_CONTEXT_SHIFT))
        return err_set(MOR_E_INVALID_ARG, "mor_server_create: unknown flags 0x%x", p.flags);

    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = p.n_ctx; cp.n_batch = p.n_batch; cp.n_seq_max = p.n_slots;
    cp.kv_mode = p.kv_mode; cp.n_threads = p.n_threads;
    cp.flags = p.flags & MOR_SERVE_FAST_BF16 ? MOR_CTX_FAST_BF16 : 0;
    cp.abort_callback = p.abort_callback; cp.abort_user_data = p.abort_user_data;   /* mor_decode polls it too */
    mor_server *s = calloc(1, sizeof *s);
    if (!s) return err_set(MOR_E_NOMEM, "out of memory");
    s->m = m;
    s->hooks.finish_every = 1;
    st = mor_context_create(m, &cp, &s->ctx);
    if (st) { mor_server_free(s); return st; }
    if (p.exit_mode != MOR_EXIT_NONE && mor_kv_mode(s->ctx->kv) == MOR_KV_DENSE) {   /* (the mode in effect) */
        mor_server_free(s);
        return err_set(MOR_E_UNSUPPORTED, "mor_server_create: confidence exits skip recursions, but under "
                       "MOR_KV_DENSE every token runs every recursion for its K/V");
    }
    p.n_ctx = s->ctx->params.n_ctx;
    const int32_t mp = context_max_pos(s->ctx), whole = (int64_t)p.n_ctx < mp ? (int32_t)p.n_ctx : mp;
    if (p.n_ctx_seq > (uint32_t)whole) {
        mor_server_free(s);
        return err_set(MOR_E_INVALID_ARG, "mor_server_create: n_ctx_seq %u is more than n_ctx %u or the model's "
                       "context %d", p.n_ctx_seq, p.n_ctx, (int)mp);
    }
    if (!p.n_ctx_seq) p.n_ctx_seq = (uint32_t)whole;
    s->p = p;
    if (m->router_type == MOR_ROUTER_TYPE_EXPERT) mor_router_set_mode(s->ctx->router, MOR_ROUTE_THRESHOLD, 0);
    router_own_exits(s->ctx->router, p.exit_mode, p.exit_threshold);
    const size_t nb = p.n_batch;
    int ok = mor_batch_create((int32_t)nb, &s->batch) == MOR_OK;
    if (ok && p.exit_mode != MOR_EXIT_NONE) ok = router_seq_exits(s->ctx->router, (int32_t)p.n_slots) == MOR_OK;
    /* The slots, their saved copies and the step's lists in one allocation, planned here. */
    const size_t ns = p.n_slots, a_slots = up8(sizeof(serve_slot) * ns), a_list = up8(sizeof(int32_t) * (nb + 1)),
                 a_logits = up8(sizeof(float) * ns * (size_t)m->n_vocab), a_rows = up8(rec_span(&s->ctx->eng, (int32_t)nb)),
                 a_adm = up8(sizeof(int32_t) * (ns + 1)), a_masked = up8(sizeof(float) * (size_t)m->n_vocab);
    char *at = s->mem = ok ? calloc(1, 2 * a_slots + 2 * a_list + a_logits + a_rows + a_adm + a_masked) : NULL;
    if (!at) { mor_server_free(s); return err_set(MOR_E_NOMEM, "cannot allocate the server"); }
    s->slots = (serve_slot *)at; at += a_slots;
    s->sv_slots = (serve_slot *)at; at += a_slots;
    s->list = (int32_t *)at; at += a_list;
    s->list2 = (int32_t *)at; at += a_list;
    s->logits = (float *)at; at += a_logits;
    s->sv_rows = (unsigned char *)at; at += a_rows;
    s->admitted = (int32_t *)at; at += a_adm;
    s->masked = (float *)at;
    if (!(p.flags & MOR_SERVE_NO_PROMPT_REUSE)) {
        s->kept = calloc(ns, sizeof *s->kept);
        s->kept_tok = malloc(sizeof(mor_token) * ns * (size_t)p.n_ctx);
        if (!s->kept || !s->kept_tok) { mor_server_free(s); return err_set(MOR_E_NOMEM, "cannot allocate the server"); }
    }
    *out = s;
    err_clear();
    return MOR_OK;
}

mor_router *mor_server_router(mor_server *s) { return s ? s->ctx->router : NULL; }

static serve_req *find(const mor_server *s, mor_request_id id);

/* The request a setter changes: a queued one (who names the setter). */
static mor_status find_queued(mor_server *s, mor_request_id id, const char *who, serve_req **out)
{
    serve_req *q = find(s, id);
    if (!q) return err_set(MOR_E_OUT_OF_RANGE, "%s: no request %d", who, (int)id);
    if (q->state != MOR_REQ_QUEUED)
        return err_set(MOR_E_INVALID_ARG, "%s: request %d is not queued any more", who, (int)id);
    *out = q;
    return MOR_OK;
}

/* The settings of a queued request, or of one being submitted (not queued
 * yet): each checks its values and changes q only when it succeeds, so
 * that the setters and mor_server_submit_request share them. */
static mor_status req_grammar(mor_server *s, serve_req *q, mor_grammar *g, const char *who)
{
    if (grammar_n_vocab(g) != s->m->n_vocab)
        return err_set(MOR_E_INVALID_ARG, "%s: the grammar was made for a vocabulary of %d tokens, "
                       "the server's model has %d", who, (int)grammar_n_vocab(g), (int)s->m->n_vocab);
    uint8_t *ok = malloc((size_t)s->m->n_vocab);
    if (!ok) return err_set(MOR_E_NOMEM, "%s: out of memory", who);
    q->gr = g;
    q->gr_ok = ok;
    return MOR_OK;
}

static mor_status req_speculate(mor_server *s, serve_req *q, int32_t n_draft, int32_t draft_depth, const char *who)
{
    if (n_draft < 0 || n_draft > (int32_t)s->p.n_batch - 1)
        return err_set(MOR_E_INVALID_ARG, "%s: n_draft %d out of range [0, %u] (n_batch - 1)", who, (int)n_draft,
                       s->p.n_batch - 1);
    if (draft_depth < 1 || draft_depth > s->m->n_rec)
        return err_set(MOR_E_OUT_OF_RANGE, "%s: draft depth %d out of range [1, %d]", who, (int)draft_depth,
                       (int)s->m->n_rec);
    void *mem = NULL;
    spec_bufs b = { 0 };
    int32_t *depth = NULL;
    if (n_draft) {   /* rows, tmp, drafts, hist, depths [n + 1]; logits [n + 1][n_vocab] */
        const size_t n1 = (size_t)n_draft + 1, a = up8(sizeof(int32_t) * n1);
        char *at = mem = malloc(5 * a + sizeof(float) * n1 * (size_t)s->m->n_vocab);
        if (!mem) return err_set(MOR_E_NOMEM, "%s: out of memory", who);
        b.rows = (int32_t *)at; at += a;
        b.tmp = (int32_t *)at; at += a;
        b.drafts = (mor_token *)at; at += a;
        b.hist = (mor_token *)at; at += a;
        depth = (int32_t *)at; at += a;
        b.logits = (float *)at;
    }
    free(q->spec_mem);
    q->spec_mem = mem; q->spec = b; q->spec_depth = depth;
    q->spec_n = n_draft; q->spec_d = draft_depth;
    return MOR_OK;
}

static mor_status req_exit(mor_server *s, serve_req *q, float threshold, const char *who)
{
    router_settings r;
    router_get_settings(s->ctx->router, &r);
    if (r.exit_mode == MOR_EXIT_NONE)
        return err_set(MOR_E_UNSUPPORTED, "%s: the server has no exits (mor_server_params.exit_mode)", who);
    mor_status st = isnan(threshold) ? MOR_OK : router_exit_check(s->m, r.exit_mode, threshold, who);
    if (st) return st;
    q->exit_thr = threshold;
    return MOR_OK;
}

mor_status mor_server_set_grammar(mor_server *s, mor_request_id id, mor_grammar *g)
{
    if (!s || !g) return err_set(MOR_E_INVALID_ARG, "mor_server_set_grammar: %s is NULL", !s ? "server" : "grammar");
    serve_req *q = find(s, id);
    if (!q) return err_set(MOR_E_OUT_OF_RANGE, "mor_server_set_grammar: no request %d", (int)id);
    if (q->state != MOR_REQ_QUEUED || q->gr)
        return err_set(MOR_E_INVALID_ARG, "mor_server_set_grammar: request %d is %s", (int)id,
                       q->gr ? "constrained already" : "not queued any more");
    mor_status st = req_grammar(s, q, g, "mor_server_set_grammar");
    if (!st) err_clear();
    return st;
}

mor_sampler *mor_server_request_sampler(mor_server *s, mor_request_id id)
{
    serve_req *q = find(s, id);
    return q && q->state == MOR_REQ_QUEUED ? q->smp : NULL;
}

mor_status mor_server_set_speculate(mor_server *s, mor_request_id id, int32_t n_draft, int32_t draft_depth)
{
    static const char who[] = "mor_server_set_speculate";
    if (!s) return err_set(MOR_E_INVALID_ARG, "%s: NULL server", who);
    serve_req *q = NULL;
    mor_status st = find_queued(s, id, who, &q);
    if (!st) st = req_speculate(s, q, n_draft, draft_depth, who);
    if (!st) err_clear();
    return st;
}

mor_status mor_server_set_exit(mor_server *s, mor_request_id id, float threshold)
{
    static const char who[] = "mor_server_set_exit";
    if (!s) return err_set(MOR_E_INVALID_ARG, "%s: NULL server", who);
    serve_req *q = NULL;
    mor_status st = find_queued(s, id, who, &q);
    if (!st) st = req_exit(s, q, threshold, who);
    if (!st) err_clear();
    return st;
}

mor_status mor_server_request_speculation(const mor_server *s, mor_request_id id, int64_t *drafted,
                                          int64_t *accepted)
{
    const serve_req *q = find(s, id);
    if (!q) return err_set(MOR_E_OUT_OF_RANGE, "mor_server_request_speculation: unknown request %d", (int)id);
    if (drafted) *drafted = q->drafted;
    if (accepted) *accepted = q->accepted;
    err_clear();
    return MOR_OK;
}

static serve_req *find(const mor_server *s, mor_request_id id)
{
    return s && id >= 0 && id < s->n_reqs ? s->reqs[id] : NULL;
}

/* The positions one sequence may hold (n_ctx_seq, set at creation). */
static int32_t seq_limit(const mor_server *s) { return (int32_t)s->p.n_ctx_seq; }

static int shifting(const mor_server *s) { return (s->p.flags & MOR_SERVE_CONTEXT_SHIFT) != 0; }

static mor_status no_shift(const char *who)
{
    return err_set(MOR_E_INVALID_ARG, "%s: the server was created without MOR_SERVE_CONTEXT_SHIFT", who);
}

static mor_status req_keep(mor_server *s, serve_req *q, int32_t n_keep, const char *who)
{
    if (!shifting(s)) return no_shift(who);
    if (n_keep < -1) return err_set(MOR_E_INVALID_ARG, "%s: n_keep %d (-1: the prompt)", who, (int)n_keep);
    const int32_t n = q->n_full ? q->n_full : q->n_prompt, lim = seq_limit(s);
    const int32_t keep = n_keep < 0 || n_keep > n ? n : n_keep;
    if (keep > lim - 2 && (int64_t)n + q->max_tokens > lim)
        return err_set(MOR_E_INVALID_ARG, "%s: keeping %d tokens leaves nothing to drop in a context of %d positions",
                       who, (int)keep, (int)lim);
    q->n_keep = keep;
    if (q->n_full) {   /* truncated again from the prompt as submitted */
        memcpy(q->prompt, q->full, sizeof(mor_token) * (size_t)n);
        q->n_prompt = mor_prompt_truncate(q->prompt, n, lim, keep);
        mor_sampler_reset(q->smp);
        for (int32_t i = 0; i < q->n_prompt; i++) mor_sampler_accept(q->smp, q->prompt[i]);
    }
    return MOR_OK;
}

/* A request checked and built, not queued (mor_server_submit's part of
 * mor_server_submit_request): nothing of the server changes. */
static mor_status req_new(mor_server *s, const mor_token *prompt, int32_t n_prompt, const mor_request_params *p,
                          const char *who, serve_req **out)
{
    const int32_t max_tokens = p->max_tokens, n_stop = p->n_stop;
    const mor_token *stop = p->stop;
    if (max_tokens < 1 || n_stop < 0 || (n_stop && !stop))
        return err_set(MOR_E_INVALID_ARG, "%s: max_tokens %d, n_stop %d (stop %s)", who, (int)max_tokens, (int)n_stop,
                       stop ? "set" : "NULL");
    for (int32_t i = 0; i < n_prompt + n_stop; i++) {
        mor_token t = i < n_prompt ? prompt[i] : stop[i - n_prompt];
        if (t < 0 || t >= s->m->n_vocab) return err_set(MOR_E_OUT_OF_RANGE, "%s: token %d", who, t);
    }
    int64_t need = (int64_t)n_prompt + max_tokens;
    const int32_t lim = seq_limit(s);
    if (need > lim && (!shifting(s) || lim < 2))
        return err_set(MOR_E_KV_FULL, "%s: %lld cells needed, a sequence holds %d (n_ctx %u, training context %d)%s",
                       who, (long long)need, (int)lim, s->p.n_ctx, s->m->n_ctx_train,
                       shifting(s) ? "; a context of fewer than 2 positions cannot shift" : "");
    /* The request and its token arrays in one allocation (and the prompt
     * as submitted when it is truncated, for mor_server_set_keep). */
    const size_t head = (sizeof(serve_req) + 7) / 8 * 8, n_full = n_prompt > lim ? (size_t)n_prompt : 0;
    serve_req *q = calloc(1, head + sizeof(mor_token) * ((size_t)n_prompt + (size_t)n_stop + 1 + 2 * (size_t)max_tokens +
                                                         n_full));
    if (!q) return err_set(MOR_E_NOMEM, "out of memory");
    q->prompt = (mor_token *)((char *)q + head);
    q->stop = q->prompt + n_prompt;
    q->out = q->stop + n_stop + 1;
    q->depth = (int32_t *)(q->out + max_tokens);
    q->full = (mor_token *)(q->depth + max_tokens);
    mor_status st = mor_sampler_create(p->sampling, &q->smp);
    if (st) { free(q); return st; }
    /* its candidates now: sampling in a step must not fail (see mor_server_step) */
    if ((st = sampler_reserve(q->smp, s->m->n_vocab))) { req_free(q); return st; }
    memcpy(q->prompt, prompt, sizeof(mor_token) * (size_t)n_prompt);
    if (n_stop) memcpy(q->stop, stop, sizeof(mor_token) * (size_t)n_stop);
    q->n_prompt = n_prompt;
    if (n_full) {   /* longer than the context (MOR_SERVE_CONTEXT_SHIFT): n_keep 0 until set_keep */
        memcpy(q->full, prompt, sizeof(mor_token) * n_full);
        q->n_full = n_prompt;
        q->n_prompt = mor_prompt_truncate(q->prompt, n_prompt, lim, 0);
    }
    for (int32_t i = 0; i < q->n_prompt; i++) mor_sampler_accept(q->smp, q->prompt[i]);
    q->n_stop = n_stop; q->max_tokens = max_tokens;
    q->state = MOR_REQ_QUEUED; q->slot = -1; q->exit_thr = NAN;
    *out = q;
    return MOR_OK;
}

/* Queue a built request: its id and its place in the queue. */
static mor_status enqueue(mor_server *s, serve_req *q)
{
    if (s->n_reqs == s->cap_reqs) {
        int32_t nc = s->cap_reqs ? 2 * s->cap_reqs : 16;
        serve_req **nr = realloc(s->reqs, sizeof *nr * (size_t)nc);
        if (nr) { s->reqs = nr; s->cap_reqs = nc; }
    }
    if (s->q_head + s->q_len == s->q_cap) {   /* compact, then grow */
        if (s->q_len) memmove(s->queue, s->queue + s->q_head, sizeof(int32_t) * (size_t)s->q_len);
        s->q_head = 0;
        if (s->q_len == s->q_cap) {
            int32_t nc = s->q_cap ? 2 * s->q_cap : 16;
            int32_t *nq = realloc(s->queue, sizeof *nq * (size_t)nc);
            if (nq) { s->queue = nq; s->q_cap = nc; }
        }
    }
    if (s->n_reqs == s->cap_reqs || s->q_head + s->q_len == s->q_cap) return err_set(MOR_E_NOMEM, "out of memory");
    q->id = s->n_reqs;
    s->reqs[s->n_reqs++] = q;
    s->queue[s->q_head + s->q_len++] = q->id;
    return MOR_OK;
}

void mor_request_params_init(mor_request_params *p, size_t size)
{
    mor_request_params d;
    memset(&d, 0, sizeof d);
    d.max_tokens = 16;
    d.draft_depth = 1;
    d.exit_threshold = NAN;
    abi_init(p, size, &d, sizeof d);
}

size_t mor_sizeof_request_params(void) { return sizeof(mor_request_params); }

/* mor_server_submit_request under the name of the function called (who). */
static mor_status submit(mor_server *s, const mor_token *prompt, int32_t n_prompt, const mor_request_params *params,
                         mor_request_id *id_out, const char *who)
{
    if (!s || !prompt || !id_out || n_prompt < 1)
        return err_set(MOR_E_INVALID_ARG, "%s: NULL or negative argument", who);
    mor_request_params p;
    mor_request_params_init(&p, sizeof p);
    mor_status st = abi_read(&p, sizeof p, params, sizeof(abi_request_params_v1), "mor_request_params");
    serve_req *q = NULL;
    if (!st) st = req_new(s, prompt, n_prompt, &p, who, &q);
    if (!st && p.grammar) st = req_grammar(s, q, p.grammar, who);
    if (!st && p.n_draft) st = req_speculate(s, q, p.n_draft, p.draft_depth, who);
    if (!st && !isnan(p.exit_threshold)) st = req_exit(s, q, p.exit_threshold, who);
    if (!st && p.n_keep) st = req_keep(s, q, p.n_keep, who);
    if (!st) st = enqueue(s, q);
    if (st) {
        if (q) q->gr = NULL;   /* the caller's again */
        req_free(q);
        return st;
    }
    *id_out = q->id;
    err_clear();
    return MOR_OK;
}

mor_status mor_server_submit_request(mor_server *s, const mor_token *prompt, int32_t n_prompt,
                                     const mor_request_params *params, mor_request_id *id_out)
{
    return submit(s, prompt, n_prompt, params, id_out, "mor_server_submit_request");
}

mor_status mor_server_submit(mor_server *s, const mor_token *prompt, int32_t n_prompt,
                             const mor_sampler_params *sp, int32_t max_tokens,
                             const mor_token *stop, int32_t n_stop, mor_request_id *id_out)
{
    mor_request_params p;
    MOR_REQUEST_PARAMS_INIT(&p);
    p.sampling = sp; p.max_tokens = max_tokens; p.stop = stop; p.n_stop = n_stop;
    return submit(s, prompt, n_prompt, &p, id_out, "mor_server_submit");
}

/* The cells a request reserves: its whole length, or under a context
 * shift at most the context of its sequence. */
static int64_t req_need(const mor_server *s, const serve_req *q)
{
    const int64_t n = (int64_t)q->n_prompt + q->max_tokens, lim = seq_limit(s);
    return shifting(s) && n > lim ? lim : n;
}

mor_status mor_server_set_keep(mor_server *s, mor_request_id id, int32_t n_keep)
{
    static const char who[] = "mor_server_set_keep";
    if (!s) return err_set(MOR_E_INVALID_ARG, "%s: NULL server", who);
    if (!shifting(s)) return no_shift(who);   /* before the id: an unknown id's status as it was */
    serve_req *q = NULL;
    mor_status st = find_queued(s, id, who, &q);
    if (!st) st = req_keep(s, q, n_keep, who);
    if (!st) err_clear();
    return st;
}

mor_status mor_server_request_shift(const mor_server *s, mor_request_id id, int32_t *n_prompt, int32_t *n_shifts,
                                    int32_t *n_discarded)
{
    const serve_req *q = find(s, id);
    if (!q) return err_set(MOR_E_OUT_OF_RANGE, "mor_server_request_shift: unknown request %d", (int)id);
    if (n_prompt) *n_prompt = q->n_prompt;
    if (n_shifts) *n_shifts = q->n_shifts;
    if (n_discarded) *n_discarded = q->n_discarded;
    err_clear();
    return MOR_OK;
}

/* The router settings request q's cells are computed under. */
static void kept_settings(const mor_server *s, const serve_req *q, serve_kept *k)
{
    router_settings r;
    router_get_settings(s->ctx->router, &r);
    k->mode = r.mode; k->forced_depth = r.forced_depth; k->max_depth = r.max_depth;
    memcpy(k->threshold, r.threshold, sizeof k->threshold);
    k->exit_thr = r.exit_mode == MOR_EXIT_NONE ? 0.0f : isnan(q->exit_thr) ? r.exit_threshold : q->exit_thr;
}

static int same_settings(const serve_kept *a, const serve_kept *b)
{
    return a->mode == b->mode && a->forced_depth == b->forced_depth && a->max_depth == b->max_depth &&
           !memcmp(a->threshold, b->threshold, sizeof a->threshold) && a->exit_thr == b->exit_thr;
}

/* Drop what free slot sl keeps from position n on. */
static void kept_trim(mor_server *s, int32_t sl, int32_t n)
{
    if (!s->kept) return;
    if (s->kept[sl].n > n) mor_kv_seq_rm(s->ctx->kv, sl, n, -1);
    if (s->kept[sl].n > n) s->kept[sl].n = n;
}

/* Free a slot whose request ended (nothing of it in flight): its cells
 * [0, n_pos) stay for reuse, their tokens the prompt then the tokens
 * generated and entered (the last one sampled never entered). */
static void slot_release(mor_server *s, int32_t sl)
{
    serve_slot *S = &s->slots[sl];
    if (!S->req) return;
    const serve_req *q = S->req;
    if (s->kept) {
        serve_kept *k = &s->kept[sl];
        mor_token *t = s->kept_tok + (size_t)sl * s->p.n_ctx;
        k->n = S->n_pos;
        /* a shifted sequence's cells past n_keep saw tokens it dropped: not a fresh decode's */
        if (q->n_shifts && k->n > q->n_keep) {
            mor_kv_seq_rm(s->ctx->kv, sl, q->n_keep, -1);
            k->n = q->n_keep;
        }
        for (int32_t i = 0; i < k->n; i++) t[i] = i < q->n_prompt ? q->prompt[i] : q->out[i - q->n_prompt];
        k->stamp = ++s->stamp;
        kept_settings(s, q, k);
    } else {
        mor_kv_seq_rm(s->ctx->kv, sl, -1, -1);
    }
    s->reserved -= req_need(s, S->req);
    S->req->slot = -1;
    memset(S, 0, sizeof *S);
}

/* The free slot for q (-1: none): the longest prefix kept under the router's
 * settings now, else an empty one, else the least recently used; *common
 * receives the prefix to reuse (< n_prompt: the last prompt token gives
 * the logits). */
static int32_t pick_slot(const mor_server *s, const serve_req *q, int32_t *common)
{
    int32_t best = -1, best_n = -1;
    *common = 0;
    serve_kept now;
    if (s->kept) kept_settings(s, q, &now);
    for (int32_t i = 0; i < (int32_t)s->p.n_slots; i++) {
        if (s->slots[i].req) continue;
        int32_t n = 0;
        if (s->kept && s->kept[i].n && same_settings(&s->kept[i], &now)) {
            const mor_token *t = s->kept_tok + (size_t)i * s->p.n_ctx;
            const int32_t lim = s->kept[i].n < q->n_prompt - 1 ? s->kept[i].n : q->n_prompt - 1;
            while (n < lim && t[n] == q->prompt[n]) n++;
        }
        /* more reused, then nothing kept to lose, then the oldest kept */
        int better = best < 0 || n > best_n;
        if (!better && n == best_n && s->kept) {
            const serve_kept *a = &s->kept[i], *b = &s->kept[best];
            better = (a->n == 0) != (b->n == 0) ? a->n == 0 : a->stamp < b->stamp;
        }
        if (better) { best = i; best_n = n; }
    }
    if (best >= 0) *common = best_n;
    return best;
}

/* Cells kept by free slots other than `except`. */
static int64_t kept_cells(const mor_server *s, int32_t except)
{
    int64_t n = 0;
    for (int32_t i = 0; s->kept && i < (int32_t)s->p.n_slots; i++)
        if (i != except && !s->slots[i].req) n += s->kept[i].n;
    return n;
}

/* FIFO admission under the KV budget: the head waits until its cells are free.
 * record: note the admitted requests, to be put back if the step fails (the
 * kept cells dropped here stay dropped: the kept[] records say so). */
/* The running slot whose prompt shares the longest start with q's (at most
 * all but q's last token), computed under the router settings of now:
 * *ready of those positions are in its cells now (its prompt rows done),
 * *n shared in all. -1 when none shares anything. */
static int32_t share_from(const mor_server *s, const serve_req *q, int32_t *n, int32_t *ready)
{
    int32_t best = -1;
    *n = *ready = 0;
    serve_kept now;
    kept_settings(s, q, &now);
    for (int32_t i = 0; i < (int32_t)s->p.n_slots; i++) {
        const serve_slot *S = &s->slots[i];
        if (!S->req || S->req->state != MOR_REQ_RUNNING || !same_settings(&S->made, &now)) continue;
        const serve_req *a = S->req;
        int32_t lim = a->n_prompt < q->n_prompt - 1 ? a->n_prompt : q->n_prompt - 1, k = 0;
        if (a->n_shifts && lim > a->n_keep) lim = a->n_keep;   /* what a shift left as it was (slot_release) */
        while (k < lim && a->prompt[k] == q->prompt[k]) k++;
        /* in the cells: its whole prompt once it has a token; else what
         * entered, when no row is in flight (one in flight has not stored
         * all its recursions yet) */
        int32_t done = a->n_out > 0 ? a->n_prompt : S->n_rows ? 0 : S->n_pos;
        if (k > *n || (k == *n && k > 0 && (done >= k) > (*ready >= k))) { best = i; *n = k; *ready = done < k ? done : k; }
    }
    return best;
}

static void admit(mor_server *s, int record)
{
    while (s->q_len) {
        serve_req *q = s->reqs[s->queue[s->q_head]];
        if (!q || q->state != MOR_REQ_QUEUED) { s->q_head++; s->q_len--; continue; }
        int32_t common = 0, sl = pick_slot(s, q, &common);
        if (sl < 0 || s->reserved + req_need(s, q) > (int64_t)s->p.n_ctx) return;
        /* Sharing a running request's prompt (n > 1 choices of one prompt,
         * a common system prompt): its cells are copied instead of decoded
         * again, bitwise the same for the reason prompt reuse is. When that
         * start is still entering, the request waits for it. */
        int32_t n_sh = 0, ready = 0, src = s->kept ? share_from(s, q, &n_sh, &ready) : -1;
        if (src >= 0 && n_sh > common && ready < n_sh) return;   /* its prompt is not in the cells yet */
        int copied = 0;
        /* room for it beside the other slots' kept cells: drop the oldest */
        while (s->reserved + req_need(s, q) + kept_cells(s, sl) > (int64_t)s->p.n_ctx) {
            int32_t old = -1;
            for (int32_t i = 0; i < (int32_t)s->p.n_slots; i++)
                if (i != sl && !s->slots[i].req && s->kept[i].n && (old < 0 || s->kept[i].stamp < s->kept[old].stamp))
                    old = i;
            kept_trim(s, old, 0);
        }
        if (src >= 0 && n_sh > common) {
            kept_trim(s, sl, 0);
            if (mor_kv_seq_cp(s->ctx->kv, src, sl, 0, n_sh) == MOR_OK) { common = n_sh; copied = 1; }
            else common = 0;
        }
        kept_trim(s, sl, common);
        s->q_head++; s->q_len--;
        s->reserved += req_need(s, q);
        q->state = MOR_REQ_RUNNING; q->slot = sl; q->n_cached = common;
        if (record) s->admitted[s->n_admitted++] = q->id;
        serve_slot *S = &s->slots[sl];
        memset(S, 0, sizeof *S);
        S->req = q; S->waiting = 1; S->n_pos = common;
        S->copied = copied && record;
        kept_settings(s, q, &S->made);
        router_set_seq_exit(s->ctx->router, sl, q->exit_thr);
    }
}

/* A token was sampled for slot sl from `logits` by a step of depth `depth`. */
static void emit(mor_server *s, int32_t sl, const float *logits, int32_t depth)
{
    serve_slot *S = &s->slots[sl];
    serve_req *q = S->req;
    if (q->state == MOR_REQ_CANCELLED) { slot_release(s, sl); return; }
    if (s->hooks.logits) s->hooks.logits(s->hooks.logits_ud, q->id, logits, s->m->n_vocab);
    mor_token t = 0;
    const float *from = logits;
    if (q->gr) {   /* the grammar's mask, found by check_logits */
        for (int32_t i = 0; i < s->m->n_vocab; i++) s->masked[i] = q->gr_ok[i] ? logits[i] : -HUGE_VALF;
        from = s->masked;
    }
    /* cannot fail: candidates reserved at submit, logits checked (check_logits) */
    if (mor_sampler_sample(q->smp, from, s->m->n_vocab, &t)) t = 0;
    if (q->gr) grammar_accept_allowed(q->gr, t);
    q->out[q->n_out] = t; q->depth[q->n_out] = depth; q->n_out++;
    if (s->p.on_token) s->p.on_token(q->id, t, depth, s->p.user_data);
    if (s->p.on_token_logits) s->p.on_token_logits(q->id, t, depth, logits, s->m->n_vocab, s->p.user_data);
    int stop = q->n_out >= q->max_tokens;
    for (int32_t i = 0; i < q->n_stop; i++) stop |= t == q->stop[i];
    if (q->gr) stop |= (mor_grammar_state(q->gr) & MOR_GRAMMAR_MUST_END) != 0;
    if (stop) { q->state = MOR_REQ_DONE; slot_release(s, sl); return; }
    S->next = t; S->waiting = 1;
}

/* Slot sl's logits must be ones its sampler can draw from, before the step
 * publishes anything: a NaN or infinite logit (non-finite weights or an
 * overflow) fails the step, which then changes nothing. */
static mor_status check_logits(const mor_server *s, int32_t sl, const float *logits)
{
    const serve_req *q = s->slots[sl].req;
    if (!q || q->state == MOR_REQ_CANCELLED) return MOR_OK;
    mor_status st = sampler_check_logits(logits, s->m->n_vocab);
    if (!st && q->gr) {
        /* the grammar's mask now, so that sampling cannot fail: tokens it
         * allows whose logits are not -inf */
        int32_t k = grammar_allowed(q->gr, q->gr_ok, s->m->n_vocab), finite = 0;
        for (int32_t i = 0; k > 0 && i < s->m->n_vocab && !finite; i++) finite = q->gr_ok[i] && logits[i] > -HUGE_VALF;
        /* the grammar's work bound: this request's failure, as unsamplable
         * logits are (mor.h), so that cancelling it lets the others go on */
        if (k < 0) st = err_set(MOR_E_INVALID_ARG, "%s", mor_last_error());
        else if (!finite) st = err_set(MOR_E_INVALID_ARG, "no token can continue the grammar (%s)",
                                       k ? "the tokens it allows all have logit -inf" : "the vocabulary cannot write what it expects next");
    }
    if (!st) {   /* a logit bias that bans every token left */
        const float *from = logits;
        if (q->gr) {
            for (int32_t i = 0; i < s->m->n_vocab; i++) s->masked[i] = q->gr_ok[i] ? logits[i] : -HUGE_VALF;
            from = s->masked;
        }
        st = sampler_check_bias(q->smp, from, s->m->n_vocab);
    }
    if (!st) return MOR_OK;
    char msg[300];
    snprintf(msg, sizeof msg, "%s", mor_last_error());
    return err_set(st, "mor_server_step: request %d: %s; the step changed nothing (cancel the request to go on)",
                   q->id, msg);
}

/* How many rows slot sl puts in this step, with `room` rows left: its
 * next token (pass 0), or the next chunk of its prompt (pass 1: prompts
 * take the room the generating requests leave). */
static int32_t take_rows(const mor_server *s, int32_t sl, int pass, int32_t room)
{
    const serve_slot *S = &s->slots[sl];
    if (!S->req || !S->waiting || S->req->state != MOR_REQ_RUNNING || S->entered != !pass) return 0;
    if (S->entered && S->req->spec_n) return 0;   /* step_speculate's */
    int32_t n = S->entered ? 1 : S->req->n_prompt - S->n_pos;
    return n < room ? n : room > 0 ? room : 0;
}

/* n rows of slot S entered the step. */
static void enter(serve_slot *S, int32_t n)
{
    S->n_pos += n;
    S->entered |= S->n_pos >= S->req->n_prompt;   /* once entered, a context shift may move n_pos below it */
    S->waiting = 0;
}

/* ---- speculating requests (mor_server_set_speculate), in every mode ---- */

/* The fallible half, inside the step's KV transaction: every speculating
 * slot whose next token waits drafts and verifies it (spec_run: the
 * exactness of mor_speculate) with the request's own buffers. Its rows
 * leave the engine at once (their depths kept), so the depth-wise lists
 * never see them; its first verified position must be samplable, as a plain
 * step's. A slot finds no rows when those in flight fill n_batch: it waits
 * a step. */
static mor_status step_speculate(mor_server *s)
{
    rec_engine *e = &s->ctx->eng;
    s->spec_used = 0;
    for (int32_t sl = 0; sl < (int32_t)s->p.n_slots; sl++) {
        serve_slot *S = &s->slots[sl];
        serve_req *q = S->req;
        S->spec_rows = 0;
        if (!q || !q->spec_n || !S->entered || !S->waiting || q->state != MOR_REQ_RUNNING) continue;
        /* a step's transaction holds the cells of n_batch rows at most (the
         * rows in flight, those speculated, those entering) */
        int32_t n = q->spec_n, room = (int32_t)s->p.n_batch - rec_n_live(e) - s->spec_used - 1;
        if (room < 0) continue;
        if (n > room) n = room;
        if (n > q->max_tokens - q->n_out - 1) n = q->max_tokens - q->n_out - 1;   /* no draft past the last token */
        if (shifting(s) && n > seq_limit(s) - S->n_pos - 1) n = seq_limit(s) - S->n_pos - 1;   /* nor past the context */
        mor_status st = spec_run(s->ctx, sl, S->next, S->n_pos, n, q->spec_d, q->smp, !q->gr, &q->spec);
        if (st) return st;
        for (int32_t k = 0; k <= n; k++) q->spec_depth[k] = rec_depth(e, q->spec.rows[k]);
        rec_free(e, q->spec.rows, n + 1);
        s->spec_used += n + 1;
        if ((st = check_logits(s, sl, q->spec.logits))) return st;
        S->spec_rows = n + 1;
        S->waiting = 0;
    }
    return MOR_OK;
}

/* The publishing half, once nothing can fail: position by position the
 * request samples (emit: its sampler and grammar, the stream, stop tokens,
 * max_tokens) until a token differs from the draft that was fed after it,
 * or the request ends; the cells of the inputs past that go before the
 * transaction ends, so the slot's cells are its positions [0, n_pos) as
 * after plain steps (prompt reuse keeps them). A later position whose
 * logits cannot be sampled ends the run there: the next step meets it as
 * its first and fails naming the request, as plain decoding would. */
typedef struct { mor_server *s; int32_t sl; mor_pos pos; } publish_ctx;

/* spec_publish's draw (spec_accept): the request emits position k. */
static int publish_draw(void *ud, int32_t k, mor_token *t)
{
    publish_ctx *d = ud;
    serve_slot *S = &d->s->slots[d->sl];
    serve_req *q = S->req;
    const float *lg = q->spec.logits + (size_t)k * d->s->m->n_vocab;
    if (k && check_logits(d->s, d->sl, lg)) return -1;
    S->n_pos = d->pos + k + 1;   /* before emit: a request that ends keeps its cells [0, n_pos) */
    emit(d->s, d->sl, lg, q->spec_depth[k]);
    *t = q->out[q->n_out - 1];
    return q->state != MOR_REQ_RUNNING;
}

static void spec_publish(mor_server *s)
{
    for (int32_t sl = 0; sl < (int32_t)s->p.n_slots; sl++) {
        serve_slot *S = &s->slots[sl];
        const int32_t rows = S->spec_rows;
        if (!rows) continue;
        serve_req *q = S->req;
        publish_ctx d = { s, sl, S->n_pos };
        S->spec_rows = 0;
        q->drafted += rows - 1;
        int32_t acc = 0;
        const int32_t k = spec_accept(q->spec.drafts, rows - 1, publish_draw, &d, &acc);
        q->accepted += acc;
        kv_unappend(s->ctx->kv, 0, s->m->n_layer, 1, sl, d.pos + k);
    }
}

/* ---- SERIAL and SEQUENCE: one mor_decode per step ---- */

static mor_status step_decode(mor_server *s)
{
    mor_batch *b = s->batch;
    mor_batch_clear(b);
    int32_t last[4096];   /* the row whose logits slot sl samples from, or -1 */
    for (int32_t sl = 0; sl < (int32_t)s->p.n_slots; sl++) last[sl] = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t sl = 0; sl < (int32_t)s->p.n_slots; sl++) {
            serve_slot *S = &s->slots[sl];
            int32_t n = take_rows(s, sl, pass, (int32_t)s->p.n_batch - mor_batch_size(b));
            for (int32_t i = 0; i < n; i++)
                mor_batch_add(b, S->entered ? S->next : S->req->prompt[S->n_pos + i], S->n_pos + i, sl,
                              i == n - 1 && (S->entered || S->n_pos + n >= S->req->n_prompt));
            if (!n) continue;
            enter(S, n);   /* (put back with the rest if the step fails) */
            if (S->entered) last[sl] = mor_batch_size(b) - 1;
            else S->waiting = 1;   /* a chunk before the last: the next one at the next step */
        }
    /* one KV transaction: the batch's decode, then the speculating requests
     * (whose drafts use their own buffers: the decode's staged logits stay) */
    kv_begin(s->ctx->kv);
    mor_status st = mor_batch_size(b) ? decode_run(s->ctx, b) : MOR_OK;
    for (int32_t sl = 0; sl < (int32_t)s->p.n_slots && !st; sl++)
        if (last[sl] >= 0) st = check_logits(s, sl, decode_staged_logits(s->ctx, last[sl]));
    if (!st) {
        rec_reset(&s->ctx->eng);
        st = step_speculate(s);
    }
    if (st) { kv_rollback(s->ctx->kv); return st; }
    if (mor_batch_size(b)) decode_publish(s->ctx, b);
    int32_t *depths = s->list;
    mor_router_get_depths(s->ctx->router, depths, mor_batch_size(b));
    for (int32_t sl = 0; sl < (int32_t)s->p.n_slots; sl++)
        if (last[sl] >= 0) emit(s, sl, mor_get_logits(s->ctx, last[sl]), depths[last[sl]]);
    spec_publish(s);
    kv_commit(s->ctx->kv);
    return MOR_OK;
}

/* ---- DEPTHWISE ---- */

static int32_t n_queued(const mor_server *s)
{
    int32_t n = 0;
    for (int32_t i = 0; i < s->q_len; i++) {
        const serve_req *q = s->reqs[s->queue[s->q_head + i]];
        n += q && q->state == MOR_REQ_QUEUED;
    }
    return n;
}

/* After a verdict on the rows of list: count the exits of each slot's group. */
static void count_exits(mor_server *s, const int32_t *list, int32_t n)
{
    const rec_engine *e = &s->ctx->eng;
    const int32_t k = rec_exited(e, list, n, s->list2);
    for (int32_t t = 0; t < k; t++) s->slots[rec_tag(e, s->list2[t])].n_exited++;
}

/* 1. Entering rows: a slot's last sampled token, or the next chunk of its
 * prompt, embedded and through the unique first layers. */
static mor_status step_enter(mor_server *s)
{
    rec_engine *e = &s->ctx->eng;
    const int32_t nb = (int32_t)s->p.n_batch;
    int32_t n_live = rec_n_live(e) + s->spec_used, ne = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t sl = 0; sl < (int32_t)s->p.n_slots; sl++) {
            serve_slot *S = &s->slots[sl];
            const int32_t n = take_rows(s, sl, pass, nb - n_live);
            for (int32_t t = 0; t < n; t++) {
                mor_token tok = S->entered ? S->next : S->req->prompt[S->n_pos + t];
                if (rec_enter(e, tok, S->n_pos + t, sl, sl, &s->list[ne++]))
                    return err_set(MOR_E_INTERNAL, "server: token log full despite the KV budget");
            }
            if (!n) continue;
            enter(S, n);
            S->n_rows = n; S->n_exited = 0;
            n_live += n;
        }
    if (!ne) return MOR_OK;
    mor_status st = rec_layers(e, s->list, ne, 0, s->m->prelude);
    if (st) return st;
    rec_decide(e, s->list, ne, NULL);
    count_exits(s, s->list, ne);
    return MOR_OK;
}

/* 3. Finish the groups whose rows have all exited: last layers, norm,
 * logits, sampling; under the finish_every hook only every that many steps
 * (at once when nothing else runs). */
static mor_status step_finish(mor_server *s)
{
    rec_engine *e = &s->ctx->eng;
    int32_t nf = 0, nl = 0, n_ready = 0, n_groups = 0;
    for (int32_t sl = 0; sl < (int32_t)s->p.n_slots; sl++) {
        const serve_slot *S = &s->slots[sl];
        if (!S->req || !S->n_rows) continue;
        n_groups++;
        n_ready += S->n_exited == S->n_rows;
    }
    const int finish = n_ready && (s->n_steps % s->hooks.finish_every == 0 || n_ready == n_groups);
    s->n_steps++;   /* (put back with the rest if the step fails) */
    for (int32_t sl = 0; finish && sl < (int32_t)s->p.n_slots; sl++) {
        serve_slot *S = &s->slots[sl];
        if (!S->req || !S->n_rows || S->n_exited < S->n_rows) continue;
        nf += rec_exited_of(e, sl, s->list + nf);   /* in position order */
        if (S->entered) s->list2[nl++] = nf - 1;   /* the group's last row gives the logits */
        /* else a prompt chunk before the last: it only fills the last layers' caches */
    }
    if (!nf) return MOR_OK;
    mor_status st = rec_finish(e, s->list, nf, s->list2, nl, NULL, s->logits);
    if (st) return st;
    for (int32_t g = 0; g < nl; g++)   /* before anything is published */
        if ((st = check_logits(s, rec_tag(e, s->list[s->list2[g]]), s->logits + (size_t)g * s->m->n_vocab)))
            return st;
    for (int32_t g = 0; g < nl; g++) {
        const int32_t row = s->list[s->list2[g]], sl = rec_tag(e, row);
        s->slots[sl].n_rows = s->slots[sl].n_exited = 0;
        emit(s, sl, s->logits + (size_t)g * s->m->n_vocab, rec_depth(e, row));
    }
    rec_free(e, s->list, nf);
    for (int32_t t = 0; t < nf; t++) {
        const int32_t sl = rec_tag(e, s->list[t]);   /* (a freed row keeps its tag) */
        serve_slot *S = &s->slots[sl];
        if (!S->req || S->entered || !S->n_rows) continue;
        S->n_rows = S->n_exited = 0;   /* a prompt chunk done: the next enters at the next step */
        if (S->req->state == MOR_REQ_CANCELLED) slot_release(s, sl);
        else S->waiting = 1;
    }
    return MOR_OK;
}

static mor_status step_depthwise(mor_server *s)
{
    const mor_model *m = s->m;
    rec_engine *e = &s->ctx->eng;
    mor_status st = step_speculate(s);
    if (!st) st = step_enter(s);
    if (st) return st;
    /* 2. one pass of the shared block over every recursing row, grouped by
     * recursion; under the drain hook with no request queued, passes repeat
     * until every row has exited */
    const int repeat = s->hooks.drain && !n_queued(s);
    for (int32_t pass = 0; pass < m->n_rec; pass++) {
        const int32_t nrun = rec_runnable(e, s->list);
        if (!nrun) break;
        if ((st = rec_pass(e, s->list, nrun))) return st;
        rec_decide(e, s->list, nrun, NULL);
        count_exits(s, s->list, nrun);
        if (!repeat) break;
    }
    if ((st = step_finish(s))) return st;
    spec_publish(s);
    return MOR_OK;
}

/* Context shift (MOR_SERVE_CONTEXT_SHIFT), once a step has succeeded: a
 * running slot whose next token has no position left keeps its first
 * n_keep cells, drops half of the rest (llama.cpp's server rule) and moves
 * what remains down; mor_kv_seq_add re-rotates their keys in every layer and
 * recursion that holds them. Its group has no row in flight (its token was
 * just sampled, or its drafts' cells taken back), so its cells are exactly
 * its positions [0, n_pos) and neither call can fail. */
static mor_status shift_slots(mor_server *s)
{
    const int32_t lim = seq_limit(s);
    for (int32_t sl = 0; shifting(s) && sl < (int32_t)s->p.n_slots; sl++) {
        serve_slot *S = &s->slots[sl];
        serve_req *q = S->req;
        if (!q || q->state != MOR_REQ_RUNNING || !S->entered || !S->waiting || S->n_pos < lim) continue;
        const int32_t keep = q->n_keep, n_discard = (S->n_pos - keep) / 2;
        mor_status st = mor_kv_seq_rm(s->ctx->kv, sl, keep, keep + n_discard);
        if (!st) st = mor_kv_seq_add(s->ctx->kv, sl, keep + n_discard, -1, -n_discard);
        if (st) return err_set(MOR_E_INTERNAL, "server: shifting slot %d: %s", (int)sl, mor_last_error());
        S->n_pos -= n_discard;
        q->n_shifts++;
        q->n_discarded += n_discard;
    }
    return MOR_OK;
}

static int32_t pending(const mor_server *s)
{
    int32_t n = n_queued(s);
    for (int32_t sl = 0; sl < (int32_t)s->p.n_slots; sl++) n += s->slots[sl].req != NULL;
    return n;
}

/* Everything a step changes before its last point of failure: the rows in
 * flight (one copy of the records up to the last row in use), the slots,
 * the queue, the budget. */
static void save(mor_server *s)
{
    s->sv_n_hi = rec_save(&s->ctx->eng, s->sv_rows);
    memcpy(s->sv_slots, s->slots, sizeof(serve_slot) * s->p.n_slots);
    s->sv_q_head = s->q_head; s->sv_q_len = s->q_len; s->sv_reserved = s->reserved; s->sv_n_steps = s->n_steps;
    router_get_stats(s->ctx->router, &s->sv_stats);
    s->n_admitted = 0;
}

static void restore(mor_server *s)
{
    rec_restore(&s->ctx->eng, s->sv_rows, s->sv_n_hi);   /* rows entered by the failed step: free */
    /* cells copied for a request admitted by this step: gone with it (its
     * slot keeps nothing: kept_trim emptied it first) */
    char why[512];   /* the step's error: mor_kv_seq_rm, public, clears it */
    snprintf(why, sizeof why, "%s", mor_last_error());
    for (int32_t k = 0; k < s->n_admitted; k++) {
        const serve_req *q = s->reqs[s->admitted[k]];
        if (q->slot >= 0 && s->slots[q->slot].copied) {
            mor_kv_seq_rm(s->ctx->kv, q->slot, -1, -1);
            err_set(MOR_E_INVALID_ARG, "%s", why);
        }
    }
    memcpy(s->slots, s->sv_slots, sizeof(serve_slot) * s->p.n_slots);
    s->q_head = s->sv_q_head; s->q_len = s->sv_q_len; s->reserved = s->sv_reserved; s->n_steps = s->sv_n_steps;
    router_set_stats(s->ctx->router, &s->sv_stats);
    for (int32_t k = 0; k < s->n_admitted; k++) {
        serve_req *q = s->reqs[s->admitted[k]];
        q->state = MOR_REQ_QUEUED; q->slot = -1;
    }
    s->n_admitted = 0;
}

/* A step is a transaction: everything that can fail (layers, KV appends,
 * the abort callback, logits that cannot be sampled) runs before anything is
 * published (sampling, the stream, freed slots), and on failure the KV cells
 * appended are removed and the saved state put back. Sampling then cannot
 * fail: each request's sampler reserved its candidates at submit, and its
 * logits were checked (check_logits). */
mor_status mor_server_step(mor_server *s, int32_t *n_pending)
{
    if (!s) return err_set(MOR_E_INVALID_ARG, "mor_server_step: NULL server");
    int32_t mode = router_mode(s->ctx->router);
    if (mode == MOR_ROUTE_TOPK)
        return err_set(MOR_E_UNSUPPORTED, "mor_server_step: TOPK routing is not causal; use THRESHOLD or FORCED");
    save(s);
    admit(s, 1);
    mor_status st;
    if (s->p.mode == MOR_SERVE_DEPTHWISE) {
        kv_begin(s->ctx->kv);
        st = step_depthwise(s);
        if (st) kv_rollback(s->ctx->kv);
        else kv_commit(s->ctx->kv);
    } else {
        st = step_decode(s);     /* a failed mor_decode changed nothing */
    }
    if (st) { restore(s); return st; }
    if ((st = shift_slots(s))) return st;
    admit(s, 0);
    if (n_pending) *n_pending = pending(s);
    err_clear();
    return MOR_OK;
}

mor_status mor_server_run(mor_server *s)
{
    err_clear();
    int32_t n = 1;
    while (n) {
        mor_status st = mor_server_step(s, &n);
        if (st) return st;
    }
    return MOR_OK;
}

mor_status mor_server_cancel(mor_server *s, mor_request_id id)
{
    serve_req *q = find(s, id);
    if (!q) return err_set(MOR_E_OUT_OF_RANGE, "mor_server_cancel: unknown request %d", id);
    if (q->state == MOR_REQ_QUEUED) q->state = MOR_REQ_CANCELLED;
    else if (q->state == MOR_REQ_RUNNING) {
        q->state = MOR_REQ_CANCELLED;
        /* rows in flight finish their step first; the slot is freed then (emit) */
        if (!s->slots[q->slot].n_rows) slot_release(s, q->slot);
    }
    err_clear();
    return MOR_OK;
}

int32_t mor_server_request_state(const mor_server *s, mor_request_id id)
{
    err_clear();
    const serve_req *q = find(s, id);
    return q ? q->state : err_set(MOR_E_OUT_OF_RANGE, "mor_server_request_state: unknown request %d", id);
}

int32_t mor_server_request_cached(const mor_server *s, mor_request_id id)
{
    err_clear();
    const serve_req *q = find(s, id);
    return q ? q->n_cached : err_set(MOR_E_OUT_OF_RANGE, "mor_server_request_cached: unknown request %d", id);
}

int32_t mor_server_request_slot(const mor_server *s, mor_request_id id)
{
    err_clear();
    const serve_req *q = find(s, id);
    if (!q) return err_set(MOR_E_OUT_OF_RANGE, "mor_server_request_slot: unknown request %d", id);
    return q->state == MOR_REQ_RUNNING ? q->slot : -1;
}

mor_status mor_server_get_tokens(const mor_server *s, mor_request_id id, mor_token *out, int32_t *depths,
                                 int32_t cap, int32_t *n_out)
{
    const serve_req *q = find(s, id);
    if (!q) return err_set(MOR_E_OUT_OF_RANGE, "mor_server_get_tokens: unknown request %d", id);
    if (!n_out || cap < 0 || (cap && !out)) return err_set(MOR_E_INVALID_ARG, "mor_server_get_tokens: bad buffer");
    *n_out = q->n_out;
    if (cap < q->n_out)
        return err_set(MOR_E_BUFFER_TOO_SMALL, "mor_server_get_tokens: %d tokens, room for %d", q->n_out, cap);
    if (q->n_out) memcpy(out, q->out, sizeof(mor_token) * (size_t)q->n_out);
    if (depths && q->n_out) memcpy(depths, q->depth, sizeof(int32_t) * (size_t)q->n_out);
    err_clear();
    return MOR_OK;
}

mor_status mor_server_release(mor_server *s, mor_request_id id)
{
    serve_req *q = find(s, id);
    if (!q) return err_set(MOR_E_OUT_OF_RANGE, "mor_server_release: unknown request %d", id);
    if (q->state == MOR_REQ_QUEUED || q->state == MOR_REQ_RUNNING || q->slot >= 0)
        return err_set(MOR_E_INVALID_ARG, "mor_server_release: request %d is still queued or running", id);
    req_free(q);
    s->reqs[id] = NULL;
    err_clear();
    return MOR_OK;
}

mor_context *serve_context(mor_server *s) { return s ? s->ctx : NULL; }

/* Lockstep is mor_decode's (SEQUENCE and SERIAL steps): it never reaches the
 * DEPTHWISE rows. */
void serve_set_lockstep(mor_server *s, int on)
{
    if (s) rec_set_lockstep(&s->ctx->eng, on && s->p.mode != MOR_SERVE_DEPTHWISE);
}

void serve_set_finish_every(mor_server *s, int32_t k) { if (s) s->hooks.finish_every = k < 1 ? 1 : k; }

void serve_set_drain(mor_server *s, int on) { if (s) s->hooks.drain = on != 0; }
