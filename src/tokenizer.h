/* tokenizer.h - the tokenizer of a model, from its GGUF tokenizer.ggml.* keys:
 * byte-level BPE (GPT-2, GPT-NeoX, SmolLM, StarCoder, Falcon, DeepSeek, ...)
 * and SentencePiece-style BPE (Llama, TinyLlama, Gemma). */
#ifndef MOR_TOKENIZER_H
#define MOR_TOKENIZER_H
#include "mor.h"
#include "gguf.h"

typedef struct tokenizer tokenizer;

/* Build the tokenizer from the tokenizer.ggml.* keys of g. *out = NULL and
 * MOR_OK when the file has no tokenizer.ggml.model key. n_vocab_model is the
 * model's vocab size (token ids must be below it). The tokenizer copies what
 * it needs: g may be freed afterwards. */
mor_status tokenizer_load(const gguf_file *g, int32_t n_vocab_model, tokenizer **out);
void       tokenizer_free(tokenizer *t);
mor_token  tokenizer_bos(const tokenizer *t);   /* -1 if none */
mor_token  tokenizer_eos(const tokenizer *t);   /* -1 if none */
int        tokenizer_add_bos(const tokenizer *t);   /* 0 for NULL */

/* What the public mor_tokenize / mor_detokenize / mor_token_to_piece do
 * (model.c calls these with the model's tokenizer). */
mor_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, uint32_t flags,
                            mor_token *out, int32_t cap, int32_t *n_out);
mor_status tokenizer_decode(const tokenizer *t, const mor_token *toks, int32_t n,
                            char *buf, size_t cap, size_t *len_out);
/* 1 if token id is text a model writes (normal, byte and user-defined
 * tokens), 0 for control, unknown and unused ones and ids out of range. */
int        tokenizer_is_text(const tokenizer *t, mor_token id);
/* The bytes of one token as they appear inside a text (no leading-space rule). */
mor_status tokenizer_piece(const tokenizer *t, mor_token token, char *buf, size_t cap, size_t *len_out);
#endif
