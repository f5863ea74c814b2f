/* mor-server - an OpenAI-compatible HTTP server over libmor's continuous
 * depth-wise batching engine (mor_server_*).
 *
 *   mor-server -m MODEL.gguf [--host 127.0.0.1] [--port 8080] [--slots 8]
 *              [--mode depthwise|sequence|serial] [--threads N] [--ctx N] ...
 *
 * Run with --help for every option; docs/SERVING.md for the API, the
 * measurements and running several servers behind nginx. Threads: this one
 * accepts connections; each connection has a thread of its own (conn.c);
 * one engine thread owns the mor_server (engine.c). SIGINT or SIGTERM
 * drains: the listening socket closes, idle connections close, requests in
 * progress finish (new ones get 503), then the process exits 0; a second
 * signal, or --drain-timeout, cuts the requests still running. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "chat.h"
#include "cli.h"
#include "server.h"
#include "template.h"

server S;
static int sig_pipe[2] = { -1, -1 };

static void usage(FILE *f)
{
    fprintf(f,
        "usage: mor-server -m MODEL.gguf [options]\n"
        "  -m, --model FILE        the model (GGUF, architecture mor)\n"
        "  --host ADDR             address to listen on (default 127.0.0.1)\n"
        "  --port N                port (default 8080; 0: any free port, printed at start)\n"
        "  -a, --alias NAME        the model's id in the API (default: general.name, else the file name);\n"
        "                          requests may name any model, as with llama-server\n"
        "  --reject-unknown-model  a request whose \"model\" is not the alias gets 404 (OpenAI's way)\n"
        "  --slots, -np, --parallel N  requests generating at once (default 8)\n"
        "  --mode MODE             depthwise | sequence | serial (default depthwise)\n"
        "  --threads N             worker threads of the engine (default 1)\n"
        "  --ctx, -c, --ctx-size N KV cells shared by the running requests (default: slots x the\n"
        "                          training context, at most 16384); a request's prompt + max_tokens\n"
        "                          must fit min(this, the training context), its context\n"
        "  --context-shift         a request may be longer than its context (llama-server's): a longer\n"
        "                          prompt keeps its first n_keep tokens and its end, and a full context\n"
        "                          keeps n_keep tokens, drops half of the rest and generation goes on\n"
        "                          (default off: such requests get 400, /completion stops when full)\n"
        "  --no-context-shift      the default\n"
        "  --batch, -b, --batch-size N  rows per engine step (default 512)\n"
        "  --kv recursion|shared   KV caching across recursions (default: the model's)\n"
        "  --threshold V[,V...]    THRESHOLD routing thresholds per recursion (default: the model's)\n"
        "  --max-depth N           cap every token's recursions at N\n"
        "  --exit MODE:T           early exits on top of the routing (depthwise mode): learned:Q\n"
        "                          (Ouro's exit gate: a token stops once the CDF of its exit\n"
        "                          distribution reaches Q), margin:T or saturation:T (confidence of\n"
        "                          the exit logits, any model); default none\n"
        "  --chat-template NAME    a built-in chat format instead of the model's template:\n"
        "                          %s\n"
        "  --chat-template-file F  a Jinja chat template instead of the model's\n"
        "  --no-jinja              render the model's template by its family's built-in format\n"
        "                          (default: the template itself, as llama-server's --jinja)\n"
        "  --api-key KEY           require \"Authorization: Bearer KEY\" (not for GET /health)\n"
        "  --cors-origins O        origins whose pages may call the API from a browser: * (default),\n"
        "                          localhost, none, or a comma-separated list of origins\n"
        "  --cors-credentials      let those pages send cookies and HTTP authentication\n"
        "  --max-body BYTES        largest request body (default 1048576)\n"
        "  --max-header BYTES      largest request head (default 16384)\n"
        "  --max-conns N           open connections at most (default 256); when all are open, the\n"
        "                          oldest without a whole request (idle, or slow to send one) is\n"
        "                          closed for a new one; if every one holds a request: 503\n"
        "  --max-conns-per-client N  open connections from one address at most (default: half of\n"
        "                          --max-conns; 0: no cap); at it, the same within the address\n"
        "  --max-queue N           requests waiting for a slot at most (default 256; more get 503)\n"
        "  --timeout S             seconds an idle keep-alive connection waits for a request, and\n"
        "                          a request's head, then its body, may take in all (default 30)\n"
        "  --drain-timeout S       on SIGINT/SIGTERM, wait this long for running requests (default 30)\n"
        "  --no-check-tensors      do not check every weight for NaN and infinity at load (the\n"
        "                          norms and routers always are)\n"
        "  --no-prompt-reuse       a request never takes the K/V a finished one left in its slot\n"
        "  --fast-bf16             BF16 weights on bfloat16-rounded activations (MOR_SERVE_FAST_BF16: faster\n"
        "                          on CPUs with AVX512_BF16 and no AMX; logits move ~1e-2)\n"
        "  --speculate N           self-speculative decoding: each step of a request drafts N tokens\n"
        "                          with fewer recursions and verifies them in one pass (the same\n"
        "                          tokens; default 0: off); a request's \"speculate\" overrides it\n"
        "  --speculate-depth D     the drafts' recursions (default 1; \"speculate_depth\")\n"
        "                          (by default a prompt reuses the longest cached prefix: the same\n"
        "                          tokens, less to decode; usage.prompt_tokens_details.cached_tokens)\n"
        "  -q, --quiet             no line per request on stderr\n"
        "  --test-hooks            for tests: accept the request field \"test_hold\": true, which\n"
        "                          parks the engine after the request's first token (nothing steps\n"
        "                          while no other request needs a step for its first token) until\n"
        "                          its client goes away or a drain starts\n", chat_names());
}

static int parse_args(int argc, char **argv, options *o)
{
    static const char *const modes[] = { "serial", "sequence", "depthwise", NULL };   /* MOR_SERVE_* order */
    static const char *const kvs[] = { "recursion", "shared", NULL };
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->n_slots = 8;
    o->mode = MOR_SERVE_DEPTHWISE;
    o->n_threads = 1;
    o->n_batch = 512;
    o->speculate_depth = 1;
    o->max_body = 1 << 20;
    o->max_header = 16384;
    o->max_conns = 256;
    o->max_conns_per_client = -1;   /* half of max_conns, once that is known */
    o->max_queue = 256;
    o->timeout_s = 30;
    o->drain_timeout_s = 30;
    o->cors_origins = "*";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        if (!strcmp(a, "--no-check-tensors")) { o->no_check_tensors = 1; continue; }
        if (!strcmp(a, "--test-hooks")) { o->test_hooks = 1; continue; }
        if (!strcmp(a, "--no-prompt-reuse")) { o->no_prompt_reuse = 1; continue; }
        if (!strcmp(a, "--fast-bf16")) { o->fast_bf16 = 1; continue; }
        if (!strcmp(a, "--context-shift")) { o->context_shift = 1; continue; }
        if (!strcmp(a, "--no-context-shift")) { o->context_shift = 0; continue; }   /* llama-server's; the default */
        if (!strcmp(a, "--cors-credentials")) { o->cors_credentials = 1; continue; }
        if (!strcmp(a, "--reject-unknown-model")) { o->reject_unknown_model = 1; continue; }
        if (!strcmp(a, "--jinja")) { o->no_jinja = 0; continue; }   /* llama-server's; the default here */
        if (!strcmp(a, "--no-jinja")) { o->no_jinja = 1; continue; }
        if (a[0] != '-') cli_usage_error("unexpected argument '%s'", a);
        const char *v = cli_value(argc, argv, &i);
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model_path = v;
        else if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--port")) o->port = (int32_t)cli_int(a, v, 0, 65535);
        else if (!strcmp(a, "-a") || !strcmp(a, "--alias")) o->alias = v;
        else if (!strcmp(a, "--slots") || !strcmp(a, "-np") || !strcmp(a, "--parallel"))
            o->n_slots = (int32_t)cli_int(a, v, 1, 4096);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) o->n_threads = (int32_t)cli_int(a, v, 1, 1024);
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            o->n_ctx = (int32_t)cli_int(a, v, 1, 1 << 24);
        else if (!strcmp(a, "--batch") || !strcmp(a, "-b") || !strcmp(a, "--batch-size"))
            o->n_batch = (int32_t)cli_int(a, v, 1, 1 << 16);
        else if (!strcmp(a, "--cors-origins")) o->cors_origins = v;
        else if (!strcmp(a, "--chat-template-file")) o->chat_template_file = v;
        else if (!strcmp(a, "--max-depth")) o->max_depth = (int32_t)cli_int(a, v, 1, 64);
        else if (!strcmp(a, "--speculate")) o->speculate = (int32_t)cli_int(a, v, 0, 65535);
        else if (!strcmp(a, "--speculate-depth")) o->speculate_depth = (int32_t)cli_int(a, v, 1, 64);
        else if (!strcmp(a, "--max-body")) o->max_body = cli_int(a, v, 1, (long long)1 << 30);
        else if (!strcmp(a, "--max-header")) o->max_header = cli_int(a, v, 256, 1 << 20);
        else if (!strcmp(a, "--max-conns")) o->max_conns = (int32_t)cli_int(a, v, 1, 65536);
        else if (!strcmp(a, "--max-conns-per-client")) o->max_conns_per_client = (int32_t)cli_int(a, v, 0, 65536);
        else if (!strcmp(a, "--max-queue")) o->max_queue = (int32_t)cli_int(a, v, 0, 1 << 20);
        else if (!strcmp(a, "--timeout")) o->timeout_s = (int32_t)cli_int(a, v, 1, 86400);
        else if (!strcmp(a, "--drain-timeout")) o->drain_timeout_s = (int32_t)cli_int(a, v, 0, 86400);
        else if (!strcmp(a, "--api-key")) o->api_key = v;
        else if (!strcmp(a, "--mode")) o->mode = cli_choice(a, v, modes);
        else if (!strcmp(a, "--kv")) o->kv_mode = cli_choice(a, v, kvs) ? MOR_KV_SHARED : MOR_KV_RECURSION_WISE;
        else if (!strcmp(a, "--exit")) cli_exit(a, v, &o->exit_mode, &o->exit_threshold);
        else if (!strcmp(a, "--threshold")) o->n_thresholds = cli_float_list(a, v, o->thresholds, 16, 0, 1);
        else if (!strcmp(a, "--chat-template")) {
            if (chat_from_name(v) < 0) cli_usage_error("--chat-template: expected one of %s, got '%s'", chat_names(), v);
            o->chat_template = v;
        } else cli_usage_error("unknown option '%s'", a);
    }
    if (!o->model_path) cli_usage_error("give a model with -m FILE");
    if (o->max_conns_per_client < 0) o->max_conns_per_client = o->max_conns > 1 ? o->max_conns / 2 : 1;
    return 0;
}

static void on_signal(int sig)
{
    int saved = errno;
    char b = (char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) {}
    errno = saved;
}

static int listen_on(const char *host, int port, int *bound_port)
{
    struct addrinfo hints, *res = NULL;
    char ps[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc) { fprintf(stderr, "mor-server: --host %s: %s\n", host, gai_strerror(rc)); return -1; }
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 512)) {
            fprintf(stderr, "mor-server: cannot listen on %s:%d: %s\n", host, port, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        *bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                              : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    return fd;
}

/* The model's facts the endpoints need; the chat template. */
static int inspect_model(void)
{
    char tmp[4096];
    S.n_vocab = mor_model_n_vocab(S.model);
    S.n_ctx_train = mor_model_n_ctx_train(S.model);
    S.eos = mor_model_token_eos(S.model);
    S.add_bos = mor_model_meta_str(S.model, "tokenizer.ggml.add_bos_token", tmp, sizeof tmp, NULL) == MOR_OK &&
                !strcmp(tmp, "true");
    S.has_tokenizer = mor_model_meta_str(S.model, "tokenizer.ggml.model", tmp, sizeof tmp, NULL) == MOR_OK;
    if (S.o.alias) snprintf(S.model_id, sizeof S.model_id, "%s", S.o.alias);
    else if (mor_model_meta_str(S.model, "general.name", S.model_id, sizeof S.model_id, NULL) != MOR_OK || !S.model_id[0]) {
        const char *base = strrchr(S.o.model_path, '/');
        base = base ? base + 1 : S.o.model_path;
        snprintf(S.model_id, sizeof S.model_id, "%s", base);
        size_t n = strlen(S.model_id);
        if (n > 5 && !strcmp(S.model_id + n - 5, ".gguf")) S.model_id[n - 5] = 0;
    }
    char err[600];
    if (template_setup(err, sizeof err)) {
        fprintf(stderr, "mor-server: %s\n", err);
        return -1;
    }
    return 0;
}

/* Connections refused (--max-conns, --max-conns-per-client): kept for up to
 * a second while their request line comes. GET /health is answered as
 * always (a load balancer must see a busy server as alive, not down), any
 * other request gets 503; then each is closed once the client has read the
 * answer and closed too (or after a second), so that the answer is not lost
 * to a reset. Polled by the accept loop. */
enum { MAX_CLOSING = 64 };
static struct {
    int         fd, answered;
    double      until;
    size_t      n;
    char        line[24];   /* the start of the request line, enough to see "GET /health " */
    const char *why;
} closing[MAX_CLOSING];
static int n_closing;

static void send_busy(int fd, const char *why)
{
    char body[200], busy[512];
    int nb = snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"type\":\"server_busy\",\"param\":null,"
                      "\"code\":\"server_busy\"}}\n", why);
    int n = snprintf(busy, sizeof busy, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", nb, body);
    if (send(fd, busy, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {}
    count_request(EP_OTHER, 503);
}

static void send_health(int fd)
{
    buf b = { 0 }, out = { 0 };
    int status = health_json(&b);
    buf_puts(&b, "\n");
    buf_printf(&out, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
               "Content-Length: %zu\r\n\r\n", status, status == 200 ? "OK" : "Service Unavailable", b.len);
    buf_put(&out, b.p, b.len);
    if (buf_ok(&out) && send(fd, out.p, out.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {}
    count_request(EP_HEALTH, status);
    buf_free(&b);
    buf_free(&out);
}

static void refuse(int fd, const char *why)
{
    if (n_closing == MAX_CLOSING) { send_busy(fd, why); close(fd); return; }
    closing[n_closing].fd = fd;
    closing[n_closing].answered = 0;
    closing[n_closing].n = 0;
    closing[n_closing].why = why;
    closing[n_closing].until = engine_now() + 1.0;
    n_closing++;
}

/* A refused connection's answer, once its request line (or its end, or the
 * second) has come. */
static void answer_refused(int i)
{
    static const char health[] = "GET /health ";
    size_t k = sizeof health - 1;
    if (closing[i].n >= k && !memcmp(closing[i].line, health, k)) send_health(closing[i].fd);
    else send_busy(closing[i].fd, closing[i].why);
    shutdown(closing[i].fd, SHUT_WR);
    closing[i].answered = 1;
    closing[i].until = engine_now() + 1.0;
}

/* Read what refused clients send: the request line, then (answered) drop
 * the rest; close them at EOF or time. Backwards, so that moving the last
 * entry into a freed place never moves one not yet looked at (p[i] is
 * closing[i] as polled). */
static void reap_closing(const struct pollfd *p)
{
    double now = engine_now();
    for (int i = n_closing - 1; i >= 0; i--) {
        int ready = (p[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0, done = 0;
        if (!closing[i].answered) {
            ssize_t r = 0;
            size_t room = sizeof closing[i].line - closing[i].n;
            if (ready) r = recv(closing[i].fd, closing[i].line + closing[i].n, room, MSG_DONTWAIT);
            if (r > 0) closing[i].n += (size_t)r;
            if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) done = 1;
            else if ((ready && r == 0) || closing[i].n == sizeof closing[i].line ||
                     memchr(closing[i].line, '\n', closing[i].n) || now > closing[i].until)
                answer_refused(i);
        } else {
            char junk[4096];
            done = now > closing[i].until || (ready && recv(closing[i].fd, junk, sizeof junk, MSG_DONTWAIT) <= 0);
        }
        if (done) {
            close(closing[i].fd);
            closing[i] = closing[--n_closing];
        }
    }
}

/* Close c to make room for a new connection (under S.mu): its thread sees
 * the end of its input, answers a request it had begun with 408 and ends. */
static void evict(conn *c, int why)
{
    c->evicted = why;
    S.n_evicted++;
    shutdown(c->fd, SHUT_RD);
}

/* Under S.mu: may a connection from `host` be taken? NULL yes, else why
 * not. At a cap (the client's --max-conns-per-client, or the server's
 * --max-conns) the oldest connection there without a whole request in
 * hand (idle, or a slow head or body) is closed to make room, as nginx
 * does, so that slow clients can lock out neither others nor their own
 * address; only when every such connection holds a request is the new one
 * refused. */
static const char *admit(const char *host)
{
    int32_t mine = 0;
    conn *oldest = NULL, *oldest_mine = NULL;
    for (conn *c = S.conns; c; c = c->next) {
        if (c->evicted) continue;
        int same = !strcmp(c->host, host);
        mine += same;
        if (c->in_request) continue;
        if (!oldest || c->since <= oldest->since) oldest = c;
        if (same && (!oldest_mine || c->since <= oldest_mine->since)) oldest_mine = c;
    }
    if (S.o.max_conns_per_client && mine >= S.o.max_conns_per_client) {
        if (!oldest_mine) return "too many connections from this address, each with a request in progress "
                                 "(--max-conns-per-client)";
        evict(oldest_mine, EVICT_CLIENT_CAP);
        return NULL;
    }
    if (S.n_conns - S.n_evicted < S.o.max_conns) return NULL;
    if (!oldest) return "too many connections, each with a request in progress (--max-conns)";
    evict(oldest, EVICT_SERVER_CAP);
    return NULL;
}

/* Accept connections until a signal. */
static void accept_loop(int lfd)
{
    for (;;) {
        struct pollfd p[2 + MAX_CLOSING] = { { lfd, POLLIN, 0 }, { sig_pipe[0], POLLIN, 0 } };
        for (int i = 0; i < n_closing; i++) p[2 + i] = (struct pollfd){ closing[i].fd, POLLIN, 0 };
        if (poll(p, (nfds_t)(2 + n_closing), n_closing ? 200 : -1) < 0) { if (errno == EINTR) continue; break; }
        if (n_closing) reap_closing(p + 2);
        if (p[1].revents & POLLIN) {   /* the first signal: drain */
            char b;
            if (read(sig_pipe[0], &b, 1) < 0) {}
            break;
        }
        if (!(p[0].revents & POLLIN)) continue;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept(lfd, (struct sockaddr *)&ss, &sl);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) { struct timespec t = { 0, 50000000 }; nanosleep(&t, NULL); }
            continue;
        }
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);   /* tokens go out one by one */
        struct timeval tv = { S.o.timeout_s, 0 };
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);      /* a client that stops reading */
        char host[48] = "?", serv[8] = "";
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
        pthread_mutex_lock(&S.mu);
        const char *why = admit(host);
        pthread_mutex_unlock(&S.mu);
        if (why) { refuse(fd, why); continue; }
        conn *c = calloc(1, sizeof *c);
        if (!c) { close(fd); continue; }
        c->fd = fd;
        snprintf(c->host, sizeof c->host, "%s", host);
        snprintf(c->peer, sizeof c->peer, "%s:%s", host, serv);
        c->since = engine_now();
        pthread_mutex_lock(&S.mu);
        c->next = S.conns;
        if (S.conns) S.conns->prev = c;
        S.conns = c;
        S.n_conns++;
        pthread_mutex_unlock(&S.mu);
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 1 << 20);
        pthread_t th;
        if (pthread_create(&th, &at, conn_main, c)) {
            pthread_mutex_lock(&S.mu);
            S.conns = c->next;
            if (c->next) c->next->prev = NULL;
            S.n_conns--;
            pthread_mutex_unlock(&S.mu);
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&at);
    }
}

/* Wait until no connection is open, or the deadline, or (if sig) a signal. */
static int wait_conns(double deadline, int sig)
{
    for (;;) {
        pthread_mutex_lock(&S.mu);
        int n = S.n_conns;
        pthread_mutex_unlock(&S.mu);
        if (!n) return 1;
        double left = deadline - engine_now();
        if (left <= 0) return 0;
        struct pollfd p = { sig_pipe[0], POLLIN, 0 };
        if (poll(&p, sig ? 1 : 0, left < 0.05 ? (int)(left * 1000) + 1 : 50) > 0 && sig) {
            char b;
            if (read(sig_pipe[0], &b, 1) == 1) return 0;
        }
    }
}

int main(int argc, char **argv)
{
    cli_init("mor-server");
    parse_args(argc, argv, &S.o);
    signal(SIGPIPE, SIG_IGN);
    if (pipe(sig_pipe) || pipe(S.drain_pipe)) { perror("mor-server: pipe"); return 1; }
    for (int i = 0; i < 2; i++) {
        fcntl(sig_pipe[i], F_SETFL, O_NONBLOCK);
        fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC);
        fcntl(S.drain_pipe[i], F_SETFD, FD_CLOEXEC);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* room for many connections: each has a socket and its job a pipe */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
    pthread_mutex_init(&S.mu, NULL);
    pthread_cond_init(&S.cv, NULL);
    S.started = (int64_t)time(NULL);
    S.rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(engine_now() * 1e9);

    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    if (!S.o.no_check_tensors) mp.flags |= MOR_MODEL_CHECK_TENSORS;   /* a broken file fails here, not per request */
    mor_status st = mor_model_load_file(S.o.model_path, &mp, &S.model);
    if (st) {
        fprintf(stderr, "mor-server: loading %s: %s (%s)\n", S.o.model_path, mor_last_error(), mor_status_str(st));
        return 1;
    }
    if (inspect_model()) { mor_model_free(S.model); return 1; }
    if (S.o.speculate > S.o.n_batch - 1 || S.o.speculate_depth > mor_model_n_recursion(S.model)) {
        fprintf(stderr, "mor-server: --speculate %d / --speculate-depth %d: at most --batch - 1 (%d) drafts at a depth of "
                "at most the model's %d recursions\n", S.o.speculate, S.o.speculate_depth, S.o.n_batch - 1,
                mor_model_n_recursion(S.model));
        mor_model_free(S.model);
        return 1;
    }
    engine_params ep;
    memset(&ep, 0, sizeof ep);
    int64_t kv = S.o.n_ctx ? S.o.n_ctx : (int64_t)S.o.n_slots * S.n_ctx_train;
    if (!S.o.n_ctx && kv > 16384) kv = 16384 > S.n_ctx_train ? 16384 : S.n_ctx_train;
    S.ctx_limit = (int32_t)(kv < S.n_ctx_train ? kv : S.n_ctx_train);
    ep.n_slots = (uint32_t)S.o.n_slots;
    ep.n_ctx = (uint32_t)kv;
    ep.n_batch = (uint32_t)S.o.n_batch;
    ep.mode = S.o.mode;
    ep.n_threads = S.o.n_threads;
    ep.kv_mode = S.o.kv_mode;
    ep.max_depth = S.o.max_depth;
    memcpy(ep.thresholds, S.o.thresholds, sizeof ep.thresholds);
    ep.n_thresholds = S.o.n_thresholds;
    ep.exit_mode = S.o.exit_mode;
    ep.exit_threshold = S.o.exit_threshold;
    ep.no_prompt_reuse = S.o.no_prompt_reuse;
    ep.fast_bf16 = S.o.fast_bf16;
    ep.context_shift = S.o.context_shift;
    char err[256];
    S.eng = engine_start(S.model, &ep, err, sizeof err);
    if (!S.eng) { fprintf(stderr, "mor-server: %s\n", err); mor_model_free(S.model); return 1; }
    int port = 0;
    int lfd = listen_on(S.o.host, S.o.port, &port);
    if (lfd < 0) { engine_stop(S.eng); mor_model_free(S.model); return 1; }
    static const char *const modes[3] = { "serial", "sequence", "depthwise" };
    fprintf(stderr, "mor-server: %s (%s): %d slots, %s batching, %lld KV cells, context %d per request, "
            "chat %s; listening on http://%s:%d\n", S.model_id, S.o.model_path, S.o.n_slots, modes[S.o.mode],
            (long long)kv, S.ctx_limit, S.chat_family >= 0 ? chat_name(S.chat_family) : "off", S.o.host, port);
    printf("listening on %s:%d\n", S.o.host, port);
    fflush(stdout);

    accept_loop(lfd);

    /* drain */
    close(lfd);
    for (int i = 0; i < n_closing; i++) close(closing[i].fd);
    n_closing = 0;
    atomic_store(&S.draining, 1);
    engine_release_holds(S.eng);
    if (write(S.drain_pipe[1], "x", 1) < 0) {}
    fprintf(stderr, "mor-server: draining: no new connections; waiting for the requests in progress\n");
    int clean = wait_conns(engine_now() + S.o.drain_timeout_s, 1);
    if (!clean) {
        fprintf(stderr, "mor-server: cutting the requests still running\n");
        engine_quit(S.eng);
        if (!wait_conns(engine_now() + 5, 0)) {
            /* the last resort: connections blocked on a client */
            pthread_mutex_lock(&S.mu);
            for (conn *c = S.conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
            pthread_mutex_unlock(&S.mu);
            if (!wait_conns(engine_now() + 5, 0)) {
                fprintf(stderr, "mor-server: connections still open after the drain; exiting without cleanup\n");
                _exit(1);
            }
        }
    }
    engine_stats es;
    engine_get_stats(S.eng, &es);
    engine_stop(S.eng);
    embeddings_free();
    template_free();
    mor_model_free(S.model);
    fprintf(stderr, "mor-server: stopped%s; %llu requests finished, %llu tokens generated\n", clean ? "" : " (requests cut)",
            (unsigned long long)(es.requests[FINISH_LENGTH] + es.requests[FINISH_STOP]), (unsigned long long)es.gen_tokens);
    close(sig_pipe[0]); close(sig_pipe[1]); close(S.drain_pipe[0]); close(S.drain_pipe[1]);
    return 0;
}
