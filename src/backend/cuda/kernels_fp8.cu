// FP8 E4M3 quantization for the FP8 GEMM layers (cuda_fp8.c): the same rounding as the CPU's emulation
// (core/numfmt, backend/cpu/lowbit.c: q = e4m3(x / s), round to nearest even, saturating to +-448, NaN ->
// NaN; the weight scales s = amax / 448 per output channel over its finite elements, 1 when that is 0).
#include "kernels_common.cuh"
#include <cuda_fp8.h>

#define E4M3_MAX 448.0f

__device__ __forceinline__ uint8_t to_e4m3(float v, float s)
{
    return (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(v, s), __NV_SATFINITE, __NV_E4M3);
}

// One block per output channel n (a row of the [N, K] view; w is [K, N] when trans, else [N, K]): its
// amax over the finite values, scale[n] = amax / 448 (1 when that is 0), q[n][k] = e4m3(w / scale[n]).
__global__ void k_quant_weight(const float *w, bool trans, int64_t K, int64_t N, float *scale, uint8_t *q)
{
    __shared__ float part[32];
    __shared__ float s_row;
    int64_t n = blockIdx.x;
    float m = 0.0f;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
        float a = fabsf(w[trans ? k * N + n : n * K + k]);
        if (a <= 3.402823466e38f && a > m)
            m = a;
    }
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float a = 0.0f;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++)
            a = fmaxf(a, part[i]);
        float sc = a / E4M3_MAX;
        s_row = sc > 0.0f ? sc : 1.0f;
        scale[n] = s_row;
    }
    __syncthreads();
    float sc = s_row;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
        q[n * K + k] = to_e4m3(w[trans ? k * N + n : n * K + k], sc);
}

cudaError_t cuk_fp8_weight(const float *w, bool trans, int64_t K, int64_t N, float *scale, uint8_t *q, cudaStream_t s)
{
    if (K <= 0 || N <= 0)
        return cudaSuccess;
    k_quant_weight<<<(unsigned)N, 256, 0, s>>>(w, trans, K, N, scale, q);
    return cudaGetLastError();
}

// y[m][n] *= scale[n] over M x N (the weight's per-channel scale after an unscaled FP8 GEMM)
template <typename T> __global__ void k_colscale(T *y, int64_t total, int64_t N, const float *scale)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        stf(y, i, ldf(y, i) * scale[i % N]);
}

cudaError_t cuk_fp8_colscale(int fdt, void *y, int64_t M, int64_t N, const float *scale, cudaStream_t s)
{
    int64_t total = M * N;
    if (total <= 0)
        return cudaSuccess;
    unsigned blocks = (unsigned)((total + 255) / 256 < 65536 ? (total + 255) / 256 : 65536);
    FDT_DISPATCH(fdt, k_colscale<T><<<blocks, 256, 0, s>>>((T *)y, total, N, scale));
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
