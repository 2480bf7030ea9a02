/* Reference kernels: unary elementwise math, activations, Clip, Cast, CastLike.
 *
 * float32 runs tight per-op loops (multithreaded over large tensors); Exp, Sigmoid, Tanh,
 * Erf and Gelu use branch-free polynomial approximations (accurate to a few float ulp) that
 * the compiler vectorises. float64 uses the libm double functions; float16 / bfloat16 are
 * converted to float32 in small blocks, computed, and converted back. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-math-errno", "no-trapping-math")
#endif
#include "../../kernel.h"
#include <math.h>

#define PAR_MIN 65536
#define PAR_GRAIN 16384
#define BLK 1024

/* ---------------------------------------------------------------- validation */

static inline int64_t numel(const kiln_tensor *t)
{
    return kiln__shape_numel(t->ndim, t->dims);
}

/* ---------------------------------------------------------------- fast float32 math */

static inline float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* exp(x), Cephes-style range reduction + degree-6 polynomial, branch-free. */
static inline float k_expf(float x)
{
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.72283f ? 88.72283f : xc;
    float r = xc * 1.44269504088896341f + 12582912.0f; /* round to nearest via 1.5*2^23 */
    float nf = r - 12582912.0f;
    int32_t ni = (int32_t)(f_bits(r) - 0x4B400000u); /* in [-126, 128] */
    float f = xc - nf * 0.693359375f;
    f = f - nf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    p = p * f * f + f + 1.0f;
    int32_t h = ni >> 1; /* 2^n = 2^h * 2^(n-h), both factors representable */
    float res = p * bits_f((uint32_t)(h + 127) << 23) * bits_f((uint32_t)(ni - h + 127) << 23);
    res = x > 88.72283f ? INFINITY : res;
    res = x < -87.0f ? 0.0f : res;
    return res;
}

/* tanh(x): odd polynomial for |x| < 0.625, 1 - 2/(exp(2|x|)+1) otherwise. */
static inline float k_tanhf(float x)
{
    float ax = fabsf(x);
    float z = x * x;
    float sp = -5.70498872745e-3f;
    sp = sp * z + 2.06390887954e-2f;
    sp = sp * z - 5.37397155531e-2f;
    sp = sp * z + 1.33314422036e-1f;
    sp = sp * z - 3.33332819422e-1f;
    sp = sp * z * x + x;
    float e = k_expf(2.0f * ax);
    float lg = 1.0f - 2.0f / (e + 1.0f);
    lg = x < 0 ? -lg : lg;
    return ax < 0.625f ? sp : lg;
}

/* erf(x): rational approximation on [-4, 4] (as in Eigen / XLA), saturating outside. */
static inline float k_erff(float x)
{
    float xc = x > 4.0f ? 4.0f : x;
    xc = xc < -4.0f ? -4.0f : xc;
    float x2 = xc * xc;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    p = p * xc;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    float r = p / q;
    r = r > 1.0f ? 1.0f : r;
    r = r < -1.0f ? -1.0f : r;
    return r;
}

/* ---------------------------------------------------------------- op table */

typedef struct uparam {
    float alpha, beta, gamma, bias, lambd;
} uparam;

typedef void (*urow_f32)(float *o, const float *x, int64_t n, const uparam *p);
typedef double (*uscal_f64)(double x, const uparam *p);
typedef int64_t (*uscal_i64)(int64_t x, bool is_signed, int bits);

#define DEF_U(NAME, EF, ED)                                                                                    \
    static void NAME##_f32(float *o, const float *in, int64_t n, const uparam *p)                             \
    {                                                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                                      \
            float x = in[i];                                                                                   \
            o[i] = (EF);                                                                                       \
        }                                                                                                      \
    }                                                                                                          \
    static double NAME##_f64(double x, const uparam *p) { return (ED); }

DEF_U(abs, fabsf(x), fabs(x))
DEF_U(acos, acosf(x), acos(x))
DEF_U(acosh, acoshf(x), acosh(x))
DEF_U(asin, asinf(x), asin(x))
DEF_U(asinh, asinhf(x), asinh(x))
DEF_U(atan, atanf(x), atan(x))
DEF_U(atanh, atanhf(x), atanh(x))
DEF_U(ceil, ceilf(x), ceil(x))
DEF_U(cos, cosf(x), cos(x))
DEF_U(cosh, coshf(x), cosh(x))
DEF_U(erf, k_erff(x), erf(x))
DEF_U(exp, k_expf(x), exp(x))
DEF_U(floor, floorf(x), floor(x))
DEF_U(log, logf(x), log(x))
DEF_U(neg, -x, -x)
DEF_U(recip, 1.0f / x, 1.0 / x)
DEF_U(round, rintf(x), rint(x))
DEF_U(sign, x > 0 ? 1.0f : (x < 0 ? -1.0f : x), x > 0 ? 1.0 : (x < 0 ? -1.0 : x))
DEF_U(sin, sinf(x), sin(x))
DEF_U(sinh, sinhf(x), sinh(x))
DEF_U(sqrt, sqrtf(x), sqrt(x))
DEF_U(tan, tanf(x), tan(x))
DEF_U(tanh, k_tanhf(x), tanh(x))
DEF_U(celu, x > 0 ? x : p->alpha * expm1f(x / p->alpha), x > 0 ? x : p->alpha * expm1(x / p->alpha))
DEF_U(elu, x < 0 ? p->alpha * expm1f(x) : x, x < 0 ? p->alpha * expm1(x) : x)
DEF_U(gelu_fast, 0.5f * x * (1.0f + k_erff(x * 0.70710678118654752f)),
      0.5 * x * erfc(-x * 0.70710678118654752))
/* gelu: vectorised pass, then the (rare) far-negative tail, where 1 + erf(x) cancels, is
 * recomputed with erfc for relative accuracy */
static void gelu_f32(float *o, const float *in, int64_t n, const uparam *p)
{
    float xb[512];
    for (int64_t s = 0; s < n; s += 512) {
        int64_t m = n - s < 512 ? n - s : 512;
        memcpy(xb, in + s, (size_t)m * sizeof(float)); /* o may alias in */
        gelu_fast_f32(o + s, xb, m, p);
        for (int64_t i = 0; i < m; i++)
            if (xb[i] < -3.0f)
                o[s + i] = 0.5f * xb[i] * erfcf(-xb[i] * 0.70710678118654752f);
    }
}
#define gelu_f64 gelu_fast_f64
DEF_U(gelu_tanh, 0.5f * x * (1.0f + k_tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x))),
      0.5 * x * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x))))
static inline float clamp01f(float v)
{
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}
static inline double clamp01(double v)
{
    v = v < 0.0 ? 0.0 : v;
    return v > 1.0 ? 1.0 : v;
}
DEF_U(hardsigmoid, clamp01f(p->alpha * x + p->beta), clamp01((double)p->alpha * x + (double)p->beta))
DEF_U(hardswish, x * clamp01f(x * (1.0f / 6.0f) + 0.5f), x * clamp01(x / 6.0 + 0.5))
DEF_U(leakyrelu, x < 0 ? p->alpha * x : x, x < 0 ? (double)p->alpha * x : x)
DEF_U(mish, x * k_tanhf(x > 20.0f ? x : log1pf(k_expf(x))), x * tanh(x > 30.0 ? x : log1p(exp(x))))
DEF_U(relu, x < 0 ? 0.0f : x, x < 0 ? 0.0 : x)
DEF_U(selu, x > 0 ? p->gamma * x : p->gamma * (p->alpha * k_expf(x) - p->alpha),
      x > 0 ? (double)p->gamma * x : (double)p->gamma * ((double)p->alpha * exp(x) - (double)p->alpha))
DEF_U(sigmoid, 1.0f / (1.0f + k_expf(-x)), 1.0 / (1.0 + exp(-x)))
DEF_U(softplus, x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x)), x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)))
DEF_U(softsign, x / (1.0f + fabsf(x)), x / (1.0 + fabs(x)))
DEF_U(thrrelu, x > p->alpha ? x : 0.0f, x > (double)p->alpha ? x : 0.0)
DEF_U(shrink, x < -p->lambd ? x + p->bias : (x > p->lambd ? x - p->bias : 0.0f),
      x < -(double)p->lambd ? x + (double)p->bias : (x > (double)p->lambd ? x - (double)p->bias : 0.0))

/* integer variants (wrapping, via int64) */
static int64_t abs_i(int64_t x, bool sg, int bits) { return (sg && x < 0) ? (int64_t)(0 - (uint64_t)x) : x; }
static int64_t neg_i(int64_t x, bool sg, int bits) { return (int64_t)(0 - (uint64_t)x); }
static int64_t sign_i(int64_t x, bool sg, int bits)
{
    if (!sg)
        return x != 0;
    return x > 0 ? 1 : (x < 0 ? -1 : 0);
}
static int64_t relu_i(int64_t x, bool sg, int bits) { return (sg && x < 0) ? 0 : x; }

enum { U_INT = 1, U_INT_VIA_F64 = 2, U_SIGNED_ONLY = 4 };

typedef struct uop {
    urow_f32 f32;
    uscal_f64 f64;
    uscal_i64 i64;
    unsigned flags;
} uop;

/* ---------------------------------------------------------------- execution */

typedef struct ujob {
    const uop *op;
    const uparam *p;
    kiln_dtype dt;
    const void *in;
    void *out;
} ujob;

static void ujob_run(void *vj, int64_t b, int64_t e)
{
    const ujob *j = vj;
    switch (j->dt) {
    case KILN_DT_FLOAT32:
        j->op->f32((float *)j->out + b, (const float *)j->in + b, e - b, j->p);
        break;
    case KILN_DT_FLOAT64: {
        const double *x = (const double *)j->in;
        double *o = (double *)j->out;
        for (int64_t i = b; i < e; i++)
            o[i] = j->op->f64(x[i], j->p);
        break;
    }
    case KILN_DT_FLOAT16:
    case KILN_DT_BFLOAT16: {
        float buf[BLK];
        const uint16_t *x = j->in;
        uint16_t *o = j->out;
        for (int64_t s = b; s < e; s += BLK) {
            int64_t m = e - s < BLK ? e - s : BLK;
            kiln__lowp_to_f32_array(j->dt, buf, x + s, m);
            j->op->f32(buf, buf, m, j->p);
            kiln__f32_to_lowp_array(j->dt, o + s, buf, m, true);
        }
        break;
    }
    default: {
        bool sg = kiln__dtype_is_signed(j->dt);
        int bits = (int)kiln_dtype_size(j->dt) * 8;
        if (j->op->i64) {
            for (int64_t i = b; i < e; i++)
                kiln__set_i64(j->dt, j->out, i, j->op->i64(kiln__get_i64(j->dt, j->in, i), sg, bits));
        } else {
            for (int64_t i = b; i < e; i++)
                kiln__set_f64(j->dt, j->out, i, j->op->f64(kiln__get_f64(j->dt, j->in, i), j->p));
        }
        break;
    }
    }
}

static kiln_status unary_run(kiln_kctx *ctx, const uop *op, const uparam *p)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    KILN_TRY(kiln__kcheck(ctx, x, 0));
    kiln_dtype dt = x->dtype;
    bool ok;
    switch (dt) {
    case KILN_DT_FLOAT32: case KILN_DT_FLOAT64: case KILN_DT_FLOAT16: case KILN_DT_BFLOAT16:
        ok = true;
        break;
    default:
        ok = kiln__dtype_is_int(dt) && (op->flags & (U_INT | U_INT_VIA_F64)) &&
             (!(op->flags & U_SIGNED_ONLY) || kiln__dtype_is_signed(dt));
        break;
    }
    if (!ok)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(dt));
    KILN_TRY(kiln__kout_uninit(ctx, 0, dt, x->ndim, x->dims));   /* ujob_run writes every element */
    int64_t n = numel(x);
    ujob j = {.op = op, .p = p, .dt = dt, .in = x->data, .out = ctx->out[0]->data};
    if (n >= PAR_MIN && ctx->nthreads != 1)
        kiln__parallel_for(ctx->pool, ctx->nthreads, n, PAR_GRAIN, ujob_run, &j);
    else if (n > 0)
        ujob_run(&j, 0, n);
    return KILN_OK;
}

#define UOP(NAME, FN, I64, FLAGS)                                                                              \
    static kiln_status k_##NAME(kiln_kctx *ctx)                                                                \
    {                                                                                                          \
        static const uop op = {FN##_f32, FN##_f64, I64, FLAGS};                                                \
        uparam p = {0};                                                                                        \
        return unary_run(ctx, &op, &p);                                                                        \
    }

UOP(abs, abs, abs_i, U_INT)
UOP(acos, acos, NULL, 0)
UOP(acosh, acosh, NULL, 0)
UOP(asin, asin, NULL, 0)
UOP(asinh, asinh, NULL, 0)
UOP(atan, atan, NULL, 0)
UOP(atanh, atanh, NULL, 0)
UOP(ceil, ceil, NULL, 0)
UOP(cos, cos, NULL, 0)
UOP(cosh, cosh, NULL, 0)
UOP(erf, erf, NULL, 0)
UOP(exp, exp, NULL, 0)
UOP(floor, floor, NULL, 0)
UOP(log, log, NULL, 0)
UOP(neg, neg, neg_i, U_INT | U_SIGNED_ONLY)
UOP(recip, recip, NULL, 0)
UOP(round, round, NULL, 0)
UOP(sign, sign, sign_i, U_INT)
UOP(sin, sin, NULL, 0)
UOP(sinh, sinh, NULL, 0)
UOP(sqrt, sqrt, NULL, 0)
UOP(tan, tan, NULL, 0)
UOP(tanh, tanh, NULL, 0)
UOP(hardswish, hardswish, NULL, 0)
UOP(mish, mish, NULL, 0)
UOP(relu, relu, relu_i, U_INT)
UOP(sigmoid, sigmoid, NULL, 0)
UOP(softplus, softplus, NULL, 0)
UOP(softsign, softsign, NULL, 0)

#define UOP_P(NAME, FN, FLAGS, ...)                                                                            \
    static kiln_status k_##NAME(kiln_kctx *ctx)                                                                \
    {                                                                                                          \
        static const uop op = {FN##_f32, FN##_f64, NULL, FLAGS};                                               \
        const kiln_node *nd = ctx->node;                                                                       \
        uparam p = {__VA_ARGS__};                                                                              \
        return unary_run(ctx, &op, &p);                                                                        \
    }

UOP_P(elu, elu, 0, .alpha = kiln__attr_f(nd, "alpha", 1.0f))
UOP_P(leakyrelu, leakyrelu, 0, .alpha = kiln__attr_f(nd, "alpha", 0.01f))
UOP_P(hardsigmoid, hardsigmoid, 0, .alpha = kiln__attr_f(nd, "alpha", 0.2f), .beta = kiln__attr_f(nd, "beta", 0.5f))
UOP_P(selu, selu, 0, .alpha = kiln__attr_f(nd, "alpha", 1.67326319217681884765625f),
      .gamma = kiln__attr_f(nd, "gamma", 1.05070102214813232421875f))
UOP_P(thrrelu, thrrelu, 0, .alpha = kiln__attr_f(nd, "alpha", 1.0f))
UOP_P(shrink, shrink, U_INT_VIA_F64, .bias = kiln__attr_f(nd, "bias", 0.0f), .lambd = kiln__attr_f(nd, "lambd", 0.5f))

static kiln_status k_celu(kiln_kctx *ctx)
{
    static const uop op = {celu_f32, celu_f64, NULL, 0};
    uparam p = {.alpha = kiln__attr_f(ctx->node, "alpha", 1.0f)};
    if (p.alpha == 0)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "alpha must not be 0");
    return unary_run(ctx, &op, &p);
}

static kiln_status k_gelu(kiln_kctx *ctx)
{
    static const uop op_none = {gelu_f32, gelu_f64, NULL, 0};
    static const uop op_tanh = {gelu_tanh_f32, gelu_tanh_f64, NULL, 0};
    const char *ap = kiln__attr_s(ctx->node, "approximate", "none");
    if (!ap)
        ap = "none";
    uparam p = {0};
    if (!strcmp(ap, "none"))
        return unary_run(ctx, &op_none, &p);
    if (!strcmp(ap, "tanh"))
        return unary_run(ctx, &op_tanh, &p);
    return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "approximate must be 'none' or 'tanh', got '%s'", ap);
}

/* ---------------------------------------------------------------- bool-valued ops */

static bool is_floatish(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16;
}

static kiln_status k_not(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    KILN_TRY(kiln__kcheck(ctx, x, 0));
    if (x->dtype != KILN_DT_BOOL)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "Not needs bool input, got %s", kiln_dtype_name(x->dtype));
    KILN_TRY(kiln__kout(ctx, 0, KILN_DT_BOOL, x->ndim, x->dims));
    int64_t n = numel(x);
    const uint8_t *s = x->data;
    uint8_t *d = ctx->out[0]->data;
    for (int64_t i = 0; i < n; i++)
        d[i] = s[i] == 0;
    return KILN_OK;
}

static kiln_status bool_classify(kiln_kctx *ctx, bool nan, bool neg, bool pos)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    KILN_TRY(kiln__kcheck(ctx, x, 0));
    if (!is_floatish(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_TRY(kiln__kout(ctx, 0, KILN_DT_BOOL, x->ndim, x->dims));
    int64_t n = numel(x);
    uint8_t *d = ctx->out[0]->data;
    for (int64_t i = 0; i < n; i++) {
        double v = kiln__get_f64(x->dtype, x->data, i);
        d[i] = nan ? isnan(v) : (isinf(v) && ((v > 0 && pos) || (v < 0 && neg)));
    }
    return KILN_OK;
}

static kiln_status k_isnan(kiln_kctx *ctx) { return bool_classify(ctx, true, false, false); }
static kiln_status k_isinf(kiln_kctx *ctx)
{
    return bool_classify(ctx, false, kiln__attr_i(ctx->node, "detect_negative", 1) != 0,
                         kiln__attr_i(ctx->node, "detect_positive", 1) != 0);
}

/* ---------------------------------------------------------------- Clip */

typedef struct cjob {
    kiln_dtype dt;
    const void *in;
    void *out;
    double lo, hi;           /* float types */
    int64_t ilo, ihi;        /* signed ints */
    uint64_t ulo, uhi;       /* unsigned ints */
} cjob;

#define CLIP_LOOP(T, LO, HI)                                                                                   \
    do {                                                                                                       \
        const T *x = (const T *)j->in;                                                                         \
        T *o = (T *)j->out;                                                                                    \
        T lo_ = (T)(LO), hi_ = (T)(HI);                                                                        \
        for (int64_t i = b; i < e; i++) {                                                                      \
            T v = x[i];                                                                                        \
            v = v < lo_ ? lo_ : v;                                                                             \
            o[i] = v > hi_ ? hi_ : v;                                                                          \
        }                                                                                                      \
    } while (0)

static void cjob_run(void *vj, int64_t b, int64_t e)
{
    const cjob *j = vj;
    switch (j->dt) {
    case KILN_DT_FLOAT32: CLIP_LOOP(float, j->lo, j->hi); break;
    case KILN_DT_FLOAT64: CLIP_LOOP(double, j->lo, j->hi); break;
    case KILN_DT_INT8: CLIP_LOOP(int8_t, j->ilo, j->ihi); break;
    case KILN_DT_INT16: CLIP_LOOP(int16_t, j->ilo, j->ihi); break;
    case KILN_DT_INT32: CLIP_LOOP(int32_t, j->ilo, j->ihi); break;
    case KILN_DT_INT64: CLIP_LOOP(int64_t, j->ilo, j->ihi); break;
    case KILN_DT_UINT8: CLIP_LOOP(uint8_t, j->ulo, j->uhi); break;
    case KILN_DT_UINT16: CLIP_LOOP(uint16_t, j->ulo, j->uhi); break;
    case KILN_DT_UINT32: CLIP_LOOP(uint32_t, j->ulo, j->uhi); break;
    case KILN_DT_UINT64: CLIP_LOOP(uint64_t, j->ulo, j->uhi); break;
    case KILN_DT_FLOAT16:
    case KILN_DT_BFLOAT16: {
        float lo = (float)j->lo, hi = (float)j->hi;
        const uint16_t *x = j->in;
        uint16_t *o = j->out;
        bool h = j->dt == KILN_DT_FLOAT16;
        for (int64_t i = b; i < e; i++) {
            float v = h ? kiln__f16_to_f32(x[i]) : kiln__bf16_to_f32(x[i]);
            if (v < lo)
                v = lo;
            if (v > hi)
                v = hi;
            o[i] = h ? kiln__f32_to_f16(v) : kiln__f32_to_bf16(v);
        }
        break;
    }
    default:
        break;
    }
}

/* Reads the one-element bound tensor t (any numeric dtype) into j's fields for x's dtype. */
static kiln_status clip_bound(const kiln_kctx *ctx, const kiln_tensor *t, int idx, kiln_dtype dt, double *f,
                              int64_t *si, uint64_t *ui)
{
    KILN_TRY(kiln__kcheck(ctx, t, idx));
    int64_t n = numel(t);
    if (n == 0)
        return KILN_OK; /* an empty bound is treated as absent */
    if (n != 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s must be a scalar, has %lld elements", idx == 1 ? "min" : "max",
                          (long long)n);
    if (t->dtype == KILN_DT_BOOL || !(is_floatish(t->dtype) || kiln__dtype_is_int(t->dtype)))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "bound dtype %s is not supported", kiln_dtype_name(t->dtype));
    if (is_floatish(dt)) {
        *f = kiln__get_f64(t->dtype, t->data, 0);
    } else if (t->dtype == KILN_DT_UINT64) {
        uint64_t v = *(const uint64_t *)t->data;
        *ui = v;
        *si = v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
    } else {
        int64_t v = kiln__get_i64(t->dtype, t->data, 0);
        *si = v;
        *ui = v < 0 ? 0 : (uint64_t)v;
    }
    return KILN_OK;
}

static kiln_status k_clip(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    KILN_TRY(kiln__kcheck(ctx, x, 0));
    kiln_dtype dt = x->dtype;
    if (!(is_floatish(dt) || kiln__dtype_is_int(dt)))
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(dt));
    cjob j = {.dt = dt, .lo = -INFINITY, .hi = INFINITY, .ilo = INT64_MIN, .ihi = INT64_MAX, .ulo = 0,
              .uhi = UINT64_MAX};
    /* clamp integer bounds into the element type's range */
    if (ctx->node->opset < 11) {
        if (!is_floatish(dt))
            return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported before opset 11",
                              kiln_dtype_name(dt));
        j.lo = kiln__attr_f(ctx->node, "min", -INFINITY);
        j.hi = kiln__attr_f(ctx->node, "max", INFINITY);
    } else {
        const kiln_tensor *tmin = kiln__kin(ctx, 1), *tmax = kiln__kin(ctx, 2);
        if (tmin)
            KILN_TRY(clip_bound(ctx, tmin, 1, dt, &j.lo, &j.ilo, &j.ulo));
        if (tmax)
            KILN_TRY(clip_bound(ctx, tmax, 2, dt, &j.hi, &j.ihi, &j.uhi));
    }
    if (kiln__dtype_is_int(dt)) {
        int bits = (int)kiln_dtype_size(dt) * 8;
        if (kiln__dtype_is_signed(dt) && bits < 64) {
            int64_t mn = -((int64_t)1 << (bits - 1)), mx = ((int64_t)1 << (bits - 1)) - 1;
            j.ilo = j.ilo < mn ? mn : (j.ilo > mx ? mx : j.ilo);
            j.ihi = j.ihi < mn ? mn : (j.ihi > mx ? mx : j.ihi);
        } else if (!kiln__dtype_is_signed(dt) && bits < 64) {
            uint64_t mx = ((uint64_t)1 << bits) - 1;
            j.ulo = j.ulo > mx ? mx : j.ulo;
            j.uhi = j.uhi > mx ? mx : j.uhi;
        }
    }
    KILN_TRY(kiln__kout(ctx, 0, dt, x->ndim, x->dims));
    int64_t n = numel(x);
    j.in = x->data;
    j.out = ctx->out[0]->data;
    if (n >= PAR_MIN && ctx->nthreads != 1)
        kiln__parallel_for(ctx->pool, ctx->nthreads, n, PAR_GRAIN, cjob_run, &j);
    else if (n > 0)
        cjob_run(&j, 0, n);
    return KILN_OK;
}

/* ---------------------------------------------------------------- Cast */

/* float -> integer conversions: NaN -> 0, saturate to int64, then wrap into narrower types
 * (matches numpy on x86 for moderately out-of-range values; ONNX leaves it undefined). */
static inline int64_t f2i64(double v)
{
    if (v != v)
        return 0;
    if (v >= 9.2233720368547758e18)
        return INT64_MAX;
    if (v <= -9.2233720368547758e18)
        return INT64_MIN;
    return (int64_t)v;
}
static inline uint64_t f2u64(double v)
{
    if (v >= 9.2233720368547758e18)
        return v >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v;
    return (uint64_t)f2i64(v);
}

/* destination conversion expressions: kind F = floating source, I = integer source */
#define CV_F_FLOAT32(v) ((float)(v))
#define CV_I_FLOAT32(v) ((float)(v))
#define CV_F_FLOAT64(v) ((double)(v))
#define CV_I_FLOAT64(v) ((double)(v))
#define CV_F_BOOL(v) ((uint8_t)((v) != 0))
#define CV_I_BOOL(v) ((uint8_t)((v) != 0))
#define CV_F_INT8(v) ((int8_t)f2i64(v))
#define CV_I_INT8(v) ((int8_t)(v))
#define CV_F_UINT8(v) ((uint8_t)f2i64(v))
#define CV_I_UINT8(v) ((uint8_t)(v))
#define CV_F_INT16(v) ((int16_t)f2i64(v))
#define CV_I_INT16(v) ((int16_t)(v))
#define CV_F_UINT16(v) ((uint16_t)f2i64(v))
#define CV_I_UINT16(v) ((uint16_t)(v))
#define CV_F_INT32(v) ((int32_t)f2i64(v))
#define CV_I_INT32(v) ((int32_t)(v))
#define CV_F_UINT32(v) ((uint32_t)f2i64(v))
#define CV_I_UINT32(v) ((uint32_t)(v))
#define CV_F_INT64(v) (f2i64(v))
#define CV_I_INT64(v) ((int64_t)(v))
#define CV_F_UINT64(v) (f2u64(v))
#define CV_I_UINT64(v) ((uint64_t)(v))

/* source types: (dtype, C type, kind); bool sources are normalised to 0/1 */
#define SRC_TYPES(M)                                                                                           \
    M(FLOAT32, float, F) M(FLOAT64, double, F) M(INT8, int8_t, I) M(UINT8, uint8_t, I) M(INT16, int16_t, I)  \
    M(UINT16, uint16_t, I) M(INT32, int32_t, I) M(UINT32, uint32_t, I) M(INT64, int64_t, I)                   \
    M(UINT64, uint64_t, I) M(BOOL, uint8_t, B)
#define DST_TYPES(M, S, TS, K)                                                                                 \
    M(S, TS, K, FLOAT32, float) M(S, TS, K, FLOAT64, double) M(S, TS, K, INT8, int8_t)                        \
    M(S, TS, K, UINT8, uint8_t) M(S, TS, K, INT16, int16_t) M(S, TS, K, UINT16, uint16_t)                     \
    M(S, TS, K, INT32, int32_t) M(S, TS, K, UINT32, uint32_t) M(S, TS, K, INT64, int64_t)                     \
    M(S, TS, K, UINT64, uint64_t) M(S, TS, K, BOOL, uint8_t)

typedef void (*cv_fn)(void *dst, const void *src, int64_t n);

#define SRCVAL_F(v) (v)
#define SRCVAL_I(v) (v)
#define SRCVAL_B(v) ((uint8_t)((v) != 0))
#define KIND_F F
#define KIND_I I
#define KIND_B I
#define CVX(K, D, v) CVX2(K, D, v)
#define CVX2(K, D, v) CV_##K##_##D(v)

#define GEN_CV(S, TS, K, D, TD)                                                                                \
    static void cv_##S##_##D(void *dst, const void *src, int64_t n)                                            \
    {                                                                                                          \
        const TS *s = src;                                                                                     \
        TD *d = dst;                                                                                           \
        for (int64_t i = 0; i < n; i++)                                                                        \
            d[i] = CVX(KIND_##K, D, SRCVAL_##K(s[i]));                                                         \
    }
#define GEN_CV_ALL(S, TS, K) DST_TYPES(GEN_CV, S, TS, K)
SRC_TYPES(GEN_CV_ALL)

#define TBL_CV(S, TS, K, D, TD) [KILN_DT_##D] = cv_##S##_##D,
#define TBL_CV_ROW(S, TS, K) [KILN_DT_##S] = {DST_TYPES(TBL_CV, S, TS, K)},
static const cv_fn cv_tbl[KILN_DT_COUNT][KILN_DT_COUNT] = {SRC_TYPES(TBL_CV_ROW)};

typedef struct castjob {
    kiln_dtype sdt, ddt;
    bool saturate;   /* FP8 targets: ONNX Cast-19 'saturate' */
    const char *src;
    char *dst;
    size_t ses, des;
} castjob;

static void cast_run(void *vj, int64_t b, int64_t e)
{
    const castjob *j = vj;
    const char *src = j->src + b * (int64_t)j->ses;
    char *dst = j->dst + b * (int64_t)j->des;
    int64_t n = e - b;
    /* float16 / bfloat16 / fp8 go through float32 blocks (numfmt array conversions) */
    bool shalf = kiln__dtype_is_lowp_float(j->sdt), dhalf = kiln__dtype_is_lowp_float(j->ddt);
    if (!shalf && !dhalf) {
        cv_tbl[j->sdt][j->ddt](dst, src, n);
        return;
    }
    float buf[BLK];
    for (int64_t s = 0; s < n; s += BLK) {
        int64_t m = n - s < BLK ? n - s : BLK;
        const char *ps = src + s * (int64_t)j->ses;
        char *pd = dst + s * (int64_t)j->des;
        if (shalf)
            kiln__lowp_to_f32_array(j->sdt, buf, ps, m);
        else
            cv_tbl[j->sdt][KILN_DT_FLOAT32](buf, ps, m);
        if (dhalf) {
            kiln__f32_to_lowp_array(j->ddt, pd, buf, m, j->saturate);
        } else {
            cv_tbl[KILN_DT_FLOAT32][j->ddt](pd, buf, m);
        }
    }
}

static bool castable(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_FLOAT32: case KILN_DT_FLOAT64: case KILN_DT_FLOAT16: case KILN_DT_BFLOAT16:
    case KILN_DT_INT8: case KILN_DT_UINT8: case KILN_DT_INT16: case KILN_DT_UINT16:
    case KILN_DT_INT32: case KILN_DT_UINT32: case KILN_DT_INT64: case KILN_DT_UINT64: case KILN_DT_BOOL:
    case KILN_DT_FP8E4M3: case KILN_DT_FP8E4M3FNUZ: case KILN_DT_FP8E5M2: case KILN_DT_FP8E5M2FNUZ:
        return true;
    default:
        return false;
    }
}

static kiln_status do_cast(kiln_kctx *ctx, const kiln_tensor *x, int64_t to, bool saturate)
{
    if (to <= 0 || to >= KILN_DT_COUNT)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid target dtype %lld", (long long)to);
    kiln_dtype ddt = (kiln_dtype)to;
    if (x->dtype == KILN_DT_STRING || ddt == KILN_DT_STRING)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "string casts are not supported");
    KILN_TRY(kiln__kcheck(ctx, x, 0));
    if (!castable(x->dtype) || !castable(ddt))
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "cast %s -> %s is not supported", kiln_dtype_name(x->dtype),
                          kiln_dtype_name(ddt));
    KILN_TRY(kiln__kout(ctx, 0, ddt, x->ndim, x->dims));
    int64_t n = numel(x);
    if (n == 0)
        return KILN_OK;
    if (x->dtype == ddt) {
        memcpy(ctx->out[0]->data, x->data, (size_t)n * kiln_dtype_size(ddt));
        return KILN_OK;
    }
    castjob j = {.sdt = x->dtype, .ddt = ddt, .saturate = saturate, .src = x->data, .dst = ctx->out[0]->data,
                 .ses = kiln_dtype_size(x->dtype), .des = kiln_dtype_size(ddt)};
    if (n >= PAR_MIN && ctx->nthreads != 1)
        kiln__parallel_for(ctx->pool, ctx->nthreads, n, PAR_GRAIN, cast_run, &j);
    else
        cast_run(&j, 0, n);
    return KILN_OK;
}

static kiln_status k_cast(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    const kiln_attr *a = kiln__attr(ctx->node, "to");
    if (!a || a->type != KILN_ATTR_INT)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing integer attribute 'to'");
    return do_cast(ctx, x, a->i, kiln__attr_i(ctx->node, "saturate", 1) != 0);
}

static kiln_status k_castlike(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *like = kiln__kin(ctx, 1);
    if (!x || !like)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "CastLike needs two inputs");
    return do_cast(ctx, x, like->dtype, kiln__attr_i(ctx->node, "saturate", 1) != 0);
}

const kiln_kernel_reg kiln__ref_unary[] = {
    {KILN_OP_Abs, k_abs},
    {KILN_OP_Acos, k_acos},
    {KILN_OP_Acosh, k_acosh},
    {KILN_OP_Asin, k_asin},
    {KILN_OP_Asinh, k_asinh},
    {KILN_OP_Atan, k_atan},
    {KILN_OP_Atanh, k_atanh},
    {KILN_OP_Ceil, k_ceil},
    {KILN_OP_Cos, k_cos},
    {KILN_OP_Cosh, k_cosh},
    {KILN_OP_Erf, k_erf},
    {KILN_OP_Exp, k_exp},
    {KILN_OP_Floor, k_floor},
    {KILN_OP_IsInf, k_isinf},
    {KILN_OP_IsNaN, k_isnan},
    {KILN_OP_Log, k_log},
    {KILN_OP_Neg, k_neg},
    {KILN_OP_Not, k_not},
    {KILN_OP_Reciprocal, k_recip},
    {KILN_OP_Round, k_round},
    {KILN_OP_Sign, k_sign},
    {KILN_OP_Sin, k_sin},
    {KILN_OP_Sinh, k_sinh},
    {KILN_OP_Sqrt, k_sqrt},
    {KILN_OP_Tan, k_tan},
    {KILN_OP_Tanh, k_tanh},
    {KILN_OP_Celu, k_celu},
    {KILN_OP_Elu, k_elu},
    {KILN_OP_Gelu, k_gelu},
    {KILN_OP_HardSigmoid, k_hardsigmoid},
    {KILN_OP_HardSwish, k_hardswish},
    {KILN_OP_LeakyRelu, k_leakyrelu},
    {KILN_OP_Mish, k_mish},
    {KILN_OP_Relu, k_relu},
    {KILN_OP_Selu, k_selu},
    {KILN_OP_Sigmoid, k_sigmoid},
    {KILN_OP_Softplus, k_softplus},
    {KILN_OP_Softsign, k_softsign},
    {KILN_OP_ThresholdedRelu, k_thrrelu},
    {KILN_OP_Shrink, k_shrink},
    {KILN_OP_Clip, k_clip},
    {KILN_OP_Cast, k_cast},
    {KILN_OP_CastLike, k_castlike},
    {KILN_OP_COUNT, NULL},
};
