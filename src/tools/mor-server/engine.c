/* engine.c - see engine.h. */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A job's life in the engine. */
enum { J_NEW = 0, J_ACTIVE, J_ENDING, J_GONE };

#define N_BUCKETS 1024

struct engine {
    mor_model      *model;
    mor_server     *srv;
    pthread_t       thread;
    pthread_mutex_t mu;            /* guards what follows up to `local` */
    pthread_cond_t  cv;
    job            *cmd_head, *cmd_tail;
    int             quit;
    int             holds_released; /* engine_release_holds: test holds park no more */
    uint32_t        n_slots;
    int32_t         n_waiting;     /* submitted by connections, not running yet */
    engine_stats    stats;
    engine_slot    *slots;         /* [n_slots], as of the last step */
    int64_t         sec_stamp[16];
    uint64_t        sec_tokens[16];
    /* the engine thread's own */
    job            *active;        /* in the mor_server, not released yet */
    job            *bucket[N_BUCKETS];
    job            *touched;
    engine_stats    local;         /* counted during a step, published after it */
};

double engine_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- jobs ------------------------------------------------------------- */

job *job_new(void)
{
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    if (pipe(j->notify)) { free(j); return NULL; }
    for (int i = 0; i < 2; i++) {
        fcntl(j->notify[i], F_SETFL, fcntl(j->notify[i], F_GETFL) | O_NONBLOCK);
        fcntl(j->notify[i], F_SETFD, FD_CLOEXEC);
    }
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    j->id = -1;
    j->n_top = -1;
    j->stop_word = -1;
    j->n_keep = -1;
    MOR_SAMPLER_PARAMS_INIT(&j->sp);
    return j;
}

void job_unref(job *j)
{
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    close(j->notify[0]);
    close(j->notify[1]);
    ts_free(&j->ts);
    mor_grammar_free(j->grammar);
    buf_free(&j->text);
    free(j->prompt); free(j->tokens); free(j->depths); free(j->text_end);
    free(j->logprob); free(j->top_ids); free(j->top_logprob); free(j->text_offset);
    free(j->bias_id); free(j->bias); free(j->brk); free(j->brk_len);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void job_ref(job *j)
{
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

/* Wake the job's connection (once per batch of news). */
static void notify(job *j)
{
    pthread_mutex_lock(&j->mu);
    int send = !j->signalled;
    j->signalled = 1;
    pthread_mutex_unlock(&j->mu);
    if (send) {
        ssize_t w;
        do w = write(j->notify[1], "!", 1); while (w < 0 && errno == EINTR);
    }
}

/* End a job that will produce nothing more (cancelled, failed). */
static void finish(job *j, int reason, const char *msg)
{
    pthread_mutex_lock(&j->mu);
    if (j->finish == FINISH_NONE) {
        j->finish = reason;
        if (msg) snprintf(j->error, sizeof j->error, "%s", msg);
        j->t_done = engine_now();
    }
    pthread_mutex_unlock(&j->mu);
    notify(j);
}

/* ---- the id -> job table (the engine thread's) -------------------------- */

static job **slot_of(engine *e, mor_request_id id) { return &e->bucket[(uint32_t)id % N_BUCKETS]; }

static job *find(engine *e, mor_request_id id)
{
    for (job *j = *slot_of(e, id); j; j = j->hnext) if (j->id == id) return j;
    return NULL;
}

static void activate(engine *e, job *j)
{
    job **b = slot_of(e, j->id);
    j->hnext = *b;
    *b = j;
    j->aprev = NULL;
    j->anext = e->active;
    if (e->active) e->active->aprev = j;
    e->active = j;
    j->state = J_ACTIVE;
}

static void deactivate(engine *e, job *j)
{
    for (job **p = slot_of(e, j->id); *p; p = &(*p)->hnext)
        if (*p == j) { *p = j->hnext; break; }
    if (j->aprev) j->aprev->anext = j->anext;
    else e->active = j->anext;
    if (j->anext) j->anext->aprev = j->aprev;
    j->state = J_GONE;
}

/* ---- the stream --------------------------------------------------------- */

static void on_token(mor_request_id id, mor_token tok, int32_t depth, const float *logits, int32_t n_vocab, void *ud)
{
    engine *e = ud;
    job *j = find(e, id);
    if (!j || j->state != J_ACTIVE) return;
    if (j->n_top >= 0) {
        /* entry n_tokens: not the connection's to read before n_tokens grows
         * (under mu, below). The logits were checked by the step: this
         * cannot fail, but a failure would leave -inf, never garbage. */
        int32_t n = j->n_tokens, k = j->n_top;
        if (mor_logprobs(logits, n_vocab, tok, &j->logprob[n], k, k ? j->top_ids + (size_t)n * k : NULL,
                         k ? j->top_logprob + (size_t)n * k : NULL)) {
            j->logprob[n] = -HUGE_VALF;
            for (int32_t i = 0; i < k; i++) { j->top_ids[(size_t)n * k + i] = tok; j->top_logprob[(size_t)n * k + i] = -HUGE_VALF; }
        }
    }
    int stop_token = 0;
    for (int32_t i = 0; i < j->n_stop_tokens; i++) stop_token |= tok == j->stop_tokens[i];
    char small[256], *bytes = small;
    size_t len = 0;
    /* the token's piece as it appears inside the text (mor_detokenize of a
     * lone token would drop a SentencePiece word's leading space) */
    if (j->detok && !stop_token &&
        mor_token_to_piece(e->model, tok, small, sizeof small, &len) == MOR_E_BUFFER_TOO_SMALL) {
        bytes = malloc(len);
        if (!bytes || mor_token_to_piece(e->model, tok, bytes, len, &len) != MOR_OK) { free(bytes); bytes = small; len = 0; }
    }
    if (j->n_top >= 0) {
        j->text_offset[j->n_tokens] = j->n_chars;
        for (size_t i = 0; i < len; i++) j->n_chars += ((unsigned char)bytes[i] & 0xC0) != 0x80;
    }
    const char *out;
    size_t n_out = ts_push(&j->ts, bytes, len, &out);
    if (bytes != small) free(bytes);
    int32_t n = j->n_tokens;   /* only the engine writes n_tokens */
    int ending = stop_token || j->ts.stopped || n + 1 >= j->max_tokens;
    if (ending) { const char *rest; n_out += ts_flush(&j->ts, &rest); }
    pthread_mutex_lock(&j->mu);
    if (n == 0) j->t_first = engine_now();
    buf_put(&j->text, out, n_out);
    j->tokens[n] = tok;
    j->depths[n] = depth;
    j->text_end[n] = j->text.len;
    j->n_tokens = n + 1;
    if (ending) {
        j->finish = stop_token || j->ts.stopped ? FINISH_STOP : FINISH_LENGTH;
        j->stop_word = !stop_token && j->ts.stopped ? j->ts.stop_index : -1;
        j->t_done = engine_now();
    }
    pthread_mutex_unlock(&j->mu);
    e->local.gen_tokens++;
    e->local.depth_sum += (uint64_t)(depth > 0 ? depth : 0);
    e->local.at_depth[depth < 0 ? 0 : depth > 16 ? 16 : depth]++;
    if (ending) {
        e->local.requests[j->finish]++;
        j->state = J_ENDING;   /* a stop string: still running in the server; cancelled after the step */
    }
    if (!j->touched) { j->touched = 1; j->tnext = e->touched; e->touched = j; }
}

/* The server ended a request by itself (its grammar is complete): a stop. */
static void ended_by_grammar(engine *e, job *j)
{
    const char *rest;
    size_t n = ts_flush(&j->ts, &rest);
    pthread_mutex_lock(&j->mu);
    buf_put(&j->text, rest, n);   /* after the last token's text_end: a stream sends it with the finish */
    j->finish = FINISH_STOP;
    j->t_done = engine_now();
    pthread_mutex_unlock(&j->mu);
    e->local.requests[FINISH_STOP]++;
    j->state = J_ENDING;
}

/* ---- the thread ----------------------------------------------------------- */

static void drop(engine *e, job *j)
{
    deactivate(e, j);
    job_unref(j);   /* the engine's reference */
}

/* The server refused a new job's `what` with st: the job ends with an error
 * naming why (its request, when `submitted`, taken back from the server). */
static void refuse(engine *e, job *j, mor_status st, const char *what, int submitted)
{
    char msg[200];
    snprintf(msg, sizeof msg, "the engine refused %s: %s (%s)", what, mor_last_error(), mor_status_str(st));
    if (submitted) {
        mor_server_cancel(e->srv, j->id);
        mor_server_release(e->srv, j->id);
    }
    finish(j, FINISH_ERROR, msg);
    e->local.requests[FINISH_ERROR]++;
    j->state = J_GONE;
    job_unref(j);
}

/* A command from a connection: submit, or cancel (or both). */
static void command(engine *e, job *j, int cancel, int quitting)
{
    if (j->state == J_NEW) {
        if (cancel || quitting) {
            finish(j, cancel ? FINISH_CANCELLED : FINISH_ERROR, "the server is shutting down");
            e->local.requests[cancel ? FINISH_CANCELLED : FINISH_ERROR]++;
            j->state = J_GONE;
            job_unref(j);
            return;
        }
        /* the request and its settings in one call: refused whole, or queued */
        mor_request_params rp;
        MOR_REQUEST_PARAMS_INIT(&rp);
        rp.sampling = &j->sp;
        rp.max_tokens = j->max_tokens;
        rp.stop = j->stop_tokens;
        rp.n_stop = j->n_stop_tokens;
        rp.grammar = j->grammar;
        rp.n_draft = j->spec_n;
        rp.draft_depth = j->spec_n ? j->spec_d : 1;
        rp.exit_threshold = j->exit_thr;
        rp.n_keep = j->n_keep >= 0 ? j->n_keep : 0;   /* -1 here: no context shift (0: the default) */
        mor_status st = mor_server_submit_request(e->srv, j->prompt, j->n_prompt, &rp, &j->id);
        if (st) { refuse(e, j, st, "the request", 0); return; }
        j->grammar = NULL;   /* the server's now */
        mor_sampler *smp = j->n_bias || j->n_brk ? mor_server_request_sampler(e->srv, j->id) : NULL;
        if ((j->n_bias || j->n_brk) && (!smp || (st = mor_sampler_set_logit_bias(smp, j->bias_id, j->bias, j->n_bias)) ||
                                        (st = mor_sampler_set_dry_breakers(smp, j->brk, j->brk_len, j->n_brk)))) {
            refuse(e, j, st ? st : MOR_E_INTERNAL, "the logit bias or DRY's breakers", 1);
            return;
        }
        j->touched = 0;
        activate(e, j);
        e->local.prompt_tokens += (uint64_t)j->n_prompt;
        return;
    }
    if (j->state == J_ACTIVE && cancel) {
        mor_server_cancel(e->srv, j->id);
        finish(j, FINISH_CANCELLED, "cancelled");
        e->local.requests[FINISH_CANCELLED]++;
        j->state = J_ENDING;
    }
}

/* Publish the step's counts. */
static void publish(engine *e, double step_seconds, int32_t running, int32_t queued_now)
{
    double now = engine_now();
    int64_t sec = (int64_t)now;
    pthread_mutex_lock(&e->mu);
    engine_stats *s = &e->stats, *l = &e->local;
    for (int i = 0; i < 5; i++) s->requests[i] += l->requests[i];
    s->prompt_tokens += l->prompt_tokens;
    s->cached_tokens += l->cached_tokens;
    s->spec_drafted += l->spec_drafted;
    s->spec_accepted += l->spec_accepted;
    s->gen_tokens += l->gen_tokens;
    s->depth_sum += l->depth_sum;
    for (int d = 0; d < 17; d++) s->at_depth[d] += l->at_depth[d];
    s->steps += l->steps;
    s->slot_steps += l->steps * (uint64_t)(running > 0 ? running : 0);
    s->busy_seconds += step_seconds;
    s->running = running;
    s->queued = queued_now;
    int k = (int)(sec % 16);
    if (e->sec_stamp[k] != sec) { e->sec_stamp[k] = sec; e->sec_tokens[k] = 0; }
    e->sec_tokens[k] += l->gen_tokens;
    pthread_mutex_unlock(&e->mu);
    memset(l, 0, sizeof *l);
}

/* A test hold (engine.h) is in force: a held job has its first token and no
 * other job needs a step (to get its first token, to be admitted to a free
 * slot, or to be released). The engine thread's; called under e->mu. */
static int parked(const engine *e)
{
    if (e->holds_released) return 0;
    int held = 0, need = 0, queued = 0;
    uint32_t running = 0;
    for (const job *j = e->active; j && !need; j = j->anext) {
        int32_t st = j->state == J_ACTIVE ? mor_server_request_state(e->srv, j->id) : -1;
        if (j->state != J_ACTIVE) need = 1;
        else if (j->hold && j->n_tokens >= 1) held = 1, running += st == MOR_REQ_RUNNING;
        else if (st == MOR_REQ_RUNNING) need = 1;   /* a running job without a hold needs steps */
        else queued |= st == MOR_REQ_QUEUED;
    }
    /* a queued job needs a step when a slot is free for it */
    return held && !need && !(queued && running < e->n_slots);
}

static void *engine_main(void *arg)
{
    engine *e = arg;
    int failures = 0;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->cmd_head && (!e->active || parked(e)) && !e->quit) pthread_cond_wait(&e->cv, &e->mu);
        job *cmds = e->cmd_head;
        e->cmd_head = e->cmd_tail = NULL;
        int quitting = e->quit;
        pthread_mutex_unlock(&e->mu);
        if (quitting && !cmds && !e->active) break;

        while (cmds) {
            job *j = cmds;
            pthread_mutex_lock(&e->mu);
            cmds = j->cmd_next;
            j->cmd_next = NULL;
            j->in_cmd = 0;
            int cancel = j->cancel_req, extra = j->queue_ref;
            j->cancel_req = j->queue_ref = 0;
            pthread_mutex_unlock(&e->mu);
            command(e, j, cancel, quitting);
            if (extra) job_unref(j);
        }
        if (quitting)   /* cut what is left */
            for (job *j = e->active; j; j = j->anext)
                if (j->state == J_ACTIVE) command(e, j, 1, 1);

        pthread_mutex_lock(&e->mu);
        int park = parked(e);   /* after the commands: a cancel ends a hold */
        pthread_mutex_unlock(&e->mu);
        double t0 = engine_now(), dt = 0;
        if (e->active && !park) {
            int32_t pending = 0;
            mor_status st = mor_server_step(e->srv, &pending);
            dt = engine_now() - t0;
            e->local.steps++;
            if (st) {
                /* A failed step changed nothing. Logits that cannot be sampled
                 * are one request's (mor.h: the message names it, and cancelling
                 * it lets the others go on); for anything else every request in
                 * the step ends with the error. */
                char msg[200];
                const char *at = strstr(mor_last_error(), "request ");
                int bad = -1;
                job *one = st == MOR_E_INVALID_ARG && at && sscanf(at, "request %d:", &bad) == 1 ? find(e, bad) : NULL;
                snprintf(msg, sizeof msg, "generation failed: %s (%s)", mor_last_error(), mor_status_str(st));
                fprintf(stderr, "mor-server: %s\n", msg);
                for (job *j = e->active; j; j = j->anext)
                    if (j->state == J_ACTIVE && (!one || j == one)) {
                        mor_server_cancel(e->srv, j->id);
                        finish(j, FINISH_ERROR, msg);
                        e->local.requests[FINISH_ERROR]++;
                        j->state = J_ENDING;
                    }
                if (++failures > 3) { struct timespec ts = { 0, 10 * 1000 * 1000 }; nanosleep(&ts, NULL); }
            } else {
                failures = 0;
            }
        }
        /* the step's end: stop strings cancelled, the counts published, the
         * connections woken (after the counts: a client that got its answer
         * sees it in /metrics), the finished requests released */
        for (job *j = e->touched; j; j = j->tnext)
            if (j->state == J_ENDING && mor_server_request_state(e->srv, j->id) == MOR_REQ_RUNNING)
                mor_server_cancel(e->srv, j->id);   /* a stop string */
            else if (j->state == J_ACTIVE && mor_server_request_state(e->srv, j->id) == MOR_REQ_DONE)
                ended_by_grammar(e, j);
        for (job *j = e->touched; j; j = j->tnext) {   /* what its speculation drafted and had accepted */
            int64_t d = 0, a = 0;
            if (!j->spec_n || mor_server_request_speculation(e->srv, j->id, &d, &a)) continue;
            e->local.spec_drafted += (uint64_t)(d - j->spec_seen[0]);
            e->local.spec_accepted += (uint64_t)(a - j->spec_seen[1]);
            j->spec_seen[0] = d; j->spec_seen[1] = a;
        }
        for (job *j = e->touched; j; j = j->tnext) {   /* what its context shifts dropped */
            int32_t d = 0;
            if (j->n_keep < 0 || mor_server_request_shift(e->srv, j->id, NULL, NULL, &d)) continue;
            pthread_mutex_lock(&j->mu);
            j->n_discarded = d;
            pthread_mutex_unlock(&j->mu);
        }
        for (job *j = e->touched; j; j = j->tnext) {   /* its prompt reuse, known once it has a token */
            int32_t c = j->cached_known ? -1 : mor_server_request_cached(e->srv, j->id);
            if (c < 0) continue;
            pthread_mutex_lock(&j->mu);
            j->n_cached = c;
            pthread_mutex_unlock(&j->mu);
            j->cached_known = 1;
            e->local.cached_tokens += (uint64_t)c;
        }
        int32_t running = 0, queued = 0;
        pthread_mutex_lock(&e->mu);
        for (uint32_t i = 0; i < e->n_slots; i++) e->slots[i] = (engine_slot){ -1, 0, 0 };
        pthread_mutex_unlock(&e->mu);
        for (job *j = e->active; j; j = j->anext) {
            if (j->state != J_ACTIVE) continue;
            int32_t s = mor_server_request_state(e->srv, j->id), slot = mor_server_request_slot(e->srv, j->id);
            running += s == MOR_REQ_RUNNING;
            queued += s == MOR_REQ_QUEUED;
            if (slot < 0 || (uint32_t)slot >= e->n_slots) continue;
            pthread_mutex_lock(&e->mu);
            e->slots[slot] = (engine_slot){ j->id, j->n_prompt, j->n_tokens };
            pthread_mutex_unlock(&e->mu);
        }
        pthread_mutex_lock(&e->mu);
        e->n_waiting = queued;
        for (job *j = e->cmd_head; j; j = j->cmd_next) e->n_waiting += j->state == J_NEW;
        pthread_mutex_unlock(&e->mu);
        publish(e, dt, running, queued);
        for (job *j = e->touched, *next; j; j = next) {
            next = j->tnext;
            j->touched = 0;
            j->tnext = NULL;
            if (j->each_token || j->state != J_ACTIVE) notify(j);   /* J_ACTIVE: not finished */
        }
        e->touched = NULL;
        for (job *j = e->active, *next; j; j = next) {   /* a released job may be freed: touched no more */
            next = j->anext;
            if (j->state == J_ENDING && mor_server_release(e->srv, j->id) == MOR_OK) drop(e, j);
        }
    }
    return NULL;
}

engine *engine_start(mor_model *model, const engine_params *p, char *err, size_t errcap)
{
    engine *e = calloc(1, sizeof *e);
    if (!e) { snprintf(err, errcap, "out of memory"); return NULL; }
    e->model = model;
    mor_server_params sp;
    MOR_SERVER_PARAMS_INIT(&sp);
    sp.mode = p->mode;
    sp.n_slots = p->n_slots;
    e->n_slots = p->n_slots;
    e->slots = malloc(sizeof *e->slots * p->n_slots);
    if (!e->slots) { free(e); snprintf(err, errcap, "out of memory"); return NULL; }
    for (uint32_t i = 0; i < p->n_slots; i++) e->slots[i] = (engine_slot){ -1, 0, 0 };
    sp.n_ctx = p->n_ctx;
    sp.n_batch = p->n_batch;
    sp.n_threads = p->n_threads;
    sp.kv_mode = p->kv_mode;
    if (p->exit_mode != MOR_EXIT_NONE) { sp.exit_mode = p->exit_mode; sp.exit_threshold = p->exit_threshold; }
    if (p->no_prompt_reuse) sp.flags |= MOR_SERVE_NO_PROMPT_REUSE;
    if (p->fast_bf16) sp.flags |= MOR_SERVE_FAST_BF16;
    if (p->context_shift) sp.flags |= MOR_SERVE_CONTEXT_SHIFT;
    sp.on_token_logits = on_token;
    sp.user_data = e;
    mor_status st = mor_server_create(model, &sp, &e->srv);
    if (st) {
        snprintf(err, errcap, "cannot create the server: %s (%s)", mor_last_error(), mor_status_str(st));
        free(e);
        return NULL;
    }
    mor_router *r = mor_server_router(e->srv);
    for (int32_t i = 0; i < p->n_thresholds && !st; i++) st = mor_router_set_threshold(r, i, p->thresholds[i]);
    if (!st && p->max_depth) st = mor_router_set_max_depth(r, p->max_depth);
    if (st) {
        snprintf(err, errcap, "cannot set the router: %s (%s)", mor_last_error(), mor_status_str(st));
        mor_server_free(e->srv);
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (pthread_create(&e->thread, NULL, engine_main, e)) {
        snprintf(err, errcap, "cannot start the engine thread");
        mor_server_free(e->srv);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
        return NULL;
    }
    return e;
}

void engine_quit(engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->quit = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void engine_release_holds(engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->holds_released = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void engine_stop(engine *e)
{
    if (!e) return;
    engine_quit(e);
    pthread_join(e->thread, NULL);
    mor_server_free(e->srv);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e->slots);
    free(e);
}

int engine_get_slots(engine *e, engine_slot *out, int cap)
{
    pthread_mutex_lock(&e->mu);
    int n = (int)e->n_slots < cap ? (int)e->n_slots : cap;
    memcpy(out, e->slots, sizeof *out * (size_t)n);
    pthread_mutex_unlock(&e->mu);
    return n;
}

static void enqueue(engine *e, job *j)
{
    j->cmd_next = NULL;
    j->in_cmd = 1;
    if (e->cmd_tail) e->cmd_tail->cmd_next = j;
    else e->cmd_head = j;
    e->cmd_tail = j;
    pthread_cond_signal(&e->cv);
}

int engine_submit(engine *e, job *j, int32_t max_queue)
{
    size_t n = (size_t)(j->max_tokens > 0 ? j->max_tokens : 1);
    if (!j->tokens) {
        j->tokens = malloc(sizeof *j->tokens * n);
        j->depths = malloc(sizeof *j->depths * n);
        j->text_end = malloc(sizeof *j->text_end * n);
        if (!j->tokens || !j->depths || !j->text_end) return -3;
        if (j->n_top >= 0) {
            size_t k = (size_t)j->n_top;
            j->logprob = malloc(sizeof *j->logprob * n);
            j->text_offset = malloc(sizeof *j->text_offset * n);
            j->top_ids = k ? malloc(sizeof *j->top_ids * n * k) : NULL;
            j->top_logprob = k ? malloc(sizeof *j->top_logprob * n * k) : NULL;
            if (!j->logprob || !j->text_offset || (k && (!j->top_ids || !j->top_logprob))) return -3;
        }
    }
    pthread_mutex_lock(&e->mu);
    if (e->quit) { pthread_mutex_unlock(&e->mu); return -2; }
    if (e->n_waiting >= max_queue) { pthread_mutex_unlock(&e->mu); return -1; }
    e->n_waiting++;
    job_ref(j);            /* the engine's */
    j->t_submit = engine_now();
    enqueue(e, j);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void engine_cancel(engine *e, job *j)
{
    pthread_mutex_lock(&e->mu);
    j->cancel_req = 1;
    if (!j->in_cmd) {      /* else the engine sees cancel_req when it takes the entry */
        job_ref(j);        /* the queue's: the engine may have let the job go already */
        j->queue_ref = 1;
        enqueue(e, j);
    }
    pthread_mutex_unlock(&e->mu);
}

void engine_get_stats(engine *e, engine_stats *out)
{
    double now = engine_now();
    int64_t sec = (int64_t)now;
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    uint64_t sum = 0;
    for (int k = 0; k < 16; k++) if (e->sec_stamp[k] > sec - 10 && e->sec_stamp[k] <= sec) sum += e->sec_tokens[k];
    pthread_mutex_unlock(&e->mu);
    /* the last 10 s: 9 whole seconds and the part of this one gone by */
    out->tokens_per_second = (double)sum / (9.0 + (now - (double)sec));
}
