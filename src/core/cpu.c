/* CPU features, detected once per process (pthread_once) and read-only afterwards, so any number
 * of threads may ask at the same time. Every ISA-specific kernel path asks kiln__cpu_has().
 *
 * KILN_MAX_CPU_ISA (environment, read once with the detection) caps what kiln uses, like oneDNN's
 * ONEDNN_MAX_CPU_ISA: "avx2" hides the AVX-512 features, "none" the AVX2 / FMA / F16C ones too
 * (the portable kernels). For running and measuring an AVX2-only host's paths on an AVX-512 one;
 * engines built under a cap are the capped host's engines; "avx512" hides AMX only. Unset or anything else: no cap.
 *
 * AMX (the tile registers, 8 KB of state) needs more than CPUID: the OS must save the tile state (XCR0 bits 17-18)
 * and, on Linux, grant the process its use (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA: the first tile
 * instruction faults without it); the detection asks once, for the whole process. */
#include "core.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static unsigned cpu_features;   /* written once under cpu_once, read-only afterwards */
static char cpu_isa[160];       /* kiln_cpu_isa's text, the same */

#if defined(__linux__) && defined(__x86_64__)
/* The AMX features (CPUID leaf 7 EDX: AMX-TILE bit 24 with AMX-BF16 bit 22, AMX-INT8 bit 25) where the OS saves the
 * tile state (XCR0 bits 17-18, read with xgetbv where OSXSAVE is set) and the process may use it */
static unsigned amx_usable(void)
{
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)))
        return 0;
    f = (d & (1u << 22) ? KILN_CPU_AMX_BF16 : 0) | (d & (1u << 25) ? KILN_CPU_AMX_INT8 : 0);
    if (!f)
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
        return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0 ? f : 0;
}
#endif

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
#if defined(__linux__) && defined(__x86_64__)
    /* AMX only with the AVX-512 features its kernels' epilogues use (AVX512-BF16 for the BF16 tile, VNNI for the INT8 one) */
    if ((f & KILN_CPU_AVX512BF16) && (f & KILN_CPU_AVX512VNNI) &&
        !(cap && (!strcmp(cap, "avx512") || !strcmp(cap, "avx2") || !strcmp(cap, "none"))))
        f |= amx_usable();
#endif
    if (cap && strcmp(cap, "avx2") == 0)
        f &= KILN_CPU_AVX2 | KILN_CPU_FMA | KILN_CPU_F16C;
    else if (cap && strcmp(cap, "none") == 0)
        f = 0;
    cpu_features = f;
    static const struct { unsigned bit; const char *name; } names[] = {
        {KILN_CPU_AVX2, "avx2"},           {KILN_CPU_FMA, "fma"},
        {KILN_CPU_F16C, "f16c"},           {KILN_CPU_AVX512F, "avx512f"},
        {KILN_CPU_AVX512DQ, "avx512dq"},   {KILN_CPU_AVX512VNNI, "avx512vnni"},
        {KILN_CPU_AVX512BF16, "avx512bf16"}, {KILN_CPU_AVX512VBMI, "avx512vbmi"},
        {KILN_CPU_AMX_BF16, "amx-bf16"},   {KILN_CPU_AMX_INT8, "amx-int8"},
    };
    size_t used = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (f & names[i].bit) {
            size_t n = strlen(names[i].name);
            if (used + n + 2 > sizeof cpu_isa)
                break;
            if (used)
                cpu_isa[used++] = ' ';
            memcpy(cpu_isa + used, names[i].name, n);
            used += n;
        }
    cpu_isa[used] = 0;
}

const char *kiln_cpu_isa(void)
{
    pthread_once(&cpu_once, detect);
    return cpu_isa;
}

bool kiln__cpu_has(unsigned features)
{
    pthread_once(&cpu_once, detect);
    return (cpu_features & features) == features;
}
