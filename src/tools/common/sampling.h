/* sampling.h - the llama.cpp sampling settings the programs share
 * (mor-run's flags, mor-server's request fields): the stage names of
 * llama.cpp's `samplers` / `--samplers` / `--sampling-seq`, and DRY's
 * sequence breakers, which llama.cpp gives as strings, as the token
 * sequences mor_sampler_set_dry_breakers takes. */
#ifndef TOOLS_SAMPLING_H
#define TOOLS_SAMPLING_H
#include <stddef.h>
#include "mor.h"

/* The MOR_STAGE_* of a llama.cpp stage name (case-insensitive): "penalties",
 * "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
 * "temperature", with llama.cpp's aliases (kebab-case "top-k", no dash
 * "topk", "typical_p", "typ", "nucleus", "temp"). 0 for a name it does not
 * know; -1 for llama.cpp's stages that libmor has not ("infill",
 * "adaptive_p"). */
int sampling_stage_by_name(const char *name, size_t len);
/* The MOR_STAGE_* of one of llama.cpp's --sampling-seq letters (e d s k y p
 * m x t), 0 for another. */
int sampling_stage_by_char(char c);
/* A stage id's llama.cpp name ("top_k"), "?" for another. */
const char *sampling_stage_name(int stage);

/* llama.cpp's default breakers: "\n", ":", "\"", "*". */
extern const char *const SAMPLING_DRY_DEFAULT_BREAKERS[4];

/* DRY's breakers strs[0..n) (lens[i] bytes each; empty ones skipped, each
 * cut to 40 bytes) as token sequences over the model's vocabulary, as
 * llama.cpp makes them: for each token whose text contains the string, the
 * token alone; for each token whose text ends in a proper prefix of the
 * string, the token followed by the tokenization of the rest (at most 20
 * tokens). *tokens and *seq_lens (malloc'd; NULL when none) get the
 * sequences for mor_sampler_set_dry_breakers, *n_seq their count. MOR_OK,
 * MOR_E_NOMEM, or a tokenizer's status. */
mor_status sampling_dry_breakers(const mor_model *m, const char *const *strs, const size_t *lens, int32_t n,
                                 mor_token **tokens, int32_t **seq_lens, int32_t *n_seq);
#endif
