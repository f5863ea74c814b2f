/* tools.c - see tools.h. */
#include "tools.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "mor.h"

static const char *const format_names[TOOLS_N_FORMATS] = { "generic", "hermes", "llama3", "mistral" };

static int has(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, k)) return 1;
    return 0;
}

int tools_format(const char *src, size_t n)
{
    if (!src) return TOOLS_GENERIC;
    if (has(src, n, "<tool_call>")) return TOOLS_HERMES;
    if (has(src, n, "[TOOL_CALLS]")) return TOOLS_MISTRAL;
    if (has(src, n, "<|python_tag|>") || (has(src, n, "<|start_header_id|>") && has(src, n, "ipython")))
        return TOOLS_LLAMA3;
    return TOOLS_GENERIC;
}

const char *tools_trigger(int f)
{
    switch (f) {
    case TOOLS_HERMES:  return "<tool_call>";
    case TOOLS_MISTRAL: return "[TOOL_CALLS]";
    case TOOLS_LLAMA3:  return "{\"name\"";
    default:            return "{\"tool_calls\"";
    }
}

const char *tools_format_name(int f) { return f >= 0 && f < TOOLS_N_FORMATS ? format_names[f] : "?"; }

int tools_format_by_name(const char *name)
{
    for (int f = 0; f < TOOLS_N_FORMATS; f++)
        if (!strcmp(name, format_names[f])) return f;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* The grammar                                                               */
/* ------------------------------------------------------------------------ */

static int word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* g[0..n) with every rule name prefixed by `pre` (names outside "...",
 * [...], {...} and comments). */
static void prefix_rules(buf *out, const char *g, size_t n, const char *pre)
{
    for (size_t i = 0; i < n;) {
        char c = g[i];
        if (c == '"' || c == '[') {
            char end = c == '"' ? '"' : ']';
            size_t j = i + 1;
            while (j < n && g[j] != end) j += g[j] == '\\' && j + 1 < n ? 2 : 1;
            if (j < n) j++;
            buf_put(out, g + i, j - i);
            i = j;
        } else if (c == '{' || c == '#') {
            size_t j = i;
            while (j < n && g[j] != (c == '{' ? '}' : '\n')) j++;
            if (j < n && c == '{') j++;
            buf_put(out, g + i, j - i);
            i = j;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t j = i;
            while (j < n && word_char(g[j])) j++;
            buf_puts(out, pre);
            buf_put(out, g + i, j - i);
            i = j;
        } else {
            buf_putc(out, c);
            i++;
        }
    }
}

/* The rules of function i: tI-root accepts its arguments. */
static int args_rules(const json *fn, int i, buf *out, char *msg, size_t cap)
{
    const json *params = json_get(fn, "parameters");
    buf s = { 0 };
    jsonw w;
    jw_init(&w, &s);
    if (params && params->type == JSON_OBJECT) jw_json(&w, params);
    else buf_puts(&s, "{\"type\": \"object\"}");
    size_t n = 0;
    mor_status st = buf_ok(&s) ? mor_json_schema_to_grammar(s.p, s.len, NULL, 0, &n) : MOR_E_NOMEM;
    char *g = st == MOR_E_BUFFER_TOO_SMALL ? malloc(n + 1) : NULL;
    if (g) st = mor_json_schema_to_grammar(s.p, s.len, g, n, &n);
    buf_free(&s);
    if (st || !g) {
        snprintf(msg, cap, "tools: function '%s' parameters: %s", json_get(fn, "name")->str,
                 st == MOR_E_NOMEM || (!g && !st) ? "out of memory" : mor_last_error());
        free(g);
        return -1;
    }
    char pre[24];
    snprintf(pre, sizeof pre, "t%d-", i);
    prefix_rules(out, g, n, pre);
    buf_putc(out, '\n');
    free(g);
    return 0;
}

int tools_grammar(int format, const json *tools, const char *name, int parallel, buf *out, char *msg, size_t cap)
{
    const char *argkey = format == TOOLS_LLAMA3 ? "parameters" : "arguments";
    buf calls = { 0 };
    int k = 0;
    for (size_t i = 0; i < tools->n; i++) {
        const json *fn = json_get(tools->items[i], "function");
        const char *fname = json_get(fn, "name")->str;   /* [A-Za-z0-9_.-]: no escaping (api.c) */
        if (name && strcmp(name, fname)) continue;
        if (args_rules(fn, (int)i, out, msg, cap)) { buf_free(&calls); return -1; }
        buf_printf(&calls, "%s\"{\\\"name\\\": \\\"%s\\\", \\\"%s\\\": \" t%zu-root \"}\"", k++ ? " | " : "", fname,
                   argkey, i);
    }
    buf_printf(out, "call ::= %s\n", calls.p ? calls.p : "\"\"");
    buf_free(&calls);
    /* parallel: more calls after the first */
    switch (format) {
    case TOOLS_HERMES:
        buf_puts(out, "root ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"");
        if (parallel) buf_puts(out, " (\"\\n<tool_call>\\n\" call \"\\n</tool_call>\")*");
        break;
    case TOOLS_MISTRAL:
        buf_printf(out, "root ::= \"[TOOL_CALLS][\" call %s\"]\"", parallel ? "(\", \" call)* " : "");
        break;
    case TOOLS_LLAMA3:   /* one call: the whole reply */
        buf_puts(out, "root ::= call");
        break;
    default:
        buf_printf(out, "root ::= \"{\\\"tool_calls\\\": [\" call %s\"]}\"", parallel ? "(\", \" call)* " : "");
        break;
    }
    buf_putc(out, '\n');
    if (!buf_ok(out)) { snprintf(msg, cap, "out of memory"); return -1; }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The parser                                                                */
/* ------------------------------------------------------------------------ */

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* The length of the JSON value (object or array) that text[0..n) begins
 * with, or 0 if it does not close. */
static size_t json_span(const char *t, size_t n)
{
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') in_str = 1;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
            if (depth < 0) return 0;
        } else if (!depth && !is_space(c)) return 0;
    }
    return 0;
}

static const char *skip_space(const char *s, const char *e)
{
    while (s < e && is_space(*s)) s++;
    return s;
}

/* Append the call {"name", argkey or "arguments" or "parameters"} of v;
 * -1 when v is not one, -2 when out of memory. */
static int add_call(tool_parse *p, const json *v)
{
    const json *name = json_get(v, "name"), *args = json_get(v, "arguments");
    if (!args) args = json_get(v, "parameters");
    /* a name with a NUL byte ("\u0000") would be cut short by strdup: not a call */
    if (!name || name->type != JSON_STRING || !name->str_len || memchr(name->str, 0, name->str_len)) return -1;
    buf a = { 0 };
    if (!args) buf_puts(&a, "{}");
    else if (args->type == JSON_STRING) {   /* already JSON text (some models): kept if it is an object */
        char e[8];
        json *inner = json_parse(args->str, args->str_len, e, sizeof e);
        if (!inner || inner->type != JSON_OBJECT) { json_free(inner); return -1; }
        jsonw w;
        jw_init(&w, &a);
        jw_json(&w, inner);
        json_free(inner);
    } else if (args->type == JSON_OBJECT) {
        jsonw w;
        jw_init(&w, &a);
        jw_json(&w, args);
    } else return -1;
    tool_call *c = realloc(p->calls, sizeof *c * (size_t)(p->n_calls + 1));
    if (!c || !buf_ok(&a)) { buf_free(&a); if (c) p->calls = c; return -2; }
    p->calls = c;
    c[p->n_calls].name = strdup(name->str);
    c[p->n_calls].arguments = a.p;
    if (!c[p->n_calls].name) { buf_free(&a); return -2; }
    p->n_calls++;
    return 0;
}

/* The JSON value at t[0..n) (t begins with it), parsed; its span in *span. */
static json *value_at(const char *t, size_t n, size_t *span)
{
    char e[8];
    *span = json_span(t, n);
    return *span ? json_parse(t, *span, e, sizeof e) : NULL;
}

/* Text [s, o) before a call as content: without the space next to the call. */
static void put_before(buf *content, const char *s, const char *o)
{
    while (o > s && is_space(o[-1])) o--;
    buf_put(content, s, (size_t)(o - s));
}

static int parse_hermes(const char *t, size_t n, tool_parse *p, buf *content)
{
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    const char *s = t, *e = t + n;
    while (s < e) {
        const char *o = NULL;
        for (const char *q = s; q + sizeof open - 1 <= e; q++)
            if (!memcmp(q, open, sizeof open - 1)) { o = q; break; }
        if (!o) { buf_put(content, s, (size_t)(e - s)); break; }
        put_before(content, s, o);
        const char *b = skip_space(o + sizeof open - 1, e);
        size_t span;
        json *v = value_at(b, (size_t)(e - b), &span);
        if (!v || v->type != JSON_OBJECT) { json_free(v); return -1; }
        int r = add_call(p, v);
        json_free(v);
        if (r) return r;
        s = skip_space(b + span, e);
        if ((size_t)(e - s) >= sizeof close - 1 && !memcmp(s, close, sizeof close - 1)) s += sizeof close - 1;
        else if (s != e) return -1;   /* unclosed: only at the end */
        s = skip_space(s, e);   /* the space after a call is not content */
    }
    return 0;
}

/* One object or an array of objects at b, and nothing after but space
 * (and ';' between objects, as Llama 3 may write). */
static int parse_objects(const char *b, const char *e, tool_parse *p, int sep_semicolon)
{
    b = skip_space(b, e);
    if (b == e) return -1;
    while (b < e) {
        size_t span;
        json *v = value_at(b, (size_t)(e - b), &span);
        if (!v) return -1;
        int r = 0;
        if (v->type == JSON_ARRAY) {
            for (size_t i = 0; i < v->n && !r; i++) r = add_call(p, v->items[i]);
            if (!v->n) r = -1;
        } else r = add_call(p, v);
        json_free(v);
        if (r) return r;
        b = skip_space(b + span, e);
        if (sep_semicolon && b < e && *b == ';') b = skip_space(b + 1, e);
    }
    return 0;
}

static int parse_generic(const char *t, size_t n, tool_parse *p, buf *content)
{
    const char *b = skip_space(t, t + n), *e = t + n;
    size_t span;
    json *v = value_at(b, (size_t)(e - b), &span);
    if (!v || v->type != JSON_OBJECT || skip_space(b + span, e) != e) { json_free(v); return -1; }
    const json *many = json_get(v, "tool_calls"), *one = json_get(v, "tool_call"), *resp = json_get(v, "response");
    int r = -1;
    if (many && many->type == JSON_ARRAY && many->n) {
        r = 0;
        for (size_t i = 0; i < many->n && !r; i++) r = add_call(p, many->items[i]);
    } else if (one && one->type == JSON_OBJECT) r = add_call(p, one);
    else if (resp && resp->type == JSON_STRING && v->n == 1) { buf_put(content, resp->str, resp->str_len); r = 0; }
    else if (json_get(v, "name") && (json_get(v, "arguments") || json_get(v, "parameters"))) r = add_call(p, v);
    json_free(v);
    return r;
}

int tools_parse(int format, const char *t, size_t n, tool_parse *p)
{
    memset(p, 0, sizeof *p);
    buf content = { 0 };
    int r;
    const char *e = t + n;
    if (format == TOOLS_HERMES) r = parse_hermes(t, n, p, &content);
    else if (format == TOOLS_MISTRAL) {
        static const char m[] = "[TOOL_CALLS]";
        const char *o = NULL;
        for (const char *q = t; q + sizeof m - 1 <= e; q++)
            if (!memcmp(q, m, sizeof m - 1)) { o = q; break; }
        if (!o) r = 1;
        else { put_before(&content, t, o); r = parse_objects(o + sizeof m - 1, e, p, 0); }
    } else if (format == TOOLS_LLAMA3) {
        static const char tag[] = "<|python_tag|>";
        const char *b = skip_space(t, e), *o = NULL;
        for (const char *q = t; q + sizeof tag - 1 <= e; q++)
            if (!memcmp(q, tag, sizeof tag - 1)) { o = q; break; }
        if (o) { put_before(&content, t, o); r = parse_objects(o + sizeof tag - 1, e, p, 1); }
        else r = b < e && *b == '{' ? parse_objects(b, e, p, 1) : 1;
    } else r = parse_generic(t, n, p, &content);
    if (r == -2) { buf_free(&content); tools_parse_free(p); return -1; }
    if (r) {   /* no calls: the whole text is the content */
        for (int i = 0; i < p->n_calls; i++) { free(p->calls[i].name); free(p->calls[i].arguments); }
        free(p->calls);
        p->calls = NULL;
        p->n_calls = 0;
        buf_reset(&content);
        buf_put(&content, t, n);
    }
    buf_putc(&content, 0);
    if (!buf_ok(&content)) { buf_free(&content); tools_parse_free(p); return -1; }
    p->content = content.p;
    p->content_len = content.len - 1;
    return 0;
}

/* The first occurrence of m in t[0..n), or n; *partial: the start of a
 * suffix of t that is a prefix of m (n when none). */
static size_t find_marker(const char *t, size_t n, const char *m, size_t *partial)
{
    size_t k = strlen(m);
    *partial = n;
    for (size_t i = 0; i < n; i++) {
        size_t l = n - i < k ? n - i : k;
        if (!memcmp(t + i, m, l)) {
            if (l == k) return i;
            if (*partial == n) *partial = i;
        }
    }
    return n;
}

int tools_stream_safe(int format, const char *t, size_t n, size_t from, size_t *safe)
{
    size_t partial, at = n;
    const char *m = format == TOOLS_HERMES ? "<tool_call>" : format == TOOLS_MISTRAL ? "[TOOL_CALLS]" :
                    format == TOOLS_LLAMA3 ? "<|python_tag|>" : NULL;
    *safe = 0;
    if (format == TOOLS_LLAMA3 || format == TOOLS_GENERIC) {   /* a reply that is a JSON object: held whole */
        size_t b = 0;
        while (b < n && is_space(t[b])) b++;
        if (b == n) return 0;
        if (t[b] == '{') return 1;
    }
    *safe = n;
    if (m) {   /* no marker begins before `from` (the caller's last safe length) */
        at = find_marker(t + from, n - from, m, &partial);
        at += from;
        partial += from;
        *safe = at < partial ? at : partial;
    }
    while (*safe > 0 && is_space(t[*safe - 1])) (*safe)--;   /* the space before a call is not content */
    return at < n;
}

void tools_parse_free(tool_parse *p)
{
    for (int i = 0; i < p->n_calls; i++) { free(p->calls[i].name); free(p->calls[i].arguments); }
    free(p->calls);
    free(p->content);
    memset(p, 0, sizeof *p);
}
