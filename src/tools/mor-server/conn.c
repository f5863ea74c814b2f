/* conn.c - one connection's thread: read requests (http.h), hand them to
 * the endpoints, write the responses. Keep-alive and pipelining follow
 * HTTP/1.1; every wait is bounded by --timeout, and a drain closes idle
 * connections at once and answers new requests with 503. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "cors.h"
#include "jsonw.h"
#include "server.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

void count_request(int ep, int status)
{
    int k = status < 400 ? 0 : status == 400 ? 1 : status == 404 ? 2 : status < 500 ? 3 : status == 503 ? 4 : 5;
    pthread_mutex_lock(&S.mu);
    S.http_count[ep][k]++;
    pthread_mutex_unlock(&S.mu);
}

int conn_send(conn *c, const void *p, size_t n)
{
    const char *s = p;
    while (n && !c->gone) {
        ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { c->gone = 1; break; }
        s += w;
        n -= (size_t)w;
    }
    return c->gone ? -1 : 0;
}

void conn_respond(conn *c, request *rq, int status, const char *ctype, const char *body, size_t n, const char *extra)
{
    buf h = { 0 };
    if (atomic_load(&S.draining)) rq->keep_alive = 0;
    buf_printf(&h, "HTTP/1.1 %d %s\r\nServer: mor-server/%s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
               "Connection: %s\r\n%s", status, http_reason(status), mor_version_string(), ctype, n,
               rq->keep_alive ? "keep-alive" : "close", extra ? extra : "");
    cors_headers(rq->origin, &h);
    buf_puts(&h, "\r\n");
    /* head and body in one send: a server killed between two sends would
     * leave a proxy with a head it cannot retry (nginx's next upstream) */
    if (strcmp(rq->method, "HEAD")) buf_put(&h, body, n);
    if (!buf_ok(&h)) c->gone = 1;
    else conn_send(c, h.p, h.len);
    buf_free(&h);
    count_request(endpoint_of(rq->path), status);
    if (!S.o.quiet)
        fprintf(stderr, "mor-server: %s \"%s %s\" %d %.3fs\n", c->peer, rq->method, rq->path, status,
                engine_now() - rq->t_start);
}

static const char *error_type(int status)
{
    return status == 401 ? "authentication_error" : status == 404 ? "not_found_error" :
           status == 503 ? "server_busy" : status >= 500 ? "server_error" : "invalid_request_error";
}

void conn_error(conn *c, request *rq, int status, const char *param, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    buf b = { 0 };
    jsonw w;
    jw_init(&w, &b);
    jw_obj(&w);
    jw_key(&w, "error");
    jw_obj(&w);
    jw_key(&w, "message"); jw_str(&w, msg);
    jw_key(&w, "type"); jw_str(&w, error_type(status));
    jw_key(&w, "param"); if (param && *param) jw_str(&w, param); else jw_null(&w);
    jw_key(&w, "code"); if (code) jw_str(&w, code); else jw_null(&w);
    jw_obj_end(&w);
    jw_obj_end(&w);
    buf_putc(&b, '\n');
    const char *extra = status == 503 ? "Retry-After: 1\r\n" : status == 405 ? "Allow: GET, POST\r\n" :
                        status == 401 ? "WWW-Authenticate: Bearer\r\n" : NULL;
    conn_respond(c, rq, status, "application/json", b.p ? b.p : "", b.len, extra);
    buf_free(&b);
}

int conn_wait(conn *c, job *j)
{
    for (;;) {
        struct pollfd p[2] = { { j->notify[0], POLLIN, 0 }, { c->fd, (short)(c->watch_in ? POLLIN : 0), 0 } };
        int r = poll(p, 2, -1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { c->gone = 1; return -1; }
        if (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)) { c->gone = 1; return -1; }
        if (p[1].revents & POLLIN) {
            char b;
            ssize_t k = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) { c->gone = 1; return -1; }
            if (k > 0) c->watch_in = 0;   /* the next request, pipelined: read it later */
        }
        if (p[0].revents) {
            char b[64];
            while (read(j->notify[0], b, sizeof b) > 0) {}
            return 0;
        }
    }
}

/* Receive more bytes by `deadline` (engine_now() seconds: a deadline for a
 * whole head or body, not per read, so that a client sending a byte now and
 * then cannot hold the connection). idle: between requests (a drain ends
 * the wait). 1 read, 0 the peer closed, -1 error or deadline, -2 drain. */
static int fill(conn *c, int idle, double deadline)
{
    if (!buf_reserve(&c->in, 16384)) return -1;
    for (;;) {
        struct pollfd p[2] = { { c->fd, POLLIN, 0 }, { S.drain_pipe[0], POLLIN, 0 } };
        double left = deadline - engine_now();
        if (left <= 0) return -1;
        int r = poll(p, idle ? 2 : 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        if (idle && (p[1].revents & POLLIN) && !(p[0].revents & POLLIN)) return -2;
        ssize_t k = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len - 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return 0;
        c->in.len += (size_t)k;
        c->in.p[c->in.len] = 0;
        return 1;
    }
}

static void reject(conn *c, request *rq, int status, const char *msg)
{
    rq->keep_alive = 0;
    conn_error(c, rq, status, NULL, NULL, "%s", msg);
}

/* fill() gave up (r, not 1) in the middle of a request: 408 when the time
 * ran out, or when the accept thread closed our input to make room for a
 * new connection (the client is told why); nothing when the peer closed. */
static void cut_short(conn *c, request *rq, int r, const char *timed_out)
{
    pthread_mutex_lock(&S.mu);
    int why = c->evicted;
    pthread_mutex_unlock(&S.mu);
    if (!rq->t_start) rq->t_start = engine_now();
    if (why == EVICT_CLIENT_CAP)
        reject(c, rq, 408, "closed to make room for a new connection from this address (--max-conns-per-client)");
    else if (why == EVICT_SERVER_CAP)
        reject(c, rq, 408, "closed to make room for a new connection (--max-conns)");
    else if (r == -1)
        reject(c, rq, 408, timed_out);
}

/* A header's value into out (cap bytes with its NUL), "" when it is
 * absent, too long, or holds other than printable ASCII: values copied
 * here may be reflected in a response header. */
static void header_copy(const http_request *h, const char *name, char *out, size_t cap)
{
    const http_span *v = http_header(h, name);
    out[0] = 0;
    if (!v || v->n >= cap) return;
    for (size_t i = 0; i < v->n; i++)
        if ((unsigned char)v->p[i] < 0x20 || (unsigned char)v->p[i] > 0x7e) return;
    memcpy(out, v->p, v->n);
    out[v->n] = 0;
}

/* A CORS preflight (OPTIONS): answered without the API key (browsers send
 * none with it) and without a body. */
static void preflight(conn *c, request *rq, const http_request *h)
{
    char asked[512];
    buf extra = { 0 };
    header_copy(h, "access-control-request-headers", asked, sizeof asked);
    cors_preflight(rq->origin, asked, &extra);
    buf_puts(&extra, "Allow: GET, POST, OPTIONS\r\n");
    conn_respond(c, rq, 204, "text/plain", "", 0, buf_ok(&extra) ? extra.p : NULL);
    buf_free(&extra);
}

/* Serve one request. 0 to go on with the next one, -1 to close. */
static int one_request(conn *c)
{
    request rq;
    memset(&rq, 0, sizeof rq);
    snprintf(rq.method, sizeof rq.method, "-");
    snprintf(rq.path, sizeof rq.path, "-");
    http_request h;
    http_error he;
    int head;
    /* an idle keep-alive connection waits --timeout for a first byte; then
     * the whole head has --timeout, and the body --timeout more */
    double deadline = engine_now() + S.o.timeout_s;
    if (c->in.len) rq.t_start = engine_now();   /* pipelined: the head began already */
    for (;;) {
        head = c->in.len ? http_parse_head(c->in.p, c->in.len, (size_t)S.o.max_header, &h, &he) : HTTP_NEED_MORE;
        if (head != HTTP_NEED_MORE) break;
        int idle = c->in.len == 0;
        int r = fill(c, idle, deadline);
        if (r == 1 && idle) deadline = (rq.t_start = engine_now()) + S.o.timeout_s;
        if (r == 1) continue;
        if (!idle) cut_short(c, &rq, r, "timed out reading the request");
        return -1;
    }
    if (!rq.t_start) rq.t_start = engine_now();
    if (head < 0) { reject(c, &rq, he.status, he.msg); return -1; }
    snprintf(rq.method, sizeof rq.method, "%.*s", (int)(h.method.n < 15 ? h.method.n : 15), h.method.p);
    snprintf(rq.path, sizeof rq.path, "%.*s", (int)(h.path.n < 255 ? h.path.n : 255), h.path.p);
    rq.minor = h.minor;
    rq.keep_alive = h.keep_alive;
    if (h.path.n > 255) { reject(c, &rq, 404, "no such endpoint"); return -1; }
    if (atomic_load(&S.draining)) { reject(c, &rq, 503, "the server is shutting down"); return -1; }
    header_copy(&h, "origin", rq.origin, sizeof rq.origin);
    if (http_span_eq(h.method, "OPTIONS") && !h.chunked && !(h.has_length && h.length)) {
        preflight(c, &rq, &h);
        buf_consume(&c->in, (size_t)head);
        return c->gone || !rq.keep_alive ? -1 : 0;
    }
    int auth_ok = 1;
    /* /health is public, as llama.cpp's server has it: load balancers and
     * orchestrators probe it without the key */
    if (S.o.api_key && strcmp(rq.path, "/health")) {
        const http_span *a = http_header(&h, "authorization");
        size_t kl = strlen(S.o.api_key);
        auth_ok = a && a->n == kl + 7 && !memcmp(a->p, "Bearer ", 7) && !memcmp(a->p + 7, S.o.api_key, kl);
    }
    int post = http_span_eq(h.method, "POST");
    if (post && !h.chunked && !h.has_length) { reject(c, &rq, 411, "a POST needs a Content-Length or a chunked body"); return -1; }
    if (h.has_length && h.length > (uint64_t)S.o.max_body) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body is larger than %lld bytes (--max-body)", (long long)S.o.max_body);
        reject(c, &rq, 413, msg);
        return -1;
    }
    /* the body: the head's spans are not used past this point */
    double body_deadline = engine_now() + S.o.timeout_s;
    buf body = { 0 };
    size_t used = (size_t)head;
    int sent_continue = 0;
    if (h.chunked) {
        http_chunked ch = { 0 };
        size_t at = (size_t)head;
        for (;;) {
            size_t k;
            int r = http_chunked_feed(&ch, c->in.p + at, c->in.len - at, &k, &body, (size_t)S.o.max_body,
                                      (size_t)S.o.max_header, &he);
            at += k;
            if (r < 0) { buf_free(&body); reject(c, &rq, he.status, he.msg); return -1; }
            if (r == 1) break;
            buf_consume(&c->in, at);   /* decoded: only the undecoded rest is kept */
            at = 0;
            if (h.expect_continue && !sent_continue++) conn_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
            int f = fill(c, 0, body_deadline);
            if (f != 1) {
                buf_free(&body);
                cut_short(c, &rq, f, "timed out reading the request body");
                return -1;
            }
        }
        used = at;
    } else if (h.has_length && h.length) {
        size_t need = (size_t)head + (size_t)h.length;
        if (c->in.len < need && h.expect_continue) conn_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        if (c->in.len < need && !buf_reserve(&c->in, need - c->in.len + 1)) {
            reject(c, &rq, 413, "out of memory for the body");
            return -1;
        }
        while (c->in.len < need) {
            int f = fill(c, 0, body_deadline);
            if (f != 1) {
                cut_short(c, &rq, f, "timed out reading the request body");
                return -1;
            }
        }
        buf_put(&body, c->in.p + head, (size_t)h.length);
        used = need;
    }
    buf_consume(&c->in, used);
    if (!buf_ok(&body)) { buf_free(&body); reject(c, &rq, 413, "out of memory for the body"); return -1; }
    pthread_mutex_lock(&S.mu);
    c->in_request = 1;   /* a whole request: no longer one the accept thread may close */
    pthread_mutex_unlock(&S.mu);
    c->watch_in = 1;
    if (!auth_ok) conn_error(c, &rq, 401, NULL, "invalid_api_key", "a valid API key is needed (Authorization: Bearer KEY)");
    else handle(c, &rq, body.p ? body.p : "", body.len);
    buf_free(&body);
    pthread_mutex_lock(&S.mu);
    c->in_request = 0;
    c->since = engine_now();
    int evicted = c->evicted;
    pthread_mutex_unlock(&S.mu);
    return c->gone || evicted || !rq.keep_alive ? -1 : 0;
}

void *conn_main(void *arg)
{
    conn *c = arg;
    while (!c->gone && one_request(c) == 0) {}
    /* a lingering close: read what the peer still sends (a body we refused)
     * for a moment, so that it gets our answer and not a reset */
    shutdown(c->fd, SHUT_WR);
    double until = engine_now() + 1.0;
    char junk[4096];
    for (;;) {
        struct pollfd p = { c->fd, POLLIN, 0 };
        double left = until - engine_now();
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) break;
        if (recv(c->fd, junk, sizeof junk, MSG_DONTWAIT) <= 0) break;
    }
    /* unregister, then close */
    pthread_mutex_lock(&S.mu);
    if (c->prev) c->prev->next = c->next;
    else S.conns = c->next;
    if (c->next) c->next->prev = c->prev;
    S.n_conns--;
    S.n_evicted -= c->evicted;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
    close(c->fd);
    buf_free(&c->in);
    buf_free(&c->out);
    free(c);
    return NULL;
}
