/* svd.h - the singular value decomposition of a real matrix, in double, by
 * one-sided Jacobi rotations (Hestenes): no LAPACK, accurate to the last few
 * bits, O(m n min(m,n)) per sweep. For a top-r factorization of a large
 * matrix (r much smaller than min(m, n)) a seeded subspace iteration first
 * finds the dominant subspace, so that only a small matrix goes through
 * Jacobi (2048 x 5632, r = 64: about 30 s on one loaded core; full Jacobi
 * took 6.6 s at 512 x 512 and grows as m n min(m, n), i.e. some 20 minutes
 * there). Used to initialise depth-wise LoRA deltas (relax.c). */
#ifndef CV_SVD_H
#define CV_SVD_H
#include <stdint.h>

/* a (m x n, row-major) = U diag(s) V^T, k = min(m, n):
 * u: m x k (row-major), s: k values, descending, >= 0; v: n x k (row-major).
 * U and V have orthonormal columns (a column of a zero singular value is
 * completed to an orthonormal basis). Returns 0, or -1 when out of memory. */
int cv_svd(const double *a, int64_t m, int64_t n, double *u, double *s, double *v);

/* The leading r <= min(m, n) singular triplets: u m x r, s[r], v n x r
 * (row-major). Exact (cv_svd) when exact != 0 or r is not much smaller than
 * min(m, n); otherwise by subspace iteration seeded with `seed` (deterministic),
 * whose truncation error ||a - U S V^T|| exceeds the optimal tail by about
 * 1e-9 (relative) when the spectrum decays and by 0.15% for a flat one (a
 * random 384 x 384 matrix, r = 32; measured). Returns 0 or -1 (out of memory). */
int cv_svd_top(const double *a, int64_t m, int64_t n, int64_t r, int exact, uint64_t seed,
               double *u, double *s, double *v);

#endif
