/* chat_prompt.c - mor-run --chat: the prompt as the model's chat template
 * renders one turn (mor_chat_template, as mor-server and llama-server do):
 * --system TEXT, then -p/-f as the user's message, the assistant's turn
 * opened. */
#include "chat_prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* s as a JSON string into out (cap bytes at least 6 * len + 3). */
static size_t json_string(char *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { out[k++] = '\\'; out[k++] = (char)c; }
        else if (c < 0x20) { memcpy(out + k, "\\u00", 4); k += 4; out[k++] = hex[c >> 4]; out[k++] = hex[c & 15]; }
        else out[k++] = (char)c;
    }
    out[k++] = '"';
    return k;
}

/* [{"role": "system", ...}, {"role": "user", ...}] (malloc'd). */
static char *messages(const char *system, const char *user, size_t user_len, size_t *n)
{
    size_t sl = system ? strlen(system) : 0;
    char *m = malloc(6 * (sl + user_len) + 96);
    if (!m) return NULL;
    size_t k = 0;
    m[k++] = '[';
    if (system) {
        k += (size_t)sprintf(m + k, "{\"role\":\"system\",\"content\":");
        k += json_string(m + k, system, sl);
        k += (size_t)sprintf(m + k, "},");
    }
    k += (size_t)sprintf(m + k, "{\"role\":\"user\",\"content\":");
    k += json_string(m + k, user, user_len);
    m[k++] = '}';
    m[k++] = ']';
    *n = k;
    return m;
}

/* A token's text into out ("" for none). */
static void special(const mor_model *m, mor_token t, char *out, size_t cap)
{
    size_t n = 0;
    if (t < 0 || mor_token_to_piece(m, t, out, cap - 1, &n) != MOR_OK) n = 0;
    out[n] = 0;
}

int chat_prompt_render(const mor_model *m, const char *tmpl, size_t tmpl_len, const char *system, const char *user,
                       size_t user_len, char **out, size_t *out_len, int *add_bos)
{
    char *own = NULL;
    if (!tmpl) {
        size_t tl = 0;
        mor_status st = mor_model_meta_str(m, "tokenizer.chat_template", NULL, 0, &tl);
        if (st != MOR_OK && st != MOR_E_BUFFER_TOO_SMALL)
            return cli_error("--chat: the model has no chat template (give one with --chat-template-file FILE)");
        if (!(own = malloc(tl + 1)) || mor_model_meta_str(m, "tokenizer.chat_template", own, tl + 1, NULL) != MOR_OK) {
            free(own);
            return cli_error("out of memory");
        }
        tmpl = own;
        tmpl_len = tl;
    }
    mor_chat_template *t = NULL;
    mor_status st = mor_chat_template_create(tmpl, tmpl_len, &t);
    free(own);
    if (st) return cli_error("--chat: %s (%s)", mor_last_error(), mor_status_str(st));
    char bos[128], eos[128];
    special(m, mor_model_token_bos(m), bos, sizeof bos);
    special(m, mor_model_token_eos(m), eos, sizeof eos);
    size_t nm = 0, n = 0;
    char *msgs = messages(system, user, user_len, &nm);
    mor_chat_params p;
    MOR_CHAT_PARAMS_INIT(&p);
    p.messages_json = msgs;
    p.messages_len = nm;
    p.add_generation_prompt = 1;
    p.bos_token = bos;
    p.eos_token = eos;
    st = msgs ? mor_chat_template_render(t, &p, NULL, 0, &n) : MOR_E_NOMEM;
    char *text = st == MOR_E_BUFFER_TOO_SMALL || st == MOR_OK ? malloc(n + 1) : NULL;
    if (text && n) st = mor_chat_template_render(t, &p, text, n, &n);
    else if (text) st = MOR_OK;
    free(msgs);
    mor_chat_template_free(t);
    if (st || !text) { free(text); return st ? cli_error("--chat: %s", mor_last_error()) : cli_error("out of memory"); }
    text[n] = 0;
    *out = text;
    *out_len = n;
    /* a template that writes BOS itself (most do) gets no second one */
    *add_bos = mor_model_add_bos(m) && !(bos[0] && n >= strlen(bos) && !memcmp(text, bos, strlen(bos)));
    return 0;
}
