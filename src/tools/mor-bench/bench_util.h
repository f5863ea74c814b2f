/* bench_util.h - the clock and the median every part of mor-bench times with.
 * Header-only (static functions), included by mor-bench.c and its bench_*.h. */
#ifndef MOR_BENCH_UTIL_H
#define MOR_BENCH_UTIL_H
#include <stdlib.h>
#include <time.h>

/* Wall seconds from a monotonic clock. */
static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* qsort order of doubles, ascending. */
static int bench_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
#endif
