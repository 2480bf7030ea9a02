// Fused attention in FP16 / BF16: Y = softmax(Q K^T * scale (+ mask | masked fill)) V in one kernel
// (flash-attention style: the scores never leave shared memory), on tensor cores through WMMA with
// FP32 accumulation and an FP32 online softmax.
//
// One block of 4 warps takes 64 query rows of one (batch, head) and walks the keys 64 at a time:
// it stages the K^T and V chunk in shared memory (zero-padded past Sk, D, Dv), each warp computes
// its 16 rows' scores (16x16x16 MMAs), updates their running max / sum (two lanes a row, all rows
// at once), writes the probabilities in the half format and adds P V to its rows of the output
// accumulator, which stays in shared memory in float32 (rescaled when the running max moves).
// Any S, Sk; D and Dv up to 128.
#include "kernels_common.cuh"
#include <mma.h>

using namespace nvcuda;

#define AQ 64        // query rows per block (16 per warp)
#define AK 64        // keys per chunk
#define AWARPS 4
#define AMAX_D 128

// Shared-memory layout (element strides padded against bank conflicts; every region 32-byte aligned
// as WMMA loads require).
struct attn_smem {
    int ldq, ldk, ldv, lds, ldp, ldo;
    size_t q, k, v, s, p, o, m, bytes;
};

static size_t up128(size_t x) { return (x + 127) / 128 * 128; }

static attn_smem attn_layout(int dp, int dvp, size_t es)
{
    attn_smem a;
    a.ldq = dp + 8;
    a.ldk = AK + 8;
    a.ldv = dvp + 8;
    a.lds = AK + 4;
    a.ldp = AK + 8;
    a.ldo = dvp + 4;
    a.q = 0;
    a.k = up128(a.q + (size_t)AQ * a.ldq * es);
    a.v = up128(a.k + (size_t)dp * a.ldk * es);
    a.s = up128(a.v + (size_t)AK * a.ldv * es);
    a.p = up128(a.s + (size_t)AQ * a.lds * sizeof(float));
    a.o = up128(a.p + (size_t)AQ * a.ldp * es);
    a.m = up128(a.o + (size_t)AQ * a.ldo * sizeof(float));
    a.bytes = up128(a.m + (size_t)AQ * sizeof(int64_t));
    return a;
}

template <typename T> __device__ __forceinline__ T tzero();
template <> __device__ __forceinline__ __half tzero<__half>() { return __float2half_rn(0.f); }
template <> __device__ __forceinline__ __nv_bfloat16 tzero<__nv_bfloat16>() { return __float2bfloat16_rn(0.f); }

// dst[r * ldd + c] = src[r * lsrc + c] for r < rows, c < cols, else 0, over R x C (C a multiple of 8).
// vec: cols and lsrc multiples of 8 and src 16-byte aligned: 16-byte loads, several in flight per thread.
template <typename T>
__device__ __forceinline__ void stage(T *dst, int ldd, const T *src, int64_t lsrc, int rows, int cols, int R, int C,
                                      bool vec)
{
    if (vec) {
        const int cv = C / 8;
#pragma unroll 4
        for (int i = threadIdx.x; i < R * cv; i += blockDim.x) {
            int r = i / cv, c = (i % cv) * 8;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (r < rows && c < cols)
                x = *(const uint4 *)(src + r * lsrc + c);
            *(uint4 *)(dst + r * ldd + c) = x;
        }
        return;
    }
    const T z = tzero<T>();
#pragma unroll 8
    for (int i = threadIdx.x; i < R * C; i += blockDim.x) {
        int r = i / C, c = i % C;
        dst[r * ldd + c] = r < rows && c < cols ? src[r * lsrc + c] : z;
    }
}

template <typename T>
__global__ void __launch_bounds__(AWARPS * 32)
    k_attn_fused(const T *q, const T *kt, const T *v, T *y, int S, int Sk, int D, int Dv, int dp, int dvp, float scale,
                 const void *mask, int kind, float fill, shape_arg sh, attn_smem L, int vec)
{
    extern __shared__ __align__(128) unsigned char smem[];
    T *sq = (T *)(smem + L.q), *sk = (T *)(smem + L.k), *sv = (T *)(smem + L.v), *sp = (T *)(smem + L.p);
    float *ss = (float *)(smem + L.s), *so = (float *)(smem + L.o);
    int64_t *smo = (int64_t *)(smem + L.m);
    const int64_t b = blockIdx.x;
    const int s0 = blockIdx.y * AQ, warp = threadIdx.x / 32, lane = threadIdx.x % 32, nt = blockDim.x;
    q += b * S * D;
    kt += b * D * Sk;
    v += b * Sk * Dv;
    y += b * S * Dv;
    stage(sq, L.ldq, q + (int64_t)s0 * D, D, S - s0, D, AQ, dp, vec & 1);
    for (int i = threadIdx.x; i < AQ * dvp; i += nt)
        so[(i / dvp) * L.ldo + i % dvp] = 0.f;
    for (int r = threadIdx.x; r < AQ; r += nt)
        smo[r] = mask && s0 + r < S ? mask_row_off(sh, b * S + s0 + r) : 0;
    const int64_t mk = mask ? sh.str[0][sh.ndim - 1] : 0;
    // the online softmax: lane owns row rr of the warp's 16 and the chunk's columns hf, hf + 2, ... (its
    // partner lane ^ 16 the others); m_i, l_i: the row's running max and sum
    const int rr = lane & 15, hf = lane >> 4;
    float m_i = -INFINITY, l_i = 0.f;
    T *wq = sq + warp * 16 * L.ldq, *wp = sp + warp * 16 * L.ldp;
    float *ws = ss + warp * 16 * L.lds, *wo = so + warp * 16 * L.ldo;
    for (int k0 = 0; k0 < Sk; k0 += AK) {
        __syncthreads();   // the previous chunk's K^T / V are no longer read
        stage(sk, L.ldk, kt + k0, Sk, D, Sk - k0, dp, AK, vec & 2);
        stage(sv, L.ldv, v + (int64_t)k0 * Dv, Dv, Sk - k0, Dv, AK, dvp, vec & 4);
        __syncthreads();
        // scores of this warp's 16 rows
        for (int f = 0; f < AK / 16; f++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.f);
            for (int d = 0; d < dp; d += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, wq + d, L.ldq);
                wmma::load_matrix_sync(fb, sk + d * L.ldk + f * 16, L.ldk);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(ws + f * 16, acc, L.lds, wmma::mem_row_major);
        }
        __syncwarp();
        // online softmax, all 16 rows at once (2 lanes a row, 32 columns each)
        {
            const int64_t mo = smo[warp * 16 + rr];
            float x[AK / 2];
#pragma unroll
            for (int j = 0; j < AK / 2; j++) {
                int c = hf + 2 * j, kk = k0 + c;
                float t = -INFINITY;
                if (kk < Sk) {
                    t = ws[rr * L.lds + c] * scale;
                    if (mask)
                        t = masked(t, mask, kind, fill, mo + kk * mk);
                }
                x[j] = t;
            }
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < AK / 2; j++)
                mx = fmaxf(mx, x[j]);
            float mnew = fmaxf(m_i, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16)));
            float alpha = 1.f, sum = 0.f;
#pragma unroll
            for (int j = 0; j < AK / 2; j++) {
                x[j] = mnew == -INFINITY ? 0.f : __expf(x[j] - mnew);
                sum += x[j];
            }
            if (mnew != -INFINITY)
                alpha = __expf(m_i - mnew);
            l_i = l_i * alpha + sum + __shfl_xor_sync(0xffffffffu, sum, 16);
            m_i = mnew;
#pragma unroll
            for (int j = 0; j < AK / 2; j++)
                stf(wp, rr * L.ldp + hf + 2 * j, x[j]);
            if (alpha != 1.f)
                for (int e = hf; e < dvp; e += 2)
                    wo[rr * L.ldo + e] *= alpha;
        }
        __syncwarp();
        // this warp's rows of the output += P V
        for (int e = 0; e < dvp; e += 16) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, wo + e, L.ldo, wmma::mem_row_major);
            for (int c = 0; c < AK; c += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, wp + c, L.ldp);
                wmma::load_matrix_sync(fb, sv + c * L.ldv + e, L.ldv);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(wo + e, acc, L.ldo, wmma::mem_row_major);
        }
        __syncwarp();
    }
    for (int r = 0; r < 16; r++) {
        const int s = s0 + warp * 16 + r;
        float lr = __shfl_sync(0xffffffffu, l_i, r);   // lane r owns row r
        if (s < S) {
            float inv = 1.0f / lr;
            for (int e = lane; e < Dv; e += 32)
                stf(y, (int64_t)s * Dv + e, wo[r * L.ldo + e] * inv);
        }
    }
}

extern "C" bool cuk_attn_fused_fits(int fdt, int64_t nb, int64_t S, int64_t Sk, int64_t D, int64_t Dv)
{
    return (fdt == CUK_F16 || fdt == CUK_BF16) && nb > 0 && nb <= INT32_MAX && S > 0 && Sk > 0 && D > 0 &&
           Dv > 0 && D <= AMAX_D && Dv <= AMAX_D && (S + AQ - 1) / AQ <= 65535 && S * D <= INT32_MAX &&
           Sk * D <= INT32_MAX && Sk * Dv <= INT32_MAX && S * Dv <= INT32_MAX;
}

template <typename T>
static cudaError_t attn_launch(const void *q, const void *kt, const void *v, void *y, int64_t nb, int64_t S,
                               int64_t Sk, int64_t D, int64_t Dv, float scale, const void *mask, int kind, float fill,
                               const cuk_shape *sh, cudaStream_t s)
{
    int dp = (int)((D + 15) / 16 * 16), dvp = (int)((Dv + 15) / 16 * 16);
    attn_smem L = attn_layout(dp, dvp, sizeof(T));
    cudaError_t e = cudaFuncSetAttribute(k_attn_fused<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.bytes);
    if (e != cudaSuccess)
        return e;
    shape_arg a;
    memset(&a, 0, sizeof a);
    if (mask)
        a = to_arg(sh);
    dim3 grid((unsigned)nb, (unsigned)((S + AQ - 1) / AQ));
    /* 16-byte staging where rows are whole vectors and the bases aligned */
    int vec = (D % 8 == 0 && (uintptr_t)q % 16 == 0 ? 1 : 0) | (Sk % 8 == 0 && (uintptr_t)kt % 16 == 0 ? 2 : 0) |
              (Dv % 8 == 0 && (uintptr_t)v % 16 == 0 ? 4 : 0);
    k_attn_fused<T><<<grid, AWARPS * 32, L.bytes, s>>>((const T *)q, (const T *)kt, (const T *)v, (T *)y, (int)S,
                                                       (int)Sk, (int)D, (int)Dv, dp, dvp, scale, mask, kind, fill, a,
                                                       L, vec);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_attn_fused(int fdt, const void *q, const void *kt, const void *v, void *y, int64_t nb,
                                      int64_t S, int64_t Sk, int64_t D, int64_t Dv, float scale, const void *mask,
                                      int kind, float fill, const cuk_shape *sh, cudaStream_t s)
{
    if (!cuk_attn_fused_fits(fdt, nb, S, Sk, D, Dv))
        return cudaErrorInvalidValue;
    if (fdt == CUK_F16)
        return attn_launch<__half>(q, kt, v, y, nb, S, Sk, D, Dv, scale, mask, kind, fill, sh, s);
    return attn_launch<__nv_bfloat16>(q, kt, v, y, nb, S, Sk, D, Dv, scale, mask, kind, fill, sh, s);
}
