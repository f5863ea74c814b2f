/* gbnf_oracle.h - an independent GBNF recognizer for the tests: the judge of
 * grammar-constrained outputs and masks (issue 44). It shares no code with
 * src/grammar*.c and works another way, so that one bug cannot hide in both:
 *  - its own parser turns the GBNF text into a plain context-free grammar
 *    (x* becomes the LEFT-recursive T ::= T x | "", x{m,n} the n-m+1
 *    alternatives x^m ... x^n; the library does neither);
 *  - an Earley recognizer (with Aycock and Horspool's nullable fix) reads it
 *    code point by code point, so ambiguity and recursion need no stacks.
 * It answers "whole string" (gbo_match) and "prefix of a string" (gbo_prefix),
 * on bytes: UTF-8 is decoded here, and a trailing incomplete character is a
 * valid prefix when some character it begins can come next. Prefix means
 * "some string can still follow" only for grammars whose rules all match
 * something; the tests use such grammars.
 * Subset: rules `name ::= ...` (a rule starts where a name is followed by
 * ::=), | alternatives, sequences, "literals" and [classes] with the escapes
 * \n \r \t \\ \" \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH, [^...] negation,
 * ranges, `.`, ( groups ), ? * + {m} {m,} {m,n} {,n} (n <= 64), # comments.
 * Sizes are small fixed bounds: a test grammar beyond them is an error. */
#ifndef MOR_TESTS_GBNF_ORACLE_H
#define MOR_TESTS_GBNF_ORACLE_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GBO_MAX_SYMS  8192   /* right-hand-side symbols of all productions */
#define GBO_MAX_PRODS 2048
#define GBO_MAX_NT    1024
#define GBO_MAX_CLS   512
#define GBO_MAX_RNG   2048
#define GBO_MAX_ITEMS (1 << 18)   /* Earley items of a chart */
#define GBO_MAX_SETS  4096        /* code points a chart reads */
#define GBO_HASH      (1 << 14)   /* dedup of the set being built */

/* A symbol >= 0 is a nonterminal, < 0 the terminal class -1 - sym. */
typedef struct { int neg, first, n; } gbo_class;
typedef struct { int lhs, first, n; } gbo_prod;

typedef struct {
    uint32_t  rng[GBO_MAX_RNG][2];
    int       n_rng;
    gbo_class cls[GBO_MAX_CLS];
    int       n_cls;
    int       sym[GBO_MAX_SYMS];
    int       n_sym;
    gbo_prod  prod[GBO_MAX_PRODS];
    int       n_prod;
    int       n_nt, start;
    char      name[GBO_MAX_NT][48];   /* "" for generated nonterminals */
    uint8_t   defined[GBO_MAX_NT], nullable[GBO_MAX_NT];
    int       by_lhs[GBO_MAX_PRODS], lhs_first[GBO_MAX_NT + 1];   /* productions grouped by lhs */
    char      err[160];
} gbo_grammar;

/* ---- parsing ---- */

typedef struct { gbo_grammar *g; const char *begin, *p, *end; } gbo_parser;

static inline int gbo_fail(gbo_parser *P, const char *what)
{
    if (!P->g->err[0]) snprintf(P->g->err, sizeof P->g->err, "oracle: %s at offset %d", what, (int)(P->p - P->begin));
    return -1;
}

static inline void gbo_skip(gbo_parser *P)
{
    while (P->p < P->end) {
        if (*P->p == '#') while (P->p < P->end && *P->p != '\n') P->p++;
        else if (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r') P->p++;
        else break;
    }
}

static inline int gbo_is_name(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* One UTF-8 character of the grammar's text (its own decoder, not the library's). */
static inline long gbo_utf8(gbo_parser *P)
{
    const unsigned char *s = (const unsigned char *)P->p;
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || P->end - P->p < n) return gbo_fail(P, "bad UTF-8");
    long c = n == 1 ? s[0] : s[0] & (0x7F >> n);
    for (int i = 1; i < n; i++) c = c << 6 | (s[i] & 0x3F);
    P->p += n;
    return c;
}

/* A character of a literal or class, escapes decoded. */
static inline long gbo_char(gbo_parser *P)
{
    if (P->p >= P->end) return gbo_fail(P, "unexpected end");
    if (*P->p != '\\') return gbo_utf8(P);
    if (++P->p >= P->end) return gbo_fail(P, "unexpected end");
    char e = *P->p++;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        long v = 0;
        for (int i = 0; i < digits; i++, P->p++) {
            char h = P->p < P->end ? *P->p : 0;
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) return gbo_fail(P, "bad hex escape");
            v = v * 16 + d;
        }
        return v;
    }
    const char *from = "nrt\\\"[]-^/", *to = "\n\r\t\\\"[]-^/";
    const char *k = strchr(from, e);
    return k && e ? (unsigned char)to[k - from] : gbo_fail(P, "unknown escape");
}

static inline int gbo_new_nt(gbo_grammar *g, const char *name, size_t len)
{
    if (g->n_nt == GBO_MAX_NT || len >= sizeof g->name[0]) return -1;
    memcpy(g->name[g->n_nt], name, len);
    g->name[g->n_nt][len] = 0;
    return g->n_nt++;
}

static inline int gbo_nt_named(gbo_grammar *g, const char *name, size_t len)
{
    for (int i = 0; i < g->n_nt; i++)
        if (g->name[i][0] && strlen(g->name[i]) == len && !memcmp(g->name[i], name, len)) return i;
    return gbo_new_nt(g, name, len);
}

static inline int gbo_add_prod(gbo_grammar *g, int lhs, const int *rhs, int n)
{
    if (g->n_prod == GBO_MAX_PRODS || g->n_sym + n > GBO_MAX_SYMS) return -1;
    g->prod[g->n_prod++] = (gbo_prod){ lhs, g->n_sym, n };
    if (n) memcpy(g->sym + g->n_sym, rhs, sizeof *rhs * (size_t)n);   /* rhs may be NULL for "" */
    g->n_sym += n;
    return 0;
}

static inline int gbo_class1(gbo_grammar *g, uint32_t lo, uint32_t hi, int neg)
{
    if (g->n_cls == GBO_MAX_CLS || g->n_rng == GBO_MAX_RNG) return 1;   /* a terminal >= 0 signals the error */
    g->rng[g->n_rng][0] = lo;
    g->rng[g->n_rng][1] = hi;
    g->cls[g->n_cls] = (gbo_class){ neg, g->n_rng++, 1 };
    return -1 - g->n_cls++;
}

/* x{m,n} (n < 0: no bound) as a fresh nonterminal: the alternatives x^m ..
 * x^n, or x^m T with T ::= T x | "". */
static inline int gbo_repeat(gbo_parser *P, int x, int m, int n)
{
    gbo_grammar *g = P->g;
    int r = gbo_new_nt(g, "", 0), rhs[66];
    if (r < 0 || m > 64 || n > 64) return gbo_fail(P, "repetition or grammar too large");
    for (int i = 0; i < m; i++) rhs[i] = x;
    if (n < 0) {
        int t = gbo_new_nt(g, "", 0), tx[2] = { t, x };
        if (t < 0) return gbo_fail(P, "grammar too large");
        rhs[m] = t;
        if (gbo_add_prod(g, r, rhs, m + 1) || gbo_add_prod(g, t, tx, 2) || gbo_add_prod(g, t, NULL, 0))
            return gbo_fail(P, "grammar too large");
        return r;
    }
    for (int k = m; k <= n; k++) {
        for (int i = m; i < k; i++) rhs[i] = x;
        if (gbo_add_prod(g, r, rhs, k)) return gbo_fail(P, "grammar too large");
    }
    return r;
}

static inline int gbo_alts(gbo_parser *P, int lhs);

/* One item, then its postfix operators, as one symbol (*sym). */
static inline int gbo_term(gbo_parser *P, int *sym)
{
    gbo_grammar *g = P->g;
    char c = *P->p;
    int x;
    if (c == '"') {   /* a literal: its characters in sequence */
        int rhs[256], n = 0;
        for (P->p++; P->p < P->end && *P->p != '"'; n++) {
            long ch = gbo_char(P);
            if (ch < 0 || n == 256) return gbo_fail(P, "bad literal");
            if ((rhs[n] = gbo_class1(g, (uint32_t)ch, (uint32_t)ch, 0)) >= 0) return gbo_fail(P, "grammar too large");
        }
        if (P->p++ >= P->end) return gbo_fail(P, "unterminated literal");
        if (n == 1) x = rhs[0];
        else if ((x = gbo_new_nt(g, "", 0)) < 0 || gbo_add_prod(g, x, rhs, n)) return gbo_fail(P, "grammar too large");
    } else if (c == '[' || c == '.') {
        int neg = c == '[' && P->p + 1 < P->end && P->p[1] == '^', first = g->n_rng;
        P->p += c == '[' ? 1 + neg : 1;
        while (c == '[' && P->p < P->end && *P->p != ']') {
            long lo = gbo_char(P), hi = lo;
            if (P->p + 1 < P->end && *P->p == '-' && P->p[1] != ']') { P->p++; hi = gbo_char(P); }
            if (lo < 0 || hi < lo || g->n_rng == GBO_MAX_RNG) return gbo_fail(P, "bad class");
            g->rng[g->n_rng][0] = (uint32_t)lo;
            g->rng[g->n_rng++][1] = (uint32_t)hi;
        }
        if (c == '[' && P->p++ >= P->end) return gbo_fail(P, "unterminated class");
        if (g->n_cls == GBO_MAX_CLS || (!neg && c == '[' && g->n_rng == first)) return gbo_fail(P, "bad class");
        g->cls[g->n_cls] = (gbo_class){ c == '.' || neg, first, g->n_rng - first };
        x = -1 - g->n_cls++;
    } else if (c == '(') {
        P->p++;
        if ((x = gbo_new_nt(g, "", 0)) < 0 || gbo_alts(P, x)) return gbo_fail(P, "bad group");
        gbo_skip(P);
        if (P->p >= P->end || *P->p++ != ')') return gbo_fail(P, "missing )");
    } else if (gbo_is_name(c)) {
        const char *q = P->p;
        while (P->p < P->end && gbo_is_name(*P->p)) P->p++;
        if ((x = gbo_nt_named(g, q, (size_t)(P->p - q))) < 0) return gbo_fail(P, "grammar too large");
    } else return gbo_fail(P, "unexpected character");
    for (;;) {   /* postfix operators (no space before them, as in the tests) */
        int m = -1, n = -1;
        if (P->p >= P->end) break;
        if (*P->p == '*') m = 0;
        else if (*P->p == '+') m = 1;
        else if (*P->p == '?') m = 0, n = 1;
        else if (*P->p == '{') {
            char *e;
            m = (int)strtol(P->p + 1, &e, 10);   /* "{,n}": strtol reads nothing, m = 0 */
            if (*e == '}') n = m;
            else if (*e == ',' && e[1] == '}') n = -1, e++;
            else if (*e == ',') n = (int)strtol(e + 1, &e, 10);
            if (*e != '}') return gbo_fail(P, "bad repetition");
            P->p = e;
        } else break;
        P->p++;
        if ((x = gbo_repeat(P, x, m, n)) == -1) return -1;
    }
    *sym = x;
    return 0;
}

/* One alternative: items up to | ) the end, or the next "name ::=". */
static inline int gbo_seq(gbo_parser *P, int lhs)
{
    int rhs[256], n = 0;
    for (;;) {
        gbo_skip(P);
        if (P->p >= P->end || *P->p == '|' || *P->p == ')') break;
        const char *q = P->p;
        while (q < P->end && gbo_is_name(*q)) q++;
        while (q < P->end && (*q == ' ' || *q == '\t')) q++;
        if (q > P->p && P->end - q >= 3 && !memcmp(q, "::=", 3)) break;
        if (n == 256 || gbo_term(P, &rhs[n++])) return gbo_fail(P, "bad sequence");
    }
    return gbo_add_prod(P->g, lhs, rhs, n) ? gbo_fail(P, "grammar too large") : 0;
}

static inline int gbo_alts(gbo_parser *P, int lhs)
{
    if (gbo_seq(P, lhs)) return -1;
    while (P->p < P->end && *P->p == '|') {
        P->p++;
        if (gbo_seq(P, lhs)) return -1;
    }
    return 0;
}

/* Parse text (start rule `root`); 0, or -1 with g->err. g is large: heap it. */
static inline int gbo_parse(gbo_grammar *g, const char *text, const char *root)
{
    memset(g, 0, sizeof *g);
    gbo_parser P = { g, text, text, text + strlen(text) };
    for (gbo_skip(&P); P.p < P.end; gbo_skip(&P)) {
        const char *q = P.p;
        while (P.p < P.end && gbo_is_name(*P.p)) P.p++;
        int r = P.p > q ? gbo_nt_named(g, q, (size_t)(P.p - q)) : -1;
        gbo_skip(&P);
        if (r < 0 || P.end - P.p < 3 || memcmp(P.p, "::=", 3) || g->defined[r]) return gbo_fail(&P, "bad rule head");
        g->defined[r] = 1;
        P.p += 3;
        if (gbo_alts(&P, r)) return -1;
    }
    int r = gbo_nt_named(g, root, strlen(root)), s = gbo_new_nt(g, "", 0);
    for (int i = 0; i < g->n_nt; i++)
        if (g->name[i][0] && !g->defined[i]) return gbo_fail(&P, "undefined rule");
    if (r < 0 || s < 0 || gbo_add_prod(g, s, &r, 1)) return gbo_fail(&P, "grammar too large");
    g->start = s;
    for (int changed = 1; changed;) {   /* nullable: to a fixed point */
        changed = 0;
        for (int i = 0; i < g->n_prod; i++) {
            int all = 1;
            for (int k = 0; k < g->prod[i].n && all; k++) {
                int x = g->sym[g->prod[i].first + k];
                all = x >= 0 && g->nullable[x];
            }
            if (all && !g->nullable[g->prod[i].lhs]) g->nullable[g->prod[i].lhs] = 1, changed = 1;
        }
    }
    for (int i = 0, k = 0; i <= g->n_nt; i++) {   /* productions by lhs: a counting sort */
        g->lhs_first[i] = k;
        for (int j = 0; i < g->n_nt && j < g->n_prod; j++) if (g->prod[j].lhs == i) g->by_lhs[k++] = j;
    }
    return 0;
}

/* Some code point of [lo, hi] is in class k. */
static inline int gbo_meets(const gbo_grammar *g, int k, uint32_t lo, uint32_t hi)
{
    const gbo_class *c = &g->cls[k];
    if (lo > hi) return 0;
    if (!c->neg) {
        for (int i = 0; i < c->n; i++)
            if (g->rng[c->first + i][0] <= hi && g->rng[c->first + i][1] >= lo) return 1;
        return 0;
    }
    /* the least code point of [lo, hi] outside the ranges, if any, is lo or
     * just past a range: try those */
    for (int i = -1; i < c->n; i++) {
        uint32_t x = i < 0 ? lo : g->rng[c->first + i][1] + 1;
        int in = x < lo || x > hi;
        for (int j = 0; j < c->n && !in; j++) in = x >= g->rng[c->first + j][0] && x <= g->rng[c->first + j][1];
        if (!in) return 1;
    }
    return 0;
}

/* ---- the Earley chart ---- */

typedef struct { int prod, dot, origin; } gbo_item;
typedef struct { uint32_t cp; int need, len; } gbo_u8;   /* a character being decoded (need 0: none) */

typedef struct {
    const gbo_grammar *g;
    gbo_item *it;
    int       n_it, n_sets, overflow;
    int       set_at[GBO_MAX_SETS + 1];   /* set k is it[set_at[k] .. set_at[k+1]); the last ends at n_it */
    struct { uint32_t stamp; int idx; } *hash;
    uint32_t  stamp;
} gbo_chart;

static inline int gbo_next(const gbo_chart *c, const gbo_item *x)
{
    const gbo_prod *p = &c->g->prod[x->prod];
    return x->dot < p->n ? c->g->sym[p->first + x->dot] : INT32_MIN;   /* INT32_MIN: complete */
}

static inline void gbo_add(gbo_chart *c, int prod, int dot, int origin)
{
    uint32_t h = ((uint32_t)prod * 2654435761u ^ (uint32_t)dot * 40503u ^ (uint32_t)origin * 97u) & (GBO_HASH - 1);
    for (; c->hash[h].stamp == c->stamp; h = (h + 1) & (GBO_HASH - 1)) {
        const gbo_item *y = &c->it[c->hash[h].idx];
        if (y->prod == prod && y->dot == dot && y->origin == origin) return;
    }
    if (c->n_it == GBO_MAX_ITEMS || c->n_it - c->set_at[c->n_sets - 1] >= GBO_HASH / 2) { c->overflow = 1; return; }
    c->hash[h].stamp = c->stamp;
    c->hash[h].idx = c->n_it;
    c->it[c->n_it++] = (gbo_item){ prod, dot, origin };
}

/* Predict and complete in the last set until nothing new comes. */
static inline void gbo_closure(gbo_chart *c)
{
    const gbo_grammar *g = c->g;
    int k = c->n_sets - 1;
    for (int i = c->set_at[k]; i < c->n_it; i++) {
        gbo_item x = c->it[i];
        int s = gbo_next(c, &x);
        if (s >= 0) {
            for (int j = g->lhs_first[s]; j < g->lhs_first[s + 1]; j++) gbo_add(c, g->by_lhs[j], 0, k);
            if (g->nullable[s]) gbo_add(c, x.prod, x.dot + 1, x.origin);   /* Aycock-Horspool */
        } else if (s == INT32_MIN) {
            int a = g->prod[x.prod].lhs, end = x.origin == k ? c->n_it : c->set_at[x.origin + 1];
            for (int j = c->set_at[x.origin]; j < end; j++)
                if (gbo_next(c, &c->it[j]) == a) gbo_add(c, c->it[j].prod, c->it[j].dot + 1, c->it[j].origin);
        }
    }
    c->set_at[c->n_sets] = c->n_it;
}

static inline int gbo_chart_init(gbo_chart *c, const gbo_grammar *g)
{
    memset(c, 0, sizeof *c);
    c->g = g;
    c->it = malloc(sizeof *c->it * GBO_MAX_ITEMS);
    c->hash = calloc(GBO_HASH, sizeof *c->hash);
    if (!c->it || !c->hash) return -1;
    c->n_sets = 1;
    c->stamp = 1;
    for (int j = g->lhs_first[g->start]; j < g->lhs_first[g->start + 1]; j++) gbo_add(c, g->by_lhs[j], 0, 0);
    gbo_closure(c);
    return 0;
}

static inline void gbo_chart_free(gbo_chart *c) { free(c->it); free(c->hash); }

/* Back to the chart after its first n sets (n code points read: n + 1 sets). */
static inline void gbo_truncate(gbo_chart *c, int n_sets) { c->n_sets = n_sets; c->n_it = c->set_at[n_sets]; }

/* Read code point cp: 1 if some string still goes on, 0 if none. */
static inline int gbo_step(gbo_chart *c, uint32_t cp)
{
    if (c->n_sets == GBO_MAX_SETS) { c->overflow = 1; return 0; }
    int from = c->set_at[c->n_sets - 1], to = c->n_it;
    c->set_at[c->n_sets++] = c->n_it;
    c->stamp++;
    for (int i = from; i < to; i++) {
        int s = gbo_next(c, &c->it[i]);
        if (s < 0 && s != INT32_MIN && gbo_meets(c->g, -1 - s, cp, cp))
            gbo_add(c, c->it[i].prod, c->it[i].dot + 1, c->it[i].origin);
    }
    gbo_closure(c);
    return c->n_it > c->set_at[c->n_sets - 1];
}

/* The code points read so far are a whole string. */
static inline int gbo_complete(const gbo_chart *c)
{
    for (int i = c->set_at[c->n_sets - 1]; i < c->n_it; i++)
        if (c->g->prod[c->it[i].prod].lhs == c->g->start && gbo_next(c, &c->it[i]) == INT32_MIN && c->it[i].origin == 0) return 1;
    return 0;
}

/* Some code point of [lo, hi] can come next. */
static inline int gbo_can_next(const gbo_chart *c, uint32_t lo, uint32_t hi)
{
    for (int i = c->set_at[c->n_sets - 1]; i < c->n_it; i++) {
        int s = gbo_next(c, &c->it[i]);
        if (s < 0 && s != INT32_MIN && gbo_meets(c->g, -1 - s, lo, hi)) return 1;
    }
    return 0;
}

/* ---- bytes ---- */

/* Read byte b into u: 1 when it completes a valid character (u->cp), 0 when
 * the character goes on, -1 when the bytes are not UTF-8. */
static inline int gbo_byte(gbo_u8 *u, unsigned char b)
{
    static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (!u->need) {
        int n = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : -1;
        if (n < 0) return -1;
        u->cp = n ? b & (0x3Fu >> n) : b;
        u->need = n;
        u->len = n + 1;
        return n == 0;
    }
    if ((b & 0xC0) != 0x80) return -1;
    u->cp = u->cp << 6 | (b & 0x3F);
    if (--u->need) return 0;
    return u->cp >= least[u->len] && u->cp <= 0x10FFFF && !(u->cp >= 0xD800 && u->cp <= 0xDFFF) ? 1 : -1;
}

/* A character begun in u (need > 0) can be finished by one that comes next:
 * its completions are an interval, less the surrogates and overlong forms. */
static inline int gbo_partial_ok(const gbo_chart *c, const gbo_u8 *u)
{
    static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    uint32_t lo = u->cp << (6 * u->need), hi = lo | ((1u << (6 * u->need)) - 1);
    if (lo < least[u->len]) lo = least[u->len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    return gbo_can_next(c, lo, hi < 0xD7FF ? hi : 0xD7FF) || gbo_can_next(c, lo > 0xE000 ? lo : 0xE000, hi);
}

/* Feed bytes; 1 while some string can go on (a trailing partial character
 * is left in u, unchecked), 0 once none can. */
static inline int gbo_feed(gbo_chart *c, gbo_u8 *u, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int r = gbo_byte(u, (unsigned char)s[i]);
        if (r < 0 || (r == 1 && !gbo_step(c, u->cp))) return 0;
    }
    return 1;
}

/* 1: s[0..n) is a whole string of g; 0: it is not; -1: the oracle's bounds. */
static inline int gbo_match(const gbo_grammar *g, const char *s, size_t n)
{
    gbo_chart c;
    gbo_u8 u = { 0, 0, 0 };
    if (gbo_chart_init(&c, g)) { gbo_chart_free(&c); return -1; }
    int r = gbo_feed(&c, &u, s, n) && !u.need && gbo_complete(&c);
    r = c.overflow ? -1 : r;
    gbo_chart_free(&c);
    return r;
}

/* 1: s[0..n) is a prefix of a string of g (maybe ending inside a
 * character); 0: it is not; -1: the oracle's bounds. */
static inline int gbo_prefix(const gbo_grammar *g, const char *s, size_t n)
{
    gbo_chart c;
    gbo_u8 u = { 0, 0, 0 };
    if (gbo_chart_init(&c, g)) { gbo_chart_free(&c); return -1; }
    int r = gbo_feed(&c, &u, s, n) && (!u.need || gbo_partial_ok(&c, &u));
    r = c.overflow ? -1 : r;
    gbo_chart_free(&c);
    return r;
}

/* For the chart c (with partial character u0) and byte strings s[ord[i]]
 * (len[]), sorted by their bytes, ok[ord[i]] = 1 when that string can
 * continue. Strings sharing a prefix share its reading: each string starts
 * from the state after its common prefix with the one before. c is left
 * as it was. maxlen bounds the lengths. */
static inline void gbo_extend_all(gbo_chart *c, gbo_u8 u0, const char *const *s, const size_t *len, const int *ord, int n,
                           uint8_t *ok, size_t maxlen)
{
    int sets0 = c->n_sets;
    int *sets = malloc(sizeof *sets * (maxlen + 1));
    gbo_u8 *u = malloc(sizeof *u * (maxlen + 1));
    size_t done = 0;   /* depths 0..done of the previous string are in sets[] and u[] (alive) */
    int dead_at = -1;   /* the previous string died reading its byte dead_at - 1 */
    sets[0] = sets0;
    u[0] = u0;
    for (int i = 0; sets && u && i < n; i++) {
        const char *a = s[ord[i]], *b = i ? s[ord[i - 1]] : "";
        size_t la = len[ord[i]], lb = i ? len[ord[i - 1]] : 0, l = 0;
        while (l < la && l < lb && a[l] == b[l]) l++;
        ok[ord[i]] = 0;
        if (dead_at >= 0 && l >= (size_t)dead_at) continue;   /* under a dead prefix */
        if (l > done) l = done;
        gbo_truncate(c, sets[l]);
        gbo_u8 cur = u[l];
        dead_at = -1;
        for (; l < la; l++) {
            if (!gbo_feed(c, &cur, a + l, 1)) { dead_at = (int)l + 1; break; }
            sets[l + 1] = c->n_sets;
            u[l + 1] = cur;
        }
        done = dead_at >= 0 ? (size_t)dead_at - 1 : la;
        ok[ord[i]] = dead_at < 0 && (!cur.need || gbo_partial_ok(c, &cur));
    }
    gbo_truncate(c, sets0);
    free(sets);
    free(u);
}
#endif
