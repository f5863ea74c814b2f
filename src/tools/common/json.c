/* json.c - strict recursive-descent JSON parser. See json.h.
 *
 * The parser never trusts the input: every read is bounded by `end`, nesting
 * is limited, and sizes are checked before they are multiplied. On any error
 * the partial tree is freed and NULL is returned. */
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *start, *p, *end;
    int depth;
    char *err;
    size_t errcap;
    int failed;
} jparser;

static void jfail(jparser *jp, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    if (jp->failed) return;
    jp->failed = 1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (jp->err && jp->errcap)
        snprintf(jp->err, jp->errcap, "JSON: %s at byte %zu", msg, (size_t)(jp->p - jp->start));
}

static void skip_ws(jparser *jp)
{
    while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r'))
        jp->p++;
}

static json *new_value(jparser *jp, int type)
{
    json *v = calloc(1, sizeof *v);
    if (!v) jfail(jp, "out of memory");
    else v->type = type;
    return v;
}

void json_free(json *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        json_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

/* ---- strings ------------------------------------------------------------ */

typedef struct { char *b; size_t n, cap; } sbuf;

static int sbuf_put(sbuf *s, const char *src, size_t n)
{
    if (n > s->cap - s->n) {
        size_t cap = s->cap ? s->cap : 32;
        while (cap - s->n < n) {
            if (cap > SIZE_MAX / 2) return 0;
            cap *= 2;
        }
        {
            char *b = realloc(s->b, cap);
            if (!b) return 0;
            s->b = b;
            s->cap = cap;
        }
    }
    memcpy(s->b + s->n, src, n);
    s->n += n;
    return 1;
}

/* Append code point cp (already validated: not a surrogate, <= 0x10FFFF). */
static int sbuf_utf8(sbuf *s, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | cp >> 6); b[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12); b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        b[0] = (char)(0xF0 | cp >> 18); b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    return sbuf_put(s, b, n);
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid (overlong
 * forms, surrogates, > U+10FFFF and truncation are all invalid). */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)(end - p) < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

static int hex4(jparser *jp, uint32_t *out)
{
    uint32_t v = 0;
    if (jp->end - jp->p < 4) { jfail(jp, "truncated \\u escape"); return 0; }
    for (int i = 0; i < 4; i++) {
        char c = jp->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else { jfail(jp, "bad hex digit in \\u escape"); return 0; }
    }
    jp->p += 4;
    *out = v;
    return 1;
}

/* Parse a string starting at the opening quote; returns a malloc'd NUL-
 * terminated buffer and its length, or NULL on error. */
static char *parse_string(jparser *jp, size_t *len_out)
{
    sbuf s = {0};
    jp->p++;   /* opening quote */
    for (;;) {
        const char *run = jp->p;
        /* copy a run of plain bytes at once */
        while (jp->p < jp->end && *jp->p != '"' && *jp->p != '\\' && (unsigned char)*jp->p >= 0x20) {
            if ((unsigned char)*jp->p < 0x80) { jp->p++; continue; }
            {
                size_t n = utf8_len((const unsigned char *)jp->p, (const unsigned char *)jp->end);
                if (!n) { jfail(jp, "invalid UTF-8 in string"); goto fail; }
                jp->p += n;
            }
        }
        if (jp->p > run && !sbuf_put(&s, run, (size_t)(jp->p - run))) { jfail(jp, "out of memory"); goto fail; }
        if (jp->p >= jp->end) { jfail(jp, "unterminated string"); goto fail; }
        if (*jp->p == '"') { jp->p++; break; }
        if ((unsigned char)*jp->p < 0x20) { jfail(jp, "control character in string"); goto fail; }
        /* escape */
        jp->p++;
        if (jp->p >= jp->end) { jfail(jp, "unterminated escape"); goto fail; }
        {
            char c = *jp->p++, out;
            uint32_t cp, lo;
            switch (c) {
            case '"': out = '"'; break;
            case '\\': out = '\\'; break;
            case '/': out = '/'; break;
            case 'b': out = '\b'; break;
            case 'f': out = '\f'; break;
            case 'n': out = '\n'; break;
            case 'r': out = '\r'; break;
            case 't': out = '\t'; break;
            case 'u':
                if (!hex4(jp, &cp)) goto fail;
                if (cp >= 0xDC00 && cp <= 0xDFFF) { jfail(jp, "lone low surrogate"); goto fail; }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (jp->end - jp->p < 2 || jp->p[0] != '\\' || jp->p[1] != 'u') {
                        jfail(jp, "high surrogate without a low surrogate");
                        goto fail;
                    }
                    jp->p += 2;
                    if (!hex4(jp, &lo)) goto fail;
                    if (lo < 0xDC00 || lo > 0xDFFF) { jfail(jp, "high surrogate without a low surrogate"); goto fail; }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (!sbuf_utf8(&s, cp)) { jfail(jp, "out of memory"); goto fail; }
                continue;
            default:
                jp->p--;
                jfail(jp, "bad escape '\\%c'", c >= 0x20 && c < 0x7f ? c : '?');
                goto fail;
            }
            if (!sbuf_put(&s, &out, 1)) { jfail(jp, "out of memory"); goto fail; }
        }
    }
    if (!sbuf_put(&s, "", 1)) { jfail(jp, "out of memory"); goto fail; }
    *len_out = s.n - 1;
    return s.b;
fail:
    free(s.b);
    return NULL;
}

/* ---- numbers ------------------------------------------------------------ */

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static json *parse_number(jparser *jp)
{
    const char *s = jp->p;
    char small[64], *buf = small;
    size_t n;
    json *v;
    if (jp->p < jp->end && *jp->p == '-') jp->p++;
    if (jp->p >= jp->end || !is_digit(*jp->p)) { jfail(jp, "bad number"); return NULL; }
    if (*jp->p == '0') jp->p++;
    else while (jp->p < jp->end && is_digit(*jp->p)) jp->p++;
    if (jp->p < jp->end && *jp->p == '.') {
        jp->p++;
        if (jp->p >= jp->end || !is_digit(*jp->p)) { jfail(jp, "bad number: digit expected after '.'"); return NULL; }
        while (jp->p < jp->end && is_digit(*jp->p)) jp->p++;
    }
    if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
        jp->p++;
        if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-')) jp->p++;
        if (jp->p >= jp->end || !is_digit(*jp->p)) { jfail(jp, "bad number: digit expected in exponent"); return NULL; }
        while (jp->p < jp->end && is_digit(*jp->p)) jp->p++;
    }
    /* strtod needs a terminated copy: the input is not NUL-terminated. */
    n = (size_t)(jp->p - s);
    if (n >= sizeof small) {
        buf = malloc(n + 1);
        if (!buf) { jfail(jp, "out of memory"); return NULL; }
    }
    memcpy(buf, s, n);
    buf[n] = 0;
    v = new_value(jp, JSON_NUMBER);
    if (v) v->num = strtod(buf, NULL);   /* overflow gives +-HUGE_VAL, as Python's float() gives inf */
    if (buf != small) free(buf);
    return v;
}

/* ---- values ------------------------------------------------------------- */

static json *parse_value(jparser *jp);

static int push_item(jparser *jp, json *c, json *item, char *key, size_t *cap)
{
    if (c->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 4;
        json **items;
        if (ncap > SIZE_MAX / sizeof(void *)) { jfail(jp, "too many items"); return 0; }
        items = realloc(c->items, ncap * sizeof *items);
        if (!items) { jfail(jp, "out of memory"); return 0; }
        c->items = items;
        if (c->type == JSON_OBJECT) {
            char **keys = realloc(c->keys, ncap * sizeof *keys);
            if (!keys) { jfail(jp, "out of memory"); return 0; }
            c->keys = keys;
        }
        *cap = ncap;
    }
    c->items[c->n] = item;
    if (c->type == JSON_OBJECT) c->keys[c->n] = key;
    c->n++;
    return 1;
}

static json *parse_container(jparser *jp, int type)
{
    char close = type == JSON_ARRAY ? ']' : '}';
    size_t cap = 0;
    json *c;
    if (++jp->depth > JSON_MAX_DEPTH) { jfail(jp, "nesting deeper than %d", JSON_MAX_DEPTH); return NULL; }
    c = new_value(jp, type);
    if (!c) return NULL;
    jp->p++;
    skip_ws(jp);
    if (jp->p < jp->end && *jp->p == close) {
        jp->p++;
        jp->depth--;
        return c;
    }
    for (;;) {
        char *key = NULL;
        json *item;
        skip_ws(jp);
        if (type == JSON_OBJECT) {
            size_t klen;
            if (jp->p >= jp->end || *jp->p != '"') { jfail(jp, "object key expected"); goto fail; }
            key = parse_string(jp, &klen);
            if (!key) goto fail;
            skip_ws(jp);
            if (jp->p >= jp->end || *jp->p != ':') { free(key); jfail(jp, "':' expected"); goto fail; }
            jp->p++;
        }
        item = parse_value(jp);
        if (!item) { free(key); goto fail; }
        if (!push_item(jp, c, item, key, &cap)) { json_free(item); free(key); goto fail; }
        skip_ws(jp);
        if (jp->p < jp->end && *jp->p == ',') { jp->p++; continue; }
        if (jp->p < jp->end && *jp->p == close) { jp->p++; break; }
        jfail(jp, type == JSON_ARRAY ? "',' or ']' expected" : "',' or '}' expected");
        goto fail;
    }
    jp->depth--;
    return c;
fail:
    json_free(c);
    return NULL;
}

static int match_word(jparser *jp, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(jp->end - jp->p) < n || memcmp(jp->p, w, n) != 0) return 0;
    jp->p += n;
    return 1;
}

static json *parse_value(jparser *jp)
{
    json *v;
    skip_ws(jp);
    if (jp->p >= jp->end) { jfail(jp, "value expected"); return NULL; }
    switch (*jp->p) {
    case '{': return parse_container(jp, JSON_OBJECT);
    case '[': return parse_container(jp, JSON_ARRAY);
    case '"': {
        size_t len;
        char *s = parse_string(jp, &len);
        if (!s) return NULL;
        v = new_value(jp, JSON_STRING);
        if (!v) { free(s); return NULL; }
        v->str = s;
        v->str_len = len;
        return v;
    }
    case 't':
    case 'f': {
        int b = *jp->p == 't';
        if (match_word(jp, b ? "true" : "false")) {
            v = new_value(jp, JSON_BOOL);
            if (v) v->boolean = b;
            return v;
        }
        break;
    }
    case 'n':
        if (match_word(jp, "null")) return new_value(jp, JSON_NULL);
        break;
    default:
        if (*jp->p == '-' || is_digit(*jp->p)) return parse_number(jp);
        break;
    }
    jfail(jp, "unexpected character");
    return NULL;
}

json *json_parse(const char *text, size_t len, char *err, size_t errcap)
{
    jparser jp = {0};
    json *v;
    static const char empty[1];
    if (!text) text = empty;
    jp.start = jp.p = text;
    jp.end = text + len;
    jp.err = err;
    jp.errcap = errcap;
    v = parse_value(&jp);
    if (!v) return NULL;
    skip_ws(&jp);
    if (jp.p != jp.end) {
        jfail(&jp, "trailing characters after the value");
        json_free(v);
        return NULL;
    }
    return v;
}

const json *json_get(const json *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT || !key) return NULL;
    for (size_t i = obj->n; i-- > 0;)
        if (strcmp(obj->keys[i], key) == 0) return obj->items[i];
    return NULL;
}

const json *json_at(const json *arr, size_t i)
{
    if (!arr || arr->type != JSON_ARRAY || i >= arr->n) return NULL;
    return arr->items[i];
}

int json_as_int(const json *v, int64_t lo, int64_t hi, int64_t *out)
{
    const double lim = 9007199254740992.0;   /* 2^53 */
    if (!v || v->type != JSON_NUMBER) return 0;
    if (!(v->num >= -lim && v->num <= lim) || floor(v->num) != v->num) return 0;
    if ((int64_t)v->num < lo || (int64_t)v->num > hi) return 0;
    *out = (int64_t)v->num;
    return 1;
}

const char *json_as_str(const json *v)
{
    return v && v->type == JSON_STRING ? v->str : NULL;
}
