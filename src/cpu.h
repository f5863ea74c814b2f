/* cpu.h - what the CPU we run on can execute, detected once per process. */
#ifndef CPU_H
#define CPU_H
#include <stdint.h>

enum {
    CPU_AVX2       = 1u << 0,   /* with FMA and F16C */
    CPU_AVX512     = 1u << 1,   /* F, BW, VL, DQ (and the OS saves zmm state) */
    CPU_AVX512VNNI = 1u << 2,
    CPU_AVX512BF16 = 1u << 3,
    CPU_AVXVNNI    = 1u << 4,
    CPU_NEON       = 1u << 5,   /* aarch64 Advanced SIMD with fp16 conversions */
    CPU_DOTPROD    = 1u << 6,   /* aarch64 SDOT/UDOT */
    CPU_AVX512VBMI = 1u << 7,   /* byte permutes (vpermb, vpermt2b) */
    CPU_GFNI       = 1u << 8,   /* Galois-field byte transforms (gf2p8affineqb) */
    /* AMX (Sapphire Rapids and later): set only with CPU_AVX512, when the
     * OS saves tile state and (Linux) granted this process tile data */
    CPU_AMX_TILE   = 1u << 9,
    CPU_AMX_INT8   = 1u << 10,  /* tdpbssd and friends */
    CPU_AMX_BF16   = 1u << 11   /* tdpbf16ps */
};

/* CPU_* bits of this CPU (and OS support). Thread-safe; detection runs
 * once (pthread_once) and the result never changes. The first call also
 * requests AMX tile permission for the process where the CPU has AMX (cpu.c). */
uint32_t cpu_features(void);
#endif
