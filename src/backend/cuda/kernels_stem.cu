// A network's stem and its max pool as one kernel (cuda_convpool.c, the FusedConvPool layer): ResNet's 7x7 stride-2
// convolution over 3 (<= 4) channels, its bias and ReLU, then the 3x3 stride-2 max pool, the pooled values written
// in the half format or quantized to 8 bits -- the convolution's output (4x the pool's) never leaves the SM. This
// file's kernel walks tiles of pooled pixels and takes any width; on Hopper a float32 input up to 224 wide goes to
// kernels_stem_rows.cu's, which computes whole convolution rows (cuk_stem_pool chooses; KILN_CUDA_STEM=tile keeps
// this one).
//
// A persistent block owns 64 output channels and walks tiles of 7 x 7 pooled pixels. A tile's 15 x 15 convolution
// pixels (computed as 16 x 16 = 256 GEMM rows) are an implicit GEMM: the reduction runs over (r, s < 8, c < 4) --
// 224 values, tap s = 7 and channels past c zero in the filter -- and each A fragment (mma.sync m16n8k16's layout) is
// read by ldmatrix straight from the tile's input halo in shared memory (37 x 38 pixels as [h][w][4] halves, zero
// past the image): two neighbouring taps of one filter row are 16 contiguous bytes there, and the 8 output pixels of
// one ldmatrix row group, 2 input pixels apart, 128 contiguous bytes (no bank conflict). Warp w owns convolution rows
// 2 w and 2 w + 1 (16 pixels each). On Hopper (sm_90a) the MMAs are wgmma m64n64k16 with A in registers: warpgroup g's
// four warps' rows form one 64-row A, the filter its B by descriptor (two per 16-wide step of the reduction, one per
// row parity); elsewhere, or with KILN_CUDA_STEM=mma, mma.sync m16n8k16 with B by ldmatrix. The filter [64][224]
// stays in shared memory as 16-byte pieces ordered [piece][channel] (the core matrices wgmma reads without swizzle,
// conflict-free rows for ldmatrix).
//
// The input: cuk_conv_to_nhwc4's [n][h][w][4] half copy (X = 0; halo copied by cp.async, double-buffered), or (X = 1)
// the float32 tensor itself by its strides: the next tile's halo lands (cp.async, 4 bytes an element) in a float32
// staging area while this tile's MMAs, epilogue and pool run, and is rounded to the half format (the copy kernel's
// rounding) into the one halo after the pool -- one pass over the input instead of three.
//
// Epilogue: + bias, ReLU, rounded to the half format into a shared [256][64] tile, then each pooled pixel's 8-channel
// pieces take the max of their (up to) 9 in-image neighbours and are stored as 16 (half) or 8 (quantized) bytes.
//
// The quantization is QuantizeLinear's of the half value (kernels_int8.cuh div_round and backend/qexact.h's exact
// shortcut): max then quantize equals quantize then max, rounding being monotone, so the bytes are those of the
// three separate layers. Non-finite inputs: the zero tap s = 7 reads a real pixel, so an Inf there makes NaN (0 * Inf)
// in outputs whose window does not hold it (the separate convolution would not).
#include "kernels_stem.cuh"

namespace {

constexpr int TP = 7;                       // pooled pixels a tile, each way
constexpr int CT = 16;                      // convolution pixels a tile, each way (2 * TP + 1 = 15 used)
constexpr int HR = 2 * (CT - 1) + 7;        // halo rows: 37
constexpr int HC = 2 * (CT - 1) + 8;        // halo columns: 38 (tap s = 7 included)
constexpr int CP = 64 + 8;                  // convolution tile's pixel pitch in elements: 144 bytes
constexpr int THREADS = 256;
constexpr int SM_H = HR * HC * 8;           // a halo in halves
constexpr int SM_F = HR * HC * 16;          // a halo in float32 (X = 1's staging)
constexpr int SM_C = CT * CT * CP * 2;
// X = 0: filter | halo 0 | halo 1 | tile; X = 1: filter | staging | halo | tile
template <int X> __host__ __device__ constexpr int smem_bytes() { return SM_B + (X ? SM_F + SM_H : 2 * SM_H) + SM_C; }
static_assert(SM_B % 16 == 0 && SM_H % 16 == 0 && SM_F % 16 == 0, "16-byte aligned regions");

struct stem_geo {
    int n, c, h, w, p, q, po, qo, k, tiles_h, tiles_w, tiles, relu, wg;
    int64_t xsn, xsc, xsh, xsw;   // X = 1: the float32 input's strides in elements
};

// The pool of tile t from the shared convolution tile ct: each 8-channel piece of its 7 x 7 pooled pixels the max of
// its in-image 3 x 3 neighbours, stored as 16 half bytes (Q 0) or QuantizeLinear's 8 bytes of the half values
template <typename T, int Q>
__device__ __forceinline__ void pool_tile(const T *ct, void *y, const stem_geo &g, const cuk_stem_q &qp, int t, int n0,
                                          int tid)
{
    const int tr = t % (g.tiles_h * g.tiles_w), img = t / (g.tiles_h * g.tiles_w);
    const int ph0 = (tr / g.tiles_w) * TP, pw0 = (tr % g.tiles_w) * TP;
    for (int it = tid; it < TP * TP * 8; it += THREADS) {
        const int px = it >> 3, cg = it & 7, pi = px / TP, pj = px % TP;
        const int ph = ph0 + pi, pw = pw0 + pj;
        if (ph >= g.po || pw >= g.qo)
            continue;
        uint4 m = make_uint4(0, 0, 0, 0);
        bool any = false;
#pragma unroll
        for (int dy = 0; dy < 3; dy++) {
            const int cr = 2 * ph - 1 + dy;
            if ((unsigned)cr >= (unsigned)g.p)
                continue;
#pragma unroll
            for (int dx = 0; dx < 3; dx++) {
                const int cc = 2 * pw - 1 + dx;
                if ((unsigned)cc >= (unsigned)g.q)
                    continue;
                const uint4 v = *(const uint4 *)&ct[((2 * pi + dy) * CT + 2 * pj + dx) * CP + cg * 8];
                if (!any) {
                    m = v;
                    any = true;
                } else {
                    m = hmax8<T>(m, v);
                }
            }
        }
        stem_store<T, Q>(y, (((int64_t)img * g.po + ph) * g.qo + pw) * g.k + n0 + cg * 8, m, qp);
    }
}

// The 64 x 64 (two 16-row tiles of each of this warp's rows) MMAs of one tile over the halo hs, into acc[i] (rows
// 2 warp + i, mma.sync m16n8 fragments, 8 column tiles of 4 floats): wgmma where wg (sm_90a), else mma.sync
template <typename T>
__device__ __forceinline__ void stem_mma(const unsigned char *hs, const unsigned char *bs, float (&acc)[2][32],
                                         int warp, int lane, bool wg)
{
    const int amat = lane >> 3, mrow = (lane & 7) + (amat & 1) * 8, akh = amat >> 1;
    // A of step (r, s0) for row tile i: the 8 halves at taps s0 + 2 akh, +1 of convolution pixel mrow of row 2 warp + i
    auto a_at = [&](int i, int r, int s0) { return hs + ((2 * (2 * warp + i) + r) * HC + 2 * mrow + s0 + 2 * akh) * 8; };
#if KILN_WGMMA
    if (wg) {
        constexpr bool BF = std::is_same<T, __nv_bfloat16>::value;
        const uint32_t b0 = smem_u32(bs);
        uint32_t a[2][2][4];   // [step parity][row tile i]
#pragma unroll
        for (int i = 0; i < 2; i++)
            ldsm_x4(a[0][i], a_at(i, 0, 0));
#pragma unroll
        for (int st = 0; st < 14; st++) {   // step st: filter row r = st / 2, taps s0 = 4 (st % 2) .. + 3
            wg_fence();
#pragma unroll
            for (int i = 0; i < 2; i++)   // B: pieces 2 st, 2 st + 1 of the 64 channels, 1024 bytes apart
                wgmma_h_n64<BF>(acc[i], a[st & 1][i], wg_desc_plain(b0 + st * 2048, 1024, 128), st > 0);
            wg_commit();
            if (st < 13) {
                wg_wait<1>();   // step st - 1's wgmmas read their A: its registers are free
#pragma unroll
                for (int i = 0; i < 2; i++)
                    ldsm_x4(a[(st + 1) & 1][i], a_at(i, (st + 1) / 2, 4 * ((st + 1) % 2)));
            }
        }
        wg_wait<0>();
        return;
    }
#endif
    (void)wg;
    const int brow = (lane & 7) + ((amat >> 1) << 3), bk = amat & 1;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int e = 0; e < 32; e++)
            acc[i][e] = 0.f;
#pragma unroll 1
    for (int r = 0; r < 7; r++) {
#pragma unroll
        for (int s0 = 0; s0 < 8; s0 += 4) {
            const int kc = r * 4 + s0 / 2;   // the step's first 16-byte piece
            uint32_t a[2][4], b[8][2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                ldsm_x4(a[i], a_at(i, r, s0));
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                uint32_t v[4];
                ldsm_x4(v, bs + ((kc + bk) * 64 + jj * 16 + brow) * 16);
                b[2 * jj][0] = v[0];
                b[2 * jj][1] = v[1];
                b[2 * jj + 1][0] = v[2];
                b[2 * jj + 1][1] = v[3];
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    mma16816<T>(&acc[i][4 * j], a[i], b[j][0], b[j][1]);
        }
    }
}

// Q: 0 the half values, 1 uint8, 2 int8; X: the input as in the file's comment
template <typename T, int Q, int X>
__global__ void __launch_bounds__(THREADS, 2)
    k_stem_pool(const void *__restrict__ xv, const T *__restrict__ w, const float *__restrict__ bias,
                void *__restrict__ y, stem_geo g, cuk_stem_q qp)
{
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *bs = smem;
    T *ct = (T *)(smem + smem_bytes<X>() - SM_C);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n0 = blockIdx.y * 64;
    stem_filter_copy<T, THREADS>(bs, w, n0, tid);
    // tile t: image, pooled origin (ph0, pw0); its convolution origin 2 * ph0 - 1, input origin 2 * (that) - 3
    auto origin = [&](int t, int *img, int *ih0, int *iw0) {
        const int r = t % (g.tiles_h * g.tiles_w);
        *img = t / (g.tiles_h * g.tiles_w);
        *ih0 = 4 * (r / g.tiles_w) * TP - 5;
        *iw0 = 4 * (r % g.tiles_w) * TP - 5;
    };
    // X = 0: the halo of tile t from the [n][h][w][4] copy into halo buffer buf
    auto halo4 = [&](int t, int buf) {
        int img, ih0, iw0;
        origin(t, &img, &ih0, &iw0);
        T *hs = (T *)(smem + SM_B + buf * SM_H);
        const T *xi = (const T *)xv + (int64_t)img * g.h * g.w * 4;
        for (int i = tid; i < HR * HC; i += THREADS) {
            const int ih = ih0 + i / HC, iw = iw0 + i % HC;
            const bool ok = (unsigned)ih < (unsigned)g.h && (unsigned)iw < (unsigned)g.w;
            cp_async_ca<8>(hs + i * 4, ok ? xi + ((int64_t)ih * g.w + iw) * 4 : (const T *)xv, ok);
        }
    };
    // X = 1: the halo of tile t from the float32 input into the staging area ([pixel][4], channels past c stay zero)
    float *stage = (float *)(smem + SM_B);
    auto halo_f = [&](int t) {
        int img, ih0, iw0;
        origin(t, &img, &ih0, &iw0);
        const float *xf = (const float *)xv, *xi = xf + (int64_t)img * g.xsn;
        for (int i = tid; i < HR * HC; i += THREADS) {
            const int ih = ih0 + i / HC, iw = iw0 + i % HC;
            const bool ok = (unsigned)ih < (unsigned)g.h && (unsigned)iw < (unsigned)g.w;
            const float *px = ok ? xi + ih * g.xsh + iw * g.xsw : xf;
            for (int c = 0; c < g.c; c++)
                cp_async_ca<4>(stage + i * 4 + c, ok ? px + c * g.xsc : xf, ok);
        }
    };
    T *hx = (T *)(smem + SM_B + SM_F);   // X = 1's halo
    auto convert = [&]() {
        for (int i = tid; i < HR * HC; i += THREADS) {
            const float4 v = *(const float4 *)(stage + i * 4);
            *(uint2 *)(hx + i * 4) = make_uint2(pack2<T>(v.x, v.y), pack2<T>(v.z, v.w));
        }
    };
    const int g8 = lane >> 2, tig = lane & 3;
    int t = blockIdx.x;
    if constexpr (X == 1) {
        for (int i = tid; i < HR * HC * 4; i += THREADS)
            stage[i] = 0.f;   // the channels past c (never copied)
        __syncthreads();
        if (t < g.tiles)
            halo_f(t);
        cp_commit();
        cp_wait<0>();
        __syncthreads();
        convert();
    } else {
        if (t < g.tiles)
            halo4(t, 0);
        cp_commit();
    }
    for (int buf = 0; t < g.tiles; t += gridDim.x, buf ^= 1) {
        const int tn = t + gridDim.x;
        if constexpr (X == 1) {
#if KILN_WGMMA
            fence_proxy_async();   // the filter (cp.async, once) visible to wgmma
#endif
            __syncthreads();       // the halo converted, the staging area read, the previous tile's pool done
            if (tn < g.tiles)
                halo_f(tn);
            cp_commit();
        } else {
            if (tn < g.tiles)
                halo4(tn, buf ^ 1);
            cp_commit();
            cp_wait<1>();   // this tile's halo (and the filter) landed; the next one's may still be in flight
#if KILN_WGMMA
            fence_proxy_async();
#endif
            __syncthreads();
        }
        const unsigned char *hs = X ? (const unsigned char *)hx : smem + SM_B + buf * SM_H;
        float acc[2][32];
        stem_mma<T>(hs, bs, acc, warp, lane, g.wg);
        // + bias, ReLU, the half format: rows g8 and g8 + 8 of each 16-row tile, columns 2 tig, + 1 of each 8
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int col = j * 8 + tig * 2;
                const float b0 = bias ? bias[n0 + col] : 0.f, b1 = bias ? bias[n0 + col + 1] : 0.f;
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    float v0 = acc[i][4 * j + hr * 2] + b0, v1 = acc[i][4 * j + hr * 2 + 1] + b1;
                    if (g.relu) {
                        v0 = fmaxf(v0, 0.f);
                        v1 = fmaxf(v1, 0.f);
                    }
                    *(uint32_t *)&ct[((2 * warp + i) * CT + g8 + hr * 8) * CP + col] = pack2<T>(v0, v1);
                }
            }
        __syncthreads();
        pool_tile<T, Q>(ct, y, g, qp, t, n0, tid);
        if constexpr (X == 1) {
            cp_wait<0>();
            __syncthreads();   // every thread's copies of the next halo landed; every warp's MMAs read this one
            if (tn < g.tiles)
                convert();
        }
    }
    cp_wait<0>();
}

// w8[k][(r * 8 + s) * 4 + c] = w[k][c][r][s] for s < 7, c < C; zeros elsewhere (w, w8 in T)
template <typename T> __global__ void k_stem_w(const T *__restrict__ w, T *__restrict__ w8, int k, int c)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)k * KP)
        return;
    const int kk = (int)(i / KP), j = (int)(i % KP), r = j / 32, s = (j / 4) % 8, ch = j % 4;
    w8[i] = s < 7 && ch < c ? w[(((int64_t)kk * c + ch) * 7 + r) * 7 + s] : T(0.f);
}

template <typename T, int Q, int X>
cudaError_t launch(const void *x, const void *w, const float *bias, void *y, const stem_geo &g, const cuk_stem_q &q,
                   cudaStream_t s)
{
    auto kern = k_stem_pool<T, Q, X>;
    constexpr int smem = smem_bytes<X>();
    cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int per_sm = 0;
    if (err == cudaSuccess)
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, THREADS, smem);
    if (err != cudaSuccess)
        return err;
    const int kb = g.k / 64;
    int64_t blocks = (int64_t)(per_sm > 0 ? per_sm : 1) * (sm_count() > 0 ? sm_count() : 1) / kb;
    blocks = blocks < 1 ? 1 : blocks > g.tiles ? g.tiles : blocks;
    kern<<<dim3((unsigned)blocks, (unsigned)kb), THREADS, smem, s>>>(x, (const T *)w, bias, y, g, q);
    return cudaGetLastError();
}

template <typename T, int X>
cudaError_t launch_q(const void *x, const void *w, const float *bias, void *y, const stem_geo &g, const cuk_stem_q &q,
                     cudaStream_t s)
{
    if (q.kind == 1)
        return launch<T, 1, X>(x, w, bias, y, g, q, s);
    if (q.kind == 2)
        return launch<T, 2, X>(x, w, bias, y, g, q, s);
    return launch<T, 0, X>(x, w, bias, y, g, q, s);
}

} // namespace

extern "C" bool cuk_stem_pool_fits(const cuk_conv_desc *d, int po, int qo)
{
    const int64_t tiles = (int64_t)d->n * ((po + TP - 1) / TP) * ((qo + TP - 1) / TP);
    return d->c >= 1 && d->c <= 4 && d->r == 7 && d->s == 7 && d->sh == 2 && d->sw == 2 && d->ph == 3 && d->pw == 3 &&
           d->dh == 1 && d->dw == 1 && d->k > 0 && d->k % 64 == 0 && d->k / 64 <= 65535 && d->h >= 1 && d->w >= 1 &&
           d->p == (d->h - 1) / 2 + 1 && d->q == (d->w - 1) / 2 + 1 && po == (d->p - 1) / 2 + 1 &&
           qo == (d->q - 1) / 2 + 1 && (int64_t)d->h * d->w * 4 < ((int64_t)1 << 30) && tiles < ((int64_t)1 << 31);
}

extern "C" int cuk_stem_kp(void) { return KP; }

extern "C" cudaError_t cuk_stem_weights(int fdt, const void *w, void *w8, int k, int c, cudaStream_t s)
{
    const int64_t n = (int64_t)k * KP;
    if (c < 1 || c > 4 || k < 1 || (fdt != CUK_F16 && fdt != CUK_BF16) || n / 256 >= 0x7fffffff)
        return cudaErrorInvalidValue;
    const unsigned blocks = (unsigned)((n + 255) / 256);
    if (fdt == CUK_F16)
        k_stem_w<__half><<<blocks, 256, 0, s>>>((const __half *)w, (__half *)w8, k, c);
    else
        k_stem_w<__nv_bfloat16><<<blocks, 256, 0, s>>>((const __nv_bfloat16 *)w, (__nv_bfloat16 *)w8, k, c);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_stem_pool(int fdt, int fdt_x, const void *x, const void *w8, const float *bias, void *y,
                                     const cuk_conv_desc *d, int po, int qo, const cuk_stem_q *q, int flags,
                                     cudaStream_t s)
{
    if (!cuk_stem_pool_fits(d, po, qo) || (fdt != CUK_F16 && fdt != CUK_BF16) || (fdt_x != fdt && fdt_x != CUK_F32) ||
        q->kind < 0 || q->kind > 2)
        return cudaErrorInvalidValue;
    const int th = (po + TP - 1) / TP, tw = (qo + TP - 1) / TP;
    const bool wg = !(flags & CUK_STEM_MMA) && wg_sm90() == cudaSuccess;
    const stem_geo g = {d->n, d->c, d->h, d->w, d->p, d->q, po, qo, d->k, th, tw, d->n * th * tw, d->relu, wg,
                        d->xsn, d->xsc, d->xsh, d->xsw};
    if (fdt_x == CUK_F32 && wg && !(flags & CUK_STEM_TILE) && stem_rows_fits(d, x))
        return stem_rows(fdt, x, w8, bias, y, d, po, qo, q, flags, s);
    if (fdt_x == CUK_F32)
        return fdt == CUK_F16 ? launch_q<__half, 1>(x, w8, bias, y, g, *q, s)
                              : launch_q<__nv_bfloat16, 1>(x, w8, bias, y, g, *q, s);
    return fdt == CUK_F16 ? launch_q<__half, 0>(x, w8, bias, y, g, *q, s)
                          : launch_q<__nv_bfloat16, 0>(x, w8, bias, y, g, *q, s);
}
