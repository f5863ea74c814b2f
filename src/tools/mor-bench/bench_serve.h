/* bench_serve.h - `mor-bench --serve`: serving throughput of one model, the
 * same requests served four ways in one run (docs/BATCHING.md):
 *   (a)  SERIAL: one request after another;
 *   (b)  continuous sequence-level batching as an engine that knows nothing
 *        of MoR does it (Orca/vLLM): each step one token of every running
 *        request through every recursion in lockstep; the rows the router
 *        dropped are computed and thrown away (serve.h: serve_set_lockstep);
 *   (b') libmor's own sequence-level batching (MOR_SERVE_SEQUENCE): the same
 *        steps, but the rows the router dropped are skipped;
 *   (c)  continuous depth-wise batching (MOR_SERVE_DEPTHWISE) with the
 *        router's exits.
 * The model is a random-weight MoR of the SmolLM-135M shape (hidden 576,
 * heads 9/3, head_dim 64, ffn 1536, vocab 49152, middle-cycle 1 + 3 x 9 + 1,
 * N_r = 3) that the benchmark writes itself; THRESHOLD routing, thresholds
 * calibrated on the benchmark's own requests so that the mean depth is near
 * --depth (default 2). Every way must give the same tokens and depths
 * (checked); tok/s is the median over --reps runs.
 *
 *   mor-bench --serve [--threads 2] [--conc 8,32,64] [--requests 2] [--gen 32] [--prompt 4] [--reps 3]
 *                     [--ways a,b,b2,c,cN...] [--depth 2 | --thr T1,T2] [--type f32|f16|q8_0] [--dir build/bench]
 * --requests R: R x conc requests, served conc at a time (slots refilled).
 * cN: (c) finishing exited tokens only every N steps (serve_set_finish_every);
 * cd: (c) running all recursions in one step when no request is queued (serve_set_drain).
 *
 * Header-only (static functions), included by mor-bench.c (bin/mor-bench-serve is a link to it). */
#ifndef MOR_BENCH_SERVE_H
#define MOR_BENCH_SERVE_H
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
#include "synth_model.h"

enum { BS_A, BS_B, BS_B2, BS_C, BS_N = 12 };   /* ways BS_C + 1 ...: (c) finishing every N steps */
static const char *const bs_way_name[4] = { "a", "b", "b2", "c" };

typedef struct { double tps, depth, secs, cpu; long tokens; uint64_t hash; int ok; } bs_result;

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
    for (int32_t k = 1; k < n_rec && k < 3; k++) mor_router_set_threshold(r, k, thr[k]);
}

/* Thresholds for a mean depth near `depth` (1 + p1 + p1 p2, with p2 = p1 / 2
 * as top-k capacities of 2/3 and 1/3 would give at depth 2): the router
 * scores of the benchmark's first (up to 32) requests, prompt and greedy
 * generation under forced full depth, one sequence-level batch per token. The
 * recursion-1 scores are those of a THRESHOLD run (recursion 0 runs for
 * every token); the recursion-2 scores only approximately. */
static int bs_calibrate(mor_model *m, int n_req, int prompt, int gen, int threads, double depth, float *thr)
{
    const int32_t V = mor_model_n_vocab(m);
    int ns = n_req < 32 ? n_req : 32, cap = ns * (prompt + gen);
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = (uint32_t)cap + 8; cp.n_batch = (uint32_t)(ns * prompt + 8); cp.n_seq_max = (uint32_t)ns;
    cp.n_threads = threads;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    float *s1 = malloc(sizeof(float) * (size_t)cap), *s2 = malloc(sizeof(float) * (size_t)cap);
    float *s2k = malloc(sizeof(float) * (size_t)cap), *srt = malloc(sizeof(float) * (size_t)cap);
    int n = 0, ok = s1 && s2 && s2k && srt && !mor_context_create(m, &cp, &c) && !mor_batch_create((int32_t)cp.n_batch, &b);
    mor_token last[32], pr[64];
    if (ok) mor_router_set_mode(mor_context_router(c), MOR_ROUTE_FORCED, mor_model_n_recursion(m));
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
            float sc[3] = { 0, 0, 0 };
            mor_router_get_scores(mor_context_router(c), row, sc, 3);
            s1[n] = sc[1]; s2[n] = sc[2]; n++;
        }
        for (int i = 0; i < ns; i++) {   /* greedy: the first maximum */
            const float *lg = mor_get_logits(c, t == 0 ? (i + 1) * prompt - 1 : i);
            int32_t best = 0;
            for (int32_t v = 1; v < V; v++) if (lg[v] > lg[best]) best = v;
            last[i] = best;
        }
    }
    if (ok && n > 0) {
        /* p1 + p1^2 / 2 = depth - 1 */
        double e = depth - 1, p1 = e <= 0 ? 0 : e >= 1.5 ? 1 : -1 + sqrt(1 + 2 * e);
        memcpy(srt, s1, sizeof(float) * (size_t)n);
        qsort(srt, (size_t)n, sizeof(float), bs_cmp_f);
        int k1 = (int)((1 - p1) * n);
        thr[1] = k1 >= n ? srt[n - 1] + 1 : srt[k1 < 0 ? 0 : k1];
        int n2 = 0;
        for (int i = 0; i < n; i++) if (s1[i] >= thr[1]) s2k[n2++] = s2[i];
        qsort(s2k, (size_t)n2, sizeof(float), bs_cmp_f);
        thr[2] = n2 ? s2k[n2 / 2] : 0.5f;
    }
    free(s1); free(s2); free(s2k); free(srt);
    mor_batch_free(b);
    mor_context_free(c);
    return ok;
}

/* One way: n_req requests, all queued at once, served conc at a time (a
 * finished request's slot goes to the next in the queue). */
static bs_result bs_run(mor_model *m, int way, int finish_every, int conc, int n_req, int gen, int prompt,
                        int threads, const float *thr)
{
    bs_result res = { 0, 0, 0, 0, 0, 1469598103934665603ull, 0 };
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    p.mode = way == BS_A ? MOR_SERVE_SERIAL : way >= BS_C ? MOR_SERVE_DEPTHWISE : MOR_SERVE_SEQUENCE;
    p.n_slots = (uint32_t)conc; p.n_threads = threads;
    p.n_ctx = (uint32_t)(conc * (prompt + gen) + 16); p.n_batch = (uint32_t)(conc * prompt + 64);
    mor_server *s = NULL;
    if (mor_server_create(m, &p, &s)) { fprintf(stderr, "server: %s\n", mor_last_error()); return res; }
    bs_thresholds(mor_server_router(s), mor_model_n_recursion(m), thr);
    if (way == BS_B) serve_set_lockstep(s, 1);
    if (way >= BS_C && finish_every > 1) serve_set_finish_every(s, finish_every);
    if (way >= BS_C && finish_every < 0) serve_set_drain(s, 1);
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
        "serving throughput of a random-weight SmolLM-135M-shaped MoR, the same requests served\n"
        "four ways: (a) serial, (b) lockstep sequence batching, (b') libmor's sequence batching,\n"
        "(c) depth-wise batching (docs/BATCHING.md); every way must give the same outputs\n"
        "  --threads N        worker threads (default 2)\n"
        "  --conc LIST        concurrent requests per run (default 8,32,64)\n"
        "  --requests R       R x conc requests per run, served conc at a time (default 2)\n"
        "  --gen N            generated tokens per request, 1..4096 (default 32)\n"
        "  --prompt N         prompt tokens per request, 1..64 (default 4)\n"
        "  --reps N           runs per way, 1..64; the median is shown (default 3)\n"
        "  --ways LIST        a,b,b2,c and cN ((c) finishing every N steps) or cd ((c) draining)\n"
        "  --depth D          mean depth the THRESHOLD routing is calibrated for (default 2)\n"
        "  --thr T1[,T2]      THRESHOLD thresholds of recursions 1 and 2 instead of calibrating\n"
        "  --type TYPE        f32|f16|q8_0 weights (default f32)\n"
        "  --dir DIR          where the model file is written (default build/bench)\n"
        "  -h, --help\n");
}

static int bench_serve_main(int argc, char **argv)
{
    int threads = 2, gen = 32, prompt = 4, reps = 3, rps = 2;
    double depth = 2.0;
    int thr_given = 0;
    float thr_arg[3] = { 0, 0.5f, 0.5f };
    static const char *const types[] = { "f32", "f16", "q8_0", NULL };
    const char *dir = "build/bench", *type = "f32", *ways = "a,b,b2,c";
    int concs[16] = { 8, 32, 64 }, nc = 3, cmax = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--serve")) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { bs_usage(stdout); return 0; }
        else if (!strcmp(a, "--threads")) threads = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--conc")) nc = cli_int_list(a, cli_value(argc, argv, &i), concs, 16, 1, 4096);
        else if (!strcmp(a, "--gen")) gen = (int)cli_int(a, cli_value(argc, argv, &i), 1, 4096);
        else if (!strcmp(a, "--prompt")) prompt = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--reps")) reps = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--requests")) rps = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--depth")) depth = cli_double(a, cli_value(argc, argv, &i), 1, 3, 0);
        else if (!strcmp(a, "--thr")) {
            float t[2];
            int n = cli_float_list(a, cli_value(argc, argv, &i), t, 2, -1e30, 1e30);
            thr_given = 1; thr_arg[1] = t[0]; thr_arg[2] = n > 1 ? t[1] : t[0];
        }
        else if (!strcmp(a, "--ways")) ways = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--type")) type = types[cli_choice(a, cli_value(argc, argv, &i), types)];
        else if (!strcmp(a, "--dir")) dir = cli_value(argc, argv, &i);
        else cli_usage_error("unknown option '%s'", a);
    }
    int use[BS_N] = { 0 }, fin[BS_N] = { 0 }, n_way = BS_C + 1;
    for (const char *c = ways; ; ) {   /* comma-separated way names; cN: (c) finishing every N steps */
        size_t len = strcspn(c, ",");
        char item[16];
        int known = 0;
        if (len == 0 || len >= sizeof item) cli_usage_error("--ways: bad list '%s'", ways);
        memcpy(item, c, len);
        item[len] = 0;
        for (int w = 0; w <= BS_C; w++)
            if (!strcmp(item, bs_way_name[w])) use[w] = known = 1;
        if (!known && n_way == BS_N) cli_usage_error("--ways: at most %d cN/cd ways", BS_N - BS_C - 1);
        if (!known && !strcmp(item, "cd")) { fin[n_way] = -1; use[n_way++] = 1; known = 1; }
        if (!known && item[0] == 'c') { fin[n_way] = (int)cli_int("--ways cN", item + 1, 1, 1 << 20); use[n_way++] = 1; known = 1; }
        if (!known) cli_usage_error("--ways: expected a, b, b2, c, cN or cd, got '%s'", item);
        if (!c[len]) break;
        c += len + 1;
    }
    uint32_t wt = !strcmp(type, "f16") ? GGML_F16 : !strcmp(type, "q8_0") ? GGML_Q8_0 : GGML_F32;
    /* SmolLM-135M shape; 29 unrolled layers = 1 + 3 x 9 + 1 (30 does not split into 3 equal cycles) */
    synth_spec spec = { 576, 29, 9, 3, 64, 1536, 49152, 2048, 3, wt, wt, 1234, 0 };
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/135m-mor3-L29-%s.gguf", dir, type);
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size == 0) {
        mkdir(dir, 0777);
        fprintf(stderr, "writing %s ...\n", path);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        if (synth_write(&spec, tmp) || rename(tmp, path)) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    }
    mor_model *m = NULL;
    if (mor_model_load_file(path, NULL, &m)) { fprintf(stderr, "load: %s\n", mor_last_error()); return 1; }
    for (int i = 0; i < nc; i++) if (concs[i] > cmax) cmax = concs[i];
    float thr[3] = { 0, 0.5f, 0.5f };
    if (thr_given) memcpy(thr, thr_arg, sizeof thr);
    else if (!bs_calibrate(m, cmax * rps, prompt, gen, threads, depth, thr)) { fprintf(stderr, "calibration failed\n"); return 1; }
    printf("# %s, SmolLM-135M-shaped MoR (middle-cycle, N_r = 3), %s weights, %d threads, prompt %d, %d generated "
           "tokens per request, %d x concurrent requests, THRESHOLD %.4f / %.4f (%s mean depth %.2f), median of %d "
           "reps ((a): 1 rep when long)\n", mor_build_info(), type, threads, prompt, gen, rps, (double)thr[1],
           (double)thr[2], thr_given ? "given; not calibrated for" : "calibrated for", depth, reps);
    printf("| concurrent | (a) serial tok/s | (b) lockstep seq. tok/s | (b') libmor seq. tok/s | (c) depth-wise tok/s ");
    for (int w = BS_C + 1; w < n_way; w++)
        if (fin[w] < 0) printf("| (c) + drain tok/s ");
        else printf("| (c) finish every %d tok/s ", fin[w]);
    printf("| (c)/(a) | (c)/(b) | (c)/(b') | mean depth | same outputs |\n|---:|---:|---:|---:|---:|");
    for (int w = BS_C + 1; w < n_way; w++) printf("---:|");
    printf("---:|---:|---:|---:|:---:|\n");
    int all_same = 1;
    for (int ci = 0; ci < nc; ci++) {
        int conc = concs[ci];
        if (conc < 1) continue;
        double tps[BS_N][64], med[BS_N] = { 0 }, dep = 0;
        uint64_t hash = 0;
        int same = 1, have = 0;
        for (int r = 0; r < reps; r++)
            for (int w = 0; w < n_way; w++) {   /* interleaved, so that drift hits every way alike */
                if (!use[w] || (w == BS_A && r > 0 && conc * rps * gen > 256)) continue;   /* (a): once when long */
                bs_result x = bs_run(m, w, fin[w], conc, conc * rps, gen, prompt, threads, thr);
                tps[w][r] = x.tps;
                if (!x.ok) same = 0;
                if (!have) { hash = x.hash; dep = x.depth; have = 1; }
                else if (x.hash != hash) same = 0;
                fprintf(stderr, "# conc %d rep %d (%s%.0d%s): %.1f tok/s, %.2f s, %.2f user CPU s (%.1f tok per CPU s), "
                        "depth %.3f, outputs %016llx\n", conc, r, bs_way_name[w < BS_C ? w : BS_C], fin[w] > 0 ? fin[w] : 0, fin[w] < 0 ? "d" : "", x.tps, x.secs, x.cpu,
                        (double)x.tokens / x.cpu, x.depth, (unsigned long long)x.hash);
            }
        for (int w = 0; w < n_way; w++) {
            if (!use[w]) continue;
            int n = w == BS_A && conc * rps * gen > 256 ? 1 : reps;
            qsort(tps[w], (size_t)n, sizeof(double), bench_cmp_d);
            med[w] = n % 2 ? tps[w][n / 2] : 0.5 * (tps[w][n / 2 - 1] + tps[w][n / 2]);
        }
#define BS_R(x, y) (med[x] > 0 && med[y] > 0 ? med[x] / med[y] : 0)
        printf("| %d | %.1f | %.1f | %.1f | %.1f ", conc, med[BS_A], med[BS_B], med[BS_B2], med[BS_C]);
        for (int w = BS_C + 1; w < n_way; w++) printf("| %.1f ", med[w]);
        printf("| %.2f | %.2f | %.2f | %.3f | %s |\n", BS_R(BS_C, BS_A), BS_R(BS_C, BS_B), BS_R(BS_C, BS_B2), dep,
               same ? "yes" : "NO");
#undef BS_R
        fflush(stdout);
        all_same &= same;
    }
    mor_model_free(m);
    return all_same ? 0 : 1;
}
#endif
