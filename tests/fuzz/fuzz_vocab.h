/* fuzz_vocab.h - the two vocab-only models the tokenizer targets fuzz
 * (tests/fuzz/models/vocab_gpt2.gguf and vocab_smollm.gguf: the "gpt2" and
 * "smollm" pre-tokenizers), loaded once per target and kept for the process. */
#ifndef MOR_FUZZ_VOCAB_H
#define MOR_FUZZ_VOCAB_H
#include "fuzz.h"
#include "mor.h"

/* Model i (0: gpt2, 1: smollm); cache is the target's own pair of handles. */
static inline const mor_model *fuzz_vocab_model(mor_model *cache[2], int i)
{
    static const char *const names[2] = { "vocab_gpt2.gguf", "vocab_smollm.gguf" };
    if (!cache[i]) {
        char path[512];
        mor_model_params mp;
        MOR_MODEL_PARAMS_INIT(&mp);
        mp.flags = MOR_MODEL_VOCAB_ONLY;
        mor_status st = mor_model_load_file(fuzz_model_path(names[i], path, sizeof path), &mp, &cache[i]);
        FUZZ_ASSERT(st == MOR_OK, "cannot load %s (run from the repository root or set MOR_FUZZ_MODELS): %s",
                    path, mor_last_error());
    }
    return cache[i];
}

#endif
