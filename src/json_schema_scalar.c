/* json_schema_scalar.c - see json_schema.h: integers within bounds, and
 * the string formats the converter enforces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"

/* The digits of a range's prefix while it is walked: at most 16 elements. */
typedef struct { const char *el[JS_INT_DIGITS + 1]; char cls[JS_INT_DIGITS + 1][8]; int n; } prefix;

static void alternative(sbuf *o, const prefix *p, const char *tail, int *first)
{
    if (!*first) jsb_add(o, " | ");
    *first = 0;
    for (int i = 0; i < p->n; i++) {
        if (i) jsb_add(o, " ");
        jsb_add(o, p->el[i]);
    }
    if (tail && *tail) { if (p->n) jsb_add(o, " "); jsb_add(o, tail); }
}

static void push(prefix *p, char lo, char hi)
{
    char *c = p->cls[p->n];
    if (lo == hi) { c[0] = '"'; c[1] = lo; c[2] = '"'; c[3] = 0; }
    else { c[0] = '['; c[1] = lo; c[2] = '-'; c[3] = hi; c[4] = ']'; c[5] = 0; }
    p->el[p->n] = c;
    p->n++;
}

/* The numbers from a to b, both n digits (leading zeros allowed past the
 * number's first digit: they are inner digits here), as alternatives: per
 * digit, the first one's and last one's partial ranges around a full middle. */
static void same_length(sbuf *o, prefix *p, const char *a, const char *b, int n, int *first)
{
    static const char nines[] = "9999999999999999", zeros[] = "0000000000000000";
    if (n == 0) { alternative(o, p, NULL, first); return; }
    if (a[0] == b[0]) {
        push(p, a[0], a[0]);
        same_length(o, p, a + 1, b + 1, n - 1, first);
        p->n--;
        return;
    }
    int rest_zero = !strncmp(a + 1, zeros, (size_t)n - 1), rest_nine = !strncmp(b + 1, nines, (size_t)n - 1);
    char lo = a[0], hi = b[0];
    if (!rest_zero) {
        push(p, a[0], a[0]);
        same_length(o, p, a + 1, nines, n - 1, first);
        p->n--;
        lo++;
    }
    if (!rest_nine) hi--;
    if (lo <= hi) {
        push(p, lo, hi);
        if (n > 1) {
            sbuf t = { 0 };
            jsb_fmt(&t, "[0-9]{%d}", n - 1);
            alternative(o, p, t.p ? t.p : "[0-9]", first);
            if (t.oom) o->oom = 1;
            free(t.p);
        } else alternative(o, p, NULL, first);
        p->n--;
    }
    if (!rest_nine) {
        push(p, b[0], b[0]);
        same_length(o, p, zeros, b + 1, n - 1, first);
        p->n--;
    }
}

static int digits_of(uint64_t v)
{
    int d = 1;
    while (v >= 10) { v /= 10; d++; }
    return d;
}

static uint64_t pow10u(int k)
{
    uint64_t v = 1;
    while (k-- > 0) v *= 10;
    return v;
}

/* Non-negative integers in [a, b] (b_inf: no upper bound), no leading zeros. */
static void non_negative(sbuf *o, uint64_t a, uint64_t b, int b_inf, int *first)
{
    int da = digits_of(a), db = b_inf ? JS_INT_DIGITS : digits_of(b);
    for (int len = da; len <= db; len++) {
        uint64_t lo = len == da ? a : pow10u(len - 1);
        if (b_inf && len > da) {
            /* every longer number at once: its first digit, then the rest */
            prefix p = { .n = 0 };
            sbuf t = { 0 };
            jsb_fmt(&t, "[1-9] [0-9]{%d,%d}", len - 1, JS_INT_DIGITS - 1);
            alternative(o, &p, t.p ? t.p : "", first);
            if (t.oom) o->oom = 1;
            free(t.p);
            return;
        }
        uint64_t hi = !b_inf && len == db ? b : pow10u(len) - 1;
        char as[24], bs[24];
        snprintf(as, sizeof as, "%0*llu", len, (unsigned long long)lo);
        snprintf(bs, sizeof bs, "%0*llu", len, (unsigned long long)hi);
        prefix p = { .n = 0 };
        same_length(o, &p, as, bs, len, first);
    }
}

void js_int_range(sbuf *o, int64_t lo, int has_lo, int64_t hi, int has_hi)
{
    const int64_t big = (int64_t)pow10u(JS_INT_DIGITS) - 1;   /* the most digits written */
    if (has_lo && lo < -big) has_lo = 0;
    if (has_hi && hi > big) has_hi = 0;
    int first = 1;
    if (!has_lo || lo < 0) {
        /* "-" and a magnitude in [max(1, -hi), -lo]; no "-0" */
        uint64_t m_lo = has_hi && hi < 0 ? (uint64_t)(-hi) : 1;
        jsb_add(o, "\"-\" ( ");
        int f2 = 1;
        non_negative(o, m_lo, has_lo ? (uint64_t)(-lo) : 0, !has_lo, &f2);
        jsb_add(o, " )");
        first = 0;
    }
    if (!has_hi || hi >= 0) {
        if (!first) jsb_add(o, " | ");
        int f2 = 1;
        non_negative(o, has_lo && lo > 0 ? (uint64_t)lo : 0, has_hi ? (uint64_t)hi : 0, !has_hi, &f2);
    }
}

/* RFC 3339 (JSON Schema's date, time and date-time), RFC 4122, RFC 1123
 * host names, dotted IPv4, and e-mail addresses of the dot-atom form
 * (RFC 5322 without quoted local parts or address literals). */
#define JS_DATE "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"
#define JS_TIME "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" ( [0-5] [0-9] | \"60\" ) " \
                "( \".\" [0-9]{1,9} )? ( [Zz] | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"
#define JS_LABEL "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )?"
#define JS_HOST JS_LABEL " ( \".\" " JS_LABEL " ){0,126}"
#define JS_ATEXT "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]"
#define JS_OCTET "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9] )"

static const struct { const char *name, *gbnf; } FORMATS[] = {
    { "date", JS_DATE },
    { "time", JS_TIME },
    { "date-time", JS_DATE " [Tt] " JS_TIME },
    { "uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}" },
    { "hostname", JS_HOST },
    { "ipv4", JS_OCTET " ( \".\" " JS_OCTET " ){3}" },
    { "email", JS_ATEXT "{1,64} ( \".\" " JS_ATEXT "{1,64} ){0,31} \"@\" " JS_HOST },
};

const char *js_format(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (strlen(FORMATS[i].name) == n && !memcmp(FORMATS[i].name, name, n)) return FORMATS[i].gbnf;
    return NULL;
}
