// The stem kernel on Hopper (sm_90a) for images up to 224 wide (ResNet's): the FusedConvPool layer of
// kernels_stem.cu -- a 7x7 stride-2 convolution over <= 4 channels, bias, ReLU, the 3x3 stride-2 max pool, stored in
// the half format or quantized -- computed a whole convolution row at a time: no convolution pixel computed twice,
// the tensor cores running while the block pools, converts and copies.
//
// A persistent block (one an SM, two warpgroups) owns 64 output channels and walks bands of pooled rows of one image.
// Step s of a band computes convolution rows 2 (ph0 + s) - 1 (warpgroup 0) and 2 (ph0 + s) (warpgroup 1), each one
// wgmma chain m64n112k16 x 14: D [64 channels][112 pixels] = filter [64][224] x the row's implicit im2col [112][224].
// The filter is A, in registers for the whole kernel (each warp's 16 channels, 56 registers, read once by ldmatrix
// from kernels_stem.cu's [piece][channel] order); B comes by descriptor straight from the input halo: input rows in
// the half format as [column + 3][4 channels] (8 bytes a pixel), where the reduction's 16-byte piece of pixel j at
// taps (s, s + 1) of filter row r starts at byte 16 j + 8 s of input row 2 row - 3 + r: 8 pixels' pieces are 128
// contiguous bytes (one no-swizzle core matrix), the next 8 pixels' 128 bytes on, the next taps' 16 bytes on (LBO 16,
// SBO 128: core matrices overlapping, the im2col without a copy). The reduction runs over (r, s < 8, c < 4) as in
// kernels_stem.cu: tap 7 and channels past c zero in the filter.
//
// The epilogue pools the row along itself in registers (a shuffle brings each pixel pair its left neighbour), adds
// the bias and applies ReLU after that max (both monotone: the same values as before it), rounds to the half format
// and stores the 56 pooled columns by stmatrix (transposed: a column's 8 channels 16 contiguous bytes) into a ring of
// 6 rows. While the MMAs run, the block takes pooled row ph0 + s - 2 as the max of its three ring rows (done in the
// steps before) and stores it, rounds the input rows step s + 1 adds (4; landed by cp.async during the step before)
// into the halo ring (16 rows), and starts copying those of step s + 2. Pooled values, quantization and non-finite
// inputs: as kernels_stem.cu (max then round equals round then max).
#include "kernels_stem.cuh"

namespace {

constexpr int NP = 112;                  // convolution pixels of a row (the wgmma's N): q <= 112
constexpr int HCW = 2 * (NP - 1) + 8;    // halo columns: 230 (input columns -3 .. 226, tap 7 included)
constexpr int HRB = HCW * 8;             // a halo row's bytes: 1840
constexpr int HSL = 16;                  // halo ring rows
constexpr int SR = 5, SCH = 4, SW = 224; // staging: rows a buffer, channels, floats a row (w <= 224)
constexpr int SBUF = SR * SCH * SW * 4;
constexpr int PPB = 144;                 // a pooled column's bytes in the ring (64 halves + 16 bytes: no conflict)
constexpr int PRB = NP / 2 * PPB;        // a row's
constexpr int CSL = 6;                   // ring rows
constexpr int THREADS = 256;
constexpr int OFF_H = SM_B, OFF_S = OFF_H + HSL * HRB, OFF_C = OFF_S + 2 * SBUF, SMEM = OFF_C + CSL * PRB;
static_assert(HRB % 16 == 0 && OFF_S % 16 == 0 && OFF_C % 16 == 0 && PRB % 16 == 0, "16-byte aligned regions");
static_assert(SMEM <= 227 * 1024, "one block an SM");

struct rows_geo {
    int n, c, h, w, p, q, po, qo, k, bp, bpi, bands, relu, vec, lag;
    int64_t xsn, xsc, xsh, xsw;   // the float32 input's strides in elements
};

#if KILN_WGMMA
__device__ __forceinline__ void stsm_x4_t(void *p, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_u32(p)),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
__device__ __forceinline__ void stsm_x2_t(void *p, uint32_t r0, uint32_t r1)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(smem_u32(p)), "r"(r0), "r"(r1)
                 : "memory");
}
// the ring's slot of convolution row cr in a band from pooled row ph0 (computed in step (cr + 1) / 2 - ph0)
__device__ __forceinline__ int conv_slot(int cr, int ph0) { return (((cr + 1) >> 1) - ph0) % 3 * 2 + ((cr & 1) ^ 1); }
#endif

template <typename T, int Q>
__global__ void __launch_bounds__(THREADS, 1)
    k_stem_rows(const float *__restrict__ x, const T *__restrict__ w, const float *__restrict__ bias,
                void *__restrict__ y, rows_geo g, cuk_stem_q qp)
{
#if KILN_WGMMA
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *bs = smem, *halo = smem + OFF_H, *conv = smem + OFF_C;
    float *stg = (float *)(smem + OFF_S);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, g8 = lane >> 2;
    const int n0 = blockIdx.y * 64, ch = 16 * (warp & 3) + g8;   // this thread's accumulator channels ch, ch + 8
    constexpr bool BF = std::is_same<T, __nv_bfloat16>::value;
    stem_filter_copy<T, THREADS>(bs, w, n0, tid);
    const float b_lo = bias ? bias[n0 + ch] : 0.f, b_hi = bias ? bias[n0 + ch + 8] : 0.f;
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    // the filter as wgmma's A in registers for the whole kernel: step st's four m16n8k16 A fragments of this warp's
    // 16 channels (pieces 2 st, 2 st + 1)
    uint32_t af[14][4];
#pragma unroll
    for (int st = 0; st < 14; st++)
        ldsm_x4(af[st], bs + ((2 * st + (lane >> 4)) * 64 + 16 * (warp & 3) + 8 * ((lane >> 3) & 1) + (lane & 7)) * 16);

    // input rows ir0 .. ir0 + nr - 1 of image img into staging buffer b ([row][channel][SW] floats); rows outside
    // the image are not copied (convert writes their zeros)
    auto stage = [&](int img, int ir0, int nr, int b) {
        float *sb = stg + b * (SBUF / 4);
        const float *xi = x + (int64_t)img * g.xsn;
        const int per = g.vec ? g.w / 4 : g.w, row = g.c * per;
        for (int i = tid; i < nr * row; i += THREADS) {
            const int j = i / row, r = i % row, c = r / per, e = r % per, ir = ir0 + j;
            if ((unsigned)ir >= (unsigned)g.h)
                continue;
            const float *src = xi + c * g.xsc + (int64_t)ir * g.xsh;
            float *dst = sb + (j * SCH + c) * SW;
            if (g.vec)
                cp_async_ca<16>(dst + 4 * e, src + 4 * e, true);
            else
                cp_async_ca<4>(dst + e, src + e * g.xsw, true);
        }
    };
    // staging buffer b's rows, rounded to the half format, into the halo ring (slot ir % 16): every column, zero
    // outside the image and past c
    auto convert = [&](int ir0, int nr, int b) {
        const float *sb = stg + b * (SBUF / 4);
        for (int i = tid; i < nr * HCW; i += THREADS) {
            const int j = i / HCW, hc = i % HCW, ir = ir0 + j, iw = hc - 3;
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            if ((unsigned)ir < (unsigned)g.h && (unsigned)iw < (unsigned)g.w) {
#pragma unroll
                for (int c = 0; c < 4; c++)
                    if (c < g.c)
                        v[c] = sb[(j * SCH + c) * SW + iw];
            }
            *(uint2 *)(halo + (ir & (HSL - 1)) * HRB + hc * 8) = make_uint2(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]));
        }
    };
    // pooled row ph of a band from ph0: each 8-channel piece the max of its in-image convolution rows' (the ring
    // holds them pooled along the row)
    auto pool_row = [&](int img, int ph, int ph0) {
        for (int it = tid; it < g.qo * 8; it += THREADS) {
            const int pw = it >> 3, cg = it & 7;
            uint4 m = make_uint4(0, 0, 0, 0);
            bool any = false;
#pragma unroll
            for (int dy = 0; dy < 3; dy++) {
                const int cr = 2 * ph - 1 + dy;
                if ((unsigned)cr >= (unsigned)g.p)
                    continue;
                const uint4 v = *(const uint4 *)(conv + conv_slot(cr, ph0) * PRB + pw * PPB + cg * 16);
                m = any ? hmax8<T>(m, v) : v;
                any = true;
            }
            stem_store<T, Q>(y, (((int64_t)img * g.po + ph) * g.qo + pw) * g.k + n0 + cg * 8, m, qp);
        }
    };

    float acc[NP / 2];
    const int tig = lane & 3, from = (lane & ~3) | ((lane + 3) & 3);   // the lane of column 2 tig - 1's
    // convolution row cr's accumulators (when in the convolution) pooled along the row into ring slot `slot`
    auto epilogue = [&](int cr, int slot) {
        if ((unsigned)cr >= (unsigned)g.p)
            return;
        // the row pooled along itself in registers: pooled column 4 j + tig the max of columns 8 j + 2 tig
        // - 1 (the lane before's second, or tig 3's of block j - 1), + 0, + 1 in the image; then + bias,
        // ReLU (monotone: the same as before the max), the half format
        uint32_t r[NP / 16][2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float carry = 0.f, mv[NP / 8];
#pragma unroll
            for (int j = 0; j < NP / 8; j++) {
                const float v0 = acc[4 * j + 2 * hr], v1 = acc[4 * j + 2 * hr + 1];
                const float before = __shfl_sync(0xffffffffu, tig == 3 ? carry : v1, from);
                carry = v1;
                const int c0 = 8 * j + 2 * tig;
                float m = v0;
                if (c0 + 1 < g.q)
                    m = fmaxf(m, v1);
                if (c0 >= 1)
                    m = fmaxf(m, before);
                m += hr ? b_hi : b_lo;
                mv[j] = g.relu ? fmaxf(m, 0.f) : m;
            }
#pragma unroll
            for (int jj = 0; jj < NP / 16; jj++)
                r[jj][hr] = pack2<T>(mv[2 * jj], mv[2 * jj + 1]);
        }
        // 8 x 8 blocks [channels][fragment columns 2 tig, 2 tig + 1 = pooled columns 8 jj + tig, + 4 + tig]
        // stored transposed (stmatrix): a pooled column's 8 channels 16 contiguous bytes; lane L gives row L %
        // 8 of matrix L / 8: (jj, channels ch..), (jj, + 8), (jj + 1, ch..), (jj + 1, + 8)
        unsigned char *cs = conv + slot * PRB;
        const int k = lane & 7, mi = lane >> 3;
        unsigned char *at =
            cs + (8 * (mi >> 1) + (k >> 1) + 4 * (k & 1)) * PPB + (16 * (warp & 3) + 8 * (mi & 1)) * 2;
#pragma unroll
        for (int jj = 0; jj + 1 < NP / 16; jj += 2)
            stsm_x4_t(at + 8 * jj * PPB, r[jj][0], r[jj][1], r[jj + 1][0], r[jj + 1][1]);
        if constexpr (NP / 16 % 2)
            stsm_x2_t(at + 8 * (NP / 16 - 1) * PPB, r[NP / 16 - 1][0], r[NP / 16 - 1][1]);
    };

    const uint32_t h0 = smem_u32(halo);
    for (int band = blockIdx.x; band < g.bands; band += gridDim.x) {
        const int img = band / g.bpi, ph0 = band % g.bpi * g.bp, nph = min(g.bp, g.po - ph0);
        // the halo of step 0 (input rows 4 ph0 - 5 .. 4 ph0 + 3), then the copy of the rows step 1 adds
        stage(img, 4 * ph0 - 5, 5, 0);
        stage(img, 4 * ph0, 4, 1);
        cp_commit();
        cp_wait<0>();
        __syncthreads();
        convert(4 * ph0 - 5, 5, 0);
        convert(4 * ph0, 4, 1);
        __syncthreads();
        stage(img, 4 * ph0 + 4, 4, 1);
        cp_commit();
        fence_proxy_async();   // the halo visible to wgmma
        __syncthreads();
        // warpgroup 1 lags (g.lag): its row's MMAs run across the step's end and it takes their epilogue at the
        // start of the next step, so that the tensor cores have one warpgroup's MMAs while the other's epilogue runs
        const bool lag = g.lag && wg == 1;
        for (int s = 0; s <= nph; s++) {
            const int cr = 2 * (ph0 + s) - 1 + wg;   // this warpgroup's convolution row
            if (lag && s >= 1) {
                wg_wait<0>();
                epilogue(cr - 2, ((s - 1) % 3) * 2 + 1);
            }
            // (rows outside the convolution too, over whatever the ring holds, not stored: no branch around wgmma)
            wg_fence();
#pragma unroll
            for (int st = 0; st < 14; st++) {   // filter row st / 2, taps 4 (st % 2) .. + 3
                const int ir = 2 * cr - 3 + st / 2;
                wgmma_h_n112<BF>(acc, af[st], wg_desc_plain(h0 + (ir & (HSL - 1)) * HRB + 32 * (st & 1), 16, 128),
                                 st > 0);
            }
            wg_commit();
            if (s >= 2)
                pool_row(img, ph0 + s - 2, ph0);
            if (s < nph) {
                cp_wait<0>();
                __syncthreads();   // step s + 1's rows landed in staging buffer (s + 1) % 2
                convert(4 * (ph0 + s) + 4, 4, (s + 1) & 1);
                if (s + 2 <= nph)
                    stage(img, 4 * (ph0 + s) + 8, 4, s & 1);
                cp_commit();
                fence_proxy_async();
            }
            if (!lag) {
                wg_wait<0>();
                epilogue(cr, (s % 3) * 2 + wg);
            }
            __syncthreads();   // the rows converted and fenced, this step's (the lagging one's: last step's) rows in
                               // the ring
        }
        wg_wait<0>();   // the lagging warpgroup's last row (2 (ph0 + nph): no pooled row of this band needs it)
        pool_row(img, ph0 + nph - 1, ph0);
        __syncthreads();   // the rings free for the next band
    }
    cp_wait<0>();
#else
    (void)x, (void)w, (void)bias, (void)y, (void)g, (void)qp;
#endif
}

template <typename T, int Q>
cudaError_t launch(const float *x, const void *w, const float *bias, void *y, rows_geo g, const cuk_stem_q &q,
                   cudaStream_t s)
{
    auto kern = k_stem_rows<T, Q>;
    cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    if (err != cudaSuccess)
        return err;
    // bands of bp pooled rows: the fewest rounds of the SMs times a band's steps (bp + 1, and about two more for
    // its first halo and last pool); bands past 1024 rows gain nothing and would make the search long for tall images
    const int64_t sms = sm_count() > 0 ? sm_count() : 1;
    int64_t best = -1;
    for (int bp = 1; bp <= g.po && bp <= 1024; bp++) {
        const int64_t bpi = (g.po + bp - 1) / bp, bands = (int64_t)g.n * bpi;
        if (bands >= ((int64_t)1 << 31))
            continue;
        const int64_t cost = (bands + sms - 1) / sms * (bp + 3);
        if (best < 0 || cost < best) {
            best = cost;
            g.bp = bp;
            g.bpi = (int)bpi;
            g.bands = (int)bands;
        }
    }
    if (best < 0)
        return cudaErrorInvalidValue;
    const int64_t blocks = g.bands < sms ? g.bands : sms;
    kern<<<dim3((unsigned)blocks, (unsigned)(g.k / 64)), THREADS, SMEM, s>>>(x, (const T *)w, bias, y, g, q);
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch_q(const float *x, const void *w, const float *bias, void *y, const rows_geo &g, const cuk_stem_q &q,
                     cudaStream_t s)
{
    if (q.kind == 1)
        return launch<T, 1>(x, w, bias, y, g, q, s);
    if (q.kind == 2)
        return launch<T, 2>(x, w, bias, y, g, q, s);
    return launch<T, 0>(x, w, bias, y, g, q, s);
}

} // namespace

bool stem_rows_fits(const cuk_conv_desc *d, const void *x)
{
    return d->q <= NP && d->w <= SW && (uintptr_t)x % 4 == 0;
}

cudaError_t stem_rows(int fdt, const void *x, const void *w8, const float *bias, void *y, const cuk_conv_desc *d,
                      int po, int qo, const cuk_stem_q *q, int flags, cudaStream_t s)
{
    const bool vec = d->xsw == 1 && d->w % 4 == 0 && d->xsh % 4 == 0 && d->xsc % 4 == 0 && d->xsn % 4 == 0 &&
                     (uintptr_t)x % 16 == 0;
    const rows_geo g = {d->n, d->c, d->h, d->w, d->p, d->q, po, qo, d->k, 0, 0, 0, d->relu, vec,
                        !(flags & CUK_STEM_LOCK), d->xsn, d->xsc, d->xsh, d->xsw};
    return fdt == CUK_F16 ? launch_q<__half>((const float *)x, w8, bias, y, g, *q, s)
                          : launch_q<__nv_bfloat16>((const float *)x, w8, bias, y, g, *q, s);
}
