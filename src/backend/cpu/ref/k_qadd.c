/* Reference kernel of com.microsoft QLinearAdd (contract in ../qadd.h): any shapes ONNX Add
 * broadcasts, any kiln_act activation, one element at a time. */
#include "../qadd.h"
#include "../qgemm.h"
#include "../cpu_kernels.h"
#include "../prep.h"

static bool is_q8(kiln_dtype dt) { return dt == KILN_DT_UINT8 || dt == KILN_DT_INT8; }

/* The operands' names (QLinearAdd's; QLinearConvAdd's A is its convolution's output Y, B its R) */
static const char *const q_names[8] = {"A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale",
                                       "C_zero_point"};

/* scale q[i]: a float scalar, finite and > 0 */
static kiln_status scale_in(const kiln_kctx *ctx, const kiln_tensor *const *q, int i, float *s)
{
    const kiln_tensor *t = q[i];
    if (!t)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing %s", q_names[i]);
    if (t->dtype != KILN_DT_FLOAT32 && t->dtype != KILN_DT_FLOAT16 && t->dtype != KILN_DT_BFLOAT16 &&
        t->dtype != KILN_DT_FLOAT64)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "%s must be float, got %s", q_names[i], kiln_dtype_name(t->dtype));
    if (kiln_tensor_numel(t) != 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s must be a scalar", q_names[i]);
    *s = (float)kiln__get_f64(t->dtype, t->data, 0);
    if (!(*s > 0) || !isfinite(*s))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "%s must be finite and > 0", q_names[i]);
    return KILN_OK;
}

/* zero point q[i] of a tensor of type dt: absent (0) or a scalar of type dt */
static kiln_status zp_in(const kiln_kctx *ctx, const kiln_tensor *const *q, int i, kiln_dtype dt, int32_t *z)
{
    const kiln_tensor *t = q[i];
    *z = 0;
    if (!t)
        return KILN_OK;
    if (t->dtype != dt)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "%s is %s, expected %s", q_names[i], kiln_dtype_name(t->dtype),
                          kiln_dtype_name(dt));
    if (kiln_tensor_numel(t) != 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s must be a scalar", q_names[i]);
    *z = (int32_t)kiln__get_i64(dt, t->data, 0);
    return KILN_OK;
}

kiln_status kiln__qadd_params(const kiln_kctx *ctx, const kiln_tensor *const q[8], const char *act_attr,
                              kiln_qadd *p)
{
    memset(p, 0, sizeof *p);
    const kiln_tensor *a = q[0], *b = q[3], *cz = q[7];
    if (!a || !b)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input A or B");
    if (!is_q8(a->dtype) || !is_q8(b->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "A and B must be uint8/int8 (%s, %s)", kiln_dtype_name(a->dtype),
                          kiln_dtype_name(b->dtype));
    p->cdt = cz ? cz->dtype : a->dtype;
    if (!is_q8(p->cdt))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "C_zero_point must be uint8/int8, got %s", kiln_dtype_name(p->cdt));
    KILN_TRY(scale_in(ctx, q, 1, &p->sa));
    KILN_TRY(scale_in(ctx, q, 4, &p->sb));
    KILN_TRY(scale_in(ctx, q, 6, &p->sc));
    KILN_TRY(zp_in(ctx, q, 2, a->dtype, &p->za));
    KILN_TRY(zp_in(ctx, q, 5, b->dtype, &p->zb));
    KILN_TRY(zp_in(ctx, q, 7, p->cdt, &p->zc));
    p->lo = p->cdt == KILN_DT_UINT8 ? 0 : -128;
    p->hi = p->cdt == KILN_DT_UINT8 ? 255 : 127;
    return kiln__qact_from_attr(ctx, act_attr, &p->act);
}

kiln_status kiln__qadd_setup(const kiln_kctx *ctx, kiln_qadd *p)
{
    const kiln_tensor *q[8];
    for (int i = 0; i < 8; i++)
        q[i] = kiln__kin(ctx, i);
    return kiln__qadd_params(ctx, q, "kiln_act", p);
}

static int32_t q8(kiln_dtype dt, const void *d, int64_t i)
{
    return dt == KILN_DT_UINT8 ? ((const uint8_t *)d)[i] : ((const int8_t *)d)[i];
}

kiln_status kiln__k_qlinearadd_ref(kiln_kctx *ctx)
{
    kiln_qadd p;
    KILN_TRY(kiln__qadd_setup(ctx, &p));
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 3), *ab[2] = {a, b};
    int nd;
    int64_t dims[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS], idx[KILN_MAX_DIMS] = {0};
    KILN_TRY(kiln__broadcast_shape(ctx, 2, ab, &nd, dims));
    KILN_TRY(kiln__kout(ctx, 0, p.cdt, nd, dims));
    kiln__broadcast_strides(a, nd, dims, sa);
    kiln__broadcast_strides(b, nd, dims, sb);
    int64_t n = kiln_tensor_numel(ctx->out[0]), ia = 0, ib = 0;
    uint8_t *c = ctx->out[0]->data;
    for (int64_t i = 0; i < n; i++) {
        c[i] = (uint8_t)kiln__qadd1(&p, q8(a->dtype, a->data, ia), q8(b->dtype, b->data, ib));
        for (int d = nd - 1; d >= 0; d--) { /* next index: odometer over the output dims */
            ia += sa[d], ib += sb[d];
            if (++idx[d] < dims[d])
                break;
            ia -= sa[d] * dims[d], ib -= sb[d] * dims[d];
            idx[d] = 0;
        }
    }
    return KILN_OK;
}

/* kiln_res_float: C = act(DequantizeLinear(Y, y_scale, y_zero_point) + DequantizeLinear(R, R_scale, R_zero_point)),
 * float32, the graph's operations (DequantizeLinear's (float)(q - z) * s, a float32 sum, Relu's x < 0 ? 0 : x) */
static kiln_status qconv_add_float(kiln_kctx *ctx, kiln_kernel_fn conv)
{
    const kiln_tensor *r = kiln__kin(ctx, 9);
    if (!r || !is_q8(r->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "R must be uint8/int8");
    const char *act = kiln__attr_s(ctx->node, "kiln_res_act", NULL);
    if (act && act[0] && strcmp(act, "Relu"))
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "a float QLinearConvAdd's activation is none or Relu, not '%s'", act);
    /* the add's operands as QLinearConvAdd's quantized form reads them (A: Y, B: R), no C */
    const kiln_tensor *q[8] = {NULL, kiln__kin(ctx, 6), kiln__kin(ctx, 7), r, kiln__kin(ctx, 10), kiln__kin(ctx, 11)};
    if (!q[2] || !is_q8(q[2]->dtype))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "y_zero_point must be a uint8/int8 scalar");
    float ys, rs;
    int32_t zy, zr;
    KILN_TRY(scale_in(ctx, q, 1, &ys));
    KILN_TRY(zp_in(ctx, q, 2, q[2]->dtype, &zy));
    KILN_TRY(scale_in(ctx, q, 4, &rs));
    KILN_TRY(zp_in(ctx, q, 5, r->dtype, &zr));
    kiln_kctx sub = *ctx;
    sub.n_in = 9;
    KILN_TRY(conv(&sub));   /* Y */
    kiln_tensor *y = ctx->out[0];
    if (!is_q8(y->dtype) || r->ndim != y->ndim || memcmp(r->dims, y->dims, sizeof(int64_t) * (size_t)y->ndim))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "R must have the convolution output's shape and Y a quantized type");
    int64_t n = kiln_tensor_numel(y), dims[KILN_MAX_DIMS];
    int nd = y->ndim;
    kiln_dtype ydt = y->dtype;
    memcpy(dims, y->dims, sizeof(int64_t) * (size_t)nd);
    uint8_t *yb = kiln__malloc(n > 0 ? (size_t)n : 1);
    if (!yb)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    memcpy(yb, y->data, (size_t)n);
    kiln_status st = kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, nd, dims);
    if (st == KILN_OK) {
        float *c = ctx->out[0]->data;
        bool relu = act && act[0];
        for (int64_t i = 0; i < n; i++) {
            /* separate statements: no contraction into a fused multiply-add (the graph's layers round each) */
            float fa = (float)(q8(ydt, yb, i) - zy) * ys;
            float fb = (float)(q8(r->dtype, r->data, i) - zr) * rs;
            float v = fa + fb;
            c[i] = relu && v < 0 ? 0.0f : v;
        }
    }
    kiln__free(yb);
    return st;
}

kiln_status kiln__qconv_add(kiln_kctx *ctx, kiln_kernel_fn conv, kiln_qadd_run_fn add)
{
    /* one rounding: the convolution adds R before it rounds (its reference, ref/k_quant.c; the fast kernel in its
     * GEMM's epilogue where it takes the layer, qgemm_ops.c) */
    int64_t once = kiln__qconv_once(ctx->node);
    if (once) {
        if (once != 1)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "kiln_res_once must be 0 or 1");
        return (conv ? conv : kiln__cpu_ref_kernel(KILN_OP_QLinearConv))(ctx);
    }
    if (ctx->n_in >= 10 && ctx->n_out >= 1 && ctx->out[0] && !kiln__attr_i(ctx->node, "kiln_out_float", 0) &&
        kiln__attr_i(ctx->node, "kiln_res_float", 0))
        return qconv_add_float(ctx, conv);
    if (ctx->n_in < 13 || ctx->n_out < 1 || !ctx->out[0])
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "QLinearConvAdd needs 13 or 14 inputs and its output");
    if (kiln__attr_i(ctx->node, "kiln_out_float", 0))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "QLinearConvAdd's convolution must have a quantized output");
    const kiln_tensor *r = kiln__kin(ctx, 9);
    if (!r || !is_q8(r->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "R must be uint8/int8");
    kiln_kctx sub = *ctx;
    sub.n_in = 9;
    KILN_TRY(conv(&sub));   /* Y into the output's memory */
    kiln_tensor *y = ctx->out[0];
    const kiln_tensor *q[8] = {y, kiln__kin(ctx, 6), kiln__kin(ctx, 7), r, kiln__kin(ctx, 10), kiln__kin(ctx, 11),
                               kiln__kin(ctx, 12), kiln__kin(ctx, 13)};
    kiln_qadd p;
    KILN_TRY(kiln__qadd_params(ctx, q, "kiln_res_act", &p));
    if (!is_q8(y->dtype) || r->ndim != y->ndim || memcmp(r->dims, y->dims, sizeof(int64_t) * (size_t)y->ndim))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "R must have the convolution output's shape and Y a quantized type");
    int64_t n = kiln_tensor_numel(y);
    uint8_t *c = y->data;
    if (add && kiln__qadd_vec_ok(&p, y, r)) {
        add(&p, c, y->dtype == KILN_DT_INT8, r->data, r->dtype == KILN_DT_INT8, c, n, ctx->pool, ctx->nthreads);
    } else {
        for (int64_t i = 0; i < n; i++)   /* element i is read before it is written */
            c[i] = (uint8_t)kiln__qadd1(&p, q8(y->dtype, y->data, i), q8(r->dtype, r->data, i));
    }
    y->dtype = p.cdt;
    return KILN_OK;
}

/* QLinearConvAdd where no fast add is registered (hosts without AVX2): the scalar QLinearConv, or, for weights an
 * engine stored only packed (kiln__qprep_conv, registered on every host), the QLinearConv kernel that reads them
 * (qgemm_ops.c, on every host; what it does not take it leaves to the reference on the weights unpacked) */
static kiln_status k_qconv_add_ref(kiln_kctx *ctx)
{
    bool packed = kiln__prep_dropped(kiln__kin(ctx, 3));
    kiln_kernel_fn conv = packed ? kiln__ref_kernel(KILN_OP_QLinearConv) : kiln__cpu_ref_kernel(KILN_OP_QLinearConv);
    return kiln__qconv_add(ctx, conv, NULL);
}

const kiln_kernel_reg kiln__ref_qadd[] = {
    {KILN_OP_QLinearAdd, kiln__k_qlinearadd_ref},
    {KILN_OP_QLinearConvAdd, k_qconv_add_ref},
    {KILN_OP_COUNT, NULL},
};
