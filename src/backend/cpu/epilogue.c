/* Activation epilogues for fused layers; scalar reference semantics match the ONNX ops. */
#include "epilogue.h"
#include "vmath.h"
#include "../../ir/fused.h"
#include <math.h>

/* The IR's fused-activation vocabulary (ir/fused.h) mapped onto this epilogue's kinds. */
static const kiln_act_kind from_ir[KILN_FUSED_ACT_COUNT] = {
    [KILN_FUSED_NONE] = KILN_ACT_NONE, [KILN_FUSED_RELU] = KILN_ACT_RELU, [KILN_FUSED_CLIP] = KILN_ACT_CLIP,
    [KILN_FUSED_LEAKYRELU] = KILN_ACT_LEAKYRELU, [KILN_FUSED_SIGMOID] = KILN_ACT_SIGMOID,
    [KILN_FUSED_HARDSIGMOID] = KILN_ACT_HARDSIGMOID, [KILN_FUSED_HARDSWISH] = KILN_ACT_HARDSWISH,
    [KILN_FUSED_SILU] = KILN_ACT_SILU, [KILN_FUSED_GELU] = KILN_ACT_GELU, [KILN_FUSED_GELU_TANH] = KILN_ACT_GELU_TANH,
    [KILN_FUSED_TANH] = KILN_ACT_TANH};

const char *kiln__act_name(kiln_act_kind k)
{
    for (int f = 1; f < KILN_FUSED_ACT_COUNT; f++)
        if (from_ir[f] == k)
            return kiln__fused_act_name((kiln_fused_act_kind)f);
    return NULL;
}

kiln_status kiln__act_from_node(const kiln_kctx *ctx, kiln_act *a)
{
    kiln_fused_act f;
    if (!kiln__fused_act_of(ctx->node, &f))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown fused activation '%s'",
                          kiln__attr_s(ctx->node, "activation", ""));
    *a = (kiln_act){from_ir[f.kind], f.alpha, f.beta};
    return KILN_OK;
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

static bool have_avx512(void)
{
#if KILN_VMATH_X86
    return kiln__cpu_has(KILN_CPU_AVX512_DQ_FMA);
#else
    return false;
#endif
}

#if KILN_VMATH_X86
/* y[0:n] = act(y[0:n] + bias + r[0:n]) (bias a scalar or, with bcol, a vector; r may be NULL) */
__attribute__((target("avx512f,avx512dq,fma"))) static void epi_row512(const kiln_act *a, float *y, int64_t n,
                                                                        float bias, const float *bcol,
                                                                        const float *r)
{
    const __m512 vb = _mm512_set1_ps(bias);
    int64_t j = 0;
    for (; j < n; j += 16) {
        __mmask16 k = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
        __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, y + j), bcol ? _mm512_maskz_loadu_ps(k, bcol + j) : vb);
        if (r)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, r + j));
        _mm512_mask_storeu_ps(y + j, k, kiln_v_act(a, v));
    }
}
#endif

static void epi_row_scalar(const kiln_act *a, float *y, int64_t n, float bias, const float *bcol, const float *r)
{
    for (int64_t j = 0; j < n; j++) {
        float v = y[j] + (bcol ? bcol[j] : bias);
        if (r)
            v += r[j];
        y[j] = kiln__act_scalar(a, v);
    }
}

void kiln__epi_apply_f32(const kiln_epi *e, float *c, int64_t ldc, int64_t m, int64_t n, int64_t i0, int64_t j0)
{
    if (kiln__epi_is_noop(e) || m <= 0 || n <= 0)
        return;
    bool v512 = have_avx512();
    for (int64_t i = 0; i < m; i++) {
        float bias = e->bias && e->row_bias ? e->bias[i0 + i] : 0.0f;
        const float *bcol = e->bias && !e->row_bias ? e->bias + j0 : NULL;
        const float *r = e->res ? e->res + (i0 + i) * e->ldr + j0 : NULL;
#if KILN_VMATH_X86
        if (v512) {
            epi_row512(&e->act, c + i * ldc, n, bias, bcol, r);
            continue;
        }
#endif
        (void)v512;
        epi_row_scalar(&e->act, c + i * ldc, n, bias, bcol, r);
    }
}

typedef struct {
    const kiln_act *a;
    float *y;
} act_job;

static void act_task(void *p, int64_t b, int64_t e)
{
    const act_job *j = p;
    float *y = j->y;
#if KILN_VMATH_X86
    if (have_avx512()) {
        epi_row512(j->a, y + b, e - b, 0.0f, NULL, NULL);
        return;
    }
#endif
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
    case KILN_ACT_HARDSWISH:
        for (int64_t i = b; i < e; i++) {
            float v = y[i] * (1.0f / 6.0f) + 0.5f;
            v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            y[i] *= v;
        }
        break;
    case KILN_ACT_HARDSIGMOID: {
        float al = j->a->alpha, be = j->a->beta;
        for (int64_t i = b; i < e; i++) {
            float v = al * y[i] + be;
            y[i] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
        }
        break;
    }
    case KILN_ACT_LEAKYRELU: {
        float al = j->a->alpha;
        for (int64_t i = b; i < e; i++)
            y[i] = y[i] >= 0.0f ? y[i] : al * y[i];
        break;
    }
    default:
        for (int64_t i = b; i < e; i++)
            y[i] = kiln__act_scalar(j->a, y[i]);
        break;
    }
}

void kiln__act_apply_f32(const kiln_act *a, float *y, int64_t n, kiln_pool *pool, int nthreads)
{
    if (a->kind == KILN_ACT_NONE || n <= 0)
        return;
    act_job j = {a, y};
    kiln__parallel_for(pool, nthreads, n, 16384, act_task, &j);
}
