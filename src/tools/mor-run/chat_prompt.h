/* chat_prompt.h - mor-run --chat: one user turn through a chat template. */
#ifndef MORRUN_CHAT_PROMPT_H
#define MORRUN_CHAT_PROMPT_H
#include <stddef.h>
#include "mor.h"

/* The prompt text (malloc'd into *out) for an optional system message and
 * the user's message user[0..user_len), rendered by tmpl (a Jinja template
 * of tmpl_len bytes; NULL: the model's own); *add_bos: whether tokenizing
 * adds BOS. 0, or 1 after printing why (cli_error). */
int chat_prompt_render(const mor_model *m, const char *tmpl, size_t tmpl_len, const char *system, const char *user,
                       size_t user_len, char **out, size_t *out_len, int *add_bos);

#endif
