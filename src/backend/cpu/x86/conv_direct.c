/* The direct float32 convolution (no im2col) of the AVX-512 and AVX2 Conv kernels (conv_avx512.c,
 * conv_avx2.c) for 1-D / 2-D layers with few output channels and wide rows: the input is copied
 * once into a zero-padded, phase-split layout and a direct micro-kernel reads its B operand
 * straight from it through an offset table (no im2col, no packing): the GEMM's AVX-512 one
 * (kiln__conv_direct_f32, gemm.h: 32-pixel tiles) or convd_avx2.c's (16-pixel tiles). */
#include "../gemm.h"
#include "../scratch.h"
#include "conv_x86.h"

#if KILN_CONV_X86
/* Padded rows [r0, r1) of every channel and phase. Layout [P][Hp][Cg][Wq]: the rows the taps
 * of one output row read are close together (few pages), whatever the channel count. */
static void convd_fill_task(void *vctx, int64_t r0, int64_t r1)
{
    const kiln_convd_geom *q = vctx;
    const kiln_conv2d *p = &q->p;
    for (int64_t ph = 0; ph < q->P; ph++)
        for (int64_t r = r0; r < r1; r++) {
            float *d = q->xp + ((ph * q->Hp + r) * q->Cg) * q->Wq;
            int64_t iy = r - p->ph;
            if (iy < 0 || iy >= p->H) {
                memset(d, 0, sizeof(float) * (size_t)(q->Cg * q->Wq));
                continue;
            }
            for (int64_t ch = 0; ch < q->Cg; ch++, d += q->Wq) {
                const float *row = q->x + (ch * p->H + iy) * p->W;
                if (q->P == 1) {
                    kiln__conv_pad_row(d, q->Wq, row, p->W, p->pw);
                } else {
                    int64_t w = 0;
                    if (q->P == 2) {
                        /* leading zeros, then the stride-2 gather of the row's columns ix = 2w + ph - pw (the stem:
                         * bench/env_ab against the scalar loop, 200 pairs, 2 threads: stem + MaxPool 1/1.020) */
                        int64_t w0 = ph >= p->pw ? 0 : (p->pw - ph + 1) / 2, s0 = 2 * w0 + ph - p->pw;
                        for (; w < w0 && w < q->Wq; w++)
                            d[w] = 0.0f;
                        if (w0 < q->Wq && s0 < p->W)
                            w += kiln__conv_gather2_avx2(d + w0, row + s0, q->Wq - w0, p->W - s0);
                    }
                    for (; w < q->Wq; w++) {
                        int64_t ix = w * q->P + ph - p->pw;
                        d[w] = ix >= 0 && ix < p->W ? row[ix] : 0.0f;
                    }
                }
            }
        }
}

/* Whether the direct path beats im2col + packing: it wastes the lanes of partial tiles of lanes
 * pixels, im2col spends ~24 / M of the GEMM time packing. */
static bool direct_conv_pays(const kiln_window *g, int64_t Mg, int64_t K, int lanes)
{
    if (K < 16 || Mg < 1)
        return false;
    kiln_conv2d p;
    kiln__conv2d_view(g, &p);
    if (p.sw > 4 || p.Wo < 16)
        return false;
    double lane_eff = (double)p.Wo / (double)(cdiv(p.Wo, lanes) * lanes);
    return 1.0 / lane_eff - 1.0 + 0.05 < 24.0 / (double)Mg;
}

/* run: the ISA's tiles over d (kiln__conv_direct_f32 or kiln__conv_direct_f32_avx2), lanes their
 * width in pixels. */
typedef void (*convd_run_fn)(kiln_pool *pool, int nthreads, const kiln_convd *d);

static kiln_status conv_direct(const kiln_kctx *ctx, const kiln_window *g, const float *x, const float *w,
                               const float *b, float *y, const kiln_epi *post, convd_run_fn run, int lanes)
{
    int nt = ctx->nthreads;
    int64_t Cg = g->C / g->G, Mg = g->M / g->G, K = Cg * g->k_sz;
    kiln_convd_geom q = {.Cg = Cg};
    kiln__conv2d_view(g, &q.p);
    const kiln_conv2d *p = &q.p;
    q.P = p->sw;
    q.tw = cdiv(p->Wo, lanes);
    /* rows read: (Ho-1)*sh + (kh-1)*dh; columns per phase: the tiles plus the kernel's reach */
    q.Hp = (p->Ho - 1) * p->sh + (p->kh - 1) * p->dh + 1;
    q.Wq = q.tw * lanes + ((p->kw - 1) * p->dw) / q.P + 1;
    int64_t img = mul_chk(mul_chk(q.P * Cg, q.Hp), q.Wq);
    if (img < 0 || img > ((int64_t)1 << 40) || K > ((int64_t)1 << 40))
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "direct convolution buffer is too large");
    int64_t img_pad = (img + 64 + 15) / 16 * 16; /* the image, 64 floats of slack, 64-byte aligned */
    size_t bytes = (size_t)img_pad * sizeof(float) + (size_t)K * sizeof(int64_t);
    if ((uint64_t)bytes > kiln__max_tensor_bytes())
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "direct convolution buffer is too large");
    float *buf = kiln__scratch(KILN_SCRATCH_CONV, bytes);
    if (!buf)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (direct convolution buffer)");
    q.xp = buf;
    memset(buf + img, 0, (size_t)(img_pad - img) * sizeof(float));
    int64_t *off = (int64_t *)(void *)(buf + img_pad);
    /* k = (c, ki, kj): padded column kj*dw = floor(kj*dw / P) * P + phase */
    for (int64_t k = 0, c = 0; c < Cg; c++)
        for (int64_t ki = 0; ki < p->kh; ki++)
            for (int64_t kj = 0; kj < p->kw; kj++, k++) {
                int64_t u = kj * p->dw;
                off[k] = (((u % q.P) * q.Hp + ki * p->dh) * Cg + c) * q.Wq + u / q.P;
            }
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            int64_t row0 = n * g->M + gi * Mg;
            q.x = x + (n * g->C + gi * Cg) * g->in_sz;
            kiln__parallel_for(ctx->pool, nt, q.Hp, 1 + 8192 / (Cg * q.Wq * q.P + 1), convd_fill_task, &q);
            kiln_epi e = kiln__conv_epi(g, b, post, gi, row0);
            kiln_convd d = {.M = Mg, .K = K, .A = w + gi * Mg * K, .lda = K, .xp = q.xp, .off = off, .Ho = p->Ho,
                            .Wo = p->Wo, .row_stride = p->sh * Cg * q.Wq, .C = y + row0 * g->out_sz, .ldc = g->out_sz,
                            .epi = &e};
            run(ctx->pool, nt, &d);
        }
    return KILN_OK;
}

static bool direct_takes(const kiln_window *g, const float *w, int lanes)
{
    int64_t Cg = g->C / g->G, Mg = g->M / g->G;
    bool depthwise = Cg == 1;   /* the depthwise rows are faster */
    return w && g->nsp <= 2 && !depthwise && !kiln__conv_pointwise(g) && direct_conv_pays(g, Mg, Cg * g->k_sz, lanes);
}

kiln_status kiln__conv_direct_layer(const kiln_kctx *ctx, const kiln_window *g, const float *x, const float *w,
                                    const float *b, float *y, const kiln_epi *post, bool *done)
{
    *done = kiln__conv_direct_available() && direct_takes(g, w, 32);
    return *done ? conv_direct(ctx, g, x, w, b, y, post, kiln__conv_direct_f32, 32) : KILN_OK;
}

kiln_status kiln__conv_direct_layer_avx2(const kiln_kctx *ctx, const kiln_window *g, const float *x, const float *w,
                                         const float *b, float *y, const kiln_epi *post, bool *done)
{
    *done = direct_takes(g, w, 16);
    return *done ? conv_direct(ctx, g, x, w, b, y, post, kiln__conv_direct_f32_avx2, 16) : KILN_OK;
}
#endif
