/* FusedConvPool(X, W, B?, y_scale?, y_zero_point?) = QuantizeLinear?(MaxPool(FusedConv(X, W, B))): a network's stem
 * and its max pool as one layer (passes/p_convpool.c) for the GPU's kernel (kernels_stem.cu). Here the three kernels
 * in turn, the layers it replaces: FusedConv's attributes are the node's own, the pool's kiln_pool_kernel /
 * kiln_pool_strides / kiln_pool_pads. */
#include "../../kernel.h"
#include "../cpu_kernels.h"
#include "../fused.h"
#include <string.h>

/* Runs kernel op on in[0..n_in) with node n's attributes into a fresh heap tensor *out */
static kiln_status run(kiln_kctx *ctx, const kiln_node *n, kiln_op op, int n_in, const kiln_tensor *const *in,
                       kiln_tensor *out)
{
    kiln_tensor *o[1] = {out};
    memset(out, 0, sizeof *out);
    kiln_kctx sub = {.node = n, .n_in = n_in, .in = in, .n_out = 1, .out = o, .pool = ctx->pool,
                     .nthreads = ctx->nthreads};
    return kiln__ref_kernel(op)(&sub);
}

kiln_status kiln__fused_conv_pool(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, 1), *scale = kiln__kin(ctx, 3);
    if (!x || !w)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "needs X and W");
    if (!scale && kiln__kin(ctx, 4))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "y_zero_point without y_scale");
    const int64_t *k, *s, *p;
    if (kiln__attr_ints(ctx->node, "kiln_pool_kernel", &k) != 2 ||
        kiln__attr_ints(ctx->node, "kiln_pool_strides", &s) != 2 || kiln__attr_ints(ctx->node, "kiln_pool_pads", &p) != 4)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG,
                          "kiln_pool_kernel, kiln_pool_strides (2 values) and kiln_pool_pads (4) are required");
    if (x->ndim != 4)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "a 2-D convolution (X of rank 4), got rank %d", x->ndim);
    const kiln_tensor *cin[3] = {x, w, kiln__kin(ctx, 2)};
    kiln_tensor conv, pooled;
    /* the node as the FusedConv it replaces: kernels that look at the op (BF16 weights take the BF16 GEMM only in a
     * Conv / FusedConv) compute exactly what the unfused layer did */
    kiln_node cn = *ctx->node;
    cn.op = KILN_OP_FusedConv;
    kiln_status st = run(ctx, &cn, KILN_OP_FusedConv, ctx->n_in < 3 ? ctx->n_in : 3, cin, &conv);
    if (st != KILN_OK)
        return st;
    kiln_attr pa[3] = {
        {.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = 2, .ints = (int64_t *)k},
        {.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = 2, .ints = (int64_t *)s},
        {.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = (int64_t *)p},
    };
    kiln_node pn = {.name = ctx->node->name, .op_type = (char *)"MaxPool", .domain = (char *)"", .op = KILN_OP_MaxPool,
                    .opset = 12, .n_in = 1, .n_out = 1, .n_attr = 3, .attrs = pa};
    const kiln_tensor *pin[1] = {&conv};
    st = run(ctx, &pn, KILN_OP_MaxPool, 1, pin, &pooled);
    kiln__tensor_release(&conv);
    if (st != KILN_OK)
        return st;
    if (scale) {
        kiln_node qn = {.name = ctx->node->name, .op_type = (char *)"QuantizeLinear", .domain = (char *)"",
                        .op = KILN_OP_QuantizeLinear, .opset = 13, .n_in = 3, .n_out = 1};
        const kiln_tensor *qin[3] = {&pooled, scale, kiln__kin(ctx, 4)};
        kiln_tensor q;
        st = run(ctx, &qn, KILN_OP_QuantizeLinear, qin[2] ? 3 : 2, qin, &q);
        kiln__tensor_release(&pooled);
        if (st != KILN_OK)
            return st;
        pooled = q;
    }
    kiln__kreplace_out(ctx, &pooled);
    return KILN_OK;
}
