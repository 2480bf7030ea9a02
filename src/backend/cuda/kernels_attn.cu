// Fused attention in FP16 / BF16: Y = softmax(Q K^T * scale (+ mask | masked fill)) V in one kernel,
// FlashAttention-2 style: the scores and probabilities live in registers, never in memory.
//
// A job is 16 * NW query rows (NW warps, 4 or 8) of one lead index (batch, head, ...); a block walks the
// keys of a job 64 at a time, and takes jobs blockIdx.x, blockIdx.x + gridDim.x, ... (a grid of as many
// blocks as fit the GPU at once): the next chunk, or the next job's Q rows and first chunk, stream in while
// one chunk is used, so that short sequences (BERT's 128 keys: two chunks a job) keep memory busy.
// Q's rows are staged in shared memory (two buffers, by job) and kept in registers as mma.sync A fragments;
// each chunk of K and V is staged (cp.async, 16 bytes a copy where rows are whole aligned vectors),
// each warp computes its 16 rows' scores with m16n8k16 tensor-core MMAs (FP32 accumulation), applies
// scale, bounds and mask, updates the rows' running max and sum (FP32 online softmax), turns the
// probabilities into A fragments in the half format (no trip through shared memory) and accumulates
// P V into FP32 registers. The output is that accumulator over the row sum.
//
// Every operand is read through strides (cuk_attn_io): Q, K, V and Y may be views of [B, S, H, D]
// tensors (the Transposes around BERT's attention folded into the node), K either key-major (each
// key's D values contiguous) or D-major (K^T rows contiguous, ldmatrix.trans). Any S, Sk; D and Dv
// up to 128.
#include "kernels_common.cuh"
#include <type_traits>

#define FK 64   // keys per chunk
#define LOG2E 1.4426950408889634f

struct flash_params {
    cuk_attn_io io;
    float scale;
    const void *mask;
    int kind;
    float fill;
    int vec;   // bit 0 Q, 1 K, 2 V: rows staged with 16-byte copies; bit 3: Y written two values at a time; bit 4:
               // Y's rows written as 16-byte pieces through shared memory (store_pieces)
    int kmajor;   // K's D values contiguous (else K^T's keys contiguous)
    int64_t njobs;   // lead indices x row tiles of FQ query rows
    uint8_t *fq;     // with bit 4: Y's E4M3 copy (the FP8 feed: element i of Y's buffer at fq[i]) or NULL
    float fs;        // its scale
    shape_arg sh;
};

// Shared memory: two buffers of Q's rows (a job's and the next one's), then two stages of (K chunk, V chunk, the
// chunk's row-broadcast mask values).
template <int DP, int NW> struct flash_smem {
    static constexpr int FQ = 16 * NW;       // query rows of a block
    static constexpr int LD = DP + 8;        // Q, V and key-major K rows (padding: no bank conflicts)
    static constexpr int LDT = FK + 8;       // D-major K rows
    static constexpr int KSZ = FK * LD > DP * LDT ? FK * LD : DP * LDT;
    static constexpr int STAGE = KSZ + FK * LD + FK * 2;   // elements; the mask's FK floats take 2 each
    static constexpr int QSZ = FQ * LD;
    static constexpr size_t bytes(size_t es) { return (size_t)(2 * QSZ + 2 * STAGE) * es; }
};

template <typename T> __device__ __forceinline__ T tzero();
template <> __device__ __forceinline__ __half tzero<__half>() { return __float2half_rn(0.f); }
template <> __device__ __forceinline__ __nv_bfloat16 tzero<__nv_bfloat16>() { return __float2bfloat16_rn(0.f); }

// dst[r * ldd + c] = src[r * rs + c * cs] for r < rows, c < cols, else 0, over R x C (C a multiple of 8).
// vec (cs == 1, rs and the base 16-byte aligned): whole 8-element pieces inside the tile by cp.async. NT: the
// block's threads (a compile-time step, so that the loop unrolls).
template <int NT, typename T>
__device__ __forceinline__ void stage(T *dst, int ldd, const T *src, int64_t rs, int64_t cs, int rows, int cols,
                                      int R, int C, bool vec)
{
    const int cv = C / 8;
    const T z = tzero<T>();
#pragma unroll
    for (int i = threadIdx.x; i < R * cv; i += NT) {
        const int r = i / cv, c = (i % cv) * 8;
        T *d = dst + r * ldd + c;
        if (vec && r < rows && c + 8 <= cols) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(d)), "l"(src + r * rs + c));
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++)
                d[e] = r < rows && c + e < cols ? src[r * rs + (int64_t)(c + e) * cs] : z;
        }
    }
}

__device__ __forceinline__ void stage_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// waits until at most n of the committed groups are still in flight
template <int N> __device__ __forceinline__ void stage_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// A row-broadcast mask's values for keys k0 .. k0 + FK: kind 1 the additive value, kinds 2 / 3 1 where the
// score becomes the fill value (0 past Sk)
__device__ __forceinline__ void stage_mask(float *dst, const flash_params &p, int64_t mlo, int k0, int Sk, int64_t mk)
{
    for (int c = threadIdx.x; c < FK; c += blockDim.x) {
        float x = 0.f;
        if (k0 + c < Sk) {
            const int64_t off = mlo + (int64_t)(k0 + c) * mk;
            if (p.kind == 1) {   // with the chunk's copies: no thread waits for it here
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(dst + c)),
                             "l"((const float *)p.mask + off));
                continue;
            }
            x = (float)((((const bool *)p.mask)[off]) == (p.kind == 3));
        }
        dst[c] = x;
    }
}

__device__ __forceinline__ float ex2(float x)   // 2^x (approximate, like __expf's); 2^-inf = 0
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The online softmax of one key chunk for this thread's rows r0 (values 0, 1 of each score fragment) and
// r1 (2, 3), in base 2: the masked scores sc (times log2 e; their maxima mx over this thread's keys) become
// probabilities 2^(sc - max) against the rows' running max mrow; the running sums lrow and the output
// accumulators o are rescaled when it moves. A row whose scores are all -inf so far subtracts 0 (its
// probabilities 0), so no score needs a test of its own.
template <int DP>
__device__ __forceinline__ void online_softmax(float (&sc)[FK / 8][4], const float (&mx)[2], float (&mrow)[2],
                                               float (&lrow)[2], float (&o)[DP / 8][4])
{
    float alpha[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float mnew = fmaxf(mrow[h], group_max<4>(mx[h]));
        base[h] = mnew == -INFINITY ? 0.f : mnew;
        alpha[h] = ex2(mrow[h] - base[h]);   // 0 while the row had no finite score (its sum and output 0)
        mrow[h] = mnew;
        lrow[h] *= alpha[h];
    }
#pragma unroll
    for (int n = 0; n < FK / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float x = ex2(sc[n][e] - base[e >> 1]);
            sc[n][e] = x;
            lrow[e >> 1] += x;
        }
#pragma unroll
    for (int n = 0; n < DP / 8; n++) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
    }
}

// This thread's part of rows r0 and r1 of the output: the accumulators over the rows' sums (whole across the
// four lanes of a row), into y through its row / column strides.
template <typename T, int DP>
__device__ __forceinline__ void store_rows(const flash_params &p, T *y, int r0, int r1, int S, int Dv, int tig,
                                           const float (&lrow)[2], const float (&o)[DP / 8][4])
{
    const cuk_attn_io &io = p.io;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = h ? r1 : r0;
        const float inv = 1.0f / group_sum<4>(lrow[h]);
        if (r >= S)
            continue;
        T *yr = y + r * io.ys;
#pragma unroll
        for (int n = 0; n < DP / 8; n++) {
            const int c = n * 8 + tig * 2;
            const float y0 = o[n][2 * h] * inv, y1 = o[n][2 * h + 1] * inv;
            if ((p.vec & 8) && c + 1 < Dv) {
                *(uint32_t *)(yr + c) = pack2<T>(y0, y1);
            } else {
                if (c < Dv)
                    stf(yr, c * io.yd, y0);
                if (c + 1 < Dv)
                    stf(yr, (int64_t)(c + 1) * io.yd, y1);
            }
        }
    }
}

// This warp's 16 rows of the output (from row rw) staged in T through its rows sw of a Q buffer (free by then: the
// fragments are in registers, the next job's rows go to the other buffer), then written as 16-byte pieces (Y's rows
// contiguous, 16-byte aligned, Dv a multiple of 8); with p.fq also each piece's E4M3 bytes, the same bytes as a
// quantization pass over the stored values (stq).
template <typename T, int DP>
__device__ __forceinline__ void store_pieces(const flash_params &p, T *sw, int ld, T *y, int rw, int S, int Dv, int lane,
                                             const float (&lrow)[2], const float (&o)[DP / 8][4])
{
    const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float inv = 1.0f / group_sum<4>(lrow[h]);
#pragma unroll
        for (int n = 0; n < DP / 8; n++) {
            const int c = n * 8 + tig * 2;
            if (c < Dv)
                *(uint32_t *)(sw + (gid + 8 * h) * ld + c) = pack2<T>(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
        }
    }
    __syncwarp();
    const cuk_attn_io &io = p.io;
    const int pr = Dv / 8;   // pieces a row
    for (int i = lane; i < 16 * pr; i += 32) {
        const int r = i / pr, c = (i - r * pr) * 8;
        if (rw + r >= S)
            break;   // rows past S: this lane's later pieces lie past them too
        const uint4 v = *(const uint4 *)(sw + r * ld + c);
        T *dst = y + (int64_t)(rw + r) * io.ys + c;
        *(uint4 *)dst = v;
        if (p.fq)
            stq<T, 8>(p.fq + (dst - (T *)io.y), (const T *)&v, p.fs);
    }
}

// The mask, known at compile time so that the scores' loop has no branches: none, one row broadcast to every
// query row (staged in shared memory with its key chunk, any kind), or any other (read per score).
enum { MK_NONE = 0, MK_BCAST = 1, MK_ROWS = 2 };

// head sizes up to 64: registers capped at 128 a thread so that 16 warps fit an SM
template <typename T, int DP, int NW, int MK>
__global__ void __launch_bounds__(NW * 32, DP <= 64 ? 16 / NW : 1) k_flash(const flash_params p)
{
    typedef flash_smem<DP, NW> L;
    const int FQ = L::FQ;
    extern __shared__ __align__(128) unsigned char smem[];
    T *const sq0 = (T *)smem, *const sbuf = sq0 + 2 * L::QSZ;
    const cuk_attn_io &io = p.io;
    const int S = (int)io.S, Sk = (int)io.Sk, D = (int)io.D, Dv = (int)io.Dv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
    const int ny = (S + FQ - 1) / FQ, nch = (Sk + FK - 1) / FK;
    const int njobs = (int)p.njobs, G = (int)gridDim.x;   // njobs <= INT32_MAX (cuk_attn_fused_fits)
    const int64_t mk = p.mask ? p.sh.str[0][p.sh.ndim - 1] : 0, ms = p.mask ? p.sh.str[0][p.sh.ndim - 2] : 0;
    const bool mbcast = MK == MK_BCAST;   // one mask row for every query row (ms == 0): staged with the chunk
    // job t: lead index t / ny, query rows from (t % ny) * FQ; its operands' offsets
    auto job_at = [&](int t, int64_t &qo, int64_t &ko, int64_t &vo, int64_t &yo, int64_t &mlo) {
        int rem = t / ny;
        qo = (int64_t)(t % ny) * FQ * io.qs, ko = vo = yo = mlo = 0;
        for (int d = io.nlead - 1; d >= 0; d--) {
            const int ld = (int)io.lead[d], i = rem % ld;
            rem /= ld;
            qo += i * io.ql[d];
            ko += i * io.kl[d];
            vo += i * io.vl[d];
            yo += i * io.yl[d];
            mlo += i * p.sh.str[0][d];   // the mask's strides over the score dims (0 without a mask)
        }
    };
    // chunk j of job t's K and V (and the broadcast mask) into stage buffer g % 2; with j == 0 also the job's Q
    // rows into Q buffer qb; one commit group
    auto stage_step = [&](int t, int j, int g, int qb) {
        int64_t qo, ko, vo, yo, mlo;
        job_at(t, qo, ko, vo, yo, mlo);
        const T *k = (const T *)io.k + ko, *v = (const T *)io.v + vo;
        T *sk = sbuf + (g & 1) * L::STAGE, *sv = sk + L::KSZ;
        const int k0 = j * FK, kn = Sk - k0 < FK ? Sk - k0 : FK;
        if (j == 0)
            stage<NW * 32>(sq0 + qb * L::QSZ, L::LD, (const T *)io.q + qo, io.qs, io.qd, S - (t % ny) * FQ, D, FQ, DP,
                  p.vec & 1);
        if (p.kmajor)
            stage<NW * 32>(sk, L::LD, k + k0 * io.ks, io.ks, io.kd, kn, D, FK, DP, p.vec & 2);
        else
            stage<NW * 32>(sk, L::LDT, k + k0 * io.ks, io.kd, io.ks, D, kn, DP, FK, p.vec & 2);
        stage<NW * 32>(sv, L::LD, v + k0 * io.vs, io.vs, io.vd, kn, Dv, FK, DP, p.vec & 4);
        if (mbcast)
            stage_mask((float *)(sv + FK * L::LD), p, mlo, k0, Sk, mk);
    };
    int t = (int)blockIdx.x, g = 0;
    if (t >= njobs)
        return;
    stage_step(t, 0, 0, 0);
    stage_commit();
    for (int jq = 0; t < njobs; t += G, jq++) {
        int64_t qo, ko, vo, yo, mlo;
        job_at(t, qo, ko, vo, yo, mlo);
        const int s0 = (t % ny) * FQ;
        // rows gid and gid + 8 of the warp's 16: running max, this thread's part of the sum, mask offsets
        const int r0 = s0 + warp * 16 + gid, r1 = r0 + 8;
        float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
        const int64_t mo[2] = {mlo + (r0 < S ? r0 : 0) * ms, mlo + (r1 < S ? r1 : 0) * ms};   // rows past S: unused
        float o[DP / 8][4];
#pragma unroll
        for (int n = 0; n < DP / 8; n++)
            o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
        uint32_t qf[DP / 16][4];
        for (int j = 0; j < nch; j++, g++) {
            const int k0 = j * FK;
            const T *sk = sbuf + (g & 1) * L::STAGE, *sv = sk + L::KSZ;
            const float *smk = (const float *)(sv + FK * L::LD);
            // the next step streams in while this one is used: every warp is done with step g - 1, whose buffer
            // it takes (and with the Q buffer of job jq - 1, which the next job's rows take)
            __syncthreads();
            if (j + 1 < nch)
                stage_step(t, j + 1, g + 1, jq & 1);
            else if (t < njobs - G)
                stage_step(t + G, 0, g + 1, (jq + 1) & 1);
            stage_commit();   // possibly empty
            stage_wait<1>();
            __syncthreads();   // step g staged by every thread
            if (j == 0) {   // this warp's 16 rows of Q as A fragments (16 x 16 each, d steps of 16)
                const T *sq = sq0 + (jq & 1) * L::QSZ;
#pragma unroll
                for (int ks = 0; ks < DP / 16; ks++)
                    ldsm_x4(qf[ks], sq + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * L::LD + ks * 16 +
                                        (lane >> 4) * 8);
            }
            float sc[FK / 8][4];
#pragma unroll
            for (int n = 0; n < FK / 8; n++)
                sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
            for (int ks = 0; ks < DP / 16; ks++) {
#pragma unroll
                for (int n2 = 0; n2 < FK / 16; n2++) {
                    uint32_t bf[4];
                    if (p.kmajor)
                        ldsm_x4(bf, sk + (n2 * 16 + (lane & 7) + (lane >> 4) * 8) * L::LD + ks * 16 +
                                        ((lane >> 3) & 1) * 8);
                    else
                        ldsm_x4_t(bf, sk + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * L::LDT + n2 * 16 +
                                          (lane >> 4) * 8);
                    mma16816<T>(sc[2 * n2], qf[ks], bf[0], bf[1]);
                    mma16816<T>(sc[2 * n2 + 1], qf[ks], bf[2], bf[3]);
                }
            }
            // scale, bounds, mask, in base 2 (times log2 e); then the online softmax of rows r0 (values 0, 1) and
            // r1 (2, 3). A chunk of FK keys inside Sk skips the bounds test.
            float mx[2] = {-INFINITY, -INFINITY};
            const float sl2 = p.scale * LOG2E, fill2 = p.fill * LOG2E;
            const bool additive = p.kind == 1;
            auto scores = [&](auto whole) {
#pragma unroll
                for (int n = 0; n < FK / 8; n++) {
                    const int kb = n * 8 + tig * 2;   // this thread's keys in the chunk: kb (values 0, 2), kb + 1 (1, 3)
                    float2 mv = make_float2(0.f, 0.f);
                    if (MK == MK_BCAST) {
                        mv = *(const float2 *)(smk + kb);
                        if (additive)
                            mv.x *= LOG2E, mv.y *= LOG2E;
                    }
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int key = k0 + kb + (e & 1);
                        float x;
                        if (MK == MK_BCAST) {
                            const float m = (e & 1) ? mv.y : mv.x;
                            x = additive ? fmaf(sc[n][e], sl2, m) : (m != 0.f ? fill2 : sc[n][e] * sl2);
                        } else if (MK == MK_ROWS) {
                            x = sc[n][e] * p.scale;
                            if (key < Sk)
                                x = masked(x, p.mask, p.kind, p.fill, mo[e >> 1] + key * mk);
                            x *= LOG2E;
                        } else {
                            x = sc[n][e] * sl2;
                        }
                        if (!decltype(whole)::value)
                            x = key < Sk ? x : -INFINITY;
                        sc[n][e] = x;
                        mx[e >> 1] = fmaxf(mx[e >> 1], x);
                    }
                }
            };
            if (k0 + FK <= Sk)
                scores(std::true_type{});
            else
                scores(std::false_type{});
            online_softmax<DP>(sc, mx, mrow, lrow, o);
            // O += P V: P's accumulator fragments are the A fragments of 16-key steps
#pragma unroll
            for (int kk = 0; kk < FK / 16; kk++) {
                uint32_t a[4] = {pack2<T>(sc[2 * kk][0], sc[2 * kk][1]), pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                                 pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                 pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
                for (int n2 = 0; n2 < DP / 16; n2++) {
                    uint32_t bf[4];
                    ldsm_x4_t(bf, sv + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * L::LD + n2 * 16 +
                                      (lane >> 4) * 8);
                    mma16816<T>(o[2 * n2], a, bf[0], bf[1]);
                    mma16816<T>(o[2 * n2 + 1], a, bf[2], bf[3]);
                }
            }
        }
        job_at(t, qo, ko, vo, yo, mlo);   // again rather than held through the steps
        if (p.vec & 16)
            store_pieces<T, DP>(p, sq0 + (jq & 1) * L::QSZ + warp * 16 * L::LD, L::LD, (T *)io.y + yo, s0 + warp * 16,
                                S, Dv, lane, lrow, o);
        else
            store_rows<T, DP>(p, (T *)io.y + yo, r0, r1, S, Dv, tig, lrow, o);
    }
}

static int flash_dp(const cuk_attn_io *io)
{
    const int64_t d = io->D > io->Dv ? io->D : io->Dv;
    return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 0;
}

extern "C" bool cuk_attn_fused_fits(int fdt, const cuk_attn_io *io)
{
    if ((fdt != CUK_F16 && fdt != CUK_BF16) || !flash_dp(io) || io->nlead < 0 || io->nlead > CUK_MAX_DIMS)
        return false;
    int64_t nb = 1;
    for (int d = 0; d < io->nlead; d++)
        nb *= io->lead[d];
    return nb > 0 && nb <= INT32_MAX && io->S > 0 && io->Sk > 0 && io->S <= INT32_MAX - 128 &&
           io->Sk <= INT32_MAX - FK && nb * ((io->S + 63) / 64) <= INT32_MAX;   // jobs, whatever the grid
}

static bool aligned16(const void *p, int64_t off) { return ((uintptr_t)p + (uintptr_t)off * 2) % 16 == 0; }

// 16-byte copies of rows: unit inner stride, the row stride and every lead stride whole 16-byte vectors
static bool vec_rows(const void *base, int64_t rs, int64_t cs, const int64_t *lead_str, int nlead)
{
    if (cs != 1 || rs % 8 || !aligned16(base, 0))
        return false;
    for (int d = 0; d < nlead; d++)
        if (lead_str[d] % 8)
            return false;
    return true;
}

// grid: 0 as many blocks as fit the GPU at once (each takes jobs blockIdx.x + i * gridDim.x), > 0 at most that
// many, < 0 one block a job
template <typename T, int DP, int NW, int MK>
static cudaError_t flash_launch_mk(const flash_params &p0, int grid, cudaStream_t s)
{
    typedef flash_smem<DP, NW> L;
    const size_t bytes = L::bytes(sizeof(T));
    cudaError_t e = cudaFuncSetAttribute(k_flash<T, DP, NW, MK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess)
        return e;
    flash_params p = p0;
    int64_t nb = 1;
    for (int d = 0; d < p.io.nlead; d++)
        nb *= p.io.lead[d];
    p.njobs = nb * ((p.io.S + L::FQ - 1) / L::FQ);
    int64_t g = p.njobs;
    if (grid > 0) {
        g = grid < g ? grid : g;
    } else if (grid == 0) {
        int dev = 0, sms = 0, per = 0;
        if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
            (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
            (e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_flash<T, DP, NW, MK>, NW * 32, bytes)) !=
                cudaSuccess)
            return e;
        if (per >= 1 && sms >= 1 && (int64_t)per * sms < g)
            g = (int64_t)per * sms;
    }
    k_flash<T, DP, NW, MK><<<(unsigned)g, NW * 32, bytes, s>>>(p);
    return cudaGetLastError();
}

template <typename T, int DP, int NW> static cudaError_t flash_launch(const flash_params &p, int grid, cudaStream_t s)
{
    if (!p.mask)
        return flash_launch_mk<T, DP, NW, MK_NONE>(p, grid, s);
    if (p.sh.str[0][p.sh.ndim - 2] == 0)
        return flash_launch_mk<T, DP, NW, MK_BCAST>(p, grid, s);
    return flash_launch_mk<T, DP, NW, MK_ROWS>(p, grid, s);
}

// 8 warps (128 query rows: K and V staged once per 128 rows) past 64 rows, else 4 (BERT-base b128, H200:
// 92 against 95 us a layer)
template <typename T, int DP> static cudaError_t flash_rows(const flash_params &p, int grid, cudaStream_t s)
{
    return p.io.S > 64 ? flash_launch<T, DP, 8>(p, grid, s) : flash_launch<T, DP, 4>(p, grid, s);
}

template <typename T> static cudaError_t flash_dispatch(const flash_params &p, int grid, cudaStream_t s)
{
    switch (flash_dp(&p.io)) {
    case 32: return flash_rows<T, 32>(p, grid, s);
    case 64: return flash_rows<T, 64>(p, grid, s);
    default: return flash_rows<T, 128>(p, grid, s);
    }
}

// Y's rows as whole 16-byte pieces: unit inner stride, Dv and the row and lead strides multiples of 8 elements
extern "C" bool cuk_attn_fused_feeds(const cuk_attn_io *io)
{
    return cuk_attn_fused_fits(CUK_F16, io) && io->Dv % 8 == 0 && vec_rows(io->y, io->ys, io->yd, io->yl, io->nlead);
}

extern "C" cudaError_t cuk_attn_fused(int fdt, const cuk_attn_io *io, float scale, const void *mask, int kind,
                                      float fill, const cuk_shape *sh, const cuk_attn_opts *o, cudaStream_t s)
{
    if (!cuk_attn_fused_fits(fdt, io))
        return cudaErrorInvalidValue;
    flash_params p;
    memset(&p, 0, sizeof p);
    p.io = *io;
    p.scale = scale;
    p.mask = mask;
    p.kind = kind;
    p.fill = fill;
    if (mask)
        p.sh = to_arg(sh);
    p.kmajor = io->kd == 1 || io->ks != 1;
    const bool kv = p.kmajor ? vec_rows(io->k, io->ks, io->kd, io->kl, io->nlead)
                             : vec_rows(io->k, io->kd, io->ks, io->kl, io->nlead);
    p.vec = (vec_rows(io->q, io->qs, io->qd, io->ql, io->nlead) ? 1 : 0) | (kv ? 2 : 0) |
            (vec_rows(io->v, io->vs, io->vd, io->vl, io->nlead) ? 4 : 0);
    bool yv = io->yd == 1 && io->ys % 2 == 0 && (uintptr_t)io->y % 4 == 0;
    for (int d = 0; d < io->nlead; d++)
        yv = yv && io->yl[d] % 2 == 0;
    p.vec |= yv ? 8 : 0;
    if (!o->scatter && cuk_attn_fused_feeds(io)) {
        p.vec |= 16;
        p.fq = o->feed;
        p.fs = o->feed_scale;
    } else if (o->feed) {
        return cudaErrorInvalidValue;   // a feed needs the 16-byte pieces
    }
    if (fdt == CUK_F16)
        return flash_dispatch<__half>(p, o->grid, s);
    return flash_dispatch<__nv_bfloat16>(p, o->grid, s);
}
