/* http.h - HTTP/1.1 requests as a server reads them (RFC 9110/9112).
 *
 * Incremental: http_parse_head is called on the bytes received so far and
 * says "need more", "here is a complete head of N bytes", or "error" with
 * the status to answer (400, 413, 431, 501, 505) and a message. The body
 * follows by Content-Length or chunked transfer coding (http_chunked).
 * Strict where leniency lets requests be smuggled or misread: one
 * Content-Length (repeats must agree), never with Transfer-Encoding, no
 * whitespace before a header's colon, no line folding, no control
 * characters. Lines may end in CRLF or a bare LF (as nginx accepts).
 * Every span points into the caller's buffer, which must not move while the
 * request is in use. No allocation. */
#ifndef MORSRV_HTTP_H
#define MORSRV_HTTP_H
#include <stddef.h>
#include <stdint.h>
#include "buf.h"

#define HTTP_MAX_HEADERS 64

typedef struct { const char *p; size_t n; } http_span;

typedef struct {
    http_span method, target, path, query;    /* path: the target without its query */
    int       minor;                          /* HTTP/1.<minor>: 0 or 1 */
    int       keep_alive;                     /* after this request (version + Connection) */
    int       chunked;                        /* Transfer-Encoding: chunked */
    int       has_length;                     /* Content-Length given */
    uint64_t  length;
    int       expect_continue;                /* Expect: 100-continue */
    int       n_headers;
    http_span name[HTTP_MAX_HEADERS], value[HTTP_MAX_HEADERS];
} http_request;

typedef struct {
    int  status;       /* the HTTP status to answer with */
    char msg[160];
} http_error;

enum { HTTP_NEED_MORE = 0, HTTP_ERROR = -1 };

/* Parse the head (request line and headers) at buf[0..len). Returns its
 * length in bytes (> 0) when complete, HTTP_NEED_MORE, or HTTP_ERROR (err
 * set). A head longer than max_head is an error (431) as soon as that many
 * bytes have come without its end. Empty lines before the request line are
 * skipped, as RFC 9112 asks. */
int http_parse_head(const char *buf, size_t len, size_t max_head, http_request *req, http_error *err);

/* The value of header `name` (case-insensitive), or NULL. */
const http_span *http_header(const http_request *req, const char *name);
/* 1 if span s equals the NUL-terminated t, ignoring ASCII case. */
int http_span_ieq(http_span s, const char *t);
/* 1 if span s equals t exactly. */
int http_span_eq(http_span s, const char *t);

/* Chunked transfer coding, decoded as it arrives. */
typedef struct {
    int      state;
    uint64_t size;       /* of the chunk being read */
    size_t   line;       /* bytes of the current size / extension / trailer line */
    size_t   trailers;   /* bytes of trailers so far */
    int      digits;
} http_chunked;

/* Feed in[0..n): appends the body bytes to out and sets *used to the bytes
 * of in consumed. Returns 1 when the body is complete (the rest of in, from
 * *used, is the next request), 0 when it needs more, HTTP_ERROR (413 past
 * max_body, 400 malformed, 431 trailers longer than max_head). */
int http_chunked_feed(http_chunked *c, const char *in, size_t n, size_t *used, buf *out, size_t max_body,
                      size_t max_head, http_error *err);

/* The reason phrase of a status ("Not Found"). */
const char *http_reason(int status);
#endif
