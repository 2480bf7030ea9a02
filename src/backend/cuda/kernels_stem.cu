// A network's stem and its max pool as one kernel (cuda_convpool.c, the FusedConvPool layer): ResNet's 7x7 stride-2
// convolution over 3 (<= 4) channels, its bias and ReLU, then the 3x3 stride-2 max pool, the pooled values written
// in the half format or quantized to 8 bits -- the convolution's output (4x the pool's) never leaves the SM.
//
// A persistent block owns 64 output channels and walks tiles of 7 x 7 pooled pixels. A tile's 15 x 15 convolution
// pixels (computed as 16 x 16 = 256 GEMM rows) are an implicit GEMM on mma.sync m16n8k16: the reduction runs over
// (r, s < 8, c < 4) -- 224 values, tap s = 7 and channels past c zero in the filter -- and each A fragment is read by
// ldmatrix straight from the tile's input halo in shared memory (37 x 38 pixels of cuk_conv_to_nhwc4's [n][h][w][4]
// copy, zero past the image): two neighbouring taps of one filter row are 16 contiguous bytes there, and the 8
// output pixels of one ldmatrix row group, 2 input pixels apart, 128 contiguous bytes (no bank conflict). The filter
// [64][224] stays in shared memory; the next tile's halo is copied (cp.async) while this one's MMAs run. Epilogue:
// + bias, ReLU, rounded to the half format into a shared [256][64] tile, then each pooled pixel's 8-channel pieces
// take the max of their (up to) 9 in-image neighbours and are stored as 16 (half) or 8 (quantized) bytes.
//
// The quantization is QuantizeLinear's of the half value (kernels_int8.cuh div_round and backend/qexact.h's exact
// shortcut): max then quantize equals quantize then max, rounding being monotone, so the bytes are those of the
// three separate layers. Non-finite inputs: the zero tap s = 7 reads a real pixel, so an Inf there makes NaN (0 * Inf)
// in outputs whose window does not hold it (the separate convolution would not).
#include "kernels_conv_fp8_wg.cuh"   // cp_async16, cp_commit, cp_wait, sm_count
#include "kernels_int8.cuh"

namespace {

constexpr int TP = 7;                       // pooled pixels a tile, each way
constexpr int CT = 16;                      // convolution pixels a tile, each way (2 * TP + 1 = 15 used)
constexpr int HR = 2 * (CT - 1) + 7;        // halo rows: 37
constexpr int HC = 2 * (CT - 1) + 8;        // halo columns: 38 (tap s = 7 included)
constexpr int KP = 7 * 8 * 4;               // the reduction: 224
constexpr int BP = KP + 8;                  // filter row pitch in elements: 464 bytes, ldmatrix without conflicts
constexpr int CP = 64 + 8;                  // convolution tile's pixel pitch in elements: 144 bytes
constexpr int THREADS = 256;
constexpr int SM_B = 64 * BP * 2, SM_H = HR * HC * 8, SM_C = CT * CT * CP * 2;
constexpr int SMEM = SM_B + 2 * SM_H + SM_C;
static_assert(SM_B % 16 == 0 && SM_H % 16 == 0, "16-byte aligned regions");

__device__ __forceinline__ void cp_async8(void *smem, const void *gmem, bool valid)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    const int n = valid ? 8 : 0;   // 0 bytes read: zero-filled
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(s), "l"(gmem), "r"(n));
}

template <typename T> __device__ __forceinline__ uint32_t hmax2(uint32_t a, uint32_t b);
template <> __device__ __forceinline__ uint32_t hmax2<__half>(uint32_t a, uint32_t b)
{
    __half2 r = __hmax2(*(const __half2 *)&a, *(const __half2 *)&b);
    return *(const uint32_t *)&r;
}
template <> __device__ __forceinline__ uint32_t hmax2<__nv_bfloat16>(uint32_t a, uint32_t b)
{
    __nv_bfloat162 r = __hmax2(*(const __nv_bfloat162 *)&a, *(const __nv_bfloat162 *)&b);
    return *(const uint32_t *)&r;
}

struct stem_geo {
    int n, h, w, p, q, po, qo, k, tiles_h, tiles_w, tiles, relu;
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
                    m.x = hmax2<T>(m.x, v.x);
                    m.y = hmax2<T>(m.y, v.y);
                    m.z = hmax2<T>(m.z, v.z);
                    m.w = hmax2<T>(m.w, v.w);
                }
            }
        }
        const int64_t o = (((int64_t)img * g.po + ph) * g.qo + pw) * g.k + n0 + cg * 8;
        if constexpr (Q == 0) {
            *(uint4 *)((T *)y + o) = m;
        } else {
            constexpr int lo = Q == 2 ? -128 : 0, hi = Q == 2 ? 127 : 255;
            const T *hv = (const T *)&m;
            uint8_t qb[8];
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float v = ldf(hv, e);
                int32_t c;
                if (!kq_qadd_round(v, qp.inv, qp.zp, lo, hi, &c))
                    c = div_round(v, qp.scale, qp.zp, lo, hi);
                qb[e] = (uint8_t)c;
            }
            *(uint2 *)((uint8_t *)y + o) = *(const uint2 *)qb;
        }
    }
}

// Q: 0 the half values, 1 uint8, 2 int8
template <typename T, int Q>
__global__ void __launch_bounds__(THREADS, 2)
    k_stem_pool(const T *__restrict__ x, const T *__restrict__ w, const float *__restrict__ bias, void *__restrict__ y,
                stem_geo g, cuk_stem_q qp)
{
    extern __shared__ __align__(128) unsigned char smem[];
    T *bs = (T *)smem;
    T *ct = (T *)(smem + SM_B + 2 * SM_H);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n0 = blockIdx.y * 64;
    for (int i = tid; i < 64 * (KP / 8); i += THREADS) {
        const int row = i / (KP / 8), ch = i % (KP / 8);
        cp_async16(bs + row * BP + ch * 8, w + (int64_t)(n0 + row) * KP + ch * 8, true);
    }
    // tile t: image, pooled origin (ph0, pw0); its convolution origin 2 * ph0 - 1, input origin 2 * (that) - 3
    auto halo = [&](int t, int buf) {
        const int img = t / (g.tiles_h * g.tiles_w), r = t % (g.tiles_h * g.tiles_w);
        const int ih0 = 4 * (r / g.tiles_w) * TP - 5, iw0 = 4 * (r % g.tiles_w) * TP - 5;
        T *hs = (T *)(smem + SM_B + buf * SM_H);
        const T *xi = x + (int64_t)img * g.h * g.w * 4;
        for (int i = tid; i < HR * HC; i += THREADS) {
            const int ih = ih0 + i / HC, iw = iw0 + i % HC;
            const bool ok = (unsigned)ih < (unsigned)g.h && (unsigned)iw < (unsigned)g.w;
            cp_async8(hs + i * 4, ok ? xi + ((int64_t)ih * g.w + iw) * 4 : x, ok);
        }
    };
    // this lane's ldmatrix rows: A (pixel row `mrow` of a 16-row tile, taps +2 for the upper 8 k), B
    const int amat = lane >> 3, mrow = (lane & 7) + (amat & 1) * 8, akh = amat >> 1;
    const int brow = (lane & 7) + ((amat >> 1) << 3), bk = (amat & 1) * 8;
    const int g8 = lane >> 2, tig = lane & 3;
    int t = blockIdx.x;
    if (t < g.tiles)
        halo(t, 0);
    cp_commit();
    for (int buf = 0; t < g.tiles; t += gridDim.x, buf ^= 1) {
        const int tn = t + gridDim.x;
        if (tn < g.tiles)
            halo(tn, buf ^ 1);
        cp_commit();
        cp_wait<1>();   // this tile's halo (and the filter) landed; the next one's may still be in flight
        __syncthreads();
        const unsigned char *hs = smem + SM_B + buf * SM_H;
        float acc[2][8][4];
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[i][j][e] = 0.f;
        // warp w: convolution rows 2w, 2w + 1 of the tile (its two 16-row MMA tiles), columns 0..15
#pragma unroll 1
        for (int r = 0; r < 7; r++) {
#pragma unroll
            for (int s0 = 0; s0 < 8; s0 += 4) {
                const int kk = r * 32 + s0 * 4;
                uint32_t a[2][4], b[8][2];
#pragma unroll
                for (int i = 0; i < 2; i++)
                    ldsm_x4(a[i], hs + ((2 * (2 * warp + i) + r) * HC + 2 * mrow + s0 + 2 * akh) * 8);
#pragma unroll
                for (int jj = 0; jj < 4; jj++) {
                    uint32_t v[4];
                    ldsm_x4(v, bs + (jj * 16 + brow) * BP + kk + bk);
                    b[2 * jj][0] = v[0];
                    b[2 * jj][1] = v[1];
                    b[2 * jj + 1][0] = v[2];
                    b[2 * jj + 1][1] = v[3];
                }
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        mma16816<T>(acc[i][j], a[i], b[j][0], b[j][1]);
            }
        }
        // + bias, ReLU, the half format: rows g8 and g8 + 8 of each 16-row tile, columns 2 tig, + 1 of each 8
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int col = j * 8 + tig * 2;
                const float b0 = bias ? bias[n0 + col] : 0.f, b1 = bias ? bias[n0 + col + 1] : 0.f;
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    float v0 = acc[i][j][hr * 2] + b0, v1 = acc[i][j][hr * 2 + 1] + b1;
                    if (g.relu) {
                        v0 = fmaxf(v0, 0.f);
                        v1 = fmaxf(v1, 0.f);
                    }
                    *(uint32_t *)&ct[((2 * warp + i) * CT + g8 + hr * 8) * CP + col] = pack2<T>(v0, v1);
                }
            }
        __syncthreads();
        pool_tile<T, Q>(ct, y, g, qp, t, n0, tid);
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

template <typename T, int Q>
cudaError_t launch(const void *x, const void *w, const float *bias, void *y, const stem_geo &g, const cuk_stem_q &q,
                   cudaStream_t s)
{
    auto kern = k_stem_pool<T, Q>;
    cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    int per_sm = 0;
    if (err == cudaSuccess)
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, THREADS, SMEM);
    if (err != cudaSuccess)
        return err;
    const int kb = g.k / 64;
    int64_t blocks = (int64_t)(per_sm > 0 ? per_sm : 1) * (sm_count() > 0 ? sm_count() : 1) / kb;
    blocks = blocks < 1 ? 1 : blocks > g.tiles ? g.tiles : blocks;
    kern<<<dim3((unsigned)blocks, (unsigned)kb), THREADS, SMEM, s>>>((const T *)x, (const T *)w, bias, y, g, q);
    return cudaGetLastError();
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

extern "C" cudaError_t cuk_stem_pool(int fdt, const void *x4, const void *w8, const float *bias, void *y,
                                     const cuk_conv_desc *d, int po, int qo, const cuk_stem_q *q, cudaStream_t s)
{
    if (!cuk_stem_pool_fits(d, po, qo) || (fdt != CUK_F16 && fdt != CUK_BF16) || q->kind < 0 || q->kind > 2)
        return cudaErrorInvalidValue;
    const int th = (po + TP - 1) / TP, tw = (qo + TP - 1) / TP;
    const stem_geo g = {d->n, d->h, d->w, d->p, d->q, po, qo, d->k, th, tw, d->n * th * tw, d->relu};
    if (fdt == CUK_F16) {
        if (q->kind == 1) return launch<__half, 1>(x4, w8, bias, y, g, *q, s);
        if (q->kind == 2) return launch<__half, 2>(x4, w8, bias, y, g, *q, s);
        return launch<__half, 0>(x4, w8, bias, y, g, *q, s);
    }
    if (q->kind == 1) return launch<__nv_bfloat16, 1>(x4, w8, bias, y, g, *q, s);
    if (q->kind == 2) return launch<__nv_bfloat16, 2>(x4, w8, bias, y, g, *q, s);
    return launch<__nv_bfloat16, 0>(x4, w8, bias, y, g, *q, s);
}
