/* float32 Conv / FusedConv shared by the reference kernels (cpu/ref/k_conv.c, k_fused.c) and
 * their x86 variants (cpu/x86/conv_*.c), which differ only in the hooks of a kiln_conv_isa: the
 * reference passes NULL (portable scalar loops, the shared GEMM), the x86 kernels vectorized rows
 * and panels and whole-layer strategies (Winograd, direct convolution). */
#ifndef KILN_BACKEND_CPU_CONV_H
#define KILN_BACKEND_CPU_CONV_H

#include "../kernel.h"
#include "epilogue.h"
#include "ref/window.h"

/* 2-D view of a 1-D (H = 1) or 2-D convolution; Wp, band, band_rows: the depthwise band
 * buffer (Wp padded columns, `band` output rows per fill, band_rows rows; 0: no buffer). */
typedef struct kiln_conv2d {
    int64_t H, W, kh, kw, sh, sw, dh, dw, ph, pw, Ho, Wo;
    int64_t Wp, band, band_rows;
} kiln_conv2d;

/* The implicit im2col of one image and group (see im2col_pack in k_conv.c): x is channel 0 of
 * the group. A panel's columns are split once into segments that stay within one output row. */
typedef struct kiln_im2col {
    const float *x;
    int64_t H, W, kh, kw, sh, sw, dh, dw, ph, pw, Wo;
} kiln_im2col;

typedef struct kiln_im2col_seg {
    int lane, len;                      /* position in the panel */
    int64_t y0, x0;                     /* oy * sh - ph, ox * sw - pw of its first column */
} kiln_im2col_seg;

/* Segments per panel: at most 32 (+ slack) for the 32-column panels. */
#define KILN_IM2COL_SEG_MAX 64

typedef struct kiln_conv_isa {
    /* One depthwise output row: rb is the zero-padded band at the row's tap (0, 0) (Wp wide,
     * room for 8-wide blocks and 16-float stride-2 reads), column stride 1 or 2; NULL: scalar. */
    void (*dw_row)(const kiln_conv2d *p, const float *rb, const float *wk, float bias, float *yr);
    /* dst[i] = src[2 i] for a prefix of i < n, reading below src + avail; returns the i reached
     * (the caller finishes the row); NULL: none. */
    int64_t (*gather2)(float *dst, const float *src, int64_t n, int64_t avail);
    /* Rows [k0, k0 + kc) of one 32-column B panel of the implicit im2col into d ([kc][32]),
     * from its ns segments (width columns, the rest zero), column stride 1 or 2; NULL: scalar. */
    void (*im2col_panel32)(const kiln_im2col *c, const kiln_im2col_seg *segs, int ns, int width, int64_t k0,
                           int64_t kc, float *d);
    /* The same for 16-column panels (the AVX2 GEMM's): d is [kc][16]; NULL: scalar. */
    void (*im2col_panel16)(const kiln_im2col *c, const kiln_im2col_seg *segs, int ns, int width, int64_t k0,
                           int64_t kc, float *d);
    /* A whole-layer strategy tried before the others: *done = true when it ran the layer (y
     * fully written, post applied); w may be NULL (weights stored only prepared). NULL: none. */
    kiln_status (*layer)(const kiln_kctx *ctx, const kiln_window *g, const float *x, const float *w,
                         const float *b, float *y, const kiln_epi *post, bool *done);
} kiln_conv_isa;

/* Conv with the hooks of isa (NULL: the scalar reference); self is the kernel calling it (the
 * low-bit and mixed-precision paths re-enter it). */
kiln_status kiln__conv(kiln_kctx *ctx, const kiln_conv_isa *isa, kiln_kernel_fn self);
/* act(Conv(X, W, B) + res), ctx->in = {X, W, B?}; res (NULL = none) must be float32 with the
 * output's shape (leading ones allowed); *handled = false (nothing done) when the fused form
 * does not apply. */
kiln_status kiln__conv_fused(kiln_kctx *ctx, const kiln_conv_isa *isa, const kiln_tensor *res, const kiln_act *act,
                             bool *handled);
/* Whether kiln__conv_fused computes act(Conv(X, W, B) + res) with its output at res's own addresses (ctx->in =
 * {X, W, B?}), bit for bit as with res elsewhere: a float32 pointwise conv of res's dims, one GEMM per image and
 * group that reads each residual element before storing over it (kiln__sgemm_res_in_place). Else the residual
 * must be copied first. */
bool kiln__conv_res_in_place_ok(const kiln_kctx *ctx, const kiln_tensor *res);
/* FusedConv (k_fused.c) with the hooks of isa. */
kiln_status kiln__fused_conv(kiln_kctx *ctx, const kiln_conv_isa *isa, kiln_kernel_fn self);

/* d[0..n) = pw zeros, the input row's W values, zeros (as many of each as fit in n). */
static inline void kiln__conv_pad_row(float *d, int64_t n, const float *row, int64_t W, int64_t pw)
{
    int64_t lead = pw < n ? pw : n, ncopy = W < n - lead ? W : n - lead;
    memset(d, 0, sizeof(float) * (size_t)lead);
    memcpy(d + lead, row, sizeof(float) * (size_t)ncopy);
    memset(d + lead + ncopy, 0, sizeof(float) * (size_t)(n - lead - ncopy));
}

/* dst[c, oy, ox] = x[c, oy*sh, ox*sw] for C channels of an H x W image (Ho x Wo outputs), multithreaded: the
 * input of a 1x1 strided conv; gather2: kiln_conv_isa's, or NULL. */
void kiln__conv_subsample(kiln_pool *pool, int nthreads, const float *x, int64_t C, int64_t H, int64_t W, int64_t sh,
                          int64_t sw, int64_t Ho, int64_t Wo, float *dst,
                          int64_t (*gather2)(float *dst, const float *src, int64_t n, int64_t avail));
/* FusedConvPool (k_convpool.c): the stem convolution, its max pool and the pool's quantization in turn. */
kiln_status kiln__fused_conv_pool(kiln_kctx *ctx);
/* FusedConvSum (k_convsum.c) with the row gather of a kiln_conv_isa (NULL: scalar). */
kiln_status kiln__fused_conv_sum(kiln_kctx *ctx, int64_t (*gather2)(float *dst, const float *src, int64_t n,
                                                                   int64_t avail));

/* The 2-D view of a 1-D or 2-D geometry (band fields zero). */
void kiln__conv2d_view(const kiln_window *g, kiln_conv2d *p);
/* The depthwise band buffer of p's geometry (the dw_row hook's rows): p->Wp, p->band, p->band_rows, bands of up to
 * 256 KB; band_rows = 0 (no buffer: bounds-checked taps) for absurd strides, dilations or pads (ref/k_conv.c). The
 * INT8 depthwise convolution's float32 rows plan theirs with it too (qgemm_ops.c). */
void kiln__conv_dw_plan(kiln_conv2d *p);
/* 1x1, stride 1, no padding: one GEMM W x X per image and group. */
bool kiln__conv_pointwise(const kiln_window *g);
/* The GEMM epilogue of rows [row0, row0 + Mg) of group gi: row bias, post's residual and
 * activation (post may be NULL). */
kiln_epi kiln__conv_epi(const kiln_window *g, const float *b, const kiln_epi *post, int64_t gi, int64_t row0);

#endif
