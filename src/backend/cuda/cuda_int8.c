/* INT8 layers on the GPU (docs/CUDA.md "INT8 layers"): what `--precision int8` engines and explicit Q/DQ models
 * hold after the fuse-qdq pass -- QuantizeLinear and DequantizeLinear with one scale per tensor, com.microsoft
 * QLinearAdd of two tensors of one shape, kiln's QLookup (KILN_CUDA_UNVERIFIED=1 until run on a GPU), QLinearConv (one
 * group, channels in multiples of 16 / 8, s8 filter with
 * zero points 0), kiln's QLinearConvAdd (its residual add in the epilogue) and QLinearMatMul with a constant s8 B (the
 * same kernels: a 1x1 convolution over A's rows)
 * -- each computing the CPU reference's bytes: the integer sums
 * are exact on the tensor cores (kernels_conv_i8.cu), the epilogues run the CPU's float32 operations with the CPU's
 * own parameters (the host services qepi_setup / qadd_params). Anything else stays a visible CPU fallback.
 * Written in session 26 while no GPU was lent and gated behind KILN_CUDA_UNVERIFIED=1 until test_gpu's INT8 cases
 * had passed on the H200 (session 27: all of them, and ResNet-50 / BERT-base int8 entirely on the GPU). */
#include "cuda_internal.h"
#include "../cpu/qadd.h"
#include "../cpu/qgemm.h"
#include "../qexact.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)
#define QC_SLOT 80   /* a QLinearConv's filter, bias and multipliers on the device */
#define QT_SLOT 81   /* its kernel configuration */
#define QS_SLOT 82   /* QLinearConvSum's second filter, bias and multipliers */
#define QD_SLOT 83   /* a QLinearConv's filter, bias and multipliers for the CUDA-core kernel */


/* input i absent, or one element */
static bool scalar_or_none(int n_in, const kiln_tensor *const *in, int i)
{
    return i >= n_in || !in[i] || cu_numel(in[i]) == 1;
}

/* a host tensor's element 0 (float32 or 8-bit), or def for an absent input; false when on the device */
static bool host_f(const kiln_tensor *t, float *v)
{
    if (!t || (t->flags & KILN_TENSOR_ON_DEVICE) || t->dtype != KILN_DT_FLOAT32 || cu_numel(t) < 1)
        return false;
    *v = *(const float *)t->data;
    return true;
}

static bool host_zp(const kiln_tensor *t, int64_t i, int *v)
{
    *v = 0;
    if (!t)
        return true;
    if ((t->flags & KILN_TENSOR_ON_DEVICE) || !cu_is_q8(t->dtype) || cu_numel(t) <= i)
        return false;
    *v = t->dtype == KILN_DT_UINT8 ? ((const uint8_t *)t->data)[i] : ((const int8_t *)t->data)[i];
    return true;
}

/* the node's activation attribute attr (kiln_act; QLinearConvAdd's add: kiln_res_act) is none, Relu or Clip with
 * min <= max (what the kernels' epilogues apply as min(max, max(min, v)): the CPU's Clip for such bounds) */
static bool linear_act_of(cu_be *b, const kiln_node *n, const char *attr)
{
    const char *a = b->host->attr_s(n, attr, NULL);
    if (a && !strcmp(a, "Clip")) {
        char an[64], bn[64];
        snprintf(an, sizeof an, "%s_alpha", attr);
        snprintf(bn, sizeof bn, "%s_beta", attr);
        return b->host->attr_f(n, an, -INFINITY) <= b->host->attr_f(n, bn, INFINITY);
    }
    return !a || !a[0] || !strcmp(a, "Relu");
}

static bool linear_act(cu_be *b, const kiln_node *n) { return linear_act_of(b, n, "kiln_act"); }

/* The node's kiln_act is none, a linear one as above, or one of the non-linear activations the requantizing epilogue
 * applies in float before the scale's inverse (the GPU's expf / erf approximations may move a value by one step) */
static bool known_act(cu_be *b, const kiln_node *n)
{
    static const char *const names[] = {"LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "SiLU", "Gelu", "GeluTanh",
                                        "Tanh", "HardSwishAffine"};
    const char *a = b->host->attr_s(n, "kiln_act", NULL);
    for (size_t i = 0; a && i < sizeof names / sizeof *names; i++)
        if (!strcmp(a, names[i]))
            return true;
    return linear_act(b, n);
}

/* ---- QuantizeLinear / DequantizeLinear, one scale and zero point per tensor */

static bool sup_quant(const kiln_bk_query *q)
{
    if (!q->in_dtype)
        return true;
    if (q->n_in < 2 || q->in_dtype[1] != KILN_DT_FLOAT32)
        return false;
    bool quant = q->node->op == KILN_OP_QuantizeLinear;
    kiln_dtype x = q->in_dtype[0], z = q->n_in > 2 ? q->in_dtype[2] : KILN_DT_UNDEFINED;
    if (quant)
        return x == KILN_DT_FLOAT32 && (z == KILN_DT_UNDEFINED || cu_is_q8(z));
    return cu_is_q8(x) && (z == KILN_DT_UNDEFINED || z == x);
}

static bool acc_quant(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    /* opset 21's output_dtype names the type where there is no zero point: not taken here */
    return n_in >= 2 && in[0] && in[1] && cu_numel(in[1]) == 1 && scalar_or_none(n_in, in, 2) &&
           b->host->attr_i(n, "output_dtype", 0) == 0 && b->host->attr_i(n, "block_size", 0) == 0;
}

static kiln_status k_quantize(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0), *zp = IN(2);
    float s;
    int z;
    if (!x || !host_f(IN(1), &s) || !host_zp(zp, 0, &z))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "scale / zero point: float32 / 8-bit scalars on the host");
    kiln_dtype odt = zp ? zp->dtype : KILN_DT_UINT8;
    KILN_TRY(cu_out(b, ctx, 0, odt, x->ndim, x->dims));
    kiln_tensor *y = ctx->out[0];
    if (cu_is_nhwc(x))
        y->flags |= KILN_TENSOR_DEV_NHWC;
    return cu_check(b, cuk_quantize(cu_fdt(cu_sdt(x)), x->data, y->data, cu_numel(x), s, z, odt == KILN_DT_INT8,
                                    b->stream), "QuantizeLinear");
}

/* The storage of INT8 layer n's float output (DequantizeLinear, kiln_out_float): KILN_CUDA_ACT's, else
 * KILN_CUDA_INT8_OUT's (an override, warned at the module's start), else the engine's (KILN_ATTR_HALF_OUT, set by
 * `kiln build --float-activations fp16|bf16`), else float32 */
static kiln_dtype int8_float_sdt(const cu_be *b, const kiln_node *n)
{
    if (b->force_act != KILN_DT_UNDEFINED)
        return b->force_act;
    if (b->int8_out != KILN_DT_FLOAT32)
        return b->int8_out;
    return cu_half_dt(b->host->attr_s(n, KILN_ATTR_HALF_OUT, NULL), KILN_DT_FLOAT32);
}

/* the kernels' output code of a float output in storage sdt */
static int qout_float(kiln_dtype sdt)
{
    return sdt == KILN_DT_FLOAT16 ? CUK_QF16 : sdt == KILN_DT_BFLOAT16 ? CUK_QBF16 : CUK_QF32;
}

static kiln_status k_dequantize(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    float s;
    int z;
    if (!x || !host_f(IN(1), &s) || !host_zp(IN(2), 0, &z))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "scale / zero point: float32 / 8-bit scalars on the host");
    kiln_dtype sdt = int8_float_sdt(b, ctx->node);
    KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, x->ndim, x->dims));
    kiln_tensor *y = ctx->out[0];
    if (cu_is_nhwc(x))
        y->flags |= KILN_TENSOR_DEV_NHWC;
    return cu_check(b, cuk_dequantize(cu_fdt(sdt), x->data, x->dtype == KILN_DT_INT8, y->data, cu_numel(x), s, z,
                                      b->stream), "DequantizeLinear");
}

/* ---- QLinearAdd: A and B of one shape */

static bool sup_qadd(const kiln_bk_query *q)
{
    if (!q->in_dtype)
        return true;
    return q->n_in >= 7 && cu_is_q8(q->in_dtype[0]) && cu_is_q8(q->in_dtype[3]);
}

static bool acc_qadd(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    if (n_in < 7 || !in[0] || !in[3] || in[0]->ndim != in[3]->ndim || !linear_act(b, n))
        return false;
    for (int d = 0; d < in[0]->ndim; d++)
        if (in[0]->dims[d] != in[3]->dims[d])
            return false;
    for (int i = 1; i < 8; i++)
        if (i != 3 && !scalar_or_none(n_in, in, i))
            return false;
    return true;
}

/* The add's arguments for the kernels from the CPU's parameters */
static cuk_qadd_args qadd_args(const kiln_qadd *p)
{
    /* isc: the quick path's 1 / sc (backend/qexact.h kq_qadd), NaN where every element must divide */
    cuk_qadd_args q = {.sa = p->sa, .sb = p->sb, .sc = p->sc, .isc = kq_inv(p->sc), .za = p->za,
                       .zb = p->zb, .zc = p->zc, .lo = p->lo, .hi = p->hi, .act = p->act.kind != KILN_ACT_NONE,
                       .flo = -INFINITY, .fhi = INFINITY};
    if (p->act.kind == KILN_ACT_RELU) {
        q.flo = 0.f;
    } else if (p->act.kind == KILN_ACT_CLIP) {
        q.flo = p->act.alpha;
        q.fhi = p->act.beta;
    }
    return q;
}

static kiln_status k_qadd(cu_be *b, kiln_kctx *ctx)
{
    kiln_qadd p;
    const kiln_tensor *ops[8] = {IN(0), IN(1), IN(2), IN(3), IN(4), IN(5), IN(6), IN(7)};
    KILN_TRY(b->host->qadd_params(ctx, ops, "kiln_act", &p));
    const kiln_tensor *a = IN(0), *bb = IN(3);
    kiln_tensor lay;
    const kiln_tensor *bl = bb;
    /* one layout for both: B as A holds it */
    KILN_TRY(cu_relayout(b, bb, cu_is_nhwc(a), &lay, &bl));
    kiln_status st = cu_out(b, ctx, 0, p.cdt, a->ndim, a->dims);
    if (st == KILN_OK) {
        kiln_tensor *y = ctx->out[0];
        if (cu_is_nhwc(a))
            y->flags |= KILN_TENSOR_DEV_NHWC;
        cuk_qadd_args q = qadd_args(&p);
        st = cu_check(b, cuk_qadd(a->data, a->dtype == KILN_DT_INT8, bl->data, bl->dtype == KILN_DT_INT8, y->data,
                                  cu_numel(a), &q, b->stream), "QLinearAdd");
    }
    cu_tmp_free(b, &lay);
    return st;
}

/* ---- kiln's QLookup (passes/p_qlookup.c): Y[i] = T[X[i]'s byte], T 256 values of Y's type, on the host */

static bool sup_qlookup(const kiln_bk_query *q)
{
    if (!q->in_dtype)
        return true;
    return q->n_in >= 2 && cu_is_q8(q->in_dtype[0]) && cu_is_q8(q->in_dtype[1]);
}

static bool acc_qlookup(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)n;
    (void)b;
    return n_in >= 2 && in[0] && in[1] && cu_is_q8(in[0]->dtype) && cu_is_q8(in[1]->dtype) && cu_numel(in[1]) == 256 &&
           !(in[1]->flags & KILN_TENSOR_ON_DEVICE) && in[1]->data;
}

static kiln_status k_qlookup(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0), *t = IN(1);
    if (!acc_qlookup(b, ctx->node, ctx->n_in, ctx->in))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "QLookup: X 8-bit, T 256 8-bit values on the host");
    KILN_TRY(cu_out(b, ctx, 0, t->dtype, x->ndim, x->dims));
    kiln_tensor *y = ctx->out[0];
    if (cu_is_nhwc(x))
        y->flags |= KILN_TENSOR_DEV_NHWC;   /* elementwise: any layout */
    return cu_check(b, cuk_qlookup(x->data, y->data, cu_numel(x), t->data, b->stream), "QLookup");
}

/* ---- QLinearConv: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B] */

static bool sup_qconv(const kiln_bk_query *q)
{
    if (!q->in_dtype)
        return true;
    return q->n_in >= 8 && cu_is_q8(q->in_dtype[0]) && q->in_dtype[3] == KILN_DT_INT8 &&
           (q->n_in < 9 || q->in_dtype[8] == KILN_DT_UNDEFINED || q->in_dtype[8] == KILN_DT_INT32);
}

/* Whether the output is float32 (kiln_out_float) */
static bool qconv_float_out(cu_be *b, const kiln_node *n) { return b->host->attr_i(n, "kiln_out_float", 0) == 1; }

/* QLinearConv / QLinearMatMul's quantization operands (x_scale, x_zp, w_scale, w_zp, y_scale, y_zp, bias at inputs 1,
 * 2, 4-8) for nch output channels: scalars, w_scale per tensor or channel, an int32 bias of nch, a quantized output's
 * y_scale and 8-bit y_zp; the filter's zero points 0 (kiln's symmetric weights) and the input's in *zx -- read from
 * the host constants (the kernels pad with zeros: a caller takes a nonzero *zx only where nothing is padded) */
static bool qparams_ok(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in, int64_t nch, int *zx)
{
    if (!scalar_or_none(n_in, in, 1) || !scalar_or_none(n_in, in, 2) || !scalar_or_none(n_in, in, 6) ||
        !scalar_or_none(n_in, in, 7) || (cu_numel(in[4]) != 1 && cu_numel(in[4]) != nch))
        return false;
    if (n_in > 8 && in[8] && cu_numel(in[8]) != nch)
        return false;
    if (!qconv_float_out(b, n) && (!in[6] || !in[7] || !cu_is_q8(in[7]->dtype)))
        return false;
    int64_t nwz = n_in > 5 && in[5] ? cu_numel(in[5]) : 0;
    for (int64_t i = 0; i < nwz; i++) {
        int z;
        if (!host_zp(in[5], i, &z) || z != 0)
            return false;
    }
    return host_zp(n_in > 2 ? in[2] : NULL, 0, zx);
}

/* QLinearConvAdd's float tail (kiln_res_float): R u8 / s8 with a host float32 scale and an optional zero point of
 * its type, activation none or Relu; Y's float32 scale on the host (its zero point: qparams_ok) */
static bool res_float_ok(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    const char *a = b->host->attr_s(n, "kiln_res_act", NULL);
    float s;
    int z;
    return n_in >= 11 && in[9] && cu_is_q8(in[9]->dtype) && host_f(in[10], &s) && cu_numel(in[10]) == 1 &&
           (n_in < 12 || !in[11] || (in[11]->dtype == in[9]->dtype && cu_numel(in[11]) == 1 && host_zp(in[11], 0, &z))) &&
           host_f(in[6], &s) && (!a || !a[0] || !strcmp(a, "Relu"));
}

static bool res_float(cu_be *b, const kiln_node *n)
{
    return n->op == KILN_OP_QLinearConvAdd && b->host->attr_i(n, "kiln_res_float", 0) == 1;
}

/* QLinearConvAdd with one rounding (kiln_res_once): 12 inputs, 6 / 7 the output's scale and zero point (qparams_ok),
 * R u8 / s8 with a host float32 scale and an optional zero point of its type, kiln_act linear, no float form */
static bool res_once(cu_be *b, const kiln_node *n)
{
    return n->op == KILN_OP_QLinearConvAdd && b->host->attr_i(n, "kiln_res_once", 0) == 1;
}

static bool res_once_ok(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    float s;
    int z;
    return n_in == 12 && !res_float(b, n) && in[9] && cu_is_q8(in[9]->dtype) && host_f(in[10], &s) &&
           cu_numel(in[10]) == 1 && (!in[11] || (in[11]->dtype == in[9]->dtype && cu_numel(in[11]) == 1 &&
                                                 host_zp(in[11], 0, &z))) &&
           host_f(in[6], &s) && linear_act(b, n) && !qconv_float_out(b, n);
}

/* QLinearConvSum's strides of its second convolution (kiln_sum_strides; default 1, 1): false where malformed */
static bool sum_strides(cu_be *b, const kiln_node *n, int *sh, int *sw)
{
    const int64_t *v;
    int c = b->host->attr_ints(n, "kiln_sum_strides", &v);
    *sh = *sw = 1;
    if (c < 0)
        return true;
    if (c != 2 || v[0] < 1 || v[1] < 1 || v[0] > 65535 || v[1] > 65535)
        return false;
    *sh = (int)v[0], *sw = (int)v[1];
    return true;
}

/* QLinearConvSum's second convolution (inputs 9-15: x2, x2_scale, x2_zero_point, w2, w2_scale, w2_zero_point, B2?) for
 * an output of dims yd: x2 of x's type with C2 a multiple of 16 channels, a 1x1 s8 filter of yd[1] rows, scalars and
 * zero weight zero points on the host, the strided pixels giving yd's image; sm_90 (its kernels are wgmma ones) */
static bool sum_ok(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in, const int64_t *yd)
{
    const kiln_tensor *x2 = in[9], *w2 = in[12];
    int sh, sw, z;
    float s;
    if (n_in < 15 || !x2 || !w2 || x2->dtype != in[0]->dtype || x2->ndim != 4 || w2->ndim != 4 ||
        w2->dtype != KILN_DT_INT8 || !sum_strides(b, n, &sh, &sw) || !cuk_conv_i8_sum_ok())
        return false;
    if (w2->dims[0] != yd[1] || w2->dims[1] != x2->dims[1] || w2->dims[2] != 1 || w2->dims[3] != 1 ||
        x2->dims[1] <= 0 || x2->dims[1] % 16 || x2->dims[0] != yd[0] || x2->dims[2] < 1 || x2->dims[3] < 1 ||
        (x2->dims[2] - 1) / sh + 1 != yd[2] || (x2->dims[3] - 1) / sw + 1 != yd[3] || x2->dims[1] > 0x7fffffff)
        return false;
    if (!host_f(in[10], &s) || cu_numel(in[10]) != 1 || !scalar_or_none(n_in, in, 11) ||
        (in[11] && (in[11]->dtype != x2->dtype || !host_zp(in[11], 0, &z))) ||
        !in[13] || in[13]->dtype != KILN_DT_FLOAT32 || (cu_numel(in[13]) != 1 && cu_numel(in[13]) != yd[1]) ||
        (n_in > 15 && in[15] && (in[15]->dtype != KILN_DT_INT32 || cu_numel(in[15]) != yd[1])))
        return false;
    int64_t nwz = in[14] ? cu_numel(in[14]) : 0;
    for (int64_t i = 0; i < nwz; i++)
        if (!host_zp(in[14], i, &z) || z != 0)
            return false;
    return true;
}

/* A convolution's quantization operands for its K output channels (qparams_ok: the input's zero point in *zx) and its
 * geometry (*g, from x = in[0] and w = in[3]): false where either is not what the kernels take */
static bool qconv_operands(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in, int64_t K, int *zx,
                           cu_geom *g)
{
    kiln_kctx kc = {.node = n, .n_in = n_in, .in = in};
    return qparams_ok(b, n, n_in, in, K, zx) && cu_conv_geom(b, &kc, in[0], in[3], g) == KILN_OK;
}

/* QLinearConv, or kiln's QLinearConvAdd (passes/p_qres.c: inputs 9-13 the residual add's R, R_scale, R_zero_point,
 * C_scale, C_zero_point, its activation kiln_res_act; with kiln_res_float inputs 9-11; with kiln_res_once 9-11, 6 / 7
 * C_scale, C_zero_point), or QLinearConvSum (6 / 7 C's, 9-15 the second convolution: sum_ok), on the tensor cores */
static bool acc_qconv_tc(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    bool fused = n->op == KILN_OP_QLinearConvAdd, rf = res_float(b, n), once = res_once(b, n);
    bool sum = n->op == KILN_OP_QLinearConvSum;
    if (sum && (n_in < 15 || !linear_act(b, n) || qconv_float_out(b, n)))
        return false;
    if (n_in < (rf ? 11 : once ? 12 : fused ? 13 : 8) || !in[0] || !in[3] || in[0]->ndim != 4 || in[3]->ndim != 4 ||
        !known_act(b, n) || b->host->attr_i(n, "group", 1) != 1)
        return false;
    if (rf && (qconv_float_out(b, n) || !res_float_ok(b, n, n_in, in)))
        return false;
    if (once && !res_once_ok(b, n, n_in, in))
        return false;
    if (fused && !rf && !once && (!in[9] || !cu_is_q8(in[9]->dtype) || qconv_float_out(b, n) || !linear_act_of(b, n, "kiln_res_act") ||
                  !scalar_or_none(n_in, in, 10) || !scalar_or_none(n_in, in, 11) || !scalar_or_none(n_in, in, 12) ||
                  !scalar_or_none(n_in, in, 13)))
        return false;
    const kiln_tensor *x = in[0], *w = in[3];
    int64_t K = w->dims[0], C = w->dims[1];
    /* no input channel or filter tap (an empty reduction) stays on the CPU: the kernels start their sums with the
     * first step's MMA (kernels_conv_i8.cu) */
    /* (filters of at most 32 x 32 taps: the kernels' tap masks, kernels_conv_i8.cu i8_row) */
    if (x->dims[1] != C || C <= 0 || C % 16 || K % 8 || w->dims[2] <= 0 || w->dims[3] <= 0 || w->dims[2] > 32 ||
        w->dims[3] > 32 ||
        x->dims[0] * x->dims[2] * x->dims[3] > ((int64_t)1 << 37))
        return false;
    int zx;
    cu_geom g;
    if (!qconv_operands(b, n, n_in, in, K, &zx, &g))
        return false;
    bool padded = g.pb[0] || g.pb[1] || g.pe[0] || g.pe[1];
    const int64_t yd[4] = {x->dims[0], K, g.out[0], g.out[1]};
    if (fused && (in[9]->ndim != 4 || memcmp(in[9]->dims, yd, sizeof yd)))
        return false;   /* the residual has the output's shape */
    if (sum && !sum_ok(b, n, n_in, in, yd))
        return false;
    return zx == 0 || !padded;
}

/* A plain QLinearConv the tensor-core kernels do not take (grouped or depthwise, channels not multiples of 16 / 8, a
 * padded input with a zero point), 2-D, on the CUDA cores (kernels_conv_i8_direct.cu) */
static bool acc_qconv_direct(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in, cuk_conv_desc *dp,
                             int *groups, int *zxp)
{
    if (n->op != KILN_OP_QLinearConv || n_in < 8 || !in[0] || !in[3] || in[0]->ndim != 4 ||
        in[3]->ndim != 4 || !known_act(b, n))
        return false;
    const kiln_tensor *x = in[0], *w = in[3];
    int64_t G = b->host->attr_i(n, "group", 1), K = w->dims[0];
    if (G < 1 || G > 0x7fffffff || x->dims[1] != w->dims[1] * G || K % G || K <= 0 || K > 0x7fffffff ||
        w->dims[2] > 0xffff || w->dims[3] > 0xffff)
        return false;
    int zx;
    cu_geom g;
    if (!qconv_operands(b, n, n_in, in, K, &zx, &g))
        return false;
    for (int i = 0; i < 4; i++)   /* (x's channels among them) */
        if (x->dims[i] > 0x7fffffff || (i < 2 && (g.out[i] > 0x7fffffff || g.s[i] > 0xffff || g.d[i] > 0xffff ||
                                                  g.pb[i] > 0xffff)))
            return false;
    cuk_conv_desc d = {.n = (int)x->dims[0], .c = (int)x->dims[1], .h = (int)x->dims[2], .w = (int)x->dims[3],
                       .k = (int)K, .r = (int)w->dims[2], .s = (int)w->dims[3], .p = (int)g.out[0],
                       .q = (int)g.out[1], .sh = (int)g.s[0], .sw = (int)g.s[1], .ph = (int)g.pb[0],
                       .pw = (int)g.pb[1], .dh = (int)g.d[0], .dw = (int)g.d[1], .y_nhwc = 1};
    if (!cuk_qconv_direct_ok(&d, (int)G))
        return false;
    if (dp)
        *dp = d, *groups = (int)G, *zxp = zx;
    return true;
}

static bool acc_qconv(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    return acc_qconv_tc(b, n, n_in, in) || acc_qconv_direct(b, n, n_in, in, NULL, NULL, NULL);
}

/* The layer's device operands: the filter KRSC, the bias (with the input's zero point folded in) and the
 * per-channel multipliers, made once from the host inputs (src: the filter they were made from) */
typedef struct qconv_w {
    void *dev;          /* [K][R*S*C] s8, then int32 bias [K], then float m [K] (each 16-byte aligned) */
    int8_t *w;
    int32_t *bias;
    float *m;
    const void *src;
    unsigned long gen;
    cuk_qepi e;
    uint64_t *own;
    size_t bytes;
} qconv_w;

static void qconv_w_free(void *p)
{
    qconv_w *q = p;
    if (q->dev && q->own)
        *q->own -= q->bytes;
    cudaFree(q->dev);
    free(q);
}

static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Fills host buffer h (the layout of qconv_w.dev) and q->e's scalars from the host inputs */
/* The kernels' code of a CPU activation kind */
static int act_code(kiln_act_kind k)
{
    static const int map[] = {
        [KILN_ACT_NONE] = CUK_IDENTITY,       [KILN_ACT_RELU] = CUK_RELU,         [KILN_ACT_CLIP] = CUK_CLIP,
        [KILN_ACT_LEAKYRELU] = CUK_LEAKYRELU, [KILN_ACT_SIGMOID] = CUK_SIGMOID,   [KILN_ACT_HARDSIGMOID] = CUK_HARDSIGMOID,
        [KILN_ACT_HARDSWISH] = CUK_HARDSWISH, [KILN_ACT_SILU] = CUK_SILU,         [KILN_ACT_GELU] = CUK_GELU,
        [KILN_ACT_GELU_TANH] = CUK_GELU_TANH, [KILN_ACT_TANH] = CUK_TANH, [KILN_ACT_HARDSWISH_AFFINE] = CUK_HARDSWISH_AFFINE,
    };
    return (int)k >= 0 && (size_t)k < sizeof map / sizeof *map ? map[k] : CUK_IDENTITY;
}

/* Where a convolution's operands are among the node's inputs: x_scale, x_zero_point, w, w_scale, bias (y_scale and
 * y_zero_point are always 6 and 7): QLinearConv's, or QLinearConvSum's second convolution's */
typedef struct qconv_at {
    int xs, xz, w, ws, bias;
} qconv_at;
static const qconv_at QC_MAIN = {1, 2, 3, 4, 8}, QC_SUM = {10, 11, 12, 13, 15};

/* The device filter's layout: KRSC for the tensor-core kernels, [K][C] from QLinearMatMul's B [C][K], or [R*S][C][K]
 * for the CUDA-core kernel (kernels_conv_i8_direct.cu; C a group's input channels) */
enum { QL_KRSC, QL_MM, QL_DIRECT };

/* Fills host buffer h (the layout of qconv_w.dev) and q->e's scalars from the host inputs: the filter (input at.w)
 * [K][C][R][S] (or QLinearMatMul's B [C][K]) in layout lay */
static kiln_status qconv_host(cu_be *b, kiln_kctx *ctx, qconv_w *q, uint8_t *h, int64_t K, int64_t C, int64_t RS,
                              kiln_dtype odt, int lay, const qconv_at *at)
{
    const kiln_tensor *w = IN(at->w), *bias = IN(at->bias);
    float as;
    int zx;
    if (!host_f(IN(at->xs), &as) || !host_zp(IN(at->xz), 0, &zx))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "x_scale / x_zero_point: scalars on the host");
    kiln_qepi e;
    float *buf = NULL;
    KILN_TRY(b->host->qepi_setup(ctx, &e, odt, true, K, as, IN(at->ws), 1.0f, IN(6), IN(7), &buf));
    bool lin = e.act.kind == KILN_ACT_NONE || e.act.kind == KILN_ACT_RELU || e.act.kind == KILN_ACT_CLIP;
    const int8_t *ws = w->data;
    int8_t *wd = (int8_t *)h;
    int32_t *bd = (int32_t *)(h + al16((size_t)(K * C * RS)));
    float *md = (float *)((uint8_t *)bd + al16((size_t)K * 4));
    for (int64_t k = 0; k < K; k++) {
        int64_t sum = 0;
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < RS; p++) {   /* KCRS -> KRSC or RSCK; B [C][K] -> [K][C] */
                int8_t v = lay == QL_MM ? ws[c * K + k] : ws[(k * C + c) * RS + p];
                wd[lay == QL_DIRECT ? (p * C + c) * K + k : (k * RS + p) * C + c] = v;
                sum += v;
            }
        uint32_t bv = bias ? (uint32_t)((const int32_t *)bias->data)[k] : 0u;
        bd[k] = (int32_t)(bv - (uint32_t)((int64_t)zx * sum));   /* sum (x - zx) w = sum x w - zx sum w */
        md[k] = odt == KILN_DT_FLOAT32 || !e.lin ? e.scale[k] : e.mult[k];
    }
    q->e.out = odt == KILN_DT_UINT8 ? CUK_QU8 : odt == KILN_DT_INT8 ? CUK_QS8 : CUK_QF32;
    q->e.zp = e.zp;
    q->e.act = lin ? CUK_IDENTITY : act_code(e.act.kind);
    q->e.act_a = e.act.alpha;
    q->e.act_b = e.act.beta;
    q->e.inv_ys = e.inv_ys;
    if (odt == KILN_DT_FLOAT32) {   /* Relu / Clip as bounds; others in act */
        q->e.lo = e.act.kind == KILN_ACT_RELU ? 0.f : e.act.kind == KILN_ACT_CLIP ? e.act.alpha : -INFINITY;
        q->e.hi = e.act.kind == KILN_ACT_CLIP ? e.act.beta : INFINITY;
    } else {   /* the type's bounds (narrowed by Relu / Clip where e.lin) minus the zero point */
        q->e.lo = (float)(e.lo - e.zp);
        q->e.hi = (float)(e.hi - e.zp);
    }
    b->host->free_blob(buf);
    return KILN_OK;
}

static kiln_status qconv_weights(cu_be *b, kiln_kctx *ctx, int64_t K, int64_t C, int64_t RS, kiln_dtype odt,
                                 int lay, const qconv_at *at, qconv_w **out)
{
    const kiln_tensor *w = IN(at->w), *bias = IN(at->bias);
    int64_t key[1] = {at == &QC_SUM ? QS_SLOT : lay == QL_DIRECT ? QD_SLOT : QC_SLOT};
    qconv_w *q = cu_state_get(b, ctx->node, key, 1);
    unsigned long gen = cu_weights_gen();
    if (q && q->dev && q->src == w->data && q->gen == gen) {
        *out = q;
        return KILN_OK;
    }
    if (b->capturing)
        return cu_not_in_capture(b, "copying an INT8 filter");
    if (!w->data || (w->flags & KILN_TENSOR_ON_DEVICE) || (bias && (bias->flags & KILN_TENSOR_ON_DEVICE)))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "the INT8 filter and bias must be on the host");
    if (!q) {
        if (!(q = calloc(1, sizeof *q)))
            return cu_err(b, KILN_ERR_NOMEM, "out of memory");
        q->own = &b->own_weight_bytes;
        kiln_status pst = cu_state_put(b, ctx->node, key, 1, q, qconv_w_free);
        if (pst != KILN_OK) {
            free(q);
            return pst;
        }
    }
    size_t bytes = al16((size_t)(K * C * RS)) + al16((size_t)K * 4) * 2;
    uint8_t *h = calloc(1, bytes);
    if (!h)
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = qconv_host(b, ctx, q, h, K, C, RS, odt, lay, at);
    if (st == KILN_OK && q->dev) {
        *q->own -= q->bytes;
        cudaFree(q->dev);
        q->dev = NULL;
    }
    if (st == KILN_OK)
        st = cu_check(b, cudaMalloc(&q->dev, bytes), "allocating an INT8 filter");
    if (st == KILN_OK) {
        q->bytes = bytes;
        *q->own += bytes;
        st = cu_check(b, cudaMemcpyAsync(q->dev, h, bytes, cudaMemcpyHostToDevice, b->stream), "copying an INT8 filter");
    }
    if (st == KILN_OK)
        st = cu_check(b, cudaStreamSynchronize(b->stream), "copying an INT8 filter");
    free(h);
    if (st != KILN_OK)
        return st;
    q->w = q->dev;
    q->bias = (int32_t *)((uint8_t *)q->dev + al16((size_t)(K * C * RS)));
    q->m = (float *)((uint8_t *)q->bias + al16((size_t)K * 4));
    q->e.bias = q->bias;
    q->e.m = q->m;
    q->src = w->data;
    q->gen = gen;
    *out = q;
    return KILN_OK;
}

/* Which configurations an INT8 convolution may run (a mask of 1 << cfg): KILN_CUDA_INT8_CONV=mma (0), =wg1 .. =wg13;
 * unset or =all: every one, the fastest timed at the layer's first run. Read per call: an A/B switch. */
static unsigned i8_conv_mode(void)
{
    const char *s = getenv("KILN_CUDA_INT8_CONV");
    int n = cuk_conv_i8_configs();
    if (!s || !s[0] || !strcmp(s, "all"))
        return (1u << n) - 1;
    if (!strcmp(s, "mma"))
        return 1u;
    if (!strncmp(s, "wg", 2) && s[2] >= '1' && s[2] <= '9') {
        char *end;
        long c = strtol(s + 2, &end, 10);
        if (!*end && c >= 1 && c < n)
            return 1u << c;
    }
    return 1u;
}

typedef struct qconv_call {
    cu_be *b;
    bool x_s8;
    const void *x;
    const qconv_w *q;
    cuk_qepi e;   /* q's, with this run's residual (QLinearConvAdd) */
    void *y;
    cuk_conv_desc d;
    int cfg;
} qconv_call;

static cudaError_t qconv_launch(const qconv_call *c, int cfg)
{
    /* a weight-stationary, patch or TMA choice (stored, or forced) for operands it does not take, e.g. a residual or
     * input placed at another alignment than when it was timed (TMA: 16 bytes), or 8 / 13 for a layer their lean
     * kernels do not take (rk_lean_fits: a two-rounding residual add, a non-linear activation): configuration 7; so for
     * QLinearConvSum forced to one without wgmma */
    if ((cfg >= 8 && cfg <= 9 && !cuk_gemm_i8_fits(cfg, c->x_s8, &c->d, &c->e)) ||
        (cfg >= 10 && cfg <= 11 && !cuk_conv3_i8_fits(&c->d, &c->e)) ||
        (cfg >= 12 && (!cuk_gemm_i8_tma_fits(cfg, c->x_s8, &c->d, &c->e) || ((uintptr_t)c->x & 15) ||
                       ((uintptr_t)c->q->w & 15))) ||
        (c->e.x2 && (cfg == 0 || (cfg >= 8 && cfg <= 11))))
        cfg = 7;
    return cuk_conv_i8(cfg, c->x_s8, c->x, c->q->w, &c->e, c->y, &c->d, c->b->stream);
}

static bool qconv_timed(void *arg)
{
    const qconv_call *c = arg;
    return qconv_launch(c, c->cfg) == cudaSuccess;
}

typedef struct qconv_tactic {
    int cfg;
} qconv_tactic;

/* a 1x1 stride-1 unpadded convolution: a GEMM over the pixels */
static bool g_is_gemm(const cuk_conv_desc *d)
{
    return d->r == 1 && d->s == 1 && d->sh == 1 && d->sw == 1 && d->ph == 0 && d->pw == 0;
}

static kiln_status qconv_choose(cu_be *b, const kiln_kctx *ctx, qconv_call *c, int *cfg)
{
    unsigned mask = i8_conv_mode();
    if (c->e.x2 && !(mask &= ~1u & ~(3u << 8)))   /* QLinearConvSum: the wgmma tiles (qconv_launch) */
        mask = 1u << 7;
    /* the weight-stationary configurations among the timed ones only where they hold the layer (a forced one that
     * does not runs as configuration 7: qconv_launch); KILN_CUDA_INT8_WS=0 leaves them out */
    if (mask & (mask - 1)) {
        const char *ws = getenv("KILN_CUDA_INT8_WS");
        for (int i = 8; i <= 9; i++)
            if ((ws && !strcmp(ws, "0")) || !cuk_gemm_i8_fits(i, c->x_s8, &c->d, &c->e))
                mask &= ~(1u << i);
        if (!cuk_conv3_i8_fits(&c->d, &c->e))   /* the 3x3 patch kernels where they take the layer */
            mask &= ~(3u << 10);
        /* the TMA kernels where they take the layer (the 1x1 layers, the others through the im2col walk,
         * QLinearConvSum); A/B switches: KILN_CUDA_INT8_TMA=0 leaves them out, =gemm keeps them to the plain 1x1
         * layers (session 45's) */
        const char *tma = getenv("KILN_CUDA_INT8_TMA");
        const bool gemm = g_is_gemm(&c->d) && !c->e.x2;
        if ((tma && !strcmp(tma, "0")) || (tma && !strcmp(tma, "gemm") && !gemm))
            mask &= ~(3u << 12);
        for (int i = 12; i <= 13; i++)
            if (!cuk_gemm_i8_tma_fits(i, c->x_s8, &c->d, &c->e))
                mask &= ~(1u << i);
    }
    *cfg = __builtin_ctz(mask);
    if (!(mask & (mask - 1)))
        return KILN_OK;
    const cuk_conv_desc *g = &c->d;
    int64_t key[8] = {QT_SLOT, g->n, g->c, g->h, g->w, g->k, g->p, g->q};
    qconv_tactic *t = cu_state_get(b, ctx->node, key, 8);
    if (t) {
        *cfg = t->cfg;
        return KILN_OK;
    }
    if (b->capturing)
        return KILN_OK;
    /* (the residual's form in the key: one rounding's epilogue is lighter than the two roundings', so their layers
     * may choose differently; QLinearConvSum's second convolution: its geometry) */
    const int64_t tk[24] = {mask, g->n, g->c, g->h, g->w, g->k, g->r, g->s, g->p, g->q, g->sh, g->sw, g->ph, g->pw,
                            g->dh, g->dw, c->e.out, c->x_s8,
                            c->e.x2 ? 4 : c->e.res ? 1 + c->e.res_once + 2 * c->e.res_float : 0,
                            c->e.x2 ? c->e.c2 : 0, c->e.x2 ? c->e.h2 : 0, c->e.x2 ? c->e.w2 : 0,
                            c->e.x2 ? c->e.sh2 : 0, c->e.x2 ? c->e.sw2 : 0};
    int cached = cu_tc_get(b, 'i', tk, sizeof tk);
    if (!(t = calloc(1, sizeof *t)))
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    t->cfg = *cfg;
    if (cached >= 0 && cached < 32 && (mask & (1u << cached))) {
        t->cfg = cached;
    } else {
        float best = -1;
        for (int i = 0; i < 32; i++) {
            if (!(mask & (1u << i)))
                continue;
            c->cfg = i;
            float ms = cu_time_median3(b, qconv_timed, c);
            if (b->conv_verbose)
                fprintf(stderr, "kiln cuda: INT8 conv %s: configuration %d %.3f ms\n", ctx->node->name, i, ms);
            if (ms >= 0 && (best < 0 || ms < best)) {
                best = ms;
                t->cfg = i;
            }
        }
        cu_tc_put(b, 'i', tk, sizeof tk, t->cfg);
    }
    *cfg = t->cfg;
    return cu_state_put(b, ctx->node, key, 8, t, free);
}

/* QLinearConv on the CUDA cores (acc_qconv_direct): the filter as [R*S][C/G][K], NHWC input and output */
static kiln_status k_qconv_direct(cu_be *b, kiln_kctx *ctx)
{
    cuk_conv_desc d;
    int groups, zx;
    if (!acc_qconv_direct(b, ctx->node, ctx->n_in, ctx->in, &d, &groups, &zx))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "operands the INT8 convolution does not take");
    const kiln_tensor *x = IN(0);
    kiln_dtype odt = qconv_float_out(b, ctx->node) ? KILN_DT_FLOAT32 : IN(7)->dtype;
    qconv_w *q = NULL;
    KILN_TRY(qconv_weights(b, ctx, d.k, d.c / groups, (int64_t)d.r * d.s, odt, QL_DIRECT, &QC_MAIN, &q));
    cuk_qepi e = q->e;
    int64_t yd[4] = {d.n, d.k, d.p, d.q};
    kiln_dtype sdt = odt == KILN_DT_FLOAT32 ? int8_float_sdt(b, ctx->node) : odt;
    if (odt == KILN_DT_FLOAT32)
        e.out = qout_float(sdt);
    KILN_TRY(cu_out_s(b, ctx, 0, odt, sdt, 4, yd));
    kiln_tensor *y = ctx->out[0];
    y->flags |= KILN_TENSOR_DEV_NHWC;
    if (!y->nbytes)
        return KILN_OK;
    kiln_tensor lay;
    const kiln_tensor *xl = NULL;
    KILN_TRY(cu_relayout(b, x, true, &lay, &xl));
    kiln_status st = cu_check(b, cuk_qconv_direct(x->dtype == KILN_DT_INT8, xl->data, q->w, &e, y->data, &d, groups, zx,
                                                  b->stream), "QLinearConv (CUDA cores)");
    cu_tmp_free(b, &lay);
    return st;
}

static kiln_status k_qconv(cu_be *b, kiln_kctx *ctx)
{
    const kiln_node *n = ctx->node;
    const kiln_tensor *x = IN(0), *w = IN(3);
    bool fused = n->op == KILN_OP_QLinearConvAdd, sum = n->op == KILN_OP_QLinearConvSum;
    if (!acc_qconv_tc(b, n, ctx->n_in, ctx->in))
        return k_qconv_direct(b, ctx);
    cu_geom g;
    KILN_TRY(cu_conv_geom(b, ctx, x, w, &g));
    int64_t K = w->dims[0], C = w->dims[1], RS = w->dims[2] * w->dims[3];
    /* Y, the convolution's output (QLinearConvAdd: before its add), and the layer's */
    kiln_dtype ydt = qconv_float_out(b, n) ? KILN_DT_FLOAT32 : IN(7)->dtype;
    kiln_dtype odt = ydt;
    qconv_w *q = NULL;
    KILN_TRY(qconv_weights(b, ctx, K, C, RS, ydt, QL_KRSC, &QC_MAIN, &q));
    cuk_qepi e = q->e;
    if (sum) {   /* the second convolution's filter, bias (x2's zero point folded in) and multipliers to C's scale */
        const kiln_tensor *x2 = IN(9);
        qconv_w *q2 = NULL;
        KILN_TRY(qconv_weights(b, ctx, K, x2->dims[1], 1, ydt, QL_KRSC, &QC_SUM, &q2));
        e.f2 = q2->w;
        e.bias2 = q2->bias;
        e.m2 = q2->m;
        e.c2 = (int)x2->dims[1];
        e.h2 = (int)x2->dims[2];
        e.w2 = (int)x2->dims[3];
        (void)sum_strides(b, n, &e.sh2, &e.sw2);   /* (checked by acc_qconv) */
    }
    kiln_tensor lay[3];
    memset(lay, 0, sizeof lay);
    if (fused && res_float(b, n)) {   /* float32 = act(DequantizeLinear(Y) + DequantizeLinear(R)) */
        const char *a = b->host->attr_s(n, "kiln_res_act", NULL);
        e.res_float = 1;
        e.res_relu = a && a[0];
        (void)host_f(IN(6), &e.ys);   /* (checked by acc_qconv) */
        (void)host_f(IN(10), &e.rs);
        (void)host_zp(IN(11), 0, &e.zr);
        odt = KILN_DT_FLOAT32;
    } else if (fused && res_once(b, n)) {   /* C = one rounding of the sum plus R (checked by acc_qconv) */
        float rs = 0, cs = 1;
        (void)host_f(IN(10), &rs);
        (void)host_f(IN(6), &cs);
        (void)host_zp(IN(11), 0, &e.zr);
        e.res_once = 1;
        e.rk = rs / cs;
    } else if (fused) {
        kiln_tensor yt = {.dtype = ydt};   /* the add's operand A: only its type is read */
        const kiln_tensor *ops[8] = {&yt, IN(6), IN(7), IN(9), IN(10), IN(11), IN(12), IN(13)};
        kiln_qadd p;
        KILN_TRY(b->host->qadd_params(ctx, ops, "kiln_res_act", &p));
        e.add = qadd_args(&p);
        odt = p.cdt;
    }
    if (fused) {   /* R, channels-last as the output */
        const kiln_tensor *rl = NULL;
        KILN_TRY(cu_relayout(b, IN(9), true, &lay[1], &rl));
        e.res = rl->data;
        e.res_s8 = rl->dtype == KILN_DT_INT8;
    }
    if (sum) {   /* x2, channels-last */
        const kiln_tensor *xl2 = NULL;
        KILN_TRY(cu_relayout(b, IN(9), true, &lay[2], &xl2));
        e.x2 = xl2->data;
    }
    int64_t yd[4] = {x->dims[0], K, g.out[0], g.out[1]};
    kiln_dtype sdt = odt == KILN_DT_FLOAT32 ? int8_float_sdt(b, ctx->node) : odt;
    if (odt == KILN_DT_FLOAT32)
        e.out = qout_float(sdt);
    kiln_status st = cu_out_s(b, ctx, 0, odt, sdt, 4, yd);
    kiln_tensor *y = st == KILN_OK ? ctx->out[0] : NULL;
    const kiln_tensor *xl = NULL;
    if (y) {
        y->flags |= KILN_TENSOR_DEV_NHWC;
        if (y->nbytes)
            st = cu_relayout(b, x, true, &lay[0], &xl);
    }
    if (st == KILN_OK && y->nbytes) {
        qconv_call c = {.b = b, .x_s8 = x->dtype == KILN_DT_INT8, .x = xl->data, .q = q, .e = e, .y = y->data,
                        .d = {.n = (int)x->dims[0], .c = (int)C, .h = (int)x->dims[2], .w = (int)x->dims[3],
                              .k = (int)K, .r = (int)w->dims[2], .s = (int)w->dims[3], .p = (int)g.out[0],
                              .q = (int)g.out[1], .sh = (int)g.s[0], .sw = (int)g.s[1], .ph = (int)g.pb[0],
                              .pw = (int)g.pb[1], .dh = (int)g.d[0], .dw = (int)g.d[1], .y_nhwc = 1}};
        /* no timing over an output written in place of its residual (each timed run would add it again) */
        bool in_place = fused && e.res == (const uint8_t *)y->data;
        int cfg = 0;
        st = in_place ? KILN_OK : qconv_choose(b, ctx, &c, &cfg);
        if (st == KILN_OK)
            st = cu_check(b, qconv_launch(&c, cfg), fused ? "QLinearConvAdd" : sum ? "QLinearConvSum" : "QLinearConv");
    }
    for (int i = 0; i < 3; i++)
        cu_tmp_free(b, &lay[i]);
    return st;
}

/* ---- QLinearMatMul with a constant 2-D B: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp[, kiln's int32 bias];
 * the 1x1 convolution of A's rows (kernels.h) */

static bool sup_qmm(const kiln_bk_query *q)
{
    if (!q->in_dtype)
        return true;
    return q->n_in >= 8 && cu_is_q8(q->in_dtype[0]) && q->in_dtype[3] == KILN_DT_INT8 &&
           (q->n_in < 9 || q->in_dtype[8] == KILN_DT_UNDEFINED || q->in_dtype[8] == KILN_DT_INT32);
}

static bool acc_qmm(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    if (n_in < 8 || !in[0] || !in[3] || in[0]->ndim < 2 || in[3]->ndim != 2 || !known_act(b, n) ||
        !in[3]->data || (in[3]->flags & KILN_TENSOR_ON_DEVICE))
        return false;
    int64_t K = in[3]->dims[0], N = in[3]->dims[1], M = K ? cu_numel(in[0]) / K : 0;
    if (in[0]->dims[in[0]->ndim - 1] != K || K % 16 || N % 8 || M < 1 || M > 0x7fffffff || K > 0x7fffffff / 16)
        return false;
    int zx;   /* any input zero point: no padding, folded into the bias */
    return qparams_ok(b, n, n_in, in, N, &zx);
}

static kiln_status k_qmm(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *a = IN(0), *w = IN(3);
    if (!acc_qmm(b, ctx->node, ctx->n_in, ctx->in))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "operands the INT8 GEMM does not take");
    int64_t K = w->dims[0], N = w->dims[1], M = cu_numel(a) / K;
    kiln_dtype odt = qconv_float_out(b, ctx->node) ? KILN_DT_FLOAT32 : IN(7)->dtype;
    qconv_w *q = NULL;
    KILN_TRY(qconv_weights(b, ctx, N, K, 1, odt, QL_MM, &QC_MAIN, &q));
    int64_t yd[KILN_MAX_DIMS];
    memcpy(yd, a->dims, sizeof(int64_t) * (size_t)a->ndim);
    yd[a->ndim - 1] = N;
    kiln_dtype sdt = odt == KILN_DT_FLOAT32 ? int8_float_sdt(b, ctx->node) : odt;
    KILN_TRY(cu_out_s(b, ctx, 0, odt, sdt, a->ndim, yd));
    kiln_tensor *y = ctx->out[0];
    if (!y->nbytes)
        return KILN_OK;
    kiln_tensor lay;
    const kiln_tensor *al = NULL;
    KILN_TRY(cu_relayout(b, a, false, &lay, &al));   /* rows in A's own (ONNX) order */
    qconv_call c = {.b = b, .x_s8 = a->dtype == KILN_DT_INT8, .x = al->data, .q = q, .e = q->e, .y = y->data,
                    .d = {.n = (int)M, .c = (int)K, .h = 1, .w = 1, .k = (int)N, .r = 1, .s = 1, .p = 1, .q = 1,
                          .sh = 1, .sw = 1, .dh = 1, .dw = 1, .y_nhwc = 1}};
    if (odt == KILN_DT_FLOAT32)
        c.e.out = qout_float(sdt);
    int cfg = 0;
    kiln_status st = qconv_choose(b, ctx, &c, &cfg);
    if (st == KILN_OK)
        st = cu_check(b, qconv_launch(&c, cfg), "QLinearMatMul");
    cu_tmp_free(b, &lay);
    return st;
}

const cu_op cu_ops_int8[] = {
    {KILN_OP_QuantizeLinear, k_quantize, sup_quant, acc_quant, 0x6u},
    {KILN_OP_DequantizeLinear, k_dequantize, sup_quant, acc_quant, 0x6u},
    {KILN_OP_QLinearAdd, k_qadd, sup_qadd, acc_qadd, 0xF6u},
    {KILN_OP_QLookup, k_qlookup, sup_qlookup, acc_qlookup, 0x2u},
    {KILN_OP_QLinearConv, k_qconv, sup_qconv, acc_qconv, 0x1FEu},
    {KILN_OP_QLinearConvAdd, k_qconv, sup_qconv, acc_qconv, 0x3DFEu},   /* R (input 9) on the device */
    {KILN_OP_QLinearConvSum, k_qconv, sup_qconv, acc_qconv, 0xFDFEu},   /* x2 (input 9) on the device */
    {KILN_OP_QLinearMatMul, k_qmm, sup_qmm, acc_qmm, 0x1FEu},
    {KILN_OP_COUNT, NULL, NULL, NULL, 0},
};
