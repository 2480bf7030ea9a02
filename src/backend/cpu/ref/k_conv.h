/* The parts of the reference Conv (k_conv.c) that ConvTranspose (k_conv_transpose.c) and ConvInteger
 * (k_conv_integer.c) share: the geometry checks, the column buffer's chunks and col2im, the direct loops in double
 * and the driver of the float dtypes; and those two kernels, registered from k_conv.c's table. Private to cpu/ref. */
#ifndef KILN_BACKEND_CPU_REF_K_CONV_H
#define KILN_BACKEND_CPU_REF_K_CONV_H

#include "../../kernel.h"
#include "../conv.h"
#include "window.h"

/* Geometry in the convolution's view (window.h). For Conv: "in" is the input image, "out" the
 * output. For ConvTranspose (the adjoint of a Conv): "in" is the ConvTranspose OUTPUT image (C =
 * its channels) and "out" is the ConvTranspose input (M = its channels), so im2col / col2im index
 * the same way for both. */
typedef kiln_window conv_geom;

/* im2col / col2im over a chunk of "outer rows" (all output dims but the last) */
typedef struct kiln_conv_col_job {
    const conv_geom *g;
    float *img;        /* image: channel 0 of the group (read by im2col, accumulated by col2im) */
    float *col;        /* [rows, ncols] */
    int64_t q0, q1;    /* outer rows of the chunk */
    int64_t ncols;     /* (q1 - q0) * out[last] */
    int64_t (*gather2)(float *dst, const float *src, int64_t n, int64_t avail);   /* kiln_conv_isa's */
} kiln_conv_col_job;

/* The direct loops in double (float64, ConvInteger): operands converted to double, b optional. */
typedef struct kiln_conv_double_job {
    const conv_geom *g;
    const double *x, *w, *b;
    double *y;
} kiln_conv_double_job;

/* A float32 implementation (Conv's, ConvTranspose's) for kiln__conv_run_float. */
typedef kiln_status (*kiln_conv_f32_fn)(const kiln_kctx *, const kiln_conv_isa *, const conv_geom *, const float *,
                                        const float *, const float *, float *);

/* Advances the odometer v over the extents lim[0..n) (last digit fastest), wrapping to zero. */
static inline void kiln__conv_odo_next(int64_t *v, const int64_t *lim, int n)
{
    for (int d = n - 1; d >= 0; d--) {
        if (++v[d] < lim[d])
            return;
        v[d] = 0;
    }
}

/* The input offset tap kk of output position o reads, or -1 in the padding. */
static inline int64_t kiln__conv_tap_index(const conv_geom *g, const int64_t *o, const int64_t *kk)
{
    int64_t idx = 0;
    for (int d = 0; d < g->nsp; d++) {
        int64_t i = o[d] * g->s[d] - g->pb[d] + kk[d] * g->d[d];
        if (i < 0 || i >= g->in[d])
            return -1;
        idx = idx * g->in[d] + i;
    }
    return idx;
}

/* Checks the kernel_shape attribute (optional) against the weight's spatial dims. */
kiln_status kiln__conv_check_kernel_shape(const kiln_kctx *ctx, const conv_geom *g);
/* Conv / ConvInteger geometry from X [N, C, spatial], W [M, C/group, kernel] and attributes. */
kiln_status kiln__conv_setup(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w, conv_geom *g);
/* Outer rows per chunk so that rows * row_floats stays near the column buffer's budget. */
int64_t kiln__conv_chunk_rows(int64_t row_floats, int64_t outer);
/* col2im of a kiln_conv_col_job, tasks over image channels [b, e) (no two tasks write the same plane). */
void kiln__conv_col2im_task(void *ctx, int64_t b, int64_t e);
/* Conv in double over a kiln_conv_double_job: one task per (image, output channel) plane. */
void kiln__conv_double_task(void *ctx, int64_t b0, int64_t e0);
/* The parallel_for grain of the double tasks for planes of per_plane * k_sz multiply-adds. */
int64_t kiln__conv_double_grain(const conv_geom *g, int64_t per_plane);
/* Checks a float convolution's X and W: both given, X of a float dtype the convolutions take (float32, float64,
 * float16, bfloat16), W of X's. */
kiln_status kiln__conv_float_operands(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w);
/* Checks the optional bias B: dtype dt, 1-D with M elements. */
kiln_status kiln__conv_check_bias(const kiln_kctx *ctx, const kiln_tensor *b, kiln_dtype dt, int64_t M);
/* Runs f32 (float32; float16 / bfloat16 converted to float32 and back) or dtask over `planes` planes (float64). */
kiln_status kiln__conv_run_float(kiln_kctx *ctx, const kiln_conv_isa *isa, const conv_geom *g, const kiln_tensor *x,
                                 const kiln_tensor *w, const kiln_tensor *b, kiln_tensor *y, kiln_conv_f32_fn f32,
                                 kiln__par_fn dtask, int64_t planes, int64_t per_plane);

/* ConvTranspose (k_conv_transpose.c). */
kiln_status kiln__k_conv_transpose(kiln_kctx *ctx);
/* ConvInteger (k_conv_integer.c). */
kiln_status kiln__k_conv_integer(kiln_kctx *ctx);

#endif
