/* ops.c - forward and backward of the row kernels: RMSNorm, RoPE, SwiGLU,
 * causal attention over a group of rows, cross-entropy. Each backward sits
 * next to its forward; tests/test_grad.c checks every one of them against
 * finite differences in double.
 *
 * The forward formulas are those of the inference kernels (kernels_ref.c):
 * RMSNorm sums squares in double, RoPE computes its angles in float, the
 * softmax subtracts the max. In the float build RMSNorm calls k_rms_norm
 * itself, so a trained model gives the library's numbers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ops.h"
#ifndef TR_DOUBLE
#include "internal.h"
#endif

real tr_sigmoid(real z) { return (real)1 / ((real)1 + TR_EXP(-z)); }

void tr_rmsnorm_fwd(real *out, real *rstd, const real *x, const real *w, int n, int d, float eps)
{
    for (int i = 0; i < n; i++) {
        const real *xi = x + (size_t)i * d;
        double ss = 0;
        for (int e = 0; e < d; e++) ss += (double)xi[e] * xi[e];
#ifdef TR_DOUBLE
        real r = 1.0 / sqrt(ss / d + eps);
        for (int e = 0; e < d; e++) out[(size_t)i * d + e] = w[e] * (xi[e] * r);
#else
        real r = 1.0f / sqrtf((float)(ss / d) + eps);
        k_rms_norm(out + (size_t)i * d, xi, w, d, eps);
#endif
        rstd[i] = r;
    }
}

/* y = w * x * r, r = (mean(x^2) + eps)^-1/2:
 * dx = r * (w*dy) - x * r^3 / d * sum(w*dy*x), dw += dy * x * r */
void tr_rmsnorm_bwd(real *dx, int acc, real *dw, const real *dy, const real *x, const real *w,
                    const real *rstd, int n, int d)
{
    for (int i = 0; i < n; i++) {
        const real *xi = x + (size_t)i * d, *dyi = dy + (size_t)i * d;
        real r = rstd[i], *dxi = dx + (size_t)i * d;
        double dot = 0;
        for (int e = 0; e < d; e++) dot += (double)(w[e] * dyi[e]) * xi[e];
        real c = (real)(dot * r * r * r / d);
        for (int e = 0; e < d; e++) {
            real v = r * w[e] * dyi[e] - xi[e] * c;
            dxi[e] = acc ? dxi[e] + v : v;
        }
        if (dw) for (int e = 0; e < d; e++) dw[e] += dyi[e] * xi[e] * r;
    }
}

int tr_rope_init(tr_rope *r, int ctx, int head_dim, float theta)
{
    r->ctx = ctx; r->half = head_dim / 2;
    r->cos = malloc(sizeof(real) * (size_t)ctx * r->half);
    r->sin = malloc(sizeof(real) * (size_t)ctx * r->half);
    if (!r->cos || !r->sin) { tr_rope_free(r); return -1; }
    for (int p = 0; p < ctx; p++)
        for (int i = 0; i < r->half; i++) {
#ifdef TR_DOUBLE
            double inv = 1.0 / pow(theta, (double)(2 * i) / head_dim), ang = p * inv;
            r->cos[(size_t)p * r->half + i] = cos(ang);
            r->sin[(size_t)p * r->half + i] = sin(ang);
#else
            /* as k_rope: HF computes inv_freq and the angle in fp32 */
            float inv = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim), ang = (float)p * inv;
            r->cos[(size_t)p * r->half + i] = cosf(ang);
            r->sin[(size_t)p * r->half + i] = sinf(ang);
#endif
        }
    return 0;
}

void tr_rope_free(tr_rope *r)
{
    free(r->cos); free(r->sin);
    r->cos = r->sin = NULL;
}

/* q*cos + rotate_half(q)*sin: (a, b) -> (a c - b s, b c + a s); the backward
 * is the transpose, the rotation by -angle. */
void tr_rope_apply(const tr_rope *r, real *v, int n, int n_heads, int head_dim, const int32_t *pos, int dir)
{
    const int half = head_dim / 2;
    for (int i = 0; i < n; i++) {
        const real *cs = r->cos + (size_t)pos[i] * half, *sn = r->sin + (size_t)pos[i] * half;
        real *row = v + (size_t)i * n_heads * head_dim;
        for (int h = 0; h < n_heads; h++) {
            real *q = row + (size_t)h * head_dim;
            for (int e = 0; e < half; e++) {
                real a = q[e], b = q[e + half], c = cs[e], s = dir > 0 ? sn[e] : -sn[e];
                q[e] = a * c - b * s;
                q[e + half] = b * c + a * s;
            }
        }
    }
}

typedef struct { real *a, *b; const real *x, *y, *z; size_t n; int bwd; } swiglu_job;

#define SWIGLU_CHUNK 16384

static void swiglu_task(void *ctx, int task, int thread)
{
    const swiglu_job *j = ctx;
    size_t i0 = (size_t)task * SWIGLU_CHUNK, i1 = i0 + SWIGLU_CHUNK < j->n ? i0 + SWIGLU_CHUNK : j->n;
    (void)thread;
    if (!j->bwd) {   /* a = act; x = g, y = u */
        for (size_t i = i0; i < i1; i++) j->a[i] = j->x[i] / ((real)1 + TR_EXP(-j->x[i])) * j->y[i];
        return;
    }
    /* a = dg, b = du; x = dact, y = g, z = u.  silu'(g) = s (1 + g (1 - s)) */
    for (size_t i = i0; i < i1; i++) {
        real g = j->y[i], s = (real)1 / ((real)1 + TR_EXP(-g));
        j->b[i] = j->x[i] * g * s;
        j->a[i] = j->x[i] * j->z[i] * s * ((real)1 + g * ((real)1 - s));
    }
}

void tr_swiglu_fwd(real *act, const real *g, const real *u, size_t n)
{
    swiglu_job j = { act, NULL, g, u, NULL, n, 0 };
    tr_parallel((int)((n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK), swiglu_task, &j);
}

void tr_swiglu_bwd(real *dg, real *du, const real *dact, const real *g, const real *u, size_t n)
{
    swiglu_job j = { dg, du, dact, g, u, n, 1 };
    tr_parallel((int)((n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK), swiglu_task, &j);
}

/* Per head: S = scale Q K^T (n x n, products on the calling thread), causal
 * softmax row by row (entries above the diagonal set to 0), O = P V. */
void tr_attn_fwd(real *out, real *probs, const real *q, const real *k, const real *v, int n, int H,
                 int Hkv, int hd, int thread)
{
    const int qd = H * hd, kvd = Hkv * hd, group = H / Hkv;
    const real scale = (real)1 / TR_SQRT((real)hd);
    for (int h = 0; h < H; h++) {
        const int kh = h / group;
        real *P = probs + (size_t)h * n * n;
        tr_gemm_on(thread, n, n, hd, q + (size_t)h * hd, qd, 0, k + (size_t)kh * hd, kvd, 1, P, n, 0);
        for (int i = 0; i < n; i++) {
            real *p = P + (size_t)i * n, mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) { p[j] *= scale; if (p[j] > mx) mx = p[j]; }
            for (int j = 0; j <= i; j++) { p[j] = TR_EXP(p[j] - mx); sum += p[j]; }
            for (int j = 0; j <= i; j++) p[j] /= sum;
            for (int j = i + 1; j < n; j++) p[j] = 0;
        }
        tr_gemm_on(thread, n, hd, n, P, n, 0, v + (size_t)kh * hd, kvd, 0, out + (size_t)h * hd, qd, 0);
    }
}

/* o_i = sum_j p_ij v_j:  dV = P^T dO;  dP = dO V^T;
 * dS_ij = p_ij (dP_ij - sum_k p_ik dP_ik);  dQ = scale dS K;  dK = scale dS^T Q */
void tr_attn_bwd(real *dq, real *dk, real *dv, const real *dout, const real *probs, const real *q,
                 const real *k, const real *v, int n, int H, int Hkv, int hd, int kvh, int thread)
{
    const int qd = H * hd, kvd = Hkv * hd, group = H / Hkv;
    const real scale = (real)1 / TR_SQRT((real)hd);
    int k0 = kvh < 0 ? 0 : kvh, k1 = kvh < 0 ? Hkv : kvh + 1;
    real *dS = tr_scratch(thread, 2, (size_t)n * n > 0 ? (size_t)n * n : 1);
    for (int kh = k0; kh < k1; kh++) {
        for (int h = kh * group; h < (kh + 1) * group; h++) {
            const real *P = probs + (size_t)h * n * n, *dO = dout + (size_t)h * hd;
            int first = h == kh * group;
            tr_gemm_on(thread, n, hd, n, P, n, 1, dO, qd, 0, dv + (size_t)kh * hd, kvd, !first);
            tr_gemm_on(thread, n, n, hd, dO, qd, 0, v + (size_t)kh * hd, kvd, 1, dS, n, 0);
            for (int i = 0; i < n; i++) {
                const real *p = P + (size_t)i * n;
                real *ds = dS + (size_t)i * n, sum = 0;
                for (int j = 0; j <= i; j++) sum += p[j] * ds[j];
                for (int j = 0; j <= i; j++) ds[j] = p[j] * (ds[j] - sum) * scale;
                for (int j = i + 1; j < n; j++) ds[j] = 0;
            }
            tr_gemm_on(thread, n, hd, n, dS, n, 0, k + (size_t)kh * hd, kvd, 0, dq + (size_t)h * hd, qd, 0);
            tr_gemm_on(thread, n, hd, n, dS, n, 1, q + (size_t)h * hd, qd, 0, dk + (size_t)kh * hd, kvd, !first);
        }
    }
}

typedef struct { real *dl; const real *l; const int32_t *tg; int n, V, count; double scale, *loss; } xent_job;

static void xent_task(void *ctx, int task, int thread)
{
    const xent_job *j = ctx;
    (void)thread;
    int per = (j->n + 63) / 64, i0 = task * per, i1 = i0 + per < j->n ? i0 + per : j->n;
    for (int i = i0; i < i1; i++) {
        const real *l = j->l + (size_t)i * j->V;
        real *dl = j->dl ? j->dl + (size_t)i * j->V : NULL;
        j->loss[i] = 0;
        if (j->tg[i] < 0) { if (dl) memset(dl, 0, sizeof(real) * (size_t)j->V); continue; }
        real mx = -INFINITY;
        for (int c = 0; c < j->V; c++) if (l[c] > mx) mx = l[c];
        double sum = 0;
        if (dl) for (int c = 0; c < j->V; c++) { dl[c] = TR_EXP(l[c] - mx); sum += dl[c]; }
        else    for (int c = 0; c < j->V; c++) sum += TR_EXP(l[c] - mx);
        j->loss[i] = mx + log(sum) - l[j->tg[i]];
        if (dl) {
            real f = (real)(j->scale / j->count), inv = (real)(1.0 / sum) * f;
            for (int c = 0; c < j->V; c++) dl[c] *= inv;
            dl[j->tg[i]] -= f;
        }
    }
}

/* Rows in parallel; the per-row losses are summed in row order afterwards. */
double tr_xent(real *dlogits, const real *logits, const int32_t *targets, int n, int V, double scale)
{
    int count = 0;
    for (int i = 0; i < n; i++) count += targets[i] >= 0;
    double *loss = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1)), total = 0;
    if (!loss) abort();   /* tools only */
    xent_job j = { dlogits, logits, targets, n, V, count, scale, loss };
    int per = (n + 63) / 64;   /* 64 tasks at most */
    tr_parallel(per ? (n + per - 1) / per : 0, xent_task, &j);
    for (int i = 0; i < n; i++) total += loss[i];
    free(loss);
    return count ? total / count : 0;
}
