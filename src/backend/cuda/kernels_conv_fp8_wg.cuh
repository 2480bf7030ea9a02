// What kiln's two wgmma FP8 convolutions share (kernels_conv_fp8_wg.cu: every thread copies with cp.async;
// kernels_conv_fp8_tma.cu: a producer warp copies with TMA, for 1x1 layers): the epilogue's operands, the MMA of one
// step, the epilogue from the registers and the shared window's alignment.
#ifndef KILN_BACKEND_CUDA_KERNELS_CONV_FP8_WG_CUH
#define KILN_BACKEND_CUDA_KERNELS_CONV_FP8_WG_CUH
#include "kernels_conv_fp8.cuh"
#include "wgmma.cuh"

namespace {

// What the epilogue reads besides the accumulators (scale, inv, rs: device scalars).
template <typename T> struct wg_out {
    const float *scale, *bias;
    const T *res;          // the residual in T, or
    const uint8_t *resq;   // in E4M3 (x *rs)
    const float *rs;
    T *y;
    uint8_t *yq;           // the feed (x *inv)
    const float *inv;
};


// What both C entry points share: the device must be an sm_90 GPU (the module's code for other GPUs has no wgmma or
// TMA; the runtime asked at each launch, which CUDA graph replays skip): cudaSuccess, else the error to return.
static inline cudaError_t wg_sm90(void)
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev))
        return cudaErrorInvalidDevice;
    return major == 9 && minor == 0 ? cudaSuccess : cudaErrorNotSupported;
}

// The device's SM count, asked once (0 where it cannot be read): the persistent kernels' grids (the FP8 TMA
// convolution, the INT8 weight-stationary GEMM)
static inline int sm_count(void)
{
    static const int n = [] {
        int dev = 0, v = 0;
        return cudaGetDevice(&dev) == cudaSuccess &&
                       cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess
                   ? v
                   : 0;
    }();
    return n;
}

// run(o) with o the epilogue's operands in the output storage fdt_y (CUK_F16, CUK_BF16, else float32)
template <typename R>
cudaError_t wg_by_storage(int fdt_y, const float *scale, const float *bias, const void *res, void *y, const float *inv,
                          uint8_t *yq, const uint8_t *resq, const float *rs, R &&run)
{
    auto go = [&](auto tag) {
        using T = decltype(tag);
        const wg_out<T> o = {scale, bias, (const T *)res, resq, rs, (T *)y, yq, inv};
        return run(o);
    };
    if (fdt_y == CUK_F16)
        return go(__half());
    if (fdt_y == CUK_BF16)
        return go(__nv_bfloat16());
    return go(0.f);
}

#if KILN_WGMMA

template <int BN> __device__ __forceinline__ void wg_mma(float *acc, uint64_t da, uint64_t db, int accum)
{
    if constexpr (BN == 64)
        wgmma_n64(acc, da, db, accum);
    else if constexpr (BN == 128)
        wgmma_n128(acc, da, db, accum);
    else
        wgmma_n256(acc, da, db, accum);
}


// 8 values of tile row lr, channels lc .. lc + 7 (at off in the output) through fp8_out8, the residual from the
// tile's copy rt ([BM][BN] of its storage) where given, else from memory.
template <typename T, int BN>
__device__ __forceinline__ void wg_out8(float *v, const wg_out<T> &o, const uint8_t *rt, int lr, int lc, int64_t off,
                                        float rsc, bool relu, float iv)
{
    const int64_t ro = rt ? (int64_t)lr * BN + lc : off;   // the residual's offset
    const uint8_t *rp = o.res ? (const uint8_t *)((rt ? (const T *)rt : o.res) + ro) : o.resq ? (rt ? rt : o.resq) + ro
                                                                                              : NULL;
    fp8_out8<T>(v, rp, o.res == NULL, rsc, relu, o.y ? o.y + off : NULL, o.yq ? o.yq + off : NULL, iv);
}

// The register epilogues (FP8's float sums, INT8's int32 ones): a quad of lanes (t = lane & 3) holds rows g and g + 8
// of each 8-channel group of the 64 x N accumulator, two channels a lane; a 4 x 4 transposition by shuffles gives each
// lane 8 neighbouring channels of one pixel. quad_row: that pixel's row in the tile (tid: the thread's index among
// the tile's 256, two warpgroups of 64 rows).
__device__ __forceinline__ int quad_row(int tid)
{
    return (tid >> 7) * 64 + ((tid & 127) >> 5) * 16 + ((tid & 31) >> 2) + ((tid & 3) >> 1) * 8;
}

// a, b of the lanes t and t ^ mask: the upper lane (hi) takes its partner's b as its a, the lower one its partner's a
// as its b
template <typename V> __device__ __forceinline__ void quad_swap(V &a, V &b, bool hi, int mask)
{
    const V snd = hi ? a : b;
    V rcv;
    rcv.x = __shfl_xor_sync(0xffffffffu, snd.x, mask);
    rcv.y = __shfl_xor_sync(0xffffffffu, snd.y, mask);
    if (hi)
        a = rcv;
    else
        b = rcv;
}

// Pair p of 8-channel groups (2p, 2p + 1) of the accumulator: u[s] = channels 2 s, 2 s + 1 of group 2p + t % 2, row
// quad_row's (V: float2 or int2). Loaded as u[c + 2 h] = group 2p + c, row g + 8 h; the off-diagonal 2 x 2 blocks
// swapped with lane t ^ 2, then inside each block with lane t ^ 1.
template <typename V, typename A> __device__ __forceinline__ void quad_t4(const A *acc, int p, int t, V *u)
{
#pragma unroll
    for (int c = 0; c < 2; c++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            u[c + 2 * h].x = acc[8 * p + 4 * c + 2 * h];
            u[c + 2 * h].y = acc[8 * p + 4 * c + 2 * h + 1];
        }
    quad_swap(u[0], u[2], t & 2, 2);
    quad_swap(u[1], u[3], t & 2, 2);
    quad_swap(u[0], u[1], t & 1, 1);
    quad_swap(u[2], u[3], t & 1, 1);
}

// The epilogue from the registers (REG configurations): no tile in shared memory and no barrier. In the 64 x N
// accumulator a quad of lanes holds rows g and g + 8 of each 8-channel group, two channels a lane; a 4 x 4
// transposition by shuffles inside the quad gives each lane 8 neighbouring channels of one pixel (lane t: row g +
// (t / 2) * 8, group 2p + t % 2 of each pair p), then the same scale + bias and fp8_out8 as wg_epilogue, value for
// value. A warp's stores cover 16 rows x 16 channels: whole 32-byte sectors of FP16.
// tid: the thread's index among the tile's 256 (two warpgroups of 64 rows).
template <typename T, int BN>
__device__ __forceinline__ void wg_epilogue_reg(const float *acc, int64_t m0, int n0, int64_t M,
                                                const cuk_conv_desc &d, const wg_out<T> &o, const uint8_t *rt, int tid)
{
    const int t = tid & 3, lr = quad_row(tid);
    const int64_t row = m0 + lr;
    const float sc = *o.scale, iv = o.yq ? *o.inv : 0.f, rsc = o.resq ? *o.rs : 0.f;
    const bool bias16 = o.bias && ((uintptr_t)o.bias & 15) == 0;
#pragma unroll
    for (int p = 0; p < BN / 16; p++) {
        float2 u[4];
        quad_t4(acc, p, t, u);
        const int lc = (2 * p + (t & 1)) * 8, col = n0 + lc;   // u[s]: channels lc + 2s, lc + 2s + 1
        if (row < M && col < d.k) {
            float v[8], b[8];
            if (bias16) {   // 32-byte aligned: col is a multiple of 8
                const float4 b0 = *(const float4 *)(o.bias + col), b1 = *(const float4 *)(o.bias + col + 4);
                b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w;
                b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    b[e] = o.bias ? o.bias[col + e] : 0.f;
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                v[2 * e] = u[e].x * sc + b[2 * e];
                v[2 * e + 1] = u[e].y * sc + b[2 * e + 1];
            }
            wg_out8<T, BN>(v, o, rt, lr, lc, row * d.k + col, rsc, d.relu, iv);
        }
    }
}
#endif

// 1024-byte aligned in the shared window (the swizzle patterns repeat every 1024 bytes)
__device__ __forceinline__ uint8_t *wg_smem(uint8_t *raw) { return raw + ((1024 - (smem_u32(raw) & 1023)) & 1023); }

} // namespace

#endif
