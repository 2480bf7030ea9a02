// INT8 convolutions the tensor-core kernels (kernels_conv_i8.cu) do not take, on the CUDA cores (cuda_int8.c
// k_qconv_direct): grouped and depthwise layers, input channels not a multiple of 16 or outputs not of 8 (PP-OCR's
// INT8 engines: 14 depthwise layers and the small 1x1 layers of their squeeze-excitation blocks), a padded input with a
// zero point. A thread sums one output pixel's KV neighbouring channels over the filter's taps and input channels in
// int32 (exact, as the CPU's sums are: any order gives the same integer), the input's padding read as its zero point
// (the CPU's (x - zx) = 0 there), then the same requantizing epilogue as the CPU's (cpu/qgemm.c kiln__qepi_q, the
// tensor-core kernels' q_bytes8 one element at a time). NHWC input and output, the filter [R*S][C/G][K].
#include "kernels_conv_i8.cuh"

namespace {

struct dconv {
    int n, c, h, w, k, r, s, p, q, sh, sw, ph, pw, dh, dw;
    int cg, kg;   // input channels and outputs a group
    int zx;       // the input's zero point (the padding's value)
};

__device__ __forceinline__ int q8(uint32_t b, bool s8) { return s8 ? (int)(int8_t)(uint8_t)b : (int)(uint8_t)b; }

// The requantized (or float) output of channel k from its sum a (bias and the input's zero point included)
__device__ __forceinline__ void put1(const cuk_qepi &e, void *y, int64_t o, int k, int a, uint32_t *byte)
{
    float t = __fmul_rn((float)a, e.m[k]);
    if (e.out == CUK_QU8 || e.out == CUK_QS8) {
        if (e.act)
            t = __fmul_rn(act_call(e.act, t, e.act_a, e.act_b), e.inv_ys);
        *byte = (uint32_t)(kq_clamp_rint(t, e.lo, e.hi) + e.zp) & 0xffu;   // NaN -> lo, as the CPU
        return;
    }
    const float v = e.act ? act_call(e.act, t, e.act_a, e.act_b) : fminf(fmaxf(t, e.lo), e.hi);
    if (e.out == CUK_QF32)
        stf((float *)y, o, v);
    else if (e.out == CUK_QF16)
        stf((__half *)y, o, v);
    else
        stf((__nv_bfloat16 *)y, o, v);
}

// KV channels a thread (4: K a multiple of 4, 4-byte filter and output pieces; 1 otherwise); DW: one input channel per
// output (depthwise, C = K), read 4 at a time where KV is 4
template <int KV, bool DW, bool XS8>
__global__ void __launch_bounds__(256) k_qconv_direct(const uint8_t *__restrict__ x, const int8_t *__restrict__ w,
                                                      const cuk_qepi e, void *__restrict__ y, const dconv d,
                                                      int64_t total)
{
    const int kq = d.k / KV;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += step) {
        const int k0 = (int)(t % kq) * KV;
        const int64_t pix = t / kq;
        const int oq = (int)(pix % d.q), op = (int)(pix / d.q % d.p);
        const int64_t img = pix / ((int64_t)d.q * d.p);
        uint32_t acc[KV];
        int ci0[KV];   // each channel's first input channel (its group's)
#pragma unroll
        for (int i = 0; i < KV; i++) {
            acc[i] = (uint32_t)e.bias[k0 + i];
            ci0[i] = DW ? k0 + i : (k0 + i) / d.kg * d.cg;
        }
        const uint8_t *xn = x + img * d.h * d.w * (int64_t)d.c;
        for (int r = 0; r < d.r; r++) {
            const int ih = op * d.sh - d.ph + r * d.dh;
            for (int s = 0; s < d.s; s++) {
                const int iw = oq * d.sw - d.pw + s * d.dw;
                const bool in = (unsigned)ih < (unsigned)d.h && (unsigned)iw < (unsigned)d.w;
                const uint8_t *xp = xn + ((int64_t)ih * d.w + iw) * d.c;
                const int8_t *wt = w + (int64_t)(r * d.s + s) * d.cg * d.k + k0;
                if constexpr (DW && KV == 4) {
                    const uint32_t xv = in ? *(const uint32_t *)(xp + k0) : 0u;
                    const char4 wv = *(const char4 *)wt;
                    const int wk[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        acc[i] += (uint32_t)((in ? q8(xv >> (8 * i), XS8) : d.zx) * wk[i]);
                } else {
                    for (int c = 0; c < d.cg; c++) {
#pragma unroll
                        for (int i = 0; i < KV; i++) {
                            const int xv = in ? q8(xp[ci0[i] + c], XS8) : d.zx;
                            acc[i] += (uint32_t)(xv * (int)wt[(int64_t)c * d.k + i]);
                        }
                    }
                }
            }
        }
        const int64_t o = pix * d.k + k0;
        uint32_t bytes = 0;
#pragma unroll
        for (int i = 0; i < KV; i++) {
            uint32_t b = 0;
            put1(e, y, o + i, k0 + i, (int)acc[i], &b);
            bytes |= b << (8 * i);
        }
        if (e.out == CUK_QU8 || e.out == CUK_QS8) {
            if constexpr (KV == 4)
                *(uint32_t *)((uint8_t *)y + o) = bytes;
            else
                ((uint8_t *)y)[o] = (uint8_t)bytes;
        }
    }
}

template <int KV, bool DW>
cudaError_t launch(bool xs8, const uint8_t *x, const int8_t *w, const cuk_qepi &e, void *y, const dconv &d,
                   int64_t total, unsigned g, cudaStream_t s)
{
    if (xs8)
        k_qconv_direct<KV, DW, true><<<g, 256, 0, s>>>(x, w, e, y, d, total);
    else
        k_qconv_direct<KV, DW, false><<<g, 256, 0, s>>>(x, w, e, y, d, total);
    return cudaGetLastError();
}

} // namespace

extern "C" bool cuk_qconv_direct_ok(const cuk_conv_desc *d, int groups)
{
    return d->n > 0 && d->c > 0 && d->k > 0 && groups > 0 && d->c % groups == 0 && d->k % groups == 0 && d->r > 0 &&
           d->s > 0 && d->p > 0 && d->q > 0 && (int64_t)d->n * d->h * d->w * d->c < ((int64_t)1 << 40) &&
           (int64_t)d->r * d->s * (d->c / groups) * d->k < ((int64_t)1 << 31);
}

extern "C" cudaError_t cuk_qconv_direct(bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e, void *y,
                                        const cuk_conv_desc *cd, int groups, int x_zp, cudaStream_t s)
{
    if (!cuk_qconv_direct_ok(cd, groups) || !e->bias || !e->m || e->res || e->x2)
        return cudaErrorNotSupported;
    const dconv d = {cd->n, cd->c, cd->h, cd->w, cd->k, cd->r, cd->s, cd->p, cd->q, cd->sh, cd->sw, cd->ph, cd->pw,
                     cd->dh, cd->dw, cd->c / groups, cd->k / groups, x_zp};
    const bool v4 = d.k % 4 == 0, dw = d.cg == 1 && d.kg == 1;
    const int64_t total = (int64_t)d.n * d.p * d.q * (d.k / (v4 ? 4 : 1));
    const int64_t blocks = (total + 255) / 256;
    const unsigned g = (unsigned)(blocks < 65535 * 32 ? blocks : 65535 * 32);
    if (v4 && dw)
        return launch<4, true>(x_s8, x, w, *e, y, d, total, g, s);
    if (v4)
        return launch<4, false>(x_s8, x, w, *e, y, d, total, g, s);
    return launch<1, false>(x_s8, x, w, *e, y, d, total, g, s);
}
