// What the INT8 kernels share (kernels_int8.cu, kernels_conv_i8.cu): QLinearAdd's element, the CPU's float32
// operations one for one (cpu/qadd.h kiln__qadd1: two products, one sum, the activation as min(hi, max(lo, v)) for
// none / Relu / Clip, an IEEE division, rintf's ties to even, NaN -> 0, the clamp to the type's range).
#ifndef KILN_BACKEND_CUDA_KERNELS_INT8_CUH
#define KILN_BACKEND_CUDA_KERNELS_INT8_CUH
#include "kernels_common.cuh"

__device__ __forceinline__ int qadd1(const cuk_qadd_args &p, int a, int b)
{
    const float fa = __fmul_rn((float)(a - p.za), p.sa);
    const float fb = __fmul_rn((float)(b - p.zb), p.sb);
    float v = __fadd_rn(fa, fb);
    if (p.act)
        v = fminf(fmaxf(v, p.flo), p.fhi);
    const float r = __fadd_rn(rintf(__fdiv_rn(v, p.sc)), (float)p.zc);
    if (r != r)
        return 0;
    return r < (float)p.lo ? p.lo : r > (float)p.hi ? p.hi : (int)r;
}

#endif
