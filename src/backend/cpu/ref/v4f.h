/* 4-wide float vectors for the reference kernels' hot loops (GCC/Clang vector extensions; SSE2
 * is the x86-64 baseline, other targets get the compiler's generic lowering), so that these loops
 * vectorize whatever the optimizer's cost model decides. Loads and stores go through memcpy: no
 * alignment is assumed. Used by k_norm.c and k_reduce.c. */
#ifndef KILN_BACKEND_CPU_REF_V4F_H
#define KILN_BACKEND_CPU_REF_V4F_H
#include <stdint.h>
#include <string.h>

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f vld(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vst(float *p, v4f v) { memcpy(p, &v, sizeof v); }
static inline v4f vset(float a)
{
    v4f v = {a, a, a, a};
    return v;
}
static inline float vhsum(v4f v) { return (v[0] + v[1]) + (v[2] + v[3]); }
/* lanes of a where m is all ones, of b elsewhere */
static inline v4f vsel(v4i m, v4f a, v4f b) { return (v4f)((m & (v4i)a) | (~m & (v4i)b)); }
static inline v4f vmax(v4f a, v4f b) { return vsel(a > b, a, b); }
static inline v4f vmin(v4f a, v4f b) { return vsel(a < b, a, b); }
static inline v4f vabs(v4f a) { return (v4f)((v4i)a & 0x7fffffff); }

#endif
