/* Layer geometry the CPU's reference kernels compute and device modules reuse (through
 * kiln_devmod_host, backend/cuda/cuda_module.h), so both read a node's attributes and inputs by
 * the same rules:
 *   - Resize / Upsample: the output dims and, per axis, the table of input taps (index, weight) for
 *     each output index (cpu/ref/k_resize.c builds the same tables for its own loops);
 *   - ConvTranspose: the output dims, strides, dilations and begin pads (cpu/ref/k_conv_transpose.c). */
#ifndef KILN_BACKEND_LAYER_GEOM_H
#define KILN_BACKEND_LAYER_GEOM_H

#include "kernel.h"

/* One axis of a Resize: output index o reads input indices idx[o * ntaps + t] (clamped to [0, in))
 * with weights w[o * ntaps + t]; outside[o]: tf_crop_and_resize's source coordinate lies outside the
 * input (the output takes extrapolation). identity: out == in and every o reads o with weight 1. */
typedef struct kiln_resize_axis {
    int64_t in, out;
    int ntaps;
    int64_t *idx;
    float *w;
    uint8_t *outside;
    bool any_outside, identity;
} kiln_resize_axis;

typedef struct kiln_resize_plan {
    int ndim;
    bool nearest;            /* one tap of weight 1 on every axis: a bit-exact copy */
    float extrapolation;
    kiln_resize_axis ax[KILN_MAX_DIMS];
} kiln_resize_plan;

/* The plan of Resize (any opset) or Upsample node n on inputs in[0..n_in) (X's dims, and the host
 * values of roi / scales / sizes); a clean error for what the CPU kernel refuses. Free it with
 * kiln__resize_plan_free (also after a failure). */
kiln_status kiln__resize_plan(const kiln_node *n, int n_in, const kiln_tensor *const *in, kiln_resize_plan *p);
void kiln__resize_plan_free(kiln_resize_plan *p);

#define KILN_CONVT_MAX_SP (KILN_MAX_DIMS - 2)

/* ConvTranspose over X [N, Cin, in...] with W [Cin, Cout / group, k...]: Y [N, Cout, out...],
 * y[o] += x[i] * w[k] where o = i * s - pb + k * d on each spatial axis. */
typedef struct kiln_convt_geom {
    int nsp;
    int64_t group;
    int64_t ydims[KILN_MAX_DIMS];
    int64_t s[KILN_CONVT_MAX_SP], d[KILN_CONVT_MAX_SP], pb[KILN_CONVT_MAX_SP];
} kiln_convt_geom;

/* ConvTranspose node n's geometry for float X and W of these dims (ndim >= 3, both); the CPU kernel's
 * errors for attributes or dims it refuses. */
kiln_status kiln__convt_geom(const kiln_node *n, int ndim, const int64_t *xdims, const int64_t *wdims,
                             kiln_convt_geom *g);

#endif
