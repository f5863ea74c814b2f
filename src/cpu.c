/* cpu.c - CPU feature detection: cpuid + xgetbv on x86-64, hwcaps on aarch64.
 * The result is computed once and is immutable afterwards, so reading it from
 * any thread is safe. On Linux, detection also asks the kernel once for the
 * AMX tile data permission (below), the one side effect it has. */
#include <pthread.h>
#include "cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* AMX tiles can run when the CPU has them (cpuid leaf 7 EDX bit 24, given in
 * d7), the OS saves their state (XCR0 bits 17 XTILECFG and 18 XTILEDATA), and,
 * on Linux, the process may use tile data: since Linux 5.16 a process must
 * ask once with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) before
 * the first tile instruction, which otherwise faults (SIGILL). A kernel that
 * refuses or does not know the request (older kernels, some sandboxes,
 * valgrind) leaves AMX off, and the AVX-512 kernels run instead. */
static int amx_usable(uint32_t d7, uint64_t xcr0)
{
    if (!((d7 >> 24) & 1) || (xcr0 & (3ull << 17)) != (3ull << 17)) return 0;
#if defined(__linux__) && defined(__x86_64__)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return 0;   /* no known way to get the permission here: AMX stays off */
#endif
}

static uint32_t detect(void)
{
    uint32_t a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return 0;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 6) != 6) return 0;                    /* the OS saves xmm and ymm */
    if (__get_cpuid_max(0, 0) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    int avx2 = (b >> 5) & 1;
    if (avx2 && fma && f16c) f |= CPU_AVX2;
    int zmm_os = (xcr0 & 0xe0) == 0xe0;               /* opmask, zmm0-15 high, zmm16-31 */
    int avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1); /* F DQ BW VL */
    if ((f & CPU_AVX2) && avx512 && zmm_os) {
        f |= CPU_AVX512;
        if ((c >> 11) & 1) f |= CPU_AVX512VNNI;
        if ((c >> 1) & 1) f |= CPU_AVX512VBMI;
        if ((c >> 8) & 1) f |= CPU_GFNI;
        uint32_t a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        if ((a1 >> 5) & 1) f |= CPU_AVX512BF16;
    }
    if (f & CPU_AVX2) {
        uint32_t a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        if ((a1 >> 4) & 1) f |= CPU_AVXVNNI;
    }
    if ((f & CPU_AVX512) && amx_usable(d, xcr0)) {
        f |= CPU_AMX_TILE;
        if ((d >> 25) & 1) f |= CPU_AMX_INT8;
        if ((d >> 22) & 1) f |= CPU_AMX_BF16;
    }
    return f;
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
static uint32_t detect(void)
{
    unsigned long hw = getauxval(AT_HWCAP);
    uint32_t f = CPU_NEON;   /* Advanced SIMD is mandatory on aarch64 */
    if (hw & HWCAP_ASIMDDP) f |= CPU_DOTPROD;
    return f;
}
#elif defined(__aarch64__)
static uint32_t detect(void) { return CPU_NEON; }
#else
static uint32_t detect(void) { return 0; }
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint32_t features;   /* written once, under `once` */

static void init(void) { features = detect(); }

uint32_t cpu_features(void)
{
    pthread_once(&once, init);
    return features;
}
