/* jinja.h - a bounded Jinja2 subset for chat templates (mor_chat_template).
 *
 * Four steps, one file each: jinja_lex.c cuts the source into tokens with
 * jinja2's whitespace rules as Hugging Face sets them (trim_blocks,
 * lstrip_blocks, '-' and '+'); jinja_parse.c builds the tree; jinja_eval.c
 * renders it; jinja_builtins.c holds the filters, tests, methods and globals.
 * jinja_value.c has the values (Python's types as jinja2 sees them), the
 * arena they live in and the conversions to text (str, repr, JSON).
 *
 * Memory: everything of one template (tokens, tree) or of one render
 * (values, output) lives in an arena freed at once; the render's arena has a
 * byte cap, so no template allocates without limit. Errors carry a status
 * and a message naming the template line; the first error wins. */
#ifndef MOR_JINJA_H
#define MOR_JINJA_H
#include <stddef.h>
#include <stdint.h>
#include "mor.h"

enum {
    JINJA_MAX_DEPTH  = 160,       /* nested syntax, and nested evaluation    */
    JINJA_MAX_CALLS  = 48,        /* macro calls in progress                 */
    JINJA_MAX_STEPS  = 20000000,  /* nodes evaluated by one render           */
    JINJA_MAX_SOURCE = 1 << 20    /* bytes of a template (real ones: < 100 KB) */
};
#define JINJA_MAX_BYTES ((size_t)256 << 20) /* arena bytes of one render (output included) */

/* ------------------------------------------------------------------------ */
/* Arena: blocks chained; `used` counts every byte asked for against `cap`. */
typedef struct jblock jblock;
typedef struct {
    jblock *head;
    size_t used, cap;
    int over;          /* 1 once an allocation was refused (cap or malloc) */
    int nomem;         /* 1 when malloc itself failed                      */
} jarena;
void *ja_alloc(jarena *a, size_t n);            /* zeroed, 8-aligned; NULL when refused */
char *ja_strdup(jarena *a, const char *s, size_t n);
void  ja_free(jarena *a);

/* ------------------------------------------------------------------------ */
/* Values. Lists and dicts are immutable once built (the sandbox forbids
 * list.append and friends), so values share them freely; a namespace is the
 * one mutable object ({% set ns.x = ... %}). */
enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
    JV_LIST, JV_DICT, JV_NS, JV_MACRO, JV_FUNC, JV_LOOP
};
enum { JG_LIST, JG_GEN, JG_ITEMS, JG_KEYS, JG_VALUES, JG_REVERSED };
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;
typedef struct jmacro jmacro;
typedef struct {
    uint8_t t;
    uint8_t tuple;     /* JV_LIST: a tuple (repr with parentheses)         */
    uint8_t unsafe;    /* JV_UNDEF: an attribute the sandbox refuses        */
    /* JV_LIST: what Python would have instead of a list: JG_GEN a generator
     * (map, select...: always true, no len(), not JSON), JG_ITEMS/KEYS/VALUES
     * a dict view (len() works, not JSON), JG_REVERSED a reverse iterator */
    uint8_t gen;
    /* JV_STR: markupsafe's Markup (the safe and escape filters): adding a
     * plain str to it escapes that str, as Markup.__add__ does */
    uint8_t markup;
    union {
        int64_t i;     /* JV_INT, JV_BOOL */
        double f;
        struct { const char *p; size_t n; } s;  /* JV_STR; JV_UNDEF: its name */
        jlist *l;
        jdict *d;      /* JV_DICT, JV_NS */
        jfunc *fn;
        jloop *loop;
        jmacro *m;
    } u;
} jval;
struct jlist { size_t n, cap; jval *v; };
/* a dict keeps its insertion order; from 16 slots on it has a hash index
 * (idx: 2 * cap slots of entry + 1, 0 empty), so that big ones (a caller's
 * JSON object, a scope of many names) cost O(1) a lookup */
struct jdict { size_t n, cap; jval *k, *v; uint32_t *idx; };

jval jv_undef(const char *name);
jval jv_none(void);
jval jv_bool(int b);
jval jv_int(int64_t i);
jval jv_float(double f);
jval jv_str(const char *p, size_t n);
jval jv_cstr(const char *p);
jval jv_list(jarena *a, size_t cap);           /* t = JV_UNDEF when refused */
jval jv_dict(jarena *a, size_t cap);
int  jl_push(jarena *a, jlist *l, jval v);     /* -1 when refused */
int  jd_set(jarena *a, jdict *d, jval k, jval v);
jval *jd_get(const jdict *d, jval k);          /* NULL when absent */
jval *jd_gets(const jdict *d, const char *k);
void jd_clear(jdict *d);                       /* no entries; the memory is kept */

int  jv_truthy(jval v);
int  jv_eq(jval a, jval b);
/* -2 when a and b cannot be ordered (TypeError), else -1, 0 or 1. */
int  jv_cmp(jval a, jval b);
const char *jv_type_name(jval v);              /* Python's: 'str', 'dict', ... */
int  jv_is_num(jval v);                        /* int, float or bool */
double jv_num(jval v);

/* ------------------------------------------------------------------------ */
/* Growable text in an arena. */
typedef struct { char *p; size_t n, cap; jarena *a; int over; } jbuf;
void jb_init(jbuf *b, jarena *a);
void jb_add(jbuf *b, const char *s, size_t n);
void jb_adds(jbuf *b, const char *s);
void jb_addc(jbuf *b, char c);

/* Python's str() (jinja2's rendering: undefined is empty) and repr(). */
void jv_to_str(jbuf *b, jval v);
void jv_html_escape(jbuf *b, const char *s, size_t n);   /* & < > " ' as markupsafe escapes them */
void jv_repr(jbuf *b, jval v);
void jv_float_repr(jbuf *b, double f);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys); indent NULL:
 * none. Returns -1 for a value JSON cannot hold (undefined, a macro...),
 * naming its type in *bad. */
typedef struct {
    int ensure_ascii, sort_keys;
    const char *indent; size_t indent_n; int has_indent;
    const char *item_sep, *key_sep;
} jjson_opts;
int  jv_to_json(jbuf *b, jval v, const jjson_opts *o, int level, const char **bad);
/* Parse JSON text (RFC 8259) into a value: objects as dicts (keys in their
 * order, the last of a repeated key wins, as json.loads), numbers as int
 * when they have no fraction or exponent and fit 64 bits. -1 on error, with
 * a message in err (cap bytes) naming line and column. */
int  jv_from_json(jarena *a, const char *s, size_t n, jval *out, char *err, size_t cap);

/* UTF-8 helpers: code points of s, and the byte offset of code point i. */
size_t ju_len(const char *s, size_t n);
size_t ju_off(const char *s, size_t n, size_t i);

/* ------------------------------------------------------------------------ */
/* Tokens and tree. */
enum {
    TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP, TK_EOF
};
/* operators (TK_OP's op, and the tree's) */
enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE,
    OP_LPAREN, OP_RPAREN, OP_LBRACKET, OP_RBRACKET, OP_LBRACE, OP_RBRACE,
    OP_COMMA, OP_DOT, OP_COLON, OP_PIPE, OP_ASSIGN,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN
};
typedef struct {
    uint8_t type, op;
    int32_t line, col;
    const char *s; size_t n;   /* names, decoded strings, text */
    int64_t i; double f;
} jtoken;

enum {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_CALL_BLOCK,
    N_FILTER_BLOCK, N_BREAK, N_CONTINUE, N_BODY,
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_PAIR, N_GETATTR, N_GETITEM,
    N_SLICE, N_CALL, N_KWARG, N_FILTER, N_TEST, N_BINOP, N_NEG, N_POS, N_NOT,
    N_AND, N_OR, N_COMPARE, N_OPERAND, N_CONDEXPR
};
typedef struct jnode jnode;
struct jnode {
    uint8_t kind, op, neg;
    int32_t line, col;
    jnode *a, *b, *c, *d, *e;  /* children, by kind (jinja_parse.c says which) */
    jnode *next;               /* the next statement, argument, item */
    const char *s; size_t n;   /* text, names */
    jval v;                    /* N_CONST */
};

typedef struct {
    jarena ar;
    jnode *root;               /* an N_BODY */
    mor_status st;
    char msg[256];
} jtemplate;

/* Tokens of source[0..n) (newlines normalized, one trailing newline dropped,
 * as jinja2 does), ending with TK_EOF. -1 with t->st/t->msg set. */
int jinja_lex(jtemplate *t, const char *src, size_t n, jtoken **toks, size_t *n_toks);
/* The tree of a template: t->root. -1 with t->st/t->msg set. */
int jinja_parse(jtemplate *t, const jtoken *toks, size_t n_toks);

/* ------------------------------------------------------------------------ */
/* Rendering. */
typedef struct jscope jscope;
struct jscope { jscope *parent; jdict vars; int captured; /* a macro holds it */ };

typedef struct {
    jarena *ar;
    jbuf *out;
    jscope *top;
    uint64_t steps;
    int depth, calls;
    int flow;                  /* 1: break, 2: continue, pending */
    int64_t now;               /* for strftime_now */
    mor_status st;
    char msg[448];
    int line;                  /* of the node being evaluated, for errors */
    jval range_list;           /* the last range() made: lists are immutable, so */
    int64_t range_args[3];     /* a loop's range(n) in a loop is made once       */
} jctx;

struct jmacro { const jnode *def; jscope *scope; jval caller; int has_caller; };
struct jloop {
    jlist *items; size_t i; int depth;
};
/* a callable that is not a macro: a global, a bound method, a test/filter */
struct jfunc { const char *name; jval self; int kind; };

/* Fail the render: record status and message (with the line) once; -1. */
int  jx_fail(jctx *c, mor_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int  jx_nomem(jctx *c);
/* Render t into c->out with the context variables of `vars`. */
int  jinja_render(jctx *c, const jtemplate *t, jdict *vars);
int  jx_eval(jctx *c, jscope *s, const jnode *n, jval *out);
/* Run a body's statements (jinja_exec.c); stops early at a break/continue. */
int  jinja_exec_body(jctx *c, jscope *s, const jnode *body);
/* Apply a filter node (its chain below it) to a value (jinja_eval.c). */
int  jx_filter(jctx *c, jscope *s, const jnode *n, const jval *base, jval *out);
int  jx_assign(jctx *c, jscope *s, const jnode *target, jval v);
jscope *jx_scope(jctx *c, jscope *parent);
/* Call a value with evaluated arguments: args[0..na), kwarg names (NULL
 * for positional) in kw. */
int  jx_call(jctx *c, jval f, int na, const jval *args, const char *const *kw, jval *out);

/* builtins (jinja_builtins.c) */
int  jb_filter(jctx *c, const char *name, jval v, int na, const jval *args, const char *const *kw, jval *out);
int  jb_test(jctx *c, const char *name, jval v, int na, const jval *args, int *out);
int  jb_global(const char *name, jval *out);   /* 1 when name is a global */
int  jb_getattr(jctx *c, jval obj, const char *name, size_t n, jval *out);
int  jb_call_func(jctx *c, const jfunc *f, int na, const jval *args, const char *const *kw, jval *out);
int  jb_iter(jctx *c, jval v, jlist **out);     /* list, tuple, dict keys, chars... */
/* positional argument i or keyword `key` (NULL: none); NULL when absent */
const jval *jb_arg(int na, const jval *args, const char *const *kw, int i, const char *key);
jval jb_str_of(jctx *c, jval v);               /* str(v), "" when memory runs out */
int  jb_attr_path(jctx *c, jval v, const char *path, jval *out);   /* "a.b.0" */

/* str methods (jinja_str.c) */
size_t ju_next(const char *s, size_t n, size_t i, uint32_t *cp);  /* bytes of the code point at i */
int  ju_space(uint32_t cp);                    /* str.isspace */
jval ju_strip(jval s, const jval *chars, int left, int right);
jval ju_replace(jctx *c, jval s, jval old, jval new_, int64_t count);
jval ju_case(jctx *c, jval s, int mode);       /* 'u' 'l' 't' 'c' 's' */
int  ju_splitlines(jctx *c, jval s, int keepends, jval *out);
int  jb_str_method(jctx *c, jval s, const char *name, int na, const jval *args, const char *const *kw, jval *out);
#endif
