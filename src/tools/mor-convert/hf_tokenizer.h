/* hf_tokenizer.h - a Hugging Face tokenizer.json holding a BPE, turned into
 * the tokenizer.ggml.* keys of docs/FORMAT.md.
 *
 * Accepted: model.type "BPE" without subword prefixes or ignore_merges, and
 *  - byte-level (no byte_fallback): no normalizer, or NFC (GPT-NeoX, Pythia:
 *    mor.tokenizer.normalizer "nfc"); pre_tokenizer either a
 *    lone ByteLevel (use_regex true, add_prefix_space false) -> model "gpt2",
 *    pre "gpt2", or a Sequence of Digits(individual_digits=true) and that
 *    ByteLevel -> pre "smollm";
 *  - SentencePiece-style (byte_fallback, with all 256 <0xNN> tokens) ->
 *    model "llama" with its merges: spaces as U+2581 by a Replace normalizer
 *    (after a Prepend("\u2581"): prefix "prepend", legacy Llama/TinyLlama;
 *    alone: "never", Gemma, whose Split(" ") pre-tokenizer is then a no-op)
 *    or by a Metaspace pre-tokenizer (prefix from prepend_scheme; pre
 *    "metaspace" when it splits).
 * Token ids come from model.vocab and added_tokens and must have no gaps.
 * A TemplateProcessing post-processor that starts with a special token sets
 * BOS and add_bos (tokenizer_config.json's add_bos_token overrides it). */
#ifndef CV_HF_TOKENIZER_H
#define CV_HF_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>
#include "gguf_write.h"

enum { TOKEN_TYPE_NORMAL = 1, TOKEN_TYPE_UNKNOWN = 2, TOKEN_TYPE_CONTROL = 3, TOKEN_TYPE_USER_DEFINED = 4,
       TOKEN_TYPE_BYTE = 6 };

typedef struct {
    size_t n_tokens;
    char **tokens;        /* [n_tokens], by id */
    int32_t *types;       /* [n_tokens] TOKEN_TYPE_* */
    size_t n_merges;
    char **merges;        /* "left right", in rank order */
    const char *model;    /* "gpt2" or "llama" (static) */
    const char *pre;      /* "gpt2", "smollm"; "default", "metaspace" (static) */
    const char *prefix;   /* "llama": mor.tokenizer.prefix_space (static), else NULL */
    const char *normalizer;   /* "nfc" or NULL (static) */
    int64_t bos, eos, pad, unk;   /* -1 when unknown */
    int add_bos;             /* -1 when unknown */
} hf_tokenizer;

int  hf_tokenizer_parse(hf_tokenizer *t, const char *text, size_t len, char *err, size_t errcap);
int  hf_tokenizer_load(hf_tokenizer *t, const char *path, char *err, size_t errcap);
void hf_tokenizer_free(hf_tokenizer *t);

/* Look up a token's id by its text; -1 if absent. */
int64_t hf_tokenizer_find(const hf_tokenizer *t, const char *text);

/* Read bos/eos/pad tokens and add_bos_token from a tokenizer_config.json
 * (tokens given by text, or as {"content": text}); values already set in t
 * are kept. A missing file is not an error. */
int hf_tokenizer_read_config(hf_tokenizer *t, const char *path, char *err, size_t errcap);

/* Add the tokenizer.ggml.* keys. */
void hf_tokenizer_write(const hf_tokenizer *t, gguf_writer *w);

#endif
