/* com.microsoft QLinearAdd: C = Q_c(act(DQ_a(A) + DQ_b(B))), the integer form of
 * DequantizeLinear x2 -> Add [-> activation] -> QuantizeLinear that the fuse-qdq pass builds, so
 * that a residual Add between INT8 layers reads and writes 8-bit tensors.
 *
 * Inputs: A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale [, C_zero_point]; scales
 * float scalars (finite, > 0), zero points 8-bit scalars of their tensor's type (absent: 0); A and
 * B uint8/int8 (each its own), broadcast as Add; C has C_zero_point's type (absent: A's). The
 * activation is the node's kiln_act (qgemm.h, kiln__qact_from_node). Every element is computed
 * with exactly the float32 operations of the unfused graph's kernels (DequantizeLinear, Add, the
 * activation, QuantizeLinear), so the fused layer equals the graph it replaces bit for bit:
 *   v = act((float)(a - za) * sa + (float)(b - zb) * sb)       (two products, then one sum)
 *   c = clamp(rint(v / sc) + zc, lo, hi)                        (NaN -> 0, as QuantizeLinear)
 * The reference (ref/k_qadd.c) runs any case; the AVX-512 kernel (x86/qadd_avx512.c) and its AVX2
 * twin (x86/qadd_avx2.c) the common one (A and B of one shape, activation none / Relu / Clip) with
 * the same operations per lane. */
#ifndef KILN_BACKEND_CPU_QADD_H
#define KILN_BACKEND_CPU_QADD_H
#include "../kernel.h"
#include "epilogue.h"
#include <math.h>

typedef struct kiln_qadd {
    float sa, sb, sc;
    int32_t za, zb, zc, lo, hi;   /* zero points; [lo, hi] the range of C's type */
    kiln_act act;
    kiln_dtype cdt;
} kiln_qadd;

/* Validates the node's inputs (clean KILN_ERR_* on anything malformed) and fills p. */
kiln_status kiln__qadd_setup(const kiln_kctx *ctx, kiln_qadd *p);
/* The same from the 8 operands q (A, A_scale, A_zero_point, B, ..., C_zero_point; NULL where absent) and the
 * activation of attributes act_attr (_alpha, _beta): QLinearConvAdd's add (A: its convolution's output). */
kiln_status kiln__qadd_params(const kiln_kctx *ctx, const kiln_tensor *const q[8], const char *act_attr,
                              kiln_qadd *p);

/* One element (the definition above). */
static inline int32_t kiln__qadd1(const kiln_qadd *p, int32_t a, int32_t b)
{
    float fa = (float)(a - p->za) * p->sa;
    float fb = (float)(b - p->zb) * p->sb;
    float v = fa + fb;
    v = kiln__act_scalar(&p->act, v);
    float r = rintf(v / p->sc) + (float)p->zc;
    if (r != r)
        return 0;
    return r < (float)p->lo ? p->lo : r > (float)p->hi ? p->hi : (int32_t)r;
}

/* c[i] = kiln__qadd1(p, a[i], b[i]) for i < n over 8-bit arrays of one shape (c may be a: each element is read
 * before it is written), in the cases of kiln__qadd_vec_ok; threads from pool. */
typedef void (*kiln_qadd_run_fn)(const kiln_qadd *p, const uint8_t *a, bool a_s8, const uint8_t *b, bool b_s8,
                                 uint8_t *c, int64_t n, kiln_pool *pool, int nthreads);

/* kiln's QLinearConvAdd (passes/p_qres.c): QLinearConv's inputs 0-8 (the node's kiln_act its activation), then R,
 * R_scale, R_zero_point, C_scale, C_zero_point: C = QLinearAdd(Y, y_scale, y_zero_point, R, R_scale, R_zero_point,
 * C_scale, C_zero_point) of the convolution's output Y with the activation kiln_res_act -- the two layers'
 * operations exactly (Y's bytes, then kiln__qadd1 per element; the float sum of the add is commutative, so which
 * operand the model's Add had first does not matter). Y is computed by conv (a QLinearConv kernel) into the output's
 * memory, then the add runs over it in place: by add (a vector kernel) where kiln__qadd_vec_ok allows, else one
 * element at a time.
 * With kiln_res_once = 1 (one rounding: implicit INT8 blocks, passes/p_qres.c) inputs 6, 7 are C_scale, C_zero_point,
 * the activation is kiln_act (none, Relu or Clip) and there are 12 inputs; R is added to the convolution's sum before
 * its only rounding (the reference convolution, ref/k_quant.c, with qgemm.h kiln__qepi_qr):
 *   t = (float)(acc + bias) * mult[ch]                     (QLinearConv's requantization to C_scale: mult = xs ws / cs)
 *   c = clamp(rint(fmaf((float)(r - zr), rs / cs, t)), lo - zc, hi - zc) + zc    (rs / cs one float division) */
kiln_status kiln__qconv_add(kiln_kctx *ctx, kiln_kernel_fn conv, kiln_qadd_run_fn add);

/* The reference kernel (ref/k_qadd.c), also the fast kernel's fallback. */
kiln_status kiln__k_qlinearadd_ref(kiln_kctx *ctx);

/* The cases the vector kernels run (else the reference): A and B of one shape, activation none /
 * Relu / Clip with alpha <= beta (min(beta, max(alpha, v))), scales below 1e35 (products stay
 * finite, |a - za| <= 255, so no NaN reaches the clamp, where the reference's NaN -> 0 and the
 * vector max differ). */
static inline bool kiln__qadd_vec_ok(const kiln_qadd *p, const kiln_tensor *a, const kiln_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    bool act_ok = p->act.kind == KILN_ACT_NONE || p->act.kind == KILN_ACT_RELU ||
                  (p->act.kind == KILN_ACT_CLIP && p->act.alpha <= p->act.beta);
    return act_ok && p->sa < 1e35f && p->sb < 1e35f;
}
/* x86/qadd_avx2.c: the AVX2 kernels (x86/qadd_avx512.c registers them for AVX2 hosts). */
kiln_status kiln__k_qlinearadd_avx2(kiln_kctx *ctx);
kiln_status kiln__k_qconv_add_avx2(kiln_kctx *ctx);

#endif
