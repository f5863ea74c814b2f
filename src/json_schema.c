/* json_schema.c - mor_json_schema_to_grammar: a JSON Schema as a GBNF grammar
 * (llama.cpp's grammar language) whose rule `root` accepts the JSON texts
 * the schema describes, for grammar-constrained sampling.
 *
 * Two parts. A compact strict JSON parser (RFC 8259, depth-limited) into a
 * flat node array: the library cannot use the programs' JSON reader
 * (src/tools/common/json.c). Then the converter, which walks the schema
 * and builds named rules the way llama.cpp's json-schema-to-grammar does
 * (its approach, not its code): properties in the order of `properties`,
 * required ones first, each optional one optional after them; bounded
 * whitespace between tokens; $ref to local pointers as rules of their own
 * (so a recursive schema is a recursive grammar). A keyword that would
 * change which values are valid and that the converter cannot express is
 * refused (MOR_E_INVALID_ARG naming its JSON pointer) rather than ignored:
 * a grammar that accepts more than the schema would let the model write
 * what the caller's validator then rejects. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"
#include "status.h"
#include "unicode.h"

#define FN "mor_json_schema_to_grammar"
enum {
    JS_MAX_JSON_DEPTH   = 128,    /* nesting of the schema document       */
    JS_MAX_SCHEMA_DEPTH = 64,     /* nested schemas visited (through $ref) */
    JS_MAX_MEMBERS      = 4096,   /* members of one object (duplicate check is quadratic) */
    JS_MAX_REPEAT       = 10000,  /* minItems/maxItems/minLength/maxLength */
    JS_MAX_NAME         = 48      /* rule-name stem taken from a key      */
};

/* ------------------------------------------------------------------------ */
/* Growable byte strings (json_schema.h). */
void jsb_addn(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (n >= SIZE_MAX / 4 - b->n) { b->oom = 1; return; }
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void jsb_add(sbuf *b, const char *s) { jsb_addn(b, s, strlen(s)); }
void jsb_fmt(sbuf *b, const char *fmt, ...)
{
    char t[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    if (k > 0) jsb_addn(b, t, (size_t)k < sizeof t ? (size_t)k : sizeof t - 1);
}


/* ------------------------------------------------------------------------ */
/* The JSON parser. Nodes are made in document order (the root is node 0);
 * a container's children are a list through `next`; strings (decoded to
 * UTF-8) and numbers (their text) live in one pool, by offset. */
enum { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };
typedef struct {
    uint8_t type;
    int32_t first, last, next, n;   /* children (arrays, objects), next sibling, count */
    size_t s, slen;                 /* string value or number text, in the pool */
    size_t k, klen;                 /* member key, in the pool */
} jnode;
typedef struct {
    const char *src;
    size_t len, pos;
    jnode *v;
    int32_t nv, capv;
    sbuf pool;
    mor_status st;
} jdoc;

static int jfail(jdoc *d, const char *what)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < d->pos && i < d->len; i++) {
        if (d->src[i] == '\n') { line++; col = 1; } else col++;
    }
    d->st = err_set(MOR_E_INVALID_ARG, FN ": invalid JSON at byte %zu (line %zu, column %zu): %s",
                    d->pos, line, col, what);
    return -1;
}

static int32_t jnew(jdoc *d, uint8_t type)
{
    if (d->nv == d->capv) {
        int32_t c = d->capv ? d->capv * 2 : 64;
        jnode *q = d->capv < INT32_MAX / 2 ? realloc(d->v, sizeof *q * (size_t)c) : NULL;
        if (!q) { d->st = err_set(MOR_E_NOMEM, FN ": out of memory parsing the schema"); return -1; }
        d->v = q;
        d->capv = c;
    }
    jnode *x = &d->v[d->nv];
    memset(x, 0, sizeof *x);
    x->type = type;
    x->first = x->last = x->next = -1;
    return d->nv++;
}

static void jws(jdoc *d)
{
    while (d->pos < d->len) {
        char c = d->src[d->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        d->pos++;
    }
}

static int hex4(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static void put_utf8(sbuf *b, uint32_t cp)
{
    char u[4];
    jsb_addn(b, u, utf8_encode(cp, u));
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), 0 if none:
 * no overlong forms, surrogates or code points above U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++) if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return k;
}

/* The string at d->pos (its opening quote), decoded into the pool. */
static int jstring(jdoc *d, size_t *off, size_t *len)
{
    d->pos++;
    *off = d->pool.n;
    for (;;) {
        if (d->pos >= d->len) return jfail(d, "unterminated string");
        unsigned char c = (unsigned char)d->src[d->pos];
        if (c == '"') { d->pos++; break; }
        if (c < 0x20) return jfail(d, "control character in a string (escape it)");
        if (c == '\\') {
            if (d->pos + 1 >= d->len) return jfail(d, "unterminated escape");
            char e = d->src[d->pos + 1];
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                static const char out[] = "\"\\/\b\f\n\r\t";
                jsb_addn(&d->pool, &out[simple - "\"\\/bfnrt"], 1);
                d->pos += 2;
                continue;
            }
            uint32_t cp, lo;
            if (e != 'u' || d->pos + 6 > d->len || hex4(d->src + d->pos + 2, &cp))
                return jfail(d, "invalid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX)");
            if (cp >= 0xDC00 && cp <= 0xDFFF) return jfail(d, "\\u escape of a lone low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (d->pos + 12 > d->len || d->src[d->pos + 6] != '\\' || d->src[d->pos + 7] != 'u' ||
                    hex4(d->src + d->pos + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return jfail(d, "\\u escape of a high surrogate not followed by a low one");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                d->pos += 6;
            }
            put_utf8(&d->pool, cp);
            d->pos += 6;
            continue;
        }
        if (c < 0x80) { jsb_addn(&d->pool, (const char *)&c, 1); d->pos++; continue; }
        size_t k = utf8_len((const unsigned char *)d->src + d->pos, d->len - d->pos);
        if (!k) return jfail(d, "invalid UTF-8 in a string");
        jsb_addn(&d->pool, d->src + d->pos, k);
        d->pos += k;
    }
    *len = d->pool.n - *off;
    jsb_addn(&d->pool, "", 1);   /* NUL-terminated too, for messages */
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int32_t jvalue(jdoc *d, int depth);

static int32_t jcontainer(jdoc *d, int depth, int obj)
{
    int32_t x = jnew(d, obj ? J_OBJ : J_ARR);
    if (x < 0) return -1;
    if (depth >= JS_MAX_JSON_DEPTH) return jfail(d, "nested deeper than 128 levels");
    d->pos++;
    jws(d);
    if (d->pos < d->len && d->src[d->pos] == (obj ? '}' : ']')) { d->pos++; return x; }
    for (;;) {
        size_t k = 0, klen = 0;
        if (obj) {
            if (d->pos >= d->len || d->src[d->pos] != '"') return jfail(d, "expected a member name (a string)");
            if (jstring(d, &k, &klen)) return -1;
            if (d->pool.oom) break;
            for (int32_t c = d->v[x].first; c >= 0; c = d->v[c].next)
                if (d->v[c].klen == klen && !memcmp(d->pool.p + d->v[c].k, d->pool.p + k, klen))
                    return jfail(d, "duplicate member name in an object");
            if (d->v[x].n >= JS_MAX_MEMBERS) return jfail(d, "an object of more than 4096 members");
            jws(d);
            if (d->pos >= d->len || d->src[d->pos] != ':') return jfail(d, "expected ':'");
            d->pos++;
        }
        int32_t c = jvalue(d, depth + 1);
        if (c < 0) return -1;
        d->v[c].k = k;
        d->v[c].klen = klen;
        if (d->v[x].last >= 0) d->v[d->v[x].last].next = c; else d->v[x].first = c;
        d->v[x].last = c;
        d->v[x].n++;
        jws(d);
        if (d->pos < d->len && d->src[d->pos] == ',') { d->pos++; jws(d); continue; }
        if (d->pos < d->len && d->src[d->pos] == (obj ? '}' : ']')) { d->pos++; return x; }
        return jfail(d, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    d->st = err_set(MOR_E_NOMEM, FN ": out of memory parsing the schema");
    return -1;
}

static int32_t jvalue(jdoc *d, int depth)
{
    jws(d);
    if (d->pos >= d->len) return jfail(d, "expected a value");
    char c = d->src[d->pos];
    static const char *const words[3] = { "null", "false", "true" };
    for (int w = 0; w < 3; w++) {
        size_t n = strlen(words[w]);
        if (d->len - d->pos >= n && !memcmp(d->src + d->pos, words[w], n)) {
            d->pos += n;
            return jnew(d, (uint8_t)(J_NULL + w));
        }
    }
    if (c == '{' || c == '[') return jcontainer(d, depth, c == '{');
    if (c == '"') {
        int32_t x = jnew(d, J_STR);
        if (x < 0) return -1;
        size_t s, n;
        if (jstring(d, &s, &n)) return -1;
        d->v[x].s = s;
        d->v[x].slen = n;
        return x;
    }
    if (c == '-' || is_digit(c)) {
        /* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
        size_t p = d->pos;
        const char *s = d->src;
        if (s[p] == '-') p++;
        if (p >= d->len || !is_digit(s[p])) { d->pos = p; return jfail(d, "a digit must follow '-'"); }
        if (s[p] == '0') p++; else while (p < d->len && is_digit(s[p])) p++;
        if (p < d->len && is_digit(s[p])) { d->pos = p; return jfail(d, "a number with a leading zero"); }
        if (p < d->len && s[p] == '.') {
            p++;
            if (p >= d->len || !is_digit(s[p])) { d->pos = p; return jfail(d, "a digit must follow '.'"); }
            while (p < d->len && is_digit(s[p])) p++;
        }
        if (p < d->len && (s[p] == 'e' || s[p] == 'E')) {
            p++;
            if (p < d->len && (s[p] == '+' || s[p] == '-')) p++;
            if (p >= d->len || !is_digit(s[p])) { d->pos = p; return jfail(d, "a digit must follow the exponent"); }
            while (p < d->len && is_digit(s[p])) p++;
        }
        int32_t x = jnew(d, J_NUM);
        if (x < 0) return -1;
        d->v[x].s = d->pool.n;
        d->v[x].slen = p - d->pos;
        jsb_addn(&d->pool, s + d->pos, p - d->pos);
        jsb_addn(&d->pool, "", 1);
        d->pos = p;
        return x;
    }
    return jfail(d, "expected a value (object, array, string, number, true, false or null)");
}

static mor_status jparse(jdoc *d, const char *src, size_t len)
{
    memset(d, 0, sizeof *d);
    d->src = src;
    d->len = len;
    jsb_addn(&d->pool, "", 0);   /* never NULL: offsets of empty strings point into it */
    if (jvalue(d, 0) < 0) return d->st;
    if (d->pool.oom) return err_set(MOR_E_NOMEM, FN ": out of memory parsing the schema");
    jws(d);
    if (d->pos != d->len) { jfail(d, "text after the value"); return d->st; }
    return MOR_OK;
}

static const char *jstr(const jdoc *d, int32_t x) { return d->pool.p + d->v[x].s; }
static const char *jkey(const jdoc *d, int32_t x) { return d->pool.p + d->v[x].k; }
static int jkey_is(const jdoc *d, int32_t x, const char *k)
{
    return d->v[x].klen == strlen(k) && !memcmp(jkey(d, x), k, d->v[x].klen);
}
static int jstr_is(const jdoc *d, int32_t x, const char *k)
{
    return d->v[x].type == J_STR && d->v[x].slen == strlen(k) && !memcmp(jstr(d, x), k, d->v[x].slen);
}
static int32_t jget(const jdoc *d, int32_t obj, const char *k)
{
    if (obj < 0 || d->v[obj].type != J_OBJ) return -1;
    for (int32_t c = d->v[obj].first; c >= 0; c = d->v[c].next)
        if (jkey_is(d, c, k)) return c;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* The converter. */

/* The primitive rules, added when first used, under reserved names (a rule
 * named from the schema never takes one of them). */
enum { P_SPACE, P_BOOLEAN, P_NULL, P_INTEGRAL, P_DECIMAL, P_NUMBER, P_INTEGER, P_CHAR, P_STRING,
       P_VALUE, P_OBJECT, P_ARRAY, N_PRIM };
static const struct { const char *name, *body; unsigned deps; } PRIMS[N_PRIM] = {
    /* bounded, so that a model cannot loop on whitespace forever */
    [P_SPACE]    = { "space", "( \" \" | \"\\n\" [ \\t]{0,20} )?", 0 },
    [P_BOOLEAN]  = { "boolean", "( \"true\" | \"false\" ) space", 1u << P_SPACE },
    [P_NULL]     = { "null", "\"null\" space", 1u << P_SPACE },
    /* digit counts bounded as llama.cpp's: a number a double can hold */
    [P_INTEGRAL] = { "integral-part", "[0] | [1-9] [0-9]{0,15}", 0 },
    [P_DECIMAL]  = { "decimal-part", "[0-9]{1,16}", 0 },
    [P_NUMBER]   = { "number", "\"-\"? integral-part ( \".\" decimal-part )? ( [eE] [-+]? decimal-part )? space",
                     1u << P_INTEGRAL | 1u << P_DECIMAL | 1u << P_SPACE },
    [P_INTEGER]  = { "integer", "\"-\"? integral-part space", 1u << P_INTEGRAL | 1u << P_SPACE },
    [P_CHAR]     = { "char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )", 0 },
    [P_STRING]   = { "string", "\"\\\"\" char* \"\\\"\" space", 1u << P_CHAR | 1u << P_SPACE },
    [P_VALUE]    = { "value", "object | array | string | number | boolean | null",
                     1u << P_OBJECT | 1u << P_ARRAY | 1u << P_STRING | 1u << P_NUMBER | 1u << P_BOOLEAN | 1u << P_NULL },
    [P_OBJECT]   = { "object", "\"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* )? \"}\" space",
                     1u << P_SPACE | 1u << P_STRING | 1u << P_VALUE },
    [P_ARRAY]    = { "array", "\"[\" space ( value ( \",\" space value )* )? \"]\" space",
                     1u << P_SPACE | 1u << P_VALUE },
};

/* JSON types as a bit mask, in the order alternatives are written. */
enum { T_OBJECT, T_ARRAY, T_STRING, T_NUMBER, T_INTEGER, T_BOOLEAN, T_NULL, N_TYPES };
static const char *const TYPE_NAMES[N_TYPES] = { "object", "array", "string", "number", "integer", "boolean", "null" };

typedef struct { char *name, *body; } rule;                /* body NULL while pending */
typedef struct { int32_t node; int rule, pending, consume; } refent;

typedef struct {
    jdoc *d;
    rule *rules;
    int nr, capr;
    int *ht;           /* rule names hashed: index + 1, 0 empty (open addressing) */
    size_t htcap;
    refent *refs;
    int nref, capref;
    int prim_used[N_PRIM];
    sbuf ptr;          /* JSON pointer of the schema being converted */
    int depth;         /* nested schemas being converted */
    int consume;       /* objects and arrays open: a $ref cycle inside none is left-recursive */
    mor_status st;
} conv;

/* Every error names the schema's place as a URI fragment ("#/properties/a"). */
static int cfail(conv *c, mor_status s, const char *fmt, ...) MOR_PRINTF(3, 4);
static int cfail(conv *c, mor_status s, const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    c->st = err_set(s, FN ": schema at \"#%s\": %s", c->ptr.p ? c->ptr.p : "", what);
    return -1;
}
static int nomem(conv *c) { return cfail(c, MOR_E_NOMEM, "out of memory"); }

/* JSON pointer segments (RFC 6901: ~ as ~0, / as ~1); pop by length. */
static size_t ptr_push(conv *c, const char *seg, size_t n)
{
    size_t old = c->ptr.n;
    jsb_addn(&c->ptr, "/", 1);
    for (size_t i = 0; i < n; i++) {
        if (seg[i] == '~') jsb_addn(&c->ptr, "~0", 2);
        else if (seg[i] == '/') jsb_addn(&c->ptr, "~1", 2);
        else jsb_addn(&c->ptr, seg + i, 1);
    }
    return old;
}
static size_t ptr_pushi(conv *c, const char *seg, int i)
{
    size_t old = ptr_push(c, seg, strlen(seg));
    jsb_fmt(&c->ptr, "/%d", i);
    return old;
}
static void ptr_pop(conv *c, size_t old)
{
    if (c->ptr.p && old <= c->ptr.n) { c->ptr.n = old; c->ptr.p[old] = 0; }
}

static size_t name_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (size_t)h;
}

/* The rule named s[0..n), or -1: a hash table, since schemas of thousands
 * of properties make tens of thousands of rules. */
static int rule_findn(const conv *c, const char *s, size_t n)
{
    if (!c->htcap) return -1;
    for (size_t i = name_hash(s, n) & (c->htcap - 1);; i = (i + 1) & (c->htcap - 1)) {
        int r = c->ht[i] - 1;
        if (r < 0) return -1;
        if (!strncmp(c->rules[r].name, s, n) && !c->rules[r].name[n]) return r;
    }
}
static int rule_find(const conv *c, const char *name) { return rule_findn(c, name, strlen(name)); }

static void ht_put(conv *c, int r)
{
    size_t i = name_hash(c->rules[r].name, strlen(c->rules[r].name)) & (c->htcap - 1);
    while (c->ht[i]) i = (i + 1) & (c->htcap - 1);
    c->ht[i] = r + 1;
}

static int name_reserved(const char *name)
{
    for (int k = 0; k < N_PRIM; k++) if (!strcmp(PRIMS[k].name, name)) return 1;
    return 0;
}

static int rule_append(conv *c, char *name, char *body)
{
    if (c->nr == c->capr) {
        int n = c->capr ? c->capr * 2 : 32;
        rule *q = realloc(c->rules, sizeof *q * (size_t)n);
        if (!q) { free(name); free(body); return nomem(c); }
        c->rules = q;
        c->capr = n;
    }
    if ((size_t)(c->nr + 1) * 2 > c->htcap) {   /* at most half full */
        size_t cap = c->htcap ? c->htcap * 2 : 64;
        int *t = calloc(cap, sizeof *t);
        if (!t) { free(name); free(body); return nomem(c); }
        free(c->ht);
        c->ht = t;
        c->htcap = cap;
        for (int i = 0; i < c->nr; i++) ht_put(c, i);
    }
    c->rules[c->nr].name = name;
    c->rules[c->nr].body = body;
    ht_put(c, c->nr);
    return c->nr++;
}

/* A rule named stem, or stem-1, stem-2, ... when that name is taken by
 * another body (body NULL: reserve a pending name). Same name and body:
 * the existing rule. Takes body. */
static int rule_add(conv *c, const char *stem, char *body)
{
    sbuf nm = { 0 };
    for (int i = 0;; i++) {
        nm.n = 0;
        jsb_add(&nm, stem);
        if (i) jsb_fmt(&nm, "-%d", i);
        if (nm.oom) { free(nm.p); free(body); return nomem(c); }
        if (name_reserved(nm.p)) continue;
        int r = rule_find(c, nm.p);
        if (r < 0) return rule_append(c, nm.p, body);
        if (body && c->rules[r].body && !strcmp(c->rules[r].body, body)) { free(nm.p); free(body); return r; }
    }
}

static const char *prim(conv *c, int k)
{
    if (!c->prim_used[k]) {
        c->prim_used[k] = 1;
        char *n = strdup(PRIMS[k].name), *b = strdup(PRIMS[k].body);
        if (!n || !b) { free(n); free(b); nomem(c); return PRIMS[k].name; }
        rule_append(c, n, b);
        for (int j = 0; j < N_PRIM; j++) if (PRIMS[k].deps >> j & 1) prim(c, j);
    }
    return PRIMS[k].name;
}

/* A rule name from a parent name and a key: [a-zA-Z0-9-] kept, anything
 * else as '-', the key's part cut at JS_MAX_NAME bytes. */
static void make_name(sbuf *o, const char *parent, const char *key, size_t klen)
{
    if (parent && *parent) { jsb_add(o, parent); if (klen) jsb_add(o, "-"); }
    if (klen > JS_MAX_NAME) klen = JS_MAX_NAME;
    for (size_t i = 0; i < klen; i++) {
        char ch = key[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || is_digit(ch) || ch == '-';
        jsb_addn(o, ok ? &ch : "-", 1);
    }
}

/* A string's JSON text (escaped as JSON.stringify does, DEL too) as a GBNF
 * literal: each JSON backslash and quote escaped again for GBNF. */
static void lit_json_string(sbuf *o, const char *s, size_t n)
{
    jsb_add(o, "\"\\\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *e = NULL;
        switch (ch) {
        case '"': e = "\\\\\\\""; break;
        case '\\': e = "\\\\\\\\"; break;
        case '\b': e = "\\\\b"; break;
        case '\f': e = "\\\\f"; break;
        case '\n': e = "\\\\n"; break;
        case '\r': e = "\\\\r"; break;
        case '\t': e = "\\\\t"; break;
        default: break;
        }
        if (e) jsb_add(o, e);
        else if (ch < 0x20 || ch == 0x7f) jsb_fmt(o, "\\\\u%04x", ch);
        else jsb_addn(o, (const char *)&ch, 1);
    }
    jsb_add(o, "\\\"\"");
}

/* A JSON value (enum, const) as a sequence of literals with optional
 * whitespace after each token, as the generic rules allow it. */
static void lit_value(conv *c, sbuf *o, int32_t x)
{
    const jdoc *d = c->d;
    const char *sp = prim(c, P_SPACE);
    switch (d->v[x].type) {
    case J_NULL: jsb_add(o, "\"null\" "); break;
    case J_FALSE: jsb_add(o, "\"false\" "); break;
    case J_TRUE: jsb_add(o, "\"true\" "); break;
    case J_NUM: jsb_add(o, "\""); jsb_addn(o, jstr(d, x), d->v[x].slen); jsb_add(o, "\" "); break;
    case J_STR: lit_json_string(o, jstr(d, x), d->v[x].slen); jsb_add(o, " "); break;
    case J_ARR: case J_OBJ: {
        int obj = d->v[x].type == J_OBJ;
        jsb_add(o, obj ? "\"{\" " : "\"[\" ");
        jsb_add(o, sp);
        for (int32_t m = d->v[x].first; m >= 0; m = d->v[m].next) {
            jsb_add(o, m == d->v[x].first ? " " : " \",\" ");
            if (m != d->v[x].first) { jsb_add(o, sp); jsb_add(o, " "); }
            if (obj) {
                lit_json_string(o, jkey(d, m), d->v[m].klen);
                jsb_add(o, " ");
                jsb_add(o, sp);
                jsb_add(o, " \":\" ");
                jsb_add(o, sp);
                jsb_add(o, " ");
            }
            lit_value(c, o, m);
        }
        jsb_add(o, obj ? " \"}\" " : " \"]\" ");
        break;
    }
    default: break;
    }
    jsb_add(o, sp);
}

/* A repetition suffix for {lo, hi}, hi < 0: unbounded. */
static void rep(sbuf *o, long lo, long hi)
{
    if (lo == 0 && hi < 0) jsb_add(o, "*");
    else if (lo == 1 && hi < 0) jsb_add(o, "+");
    else if (lo == 0 && hi == 1) jsb_add(o, "?");
    else if (hi < 0) jsb_fmt(o, "{%ld,}", lo);
    else if (lo == hi) { if (lo != 1) jsb_fmt(o, "{%ld}", lo); }
    else jsb_fmt(o, "{%ld,%ld}", lo, hi);
}

/* A count keyword (minItems, maxLength, ...): a non-negative integer (5.0
 * counts) up to JS_MAX_REPEAT; absent: *out = dflt. */
static int count_kw(conv *c, int32_t sch, const char *kw, long dflt, long *out)
{
    const jdoc *d = c->d;
    int32_t x = jget(d, sch, kw);
    *out = dflt;
    if (x < 0) return 0;
    if (d->v[x].type != J_NUM) goto bad;
    const char *s = jstr(d, x);
    size_t n = d->v[x].slen, i = 0;
    long v = 0;
    if (s[0] == '-') goto bad;
    for (; i < n && is_digit(s[i]); i++) {
        v = v * 10 + (s[i] - '0');
        if (v > JS_MAX_REPEAT) {
            size_t old = ptr_push(c, kw, strlen(kw));
            cfail(c, MOR_E_INVALID_ARG, "%s is above %d, the most this converter writes", kw, JS_MAX_REPEAT);
            ptr_pop(c, old);
            return -1;
        }
    }
    if (i < n && s[i] == '.') for (i++; i < n && s[i] == '0'; i++) {}
    if (i != n) goto bad;
    *out = v;
    return 0;
bad:;
    size_t old = ptr_push(c, kw, strlen(kw));
    cfail(c, MOR_E_INVALID_ARG, "%s must be a non-negative integer", kw);
    ptr_pop(c, old);
    return -1;
}

/* Keywords that constrain values and that the converter cannot express:
 * ignoring one would make the grammar accept values the schema rejects. */
static const char *const UNSUPPORTED[] = {
    "patternProperties", "multipleOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
    "propertyNames", "minProperties", "maxProperties", "contains", "minContains", "maxContains",
    "unevaluatedProperties", "unevaluatedItems", "additionalItems", "$dynamicRef",
    "$recursiveRef",
};
/* Keywords that constrain values (the rest are annotations: title,
 * description, default, examples, $defs, ...). "format" is an annotation in
 * JSON Schema 2020-12, but validators often assert it: the converter
 * enforces the formats it knows and refuses the others. */
static const char *const ASSERTIONS[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "minLength", "maxLength", "anyOf", "oneOf", "allOf", "$ref", "prefixItems",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "format",
};
/* The bounds, which the converter writes for integers only. */
static const char *const BOUNDS[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum" };

static int kw_in(const jdoc *d, int32_t m, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) if (jkey_is(d, m, list[i])) return 1;
    return 0;
}
#define KW_IN(d, m, list) kw_in(d, m, list, sizeof list / sizeof list[0])

static int visit(conv *c, int32_t sch, const char *name);
static int body_of(conv *c, int32_t sch, const char *name, sbuf *o);

/* The bounds are written for integers alone, "pattern" and "format" for
 * strings; elsewhere (numbers, several types, enum or const) they are
 * refused, not ignored. 0, or -1 (error set). */
static int kw_types(conv *c, int32_t sch, int mask, int listed)
{
    const jdoc *d = c->d;
    for (int32_t m = d->v[sch].first; m >= 0; m = d->v[m].next) {
        int bound = KW_IN(d, m, BOUNDS), shaped = jkey_is(d, m, "pattern") || jkey_is(d, m, "format");
        if (!bound && !shaped) continue;
        const char *why = listed ? "beside enum or const" :
                          bound && mask != 1 << T_INTEGER ? "except with \"type\": \"integer\"" :
                          shaped && mask != 1 << T_STRING ? "except with \"type\": \"string\"" : NULL;
        if (!why) continue;
        size_t old = ptr_push(c, jkey(d, m), d->v[m].klen);
        cfail(c, MOR_E_INVALID_ARG, "keyword \"%s\" is not supported %s", jkey(d, m), why);
        ptr_pop(c, old);
        return -1;
    }
    return 0;
}

/* Convert the schema at member `kw` of sch (or its element i when i >= 0)
 * into a rule named parent-suffix: the rule's index. */
static int visit_at(conv *c, int32_t x, const char *parent, const char *suffix, size_t slen,
                    const char *seg, size_t seglen, const char *seg2, size_t seg2len)
{
    sbuf nm = { 0 };
    make_name(&nm, parent, suffix, slen);
    size_t old = ptr_push(c, seg, seglen);
    if (seg2) ptr_push(c, seg2, seg2len);
    int r = nm.oom ? nomem(c) : visit(c, x, nm.p);
    ptr_pop(c, old);
    free(nm.p);
    return r;
}

/* The node a local $ref ("#", "#/$defs/X", any "#/..." JSON pointer)
 * points at, or -1 (error set). */
static int32_t ref_target(conv *c, int32_t refnode)
{
    const jdoc *d = c->d;
    if (d->v[refnode].type != J_STR) return cfail(c, MOR_E_INVALID_ARG, "$ref must be a string");
    const char *r = jstr(d, refnode);
    size_t n = d->v[refnode].slen;
    int shown = (int)(n > 200 ? 200 : n);
    if (!n || r[0] != '#' || (n > 1 && r[1] != '/'))
        return cfail(c, MOR_E_INVALID_ARG, "$ref \"%.*s\": only local references (\"#\" or \"#/...\") are supported",
                     shown, r);
    int32_t t = 0;
    size_t i = 1;
    sbuf seg = { 0 };
    while (i < n && t >= 0) {
        size_t j = ++i;
        while (j < n && r[j] != '/') j++;
        seg.n = 0;
        for (size_t k = i; k < j; k++) {
            if (r[k] == '~' && k + 1 < j && (r[k + 1] == '0' || r[k + 1] == '1')) {
                jsb_addn(&seg, r[k + 1] == '0' ? "~" : "/", 1);
                k++;
            } else jsb_addn(&seg, r + k, 1);
        }
        if (seg.oom) { free(seg.p); return nomem(c); }
        int32_t next = -1;
        if (d->v[t].type == J_OBJ) {
            for (int32_t m = d->v[t].first; m >= 0; m = d->v[m].next)
                if (d->v[m].klen == seg.n && (!seg.n || !memcmp(jkey(d, m), seg.p, seg.n))) { next = m; break; }
        } else if (d->v[t].type == J_ARR && seg.n && seg.n < 8 && (seg.n == 1 || seg.p[0] != '0')) {
            long idx = 0;
            size_t k = 0;
            for (; k < seg.n && is_digit(seg.p[k]); k++) idx = idx * 10 + (seg.p[k] - '0');
            if (k == seg.n) {
                next = d->v[t].first;
                while (next >= 0 && idx--) next = d->v[next].next;
            }
        }
        t = next;
        i = j;
    }
    free(seg.p);
    if (t < 0) return cfail(c, MOR_E_INVALID_ARG, "$ref \"%.*s\" does not resolve in this document", shown, r);
    return t;
}

/* The rule of a $ref's target: made once per target, so that recursive
 * schemas become recursive rules; its index. */
static int ref_rule(conv *c, int32_t refnode)
{
    const jdoc *d = c->d;
    int32_t t = ref_target(c, refnode);
    if (t < 0) return -1;
    const char *r = jstr(d, refnode);
    size_t n = d->v[refnode].slen, last = n;
    while (last > 1 && r[last - 1] != '/') last--;
    for (int k = 0; k < c->nref; k++) {
        refent *e = &c->refs[k];
        if (e->node != t) continue;
        if (e->pending && e->consume == c->consume)
            return cfail(c, MOR_E_INVALID_ARG,
                         "$ref \"%.*s\" refers back to itself with no object or array between "
                         "(it would match nothing, the grammar would be left-recursive)",
                         (int)(n > 200 ? 200 : n), r);
        return e->rule;
    }
    if (c->nref == c->capref) {
        int cap = c->capref ? c->capref * 2 : 16;
        refent *q = realloc(c->refs, sizeof *q * (size_t)cap);
        if (!q) return nomem(c);
        c->refs = q;
        c->capref = cap;
    }
    sbuf nm = { 0 }, seg = { 0 };
    for (size_t i = last; i < n; i++) {   /* the last segment, unescaped (~1 is '/', ~0 '~') */
        int esc = r[i] == '~' && i + 1 < n && (r[i + 1] == '0' || r[i + 1] == '1');
        jsb_addn(&seg, esc ? (r[i + 1] == '0' ? "~" : "/") : r + i, 1);
        i += (size_t)esc;
    }
    make_name(&nm, NULL, seg.p ? seg.p : "", seg.n);
    if (!nm.n) jsb_add(&nm, "ref");
    if (seg.oom) nm.oom = 1;
    free(seg.p);
    int ri = nm.oom ? nomem(c) : rule_add(c, nm.p, NULL);
    if (ri < 0) { free(nm.p); return -1; }
    int k = c->nref++;
    c->refs[k] = (refent){ t, ri, 1, c->consume };
    /* errors inside the target name the target's pointer */
    sbuf saved = c->ptr;
    c->ptr = (sbuf){ 0 };
    jsb_addn(&c->ptr, r + 1, n - 1);
    sbuf body = { 0 };
    int ok = c->ptr.oom ? nomem(c) : body_of(c, t, nm.p, &body);
    free(c->ptr.p);
    c->ptr = saved;
    free(nm.p);
    if (ok < 0) { free(body.p); return -1; }
    c->rules[ri].body = body.p;
    c->refs[k].pending = 0;
    return ri;
}

/* The JSON types a schema allows: its "type", else what its keywords imply
 * (properties: an object, items: an array, ... as llama.cpp reads them),
 * else 0 (any value). */
static int type_mask(conv *c, int32_t sch, int *order, int *n_order)
{
    const jdoc *d = c->d;
    int32_t t = jget(d, sch, "type");
    int mask = 0;
    *n_order = 0;
    if (t >= 0) {
        int32_t one = t, cnt = 1;
        if (d->v[t].type == J_ARR) { one = d->v[t].first; cnt = d->v[t].n; }
        if (d->v[t].type == J_ARR && !cnt) {
            size_t old = ptr_push(c, "type", 4);
            cfail(c, MOR_E_INVALID_ARG, "type is an empty array: no value is valid");
            ptr_pop(c, old);
            return -1;
        }
        for (int i = 0; i < cnt; i++, one = d->v[one].next) {
            int k = 0;
            while (k < N_TYPES && !jstr_is(d, one, TYPE_NAMES[k])) k++;
            if (k == N_TYPES) {
                size_t old = d->v[t].type == J_ARR ? ptr_pushi(c, "type", i) : ptr_push(c, "type", 4);
                cfail(c, MOR_E_INVALID_ARG, "type must be one of object, array, string, number, integer, "
                      "boolean, null (or an array of them)");
                ptr_pop(c, old);
                return -1;
            }
            if (!(mask >> k & 1)) order[(*n_order)++] = k;
            mask |= 1 << k;
        }
    } else {
        static const char *const implies[][5] = {
            [T_OBJECT] = { "properties", "required", "additionalProperties", NULL },
            [T_ARRAY] = { "items", "prefixItems", "minItems", "maxItems", NULL },
            [T_STRING] = { "minLength", "maxLength", "pattern", "format", NULL },
        };
        for (int k = 0; k <= T_STRING; k++)
            for (int i = 0; implies[k][i]; i++)
                if (jget(d, sch, implies[k][i]) >= 0 && !(mask >> k & 1)) { mask |= 1 << k; order[(*n_order)++] = k; }
    }
    /* "number" already takes every integer */
    if ((mask >> T_NUMBER & 1) && (mask >> T_INTEGER & 1)) {
        int j = 0;
        for (int i = 0; i < *n_order; i++) if (order[i] != T_INTEGER) order[j++] = order[i];
        *n_order = j;
        mask &= ~(1 << T_INTEGER);
    }
    return mask;
}

/* Does value x have a type in mask (0: any), and a length in [lo, hi] if a string? */
static int value_fits(const jdoc *d, int32_t x, int mask, long lo, long hi)
{
    int k;
    switch (d->v[x].type) {
    case J_NULL: k = T_NULL; break;
    case J_FALSE: case J_TRUE: k = T_BOOLEAN; break;
    case J_ARR: k = T_ARRAY; break;
    case J_OBJ: k = T_OBJECT; break;
    case J_STR: {
        long cps = 0;
        for (size_t i = 0; i < d->v[x].slen; i++) cps += ((unsigned char)jstr(d, x)[i] & 0xC0) != 0x80;
        if (cps < lo || (hi >= 0 && cps > hi)) return 0;
        k = T_STRING;
        break;
    }
    default: {
        /* an integer is a number without fraction (or a zero one) and exponent */
        const char *s = jstr(d, x);
        size_t n = d->v[x].slen, i = s[0] == '-';
        while (i < n && is_digit(s[i])) i++;
        if (i < n && s[i] == '.') for (i++; i < n && s[i] == '0'; i++) {}
        k = i == n ? T_INTEGER : T_NUMBER;
        if (k == T_INTEGER && (mask >> T_NUMBER & 1)) return 1;
    }
    }
    return !mask || (mask >> k & 1);
}

/* enum / const: the listed values that fit the schema's type and string lengths. */
static int enum_body(conv *c, int32_t sch, int32_t en, int32_t cn, int mask, sbuf *o)
{
    const jdoc *d = c->d;
    long lo, hi;
    if (count_kw(c, sch, "minLength", 0, &lo) || count_kw(c, sch, "maxLength", -1, &hi)) return -1;
    if (en >= 0 && d->v[en].type != J_ARR) {
        size_t old = ptr_push(c, "enum", 4);
        cfail(c, MOR_E_INVALID_ARG, "enum must be an array");
        ptr_pop(c, old);
        return -1;
    }
    if (en >= 0 && cn >= 0) return cfail(c, MOR_E_INVALID_ARG, "enum beside const is not supported");
    int n = 0;
    for (int32_t x = en >= 0 ? d->v[en].first : cn; x >= 0; x = en >= 0 ? d->v[x].next : -1) {
        if (!value_fits(d, x, mask, lo, hi)) continue;
        if (n++) jsb_add(o, " | ");
        lit_value(c, o, x);
    }
    if (!n)
        return cfail(c, MOR_E_INVALID_ARG, "no value of %s fits the schema's type and lengths: no value is valid",
                     en >= 0 ? "enum" : "const");
    return 0;
}

/* One property: its key and schema (schema -1: any value). */
typedef struct { const char *key; size_t klen; int32_t sch; } prop;

static int kv_rule(conv *c, const char *name, const prop *p, int32_t via)
{
    sbuf nm = { 0 }, b = { 0 };
    make_name(&nm, name, p->key, p->klen);
    int vr;
    if (p->sch < 0) vr = -2;
    else if (via >= 0) {
        size_t old = ptr_push(c, jkey(c->d, via), c->d->v[via].klen);
        ptr_push(c, p->key, p->klen);
        vr = nm.oom ? nomem(c) : visit(c, p->sch, nm.p);
        ptr_pop(c, old);
    } else vr = nm.oom ? nomem(c) : visit(c, p->sch, nm.p);
    if (vr == -1) { free(nm.p); return -1; }
    lit_json_string(&b, p->key, p->klen);
    jsb_add(&b, " ");
    jsb_add(&b, prim(c, P_SPACE));
    jsb_add(&b, " \":\" ");
    jsb_add(&b, prim(c, P_SPACE));
    jsb_add(&b, " ");
    jsb_add(&b, vr == -2 ? prim(c, P_VALUE) : c->rules[vr].name);
    jsb_add(&nm, "-kv");
    if (nm.oom || b.oom) { free(nm.p); free(b.p); return nomem(c); }
    int r = rule_add(c, nm.p, b.p);
    free(nm.p);
    return r;
}

/* An object with the given properties: required ones in this order, then
 * each optional one optional, in order, then (addl >= 0) any number of
 * other members whose values follow schema addl (-2: any value). kv[i] is
 * the rule of member i; the optional tail is a chain of "-rest" rules so
 * that the grammar stays linear in the number of properties. */
static int object_body(conv *c, const char *name, const int *kv, const int *req, int n, int addl_kv, sbuf *o)
{
    const char *sp = prim(c, P_SPACE);
    jsb_add(o, "\"{\" ");
    jsb_add(o, sp);
    int nreq = 0, nopt = 0;
    for (int i = 0; i < n; i++) {
        if (!req[i]) { nopt++; continue; }
        if (nreq++) { jsb_add(o, " \",\" "); jsb_add(o, sp); }
        jsb_add(o, " ");
        jsb_add(o, c->rules[kv[i]].name);
    }
    int *opt = malloc(sizeof *opt * (size_t)(nopt + 1));
    if (!opt) return nomem(c);
    nopt = 0;
    for (int i = 0; i < n; i++) if (!req[i]) opt[nopt++] = kv[i];
    if (addl_kv >= 0) opt[nopt++] = -1 - addl_kv;   /* the "any other members" entry */
    if (nopt) {
        /* rest[i]: what may follow when entry i-1 was the last one written: ("," entry_i)? rest[i+1] */
        char **rest = calloc((size_t)nopt + 1, sizeof *rest);
        if (!rest) { free(opt); return nomem(c); }
        sbuf e = { 0 };
        for (int i = nopt - 1; i >= 0; i--) {
            sbuf b = { 0 };
            int ak = opt[i] < 0 ? -1 - opt[i] : -1;
            const char *kvn = c->rules[ak >= 0 ? ak : opt[i]].name;
            /* the optional form: ( "," space kv )? or ( "," space kv )* for other members */
            jsb_add(&b, "( \",\" ");
            jsb_add(&b, sp);
            jsb_add(&b, " ");
            jsb_add(&b, kvn);
            jsb_add(&b, ak >= 0 ? " )*" : " )?");
            if (rest[i + 1]) { jsb_add(&b, " "); jsb_add(&b, rest[i + 1]); }
            if (i > 0) {
                /* named for its entry: X-kv's is X-rest */
                sbuf nm = { 0 };
                size_t kl = strlen(kvn);
                jsb_addn(&nm, kvn, kl > 3 && !strcmp(kvn + kl - 3, "-kv") ? kl - 3 : kl);
                jsb_add(&nm, "-rest");
                int r = b.oom || nm.oom ? nomem(c) : rule_add(c, nm.p, b.p);
                if (b.oom || nm.oom) free(b.p);
                free(nm.p);
                if (r < 0) { e.oom = 1; break; }
                rest[i] = strdup(c->rules[r].name);
                if (!rest[i]) { e.oom = 1; break; }
            } else free(b.p);
        }
        if (!e.oom && c->st == MOR_OK) {
            /* some entry i comes first: entry i itself, then rest[i+1] */
            jsb_add(&e, nreq ? " ( \",\" " : " ( ");
            if (nreq) { jsb_add(&e, sp); jsb_add(&e, " ( "); }
            for (int i = 0; i < nopt; i++) {
                int ak = opt[i] < 0 ? -1 - opt[i] : -1;
                const char *kvn = c->rules[ak >= 0 ? ak : opt[i]].name;
                if (i) jsb_add(&e, " | ");
                jsb_add(&e, kvn);
                if (ak >= 0) { jsb_add(&e, " ( \",\" "); jsb_add(&e, sp); jsb_add(&e, " "); jsb_add(&e, kvn); jsb_add(&e, " )*"); }
                if (rest[i + 1]) { jsb_add(&e, " "); jsb_add(&e, rest[i + 1]); }
            }
            jsb_add(&e, nreq ? " ) )?" : " )?");
            if (!e.oom) jsb_addn(o, e.p, e.n);
        }
        for (int i = 0; i <= nopt; i++) free(rest[i]);
        free(rest);
        int bad = e.oom || c->st != MOR_OK;
        free(e.p);
        if (bad) { free(opt); return c->st != MOR_OK ? -1 : nomem(c); }
    }
    free(opt);
    jsb_add(o, " \"}\" ");
    jsb_add(o, sp);
    return 0;
}

/* Whether an allOf member (resolved through $ref) is a plain object part
 * that merges: type object (or none), properties, required, annotations. */
static int32_t resolve_local(conv *c, int32_t sch);

/* The object schema and its allOf members (resolved through $ref), whose
 * properties merge; returns how many, -1 on error. */
static int object_parts(conv *c, int32_t sch, int32_t parts[65])
{
    const jdoc *d = c->d;
    int np = 0;
    parts[np++] = sch;
    int32_t all = jget(d, sch, "allOf");
    int i = 0;
    for (int32_t m = all >= 0 ? d->v[all].first : -1; m >= 0; m = d->v[m].next, i++) {
        size_t old = ptr_pushi(c, "allOf", i);
        int32_t t = resolve_local(c, m);
        if (t >= 0 && (d->v[t].type != J_OBJ || np == 65)) {
            cfail(c, MOR_E_INVALID_ARG, "allOf: only up to 64 object schemas can be combined");
            t = -1;
        }
        for (int32_t k = t >= 0 ? d->v[t].first : -1; k >= 0; k = d->v[k].next) {
            int plain = jkey_is(d, k, "properties") || jkey_is(d, k, "required") ||
                        (jkey_is(d, k, "type") && jstr_is(d, k, "object"));
            if (!plain && (KW_IN(d, k, ASSERTIONS) || KW_IN(d, k, UNSUPPORTED))) {
                cfail(c, MOR_E_INVALID_ARG, "allOf: only object schemas with properties and required can be "
                      "combined (this one has \"%.*s\")", (int)(d->v[k].klen > 64 ? 64 : d->v[k].klen), jkey(d, k));
                t = -1;
                break;
            }
        }
        ptr_pop(c, old);
        if (t < 0) return -1;
        parts[np++] = t;
    }
    return np;
}

/* An object's members: each property (via: the properties object it came
 * from, -1 for a required name without one), whether it is required and
 * its key-value rule. */
typedef struct { prop *ps; int32_t *via; int *req, *kv; int n, cap; } members;

static void members_free(members *ms)
{
    free(ms->ps);
    free(ms->via);
    free(ms->req);
    free(ms->kv);
}

static int members_find(const members *ms, const char *key, size_t len)
{
    for (int j = 0; j < ms->n; j++)
        if (ms->ps[j].klen == len && !memcmp(ms->ps[j].key, key, len)) return j;
    return -1;
}

static int members_push(conv *c, members *ms, prop p, int32_t via)
{
    if (ms->n == ms->cap) {
        int cap = ms->cap ? ms->cap * 2 : 16;
        prop *q = realloc(ms->ps, sizeof *q * (size_t)cap);
        if (q) ms->ps = q;
        int32_t *v2 = q ? realloc(ms->via, sizeof *v2 * (size_t)cap) : NULL;
        if (v2) ms->via = v2;
        if (!q || !v2) return nomem(c);
        ms->cap = cap;
    }
    ms->ps[ms->n] = p;
    ms->via[ms->n++] = via;
    return 0;
}

/* The properties of every part in order; a name defined twice is refused. */
static int members_properties(conv *c, const int32_t *parts, int np, members *ms)
{
    const jdoc *d = c->d;
    for (int i = 0; i < np; i++) {
        int32_t pr = jget(d, parts[i], "properties");
        if (pr < 0) continue;
        if (d->v[pr].type != J_OBJ) return cfail(c, MOR_E_INVALID_ARG, "properties must be an object"), -1;
        for (int32_t m = d->v[pr].first; m >= 0; m = d->v[m].next) {
            int j = members_find(ms, jkey(d, m), d->v[m].klen);
            if (j >= 0)
                return cfail(c, MOR_E_INVALID_ARG, "allOf: property \"%.*s\" is defined twice",
                             (int)(ms->ps[j].klen > 64 ? 64 : ms->ps[j].klen), ms->ps[j].key), -1;
            if (members_push(c, ms, (prop){ jkey(d, m), d->v[m].klen, m }, pr) < 0) return -1;
        }
    }
    return 0;
}

/* Required names: those not among the properties become members of any
 * value; then every member's required flag. */
static int members_required(conv *c, const int32_t *parts, int np, members *ms)
{
    const jdoc *d = c->d;
    for (int i = 0; i < np; i++) {
        int32_t rq = jget(d, parts[i], "required");
        if (rq < 0) continue;
        size_t old = ptr_push(c, "required", 8);
        int idx = 0, bad = d->v[rq].type != J_ARR;
        for (int32_t m = bad ? -1 : d->v[rq].first; m >= 0 && !bad; m = d->v[m].next, idx++) {
            if (d->v[m].type != J_STR) { ptr_pop(c, old); ptr_pushi(c, "required", idx); bad = 1; break; }
            if (members_find(ms, jstr(d, m), d->v[m].slen) < 0 &&
                members_push(c, ms, (prop){ jstr(d, m), d->v[m].slen, -1 }, -1) < 0) { ptr_pop(c, old); return -1; }
        }
        if (bad) cfail(c, MOR_E_INVALID_ARG, "required must be an array of strings");
        ptr_pop(c, old);
        if (bad) return -1;
    }
    ms->req = calloc((size_t)ms->n + 1, sizeof *ms->req);
    ms->kv = calloc((size_t)ms->n + 1, sizeof *ms->kv);
    if (!ms->req || !ms->kv) return nomem(c);
    for (int i = 0; i < np; i++) {
        int32_t rq = jget(d, parts[i], "required");
        for (int32_t m = rq >= 0 ? d->v[rq].first : -1; m >= 0; m = d->v[m].next) {
            int j = members_find(ms, jstr(d, m), d->v[m].slen);
            if (j >= 0) ms->req[j] = 1;
        }
    }
    return 0;
}

/* The rule of other members (additionalProperties not false): any key (the
 * listed ones included: a limitation) with a value of its schema. Sets
 * *addl_kv (-1 when there is none); returns -1 on error. */
static int additional_kv(conv *c, const char *name, int32_t ap, int *addl_kv)
{
    const jdoc *d = c->d;
    *addl_kv = -1;
    if (ap < 0 || d->v[ap].type == J_FALSE) return 0;
    sbuf nm = { 0 }, b = { 0 };
    jsb_add(&nm, name);
    jsb_add(&nm, "-additional");
    int vr = -2;
    if (d->v[ap].type != J_TRUE) {
        size_t old = ptr_push(c, "additionalProperties", 20);
        vr = nm.oom ? nomem(c) : visit(c, ap, nm.p);
        ptr_pop(c, old);
    }
    if (vr == -1) { free(nm.p); return -1; }
    jsb_add(&b, prim(c, P_STRING));
    jsb_add(&b, " \":\" ");
    jsb_add(&b, prim(c, P_SPACE));
    jsb_add(&b, " ");
    jsb_add(&b, vr == -2 ? prim(c, P_VALUE) : c->rules[vr].name);
    jsb_add(&nm, "-kv");
    *addl_kv = nm.oom || b.oom ? nomem(c) : rule_add(c, nm.p, b.p);
    if (nm.oom || b.oom) free(b.p);
    free(nm.p);
    return *addl_kv < 0 ? -1 : 0;
}

/* Every member's rule, and the object of them. The properties' schemas
 * are inside an object: a $ref cycle through them consumes. */
static int object_members(conv *c, const char *name, members *ms, int32_t ap, sbuf *o)
{
    int addl_kv = -1, bad = 0;
    c->consume++;
    for (int i = 0; i < ms->n && !bad; i++) {
        /* a property's pointer: .../properties/key (of the allOf member for merged ones) */
        ms->kv[i] = kv_rule(c, name, &ms->ps[i], ms->via[i] >= 0 ? ms->via[i] : -1);
        bad = ms->kv[i] < 0;
    }
    if (!bad) bad = additional_kv(c, name, ap, &addl_kv) < 0;
    c->consume--;
    return bad ? -1 : object_body(c, name, ms->kv, ms->req, ms->n, addl_kv, o);
}

static int object_typed(conv *c, int32_t sch, const char *name, sbuf *o)
{
    const jdoc *d = c->d;
    int32_t parts[65];
    int np = object_parts(c, sch, parts);
    if (np < 0) return -1;
    int32_t ap = jget(d, sch, "additionalProperties");
    int any_props = 0;
    for (int i = 0; i < np; i++) any_props |= jget(d, parts[i], "properties") >= 0 || jget(d, parts[i], "required") >= 0;
    if (!any_props) {
        /* no properties: any object, no member, or members of one schema */
        if (ap < 0 || d->v[ap].type == J_TRUE) { jsb_add(o, prim(c, P_OBJECT)); return 0; }
        if (d->v[ap].type == J_FALSE) { jsb_add(o, "\"{\" "); jsb_add(o, prim(c, P_SPACE)); jsb_add(o, " \"}\" "); jsb_add(o, prim(c, P_SPACE)); return 0; }
    }
    members ms = { 0 };
    int ret = -1;
    if (members_properties(c, parts, np, &ms) == 0 && members_required(c, parts, np, &ms) == 0)
        ret = object_members(c, name, &ms, ap, o);
    members_free(&ms);
    return ret;
}

/* A schema reached through $ref chains (for allOf members). */
static int32_t resolve_local(conv *c, int32_t sch)
{
    for (int hops = 0; hops < 32; hops++) {
        int32_t r = jget(c->d, sch, "$ref");
        if (r < 0) return sch;
        sch = ref_target(c, r);
        if (sch < 0) return -1;
    }
    return cfail(c, MOR_E_INVALID_ARG, "more than 32 $ref in a row");
}

/* A tuple: prefixItems p[0..k) (each element optional from minItems on,
 * as JSON Schema reads them: [] fits prefixItems [A, B]), then elements of
 * `items` (absent: any value; false: none) up to maxItems. */
static int tuple_typed(conv *c, int32_t sch, const char *name, int32_t pre, const char *pre_kw, int32_t it,
                       long lo, long hi, sbuf *o)
{
    const jdoc *d = c->d;
    long k = d->v[pre].type == J_ARR ? d->v[pre].n : -1;
    if (k < 1 || k > 64) {
        size_t old = ptr_push(c, pre_kw, strlen(pre_kw));
        cfail(c, MOR_E_INVALID_ARG, "%s must be an array of 1 to 64 schemas", pre_kw);
        ptr_pop(c, old);
        return -1;
    }
    if (it >= 0 && d->v[it].type == J_FALSE) {
        if (lo > k)
            return cfail(c, MOR_E_INVALID_ARG, "items is false after %ld prefixItems but minItems is %ld: "
                         "no array is valid", k, lo);
        if (hi < 0 || hi > k) hi = k;
    }
    const char *sp = prim(c, P_SPACE);
    jsb_add(o, "\"[\" ");
    jsb_add(o, sp);
    int open = 0;
    long j = 0;
    c->consume++;
    for (int32_t m = d->v[pre].first; m >= 0 && (hi < 0 || j < hi); m = d->v[m].next, j++) {
        char num[24];
        snprintf(num, sizeof num, "%ld", j);
        sbuf nm = { 0 };
        make_name(&nm, name, "item", 4);
        jsb_add(&nm, num);
        size_t old = ptr_pushi(c, pre_kw, (int)j);
        int r = nm.oom ? nomem(c) : visit(c, m, nm.p);
        ptr_pop(c, old);
        free(nm.p);
        if (r < 0) { c->consume--; return -1; }
        if (j >= lo) { jsb_add(o, " ("); open++; }
        if (j) { jsb_add(o, " \",\" "); jsb_add(o, sp); }
        jsb_add(o, " ");
        jsb_add(o, c->rules[r].name);
    }
    if (hi < 0 || hi > k) {
        /* the elements after the tuple */
        const char *item;
        if (it < 0 || d->v[it].type == J_TRUE) item = prim(c, P_VALUE);
        else {
            int r = visit_at(c, it, name, "item", 4, "items", 5, NULL, 0);
            if (r < 0) { c->consume--; return -1; }
            item = c->rules[r].name;
        }
        jsb_add(o, " ( \",\" ");
        jsb_add(o, sp);
        jsb_add(o, " ");
        jsb_add(o, item);
        jsb_add(o, " )");
        rep(o, lo > k ? lo - k : 0, hi < 0 ? -1 : hi - k);
    }
    c->consume--;
    while (open--) jsb_add(o, " )?");
    jsb_add(o, " \"]\" ");
    jsb_add(o, sp);
    return 0;
}

static int array_typed(conv *c, int32_t sch, const char *name, sbuf *o)
{
    const jdoc *d = c->d;
    long lo, hi;
    if (count_kw(c, sch, "minItems", 0, &lo) || count_kw(c, sch, "maxItems", -1, &hi)) return -1;
    if (hi >= 0 && lo > hi) return cfail(c, MOR_E_INVALID_ARG, "minItems %ld > maxItems %ld: no array is valid", lo, hi);
    int32_t it = jget(d, sch, "items"), pre = jget(d, sch, "prefixItems");
    const char *pre_kw = "prefixItems";
    if (it >= 0 && d->v[it].type == J_ARR) {
        /* draft 4-7 tuples: items as an array is prefixItems, other items any */
        if (pre >= 0) return cfail(c, MOR_E_INVALID_ARG, "items as an array beside prefixItems");
        pre = it;
        it = -1;
        pre_kw = "items";
    }
    if (pre >= 0) return tuple_typed(c, sch, name, pre, pre_kw, it, lo, hi, o);
    if (it >= 0 && d->v[it].type == J_FALSE) {
        if (lo > 0) return cfail(c, MOR_E_INVALID_ARG, "items is false but minItems is %ld: no array is valid", lo);
        hi = 0;
    }
    const char *sp = prim(c, P_SPACE);
    jsb_add(o, "\"[\" ");
    jsb_add(o, sp);
    if (hi != 0) {
        const char *item;
        if (it < 0 || d->v[it].type == J_TRUE) item = prim(c, P_VALUE);
        else {
            c->consume++;
            int r = visit_at(c, it, name, "item", 4, "items", 5, NULL, 0);
            c->consume--;
            if (r < 0) return -1;
            item = c->rules[r].name;
        }
        jsb_add(o, lo ? " " : " ( ");
        jsb_add(o, item);
        if (hi != 1) {
            jsb_add(o, " ( \",\" ");
            jsb_add(o, sp);
            jsb_add(o, " ");
            jsb_add(o, item);
            jsb_add(o, " )");
            rep(o, lo ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
        }
        if (!lo) jsb_add(o, " )?");
    }
    jsb_add(o, " \"]\" ");
    jsb_add(o, sp);
    return 0;
}

/* A string of a "pattern" or a "format": its inside as js_pattern or
 * js_format write it, between quotes. */
static int string_shaped(conv *c, int32_t sch, int32_t pat, int32_t fmt, sbuf *o)
{
    const jdoc *d = c->d;
    int32_t k = pat >= 0 ? pat : fmt;
    const char *kw = pat >= 0 ? "pattern" : "format";
    size_t old = ptr_push(c, kw, strlen(kw));
    int r = -1;
    if (pat >= 0 && fmt >= 0) cfail(c, MOR_E_INVALID_ARG, "pattern and format together are not supported");
    else if (jget(d, sch, "minLength") >= 0 || jget(d, sch, "maxLength") >= 0)
        cfail(c, MOR_E_INVALID_ARG, "%s with minLength or maxLength is not supported", kw);
    else if (d->v[k].type != J_STR) cfail(c, MOR_E_INVALID_ARG, "%s must be a string", kw);
    else {
        jsb_add(o, "\"\\\"\" ");
        char why[160];
        const char *f = pat < 0 ? js_format(jstr(d, k), d->v[k].slen) : NULL;
        int used_char = 0;
        if (pat >= 0 && js_pattern(o, jstr(d, k), d->v[k].slen, PRIMS[P_CHAR].name, &used_char, why, sizeof why))
            cfail(c, MOR_E_INVALID_ARG, "%s", why);
        else if (pat < 0 && !f)
            cfail(c, MOR_E_INVALID_ARG, "format \"%.64s\" is not supported (the converter enforces date, time, "
                  "date-time, uuid, email, hostname and ipv4)", jstr(d, k));
        else {
            if (f) jsb_add(o, f);
            if (used_char) prim(c, P_CHAR);
            jsb_add(o, " \"\\\"\" ");
            jsb_add(o, prim(c, P_SPACE));
            r = 0;
        }
    }
    ptr_pop(c, old);
    return r;
}

static int string_typed(conv *c, int32_t sch, sbuf *o)
{
    long lo, hi;
    int32_t pat = jget(c->d, sch, "pattern"), fmt = jget(c->d, sch, "format");
    if (pat >= 0 || fmt >= 0) return string_shaped(c, sch, pat, fmt, o);
    if (count_kw(c, sch, "minLength", 0, &lo) || count_kw(c, sch, "maxLength", -1, &hi)) return -1;
    if (hi >= 0 && lo > hi) return cfail(c, MOR_E_INVALID_ARG, "minLength %ld > maxLength %ld: no string is valid", lo, hi);
    if (!lo && hi < 0) { jsb_add(o, prim(c, P_STRING)); return 0; }
    jsb_add(o, "\"\\\"\" ");
    jsb_add(o, prim(c, P_CHAR));
    rep(o, lo, hi);
    jsb_add(o, " \"\\\"\" ");
    jsb_add(o, prim(c, P_SPACE));
    return 0;
}

/* One bound: 0 and *v (the integer bound it sets), 1 absent, -1 error.
 * exclusive: the 2020-12 number form; draft 4's boolean form modifies
 * minimum or maximum (excl_flag). */
static int int_bound(conv *c, int32_t sch, const char *kw, int upper, int exclusive, int64_t *v)
{
    const jdoc *d = c->d;
    int32_t x = jget(d, sch, kw);
    if (x < 0 || (exclusive && (d->v[x].type == J_TRUE || d->v[x].type == J_FALSE))) return 1;
    if (d->v[x].type != J_NUM) {
        size_t old = ptr_push(c, kw, strlen(kw));
        cfail(c, MOR_E_INVALID_ARG, "%s must be a number", kw);
        ptr_pop(c, old);
        return -1;
    }
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.*s", (int)(d->v[x].slen < 63 ? d->v[x].slen : 63), jstr(d, x));
    double b = strtod(tmp, NULL), lim = 1e17;
    int32_t flag = exclusive ? -1 : jget(d, sch, upper ? "exclusiveMaximum" : "exclusiveMinimum");
    int excl = exclusive || (flag >= 0 && d->v[flag].type == J_TRUE);
    b = b > lim ? lim : b < -lim ? -lim : b;   /* beyond what the grammar writes anyway */
    double f = upper ? floor(b) : ceil(b);
    if (excl && f == b) f += upper ? -1 : 1;
    *v = (int64_t)f;
    return 0;
}

static int integer_typed(conv *c, int32_t sch, sbuf *o)
{
    int64_t lo = 0, hi = 0, v;
    int has_lo = 0, has_hi = 0;
    for (int k = 0; k < 4; k++) {
        int upper = k & 1, r = int_bound(c, sch, BOUNDS[k], upper, k >= 2, &v);
        if (r < 0) return -1;
        if (r) continue;
        if (upper) { hi = has_hi && hi < v ? hi : v; has_hi = 1; }
        else { lo = has_lo && lo > v ? lo : v; has_lo = 1; }
    }
    if (!has_lo && !has_hi) { jsb_add(o, prim(c, P_INTEGER)); return 0; }
    if (has_lo && has_hi && lo > hi) return cfail(c, MOR_E_INVALID_ARG, "no integer is within the bounds");
    jsb_add(o, "( ");
    js_int_range(o, lo, has_lo, hi, has_hi);
    jsb_add(o, " ) ");
    jsb_add(o, prim(c, P_SPACE));
    return 0;
}

static int typed_body(conv *c, int32_t sch, int t, const char *name, sbuf *o)
{
    switch (t) {
    case T_OBJECT: return object_typed(c, sch, name, o);
    case T_ARRAY: return array_typed(c, sch, name, o);
    case T_STRING: return string_typed(c, sch, o);
    case T_NUMBER: jsb_add(o, prim(c, P_NUMBER)); return 0;
    case T_INTEGER: return integer_typed(c, sch, o);
    case T_BOOLEAN: jsb_add(o, prim(c, P_BOOLEAN)); return 0;
    default: jsb_add(o, prim(c, P_NULL)); return 0;
    }
}

/* The keywords of a schema body_of dispatches on (-1: absent). */
typedef struct { int32_t ref, any, all, en, cn, other; } schema_kw;

/* Finds them, refusing unsupported keywords and $ref, anyOf or oneOf
 * beside other assertions. */
static int scan_keywords(conv *c, int32_t sch, schema_kw *k)
{
    const jdoc *d = c->d;
    *k = (schema_kw){ -1, -1, -1, -1, -1, -1 };
    for (int32_t m = d->v[sch].first; m >= 0; m = d->v[m].next) {
        if (KW_IN(d, m, UNSUPPORTED) || (jkey_is(d, m, "uniqueItems") && d->v[m].type == J_TRUE)) {
            size_t old = ptr_push(c, jkey(d, m), d->v[m].klen);
            cfail(c, MOR_E_INVALID_ARG, "keyword \"%s\" is not supported (ignoring it would accept values the "
                  "schema rejects)", jkey(d, m));
            ptr_pop(c, old);
            return -1;
        }
        if (jkey_is(d, m, "$ref")) k->ref = m;
        else if (jkey_is(d, m, "anyOf") || jkey_is(d, m, "oneOf")) {
            if (k->any >= 0) return cfail(c, MOR_E_INVALID_ARG, "anyOf and oneOf together are not supported");
            k->any = m;
        } else if (jkey_is(d, m, "allOf")) k->all = m;
        else if (jkey_is(d, m, "enum")) k->en = m;
        else if (jkey_is(d, m, "const")) k->cn = m;
        else if (KW_IN(d, m, ASSERTIONS) && k->other < 0) k->other = m;
    }
    int32_t first = k->ref >= 0 ? k->ref : k->any;
    if (first < 0) return 0;
    /* $ref, anyOf, oneOf: alone, beside annotations only */
    for (int32_t m = d->v[sch].first; m >= 0; m = d->v[m].next)
        if (m != first && KW_IN(d, m, ASSERTIONS))
            return cfail(c, MOR_E_INVALID_ARG, "\"%s\" beside \"%.*s\" is not supported", jkey(d, first),
                         (int)(d->v[m].klen > 64 ? 64 : d->v[m].klen), jkey(d, m));
    return 0;
}

/* anyOf / oneOf: alternatives (oneOf's "exactly one" is not enforced: the
 * grammar takes any). */
static int alternatives_body(conv *c, int32_t any, const char *name, sbuf *o)
{
    const jdoc *d = c->d;
    if (d->v[any].type != J_ARR || !d->v[any].n) {
        size_t old = ptr_push(c, jkey(d, any), d->v[any].klen);
        cfail(c, MOR_E_INVALID_ARG, "%s must be a non-empty array of schemas", jkey(d, any));
        ptr_pop(c, old);
        return -1;
    }
    int i = 0;
    for (int32_t m = d->v[any].first; m >= 0; m = d->v[m].next, i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", i);
        size_t old = ptr_pushi(c, jkey(d, any), i);
        sbuf nm = { 0 };
        make_name(&nm, name, num, strlen(num));
        int r = nm.oom ? nomem(c) : visit(c, m, nm.p);
        free(nm.p);
        ptr_pop(c, old);
        if (r < 0) return -1;
        if (i) jsb_add(o, " | ");
        jsb_add(o, c->rules[r].name);
    }
    return 0;
}

/* Several types: a rule each, and their alternatives. */
static int multi_typed_body(conv *c, int32_t sch, const int *order, int n_order, const char *name, sbuf *o)
{
    for (int i = 0; i < n_order; i++) {
        sbuf b = { 0 }, nm = { 0 };
        if (typed_body(c, sch, order[i], name, &b) < 0) { free(b.p); return -1; }
        make_name(&nm, name, TYPE_NAMES[order[i]], strlen(TYPE_NAMES[order[i]]));
        int r = b.oom || nm.oom ? nomem(c) : rule_add(c, nm.p, b.p);
        if (b.oom || nm.oom) free(b.p);
        free(nm.p);
        if (r < 0) return -1;
        if (i) jsb_add(o, " | ");
        jsb_add(o, c->rules[r].name);
    }
    return 0;
}

/* A schema without $ref, anyOf or oneOf: allOf, enum / const, its types. */
static int assertions_body(conv *c, int32_t sch, const schema_kw *k, const char *name, sbuf *o)
{
    const jdoc *d = c->d;
    if (k->all >= 0 && (d->v[k->all].type != J_ARR || !d->v[k->all].n)) {
        size_t old = ptr_push(c, "allOf", 5);
        cfail(c, MOR_E_INVALID_ARG, "allOf must be a non-empty array of schemas");
        ptr_pop(c, old);
        return -1;
    }
    if (k->all >= 0 && d->v[k->all].n == 1 && k->other < 0 && k->en < 0 && k->cn < 0) {
        /* allOf of one schema, alone: that schema */
        size_t old = ptr_pushi(c, "allOf", 0);
        int ret = body_of(c, d->v[k->all].first, name, o);
        ptr_pop(c, old);
        return ret;
    }
    int order[N_TYPES], n_order;
    int mask = type_mask(c, sch, order, &n_order);
    if (mask < 0 || kw_types(c, sch, mask, k->en >= 0 || k->cn >= 0)) return -1;
    if (k->all >= 0) {
        /* allOf merges object parts: the schema is then an object */
        if (mask && mask != 1 << T_OBJECT) return cfail(c, MOR_E_INVALID_ARG, "allOf is supported for objects only");
        mask = 1 << T_OBJECT;
        order[0] = T_OBJECT;
        n_order = 1;
    }
    if (k->en >= 0 || k->cn >= 0) return enum_body(c, sch, k->en, k->cn, mask, o);
    if (!mask) { jsb_add(o, prim(c, P_VALUE)); return 0; }
    if (n_order == 1) return typed_body(c, sch, order[0], name, o);
    return multi_typed_body(c, sch, order, n_order, name, o);
}

/* The body of the rule for schema sch, whose nested rules are named name-... */
static int body_of(conv *c, int32_t sch, const char *name, sbuf *o)
{
    const jdoc *d = c->d;
    if (d->v[sch].type == J_TRUE) { jsb_add(o, prim(c, P_VALUE)); return 0; }
    if (d->v[sch].type == J_FALSE) return cfail(c, MOR_E_INVALID_ARG, "the schema false: no value is valid");
    if (d->v[sch].type != J_OBJ) return cfail(c, MOR_E_INVALID_ARG, "a schema must be an object or a boolean");
    if (c->depth >= JS_MAX_SCHEMA_DEPTH)
        return cfail(c, MOR_E_INVALID_ARG, "schemas nested deeper than %d", JS_MAX_SCHEMA_DEPTH);
    c->depth++;
    schema_kw k;
    int ret = scan_keywords(c, sch, &k);
    if (ret == 0 && k.ref >= 0) {
        size_t old = ptr_push(c, "$ref", 4);
        int r = ref_rule(c, k.ref);
        ptr_pop(c, old);
        if (r >= 0) jsb_add(o, c->rules[r].name);
        ret = r < 0 ? -1 : 0;
    } else if (ret == 0 && k.any >= 0) {
        ret = alternatives_body(c, k.any, name, o);
    } else if (ret == 0) {
        ret = assertions_body(c, sch, &k, name, o);
    }
    c->depth--;
    if (ret == 0 && o->oom) ret = nomem(c);
    return ret;
}

/* A rule for schema sch named name (or name-1, ... if taken): its index. */
static int visit(conv *c, int32_t sch, const char *name)
{
    sbuf b = { 0 };
    if (body_of(c, sch, name, &b) < 0) { free(b.p); return -1; }
    /* a body that is one rule's name: that rule, not a copy */
    int r = !b.p || strchr(b.p, ' ') ? -1 : rule_find(c, b.p);
    if (r >= 0) { free(b.p); return r; }
    return rule_add(c, name, b.p);
}

/* ---- rules that match some finite string ------------------------------
 * A recursive schema whose recursion is required (a required property or
 * minItems >= 1 of its own type) has no finite instance: its grammar would
 * match nothing. Found here, on the rules written, by the least fixpoint of
 * "matches some string" over the grammar subset this file writes. */
typedef struct { const char *p, *e; const conv *c; const uint8_t *prod; } pscan;

static int p_alts(pscan *s, int depth);

static int p_seq(pscan *s, int depth)
{
    int ok = 1;
    for (;;) {
        while (s->p < s->e && *s->p == ' ') s->p++;
        if (s->p >= s->e || *s->p == '|' || *s->p == ')') return ok;
        int item = 1;
        char ch = *s->p;
        if (ch == '"' || ch == '[') {
            char end = ch == '"' ? '"' : ']';
            for (s->p++; s->p < s->e && *s->p != end; s->p++) if (*s->p == '\\') s->p++;
            s->p++;
        } else if (ch == '(') {
            s->p++;
            item = depth < 64 ? p_alts(s, depth + 1) : 0;
            while (s->p < s->e && *s->p != ')') s->p++;   /* only when depth ran out */
            s->p++;
        } else {
            const char *n0 = s->p;
            while (s->p < s->e && (is_digit(*s->p) || *s->p == '-' || (*s->p >= 'a' && *s->p <= 'z') ||
                                   (*s->p >= 'A' && *s->p <= 'Z'))) s->p++;
            if (s->p == n0) { s->p++; continue; }
            int r = rule_findn(s->c, n0, (size_t)(s->p - n0));
            item = r >= 0 && s->prod[r];
        }
        if (s->p < s->e && (*s->p == '?' || *s->p == '*')) { item = 1; s->p++; }
        else if (s->p < s->e && *s->p == '+') s->p++;
        else if (s->p < s->e && *s->p == '{') {
            if (s->p + 1 < s->e && s->p[1] == '0' && (s->p[2] == ',' || s->p[2] == '}')) item = 1;
            while (s->p < s->e && *s->p != '}') s->p++;
            s->p++;
        }
        ok &= item;
    }
}

static int p_alts(pscan *s, int depth)
{
    int any = p_seq(s, depth);
    while (s->p < s->e && *s->p == '|') { s->p++; any |= p_seq(s, depth); }
    return any;
}

/* -1 (error set) when root matches no finite string. */
static int check_productive(conv *c)
{
    uint8_t *prod = calloc((size_t)c->nr, 1);
    if (!prod) return nomem(c);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < c->nr; i++) {
            if (prod[i] || !c->rules[i].body) continue;
            pscan s = { c->rules[i].body, c->rules[i].body + strlen(c->rules[i].body), c, prod };
            if (p_alts(&s, 0)) { prod[i] = 1; changed = 1; }
        }
    }
    int bad = -1;
    for (int i = 1; i < c->nr && bad < 0; i++) if (!prod[i]) bad = i;   /* root last: the cause is deeper */
    int ok = prod[0];
    free(prod);
    if (ok) return 0;
    return cfail(c, MOR_E_INVALID_ARG, "no finite value satisfies the schema: rule %s requires itself (a $ref "
                 "cycle through required properties or minItems)", bad >= 0 ? c->rules[bad].name : "root");
}

MOR_API mor_status mor_json_schema_to_grammar(const char *schema, size_t len, char *buf, size_t cap,
                                              size_t *len_out)
{
    err_clear();
    if (!schema) return err_set(MOR_E_INVALID_ARG, FN ": schema is NULL");
    if (!len_out) return err_set(MOR_E_INVALID_ARG, FN ": len_out is NULL");
    if (!buf && cap) return err_set(MOR_E_INVALID_ARG, FN ": buf is NULL but cap is %zu", cap);
    if (len > ((size_t)1 << 30)) return err_set(MOR_E_INVALID_ARG, FN ": a schema of more than 1 GiB");
    jdoc d;
    conv c;
    memset(&c, 0, sizeof c);
    sbuf out = { 0 };
    mor_status st = jparse(&d, schema, len);
    if (st != MOR_OK) goto done;
    c.d = &d;
    /* the root is the rule "root", and the target of "$ref": "#" */
    char *rn = strdup("root");
    c.refs = malloc(sizeof *c.refs);
    if (!rn || !c.refs) { free(rn); st = err_set(MOR_E_NOMEM, FN ": out of memory"); goto done; }
    c.capref = c.nref = 1;
    c.refs[0] = (refent){ 0, 0, 1, 0 };
    jsb_add(&c.ptr, "");
    if (rule_append(&c, rn, NULL) < 0) { st = c.st; goto done; }
    sbuf body = { 0 };
    if (c.ptr.oom || body_of(&c, 0, "root", &body) < 0) {
        free(body.p);
        st = c.st != MOR_OK ? c.st : err_set(MOR_E_NOMEM, FN ": out of memory");
        goto done;
    }
    c.rules[0].body = body.p;
    c.refs[0].pending = 0;
    if (check_productive(&c) < 0) { st = c.st; goto done; }
    for (int i = 0; i < c.nr; i++) {
        jsb_add(&out, c.rules[i].name);
        jsb_add(&out, " ::= ");
        jsb_add(&out, c.rules[i].body ? c.rules[i].body : "");
        jsb_add(&out, "\n");
    }
    if (out.oom) { st = err_set(MOR_E_NOMEM, FN ": out of memory"); goto done; }
    *len_out = out.n;
    if (cap < out.n) {
        st = err_set(MOR_E_BUFFER_TOO_SMALL, FN ": the grammar needs %zu bytes, the buffer has %zu", out.n, cap);
        goto done;
    }
    memcpy(buf, out.p, out.n);
    st = MOR_OK;
done:
    for (int i = 0; i < c.nr; i++) { free(c.rules[i].name); free(c.rules[i].body); }
    free(c.rules);
    free(c.ht);
    free(c.refs);
    free(c.ptr.p);
    free(out.p);
    free(d.v);
    free(d.pool.p);
    return st;
}
