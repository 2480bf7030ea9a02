/* fuse-qdq: explicit quantization (QDQ models: ONNX Runtime's quantize_static output, QAT exports,
 * and the Q/DQ nodes `kiln build --precision int8` inserts) becomes real integer layers.
 *
 *   DQ(x_q) -> Conv(., DQ(w_q const) [, bias]) [-> Relu|Clip] -> Q     => QLinearConv
 *   DQ(a_q) -> MatMul(., DQ(b_q const))        [-> Relu|Clip] -> Q     => QLinearMatMul
 *   DQ(a_q) -> MatMul(., DQ(b_q const)) -> Add(1-D bias) [-> act] -> Q  => QLinearMatMul + int32 bias
 *              (kiln's input 8); without the Q (sum consumed in float): the same with kiln_out_float
 *   DQ(a_q) -> Gemm(., DQ(b_q const) [, C]) [-> act] -> Q             => com.microsoft QGemm
 *              (C as int32 in units of alpha * a_scale * b_scale[n], beta folded in); without
 *              the Q (output consumed in float): QGemm without y_scale, float32 output
 *   DQ(a_q), DQ(b_q) -> Add [-> act] -> Q (per tensor)                 => com.microsoft QLinearAdd
 *   DQ(x_q) -> Q, same scale / zero point / type                       => x_q (the pair is dropped)
 *   DQ(x_q) -> Reshape|Transpose|Flatten|Squeeze|Unsqueeze|MaxPool -> Q, same parameters
 *                                                                       => the op on x_q
 * Conditions: x / y scales are float32 scalar constants, zero points 8-bit constants (missing ones
 * are materialized as 0), weights 8-bit constants with per-tensor or per-output-channel scales
 * (Conv: axis 0; MatMul: one scale per column of B), no block quantization. The weight is used
 * exactly as stored; the bias is requantized to int32 with scale x_scale * w_scale[m] as ONNX
 * Runtime does (round half to even of b / (x_scale * w_scale), float32 arithmetic); a bias that
 * is already DQ(int32, scale x_scale * w_scale, zero point 0) is taken as is.
 *
 * An activation between the layer and Q (Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid, HardSwish,
 * Tanh, Gelu) is fused: a Relu or Clip that the Q's saturation implies exactly disappears
 * (Q(clip(v, lo, hi)) = clamp(Q(v), Q(lo), Q(hi)) because Q is monotonic, so the clip can go when
 * Q(lo) and Q(hi) are the ends of the integer range: a Relu before a uint8 Q with zero point 0, as
 * ONNX Runtime emits); any other becomes the `kiln_act` attributes, applied in float before
 * requantization (PRECISION.md, "The kiln attributes of quantized nodes"). A Conv or a MatMul
 * without bias whose output is consumed in float (no Q) is left as Q/DQ around a float layer and
 * runs correctly as fake quantization. The fused layer takes the Q's slot (the float-output QGemm its Gemm's) and keeps the layer's name and
 * attributes (the builder's precision request included). */
#include "rewrite.h"
#include <float.h>
#include <math.h>

/* The constant tensor of v: an initializer that is not an overridable graph input, or the value
 * of a Constant node (this pass runs before constant folding turns those into initializers). */
static const kiln_tensor *cval(const kiln_graph *g, int v)
{
    if (v < 0)
        return NULL;
    if (g->values[v].init) {
        for (int k = 0; k < g->n_inputs; k++)
            if (g->inputs[k] == v)
                return NULL;
        return g->values[v].init;
    }
    int p = g->values[v].producer;
    if (p < 0 || g->nodes[p].dead || g->nodes[p].op != KILN_OP_Constant)
        return NULL;
    const kiln_attr *a = kiln__attr(&g->nodes[p], "value");
    return a && a->type == KILN_ATTR_TENSOR ? a->t : NULL;
}

static bool is_q8(kiln_dtype dt) { return dt == KILN_DT_UINT8 || dt == KILN_DT_INT8; }
static int64_t numel(const kiln_tensor *t) { return kiln_tensor_numel(t); }

/* Parameters of a QuantizeLinear / DequantizeLinear node this pass can use. */
typedef struct qp {
    int node, x, y, scale, zp;      /* value ids (zp -1 when absent) */
    const kiln_tensor *s, *z;
    kiln_dtype dt;                  /* the 8-bit quantized type */
} qp;

/* The 8-bit type of value v if it is (or will be) quantized data, else UNDEFINED. */
static kiln_dtype qtype_of(const kiln_graph *g, int v)
{
    const kiln_tensor *t = cval(g, v);
    if (t)
        return t->dtype;
    int p = g->values[v].producer;
    if (p >= 0 && !g->nodes[p].dead) {
        const kiln_node *n = &g->nodes[p];
        int zslot = n->op == KILN_OP_QuantizeLinear ? 2
                    : (n->op == KILN_OP_QLinearConv || n->op == KILN_OP_QLinearMatMul) ? 7
                    : n->op == KILN_OP_QGemm ? 8 : -1;
        if (zslot >= 0) {
            const kiln_tensor *z = zslot < n->n_in ? cval(g, n->in[zslot]) : NULL;
            return z ? z->dtype : KILN_DT_UINT8;
        }
    }
    return g->values[v].dtype;
}

static bool qdq_params(const kiln_graph *g, int idx, kiln_op op, qp *q)
{
    const kiln_node *n = &g->nodes[idx];
    memset(q, 0, sizeof *q);
    if (n->dead || n->op != op || n->n_in < 2 || n->n_out != 1 || n->out[0] < 0 || n->in[0] < 0)
        return false;
    if (kiln__attr_i(n, "block_size", 0) != 0 || kiln__attr_i(n, "output_dtype", 0) != 0)
        return false;
    q->node = idx;
    q->x = n->in[0];
    q->y = n->out[0];
    q->scale = n->in[1];
    q->zp = n->n_in > 2 ? n->in[2] : -1;
    q->s = cval(g, q->scale);
    q->z = q->zp >= 0 ? cval(g, q->zp) : NULL;
    if (!q->s || q->s->dtype != KILN_DT_FLOAT32 || (q->zp >= 0 && !q->z) || numel(q->s) < 1)
        return false;
    if (q->z && numel(q->z) != numel(q->s))
        return false;
    for (int64_t i = 0; i < numel(q->s); i++) {
        float s = ((const float *)q->s->data)[i];
        if (!(s > 0) || !isfinite(s))
            return false;
    }
    kiln_dtype xdt = op == KILN_OP_DequantizeLinear ? qtype_of(g, q->x) : KILN_DT_UNDEFINED;
    q->dt = q->z ? q->z->dtype : (op == KILN_OP_QuantizeLinear ? KILN_DT_UINT8 : xdt);
    if (op == KILN_OP_DequantizeLinear && xdt != KILN_DT_UNDEFINED && xdt != q->dt)
        return false;
    return is_q8(q->dt);
}

/* A DQ producing v with per-tensor parameters. */
static bool dq_of(const kiln_graph *g, int v, qp *q)
{
    int p = v >= 0 && !g->values[v].init ? g->values[v].producer : -1;
    return p >= 0 && qdq_params(g, p, KILN_OP_DequantizeLinear, q) && numel(q->s) == 1;
}

/* DQ of a constant 8-bit weight: per tensor, or per channel along `axis` (rank-normalized). */
static bool dq_weight(const kiln_graph *g, int v, int axis, qp *q)
{
    int p = v >= 0 && !g->values[v].init ? g->values[v].producer : -1;
    if (p < 0 || !qdq_params(g, p, KILN_OP_DequantizeLinear, q))
        return false;
    const kiln_tensor *w = cval(g, q->x);
    if (!w || !is_q8(w->dtype) || axis >= w->ndim)
        return false;
    int64_t ns = numel(q->s);
    if (ns == 1)
        return q->s->ndim <= 1;
    int64_t ax = kiln__attr_i(&g->nodes[p], "axis", 1);
    if (ax < 0)
        ax += w->ndim;
    return q->s->ndim == 1 && ax == axis && w->dims[axis] == ns;
}

/* The zero point of q as a value: q's own, or a new scalar 0 of q's type. */
static kiln_status zp_value(kiln_graph *g, const qp *q, int *out)
{
    *out = q->zp;
    if (q->zp >= 0)
        return KILN_OK;
    kiln_tensor t;
    KILN_TRY(kiln__tensor_alloc(&t, q->dt, 0, NULL));
    *out = kiln__graph_add_const(g, g->values[q->y].name, &t);
    if (*out < 0) {
        kiln__tensor_release(&t);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    return KILN_OK;
}

static void q_range(kiln_dtype dt, float *lo, float *hi)
{
    *lo = dt == KILN_DT_UINT8 ? 0.f : -128.f;
    *hi = dt == KILN_DT_UINT8 ? 255.f : 127.f;
}

/* QuantizeLinear of one float, as the kernel computes it. */
static float quantize1(float v, float s, float z, float lo, float hi)
{
    float r = rintf(v / s) + z;
    if (r != r)
        return 0;
    return r < lo ? lo : (r > hi ? hi : r);
}

/* True if activation node a (Relu or Clip) is implied by the per-tensor Q y that follows it. */
static bool act_implied(const kiln_graph *g, const kiln_node *a, const qp *y)
{
    float mn = -INFINITY, mx = INFINITY;
    if (a->op == KILN_OP_Relu && a->n_in == 1)
        mn = 0.f;
    else if (a->op == KILN_OP_Clip && a->opset < 11) {
        mn = kiln__attr_f(a, "min", -FLT_MAX);
        mx = kiln__attr_f(a, "max", FLT_MAX);
    } else if (a->op == KILN_OP_Clip) {
        for (int k = 1; k < a->n_in && k < 3; k++) {
            if (a->in[k] < 0)
                continue;
            const kiln_tensor *t = cval(g, a->in[k]);
            if (!t || t->dtype != KILN_DT_FLOAT32 || numel(t) != 1)
                return false;
            *(k == 1 ? &mn : &mx) = *(const float *)t->data;
        }
    } else
        return false;
    float lo, hi, s = *(const float *)y->s->data, z = y->z ? (float)kiln__get_i64(y->dt, y->z->data, 0) : 0.f;
    q_range(y->dt, &lo, &hi);
    return quantize1(mn, s, z, lo, hi) == lo && quantize1(mx, s, z, lo, hi) == hi;
}

/* A layer's bias as int32 in units of the accumulator, scale x_scale * w_scale[m] (* alpha for
 * QGemm), of beta * the bias (value id, or -1 when there is none). *ok = false when it cannot be
 * represented (not a constant, a non-zero zero point, overflow). */
static kiln_status int_bias(kiln_graph *g, int bv, float xs, const kiln_tensor *ws, float alpha, float beta, int64_t M,
                            int *out, bool *ok)
{
    *out = -1;
    *ok = true;
    if (bv < 0)
        return KILN_OK;
    *ok = false;
    const kiln_tensor *b = cval(g, bv), *bi = NULL, *bs = NULL;
    if (!b) {   /* DQ(int32 constant, scale, zero point absent or 0) */
        int p = g->values[bv].producer;
        const kiln_node *d = p >= 0 ? &g->nodes[p] : NULL;
        if (!d || d->dead || d->op != KILN_OP_DequantizeLinear || d->n_in < 2)
            return KILN_OK;
        bi = cval(g, d->in[0]);
        bs = cval(g, d->in[1]);
        const kiln_tensor *bz = d->n_in > 2 ? cval(g, d->in[2]) : NULL;
        if (!bi || bi->dtype != KILN_DT_INT32 || numel(bi) != M || !bs || bs->dtype != KILN_DT_FLOAT32 ||
            (numel(bs) != 1 && numel(bs) != M) || (d->n_in > 2 && d->in[2] >= 0 && !bz))
            return KILN_OK;
        for (int64_t i = 0; bz && i < numel(bz); i++)
            if (kiln__get_i64(bz->dtype, bz->data, i) != 0)
                return KILN_OK;
    } else if (b->dtype != KILN_DT_FLOAT32 || numel(b) != M)
        return KILN_OK;
    kiln_tensor t;
    KILN_TRY(kiln__tensor_alloc(&t, KILN_DT_INT32, 1, &M));
    int32_t *q = t.data;
    for (int64_t m = 0; m < M; m++) {
        float s = xs * ((const float *)ws->data)[numel(ws) == 1 ? 0 : m] * alpha, f;
        if (bi) {
            float s2 = ((const float *)bs->data)[numel(bs) == 1 ? 0 : m];
            int32_t v = ((const int32_t *)bi->data)[m];
            if (s2 == s && beta == 1.f) {
                q[m] = v;
                continue;
            }
            f = (float)v * s2 * beta;
        } else
            f = ((const float *)b->data)[m] * beta;
        float r = rintf(f / s);
        if (!(fabsf(r) < KILN_QBIAS_MAX)) {
            kiln__tensor_release(&t);
            return KILN_OK;
        }
        q[m] = (int32_t)r;
    }
    *out = kiln__graph_add_const(g, g->values[bv].name, &t);
    if (*out < 0) {
        kiln__tensor_release(&t);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    *ok = true;
    return KILN_OK;
}

/* Replaces layer `core` (+ activation node `act`, -1 if none) and the Q `y` by `op` on inputs
 * in[0..n); a non-NONE `fa` is applied in float before requantization (kiln_act attributes). */
static kiln_status emit(kiln_graph *g, int core, int act, const kiln_fused_act *fa, const qp *y, kiln_op op, int n,
                        const int *in)
{
    KILN_TRY(kiln__move_node_into(g, core, y->node));
    kiln_node *f = &g->nodes[y->node];
    bool ms = op == KILN_OP_QGemm || op == KILN_OP_QLinearAdd;   /* com.microsoft, opset 1 */
    KILN_TRY(kiln__node_set_op(f, op, ms ? "com.microsoft" : "", ms ? 1 : f->opset));
    KILN_TRY(kiln__node_set_inputs(g, y->node, n, in));
    if (fa->kind != KILN_FUSED_NONE) {
        KILN_TRY(kiln__node_set_attr_s(&g->nodes[y->node], "kiln_act", kiln__fused_act_name(fa->kind)));
        KILN_TRY(kiln__node_set_attr_f(&g->nodes[y->node], "kiln_act_alpha", fa->alpha));
        KILN_TRY(kiln__node_set_attr_f(&g->nodes[y->node], "kiln_act_beta", fa->beta));
    }
    return act >= 0 ? kiln__absorb(g, y->node, act) : KILN_OK;
}

/* The shared part of QLinearConv and QLinearMatMul: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp. */
static kiln_status linear_inputs(kiln_graph *g, const qp *x, const qp *w, const qp *y, int *in)
{
    in[0] = x->x, in[1] = x->scale, in[3] = w->x, in[4] = w->scale, in[6] = y->scale;
    KILN_TRY(zp_value(g, x, &in[2]));
    KILN_TRY(zp_value(g, w, &in[5]));
    return zp_value(g, y, &in[7]);
}

/* Add node `add` = MatMul output + a constant 1-D float32 bias (either order), the MatMul's output
 * read by the Add alone: *mm = the MatMul node, *bias = the bias value. */
static bool matmul_bias_add(kiln_graph *g, int add, int *mm, int *bias)
{
    const kiln_node *a = &g->nodes[add];
    if (a->dead || a->op != KILN_OP_Add || a->n_in != 2 || a->n_out != 1 || a->out[0] < 0)
        return false;
    for (int k = 0; k < 2; k++) {
        int v = a->in[k], b = a->in[1 - k];
        const kiln_node *p = v >= 0 ? kiln__producer(g, v) : NULL;
        const kiln_tensor *t = b >= 0 ? cval(g, b) : NULL;
        if (!p || p->op != KILN_OP_MatMul || p->n_out != 1 || kiln__single_consumer(g, v) != add || !t ||
            t->dtype != KILN_DT_FLOAT32 || t->ndim != 1)
            continue;
        *mm = (int)(p - g->nodes);
        *bias = b;
        return true;
    }
    return false;
}

/* QLinearMatMul inputs of DQ(a_q) -> MatMul `core` (., DQ(b_q const)) with output parameters y and,
 * when bv >= 0, kiln's int32 bias input 8 made from the float bias bv (*n: 8 or 9 inputs);
 * *ok = false when the pattern does not hold. */
static kiln_status matmul_inputs(kiln_graph *g, int core, int bv, const qp *y, int *in, int *n, bool *ok)
{
    const kiln_node *c = &g->nodes[core];
    const kiln_tensor *wt = NULL;
    qp x, w;
    *ok = false;
    if (c->n_out != 1 || c->n_in < 2 || !dq_of(g, c->in[0], &x) || !dq_weight(g, c->in[1], 1, &w) ||
        !(wt = cval(g, w.x)) || (wt->ndim != 2 && (numel(w.s) != 1 || bv >= 0)))
        return KILN_OK;
    int bias = -1;
    KILN_TRY(int_bias(g, bv, *(const float *)x.s->data, w.s, 1.f, 1.f, bv >= 0 ? wt->dims[1] : 0, &bias, ok));
    if (!*ok)
        return KILN_OK;
    KILN_TRY(linear_inputs(g, &x, &w, y ? y : &x, in));
    in[8] = bias;
    *n = bias >= 0 ? 9 : 8;
    return KILN_OK;
}

static kiln_status fuse_layer(kiln_graph *g, int core, int act, const kiln_fused_act *fa, const qp *y, bool *done)
{
    const kiln_node *c = &g->nodes[core];
    qp x, w;
    int in[9], bias = -1, mm, n_in;
    *done = false;
    if (matmul_bias_add(g, core, &mm, &bias)) {
        /* DQ(a_q) -> MatMul(., DQ(b_q const)) -> Add(bias) [-> act] -> Q: QLinearMatMul + int32 bias */
        KILN_TRY(matmul_inputs(g, mm, bias, y, in, &n_in, done));
        if (!*done)
            return KILN_OK;
        KILN_TRY(emit(g, mm, act, fa, y, KILN_OP_QLinearMatMul, n_in, in));
        return kiln__absorb(g, y->node, core);
    }
    if (c->n_out != 1 || c->n_in < 2 || !dq_of(g, c->in[0], &x))
        return KILN_OK;
    if (c->op == KILN_OP_Conv) {
        bool ok;
        if (!dq_weight(g, c->in[1], 0, &w))
            return KILN_OK;
        const kiln_tensor *wt = cval(g, w.x);
        KILN_TRY(int_bias(g, c->n_in > 2 ? c->in[2] : -1, *(const float *)x.s->data, w.s, 1.f, 1.f, wt->dims[0], &bias, &ok));
        if (!ok)
            return KILN_OK;
        KILN_TRY(linear_inputs(g, &x, &w, y, in));
        in[8] = bias;
        KILN_TRY(emit(g, core, act, fa, y, KILN_OP_QLinearConv, bias >= 0 ? 9 : 8, in));
    } else if (c->op == KILN_OP_MatMul) {
        bool ok;
        KILN_TRY(matmul_inputs(g, core, -1, y, in, &n_in, &ok));
        if (!ok)
            return KILN_OK;
        KILN_TRY(emit(g, core, act, fa, y, KILN_OP_QLinearMatMul, n_in, in));
    } else if (c->op == KILN_OP_Gemm) {
        /* QGemm: alpha, transA and transB kept; beta folded into the int32 bias */
        bool ok, tb = kiln__attr_i(c, "transB", 0) != 0;
        const kiln_tensor *wt = NULL, *xt = cval(g, x.x);
        float alpha = kiln__attr_f(c, "alpha", 1.f), beta = kiln__attr_f(c, "beta", 1.f);
        if (xt || !dq_weight(g, c->in[1], tb ? 0 : 1, &w) || !(wt = cval(g, w.x)) || wt->ndim != 2 || !(alpha > 0))
            return KILN_OK;
        KILN_TRY(int_bias(g, c->n_in > 2 ? c->in[2] : -1, *(const float *)x.s->data, w.s, alpha, beta, wt->dims[tb ? 0 : 1],
                          &bias, &ok));
        if (!ok)
            return KILN_OK;
        KILN_TRY(linear_inputs(g, &x, &w, y, in));
        int qin[9] = {in[0], in[1], in[2], in[3], in[4], in[5], bias, in[6], in[7]};
        KILN_TRY(emit(g, core, act, fa, y, KILN_OP_QGemm, 9, qin));
        KILN_TRY(kiln__node_set_attr_f(&g->nodes[y->node], "beta", 1.f));
    } else if (c->op == KILN_OP_Add) {
        /* QLinearAdd: A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp (the same float operations
         * as the DQ / Add / activation / Q it replaces: src/backend/cpu/qadd.h) */
        qp b;
        if (c->n_in != 2 || !dq_of(g, c->in[1], &b))
            return KILN_OK;
        int ain[8] = {x.x, x.scale, -1, b.x, b.scale, -1, y->scale, -1};
        KILN_TRY(zp_value(g, &x, &ain[2]));
        KILN_TRY(zp_value(g, &b, &ain[5]));
        KILN_TRY(zp_value(g, y, &ain[7]));
        KILN_TRY(emit(g, core, act, fa, y, KILN_OP_QLinearAdd, 8, ain));
    } else
        return KILN_OK;
    *done = true;
    return KILN_OK;
}

/* Same quantization parameters (per tensor) on both nodes. */
static bool same_params(const kiln_graph *g, const qp *a, const qp *b)
{
    if (a->dt != b->dt || numel(a->s) != 1 || numel(b->s) != 1)
        return false;
    float sa = *(const float *)a->s->data, sb = *(const float *)b->s->data;
    int64_t za = a->z ? kiln__get_i64(a->dt, a->z->data, 0) : 0, zb = b->z ? kiln__get_i64(b->dt, b->z->data, 0) : 0;
    (void)g;
    return memcmp(&sa, &sb, sizeof sa) == 0 && za == zb;
}

/* Ops that commute with a per-tensor DQ/Q of one scale: they move or select elements. */
static bool moves_elements(const kiln_node *n)
{
    switch (n->op) {
    case KILN_OP_Reshape: case KILN_OP_Transpose: case KILN_OP_Flatten: case KILN_OP_Squeeze:
    case KILN_OP_Unsqueeze:
        return n->n_out == 1;
    case KILN_OP_MaxPool:   /* max commutes with a monotonic map; no indices output */
        return n->n_out == 1 || n->out[1] < 0;
    default:
        return false;
    }
}

/* Q y reads DQ d directly (pair dropped) or through an element-moving op (op runs on integers). */
static kiln_status drop_pair(kiln_graph *g, const qp *y, bool *done)
{
    *done = false;
    kiln_node *p = kiln__producer(g, y->x);
    qp d;
    if (!p)
        return KILN_OK;
    int pi = (int)(p - g->nodes);
    if (p->op == KILN_OP_DequantizeLinear) {
        if (!dq_of(g, y->x, &d) || !same_params(g, &d, y) || kiln__value_is_output(g, y->y))
            return KILN_OK;
        KILN_TRY(kiln__graph_replace_uses(g, y->y, d.x));
        kiln__node_kill(g, y->node);
        *done = true;
        return KILN_OK;
    }
    if (!moves_elements(p) || p->n_in < 1 || kiln__single_consumer(g, y->x) != y->node || !dq_of(g, p->in[0], &d) ||
        !same_params(g, &d, y))
        return KILN_OK;
    KILN_TRY(kiln__move_node_into(g, pi, y->node));
    KILN_TRY(kiln__node_set_input(g, y->node, 0, d.x));
    *done = true;
    return KILN_OK;
}

/* DQ(a_q) -> Gemm(., DQ(b_q const) [, C]) whose output stays float: QGemm without y_scale. */
static kiln_status float_gemm(kiln_graph *g, int i, bool *done)
{
    const kiln_node *c = &g->nodes[i];
    qp x, w;
    bool ok, tb = kiln__attr_i(c, "transB", 0) != 0;
    const kiln_tensor *wt = NULL;
    float alpha = kiln__attr_f(c, "alpha", 1.f), beta = kiln__attr_f(c, "beta", 1.f);
    int in[7], bias = -1;
    *done = false;
    if (c->n_out != 1 || c->n_in < 2 || !dq_of(g, c->in[0], &x) || cval(g, x.x) ||
        !dq_weight(g, c->in[1], tb ? 0 : 1, &w) || !(wt = cval(g, w.x)) || wt->ndim != 2 || !(alpha > 0))
        return KILN_OK;
    KILN_TRY(int_bias(g, c->n_in > 2 ? c->in[2] : -1, *(const float *)x.s->data, w.s, alpha, beta, wt->dims[tb ? 0 : 1],
                      &bias, &ok));
    if (!ok)
        return KILN_OK;
    in[0] = x.x, in[1] = x.scale, in[3] = w.x, in[4] = w.scale, in[6] = bias;
    KILN_TRY(zp_value(g, &x, &in[2]));
    KILN_TRY(zp_value(g, &w, &in[5]));
    kiln_node *n = &g->nodes[i];
    KILN_TRY(kiln__node_set_op(n, KILN_OP_QGemm, "com.microsoft", 1));
    KILN_TRY(kiln__node_set_attr_f(n, "beta", 1.f));
    KILN_TRY(kiln__node_set_inputs(g, i, bias >= 0 ? 7 : 6, in));
    *done = true;
    return KILN_OK;
}

/* DQ(a_q) -> MatMul(., DQ(b_q const)) -> Add(bias) whose sum stays float (node i: the Add):
 * QLinearMatMul with kiln's int32 bias and kiln_out_float, in the Add's slot. */
static kiln_status float_matmul(kiln_graph *g, int i, bool *done)
{
    int mm, bias, in[9], n_in;
    *done = false;
    if (!matmul_bias_add(g, i, &mm, &bias))
        return KILN_OK;
    KILN_TRY(matmul_inputs(g, mm, bias, NULL, in, &n_in, done));
    if (!*done)
        return KILN_OK;
    KILN_TRY(kiln__move_node_into(g, mm, i));
    KILN_TRY(kiln__node_set_op(&g->nodes[i], KILN_OP_QLinearMatMul, "", g->nodes[i].opset));
    KILN_TRY(kiln__node_set_inputs(g, i, n_in, in));
    return kiln__node_set_attr_i(&g->nodes[i], "kiln_out_float", 1);
}

/* Why compute layer c, which reads the model's DequantizeLinear but was not fused, stays float (NULL: it reads none):
 * the builder says it (KILN_ATTR_QDQ_UNFUSED, precision.c realize; PRECISION.md "Explicit quantization"). */
static const kiln_node *producer_of(const kiln_graph *g, int v)
{
    int p = v >= 0 && !g->values[v].init ? g->values[v].producer : -1;
    return p >= 0 && !g->nodes[p].dead ? &g->nodes[p] : NULL;
}

static const char *unfused_reason(const kiln_graph *g, const kiln_node *c)
{
    const kiln_node *xp = c->n_in > 0 ? producer_of(g, c->in[0]) : NULL;
    const kiln_node *wp = c->n_in > 1 ? producer_of(g, c->in[1]) : NULL;
    bool xdq = xp && xp->op == KILN_OP_DequantizeLinear, wdq = wp && wp->op == KILN_OP_DequantizeLinear;
    qp x, w;
    if (!xdq && !wdq)
        return NULL;
    if (!xdq)
        return "only its weight is dequantized (its input is float)";
    if (!dq_of(g, c->in[0], &x))
        return qdq_params(g, (int)(xp - g->nodes), KILN_OP_DequantizeLinear, &x) && numel(x.s) > 1
                   ? "its input is quantized per channel (an integer layer takes one scale for it)"
                   : "its input's quantization is not 8-bit with constant parameters";
    if (!wdq || !cval(g, wp->in[0]))
        return "its weight is not dequantized from a constant";
    int axis = c->op == KILN_OP_Conv ? 0 : c->op == KILN_OP_Gemm && kiln__attr_i(c, "transB", 0) ? 0 : 1;
    if (!dq_weight(g, c->in[1], axis, &w))
        return "its weight scales are neither per tensor nor per output channel, or not 8-bit";
    return "its output is not quantized by a QuantizeLinear (consumed in float) and no bias or pattern joins it";
}

kiln_status kiln__pass_fuse_qdq(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        qp y;
        bool done = false;
        if (!qdq_params(g, i, KILN_OP_QuantizeLinear, &y) || numel(y.s) != 1)
            continue;
        kiln_node *p = kiln__producer(g, y.x);
        int v = y.x, act = -1;
        kiln_fused_act fa = {.kind = KILN_FUSED_NONE};
        if (p && p->n_in >= 1 && kiln__single_consumer(g, v) == i && kiln__activation_of(g, p, &fa)) {
            if ((p->op == KILN_OP_Relu || p->op == KILN_OP_Clip) && act_implied(g, p, &y))
                fa.kind = KILN_FUSED_NONE;   /* the saturation does it */
            act = (int)(p - g->nodes);
            v = p->in[0];
            p = kiln__producer(g, v);
        }
        if (p && kiln__single_consumer(g, v) == (act >= 0 ? act : i))
            KILN_TRY(fuse_layer(g, (int)(p - g->nodes), act, &fa, &y, &done));
        if (!done)
            KILN_TRY(drop_pair(g, &y, &done));
        *changed += done;
    }
    for (int i = 0; i < g->n_nodes; i++) {   /* integer Gemms / MatMul + bias consumed in float */
        bool done = false;
        if (!g->nodes[i].dead && g->nodes[i].op == KILN_OP_Gemm)
            KILN_TRY(float_gemm(g, i, &done));
        else if (!g->nodes[i].dead && g->nodes[i].op == KILN_OP_Add)
            KILN_TRY(float_matmul(g, i, &done));
        *changed += done;
    }
    for (int i = 0; i < g->n_nodes; i++) {   /* Q/DQ-annotated layers left float: said by the builder */
        kiln_node *n = &g->nodes[i];
        const char *why = !n->dead && (n->op == KILN_OP_Conv || n->op == KILN_OP_MatMul || n->op == KILN_OP_Gemm)
                              ? unfused_reason(g, n) : NULL;
        if (why && !kiln__attr(n, KILN_ATTR_QDQ_UNFUSED))   /* the first look: later runs see DQ(weight) folded */
            KILN_TRY(kiln__node_set_attr_s(n, KILN_ATTR_QDQ_UNFUSED, why));
    }
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}
