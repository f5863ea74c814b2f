/* json.h - a small, strict DOM JSON parser (RFC 8259).
 *
 * Strict: no comments, no trailing commas, no NaN/Infinity, no control
 * characters or invalid UTF-8 in strings, no lone surrogates, at most
 * JSON_MAX_DEPTH nested arrays/objects. Duplicate object keys are kept;
 * json_get returns the last one (as Python's json module does). Numbers are
 * converted with strtod, so every float32/float64 written by Python round-trips
 * exactly (the process must run in the "C" locale, the default). */
#ifndef CV_JSON_H
#define CV_JSON_H
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 256

enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

typedef struct json {
    int type;
    double num;           /* JSON_NUMBER */
    int boolean;          /* JSON_BOOL: 0 or 1 */
    char *str;            /* JSON_STRING: NUL-terminated UTF-8, \u escapes decoded */
    size_t str_len;       /* bytes, without the NUL (the string may contain NULs) */
    size_t n;             /* JSON_ARRAY / JSON_OBJECT: number of items */
    struct json **items;  /* the items (object values) */
    char **keys;          /* JSON_OBJECT only: NUL-terminated keys, parallel to items */
} json;

/* Parse text[0..len). NULL on error with a message (and byte offset) in err. */
json *json_parse(const char *text, size_t len, char *err, size_t errcap);
void json_free(json *v);

const json *json_get(const json *obj, const char *key);   /* NULL if missing/not an object */
const json *json_at(const json *arr, size_t i);           /* NULL if out of range/not an array */

/* Convenience: 1 and *out set if v is a number with an integral value in
 * [lo, hi] (with |value| <= 2^53, where doubles are exact), else 0. */
int json_as_int(const json *v, int64_t lo, int64_t hi, int64_t *out);
/* The string of v, or NULL if v is not a string. */
const char *json_as_str(const json *v);

#endif
