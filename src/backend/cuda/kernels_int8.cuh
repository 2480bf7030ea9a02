// What the INT8 kernels share (kernels_int8.cu, kernels_conv_i8.cu): QLinearAdd's element, the CPU's float32
// operations one for one (cpu/qadd.h kiln__qadd1: two products, one sum, the activation as min(hi, max(lo, v)) for
// none / Relu / Clip, an IEEE division, rintf's ties to even, NaN -> 0, the clamp to the type's range), through the
// exact shortcuts of backend/qexact.h where they apply.
#ifndef KILN_BACKEND_CUDA_KERNELS_INT8_CUH
#define KILN_BACKEND_CUDA_KERNELS_INT8_CUH
#include "kernels_common.cuh"
#include "../qexact.h"

// The IEEE quotient v / sc, out of line: its slow path inlined into every element of an unrolled epilogue would be
// most of a kernel's code
static __device__ __noinline__ float div_rn_call(float v, float sc) { return __fdiv_rn(v, sc); }

// clamp(rintf(v / s) + z, lo, hi), NaN -> 0, by the IEEE division (ref/k_quant.c, cpu/qadd.h): what QuantizeLinear
// and QLinearAdd compute for the rare values kq_qadd_round declines
__device__ __forceinline__ int div_round(float v, float s, int z, int lo, int hi)
{
    const float r = __fadd_rn(rintf(div_rn_call(v, s)), (float)z);
    if (r != r)
        return 0;
    return r < (float)lo ? lo : r > (float)hi ? hi : (int)r;
}

// The add's c for the sum v (after the activation) by the IEEE division: the rare elements kq_qadd declines
__device__ __forceinline__ int qadd_div(const cuk_qadd_args &p, float v)
{
    return div_round(v, p.sc, p.zc, p.lo, p.hi);
}

// QLinearAdd's element (cpu/qadd.h kiln__qadd1, bit for bit): backend/qexact.h kq_qadd, with no conversion
// instruction and no division (session 31), else (rare: a quotient near a .5 inside the range, or isc NaN) the division
__device__ __forceinline__ int qadd1(const cuk_qadd_args &p, int a, int b)
{
    int32_t c;
    float v;
    if (kq_qadd(a, p.za, p.sa, b, p.zb, p.sb, p.act, p.flo, p.fhi, p.isc, p.zc, p.lo, p.hi, &c, &v))
        return c;
    return qadd_div(p, v);
}

// four ints' low bytes, the first in the lowest
__device__ __forceinline__ uint32_t pack4(int a, int b, int c, int d)
{
    return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

#endif
