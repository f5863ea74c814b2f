/* chat.h - chat templates: the common families, recognized, not interpreted.
 *
 * A model file may carry a Jinja chat template (tokenizer.chat_template).
 * A Jinja engine is out of scope; as llama.cpp does, the template's text is
 * matched against the markers of the common families, and the family's
 * format is written in C. A template that matches none is refused (the
 * server then answers /v1/chat/completions with a clear 400, and
 * --chat-template NAME can name the family). The prompt ends with the
 * assistant's turn opened; the family's end-of-turn marker is where
 * generation stops. */
#ifndef MORSRV_CHAT_H
#define MORSRV_CHAT_H
#include <stddef.h>
#include "api.h"
#include "buf.h"

enum {
    CHAT_UNKNOWN = -1,
    CHAT_CHATML = 0,   /* <|im_start|>role\n...<|im_end|>\n */
    CHAT_LLAMA2,       /* [INST] ... [/INST], <<SYS>> for the system message */
    CHAT_LLAMA3,       /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_GEMMA,        /* <start_of_turn>user|model\n...<end_of_turn>\n */
    CHAT_ZEPHYR,       /* <|role|>\n...</s>\n */
    CHAT_PHI3,         /* <|role|>\n...<|end|>\n */
    CHAT_VICUNA,       /* USER: ...\nASSISTANT: ...</s>\n */
    CHAT_N
};

/* The family of a template's text, or CHAT_UNKNOWN. */
int chat_detect(const char *tmpl, size_t n);
/* The family named `name` ("chatml", "llama2", ...), or CHAT_UNKNOWN. */
int chat_from_name(const char *name);
const char *chat_name(int family);
/* The names, comma-separated, for messages. */
const char *chat_names(void);
/* The prompt of the conversation, the assistant's turn opened, into out. */
void chat_format(int family, const api_message *msgs, int n, buf *out);
/* The marker that ends the assistant's turn ("<|im_end|>"). */
const char *chat_end_marker(int family);
#endif
