/* test_threads.c - libmor under concurrent use (also run under ThreadSanitizer
 * by make test-tsan):
 *  - many contexts decoding at once on one shared model, from several
 *    threads, give bitwise the logits and depths of the same work done one
 *    context at a time;
 *  - contexts created in one thread, used and freed in another; contexts
 *    created and freed in a loop while others decode;
 *  - several threads loading the same file at once;
 *  - the tokenizer of one model from many threads;
 *  - mor_log_set from one thread while others fail calls (which log);
 *  - n_threads 1, 2, 3 and 4 give bitwise the same logits, depths and cache
 *    (the contract: "Results do not depend on it").
 * Models: the tiny ones of tests/fuzz/models (all routing kinds), and the
 * fixture expert_mc3_fix_perturbed from $OUT/build/fixtures when it exists.
 * Runs from the repository root. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "mor.h"

enum { N_THREADS = 4, PREFILL = 12, STEPS = 6, MAX_ROWS = PREFILL + STEPS };

typedef struct {
    const char *name;
    mor_model *model;
    int32_t mode;        /* routing mode to run: causal modes keep decode steps meaningful */
} model_case;

/* One job: a sequence of PREFILL prompt tokens in one batch, then STEPS
 * single-token decodes; each row's logits and depth are recorded. */
typedef struct {
    const model_case *mc;
    int32_t seed, n_threads;
    float *logits;       /* [MAX_ROWS][V] */
    int32_t depth[MAX_ROWS];
    int64_t cells;       /* KV cells in use at the end */
    int ok;
} job;

static mor_token job_token(int32_t seed, int32_t i, int32_t V) { return (mor_token)((seed * 7919 + i * 104729 + 11) % V); }

static mor_context *new_ctx(const model_case *mc, int32_t n_threads)
{
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 64; cp.n_batch = 32; cp.n_threads = n_threads;
    mor_context *c = NULL;
    if (mor_context_create(mc->model, &cp, &c)) return NULL;
    if (mc->mode != MOR_ROUTE_DEFAULT && mor_router_set_mode(mor_context_router(c), mc->mode, 2)) {
        mor_context_free(c);
        return NULL;
    }
    return c;
}

/* Run job j on context c (which it does not free). */
static void run_on(job *j, mor_context *c)
{
    const int32_t V = mor_model_n_vocab(j->mc->model);
    mor_batch *b = NULL;
    j->ok = c && mor_batch_create(32, &b) == MOR_OK;
    for (int32_t i = 0; j->ok && i < PREFILL; i++) mor_batch_add(b, job_token(j->seed, i, V), i, 0, 1);
    j->ok = j->ok && mor_decode(c, b) == MOR_OK;
    for (int32_t i = 0; j->ok && i < PREFILL; i++) {
        memcpy(j->logits + (size_t)i * V, mor_get_logits(c, i), sizeof(float) * (size_t)V);
        int32_t d[PREFILL];
        mor_router_get_depths(mor_context_router(c), d, PREFILL);
        j->depth[i] = d[i];
    }
    for (int32_t s = 0; j->ok && s < STEPS; s++) {
        int32_t p = PREFILL + s;
        mor_batch_clear(b);
        mor_batch_add(b, job_token(j->seed, p, V), p, 0, 1);
        j->ok = mor_decode(c, b) == MOR_OK;
        if (j->ok) {
            memcpy(j->logits + (size_t)p * V, mor_get_logits(c, 0), sizeof(float) * (size_t)V);
            mor_router_get_depths(mor_context_router(c), &j->depth[p], 1);
        }
    }
    j->cells = c ? mor_kv_n_cells_used(mor_context_kv(c), MOR_KV_ALL) : -1;
    mor_batch_free(b);
}

static void run_job(job *j)
{
    mor_context *c = new_ctx(j->mc, j->n_threads);
    run_on(j, c);
    mor_context_free(c);
}

static void *job_thread(void *arg)
{
    job *j = arg;
    for (int rep = 0; rep < 2 && (rep == 0 || j->ok); rep++) run_job(j);   /* create, decode, free, again */
    return NULL;
}

static job *new_jobs(const model_case *mc, int n, int32_t n_threads)
{
    job *js = calloc((size_t)n, sizeof *js);
    for (int i = 0; i < n; i++) {
        js[i].mc = mc; js[i].seed = i + 1; js[i].n_threads = n_threads;
        js[i].logits = malloc(sizeof(float) * MAX_ROWS * (size_t)mor_model_n_vocab(mc->model));
    }
    return js;
}

static void free_jobs(job *js, int n)
{
    for (int i = 0; i < n; i++) free(js[i].logits);
    free(js);
}

static int same_job(const job *a, const job *b)
{
    size_t V = (size_t)mor_model_n_vocab(a->mc->model);
    return a->ok && b->ok && a->cells == b->cells && !memcmp(a->depth, b->depth, sizeof a->depth) &&
           !memcmp(a->logits, b->logits, sizeof(float) * MAX_ROWS * V);
}

/* Many contexts on one model from several threads == one at a time. */
static void test_concurrent_decode(const model_case *mc)
{
    job *ref = new_jobs(mc, N_THREADS, 1), *par = new_jobs(mc, N_THREADS, 1);
    int ok = 1;
    for (int i = 0; i < N_THREADS; i++) { run_job(&ref[i]); ok = ok && ref[i].ok; }
    CHECK(ok, "%s: %d reference jobs decode one at a time", mc->name, N_THREADS);
    pthread_t th[N_THREADS];
    int started = 0;
    for (int i = 0; i < N_THREADS; i++)
        if (pthread_create(&th[i], NULL, job_thread, &par[i]) == 0) started++;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    int same = started == N_THREADS;
    for (int i = 0; i < N_THREADS; i++) same = same && same_job(&ref[i], &par[i]);
    CHECK(same, "%s: %d threads x 2 contexts each (created, decoded %d+%d tokens, freed) give bitwise the "
          "sequential logits, depths and cache", mc->name, N_THREADS, PREFILL, STEPS);
    free_jobs(ref, N_THREADS);
    free_jobs(par, N_THREADS);
}

/* A context created in one thread, decoded in a second, freed in a third. */
typedef struct { job *j; mor_context *c; int free_it; } handoff;

static void *handoff_thread(void *arg)
{
    handoff *h = arg;
    if (h->free_it) mor_context_free(h->c);
    else run_on(h->j, h->c);
    return NULL;
}

static void test_handoff(const model_case *mc)
{
    job *ref = new_jobs(mc, 1, 1), *j = new_jobs(mc, 1, 1);
    run_job(ref);
    int ok = 1;
    for (int round = 0; round < 3 && ok; round++) {
        handoff h = { j, new_ctx(mc, 1), 0 };
        pthread_t t;
        ok = h.c && pthread_create(&t, NULL, handoff_thread, &h) == 0 && pthread_join(t, NULL) == 0 &&
             same_job(ref, j);
        h.free_it = 1;
        if (h.c && (pthread_create(&t, NULL, handoff_thread, &h) != 0 || pthread_join(t, NULL) != 0)) ok = 0;
    }
    CHECK(ok, "%s: contexts created in the main thread, decoded in a second and freed in a third (3 rounds)", mc->name);
    free_jobs(ref, 1);
    free_jobs(j, 1);
}

/* Several threads load one file at once; each model decodes the same. */
typedef struct { const char *path; mor_model *m; } load_job;

static void *load_thread(void *arg)
{
    load_job *l = arg;
    if (mor_model_load_file(l->path, NULL, &l->m)) l->m = NULL;
    return NULL;
}

static void test_concurrent_load(const char *path, const model_case *mc)
{
    load_job lj[N_THREADS];
    pthread_t th[N_THREADS];
    int started = 0;
    for (int i = 0; i < N_THREADS; i++) {
        lj[i].path = path; lj[i].m = NULL;
        if (pthread_create(&th[i], NULL, load_thread, &lj[i]) == 0) started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    job *ref = new_jobs(mc, 1, 1);
    run_job(ref);
    int ok = started == N_THREADS;
    for (int i = 0; i < started; i++) {
        model_case other = *mc;
        other.model = lj[i].m;
        job *j = new_jobs(&other, 1, 1);
        if (lj[i].m) run_job(j);
        ok = ok && lj[i].m && same_job(ref, j);
        free_jobs(j, 1);
        mor_model_free(lj[i].m);
    }
    CHECK(ok, "%s: %d threads load the file at once; every copy decodes the same", mc->name, N_THREADS);
    free_jobs(ref, 1);
}

/* n_threads 1, 2, 3, 4: bitwise the same; also with two such contexts at once. */
static void test_thread_counts(const model_case *mc)
{
    job *ref = new_jobs(mc, 1, 1);
    run_job(ref);
    int ok = ref->ok;
    for (int32_t nt = 2; nt <= 4; nt++) {
        job *j = new_jobs(mc, 1, nt);
        run_job(j);
        CHECK(same_job(ref, j), "%s: n_threads %d gives bitwise the logits, depths and cache of n_threads 1",
              mc->name, nt);
        free_jobs(j, 1);
    }
    job *par = new_jobs(mc, 2, 3);
    par[1].seed = 1;
    pthread_t th[2];
    int started = 0;
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, job_thread, &par[i]) == 0) started++;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    ok = ok && started == 2 && same_job(ref, &par[0]) && same_job(ref, &par[1]);
    CHECK(ok, "%s: two contexts with n_threads 3 decoding at once from two threads: same again", mc->name);
    free_jobs(par, 2);
    free_jobs(ref, 1);
}

/* ---- tokenizer ---- */

static const char tok_text[] =
    "It was the best of times, it was the worst of times; in 1859 Dickens wrote 45 chapters.\n"
    "def f(x):\n    return x ** 2  # square <|endoftext|> Caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 "
    "I'm sure they'll say it's fine. \xff\xfe invalid bytes<custom>";

typedef struct { const mor_model *m; const mor_token *expect; int32_t n_expect; int ok; } tok_job;

static void *tok_thread(void *arg)
{
    tok_job *t = arg;
    t->ok = 1;
    for (int rep = 0; rep < 50 && t->ok; rep++) {
        mor_token ids[256];
        int32_t n = 0;
        char back[sizeof tok_text];
        size_t len = 0;
        t->ok = mor_tokenize(t->m, tok_text, sizeof tok_text - 1, MOR_TOKENIZE_PARSE_SPECIAL, ids, 256, &n) == MOR_OK &&
                n == t->n_expect && !memcmp(ids, t->expect, sizeof(mor_token) * (size_t)n) &&
                mor_detokenize(t->m, ids, n, back, sizeof back, &len) == MOR_OK && len == sizeof tok_text - 1 &&
                !memcmp(back, tok_text, len);
    }
    return NULL;
}

static void test_tokenizer_threads(void)
{
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_VOCAB_ONLY;
    mor_model *m = NULL;
    mor_status st = mor_model_load_file("tests/fuzz/models/vocab_smollm.gguf", &mp, &m);
    if (!REQUIRE(st == MOR_OK, "tokenizer model loads: %s", mor_last_error())) return;
    mor_token expect[256];
    int32_t n = 0;
    st = mor_tokenize(m, tok_text, sizeof tok_text - 1, MOR_TOKENIZE_PARSE_SPECIAL, expect, 256, &n);
    CHECK(st == MOR_OK && n > 20, "reference tokenization: %d tokens", n);
    tok_job tj[N_THREADS];
    pthread_t th[N_THREADS];
    int started = 0, ok = 1;
    for (int i = 0; i < N_THREADS; i++) {
        tj[i] = (tok_job){ m, expect, n, 0 };
        if (pthread_create(&th[i], NULL, tok_thread, &tj[i]) == 0) started++;
    }
    for (int i = 0; i < started; i++) { pthread_join(th[i], NULL); ok = ok && tj[i].ok; }
    CHECK(ok && started == N_THREADS, "%d threads x 50 tokenize + detokenize on one model: same ids, same bytes",
          N_THREADS);
    mor_model_free(m);
}

/* ---- the log callback while other threads fail calls ---- */

static void count_log(int32_t level, const char *msg, void *ud)
{
    (void)level; (void)msg;
    __atomic_fetch_add((int *)ud, 1, __ATOMIC_RELAXED);
}

typedef struct { const model_case *mc; int stop, failures, ok; } err_job;

static void *error_thread(void *arg)
{
    err_job *e = arg;
    mor_context *c = new_ctx(e->mc, 1);
    mor_batch *b = NULL;
    e->ok = c && mor_batch_create(4, &b) == MOR_OK;
    mor_batch_add(b, -5, 0, 0, 1);   /* an invalid token: every decode fails, and logs */
    while (e->ok && !__atomic_load_n(&e->stop, __ATOMIC_RELAXED)) {
        mor_status st = mor_decode(c, b);
        e->ok = st == MOR_E_OUT_OF_RANGE && strstr(mor_last_error(), "token -5") != NULL;
        e->failures++;
    }
    mor_batch_free(b);
    mor_context_free(c);
    return NULL;
}

static void test_log_threads(const model_case *mc)
{
    int count = 0;
    err_job ej[2] = { { mc, 0, 0, 0 }, { mc, 0, 0, 0 } };
    pthread_t th[2];
    int started = 0;
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, error_thread, &ej[i]) == 0) started++;
    for (int k = 0; k < 2000; k++) {
        mor_log_set(k % 2 ? count_log : NULL, &count, MOR_LOG_DEBUG);
        if (k % 100 == 0) usleep(100);
    }
    mor_log_set(count_log, &count, MOR_LOG_DEBUG);
    usleep(2000);
    for (int i = 0; i < 2; i++) __atomic_store_n(&ej[i].stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    mor_log_set(NULL, NULL, 0);
    CHECK(started == 2 && ej[0].ok && ej[1].ok, "2 threads fail decodes (%d and %d calls, each with its own "
          "mor_last_error) while a third sets the log callback 2000 times; %d messages delivered",
          ej[0].failures, ej[1].failures, __atomic_load_n(&count, __ATOMIC_RELAXED));
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const struct { const char *file; int32_t mode; } tiny[] = {
        { "expert_mc.gguf", MOR_ROUTE_THRESHOLD },      /* expert-choice, recursion-wise cache */
        { "expert_kvshare.gguf", MOR_ROUTE_DEFAULT },   /* TOPK, recursive KV sharing, MLP routers */
        { "token_mc.gguf", MOR_ROUTE_DEFAULT },         /* token-choice */
        { "plain_f16.gguf", MOR_ROUTE_DEFAULT },        /* no routers, F16 weights */
    };
    enum { N_TINY = sizeof tiny / sizeof tiny[0] };
    model_case cases[N_TINY + 1];
    char paths[N_TINY + 1][600];
    int n = 0;
    for (int i = 0; i < N_TINY; i++) {
        snprintf(paths[n], sizeof paths[n], "tests/fuzz/models/%s", tiny[i].file);
        cases[n].name = tiny[i].file;
        cases[n].mode = tiny[i].mode;
        mor_status st = mor_model_load_file(paths[n], NULL, &cases[n].model);
        if (REQUIRE(st == MOR_OK, "load %s: %s", paths[n], mor_last_error())) n++;
    }
    /* The real fixture (d = 64, 8 layers) when make fixtures has made it. */
    const char *out = getenv("OUT");
    const char *roots[2] = { out && *out ? out : ".", "." };
    for (int r = 0; r < 2; r++) {
        snprintf(paths[n], sizeof paths[n], "%s/build/fixtures/expert_mc3_fix_perturbed.st.gguf", roots[r]);
        if (access(paths[n], R_OK) != 0) continue;
        cases[n].name = "expert_mc3_fix_perturbed";
        cases[n].mode = MOR_ROUTE_THRESHOLD;
        if (REQUIRE(mor_model_load_file(paths[n], NULL, &cases[n].model) == MOR_OK, "load %s", paths[n])) n++;
        break;
    }
    if (n == N_TINY)   /* counted, so a missing fixture shows in run.sh's summary */
        SKIP("the d=64 model: build/fixtures/expert_mc3_fix_perturbed.st.gguf not found (run make fixtures): tiny models only");

    for (int i = 0; i < n; i++) {
        test_concurrent_decode(&cases[i]);
        test_thread_counts(&cases[i]);
    }
    test_handoff(&cases[0]);
    test_concurrent_load(paths[n - 1], &cases[n - 1]);
    test_tokenizer_threads();
    test_log_threads(&cases[0]);
    for (int i = 0; i < n; i++) mor_model_free(cases[i].model);
    return check_done();
}
