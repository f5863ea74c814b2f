/* kernels_ref.c - portable C reference kernels (see kernels.h): plain loops in
 * the order the maths is written, the oracle of every fast kernel. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "kernels_lora.h"
#include "quant.h"


int act_is_q8(uint32_t t) { return t == GGML_Q8_0 || t == GGML_Q4_0 || t == GGML_Q5_0; }

static int is_kquant(uint32_t t) { return t >= GGML_Q2_K && t <= GGML_Q8_K; }
_Static_assert(sizeof(kq_block) <= 16 * sizeof(float) * QK_K, "an unpacked row fits the matmul scratch");

int act_is_quantized(uint32_t t) { return act_is_q8(t) || t == GGML_Q4_1 || t == GGML_Q5_1 || is_kquant(t); }

static float dot_f32(const float *w, const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_bf16(const uint16_t *w, const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += bf16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_f16(const uint16_t *w, const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += f16_to_f32(w[i]) * x[i];
    return s;
}

/* Quantized weights against Q8_0 activations, as ggml's vec_dot_q8_0_q8_0 /
 * q4_0_q8_0: an exact integer sum per block, scaled by d_w * d_x. */
static float dot_q8_0(const block_q8_0 *w, const void *xrow, int64_t n)
{
    const int8_t *xq = act_q8_qs(xrow);
    const float *xd = act_q8_d(xrow, n);
    float s = 0;
    for (int64_t b = 0; b < n / QK; b++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK; j++) sumi += (int32_t)w[b].qs[j] * xq[b * QK + j];
        s += (float)sumi * (f16_to_f32(w[b].d) * xd[b]);
    }
    return s;
}

static float dot_q4_0(const block_q4_0 *w, const void *xrow, int64_t n)
{
    const int8_t *xq = act_q8_qs(xrow);
    const float *xd = act_q8_d(xrow, n);
    float s = 0;
    for (int64_t b = 0; b < n / QK; b++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            sumi += ((w[b].qs[j] & 15) - 8) * xq[b * QK + j];
            sumi += ((w[b].qs[j] >> 4) - 8) * xq[b * QK + j + QK / 2];
        }
        s += (float)sumi * (f16_to_f32(w[b].d) * xd[b]);
    }
    return s;
}

static float f16_at(const void *p) { uint16_t h; memcpy(&h, p, 2); return f16_to_f32(h); }

/* A legacy block (Q4_1, Q5_0, Q5_1) in integers: value j = d * q[j] + m
 * (Q5_0: q centred, -16..15, and m = 0). */
typedef struct { float d, m; int8_t q[QK]; } lq_block;

/* Bit j of the little-endian qh as 16 or 0 in byte j: each byte of qh spread over 8 bytes by a multiply
 * (bit t to byte t), stored 8 bytes at once where the host is little-endian (bytes stored one by one and
 * read back as a vector stall the load: 5x slower). */
static void spread_bits(const uint8_t qh[4], uint8_t hi[QK])
{
    for (int b = 0; b < 4; b++) {
        uint64_t x = (qh[b] * 0x0101010101010101ull) & 0x8040201008040201ull;
        x = (((x + 0x7f7f7f7f7f7f7f7full) >> 7) & 0x0101010101010101ull) << 4;   /* 16 in each byte whose bit is set */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(hi + 8 * b, &x, 8);
#else
        for (int t = 0; t < 8; t++) hi[8 * b + t] = (uint8_t)(x >> (8 * t));
#endif
    }
}

_Static_assert(sizeof(lq_block) <= 16 * sizeof(float) * QK, "an unpacked row fits the matmul scratch");

static inline void lq_unpack(uint32_t type, const void *blk, lq_block *o)
{
    const uint8_t *p = blk, *qs = p + (type == GGML_Q4_1 ? 4 : type == GGML_Q5_0 ? 6 : 8);
    uint16_t h;
    memcpy(&h, p, 2);
    o->d = f16_to_f32(h);
    o->m = 0.0f;
    if (type != GGML_Q5_0) { memcpy(&h, p + 2, 2); o->m = f16_to_f32(h); }
    uint8_t hi[QK];
    if (type != GGML_Q4_1) spread_bits(p + (type == GGML_Q5_0 ? 2 : 4), hi);
    else memset(hi, 0, sizeof hi);
    const uint8_t off = type == GGML_Q5_0 ? 16 : 0;
    for (int j = 0; j < QK / 2; j++) {
        o->q[j] = (int8_t)(uint8_t)(((qs[j] & 15) | hi[j]) - off);
        o->q[j + QK / 2] = (int8_t)(uint8_t)(((qs[j] >> 4) | hi[j + QK / 2]) - off);
    }
}

/* Q5_0 against Q8_0 activations, as ggml's vec_dot_q5_0_q8_0: d_w * d_x *
 * (integer sum) per block; Q4_1 / Q5_1 against Q8_1, as vec_dot_q4_1_q8_1 /
 * q5_1_q8_1: d_w * d_x * (integer sum) + m_w * s_x. lb: the row's blocks
 * unpacked (lq_unpack), or NULL to unpack each here: the same operations. */
static float dot_legacy(uint32_t type, const void *wrow, const lq_block *lb, const void *xrow, int64_t n)
{
    const int8_t *xq = act_q8_qs(xrow);
    const float *xd = act_q8_d(xrow, n), *xs = type == GGML_Q5_0 ? NULL : act_q8_1_s(xrow, n);
    const size_t bs = (size_t)tensor_row_bytes(type, QK);
    float s = 0;
    lq_block one;
    for (int64_t b = 0; b < n / QK; b++) {
        const lq_block *k = lb ? lb + b : &one;
        const int8_t *x = xq + b * QK;
        int32_t sumi = 0;
        if (lb) {
            for (int j = 0; j < QK; j++) sumi += k->q[j] * x[j];
        } else {   /* straight from the nibbles (the same integer sum): nothing stored between */
            const uint8_t *p = (const uint8_t *)wrow + (size_t)b * bs, *qs = p + bs - QK / 2;
            uint8_t hi[QK];
            if (type != GGML_Q4_1) spread_bits(p + (type == GGML_Q5_0 ? 2 : 4), hi);
            else memset(hi, 0, sizeof hi);
            int32_t xsum = 0;
            for (int j = 0; j < QK / 2; j++) {
                sumi += ((qs[j] & 15) | hi[j]) * x[j] + ((qs[j] >> 4) | hi[j + QK / 2]) * x[j + QK / 2];
                xsum += x[j] + x[j + QK / 2];
            }
            if (type == GGML_Q5_0) sumi -= 16 * xsum;
            one.d = f16_at(p);
            one.m = type == GGML_Q5_0 ? 0.0f : f16_at(p + 2);
        }
        if (xs) s += (k->d * xd[b]) * (float)sumi + k->m * xs[b];
        else s += (float)sumi * (k->d * xd[b]);
    }
    return s;
}

/* k-quant weights against Q8_K activations, as ggml's vec_dot_*_q8_K: per
 * super-block the exact integer sums sum_j sc_j * (q . x)_j and, for the
 * types with mins, sum_j mn_j * (sum of x)_j (from the activations' bsums),
 * then (d_w * d_x) * sumi - (dmin_w * d_x) * summ, super-blocks in order.
 * kb: the row's super-blocks unpacked (kq_unpack), or NULL to unpack each
 * from wrow here: the same operations either way. */
static float dot_kquant(uint32_t type, const void *wrow, const kq_block *kb, const void *xrow, int64_t n)
{
    const int8_t *xq = act_q8_qs(xrow);
    const float *xd = act_q8k_d(xrow, n);
    const int16_t *bsums = act_q8k_bsums(xrow, n);
    const size_t bs = (size_t)tensor_row_bytes(type, QK_K);
    float s = 0;
    kq_block one;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const kq_block *k = kb ? kb + b : &one;
        if (!kb) kq_unpack(type, (const unsigned char *)wrow + (size_t)b * bs, &one);
        const int8_t *x = xq + b * QK_K;
        const int16_t *bsum = bsums + b * (QK_K / 16);
        /* dot products of 16 values (a loop the compiler vectorizes); a sub-block of 32 is two of them */
        int32_t d16[16] = { 0 }, sumi = 0, summ = 0;
        for (int g = 0; g < 16; g++)
            for (int l = 0; l < 16; l++) d16[g] += k->q[16 * g + l] * x[16 * g + l];
        for (int j = 0; j < QK_K / k->sub; j++) {
            const int two = k->sub == 32;
            sumi += k->sc[j] * (two ? d16[2 * j] + d16[2 * j + 1] : d16[j]);
            summ += k->mn[j] * (two ? bsum[2 * j] + bsum[2 * j + 1] : bsum[j]);
        }
        s = kq_step(s, k->d, k->dmin, xd[b], sumi, summ);
    }
    return s;
}

/* k-quant and Q4_1 / Q5_0 / Q5_1 weights with scratch: each row unpacked
 * once for all n inputs (into kq_block or lq_block records). */
static void matmul_unpacked(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n, int64_t o0,
                            int64_t o1, int acc, void *scratch)
{
    const int64_t C = w->cols, bk = tensor_block_size(w->type);
    const size_t rb = tensor_row_bytes(w->type, C), bs = (size_t)tensor_row_bytes(w->type, bk);
    const int k = is_kquant(w->type);
    kq_block *kb = scratch;
    lq_block *lb = scratch;
    for (int64_t o = o0; o < o1; o++) {
        const unsigned char *row = (const unsigned char *)w->data + (size_t)o * rb;
        for (int64_t b = 0; b < C / bk; b++) {
            if (k) kq_unpack(w->type, row + (size_t)b * bs, kb + b);
            else lq_unpack(w->type, row + (size_t)b * bs, lb + b);
        }
        for (int32_t i = 0; i < n; i++) {
            const void *xi = (const char *)x + (size_t)i * xs;
            const float s = k ? dot_kquant(w->type, row, kb, xi, C) : dot_legacy(w->type, row, lb, xi, C);
            float *yo = y + (int64_t)i * ldy + o;
            *yo = acc ? *yo + s : s;
        }
    }
}

/* Weight rows outermost: each weight row is read once for all n inputs. */
void k_matmul_ref_range(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy,
                          int32_t n, int64_t o0, int64_t o1, int acc, float *scratch)
{
    const int64_t C = w->cols;
    /* an unpacked row takes 332 bytes per 256 values (40 per 32); the scratch has 64 per value */
    const int unpack = is_kquant(w->type) || w->type == GGML_Q4_1 || w->type == GGML_Q5_0 || w->type == GGML_Q5_1;
    if (unpack && scratch && n > 1) {
        matmul_unpacked(w, x, xs, y, ldy, n, o0, o1, acc, scratch);
        return;
    }
    const size_t rb = tensor_row_bytes(w->type, C);
    for (int64_t o = o0; o < o1; o++) {
        const void *row = (const char *)w->data + (size_t)o * rb;
        for (int32_t i = 0; i < n; i++) {
            const void *xi = (const char *)x + (size_t)i * xs;
            float s;
            switch (w->type) {
            case GGML_F16:  s = dot_f16(row, xi, C); break;
            case GGML_BF16: s = dot_bf16(row, xi, C); break;
            case GGML_Q8_0: s = dot_q8_0(row, xi, C); break;
            case GGML_Q4_0: s = dot_q4_0(row, xi, C); break;
            case GGML_Q4_1: case GGML_Q5_0: case GGML_Q5_1: s = dot_legacy(w->type, row, NULL, xi, C); break;
            case GGML_F32:  s = dot_f32(row, xi, C); break;
            default:        s = dot_kquant(w->type, row, NULL, xi, C); break;
            }
            float *yo = y + (int64_t)i * ldy + o;
            *yo = acc ? *yo + s : s;
        }
    }
}

int act_kind(const kernel_set *ks, uint32_t wtype)
{
    if (act_is_q8(wtype)) return ACT_Q8;
    if (wtype == GGML_Q4_1 || wtype == GGML_Q5_1) return ACT_Q8_1;
    if (is_kquant(wtype)) return ACT_Q8K;
    if (wtype < 64 && ((ks->bf16_types >> wtype) & 1)) return ACT_BF16;
    return wtype < 64 && ((ks->bf16x3_types >> wtype) & 1) ? ACT_BF16X3 : ACT_F32;
}

size_t act_stride(const kernel_set *ks, uint32_t wtype, int64_t k) { return act_kind_stride(act_kind(ks, wtype), k); }

size_t act_kind_stride(int kind, int64_t k)
{
    switch (kind) {
    case ACT_Q8:     return act_q8_stride(k);
    case ACT_BF16X3: return act_bf16x3_stride(k);
    case ACT_Q8_1:   return act_q8_1_stride(k);
    case ACT_Q8K:    return act_q8k_stride(k);
    case ACT_BF16:   return act_bf16_stride(k);
    default:             return sizeof(float) * (size_t)k;
    }
}

size_t act_stride_max(int64_t k)
{
    size_t m = 0;
    for (int kind = ACT_F32; kind <= ACT_BF16; kind++) m = act_kind_stride(kind, k) > m ? act_kind_stride(kind, k) : m;
    return m;
}

void act_prepare(const kernel_set *ks, uint32_t wtype, const float *x, void *out, int64_t k)
{
    switch (act_kind(ks, wtype)) {
    case ACT_Q8:     ks->act_q8(x, out, k); break;
    case ACT_BF16X3: ks->act_bf16x3(x, out, k); break;
    case ACT_Q8_1:   act_q8_1_ref(x, out, k); break;
    case ACT_Q8K:    act_q8k_ref(x, out, k); break;
    case ACT_BF16:   ks->act_bf16(x, out, k); break;
    default:             memcpy(out, x, sizeof(float) * (size_t)k); break;
    }
}

/* A matmul on the calling thread with kernel set ks. Weights whose
 * activations are prepared (quantized, or split for bfloat16 tiles) get them
 * a segment of columns at a time in a stack buffer, so this never allocates. */
#define SEG 4096
static void matmul_here(const kernel_set *ks, const tensor *w, const float *x, float *y, int32_t n)
{
    const int64_t K = w->cols;
    if (act_kind(ks, w->type) == ACT_F32) {
        ks->matmul(w, x, sizeof(float) * (size_t)K, y, w->rows, n, 0, w->rows, 0, NULL);
        return;
    }
    _Alignas(64) unsigned char buf[6 * SEG + 64];   /* one row of SEG columns of any kind */
    for (int32_t i = 0; i < n; i++) {
        const float *xi = x + (int64_t)i * K;
        float *yi = y + (int64_t)i * w->rows;
        if (K <= SEG) {
            act_prepare(ks, w->type, xi, buf, K);
            ks->matmul(w, buf, 0, yi, w->rows, 1, 0, w->rows, 0, NULL);
            continue;
        }
        /* wider rows: column segments of the weight, accumulated */
        const size_t rb = tensor_row_bytes(w->type, K);
        for (int64_t c0 = 0; c0 < K; c0 += SEG) {
            int64_t kc = K - c0 < SEG ? K - c0 : SEG;
            tensor part = *w;
            part.cols = kc;
            part.data = (const char *)w->data + tensor_row_bytes(w->type, c0);
            act_prepare(ks, w->type, xi + c0, buf, kc);
            for (int64_t o = 0; o < w->rows; o++) {   /* rows keep their full stride */
                tensor row = part;
                row.rows = 1;
                row.data = (const char *)part.data + (size_t)o * rb;
                ks->matmul(&row, buf, 0, yi + o, 1, 1, 0, 1, c0 > 0, NULL);
            }
        }
    }
}

void k_matmul(const tensor *w, const float *x, float *y, int32_t n)
{
    matmul_here(kernels_best(), w, x, y, n);
}

void k_matmul_ref(const tensor *w, const float *x, float *y, int32_t n)
{
    matmul_here(&kernels_ref, w, x, y, n);
}

void k_embed_row(const tensor *w, int32_t row, float *out)
{
    const int64_t C = w->cols;
    dequant_row(w->type, (const char *)w->data + (size_t)row * tensor_row_bytes(w->type, C), out, C);
}

void k_rms_norm(float *out, const float *x, const float *w, int32_t n, float eps)
{
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int32_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

void k_rope_inv_freq(float *inv_freq, int32_t head_dim, float theta)
{
    /* as HF computes it in fp32: inv_freq = 1 / theta^(2i/d) */
    for (int32_t i = 0; i < head_dim / 2; i++)
        inv_freq[i] = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
}

void k_rope_cs(float *v, int32_t n_heads, int32_t head_dim, const float *cs)
{
    const int32_t half = head_dim / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *q = v + (int64_t)h * head_dim;
        for (int32_t i = 0; i < half; i++) {
            float a = q[i], b = q[i + half], c = cs[i], s = cs[half + i];
            q[i] = a * c - b * s;          /* q*cos + rotate_half(q)*sin */
            q[i + half] = b * c + a * s;
        }
    }
}

void k_rope(float *v, int32_t n_heads, int32_t head_dim, int32_t pos, float theta)
{
    const int32_t half = head_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
        float ang = (float)pos * inv_freq;
        float c = cosf(ang), s = sinf(ang);
        for (int32_t h = 0; h < n_heads; h++) {
            float *q = v + (int64_t)h * head_dim;
            float a = q[i], b = q[i + half];
            q[i] = a * c - b * s;
            q[i + half] = b * c + a * s;
        }
    }
}

float k_silu(float x) { return x / (1.0f + expf(-x)); }

float k_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }

void k_softmax(float *x, int32_t n)
{
    float mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < n; i++) if (x[i] > mx) mx = x[i];
    for (int32_t i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    for (int32_t i = 0; i < n; i++) x[i] /= sum;
}

/* Element i of a cache row of type t (F32, F16, Q8_0). */
static float kv_at(const void *row, uint32_t t, int32_t i)
{
    switch (t) {
    case GGML_F16: return f16_to_f32(((const uint16_t *)row)[i]);
    case GGML_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)row + i / QK;
        return f16_to_f32(b->d) * (float)b->qs[i % QK];
    }
    default: return ((const float *)row)[i];
    }
}

/* Attention of one query row's group, the scores soft-capped when cap > 0
 * (c * tanh(s / c), Gemma 2): the reference, and the kernel every set uses
 * for soft-capped scores (kernels.h, k_attend_capped). */
static void attend(const float *q, int32_t group, int32_t hd, const void *k, const void *v, size_t stride,
                   uint32_t kv_type, const int32_t *cells, int32_t nv, float scale, float cap, float *probs,
                   float *out)
{
    for (int32_t g = 0; g < group; g++) {
        const float *qh = q + (int64_t)g * hd;
        float *p = probs + (int64_t)g * nv;
        for (int32_t t = 0; t < nv; t++) {
            const void *kr = (const char *)k + (size_t)cells[t] * stride;
            float d = 0;
            for (int32_t i = 0; i < hd; i++) d += qh[i] * kv_at(kr, kv_type, i);
            p[t] = cap > 0 ? tanhf(d * scale / cap) * cap : d * scale;
        }
        k_softmax(p, nv);
        float *oh = out + (int64_t)g * hd;
        memset(oh, 0, sizeof(float) * (size_t)hd);
        for (int32_t t = 0; t < nv; t++) {
            const void *vr = (const char *)v + (size_t)cells[t] * stride;
            for (int32_t i = 0; i < hd; i++) oh[i] += p[t] * kv_at(vr, kv_type, i);
        }
    }
}

void k_attend_ref(const float *q, int32_t group, int32_t hd, const void *k, const void *v,
                  size_t stride, uint32_t kv_type, const int32_t *cells, int32_t nv,
                  float scale, float *probs, float *out)
{
    attend(q, group, hd, k, v, stride, kv_type, cells, nv, scale, 0.0f, probs, out);
}

void k_attend_capped(const float *q, int32_t group, int32_t hd, const void *k, const void *v, size_t stride,
                     uint32_t kv_type, const int32_t *cells, int32_t nv, float scale, float cap, float *probs,
                     float *out)
{
    attend(q, group, hd, k, v, stride, kv_type, cells, nv, scale, cap, probs, out);
}

static void swiglu_ref(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) g[i] = k_silu(g[i]) * u[i];
}

KERNELS_LORA_AXPY(lora_axpy_ref, 4)

const kernel_set kernels_ref = {
    "ref", act_q8_ref, k_matmul_ref_range, k_attend_ref, k_rms_norm, swiglu_ref, lora_axpy_ref, 0, NULL, 0, NULL
};
