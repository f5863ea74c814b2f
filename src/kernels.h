/* kernels.h - the portable C reference kernels. Every fast kernel of a later
 * version is tested against these; they favour clarity over speed. */
#ifndef MOR_KERNELS_H
#define MOR_KERNELS_H
#include <stdint.h>
#include "model.h"

float mor_bf16_to_f32(uint16_t h);
float mor_f16_to_f32(uint16_t h);

/* y[i][o] = sum_c W[o][c] * x[i][c] for n input rows: W is rows x cols in
 * any stored type; x is n x cols; y is n x rows. */
void mor_matmul(const mor_weight *w, const float *x, float *y, int32_t n);
/* Row `row` of an embedding table, converted to float. */
void mor_embed_row(const mor_weight *w, int32_t row, float *out);
/* out = w * (x / sqrt(mean(x^2) + eps)), as HF LlamaRMSNorm in fp32. */
void mor_rms_norm(float *out, const float *x, const float *w, int32_t n, float eps);
/* Rotate n_heads heads of head_dim at position pos, HF default RoPE (rotate_half). */
void mor_rope(float *v, int32_t n_heads, int32_t head_dim, int32_t pos, float theta);
float mor_silu(float x);
float mor_gelu(float x);   /* exact (erf) GELU, as nn.GELU() */
/* In-place softmax of n floats, max-subtracted, in float like torch's fp32 softmax. */
void mor_softmax(float *x, int32_t n);
#endif
