/* jsonw.h - a streaming JSON writer into a buf.
 *
 * Commas and nesting are tracked by the writer: call jw_key before each
 * value in an object, nothing between the values of an array. Strings are
 * escaped; bytes that are not valid UTF-8 become U+FFFD, so the output is
 * always valid JSON whatever the model's tokens decode to. Non-finite
 * numbers are written as null. Nesting deeper than JW_MAX_DEPTH sets
 * b->err. */
#ifndef MORSRV_JSONW_H
#define MORSRV_JSONW_H
#include <stddef.h>
#include <stdint.h>
#include "buf.h"

struct json;

#define JW_MAX_DEPTH 32

typedef struct {
    buf *b;
    int  depth;
    unsigned char first[JW_MAX_DEPTH];   /* no value written yet at this level */
    int  after_key;
} jsonw;

void jw_init(jsonw *w, buf *b);
void jw_obj(jsonw *w);
void jw_obj_end(jsonw *w);
void jw_arr(jsonw *w);
void jw_arr_end(jsonw *w);
void jw_key(jsonw *w, const char *key);
void jw_keyn(jsonw *w, const char *key, size_t n);   /* a key of n bytes (any, escaped) */
void jw_str(jsonw *w, const char *s);
void jw_strn(jsonw *w, const char *s, size_t n);
void jw_int(jsonw *w, int64_t v);
void jw_double(jsonw *w, double v);
void jw_double_exact(jsonw *w, double v);   /* "%.17g": reads back to the same double */
void jw_bool(jsonw *w, int v);
void jw_null(jsonw *w);

/* The escaped body of a JSON string (no quotes) for s[0..n), into b. */
void json_escape(buf *b, const char *s, size_t n);
/* A parsed JSON value (json.h) written again: integers that a double holds
 * exactly as integers, other numbers in their shortest exact form. */
void jw_json(jsonw *w, const struct json *v);

#endif
