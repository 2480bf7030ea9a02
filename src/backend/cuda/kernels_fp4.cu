// Weight-only 4-bit GEMM (NVFP4, MXFP4, INT4 weights; FP16 activations): Y[M, N] = A[M, K] W^T, W the
// layer's packed weight as the CPU backend stores it (KILN_PREP_LOWBIT_W: rows = N output channels of
// ceil(K / 2) bytes, two elements a byte, the even one in the low nibble; one scale per block of k).
// Hopper has no FP4 tensor cores, so each 128 x 32 tile of W is decoded on the fly (the code's value
// times its block scale, the FP32 product rounded to FP16: exactly the CPU emulation's weight) into
// shared memory, and the FP16 tensor cores multiply it (mma.sync m16n8k16, FP32 accumulation). The
// weight never exists dequantized in device memory: it stays 4.5 (NVFP4) or 4.25 (MXFP4) bits a weight.
//
// A block of 8 warps computes a 128 x 128 tile of Y (warps 2 x 4, 64 x 32 each), walking K 32 at a
// time with two shared-memory stages: the next A tile arrives by cp.async and the next W tile's packed
// bytes and scales are loaded into registers while the current one is multiplied.
#include "kernels_common.cuh"
#include <cuda_fp8.h>

#define GM 128
#define GN 128
#define GK 32
#define GLD (GK + 8)   // padded rows: ldmatrix without bank conflicts
#define GTHREADS 256

struct fp4_params {
    const __half *a;
    int64_t lda, M, N, K;
    const uint8_t *w;       // N rows of row_bytes
    const uint8_t *scales;  // N * nblk scales (1 byte, or 2 for INT4's FP16)
    int64_t row_bytes, nblk;
    int fmt, block;         // CUK_Q_NVFP4 / CUK_Q_MXFP4 / CUK_Q_INT4; elements a scale
    float ts;               // NVFP4's tensor scale
    void *y;
    int vec_a, vec_w;       // 16-byte A copies; 8-byte W loads
    float *ws;              // split K (gridDim.z parts): FP32 sums added here (zeroed), else NULL
    int tiles;              // K tiles a part
};

// E2M1 code values and sign-extended INT4 (copied to shared memory per block: the lanes of a warp look up
// different codes, which constant memory would serialize)
__constant__ float c_fp4[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
__constant__ float c_int4[16] = {0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1};

__device__ __forceinline__ float e8m0_val(uint8_t v) { return v == 0xff ? NAN : ldexpf(1.f, (int)v - 127); }

// The FP32 scale of block kb of row n (NVFP4: the E4M3 block scale times the tensor scale, as the CPU does)
__device__ __forceinline__ float block_scale(const fp4_params &p, int64_t n, int64_t kb)
{
    const int64_t i = n * p.nblk + kb;
    if (p.fmt == CUK_Q_NVFP4)
        return e4m3_val(p.scales[i]) * p.ts;
    if (p.fmt == CUK_Q_MXFP4)
        return e8m0_val(p.scales[i]);
    return __half2float(((const __half *)p.scales)[i]);
}

// This thread's piece of a W tile: row n0 + tid / 2, k elements k0 + (tid % 2) * 16 .. + 16 (one NVFP4 block,
// half an MXFP4 / INT4 one), as packed bytes and the block's scale.
struct w_piece {
    uint2 bytes;
    float scale;
};

__device__ __forceinline__ w_piece w_load(const fp4_params &p, int64_t n0, int64_t k0)
{
    w_piece w;
    w.bytes = make_uint2(0, 0);
    w.scale = 0.f;
    const int64_t n = n0 + threadIdx.x / 2, k = k0 + (threadIdx.x % 2) * 16;
    if (n >= p.N || k >= p.K)
        return w;
    const uint8_t *row = p.w + n * p.row_bytes + k / 2;
    if (p.vec_w && k + 16 <= p.K) {
        w.bytes = *(const uint2 *)row;
    } else {
        uint8_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = 0; i < 8 && k + 2 * i < p.K; i++)
            b[i] = row[i];
        w.bytes.x = b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
        w.bytes.y = b[4] | b[5] << 8 | b[6] << 16 | (uint32_t)b[7] << 24;
    }
    w.scale = block_scale(p, n, k / p.block);
    return w;
}

// Decodes the piece into 16 FP16 values of its row of the shared W tile (0 past K).
__device__ __forceinline__ void w_store(const fp4_params &p, const w_piece &w, __half *sw, int64_t k0, const float *lut)
{
    const int r = threadIdx.x / 2, c = (threadIdx.x % 2) * 16;
    const int64_t k = k0 + c;
    uint32_t out[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t byte = ((i < 4 ? w.bytes.x : w.bytes.y) >> ((i % 4) * 8)) & 0xffu;
        float lo = lut[byte & 15u] * w.scale, hi = lut[byte >> 4] * w.scale;
        if (k + 2 * i >= p.K)
            lo = 0.f;
        if (k + 2 * i + 1 >= p.K)
            hi = 0.f;
        __half2 h = __halves2half2(__float2half_rn(lo), __float2half_rn(hi));
        out[i] = *(uint32_t *)&h;
    }
    uint4 *d = (uint4 *)(sw + r * GLD + c);
    d[0] = make_uint4(out[0], out[1], out[2], out[3]);
    d[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

// A tile rows m0.., k0..k0 + GK into sa (zero outside M x K)
__device__ __forceinline__ void a_stage(const fp4_params &p, __half *sa, int64_t m0, int64_t k0)
{
    for (int i = threadIdx.x; i < GM * GK / 8; i += GTHREADS) {
        const int r = i / (GK / 8), c = (i % (GK / 8)) * 8;
        const int64_t m = m0 + r, k = k0 + c;
        __half *d = sa + r * GLD + c;
        if (p.vec_a && m < p.M && k + 8 <= p.K) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(d)), "l"(p.a + m * p.lda + k));
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++)
                d[e] = m < p.M && k + e < p.K ? p.a[m * p.lda + k + e] : __float2half_rn(0.f);
        }
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

template <typename OT>
__global__ void __launch_bounds__(GTHREADS) k_fp4_gemm(const fp4_params p)
{
    __shared__ __align__(128) __half sa[2][GM * GLD];
    __shared__ __align__(128) __half sw[2][GN * GLD];
    __shared__ float lut[16];
    if (threadIdx.x < 16)
        lut[threadIdx.x] = p.fmt == CUK_Q_INT4 ? c_int4[threadIdx.x] : c_fp4[threadIdx.x];
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
    const int wm = warp / 4, wn = warp % 4;   // 2 x 4 warps, 64 x 32 each
    const int64_t m0 = (int64_t)blockIdx.y * GM, n0 = (int64_t)blockIdx.x * GN;
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
    const int nkt = (int)((p.K + GK - 1) / GK), t0 = blockIdx.z * p.tiles;
    const int nk = nkt - t0 < p.tiles ? nkt - t0 : p.tiles;   // this part's tiles: t0 .. t0 + nk
    const int64_t kb = (int64_t)t0 * GK;
    a_stage(p, sa[0], m0, kb);
    w_piece w = w_load(p, n0, kb);
    w_store(p, w, sw[0], kb, lut);
    for (int t = 0; t < nk; t++) {
        const int cur = t & 1;
        asm volatile("cp.async.wait_all;\n" ::);
        __syncthreads();   // tile t staged; every warp done with tile t - 1
        if (t + 1 < nk) {   // the next tile: A on its way, W's bytes in registers
            a_stage(p, sa[cur ^ 1], m0, kb + (int64_t)(t + 1) * GK);
            w = w_load(p, n0, kb + (int64_t)(t + 1) * GK);
        }
        const __half *A = sa[cur], *W = sw[cur];
#pragma unroll
        for (int ks = 0; ks < GK / 16; ks++) {
            uint32_t af[4][4], bf[2][4];
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
                ldsm_x4(af[mt], A + (wm * 64 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * GLD + ks * 16 +
                                  (lane >> 4) * 8);
#pragma unroll
            for (int n2 = 0; n2 < 2; n2++)
                ldsm_x4(bf[n2], W + (wn * 32 + n2 * 16 + (lane & 7) + (lane >> 4) * 8) * GLD + ks * 16 +
                                  ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int n2 = 0; n2 < 2; n2++) {
                    mma16816<__half>(acc[mt][2 * n2], af[mt], bf[n2][0], bf[n2][1]);
                    mma16816<__half>(acc[mt][2 * n2 + 1], af[mt], bf[n2][2], bf[n2][3]);
                }
        }
        if (t + 1 < nk)
            w_store(p, w, sw[cur ^ 1], kb + (int64_t)(t + 1) * GK, lut);   // read after the next barrier
    }
    OT *y = (OT *)p.y;
    const bool pairs = p.N % 2 == 0;
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            const int64_t col = n0 + wn * 32 + nt * 8 + tig * 2;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t row = m0 + wm * 64 + mt * 16 + gid + h * 8;
                if (row >= p.M || col >= p.N)
                    continue;
                const float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
                if (p.ws) {   // a part of K: its sums added to the others'
                    atomicAdd(p.ws + row * p.N + col, v0);
                    if (col + 1 < p.N)
                        atomicAdd(p.ws + row * p.N + col + 1, v1);
                } else if (pairs) {   // N even: col, col + 1 one aligned pair
                    *(uint32_t *)(y + row * p.N + col) = pack2<OT>(v0, v1);
                } else {
                    stf(y, row * p.N + col, v0);
                    if (col + 1 < p.N)
                        stf(y, row * p.N + col + 1, v1);
                }
            }
        }
}

template <typename OT> __global__ void k_fp4_split_out(const float *ws, OT *y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        stf(y, i, ws[i]);
}

// Parts of K for a grid of few tiles (small M): about two blocks an SM, each part at least 4 tiles of K.
extern "C" int cuk_fp4_gemm_splits(int64_t M, int64_t N, int64_t K)
{
    int64_t tiles = ((M + GM - 1) / GM) * ((N + GN - 1) / GN), nk = (K + GK - 1) / GK;
    int sms = 132;
    int dev;
    if (cudaGetDevice(&dev) == cudaSuccess)
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (tiles >= sms || nk < 8)
        return 1;
    int64_t want = (2 * (int64_t)sms + tiles - 1) / tiles, most = nk / 4;
    int64_t sp = want < most ? want : most;
    return sp < 1 ? 1 : sp > 64 ? 64 : (int)sp;
}

/* The packed weight's part of the parameters: N rows of K 4-bit values (block scales, tensor scale ts), output y. */
static fp4_params w_params(const uint8_t *w, const void *scales, int fmt, int64_t block, float ts, int64_t N, int64_t K,
                           void *y)
{
    fp4_params p;
    memset(&p, 0, sizeof p);
    p.N = N;
    p.K = K;
    p.w = w;
    p.scales = (const uint8_t *)scales;
    p.row_bytes = (K + 1) / 2;
    p.nblk = (K + block - 1) / block;
    p.fmt = fmt;
    p.block = (int)block;
    p.ts = ts;
    p.y = y;
    return p;
}

extern "C" cudaError_t cuk_fp4_gemm(int out_fdt, const void *a, int64_t lda, int64_t M, int64_t K, const uint8_t *w,
                                    const void *scales, int fmt, int64_t block, float ts, void *y, int64_t N,
                                    float *ws, int splits, cudaStream_t s)
{
    if (M <= 0 || N <= 0 || K <= 0 || (block != 16 && block != 32) || (N + GN - 1) / GN > INT32_MAX ||
        (M + GM - 1) / GM > 65535 || (out_fdt != CUK_F16 && out_fdt != CUK_BF16))
        return cudaErrorInvalidValue;
    fp4_params p = w_params(w, scales, fmt, block, ts, N, K, y);
    p.a = (const __half *)a;
    p.lda = lda;
    p.M = M;
    p.vec_a = lda % 8 == 0 && (uintptr_t)a % 16 == 0;
    p.vec_w = p.row_bytes % 8 == 0 && (uintptr_t)w % 8 == 0;
    const int64_t nk = (K + GK - 1) / GK;
    if (splits < 1 || !ws)
        splits = 1;
    p.tiles = (int)((nk + splits - 1) / splits);
    splits = (int)((nk + p.tiles - 1) / p.tiles);   // no empty part
    p.ws = splits > 1 ? ws : NULL;
    if (p.ws && cudaMemsetAsync(ws, 0, sizeof(float) * (size_t)(M * N), s) != cudaSuccess)
        return cudaGetLastError();
    dim3 grid((unsigned)((N + GN - 1) / GN), (unsigned)((M + GM - 1) / GM), (unsigned)splits);
    if (out_fdt == CUK_F16)
        k_fp4_gemm<__half><<<grid, GTHREADS, 0, s>>>(p);
    else
        k_fp4_gemm<__nv_bfloat16><<<grid, GTHREADS, 0, s>>>(p);
    if (p.ws) {
        const int64_t n = M * N;
        const unsigned blocks = (unsigned)(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
        if (out_fdt == CUK_F16)
            k_fp4_split_out<__half><<<blocks, 256, 0, s>>>(ws, (__half *)y, n);
        else
            k_fp4_split_out<__nv_bfloat16><<<blocks, 256, 0, s>>>(ws, (__nv_bfloat16 *)y, n);
    }
    return cudaGetLastError();
}

// ---- Gather over a packed table (4-bit embedding tables, cuda_fp4.c cu_fp4_gather)
// y[j, :] = row idx[j] of the table (rows x K, packed as W above), each element decoded as w_store decodes W:
// the code's value times its block scale in FP32, rounded to FP16 (the CPU emulation's value), then stored in OT.
// One thread a packed byte (two elements of one block: blocks are even). Negative indices wrap; out-of-range ones
// give 0 and set *bad, as the module's Gather (kernels.cu k_gather).
template <typename OT>
__global__ void k_fp4_gather(const fp4_params p, const void *idx, bool idx64, int64_t n_idx, int *bad)
{
    __shared__ float lut[16];
    if (threadIdx.x < 16)
        lut[threadIdx.x] = p.fmt == CUK_Q_INT4 ? c_int4[threadIdx.x] : c_fp4[threadIdx.x];
    __syncthreads();
    OT *y = (OT *)p.y;
    const int64_t n = n_idx * p.row_bytes;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = i / p.row_bytes, c = i % p.row_bytes, k = 2 * c;
        int64_t r = idx64 ? ((const long long *)idx)[j] : (int64_t)((const int *)idx)[j];
        if (r < 0)
            r += p.N;
        float lo = 0.f, hi = 0.f;
        if (r < 0 || r >= p.N) {
            *bad = 1;
        } else {
            const uint32_t byte = p.w[r * p.row_bytes + c];
            const float s = block_scale(p, r, k / p.block);
            lo = __half2float(__float2half_rn(lut[byte & 15u] * s));
            hi = __half2float(__float2half_rn(lut[byte >> 4] * s));
        }
        stf(y, j * p.K + k, lo);
        if (k + 1 < p.K)
            stf(y, j * p.K + k + 1, hi);
    }
}

extern "C" cudaError_t cuk_fp4_gather(int out_fdt, const uint8_t *w, const void *scales, int fmt, int64_t block,
                                      float ts, int64_t rows, int64_t K, const void *idx, bool idx64, int64_t n_idx,
                                      void *y, int *bad, cudaStream_t s)
{
    if (rows <= 0 || K <= 0 || n_idx < 0 || (block != 16 && block != 32) ||
        (out_fdt != CUK_F32 && out_fdt != CUK_F16 && out_fdt != CUK_BF16))
        return cudaErrorInvalidValue;
    fp4_params p = w_params(w, scales, fmt, block, ts, rows, K, y);
    const int64_t n = n_idx * p.row_bytes;
    if (n == 0)
        return cudaGetLastError();
    const unsigned blocks = (unsigned)(n / 256 + 1 < 8192 ? n / 256 + 1 : 8192);
    if (out_fdt == CUK_F32)
        k_fp4_gather<float><<<blocks, 256, 0, s>>>(p, idx, idx64, n_idx, bad);
    else if (out_fdt == CUK_F16)
        k_fp4_gather<__half><<<blocks, 256, 0, s>>>(p, idx, idx64, n_idx, bad);
    else
        k_fp4_gather<__nv_bfloat16><<<blocks, 256, 0, s>>>(p, idx, idx64, n_idx, bad);
    return cudaGetLastError();
}
