/* svd.c - one-sided Jacobi SVD and a subspace-iteration top-r SVD. See svd.h.
 *
 * One-sided Jacobi (Hestenes 1958; Demmel & Veselic 1992) orthogonalizes the
 * columns of a working copy W of the matrix by plane rotations, applying the
 * same rotations to V = I. At convergence W = U diag(s), so A = U S V^T with
 * s the column norms. It needs no bidiagonalization and its singular values
 * are accurate to a few ulps relative to the largest, which is what the
 * tests of the LoRA initialisation compare against (the truncation error of
 * a rank-r factor is the root sum of squares of the discarded values). */
#include "svd.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SWEEPS 80

static double dot(const double *x, const double *y, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

static void rotate(double *x, double *y, int64_t n, double c, double s)
{
    for (int64_t i = 0; i < n; i++) {
        double a = x[i], b = y[i];
        x[i] = c * a - s * b;
        y[i] = s * a + c * b;
    }
}

/* Orthogonalize the N columns (length M, column-major) of w; vc (N x N,
 * column-major) accumulates the rotations. */
static void jacobi(double *w, int64_t M, int64_t N, double *vc, double *norm2)
{
    const double tol = 2.0 * DBL_EPSILON;
    for (int sweep = 0; sweep < MAX_SWEEPS; sweep++) {
        int64_t rotated = 0;
        for (int64_t j = 0; j < N; j++) norm2[j] = dot(w + j * M, w + j * M, M);
        for (int64_t p = 0; p + 1 < N; p++)
            for (int64_t q = p + 1; q < N; q++) {
                double a = norm2[p], b = norm2[q];
                if (a == 0 || b == 0) continue;
                double g = dot(w + p * M, w + q * M, M);
                if (fabs(g) <= tol * sqrt(a) * sqrt(b)) continue;
                /* the rotation that zeroes the pair's inner product: t is the
                 * smaller root of t^2 + 2 zeta t - 1 = 0 */
                double zeta = (b - a) / (2 * g);
                double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1 + zeta * zeta));
                double c = 1 / sqrt(1 + t * t), s = c * t;
                rotate(w + p * M, w + q * M, M, c, s);
                rotate(vc + p * N, vc + q * N, N, c, s);
                norm2[p] = a - t * g;
                norm2[q] = b + t * g;
                rotated++;
            }
        if (!rotated) break;
    }
}

/* Replace the columns flagged zero (of k columns of length M, column-major)
 * with unit vectors orthogonal to all the others (Gram-Schmidt, twice). */
static void complete_basis(double *u, int64_t M, int64_t k, const unsigned char *zero, double *tmp)
{
    int64_t next = 0;
    for (int64_t j = 0; j < k; j++) {
        if (!zero[j]) continue;
        for (; next < M; next++) {
            memset(tmp, 0, sizeof(double) * (size_t)M);
            tmp[next] = 1;
            for (int pass = 0; pass < 2; pass++)
                for (int64_t o = 0; o < k; o++) {
                    if (o == j || (zero[o] && o > j)) continue;
                    double d = dot(tmp, u + o * M, M);
                    for (int64_t i = 0; i < M; i++) tmp[i] -= d * u[o * M + i];
                }
            double nn = sqrt(dot(tmp, tmp, M));
            if (nn > 0.5) {
                for (int64_t i = 0; i < M; i++) u[j * M + i] = tmp[i] / nn;
                next++;
                break;
            }
        }
    }
}

int cv_svd(const double *a, int64_t m, int64_t n, double *u, double *s, double *v)
{
    /* Work on the columns of X = A (m >= n) or X = A^T (m < n): N = min(m,n)
     * columns of length M = max(m,n), so that rotations touch the short side. */
    const int tall = m >= n;
    const int64_t M = tall ? m : n, N = tall ? n : m;
    double *w = malloc(sizeof(double) * (size_t)(M * N > 0 ? M * N : 1));
    double *vc = malloc(sizeof(double) * (size_t)(N * N > 0 ? N * N : 1));
    double *nrm = malloc(sizeof(double) * (size_t)(N ? N : 1));
    double *tmp = malloc(sizeof(double) * (size_t)(M ? M : 1));
    int64_t *ord = malloc(sizeof(int64_t) * (size_t)(N ? N : 1));
    unsigned char *zero = calloc((size_t)(N ? N : 1), 1);
    int rc = -1;
    if (!w || !vc || !nrm || !tmp || !ord || !zero) goto done;
    if (tall) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) w[j * m + i] = a[i * n + j];
    } else {
        memcpy(w, a, sizeof(double) * (size_t)(M * N));   /* rows of A are the columns of A^T */
    }
    memset(vc, 0, sizeof(double) * (size_t)(N * N));
    for (int64_t j = 0; j < N; j++) vc[j * N + j] = 1;
    jacobi(w, M, N, vc, nrm);

    /* singular values = column norms, in descending order (stable) */
    for (int64_t j = 0; j < N; j++) {
        nrm[j] = sqrt(dot(w + j * M, w + j * M, M));
        ord[j] = j;
    }
    for (int64_t i = 1; i < N; i++) {   /* insertion sort: N is small next to the sweeps */
        int64_t o = ord[i], k = i;
        while (k > 0 && nrm[ord[k - 1]] < nrm[o]) { ord[k] = ord[k - 1]; k--; }
        ord[k] = o;
    }
    /* X's left vectors: the normalized columns, reordered into tmp-sized scratch */
    double *uc = malloc(sizeof(double) * (size_t)(M * N > 0 ? M * N : 1));
    if (!uc) goto done;
    for (int64_t jj = 0; jj < N; jj++) {
        int64_t j = ord[jj];
        s[jj] = nrm[j];
        if (nrm[j] > 0) {
            for (int64_t i = 0; i < M; i++) uc[jj * M + i] = w[j * M + i] / nrm[j];
        } else {
            zero[jj] = 1;
            memset(uc + jj * M, 0, sizeof(double) * (size_t)M);
        }
    }
    complete_basis(uc, M, N, zero, tmp);
    /* X = Uc S Vc^T. tall: U = Uc (m x N), V = Vc. wide: A = Vc S Uc^T. */
    for (int64_t jj = 0; jj < N; jj++) {
        const double *ucol = uc + jj * M, *vcol = vc + ord[jj] * N;
        if (tall) {
            for (int64_t i = 0; i < m; i++) u[i * N + jj] = ucol[i];
            for (int64_t i = 0; i < n; i++) v[i * N + jj] = vcol[i];
        } else {
            for (int64_t i = 0; i < m; i++) u[i * N + jj] = vcol[i];
            for (int64_t i = 0; i < n; i++) v[i * N + jj] = ucol[i];
        }
    }
    free(uc);
    rc = 0;
done:
    free(w); free(vc); free(nrm); free(tmp); free(ord); free(zero);
    return rc;
}

/* ---- subspace iteration -------------------------------------------------- */

static uint64_t next_u64(uint64_t *st)   /* splitmix64 */
{
    uint64_t z = (*st += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static double gauss(uint64_t *st)   /* Box-Muller */
{
    double u1 = ((double)(next_u64(st) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(next_u64(st) >> 11) / 9007199254740992.0;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Orthonormalize k columns of length M (column-major) by modified
 * Gram-Schmidt, twice; a column that vanishes becomes zero. */
static void orth(double *q, int64_t M, int64_t k)
{
    for (int pass = 0; pass < 2; pass++)
        for (int64_t j = 0; j < k; j++) {
            double *c = q + j * M;
            for (int64_t o = 0; o < j; o++) {
                double d = dot(c, q + o * M, M);
                for (int64_t i = 0; i < M; i++) c[i] -= d * q[o * M + i];
            }
            double nn = sqrt(dot(c, c, M));
            if (nn > 0) for (int64_t i = 0; i < M; i++) c[i] /= nn;
        }
}

int cv_svd_top(const double *a, int64_t m, int64_t n, int64_t r, int exact, uint64_t seed,
               double *u, double *s, double *v)
{
    const int64_t kmin = m < n ? m : n, k = r + (r / 2 > 16 ? r / 2 : 16);   /* oversampled */
    const int power = 6;
    if (r < 0 || r > kmin) return -1;
    if (r == 0) return 0;
    if (exact || 2 * k >= kmin) {
        double *fu = malloc(sizeof(double) * (size_t)(m * kmin)), *fs = malloc(sizeof(double) * (size_t)kmin);
        double *fv = malloc(sizeof(double) * (size_t)(n * kmin));
        int rc = -1;
        if (fu && fs && fv && cv_svd(a, m, n, fu, fs, fv) == 0) {
            for (int64_t i = 0; i < m; i++) memcpy(u + i * r, fu + i * kmin, sizeof(double) * (size_t)r);
            for (int64_t i = 0; i < n; i++) memcpy(v + i * r, fv + i * kmin, sizeof(double) * (size_t)r);
            memcpy(s, fs, sizeof(double) * (size_t)r);
            rc = 0;
        }
        free(fu); free(fs); free(fv);
        return rc;
    }
    /* Halko, Martinsson & Tropp (2011), Alg. 4.4: Q spans A's dominant
     * k-dimensional column space after `power` rounds of A A^T; then
     * A ~ Q (Q^T A), and the small k x n matrix Q^T A goes through Jacobi. */
    double *om = malloc(sizeof(double) * (size_t)(n * k));    /* n x k, column-major; later Z = A^T Q */
    double *q = malloc(sizeof(double) * (size_t)(m * k));     /* m x k, column-major */
    double *ub = malloc(sizeof(double) * (size_t)(k * k)), *sb = malloc(sizeof(double) * (size_t)k);
    double *vb = malloc(sizeof(double) * (size_t)(n * k));
    int rc = -1;
    uint64_t st = seed ^ 0x6A09E667F3BCC909u;
    if (!om || !q || !ub || !sb || !vb) goto done;
    for (int64_t i = 0; i < n * k; i++) om[i] = gauss(&st);
    for (int it = 0; it <= power; it++) {
        for (int64_t i = 0; i < m; i++)           /* Q = A Z */
            for (int64_t j = 0; j < k; j++) q[j * m + i] = dot(a + i * n, om + j * n, n);
        orth(q, m, k);
        memset(om, 0, sizeof(double) * (size_t)(n * k));
        for (int64_t i = 0; i < m; i++)           /* Z = A^T Q */
            for (int64_t j = 0; j < k; j++) {
                double qi = q[j * m + i];
                const double *ai = a + i * n;
                double *z = om + j * n;
                for (int64_t c = 0; c < n; c++) z[c] += qi * ai[c];
            }
        if (it < power) orth(om, n, k);
    }
    /* om now holds (Q^T A)^T column by column, i.e. B = Q^T A row by row */
    if (cv_svd(om, k, n, ub, sb, vb)) goto done;
    for (int64_t i = 0; i < m; i++)
        for (int64_t t = 0; t < r; t++) {
            double acc = 0;
            for (int64_t j = 0; j < k; j++) acc += q[j * m + i] * ub[j * k + t];
            u[i * r + t] = acc;
        }
    for (int64_t i = 0; i < n; i++) memcpy(v + i * r, vb + i * k, sizeof(double) * (size_t)r);
    memcpy(s, sb, sizeof(double) * (size_t)r);
    rc = 0;
done:
    free(om); free(q); free(ub); free(sb); free(vb);
    return rc;
}
