/* mor-bench - prompt processing and generation speed of libmor, in the
 * manner of llama-bench, on random-weight models of the SmolLM-135M and -360M
 * (and TinyLlama-1.1B) shapes that it writes itself (bench_models.h) (dense Llama, the dense model of the MoR's
 * unrolled depth, and MoR middle-cycle with N_r = 3), so nothing is
 * downloaded. It also probes this machine (roofline.h: read bandwidth at each
 * test's working-set size, the peak of every unit the kernels use) and
 * prints every result as a fraction of its bound, the faster of what the
 * reads and the arithmetic of a token allow at those rates; --no-probe
 * skips it. Variants of one shape, type and thread count are measured interleaved
 * (rep by rep), so that their ratios are fair on a noisy machine.
 *
 *   mor-bench [-s 135m,360m,k256,tl1b] [-w f32,f16,bf16,q8_0,q4_0,...] [-t 1,2] [-a dense,dense-eq,mor]
 *             [-p 128] [-n 64] [-r 5] [--dir build/bench] [--json FILE] [--kernels auto|ref|avx2|avx512|amx|neon]
 *             [--no-probe] [--quick]
 *   mor-bench --model FILE[,FILE...] [--exit MODE:T] [-t 1,2] [-p 128] [-n 64] [-r 5] [--kernels K]
 *             [--fast-bf16] [--no-probe]
 *             models from files (a relaxed model's LoRA deltas: each loaded unfolded and folded,
 *             MOR_MODEL_FOLD_LORA, the two measured interleaved; a model without deltas is loaded
 *             once and measured twice; with --exit, full depth beside the same model with early
 *             exits); the depth column is the router's mean, and the roofline counts the base
 *             weights at that depth
 *   --depth D (with either of the two above): D tokens in the KV cache before each test, as
 *             llama-bench -d D; --kv-type f32|f16|q8_0 the cache's type, as -ctk/-ctv
 *   mor-bench --stream [-w TYPES] [-t 2] [-r 32] [--mib 512]: the matrix-vector products' read rate as
 *             a share of the bandwidth probe's, measured in pairs at the same moment (bench_stream.h)
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include "internal.h"
#include "mor.h"
#include "bench_serve.h"
#include "bench_grammar.h"
#include "bench_speculate.h"
#include "cli.h"
#include "bench_util.h"
#include "roofline.h"
#include "bench_stream.h"
#include "synth_model.h"
#include "bench_models.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------- models ---------------- */

enum { ARCH_DENSE, ARCH_DENSE_EQ, ARCH_MOR, N_ARCH };
static const char *const arch_names[N_ARCH] = { "dense", "dense-eq", "mor" };

/* The model file for (shape, arch, type), written when missing. */
static int model_path(const char *dir, const shape *sh, int arch, int ti, char *path, size_t cap)
{
    return bench_model_file(dir, sh, arch == ARCH_DENSE ? sh->L : sh->L_mor, arch == ARCH_MOR ? 3 : 1, ti, 0, path, cap);
}

/* Bytes of a matrix as stored. */
static double wbytes(const tensor *w) { return (double)tensor_row_bytes(w->type, w->cols) * (double)w->rows; }

static double layer_bytes(const mor_model *m, int32_t l)
{
    double b = 0;
    for (int r = 0; r < ROLE_ALL; r++) b += wbytes(&m->layers[l].w[r]);
    return b;
}

static double layer_macs(const mor_model *m, int32_t l)
{
    double b = 0;
    for (int r = 0; r < ROLE_COUNT; r++)
        if (r != ROLE_ATTN_NORM && r != ROLE_FFN_NORM) b += (double)m->layers[l].w[r].rows * (double)m->layers[l].w[r].cols;
    return b;
}

/* --depth D: tokens in the KV cache before each pp and tg test (llama-bench -d D), decoded once per
 * context and untimed; each test runs at positions D.. and its tokens are removed after it. */
static int kv_depth;
/* --kv-type: how the contexts' caches store K/V (MOR_KV_TYPE_*, llama-bench -ctk/-ctv), and the bytes
 * per value the roofline counts for it (Q8_0: 34 bytes a block of 32). */
static int kv_type = MOR_KV_TYPE_F32;
static double kv_bytes_per_value(void)
{
    return kv_type == MOR_KV_TYPE_F16 ? 2.0 : kv_type == MOR_KV_TYPE_Q8_0 ? 34.0 / 32 : 4.0;
}

/* What a token of test `test` (0 pp, 1 tg: ntok tokens) of model m at mean depth `depth` must read
 * and compute (roofline.h): every layer it runs, the output matrix (pp: once for the batch), the K/V
 * rows of the cells before it (average position kv_depth + ntok / 2, in the --kv-type's bytes). */
static roof_work test_work(const mor_model *m, int test, int ntok, double depth)
{
    double once = 0, block = 0, lm = 0;
    for (int32_t l = 0; l < m->prelude; l++) { once += layer_bytes(m, l); lm += layer_macs(m, l); }
    for (int32_t l = m->n_layer - m->coda; l < m->n_layer; l++) { once += layer_bytes(m, l); lm += layer_macs(m, l); }
    for (int32_t j = 0; j < m->base_depth; j++) {
        const int32_t l = model_layer_of(m, 0, j);
        block += layer_bytes(m, l);
        lm += depth * layer_macs(m, l);
    }
    const double layers_run = m->prelude + m->coda + depth * m->base_depth;
    const double kvd = (double)m->n_head_kv * m->head_dim, qd = (double)m->n_head * m->head_dim;
    const double head_macs = (double)m->output.rows * m->output.cols / (test == 0 ? ntok : 1);
    roof_work w;
    w.once = once + block + wbytes(&m->output);
    w.block = m->n_rec > 1 ? block : 0;
    w.depth = m->n_rec > 1 ? depth : 1;
    const double before = kv_depth + ntok / 2.0;
    w.kv = layers_run * before * 2 * kvd * kv_bytes_per_value();
    w.flops = 2 * (lm + head_macs + layers_run * before * 2 * qd);
    w.per_batch = test == 0 ? ntok : 1;
    return w;
}

/* ---------------- measurements ---------------- */

typedef struct {
    int arch, routing;           /* routing: 0 dense, 1 MoR forced full depth, 2 MoR threshold */
    mor_model *m;
    mor_context *c;
    double pp[64], tg[64];       /* tok/s per rep */
    double cpu[128];             /* per rep: this process's CPU time / (wall time x threads) */
    int    n_cpu, nt;
    int    n_batch, filled;      /* the context's n_batch; --depth: its prefix is in the cache */
    double depth_pp, depth_tg;   /* mean recursions per token */
    float  thr[4];               /* THRESHOLD routing: recursion 1, 2 thresholds for pp, then for tg */
    int ok;
} variant;

/* The token sequences every variant and rep decodes: the same work each time
 * (random ids, drawn once), so that reps and variants compare like for like. */
static mor_token pp_tok[2048], tg_tok[2048];
static int32_t tok_vocab = 32000;   /* the ids are below it, the --depth prefix's too */

static void make_tokens(int32_t V)
{
    uint64_t s = 42;
    tok_vocab = V;
    for (int i = 0; i < 2048; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        pp_tok[i] = (mor_token)(s % (uint64_t)V);
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        tg_tok[i] = (mor_token)(s % (uint64_t)V);
    }
}

/* Token p of the --depth prefix: random ids as the tests', its own stream (splitmix64 of p). */
static mor_token depth_token(int p)
{
    uint64_t z = 0x9e3779b97f4a7c15ull * (uint64_t)(p + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (mor_token)((z ^ (z >> 31)) % (uint64_t)tok_vocab);
}

/* v's cache as a test starts (untimed): empty; with --depth the prefix alone, decoded by the
 * context's first test in batches of n_batch, and kept: later tests only remove their own tokens
 * (a prefix of thousands of tokens decoded again before every rep would cost more than the tests).
 * 0, or 1 (said; v->ok is 0). */
static int kv_prepare(variant *v, mor_batch *b)
{
    mor_kv_cache *kv = mor_context_kv(v->c);
    if (!kv_depth) { mor_kv_clear(kv); return 0; }
    if (v->filled) {
        if (mor_kv_seq_rm(kv, 0, kv_depth, -1) == MOR_OK) return 0;
    } else {
        mor_kv_clear(kv);
        int p = 0;
        while (p < kv_depth) {
            mor_batch_clear(b);
            for (const int end = p + v->n_batch < kv_depth ? p + v->n_batch : kv_depth; p < end; p++)
                mor_batch_add(b, depth_token(p), p, 0, p == end - 1);
            if (mor_decode(v->c, b) != MOR_OK) break;
        }
        v->filled = p == kv_depth && mor_kv_seq_pos_max(kv, 0) == kv_depth - 1;
        if (v->filled) return 0;
    }
    fprintf(stderr, "--depth %d: %s\n", kv_depth, mor_last_error());
    v->ok = 0;
    return 1;
}

/* One batch of n tokens at positions kv_depth.. (logits for the last). */
static double run_batch(variant *v, mor_batch *b, const mor_token *tok, int n)
{
    if (kv_prepare(v, b)) return 0;
    mor_batch_clear(b);
    for (int i = 0; i < n; i++) mor_batch_add(b, tok[i], kv_depth + i, 0, i == n - 1);
    double t0 = bench_now(), c0 = cpu_now();
    if (mor_decode(v->c, b) != MOR_OK) { fprintf(stderr, "decode: %s\n", mor_last_error()); v->ok = 0; }
    double t = bench_now() - t0;
    if (v->n_cpu < 128) v->cpu[v->n_cpu++] = (cpu_now() - c0) / (t * v->nt);
    return n / t;
}

static double run_pp(variant *v, mor_batch *b, int np) { return run_batch(v, b, pp_tok, np); }

static double run_tg(variant *v, mor_batch *b, int ng)
{
    if (kv_prepare(v, b)) return 0;
    double t0 = bench_now(), c0 = cpu_now();
    for (int i = 0; i < ng && v->ok; i++) {
        mor_batch_clear(b);
        mor_batch_add(b, tg_tok[i], kv_depth + i, 0, 1);
        if (mor_decode(v->c, b) != MOR_OK) { fprintf(stderr, "decode: %s\n", mor_last_error()); v->ok = 0; }
    }
    double t = bench_now() - t0;
    if (v->n_cpu < 128) v->cpu[v->n_cpu++] = (cpu_now() - c0) / (t * v->nt);
    return ng / t;
}

/* Thresholds that give a mean depth near 2 of 3 on the benchmark's own
 * tokens: from a forced full-depth prefill of them (the same router inputs
 * as decoding them one by one: THRESHOLD routing is causal), recursion 1
 * passes 2/3 of the tokens and recursion 2 half of those, as the capacities
 * 2/3 and 1/3 of top-k routing would. A random model's router scores move
 * with the sequence, so pp and tg get their own thresholds, each from the
 * tokens it decodes. */
static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void calibrate_n(variant *v, mor_batch *b, const mor_token *tok, int n, float *t1, float *t2)
{
    mor_router *r = mor_context_router(v->c);
    mor_router_set_mode(r, MOR_ROUTE_FORCED, 3);
    run_batch(v, b, tok, n);
    v->n_cpu = 0;
    float *s1 = malloc(sizeof(float) * (size_t)n), *s2 = malloc(sizeof(float) * (size_t)n), *sorted = malloc(sizeof(float) * (size_t)n);
    int n1 = 0;
    for (int i = 0; i < n; i++) {
        float sc[3];
        mor_router_get_scores(r, i, sc, 3);
        s1[i] = sorted[i] = sc[1];
    }
    qsort(sorted, (size_t)n, sizeof(float), cmp_f);
    *t1 = sorted[n / 3];
    for (int i = 0; i < n; i++) {
        float sc[3];
        mor_router_get_scores(r, i, sc, 3);
        if (s1[i] >= *t1) s2[n1++] = sc[2];
    }
    qsort(s2, (size_t)n1, sizeof(float), cmp_f);
    *t2 = n1 ? s2[n1 / 2] : 0.5f;
    free(s1); free(s2); free(sorted);
}

static void set_thresholds(variant *v, float t1, float t2)
{
    mor_router *r = mor_context_router(v->c);
    mor_router_set_mode(r, MOR_ROUTE_THRESHOLD, 0);
    mor_router_set_threshold(r, 1, t1);
    mor_router_set_threshold(r, 2, t2);
}

/* One test's reps of v (0: pp, 1: tg): median [min-max] tok/s and the median cpu
 * fraction (cpu[] alternates pp, tg per rep). Sorts v's tok/s of that test. */
typedef struct { double med, mn, mx, busy; } rep_stats;
/* The mean passes of the block a variant's test ran (a model without routers: all of them). */
static double variant_depth(const variant *v, int test)
{
    return v->m->router_type == MOR_ROUTER_TYPE_NONE ? v->m->n_rec : test == 0 ? v->depth_pp : v->depth_tg;
}

static rep_stats summarize(variant *v, int test, int reps)
{
    double *s = test == 0 ? v->pp : v->tg, cpus[64];
    rep_stats r = { 0, s[0], s[0], 0 };
    for (int i = 0; i < reps; i++) { if (s[i] < r.mn) r.mn = s[i]; if (s[i] > r.mx) r.mx = s[i]; }
    r.med = bench_median(s, reps);
    int nc = 0;
    for (int i = test; i < v->n_cpu && nc < 64; i += 2) cpus[nc++] = v->cpu[i];
    r.busy = nc ? bench_median(cpus, nc) : 0;
    return r;
}

/* --fast-bf16: contexts made with MOR_CTX_FAST_BF16 */
static int fast_bf16;

static const char *routing_name(int r) { return r == 0 ? "-" : r == 1 ? "full" : "thr"; }

/* --model: each file loaded twice, LoRA deltas unfolded (the default) and
 * folded at load, measured interleaved rep by rep like the variants above.
 * A file without deltas is loaded once, both variants on that model (the
 * fold changes nothing, and a second load doubled the wall time of a large
 * model's run) and one context (files_shared). Routing is the model's
 * default. With --exit MODE:T the second variant is instead the same model
 * (loaded once) with those early exits on its context (mor_router_set_exit):
 * full depth and exits side by side. */
static int bench_exit_mode = MOR_EXIT_NONE;
static float bench_exit_threshold;

static const char *files_label(int k)
{
    return k == 0 ? "unfolded" : bench_exit_mode != MOR_EXIT_NONE ? "exit" : "folded";
}

/* --depth must leave room for a test's tokens after it within the model's
 * training context (the context's max_pos: positions past it fail). 0, or 1 (said). */
static int depth_fits(const char *name, const mor_model *m, int np, int ng)
{
    const int need = kv_depth + (np > ng ? np : ng);
    if (!kv_depth || need <= mor_model_n_ctx_train(m)) return 0;
    cli_error("--depth %d and the %d test tokens after it (the larger of -p %d and -n %d) need a context of %d, "
              "past %s's training context of %d", kv_depth, need - kv_depth, np, ng, need, name, mor_model_n_ctx_train(m));
    return 1;
}

/* The lines printed after the table: each file's loads (wall seconds of mor_model_load_file). */
static char load_log[4096];

static void log_load(const char *path, const variant var[2], const double sec[2])
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const size_t n = strlen(load_log);
    if (var[1].m != var[0].m)
        snprintf(load_log + n, sizeof load_log - n, "# load: %s: 2 loads, unfolded %.3f s, folded %.3f s\n",
                 base, sec[0], sec[1]);
    else
        snprintf(load_log + n, sizeof load_log - n, "# load: %s: 1 load, %.3f s (%s)\n", base, sec[0],
                 bench_exit_mode != MOR_EXIT_NONE ? "the exit rows are the same model"
                                                  : "no LoRA deltas: the folded rows are the same model");
}

static int files_load(const char *path, variant var[2], int np, int ng)
{
    memset(var, 0, 2 * sizeof *var);
    double sec[2] = { 0, 0 };
    for (int k = 0; k < 2; k++) {
        if (k == 1 && (bench_exit_mode != MOR_EXIT_NONE || !var[0].m->lora)) { var[1].m = var[0].m; break; }
        mor_model_params mp;
        MOR_MODEL_PARAMS_INIT(&mp);
        mp.flags = MOR_MODEL_NO_MMAP | (k ? MOR_MODEL_FOLD_LORA : 0);
        const double t0 = bench_now();
        if (mor_model_load_file(path, &mp, &var[k].m)) { fprintf(stderr, "%s: %s\n", path, mor_last_error()); return 1; }
        sec[k] = bench_now() - t0;
        if (mor_model_n_vocab(var[k].m) < 32000) make_tokens(mor_model_n_vocab(var[k].m));
    }
    log_load(path, var, sec);
    return depth_fits(path, var[0].m, np, ng);
}

static void files_free(variant var[2])
{
    if (var[1].m != var[0].m) mor_model_free(var[1].m);
    mor_model_free(var[0].m);
    var[0].m = var[1].m = NULL;
}

/* v's context for tests of np and ng tokens on nt threads: 0, or 1 (said on stderr). */
static int variant_context(variant *v, int np, int ng, int nt)
{
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = (uint32_t)(kv_depth + (np > ng ? np : ng)) + 8;
    cp.n_batch = (uint32_t)np;
    cp.n_threads = nt;
    cp.flags = fast_bf16 ? MOR_CTX_FAST_BF16 : 0;
    cp.kv_type = kv_type;
    v->nt = nt;
    v->n_batch = np;
    v->filled = 0;
    v->ok = mor_context_create(v->m, &cp, &v->c) == MOR_OK;
    if (!v->ok) fprintf(stderr, "context: %s\n", mor_last_error());
    return !v->ok;
}

/* The folded rows of a model without deltas are its unfolded rows again: they
 * share its context (so a --depth prefix is decoded once, not twice). */
static int files_shared(const variant var[2])
{
    return var[1].m == var[0].m && bench_exit_mode == MOR_EXIT_NONE;
}

static int files_contexts(variant var[2], mor_batch *b, int np, int ng, int nt, const kernel_set *ks)
{
    for (int k = 0; k < 2; k++) {
        if (k == 1 && files_shared(var)) var[1] = var[0];   /* its context, prefix and all */
        else if (variant_context(&var[k], np, ng, nt)) return 1;
        if (k == 1 && bench_exit_mode != MOR_EXIT_NONE &&
            mor_router_set_exit(mor_context_router(var[k].c), bench_exit_mode, bench_exit_threshold)) {
            fprintf(stderr, "--exit: %s\n", mor_last_error());
            return 1;
        }
        hook_context_kernels(var[k].c, ks);
        run_pp(&var[k], b, np);   /* warm-up */
        run_tg(&var[k], b, ng < 8 ? ng : 8);
        var[k].n_cpu = 0;
    }
    return 0;
}

/* The mean depth of the test just run on v (router statistics; full depth
 * for a model whose router counted nothing). */
static double files_depth(variant *v)
{
    mor_router_stats st = { .size = sizeof st };
    mor_router_get_stats(mor_context_router(v->c), &st);
    mor_router_reset_stats(mor_context_router(v->c));
    return st.n_tokens ? st.mean_depth : v->m->n_rec;
}

static void files_reps(variant var[2], mor_batch *b, int np, int ng, int reps, int nt, roof_machine *rm)
{
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < 2; k++) {
            mor_router_reset_stats(mor_context_router(var[k].c));
            var[k].pp[r] = run_pp(&var[k], b, np);
            var[k].depth_pp = files_depth(&var[k]);
            var[k].tg[r] = run_tg(&var[k], b, ng);
            var[k].depth_tg = files_depth(&var[k]);
        }
        if (rm) rm->round++;   /* the bound's probes, between the rounds */
        for (int test = 0; rm && test < 2; test++) {
            const roof_work w = test_work(var[0].m, test, test ? ng : np, var[0].m->n_rec);
            roof_sample_work(rm, nt, &w);
        }
    }
}

/* A results table's header; with --depth, a note and a last column "ctx depth" (the tokens in the
 * cache before each test, as llama-bench's "@ d"), which parsers of the columns before it ignore. */
static void table_head(const char *head, const char *rule)
{
    if (kv_depth)
        printf("\n# --depth %d: %d tokens in the KV cache before each test (decoded once per context, untimed);\n"
               "# pp and tg run at positions %d.. and attend to them\n", kv_depth, kv_depth, kv_depth);
    printf("\n%s%s\n%s%s\n", head, kv_depth ? " ctx depth |" : "", rule, kv_depth ? "---:|" : "");
}

/* The end of a table row (and its --depth column). */
static void row_end(void)
{
    if (kv_depth) printf(" %d |", kv_depth);
    printf("\n");
}

static void files_print(const char *path, variant var[2], int np, int ng, int reps, int nt,
                        const kernel_set *ks, roof_machine *rm)
{
    const char *base = strrchr(path, '/');
    for (int k = 0; k < 2; k++)
        for (int test = 0; test < 2; test++) {
            const rep_stats rs = summarize(&var[k], test, reps);
            const double depth = test ? var[k].depth_tg : var[k].depth_pp;
            char roofs[400] = "-";
            if (rm) {
                /* the bytes of the depth the test ran (LoRA deltas not counted) */
                const mor_model *m = var[k].m;
                const roof_work w = test_work(m, test, test ? ng : np, depth);
                char what[256];
                const double bound = roof_bound(rm, nt, ks, m->layers[m->prelude].w[ROLE_FFN_UP].type, &w, what, sizeof what);
                roof_column(rs.med, bound, what, roofs, sizeof roofs);
            }
            printf("| %s | %s | %.0f | %d | %s%d | %.1f [%.1f-%.1f] | %.3f | %.0f%% | %s |", base ? base + 1 : path,
                   files_label(k), (double)mor_model_size_bytes(var[k].m) / 1e6, nt, test ? "tg" : "pp",
                   test ? ng : np, rs.med, rs.mn, rs.mx, depth, 100 * rs.busy, roofs);
            row_end();
        }
    fflush(stdout);
}

static int bench_files(const char *files, const int *threads, int n_threads, int np, int ng, int reps,
                       const kernel_set *ks, roof_machine *rm)
{
    char list[4096];
    snprintf(list, sizeof list, "%s", files);
    mor_batch *b = NULL;
    if (mor_batch_create(np > ng ? np : ng, &b)) return 1;
    make_tokens(32000);
    int rc = 0, headed = 0;
    for (char *path = strtok(list, ","); path && !rc; path = strtok(NULL, ",")) {
        variant var[2];
        if (files_load(path, var, np, ng)) { files_free(var); rc = 1; break; }
        if (!headed++)   /* after the first load: a --depth it refuses leaves no empty table */
            table_head("| model | LoRA | size MB | thr | test | tok/s median [min-max] | depth | cpu | roofline |",
                       "|---|---|---:|---:|---|---|---:|---:|---|");
        for (int ti = 0; ti < n_threads && !rc; ti++) {
            rc = files_contexts(var, b, np, ng, threads[ti], ks);
            if (!rc) files_reps(var, b, np, ng, reps, threads[ti], rm);
            if (!rc) files_print(path, var, np, ng, reps, threads[ti], ks, rm);
            if (!rc && (!var[0].ok || !var[1].ok)) rc = 1;   /* a decode failed (said) */
            if (var[1].c != var[0].c) mor_context_free(var[1].c);
            mor_context_free(var[0].c);
            var[0].c = var[1].c = NULL;
        }
        files_free(var);
    }
    mor_batch_free(b);
    if (*load_log) printf("\n%s", load_log);   /* after the table: the kit's parser reads its rows only */
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: mor-bench [-s 135m,360m,k256,tl1b] [-w f32,f16,bf16,q8_0,q4_0,...] [-t 1,2] [-a dense,dense-eq,mor]\n"
        "                 [-p 128] [-n 64] [-r 5] [--depth D] [--kv-type T] [--dir DIR] [--json FILE]\n"
        "                 [--kernels auto|ref|avx2|avx512|amx|neon] [--no-probe] [--quick]\n"
        "       mor-bench --model FILE[,FILE...] [--exit MODE:T] [-t 1,2] [-p 128] [-n 64] [-r 5] [--depth D] [--kv-type T] [--kernels K]\n"
        "                 [--fast-bf16] [--no-probe]\n"
        "       mor-bench --serve [serving options: mor-bench --serve --help]\n"
        "       mor-bench --grammar [--vocab FILE,...] [--tokens N] [--reps N]: what a grammar costs per token\n"
        "       mor-bench --stream [-w TYPES] [-t 2] [-r 32] [--mib 512]: the matrix-vector products' read\n"
        "                 rate as a share of the bandwidth probe's, in pairs at the same moment\n"
        "       mor-bench --speculate [--model FILE,...] [--synth FILE | --no-synth] [--drafts 1,2,3,4,6,8]\n"
        "                 [--depths 1,2] [--prompts 20] [--tokens 200] [--rounds 3] [-t 2]: self-speculative\n"
        "                 decoding beside plain decoding (bench_speculate.h)\n"
        "  -s LIST        model shapes (SmolLM-135M, -360M; k256: the anchor kit's 768-wide Llama; tl1b:\n"
        "                 TinyLlama-1.1B's, MoR 1 + 3 x 7 + 1) of random-weight models written to --dir\n"
        "  -w LIST        weight types          -t LIST   thread counts (each 1..64)\n"
        "                 (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k; the k-quants'\n"
        "                 matrices with rows of 576 in llama-quantize's fallback type, as in its files;\n"
        "                 q4_k_m q5_k_m: its mixes, attn_v and ffn_down Q6_K in a third of the layers)\n"
        "  -a LIST        dense (Llama), dense-eq (the MoR's unrolled depth), mor (N_r = 3)\n"
        "  -p N           prompt tokens (pp)    -n N      generated tokens (tg); p + n <= 2048\n"
        "  -r N           repetitions (1..64), measured interleaved across variants\n"
        "  --depth D      D tokens already in the KV cache before each pp and tg test (llama-bench -d D):\n"
        "                 decoded once per context, untimed; the tests then run at positions D.. (D plus\n"
        "                 the larger of -p and -n must fit the model's training context); a last table\n"
        "                 column says the depth\n"
        "  --kv-type T    f32 (default), f16, q8_0: how the cache stores keys and values (llama-bench -ctk/-ctv)\n"
        "  --dir DIR      where the model files are written (default build/bench)\n"
        "  --json FILE    the results as JSON too\n"
        "  --kernels K    a kernel set instead of the best this CPU has\n"
        "  --fast-bf16    contexts with MOR_CTX_FAST_BF16 (BF16 weights on bfloat16-rounded activations)\n"
        "  --no-probe     skip the machine probes (read bandwidth at each test's working set, peaks of the\n"
        "                 units the kernels use): no roofline column\n"
        "  --quick        -r 2 -p 32 -n 8\n"
        "  --model FILES  models from files (LoRA deltas: each loaded unfolded and folded; a model\n"
        "                 without deltas is loaded once, its folded rows the same model and context); the load\n"
        "                 times (wall seconds) are printed after the table\n"
        "  --exit MODE:T  with --model: the second row is the same model with early exits\n"
        "                 (learned:Q, margin:T, saturation:T; as mor-run's) instead of folded\n"
        "  --serve        serving throughput four ways (serial, lockstep, sequence, depth-wise;\n"
        "                 docs/BATCHING.md); the same as bin/mor-bench-serve\n"
        "  -h, --help\n");
}

int main(int argc, char **argv)
{
    const char *shape_list = "135m", *type_list = "f32,f16,bf16,q8_0,q4_0", *thread_list = "1,2";
    const char *arch_list = "dense,dense-eq,mor", *dir = "build/bench", *json = NULL, *kern = "auto", *files = NULL;
    int np = 128, ng = 64, reps = 5, do_probe = 1;
    /* bin/mor-bench-serve is a link to this program: the same as --serve */
    const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (!strcmp(base, "mor-bench-serve")) { cli_init("mor-bench-serve"); return bench_serve_main(argc, argv); }
    cli_init(argc > 1 && !strcmp(argv[1], "--serve") ? "mor-bench --serve" : "mor-bench");
    if (argc > 1 && !strcmp(argv[1], "--serve")) return bench_serve_main(argc - 1, argv + 1);   /* bench_serve.h */
    if (argc > 1 && !strcmp(argv[1], "--grammar")) return bench_grammar_main(argc - 1, argv + 1);   /* bench_grammar.h */
    if (argc > 1 && !strcmp(argv[1], "--stream")) return bench_stream_main(argc - 1, argv + 1);   /* bench_stream.h */
    if (argc > 1 && !strcmp(argv[1], "--speculate")) {   /* bench_speculate.h */
        char synth[1100];
        int own = 1;
        for (int i = 2; i < argc; i++) own &= strcmp(argv[i], "--synth") && strcmp(argv[i], "--no-synth");
        mkdir("build", 0755);
        mkdir("build/bench", 0755);
        if (own && model_path("build/bench", &shapes[0], ARCH_MOR, 0, synth, sizeof synth)) return 1;
        return bench_speculate_main(argc - 1, argv + 1, own ? synth : NULL);
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-s")) shape_list = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-w")) type_list = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-t")) thread_list = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-a")) arch_list = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-p")) np = (int)cli_int(a, cli_value(argc, argv, &i), 1, 2047);
        else if (!strcmp(a, "-n")) ng = (int)cli_int(a, cli_value(argc, argv, &i), 1, 2047);
        else if (!strcmp(a, "-r")) reps = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--depth")) kv_depth = (int)cli_int(a, cli_value(argc, argv, &i), 0, 1 << 24);
        else if (!strcmp(a, "--kv-type")) {
            static const char *const kv_types[] = { "f32", "f16", "q8_0", NULL };
            static const int values[] = { MOR_KV_TYPE_F32, MOR_KV_TYPE_F16, MOR_KV_TYPE_Q8_0 };
            kv_type = values[cli_choice(a, cli_value(argc, argv, &i), kv_types)];
        }
        else if (!strcmp(a, "--dir")) dir = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--json")) json = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--kernels")) kern = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--no-probe")) do_probe = 0;
        else if (!strcmp(a, "--fast-bf16")) fast_bf16 = 1;
        else if (!strcmp(a, "--model")) files = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--exit")) cli_exit(a, cli_value(argc, argv, &i), &bench_exit_mode, &bench_exit_threshold);
        else if (!strcmp(a, "--quick")) { reps = 2; np = 32; ng = 8; }
        else if (!strcmp(a, "--serve")) cli_usage_error("--serve must come first (mor-bench --serve ...)");
        else cli_usage_error("unknown option '%s'", a);
    }
    if (np + ng > 2048) cli_usage_error("-p %d and -n %d: at most 2048 tokens together", np, ng);
    /* the models it writes are trained for 2048 positions (model_path): refused before writing any */
    if (!files && kv_depth + (np > ng ? np : ng) > 2048)
        cli_usage_error("--depth %d and -p %d / -n %d: past the 2048 positions of the models it writes", kv_depth, np, ng);
    /* every name of a list must be known: a typo would silently measure nothing */
    static const char *const shape_names[] = { "135m", "360m", "k256", "tl1b", NULL };
    static const char *const type_names[] = { "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k",
                                              "q3_k", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m", NULL };
    static const char *const arch_choice[] = { "dense", "dense-eq", "mor", NULL };
    const char *const lists[3][2] = { { "-s", shape_list }, { "-w", type_list }, { "-a", arch_list } };
    const char *const *names[3] = { shape_names, type_names, arch_choice };
    for (int l = 0; l < 3; l++) bench_choice_list(lists[l][0], lists[l][1], names[l], NULL, 0);
    const kernel_set *ks = bench_kernels(kern);
    if (!ks) return 1;
    if (fast_bf16) ks = kernels_fast_bf16(ks);   /* what MOR_CTX_FAST_BF16 picks (the contexts set it too) */
    int threads[8], n_threads = cli_int_list("-t", thread_list, threads, 8, 1, 64);
    printf("# libmor %s, kernels %s, %s\n", mor_version_string(), ks->name, mor_build_info());
    /* the machine's limits (roofline.h), probed when first needed */
    static roof_machine machine;
    machine.reps = 5;
    roof_machine *rm = do_probe ? &machine : NULL;
    if (rm) {
        for (int i = 0; i < n_threads; i++) roof_print_units(rm, threads[i]);
        printf("# read bandwidth: probed at each test's working set (2 MiB pages), %d times before the tests and\n"
               "# once more after each round of them; the bound takes the best probe, and the roofline column\n"
               "# gives the median tok/s as a fraction of it, what bounds it, and the probes' spread [min-max, count]\n"
               "# (a test faster than every probe is its own bound: 100%%)\n", rm->reps);
    }
    if (files) return bench_files(files, threads, n_threads, np, ng, reps, ks, rm);
    mkdir("build", 0755);
    mkdir(dir, 0755);
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (json && !jf) { fprintf(stderr, "cannot write %s\n", json); return 1; }
    if (jf) fprintf(jf, "[\n");
    int first_json = 1;
    printf("\n(cpu: this process's CPU time / (wall time x threads), median over reps; well below 100%%\n"
           " means the threads waited, for each other or for other processes on the machine)\n");
    table_head("| model | arch | layers | routing | type | thr | test | tok/s median [min-max] | depth | cpu | roofline |",
               "|---|---|---:|---|---|---:|---|---|---:|---:|---|");
    mor_batch *b = NULL;
    mor_batch_create(np > ng ? np : ng, &b);

    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (!strstr(shape_list, shapes[si].name)) continue;
        const shape *sh = &shapes[si];
        make_tokens(sh->V);
        for (size_t ti = 0; ti < sizeof wtypes / sizeof *wtypes; ti++) {
            char want[32];
            snprintf(want, sizeof want, ",%s,", wtypes[ti].name);
            char list[256];
            snprintf(list, sizeof list, ",%s,", type_list);
            if (!strstr(list, want)) continue;
            /* load the variants' models */
            variant var[4];
            int nv = 0;
            mor_model *models[N_ARCH] = { 0 };
            for (int a = 0; a < N_ARCH; a++) {
                snprintf(list, sizeof list, ",%s,", arch_list);
                snprintf(want, sizeof want, ",%s,", arch_names[a]);
                if (!strstr(list, want)) continue;
                if (a == ARCH_DENSE_EQ && sh->L_mor == sh->L) continue;   /* same as dense */
                char path[1024];
                if (model_path(dir, sh, a, (int)ti, path, sizeof path)) return 1;
                /* read into memory (2 MiB pages, model.c) rather than mmap'd: a
                 * mapping of the page cache gets 2 MiB pages only where the
                 * cache happens to hold the file in 2 MiB folios, which varies
                 * from run to run; see docs/PERFORMANCE.md. MOR_BENCH_MMAP=1 in
                 * the environment measures the mmap'd load instead. */
                mor_model_params mp;
                MOR_MODEL_PARAMS_INIT(&mp);
                const char *mm = getenv("MOR_BENCH_MMAP");
                mp.flags = mm && *mm == '1' ? 0 : MOR_MODEL_NO_MMAP;
                if (mor_model_load_file(path, &mp, &models[a])) { fprintf(stderr, "%s: %s\n", path, mor_last_error()); return 1; }
                if (depth_fits(path, models[a], np, ng)) return 1;
                if (a == ARCH_MOR) {
                    var[nv++] = (variant){ .arch = a, .routing = 1, .m = models[a] };
                    var[nv++] = (variant){ .arch = a, .routing = 2, .m = models[a] };
                } else {
                    var[nv++] = (variant){ .arch = a, .routing = 0, .m = models[a] };
                }
            }
            for (int ti2 = 0; ti2 < n_threads; ti2++) {
                const int nt = threads[ti2];
                for (int k = 0; k < nv; k++) {
                    if (variant_context(&var[k], np, ng, nt)) return 1;
                    hook_context_kernels(var[k].c, ks);
                    if (var[k].routing == 1) mor_router_set_mode(mor_context_router(var[k].c), MOR_ROUTE_FORCED, 3);
                    if (var[k].routing == 2) {
                        calibrate_n(&var[k], b, pp_tok, np, &var[k].thr[0], &var[k].thr[1]);
                        calibrate_n(&var[k], b, tg_tok, ng, &var[k].thr[2], &var[k].thr[3]);
                        set_thresholds(&var[k], var[k].thr[0], var[k].thr[1]);
                    }
                    run_pp(&var[k], b, np);   /* warm-up: page in the weights */
                    run_tg(&var[k], b, ng < 8 ? ng : 8);
                }
                for (int k = 0; k < nv; k++) var[k].n_cpu = 0;
                for (int r = 0; r < reps; r++) {   /* interleaved: rep r of every variant in turn */
                    for (int k = 0; k < nv; k++) {
                        mor_router *rt = mor_context_router(var[k].c);
                        mor_router_stats st = { .size = sizeof st };
                        mor_router_reset_stats(rt);
                        if (var[k].routing == 2) set_thresholds(&var[k], var[k].thr[0], var[k].thr[1]);
                        var[k].pp[r] = run_pp(&var[k], b, np);
                        mor_router_get_stats(rt, &st);
                        var[k].depth_pp = st.mean_depth;
                        mor_router_reset_stats(rt);
                        if (var[k].routing == 2) set_thresholds(&var[k], var[k].thr[2], var[k].thr[3]);
                        var[k].tg[r] = run_tg(&var[k], b, ng);
                        mor_router_get_stats(rt, &st);
                        var[k].depth_tg = st.mean_depth;
                    }
                    if (rm) rm->round++;   /* the bounds' probes, between the rounds: once per size */
                    for (int k = 0; rm && k < nv; k++)
                        for (int test = 0; test < 2; test++) {
                            const roof_work w = test_work(var[k].m, test, test == 0 ? np : ng, variant_depth(&var[k], test));
                            roof_sample_work(rm, nt, &w);
                        }
                }
                for (int k = 0; k < nv; k++) {
                    variant *v = &var[k];
                    const mor_model *m = v->m;
                    for (int test = 0; test < 2; test++) {
                        const rep_stats rs = summarize(v, test, reps);
                        const double med = rs.med;
                        const double depth = variant_depth(v, test);
                        const int ntok = test == 0 ? np : ng;
                        const roof_work w = test_work(m, test, ntok, depth);
                        double roof = 0, bound = 0;
                        char roofs[400] = "-", what[256];
                        if (rm && (bound = roof_bound(rm, nt, ks, wtypes[ti].type, &w, what, sizeof what)) > 0) {
                            roof = roof_column(med, bound, what, roofs, sizeof roofs);
                            if (med > bound) bound = med;
                        }
                        char name[16];
                        snprintf(name, sizeof name, "%s%d", test == 0 ? "pp" : "tg", ntok);
                        printf("| %s | %s | %d | %s | %s | %d | %s | %.1f [%.1f-%.1f] | %.2f | %.0f%% | %s |", sh->name,
                               arch_names[v->arch], m->n_layer, routing_name(v->routing), wtypes[ti].name, nt, name,
                               med, rs.mn, rs.mx, depth, 100 * rs.busy, roofs);
                        row_end();
                        if (jf) {
                            fprintf(jf, "%s  {\"model\": \"%s\", \"arch\": \"%s\", \"layers\": %d, \"routing\": \"%s\", "
                                        "\"type\": \"%s\", \"threads\": %d, \"kernels\": \"%s\", \"test\": \"%s\", "
                                        "\"tok_s\": %.3f, \"tok_s_min\": %.3f, \"tok_s_max\": %.3f, \"reps\": %d, "
                                        "\"mean_depth\": %.4f, \"cpu\": %.3f, \"roofline_fraction\": %.4f, \"bound_tok_s\": %.2f, "
                                        "\"bound\": \"%s\"",
                                    first_json ? "" : ",\n", sh->name, arch_names[v->arch], m->n_layer,
                                    routing_name(v->routing), wtypes[ti].name, nt, ks->name, name, med, rs.mn, rs.mx, reps,
                                    depth, rs.busy, roof, bound, bound > 0 ? what : "-");
                            if (kv_depth) fprintf(jf, ", \"n_depth\": %d", kv_depth);   /* llama-bench's name */
                            fprintf(jf, "}");
                            first_json = 0;
                        }
                    }
                    fflush(stdout);
                }
                for (int k = 0; k < nv; k++) { mor_context_free(var[k].c); var[k].c = NULL; }
            }
            for (int a = 0; a < N_ARCH; a++) mor_model_free(models[a]);
        }
    }
    mor_batch_free(b);
    if (jf) { fprintf(jf, "\n]\n"); fclose(jf); }
    return 0;
}
