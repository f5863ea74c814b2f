/* buf.h - a growable byte buffer, the server's one string type.
 *
 * Appends never fail silently: the first allocation failure sets `err` and
 * later appends do nothing, so a caller builds a whole message and checks
 * once at the end (buf_ok). `p` is always NUL-terminated when len > 0. */
#ifndef MORSRV_BUF_H
#define MORSRV_BUF_H
#include <stddef.h>

typedef struct {
    char  *p;
    size_t len, cap;
    int    err;
} buf;

void buf_free(buf *b);
void buf_reset(buf *b);                           /* len = 0, err = 0, keeps the memory */
int  buf_reserve(buf *b, size_t extra);           /* room for extra more bytes; 0 on failure */
void buf_put(buf *b, const void *s, size_t n);
void buf_puts(buf *b, const char *s);
void buf_putc(buf *b, char c);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drop the first n bytes (n <= len). */
void buf_consume(buf *b, size_t n);
static inline int buf_ok(const buf *b) { return !b->err; }
#endif
