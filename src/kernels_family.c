/* kernels_family.c - the kernels of the model families beyond Llama (Gemma,
 * Gemma 2, GPT-NeoX; docs/FORMAT.md "Model families"): LayerNorm, the GELUs
 * and their gated products, bias rows, soft-capping, partial RoPE and
 * soft-capped attention.
 *
 * Portable C shared by every kernel set: element-wise work (or, for the
 * capped attention, the reference kernel's loop) whose cost is small next to
 * the matmuls of a layer, computed the same way on every CPU, so each output
 * is the same bits whatever the kernel set, the thread count or the batch.
 * tests/test_kernels.c checks them against float64 formulas. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "quant.h"

/* out = (x - mean) / sqrt(var + eps) * w + b, as torch's LayerNorm (biased
 * variance); the moments in double, then one float rounding per step. */
void k_layer_norm(float *out, const float *x, const float *w, const float *b, int32_t n, float eps)
{
    double s = 0, ss = 0;
    for (int32_t i = 0; i < n; i++) s += x[i];
    const double mean = s / n;
    for (int32_t i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    const float mu = (float)mean, r = (float)(1.0 / sqrt(ss / n + eps));
    for (int32_t i = 0; i < n; i++) out[i] = (x[i] - mu) * r * w[i] + b[i];
}

float k_gelu_tanh(float x)
{
    /* torch's gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    const float c = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

void k_act(float *x, int64_t n, int act)
{
    if (act == K_ACT_GELU) for (int64_t i = 0; i < n; i++) x[i] = k_gelu(x[i]);
    else if (act == K_ACT_GELU_TANH) for (int64_t i = 0; i < n; i++) x[i] = k_gelu_tanh(x[i]);
    else for (int64_t i = 0; i < n; i++) x[i] = k_silu(x[i]);
}

void k_glu(float *g, const float *u, int64_t n, int act)
{
    if (act == K_ACT_GELU) for (int64_t i = 0; i < n; i++) g[i] = k_gelu(g[i]) * u[i];
    else if (act == K_ACT_GELU_TANH) for (int64_t i = 0; i < n; i++) g[i] = k_gelu_tanh(g[i]) * u[i];
    else for (int64_t i = 0; i < n; i++) g[i] = k_silu(g[i]) * u[i];
}

void k_add_bias(float *y, int64_t ldy, const float *b, int64_t n_out, int32_t rows)
{
    for (int32_t i = 0; i < rows; i++) {
        float *yi = y + (int64_t)i * ldy;
        for (int64_t o = 0; o < n_out; o++) yi[o] += b[o];
    }
}

void k_softcap(float *x, int64_t n, float cap)
{
    /* as HF computes it: x / cap, tanh, * cap */
    for (int64_t i = 0; i < n; i++) x[i] = tanhf(x[i] / cap) * cap;
}

void k_rope_cs_part(float *v, int32_t n_heads, int32_t head_dim, int32_t rot, const float *cs)
{
    const int32_t half = rot / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *q = v + (int64_t)h * head_dim;
        for (int32_t i = 0; i < half; i++) {
            float a = q[i], b = q[i + half], c = cs[i], s = cs[half + i];
            q[i] = a * c - b * s;          /* the first rot dims as HF's rotate_half; the rest pass */
            q[i + half] = b * c + a * s;
        }
    }
}

