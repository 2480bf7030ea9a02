/* Reference kernels: Constant, Identity, Dropout (inference), Size, Shape. */
#include "../../kernel.h"

static kiln_status copy_to(kiln_kctx *ctx, int o, const kiln_tensor *src)
{
    KILN_TRY(kiln__kout(ctx, o, src->dtype, src->ndim, src->dims));
    if (src->nbytes)
        memcpy(ctx->out[o]->data, src->data, src->nbytes);
    return KILN_OK;
}

static kiln_status k_identity(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    return copy_to(ctx, 0, x);
}

/* Dropout in inference: output = input, optional mask = all true. */
static kiln_status k_dropout(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    const kiln_tensor *training = kiln__kin(ctx, 2);
    if (training && training->nbytes && ((const uint8_t *)training->data)[0])
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "training mode is not supported");
    KILN_TRY(copy_to(ctx, 0, x));
    if (ctx->n_out > 1 && ctx->out[1]) {
        KILN_TRY(kiln__kout(ctx, 1, KILN_DT_BOOL, x->ndim, x->dims));
        memset(ctx->out[1]->data, 1, ctx->out[1]->nbytes);
    }
    return KILN_OK;
}

static kiln_status k_constant(kiln_kctx *ctx)
{
    const kiln_node *n = ctx->node;
    for (int i = 0; i < n->n_attr; i++) {
        const kiln_attr *a = &n->attrs[i];
        int64_t one = 1, cnt = a->n;
        if (!strcmp(a->name, "value") && a->t)
            return copy_to(ctx, 0, a->t);
        if (!strcmp(a->name, "value_float") && a->type == KILN_ATTR_FLOAT) {
            KILN_TRY(kiln__kout(ctx, 0, KILN_DT_FLOAT32, 0, &one));
            *(float *)ctx->out[0]->data = a->f;
            return KILN_OK;
        }
        if (!strcmp(a->name, "value_int") && a->type == KILN_ATTR_INT) {
            KILN_TRY(kiln__kout(ctx, 0, KILN_DT_INT64, 0, &one));
            *(int64_t *)ctx->out[0]->data = a->i;
            return KILN_OK;
        }
        if (!strcmp(a->name, "value_floats") && a->type == KILN_ATTR_FLOATS) {
            KILN_TRY(kiln__kout(ctx, 0, KILN_DT_FLOAT32, 1, &cnt));
            memcpy(ctx->out[0]->data, a->floats, sizeof(float) * (size_t)cnt);
            return KILN_OK;
        }
        if (!strcmp(a->name, "value_ints") && a->type == KILN_ATTR_INTS) {
            KILN_TRY(kiln__kout(ctx, 0, KILN_DT_INT64, 1, &cnt));
            memcpy(ctx->out[0]->data, a->ints, sizeof(int64_t) * (size_t)cnt);
            return KILN_OK;
        }
        if (!strcmp(a->name, "sparse_value") || !strncmp(a->name, "value_string", 12))
            return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "attribute '%s' is not supported", a->name);
    }
    return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "Constant has no value attribute");
}

const kiln_kernel_reg kiln__ref_misc[] = {
    {KILN_OP_Identity, k_identity},
    {KILN_OP_Dropout, k_dropout},
    {KILN_OP_Constant, k_constant},
    {KILN_OP_COUNT, NULL},
};
