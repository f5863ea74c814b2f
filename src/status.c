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

mor_status err_set(mor_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    log_emit(MOR_LOG_DEBUG, "%s: %s", mor_status_str(s), last_error);
    return s;
}
