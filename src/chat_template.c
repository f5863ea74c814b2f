/* chat_template.c - mor_chat_template: a model's Jinja chat template parsed
 * once (jinja_lex.c, jinja_parse.c) and rendered with a conversation given
 * as JSON, the way Hugging Face transformers' apply_chat_template renders
 * it. A render keeps all its state in an arena of its own, so renders of
 * one template may run in several threads at once. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi.h"
#include "jinja.h"
#include "status.h"

#define FN_CREATE "mor_chat_template_create"
#define FN_RENDER "mor_chat_template_render"

struct mor_chat_template { jtemplate t; };

/* the struct as first released (libmor 0.1 gained it whole) */
typedef struct {
    uint32_t size;
    const char *messages_json; size_t messages_len;
    const char *tools_json; size_t tools_len;
    const char *extra_json; size_t extra_len;
    int32_t add_generation_prompt;
    const char *bos_token, *eos_token;
    int64_t now;
} chat_params_v1;

MOR_API mor_status mor_chat_template_create(const char *source, size_t len, mor_chat_template **out)
{
    err_clear();
    if (!source || !out) return err_set(MOR_E_INVALID_ARG, FN_CREATE ": NULL argument");
    if (len > JINJA_MAX_SOURCE)
        return err_set(MOR_E_UNSUPPORTED, FN_CREATE ": a template of %zu bytes (at most %d)", len, JINJA_MAX_SOURCE);
    mor_chat_template *ct = calloc(1, sizeof *ct);
    if (!ct) return err_set(MOR_E_NOMEM, FN_CREATE ": out of memory");
    /* tokens and tree: at most a token and a node (and their arrays'
     * doubling) per source byte, so 512 bytes a byte is a bound, not a limit */
    ct->t.ar.cap = 512 * len + ((size_t)1 << 20);
    jtoken *toks;
    size_t n_toks;
    if (jinja_lex(&ct->t, source, len, &toks, &n_toks) < 0 || jinja_parse(&ct->t, toks, n_toks) < 0) {
        mor_status st = ct->t.st != MOR_OK ? ct->t.st : MOR_E_INTERNAL;
        if (ct->t.ar.over && !ct->t.ar.nomem) st = MOR_E_UNSUPPORTED;
        err_set(st, FN_CREATE ": %s", ct->t.msg[0] ? ct->t.msg : "out of memory");
        ja_free(&ct->t.ar);
        free(ct);
        return st;
    }
    *out = ct;
    return MOR_OK;
}

MOR_API void mor_chat_template_free(mor_chat_template *t)
{
    if (!t) return;
    ja_free(&t->t.ar);
    free(t);
}

static void chat_defaults(mor_chat_params *d)
{
    memset(d, 0, sizeof *d);
    d->size = (uint32_t)sizeof *d;
}

MOR_API void mor_chat_params_init(mor_chat_params *p, size_t size)
{
    mor_chat_params d;
    chat_defaults(&d);
    abi_init(p, size, &d, sizeof d);
}

MOR_API size_t mor_sizeof_chat_params(void) { return sizeof(mor_chat_params); }

/* one JSON input into a value; `what` names it in the message */
static mor_status json_var(jarena *a, const char *what, const char *s, size_t n, int want, jval *out)
{
    char err[160];
    if (!n) n = strlen(s);
    if (jv_from_json(a, s, n, out, err, sizeof err) < 0) {
        if (a->over) return err_set(a->nomem ? MOR_E_NOMEM : MOR_E_UNSUPPORTED, FN_RENDER ": %s: out of memory", what);
        return err_set(MOR_E_INVALID_ARG, FN_RENDER ": %s is not valid JSON: %s", what, err);
    }
    if (want >= 0 && out->t != want)
        return err_set(MOR_E_INVALID_ARG, FN_RENDER ": %s must be a JSON %s", what, want == JV_LIST ? "array" : "object");
    return MOR_OK;
}

static mor_status set_var(jarena *a, jdict *vars, const char *name, jval v)
{
    return jd_set(a, vars, jv_cstr(name), v) < 0 ? err_set(MOR_E_NOMEM, FN_RENDER ": out of memory") : MOR_OK;
}

/* the template's variables, as transformers passes them */
static mor_status make_vars(jarena *a, const mor_chat_params *p, jdict *vars)
{
    jval v;
    mor_status st = json_var(a, "messages_json", p->messages_json, p->messages_len, JV_LIST, &v);
    if (st || (st = set_var(a, vars, "messages", v))) return st;
    v = jv_none();
    if (p->tools_json && (st = json_var(a, "tools_json", p->tools_json, p->tools_len, -1, &v))) return st;
    if ((st = set_var(a, vars, "tools", v)) || (st = set_var(a, vars, "documents", jv_none()))) return st;
    if ((st = set_var(a, vars, "add_generation_prompt", jv_bool(p->add_generation_prompt)))) return st;
    if (p->bos_token && (st = set_var(a, vars, "bos_token", jv_cstr(p->bos_token)))) return st;
    if (p->eos_token && (st = set_var(a, vars, "eos_token", jv_cstr(p->eos_token)))) return st;
    if (!p->extra_json) return MOR_OK;
    if ((st = json_var(a, "extra_json", p->extra_json, p->extra_len, JV_DICT, &v))) return st;
    for (size_t i = 0; i < v.u.d->n; i++)
        if (jd_set(a, vars, v.u.d->k[i], v.u.d->v[i]) < 0) return err_set(MOR_E_NOMEM, FN_RENDER ": out of memory");
    return MOR_OK;
}

static mor_status render(const mor_chat_template *t, const mor_chat_params *p, jarena *a, jbuf *out)
{
    jdict vars = { 0 };
    mor_status st = make_vars(a, p, &vars);
    if (st) return st;
    jctx c;
    memset(&c, 0, sizeof c);
    c.ar = a;
    c.out = out;
    c.now = p->now ? p->now : (int64_t)time(NULL);
    c.line = 1;
    if (jinja_render(&c, &t->t, &vars) == 0 && !out->over) return MOR_OK;
    if (c.st == MOR_OK) jx_nomem(&c);
    return err_set(c.st, FN_RENDER ": %s", c.msg);
}

MOR_API mor_status mor_chat_template_render(const mor_chat_template *t, const mor_chat_params *params, char *out,
                                            size_t cap, size_t *n_out)
{
    err_clear();
    if (!t || !params || !n_out) return err_set(MOR_E_INVALID_ARG, FN_RENDER ": NULL argument");
    if (!out && cap) return err_set(MOR_E_INVALID_ARG, FN_RENDER ": out is NULL but cap is %zu", cap);
    mor_chat_params p;
    chat_defaults(&p);
    mor_status st = abi_read(&p, sizeof p, params, sizeof(chat_params_v1), "mor_chat_params");
    if (st) return st;
    if (!p.messages_json) return err_set(MOR_E_INVALID_ARG, FN_RENDER ": messages_json is NULL");
    jarena a = { 0 };
    a.cap = JINJA_MAX_BYTES;
    jbuf buf;
    jb_init(&buf, &a);
    st = render(t, &p, &a, &buf);
    if (st == MOR_OK) {
        *n_out = buf.n;
        if (cap < buf.n) st = err_set(MOR_E_BUFFER_TOO_SMALL, FN_RENDER ": the text needs %zu bytes", buf.n);
        else if (buf.n) memcpy(out, buf.p, buf.n);
    }
    ja_free(&a);
    return st;
}
