/* convert.h - turn a Hugging Face MoR / recursive / Llama checkpoint directory
 * into a `mor` GGUF file (docs/FORMAT.md), or a tokenizer into a vocab-only
 * GGUF. The command-line tool src/tools/mor-convert.c is a thin wrapper. */
#ifndef CV_CONVERT_H
#define CV_CONVERT_H
#include <stddef.h>
#include <stdio.h>
#include "mor_settings.h"

enum { OUTTYPE_AUTO = -1 };   /* else a dtype.h value: CV_F32, CV_F16, CV_BF16 */

typedef struct {
    const char *dir;          /* holds config.json and the weights */
    const char *weights;      /* a path, or a file name in dir; NULL: model.safetensors, else pytorch_model.bin */
    const char *mor_config;   /* mor_cfg.yaml or mor_config.json; NULL: dir/mor_cfg.yaml, else dir/../mor_cfg.yaml, if present */
    const char *tokenizer;    /* tokenizer.json; NULL: dir/tokenizer.json if present */
    const char *name;         /* general.name, or NULL for none */
    int outtype;              /* OUTTYPE_AUTO: each matrix keeps its checkpoint dtype */
    mor_settings flags;       /* command-line overrides of the MoR config */
} convert_opts;

void convert_opts_init(convert_opts *o);

/* Convert and write the GGUF to out. summary (may be NULL) receives one line
 * describing the result. */
int convert_model(const convert_opts *o, FILE *out, char *summary, size_t sumcap, char *err, size_t errcap);

/* A tokenizer-only GGUF from tokenizer (or dir/tokenizer.json), with
 * bos/eos from dir/config.json or dir/tokenizer_config.json when present. */
int convert_vocab_only(const char *dir, const char *tokenizer, FILE *out, char *summary, size_t sumcap, char *err,
                       size_t errcap);

#endif
