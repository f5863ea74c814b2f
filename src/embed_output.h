/* embed_output.h - the two ends of the model outside its layers: the token
 * embedding going in, the output head (final norm, output matrix, final
 * soft-cap) coming out, with the model family's features (FORMAT.md "Model
 * families"). Callers (decode.c, serve.c) embed and compute logits only
 * through these. */
#ifndef MOR_EMBED_OUTPUT_H
#define MOR_EMBED_OUTPUT_H
#include "kernels_threads.h"
#include "model.h"

/* out (n_embd floats) = the embedding of token t, times the model's
 * embedding scale when it has one (Gemma: sqrt(n_embd)). */
void model_embed_row(const mor_model *m, int32_t t, float *out);
/* out = the final norm of one row x (RMSNorm, or LayerNorm with bias); out may be x. */
void model_output_norm(const mor_model *m, float *out, const float *x);
/* logits (n x n_vocab) of n packed rows xn (n_embd floats apart) that went
 * through model_output_norm: the output matrix on e's threads, then the
 * final soft-cap when the model has one (Gemma 2). */
void model_logits(const mor_model *m, exec_ctx *e, const float *xn, int32_t n, float *logits);
/* The same through another output matrix w of the same shape (speculate.c:
 * the drafts' lighter copy). */
void model_logits_with(const mor_model *m, const tensor *w, exec_ctx *e, const float *xn, int32_t n, float *logits);
#endif
