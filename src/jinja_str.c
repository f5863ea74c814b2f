/* jinja_str.c - Python's str methods as chat templates call them (strip,
 * split, startswith, replace, format, join, ...), on UTF-8 text by code
 * point. Case mapping (upper, lower, title, capitalize) covers ASCII,
 * Latin-1, Latin Extended-A, Greek and Cyrillic: other letters keep their
 * case (a documented difference from Python). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "unicode.h"

size_t ju_next(const char *s, size_t n, size_t i, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)s + i;
    size_t k = ju_off(s + i, n - i, 1);
    if (k == 1) *cp = p[0];
    else if (k == 2) *cp = (uint32_t)(p[0] & 0x1f) << 6 | (p[1] & 0x3f);
    else if (k == 3) *cp = (uint32_t)(p[0] & 0x0f) << 12 | (uint32_t)(p[1] & 0x3f) << 6 | (p[2] & 0x3f);
    else *cp = (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3f) << 12 | (uint32_t)(p[2] & 0x3f) << 6 | (p[3] & 0x3f);
    return k;
}

static void put_utf8_cp(jbuf *b, uint32_t cp)
{
    char t[4];
    jb_add(b, t, utf8_encode(cp, t));
}

/* str.isspace() */
int ju_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == ' ' || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static int mfail(jctx *c, const char *name, const char *what)
{
    return jx_fail(c, MOR_E_INVALID_ARG, "str.%s: %s", name, what);
}

/* does code point cp occur in chars? */
static int in_chars(jval chars, uint32_t cp)
{
    for (size_t i = 0; i < chars.u.s.n;) {
        uint32_t d;
        i += ju_next(chars.u.s.p, chars.u.s.n, i, &d);
        if (d == cp) return 1;
    }
    return 0;
}

jval ju_strip(jval s, const jval *chars, int left, int right)
{
    int ws = !chars || chars->t != JV_STR;
    size_t st = 0, en = s.u.s.n;
    while (left && st < en) {
        uint32_t cp;
        size_t k = ju_next(s.u.s.p, en, st, &cp);
        if (ws ? !ju_space(cp) : !in_chars(*chars, cp)) break;
        st += k;
    }
    while (right && en > st) {
        size_t b = en - 1;
        while (b > st && ((unsigned char)s.u.s.p[b] & 0xc0) == 0x80) b--;
        uint32_t cp;
        ju_next(s.u.s.p, en, b, &cp);
        if (ws ? !ju_space(cp) : !in_chars(*chars, cp)) break;
        en = b;
    }
    return jv_str(s.u.s.p + st, en - st);
}

static int push_str(jctx *c, jval *l, const char *p, size_t n)
{
    return jl_push(c->ar, l->u.l, jv_str(p, n)) < 0 ? jx_nomem(c) : 0;
}

/* split on runs of whitespace (sep None), left to right or right to left */
static int split_ws(jctx *c, jval s, int64_t max, int right, jval *out)
{
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    jval parts = jv_list(c->ar, 0);
    if (parts.t == JV_UNDEF) return jx_nomem(c);
    if (!right) {
        size_t i = 0;
        for (;;) {
            uint32_t cp;
            while (i < n && (ju_next(p, n, i, &cp), ju_space(cp))) i += ju_next(p, n, i, &cp);
            if (i >= n) break;
            if (max >= 0 && (int64_t)parts.u.l->n >= max) {
                jval rest = jv_str(p + i, n - i);
                rest = ju_strip(rest, NULL, 0, 1);
                if (push_str(c, &parts, rest.u.s.p, rest.u.s.n) < 0) return -1;
                break;
            }
            size_t j = i;
            while (j < n && (ju_next(p, n, j, &cp), !ju_space(cp))) j += ju_next(p, n, j, &cp);
            if (push_str(c, &parts, p + i, j - i) < 0) return -1;
            i = j;
        }
        *out = parts;
        return 0;
    }
    /* from the right: collect reversed, then reverse */
    jval t = ju_strip(s, NULL, 0, 1);
    size_t en = t.u.s.n;
    while (en > 0) {
        if (max >= 0 && (int64_t)parts.u.l->n >= max) {
            jval rest = ju_strip(jv_str(p, en), NULL, 1, 0);
            if (rest.u.s.n && push_str(c, &parts, rest.u.s.p, rest.u.s.n) < 0) return -1;
            break;
        }
        size_t b = en;
        while (b > 0 && !ju_space((unsigned char)p[b - 1])) b--;
        if (push_str(c, &parts, p + b, en - b) < 0) return -1;
        while (b > 0 && ju_space((unsigned char)p[b - 1])) b--;
        en = b;
    }
    for (size_t i = 0, k = parts.u.l->n; i < k / 2; i++) {
        jval x = parts.u.l->v[i]; parts.u.l->v[i] = parts.u.l->v[k - 1 - i]; parts.u.l->v[k - 1 - i] = x;
    }
    *out = parts;
    return 0;
}

static int split(jctx *c, jval s, int na, const jval *args, const char *const *kw, int right, jval *out)
{
    const jval *sep = NULL, *mx = NULL;
    int pos = 0;
    for (int i = 0; i < na; i++) {
        if (kw[i]) { if (!strcmp(kw[i], "sep")) sep = &args[i]; else if (!strcmp(kw[i], "maxsplit")) mx = &args[i]; }
        else if (pos++ == 0) sep = &args[i];
        else mx = &args[i];
    }
    int64_t max = mx && mx->t == JV_INT ? mx->u.i : -1;
    if (!sep || sep->t == JV_NONE) return split_ws(c, s, max, right, out);
    if (sep->t != JV_STR) return mfail(c, "split", "the separator must be a string");
    if (!sep->u.s.n) return mfail(c, "split", "empty separator");
    jval parts = jv_list(c->ar, 0);
    if (parts.t == JV_UNDEF) return jx_nomem(c);
    const char *p = s.u.s.p, *q = sep->u.s.p;
    size_t n = s.u.s.n, m = sep->u.s.n;
    if (!right) {
        size_t i = 0;
        for (;;) {
            const char *f = (max < 0 || (int64_t)parts.u.l->n < max) ? memmem(p + i, n - i, q, m) : NULL;
            if (!f) { if (push_str(c, &parts, p + i, n - i) < 0) return -1; break; }
            if (push_str(c, &parts, p + i, (size_t)(f - p) - i) < 0) return -1;
            i = (size_t)(f - p) + m;
        }
        *out = parts;
        return 0;
    }
    size_t en = n;
    for (;;) {
        size_t f = (size_t)-1;
        if (max < 0 || (int64_t)parts.u.l->n < max)
            for (size_t b = en >= m ? en - m + 1 : 0; b-- > 0;)
                if (!memcmp(p + b, q, m)) { f = b; break; }
        if (f == (size_t)-1) { if (push_str(c, &parts, p, en) < 0) return -1; break; }
        if (push_str(c, &parts, p + f + m, en - f - m) < 0) return -1;
        en = f;
    }
    for (size_t i = 0, k = parts.u.l->n; i < k / 2; i++) {
        jval x = parts.u.l->v[i]; parts.u.l->v[i] = parts.u.l->v[k - 1 - i]; parts.u.l->v[k - 1 - i] = x;
    }
    *out = parts;
    return 0;
}

static int affix(jctx *c, jval s, const char *name, int na, const jval *args, jval *out)
{
    int end = name[0] == 'e';
    if (na < 1) return mfail(c, name, "expected an argument");
    jlist one = { 1, 1, (jval *)&args[0] };
    const jlist *l = args[0].t == JV_LIST ? args[0].u.l : &one;
    for (size_t i = 0; i < l->n; i++) {
        jval a = l->v[i];
        if (a.t != JV_STR) return mfail(c, name, "the argument must be a string or a tuple of strings");
        if (a.u.s.n <= s.u.s.n && !memcmp(s.u.s.p + (end ? s.u.s.n - a.u.s.n : 0), a.u.s.p, a.u.s.n)) {
            *out = jv_bool(1);
            return 0;
        }
    }
    *out = jv_bool(0);
    return 0;
}

jval ju_replace(jctx *c, jval s, jval old, jval new_, int64_t count)
{
    jbuf b;
    jb_init(&b, c->ar);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int64_t done = 0;
    if (!old.u.s.n) {   /* Python puts `new` between every character and at both ends */
        for (; i <= n && (count < 0 || done < count); done++) {
            jb_add(&b, new_.u.s.p, new_.u.s.n);
            if (i >= n) { i = n + 1; break; }
            size_t k = ju_off(p + i, n - i, 1);
            jb_add(&b, p + i, k);
            i += k;
        }
        if (i < n) jb_add(&b, p + i, n - i);
        return jv_str(b.over ? "" : b.p, b.over ? 0 : b.n);
    }
    for (;;) {
        const char *f = count < 0 || done < count ? memmem(p + i, n - i, old.u.s.p, old.u.s.n) : NULL;
        if (!f) { jb_add(&b, p + i, n - i); break; }
        jb_add(&b, p + i, (size_t)(f - p) - i);
        jb_add(&b, new_.u.s.p, new_.u.s.n);
        i = (size_t)(f - p) + old.u.s.n;
        done++;
    }
    return jv_str(b.over ? "" : b.p, b.over ? 0 : b.n);
}

/* Simple case mapping of the alphabets chat texts use most: ASCII, Latin-1,
 * Latin Extended-A, Greek, Cyrillic (others have no case here). */
static uint32_t cp_upper(uint32_t c)
{
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return c;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7) || (c >= 0x3b1 && c <= 0x3cb && c != 0x3c2) || (c >= 0x430 && c <= 0x44f))
        return c - 32;
    if (c == 0xff) return 0x178;
    if (c == 0x3c2) return 0x3a3;
    if (c >= 0x450 && c <= 0x45f) return c - 80;
    if (((c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177)) && (c & 1)) return c - 1;
    if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) && !(c & 1)) return c - 1;
    return c;
}

static uint32_t cp_lower(uint32_t c)
{
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if ((c >= 0xc0 && c <= 0xde && c != 0xd7) || (c >= 0x391 && c <= 0x3ab && c != 0x3a2) || (c >= 0x410 && c <= 0x42f))
        return c + 32;
    if (c == 0x178) return 0xff;
    if (c >= 0x400 && c <= 0x40f) return c + 80;
    if (((c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177)) && !(c & 1)) return c + 1;
    if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) && (c & 1)) return c + 1;
    return c;
}

/* a letter jinja2's title filter starts a word after: - ( { [ < and spaces */
static int title_break(uint32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || ju_space(c); }

jval ju_case(jctx *c, jval s, int mode)
{
    /* mode: 'u' upper, 'l' lower, 't' str.title, 'T' jinja2's title filter,
     * 'c' capitalize, 's' swapcase */
    jbuf b;
    jb_init(&b, c->ar);
    int prev_cased = 0, first = 1;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp, up, lo;
        size_t k = ju_next(s.u.s.p, s.u.s.n, i, &cp);
        if (k == 1 && cp >= 0x80) { jb_add(&b, s.u.s.p + i, 1); i++; prev_cased = first = 0; continue; }   /* not UTF-8: kept */
        i += k;
        up = cp_upper(cp);
        lo = cp_lower(cp);
        int cased = up != cp || lo != cp;
        int want_up = mode == 'u' || (mode == 't' && !prev_cased) || (mode == 'T' && first) ||
                      (mode == 'c' && first) || (mode == 's' && up != cp);
        uint32_t r = want_up ? up : (mode == 's' && lo == cp) ? cp : lo;
        if (cp == 0xdf && want_up) { jb_adds(&b, mode == 'u' || mode == 's' ? "SS" : "Ss"); r = 0; }   /* sharp s */
        if (r) put_utf8_cp(&b, r);
        /* str.title: a word goes on through cased letters; the filter: up to a break */
        prev_cased = cased;
        first = mode == 'T' ? title_break(cp) : 0;
    }
    return jv_str(b.over ? "" : b.p, b.over ? 0 : b.n);
}

static int find(jctx *c, jval s, const char *name, int na, const jval *args, jval *out)
{
    if (na < 1 || args[0].t != JV_STR) return mfail(c, name, "expected a string");
    jval sub = args[0];
    int64_t k = 0, at = -1;
    if (!strcmp(name, "count")) {
        if (!sub.u.s.n) { *out = jv_int((int64_t)ju_len(s.u.s.p, s.u.s.n) + 1); return 0; }
        for (const char *f = s.u.s.p; (f = memmem(f, s.u.s.n - (size_t)(f - s.u.s.p), sub.u.s.p, sub.u.s.n)); f += sub.u.s.n) k++;
        *out = jv_int(k);
        return 0;
    }
    if (name[0] == 'r') {
        for (size_t b = s.u.s.n >= sub.u.s.n ? s.u.s.n - sub.u.s.n + 1 : 0; b-- > 0;)
            if (!memcmp(s.u.s.p + b, sub.u.s.p, sub.u.s.n)) { at = (int64_t)b; break; }
    } else {
        const char *f = memmem(s.u.s.p, s.u.s.n, sub.u.s.p, sub.u.s.n);
        if (f || !sub.u.s.n) at = f ? f - s.u.s.p : 0;
    }
    if (at >= 0) at = (int64_t)ju_len(s.u.s.p, (size_t)at);
    if (at < 0 && !strcmp(name, "index")) return mfail(c, name, "substring not found");
    *out = jv_int(at);
    return 0;
}

/* positional argument i */
static const jval *arg(int na, const jval *args, const char *const *kw, int i)
{
    int pos = 0;
    for (int k = 0; k < na; k++) {
        if (kw && kw[k]) continue;
        if (pos++ == i) return &args[k];
    }
    return NULL;
}

/* str.format: {} {0} {name} and {{ }}; no format specs */
static int format(jctx *c, jval s, int na, const jval *args, const char *const *kw, jval *out)
{
    jbuf b;
    jb_init(&b, c->ar);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    int autoi = 0;
    for (size_t i = 0; i < n; i++) {
        if ((p[i] == '{' || p[i] == '}') && i + 1 < n && p[i + 1] == p[i]) { jb_addc(&b, p[i]); i++; continue; }
        if (p[i] == '}') return mfail(c, "format", "single '}' encountered in format string");
        if (p[i] != '{') { jb_addc(&b, p[i]); continue; }
        const char *e = memchr(p + i, '}', n - i);
        if (!e) return mfail(c, "format", "single '{' encountered in format string");
        char field[64];
        size_t fl = (size_t)(e - p) - i - 1;
        if (fl >= sizeof field) return mfail(c, "format", "a field name too long");
        memcpy(field, p + i + 1, fl);
        field[fl] = 0;
        if (strpbrk(field, ":!.[")) return mfail(c, "format", "format specs and conversions are not supported");
        const jval *v = NULL;
        if (!fl) v = arg(na, args, kw, autoi++);
        else if (field[0] >= '0' && field[0] <= '9') v = arg(na, args, kw, atoi(field));
        else
            for (int k = 0; k < na; k++)
                if (kw[k] && !strcmp(kw[k], field)) v = &args[k];
        if (!v) return mfail(c, "format", "a replacement field without its argument");
        jv_to_str(&b, *v);
        i = (size_t)(e - p);
    }
    if (b.over) return jx_nomem(c);
    *out = jv_str(b.p, b.n);
    return 0;
}

static int join(jctx *c, jval s, int na, const jval *args, jval *out)
{
    jlist *items;
    if (na < 1 || jb_iter(c, args[0], &items) < 0) return na < 1 ? mfail(c, "join", "expected an iterable") : -1;
    jbuf b;
    jb_init(&b, c->ar);
    for (size_t i = 0; i < items->n; i++) {
        if (items->v[i].t != JV_STR) return mfail(c, "join", "sequence item is not a str");
        if (i) jb_add(&b, s.u.s.p, s.u.s.n);
        jb_add(&b, items->v[i].u.s.p, items->v[i].u.s.n);
    }
    if (b.over) return jx_nomem(c);
    *out = jv_str(b.p, b.n);
    return 0;
}

int ju_splitlines(jctx *c, jval s, int keep, jval *out)
{
    *out = jv_list(c->ar, 0);
    if (out->t == JV_UNDEF) return jx_nomem(c);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, st = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = ju_next(p, n, i, &cp);
        if (cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
            cp == 0x2028 || cp == 0x2029) {
            if (cp == '\r' && i + 1 < n && p[i + 1] == '\n') k = 2;
            if (push_str(c, out, p + st, (keep ? i + k : i) - st) < 0) return -1;
            st = i + k;
        }
        i += k;
    }
    if (st < n && push_str(c, out, p + st, n - st) < 0) return -1;
    return 0;
}

static int is_class(jval s, const char *name)
{
    if (!s.u.s.n) return 0;
    int any_cased = 0;
    for (size_t i = 0; i < s.u.s.n; i++) {
        unsigned char ch = (unsigned char)s.u.s.p[i];
        int dig = ch >= '0' && ch <= '9', up = ch >= 'A' && ch <= 'Z', lo = ch >= 'a' && ch <= 'z';
        if (!strcmp(name, "isdigit") || !strcmp(name, "isnumeric") || !strcmp(name, "isdecimal")) { if (!dig) return 0; }
        else if (!strcmp(name, "isalpha")) { if (!up && !lo && ch < 0x80) return 0; }
        else if (!strcmp(name, "isalnum")) { if (!up && !lo && !dig && ch < 0x80) return 0; }
        else if (!strcmp(name, "isspace")) { if (!ju_space(ch)) return 0; }
        else if (!strcmp(name, "isupper")) { if (lo) return 0; any_cased |= up; }
        else if (!strcmp(name, "islower")) { if (up) return 0; any_cased |= lo; }
    }
    return strcmp(name, "isupper") && strcmp(name, "islower") ? 1 : any_cased;
}

int jb_str_method(jctx *c, jval s, const char *name, int na, const jval *args, const char *const *kw, jval *out)
{
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        const jval *ch = na > 0 ? &args[0] : NULL;
        if (ch && ch->t != JV_STR && ch->t != JV_NONE) return mfail(c, name, "arg must be None or str");
        *out = ju_strip(s, ch, name[0] != 'r', name[0] != 'l');
        return 0;
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) return split(c, s, na, args, kw, name[0] == 'r', out);
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) return affix(c, s, name, na, args, out);
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize")) {
        *out = ju_case(c, s, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 't' ? 't' : 'c');
        return 0;
    }
    if (!strcmp(name, "swapcase")) { *out = ju_case(c, s, 's'); return 0; }
    if (!strcmp(name, "replace")) {
        if (na < 2 || args[0].t != JV_STR || args[1].t != JV_STR) return mfail(c, name, "expected two strings");
        *out = ju_replace(c, s, args[0], args[1], na > 2 && args[2].t == JV_INT ? args[2].u.i : -1);
        return 0;
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "count"))
        return find(c, s, name, na, args, out);
    if (!strcmp(name, "format")) return format(c, s, na, args, kw, out);
    if (!strcmp(name, "join")) return join(c, s, na, args, out);
    if (!strcmp(name, "splitlines")) return ju_splitlines(c, s, na > 0 && jv_truthy(args[0]), out);
    *out = jv_bool(is_class(s, name));
    return 0;
}
