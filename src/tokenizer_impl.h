/* tokenizer_impl.h - a loaded tokenizer, as tokenizer.c builds it and
 * tokenize.c runs it. Nothing else includes this. */
#ifndef MOR_TOKENIZER_IMPL_H
#define MOR_TOKENIZER_IMPL_H
#include "tokenizer.h"
#include "pretokenize.h"

/* tokenizer.ggml.model, and for "llama" whether merges are given. */
enum {
    TOK_BPE,          /* "gpt2": byte-level BPE on pre-tokenized pieces, ranks from the merges   */
    TOK_SPM,          /* "llama": SentencePiece, merges by token score (llama.cpp's reading)    */
    TOK_SPM_MERGES    /* "llama" with merges: HF's BPE with byte_fallback, ranks from the merges */
};

/* Token types, with llama.cpp's numbers. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* How SentencePiece-style tokenizers put a U+2581 before a stretch of text
 * (mor.tokenizer.prefix_space, docs/FORMAT.md). A stretch is the text, or a
 * part of it between special tokens. */
enum {
    PREFIX_NEVER,     /* Gemma                                                        */
    PREFIX_PREPEND,   /* every stretch (SentencePiece's dummy prefix, llama.cpp, HF's
                       * Prepend("▁") normalizer of legacy Llama tokenizers)           */
    PREFIX_ALWAYS,    /* every stretch that does not start with a space (HF Metaspace) */
    PREFIX_FIRST      /* only a stretch at the start of the text, if it does not start
                       * with a space (HF Metaspace prepend_scheme "first")            */
};

typedef struct {
    const char *p;   /* into tokenizer.bytes */
    uint32_t    n;
    mor_token   id;
    uint8_t     type;
} special_token;

struct tokenizer {
    int       model;        /* TOK_* */
    int32_t   n_tokens;     /* V': tokens with a text                          */
    int32_t   n_vocab;      /* the model's V >= V'; ids in [V', V) decode to "" */
    pretok *pre;        /* TOK_BPE: how a text is cut into pieces          */
    int       prefix;       /* TOK_SPM*: PREFIX_*                              */
    int       split_spaces; /* TOK_SPM*: a piece starts at every U+2581 (HF Metaspace split) */
    int       cut_at_spaces;/* TOK_SPM*: no token has a U+2581 after another character, so no merge
                             * crosses the start of a run of U+2581: pieces may start there (speed) */
    int       nfc;          /* each stretch of text is put in NFC first (mor.tokenizer.normalizer) */
    mor_token bos, eos, pad, unk;
    int       add_bos;      /* whether texts should start with BOS (informational) */
    uint8_t  *type;         /* [n_tokens] TT_* */

    /* What token i decodes to, bytes[off[i] .. off[i+1]): the bytes behind the
     * byte-level characters of a byte-level BPE token; a SentencePiece token
     * with U+2581 turned into spaces; the byte of a <0xNN> token; the text
     * itself of a control, unknown or user-defined token; nothing for an
     * unused one. */
    char     *bytes;
    uint32_t *off;          /* [n_tokens + 1] */

    /* The token of each byte: byte-level BPE's token of the byte's character,
     * SentencePiece's <0xNN> (byte fallback), or -1. */
    mor_token byte_token[256];

    /* Merges by rank, and a hash table from the pair (left, right) to the rank.
     * Where the file lists a pair twice the later rank wins, as in HF (and in
     * GPT-2's encoder.py): both build a map from the list. */
    int32_t   n_merges;
    mor_token *merge_left, *merge_right, *merge_result;
    uint64_t *pair_key;     /* PAIR_EMPTY or (left << 32 | right) */
    int32_t  *pair_rank;
    uint64_t  pair_mask;
    int       pair_shift;

    /* TOK_SPM*: the normal tokens by their text as stored (with U+2581), and
     * TOK_SPM's merge priority of each token: its score, as a key that sorts
     * the highest score first. */
    char     *raw;          /* texts of all tokens, raw[raw_off[i] .. raw_off[i+1]) */
    uint32_t *raw_off;
    int32_t  *raw_slot;     /* id + 1, 0 for empty */
    uint64_t  raw_mask;
    uint32_t *score_key;

    /* Specials (non-empty texts of types 2, 3 and 4), sorted by their bytes. */
    special_token *special;
    int32_t   n_special;
    uint8_t   special_first[32];   /* bit set: some special starts with this byte */
};

#define PAIR_EMPTY UINT64_MAX

/* Hashes shared by loading and encoding. */
uint64_t tok_hash(const char *p, size_t n);
/* Rank of the merge of (left, right), or -1. */
int32_t  tok_pair_rank(const tokenizer *t, mor_token left, mor_token right);
/* TOK_SPM*: the normal token whose text is p[0..n), or -1. */
mor_token tok_find_raw(const tokenizer *t, const char *p, size_t n);

#endif
