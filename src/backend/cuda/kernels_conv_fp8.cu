// kiln's own FP8 convolution (cuda_conv_fp8.c): an implicit GEMM on mma.sync m16n8k32 E4M3 (float32
// accumulation), channels-last. cuDNN 9's FP8 convolution engines run ResNet-50's layers no faster than its FP16
// ones on the H200, while mma.sync's E4M3 rate there measured 2.8x its FP16 rate (bench/mma_peak.cu). Each FP8
// layer times this kernel against cuDNN's graph at its first run and keeps the faster: on the H200 it wins
// ResNet-50's memory-bound 1x1 layers with a residual and loses the 3x3 ones (~245 TFLOP/s against cuDNN's ~630: a
// 128x128 tile of 64-byte steps is near what the L2 can feed; docs/CUDA.md).
// Rows of the GEMM are output pixels (n, p, q), columns output channels, the reduction runs over (r, s, c) -- the
// KRSC filter's own order -- in 64-byte steps; each 16-byte piece of a step lies within one (r, s) because C is a
// multiple of 16, and is copied from the E4M3 input by cp.async (zeros outside the image, past the reduction or
// past the channels). Three stages in shared memory, 8 warps of 64 x 32 outputs each. Epilogue through shared
// memory: x scale (a device scalar: activation scale x weight scale) + float32 bias, then residual (the output's
// storage), ReLU, 16-byte stores in the output's storage; optionally the next FP8 layer's input too (feed: E4M3 of
// the float32 value x 1 / its scale, saturating, before the output's rounding -- as cuDNN's graph writes it).
#include "kernels_conv_fp8.cuh"

namespace {

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 3, THREADS = 256;

__device__ __forceinline__ void mma_e4m3(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// PRE (a reduction of at most (STAGES - 1) steps with a residual: ResNet's memory-bound 1x1 layers, K = 64 or 128):
// the tile's residual is copied by cp.async into dynamic shared memory right after the reduction's stages, so its
// bytes are in flight with the operands' instead of loaded by the epilogue after the MMAs (where each thread's
// loads waited for their data before its stores). H200, ResNet-50 FP8 batch 256 before it: layer1's expansion
// convolutions 0.50-0.57 ms, ~4x their bytes' time.
template <typename T, bool PRE>
__global__ void __launch_bounds__(THREADS, 2)
    k_conv_fp8(const uint8_t *__restrict__ x, const uint8_t *__restrict__ w, const float *__restrict__ scale,
               const float *__restrict__ bias, const T *__restrict__ res, T *__restrict__ y,
               const float *__restrict__ inv, uint8_t *__restrict__ yq, const uint8_t *__restrict__ resq,
               const float *__restrict__ rsp, cuk_conv_desc d)
{
    __shared__ __align__(128) uint8_t smem[STAGES * (BM + BN) * BK];   // the stages; the epilogue's tile after
    extern __shared__ __align__(128) uint8_t rsm[];   // PRE: the residual tile, [BM][BN] of T (or E4M3 bytes)
    uint8_t(*as)[BM * BK] = (uint8_t(*)[BM * BK])smem;
    uint8_t(*bs)[BN * BK] = (uint8_t(*)[BN * BK])(smem + STAGES * BM * BK);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1;   // 2 x 4 warps: rows wm * 64, columns wn * 32
    const int64_t M = (int64_t)d.n * d.p * d.q;
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int red = d.r * d.s * d.c;   // the reduction length (a multiple of 16)
    const int steps = (red + BK - 1) / BK;
    // the 2 A rows (pixels) and 2 B rows (output channels) this thread copies, piece tid & 3 of each
    const int ch = tid & 3;
    const bool gemm = fp8_is_gemm(d);
    const int64_t pq = (int64_t)d.p * d.q;
    fp8_row ar[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        ar[i].init(m0 + (tid >> 2) + i * 64, M, gemm, pq, d);
    fp8_piece pc;   // this thread's piece's position in the reduction, advanced by 64 each load
    pc.init(ch * 16, d);
    auto load = [&](int stage) {
        const bool kok = pc.kc < red;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int row = (tid >> 2) + i * 64;
            bool ok;
            const uint8_t *src = ar[i].src(x, pc, kok, d, &ok);
            cp_async16(&as[stage][wg_swz(row, ch, BK)], src, ok);
            const bool nok = kok && n0 + row < d.k;
            cp_async16(&bs[stage][wg_swz(row, ch, BK)], nok ? w + (int64_t)(n0 + row) * red + pc.kc : w, nok);
        }
        pc.advance(BK, d);
    };
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.f;
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < steps)
            load(st);
        cp_commit();
    }
    if constexpr (PRE) {   // one group after the stages' (the first wait below then also waits for stage 1)
        fp8_copy_residual<T, BM, BN, THREADS>(rsm, res, resq, m0, n0, M, d, tid);
        cp_commit();
    }
    for (int step = 0; step < steps; step++) {
        cp_wait<STAGES - 2>();
        __syncthreads();   // this step's stage landed for every thread; the stage loaded next was read a step ago
        if (step + STAGES - 1 < steps)
            load((step + STAGES - 1) % STAGES);
        cp_commit();
        const uint8_t *a_s = as[step % STAGES], *b_s = bs[step % STAGES];
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t a[4][4], b[4][2];
            ldsm_k32(a, b, a_s, b_s, lane, wm, wn, ks);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    mma_e4m3(acc[i][j], a[i], b[j][0], b[j][1]);
        }
    }
    cp_wait<0>();
    // Epilogue through shared memory, 64 rows at a time (the warps of row half wm): x scale + bias in float32 into
    // a [64][BN + 4] tile, then each thread takes 8 neighbouring channels of a pixel: residual, ReLU, one 16-byte
    // store of the output (K is a multiple of 8) and 8 bytes of its feed.
    __syncthreads();   // every warp is done with the stages the tile overlays
    float *tile = (float *)smem;
    constexpr int TS = BN + 4;
    static_assert(64 * TS * sizeof(float) <= sizeof(smem), "epilogue tile");
    const float sc = *scale, iv = yq ? *inv : 0.f, rsc = resq ? *rsp : 0.f;
    const int g = lane >> 2, tig = lane & 3;
    for (int half = 0; half < 2; half++) {
        if (wm == half) {
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int lc = wn * 32 + j * 8 + tig * 2, col = n0 + lc;
                        float v0 = acc[i][j][hr * 2] * sc, v1 = acc[i][j][hr * 2 + 1] * sc;
                        if (bias && col < d.k) {
                            v0 += bias[col];
                            v1 += bias[col + 1];
                        }
                        *(float2 *)&tile[(i * 16 + g + hr * 8) * TS + lc] = make_float2(v0, v1);
                    }
        }
        __syncthreads();
#pragma unroll
        for (int it = 0; it < 4; it++) {
            const int idx = tid + it * THREADS, lr = idx >> 4, lc = (idx & 15) * 8;
            const int64_t row = m0 + half * 64 + lr;
            const int col = n0 + lc;
            if (row < M && col < d.k) {
                const int64_t o = row * d.k + col;
                float v[8];
                const float4 t0 = *(const float4 *)&tile[lr * TS + lc], t1 = *(const float4 *)&tile[lr * TS + lc + 4];
                v[0] = t0.x; v[1] = t0.y; v[2] = t0.z; v[3] = t0.w;
                v[4] = t1.x; v[5] = t1.y; v[6] = t1.z; v[7] = t1.w;
                const int64_t ro = PRE ? (int64_t)(half * 64 + lr) * BN + lc : o;   // the residual's offset
                const uint8_t *rp = res ? (const uint8_t *)((PRE ? (const T *)rsm : res) + ro)
                                        : resq ? (PRE ? rsm : resq) + ro : NULL;
                fp8_out8<T>(v, rp, res == NULL, rsc, d.relu, y ? y + o : NULL, yq ? yq + o : NULL, iv);
            }
        }
        __syncthreads();   // the tile is rewritten by the other half
    }
}

template <typename T>
cudaError_t launch(const uint8_t *x, const uint8_t *w, const float *scale, const float *bias, const void *res, void *y,
                   const float *inv, uint8_t *yq, const uint8_t *resq, const float *rsp, const cuk_conv_desc *d,
                   cudaStream_t s)
{
    const int64_t M = (int64_t)d->n * d->p * d->q;
    dim3 grid((unsigned)((M + BM - 1) / BM), (unsigned)((d->k + BN - 1) / BN));
    const int64_t red = (int64_t)d->r * d->s * d->c;
    if (red <= (STAGES - 1) * BK && (res || (resq && d->k % 16 == 0))) {
        const int bytes = BM * BN * (res ? (int)sizeof(T) : 1);
        // past 48 KB of shared memory in all: opted in at every launch (not a stream operation: legal in a capture)
        cudaError_t e = cudaFuncSetAttribute(k_conv_fp8<T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        if (e != cudaSuccess)
            return e;
        k_conv_fp8<T, true><<<grid, THREADS, bytes, s>>>(x, w, scale, bias, (const T *)res, (T *)y, inv, yq, resq,
                                                        rsp, *d);
    } else {
        k_conv_fp8<T, false><<<grid, THREADS, 0, s>>>(x, w, scale, bias, (const T *)res, (T *)y, inv, yq, resq, rsp,
                                                      *d);
    }
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t cuk_conv_fp8(int fdt_y, const uint8_t *x, const uint8_t *w, const float *scale,
                                    const float *bias, const void *res, void *y, const float *inv, uint8_t *yq,
                                    const uint8_t *resq, const float *rs, const cuk_conv_desc *d, cudaStream_t s)
{
    if (d->c % 16 || d->k % 8 || !d->y_nhwc || (int64_t)d->r * d->s * d->c >= 0x7fffffff ||
        (int64_t)d->n * d->p * d->q / BM >= 0x7fffffff || (yq && !inv) || (!y && !yq) || (resq && (res || !rs)))
        return cudaErrorInvalidValue;
    if (fdt_y == CUK_F16) return launch<__half>(x, w, scale, bias, res, y, inv, yq, resq, rs, d, s);
    if (fdt_y == CUK_BF16) return launch<__nv_bfloat16>(x, w, scale, bias, res, y, inv, yq, resq, rs, d, s);
    return launch<float>(x, w, scale, bias, res, y, inv, yq, resq, rs, d, s);
}
