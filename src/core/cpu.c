/* CPU features, detected once per process (pthread_once) and read-only afterwards, so any number
 * of threads may ask at the same time. Every ISA-specific kernel path asks kiln__cpu_has().
 *
 * KILN_MAX_CPU_ISA (environment, read once with the detection) caps what kiln uses, like oneDNN's
 * ONEDNN_MAX_CPU_ISA: "avx2" hides the AVX-512 features, "none" the AVX2 / FMA / F16C ones too
 * (the portable kernels). For running and measuring an AVX2-only host's paths on an AVX-512 one;
 * engines built under a cap are the capped host's engines. Unset or anything else: no cap. */
#include "core.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static unsigned cpu_features;   /* written once under cpu_once, read-only afterwards */

static void detect(void)
{
    unsigned f = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        f |= KILN_CPU_AVX2;
    if (__builtin_cpu_supports("fma"))
        f |= KILN_CPU_FMA;
    if (__builtin_cpu_supports("avx512f"))
        f |= KILN_CPU_AVX512F;
    if (__builtin_cpu_supports("avx512dq"))
        f |= KILN_CPU_AVX512DQ;
    /* F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports has no "f16c"); "avx" also
     * checks that the OS saves the YMM state */
    unsigned a, b, c, d;
    if (__builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C))
        f |= KILN_CPU_F16C;
    /* AVX512_VNNI / AVX512_VBMI / AVX512_BF16 from CPUID leaf 7 (subleaf 0: ECX bits 11, 1; subleaf 1: EAX bit 5);
     * only with AVX-512F, whose check includes the OS saving the ZMM state */
    if ((f & KILN_CPU_AVX512F) && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        if (c & (1u << 11))
            f |= KILN_CPU_AVX512VNNI;
        if ((c & (1u << 1)) && (b & (1u << 30)))   /* AVX512_VBMI (ECX bit 1) with AVX512BW (EBX bit 30) */
            f |= KILN_CPU_AVX512VBMI;
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)))
            f |= KILN_CPU_AVX512BF16;
    }
#endif
    const char *cap = getenv("KILN_MAX_CPU_ISA");
    if (cap && strcmp(cap, "avx2") == 0)
        f &= KILN_CPU_AVX2 | KILN_CPU_FMA | KILN_CPU_F16C;
    else if (cap && strcmp(cap, "none") == 0)
        f = 0;
    cpu_features = f;
}

bool kiln__cpu_has(unsigned features)
{
    pthread_once(&cpu_once, detect);
    return (cpu_features & features) == features;
}
