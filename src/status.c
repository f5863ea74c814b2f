/* status.c - status names and the per-thread last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include "status.h"

/* Per-thread, like errno: a message belongs to the thread whose call failed. */
static _Thread_local char last_error[512];

const char *mor_status_str(mor_status s)
{
    switch (s) {
    case MOR_OK:                 return "MOR_OK";
    case MOR_E_INVALID_ARG:      return "MOR_E_INVALID_ARG";
    case MOR_E_NOMEM:            return "MOR_E_NOMEM";
    case MOR_E_IO:               return "MOR_E_IO";
    case MOR_E_FORMAT:           return "MOR_E_FORMAT";
    case MOR_E_UNSUPPORTED:      return "MOR_E_UNSUPPORTED";
    case MOR_E_KV_FULL:          return "MOR_E_KV_FULL";
    case MOR_E_ABORTED:          return "MOR_E_ABORTED";
    case MOR_E_ABI:              return "MOR_E_ABI";
    case MOR_E_OUT_OF_RANGE:     return "MOR_E_OUT_OF_RANGE";
    case MOR_E_POSITION:         return "MOR_E_POSITION";
    case MOR_E_BUFFER_TOO_SMALL: return "MOR_E_BUFFER_TOO_SMALL";
    case MOR_E_INTERNAL:         return "MOR_E_INTERNAL";
    }
    return "MOR_E_UNKNOWN";
}

const char *mor_last_error(void) { return last_error; }

void err_clear(void) { last_error[0] = 0; }

void text_escape_controls(char *dst, size_t cap, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;
    if (!cap) return;
    for (; *src && k + 1 < cap; src++) {
        unsigned char c = (unsigned char)*src;
        if (c >= 0x20 && c != 0x7f) { dst[k++] = (char)c; continue; }
        if (k + 5 > cap) break;   /* "\xNN" whole or not at all */
        dst[k++] = '\\'; dst[k++] = 'x'; dst[k++] = hex[c >> 4]; dst[k++] = hex[c & 15];
    }
    dst[k] = 0;
}

mor_status err_set(mor_status s, const char *fmt, ...)
{
    /* Messages quote names and texts from model files: their control
     * characters (a terminal escape, a newline) are escaped as \xNN. */
    char raw[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    text_escape_controls(last_error, sizeof last_error, raw);
    log_emit(MOR_LOG_DEBUG, "%s: %s", mor_status_str(s), last_error);
    return s;
}
