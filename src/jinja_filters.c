/* jinja_filters.c - jinja2's filters and tests as chat templates use them,
 * with transformers' tojson (json.dumps: ensure_ascii=False, the indent
 * given, separators as json.dumps picks them, sort_keys=False). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

#define ARG(i, key) jb_arg(na, args, kw, (i), (key))

static int ffail(jctx *c, const char *name, const char *what)
{
    return jx_fail(c, MOR_E_INVALID_ARG, "filter %s: %s", name, what);
}

static int ret_str(jctx *c, jbuf *b, jval *out)
{
    if (b->over) return jx_nomem(c);
    *out = jv_str(b->p, b->n);
    return 0;
}

/* ------------------------------------------------------------------------ */
static int f_tojson(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *ea = ARG(0, "ensure_ascii"), *in = ARG(1, "indent"), *sep = ARG(2, "separators"),
               *sk = ARG(3, "sort_keys");
    jjson_opts o = { 0 };
    char sp[64];
    o.ensure_ascii = ea && jv_truthy(*ea);
    o.sort_keys = sk && jv_truthy(*sk);
    o.item_sep = ", ";
    o.key_sep = ": ";
    if (in && in->t != JV_NONE) {
        o.has_indent = 1;
        o.item_sep = ",";
        if (in->t == JV_STR) { o.indent = in->u.s.p; o.indent_n = in->u.s.n; }
        else if (in->t == JV_INT) {
            int64_t k = in->u.i < 0 ? 0 : in->u.i > 32 ? 32 : in->u.i;
            memset(sp, ' ', (size_t)k);
            o.indent = sp;
            o.indent_n = (size_t)k;
        } else return ffail(c, "tojson", "indent must be an integer or a string");
    }
    char seps[2][32];
    if (sep && sep->t == JV_LIST && sep->u.l->n == 2) {
        for (int i = 0; i < 2; i++) {
            jval s = sep->u.l->v[i];
            if (s.t != JV_STR || s.u.s.n >= sizeof seps[i]) return ffail(c, "tojson", "bad separators");
            memcpy(seps[i], s.u.s.p, s.u.s.n);
            seps[i][s.u.s.n] = 0;
        }
        o.item_sep = seps[0];
        o.key_sep = seps[1];
    }
    jbuf b;
    jb_init(&b, c->ar);
    const char *bad = NULL;
    if (jv_to_json(&b, v, &o, 0, &bad) < 0) {
        if (!strncmp(bad, "a value", 7)) return ffail(c, "tojson", "a value nested too deep (more than 160 levels)");
        return jx_fail(c, MOR_E_INVALID_ARG, "Object of type %s is not JSON serializable", bad);
    }
    return ret_str(c, &b, out);
}

static int f_indent(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *w = ARG(0, "width"), *first = ARG(1, "first"), *blank = ARG(2, "blank");
    jbuf ind, b;
    jb_init(&ind, c->ar);
    jb_init(&b, c->ar);
    if (w && w->t == JV_STR) jb_add(&ind, w->u.s.p, w->u.s.n);
    else for (int64_t i = 0, k = w && w->t == JV_INT ? w->u.i : 4; i < k && i < 256; i++) jb_addc(&ind, ' ');
    /* jinja2 appends a newline before splitlines(), so a trailing one stays */
    jval s = jb_str_of(c, v), lines;
    jbuf t;
    jb_init(&t, c->ar);
    jb_add(&t, s.u.s.p, s.u.s.n);
    jb_addc(&t, '\n');
    if (t.over || ju_splitlines(c, jv_str(t.p, t.n), 0, &lines) < 0) return t.over ? jx_nomem(c) : -1;
    if (first && jv_truthy(*first)) jb_add(&b, ind.p, ind.n);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        jval l = lines.u.l->v[i];
        if (i) {
            jb_addc(&b, '\n');
            if (l.u.s.n || (blank && jv_truthy(*blank))) jb_add(&b, ind.p, ind.n);
        }
        jb_add(&b, l.u.s.p, l.u.s.n);
    }
    return ret_str(c, &b, out);
}

static int f_join(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *d = ARG(0, "d"), *attr = ARG(1, "attribute");
    jlist *items;
    if (jb_iter(c, v, &items) < 0) return -1;
    jbuf b;
    jb_init(&b, c->ar);
    jval sep = d ? jb_str_of(c, *d) : jv_str("", 0);
    for (size_t i = 0; i < items->n; i++) {
        jval x = items->v[i];
        if (attr && attr->t == JV_STR && jb_attr_path(c, x, attr->u.s.p, &x) < 0) return -1;
        if (i) jb_add(&b, sep.u.s.p, sep.u.s.n);
        jv_to_str(&b, x);
    }
    return ret_str(c, &b, out);
}

static int f_length(jctx *c, jval v, jval *out)
{
    switch (v.t) {
    case JV_STR: *out = jv_int((int64_t)ju_len(v.u.s.p, v.u.s.n)); return 0;
    case JV_LIST:
        if (v.gen == JG_GEN || v.gen == JG_REVERSED) break;
        *out = jv_int((int64_t)v.u.l->n);
        return 0;
    case JV_DICT: *out = jv_int((int64_t)v.u.d->n); return 0;
    case JV_UNDEF: *out = jv_int(0); return 0;
    default: break;
    }
    return jx_fail(c, MOR_E_INVALID_ARG, "object of type '%s' has no len()", jv_type_name(v));
}

static int f_first_last(jctx *c, jval v, int last, jval *out)
{
    jlist *items;
    if (jb_iter(c, v, &items) < 0) return -1;
    if (!items->n) { *out = jv_undef(last ? "No last item, sequence was empty." : "No first item, sequence was empty."); return 0; }
    *out = items->v[last ? items->n - 1 : 0];
    return 0;
}

static int to_number(jctx *c, jval v, int want_float, jval dflt, jval *out)
{
    if (v.t == JV_INT || v.t == JV_BOOL) { *out = want_float ? jv_float((double)v.u.i) : jv_int(v.u.i); return 0; }
    if (v.t == JV_FLOAT) {
        if (want_float) { *out = v; return 0; }
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) { *out = dflt; return 0; }
        *out = jv_int((int64_t)v.u.f);
        return 0;
    }
    if (v.t != JV_STR || v.u.s.n > 60) { *out = dflt; return 0; }
    char t[64], *end;
    jval s = ju_strip(v, NULL, 1, 1);
    memcpy(t, s.u.s.p, s.u.s.n);
    t[s.u.s.n] = 0;
    if (!s.u.s.n) { *out = dflt; return 0; }
    if (want_float) {
        double f = strtod(t, &end);
        *out = *end ? dflt : jv_float(f);
        return 0;
    }
    long long i = strtoll(t, &end, 10);
    if (!*end) { *out = jv_int(i); return 0; }
    /* jinja2's int filter reads "3.7" through float */
    double f = strtod(t, &end);
    *out = *end || !isfinite(f) || fabs(f) >= 9.2e18 ? dflt : jv_int((int64_t)f);
    (void)c;
    return 0;
}

static int f_round(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *pr = ARG(0, "precision"), *me = ARG(1, "method");
    if (!jv_is_num(v)) return ffail(c, "round", "a number is needed");
    int64_t p = pr && pr->t == JV_INT ? pr->u.i : 0;
    if (p > 15) p = 15;
    if (p < -15) p = -15;
    double x = jv_num(v), m = pow(10, (double)p), r;
    const char *method = me && me->t == JV_STR ? me->u.s.p : "common";
    if (!strncmp(method, "ceil", 4)) r = ceil(x * m) / m;
    else if (!strncmp(method, "floor", 5)) r = floor(x * m) / m;
    else {
        /* Python's round(): half to even */
        double y = x * m, f = floor(y), d = y - f;
        r = d > 0.5 ? f + 1 : d < 0.5 ? f : (fmod(f, 2) == 0 ? f : f + 1);
        r /= m;
    }
    *out = jv_float(r);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Sorting */
typedef struct { jctx *c; int ci, err; } sortctx;

static int key_cmp(sortctx *sc, jval a, jval b)
{
    if (sc->ci && a.t == JV_STR && b.t == JV_STR) {
        a = ju_case(sc->c, a, 'l');
        b = ju_case(sc->c, b, 'l');
    }
    int r = jv_cmp(a, b);
    if (r == -2) { sc->err = 1; return 0; }
    return r;
}

static void merge_sort(sortctx *sc, jval *k, jval *v, jval *tk, jval *tv, size_t n)
{
    if (n < 2 || sc->err) return;
    size_t h = n / 2;
    merge_sort(sc, k, v, tk, tv, h);
    merge_sort(sc, k + h, v + h, tk, tv, n - h);
    size_t i = 0, j = h, o = 0;
    while (i < h || j < n) {
        if (j >= n || (i < h && key_cmp(sc, k[i], k[j]) <= 0)) { tk[o] = k[i]; tv[o++] = v[i++]; }
        else { tk[o] = k[j]; tv[o++] = v[j++]; }
    }
    memcpy(k, tk, n * sizeof *k);
    memcpy(v, tv, n * sizeof *v);
    sc->c->steps += n;
}

/* items sorted by key (each item's `attribute`, or dict item's key/value) */
static int sorted(jctx *c, jlist *items, const jval *attr, int by, int ci, int rev, jval *out)
{
    size_t n = items->n;
    jval *k = ja_alloc(c->ar, (n + 1) * sizeof *k), *tk = ja_alloc(c->ar, (n + 1) * sizeof *k),
         *tv = ja_alloc(c->ar, (n + 1) * sizeof *k);
    *out = jv_list(c->ar, n);
    if (!k || !tk || !tv || out->t == JV_UNDEF) return jx_nomem(c);
    memcpy(out->u.l->v, items->v, n * sizeof *k);
    out->u.l->n = n;
    for (size_t i = 0; i < n; i++) {
        k[i] = items->v[i];
        if (by >= 0) k[i] = k[i].u.l->v[by];
        else if (attr && attr->t == JV_STR && jb_attr_path(c, k[i], attr->u.s.p, &k[i]) < 0) return -1;
    }
    sortctx sc = { c, ci, 0 };
    if (rev)   /* reversed, stable: sort the reversed list and reverse back */
        for (size_t i = 0; i < n / 2; i++) {
            jval x = k[i]; k[i] = k[n - 1 - i]; k[n - 1 - i] = x;
            x = out->u.l->v[i]; out->u.l->v[i] = out->u.l->v[n - 1 - i]; out->u.l->v[n - 1 - i] = x;
        }
    merge_sort(&sc, k, out->u.l->v, tk, tv, n);
    if (sc.err) return jx_fail(c, MOR_E_INVALID_ARG, "sort: values that cannot be ordered");
    if (rev)
        for (size_t i = 0; i < n / 2; i++) {
            jval x = out->u.l->v[i]; out->u.l->v[i] = out->u.l->v[n - 1 - i]; out->u.l->v[n - 1 - i] = x;
        }
    return 0;
}

static int f_sort(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *rev = ARG(0, "reverse"), *cs = ARG(1, "case_sensitive"), *attr = ARG(2, "attribute");
    jlist *items;
    if (jb_iter(c, v, &items) < 0) return -1;
    return sorted(c, items, attr, -1, !(cs && jv_truthy(*cs)), rev && jv_truthy(*rev), out);
}

static int f_dictsort(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *cs = ARG(0, "case_sensitive"), *by = ARG(1, "by"), *rev = ARG(2, "reverse");
    jval items;
    jfunc f = { "items", v, 1 };
    if (v.t != JV_DICT) return ffail(c, "dictsort", "a dict is needed");
    if (jb_call_func(c, &f, 0, NULL, NULL, &items) < 0) return -1;
    int k = by && by->t == JV_STR && !strcmp(by->u.s.p, "value");
    return sorted(c, items.u.l, NULL, k, !(cs && jv_truthy(*cs)), rev && jv_truthy(*rev), out);
}

static int f_minmax(jctx *c, jval v, int max, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *cs = ARG(0, "case_sensitive"), *attr = ARG(1, "attribute");
    jlist *items;
    jval s;
    if (jb_iter(c, v, &items) < 0 || sorted(c, items, attr, -1, !(cs && jv_truthy(*cs)), 0, &s) < 0) return -1;
    *out = s.u.l->n ? s.u.l->v[max ? s.u.l->n - 1 : 0] : jv_undef("No aggregated item, sequence was empty.");
    return 0;
}

/* ------------------------------------------------------------------------ */
/* map, select, reject, selectattr, rejectattr, unique, sum */
static int f_map(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *attr = ARG(-1, "attribute"), *dflt = ARG(-1, "default");
    jlist *items;
    /* jinja2 maps nothing over a false value (none included) */
    if (!jv_truthy(v)) v = jv_list(c->ar, 0);
    if (jb_iter(c, v, &items) < 0) return -1;
    *out = jv_list(c->ar, items->n);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    out->gen = JG_GEN;
    if (!attr && (na < 1 || args[0].t != JV_STR)) return ffail(c, "map", "a filter name or attribute= is needed");
    for (size_t i = 0; i < items->n; i++) {
        jval r;
        if (attr) {
            if (attr->t != JV_STR || jb_attr_path(c, items->v[i], attr->u.s.p, &r) < 0) return c->st ? -1 : ffail(c, "map", "bad attribute");
            if (r.t == JV_UNDEF && dflt) r = *dflt;
        } else if (jb_filter(c, args[0].u.s.p, items->v[i], na - 1, args + 1, kw + 1, &r) < 0) return -1;
        jl_push(c->ar, out->u.l, r);
    }
    return 0;
}

static int f_select(jctx *c, const char *name, jval v, int na, const jval *args, jval *out)
{
    int attr = strstr(name, "attr") != NULL, reject = name[0] == 'r';
    jlist *items;
    if (!jv_truthy(v)) v = jv_list(c->ar, 0);
    if (jb_iter(c, v, &items) < 0) return -1;
    *out = jv_list(c->ar, 0);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    out->gen = JG_GEN;
    if (attr && (na < 1 || args[0].t != JV_STR)) return ffail(c, name, "an attribute name is needed");
    int t0 = attr ? 1 : 0;
    if (na > t0 && args[t0].t != JV_STR) return ffail(c, name, "a test name is needed");
    for (size_t i = 0; i < items->n; i++) {
        jval x = items->v[i];
        int ok;
        if (attr && jb_attr_path(c, x, args[0].u.s.p, &x) < 0) return -1;
        if (na > t0) { if (jb_test(c, args[t0].u.s.p, x, na - t0 - 1, args + t0 + 1, &ok) < 0) return -1; }
        else ok = jv_truthy(x);
        if (ok != reject && jl_push(c->ar, out->u.l, items->v[i]) < 0) return jx_nomem(c);
    }
    return 0;
}

static int f_unique(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *cs = ARG(0, "case_sensitive"), *attr = ARG(1, "attribute");
    jlist *items;
    if (jb_iter(c, v, &items) < 0) return -1;
    jval seen = jv_list(c->ar, 0);
    *out = jv_list(c->ar, 0);
    if (out->t == JV_UNDEF || seen.t == JV_UNDEF) return jx_nomem(c);
    out->gen = JG_GEN;
    for (size_t i = 0; i < items->n; i++) {
        jval k = items->v[i];
        if (attr && attr->t == JV_STR && jb_attr_path(c, k, attr->u.s.p, &k) < 0) return -1;
        if (!(cs && jv_truthy(*cs)) && k.t == JV_STR) k = ju_case(c, k, 'l');
        int dup = 0;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++) dup = jv_eq(seen.u.l->v[j], k);
        c->steps += seen.u.l->n;
        if (!dup && (jl_push(c->ar, seen.u.l, k) < 0 || jl_push(c->ar, out->u.l, items->v[i]) < 0)) return jx_nomem(c);
    }
    return 0;
}

static int f_sum(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *attr = ARG(-1, "attribute"), *start = ARG(0, "start");
    jlist *items;
    if (jb_iter(c, v, &items) < 0) return -1;
    jval acc = start ? *start : jv_int(0);
    for (size_t i = 0; i < items->n; i++) {
        jval x = items->v[i];
        if (attr && attr->t == JV_STR && jb_attr_path(c, x, attr->u.s.p, &x) < 0) return -1;
        if (!jv_is_num(acc) || !jv_is_num(x)) return ffail(c, "sum", "numbers are needed");
        acc = acc.t == JV_FLOAT || x.t == JV_FLOAT ? jv_float(jv_num(acc) + jv_num(x)) : jv_int(acc.u.i + x.u.i);
    }
    *out = acc;
    return 0;
}

static int f_batch(jctx *c, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    const jval *cnt = ARG(0, "linecount"), *fill = ARG(1, "fill_with");
    jlist *items;
    if (!cnt || cnt->t != JV_INT || cnt->u.i < 1) return ffail(c, "batch", "a positive count is needed");
    if (jb_iter(c, v, &items) < 0) return -1;
    *out = jv_list(c->ar, 0);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    out->gen = JG_GEN;
    size_t k = (size_t)cnt->u.i;
    for (size_t i = 0; i < items->n; i += k) {
        jval row = jv_list(c->ar, 0);
        if (row.t == JV_UNDEF) return jx_nomem(c);
        for (size_t j = i; j < i + k && (j < items->n || fill); j++) jl_push(c->ar, row.u.l, j < items->n ? items->v[j] : *fill);
        jl_push(c->ar, out->u.l, row);
    }
    return 0;
}

static int f_escape(jctx *c, jval v, jval *out)
{
    if (v.t == JV_STR && v.markup) { *out = v; return 0; }
    jval s = jb_str_of(c, v);
    jbuf b;
    jb_init(&b, c->ar);
    jv_html_escape(&b, s.u.s.p, s.u.s.n);
    if (ret_str(c, &b, out) < 0) return -1;
    out->markup = 1;
    return 0;
}

static int f_list(jctx *c, jval v, jval *out)
{
    jlist *items;
    if (jb_iter(c, v, &items) < 0) return -1;
    *out = jv_list(c->ar, items->n);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    for (size_t i = 0; i < items->n; i++) jl_push(c->ar, out->u.l, items->v[i]);
    return 0;
}

static int f_reverse(jctx *c, jval v, jval *out)
{
    if (v.t == JV_STR) {
        jbuf b;
        jb_init(&b, c->ar);
        for (size_t e = v.u.s.n; e > 0;) {
            size_t st = e - 1;
            while (st > 0 && ((unsigned char)v.u.s.p[st] & 0xc0) == 0x80) st--;
            jb_add(&b, v.u.s.p + st, e - st);
            e = st;
        }
        return ret_str(c, &b, out);
    }
    if (f_list(c, v, out) < 0) return -1;
    out->gen = JG_REVERSED;
    jlist *l = out->u.l;
    for (size_t i = 0; i < l->n / 2; i++) { jval x = l->v[i]; l->v[i] = l->v[l->n - 1 - i]; l->v[l->n - 1 - i] = x; }
    return 0;
}

static int f_wordcount(jval v, jval *out)
{
    int64_t n = 0;
    int in = 0;
    for (size_t i = 0; i < v.u.s.n; i++) {
        unsigned char ch = (unsigned char)v.u.s.p[i];
        int w = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch >= 0x80;
        if (w && !in) n++;
        in = w;
    }
    *out = jv_int(n);
    return 0;
}

static int f_string_ops2(jctx *c, const char *name, jval s, int na, const jval *args, const char *const *kw,
                         jval *out);
static int f_string_ops(jctx *c, const char *name, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    jval s = jb_str_of(c, v);
    /* Markup's methods give Markup (replace goes through str: plain) */
    if (strcmp(name, "replace") && strcmp(name, "wordcount") && strcmp(name, "title")) {
        int r = f_string_ops2(c, name, s, na, args, kw, out);
        if (!r && out->t == JV_STR) out->markup = s.markup;
        return r;
    }
    return f_string_ops2(c, name, s, na, args, kw, out);
}

static int f_string_ops2(jctx *c, const char *name, jval s, int na, const jval *args, const char *const *kw, jval *out)
{
    if (!strcmp(name, "trim")) { const jval *ch = ARG(0, "chars"); *out = ju_strip(s, ch, 1, 1); return 0; }
    if (!strcmp(name, "upper")) { *out = ju_case(c, s, 'u'); return 0; }
    if (!strcmp(name, "lower")) { *out = ju_case(c, s, 'l'); return 0; }
    if (!strcmp(name, "capitalize")) { *out = ju_case(c, s, 'c'); return 0; }
    if (!strcmp(name, "title")) { *out = ju_case(c, s, 'T'); return 0; }
    if (!strcmp(name, "wordcount")) return f_wordcount(s, out);
    /* replace */
    const jval *old = ARG(0, "old"), *nw = ARG(1, "new"), *cnt = ARG(2, "count");
    if (!old || !nw) return ffail(c, name, "old and new are needed");
    *out = ju_replace(c, s, jb_str_of(c, *old), jb_str_of(c, *nw), cnt && cnt->t == JV_INT ? cnt->u.i : -1);
    return 0;
}

static int f_items(jctx *c, jval v, jval *out)
{
    if (v.t == JV_UNDEF) { *out = jv_list(c->ar, 0); return out->t == JV_UNDEF ? jx_nomem(c) : 0; }
    if (v.t != JV_DICT) return jx_fail(c, MOR_E_INVALID_ARG, "Can only get item pairs from a mapping.");
    jfunc f = { "items", v, 1 };
    if (jb_call_func(c, &f, 0, NULL, NULL, out) < 0) return -1;
    out->gen = JG_GEN;
    return 0;
}

static int filter(jctx *c, const char *name, jval v, int na, const jval *args, const char *const *kw, jval *out);

int jb_filter(jctx *c, const char *name, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    /* map('map', 'map', ...) calls filters in filters: a level of nesting each */
    if (++c->depth > JINJA_MAX_DEPTH)
        return jx_fail(c, MOR_E_UNSUPPORTED, "evaluation nested deeper than %d", JINJA_MAX_DEPTH);
    int r = filter(c, name, v, na, args, kw, out);
    c->depth--;
    return r;
}

static int filter(jctx *c, const char *name, jval v, int na, const jval *args, const char *const *kw, jval *out)
{
    static const char *const strf[] = { "trim", "upper", "lower", "capitalize", "title", "wordcount", "replace", NULL };
    for (int i = 0; strf[i]; i++)
        if (!strcmp(name, strf[i])) return f_string_ops(c, name, v, na, args, kw, out);
    if (!strcmp(name, "tojson")) return f_tojson(c, v, na, args, kw, out);
    if (!strcmp(name, "length") || !strcmp(name, "count")) return f_length(c, v, out);
    if (!strcmp(name, "first") || !strcmp(name, "last")) return f_first_last(c, v, name[0] == 'l', out);
    if (!strcmp(name, "join")) return f_join(c, v, na, args, kw, out);
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const jval *d = ARG(0, "default_value"), *b = ARG(1, "boolean");
        int use = v.t == JV_UNDEF || (b && jv_truthy(*b) && !jv_truthy(v));
        *out = use ? (d ? *d : jv_str("", 0)) : v;
        return 0;
    }
    if (!strcmp(name, "items")) return f_items(c, v, out);
    if (!strcmp(name, "list")) return f_list(c, v, out);
    if (!strcmp(name, "string")) { *out = jb_str_of(c, v); return 0; }
    if (!strcmp(name, "safe")) { *out = jb_str_of(c, v); out->markup = 1; return 0; }
    if (!strcmp(name, "escape") || !strcmp(name, "e")) return f_escape(c, v, out);
    if (!strcmp(name, "int") || !strcmp(name, "float")) {
        const jval *d = ARG(0, "default");
        return to_number(c, v, name[0] == 'f', d ? *d : name[0] == 'f' ? jv_float(0) : jv_int(0), out);
    }
    if (!strcmp(name, "abs")) {
        if (!jv_is_num(v)) return ffail(c, name, "a number is needed");
        *out = v.t == JV_FLOAT ? jv_float(fabs(v.u.f)) : jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        return 0;
    }
    if (!strcmp(name, "round")) return f_round(c, v, na, args, kw, out);
    if (!strcmp(name, "map")) return f_map(c, v, na, args, kw, out);
    if (!strcmp(name, "select") || !strcmp(name, "reject") || !strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return f_select(c, name, v, na, args, out);
    if (!strcmp(name, "unique")) return f_unique(c, v, na, args, kw, out);
    if (!strcmp(name, "sort")) return f_sort(c, v, na, args, kw, out);
    if (!strcmp(name, "dictsort")) return f_dictsort(c, v, na, args, kw, out);
    if (!strcmp(name, "reverse")) return f_reverse(c, v, out);
    if (!strcmp(name, "indent")) return f_indent(c, v, na, args, kw, out);
    if (!strcmp(name, "min") || !strcmp(name, "max")) return f_minmax(c, v, name[1] == 'a', na, args, kw, out);
    if (!strcmp(name, "sum")) return f_sum(c, v, na, args, kw, out);
    if (!strcmp(name, "batch")) return f_batch(c, v, na, args, kw, out);
    if (!strcmp(name, "attr")) {
        if (na < 1 || args[0].t != JV_STR) return ffail(c, name, "a name is needed");
        return jb_getattr(c, v, args[0].u.s.p, args[0].u.s.n, out);
    }
    return jx_fail(c, MOR_E_INVALID_ARG, "No filter named '%s' found.", name);
}

/* ------------------------------------------------------------------------ */
/* Tests */
static int t_compare(jctx *c, const char *name, jval v, int na, const jval *args, int *out)
{
    static const struct { const char *n; int op; } ops[] = {
        { "eq", 0 }, { "equalto", 0 }, { "==", 0 }, { "ne", 1 }, { "!=", 1 }, { "lt", 2 }, { "lessthan", 2 },
        { "<", 2 }, { "le", 3 }, { "<=", 3 }, { "gt", 4 }, { "greaterthan", 4 }, { ">", 4 }, { "ge", 5 }, { ">=", 5 },
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        if (strcmp(name, ops[i].n)) continue;
        if (na < 1) return jx_fail(c, MOR_E_INVALID_ARG, "test %s: an argument is needed", name);
        if (ops[i].op < 2) { *out = jv_eq(v, args[0]) == (ops[i].op == 0); return 1; }
        int r = jv_cmp(v, args[0]);
        if (r == -2) return jx_fail(c, MOR_E_INVALID_ARG, "test %s: values that cannot be ordered", name);
        *out = ops[i].op == 2 ? r < 0 : ops[i].op == 3 ? r <= 0 : ops[i].op == 4 ? r > 0 : r >= 0;
        return 1;
    }
    return 0;
}

int jb_test(jctx *c, const char *name, jval v, int na, const jval *args, int *out)
{
    int t = v.t, r = t_compare(c, name, v, na, args, out);
    if (r) return r < 0 ? -1 : 0;
    if (!strcmp(name, "defined")) *out = t != JV_UNDEF;
    else if (!strcmp(name, "undefined")) *out = t == JV_UNDEF;
    else if (!strcmp(name, "none")) *out = t == JV_NONE;
    else if (!strcmp(name, "string")) *out = t == JV_STR;
    else if (!strcmp(name, "number")) *out = t == JV_INT || t == JV_FLOAT || t == JV_BOOL;
    else if (!strcmp(name, "integer")) *out = t == JV_INT;
    else if (!strcmp(name, "float")) *out = t == JV_FLOAT;
    else if (!strcmp(name, "boolean")) *out = t == JV_BOOL;
    else if (!strcmp(name, "true")) *out = t == JV_BOOL && v.u.i;
    else if (!strcmp(name, "false")) *out = t == JV_BOOL && !v.u.i;
    else if (!strcmp(name, "mapping")) *out = t == JV_DICT;
    else if (!strcmp(name, "iterable")) *out = t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF;
    else if (!strcmp(name, "sequence")) *out = t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF;
    else if (!strcmp(name, "callable")) *out = t == JV_MACRO || t == JV_FUNC;
    else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        jval s = jb_str_of(c, v);
        jval o = ju_case(c, s, name[0]);
        *out = o.u.s.n == s.u.s.n && !memcmp(o.u.s.p, s.u.s.p, s.u.s.n);
    } else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        if (t != JV_INT && t != JV_BOOL) return jx_fail(c, MOR_E_INVALID_ARG, "test %s: an integer is needed", name);
        int64_t d = name[0] == 'd' ? (na > 0 && args[0].t == JV_INT ? args[0].u.i : 0) : 2;
        if (!d) return jx_fail(c, MOR_E_INVALID_ARG, "test %s: integer division or modulo by zero", name);
        int64_t m = v.u.i % d;
        *out = name[0] == 'o' ? m != 0 : m == 0;
    } else if (!strcmp(name, "in")) {
        if (na < 1) return jx_fail(c, MOR_E_INVALID_ARG, "test in: a sequence is needed");
        jval seq = args[0];
        if (seq.t == JV_STR && t == JV_STR) *out = !v.u.s.n || memmem(seq.u.s.p, seq.u.s.n, v.u.s.p, v.u.s.n);
        else if (seq.t == JV_DICT) *out = jd_get(seq.u.d, v) != NULL;
        else if (seq.t == JV_LIST) { *out = 0; for (size_t i = 0; i < seq.u.l->n && !*out; i++) *out = jv_eq(v, seq.u.l->v[i]); }
        else return jx_fail(c, MOR_E_INVALID_ARG, "test in: '%s' is not a container", jv_type_name(seq));
    } else if (!strcmp(name, "sameas")) {
        *out = na > 0 && args[0].t == t && (t == JV_NONE || t == JV_UNDEF || (t == JV_BOOL && args[0].u.i == v.u.i) ||
                                            ((t == JV_LIST || t == JV_DICT) && args[0].u.l == v.u.l));
    } else if (!strcmp(name, "escaped")) *out = 0;
    else if (!strcmp(name, "filter") || !strcmp(name, "test")) *out = t == JV_STR;
    else return jx_fail(c, MOR_E_INVALID_ARG, "No test named '%s' found.", name);
    return 0;
}
