/* cors.h - cross-origin requests from browsers (CORS), as llama-server
 * answers them: --cors-origins "*" (the default: any page may call the API;
 * the API key, when set, still guards it), "localhost" (pages served from
 * this machine), a comma-separated list of origins, or "none";
 * --cors-credentials lets pages send cookies and HTTP authentication.
 * A preflight (OPTIONS) needs no API key: browsers send none. */
#ifndef MORSRV_CORS_H
#define MORSRV_CORS_H
#include "buf.h"

/* The header lines (each ending in CRLF) a response to a request with this
 * Origin ("" when it had none) carries. */
void cors_headers(const char *origin, buf *out);
/* The header lines of the answer to a preflight: cors_headers, the methods,
 * and the request headers the browser asked to send (its
 * Access-Control-Request-Headers, may be NULL). */
void cors_preflight(const char *origin, const char *req_headers, buf *out);

#endif
