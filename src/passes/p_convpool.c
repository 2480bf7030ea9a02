/* fuse-conv-pool: a network's stem and its max pool as one layer for the GPU
 *   Y = FusedConv(X, W, B?) [Relu or none]   (read only by the pool)
 *   P = MaxPool(Y)
 *   Q = QuantizeLinear(P, s, z?)             (optional: one scale and zero point, P read only by it)
 *   -> FusedConvPool(X, W, B?[, s, z?]) with kiln_pool_kernel / kiln_pool_strides / kiln_pool_pads = the pool's
 * exactly where the CUDA module's kernel takes it (kernels_stem.cu): <= 4 input channels, a 7x7 stride-2 filter padded
 * by 3 in FP16 / BF16 (the layer's precision), one group, a multiple of 64 output channels; a 3x3 stride-2 pool padded
 * by 1. The convolution's output (4x the pool's) never reaches memory, nor the pool's float output before the
 * quantization (ResNet-50 INT8: three layers in one). The fused layer computes the same values as the layers it
 * replaces (ref/k_convpool.c runs them in turn); max then quantize equals quantize then max, rounding being monotone.
 * Not in the default pipeline: the builder runs it for device engines after the precision decisions (builder.c); not
 * where the pool writes an FP8 feed (fp8_feed.c: its FP8 readers keep theirs); KILN_CONV_POOL=0 at build time leaves
 * the layers apart. */
#include "rewrite.h"
#include "../core/numfmt.h"
#include <stdlib.h>
#include <string.h>

/* ints attribute `name` of n is exactly v[0..k) (absent: def_ok) */
static bool ints_are(const kiln_node *n, const char *name, int k, const int64_t *v, bool def_ok)
{
    const kiln_attr *a = kiln__attr(n, name);
    if (!a)
        return def_ok;
    if (a->type != KILN_ATTR_INTS || a->n != k)
        return false;
    for (int i = 0; i < k; i++)
        if (a->ints[i] != v[i])
            return false;
    return true;
}

static bool no_auto_pad(const kiln_node *n)
{
    const char *ap = kiln__attr_s(n, "auto_pad", NULL);
    return !ap || !ap[0] || !strcmp(ap, "NOTSET");
}

/* The convolution the kernel takes: 7x7 stride 2 pad 3 over <= 4 channels of a float32 4-D X, a constant FP16 / BF16
 * filter with a multiple of 64 output channels, one group, no residual, Relu or no activation, no low-bit format */
static bool stem_conv(const kiln_graph *g, const kiln_vshape *vs, const kiln_node *c)
{
    static const int64_t one[2] = {1, 1}, two[2] = {2, 2}, seven[2] = {7, 7}, three[4] = {3, 3, 3, 3};
    if (c->dead || c->op != KILN_OP_FusedConv || c->n_out != 1 || c->n_in < 2 || kiln__in_at(c, 3) >= 0 || c->in[0] < 0 ||
        c->in[1] < 0)
        return false;
    const kiln_tensor *w = kiln__const_of(g, c->in[1]);
    const kiln_vshape *x = &vs[c->in[0]];
    const char *act = kiln__attr_s(c, "kiln_act", NULL);
    return w && (w->dtype == KILN_DT_FLOAT16 || w->dtype == KILN_DT_BFLOAT16) && w->ndim == 4 && w->dims[1] >= 1 &&
           w->dims[1] <= 4 && w->dims[2] == 7 && w->dims[3] == 7 && w->dims[0] > 0 && w->dims[0] % 64 == 0 &&
           x->rank == 4 && x->dtype == KILN_DT_FLOAT32 && kiln__attr_i(c, "group", 1) == 1 &&
           ints_are(c, "strides", 2, two, false) && ints_are(c, "pads", 4, three, false) &&
           ints_are(c, "dilations", 2, one, true) && ints_are(c, "kernel_shape", 2, seven, true) && no_auto_pad(c) &&
           (!act || !act[0] || !strcmp(act, "Relu")) && !kiln__attr(c, KILN_ATTR_WQ) && !kiln__attr(c, KILN_ATTR_AQ);
}

/* The pool the kernel takes: MaxPool 3x3 stride 2 pad 1, floor, no dilation, no Indices, no FP8 feed */
static bool stem_pool(const kiln_node *m)
{
    static const int64_t one[2] = {1, 1}, two[2] = {2, 2}, three[2] = {3, 3}, pads[4] = {1, 1, 1, 1};
    return !m->dead && m->op == KILN_OP_MaxPool && m->n_in == 1 && (m->n_out == 1 || m->out[1] < 0) &&
           ints_are(m, "kernel_shape", 2, three, false) && ints_are(m, "strides", 2, two, false) &&
           ints_are(m, "pads", 4, pads, false) && ints_are(m, "dilations", 2, one, true) &&
           kiln__attr_i(m, "ceil_mode", 0) == 0 && no_auto_pad(m) && !kiln__attr(m, KILN_ATTR_FP8_FEED);
}

/* QuantizeLinear q of P with one float32 scale and an 8-bit zero point (or none) */
static bool per_tensor_q(const kiln_graph *g, const kiln_node *q)
{
    const kiln_tensor *s = q->n_in > 1 && q->in[1] >= 0 ? kiln__const_of(g, q->in[1]) : NULL;
    int zv = kiln__in_at(q, 2);
    const kiln_tensor *z = zv >= 0 ? kiln__const_of(g, zv) : NULL;
    return !q->dead && q->op == KILN_OP_QuantizeLinear && q->n_out == 1 && s && s->dtype == KILN_DT_FLOAT32 &&
           kiln_tensor_numel(s) == 1 && (zv < 0 || (z && kiln_tensor_numel(z) == 1 &&
                                                    (z->dtype == KILN_DT_UINT8 || z->dtype == KILN_DT_INT8))) &&
           kiln__attr_i(q, "block_size", 0) == 0 && kiln__attr_i(q, "output_dtype", 0) == 0;
}

static kiln_status fuse_at(kiln_graph *g, const kiln_vshape *vs, int i, int *changed)
{
    const kiln_node *c = &g->nodes[i];
    if (!stem_conv(g, vs, c))
        return KILN_OK;
    int mi = kiln__single_consumer(g, c->out[0]);
    if (mi < 0 || !stem_pool(&g->nodes[mi]))
        return KILN_OK;
    int qi = g->nodes[mi].out[0] >= 0 ? kiln__single_consumer(g, g->nodes[mi].out[0]) : -1;
    if (qi >= 0 && !per_tensor_q(g, &g->nodes[qi]))
        qi = -1;
    int last = qi >= 0 ? qi : mi;
    int in[5] = {c->in[0], c->in[1], kiln__in_at(c, 2), qi >= 0 ? g->nodes[qi].in[1] : -1,
                 qi >= 0 ? kiln__in_at(&g->nodes[qi], 2) : -1};
    int nin = qi < 0 ? (in[2] >= 0 ? 3 : 2) : in[4] >= 0 ? 5 : 4;
    static const int64_t k[2] = {3, 3}, s[2] = {2, 2}, p[4] = {1, 1, 1, 1};
    if (qi >= 0)
        KILN_TRY(kiln__absorb(g, i, mi));
    KILN_TRY(kiln__move_node_into(g, i, last));
    KILN_TRY(kiln__node_set_inputs(g, last, nin, in));
    kiln_node *f = &g->nodes[last];
    KILN_TRY(kiln__node_set_op(f, KILN_OP_FusedConvPool, KILN_DOMAIN, f->opset));
    KILN_TRY(kiln__node_set_attr_ints(f, "kiln_pool_kernel", 2, k));
    KILN_TRY(kiln__node_set_attr_ints(f, "kiln_pool_strides", 2, s));
    KILN_TRY(kiln__node_set_attr_ints(f, "kiln_pool_pads", 4, p));
    (*changed)++;
    return KILN_OK;
}

static kiln_status fuse_all(kiln_graph *g, const kiln_vshape *vs, int *changed)
{
    for (int i = 0; i < g->n_nodes; i++)
        KILN_TRY(fuse_at(g, vs, i, changed));
    return KILN_OK;
}

kiln_status kiln__pass_fuse_conv_pool(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    *changed = 0;
    const char *e = getenv("KILN_CONV_POOL");
    if (e && !strcmp(e, "0"))
        return KILN_OK;
    return kiln__pass_with_shapes(g, fuse_all, changed);
}
