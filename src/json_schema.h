/* json_schema.h - the parts of mor_json_schema_to_grammar (json_schema.c)
 * that turn one keyword's value into GBNF: integer ranges and string
 * formats (json_schema_scalar.c), regular expressions (json_schema_pattern.c). */
#ifndef MOR_JSON_SCHEMA_H
#define MOR_JSON_SCHEMA_H
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Growable byte strings. An allocation failure is remembered (oom) and
 * reported once by the caller, so that appends need no checks of their own. */
typedef struct { char *p; size_t n, cap; int oom; } sbuf;
void jsb_addn(sbuf *b, const char *s, size_t n);
void jsb_add(sbuf *b, const char *s);
void jsb_fmt(sbuf *b, const char *fmt, ...) MOR_PRINTF(2, 3);

/* Integers are written with at most this many digits (the grammar's
 * integral-part, as llama.cpp's: what a double holds exactly). */
enum { JS_INT_DIGITS = 16 };

/* GBNF alternatives (no surrounding group) for the JSON integers in
 * [lo, hi]; has_lo/has_hi 0 for no bound. lo <= hi when both are given;
 * bounds beyond JS_INT_DIGITS digits act as none. */
void js_int_range(sbuf *o, int64_t lo, int has_lo, int64_t hi, int has_hi);

/* GBNF for the inside of a JSON string (between its quotes) of format
 * name[0..n), or NULL when the format is not one the converter enforces. */
const char *js_format(const char *name, size_t n);

/* GBNF for the inside of a JSON string matching the regular expression
 * re[0..n) (ECMA-262's syntax, the subset JSON Schema's patterns use: no
 * anchors but a leading ^ and a trailing $, no lookaround, no
 * backreferences); char_rule: the name of a rule matching one JSON
 * string character (*used_char: whether the GBNF refers to it). An unanchored end matches any characters there, as
 * JSON Schema's "pattern" searches. 0, or -1 with a message in why. The
 * text matched stays valid JSON: a character class matches no quote,
 * backslash or control character unless the class names it (then its JSON
 * escape). */
int js_pattern(sbuf *o, const char *re, size_t n, const char *char_rule, int *used_char, char *why,
               size_t whycap);

#endif
