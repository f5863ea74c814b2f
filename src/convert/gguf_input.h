/* gguf_input.h - a `mor` GGUF file (docs/FORMAT.md) as converter input, so
 * that a model libmor already runs (e.g. one bin/mor-train wrote) can be
 * made recursive: it is loaded by libmor itself (every check of the loader
 * applies; LoRA deltas are folded), its unrolled layers become a plain
 * checkpoint in the Hugging Face key grammar, its dimensions an hf_config,
 * and its tokenizer.ggml.* keys are copied to the output unchanged.
 * Only models without routers are accepted. */
#ifndef CV_GGUF_INPUT_H
#define CV_GGUF_INPUT_H
#include <stddef.h>
#include "checkpoint.h"
#include "gguf_write.h"
#include "hf_config.h"

typedef struct {
    struct mor_model *model;
    void **own;                /* dequantized weights */
    size_t n_own;
    int has_tokenizer;
} gguf_input;

/* Is path a GGUF file (by its magic)? */
int gguf_input_is_gguf(const char *path);
/* Load path; fill ck (tensors borrow the model's memory) and cfg. */
int gguf_input_open(gguf_input *gi, const char *path, checkpoint *ck, hf_config *cfg, char *err, size_t errcap);
/* Copy the tokenizer.ggml.* keys (and general.name when name_too) to w. */
int gguf_input_copy_keys(const gguf_input *gi, gguf_writer *w, int name_too, char *err, size_t errcap);
void gguf_input_close(gguf_input *gi);

#endif
