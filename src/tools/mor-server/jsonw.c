/* jsonw.c - see jsonw.h. */
#include "jsonw.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "json.h"
#include "utf8.h"

void jw_init(jsonw *w, buf *b)
{
    memset(w, 0, sizeof *w);
    w->b = b;
    w->first[0] = 1;
}

/* Before a value: the comma that separates it from the previous one. */
static void sep(jsonw *w)
{
    if (w->after_key) { w->after_key = 0; return; }
    if (!w->first[w->depth]) buf_putc(w->b, ',');
    w->first[w->depth] = 0;
}

static void open(jsonw *w, char c)
{
    sep(w);
    if (w->depth + 1 >= JW_MAX_DEPTH) { w->b->err = 1; return; }
    buf_putc(w->b, c);
    w->first[++w->depth] = 1;
}

static void close_(jsonw *w, char c)
{
    if (w->depth > 0) w->depth--;
    else w->b->err = 1;
    buf_putc(w->b, c);
}

void jw_obj(jsonw *w) { open(w, '{'); }
void jw_obj_end(jsonw *w) { close_(w, '}'); }
void jw_arr(jsonw *w) { open(w, '['); }
void jw_arr_end(jsonw *w) { close_(w, ']'); }

void json_escape(buf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    if (!buf_reserve(b, n + 2)) return;
    while (i < n) {
        size_t run = i;
        /* a run of bytes that need nothing */
        while (i < n && p[i] >= 0x20 && p[i] < 0x80 && p[i] != '"' && p[i] != '\\') i++;
        if (i > run) buf_put(b, p + run, i - run);
        if (i >= n) break;
        unsigned c = p[i];
        if (c >= 0x80) {
            int k = utf8_seq(p + i, n - i);
            if (k > 0) { buf_put(b, p + i, (size_t)k); i += (size_t)k; }
            else { buf_put(b, "\xEF\xBF\xBD", 3); i++; }   /* U+FFFD for each bad byte */
            continue;
        }
        i++;
        switch (c) {
        case '"': buf_put(b, "\\\"", 2); break;
        case '\\': buf_put(b, "\\\\", 2); break;
        case '\n': buf_put(b, "\\n", 2); break;
        case '\r': buf_put(b, "\\r", 2); break;
        case '\t': buf_put(b, "\\t", 2); break;
        case '\b': buf_put(b, "\\b", 2); break;
        case '\f': buf_put(b, "\\f", 2); break;
        default: buf_printf(b, "\\u%04x", c); break;
        }
    }
}

void jw_strn(jsonw *w, const char *s, size_t n)
{
    sep(w);
    buf_putc(w->b, '"');
    json_escape(w->b, s, n);
    buf_putc(w->b, '"');
}

void jw_str(jsonw *w, const char *s) { jw_strn(w, s, strlen(s)); }

void jw_key(jsonw *w, const char *key)
{
    jw_str(w, key);
    buf_putc(w->b, ':');
    w->after_key = 1;
}

void jw_keyn(jsonw *w, const char *key, size_t n)
{
    jw_strn(w, key, n);
    buf_putc(w->b, ':');
    w->after_key = 1;
}

void jw_int(jsonw *w, int64_t v)
{
    sep(w);
    buf_printf(w->b, "%" PRId64, v);
}

void jw_double(jsonw *w, double v)
{
    sep(w);
    if (!isfinite(v)) { buf_puts(w->b, "null"); return; }
    buf_printf(w->b, "%.10g", v);
}

void jw_double_exact(jsonw *w, double v)
{
    sep(w);
    if (!isfinite(v)) { buf_puts(w->b, "null"); return; }
    buf_printf(w->b, "%.17g", v);
}

void jw_bool(jsonw *w, int v)
{
    sep(w);
    buf_puts(w->b, v ? "true" : "false");
}

void jw_null(jsonw *w)
{
    sep(w);
    buf_puts(w->b, "null");
}

void jw_json(jsonw *w, const struct json *v)
{
    switch (v->type) {
    case JSON_NULL: jw_null(w); break;
    case JSON_BOOL: jw_bool(w, v->boolean); break;
    case JSON_NUMBER:
        if (floor(v->num) == v->num && fabs(v->num) <= 9007199254740992.0) jw_int(w, (int64_t)v->num);
        else jw_double_exact(w, v->num);
        break;
    case JSON_STRING: jw_strn(w, v->str, v->str_len); break;
    case JSON_ARRAY:
        jw_arr(w);
        for (size_t i = 0; i < v->n; i++) jw_json(w, v->items[i]);
        jw_arr_end(w);
        break;
    default:
        jw_obj(w);
        for (size_t i = 0; i < v->n; i++) { jw_key(w, v->keys[i]); jw_json(w, v->items[i]); }
        jw_obj_end(w);
    }
}
