/* template.h - the chat prompt of a request: the model's own Jinja chat
 * template (mor_chat_template, as llama-server's --jinja), or one of the
 * built-in formats of chat.h. */
#ifndef MORSRV_TEMPLATE_H
#define MORSRV_TEMPLATE_H
#include <stddef.h>
#include "api.h"
#include "buf.h"

/* Choose how chats are rendered (at start, after the model is loaded):
 * --chat-template NAME: that built-in format; --chat-template-file FILE:
 * that Jinja template; else the model's template, as Jinja unless
 * --no-jinja (or it does not parse: a warning, then its family as a
 * built-in format). Sets S.chat_tpl / S.chat_family, S.chat_error,
 * S.chat_end_token. 0, or -1 with a message in err (a file that cannot be
 * read or parsed: the server does not start). */
int  template_setup(char *err, size_t cap);
void template_free(void);
/* The prompt text of ar's messages into out; *add_bos: whether tokenizing
 * should add BOS (not when the rendered text begins with it). 0, or -1
 * with a message for a 400 in err (the template raised, or no format), -2
 * when the request has tools and there is no Jinja template (param "tools"). */
int  chat_prompt(const api_request *ar, buf *out, int *add_bos, char *err, size_t cap);

#endif
