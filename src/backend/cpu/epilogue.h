/* Fused epilogues: bias / residual add and an activation applied to a kernel's output. */
#ifndef KILN_BACKEND_EPILOGUE_H
#define KILN_BACKEND_EPILOGUE_H
#include "../kernel.h"

typedef enum kiln_act_kind {
    KILN_ACT_NONE = 0, KILN_ACT_RELU, KILN_ACT_CLIP, KILN_ACT_LEAKYRELU, KILN_ACT_SIGMOID, KILN_ACT_HARDSIGMOID,
    KILN_ACT_HARDSWISH, KILN_ACT_SILU, KILN_ACT_GELU, KILN_ACT_GELU_TANH, KILN_ACT_TANH
} kiln_act_kind;

typedef struct kiln_act {
    kiln_act_kind kind;
    float alpha, beta;   /* Clip: min/max; LeakyRelu: alpha; HardSigmoid: alpha/beta */
} kiln_act;

/* Name used in the "activation" attribute of fused nodes ("Relu", "Clip", ...), or NULL. */
const char *kiln__act_name(kiln_act_kind k);
/* Reads activation / activation_alpha / activation_beta of a fused node. */
kiln_status kiln__act_from_node(const kiln_kctx *ctx, kiln_act *a);
/* y[i] = act(y[i]) for float32. */
void kiln__act_apply_f32(const kiln_act *a, float *y, int64_t n, int nthreads);
float kiln__act_scalar(const kiln_act *a, float x);
#endif
