/* status.h - setting the per-thread error message that mor_last_error() returns. */
#ifndef MOR_STATUS_H
#define MOR_STATUS_H
#include "mor.h"

#if defined(__GNUC__)
#  define MOR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define MOR_PRINTF(a, b)
#endif

/* Record a message for mor_last_error() in this thread and return s, so that
 * callers can write `return err_set(MOR_E_FORMAT, "bad %s", what);`. */
mor_status err_set(mor_status s, const char *fmt, ...) MOR_PRINTF(2, 3);
/* Copy src into dst (cap bytes, NUL-terminated, truncated at a whole
 * character) with control characters and DEL as \xNN: for messages that
 * quote a model file's strings. err_set and the log apply it. */
void text_escape_controls(char *dst, size_t cap, const char *src);
/* Forget the last message (called on entry of public functions that succeed). */
void err_clear(void);

/* Internal logging through the user's callback; no output without one. */
void log_emit(int32_t level, const char *fmt, ...) MOR_PRINTF(2, 3);

#endif
