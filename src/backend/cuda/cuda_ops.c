/* Elementwise and data-movement layers on the GPU: binary arithmetic with broadcasting, unary
 * activations, Cast, Where, and the shape ops (Reshape/Flatten/Squeeze/Unsqueeze/Identity as device
 * copies, Transpose/Slice/Expand as strided copies, Concat as 2-D copies, Gather). Shapes are
 * computed on the host from dims and host-read inputs (shape tensors). */
#include "cuda_internal.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)

/* The storage the layer computes x's dtype in: the activations' (cu_act_sdt over mask) for float32. */
static kiln_dtype sdt_for(const cu_be *b, const kiln_kctx *ctx, const kiln_tensor *x, uint32_t mask)
{
    return x->dtype == KILN_DT_FLOAT32 ? cu_act_sdt(b, ctx, mask) : x->dtype;
}

/* Input i of the layer in storage sdt (a converted copy in tmp when needed). */
static kiln_status in_as(cu_be *b, kiln_kctx *ctx, int i, kiln_dtype sdt, kiln_tensor *tmp, const kiln_tensor **x)
{
    return cu_as(b, IN(i), sdt, tmp, x);
}

/* ---- binary arithmetic */

static int bin_code(kiln_op op)
{
    switch (op) {
    case KILN_OP_Add: return CUK_ADD;
    case KILN_OP_Sub: return CUK_SUB;
    case KILN_OP_Mul: return CUK_MUL;
    case KILN_OP_Div: return CUK_DIV;
    case KILN_OP_Pow: return CUK_POW;
    case KILN_OP_Max: return CUK_MAX;
    case KILN_OP_Min: return CUK_MIN;
    default: return -1;
    }
}

static int dt_code(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_FLOAT32: return 0;
    case KILN_DT_INT64: return 1;
    case KILN_DT_INT32: return 2;
    case KILN_DT_FLOAT16: return 3;
    case KILN_DT_BFLOAT16: return 4;
    default: return -1;
    }
}

static bool sup_binary(const kiln_bk_query *q)
{
    if (!q->in_dtype || q->n_in != 2)
        return q->n_in == 2 || !q->in_dtype;
    kiln_dtype a = q->in_dtype[0];
    if (a != q->in_dtype[1] || dt_code(a) < 0)
        return false;
    kiln_op op = q->node->op;
    return a == KILN_DT_FLOAT32 || (op != KILN_OP_Pow);
}

static bool acc_binary(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)b;
    (void)n;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    cuk_shape sh;
    return n_in == 2 && in[0] && in[1] && cu_broadcast(2, in, &nd, dims) && cu_shape_of(2, in, nd, dims, &sh);
}

/* y = x[0] op x[1] broadcast; view (may be NULL): the operands' strides over the output in NHWC memory order
 * (nhwc_view), the output then held NHWC */
static kiln_status binary_run(cu_be *b, kiln_kctx *ctx, const kiln_tensor *const *x, kiln_dtype sdt,
                              const cuk_shape *view)
{
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    if (!cu_broadcast(2, x, &nd, dims))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "inputs do not broadcast");
    KILN_TRY(cu_out_s(b, ctx, 0, x[0]->dtype, sdt, nd, dims));
    kiln_tensor *y = ctx->out[0];
    int64_t n = cu_numel(y);
    bool same = !view && cu_numel(x[0]) == n && cu_numel(x[1]) == n;
    if (view || cu_is_nhwc(x[0]))   /* a view, or both NHWC and the same shape (k_binary) */
        y->flags |= KILN_TENSOR_DEV_NHWC;
    cuk_shape sh;
    if (view)
        sh = *view;
    else if (!same && !cu_shape_of(2, x, nd, dims, &sh))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "broadcast of rank > %d", CUK_MAX_DIMS);
    return cu_check(b, cuk_binary(dt_code(sdt), bin_code(ctx->node->op), x[0]->data, x[1]->data, y->data, n,
                                  same ? NULL : &sh, b->stream), "binary");
}

/* A binary op over a channels-last operand and another that is not the same shape in the same layout can be
 * computed in NHWC memory order where every operand can be read so -- an NHWC 4-D operand, or one in its ONNX layout
 * whose bytes are already channels-last ordered: rank <= 4 and (padded to 4 dims [a, b, c, d]) b = 1 (a scalar, a
 * [N, 1, H, W] map) or c = d = 1 (a per-channel [1, C, 1, 1] constant, an SE block's [N, C, 1, 1] scale). *sh: each
 * operand viewed with its dims in memory order ([a, c, d, b]) over the output's [N, H, W, C]. Before, both operands
 * went back to NCHW (two full copies, and the next convolution's copy back): PP-OCRv4 det FP16's Add / Mul layers.
 * False where an operand cannot be read so. */
static bool nhwc_view(const kiln_tensor *const *x, cuk_shape *sh)
{
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    if ((!cu_is_nhwc(x[0]) && !cu_is_nhwc(x[1])) || !cu_broadcast(2, x, &nd, dims) || nd != 4)
        return false;
    kiln_tensor v[2];
    const kiln_tensor *vp[2] = {&v[0], &v[1]};
    for (int i = 0; i < 2; i++) {   /* rank <= nd = 4 */
        int64_t d4[4] = {1, 1, 1, 1};
        for (int d = 0; d < x[i]->ndim; d++)
            d4[4 - x[i]->ndim + d] = x[i]->dims[d];
        if (!cu_is_nhwc(x[i]) && d4[1] != 1 && (d4[2] != 1 || d4[3] != 1))
            return false;
        v[i] = *x[i];
        v[i].ndim = 4;
        int64_t m[4] = {d4[0], d4[2], d4[3], d4[1]};
        memcpy(v[i].dims, m, sizeof m);
    }
    int64_t md[4] = {dims[0], dims[2], dims[3], dims[1]};
    return cu_shape_of(2, vp, 4, md, sh);
}

static kiln_status k_binary(cu_be *b, kiln_kctx *ctx)
{
    if (!IN(0) || !IN(1))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "missing input");
    kiln_dtype sdt = sdt_for(b, ctx, IN(0), 3u);
    kiln_tensor tmp[2];
    const kiln_tensor *x[2];
    kiln_status st = in_as(b, ctx, 0, sdt, &tmp[0], &x[0]);
    if (st == KILN_OK)
        st = in_as(b, ctx, 1, sdt, &tmp[1], &x[1]);
    else
        memset(&tmp[1], 0, sizeof tmp[1]);
    /* channels-last operands stay so only as a same-shape pair; otherwise both in ONNX layout */
    kiln_tensor lay[2];
    memset(lay, 0, sizeof lay);
    bool keep = st == KILN_OK && cu_is_nhwc(x[0]) && cu_is_nhwc(x[1]) && x[0]->ndim == x[1]->ndim &&
                !memcmp(x[0]->dims, x[1]->dims, sizeof(int64_t) * (size_t)x[0]->ndim);
    cuk_shape view;
    bool nhwc = st == KILN_OK && !keep && nhwc_view(x, &view);
    for (int i = 0; i < 2 && st == KILN_OK && !keep && !nhwc; i++)
        st = cu_relayout(b, x[i], false, &lay[i], &x[i]);
    if (st == KILN_OK)
        st = binary_run(b, ctx, x, sdt, nhwc ? &view : NULL);
    for (int i = 0; i < 2; i++) {
        cu_tmp_free(b, &tmp[i]);
        cu_tmp_free(b, &lay[i]);
    }
    return st;
}

/* ---- unary */

static int unary_code(const cu_be *b, const kiln_node *n, float *a, float *c)
{
    *a = 0;
    *c = 0;
    switch (n->op) {
    case KILN_OP_Relu: return CUK_RELU;
    case KILN_OP_Sigmoid: return CUK_SIGMOID;
    case KILN_OP_Tanh: return CUK_TANH;
    case KILN_OP_Exp: return CUK_EXP;
    case KILN_OP_Log: return CUK_LOG;
    case KILN_OP_Sqrt: return CUK_SQRT;
    case KILN_OP_Neg: return CUK_NEG;
    case KILN_OP_Abs: return CUK_ABS;
    case KILN_OP_Erf: return CUK_ERF;
    case KILN_OP_Reciprocal: return CUK_RECIPROCAL;
    case KILN_OP_Floor: return CUK_FLOOR;
    case KILN_OP_Ceil: return CUK_CEIL;
    case KILN_OP_Softplus: return CUK_SOFTPLUS;
    case KILN_OP_Sin: return CUK_SIN;
    case KILN_OP_Cos: return CUK_COS;
    case KILN_OP_Round: return CUK_ROUND;
    case KILN_OP_Sign: return CUK_SIGN;
    case KILN_OP_HardSwish: return CUK_HARDSWISH;
    case KILN_OP_Identity: case KILN_OP_Dropout: return CUK_IDENTITY;
    case KILN_OP_LeakyRelu: *a = b ? b->host->attr_f(n, "alpha", 0.01f) : 0; return CUK_LEAKYRELU;
    case KILN_OP_Elu: *a = b ? b->host->attr_f(n, "alpha", 1.0f) : 0; return CUK_ELU;
    case KILN_OP_Selu:
        *a = b ? b->host->attr_f(n, "alpha", 1.67326319217681884765625f) : 0;
        *c = b ? b->host->attr_f(n, "gamma", 1.05070102214813232421875f) : 0;
        return CUK_SELU;
    case KILN_OP_HardSigmoid:
        *a = b ? b->host->attr_f(n, "alpha", 0.2f) : 0;
        *c = b ? b->host->attr_f(n, "beta", 0.5f) : 0;
        return CUK_HARDSIGMOID;
    case KILN_OP_Gelu: {
        const char *ap = b ? b->host->attr_s(n, "approximate", "none") : "none";
        return !strcmp(ap, "tanh") ? CUK_GELU_TANH : CUK_GELU;
    }
    case KILN_OP_Clip:
        *a = b ? b->host->attr_f(n, "min", -INFINITY) : 0;
        *c = b ? b->host->attr_f(n, "max", INFINITY) : 0;
        return CUK_CLIP;
    default: return -1;
    }
}

static bool sup_unary(const kiln_bk_query *q)
{
    if (q->node->op == KILN_OP_Dropout && q->node->n_out > 1 && q->node->out[1] >= 0)
        return false;   /* the mask output */
    return cu_q_f32(q, 1u);
}

static kiln_status read_scalar_f32(cu_be *b, kiln_kctx *ctx, int i, float *v)
{
    const kiln_tensor *t = IN(i);
    if (!t)
        return KILN_OK;
    if (t->flags & KILN_TENSOR_ON_DEVICE || t->dtype != KILN_DT_FLOAT32 || cu_numel(t) != 1)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "input %d must be a float32 scalar", i);
    *v = *(const float *)t->data;
    return KILN_OK;
}

static kiln_status k_unary(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    if (!x)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "missing input");
    float a, c;
    int code = unary_code(b, ctx->node, &a, &c);
    if (ctx->node->op == KILN_OP_Clip && ctx->node->opset >= 11) {
        a = -INFINITY;
        c = INFINITY;
        KILN_TRY(read_scalar_f32(b, ctx, 1, &a));
        KILN_TRY(read_scalar_f32(b, ctx, 2, &c));
    }
    kiln_dtype sdt = sdt_for(b, ctx, x, 1u);
    kiln_tensor tmp;
    kiln_status st = cu_as(b, x, sdt, &tmp, &x);
    if (st == KILN_OK)
        st = cu_out_s(b, ctx, 0, x->dtype, sdt, x->ndim, x->dims);
    kiln_tensor *y = ctx->out[0];
    if (st == KILN_OK && cu_is_nhwc(x))   /* elementwise: the layout carries over */
        y->flags |= KILN_TENSOR_DEV_NHWC;
    if (st != KILN_OK || (code == CUK_IDENTITY && (y->data == x->data || !y->nbytes))) {
    } else if (code == CUK_IDENTITY) {
        st = cu_check(b, cudaMemcpyAsync(y->data, x->data, y->nbytes, cudaMemcpyDeviceToDevice, b->stream), "copy");
    } else {
        st = cu_check(b, cuk_unary(cu_fdt(sdt), code, x->data, y->data, cu_numel(y), a, c, b->stream), "unary");
    }
    cu_tmp_free(b, &tmp);
    return st;
}

static bool sup_identity(const kiln_bk_query *q)
{
    if (q->node->op == KILN_OP_Dropout && q->node->n_out > 1 && q->node->out[1] >= 0)
        return false;
    return !q->in_dtype || q->n_in < 1 || cu_es(q->in_dtype[0]) > 0;
}

/* ---- Cast, Where */

static bool cast_dt(kiln_dtype d)
{
    return d == KILN_DT_FLOAT32 || d == KILN_DT_UINT8 || d == KILN_DT_INT8 || d == KILN_DT_INT32 ||
           d == KILN_DT_INT64 || d == KILN_DT_BOOL || d == KILN_DT_FLOAT16 || d == KILN_DT_BFLOAT16;
}

static bool sup_cast(const kiln_bk_query *q)
{
    return q->n_in < 1 || !q->in_dtype || cast_dt(q->in_dtype[0]);
}

/* the target dtype is an attribute: a type the kernel cannot write (double, ...) leaves the layer to
 * the CPU (a counted fallback) instead of failing the run */
static bool acc_cast(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)n_in;
    (void)in;
    return cast_dt((kiln_dtype)b->host->attr_i(n, "to", 0));
}

static kiln_status k_cast(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    kiln_dtype to = (kiln_dtype)b->host->attr_i(ctx->node, "to", 0);
    if (!x || !cast_dt(to))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "cast to dtype %d", (int)to);
    KILN_TRY(cu_out(b, ctx, 0, to, x->ndim, x->dims));
    kiln_tensor *y = ctx->out[0];
    return cu_check(b, cuk_cast((int)cu_sdt(x), x->data, (int)to, y->data, cu_numel(y), b->stream), "cast");
}

static bool sup_where(const kiln_bk_query *q)
{
    if (!q->in_dtype || q->n_in != 3)
        return q->n_in == 3 || !q->in_dtype;
    size_t es = cu_es(q->in_dtype[1]);
    return q->in_dtype[0] == KILN_DT_BOOL && q->in_dtype[1] == q->in_dtype[2] && (es == 2 || es == 4 || es == 8);
}

static bool acc_where(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)b;
    (void)n;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    cuk_shape sh;
    return n_in == 3 && in[0] && in[1] && in[2] && cu_broadcast(3, in, &nd, dims) && cu_shape_of(3, in, nd, dims, &sh);
}

static kiln_status where_run(cu_be *b, kiln_kctx *ctx, const kiln_tensor *const *x, kiln_dtype sdt)
{
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    cuk_shape sh;
    if (!cu_broadcast(3, x, &nd, dims) || !cu_shape_of(3, x, nd, dims, &sh))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "inputs do not broadcast");
    KILN_TRY(cu_out_s(b, ctx, 0, x[1]->dtype, sdt, nd, dims));
    kiln_tensor *y = ctx->out[0];
    return cu_check(b, cuk_where(cu_es(sdt), x[0]->data, x[1]->data, x[2]->data, y->data, cu_numel(y), &sh,
                                 b->stream), "where");
}

static kiln_status k_where(cu_be *b, kiln_kctx *ctx)
{
    if (!IN(0) || !IN(1) || !IN(2))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "missing input");
    kiln_dtype sdt = sdt_for(b, ctx, IN(1), 6u);
    kiln_tensor tmp[2];
    const kiln_tensor *x[3] = {IN(0), NULL, NULL};
    kiln_status st = in_as(b, ctx, 1, sdt, &tmp[0], &x[1]);
    if (st == KILN_OK)
        st = in_as(b, ctx, 2, sdt, &tmp[1], &x[2]);
    else
        memset(&tmp[1], 0, sizeof tmp[1]);
    if (st == KILN_OK)
        st = where_run(b, ctx, x, sdt);
    cu_tmp_free(b, &tmp[0]);
    cu_tmp_free(b, &tmp[1]);
    return st;
}

/* ---- shape ops: same bytes, new dims */

static kiln_status copy_as(cu_be *b, kiln_kctx *ctx, const kiln_tensor *x, int nd, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= dims[d];
    if (n != cu_numel(x))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "cannot reshape %lld elements to %lld", (long long)cu_numel(x),
                       (long long)n);
    KILN_TRY(cu_out_like(b, ctx, 0, x, nd, dims));
    kiln_tensor *y = ctx->out[0];
    if (y->data == x->data || !y->nbytes)
        return KILN_OK;
    return cu_check(b, cudaMemcpyAsync(y->data, x->data, y->nbytes, cudaMemcpyDeviceToDevice, b->stream), "copy");
}

static bool sup_any_dtype(const kiln_bk_query *q)
{
    return !q->in_dtype || q->n_in < 1 || cu_es(q->in_dtype[0]) > 0;
}

static kiln_status k_reshape(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    int64_t s[KILN_MAX_DIMS];
    int nd = cu_host_ints(ctx, 1, s, KILN_MAX_DIMS);
    if (!x || nd < 0)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "shape must be a host int64 tensor of rank <= %d", KILN_MAX_DIMS);
    bool allowzero = b->host->attr_i(ctx->node, "allowzero", 0) != 0;
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < nd; d++) {
        if (s[d] == 0 && !allowzero) {
            if (d >= x->ndim)
                return cu_kerr(b, ctx, KILN_ERR_SHAPE, "0 in shape at %d beyond the input's rank", d);
            s[d] = x->dims[d];
        }
        if (s[d] == -1) {
            if (infer >= 0)
                return cu_kerr(b, ctx, KILN_ERR_SHAPE, "more than one -1 in shape");
            infer = d;
        } else if (s[d] < 0) {
            return cu_kerr(b, ctx, KILN_ERR_SHAPE, "negative dim in shape");
        } else {
            known *= s[d];
        }
    }
    if (infer >= 0) {
        if (known == 0 || cu_numel(x) % known)
            return cu_kerr(b, ctx, KILN_ERR_SHAPE, "cannot infer the -1 dim");
        s[infer] = cu_numel(x) / known;
    }
    return copy_as(b, ctx, x, nd, s);
}

static kiln_status k_flatten(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    int64_t axis = x ? b->host->attr_i(ctx->node, "axis", 1) : 0;   /* in [-r, r]; negative counts from r */
    if (axis < 0 && x)
        axis += x->ndim;
    if (!x || axis < 0 || axis > x->ndim)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad axis");
    int64_t d[2] = {1, 1};
    for (int i = 0; i < x->ndim; i++)
        d[i < axis ? 0 : 1] *= x->dims[i];
    return copy_as(b, ctx, x, 2, d);
}

/* Squeeze / Unsqueeze axes: attribute before opset 13, input 1 from 13 */
static int get_axes(cu_be *b, kiln_kctx *ctx, int64_t *ax)
{
    if (ctx->node->opset < 13) {
        const int64_t *v;
        int n = b->host->attr_ints(ctx->node, "axes", &v);
        for (int i = 0; i < n && i < KILN_MAX_DIMS; i++)
            ax[i] = v[i];
        return n > KILN_MAX_DIMS ? -2 : n;
    }
    if (!IN(1))
        return -1;
    int n = cu_host_ints(ctx, 1, ax, KILN_MAX_DIMS);
    return n < 0 ? -2 : n;
}

static kiln_status k_squeeze(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    int64_t ax[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
    int na = get_axes(b, ctx, ax), nd = 0;
    if (!x || na == -2)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad axes");
    bool drop[KILN_MAX_DIMS] = {0};
    for (int i = 0; i < na; i++) {
        int a;
        if (!cu_axis(ax[i], x->ndim, &a) || x->dims[a] != 1)
            return cu_kerr(b, ctx, KILN_ERR_SHAPE, "axis %lld is not a dim of size 1", (long long)ax[i]);
        drop[a] = true;
    }
    for (int d = 0; d < x->ndim; d++)
        if (!(na < 0 ? x->dims[d] == 1 : drop[d]))
            dims[nd++] = x->dims[d];
    return copy_as(b, ctx, x, nd, dims);
}

static kiln_status k_unsqueeze(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    int64_t ax[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
    int na = get_axes(b, ctx, ax);
    if (!x || na < 0 || x->ndim + na > KILN_MAX_DIMS)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad axes");
    int r = x->ndim + na;
    bool ins[KILN_MAX_DIMS] = {0};
    for (int i = 0; i < na; i++) {
        int a;
        if (!cu_axis(ax[i], r, &a) || ins[a])
            return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad or repeated axis %lld", (long long)ax[i]);
        ins[a] = true;
    }
    for (int d = 0, k = 0; d < r; d++)
        dims[d] = ins[d] ? 1 : x->dims[k++];
    return copy_as(b, ctx, x, r, dims);
}

/* ---- Transpose, Slice, Expand: strided copies */

static kiln_status strided(cu_be *b, kiln_kctx *ctx, const kiln_tensor *x, int64_t base, int nd, const int64_t *dims,
                           const int64_t *str)
{
    KILN_TRY(cu_out_like(b, ctx, 0, x, nd, dims));
    kiln_tensor *y = ctx->out[0];
    cuk_shape sh = {0};
    /* drop size-1 dims, merge contiguous runs */
    int m = 0;
    for (int d = 0; d < nd; d++) {
        if (dims[d] == 1)
            continue;
        if (m && sh.str[0][m - 1] == str[d] * dims[d]) {
            sh.dims[m - 1] *= dims[d];
            sh.str[0][m - 1] = str[d];
            continue;
        }
        if (m == CUK_MAX_DIMS)
            return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "more than %d non-mergeable dims", CUK_MAX_DIMS);
        sh.dims[m] = dims[d];
        sh.str[0][m] = str[d];
        m++;
    }
    if (!m) {
        sh.dims[0] = 1;
        m = 1;
    }
    sh.ndim = m;
    int64_t n = cu_numel(y);
    size_t es = cu_tes(x);
    if (m == 1 && sh.str[0][0] == 1 && n)   /* contiguous */
        return cu_check(b, cudaMemcpyAsync(y->data, (const char *)x->data + base * (int64_t)es, y->nbytes,
                                           cudaMemcpyDeviceToDevice, b->stream), "copy");
    /* an innermost run contiguous in both: move it in 16- or 8-byte elements when everything is aligned */
    for (size_t w = 16; w > es && n; w /= 2) {
        int64_t f = (int64_t)(w / es);
        bool ok = sh.str[0][m - 1] == 1 && sh.dims[m - 1] % f == 0 && base % f == 0 &&
                  (uintptr_t)x->data % w == 0 && (uintptr_t)y->data % w == 0;
        for (int d = 0; d < m - 1 && ok; d++)
            ok = sh.str[0][d] % f == 0;
        if (!ok)
            continue;
        sh.dims[m - 1] /= f;
        for (int d = 0; d < m - 1; d++)
            sh.str[0][d] /= f;
        base /= f;
        n /= f;
        es = w;
        break;
    }
    return cu_check(b, cuk_strided_copy(es, x->data, base, y->data, n, &sh, b->stream), "strided copy");
}

static kiln_status k_transpose(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    if (!x)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "missing input");
    const int64_t *perm;
    int np = b->host->attr_ints(ctx->node, "perm", &perm);
    int64_t p[KILN_MAX_DIMS], xs[KILN_MAX_DIMS], dims[KILN_MAX_DIMS], str[KILN_MAX_DIMS];
    bool seen[KILN_MAX_DIMS] = {0};
    if (np >= 0 && np != x->ndim)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "perm has %d entries for rank %d", np, x->ndim);
    for (int d = 0; d < x->ndim; d++) {
        p[d] = np < 0 ? x->ndim - 1 - d : perm[d];
        if (p[d] < 0 || p[d] >= x->ndim || seen[p[d]])
            return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "perm is not a permutation");
        seen[p[d]] = true;
    }
    cu_contig_strides(x->ndim, x->dims, xs);
    for (int d = 0; d < x->ndim; d++) {
        dims[d] = x->dims[p[d]];
        str[d] = xs[p[d]];
    }
    return strided(b, ctx, x, 0, x->ndim, dims, str);
}

static kiln_status k_slice(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    if (!x)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "missing input");
    int r = x->ndim;
    int64_t st[KILN_MAX_DIMS], en[KILN_MAX_DIMS], ax[KILN_MAX_DIMS], sp[KILN_MAX_DIMS];
    int ns, ne, na = -1, nsp = -1;
    if (ctx->node->opset < 10) {
        const int64_t *v;
        ns = b->host->attr_ints(ctx->node, "starts", &v);
        for (int i = 0; i < ns && i < KILN_MAX_DIMS; i++)
            st[i] = v[i];
        ne = b->host->attr_ints(ctx->node, "ends", &v);
        for (int i = 0; i < ne && i < KILN_MAX_DIMS; i++)
            en[i] = v[i];
        na = b->host->attr_ints(ctx->node, "axes", &v);
        for (int i = 0; i < na && i < KILN_MAX_DIMS; i++)
            ax[i] = v[i];
    } else {
        ns = cu_host_ints(ctx, 1, st, KILN_MAX_DIMS);
        ne = cu_host_ints(ctx, 2, en, KILN_MAX_DIMS);
        if (IN(3))
            na = cu_host_ints(ctx, 3, ax, KILN_MAX_DIMS);
        if (IN(4))
            nsp = cu_host_ints(ctx, 4, sp, KILN_MAX_DIMS);
        if ((IN(3) && na < 0) || (IN(4) && nsp < 0))
            return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "axes / steps must be small host int tensors");
    }
    if (ns < 0 || ns > KILN_MAX_DIMS || ne != ns || (na >= 0 && na != ns) || (nsp >= 0 && nsp != ns))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "starts / ends / axes / steps disagree");
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS], dims[KILN_MAX_DIMS], xs[KILN_MAX_DIMS], str[KILN_MAX_DIMS];
    bool seen[KILN_MAX_DIMS] = {0};
    for (int d = 0; d < r; d++) {
        start[d] = 0;
        step[d] = 1;
        dims[d] = x->dims[d];
    }
    for (int i = 0; i < ns; i++) {
        int a;
        if (!cu_axis(na >= 0 ? ax[i] : i, r, &a) || seen[a])
            return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad or repeated axis");
        seen[a] = true;
        int64_t n = x->dims[a], s = st[i], e = en[i], k = nsp >= 0 ? sp[i] : 1;
        if (k == 0)
            return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "step 0");
        if (s < 0)
            s += n;
        if (e < 0)
            e += n;
        if (k > 0) {
            s = s < 0 ? 0 : s > n ? n : s;
            e = e < 0 ? 0 : e > n ? n : e;
            dims[a] = e > s ? (e - s + k - 1) / k : 0;
        } else {
            s = s < 0 ? -1 : s > n - 1 ? n - 1 : s;
            e = e < -1 ? -1 : e > n - 1 ? n - 1 : e;
            dims[a] = s > e ? (s - e + (-k) - 1) / (-k) : 0;
        }
        start[a] = dims[a] ? s : 0;
        step[a] = k;
    }
    cu_contig_strides(x->ndim, x->dims, xs);
    int64_t base = 0;
    for (int d = 0; d < r; d++) {
        base += start[d] * xs[d];
        str[d] = xs[d] * step[d];
    }
    return strided(b, ctx, x, base, r, dims, str);
}

static kiln_status k_expand(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    int64_t s[KILN_MAX_DIMS];
    int ns = cu_host_ints(ctx, 1, s, KILN_MAX_DIMS);
    if (!x || ns < 0)
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "shape must be a host int tensor");
    kiln_tensor st = {.ndim = ns};
    for (int d = 0; d < ns; d++)
        st.dims[d] = s[d];
    const kiln_tensor *two[2] = {x, &st};
    int nd;
    int64_t dims[KILN_MAX_DIMS], str[KILN_MAX_DIMS];
    if (!cu_broadcast(2, two, &nd, dims))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "shape does not broadcast with the input");
    int off = nd - x->ndim;
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t xd = d >= off ? x->dims[d - off] : 1;
        str[d] = xd == 1 ? 0 : acc;
        acc *= xd;
    }
    return strided(b, ctx, x, 0, nd, dims, str);
}

/* ---- Concat: one 2-D copy per input */

static bool acc_concat(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)b;
    for (int i = 0; i < n_in; i++)
        if (!in[i] || in[i]->dtype != in[0]->dtype)
            return false;
    (void)n;
    return n_in >= 1;
}

static kiln_status concat_run(cu_be *b, kiln_kctx *ctx, const kiln_tensor *const *xs, int axis)
{
    const kiln_tensor *x0 = xs[0];
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, x0->dims, sizeof dims);
    dims[axis] = 0;
    for (int i = 0; i < ctx->n_in; i++) {
        const kiln_tensor *x = xs[i];
        if (!x || x->ndim != x0->ndim || x->dtype != x0->dtype)
            return cu_kerr(b, ctx, KILN_ERR_SHAPE, "inputs differ in rank or dtype");
        for (int d = 0; d < x->ndim; d++)
            if (d != axis && x->dims[d] != x0->dims[d])
                return cu_kerr(b, ctx, KILN_ERR_SHAPE, "inputs differ off the concat axis");
        dims[axis] += x->dims[axis];
    }
    KILN_TRY(cu_out_like(b, ctx, 0, x0, x0->ndim, dims));
    kiln_tensor *y = ctx->out[0];
    size_t es = cu_tes(x0);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= dims[d];
    for (int d = axis + 1; d < x0->ndim; d++)
        inner *= dims[d];
    size_t dpitch = (size_t)(dims[axis] * inner) * es, off = 0;
    for (int i = 0; i < ctx->n_in; i++) {
        size_t w = (size_t)(xs[i]->dims[axis] * inner) * es;
        if (w && outer)
            KILN_TRY(cu_check(b, cudaMemcpy2DAsync((char *)y->data + off, dpitch, xs[i]->data, w, w, (size_t)outer,
                                                   cudaMemcpyDeviceToDevice, b->stream), "concat"));
        off += w;
    }
    return KILN_OK;
}

static kiln_status k_concat(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x0 = IN(0);
    int axis;
    if (!x0 || !cu_axis(b->host->attr_i(ctx->node, "axis", 0), x0->ndim, &axis))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad axis");
    /* every input in one storage (float32 inputs: the activations') */
    kiln_dtype sdt = sdt_for(b, ctx, x0, 0xFFFFFFFFu);
    kiln_tensor *tmp = calloc((size_t)ctx->n_in, sizeof *tmp);
    const kiln_tensor **xs = calloc((size_t)ctx->n_in, sizeof *xs);
    kiln_status st = tmp && xs ? KILN_OK : cu_err(b, KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < ctx->n_in && st == KILN_OK; i++)
        st = in_as(b, ctx, i, sdt, &tmp[i], &xs[i]);
    if (st == KILN_OK)
        st = concat_run(b, ctx, xs, axis);
    for (int i = 0; tmp && i < ctx->n_in; i++)
        cu_tmp_free(b, &tmp[i]);
    free(tmp);
    free(xs);
    return st;
}

/* ---- Gather */

static bool sup_gather(const kiln_bk_query *q)
{
    if (!q->in_dtype || q->n_in < 2)
        return true;
    return cu_es(q->in_dtype[0]) > 0 && (q->in_dtype[1] == KILN_DT_INT64 || q->in_dtype[1] == KILN_DT_INT32);
}

static kiln_status k_gather(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0), *idx = IN(1);
    int axis;
    if (!x || !idx || !cu_axis(b->host->attr_i(ctx->node, "axis", 0), x->ndim, &axis))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad inputs or axis");
    if (x->ndim + idx->ndim - 1 > KILN_MAX_DIMS)
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "output rank too large");
    int64_t dims[KILN_MAX_DIMS], outer = 1, inner = 1;
    int nd = 0;
    for (int d = 0; d < axis; d++) {
        dims[nd++] = x->dims[d];
        outer *= x->dims[d];
    }
    for (int d = 0; d < idx->ndim; d++)
        dims[nd++] = idx->dims[d];
    for (int d = axis + 1; d < x->ndim; d++) {
        dims[nd++] = x->dims[d];
        inner *= x->dims[d];
    }
    KILN_TRY(cu_out_like(b, ctx, 0, x, nd, dims));
    kiln_tensor *y = ctx->out[0];
    return cu_check(b, cuk_gather(cu_tes(x), x->data, idx->data, idx->dtype == KILN_DT_INT64, y->data, outer,
                                  x->dims[axis], cu_numel(idx), inner, b->bad, b->stream), "gather");
}

static bool sup_f32_first(const kiln_bk_query *q) { return cu_q_f32(q, 1u); }

const cu_op cu_ops_basic[] = {
    {KILN_OP_Add, k_binary, sup_binary, acc_binary, 0},
    {KILN_OP_Sub, k_binary, sup_binary, acc_binary, 0},
    {KILN_OP_Mul, k_binary, sup_binary, acc_binary, 0},
    {KILN_OP_Div, k_binary, sup_binary, acc_binary, 0},
    {KILN_OP_Pow, k_binary, sup_binary, acc_binary, 0},
    {KILN_OP_Max, k_binary, sup_binary, acc_binary, 0},
    {KILN_OP_Min, k_binary, sup_binary, acc_binary, 0},
    {KILN_OP_Relu, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Sigmoid, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Tanh, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Exp, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Log, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Sqrt, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Neg, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Abs, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Erf, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Reciprocal, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Floor, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Ceil, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Softplus, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Sin, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Cos, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Round, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Sign, k_unary, sup_unary, NULL, 0},
    {KILN_OP_HardSwish, k_unary, sup_unary, NULL, 0},
    {KILN_OP_HardSigmoid, k_unary, sup_unary, NULL, 0},
    {KILN_OP_LeakyRelu, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Elu, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Selu, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Gelu, k_unary, sup_unary, NULL, 0},
    {KILN_OP_Clip, k_unary, sup_f32_first, NULL, 6u},
    {KILN_OP_Cast, k_cast, sup_cast, acc_cast, 0},
    {KILN_OP_Where, k_where, sup_where, acc_where, 0},
    {KILN_OP_COUNT, NULL, NULL, NULL, 0},
};

const cu_op cu_ops_shape[] = {
    {KILN_OP_Identity, k_unary, sup_identity, NULL, 0},
    {KILN_OP_Dropout, k_unary, sup_identity, NULL, 6u},
    {KILN_OP_Reshape, k_reshape, sup_any_dtype, NULL, 2u},
    {KILN_OP_Flatten, k_flatten, sup_any_dtype, NULL, 0},
    {KILN_OP_Squeeze, k_squeeze, sup_any_dtype, NULL, 2u},
    {KILN_OP_Unsqueeze, k_unsqueeze, sup_any_dtype, NULL, 2u},
    {KILN_OP_Transpose, k_transpose, sup_any_dtype, NULL, 0},
    {KILN_OP_Slice, k_slice, sup_any_dtype, NULL, 30u},
    {KILN_OP_Expand, k_expand, sup_any_dtype, NULL, 2u},
    {KILN_OP_Concat, k_concat, sup_any_dtype, acc_concat, 0},
    {KILN_OP_Gather, k_gather, sup_gather, NULL, 0},
    {KILN_OP_COUNT, NULL, NULL, NULL, 0},
};
