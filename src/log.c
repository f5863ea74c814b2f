/* log.c - the log callback: the only global mutable state of libmor. */
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include "status.h"

/* A mutex guards the three fields so that a reader never sees a torn mix;
 * the callback itself runs outside the lock so that it may call libmor. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static mor_log_fn log_fn;
static void *log_ud;
static int32_t log_max_level;

void mor_log_set(mor_log_fn fn, void *user_data, int32_t max_level)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn; log_ud = user_data; log_max_level = max_level;
    pthread_mutex_unlock(&log_lock);
}

void log_emit(int32_t level, const char *fmt, ...)
{
    pthread_mutex_lock(&log_lock);
    mor_log_fn fn = log_fn; void *ud = log_ud; int32_t max = log_max_level;
    pthread_mutex_unlock(&log_lock);
    if (!fn || level > max) return;
    char raw[1024], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    text_escape_controls(msg, sizeof msg, raw);
    fn(level, msg, ud);
}
