/* buf.c - see buf.h. */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_free(buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->err = 0;
}

void buf_reset(buf *b)
{
    b->len = 0;
    b->err = 0;
    if (b->p) b->p[0] = 0;
}

int buf_reserve(buf *b, size_t extra)
{
    if (b->err) return 0;
    if (extra < b->cap - b->len) return 1;   /* keeps one byte for the NUL */
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len <= extra) {
        if (cap > SIZE_MAX / 2) { b->err = 1; return 0; }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) { b->err = 1; return 0; }
    b->p = p;
    b->cap = cap;
    return 1;
}

void buf_put(buf *b, const void *s, size_t n)
{
    if (!buf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void buf_puts(buf *b, const char *s) { buf_put(b, s, strlen(s)); }

void buf_putc(buf *b, char c) { buf_put(b, &c, 1); }

void buf_printf(buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { b->err = 1; return; }
    if ((size_t)n < sizeof small) { buf_put(b, small, (size_t)n); return; }
    if (!buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void buf_consume(buf *b, size_t n)
{
    if (n >= b->len) { b->len = 0; if (b->p) b->p[0] = 0; return; }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = 0;
}
