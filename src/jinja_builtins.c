/* jinja_builtins.c - what a template can call: jinja2's filters and tests,
 * the methods of Python's str, dict and list that the sandbox allows, the
 * loop object's attributes, and the globals transformers provides (range,
 * namespace, dict, raise_exception, strftime_now).
 *
 * The sandbox (ImmutableSandboxedEnvironment) refuses methods that modify
 * a list or dict (append, pop, update, ...): reading such an attribute gives
 * an undefined value, and calling it fails with jinja2's SecurityError
 * message, as transformers' renderings do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

enum { F_GLOBAL, F_METHOD, F_LOOP_CYCLE };

static int bad_arg(jctx *c, const char *what, const char *name)
{
    return jx_fail(c, MOR_E_INVALID_ARG, "%s: %s", name, what);
}

const jval *jb_arg(int na, const jval *args, const char *const *kw, int i, const char *key)
{
    int pos = 0;
    for (int k = 0; k < na; k++) {
        if (kw && kw[k]) { if (key && !strcmp(kw[k], key)) return &args[k]; continue; }
        if (pos++ == i) return &args[k];
    }
    return NULL;
}

jval jb_str_of(jctx *c, jval v)
{
    if (v.t == JV_STR) return v;
    jbuf b;
    jb_init(&b, c->ar);
    jv_to_str(&b, v);
    return jv_str(b.over ? "" : b.p, b.over ? 0 : b.n);
}

static jval mkfunc(jctx *c, int kind, const char *name, jval self)
{
    jval v = { 0 };
    jfunc *f = ja_alloc(c->ar, sizeof *f);
    if (!f) return jv_undef("out of memory");
    f->kind = kind;
    f->name = name;
    f->self = self;
    v.t = JV_FUNC;
    v.u.fn = f;
    return v;
}

/* ------------------------------------------------------------------------ */
/* Iteration */
int jb_iter(jctx *c, jval v, jlist **out)
{
    static jlist empty;
    if (v.t == JV_LIST) { *out = v.u.l; return 0; }
    if (v.t == JV_UNDEF) { *out = &empty; return 0; }
    if (v.t == JV_DICT || v.t == JV_STR) {
        jval l = jv_list(c->ar, v.t == JV_DICT ? v.u.d->n : v.u.s.n);
        if (l.t == JV_UNDEF) return jx_nomem(c);
        if (v.t == JV_DICT)
            for (size_t i = 0; i < v.u.d->n; i++) jl_push(c->ar, l.u.l, v.u.d->k[i]);
        else
            for (size_t i = 0, n = ju_len(v.u.s.p, v.u.s.n), o = 0; i < n; i++) {
                size_t e = ju_off(v.u.s.p + o, v.u.s.n - o, 1);
                jl_push(c->ar, l.u.l, jv_str(v.u.s.p + o, e));
                o += e;
            }
        *out = l.u.l;
        return 0;
    }
    return jx_fail(c, MOR_E_INVALID_ARG, "'%s' object is not iterable", jv_type_name(v));
}

/* jinja2's attribute getter: "a.b.0" through getitem */
int jb_attr_path(jctx *c, jval v, const char *path, jval *out)
{
    const char *p = path;
    while (*p) {
        const char *e = strchr(p, '.');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char name[128];
        if (n >= sizeof name) return bad_arg(c, "an attribute name too long", "attribute");
        memcpy(name, p, n);
        name[n] = 0;
        int digits = n > 0;
        for (size_t i = 0; i < n; i++) digits &= name[i] >= '0' && name[i] <= '9';
        if (v.t == JV_UNDEF) return jx_fail(c, MOR_E_INVALID_ARG, "%s", v.u.s.p ? v.u.s.p : "undefined");
        if (digits && v.t == JV_LIST) {
            size_t i = (size_t)atoll(name);
            v = i < v.u.l->n ? v.u.l->v[i] : jv_undef("no such element");
        } else if (v.t == JV_DICT && jd_gets(v.u.d, name)) v = *jd_gets(v.u.d, name);
        else {
            char *nm = ja_strdup(c->ar, name, n);
            if (!nm || jb_getattr(c, v, nm, n, &v) < 0) return nm ? -1 : jx_nomem(c);
        }
        p += n + (e != NULL);
    }
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Attributes */
static int in_list(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(name, *list)) return 1;
    return 0;
}

static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "rfind", "index", "count", "format", "join", "splitlines", "isdigit",
    "isalpha", "isalnum", "isspace", "isupper", "islower", "isnumeric", "isdecimal", "swapcase", NULL
};
static const char *const dict_methods[] = { "items", "keys", "values", "get", "copy", NULL };
static const char *const dict_unsafe[] = { "clear", "pop", "popitem", "setdefault", "update", NULL };
static const char *const list_methods[] = { "index", "count", "copy", NULL };
static const char *const list_unsafe[] = { "append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort", NULL };

static jval unsafe(jctx *c, jval obj, const char *name)
{
    char m[160];
    snprintf(m, sizeof m, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
    jval u = jv_undef(ja_strdup(c->ar, m, strlen(m)));
    if (!u.u.s.p) u.u.s.p = "unsafe attribute";
    u.unsafe = 1;
    return u;
}

static jval no_attr(jctx *c, jval obj, const char *name)
{
    char m[200];
    if (obj.t == JV_NONE) snprintf(m, sizeof m, "'None' has no attribute '%.100s'", name);
    else snprintf(m, sizeof m, "'%s object' has no attribute '%.100s'", jv_type_name(obj), name);
    const char *p = ja_strdup(c->ar, m, strlen(m));
    return jv_undef(p ? p : "undefined");
}

static int loop_attr(jctx *c, const jloop *lp, const char *name, jval *out)
{
    size_t n = lp->items->n, i = lp->i;
    if (!strcmp(name, "index")) *out = jv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = jv_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = jv_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = jv_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jv_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = jv_int((int64_t)n);
    else if (!strcmp(name, "depth")) *out = jv_int(1);
    else if (!strcmp(name, "depth0")) *out = jv_int(0);
    else if (!strcmp(name, "previtem")) *out = i > 0 ? lp->items->v[i - 1] : jv_undef("there is no previous item");
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? lp->items->v[i + 1] : jv_undef("there is no next item");
    else if (!strcmp(name, "cycle")) {
        jval self = { 0 };
        self.t = JV_LOOP;
        self.u.loop = (jloop *)lp;
        *out = mkfunc(c, F_LOOP_CYCLE, "cycle", self);
    } else *out = jv_undef("'LoopContext object' has no such attribute");
    return 0;
}

/* a dict's key or a namespace's attribute */
static int ns_attr(jctx *c, jval obj, const char *name, jval *out)
{
    jval *v = jd_gets(obj.u.d, name);
    *out = v ? *v : no_attr(c, obj, name);
    return 0;
}

int jb_getattr(jctx *c, jval obj, const char *name, size_t n, jval *out)
{
    (void)n;
    switch (obj.t) {
    case JV_UNDEF: return jx_fail(c, MOR_E_INVALID_ARG, "%s", obj.u.s.p ? obj.u.s.p : "undefined value");
    case JV_DICT:
        if (in_list(name, dict_methods)) { *out = mkfunc(c, F_METHOD, name, obj); return 0; }
        if (in_list(name, dict_unsafe)) { *out = unsafe(c, obj, name); return 0; }
        return ns_attr(c, obj, name, out);
    case JV_NS: return ns_attr(c, obj, name, out);
    case JV_LOOP: return loop_attr(c, obj.u.loop, name, out);
    case JV_STR:
        *out = in_list(name, str_methods) ? mkfunc(c, F_METHOD, name, obj) : no_attr(c, obj, name);
        return 0;
    case JV_LIST:
        if (in_list(name, list_methods)) *out = mkfunc(c, F_METHOD, name, obj);
        else if (in_list(name, list_unsafe)) *out = unsafe(c, obj, name);
        else *out = no_attr(c, obj, name);
        return 0;
    default:
        *out = no_attr(c, obj, name);
        return 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Globals */
static const char *const globals[] = { "range", "namespace", "dict", "raise_exception", "strftime_now", NULL };

int jb_global(const char *name, jval *out)
{
    /* constant function values: globals need no arena, and are never written */
    static const jfunc fns[] = {
        { "range", { 0 }, F_GLOBAL }, { "namespace", { 0 }, F_GLOBAL }, { "dict", { 0 }, F_GLOBAL },
        { "raise_exception", { 0 }, F_GLOBAL }, { "strftime_now", { 0 }, F_GLOBAL },
    };
    for (int i = 0; globals[i]; i++)
        if (!strcmp(name, globals[i])) {
            jval v = { 0 };
            v.t = JV_FUNC;
            v.u.fn = (jfunc *)&fns[i];
            *out = v;
            return 1;
        }
    return 0;
}

static int g_range(jctx *c, int na, const jval *args, jval *out)
{
    int64_t a[3] = { 0, 0, 1 };
    if (na < 1 || na > 3) return bad_arg(c, "expected 1 to 3 arguments", "range");
    for (int i = 0; i < na; i++) {
        if (args[i].t != JV_INT && args[i].t != JV_BOOL) return bad_arg(c, "arguments must be integers", "range");
        a[na == 1 ? 1 : i] = args[i].u.i;
    }
    if (!a[2]) return bad_arg(c, "step must not be zero", "range");
    if (c->range_list.t == JV_LIST && !memcmp(a, c->range_args, sizeof a)) { *out = c->range_list; return 0; }
    double count = ceil(((double)a[1] - (double)a[0]) / (double)a[2]);
    if (count < 0) count = 0;
    /* each item costs a step at least: a range past the budget can only fail */
    if (count > (double)(JINJA_MAX_STEPS - c->steps))
        return jx_fail(c, MOR_E_UNSUPPORTED, "range(%.0f items) beyond the budget of %d steps", count, JINJA_MAX_STEPS);
    *out = jv_list(c->ar, (size_t)count);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    for (int64_t i = a[0]; a[2] > 0 ? i < a[1] : i > a[1]; i += a[2]) jl_push(c->ar, out->u.l, jv_int(i));
    c->range_list = *out;
    memcpy(c->range_args, a, sizeof a);
    c->steps += (uint64_t)count / 8;
    return 0;
}

static int g_namespace(jctx *c, int na, const jval *args, const char *const *kw, int ns, jval *out)
{
    *out = jv_dict(c->ar, 0);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    for (int i = 0; i < na; i++) {
        if (kw[i]) { if (jd_set(c->ar, out->u.d, jv_cstr(kw[i]), args[i]) < 0) return jx_nomem(c); continue; }
        if (args[i].t != JV_DICT) return bad_arg(c, "positional arguments must be dicts", ns ? "namespace" : "dict");
        for (size_t k = 0; k < args[i].u.d->n; k++)
            if (jd_set(c->ar, out->u.d, args[i].u.d->k[k], args[i].u.d->v[k]) < 0) return jx_nomem(c);
    }
    if (ns) out->t = JV_NS;
    return 0;
}

static int g_strftime(jctx *c, int na, const jval *args, jval *out)
{
    if (na != 1 || args[0].t != JV_STR) return bad_arg(c, "expected a format string", "strftime_now");
    time_t now = (time_t)c->now;
    struct tm tm;
    if (!gmtime_r(&now, &tm)) return bad_arg(c, "time out of range", "strftime_now");
    char fmt[256], buf[512];
    if (args[0].u.s.n >= sizeof fmt) return bad_arg(c, "a format longer than 255 bytes", "strftime_now");
    memcpy(fmt, args[0].u.s.p, args[0].u.s.n);
    fmt[args[0].u.s.n] = 0;
    size_t n = strftime(buf, sizeof buf, fmt, &tm);
    char *p = ja_strdup(c->ar, buf, n);
    if (!p) return jx_nomem(c);
    *out = jv_str(p, n);
    return 0;
}

static int call_global(jctx *c, const char *name, int na, const jval *args, const char *const *kw, jval *out)
{
    if (!strcmp(name, "range")) return g_range(c, na, args, out);
    if (!strcmp(name, "namespace") || !strcmp(name, "dict"))
        return g_namespace(c, na, args, kw, name[0] == 'n', out);
    if (!strcmp(name, "strftime_now")) return g_strftime(c, na, args, out);
    /* raise_exception */
    jval m = na > 0 ? jb_str_of(c, args[0]) : jv_cstr("");
    return jx_fail(c, MOR_E_INVALID_ARG, "raise_exception: %.*s", (int)(m.u.s.n > 300 ? 300 : m.u.s.n), m.u.s.p);
}

static int dict_method(jctx *c, jval self, const char *name, int na, const jval *args, jval *out)
{
    jdict *d = self.u.d;
    if (!strcmp(name, "get")) {
        if (na < 1) return bad_arg(c, "expected a key", "get");
        jval *v = jd_get(d, args[0]);
        *out = v ? *v : na > 1 ? args[1] : jv_none();
        return 0;
    }
    if (!strcmp(name, "copy")) { *out = self; return 0; }
    *out = jv_list(c->ar, d->n);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    out->gen = name[0] == 'i' ? JG_ITEMS : name[0] == 'k' ? JG_KEYS : JG_VALUES;
    for (size_t i = 0; i < d->n; i++) {
        jval item = name[0] == 'k' ? d->k[i] : d->v[i];
        if (name[0] == 'i') {
            item = jv_list(c->ar, 2);
            if (item.t == JV_UNDEF) return jx_nomem(c);
            item.tuple = 1;
            jl_push(c->ar, item.u.l, d->k[i]);
            jl_push(c->ar, item.u.l, d->v[i]);
        }
        jl_push(c->ar, out->u.l, item);
    }
    return 0;
}

static int list_method(jctx *c, jval self, const char *name, int na, const jval *args, jval *out)
{
    if (!strcmp(name, "copy")) { *out = self; return 0; }
    if (na < 1) return bad_arg(c, "expected an argument", name);
    int64_t k = 0;
    for (size_t i = 0; i < self.u.l->n; i++)
        if (jv_eq(self.u.l->v[i], args[0])) {
            if (name[0] == 'i') { *out = jv_int((int64_t)i); return 0; }
            k++;
        }
    if (name[0] == 'i') return jx_fail(c, MOR_E_INVALID_ARG, "list.index(x): x not in list");
    *out = jv_int(k);
    return 0;
}

int jb_call_func(jctx *c, const jfunc *f, int na, const jval *args, const char *const *kw, jval *out)
{
    if (f->kind == F_GLOBAL) return call_global(c, f->name, na, args, kw, out);
    if (f->kind == F_LOOP_CYCLE) {
        if (na < 1) return bad_arg(c, "no items for cycling given", "loop.cycle");
        *out = args[f->self.u.loop->i % (size_t)na];
        return 0;
    }
    switch (f->self.t) {
    case JV_STR: {
        /* Markup's methods give Markup */
        int r = jb_str_method(c, f->self, f->name, na, args, kw, out);
        if (!r && out->t == JV_STR) out->markup = f->self.markup;
        return r;
    }
    case JV_DICT: return dict_method(c, f->self, f->name, na, args, out);
    default: return list_method(c, f->self, f->name, na, args, out);
    }
}
