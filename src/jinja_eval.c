/* jinja_eval.c - rendering the tree: statements write to the render's
 * output, expressions give values, with jinja2's meanings (Python's
 * arithmetic and comparisons, `and`/`or` giving an operand, undefined names
 * empty and false, a `set` inside a loop body local to its iteration, a
 * macro seeing the scope it was defined in).
 *
 * Bounded: every node evaluated is a step (JINJA_MAX_STEPS), nesting and
 * macro calls have limits (JINJA_MAX_DEPTH, JINJA_MAX_CALLS), and every
 * byte comes from the render's capped arena; each refusal is
 * MOR_E_UNSUPPORTED with a message, never an exhaustion. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jinja.h"

int jx_fail(jctx *c, mor_status st, const char *fmt, ...)
{
    if (c->st != MOR_OK) return -1;   /* the first error is the one reported */
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    c->st = st;
    snprintf(c->msg, sizeof c->msg, "template error at line %d: %s", c->line, m);
    return -1;
}

int jx_nomem(jctx *c)
{
    if (c->ar->nomem) return jx_fail(c, MOR_E_NOMEM, "out of memory");
    return jx_fail(c, MOR_E_UNSUPPORTED, "the render needs more than its %zu MiB of memory (output included)",
                   JINJA_MAX_BYTES >> 20);
}

/* one step of the budget, one level of nesting */
static int enter(jctx *c, const jnode *n)
{
    c->line = n->line;
    if (++c->steps > JINJA_MAX_STEPS)
        return jx_fail(c, MOR_E_UNSUPPORTED, "the template ran over its budget of %d steps", JINJA_MAX_STEPS);
    if (++c->depth > JINJA_MAX_DEPTH)
        return jx_fail(c, MOR_E_UNSUPPORTED, "evaluation nested deeper than %d", JINJA_MAX_DEPTH);
    if (c->ar->over) return jx_nomem(c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Names */
static jval lookup(jctx *c, jscope *s, const char *name)
{
    jval k = jv_cstr(name);
    for (; s; s = s->parent) {
        jval *v = jd_get(&s->vars, k);
        if (v) return *v;
    }
    jval g;
    if (jb_global(name, &g)) return g;
    /* jinja2's message, should the value be used */
    size_t n = strlen(name);
    char *m = ja_alloc(c->ar, n + 20);
    if (m) { memcpy(m, "'", 1); memcpy(m + 1, name, n); memcpy(m + 1 + n, "' is undefined", 15); }
    return jv_undef(m ? m : "undefined");
}

static int bind(jctx *c, jscope *s, const char *name, jval v)
{
    if (jd_set(c->ar, &s->vars, jv_cstr(name), v) < 0) return jx_nomem(c);
    return 0;
}

jscope *jx_scope(jctx *c, jscope *parent)
{
    jscope *s = ja_alloc(c->ar, sizeof *s);
    if (!s) { jx_nomem(c); return NULL; }
    s->parent = parent;
    return s;
}

/* target = value: a name, a tuple of names (unpacked) or ns.attr */
int jx_assign(jctx *c, jscope *s, const jnode *t, jval v)
{
    if (t->kind == N_NAME) return bind(c, s, t->s, v);
    if (t->kind == N_GETATTR) {
        jval ns = lookup(c, s, t->a->s);
        if (ns.t != JV_NS) return jx_fail(c, MOR_E_INVALID_ARG, "cannot assign attribute on non-namespace object");
        return jd_set(c->ar, ns.u.d, jv_cstr(t->s), v) < 0 ? jx_nomem(c) : 0;
    }
    size_t n = 0;
    for (const jnode *e = t->a; e; e = e->next) n++;
    jlist *items = NULL;
    if (jb_iter(c, v, &items) < 0) return -1;
    if (items->n != n)
        return jx_fail(c, MOR_E_INVALID_ARG, "cannot unpack %zu values into %zu names", items->n, n);
    size_t i = 0;
    for (const jnode *e = t->a; e; e = e->next)
        if (jx_assign(c, s, e, items->v[i++]) < 0) return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Arithmetic */
static int type_error(jctx *c, const char *op, jval a, jval b)
{
    if (!strcmp(op, "+") && a.t == JV_STR)
        return jx_fail(c, MOR_E_INVALID_ARG, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    return jx_fail(c, MOR_E_INVALID_ARG, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
                   jv_type_name(b));
}

static int undefined_error(jctx *c, jval v)
{
    return jx_fail(c, MOR_E_INVALID_ARG, "%s", v.u.s.p ? v.u.s.p : "undefined value");
}

static int repeat(jctx *c, jval seq, int64_t k, jval *out)
{
    size_t n = seq.t == JV_STR ? seq.u.s.n : seq.u.l->n;
    if (k <= 0 || !n) { *out = seq.t == JV_STR ? jv_str("", 0) : jv_list(c->ar, 0); out->tuple = seq.tuple; return 0; }
    if ((uint64_t)k > JINJA_MAX_BYTES / n) return jx_nomem(c);
    if (seq.t == JV_STR) {
        jbuf b;
        jb_init(&b, c->ar);
        for (int64_t i = 0; i < k; i++) jb_add(&b, seq.u.s.p, n);
        if (b.over) return jx_nomem(c);
        *out = jv_str(b.p, b.n);
        return 0;
    }
    *out = jv_list(c->ar, n * (size_t)k);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    out->tuple = seq.tuple;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < n; j++) jl_push(c->ar, out->u.l, seq.u.l->v[j]);
    return 0;
}

/* Markup + str escapes the str (markupsafe); the result is Markup */
static jval escaped(jctx *c, jval s)
{
    jbuf b;
    jb_init(&b, c->ar);
    jv_html_escape(&b, s.u.s.p, s.u.s.n);
    jval r = jv_str(b.over ? "" : b.p, b.over ? 0 : b.n);
    r.markup = 1;
    return r;
}

static int concat_seq(jctx *c, jval a, jval b, jval *out)
{
    if (a.t == JV_STR && a.markup != b.markup) {
        if (a.markup) b = escaped(c, b); else a = escaped(c, a);
        if (concat_seq(c, a, b, out) < 0) return -1;
        out->markup = 1;
        return 0;
    }
    if (a.t == JV_STR) {
        char *p = ja_alloc(c->ar, a.u.s.n + b.u.s.n + 1);
        if (!p) return jx_nomem(c);
        memcpy(p, a.u.s.p, a.u.s.n);
        memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
        *out = jv_str(p, a.u.s.n + b.u.s.n);
        out->markup = a.markup;
        return 0;
    }
    *out = jv_list(c->ar, a.u.l->n + b.u.l->n);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    out->tuple = a.tuple;
    for (size_t i = 0; i < a.u.l->n; i++) jl_push(c->ar, out->u.l, a.u.l->v[i]);
    for (size_t i = 0; i < b.u.l->n; i++) jl_push(c->ar, out->u.l, b.u.l->v[i]);
    return 0;
}

static int int_op(jctx *c, int op, int64_t x, int64_t y, jval *out)
{
    int64_t r = 0;
    switch (op) {
    case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto big; break;
    case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto big; break;
    case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto big; break;
    case OP_FLOORDIV: case OP_MOD:
        if (!y) return jx_fail(c, MOR_E_INVALID_ARG, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) goto big;
        r = op == OP_FLOORDIV ? x / y : x % y;
        if (op == OP_FLOORDIV && (x % y) && ((x < 0) != (y < 0))) r--;
        if (op == OP_MOD && r && ((r < 0) != (y < 0))) r += y;
        break;
    case OP_POW:
        if (y < 0) { *out = jv_float(pow((double)x, (double)y)); return 0; }
        r = 1;
        for (int64_t i = 0; i < y; i++) {
            if (__builtin_mul_overflow(r, x, &r)) goto big;
            if (r == 0 || r == 1 || (r == -1 && x == -1)) { if (x == -1) r = (y % 2) ? -1 : 1; break; }
        }
        break;
    }
    *out = jv_int(r);
    return 0;
big:
    return jx_fail(c, MOR_E_UNSUPPORTED, "an integer beyond 64 bits");
}

static int float_op(jctx *c, int op, double x, double y, jval *out)
{
    double r;
    switch (op) {
    case OP_ADD: r = x + y; break;
    case OP_SUB: r = x - y; break;
    case OP_MUL: r = x * y; break;
    case OP_DIV: case OP_FLOORDIV: case OP_MOD:
        if (y == 0) return jx_fail(c, MOR_E_INVALID_ARG, "float division by zero");
        if (op == OP_DIV) r = x / y;
        else if (op == OP_FLOORDIV) r = floor(x / y);
        else { r = fmod(x, y); if (r != 0 && ((r < 0) != (y < 0))) r += y; }
        break;
    default: r = pow(x, y); break;
    }
    *out = jv_float(r);
    return 0;
}

static int arith(jctx *c, int op, jval a, jval b, jval *out)
{
    static const char *const names[] = { "", "+", "-", "*", "/", "//", "%", "**" };
    if (op == OP_TILDE) {
        jbuf t;
        jb_init(&t, c->ar);
        jv_to_str(&t, a);
        jv_to_str(&t, b);
        if (t.over) return jx_nomem(c);
        *out = jv_str(t.p, t.n);
        return 0;
    }
    if (a.t == JV_UNDEF) return undefined_error(c, a);
    if (b.t == JV_UNDEF) return undefined_error(c, b);
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT && op != OP_DIV) return int_op(c, op, a.u.i, b.u.i, out);
        return float_op(c, op, jv_num(a), jv_num(b), out);
    }
    if (op == OP_ADD && ((a.t == JV_STR && b.t == JV_STR) ||
                         (a.t == JV_LIST && b.t == JV_LIST && a.tuple == b.tuple && !a.gen && !b.gen)))
        return concat_seq(c, a, b, out);
    if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL))
        return repeat(c, a, b.u.i, out);
    if (op == OP_MUL && (b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL))
        return repeat(c, b, a.u.i, out);
    return type_error(c, names[op], a, b);
}

/* ------------------------------------------------------------------------ */
/* Comparisons */
static int contains(jctx *c, jval item, jval seq, int *out)
{
    if (seq.t == JV_STR) {
        if (item.t != JV_STR)
            return jx_fail(c, MOR_E_INVALID_ARG, "'in <string>' requires string as left operand, not %s",
                           jv_type_name(item));
        *out = item.u.s.n == 0 || memmem(seq.u.s.p, seq.u.s.n, item.u.s.p, item.u.s.n) != NULL;
        return 0;
    }
    if (seq.t == JV_DICT || seq.t == JV_NS) { *out = jd_get(seq.u.d, item) != NULL; return 0; }
    if (seq.t == JV_UNDEF) { *out = 0; return 0; }
    if (seq.t != JV_LIST)
        return jx_fail(c, MOR_E_INVALID_ARG, "argument of type '%s' is not iterable", jv_type_name(seq));
    *out = 0;
    for (size_t i = 0; i < seq.u.l->n && !*out; i++) *out = jv_eq(item, seq.u.l->v[i]);
    return 0;
}

static int compare_one(jctx *c, int op, jval a, jval b, int *out)
{
    if (op == OP_EQ) { *out = jv_eq(a, b); return 0; }
    if (op == OP_NE) { *out = !jv_eq(a, b); return 0; }
    if (op == OP_IN || op == OP_NOTIN) {
        if (contains(c, a, b, out) < 0) return -1;
        if (op == OP_NOTIN) *out = !*out;
        return 0;
    }
    if (a.t == JV_UNDEF) return undefined_error(c, a);
    if (b.t == JV_UNDEF) return undefined_error(c, b);
    int r = jv_cmp(a, b);
    static const char *const names[] = { "<", "<=", ">", ">=" };
    if (r == -2)
        return jx_fail(c, MOR_E_INVALID_ARG, "'%s' not supported between instances of '%s' and '%s'",
                       names[op - OP_LT], jv_type_name(a), jv_type_name(b));
    *out = op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0;
    return 0;
}

static int eval_compare(jctx *c, jscope *s, const jnode *n, jval *out)
{
    jval left, right;
    if (jx_eval(c, s, n->a, &left) < 0) return -1;
    for (const jnode *o = n->b; o; o = o->next) {
        int r = 0;
        if (jx_eval(c, s, o->a, &right) < 0 || compare_one(c, o->op, left, right, &r) < 0) return -1;
        if (!r) { *out = jv_bool(0); return 0; }
        left = right;
    }
    *out = jv_bool(1);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Subscripts */
static int64_t clamp_index(int64_t i, int64_t n, int64_t lo, int64_t hi)
{
    if (i < 0) i += n;
    return i < lo ? lo : i > hi ? hi : i;
}

static int slice(jctx *c, jval obj, const jval *part, jval *out)
{
    int64_t step = part[2].t == JV_NONE ? 1 : part[2].u.i;
    if (!step) return jx_fail(c, MOR_E_INVALID_ARG, "slice step cannot be zero");
    int str = obj.t == JV_STR;
    int64_t n = str ? (int64_t)ju_len(obj.u.s.p, obj.u.s.n) : (int64_t)obj.u.l->n;
    int64_t st, en;
    if (step > 0) {
        st = part[0].t == JV_NONE ? 0 : clamp_index(part[0].u.i, n, 0, n);
        en = part[1].t == JV_NONE ? n : clamp_index(part[1].u.i, n, 0, n);
    } else {
        st = part[0].t == JV_NONE ? n - 1 : clamp_index(part[0].u.i, n, -1, n - 1);
        en = part[1].t == JV_NONE ? -1 : clamp_index(part[1].u.i, n, -1, n - 1);
    }
    jbuf b;
    jb_init(&b, c->ar);
    *out = jv_list(c->ar, 0);
    out->tuple = obj.tuple;
    for (int64_t i = st; step > 0 ? i < en : i > en; i += step) {
        if (str) {
            size_t o = ju_off(obj.u.s.p, obj.u.s.n, (size_t)i), e = ju_off(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
            jb_add(&b, obj.u.s.p + o, e - o);
        } else if (out->t == JV_LIST) jl_push(c->ar, out->u.l, obj.u.l->v[i]);
    }
    if (str) *out = jv_str(b.p, b.n);
    return c->ar->over || b.over ? jx_nomem(c) : 0;
}

static jval missing(jctx *c, jval obj, jval key)
{
    /* an undefined value whose message says what was missing */
    jbuf b;
    jb_init(&b, c->ar);
    if (key.t == JV_STR) {
        jb_addc(&b, '\'');
        jb_adds(&b, jv_type_name(obj));
        jb_adds(&b, " object' has no attribute '");
        jb_add(&b, key.u.s.p, key.u.s.n);
        jb_addc(&b, '\'');
    } else {
        jv_repr(&b, obj.t == JV_LIST || obj.t == JV_DICT ? jv_cstr(jv_type_name(obj)) : obj);
        jb_adds(&b, " has no element ");
        jv_repr(&b, key);
    }
    jb_addc(&b, 0);
    return jv_undef(b.over ? "undefined" : b.p);
}

static int getitem(jctx *c, jval obj, jval key, jval *out)
{
    if (obj.t == JV_UNDEF) return undefined_error(c, obj);
    if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t n = obj.t == JV_STR ? (int64_t)ju_len(obj.u.s.p, obj.u.s.n) : (int64_t)obj.u.l->n;
        int64_t i = key.u.i < 0 ? key.u.i + n : key.u.i;
        if (i < 0 || i >= n) { *out = missing(c, obj, key); return 0; }
        if (obj.t == JV_LIST) { *out = obj.u.l->v[i]; return 0; }
        size_t o = ju_off(obj.u.s.p, obj.u.s.n, (size_t)i), e = ju_off(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
        *out = jv_str(obj.u.s.p + o, e - o);
        return 0;
    }
    if (obj.t == JV_DICT) {
        jval *v = jd_get(obj.u.d, key);
        if (v) { *out = *v; return 0; }
    }
    if (key.t == JV_STR) {
        char *name = ja_strdup(c->ar, key.u.s.p, key.u.s.n);
        if (!name) return jx_nomem(c);
        return jb_getattr(c, obj, name, key.u.s.n, out);
    }
    *out = missing(c, obj, key);
    return 0;
}

static int eval_getitem(jctx *c, jscope *s, const jnode *n, jval *out)
{
    jval obj;
    if (jx_eval(c, s, n->a, &obj) < 0) return -1;
    if (n->b->kind != N_SLICE) {
        jval key;
        if (jx_eval(c, s, n->b, &key) < 0) return -1;
        return getitem(c, obj, key, out);
    }
    jval part[3];
    const jnode *p[3] = { n->b->a, n->b->b, n->b->c };
    for (int i = 0; i < 3; i++) {
        part[i] = jv_none();
        if (p[i] && jx_eval(c, s, p[i], &part[i]) < 0) return -1;
        if (part[i].t != JV_NONE && part[i].t != JV_INT && part[i].t != JV_BOOL)
            return jx_fail(c, MOR_E_INVALID_ARG, "slice indices must be integers or None");
    }
    if (obj.t == JV_UNDEF) return undefined_error(c, obj);
    if (obj.t != JV_STR && obj.t != JV_LIST) { *out = jv_undef("an object that cannot be sliced"); return 0; }
    return slice(c, obj, part, out);
}

/* ------------------------------------------------------------------------ */
/* Calls, filters, tests */

/* the arguments of a call node: positional values and keyword names */
static int eval_args(jctx *c, jscope *s, const jnode *first, int extra, jval **args, const char ***kw, int *na)
{
    int n = 0;
    for (const jnode *a = first; a; a = a->next) n++;
    *args = ja_alloc(c->ar, (size_t)(n + extra + 1) * sizeof **args);
    *kw = ja_alloc(c->ar, (size_t)(n + extra + 1) * sizeof **kw);
    if (!*args || !*kw) return jx_nomem(c);
    int i = extra;
    for (const jnode *a = first; a; a = a->next, i++) {
        (*kw)[i] = a->kind == N_KWARG ? a->s : NULL;
        if (jx_eval(c, s, a->kind == N_KWARG ? a->a : a, &(*args)[i]) < 0) return -1;
    }
    *na = i;
    return 0;
}

static int eval_call(jctx *c, jscope *s, const jnode *n, jval *out)
{
    jval f, *args;
    const char **kw;
    int na;
    if (jx_eval(c, s, n->a, &f) < 0 || eval_args(c, s, n->b, 0, &args, &kw, &na) < 0) return -1;
    return jx_call(c, f, na, args, kw, out);
}

/* a filter node over the value `base` (its innermost operand, when NULL) */
int jx_filter(jctx *c, jscope *s, const jnode *n, const jval *base, jval *out)
{
    jval *args;
    const char **kw;
    int na;
    if (eval_args(c, s, n->b, 1, &args, &kw, &na) < 0) return -1;
    if (!n->a) { if (!base) return jx_fail(c, MOR_E_INTERNAL, "a filter without its operand"); args[0] = *base; }
    else if (n->a->kind == N_FILTER) { if (jx_filter(c, s, n->a, base, &args[0]) < 0) return -1; }
    else if (jx_eval(c, s, n->a, &args[0]) < 0) return -1;
    c->line = n->line;
    return jb_filter(c, n->s, args[0], na - 1, args + 1, kw + 1, out);
}

static int eval_test(jctx *c, jscope *s, const jnode *n, jval *out)
{
    jval v, *args;
    const char **kw;
    int na, r;
    if (jx_eval(c, s, n->a, &v) < 0 || eval_args(c, s, n->b, 0, &args, &kw, &na) < 0) return -1;
    c->line = n->line;
    if (jb_test(c, n->s, v, na, args, &r) < 0) return -1;
    *out = jv_bool(n->neg ? !r : r);
    return 0;
}

static int eval_seq(jctx *c, jscope *s, const jnode *n, jval *out)
{
    if (n->kind == N_DICT) {
        *out = jv_dict(c->ar, 0);
        if (out->t == JV_UNDEF) return jx_nomem(c);
        for (const jnode *p = n->a; p; p = p->next) {
            jval k, v;
            if (jx_eval(c, s, p->a, &k) < 0 || jx_eval(c, s, p->b, &v) < 0) return -1;
            if (jd_set(c->ar, out->u.d, k, v) < 0) return jx_nomem(c);
        }
        return 0;
    }
    *out = jv_list(c->ar, 0);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    out->tuple = n->kind == N_TUPLE;
    for (const jnode *p = n->a; p; p = p->next) {
        jval v;
        if (jx_eval(c, s, p, &v) < 0) return -1;
        if (jl_push(c->ar, out->u.l, v) < 0) return jx_nomem(c);
    }
    return 0;
}

static int eval_unary(jctx *c, jscope *s, const jnode *n, jval *out)
{
    jval v;
    if (jx_eval(c, s, n->a, &v) < 0) return -1;
    if (n->kind == N_NOT) { *out = jv_bool(!jv_truthy(v)); return 0; }
    if (v.t == JV_UNDEF) return undefined_error(c, v);
    if (!jv_is_num(v))
        return jx_fail(c, MOR_E_INVALID_ARG, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+',
                       jv_type_name(v));
    if (n->kind == N_POS) { *out = v.t == JV_BOOL ? jv_int(v.u.i) : v; return 0; }
    if (v.t == JV_FLOAT) { *out = jv_float(-v.u.f); return 0; }
    if (v.u.i == INT64_MIN) return jx_fail(c, MOR_E_UNSUPPORTED, "an integer beyond 64 bits");
    *out = jv_int(-v.u.i);
    return 0;
}

static int eval_node(jctx *c, jscope *s, const jnode *n, jval *out)
{
    jval a, b;
    switch (n->kind) {
    case N_CONST: *out = n->v; return 0;
    case N_NAME: *out = lookup(c, s, n->s); return 0;
    case N_LIST: case N_TUPLE: case N_DICT: return eval_seq(c, s, n, out);
    case N_GETATTR:
        if (jx_eval(c, s, n->a, &a) < 0) return -1;
        return jb_getattr(c, a, n->s, strlen(n->s), out);
    case N_GETITEM: return eval_getitem(c, s, n, out);
    case N_CALL: return eval_call(c, s, n, out);
    case N_FILTER: return jx_filter(c, s, n, NULL, out);
    case N_TEST: return eval_test(c, s, n, out);
    case N_BINOP:
        if (jx_eval(c, s, n->a, &a) < 0 || jx_eval(c, s, n->b, &b) < 0) return -1;
        c->line = n->line;
        return arith(c, n->op, a, b, out);
    case N_NEG: case N_POS: case N_NOT: return eval_unary(c, s, n, out);
    case N_AND: case N_OR:
        if (jx_eval(c, s, n->a, &a) < 0) return -1;
        if (jv_truthy(a) == (n->kind == N_OR)) { *out = a; return 0; }
        return jx_eval(c, s, n->b, out);
    case N_COMPARE: return eval_compare(c, s, n, out);
    case N_CONDEXPR:
        if (jx_eval(c, s, n->b, &a) < 0) return -1;
        if (jv_truthy(a)) return jx_eval(c, s, n->a, out);
        if (n->c) return jx_eval(c, s, n->c, out);
        *out = jv_undef("the else branch of an inline if");
        return 0;
    default: return jx_fail(c, MOR_E_INTERNAL, "node %d is not an expression", n->kind);
    }
}

int jx_eval(jctx *c, jscope *s, const jnode *n, jval *out)
{
    if (enter(c, n) < 0) return -1;
    int r = eval_node(c, s, n, out);
    c->depth--;
    if (r == 0 && c->ar->over) return jx_nomem(c);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Macros */
static int call_macro(jctx *c, const jmacro *m, int na, const jval *args, const char *const *kw, jval *out)
{
    const jnode *def = m->def;
    const jnode *params = def->kind == N_MACRO ? def->a : def->b, *body = def->kind == N_MACRO ? def->b : def->c;
    if (c->calls >= JINJA_MAX_CALLS)
        return jx_fail(c, MOR_E_UNSUPPORTED, "macro calls nested deeper than %d", JINJA_MAX_CALLS);
    jscope *s = jx_scope(c, m->scope);
    jval varargs = jv_list(c->ar, 0), kwargs = jv_dict(c->ar, 0);
    if (!s || varargs.t == JV_UNDEF || kwargs.t == JV_UNDEF) return jx_nomem(c);
    varargs.tuple = 1;
    int pos = 0;
    for (int i = 0; i < na; i++) {
        if (kw[i]) continue;
        const jnode *p = params;
        for (int k = 0; p && k < pos; k++) p = p->next;
        if (p) { if (bind(c, s, p->s, args[i]) < 0) return -1; }
        else if (jl_push(c->ar, varargs.u.l, args[i]) < 0) return jx_nomem(c);
        pos++;
    }
    for (int i = 0; i < na; i++) {
        if (!kw[i]) continue;
        const jnode *p = params;
        while (p && strcmp(p->s, kw[i])) p = p->next;
        if (p) { if (bind(c, s, p->s, args[i]) < 0) return -1; }
        else if (jd_set(c->ar, kwargs.u.d, jv_cstr(kw[i]), args[i]) < 0) return jx_nomem(c);
    }
    for (const jnode *p = params; p; p = p->next) {
        if (jd_gets(&s->vars, p->s)) continue;
        jval v = jv_undef(p->s);
        if (p->a && jx_eval(c, s, p->a, &v) < 0) return -1;
        if (bind(c, s, p->s, v) < 0) return -1;
    }
    if (bind(c, s, "varargs", varargs) < 0 || bind(c, s, "kwargs", kwargs) < 0) return -1;
    if (m->has_caller && bind(c, s, "caller", m->caller) < 0) return -1;
    jbuf buf, *saved = c->out;
    jb_init(&buf, c->ar);
    c->out = &buf;
    c->calls++;
    int r = jinja_exec_body(c, s, body);
    c->calls--;
    c->out = saved;
    c->flow = 0;
    if (r < 0) return -1;
    if (buf.over) return jx_nomem(c);
    *out = jv_str(buf.p, buf.n);
    return 0;
}

int jx_call(jctx *c, jval f, int na, const jval *args, const char *const *kw, jval *out)
{
    if (f.t == JV_MACRO) return call_macro(c, f.u.m, na, args, kw, out);
    if (f.t == JV_FUNC) return jb_call_func(c, f.u.fn, na, args, kw, out);
    if (f.t == JV_UNDEF) return undefined_error(c, f);
    return jx_fail(c, MOR_E_INVALID_ARG, "'%s' object is not callable", jv_type_name(f));
}
