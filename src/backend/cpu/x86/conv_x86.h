/* The x86 float32 convolution (conv.h hooks), private to cpu/x86/conv_*.c: the AVX2 rows and
 * gathers that the AVX-512 kernel reuses, and its whole-layer strategies (Winograd in
 * conv_wino.c, direct convolution in conv_direct.c). */
#ifndef KILN_BACKEND_CPU_X86_CONV_X86_H
#define KILN_BACKEND_CPU_X86_CONV_X86_H

#include "../conv.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KILN_CONV_X86 1
#else
#define KILN_CONV_X86 0
#endif

/* What the AVX-512 kernels need of the host (the Winograd output transforms use AVX512DQ). */
#define KILN_CONV_AVX512_ISA (KILN_CPU_AVX2_FMA | KILN_CPU_AVX512_DQ_FMA)

#if KILN_CONV_X86
/* kiln_conv_isa.dw_row and .gather2 with AVX2 + FMA (conv_avx2.c) */
void kiln__conv_dw_row_avx2(const kiln_conv2d *p, const float *rb, const float *wk, float bias, float *yr);
int64_t kiln__conv_gather2_avx2(float *dst, const float *src, int64_t n, int64_t avail);
/* kiln_conv_isa.dw_row with AVX-512 (conv_avx512.c): the same bits as the AVX2 row, 16 outputs a vector */
void kiln__conv_dw_row_avx512(const kiln_conv2d *p, const float *rb, const float *wk, float bias, float *yr);

/* One ISA's Winograd transforms (wino.h) and their choice per layer (conv_wino.c). */
struct wino_kind;
typedef struct kiln_wino_set {
    const struct wino_kind *f23, *f43;
    unsigned isa;                  /* kiln__cpu_has() set the transforms need */
    bool nr16;                     /* they also write 16-tile GEMM panels (else only 32) */
    bool upack;                    /* filters prepared on a host of the AVX2 GEMM family are stored as
                                    * its packed A (kiln__sgemm_apack, per product) */
    int64_t f43_max_pairs;         /* prepared filters: F(4x4) up to this many channel pairs */
    int64_t prep_max_pairs;        /* filters transformed at build time up to this many pairs */
} kiln_wino_set;
extern const kiln_wino_set kiln__wino_set_avx512, kiln__wino_set_avx2;

/* Whole-layer strategies (kiln_conv_isa.layer): Winograd of set s for 3x3 stride-1 layers
 * (prepared filters, or enough tiles), the direct convolution for few output channels and wide
 * rows. */
kiln_status kiln__conv_wino_layer(const kiln_kctx *ctx, const kiln_wino_set *s, const kiln_window *g,
                                  const float *x, const float *w, const float *b, float *y, const kiln_epi *post,
                                  bool *done);
kiln_status kiln__conv_direct_layer(const kiln_kctx *ctx, const kiln_window *g, const float *x, const float *w,
                                    const float *b, float *y, const kiln_epi *post, bool *done);
/* The same with convd_avx2.c's 16-pixel tiles (AVX2 + FMA), for the AVX2 kernel. */
kiln_status kiln__conv_direct_layer_avx2(const kiln_kctx *ctx, const kiln_window *g, const float *x, const float *w,
                                         const float *b, float *y, const kiln_epi *post, bool *done);
struct kiln_convd;
void kiln__conv_direct_f32_avx2(kiln_pool *pool, int nthreads, const struct kiln_convd *d);
#endif

/* The zero-padded input of the direct and Winograd convolutions: P phases (the column stride),
 * padded row r holds input row r - ph, padded column u = w' * P + phase input column u - pw. */
typedef struct kiln_convd_geom {
    kiln_conv2d p;          /* 2-D view */
    int64_t P, Hp, Wq, tw;  /* phases, padded rows, columns per phase, tiles per row (32 or 16 pixels) */
    int64_t Cg;
    const float *x;         /* image, channel 0 of the group */
    float *xp;
} kiln_convd_geom;

#endif
