/* check.h - the tiny test harness of libmor's C tests.
 * Each CHECK prints "ok - what" or "FAIL - what (file:line)"; check_done()
 * prints "# checks: P passed, F failed" (read by tests/run.sh) and returns the
 * exit code. */
#ifndef MOR_CHECK_H
#define MOR_CHECK_H
#include <stdio.h>
#include <math.h>
#include <stdarg.h>

static int check_passed_, check_failed_;

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
    printf("# checks: %d passed, %d failed\n", check_passed_, check_failed_);
    fflush(stdout);
    return check_failed_ ? 1 : 0;
}
#endif
