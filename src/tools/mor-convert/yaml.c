/* yaml.c - a line-oriented parser for the YAML subset of yaml.h.
 *
 * First the text is cut into logical lines (indentation, content without
 * comments); then a recursive descent over those lines builds the tree. A
 * block node owns every following line that is more indented than its parent,
 * which is all YAML's block structure needs. */
#include "yaml.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int indent;     /* leading spaces */
    char *text;     /* content: no indentation, comment or trailing blanks */
    int lineno;     /* 1-based, for messages */
} yline;

typedef struct {
    yline *l;
    size_t n, i;
    int depth;
    char *err;
    size_t errcap;
    int failed;
} yparser;

static void yfail(yparser *y, int lineno, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    if (y->failed) return;
    y->failed = 1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (y->err && y->errcap) snprintf(y->err, y->errcap, "YAML: %s at line %d", msg, lineno);
}

static json *ynew(yparser *y, int type, int lineno)
{
    json *v = calloc(1, sizeof *v);
    if (!v) yfail(y, lineno, "out of memory");
    else v->type = type;
    return v;
}

static json *ystring(yparser *y, const char *s, size_t n, int lineno)
{
    json *v = ynew(y, JSON_STRING, lineno);
    if (!v) return NULL;
    v->str = malloc(n + 1);
    if (!v->str) { free(v); yfail(y, lineno, "out of memory"); return NULL; }
    if (n) memcpy(v->str, s, n);
    v->str[n] = 0;
    v->str_len = n;
    return v;
}

static int ypush(yparser *y, json *c, json *item, char *key, int lineno)
{
    /* Grow by doubling; n is a power of two exactly when the array is full. */
    if ((c->n & (c->n - 1)) == 0) {
        size_t cap = c->n ? c->n * 2 : 1;
        json **items = realloc(c->items, cap * sizeof *items);
        if (!items) { yfail(y, lineno, "out of memory"); return 0; }
        c->items = items;
        if (c->type == JSON_OBJECT) {
            char **keys = realloc(c->keys, cap * sizeof *keys);
            if (!keys) { yfail(y, lineno, "out of memory"); return 0; }
            c->keys = keys;
        }
    }
    c->items[c->n] = item;
    if (c->type == JSON_OBJECT) c->keys[c->n] = key;
    c->n++;
    return 1;
}

/* ---- scalars ------------------------------------------------------------- */

static int is_sp(char c) { return c == ' ' || c == '\t'; }

static int word_in(const char *s, size_t n, const char *const *words)
{
    for (; *words; words++)
        if (strlen(*words) == n && memcmp(*words, s, n) == 0) return 1;
    return 0;
}

/* Does s[0..n) look like a YAML number (int or float, optional '_')? */
static int looks_numeric(const char *s, size_t n)
{
    size_t i = 0, digits = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    while (i < n && ((s[i] >= '0' && s[i] <= '9') || (s[i] == '_' && digits))) { if (s[i] != '_') digits++; i++; }
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_')) { if (s[i] != '_') digits++; i++; }
    }
    if (!digits) return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t ed = 0;
        i++;
        if (i < n && (s[i] == '-' || s[i] == '+')) i++;
        while (i < n && s[i] >= '0' && s[i] <= '9') { i++; ed++; }
        if (!ed) return 0;
    }
    return i == n;
}

/* Resolve a plain scalar s[0..n) to null, bool, number or string. */
static json *resolve_plain(yparser *y, const char *s, size_t n, int lineno)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
    static const char *const infs[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", NULL};
    static const char *const ninfs[] = {"-.inf", "-.Inf", "-.INF", NULL};
    static const char *const nans[] = {".nan", ".NaN", ".NAN", NULL};
    json *v;
    if (word_in(s, n, nulls)) return ynew(y, JSON_NULL, lineno);
    if (word_in(s, n, trues) || word_in(s, n, falses)) {
        v = ynew(y, JSON_BOOL, lineno);
        if (v) v->boolean = word_in(s, n, trues);
        return v;
    }
    if (word_in(s, n, infs) || word_in(s, n, ninfs) || word_in(s, n, nans)) {
        v = ynew(y, JSON_NUMBER, lineno);
        if (v) v->num = word_in(s, n, nans) ? (double)NAN : word_in(s, n, infs) ? (double)INFINITY : -(double)INFINITY;
        return v;
    }
    if (n < 512 && looks_numeric(s, n)) {
        char buf[512];
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (s[i] != '_') buf[k++] = s[i];
        buf[k] = 0;
        v = ynew(y, JSON_NUMBER, lineno);
        if (v) v->num = strtod(buf, NULL);
        return v;
    }
    return ystring(y, s, n, lineno);
}

static size_t put_utf8(char *b, unsigned long cp)
{
    if (cp < 0x80) { b[0] = (char)cp; return 1; }
    if (cp < 0x800) { b[0] = (char)(0xC0 | cp >> 6); b[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12); b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    b[0] = (char)(0xF0 | cp >> 18); b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* Decode the quoted scalar at s (s[0] is the quote) within s[0..n). On
 * success returns the decoded value and sets *used to the bytes consumed
 * (through the closing quote). *unterminated is set when no closing quote was
 * found (the caller may then join continuation lines and retry). */
static json *parse_quoted(yparser *y, const char *s, size_t n, size_t *used, int *unterminated, int lineno)
{
    char q = s[0];
    char *out = malloc(n + 1);   /* decoding never grows the text */
    size_t k = 0, i = 1;
    json *v;
    *unterminated = 0;
    if (!out) { yfail(y, lineno, "out of memory"); return NULL; }
    for (;;) {
        if (i >= n) { free(out); *unterminated = 1; return NULL; }
        if (s[i] == q) {
            if (q == '\'' && i + 1 < n && s[i + 1] == '\'') { out[k++] = '\''; i += 2; continue; }
            i++;
            break;
        }
        if (q == '"' && s[i] == '\\') {
            char c;
            unsigned long cp = 0;
            int hex = 0;
            if (i + 1 >= n) { free(out); *unterminated = 1; return NULL; }
            c = s[i + 1];
            i += 2;
            switch (c) {
            case '\\': out[k++] = '\\'; continue;
            case '"': out[k++] = '"'; continue;
            case '/': out[k++] = '/'; continue;
            case ' ': out[k++] = ' '; continue;
            case 'n': out[k++] = '\n'; continue;
            case 't': out[k++] = '\t'; continue;
            case 'r': out[k++] = '\r'; continue;
            case '0': out[k++] = '\0'; continue;
            case 'x': hex = 2; break;
            case 'u': hex = 4; break;
            case 'U': hex = 8; break;
            default:
                free(out);
                yfail(y, lineno, "unsupported escape '\\%c' in a double-quoted string", c >= 0x20 && c < 0x7f ? c : '?');
                return NULL;
            }
            if (n - i < (size_t)hex) { free(out); yfail(y, lineno, "truncated escape"); return NULL; }
            for (int h = 0; h < hex; h++, i++) {
                char d = s[i];
                cp <<= 4;
                if (d >= '0' && d <= '9') cp |= (unsigned long)(d - '0');
                else if (d >= 'a' && d <= 'f') cp |= (unsigned long)(d - 'a' + 10);
                else if (d >= 'A' && d <= 'F') cp |= (unsigned long)(d - 'A' + 10);
                else { free(out); yfail(y, lineno, "bad hex digit in an escape"); return NULL; }
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                free(out);
                yfail(y, lineno, "invalid code point in an escape");
                return NULL;
            }
            /* 2 + hex input bytes produce at most 4 output bytes (hex >= 2) */
            k += put_utf8(out + k, cp);
            continue;
        }
        out[k++] = s[i++];
    }
    *used = i;
    v = ynew(y, JSON_STRING, lineno);
    if (!v) { free(out); return NULL; }
    out[k] = 0;
    v->str = out;
    v->str_len = k;
    return v;
}

/* ---- flow collections (one line) ------------------------------------------ */

static json *parse_flow(yparser *y, const char *s, size_t n, size_t *pos, int depth, int lineno);

static void skip_sp(const char *s, size_t n, size_t *pos)
{
    while (*pos < n && is_sp(s[*pos])) (*pos)++;
}

/* A scalar inside a flow collection: quoted, or plain up to , ] } or ": ". */
static json *parse_flow_scalar(yparser *y, const char *s, size_t n, size_t *pos, int is_key, int lineno)
{
    size_t st = *pos, e;
    if (st < n && (s[st] == '"' || s[st] == '\'')) {
        size_t used;
        int unterminated;
        json *v = parse_quoted(y, s + st, n - st, &used, &unterminated, lineno);
        if (!v && unterminated) yfail(y, lineno, "unterminated quoted string");
        if (v) *pos = st + used;
        return v;
    }
    e = st;
    while (e < n && s[e] != ',' && s[e] != ']' && s[e] != '}' &&
           !(is_key && s[e] == ':' && (e + 1 == n || is_sp(s[e + 1]) || s[e + 1] == ',' || s[e + 1] == '}')))
        e++;
    *pos = e;
    while (e > st && is_sp(s[e - 1])) e--;
    return resolve_plain(y, s + st, e - st, lineno);
}

static json *parse_flow(yparser *y, const char *s, size_t n, size_t *pos, int depth, int lineno)
{
    char open = s[*pos], close = open == '[' ? ']' : '}';
    json *c;
    if (depth > YAML_MAX_DEPTH) { yfail(y, lineno, "nesting too deep"); return NULL; }
    c = ynew(y, open == '[' ? JSON_ARRAY : JSON_OBJECT, lineno);
    if (!c) return NULL;
    (*pos)++;
    skip_sp(s, n, pos);
    if (*pos < n && s[*pos] == close) { (*pos)++; return c; }
    for (;;) {
        json *item = NULL, *k = NULL;
        char *key = NULL;
        skip_sp(s, n, pos);
        if (*pos >= n) { yfail(y, lineno, "multi-line flow collections are not supported"); goto fail; }
        if (c->type == JSON_OBJECT) {
            k = parse_flow_scalar(y, s, n, pos, 1, lineno);
            if (!k) goto fail;
            if (k->type != JSON_STRING) {
                /* keys such as 1 or true: keep their text */
                json_free(k);
                yfail(y, lineno, "only string keys are supported in flow mappings");
                goto fail;
            }
            key = k->str;
            k->str = NULL;
            json_free(k);
            skip_sp(s, n, pos);
            if (*pos >= n || s[*pos] != ':') { free(key); yfail(y, lineno, "':' expected in a flow mapping"); goto fail; }
            (*pos)++;
            skip_sp(s, n, pos);
        }
        if (*pos < n && (s[*pos] == '[' || s[*pos] == '{')) item = parse_flow(y, s, n, pos, depth + 1, lineno);
        else item = parse_flow_scalar(y, s, n, pos, 0, lineno);
        if (!item) { free(key); goto fail; }
        if (!ypush(y, c, item, key, lineno)) { json_free(item); free(key); goto fail; }
        skip_sp(s, n, pos);
        if (*pos < n && s[*pos] == ',') { (*pos)++; continue; }
        if (*pos < n && s[*pos] == close) { (*pos)++; break; }
        yfail(y, lineno, *pos >= n ? "multi-line flow collections are not supported" : "',' or '%c' expected", close);
        goto fail;
    }
    return c;
fail:
    json_free(c);
    return NULL;
}

/* ---- block structure ------------------------------------------------------ */

static int is_seq_item(const char *t) { return t[0] == '-' && (t[1] == 0 || t[1] == ' '); }

/* Position of the ':' that ends a mapping key on this line, or -1. */
static long key_colon(const char *t)
{
    size_t i = 0;
    if (t[0] == '[' || t[0] == '{') return -1;
    if (t[0] == '"' || t[0] == '\'') {
        char q = t[0];
        for (i = 1; t[i]; i++) {
            if (q == '"' && t[i] == '\\' && t[i + 1]) { i++; continue; }
            if (t[i] == q) {
                if (q == '\'' && t[i + 1] == '\'') { i++; continue; }
                break;
            }
        }
        if (!t[i]) return -1;
        i++;
        while (is_sp(t[i])) i++;
        return t[i] == ':' && (t[i + 1] == 0 || is_sp(t[i + 1])) ? (long)i : -1;
    }
    for (i = 0; t[i]; i++)
        if (t[i] == ':' && (t[i + 1] == 0 || is_sp(t[i + 1]))) return (long)i;
    return -1;
}

static json *parse_block(yparser *y, int indent);
static json *parse_seq(yparser *y, int indent);

static int has_map_colon(const char *t)
{
    size_t n = strlen(t);
    return strstr(t, ": ") != NULL || (n && t[n - 1] == ':');
}

/* The value written after "key:" or "- " on line `lineno`; continuation lines
 * (more indented than `indent`) belong to it. */
static json *parse_inline(yparser *y, const char *text, int indent, int lineno)
{
    size_t n = strlen(text);
    char c = text[0];
    if (c == '&' || c == '*' || c == '!') {
        yfail(y, lineno, "anchors, aliases and tags are not supported");
        return NULL;
    }
    if (c == '|' || c == '>') {
        yfail(y, lineno, "block scalars (| and >) are not supported");
        return NULL;
    }
    if (c == '[' || c == '{') {
        size_t pos = 0;
        json *v = parse_flow(y, text, n, &pos, 0, lineno);
        if (v && pos != n) {
            json_free(v);
            yfail(y, lineno, "unexpected text after a flow collection");
            return NULL;
        }
        return v;
    }
    if (c == '"' || c == '\'') {
        /* A quoted scalar may continue on following lines: fold them in with
         * single spaces until the closing quote is found. */
        char *joined = NULL;
        const char *cur = text;
        size_t curn = n;
        for (;;) {
            size_t used;
            int unterminated;
            json *v = parse_quoted(y, cur, curn, &used, &unterminated, lineno);
            if (v) {
                size_t rest = used;
                while (rest < curn && is_sp(cur[rest])) rest++;
                free(joined);
                if (rest != curn) {
                    json_free(v);
                    yfail(y, lineno, "unexpected text after a quoted string");
                    return NULL;
                }
                return v;
            }
            if (!unterminated || y->i >= y->n || y->l[y->i].indent <= indent) {
                free(joined);
                if (unterminated) yfail(y, lineno, "unterminated quoted string");
                return NULL;
            }
            {
                const char *more = y->l[y->i].text;
                size_t mn = strlen(more);
                char *nj = malloc(curn + 1 + mn + 1);
                if (!nj) { free(joined); yfail(y, lineno, "out of memory"); return NULL; }
                memcpy(nj, cur, curn);
                nj[curn] = ' ';
                memcpy(nj + curn + 1, more, mn + 1);
                free(joined);
                joined = nj;
                cur = nj;
                curn = curn + 1 + mn;
                y->i++;
            }
        }
    }
    /* plain scalar, possibly continued on more-indented lines; as in PyYAML,
     * ": " cannot occur in it ("a: b: c" is an error, not the string "b: c") */
    if (has_map_colon(text)) {
        yfail(y, lineno, "mapping values are not allowed here");
        return NULL;
    }
    for (size_t j = y->i; j < y->n && y->l[j].indent > indent; j++)
        if (has_map_colon(y->l[j].text)) {
            yfail(y, y->l[j].lineno, "mapping values are not allowed here");
            return NULL;
        }
    if (y->i < y->n && y->l[y->i].indent > indent) {
        size_t total = n;
        size_t j;
        char *buf;
        json *v;
        for (j = y->i; j < y->n && y->l[j].indent > indent; j++) total += 1 + strlen(y->l[j].text);
        buf = malloc(total + 1);
        if (!buf) { yfail(y, lineno, "out of memory"); return NULL; }
        memcpy(buf, text, n);
        total = n;
        for (; y->i < j; y->i++) {
            size_t m = strlen(y->l[y->i].text);
            buf[total++] = ' ';
            memcpy(buf + total, y->l[y->i].text, m);
            total += m;
        }
        buf[total] = 0;
        v = resolve_plain(y, buf, total, lineno);
        free(buf);
        return v;
    }
    return resolve_plain(y, text, n, lineno);
}

static json *parse_map(yparser *y, int indent)
{
    json *obj = ynew(y, JSON_OBJECT, y->l[y->i].lineno);
    if (!obj) return NULL;
    while (y->i < y->n && y->l[y->i].indent == indent) {
        yline *ln = &y->l[y->i];
        long c = key_colon(ln->text);
        char *key;
        const char *rest;
        json *val;
        int lineno = ln->lineno;
        if (is_seq_item(ln->text)) { yfail(y, lineno, "a list item where a mapping key was expected"); goto fail; }
        if (c < 0) { yfail(y, lineno, "'key: value' expected"); goto fail; }
        if (ln->text[0] == '"' || ln->text[0] == '\'') {
            size_t used;
            int unterminated;
            json *k = parse_quoted(y, ln->text, (size_t)c, &used, &unterminated, lineno);
            if (!k) { if (unterminated) yfail(y, lineno, "bad quoted key"); goto fail; }
            key = k->str;
            k->str = NULL;
            json_free(k);
        } else {
            size_t e = (size_t)c;
            while (e > 0 && is_sp(ln->text[e - 1])) e--;
            key = malloc(e + 1);
            if (!key) { yfail(y, lineno, "out of memory"); goto fail; }
            memcpy(key, ln->text, e);
            key[e] = 0;
        }
        rest = ln->text + c + 1;
        while (is_sp(*rest)) rest++;
        y->i++;
        if (*rest) val = parse_inline(y, rest, indent, lineno);
        else if (y->i < y->n && y->l[y->i].indent > indent) val = parse_block(y, y->l[y->i].indent);
        else if (y->i < y->n && y->l[y->i].indent == indent && is_seq_item(y->l[y->i].text))
            val = parse_seq(y, indent);   /* PyYAML style: "key:\n- a\n- b" */
        else val = ynew(y, JSON_NULL, lineno);
        if (!val) { free(key); goto fail; }
        if (!ypush(y, obj, val, key, lineno)) { json_free(val); free(key); goto fail; }
    }
    if (y->i < y->n && y->l[y->i].indent > indent) {
        yfail(y, y->l[y->i].lineno, "unexpected indentation");
        goto fail;
    }
    return obj;
fail:
    json_free(obj);
    return NULL;
}

static json *parse_seq(yparser *y, int indent)
{
    json *arr = ynew(y, JSON_ARRAY, y->l[y->i].lineno);
    if (!arr) return NULL;
    while (y->i < y->n && y->l[y->i].indent == indent && is_seq_item(y->l[y->i].text)) {
        yline *ln = &y->l[y->i];
        int lineno = ln->lineno;
        int k = 1;
        json *val;
        while (is_sp(ln->text[k])) k++;
        if (!ln->text[k]) {
            y->i++;
            if (y->i < y->n && y->l[y->i].indent > indent) val = parse_block(y, y->l[y->i].indent);
            else val = ynew(y, JSON_NULL, lineno);
        } else if (is_seq_item(ln->text + k) || key_colon(ln->text + k) >= 0) {
            /* "- key: v" or "- - x": a block node starting inside the item;
             * re-read this line as if it began at column indent + k. */
            ln->text += k;
            ln->indent = indent + k;
            val = parse_block(y, indent + k);
        } else {
            y->i++;
            val = parse_inline(y, ln->text + k, indent, lineno);
        }
        if (!val) goto fail;
        if (!ypush(y, arr, val, NULL, lineno)) { json_free(val); goto fail; }
    }
    if (y->i < y->n && y->l[y->i].indent > indent) {
        yfail(y, y->l[y->i].lineno, "unexpected indentation");
        goto fail;
    }
    return arr;
fail:
    json_free(arr);
    return NULL;
}

/* The block node whose first line is y->l[y->i], at column `indent`. */
static json *parse_block(yparser *y, int indent)
{
    yline *ln = &y->l[y->i];
    json *v;
    if (++y->depth > YAML_MAX_DEPTH) { yfail(y, ln->lineno, "nesting deeper than %d", YAML_MAX_DEPTH); return NULL; }
    if (is_seq_item(ln->text)) v = parse_seq(y, indent);
    else if (key_colon(ln->text) >= 0) v = parse_map(y, indent);
    else {
        y->i++;
        v = parse_inline(y, ln->text, indent, ln->lineno);
    }
    y->depth--;
    return v;
}

/* ---- lines ---------------------------------------------------------------- */

/* Cut a comment: '#' at the start or after a blank, outside quotes. */
static void strip_comment(char *t)
{
    char q = 0;
    for (size_t i = 0; t[i]; i++) {
        if (q) {
            if (q == '"' && t[i] == '\\' && t[i + 1]) i++;
            else if (t[i] == q) q = 0;
        } else if ((t[i] == '"' || t[i] == '\'') && (i == 0 || is_sp(t[i - 1]) || strchr(":[{,-", t[i - 1]))) {
            q = t[i];
        } else if (t[i] == '#' && (i == 0 || is_sp(t[i - 1]))) {
            t[i] = 0;
            return;
        }
    }
}

json *yaml_parse(const char *text, size_t len, char *err, size_t errcap)
{
    yparser y = {0};
    char *buf;
    size_t cap = 16, pos = 0;
    int lineno = 0, seen_content = 0;
    json *root = NULL;

    y.err = err;
    y.errcap = errcap;
    if (len && memchr(text, 0, len)) { yfail(&y, 1, "NUL byte in the text"); return NULL; }
    buf = malloc(len + 1);
    y.l = malloc(cap * sizeof *y.l);
    if (!buf || !y.l) { free(buf); free(y.l); yfail(&y, 1, "out of memory"); return NULL; }
    if (len) memcpy(buf, text, len);
    buf[len] = 0;
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) pos = 3;   /* BOM */

    while (pos < len || (pos == len && lineno == 0)) {
        char *line = buf + pos, *nl = memchr(line, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - line) : len - pos;
        int indent = 0;
        char *t;
        size_t tl;
        pos += ll + (nl ? 1 : 0);
        lineno++;
        line[ll] = 0;
        if (ll && line[ll - 1] == '\r') line[--ll] = 0;
        while (line[indent] == ' ') indent++;
        t = line + indent;
        if (*t == '\t') { yfail(&y, lineno, "tab in indentation"); goto fail; }
        strip_comment(t);
        tl = strlen(t);
        while (tl && is_sp(t[tl - 1])) t[--tl] = 0;
        if (!tl) { if (!nl) break; continue; }
        if (indent == 0 && (strcmp(t, "---") == 0 || strncmp(t, "--- ", 4) == 0)) {
            if (seen_content) { yfail(&y, lineno, "multiple documents are not supported"); goto fail; }
            if (t[3]) { yfail(&y, lineno, "content after '---' is not supported"); goto fail; }
            continue;
        }
        if (indent == 0 && strcmp(t, "...") == 0) break;
        if (indent == 0 && t[0] == '%') { yfail(&y, lineno, "directives are not supported"); goto fail; }
        if (y.n == cap) {
            yline *l2;
            cap *= 2;
            l2 = realloc(y.l, cap * sizeof *l2);
            if (!l2) { yfail(&y, lineno, "out of memory"); goto fail; }
            y.l = l2;
        }
        y.l[y.n].indent = indent;
        y.l[y.n].text = t;
        y.l[y.n].lineno = lineno;
        y.n++;
        seen_content = 1;
        if (!nl) break;
    }

    if (y.n == 0) root = ynew(&y, JSON_NULL, 1);
    else {
        root = parse_block(&y, y.l[0].indent);
        if (root && y.i < y.n) {
            yfail(&y, y.l[y.i].lineno, "unexpected indentation");
            json_free(root);
            root = NULL;
        }
    }
    free(y.l);
    free(buf);
    return root;
fail:
    free(y.l);
    free(buf);
    return NULL;
}
