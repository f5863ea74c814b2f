/* kernels_dispatch.c - which kernel set runs: the fastest one the CPU has
 * (cpu.c), among those compiled in. The tables are constant; nothing here
 * changes after start-up. */
#include "cpu.h"
#include "kernels.h"

const kernel_set *kernels_get(int isa)
{
    uint32_t f = cpu_features();
    (void)f;
    switch (isa) {
    case ISA_REF: return &kernels_ref;
#if defined(__x86_64__)
    case ISA_AVX2: return (f & CPU_AVX2) ? &kernels_avx2 : NULL;
    case ISA_AVX512:
        /* the set also uses VNNI for the quantized dot products, and VBMI + GFNI where present
         * to unpack quantized blocks (the same results without them) */
        if (!(f & CPU_AVX512) || !(f & CPU_AVX512VNNI)) return NULL;
        return (f & CPU_AVX512VBMI) && (f & CPU_GFNI) ? &kernels_avx512 : &kernels_avx512_novbmi;
    case ISA_AMX: {
        /* tiles for the matrix products, and the AVX-512 set (with VBMI) for the rest */
        const uint32_t need = CPU_AVX512 | CPU_AVX512VNNI | CPU_AVX512BF16 | CPU_AVX512VBMI |
                              CPU_GFNI | CPU_AMX_TILE | CPU_AMX_INT8 | CPU_AMX_BF16;
        return (f & need) == need ? &kernels_amx : NULL;
    }
#endif
#if defined(__aarch64__)
    case ISA_NEON: return (f & CPU_NEON) ? &kernels_neon : NULL;
#endif
    default: return NULL;
    }
}

const kernel_set *kernels_best(void)
{
    for (int isa = ISA_COUNT - 1; isa > ISA_REF; isa--) {
        const kernel_set *k = kernels_get(isa);
        if (k) return k;
    }
    return &kernels_ref;
}

const kernel_set *kernels_fast_bf16(const kernel_set *base)
{
#if defined(__x86_64__)
    /* not the AMX set: its BF16 tiles are exact and fast already */
    if (base && base == kernels_get(ISA_AVX512) && (cpu_features() & CPU_AVX512BF16)) return &kernels_avx512_bf16;
#endif
    return base;
}

const char *kernels_compiled(void)
{
#if defined(__x86_64__)
    return "ref,avx2,avx512,amx";
#elif defined(__aarch64__)
    return "ref,neon";
#else
    return "ref";
#endif
}
