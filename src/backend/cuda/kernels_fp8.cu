// FP8 E4M3 quantization for the FP8 GEMM layers (cuda_fp8.c): the same rounding as the CPU's emulation
// (core/numfmt: q = e4m3(x / s), round to nearest even, saturating to +-448, NaN -> NaN; the weight scale
// s = amax / 448 over the finite elements, 1 when that is 0).
#include "kernels_common.cuh"
#include <cuda_fp8.h>

#define E4M3_MAX 448.0f

__device__ __forceinline__ uint8_t to_e4m3(float v, float s)
{
    return (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(v, s), __NV_SATFINITE, __NV_E4M3);
}

// *amax_bits = max over finite |w| (float bits compare as unsigned for non-negative floats)
__global__ void k_amax(const float *w, int64_t n, unsigned *amax_bits)
{
    float m = 0.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float a = fabsf(w[i]);
        if (a <= 3.402823466e38f && a > m)
            m = a;
    }
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0)
        atomicMax(amax_bits, __float_as_uint(m));
}

__global__ void k_scale(const unsigned *amax_bits, float *scale)
{
    float s = __uint_as_float(*amax_bits) / E4M3_MAX;
    *scale = s > 0.0f ? s : 1.0f;
}

// q[n][k] = e4m3(w / s) with w [K][N] (trans) or [N][K]
__global__ void k_quant_weight(const float *w, bool trans, int64_t K, int64_t N, const float *scale, uint8_t *q)
{
    float s = *scale;
    int64_t total = K * N;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / K, k = i - n * K;
        q[i] = to_e4m3(w[trans ? k * N + n : i], s);
    }
}

cudaError_t cuk_fp8_weight(const float *w, bool trans, int64_t K, int64_t N, unsigned *amax_bits, float *scale,
                           uint8_t *q, cudaStream_t s)
{
    int64_t n = K * N;
    cudaError_t e = cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), s);
    if (e != cudaSuccess || n <= 0)
        return e;
    int blocks = (int)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
    k_amax<<<blocks, 256, 0, s>>>(w, n, amax_bits);
    k_scale<<<1, 1, 0, s>>>(amax_bits, scale);
    k_quant_weight<<<blocks, 256, 0, s>>>(w, trans, K, N, scale, q);
    return cudaGetLastError();
}

// 8 elements per thread: 16- (or 2 x 16-) byte loads, one 8-byte store; vec only when n % 8 == 0 and the
// pointers are aligned, else one element per thread.
template <typename T> __global__ void k_quant_act(const T *x, uint8_t *q, int64_t n, float s, bool vec)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (!vec) {
        if (i < n)
            q[i] = to_e4m3(ldf(x, i), s);
        return;
    }
    if (i * 8 >= n)
        return;
    T v[8];
    if (sizeof(T) == 2) {
        *(uint4 *)v = ((const uint4 *)x)[i];
    } else {
        ((uint4 *)v)[0] = ((const uint4 *)x)[2 * i];
        ((uint4 *)v)[1] = ((const uint4 *)x)[2 * i + 1];
    }
    uint8_t o[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        o[k] = to_e4m3(ldf(v, k), s);
    ((uint2 *)q)[i] = *(const uint2 *)o;
}

cudaError_t cuk_fp8_quant(int fdt, const void *x, uint8_t *q, int64_t n, float scale, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    bool vec = n % 8 == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)q % 8) == 0;
    int64_t threads = vec ? n / 8 : n;
    unsigned blocks = (unsigned)((threads + 255) / 256);
    FDT_DISPATCH(fdt, k_quant_act<T><<<blocks, 256, 0, s>>>((const T *)x, q, n, scale, vec));
    return cudaGetLastError();
}
