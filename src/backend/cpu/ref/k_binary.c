/* Reference kernels: binary / variadic elementwise ops with ONNX multidirectional broadcasting.
 *
 * Add Sub Mul Div Pow Mod PRelu BitShift And Or Xor Equal Greater GreaterOrEqual Less
 * LessOrEqual BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Max Min Sum Mean Where.
 *
 * Design: the output shape is derived with kiln__broadcast_shape, then every input's
 * broadcast strides are computed, size-1 output dims dropped and adjacent dims coalesced
 * where all inputs agree. After coalescing the innermost dim of every input has stride 0 or
 * 1, so the work is a sequence of "rows" processed by a typed row function that has
 * specialised loops for (contiguous, contiguous), (contiguous, scalar), (scalar,
 * contiguous). Same-shape tensors collapse to one row, [N,C,H,W]+[1,C,1,1] to rows of H*W
 * against a scalar, [B,S,768]+[768] to rows of 768 against a contiguous vector. Large
 * outputs are split over threads by flat element ranges. float16/bfloat16 inputs are
 * computed in float32 and converted back. Integer Div/Mod by zero is a kernel error, checked
 * on the divisor before any row runs (as ONNX Runtime refuses it; the row expressions still
 * guard y == 0 so that nothing can trap), and INT_MIN / -1 wraps (no SIGFPE). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-math-errno", "no-trapping-math")
#endif
#include "../../kernel.h"
#include <math.h>

#define MAXIN 3
#define PAR_MIN 65536
#define PAR_GRAIN 16384

/* A block of m rows of n output elements (output contiguous). Within a row input k advances
 * by s_k (0 or 1) per element; from one row to the next by r_k elements. */
typedef struct rowarg {
    int64_t n, m;
    int sa, sb, sc;
    int64_t ra, rb, rc;
} rowarg;
typedef void (*row_fn)(void *o, const void *a, const void *b, const void *c, const rowarg *r);

/* ---------------------------------------------------------------- validation helpers */

static bool is_half(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16;
}

/* ---------------------------------------------------------------- broadcast iterator */

typedef struct bjob {
    row_fn fn;
    int nd, nin;
    int64_t dims[KILN_MAX_DIMS];
    int64_t st[MAXIN][KILN_MAX_DIMS];
    const char *in[MAXIN];
    size_t esz[MAXIN];
    char *out;
    size_t osz;
} bjob;

static void bjob_run(void *p, int64_t begin, int64_t end)
{
    const bjob *j = p;
    const int nd = j->nd, last = nd - 1;
    int64_t idx[KILN_MAX_DIMS], off[MAXIN] = {0, 0, 0};
    int64_t r = begin;
    for (int d = last; d >= 0; d--) {
        idx[d] = r % j->dims[d];
        r /= j->dims[d];
    }
    for (int k = 0; k < j->nin; k++)
        for (int d = 0; d < nd; d++)
            off[k] += idx[d] * j->st[k][d];
    int s[MAXIN] = {0, 0, 0};
    for (int k = 0; k < j->nin; k++)
        s[k] = j->st[k][last] != 0;
    const int64_t inner = j->dims[last];
    const int outer = nd >= 2 ? nd - 2 : 0;
    rowarg ra = {.sa = s[0], .sb = s[1], .sc = s[2]};
    if (nd >= 2) {
        ra.ra = j->st[0][outer];
        ra.rb = j->nin > 1 ? j->st[1][outer] : 0;
        ra.rc = j->nin > 2 ? j->st[2][outer] : 0;
    }
    int64_t pos = begin;
    while (pos < end) {
        int64_t n, m = 1;
        int d0 = last;
        if (nd >= 2 && idx[last] == 0 && end - pos >= 2 * inner) {
            /* several whole rows of the same outer index range in one call */
            n = inner;
            m = j->dims[outer] - idx[outer];
            if (m > (end - pos) / inner)
                m = (end - pos) / inner;
            if (m > 1)
                d0 = outer;
        } else {
            n = inner - idx[last];
            if (n > end - pos)
                n = end - pos;
        }
        ra.n = n;
        ra.m = m;
        const void *pa = j->in[0] + off[0] * (int64_t)j->esz[0];
        const void *pb = j->nin > 1 ? j->in[1] + off[1] * (int64_t)j->esz[1] : NULL;
        const void *pc = j->nin > 2 ? j->in[2] + off[2] * (int64_t)j->esz[2] : NULL;
        j->fn(j->out + pos * (int64_t)j->osz, pa, pb, pc, &ra);
        pos += n * m;
        if (pos >= end)
            break;
        int64_t step = d0 == last ? n : m;
        idx[d0] += step;
        for (int k = 0; k < j->nin; k++)
            off[k] += step * j->st[k][d0];
        for (int d = d0; d > 0 && idx[d] >= j->dims[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
            for (int k = 0; k < j->nin; k++)
                off[k] += j->st[k][d - 1] - j->dims[d] * j->st[k][d];
        }
    }
}

/* Runs fn over out (already allocated with the broadcast shape of ins). */
static void bcast_exec(const kiln_kctx *ctx, row_fn fn, kiln_tensor *out, int nin, const kiln_tensor *const *ins)
{
    int64_t total = kiln__shape_numel(out->ndim, out->dims);
    if (total <= 0)
        return;
    bjob j;
    memset(&j, 0, sizeof j);
    j.fn = fn;
    j.nin = nin;
    j.out = out->data;
    j.osz = kiln_dtype_size(out->dtype);
    int64_t st[MAXIN][KILN_MAX_DIMS];
    for (int k = 0; k < nin; k++) {
        kiln__broadcast_strides(ins[k], out->ndim, out->dims, st[k]);
        j.in[k] = ins[k]->data;
        j.esz[k] = kiln_dtype_size(ins[k]->dtype);
    }
    int nd = 0;
    for (int d = 0; d < out->ndim; d++) {
        int64_t dd = out->dims[d];
        if (dd == 1)
            continue;
        bool merge = nd > 0;
        for (int k = 0; k < nin && merge; k++)
            if (j.st[k][nd - 1] != st[k][d] * dd)
                merge = false;
        if (merge) {
            j.dims[nd - 1] *= dd;
            for (int k = 0; k < nin; k++)
                j.st[k][nd - 1] = st[k][d];
        } else {
            j.dims[nd] = dd;
            for (int k = 0; k < nin; k++)
                j.st[k][nd] = st[k][d];
            nd++;
        }
    }
    if (nd == 0) {
        nd = 1;
        j.dims[0] = 1;
        for (int k = 0; k < nin; k++)
            j.st[k][0] = 0;
    }
    j.nd = nd;
    if (total >= PAR_MIN && ctx->nthreads != 1)
        kiln__parallel_for(ctx->pool, ctx->nthreads, total, PAR_GRAIN, bjob_run, &j);
    else
        bjob_run(&j, 0, total);
}

/* ---------------------------------------------------------------- row functions */

#define ROW2(TO, TA, TB, EXPR)                                                                                 \
    const int64_t n = R->n;                                                                                    \
    const int sa = R->sa, sb = R->sb;                                                                          \
    for (int64_t r_ = 0; r_ < R->m; r_++) {                                                                    \
        TO *o = (TO *)o_ + r_ * n;                                                                             \
        const TA *a = (const TA *)a_ + r_ * R->ra;                                                             \
        const TB *b = (const TB *)b_ + r_ * R->rb;                                                             \
        if (sa && sb) {                                                                                        \
            for (int64_t i = 0; i < n; i++) {                                                                  \
                TA x = a[i];                                                                                   \
                TB y = b[i];                                                                                   \
                o[i] = (TO)(EXPR);                                                                             \
            }                                                                                                  \
        } else if (sa) {                                                                                       \
            TB y = b[0];                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                                  \
                TA x = a[i];                                                                                   \
                o[i] = (TO)(EXPR);                                                                             \
            }                                                                                                  \
        } else if (sb) {                                                                                       \
            TA x = a[0];                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                                  \
                TB y = b[i];                                                                                   \
                o[i] = (TO)(EXPR);                                                                             \
            }                                                                                                  \
        } else {                                                                                               \
            TA x = a[0];                                                                                       \
            TB y = b[0];                                                                                       \
            TO v = (TO)(EXPR);                                                                                 \
            for (int64_t i = 0; i < n; i++)                                                                    \
                o[i] = v;                                                                                      \
        }                                                                                                      \
    }

#define DEFROW(NAME, TO, TA, TB, EXPR)                                                                         \
    static void NAME(void *o_, const void *a_, const void *b_, const void *c_, const rowarg *R)              \
    {                                                                                                          \
        ROW2(TO, TA, TB, EXPR)                                                                                 \
    }

/* type lists: (dtype, C type, signed) */
#define F_TYPES(M, OP) M(OP, FLOAT32, float) M(OP, FLOAT64, double)
#define I_TYPES(M, OP)                                                                                         \
    M(OP, INT8, int8_t, 1) M(OP, UINT8, uint8_t, 0) M(OP, INT16, int16_t, 1) M(OP, UINT16, uint16_t, 0)      \
    M(OP, INT32, int32_t, 1) M(OP, UINT32, uint32_t, 0) M(OP, INT64, int64_t, 1) M(OP, UINT64, uint64_t, 0)

#define GEN_F(OP, DT, T) DEFROW(OP##_##DT, T, T, T, E_##OP##_F(T))
#define GEN_I(OP, DT, T, SG) DEFROW(OP##_##DT, T, T, T, E_##OP##_I(T, SG))
#define GEN_CF(OP, DT, T) DEFROW(OP##_##DT, uint8_t, T, T, E_##OP##_F(T))
#define GEN_CI(OP, DT, T, SG) DEFROW(OP##_##DT, uint8_t, T, T, E_##OP##_I(T, SG))
#define TBL_F(OP, DT, T) [KILN_DT_##DT] = OP##_##DT,
#define TBL_I(OP, DT, T, SG) [KILN_DT_##DT] = OP##_##DT,

/* arithmetic on all numeric types */
#define ARITH(OP)                                                                                              \
    F_TYPES(GEN_F, OP)                                                                                         \
    I_TYPES(GEN_I, OP)                                                                                         \
    static const row_fn tbl_##OP[KILN_DT_COUNT] = {F_TYPES(TBL_F, OP) I_TYPES(TBL_I, OP)};
/* comparisons: numeric -> bool */
#define CMP(OP)                                                                                                \
    F_TYPES(GEN_CF, OP)                                                                                        \
    I_TYPES(GEN_CI, OP)                                                                                        \
    static const row_fn tbl_##OP[KILN_DT_COUNT] = {F_TYPES(TBL_F, OP) I_TYPES(TBL_I, OP)};
/* integer only */
#define IONLY(OP)                                                                                              \
    I_TYPES(GEN_I, OP)                                                                                         \
    static const row_fn tbl_##OP[KILN_DT_COUNT] = {I_TYPES(TBL_I, OP)};

/* integer arithmetic wraps (computed in uint64, truncated) */
#define E_Add_F(T) (x + y)
#define E_Add_I(T, SG) (T)((uint64_t)x + (uint64_t)y)
#define E_Sub_F(T) (x - y)
#define E_Sub_I(T, SG) (T)((uint64_t)x - (uint64_t)y)
#define E_Mul_F(T) (x * y)
#define E_Mul_I(T, SG) (T)((uint64_t)x * (uint64_t)y)
#define E_Div_F(T) (x / y)
#define E_Div_I(T, SG) (y == 0 ? (T)0 : (SG && is_m1((int64_t)y)) ? (T)(0 - (uint64_t)x) : (T)(x / y))
/* Max/Min: NaN propagates like numpy.maximum / minimum */
#define E_Max_F(T) ((x > y || x != x) ? x : y)
#define E_Max_I(T, SG) (x > y ? x : y)
#define E_Min_F(T) ((x < y || x != x) ? x : y)
#define E_Min_I(T, SG) (x < y ? x : y)
/* Mod: fmod=1 -> C fmod / %, fmod=0 -> sign of divisor (Python / numpy.mod) */
#define E_FMod_F(T) (T##_fmod(x, y))
#define E_FMod_I(T, SG) ((y == 0 || (SG && is_m1((int64_t)y))) ? (T)0 : (T)(x % y))
#define E_PMod_F(T) (T##_pymod(x, y))
#define E_PMod_I(T, SG) (T##_pymodi(x, y, SG))
/* PRelu */
#define E_PRelu_F(T) (x < 0 ? x * y : x)
#define E_PRelu_I(T, SG) ((SG && is_neg((int64_t)x)) ? (T)((uint64_t)x * (uint64_t)y) : x)
/* comparisons */
#define E_Equal_F(T) (x == y)
#define E_Equal_I(T, SG) (x == y)
#define E_Greater_F(T) (x > y)
#define E_Greater_I(T, SG) (x > y)
#define E_GreaterOrEqual_F(T) (x >= y)
#define E_GreaterOrEqual_I(T, SG) (x >= y)
#define E_Less_F(T) (x < y)
#define E_Less_I(T, SG) (x < y)
#define E_LessOrEqual_F(T) (x <= y)
#define E_LessOrEqual_I(T, SG) (x <= y)
/* bitwise */
#define E_BitwiseAnd_I(T, SG) (x & y)
#define E_BitwiseOr_I(T, SG) (x | y)
#define E_BitwiseXor_I(T, SG) (x ^ y)
#define E_ShiftL_I(T, SG) ((uint64_t)y >= sizeof(T) * 8 ? (T)0 : (T)((uint64_t)x << (uint64_t)y))
#define E_ShiftR_I(T, SG) ((uint64_t)y >= sizeof(T) * 8 ? (T)0 : (T)((uint64_t)x >> (uint64_t)y))

/* (helpers keep -Wtype-limits quiet for unsigned instantiations) */
static inline bool is_m1(int64_t v) { return v == -1; }
static inline bool is_neg(int64_t v) { return v < 0; }

static inline float float_fmod(float x, float y) { return fmodf(x, y); }
static inline double double_fmod(double x, double y) { return fmod(x, y); }
static inline float float_pymod(float x, float y)
{
    float r = fmodf(x, y);
    if (r != 0) {
        if ((r < 0) != (y < 0))
            r += y;
    } else {
        r = copysignf(0.0f, y);
    }
    return r;
}
static inline double double_pymod(double x, double y)
{
    double r = fmod(x, y);
    if (r != 0) {
        if ((r < 0) != (y < 0))
            r += y;
    } else {
        r = copysign(0.0, y);
    }
    return r;
}
#define PYMODI(T)                                                                                              \
    static inline T T##_pymodi(T x, T y, int sg)                                                               \
    {                                                                                                          \
        if (y == 0 || (sg && is_m1((int64_t)y)))                                                                \
            return 0;                                                                                          \
        T r = (T)(x % y);                                                                                      \
        if (sg && r != 0 && (is_neg((int64_t)r) != is_neg((int64_t)y)))                                            \
            r = (T)((uint64_t)r + (uint64_t)y);                                                                \
        return r;                                                                                              \
    }
PYMODI(int8_t)
PYMODI(uint8_t)
PYMODI(int16_t)
PYMODI(uint16_t)
PYMODI(int32_t)
PYMODI(uint32_t)
PYMODI(int64_t)
PYMODI(uint64_t)

ARITH(Add)
ARITH(Sub)
ARITH(Mul)
ARITH(Div)
ARITH(Max)
ARITH(Min)
ARITH(FMod)
ARITH(PMod)
ARITH(PRelu)
CMP(Equal)
CMP(Greater)
CMP(GreaterOrEqual)
CMP(Less)
CMP(LessOrEqual)
IONLY(BitwiseAnd)
IONLY(BitwiseOr)
IONLY(BitwiseXor)
IONLY(ShiftL)
IONLY(ShiftR)

/* bool ops */
DEFROW(And_BOOL, uint8_t, uint8_t, uint8_t, (x != 0) & (y != 0))
DEFROW(Or_BOOL, uint8_t, uint8_t, uint8_t, (x != 0) | (y != 0))
DEFROW(Xor_BOOL, uint8_t, uint8_t, uint8_t, (x != 0) ^ (y != 0))
DEFROW(Equal_BOOL, uint8_t, uint8_t, uint8_t, (x != 0) == (y != 0))
static const row_fn tbl_And[KILN_DT_COUNT] = {[KILN_DT_BOOL] = And_BOOL};
static const row_fn tbl_Or[KILN_DT_COUNT] = {[KILN_DT_BOOL] = Or_BOOL};
static const row_fn tbl_Xor[KILN_DT_COUNT] = {[KILN_DT_BOOL] = Xor_BOOL};

/* Pow: float base with same-typed exponent, and integer base with int64 exponent. */
DEFROW(pow_f32_gen, float, float, float, powf(x, y))
static void pow_f32(void *o_, const void *a_, const void *b_, const void *c_, const rowarg *R)
{
    /* x ** scalar with small integral exponents (x*x is common in decomposed LayerNorm) */
    if (R->sa && !R->sb) {
        for (int64_t r = 0; r < R->m; r++) {
            float *o = (float *)o_ + r * R->n;
            const float *a = (const float *)a_ + r * R->ra;
            float y = ((const float *)b_)[r * R->rb];
            int64_t n = R->n;
            if (y == 2.0f) {
                for (int64_t i = 0; i < n; i++)
                    o[i] = a[i] * a[i];
            } else if (y == 1.0f) {
                for (int64_t i = 0; i < n; i++)
                    o[i] = a[i];
            } else if (y == 3.0f) {
                for (int64_t i = 0; i < n; i++)
                    o[i] = a[i] * a[i] * a[i];
            } else {
                for (int64_t i = 0; i < n; i++)
                    o[i] = powf(a[i], y);
            }
        }
        return;
    }
    pow_f32_gen(o_, a_, b_, c_, R);
}
DEFROW(pow_f64, double, double, double, pow(x, y))

static inline uint64_t ipow_u64(uint64_t base, int64_t e)
{
    if (e < 0) {
        /* numpy refuses negative integer powers; give the exact result where one exists */
        if (base == 1)
            return 1;
        if (base == (uint64_t)-1)
            return (e & 1) ? (uint64_t)-1 : 1;
        return 0;
    }
    uint64_t r = 1;
    while (e) {
        if (e & 1)
            r *= base;
        base *= base;
        e >>= 1;
    }
    return r;
}
#define GEN_IPOW(OP, DT, T, SG) DEFROW(ipow_##DT, T, T, int64_t, (T)ipow_u64((uint64_t)x, y))
#define TBL_IPOW(OP, DT, T, SG) [KILN_DT_##DT] = ipow_##DT,
I_TYPES(GEN_IPOW, _)
static const row_fn tbl_ipow[KILN_DT_COUNT] = {I_TYPES(TBL_IPOW, _)};

/* Where: cond ? x : y by element size */
#define GEN_WHERE(SZ, T)                                                                                       \
    static void where_##SZ(void *o_, const void *a_, const void *b_, const void *c_, const rowarg *R)        \
    {                                                                                                          \
        const int64_t n = R->n, sa = R->sa, sb = R->sb, sc = R->sc;                                            \
        for (int64_t r = 0; r < R->m; r++) {                                                                   \
            T *o = (T *)o_ + r * n;                                                                            \
            const uint8_t *c = (const uint8_t *)a_ + r * R->ra;                                                \
            const T *x = (const T *)b_ + r * R->rb, *y = (const T *)c_ + r * R->rc;                            \
            if (sa && sb && sc) {                                                                              \
                for (int64_t i = 0; i < n; i++)                                                                \
                    o[i] = c[i] ? x[i] : y[i];                                                                 \
            } else {                                                                                           \
                for (int64_t i = 0; i < n; i++)                                                                \
                    o[i] = c[i * sa] ? x[i * sb] : y[i * sc];                                                  \
            }                                                                                                  \
        }                                                                                                      \
    }
GEN_WHERE(1, uint8_t)
GEN_WHERE(2, uint16_t)
GEN_WHERE(4, uint32_t)
GEN_WHERE(8, uint64_t)

/* Mean: divide the sum in place */
static void scale_inplace(kiln_tensor *t, double inv)
{
    int64_t n = kiln__shape_numel(t->ndim, t->dims);
    if (t->dtype == KILN_DT_FLOAT32) {
        float *p = t->data, s = (float)inv;
        for (int64_t i = 0; i < n; i++)
            p[i] *= s;
    } else if (t->dtype == KILN_DT_FLOAT64) {
        double *p = t->data;
        for (int64_t i = 0; i < n; i++)
            p[i] *= inv;
    }
}

/* Rounds a float32 tensor's values to float16 / bfloat16 precision in place. */
static void round_half(kiln_tensor *t, kiln_dtype half)
{
    int64_t n = kiln__shape_numel(t->ndim, t->dims);
    float *p = t->data;
    if (half == KILN_DT_FLOAT16)
        for (int64_t i = 0; i < n; i++)
            p[i] = kiln__f16_to_f32(kiln__f32_to_f16(p[i]));
    else
        for (int64_t i = 0; i < n; i++)
            p[i] = kiln__bf16_to_f32(kiln__f32_to_bf16(p[i]));
}

/* ---------------------------------------------------------------- temporaries */

/* A float32 copy of a float16/bfloat16 (or any numeric) tensor. */
static kiln_status to_dtype(const kiln_kctx *ctx, const kiln_tensor *src, kiln_dtype dt, kiln_tensor *tmp)
{
    memset(tmp, 0, sizeof *tmp);
    kiln_status st = kiln__tensor_alloc(tmp, dt, src->ndim, src->dims);
    if (st != KILN_OK) {
        kiln__err_prefix("%s node '%s'", ctx->node->op_type, ctx->node->name);
        return st;
    }
    int64_t n = kiln__shape_numel(src->ndim, src->dims);
    st = kiln__convert(dt, tmp->data, src->dtype, src->data, n);
    if (st != KILN_OK) {
        kiln__tensor_release(tmp);
        kiln__err_prefix("%s node '%s'", ctx->node->op_type, ctx->node->name);
    }
    return st;
}

/* Writes a float32 result into output 0 as dtype dt (float16 / bfloat16 / other). */
static kiln_status store_out(kiln_kctx *ctx, const kiln_tensor *res, kiln_dtype dt)
{
    KILN_TRY(kiln__kout(ctx, 0, dt, res->ndim, res->dims));
    int64_t n = kiln__shape_numel(res->ndim, res->dims);
    kiln_tensor *o = ctx->out[0];
    kiln_status st = kiln__convert(dt, o->data, res->dtype, res->data, n);
    if (st != KILN_OK)
        kiln__err_prefix("%s node '%s'", ctx->node->op_type, ctx->node->name);
    return st;
}

/* ---------------------------------------------------------------- generic drivers */

/* Binary op a (op) b with a row table; bool_out: the output is bool. Inputs must share a dtype. */
static kiln_status binop_t(kiln_kctx *ctx, const kiln_tensor *a, const kiln_tensor *b, const row_fn *tbl,
                           bool bool_out)
{
    KILN_TRY(kiln__kcheck(ctx, a, 0));
    KILN_TRY(kiln__kcheck(ctx, b, 1));
    if (a->dtype != b->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "input dtypes differ (%s vs %s)", kiln_dtype_name(a->dtype),
                          kiln_dtype_name(b->dtype));
    const kiln_tensor *ins[2] = {a, b};
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    KILN_TRY(kiln__broadcast_shape(ctx, 2, ins, &nd, dims));
    kiln_dtype dt = a->dtype;
    if (is_half(dt) && tbl[KILN_DT_FLOAT32]) {
        kiln_tensor ta, tb, tr;
        memset(&tr, 0, sizeof tr);
        KILN_TRY(to_dtype(ctx, a, KILN_DT_FLOAT32, &ta));
        kiln_status st = to_dtype(ctx, b, KILN_DT_FLOAT32, &tb);
        if (st != KILN_OK) {
            kiln__tensor_release(&ta);
            return st;
        }
        const kiln_tensor *tins[2] = {&ta, &tb};
        if (bool_out) {
            st = kiln__kout_uninit(ctx, 0, KILN_DT_BOOL, nd, dims);   /* bcast_exec writes every element */
            if (st == KILN_OK)
                bcast_exec(ctx, tbl[KILN_DT_FLOAT32], ctx->out[0], 2, tins);
        } else {
            st = kiln__tensor_alloc(&tr, KILN_DT_FLOAT32, nd, dims);
            if (st == KILN_OK) {
                bcast_exec(ctx, tbl[KILN_DT_FLOAT32], &tr, 2, tins);
                st = store_out(ctx, &tr, dt);
            } else {
                kiln__err_prefix("%s node '%s'", ctx->node->op_type, ctx->node->name);
            }
        }
        kiln__tensor_release(&ta);
        kiln__tensor_release(&tb);
        kiln__tensor_release(&tr);
        return st;
    }
    row_fn fn = (unsigned)dt < KILN_DT_COUNT ? tbl[dt] : NULL;
    if (!fn)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(dt));
    KILN_TRY(kiln__kout_uninit(ctx, 0, bool_out ? KILN_DT_BOOL : dt, nd, dims));   /* every element written */
    bcast_exec(ctx, fn, ctx->out[0], 2, ins);
    return KILN_OK;
}

static kiln_status binop(kiln_kctx *ctx, const row_fn *tbl, bool bool_out)
{
    return binop_t(ctx, kiln__kin(ctx, 0), kiln__kin(ctx, 1), tbl, bool_out);
}

/* Variadic Max/Min/Sum/Mean. */
static kiln_status variadic(kiln_kctx *ctx, const row_fn *tbl, bool mean)
{
    int n = ctx->n_in;
    if (n < 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "needs at least one input");
    if (n > 4096)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "too many inputs (%d)", n);
    for (int i = 0; i < n; i++)
        KILN_TRY(kiln__kcheck(ctx, ctx->in[i], i));
    kiln_dtype dt = ctx->in[0]->dtype;
    for (int i = 1; i < n; i++)
        if (ctx->in[i]->dtype != dt)
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "input dtypes differ (%s vs %s)", kiln_dtype_name(dt),
                              kiln_dtype_name(ctx->in[i]->dtype));
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    KILN_TRY(kiln__broadcast_shape(ctx, n, ctx->in, &nd, dims));
    kiln_dtype cdt = is_half(dt) ? KILN_DT_FLOAT32 : dt;
    row_fn fn = (unsigned)cdt < KILN_DT_COUNT ? tbl[cdt] : NULL;
    if (!fn)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(dt));
    if (mean && !kiln__dtype_is_float(dt))
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "Mean of dtype %s is not supported", kiln_dtype_name(dt));
    /* accumulator: the output itself, or a float32 temporary for half types */
    kiln_tensor acc_tmp;
    memset(&acc_tmp, 0, sizeof acc_tmp);
    kiln_tensor *acc;
    if (cdt == dt) {
        KILN_TRY(kiln__kout(ctx, 0, dt, nd, dims));
        acc = ctx->out[0];
    } else {
        kiln_status st = kiln__tensor_alloc(&acc_tmp, cdt, nd, dims);
        if (st != KILN_OK) {
            kiln__err_prefix("%s node '%s'", ctx->node->op_type, ctx->node->name);
            return st;
        }
        acc = &acc_tmp;
    }
    kiln_status st = KILN_OK;
    int64_t total = kiln__shape_numel(nd, dims);
    for (int i = 0; i < n && st == KILN_OK; i++) {
        kiln_tensor conv;
        memset(&conv, 0, sizeof conv);
        const kiln_tensor *src = ctx->in[i];
        if (cdt != dt) {
            st = to_dtype(ctx, src, cdt, &conv);
            if (st != KILN_OK)
                break;
            src = &conv;
        }
        if (i == 0) {
            /* acc = broadcast(in0): for a same-shape input a copy, else in0 max in0 (idempotent for
             * Max/Min) -- use a plain broadcast copy via Where-like copy rows */
            if (kiln__shape_numel(src->ndim, src->dims) == total) {
                if (total > 0)
                    memcpy(acc->data, src->data, (size_t)total * kiln_dtype_size(cdt));
            } else {
                size_t es = kiln_dtype_size(cdt);
                row_fn cp = NULL;
                /* copy rows: where(true, x, x) */
                static const uint8_t one = 1;
                kiln_tensor ct = {.dtype = KILN_DT_BOOL, .ndim = 0, .data = (void *)&one, .nbytes = 1};
                cp = es == 1 ? where_1 : es == 2 ? where_2 : es == 4 ? where_4 : where_8;
                const kiln_tensor *cins[3] = {&ct, src, src};
                bcast_exec(ctx, cp, acc, 3, cins);
            }
        } else {
            const kiln_tensor *bins[2] = {acc, src};
            bcast_exec(ctx, fn, acc, 2, bins);
            if (cdt != dt)
                round_half(acc, dt); /* each step rounds to the half type, like numpy */
        }
        kiln__tensor_release(&conv);
    }
    if (st == KILN_OK && mean)
        scale_inplace(acc, 1.0 / n);
    if (st == KILN_OK && acc == &acc_tmp)
        st = store_out(ctx, &acc_tmp, dt);
    kiln__tensor_release(&acc_tmp);
    return st;
}

/* ---------------------------------------------------------------- kernels */

static kiln_status k_add(kiln_kctx *ctx) { return binop(ctx, tbl_Add, false); }
static kiln_status k_sub(kiln_kctx *ctx) { return binop(ctx, tbl_Sub, false); }
static kiln_status k_mul(kiln_kctx *ctx) { return binop(ctx, tbl_Mul, false); }
/* Integer Div/Mod: refuses a zero divisor (ONNX leaves it undefined; ONNX Runtime fails with
 * "Integer division by zero" rather than return a made-up value). One pass over the divisor
 * only, before the rows run, so the float paths pay one dtype test and the integer ones no
 * per-element cost. Every element of b is used when the output is non-empty (broadcasting
 * drops none), and the output is empty exactly when a or b is. */
static kiln_status int_divisor_check(kiln_kctx *ctx, const char *what)
{
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 1);
    if (!a || !b || !kiln__dtype_is_int(b->dtype) || a->dtype != b->dtype || !b->data)
        return KILN_OK;   /* binop_t reports these */
    int64_t na = kiln__shape_numel(a->ndim, a->dims), nb = kiln__shape_numel(b->ndim, b->dims);
    if (na <= 0 || nb <= 0)
        return KILN_OK;
    /* an integer zero is all zero bytes, whatever the signedness: one unsigned loop per width,
     * counting the zeros without an early exit so that it vectorizes (a per-element memcpy of
     * the width made an int64 Div of 1M elements 50% slower) */
    const size_t es = kiln_dtype_size(b->dtype);
    int64_t zeros = 0;
#define COUNT_ZEROS(T)                                                                                         \
    do {                                                                                                       \
        const T *q = b->data;                                                                                  \
        for (int64_t i = 0; i < nb; i++)                                                                       \
            zeros += q[i] == 0;                                                                                \
    } while (0)
    switch (es) {
    case 1: COUNT_ZEROS(uint8_t); break;
    case 2: COUNT_ZEROS(uint16_t); break;
    case 4: COUNT_ZEROS(uint32_t); break;
    default: COUNT_ZEROS(uint64_t); break;
    }
#undef COUNT_ZEROS
    if (zeros == 0)
        return KILN_OK;
    int64_t i = 0;
    while (i < nb && kiln__get_i64(b->dtype, b->data, i) != 0)
        i++;
    return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "integer %s by zero (divisor element %lld)", what, (long long)i);
}

static kiln_status k_div(kiln_kctx *ctx)
{
    KILN_TRY(int_divisor_check(ctx, "division"));
    return binop(ctx, tbl_Div, false);
}
static kiln_status k_equal(kiln_kctx *ctx)
{
    const kiln_tensor *a = kiln__kin(ctx, 0);
    if (a && a->dtype == KILN_DT_BOOL) {
        static const row_fn tb[KILN_DT_COUNT] = {[KILN_DT_BOOL] = Equal_BOOL};
        return binop(ctx, tb, true);
    }
    return binop(ctx, tbl_Equal, true);
}
static kiln_status k_greater(kiln_kctx *ctx) { return binop(ctx, tbl_Greater, true); }
static kiln_status k_greater_eq(kiln_kctx *ctx) { return binop(ctx, tbl_GreaterOrEqual, true); }
static kiln_status k_less(kiln_kctx *ctx) { return binop(ctx, tbl_Less, true); }
static kiln_status k_less_eq(kiln_kctx *ctx) { return binop(ctx, tbl_LessOrEqual, true); }
static kiln_status k_and(kiln_kctx *ctx) { return binop(ctx, tbl_And, true); }
static kiln_status k_or(kiln_kctx *ctx) { return binop(ctx, tbl_Or, true); }
static kiln_status k_xor(kiln_kctx *ctx) { return binop(ctx, tbl_Xor, true); }
static kiln_status k_bitand(kiln_kctx *ctx) { return binop(ctx, tbl_BitwiseAnd, false); }
static kiln_status k_bitor(kiln_kctx *ctx) { return binop(ctx, tbl_BitwiseOr, false); }
static kiln_status k_bitxor(kiln_kctx *ctx) { return binop(ctx, tbl_BitwiseXor, false); }
static kiln_status k_max(kiln_kctx *ctx) { return variadic(ctx, tbl_Max, false); }
static kiln_status k_min(kiln_kctx *ctx) { return variadic(ctx, tbl_Min, false); }
static kiln_status k_sum(kiln_kctx *ctx) { return variadic(ctx, tbl_Add, false); }
static kiln_status k_mean(kiln_kctx *ctx) { return variadic(ctx, tbl_Add, true); }

static kiln_status k_mod(kiln_kctx *ctx)
{
    int64_t fm = kiln__attr_i(ctx->node, "fmod", 0);
    if (fm != 0 && fm != 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "fmod must be 0 or 1, got %lld", (long long)fm);
    /* the spec requires fmod=1 for floating-point inputs (ONNX Runtime rejects fmod=0 there) */
    const kiln_tensor *a = kiln__kin(ctx, 0);
    if (!fm && a && kiln__dtype_is_float(a->dtype))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "fmod=0 is not allowed for %s inputs; floating-point Mod needs fmod=1",
                          kiln_dtype_name(a->dtype));
    KILN_TRY(int_divisor_check(ctx, "division (Mod)"));
    return binop(ctx, fm ? tbl_FMod : tbl_PMod, false);
}

static kiln_status k_bitshift(kiln_kctx *ctx)
{
    const char *dir = kiln__attr_s(ctx->node, "direction", NULL);
    if (!dir)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing attribute 'direction'");
    const kiln_tensor *a = kiln__kin(ctx, 0);
    if (a && kiln__dtype_is_signed(a->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "BitShift needs unsigned integers, got %s",
                          kiln_dtype_name(a->dtype));
    if (!strcmp(dir, "LEFT"))
        return binop(ctx, tbl_ShiftL, false);
    if (!strcmp(dir, "RIGHT"))
        return binop(ctx, tbl_ShiftR, false);
    return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "direction must be LEFT or RIGHT, got '%s'", dir);
}

static kiln_status k_bitnot(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    KILN_TRY(kiln__kcheck(ctx, x, 0));
    if (!kiln__dtype_is_int(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, x->dims));
    size_t nb = (size_t)kiln__shape_numel(x->ndim, x->dims) * kiln_dtype_size(x->dtype);
    const uint8_t *s = x->data;
    uint8_t *d = ctx->out[0]->data;
    for (size_t i = 0; i < nb; i++)
        d[i] = (uint8_t)~s[i];
    return KILN_OK;
}

static kiln_status k_prelu(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *s = kiln__kin(ctx, 1);
    KILN_TRY(kiln__kcheck(ctx, x, 0));
    KILN_TRY(kiln__kcheck(ctx, s, 1));
    /* opset < 7: a 1-D slope of length C applies per channel (axis 1) */
    kiln_tensor view;
    if (ctx->node->opset < 7 && s->ndim == 1 && x->ndim >= 2 && s->dims[0] == x->dims[1] && x->dims[1] != 1) {
        view = *s;
        view.ndim = x->ndim - 1;
        for (int d = 0; d < view.ndim; d++)
            view.dims[d] = d == 0 ? s->dims[0] : 1;
        s = &view;
    }
    /* unidirectional broadcast: slope must broadcast to X's shape */
    bool ok = s->ndim <= x->ndim;
    for (int d = 0; ok && d < s->ndim; d++) {
        int64_t sd = s->dims[s->ndim - 1 - d], xd = x->dims[x->ndim - 1 - d];
        if (sd != xd && sd != 1)
            ok = false;
    }
    if (!ok)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "slope cannot be broadcast to the input shape");
    return binop_t(ctx, x, s, tbl_PRelu, false);
}

static kiln_status k_pow(kiln_kctx *ctx)
{
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 1);
    KILN_TRY(kiln__kcheck(ctx, a, 0));
    KILN_TRY(kiln__kcheck(ctx, b, 1));
    const kiln_tensor *ins[2] = {a, b};
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    KILN_TRY(kiln__broadcast_shape(ctx, 2, ins, &nd, dims));
    kiln_dtype adt = a->dtype, bdt = b->dtype;
    if (!(kiln__dtype_is_float(adt) || kiln__dtype_is_int(adt)) || adt > KILN_DT_BFLOAT16)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "base dtype %s is not supported", kiln_dtype_name(adt));
    if (!(kiln__dtype_is_float(bdt) || kiln__dtype_is_int(bdt)) || bdt > KILN_DT_BFLOAT16)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "exponent dtype %s is not supported", kiln_dtype_name(bdt));
    /* fast path: same float dtype */
    if (adt == bdt && (adt == KILN_DT_FLOAT32 || adt == KILN_DT_FLOAT64)) {
        KILN_TRY(kiln__kout(ctx, 0, adt, nd, dims));
        bcast_exec(ctx, adt == KILN_DT_FLOAT32 ? pow_f32 : pow_f64, ctx->out[0], 2, ins);
        return KILN_OK;
    }
    /* choose the compute dtypes of base (cdt) and exponent (edt) */
    kiln_dtype cdt, edt;
    row_fn fn;
    if (kiln__dtype_is_float(adt)) {
        cdt = edt = adt == KILN_DT_FLOAT64 ? KILN_DT_FLOAT64 : KILN_DT_FLOAT32;
        fn = cdt == KILN_DT_FLOAT32 ? pow_f32 : pow_f64;
    } else if (kiln__dtype_is_int(bdt)) {
        cdt = adt;
        edt = KILN_DT_INT64;
        fn = tbl_ipow[adt];
    } else {
        cdt = edt = KILN_DT_FLOAT64;
        fn = pow_f64;
    }
    kiln_tensor ta, tb, tr;
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);
    memset(&tr, 0, sizeof tr);
    const kiln_tensor *pa = a, *pb = b;
    kiln_status st = KILN_OK;
    if (cdt != adt) {
        st = to_dtype(ctx, a, cdt, &ta);
        pa = &ta;
    }
    if (st == KILN_OK && edt != bdt) {
        st = to_dtype(ctx, b, edt, &tb);
        pb = &tb;
    }
    if (st == KILN_OK) {
        const kiln_tensor *cins[2] = {pa, pb};
        if (cdt == adt) {
            st = kiln__kout(ctx, 0, adt, nd, dims);
            if (st == KILN_OK)
                bcast_exec(ctx, fn, ctx->out[0], 2, cins);
        } else {
            st = kiln__tensor_alloc(&tr, cdt, nd, dims);
            if (st == KILN_OK) {
                bcast_exec(ctx, fn, &tr, 2, cins);
                st = store_out(ctx, &tr, adt);
            } else {
                kiln__err_prefix("%s node '%s'", ctx->node->op_type, ctx->node->name);
            }
        }
    }
    kiln__tensor_release(&ta);
    kiln__tensor_release(&tb);
    kiln__tensor_release(&tr);
    return st;
}

static kiln_status k_where(kiln_kctx *ctx)
{
    const kiln_tensor *c = kiln__kin(ctx, 0), *x = kiln__kin(ctx, 1), *y = kiln__kin(ctx, 2);
    KILN_TRY(kiln__kcheck(ctx, c, 0));
    KILN_TRY(kiln__kcheck(ctx, x, 1));
    KILN_TRY(kiln__kcheck(ctx, y, 2));
    if (c->dtype != KILN_DT_BOOL)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "condition must be bool, got %s", kiln_dtype_name(c->dtype));
    if (x->dtype != y->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "X and Y dtypes differ (%s vs %s)", kiln_dtype_name(x->dtype),
                          kiln_dtype_name(y->dtype));
    const kiln_tensor *ins[3] = {c, x, y};
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    KILN_TRY(kiln__broadcast_shape(ctx, 3, ins, &nd, dims));
    size_t es = kiln_dtype_size(x->dtype);
    row_fn fn = es == 1 ? where_1 : es == 2 ? where_2 : es == 4 ? where_4 : es == 8 ? where_8 : NULL;
    if (!fn)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, nd, dims));
    bcast_exec(ctx, fn, ctx->out[0], 3, ins);
    return KILN_OK;
}

const kiln_kernel_reg kiln__ref_binary[] = {
    {KILN_OP_Add, k_add},
    {KILN_OP_Sub, k_sub},
    {KILN_OP_Mul, k_mul},
    {KILN_OP_Div, k_div},
    {KILN_OP_Pow, k_pow},
    {KILN_OP_Mod, k_mod},
    {KILN_OP_PRelu, k_prelu},
    {KILN_OP_BitShift, k_bitshift},
    {KILN_OP_And, k_and},
    {KILN_OP_Or, k_or},
    {KILN_OP_Xor, k_xor},
    {KILN_OP_Equal, k_equal},
    {KILN_OP_Greater, k_greater},
    {KILN_OP_GreaterOrEqual, k_greater_eq},
    {KILN_OP_Less, k_less},
    {KILN_OP_LessOrEqual, k_less_eq},
    {KILN_OP_BitwiseAnd, k_bitand},
    {KILN_OP_BitwiseNot, k_bitnot},
    {KILN_OP_BitwiseOr, k_bitor},
    {KILN_OP_BitwiseXor, k_bitxor},
    {KILN_OP_Max, k_max},
    {KILN_OP_Min, k_min},
    {KILN_OP_Sum, k_sum},
    {KILN_OP_Mean, k_mean},
    {KILN_OP_Where, k_where},
    {KILN_OP_COUNT, NULL},
};
