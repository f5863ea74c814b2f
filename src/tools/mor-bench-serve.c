/* mor-bench-serve - serving throughput, three ways, one run: (a) SERIAL,
 * (b) SEQUENCE-level continuous batching, (c) continuous DEPTHWISE batching,
 * on a random-weight MoR model of the SmolLM-135M shape (hidden 576, heads
 * 9/3, head_dim 64, ffn 1536, vocab 49152, middle-cycle, N_r = 3; written by
 * the benchmark itself), THRESHOLD routing. Same requests, same outputs
 * (checked), generated tokens/s of each and the ratios.
 *
 *   bin/mor-bench-serve [--threads 2] [--conc 8,32,64] [--gen 16] [--prompt 4]
 *                       [--threshold 0.5] [--type f32|f16|q8_0] [--dir /tmp] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "mor.h"
#include "tools/synth_model.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct { double tps, depth; long tokens; uint64_t hash; } result;

static result run(mor_model *m, int mode, int conc, int gen, int prompt, int threads, float thr)
{
    result res = { 0, 0, 0, 1469598103934665603ull };
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    p.mode = mode; p.n_slots = (uint32_t)conc; p.n_threads = threads;
    p.n_ctx = (uint32_t)(conc * (prompt + gen) + 16); p.n_batch = (uint32_t)(conc * prompt + 64);
    mor_server *s = NULL;
    if (mor_server_create(m, &p, &s)) { fprintf(stderr, "server: %s\n", mor_last_error()); return res; }
    for (int r = 1; r < mor_model_n_recursion(m); r++) mor_router_set_threshold(mor_server_router(s), r, thr);
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);
    sp.temperature = 0;
    mor_request_id *ids = malloc(sizeof *ids * (size_t)conc);
    mor_token pr[64];
    for (int i = 0; i < conc; i++) {
        for (int t = 0; t < prompt; t++) pr[t] = (i * 7919 + t * 104729 + 11) % mor_model_n_vocab(m);
        mor_server_submit(s, pr, prompt, &sp, gen, NULL, 0, &ids[i]);
    }
    double t0 = now();
    if (mor_server_run(s)) fprintf(stderr, "run: %s\n", mor_last_error());
    double dt = now() - t0;
    mor_token out[1024]; int32_t dep[1024], n;
    long dsum = 0;
    for (int i = 0; i < conc; i++) {
        mor_server_get_tokens(s, ids[i], out, dep, 1024, &n);
        for (int t = 0; t < n; t++) { res.hash = (res.hash ^ (uint64_t)out[t]) * 1099511628211ull; dsum += dep[t]; }
        res.tokens += n;
    }
    res.tps = (double)res.tokens / dt;
    res.depth = res.tokens ? (double)dsum / (double)res.tokens : 0;
    free(ids);
    mor_server_free(s);
    return res;
}

int main(int argc, char **argv)
{
    int threads = 2, gen = 16, prompt = 4;
    float thr = 0.5f;
    const char *conc_list = "8,32,64", *dir = "/tmp", *type = "f32";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--conc")) conc_list = argv[i + 1];
        else if (!strcmp(argv[i], "--gen")) gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threshold")) thr = (float)atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--type")) type = argv[i + 1];
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (gen < 1 || gen > 1024 || prompt < 1 || prompt > 64) { fprintf(stderr, "bad --gen or --prompt\n"); return 2; }
    uint32_t wt = !strcmp(type, "f16") ? GGML_F16 : !strcmp(type, "q8_0") ? GGML_Q8_0 : GGML_F32;
    /* SmolLM-135M shape; 29 unrolled layers = 1 + 3 x 9 + 1 (30 does not split into 3 equal cycles) */
    synth_spec spec = { 576, 29, 9, 3, 64, 1536, 49152, 2048, 3, wt, wt, 1234 };
    char path[1024];
    snprintf(path, sizeof path, "%s/mor-bench-serve-smollm135-mor3-%s.gguf", dir, type);
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size == 0) {
        fprintf(stderr, "writing %s ...\n", path);
        if (synth_write(&spec, path)) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    }
    mor_model *m = NULL;
    if (mor_model_load_file(path, NULL, &m)) { fprintf(stderr, "load: %s\n", mor_last_error()); return 1; }
    printf("# %s, %s weights, %d threads, prompt %d, %d generated tokens per request, THRESHOLD %.2f\n",
           mor_build_info(), type, threads, prompt, gen, (double)thr);
    printf("| concurrent | (a) serial tok/s | (b) sequence tok/s | (c) depth-wise tok/s | (c)/(b) | (c)/(a) | mean depth | same outputs |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|:---:|\n");
    for (const char *c = conc_list; c && *c; ) {
        int conc = atoi(c);
        if (conc >= 1) {
            result a = run(m, MOR_SERVE_SERIAL, conc, gen, prompt, threads, thr);
            result b = run(m, MOR_SERVE_SEQUENCE, conc, gen, prompt, threads, thr);
            result d = run(m, MOR_SERVE_DEPTHWISE, conc, gen, prompt, threads, thr);
            printf("| %d | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %s |\n", conc, a.tps, b.tps, d.tps,
                   d.tps / b.tps, d.tps / a.tps, d.depth,
                   a.hash == b.hash && b.hash == d.hash && a.tokens == d.tokens ? "yes" : "NO");
            fflush(stdout);
        }
        c = strchr(c, ',');
        if (c) c++;
    }
    mor_model_free(m);
    return 0;
}
