/* gemm.c - the matrix products of training, and the thread pool they run on.
 *
 * Training is almost all products of activations with weights, in three
 * shapes (y = x W^T, dx = dy W, dW += dy^T x), so one packed, blocked product
 * C = op(A) op(B) serves all of them: A and B are copied into panels of MR
 * rows / NR columns (which is where the transposes happen, for free), and a
 * register-blocked MR x NR micro-kernel runs over each pair of panels. On
 * x86-64 with AVX2+FMA the micro-kernel is vectorised (chosen at run time);
 * elsewhere, and in the double build, it is plain C. Rows of C are split
 * between threads; the sum over k always runs in the same blocks and order,
 * so results do not depend on the number of threads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "ops.h"

#if defined(__x86_64__) && !defined(TR_DOUBLE) && (defined(__GNUC__) || defined(__clang__))
#define TR_HAVE_AVX2 1
#include <immintrin.h>
#endif

#define MR 6
#define NR 16
#define KC 256
#define MC 96
#define NC 512

/* ------------------------------------------------------------------------ */
/* Thread pool                                                              */
/* ------------------------------------------------------------------------ */

#define TR_MAX_THREADS 64
#define TR_SLOTS 4

static struct {
    int n;                          /* threads including the caller */
    pthread_t th[TR_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;
    int pending, stop;
    tr_task_fn fn;
    void *ctx;
    int n_tasks, next;
    real *scr[TR_MAX_THREADS][TR_SLOTS];
    size_t scr_n[TR_MAX_THREADS][TR_SLOTS];
} pool = { 1, {0}, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
           0, 0, 0, NULL, NULL, 0, 0, {{0}}, {{0}} };

static void run_tasks(int thread)
{
    for (;;) {
        pthread_mutex_lock(&pool.mu);
        int t = pool.next < pool.n_tasks ? pool.next++ : -1;
        pthread_mutex_unlock(&pool.mu);
        if (t < 0) return;
        pool.fn(pool.ctx, t, thread);
    }
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&pool.mu);
        while (pool.gen == seen && !pool.stop) pthread_cond_wait(&pool.go, &pool.mu);
        if (pool.stop) { pthread_mutex_unlock(&pool.mu); return NULL; }
        seen = pool.gen;
        pthread_mutex_unlock(&pool.mu);
        run_tasks(id);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0) pthread_cond_signal(&pool.done);
        pthread_mutex_unlock(&pool.mu);
    }
}

void tr_set_threads(int n)
{
    if (n < 1) n = 1;
    if (n > TR_MAX_THREADS) n = TR_MAX_THREADS;
    if (pool.n > 1) {   /* stop the old workers */
        pthread_mutex_lock(&pool.mu);
        pool.stop = 1;
        pthread_cond_broadcast(&pool.go);
        pthread_mutex_unlock(&pool.mu);
        for (int i = 1; i < pool.n; i++) pthread_join(pool.th[i], NULL);
        pool.stop = 0;
    }
    for (int i = 0; i < TR_MAX_THREADS; i++)
        for (int s = 0; s < TR_SLOTS; s++)
            if (i >= n) { free(pool.scr[i][s]); pool.scr[i][s] = NULL; pool.scr_n[i][s] = 0; }
    pool.n = 1;
    for (int i = 1; i < n; i++) {
        if (pthread_create(&pool.th[i], NULL, worker, (void *)(intptr_t)i) != 0) break;
        pool.n = i + 1;
    }
    if (n == 1)   /* also release the caller's scratch: a clean exit for leak checkers */
        for (int s = 0; s < TR_SLOTS; s++) { free(pool.scr[0][s]); pool.scr[0][s] = NULL; pool.scr_n[0][s] = 0; }
}

int tr_threads(void) { return pool.n; }

void tr_parallel(int n_tasks, tr_task_fn fn, void *ctx)
{
    if (n_tasks <= 0) return;
    if (pool.n == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    pool.fn = fn; pool.ctx = ctx; pool.n_tasks = n_tasks; pool.next = 0;
    pool.pending = pool.n - 1;
    pool.gen++;
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
    run_tasks(0);
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}

real *tr_scratch(int thread, int slot, size_t n)
{
    if (pool.scr_n[thread][slot] < n) {
        free(pool.scr[thread][slot]);
        size_t bytes = (n * sizeof(real) + 63) / 64 * 64;
        pool.scr[thread][slot] = aligned_alloc(64, bytes);
        pool.scr_n[thread][slot] = pool.scr[thread][slot] ? n : 0;
        if (!pool.scr[thread][slot]) abort();   /* tools only: no way to go on without scratch */
    }
    return pool.scr[thread][slot];
}

/* ------------------------------------------------------------------------ */
/* Packing and micro-kernels                                                */
/* ------------------------------------------------------------------------ */

/* op(A)[i0.., k0..] into MR-row panels: Ap[panel][p][ii] */
static void pack_a(real *Ap, const real *A, int lda, int ta, int i0, int mc, int k0, int kc)
{
    for (int ip = 0; ip < mc; ip += MR) {
        int mr = mc - ip < MR ? mc - ip : MR;
        real *dst = Ap + (size_t)ip * kc;
        for (int p = 0; p < kc; p++) {
            for (int ii = 0; ii < mr; ii++) {
                int i = i0 + ip + ii, k = k0 + p;
                dst[p * MR + ii] = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
            }
            for (int ii = mr; ii < MR; ii++) dst[p * MR + ii] = 0;
        }
    }
}

/* op(B)[k0.., j0..] into NR-column panels: Bp[panel][p][jj] */
static void pack_b(real *Bp, const real *B, int ldb, int tb, int k0, int kc, int j0, int nc)
{
    for (int jp = 0; jp < nc; jp += NR) {
        int nr = nc - jp < NR ? nc - jp : NR;
        real *dst = Bp + (size_t)jp * kc;
        if (!tb) {
            for (int p = 0; p < kc; p++) {
                const real *src = B + (size_t)(k0 + p) * ldb + j0 + jp;
                for (int jj = 0; jj < nr; jj++) dst[p * NR + jj] = src[jj];
                for (int jj = nr; jj < NR; jj++) dst[p * NR + jj] = 0;
            }
        } else {
            for (int jj = 0; jj < NR; jj++) {
                if (jj >= nr) { for (int p = 0; p < kc; p++) dst[p * NR + jj] = 0; continue; }
                const real *src = B + (size_t)(j0 + jp + jj) * ldb + k0;
                for (int p = 0; p < kc; p++) dst[p * NR + jj] = src[p];
            }
        }
    }
}

static void micro_c(int kc, const real *a, const real *b, real acc[MR][NR])
{
    for (int ii = 0; ii < MR; ii++)
        for (int jj = 0; jj < NR; jj++) acc[ii][jj] = 0;
    for (int p = 0; p < kc; p++)
        for (int ii = 0; ii < MR; ii++) {
            real av = a[p * MR + ii];
            for (int jj = 0; jj < NR; jj++) acc[ii][jj] += av * b[p * NR + jj];
        }
}

#ifdef TR_HAVE_AVX2
__attribute__((target("avx2,fma")))
static void micro_avx2(int kc, const float *a, const float *b, float acc[MR][NR])
{
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
           c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
           c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
           c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b + p * NR), b1 = _mm256_loadu_ps(b + p * NR + 8);
        const float *ap = a + p * MR;
        __m256 x;
        x = _mm256_broadcast_ss(ap + 0); c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(ap + 1); c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(ap + 2); c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(ap + 3); c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(ap + 4); c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(ap + 5); c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    _mm256_storeu_ps(acc[0], c00); _mm256_storeu_ps(acc[0] + 8, c01);
    _mm256_storeu_ps(acc[1], c10); _mm256_storeu_ps(acc[1] + 8, c11);
    _mm256_storeu_ps(acc[2], c20); _mm256_storeu_ps(acc[2] + 8, c21);
    _mm256_storeu_ps(acc[3], c30); _mm256_storeu_ps(acc[3] + 8, c31);
    _mm256_storeu_ps(acc[4], c40); _mm256_storeu_ps(acc[4] + 8, c41);
    _mm256_storeu_ps(acc[5], c50); _mm256_storeu_ps(acc[5] + 8, c51);
}

static int have_avx2(void)
{
    static int v = -1;   /* a benign race: every thread computes the same value */
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return v;
}
#endif

/* ------------------------------------------------------------------------ */
/* The product                                                              */
/* ------------------------------------------------------------------------ */

typedef struct {
    int M, N, K, lda, ta, ldb, tb, ldc, acc, n_tasks;
    const real *A, *B;
    real *C;
} gemm_job;

/* Rows [m0, m1) of C on the calling thread. */
static void gemm_rows(const gemm_job *g, int m0, int m1, int thread)
{
    real *Ap = tr_scratch(thread, 0, (size_t)MC * KC);
    real *Bp = tr_scratch(thread, 1, (size_t)KC * NC);
#ifdef TR_HAVE_AVX2
    const int avx2 = have_avx2();
#endif
    real acc[MR][NR];
    for (int jc = 0; jc < g->N; jc += NC) {
        int nc = g->N - jc < NC ? g->N - jc : NC;
        for (int pc = 0; pc < g->K; pc += KC) {
            int kc = g->K - pc < KC ? g->K - pc : KC;
            int first = pc == 0 && !g->acc;
            pack_b(Bp, g->B, g->ldb, g->tb, pc, kc, jc, nc);
            for (int ic = m0; ic < m1; ic += MC) {
                int mc = m1 - ic < MC ? m1 - ic : MC;
                pack_a(Ap, g->A, g->lda, g->ta, ic, mc, pc, kc);
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = nc - jr < NR ? nc - jr : NR;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int mr = mc - ir < MR ? mc - ir : MR;
#ifdef TR_HAVE_AVX2
                        if (avx2) micro_avx2(kc, Ap + (size_t)ir * kc, Bp + (size_t)jr * kc, acc);
                        else
#endif
                        micro_c(kc, Ap + (size_t)ir * kc, Bp + (size_t)jr * kc, acc);
                        for (int ii = 0; ii < mr; ii++) {
                            real *c = g->C + (size_t)(ic + ir + ii) * g->ldc + jc + jr;
                            if (first) for (int jj = 0; jj < nr; jj++) c[jj] = acc[ii][jj];
                            else       for (int jj = 0; jj < nr; jj++) c[jj] += acc[ii][jj];
                        }
                    }
                }
            }
        }
    }
}

static void gemm_task(void *ctx, int task, int thread)
{
    const gemm_job *g = ctx;
    /* rows of C in whole MR panels, split evenly between tasks */
    int panels = (g->M + MR - 1) / MR;
    int p0 = (int)((int64_t)panels * task / g->n_tasks), p1 = (int)((int64_t)panels * (task + 1) / g->n_tasks);
    int m0 = p0 * MR, m1 = p1 * MR < g->M ? p1 * MR : g->M;
    if (m0 < m1) gemm_rows(g, m0, m1, thread);
}

void tr_gemm_on(int thread, int M, int N, int K, const real *A, int lda, int ta, const real *B, int ldb, int tb,
                real *C, int ldc, int acc)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!acc) for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(real) * (size_t)N);
        return;
    }
    gemm_job g = { M, N, K, lda, ta, ldb, tb, ldc, acc, 1, A, B, C };
    gemm_rows(&g, 0, M, thread);
}

void tr_gemm(int M, int N, int K, const real *A, int lda, int ta, const real *B, int ldb, int tb,
             real *C, int ldc, int acc)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!acc) for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(real) * (size_t)N);
        return;
    }
    gemm_job g = { M, N, K, lda, ta, ldb, tb, ldc, acc, 1, A, B, C };
    int panels = (M + MR - 1) / MR;
    /* small products are not worth waking the pool */
    double work = (double)M * N * K;
    g.n_tasks = work < 2e5 ? 1 : (panels < tr_threads() ? panels : tr_threads());
    tr_parallel(g.n_tasks, gemm_task, &g);
}
