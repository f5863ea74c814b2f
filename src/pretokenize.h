/* pretokenize.h - the pre-tokenizers of byte-level BPE: how a text is cut
 * into pieces before BPE runs on each, named as tokenizer.ggml.pre names
 * them (docs/FORMAT.md). */
#ifndef MOR_PRETOKENIZE_H
#define MOR_PRETOKENIZE_H
#include <stddef.h>
#include <stdint.h>
#include "mor.h"

/* End of the GPT-2 pre-tokenizer regex match that starts at s[i] (i < n):
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * The one matcher for the runtime tokenizer and the BPE trainer, so the two
 * can never cut a text differently. */
size_t gpt2_piece_end(const uint8_t *s, size_t n, size_t i);

/* A compiled pre-tokenizer: a chain of splits, each applied to every piece
 * the previous one made. Immutable once made; any number of threads may use
 * one at a time. */
typedef struct pretok pretok;

/* Make the pre-tokenizer called name[0..n) (tokenizer.ggml.pre). *out =
 * NULL and MOR_OK when the name is not one libmor knows; the caller words
 * the error. */
mor_status pretok_new(const char *name, size_t n, pretok **out);
void       pretok_free(pretok *p);

/* Called with each piece, in order; a non-OK status stops the cutting and is
 * returned. Pieces are never empty and cover the text exactly. */
typedef mor_status (*piece_fn)(void *ctx, const uint8_t *piece, size_t n);

mor_status pretok_run(const pretok *p, const uint8_t *s, size_t n, piece_fn fn, void *ctx);

/* The names pretok_new accepts, for messages: "gpt2, gpt-2, ...". */
const char *pretok_names(void);

#endif
