/* cors.c - see cors.h. */
#include "cors.h"

#include <string.h>

#include "server.h"

/* Is origin ("scheme://host[:port]") on this machine? */
static int is_localhost(const char *origin)
{
    const char *h = strstr(origin, "://");
    if (!h) return 0;
    h += 3;
    static const char *const names[] = { "localhost", "127.0.0.1", "[::1]" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        size_t k = strlen(names[i]);
        if (!strncmp(h, names[i], k) && (h[k] == 0 || h[k] == ':' || h[k] == '/')) return 1;
    }
    return 0;
}

/* Is origin one of the comma-separated list's entries? */
static int listed(const char *list, const char *origin)
{
    size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && t[-1] == ' ') t--;
        if ((size_t)(t - p) == n && n && !memcmp(p, origin, n)) return 1;
        p = e;
    }
    return 0;
}

/* The Access-Control-Allow-Origin value for origin: "*", the origin itself
 * (reflected: *vary set), or NULL for none. */
static const char *allowed(const char *origin, int *vary)
{
    const char *o = S.o.cors_origins;
    *vary = 0;
    if (!o || !strcmp(o, "none")) return NULL;
    if (!strcmp(o, "*") && !S.o.cors_credentials) return "*";
    if (!*origin) return NULL;
    *vary = 1;
    if (!strcmp(o, "*")) return origin;   /* credentials need the origin itself, not "*" */
    if (!strcmp(o, "localhost")) return is_localhost(origin) ? origin : NULL;
    return listed(o, origin) ? origin : NULL;
}

void cors_headers(const char *origin, buf *out)
{
    int vary;
    const char *a = allowed(origin, &vary);
    if (vary) buf_puts(out, "Vary: Origin\r\n");
    if (!a) return;
    buf_printf(out, "Access-Control-Allow-Origin: %s\r\n", a);
    if (S.o.cors_credentials) buf_puts(out, "Access-Control-Allow-Credentials: true\r\n");
}

void cors_preflight(const char *origin, const char *req_headers, buf *out)
{
    cors_headers(origin, out);
    buf_puts(out, "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n");
    /* the headers the browser asks for (Authorization, Content-Type, ...):
     * every request header is read the same, so any may be sent */
    buf_printf(out, "Access-Control-Allow-Headers: %s\r\nAccess-Control-Max-Age: 86400\r\n",
               req_headers && *req_headers ? req_headers : "Authorization, Content-Type");
}
