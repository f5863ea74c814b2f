/* text.h - mor_tokenize and mor_detokenize into buffers they size
 * themselves (the size query, the allocation, the second call), for the
 * programs. The results are malloc'd; the caller frees them. */
#ifndef TOOLS_TEXT_H
#define TOOLS_TEXT_H
#include <stddef.h>
#include "mor.h"

/* text[0..n) as tokens (flags: MOR_TOKENIZE_*) into *out (at least one
 * element allocated, so an empty result is not NULL), *n_out of them.
 * MOR_OK, mor_tokenize's status (mor_last_error() says why) or MOR_E_NOMEM;
 * on failure *out is NULL. */
mor_status text_tokenize(const mor_model *m, const char *text, size_t n, uint32_t flags, mor_token **out,
                         int32_t *n_out);

/* The text of ids[0..n) into *out (NUL-terminated, *len bytes before the
 * NUL); statuses as text_tokenize. */
mor_status text_detokenize(const mor_model *m, const mor_token *ids, int32_t n, char **out, size_t *len);
#endif
