/* test_svd.c - the converter's SVD (src/tools/mor-convert/svd.c) against matrices of
 * known spectrum: A = P diag(sigma) Q^T with P, Q orthonormal (Householder QR
 * of Gaussian matrices, an independent construction). Checked: the singular
 * values, the reconstruction U S V^T, the orthonormality of U and V, the
 * Eckart-Young truncation error (root sum of squares of the discarded
 * values), tall / wide / square / rank-deficient / repeated / zero / 1 x n
 * shapes, and the subspace-iteration top-r path. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "svd.h"

static uint64_t rng = 0x1234567u;

static double gaussian(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    double u1 = ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    double u2 = (double)(rng >> 11) / 9007199254740992.0;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* q (rows x cols, row-major, cols <= rows) with orthonormal columns: the Q
 * of a Householder QR of a Gaussian matrix, formed by applying the
 * reflectors to the first cols columns of the identity. */
static void random_orthonormal(double *q, int rows, int cols)
{
    double *a = malloc(sizeof(double) * rows * cols), *vs = malloc(sizeof(double) * rows * cols);
    for (int i = 0; i < rows * cols; i++) a[i] = gaussian();
    for (int k = 0; k < cols; k++) {
        double *v = vs + (size_t)k * rows, nn = 0;
        for (int i = 0; i < rows; i++) v[i] = i < k ? 0 : a[i * cols + k];
        for (int i = k; i < rows; i++) nn += v[i] * v[i];
        nn = sqrt(nn);
        v[k] += v[k] >= 0 ? nn : -nn;
        double vv = 0;
        for (int i = k; i < rows; i++) vv += v[i] * v[i];
        for (int i = k; i < rows; i++) v[i] /= sqrt(vv);
        for (int j = k; j < cols; j++) {   /* a = (I - 2 v v^T) a */
            double d = 0;
            for (int i = k; i < rows; i++) d += v[i] * a[i * cols + j];
            for (int i = k; i < rows; i++) a[i * cols + j] -= 2 * v[i] * d;
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) q[i * cols + j] = i == j;
    for (int k = cols - 1; k >= 0; k--) {   /* Q = H_0 ... H_{cols-1} E */
        const double *v = vs + (size_t)k * rows;
        for (int j = 0; j < cols; j++) {
            double d = 0;
            for (int i = k; i < rows; i++) d += v[i] * q[i * cols + j];
            for (int i = k; i < rows; i++) q[i * cols + j] -= 2 * v[i] * d;
        }
    }
    free(a);
    free(vs);
}

/* max |X^T X - I| over the k columns of X (n x k, row-major) */
static double orth_err(const double *x, int n, int k)
{
    double e = 0;
    for (int a = 0; a < k; a++)
        for (int b = 0; b < k; b++) {
            double d = 0;
            for (int i = 0; i < n; i++) d += x[i * k + a] * x[i * k + b];
            d = fabs(d - (a == b));
            if (d > e) e = d;
        }
    return e;
}

/* || A - U_r S_r V_r^T ||_F for the first r triplets (U m x k, V n x k) */
static double trunc_err(const double *a, const double *u, const double *s, const double *v, int m, int n, int k, int r)
{
    double e = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double x = a[i * n + j];
            for (int t = 0; t < r; t++) x -= u[i * k + t] * s[t] * v[j * k + t];
            e += x * x;
        }
    return sqrt(e);
}

static double tail(const double *sig, int k, int r)
{
    double e = 0;
    for (int t = r; t < k; t++) e += sig[t] * sig[t];
    return sqrt(e);
}

static int cmp_desc(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* A = P diag(sig) Q^T, m x n, sig[k] (any order) */
static double *known(int m, int n, const double *sig)
{
    int k = m < n ? m : n;
    double *p = malloc(sizeof(double) * m * k), *q = malloc(sizeof(double) * n * k), *a = calloc((size_t)m * n, sizeof(double));
    random_orthonormal(p, m, k);
    random_orthonormal(q, n, k);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            for (int t = 0; t < k; t++) a[i * n + j] += p[i * k + t] * sig[t] * q[j * k + t];
    free(p);
    free(q);
    return a;
}

static void case_known(const char *name, int m, int n, const double *sig_in)
{
    int k = m < n ? m : n;
    double *sig = malloc(sizeof(double) * k), *u = malloc(sizeof(double) * m * k), *s = malloc(sizeof(double) * k),
           *v = malloc(sizeof(double) * n * k);
    memcpy(sig, sig_in, sizeof(double) * k);
    double *a = known(m, n, sig);
    qsort(sig, (size_t)k, sizeof(double), cmp_desc);
    double smax = sig[0] > 0 ? sig[0] : 1;
    CHECK(cv_svd(a, m, n, u, s, v) == 0, "%s (%dx%d): svd runs", name, m, n);
    double es = 0;
    int sorted = 1;
    for (int t = 0; t < k; t++) {
        if (fabs(s[t] - sig[t]) > es) es = fabs(s[t] - sig[t]);
        if (t && s[t] > s[t - 1]) sorted = 0;
    }
    CHECK(es <= 1e-12 * smax && sorted, "%s: singular values = the constructed spectrum, descending (max err %.2g)", name, es);
    double rec = trunc_err(a, u, s, v, m, n, k, k);
    CHECK(rec <= 1e-12 * smax * sqrt((double)m * n), "%s: U S V^T reconstructs A (||A - USV^T||_F = %.2g)", name, rec);
    double ou = orth_err(u, m, k), ov = orth_err(v, n, k);
    CHECK(ou <= 1e-12 && ov <= 1e-12, "%s: U and V have orthonormal columns (%.2g, %.2g)", name, ou, ov);
    int ok = 1;
    double worst = 0;
    for (int r = 0; r <= k; r++) {   /* Eckart-Young: the rank-r error is the tail */
        double e = trunc_err(a, u, s, v, m, n, k, r), want = tail(sig, k, r);
        if (fabs(e - want) > worst) worst = fabs(e - want);
        if (fabs(e - want) > 1e-5 * smax) ok = 0;
    }
    CHECK(ok, "%s: every rank-r truncation error = sqrt(sum of the discarded sigma^2) (max err %.2g)", name, worst);
    free(a); free(sig); free(u); free(s); free(v);
}

static void case_top(void)
{
    /* 200 x 120, decaying spectrum: the subspace-iteration top-8 against the exact SVD */
    enum { M = 200, N = 120, R = 8 };
    double sig[N];
    for (int t = 0; t < N; t++) sig[t] = 10.0 * pow(0.8, t);
    double *a = known(M, N, sig);
    double u[M * R], s[R], v[N * R], ue[M * R], se[R], ve[N * R];
    CHECK(cv_svd_top(a, M, N, R, 0, 42, u, s, v) == 0 && cv_svd_top(a, M, N, R, 1, 0, ue, se, ve) == 0,
          "top-r: subspace iteration and exact paths run");
    double es = 0;
    for (int t = 0; t < R; t++) if (fabs(s[t] - sig[t]) > es) es = fabs(s[t] - sig[t]);
    CHECK(es <= 1e-9, "top-r: leading singular values by subspace iteration (max err %.2g)", es);
    double e = trunc_err(a, u, s, v, M, N, R, R), want = tail(sig, N, R);
    CHECK(e <= want * (1 + 1e-9) && e >= want * (1 - 1e-9), "top-r: truncation error %.9g = the optimal tail %.9g", e, want);
    CHECK(orth_err(u, M, R) <= 1e-12 && orth_err(v, N, R) <= 1e-12, "top-r: orthonormal factors");
    double e2 = trunc_err(a, ue, se, ve, M, N, R, R);
    CHECK(fabs(e2 - want) <= 1e-9 * want, "top-r exact path: truncation error = tail (%.2g)", fabs(e2 - want));
    double u2[M * R], s2[R], v2[N * R];
    cv_svd_top(a, M, N, R, 0, 42, u2, s2, v2);
    CHECK(memcmp(u, u2, sizeof u) == 0 && memcmp(s, s2, sizeof s) == 0, "top-r: deterministic for a seed");
    CHECK(cv_svd_top(a, M, N, N + 1, 0, 1, u, s, v) == -1, "top-r: r > min(m, n) is refused");
    free(a);
}

int main(void)
{
    double s1[12], s2[7], s3[9], s4[10], s5[1], s6[6], s7[16];
    for (int t = 0; t < 12; t++) s1[t] = 1.0 + t * 0.37;
    for (int t = 0; t < 7; t++) s2[t] = pow(10.0, -t);          /* 1 .. 1e-6 */
    for (int t = 0; t < 9; t++) s3[t] = t < 4 ? 2.5 : 0.0;      /* rank 4, repeated */
    for (int t = 0; t < 10; t++) s4[t] = t % 3 == 0 ? 3.0 : 1.0 / (t + 1);
    s5[0] = 4.25;
    for (int t = 0; t < 6; t++) s6[t] = 0;                     /* the zero matrix */
    for (int t = 0; t < 16; t++) s7[t] = (t * 7919 % 16) * 0.125;   /* shuffled, one zero */
    case_known("square", 12, 12, s1);
    case_known("tall, graded 1..1e-6", 20, 7, s2);
    case_known("wide, rank 4 repeated", 9, 23, s3);
    case_known("tall, mixed", 31, 10, s4);
    case_known("1 x n", 1, 17, s5);
    case_known("n x 1", 17, 1, s5);
    case_known("zero", 6, 8, s6);
    case_known("wide 16 x 40", 16, 40, s7);
    case_top();
    return check_done();
}
