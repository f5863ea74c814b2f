/* kernels_dispatch.c - which kernel set runs: the fastest one the CPU has
 * (cpu.c), among those compiled in. The tables are constant; nothing here
 * changes after start-up. */
#include "cpu.h"
#include "kernels.h"

const mor_kernels *mor_kernels_get(int isa)
{
    uint32_t f = mor_cpu_features();
    (void)f;
    switch (isa) {
    case MOR_ISA_REF: return &mor_kernels_ref;
#if defined(__x86_64__)
    case MOR_ISA_AVX2: return (f & MOR_CPU_AVX2) ? &mor_kernels_avx2 : NULL;
    case MOR_ISA_AVX512:
        /* the set also uses VNNI for the quantized dot products, and VBMI + GFNI where present
         * to unpack quantized blocks (the same results without them) */
        if (!(f & MOR_CPU_AVX512) || !(f & MOR_CPU_AVX512VNNI)) return NULL;
        return (f & MOR_CPU_AVX512VBMI) && (f & MOR_CPU_GFNI) ? &mor_kernels_avx512 : &mor_kernels_avx512_novbmi;
#endif
#if defined(__aarch64__)
    case MOR_ISA_NEON: return (f & MOR_CPU_NEON) ? &mor_kernels_neon : NULL;
#endif
    default: return NULL;
    }
}

const mor_kernels *mor_kernels_best(void)
{
    for (int isa = MOR_ISA_COUNT - 1; isa > MOR_ISA_REF; isa--) {
        const mor_kernels *k = mor_kernels_get(isa);
        if (k) return k;
    }
    return &mor_kernels_ref;
}

const char *mor_kernels_compiled(void)
{
#if defined(__x86_64__)
    return "ref,avx2,avx512";
#elif defined(__aarch64__)
    return "ref,neon";
#else
    return "ref";
#endif
}
