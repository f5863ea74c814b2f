/* tools.h - OpenAI function calling: the format a chat template writes
 * tool calls in, the grammar that forces a call (tool_choice "required" or
 * a named function), and the parser that finds the calls in a reply.
 *
 * Formats (picked from the template's text, as llama.cpp's chat parsers):
 *   TOOLS_HERMES   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
 *                  (Hermes 2 Pro, Qwen 2.5; one block per call)
 *   TOOLS_LLAMA3   {"name": ..., "parameters": {...}} as the whole reply,
 *                  optionally after <|python_tag|> (Llama 3.1 - 3.3)
 *   TOOLS_MISTRAL  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
 *   TOOLS_GENERIC  the whole reply a JSON object: {"tool_calls": [{"name",
 *                  "arguments"}, ...]}, {"tool_call": {...}}, {"name",
 *                  "arguments"}, or {"response": "text"}
 * Nothing here touches the server's state (the parser is pure). */
#ifndef MORSRV_TOOLS_H
#define MORSRV_TOOLS_H
#include <stddef.h>
#include "buf.h"
#include "json.h"

enum { TOOLS_GENERIC, TOOLS_HERMES, TOOLS_LLAMA3, TOOLS_MISTRAL, TOOLS_N_FORMATS };

int         tools_format(const char *template_src, size_t n);   /* TOOLS_* */
const char *tools_format_name(int format);
int         tools_format_by_name(const char *name);             /* -1 if none */

/* A GBNF grammar (root `root`) that accepts only calls in `format` of the
 * functions of `tools` (an array of OpenAI tools; only `name` when not
 * NULL), their arguments valid under each one's parameters schema; more
 * than one call when `parallel`. 0 with the text in *out, or -1 with a
 * message (a schema the converter cannot express). */
int tools_grammar(int format, const json *tools, const char *name, int parallel, buf *out, char *msg, size_t cap);
/* The text a call in `format` begins with: under tool_choice "auto" the
 * grammar above constrains the reply from there on (a lazy grammar,
 * mor_grammar_set_triggers). */
const char *tools_trigger(int format);

typedef struct {
    char *name;          /* malloc'd */
    char *arguments;     /* the arguments as JSON text (compact), malloc'd */
} tool_call;

typedef struct {
    tool_call *calls;
    int        n_calls;
    char      *content;      /* the text beside the calls, without the space next to them; malloc'd */
    size_t     content_len;
} tool_parse;

/* Find the calls in text[0..n) as `format` writes them. A call that does
 * not parse leaves the whole text as content and no calls (as llama.cpp's
 * parsers do in "auto"). 0, or -1 when out of memory. */
int  tools_parse(int format, const char *text, size_t n, tool_parse *out);
void tools_parse_free(tool_parse *p);

/* How much of a reply's text t[0..n) so far can be streamed as content
 * (*safe): none of a call's marker, of the end that may begin one, of the
 * space before them, nor (Llama 3, generic) of a reply that begins with
 * '{'. What it gives is a prefix of the content tools_parse finds in any
 * longer text (the content keeps the reply's text but the space next to
 * its calls). Markers are looked for from `from` on (a safe length found
 * before: none begins earlier). 1 when a marker (or the '{') was found:
 * nothing more will be safe before the end. */
int tools_stream_safe(int format, const char *t, size_t n, size_t from, size_t *safe);
#endif
