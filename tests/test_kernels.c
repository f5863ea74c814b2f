/* test_kernels.c - every kernel set this CPU runs against the reference
 * kernels (kernels_ref.c), forced one set at a time:
 *  - matmul for F32, F16, BF16, Q8_0 and Q4_0 weights on random shapes (and
 *    the other quants, which every set runs with the reference kernels),
 *    odd sizes included: close to the reference, and bitwise the same
 *    whatever the number of rows, the output range a thread is given, or
 *    whether the strip-conversion scratch is used;
 *  - quantized matmuls on block counts around the kernels' pair and group
 *    loops, with the matrix ending at an unreadable page (no kernel reads
 *    past the weights), and the AVX-512 set without VBMI bitwise the same
 *    as with it; the AVX-512 and AMX sets' Q8_0 and Q4_0 products bitwise
 *    the reference's;
 *  - the Q8_0 activation quantizer bitwise the reference (ties included),
 *    and the bf16 splitter of the AMX set (ACT_BF16X3) too;
 *  - attention over F32, F16 and Q8_0 caches, RMSNorm and SwiGLU;
 *  - the model families' kernels, shared by every set (LayerNorm, the GELUs
 *    and gated products, soft-capping, bias rows, partial RoPE, soft-capped
 *    attention), against float64 formulas;
 *  - decode through a context (a random-weight MoR model large enough for
 *    the work to be split, in each weight type) with each kernel set and
 *    n_threads 1, 2 and 3: bitwise the same logits and depths per set
 *    whatever the thread count, and close to the reference set's.
 *  - the reference kernels of the other quants (Q4_K, Q5_K, Q6_K, Q2_K, Q3_K,
 *    Q8_K, Q4_1, Q5_0, Q5_1) against float64 dots of the dequantized
 *    weights, on odd shapes; on 1, 2 and 3 threads and row by row bitwise
 *    the same; matrices of three activation kinds in one pass.
 * Activations are prepared for each set (act_prepare). Also the CPU
 * detection (and, where the CPU has AMX, that tiles run).
 * Sets the CPU lacks are reported as skipped. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "check.h"
#include "context.h"
#include "hooks.h"
#include "cpu.h"
#include "kernels.h"
#include "mor.h"
#include "quant.h"
#include "synth_model.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand(void) { return (float)((next_u32() & 0xffffff) / 16777216.0) * 2.0f - 1.0f; }

static const char *tname(uint32_t t) { return tensor_type_name(t); }

/* A random weight of type t: rows x cols (made from floats, quantized). */
static void *make_weight(uint32_t t, int64_t rows, int64_t cols, tensor *w)
{
    size_t rb = tensor_row_bytes(t, cols);
    unsigned char *data = malloc(rb * (size_t)rows + 1);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    for (int64_t o = 0; o < rows; o++) {
        for (int64_t c = 0; c < cols; c++) tmp[c] = frand();
        quant_row(t, tmp, data + (size_t)o * rb, cols);
    }
    free(tmp);
    w->data = data; w->type = t; w->rows = rows; w->cols = cols;
    return data;
}

/* sum_c |W[o][c] * x[i][c]|: the scale a rounding difference is measured against */
static double abs_dot(const tensor *w, const float *x, int64_t o)
{
    float *row = malloc(sizeof(float) * (size_t)w->cols);
    dequant_row(w->type, (const char *)w->data + (size_t)o * tensor_row_bytes(w->type, w->cols), row, w->cols);
    double s = 0;
    for (int64_t c = 0; c < w->cols; c++) s += fabs((double)row[c] * x[c]);
    free(row);
    return s;
}

/* n rows of x (k floats each) prepared for set ks and weights of type t (64-byte aligned, the set's
 * stride), and in *ref_rows for the reference set (the same buffer where the two agree). Quantized
 * rows are the reference quantizer's for both. */
static unsigned char *prepare_rows(const kernel_set *ks, uint32_t t, const float *x, int64_t k, int32_t n,
                                   unsigned char **ref_rows)
{
    const size_t xs = act_stride(ks, t, k), rs = act_stride(&kernels_ref, t, k);
    const kernel_set *prep = act_kind(ks, t) == ACT_Q8 ? &kernels_ref : ks;
    unsigned char *xp = aligned_alloc(64, ((size_t)n * xs + 63) & ~(size_t)63);
    for (int32_t i = 0; i < n; i++) act_prepare(prep, t, x + i * k, xp + (size_t)i * xs, k);
    *ref_rows = xp;
    if (act_kind(ks, t) != act_kind(&kernels_ref, t)) {
        *ref_rows = aligned_alloc(64, ((size_t)n * rs + 63) & ~(size_t)63);
        for (int32_t i = 0; i < n; i++) act_prepare(&kernels_ref, t, x + i * k, *ref_rows + (size_t)i * rs, k);
        /* bfloat16-rounded rows: the reference computes on the same rounded values */
        if (act_kind(ks, t) == ACT_BF16)
            for (int32_t i = 0; i < n; i++)
                for (int64_t c = 0; c < k; c++)
                    ((float *)(*ref_rows + (size_t)i * rs))[c] = bf16_to_f32(((const uint16_t *)(xp + (size_t)i * xs))[c]);
    }
    return xp;
}

/* Sets whose Q8_0 and Q4_0 products are bitwise the reference's (kernels.h) */
static int exact_quant(const kernel_set *ks)
{
#if defined(__x86_64__)
    if (ks == &kernels_amx || ks == &kernels_avx512 || ks == &kernels_avx512_novbmi || ks == &kernels_avx512_bf16)
        return 1;
#endif
    return ks == &kernels_ref;
}

/* Does set ks round quantized type t its own way (kernels.h)? Q8_0 and Q4_0 in AVX2 and NEON;
 * Q4_1, Q5_0 and Q5_1 in the AVX-512 sets (AMX takes them from AVX-512); every other quant is bitwise
 * the reference everywhere. */
static int own_rounding(const kernel_set *ks, uint32_t t)
{
    if (ks == &kernels_ref) return 0;
    if (t == GGML_Q8_0 || t == GGML_Q4_0) return !exact_quant(ks);
#if defined(__x86_64__)
    if (t == GGML_Q4_1 || t == GGML_Q5_0 || t == GGML_Q5_1)
        return ks == &kernels_avx512 || ks == &kernels_avx512_novbmi || ks == &kernels_amx || ks == &kernels_avx512_bf16;
#endif
    return 0;
}

/* Does kernels.h's determinism contract promise set ks's matmul the
 * reference's bits for weights of type t? Every quantized type it does not
 * round its own way; the floating-point types are promised nothing. */
static int bits_promised(const kernel_set *ks, uint32_t t) { return act_is_quantized(t) && !own_rounding(ks, t); }

static void test_matmul(const kernel_set *ks, uint32_t t, int64_t rows, int64_t cols, int32_t n)
{
    tensor w;
    void *wd = make_weight(t, rows, cols, &w);
    float *x = malloc(sizeof(float) * (size_t)(n * cols));
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand();
    /* prepared activations: quantized by the reference (the quantizers are tested on their own), split
     * by the set where it reads bf16-split rows */
    unsigned char *xr = NULL, *xp = prepare_rows(ks, t, x, cols, n, &xr);
    const size_t xs = act_stride(ks, t, cols);
    size_t ny = (size_t)n * (size_t)rows;
    float *ref = malloc(sizeof(float) * ny), *y = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
    float *y2 = malloc(sizeof(float) * ny), *scr = malloc(sizeof(float) * MM_SCRATCH_FLOATS(cols));
    k_matmul_ref_range(&w, xr, act_stride(&kernels_ref, t, cols), ref, rows, n, 0, rows, 0, NULL);
    ks->matmul(&w, xp, xs, y, rows, n, 0, rows, 0, scr);
    double worst = 0;
    for (int32_t i = 0; i < n; i++)
        for (int64_t o = 0; o < rows; o++) {
            double scale = abs_dot(&w, x + i * cols, o) + 1e-30;
            /* rounding of a reordered float sum: a few ulp of the sum of |terms| */
            double e = fabs((double)y[i * rows + o] - ref[i * rows + o]) / scale;
            if (e > worst || e != e) worst = e != e ? INFINITY : e;
        }
    /* the same outputs one row at a time, from split output ranges, without scratch */
    for (int32_t i = 0; i < n; i++) {
        int64_t cut = rows > 2 ? (int64_t)(next_u32() % (uint32_t)rows) : 0;
        ks->matmul(&w, xp + (size_t)i * xs, xs, y1 + i * rows, rows, 1, 0, cut, 0, NULL);
        ks->matmul(&w, xp + (size_t)i * xs, xs, y1 + i * rows, rows, 1, cut, rows, 0, scr);
    }
    int64_t cut = (int64_t)(next_u32() % (uint32_t)(rows + 1));
    ks->matmul(&w, xp, xs, y2, rows, n, 0, cut, 0, NULL);
    ks->matmul(&w, xp, xs, y2, rows, n, cut, rows, 0, NULL);
    int same1 = !memcmp(y, y1, sizeof(float) * ny), same2 = !memcmp(y, y2, sizeof(float) * ny);
    /* acc: y + dot */
    for (size_t i = 0; i < ny; i++) y1[i] = 0.25f * (float)i;
    ks->matmul(&w, xp, xs, y1, rows, n, 0, rows, 1, scr);
    int acc_ok = 1;
    for (size_t i = 0; i < ny; i++) acc_ok &= y1[i] == 0.25f * (float)i + y[i];
    CHECK(worst < 1e-5 && same1 && same2 && acc_ok,
          "%s matmul %s %lldx%lld, %d rows: max err %.2g (of sum |w x|); rows one at a time %s, split ranges %s, acc %s",
          ks->name, tname(t), (long long)rows, (long long)cols, n, worst, same1 ? "bitwise" : "DIFFER",
          same2 ? "bitwise" : "DIFFER", acc_ok ? "ok" : "WRONG");
    if (bits_promised(ks, t))
        CHECK(!memcmp(y, ref, sizeof(float) * ny), "%s matmul %s %lldx%lld, %d rows: bitwise the reference kernels",
              ks->name, tname(t), (long long)rows, (long long)cols, n);
    free(wd); free(x); free(xp); if (xr != xp) free(xr); free(ref); free(y); free(y1); free(y2); free(scr);
}

/* Quantized weights that end where an unreadable page begins: a kernel that
 * reads a byte past the matrix faults. n rows of activations; outputs close
 * to the reference's, bitwise the same whatever the number of rows, and (for
 * `twin`, a set that must give the same bits) bitwise twin's. */
static void test_matmul_edge(const kernel_set *ks, const kernel_set *twin, uint32_t t, int64_t rows, int64_t cols,
                             int32_t n)
{
    const size_t rb = tensor_row_bytes(t, cols), bytes = rb * (size_t)rows, pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t span = (bytes + pg - 1) / pg * pg;
    unsigned char *map = mmap(NULL, span + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!REQUIRE(map != MAP_FAILED && mprotect(map + span, pg, PROT_NONE) == 0, "guard page for a %s matrix", tname(t)))
        return;
    tensor w;
    void *tmp = make_weight(t, rows, cols, &w);
    memcpy(map + span - bytes, tmp, bytes);
    free(tmp);
    w.data = map + span - bytes;
    float *x = malloc(sizeof(float) * (size_t)(n * cols));
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand();
    const size_t xs = act_stride(ks, t, cols), ny = (size_t)n * (size_t)rows;
    unsigned char *xr = NULL, *xp = prepare_rows(ks, t, x, cols, n, &xr);
    float *ref = malloc(sizeof(float) * ny), *y = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
    float *scr = malloc(sizeof(float) * MM_SCRATCH_FLOATS(cols));
    k_matmul_ref_range(&w, xr, act_stride(&kernels_ref, t, cols), ref, rows, n, 0, rows, 0, NULL);
    ks->matmul(&w, xp, xs, y, rows, n, 0, rows, 0, scr);
    double worst = 0;
    for (int32_t i = 0; i < n; i++)
        for (int64_t o = 0; o < rows; o++) {
            double e = fabs((double)y[i * rows + o] - ref[i * rows + o]) / (abs_dot(&w, x + i * cols, o) + 1e-30);
            if (e > worst || e != e) worst = e != e ? INFINITY : e;
        }
    for (int32_t i = 0; i < n; i++) ks->matmul(&w, xp + (size_t)i * xs, xs, y1 + i * rows, rows, 1, 0, rows, 0, scr);
    int same = !memcmp(y, y1, sizeof(float) * ny), twin_same = 1;
    if (twin) {
        twin->matmul(&w, xp, xs, y1, rows, n, 0, rows, 0, scr);
        twin_same = !memcmp(y, y1, sizeof(float) * ny);
        twin->matmul(&w, xp, xs, y1, rows, n, 0, rows, 0, NULL);
        twin_same &= !memcmp(y, y1, sizeof(float) * ny);
    }
    const int exact = !bits_promised(ks, t) || !memcmp(y, ref, sizeof(float) * ny);
    CHECK(worst < 1e-5 && same && twin_same && exact,
          "%s matmul %s %lldx%lld ending at a guard page, %d rows: max err %.2g; rows one at a time %s%s%s",
          ks->name, tname(t), (long long)rows, (long long)cols, n, worst, same ? "bitwise" : "DIFFER",
          twin ? (twin_same ? "; the set without VBMI bitwise the same" : "; the set without VBMI DIFFERS") : "",
          bits_promised(ks, t) ? (exact ? "; bitwise the reference" : "; NOT bitwise the reference") : "");
    munmap(map, span + pg);
    free(x); free(xp); if (xr != xp) free(xr); free(ref); free(y); free(y1); free(scr);
}

static void test_act_q8(const kernel_set *ks)
{
    enum { K = 32 * 9 };
    float x[K];
    for (int i = 0; i < K; i++) x[i] = frand() * (i < 64 ? 1.0f : 100.0f);
    /* block 2: amax 127 so d = 1 and x/d lands on exact halves (roundf ties go away from 0) */
    for (int j = 0; j < 32; j++) x[64 + j] = j == 0 ? 127.0f : (float)(j - 16) + 0.5f;
    /* block 3: all zero; block 4: one tiny value */
    for (int j = 0; j < 32; j++) { x[96 + j] = 0.0f; x[128 + j] = j == 5 ? -1e-30f : 0.0f; }
    size_t st = act_q8_stride(K);
    unsigned char *a = aligned_alloc(64, st), *b = aligned_alloc(64, st);
    memset(a, 0, st); memset(b, 0, st);
    kernels_ref.act_q8(x, a, K);
    ks->act_q8(x, b, K);
    CHECK(!memcmp(a, b, K + sizeof(float) * (K / 32)), "%s Q8_0 activation quantizer bitwise the reference (ties, zeros, tiny)", ks->name);
    free(a); free(b);
}

/* The set's bf16 splitter (where it has one) bitwise the reference: signs, zeros, values below
 * FLT_MIN, rounding ties, infinities, a length that is not a multiple of 32. */
static void test_act_bf16x3(const kernel_set *ks)
{
    if (!ks->act_bf16x3) return;
    enum { K = 83 };
    float x[K];
    for (int i = 0; i < K; i++) x[i] = frand() * (i < 40 ? 3.0f : 1e-30f);
    x[0] = 0.0f; x[1] = -0.0f; x[2] = 1e-39f; x[3] = -2e-40f; x[4] = INFINITY; x[5] = -INFINITY;
    x[6] = 1.0f + 1.0f / 256;            /* a bf16 tie: rounds to even */
    x[7] = 1.0f + 3.0f / 256;            /* the other way */
    x[8] = 3.4e38f; x[9] = 1.2e-38f;     /* near the top and the bottom of the range */
    const size_t st = act_bf16x3_stride(K);
    unsigned char *a = aligned_alloc(64, st), *b = aligned_alloc(64, st);
    memset(a, 0x55, st); memset(b, 0xAA, st);
    act_bf16x3_ref(x, a, K);
    ks->act_bf16x3(x, b, K);
    int same = !memcmp(a, b, 3 * sizeof(uint16_t) * (size_t)act_bf16x3_cols(K));
    /* hi + mid + lo is x to about 2^-24 of it (where the parts stay above FLT_MIN) */
    double worst = 0;
    for (int i = 10; i < K; i++) {
        if (fabsf(x[i]) < 1e-20f) continue;
        double s = 0;
        for (int p = 0; p < 3; p++) s += bf16_to_f32(act_bf16x3_part(a, K, p)[i]);
        double e = fabs(s - x[i]) / fabs(x[i]);
        if (e > worst) worst = e;
    }
    CHECK(same && worst < 1.2e-7, "%s bf16 split of %d floats %s the reference (zeros, below FLT_MIN, ties, "
          "infinities); hi + mid + lo within %.2g of x", ks->name, K, same ? "bitwise" : "DIFFERS from", worst);
    free(a); free(b);
}

/* The set's bfloat16 rounding (ACT_BF16, where it has one) bitwise the reference: the same cases. */
static void test_act_bf16(const kernel_set *ks)
{
    if (!ks->act_bf16) return;
    enum { K = 83 };
    float x[K];
    for (int i = 0; i < K; i++) x[i] = frand() * (i < 40 ? 3.0f : 1e-30f);
    x[0] = 0.0f; x[1] = -0.0f; x[2] = 1e-39f; x[3] = -2e-40f; x[4] = INFINITY; x[5] = -INFINITY;
    x[6] = 1.0f + 1.0f / 256; x[7] = 1.0f + 3.0f / 256; x[8] = 3.4e38f; x[9] = 1.2e-38f;
    const size_t st = act_bf16_stride(K);
    unsigned char *a = aligned_alloc(64, st), *b = aligned_alloc(64, st);
    memset(a, 0x55, st); memset(b, 0xAA, st);
    act_bf16_ref(x, a, K);
    ks->act_bf16(x, b, K);
    int same = !memcmp(a, b, sizeof(uint16_t) * (size_t)act_bf16_cols(K));
    double worst = 0;   /* round to nearest: within 2^-8 of x */
    for (int i = 10; i < K; i++) {
        if (fabsf(x[i]) < 1e-20f) continue;
        double e = fabs(bf16_to_f32(((const uint16_t *)a)[i]) - x[i]) / fabs(x[i]);
        if (e > worst) worst = e;
    }
    CHECK(same && worst <= 1.0 / 256, "%s bf16 rounding of %d floats %s the reference (zeros, below FLT_MIN, ties, "
          "infinities, zero padding); within %.2g of x", ks->name, K, same ? "bitwise" : "DIFFERS from", worst);
    free(a); free(b);
}

/* An attention case: nv + extra random K and V rows of hd values in kvt,
 * group query heads, and nv cells visited out of order (cell t is row
 * (t * mul + add) mod (nv + extra), as in a ragged cache). */
typedef struct {
    size_t rb;
    unsigned char *k, *v;
    float *q;
    int32_t *cells;
} attend_case;

static attend_case attend_case_make(uint32_t kvt, int32_t hd, int32_t group, int32_t nv, int32_t extra, int32_t mul,
                                    int32_t add)
{
    const int32_t ncell = nv + extra;
    attend_case c = { tensor_row_bytes(kvt, hd), NULL, NULL, NULL, NULL };
    c.k = malloc(c.rb * (size_t)ncell);
    c.v = malloc(c.rb * (size_t)ncell);
    c.q = malloc(sizeof(float) * (size_t)(group * hd));
    c.cells = malloc(sizeof(int32_t) * (size_t)(nv ? nv : 1));
    float *tmp = malloc(sizeof(float) * (size_t)hd);
    for (int32_t r = 0; r < ncell; r++) {
        for (int32_t i = 0; i < hd; i++) tmp[i] = 2 * frand();
        quant_row(kvt, tmp, c.k + (size_t)r * c.rb, hd);
        for (int32_t i = 0; i < hd; i++) tmp[i] = frand();
        quant_row(kvt, tmp, c.v + (size_t)r * c.rb, hd);
    }
    for (int32_t i = 0; i < group * hd; i++) c.q[i] = frand();
    for (int32_t t = 0; t < nv; t++) c.cells[t] = (t * mul + add) % ncell;
    free(tmp);
    return c;
}

static void attend_case_free(attend_case *c)
{
    free(c->k); free(c->v); free(c->q); free(c->cells);
}

static void test_attend(const kernel_set *ks, uint32_t kvt, int32_t hd, int32_t group, int32_t nv)
{
    attend_case c = attend_case_make(kvt, hd, group, nv, 7, 5, 3);
    float *p1 = malloc(sizeof(float) * (size_t)(group * nv + 1)), *p2 = malloc(sizeof(float) * (size_t)(group * nv + 1));
    float *o1 = malloc(sizeof(float) * (size_t)(group * hd)), *o2 = malloc(sizeof(float) * (size_t)(group * hd));
    const float scale = 1.0f / sqrtf((float)hd);
    k_attend_ref(c.q, group, hd, c.k, c.v, c.rb, kvt, c.cells, nv, scale, p1, o1);
    ks->attend(c.q, group, hd, c.k, c.v, c.rb, kvt, c.cells, nv, scale, p2, o2);
    double e = check_maxdiff(o1, o2, group * hd);
    CHECK(e < 2e-6, "%s attention %s cache, head_dim %d, group %d, %d cells: max diff %.2g", ks->name, tname(kvt), hd, group, nv, e);
    attend_case_free(&c);
    free(p1); free(p2); free(o1); free(o2);
}

/* A group's attention is its heads' attention, bit for bit, in every set:
 * however a set goes through the heads together (the AVX-512 set's parts of
 * 4 or 2 heads, over cells in tiles once the group is larger), each head's
 * scores, softmax and sums are its own. */
static void test_attend_heads(const kernel_set *ks, uint32_t kvt, int32_t hd, int32_t group, int32_t nv)
{
    attend_case c = attend_case_make(kvt, hd, group, nv, 3, 7, 1);
    float *p = malloc(sizeof(float) * (size_t)(group * nv));
    float *o1 = malloc(sizeof(float) * (size_t)(group * hd)), *o2 = malloc(sizeof(float) * (size_t)(group * hd));
    const float scale = 1.0f / sqrtf((float)hd);
    ks->attend(c.q, group, hd, c.k, c.v, c.rb, kvt, c.cells, nv, scale, p, o1);
    for (int32_t g = 0; g < group; g++)
        ks->attend(c.q + (int64_t)g * hd, 1, hd, c.k, c.v, c.rb, kvt, c.cells, nv, scale, p, o2 + (int64_t)g * hd);
    CHECK(memcmp(o1, o2, sizeof(float) * (size_t)(group * hd)) == 0,
          "%s attention %s cache, head_dim %d, group of %d over %d cells: bitwise its heads one by one", ks->name,
          tname(kvt), hd, group, nv);
    attend_case_free(&c);
    free(p); free(o1); free(o2);
}

static void test_norm_swiglu(const kernel_set *ks, int32_t n)
{
    float *x = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    for (int32_t i = 0; i < n; i++) { x[i] = 3 * frand(); w[i] = 1 + frand(); }
    k_rms_norm(a, x, w, n, 1e-5f);
    ks->rms_norm(b, x, w, n, 1e-5f);
    double e = check_maxdiff(a, b, n);
    CHECK(e <= 1e-6, "%s RMSNorm of %d: max diff %.2g", ks->name, n, e);
    /* SwiGLU: a wide range of gate values, +-0, and saturating ones */
    float *g1 = malloc(sizeof(float) * (size_t)n), *g2 = malloc(sizeof(float) * (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        g1[i] = frand() * (i % 3 == 0 ? 20.0f : 4.0f);
        if (i == 1) g1[i] = -0.0f;
        if (i == 2) g1[i] = 100.0f;
        if (i == 3) g1[i] = -100.0f;
        g2[i] = g1[i];
    }
    for (int32_t i = 0; i < n; i++) w[i] = frand();
    ks->swiglu(g2, w, n);
    for (int32_t i = 0; i < n; i++) g1[i] = k_silu(g1[i]) * w[i];
    double rel = 0;
    for (int32_t i = 0; i < n; i++) {
        double d = fabs((double)g1[i] - g2[i]) / (fabs((double)g1[i]) + 1e-30);
        if (g1[i] == g2[i]) d = 0;
        if (d > rel || d != d) rel = d != d ? INFINITY : d;
    }
    CHECK(rel < 6e-7, "%s SwiGLU of %d: max relative diff %.2g", ks->name, n, rel);   /* a few ulp */
    free(x); free(w); free(a); free(b); free(g1); free(g2);
}

/* One activation row (decode) against k-quant matrices of random bytes (every code, scale and min
 * pattern; d and dmin kept finite): bitwise the reference over output ranges that start and end
 * anywhere in the AVX-512 set's groups of rows, with and without acc. */
static void test_kq_vec_ranges(const kernel_set *ks)
{
    static const uint32_t types[] = { GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_Q2_K, GGML_Q3_K };
    static const int64_t ranges[][2] = { { 0, 23 }, { 1, 23 }, { 3, 20 }, { 5, 9 }, { 2, 3 }, { 7, 15 }, { 0, 8 } };
    const int64_t rows = 23, cols = 768;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const uint32_t t = types[ti];
        const size_t rb = tensor_row_bytes(t, cols), bs = tensor_row_bytes(t, QK_K);
        const size_t dof = t == GGML_Q6_K ? 208 : t == GGML_Q3_K ? 108 : t == GGML_Q2_K ? 80 : 0;
        const int mins = t == GGML_Q4_K || t == GGML_Q5_K || t == GGML_Q2_K;
        unsigned char *wd = malloc(rb * (size_t)rows);
        for (size_t i = 0; i < rb * (size_t)rows; i++) wd[i] = (unsigned char)next_u32();
        for (size_t b = 0; b < rb * (size_t)rows / bs; b++) {   /* d, dmin: 2^-k, k in 6..13, either sign */
            for (int m = 0; m <= mins; m++) {
                const uint16_t h = (uint16_t)((next_u32() & 0x8000u) | (uint32_t)(2 + next_u32() % 8) << 10);
                memcpy(wd + b * bs + dof + 2 * (size_t)m, &h, 2);
            }
        }
        const tensor w = { wd, t, rows, cols };
        float *x = malloc(sizeof(float) * (size_t)cols);
        for (int64_t c = 0; c < cols; c++) x[c] = frand() * (c % 7 == 0 ? 8.0f : 1.0f);
        unsigned char *xr = NULL, *xp = prepare_rows(ks, t, x, cols, 1, &xr);
        float ref[23], y[23], ya[23];
        k_matmul_ref_range(&w, xr, act_stride(&kernels_ref, t, cols), ref, rows, 1, 0, rows, 0, NULL);
        int ok = 1;
        for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
            const int64_t o0 = ranges[r][0], o1 = ranges[r][1];
            for (int64_t o = 0; o < rows; o++) y[o] = ya[o] = 0.5f * (float)o - 3.0f;
            ks->matmul(&w, xp, 0, y, rows, 1, o0, o1, 0, NULL);
            ks->matmul(&w, xp, 0, ya, rows, 1, o0, o1, 1, NULL);
            for (int64_t o = 0; o < rows; o++) {
                const float base = 0.5f * (float)o - 3.0f, in = o >= o0 && o < o1;
                ok &= !memcmp(&y[o], in ? &ref[o] : &base, sizeof(float));
                const float want = base + ref[o];
                ok &= !memcmp(&ya[o], in ? &want : &base, sizeof(float));
            }
        }
        CHECK(ok, "%s matmul %s %lldx%lld of random bytes, 1 row, output ranges within and across row groups, "
              "acc 0 and 1: bitwise the reference", ks->name, tname(t), (long long)rows, (long long)cols);
        free(wd); free(x); free(xp); if (xr != xp) free(xr);
    }
}

static void test_set(const kernel_set *ks)
{
    SCENARIO("kernel set %s against the reference", ks->name);
    static const uint32_t ftypes[] = { GGML_F32, GGML_F16, GGML_BF16 };
    static const int64_t fcols[] = { 1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 576 };
    static const int64_t frows[] = { 1, 2, 3, 5, 8, 9, 13, 17, 40 };
    static const int32_t ns[] = { 1, 2, 3, 4, 5, 7, 9, 70 };
    for (size_t t = 0; t < 3; t++)
        for (size_t c = 0; c < sizeof fcols / sizeof *fcols; c++)
            test_matmul(ks, ftypes[t], frows[(c + t) % 9], fcols[c], ns[(c * 3 + t) % 8]);
    /* rows long enough for the AVX-512 set's K-blocked GEMM (more than 768 columns, in blocks of about 512,
     * with and without a partial last 16), with and without scratch, and over more rows than one block of
     * activation rows */
    static const int64_t kcols[] = { 769, 1000, 1536, 1541 }, krows[] = { 7, 13, 50 };
    static const int32_t kns[] = { 3, 5, 70, 130 };
    for (size_t t = 0; t < 3; t++)
        for (size_t c = 0; c < 4; c++)
            test_matmul(ks, ftypes[t], krows[(c + t) % 3], kcols[c], kns[(c + t) % 4]);
    /* long BF16 rows: the AMX set's GEMM packs two strips of them in the scratch */
    test_matmul(ks, GGML_BF16, 33, 4100, 40);
    /* GEMM shapes around tile blocks (16 and 32 weight rows x 16 and 32 activation rows, the AMX
     * set's), with whole and partial last tiles on both sides, for every stored type */
    static const uint32_t atypes[] = { GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q4_0 };
    static const struct { int64_t rows; int32_t n; } gshape[] = { { 17, 17 }, { 31, 33 }, { 32, 32 }, { 33, 31 },
                                                               { 48, 70 }, { 50, 5 }, { 16, 48 }, { 40, 130 } };
    for (size_t t = 0; t < 5; t++)
        for (size_t g = 0; g < sizeof gshape / sizeof *gshape; g++)
            test_matmul(ks, atypes[t], gshape[g].rows, g % 2 ? 96 : 576, gshape[g].n);
    static const uint32_t qtypes[] = { GGML_Q8_0, GGML_Q4_0 };
    static const int64_t qcols[] = { 32, 64, 96, 576 };
    for (size_t t = 0; t < 2; t++)
        for (size_t c = 0; c < 4; c++)
            for (size_t r = 0; r < 3; r++)
                test_matmul(ks, qtypes[t], frows[(c + 3 * r + t) % 9], qcols[c], ns[(c + 2 * r + t) % 8]);
    /* block counts around the pair (2 blocks) and scale-group (4 or 8 blocks) loops; up to 8 activation
     * rows stream the weights (in passes of 4 in the AVX-512 sets), more go through GEMM tiles; row counts
     * with and without a 4- or 16-row tail, over one and more 16-row strips */
    const kernel_set *twin = NULL;
#if defined(__x86_64__)
    if (ks == &kernels_avx512) twin = &kernels_avx512_novbmi;   /* picked where the CPU has VBMI + GFNI */
#endif
    static const int64_t ecols[] = { 32, 64, 96, 128, 160, 224, 256, 288, 320, 352, 512, 544, 576, 608 };
    static const int64_t erows[] = { 1, 3, 4, 5, 7, 8, 13, 16, 17, 33 };
    static const int32_t ens[] = { 1, 2, 3, 4, 5, 6, 9, 12 };
    for (size_t t = 0; t < 2; t++)
        for (size_t c = 0; c < sizeof ecols / sizeof *ecols; c++)
            test_matmul_edge(ks, twin, qtypes[t], erows[(c + t) % 10], ecols[c], ens[(c + 3 * t) % 8]);
    /* float weights ending at a guard page, rows of whole and partial 16s and 32s (the AVX-512 sets'
     * vectors; the bf16 set's tail loads are masked) */
    static const int64_t fecols[] = { 16, 48, 64, 100, 576, 600 };
    for (size_t t = 0; t < 3; t++)
        for (size_t c = 0; c < sizeof fecols / sizeof *fecols; c++)
            test_matmul_edge(ks, NULL, ftypes[t], erows[(c + t) % 10], fecols[c], ens[(c + 5 * t) % 8]);
    /* the other quants: every set falls back to the reference kernels (bitwise them, test_matmul) */
    static const uint32_t ktypes[] = { GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_Q2_K, GGML_Q3_K, GGML_Q8_K,
                                       GGML_Q4_1, GGML_Q5_0, GGML_Q5_1 };
    for (size_t t = 0; t < sizeof ktypes / sizeof *ktypes; t++) {
        const int legacy = ktypes[t] == GGML_Q4_1 || ktypes[t] == GGML_Q5_0 || ktypes[t] == GGML_Q5_1;
        test_matmul(ks, ktypes[t], 13, legacy ? 96 : 512, 5);
        test_matmul(ks, ktypes[t], 40, legacy ? 608 : 768, 33);
    }
    if (bits_promised(ks, GGML_Q4_K)) test_kq_vec_ranges(ks);
    /* and ending at a guard page: 1 to 9 super-blocks (or 1 to 19 blocks) per row, rows and
     * activation rows with and without tails, as the Q8_0/Q4_0 edges above */
    static const int64_t kecols[] = { 256, 512, 768, 1024, 1280, 2304 }, lecols[] = { 32, 64, 96, 160, 288, 608 };
    for (size_t t = 0; t < sizeof ktypes / sizeof *ktypes; t++) {
        const int legacy = ktypes[t] == GGML_Q4_1 || ktypes[t] == GGML_Q5_0 || ktypes[t] == GGML_Q5_1;
        for (size_t c = 0; c < 6; c++)
            test_matmul_edge(ks, NULL, ktypes[t], erows[(c + t) % 10], legacy ? lecols[c] : kecols[c], ens[(c + 2 * t) % 8]);
    }
    test_act_q8(ks);
    test_act_bf16x3(ks);
    test_act_bf16(ks);
    static const uint32_t kvt[] = { GGML_F32, GGML_F16, GGML_Q8_0 };
    for (size_t t = 0; t < 3; t++) {
        test_attend(ks, kvt[t], 64, 3, 37);
        test_attend(ks, kvt[t], 128, 1, 5);
        test_attend(ks, kvt[t], 96, 2, 1);
        /* the grouped AVX-512 shapes (head_dim 64 with 1-4 heads, split above 4; 128 with 1-2),
         * with cell counts around their 4-at-a-time score loop */
        test_attend(ks, kvt[t], 64, 4, 130);
        test_attend(ks, kvt[t], 64, 5, 7);
        test_attend(ks, kvt[t], 64, 1, 2);
        test_attend(ks, kvt[t], 64, 2, 4);
        test_attend(ks, kvt[t], 128, 2, 66);
        test_attend(ks, kvt[t], 128, 3, 9);
        /* groups larger than a part (TinyLlama's 8 heads of 64, Llama 3's 4 of 128): cell tiles */
        test_attend(ks, kvt[t], 64, 8, 300);
        test_attend(ks, kvt[t], 128, 4, 70);
        test_attend_heads(ks, kvt[t], 64, 8, 301);
        test_attend_heads(ks, kvt[t], 64, 6, 130);
        test_attend_heads(ks, kvt[t], 128, 4, 67);
        test_attend_heads(ks, kvt[t], 64, 3, 9);
    }
    test_attend(ks, GGML_F32, 16, 2, 9);
    test_attend(ks, GGML_F16, 8, 4, 20);
    test_attend(ks, GGML_F32, 6, 1, 3);
    test_attend(ks, GGML_F32, 64, 1, 0);
    test_norm_swiglu(ks, 576);
    test_norm_swiglu(ks, 13);
}

/* ---- the other legacy quants and the k-quants: reference kernels ---- */

static const uint32_t kq_types[] = { GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_Q2_K, GGML_Q3_K, GGML_Q8_K,
                                     GGML_Q4_1, GGML_Q5_0, GGML_Q5_1 };
enum { N_KQ = sizeof kq_types / sizeof *kq_types };

/* The value an activation row holds at column c, from its integer quants and scales. */
static double act_value(uint32_t t, const void *row, int64_t k, int64_t c)
{
    const int8_t q = act_q8_qs(row)[c];
    if (act_kind(&kernels_ref, t) == ACT_Q8K) return (double)act_q8k_d(row, k)[c / QK_K] * q;
    return (double)act_q8_d(row, k)[c / QK] * q;
}

/* The reference kernel of type t on a rows x cols matrix and n rows: against the float64 dot of the
 * dequantized weights and the quantized activations' values (only the float scaling rounds: within
 * 1e-6 of sum |w x|; Q4_1 / Q5_1: a block's min times the F16 block sum of Q8_1, as ggml), against the dot with the float activations (within what quantizing them to 8
 * bits moves: 1.5% of sum |w| |x|), and, for Q8_K activations, the block sums they carry exact. */
static void test_kq_matmul(uint32_t t, int64_t rows, int64_t cols, int32_t n)
{
    tensor w;
    void *wd = make_weight(t, rows, cols, &w);
    float *x = malloc(sizeof(float) * (size_t)(n * cols)), *wrow = malloc(sizeof(float) * (size_t)cols);
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand() * (i % 13 == 0 ? 4.0f : 1.0f);
    unsigned char *xr = NULL, *xp = prepare_rows(&kernels_ref, t, x, cols, n, &xr);
    const size_t xs = act_stride(&kernels_ref, t, cols);
    float *y = malloc(sizeof(float) * (size_t)(n * rows));
    k_matmul_ref_range(&w, xp, xs, y, rows, n, 0, rows, 0, NULL);
    double worst_q = 0, worst_f = 0;
    int sums_ok = 1;
    for (int64_t o = 0; o < rows; o++) {
        dequant_row(t, (const char *)w.data + (size_t)o * tensor_row_bytes(t, cols), wrow, cols);
        for (int32_t i = 0; i < n; i++) {
            const void *xi = xp + (size_t)i * xs;
            double dq = 0, aq = 0, df = 0, af = 0;
            for (int64_t c = 0; c < cols; c++) {
                const double v = act_value(t, xi, cols, c);
                dq += wrow[c] * v; aq += fabs(wrow[c] * v);
                df += (double)wrow[c] * x[i * cols + c]; af += fabs((double)wrow[c]) * fabs((double)x[i * cols + c]);
            }
            if (act_kind(&kernels_ref, t) == ACT_Q8_1)   /* m_w times the block sum s_x the row carries */
                for (int64_t b = 0; b < cols / QK; b++) {
                    uint16_t mh;
                    memcpy(&mh, (const char *)w.data + (size_t)o * tensor_row_bytes(t, cols) +
                           (size_t)tensor_row_bytes(t, (b + 1) * QK) - tensor_row_bytes(t, QK) + 2, 2);
                    double bsum = 0;
                    for (int64_t c = b * QK; c < (b + 1) * QK; c++) bsum += act_value(t, xi, cols, c);
                    const double m = f16_to_f32(mh), sx = act_q8_1_s(xi, cols)[b];
                    dq += m * (sx - bsum); aq += fabs(m * sx);
                }
            const double yv = y[i * rows + o], eq = fabs(yv - dq) / (aq + 1e-30), ef = fabs(yv - df) / (af + 1e-30);
            if (!(eq <= worst_q)) worst_q = eq != eq ? INFINITY : eq;
            if (!(ef <= worst_f)) worst_f = ef != ef ? INFINITY : ef;
        }
    }
    if (act_kind(&kernels_ref, t) == ACT_Q8K)
        for (int32_t i = 0; i < n; i++)
            for (int64_t g = 0; g < cols / 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++) s += act_q8_qs(xp + (size_t)i * xs)[g * 16 + j];
                sums_ok &= act_q8k_bsums(xp + (size_t)i * xs, cols)[g] == s;
            }
    CHECK(worst_q < 1e-6 && worst_f < 0.015 && sums_ok, "ref matmul %s %lldx%lld, %d rows: within %.2g of the float64 "
          "dot with the quantized activations, %.2g (of sum |w| |x|) of the float ones%s", tname(t), (long long)rows,
          (long long)cols, n, worst_q, worst_f, sums_ok ? "" : "; Q8_K block sums WRONG");
    free(wd); free(x); free(wrow); free(xp); if (xr != xp) free(xr); free(y);
}

/* The products on a context's threads (exec_matmul): bitwise the same at 1, 2 and 3 threads, in one
 * batch or row by row, with the reference set and with the best one (bitwise the reference but where it
 * rounds its own way: own_rounding); and three matrices of three activation kinds in one pass (Q5_0: Q8_0 rows,
 * Q4_1: Q8_1 rows, Q4_K: Q8_K rows) give what each gives alone. */
static void test_kq_threads(void)
{
    enum { N = 9 };
    for (int ti = 0; ti < N_KQ; ti++) {
        const uint32_t t = kq_types[ti];
        const int64_t rows = 257, cols = tensor_block_size(t) == QK ? 608 : 2304;
        tensor w;
        void *wd = make_weight(t, rows, cols, &w);
        float *x = malloc(sizeof(float) * (size_t)(N * cols)), *y[4], *y1 = malloc(sizeof(float) * N * rows);
        for (int64_t i = 0; i < N * cols; i++) x[i] = frand();
        int same = 1;
        for (int v = 0; v < 4; v++) {
            exec_ctx e;
            y[v] = malloc(sizeof(float) * N * rows);
            if (exec_init(&e, v == 3 ? 2 : v + 1, N, cols, 1, 16) != MOR_OK) { same = 0; continue; }
            e.k = v == 3 ? kernels_best() : &kernels_ref;
            exec_matmul(&e, &w, x, cols, y[v], rows, N, 0);
            for (int32_t i = 0; i < N; i++) exec_matmul(&e, &w, x + i * cols, cols, y1 + i * rows, rows, 1, 0);
            /* the best set: bitwise the reference where it runs the reference's integers and float steps */
            same &= !memcmp(y[v], y1, sizeof(float) * N * rows) &&
                    (own_rounding(e.k, t) || !memcmp(y[v], y[0], sizeof(float) * N * rows));
            exec_free(&e);
        }
        CHECK(same, "%s %lldx%lld, %d rows on 1, 2 and 3 threads (ref set) and 2 (%s): bitwise the same, in one "
              "batch and row by row", tname(t), (long long)rows, (long long)cols, N, kernels_best()->name);
        for (int v = 0; v < 4; v++) free(y[v]);
        free(wd); free(x); free(y1);
    }
    const uint32_t mt[3] = { GGML_Q5_0, GGML_Q4_1, GGML_Q4_K };
    tensor w[3];
    void *wd[3];
    float *x = malloc(sizeof(float) * N * 768), *ym[3], *ys = malloc(sizeof(float) * N * 64);
    for (int i = 0; i < N * 768; i++) x[i] = frand();
    for (int j = 0; j < 3; j++) { wd[j] = make_weight(mt[j], 64, 768, &w[j]); ym[j] = malloc(sizeof(float) * N * 64); }
    exec_ctx e;
    int same = exec_init(&e, 2, N, 768, 1, 16) == MOR_OK;
    if (same) {
        const tensor *wp[3] = { &w[0], &w[1], &w[2] };
        exec_matmul_multi(&e, 3, wp, x, 768, ym, N);
        for (int j = 0; j < 3; j++) {
            exec_matmul(&e, &w[j], x, 768, ys, 64, N, 0);
            same &= !memcmp(ys, ym[j], sizeof(float) * N * 64);
        }
        exec_free(&e);
    }
    CHECK(same, "Q5_0, Q4_1 and Q4_K matrices in one pass (three kinds of prepared activations): each as alone");
    for (int j = 0; j < 3; j++) { free(wd[j]); free(ym[j]); }
    free(x); free(ys);
}

static void test_kquants(void)
{
    static const int64_t kcols[] = { 256, 512, 768, 2304 }, lcols[] = { 32, 96, 576, 608 };
    static const int64_t rows[] = { 1, 3, 7, 13 };
    static const int32_t ns[] = { 1, 2, 5, 3 };
    for (int ti = 0; ti < N_KQ; ti++)
        for (int s = 0; s < 4; s++) {
            const int64_t cols = tensor_block_size(kq_types[ti]) == QK ? lcols[s] : kcols[s];
            test_kq_matmul(kq_types[ti], rows[(s + ti) % 4], cols, ns[(s + 2 * ti) % 4]);
        }
    test_kq_threads();
}

/* Two sequences: a 24-token prefill (interleaved), then 3 one-token steps
 * each; every row's logits and the depths are recorded. */
enum { PRE = 24, STEPS = 3, ROWS = 2 * (PRE + STEPS) };
static int run_decode(mor_model *m, const kernel_set *ks, int32_t nt, int32_t mode, float *logits, int32_t *depth)
{
    const int32_t V = mor_model_n_vocab(m);
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 160; cp.n_batch = 64; cp.n_seq_max = 2; cp.n_threads = nt;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    int ok = mor_context_create(m, &cp, &c) == MOR_OK && mor_batch_create(64, &b) == MOR_OK;
    if (ok) c->ls.exec.k = ks;
    if (ok && mode) ok = mor_router_set_mode(mor_context_router(c), mode, 2) == MOR_OK;
    int row = 0;
    for (int step = 0; ok && step <= STEPS; step++) {
        mor_batch_clear(b);
        int32_t p0 = step ? PRE + step - 1 : 0, p1 = step ? p0 + 1 : PRE;
        for (int32_t p = p0; p < p1; p++)
            for (int32_t sq = 0; sq < 2; sq++) mor_batch_add(b, (mor_token)((p * 31 + sq * 977 + 5) % V), p, sq, 1);
        ok = mor_decode(c, b) == MOR_OK;
        int32_t n = mor_batch_size(b);
        for (int32_t i = 0; ok && i < n; i++, row++)
            memcpy(logits + (size_t)row * V, mor_get_logits(c, i), sizeof(float) * (size_t)V);
        if (ok) mor_router_get_depths(mor_context_router(c), depth + row - n, n);
    }
    mor_batch_free(b);
    mor_context_free(c);
    return ok;
}


/* The reference set with one set's matmul (and its Q8_0 activation rows,
 * bitwise the reference's: test_act_q8) for the weight types whose bits the
 * contract promises: the contract covers the matmuls, not the set's RMSNorm
 * and attention (within 1e-6 of the reference, test_attend and
 * test_norm_swiglu), so only this isolates what it promises through a whole
 * model. Single-threaded (the counter is a plain int). */
static const kernel_set *hybrid_base;
static long hybrid_calls;
static void hybrid_matmul(const tensor *w, const void *x, size_t xs, float *y, int64_t ldy, int32_t n, int64_t o0,
                          int64_t o1, int acc, float *scratch)
{
    if (bits_promised(hybrid_base, w->type)) {
        hybrid_calls++;
        hybrid_base->matmul(w, x, xs, y, ldy, n, o0, o1, acc, scratch);
    } else {
        kernels_ref.matmul(w, x, xs, y, ldy, n, o0, o1, acc, scratch);
    }
}

static void test_decode_threads(const char *dir)
{
    /* the layers' type, and the embedding's (tied to the output): k-quant mixes as llama.cpp makes them */
    static const uint32_t types[] = { GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q4_0, GGML_Q4_K, GGML_Q5_1 };
    static const uint32_t etypes[] = { GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q4_0, GGML_Q6_K, GGML_Q5_0 };
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        /* d 256, 6 layers (1 + 2 x 2 + 1), heads 4/2 of 64, ffn 768, vocab 1024 */
        synth_spec sp = { 256, 6, 4, 2, 64, 768, 1024, 512, 2, types[ti], etypes[ti], 3, 0 };
        char path[700];
        /* the pid: other test runs may share the build tree and would rewrite a mapped file */
        snprintf(path, sizeof path, "%s/kernels-synth-%s-%ld.gguf", dir, tname(types[ti]), (long)getpid());
        mor_model *m = NULL;
        SCENARIO("whole-model decode, %s weights", tname(types[ti]));
        if (!REQUIRE(synth_write(&sp, path) == 0 && mor_model_load_file(path, NULL, &m) == MOR_OK,
                     "random-weight MoR model in %s (embedding and output %s)", tname(types[ti]), tname(etypes[ti])))
            continue;
        const size_t V = 1024, n = (size_t)ROWS * V;
        float *ref = malloc(sizeof(float) * n), *l1 = malloc(sizeof(float) * n), *l2 = malloc(sizeof(float) * n);
        int32_t dref[ROWS], d1[ROWS], d2[ROWS];
        /* the reference set, forced full depth: the yardstick of the others */
        int ok_ref = run_decode(m, &kernels_ref, 1, MOR_ROUTE_FORCED, ref, dref);
        /* every set this CPU runs, and the opt-in one of MOR_CTX_FAST_BF16 */
        const kernel_set *sets[ISA_COUNT + 1];
        int ns = 0;
        for (int isa = 0; isa < ISA_COUNT; isa++)
            if (kernels_get(isa)) sets[ns++] = kernels_get(isa);
        if (kernels_fast_bf16(kernels_best()) != kernels_best()) sets[ns++] = kernels_fast_bf16(kernels_best());
        for (int si = 0; si < ns; si++) {
            const kernel_set *ks = sets[si];
            int ok = run_decode(m, ks, 1, 0, l1, d1), same = ok;
            for (int32_t nt = 2; nt <= 3 && same; nt++)
                same = run_decode(m, ks, nt, 0, l2, d2) && !memcmp(l1, l2, sizeof(float) * n) && !memcmp(d1, d2, sizeof d1);
            CHECK(same, "%s %s: decode (2 sequences, prefill + steps, TOPK) with n_threads 1, 2, 3: bitwise the same "
                  "logits and depths", ks->name, tname(types[ti]));
            double e = INFINITY, scale = 0;
            const int got = ok_ref && run_decode(m, ks, 2, MOR_ROUTE_FORCED, l1, d1);
            if (ks == &kernels_ref) {   /* itself on 2 threads: its own bits */
                CHECK(got && !memcmp(ref, l1, sizeof(float) * n), "ref %s: logits (forced full depth) on 2 threads "
                      "bitwise those on 1", tname(types[ti]));
                continue;
            }
            if (got) e = check_maxdiff(ref, l1, (long)n);
            for (size_t i = 0; i < n; i++) if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
            /* A whole set is promised no bits: its RMSNorm and attention round
             * their own way. Quantized weights: the activations are re-quantized
             * at every matmul, so a rounding difference upstream can move a value
             * to the next Q8_0 step (1/127 of its block) */
            double tol = act_is_quantized(types[ti]) ? 0.02 * scale : 1e-4;
            /* bfloat16-rounded activations (kernels.h): 2^-8 of each, through every layer */
            if (act_kind(ks, types[ti]) == ACT_BF16) tol = 0.02 * scale;
            CHECK(e < tol, "%s %s: logits (forced full depth) within %.2g of the reference kernels' (max diff %.2g; "
                  "largest logit %.2g)", ks->name, tname(types[ti]), tol, e, scale);
            /* What the contract does promise: this set's matmuls for the model's
             * types where it promises bits, in the reference set, give the
             * reference's logits and depths bitwise. */
            if (!bits_promised(ks, types[ti]) && !bits_promised(ks, etypes[ti])) continue;
            kernel_set hybrid = kernels_ref;
            hybrid.name = "hybrid";
            hybrid.act_q8 = ks->act_q8;
            hybrid.matmul = hybrid_matmul;
            hybrid_base = ks;
            hybrid_calls = 0;
            const int hok = ok_ref && run_decode(m, &hybrid, 1, MOR_ROUTE_FORCED, l1, d1);
            CHECK(hok && hybrid_calls > 0 && !memcmp(ref, l1, sizeof(float) * n) && !memcmp(dref, d1, sizeof d1),
                  "%s matmuls of %s/%s weights (%ld calls) in the reference set: bitwise the reference's logits and "
                  "depths (forced full depth; max diff %.2g)", ks->name, tname(types[ti]), tname(etypes[ti]),
                  hybrid_calls, hok ? check_maxdiff(ref, l1, (long)n) : INFINITY);
        }
        if (types[ti] == GGML_BF16) {
            /* the flag picks the opt-in set where there is one (else the default), also after a reset */
            mor_context_params cp;
            MOR_CONTEXT_PARAMS_INIT(&cp);
            cp.flags = MOR_CTX_FAST_BF16;
            mor_context *c = NULL;
            const kernel_set *want = kernels_fast_bf16(kernels_best());
            if (REQUIRE(mor_context_create(m, &cp, &c) == MOR_OK, "context with MOR_CTX_FAST_BF16")) {
                int picked = c->ls.exec.k == want;
                hook_context_kernels(c, &kernels_ref);
                hook_context_kernels(c, NULL);
                CHECK(picked && c->ls.exec.k == want, "MOR_CTX_FAST_BF16 runs kernel set %s (%s), also after a "
                      "reset to the default", want->name, want == kernels_best() ? "no bfloat16 set here: the default"
                      : "BF16 weights on bfloat16-rounded activations");
                mor_context_free(c);
            }
        }
        free(ref); free(l1); free(l2);
        mor_model_free(m);
        remove(path);
    }
}

/* CPU detection: the feature bits hang together, and where AMX is reported, tile instructions run
 * (the process was granted tile data: a tile stored from tilezero reads back as zeros). */
static void test_cpu(void)
{
    const uint32_t f = cpu_features();
    static const struct { uint32_t bit; const char *name; } names[] = {
        { CPU_AVX2, "avx2" }, { CPU_AVX512, "avx512" }, { CPU_AVX512VNNI, "vnni" },
        { CPU_AVX512BF16, "avx512-bf16" }, { CPU_AVX512VBMI, "vbmi" }, { CPU_GFNI, "gfni" },
        { CPU_AVXVNNI, "avx-vnni" }, { CPU_AMX_TILE, "amx-tile" }, { CPU_AMX_INT8, "amx-int8" },
        { CPU_AMX_BF16, "amx-bf16" }, { CPU_NEON, "neon" }, { CPU_DOTPROD, "dotprod" },
    };
    printf("# cpu features:");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) if (f & names[i].bit) printf(" %s", names[i].name);
    printf("\n");
    const uint32_t amx = CPU_AMX_TILE | CPU_AMX_INT8 | CPU_AMX_BF16;
    CHECK(!(f & amx) || ((f & CPU_AVX512) && (f & CPU_AMX_TILE)),
          "AMX reported only with AVX-512 and tile support");
    CHECK(cpu_features() == f, "features are the same on a second call");
#if defined(__x86_64__)
    if (!(f & CPU_AMX_TILE)) { SKIP("AMX tile instructions: no AMX here (or no tile permission)"); return; }
    struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((aligned(64))) cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1; cfg.rows[0] = 16; cfg.colsb[0] = 64;
    int32_t out[256];
    memset(out, 0x5a, sizeof out);
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
    __asm__ volatile("tilezero %%tmm0" : :);
    __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" : : "r"(out), "r"((long)64) : "memory");
    __asm__ volatile("tilerelease" : : : "memory");
    int zero = 1;
    for (int i = 0; i < 256; i++) zero &= out[i] == 0;
    CHECK(zero, "AMX tiles run in this process (a zeroed 16 x 64-byte tile stored as zeros)");
#endif
}

/* ---- the model families' kernels (kernels_family.c), the same in every set:
 * against float64 formulas ---- */
static void test_family_kernels(void)
{
    enum { N = 200, HD = 64, G = 2, NV = 37 };
    static float x[N], w[N], b[N], y[N], z[N], u[N];
    for (int i = 0; i < N; i++) { x[i] = 3 * frand() + 0.5f; w[i] = 1 + frand(); b[i] = frand(); u[i] = frand(); }
    /* LayerNorm with bias */
    double mu = 0, var = 0, e = 0;
    for (int i = 0; i < N; i++) mu += x[i];
    mu /= N;
    for (int i = 0; i < N; i++) var += (x[i] - mu) * (x[i] - mu);
    var /= N;
    k_layer_norm(y, x, w, b, N, 1e-5f);
    for (int i = 0; i < N; i++) {
        double want = (x[i] - mu) / sqrt(var + 1e-5) * w[i] + b[i];
        if (fabs(want - y[i]) > e) e = fabs(want - y[i]);
    }
    memcpy(z, x, sizeof z);
    k_layer_norm(z, z, w, b, N, 1e-5f);
    CHECK(e < 2e-6 && !memcmp(y, z, sizeof y), "LayerNorm of %d: max abs err %.2g against float64; in place the same bits", N, e);
    /* the GELUs and their gated products, over [-12, 12] */
    double eg = 0, et = 0, eglu = 0;
    for (int i = 0; i < N; i++) {
        const double v = -12.0 + 24.0 * i / (N - 1);
        const double ge = 0.5 * v * (1 + erf(v / sqrt(2.0)));
        const double gt = 0.5 * v * (1 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
        eg = fmax(eg, fabs(k_gelu((float)v) - ge) / (1 + fabs(ge)));
        et = fmax(et, fabs(k_gelu_tanh((float)v) - gt) / (1 + fabs(gt)));
        y[i] = (float)v;
    }
    static const int acts[3] = { K_ACT_SILU, K_ACT_GELU, K_ACT_GELU_TANH };
    for (int a = 0; a < 3; a++) {
        memcpy(z, y, sizeof z);
        k_glu(z, u, N, acts[a]);
        memcpy(x, y, sizeof x);
        k_act(x, N, acts[a]);
        for (int i = 0; i < N; i++) {
            const double v = y[i];
            const double f = a == 0 ? v / (1 + exp(-v)) : a == 1 ? 0.5 * v * (1 + erf(v / sqrt(2.0)))
                           : 0.5 * v * (1 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
            eglu = fmax(eglu, fabs(z[i] - f * u[i]) / (1 + fabs(f)));
            eglu = fmax(eglu, fabs(x[i] - f) / (1 + fabs(f)));
        }
    }
    CHECK(eg < 1e-6 && et < 1e-6 && eglu < 1e-6, "GELU %.2g, tanh GELU %.2g, act and act(g) * u %.2g: relative to float64", eg,
          et, eglu);
    /* soft-capping, bias rows */
    double es = 0;
    for (int i = 0; i < N; i++) z[i] = 40 * frand();
    memcpy(x, z, sizeof x);
    k_softcap(x, N, 7.5f);
    for (int i = 0; i < N; i++) es = fmax(es, fabs(x[i] - 7.5 * tanh(z[i] / 7.5)));
    float rows[3][4] = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 0 } }, bb[3] = { 0.5f, -1, 2 };
    k_add_bias(&rows[0][0], 4, bb, 3, 2);
    CHECK(es < 2e-6 && rows[0][2] == 5 && rows[1][0] == 5.5f && rows[1][3] == 8 && rows[2][0] == 0,
          "soft-cap: max abs err %.2g; bias rows add into their first n_out values", es);
    /* partial RoPE: the first rot dims of each head rotated, the rest passed; rot = head_dim is k_rope_cs */
    float v1[2 * HD], v2[2 * HD], cs[HD];
    for (int i = 0; i < 2 * HD; i++) v1[i] = v2[i] = frand();
    for (int i = 0; i < HD / 2; i++) { cs[i] = cosf(0.3f * (float)i); cs[HD / 2 + i] = sinf(0.3f * (float)i); }
    k_rope_cs(v1, 2, HD, cs);
    k_rope_cs_part(v2, 2, HD, HD, cs);
    int same = !memcmp(v1, v2, sizeof v1);
    const int rot = 24;
    float pc[HD];
    for (int i = 0; i < rot / 2; i++) { pc[i] = cosf(0.7f * (float)(i + 1)); pc[rot / 2 + i] = sinf(0.7f * (float)(i + 1)); }
    for (int i = 0; i < 2 * HD; i++) v1[i] = v2[i] = frand();
    k_rope_cs_part(v2, 2, HD, rot, pc);
    double er = 0;
    int pass = 1;
    for (int h = 0; h < 2; h++) {
        for (int i = 0; i < rot / 2; i++) {
            const double a = v1[h * HD + i], c = v1[h * HD + i + rot / 2];
            er = fmax(er, fabs(v2[h * HD + i] - (a * pc[i] - c * pc[rot / 2 + i])));
            er = fmax(er, fabs(v2[h * HD + i + rot / 2] - (c * pc[i] + a * pc[rot / 2 + i])));
        }
        for (int i = rot; i < HD; i++) pass &= v2[h * HD + i] == v1[h * HD + i];
    }
    CHECK(same && pass && er < 1e-6, "partial RoPE: all dims = k_rope_cs bit for bit; %d of %d: rotate_half over them "
          "(%.2g), the others untouched", rot, HD, er);
    /* soft-capped attention over F32, F16 and Q8_0 caches */
    static const uint32_t kts[3] = { GGML_F32, GGML_F16, GGML_Q8_0 };
    for (int kt = 0; kt < 3; kt++) {
        const size_t rb = tensor_row_bytes(kts[kt], HD);
        unsigned char *kc = malloc(rb * NV), *vc = malloc(rb * NV);
        float kf[NV][HD], vf[NV][HD], q[G * HD], probs[G * NV], out[G * HD], tmp[HD];
        int32_t cells[NV];
        for (int c = 0; c < NV; c++) {
            for (int i = 0; i < HD; i++) tmp[i] = 3 * frand();
            quant_row(kts[kt], tmp, kc + rb * (size_t)c, HD);
            dequant_row(kts[kt], kc + rb * (size_t)c, kf[c], HD);
            for (int i = 0; i < HD; i++) tmp[i] = frand();
            quant_row(kts[kt], tmp, vc + rb * (size_t)c, HD);
            dequant_row(kts[kt], vc + rb * (size_t)c, vf[c], HD);
            cells[c] = (c * 7 + 2) % NV;
        }
        for (int i = 0; i < G * HD; i++) q[i] = frand();
        const float scale = 0.25f, cap = 3.0f;
        k_attend_capped(q, G, HD, kc, vc, rb, kts[kt], cells, NV, scale, cap, probs, out);
        double ea = 0;
        for (int g = 0; g < G; g++) {
            double sc[NV], mx = -1e300, sum = 0;
            for (int t2 = 0; t2 < NV; t2++) {
                double dd = 0;
                for (int i = 0; i < HD; i++) dd += (double)q[g * HD + i] * kf[cells[t2]][i];
                sc[t2] = cap * tanh(dd * scale / cap);
                mx = fmax(mx, sc[t2]);
            }
            for (int t2 = 0; t2 < NV; t2++) { sc[t2] = exp(sc[t2] - mx); sum += sc[t2]; }
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int t2 = 0; t2 < NV; t2++) o += sc[t2] / sum * vf[cells[t2]][i];
                ea = fmax(ea, fabs(o - out[g * HD + i]));
            }
        }
        CHECK(ea < 2e-6, "soft-capped attention, %s cache, head_dim %d, group %d, %d cells: max abs err %.2g against float64",
              tname(kts[kt]), HD, G, NV, ea);
        free(kc);
        free(vc);
    }
}

int main(void)
{
    test_cpu();
    static const char *const names[ISA_COUNT] = { "ref", "avx2", "avx512", "amx", "neon" };
    const kernel_set *best = kernels_best();
    if (!REQUIRE(best != NULL, "a best kernel set (compiled in: %s)", kernels_compiled())) return check_done();
    printf("# best kernel set here: %s (compiled in: %s)\n", best->name, kernels_compiled());
    for (int isa = ISA_REF + 1; isa < ISA_COUNT; isa++) {
        const kernel_set *ks = kernels_get(isa);
        if (!ks) { SKIP("kernel set %s: not compiled in or not supported by this CPU", names[isa]); continue; }
        test_set(ks);
    }
#if defined(__x86_64__)
    /* the AVX-512 set without VBMI, which this CPU would not pick */
    if (kernels_get(ISA_AVX512) == &kernels_avx512) test_set(&kernels_avx512_novbmi);
    /* the opt-in set of MOR_CTX_FAST_BF16 */
    if (kernels_fast_bf16(kernels_get(ISA_AVX512)) == &kernels_avx512_bf16) test_set(&kernels_avx512_bf16);
    else SKIP("kernel set avx512-bf16 (MOR_CTX_FAST_BF16): no AVX-512 with AVX512_BF16 here");
#endif
    const char *out = getenv("OUT");
    char dir[600], cmd[700];
    snprintf(dir, sizeof dir, "%s/build/tmp", out ? out : ".");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (REQUIRE(system(cmd) == 0, "scratch directory %s", dir)) test_decode_threads(dir);
    test_family_kernels();
    test_kquants();
    return check_done();
}
