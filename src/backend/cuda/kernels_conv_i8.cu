// QLinearConv's integer convolution on the GPU (cuda_int8.c): an implicit GEMM over u8 (or s8) NHWC activations and
// the s8 KRSC filter, summed exactly in int32, then the CPU's requantizing epilogue (cpu/qgemm.h kiln_qepi, float32
// operation for operation), so that the bytes equal the CPU's. The addressing is the FP8 convolutions' (byte operands
// both: kernels_conv_fp8.cuh): rows are output pixels (n, p, q), the reduction runs over (r, s, c) in 16-byte pieces,
// each within one filter tap because C is a multiple of 16, copied by cp.async (zeros outside the image: the input's
// zero point must be 0 there, cuda_int8.c folds a nonzero one into the bias of unpadded layers).
// Tile: 128 pixels x BN channels, 64-byte reduction steps (128 in configuration 7) copied DIST steps ahead (2; 4 in
// configuration 6, 1 in 7); in the wgmma configurations blocks of
// one row tile run together (its activations are read from memory once). Configurations: 0 mma.sync m16n8k32 (8 warps
// of 64 x 32, BN 128, three stages; any sm_80+ GPU), 1 .. 4 Hopper's wgmma m64nBNk32 (two warpgroups of 64 rows, BN 64
// / 128 / 256 / 64, four stages with one group of MMAs in flight, or as many stages as the reduction has steps; sm_90
// only; 4: BN 64 in 64 registers, four blocks an SM, for memory-bound layers; 5: BN 128 with each step's MMAs waited
// for; 6: BN 128 with the copies four steps ahead, six stages; 7: BN 128 with 128-byte steps, three stages; 8 / 9:
// 1x1 layers only, weight-stationary persistent blocks of BN 128 / 64, kernels_gemm_i8.cu; 10 / 11: 3x3 stride-1
// layers over pixel patches and their halo, BN 64 / 128, kernels_conv3_i8.cu; 12 / 13: 1x1 layers by TMA with a producer
// warpgroup and two alternating consumers of one / two warpgroups, kernels_gemm_i8_tma.cu); u8 or s8 activations in each. The epilogue's operands (per-channel multipliers and biases, the residual tile of QLinearConvAdd) are copied into shared
// memory by cp.async with the reduction's second step, so no global load waits between the stores. Epilogue: wgmma
// configurations from the registers (store_reg: a quad's shuffles give each lane 8 channels of a pixel, one 8-byte
// store; session 29), mma.sync through an int32 tile in shared memory (each thread 16 channels of a pixel: one 16-byte
// store, u8 / s8 with K a multiple of 16, else 8 bytes or 32 per 8 channels). Session 27 (H200, ResNet-50 int8 batch
// 256): the tile epilogue with its operands in shared memory was no faster than one reading them from global memory
// (layer1's conv3 + residual 1.1-1.3 ms either way).
#include "kernels_conv_i8.cuh"

namespace {

constexpr int THREADS = 256;

// Stages of the operands: mma.sync 3 (its MMAs are synchronous: the stage loaded DIST = 2 steps ahead was read a step
// ago), wgmma DIST + 2 (DEEP: one group of MMAs stays in flight, so the stage loaded was read two steps ago) or
// DIST + 1 (each step's MMAs waited for, as mma.sync: session 29's pipeline, configuration 5), or as many as the
// reduction has steps where fewer (no stage is ever refilled: less shared memory, more blocks an SM)
template <bool WG, bool DEEP, int DIST> __host__ __device__ constexpr int n_stages(int steps)
{
    return WG && DEEP ? (steps < DIST + 2 ? steps : DIST + 2) : WG ? (steps < DIST + 1 ? steps : DIST + 1) : 3;
}

template <bool XS8> __device__ __forceinline__ void mma_i8(int *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    if constexpr (XS8)
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The mma.sync configuration's epilogue, first part for rows half * 64 .. + 63 of the tile: a = acc + bias[c]
// (wrapping, as the CPU's int32 sum) into the int32 tile in shared memory, from the m16n8 accumulator fragments of the
// warps of row block wm == half.
__device__ __forceinline__ void acc_to_tile(const int *acc, int *tile, const int *bsm, int tid, int wm, int wn,
                                            int half)
{
    constexpr int TS = 128 + 4;
    const int lane = tid & 31, g = lane >> 2, tig = lane & 3;
    if (wm != half)
        return;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int lc = wn * 32 + j * 8 + tig * 2;
            const int b0 = bsm[lc], b1 = bsm[lc + 1];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                tile[(i * 16 + g + hr * 8) * TS + lc] = add_wrap(acc[(i * 4 + j) * 4 + hr * 2], b0);
                tile[(i * 16 + g + hr * 8) * TS + lc + 1] = add_wrap(acc[(i * 4 + j) * 4 + hr * 2 + 1], b1);
            }
        }
}

// The epilogue's second part for those rows: 16 neighbouring channels of one pixel a thread, requantized (or float
// values) from the tile, the multipliers and QLinearConvAdd's residual bytes in shared memory: one 16-byte store
// (u8 / s8, K a multiple of 16), else 8 bytes or 32 (float32) per 8 channels.
template <int BN, bool GELU>
__device__ __forceinline__ void store_tile(const int *tile, const float *msm, const uint8_t *rsm, const cuk_qepi e,
                                           void *__restrict__ y, const cuk_conv_desc d, int64_t M, int64_t m0, int n0,
                                           int tid, int half)
{
    constexpr int TS = BN + 4;
#pragma unroll 1
    for (int it = 0; it < BN / 64; it++) {
        const int idx = tid + it * THREADS, lr = idx / (BN / 16), lc = (idx % (BN / 16)) * 16;
        const int64_t row = m0 + half * 64 + lr;
        const int col = n0 + lc;
        if (row >= M || col >= d.k)
            continue;
        const int64_t o = row * d.k + col;
        int a[16];
        float m[16];
#pragma unroll
        for (int v = 0; v < 4; v++) {
            const int4 t = *(const int4 *)&tile[lr * TS + lc + 4 * v];
            const float4 f = *(const float4 *)&msm[lc + 4 * v];
            a[4 * v] = t.x, a[4 * v + 1] = t.y, a[4 * v + 2] = t.z, a[4 * v + 3] = t.w;
            m[4 * v] = f.x, m[4 * v + 1] = f.y, m[4 * v + 2] = f.z, m[4 * v + 3] = f.w;
        }
        const bool two = col + 8 < d.k;   // the second 8 channels exist (K is a multiple of 8)
        const uint8_t *r = rsm + (half * 64 + lr) * res_stride(BN) + lc;
        if (e.out >= CUK_QF32) {   // float values, stored as float32, FP16 or BF16
            float v[8];
#pragma unroll
            for (int g8 = 0; g8 < 2; g8++) {
                if (g8 && !two)
                    break;
                if (e.res_float)
                    f_res8(a + 8 * g8, m + 8 * g8, e, *(const uint2 *)(r + 8 * g8), v);
                else
                    f_vals8<GELU>(a + 8 * g8, m + 8 * g8, e, v);
                st8_out(e, y, o + 8 * g8, v);
            }
            continue;
        }
        const uint2 q0 = q_bytes8<GELU>(a, m, e, e.res, e.res ? *(const uint2 *)r : make_uint2(0, 0));
        uint8_t *yo = (uint8_t *)y + o;
        if (!two) {
            *(uint2 *)yo = q0;
            continue;
        }
        const uint2 q1 = q_bytes8<GELU>(a + 8, m + 8, e, e.res, e.res ? *(const uint2 *)(r + 8) : make_uint2(0, 0));
        if (d.k % 16 == 0) {
            *(uint4 *)yo = make_uint4(q0.x, q0.y, q1.x, q1.y);
        } else {
            *(uint2 *)yo = q0;
            *(uint2 *)(yo + 8) = q1;
        }
    }
}


// One 64-byte step of the mma.sync configuration: warp (wm, wn) multiplies its 64 x 32 block, operands by ldmatrix
template <bool XS8>
__device__ __forceinline__ void mma_sync_step(int *acc, const uint8_t *a_s, const uint8_t *b_s, int lane, int wm, int wn)
{
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
        uint32_t a[4][4], b[4][2];
        ldsm_k32(a, b, a_s, b_s, lane, wm, wn, ks);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                mma_i8<XS8>(&acc[(i * 4 + j) * 4], a[i], b[j][0], b[j][1]);
    }
}

// The epilogue's operands of tile (m0, n0), copied with the last stage loaded ahead (landed by the last step's wait at
// the latest): multipliers and biases 4 channels a piece (K is a multiple of 8: whole pieces; no bias: zeros), the
// residual tile in 16-byte pieces where K is a multiple of 16 (else 8-byte ones; zeros past M or K)
template <int BN>
__device__ __forceinline__ void load_epilogue(const cuk_qepi &e, const cuk_conv_desc &d, float *msm, int *bsm,
                                              uint8_t *rsm, int64_t M, int64_t m0, int n0, int tid)
{
    load_mb<BN>(e, d, msm, bsm, n0, tid);
    if (!e.res)
        return;
    if (d.k % 16 == 0 && ((uintptr_t)e.res & 15) == 0) {
#pragma unroll
        for (int it = 0; it < BM * BN / 16 / THREADS; it++) {
            const int i = tid + it * THREADS, r = i / (BN / 16), c = (i % (BN / 16)) * 16;
            const bool ok = m0 + r < M && n0 + c < d.k;
            cp_async16(rsm + r * res_stride(BN) + c, ok ? e.res + (m0 + r) * d.k + n0 + c : e.res, ok);
        }
    } else {
#pragma unroll
        for (int it = 0; it < BM * BN / 8 / THREADS; it++) {
            const int i = tid + it * THREADS, r = i / (BN / 8), c = (i % (BN / 8)) * 8;
            const bool ok = m0 + r < M && n0 + c < d.k;
            cp_async8(rsm + r * res_stride(BN) + c, ok ? e.res + (m0 + r) * d.k + n0 + c : e.res, ok);
        }
    }
}

// SUM (QLinearConvSum, wgmma configurations): the tile runs the second convolution's reduction (x2, f2) first, turns
// its sums into t2 = (float)(acc2 + bias2[c]) * m2[c] in registers, then the main reduction into the same accumulators
// (started again by its first MMA) and the epilogue adds t2 before its one rounding (q_bytes8). The two reductions
// are one pipeline of steps: the copies cross from one to the other without a pause.
template <int BN, bool WG, bool XS8, int MINB, bool DEEP, int DIST, bool GELU, int SK, bool SUM>
__global__ void __launch_bounds__(THREADS, MINB)
    k_conv_i8(const uint8_t *__restrict__ x, const int8_t *__restrict__ w, cuk_qepi e, void *__restrict__ y,
              cuk_conv_desc d, int n_tiles)
{
    constexpr int SA = BM * SK, SB = BN * SK, TS = BN + 4;
    // SK-byte reduction steps (64, or 128 in wgmma configuration 7): PPR 16-byte pieces a row, each thread
    // copying piece tid % PPR of rows tid / PPR + RPP i
    constexpr int PPR = SK / 16, RPP = THREADS / PPR;
    static_assert(SK == 64 || (WG && SK == 128), "64-byte steps, or 128 for wgmma");
    static_assert(WG || 64 * TS * 4 <= n_stages<WG, DEEP, DIST>(1) * (SA + SB), "the epilogue tile over the stages");
    static_assert(WG || BN == 128, "mma.sync: 8 warps of 64 x 32");
    static_assert(WG || !SUM, "QLinearConvSum: wgmma configurations");
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t *sm = wg_smem(smem_raw);
    const int red = d.r * d.s * d.c;   // the reduction length (a multiple of 16)
    const cuk_conv_desc d2 = SUM ? sum_desc(d, e) : d;
    const int red2 = SUM ? d2.c : 0, steps2 = SUM ? (red2 + SK - 1) / SK : 0;   // the second convolution's, first
    const int steps = (red + SK - 1) / SK + steps2;
    const int nst = n_stages<WG, DEEP, DIST>(steps);
    uint8_t *as = sm, *bs = sm + nst * SA;
    // after the stages: the tile's multipliers and biases, then (QLinearConvAdd) its residual [BM][res_stride(BN)],
    // or (QLinearConvSum) the second convolution's multipliers and biases
    float *msm = (float *)(sm + nst * (SA + SB));
    int *bsm = (int *)(msm + BN);
    uint8_t *rsm = (uint8_t *)(bsm + BN);
    float *m2sm = (float *)rsm;
    int *b2sm = (int *)(m2sm + BN);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t M = (int64_t)d.n * d.p * d.q;
    // wgmma: blocks of one row tile run together (its activations are read from memory once): a 2-D grid of (column
    // tile, row tile), whose x runs fastest, or past 65535 row tiles a 1-D one divided here (ncu, session 36: the
    // division was ~20 of the ~800 instructions a thread of a 1x1 layer's tile executes); mma.sync: a 2-D grid of
    // (row tile, column tile) (the 1-D one's tile arithmetic cost it 56 more bytes of spills)
    const int64_t m0 = (int64_t)(WG ? (gridDim.y > 1 ? blockIdx.y : blockIdx.x / n_tiles) : blockIdx.x) * BM;
    const int n0 = (int)(WG ? (gridDim.y > 1 ? blockIdx.x : blockIdx.x % n_tiles) : blockIdx.y) * BN;
    const int ch = tid % PPR;
    const bool gemm = fp8_is_gemm(d);
    const int64_t pq = (int64_t)d.p * d.q;
    const uint8_t *wb = (const uint8_t *)w;
    i8_row ar[BM / RPP];
#pragma unroll
    for (int i = 0; i < BM / RPP; i++)
        ar[i].init(m0 + tid / PPR + i * RPP, M, SUM ? fp8_is_gemm(d2) : gemm, pq, d2);
    fp8_piece pc;   // this thread's piece's position in the reduction, advanced by SK each load
    pc.init(ch * 16, d2);
    // one step's copies from activations xs (geometry dd) and filter fs (rows of rr bytes)
    auto load_from = [&](int stage, const uint8_t *xs, const uint8_t *fs, int rr, const cuk_conv_desc &dd) {
        const bool kok = pc.kc < rr;
        const i8_tap tp(pc, kok, dd);   // this step's tap: once for the thread's rows
#pragma unroll
        for (int i = 0; i < BM / RPP; i++) {
            bool ok;
            const uint8_t *src = ar[i].src(xs, tp, &ok);
            cp_async16(as + stage * SA + wg_swz(tid / PPR + i * RPP, ch, SK), src, ok);
        }
#pragma unroll
        for (int i = 0; i < BN / RPP; i++) {
            const int row = tid / PPR + i * RPP;
            const bool nok = kok && n0 + row < dd.k;
            cp_async16(bs + stage * SB + wg_swz(row, ch, SK), nok ? fs + (int64_t)(n0 + row) * rr + pc.kc : fs, nok);
        }
        pc.advance(SK, dd);
    };
    int li = 0;   // steps loaded (SUM: the second convolution's first)
    auto load = [&](int stage) {
        if constexpr (SUM) {
            if (li == steps2) {   // the main convolution's rows and pieces from here
#pragma unroll
                for (int i = 0; i < BM / RPP; i++)
                    ar[i].init(m0 + tid / PPR + i * RPP, M, gemm, pq, d);
                pc.init(ch * 16, d);
            }
            if (li++ < steps2) {
                load_from(stage, e.x2, (const uint8_t *)e.f2, red2, d2);
                return;
            }
        }
        load_from(stage, x, wb, red, d);
    };
    constexpr int NACC = WG ? BN / 2 : 64;
    // wgmma: the first step's MMA starts the sums (no zeroing moves: with a group in flight, non-wgmma writes of the
    // accumulators made ptxas serialize every wgmma, its C7515); mma.sync accumulates into zeros
    int acc[NACC];
    if constexpr (!WG) {   // (wgmma launches need a reduction of at least one step: cuk_conv_i8)
#pragma unroll
        for (int i = 0; i < NACC; i++)
            acc[i] = 0;
    }
#pragma unroll
    for (int st = 0; st < DIST; st++) {
        if (st < steps)
            load(st);
        if (SUM && st == 0)   // t2's operands, needed when the first reduction ends
            load_mb<BN>(e.m2, e.bias2, d, m2sm, b2sm, n0, tid);
        if (st == DIST - 1)
            load_epilogue<BN>(e, d, msm, bsm, rsm, M, m0, n0, tid);
        cp_commit();
    }
    float t2[SUM ? BN / 2 : 1];
    const int wm = warp & 1, wn = warp >> 1;   // mma.sync: 2 x 4 warps, rows wm * 64, columns wn * 32
    // the stages read and refilled, step % nst and (step + DIST) % nst, as counters (a division by the runtime nst
    // was ~45 instructions a step: ncu, session 36). (DIST % nst once: DIST itself, with no division, timed 0.3-0.8%
    // slower on an H100 -- code placement, not work)
    int rd = 0, wr = DIST % nst;
    for (int step = 0; step < steps; step++) {
        cp_wait<DIST - 1>();
#if KILN_WGMMA
        if constexpr (WG)
            fence_proxy_async();   // the copies visible to wgmma's reads
#endif
        // this step's stage landed for every thread; the stage loaded next was read a step ago (mma.sync) or by a
        // group of MMAs that the last step's wait saw done (wgmma)
        __syncthreads();
        if (step + DIST < steps)
            load(wr);
        cp_commit();
        const uint8_t *a_s = as + rd * SA, *b_s = bs + rd * SB;
        rd = rd + 1 == nst ? 0 : rd + 1;
        wr = wr + 1 == nst ? 0 : wr + 1;
        if constexpr (WG) {
            if constexpr (SUM) {
                if (step == steps2) {   // the second convolution's sums done: t2
#if KILN_WGMMA
                    wg_wait<0>();
#endif
                    sum_products<BN>(acc, b2sm, m2sm, tid, t2);
                }
            }
            wg_i8_step<BN, XS8, SK>(acc, smem_u32(a_s + (tid >> 7) * 64 * SK), smem_u32(b_s),
                                    SUM ? step != 0 && step != steps2 : step > 0);
#if KILN_WGMMA
            wg_wait<DEEP ? 1 : 0>();
#endif
        } else {
            mma_sync_step<XS8>(acc, a_s, b_s, lane, wm, wn);
        }
    }
#if KILN_WGMMA
    if constexpr (WG)
        wg_wait<0>();
#endif
    cp_wait<0>();
    __syncthreads();   // every thread's epilogue copies landed; every warp is done with the stages the tile overlays
    if constexpr (WG) {
#if KILN_WGMMA
        store_reg<BN, GELU>(acc, msm, bsm, rsm, e, y, d, M, m0, n0, tid, SUM ? t2 : nullptr);
#endif
    } else {
        int *tile = (int *)sm;
#pragma unroll 1
        for (int half = 0; half < 2; half++) {
            acc_to_tile(acc, tile, bsm, tid, wm, wn, half);
            __syncthreads();
            store_tile<BN, GELU>(tile, msm, rsm, e, y, d, M, m0, n0, tid, half);
            __syncthreads();   // the tile is rewritten by the other half
        }
    }
}

template <int BN, bool WG, bool XS8, int MINB, bool DEEP, int DIST, bool GELU, int SK, bool SUM = false>
cudaError_t launch(const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d,
                   cudaStream_t s)
{
    const int64_t M = (int64_t)d->n * d->p * d->q;
    const int n_tiles = (d->k + BN - 1) / BN;
    const int64_t tiles = (M + BM - 1) / BM * n_tiles;
    if (tiles >= 0x7fffffff)
        return cudaErrorInvalidValue;
    const int steps = (int)(((int64_t)d->r * d->s * d->c + SK - 1) / SK) + (SUM ? (e.c2 + SK - 1) / SK : 0);
    const int bytes = 1024 + n_stages<WG, DEEP, DIST>(steps) * (BM + BN) * SK + BN * 8 +
                      (SUM ? BN * 8 : e.res ? BM * res_stride(BN) : 0);
    if (bytes > 227 * 1024)
        return cudaErrorNotSupported;   // (a deep configuration's stages with a wide residual tile)
    auto kern = k_conv_i8<BN, WG, XS8, MINB, DEEP, DIST, GELU, SK, SUM>;
    // past 48 KB of shared memory: opted in at every launch (not a stream operation: legal in a capture)
    cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess)
        return err;
    const int64_t m_tiles = (M + BM - 1) / BM;
    const dim3 grid = !WG               ? dim3((unsigned)m_tiles, (unsigned)n_tiles)
                      : m_tiles <= 65535 ? dim3((unsigned)n_tiles, (unsigned)m_tiles)
                                         : dim3((unsigned)tiles);
    kern<<<grid, THREADS, bytes, s>>>(x, w, e, y, *d, n_tiles);
    return cudaGetLastError();
}

// u8 or s8 activations; GELU inline where the layer has it and takes s8 activations in a wgmma configuration (BERT's
// FFN up layers, whose inputs are LayerNorm outputs): elsewhere GELU runs out of line, with the same values
template <int BN, bool WG, int MINB, bool DEEP = true, int DIST = 2, int SK = BK>
cudaError_t launch_x(bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d,
                     cudaStream_t s)
{
    if constexpr (WG) {   // QLinearConvSum: its activation is linear (cuk_conv_i8)
        if (e.x2)
            return x_s8 ? launch<BN, WG, true, MINB, DEEP, DIST, false, SK, true>(x, w, e, y, d, s)
                        : launch<BN, WG, false, MINB, DEEP, DIST, false, SK, true>(x, w, e, y, d, s);
    }
    if (x_s8 && WG && e.act == CUK_GELU)
        return launch<BN, WG, true, MINB, DEEP, DIST, true, SK>(x, w, e, y, d, s);
    return x_s8 ? launch<BN, WG, true, MINB, DEEP, DIST, false, SK>(x, w, e, y, d, s)
                : launch<BN, WG, false, MINB, DEEP, DIST, false, SK>(x, w, e, y, d, s);
}

} // namespace

extern "C" int cuk_conv_i8_configs(void) { return 14; }

extern "C" bool cuk_conv_i8_sum_ok(void) { return wg_sm90() == cudaSuccess; }

extern "C" cudaError_t cuk_conv_i8(int cfg, bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e, void *y,
                                   const cuk_conv_desc *d, cudaStream_t s)
{
    const int64_t M = (int64_t)d->n * d->p * d->q;
    if (cfg < 0 || cfg >= 14 || d->c <= 0 || d->r <= 0 || d->s <= 0 || d->r > 32 || d->s > 32 || d->c % 16 ||
        d->k % 8 || !d->y_nhwc ||
        (int64_t)d->r * d->s * d->c >= 0x7fffffff ||
        (M + BM - 1) / BM >= 0x7fffffff || !e->m || e->out < CUK_QU8 || e->out > CUK_QBF16 ||
        ((uintptr_t)e->m & 15) || ((uintptr_t)y & 15) ||
        (e->res && ((e->out >= CUK_QF32) != !!e->res_float || ((uintptr_t)e->res & 7))) ||
        ((e->out < CUK_QF32 || e->res_float) && !(fabsf(e->lo) < 4194304.0f && fabsf(e->hi) < 4194304.0f)))   // kq_clamp_rint's range
        return cudaErrorInvalidValue;
    // QLinearConvSum: 8-bit outputs without a non-linear activation or residual, its operands aligned, C2 a multiple
    // of 16, the strided pixels inside x2; wgmma configurations only
    if (e->x2 && (e->out >= CUK_QF32 || e->act || e->res || !e->f2 || !e->m2 || ((uintptr_t)e->m2 & 15) ||
                  (e->bias2 && ((uintptr_t)e->bias2 & 15)) || e->c2 <= 0 || e->c2 % 16 || e->sh2 < 1 || e->sw2 < 1 ||
                  (int64_t)(d->p - 1) * e->sh2 >= e->h2 || (int64_t)(d->q - 1) * e->sw2 >= e->w2))
        return cudaErrorInvalidValue;
    if (e->x2 && (cfg == 0 || (cfg >= 8 && cfg <= 11)))   // (12, 13: where cuk_gemm_i8_tma_fits)
        return cudaErrorNotSupported;
    // (tile width, wgmma, blocks an SM)
    if (cfg == 0)
        return launch_x<128, false, 2>(x_s8, x, w, *e, y, d, s);
    const cudaError_t dev = wg_sm90();
    if (dev != cudaSuccess)
        return dev;
    switch (cfg) {
    case 1: return launch_x<64, true, 2>(x_s8, x, w, *e, y, d, s);
    case 2: return launch_x<128, true, 2>(x_s8, x, w, *e, y, d, s);
    case 3: return launch_x<256, true, 1>(x_s8, x, w, *e, y, d, s);
    case 4: return launch_x<64, true, 4>(x_s8, x, w, *e, y, d, s);   // 64 registers: for memory-bound layers
    case 5: return launch_x<128, true, 2, false>(x_s8, x, w, *e, y, d, s);   // session 29's pipeline (3x3 layers)
    // the copies four steps ahead instead of two (session 32: ncu had the 3x3 layers latency-bound, neither L2 nor
    // the tensor cores past ~50% busy, one warp in four eligible); it wins most of ResNet-50's layers 2-4 by 2-5%
    // (BN 64 and 256 so deep won none there, and are not built)
    case 6: return launch_x<128, true, 2, true, 4>(x_s8, x, w, *e, y, d, s);
    // 128-byte reduction steps (the 128-byte swizzle, as the FP8 kernels' widest tiles): half the steps, so half the
    // waits, barriers and fences a tile, copies one step ahead (three stages, two blocks an SM). Session 32, H100: it
    // wins 14 of ResNet-50's 24 timed INT8 layers (layer3's 3x3 0.105 -> 0.094 ms); BN 128 with four stages at one
    // block an SM, and BN 256, won none (not built)
    case 7: return launch_x<128, true, 2, true, 1, 128>(x_s8, x, w, *e, y, d, s);
    // weight-stationary persistent blocks for 1x1 layers (kernels_gemm_i8.cu): BN 128, BN 64
    case 8: case 9: return cuk_gemm_i8(cfg, x_s8, x, w, e, y, d, s);
    // 3x3 stride-1 layers over patches and their halo (kernels_conv3_i8.cu): BN 64, BN 128
    case 10: case 11: return cuk_conv3_i8(cfg, x_s8, x, w, e, y, d, s);
    // 1x1 layers by TMA, a producer warpgroup and two alternating consumers (kernels_gemm_i8_tma.cu)
    default: return cuk_gemm_i8_tma(cfg, x_s8, x, w, e, y, d, s);
    }
}
