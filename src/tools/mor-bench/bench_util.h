/* bench_util.h - the clock and the median every part of mor-bench times with,
 * and the option values its modes share (lists of names, --kernels).
 * Header-only (static functions), included by mor-bench.c and its bench_*.h. */
#ifndef MOR_BENCH_UTIL_H
#define MOR_BENCH_UTIL_H
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "cli.h"

/* A comma-separated list of names for option `flag`, every one checked against names (a usage error
 * otherwise); the first `cap` indices into out (out may be NULL: only checked). Returns the count. */
static int bench_choice_list(const char *flag, const char *list, const char *const *names, int *out, int cap)
{
    int n = 0;
    for (const char *c = list;;) {
        char item[32];
        const size_t len = strcspn(c, ",");
        if (len == 0 || len >= sizeof item) cli_usage_error("%s: bad list '%s'", flag, list);
        memcpy(item, c, len);
        item[len] = 0;
        const int i = cli_choice(flag, item, names);
        if (out && n < cap) out[n] = i;
        n++;
        if (!c[len]) return n;
        c += len + 1;
    }
}

/* --kernels: "auto" (the CPU's best) or a kernel set by name; NULL (after a message) if the CPU lacks it. */
static const kernel_set *bench_kernels(const char *kern)
{
    if (!strcmp(kern, "auto")) return kernels_best();
    static const char *const isa[] = { "ref", "avx2", "avx512", "amx", "neon", NULL };
    const kernel_set *ks = kernels_get(cli_choice("--kernels", kern, isa));
    if (!ks) cli_error("kernel set '%s' is not available here", kern);
    return ks;
}

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
