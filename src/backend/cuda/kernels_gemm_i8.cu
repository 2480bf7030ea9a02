// The INT8 convolution's weight-stationary configurations (cuda_int8.c, configurations 8 and 9 of cuk_conv_i8): a 1x1
// stride-1 unpadded convolution over NHWC activations is the GEMM Y [M = N*P*Q, K] = X [M, C] W^T, each row of X the
// C contiguous bytes of one pixel. Persistent blocks, each owning one BN-channel slice of the filter: the slice
// ([BN][C] s8) and its multipliers and biases are copied into shared memory once, then the block walks row tiles of
// 128 pixels (every G-th, G blocks a slice) with NS stages of operands in flight -- the tile's activations [128][C]
// and QLinearConvAdd's residual tile [128][BN] copied NS - 1 tiles ahead by cp.async -- so the copies of the next
// tiles overlap this tile's MMAs and epilogue. Why (session 34, H100, ResNet-50 int8 batch 256): the per-tile kernels
// (kernels_conv_i8.cu) ran layer1's 64 -> 256 convolutions at a third of the memory's bandwidth (conv3 + residual
// 0.42 ms for 231 MB; 0.31 with the add's arithmetic removed): each short-lived block's prologue, copies, one MMA
// step and epilogue ran one after the other, its filter slice read again by every row tile. The epilogue is the
// per-tile kernels' (store_reg, the CPU's bytes); the MMAs are wgmma m64nBNk32 over 64-byte steps (sm_90 only).
#include "kernels_conv_i8.cuh"

namespace {

constexpr int GT = 256;   // threads: two warpgroups of 64 rows

// Shared memory of one block: the filter slice [steps][BN][64], the multipliers and biases [BN] each, then NS stages
// of [steps][BM][64] activations (and [BM][res_stride(BN)] residual bytes), each part 1024-byte aligned (the swizzle's period)
__host__ __device__ constexpr int al1k(int n) { return (n + 1023) & ~1023; }
__host__ __device__ inline int g_stage_bytes(int steps, int bn, bool res)
{
    return al1k(steps * BM * 64 + (res ? BM * res_stride(bn) : 0));
}
__host__ __device__ inline int g_fixed_bytes(int steps, int bn) { return al1k(steps * bn * 64) + al1k(bn * 8); }

template <int BN, bool XS8, bool GELU, int NS>
__global__ void __launch_bounds__(GT, 2)
    k_gemm_i8(const uint8_t *__restrict__ x, const int8_t *__restrict__ w, cuk_qepi e, void *__restrict__ y,
              cuk_conv_desc d, int n_slices)
{
#if KILN_WGMMA
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t *sm = wg_smem(smem_raw);
    const int red = d.c, steps = (red + 63) / 64, pr = steps * 4;   // 16-byte pieces a row (zeros past C)
    const int64_t M = (int64_t)d.n * d.p * d.q, MT = (M + BM - 1) / BM;
    const int tid = threadIdx.x, slice = blockIdx.x % n_slices, G = gridDim.x / n_slices;
    const int n0 = slice * BN;
    uint8_t *bs = sm;
    float *msm = (float *)(sm + al1k(steps * BN * 64));
    int *bsm = (int *)(msm + BN);
    uint8_t *st0 = sm + g_fixed_bytes(steps, BN);
    const int sbytes = g_stage_bytes(steps, BN, e.res != nullptr);
    const uint8_t *wb = (const uint8_t *)w;
    // the filter slice (rows past K: zeros) and the multipliers / biases: with the first stage's copies
    for (int i = tid; i < BN * pr; i += GT) {
        const int r = i / pr, j = i % pr;
        const bool ok = n0 + r < d.k && j * 16 < red;
        cp_async16(bs + (j >> 2) * BN * 64 + wg_swz(r, j & 3, 64), ok ? wb + (int64_t)(n0 + r) * red + j * 16 : wb, ok);
    }
    load_mb<BN>(e, d, msm, bsm, n0, tid);
    // this thread's activation pieces, where pr divides the block (C a power-of-two multiple of 64 up to 4096: every
    // ResNet / BERT layer) decomposed once (tile_pieces)
    const tile_pieces tp(tid, pr, GT);
    // row tile t into stage s: its activations, and the residual tile (K a multiple of 16: cuk_conv_i8's check)
    auto load = [&](int s, int64_t t) {
        uint8_t *as = st0 + s * sbytes;
        const int64_t m0 = t * BM;
        if (tp.even) {
            const int64_t left = M - m0;
            const bool jok = tp.j0 * 16 < red;
            uint8_t *dst = as + (tp.j0 >> 2) * BM * 64;
            const uint8_t *src = x + (m0 + tp.r0) * red + tp.j0 * 16;
            const int64_t sstep = (int64_t)tp.rstep * red;
            for (int r = tp.r0; r < BM; r += tp.rstep, src += sstep) {
                const bool ok = jok && r < left;
                cp_async16(dst + wg_swz(r, tp.j0 & 3, 64), ok ? src : x, ok);
            }
        } else {
            for (int i = tid; i < BM * pr; i += GT) {
                const int r = i / pr, j = i % pr;
                const bool ok = m0 + r < M && j * 16 < red;
                cp_async16(as + (j >> 2) * BM * 64 + wg_swz(r, j & 3, 64), ok ? x + (m0 + r) * red + j * 16 : x, ok);
            }
        }
        if (e.res) {
            uint8_t *rs = as + steps * BM * 64;
#pragma unroll
            for (int it = 0; it < BM * BN / 16 / GT; it++) {
                const int i = tid + it * GT, r = i / (BN / 16), c = (i % (BN / 16)) * 16;
                const bool ok = m0 + r < M && n0 + c < d.k;
                cp_async16(rs + r * res_stride(BN) + c, ok ? e.res + (m0 + r) * d.k + n0 + c : e.res, ok);
            }
        }
    };
    const int64_t g = blockIdx.x / n_slices;
#pragma unroll
    for (int s = 0; s < NS - 1; s++) {   // one group a stage (empty past the last tile): uniform waits
        if (g + s * G < MT)
            load(s, g + s * G);
        cp_commit();
    }
    int acc[BN / 2];
    int s = 0;
    for (int64_t t = g; t < MT; t += G) {
        cp_wait<NS - 2>();
        fence_proxy_async();   // the copies visible to wgmma's reads
        // tile t's stage landed for every thread; the stage refilled next held the previous tile, whose MMAs were
        // waited for and whose epilogue every thread finished before this barrier
        __syncthreads();
        const int64_t tn = t + (int64_t)(NS - 1) * G;
        if (tn < MT)
            load((s + NS - 1) % NS, tn);
        cp_commit();
        const uint8_t *as = st0 + s * sbytes;
        for (int k = 0; k < steps; k++)
            wg_i8_step<BN, XS8, 64>(acc, smem_u32(as + k * BM * 64 + (tid >> 7) * 64 * 64), smem_u32(bs + k * BN * 64),
                                    k > 0);
        wg_wait<0>();
        constexpr int RK = BN == 128 ? RK_LEAN : RK_ANY;   // (BN 128: lean, rk_lean_fits; else it spills)
        store_reg<BN, GELU, 0, RK>(acc, msm, bsm, as + steps * BM * 64, e, y, d, M, t * BM, n0, tid);
        s = s + 1 == NS ? 0 : s + 1;
    }
    cp_wait<0>();
#endif
}

// The stages that fit two blocks an SM (else one), at least two and at most four; 0: the slice does not fit
int g_stages(int steps, int bn, bool res, int *blocks)
{
    const int fixed = g_fixed_bytes(steps, bn) + 1024, st = g_stage_bytes(steps, bn, res);
    const int per_sm = 227 * 1024;
    for (int b = 2; b >= 1; b--)
        for (int ns = 4; ns >= 2; ns--)
            if ((fixed + ns * st) * b <= per_sm) {
                *blocks = b;
                return ns;
            }
    return 0;
}

template <int BN, bool XS8, bool GELU, int NS>
cudaError_t g_launch(const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d, int blocks,
                     cudaStream_t s)
{
    const int steps = (d->c + 63) / 64, n_slices = (d->k + BN - 1) / BN;
    const int bytes = 1024 + g_fixed_bytes(steps, BN) + NS * g_stage_bytes(steps, BN, e.res != nullptr);
    const int64_t M = (int64_t)d->n * d->p * d->q, MT = (M + BM - 1) / BM;
    // G blocks a slice: the SMs' resident blocks shared among the slices, no more than the row tiles
    int64_t G = ((int64_t)sm_count() * blocks + n_slices - 1) / n_slices;
    G = G < 1 ? 1 : G > MT ? MT : G;
    if (G * n_slices >= 0x7fffffff)
        return cudaErrorInvalidValue;
    auto kern = k_gemm_i8<BN, XS8, GELU, NS>;
    cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess)
        return err;
    kern<<<(unsigned)(G * n_slices), GT, bytes, s>>>(x, w, e, y, *d, n_slices);
    return cudaGetLastError();
}

template <int BN, bool XS8, bool GELU>
cudaError_t g_launch_ns(const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d,
                        cudaStream_t s)
{
    int blocks = 0;
    const int ns = g_stages((d->c + 63) / 64, BN, e.res != nullptr, &blocks);
    if (ns == 4)
        return g_launch<BN, XS8, GELU, 4>(x, w, e, y, d, blocks, s);
    if (ns == 3)
        return g_launch<BN, XS8, GELU, 3>(x, w, e, y, d, blocks, s);
    if (ns == 2)
        return g_launch<BN, XS8, GELU, 2>(x, w, e, y, d, blocks, s);
    return cudaErrorNotSupported;
}

} // namespace

// The filter slice's width of configuration cfg (8 or 9)
static int g_bn(int cfg) { return cfg == 8 ? 128 : 64; }

// Configuration 8 (BN 128) or 9 (BN 64) where the layer is one (cuk_gemm_i8_fits), else cudaErrorNotSupported
extern "C" cudaError_t cuk_gemm_i8(int cfg, bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e, void *y,
                                   const cuk_conv_desc *d, cudaStream_t s)
{
    if (!cuk_gemm_i8_fits(cfg, x_s8, d, e))
        return cudaErrorNotSupported;
    const bool gelu = x_s8 && e->act == CUK_GELU;
    if (g_bn(cfg) == 128)
        return gelu ? g_launch_ns<128, true, true>(x, w, *e, y, d, s)
                    : x_s8 ? g_launch_ns<128, true, false>(x, w, *e, y, d, s) : g_launch_ns<128, false, false>(x, w, *e, y, d, s);
    return gelu ? g_launch_ns<64, true, true>(x, w, *e, y, d, s)
                : x_s8 ? g_launch_ns<64, true, false>(x, w, *e, y, d, s) : g_launch_ns<64, false, false>(x, w, *e, y, d, s);
}

extern "C" bool cuk_gemm_i8_fits(int cfg, bool x_s8, const cuk_conv_desc *d, const cuk_qepi *e)
{
    int blocks = 0;
    return (cfg == 9 || (cfg == 8 && rk_lean_fits(x_s8, e))) && fp8_is_gemm(*d) && d->k % 16 == 0 && !e->x2 &&
           (!e->res || ((uintptr_t)e->res & 15) == 0) &&
           g_stages((d->c + 63) / 64, g_bn(cfg), e->res != nullptr, &blocks) > 0;
}
