/* check.h - the tiny test harness of libmor's C tests.
 * Each CHECK prints "ok - what" or "FAIL - what (file:line)"; SKIP prints
 * "skip - why" for a check that cannot run here (a CPU feature, an optional
 * tool or file missing: say what to install); check_done() prints
 * "# checks: P passed, F failed" (", S skipped" when S > 0; " (N
 * scenarios)" when N > 0; read by tests/run.sh) and returns the exit code.
 * A skip is never a failure.
 *
 * A CHECK is a claim the test proves. A setup step (a model loads, a server
 * is created, the requests run to the end) proves nothing when it works, so
 * it is a REQUIRE: silent and uncounted when it holds, "FAIL - setup: what
 * (file:line)" and one failure when it does not; it returns the condition,
 * so the caller abandons the scenario:
 *     if (!REQUIRE(s != NULL, "server create: %s", mor_last_error())) return;
 * SCENARIO("what") starts one (prints "# scenario: what" and counts it), so
 * the checks line says over how many scenarios the checks were made. */
#ifndef MOR_CHECK_H
#define MOR_CHECK_H
#include <stdio.h>
#include <math.h>
#include <stdarg.h>

static int check_passed_, check_failed_, check_skipped_, check_scenarios_;

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

static inline int require_(int cond, const char *file, int line, const char *fmt, ...)
{
    if (cond) return 1;
    va_list ap;
    printf("FAIL - setup: ");
    va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
    printf(" (%s:%d)\n", file, line);
    check_failed_++;
    return 0;
}
#define REQUIRE(cond, ...) require_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

static inline void scenario_(const char *fmt, ...)
{
    va_list ap;
    printf("# scenario: ");
    va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
    printf("\n");
    check_scenarios_++;
}
#define SCENARIO(...) scenario_(__VA_ARGS__)

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
    printf("# checks: %d passed, %d failed", check_passed_, check_failed_);
    if (check_skipped_) printf(", %d skipped", check_skipped_);
    if (check_scenarios_) printf(" (%d scenarios)", check_scenarios_);
    printf("\n");
    fflush(stdout);
    return check_failed_ ? 1 : 0;
}
#endif
