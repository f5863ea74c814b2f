/* json_schema_pattern.c - see json_schema.h: a JSON Schema "pattern" (a
 * regular expression) as GBNF for the inside of a JSON string.
 *
 * A recursive-descent parser that writes GBNF as it reads: alternatives,
 * groups ((...) and (?:...)), quantifiers (* + ? {m} {m,} {m,n}, a lazy ?
 * after one changes nothing a grammar can tell), ., classes with ranges and
 * \d \w \s \D \W \S, escapes. The text matched is the JSON text inside the
 * quotes, so a quote, a backslash or a control character the pattern names
 * is written as its JSON escape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"

enum { MAX_DEPTH = 64, MAX_REPEAT = 10000, MAX_RANGES = 512 };

typedef struct {
    const unsigned char *s;
    size_t n, i;
    int depth;
    const char *any;   /* the rule for one JSON string character */
    int *used_any;     /* set when it is written */
    sbuf *o;
    char *why;
    size_t whycap;
    int failed;
} rx;

typedef struct { uint32_t lo, hi; } crange;

static int fail(rx *r, const char *what)
{
    if (!r->failed) snprintf(r->why, r->whycap, "pattern: %s at offset %zu", what, r->i);
    r->failed = 1;
    return -1;
}

/* One code point of UTF-8 at r->i (invalid bytes: refused). */
static int next_cp(rx *r, uint32_t *cp)
{
    const unsigned char *s = r->s + r->i;
    size_t left = r->n - r->i;
    int k = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!k || (size_t)k > left) return fail(r, "invalid UTF-8");
    uint32_t v = k == 1 ? s[0] : k == 2 ? s[0] & 0x1Fu : k == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (int j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80) return fail(r, "invalid UTF-8");
        v = v << 6 | (s[j] & 0x3Fu);
    }
    r->i += (size_t)k;
    *cp = v;
    return 0;
}

/* The JSON text of one character inside a string, as a GBNF literal. */
static void put_char(sbuf *o, uint32_t c)
{
    static const char hex[] = "0123456789abcdef";
    char b[16];
    if (c == '"') { jsb_add(o, "\"\\\\\\\"\""); return; }        /* JSON \"  */
    if (c == '\\') { jsb_add(o, "\"\\\\\\\\\""); return; }       /* JSON \\  */
    if (c == '\n') { jsb_add(o, "\"\\\\n\""); return; }
    if (c == '\t') { jsb_add(o, "\"\\\\t\""); return; }
    if (c == '\r') { jsb_add(o, "\"\\\\r\""); return; }
    if (c < 0x20 || c == 0x7F) {
        snprintf(b, sizeof b, "\"\\\\u00%c%c\"", hex[c >> 4], hex[c & 15]);
        jsb_add(o, b);
        return;
    }
    if (c < 0x80) { snprintf(b, sizeof b, "[\\x%02X]", (unsigned)c); jsb_add(o, b); return; }
    snprintf(b, sizeof b, c > 0xFFFF ? "[\\U%08X]" : "[\\u%04X]", (unsigned)c);
    jsb_add(o, b);
}

static void put_class_cp(sbuf *o, uint32_t c)
{
    char b[16];
    snprintf(b, sizeof b, c < 0x80 ? "\\x%02X" : c > 0xFFFF ? "\\U%08X" : "\\u%04X", (unsigned)c);
    jsb_add(o, b);
}

/* ---- classes ------------------------------------------------------------- */

typedef struct { crange r[MAX_RANGES]; int n, neg; } cset;

static int add_range(rx *r, cset *c, uint32_t lo, uint32_t hi)
{
    if (c->n == MAX_RANGES) return fail(r, "a character class too large");
    if (lo > hi) return fail(r, "a range out of order in a class");
    c->r[c->n].lo = lo;
    c->r[c->n].hi = hi;
    c->n++;
    return 0;
}

/* \d \w \s (neg: \D \W \S) into c; 0, or 1 when e is none of them. */
static int add_shorthand(rx *r, cset *c, unsigned char e, int *negated)
{
    int lower = e | 0x20, rc = 0;
    if (lower != 'd' && lower != 'w' && lower != 's') return 1;
    *negated = e != lower;
    if (lower == 'd') rc = add_range(r, c, '0', '9');
    else if (lower == 'w') rc = add_range(r, c, 'a', 'z') | add_range(r, c, 'A', 'Z') | add_range(r, c, '0', '9') |
                                add_range(r, c, '_', '_');
    else rc = add_range(r, c, ' ', ' ') | add_range(r, c, '\t', '\r');
    return rc;
}

/* An escaped character (after the backslash) other than a shorthand. */
static int escaped_cp(rx *r, uint32_t *cp)
{
    if (r->i >= r->n) return fail(r, "a pattern ending in a backslash");
    unsigned char e = r->s[r->i++];
    static const char ctl[] = "n\nt\tr\rf\fv\v0";
    const char *k = e ? strchr("ntrfv", e) : NULL;
    if (k) { *cp = (uint32_t)ctl[(k - "ntrfv") * 2 + 1]; return 0; }
    if (e == 'x' || e == 'u') {
        int digits = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int j = 0; j < digits; j++, r->i++) {
            int ch = r->i < r->n ? r->s[r->i] : 0, d = ch >= '0' && ch <= '9' ? ch - '0' :
                     (ch | 0x20) >= 'a' && (ch | 0x20) <= 'f' ? (ch | 0x20) - 'a' + 10 : -1;
            if (d < 0) return fail(r, "a bad \\x or \\u escape");
            v = v << 4 | (uint32_t)d;
        }
        *cp = v;
        return 0;
    }
    if ((e >= '1' && e <= '9') || e == 'k') return fail(r, "backreferences are not supported");
    if (e == 'b' || e == 'B') return fail(r, "word boundaries are not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
        return fail(r, "an unknown escape");
    *cp = e;   /* an escaped punctuation character is itself */
    return 0;
}

/* The members of a class, after its '[' (and '^'), through its ']'. */
static int parse_class_items(rx *r, cset *c, int *has_negated_shorthand)
{
    int first = 1;
    while (r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = 0;
        uint32_t lo;
        if (r->s[r->i] == '\\' && r->i + 1 < r->n) {
            int neg = 0;
            int k = add_shorthand(r, c, r->s[r->i + 1], &neg);
            if (k < 0) return -1;
            if (k == 0) {
                r->i += 2;
                if (neg) *has_negated_shorthand = 1;
                continue;
            }
            r->i++;
            if (escaped_cp(r, &lo)) return -1;
        } else if (next_cp(r, &lo)) return -1;
        uint32_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') { r->i++; if (escaped_cp(r, &hi)) return -1; }
            else if (next_cp(r, &hi)) return -1;
        }
        if (add_range(r, c, lo, hi)) return -1;
    }
    if (r->i >= r->n) return fail(r, "an unclosed character class");
    r->i++;
    return 0;
}

/* Write a class: the JSON-safe members as one GBNF class, and the quote,
 * backslash and control characters it includes as their escapes. */
static void put_class(rx *r, const cset *c)
{
    sbuf *o = r->o;
    if (c->neg) {   /* no quote, backslash or control character: they would need escapes */
        jsb_add(o, "[^\\x00-\\x1F\\x7F\"\\\\");
        for (int i = 0; i < c->n; i++) {
            put_class_cp(o, c->r[i].lo);
            if (c->r[i].hi != c->r[i].lo) { jsb_add(o, "-"); put_class_cp(o, c->r[i].hi); }
        }
        jsb_add(o, "]");
        return;
    }
    int alts = 0;
    jsb_add(o, "( ");
    sbuf cls = { 0 };
    for (int i = 0; i < c->n; i++) {
        uint32_t lo = c->r[i].lo, hi = c->r[i].hi;
        for (uint32_t x = lo; x <= hi && x < 0x80; x++)   /* the ones written as escapes */
            if (x < 0x20 || x == '"' || x == '\\' || x == 0x7F) {
                if (alts++) jsb_add(o, " | ");
                put_char(o, x);
            }
        /* the rest, split around them */
        static const uint32_t cuts[][2] = { { 0x20, 0x21 }, { 0x23, 0x5B }, { 0x5D, 0x7E }, { 0x80, 0x10FFFF } };
        for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
            uint32_t a = lo > cuts[k][0] ? lo : cuts[k][0], b = hi < cuts[k][1] ? hi : cuts[k][1];
            if (a > b) continue;
            put_class_cp(&cls, a);
            if (b != a) { jsb_add(&cls, "-"); put_class_cp(&cls, b); }
        }
    }
    if (cls.n) {
        if (alts++) jsb_add(o, " | ");
        jsb_add(o, "[");
        jsb_addn(o, cls.p, cls.n);
        jsb_add(o, "]");
    }
    if (cls.oom) o->oom = 1;
    free(cls.p);
    if (!alts) jsb_add(o, "[^\\x00-\\U0010FFFF]");   /* an empty class matches nothing */
    jsb_add(o, " )");
}

static int parse_class(rx *r)
{
    cset *cs = calloc(1, sizeof *cs);
    if (!cs) { r->o->oom = 1; return -1; }
    int negated_shorthand = 0, rc = 0;
    if (r->i < r->n && r->s[r->i] == '^') { cs->neg = 1; r->i++; }
    rc = parse_class_items(r, cs, &negated_shorthand);
    if (!rc && negated_shorthand) rc = fail(r, "\\D, \\W or \\S inside a class is not supported");
    if (!rc) put_class(r, cs);
    free(cs);
    return rc;
}

/* ---- expressions ----------------------------------------------------------- */

static int parse_alt(rx *r);

/* \d \w \s outside a class; \D \W \S as the JSON-safe rest. */
static int put_shorthand(rx *r, unsigned char e)
{
    cset c = { .n = 0 };
    int neg = 0;
    int k = add_shorthand(r, &c, e, &neg);
    if (k) return k;
    c.neg = neg;
    put_class(r, &c);
    return 0;
}

static int parse_atom(rx *r)
{
    unsigned char ch = r->s[r->i];
    if (ch == '(') {
        if (++r->depth > MAX_DEPTH) return fail(r, "groups nested too deep");
        r->i++;
        if (r->i + 1 < r->n && r->s[r->i] == '?') {
            if (r->s[r->i + 1] != ':') return fail(r, "lookaround and named groups are not supported");
            r->i += 2;
        }
        jsb_add(r->o, "( ");
        if (parse_alt(r)) return -1;
        if (r->i >= r->n || r->s[r->i] != ')') return fail(r, "an unclosed group");
        r->i++;
        r->depth--;
        jsb_add(r->o, " )");
        return 0;
    }
    if (ch == '[') { r->i++; return parse_class(r); }
    if (ch == '.') { r->i++; jsb_add(r->o, r->any); *r->used_any = 1; return 0; }
    if (ch == '^' || ch == '$') return fail(r, "an anchor inside the pattern is not supported");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return fail(r, "a quantifier with nothing to repeat");
    if (ch == ')') return fail(r, "an unmatched )");
    uint32_t cp;
    if (ch == '\\') {
        r->i++;
        if (r->i < r->n) {
            int k = put_shorthand(r, r->s[r->i]);
            if (k <= 0) { if (!k) r->i++; return k; }
        }
        if (escaped_cp(r, &cp)) return -1;
    } else if (next_cp(r, &cp)) return -1;
    put_char(r->o, cp);
    return 0;
}

static int read_count(rx *r, long *v)
{
    size_t start = r->i;
    *v = 0;
    while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
        *v = *v * 10 + (r->s[r->i++] - '0');
        if (*v > MAX_REPEAT) return fail(r, "a repetition count over 10000");
    }
    return r->i > start ? 0 : 1;
}

/* A quantifier after an atom, if one follows. */
static int parse_quant(rx *r)
{
    if (r->i >= r->n) return 0;
    unsigned char ch = r->s[r->i];
    if (ch == '*' || ch == '+' || ch == '?') {
        char q[3] = { ' ', (char)ch, 0 };
        jsb_add(r->o, q);
        r->i++;
    } else if (ch == '{') {
        size_t at = r->i++;
        long lo, hi = -1;
        int k = read_count(r, &lo);
        if (k < 0) return -1;
        if (k == 0 && r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            k = read_count(r, &hi);
            if (k < 0) return -1;
            if (k == 1) hi = -2;   /* {m,} */
        } else hi = lo;
        if (k < 0 || r->i >= r->n || r->s[r->i] != '}') { r->i = at; return fail(r, "a malformed {m,n}"); }
        r->i++;
        if (hi >= 0 && hi < lo) return fail(r, "{m,n} with n < m");
        if (hi == -2) jsb_fmt(r->o, "{%ld,}", lo);
        else jsb_fmt(r->o, "{%ld,%ld}", lo, hi);
    } else return 0;
    if (r->i < r->n && r->s[r->i] == '?') r->i++;   /* lazy: the same strings */
    if (r->i < r->n && strchr("*+?{", r->s[r->i])) return fail(r, "a quantifier after a quantifier");
    return 0;
}

static int parse_seq(rx *r, size_t end)
{
    int any = 0;
    while (r->i < end && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (any++) jsb_add(r->o, " ");
        if (parse_atom(r) || parse_quant(r)) return -1;
    }
    if (!any) jsb_add(r->o, "\"\"");   /* an empty alternative */
    return 0;
}

static int parse_alt(rx *r)
{
    if (parse_seq(r, r->n)) return -1;
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        jsb_add(r->o, " | ");
        if (parse_seq(r, r->n)) return -1;
    }
    return 0;
}

int js_pattern(sbuf *o, const char *re, size_t n, const char *char_rule, int *used_char, char *why, size_t whycap)
{
    int head = n && re[0] == '^', tail = n > (size_t)head && re[n - 1] == '$' && (n < 2 || re[n - 2] != '\\');
    rx r = { .s = (const unsigned char *)re, .n = n - (size_t)tail, .i = (size_t)head, .any = char_rule, .used_any = used_char, .o = o,
             .why = why, .whycap = whycap };
    *used_char = !head || !tail;
    if (!head) { jsb_add(o, char_rule); jsb_add(o, "* "); }   /* unanchored: a search */
    jsb_add(o, "( ");
    if (parse_alt(&r)) return -1;
    if (r.i < r.n) return fail(&r, "an unmatched )");
    jsb_add(o, " )");
    if (!tail) { jsb_add(o, " "); jsb_add(o, char_rule); jsb_add(o, "*"); }
    return 0;
}
