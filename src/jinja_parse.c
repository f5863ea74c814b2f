/* jinja_parse.c - tokens to the tree, by jinja2's grammar (its parser's
 * precedence, from loosest: inline if, or, and, not, comparisons and in,
 * + -, ~, * / // %, **, unary - +, then postfix . [] () and the filter
 * chain | f and `is` tests).
 *
 * What each node's children are:
 *   N_BODY a: the first statement (the rest through next)
 *   N_TEXT s,n   N_OUTPUT a: expression
 *   N_IF a: condition, b: body, c: else body (an elif is an N_IF there)
 *   N_FOR a: target (N_NAME or N_TUPLE of them), b: iterable, c: body,
 *         d: else body, e: the `if` filter
 *   N_SET a: target (N_NAME, N_TUPLE, N_GETATTR of a namespace), b: value
 *   N_SET_BLOCK a: target, b: body, c: filter chain or NULL
 *   N_MACRO s: name, a: parameters (N_NAME, default in a), b: body
 *   N_CALL_BLOCK a: the call, b: caller's parameters, c: body
 *   N_FILTER_BLOCK a: filter chain (its innermost operand NULL: the body)
 *   N_CONST v   N_NAME s   N_LIST/N_TUPLE a: items   N_DICT a: N_PAIR(a: key, b: value)
 *   N_GETATTR a: object, s: name   N_GETITEM a: object, b: index or N_SLICE(a, b, c)
 *   N_CALL a: callee, b: arguments (N_KWARG s: name, a: value)
 *   N_FILTER / N_TEST a: operand, s: name, b: arguments; neg: `is not`
 *   N_BINOP op, a, b   N_AND / N_OR a, b   N_NEG / N_POS / N_NOT a
 *   N_COMPARE a: first, b: N_OPERAND(op, a) chain   N_CONDEXPR a: then, b: condition, c: else */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jinja.h"
#include "status.h"

typedef struct {
    jtemplate *t;
    const jtoken *k;
    size_t n, i;
    int depth;
} parser;

static int ps_fail(parser *P, const char *fmt, ...) MOR_PRINTF(2, 3);
static int ps_fail(parser *P, const char *fmt, ...)
{
    char m[180];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    const jtoken *k = &P->k[P->i < P->n ? P->i : P->n - 1];
    if (P->t->st == MOR_OK) {
        P->t->st = MOR_E_INVALID_ARG;
        snprintf(P->t->msg, sizeof P->t->msg, "template syntax error at line %d, column %d: %s", (int)k->line,
                 (int)k->col, m);
    }
    return -1;
}

static const jtoken *cur(parser *P) { return &P->k[P->i]; }
static void adv(parser *P) { if (P->i + 1 < P->n) P->i++; }
static int is_op(parser *P, int op) { return cur(P)->type == TK_OP && cur(P)->op == op; }
static int is_name(parser *P, const char *w)
{
    const jtoken *k = cur(P);
    return k->type == TK_NAME && k->n == strlen(w) && !memcmp(k->s, w, k->n);
}
static int next_is_name(parser *P, const char *w)
{
    if (P->i + 1 >= P->n) return 0;
    const jtoken *k = &P->k[P->i + 1];
    return k->type == TK_NAME && k->n == strlen(w) && !memcmp(k->s, w, k->n);
}

static void oom(parser *P)
{
    if (P->t->st == MOR_OK) { P->t->st = MOR_E_NOMEM; snprintf(P->t->msg, sizeof P->t->msg, "out of memory"); }
}

static jnode *mk(parser *P, int kind)
{
    jnode *n = ja_alloc(&P->t->ar, sizeof *n);
    if (!n) { oom(P); return NULL; }
    n->kind = (uint8_t)kind;
    n->line = cur(P)->line;
    n->col = cur(P)->col;
    return n;
}

static int expect_op(parser *P, int op, const char *what)
{
    if (!is_op(P, op)) return ps_fail(P, "expected '%s'", what);
    adv(P);
    return 0;
}

/* a name token as a NUL-terminated string in the arena */
static const char *take_name(parser *P, const char *what)
{
    if (cur(P)->type != TK_NAME) { ps_fail(P, "expected %s", what); return NULL; }
    const char *s = ja_strdup(&P->t->ar, cur(P)->s, cur(P)->n);
    if (!s) { oom(P); return NULL; }
    adv(P);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Expressions */
static jnode *expr(parser *P);              /* with inline if */
static jnode *expr_noif(parser *P);         /* or-level */
static jnode *unary(parser *P, int with_filter);
static jnode *tuple_expr(parser *P, int with_if, int names_only, int explicit);

static int call_args(parser *P, jnode **first)
{
    /* after '(' : a, b, k=v ... ')' */
    jnode *last = NULL;
    *first = NULL;
    while (!is_op(P, OP_RPAREN)) {
        if (last && expect_op(P, OP_COMMA, ",") < 0) return -1;
        if (is_op(P, OP_RPAREN)) break;
        jnode *a;
        if (cur(P)->type == TK_NAME && P->i + 1 < P->n && P->k[P->i + 1].type == TK_OP && P->k[P->i + 1].op == OP_ASSIGN) {
            if (!(a = mk(P, N_KWARG)) || !(a->s = take_name(P, "a name"))) return -1;
            adv(P);
            if (!(a->a = expr(P))) return -1;
        } else if (!(a = expr(P))) return -1;
        if (last) last->next = a; else *first = a;
        last = a;
    }
    adv(P);
    return 0;
}

static jnode *subscript(parser *P)
{
    /* [a], [a:b], [a:b:c], [:], [::-1] */
    jnode *parts[3] = { NULL, NULL, NULL };
    int k = 0, slice = 0;
    for (;;) {
        if (!is_op(P, OP_COLON) && !is_op(P, OP_RBRACKET)) {
            if (!(parts[k] = expr(P))) return NULL;
        }
        if (is_op(P, OP_COLON) && k < 2) { slice = 1; k++; adv(P); continue; }
        break;
    }
    if (expect_op(P, OP_RBRACKET, "]") < 0) return NULL;
    if (!slice) {
        if (!parts[0]) { ps_fail(P, "an empty subscript"); return NULL; }
        return parts[0];
    }
    jnode *s = mk(P, N_SLICE);
    if (s) { s->a = parts[0]; s->b = parts[1]; s->c = parts[2]; }
    return s;
}

static jnode *postfix(parser *P, jnode *n)
{
    for (;;) {
        jnode *m;
        if (is_op(P, OP_DOT)) {
            adv(P);
            if (cur(P)->type == TK_INT) {   /* x.0 is x[0] */
                if (!(m = mk(P, N_GETITEM)) || !(m->b = mk(P, N_CONST))) return NULL;
                m->b->v = jv_int(cur(P)->i);
                adv(P);
            } else if (!(m = mk(P, N_GETATTR)) || !(m->s = take_name(P, "a name after '.'"))) return NULL;
            m->a = n;
        } else if (is_op(P, OP_LBRACKET)) {
            adv(P);
            if (!(m = mk(P, N_GETITEM)) || !(m->b = subscript(P))) return NULL;
            m->a = n;
        } else if (is_op(P, OP_LPAREN)) {
            adv(P);
            if (!(m = mk(P, N_CALL)) || call_args(P, &m->b) < 0) return NULL;
            m->a = n;
        } else return n;
        n = m;
    }
}

static jnode *filter_one(parser *P, jnode *operand)
{
    jnode *f = mk(P, N_FILTER);
    if (!f || !(f->s = take_name(P, "a filter name"))) return NULL;
    while (is_op(P, OP_DOT)) {   /* dotted filter names: kept whole */
        adv(P);
        const char *rest = take_name(P, "a name");
        if (!rest) return NULL;
        size_t a = strlen(f->s), b = strlen(rest);
        char *s = ja_alloc(&P->t->ar, a + b + 2);
        if (!s) { oom(P); return NULL; }
        memcpy(s, f->s, a); s[a] = '.'; memcpy(s + a + 1, rest, b);
        f->s = s;
    }
    f->a = operand;
    if (is_op(P, OP_LPAREN)) { adv(P); if (call_args(P, &f->b) < 0) return NULL; }
    return f;
}

static jnode *test_one(parser *P, jnode *operand)
{
    jnode *t = mk(P, N_TEST);
    if (!t) return NULL;
    adv(P);   /* is */
    if (is_name(P, "not")) { t->neg = 1; adv(P); }
    if (!(t->s = take_name(P, "a test name"))) return NULL;
    t->a = operand;
    const jtoken *k = cur(P);
    if (is_op(P, OP_LPAREN)) { adv(P); if (call_args(P, &t->b) < 0) return NULL; }
    else if ((k->type == TK_NAME || k->type == TK_STRING || k->type == TK_INT || k->type == TK_FLOAT ||
              is_op(P, OP_LBRACKET) || is_op(P, OP_LBRACE)) &&
             !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        /* `is divisibleby 3`: one argument without parentheses */
        if (is_name(P, "is")) { ps_fail(P, "you cannot chain tests with 'is'"); return NULL; }
        if (!(t->b = unary(P, 0))) return NULL;
    }
    return t;
}

static jnode *filters(parser *P, jnode *n)
{
    for (;;) {
        if (is_op(P, OP_PIPE)) { adv(P); n = filter_one(P, n); }
        else if (is_name(P, "is")) n = test_one(P, n);
        else if (is_op(P, OP_LPAREN)) {
            jnode *m = mk(P, N_CALL);
            adv(P);
            if (!m || call_args(P, &m->b) < 0) return NULL;
            m->a = n;
            n = m;
        } else return n;
        if (!n) return NULL;
    }
}

static jnode *literal_seq(parser *P, int kind, int close)
{
    jnode *n = mk(P, kind), *last = NULL;
    if (!n) return NULL;
    adv(P);
    while (!is_op(P, close)) {
        if (last && expect_op(P, OP_COMMA, ",") < 0) return NULL;
        if (is_op(P, close)) break;
        jnode *item = expr(P);
        if (!item) return NULL;
        if (kind == N_DICT) {
            jnode *pair = mk(P, N_PAIR);
            if (!pair || expect_op(P, OP_COLON, ":") < 0 || !(pair->b = expr(P))) return NULL;
            pair->a = item;
            item = pair;
        }
        if (last) last->next = item; else n->a = item;
        last = item;
    }
    adv(P);
    return n;
}

static jnode *primary(parser *P)
{
    const jtoken *k = cur(P);
    jnode *n;
    if (k->type == TK_NAME) {
        static const char *const w[] = { "true", "false", "none", "True", "False", "None" };
        for (int i = 0; i < 6; i++)
            if (is_name(P, w[i])) {
                if (!(n = mk(P, N_CONST))) return NULL;
                n->v = i % 3 == 2 ? jv_none() : jv_bool(i % 3 == 0);
                adv(P);
                return n;
            }
        if (!(n = mk(P, N_NAME)) || !(n->s = take_name(P, "a name"))) return NULL;
        return n;
    }
    if (k->type == TK_STRING) {
        if (!(n = mk(P, N_CONST))) return NULL;
        /* adjacent literals join: "a" "b" */
        jbuf b;
        jb_init(&b, &P->t->ar);
        while (cur(P)->type == TK_STRING) { jb_add(&b, cur(P)->s, cur(P)->n); adv(P); }
        if (b.over) { oom(P); return NULL; }
        n->v = jv_str(b.p, b.n);
        return n;
    }
    if (k->type == TK_INT || k->type == TK_FLOAT) {
        if (!(n = mk(P, N_CONST))) return NULL;
        n->v = k->type == TK_INT ? jv_int(k->i) : jv_float(k->f);
        adv(P);
        return n;
    }
    if (is_op(P, OP_LPAREN)) {
        adv(P);
        if (is_op(P, OP_RPAREN)) { adv(P); return mk(P, N_TUPLE); }
        if (!(n = tuple_expr(P, 1, 0, 1))) return NULL;
        if (expect_op(P, OP_RPAREN, ")") < 0) return NULL;
        return n;
    }
    if (is_op(P, OP_LBRACKET)) return literal_seq(P, N_LIST, OP_RBRACKET);
    if (is_op(P, OP_LBRACE)) return literal_seq(P, N_DICT, OP_RBRACE);
    ps_fail(P, k->type == TK_VAR_END || k->type == TK_BLOCK_END || k->type == TK_EOF ? "an expression ends too soon"
                                                                                    : "unexpected token in an expression");
    return NULL;
}

static jnode *unary(parser *P, int with_filter)
{
    if (++P->depth > JINJA_MAX_DEPTH) { ps_fail(P, "expressions nested deeper than %d", JINJA_MAX_DEPTH); return NULL; }
    jnode *n;
    if (is_op(P, OP_SUB) || is_op(P, OP_ADD)) {
        if (!(n = mk(P, is_op(P, OP_SUB) ? N_NEG : N_POS))) return NULL;
        adv(P);
        if (!(n->a = unary(P, 0))) return NULL;
    } else if (!(n = primary(P))) return NULL;
    n = postfix(P, n);
    if (n && with_filter) n = filters(P, n);
    P->depth--;
    return n;
}

static jnode *binop(parser *P, int op, jnode *a, jnode *b)
{
    if (!a || !b) return NULL;
    jnode *n = mk(P, N_BINOP);
    if (n) { n->op = (uint8_t)op; n->a = a; n->b = b; }
    return n;
}

static jnode *power(parser *P)
{
    jnode *n = unary(P, 1);
    while (n && is_op(P, OP_POW)) { adv(P); n = binop(P, OP_POW, n, unary(P, 1)); }
    return n;
}

static jnode *mul(parser *P)
{
    jnode *n = power(P);
    while (n && (is_op(P, OP_MUL) || is_op(P, OP_DIV) || is_op(P, OP_FLOORDIV) || is_op(P, OP_MOD))) {
        int op = cur(P)->op;
        adv(P);
        n = binop(P, op, n, power(P));
    }
    return n;
}

static jnode *concat(parser *P)
{
    jnode *n = mul(P);
    while (n && is_op(P, OP_TILDE)) { adv(P); n = binop(P, OP_TILDE, n, mul(P)); }
    return n;
}

static jnode *add(parser *P)
{
    jnode *n = concat(P);
    while (n && (is_op(P, OP_ADD) || is_op(P, OP_SUB))) {
        int op = cur(P)->op;
        adv(P);
        n = binop(P, op, n, concat(P));
    }
    return n;
}

static jnode *compare(parser *P)
{
    jnode *first = add(P), *last = NULL, *cmp = NULL;
    if (!first) return NULL;
    for (;;) {
        int op = 0;
        const jtoken *k = cur(P);
        if (k->type == TK_OP && k->op >= OP_EQ && k->op <= OP_GE) { op = k->op; adv(P); }
        else if (is_name(P, "in")) { op = OP_IN; adv(P); }
        else if (is_name(P, "not") && next_is_name(P, "in")) { op = OP_NOTIN; adv(P); adv(P); }
        else break;
        jnode *o = mk(P, N_OPERAND);
        if (!o || !(o->a = add(P))) return NULL;
        o->op = (uint8_t)op;
        if (!cmp) { if (!(cmp = mk(P, N_COMPARE))) return NULL; cmp->a = first; cmp->b = o; }
        else last->next = o;
        last = o;
    }
    return cmp ? cmp : first;
}

static jnode *not_expr(parser *P)
{
    if (is_name(P, "not")) {
        if (++P->depth > JINJA_MAX_DEPTH) { ps_fail(P, "expressions nested deeper than %d", JINJA_MAX_DEPTH); return NULL; }
        jnode *n = mk(P, N_NOT);
        adv(P);
        if (!n || !(n->a = not_expr(P))) return NULL;
        P->depth--;
        return n;
    }
    return compare(P);
}

static jnode *logic(parser *P, int kind)
{
    jnode *n = kind == N_OR ? logic(P, N_AND) : not_expr(P);
    while (n && is_name(P, kind == N_OR ? "or" : "and")) {
        jnode *m = mk(P, kind);
        adv(P);
        if (!m || !(m->b = kind == N_OR ? logic(P, N_AND) : not_expr(P))) return NULL;
        m->a = n;
        n = m;
    }
    return n;
}

static jnode *expr_noif(parser *P) { return logic(P, N_OR); }

static jnode *expr(parser *P)
{
    jnode *n = expr_noif(P);
    while (n && is_name(P, "if")) {
        jnode *c = mk(P, N_CONDEXPR);
        adv(P);
        if (!c || !(c->b = expr_noif(P))) return NULL;
        if (is_name(P, "else")) { adv(P); if (!(c->c = expr(P))) return NULL; }
        c->a = n;
        n = c;
    }
    return n;
}

/* a, b, c as a tuple (one expression without a comma is itself); names_only
 * for the targets of for and set; explicit when inside parentheses. */
static jnode *tuple_expr(parser *P, int with_if, int names_only, int explicit)
{
    jnode *first = NULL, *last = NULL;
    int n = 0, comma = 0;
    for (;;) {
        if (n && (cur(P)->type == TK_VAR_END || cur(P)->type == TK_BLOCK_END || is_op(P, OP_RPAREN) ||
                  is_name(P, "in") || is_op(P, OP_ASSIGN)))
            break;
        jnode *e;
        if (names_only) {
            if (!(e = mk(P, N_NAME)) || !(e->s = take_name(P, "a name"))) return NULL;
            if (is_op(P, OP_DOT)) {   /* set ns.attr = ... */
                adv(P);
                jnode *g = mk(P, N_GETATTR);
                if (!g || !(g->s = take_name(P, "an attribute name"))) return NULL;
                g->a = e;
                e = g;
            }
        } else if (!(e = with_if ? expr(P) : expr_noif(P))) return NULL;
        if (last) last->next = e; else first = e;
        last = e;
        n++;
        if (!is_op(P, OP_COMMA)) break;
        comma = 1;
        adv(P);
    }
    if (!comma && n == 1) return first;
    (void)explicit;
    jnode *t = mk(P, N_TUPLE);
    if (t) t->a = first;
    return t;
}

/* ------------------------------------------------------------------------ */
/* Statements */
static jnode *body(parser *P, const char *const *ends);

static int block_end(parser *P)
{
    if (cur(P)->type != TK_BLOCK_END) return ps_fail(P, "expected the end of the tag ('%%}')");
    adv(P);
    return 0;
}

/* at "{% name": consume both when the tag is one of ends */
static int end_tag(parser *P, const char *name)
{
    adv(P);   /* {% */
    if (!is_name(P, name)) return ps_fail(P, "expected '%s'", name);
    adv(P);
    return block_end(P);
}

static jnode *st_if(parser *P)
{
    static const char *const ends[] = { "elif", "else", "endif", NULL }, *const e2[] = { "endif", NULL };
    jnode *first = NULL, *last = NULL;
    /* if, then each elif: a chain of N_IF through c, made in a loop (a
     * template may have any number of elifs) */
    do {
        jnode *n = mk(P, N_IF);
        adv(P);   /* if / elif */
        if (!n || !(n->a = expr(P)) || block_end(P) < 0 || !(n->b = body(P, ends))) return NULL;
        if (last) last->c = n; else first = n;
        last = n;
        adv(P);   /* {% */
    } while (is_name(P, "elif"));
    if (is_name(P, "else")) {
        adv(P);
        if (block_end(P) < 0 || !(last->c = body(P, e2))) return NULL;
        adv(P);
    }
    adv(P);   /* endif */
    return block_end(P) < 0 ? NULL : first;
}

static jnode *st_for(parser *P)
{
    static const char *const ends[] = { "else", "endfor", NULL }, *const e2[] = { "endfor", NULL };
    jnode *n = mk(P, N_FOR);
    adv(P);
    if (!n || !(n->a = tuple_expr(P, 0, 1, 0))) return NULL;
    if (n->a->kind == N_GETATTR) { ps_fail(P, "a loop target must be a name"); return NULL; }
    if (!is_name(P, "in")) { ps_fail(P, "expected 'in'"); return NULL; }
    adv(P);
    if (!(n->b = tuple_expr(P, 0, 0, 0))) return NULL;
    if (is_name(P, "if")) { adv(P); if (!(n->e = expr(P))) return NULL; }
    if (is_name(P, "recursive")) {
        ps_fail(P, "recursive loops are not supported");
        P->t->st = MOR_E_UNSUPPORTED;
        return NULL;
    }
    if (block_end(P) < 0 || !(n->c = body(P, ends))) return NULL;
    adv(P);
    if (is_name(P, "else")) {
        adv(P);
        if (block_end(P) < 0 || !(n->d = body(P, e2))) return NULL;
        adv(P);
    }
    adv(P);
    return block_end(P) < 0 ? NULL : n;
}

/* a filter chain for {% filter %} and {% set x | f %}: innermost operand NULL */
static jnode *filter_chain(parser *P)
{
    jnode *f = NULL;
    do {
        if (f && is_op(P, OP_PIPE)) adv(P);
        if (!(f = filter_one(P, f))) return NULL;
    } while (is_op(P, OP_PIPE));
    return f;
}

static jnode *st_set(parser *P)
{
    static const char *const ends[] = { "endset", NULL };
    jnode *n = mk(P, N_SET);
    adv(P);
    if (!n || !(n->a = tuple_expr(P, 0, 1, 0))) return NULL;
    if (is_op(P, OP_ASSIGN)) {
        adv(P);
        if (!(n->b = tuple_expr(P, 1, 0, 0))) return NULL;
        return block_end(P) < 0 ? NULL : n;
    }
    n->kind = N_SET_BLOCK;
    if (n->a->kind != N_NAME) { ps_fail(P, "a block set takes one name"); return NULL; }
    if (is_op(P, OP_PIPE)) { adv(P); if (!(n->c = filter_chain(P))) return NULL; }
    if (block_end(P) < 0 || !(n->b = body(P, ends))) return NULL;
    return end_tag(P, "endset") < 0 ? NULL : n;
}

static int params(parser *P, jnode **first)
{
    jnode *last = NULL;
    *first = NULL;
    if (expect_op(P, OP_LPAREN, "(") < 0) return -1;
    while (!is_op(P, OP_RPAREN)) {
        if (last && expect_op(P, OP_COMMA, ",") < 0) return -1;
        if (is_op(P, OP_RPAREN)) break;
        jnode *p = mk(P, N_NAME);
        if (!p || !(p->s = take_name(P, "a parameter name"))) return -1;
        if (is_op(P, OP_ASSIGN)) { adv(P); if (!(p->a = expr(P))) return -1; }
        if (last) last->next = p; else *first = p;
        last = p;
    }
    adv(P);
    return 0;
}

static jnode *st_macro(parser *P)
{
    static const char *const ends[] = { "endmacro", NULL };
    jnode *n = mk(P, N_MACRO);
    adv(P);
    if (!n || !(n->s = take_name(P, "a macro name")) || params(P, &n->a) < 0 || block_end(P) < 0 ||
        !(n->b = body(P, ends)))
        return NULL;
    return end_tag(P, "endmacro") < 0 ? NULL : n;
}

static jnode *st_call(parser *P)
{
    static const char *const ends[] = { "endcall", NULL };
    jnode *n = mk(P, N_CALL_BLOCK);
    adv(P);
    if (!n) return NULL;
    if (is_op(P, OP_LPAREN) && params(P, &n->b) < 0) return NULL;
    if (!(n->a = expr(P))) return NULL;
    if (n->a->kind != N_CALL) { ps_fail(P, "a call block needs a call"); return NULL; }
    if (block_end(P) < 0 || !(n->c = body(P, ends))) return NULL;
    return end_tag(P, "endcall") < 0 ? NULL : n;
}

static jnode *st_simple(parser *P, int kind, const char *end)
{
    const char *const ends[] = { end, NULL };
    jnode *n = mk(P, kind);
    int gen = is_name(P, "generation");
    adv(P);
    if (!n) return NULL;
    if (kind == N_FILTER_BLOCK && !gen && !(n->a = filter_chain(P))) return NULL;
    if (block_end(P) < 0) return NULL;
    if (!end) return n;
    if (!(n->b = body(P, ends))) return NULL;
    return end_tag(P, end) < 0 ? NULL : n;
}

static jnode *statement(parser *P)
{
    adv(P);   /* {% */
    if (is_name(P, "if")) return st_if(P);
    if (is_name(P, "for")) return st_for(P);
    if (is_name(P, "set")) return st_set(P);
    if (is_name(P, "macro")) return st_macro(P);
    if (is_name(P, "call")) return st_call(P);
    if (is_name(P, "filter")) return st_simple(P, N_FILTER_BLOCK, "endfilter");
    if (is_name(P, "break")) return st_simple(P, N_BREAK, NULL);
    if (is_name(P, "continue")) return st_simple(P, N_CONTINUE, NULL);
    if (is_name(P, "generation")) {
        /* transformers' generation block (assistant masks): its body renders */
        jnode *n = st_simple(P, N_FILTER_BLOCK, "endgeneration");
        if (n) { n->kind = N_BODY; n->a = n->b->a; n->b = NULL; }
        return n;
    }
    static const char *const unsupported[] = { "extends", "include", "import", "from", "block", "raw", "with",
                                               "autoescape", "do", NULL };
    for (int i = 0; unsupported[i]; i++)
        if (is_name(P, unsupported[i])) {
            ps_fail(P, "the tag '%s' is not supported", unsupported[i]);
            P->t->st = MOR_E_UNSUPPORTED;
            return NULL;
        }
    if (cur(P)->type == TK_NAME) ps_fail(P, "unknown tag '%.*s'", (int)cur(P)->n, cur(P)->s);
    else ps_fail(P, "expected a tag name");
    return NULL;
}

static int is_end(parser *P, const char *const *ends)
{
    if (cur(P)->type != TK_BLOCK_BEGIN || P->i + 1 >= P->n) return 0;
    const jtoken *k = &P->k[P->i + 1];
    for (; ends && *ends; ends++)
        if (k->type == TK_NAME && k->n == strlen(*ends) && !memcmp(k->s, *ends, k->n)) return 1;
    return 0;
}

/* Statements up to one of ends (left at its "{%"), or to the end (ends NULL). */
static jnode *body(parser *P, const char *const *ends)
{
    if (++P->depth > JINJA_MAX_DEPTH) { ps_fail(P, "blocks nested deeper than %d", JINJA_MAX_DEPTH); return NULL; }
    jnode *b = mk(P, N_BODY), *last = NULL;
    if (!b) return NULL;
    for (;;) {
        const jtoken *k = cur(P);
        jnode *s = NULL;
        if (k->type == TK_EOF) {
            if (ends) { ps_fail(P, "the template ends inside a block: expected '%s'", ends[0]); return NULL; }
            break;
        }
        if (is_end(P, ends)) break;
        if (k->type == TK_TEXT) {
            if (!(s = mk(P, N_TEXT))) return NULL;
            s->s = k->s;
            s->n = k->n;
            adv(P);
        } else if (k->type == TK_VAR_BEGIN) {
            if (!(s = mk(P, N_OUTPUT))) return NULL;
            adv(P);
            if (!(s->a = tuple_expr(P, 1, 0, 0))) return NULL;
            if (cur(P)->type != TK_VAR_END) { ps_fail(P, "expected the end of the expression ('}}')"); return NULL; }
            adv(P);
        } else if (k->type == TK_BLOCK_BEGIN) {
            if (!(s = statement(P))) return NULL;
        } else { ps_fail(P, "unexpected token"); return NULL; }
        if (last) last->next = s; else b->a = s;
        last = s;
    }
    P->depth--;
    return b;
}

int jinja_parse(jtemplate *t, const jtoken *toks, size_t n_toks)
{
    parser P = { t, toks, n_toks, 0, 0 };
    t->root = body(&P, NULL);
    if (t->root && P.depth != 0) return ps_fail(&P, "unbalanced blocks");
    return t->root ? 0 : -1;
}
