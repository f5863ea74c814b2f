/* bench_serve.h - `mor-bench --serve`: serving throughput of one model, the
 * same requests served several ways in one run (docs/BATCHING.md):
 *   (a)  SERIAL: one request after another;
 *   (b)  continuous sequence-level batching as an engine that knows nothing
 *        of MoR does it (Orca/vLLM): each step one token of every running
 *        request through every recursion in lockstep; the rows the router
 *        dropped are computed and thrown away (serve.h: serve_set_lockstep);
 *   (b') libmor's own sequence-level batching (MOR_SERVE_SEQUENCE): the same
 *        steps, but the rows the router dropped are skipped;
 *   (c)  continuous depth-wise batching (MOR_SERVE_DEPTHWISE) with the
 *        router's exits;
 *   (d)  (not in the default --ways) the vanilla dense model of the MoR's
 *        unrolled depth (every layer its own weights, no router) served as
 *        (b'): the baseline of the MoR paper's throughput figure.
 * The model is a random-weight MoR that the benchmark writes itself
 * (bench_models.h; reused when the file exists), of the shape --shape:
 *   135m  SmolLM-135M (hidden 576, heads 9/3, head_dim 64, ffn 1536, vocab 49152), 1 + 3 x 9 + 1 = 29 layers;
 *   360m  SmolLM-360M (960, 15/5, 64, 2560, 49152), 1 + 3 x 10 + 1 = 32;
 *   tl1b  TinyLlama-1.1B (2048, 32/4, 64, 5632, 32000), 1 + 3 x 7 + 1 = 23 (--nr 4: 1 + 4 x 5 + 1 = 22);
 * middle-cycle: the dense shape's first and last layers unique, its L - 2 middle layers replaced by a block
 * of K = (L - 2) / N_r layers, rounded to the nearest, so that the unrolled depth stays near L. --lora R
 * makes it relaxed: each unrolled layer of the block gets random LoRA deltas of rank R (each projection's
 * rank at most min(in, out)), about a tenth of the shared weight's product. THRESHOLD routing, thresholds
 * calibrated on the benchmark's own requests so that the mean depth is near --depth (default 2). Every MoR
 * way must give the same tokens and depths, and (d) every token (checked); tok/s is the median over --reps
 * runs. The MB column: bytes of weight matrices and LoRA factors each way's matmuls were given in its run
 * (counted by the context, hooks.h: a pass over many rows counts its weights once; prompts included) per
 * generated token.
 *
 *   mor-bench --serve [--shape 135m|360m|tl1b] [--nr 3] [--type f32|f16|q8_0|q4_k_m] [--lora R]
 *                     [--threads 2] [--conc 8,32,64] [--requests 2] [--gen 32] [--prompt 4] [--reps 3]
 *                     [--ways a,b,b2,c,d,cN...] [--depth 2 | --thr T1,T2] [--dir build/bench]
 * --requests R: R x conc requests, served conc at a time (slots refilled).
 * cN: (c) finishing exited tokens only every N steps (serve_set_finish_every);
 * cd: (c) running all recursions in one step when no request is queued (serve_set_drain).
 *
 * Header-only (static functions), included by mor-bench.c (bin/mor-bench-serve is a link to it). */
#ifndef MOR_BENCH_SERVE_H
#define MOR_BENCH_SERVE_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include "mor.h"
#include "internal.h"
#include "cli.h"
#include "bench_util.h"
#include "bench_models.h"

/* ways BS_D + 1 ...: (c) finishing every N steps, or draining */
enum { BS_A, BS_B, BS_B2, BS_C, BS_D, BS_N = 13 };
static const char *const bs_way_name[BS_D + 1] = { "a", "b", "b2", "c", "d" };
static int bs_depthwise(int w) { return w == BS_C || w > BS_D; }

typedef struct { double tps, depth, secs, cpu, bytes; long tokens; uint64_t hash; int ok; } bs_result;

/* The command line. */
typedef struct {
    int threads, gen, prompt, reps, rps, n_rec, lora, ti, nc, n_way, thr_given;
    int concs[16], use[BS_N], fin[BS_N];
    double depth;
    float thr[MOR_MAX_RECURSIONS];
    const char *dir, *ways;
    const shape *sh;
} bs_opts;

/* User CPU seconds of the whole process (every thread): less disturbed than
 * wall time by other jobs on the machine, though it counts spinning too. */
static double bs_cpu(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec;
}

static int bs_cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Request i's prompt: fixed pseudo-random ids. */
static void bs_prompt(int i, int n, int32_t V, mor_token *out)
{
    for (int t = 0; t < n; t++) out[t] = (mor_token)(((long)i * 7919 + (long)t * 104729 + 11) % V);
}

static void bs_thresholds(mor_router *r, int32_t n_rec, const float *thr)
{
    mor_router_set_mode(r, MOR_ROUTE_THRESHOLD, 0);
    for (int32_t k = 1; k < n_rec; k++) mor_router_set_threshold(r, k, thr[k]);
}

/* Router scores of recursions 1.. of the first ns requests, prompt and greedy generation under forced full
 * depth, one sequence-level batch per token: s[k][i] of the i-th of *n rows. */
static int bs_scores(mor_model *m, int ns, int prompt, int gen, int threads, float *const *s, int *n)
{
    const int32_t V = mor_model_n_vocab(m), R = mor_model_n_recursion(m);
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = (uint32_t)(ns * (prompt + gen)) + 8; cp.n_batch = (uint32_t)(ns * prompt + 8); cp.n_seq_max = (uint32_t)ns;
    cp.n_threads = threads;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    int ok = !mor_context_create(m, &cp, &c) && !mor_batch_create((int32_t)cp.n_batch, &b);
    mor_token last[32], pr[64];
    if (ok) mor_router_set_mode(mor_context_router(c), MOR_ROUTE_FORCED, R);
    for (int t = 0; ok && t < gen; t++) {
        mor_batch_clear(b);
        for (int i = 0; i < ns; i++) {
            if (t == 0) {
                bs_prompt(i, prompt, V, pr);
                for (int k = 0; k < prompt; k++) mor_batch_add(b, pr[k], k, i, k == prompt - 1);
            } else {
                mor_batch_add(b, last[i], prompt + t - 1, i, 1);
            }
        }
        if (mor_decode(c, b)) { ok = 0; break; }
        for (int32_t row = 0; row < mor_batch_size(b); row++) {
            float sc[MOR_MAX_RECURSIONS] = { 0 };
            mor_router_get_scores(mor_context_router(c), row, sc, R);
            for (int32_t k = 1; k < R; k++) s[k][*n] = sc[k];
            (*n)++;
        }
        for (int i = 0; i < ns; i++) {   /* greedy: the first maximum */
            const float *lg = mor_get_logits(c, t == 0 ? (i + 1) * prompt - 1 : i);
            int32_t best = 0;
            for (int32_t v = 1; v < V; v++) if (lg[v] > lg[best]) best = v;
            last[i] = best;
        }
    }
    mor_batch_free(b);
    mor_context_free(c);
    return ok;
}

/* p1, the share of tokens past recursion 1, for a mean depth 1 + p1 + p1 p2 + p1 p2 p3 ... with
 * p_k = p_(k-1) / 2 (at N_r = 3, p1 + p1^2 / 2 = depth - 1, as top-k capacities of 2/3 and 1/3 would give
 * at depth 2); by bisection beyond N_r = 3. */
static double bs_p1(double depth, int32_t R)
{
    const double e = depth - 1;
    if (R == 3) return e <= 0 ? 0 : e >= 1.5 ? 1 : -1 + sqrt(1 + 2 * e);
    double lo = 0, hi = 1;
    for (int it = 0; it < 60; it++) {
        double p = 0.5 * (lo + hi), term = 1, f = 0;
        for (int32_t k = 1; k < R; k++) { term *= k == 1 ? p : p / (double)(1 << (k - 1)); f += term; }
        if (f < e) lo = p; else hi = p;
    }
    return lo;
}

/* Thresholds for a mean depth near `depth`: the router scores of the benchmark's first (up to 32) requests
 * (bs_scores). Recursion 1's threshold is the score quantile that passes p1 (bs_p1) of the tokens; each
 * deeper one the median score of the tokens past every threshold before it. The recursion-1 scores are those
 * of a THRESHOLD run (recursion 0 runs for every token); the deeper ones only approximately. */
static int bs_calibrate(mor_model *m, int n_req, int prompt, int gen, int threads, double depth, float *thr)
{
    const int32_t R = mor_model_n_recursion(m);
    const int ns = n_req < 32 ? n_req : 32, cap = ns * (prompt + gen);
    float *buf = malloc(sizeof(float) * (size_t)cap * (size_t)R), *s[MOR_MAX_RECURSIONS], *srt = buf;
    for (int32_t k = 1; k < R; k++) s[k] = buf + (size_t)k * (size_t)cap;   /* buf's first cap: sort scratch */
    int n = 0, ok = buf && bs_scores(m, ns, prompt, gen, threads, s, &n);
    if (ok && n > 0) {
        const double p1 = bs_p1(depth, R);
        memcpy(srt, s[1], sizeof(float) * (size_t)n);
        qsort(srt, (size_t)n, sizeof(float), bs_cmp_f);
        int k1 = (int)((1 - p1) * n);
        thr[1] = k1 >= n ? srt[n - 1] + 1 : srt[k1 < 0 ? 0 : k1];
        for (int32_t k = 2; k < R; k++) {
            int nk = 0;
            for (int i = 0; i < n; i++) {
                int past = 1;
                for (int32_t j = 1; j < k; j++) past &= s[j][i] >= thr[j];
                if (past) srt[nk++] = s[k][i];
            }
            qsort(srt, (size_t)nk, sizeof(float), bs_cmp_f);
            thr[k] = nk ? srt[nk / 2] : 0.5f;
        }
    }
    free(buf);
    return ok;
}

/* One way: n_req requests, all queued at once, served conc at a time (a
 * finished request's slot goes to the next in the queue). m: the MoR, or for (d) the dense model. */
static bs_result bs_run(mor_model *m, int way, int finish_every, int conc, int n_req, int gen, int prompt,
                        int threads, const float *thr)
{
    bs_result res = { 0, 0, 0, 0, 0, 0, 1469598103934665603ull, 0 };
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    p.mode = way == BS_A ? MOR_SERVE_SERIAL : bs_depthwise(way) ? MOR_SERVE_DEPTHWISE : MOR_SERVE_SEQUENCE;
    p.n_slots = (uint32_t)conc; p.n_threads = threads;
    p.n_ctx = (uint32_t)(conc * (prompt + gen) + 16); p.n_batch = (uint32_t)(conc * prompt + 64);
    mor_server *s = NULL;
    if (mor_server_create(m, &p, &s)) { fprintf(stderr, "server: %s\n", mor_last_error()); return res; }
    if (way != BS_D) bs_thresholds(mor_server_router(s), mor_model_n_recursion(m), thr);
    if (way == BS_B) serve_set_lockstep(s, 1);
    if (bs_depthwise(way) && finish_every > 1) serve_set_finish_every(s, finish_every);
    if (bs_depthwise(way) && finish_every < 0) serve_set_drain(s, 1);
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);
    sp.temperature = 0;
    mor_request_id *ids = malloc(sizeof *ids * (size_t)n_req);
    mor_token pr[64];
    int ok = ids != NULL;
    for (int i = 0; ok && i < n_req; i++) {
        bs_prompt(i, prompt, mor_model_n_vocab(m), pr);
        ok = mor_server_submit(s, pr, prompt, &sp, gen, NULL, 0, &ids[i]) == MOR_OK;
    }
    double t0 = bench_now(), c0 = bs_cpu();
    if (ok && mor_server_run(s)) { fprintf(stderr, "run: %s\n", mor_last_error()); ok = 0; }
    res.secs = bench_now() - t0;
    res.cpu = bs_cpu() - c0;
    res.bytes = (double)hook_context_weight_bytes(serve_context(s));
    mor_token *out = malloc(sizeof(mor_token) * (size_t)gen);
    int32_t *dep = malloc(sizeof(int32_t) * (size_t)gen), n = 0;
    long dsum = 0;
    for (int i = 0; ok && out && dep && i < n_req; i++) {
        if (mor_server_get_tokens(s, ids[i], out, dep, gen, &n)) { ok = 0; break; }
        for (int t = 0; t < n; t++) {
            res.hash = (res.hash ^ (uint64_t)(uint32_t)out[t]) * 1099511628211ull;
            res.hash = (res.hash ^ (uint64_t)dep[t]) * 1099511628211ull;
            dsum += dep[t];
        }
        res.tokens += n;
    }
    res.ok = ok && res.tokens == (long)n_req * gen;
    res.tps = (double)res.tokens / res.secs;
    res.depth = res.tokens ? (double)dsum / (double)res.tokens : 0;
    free(out); free(dep); free(ids);
    mor_server_free(s);
    return res;
}

static void bs_usage(FILE *f)
{
    fprintf(f,
        "usage: mor-bench --serve [options]   (or mor-bench-serve [options])\n"
        "serving throughput of a random-weight MoR (SmolLM-135M's shape unless --shape), the same requests\n"
        "served four ways: (a) serial, (b) lockstep sequence batching, (b') libmor's sequence batching,\n"
        "(c) depth-wise batching (docs/BATCHING.md), and (d) the dense model of the same depth; every MoR\n"
        "way must give the same outputs; the MB column is the weights each way read per generated token\n"
        "  --shape S          135m (SmolLM-135M, default), 360m (SmolLM-360M), tl1b (TinyLlama-1.1B)\n"
        "  --nr N             recursions N_r, 2..4 (default 3): middle-cycle 1 + N x K + 1 with\n"
        "                     K = (L - 2) / N rounded (tl1b: 3 -> 23 layers, 4 -> 22)\n"
        "  --type TYPE        f32|f16|q8_0|q4_k_m weights (default f32; q4_k_m as llama-quantize's mix,\n"
        "                     rows that are not whole blocks of 256 in its fallback types)\n"
        "  --lora R           a relaxed MoR: random LoRA deltas of rank R (at most each projection's\n"
        "                     smaller side) on every unrolled layer of the shared block (default 0: none)\n"
        "  --threads N        worker threads (default 2)\n"
        "  --conc LIST        concurrent requests per run, each >= 1 (default 8,32,64)\n"
        "  --requests R       R x conc requests per run, served conc at a time (default 2)\n"
        "  --gen N            generated tokens per request, 1..4096 (default 32)\n"
        "  --prompt N         prompt tokens per request, 1..64 (default 4)\n"
        "  --reps N           runs per way, 1..64; the median is shown (default 3)\n"
        "  --ways LIST        a,b,b2,c (default), d (the dense model of the MoR's depth, served as (b')),\n"
        "                     cN ((c) finishing every N steps) or cd ((c) draining)\n"
        "  --depth D          mean depth the THRESHOLD routing is calibrated for, 1..N_r (default 2)\n"
        "  --thr T1[,T2..]    THRESHOLD thresholds of recursions 1, 2, ... instead of calibrating (the last\n"
        "                     one repeated for deeper recursions)\n"
        "  --dir DIR          where the model files are written, or found (default build/bench)\n"
        "  -h, --help\n");
}

/* --ways: comma-separated way names into o->use / o->fin; cN: (c) finishing every N steps. */
static void bs_parse_ways(bs_opts *o)
{
    o->n_way = BS_D + 1;
    for (const char *c = o->ways; ; ) {
        size_t len = strcspn(c, ",");
        char item[16];
        int known = 0;
        if (len == 0 || len >= sizeof item) cli_usage_error("--ways: bad list '%s'", o->ways);
        memcpy(item, c, len);
        item[len] = 0;
        for (int w = 0; w <= BS_D; w++)
            if (!strcmp(item, bs_way_name[w])) o->use[w] = known = 1;
        if (!known && o->n_way == BS_N) cli_usage_error("--ways: at most %d cN/cd ways", BS_N - BS_D - 1);
        if (!known && !strcmp(item, "cd")) { o->fin[o->n_way] = -1; o->use[o->n_way++] = 1; known = 1; }
        if (!known && item[0] == 'c') {
            o->fin[o->n_way] = (int)cli_int("--ways cN", item + 1, 1, 1 << 20);
            o->use[o->n_way++] = 1;
            known = 1;
        }
        if (!known) cli_usage_error("--ways: expected a, b, b2, c, d, cN or cd, got '%s'", item);
        if (!c[len]) break;
        c += len + 1;
    }
}

static void bs_parse(int argc, char **argv, bs_opts *o)
{
    static const char *const types[] = { "f32", "f16", "q8_0", "q4_k_m", NULL };
    static const char *const shape_names[] = { "135m", "360m", "tl1b", NULL };
    const char *type = "f32", *shape_name = "135m";
    *o = (bs_opts){ .threads = 2, .gen = 32, .prompt = 4, .reps = 3, .rps = 2, .n_rec = 3, .nc = 3,
                    .concs = { 8, 32, 64 }, .depth = 2.0, .dir = "build/bench", .ways = "a,b,b2,c" };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--serve")) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { bs_usage(stdout); exit(0); }
        else if (!strcmp(a, "--threads")) o->threads = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--conc")) o->nc = cli_int_list(a, cli_value(argc, argv, &i), o->concs, 16, 1, 4096);
        else if (!strcmp(a, "--gen")) o->gen = (int)cli_int(a, cli_value(argc, argv, &i), 1, 4096);
        else if (!strcmp(a, "--prompt")) o->prompt = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--reps")) o->reps = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--requests")) o->rps = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--depth")) o->depth = cli_double(a, cli_value(argc, argv, &i), 1, 4, 0);
        else if (!strcmp(a, "--thr")) {
            float t[MOR_MAX_RECURSIONS - 1];
            int n = cli_float_list(a, cli_value(argc, argv, &i), t, MOR_MAX_RECURSIONS - 1, -1e30, 1e30);
            o->thr_given = 1;
            for (int k = 1; k < MOR_MAX_RECURSIONS; k++) o->thr[k] = t[k <= n ? k - 1 : n - 1];
        }
        else if (!strcmp(a, "--ways")) o->ways = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--type")) type = types[cli_choice(a, cli_value(argc, argv, &i), types)];
        else if (!strcmp(a, "--shape")) shape_name = shape_names[cli_choice(a, cli_value(argc, argv, &i), shape_names)];
        else if (!strcmp(a, "--nr")) o->n_rec = (int)cli_int(a, cli_value(argc, argv, &i), 2, 4);
        else if (!strcmp(a, "--lora")) o->lora = (int)cli_int(a, cli_value(argc, argv, &i), 0, 4096);
        else if (!strcmp(a, "--dir")) o->dir = cli_value(argc, argv, &i);
        else cli_usage_error("unknown option '%s'", a);
    }
    if (o->depth > o->n_rec) cli_usage_error("--depth %g: at most N_r = %d", o->depth, o->n_rec);
    bs_parse_ways(o);
    o->ti = bench_wtype(type);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (!strcmp(shapes[i].name, shape_name)) o->sh = &shapes[i];
}

/* The MoR (*m) and, when (d) runs, the dense model of its depth (*md): their files written when missing. */
static int bs_models(const bs_opts *o, mor_model **m, mor_model **md)
{
    const shape *sh = o->sh;
    const int32_t K = (sh->L - 2 + o->n_rec / 2) / o->n_rec, L = 2 + o->n_rec * K;
    char path[1024];
    mkdir(o->dir, 0777);
    if (bench_model_file(o->dir, sh, L, o->n_rec, o->ti, o->lora, path, sizeof path)) return 1;
    if (mor_model_load_file(path, NULL, m)) { fprintf(stderr, "load %s: %s\n", path, mor_last_error()); return 1; }
    if (!o->use[BS_D]) return 0;
    if (bench_model_file(o->dir, sh, L, 1, o->ti, 0, path, sizeof path)) return 1;
    if (mor_model_load_file(path, NULL, md)) { fprintf(stderr, "load %s: %s\n", path, mor_last_error()); return 1; }
    return 0;
}

static double bs_layer_mb(const mor_model *m, int32_t l)
{
    double b = 0;
    for (int r = 0; r < ROLE_ALL; r++) {
        const tensor *w = &m->layers[l].w[r];
        if (w->data) b += (double)tensor_row_bytes(w->type, w->cols) * (double)w->rows;
    }
    return b / 1e6;
}

/* "# model: ..." after the header: the layers, the matrices' stored types, and what one pass reads. */
static void bs_print_model(const mor_model *m, const mor_model *md)
{
    double once = bs_layer_mb(m, 0) + bs_layer_mb(m, m->n_layer - 1), block = 0, lora = 0, dense = 0;
    for (int32_t j = 0; j < m->base_depth; j++) block += bs_layer_mb(m, model_layer_of(m, 0, j));
    char types[256] = "";
    int count[GGML_BF16 + 1] = { 0 };
    for (uint64_t i = 0; m->gguf && i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        if (t->name.n > 5 && !memcmp(t->name.p, "lora.", 5)) lora += (double)t->nbytes / 1e6 / m->n_rec;
        else if (t->n_dims == 2 && t->type <= GGML_BF16 && (t->name.n < 3 || memcmp(t->name.p, "rtr", 3))) count[t->type]++;
    }
    for (int t = 0; t <= GGML_BF16; t++)
        if (count[t]) {
            const size_t n = strlen(types);
            snprintf(types + n, sizeof types - n, "%s%d %s", n ? ", " : "", count[t], tensor_type_name((uint32_t)t));
        }
    for (int32_t l = 0; md && l < md->n_layer; l++) dense += bs_layer_mb(md, l);
    const double out = (double)tensor_row_bytes(m->output.type, m->output.cols) * (double)m->output.rows / 1e6;
    printf("# model: 1 + %d x %d + 1 = %d layers; matrices: %s; MB per pass: first and last layers %.1f, shared "
           "block %.1f (x N_r)", m->n_rec, m->base_depth, m->n_layer, types, once, block);
    if (lora > 0) printf(", LoRA deltas %.1f per recursion", lora);
    printf(", output matrix %.1f", out);
    if (md) printf("; (d) dense model: %d layers %.1f", md->n_layer, dense);
    printf("\n");
}

/* A way's name in the log and the MB column: a, b, b2, c, d, cN, cd. */
static const char *bs_label(const bs_opts *o, int w, char *buf, size_t cap)
{
    if (w <= BS_D) return bs_way_name[w];
    if (o->fin[w] < 0) snprintf(buf, cap, "cd");
    else snprintf(buf, cap, "c%d", o->fin[w]);
    return buf;
}

/* Its title in the MB column: (a), (b), (b'), (c), (c) every N, (c) + drain, (d). */
static const char *bs_title(const bs_opts *o, int w, char *buf, size_t cap)
{
    static const char *const t[BS_D + 1] = { "(a)", "(b)", "(b')", "(c)", "(d)" };
    if (w <= BS_D) return t[w];
    if (o->fin[w] < 0) snprintf(buf, cap, "(c) + drain");
    else snprintf(buf, cap, "(c) every %d", o->fin[w]);
    return buf;
}

/* The way of the i-th column, in the tok/s columns' order: a, b, b2, c, the cN ways, d. */
static int bs_column(const bs_opts *o, int i) { return i < BS_D ? i : i < o->n_way - 1 ? i + 1 : BS_D; }

static void bs_print_head(const bs_opts *o, const float *thr, int32_t R)
{
    static const char *const titles[][2] = { { "360m", "SmolLM-360M" }, { "tl1b", "TinyLlama-1.1B" } };
    const char *title = "SmolLM-135M";
    char ts[160] = "", lora[32] = "";
    for (size_t i = 0; i < sizeof titles / sizeof *titles; i++) if (!strcmp(o->sh->name, titles[i][0])) title = titles[i][1];
    for (int32_t k = 1; k < R; k++) snprintf(ts + strlen(ts), sizeof ts - strlen(ts), "%s%.4f", k > 1 ? " / " : "", (double)thr[k]);
    if (o->lora > 0) snprintf(lora, sizeof lora, ", LoRA rank %d", o->lora);
    printf("# %s, %s-shaped MoR (middle-cycle, N_r = %d%s), %s weights, %d threads, prompt %d, %d generated "
           "tokens per request, %d x concurrent requests, THRESHOLD %s (%s mean depth %.2f), median of %d "
           "reps ((a): 1 rep when long)\n", mor_build_info(), title, R, lora, wtypes[o->ti].name, o->threads, o->prompt,
           o->gen, o->rps, ts, o->thr_given ? "given; not calibrated for" : "calibrated for", o->depth, o->reps);
}

static void bs_print_table_head(const bs_opts *o)
{
    char lb[32];
    printf("| concurrent | (a) serial tok/s | (b) lockstep seq. tok/s | (b') libmor seq. tok/s | (c) depth-wise tok/s ");
    for (int w = BS_D + 1; w < o->n_way; w++)
        if (o->fin[w] < 0) printf("| (c) + drain tok/s ");
        else printf("| (c) finish every %d tok/s ", o->fin[w]);
    if (o->use[BS_D]) printf("| (d) dense seq. tok/s ");
    printf("| (c)/(a) | (c)/(b) | (c)/(b') ");
    if (o->use[BS_D]) printf("| (c)/(d) ");
    printf("| weights read per token, MB (counted):");
    for (int i = 0, first = 1; i < o->n_way; i++) {
        const int w = bs_column(o, i);
        if (o->use[w]) { printf("%s %s", first ? "" : " /", bs_title(o, w, lb, sizeof lb)); first = 0; }
    }
    printf(" | mean depth | same outputs |\n|---:|---:|---:|---:|---:|");
    for (int w = BS_D + 1; w < o->n_way; w++) printf("---:|");
    if (o->use[BS_D]) printf("---:|---:|");
    printf("---:|---:|---:|---:|---:|:---:|\n");
}

static void bs_print_row(const bs_opts *o, int conc, const double *med, const double *mb, double dep, int same)
{
#define BS_R(x, y) (med[x] > 0 && med[y] > 0 ? med[x] / med[y] : 0)
    printf("| %d | %.1f | %.1f | %.1f | %.1f ", conc, med[BS_A], med[BS_B], med[BS_B2], med[BS_C]);
    for (int w = BS_D + 1; w < o->n_way; w++) printf("| %.1f ", med[w]);
    if (o->use[BS_D]) printf("| %.1f ", med[BS_D]);
    printf("| %.2f | %.2f | %.2f ", BS_R(BS_C, BS_A), BS_R(BS_C, BS_B), BS_R(BS_C, BS_B2));
    if (o->use[BS_D]) printf("| %.2f ", BS_R(BS_C, BS_D));
    printf("|");
    for (int i = 0, first = 1; i < o->n_way; i++)
        if (o->use[bs_column(o, i)]) { printf("%s %.1f", first ? "" : " /", mb[bs_column(o, i)]); first = 0; }
    printf(" | %.3f | %s |\n", dep, same ? "yes" : "NO");
#undef BS_R
    fflush(stdout);
}

/* The runs of one concurrency, its table row; whether the MoR ways gave the same outputs and (d) every token. */
static int bs_conc(const bs_opts *o, mor_model *m, mor_model *md, int conc, const float *thr)
{
    double tps[BS_N][64], med[BS_N] = { 0 }, mb[BS_N] = { 0 }, dep = 0;
    uint64_t hash = 0;
    int same = 1, have = 0;
    const int long_a = conc * o->rps * o->gen > 256;   /* (a): once when long */
    char lb[32];
    for (int r = 0; r < o->reps; r++)
        for (int w = 0; w < o->n_way; w++) {   /* interleaved, so that drift hits every way alike */
            if (!o->use[w] || (w == BS_A && r > 0 && long_a)) continue;
            bs_result x = bs_run(w == BS_D ? md : m, w, o->fin[w], conc, conc * o->rps, o->gen, o->prompt, o->threads, thr);
            tps[w][r] = x.tps;
            mb[w] = x.tokens ? x.bytes / 1e6 / (double)x.tokens : 0;   /* the same every rep: the steps are */
            if (!x.ok) same = 0;
            if (w == BS_D) {}   /* another model: other tokens, only their number is checked */
            else if (!have) { hash = x.hash; dep = x.depth; have = 1; }
            else if (x.hash != hash) same = 0;
            fprintf(stderr, "# conc %d rep %d (%s): %.1f tok/s, %.2f s, %.2f user CPU s (%.1f tok per CPU s), "
                    "depth %.3f, %.1f MB of weights per token, outputs %016llx\n", conc, r, bs_label(o, w, lb, sizeof lb),
                    x.tps, x.secs, x.cpu, (double)x.tokens / x.cpu, x.depth, mb[w], (unsigned long long)x.hash);
        }
    for (int w = 0; w < o->n_way; w++)
        if (o->use[w]) med[w] = bench_median(tps[w], w == BS_A && long_a ? 1 : o->reps);
    bs_print_row(o, conc, med, mb, dep, same);
    return same;
}

static int bench_serve_main(int argc, char **argv)
{
    bs_opts o;
    bs_parse(argc, argv, &o);
    mor_model *m = NULL, *md = NULL;
    if (bs_models(&o, &m, &md)) { mor_model_free(m); return 1; }
    int cmax = 0, all_same = 1;
    for (int i = 0; i < o.nc; i++) if (o.concs[i] > cmax) cmax = o.concs[i];
    float thr[MOR_MAX_RECURSIONS];
    for (int k = 0; k < MOR_MAX_RECURSIONS; k++) thr[k] = k ? 0.5f : 0;
    if (o.thr_given) memcpy(thr, o.thr, sizeof thr);
    else if (!bs_calibrate(m, cmax * o.rps, o.prompt, o.gen, o.threads, o.depth, thr)) {
        fprintf(stderr, "calibration failed\n");
        mor_model_free(m); mor_model_free(md);
        return 1;
    }
    bs_print_head(&o, thr, mor_model_n_recursion(m));
    bs_print_model(m, md);
    bs_print_table_head(&o);
    for (int ci = 0; ci < o.nc; ci++) all_same &= bs_conc(&o, m, md, o.concs[ci], thr);
    mor_model_free(m);
    mor_model_free(md);
    return all_same ? 0 : 1;
}
#endif
