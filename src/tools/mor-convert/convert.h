/* convert.h - turn a Hugging Face MoR / recursive / Llama checkpoint directory
 * (or a plain `mor` GGUF file) into a `mor` GGUF file (docs/FORMAT.md), or a
 * tokenizer into a vocab-only GGUF. A vanilla model can be made recursive
 * on the way, with depth-wise LoRA deltas (relax.h; docs/RELAXED.md). The
 * command-line tool src/tools/mor-convert/mor-convert.c is a thin wrapper. */
#ifndef CV_CONVERT_H
#define CV_CONVERT_H
#include <stddef.h>
#include <stdio.h>
#include "settings.h"
#include "util.h"

enum { OUTTYPE_AUTO = -1 };   /* else a dtype.h value: GGML_F32, GGML_F16, GGML_BF16 */

typedef struct {
    const char *dir;          /* holds config.json and the weights; or a GGUF file (gguf_input.h) */
    const char *weights;      /* a path, or a file name in dir; NULL: model.safetensors, else pytorch_model.bin */
    const char *mor_config;   /* mor_cfg.yaml or mor_config.json; NULL: dir/mor_cfg.yaml, else dir/../mor_cfg.yaml, if present */
    const char *tokenizer;    /* tokenizer.json; NULL: dir/tokenizer.json if present */
    const char *name;         /* general.name, or NULL for none */
    int outtype;              /* OUTTYPE_AUTO: each matrix keeps its checkpoint dtype */
    cv_settings flags;       /* command-line overrides of the MoR config */
    /* Relaxed Recursive Transformer conversion of a vanilla model (relax.h) */
    int init;                 /* INIT_NONE (-1), or INIT_*: tie the layers (needs flags.num_recursion, .sharing) */
    int keep_norms;           /* with init: every layer keeps its own RMSNorm weights */
    int lora_rank[9];         /* per CV role (norms ignored): SVD LoRA rank, 0 = not relaxed */
    int svd_exact;            /* full Jacobi SVD even for small ranks */
    int threads;              /* SVDs in parallel; <= 0: 1 */
    cv_progress_fn progress;  /* optional: SVDs done, tensors written (util.h) */
    void *progress_ud;
    /* The output matrix. A saved lm_head.weight bitwise equal to the
     * embedding is stored tied; one that differs is kept as the output matrix
     * whatever config.json says (the official RecursiveLlamaForCausalLM never
     * ties it, and its eval path loads the saved matrix), with a note. With
     * tie_lm_head, a config that says tie_word_embeddings ties it anyway, as
     * transformers' from_pretrained does (the saved lm_head is ignored). */
    int tie_lm_head;
    char *note;               /* may be NULL: receives what the tool should tell (e.g. that */
    size_t notecap;           /*   an lm_head was kept untied), "" when nothing */
} convert_opts;

void convert_opts_init(convert_opts *o);

/* Convert and write the GGUF to out. summary (may be NULL) receives one line
 * describing the result. */
int convert_model(const convert_opts *o, FILE *out, char *summary, size_t sumcap, char *err, size_t errcap);

/* A tokenizer-only GGUF from tokenizer (or dir/tokenizer.json), with
 * bos/eos from dir/config.json or dir/tokenizer_config.json when present;
 * or, when dir is a GGUF file (and tokenizer NULL), from its tokenizer.ggml.*
 * keys (a llama.cpp vocab or model file), checked by loading it first. */
int convert_vocab_only(const char *dir, const char *tokenizer, FILE *out, char *summary, size_t sumcap, char *err,
                       size_t errcap);

#endif
