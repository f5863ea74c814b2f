/* template.c - see template.h. */
#include "template.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "jsonw.h"
#include "server.h"
#include "tools.h"

/* A special token's text ("" for none or when it has no text). */
static void token_text(mor_token t, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    if (t < 0 || mor_token_to_piece(S.model, t, out, cap - 1, &n) != MOR_OK) n = 0;
    out[n] = 0;
}

/* The end-of-turn marker of the format the template is written in, as
 * one token when the vocabulary has it (a stop beside EOS). */
static void end_marker(void)
{
    S.chat_end_token = -1;
    if (S.chat_family < 0) return;
    const char *m = chat_end_marker(S.chat_family);
    mor_token t[2];
    int32_t n = 0;
    if (mor_tokenize(S.model, m, strlen(m), MOR_TOKENIZE_PARSE_SPECIAL, t, 2, &n) == MOR_OK && n == 1)
        S.chat_end_token = t[0];
}

/* The model's template (malloc'd, *n its length), or NULL. */
static char *model_template(size_t *n)
{
    size_t tl = 0;
    mor_status st = mor_model_meta_str(S.model, "tokenizer.chat_template", NULL, 0, &tl);
    if (st != MOR_OK && st != MOR_E_BUFFER_TOO_SMALL) return NULL;
    char *t = malloc(tl + 1);
    if (t && mor_model_meta_str(S.model, "tokenizer.chat_template", t, tl + 1, NULL) != MOR_OK) { free(t); t = NULL; }
    *n = tl;
    return t;
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    buf b = { 0 };
    char tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0) buf_put(&b, tmp, k);
    int bad = ferror(f) || !buf_ok(&b);
    fclose(f);
    if (bad) { buf_free(&b); return NULL; }
    *n = b.len;
    if (!b.p) return calloc(1, 1);
    return b.p;
}

/* source (malloc'd) as S.chat_tpl, which then owns it; 0, or -1 with the
 * parser's message in err (source still the caller's). */
static int use_jinja(char *source, size_t n, char *err, size_t cap)
{
    mor_status st = mor_chat_template_create(source, n, &S.chat_tpl);
    if (st) { snprintf(err, cap, "%s", mor_last_error()); return -1; }
    S.chat_source = source;
    S.tools_format = tools_format(source, n);
    S.chat_family = chat_detect(source, n);   /* for its end marker only */
    return 0;
}

/* The model's own template: as Jinja, or (--no-jinja, or a template this
 * renderer cannot parse) the built-in format of its family. */
static void model_chat(void)
{
    size_t n = 0;
    char *src = model_template(&n), why[400];
    if (!src) {
        snprintf(S.chat_error, sizeof S.chat_error, "this model has no chat template (it is a plain completion "
                 "model): use /v1/completions, or start the server with --chat-template NAME");
        return;
    }
    if (!S.o.no_jinja && !use_jinja(src, n, why, sizeof why)) return;
    if (!S.o.no_jinja) fprintf(stderr, "mor-server: the model's chat template does not parse (%s); using its family\n", why);
    S.chat_family = chat_detect(src, n);
    free(src);
    if (S.chat_family < 0)
        snprintf(S.chat_error, sizeof S.chat_error, "the model's chat template is of a family this server does not "
                 "know; start it with --chat-template NAME (%s)", chat_names());
}

int template_setup(char *err, size_t cap)
{
    S.chat_family = CHAT_UNKNOWN;
    if (S.o.chat_template) S.chat_family = chat_from_name(S.o.chat_template);
    else if (S.o.chat_template_file) {
        size_t n = 0;
        char *src = read_file(S.o.chat_template_file, &n), why[400];
        if (!src) { snprintf(err, cap, "--chat-template-file %s: cannot read it", S.o.chat_template_file); return -1; }
        if (use_jinja(src, n, why, sizeof why)) {
            free(src);
            snprintf(err, cap, "--chat-template-file %s: %s", S.o.chat_template_file, why);
            return -1;
        }
    } else model_chat();
    if ((S.chat_tpl || S.chat_family >= 0) && !S.has_tokenizer) {
        template_free();
        S.chat_family = CHAT_UNKNOWN;
        snprintf(S.chat_error, sizeof S.chat_error, "this model has no tokenizer: chat needs one");
    }
    end_marker();
    return 0;
}

void template_free(void)
{
    mor_chat_template_free(S.chat_tpl);
    S.chat_tpl = NULL;
    free(S.chat_source);
    S.chat_source = NULL;
}

/* An assistant's tool_calls for the template: each call as given, but
 * function.arguments that is a string of a JSON object given as that object
 * (as llama.cpp's server does: templates iterate it, e.g. |items). */
static void tool_calls_json(jsonw *w, const json *tc)
{
    jw_arr(w);
    for (size_t i = 0; i < tc->n; i++) {
        const json *c = tc->items[i];
        jw_obj(w);
        for (size_t k = 0; k < c->n; k++) {
            jw_key(w, c->keys[k]);
            const json *f = c->items[k];
            if (strcmp(c->keys[k], "function") || f->type != JSON_OBJECT) { jw_json(w, f); continue; }
            jw_obj(w);
            for (size_t m = 0; m < f->n; m++) {
                const json *a = f->items[m];
                json *parsed = NULL;
                char e[8];
                jw_key(w, f->keys[m]);
                if (!strcmp(f->keys[m], "arguments") && a->type == JSON_STRING)
                    parsed = json_parse(a->str, a->str_len, e, sizeof e);
                if (parsed && parsed->type == JSON_OBJECT) jw_json(w, parsed);
                else jw_json(w, a);
                json_free(parsed);
            }
            jw_obj_end(w);
        }
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

/* The messages as the template's JSON: [{"role", "content", and the
 * tool fields given}, ...] (content null when it was). */
static void messages_json(const api_request *ar, buf *out)
{
    jsonw w;
    jw_init(&w, out);
    jw_arr(&w);
    for (int32_t i = 0; i < ar->n_messages; i++) {
        const api_message *m = &ar->messages[i];
        jw_obj(&w);
        jw_key(&w, "role"); jw_str(&w, m->role);
        jw_key(&w, "content");
        if (m->content_null) jw_null(&w); else jw_strn(&w, m->content, m->content_len);
        if (m->name) { jw_key(&w, "name"); jw_str(&w, m->name); }
        if (m->tool_call_id) { jw_key(&w, "tool_call_id"); jw_str(&w, m->tool_call_id); }
        if (m->tool_calls) { jw_key(&w, "tool_calls"); tool_calls_json(&w, m->tool_calls); }
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
}

static int render(const api_request *ar, buf *out, int *add_bos, char *err, size_t cap)
{
    char bos[128], eos[128];
    token_text(mor_model_token_bos(S.model), bos, sizeof bos);
    token_text(S.eos, eos, sizeof eos);
    buf msgs = { 0 }, tools = { 0 };
    messages_json(ar, &msgs);
    if (ar->tools) {
        jsonw w;
        jw_init(&w, &tools);
        jw_json(&w, ar->tools);
    }
    mor_chat_params p;
    MOR_CHAT_PARAMS_INIT(&p);
    p.messages_json = msgs.p;
    p.messages_len = msgs.len;
    p.tools_json = tools.p;
    p.tools_len = tools.len;
    p.add_generation_prompt = 1;
    p.bos_token = bos;
    p.eos_token = eos;
    size_t n = 0;
    mor_status st = buf_ok(&msgs) && buf_ok(&tools) ? mor_chat_template_render(S.chat_tpl, &p, NULL, 0, &n) : MOR_E_NOMEM;
    if (st == MOR_E_BUFFER_TOO_SMALL && buf_reserve(out, n + 1))
        st = mor_chat_template_render(S.chat_tpl, &p, out->p + out->len, n, &n);
    buf_free(&msgs);
    buf_free(&tools);
    if (st) { snprintf(err, cap, "the chat template: %s", mor_last_error()); return -1; }
    out->len += n;
    /* a template that writes BOS itself (most do) gets no second one */
    *add_bos = S.add_bos && !(bos[0] && n >= strlen(bos) && !memcmp(out->p, bos, strlen(bos)));
    return 0;
}

int chat_prompt(const api_request *ar, buf *out, int *add_bos, char *err, size_t cap)
{
    if (S.chat_tpl) return render(ar, out, add_bos, err, cap);
    if (ar->tools) {
        snprintf(err, cap, "'tools' needs a Jinja chat template (the model's own, or --chat-template-file): %s%s%s",
                 S.chat_family >= 0 ? "the built-in format '" : "", S.chat_family >= 0 ? chat_name(S.chat_family) : S.chat_error,
                 S.chat_family >= 0 ? "' has no tool calls" : "");
        return -2;
    }
    if (S.chat_family < 0) { snprintf(err, cap, "%s", S.chat_error); return -1; }
    for (int32_t i = 0; i < ar->n_messages; i++)
        if (ar->messages[i].tool_calls || !strcmp(ar->messages[i].role, "tool")) {
            snprintf(err, cap, "messages[%d]: tool calls and results need a Jinja chat template (the model's own, "
                     "or --chat-template-file): the built-in format '%s' has none", (int)i, chat_name(S.chat_family));
            return -1;
        }
    chat_format(S.chat_family, ar->messages, ar->n_messages, out);
    *add_bos = S.add_bos;
    return 0;
}
