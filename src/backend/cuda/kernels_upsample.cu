// A decoder's upsampling layers on the GPU: Resize / Upsample (any mode the CPU's tap tables describe) and
// ConvTranspose (2-D, direct: each output element gathers the inputs whose window covers it). Both read
// float32 or half storage (FDT_DISPATCH) in NCHW or NHWC through per-axis strides.
#include "kernels.h"
#include "kernels_grid.cuh"

// The logical (a0, a1, a2, a3) of element i of a [d0, d1, d2, d3] tensor walked in memory order: NCHW
// (a3 fastest) or NHWC (a1 fastest, then a3, a2, a0).
__device__ __forceinline__ void split4(int64_t i, const int64_t *d, bool nhwc, int64_t *a)
{
    if (nhwc) {
        a[1] = i % d[1]; i /= d[1];
        a[3] = i % d[3]; i /= d[3];
        a[2] = i % d[2]; i /= d[2];
        a[0] = i;
    } else {
        a[3] = i % d[3]; i /= d[3];
        a[2] = i % d[2]; i /= d[2];
        a[1] = i % d[1]; i /= d[1];
        a[0] = i;
    }
}

template <typename T> __global__ void k_resize(cuk_resize_args p, const T *x, T *y, int64_t n)
{
    GRID_LOOP(i, n) {
        int64_t o[4];
        split4(i, p.out, p.nhwc, o);
        int64_t yo = o[0] * p.ys[0] + o[1] * p.ys[1] + o[2] * p.ys[2] + o[3] * p.ys[3];
        bool out = false;
        for (int d = 0; d < 4; d++)
            out |= p.outside[d] && p.outside[d][o[d]];
        if (out) {
            stf(y, yo, p.extrap);
            continue;
        }
        if (p.nearest) {
            int64_t xo = 0;
            for (int d = 0; d < 4; d++)
                xo += (int64_t)p.idx[d][o[d]] * p.xs[d];
            y[yo] = x[xo];
            continue;
        }
        const int32_t *i0 = p.idx[0] + o[0] * p.nt[0], *i1 = p.idx[1] + o[1] * p.nt[1],
                      *i2 = p.idx[2] + o[2] * p.nt[2], *i3 = p.idx[3] + o[3] * p.nt[3];
        const float *w0 = p.w[0] + o[0] * p.nt[0], *w1 = p.w[1] + o[1] * p.nt[1], *w2 = p.w[2] + o[2] * p.nt[2],
                    *w3 = p.w[3] + o[3] * p.nt[3];
        float acc0 = 0.f;
        for (int t0 = 0; t0 < p.nt[0]; t0++) {
            float acc1 = 0.f;
            for (int t1 = 0; t1 < p.nt[1]; t1++) {
                int64_t b01 = (int64_t)i0[t0] * p.xs[0] + (int64_t)i1[t1] * p.xs[1];
                float acc2 = 0.f;
                for (int t2 = 0; t2 < p.nt[2]; t2++) {
                    int64_t b = b01 + (int64_t)i2[t2] * p.xs[2];
                    float acc3 = 0.f;
                    for (int t3 = 0; t3 < p.nt[3]; t3++)
                        acc3 += w3[t3] * ldf(x, b + (int64_t)i3[t3] * p.xs[3]);
                    acc2 += w2[t2] * acc3;
                }
                acc1 += w1[t1] * acc2;
            }
            acc0 += w0[t0] * acc1;
        }
        stf(y, yo, acc0);
    }
}

extern "C" cudaError_t cuk_resize(int fdt, const cuk_resize_args *p, const void *x, void *y, cudaStream_t s)
{
    int64_t n = p->out[0] * p->out[1] * p->out[2] * p->out[3];
    if (n <= 0)
        return cudaGetLastError();
    FDT_DISPATCH(fdt, k_resize<T><<<grid_for(n), THREADS, 0, s>>>(*p, (const T *)x, (T *)y, n));
    return cudaGetLastError();
}

template <typename T> __global__ void k_convt(cuk_convt_args p, const T *x, const float *w, const float *bias, T *y,
                                              int64_t n)
{
    int64_t coutg = p.cout / p.group, cing = p.cin / p.group;
    const int64_t yd[4] = {p.n, p.cout, p.oh, p.ow};
    GRID_LOOP(i, n) {
        int64_t o[4];
        split4(i, yd, p.nhwc, o);
        int64_t co = o[1], g = co / coutg, col = co % coutg;
        float acc = bias ? bias[co] : 0.f;
        const T *xn = x + o[0] * p.xs[0] + g * cing * p.xs[1];
        const float *wg = w + (g * cing * coutg + col) * (int64_t)p.kh * p.kw;
        for (int ky = 0; ky < p.kh; ky++) {
            int64_t ty = o[2] + p.ph - (int64_t)ky * p.dh;
            if (ty < 0 || ty % p.sh)
                continue;
            int64_t iy = ty / p.sh;
            if (iy >= p.h)
                continue;
            for (int kx = 0; kx < p.kw; kx++) {
                int64_t tx = o[3] + p.pw - (int64_t)kx * p.dw;
                if (tx < 0 || tx % p.sw)
                    continue;
                int64_t ix = tx / p.sw;
                if (ix >= p.w)
                    continue;
                const T *xp = xn + iy * p.xs[2] + ix * p.xs[3];
                const float *wp = wg + (int64_t)ky * p.kw + kx;
                for (int64_t ci = 0; ci < cing; ci++)
                    acc += ldf(xp, ci * p.xs[1]) * wp[ci * coutg * p.kh * p.kw];
            }
        }
        stf(y, o[0] * p.ys[0] + o[1] * p.ys[1] + o[2] * p.ys[2] + o[3] * p.ys[3], acc);
    }
}

extern "C" cudaError_t cuk_convt(int fdt, const cuk_convt_args *p, const void *x, const float *w, const float *bias,
                                 void *y, cudaStream_t s)
{
    int64_t n = p->n * p->cout * p->oh * p->ow;
    if (n <= 0)
        return cudaGetLastError();
    if (p->group < 1 || p->cout % p->group || p->cin % p->group || p->sh < 1 || p->sw < 1)
        return cudaErrorInvalidValue;
    FDT_DISPATCH(fdt, k_convt<T><<<grid_for(n), THREADS, 0, s>>>(*p, (const T *)x, w, bias, (T *)y, n));
    return cudaGetLastError();
}
