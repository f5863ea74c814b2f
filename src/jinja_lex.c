/* jinja_lex.c - a chat template's source as tokens, cut as jinja2's lexer
 * cuts it under Hugging Face's settings: text and tags ({{ }}, {% %},
 * {# #}); trim_blocks (the newline right after a block or comment tag
 * goes), lstrip_blocks (spaces and tabs from a line's start up to a block
 * or comment tag go), '-' (all whitespace on that side goes) and '+' (keep
 * it). Newlines are normalized to \n and one trailing newline is dropped
 * (keep_trailing_newline=False), so that the output is jinja2's byte for
 * byte. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "status.h"

typedef struct {
    jtemplate *t;
    const char *s;
    size_t n, pos;
    size_t cur, line, col;       /* the line/column cursor (positions only grow) */
    jtoken *v;
    size_t nv, cap;
} lexer;

static int lx_fail(lexer *L, size_t at, const char *fmt, ...) MOR_PRINTF(3, 4);

/* line and column (1-based) of position at */
static void lx_where(lexer *L, size_t at, int32_t *line, int32_t *col)
{
    if (at < L->cur) { L->cur = 0; L->line = 1; L->col = 1; }
    for (; L->cur < at && L->cur < L->n; L->cur++) {
        if (L->s[L->cur] == '\n') { L->line++; L->col = 1; } else L->col++;
    }
    *line = (int32_t)(L->line > INT32_MAX ? INT32_MAX : L->line);
    *col = (int32_t)(L->col > INT32_MAX ? INT32_MAX : L->col);
}

static int lx_fail(lexer *L, size_t at, const char *fmt, ...)
{
    char m[200];
    int32_t line, col;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    lx_where(L, at, &line, &col);
    L->t->st = MOR_E_INVALID_ARG;
    snprintf(L->t->msg, sizeof L->t->msg, "template syntax error at line %d, column %d: %s", (int)line, (int)col, m);
    return -1;
}

static jtoken *lx_push(lexer *L, int type, size_t at)
{
    if (L->nv == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtoken *nv = ja_alloc(&L->t->ar, cap * sizeof *nv);
        if (!nv) { L->t->st = MOR_E_NOMEM; snprintf(L->t->msg, sizeof L->t->msg, "out of memory"); return NULL; }
        if (L->nv) memcpy(nv, L->v, L->nv * sizeof *nv);
        L->v = nv;
        L->cap = cap;
    }
    jtoken *k = &L->v[L->nv++];
    memset(k, 0, sizeof *k);
    k->type = (uint8_t)type;
    lx_where(L, at, &k->line, &k->col);
    return k;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* ------------------------------------------------------------------------ */
/* Literals */

/* Python's unicode-escape decoding of a string literal's body into b. */
static void put_cp(jbuf *b, uint32_t cp)
{
    char t[4];
    if (cp > 0x10ffff) cp = 0xfffd;
    if (cp < 0x80) { t[0] = (char)cp; jb_add(b, t, 1); }
    else if (cp < 0x800) { t[0] = (char)(0xc0 | cp >> 6); t[1] = (char)(0x80 | (cp & 0x3f)); jb_add(b, t, 2); }
    else if (cp < 0x10000) {
        t[0] = (char)(0xe0 | cp >> 12); t[1] = (char)(0x80 | (cp >> 6 & 0x3f)); t[2] = (char)(0x80 | (cp & 0x3f));
        jb_add(b, t, 3);
    } else {
        t[0] = (char)(0xf0 | cp >> 18); t[1] = (char)(0x80 | (cp >> 12 & 0x3f));
        t[2] = (char)(0x80 | (cp >> 6 & 0x3f)); t[3] = (char)(0x80 | (cp & 0x3f));
        jb_add(b, t, 4);
    }
}

static int hexd(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* one escape at s[i] (after the backslash); returns the bytes it took, 0 on a bad \x/\u */
static size_t unescape_one(jbuf *b, const char *s, size_t i, size_t end)
{
    static const char from[] = "\\'\"abfnrtv\n", to[] = "\\'\"\a\b\f\n\r\t\v";
    char c = s[i];
    const char *k = strchr(from, c);
    if (c && k) { if (c != '\n') jb_addc(b, to[k - from]); return 1; }
    if (c >= '0' && c <= '7') {
        uint32_t v = 0;
        size_t j = i;
        for (; j < end && j < i + 3 && s[j] >= '0' && s[j] <= '7'; j++) v = v * 8 + (uint32_t)(s[j] - '0');
        put_cp(b, v);
        return j - i;
    }
    int w = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (!w) { jb_addc(b, '\\'); jb_addc(b, c); return 1; }
    uint32_t v = 0;
    for (int j = 1; j <= w; j++) {
        int h = i + (size_t)j < end ? hexd(s[i + (size_t)j]) : -1;
        if (h < 0) return 0;
        v = v << 4 | (uint32_t)h;
    }
    put_cp(b, v);
    return (size_t)w + 1;
}

static int lx_string(lexer *L)
{
    size_t st = L->pos;
    char q = L->s[L->pos++];
    jbuf b;
    jb_init(&b, &L->t->ar);
    while (L->pos < L->n && L->s[L->pos] != q) {
        if (L->s[L->pos] == '\\' && L->pos + 1 < L->n) {
            size_t k = unescape_one(&b, L->s, L->pos + 1, L->n);
            if (!k) return lx_fail(L, L->pos, "a truncated \\x, \\u or \\U escape");
            L->pos += 1 + k;
        } else jb_addc(&b, L->s[L->pos++]);
    }
    if (L->pos >= L->n) return lx_fail(L, st, "a string literal without its closing quote");
    L->pos++;
    jtoken *k = lx_push(L, TK_STRING, st);
    if (!k) return -1;
    if (b.over) { L->t->st = MOR_E_NOMEM; snprintf(L->t->msg, sizeof L->t->msg, "out of memory"); return -1; }
    k->s = b.n ? b.p : "";
    k->n = b.n;
    return 0;
}

/* digits with single underscores between them: their end, or st */
static size_t digits(const char *s, size_t n, size_t i, int base)
{
    size_t st = i;
    while (i < n) {
        int d = hexd(s[i]);
        if (d >= 0 && d < base) { i++; continue; }
        if (s[i] == '_' && i > st && i + 1 < n && hexd(s[i + 1]) >= 0 && hexd(s[i + 1]) < base) { i++; continue; }
        break;
    }
    return i;
}

static int lx_number(lexer *L)
{
    const char *s = L->s;
    size_t st = L->pos, i = digits(s, L->n, st, 10), e = i;
    int isf = 0;
    /* after a dot (x.0.1) a number is an integer: jinja2's (?<!\.) */
    int after_dot = st > 0 && s[st - 1] == '.';
    if (!after_dot && i < L->n && s[i] == '.' && i + 1 < L->n && is_digit(s[i + 1])) { isf = 1; e = i = digits(s, L->n, i + 1, 10); }
    if (!after_dot && i < L->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (s[j] == '+' || s[j] == '-')) j++;
        size_t k = digits(s, L->n, j, 10);
        if (k > j) { isf = 1; e = k; }
    }
    char t[80];
    size_t m = 0;
    int base = 10;
    if (!isf && s[st] == '0' && st + 1 < L->n && strchr("xXoObB", s[st + 1]) && s[st + 1]) {
        base = s[st + 1] == 'x' || s[st + 1] == 'X' ? 16 : s[st + 1] == 'o' || s[st + 1] == 'O' ? 8 : 2;
        size_t j = st + 2;
        if (j < L->n && s[j] == '_') j++;
        e = digits(s, L->n, j, base);
        if (e == j) return lx_fail(L, st, "a number without digits");
        st = j;
    }
    for (size_t j = st; j < e && m + 1 < sizeof t; j++)
        if (s[j] != '_') t[m++] = s[j];
    t[m] = 0;
    if (e - st >= sizeof t - 1) return lx_fail(L, st, "a number literal of more than 78 characters");
    jtoken *k = lx_push(L, isf ? TK_FLOAT : TK_INT, L->pos);
    if (!k) return -1;
    if (isf) k->f = strtod(t, NULL);
    else {
        unsigned long long v = strtoull(t, NULL, base);
        if (v > (unsigned long long)INT64_MAX) return lx_fail(L, L->pos, "an integer literal above 2^63-1");
        k->i = (int64_t)v;
    }
    L->pos = e;
    return 0;
}

static int lx_op(lexer *L)
{
    static const struct { const char *s; uint8_t op; } ops[] = {
        { "//", OP_FLOORDIV }, { "**", OP_POW }, { "==", OP_EQ }, { "!=", OP_NE }, { "<=", OP_LE }, { ">=", OP_GE },
        { "+", OP_ADD }, { "-", OP_SUB }, { "*", OP_MUL }, { "/", OP_DIV }, { "%", OP_MOD }, { "~", OP_TILDE },
        { "(", OP_LPAREN }, { ")", OP_RPAREN }, { "[", OP_LBRACKET }, { "]", OP_RBRACKET }, { "{", OP_LBRACE },
        { "}", OP_RBRACE }, { ",", OP_COMMA }, { ".", OP_DOT }, { ":", OP_COLON }, { "|", OP_PIPE },
        { "=", OP_ASSIGN }, { "<", OP_LT }, { ">", OP_GT },
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        size_t k = strlen(ops[i].s);
        if (L->n - L->pos >= k && !memcmp(L->s + L->pos, ops[i].s, k)) {
            jtoken *t = lx_push(L, TK_OP, L->pos);
            if (!t) return -1;
            t->op = ops[i].op;
            L->pos += k;
            return 0;
        }
    }
    return lx_fail(L, L->pos, "unexpected character '%c'", L->s[L->pos]);
}

/* ------------------------------------------------------------------------ */
/* Tags */

static int at(const lexer *L, size_t i, const char *w)
{
    size_t k = strlen(w);
    return L->n - i >= k && i <= L->n && !memcmp(L->s + i, w, k);
}

/* The end of a {{ }} or {% %} tag at pos, if it is there: its length with
 * the whitespace it takes after it; 0 if not an end. */
static size_t tag_end(const lexer *L, int block)
{
    const char *e = block ? "%}" : "}}";
    size_t p = L->pos;
    if (at(L, p, "-") && at(L, p + 1, e)) {
        size_t q = p + 3;
        while (q < L->n && is_ws(L->s[q])) q++;
        return q - p;
    }
    if (block && at(L, p, "+") && at(L, p + 1, e)) return 3;
    if (at(L, p, e)) return 2 + (block && p + 2 < L->n && L->s[p + 2] == '\n');
    return 0;
}

/* The tokens of a {{ }} (block 0) or {% %} tag from L->pos to its end. */
static int lx_tag(lexer *L, int block, size_t open_at)
{
    int depth = 0;
    for (;;) {
        while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
        if (L->pos >= L->n) return lx_fail(L, open_at, "a tag without its end ('%s')", block ? "%}" : "}}");
        size_t k = depth ? 0 : tag_end(L, block);
        if (k) {
            if (!lx_push(L, block ? TK_BLOCK_END : TK_VAR_END, L->pos)) return -1;
            L->pos += k;
            return 0;
        }
        char c = L->s[L->pos];
        int r;
        if (c == '\'' || c == '"') r = lx_string(L);
        else if (is_digit(c)) r = lx_number(L);
        else if (is_alpha(c)) {
            size_t st = L->pos;
            while (L->pos < L->n && (is_alpha(L->s[L->pos]) || is_digit(L->s[L->pos]))) L->pos++;
            jtoken *t = lx_push(L, TK_NAME, st);
            if (!t) return -1;
            t->s = L->s + st;
            t->n = L->pos - st;
            r = 0;
        } else {
            r = lx_op(L);
            if (!r) {
                uint8_t op = L->v[L->nv - 1].op;
                if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) depth++;
                else if ((op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) && depth > 0) depth--;
            }
        }
        if (r < 0) return -1;
    }
}

/* The text before a tag, as lstrip_blocks and '-' leave it. */
static size_t text_kept(const lexer *L, size_t st, size_t end, char kind, char mod, int line_starting)
{
    if (mod == '-') {
        while (end > st && is_ws(L->s[end - 1])) end--;
        return end;
    }
    if (mod == '+' || kind == '{') return end;
    size_t l = end;
    while (l > st && L->s[l - 1] != '\n') l--;
    if (l == st && !line_starting) return end;
    for (size_t i = l; i < end; i++)
        if (!is_ws(L->s[i])) return end;
    return l;
}

/* A {# #} comment from pos (after its opening): where it ends, with trim_blocks. */
static int lx_comment(lexer *L, size_t open_at)
{
    for (size_t p = L->pos; p + 1 < L->n; p++) {
        if (L->s[p] == '+' && at(L, p + 1, "#}")) { L->pos = p + 3; return 0; }
        if (L->s[p] == '-' && at(L, p + 1, "#}")) {
            p += 3;
            while (p < L->n && is_ws(L->s[p])) p++;
            L->pos = p;
            return 0;
        }
        if (at(L, p, "#}")) { L->pos = p + 2 + (p + 2 < L->n && L->s[p + 2] == '\n'); return 0; }
    }
    return lx_fail(L, open_at, "a comment without its end ('#}')");
}

static int lx_text(lexer *L, size_t st, size_t end)
{
    if (end <= st) return 0;
    jtoken *t = lx_push(L, TK_TEXT, st);
    if (!t) return -1;
    t->s = L->s + st;
    t->n = end - st;
    return 0;
}

/* The source with \r\n and \r as \n and one trailing newline dropped. */
static char *normalize(jtemplate *t, const char *src, size_t n, size_t *out_n)
{
    char *s = ja_alloc(&t->ar, n + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') { s[k++] = '\n'; if (i + 1 < n && src[i + 1] == '\n') i++; }
        else s[k++] = src[i];
    }
    if (k && s[k - 1] == '\n') k--;
    s[k] = 0;
    *out_n = k;
    return s;
}

int jinja_lex(jtemplate *t, const char *src, size_t n, jtoken **toks, size_t *n_toks)
{
    lexer L;
    memset(&L, 0, sizeof L);
    L.t = t;
    L.line = L.col = 1;
    if (!(L.s = normalize(t, src, n, &L.n))) {
        t->st = MOR_E_NOMEM;
        snprintf(t->msg, sizeof t->msg, "out of memory");
        return -1;
    }
    int line_starting = 1;
    while (L.pos < L.n) {
        size_t p = L.pos;
        while (p + 1 < L.n && !(L.s[p] == '{' && (L.s[p + 1] == '{' || L.s[p + 1] == '%' || L.s[p + 1] == '#'))) p++;
        if (p + 1 >= L.n) { if (lx_text(&L, L.pos, L.n) < 0) return -1; break; }
        char kind = L.s[p + 1], mod = p + 2 < L.n ? L.s[p + 2] : 0;
        if (mod != '-' && mod != '+') mod = 0;
        if (lx_text(&L, L.pos, text_kept(&L, L.pos, p, kind, mod, line_starting)) < 0) return -1;
        L.pos = p + 2 + (mod != 0);
        int r;
        if (kind == '#') r = lx_comment(&L, p);
        else if (!lx_push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, p)) r = -1;
        else r = lx_tag(&L, kind == '%', p);
        if (r < 0) return -1;
        line_starting = L.s[L.pos - 1] == '\n';
    }
    if (!lx_push(&L, TK_EOF, L.n)) return -1;
    *toks = L.v;
    *n_toks = L.nv;
    return 0;
}
