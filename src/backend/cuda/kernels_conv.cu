// kiln's own half convolution for few input channels (cuda_conv.c: a network's stem, e.g. ResNet's 7x7 stride-2
// over 3 channels): cuDNN's tensor-core engines want channels in multiples of 8, and ResNet-50's stem took 3.6 of
// the 10.4 ms of an FP16 batch-256 run on the H200 through them. This is an implicit GEMM on mma.sync
// (m16n8k16, FP16 or BF16 operands, float32 accumulation): rows are output pixels (n, p, q), columns output
// channels, the reduction runs over (c, r, s) -- the weight's own KCRS order, padded with zeros to a multiple of
// 32 -- gathered from the input (float32 or half, NCHW or NHWC by strides) into shared memory as it goes.
// Epilogue in registers: + float32 bias, + residual (the output's storage and layout), ReLU.
#include "kernels_common.cuh"

namespace {

constexpr int BM = 128, BN = 64, BK = 32, THREADS = 128, MAX_KP = 512;

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T> __device__ __forceinline__ uint32_t pack2(float a, float b)
{
    T h[2] = {from_f<T>(a), from_f<T>(b)};
    return *(const uint32_t *)h;
}

// Element offset of 16-byte chunk ch (0..3) of row `row` in a [rows][BK] tile of 2-byte values: the chunks of a
// row are XOR-swizzled with row / 2 so that ldmatrix's 8 rows of one chunk hit 8 different bank groups.
__device__ __forceinline__ int swz(int row, int ch) { return row * BK + ((ch ^ ((row >> 1) & 3)) << 3); }

// Tin: the input's storage (float, __half, __nv_bfloat16); T: the operands' and output's half format. V4: x is
// the input as [n][h][w][4] in T (cuk_conv_to_nhwc4: channels zero-padded to 4) and the reduction runs over
// (r, s, c < 4), so each tap is one 8-byte load instead of 4 gathered scalars.
template <typename Tin, typename T, bool V4>
__global__ void __launch_bounds__(THREADS) k_conv_smallc(const Tin *__restrict__ x, const T *__restrict__ w,
                                                          const float *__restrict__ bias, const T *__restrict__ res,
                                                          T *__restrict__ y, cuk_conv_desc d)
{
    __shared__ __align__(16) T as[2 * BM * BK];
    __shared__ __align__(16) T bs[2 * BN * BK];
    // per reduction index (V4: per tap): .x input offset, .y (r * dh) << 16 | (s * dw); -1: padding. An offset is
    // only used in bounds (then it is below the input's size, < 2^30); out of bounds it may be truncated.
    __shared__ int2 tab[MAX_KP];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t M = (int64_t)d.n * d.p * d.q;
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int rs = d.r * d.s, crs = d.c * rs;
    if (V4) {   // per tap (r, s): .x its offset in the NHWC4 input
        for (int k = tid; k < d.kp / 4; k += THREADS) {
            const int r = k / d.s, s = k % d.s;
            tab[k] = k < rs ? make_int2((int)(((int64_t)r * d.dh * d.w + s * d.dw) * 4), (r * d.dh) << 16 | (s * d.dw))
                            : make_int2(0, -1);
        }
    }
    for (int k = tid; !V4 && k < d.kp; k += THREADS) {
        if (k < crs) {
            const int c = k / rs, r = (k % rs) / d.s, s = k % d.s;
            tab[k] = make_int2((int)(c * d.xsc + r * d.dh * d.xsh + s * d.dw * d.xsw), (r * d.dh) << 16 | (s * d.dw));
        } else {
            tab[k] = make_int2(0, -1);
        }
    }
    // this thread's output pixel (row tid of the A tile)
    const int64_t m = m0 + tid;
    const bool mok = m < M;
    int hb = 0, wb = 0;
    int64_t xbase = 0;
    if (mok) {
        const int64_t pq = (int64_t)d.p * d.q;
        const int64_t nn = m / pq, rem = m % pq;
        const int pp = (int)(rem / d.q), qq = (int)(rem % d.q);
        hb = pp * d.sh - d.ph;
        wb = qq * d.sw - d.pw;
        xbase = V4 ? ((nn * d.h + hb) * d.w + wb) * 4 : nn * d.xsn + (int64_t)hb * d.xsh + (int64_t)wb * d.xsw;
    }
    float acc[2][8][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.f;
    __syncthreads();
    // Two shared buffers; the next chunk's input values and weights are loaded into registers before this
    // chunk's MMAs, so their latency overlaps the tensor-core work.
    float f[BK];
    uint2 f4[BK / 4];
    uint4 wv[2];
    auto gather = [&](int k0) {
#pragma unroll
        for (int k = 0; V4 && k < BK / 4; k++) {
            const int2 t = tab[k0 / 4 + k];
            const int hh = hb + (t.y >> 16), ww = wb + (t.y & 0xffff);
            f4[k] = mok && t.y >= 0 && (unsigned)hh < (unsigned)d.h && (unsigned)ww < (unsigned)d.w
                        ? *(const uint2 *)&x[xbase + t.x]
                        : make_uint2(0, 0);
        }
#pragma unroll
        for (int k = 0; !V4 && k < BK; k++) {
            const int2 t = tab[k0 + k];
            const int hh = hb + (t.y >> 16), ww = wb + (t.y & 0xffff);
            f[k] = mok && t.y >= 0 && (unsigned)hh < (unsigned)d.h && (unsigned)ww < (unsigned)d.w ? ldf(x, xbase + t.x)
                                                                                                   : 0.f;
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int row = (tid + i * THREADS) >> 2, ch = (tid + i * THREADS) & 3;
            wv[i] = n0 + row < d.k ? *(const uint4 *)&w[(int64_t)(n0 + row) * d.kp + k0 + ch * 8]
                                   : make_uint4(0, 0, 0, 0);
        }
    };
    auto put = [&](int buf) {
        T *a_s = as + buf * BM * BK, *b_s = bs + buf * BN * BK;
#pragma unroll
        for (int ch = 0; V4 && ch < 4; ch++)
            *(uint4 *)&a_s[swz(tid, ch)] = make_uint4(f4[2 * ch].x, f4[2 * ch].y, f4[2 * ch + 1].x, f4[2 * ch + 1].y);
#pragma unroll
        for (int ch = 0; !V4 && ch < 4; ch++)
            *(uint4 *)&a_s[swz(tid, ch)] =
                make_uint4(pack2<T>(f[ch * 8 + 0], f[ch * 8 + 1]), pack2<T>(f[ch * 8 + 2], f[ch * 8 + 3]),
                           pack2<T>(f[ch * 8 + 4], f[ch * 8 + 5]), pack2<T>(f[ch * 8 + 6], f[ch * 8 + 7]));
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int row = (tid + i * THREADS) >> 2, ch = (tid + i * THREADS) & 3;
            *(uint4 *)&b_s[swz(row, ch)] = wv[i];
        }
    };
    gather(0);
    put(0);
    __syncthreads();
    for (int k0 = 0, buf = 0; k0 < d.kp; k0 += BK, buf ^= 1) {
        const bool more = k0 + BK < d.kp;
        if (more)
            gather(k0 + BK);
        const T *a_s = as + buf * BM * BK, *b_s = bs + buf * BN * BK;
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t a[2][4], b[8][2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                ldsm_x4(a[i], &a_s[swz(warp * 32 + i * 16 + (lane & 15), ks * 2 + (lane >> 4))]);
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                const int mi = lane >> 3;
                uint32_t r[4];
                ldsm_x4(r, &b_s[swz(jj * 16 + (lane & 7) + ((mi >> 1) << 3), ks * 2 + (mi & 1))]);
                b[2 * jj][0] = r[0];
                b[2 * jj][1] = r[1];
                b[2 * jj + 1][0] = r[2];
                b[2 * jj + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    mma16816<T>(acc[i][j], a[i], b[j][0], b[j][1]);
        }
        if (more)
            put(buf ^ 1);   // the other buffer: its last readers passed the barrier below one chunk ago
        __syncthreads();
    }
    // epilogue: rows g and g + 8 of each 16-row tile, columns 2 * tig, + 1 of each 8-column tile
    const int g = lane >> 2, tig = lane & 3;
    const int64_t pq = (int64_t)d.p * d.q;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int64_t row = m0 + warp * 32 + i * 16 + g + hr * 8;
            if (row >= M)
                continue;
            // the pixel's first element and the step between channels in y's layout
            int64_t base, cstep;
            if (d.y_nhwc) {
                base = row * d.k;
                cstep = 1;
            } else {
                base = (row / pq) * d.k * pq + row % pq;
                cstep = pq;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int col = n0 + j * 8 + tig * 2;
                if (d.y_nhwc && !(d.k & 1) && col + 1 < d.k) {   // two neighbouring channels: one 4-byte store
                    const int64_t o = base + col;
                    float v0 = acc[i][j][hr * 2], v1 = acc[i][j][hr * 2 + 1];
                    if (bias) {
                        v0 += bias[col];
                        v1 += bias[col + 1];
                    }
                    if (res) {
                        v0 += ldf(res, o);
                        v1 += ldf(res, o + 1);
                    }
                    if (d.relu) {
                        v0 = fmaxf(v0, 0.f);
                        v1 = fmaxf(v1, 0.f);
                    }
                    *(uint32_t *)&y[o] = pack2<T>(v0, v1);
                    continue;
                }
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    if (col + e >= d.k)
                        continue;
                    float v = acc[i][j][hr * 2 + e];
                    const int64_t o = base + (int64_t)(col + e) * cstep;
                    if (bias)
                        v += bias[col + e];
                    if (res)
                        v += ldf(res, o);
                    if (d.relu)
                        v = fmaxf(v, 0.f);
                    stf(y, o, v);
                }
            }
        }
}

template <typename Tin, typename T>
cudaError_t launch(const void *x, const void *w, const float *bias, const void *res, void *y, const cuk_conv_desc *d,
                   cudaStream_t s)
{
    const int64_t M = (int64_t)d->n * d->p * d->q;
    dim3 grid((unsigned)((M + BM - 1) / BM), (unsigned)((d->k + BN - 1) / BN));
    if (d->v4)
        k_conv_smallc<T, T, true><<<grid, THREADS, 0, s>>>((const T *)x, (const T *)w, bias, (const T *)res, (T *)y, *d);
    else
        k_conv_smallc<Tin, T, false><<<grid, THREADS, 0, s>>>((const Tin *)x, (const T *)w, bias, (const T *)res,
                                                              (T *)y, *d);
    return cudaGetLastError();
}

// y[n][h][w][0..4) = x[n][c][h][w] (by x's strides) for c < C, 0 past it, in T
template <typename Tin, typename T> __global__ void k_to_nhwc4(const Tin *__restrict__ x, T *__restrict__ y, cuk_conv_desc d)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, hw = (int64_t)d.h * d.w;
    if (i >= (int64_t)d.n * hw)
        return;
    const int64_t n = i / hw, r = i % hw, h = r / d.w, ww = r % d.w;
    const int64_t b = n * d.xsn + h * d.xsh + ww * d.xsw;
    float v[4];
#pragma unroll
    for (int c = 0; c < 4; c++)
        v[c] = c < d.c ? ldf(x, b + c * d.xsc) : 0.f;
    *(uint2 *)&y[i * 4] = make_uint2(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]));
}

// w4[k][(r * S + s) * 4 + c] = w[k][c][r][s] for c < C, zeros elsewhere up to kp (w, w4 in T)
template <typename T> __global__ void k_w_rs4(const T *__restrict__ w, T *__restrict__ w4, cuk_conv_desc d)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)d.k * d.kp)
        return;
    const int k = (int)(i / d.kp), j = (int)(i % d.kp), t = j / 4, c = j % 4;
    const int r = t / d.s, s = t % d.s;
    w4[i] = t < d.r * d.s && c < d.c ? w[(((int64_t)k * d.c + c) * d.r + r) * d.s + s] : from_f<T>(0.f);
}

} // namespace

extern "C" int cuk_conv_smallc_max_kp(void) { return MAX_KP; }

extern "C" cudaError_t cuk_conv_to_nhwc4(int fdt_x, int fdt_y, const void *x, void *y, const cuk_conv_desc *d,
                                         cudaStream_t s)
{
    const int64_t n = (int64_t)d->n * d->h * d->w;
    if (d->c > 4 || (fdt_y != CUK_F16 && fdt_y != CUK_BF16) || n / 256 >= 0x7fffffff)
        return cudaErrorInvalidValue;
    const unsigned g = (unsigned)((n + 255) / 256);
    if (fdt_y == CUK_F16) {
        if (fdt_x == CUK_F32) k_to_nhwc4<float, __half><<<g, 256, 0, s>>>((const float *)x, (__half *)y, *d);
        else if (fdt_x == CUK_F16) k_to_nhwc4<__half, __half><<<g, 256, 0, s>>>((const __half *)x, (__half *)y, *d);
        else k_to_nhwc4<__nv_bfloat16, __half><<<g, 256, 0, s>>>((const __nv_bfloat16 *)x, (__half *)y, *d);
    } else {
        if (fdt_x == CUK_F32)
            k_to_nhwc4<float, __nv_bfloat16><<<g, 256, 0, s>>>((const float *)x, (__nv_bfloat16 *)y, *d);
        else if (fdt_x == CUK_F16)
            k_to_nhwc4<__half, __nv_bfloat16><<<g, 256, 0, s>>>((const __half *)x, (__nv_bfloat16 *)y, *d);
        else
            k_to_nhwc4<__nv_bfloat16, __nv_bfloat16><<<g, 256, 0, s>>>((const __nv_bfloat16 *)x, (__nv_bfloat16 *)y, *d);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_conv_w_rs4(int fdt, const void *w, void *w4, const cuk_conv_desc *d, cudaStream_t s)
{
    const int64_t n = (int64_t)d->k * d->kp;
    if (d->c > 4 || d->kp < d->r * d->s * 4 || (fdt != CUK_F16 && fdt != CUK_BF16) || n / 256 >= 0x7fffffff)
        return cudaErrorInvalidValue;
    const unsigned g = (unsigned)((n + 255) / 256);
    if (fdt == CUK_F16)
        k_w_rs4<__half><<<g, 256, 0, s>>>((const __half *)w, (__half *)w4, *d);
    else
        k_w_rs4<__nv_bfloat16><<<g, 256, 0, s>>>((const __nv_bfloat16 *)w, (__nv_bfloat16 *)w4, *d);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_conv_smallc(int fdt_x, int fdt_y, const void *x, const void *w, const float *bias,
                                       const void *res, void *y, const cuk_conv_desc *d, cudaStream_t s)
{
    if (d->kp % BK || d->kp > MAX_KP || d->kp < (d->v4 ? 4 : d->c) * d->r * d->s || (d->v4 && d->c > 4) ||
        d->r * d->dh >= 32768 || d->s * d->dw >= 32768 ||
        (fdt_y != CUK_F16 && fdt_y != CUK_BF16) || (int64_t)d->n * d->p * d->q / BM >= 0x7fffffff)
        return cudaErrorInvalidValue;
    if (fdt_y == CUK_F16) {
        if (fdt_x == CUK_F32) return launch<float, __half>(x, w, bias, res, y, d, s);
        if (fdt_x == CUK_F16) return launch<__half, __half>(x, w, bias, res, y, d, s);
        return launch<__nv_bfloat16, __half>(x, w, bias, res, y, d, s);
    }
    if (fdt_x == CUK_F32) return launch<float, __nv_bfloat16>(x, w, bias, res, y, d, s);
    if (fdt_x == CUK_F16) return launch<__half, __nv_bfloat16>(x, w, bias, res, y, d, s);
    return launch<__nv_bfloat16, __nv_bfloat16>(x, w, bias, res, y, d, s);
}
