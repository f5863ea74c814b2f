/* check.h - the tiny test harness of libmor's C tests.
 * Each CHECK prints "ok - what" or "FAIL - what (file:line)"; SKIP prints
 * "skip - why" for a check that cannot run here (a CPU feature, an optional
 * tool or file missing: say what to install); check_done() prints
 * "# checks: P passed, F failed" (", S skipped" when S > 0; read by
 * tests/run.sh) and returns the exit code. A skip is never a failure. */
#ifndef MOR_CHECK_H
#define MOR_CHECK_H
#include <stdio.h>
#include <math.h>
#include <stdarg.h>

static int check_passed_, check_failed_, check_skipped_;

static inline int check_(int cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    printf(cond ? "ok - " : "FAIL - ");
    va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
    if (!cond) printf(" (%s:%d)", file, line);
    printf("\n");
    if (cond) check_passed_++; else check_failed_++;
    return cond;
}
#define CHECK(cond, ...) check_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

static inline void skip_(const char *fmt, ...)
{
    va_list ap;
    printf("skip - ");
    va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
    printf("\n");
    check_skipped_++;
}
#define SKIP(...) skip_(__VA_ARGS__)

/* max |a-b| over n floats */
static inline double check_maxdiff(const float *a, const float *b, long n)
{
    double m = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

static inline int check_done(void)
{
    if (check_skipped_)
        printf("# checks: %d passed, %d failed, %d skipped\n", check_passed_, check_failed_, check_skipped_);
    else
        printf("# checks: %d passed, %d failed\n", check_passed_, check_failed_);
    fflush(stdout);
    return check_failed_ ? 1 : 0;
}
#endif
