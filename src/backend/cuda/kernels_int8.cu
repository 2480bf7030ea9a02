// INT8 elementwise layers on the GPU (cuda_int8.c): QuantizeLinear and DequantizeLinear with one scale and zero
// point per tensor, com.microsoft QLinearAdd of two tensors of one shape. Each is the CPU reference's float32
// arithmetic, operation for operation (ref/k_quant.c, cpu/qadd.h): IEEE division and products that are not
// contracted into fused multiply-adds (__fdiv_rn, __fmul_rn, __fadd_rn), rintf's ties to even, NaN -> 0 before the
// clamp. So the bytes equal the CPU's.
#include "kernels_int8.cuh"
#include <cstring>
#include <type_traits>

namespace {

// y = sat(rint(x / s) + z) into u8 (S8 false) or s8; V: 8 elements a thread (16- / 32-byte loads, an 8-byte store;
// x and y 16-byte aligned), the last n % 8 by the first threads one each. The division's rounding from x * is (is =
// kq_inv(s)) where that decides it (backend/qexact.h kq_qadd_round: the same c, as QLinearAdd's), else the division.
template <typename T, bool S8, bool V>
__global__ void k_quantize(const T *x, uint8_t *y, int64_t n, float s, float is, int zp)
{
    constexpr int lo = S8 ? -128 : 0, hi = S8 ? 127 : 255;
    const int64_t t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    auto q1 = [&](float v) {
        int32_t q;
        if (!kq_qadd_round(v, is, zp, lo, hi, &q))
            q = div_round(v, s, zp, lo, hi);
        return S8 ? (uint8_t)(int8_t)q : (uint8_t)q;
    };
    const int64_t n8 = V ? n / 8 : 0;
    for (int64_t i = t0; i < n8; i += step) {
        float f[8];
        ld8(x + i * 8, f);   // kernels_common.cuh: 16 / 32-byte vectors
        uint8_t q[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            q[k] = q1(f[k]);
        *(uint2 *)(y + i * 8) = *(const uint2 *)q;
    }
    for (int64_t i = n8 * 8 + t0; i < n; i += step)
        y[i] = q1(ldf(x, i));
}

// y = (float)(x - z) * s in the storage T; V as k_quantize's
template <typename T, bool S8, bool V> __global__ void k_dequantize(const uint8_t *x, T *y, int64_t n, float s, int z)
{
    const int64_t t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    auto d1 = [&](uint8_t b) { return __fmul_rn((float)((S8 ? (int)(int8_t)b : (int)b) - z), s); };
    const int64_t n8 = V ? n / 8 : 0;
    for (int64_t i = t0; i < n8; i += step) {
        const uint2 u = *(const uint2 *)(x + i * 8);
        const uint8_t *b = (const uint8_t *)&u;
        float f[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            f[k] = d1(b[k]);
        st8(y + i * 8, f);
    }
    for (int64_t i = n8 * 8 + t0; i < n; i += step)
        stf(y, i, d1(x[i]));
}

__device__ __forceinline__ int q8v(uint8_t b, bool s8) { return s8 ? (int)(int8_t)b : (int)b; }

// c = QLinearAdd's element of a and b (kernels_int8.cuh qadd1); V: 8 elements a thread (8-byte loads and store)
template <bool V>
__global__ void k_qadd(const uint8_t *a, bool as8, const uint8_t *b, bool bs8, uint8_t *c, int64_t n, cuk_qadd_args p)
{
    const int64_t t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    const int64_t n8 = V ? n / 8 : 0;
    for (int64_t i = t0; i < n8; i += step) {
        const uint2 ua = *(const uint2 *)(a + i * 8), ub = *(const uint2 *)(b + i * 8);
        const uint8_t *pa = (const uint8_t *)&ua, *pb = (const uint8_t *)&ub;
        uint8_t q[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            q[k] = (uint8_t)qadd1(p, q8v(pa[k], as8), q8v(pb[k], bs8));
        *(uint2 *)(c + i * 8) = *(const uint2 *)q;
    }
    for (int64_t i = n8 * 8 + t0; i < n; i += step)
        c[i] = (uint8_t)qadd1(p, q8v(a[i], as8), q8v(b[i], bs8));
}

// kiln's QLookup: y[i] = t[x[i]'s byte] (the table by value, copied into shared memory); V: 16 bytes a thread (x and y
// 16-byte aligned), the last n % 16 by the first threads one each
struct qtable {
    uint8_t t[256];
};
template <bool V> __global__ void k_qlookup(const uint8_t *x, uint8_t *y, int64_t n, qtable tb)
{
    __shared__ uint8_t t[256];
    t[threadIdx.x] = tb.t[threadIdx.x];   // blockDim.x == 256
    __syncthreads();
    const int64_t t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    const int64_t n16 = V ? n / 16 : 0;
    for (int64_t i = t0; i < n16; i += step) {
        uint4 v = *(const uint4 *)(x + i * 16);
        uint8_t *b = (uint8_t *)&v;
#pragma unroll
        for (int k = 0; k < 16; k++)
            b[k] = t[b[k]];
        *(uint4 *)(y + i * 16) = v;
    }
    for (int64_t i = n16 * 16 + t0; i < n; i += step)
        y[i] = t[x[i]];
}

unsigned grid_of(int64_t n)
{
    const int64_t blocks = (n + 255) / 256;
    return (unsigned)(blocks < 65535 * 32 ? blocks : 65535 * 32);
}

bool al16(const void *p, const void *q) { return (((uintptr_t)p | (uintptr_t)q) & 15) == 0; }

} // namespace

// f(S8, V) with S8 / V std::integral_constant<bool, ...> of the runtime flags s8 (8-bit values signed) and v (8
// elements a thread): the four kernel instances of an elementwise INT8 launcher, chosen once
template <class F> static void s8_vec_dispatch(bool s8, bool v, F f)
{
    if (s8 && v)
        f(std::true_type{}, std::true_type{});
    else if (s8)
        f(std::true_type{}, std::false_type{});
    else if (v)
        f(std::false_type{}, std::true_type{});
    else
        f(std::false_type{}, std::false_type{});
}

extern "C" cudaError_t cuk_quantize(int fdt, const void *x, uint8_t *y, int64_t n, float scale, int zp, bool s8,
                                    cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    const float is = kq_inv(scale);
    const bool v = al16(x, y) && n >= 8;
    const unsigned g = grid_of(v ? (n + 7) / 8 : n);
    s8_vec_dispatch(s8, v, [&](auto S8, auto V) {
        constexpr bool s8c = decltype(S8)::value, vc = decltype(V)::value;
        FDT_DISPATCH(fdt, (k_quantize<T, s8c, vc><<<g, 256, 0, s>>>((const T *)x, y, n, scale, is, zp)));
    });
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_dequantize(int fdt, const uint8_t *x, bool s8, void *y, int64_t n, float scale, int zp,
                                      cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    const bool v = al16(x, y) && n >= 8;
    const unsigned g = grid_of(v ? (n + 7) / 8 : n);
    s8_vec_dispatch(s8, v, [&](auto S8, auto V) {
        constexpr bool s8c = decltype(S8)::value, vc = decltype(V)::value;
        FDT_DISPATCH(fdt, (k_dequantize<T, s8c, vc><<<g, 256, 0, s>>>(x, (T *)y, n, scale, zp)));
    });
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_qlookup(const uint8_t *x, uint8_t *y, int64_t n, const uint8_t *table, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    qtable tb;
    memcpy(tb.t, table, sizeof tb.t);
    if (al16(x, y) && n >= 16)
        k_qlookup<true><<<grid_of((n + 15) / 16), 256, 0, s>>>(x, y, n, tb);
    else
        k_qlookup<false><<<grid_of(n), 256, 0, s>>>(x, y, n, tb);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_qadd(const uint8_t *a, bool as8, const uint8_t *b, bool bs8, uint8_t *c, int64_t n,
                                const cuk_qadd_args *p, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    const bool v = al16(a, b) && al16(c, a) && n >= 8;
    if (v)
        k_qadd<true><<<grid_of((n + 7) / 8), 256, 0, s>>>(a, as8, b, bs8, c, n, *p);
    else
        k_qadd<false><<<grid_of(n), 256, 0, s>>>(a, as8, b, bs8, c, n, *p);
    return cudaGetLastError();
}
