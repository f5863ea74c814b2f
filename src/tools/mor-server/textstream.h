/* textstream.h - generated text as it may be shown: stop strings and whole
 * characters.
 *
 * Tokens arrive one at a time as bytes (mor_token_to_piece of one token). The
 * stream hands out, after each, the bytes that can no longer change:
 *  - it holds back a tail that is the beginning of a stop string (so text
 *    that turns out to be part of one is never shown), found with one KMP
 *    automaton per stop string, so a token costs O(its bytes) whatever the
 *    stop strings are;
 *  - it holds back a UTF-8 character cut in two between tokens.
 * Generation stops as soon as the text contains a stop string; the text
 * ends before it (of stop strings completed by the same byte, the longest).
 * At the end, ts_flush releases what was held. */
#ifndef MORSRV_TEXTSTREAM_H
#define MORSRV_TEXTSTREAM_H
#include <stddef.h>
#include <stdint.h>
#include "buf.h"

typedef struct {
    char   *s;
    size_t  n;
    size_t *fail;     /* KMP failure function */
    size_t  state;    /* bytes of s matched by the end of the text */
} ts_stop;

typedef struct {
    buf      text;       /* the text so far (ends before a stop string once stopped) */
    size_t   released;   /* bytes of text handed out */
    ts_stop *stops;
    int      n_stops;
    int      stopped;    /* a stop string was found */
    int      stop_index; /* which one (into the strings given to ts_init), -1 before */
} textstream;

/* Copies the stop strings. 0 on success, -1 out of memory. */
int    ts_init(textstream *ts, const char *const *stops, const size_t *lens, int n);
void   ts_free(textstream *ts);
/* Add the bytes of one token (ignored once stopped). Returns how many bytes
 * are newly released; *out points at them (valid until the next call). */
size_t ts_push(textstream *ts, const char *bytes, size_t n, const char **out);
/* Release everything held (the end of generation). */
size_t ts_flush(textstream *ts, const char **out);
#endif
