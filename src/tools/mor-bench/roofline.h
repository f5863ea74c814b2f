/* roofline.h - mor-bench's roofline: what this machine could do at best for
 * a test, from probes of the machine itself.
 *
 * Read bandwidth is probed at the working-set size of the model being timed
 * (an array of that many bytes in 2 MiB pages, read again and again by the
 * test's threads, prefetching ahead as the kernels do), so it is the L2, L3
 * or DRAM rate that this model's weights see when they are read once per
 * token. Compute peaks are probed for every unit a kernel set uses: FMA
 * (zmm or ymm), VNNI (vpdpbusd zmm), AVX2 int8 (vpmaddubsw + vpmaddwd), AMX
 * INT8 (tdpbssd 16 x 16 x 64) and AMX BF16 (tdpbf16ps 16 x 16 x 32), NEON
 * FMA and SDOT. Each is the best of several runs: a bound, not a typical rate.
 *
 * The bound of a test is 1 / max(memory time, compute time) per token:
 *   memory:  every distinct weight byte a token reads once at the rate of the
 *            whole working set, and a shared block's later passes in the same
 *            token (MoR: depth - 1 of them) at the rate of the block's size;
 *   compute: the matmul and attention FLOPs at the peak of the unit the
 *            kernel set uses for the weight type, as that set uses it (the AMX
 *            set's BF16 products take three bfloat16 tile products per
 *            multiply-add, so a third of the tile rate).
 * Kernels cannot read faster than the best probe of the same bytes, nor
 * compute faster than the unit's peak, so a figure above 100% means the
 * probe missed the machine's best (noise), not a faster kernel.
 *
 * Header-only (static functions), included by mor-bench.c. */
#ifndef MOR_ROOFLINE_H
#define MOR_ROOFLINE_H
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "internal.h"
#include "bench_util.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

/* ---------------- the probe loops (one thread's part) ---------------- */

enum { UNIT_FMA512, UNIT_FMA256, UNIT_VNNI512, UNIT_INT8_AVX2, UNIT_AMX_INT8, UNIT_AMX_BF16, UNIT_NEON_FMA,
       UNIT_NEON_SDOT, UNIT_COUNT };
static const char *const roof_unit_names[UNIT_COUNT] = {
    "FMA zmm", "FMA ymm", "VNNI zmm", "int8 ymm (maddubs)", "AMX-INT8", "AMX-BF16", "NEON FMA", "NEON SDOT"
};

#if defined(__x86_64__)
/* Sum of n floats with 8 accumulators, prefetching 8 KiB ahead as the kernels do. */
__attribute__((target("avx2,fma"))) static float roof_sum_avx2(const float *p, size_t n)
{
    __m256 a[8];
    for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
    for (size_t i = 0; i + 64 <= n; i += 64) {
        _mm_prefetch((const char *)(p + i) + 8192, _MM_HINT_T0);
        _mm_prefetch((const char *)(p + i) + 8192 + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(p + i) + 8192 + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)(p + i) + 8192 + 192, _MM_HINT_T0);
        for (int j = 0; j < 8; j++) a[j] = _mm256_add_ps(a[j], _mm256_loadu_ps(p + i + 8 * j));
    }
    for (int j = 1; j < 8; j++) a[0] = _mm256_add_ps(a[0], a[j]);
    float t[8];
    _mm256_storeu_ps(t, a[0]);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

/* Each loop: 12 independent chains (latency x throughput), kept in registers; returns ops done
 * (2 per multiply-add). */
__attribute__((target("avx2,fma"))) static double roof_fma256(long iters, volatile float *sink)
{
    __m256 a[12];
    const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    for (int i = 1; i < 12; i++) a[0] = _mm256_add_ps(a[0], a[i]);
    *sink = _mm256_cvtss_f32(a[0]);
    return (double)iters * 12 * 8 * 2;
}

__attribute__((target("avx512f"))) static double roof_fma512(long iters, volatile float *sink)
{
    __m512 a[12];
    const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    for (int i = 1; i < 12; i++) a[0] = _mm512_add_ps(a[0], a[i]);
    *sink = _mm512_reduce_add_ps(a[0]);
    return (double)iters * 12 * 16 * 2;
}

__attribute__((target("avx512f,avx512vnni"))) static double roof_vnni512(long iters, volatile float *sink)
{
    __m512i a[12];
    const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(5);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi32(i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
    for (int i = 1; i < 12; i++) a[0] = _mm512_add_epi32(a[0], a[i]);
    *sink = (float)_mm512_reduce_add_epi32(a[0]);
    return (double)iters * 12 * 64 * 2;
}

/* the AVX2 set's int8 step: vpmaddubsw (32 byte products into 16 words) then vpmaddwd and an add */
__attribute__((target("avx2"))) static double roof_int8_avx2(long iters, volatile float *sink)
{
    __m256i a[8];
    const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(5), one = _mm256_set1_epi16(1);
    for (int i = 0; i < 8; i++) a[i] = _mm256_set1_epi32(i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), one));
    for (int i = 1; i < 8; i++) a[0] = _mm256_add_epi32(a[0], a[i]);
    *sink = (float)_mm256_extract_epi32(a[0], 0);
    return (double)iters * 8 * 32 * 2;
}

/* AMX: four accumulator tiles (16 x 16 int32 or float) fed by the same A and B tiles. The tile
 * configuration is loaded by ldtilecfg on the whole 64-byte object (GCC 12's intrinsic is broken). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) roof_tilecfg;

static double roof_amx(long iters, int bf16, volatile float *sink)
{
    static const uint8_t zero[1024] __attribute__((aligned(64)));
    roof_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 6; t++) { c.rows[t] = 16; c.colsb[t] = 64; }
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm4" : : "r"(zero), "r"((long)64) : "memory");
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm5" : : "r"(zero), "r"((long)64) : "memory");
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" : :);
    if (bf16)
        for (long it = 0; it < iters; it++)
            __asm__ volatile("tdpbf16ps %%tmm5, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm5, %%tmm4, %%tmm1\n\t"
                             "tdpbf16ps %%tmm5, %%tmm4, %%tmm2\n\ttdpbf16ps %%tmm5, %%tmm4, %%tmm3" : :);
    else
        for (long it = 0; it < iters; it++)
            __asm__ volatile("tdpbssd %%tmm5, %%tmm4, %%tmm0\n\ttdpbssd %%tmm5, %%tmm4, %%tmm1\n\t"
                             "tdpbssd %%tmm5, %%tmm4, %%tmm2\n\ttdpbssd %%tmm5, %%tmm4, %%tmm3" : :);
    float out[256] __attribute__((aligned(64)));
    __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" : : "r"(out), "r"((long)64) : "memory");
    __asm__ volatile("tilerelease" : : : "memory");
    *sink = out[0];
    /* per instruction: 16 x 16 outputs of 64 int8 or 32 bf16 products */
    return (double)iters * 4 * 16 * 16 * (bf16 ? 32 : 64) * 2;
}
#endif

#if defined(__aarch64__)
static double roof_neon_fma(long iters, volatile float *sink)
{
    float32x4_t a[12];
    const float32x4_t m = vdupq_n_f32(0.9999999f), c = vdupq_n_f32(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = vdupq_n_f32((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = vfmaq_f32(c, a[i], m);
    for (int i = 1; i < 12; i++) a[0] = vaddq_f32(a[0], a[i]);
    *sink = vgetq_lane_f32(a[0], 0);
    return (double)iters * 12 * 4 * 2;
}

__attribute__((target("arch=armv8.2-a+dotprod"))) static double roof_neon_sdot(long iters, volatile float *sink)
{
    int32x4_t a[12];
    const int8x16_t x = vdupq_n_s8(3), y = vdupq_n_s8(5);
    for (int i = 0; i < 12; i++) a[i] = vdupq_n_s32(i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = vdotq_s32(a[i], x, y);
    for (int i = 1; i < 12; i++) a[0] = vaddq_s32(a[0], a[i]);
    *sink = (float)vgetq_lane_s32(a[0], 0);
    return (double)iters * 12 * 16 * 2;
}
#endif

static float roof_sum_plain(const float *p, size_t n)
{
    float s[8] = { 0 };
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += p[i + j];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* Whether this machine has unit u (and its probe is compiled in). */
static int roof_has(int u)
{
    const uint32_t f = cpu_features();
    (void)f;
    switch (u) {
#if defined(__x86_64__)
    case UNIT_FMA512: return (f & CPU_AVX512) != 0;
    case UNIT_FMA256: case UNIT_INT8_AVX2: return (f & CPU_AVX2) != 0;
    case UNIT_VNNI512: return (f & CPU_AVX512) && (f & CPU_AVX512VNNI);
    case UNIT_AMX_INT8: return (f & CPU_AMX_INT8) != 0;
    case UNIT_AMX_BF16: return (f & CPU_AMX_BF16) != 0;
#endif
#if defined(__aarch64__)
    case UNIT_NEON_FMA: return 1;
    case UNIT_NEON_SDOT: return (f & CPU_DOTPROD) != 0;
#endif
    default: return 0;
    }
}

/* ---------------- timing the probes on nt threads ---------------- */

typedef struct {
    pthread_barrier_t *bar;
    const float *p;
    size_t n;
    int passes, unit;    /* unit < 0: read p[0..n) passes times */
    long iters;
    double ops;
    volatile float sink;
} roof_arg;

static void *roof_thread(void *v)
{
    roof_arg *a = v;
    pthread_barrier_wait(a->bar);
    float s = 0;
    switch (a->unit) {
#if defined(__x86_64__)
    case UNIT_FMA512: a->ops = roof_fma512(a->iters, &a->sink); break;
    case UNIT_FMA256: a->ops = roof_fma256(a->iters, &a->sink); break;
    case UNIT_VNNI512: a->ops = roof_vnni512(a->iters, &a->sink); break;
    case UNIT_INT8_AVX2: a->ops = roof_int8_avx2(a->iters, &a->sink); break;
    case UNIT_AMX_INT8: a->ops = roof_amx(a->iters, 0, &a->sink); break;
    case UNIT_AMX_BF16: a->ops = roof_amx(a->iters, 1, &a->sink); break;
#endif
#if defined(__aarch64__)
    case UNIT_NEON_FMA: a->ops = roof_neon_fma(a->iters, &a->sink); break;
    case UNIT_NEON_SDOT: a->ops = roof_neon_sdot(a->iters, &a->sink); break;
#endif
    default:
        for (int i = 0; i < a->passes; i++) {
#if defined(__x86_64__)
            if (cpu_features() & CPU_AVX2) { s += roof_sum_avx2(a->p, a->n); continue; }
#endif
            s += roof_sum_plain(a->p, a->n);
        }
        a->sink = s;
        break;
    }
    pthread_barrier_wait(a->bar);
    return NULL;
}

/* One timed run on nt threads (a warm-up pass first when reading); returns seconds, *ops the ops
 * of all threads for a unit. */
static double roof_run(int nt, const float *p, size_t n, int passes, int unit, long iters, double *ops)
{
    if (nt > 64) nt = 64;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
    pthread_t th[64];
    roof_arg a[64];
    for (int i = 0; i < nt; i++) {
        size_t b = n / (size_t)nt * (size_t)i, e = i == nt - 1 ? n : n / (size_t)nt * (size_t)(i + 1);
        a[i] = (roof_arg){ &bar, p ? p + b : NULL, e - b, passes, unit, iters, 0, 0 };
        pthread_create(&th[i], NULL, roof_thread, &a[i]);
    }
    pthread_barrier_wait(&bar);
    double t0 = bench_now();
    pthread_barrier_wait(&bar);
    double t = bench_now() - t0;
    *ops = 0;
    for (int i = 0; i < nt; i++) { pthread_join(th[i], NULL); *ops += a[i].ops; }
    pthread_barrier_destroy(&bar);
    return t;
}

/* ---------------- the machine: probes, cached ---------------- */

typedef struct { double best, med, min; int n; } roof_rate;

enum { ROOF_MAX_BW = 64, ROOF_MAX_SAMPLES = 64 };
typedef struct {
    int reps;
    roof_rate unit[8][UNIT_COUNT];            /* [thread-count slot][unit], GOP/s; 0: not probed / absent */
    int unit_nt[8];
    /* GB/s at a size: every probe run so far (the first reps at first use,
     * then one per round of the tests, roof_bw_sample) and their summary */
    struct { int nt; size_t mib; roof_rate r; double v[ROOF_MAX_SAMPLES]; int nv, round; } bw[ROOF_MAX_BW];
    int n_bw;
    int round;   /* the round of tests the probes of roof_sample_work belong to (the caller counts them) */
} roof_machine;

static roof_rate roof_summary(const double *in, int n)
{
    roof_rate r = { 0, 0, 0, 0 };
    double v[ROOF_MAX_SAMPLES];
    if (n <= 0) return r;
    if (n > ROOF_MAX_SAMPLES) n = ROOF_MAX_SAMPLES;
    memcpy(v, in, sizeof(double) * (size_t)n);
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    r.best = v[n - 1];
    r.min = v[0];
    r.n = n;
    r.med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return r;
}

/* The peak of unit u on nt threads (probed on first use). */
static roof_rate roof_unit(roof_machine *m, int nt, int u)
{
    int slot = 0;
    while (slot < 8 && m->unit_nt[slot] && m->unit_nt[slot] != nt) slot++;
    if (slot == 8 || u < 0 || !roof_has(u)) return (roof_rate){ 0, 0, 0, 0 };
    m->unit_nt[slot] = nt;
    if (m->unit[slot][u].best > 0) return m->unit[slot][u];
    if (m->reps < 1) m->reps = 1;
    double v[16];
    const long iters = u == UNIT_AMX_INT8 || u == UNIT_AMX_BF16 ? 200000 : 20000000;
    int n = 0;
    for (int i = 0; i < m->reps && i < 16; i++) {
        double ops, t = roof_run(nt, NULL, 0, 0, u, iters, &ops);
        v[n++] = ops / t / 1e9;
    }
    m->unit[slot][u] = roof_summary(v, n);
    return m->unit[slot][u];
}

/* `runs` timed reads on nt threads of an array of mib MiB in 2 MiB pages, read over and over
 * (each run at least 512 MiB, after a warm-up pass), into v as GB/s; the number done. */
static int roof_bw_runs(int nt, size_t mib, int runs, double *v)
{
    const size_t n = (mib << 20) / sizeof(float), huge = (size_t)2 << 20;
    char *mem = malloc(n * sizeof(float) + huge);
    if (!mem) return 0;
    float *p = (float *)(void *)(((uintptr_t)mem + huge - 1) & ~(uintptr_t)(huge - 1));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n * sizeof(float), MADV_HUGEPAGE);   /* the weights' page size (mor-bench loads them so) */
#endif
    /* distinct contents on every page: a host that merges identical pages (KSM) would serve an
     * array of one value from a few cached pages, faster than any weights (probes of 170 GB/s
     * on this VM) */
    for (size_t i = 0; i < n; i++) p[i] = (float)(uint32_t)(i * 2654435761u >> 16);
    const int passes = (int)(512 / mib) + 1;
    double ops;
    roof_run(nt, p, n, 1, -1, 0, &ops);
    for (int i = 0; i < runs; i++) v[i] = (double)passes * n * sizeof(float) / roof_run(nt, p, n, passes, -1, 0, &ops) / 1e9;
    free(mem);
    return runs;
}

/* The entry of m->bw for nt threads and about `bytes` (rounded up to whole MiB), probed `reps`
 * times on first use; -1 when the table or memory ran out. */
static int roof_bw_entry(roof_machine *m, int nt, double bytes)
{
    size_t mib = (size_t)((bytes + (1 << 20) - 1) / (1 << 20));
    if (mib < 1) mib = 1;
    for (int i = 0; i < m->n_bw; i++) if (m->bw[i].nt == nt && m->bw[i].mib == mib) return i;
    if (m->n_bw >= ROOF_MAX_BW) return -1;
    const int i = m->n_bw, reps = m->reps < 1 ? 1 : m->reps > 16 ? 16 : m->reps;
    m->bw[i].nt = nt; m->bw[i].mib = mib;
    m->bw[i].nv = roof_bw_runs(nt, mib, reps, m->bw[i].v);
    if (!m->bw[i].nv) return -1;
    m->bw[i].r = roof_summary(m->bw[i].v, m->bw[i].nv);
    m->n_bw++;
    return i;
}

/* Read bandwidth (GB/s) on nt threads of an array of about `bytes`: the summary of every probe of
 * that size so far (probed on first use). */
static roof_rate roof_bw(roof_machine *m, int nt, double bytes)
{
    const int i = roof_bw_entry(m, nt, bytes);
    return i < 0 ? (roof_rate){ 0, 0, 0, 0 } : m->bw[i].r;
}

/* One more probe of that size, run between rounds of the tests it bounds (once per m->round
 * however many tests share the size): the machine's bandwidth drifts (other tenants of the host),
 * so the bound takes the best of probes spread over the tests' own time, and the roofline column
 * shows their spread. */
static void roof_bw_sample(roof_machine *m, int nt, double bytes)
{
    const int i = roof_bw_entry(m, nt, bytes);
    if (i < 0 || m->bw[i].nv >= ROOF_MAX_SAMPLES || m->bw[i].round == m->round) return;
    m->bw[i].round = m->round;
    if (roof_bw_runs(nt, m->bw[i].mib, 1, m->bw[i].v + m->bw[i].nv)) m->bw[i].nv++;
    m->bw[i].r = roof_summary(m->bw[i].v, m->bw[i].nv);
}

/* The unit kernel set ks uses for the products of weights of type t, and the share of its peak one
 * multiply-add of the model takes (the AMX set's BF16: three bfloat16 tile products, so 1/3). -1: no
 * vector unit (the reference set). */
static int roof_unit_for(const kernel_set *ks, uint32_t t, double *share)
{
    /* k-quants (activations in Q8_K blocks): every vector set has integer dot-product kernels for
     * them, the AMX set its AVX-512 ones */
    const int kq = t != GGML_Q8_0 && t != GGML_Q4_0 && act_is_quantized(t), quant = kq || act_is_q8(t);
    *share = 1.0;
    if (kq && !strcmp(ks->name, "amx")) return UNIT_VNNI512;
    if (!strcmp(ks->name, "amx")) {
        if (quant) return UNIT_AMX_INT8;
        if (act_kind(ks, t) == ACT_BF16X3) { *share = 1.0 / 3; return UNIT_AMX_BF16; }
        return UNIT_FMA512;
    }
    if (!strncmp(ks->name, "avx512", 6)) return quant ? UNIT_VNNI512 : UNIT_FMA512;
    if (!strcmp(ks->name, "avx2")) return quant ? UNIT_INT8_AVX2 : UNIT_FMA256;
    if (!strcmp(ks->name, "neon")) return quant ? (roof_has(UNIT_NEON_SDOT) ? UNIT_NEON_SDOT : -1) : UNIT_NEON_FMA;
    return -1;
}

/* What a token of a test must do. */
typedef struct {
    double once;       /* bytes read once per token (every distinct weight; a shared block's first pass) */
    double block;      /* bytes of the shared block, read `depth - 1` more times per token (0: none) */
    double depth;      /* mean passes of the block */
    double kv;         /* K/V cache bytes read per token */
    double flops;      /* FLOPs per token */
    double per_batch;  /* divide the weight bytes by this many tokens (pp: one pass per batch) */
} roof_work;

/* The bound (tok/s) of work w on nt threads with set ks for weights of type t, and a description. */
static double roof_bound(roof_machine *m, int nt, const kernel_set *ks, uint32_t t, const roof_work *w,
                         char *what, size_t cap)
{
    const double ws = w->once + w->kv, pb = w->per_batch > 1 ? w->per_batch : 1;
    const roof_rate bw = roof_bw(m, nt, ws);
    roof_rate bb = { 0, 0, 0, 0 };
    double tm = 0;
    if (bw.best > 0) tm = (w->once / pb + w->kv) / (bw.best * 1e9);
    if (w->block > 0 && w->depth > 1) {
        bb = roof_bw(m, nt, w->block);
        if (bb.best > 0) tm += (w->depth - 1) * w->block / pb / (bb.best * 1e9);
    }
    double share;
    const int u = roof_unit_for(ks, t, &share);
    const roof_rate pk = roof_unit(m, nt, u);
    const double tc = pk.best > 0 ? w->flops / (pk.best * share * 1e9) : 0;
    const double tmax = tm > tc ? tm : tc;
    if (tmax <= 0) { snprintf(what, cap, "-"); return 0; }
    if (tm >= tc) {
        if (w->block > 0 && w->depth > 1)
            snprintf(what, cap, "read %.0f MB at %.1f GB/s [probes %.1f-%.1f, %d] + %.2f x %.0f MB at %.1f [%.1f-%.1f, %d]",
                     (w->once / pb + w->kv) / 1e6, bw.best, bw.min, bw.best, bw.n, w->depth - 1, w->block / pb / 1e6,
                     bb.best, bb.min, bb.best, bb.n);
        else
            snprintf(what, cap, "read %.0f MB at %.1f GB/s [probes %.1f-%.1f, %d]", (w->once / pb + w->kv) / 1e6,
                     bw.best, bw.min, bw.best, bw.n);
    } else {
        snprintf(what, cap, "%s %.0f GOP/s%s: %.0f MFLOP", roof_unit_names[u], pk.best, share < 1 ? " / 3" : "", w->flops / 1e6);
    }
    return 1 / tmax;
}

/* Probe again the bandwidths work w is bounded by (roof_bw_sample), in the round m->round. */
static void roof_sample_work(roof_machine *m, int nt, const roof_work *w)
{
    roof_bw_sample(m, nt, w->once + w->kv);
    if (w->block > 0 && w->depth > 1) roof_bw_sample(m, nt, w->block);
}

/* The roofline column: tok/s as a share of the bound. A test cannot run faster than the machine,
 * so when it outran every probe (they all missed the machine's best moments) the bound is the
 * test's own rate: the share never passes 100%. */
static double roof_column(double tok_s, double bound, const char *what, char *out, size_t cap)
{
    if (bound <= 0) { snprintf(out, cap, "-"); return 0; }
    if (tok_s > bound) {
        snprintf(out, cap, "100%% of %.0f (above the probes' %.0f: %s)", tok_s, bound, what);
        return 1;
    }
    snprintf(out, cap, "%.0f%% of %.0f (%s)", 100 * tok_s / bound, bound, what);
    return tok_s / bound;
}

/* One line per unit this machine has, for nt threads. */
static void roof_print_units(roof_machine *m, int nt)
{
    printf("# peaks, %d thread%s (best of %d, GOP/s = 2 x multiply-adds):", nt, nt > 1 ? "s" : "", m->reps);
    for (int u = 0; u < UNIT_COUNT; u++) {
        if (!roof_has(u)) continue;
        const roof_rate r = roof_unit(m, nt, u);
        printf(" %s %.0f (median %.0f);", roof_unit_names[u], r.best, r.med);
    }
    printf("\n");
}
#endif
