/* fuzz_http.c - any bytes as what a client sends mor-server: the request
 * head parser and the chunked body decoder (src/tools/mor-server/http.c),
 * fed all at once and in pieces.
 *
 * Input: byte 0 seeds the piece sizes; the rest is the stream of bytes.
 * Checks: the head's outcome (length, or the error status) is the same
 * whether the bytes come at once or in pieces (the server calls the parser
 * again on each arrival); every span lies in the buffer; an error has a
 * 4xx/5xx status and a message; a chunked body decodes to the same bytes
 * and outcome in pieces as at once, never past the body limit. */
#include "fuzz.h"
#include "http.h"

FUZZ_TARGET(http)

#define MAX_HEAD 2048
#define MAX_BODY 4096

static void span_in(http_span s, const uint8_t *b, size_t n, const char *what)
{
    FUZZ_ASSERT(s.n == 0 || ((const uint8_t *)s.p >= b && (const uint8_t *)s.p + s.n <= b + n) ||
                (s.n == 1 && s.p[0] == '/'), "%s outside the buffer", what);
}

static unsigned next_piece(uint32_t *r)
{
    *r = *r * 1103515245u + 12345u;
    return 1 + (*r >> 16) % 17;
}

/* Decode a chunked body from data[0..n) in pieces: outcome, bytes used,
 * body. */
static int chunked(const uint8_t *data, size_t n, uint32_t seed, size_t *used, buf *out, http_error *err)
{
    http_chunked c = { 0 };
    size_t at = 0;
    int r = 0;
    while (r == 0) {
        size_t piece = seed ? next_piece(&seed) : n - at;
        if (piece > n - at) piece = n - at;
        size_t k = 0;
        r = http_chunked_feed(&c, (const char *)data + at, piece, &k, out, MAX_BODY, MAX_HEAD, err);
        FUZZ_ASSERT(k <= piece, "consumed %zu of %zu", k, piece);
        FUZZ_ASSERT(r != 0 || k == piece, "needs more but left %zu bytes", piece - k);
        at += k;
        FUZZ_ASSERT(out->len <= MAX_BODY, "body %zu past the limit", out->len);
        if (r == 0 && at == n) break;
    }
    *used = at;
    return r;
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    uint32_t seed = data[0] | 1u;
    const uint8_t *b = data + 1;
    size_t n = size - 1;
    uint8_t *copy = fuzz_copy(b, n);
    if (!copy) return 0;
    http_request whole, part;
    memset(&part, 0, sizeof part);
    memset(&whole, 0, sizeof whole);
    http_error e1 = { 0, "" }, e2 = { 0, "" };
    int r1 = http_parse_head((const char *)copy, n, MAX_HEAD, &whole, &e1);
    /* the same bytes arriving in pieces */
    int r2 = HTTP_NEED_MORE;
    for (size_t have = 0; r2 == HTTP_NEED_MORE && have < n;) {
        have += next_piece(&seed);
        if (have > n) have = n;
        r2 = http_parse_head((const char *)copy, have, MAX_HEAD, &part, &e2);
    }
    FUZZ_ASSERT(r1 == r2 || (r1 < 0 && r2 < 0), "at once %d, in pieces %d", r1, r2);
    int accepted = 0;
    if (r1 < 0) {
        FUZZ_ASSERT(e1.status >= 400 && e1.status < 600 && e1.msg[0], "error status %d", e1.status);
        FUZZ_ASSERT(e1.status == e2.status, "status %d at once, %d in pieces", e1.status, e2.status);
    } else if (r1 > 0) {
        FUZZ_ASSERT((size_t)r1 <= n && r1 <= MAX_HEAD, "head length %d", r1);
        span_in(whole.method, copy, n, "method");
        span_in(whole.target, copy, n, "target");
        span_in(whole.path, copy, n, "path");
        span_in(whole.query, copy, n, "query");
        FUZZ_ASSERT(whole.method.n > 0 && whole.path.n > 0, "empty method or path");
        FUZZ_ASSERT(whole.n_headers >= 0 && whole.n_headers <= HTTP_MAX_HEADERS, "%d headers", whole.n_headers);
        for (int i = 0; i < whole.n_headers; i++) {
            span_in(whole.name[i], copy, n, "header name");
            span_in(whole.value[i], copy, n, "header value");
            FUZZ_ASSERT(whole.name[i].n > 0, "empty header name");
        }
        FUZZ_ASSERT(!(whole.chunked && whole.has_length), "chunked with a length");
        FUZZ_ASSERT(whole.minor == 0 || whole.minor == 1, "minor %d", whole.minor);
        FUZZ_ASSERT(part.n_headers == whole.n_headers && part.keep_alive == whole.keep_alive &&
                    part.chunked == whole.chunked && part.length == whole.length, "pieces parse differently");
        accepted = 1;
        if (whole.chunked) {
            buf o1 = { 0 }, o2 = { 0 };
            size_t u1 = 0, u2 = 0;
            http_error c1 = { 0, "" }, c2 = { 0, "" };
            int d1 = chunked(copy + r1, n - (size_t)r1, 0, &u1, &o1, &c1);
            int d2 = chunked(copy + r1, n - (size_t)r1, seed, &u2, &o2, &c2);
            FUZZ_ASSERT(d1 == d2, "chunked: %d at once, %d in pieces", d1, d2);
            if (d1 == 1) {
                FUZZ_ASSERT(u1 == u2 && o1.len == o2.len && (!o1.len || !memcmp(o1.p, o2.p, o1.len)),
                            "chunked bodies differ");
            }
            if (d1 < 0) FUZZ_ASSERT(c1.status >= 400 && c1.status == c2.status && c1.msg[0], "chunked error %d/%d",
                                    c1.status, c2.status);
            buf_free(&o1);
            buf_free(&o2);
        }
    }
    free(copy);
    return accepted;
}
