// FP8 E4M3 quantization of the FP8 GEMM layers' activations (cuda_fp8.c): the same rounding as the CPU's
// emulation (core/numfmt: q = e4m3(x / s), round to nearest even, saturating to +-448, NaN -> NaN). The layers'
// weights come quantized by the CPU backend (its KILN_PREP_LOWBIT_W blob, backend/lowbit_blob.h).
#include "kernels_common.cuh"

// 8 elements per thread: 16- (or 2 x 16-) byte loads, one 8-byte store; vec only when n % 8 == 0 and the
// pointers are aligned, else one element per thread. The IEEE division here: this pass is memory-bound with it
// (H200, 16384 x 768 FP16: 10.8 us, 14.5 with to_e4m3's bracket), the producers' feeds are not (to_e4m3).
template <typename T> __global__ void k_quant_act(const T *x, uint8_t *q, int64_t n, float s, bool vec)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (!vec) {
        if (i < n)
            q[i] = to_e4m3_div(ldf(x, i), s);
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
        o[k] = to_e4m3_div(ldf(v, k), s);
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

// y = q x s in the storage T (an E4M3-held tensor widened, cuda_conv_fp8.c).
template <typename T> __global__ void k_dequant_act(const uint8_t *q, T *y, int64_t n, float s)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        stf(y, i, e4m3_val(q[i]) * s);
}

cudaError_t cuk_fp8_dequant(int fdt, const uint8_t *q, void *y, int64_t n, float scale, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    int64_t blocks = (n + 255) / 256;
    unsigned g = (unsigned)(blocks < 65535 * 32 ? blocks : 65535 * 32);
    FDT_DISPATCH(fdt, k_dequant_act<T><<<g, 256, 0, s>>>(q, (T *)y, n, scale));
    return cudaGetLastError();
}
