// Device helpers shared by kiln's CUDA kernel files (kernels.cu, kernels_attn.cu).
#ifndef KILN_BACKEND_CUDA_KERNELS_COMMON_CUH
#define KILN_BACKEND_CUDA_KERNELS_COMMON_CUH
#include "kernels.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <string.h>

// Float storage: float32, FP16 or BF16 (CUK_F32 / CUK_F16 / CUK_BF16); arithmetic is always float32.
__device__ __forceinline__ float ldf(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ldf(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void stf(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void stf(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void stf(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
// Eight values of half storage T at p (16-byte aligned) as float32, and back (returning the 16 bytes as stored).
template <typename T> __device__ __forceinline__ void ld8(const T *p, float *f)
{
    uint4 u = *(const uint4 *)p;
    const T *h = (const T *)&u;
#pragma unroll
    for (int k = 0; k < 8; k++)
        f[k] = ldf(h, k);
}
template <typename T> __device__ __forceinline__ uint4 st8(T *p, const float *f)
{
    uint4 u;
    T *h = (T *)&u;
#pragma unroll
    for (int k = 0; k < 8; k++)
        stf(h, k, f[k]);
    *(uint4 *)p = u;
    return u;   // the values as stored
}
// float32 storage: two 16-byte vectors (32-byte aligned)
__device__ __forceinline__ void ld8(const float *p, float *f)
{
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
__device__ __forceinline__ void st8(float *p, const float *f)
{
    *(float4 *)p = make_float4(f[0], f[1], f[2], f[3]);
    *(float4 *)(p + 4) = make_float4(f[4], f[5], f[6], f[7]);
}

// FP8 E4M3 with scale s: the CPU emulation's rounding (core/numfmt: q = e4m3(v / s), an IEEE division, round to
// nearest even, saturating to +-448, NaN -> NaN). Producers that write an FP8 layer's input beside their own output
// (cuda_fp8.c, "feeds") quantize the value as stored, so the bytes equal a separate pass over the output.
__device__ __forceinline__ uint8_t to_e4m3_div(float v, float s)
{
    return (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(v, s), __NV_SATFINITE, __NV_E4M3);
}
// The same bytes without the division's cost in the common case (inv: 1 / s, rounded): r = v * inv is within
// 2^-23 |v / s| of the exact quotient, so within 3 ulps of r on either side lie both the exact quotient and its
// IEEE rounding; E4M3 rounding (saturating) is monotonic, so where r - 3 ulps and r + 3 ulps give one byte, that is
// the byte of the IEEE quotient. Else (near an E4M3 rounding midpoint, NaN, infinities, crossing zero) it divides.
// r == 0 (v zero, or v / s far below E4M3's smallest subnormal): a zero of v's sign either way.
__device__ __forceinline__ uint8_t to_e4m3(float v, float s, float inv)
{
    const float r = v * inv;
    if (r == 0.f)
        return (uint8_t)__nv_cvt_float_to_fp8(r, __NV_SATFINITE, __NV_E4M3);
    const int b = __float_as_int(r);
    const __nv_fp8x2_storage_t two =
        __nv_cvt_float2_to_fp8x2(make_float2(__int_as_float(b - 3), __int_as_float(b + 3)), __NV_SATFINITE, __NV_E4M3);
    return (two & 0xff) == (two >> 8) ? (uint8_t)(two & 0xff) : to_e4m3_div(v, s);
}
// An E4M3 byte's value (every E4M3 value, NaN included, is exact in FP16).
__device__ __forceinline__ float e4m3_val(uint8_t v) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, __NV_E4M3))); }
// The E4M3 bytes of n (4 or 8) stored values h into q (n-byte aligned): to_e4m3's bytes, two values at a time (one
// conversion of both lower bounds, one of both upper ones; where the two pairs agree those are both bytes, else each
// value goes through to_e4m3 alone).
template <typename T, int N> __device__ __forceinline__ void stq(uint8_t *q, const T *h, float s)
{
    const float inv = 1.0f / s;
    uint16_t o[N / 2];
#pragma unroll
    for (int k = 0; k < N / 2; k++) {
        const float v0 = ldf(h, 2 * k), v1 = ldf(h, 2 * k + 1);
        const int b0 = __float_as_int(v0 * inv), b1 = __float_as_int(v1 * inv);
        const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
            make_float2(__int_as_float(b0 - 3), __int_as_float(b1 - 3)), __NV_SATFINITE, __NV_E4M3);
        const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
            make_float2(__int_as_float(b0 + 3), __int_as_float(b1 + 3)), __NV_SATFINITE, __NV_E4M3);
        o[k] = lo == hi ? (uint16_t)lo : (uint16_t)(to_e4m3(v0, s, inv) | to_e4m3(v1, s, inv) << 8);
    }
    if constexpr (N == 8)
        *(uint2 *)q = *(const uint2 *)o;
    else
        *(uint32_t *)q = *(const uint32_t *)o;
}

// Reductions over G consecutive lanes (G a power of two dividing 32; every lane of the warp takes part), and
// over the whole warp.
template <int G> __device__ __forceinline__ float group_sum(float v)
{
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <int G> __device__ __forceinline__ float group_max(float v)
{
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) { return group_sum<32>(v); }
__device__ __forceinline__ float warp_max(float v) { return group_max<32>(v); }

// Runs BODY with T bound to the storage type of fdt.
#define FDT_DISPATCH(fdt, ...)                                                                                  \
    do {                                                                                                        \
        if ((fdt) == CUK_F16) { typedef __half T; __VA_ARGS__; }                                                \
        else if ((fdt) == CUK_BF16) { typedef __nv_bfloat16 T; __VA_ARGS__; }                                   \
        else { typedef float T; __VA_ARGS__; }                                                                  \
    } while (0)

struct shape_arg {   // passed by value
    int ndim;
    int64_t dims[CUK_MAX_DIMS];
    int64_t str[3][CUK_MAX_DIMS];
};

static inline shape_arg to_arg(const cuk_shape *sh)
{
    shape_arg a;
    memset(&a, 0, sizeof a);
    a.ndim = sh->ndim;
    for (int d = 0; d < sh->ndim; d++) {
        a.dims[d] = sh->dims[d];
        for (int k = 0; k < 3; k++)
            a.str[k][d] = sh->str[k][d];
    }
    return a;
}

// mask value k of a row (kind 1: additive float32; 2 / 3: bool keep / fill)
__device__ __forceinline__ float masked(float t, const void *mask, int kind, float fill, int64_t off)
{
    if (kind == 1)
        return t + ((const float *)mask)[off];
    return (((const bool *)mask)[off]) == (kind == 3) ? fill : t;
}

// mask offset of (row, 0): the row's index over sh's dims but the last (str[0]: the mask's strides)
__device__ __forceinline__ int64_t mask_row_off(const shape_arg &sh, int64_t row)
{
    int64_t moff = 0, rem = row;
    for (int d = sh.ndim - 2; d >= 0; d--) {
        int64_t k = rem % sh.dims[d];
        rem /= sh.dims[d];
        moff += k * sh.str[0][d];
    }
    return moff;
}

// Tensor-core building blocks of the fused attention and the 4-bit GEMM (sm_80+ PTX): a shared-memory address,
// ldmatrix x4 (plain and transposed), mma.sync m16n8k16 with FP32 accumulation, two floats packed as a half pair.
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

template <typename T> __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma16816<__half>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

#endif
