// kiln's FP8 convolution on Hopper's warpgroup MMA (wgmma.mma_async m64nNk32 E4M3, float32 accumulation): the
// operands and epilogue of kernels_conv_fp8.cu (E4M3 NHWC input, KRSC filter, device scale, float32 bias, residual in
// the output's storage or E4M3, the output and / or its E4M3 feed), without mma.sync's per-MMA fragment loads: wgmma
// reads both operands from shared memory through descriptors, so the warps only copy tiles and run the epilogue.
// Why: the mma.sync kernel reaches ~245 TFLOP/s on ResNet-50's 3x3 layers (cuDNN's FP8 engines ~630) and is bound by
// its instruction issue on the memory-bound 1x1 ones (docs/CUDA.md).
// Tile: 128 output pixels x BN output channels, two warpgroups of 64 rows; the reduction in steps of BK bytes (64 or
// 128: one swizzled row of the operand), copied by every thread with cp.async into STAGES buffers, DIST = STAGES - 2
// steps ahead, so that the buffer being filled was read by a wgmma group at least two steps old (each step waits for
// all but its newest group). Configurations (cuk_conv_fp8_wg's cfg): 0 BN 64 / BK 64, 1 BN 128 / BK 64, 2 BN 128 /
// BK 128, 3 BN 256 / BK 128, their epilogue through a float tile in shared memory over the stages; 4 .. 6 the tiles
// of 0 .. 2 with the epilogue from the registers (wg_epilogue_reg, session 21): only as many stages as the reduction
// has steps, the residual tile always prefetched (up to 32 KB), 64 registers for BN 64 (4 blocks an SM): ResNet-50's
// memory-bound 1x1 layers 3-8% faster (bench/conv_fp8.cu). One tile a block; the runtime times every configuration
// per layer (cuda_conv_fp8.c). A 1x1 stride-1 convolution's copies skip the tap arithmetic (wg_loader::gemm). Tried
// and dropped
// (session 20): blocks walking tiles with the copies running ahead across tiles (the epilogue tile and three residual
// tiles beside the stages, so one block an SM): correct, but 1.3-1.7x slower than one tile a block with 2-3 blocks
// an SM on ResNet-50's memory-bound layers (docs/CUDA.md).
#include "kernels_conv_fp8_wg.cuh"

namespace {

constexpr int BM = 128, THREADS = 256, STAGES = 4, DIST = STAGES - 2;

template <int BN, int BK> struct wg_cfg {
    static constexpr int PR = BK / 16;          // 16-byte pieces a row
    static constexpr int RPP = THREADS / PR;    // rows a pass of every thread
    static constexpr int STAGE_A = BM * BK, STAGE_B = BN * BK;
    static constexpr int PIPE = STAGES * (STAGE_A + STAGE_B);
    static constexpr int TS = BN + 4;           // the epilogue tile's row (floats)
    static constexpr int TILE = BM * TS * 4;
    static constexpr int MAIN = PIPE > TILE ? PIPE : TILE;   // one tile a block: the epilogue tile over the stages
    static_assert(BM % RPP == 0 && BN % RPP == 0, "whole passes of the tiles' rows");
    template <typename T> __host__ __device__ static constexpr int res_bytes(bool e4m3)
    {
        return BM * BN * (e4m3 ? 1 : (int)sizeof(T));
    }
};

#if KILN_WGMMA
// One thread's copies of a tile's operands, a reduction step at a time: its rows (pixels) of A, piece ch of each, and
// of B (output channels), by cp.async into the step's stage (zeros outside the image, past the reduction or past K).
template <int BN, int BK> struct wg_loader {
    using C = wg_cfg<BN, BK>;
    fp8_row ar[BM / C::RPP];
    fp8_piece pc;
    const uint8_t *wrow;
    int n0, ch, r0;
    bool gemm;   // a 1x1 stride-1 convolution: row m's piece kc at x + m * c + kc (no taps, nothing outside)
    __device__ __forceinline__ void start(int64_t m0, int n0_, int64_t M, bool gemm_, const uint8_t *w, int red,
                                          const cuk_conv_desc &d)
    {
        const int64_t pq = (int64_t)d.p * d.q;
        gemm = gemm_;
        ch = threadIdx.x % C::PR;
        r0 = threadIdx.x / C::PR;
        n0 = n0_;
#pragma unroll
        for (int i = 0; i < BM / C::RPP; i++)
            ar[i].init(m0 + r0 + i * C::RPP, M, gemm, pq, d);
        pc.init(ch * 16, d);
        wrow = w + (int64_t)(n0 + r0) * red;
    }
    __device__ __forceinline__ void load(uint8_t *sm, int bofs, int stage, const uint8_t *x, const uint8_t *w,
                                         int red, const cuk_conv_desc &d)
    {
        const bool kok = pc.kc < red;
        uint8_t *as = sm + stage * C::STAGE_A, *bs = sm + bofs + stage * C::STAGE_B;
        if (gemm) {
#pragma unroll
            for (int i = 0; i < BM / C::RPP; i++) {
                const bool ok = kok && ar[i].ok;
                cp_async16(as + wg_swz(r0 + i * C::RPP, ch, BK), ok ? x + ar[i].xb + pc.kc : x, ok);
            }
        } else {
#pragma unroll
            for (int i = 0; i < BM / C::RPP; i++) {
                bool ok;
                const uint8_t *src = ar[i].src(x, pc, kok, d, &ok);
                cp_async16(as + wg_swz(r0 + i * C::RPP, ch, BK), src, ok);
            }
        }
#pragma unroll
        for (int i = 0; i < BN / C::RPP; i++) {
            const bool ok = kok && n0 + r0 + i * C::RPP < d.k;
            cp_async16(bs + wg_swz(r0 + i * C::RPP, ch, BK), ok ? wrow + (int64_t)i * C::RPP * red + pc.kc : w, ok);
        }
        pc.advance(BK, d);
    }
};

// One step's MMAs of warpgroup wg on stage `stage` (the accumulator zeroed first where acc is 0).
template <int BN, int BK>
__device__ __forceinline__ void wg_step(float *acc, uint32_t sbase, int bofs, int stage, int wg, bool acc_in)
{
    using C = wg_cfg<BN, BK>;
    const uint32_t a_s = sbase + stage * C::STAGE_A + wg * 64 * BK, b_s = sbase + bofs + stage * C::STAGE_B;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 32; kk++)
        wg_mma<BN>(acc, wg_desc(a_s + kk * 32, BK), wg_desc(b_s + kk * 32, BK), acc_in || kk > 0);
    wg_commit();
}

// A tile's epilogue: x scale + bias in float32 into the [BM][BN + 4] tile, then each thread takes 8 neighbouring
// channels of a pixel (fp8_out8: residual, ReLU, a 16-byte store, 8 bytes of the feed); rt: the tile's residual
// copied into shared memory (PRE), else NULL. Starts with a barrier: every warpgroup is done with the stages the tile
// overlays.
template <typename T, int BN>
__device__ __forceinline__ void wg_epilogue(const float *acc, float *tile, int64_t m0, int n0, int64_t M,
                                            const cuk_conv_desc &d, const wg_out<T> &o, const uint8_t *rt)
{
    constexpr int TS = BN + 4;
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int row0 = (tid >> 7) * 64 + ((tid & 127) >> 5) * 16 + g;
    const float sc = *o.scale, iv = o.yq ? *o.inv : 0.f, rsc = o.resq ? *o.rs : 0.f;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int lc = j * 8 + tig * 2, col = n0 + lc;
        float b0 = 0.f, b1 = 0.f;
        if (o.bias && col < d.k) {
            b0 = o.bias[col];
            b1 = o.bias[col + 1];
        }
#pragma unroll
        for (int hr = 0; hr < 2; hr++)
            *(float2 *)&tile[(row0 + hr * 8) * TS + lc] =
                make_float2(acc[4 * j + 2 * hr] * sc + b0, acc[4 * j + 2 * hr + 1] * sc + b1);
    }
    __syncthreads();
#pragma unroll 4
    for (int it = 0; it < BM * BN / 8 / THREADS; it++) {
        const int idx = tid + it * THREADS, lr = idx / (BN / 8), lc = (idx % (BN / 8)) * 8;
        const int64_t row = m0 + lr;
        const int col = n0 + lc;
        if (row < M && col < d.k) {
            float v[8];
            const float4 t0 = *(const float4 *)&tile[lr * TS + lc], t1 = *(const float4 *)&tile[lr * TS + lc + 4];
            v[0] = t0.x; v[1] = t0.y; v[2] = t0.z; v[3] = t0.w;
            v[4] = t1.x; v[5] = t1.y; v[6] = t1.z; v[7] = t1.w;
            wg_out8<T, BN>(v, o, rt, lr, lc, row * d.k + col, rsc, d.relu, iv);
        }
    }
}

#endif

// Shared memory of a tile: the stages (only as many as the reduction has steps in REG configurations, whose
// epilogue needs no tile; the epilogue tile over them otherwise), then the residual tile where PRE.
template <int BN, int BK, bool REG> __host__ __device__ constexpr int wg_main_bytes(int steps)
{
    using C = wg_cfg<BN, BK>;
    return REG ? (steps < STAGES ? steps : STAGES) * (C::STAGE_A + C::STAGE_B) : C::MAIN;
}

// One tile a block.
template <typename T, int BN, int BK, bool PRE, bool REG, int MINB>
__global__ void __launch_bounds__(THREADS, MINB)
    k_conv_fp8_wg(const uint8_t *__restrict__ x, const uint8_t *__restrict__ w, wg_out<T> o, cuk_conv_desc d,
                  int n_tiles)
{
#if KILN_WGMMA
    using C = wg_cfg<BN, BK>;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *sm = wg_smem(smem_raw);
    const int64_t M = (int64_t)d.n * d.p * d.q;
    const int64_t m0 = (int64_t)(blockIdx.x / n_tiles) * BM;   // blocks of one row tile run together: its
    const int n0 = (int)(blockIdx.x % n_tiles) * BN;           // activations are read from memory once
    const int red = d.r * d.s * d.c;   // the reduction length (a multiple of 16)
    const int steps = (red + BK - 1) / BK;
    const int bofs = (REG && steps < STAGES ? steps : STAGES) * C::STAGE_A;   // the B stages
    uint8_t *rsm = sm + wg_main_bytes<BN, BK, REG>(steps);   // PRE: the residual tile, [BM][BN] of T (or E4M3 bytes)
    wg_loader<BN, BK> ld;
    ld.start(m0, n0, M, fp8_is_gemm(d), w, red, d);
#pragma unroll
    for (int st = 0; st < DIST; st++) {
        if (st < steps)
            ld.load(sm, bofs, st, x, w, red, d);
        if (PRE && st == 0)   // the residual with the first step's operands
            fp8_copy_residual<T, BM, BN, THREADS>(rsm, o.res, o.resq, m0, n0, M, d, threadIdx.x);
        cp_commit();
    }
    float acc[BN / 2];
    const uint32_t sbase = smem_u32(sm);
    for (int step = 0; step < steps; step++) {
        cp_wait<DIST - 1>();   // this thread's pieces of step `step` landed
        fence_proxy_async();   // ... and are visible to wgmma
        __syncthreads();       // every thread's; and every group older than step - 1 is done (wg_wait<1> below)
        if (step + DIST < steps)
            ld.load(sm, bofs, (step + DIST) % STAGES, x, w, red, d);
        cp_commit();
        wg_step<BN, BK>(acc, sbase, bofs, step % STAGES, threadIdx.x >> 7, step > 0);
        wg_wait<1>();
    }
    wg_wait<0>();
    cp_wait<0>();
    if constexpr (REG) {
        if (PRE)
            __syncthreads();   // every thread's residual pieces landed
        wg_epilogue_reg<T, BN>(acc, m0, n0, M, d, o, PRE ? rsm : NULL, threadIdx.x);
    } else {
        wg_epilogue<T, BN>(acc, (float *)sm, m0, n0, M, d, o, PRE ? rsm : NULL);   // the tile over the stages
    }
#endif
}

template <typename T, int BN, int BK, bool PRE, bool REG, int MINB>
cudaError_t launch_cfg(const uint8_t *x, const uint8_t *w, const wg_out<T> &o, const cuk_conv_desc *d, cudaStream_t s)
{
    const int64_t M = (int64_t)d->n * d->p * d->q;
    const int n_tiles = (d->k + BN - 1) / BN;
    const int64_t tiles = (M + BM - 1) / BM * n_tiles;
    if (tiles >= 0x7fffffff)
        return cudaErrorInvalidValue;
    // past 48 KB of shared memory: opted in at every launch (not a stream operation: legal in a capture)
    using C = wg_cfg<BN, BK>;
    const int steps = (int)(((int64_t)d->r * d->s * d->c + BK - 1) / BK);
    const int bytes = 1024 + wg_main_bytes<BN, BK, REG>(steps) + (PRE ? C::template res_bytes<T>(o.res == NULL) : 0);
    auto kern = k_conv_fp8_wg<T, BN, BK, PRE, REG, MINB>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess)
        return e;
    kern<<<(unsigned)tiles, THREADS, bytes, s>>>(x, w, o, *d, n_tiles);
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch(int cfg, const uint8_t *x, const uint8_t *w, const wg_out<T> &o, const cuk_conv_desc *d,
                   cudaStream_t s)
{
    const int64_t red = (int64_t)d->r * d->s * d->c;
    const bool has_res = o.res || (o.resq && d->k % 16 == 0);
    // the residual prefetched with the operands where the reduction is at most DIST steps (memory-bound layers);
    // REG configurations (no epilogue tile over the stages): wherever the residual tile is at most 32 KB
    const bool pre = red <= DIST * 64 && has_res;
    const int es = o.res ? (int)sizeof(T) : 1;
    // (tile width, reduction step, residual prefetched, epilogue from the registers, blocks an SM)
    const bool pre4 = has_res && BM * 64 * es <= 32768, pre56 = has_res && BM * 128 * es <= 32768;
    switch (cfg) {
    case 0: return pre ? launch_cfg<T, 64, 64, true, false, 1>(x, w, o, d, s)
                       : launch_cfg<T, 64, 64, false, false, 1>(x, w, o, d, s);
    case 1: return pre ? launch_cfg<T, 128, 64, true, false, 1>(x, w, o, d, s)
                       : launch_cfg<T, 128, 64, false, false, 1>(x, w, o, d, s);
    case 2: return launch_cfg<T, 128, 128, false, false, 1>(x, w, o, d, s);
    case 3: return launch_cfg<T, 256, 128, false, false, 1>(x, w, o, d, s);
    case 4: return pre4 ? launch_cfg<T, 64, 64, true, true, 4>(x, w, o, d, s)
                        : launch_cfg<T, 64, 64, false, true, 4>(x, w, o, d, s);
    case 5: return pre56 ? launch_cfg<T, 128, 64, true, true, 2>(x, w, o, d, s)
                         : launch_cfg<T, 128, 64, false, true, 2>(x, w, o, d, s);
    default: return pre56 ? launch_cfg<T, 128, 128, true, true, 2>(x, w, o, d, s)
                          : launch_cfg<T, 128, 128, false, true, 2>(x, w, o, d, s);
    }
}

} // namespace

extern "C" int cuk_conv_fp8_wg_configs(void) { return 7; }

extern "C" cudaError_t cuk_conv_fp8_wg(int cfg, int fdt_y, const uint8_t *x, const uint8_t *w, const float *scale,
                                       const float *bias, const void *res, void *y, const float *inv, uint8_t *yq,
                                       const uint8_t *resq, const float *rs, const cuk_conv_desc *d, cudaStream_t s)
{
    const cudaError_t dev = wg_sm90();
    if (dev != cudaSuccess)
        return dev;
    if (cfg < 0 || cfg >= 7 || d->c % 16 || d->k % 8 || !d->y_nhwc || (int64_t)d->r * d->s * d->c >= 0x7fffffff ||
        (yq && !inv) || (!y && !yq) || (resq && (res || !rs)))
        return cudaErrorInvalidValue;
    return wg_by_storage(fdt_y, scale, bias, res, y, inv, yq, resq, rs,
                         [&](const auto &o) { return launch(cfg, x, w, o, d, s); });
}
