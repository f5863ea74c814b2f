/* cpu.h - what the CPU we run on can execute, detected once per process. */
#ifndef MOR_CPU_H
#define MOR_CPU_H
#include <stdint.h>

enum {
    MOR_CPU_AVX2       = 1u << 0,   /* with FMA and F16C */
    MOR_CPU_AVX512     = 1u << 1,   /* F, BW, VL, DQ (and the OS saves zmm state) */
    MOR_CPU_AVX512VNNI = 1u << 2,
    MOR_CPU_AVX512BF16 = 1u << 3,
    MOR_CPU_AVXVNNI    = 1u << 4,
    MOR_CPU_NEON       = 1u << 5,   /* aarch64 Advanced SIMD with fp16 conversions */
    MOR_CPU_DOTPROD    = 1u << 6,   /* aarch64 SDOT/UDOT */
    MOR_CPU_AVX512VBMI = 1u << 7,   /* byte permutes (vpermb, vpermt2b) */
    MOR_CPU_GFNI       = 1u << 8    /* Galois-field byte transforms (gf2p8affineqb) */
};

/* MOR_CPU_* bits of this CPU (and OS support). Thread-safe; detection runs
 * once (pthread_once) and the result never changes. */
uint32_t mor_cpu_features(void);
#endif
