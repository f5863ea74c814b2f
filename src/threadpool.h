/* threadpool.h - the persistent worker threads of a context.
 *
 * pool_run(p, n, fn, arg) calls fn(arg, c, ith) once for every chunk c in
 * [0, n): the calling thread and the pool's workers take chunks from a
 * shared counter, ith being the taker's index in [0, pool_size(p)) (for
 * per-thread scratch). It returns when every chunk is done. The caller
 * never waits for a worker that has not started: on a machine where other
 * processes hold the cores, it simply does more of the chunks itself. Which
 * thread runs which chunk changes from run to run, so a chunk's result must
 * not depend on it (libmor's kernels compute every output the same way
 * wherever it falls). Workers wait by spinning briefly, then yielding, then
 * sleeping. Built with OpenMP (make OMP=1), the chunks run in an OpenMP
 * parallel region instead and no thread is created here. A pool is used by
 * one thread at a time (its context's). */
#ifndef MOR_THREADPOOL_H
#define MOR_THREADPOOL_H
#include <stdint.h>
#include "mor.h"

typedef struct thread_pool thread_pool;
typedef void (*chunk_fn)(void *arg, int64_t chunk, int32_t ith);

/* n_threads <= 1: no workers, jobs run on the caller. MOR_E_NOMEM if memory
 * or threads cannot be had. */
mor_status pool_create(int32_t n_threads, thread_pool **out);
void       pool_free(thread_pool *p);    /* NULL ok; joins the workers */
int32_t    pool_size(const thread_pool *p);
void       pool_run(thread_pool *p, int64_t n_chunks, chunk_fn fn, void *arg);

/* Chunks of `align` units for n units shared by nth threads: about four per
 * thread (so that a late or slow thread costs little), at least `align`. */
static inline int64_t pool_chunk(int64_t n, int64_t align, int32_t nth)
{
    int64_t want = (n + 4 * (int64_t)nth - 1) / (4 * (int64_t)nth);
    return (want + align - 1) / align * align;
}
#endif
