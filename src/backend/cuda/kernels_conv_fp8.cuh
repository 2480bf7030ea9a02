// What kiln's two FP8 convolution kernels share (kernels_conv_fp8.cu on mma.sync, kernels_conv_fp8_wg.cu on Hopper's
// wgmma): the implicit GEMM's addressing (rows are output pixels (n, p, q) of the NHWC E4M3 input, the reduction runs
// over (r, s, c) -- the KRSC filter's own order -- in 16-byte pieces, each within one filter tap because C is a
// multiple of 16), cp.async, and the epilogue of 8 neighbouring channels of one pixel.
#ifndef KILN_BACKEND_CUDA_KERNELS_CONV_FP8_CUH
#define KILN_BACKEND_CUDA_KERNELS_CONV_FP8_CUH
#include "kernels_common.cuh"
#include <type_traits>

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0;   // 0 bytes read: the 16 bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// One thread's 16-byte piece of the reduction: its index kc, channel pc, filter row pr and column ps; advanced by a
// step of `by` bytes at a time (loads come in step order).
struct fp8_piece {
    int kc, pc, pr, ps;
    __host__ __device__ __forceinline__ void init(int k, const cuk_conv_desc &d)
    {
        kc = pc = k;
        pr = ps = 0;
        carry(d);
    }
    __host__ __device__ __forceinline__ void advance(int by, const cuk_conv_desc &d)
    {
        kc += by;
        pc += by;
        carry(d);
    }
    __host__ __device__ __forceinline__ void carry(const cuk_conv_desc &d)
    {
        while (pc >= d.c) {
            pc -= d.c;
            if (++ps == d.s) {
                ps = 0;
                ++pr;
            }
        }
    }
};

// One row of the GEMM (output pixel m): the input's top-left tap (hb, wb), the image's offset xb, whether m < M.
// A 1x1 stride-1 convolution without padding is a plain GEMM: pixel m's channels start at m * c (no divisions; ncu
// on ResNet-50's memory-bound 1x1 layers: the issue slots, not the memory, are their limit).
struct fp8_row {
    int hb, wb;
    int64_t xb;
    bool ok;
    __host__ __device__ __forceinline__ void init(int64_t m, int64_t M, bool gemm, int64_t pq, const cuk_conv_desc &d)
    {
        ok = m < M;
        if (gemm) {
            hb = wb = 0;
            xb = ok ? m * d.c : 0;
        } else {
            // 32-bit divisions where the rows fit (64-bit ones are a call of ~70 instructions each)
            int64_t nn = 0;
            int rem = 0;
            if (ok && M <= 0x7fffffff) {
                const unsigned mu = (unsigned)m, pu = (unsigned)pq, nu = mu / pu;
                nn = nu;
                rem = (int)(mu - nu * pu);
            } else if (ok) {
                nn = m / pq;
                rem = (int)(m % pq);
            }
            hb = rem / d.q * d.sh - d.ph;
            wb = rem % d.q * d.sw - d.pw;
            xb = nn * d.h * d.w * d.c;
        }
    }
    // the source of piece p of this row (x itself and *valid false outside the image or past the reduction)
    __host__ __device__ __forceinline__ const uint8_t *src(const uint8_t *x, const fp8_piece &p, bool kok,
                                                  const cuk_conv_desc &d, bool *valid) const
    {
        const int hh = hb + p.pr * d.dh, ww = wb + p.ps * d.dw;
        *valid = kok && ok && (unsigned)hh < (unsigned)d.h && (unsigned)ww < (unsigned)d.w;
        return *valid ? x + xb + ((int64_t)hh * d.w + ww) * d.c + p.pc : x;
    }
};

__host__ __device__ __forceinline__ bool fp8_is_gemm(const cuk_conv_desc &d)
{
    return d.r == 1 && d.s == 1 && d.sh == 1 && d.sw == 1 && d.ph == 0 && d.pw == 0;
}

// The residual tile [rows][bn] (T, or E4M3 bytes where res is NULL) copied by cp.async into rsm: 16-byte pieces,
// zeros past M or past the channels (d.k a multiple of 16 / element size). The element size is a constant in each
// branch: the index arithmetic is shifts.
template <typename T, int ROWS, int BN, int THREADS>
__device__ __forceinline__ void fp8_copy_residual(uint8_t *rsm, const T *res, const uint8_t *resq, int64_t m0, int n0,
                                                  int64_t M, const cuk_conv_desc &d, int tid)
{
    auto copy = [&](const uint8_t *rb, auto es_c) {
        constexpr int es = decltype(es_c)::value, per = 16 / es, rowp = BN / per;   // values a piece, a row's
#pragma unroll 2
        for (int it = 0; it < ROWS * rowp / THREADS; it++) {
            const int i = tid + it * THREADS, r = i / rowp, c = (i % rowp) * per;
            const bool ok = m0 + r < M && n0 + c < d.k;
            cp_async16(&rsm[(r * BN + c) * es], ok ? rb + ((m0 + r) * d.k + n0 + c) * es : rb, ok);
        }
    };
    if (res)
        copy((const uint8_t *)res, std::integral_constant<int, (int)sizeof(T)>{});
    else
        copy(resq, std::integral_constant<int, 1>{});
}

// 8 neighbouring channels of one pixel, v = scale x sum + bias: + the residual (r: 8 values of T, or where rq 8 E4M3
// bytes x rsc; NULL: none), ReLU, one 16-byte store of the output (y may be NULL: held only as E4M3) and 8
// bytes of its E4M3 feed (yq, values x iv, saturating; before the output's rounding, as cuDNN's graph writes it).
template <typename T>
__device__ __forceinline__ void fp8_out8(float *v, const uint8_t *r, bool rq, float rsc, bool relu, T *y, uint8_t *yq,
                                         float iv)
{
    if (r && !rq) {
        float rv[8];
        ld8((const T *)r, rv);   // kernels_common.cuh: 16 / 32-byte vectors
#pragma unroll
        for (int e = 0; e < 8; e++)
            v[e] += rv[e];
    } else if (r) {   // a residual held in E4M3: q x its scale, as the CPU's rounding gives it
        const uint2 u = *(const uint2 *)r;
        const __nv_fp8x2_storage_t *p2 = (const __nv_fp8x2_storage_t *)&u;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(p2[e], __NV_E4M3)));
            v[2 * e] += f.x * rsc;
            v[2 * e + 1] += f.y * rsc;
        }
    }
    if (relu) {
#pragma unroll
        for (int e = 0; e < 8; e++)
            v[e] = fmaxf(v[e], 0.f);
    }
    if (y)
        st8(y, v);
    if (yq) {
        uint32_t q[2];
#pragma unroll
        for (int e = 0; e < 2; e++)
            q[e] = (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(v[4 * e] * iv, v[4 * e + 1] * iv), __NV_SATFINITE,
                                                      __NV_E4M3) |
                   (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(v[4 * e + 2] * iv, v[4 * e + 3] * iv),
                                                      __NV_SATFINITE, __NV_E4M3)
                       << 16;
        *(uint2 *)yq = make_uint2(q[0], q[1]);
    }
}

// The byte offset of 16-byte piece ch of row `row` in a tile of bk-byte rows (64 or 128), XOR-swizzled as wgmma's
// descriptors (wg_desc) read it; in the 64-byte mode ldmatrix's 8 rows of one piece also fall in 8 bank groups
__device__ __forceinline__ int wg_swz(int row, int ch, int bk)
{
    return bk == 128 ? row * 128 + ((ch ^ (row & 7)) << 4) : row * 64 + ((ch ^ ((row >> 1) & 3)) << 4);
}

// The A and B fragments of half-step ks (32 of a 64-byte step's bytes) of an mma.sync m16n8k32 warp tile of 64 x 32
// (rows wm * 64, columns wn * 32), by ldmatrix from the stage's [rows][64] byte tiles in the 64-byte swizzle: the FP8
// (kernels_conv_fp8.cu) and INT8 (kernels_conv_i8.cu) mma.sync kernels
__device__ __forceinline__ void ldsm_k32(uint32_t a[4][4], uint32_t b[4][2], const uint8_t *a_s, const uint8_t *b_s,
                                         int lane, int wm, int wn, int ks)
{
#pragma unroll
    for (int i = 0; i < 4; i++)
        ldsm_x4(a[i], &a_s[wg_swz(wm * 64 + i * 16 + (lane & 15), ks * 2 + (lane >> 4), 64)]);
#pragma unroll
    for (int jj = 0; jj < 2; jj++) {
        const int mi = lane >> 3;
        uint32_t r[4];
        ldsm_x4(r, &b_s[wg_swz(wn * 32 + jj * 16 + (lane & 7) + ((mi >> 1) << 3), ks * 2 + (mi & 1), 64)]);
        b[2 * jj][0] = r[0];
        b[2 * jj][1] = r[1];
        b[2 * jj + 1][0] = r[2];
        b[2 * jj + 1][1] = r[3];
    }
}

#endif
