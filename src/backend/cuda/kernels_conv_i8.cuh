// The INT8 convolution's (kernels_conv_i8.cu) tile geometry, wgmma step and requantizing epilogue (the CPU's bytes:
// cpu/qgemm.h kiln_qepi, backend/qexact.h), apart from its kernels: what another INT8 main loop would share (branch
// int8-ws, session 32: a producer warpgroup's, slower, docs/CUDA.md).
#ifndef KILN_BACKEND_CUDA_KERNELS_CONV_I8_CUH
#define KILN_BACKEND_CUDA_KERNELS_CONV_I8_CUH
#include "kernels_act.cuh"
#include "kernels_conv_fp8_wg.cuh"
#include "kernels_int8.cuh"

namespace {

constexpr int BM = 128, BK = 64;

// The residual tile's row stride in shared memory: BN bytes and 16 of padding, so that the rows a warp's epilogue reads
// at once (8 rows, 2-byte pieces: store_reg) fall in distinct banks
__host__ __device__ constexpr int res_stride(int bn) { return bn + 16; }

// Byte ch of row r of the residual tile in shared memory: rows res_stride(BN) apart (RSW 0: the cp.async kernels'), or
// (RSW 128, BN 128) as TMA's 128-byte swizzle writes a [rows][128] box: rows 128 bytes apart, 16-byte piece c of row r
// at piece c ^ (r % 8) (the tile 1024-byte aligned), so a warp's eight rows of one piece fall in distinct banks
template <int BN, int RSW> __device__ __forceinline__ int res_at(int r, int ch)
{
    static_assert(RSW == 0 || (RSW == 128 && BN == 128), "the swizzled residual tile has 128-byte rows");
    if constexpr (RSW == 128)
        return r * 128 + ((((ch >> 4) ^ r) & 7) << 4 | (ch & 15));
    else
        return r * res_stride(BN) + ch;
}

// A thread's piece at one step, for all its rows: the tap's offset from a row's top-left tap, and the bits its filter
// row and column test (hbit 0 past the reduction)
struct i8_tap {
    int64_t toff;
    uint32_t hbit, wbit;
    __host__ __device__ __forceinline__ i8_tap(const fp8_piece &p, bool kok, const cuk_conv_desc &d)
        : toff(((int64_t)p.pr * d.dh * d.w + (int64_t)p.ps * d.dw) * d.c + p.pc), hbit(kok ? 1u << p.pr : 0u),
          wbit(1u << p.ps)
    {
    }
};
// One row of the implicit GEMM (output pixel m) with its filter taps decided once a tile, from fp8_row's decomposition:
// off, the byte offset of its top-left tap (outside the image where the padding is: only taps inside are read), hm /
// wm, bit r / s set where filter row r / column s falls inside the image (both 0 past M), so that a step's copy of
// the row is one 64-bit add and two bit tests (ncu, session 39: fp8_row::src's per-piece tap and bounds arithmetic
// was ~150 of the ~235 instructions a thread ran per reduction step of layer2's 3x3 convolution). R and S at most 32
// (cuk_conv_i8). tests/gpu/test_i8_addr.cu holds it to fp8_row's sources and bounds on the host.
struct i8_row {
    int64_t off;
    uint32_t hm, wm;
    __host__ __device__ __forceinline__ void init(int64_t m, int64_t M, bool gemm, int64_t pq, const cuk_conv_desc &d)
    {
        fp8_row a;   // the row's image, top-left tap and bound, as the FP8 kernels decompose it
        a.init(m, M, gemm, pq, d);
        hm = wm = 0;
        off = 0;
        if (!a.ok)
            return;
        off = a.xb + ((int64_t)a.hb * d.w + a.wb) * d.c;
        for (int r = 0; r < d.r; r++)
            hm |= (unsigned)(a.hb + r * d.dh) < (unsigned)d.h ? 1u << r : 0u;
        for (int s = 0; s < d.s; s++)
            wm |= (unsigned)(a.wb + s * d.dw) < (unsigned)d.w ? 1u << s : 0u;
    }
    // the source of the step's piece in this row (x itself and *valid false outside the image, past M or past the
    // reduction), as fp8_row::src gives it
    __host__ __device__ __forceinline__ const uint8_t *src(const uint8_t *x, const i8_tap &t, bool *valid) const
    {
        *valid = (hm & t.hbit) && (wm & t.wbit);
        return *valid ? x + off + t.toff : x;
    }
};

// The pieces thread tid of nt copies of a tile of rows of pr 16-byte pieces, pieces i = tid, tid + nt, ... in row i / pr:
// where pr divides nt, piece j0 of rows r0, r0 + rstep, ... -- decomposed once, not per piece and tile (ncu, session
// 39: the division i / pr, i % pr of every piece of every tile was 35% of the instructions k_gemm_i8 ran on layer1's
// 256 -> 64); even false where it does not divide (the caller divides each index)
struct tile_pieces {
    bool even;
    int j0, r0, rstep;
    __host__ __device__ __forceinline__ tile_pieces(int tid, int pr, int nt)
        : even(nt % pr == 0), j0(even ? tid % pr : 0), r0(even ? tid / pr : 0), rstep(even ? nt / pr : 1)
    {
    }
};

// wgmma descriptor d moved k 16-byte units further (its start-address field: the shared address over 16, which cannot
// carry out of its 14 bits inside shared memory): the low word alone, one addition
__host__ __device__ __forceinline__ uint64_t wg_desc_add(uint64_t d, uint32_t k)
{
    return (d >> 32) << 32 | (uint32_t)((uint32_t)d + k);
}

// One reduction step's wgmma of a warpgroup: A its 64 rows of the stage, B the stage's BN rows (descriptors of the
// SK-byte swizzle: steps of 64 or 128 bytes), SK / 32 k32 MMAs as one group, left in flight (the caller waits for all
// but the newest group, so the stage is refilled only after the MMAs that read it are done).
template <int BN, bool XS8, int SK = BK>
__device__ __forceinline__ void wg_i8_step(int *acc, uint32_t a_s, uint32_t b_s, bool acc_in)
{
#if KILN_WGMMA
    wg_fence();
    // the step's descriptors once, each k32 MMA's 32 bytes further by wg_desc_add (ncu, session 39: wg_desc's mask,
    // shift and or were ~15 instructions a wgmma)
    const uint64_t da0 = wg_desc(a_s, SK), db0 = wg_desc(b_s, SK);
#pragma unroll
    for (int kk = 0; kk < SK / 32; kk++) {
        const uint64_t da = wg_desc_add(da0, 2 * kk), db = wg_desc_add(db0, 2 * kk);
        const int in = acc_in || kk > 0;
        if constexpr (BN == 64)
            wgmma_i8_n64<XS8>(acc, da, db, in);
        else if constexpr (BN == 128)
            wgmma_i8_n128<XS8>(acc, da, db, in);
        else
            wgmma_i8_n256<XS8>(acc, da, db, in);
    }
    wg_commit();
#endif
}

__device__ __forceinline__ int add_wrap(int a, int b) { return (int)((unsigned)a + (unsigned)b); }

// The non-linear activations out of line: act_apply's switch inlined into every unrolled epilogue element made these
// kernels 0.4-1.5 MB of code (instruction-cache misses on every tile), the common linear path pays for it
__device__ __noinline__ float act_call(int act, float x, float a, float b) { return act_apply(act, x, a, b); }
// GELU inline in the kernels launched for it (BERT's FFN up layers requantize through it: the call, ~60 instructions
// an element with its spills of the caller's registers, was most of their epilogue), any other non-linear activation
// out of line; the same function either way, so the same values. Only there: inlined into every kernel's epilogue
// (untaken) it made ResNet-50 int8 2.5% slower (H100, session 32: code size, as session 29 found)
template <bool GELU> __device__ __forceinline__ float act_of(int act, float x, float a, float b)
{
    if constexpr (GELU)
        return gelu_erf(x);
    else
        return act_call(act, x, a, b);
}

// Channels col .. col + 7 of one pixel from a[e] = acc + bias and their multipliers m: the requantized bytes, packed
// (channel col in the lowest; cpu/qgemm.c kiln__qepi_q), with QLinearConvAdd's add of R's 8 bytes rb where res. No
// conversion instruction but a[e]'s, no branch per element (backend/qexact.h; session 31: these epilogues were bound
// by their instructions); the add's rare declined elements divide after the eight.
// What a kernel's epilogue meets: any residual form and activation, decided per launch (RK_ANY); no residual (RK_NONE:
// a kernel never given one); RK_LEAN: no residual or QLinearConvAdd's one-rounding add (kiln_res_once; float outputs'
// f_res8 as any), and no non-linear activation but GELU in the kernels compiled for it. The two-rounding add's
// operands (q_bytes8's last branch) and the out-of-line activation's call cost the ping-pong kernels of two-warpgroup
// consumers, at 96 registers a thread, 7 registers spilled to local memory on every path (ptxas -v; ncu, session 47:
// 0.54 M spill requests in layer3's conv3 + residual), and the weight-stationary BN 128 kernels 20-28 registers' worth
// at 128: those kernels are lean (rk_lean_fits)
enum { RK_ANY, RK_NONE, RK_LEAN };
// whether a lean kernel takes a layer (s8 activations: x_s8; GELU only in its own kernels, which take s8 activations)
inline bool rk_lean_fits(bool x_s8, const cuk_qepi *e)
{
    return (!e->act || (e->act == CUK_GELU && x_s8)) && (!e->res || e->res_once || e->out >= CUK_QF32);
}

// kq_clamp_rint(t, lo, hi) + zp in its low byte, the one pack4 keeps: the magic addition's bits plus zp, without
// kq_rint's subtraction of KQ_MAGIC_BITS (a multiple of 256): one integer instruction an element fewer
static_assert((KQ_MAGIC_BITS & 0xff) == 0, "the magic number's bits end in a zero byte");
__device__ __forceinline__ int q_lo8(float t, const cuk_qepi &e)
{
    return kq_bits(kq_add(fminf(fmaxf(t, e.lo), e.hi), KQ_MAGIC)) + e.zp;   // NaN -> lo, as the CPU
}

template <bool GELU, int RK = RK_ANY>
__device__ __forceinline__ uint2 q_bytes8(const int *a, const float *m, const cuk_qepi &e, bool res, uint2 rb,
                                          const float *t2 = nullptr)
{
    float t[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        t[i] = __fmul_rn((float)a[i], m[i]);
    if ((RK != RK_LEAN || GELU) && e.act) {   // a non-linear activation in float, then the scale's inverse (qgemm.c)
#pragma unroll
        for (int i = 0; i < 8; i++)
            t[i] = __fmul_rn(act_of<GELU>(e.act, t[i], e.act_a, e.act_b), e.inv_ys);
    }
    int v[8];   // the bytes in the low 8 bits (pack4)
    if (RK == RK_NONE || !res) {   // (QLinearConvSum: t2, the second convolution's product, added first: kiln__qepi_qt)
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] = q_lo8(t2 ? __fadd_rn(t[i], t2[i]) : t[i], e);
    } else if (RK == RK_LEAN || e.res_once) {
        // one rounding (kiln_res_once): R - zr as an exact float from the magic addition, added to t by one fused
        // multiply-add, then QLinearConv's clamp and rint (cpu/qgemm.c kiln__qepi_qr)
        const uint32_t flip = e.res_s8 ? 0x80808080u : 0u, w[2] = {rb.x ^ flip, rb.y ^ flip};
        const int zb = e.zr + (e.res_s8 ? 128 : 0);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float db = kq_byte_minus(__int_as_float(__byte_perm(w[i >> 2], KQ_MAGIC_BITS, 0x7650 | (i & 3))), zb);
            v[i] = q_lo8(kq_fma(db, e.rk, t[i]), e);
        }
    } else {
        // QLinearAdd(A = the requantized byte, R): A - za = rint(t clamped) + zp - za and R - zb as exact floats
        // straight from the magic additions (no byte of A, no integer round trip); R's bytes read unsigned, s8 ones
        // with the sign bit flipped (value + 128) and their zero point with them
        const cuk_qadd_args &p = e.add;
        const uint32_t flip = e.res_s8 ? 0x80808080u : 0u, w[2] = {rb.x ^ flip, rb.y ^ flip};
        const int zb = p.zb + (e.res_s8 ? 128 : 0);
        const float dz = (float)(e.zp - p.za);
        float sv[8];
        bool all = true;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float da = kq_rint_plus(fminf(fmaxf(t[i], e.lo), e.hi), dz);   // NaN -> lo, as the CPU
            const float db = kq_byte_minus(__int_as_float(__byte_perm(w[i >> 2], KQ_MAGIC_BITS, 0x7650 | (i & 3))), zb);
            sv[i] = kq_qadd_sum(da, p.sa, db, p.sb, p.act, p.flo, p.fhi);
            int32_t c;
            all &= (bool)kq_qadd_round(sv[i], p.isc, p.zc, p.lo, p.hi, &c);
            v[i] = c;
        }
        if (!all) {   // rare: a quotient near a .5 (or isc NaN): those elements divide
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int32_t c;
                if (!kq_qadd_round(sv[i], p.isc, p.zc, p.lo, p.hi, &c))
                    v[i] = qadd_div(p, sv[i]);
            }
        }
    }
    return make_uint2(pack4(v[0], v[1], v[2], v[3]), pack4(v[4], v[5], v[6], v[7]));
}

template <bool GELU, int RK = RK_ANY>
__device__ __forceinline__ void f_vals8(const int *a, const float *m, const cuk_qepi &e, float *v)
{
#pragma unroll
    for (int i = 0; i < 8; i++)
        v[i] = (RK != RK_LEAN || GELU) && e.act ? act_of<GELU>(e.act, __fmul_rn((float)a[i], m[i]), e.act_a, e.act_b)
                     : fminf(fmaxf(__fmul_rn((float)a[i], m[i]), e.lo), e.hi);
}

// QLinearConvAdd's float tail (e.res_float): DequantizeLinear of the requantized byte and of R's (rb, as q_bytes8 reads
// them), their float32 sum, Relu: the separate layers' float operations, each rounded (no contraction)
__device__ __forceinline__ void f_res8(const int *a, const float *m, const cuk_qepi &e, uint2 rb, float *v)
{
    const uint32_t flip = e.res_s8 ? 0x80808080u : 0u, w[2] = {rb.x ^ flip, rb.y ^ flip};
    const int zb = e.zr + (e.res_s8 ? 128 : 0);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        // Y - zp = rint(t clamped), as an exact float (|t| < 2^22: cuk_conv_i8's check)
        const float dy = kq_rint_plus(fminf(fmaxf(__fmul_rn((float)a[i], m[i]), e.lo), e.hi), 0.0f);
        const float db = kq_byte_minus(__int_as_float(__byte_perm(w[i >> 2], KQ_MAGIC_BITS, 0x7650 | (i & 3))), zb);
        const float s = __fadd_rn(__fmul_rn(dy, e.ys), __fmul_rn(db, e.rs));
        v[i] = e.res_relu && s < 0.0f ? 0.0f : s;
    }
}

// 8 float values at element o of the output, in its storage (float32, FP16 or BF16: e.out)
__device__ __forceinline__ void st8_out(const cuk_qepi &e, void *y, int64_t o, const float *v)
{
    if (e.out == CUK_QF32)
        st8((float *)y + o, v);
    else if (e.out == CUK_QF16)
        st8((__half *)y + o, v);
    else
        st8((__nv_bfloat16 *)y + o, v);
}

// The multipliers m and biases bias (or NULL) of channels n0 .. n0 + BN - 1 into shared memory by cp.async, 4 channels
// a piece (K is a multiple of 8: whole pieces; past K or without a bias: zeros)
template <int BN>
__device__ __forceinline__ void load_mb(const float *m, const int32_t *bias, const cuk_conv_desc &d, float *msm,
                                        int *bsm, int n0, int tid)
{
    if (tid < BN / 4) {
        const int c = n0 + tid * 4;
        cp_async16(msm + tid * 4, c < d.k ? m + c : m, c < d.k);
    } else if (tid < BN / 2) {
        const int c = n0 + (tid - BN / 4) * 4;
        cp_async16(bsm + (tid - BN / 4) * 4, bias && c < d.k ? bias + c : (const int *)m, bias && c < d.k);
    }
}
template <int BN>
__device__ __forceinline__ void load_mb(const cuk_qepi &e, const cuk_conv_desc &d, float *msm, int *bsm, int n0, int tid)
{
    load_mb<BN>(e.m, e.bias, d, msm, bsm, n0, tid);
}

// QLinearConvSum's second convolution (e.x2): the 1x1 unpadded convolution over x2 whose output pixels are d's
__host__ __device__ __forceinline__ cuk_conv_desc sum_desc(const cuk_conv_desc &d, const cuk_qepi &e)
{
    cuk_conv_desc d2 = d;
    d2.c = e.c2, d2.h = e.h2, d2.w = e.w2, d2.r = d2.s = 1, d2.sh = e.sh2, d2.sw = e.sw2;
    d2.ph = d2.pw = 0, d2.dh = d2.dw = 1;
    return d2;
}

// QLinearConvSum's t2 from the second convolution's sums in the wgmma accumulators (store_reg's value order: value v of
// pair p is channel (2p + v / 4) * 8 + 2 (tid % 4) + v % 2)
template <int BN>
__device__ __forceinline__ void sum_products(const int *acc, const int *b2sm, const float *m2sm, int tid, float *t2)
{
    const int t = tid & 3;
#pragma unroll
    for (int p = 0; p < BN / 16; p++)
#pragma unroll
        for (int v = 0; v < 8; v++) {
            const int c = (2 * p + (v >> 2)) * 8 + 2 * t + (v & 1);
            t2[8 * p + v] = __fmul_rn((float)add_wrap(acc[8 * p + v], b2sm[c]), m2sm[c]);
        }
}

__device__ __forceinline__ void cp_async8(void *smem, const void *gmem, bool valid)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 8 : 0));
}

#if KILN_WGMMA
// The wgmma configurations' epilogue from the registers: no int32 tile in shared memory (whose 4-byte writes and
// reads, bank conflicts included, bound the memory-bound layers). tid: the thread's index among the tile's 256 (two
// warpgroups of 64 rows); rsm: the residual tile, laid out as res_at<BN, RSW> says; RK: the residual forms and
// activations it meets (RK_*).
// - Byte outputs (u8 / s8): each lane requantizes its own accumulator values where the wgmma left them (a quad holds
//   rows g and g + 8 of each 8-channel group, lane t channels 2t, 2t + 1: value i = 4c + 2h + k of pair p is acc[8p +
//   i], group 2p + c, row g + 8h, channel 2t + k) with the same q_bytes8 as store_tile, value for value (multipliers,
//   biases and residual bytes from shared memory in that order); then the quad transposes the bytes as 16-bit pieces
//   (two shuffles and six byte permutes per 8 bytes: session 35; the int32 transposition before the requantization
//   took eight shuffles and ~24 selects on the integer pipe, which bounds these kernels), so that each lane stores 8
//   neighbouring channels of one pixel (row quad_row, group 2p + t % 2): one 8-byte store. t2 (QLinearConvSum): the
//   second convolution's products in the accumulators' order, added before the rounding.
// - Float outputs: a quad's 4 x 4 transposition of the int32 sums by shuffles (quad_t4, as the FP8 kernels') gives each
//   lane 8 neighbouring channels of one pixel, then f_vals8 / f_res8 and 8 values stored.
template <int BN, bool GELU, int RSW = 0, int RK = RK_ANY>
__device__ __forceinline__ void store_reg(const int *acc, const float *msm, const int *bsm, const uint8_t *rsm,
                                          const cuk_qepi e, void *__restrict__ y, const cuk_conv_desc d, int64_t M,
                                          int64_t m0, int n0, int tid, const float *t2 = nullptr, bool mapped = false,
                                          int64_t mrow = 0, bool mok = false)
{
    static_assert(BN % 32 == 0, "the byte stores pair the 16-channel groups");
    const int t = tid & 3, lr = quad_row(tid);
    const int64_t row = mapped ? mrow : m0 + lr;   // mapped: the caller's output row for quad_row(tid) (valid: mok)
    if (e.out >= CUK_QF32) {   // float values, stored as float32, FP16 or BF16
#pragma unroll
        for (int p = 0; p < BN / 16; p++) {
            int2 u[4];
            quad_t4(acc, p, t, u);
            const int lc = (2 * p + (t & 1)) * 8, col = n0 + lc;   // u[s]: channels lc + 2s, lc + 2s + 1
            if ((mapped ? !mok : row >= M) || col >= d.k)
                continue;
            int a[8];
            float m[8];
#pragma unroll
            for (int v = 0; v < 2; v++) {
                const int4 b = *(const int4 *)&bsm[lc + 4 * v];
                const float4 f = *(const float4 *)&msm[lc + 4 * v];
                a[4 * v] = add_wrap(v ? u[2].x : u[0].x, b.x);
                a[4 * v + 1] = add_wrap(v ? u[2].y : u[0].y, b.y);
                a[4 * v + 2] = add_wrap(v ? u[3].x : u[1].x, b.z);
                a[4 * v + 3] = add_wrap(v ? u[3].y : u[1].y, b.w);
                m[4 * v] = f.x, m[4 * v + 1] = f.y, m[4 * v + 2] = f.z, m[4 * v + 3] = f.w;
            }
            float v[8];
            if (e.res_float)
                f_res8(a, m, e, *(const uint2 *)(rsm + res_at<BN, RSW>(lr, lc)), v);
            else
                f_vals8<GELU, RK>(a, m, e, v);
            st8_out(e, y, row * d.k + col, v);
        }
        return;
    }
    // the quad's byte transposition: lane t = 2 hb + cb; its 16-bit piece for lane e = 2h + c is value pair (c, h).
    // Shuffle 1 (lanes t ^ 2) trades the pieces whose destination differs from t in hb, shuffle 2 (t ^ 1) those
    // differing in cb; the selectors put each word's pieces in the order of their source lanes
    const int hb = t >> 1, cb = t & 1, lr0 = lr - hb * 8;
    const uint32_t sel_k = hb ? 0x7632u : 0x5410u, sel_s = hb ? 0x5410u : 0x7632u;
    const uint32_t sel_w0 = hb ? 0x1054u : 0x5410u, sel_w1 = hb ? 0x3276u : 0x7632u;
    const uint32_t sel_keep = cb ? sel_w1 : sel_w0, sel_send = cb ? sel_w0 : sel_w1;
    const uint32_t sel_f0 = cb ? 0x1054u : 0x5410u, sel_f1 = cb ? 0x3276u : 0x7632u;
    // once for the tile (the pointer test and the 64-bit row bound were evaluated again for every pair: ncu, session 36)
    const bool has_res = RK != RK_NONE && e.res != nullptr, rok = mapped ? mok : row < M;
    // 16-byte stores where the rows allow them (K a multiple of 16, y 16-byte aligned): see the pairing below
    const bool v16 = (d.k & 15) == 0 && ((uintptr_t)y & 15) == 0;
    uint8_t *yrow = (uint8_t *)y + row * d.k;
    uint2 prev = make_uint2(0u, 0u);
#pragma unroll
    for (int p = 0; p < BN / 16; p++) {
        int a[8];
        float m[8];
        uint32_t rw[2] = {0u, 0u};
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int ch = (2 * p + c) * 8 + 2 * t;
            const int2 b = *(const int2 *)&bsm[ch];
            const float2 f = *(const float2 *)&msm[ch];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                a[4 * c + 2 * h] = add_wrap(acc[8 * p + 4 * c + 2 * h], b.x);
                a[4 * c + 2 * h + 1] = add_wrap(acc[8 * p + 4 * c + 2 * h + 1], b.y);
                m[4 * c + 2 * h] = f.x, m[4 * c + 2 * h + 1] = f.y;
            }
            if (has_res)   // R's bytes in value order: rows g, g + 8 of channels ch, ch + 1
                rw[c] = (uint32_t)*(const uint16_t *)(rsm + res_at<BN, RSW>(lr0, ch)) |
                        ((uint32_t)*(const uint16_t *)(rsm + res_at<BN, RSW>(lr0 + 8, ch)) << 16);
        }
        const uint2 q = q_bytes8<GELU, RK>(a, m, e, has_res, make_uint2(rw[0], rw[1]), t2 ? t2 + 8 * p : nullptr);
        const uint32_t k1 = __byte_perm(q.x, q.y, sel_k), s1 = __byte_perm(q.x, q.y, sel_s);
        const uint32_t r1 = __shfl_xor_sync(0xffffffffu, s1, 2);
        const uint32_t keep = __byte_perm(k1, r1, sel_keep), send = __byte_perm(k1, r1, sel_send);
        const uint32_t x = __shfl_xor_sync(0xffffffffu, send, 1);
        const uint2 o = make_uint2(__byte_perm(keep, x, sel_f0), __byte_perm(keep, x, sel_f1));   // group 2p + cb
        if ((p & 1) == 0) {
            prev = o;
            continue;
        }
        // pairs p - 1, p: the lanes cb = 0, 1 of a row trade one 8-byte piece, so that lane cb holds channel groups
        // 2p - 2 + 2cb and 2p - 1 + 2cb, 16 contiguous bytes: the pair of lanes writes 32 contiguous bytes, a whole
        // L2 sector, with one store each (8-byte stores left every sector half-written twice: twice the L2's write
        // operations on the memory-bound 1x1 layers)
        const uint2 snd = cb ? prev : o;
        const uint2 r = make_uint2(__shfl_xor_sync(0xffffffffu, snd.x, 1), __shfl_xor_sync(0xffffffffu, snd.y, 1));
        const uint2 lo = cb ? r : prev, hi = cb ? o : r;
        const int col = n0 + 16 * (p - 1) + 16 * cb;
        if (!rok)
            continue;
        if (v16 && col + 16 <= d.k) {
            *(uint4 *)(yrow + col) = make_uint4(lo.x, lo.y, hi.x, hi.y);
        } else {
            if (col < d.k)
                *(uint2 *)(yrow + col) = lo;
            if (col + 8 < d.k)
                *(uint2 *)(yrow + col + 8) = hi;
        }
    }
}
#endif

} // namespace
#endif
