// INT8 elementwise layers on the GPU (cuda_int8.c): QuantizeLinear and DequantizeLinear with one scale and zero
// point per tensor, com.microsoft QLinearAdd of two tensors of one shape. Each is the CPU reference's float32
// arithmetic, operation for operation (ref/k_quant.c, cpu/qadd.h): IEEE division and products that are not
// contracted into fused multiply-adds (__fdiv_rn, __fmul_rn, __fadd_rn), rintf's ties to even, NaN -> 0 before the
// clamp. So the bytes equal the CPU's.
#include "kernels_int8.cuh"

namespace {

// clamp(v, lo, hi) of a rounded value, NaN -> 0 (ref/k_quant.c sat_round_f after rintf)
__device__ __forceinline__ int sat_q(float r, float lo, float hi)
{
    if (r != r)
        return 0;
    return (int)(r < lo ? lo : (r > hi ? hi : r));
}

// y = sat(rint(x / s) + z) into u8 (S8 false) or s8
template <typename T, bool S8> __global__ void k_quantize(const T *x, uint8_t *y, int64_t n, float s, float z)
{
    const float lo = S8 ? -128.f : 0.f, hi = S8 ? 127.f : 255.f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float r = __fadd_rn(rintf(__fdiv_rn(ldf(x, i), s)), z);
        const int q = sat_q(r, lo, hi);
        y[i] = S8 ? (uint8_t)(int8_t)q : (uint8_t)q;
    }
}

// y = (float)(x - z) * s in the storage T
template <typename T, bool S8> __global__ void k_dequantize(const uint8_t *x, T *y, int64_t n, float s, int z)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int v = S8 ? (int)(int8_t)x[i] : (int)x[i];
        stf(y, i, __fmul_rn((float)(v - z), s));
    }
}

__device__ __forceinline__ int q8v(const uint8_t *p, int64_t i, bool s8) { return s8 ? (int)(int8_t)p[i] : (int)p[i]; }

// c = QLinearAdd's element of a and b (kernels_int8.cuh qadd1)
__global__ void k_qadd(const uint8_t *a, bool as8, const uint8_t *b, bool bs8, uint8_t *c, int64_t n,
                       cuk_qadd_args p)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c[i] = (uint8_t)qadd1(p, q8v(a, i, as8), q8v(b, i, bs8));
}

unsigned grid_of(int64_t n)
{
    const int64_t blocks = (n + 255) / 256;
    return (unsigned)(blocks < 65535 * 32 ? blocks : 65535 * 32);
}

} // namespace

extern "C" cudaError_t cuk_quantize(int fdt, const void *x, uint8_t *y, int64_t n, float scale, int zp, bool s8,
                                    cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    const float z = (float)zp;
    if (s8)
        FDT_DISPATCH(fdt, k_quantize<T, true><<<grid_of(n), 256, 0, s>>>((const T *)x, y, n, scale, z));
    else
        FDT_DISPATCH(fdt, k_quantize<T, false><<<grid_of(n), 256, 0, s>>>((const T *)x, y, n, scale, z));
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_dequantize(int fdt, const uint8_t *x, bool s8, void *y, int64_t n, float scale, int zp,
                                      cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    if (s8)
        FDT_DISPATCH(fdt, k_dequantize<T, true><<<grid_of(n), 256, 0, s>>>(x, (T *)y, n, scale, zp));
    else
        FDT_DISPATCH(fdt, k_dequantize<T, false><<<grid_of(n), 256, 0, s>>>(x, (T *)y, n, scale, zp));
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_qadd(const uint8_t *a, bool as8, const uint8_t *b, bool bs8, uint8_t *c, int64_t n,
                                const cuk_qadd_args *p, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    k_qadd<<<grid_of(n), 256, 0, s>>>(a, as8, b, bs8, c, n, *p);
    return cudaGetLastError();
}
