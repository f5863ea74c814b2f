/* gguf_input.h - a GGUF file as converter input, so that a model libmor
 * already runs (e.g. one bin/mor-train wrote) or a llama.cpp Llama can be
 * made recursive. A `mor` file (docs/FORMAT.md) is loaded by libmor itself
 * (every check of the loader applies; LoRA deltas are folded; only models
 * without routers are accepted). A llama.cpp file (general.architecture =
 * "llama", gemma, gemma2, gptneox; F32/F16/BF16 or any ggml quant) is read by its keys and
 * tensor names, with the Q and K rows that llama.cpp's converter permutes
 * for GGML's RoPE put back in Hugging Face order. Either way the layers
 * become a plain checkpoint in the Hugging Face key grammar, the dimensions
 * an hf_config, and the tokenizer.ggml.* keys are copied to the output
 * unchanged (a llama.cpp file's only when libmor's tokenizer loads them:
 * byte-level BPE with a pre-tokenizer it knows, or SentencePiece). */
#ifndef CV_GGUF_INPUT_H
#define CV_GGUF_INPUT_H
#include <stddef.h>
#include "checkpoint.h"
#include "gguf_write.h"
#include "hf_config.h"
#include "util.h"

typedef struct {
    struct mor_model *model;   /* a `mor` file, or NULL */
    struct gguf_file *g;       /* the file's keys (the model's, or parsed from file) */
    cv_file file;              /* a llama.cpp file, mapped */
    void **own;                /* dequantized weights */
    size_t n_own;
    int keep_quant;            /* quantized matrices of a llama.cpp file kept as stored (else F32) */
    int has_tokenizer;
    char tokenizer_note[200];  /* why a llama.cpp file's tokenizer is not copied, or "" */
} gguf_input;

/* Is path a GGUF file (by its magic)? */
int gguf_input_is_gguf(const char *path);
/* Load path; fill ck (tensors borrow the model's memory) and cfg. keep_quant:
 * a llama.cpp file's quantized matrices (Q8_0, Q4_K, ...) stay in their
 * type, byte for byte (for a plain conversion); else they are dequantized to
 * F32 (for one that computes with their values). */
int gguf_input_open(gguf_input *gi, const char *path, int keep_quant, checkpoint *ck, hf_config *cfg, char *err,
                    size_t errcap);
/* Copy the tokenizer.ggml.* keys (and general.name when name_too) to w. */
int gguf_input_copy_keys(const gguf_input *gi, gguf_writer *w, int name_too, char *err, size_t errcap);
void gguf_input_close(gguf_input *gi);

#endif
