/* threadpool.c - persistent pthreads (or an OpenMP region) for a context.
 *
 * A job is published by storing fn/arg/n and bumping `gen`. Every thread,
 * the caller included, takes chunks from the atomic counter `next` until
 * none is left. A worker joins a job only through the `active` count: it
 * increments it, then checks that the job is still the current one and not
 * finished; the caller, once the chunks are gone, marks the job finished and
 * waits for `active` to drop to zero. So a worker that wakes up late never
 * touches a job the caller has returned from, and the caller never waits
 * for a worker that has not begun.
 *
 * Waiting (for a job, or for active workers) spins with pause for a few
 * microseconds, then yields the CPU for a while, then sleeps on a condition
 * variable. The sleep handshakes are race-free because both sides use
 * sequentially consistent atomics: the caller bumps gen and then reads
 * n_sleeping, a worker bumps n_sleeping (under the mutex) and then re-reads
 * gen; likewise for active and caller_sleeping. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "status.h"
#include "threadpool.h"
#ifdef MOR_USE_OPENMP
#include <omp.h>
#endif

#define SPIN_ITERS  256    /* pause loops (a few us) before yielding */
#define YIELD_ITERS 2000   /* sched_yield loops (~0.1-1 ms) before sleeping */

struct thread_pool {
    int32_t         n;             /* threads including the caller */
    pthread_t      *threads;       /* n - 1 workers */
    int32_t         n_started;
    /* the current job; written by the caller only while no worker is active in it */
    chunk_fn    fn;
    void           *arg;
    int64_t         n_chunks;
    atomic_llong    next;          /* next chunk to take */
    atomic_uint     gen;           /* job number */
    atomic_uint     finished;      /* the last job whose chunks are all taken */
    atomic_int      active;        /* workers inside the current job */
    atomic_int      n_sleeping;
    atomic_int      stop;
    atomic_int      caller_sleeping;
    pthread_mutex_t mu;
    pthread_cond_t  cv, done_cv;
    struct worker { thread_pool *p; int32_t ith; } *workers;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void take_chunks(thread_pool *p, int32_t ith)
{
    for (;;) {
        int64_t c = atomic_fetch_add(&p->next, 1);
        if (c >= p->n_chunks) return;
        p->fn(p->arg, c, ith);
    }
}

static void *worker_main(void *varg)
{
    struct worker *w = varg;
    thread_pool *p = w->p;
    unsigned seen = 0;   /* gen at creation: a job may be published before this thread first runs */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) { cpu_relax(); continue; }
            if (spins < SPIN_ITERS + YIELD_ITERS) { sched_yield(); continue; }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        atomic_fetch_add(&p->active, 1);
        /* still job g, and chunks left: the caller waits for us before it returns */
        if (atomic_load(&p->gen) == g && atomic_load(&p->finished) != g) take_chunks(p, w->ith);
        if (atomic_fetch_sub(&p->active, 1) == 1 && atomic_load(&p->caller_sleeping)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_broadcast(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

void pool_free(thread_pool *p)
{
    if (!p) return;
    if (p->n_started) {
        atomic_store(&p->stop, 1);
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int32_t i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done_cv);
    free(p->threads);
    free(p->workers);
    free(p);
}

mor_status pool_create(int32_t n_threads, thread_pool **out)
{
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    thread_pool *p = calloc(1, sizeof *p);
    if (!p) return err_set(MOR_E_NOMEM, "out of memory");
    p->n = n_threads;
    atomic_init(&p->next, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->finished, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->caller_sleeping, 0);
    if (pthread_mutex_init(&p->mu, NULL)) { free(p); return err_set(MOR_E_NOMEM, "cannot create a mutex"); }
    if (pthread_cond_init(&p->cv, NULL)) {
        pthread_mutex_destroy(&p->mu); free(p);
        return err_set(MOR_E_NOMEM, "cannot create a condition variable");
    }
    if (pthread_cond_init(&p->done_cv, NULL)) {
        pthread_cond_destroy(&p->cv); pthread_mutex_destroy(&p->mu); free(p);
        return err_set(MOR_E_NOMEM, "cannot create a condition variable");
    }
#ifndef MOR_USE_OPENMP
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->threads || !p->workers) { pool_free(p); return err_set(MOR_E_NOMEM, "out of memory"); }
        for (int32_t i = 0; i < n_threads - 1; i++) {
            p->workers[i].p = p;
            p->workers[i].ith = i + 1;
            if (pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i])) {
                pool_free(p);
                return err_set(MOR_E_NOMEM, "cannot start worker thread %d of %d", i + 1, n_threads - 1);
            }
            p->n_started++;
        }
    }
#endif
    *out = p;
    return MOR_OK;
}

int32_t pool_size(const thread_pool *p) { return p ? p->n : 1; }

void pool_run(thread_pool *p, int64_t n_chunks, chunk_fn fn, void *arg)
{
    if (n_chunks <= 0) return;
    if (!p || p->n <= 1 || n_chunks == 1) {
        for (int64_t c = 0; c < n_chunks; c++) fn(arg, c, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_chunks = n_chunks;
    atomic_store(&p->next, 0);
#ifdef MOR_USE_OPENMP
    const int32_t n = p->n;
#pragma omp parallel num_threads(n)
    take_chunks(p, (int32_t)omp_get_thread_num());
#else
    unsigned g = atomic_fetch_add(&p->gen, 1) + 1;
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    take_chunks(p, 0);
    atomic_store(&p->finished, g);
    int spins = 0;
    while (atomic_load(&p->active) > 0) {   /* workers still inside a chunk of this job */
        if (++spins < SPIN_ITERS) { cpu_relax(); continue; }
        if (spins < SPIN_ITERS + YIELD_ITERS) { sched_yield(); continue; }
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeping, 1);
        while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done_cv, &p->mu);
        atomic_store(&p->caller_sleeping, 0);
        pthread_mutex_unlock(&p->mu);
    }
#endif
}
