/* Activation epilogues for fused layers; scalar reference semantics match the ONNX ops. */
#include "epilogue.h"
#include "vmath_avx2.h"
#include "../../ir/fused.h"
#include <math.h>

/* The IR's fused-activation vocabulary (ir/fused.h) mapped onto this epilogue's kinds. */
static const kiln_act_kind from_ir[KILN_FUSED_ACT_COUNT] = {
    [KILN_FUSED_NONE] = KILN_ACT_NONE, [KILN_FUSED_RELU] = KILN_ACT_RELU, [KILN_FUSED_CLIP] = KILN_ACT_CLIP,
    [KILN_FUSED_LEAKYRELU] = KILN_ACT_LEAKYRELU, [KILN_FUSED_SIGMOID] = KILN_ACT_SIGMOID,
    [KILN_FUSED_HARDSIGMOID] = KILN_ACT_HARDSIGMOID, [KILN_FUSED_HARDSWISH] = KILN_ACT_HARDSWISH,
    [KILN_FUSED_SILU] = KILN_ACT_SILU, [KILN_FUSED_GELU] = KILN_ACT_GELU, [KILN_FUSED_GELU_TANH] = KILN_ACT_GELU_TANH,
    [KILN_FUSED_TANH] = KILN_ACT_TANH, [KILN_FUSED_HARDSWISH_AFFINE] = KILN_ACT_HARDSWISH_AFFINE};

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

/* The activation of kind k; inlined with k a constant where a row's switch is hoisted. */
__attribute__((always_inline)) static inline float act_k(kiln_act_kind k, float alpha, float beta, float x)
{
    switch (k) {
    case KILN_ACT_NONE: return x;
    case KILN_ACT_RELU: return x < 0 ? 0 : x;   /* NaN stays NaN, as the Relu layer (ref/k_unary.c) keeps it */
    case KILN_ACT_CLIP: return x < alpha ? alpha : x > beta ? beta : x;
    case KILN_ACT_LEAKYRELU: return x >= 0 ? x : alpha * x;
    case KILN_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case KILN_ACT_HARDSIGMOID: {
        float v = alpha * x + beta;
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
    case KILN_ACT_HARDSWISH_AFFINE: {
        float v = x / 6.0f + 0.5f;
        return alpha * (x * (v < 0 ? 0 : v > 1 ? 1 : v)) + beta;
    }
    }
    return x;
}

float kiln__act_scalar(const kiln_act *a, float x) { return act_k(a->kind, a->alpha, a->beta, x); }

/* Calls ROW(kind constant) for a->kind: one loop per kind, the switch outside it. */
#define ACT_DISPATCH(kind, ROW)                                                                        \
    switch (kind) {                                                                                    \
    case KILN_ACT_NONE: ROW(KILN_ACT_NONE); break;                                                     \
    case KILN_ACT_RELU: ROW(KILN_ACT_RELU); break;                                                     \
    case KILN_ACT_CLIP: ROW(KILN_ACT_CLIP); break;                                                     \
    case KILN_ACT_LEAKYRELU: ROW(KILN_ACT_LEAKYRELU); break;                                           \
    case KILN_ACT_SIGMOID: ROW(KILN_ACT_SIGMOID); break;                                               \
    case KILN_ACT_HARDSIGMOID: ROW(KILN_ACT_HARDSIGMOID); break;                                       \
    case KILN_ACT_HARDSWISH: ROW(KILN_ACT_HARDSWISH); break;                                           \
    case KILN_ACT_SILU: ROW(KILN_ACT_SILU); break;                                                     \
    case KILN_ACT_GELU: ROW(KILN_ACT_GELU); break;                                                     \
    case KILN_ACT_GELU_TANH: ROW(KILN_ACT_GELU_TANH); break;                                           \
    case KILN_ACT_TANH: ROW(KILN_ACT_TANH); break;                                                     \
    case KILN_ACT_HARDSWISH_AFFINE: ROW(KILN_ACT_HARDSWISH_AFFINE); break;                             \
    }

/* The widest vector ISA the epilogues use: 2 AVX-512, 1 AVX2 + FMA, 0 scalar (tests lower it). */
static int isa_cap = 2;

void kiln__epi_set_isa_cap(int cap) { isa_cap = cap; }

/* 2, 1 or 0 as isa_cap, limited to what the host has (looked up once: called per GEMM tile) */
static int epi_isa(void)
{
    static int host = -1;   /* racing first calls store the same value */
    int h = __atomic_load_n(&host, __ATOMIC_RELAXED);
    if (h < 0) {
        h = 0;
#if KILN_VMATH_X86
        h = kiln__cpu_has(KILN_CPU_AVX512_DQ_FMA) ? 2 : kiln__cpu_has(KILN_CPU_AVX2_FMA) ? 1 : 0;
#endif
        __atomic_store_n(&host, h, __ATOMIC_RELAXED);
    }
    return h < isa_cap ? h : isa_cap;
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
        __mmask16 k = kiln_v_mask16(n - j);
        __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, y + j), bcol ? _mm512_maskz_loadu_ps(k, bcol + j) : vb);
        if (r)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, r + j));
        _mm512_mask_storeu_ps(y + j, k, kiln_v_act(a, v));
    }
}

/* epi_row512's 8-wide twin for kind k (a constant): full vectors, then one masked tail */
__attribute__((target("avx2,fma"), always_inline)) static inline void
row256_k(kiln_act_kind k, float al, float be, float *y, int64_t n, float bias, const float *bcol, const float *r)
{
    const __m256 vb = _mm256_set1_ps(bias);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_add_ps(_mm256_loadu_ps(y + j), bcol ? _mm256_loadu_ps(bcol + j) : vb);
        if (r)
            v = _mm256_add_ps(v, _mm256_loadu_ps(r + j));
        _mm256_storeu_ps(y + j, kiln_v8_act(k, al, be, v));
    }
    if (j < n) {
        __m256i m = kiln_v8_mask(n - j);
        __m256 v = _mm256_add_ps(_mm256_maskload_ps(y + j, m), bcol ? _mm256_maskload_ps(bcol + j, m) : vb);
        if (r)
            v = _mm256_add_ps(v, _mm256_maskload_ps(r + j, m));
        _mm256_maskstore_ps(y + j, m, kiln_v8_act(k, al, be, v));
    }
}

__attribute__((target("avx2,fma"))) static void epi_row256(const kiln_act *a, float *y, int64_t n, float bias,
                                                           const float *bcol, const float *r)
{
#define ROW(K) row256_k(K, a->alpha, a->beta, y, n, bias, bcol, r)
    ACT_DISPATCH(a->kind, ROW)
#undef ROW
}
#endif

__attribute__((always_inline)) static inline void row_scalar_k(kiln_act_kind k, float al, float be, float *y,
                                                             int64_t n, float bias, const float *bcol, const float *r)
{
    for (int64_t j = 0; j < n; j++) {
        float v = y[j] + (bcol ? bcol[j] : bias);
        if (r)
            v += r[j];
        y[j] = act_k(k, al, be, v);
    }
}

static void epi_row_scalar(const kiln_act *a, float *y, int64_t n, float bias, const float *bcol, const float *r)
{
#define ROW(K) row_scalar_k(K, a->alpha, a->beta, y, n, bias, bcol, r)
    ACT_DISPATCH(a->kind, ROW)
#undef ROW
}

/* one row with the ISA isa (epi_isa()) */
static void epi_row(int isa, const kiln_act *a, float *y, int64_t n, float bias, const float *bcol, const float *r)
{
#if KILN_VMATH_X86
    if (isa == 2) {
        epi_row512(a, y, n, bias, bcol, r);
        return;
    }
    if (isa == 1) {
        epi_row256(a, y, n, bias, bcol, r);
        return;
    }
#endif
    (void)isa;
    epi_row_scalar(a, y, n, bias, bcol, r);
}

void kiln__epi_apply_f32(const kiln_epi *e, float *c, int64_t ldc, int64_t m, int64_t n, int64_t i0, int64_t j0)
{
    if (kiln__epi_is_noop(e) || m <= 0 || n <= 0)
        return;
    int isa = epi_isa();
    for (int64_t i = 0; i < m; i++) {
        float bias = e->bias && e->row_bias ? e->bias[i0 + i] : 0.0f;
        const float *bcol = e->bias && !e->row_bias ? e->bias + j0 : NULL;
        const float *r = e->res ? e->res + (i0 + i) * e->ldr + j0 : NULL;
        epi_row(isa, &e->act, c + i * ldc, n, bias, bcol, r);
    }
}

typedef struct {
    const kiln_act *a;
    float *y;
} act_job;

static void act_task(void *p, int64_t b, int64_t e)
{
    const act_job *j = p;
    epi_row(epi_isa(), j->a, j->y + b, e - b, 0.0f, NULL, NULL);
}

void kiln__act_apply_f32(const kiln_act *a, float *y, int64_t n, kiln_pool *pool, int nthreads)
{
    if (a->kind == KILN_ACT_NONE || n <= 0)
        return;
    act_job j = {a, y};
    kiln__parallel_for(pool, nthreads, n, 16384, act_task, &j);
}
