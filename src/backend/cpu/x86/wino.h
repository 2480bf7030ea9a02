/* Winograd convolution of 3x3 stride-1 float32 layers (driver: conv_wino.c; transforms:
 * wino_avx512.c, 16 tiles per vector, and wino_avx2.c, 8 tiles per vector). Two variants, F(m x m, 3x3) for output tiles of m x m pixels from (m+2) x (m+2) input
 * tiles, with np = (m+2)^2 element-wise products per tile and channel pair:
 *   - F(2x2, 3x3): 16 products for 4 outputs (2.25x fewer multiplies than direct);
 *   - F(4x4, 3x3): 36 products for 16 outputs (4x fewer), points 0, +-1, +-2 (Lavin & Gray),
 *     slightly larger rounding errors (its transforms have coefficients up to 8 and 1/24).
 * Y = A^T [ (G g G^T) . (B^T d B) ] A: the np products summed over input channels are np GEMMs
 * U[xi] (M x C) x V[xi] (C x tiles) into P[xi] (M x tiles). Private to cpu/x86 (x86-64 only). */
#ifndef KILN_BACKEND_CPU_X86_WINO_H
#define KILN_BACKEND_CPU_X86_WINO_H

#include "../epilogue.h"
#include "../ref/window.h"

struct wino_job;

typedef struct wino_kind {
    int m;            /* output tile side */
    int np;           /* products per tile: (m + 2)^2 */
    uint32_t layout;  /* the prepared filters' layout (prep.h: KILN_PREP_WINO_F23 / F43) */
    /* Tw[np x 9] = G (x) G: U[xi] = sum over the 9 taps of Tw[xi][tap] * w[tap] */
    void (*tw)(float *tw);
    /* input transform of tiles [t0, t1), channels [c0, c1), into V (np planes, packed B panels) */
    void (*in)(const struct wino_job *j, int64_t t0, int64_t t1, float *V, int64_t c0, int64_t c1);
    /* output transform of P (np planes of [Mg][t1 - t0]) for output channels [m0, m1), epilogue */
    void (*out)(const struct wino_job *j, int64_t t0, int64_t t1, const float *P, int64_t m0, int64_t m1);
    bool direct_in;   /* the input transform reads the input in place (wino_job.x), no padded copy */
} wino_kind;

typedef struct wino_job {
    const kiln_window *g;
    const wino_kind *k;
    int64_t Cg, Mg, tH, tW, Hp, Wp, R;   /* R: tiles per block */
    int nr;                               /* the GEMM's packed-B panel width (kiln__sgemm_nr()) */
    const float *xp;                      /* padded image [Cg][Hp][Wp], readable (zeros) up to
                                           * WINO_XP_SLACK floats past its end */
    const float *x;                       /* or (wino_kind.direct_in) the input [Cg][H][W] read in place, NULL:
                                           * padded row r, column u are its row r - ph, column u - pw */
    int64_t H, W, ph, pw;
    const float *U;                       /* [np][uq]: [Mg][Cg], or the GEMM's packed A (upk) */
    int64_t uq;                           /* floats per product's filters */
    bool upk;                             /* U[xi] packed (kiln_gemm.apack) */
    float *y;                             /* output of this image and group [Mg][Ho*Wo] */
    kiln_epi e;                           /* bias (row), residual, activation */
    int64_t row0;                         /* row of channel 0 in the [N*M, out] output */
    bool failed;
} wino_job;

/* Stride between the np planes of V / P: padded by a cache line so that the streams of the
 * transforms do not all map to the same L1 set (a plane is often a multiple of 4 KB). */
static inline int64_t wino_stride(int64_t n) { return (n + 15) / 16 * 16 + 16; }

/* Zero floats past the padded image: the AVX2 input transforms load whole 8-tile rows. */
#define WINO_XP_SLACK 64

/* Zeroes the lanes [Tb % 32, 32) of channels [c0, c1) (of Cg) of the last 32-tile panel of each of
 * the np planes of V (sv apart): the GEMM reads whole panels, the input transform writes only the
 * tiles' lanes. */
void kiln__wino_zero_tail(float *V, int64_t sv, int np, int64_t Cg, int64_t c0, int64_t c1, int64_t Tb);

/* The two variants (AVX-512 transforms; only used where the AVX-512 GEMM runs; AVX512DQ for the
 * output transforms' epilogue). */
extern const wino_kind kiln__wino_f23, kiln__wino_f43;
/* Their AVX2 + FMA twins (wino_avx2.c): V in panels of j->nr (16 with the AVX2 GEMM, 32 where the
 * AVX2 kernel runs on an AVX-512 host), the same filters U (same layouts, same values). */
extern const wino_kind kiln__wino_f23_avx2, kiln__wino_f43_avx2;

#endif
