/* test_grad.c - every backward kernel of src/tools/mor-train, and whole tiny models,
 * against central finite differences, in double (built with -DTR_DOUBLE).
 *
 * For a kernel y = f(x, w) the scalar loss is L = sum_i c_i y_i with fixed
 * random c; the analytic gradient from the backward is compared with
 * (L(x + h e_k) - L(x - h e_k)) / 2h at every input. For a model the loss is
 * the training loss itself (cross-entropy plus the routing losses); sampled
 * coordinates of every parameter tensor are checked, and a coordinate whose
 * perturbation changes a routing decision (top-k is piecewise constant) is
 * skipped and counted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "ops.h"

static uint64_t rng = 12345;
static double rnd(void) { return tr_rand_normal(&rng); }
static void fill(real *x, size_t n, double sd) { for (size_t i = 0; i < n; i++) x[i] = sd * rnd(); }

/* worst relative error between analytic a and numeric b */
static double relerr(const real *a, const real *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (fabs(a[i]) + fabs(b[i]) + 1e-8);
        if (e > worst) worst = e;
    }
    return worst;
}

/* ---- gemm ---- */

static void test_gemm(void)
{
    const int M = 13, N = 37, K = 301;   /* not multiples of the panel sizes; K spans two blocks */
    real *A = malloc(sizeof(real) * M * K), *At = malloc(sizeof(real) * M * K);
    real *B = malloc(sizeof(real) * K * N), *Bt = malloc(sizeof(real) * K * N);
    real *C = malloc(sizeof(real) * M * N), *R = malloc(sizeof(real) * M * N);
    fill(A, (size_t)M * K, 1); fill(B, (size_t)K * N, 1);
    for (int i = 0; i < M; i++) for (int k = 0; k < K; k++) At[k * M + i] = A[i * K + k];
    for (int k = 0; k < K; k++) for (int j = 0; j < N; j++) Bt[j * K + k] = B[k * N + j];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            R[i * N + j] = s;
        }
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int acc = 0; acc < 2; acc++) {
                for (int i = 0; i < M * N; i++) C[i] = acc ? 1.0 : 99.0;
                tr_gemm(M, N, K, ta ? At : A, ta ? M : K, ta, tb ? Bt : B, tb ? K : N, tb, C, N, acc);
                double worst = 0;
                for (int i = 0; i < M * N; i++) {
                    double e = fabs(C[i] - (R[i] + (acc ? 1.0 : 0.0)));
                    if (e > worst) worst = e;
                }
                CHECK(worst < 1e-10, "gemm ta=%d tb=%d acc=%d matches the naive product (max err %.2g)", ta, tb, acc, worst);
            }
    /* the thread count does not change a bit */
    real *C2 = malloc(sizeof(real) * M * N);
    tr_set_threads(1);
    tr_gemm(M, N, K, A, K, 0, B, N, 0, C, N, 0);
    tr_set_threads(2);
    tr_gemm(M, N, K, A, K, 0, B, N, 0, C2, N, 0);
    tr_set_threads(1);
    CHECK(!memcmp(C, C2, sizeof(real) * M * N), "gemm: 1 and 2 threads give identical results");
    free(A); free(At); free(B); free(Bt); free(C); free(R); free(C2);
}

/* ---- kernels ---- */

#define H 1e-6

static void test_rmsnorm(void)
{
    enum { n = 3, d = 7 };
    real x[n * d], w[d], c[n * d], y[n * d], r[n], dx[n * d], dw[d] = { 0 }, nx[n * d], nw[d];
    fill(x, n * d, 1); fill(w, d, 1); fill(c, n * d, 1);
    tr_rmsnorm_fwd(y, r, x, w, n, d, 1e-5f);
    tr_rmsnorm_bwd(dx, 0, dw, c, x, w, r, n, d);
    for (int k = 0; k < n * d + d; k++) {
        real *p = k < n * d ? &x[k] : &w[k - n * d], keep = *p, L[2];
        for (int s = 0; s < 2; s++) {
            *p = keep + (s ? -H : H);
            tr_rmsnorm_fwd(y, r, x, w, n, d, 1e-5f);
            L[s] = 0;
            for (int i = 0; i < n * d; i++) L[s] += c[i] * y[i];
        }
        *p = keep;
        *(k < n * d ? &nx[k] : &nw[k - n * d]) = (L[0] - L[1]) / (2 * H);
    }
    CHECK(relerr(dx, nx, n * d) < 1e-6, "rmsnorm dx (rel err %.2g)", relerr(dx, nx, n * d));
    CHECK(relerr(dw, nw, d) < 1e-6, "rmsnorm dw (rel err %.2g)", relerr(dw, nw, d));
}

static void test_rope(void)
{
    enum { n = 3, heads = 2, hd = 6, m = n * heads * hd };
    tr_rope rp;
    tr_rope_init(&rp, 16, hd, 10000.0f);
    int32_t pos[n] = { 0, 5, 13 };
    real x[m], c[m], y[m], dx[m], nx[m];
    fill(x, m, 1); fill(c, m, 1);
    memcpy(dx, c, sizeof dx);
    tr_rope_apply(&rp, dx, n, heads, hd, pos, -1);
    for (int k = 0; k < m; k++) {
        real keep = x[k], L[2];
        for (int s = 0; s < 2; s++) {
            x[k] = keep + (s ? -H : H);
            memcpy(y, x, sizeof y);
            tr_rope_apply(&rp, y, n, heads, hd, pos, 1);
            L[s] = 0;
            for (int i = 0; i < m; i++) L[s] += c[i] * y[i];
        }
        x[k] = keep;
        nx[k] = (L[0] - L[1]) / (2 * H);
    }
    CHECK(relerr(dx, nx, m) < 1e-6, "rope backward (rel err %.2g)", relerr(dx, nx, m));
    memcpy(y, x, sizeof y);
    tr_rope_apply(&rp, y, n, heads, hd, pos, 1);
    tr_rope_apply(&rp, y, n, heads, hd, pos, -1);
    double e = 0;
    for (int i = 0; i < m; i++) if (fabs(y[i] - x[i]) > e) e = fabs(y[i] - x[i]);
    CHECK(e < 1e-12, "rope: the backward undoes the forward (it is a rotation), err %.2g", e);
    memcpy(y, x, sizeof y);
    tr_rope_apply(&rp, y, n, heads, hd, pos, 1);
    CHECK(!memcmp(y, x, sizeof(real) * heads * hd) && memcmp(y, x, sizeof y),
          "rope leaves position 0 as it is and rotates the others");
    tr_rope_free(&rp);
}

static void test_swiglu(void)
{
    enum { n = 9 };
    real g[n], u[n], c[n], a[n], dg[n], du[n], ng[n], nu[n];
    fill(g, n, 2); fill(u, n, 1); fill(c, n, 1);
    tr_swiglu_bwd(dg, du, c, g, u, n);
    for (int k = 0; k < 2 * n; k++) {
        real *p = k < n ? &g[k] : &u[k - n], keep = *p, L[2];
        for (int s = 0; s < 2; s++) {
            *p = keep + (s ? -H : H);
            tr_swiglu_fwd(a, g, u, n);
            L[s] = 0;
            for (int i = 0; i < n; i++) L[s] += c[i] * a[i];
        }
        *p = keep;
        *(k < n ? &ng[k] : &nu[k - n]) = (L[0] - L[1]) / (2 * H);
    }
    CHECK(relerr(dg, ng, n) < 1e-6 && relerr(du, nu, n) < 1e-6, "swiglu dg, du (rel err %.2g, %.2g)",
          relerr(dg, ng, n), relerr(du, nu, n));
}

static void test_attention(void)
{
    enum { n = 5, Hq = 4, Hk = 2, hd = 3, qd = Hq * hd, kvd = Hk * hd };
    real q[n * qd], k[n * kvd], v[n * kvd], c[n * qd], o[n * qd], pr[Hq * n * n];
    real dq[n * qd], dk[n * kvd], dv[n * kvd], nq[n * qd], nk[n * kvd], nv[n * kvd];
    fill(q, n * qd, 1); fill(k, n * kvd, 1); fill(v, n * kvd, 1); fill(c, n * qd, 1);
    tr_attn_fwd(o, pr, q, k, v, n, Hq, Hk, hd, 0);
    tr_attn_bwd(dq, dk, dv, c, pr, q, k, v, n, Hq, Hk, hd, -1, 0);
    real *all[3] = { q, k, v }, *num[3] = { nq, nk, nv };
    int sizes[3] = { n * qd, n * kvd, n * kvd };
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < sizes[t]; i++) {
            real keep = all[t][i], L[2];
            for (int s = 0; s < 2; s++) {
                all[t][i] = keep + (s ? -H : H);
                tr_attn_fwd(o, pr, q, k, v, n, Hq, Hk, hd, 0);
                L[s] = 0;
                for (int j = 0; j < n * qd; j++) L[s] += c[j] * o[j];
            }
            all[t][i] = keep;
            num[t][i] = (L[0] - L[1]) / (2 * H);
        }
    CHECK(relerr(dq, nq, n * qd) < 1e-6, "attention dq, causal GQA 4:2 (rel err %.2g)", relerr(dq, nq, n * qd));
    CHECK(relerr(dk, nk, n * kvd) < 1e-6, "attention dk (rel err %.2g)", relerr(dk, nk, n * kvd));
    CHECK(relerr(dv, nv, n * kvd) < 1e-6, "attention dv (rel err %.2g)", relerr(dv, nv, n * kvd));
    /* one KV head at a time (the parallel split) gives the same */
    real dq2[n * qd], dk2[n * kvd], dv2[n * kvd];
    for (int kh = 0; kh < Hk; kh++) tr_attn_bwd(dq2, dk2, dv2, c, pr, q, k, v, n, Hq, Hk, hd, kh, 0);
    CHECK(!memcmp(dq, dq2, sizeof dq) && !memcmp(dk, dk2, sizeof dk) && !memcmp(dv, dv2, sizeof dv),
          "attention backward split by KV head is identical");
    /* causality: the first row attends to itself only */
    CHECK(fabs(o[0] - v[0]) < 1e-15, "attention: row 0 sees only itself");
}

static void test_xent(void)
{
    enum { n = 4, V = 7 };
    real l[n * V], dl[n * V], nl[n * V];
    int32_t tg[n] = { 3, -1, 0, 6 };
    fill(l, n * V, 2);
    double loss = tr_xent(dl, l, tg, n, V, 1.0);
    for (int k = 0; k < n * V; k++) {
        real keep = l[k];
        l[k] = keep + H; double a = tr_xent(NULL, l, tg, n, V, 1.0);
        l[k] = keep - H; double b = tr_xent(NULL, l, tg, n, V, 1.0);
        l[k] = keep;
        nl[k] = (a - b) / (2 * H);
    }
    CHECK(relerr(dl, nl, n * V) < 1e-6, "cross-entropy dlogits, ignored target row (rel err %.2g)", relerr(dl, nl, n * V));
    CHECK(loss > 0 && loss < 10, "cross-entropy is a mean over 3 targets (%.3f)", loss);
    int zero = 1;
    for (int c = 0; c < V; c++) zero &= dl[V + c] == 0;
    CHECK(zero, "a row with target -1 gets no gradient");
}

static void test_linear(void)
{
    enum { n = 4, in = 5, out = 3 };
    real x[n * in], Wt[out * in], c[n * out], y[n * out], dx[n * in], dW[out * in] = { 0 }, nx[n * in], nW[out * in];
    fill(x, n * in, 1); fill(Wt, out * in, 1); fill(c, n * out, 1);
    tr_linear_bwd(dx, 0, dW, c, x, Wt, n, in, out);
    for (int k = 0; k < n * in + out * in; k++) {
        real *p = k < n * in ? &x[k] : &Wt[k - n * in], keep = *p, L[2];
        for (int s = 0; s < 2; s++) {
            *p = keep + (s ? -H : H);
            tr_linear_fwd(y, x, Wt, n, in, out);
            L[s] = 0;
            for (int i = 0; i < n * out; i++) L[s] += c[i] * y[i];
        }
        *p = keep;
        *(k < n * in ? &nx[k] : &nW[k - n * in]) = (L[0] - L[1]) / (2 * H);
    }
    CHECK(relerr(dx, nx, n * in) < 1e-7 && relerr(dW, nW, out * in) < 1e-7, "linear dx, dW");
}

/* ---- whole models ---- */

static tr_config tiny(int router, int n_rec, int K, int mid)
{
    tr_config c;
    tr_config_defaults(&c);
    c.vocab = 11; c.d = 8; c.ff = 12; c.n_head = 2; c.n_kv = 1; c.head_dim = 4; c.ctx = 16;
    c.n_rec = n_rec; c.K = K; c.prelude = c.coda = mid;
    c.router = router;
    if (router == TR_ROUTER_EXPERT) for (int r = 0; r < n_rec; r++) c.cap[r] = (double)(n_rec - r) / n_rec;
    return c;
}

/* lo: LoRA deltas of these ranks and scales (NULL: c.lora_rank's, if any) */
static void check_model_lora(const char *what, tr_config c, const tr_lora_layout *lo, int select, int samples)
{
    enum { B = 2, T = 6 };
    tr_model m;
    if (lo ? tr_model_init_lora(&m, &c, lo, 7) : tr_model_init(&m, &c, 7)) { CHECK(0, "%s: init", what); return; }
    /* larger weights than the init, so every path carries a visible gradient */
    for (size_t i = 0; i < m.n_params; i++) m.p[i] += 0.3 * rnd();
    tr_state *s = tr_state_new(&m, B, T);
    int32_t tok[B * T], tgt[B * T], depth0[B * T];
    for (int i = 0; i < B * T; i++) { tok[i] = (int32_t)(tr_rand_u64(&rng) % c.vocab); tgt[i] = (int32_t)(tr_rand_u64(&rng) % c.vocab); }
    tgt[3] = -1;
    tr_result res;
    tr_forward(&m, s, tok, tgt, B, T, select, 0, &res);
    memcpy(depth0, tr_state_depth(s), sizeof depth0);
    int mixed = 0;
    for (int i = 1; i < B * T; i++) mixed |= depth0[i] != depth0[0];
    memset(m.g, 0, sizeof(real) * m.n_params);
    tr_backward(&m, s);
    double worst = 0;
    int checked = 0, skipped = 0, nonzero = 0;
    const char *worst_name = "";
    for (int t = 0; t < m.n_t; t++) {
        size_t n = (size_t)(m.t[t].rows * m.t[t].cols);
        for (int k = 0; k < samples && k < (int)n; k++) {
            size_t i = m.t[t].off + (size_t)(tr_rand_u64(&rng) % n);
            real keep = m.p[i];
            double L[2];
            int same = 1;
            for (int sgn = 0; sgn < 2; sgn++) {
                m.p[i] = keep + (sgn ? -1e-4 : 1e-4);
                tr_forward(&m, s, tok, tgt, B, T, select, 0, &res);
                L[sgn] = res.total;
                same &= !memcmp(depth0, tr_state_depth(s), sizeof depth0);
            }
            m.p[i] = keep;
            if (!same) { skipped++; continue; }
            double num = (L[0] - L[1]) / 2e-4, an = m.g[i];
            double e = fabs(num - an) / (fabs(num) + fabs(an) + 1e-6);
            if (fabs(an) > 1e-6) nonzero++;
            if (e > worst) { worst = e; worst_name = m.t[t].name; }
            checked++;
        }
    }
    CHECK(worst < 1e-5 && checked > 0 && skipped * 10 <= checked,
          "%s: %d gradients match finite differences (worst rel err %.2g at %s; %d skipped on a routing flip)",
          what, checked, worst, worst_name, skipped);
    CHECK(nonzero * 2 > checked, "%s: most checked gradients are non-zero (%d of %d)", what, nonzero, checked);
    if (c.router != TR_ROUTER_NONE) CHECK(mixed, "%s: tokens got different depths", what);
    tr_state_free(s);
    tr_model_free(&m);
}

static void check_model(const char *what, tr_config c, int select, int samples)
{
    check_model_lora(what, c, NULL, select, samples);
}

static void test_models(void)
{
    check_model("vanilla, 3 layers", tiny(TR_ROUTER_NONE, 1, 3, 0), TR_SELECT_TOPK, 12);
    check_model("recursive, middle-cycle N_r=3 (shared block, no routing)", tiny(TR_ROUTER_NONE, 3, 1, 1),
                TR_SELECT_TOPK, 12);
    check_model("MoR expert-choice, middle-cycle N_r=3, K=2, aux loss", tiny(TR_ROUTER_EXPERT, 3, 2, 1),
                TR_SELECT_TOPK, 12);
    tr_config c = tiny(TR_ROUTER_EXPERT, 3, 1, 1);
    c.aux_coef = 0.5f;   /* large, so that its gradient is checked visibly */
    check_model("MoR expert-choice, cycle-free middle N_r=3, aux coefficient 0.5", c, TR_SELECT_TOPK, 12);
    check_model("MoR expert-choice under THRESHOLD selection", tiny(TR_ROUTER_EXPERT, 3, 1, 1),
                TR_SELECT_THRESHOLD, 8);
    c = tiny(TR_ROUTER_EXPERT, 2, 2, 0);
    check_model("MoR expert-choice, cycle sharing N_r=2", c, TR_SELECT_TOPK, 8);
    c = tiny(TR_ROUTER_TOKEN, 3, 1, 1);
    c.alpha = 1.0f; c.bal_coef = 0.5f; c.z_coef = 0.05f;
    check_model("MoR token-choice softmax, balancing + z-loss", c, TR_SELECT_TOPK, 12);
    c.func = TR_FUNC_SIGMOID; c.alpha = 0.5f;
    check_model("MoR token-choice sigmoid", c, TR_SELECT_TOPK, 8);
    c = tiny(TR_ROUTER_EXPERT, 3, 1, 1);
    c.lora_rank = 2; c.lora_alpha = 4;
    check_model("MoR expert-choice with LoRA per recursion (rank 2)", c, TR_SELECT_TOPK, 6);
    /* a relaxed model as mor-convert writes it and mor-train --init reads it: ranks per layer and
     * projection (some none, k and v at full rank 4), one scale per projection */
    tr_lora_layout *lo = calloc(1, sizeof *lo);
    const float sc[TR_NROLE] = { 0, 1.0f, 0.5f, 2.0f, 1.5f, 0, 0.75f, 1.25f, 3.0f };
    for (int role = 0; role < TR_NROLE; role++) lo->scale[role] = sc[role];
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 2; j++)
            for (int role = 0; role < TR_NROLE; role++) {
                const int cap = role == TR_K || role == TR_V ? 4 : 8;
                if (role != TR_NORM1 && role != TR_NORM2 && (r + j + role) % 4) lo->rank[r][j][role] = 1 + (r * 5 + j * 3 + role) % cap;
            }
    check_model_lora("recursive cycle N_r=2 K=2, LoRA of mixed ranks and scales per projection", tiny(TR_ROUTER_NONE, 2, 2, 0),
                     lo, TR_SELECT_TOPK, 6);
    free(lo);
}

int main(void)
{
    test_gemm();
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_attention();
    test_xent();
    test_linear();
    test_models();
    tr_set_threads(1);
    return check_done();
}
