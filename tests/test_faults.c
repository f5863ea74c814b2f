/* test_faults.c - faults injected into the public API, and its resource limits.
 *
 *  - Allocation failure at EVERY allocation site: this program is linked with
 *    -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free (Makefile),
 *    so every allocation the library makes comes here. Each operation (model
 *    load from memory and from a file, vocab-only load, context creation in
 *    every cache mode, batch and sampler creation, a decode that grows its
 *    output, tokenize, sample) is run with the Nth allocation failing, for
 *    N = 1, 2, ... until it succeeds without a failure: each failing run must
 *    return MOR_E_NOMEM, leave its out-pointer NULL and leak nothing (live
 *    allocations are counted here, and ASan's leak check runs too under
 *    make test-sanitize); a failed decode must change nothing.
 *  - Truncated files: every prefix of the header region and a sample of the
 *    rest, from memory and from disk (mmap and read), is MOR_E_FORMAT.
 *  - Full caches: a decode or a sequence copy that does not fit returns
 *    MOR_E_KV_FULL and leaves the cache cell for cell as it was.
 *  - Cancellation: the abort callback stopping a decode at each of its polls
 *    leaves the cache exactly as before (every cell's sequence, position, K
 *    and V), and the decode done again gives bitwise the logits of a context
 *    that was never aborted; the load progress callback is called more than
 *    twice, never decreasing, and cancelling at each call frees everything.
 *  - The maximum context (mor_context_params.max_pos).
 *  - Servers (every mode; prompts prefilled in chunks too): a step failing
 *    at each of its allocations, or stopped by the abort callback at each of
 *    its polls, changes nothing (no token streamed, request states and token
 *    counts, the KV cache cell for cell), and the run, stepped again after
 *    every failure, ends with bitwise the tokens, depths and logits of a run
 *    never disturbed.
 * Models: tests/fuzz/models (tiny, every routing kind) and, when it exists,
 * the fixture expert_mc3_fix_perturbed in $OUT/build/fixtures. Runs from the
 * repository root. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "mor.h"
#include "context.h"
#include "serve.h"

/* ---- the allocator wrappers ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void  __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void  __wrap_free(void *p);

/* Atomics: the library's worker threads (n_threads > 1) may allocate too. */
static long fail_at;      /* fail the fail_at-th counted call; 0: never */
static long n_calls;      /* allocation calls since arm() */
static long live;         /* allocations not yet freed, through these wrappers */
static int  armed;

static int should_fail(void)
{
    if (!__atomic_load_n(&armed, __ATOMIC_SEQ_CST)) return 0;
    return __atomic_add_fetch(&n_calls, 1, __ATOMIC_SEQ_CST) == __atomic_load_n(&fail_at, __ATOMIC_SEQ_CST);
}

void *__wrap_malloc(size_t n)
{
    if (should_fail()) return NULL;
    void *p = __real_malloc(n);
    if (p) __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
    return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (should_fail()) return NULL;
    void *p = __real_calloc(n, size);
    if (p) __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
    return p;
}

void *__wrap_realloc(void *p, size_t n)
{
    if (should_fail()) return NULL;
    void *q = __real_realloc(p, n);
    if (!p && q) __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
    return q;
}

void __wrap_free(void *p)
{
    if (p) __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
    __real_free(p);
}

static void arm(long n) { n_calls = 0; fail_at = n; __atomic_store_n(&armed, 1, __ATOMIC_SEQ_CST); }
static long disarm(void) { __atomic_store_n(&armed, 0, __ATOMIC_SEQ_CST); return n_calls; }

/* ---- models ---- */

static char fixture[600];

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) { free(p); p = NULL; }
    fclose(f);
    *n = (size_t)len;
    return p;
}

static mor_model *load(const char *path)
{
    mor_model *m = NULL;
    mor_status st = mor_model_load_file(path, NULL, &m);
    REQUIRE(st == MOR_OK, "load %s: %s", path, mor_last_error());
    return m;
}

static const char *tiny(const char *name)
{
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "tests/fuzz/models/%s", name);
    return buf[k];
}

/* ---- allocation failure at every site ---- */

/* One operation: run() makes something (returned through *obj) or changes
 * state; undo() frees what a successful run made. */
typedef struct op {
    const char *name;
    mor_status (*run)(struct op *o, void **obj);
    void (*undo)(struct op *o, void *obj);
    const void *a; size_t n; uint32_t flags;   /* arguments */
    void *state;
} op;

/* Run o with allocation N failing, N = 1, 2, ... Returns the number of sites. */
static int inject_all(op *o)
{
    int sites = 0, bad_status = 0, leaked = 0, out_set = 0;
    long n_allocs = 0;
    for (long N = 1; N < 100000; N++) {
        void *obj = NULL;
        long before = __atomic_load_n(&live, __ATOMIC_SEQ_CST);
        arm(N);
        mor_status st = o->run(o, &obj);
        long calls = disarm();
        if (calls < N) {                       /* nothing failed: the operation's full run */
            n_allocs = calls;
            CHECK(st == MOR_OK, "%s: succeeds without a failure (%s %s)", o->name, mor_status_str(st), mor_last_error());
            if (st == MOR_OK && o->undo) o->undo(o, obj);
            CHECK(__atomic_load_n(&live, __ATOMIC_SEQ_CST) == before, "%s: no leak after success and free", o->name);
            break;
        }
        sites++;
        if (st != MOR_E_NOMEM) {
            if (!bad_status++) printf("# %s: allocation %ld failing gives %s: %s\n", o->name, N, mor_status_str(st), mor_last_error());
            if (st == MOR_OK && o->undo) o->undo(o, obj);
        }
        if (st != MOR_OK && obj) out_set++;
        if (__atomic_load_n(&live, __ATOMIC_SEQ_CST) != before) {
            if (!leaked++) printf("# %s: allocation %ld failing leaks %ld allocations\n", o->name, N,
                                  __atomic_load_n(&live, __ATOMIC_SEQ_CST) - before);
            before = __atomic_load_n(&live, __ATOMIC_SEQ_CST);
        }
    }
    CHECK(sites > 0 && !bad_status && !leaked && !out_set,
          "%s: each of its %d allocation sites failing returns MOR_E_NOMEM, sets no handle, leaks nothing "
          "(%d other statuses, %d leaks)", o->name, sites, bad_status, leaked);
    (void)n_allocs;
    return sites;
}

static mor_status run_load_memory(op *o, void **obj)
{
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = o->flags;
    return mor_model_load_memory(o->a, o->n, &mp, (mor_model **)obj);
}

static mor_status run_load_file(op *o, void **obj)
{
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = o->flags;
    return mor_model_load_file(o->a, &mp, (mor_model **)obj);
}

static void undo_model(op *o, void *obj) { (void)o; mor_model_free(obj); }

static mor_status run_context(op *o, void **obj)
{
    return mor_context_create(o->state, o->a, (mor_context **)obj);
}

static void undo_context(op *o, void *obj) { (void)o; mor_context_free(obj); }

static mor_status run_server(op *o, void **obj)
{
    return mor_server_create(o->state, o->a, (mor_server **)obj);
}

static void undo_server(op *o, void *obj) { (void)o; mor_server_free(obj); }

/* mor_server_submit_request on the server in o->state (its id there); undo
 * cancels and releases the request, which frees all it allocated. */
typedef struct {
    mor_server *s;
    mor_request_id id;
    mor_model *m;                 /* the grammar's model (run_submit_grammar) */
    const mor_token *prompt;
    int32_t n_prompt;
} submit_state;
static const mor_token sub_prompt[4] = { 3, 1, 4, 1 }, sub_stop[2] = { 5, 9 };

static mor_status run_submit_request(op *o, void **obj)
{
    submit_state *ss = o->state;
    mor_request_params rp;
    MOR_REQUEST_PARAMS_INIT(&rp);
    rp.max_tokens = 6; rp.stop = sub_stop; rp.n_stop = 2; rp.n_draft = 3; rp.draft_depth = 1;
    (void)obj;
    return mor_server_submit_request(ss->s, sub_prompt, 4, &rp, &ss->id);
}

/* The same with a grammar made in the call (o->a: its GBNF), freed here when
 * the submit fails: it stays the caller's then, the server's on success. */
static mor_status run_submit_grammar(op *o, void **obj)
{
    submit_state *ss = o->state;
    mor_request_params rp;
    MOR_REQUEST_PARAMS_INIT(&rp);
    rp.max_tokens = 6; rp.n_draft = 2; rp.draft_depth = 1;
    mor_status st = mor_grammar_create(ss->m, o->a, o->n, NULL, NULL, 0, &rp.grammar);
    if (!st) st = mor_server_submit_request(ss->s, ss->prompt, ss->n_prompt, &rp, &ss->id);
    if (st) mor_grammar_free(rp.grammar);
    (void)obj;
    return st;
}

static void undo_submit_request(op *o, void *obj)
{
    submit_state *ss = o->state;
    (void)obj;
    mor_server_cancel(ss->s, ss->id);
    mor_server_release(ss->s, ss->id);
}

static mor_status run_batch(op *o, void **obj) { (void)o; return mor_batch_create(64, (mor_batch **)obj); }
static void undo_batch(op *o, void *obj) { (void)o; mor_batch_free(obj); }

static mor_status run_sampler(op *o, void **obj)
{
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);
    sp.repeat_penalty = 1.1f; sp.repeat_last_n = 32;
    return mor_sampler_create(&sp, (mor_sampler **)obj);
}

static void undo_sampler(op *o, void *obj) { (void)o; mor_sampler_free(obj); }

static mor_status run_tokenize(op *o, void **obj)
{
    static mor_token ids[256];
    int32_t n;
    (void)obj;
    return mor_tokenize(o->state, o->a, o->n, MOR_TOKENIZE_PARSE_SPECIAL | MOR_TOKENIZE_ADD_BOS, ids, 256, &n);
}

/* A sampler keeps its candidate buffer: create, sample, and free it together. */
static mor_status run_sample(op *o, void **obj)
{
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);
    sp.seed = 7;
    mor_sampler *s = NULL;
    mor_token t;
    mor_status st = mor_sampler_create(&sp, &s);
    if (st == MOR_OK && (st = mor_sampler_sample(s, o->a, (int32_t)o->n, &t)) != MOR_OK) {
        mor_sampler_free(s);
        s = NULL;
    }
    *obj = s;
    return st;
}

/* A decode whose output rows outgrow the context's logits buffer: each time
 * with a fresh context that has already decoded one row. */
typedef struct { mor_model *m; mor_context *c; mor_batch *b1, *b2; } decode_state;

static mor_status run_decode(op *o, void **obj)
{
    decode_state *s = o->state;
    (void)obj;
    mor_status st = mor_decode(s->c, s->b2);
    if (st != MOR_OK) {   /* a failed decode changes nothing: the first call's state */
        CHECK(mor_kv_seq_pos_max(mor_context_kv(s->c), 0) == 0 && mor_get_logits(s->c, 0) != NULL &&
              mor_get_logits(s->c, 1) == NULL, "decode failing in an allocation changes nothing");
    }
    return st;
}

static int test_alloc_failures(void)
{
    int total = 0;
    static const char *const models[] = { "plain.gguf", "expert_mc.gguf", "expert_kvshare.gguf", "token_mc.gguf",
                                          "plain_f16.gguf" };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        size_t n;
        uint8_t *img = read_file(tiny(models[i]), &n);
        char name[128];
        snprintf(name, sizeof name, "mor_model_load_memory(%s)", models[i]);
        op o = { name, run_load_memory, undo_model, img, n, 0, NULL };
        total += inject_all(&o);
        free(img);
    }
    if (fixture[0]) {
        size_t n;
        uint8_t *img = read_file(fixture, &n);
        op o = { "mor_model_load_memory(fixture expert_mc3_fix)", run_load_memory, undo_model, img, n, 0, NULL };
        total += inject_all(&o);
        free(img);
    }
    op lf = { "mor_model_load_file(expert_mc.gguf, NO_MMAP)", run_load_file, undo_model, tiny("expert_mc.gguf"), 0,
              MOR_MODEL_NO_MMAP, NULL };
    total += inject_all(&lf);
    op lf2 = { "mor_model_load_file(token_mc.gguf, mmap)", run_load_file, undo_model, tiny("token_mc.gguf"), 0, 0, NULL };
    total += inject_all(&lf2);
    op lv = { "mor_model_load_file(vocab_gpt2.gguf, VOCAB_ONLY)", run_load_file, undo_model, tiny("vocab_gpt2.gguf"),
              0, MOR_MODEL_VOCAB_ONLY, NULL };
    total += inject_all(&lv);

    static const struct { const char *file; int32_t kv_mode; uint32_t flags; int32_t n_threads; } ctxs[] = {
        { "expert_mc.gguf", MOR_KV_RECURSION_WISE, 0, 1 },
        { "expert_mc.gguf", MOR_KV_SHARED, MOR_CTX_CAPTURE_HIDDEN, 1 },
        { "token_mc.gguf", MOR_KV_MODEL_DEFAULT, MOR_CTX_CAPTURE_HIDDEN, 2 },
        { "plain.gguf", MOR_KV_MODEL_DEFAULT, 0, 3 },
    };
    for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++) {
        mor_model *m = load(tiny(ctxs[i].file));
        mor_context_params cp;
        MOR_CONTEXT_PARAMS_INIT(&cp);
        cp.kv_mode = ctxs[i].kv_mode; cp.flags = ctxs[i].flags; cp.n_threads = ctxs[i].n_threads;
        cp.n_seq_max = 3; cp.n_ctx = 48; cp.n_batch = 16;
        char name[160];
        snprintf(name, sizeof name, "mor_context_create(%s, kv_mode %d, flags %u, n_threads %d)", ctxs[i].file,
                 ctxs[i].kv_mode, ctxs[i].flags, ctxs[i].n_threads);
        op o = { name, run_context, undo_context, &cp, 0, 0, m };
        if (m) total += inject_all(&o);
        mor_model_free(m);
    }
    for (int32_t mode = MOR_SERVE_SERIAL; mode <= MOR_SERVE_DEPTHWISE; mode++) {
        mor_model *m = load(tiny("expert_mc.gguf"));
        mor_server_params sp;
        MOR_SERVER_PARAMS_INIT(&sp);
        sp.mode = mode; sp.n_slots = 4; sp.n_ctx = 64; sp.n_batch = 16; sp.n_threads = 2;
        char name[96];
        snprintf(name, sizeof name, "mor_server_create(expert_mc.gguf, mode %d, 4 slots, 2 threads)", mode);
        op o = { name, run_server, undo_server, &sp, 0, 0, m };
        if (m) total += inject_all(&o);
        mor_model_free(m);
    }
    {   /* a request and its settings in one call: a failure queues nothing, so the id that goes through is the
         * next one (the queue's arrays are grown by a first request, cancelled and released) */
        mor_model *m = load(tiny("expert_mc.gguf"));
        mor_server_params sp;
        MOR_SERVER_PARAMS_INIT(&sp);
        sp.n_slots = 2; sp.n_ctx = 64; sp.n_batch = 16;
        submit_state ss = { NULL, -1, NULL, NULL, 0 };
        mor_request_id first = -1;
        const int ok = m && !mor_server_create(m, &sp, &ss.s) &&
                       !mor_server_submit(ss.s, sub_prompt, 4, NULL, 6, NULL, 0, &first) &&
                       !mor_server_cancel(ss.s, first) && !mor_server_release(ss.s, first);
        op o = { "mor_server_submit_request(stop tokens, speculation)", run_submit_request, undo_submit_request, NULL,
                 0, 0, &ss };
        if (CHECK(ok, "mor_server_submit_request fault setup")) {
            total += inject_all(&o);
            CHECK(first == 0 && ss.id == 1, "mor_server_submit_request: the failed attempts queued nothing and used "
                  "no id (the one that went through is %d)", (int)ss.id);
        }
        mor_server_free(ss.s);
        mor_model_free(m);
    }
    {   /* with a grammar (the bundled model has a tokenizer): refused, it stays the caller's, which frees it */
        mor_model *m = NULL;
        mor_server_params sp;
        MOR_SERVER_PARAMS_INIT(&sp);
        sp.n_slots = 2; sp.n_ctx = 64; sp.n_batch = 16;
        submit_state ss = { NULL, -1, NULL, NULL, 0 };
        mor_token pr[8];
        mor_request_id first = -1;
        int ok = !mor_model_load_file("models/brown-mor.gguf", NULL, &m) && !mor_server_create(m, &sp, &ss.s) &&
                 !mor_tokenize(m, "The jury", 8, MOR_TOKENIZE_ADD_BOS, pr, 8, &ss.n_prompt) &&
                 !mor_server_submit(ss.s, pr, ss.n_prompt, NULL, 6, NULL, 0, &first) &&
                 !mor_server_cancel(ss.s, first) && !mor_server_release(ss.s, first);
        ss.m = m; ss.prompt = pr;
        static const char gbnf[] = "root ::= [a-z ]+";
        op o = { "mor_grammar_create + mor_server_submit_request(grammar, speculation) on brown-mor",
                 run_submit_grammar, undo_submit_request, gbnf, sizeof gbnf - 1, 0, &ss };
        if (!ok) {
            SKIP("models/brown-mor.gguf for a grammar: %s", mor_last_error());
        } else {
            total += inject_all(&o);
            CHECK(ss.id == 1, "mor_server_submit_request with a grammar: the failed attempts queued nothing (the "
                  "one that went through is %d)", (int)ss.id);
        }
        mor_server_free(ss.s);
        mor_model_free(m);
    }
    op ob = { "mor_batch_create(64)", run_batch, undo_batch, NULL, 0, 0, NULL };
    total += inject_all(&ob);
    op os = { "mor_sampler_create(repeat penalty)", run_sampler, undo_sampler, NULL, 0, 0, NULL };
    total += inject_all(&os);

    /* sampling and tokenizing allocate per call */
    {
        float logits[300];
        for (int i = 0; i < 300; i++) logits[i] = (float)((i * 37) % 101) * 0.05f;
        op o = { "mor_sampler_create + mor_sampler_sample(300 logits)", run_sample, undo_sampler, logits, 300, 0, NULL };
        total += inject_all(&o);
        mor_model_params mp;
        MOR_MODEL_PARAMS_INIT(&mp);
        mp.flags = MOR_MODEL_VOCAB_ONLY;
        mor_model *m = NULL;
        mor_model_load_file(tiny("vocab_smollm.gguf"), &mp, &m);
        static const char text[] = "Hello <|im_start|> world 12345 caf\xc3\xa9 \xff";
        op t = { "mor_tokenize(smollm, specials)", run_tokenize, NULL, text, sizeof text - 1, 0, m };
        if (m) total += inject_all(&t);
        mor_model_free(m);
    }

    /* mor_decode allocates nothing (mor.h): its buffers, logits included, are the context's */
    {
        decode_state s = { load(tiny("expert_mc.gguf")), NULL, NULL, NULL };
        mor_context_params cp;
        MOR_CONTEXT_PARAMS_INIT(&cp);
        cp.n_ctx = 32; cp.n_batch = 8;
        int ok = s.m && mor_context_create(s.m, &cp, &s.c) == MOR_OK && mor_batch_create(8, &s.b1) == MOR_OK &&
                 mor_batch_create(8, &s.b2) == MOR_OK;
        if (ok) {
            mor_batch_add(s.b1, 5, 0, 0, 1);
            ok = mor_decode(s.c, s.b1) == MOR_OK;
            for (int i = 0; i < 6; i++) mor_batch_add(s.b2, 10 + i, 1 + i, 0, 1);
        }
        op o = { "mor_decode(6 rows of logits after 1)", run_decode, NULL, NULL, 0, 0, &s };
        if (CHECK(ok, "decode fault setup")) {
            /* every N needs the state before the call: run the injection by hand */
            int sites = 0, good = 1;
            for (long N = 1; N < 1000; N++) {
                long before = live;
                arm(N);
                mor_status st = o.run(&o, NULL);
                long calls = disarm();
                if (calls < N) { good = good && st == MOR_OK; break; }
                sites++;
                good = good && st == MOR_E_NOMEM && live == before;
            }
            CHECK(good && sites == 0, "%s: no allocation (%d sites), and it succeeds", o.name, sites);
            total += sites;
        }
        mor_batch_free(s.b1); mor_batch_free(s.b2); mor_context_free(s.c); mor_model_free(s.m);
    }
    printf("# allocation failures injected: %d\n", total);
    return total;
}

/* ---- truncated files ---- */

static void test_truncation(void)
{
    static const char *const models[] = { "plain.gguf", "expert_mc.gguf", "expert_kvshare.gguf", "token_mc.gguf",
                                          "plain_bf16.gguf", "vocab_gpt2.gguf" };
    char tmp[] = "/tmp/mor_trunc_XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0, "temporary file");
    long cuts = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0] + 1; i++) {
        size_t n;
        const char *path = i < sizeof models / sizeof models[0] ? tiny(models[i]) : fixture;
        if (!*path) continue;
        uint8_t *img = read_file(path, &n);
        int bad = 0, file_bad = 0, tried = 0;
        for (size_t cut = 0; img && cut < n; cut += cut < 4096 ? 1 : 997) {
            for (int vocab_only = 0; vocab_only < 2; vocab_only++) {
                mor_model_params mp;
                MOR_MODEL_PARAMS_INIT(&mp);
                mp.flags = vocab_only ? MOR_MODEL_VOCAB_ONLY : 0;
                uint8_t *part = malloc(cut ? cut : 1);   /* exactly cut bytes, for ASan */
                memcpy(part, img, cut);
                mor_model *m = (mor_model *)part;
                long before = live;
                mor_status st = mor_model_load_memory(part, cut, &mp, &m);
                /* a vocab-only load reads only the keys: it may succeed on a file cut in its tensor data */
                if (!(st == MOR_E_FORMAT && !m && live == before) && !(vocab_only && st == MOR_OK && cut > 256)) {
                    if (!bad++) printf("# %s cut at %zu (vocab_only %d): %s %s\n", path, cut, vocab_only,
                                       mor_status_str(st), mor_last_error());
                }
                mor_model_free(st == MOR_OK ? m : NULL);
                free(part);
                tried++;
            }
            if (cut % 61 == 0 && fd >= 0) {   /* a sample of them from disk, mapped and read */
                if (ftruncate(fd, 0) != 0 || pwrite(fd, img, cut, 0) != (ssize_t)cut) file_bad++;
                for (int nm = 0; nm < 2; nm++) {
                    mor_model_params mp;
                    MOR_MODEL_PARAMS_INIT(&mp);
                    mp.flags = nm ? MOR_MODEL_NO_MMAP : 0;
                    mor_model *m = NULL;
                    mor_status st = mor_model_load_file(tmp, &mp, &m);
                    if (st != MOR_E_FORMAT || m) { if (!file_bad++) printf("# file cut at %zu: %s\n", cut, mor_status_str(st)); }
                    mor_model_free(m);
                    tried++;
                }
            }
        }
        cuts += tried;
        CHECK(img && !bad && !file_bad, "%s: %d truncated loads (every cut in the first 4 KB, then every 997th; "
              "from memory, and every 61st from a file, mmap'd and read) are MOR_E_FORMAT and leak nothing",
              path, tried);
        free(img);
    }
    if (fd >= 0) { close(fd); unlink(tmp); }
    printf("# truncated loads: %ld\n", cuts);
}

/* ---- the whole KV cache, cell by cell ---- */

typedef struct { int32_t n_layers; int32_t *used; int32_t **seq, **pos; unsigned char **k, **v; int32_t *pos_max; } kv_snap;

static kv_layer *snap_layer(mor_kv_cache *kv, int32_t l) { return l < 0 ? &kv->tokens : &kv->layers[l]; }

static void kv_take(mor_kv_cache *kv, kv_snap *s)
{
    int32_t L = kv->m->n_layer + 1;
    s->n_layers = L;
    s->used = calloc((size_t)L, sizeof *s->used);
    s->seq = calloc((size_t)L, sizeof *s->seq); s->pos = calloc((size_t)L, sizeof *s->pos);
    s->k = calloc((size_t)L, sizeof *s->k); s->v = calloc((size_t)L, sizeof *s->v);
    for (int32_t l = -1; l < L - 1; l++) {
        kv_layer *K = snap_layer(kv, l);
        size_t nc = (size_t)K->n_cells, row = l < 0 ? 0 : kv->row_bytes;   /* bytes of a K or V row */
        s->used[l + 1] = K->n_used;
        s->seq[l + 1] = malloc(sizeof(int32_t) * (nc + 1)); memcpy(s->seq[l + 1], K->seq, sizeof(int32_t) * nc);
        s->pos[l + 1] = malloc(sizeof(int32_t) * (nc + 1)); memcpy(s->pos[l + 1], K->pos, sizeof(int32_t) * nc);
        if (row && K->k) {
            s->k[l + 1] = malloc(nc * row); memcpy(s->k[l + 1], K->k, nc * row);
            s->v[l + 1] = malloc(nc * row); memcpy(s->v[l + 1], K->v, nc * row);
        }
    }
    s->pos_max = malloc(sizeof(int32_t) * (size_t)kv->n_seq_max);
    memcpy(s->pos_max, kv->seq_pos_max, sizeof(int32_t) * (size_t)kv->n_seq_max);
}

/* Same occupied cells (sequence, position, K, V), counts and maxima. */
static int kv_same(mor_kv_cache *kv, const kv_snap *s)
{
    for (int32_t l = -1; l < s->n_layers - 1; l++) {
        kv_layer *K = snap_layer(kv, l);
        size_t row = l < 0 ? 0 : kv->row_bytes;
        if (K->n_used != s->used[l + 1]) return 0;
        for (int32_t c = 0; c < K->n_cells; c++) {
            if (K->seq[c] != s->seq[l + 1][c]) return 0;
            if (K->seq[c] < 0) continue;
            if (K->pos[c] != s->pos[l + 1][c]) return 0;
            if (row && K->k && (memcmp(K->k + c * row, s->k[l + 1] + c * row, row) ||
                                memcmp(K->v + c * row, s->v[l + 1] + c * row, row)))
                return 0;
        }
    }
    return !memcmp(kv->seq_pos_max, s->pos_max, sizeof(int32_t) * (size_t)kv->n_seq_max);
}

static void kv_snap_free(kv_snap *s)
{
    for (int32_t l = 0; l < s->n_layers; l++) { free(s->seq[l]); free(s->pos[l]); free(s->k[l]); free(s->v[l]); }
    free(s->used); free(s->seq); free(s->pos); free(s->k); free(s->v); free(s->pos_max);
}

static mor_token tk(int32_t i, int32_t V) { return (mor_token)((i * 104729 + 31) % V); }

/* ---- full caches ---- */

static void test_full_cache(mor_model *m, const char *name, int32_t kv_mode)
{
    const int32_t V = mor_model_n_vocab(m);
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 10; cp.n_batch = 8; cp.n_seq_max = 2; cp.kv_mode = kv_mode;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    if (!CHECK(mor_context_create(m, &cp, &c) == MOR_OK && mor_batch_create(8, &b) == MOR_OK, "%s: context", name)) {
        mor_context_free(c); mor_batch_free(b); return;
    }
    mor_kv_cache *kv = mor_context_kv(c);
    for (int32_t i = 0; i < 7; i++) mor_batch_add(b, tk(i, V), i, 0, i == 6);
    mor_status st = mor_decode(c, b);
    float *keep = malloc(sizeof(float) * (size_t)V);
    const float *l0 = mor_get_logits(c, 6);
    if (l0) memcpy(keep, l0, sizeof(float) * (size_t)V);
    kv_snap s;
    kv_take(kv, &s);
    mor_batch_clear(b);
    for (int32_t i = 0; i < 4; i++) mor_batch_add(b, tk(i, V), i, 1, 1);   /* 7 + 4 > 10 cells */
    mor_status full = mor_decode(c, b);
    const float *l1 = mor_get_logits(c, 6);
    CHECK(st == MOR_OK && full == MOR_E_KV_FULL && kv_same(kv, &s) && l1 && !memcmp(l1, keep, sizeof(float) * (size_t)V),
          "%s (kv mode %d): 4 tokens into 3 free cells: MOR_E_KV_FULL, the cache cell for cell and the last logits "
          "as they were", name, kv_mode);
    st = mor_kv_seq_cp(kv, 0, 1, -1, -1);
    CHECK(st == MOR_E_KV_FULL && kv_same(kv, &s), "%s: copying 7 cells into 3 free: MOR_E_KV_FULL, nothing changed", name);
    mor_kv_seq_rm(kv, 0, 3, -1);
    mor_batch_clear(b);
    for (int32_t i = 0; i < 4; i++) mor_batch_add(b, tk(i, V), i, 1, 1);
    st = mor_decode(c, b);
    CHECK(st == MOR_OK && mor_kv_seq_pos_max(kv, 0) == 2 && mor_kv_seq_pos_max(kv, 1) == 3,
          "%s: after removing 4 cells the same batch fits (%s)", name, mor_status_str(st));
    kv_snap_free(&s);
    free(keep);
    mor_batch_free(b);
    mor_context_free(c);
}

/* ---- cancellation ---- */

typedef struct { int32_t polls, stop_at; } abort_ctl;

static int32_t abort_cb(void *ud)
{
    abort_ctl *a = ud;
    a->polls++;
    return a->stop_at > 0 && a->polls == a->stop_at;
}

static void test_abort(mor_model *m, const char *name, int32_t mode)
{
    const int32_t V = mor_model_n_vocab(m);
    abort_ctl ctl = { 0, 0 };
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 64; cp.n_batch = 16; cp.n_seq_max = 2;
    cp.abort_callback = abort_cb; cp.abort_user_data = &ctl;
    mor_context *c = NULL, *ref = NULL;
    mor_batch *b1 = NULL, *b2 = NULL;
    mor_context_create(m, &cp, &c);
    mor_context_create(m, &cp, &ref);
    mor_batch_create(16, &b1);
    mor_batch_create(16, &b2);
    if (!CHECK(c && ref && b1 && b2, "%s: setup", name)) goto out;
    if (mode) { mor_router_set_mode(mor_context_router(c), mode, 2); mor_router_set_mode(mor_context_router(ref), mode, 2); }
    for (int32_t i = 0; i < 9; i++) mor_batch_add(b1, tk(i, V), i, i % 2, 1);
    for (int32_t i = 0; i < 6; i++) mor_batch_add(b2, tk(i + 20, V), 10 + i, i % 2, 1);
    int ok = mor_decode(c, b1) == MOR_OK && mor_decode(ref, b1) == MOR_OK;
    ctl.polls = 0;
    ok = ok && mor_decode(ref, b2) == MOR_OK;       /* the uninterrupted result */
    int32_t polls = ctl.polls, good = 0;
    float *before = malloc(sizeof(float) * 9 * (size_t)V);
    for (int32_t i = 0; ok && i < 9; i++) memcpy(before + (size_t)i * V, mor_get_logits(c, i), sizeof(float) * (size_t)V);
    for (int32_t k = 1; ok && k <= polls; k++) {
        kv_snap s;
        kv_take(mor_context_kv(c), &s);
        mor_router_stats rs0, rs1;
        memset(&rs0, 0, sizeof rs0); memset(&rs1, 0, sizeof rs1);
        rs0.size = rs1.size = sizeof rs0;
        mor_router_get_stats(mor_context_router(c), &rs0);
        ctl.polls = 0; ctl.stop_at = k;
        mor_status st = mor_decode(c, b2);
        mor_router_get_stats(mor_context_router(c), &rs1);
        int same = st == MOR_E_ABORTED && kv_same(mor_context_kv(c), &s) && rs0.n_tokens == rs1.n_tokens;
        for (int32_t i = 0; same && i < 9; i++)
            same = !memcmp(mor_get_logits(c, i), before + (size_t)i * V, sizeof(float) * (size_t)V);
        good += same;
        kv_snap_free(&s);
    }
    CHECK(ok && polls >= 2 && good == polls, "%s: aborting at each of the %d polls of a decode: MOR_E_ABORTED, the "
          "cache cell for cell, the stats and the last logits as before (%d of %d)", name, polls, good, polls);
    ctl.stop_at = 0;
    mor_status st = mor_decode(c, b2);
    int same = st == MOR_OK;
    for (int32_t i = 0; same && i < 6; i++)
        same = !memcmp(mor_get_logits(c, i), mor_get_logits(ref, i), sizeof(float) * (size_t)V);
    int32_t d1[6], d2[6];
    mor_router_get_depths(mor_context_router(c), d1, 6);
    mor_router_get_depths(mor_context_router(ref), d2, 6);
    CHECK(same && !memcmp(d1, d2, sizeof d1), "%s: after %d aborts the decode gives bitwise the logits and depths of a "
          "context never aborted", name, polls);
    free(before);
out:
    mor_batch_free(b1); mor_batch_free(b2); mor_context_free(c); mor_context_free(ref);
}

/* ---- servers: a failed step changes nothing ---- */

#define SRV_REQ 6
typedef struct { int32_t streamed; uint64_t h[SRV_REQ]; } srv_log;   /* h: FNV of each request's logits */

static void srv_on_token(mor_request_id id, mor_token t, int32_t depth, void *ud)
{
    (void)id; (void)t; (void)depth;
    ((srv_log *)ud)->streamed++;
}

static void srv_logits(void *ud, mor_request_id id, const float *logits, int32_t nv)
{
    srv_log *l = ud;
    const unsigned char *b = (const unsigned char *)logits;
    uint64_t h = l->h[id] ? l->h[id] : 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(float) * (size_t)nv; i++) h = (h ^ b[i]) * 1099511628211ull;
    l->h[id] = h;
}

typedef struct { mor_token tok[SRV_REQ][8]; int32_t dep[SRV_REQ][8], n[SRV_REQ], state[SRV_REQ]; } srv_out;

static void srv_take(mor_server *s, srv_out *o)
{
    memset(o, 0, sizeof *o);
    for (int32_t i = 0; i < SRV_REQ; i++) {
        o->state[i] = mor_server_request_state(s, i);
        mor_server_get_tokens(s, i, o->tok[i], o->dep[i], 8, &o->n[i]);
    }
}

/* One scenario: 6 requests on 3 slots (so some wait), mixed greedy and
 * seeded sampling, 3 submitted up front and one more after each of the first
 * steps, request 4 cancelled after step 3; n_batch 16, or 2 (prompts of 3-5
 * tokens then enter in chunks across steps). inject: 0 none, 1 allocation
 * failures, 2 aborts, before each step is let through. */
static int srv_scenario(mor_model *m, int32_t mode, int32_t exit_mode, uint32_t n_batch, int inject, srv_out *out,
                        srv_log *log, int *sites, int *unchanged)
{
    const int32_t V = mor_model_n_vocab(m);
    abort_ctl ctl = { 0, 0 };
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    p.mode = mode; p.n_slots = 3; p.n_ctx = 96; p.n_batch = n_batch; p.n_threads = 2;
    p.exit_mode = exit_mode; p.exit_threshold = 0.999f;
    p.on_token = srv_on_token; p.user_data = log;
    p.abort_callback = abort_cb; p.abort_user_data = &ctl;
    mor_server *s = NULL;
    if (mor_server_create(m, &p, &s)) return 0;
    serve_set_logits_hook(s, srv_logits, log);
    int32_t next = 0, pend = 1, steps = 0, ok = 1;
    while ((pend || next < SRV_REQ) && ok && steps < 200) {
        int32_t k = next < 3 ? 3 : next < SRV_REQ ? next + 1 : next;
        for (; next < k; next++) {
            mor_token pr[5];
            for (int32_t t = 0; t <= next % 5; t++) pr[t] = tk(next * 7 + t, V);
            mor_sampler_params sp;
            MOR_SAMPLER_PARAMS_INIT(&sp);
            sp.seed = 77 + (uint64_t)next;
            if (next % 2) sp.temperature = 0;
            mor_token stop = tk(next + 3, V);
            mor_request_id id;
            ok &= mor_server_submit(s, pr, 1 + next % 5, &sp, 3 + next % 4, &stop, next % 3 == 0, &id) == MOR_OK;
        }
        if (steps == 3) mor_server_cancel(s, 4);
        for (long f = 1; inject && f < 1000; f++) {   /* failing attempts, until one goes through */
            kv_snap ks;
            srv_out before, after;
            mor_kv_cache *kv = mor_context_kv(serve_context(s));
            kv_take(kv, &ks);
            srv_take(s, &before);
            int32_t streamed = log->streamed;
            mor_status st;
            if (inject == 1) {
                arm(f);
                st = mor_server_step(s, &pend);
                long calls = disarm();
                if (calls < f) { kv_snap_free(&ks); goto stepped; }
                ok &= st == MOR_E_NOMEM;
            } else {
                ctl.polls = 0; ctl.stop_at = (int32_t)f;
                st = mor_server_step(s, &pend);
                ctl.stop_at = 0;
                if (ctl.polls < f) { kv_snap_free(&ks); goto stepped; }
                ok &= st == MOR_E_ABORTED;
            }
            (*sites)++;
            srv_take(s, &after);
            *unchanged += kv_same(kv, &ks) && !memcmp(&before, &after, sizeof before) && log->streamed == streamed;
            kv_snap_free(&ks);
            continue;
        stepped:
            if (st) ok = 0;
            break;
        }
        if (!inject && mor_server_step(s, &pend)) ok = 0;
        steps++;
    }
    srv_take(s, out);
    mor_server_free(s);
    return ok && !pend;
}

static void test_server_faults(mor_model *m, const char *name)
{
    static const char *const modes[] = { "SERIAL", "SEQUENCE", "DEPTHWISE", "DEPTHWISE+SATURATION",
                                         "SEQUENCE n_batch 2 (chunked prompts)", "DEPTHWISE n_batch 2 (chunked prompts)" };
    const int has_routers = mor_model_router_type(m) != MOR_ROUTER_TYPE_TOKEN;
    for (int32_t mi = 0; mi < 6; mi++) {
        int32_t mode = mi < 3 ? mi : mi == 4 ? MOR_SERVE_SEQUENCE : MOR_SERVE_DEPTHWISE;
        int32_t ex = mi == 3 ? MOR_EXIT_SATURATION : MOR_EXIT_NONE;
        uint32_t nb = mi >= 4 ? 2 : 16;
        if (ex && !has_routers) continue;
        srv_out ref, got;
        srv_log lref, lgot;
        memset(&lref, 0, sizeof lref);
        int sites = 0, same = 0;
        if (!CHECK(srv_scenario(m, mode, ex, nb, 0, &ref, &lref, &sites, &same), "%s %s: undisturbed run", name, modes[mi]))
            continue;
        for (int inject = 1; inject <= 2; inject++) {
            memset(&lgot, 0, sizeof lgot);
            sites = same = 0;
            int ran = srv_scenario(m, mode, ex, nb, inject, &got, &lgot, &sites, &same);
            CHECK(ran && same == sites && (inject == 1 || sites > 0) && !memcmp(&ref, &got, sizeof ref) &&
                  !memcmp(lref.h, lgot.h, sizeof lref.h) && lref.streamed == lgot.streamed,
                  "%s %s: a step failing at each of its %d %s changes nothing (%d of %d), and the run ends with "
                  "bitwise the tokens, depths and logits of an undisturbed one", name, modes[mi], sites,
                  inject == 1 ? "allocations" : "abort polls", same, sites);
        }
    }
}

/* ---- load progress and its cancellation ---- */

typedef struct { int32_t calls, stop_at, decreasing; float first, last; } progress_ctl;

static int32_t progress_cb(float p, void *ud)
{
    progress_ctl *c = ud;
    if (c->calls == 0) c->first = p;
    else if (p < c->last) c->decreasing++;
    c->last = p;
    c->calls++;
    return c->stop_at > 0 && c->calls == c->stop_at;
}

static void test_progress(const char *path, uint32_t flags, int from_memory)
{
    progress_ctl pc = { 0, 0, 0, 0, 0 };
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = flags; mp.progress = progress_cb; mp.progress_user_data = &pc;
    size_t n = 0;
    uint8_t *img = from_memory ? read_file(path, &n) : NULL;
    mor_model *m = NULL;
    mor_status st = from_memory ? mor_model_load_memory(img, n, &mp, &m) : mor_model_load_file(path, &mp, &m);
    mor_model_free(m);
    int32_t calls = pc.calls;
    CHECK(st == MOR_OK && calls > 2 && pc.first == 0.0f && pc.last == 1.0f && !pc.decreasing,
          "%s (%s, flags %u): progress reported %d times, from 0 to 1, never decreasing", path,
          from_memory ? "memory" : "file", flags, calls);
    int good = 0;
    for (int32_t k = 1; k <= calls; k++) {
        pc = (progress_ctl){ 0, k, 0, 0, 0 };
        m = (mor_model *)&pc;
        long before = live;
        st = from_memory ? mor_model_load_memory(img, n, &mp, &m) : mor_model_load_file(path, &mp, &m);
        good += st == MOR_E_ABORTED && m == NULL && live == before && pc.calls == k;
        if (st == MOR_OK) mor_model_free(m);
    }
    CHECK(good == calls, "%s: cancelling at each of the %d calls: MOR_E_ABORTED at once, no model, nothing leaked",
          path, calls);
    free(img);
}

/* ---- the maximum context ---- */

static void test_max_pos(mor_model *m, const char *name)
{
    const int32_t V = mor_model_n_vocab(m), T = mor_model_n_ctx_train(m);
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 16; cp.n_batch = 4;
    CHECK(cp.max_pos == 0 && mor_sizeof_context_params() == sizeof cp, "max_pos defaults to 0 (the training context)");
    mor_context *c = NULL;
    mor_batch *b = NULL;
    mor_batch_create(4, &b);
    mor_context_create(m, &cp, &c);
    mor_batch_add(b, tk(0, V), T - 2, 0, 1);
    mor_batch_add(b, tk(1, V), T - 1, 0, 1);
    mor_status st1 = mor_decode(c, b);
    mor_batch_clear(b);
    mor_batch_add(b, tk(2, V), T, 0, 1);
    kv_snap s;
    kv_take(mor_context_kv(c), &s);
    mor_status st2 = mor_decode(c, b);
    CHECK(st1 == MOR_OK && st2 == MOR_E_POSITION && kv_same(mor_context_kv(c), &s) && mor_get_logits(c, 1),
          "%s: positions %d and %d (< n_ctx_train %d) decode; %d is MOR_E_POSITION and changes nothing (%s)",
          name, T - 2, T - 1, T, T, mor_last_error());
    kv_snap_free(&s);
    mor_context_free(c);
    c = NULL;
    cp.max_pos = 5;
    mor_context_create(m, &cp, &c);
    mor_batch_clear(b);
    mor_batch_add(b, tk(0, V), 4, 0, 1);
    st1 = mor_decode(c, b);
    mor_batch_clear(b);
    mor_batch_add(b, tk(0, V), 5, 0, 1);
    st2 = mor_decode(c, b);
    CHECK(st1 == MOR_OK && st2 == MOR_E_POSITION, "%s: max_pos 5: position 4 decodes, 5 is MOR_E_POSITION", name);
    mor_context_free(c);
    c = NULL;
    cp.max_pos = -1;
    mor_context_create(m, &cp, &c);
    mor_batch_clear(b);
    mor_batch_add(b, tk(0, V), 1 << 30, 0, 1);
    mor_batch_add(b, tk(1, V), INT32_MAX - 1, 0, 1);
    st1 = mor_decode(c, b);
    const float *l = mor_get_logits(c, 1);
    int finite = l != NULL;
    for (int32_t v = 0; finite && v < V; v++) finite = isfinite(l[v]);
    mor_batch_clear(b);
    mor_batch_add(b, tk(0, V), INT32_MAX, 0, 1);
    st2 = mor_decode(c, b);
    CHECK(st1 == MOR_OK && finite && st2 == MOR_E_POSITION, "%s: max_pos -1: positions 2^30 and INT32_MAX-1 decode "
          "(finite logits), INT32_MAX is MOR_E_POSITION (%s)", name, mor_status_str(st2));
    mor_context_free(c);
    mor_batch_free(b);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *out = getenv("OUT");
    const char *roots[2] = { out && *out ? out : ".", "." };
    for (int r = 0; r < 2 && !fixture[0]; r++) {
        snprintf(fixture, sizeof fixture, "%s/build/fixtures/expert_mc3_fix_perturbed.st.gguf", roots[r]);
        if (access(fixture, R_OK) != 0) fixture[0] = 0;
    }
    if (!fixture[0])   /* counted, so a missing fixture shows in run.sh's summary */
        SKIP("the d=64 model: build/fixtures/expert_mc3_fix_perturbed.st.gguf not found (run make fixtures): tiny models only");

    test_alloc_failures();
    test_truncation();

    static const struct { const char *file; int32_t mode; } cases[] = {
        { "expert_mc.gguf", MOR_ROUTE_THRESHOLD }, { "expert_mc.gguf", MOR_ROUTE_DEFAULT },
        { "expert_kvshare.gguf", MOR_ROUTE_DEFAULT }, { "token_mc.gguf", MOR_ROUTE_DEFAULT },
        { "plain.gguf", MOR_ROUTE_DEFAULT }, { NULL, MOR_ROUTE_THRESHOLD },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = cases[i].file ? tiny(cases[i].file) : fixture;
        if (!*path) continue;
        mor_model *m = load(path);
        if (!m) continue;
        char name[160];
        snprintf(name, sizeof name, "%s (routing %d)", cases[i].file ? cases[i].file : "fixture expert_mc3_fix",
                 cases[i].mode);
        test_abort(m, name, cases[i].mode);
        if (cases[i].mode == MOR_ROUTE_DEFAULT || !cases[i].file) test_server_faults(m, name);
        if (cases[i].mode == MOR_ROUTE_DEFAULT || !cases[i].file) {
            test_full_cache(m, name, MOR_KV_RECURSION_WISE);
            if (mor_model_n_recursion(m) > 1) test_full_cache(m, name, MOR_KV_SHARED);
            test_max_pos(m, name);
        }
        mor_model_free(m);
    }
    test_progress(tiny("expert_mc.gguf"), 0, 1);
    test_progress(tiny("token_mc.gguf"), MOR_MODEL_NO_MMAP, 0);
    test_progress(tiny("vocab_gpt2.gguf"), MOR_MODEL_VOCAB_ONLY, 0);
    if (fixture[0]) test_progress(fixture, 0, 0);
    return check_done();
}
