/* internal.h - the one internal header of libmor's programs (src/tools/).
 *
 * The programs are built on the public API (include/mor.h) and, where a tool
 * needs more, on the library internals listed here and nothing else
 * (scripts/check_layers.py checks it): the element types and their
 * conversions, the block formats, the GGUF reader, the kernels and the CPU
 * features (benchmarks, the trainer's forward), the tokenizers (the BPE
 * trainer's pre-tokenizer, the converter's check of a tokenizer), the model's
 * roles and families (the converter's layouts), and the test and benchmark
 * hooks. Nothing here is a promise to users: it changes with the library. */
#ifndef MOR_INTERNAL_H
#define MOR_INTERNAL_H
#include "mor.h"
#include "tensor.h"
#include "quant.h"
#include "cpu.h"
#include "kernels.h"
#include "gguf.h"
#include "pretokenize.h"
#include "tokenizer.h"
#include "model.h"
#include "serve.h"
#include "hooks.h"
#endif
