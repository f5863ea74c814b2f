/* cputime.h - how work grows, measured without the wall clock (POSIX:
 * clock_gettime; not for the strict C99 header test, hence apart from
 * check.h). */
#ifndef MOR_CPUTIME_H
#define MOR_CPUTIME_H
#include <time.h>

/* CPU seconds the calling thread has used. Tests that guard against
 * super-linear work compare the CPU time of one job at two sizes (n and 4n:
 * about 4x when linear or n log n, 16x when quadratic) against
 * CHECK_GROWTH_4X (12: the cache alone takes a 64 KB -> 256 KB word from 4x to
 * about 7x here), never wall time against a bound: the ratio holds on a slow
 * CPU, under sanitizers or qemu, and with the other cores busy. */
static inline double check_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#define CHECK_GROWTH_4X 12.0
#endif
