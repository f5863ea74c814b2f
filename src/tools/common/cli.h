/* cli.h - the command-line conventions every tool of src/tools shares.
 *
 * Strict parsing: a numeric flag's value is the whole string (no trailing
 * junk, no blank, no "0x"), a decimal number in the flag's range; a bad value,
 * an unknown or incomplete flag, or two flags that contradict each other end
 * the program with exit status 2 and one line on stderr naming the flag:
 *
 *     mor-run: -n: expected an integer in [0, 1073741824], got 'abc'
 *
 * Messages are printed escaped: control characters (which may come from a
 * model file, e.g. a token's text) appear as \xNN, never raw on a terminal.
 *
 * Files: cli_refuse_overwrite() stops a tool before it would replace one of
 * its own inputs (the same device and inode, whatever the path's spelling or
 * links). Tools write their output to a temporary file beside it and rename
 * it at the end (cli_tmp_path), so an output is never left half-written.
 *
 * Exit statuses of every tool: 0 success, 1 an error while running (a file
 * that does not load, a failed decode), 2 a bad command line. */
#ifndef MOR_TOOLS_CLI_H
#define MOR_TOOLS_CLI_H
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#  define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#  define CLI_NORETURN __attribute__((noreturn))
#else
#  define CLI_PRINTF(a, b)
#  define CLI_NORETURN
#endif

/* The program name used in messages ("mor-run"); call first in main. */
void cli_init(const char *prog);
const char *cli_prog(void);

/* "PROG: MESSAGE (see --help)" on stderr, then exit(2). */
CLI_NORETURN void cli_usage_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "PROG: MESSAGE" on stderr, escaped; returns 1 (for `return cli_error(...)`). */
int cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "PROG: note: MESSAGE" on stderr, escaped. */
void cli_note(const char *fmt, ...) CLI_PRINTF(1, 2);

/* The value of the flag argv[*i]: argv[*i + 1] (and *i advances), or exit 2
 * with "FLAG needs a value". */
const char *cli_value(int argc, char **argv, int *i);

/* Whole-string decimal numbers within [lo, hi], else exit 2 naming flag. */
long long cli_int(const char *flag, const char *v, long long lo, long long hi);
uint64_t  cli_u64(const char *flag, const char *v);   /* 0 .. 2^64-1, digits only */
/* A finite number in [lo, hi]; lo_open excludes lo itself (e.g. top-p > 0). */
double    cli_double(const char *flag, const char *v, double lo, double hi, int lo_open);
/* A comma-separated list of at most cap numbers ("1,2,3"); returns the count
 * (>= 1). */
int cli_int_list(const char *flag, const char *v, int *out, int cap, long long lo, long long hi);
int cli_float_list(const char *flag, const char *v, float *out, int cap, double lo, double hi);
/* The index of v in names[] (NULL-terminated), else exit 2 listing them. */
int cli_choice(const char *flag, const char *v, const char *const *names);
/* --exit MODE:T: "none" (MOR_EXIT_NONE), or learned:Q / margin:T /
 * saturation:T into *mode (MOR_EXIT_*) and *threshold; the library checks
 * the value against the model, only the spelling is checked here. */
void cli_exit(const char *flag, const char *v, int *mode, float *threshold);

/* Exit 2 with "A and B cannot be used together" when both are set. */
void cli_conflict(int a_set, const char *a, int b_set, const char *b);

/* Write len bytes of s to f with control characters (and DEL) as \xNN. */
void cli_put_escaped(FILE *f, const char *s, size_t len);

/* 1 when both paths exist and are the same file (device and inode). */
int cli_same_file(const char *a, const char *b);
/* If out is one of the n paths in inputs (NULL entries skipped), print
 * "refusing to overwrite the input FILE" and return 1; else 0. */
int cli_refuse_overwrite(const char *out, const char *const *inputs, int n);
/* "OUT.tmp.PID" in a malloc'd string (free it): the temporary file beside
 * OUT that is renamed onto it at the end. NULL when out of memory. */
char *cli_tmp_path(const char *out);

/* Open a temporary file beside out for writing ("wb"); *tmp receives its
 * path. On failure prints a message and returns NULL. */
FILE *cli_out_open(const char *out, char **tmp);
/* Close f; when ok, rename the temporary file onto out, else remove it.
 * Frees *tmp. Returns 1 on success (ok and everything written), else 0 with
 * a message printed. */
int cli_out_close(FILE *f, char **tmp, const char *out, int ok);

/* 1 when f is a terminal (progress lines are drawn only there). */
int cli_isatty(FILE *f);
#endif
