/* Window geometry shared by the convolution and pooling kernels (k_conv*.c, k_pool.c): the
 * spatial sizes, kernel, strides, dilations and pads of an N-D windowed op over [N, C, spatial]
 * tensors, read from the node's attributes and checked once, and the small index helpers both
 * use. Private to the CPU kernels of cpu/ref and their cpu/x86 variants (the short names below
 * are theirs). */
#ifndef KILN_BACKEND_CPU_REF_WINDOW_H
#define KILN_BACKEND_CPU_REF_WINDOW_H

#include "../../kernel.h"

#define SP_MAX (KILN_MAX_DIMS - 2)   /* spatial axes */
#define LIM ((int64_t)1 << 31)       /* bound on every size and attribute: products fit in int64 */

enum { AP_NOTSET, AP_VALID, AP_SAME_UPPER, AP_SAME_LOWER };

/* One windowed op's geometry. Conv: C input, M output channels in G groups; pools: M = G = 0.
 * ConvTranspose (k_conv_transpose.c) uses the adjoint view: "in" is its output image, "out" its input. */
typedef struct kiln_window {
    int nsp;
    int64_t N, C, M, G;
    int64_t in[SP_MAX], out[SP_MAX], k[SP_MAX], s[SP_MAX], d[SP_MAX], pb[SP_MAX], pe[SP_MAX];
    int64_t in_sz, out_sz, k_sz;   /* products of in, out, k */
} kiln_window;

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Range [*a, *b) of o in [0, n) with 0 <= o * s + off < lim (s > 0). */
static inline void valid_range(int64_t off, int64_t s, int64_t lim, int64_t n, int64_t *a, int64_t *b)
{
    int64_t lo = off >= 0 ? 0 : cdiv(-off, s);
    int64_t hi = lim - 1 - off < 0 ? 0 : (lim - 1 - off) / s + 1;
    if (hi > n)
        hi = n;
    if (lo > hi)
        lo = hi;
    *a = lo;
    *b = hi;
}

/* a * b, or -1 on overflow (a, b >= 0) */
static inline int64_t mul_chk(int64_t a, int64_t b)
{
    if (a < 0 || b < 0 || (b && a > INT64_MAX / b))
        return -1;
    return a * b;
}

/* Reads an INTS attribute of exactly n values in [lo, LIM], or fills def when absent
 * (*present, if not NULL, says which). */
kiln_status kiln__win_ints(const kiln_kctx *ctx, const char *name, int n, int64_t def, int64_t lo, int64_t *out,
                           bool *present);
/* The auto_pad attribute as AP_*; an unknown value is an error. */
kiln_status kiln__win_auto_pad(const kiln_kctx *ctx, int *ap);
/* Every dim of t in [0, LIM]; `what` names t in the error. */
kiln_status kiln__win_check_dims(const kiln_kctx *ctx, const kiln_tensor *t, const char *what);
/* in_sz, out_sz, k_sz from in, out, k; KILN_ERR_LIMIT past 2^48 elements. */
kiln_status kiln__win_sizes(const kiln_kctx *ctx, kiln_window *w);
/* Given nsp, in[] and k[]: reads strides, dilations, pads and auto_pad, and sets s, d, pb, pe,
 * out (floor, or ceil_mode's rounding up where no window starts in the end padding) and the
 * sizes. KILN_ERR_SHAPE when the dilated kernel is larger than the padded input. */
kiln_status kiln__win_setup(const kiln_kctx *ctx, kiln_window *w, bool ceil_mode);
/* A heap buffer of count elements (at least one) of elsize bytes, bounded by the tensor limit;
 * release with kiln__free. */
kiln_status kiln__win_scratch(const kiln_kctx *ctx, int64_t count, size_t elsize, void **p);

#endif
