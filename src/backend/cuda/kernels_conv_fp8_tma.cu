// kiln's FP8 1x1 convolution on Hopper with TMA copies and a producer warp (session 21; not yet chosen by the
// runtime: see docs/CUDA.md). Why: ResNet-50's memory-bound 1x1 layers (K = 64 .. 512 reductions, a residual, outputs
// of 256 .. 2048 channels) run in kernels_conv_fp8_wg.cu at 1.2-1.7 TB/s, bound by instruction issue and by each
// block's serial copy -> wait -> multiply -> epilogue (ncu: issue slots 58% busy, DRAM 33%); cuBLASLt's FP16 GEMM moves
// the same layer at 3.7 TB/s. Here a 1x1 stride-1 convolution is the GEMM it is (A: the NHWC E4M3 input as [M][C]
// bytes, B: the filter as [K][C]), so one thread copies whole tiles with `cp.async.bulk.tensor` (TMA: no address
// arithmetic in the other threads, zeros past M / C / K), in the 64- / 128-byte swizzle wgmma's descriptors name
// (wg_swz's pattern), and the residual tile too (no swizzle: [BM][BN] of its storage, the layout
// wg_epilogue_reg reads). Persistent blocks walk tiles (blocks of one row tile together), the producer warp running
// up to STAGES reduction steps and RBUF residual tiles ahead, so the next tiles' bytes are in flight while the two
// consumer warpgroups run a tile's MMAs and its epilogue from the registers (wg_epilogue_reg, value for value
// kernels_conv_fp8_wg.cu's). Stages and residual buffers are handed over by mbarriers: full (the producer's expected
// bytes, completed by TMA) and empty (every consumer thread arrives once it no longer reads the buffer).
#include "kernels_conv_fp8_wg.cuh"
#include "kernels_tma.cuh"
#include <string.h>

namespace {

constexpr int BM = 128, THREADS = 384, RBUF = 2;

template <int BN, int BK, int STAGES> struct tma_cfg {   // STAGES reduction steps in flight
    static constexpr int STAGE_A = BM * BK, STAGE_B = BN * BK;
    static constexpr int PIPE = STAGES * (STAGE_A + STAGE_B);
    __host__ __device__ static constexpr int res_bytes(int es) { return BM * BN * es; }
    // 1024 (alignment) + stages + residual buffers + the mbarriers (full / empty per stage and per residual buffer)
    __host__ __device__ static constexpr int smem(int es, bool res)
    {
        return 1024 + PIPE + (res ? RBUF * res_bytes(es) : 0) + 8 * 2 * (STAGES + RBUF);
    }
};

// Persistent: block b takes tiles b, b + grid, ... (tile t: rows (t / n_tiles) * BM, channels (t % n_tiles) * BN).
// Warpgroup 0 is the producer (its first thread issues every copy), 1 and 2 the consumers (64 rows each).
template <typename T, int BN, int BK, int STAGES, bool RES, int MINB>
__global__ void __launch_bounds__(THREADS, MINB)
    k_conv_fp8_tma(const __grid_constant__ CUtensorMap ma, const __grid_constant__ CUtensorMap mb,
                   const __grid_constant__ CUtensorMap mr, wg_out<T> o, cuk_conv_desc d, int n_tiles, int tiles,
                   int steps, int es)
{
#if KILN_WGMMA
    using C = tma_cfg<BN, BK, STAGES>;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *sm = wg_smem(smem_raw);
    const uint32_t sbase = smem_u32(sm), a_s0 = sbase, b_s0 = sbase + STAGES * C::STAGE_A;
    const uint32_t r_s0 = sbase + C::PIPE, rbytes = (uint32_t)C::res_bytes(es);
    const uint32_t bar0 = r_s0 + (RES ? RBUF * rbytes : 0);   // full[STAGES], empty[STAGES], rfull[RBUF], rempty[RBUF]
    const tma_bars bars{bar0, STAGES, RBUF};
    if (threadIdx.x == 0)
        bars.init(256);
    __syncthreads();
    const int64_t M = (int64_t)d.n * d.p * d.q;
    if (threadIdx.x < 128) {   // the producer
        if (threadIdx.x == 0) {
            int li = 0, ri = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                const int m0 = (tile / n_tiles) * BM, n0 = (tile % n_tiles) * BN;
                if (RES) {
                    const int rb = ri % RBUF;
                    mbar_wait(bars.rempty(rb), ((ri / RBUF) & 1) ^ 1);
                    mbar_expect_tx(bars.rfull(rb), rbytes);
                    tma_load_2d(r_s0 + rb * rbytes, &mr, bars.rfull(rb), n0, m0);
                    ri++;
                }
                for (int s = 0; s < steps; s++, li++) {
                    const int st = li % STAGES;
                    mbar_wait(bars.empty(st), ((li / STAGES) & 1) ^ 1);
                    mbar_expect_tx(bars.full(st), C::STAGE_A + C::STAGE_B);
                    tma_load_2d(a_s0 + st * C::STAGE_A, &ma, bars.full(st), s * BK, m0);
                    tma_load_2d(b_s0 + st * C::STAGE_B, &mb, bars.full(st), s * BK, n0);
                }
            }
        }
        return;
    }
    const int ctid = threadIdx.x - 128, wg = ctid >> 7;   // the consumers: rows wg * 64 .. + 63 of each tile
    int li = 0, ri = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t m0 = (int64_t)(tile / n_tiles) * BM;
        const int n0 = (tile % n_tiles) * BN;
        float acc[BN / 2];
        for (int s = 0; s < steps; s++, li++) {
            const int st = li % STAGES;
            mbar_wait(bars.full(st), (li / STAGES) & 1);
            const uint32_t a_s = a_s0 + st * C::STAGE_A + wg * 64 * BK, b_s = b_s0 + st * C::STAGE_B;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 32; kk++)
                wg_mma<BN>(acc, wg_desc(a_s + kk * 32, BK), wg_desc(b_s + kk * 32, BK), s > 0 || kk > 0);
            wg_commit();
            wg_wait<0>();
            mbar_arrive(bars.empty(st));   // this thread's MMAs no longer read the stage
        }
        const uint8_t *rt = NULL;
        if (RES) {
            const int rb = ri % RBUF;
            mbar_wait(bars.rfull(rb), (ri / RBUF) & 1);
            rt = sm + C::PIPE + rb * rbytes;
        }
        wg_epilogue_reg<T, BN>(acc, m0, n0, M, d, o, rt, ctid);
        if (RES) {
            mbar_arrive(bars.rempty(ri % RBUF));
            ri++;
        }
    }
#endif
}

template <typename T, int BN, int BK, int STAGES, bool RES, int MINB>
cudaError_t launch_cfg(const uint8_t *x, const uint8_t *w, const wg_out<T> &o, const cuk_conv_desc *d, cudaStream_t s)
{
    using C = tma_cfg<BN, BK, STAGES>;
    const int64_t M = (int64_t)d->n * d->p * d->q;
    const int n_tiles = (d->k + BN - 1) / BN;
    const int64_t tiles = (M + BM - 1) / BM * n_tiles;
    const int steps = (d->c + BK - 1) / BK;
    const int es = o.res ? (int)sizeof(T) : 1;
    if (tiles >= 0x7fffffff || M >= 0x7fffffff)
        return cudaErrorInvalidValue;
    CUtensorMap ma, mb, mr;
    const CUtensorMapSwizzle swz = BK == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
    const CUtensorMapDataType rdt = es == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                    : es == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                              : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    memset(&mr, 0, sizeof mr);
    if (!tma_map(&ma, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, x, M, d->c, BM, BK, swz) ||
        !tma_map(&mb, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, w, d->k, d->c, BN, BK, swz) ||
        (RES && !tma_map(&mr, rdt, es, o.res ? (const void *)o.res : (const void *)o.resq, M, d->k, BM, BN,
                         CU_TENSOR_MAP_SWIZZLE_NONE)))
        return cudaErrorNotSupported;
    const int bytes = C::smem(es, RES);
    if (bytes > 227 * 1024)
        return cudaErrorNotSupported;
    auto kern = k_conv_fp8_tma<T, BN, BK, STAGES, RES, MINB>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    int per_sm = 0;
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, THREADS, bytes);
    if (e != cudaSuccess)
        return e;
    const int64_t grid = per_sm > 0 && sm_count() > 0 ? (int64_t)per_sm * sm_count() : 0;
    if (grid <= 0)
        return cudaErrorNotSupported;
    kern<<<(unsigned)(grid < tiles ? grid : tiles), THREADS, bytes, s>>>(ma, mb, mr, o, *d, n_tiles, (int)tiles, steps,
                                                                        es);
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch(int cfg, const uint8_t *x, const uint8_t *w, const wg_out<T> &o, const cuk_conv_desc *d,
                   cudaStream_t s)
{
    const bool res = o.res || o.resq;
    constexpr int NS2 = sizeof(T) == 4 ? 2 : 4;   // float32 residual tiles of 128 x 128: 2 stages of 128-byte steps
    switch (cfg) {
    case 0: return res ? launch_cfg<T, 64, 64, 4, true, 2>(x, w, o, d, s)
                       : launch_cfg<T, 64, 64, 4, false, 2>(x, w, o, d, s);
    case 1: return res ? launch_cfg<T, 128, 64, 4, true, 1>(x, w, o, d, s)
                       : launch_cfg<T, 128, 64, 4, false, 1>(x, w, o, d, s);
    default: return res ? launch_cfg<T, 128, 128, NS2, true, 1>(x, w, o, d, s)
                        : launch_cfg<T, 128, 128, 4, false, 1>(x, w, o, d, s);
    }
}

} // namespace

extern "C" int cuk_conv_fp8_tma_configs(void) { return 3; }

extern "C" cudaError_t cuk_conv_fp8_tma(int cfg, int fdt_y, const uint8_t *x, const uint8_t *w, const float *scale,
                                        const float *bias, const void *res, void *y, const float *inv, uint8_t *yq,
                                        const uint8_t *resq, const float *rs, const cuk_conv_desc *d, cudaStream_t s)
{
    const cudaError_t dev = wg_sm90();
    if (dev != cudaSuccess)
        return dev;
    if (cfg < 0 || cfg >= 3 || d->c % 16 || d->k % 8 || !d->y_nhwc ||
        d->r != 1 || d->s != 1 || d->sh != 1 || d->sw != 1 || d->ph || d->pw ||   // 1x1 stride 1: a GEMM
        (yq && !inv) ||
        (!y && !yq) || (resq && (res || !rs || d->k % 16)))
        return cudaErrorInvalidValue;
    return wg_by_storage(fdt_y, scale, bias, res, y, inv, yq, resq, rs,
                         [&](const auto &o) { return launch(cfg, x, w, o, d, s); });
}
