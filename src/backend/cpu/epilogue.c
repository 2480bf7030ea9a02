/* Activation epilogues for fused layers; scalar reference semantics match the ONNX ops. */
#include "epilogue.h"
#include "vmath.h"
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
