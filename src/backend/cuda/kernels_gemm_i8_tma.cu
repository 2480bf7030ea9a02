// The INT8 convolution's configuration 12 (cuda_int8.c, cuk_conv_i8): a 1x1 stride-1 unpadded convolution (or
// QLinearMatMul) as the GEMM Y [M = N*P*Q, K] = X [M, C] W^T it is, in the structure of CUTLASS's Hopper "ping-pong"
// kernels. Why (session 45, H100, ResNet-50 int8 batch 256): every cp.async configuration ran the 1x1 expansions at
// 1.2-2.0 TB/s (cuDNN's FP16 layer1 conv3 2.85 TB/s) and BERT's compute-bound GEMMs at ~435 TOPS: in each, all threads
// of a block copy, wait at a block-wide barrier, multiply and run the epilogue in turn, so a block's tensor cores idle
// through its epilogue and its copies wait for its epilogue.
// Here one block an SM, persistent, of three warpgroups:
// - the producer (its first thread) issues every copy by TMA (cp.async.bulk.tensor: no address arithmetic in any
//   other thread, zeros past M / C / K): the activations [128][BK] and filter rows [128][BK] of each reduction step
//   into a ring of STAGES, and each tile's residual [128][128] bytes (QLinearConvAdd) into a ring of RBUF, running
//   ahead as far as the rings allow, handed over by mbarriers (full: TMA's bytes landed; empty: the consumer is done);
// - two consumers, each owning whole tiles of 128 pixels x 128 channels (the block's tiles alternate between them):
//   one runs its tile's MMAs (wgmma m64n128k32, two a k32 step, one group in flight) while the other runs its
//   epilogue, their turns at the tensor cores ordered by two named barriers. The epilogue is the other wgmma
//   configurations' (store_reg, from the registers: the CPU's bytes), reading the residual in TMA's 128-byte
//   swizzle (res_at).
// Configurations 12 / 13: consumers of one warpgroup (128 accumulators a thread) / two (64 each: twice the warps for the
// epilogues, which bound the memory-bound layers).
// Any other 2-D convolution (3x3, strided, dilated; session 46) runs the same kernel with the activations copied by
// TMA's im2col mode (IM): a reduction step is one filter tap's BK channels of the tile's 128 output pixels, the copy
// engine walking the pixels across rows and images and filling the padding with zeros (the tensor-core kernels take
// a padded input only where its zero point is 0: cuda_int8.c), the filter's KRSC rows read as the matrix [K][R*S*C].
// QLinearConvSum (SUM, session 46: a ResNet stage's first block end, its 1x1 convolution and the stride-2 downsample
// of the block input summed before one rounding) in consumers of one warpgroup over tiles of 64 pixels x 128 channels
// (12), or of two over 128 x 64 (13, session 47): the second convolution's reduction first (x2 by im2col at its
// stride, f2), its sums turned into t2 = (acc2 + bias2) * m2 in registers (64 / 32 a thread beside as many
// accumulators), then the main reduction into the same accumulators; the epilogue adds t2 before its rounding, as the
// cp.async configurations do (kernels_conv_i8.cu).
// Layers of at most 64 output channels without a residual (ResNet's layer1 conv1 / conv2) take tiles of 64 channels
// (NB 64: wgmma m64n64k32), not half-empty ones of 128.
#include "kernels_conv_i8.cuh"
#include "kernels_tma.cuh"
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int PBN = 128, RBUF = 4;
// threads: the producer warpgroup, then two consumers of CW warpgroups (CW 1: one warpgroup multiplies all 128 rows of
// its tile, 128 accumulators a thread; CW 2: two of 64 rows each, 64 a thread, twice the warps for the epilogue). The
// registers a thread may use are set at compile time by the warps an SM sub-partition holds (3 for CW 1: 168; 5 for
// CW 2: 96); the producer gives most of its own back (setmaxnreg), so that the consumers' allocation fits
__host__ __device__ constexpr int pp_threads(int cw) { return 128 * (1 + 2 * cw); }

template <int BK, int STAGES, bool HAS_RES, bool SUM = false, int NB = PBN> struct pp_cfg {
    static constexpr int TBM = SUM && NB == PBN ? 64 : BM;   // a tile's pixels (and NB its channels)
    static constexpr int SA = TBM * BK, SB = NB * BK, STAGE = SA + SB, RES = BM * PBN, NR = HAS_RES ? RBUF : 0;
    // the stages, the residual ring (QLinearConvAdd), each consumer's multipliers and biases [PBN] (1 KB; SUM: and the
    // second convolution's), the mbarriers
    static constexpr int MB = SUM ? 2048 : 1024;
    static constexpr int OFF_R = STAGES * STAGE, OFF_MB = OFF_R + NR * RES, OFF_BAR = OFF_MB + 2 * MB;
    static constexpr int SMEM = 1024 + OFF_BAR + 8 * 2 * (STAGES + RBUF);
};

#if KILN_WGMMA
__device__ __forceinline__ void nbar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void nbar_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
template <int R> __device__ __forceinline__ void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R)); }
template <int R> __device__ __forceinline__ void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R)); }
#endif

#if KILN_WGMMA
// The producer's first thread: every copy of the block's nt tiles, in the order the consumers take the ring's stages
// (k_gemm_i8_pp)
template <int BK, int STAGES, bool RES, bool IM, bool SUM, int NB>
__device__ __forceinline__ void pp_produce(const CUtensorMap &ma, const CUtensorMap &mb, const CUtensorMap &mr,
                                           const CUtensorMap &mf, const cuk_qepi &e, const cuk_conv_desc &d,
                                           uint32_t sb, const tma_bars &bars, int nt, int n_tiles, int steps, int cblk,
                                           int steps2)
{
    using C = pp_cfg<BK, STAGES, RES, SUM, NB>;
    int li = 0;
    for (int j = 0; j < nt; j++) {
        const int tile = (int)blockIdx.x + j * (int)gridDim.x;
        const int m0 = (tile / n_tiles) * C::TBM, n0 = (tile % n_tiles) * NB;
        // IM, SUM: the tile's first output pixel (image in, row p0, column q0), where the im2col walks start
        int in = 0, p0 = 0, q0 = 0;
        if constexpr (IM || SUM) {
            const int pq = d.p * d.q, r = m0 - (in = m0 / pq) * pq;
            p0 = r / d.q;
            q0 = r - p0 * d.q;
        }
        if constexpr (SUM) {   // x2's pixels at the output's (its stride, no padding), then the main steps
            for (int s = 0; s < steps2; s++, li++) {
                const int st = li % STAGES;
                mbar_wait(bars.empty(st), ((li / STAGES) & 1) ^ 1);
                mbar_expect_tx(bars.full(st), C::STAGE);
                tma_load_im2col(sb + st * C::STAGE, &mr, bars.full(st), s * BK, q0 * e.sw2, p0 * e.sh2, in, 0, 0);
                tma_load_2d(sb + st * C::STAGE + C::SA, &mf, bars.full(st), s * BK, n0);
            }
        }
        if (RES) {
            const int rb = j % RBUF;
            mbar_wait(bars.rempty(rb), ((j / RBUF) & 1) ^ 1);
            mbar_expect_tx(bars.rfull(rb), C::RES);
            tma_load_2d(sb + C::OFF_R + rb * C::RES, &mr, bars.rfull(rb), n0, m0);
        }
        int cb = 0, ts = 0, tr = 0;   // IM: the step's channel block, filter column and row
        for (int s = 0; s < steps; s++, li++) {
            const int st = li % STAGES;
            mbar_wait(bars.empty(st), ((li / STAGES) & 1) ^ 1);
            mbar_expect_tx(bars.full(st), C::STAGE);
            if constexpr (IM) {
                // (the walk's start: the input position of the pixel's top-left tap)
                tma_load_im2col(sb + st * C::STAGE, &ma, bars.full(st), cb * BK, q0 * d.sw - d.pw,
                                p0 * d.sh - d.ph, in, (uint16_t)(ts * d.dw), (uint16_t)(tr * d.dh));
                if (++cb == cblk) {
                    cb = 0;
                    if (++ts == d.s)
                        ts = 0, tr++;
                }
            } else {
                tma_load_2d(sb + st * C::STAGE, &ma, bars.full(st), s * BK, m0);
            }
            tma_load_2d(sb + st * C::STAGE + C::SA, &mb, bars.full(st), s * BK, n0);
        }
    }
}
#endif

// Block b's j-th tile is tile b + j * gridDim.x (tile t: pixels (t / n_tiles) * TBM, channels (t % n_tiles) * 128),
// consumer j % 2's. Named barriers: 1 + c, consumer c's turn at the tensor cores (256: its own 128 threads wait, the
// other consumer's 128 arrive when its MMAs are issued and done); 3 + c, consumer c's threads alone.
// SUM: mr is x2's im2col map and mf f2's (steps2 steps of each before the main reduction's steps).
template <int CW, int BK, int STAGES, bool XS8, bool GELU, bool RES, bool IM, bool SUM, int NB>
__global__ void __launch_bounds__(pp_threads(CW), 1)
    k_gemm_i8_pp(const __grid_constant__ CUtensorMap ma, const __grid_constant__ CUtensorMap mb,
                 const __grid_constant__ CUtensorMap mr, const __grid_constant__ CUtensorMap mf, cuk_qepi e,
                 void *__restrict__ y, cuk_conv_desc d, int n_tiles, int tiles, int steps, int cblk, int steps2)
{
#if KILN_WGMMA
    static_assert(!SUM || ((CW == 1) == (NB == PBN) && !RES && !GELU && !IM),
                  "QLinearConvSum: a 1x1 main, consumers of one warpgroup over 128-channel tiles or two over 64");
    static_assert(NB == PBN || (NB == 64 && !RES), "64-channel tiles: no residual");
    using C = pp_cfg<BK, STAGES, RES, SUM, NB>;
    constexpr int TBM = C::TBM;
    // what the epilogue meets: two-warpgroup consumers (96 registers) are lean (rk_lean_fits), else they spill
    constexpr int RK = CW == 2 ? RK_LEAN : RES ? RK_ANY : RK_NONE;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *sm = wg_smem(smem_raw);
    const uint32_t sb = smem_u32(sm), bar0 = sb + C::OFF_BAR;
    const tma_bars bars{bar0, STAGES, RBUF};
    if (threadIdx.x == 0)
        bars.init(128 * CW);
    __syncthreads();
    const int nt = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    constexpr int CT = 128 * CW;   // a consumer's threads
    if (threadIdx.x < 128) {   // the producer
        regs_dec<CW == 1 ? 40 : 24>();
        if (threadIdx.x == 0) {
            pp_produce<BK, STAGES, RES, IM, SUM, NB>(ma, mb, mr, mf, e, d, sb, bars, nt, n_tiles, steps, cblk, steps2);
        }
        return;
    }
    regs_inc<CW == 1 ? 232 : 112>();   // the pool: 168 x 384 (CW 1), 96 x 640 (CW 2), less the producer's
    const int ct = (int)threadIdx.x - 128, cw = ct / CT, lt = ct % CT, wg = lt >> 7;   // consumer, its thread, warpgroup
    float *msm = (float *)(sm + C::OFF_MB + cw * C::MB), *m2sm = msm + 2 * PBN;
    int *bsm = (int *)(msm + PBN), *b2sm = (int *)(m2sm + PBN);
    const int64_t M = (int64_t)d.n * d.p * d.q;
    if (cw == 1 && nt > 0)
        nbar_arrive(1, 2 * CT);   // consumer 0 multiplies first
    for (int j = cw; j < nt; j += 2) {
        const int tile = (int)blockIdx.x + j * (int)gridDim.x;
        const int64_t m0 = (int64_t)(tile / n_tiles) * TBM;
        const int n0 = (tile % n_tiles) * NB, tsteps = steps2 + steps;
        const int li = j * tsteps;   // the tile's first step in the ring's order
        nbar_sync(1 + cw, 2 * CT);   // the other consumer's MMAs are done (and this one's epilogue: msm, bsm free)
        load_mb<NB>(e, d, msm, bsm, n0, lt);
        if (SUM)
            load_mb<NB>(e.m2, e.bias2, d, m2sm, b2sm, n0, lt);
        cp_commit();
        int acc0[NB / 2], acc1[CW == 1 && !SUM ? NB / 2 : 1];
        float t2[SUM ? NB / 2 : 1];
        for (int s = 0; s < tsteps; s++) {
            const int q = li + s, st = q % STAGES;
            mbar_wait(bars.full(st), (q / STAGES) & 1);
            if (SUM && s == steps2) {   // the second convolution's sums are done: t2, and the main reduction starts anew
                wg_wait<0>();
                cp_wait<0>();
                nbar_sync(3 + cw, CT);   // every thread's m2, bias2 landed
                sum_products<NB>(acc0, b2sm, m2sm, lt, t2);
            }
            const uint32_t a_s = sb + st * C::STAGE, b_s = a_s + C::SA;
            wg_fence();
            const uint64_t da0 = wg_desc(a_s + wg * 64 * BK, BK), da1 = wg_desc(a_s + 64 * BK, BK), db = wg_desc(b_s, BK);
#pragma unroll
            for (int kk = 0; kk < BK / 32; kk++) {
                const int in = (s > 0 && (!SUM || s != steps2)) || kk > 0;
                if constexpr (NB == 64) {
                    wgmma_i8_n64<XS8>(acc0, wg_desc_add(da0, 2 * kk), wg_desc_add(db, 2 * kk), in);
                    if constexpr (CW == 1)
                        wgmma_i8_n64<XS8>(acc1, wg_desc_add(da1, 2 * kk), wg_desc_add(db, 2 * kk), in);
                } else {
                    wgmma_i8_n128<XS8>(acc0, wg_desc_add(da0, 2 * kk), wg_desc_add(db, 2 * kk), in);
                    if constexpr (CW == 1 && !SUM)
                        wgmma_i8_n128<XS8>(acc1, wg_desc_add(da1, 2 * kk), wg_desc_add(db, 2 * kk), in);
                }
            }
            wg_commit();
            if (s > 0) {   // the previous step's MMAs are done: its stage goes back to the producer
                wg_wait<1>();
                mbar_arrive(bars.empty((q - 1) % STAGES));
            }
        }
        wg_wait<0>();
        mbar_arrive(bars.empty((li + tsteps - 1) % STAGES));
        if (j + 1 < nt)
            nbar_arrive(2 - cw, 2 * CT);   // the other consumer's turn
        const uint8_t *rt = nullptr;
        if (RES) {
            const int rb = j % RBUF;
            mbar_wait(bars.rfull(rb), (j / RBUF) & 1);
            rt = sm + C::OFF_R + rb * C::RES;
        }
        cp_wait<0>();
        nbar_sync(3 + cw, CT);   // every thread's multipliers and biases landed
        store_reg<NB, GELU, RES ? 128 : 0, RK>(acc0, msm, bsm, rt, e, y, d, M, m0, n0, lt,
                                               SUM ? t2 : nullptr);   // rows wg * 64 ..
        if constexpr (CW == 1 && !SUM)
            store_reg<NB, GELU, RES ? 128 : 0, RK>(acc1, msm, bsm, rt, e, y, d, M, m0, n0, lt + 128);
        if (RES)
            mbar_arrive(bars.rempty(j % RBUF));
    }
#endif
}

// IM: the im2col walk's bounding box in one dimension (output size out at stride st, begin padding pad, input size
// size): the top-left taps of the output pixels, from -pad to the last one's, this far past the input's end
__host__ __forceinline__ int im_hi(int out, int st, int pad, int size) { return (out - 1) * st - pad - size + 1; }
// (the same in both dimensions: cuk_gemm_i8_tma_fits)
__host__ __forceinline__ int im_hi(const cuk_conv_desc *d) { return im_hi(d->p, d->sh, d->ph, d->h); }

template <int CW, int BK, int STAGES, bool XS8, bool GELU, bool RES, bool IM, bool SUM = false, int NB = PBN>
cudaError_t pp_launch(const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d,
                      cudaStream_t s)
{
    using C = pp_cfg<BK, STAGES, RES, SUM, NB>;
    static_assert(C::SMEM <= 227 * 1024, "one block an SM");
    const int64_t M = (int64_t)d->n * d->p * d->q;
    const int n_tiles = (d->k + NB - 1) / NB;
    const int64_t tiles = (M + C::TBM - 1) / C::TBM * n_tiles;
    const int cblk = (d->c + BK - 1) / BK, steps = IM ? d->r * d->s * cblk : cblk;
    const int steps2 = SUM ? (e.c2 + BK - 1) / BK : 0;
    if (tiles >= 0x7fffffff / 2 || M >= 0x7fffffff)
        return cudaErrorInvalidValue;
    CUtensorMap ma, mb, mr, mf;
    const CUtensorMapSwizzle swz = BK == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
    memset(&mr, 0, sizeof mr);
    memset(&mf, 0, sizeof mf);
    const cuk_conv_desc d2 = sum_desc(*d, e);
    if (!(IM ? tma_map_im2col(&ma, x, d->n, d->h, d->w, d->c, -d->ph, im_hi(d), d->sh, d->sw, BM, BK, swz)
             : tma_map(&ma, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, x, M, d->c, C::TBM, BK, swz)) ||
        !tma_map(&mb, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, w, d->k, (int64_t)d->r * d->s * d->c, NB, BK, swz) ||
        (RES && !tma_map(&mr, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, e.res, M, d->k, BM, PBN, CU_TENSOR_MAP_SWIZZLE_128B)) ||
        (SUM && (!tma_map_im2col(&mr, e.x2, d2.n, d2.h, d2.w, d2.c, 0, im_hi(&d2), d2.sh, d2.sw, C::TBM, BK, swz) ||
                 !tma_map(&mf, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, e.f2, d->k, e.c2, NB, BK, swz))))
        return cudaErrorNotSupported;
    auto kern = k_gemm_i8_pp<CW, BK, STAGES, XS8, GELU, RES, IM, SUM, NB>;
    cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (err != cudaSuccess)
        return err;
    const int64_t grid = sm_count() > 0 ? (int64_t)sm_count() : 1;
    kern<<<(unsigned)(grid < tiles ? grid : tiles), pp_threads(CW), C::SMEM, s>>>(ma, mb, mr, mf, e, y, *d, n_tiles,
                                                                                  (int)tiles, steps, cblk, steps2);
    return cudaGetLastError();
}

// 64-byte steps where the reduction is at most 64 bytes (IM: where a tap's channels are not a multiple of 128), else
// 128-byte steps; as many stages as fit beside the residual ring (six / four with it, ten / six without: 160 / 192 KB
// of stages; NB 64: 14 / 8, 168 / 192 KB)
template <int CW, bool XS8, bool GELU, bool RES, bool IM, int NB>
cudaError_t pp_launch_bk(const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d,
                         cudaStream_t s)
{
    constexpr int S64 = NB == 64 ? 14 : RES ? 6 : 10, S128 = NB == 64 ? 8 : RES ? 4 : 6;
    return (IM ? d->c % 128 != 0 : d->c <= 64)
               ? pp_launch<CW, 64, S64, XS8, GELU, RES, IM, false, NB>(x, w, e, y, d, s)
               : pp_launch<CW, 128, S128, XS8, GELU, RES, IM, false, NB>(x, w, e, y, d, s);
}

template <int CW, bool XS8, bool GELU, bool RES, int NB = PBN>
cudaError_t pp_launch_im(const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d,
                         cudaStream_t s)
{
    return fp8_is_gemm(*d) ? pp_launch_bk<CW, XS8, GELU, RES, false, NB>(x, w, e, y, d, s)
                           : pp_launch_bk<CW, XS8, GELU, RES, true, NB>(x, w, e, y, d, s);
}

// tiles of 64 channels where the layer has at most 64 (no residual, no GELU: ResNet's layer1 conv1 / conv2)
template <int CW, bool XS8, bool GELU>
cudaError_t pp_launch_res(const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d,
                          cudaStream_t s)
{
    static const bool n64 = [] {   // KILN_CUDA_INT8_N64=0: 128-channel tiles there too (an A/B switch, read once)
        const char *v = getenv("KILN_CUDA_INT8_N64");
        return !v || strcmp(v, "0") != 0;
    }();
    if constexpr (!GELU)
        if (!e.res && d->k <= 64 && n64)
            return pp_launch_im<CW, XS8, false, false, 64>(x, w, e, y, d, s);
    return e.res ? pp_launch_im<CW, XS8, GELU, true>(x, w, e, y, d, s)
                 : pp_launch_im<CW, XS8, GELU, false>(x, w, e, y, d, s);
}

// QLinearConvSum: 128-byte steps where both reductions' channels are multiples of 128, else 64-byte ones; as many
// stages as fit (CW 1: tiles of 64 pixels x 128 channels, 24 / 12 KB a stage; CW 2: 128 x 64, the same). CW 2 (session
// 47): twice the epilogues' warps with 32 accumulators and 32 values of t2 a thread in 96 registers (layer1's
// QLinearConvSum ran 8 consumer warps an SM at 46% of the issue slots, ncu)
template <int CW, bool XS8>
cudaError_t pp_launch_sum(const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d,
                          cudaStream_t s)
{
    constexpr int NB = CW == 1 ? PBN : 64;
    return d->c % 128 == 0 && e.c2 % 128 == 0
               ? pp_launch<CW, 128, 8, XS8, false, false, false, true, NB>(x, w, e, y, d, s)
               : pp_launch<CW, 64, 14, XS8, false, false, false, true, NB>(x, w, e, y, d, s);
}

template <int CW>
cudaError_t pp_launch_x(bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y,
                        const cuk_conv_desc *d, cudaStream_t s)
{
    if (e.x2)
        return x_s8 ? pp_launch_sum<CW, true>(x, w, e, y, d, s) : pp_launch_sum<CW, false>(x, w, e, y, d, s);
    if (x_s8 && e.act == CUK_GELU)
        return pp_launch_res<CW, true, true>(x, w, e, y, d, s);
    return x_s8 ? pp_launch_res<CW, true, false>(x, w, e, y, d, s) : pp_launch_res<CW, false, false>(x, w, e, y, d, s);
}

} // namespace

// IM: what TMA's im2col mode takes: the bounding box's corners (the same in both dimensions, each in [-128, 127]),
// traversal strides of at most 8, tap offsets in 16 bits; whole 64-channel steps of one tap
static bool im_fits(const cuk_conv_desc *d)
{
    const int hi = im_hi(d), hi_w = im_hi(d->q, d->sw, d->pw, d->w);
    return tma_encoder_im2col() != NULL && d->c % 64 == 0 && d->ph == d->pw && d->ph >= 0 && d->ph <= 128 &&
           hi == hi_w && hi >= -128 && hi <= 127 && d->sh >= 1 && d->sh <= 8 && d->sw >= 1 && d->sw <= 8 &&
           d->dh >= 1 && d->dw >= 1 && (int64_t)(d->r - 1) * d->dh < 65536 && (int64_t)(d->s - 1) * d->dw < 65536 &&
           (int64_t)d->n * d->h * d->w * d->c < ((int64_t)1 << 40);
}

// QLinearConvSum: a 1x1 main convolution (a GEMM), x2 by im2col, its operands 16-byte aligned, no residual
static bool sum_fits(const cuk_conv_desc *d, const cuk_qepi *e)
{
    const cuk_conv_desc d2 = sum_desc(*d, *e);
    return fp8_is_gemm(*d) && !e->res && !e->act && e->out < CUK_QF32 && e->f2 && e->m2 && im_fits(&d2) &&
           ((uintptr_t)e->x2 & 15) == 0 && ((uintptr_t)e->f2 & 15) == 0;
}

extern "C" bool cuk_gemm_i8_tma_fits(int cfg, bool x_s8, const cuk_conv_desc *d, const cuk_qepi *e)
{
    const int64_t M = (int64_t)d->n * d->p * d->q, tiles = (M + 63) / 64 * ((d->k + PBN - 1) / PBN);
    return (cfg == 12 || (cfg == 13 && rk_lean_fits(x_s8, e))) &&   // (13's kernels are lean)
           (fp8_is_gemm(*d) ? d->c % 16 == 0 : im_fits(d)) && d->k % 16 == 0 && (!e->x2 || sum_fits(d, e)) &&
           tma_encoder() != NULL && (!e->res || ((uintptr_t)e->res & 15) == 0) && M < 0x7fffffff &&
           tiles < 0x7fffffff / 2;
}

// Configuration 12 (consumers of one warpgroup) or 13 (of two) where the layer fits (cuk_gemm_i8_tma_fits), else
// cudaErrorNotSupported
extern "C" cudaError_t cuk_gemm_i8_tma(int cfg, bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e,
                                       void *y, const cuk_conv_desc *d, cudaStream_t s)
{
    if (!cuk_gemm_i8_tma_fits(cfg, x_s8, d, e) || ((uintptr_t)x & 15) || ((uintptr_t)w & 15))
        return cudaErrorNotSupported;
    return cfg == 12 ? pp_launch_x<1>(x_s8, x, w, *e, y, d, s) : pp_launch_x<2>(x_s8, x, w, *e, y, d, s);
}
