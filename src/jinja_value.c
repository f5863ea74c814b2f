/* jinja_value.c - the values of a render (Python's types as jinja2 sees
 * them), the arena they live in, and their texts: str() as jinja2 renders,
 * repr() as Python prints a list or dict, JSON as json.dumps writes it
 * (transformers' tojson), and JSON read back (the caller's messages). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "unicode.h"

/* ------------------------------------------------------------------------ */
/* Arena */
struct jblock { jblock *next; size_t used, cap; max_align_t data[]; };
enum { JA_BLOCK = 64 * 1024 };

void *ja_alloc(jarena *a, size_t n)
{
    if (a->over) return NULL;
    n = (n + 7) & ~(size_t)7;
    if (n > a->cap - a->used || n > a->cap) { a->over = 1; return NULL; }
    jblock *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > JA_BLOCK ? n : JA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b) { a->over = a->nomem = 1; return NULL; }
        b->used = 0;
        b->cap = cap;
        /* a big block goes behind the head, so the head's room stays usable */
        if (a->head && n > JA_BLOCK) { b->next = a->head->next; a->head->next = b; }
        else { b->next = a->head; a->head = b; }
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *ja_strdup(jarena *a, const char *s, size_t n)
{
    char *p = ja_alloc(a, n + 1);
    if (p && n) memcpy(p, s, n);
    return p;
}

void ja_free(jarena *a)
{
    jblock *b = a->head;
    while (b) { jblock *nx = b->next; free(b); b = nx; }
    a->head = NULL;
    a->used = 0;
}

/* ------------------------------------------------------------------------ */
/* Constructors and containers */
jval jv_undef(const char *name) { jval v = { 0 }; v.t = JV_UNDEF; v.u.s.p = name; return v; }
jval jv_none(void) { jval v = { 0 }; v.t = JV_NONE; return v; }
jval jv_bool(int b) { jval v = { 0 }; v.t = JV_BOOL; v.u.i = !!b; return v; }
jval jv_int(int64_t i) { jval v = { 0 }; v.t = JV_INT; v.u.i = i; return v; }
jval jv_float(double f) { jval v = { 0 }; v.t = JV_FLOAT; v.u.f = f; return v; }
jval jv_str(const char *p, size_t n) { jval v = { 0 }; v.t = JV_STR; v.u.s.p = p ? p : ""; v.u.s.n = n; return v; }
jval jv_cstr(const char *p) { return jv_str(p, strlen(p)); }

jval jv_list(jarena *a, size_t cap)
{
    jval v = { 0 };
    jlist *l = ja_alloc(a, sizeof *l);
    if (!l) return v;
    if (cap && !(l->v = ja_alloc(a, cap * sizeof *l->v))) return v;
    l->cap = cap;
    v.t = JV_LIST;
    v.u.l = l;
    return v;
}

jval jv_dict(jarena *a, size_t cap)
{
    jval v = { 0 };
    jdict *d = ja_alloc(a, sizeof *d);
    if (!d) return v;
    if (cap && (!(d->k = ja_alloc(a, cap * sizeof *d->k)) || !(d->v = ja_alloc(a, cap * sizeof *d->v)))) return v;
    d->cap = cap;
    v.t = JV_DICT;
    v.u.d = d;
    return v;
}

int jl_push(jarena *a, jlist *l, jval v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jval *nv = ja_alloc(a, cap * sizeof *nv);
        if (!nv) return -1;
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

/* a hash that agrees with jv_eq: 1, 1.0 and True hash alike */
static uint64_t key_hash(jval k)
{
    uint64_t h = 1469598103934665603ull;
    switch (k.t) {
    case JV_STR:
        for (size_t i = 0; i < k.u.s.n; i++) h = (h ^ (unsigned char)k.u.s.p[i]) * 1099511628211ull;
        return h;
    case JV_FLOAT:
        if (!(k.u.f == floor(k.u.f) && fabs(k.u.f) < 9.2e18)) {
            uint64_t bits;
            memcpy(&bits, &k.u.f, sizeof bits);
            return bits * 0x9E3779B97F4A7C15ull;
        }
        return (uint64_t)(int64_t)k.u.f * 0x9E3779B97F4A7C15ull;
    case JV_INT: case JV_BOOL: return (uint64_t)k.u.i * 0x9E3779B97F4A7C15ull;
    case JV_NONE: return 1;
    default: return 0;   /* containers as keys: all alike, jv_eq decides */
    }
}

static void idx_put(jdict *d, size_t e)
{
    size_t mask = 2 * d->cap - 1, h = (size_t)(key_hash(d->k[e]) >> 7) & mask;
    while (d->idx[h]) h = (h + 1) & mask;
    d->idx[h] = (uint32_t)(e + 1);
}

jval *jd_get(const jdict *d, jval k)
{
    if (!d->idx) {   /* small dicts (a message, a tool): a scan, newest first */
        for (size_t i = d->n; i-- > 0;)
            if (jv_eq(d->k[i], k)) return &d->v[i];
        return NULL;
    }
    size_t mask = 2 * d->cap - 1, h = (size_t)(key_hash(k) >> 7) & mask;
    for (; d->idx[h]; h = (h + 1) & mask) {
        size_t e = d->idx[h] - 1;
        if (e < d->n && jv_eq(d->k[e], k)) return &d->v[e];
    }
    return NULL;
}

jval *jd_gets(const jdict *d, const char *k) { return jd_get(d, jv_str(k, strlen(k))); }

void jd_clear(jdict *d)
{
    d->n = 0;
    if (d->idx) memset(d->idx, 0, 2 * d->cap * sizeof *d->idx);
}

int jd_set(jarena *a, jdict *d, jval k, jval v)
{
    jval *old = jd_get(d, k);
    if (old) { *old = v; return 0; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        if (cap > UINT32_MAX / 2) return -1;
        jval *nk = ja_alloc(a, cap * sizeof *nk), *nv = ja_alloc(a, cap * sizeof *nv);
        uint32_t *ni = cap >= 16 ? ja_alloc(a, 2 * cap * sizeof *ni) : NULL;
        if (!nk || !nv || (cap >= 16 && !ni)) return -1;
        if (d->n) { memcpy(nk, d->k, d->n * sizeof *nk); memcpy(nv, d->v, d->n * sizeof *nv); }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
        d->idx = ni;
        for (size_t i = 0; ni && i < d->n; i++) idx_put(d, i);
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    if (d->idx) idx_put(d, d->n - 1);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Truth, equality, order */
int jv_is_num(jval v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
double jv_num(jval v) { return v.t == JV_FLOAT ? v.u.f : (double)v.u.i; }

int jv_truthy(jval v)
{
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n > 0;
    case JV_LIST: return v.gen == JG_GEN || v.gen == JG_REVERSED || v.u.l->n > 0;
    case JV_DICT: return v.u.d->n > 0;
    default: return 1;
    }
}

static int eq_at(jval a, jval b, int depth);

int jv_eq(jval a, jval b) { return eq_at(a, b, 0); }

/* Values nested deeper than JINJA_MAX_DEPTH (a loop can make them:
 * ns.x = [ns.x]) compare unequal and unordered there, and print as [...],
 * rather than recurse without bound. */
static int eq_at(jval a, jval b, int depth)
{
    if (depth > JINJA_MAX_DEPTH) return 0;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.u.i == b.u.i;
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case JV_LIST:
        if (a.tuple != b.tuple || a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!eq_at(a.u.l->v[i], b.u.l->v[i], depth + 1)) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jval *o = jd_get(b.u.d, a.u.d->k[i]);
            if (!o || !eq_at(a.u.d->v[i], *o, depth + 1)) return 0;
        }
        return 1;
    default: return a.u.d == b.u.d;
    }
}

static int cmp_at(jval a, jval b, int depth);

int jv_cmp(jval a, jval b) { return cmp_at(a, b, 0); }

static int cmp_at(jval a, jval b, int depth)
{
    if (depth > JINJA_MAX_DEPTH) return -2;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = jv_num(a), y = jv_num(b);
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        /* UTF-8 byte order is code point order, as Python compares */
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = memcmp(a.u.s.p, b.u.s.p, n);
        if (r) return r < 0 ? -1 : 1;
        return (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    }
    if (a.t == JV_LIST && b.t == JV_LIST && a.tuple == b.tuple) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (eq_at(a.u.l->v[i], b.u.l->v[i], depth + 1)) continue;
            return cmp_at(a.u.l->v[i], b.u.l->v[i], depth + 1);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    return -2;
}

const char *jv_type_name(jval v)
{
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: {
        static const char *const g[] = { "list", "generator", "dict_items", "dict_keys", "dict_values",
                                         "list_reverseiterator" };
        return v.tuple ? "tuple" : g[v.gen];
    }
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_LOOP: return "LoopContext";
    default: return "function";
    }
}

/* ------------------------------------------------------------------------ */
/* Buffers */
void jb_init(jbuf *b, jarena *a) { memset(b, 0, sizeof *b); b->a = a; }

void jb_add(jbuf *b, const char *s, size_t n)
{
    if (b->over || !n) return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) { b->over = 1; return; }  /* doubling would wrap */
            cap *= 2;
        }
        /* the old block stays in the arena: doubling wastes at most half */
        char *p = ja_alloc(b->a, cap);
        if (!p) { b->over = 1; return; }
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
void jb_adds(jbuf *b, const char *s) { jb_add(b, s, strlen(s)); }
void jb_addc(jbuf *b, char c) { jb_add(b, &c, 1); }

/* ------------------------------------------------------------------------ */
/* UTF-8 */
static size_t u8_step(const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    size_t k = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (i + k > n) k = n - i;
    for (size_t j = 1; j < k; j++)   /* a broken sequence counts byte by byte */
        if (((unsigned char)s[i + j] & 0xc0) != 0x80) return 1;
    return k;
}

size_t ju_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i += u8_step(s, n, i)) k++;
    return k;
}

size_t ju_off(const char *s, size_t n, size_t idx)
{
    size_t i = 0;
    for (; i < n && idx > 0; idx--) i += u8_step(s, n, i);
    return i;
}

static uint32_t u8_decode(const char *s, size_t k)
{
    const unsigned char *p = (const unsigned char *)s;
    if (k == 1) return p[0];
    if (k == 2) return (uint32_t)(p[0] & 0x1f) << 6 | (p[1] & 0x3f);
    if (k == 3) return (uint32_t)(p[0] & 0x0f) << 12 | (uint32_t)(p[1] & 0x3f) << 6 | (p[2] & 0x3f);
    return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3f) << 12 | (uint32_t)(p[2] & 0x3f) << 6 | (p[3] & 0x3f);
}

/* ------------------------------------------------------------------------ */
/* Text of values */
void jv_float_repr(jbuf *b, double f)
{
    char t[40];
    if (f != f) { jb_adds(b, "nan"); return; }
    if (isinf(f)) { jb_adds(b, f < 0 ? "-inf" : "inf"); return; }
    /* Python's repr: the fewest digits that read back as f */
    int p = 1;
    for (; p < 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, f);
        if (strtod(t, NULL) == f) break;
    }
    snprintf(t, sizeof t, "%.*e", p - 1, f);
    char digits[24];
    int nd = 0, neg = t[0] == '-';
    const char *q = t + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) jb_addc(b, '-');
    if (exp < -4 || exp >= 16) {
        jb_addc(b, digits[0]);
        if (nd > 1) { jb_addc(b, '.'); jb_add(b, digits + 1, (size_t)nd - 1); }
        snprintf(t, sizeof t, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        jb_adds(b, t);
    } else if (exp < 0) {
        jb_adds(b, "0.");
        for (int i = 0; i < -exp - 1; i++) jb_addc(b, '0');
        jb_add(b, digits, (size_t)nd);
    } else {
        for (int i = 0; i <= exp; i++) jb_addc(b, i < nd ? digits[i] : '0');
        jb_addc(b, '.');
        if (nd > exp + 1) jb_add(b, digits + exp + 1, (size_t)(nd - exp - 1));
        else jb_addc(b, '0');
    }
}

static void str_repr(jbuf *b, const char *s, size_t n)
{
    /* Python picks double quotes only when the text has ' and no " */
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    char t[8];
    jb_addc(b, q);
    for (size_t i = 0; i < n;) {
        size_t k = u8_step(s, n, i);
        unsigned char c = (unsigned char)s[i];
        uint32_t cp = k > 1 ? u8_decode(s + i, k) : c;
        if (c == '\\' || c == (unsigned char)q) { jb_addc(b, '\\'); jb_addc(b, (char)c); }
        else if (c == '\n') jb_adds(b, "\\n");
        else if (c == '\r') jb_adds(b, "\\r");
        else if (c == '\t') jb_adds(b, "\\t");
        else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) || (k == 1 && c >= 0x80)) {
            snprintf(t, sizeof t, "\\x%02x", (unsigned)cp & 0xff);
            jb_adds(b, t);
        } else jb_add(b, s + i, k);
        i += k;
    }
    jb_addc(b, q);
}

static void repr_at(jbuf *b, jval v, int depth);

void jv_repr(jbuf *b, jval v) { repr_at(b, v, 0); }

static void repr_at(jbuf *b, jval v, int depth)
{
    char t[32];
    if (depth > JINJA_MAX_DEPTH && (v.t == JV_LIST || v.t == JV_DICT || v.t == JV_NS)) {
        jb_adds(b, v.t == JV_LIST ? "[...]" : "{...}");
        return;
    }
    switch (v.t) {
    case JV_STR: str_repr(b, v.u.s.p, v.u.s.n); return;
    case JV_LIST:
        if (v.gen == JG_GEN || v.gen == JG_REVERSED) {
            jb_adds(b, v.gen == JG_GEN ? "<generator object>" : "<list_reverseiterator object>");
            return;
        }
        if (v.gen) { jb_adds(b, jv_type_name(v)); jb_addc(b, '('); v.gen = 0; repr_at(b, v, depth); jb_addc(b, ')'); return; }
        jb_addc(b, v.tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_adds(b, ", ");
            repr_at(b, v.u.l->v[i], depth + 1);
        }
        if (v.tuple && v.u.l->n == 1) jb_addc(b, ',');
        jb_addc(b, v.tuple ? ')' : ']');
        return;
    case JV_DICT: case JV_NS:
        jb_adds(b, v.t == JV_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jb_adds(b, ", ");
            repr_at(b, v.u.d->k[i], depth + 1);
            jb_adds(b, ": ");
            repr_at(b, v.u.d->v[i], depth + 1);
        }
        jb_adds(b, v.t == JV_NS ? "}>" : "}");
        return;
    case JV_UNDEF: return;
    case JV_NONE: jb_adds(b, "None"); return;
    case JV_BOOL: jb_adds(b, v.u.i ? "True" : "False"); return;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)v.u.i); jb_adds(b, t); return;
    case JV_FLOAT: jv_float_repr(b, v.u.f); return;
    case JV_LOOP:
        snprintf(t, sizeof t, "<LoopContext %zu/%zu>", v.u.loop->i + 1, v.u.loop->items->n);
        jb_adds(b, t);
        return;
    default: jb_adds(b, "<function>"); return;
    }
}

void jv_html_escape(jbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;"
                      : ch == '\'' ? "&#39;" : NULL;
        if (e) jb_adds(b, e); else jb_addc(b, ch);
    }
}

void jv_to_str(jbuf *b, jval v)
{
    if (v.t == JV_STR) jb_add(b, v.u.s.p, v.u.s.n);
    else jv_repr(b, v);
}

/* ------------------------------------------------------------------------ */
/* JSON out */
static void json_str(jbuf *b, const char *s, size_t n, int ascii)
{
    char t[16];
    jb_addc(b, '"');
    for (size_t i = 0; i < n;) {
        size_t k = u8_step(s, n, i);
        unsigned char c = (unsigned char)s[i];
        const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                      : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (e) jb_adds(b, e);
        else if (c < 0x20) { snprintf(t, sizeof t, "\\u%04x", c); jb_adds(b, t); }
        else if (ascii && c >= 0x80) {
            uint32_t cp = k > 1 ? u8_decode(s + i, k) : 0xfffd;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(t, sizeof t, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else snprintf(t, sizeof t, "\\u%04x", cp);
            jb_adds(b, t);
        } else jb_add(b, s + i, k);
        i += k;
    }
    jb_addc(b, '"');
}

static void json_nl(jbuf *b, const jjson_opts *o, int level)
{
    jb_addc(b, '\n');
    for (int i = 0; i < level; i++) jb_add(b, o->indent, o->indent_n);
}

static int json_key(jbuf *b, jval k, const jjson_opts *o, const char **bad)
{
    /* json.dumps turns keys of other scalar types into strings */
    if (k.t == JV_STR) { json_str(b, k.u.s.p, k.u.s.n, o->ensure_ascii); return 0; }
    jbuf t;
    jb_init(&t, b->a);
    if (k.t == JV_NONE) jb_adds(&t, "null");
    else if (k.t == JV_BOOL) jb_adds(&t, k.u.i ? "true" : "false");
    else if (k.t == JV_INT || k.t == JV_FLOAT) jv_repr(&t, k);
    else { *bad = "keys must be str, int, float, bool or None"; return -1; }
    json_str(b, t.p, t.n, 0);
    return 0;
}

static int json_container(jbuf *b, jval v, const jjson_opts *o, int level, const char **bad)
{
    int obj = v.t == JV_DICT;
    size_t n = obj ? v.u.d->n : v.u.l->n;
    if (!n) { jb_adds(b, obj ? "{}" : "[]"); return 0; }
    size_t *ord = NULL;
    if (obj && o->sort_keys) {
        ord = ja_alloc(b->a, n * sizeof *ord);
        if (!ord) { b->over = 1; return 0; }
        for (size_t i = 0; i < n; i++) ord[i] = i;
        for (size_t i = 1; i < n; i++)   /* insertion sort: stable, small dicts */
            for (size_t j = i; j > 0 && jv_cmp(v.u.d->k[ord[j - 1]], v.u.d->k[ord[j]]) > 0; j--) {
                size_t x = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = x;
            }
    }
    jb_addc(b, obj ? '{' : '[');
    for (size_t i = 0; i < n; i++) {
        size_t k = ord ? ord[i] : i;
        if (i) jb_adds(b, o->item_sep);
        if (o->has_indent) json_nl(b, o, level + 1);
        if (obj) {
            if (json_key(b, v.u.d->k[k], o, bad) < 0) return -1;
            jb_adds(b, o->key_sep);
        }
        if (jv_to_json(b, obj ? v.u.d->v[k] : v.u.l->v[k], o, level + 1, bad) < 0) return -1;
    }
    if (o->has_indent) json_nl(b, o, level);
    jb_addc(b, obj ? '}' : ']');
    return 0;
}

int jv_to_json(jbuf *b, jval v, const jjson_opts *o, int level, const char **bad)
{
    if (level > JINJA_MAX_DEPTH) { *bad = "a value nested too deep"; return -1; }
    switch (v.t) {
    case JV_NONE: jb_adds(b, "null"); return 0;
    case JV_BOOL: jb_adds(b, v.u.i ? "true" : "false"); return 0;
    case JV_INT: jv_repr(b, v); return 0;
    case JV_FLOAT:
        if (v.u.f != v.u.f) jb_adds(b, "NaN");
        else if (isinf(v.u.f)) jb_adds(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else jv_float_repr(b, v.u.f);
        return 0;
    case JV_STR: json_str(b, v.u.s.p, v.u.s.n, o->ensure_ascii); return 0;
    case JV_LIST:
        if (v.gen) { *bad = jv_type_name(v); return -1; }
        return json_container(b, v, o, level, bad);
    case JV_DICT: return json_container(b, v, o, level, bad);
    default: *bad = jv_type_name(v); return -1;
    }
}

/* ------------------------------------------------------------------------ */
/* JSON in */
typedef struct { jarena *a; const char *s; size_t n, pos; char *err; size_t cap; } jreader;

static int jr_fail(jreader *r, const char *what)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < r->pos && i < r->n; i++) {
        if (r->s[i] == '\n') { line++; col = 1; } else col++;
    }
    snprintf(r->err, r->cap, "%s at line %zu, column %zu", what, line, col);
    return -1;
}

static void jr_ws(jreader *r)
{
    while (r->pos < r->n && (r->s[r->pos] == ' ' || r->s[r->pos] == '\t' || r->s[r->pos] == '\n' || r->s[r->pos] == '\r'))
        r->pos++;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int jr_hex4(jreader *r, uint32_t *cp)
{
    if (r->n - r->pos < 4) return jr_fail(r, "a short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(r->s[r->pos + (size_t)i]);
        if (h < 0) return jr_fail(r, "a bad \\u escape");
        v = v << 4 | (uint32_t)h;
    }
    r->pos += 4;
    *cp = v;
    return 0;
}

static void put_utf8(jbuf *b, uint32_t cp)
{
    char t[4];
    jb_add(b, t, utf8_encode(cp, t));
}

static int jr_escape(jreader *r, jbuf *b)
{
    char c = r->s[r->pos++];
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *k = c ? strchr(from, c) : NULL;
    if (k) { jb_addc(b, to[k - from]); return 0; }
    if (c != 'u') return jr_fail(r, "a bad escape");
    uint32_t cp, lo;
    if (jr_hex4(r, &cp) < 0) return -1;
    if (cp >= 0xd800 && cp < 0xdc00 && r->n - r->pos >= 6 && r->s[r->pos] == '\\' && r->s[r->pos + 1] == 'u') {
        size_t save = r->pos;
        r->pos += 2;
        if (jr_hex4(r, &lo) < 0) return -1;
        if (lo >= 0xdc00 && lo < 0xe000) cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        else r->pos = save;
    }
    put_utf8(b, cp);
    return 0;
}

static int jr_string(jreader *r, jval *out)
{
    jbuf b;
    jb_init(&b, r->a);
    r->pos++;
    for (;;) {
        if (r->pos >= r->n) return jr_fail(r, "an unterminated string");
        char c = r->s[r->pos];
        if (c == '"') break;
        if ((unsigned char)c < 0x20) return jr_fail(r, "a control character in a string");
        if (c == '\\') {
            r->pos++;
            if (r->pos >= r->n) return jr_fail(r, "an unterminated string");
            if (jr_escape(r, &b) < 0) return -1;
            continue;
        }
        size_t k = r->pos;
        while (k < r->n && r->s[k] != '"' && r->s[k] != '\\' && (unsigned char)r->s[k] >= 0x20) k++;
        jb_add(&b, r->s + r->pos, k - r->pos);
        r->pos = k;
    }
    r->pos++;
    if (b.over) return jr_fail(r, "out of memory");
    *out = jv_str(b.n ? b.p : "", b.n);
    return 0;
}

static int jr_number(jreader *r, jval *out)
{
    size_t i = r->pos, st = i;
    int isf = 0;
    if (i < r->n && r->s[i] == '-') i++;
    if (i >= r->n || r->s[i] < '0' || r->s[i] > '9') return jr_fail(r, "a bad value");
    if (r->s[i] == '0') i++;
    else while (i < r->n && r->s[i] >= '0' && r->s[i] <= '9') i++;
    if (i < r->n && r->s[i] == '.') {
        isf = 1;
        if (++i >= r->n || r->s[i] < '0' || r->s[i] > '9') { r->pos = i; return jr_fail(r, "a bad number"); }
        while (i < r->n && r->s[i] >= '0' && r->s[i] <= '9') i++;
    }
    if (i < r->n && (r->s[i] == 'e' || r->s[i] == 'E')) {
        isf = 1;
        i++;
        if (i < r->n && (r->s[i] == '+' || r->s[i] == '-')) i++;
        if (i >= r->n || r->s[i] < '0' || r->s[i] > '9') { r->pos = i; return jr_fail(r, "a bad number"); }
        while (i < r->n && r->s[i] >= '0' && r->s[i] <= '9') i++;
    }
    char t[64];
    size_t len = i - st;
    if (len >= sizeof t) { isf = 1; len = sizeof t - 1; }   /* a long integer: as a float */
    memcpy(t, r->s + st, len);
    t[len] = 0;
    r->pos = i;
    if (!isf) {
        char *end;
        long long v = strtoll(t, &end, 10);
        if (!(v == LLONG_MAX || v == LLONG_MIN)) { *out = jv_int(v); return 0; }
    }
    *out = jv_float(strtod(t, NULL));
    return 0;
}

static int jr_value(jreader *r, jval *out, int depth);

static int jr_container(jreader *r, jval *out, int depth, int obj)
{
    *out = obj ? jv_dict(r->a, 0) : jv_list(r->a, 0);
    if (out->t == JV_UNDEF) return jr_fail(r, "out of memory");
    r->pos++;
    jr_ws(r);
    if (r->pos < r->n && r->s[r->pos] == (obj ? '}' : ']')) { r->pos++; return 0; }
    for (;;) {
        jval k = { 0 }, v;
        jr_ws(r);
        if (obj) {
            if (r->pos >= r->n || r->s[r->pos] != '"') return jr_fail(r, "a member without a string key");
            if (jr_string(r, &k) < 0) return -1;
            jr_ws(r);
            if (r->pos >= r->n || r->s[r->pos] != ':') return jr_fail(r, "a member without ':'");
            r->pos++;
        }
        if (jr_value(r, &v, depth + 1) < 0) return -1;
        if (obj ? jd_set(r->a, out->u.d, k, v) : jl_push(r->a, out->u.l, v)) return jr_fail(r, "out of memory");
        jr_ws(r);
        if (r->pos < r->n && r->s[r->pos] == ',') { r->pos++; continue; }
        if (r->pos < r->n && r->s[r->pos] == (obj ? '}' : ']')) { r->pos++; return 0; }
        return jr_fail(r, obj ? "an object without ',' or '}'" : "an array without ',' or ']'");
    }
}

static int jr_word(jreader *r, const char *w, jval v, jval *out)
{
    size_t n = strlen(w);
    if (r->n - r->pos < n || memcmp(r->s + r->pos, w, n)) return jr_fail(r, "a bad value");
    r->pos += n;
    *out = v;
    return 0;
}

static int jr_value(jreader *r, jval *out, int depth)
{
    if (depth > JINJA_MAX_DEPTH) return jr_fail(r, "nesting deeper than 160");
    jr_ws(r);
    if (r->pos >= r->n) return jr_fail(r, "the text ends where a value should be");
    switch (r->s[r->pos]) {
    case '{': return jr_container(r, out, depth, 1);
    case '[': return jr_container(r, out, depth, 0);
    case '"': return jr_string(r, out);
    case 't': return jr_word(r, "true", jv_bool(1), out);
    case 'f': return jr_word(r, "false", jv_bool(0), out);
    case 'n': return jr_word(r, "null", jv_none(), out);
    default: return jr_number(r, out);
    }
}

int jv_from_json(jarena *a, const char *s, size_t n, jval *out, char *err, size_t cap)
{
    jreader r = { a, s, n, 0, err, cap };
    if (jr_value(&r, out, 0) < 0) return -1;
    jr_ws(&r);
    if (r.pos != n) return jr_fail(&r, "text after the value");
    return 0;
}
