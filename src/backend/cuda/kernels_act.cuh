// The elementwise activations of kiln's kernels (enum cuk_act): the unary layers, the fused epilogues (kernels.cu)
// and the INT8 convolutions' requantization through a non-linear activation (kernels_conv_i8.cu).
#ifndef KILN_BACKEND_CUDA_KERNELS_ACT_CUH
#define KILN_BACKEND_CUDA_KERNELS_ACT_CUH
#include "kernels.h"
#include <cuda_runtime.h>

// Exact (erf) GELU without erff's two paths: 1 + erf(x / sqrt 2) is 2 - E (x >= 0) or E (x < 0) with E = erfc(|x| /
// sqrt 2) by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7; __expf and the approximate reciprocal add ~2 ulps each),
// so the negative side has no cancellation. H200, BERT-base's bias + GELU epilogue 16384 x 3072 FP16: the erff form
// is ALU-bound (86 us against 57 for the bytes); CPU and GPU results stay within the layer tests' 1e-5.
__device__ __forceinline__ float gelu_erf(float x)
{
    const float z = fabsf(x) * 0.70710678118654752f;
    const float t = __fdividef(1.0f, fmaf(0.3275911f, z, 1.0f));   // the approximate reciprocal: <= 2 ulps
    float p = fmaf(t, 1.061405429f, -1.453152027f);
    p = fmaf(t, p, 1.421413741f);
    p = fmaf(t, p, -0.284496736f);
    p = fmaf(t, p, 0.254829592f);
    const float e = p * t * __expf(-z * z);
    return 0.5f * x * (x >= 0.f ? 2.0f - e : e);
}

__device__ __forceinline__ float act_apply(int act, float x, float a, float b)
{
    switch (act) {
    case CUK_IDENTITY: return x;
    case CUK_RELU: return x < 0.f ? 0.f : x;   // NaN stays NaN, as the CPU's Relu
    case CUK_CLIP: return x < a ? a : (x > b ? b : x);
    case CUK_LEAKYRELU: return x >= 0.f ? x : a * x;
    case CUK_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case CUK_HARDSIGMOID: { float v = a * x + b; return v < 0.f ? 0.f : (v > 1.f ? 1.f : v); }
    case CUK_HARDSWISH: { float v = x / 6.0f + 0.5f; return x * (v < 0.f ? 0.f : (v > 1.f ? 1.f : v)); }
    case CUK_SILU: return x / (1.0f + expf(-x));
    case CUK_GELU: return gelu_erf(x);
    case CUK_GELU_TANH: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case CUK_TANH: return tanhf(x);
    case CUK_EXP: return expf(x);
    case CUK_LOG: return logf(x);
    case CUK_SQRT: return sqrtf(x);
    case CUK_NEG: return -x;
    case CUK_ABS: return fabsf(x);
    case CUK_ERF: return erff(x);
    case CUK_RECIPROCAL: return 1.0f / x;
    case CUK_FLOOR: return floorf(x);
    case CUK_CEIL: return ceilf(x);
    case CUK_ELU: return x >= 0.f ? x : a * (expf(x) - 1.0f);
    case CUK_SOFTPLUS: return x > 20.f ? x : log1pf(expf(x));
    case CUK_SIN: return sinf(x);
    case CUK_COS: return cosf(x);
    case CUK_SELU: return x > 0.f ? b * x : b * (a * expf(x) - a);
    case CUK_ROUND: return rintf(x);
    case CUK_SIGN: return (float)((x > 0.f) - (x < 0.f));
    case CUK_HARDSWISH_AFFINE: { float v = x / 6.0f + 0.5f; return a * (x * (v < 0.f ? 0.f : (v > 1.f ? 1.f : v))) + b; }
    }
    return x;
}

#endif
