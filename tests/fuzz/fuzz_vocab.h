/* fuzz_vocab.h - the vocab-only models the tokenizer targets fuzz
 * (tests/fuzz/models/vocab_*.gguf, made by make_seeds.py): byte-level BPE
 * with the pre-tokenizers gpt2, smollm, falcon, deepseek-coder, deepseek-llm
 * and mpt (normalizing to NFC, as GPT-NeoX's tokenizer.json), and two
 * SentencePiece-style ones (merging by score with the dummy
 * prefix; by merges, Metaspace split, no prefix), loaded once per target and
 * kept for the process. */
#ifndef MOR_FUZZ_VOCAB_H
#define MOR_FUZZ_VOCAB_H
#include "fuzz.h"
#include "mor.h"

#define FUZZ_N_VOCABS 8

static const struct {
    const char *file;
    int spm;              /* SentencePiece-style: spaces are U+2581 */
    int prefix;           /* ... and a U+2581 goes before the text */
    const char *bos;      /* the BOS token's text */
    int nfc;              /* texts are put in NFC first */
} fuzz_vocabs[FUZZ_N_VOCABS] = {
    { "vocab_gpt2.gguf", 0, 0, "<|endoftext|>", 0 },
    { "vocab_smollm.gguf", 0, 0, "<|endoftext|>", 0 },
    { "vocab_falcon.gguf", 0, 0, "<|endoftext|>", 0 },
    { "vocab_deepseek_coder.gguf", 0, 0, "<|endoftext|>", 0 },
    { "vocab_deepseek_llm.gguf", 0, 0, "<|endoftext|>", 0 },
    { "vocab_mpt.gguf", 0, 0, "<|endoftext|>", 1 },
    { "vocab_spm.gguf", 1, 1, "<s>", 0 },
    { "vocab_spm_hf.gguf", 1, 0, "<s>", 0 },
};

/* Model i (0 <= i < FUZZ_N_VOCABS); cache is the target's own handles. */
static inline const mor_model *fuzz_vocab_model(mor_model *cache[FUZZ_N_VOCABS], int i)
{
    if (!cache[i]) {
        char path[512];
        mor_model_params mp;
        MOR_MODEL_PARAMS_INIT(&mp);
        mp.flags = MOR_MODEL_VOCAB_ONLY;
        mor_status st = mor_model_load_file(fuzz_model_path(fuzz_vocabs[i].file, path, sizeof path), &mp, &cache[i]);
        FUZZ_ASSERT(st == MOR_OK, "cannot load %s (run from the repository root or set MOR_FUZZ_MODELS): %s",
                    path, mor_last_error());
    }
    return cache[i];
}

/* Does s[0..n) hold U+2581 (a space to a SentencePiece tokenizer)? */
static inline int fuzz_has_u2581(const char *s, size_t n)
{
    for (size_t i = 0; i + 3 <= n; i++)
        if (!memcmp(s + i, "\xe2\x96\x81", 3)) return 1;
    return 0;
}

#endif
