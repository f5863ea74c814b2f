/* pickle.c - a restricted pickle virtual machine for torch state dicts.
 *
 * Values live in an arena owned by the machine and are freed together at the
 * end, so sharing through the memo (BINGET) needs no reference counting and
 * cycles are harmless. Every opcode reads a bounded number of bytes that are
 * checked against the end of the buffer, the stack and memo are bounded, and
 * each opcode creates at most one value, so memory stays linear in the
 * input size. */
#include "pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

enum { PV_NONE, PV_BOOL, PV_INT, PV_FLOAT, PV_STR, PV_TUPLE, PV_LIST, PV_DICT, PV_GLOBAL, PV_STORAGE, PV_TENSOR };

/* the whitelisted globals */
enum { G_ORDERED_DICT, G_REBUILD_TENSOR_V2, G_REBUILD_PARAMETER, G_FLOAT_STORAGE, G_HALF_STORAGE, G_BF16_STORAGE };

typedef struct pv pv;
struct pv {
    int type;
    int64_t i;          /* PV_BOOL, PV_INT; PV_GLOBAL: which G_* */
    double f;           /* PV_FLOAT */
    char *s;            /* PV_STR (NUL-terminated copy) */
    size_t slen;
    pv **items;         /* PV_TUPLE, PV_LIST; PV_DICT: key, value, key, value ... */
    size_t n, cap;      /* number of items (a dict holds n/2 pairs) */
    pk_tensor *tensor;  /* PV_STORAGE (dtype, storage_key, storage_numel) and PV_TENSOR */
};

#define PK_MAX_STACK (1u << 20)
#define PK_MAX_MARKS (1u << 16)

typedef struct {
    const uint8_t *buf, *p, *end;
    pv **stack;
    size_t sp, stack_cap;
    size_t *marks;
    size_t nmarks, marks_cap;
    pv **memo;
    size_t memo_cap, memo_len;   /* memo_len: how many indices are set */
    pv **all;             /* arena */
    size_t nall, all_cap;
    char *err;
    size_t errcap;
} pvm;

static int vfail(pvm *m, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cv_fail(m->err, m->errcap, "pickle: %s (at byte %zu)", msg, (size_t)(m->p - m->buf));
}

static pv *vnew(pvm *m, int type)
{
    pv *v;
    if (m->nall == m->all_cap) {
        size_t cap = m->all_cap ? m->all_cap * 2 : 256;
        pv **a = realloc(m->all, cap * sizeof *a);
        if (!a) { vfail(m, "out of memory"); return NULL; }
        m->all = a;
        m->all_cap = cap;
    }
    v = calloc(1, sizeof *v);
    if (!v) { vfail(m, "out of memory"); return NULL; }
    v->type = type;
    m->all[m->nall++] = v;
    return v;
}

static void vm_free(pvm *m)
{
    for (size_t i = 0; i < m->nall; i++) {
        pv *v = m->all[i];
        free(v->s);
        free(v->items);
        if (v->tensor) {
            free(v->tensor->storage_key);
            free(v->tensor);
        }
        free(v);
    }
    free(m->all);
    free(m->stack);
    free(m->marks);
    free(m->memo);
}

static int push(pvm *m, pv *v)
{
    if (!v) return -1;
    if (m->sp == m->stack_cap) {
        size_t cap = m->stack_cap ? m->stack_cap * 2 : 64;
        pv **s;
        if (m->sp >= PK_MAX_STACK) return vfail(m, "stack too deep");
        s = realloc(m->stack, cap * sizeof *s);
        if (!s) return vfail(m, "out of memory");
        m->stack = s;
        m->stack_cap = cap;
    }
    m->stack[m->sp++] = v;
    return 0;
}

static pv *pop(pvm *m)
{
    size_t floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
    if (m->sp <= floor) { vfail(m, "stack underflow"); return NULL; }
    return m->stack[--m->sp];
}

static pv *top(pvm *m)
{
    size_t floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
    if (m->sp <= floor) { vfail(m, "stack underflow"); return NULL; }
    return m->stack[m->sp - 1];
}

/* Pop the items above the last MARK; returns their index on the stack. */
static int pop_mark(pvm *m, size_t *first)
{
    if (!m->nmarks) return vfail(m, "no MARK on the stack");
    *first = m->marks[--m->nmarks];
    return 0;
}

static int append_item(pvm *m, pv *c, pv *item)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        pv **it = realloc(c->items, cap * sizeof *it);
        if (!it) return vfail(m, "out of memory");
        c->items = it;
        c->cap = cap;
    }
    c->items[c->n++] = item;
    return 0;
}

/* The object just below the items of a popped MARK (the dict or list that
 * SETITEMS / APPENDS fill). */
static pv *below_mark(pvm *m, size_t first)
{
    size_t floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
    if (first <= floor) { vfail(m, "stack underflow"); return NULL; }
    return m->stack[first - 1];
}

/* A tuple of the stack items [first, sp). */
static pv *make_tuple(pvm *m, size_t first)
{
    pv *t = vnew(m, PV_TUPLE);
    size_t n = m->sp - first;
    if (!t) return NULL;
    if (n) {
        t->items = malloc(n * sizeof *t->items);
        if (!t->items) { vfail(m, "out of memory"); return NULL; }
        memcpy(t->items, m->stack + first, n * sizeof *t->items);
    }
    t->n = t->cap = n;
    m->sp = first;
    return t;
}

static int need(pvm *m, size_t n)
{
    if ((size_t)(m->end - m->p) < n) return vfail(m, "truncated");
    return 0;
}

static pv *make_str(pvm *m, size_t n)
{
    pv *v;
    if (need(m, n)) return NULL;
    v = vnew(m, PV_STR);
    if (!v) return NULL;
    v->s = cv_strndup((const char *)m->p, n);
    if (!v->s) { vfail(m, "out of memory"); return NULL; }
    v->slen = n;
    m->p += n;
    return v;
}

static pv *make_int(pvm *m, int64_t i)
{
    pv *v = vnew(m, PV_INT);
    if (v) v->i = i;
    return v;
}

static int memo_put(pvm *m, uint64_t idx, pv *v)
{
    /* Real memo indices count up from 0 and are fewer than the opcodes, so an
     * index beyond the input length is corrupt (and would cost memory). */
    if (idx > (uint64_t)(m->end - m->buf) + 16) return vfail(m, "memo index %llu out of range", (unsigned long long)idx);
    if (idx >= m->memo_cap) {
        size_t cap = m->memo_cap ? m->memo_cap : 64;
        pv **mm;
        while (cap <= idx) cap *= 2;
        mm = realloc(m->memo, cap * sizeof *mm);
        if (!mm) return vfail(m, "out of memory");
        memset(mm + m->memo_cap, 0, (cap - m->memo_cap) * sizeof *mm);
        m->memo = mm;
        m->memo_cap = cap;
    }
    if (!m->memo[idx]) m->memo_len++;
    m->memo[idx] = v;
    return 0;
}

static int memo_get(pvm *m, uint64_t idx)
{
    if (idx >= m->memo_cap || !m->memo[idx]) return vfail(m, "memo index %llu not set", (unsigned long long)idx);
    return push(m, m->memo[idx]);
}

/* GLOBAL "module\nname\n": only whitelisted names become values. */
static int op_global(pvm *m)
{
    static const struct { const char *mod, *name; int g; } allowed[] = {
        {"collections", "OrderedDict", G_ORDERED_DICT},
        {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_TENSOR_V2},
        {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER},
        {"torch", "FloatStorage", G_FLOAT_STORAGE},
        {"torch", "HalfStorage", G_HALF_STORAGE},
        {"torch", "BFloat16Storage", G_BF16_STORAGE},
    };
    const uint8_t *nl1, *nl2;
    size_t ml, nlen;
    pv *v;
    nl1 = memchr(m->p, '\n', (size_t)(m->end - m->p));
    if (!nl1) return vfail(m, "truncated GLOBAL");
    nl2 = memchr(nl1 + 1, '\n', (size_t)(m->end - nl1 - 1));
    if (!nl2) return vfail(m, "truncated GLOBAL");
    ml = (size_t)(nl1 - m->p);
    nlen = (size_t)(nl2 - nl1 - 1);
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        if (strlen(allowed[i].mod) == ml && memcmp(allowed[i].mod, m->p, ml) == 0 &&
            strlen(allowed[i].name) == nlen && memcmp(allowed[i].name, nl1 + 1, nlen) == 0) {
            m->p = nl2 + 1;
            v = vnew(m, PV_GLOBAL);
            if (!v) return -1;
            v->i = allowed[i].g;
            return push(m, v);
        }
    }
    {
        int a = ml > 100 ? 100 : (int)ml, b = nlen > 100 ? 100 : (int)nlen;
        char name[210];
        snprintf(name, sizeof name, "%.*s.%.*s", a, (const char *)m->p, b, (const char *)(nl1 + 1));
        for (char *c = name; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
        return vfail(m, "the checkpoint imports '%s', which is not allowed (only torch tensors and storages are)", name);
    }
}

/* ('storage', StorageType, key, location, numel) -> PV_STORAGE */
static int op_binpersid(pvm *m)
{
    pv *pid = pop(m), *v;
    int dtype;
    if (!pid) return -1;
    if (pid->type != PV_TUPLE || pid->n != 5 || pid->items[0]->type != PV_STR || strcmp(pid->items[0]->s, "storage") != 0)
        return vfail(m, "persistent id is not ('storage', type, key, location, numel)");
    if (pid->items[1]->type != PV_GLOBAL) return vfail(m, "storage type is not a torch storage class");
    switch (pid->items[1]->i) {
    case G_FLOAT_STORAGE: dtype = GGML_F32; break;
    case G_HALF_STORAGE: dtype = GGML_F16; break;
    case G_BF16_STORAGE: dtype = GGML_BF16; break;
    default: return vfail(m, "storage type is not a torch storage class");
    }
    if (pid->items[2]->type != PV_STR || pid->items[3]->type != PV_STR || pid->items[4]->type != PV_INT ||
        pid->items[4]->i < 0)
        return vfail(m, "malformed storage persistent id");
    if (pid->items[2]->slen == 0 || strlen(pid->items[2]->s) != pid->items[2]->slen || strchr(pid->items[2]->s, '/'))
        return vfail(m, "bad storage key");
    v = vnew(m, PV_STORAGE);
    if (!v) return -1;
    v->tensor = calloc(1, sizeof *v->tensor);
    if (!v->tensor || !(v->tensor->storage_key = cv_strdup(pid->items[2]->s))) return vfail(m, "out of memory");
    v->tensor->dtype = dtype;
    v->tensor->storage_numel = (uint64_t)pid->items[4]->i;
    return push(m, v);
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
 * backward_hooks[, metadata]) -> PV_TENSOR, contiguous only. */
static pv *rebuild_tensor(pvm *m, const pv *args)
{
    const pv *st, *sz, *sd;
    pk_tensor *t;
    pv *v;
    uint64_t expect = 1, numel = 1, end;
    if (args->n < 4 || args->n > 7) { vfail(m, "_rebuild_tensor_v2 with %zu arguments", args->n); return NULL; }
    st = args->items[0];
    sz = args->items[2];
    sd = args->items[3];
    if (st->type != PV_STORAGE) { vfail(m, "tensor without a storage"); return NULL; }
    if (args->items[1]->type != PV_INT || args->items[1]->i < 0) { vfail(m, "bad storage offset"); return NULL; }
    if (sz->type != PV_TUPLE || sd->type != PV_TUPLE || sz->n != sd->n) { vfail(m, "bad tensor size/stride"); return NULL; }
    if (sz->n > CKPT_MAX_DIMS) { vfail(m, "tensor with %zu dimensions", sz->n); return NULL; }
    for (size_t i = 0; i < sz->n; i++) {
        if (sz->items[i]->type != PV_INT || sz->items[i]->i < 0 || sd->items[i]->type != PV_INT) {
            vfail(m, "bad tensor size/stride");
            return NULL;
        }
        if (!cv_mul_u64(numel, (uint64_t)sz->items[i]->i, &numel)) { vfail(m, "tensor size overflows"); return NULL; }
    }
    /* contiguous (row-major) strides; a dimension of size 1 may have any */
    for (size_t i = sz->n; i-- > 0;) {
        int64_t d = sz->items[i]->i;
        if (d != 1 && numel != 0 && (sd->items[i]->i < 0 || (uint64_t)sd->items[i]->i != expect)) {
            vfail(m, "non-contiguous tensor (strides are not row-major); save a .contiguous() copy");
            return NULL;
        }
        if (!cv_mul_u64(expect, (uint64_t)d, &expect)) { vfail(m, "tensor size overflows"); return NULL; }
    }
    if (!cv_add_u64((uint64_t)args->items[1]->i, numel, &end) || (numel && end > st->tensor->storage_numel)) {
        vfail(m, "tensor extends past its storage");
        return NULL;
    }
    v = vnew(m, PV_TENSOR);
    if (!v) return NULL;
    t = calloc(1, sizeof *t);
    v->tensor = t;
    if (!t || !(t->storage_key = cv_strdup(st->tensor->storage_key))) { vfail(m, "out of memory"); return NULL; }
    t->dtype = st->tensor->dtype;
    t->storage_numel = st->tensor->storage_numel;
    t->offset = (uint64_t)args->items[1]->i;
    t->ndim = (int)sz->n;
    for (size_t i = 0; i < sz->n; i++) t->shape[i] = (uint64_t)sz->items[i]->i;
    t->numel = numel;
    return v;
}

static int op_reduce(pvm *m)
{
    pv *args = pop(m), *fn = pop(m), *v = NULL;
    if (!args || !fn) return -1;
    if (fn->type != PV_GLOBAL || args->type != PV_TUPLE) return vfail(m, "REDUCE of something that is not a known callable");
    switch (fn->i) {
    case G_ORDERED_DICT:
        if (args->n != 0) return vfail(m, "OrderedDict with arguments");
        v = vnew(m, PV_DICT);
        break;
    case G_REBUILD_TENSOR_V2:
        v = rebuild_tensor(m, args);
        break;
    case G_REBUILD_PARAMETER:
        /* (data, requires_grad, backward_hooks): a Parameter is its tensor */
        if (args->n < 1 || args->items[0]->type != PV_TENSOR) return vfail(m, "bad _rebuild_parameter");
        v = args->items[0];
        break;
    default:
        return vfail(m, "REDUCE of a storage class");
    }
    return v ? push(m, v) : -1;
}

static int set_items(pvm *m, pv *d, pv **kv, size_t n)
{
    if (d->type != PV_DICT) return vfail(m, "SETITEM on something that is not a dict");
    if (n % 2) return vfail(m, "SETITEMS with an odd number of items");
    for (size_t i = 0; i < n; i++)
        if (append_item(m, d, kv[i])) return -1;
    return 0;
}

static int run(pvm *m, pv **result)
{
    while (m->p < m->end) {
        uint8_t op = *m->p++;
        size_t first = 0;
        pv *v, *c;
        switch (op) {
        case 0x80: /* PROTO */
            if (need(m, 1)) return -1;
            if (*m->p > 5) return vfail(m, "unsupported pickle protocol %d", *m->p);
            m->p++;
            break;
        case 0x95: /* FRAME: 8-byte length, framing is irrelevant here */
            if (need(m, 8)) return -1;
            m->p += 8;
            break;
        case '}': if (push(m, vnew(m, PV_DICT))) return -1; break;      /* EMPTY_DICT */
        case ']': if (push(m, vnew(m, PV_LIST))) return -1; break;      /* EMPTY_LIST */
        case ')': if (push(m, vnew(m, PV_TUPLE))) return -1; break;     /* EMPTY_TUPLE */
        case 'N': if (push(m, vnew(m, PV_NONE))) return -1; break;      /* NONE */
        case 0x88: case 0x89:                                           /* NEWTRUE, NEWFALSE */
            v = vnew(m, PV_BOOL);
            if (!v) return -1;
            v->i = op == 0x88;
            if (push(m, v)) return -1;
            break;
        case '(': /* MARK */
            if (m->nmarks == m->marks_cap) {
                size_t cap = m->marks_cap ? m->marks_cap * 2 : 16;
                size_t *mk;
                if (m->nmarks >= PK_MAX_MARKS) return vfail(m, "too many MARKs");
                mk = realloc(m->marks, cap * sizeof *mk);
                if (!mk) return vfail(m, "out of memory");
                m->marks = mk;
                m->marks_cap = cap;
            }
            m->marks[m->nmarks++] = m->sp;
            break;
        case 't': /* TUPLE */
            if (pop_mark(m, &first) || push(m, make_tuple(m, first))) return -1;
            break;
        case 0x85: case 0x86: case 0x87: { /* TUPLE1, TUPLE2, TUPLE3 */
            size_t k = (size_t)(op - 0x84), fl = m->nmarks ? m->marks[m->nmarks - 1] : 0;
            if (m->sp < fl + k) return vfail(m, "stack underflow");
            if (push(m, make_tuple(m, m->sp - k))) return -1;
            break;
        }
        case 'X': /* BINUNICODE */
            if (need(m, 4)) return -1;
            first = cv_le32(m->p);
            m->p += 4;
            if (push(m, make_str(m, first))) return -1;
            break;
        case 0x8c: /* SHORT_BINUNICODE */
        case 'U':  /* SHORT_BINSTRING */
            if (need(m, 1)) return -1;
            first = *m->p++;
            if (push(m, make_str(m, first))) return -1;
            break;
        case 'T': /* BINSTRING: signed 4-byte length */
            if (need(m, 4)) return -1;
            if (cv_le32(m->p) > 0x7fffffffu) return vfail(m, "negative string length");
            first = cv_le32(m->p);
            m->p += 4;
            if (push(m, make_str(m, first))) return -1;
            break;
        case 'J': /* BININT: signed 32-bit */
            if (need(m, 4)) return -1;
            {
                uint32_t u = cv_le32(m->p);
                int64_t i = u > 0x7fffffffu ? (int64_t)u - 4294967296LL : (int64_t)u;
                m->p += 4;
                if (push(m, make_int(m, i))) return -1;
            }
            break;
        case 'K': /* BININT1 */
            if (need(m, 1)) return -1;
            if (push(m, make_int(m, *m->p++))) return -1;
            break;
        case 'M': /* BININT2 */
            if (need(m, 2)) return -1;
            if (push(m, make_int(m, cv_le16(m->p)))) return -1;
            m->p += 2;
            break;
        case 0x8a: { /* LONG1: n-byte little-endian two's complement */
            uint64_t u = 0;
            size_t n;
            if (need(m, 1)) return -1;
            n = *m->p++;
            if (n > 8) return vfail(m, "integer wider than 64 bits");
            if (need(m, n)) return -1;
            for (size_t i = 0; i < n; i++) u |= (uint64_t)m->p[i] << (8 * i);
            if (n > 0 && n < 8 && (m->p[n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n);   /* sign-extend */
            m->p += n;
            if (push(m, make_int(m, u > (uint64_t)INT64_MAX ? -(int64_t)(~u) - 1 : (int64_t)u))) return -1;
            break;
        }
        case 'G': { /* BINFLOAT: big-endian double */
            uint64_t u = 0;
            if (need(m, 8)) return -1;
            for (int i = 0; i < 8; i++) u = u << 8 | m->p[i];
            m->p += 8;
            v = vnew(m, PV_FLOAT);
            if (!v) return -1;
            memcpy(&v->f, &u, 8);
            if (push(m, v)) return -1;
            break;
        }
        case 'c': if (op_global(m)) return -1; break;   /* GLOBAL */
        case 'R': if (op_reduce(m)) return -1; break;   /* REDUCE */
        case 'Q': if (op_binpersid(m)) return -1; break; /* BINPERSID */
        case 'b': /* BUILD: state for a dict (OrderedDict's __dict__) or a tensor is ignored */
            v = pop(m);
            c = top(m);
            if (!v || !c) return -1;
            if (c->type != PV_DICT && c->type != PV_TENSOR) return vfail(m, "BUILD on an unsupported object");
            break;
        case 'q': /* BINPUT */
            if (need(m, 1) || !(v = top(m))) return -1;
            if (memo_put(m, *m->p++, v)) return -1;
            break;
        case 'r': /* LONG_BINPUT */
            if (need(m, 4) || !(v = top(m))) return -1;
            if (memo_put(m, cv_le32(m->p), v)) return -1;
            m->p += 4;
            break;
        case 0x94: /* MEMOIZE: index len(memo), as Python does */
            if (!(v = top(m))) return -1;
            if (memo_put(m, m->memo_len, v)) return -1;
            break;
        case 'h': /* BINGET */
            if (need(m, 1)) return -1;
            if (memo_get(m, *m->p++)) return -1;
            break;
        case 'j': /* LONG_BINGET */
            if (need(m, 4)) return -1;
            if (memo_get(m, cv_le32(m->p))) return -1;
            m->p += 4;
            break;
        case 's': /* SETITEM */
            {
                pv *val = pop(m), *key = pop(m), *kv[2];
                if (!val || !key || !(c = top(m))) return -1;
                kv[0] = key;
                kv[1] = val;
                if (set_items(m, c, kv, 2)) return -1;
            }
            break;
        case 'u': /* SETITEMS */
            if (pop_mark(m, &first)) return -1;
            if (!(c = below_mark(m, first))) return -1;
            if (set_items(m, c, m->stack + first, m->sp - first)) return -1;
            m->sp = first;
            break;
        case 'a': /* APPEND */
            if (!(v = pop(m)) || !(c = top(m))) return -1;
            if (c->type != PV_LIST) return vfail(m, "APPEND to something that is not a list");
            if (append_item(m, c, v)) return -1;
            break;
        case 'e': /* APPENDS */
            if (pop_mark(m, &first)) return -1;
            if (!(c = below_mark(m, first))) return -1;
            if (c->type != PV_LIST) return vfail(m, "APPENDS to something that is not a list");
            for (size_t i = first; i < m->sp; i++)
                if (append_item(m, c, m->stack[i])) return -1;
            m->sp = first;
            break;
        case '.': /* STOP */
            if (m->nmarks) return vfail(m, "STOP with an open MARK");
            if (!(*result = pop(m))) return -1;
            return 0;
        default:
            m->p--;
            return vfail(m, "unsupported opcode 0x%02x", op);
        }
    }
    return vfail(m, "no STOP opcode");
}

void pk_state_dict_free(pk_state_dict *sd)
{
    for (size_t i = 0; i < sd->n; i++) {
        free(sd->t[i].name);
        free(sd->t[i].storage_key);
    }
    free(sd->t);
    sd->t = NULL;
    sd->n = 0;
}

int pickle_load_state_dict(const uint8_t *buf, size_t len, pk_state_dict *out, char *err, size_t errcap)
{
    pvm m;
    pv *res = NULL;
    int rc;
    memset(&m, 0, sizeof m);
    memset(out, 0, sizeof *out);
    m.buf = m.p = buf;
    m.end = buf + len;
    m.err = err;
    m.errcap = errcap;
    rc = run(&m, &res);
    if (rc == 0 && res->type != PV_DICT) rc = vfail(&m, "the pickle is not a dict of tensors");
    if (rc == 0 && res->n) {
        out->t = calloc(res->n / 2, sizeof *out->t);
        if (!out->t) rc = vfail(&m, "out of memory");
    }
    for (size_t i = 0; rc == 0 && i + 1 < res->n; i += 2) {
        pv *k = res->items[i], *v = res->items[i + 1];
        pk_tensor *t = &out->t[out->n];
        if (k->type != PV_STR || strlen(k->s) != k->slen) { rc = vfail(&m, "a state-dict key is not a string"); break; }
        if (v->type != PV_TENSOR) { rc = vfail(&m, "state-dict entry '%.200s' is not a tensor", k->s); break; }
        *t = *v->tensor;
        t->name = cv_strdup(k->s);
        t->storage_key = cv_strdup(v->tensor->storage_key);
        out->n++;
        if (!t->name || !t->storage_key) rc = vfail(&m, "out of memory");
    }
    vm_free(&m);
    if (rc) pk_state_dict_free(out);
    return rc;
}
