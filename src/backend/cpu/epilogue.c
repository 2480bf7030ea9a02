/* Activation epilogues for fused layers; scalar reference semantics match the ONNX ops. */
#include "epilogue.h"
#include <math.h>

static const char *const act_names[] = {NULL, "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid",
                                        "HardSwish", "SiLU", "Gelu", "GeluTanh", "Tanh"};

const char *kiln__act_name(kiln_act_kind k)
{
    return (unsigned)k < sizeof act_names / sizeof act_names[0] ? act_names[k] : NULL;
}

kiln_status kiln__act_from_node(const kiln_kctx *ctx, kiln_act *a)
{
    memset(a, 0, sizeof *a);
    const char *s = kiln__attr_s(ctx->node, "activation", NULL);
    if (!s || !s[0])
        return KILN_OK;
    for (int k = 1; k < (int)(sizeof act_names / sizeof act_names[0]); k++)
        if (!strcmp(s, act_names[k])) {
            a->kind = (kiln_act_kind)k;
            a->alpha = kiln__attr_f(ctx->node, "activation_alpha", 0.0f);
            a->beta = kiln__attr_f(ctx->node, "activation_beta", 0.0f);
            return KILN_OK;
        }
    return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown fused activation '%s'", s);
}

float kiln__act_scalar(const kiln_act *a, float x)
{
    switch (a->kind) {
    case KILN_ACT_NONE: return x;
    case KILN_ACT_RELU: return x > 0 ? x : 0;
    case KILN_ACT_CLIP: return x < a->alpha ? a->alpha : x > a->beta ? a->beta : x;
    case KILN_ACT_LEAKYRELU: return x >= 0 ? x : a->alpha * x;
    case KILN_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case KILN_ACT_HARDSIGMOID: {
        float v = a->alpha * x + a->beta;
        return v < 0 ? 0 : v > 1 ? 1 : v;
    }
    case KILN_ACT_HARDSWISH: {
        float v = x / 6.0f + 0.5f;
        return x * (v < 0 ? 0 : v > 1 ? 1 : v);
    }
    case KILN_ACT_SILU: return x / (1.0f + expf(-x));
    case KILN_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case KILN_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case KILN_ACT_TANH: return tanhf(x);
    }
    return x;
}

typedef struct {
    const kiln_act *a;
    float *y;
} act_job;

static void act_task(void *p, int64_t b, int64_t e)
{
    const act_job *j = p;
    float *y = j->y;
    switch (j->a->kind) {
    case KILN_ACT_RELU:
        for (int64_t i = b; i < e; i++)
            y[i] = y[i] > 0 ? y[i] : 0;
        break;
    case KILN_ACT_CLIP: {
        float lo = j->a->alpha, hi = j->a->beta;
        for (int64_t i = b; i < e; i++)
            y[i] = y[i] < lo ? lo : y[i] > hi ? hi : y[i];
        break;
    }
    default:
        for (int64_t i = b; i < e; i++)
            y[i] = kiln__act_scalar(j->a, y[i]);
        break;
    }
}

void kiln__act_apply_f32(const kiln_act *a, float *y, int64_t n, int nthreads)
{
    if (a->kind == KILN_ACT_NONE || n <= 0)
        return;
    act_job j = {a, y};
    kiln__parallel_for(nthreads, n, 16384, act_task, &j);
}
