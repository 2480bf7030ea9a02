// QLinearConv's 3x3 stride-1 convolutions (pad 1, dilation 1, one group) on Hopper's wgmma over a spatial patch and its
// halo (configurations 10 and 11 of cuk_conv_i8; session 37). Why: kernels_conv_i8.cu's tile of 128 consecutive pixels
// reads every input pixel once per filter tap, 9x (ResNet-50 int8 layer1: 744 MB of L2 requests for 102 MB of input and
// output; docs/CUDA.md). Cutting those requests 2.3x alone bought 10% (one patch a block): they were not the bound; the
// persistent form below (the filter kept, the next halo in flight) took layer1's 3x3 from 0.155 to 0.116 ms; layers
// with C > 64 stay faster in configuration 7. Here a block's 128 output pixels are a patch of 16 rows x 8 columns of
// one image; each reduction step copies the patch's 18 x 10 pixel halo (64 channel bytes each: 11.5 KB, zeros outside
// the image) and the 9 taps' filter rows once, and every tap's A operand is the halo shifted by (r, s): in wgmma's
// no-swizzle layout (core matrices of 8 rows x 16 bytes, rows contiguous) the halo is stored [16-byte chunk][pixel], so
// 8 neighbouring pixels of a row are one core matrix at any offset, the next patch row 10 pixels (160 bytes) further --
// one descriptor per tap and 32-byte K step (leading byte offset: the chunk planes, 180 x 16 bytes apart). Warpgroup w
// multiplies patch rows 8w .. 8w + 7. The filter's 9 tap tiles [BN][64] use the 64-byte swizzle of the other kernels.
// Reduction steps of 64 channels, the next step's halo and taps copied (cp.async) while this one's 18 MMAs a warpgroup
// run; where C <= 64 (one step: ResNet's layer1) persistent blocks keep the taps and walk patches with the next halo in
// flight. The epilogue is theirs (store_reg, the CPU's bytes), with the patch's output rows.
#include "kernels_conv_i8.cuh"

namespace {

constexpr int THREADS3 = 256, PH = 16, PW = 8, HH = PH + 2, HW = PW + 2, HPX = HH * HW;   // 180 halo pixels
// a step's halo: 4 chunk planes of 180 x 16 bytes (11,520), padded to 12 KB so that the filter's swizzled tiles after it
// stay 1024-byte aligned (the hardware's swizzle reads the address bits)
constexpr int A3 = 12288;
static_assert(HPX * 64 <= A3, "the halo");

template <int BN> struct c3 {
    static constexpr int B = 9 * BN * 64;   // a step's 9 tap tiles
    static constexpr int STAGE = A3 + B;
};

#if KILN_WGMMA
// Descriptor of a no-swizzle K-major operand: core matrices of 8 rows x 16 bytes (rows contiguous) at saddr, the next
// along K lbo bytes further, the next 8 rows sbo bytes further
__device__ __forceinline__ uint64_t desc_plain(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)((lbo & 0x3FFFF) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFF) >> 4) << 32;
}
#endif

// A patch: image img, output rows py0 .., columns px0 ..
struct patch3 {
    int img, py0, px0;
};
#if KILN_WGMMA   // (the helpers of the kernels' sm_90a bodies: unused, and warned of, in the other passes)
__device__ __forceinline__ patch3 patch_of(int pidx, int pt_h, int pt_w)
{
    const int per_img = pt_h * pt_w, img = pidx / per_img, rem = pidx - img * per_img;
    return {img, rem / pt_w * PH, rem % pt_w * PW};
}

// Channels c0 .. c0 + 63 of patch p's halo into as: 720 16-byte pieces (piece = chunk j of pixel i; zeros outside
// the image or past C)
__device__ __forceinline__ void copy_halo(uint8_t *as, const uint8_t *x, const cuk_conv_desc &d, patch3 p, int c0,
                                          int tid)
{
    const uint8_t *ximg = x + (int64_t)p.img * d.h * d.w * d.c;
    for (int q = tid; q < HPX * 4; q += THREADS3) {
        const int i = q >> 2, j = q & 3, hy = p.py0 - 1 + i / HW, hx = p.px0 - 1 + i % HW, c = c0 + j * 16;
        const bool ok = (unsigned)hy < (unsigned)d.h && (unsigned)hx < (unsigned)d.w && c < d.c;
        cp_async16(as + (j * HPX + i) * 16, ok ? ximg + ((int64_t)hy * d.w + hx) * d.c + c : x, ok);
    }
}

// Channels c0 .. c0 + 63 of the 9 taps' filter rows n0 .. n0 + BN - 1 into bs: tap tiles [BN][64] in the 64-byte
// swizzle (zeros past K or C)
template <int BN>
__device__ __forceinline__ void copy_taps(uint8_t *bs, const uint8_t *wb, const cuk_conv_desc &d, int n0, int c0,
                                          int tid)
{
    const int red = 9 * d.c;   // a filter row's bytes (KRSC)
    for (int q = tid; q < 9 * BN * 4; q += THREADS3) {
        const int tap = q / (BN * 4), r = q % (BN * 4), row = r >> 2, ch = r & 3, c = c0 + ch * 16;
        const bool ok = n0 + row < d.k && c < d.c;
        cp_async16(bs + tap * BN * 64 + wg_swz(row, ch, 64), ok ? wb + (int64_t)(n0 + row) * red + tap * d.c + c : wb,
                   ok);
    }
}

// One 64-channel step's 18 MMAs of warpgroup wg (patch rows 8 wg ..): halo as, tap tiles bs; first: the sums start
template <int BN, bool XS8>
__device__ __forceinline__ void taps_mma(int *acc, uint32_t as, uint32_t bs, int wg, bool first)
{
    wg_fence();
#pragma unroll
    for (int tap = 0; tap < 9; tap++) {
        const int r = tap / 3, s = tap % 3;
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            const uint64_t da = desc_plain(as + ((2 * kk) * HPX + (wg * 8 + r) * HW + s) * 16, HPX * 16, HW * 16);
            const uint64_t db = wg_desc(bs + tap * BN * 64 + kk * 32, 64);
            const int in = !first || tap > 0 || kk > 0;
            if constexpr (BN == 64)
                wgmma_i8_n64<XS8>(acc, da, db, in);
            else
                wgmma_i8_n128<XS8>(acc, da, db, in);
        }
    }
    wg_commit();
}

// The epilogue of patch p's tile (quad_row: warpgroup w's rows 64 w .. are patch rows 8 w ..)
template <int BN>
__device__ __forceinline__ void store_patch(const int *acc, const float *msm, const int *bsm, const cuk_qepi &e,
                                            void *y, const cuk_conv_desc &d, patch3 p, int n0, int tid)
{
    const int lr = quad_row(tid), py = p.py0 + lr / 8, px = p.px0 + lr % 8;
    store_reg<BN, false, 0, RK_NONE>(acc, msm, bsm, nullptr, e, y, d, 0, 0, n0, tid, nullptr, true,   // (no residual)
                                     ((int64_t)p.img * d.p + py) * d.q + px, py < d.p && px < d.q);
}

#endif

// One patch a block, the reduction in 64-channel steps (halo and taps of the next step copied during this one's MMAs)
template <int BN, bool XS8>
__global__ void __launch_bounds__(THREADS3, BN == 64 ? 3 : 1)
    k_conv3_i8(const uint8_t *__restrict__ x, const int8_t *__restrict__ w, cuk_qepi e, void *__restrict__ y,
               cuk_conv_desc d, int pt_h, int pt_w)
{
#if KILN_WGMMA
    using C = c3<BN>;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t *sm = wg_smem(smem_raw);
    const int tid = threadIdx.x, wg = tid >> 7;
    const int steps = (d.c + 63) / 64;
    float *msm = (float *)(sm + (steps > 1 ? 2 : 1) * C::STAGE);
    int *bsm = (int *)(msm + BN);
    const patch3 p = patch_of(blockIdx.y, pt_h, pt_w);
    const int n0 = blockIdx.x * BN;
    copy_halo(sm, x, d, p, 0, tid);
    copy_taps<BN>(sm + A3, (const uint8_t *)w, d, n0, 0, tid);
    load_mb<BN>(e, d, msm, bsm, n0, tid);
    cp_commit();
    int acc[BN / 2];
    for (int k = 0; k < steps; k++) {
        cp_wait<0>();
        fence_proxy_async();
        __syncthreads();   // step k's stage landed for every thread; every warpgroup is done with the other stage
        if (k + 1 < steps) {
            uint8_t *st = sm + ((k + 1) & 1) * C::STAGE;
            copy_halo(st, x, d, p, (k + 1) * 64, tid);
            copy_taps<BN>(st + A3, (const uint8_t *)w, d, n0, (k + 1) * 64, tid);
        }
        cp_commit();
        const uint32_t as = smem_u32(sm + (k & 1) * C::STAGE);
        taps_mma<BN, XS8>(acc, as, as + A3, wg, k == 0);
        wg_wait<0>();
    }
    store_patch<BN>(acc, msm, bsm, e, y, d, p, n0, tid);
#endif
}

// C <= 64 (one step): persistent blocks keep their column tile's 9 tap tiles and walk patches blockIdx.y, +
// gridDim.y, ..., the next patch's halo copied during this one's MMAs and epilogue (two halo buffers)
template <int BN, bool XS8>
__global__ void __launch_bounds__(THREADS3, 3)
    k_conv3_i8_p(const uint8_t *__restrict__ x, const int8_t *__restrict__ w, cuk_qepi e, void *__restrict__ y,
                 cuk_conv_desc d, int pt_h, int pt_w, int patches)
{
#if KILN_WGMMA
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t *sm = wg_smem(smem_raw);
    uint8_t *bsh = sm + 2 * A3;   // the taps, after the two halo buffers
    float *msm = (float *)(bsh + c3<BN>::B);
    int *bsm = (int *)(msm + BN);
    const int tid = threadIdx.x, wg = tid >> 7, n0 = blockIdx.x * BN;
    copy_taps<BN>(bsh, (const uint8_t *)w, d, n0, 0, tid);
    load_mb<BN>(e, d, msm, bsm, n0, tid);
    copy_halo(sm, x, d, patch_of(blockIdx.y, pt_h, pt_w), 0, tid);
    cp_commit();
    int acc[BN / 2];
    int buf = 0;
    for (int pi = blockIdx.y; pi < patches; pi += gridDim.y) {
        cp_wait<0>();
        fence_proxy_async();
        __syncthreads();   // this patch's halo (and the taps) landed; every warpgroup is done with the other buffer
        if (pi + (int)gridDim.y < patches)
            copy_halo(sm + (buf ^ 1) * A3, x, d, patch_of(pi + gridDim.y, pt_h, pt_w), 0, tid);
        cp_commit();
        taps_mma<BN, XS8>(acc, smem_u32(sm + buf * A3), smem_u32(bsh), wg, true);
        wg_wait<0>();
        store_patch<BN>(acc, msm, bsm, e, y, d, patch_of(pi, pt_h, pt_w), n0, tid);
        buf ^= 1;
    }
#endif
}

template <int BN, bool XS8>
cudaError_t launch3(const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const cuk_conv_desc *d,
                    cudaStream_t s)
{
    const int pt_h = (d->p + PH - 1) / PH, pt_w = (d->q + PW - 1) / PW;
    const int64_t patches = (int64_t)d->n * pt_h * pt_w;
    const int n_tiles = (d->k + BN - 1) / BN;
    if (patches > 65535 || n_tiles > 65535)
        return cudaErrorNotSupported;
    const int steps = (d->c + 63) / 64;
    if constexpr (BN == 64) {
    if (steps == 1) {   // persistent: as many blocks as fit, spread over the column tiles
        auto kern = k_conv3_i8_p<BN, XS8>;
        const int bytes = 1024 + 2 * A3 + c3<BN>::B + BN * 8;
        cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        int per_sm = 0;
        if (err == cudaSuccess)
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, THREADS3, bytes);
        if (err != cudaSuccess)
            return err;
        int64_t g = (int64_t)(per_sm > 0 ? per_sm : 1) * sm_count() / n_tiles;
        g = g < 1 ? 1 : g > patches ? patches : g;
        kern<<<dim3((unsigned)n_tiles, (unsigned)g), THREADS3, bytes, s>>>(x, w, e, y, *d, pt_h, pt_w, (int)patches);
        return cudaGetLastError();
    }
    }
    const int bytes = 1024 + (steps > 1 ? 2 : 1) * c3<BN>::STAGE + BN * 8;
    auto kern = k_conv3_i8<BN, XS8>;
    cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess)
        return err;
    kern<<<dim3((unsigned)n_tiles, (unsigned)patches), THREADS3, bytes, s>>>(x, w, e, y, *d, pt_h, pt_w);
    return cudaGetLastError();
}

} // namespace

extern "C" bool cuk_conv3_i8_fits(const cuk_conv_desc *d, const cuk_qepi *e)
{
    const int64_t patches = (int64_t)d->n * ((d->p + PH - 1) / PH) * ((d->q + PW - 1) / PW);
    return d->r == 3 && d->s == 3 && d->sh == 1 && d->sw == 1 && d->ph == 1 && d->pw == 1 && d->dh == 1 &&
           d->dw == 1 && d->p == d->h && d->q == d->w && !e->res && !e->x2 && patches <= 65535 &&
           (d->k + 63) / 64 <= 65535;
}

extern "C" cudaError_t cuk_conv3_i8(int cfg, bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e, void *y,
                                    const cuk_conv_desc *d, cudaStream_t s)
{
    if (!cuk_conv3_i8_fits(d, e))
        return cudaErrorNotSupported;
    if (cfg == 10)
        return x_s8 ? launch3<64, true>(x, w, *e, y, d, s) : launch3<64, false>(x, w, *e, y, d, s);
    return x_s8 ? launch3<128, true>(x, w, *e, y, d, s) : launch3<128, false>(x, w, *e, y, d, s);
}
