// QLinearConv's 3x3 stride-1 convolutions (pad 1, dilation 1, one group) on Hopper's wgmma over a spatial patch and
// its halo (configurations 10 and 11 of cuk_conv_i8; session 37). Why: Nsight Compute had kernels_conv_i8.cu's 3x3
// layers bound by L2 traffic -- the implicit GEMM's tile of 128 consecutive pixels reads every input pixel once per
// filter tap, 9x (ResNet-50 int8 layer1: 744 MB of L2 requests for 102 MB of input and output, 4-6 TB/s through the
// L2; docs/CUDA.md). Here a block's 128 output pixels are a patch of 16 rows x 8 columns of one image; each reduction
// step copies the patch's 18 x 10 pixel halo (64 channel bytes each: 11.5 KB, zeros outside the image) and the 9
// taps' filter rows once, and every tap's A operand is the halo shifted by (r, s): in wgmma's no-swizzle layout (core
// matrices of 8 rows x 16 bytes, rows contiguous) the halo is stored [16-byte chunk][pixel], so 8 neighbouring pixels
// of a row are one core matrix at any offset, the next patch row 10 pixels (160 bytes) further -- one descriptor per
// tap and 32-byte K step (leading byte offset: the chunk planes, 180 x 16 bytes apart). Warpgroup w multiplies patch
// rows 8w .. 8w + 7. The filter's 9 tap tiles [BN][64] use the 64-byte swizzle of the other kernels. Reduction steps
// of 64 channels, the next step's halo and taps copied (cp.async) while this one's 18 MMAs a warpgroup run; the
// epilogue is theirs (store_reg, the CPU's bytes), with the patch's output rows.
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

template <int BN, bool XS8>
__global__ void __launch_bounds__(THREADS3, BN == 64 ? 3 : 1)
    k_conv3_i8(const uint8_t *__restrict__ x, const int8_t *__restrict__ w, cuk_qepi e, void *__restrict__ y,
               cuk_conv_desc d, int pt_h, int pt_w)
{
#if KILN_WGMMA
    using C = c3<BN>;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t *sm = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    const int tid = threadIdx.x;
    const int steps = (d.c + 63) / 64;
    const int nst = steps > 1 ? 2 : 1;
    float *msm = (float *)(sm + nst * C::STAGE);
    int *bsm = (int *)(msm + BN);
    // the patch: image n, output rows py0 .., columns px0 .. (blockIdx.y), output channels n0 .. (blockIdx.x)
    const int pidx = blockIdx.y, per_img = pt_h * pt_w;
    const int img = pidx / per_img, rem = pidx - img * per_img;
    const int py0 = rem / pt_w * PH, px0 = rem % pt_w * PW, n0 = blockIdx.x * BN;
    const int64_t xrow = (int64_t)d.h * d.w * d.c;   // one image's bytes
    const uint8_t *ximg = x + img * xrow;
    const uint8_t *wb = (const uint8_t *)w;
    const int red = 9 * d.c;   // a filter row's bytes (KRSC)
    // step k's copies into stage st: the halo's 720 16-byte pieces (piece = chunk j of pixel i; zeros outside the
    // image or past C), then the 9 tap tiles' BN x 4 pieces (zeros past K or C)
    auto load = [&](int k, int st) {
        uint8_t *as = sm + st * C::STAGE, *bs = as + A3;
        const int c0 = k * 64;
        for (int q = tid; q < HPX * 4; q += THREADS3) {
            const int i = q >> 2, j = q & 3, hy = py0 - 1 + i / HW, hx = px0 - 1 + i % HW, c = c0 + j * 16;
            const bool ok = (unsigned)hy < (unsigned)d.h && (unsigned)hx < (unsigned)d.w && c < d.c;
            cp_async16(as + (j * HPX + i) * 16, ok ? ximg + ((int64_t)hy * d.w + hx) * d.c + c : x, ok);
        }
        for (int q = tid; q < 9 * BN * 4; q += THREADS3) {
            const int tap = q / (BN * 4), r = q % (BN * 4), row = r >> 2, ch = r & 3, c = c0 + ch * 16;
            const bool ok = n0 + row < d.k && c < d.c;
            cp_async16(bs + tap * BN * 64 + wg_swz(row, ch, 64),
                       ok ? wb + (int64_t)(n0 + row) * red + tap * d.c + c : wb, ok);
        }
    };
    load(0, 0);
    load_mb<BN>(e, d, msm, bsm, n0, tid);
    cp_commit();
    int acc[BN / 2];
    const int wg = tid >> 7;
    for (int k = 0; k < steps; k++) {
        cp_wait<0>();
        fence_proxy_async();
        __syncthreads();   // step k's stage landed for every thread; every warpgroup is done with the other stage
        if (k + 1 < steps)
            load(k + 1, (k + 1) & 1);
        cp_commit();
        const uint32_t as = smem_u32(sm + (k & 1) * C::STAGE), bs = as + A3;
        wg_fence();
#pragma unroll
        for (int tap = 0; tap < 9; tap++) {
            const int r = tap / 3, s = tap % 3;
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                const uint64_t da = desc_plain(as + ((2 * kk) * HPX + (wg * 8 + r) * HW + s) * 16, HPX * 16, HW * 16);
                const uint64_t db = wg_desc(bs + tap * BN * 64 + kk * 32, 64);
                const int in = k > 0 || tap > 0 || kk > 0;
                if constexpr (BN == 64)
                    wgmma_i8_n64<XS8>(acc, da, db, in);
                else
                    wgmma_i8_n128<XS8>(acc, da, db, in);
            }
        }
        wg_commit();
        wg_wait<0>();
    }
    cp_wait<0>();
    __syncthreads();   // the epilogue's multipliers and biases landed
    // this thread's output pixel in the patch (quad_row: warpgroup w's rows 64 w .. are patch rows 8 w ..)
    const int lr = quad_row(tid), py = py0 + lr / 8, px = px0 + lr % 8;
    const bool ok = py < d.p && px < d.q;
    store_reg<BN, false>(acc, msm, bsm, nullptr, e, y, d, 0, 0, n0, tid, nullptr, true,
                         ((int64_t)img * d.p + py) * d.q + px, ok);
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
