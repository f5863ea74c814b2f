/* utf8.h - UTF-8 sequence checks shared by the JSON writer and the text
 * stream (which must not cut a character in two between two events). */
#ifndef MORSRV_UTF8_H
#define MORSRV_UTF8_H
#include <stddef.h>
#include <stdint.h>

/* The length (1..4) of the valid UTF-8 sequence at p[0..n), n >= 1; 0 when
 * the bytes there can never be one (a stray continuation byte, an overlong
 * form, a surrogate, past U+10FFFF); -1 when they are the valid beginning
 * of a sequence that n cuts short. */
static inline int utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    int len;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) {
            /* cut short: valid so far? (the second byte limits E0, ED, F0, F4) */
            if (i == 1) return -1;
            break;
        }
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3F);
        if (i == 1) {
            if (c == 0xE0 && p[1] < 0xA0) return 0;
            if (c == 0xED && p[1] > 0x9F) return 0;
            if (c == 0xF0 && p[1] < 0x90) return 0;
            if (c == 0xF4 && p[1] > 0x8F) return 0;
        }
    }
    if ((size_t)len > n) return -1;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* How many bytes at the end of p[0..n) are the valid beginning of a
 * character that is not complete yet (0..3). */
static inline size_t utf8_incomplete_tail(const unsigned char *p, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned c = p[n - k];
        if ((c & 0xC0) == 0x80) continue;          /* a continuation byte: look further back */
        return c >= 0xC2 && utf8_seq(p + n - k, k) == -1 ? k : 0;
    }
    return 0;
}
#endif
