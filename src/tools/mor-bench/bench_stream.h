/* bench_stream.h - `mor-bench --stream`: how close the matrix-vector
 * products (a decode's matmuls) come to the machine's read bandwidth,
 * measured at the same moment.
 *
 * The host's bandwidth moves by 2-3x within minutes (other guests), so a
 * kernel's rate means little against a probe taken at another time. Here
 * each pair runs the roofline probe (a plain sum of an array, roofline.h)
 * and then one matrix-vector product over weights of the same size, both on
 * the same threads, and the pair's ratio is kept: the median and spread of
 * the ratios say what share of the momentary bandwidth the kernels reach.
 * On the 2-vCPU development VM the bandwidth swings between ~25 and ~130
 * GB/s from one 10 ms test to the next, so single pairs scatter (0.3-2x);
 * the last column, the kernel's best rate over its best probe, is the
 * steadier figure there.
 * The weights are rows of --cols values (576: the 135M shape's width), of
 * random contents (distinct on every page: a host that merges identical
 * pages would serve them from cache) with block scales fixed, split into one
 * contiguous range of rows per thread, as a decode splits a matmul.
 *
 *   mor-bench --stream [-w f32,f16,bf16,q8_0,q4_0] [-t 2] [-r 32] [--mib 512] [--cols 576]
 *                      [--kernels K] [--fast-bf16]
 *
 * Header-only (static functions), included by mor-bench.c after roofline.h. */
#ifndef MOR_BENCH_STREAM_H
#define MOR_BENCH_STREAM_H
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "internal.h"
#include "cli.h"
#include "bench_util.h"
#include "roofline.h"

typedef struct {
    pthread_barrier_t *bar;
    const kernel_set  *ks;
    const tensor      *w;
    const void        *x;
    size_t             xs;
    float             *y, *scratch;
    int64_t            o0, o1;
} bs_arg;

static void *bs_thread(void *v)
{
    bs_arg *a = v;
    pthread_barrier_wait(a->bar);
    a->ks->matmul(a->w, a->x, a->xs, a->y, a->w->rows, 1, a->o0, a->o1, 0, a->scratch);
    pthread_barrier_wait(a->bar);
    return NULL;
}

/* Seconds for one product of w with x on nt threads (rows split evenly, in whole 16s). */
static double bs_matvec(int nt, const kernel_set *ks, const tensor *w, const void *x, size_t xs, float *y,
                        float **scratch)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
    pthread_t th[64];
    bs_arg a[64];
    const int64_t per = (w->rows + nt - 1) / nt / 16 * 16 + 16;
    for (int i = 0; i < nt; i++) {
        const int64_t o0 = per * i < w->rows ? per * i : w->rows, o1 = per * (i + 1) < w->rows ? per * (i + 1) : w->rows;
        a[i] = (bs_arg){ &bar, ks, w, x, xs, y, scratch[i], o0, i == nt - 1 ? w->rows : o1 };
        pthread_create(&th[i], NULL, bs_thread, &a[i]);
    }
    pthread_barrier_wait(&bar);
    const double t0 = bench_now();
    pthread_barrier_wait(&bar);
    const double t = bench_now() - t0;
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    return t;
}

/* About `bytes` in 2 MiB pages (the weights' page size under MOR_MODEL_NO_MMAP), or NULL. */
static void *bs_alloc(size_t bytes, void **raw)
{
    const size_t huge = (size_t)2 << 20;
    char *mem = malloc(bytes + huge);
    if (!mem) return NULL;
    *raw = mem;
    char *p = (char *)(((uintptr_t)mem + huge - 1) & ~(uintptr_t)(huge - 1));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

static void bs_summary(double *v, int n, double *med, double *lo, double *hi)
{
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) { if (v[i] < *lo) *lo = v[i]; if (v[i] > *hi) *hi = v[i]; }
    *med = bench_median(v, n);
}

static int bench_stream_main(int argc, char **argv)
{
    const char *type_list = "f32,f16,bf16,q8_0,q4_0", *kern = "auto";
    int nt = 2, reps = 32, fast = 0;
    int64_t mib = 512, cols = 576;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: mor-bench --stream [-w f32,f16,bf16,q8_0,q4_0] [-t 2] [-r 32] [--mib 512] [--cols 576]\n"
                   "                          [--kernels K] [--fast-bf16]\n"
                   "Pairs of (read-bandwidth probe, matrix-vector product over as many bytes of weights), run\n"
                   "back to back on the same threads: each kernel's GB/s as a share of the probe's at that moment.\n");
            return 0;
        }
        else if (!strcmp(a, "-w")) type_list = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-t")) nt = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "-r")) reps = (int)cli_int(a, cli_value(argc, argv, &i), 1, 64);
        else if (!strcmp(a, "--mib")) mib = cli_int(a, cli_value(argc, argv, &i), 1, 16384);
        else if (!strcmp(a, "--cols")) cols = cli_int(a, cli_value(argc, argv, &i), 32, 65536);
        else if (!strcmp(a, "--kernels")) kern = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--fast-bf16")) fast = 1;
        else cli_usage_error("unknown option '%s'", a);
    }
    if (cols % 32) cli_usage_error("--cols %lld: a multiple of 32 (whole quant blocks)", (long long)cols);
    const kernel_set *ks = bench_kernels(kern);
    if (!ks) return 1;
    if (fast) ks = kernels_fast_bf16(ks);
    static const char *const names[] = { "f32", "f16", "bf16", "q8_0", "q4_0", NULL };
    static const uint32_t types[] = { GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q4_0 };
    int pick[5], np = bench_choice_list("-w", type_list, names, pick, 5);
    if (np > 5) np = 5;
    const size_t bytes = (size_t)mib << 20;
    void *praw = NULL, *wraw = NULL;
    float *probe = bs_alloc(bytes, &praw);
    char *wmem = bs_alloc(bytes, &wraw);
    float *x = malloc(sizeof(float) * (size_t)cols), *y = malloc(bytes / 8 + 64);   /* >= rows floats */
    char *xp = aligned_alloc(64, (act_stride_max(cols) + 63) / 64 * 64);
    float *scratch[64];
    int ok = probe && wmem && x && y && xp;
    for (int i = 0; i < nt; i++) ok &= (scratch[i] = malloc(sizeof(float) * MM_SCRATCH_FLOATS(cols))) != NULL;
    if (!ok) { fprintf(stderr, "mor-bench --stream: out of memory for %lld MiB\n", (long long)mib); return 1; }
    const size_t nf = bytes / sizeof(float);
    for (size_t i = 0; i < nf; i++) probe[i] = (float)(uint32_t)(i * 2654435761u >> 16);
    for (int64_t c = 0; c < cols; c++) x[c] = (float)((c * 37) % 101) / 101.0f - 0.5f;
    printf("# libmor %s, kernels %s, %d threads, %lld MiB per test, rows of %lld values, %d pairs\n",
           mor_version_string(), ks->name, nt, (long long)mib, (long long)cols, reps);
    printf("\n| weights | probe GB/s median [min-max] | kernel GB/s median [min-max] | pair ratio median [min-max] | best / best |\n");
    printf("|---|---|---|---|---:|\n");
    for (int k = 0; k < np; k++) {
        const uint32_t t = types[pick[k]];
        const size_t rb = tensor_row_bytes(t, cols);
        tensor w;
        memset(&w, 0, sizeof w);
        w.type = t; w.cols = cols; w.rows = (int64_t)(bytes / rb); w.data = wmem;
        /* random bytes (xorshift), then values and scales kept finite and small */
        uint64_t s = 88172645463325252ull + (uint64_t)t;
        for (size_t i = 0; i + 8 <= (size_t)w.rows * rb; i += 8) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            uint64_t v = s;
            if (t == GGML_F32) v &= 0x3e7fffff3e7fffffull;
            else if (t == GGML_F16) v &= 0x37ff37ff37ff37ffull;
            else if (t == GGML_BF16) v &= 0x3e7f3e7f3e7f3e7full;
            memcpy(wmem + i, &v, 8);
        }
        if (t == GGML_Q8_0 || t == GGML_Q4_0) {
            const size_t bs = tensor_row_bytes(t, 32);
            const uint16_t d = 0x2000;   /* 2^-7 */
            for (size_t b = 0; b < (size_t)w.rows * rb / bs; b++) memcpy(wmem + b * bs, &d, 2);
        }
        const size_t xs = act_stride(ks, t, cols);
        act_prepare(ks, t, x, xp, cols);
        double pr[64], kr[64], ra[64], ops;
        roof_run(nt, probe, nf, 1, -1, 0, &ops);                       /* warm-up, both */
        bs_matvec(nt, ks, &w, xp, xs, y, scratch);
        for (int r = 0; r < reps; r++) {
            pr[r] = (double)bytes / roof_run(nt, probe, nf, 1, -1, 0, &ops) / 1e9;
            kr[r] = (double)w.rows * rb / bs_matvec(nt, ks, &w, xp, xs, y, scratch) / 1e9;
            ra[r] = kr[r] / pr[r];
        }
        double pm, pl, ph, km, kl, kh, rm, rl, rh;
        bs_summary(pr, reps, &pm, &pl, &ph);
        bs_summary(kr, reps, &km, &kl, &kh);
        bs_summary(ra, reps, &rm, &rl, &rh);
        printf("| %s | %.1f [%.1f-%.1f] | %.1f [%.1f-%.1f] | %.2f [%.2f-%.2f] | %.2f |\n", names[pick[k]], pm, pl, ph,
               km, kl, kh, rm, rl, rh, kh / ph);
        fflush(stdout);
    }
    for (int i = 0; i < nt; i++) free(scratch[i]);
    free(praw); free(wraw); free(x); free(y); free(xp);
    return 0;
}
#endif
