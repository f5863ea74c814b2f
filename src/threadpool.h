/* threadpool.h - the persistent worker threads of a context.
 *
 * pool_run(p, fn, arg) calls fn(arg, i, n) once for every i in [0, n), n =
 * pool_size(p): i = 0 on the calling thread, the others on the pool's
 * workers, and returns when all have returned. Workers wait by spinning
 * briefly (the next job of a decode comes within microseconds), then sleep.
 * Built with OpenMP (make OMP=1), the jobs run in an OpenMP parallel region
 * instead and no thread is created here. A pool is used by one thread at a
 * time (its context's). */
#ifndef MOR_THREADPOOL_H
#define MOR_THREADPOOL_H
#include <stdint.h>
#include "mor.h"

typedef struct mor_pool mor_pool;
typedef void (*mor_task_fn)(void *arg, int32_t ith, int32_t nth);

/* n_threads <= 1: no workers, jobs run on the caller. MOR_E_NOMEM if memory
 * or threads cannot be had. */
mor_status pool_create(int32_t n_threads, mor_pool **out);
void       pool_free(mor_pool *p);    /* NULL ok; joins the workers */
int32_t    pool_size(const mor_pool *p);
void       pool_run(mor_pool *p, mor_task_fn fn, void *arg);

/* The part [*b, *e) of [0, n) that thread ith of nth takes, in units of
 * `align` (the last part takes the remainder). */
static inline void pool_split(int64_t n, int64_t align, int32_t ith, int32_t nth, int64_t *b, int64_t *e)
{
    int64_t units = (n + align - 1) / align;
    int64_t u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    *b = u0 * align < n ? u0 * align : n;
    *e = u1 * align < n ? u1 * align : n;
}
#endif
