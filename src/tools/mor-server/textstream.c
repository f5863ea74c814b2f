/* textstream.c - see textstream.h. */
#include "textstream.h"

#include <stdlib.h>
#include <string.h>
#include "utf8.h"

int ts_init(textstream *ts, const char *const *stops, const size_t *lens, int n)
{
    memset(ts, 0, sizeof *ts);
    ts->stop_index = -1;
    if (n <= 0) return 0;
    ts->stops = calloc((size_t)n, sizeof *ts->stops);
    if (!ts->stops) return -1;
    ts->n_stops = n;
    for (int i = 0; i < n; i++) {
        ts_stop *s = &ts->stops[i];
        s->n = lens[i];
        s->s = malloc(s->n ? s->n : 1);
        s->fail = malloc(sizeof(size_t) * (s->n ? s->n : 1));
        if (!s->s || !s->fail) { ts_free(ts); return -1; }
        memcpy(s->s, stops[i], s->n);
        /* fail[j]: the longest proper prefix of s[0..j] that is also its suffix */
        if (s->n) s->fail[0] = 0;
        for (size_t j = 1, k = 0; j < s->n; j++) {
            while (k && s->s[j] != s->s[k]) k = s->fail[k - 1];
            if (s->s[j] == s->s[k]) k++;
            s->fail[j] = k;
        }
    }
    return 0;
}

void ts_free(textstream *ts)
{
    for (int i = 0; i < ts->n_stops; i++) { free(ts->stops[i].s); free(ts->stops[i].fail); }
    free(ts->stops);
    buf_free(&ts->text);
    memset(ts, 0, sizeof *ts);
}

static size_t release(textstream *ts, size_t end, const char **out)
{
    size_t n = end > ts->released ? end - ts->released : 0;
    *out = ts->text.p ? ts->text.p + ts->released : "";
    ts->released += n;
    return n;
}

size_t ts_push(textstream *ts, const char *bytes, size_t n, const char **out)
{
    if (ts->stopped) return release(ts, ts->released, out);
    size_t start = ts->text.len;
    buf_put(&ts->text, bytes, n);
    if (!buf_ok(&ts->text)) { ts->stopped = 1; ts->text.len = start; return release(ts, ts->released, out); }
    for (size_t i = start; i < ts->text.len; i++) {
        char c = ts->text.p[i];
        size_t cut = (size_t)-1;   /* where the text ends when a stop string completes here */
        int which = -1;
        for (int k = 0; k < ts->n_stops; k++) {
            ts_stop *s = &ts->stops[k];
            while (s->state && c != s->s[s->state]) s->state = s->fail[s->state - 1];
            if (c == s->s[s->state]) s->state++;
            if (s->state == s->n) {
                size_t at = i + 1 - s->n;
                if (at < cut) { cut = at; which = k; }
                s->state = s->fail[s->n - 1];
            }
        }
        if (cut != (size_t)-1) {
            ts->stopped = 1;
            ts->stop_index = which;
            ts->text.len = cut;
            ts->text.p[cut] = 0;
            return release(ts, cut, out);
        }
    }
    size_t hold = 0;
    for (int k = 0; k < ts->n_stops; k++) if (ts->stops[k].state > hold) hold = ts->stops[k].state;
    size_t end = ts->text.len - (hold < ts->text.len - ts->released ? hold : ts->text.len - ts->released);
    if (end > ts->released)
        end -= utf8_incomplete_tail((const unsigned char *)ts->text.p + ts->released, end - ts->released);
    return release(ts, end, out);
}

size_t ts_flush(textstream *ts, const char **out) { return release(ts, ts->text.len, out); }
