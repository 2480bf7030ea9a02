// What the INT8 kernels share (kernels_int8.cu, kernels_conv_i8.cu): QLinearAdd's element, the CPU's float32
// operations one for one (cpu/qadd.h kiln__qadd1: two products, one sum, the activation as min(hi, max(lo, v)) for
// none / Relu / Clip, an IEEE division, rintf's ties to even, NaN -> 0, the clamp to the type's range).
#ifndef KILN_BACKEND_CUDA_KERNELS_INT8_CUH
#define KILN_BACKEND_CUDA_KERNELS_INT8_CUH
#include "kernels_common.cuh"

// The IEEE quotient v / sc, out of line: its slow path inlined into every element of an unrolled epilogue is most of
// a kernel's code
static __device__ __noinline__ float div_rn_call(float v, float sc) { return __fdiv_rn(v, sc); }

// rintf(v / sc) of the IEEE quotient, without dividing in the common case: r = v * isc (isc = 1 / sc rounded) is within
// ~2^-23 |v / sc| of the exact quotient, so the exact quotient and its rounding both lie within r (1 -+ 2^-21); where
// rint gives one value at both ends (rint is monotonic) that is rint of the rounded quotient. Else (near a .5,
// magnitudes past 2^23, NaN, infinities; isc NaN where 1 / sc overflows) it divides.
__device__ __forceinline__ float rint_div(float v, float sc, float isc)
{
    const float r = __fmul_rn(v, isc);
    const float lo = rintf(__fmul_rn(r, 0.999999523162841796875f)), hi = rintf(__fmul_rn(r, 1.000000476837158203125f));
    return lo == hi ? lo : rintf(div_rn_call(v, sc));
}

__device__ __forceinline__ int qadd1(const cuk_qadd_args &p, int a, int b)
{
    const float fa = __fmul_rn((float)(a - p.za), p.sa);
    const float fb = __fmul_rn((float)(b - p.zb), p.sb);
    float v = __fadd_rn(fa, fb);
    if (p.act)
        v = fminf(fmaxf(v, p.flo), p.fhi);
    const float r = __fadd_rn(rint_div(v, p.sc, p.isc), (float)p.zc);
    if (r != r)
        return 0;
    return r < (float)p.lo ? p.lo : r > (float)p.hi ? p.hi : (int)r;
}

#endif
