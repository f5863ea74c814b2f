/* grammar_parse.c - GBNF text to grammar rules (grammar.h).
 *
 * The language, as llama.cpp's grammars/README.md describes it:
 *   rule      ::= name "::=" alternatives          (one per line)
 *   alternatives: sequences separated by "|"
 *   items: "literal" with escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH
 *          \UHHHHHHHH; [a-z0-9_] classes, [^...] negated; . any character;
 *          a rule name; ( alternatives ); each maybe followed by * + ?
 *          {m} {m,} {m,n} {,n}
 *   # comments run to the end of the line.
 * A rule ends at the end of its line, except inside parentheses and right
 * after "::=" or "|". Names are letters, digits, '-' and '_'. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "status.h"

typedef struct {
    gel    *v;
    int32_t n, cap;
} gvec;

typedef struct {
    const char *src, *p, *end;
    const char *who;
    /* rules being built: body[r] holds the alternatives, each ending with GEL_END */
    gvec     *body;
    char    **names;
    uint8_t  *defined;       /* 0: only referenced so far, 1: defined in the text, 2: a group's rule (rule_new) */
    int32_t   n_rules, cap_rules;
    uint32_t *ranges;
    int32_t   n_ranges, cap_ranges;
    int64_t   n_el;          /* elements in all bodies (a bound on the total) */
    int       nesting;
    mor_status err;          /* the first error; parsing stops at it */
} gp;

static void fail(gp *s, const char *at, const char *fmt, ...) MOR_PRINTF(3, 4);
static void fail(gp *s, const char *at, const char *fmt, ...)
{
    if (s->err) return;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!at) { s->err = err_set(MOR_E_INVALID_ARG, "%s: %s", s->who, msg); return; }
    int line = 1, col = 1;
    for (const char *q = s->src; q < at && q < s->end; q++) {
        if (*q == '\n') { line++; col = 1; }
        else if (((unsigned char)*q & 0xC0) != 0x80) col++;
    }
    s->err = err_set(MOR_E_INVALID_ARG, "%s: grammar line %d, column %d: %s", s->who, line, col, msg);
}

static void nomem(gp *s) { if (!s->err) s->err = err_set(MOR_E_NOMEM, "%s: out of memory for the grammar", s->who); }

static int vec_push(gp *s, gvec *v, gel e)
{
    if (s->err) return -1;
    if (++s->n_el > GRAMMAR_MAX_ELEMENTS) { fail(s, s->p, "the grammar is too large (over %d elements)", GRAMMAR_MAX_ELEMENTS); return -1; }
    if (v->n == v->cap) {
        int32_t nc = v->cap ? 2 * v->cap : 8;
        gel *nv = realloc(v->v, sizeof *nv * (size_t)nc);
        if (!nv) { nomem(s); return -1; }
        v->v = nv; v->cap = nc;
    }
    v->v[v->n++] = e;
    return 0;
}

/* The id of rule `name` (len bytes), created undefined if new; -1 on error. */
static int32_t rule_id(gp *s, const char *name, size_t len)
{
    for (int32_t r = 0; r < s->n_rules; r++)
        if (strlen(s->names[r]) == len && !memcmp(s->names[r], name, len)) return r;
    if (s->err) return -1;
    if (s->n_rules == GRAMMAR_MAX_RULES) { fail(s, s->p, "too many rules (over %d)", GRAMMAR_MAX_RULES); return -1; }
    if (s->n_rules == s->cap_rules) {
        int32_t nc = s->cap_rules ? 2 * s->cap_rules : 16;
        gvec *nb = realloc(s->body, sizeof *nb * (size_t)nc);
        if (nb) s->body = nb;
        char **nn = realloc(s->names, sizeof *nn * (size_t)nc);
        if (nn) s->names = nn;
        uint8_t *nd = realloc(s->defined, (size_t)nc);
        if (nd) s->defined = nd;
        if (!nb || !nn || !nd) { nomem(s); return -1; }
        s->cap_rules = nc;
    }
    char *copy = malloc(len + 1);
    if (!copy) { nomem(s); return -1; }
    memcpy(copy, name, len);
    copy[len] = 0;
    int32_t r = s->n_rules++;
    s->names[r] = copy;
    s->defined[r] = 0;
    memset(&s->body[r], 0, sizeof s->body[r]);
    return r;
}

/* A name "base-N" that no rule has yet, into name[300]. */
static void free_name(const gp *s, const char *base, char *name)
{
    for (int i = s->n_rules;; i++) {
        snprintf(name, 300, "%.200s-%d", base, i);
        int taken = 0;
        for (int32_t r = 0; r < s->n_rules && !taken; r++) taken = !strcmp(s->names[r], name);
        if (!taken) return;
    }
}

/* A new rule for a group or repetition inside rule `parent`: "parent-N"
 * (defined[] 2: made by the parser, not named in the text). */
static int32_t rule_new(gp *s, int32_t parent)
{
    char name[300];
    free_name(s, parent >= 0 ? s->names[parent] : "g", name);
    int32_t r = rule_id(s, name, strlen(name));
    if (r >= 0) s->defined[r] = 2;
    return r;
}

/* The rule a name in the text means. A group's rule may have taken that
 * name already (groups are named as they are met, before the rules defined
 * further down: "root-8" for a group in root, then "root-8 ::= ..."): the
 * group's rule then takes another name, and the name is the text's. */
static int32_t text_rule(gp *s, const char *name, size_t len)
{
    int32_t r = rule_id(s, name, len);
    if (r < 0 || s->defined[r] != 2) return r;
    char fresh[300];
    free_name(s, s->names[r], fresh);
    char *copy = malloc(strlen(fresh) + 1);
    if (!copy) { nomem(s); return -1; }
    strcpy(copy, fresh);
    free(s->names[r]);
    s->names[r] = copy;
    return rule_id(s, name, len);
}

static int32_t range_add(gp *s, uint32_t lo, uint32_t hi)
{
    if (s->err) return -1;
    if (s->n_ranges == s->cap_ranges) {
        int32_t nc = s->cap_ranges ? 2 * s->cap_ranges : 32;
        uint32_t *nr = realloc(s->ranges, sizeof *nr * 2 * (size_t)nc);
        if (!nr) { nomem(s); return -1; }
        s->ranges = nr; s->cap_ranges = nc;
    }
    s->ranges[2 * s->n_ranges] = lo;
    s->ranges[2 * s->n_ranges + 1] = hi;
    return s->n_ranges++;
}

/* ---- lexing ---- */

static int is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skip blanks and comments; newlines too when newline_ok. */
static void skip_space(gp *s, int newline_ok)
{
    while (s->p < s->end) {
        char c = *s->p;
        if (c == ' ' || c == '\t' || c == '\r') s->p++;
        else if (c == '#') { while (s->p < s->end && *s->p != '\n') s->p++; }
        else if (c == '\n' && newline_ok) s->p++;
        else break;
    }
}

/* One UTF-8 code point at s->p (advanced); -1 (and an error) if invalid. */
static int64_t utf8_next(gp *s)
{
    const unsigned char *q = (const unsigned char *)s->p;
    size_t left = (size_t)(s->end - s->p);
    uint32_t c = q[0];
    int n = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    if (n < 0 || (size_t)n + 1 > left) { fail(s, s->p, "invalid UTF-8"); return -1; }
    if (n) c &= 0x3Fu >> n;
    for (int i = 1; i <= n; i++) {
        if ((q[i] & 0xC0) != 0x80) { fail(s, s->p, "invalid UTF-8"); return -1; }
        c = c << 6 | (q[i] & 0x3F);
    }
    static const uint32_t min[4] = { 0, 0x80, 0x800, 0x10000 };
    if (c < min[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) { fail(s, s->p, "invalid UTF-8"); return -1; }
    s->p += n + 1;
    return c;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One character of a literal or class, escapes decoded; -1 on error. */
static int64_t read_char(gp *s)
{
    if (s->p >= s->end) { fail(s, s->p, "unexpected end of the grammar"); return -1; }
    if (*s->p != '\\') return utf8_next(s);
    const char *at = s->p++;
    if (s->p >= s->end) { fail(s, at, "unexpected end of the grammar after '\\'"); return -1; }
    char e = *s->p++;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = s->p < s->end ? hexval(*s->p) : -1;
            if (h < 0) { fail(s, at, "\\%c needs %d hexadecimal digits", e, digits); return -1; }
            v = v << 4 | (uint32_t)h;
            s->p++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { fail(s, at, "\\%c escape 0x%X is not a Unicode scalar value", e, v); return -1; }
        return v;
    }
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return e;
    default: fail(s, at, "unknown escape '\\%c'", e); return -1;
    }
}

/* ---- parsing ---- */

static void parse_alternatives(gp *s, int32_t rule);

/* Append n copies of x[0..nx) to v. */
static void push_copies(gp *s, int32_t rule, const gel *x, int32_t nx, int64_t n)
{
    for (int64_t k = 0; k < n && !s->err; k++)
        for (int32_t i = 0; i < nx && !s->err; i++) vec_push(s, &s->body[rule], x[i]);
}

/* The symbol x = body[rule][start..n) is followed by a repetition {m, n}
 * (n < 0: unbounded): rewrite it. */
static void repeat(gp *s, int32_t rule, int32_t start, int64_t m, int64_t n)
{
    int32_t nx = s->body[rule].n - start;
    gel *x = malloc(sizeof *x * (size_t)nx);
    if (!x) { nomem(s); return; }
    memcpy(x, s->body[rule].v + start, sizeof *x * (size_t)nx);
    s->body[rule].n = start;
    s->n_el -= nx;
    push_copies(s, rule, x, nx, m);
    if (n < 0) {   /* x*: R ::= x R | "" */
        int32_t r = rule_new(s, rule);
        if (r >= 0) {
            push_copies(s, r, x, nx, 1);
            vec_push(s, &s->body[r], (gel){ GEL_REF, 0, r, 0 });
            vec_push(s, &s->body[r], (gel){ GEL_END, 0, 0, 0 });
            vec_push(s, &s->body[r], (gel){ GEL_END, 0, 0, 0 });
            vec_push(s, &s->body[rule], (gel){ GEL_REF, 0, r, 0 });
        }
    } else if (n > m) {   /* O_1 ::= x | "", O_k ::= x O_(k-1) | "" */
        int32_t prev = -1;
        for (int64_t k = 1; k <= n - m && !s->err; k++) {
            int32_t r = rule_new(s, rule);
            if (r < 0) break;
            push_copies(s, r, x, nx, 1);
            if (prev >= 0) vec_push(s, &s->body[r], (gel){ GEL_REF, 0, prev, 0 });
            vec_push(s, &s->body[r], (gel){ GEL_END, 0, 0, 0 });
            vec_push(s, &s->body[r], (gel){ GEL_END, 0, 0, 0 });
            prev = r;
        }
        if (prev >= 0) vec_push(s, &s->body[rule], (gel){ GEL_REF, 0, prev, 0 });
    }
    free(x);
}

static int64_t read_int(gp *s)
{
    const char *at = s->p;
    int64_t v = 0;
    if (s->p >= s->end || *s->p < '0' || *s->p > '9') { fail(s, at, "expected a number"); return -1; }
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        v = v * 10 + (*s->p++ - '0');
        if (v > GRAMMAR_MAX_REPEAT) { fail(s, at, "repetition count above %d", GRAMMAR_MAX_REPEAT); return -1; }
    }
    return v;
}

/* A literal "...": its characters, each one symbol. */
static void parse_literal(gp *s, int32_t rule, const char *at)
{
    s->p++;
    while (!s->err && (s->p >= s->end || *s->p != '"')) {
        if (s->p >= s->end || *s->p == '\n') { fail(s, at, "unterminated literal"); return; }
        int64_t ch = read_char(s);
        if (ch < 0) return;
        int32_t ri = range_add(s, (uint32_t)ch, (uint32_t)ch);
        vec_push(s, &s->body[rule], (gel){ GEL_CHARS, 0, ri, 1 });
    }
    s->p++;
}

/* A character class [...] or [^...]: one symbol of its ranges. */
static void parse_class(gp *s, int32_t rule, const char *at)
{
    s->p++;
    int neg = s->p < s->end && *s->p == '^';
    if (neg) s->p++;
    int32_t first = s->n_ranges, n = 0;
    while (!s->err && (s->p >= s->end || *s->p != ']')) {
        if (s->p >= s->end) { fail(s, at, "unterminated character class"); return; }
        int64_t lo = read_char(s), hi = lo;
        if (lo < 0) return;
        if (s->p + 1 < s->end && *s->p == '-' && s->p[1] != ']') {
            s->p++;
            hi = read_char(s);
            if (hi < 0) return;
            if (hi < lo) { fail(s, at, "character range with its end before its start"); return; }
        }
        range_add(s, (uint32_t)lo, (uint32_t)hi);
        n++;
    }
    s->p++;
    if (!n && !neg) { fail(s, at, "empty character class []"); return; }
    vec_push(s, &s->body[rule], (gel){ GEL_CHARS, (uint8_t)neg, first, n });
}

/* A group ( ... ): a rule of its alternatives, referenced. */
static void parse_group(gp *s, int32_t rule, const char *at)
{
    if (++s->nesting > GRAMMAR_MAX_NESTING) { fail(s, at, "parentheses nested deeper than %d", GRAMMAR_MAX_NESTING); return; }
    s->p++;
    int32_t g = rule_new(s, rule);
    if (g < 0) return;
    parse_alternatives(s, g);
    skip_space(s, 1);
    if (s->err) return;
    if (s->p >= s->end || *s->p != ')') { fail(s, at, "'(' without its ')'"); return; }
    s->p++;
    s->nesting--;
    vec_push(s, &s->body[rule], (gel){ GEL_REF, 0, g, 0 });
}

/* A repetition operator * + ? or {m}, {m,}, {m,n}, {,n} after the symbol
 * at body[rule][last..): the symbol rewritten. */
static void parse_repetition(gp *s, int32_t rule, int32_t last, const char *at)
{
    char c = *s->p++;
    int64_t m = c == '+' ? 1 : 0, n = c == '?' ? 1 : -1;
    if (c == '{') {
        skip_space(s, 0);
        if (s->p < s->end && *s->p == ',') m = 0; else m = read_int(s);
        skip_space(s, 0);
        if (s->err) return;
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            skip_space(s, 0);
            n = s->p < s->end && *s->p == '}' ? -1 : read_int(s);
            skip_space(s, 0);
        } else n = m;
        if (s->err) return;
        if (s->p >= s->end || *s->p != '}') { fail(s, at, "'{' without its '}'"); return; }
        s->p++;
        if (n >= 0 && n < m) { fail(s, at, "repetition {%lld,%lld} with max below min", (long long)m, (long long)n); return; }
    }
    repeat(s, rule, last, m, n);
}

/* A sequence of items into body[rule], up to '|', ')' or the end of the line. */
static void parse_sequence(gp *s, int32_t rule, int nested)
{
    int32_t last = -1;   /* start of the last symbol, for a repetition */
    for (;;) {
        skip_space(s, nested);
        if (s->err || s->p >= s->end) return;
        const char *at = s->p;
        char c = *s->p;
        int32_t start = s->body[rule].n;
        if (c == '"') {
            parse_literal(s, rule, at);
            last = s->body[rule].n == start ? -1 : start;   /* "": nothing to repeat */
        } else if (c == '[') {
            parse_class(s, rule, at);
            last = start;
        } else if (c == '.') {
            s->p++;
            last = start;
            vec_push(s, &s->body[rule], (gel){ GEL_CHARS, 1, s->n_ranges, 0 });
        } else if (is_name_char(c)) {
            const char *q = s->p;
            while (q < s->end && is_name_char(*q)) q++;
            /* a name followed by ::= starts the next rule: this sequence is over */
            const char *r = q;
            while (r < s->end && (*r == ' ' || *r == '\t')) r++;
            if (!nested && s->end - r >= 3 && !memcmp(r, "::=", 3)) return;
            int32_t id = text_rule(s, s->p, (size_t)(q - s->p));
            s->p = q;
            last = start;
            vec_push(s, &s->body[rule], (gel){ GEL_REF, 0, id, 0 });
        } else if (c == '(') {
            parse_group(s, rule, at);
            last = start;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) { fail(s, at, "'%c' with nothing before it to repeat", c); return; }
            parse_repetition(s, rule, last, at);
            last = -1;   /* x** would repeat the rule R: allowed by llama.cpp only as written again */
        } else return;   /* '|', ')', newline or something the caller reports */
        if (s->err) return;
    }
}

static void parse_alternatives(gp *s, int32_t rule)
{
    int nested = s->nesting > 0;
    for (;;) {
        parse_sequence(s, rule, nested);
        vec_push(s, &s->body[rule], (gel){ GEL_END, 0, 0, 0 });
        if (s->err) return;
        skip_space(s, nested);
        if (s->p < s->end && *s->p == '|') { s->p++; skip_space(s, 1); continue; }
        return;
    }
}

static void parse_rules(gp *s)
{
    for (;;) {
        skip_space(s, 1);
        if (s->err || s->p >= s->end) return;
        const char *at = s->p, *q = s->p;
        while (q < s->end && is_name_char(*q)) q++;
        if (q == s->p) { fail(s, at, "expected a rule name, found '%c'", *s->p); return; }
        int32_t r = text_rule(s, s->p, (size_t)(q - s->p));
        if (r < 0) return;
        if (s->defined[r]) { fail(s, at, "rule '%s' is defined twice", s->names[r]); return; }
        s->defined[r] = 1;
        s->p = q;
        skip_space(s, 0);
        if (s->end - s->p < 3 || memcmp(s->p, "::=", 3)) { fail(s, s->p, "expected '::=' after '%s'", s->names[r]); return; }
        s->p += 3;
        skip_space(s, 1);
        parse_alternatives(s, r);
        if (s->err) return;
        if (s->p < s->end && *s->p != '\n') {
            if (*s->p == ')') fail(s, s->p, "')' without its '('");
            else if (is_name_char(*s->p)) fail(s, s->p, "a rule must start on a new line");
            else fail(s, s->p, "unexpected '%c'", *s->p);
            return;
        }
    }
}

/* ---- checks on the rules ---- */

/* nullable[r]: rule r matches "" (a fixpoint). */
static void find_nullable(const grammar_rules *g)
{
    memset(g->nullable, 0, (size_t)g->n_rules);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t r = 0; r < g->n_rules; r++) {
            if (g->nullable[r]) continue;
            for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !g->nullable[r]; a++) {
                const gel *e = g->el + g->alt[a];
                while (e->type == GEL_REF && g->nullable[e->a]) e++;
                if (e->type == GEL_END) { g->nullable[r] = 1; changed = 1; }
            }
        }
    }
}

/* The rule of a left-recursion cycle, or -1. Rule A reaches rule B "first"
 * if B is referenced in an alternative of A after elements that all match
 * "": such a cycle would let the matcher expand rules forever without
 * reading a character. Depth-first over those edges, with explicit stacks
 * (state 1: on the path, 2: done). */
static int32_t find_left_recursion(const grammar_rules *g, int32_t *off, int32_t *to, uint8_t *state,
                                   int32_t *stk, int32_t *it)
{
    int32_t ne = 0;
    for (int32_t r = 0; r < g->n_rules; r++) {
        off[r] = ne;
        for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            for (const gel *e = g->el + g->alt[a]; e->type == GEL_REF; e++) {
                to[ne++] = e->a;
                if (!g->nullable[e->a]) break;
            }
    }
    off[g->n_rules] = ne;
    if (g->n_rules > 0) memset(state, 0, (size_t)g->n_rules);   /* the test tells gcc the size is not negative */
    for (int32_t start = 0; start < g->n_rules; start++) {
        if (state[start]) continue;
        int32_t top = 0;
        stk[0] = start; it[0] = off[start]; state[start] = 1;
        while (top >= 0) {
            int32_t r = stk[top];
            if (it[top] == off[r + 1]) { state[r] = 2; top--; continue; }
            int32_t b = to[it[top]++];
            if (state[b] == 1) return b;
            if (state[b] == 0) { state[b] = 1; top++; stk[top] = b; it[top] = off[b]; }
        }
    }
    return -1;
}

/* productive[r]: rule r matches some finite string (a fixpoint). */
static int root_productive(const grammar_rules *g, uint8_t *prod)
{
    memset(prod, 0, (size_t)g->n_rules);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t r = 0; r < g->n_rules; r++) {
            if (prod[r]) continue;
            for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !prod[r]; a++) {
                const gel *e = g->el + g->alt[a];
                while (e->type != GEL_END && (e->type == GEL_CHARS || prod[e->a])) e++;
                if (e->type == GEL_END) { prod[r] = 1; changed = 1; }
            }
        }
    }
    return prod[g->root];
}

void grammar_rules_free(grammar_rules *g)
{
    if (!g) return;
    if (g->names) for (int32_t r = 0; r < g->n_rules; r++) free(g->names[r]);
    free(g->names);
    free(g->el);
    free(g->alt);
    free(g->rule_alt);
    free(g->ranges);
    free(g->nullable);
    free(g);
}

static void gp_free(gp *s)
{
    for (int32_t r = 0; r < s->n_rules; r++) {
        free(s->body[r].v);
        if (s->names) free(s->names[r]);
    }
    free(s->body);
    free(s->names);
    free(s->defined);
    free(s->ranges);
}

mor_status grammar_parse(const char *text, size_t len, const char *root, const char *who, grammar_rules **out)
{
    gp s;
    memset(&s, 0, sizeof s);
    s.src = s.p = text;
    s.end = text + len;
    s.who = who;
    if (!root) root = "root";
    if (!text && len) return err_set(MOR_E_INVALID_ARG, "%s: the grammar text is NULL", who);
    parse_rules(&s);
    int32_t root_id = -1;
    for (int32_t r = 0; !s.err && r < s.n_rules; r++) {
        if (!s.defined[r]) fail(&s, NULL, "rule '%s' is used but not defined", s.names[r]);
        if (!strcmp(s.names[r], root)) root_id = r;
    }
    if (!s.err && root_id < 0) fail(&s, NULL, "the grammar has no rule '%.100s' to start from", root);
    if (s.err) { gp_free(&s); return s.err; }

    /* flatten */
    grammar_rules *g = calloc(1, sizeof *g);
    int64_t n_alt = 0;
    for (int32_t r = 0; r < s.n_rules; r++)
        for (int32_t i = 0; i < s.body[r].n; i++) n_alt += s.body[r].v[i].type == GEL_END;
    if (g) {
        g->n_rules = s.n_rules;
        g->root = root_id;
        g->n_el = (int32_t)s.n_el;
        g->el = malloc(sizeof *g->el * (size_t)(s.n_el + 1));
        g->alt = malloc(sizeof *g->alt * (size_t)(n_alt + 1));
        g->rule_alt = malloc(sizeof *g->rule_alt * (size_t)(s.n_rules + 1));
        g->nullable = malloc((size_t)s.n_rules + 1);
        g->names = s.names;
        s.names = NULL;
        g->ranges = s.ranges ? s.ranges : malloc(2 * sizeof(uint32_t));
        s.ranges = NULL;
    }
    if (!g || !g->el || !g->alt || !g->rule_alt || !g->nullable || !g->ranges) {
        grammar_rules_free(g);   /* the names, if g took them */
        gp_free(&s);
        return err_set(MOR_E_NOMEM, "%s: out of memory for the grammar", who);
    }
    int32_t ne = 0, na = 0;
    for (int32_t r = 0; r < s.n_rules; r++) {
        g->rule_alt[r] = na;
        int start = 1;
        for (int32_t i = 0; i < s.body[r].n; i++) {
            if (start) { g->alt[na++] = ne; start = 0; }
            g->el[ne++] = s.body[r].v[i];
            if (s.body[r].v[i].type == GEL_END) start = 1;
        }
    }
    g->rule_alt[s.n_rules] = na;
    g->n_el = ne;
    for (int32_t r = 0; r < s.n_rules; r++) free(s.body[r].v);
    free(s.body);
    free(s.defined);
    s.body = NULL; s.defined = NULL; s.n_rules = 0;

    find_nullable(g);
    int64_t n_ref = 0;
    for (int32_t i = 0; i < g->n_el; i++) n_ref += g->el[i].type == GEL_REF;
    uint8_t *state = malloc((size_t)g->n_rules);
    int32_t *stk = malloc(sizeof *stk * (size_t)g->n_rules), *it = malloc(sizeof *it * (size_t)g->n_rules);
    int32_t *off = malloc(sizeof *off * (size_t)(g->n_rules + 1)), *to = malloc(sizeof *to * (size_t)(n_ref + 1));
    mor_status st = MOR_OK;
    if (!state || !stk || !it || !off || !to) st = err_set(MOR_E_NOMEM, "%s: out of memory for the grammar", who);
    else {
        int32_t lr = find_left_recursion(g, off, to, state, stk, it);
        if (lr >= 0)
            st = err_set(MOR_E_INVALID_ARG, "%s: rule '%s' is left-recursive (it can reach itself before matching "
                         "a character): write the recursion on the right, or as a repetition", who, g->names[lr]);
        else if (!root_productive(g, state))
            st = err_set(MOR_E_INVALID_ARG, "%s: rule '%s' matches no string (its recursion never ends)", who,
                         g->names[g->root]);
    }
    free(state); free(stk); free(it); free(off); free(to);
    if (st) { grammar_rules_free(g); return st; }
    *out = g;
    return MOR_OK;
}
