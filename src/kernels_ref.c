/* kernels_ref.c - portable C reference kernels (see kernels.h). */
#include <math.h>
#include <string.h>
#include "kernels.h"

float mor_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;   /* bf16 is the top half of an f32: exact */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float mor_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else {                          /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            u = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float dot_f32(const float *w, const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_bf16(const uint16_t *w, const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += mor_bf16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_f16(const uint16_t *w, const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += mor_f16_to_f32(w[i]) * x[i];
    return s;
}

/* Weight rows outermost: each weight row is read once for all n inputs. */
void mor_matmul(const mor_weight *w, const float *x, float *y, int32_t n)
{
    const int64_t R = w->rows, C = w->cols;
    for (int64_t o = 0; o < R; o++) {
        for (int32_t i = 0; i < n; i++) {
            const float *xi = x + (int64_t)i * C;
            float s;
            switch (w->type) {
            case 1:  s = dot_f16((const uint16_t *)w->data + o * C, xi, C); break;   /* F16 */
            case 30: s = dot_bf16((const uint16_t *)w->data + o * C, xi, C); break;  /* BF16 */
            default: s = dot_f32((const float *)w->data + o * C, xi, C); break;
            }
            y[(int64_t)i * R + o] = s;
        }
    }
}

void mor_embed_row(const mor_weight *w, int32_t row, float *out)
{
    const int64_t C = w->cols;
    for (int64_t c = 0; c < C; c++) {
        switch (w->type) {
        case 1:  out[c] = mor_f16_to_f32(((const uint16_t *)w->data)[row * C + c]); break;
        case 30: out[c] = mor_bf16_to_f32(((const uint16_t *)w->data)[row * C + c]); break;
        default: out[c] = ((const float *)w->data)[row * C + c]; break;
        }
    }
}

void mor_rms_norm(float *out, const float *x, const float *w, int32_t n, float eps)
{
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int32_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

void mor_rope(float *v, int32_t n_heads, int32_t head_dim, int32_t pos, float theta)
{
    const int32_t half = head_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        /* as HF computes it in fp32: inv_freq = 1 / theta^(2i/d), angle = pos * inv_freq */
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
        float ang = (float)pos * inv_freq;
        float c = cosf(ang), s = sinf(ang);
        for (int32_t h = 0; h < n_heads; h++) {
            float *q = v + (int64_t)h * head_dim;
            float a = q[i], b = q[i + half];
            q[i] = a * c - b * s;          /* q*cos + rotate_half(q)*sin */
            q[i + half] = b * c + a * s;
        }
    }
}

float mor_silu(float x) { return x / (1.0f + expf(-x)); }

float mor_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }

void mor_softmax(float *x, int32_t n)
{
    float mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < n; i++) if (x[i] > mx) mx = x[i];
    for (int32_t i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    for (int32_t i = 0; i < n; i++) x[i] /= sum;
}
