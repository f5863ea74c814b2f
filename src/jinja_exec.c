/* jinja_exec.c - the statements of a template: text and {{ }} output, if,
 * for (loop variables, `if` filter, else, break/continue), set (names,
 * tuples, namespace attributes, blocks), macro and call blocks, filter
 * blocks. Scopes follow jinja2: a for loop's body gets a fresh scope each
 * iteration (so a `set` inside it is gone after it: what namespace() is for),
 * if blocks none, a macro its own under the scope it was defined in. */
#include <string.h>

#include "jinja.h"

static int exec(jctx *c, jscope *s, const jnode *n);

/* the output of body into a string (block set, filter block) */
static int capture(jctx *c, jscope *s, const jnode *body, jval *out)
{
    jbuf buf, *saved = c->out;
    jb_init(&buf, c->ar);
    c->out = &buf;
    int r = jinja_exec_body(c, s, body);
    c->out = saved;
    if (r < 0) return -1;
    if (buf.over) return jx_nomem(c);
    *out = jv_str(buf.p, buf.n);
    return 0;
}

static int emit(jctx *c, jval v)
{
    if (v.t == JV_UNDEF) return 0;
    jv_to_str(c->out, v);
    return c->out->over ? jx_nomem(c) : 0;
}

/* the loop's items: the iterable, filtered by the loop's `if` */
static int loop_items(jctx *c, jscope *s, const jnode *n, jlist **items)
{
    jval it;
    if (jx_eval(c, s, n->b, &it) < 0 || jb_iter(c, it, items) < 0) return -1;
    if (!n->e) return 0;
    jval kept = jv_list(c->ar, 0);
    if (kept.t == JV_UNDEF) return jx_nomem(c);
    for (size_t i = 0; i < (*items)->n; i++) {
        jscope *t = jx_scope(c, s);
        jval ok;
        if (!t || jx_assign(c, t, n->a, (*items)->v[i]) < 0 || jx_eval(c, t, n->e, &ok) < 0) return -1;
        if (jv_truthy(ok) && jl_push(c->ar, kept.u.l, (*items)->v[i]) < 0) return jx_nomem(c);
    }
    *items = kept.u.l;
    return 0;
}

static int exec_for(jctx *c, jscope *s, const jnode *n)
{
    jlist *items;
    if (loop_items(c, s, n, &items) < 0) return -1;
    if (!items->n) return n->d ? jinja_exec_body(c, s, n->d) : 0;
    jloop *lp = ja_alloc(c->ar, sizeof *lp);
    if (!lp) return jx_nomem(c);
    lp->items = items;
    jval loop = { 0 };
    loop.t = JV_LOOP;
    loop.u.loop = lp;
    jscope *t = NULL;
    for (size_t i = 0; i < items->n; i++) {
        lp->i = i;
        if (++c->steps > JINJA_MAX_STEPS)   /* an iteration is a step, even of an empty body */
            return jx_fail(c, MOR_E_UNSUPPORTED, "the template ran over its budget of %d steps", JINJA_MAX_STEPS);
        /* a fresh scope each iteration; its memory is reused unless a macro
         * defined in the last one holds it, so a long loop does not grow */
        if (!t || t->captured) t = jx_scope(c, s);
        else jd_clear(&t->vars);
        if (!t || jx_assign(c, t, n->a, items->v[i]) < 0 || jd_set(c->ar, &t->vars, jv_cstr("loop"), loop) < 0)
            return c->st ? -1 : jx_nomem(c);
        if (jinja_exec_body(c, t, n->c) < 0) return -1;
        int flow = c->flow;
        c->flow = 0;
        if (flow == 1) break;
    }
    return 0;
}

static int exec_set(jctx *c, jscope *s, const jnode *n)
{
    jval v;
    if (n->kind == N_SET) {
        if (jx_eval(c, s, n->b, &v) < 0) return -1;
        return jx_assign(c, s, n->a, v);
    }
    if (capture(c, s, n->b, &v) < 0) return -1;
    if (n->c && jx_filter(c, s, n->c, &v, &v) < 0) return -1;
    return jx_assign(c, s, n->a, v);
}

static int exec_macro(jctx *c, jscope *s, const jnode *n, jmacro **out)
{
    jmacro *m = ja_alloc(c->ar, sizeof *m);
    if (!m) return jx_nomem(c);
    m->def = n;
    m->scope = s;
    s->captured = 1;
    *out = m;
    return 0;
}

static int exec_call_block(jctx *c, jscope *s, const jnode *n)
{
    /* {% call(args) m(...) %}body{% endcall %}: m gets `caller`, a macro of the body */
    jmacro *caller = NULL, *m;
    jval f, r;
    if (exec_macro(c, s, n, &caller) < 0 || jx_eval(c, s, n->a->a, &f) < 0) return -1;
    if (f.t != JV_MACRO) return jx_fail(c, MOR_E_INVALID_ARG, "a call block needs a macro");
    if (!(m = ja_alloc(c->ar, sizeof *m))) return jx_nomem(c);
    *m = *f.u.m;
    m->has_caller = 1;
    m->caller.t = JV_MACRO;
    m->caller.u.m = caller;
    jval mv = f;
    mv.u.m = m;
    jnode call = *n->a;
    call.a = NULL;
    /* the arguments as written, then the call itself with the new macro */
    int na = 0;
    for (const jnode *a = call.b; a; a = a->next) na++;
    jval *args = ja_alloc(c->ar, (size_t)(na + 1) * sizeof *args);
    const char **kw = ja_alloc(c->ar, (size_t)(na + 1) * sizeof *kw);
    if (!args || !kw) return jx_nomem(c);
    int i = 0;
    for (const jnode *a = call.b; a; a = a->next, i++) {
        kw[i] = a->kind == N_KWARG ? a->s : NULL;
        if (jx_eval(c, s, a->kind == N_KWARG ? a->a : a, &args[i]) < 0) return -1;
    }
    if (jx_call(c, mv, na, args, kw, &r) < 0) return -1;
    jv_to_str(c->out, r);
    return c->out->over ? jx_nomem(c) : 0;
}

static int exec(jctx *c, jscope *s, const jnode *n)
{
    jval v;
    c->line = n->line;
    switch (n->kind) {
    case N_TEXT:
        jb_add(c->out, n->s, n->n);
        return c->out->over ? jx_nomem(c) : 0;
    case N_OUTPUT: return jx_eval(c, s, n->a, &v) < 0 ? -1 : emit(c, v);
    case N_IF:
        for (; n && n->kind == N_IF; n = n->c) {   /* the elif chain, in a loop */
            if (jx_eval(c, s, n->a, &v) < 0) return -1;
            if (jv_truthy(v)) return jinja_exec_body(c, s, n->b);
        }
        return n ? jinja_exec_body(c, s, n) : 0;
    case N_FOR: return exec_for(c, s, n);
    case N_SET: case N_SET_BLOCK: return exec_set(c, s, n);
    case N_MACRO: {
        jmacro *m = NULL;
        if (exec_macro(c, s, n, &m) < 0) return -1;
        v.t = JV_MACRO;
        v.u.m = m;
        return jd_set(c->ar, &s->vars, jv_cstr(n->s), v) < 0 ? jx_nomem(c) : 0;
    }
    case N_CALL_BLOCK: return exec_call_block(c, s, n);
    case N_FILTER_BLOCK:
        if (capture(c, s, n->b, &v) < 0 || jx_filter(c, s, n->a, &v, &v) < 0) return -1;
        return emit(c, v);
    case N_BREAK: c->flow = 1; return 0;
    case N_CONTINUE: c->flow = 2; return 0;
    case N_BODY: return jinja_exec_body(c, s, n);
    default: return jx_fail(c, MOR_E_INTERNAL, "node %d is not a statement", n->kind);
    }
}

int jinja_exec_body(jctx *c, jscope *s, const jnode *body)
{
    if (++c->depth > JINJA_MAX_DEPTH)
        return jx_fail(c, MOR_E_UNSUPPORTED, "evaluation nested deeper than %d", JINJA_MAX_DEPTH);
    for (const jnode *n = body->a; n && !c->flow; n = n->next) {
        if (++c->steps > JINJA_MAX_STEPS)
            return jx_fail(c, MOR_E_UNSUPPORTED, "the template ran over its budget of %d steps", JINJA_MAX_STEPS);
        if (exec(c, s, n) < 0) return -1;
    }
    c->depth--;
    return 0;
}

int jinja_render(jctx *c, const jtemplate *t, jdict *vars)
{
    jscope *top = jx_scope(c, NULL);
    if (!top) return -1;
    top->vars = *vars;
    c->top = top;
    return jinja_exec_body(c, top, t->root);
}
