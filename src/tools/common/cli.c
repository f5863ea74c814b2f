/* cli.c - strict command-line parsing, escaped messages and output-file
 * safety for every tool (cli.h). */
#include "cli.h"
#include "mor.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog_name = "mor";

void cli_init(const char *prog) { if (prog && *prog) prog_name = prog; }
const char *cli_prog(void) { return prog_name; }

void cli_put_escaped(FILE *f, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
}

static void vmessage(const char *kind, const char *fmt, va_list ap)
{
    char buf[2048];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    fflush(stdout);   /* what the tool printed so far comes first */
    fprintf(stderr, "%s: %s", prog_name, kind);
    cli_put_escaped(stderr, buf, len);
}

void cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("", fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see %s --help)\n", prog_name);
    exit(2);
}

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("", fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

void cli_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("note: ", fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

const char *cli_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) cli_usage_error("%s needs a value", argv[*i]);
    return argv[++*i];
}

/* Only the characters of a plain decimal number: strtoll/strtod also take
 * leading blanks, hexadecimal, "inf" and "nan", which no flag wants. */
static int plain_number(const char *v, int fraction)
{
    if (!*v) return 0;
    for (const char *p = v; *p; p++) {
        if (*p >= '0' && *p <= '9') continue;
        if ((*p == '-' || *p == '+') && (p == v || (fraction && (p[-1] == 'e' || p[-1] == 'E')))) continue;
        if (fraction && (*p == '.' || *p == 'e' || *p == 'E')) continue;
        return 0;
    }
    return 1;
}

long long cli_int(const char *flag, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long x = plain_number(v, 0) ? strtoll(v, &end, 10) : 0;
    if (!plain_number(v, 0) || *end || errno == ERANGE || x < lo || x > hi)
        cli_usage_error("%s: expected an integer in [%lld, %lld], got '%s'", flag, lo, hi, v);
    return x;
}

uint64_t cli_u64(const char *flag, const char *v)
{
    char *end;
    int digits = *v != 0;
    for (const char *p = v; *p; p++) digits &= *p >= '0' && *p <= '9';
    errno = 0;
    unsigned long long x = digits ? strtoull(v, &end, 10) : 0;
    if (!digits || *end || errno == ERANGE)
        cli_usage_error("%s: expected an integer in [0, 18446744073709551615], got '%s'", flag, v);
    return (uint64_t)x;
}

double cli_double(const char *flag, const char *v, double lo, double hi, int lo_open)
{
    char *end;
    errno = 0;
    double x = plain_number(v, 1) ? strtod(v, &end) : NAN;
    if (!plain_number(v, 1) || *end || errno == ERANGE || !isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        cli_usage_error("%s: expected a number in %c%g, %g], got '%s'", flag, lo_open ? '(' : '[', lo, hi, v);
    return x;
}

/* Split v at commas into at most cap items; each item goes to item(). */
static int split_list(const char *flag, const char *v, int cap, void (*item)(const char *, const char *, void *, int),
                      void *ctx)
{
    int n = 0;
    const char *p = v;
    for (;;) {
        size_t len = strcspn(p, ",");
        char buf[64];
        if (len == 0 || len >= sizeof buf) cli_usage_error("%s: bad list '%s'", flag, v);
        if (n == cap) cli_usage_error("%s: at most %d values, got '%s'", flag, cap, v);
        memcpy(buf, p, len);
        buf[len] = 0;
        item(flag, buf, ctx, n++);
        if (!p[len]) break;
        p += len + 1;
    }
    return n;
}

typedef struct { int *i; float *f; long long lo, hi; double dlo, dhi; } list_ctx;

static void int_item(const char *flag, const char *s, void *c, int k)
{
    list_ctx *l = c;
    l->i[k] = (int)cli_int(flag, s, l->lo, l->hi);
}

static void float_item(const char *flag, const char *s, void *c, int k)
{
    list_ctx *l = c;
    l->f[k] = (float)cli_double(flag, s, l->dlo, l->dhi, 0);
}

int cli_int_list(const char *flag, const char *v, int *out, int cap, long long lo, long long hi)
{
    list_ctx l = { out, NULL, lo, hi, 0, 0 };
    return split_list(flag, v, cap, int_item, &l);
}

int cli_float_list(const char *flag, const char *v, float *out, int cap, double lo, double hi)
{
    list_ctx l = { NULL, out, 0, 0, lo, hi };
    return split_list(flag, v, cap, float_item, &l);
}

int cli_choice(const char *flag, const char *v, const char *const *names)
{
    char list[512];
    size_t k = 0;
    for (int i = 0; names[i]; i++) {
        if (!strcmp(v, names[i])) return i;
        k += (size_t)snprintf(list + k, k < sizeof list ? sizeof list - k : 0, "%s%s", i ? "|" : "", names[i]);
    }
    cli_usage_error("%s: expected %s, got '%s'", flag, list, v);
}

void cli_exit(const char *flag, const char *v, int *mode, float *threshold)
{
    static const char *const modes[] = { "learned", "margin", "saturation", NULL };
    static const int values[] = { MOR_EXIT_LEARNED, MOR_EXIT_MARGIN, MOR_EXIT_SATURATION };
    const char *colon = strchr(v, ':');
    if (!strcmp(v, "none")) { *mode = MOR_EXIT_NONE; return; }
    if (!colon) cli_usage_error("%s needs MODE:T (learned:Q, margin:T, saturation:T) or none", flag);
    char name[16];
    const size_t n = (size_t)(colon - v);
    if (n >= sizeof name) cli_usage_error("%s: unknown mode in '%s'", flag, v);
    memcpy(name, v, n); name[n] = 0;
    *mode = values[cli_choice(flag, name, modes)];
    *threshold = (float)cli_double(flag, colon + 1, -1e30, 1e30, 0);
}

void cli_conflict(int a_set, const char *a, int b_set, const char *b)
{
    if (a_set && b_set) cli_usage_error("%s and %s cannot be used together", a, b);
}

int cli_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cli_refuse_overwrite(const char *out, const char *const *inputs, int n)
{
    for (int i = 0; i < n; i++)
        if (inputs[i] && cli_same_file(out, inputs[i])) {
            if (!strcmp(out, inputs[i])) cli_error("refusing to overwrite the input %s", out);
            else cli_error("refusing to overwrite the input %s (the output %s is the same file)", inputs[i], out);
            return 1;
        }
    return 0;
}

char *cli_tmp_path(const char *out)
{
    size_t n = strlen(out) + 32;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s.tmp.%ld", out, (long)getpid());
    return p;
}

FILE *cli_out_open(const char *out, char **tmp)
{
    *tmp = cli_tmp_path(out);
    if (!*tmp) { cli_error("out of memory"); return NULL; }
    FILE *f = fopen(*tmp, "wb");
    if (!f) {
        cli_error("cannot create %s: %s", *tmp, strerror(errno));
        free(*tmp);
        *tmp = NULL;
    }
    return f;
}

int cli_out_close(FILE *f, char **tmp, const char *out, int ok)
{
    int closed = fclose(f) == 0;
    if (ok && !closed) cli_error("cannot write %s: %s", *tmp, strerror(errno));
    ok = ok && closed;
    if (ok && rename(*tmp, out) != 0) {
        cli_error("cannot rename %s to %s: %s", *tmp, out, strerror(errno));
        ok = 0;
    }
    if (!ok) remove(*tmp);
    free(*tmp);
    *tmp = NULL;
    return ok;
}

int cli_isatty(FILE *f) { return isatty(fileno(f)); }
