/* fuse-qconv-add: an INT8 residual block's end, the block's last convolution and the QLinearAdd of its shortcut
 *   Y = QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B?)      (quantized output, read only by the add)
 *   C = QLinearAdd(Y, ys, yz, R, rs, rz?, cs, cz?) [kiln_act]    (Y as either operand; the add reads Y with the
 *                                                                 convolution's own scale and zero point)
 *   -> C = QLinearConvAdd(x, xs, xz, w, ws, wz, ys, yz, B?, R, rs, rz?, cs, cz?) with kiln_res_act = the add's
 * Y and R of one inferred shape. The fused layer computes exactly the two layers' bytes (cpu/qadd.h kiln__qconv_add).
 * Where kiln's own calibration quantized both (implicit INT8: KILN_ATTR_Q_AUTO on each) the block is fused with one
 * rounding instead, as TensorRT fuses it:
 *   -> C = QLinearConvAdd(x, xs, xz, w, ws, wz, cs, cz, B?, R, rs, rz?) with kiln_res_once = 1, kiln_act = the add's
 * (Y's scale and its rounding gone: the convolution's sum plus R requantized once, docs/OPS.md);
 * on the GPU its epilogue adds R while Y is in registers, so Y never reaches memory (ResNet-50 INT8: one write and one
 * read of each block's output less). Not in the default pipeline: the builder runs it for device engines, after the
 * precision decisions (builder.c), and for CPU engines its one-rounding part alone where the convolution is pointwise
 * (fuse-qconv-once: the CPU's INT8 GEMM adds R in its epilogue); KILN_QCONV_ADD=0 at build time leaves the pairs apart.
 * Device engines then take a one-rounding block's 1x1 shortcut convolution in too (QLinearConvSum, fuse_sum below;
 * KILN_QCONV_SUM=0 leaves it apart). */
#include "rewrite.h"
#include "../core/numfmt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether value ids a and b hold the same scalar: one value, or two constants of equal dtype and bytes (absent: both
 * absent) */
static bool same_scalar(const kiln_graph *g, int a, int b)
{
    if (a == b)
        return true;
    if (a < 0 || b < 0)
        return false;
    const kiln_tensor *x = kiln__const_of(g, a), *y = kiln__const_of(g, b);
    return x && y && x->dtype == y->dtype && kiln_tensor_numel(x) == 1 && kiln_tensor_numel(y) == 1 &&
           x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes);
}

/* The QLinearConv node producing operand k (0 or 3) of add node i that fuses with it, or -1 */
static int fusable_conv(const kiln_graph *g, const kiln_vshape *vs, int i, int k)
{
    const kiln_node *a = &g->nodes[i];
    int y = a->in[k], r = a->in[3 - k];
    if (y < 0 || r < 0 || y == r)
        return -1;
    int c = g->values[y].producer;
    if (c < 0 || kiln__single_consumer(g, y) != i)
        return -1;
    const kiln_node *n = &g->nodes[c];
    if (n->dead || n->op != KILN_OP_QLinearConv || n->n_out != 1 || n->n_in < 8 || n->n_in > 9 ||
        kiln__attr_i(n, "kiln_out_float", 0) || kiln__in_at(n, 7) < 0)
        return -1;
    /* the add reads Y with the convolution's own quantization (what kiln__qconv_add assumes) */
    if (!same_scalar(g, kiln__in_at(n, 6), a->in[k + 1]) || !same_scalar(g, kiln__in_at(n, 7), kiln__in_at(a, k + 2)))
        return -1;
    return kiln__vshape_same(&vs[y], &vs[r]) ? c : -1;
}

/* The build-time switches, each on unless set to 0: KILN_QCONV_ADD (every fusion here), KILN_QCONV_ADD_ONCE (0: implicit
 * INT8 blocks fused with two roundings too), KILN_QCONV_ADD_FLOAT (0: the float tails apart), KILN_QCONV_SUM (0: the
 * shortcut convolutions apart) */
static bool env_on(const char *name)
{
    const char *e = getenv(name);
    return !e || strcmp(e, "0");
}

/* Every value of ints attribute `name` of n is v (none: true) */
static bool ints_all(const kiln_node *n, const char *name, int64_t v)
{
    const kiln_attr *a = kiln__attr(n, name);
    for (int i = 0; a && a->ints && i < a->n; i++)
        if (a->ints[i] != v)
            return false;
    return true;
}

/* No padding: pads all 0, auto_pad none, NOTSET or VALID */
static bool unpadded(const kiln_node *n)
{
    const char *ap = kiln__attr_s(n, "auto_pad", NULL);
    return ints_all(n, "pads", 0) && (!ap || !ap[0] || !strcmp(ap, "NOTSET") || !strcmp(ap, "VALID"));
}

/* One rounding (kiln_res_once) for convolution n and add a: both quantized by kiln's own calibration (KILN_ATTR_Q_AUTO:
 * implicit INT8, never a model's Q/DQ), the convolution without an activation, the add's none, Relu or Clip (min <= max),
 * its C_zero_point present (the fused layer's output type) */
static bool fuse_once(const kiln_node *n, const kiln_node *a)
{
    const char *ca = kiln__attr_s(n, "kiln_act", NULL), *aa = kiln__attr_s(a, "kiln_act", NULL);
    bool lin = !aa || !aa[0] || !strcmp(aa, "Relu") ||
               (!strcmp(aa, "Clip") && kiln__attr_f(a, "kiln_act_alpha", 0) <= kiln__attr_f(a, "kiln_act_beta", 0));
    return env_on("KILN_QCONV_ADD_ONCE") && kiln__attr_i(n, KILN_ATTR_Q_AUTO, 0) == 1 && kiln__attr_i(a, KILN_ATTR_Q_AUTO, 0) == 1 &&
           (!ca || !ca[0]) && lin && kiln__in_at(a, 7) >= 0;
}

/* Moves convolution c into add node i's slot (it reads its operands there: R may be computed after c), with the
 * add's activation (kiln_act*) as kiln_res_act*; or, one rounding (fuse_once), the add's output quantization and
 * activation as the convolution's own (kiln_act*) and kiln_res_once */
static kiln_status fuse(kiln_graph *g, int i, int c, int k)
{
    const kiln_node *a = &g->nodes[i], *n = &g->nodes[c];
    int rk = 3 - k;
    bool once = fuse_once(n, a);
    int in[14] = {n->in[0], n->in[1], n->in[2], n->in[3], n->in[4], n->in[5], n->in[6], n->in[7], kiln__in_at(n, 8),
                  a->in[rk], a->in[rk + 1], kiln__in_at(a, rk + 2), a->in[6], kiln__in_at(a, 7)};
    int nin = once ? 12 : in[13] >= 0 ? 14 : 13;
    if (once)
        in[6] = a->in[6], in[7] = a->in[7];
    /* the add's activation, read before the move replaces the node */
    const char *s = kiln__attr_s(a, "kiln_act", NULL);
    char *act = s && s[0] ? kiln__strdup(s) : NULL;
    if (s && s[0] && !act)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    bool has_a = kiln__attr(a, "kiln_act_alpha") != NULL, has_b = kiln__attr(a, "kiln_act_beta") != NULL;
    float alpha = kiln__attr_f(a, "kiln_act_alpha", 0), beta = kiln__attr_f(a, "kiln_act_beta", 0);
    kiln_status st = kiln__move_node_into(g, c, i);
    kiln_node *f = &g->nodes[i];
    if (st == KILN_OK)
        st = kiln__node_set_inputs(g, i, nin, in);
    if (st == KILN_OK)
        st = kiln__node_set_op(f, KILN_OP_QLinearConvAdd, KILN_DOMAIN, f->opset);
    const char *pre = once ? "kiln_act" : "kiln_res_act";
    char an[32];
    if (st == KILN_OK && once)
        st = kiln__node_set_attr_i(f, "kiln_res_once", 1);
    if (st == KILN_OK && act)
        st = kiln__node_set_attr_s(f, pre, act);
    snprintf(an, sizeof an, "%s_alpha", pre);
    if (st == KILN_OK && act && has_a)
        st = kiln__node_set_attr_f(f, an, alpha);
    snprintf(an, sizeof an, "%s_beta", pre);
    if (st == KILN_OK && act && has_b)
        st = kiln__node_set_attr_f(f, an, beta);
    kiln__free(act);
    return st;
}

/* The float tail: Y = QLinearConv(...) (quantized, read only by DQY), A = DequantizeLinear(Y, ys, yz) with the
 * convolution's own y_scale / y_zero_point (read only by the add), S = Add(A, DequantizeLinear(R, rs, rz?)) of
 * float32 values (either order), optionally O = Relu(S) as S's only reader
 *   -> O = QLinearConvAdd(x, xs, xz, w, ws, wz, ys, yz, B?, R, rs, rz?) with kiln_res_float = 1 (and kiln_res_act
 *      Relu): the graph's float32 operations, done in the convolution's epilogue (ResNet-50's last block, whose sum
 *      goes to the global average pool, ran as five layers). Add node i, its operand k (0 or 1). */
static int dq_scalar(const kiln_graph *g, const kiln_vshape *vs, int v, const kiln_node **dq)
{
    int p = v >= 0 ? g->values[v].producer : -1;
    if (p < 0)
        return -1;
    const kiln_node *d = &g->nodes[p];
    if (d->dead || d->op != KILN_OP_DequantizeLinear || d->n_in < 2 || d->n_out != 1 || vs[v].dtype != KILN_DT_FLOAT32)
        return -1;
    const kiln_tensor *s = kiln__const_of(g, d->in[1]), *z = kiln__in_at(d, 2) >= 0 ? kiln__const_of(g, d->in[2]) : NULL;
    kiln_dtype xdt = vs[d->in[0]].dtype;
    /* (a scale finite and > 0, as the fused kernel's operands must be: cpu/ref/k_qadd.c scale_in) */
    if (!s || s->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(s) != 1 || !(*(const float *)s->data > 0) ||
        !isfinite(*(const float *)s->data) ||
        (kiln__in_at(d, 2) >= 0 && (!z || kiln_tensor_numel(z) != 1 || z->dtype != xdt)) ||
        (xdt != KILN_DT_UINT8 && xdt != KILN_DT_INT8))
        return -1;
    *dq = d;
    return p;
}

static kiln_status fuse_tail(kiln_graph *g, const kiln_vshape *vs, int i, int *changed)
{
    const kiln_node *a = &g->nodes[i];
    const char *aact = kiln__attr_s(a, "kiln_act", NULL);   /* a Relu fused into the add already */
    bool arelu = aact && !strcmp(aact, "Relu");
    if (a->n_in != 2 || a->n_out != 1 || vs[a->out[0]].dtype != KILN_DT_FLOAT32 || (aact && aact[0] && !arelu))
        return KILN_OK;
    for (int k = 0; k < 2; k++) {
        const kiln_node *dy, *dr;
        int py = dq_scalar(g, vs, a->in[k], &dy), pr = dq_scalar(g, vs, a->in[1 - k], &dr);
        if (py < 0 || pr < 0 || py == pr || kiln__single_consumer(g, a->in[k]) != i)
            continue;
        int y = dy->in[0], r = dr->in[0];
        int c = g->values[y].producer;
        if (c < 0 || kiln__single_consumer(g, y) != py || y == r || !kiln__vshape_same(&vs[y], &vs[r]))
            continue;
        const kiln_node *n = &g->nodes[c];
        if (n->dead || n->op != KILN_OP_QLinearConv || n->n_out != 1 || n->n_in < 8 || n->n_in > 9 ||
            kiln__attr_i(n, "kiln_out_float", 0) || kiln__in_at(n, 7) < 0 || !same_scalar(g, kiln__in_at(n, 6), dy->in[1]) ||
            !same_scalar(g, kiln__in_at(n, 7), kiln__in_at(dy, 2)))
            continue;
        /* the Relu after the sum, where it is the sum's only reader */
        int o = i, ro = arelu ? -1 : kiln__single_consumer(g, a->out[0]);
        if (ro >= 0 && g->nodes[ro].op == KILN_OP_Relu && g->nodes[ro].n_in == 1 && !g->nodes[ro].dead)
            o = ro;
        int in[12] = {n->in[0], n->in[1], n->in[2], n->in[3], n->in[4], n->in[5], n->in[6], n->in[7], kiln__in_at(n, 8),
                      r, dr->in[1], kiln__in_at(dr, 2)};
        bool r_shared = kiln__single_consumer(g, a->in[1 - k]) != i;
        /* the float output's storage on the GPU (--float-activations), as the DequantizeLinear of Y had it */
        char half[8] = "";
        const char *h = kiln__attr_s(dy, KILN_ATTR_HALF_OUT, NULL);
        if (h)
            snprintf(half, sizeof half, "%s", h);
        KILN_TRY(kiln__move_node_into(g, c, o));
        kiln_node *f = &g->nodes[o];
        KILN_TRY(kiln__node_set_inputs(g, o, 12, in));
        KILN_TRY(kiln__node_set_op(f, KILN_OP_QLinearConvAdd, KILN_DOMAIN, f->opset));
        KILN_TRY(kiln__node_set_attr_i(f, "kiln_res_float", 1));
        if (half[0])
            KILN_TRY(kiln__node_set_attr_s(f, KILN_ATTR_HALF_OUT, half));
        if (o != i || arelu)
            KILN_TRY(kiln__node_set_attr_s(f, "kiln_res_act", "Relu"));
        if (o != i)
            KILN_TRY(kiln__absorb(g, o, i));
        KILN_TRY(kiln__absorb(g, o, py));
        if (!r_shared)
            KILN_TRY(kiln__absorb(g, o, pr));
        (*changed)++;
        return KILN_OK;
    }
    return KILN_OK;
}

/* Convolution n is pointwise: one group, a 1x1 filter, stride 1, no padding (its output's spatial dims its input's):
 * what the CPU's INT8 GEMM adds a residual to in its epilogue (cpu/qgemm_ops.c) */
static bool pointwise(const kiln_graph *g, const kiln_vshape *vs, const kiln_node *n)
{
    const kiln_tensor *w = n->in[3] >= 0 ? kiln__const_of(g, n->in[3]) : NULL;
    const kiln_vshape *x = &vs[n->in[0]], *y = &vs[n->out[0]];
    if (!w || w->ndim < 3 || kiln__attr_i(n, "group", 1) != 1 || x->rank != w->ndim ||
        y->rank != x->rank)
        return false;
    for (int d = 2; d < w->ndim; d++)
        if (w->dims[d] != 1 || x->dims[d] < 0 || x->dims[d] != y->dims[d])
            return false;
    return ints_all(n, "strides", 1) && unpadded(n);
}

/* once_only (CPU engines): only the pairs one rounding fuses, with a pointwise convolution; else (device engines) every
 * pair, and the float tails */
static kiln_status fuse_mode(kiln_graph *g, const kiln_vshape *vs, int *changed, bool once_only)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *a = &g->nodes[i];
        if (!once_only && !a->dead && a->op == KILN_OP_Add && env_on("KILN_QCONV_ADD_FLOAT"))
            KILN_TRY(fuse_tail(g, vs, i, changed));
        if (a->dead || a->op != KILN_OP_QLinearAdd || a->n_in < 7 || a->n_out != 1)
            continue;
        for (int k = 0; k <= 3; k += 3) {
            int c = fusable_conv(g, vs, i, k);
            if (c >= 0 && once_only && (!fuse_once(&g->nodes[c], a) || !pointwise(g, vs, &g->nodes[c])))
                continue;
            if (c >= 0) {
                KILN_TRY(fuse(g, i, c, k));
                (*changed)++;
                break;
            }
        }
    }
    return KILN_OK;
}

static kiln_status fuse_all(kiln_graph *g, const kiln_vshape *vs, int *changed) { return fuse_mode(g, vs, changed, false); }
static kiln_status fuse_once_all(kiln_graph *g, const kiln_vshape *vs, int *changed)
{
    return fuse_mode(g, vs, changed, true);
}

/* The shortcut's convolution summed in (device engines, after the pairs above): a one-rounding QLinearConvAdd i whose R
 * is the output of a QLinearConv D read by nothing else --
 *   R = QLinearConv(x2, x2s, x2z, w2, w2s, w2z, rs, rz, B2?)     (1x1, no padding, one group, strides s, no activation,
 *                                                                  kiln's own quantization: KILN_ATTR_Q_AUTO)
 *   C = QLinearConvAdd(x, xs, xz, w, ws, wz, cs, cz, B?, R, rs, rz?) with kiln_res_once
 *   -> C = QLinearConvSum(x, xs, xz, w, ws, wz, cs, cz, B?, x2, x2s, x2z, w2, w2s, w2z, B2?), kiln_sum_strides = s:
 * R's rounding gone too (both products requantized to C's scale, summed in float32, rounded once: docs/OPS.md), and R
 * (a block's whole output in bytes) is never written nor read. x2 of x's type (the GPU's kernels read both alike). */
static bool pad_free_1x1(const kiln_graph *g, const kiln_node *d)
{
    const kiln_tensor *w = kiln__in_at(d, 3) >= 0 ? kiln__const_of(g, d->in[3]) : NULL;
    if (!w || w->ndim != 4 || w->dims[2] != 1 || w->dims[3] != 1 || kiln__attr_i(d, "group", 1) != 1)
        return false;
    const kiln_attr *st = kiln__attr(d, "strides");
    if (st && (!st->ints || st->n != 2 || st->ints[0] < 1 || st->ints[1] < 1))
        return false;
    return ints_all(d, "dilations", 1) && unpadded(d);
}

static kiln_status fuse_sum(kiln_graph *g, const kiln_vshape *vs, int i, int *changed)
{
    const kiln_node *f = &g->nodes[i];
    if (f->dead || f->op != KILN_OP_QLinearConvAdd || kiln__attr_i(f, "kiln_res_once", 0) != 1 || f->n_in != 12 ||
        f->n_out != 1)
        return KILN_OK;
    int r = f->in[9], p = r >= 0 ? g->values[r].producer : -1;
    if (p < 0 || kiln__single_consumer(g, r) != i)
        return KILN_OK;
    const kiln_node *d = &g->nodes[p];
    const char *da = kiln__attr_s(d, "kiln_act", NULL);
    if (d->dead || d->op != KILN_OP_QLinearConv || d->n_out != 1 || d->n_in < 8 || d->n_in > 9 ||
        kiln__attr_i(d, "kiln_out_float", 0) || kiln__attr_i(d, KILN_ATTR_Q_AUTO, 0) != 1 || (da && da[0]) ||
        !pad_free_1x1(g, d) || vs[d->in[0]].dtype != vs[f->in[0]].dtype ||
        !same_scalar(g, kiln__in_at(d, 6), f->in[10]) || !same_scalar(g, kiln__in_at(d, 7), kiln__in_at(f, 11)))
        return KILN_OK;
    const kiln_attr *st = kiln__attr(d, "strides");
    int64_t strides[2] = {st ? st->ints[0] : 1, st ? st->ints[1] : 1};
    int in[16] = {f->in[0], f->in[1], f->in[2], f->in[3], f->in[4], f->in[5], f->in[6], f->in[7], kiln__in_at(f, 8),
                  d->in[0], d->in[1], kiln__in_at(d, 2), d->in[3], d->in[4], kiln__in_at(d, 5), kiln__in_at(d, 8)};
    KILN_TRY(kiln__node_set_inputs(g, i, in[15] >= 0 ? 16 : 15, in));
    kiln_node *n = &g->nodes[i];
    KILN_TRY(kiln__node_set_op(n, KILN_OP_QLinearConvSum, KILN_DOMAIN, n->opset));
    kiln__node_drop_attr(n, "kiln_res_once");
    KILN_TRY(kiln__node_set_attr_ints(n, "kiln_sum_strides", 2, strides));
    KILN_TRY(kiln__absorb(g, i, p));
    (*changed)++;
    return KILN_OK;
}

static kiln_status fuse_sum_all(kiln_graph *g, const kiln_vshape *vs, int *changed)
{
    for (int i = 0; i < g->n_nodes; i++)
        KILN_TRY(fuse_sum(g, vs, i, changed));
    return KILN_OK;
}

kiln_status kiln__pass_fuse_qconv_add(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    *changed = 0;
    if (!env_on("KILN_QCONV_ADD"))
        return KILN_OK;
    KILN_TRY(kiln__pass_with_shapes(g, fuse_all, changed));
    int sums = 0;
    if (*changed && env_on("KILN_QCONV_SUM"))
        KILN_TRY(kiln__pass_with_shapes(g, fuse_sum_all, &sums));
    *changed += sums;
    return KILN_OK;
}

kiln_status kiln__pass_fuse_qconv_once(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    *changed = 0;
    /* (every CPU build runs this pass: shapes are inferred only for a graph with an add kiln quantized) */
    bool any = false;
    for (int i = 0; i < g->n_nodes && !any; i++)
        any = !g->nodes[i].dead && g->nodes[i].op == KILN_OP_QLinearAdd && kiln__attr_i(&g->nodes[i], KILN_ATTR_Q_AUTO, 0) == 1;
    return any && env_on("KILN_QCONV_ADD") && env_on("KILN_QCONV_ADD_ONCE") ? kiln__pass_with_shapes(g, fuse_once_all, changed) : KILN_OK;
}
