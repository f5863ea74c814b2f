/* hooks.h - the test and benchmark hooks of contexts: behaviour only tests
 * and mor-bench ask for, reached through these functions and never through
 * a field a caller writes (the serving hooks are in serve.h). */
#ifndef MOR_HOOKS_H
#define MOR_HOOKS_H
#include "kernels.h"
#include "mor.h"

/* Run ctx's decodes with kernel set ks (a kernels_get() result), not the
 * best one of this CPU; NULL: back to the best (with MOR_CTX_FAST_BF16,
 * kernels_fast_bf16 of it). Between decodes only. */
void hook_context_kernels(mor_context *ctx, const kernel_set *ks);
/* Bytes of weight matrices and LoRA factors ctx's decodes have passed to the
 * matmuls since it was created, one pass per matmul call (a matmul over many
 * rows reads its weights once): mor-bench --serve's reads per token. */
uint64_t hook_context_weight_bytes(const mor_context *ctx);
#endif
