/* version.c - runtime version and build description, and ABI sizes. */
#include "mor.h"

uint32_t mor_version_number(void) { return MOR_VERSION_NUMBER; }
const char *mor_version_string(void) { return MOR_VERSION_STRING; }

const char *mor_build_info(void)
{
    return "libmor " MOR_VERSION_STRING
#if defined(__clang__)
        " clang " __clang_version__
#elif defined(__GNUC__)
        " gcc " __VERSION__
#endif
        /* the kernel sets compiled in (kernels_dispatch.c picks one at run time) */
#if defined(__x86_64__)
        " kernels=ref,avx2,avx512,amx"
#elif defined(__aarch64__)
        " kernels=ref,neon"
#else
        " kernels=ref"
#endif
#ifdef MOR_USE_OPENMP
        " openmp=yes"
#else
        " openmp=no"
#endif
        ;
}

size_t mor_sizeof_model_params(void)   { return sizeof(mor_model_params); }
size_t mor_sizeof_context_params(void) { return sizeof(mor_context_params); }
size_t mor_sizeof_router_stats(void)   { return sizeof(mor_router_stats); }
