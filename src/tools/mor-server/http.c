/* http.c - see http.h. */
#include "http.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(http_error *err, int status, const char *fmt, ...)
{
    va_list ap;
    err->status = status;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return HTTP_ERROR;
}

static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static unsigned char lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c; }

int http_span_ieq(http_span s, const char *t)
{
    size_t n = strlen(t);
    if (s.n != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)s.p[i]) != lower((unsigned char)t[i])) return 0;
    return 1;
}

int http_span_eq(http_span s, const char *t)
{
    size_t n = strlen(t);
    return s.n == n && memcmp(s.p, t, n) == 0;
}

const http_span *http_header(const http_request *req, const char *name)
{
    for (int i = 0; i < req->n_headers; i++)
        if (http_span_ieq(req->name[i], name)) return &req->value[i];
    return NULL;
}

/* The end of the line starting at p (the index of its '\n'), or -1. */
static long line_end(const char *src, size_t from, size_t len)
{
    const char *nl = memchr(src + from, '\n', len - from);
    return nl ? (long)(nl - src) : -1;
}

/* Content of the line [from, lf): without a final CR. A CR anywhere else
 * is an error (a bare CR may end a line for one parser and not another). */
static int line_content(const char *src, size_t from, size_t lf, size_t *end, http_error *err)
{
    size_t e = lf;
    if (e > from && src[e - 1] == '\r') e--;
    if (memchr(src + from, '\r', e - from)) return fail(err, 400, "bare CR in the request head");
    *end = e;
    return 0;
}

/* Comma-separated tokens of a Connection header. */
static void connection_tokens(http_span v, int *close, int *keep)
{
    size_t i = 0;
    while (i < v.n) {
        while (i < v.n && (v.p[i] == ' ' || v.p[i] == '\t' || v.p[i] == ',')) i++;
        size_t s = i;
        while (i < v.n && v.p[i] != ',' && v.p[i] != ' ' && v.p[i] != '\t') i++;
        http_span t = { v.p + s, i - s };
        if (http_span_ieq(t, "close")) *close = 1;
        else if (http_span_ieq(t, "keep-alive")) *keep = 1;
    }
}

static int parse_length(http_span v, uint64_t *out)
{
    uint64_t x = 0;
    if (v.n == 0 || v.n > 19) return 0;
    for (size_t i = 0; i < v.n; i++) {
        if (v.p[i] < '0' || v.p[i] > '9') return 0;
        x = x * 10 + (uint64_t)(v.p[i] - '0');
    }
    *out = x;
    return 1;
}

int http_parse_head(const char *src, size_t len, size_t max_head, http_request *req, http_error *err)
{
    size_t pos = 0;
    memset(req, 0, sizeof *req);
    /* empty lines before the request line */
    while (pos < len && (src[pos] == '\n' || (src[pos] == '\r' && pos + 1 < len && src[pos + 1] == '\n')))
        pos += src[pos] == '\r' ? 2 : 1;
    /* find the empty line that ends the head */
    size_t head_end = 0;
    for (size_t at = pos;;) {
        long lf = line_end(src, at, len);
        if (lf < 0) break;
        size_t next = (size_t)lf + 1;
        if (next < len && src[next] == '\n') { head_end = next + 1; break; }
        if (next + 1 < len && src[next] == '\r' && src[next + 1] == '\n') { head_end = next + 2; break; }
        if (next >= len || (next + 1 >= len && src[next] == '\r')) break;   /* the empty line may be coming */
        at = next;
    }
    if (!head_end) {
        if (len >= max_head) return fail(err, 431, "request head larger than %zu bytes", max_head);
        return HTTP_NEED_MORE;
    }
    if (head_end > max_head) return fail(err, 431, "request head larger than %zu bytes", max_head);

    /* request line: method SP target SP HTTP/1.x */
    size_t lf = (size_t)line_end(src, pos, len), e;
    if (line_content(src, pos, lf, &e, err)) return HTTP_ERROR;
    size_t i = pos;
    while (i < e && is_tchar((unsigned char)src[i])) i++;
    if (i == pos || i >= e || src[i] != ' ') return fail(err, 400, "malformed request line");
    req->method = (http_span){ src + pos, i - pos };
    size_t t0 = ++i;
    while (i < e && (unsigned char)src[i] > 0x20 && (unsigned char)src[i] < 0x7F) i++;
    if (i == t0 || i >= e || src[i] != ' ') return fail(err, 400, "malformed request target");
    req->target = (http_span){ src + t0, i - t0 };
    i++;
    if (e - i != 8 || memcmp(src + i, "HTTP/", 5) != 0 || src[i + 6] != '.' ||
        src[i + 5] < '0' || src[i + 5] > '9' || src[i + 7] < '0' || src[i + 7] > '9')
        return fail(err, 400, "malformed HTTP version");
    if (src[i + 5] != '1') return fail(err, 505, "HTTP version %c.%c is not supported (HTTP/1.1 is)", src[i + 5], src[i + 7]);
    req->minor = src[i + 7] == '0' ? 0 : 1;

    /* path and query; absolute-form (http://host/path) is accepted as RFC 9112 asks */
    http_span t = req->target;
    size_t scheme = t.n >= 7 && http_span_ieq((http_span){ t.p, 7 }, "http://") ? 7
                  : t.n >= 8 && http_span_ieq((http_span){ t.p, 8 }, "https://") ? 8 : 0;
    if (scheme) {
        const char *slash = memchr(t.p + scheme, '/', t.n - scheme);
        t = slash ? (http_span){ slash, t.n - (size_t)(slash - t.p) } : (http_span){ "/", 1 };
    } else if (t.p[0] != '/' && !(t.n == 1 && t.p[0] == '*')) {
        return fail(err, 400, "request target must start with '/'");
    }
    const char *q = memchr(t.p, '?', t.n);
    req->path = q ? (http_span){ t.p, (size_t)(q - t.p) } : t;
    req->query = q ? (http_span){ q + 1, t.n - (size_t)(q - t.p) - 1 } : (http_span){ t.p + t.n, 0 };

    /* headers */
    int conn_close = 0, conn_keep = 0, n_host = 0, n_te = 0;
    pos = lf + 1;
    for (;;) {
        lf = (size_t)line_end(src, pos, len);
        if (line_content(src, pos, lf, &e, err)) return HTTP_ERROR;
        if (e == pos) break;   /* the empty line */
        if (src[pos] == ' ' || src[pos] == '\t') return fail(err, 400, "obsolete line folding in a header");
        i = pos;
        while (i < e && is_tchar((unsigned char)src[i])) i++;
        if (i == pos || i >= e || src[i] != ':') return fail(err, 400, "malformed header line");
        if (req->n_headers == HTTP_MAX_HEADERS) return fail(err, 431, "more than %d headers", HTTP_MAX_HEADERS);
        http_span name = { src + pos, i - pos };
        i++;
        while (i < e && (src[i] == ' ' || src[i] == '\t')) i++;
        size_t ve = e;
        while (ve > i && (src[ve - 1] == ' ' || src[ve - 1] == '\t')) ve--;
        for (size_t k = i; k < ve; k++) {
            unsigned char c = (unsigned char)src[k];
            if ((c < 0x20 && c != '\t') || c == 0x7F) return fail(err, 400, "control character in a header value");
        }
        http_span value = { src + i, ve - i };
        req->name[req->n_headers] = name;
        req->value[req->n_headers] = value;
        req->n_headers++;
        if (http_span_ieq(name, "content-length")) {
            uint64_t v;
            if (!parse_length(value, &v)) return fail(err, 400, "malformed Content-Length");
            if (req->has_length && v != req->length) return fail(err, 400, "conflicting Content-Length headers");
            req->has_length = 1;
            req->length = v;
        } else if (http_span_ieq(name, "transfer-encoding")) {
            if (++n_te > 1) return fail(err, 400, "more than one Transfer-Encoding header");
            if (!http_span_ieq(value, "chunked"))
                return fail(err, 501, "Transfer-Encoding other than chunked is not supported");
            req->chunked = 1;
        } else if (http_span_ieq(name, "connection")) {
            connection_tokens(value, &conn_close, &conn_keep);
        } else if (http_span_ieq(name, "host")) {
            n_host++;
        } else if (http_span_ieq(name, "expect")) {
            if (!http_span_ieq(value, "100-continue")) return fail(err, 417, "unsupported Expect header");
            req->expect_continue = 1;
        }
        pos = lf + 1;
    }
    if (req->chunked && req->has_length) return fail(err, 400, "both Content-Length and Transfer-Encoding");
    if (req->minor == 1 && n_host != 1) return fail(err, 400, n_host ? "more than one Host header" : "no Host header");
    req->keep_alive = conn_close ? 0 : req->minor == 1 ? 1 : conn_keep;
    return (int)head_end;
}

/* ---- chunked bodies ---------------------------------------------------- */

enum { C_SIZE, C_SIZE_WS, C_EXT, C_SIZE_LF, C_DATA, C_DATA_CR, C_DATA_LF, C_TRAILER_BOL, C_TRAILER,
       C_TRAILER_LF, C_END_LF, C_DONE };

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int http_chunked_feed(http_chunked *c, const char *in, size_t n, size_t *used, buf *out, size_t max_body,
                      size_t max_head, http_error *err)
{
    size_t i = 0;
    *used = 0;
    while (i < n && c->state != C_DONE) {
        char ch = in[i];
        switch (c->state) {
        case C_SIZE: {
            int h = hexval(ch);
            if (h >= 0) {
                if (c->size >> 56) return fail(err, 413, "chunk size too large");
                c->digits = 1;
                c->size = c->size * 16 + (uint64_t)h;
                i++;
                break;
            }
            if (!c->digits) return fail(err, 400, "malformed chunk size");
            if (ch == ' ' || ch == '\t') { c->state = C_SIZE_WS; i++; break; }
            if (ch == ';') { c->state = C_EXT; c->line = 0; i++; break; }
            if (ch == '\r') { c->state = C_SIZE_LF; i++; break; }
            if (ch == '\n') { c->state = C_SIZE_LF; break; }   /* a bare LF: handled there */
            return fail(err, 400, "malformed chunk size");
        }
        case C_SIZE_WS:
            if (ch == ' ' || ch == '\t') { i++; break; }
            if (ch == ';') { c->state = C_EXT; c->line = 0; i++; break; }
            if (ch == '\r') { c->state = C_SIZE_LF; i++; break; }
            if (ch == '\n') { c->state = C_SIZE_LF; break; }
            return fail(err, 400, "malformed chunk size line");
        case C_EXT:
            if (ch == '\r') { c->state = C_SIZE_LF; i++; break; }
            if (ch == '\n') { c->state = C_SIZE_LF; break; }
            if (((unsigned char)ch < 0x20 && ch != '\t') || ch == 0x7F) return fail(err, 400, "control character in a chunk extension");
            if (++c->line > max_head) return fail(err, 431, "chunk extension too long");
            i++;
            break;
        case C_SIZE_LF:
            if (ch != '\n') return fail(err, 400, "chunk size line not ended by LF");
            i++;
            if (c->size == 0) { c->state = C_TRAILER_BOL; break; }
            if (c->size > max_body || out->len > max_body - c->size)
                return fail(err, 413, "request body larger than %zu bytes", max_body);
            c->state = C_DATA;
            break;
        case C_DATA: {
            size_t take = n - i < c->size ? n - i : (size_t)c->size;
            buf_put(out, in + i, take);
            if (!buf_ok(out)) return fail(err, 413, "out of memory for the request body");
            i += take;
            c->size -= take;
            if (c->size == 0) c->state = C_DATA_CR;
            break;
        }
        case C_DATA_CR:
            if (ch == '\r') { c->state = C_DATA_LF; i++; break; }
            if (ch == '\n') { c->state = C_DATA_LF; break; }
            return fail(err, 400, "chunk data not followed by CRLF");
        case C_DATA_LF:
            if (ch != '\n') return fail(err, 400, "chunk data not followed by CRLF");
            i++;
            c->state = C_SIZE; c->size = 0; c->digits = 0;
            break;
        case C_TRAILER_BOL:
            if (ch == '\r') { c->state = C_END_LF; i++; break; }
            if (ch == '\n') { c->state = C_END_LF; break; }
            c->state = C_TRAILER;
            break;
        case C_TRAILER:
            if (++c->trailers > max_head) return fail(err, 431, "trailers larger than %zu bytes", max_head);
            if (ch == '\r') { c->state = C_TRAILER_LF; i++; break; }
            if (ch == '\n') { c->state = C_TRAILER_LF; break; }
            if (((unsigned char)ch < 0x20 && ch != '\t') || ch == 0x7F) return fail(err, 400, "control character in a trailer");
            i++;
            break;
        case C_TRAILER_LF:
            if (ch != '\n') return fail(err, 400, "bare CR in a trailer");
            i++;
            c->state = C_TRAILER_BOL;
            break;
        case C_END_LF:
            if (ch != '\n') return fail(err, 400, "chunked body not ended by CRLF");
            i++;
            c->state = C_DONE;
            break;
        }
    }
    *used = i;
    return c->state == C_DONE ? 1 : 0;
}

const char *http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}
