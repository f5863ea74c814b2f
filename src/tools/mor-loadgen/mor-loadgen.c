/* mor-loadgen - serving throughput and latency, through mor-server's HTTP
 * API or with the engine driven directly, for docs/SERVING.md.
 *
 *   mor-loadgen --server "ARGS" -m MODEL [--conc 8] [--requests 2] [--gen 32] [--prompt 4]
 *   mor-loadgen --url http://127.0.0.1:8080 [...]
 *   mor-loadgen --direct -m MODEL [--mode depthwise] [--slots N] [--ctx N] [--batch N]
 *               [--threads 2] [--threshold V,V,V] [...]
 *
 * Closed loop: --conc clients each send --requests requests one after the
 * other (the next when the previous has answered). Request g (client c's
 * k-th, g = c * requests + k) is --prompt pseudo-random token ids (the same
 * formula as mor-bench --serve), greedy, --gen tokens. --server starts
 * bin/mor-server (beside this program) with -m MODEL, --port 0 and ARGS,
 * measures, then stops it with SIGTERM; --url uses a running server;
 * --direct runs the same closed loop in this process on one mor_server
 * (public API), the engine without HTTP: a client's next request is
 * submitted at the step after its previous one finished. Prints one line:
 *
 *   conc 8 requests 16 tokens 512 wall 1.234 tok/s 414.9 p50 0.480 p99 0.611 depth 1.972 errors 0
 *   outputs 5a1f... cpu 2.31 client_cpu 0.05
 *
 * cpu: user + system CPU seconds of the engine (--direct: this process;
 * --server: the server, counted once it has exited); client_cpu: this
 * process's with --server / --url (the clients). On a busy machine tokens
 * per CPU second are less disturbed than tokens per wall second.
 * "outputs" hashes every request's tokens (order-independent), so that the
 * three ways can be checked to have generated the same tokens. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "mor.h"
#include "cli.h"

typedef struct {
    const char *url, *server_args, *model;
    int direct, conc, requests, gen, prompt, mode, slots, ctx, batch, threads, n_thr;
    float thr[16];
} options;

typedef struct {
    double   latency;
    int32_t  tokens, depth_sum;
    uint64_t hash;
    int      ok;
} result;

static options O;
static result *R;
static char host[256] = "127.0.0.1", port[16] = "8080";
static int32_t n_vocab = 49152;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Request g's prompt, as bench_serve.h's bs_prompt. */
static void prompt_of(int g, mor_token *out)
{
    for (int t = 0; t < O.prompt; t++) out[t] = (mor_token)(((long)g * 7919 + (long)t * 104729 + 11) % n_vocab);
}

static uint64_t hash_tokens(int g, const int32_t *tok, int n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)g;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)tok[i]) * 1099511628211ull;
    return h;
}

/* ---- HTTP ----------------------------------------------------------------- */

static int dial(void)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res)) return -1;
    int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen)) { close(fd); fd = -1; }
    freeaddrinfo(res);
    if (fd >= 0) { int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); }
    return fd;
}

/* The integers of the JSON array after `key` in s, into out (up to cap). */
static int int_array(const char *s, const char *key, int32_t *out, int cap)
{
    const char *p = strstr(s, key);
    if (!p || !(p = strchr(p, '['))) return -1;
    int n = 0;
    for (p++; *p && *p != ']';) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return -1;
        if (n < cap) out[n] = (int32_t)v;
        n++;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return n;
}

/* One request on a keep-alive connection (*fd, redialed when needed). */
static int http_one(int *fd, int g, result *r)
{
    char body[2048], req[2600];
    mor_token pr[256];
    prompt_of(g, pr);
    int n = snprintf(body, sizeof body, "{\"prompt\":[");
    for (int t = 0; t < O.prompt; t++) n += snprintf(body + n, sizeof body - (size_t)n, t ? ",%d" : "%d", pr[t]);
    n += snprintf(body + n, sizeof body - (size_t)n, "],\"max_tokens\":%d,\"temperature\":0,\"seed\":%d}", O.gen, g);
    int rn = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\n\r\n%s", host, n, body);
    for (int attempt = 0; attempt < 2; attempt++) {
        if (*fd < 0 && (*fd = dial()) < 0) return -1;
        if (send(*fd, req, (size_t)rn, MSG_NOSIGNAL) != rn) { close(*fd); *fd = -1; continue; }
        static __thread char *buf;
        static __thread size_t cap;
        size_t len = 0, need = 0;
        for (;;) {
            if (len + 65536 > cap) { cap = cap ? cap * 2 : 1 << 20; buf = realloc(buf, cap); if (!buf) return -1; }
            ssize_t k = recv(*fd, buf + len, cap - len - 1, 0);
            if (k <= 0) break;
            len += (size_t)k;
            buf[len] = 0;
            char *e = strstr(buf, "\r\n\r\n");
            if (e && !need) {
                char *cl = strstr(buf, "Content-Length: ");
                if (!cl || cl > e) return -1;
                need = (size_t)(e + 4 - buf) + (size_t)atol(cl + 16);
            }
            if (need && len >= need) break;
        }
        if (!need || len < need) { close(*fd); *fd = -1; if (len == 0) continue; return -1; }
        if (strncmp(buf, "HTTP/1.1 200", 12)) { fprintf(stderr, "mor-loadgen: %.200s\n", buf); return -1; }
        int32_t tok[8192], dep[8192];
        int nt = int_array(buf, "\"token_ids\"", tok, 8192), nd = int_array(buf, "\"depths\"", dep, 8192);
        if (nt < 0 || nd != nt || nt > 8192) return -1;
        r->tokens = nt;
        for (int i = 0; i < nd; i++) r->depth_sum += dep[i];
        r->hash = hash_tokens(g, tok, nt);
        return 0;
    }
    return -1;
}

static void *client(void *arg)
{
    int c = (int)(intptr_t)arg, fd = -1;
    for (int k = 0; k < O.requests; k++) {
        int g = c * O.requests + k;
        double t0 = now_s();
        R[g].ok = http_one(&fd, g, &R[g]) == 0;
        R[g].latency = now_s() - t0;
    }
    if (fd >= 0) close(fd);
    return NULL;
}

static int run_http(double *wall)
{
    pthread_t *th = calloc((size_t)O.conc, sizeof *th);
    if (!th) return -1;
    double t0 = now_s();
    for (int c = 0; c < O.conc; c++) pthread_create(&th[c], NULL, client, (void *)(intptr_t)c);
    for (int c = 0; c < O.conc; c++) pthread_join(th[c], NULL);
    *wall = now_s() - t0;
    free(th);
    return 0;
}

/* Start bin/mor-server (beside argv0) with -m MODEL --port 0 ARGS; its pid. */
static pid_t spawn_server(const char *argv0)
{
    char path[4096];
    const char *slash = strrchr(argv0, '/');
    snprintf(path, sizeof path, "%.*smor-server", slash ? (int)(slash - argv0 + 1) : 0, argv0);
    char *args[64];
    int na = 0;
    args[na++] = path;
    args[na++] = "-m"; args[na++] = (char *)O.model;
    args[na++] = "--host"; args[na++] = "127.0.0.1";
    args[na++] = "--port"; args[na++] = "0";
    args[na++] = "-q";
    char *copy = strdup(O.server_args);
    for (char *tok = strtok(copy, " "); tok && na < 62; tok = strtok(NULL, " ")) args[na++] = tok;
    args[na] = NULL;
    int p[2];
    if (pipe(p)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execv(path, args);
        _exit(127);
    }
    close(p[1]);
    char line[256];
    size_t n = 0;
    while (n + 1 < sizeof line && read(p[0], line + n, 1) == 1 && line[n] != '\n') n++;
    line[n] = 0;
    close(p[0]);
    free(copy);
    const char *colon = strrchr(line, ':');
    if (pid < 0 || strncmp(line, "listening on ", 13) || !colon) {
        fprintf(stderr, "mor-loadgen: %s did not start\n", path);
        if (pid > 0) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); }
        return -1;
    }
    snprintf(port, sizeof port, "%s", colon + 1);
    return pid;
}

/* ---- the engine directly ----------------------------------------------------- */

static int run_direct(double *wall)
{
    mor_model *m = NULL;
    if (mor_model_load_file(O.model, NULL, &m)) { fprintf(stderr, "mor-loadgen: %s\n", mor_last_error()); return -1; }
    mor_server_params p;
    MOR_SERVER_PARAMS_INIT(&p);
    p.mode = O.mode;
    p.n_slots = (uint32_t)(O.slots ? O.slots : O.conc);
    p.n_ctx = (uint32_t)(O.ctx ? O.ctx : 0);
    p.n_batch = (uint32_t)O.batch;
    p.n_threads = O.threads;
    mor_server *s = NULL;
    mor_status st = mor_server_create(m, &p, &s);
    for (int i = 0; !st && i < O.n_thr; i++) st = mor_router_set_threshold(mor_server_router(s), i, O.thr[i]);
    if (st) { fprintf(stderr, "mor-loadgen: %s\n", mor_last_error()); mor_server_free(s); mor_model_free(m); return -1; }
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);
    sp.temperature = 0;
    mor_token stop = mor_model_token_eos(m), pr[256];
    int n_stop = stop >= 0;
    int *done = calloc((size_t)O.conc, sizeof *done), *cur = calloc((size_t)O.conc, sizeof *cur);
    double *t_sub = calloc((size_t)O.conc, sizeof *t_sub);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)O.gen), *dep = malloc(sizeof(int32_t) * (size_t)O.gen);
    int ok = done && cur && t_sub && tok && dep, left = O.conc * O.requests;
    double t0 = now_s();
    for (int c = 0; ok && c < O.conc; c++) {
        int g = c * O.requests;
        prompt_of(g, pr);
        sp.seed = (uint64_t)g;
        ok = !mor_server_submit(s, pr, O.prompt, &sp, O.gen, &stop, n_stop, &cur[c]);
        t_sub[c] = now_s();
    }
    while (ok && left) {
        if (mor_server_step(s, NULL)) { fprintf(stderr, "mor-loadgen: %s\n", mor_last_error()); ok = 0; break; }
        for (int c = 0; c < O.conc; c++) {
            if (done[c] == O.requests || mor_server_request_state(s, cur[c]) != MOR_REQ_DONE) continue;
            int g = c * O.requests + done[c];
            int32_t n = 0;
            mor_server_get_tokens(s, cur[c], tok, dep, O.gen, &n);
            mor_server_release(s, cur[c]);
            R[g].latency = now_s() - t_sub[c];
            R[g].tokens = n;
            for (int i = 0; i < n; i++) R[g].depth_sum += dep[i];
            R[g].hash = hash_tokens(g, tok, n);
            R[g].ok = 1;
            left--;
            if (++done[c] < O.requests) {
                prompt_of(g + 1, pr);
                sp.seed = (uint64_t)(g + 1);
                ok = !mor_server_submit(s, pr, O.prompt, &sp, O.gen, &stop, n_stop, &cur[c]);
                t_sub[c] = now_s();
            }
        }
    }
    *wall = now_s() - t0;
    free(done); free(cur); free(t_sub); free(tok); free(dep);
    mor_server_free(s);
    mor_model_free(m);
    return ok ? 0 : -1;
}

static double cpu_of(int who)
{
    struct rusage u;
    getrusage(who, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void)
{
    printf("usage: mor-loadgen (--server \"ARGS\" -m MODEL | --url URL | --direct -m MODEL) [options]\n"
           "  --conc N         clients (default 8)        --requests N  per client (default 2)\n"
           "  --gen N          tokens per request (32)    --prompt N    prompt tokens (4)\n"
           "  --vocab N        prompt ids below N (default: the model's, else 49152)\n"
           "--direct only (the engine as `mor-server` would run it):\n"
           "  --mode depthwise|sequence|serial  --slots N (default --conc)  --ctx N  --batch N (512)\n"
           "  --threads N (1)  --threshold V[,V...]\n");
}

int main(int argc, char **argv)
{
    static const char *const modes[] = { "serial", "sequence", "depthwise", NULL };
    cli_init("mor-loadgen");
    O.conc = 8; O.requests = 2; O.gen = 32; O.prompt = 4; O.mode = MOR_SERVE_DEPTHWISE; O.batch = 512; O.threads = 1;
    int vocab = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (!strcmp(a, "--direct")) { O.direct = 1; continue; }
        const char *v = cli_value(argc, argv, &i);
        if (!strcmp(a, "--url")) O.url = v;
        else if (!strcmp(a, "--server")) O.server_args = v;
        else if (!strcmp(a, "-m")) O.model = v;
        else if (!strcmp(a, "--conc")) O.conc = (int)cli_int(a, v, 1, 4096);
        else if (!strcmp(a, "--requests")) O.requests = (int)cli_int(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--gen")) O.gen = (int)cli_int(a, v, 1, 8192);
        else if (!strcmp(a, "--prompt")) O.prompt = (int)cli_int(a, v, 1, 256);
        else if (!strcmp(a, "--vocab")) vocab = (int)cli_int(a, v, 1, 1 << 24);
        else if (!strcmp(a, "--mode")) O.mode = cli_choice(a, v, modes);
        else if (!strcmp(a, "--slots")) O.slots = (int)cli_int(a, v, 1, 4096);
        else if (!strcmp(a, "--ctx")) O.ctx = (int)cli_int(a, v, 1, 1 << 24);
        else if (!strcmp(a, "--batch")) O.batch = (int)cli_int(a, v, 1, 1 << 16);
        else if (!strcmp(a, "--threads")) O.threads = (int)cli_int(a, v, 1, 1024);
        else if (!strcmp(a, "--threshold")) O.n_thr = cli_float_list(a, v, O.thr, 16, 0, 1);
        else cli_usage_error("unknown option '%s'", a);
    }
    if ((O.url != NULL) + (O.server_args != NULL) + O.direct != 1) cli_usage_error("give one of --server, --url, --direct");
    if ((O.direct || O.server_args) && !O.model) cli_usage_error("--direct and --server need -m MODEL");
    signal(SIGPIPE, SIG_IGN);
    if (O.model) {   /* the vocabulary size, for the prompts */
        mor_model_params mp;
        MOR_MODEL_PARAMS_INIT(&mp);
        mp.flags = MOR_MODEL_VOCAB_ONLY;
        mor_model *m = NULL;
        if (mor_model_load_file(O.model, &mp, &m) == MOR_OK) n_vocab = mor_model_n_vocab(m);
        mor_model_free(m);
    }
    if (vocab) n_vocab = vocab;
    if (O.url) {
        const char *h = strstr(O.url, "://");
        h = h ? h + 3 : O.url;
        const char *c = strchr(h, ':'), *sl = strchr(h, '/');
        size_t hl = c ? (size_t)(c - h) : sl ? (size_t)(sl - h) : strlen(h);
        snprintf(host, sizeof host, "%.*s", (int)hl, h);
        if (c) snprintf(port, sizeof port, "%.*s", (int)strcspn(c + 1, "/"), c + 1);
    }
    int total = O.conc * O.requests;
    R = calloc((size_t)total, sizeof *R);
    if (!R) return 1;
    double wall = 0, cpu = 0, client_cpu = 0;
    int rc;
    if (O.direct) {
        double c0 = cpu_of(RUSAGE_SELF);
        rc = run_direct(&wall);
        cpu = cpu_of(RUSAGE_SELF) - c0;
    } else {
        pid_t pid = O.server_args ? spawn_server(argv[0]) : 0;
        if (pid < 0) return 1;
        double c0 = cpu_of(RUSAGE_SELF);
        rc = run_http(&wall);
        client_cpu = cpu_of(RUSAGE_SELF) - c0;
        if (pid > 0) { kill(pid, SIGTERM); waitpid(pid, NULL, 0); }
        cpu = cpu_of(RUSAGE_CHILDREN);   /* the server's whole life: loading, serving, draining */
    }
    long tokens = 0, dsum = 0;
    int errors = 0, n_ok = 0;
    uint64_t h = 0;
    double *lat = malloc(sizeof(double) * (size_t)total);
    for (int g = 0; g < total; g++) {
        if (!R[g].ok) { errors++; continue; }
        lat[n_ok++] = R[g].latency;
        tokens += R[g].tokens;
        dsum += R[g].depth_sum;
        h ^= R[g].hash;
    }
    qsort(lat, (size_t)n_ok, sizeof *lat, cmp_d);
    double p50 = n_ok ? lat[n_ok / 2] : 0, p99 = n_ok ? lat[(int)((n_ok - 1) * 0.99 + 0.5)] : 0;
    printf("conc %d requests %d tokens %ld wall %.3f tok/s %.1f p50 %.3f p99 %.3f depth %.3f errors %d outputs %016llx "
           "cpu %.3f client_cpu %.3f\n", O.conc, total, tokens, wall, (double)tokens / wall, p50, p99,
           tokens ? (double)dsum / (double)tokens : 0.0, errors, (unsigned long long)h, cpu, client_cpu);
    free(lat);
    free(R);
    return rc || errors ? 1 : 0;
}
