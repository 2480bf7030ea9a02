// What the stem's two kernels share (kernels_stem.cu: tiles of 7 x 7 pooled pixels, any wgmma-less GPU or geometry;
// kernels_stem_rows.cu: bands of whole rows on Hopper): the copies into shared memory, the half max, and a pooled
// 8-channel piece's store in the half format or quantized.
#ifndef KILN_BACKEND_CUDA_KERNELS_STEM_CUH
#define KILN_BACKEND_CUDA_KERNELS_STEM_CUH
#include "kernels_conv_fp8_wg.cuh"   // cp_async16, cp_commit, cp_wait, sm_count, wg_sm90, wgmma
#include "kernels_int8.cuh"

namespace {

// The filter as both kernels keep it in shared memory: cuk_stem_weights' [k][KP] rows (the reduction (r, s < 8,
// c < 4)) as 16-byte pieces ordered [piece kc][channel n] at (kc * 64 + n) * 16 -- wgmma's no-swizzle core matrices,
// conflict-free rows for ldmatrix
constexpr int KP = 7 * 8 * 4;   // the reduction: 224
constexpr int KC = KP / 8;      // its 16-byte pieces: 28
constexpr int SM_B = 64 * KP * 2;
// channels n0 .. n0 + 63 of w into bs, by cp.async (the caller commits and waits)
template <typename T, int THREADS>
__device__ __forceinline__ void stem_filter_copy(unsigned char *bs, const T *w, int n0, int tid)
{
    for (int i = tid; i < 64 * KC; i += THREADS) {
        const int row = i / KC, kc = i % KC;
        cp_async16(bs + (kc * 64 + row) * 16, w + (int64_t)(n0 + row) * KP + kc * 8, true);
    }
}

// cp.async of N (4, 8 or 16) bytes through L1; invalid: 0 bytes read, the N zero-filled
template <int N> __device__ __forceinline__ void cp_async_ca(void *smem, const void *gmem, bool valid)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    const int n = valid ? N : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(s), "l"(gmem), "n"(N), "r"(n));
}

template <typename T> __device__ __forceinline__ uint32_t hmax2(uint32_t a, uint32_t b);
template <> __device__ __forceinline__ uint32_t hmax2<__half>(uint32_t a, uint32_t b)
{
    __half2 r = __hmax2(*(const __half2 *)&a, *(const __half2 *)&b);
    return *(const uint32_t *)&r;
}
template <> __device__ __forceinline__ uint32_t hmax2<__nv_bfloat16>(uint32_t a, uint32_t b)
{
    __nv_bfloat162 r = __hmax2(*(const __nv_bfloat162 *)&a, *(const __nv_bfloat162 *)&b);
    return *(const uint32_t *)&r;
}
template <typename T> __device__ __forceinline__ uint4 hmax8(uint4 a, uint4 b)
{
    return make_uint4(hmax2<T>(a.x, b.x), hmax2<T>(a.y, b.y), hmax2<T>(a.z, b.z), hmax2<T>(a.w, b.w));
}

// Pooled 8 channels m (halves) at element o of y: 16 bytes in the half format (Q 0) or QuantizeLinear's 8 bytes of
// the half values (1 uint8, 2 int8)
template <typename T, int Q>
__device__ __forceinline__ void stem_store(void *y, int64_t o, uint4 m, const cuk_stem_q &qp)
{
    if constexpr (Q == 0) {
        *(uint4 *)((T *)y + o) = m;
    } else {
        constexpr int lo = Q == 2 ? -128 : 0, hi = Q == 2 ? 127 : 255;
        const T *hv = (const T *)&m;
        uint8_t qb[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float v = ldf(hv, e);
            int32_t c;
            if (!kq_qadd_round(v, qp.inv, qp.zp, lo, hi, &c))
                c = div_round(v, qp.scale, qp.zp, lo, hi);
            qb[e] = (uint8_t)c;
        }
        *(uint2 *)((uint8_t *)y + o) = *(const uint2 *)qb;
    }
}

} // namespace

// kernels_stem_rows.cu: whether its kernel takes the stem (q <= 112, a float32 input 4-byte aligned; the caller has
// found an sm_90 GPU), and its launch (the float32 input x by d's strides; the rest as cuk_stem_pool)
bool stem_rows_fits(const cuk_conv_desc *d, const void *x);
cudaError_t stem_rows(int fdt, const void *x, const void *w8, const float *bias, void *y, const cuk_conv_desc *d,
                      int po, int qo, const cuk_stem_q *q, int flags, cudaStream_t s);
#endif
