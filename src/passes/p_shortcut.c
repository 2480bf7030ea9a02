/* fuse-shortcut: a residual block whose shortcut is a 1x1 convolution (ResNet's downsample)
 *   D = Conv(X2, Wd, Bd?) (1x1, any strides, no activation, read only by the FusedConv below)
 *   Y = FusedConv(X, W, B?, D) (1x1, stride 1)                 -> FusedConvSum(X, X2, [W | Wd], B + Bd)
 * with Y's activation: one GEMM over the stacked K writes Y without D ever reaching memory (k_convsum.c). Both
 * convolutions float32 (constant float32 weights, float32 activations, no precision requests or low-bit weight
 * formats), unpadded, undilated, one group. Not in the default pipeline: FusedConvSum is a CPU kernel, so the
 * builder runs this pass for CPU engines only, after the precision decisions (builder.c). */
#include "rewrite.h"

/* A 1x1, unpadded, undilated, one-group float32 convolution with constant float32 weights [M, C, 1...] and an
 * optional constant float32 bias of M elements; strides must all be 1 unless any_stride. */
static bool plain_1x1(const kiln_graph *g, const kiln_vshape *vs, const kiln_node *n, bool any_stride)
{
    if (n->precision != 0 || n->n_in < 2 || n->n_out != 1 || n->out[0] < 0 || n->in[0] < 0)
        return false;
    for (int a = 0; a < n->n_attr; a++)
        if (!strncmp(n->attrs[a].name, "kiln_", 5))
            return false;   /* precision requests, low-bit weight formats, FP8 marks */
    const kiln_tensor *w = kiln__const_of(g, n->in[1]);
    if (!w || w->dtype != KILN_DT_FLOAT32 || w->ndim < 3 || w->ndim > 4 || vs[n->in[0]].dtype != KILN_DT_FLOAT32)
        return false;
    for (int d = 2; d < w->ndim; d++)
        if (w->dims[d] != 1)
            return false;
    if (n->n_in > 2 && n->in[2] >= 0) {
        const kiln_tensor *b = kiln__const_of(g, n->in[2]);
        if (!b || b->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(b) != w->dims[0])
            return false;
    }
    const char *ap = kiln__attr_s(n, "auto_pad", "NOTSET");
    if (kiln__attr_i(n, "group", 1) != 1 || (strcmp(ap, "NOTSET") && strcmp(ap, "VALID")))
        return false;
    const int64_t *v;
    int c = kiln__attr_ints(n, "pads", &v);
    for (int i = 0; i < c; i++)
        if (v[i] != 0)
            return false;
    c = kiln__attr_ints(n, "dilations", &v);
    for (int i = 0; i < c; i++)
        if (v[i] != 1)
            return false;
    c = kiln__attr_ints(n, "strides", &v);
    if (c >= 0 && c != w->ndim - 2)
        return false;
    for (int i = 0; i < c; i++)
        if (v[i] < 1 || (!any_stride && v[i] != 1))
            return false;
    return true;
}

/* The node's bias (M floats) or NULL */
static const float *bias_of(const kiln_graph *g, const kiln_node *n)
{
    return n->n_in > 2 && n->in[2] >= 0 ? kiln__const_of(g, n->in[2])->data : NULL;
}

/* Rewrites node i (the FusedConv) and absorbs node d (the shortcut). */
static kiln_status fuse(kiln_graph *g, int i, int d)
{
    const kiln_node *n = &g->nodes[i], *s = &g->nodes[d];
    const kiln_tensor *w = kiln__const_of(g, n->in[1]), *wd = kiln__const_of(g, s->in[1]);
    const int64_t M = w->dims[0], C1 = w->dims[1], C2 = wd->dims[1];
    const int nsp = w->ndim - 2;
    int64_t dims[4] = {M, C1 + C2, 1, 1};
    kiln_tensor wc, bc;
    KILN_TRY(kiln__tensor_alloc(&wc, KILN_DT_FLOAT32, w->ndim, dims));
    float *o = wc.data;
    const float *w1 = w->data, *w2 = wd->data;
    for (int64_t m = 0; m < M; m++) {
        memcpy(o + m * (C1 + C2), w1 + m * C1, sizeof(float) * (size_t)C1);
        memcpy(o + m * (C1 + C2) + C1, w2 + m * C2, sizeof(float) * (size_t)C2);
    }
    int wv = kiln__graph_add_const(g, g->values[n->in[1]].name, &wc), bv = -1;
    if (wv < 0) {
        kiln__tensor_release(&wc);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    n = &g->nodes[i];
    s = &g->nodes[d];
    const float *b1 = bias_of(g, n), *b2 = bias_of(g, s);
    if (b1 || b2) {
        KILN_TRY(kiln__tensor_alloc(&bc, KILN_DT_FLOAT32, 1, &M));
        float *bo = bc.data;
        for (int64_t m = 0; m < M; m++)
            bo[m] = (b1 ? b1[m] : 0.0f) + (b2 ? b2[m] : 0.0f);
        bv = kiln__graph_add_const(g, g->values[b1 ? n->in[2] : s->in[2]].name, &bc);
        if (bv < 0) {
            kiln__tensor_release(&bc);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
    }
    n = &g->nodes[i];
    s = &g->nodes[d];
    int in[4] = {n->in[0], s->in[0], wv, bv};
    int64_t ones[2] = {1, 1};
    const int64_t *st;
    int ns = kiln__attr_ints(s, "strides", &st);
    int64_t strides[2] = {1, 1};
    for (int k = 0; k < ns && k < 2; k++)
        strides[k] = st[k];
    KILN_TRY(kiln__node_set_inputs(g, i, bv >= 0 ? 4 : 3, in));
    KILN_TRY(kiln__node_set_op(&g->nodes[i], KILN_OP_FusedConvSum, KILN_DOMAIN, g->nodes[i].opset));
    KILN_TRY(kiln__node_set_attr_ints(&g->nodes[i], "strides", nsp, strides));
    KILN_TRY(kiln__node_set_attr_ints(&g->nodes[i], "kernel_shape", nsp, ones));
    return kiln__absorb(g, i, d);
}

static kiln_status fuse_all(kiln_graph *g, const kiln_vshape *vs, int *changed)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead || n->op != KILN_OP_FusedConv || n->n_in != 4 || n->in[3] < 0 || !plain_1x1(g, vs, n, false))
            continue;
        int r = n->in[3], d = g->values[r].producer;
        if (d < 0 || kiln__single_consumer(g, r) != i)
            continue;
        const kiln_node *s = &g->nodes[d];
        bool shortcut_ok = !s->dead && (s->op == KILN_OP_Conv || s->op == KILN_OP_FusedConv) &&
                           (s->n_in <= 3 || s->in[3] < 0) && !kiln__attr_s(s, "activation", NULL) &&
                           plain_1x1(g, vs, s, true);
        if (!shortcut_ok)
            continue;
        const kiln_tensor *w = kiln__const_of(g, n->in[1]), *wd = kiln__const_of(g, s->in[1]);
        if (wd->ndim != w->ndim || wd->dims[0] != w->dims[0] || !kiln__vshape_same(&vs[r], &vs[n->out[0]]))
            continue;
        KILN_TRY(fuse(g, i, d));
        (*changed)++;
    }
    return KILN_OK;
}

kiln_status kiln__pass_fuse_shortcut(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    return kiln__pass_with_shapes(g, fuse_all, changed);
}
