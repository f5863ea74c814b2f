/* kernels_lora.h - the second pass of the unfolded depth-wise LoRA product
 * (lora.c), y += T B^T, as a template that each kernel set instantiates at
 * its vector width: KERNELS_LORA_AXPY(name, W) inside its target region.
 *
 * The pass has a reduction only r long: as dot products (the matmul
 * kernels) each output would cost a horizontal sum for a handful of
 * multiply-adds. So it runs as r scaled rows of B^T added into accumulators
 * held in registers, vectorized across outputs:
 *     acc[o] = sum_q t[q] * bt[q][o]  (q in order, each product rounded, then added)
 *     y[o] += acc[o]
 * Every lane does the same two roundings per step as the scalar tail (no
 * fused multiply-add: the product and the sum are separate statements, and
 * the library is built in ISO C mode, which does not contract across them),
 * so the bits are the same at any vector width and on any CPU, and the same
 * as the reference kernels' dot product of B's row with t. */
#ifndef MOR_KERNELS_LORA_H
#define MOR_KERNELS_LORA_H
#include <string.h>
/* acc_k += t * (W floats of bt at offset k*W), as two rounded operations */
#define LORA_STEP(k, W)                                \
    do {                                               \
        memcpy(&bv, b + (k) * W, sizeof bv);           \
        const v p = bv * tq;                           \
        a##k = a##k + p;                               \
    } while (0)
/* the same for a second row (t value uq, accumulators c) from that load of bt */
#define LORA_STEP2(k, W)                               \
    do {                                               \
        memcpy(&bv, b + (k) * W, sizeof bv);           \
        const v p = bv * tq, pu = bv * uq;             \
        a##k = a##k + p;                               \
        c##k = c##k + pu;                              \
    } while (0)
#define LORA_FLUSH(yr, acc, k, W)                      \
    do {                                               \
        memcpy(&yv, (yr) + o + (k) * W, sizeof yv);    \
        yv = yv + acc##k;                              \
        memcpy((yr) + o + (k) * W, &yv, sizeof yv);    \
    } while (0)
/* Blocks of outputs outside, rows inside: a block's r rows of B^T stay in L1
 * for all the rows; two rows at a time share each load of B^T and keep 8
 * independent sums in flight. */
#define KERNELS_LORA_AXPY(name, W)                                                                              \
    static void name(const float *t,    int64_t ldt, int32_t rows, int32_t r, const float *bt, int64_t ldb,   \
                          float *y, int64_t ldy, int64_t n)                                                     \
    {                                                                                                         \
        typedef float v __attribute__((vector_size(4 * W)));                                                  \
        int64_t o = 0;                                                                                        \
        for (; o + 4 * W <= n; o += 4 * W) { /* 4 vectors of outputs stay in registers over q */             \
            int32_t i = 0;                                                                                    \
            for (; i + 2 <= rows; i += 2) {                                                                   \
                const float *ti = t + i * ldt, *tj = ti + ldt;                                                \
                v a0 = { 0 }, a1 = { 0 }, a2 = { 0 }, a3 = { 0 }, c0 = { 0 }, c1 = { 0 }, c2 = { 0 }, c3 = { 0 }; \
                v bv, yv;                                                                                     \
                for (int32_t q = 0; q < r; q++) {                                                             \
                    const float tq = ti[q], uq = tj[q], *b = bt + q * ldb + o;                                \
                    LORA_STEP2(0, W); LORA_STEP2(1, W); LORA_STEP2(2, W); LORA_STEP2(3, W);                   \
                }                                                                                             \
                float *yi = y + i * ldy, *yj = yi + ldy;                                                      \
                LORA_FLUSH(yi, a, 0, W); LORA_FLUSH(yi, a, 1, W); LORA_FLUSH(yi, a, 2, W); LORA_FLUSH(yi, a, 3, W); \
                LORA_FLUSH(yj, c, 0, W); LORA_FLUSH(yj, c, 1, W); LORA_FLUSH(yj, c, 2, W); LORA_FLUSH(yj, c, 3, W); \
            }                                                                                                 \
            for (; i < rows; i++) {                                                                           \
                const float *ti = t + i * ldt;                                                                \
                float *yi = y + i * ldy;                                                                      \
                v a0 = { 0 }, a1 = { 0 }, a2 = { 0 }, a3 = { 0 }, bv, yv;                                     \
                for (int32_t q = 0; q < r; q++) {                                                             \
                    const float tq = ti[q], *b = bt + q * ldb + o;                                            \
                    LORA_STEP(0, W); LORA_STEP(1, W); LORA_STEP(2, W); LORA_STEP(3, W);                       \
                }                                                                                             \
                LORA_FLUSH(yi, a, 0, W); LORA_FLUSH(yi, a, 1, W); LORA_FLUSH(yi, a, 2, W); LORA_FLUSH(yi, a, 3, W); \
            }                                                                                                 \
        }                                                                                                     \
        for (; o + W <= n; o += W) /* then one vector at a time */                                            \
            for (int32_t i = 0; i < rows; i++) {                                                              \
                const float *ti = t + i * ldt;                                                                \
                float *yi = y + i * ldy;                                                                      \
                v a0 = { 0 }, bv, yv;                                                                         \
                for (int32_t q = 0; q < r; q++) {                                                             \
                    const float tq = ti[q], *b = bt + q * ldb + o;                                            \
                    LORA_STEP(0, W);                                                                          \
                }                                                                                             \
                LORA_FLUSH(yi, a, 0, W);                                                                      \
            }                                                                                                 \
        for (; o < n; o++) /* the tail, one output at a time: the same operations */                         \
            for (int32_t i = 0; i < rows; i++) {                                                              \
                float acc = 0;                                                                                \
                for (int32_t q = 0; q < r; q++) {                                                             \
                    const float p = bt[q * ldb + o] * t[i * ldt + q];                                         \
                    acc = acc + p;                                                                            \
                }                                                                                             \
                y[i * ldy + o] += acc;                                                                        \
            }                                                                                                 \
    }
#endif
