/* Reference kernels: reductions (ReduceL1/L2/LogSum/LogSumExp/Max/Min/Mean/Prod/Sum/SumSquare)
 * and Softmax / LogSoftmax / Hardmax.
 *
 * Reductions first collapse the input shape: size-1 dimensions are dropped and neighbouring
 * dimensions that are both reduced or both kept are merged. When the reduced dimensions form
 * one contiguous block the problem is (outer, R, inner); float32 then takes a fast path with
 * tight, vectorizable loops (inner == 1: row reductions with several accumulator lanes;
 * inner > 1: column-wise accumulation over chunks of the inner dimension), multithreaded over
 * rows. Everything else (other dtypes, non-contiguous axis sets) goes through a generic
 * strided walker with double (or exact int64 for integer sum/prod/max/min) accumulators. */
#include "../../kernel.h"
#include "v4f.h"
#include <math.h>

enum { R_L1, R_L2, R_LOGSUM, R_LSE, R_MAX, R_MIN, R_MEAN, R_PROD, R_SUM, R_SUMSQ };

#define CHUNK 256 /* inner-dimension chunk for column-wise loops */

static bool supported_numeric(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_FLOAT32: case KILN_DT_FLOAT64: case KILN_DT_FLOAT16: case KILN_DT_BFLOAT16:
    case KILN_DT_INT8: case KILN_DT_UINT8: case KILN_DT_INT16: case KILN_DT_UINT16:
    case KILN_DT_INT32: case KILN_DT_UINT32: case KILN_DT_INT64: case KILN_DT_UINT64:
        return true;
    default:
        return false;
    }
}

static bool is_floatish(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16;
}


/* exp(x), Cephes-style: x = n*ln2 + r, exp(r) by a degree-6 polynomial, 2^n through the
 * exponent bits. Relative error ~1e-7; 0 below -87.3 (true value < 1.2e-38). The scalar and
 * vector versions do the same arithmetic. NaN and +inf give exp(88), not NaN / inf: callers
 * pass x - max with a finite max and settle rows whose max is NaN or +inf (or -inf: all -inf)
 * themselves, which keeps a select out of this hot loop. */
static inline v4f vexp(v4f x)
{
    v4f xc = vmax(vmin(x, vset(88.0f)), vset(-87.3f));
    v4f fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    v4f r = xc - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    v4f p = vset(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    v4i e = __builtin_convertvector(fn, v4i) + 127;
    v4f s = (v4f)(e << 23);
    return vsel(x < vset(-87.3f), vset(0.0f), p * s);
}

static inline float exp_f32(float x)
{
    float xc = x < 88.0f ? x : 88.0f;
    xc = xc > -87.3f ? xc : -87.3f;
    float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)fn + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return x < -87.3f ? 0.0f : p * s;
}

/* ------------------------------------------------------------------------------------------ */
/* Reduction layout                                                                            */

typedef struct rlayout {
    int nk, nr;                         /* merged kept / reduced dims (nr >= 1) */
    int64_t kd[KILN_MAX_DIMS], ks[KILN_MAX_DIMS];
    int64_t rd[KILN_MAX_DIMS], rs[KILN_MAX_DIMS];
    int64_t nout, R;
    bool contiguous;                    /* (outer, R, inner) form */
    int64_t outer, inner;
} rlayout;

static kiln_status build_layout(const kiln_kctx *ctx, const kiln_tensor *x, const bool *red, rlayout *L)
{
    int64_t md[KILN_MAX_DIMS];
    bool mr[KILN_MAX_DIMS];
    int nm = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (x->dims[d] == 1)
            continue;
        if (nm > 0 && mr[nm - 1] == red[d]) {
            if (!kiln__mul_nonneg(md[nm - 1], x->dims[d], &md[nm - 1]))
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
        } else {
            md[nm] = x->dims[d];
            mr[nm] = red[d];
            nm++;
        }
    }
    int64_t ms[KILN_MAX_DIMS], s = 1;
    for (int d = nm - 1; d >= 0; d--) {
        ms[d] = s;
        if (!kiln__mul_nonneg(s, md[d], &s))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
    }
    memset(L, 0, sizeof *L);
    L->nout = 1;
    L->R = 1;
    int first_r = -1, last_r = -1;
    for (int d = 0; d < nm; d++) {
        if (mr[d]) {
            L->rd[L->nr] = md[d];
            L->rs[L->nr] = ms[d];
            L->nr++;
            if (!kiln__mul_nonneg(L->R, md[d], &L->R))
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
            if (first_r < 0)
                first_r = d;
            last_r = d;
        } else {
            L->kd[L->nk] = md[d];
            L->ks[L->nk] = ms[d];
            L->nk++;
            if (!kiln__mul_nonneg(L->nout, md[d], &L->nout))
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
        }
    }
    if (L->nr == 0) {
        L->nr = 1;
        L->rd[0] = 1;
        L->rs[0] = 0;
    }
    L->contiguous = first_r == last_r; /* zero or one merged reduced dim */
    L->outer = 1;
    L->inner = 1;
    if (L->contiguous) {
        for (int d = 0; d < nm; d++) {
            if (first_r >= 0 && d > first_r)
                L->inner *= md[d];
            else if (d != first_r)
                L->outer *= md[d];
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* float32 fast paths                                                                          */

#define S_ADD(a, v) ((a) + (v))
#define S_ADDSQ(a, v) ((a) + (v) * (v))
#define S_ADDABS(a, v) ((a) + fabsf(v))
/* Max/Min propagate NaN like numpy's np.maximum.reduce (the ONNX reference of ReduceMax/Min):
 * a NaN value replaces the accumulator, and a NaN accumulator is kept (v > NaN is false). Both
 * arguments are also combined symmetrically this way when partial accumulators are merged. */
#define S_MAX(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))
#define S_MIN(a, v) (((v) < (a) || (v) != (v)) ? (v) : (a))
#define S_MUL(a, v) ((a) * (v))
#define V_ADD(a, v) ((a) + (v))
#define V_ADDSQ(a, v) ((a) + (v) * (v))
#define V_ADDABS(a, v) ((a) + vabs(v))
#define V_MAX(a, v) vsel(((v) > (a)) | ((v) != (v)), (v), (a))
#define V_MIN(a, v) vsel(((v) < (a)) | ((v) != (v)), (v), (a))
#define V_MUL(a, v) ((a) * (v))

/* res = reduction of x[0..n) with 4 vector accumulators; VOP/SOP accumulate a value,
 * VCOMB/SCOMB combine two partial results. */
#define ROW_REDUCE(res, x, n, INIT, VOP, VCOMB, SOP, SCOMB)                                     \
    do {                                                                                        \
        v4f a0_ = vset(INIT), a1_ = a0_, a2_ = a0_, a3_ = a0_;                                  \
        int64_t i_ = 0;                                                                         \
        for (; i_ + 16 <= (n); i_ += 16) {                                                      \
            a0_ = VOP(a0_, vld((x) + i_));                                                      \
            a1_ = VOP(a1_, vld((x) + i_ + 4));                                                  \
            a2_ = VOP(a2_, vld((x) + i_ + 8));                                                  \
            a3_ = VOP(a3_, vld((x) + i_ + 12));                                                 \
        }                                                                                       \
        for (; i_ + 4 <= (n); i_ += 4)                                                          \
            a0_ = VOP(a0_, vld((x) + i_));                                                      \
        a0_ = VCOMB(VCOMB(a0_, a1_), VCOMB(a2_, a3_));                                          \
        float r_ = SCOMB(SCOMB(a0_[0], a0_[1]), SCOMB(a0_[2], a0_[3]));                         \
        for (; i_ < (n); i_++)                                                                  \
            r_ = SOP(r_, (x)[i_]);                                                              \
        (res) = r_;                                                                             \
    } while (0)

static float row_max_f32(const float *x, int64_t n)
{
    float m;
    ROW_REDUCE(m, x, n, -INFINITY, V_MAX, V_MAX, S_MAX, S_MAX);
    return m;
}

static float lse_shift(float m)
{
    return isfinite(m) ? m : 0.0f;
}

/* sum of exp(x - m); also stores the exponentials into y when y != NULL */
static float row_sumexp_f32(const float *x, float *y, int64_t n, float m)
{
    v4f a0 = vset(0.0f), a1 = a0, vm = vset(m);
    int64_t i = 0;
    if (y) {
        for (; i + 8 <= n; i += 8) {
            v4f e0 = vexp(vld(x + i) - vm), e1 = vexp(vld(x + i + 4) - vm);
            vst(y + i, e0);
            vst(y + i + 4, e1);
            a0 += e0;
            a1 += e1;
        }
    } else {
        for (; i + 8 <= n; i += 8) {
            a0 += vexp(vld(x + i) - vm);
            a1 += vexp(vld(x + i + 4) - vm);
        }
    }
    a0 += a1;
    float s = (a0[0] + a0[1]) + (a0[2] + a0[3]);
    for (; i < n; i++) {
        float e = exp_f32(x[i] - m);
        if (y)
            y[i] = e;
        s += e;
    }
    return s;
}

static float row_reduce_f32(int op, const float *x, int64_t n)
{
    float r = 0.0f;
    switch (op) {
    case R_SUM: case R_MEAN: case R_LOGSUM:
        ROW_REDUCE(r, x, n, 0.0f, V_ADD, V_ADD, S_ADD, S_ADD);
        break;
    case R_SUMSQ: case R_L2:
        ROW_REDUCE(r, x, n, 0.0f, V_ADDSQ, V_ADD, S_ADDSQ, S_ADD);
        break;
    case R_L1:
        ROW_REDUCE(r, x, n, 0.0f, V_ADDABS, V_ADD, S_ADDABS, S_ADD);
        break;
    case R_MAX:
        ROW_REDUCE(r, x, n, -INFINITY, V_MAX, V_MAX, S_MAX, S_MAX);
        break;
    case R_MIN:
        ROW_REDUCE(r, x, n, INFINITY, V_MIN, V_MIN, S_MIN, S_MIN);
        break;
    case R_PROD:
        ROW_REDUCE(r, x, n, 1.0f, V_MUL, V_MUL, S_MUL, S_MUL);
        break;
    case R_LSE: {
        /* a NaN (the max propagates it) makes the result NaN, a +inf maximum +inf (log of an
         * infinite sum, as numpy's log(sum(exp(x)))): settled here, exp_f32 does not */
        float mx = row_max_f32(x, n), m = lse_shift(mx);
        return isnan(mx) || mx == INFINITY ? mx : m + logf(row_sumexp_f32(x, NULL, n, m));
    }
    }
    switch (op) {
    case R_MEAN: return r / (float)n;
    case R_LOGSUM: return logf(r);
    case R_L2: return sqrtf(r);
    default: return r;
    }
}

typedef struct fjob {
    int op;
    const float *x;
    float *y;
    int64_t outer, R, inner, nchunk;
} fjob;

static void f32_rows(void *p, int64_t b, int64_t e)
{
    const fjob *j = p;
    for (int64_t o = b; o < e; o++)
        j->y[o] = row_reduce_f32(j->op, j->x + o * j->R, j->R);
}

/* acc[0..len) = OP(acc, row r) for every row r of a [R, inner] block */
#define COL_LOOP(VOP, SOP)                                                                      \
    for (int64_t r = 0; r < R; r++) {                                                           \
        const float *p = x + r * inner;                                                         \
        int64_t i = 0;                                                                          \
        for (; i + 4 <= len; i += 4)                                                            \
            vst(acc + i, VOP(vld(acc + i), vld(p + i)));                                        \
        for (; i < len; i++)                                                                    \
            acc[i] = SOP(acc[i], p[i]);                                                         \
    }

static void f32_cols(void *pv, int64_t b, int64_t e)
{
    const fjob *j = pv;
    const int64_t R = j->R, inner = j->inner;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / j->nchunk, i0 = (t % j->nchunk) * CHUNK;
        int64_t len = inner - i0 < CHUNK ? inner - i0 : CHUNK;
        const float *x = j->x + o * R * inner + i0;
        float *y = j->y + o * inner + i0;
        float acc[CHUNK], m[CHUNK];
        float init = j->op == R_MAX || j->op == R_LSE ? -INFINITY : j->op == R_MIN ? INFINITY
                     : j->op == R_PROD ? 1.0f : 0.0f;
        for (int64_t i = 0; i < len; i++)
            acc[i] = init;
        switch (j->op) {
        case R_SUM: case R_MEAN: case R_LOGSUM: COL_LOOP(V_ADD, S_ADD); break;
        case R_SUMSQ: case R_L2: COL_LOOP(V_ADDSQ, S_ADDSQ); break;
        case R_L1: COL_LOOP(V_ADDABS, S_ADDABS); break;
        case R_MAX: COL_LOOP(V_MAX, S_MAX); break;
        case R_MIN: COL_LOOP(V_MIN, S_MIN); break;
        case R_PROD: COL_LOOP(V_MUL, S_MUL); break;
        case R_LSE:
            COL_LOOP(V_MAX, S_MAX);
            for (int64_t i = 0; i < len; i++) {
                y[i] = acc[i]; /* the maximum, kept for the NaN / +inf cases below */
                m[i] = lse_shift(acc[i]);
                acc[i] = 0.0f;
            }
            for (int64_t r = 0; r < R; r++) {
                const float *p = x + r * inner;
                int64_t i = 0;
                for (; i + 4 <= len; i += 4)
                    vst(acc + i, vld(acc + i) + vexp(vld(p + i) - vld(m + i)));
                for (; i < len; i++)
                    acc[i] += exp_f32(p[i] - m[i]);
            }
            break;
        }
        switch (j->op) {
        case R_MEAN: for (int64_t i = 0; i < len; i++) y[i] = acc[i] / (float)R; break;
        case R_LOGSUM: for (int64_t i = 0; i < len; i++) y[i] = logf(acc[i]); break;
        case R_L2: for (int64_t i = 0; i < len; i++) y[i] = sqrtf(acc[i]); break;
        case R_LSE: /* as row_reduce_f32: a NaN / +inf maximum is the result */
            for (int64_t i = 0; i < len; i++)
                y[i] = isnan(y[i]) || y[i] == INFINITY ? y[i] : m[i] + logf(acc[i]);
            break;
        default: memcpy(y, acc, (size_t)len * sizeof(float)); break;
        }
    }
}

static int64_t grain_for(int64_t work_per_task)
{
    int64_t g = 32768 / (work_per_task > 0 ? work_per_task : 1);
    return g < 1 ? 1 : g;
}

/* ------------------------------------------------------------------------------------------ */
/* generic path                                                                                */

typedef struct gjob {
    int op;
    kiln_dtype dt;
    const void *x;
    void *y;
    const rlayout *L;
} gjob;

/* Walks the reduced elements of output o as segments (offset, L->rd[last], L->rs[last]). */
#define FOR_SEGS(L, base, OFF, ...)                                                            \
    do {                                                                                        \
        int64_t idx_[KILN_MAX_DIMS] = {0};                                                      \
        int last_ = (L)->nr - 1;                                                                \
        if ((L)->R > 0)                                                                         \
            for (;;) {                                                                          \
                int64_t OFF = (base);                                                           \
                for (int d_ = 0; d_ < last_; d_++)                                              \
                    OFF += idx_[d_] * (L)->rs[d_];                                              \
                __VA_ARGS__;                                                                    \
                int d_ = last_ - 1;                                                             \
                while (d_ >= 0 && ++idx_[d_] == (L)->rd[d_]) {                                  \
                    idx_[d_] = 0;                                                               \
                    d_--;                                                                       \
                }                                                                               \
                if (d_ < 0)                                                                     \
                    break;                                                                      \
            }                                                                                   \
    } while (0)

static void seg_f64(int op, int pass, kiln_dtype dt, const void *x, int64_t off, int64_t n, int64_t st,
                    double *acc, double m)
{
    if (op == R_LSE && pass == 0)
        op = R_MAX;
    for (int64_t i = 0; i < n; i++) {
        double v = kiln__get_f64(dt, x, off + i * st);
        switch (op) {
        case R_SUM: case R_MEAN: case R_LOGSUM: *acc += v; break;
        case R_SUMSQ: case R_L2: *acc += v * v; break;
        case R_L1: *acc += fabs(v); break;
        case R_MAX: if (v > *acc || isnan(v)) *acc = v; break;
        case R_MIN: if (v < *acc || isnan(v)) *acc = v; break;
        case R_PROD: *acc *= v; break;
        case R_LSE: *acc += exp(v - m); break;
        }
    }
}

static bool int_exact_op(int op)
{
    return op == R_SUM || op == R_MEAN || op == R_PROD || op == R_MAX || op == R_MIN || op == R_L1 ||
           op == R_SUMSQ;
}

static void int_limits(kiln_dtype dt, int64_t *lo, int64_t *hi)
{
    switch (dt) {
    case KILN_DT_INT8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case KILN_DT_UINT8: *lo = 0; *hi = UINT8_MAX; break;
    case KILN_DT_INT16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case KILN_DT_UINT16: *lo = 0; *hi = UINT16_MAX; break;
    case KILN_DT_INT32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case KILN_DT_UINT32: *lo = 0; *hi = UINT32_MAX; break;
    case KILN_DT_UINT64: *lo = 0; *hi = -1; break; /* bits of UINT64_MAX */
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
    }
}

static void gen_rows(void *p, int64_t b, int64_t e)
{
    const gjob *j = p;
    const rlayout *L = j->L;
    const int last = L->nr - 1;
    const int64_t slen = L->rd[last], sst = L->rs[last];
    const bool isint = !is_floatish(j->dt);
    const bool u64 = j->dt == KILN_DT_UINT64;
    for (int64_t o = b; o < e; o++) {
        int64_t base = 0, rem = o;
        for (int d = L->nk - 1; d >= 0; d--) {
            base += (rem % L->kd[d]) * L->ks[d];
            rem /= L->kd[d];
        }
        if (isint && int_exact_op(j->op)) {
            uint64_t acc = j->op == R_PROD ? 1 : 0;
            int64_t key = j->op == R_MAX ? INT64_MIN : INT64_MAX;
            FOR_SEGS(L, base, off, {
                for (int64_t i = 0; i < slen; i++) {
                    int64_t v = kiln__get_i64(j->dt, j->x, off + i * sst);
                    uint64_t uv = (uint64_t)v;
                    switch (j->op) {
                    case R_SUM: case R_MEAN: acc += uv; break;
                    case R_PROD: acc *= uv; break;
                    case R_SUMSQ: acc += uv * uv; break;
                    case R_L1: acc += (!u64 && v < 0) ? (uint64_t)0 - uv : uv; break;
                    case R_MAX: case R_MIN: {
                        int64_t k = u64 ? (int64_t)(uv ^ ((uint64_t)1 << 63)) : v;
                        if (j->op == R_MAX ? k > key : k < key)
                            key = k;
                        break;
                    }
                    }
                }
            });
            int64_t res;
            if (j->op == R_MAX || j->op == R_MIN) {
                if (L->R == 0) {
                    int64_t lo, hi;
                    int_limits(j->dt, &lo, &hi);
                    res = j->op == R_MAX ? lo : hi;
                } else {
                    res = u64 ? (int64_t)((uint64_t)key ^ ((uint64_t)1 << 63)) : key;
                }
            } else if (j->op == R_MEAN) {
                res = L->R > 0 ? (u64 ? (int64_t)(acc / (uint64_t)L->R) : (int64_t)acc / L->R) : 0;
            } else {
                res = (int64_t)acc;
            }
            kiln__set_i64(j->dt, j->y, o, res);
            continue;
        }
        double acc, m = 0.0;
        switch (j->op) {
        case R_MAX: case R_LSE: acc = -INFINITY; break;
        case R_MIN: acc = INFINITY; break;
        case R_PROD: acc = 1.0; break;
        default: acc = 0.0; break;
        }
        FOR_SEGS(L, base, off, seg_f64(j->op, 0, j->dt, j->x, off, slen, sst, &acc, 0.0));
        if (j->op == R_LSE) {
            m = isfinite(acc) ? acc : 0.0;
            acc = 0.0;
            FOR_SEGS(L, base, off, seg_f64(j->op, 1, j->dt, j->x, off, slen, sst, &acc, m));
        }
        double res;
        switch (j->op) {
        case R_MEAN: res = acc / (double)L->R; break;
        case R_LOGSUM: res = log(acc); break;
        case R_L2: res = sqrt(acc); break;
        case R_LSE: res = m + log(acc); break;
        default: res = acc; break;
        }
        kiln__set_f64(j->dt, j->y, o, res);
    }
}

/* ------------------------------------------------------------------------------------------ */

static kiln_status reduce(kiln_kctx *ctx, int op)
{
    const kiln_node *n = ctx->node;
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!supported_numeric(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    const int rank = x->ndim;
    if (rank < 0 || rank > KILN_MAX_DIMS)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "bad rank %d", rank);

    /* axes: an input from ReduceSum-13 (and every Reduce op from opset 18), else an attribute */
    bool axes_input = (n->op == KILN_OP_ReduceSum && n->opset >= 13) || n->opset >= 18;
    int64_t axes[KILN_MAX_DIMS];
    int64_t nax = 0;
    if (axes_input) {
        const kiln_tensor *at = kiln__kin(ctx, 1);
        if (at) {
            if (at->dtype != KILN_DT_INT64 && at->dtype != KILN_DT_INT32)
                return kiln__kerr(ctx, KILN_ERR_DTYPE, "axes must be int64");
            if (at->ndim > 1)
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "axes must be 1-D");
            nax = kiln__shape_numel(at->ndim, at->dims);
            if (nax < 0 || nax > (rank > 0 ? rank : 1))
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "%lld axes for a rank-%d input", (long long)nax, rank);
            for (int64_t i = 0; i < nax; i++)
                axes[i] = kiln__get_i64(at->dtype, at->data, i);
        }
    } else {
        const int64_t *av = NULL;
        int c = kiln__attr_ints(n, "axes", &av);
        if (c > 0) {
            if (c > (rank > 0 ? rank : 1))
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "%d axes for a rank-%d input", c, rank);
            nax = c;
            for (int i = 0; i < c; i++)
                axes[i] = av[i];
        }
    }
    const int64_t keepdims = kiln__attr_i(n, "keepdims", 1);
    const bool noop = axes_input && nax == 0 && kiln__attr_i(n, "noop_with_empty_axes", 0) != 0;

    bool red[KILN_MAX_DIMS] = {false};
    if (nax == 0) {
        for (int d = 0; d < rank; d++)
            red[d] = !noop;
    } else {
        for (int64_t i = 0; i < nax; i++) {
            int a;
            KILN_TRY(kiln__norm_axis(ctx, axes[i], rank, &a));
            if (rank == 0)
                continue;
            if (red[a])
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "duplicate axis %lld", (long long)axes[i]);
            red[a] = true;
        }
    }

    /* noop_with_empty_axes with no axes reduces over the empty set of axes: each element alone
     * (onnx PR #7394, ONNX Runtime PR #26436). For Sum/Mean/Max/Min/Prod that is the identity (a
     * copy, which also keeps -0.0); the others still apply their elementwise part (x^2, |x|,
     * sqrt(x^2), log x, log exp x), which the reduction below computes with R = 1 (red[] is all
     * false, so the layout has one reduced element per output and the output shape is x's). */
    if (noop && (op == R_SUM || op == R_MEAN || op == R_MAX || op == R_MIN || op == R_PROD)) {
        KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, x->dims));
        if (x->nbytes)
            memcpy(ctx->out[0]->data, x->data, x->nbytes);
        return KILN_OK;
    }

    int64_t odims[KILN_MAX_DIMS];
    int ond = 0;
    for (int d = 0; d < rank; d++) {
        if (!red[d])
            odims[ond++] = x->dims[d];
        else if (keepdims)
            odims[ond++] = 1;
    }
    rlayout L;
    KILN_TRY(build_layout(ctx, x, red, &L));
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, ond, odims));
    kiln_tensor *y = ctx->out[0];
    if (L.nout == 0)
        return KILN_OK;

    if (x->dtype == KILN_DT_FLOAT32 && L.contiguous) {
        fjob j = {op, x->data, y->data, L.outer, L.R, L.inner, 0};
        if (L.inner == 1) {
            kiln__parallel_for(ctx->pool, ctx->nthreads, L.outer, grain_for(L.R), f32_rows, &j);
        } else {
            j.nchunk = (L.inner + CHUNK - 1) / CHUNK;
            int64_t per = L.R * (L.inner < CHUNK ? L.inner : CHUNK);
            kiln__parallel_for(ctx->pool, ctx->nthreads, L.outer * j.nchunk, grain_for(per), f32_cols, &j);
        }
        return KILN_OK;
    }
    gjob g = {op, x->dtype, x->data, y->data, &L};
    kiln__parallel_for(ctx->pool, ctx->nthreads, L.nout, grain_for(L.R * 4), gen_rows, &g);
    return KILN_OK;
}

static kiln_status k_reduce_l1(kiln_kctx *ctx) { return reduce(ctx, R_L1); }
static kiln_status k_reduce_l2(kiln_kctx *ctx) { return reduce(ctx, R_L2); }
static kiln_status k_reduce_logsum(kiln_kctx *ctx) { return reduce(ctx, R_LOGSUM); }
static kiln_status k_reduce_lse(kiln_kctx *ctx) { return reduce(ctx, R_LSE); }
static kiln_status k_reduce_max(kiln_kctx *ctx) { return reduce(ctx, R_MAX); }
static kiln_status k_reduce_min(kiln_kctx *ctx) { return reduce(ctx, R_MIN); }
static kiln_status k_reduce_mean(kiln_kctx *ctx) { return reduce(ctx, R_MEAN); }
static kiln_status k_reduce_prod(kiln_kctx *ctx) { return reduce(ctx, R_PROD); }
static kiln_status k_reduce_sum(kiln_kctx *ctx) { return reduce(ctx, R_SUM); }
static kiln_status k_reduce_sumsq(kiln_kctx *ctx) { return reduce(ctx, R_SUMSQ); }

/* ------------------------------------------------------------------------------------------ */
/* Softmax / LogSoftmax / Hardmax                                                              */

enum { S_SOFTMAX, S_LOG, S_HARD };

typedef struct sjob {
    int kind;
    kiln_dtype dt;
    const void *x;
    void *y;
    int64_t outer, R, inner, nchunk;
} sjob;

/* log(sum of exp(x - m)) for a row whose maximum is m, accurate when the result is tiny:
 * the elements equal to m contribute exactly 1 each and are counted apart, so the result
 * is log1p((count - 1) + rest). */
static float row_logsumexp_shifted_f32(const float *x, int64_t n, float m)
{
    v4f rest = vset(0.0f), cnt = rest, vm = vset(m), one = vset(1.0f), zero = rest;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f v = vld(x + i);
        v4i eq = v == vm;
        rest += vsel(eq, zero, vexp(v - vm));
        cnt += vsel(eq, one, zero);
    }
    float r = (rest[0] + rest[1]) + (rest[2] + rest[3]);
    float c = (cnt[0] + cnt[1]) + (cnt[2] + cnt[3]);
    for (; i < n; i++) {
        if (x[i] == m)
            c += 1.0f;
        else
            r += exp_f32(x[i] - m);
    }
    return log1pf((c - 1.0f) + r);
}

static void sm_rows_f32(void *p, int64_t b, int64_t e)
{
    const sjob *j = p;
    const int64_t n = j->R;
    for (int64_t o = b; o < e; o++) {
        const float *x = (const float *)j->x + o * n;
        float *y = (float *)j->y + o * n;
        float m = row_max_f32(x, n);
        int64_t i = 0;
        if (!isfinite(m)) {
            /* numpy's exp(x - max) / sum and (x - max) - log(sum): a NaN (the max propagates it),
             * an all -inf row (-inf - -inf) or a +inf max (inf - inf) make the sum and so the
             * whole row NaN */
            for (; i < n; i++)
                y[i] = NAN;
            continue;
        }
        if (j->kind == S_SOFTMAX) {
            float s = row_sumexp_f32(x, y, n, m);
            v4f inv = vset(1.0f / s);
            for (; i + 4 <= n; i += 4)
                vst(y + i, vld(y + i) * inv);
            for (; i < n; i++)
                y[i] *= inv[0];
        } else {
            float ls = row_logsumexp_shifted_f32(x, n, m);
            v4f vls = vset(ls), vm = vset(m);
            for (; i + 4 <= n; i += 4)
                vst(y + i, (vld(x + i) - vm) - vls);
            for (; i < n; i++)
                y[i] = (x[i] - m) - ls;
        }
    }
}

static void sm_cols_f32(void *p, int64_t b, int64_t e)
{
    const sjob *j = p;
    const int64_t R = j->R, inner = j->inner;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / j->nchunk, i0 = (t % j->nchunk) * CHUNK;
        int64_t len = inner - i0 < CHUNK ? inner - i0 : CHUNK;
        const float *x = (const float *)j->x + o * R * inner + i0;
        float *y = (float *)j->y + o * R * inner + i0;
        float m[CHUNK], s[CHUNK];
        for (int64_t i = 0; i < len; i++) {
            m[i] = -INFINITY;
            s[i] = 0.0f;
        }
        for (int64_t r = 0; r < R; r++) {
            const float *px = x + r * inner;
            int64_t i = 0;
            for (; i + 4 <= len; i += 4)
                vst(m + i, V_MAX(vld(m + i), vld(px + i)));
            for (; i < len; i++)
                m[i] = S_MAX(m[i], px[i]);
        }
        /* a column whose max is NaN, -inf (all -inf) or +inf is all NaN (as in sm_rows_f32):
         * computed with max 0 like the others (finite garbage, exp saturating), then overwritten */
        bool bad[CHUNK], any_bad = false;
        for (int64_t i = 0; i < len; i++) {
            bad[i] = !isfinite(m[i]);
            if (bad[i]) {
                m[i] = 0.0f;
                any_bad = true;
            }
        }
        for (int64_t r = 0; r < R; r++) {
            const float *px = x + r * inner;
            float *py = y + r * inner;
            int64_t i = 0;
            for (; i + 4 <= len; i += 4) {
                v4f ev = vexp(vld(px + i) - vld(m + i));
                vst(py + i, ev);
                vst(s + i, vld(s + i) + ev);
            }
            for (; i < len; i++) {
                float ev = exp_f32(px[i] - m[i]);
                py[i] = ev;
                s[i] += ev;
            }
        }
        if (j->kind == S_SOFTMAX) {
            for (int64_t i = 0; i < len; i++)
                s[i] = 1.0f / s[i];
            for (int64_t r = 0; r < R; r++) {
                float *py = y + r * inner;
                int64_t i = 0;
                for (; i + 4 <= len; i += 4)
                    vst(py + i, vld(py + i) * vld(s + i));
                for (; i < len; i++)
                    py[i] *= s[i];
            }
        } else {
            /* log(s) accurately when s is close to 1: recount the elements equal to the max */
            float c[CHUNK];
            for (int64_t i = 0; i < len; i++) {
                c[i] = 0.0f;
                s[i] = 0.0f;
            }
            for (int64_t r = 0; r < R; r++) {
                const float *px = x + r * inner;
                const float *py = y + r * inner;
                for (int64_t i = 0; i < len; i++) {
                    if (px[i] == m[i])
                        c[i] += 1.0f;
                    else
                        s[i] += py[i];
                }
            }
            for (int64_t i = 0; i < len; i++)
                s[i] = log1pf((c[i] - 1.0f) + s[i]);
            for (int64_t r = 0; r < R; r++) {
                const float *px = x + r * inner;
                float *py = y + r * inner;
                int64_t i = 0;
                for (; i + 4 <= len; i += 4)
                    vst(py + i, (vld(px + i) - vld(m + i)) - vld(s + i));
                for (; i < len; i++)
                    py[i] = (px[i] - m[i]) - s[i];
            }
        }
        if (any_bad)
            for (int64_t r = 0; r < R; r++)
                for (int64_t i = 0; i < len; i++)
                    if (bad[i])
                        y[r * inner + i] = NAN;
    }
}

/* one line (o, i) at a time, any float dtype, double arithmetic */
static void sm_lines_gen(void *p, int64_t b, int64_t e)
{
    const sjob *j = p;
    const int64_t R = j->R, inner = j->inner;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / inner, i = t % inner;
        int64_t base = o * R * inner + i;
        double m = -INFINITY;
        int64_t arg = 0;
        for (int64_t r = 0; r < R; r++) {
            double v = kiln__get_f64(j->dt, j->x, base + r * inner);
            if (v > m) {
                m = v;
                arg = r;
            }
        }
        if (j->kind == S_HARD) {
            if (R > 0)
                kiln__set_f64(j->dt, j->y, base + arg * inner, 1.0);
            continue;
        }
        double s = 0.0;
        for (int64_t r = 0; r < R; r++)
            s += exp(kiln__get_f64(j->dt, j->x, base + r * inner) - m);
        double ls = log(s);
        for (int64_t r = 0; r < R; r++) {
            double v = kiln__get_f64(j->dt, j->x, base + r * inner);
            kiln__set_f64(j->dt, j->y, base + r * inner, j->kind == S_SOFTMAX ? exp(v - m) / s : (v - m) - ls);
        }
    }
}

static kiln_status softmax_like(kiln_kctx *ctx, int kind)
{
    const kiln_node *n = ctx->node;
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!is_floatish(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    const int rank = x->ndim;
    if (rank < 0 || rank > KILN_MAX_DIMS)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "bad rank %d", rank);
    const bool old = n->opset < 13;
    int axis;
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(n, "axis", old ? 1 : -1), rank, &axis));
    int64_t numel = kiln__shape_numel(rank, x->dims);
    if (numel < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "bad shape");
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, rank, x->dims));
    if (numel == 0)
        return KILN_OK;
    int64_t outer = 1, R = 1, inner = 1;
    for (int d = 0; d < rank; d++) {
        if (d < axis)
            outer *= x->dims[d];
        else if (d == axis || old)
            R *= x->dims[d];
        else
            inner *= x->dims[d];
    }
    sjob j = {kind, x->dtype, x->data, ctx->out[0]->data, outer, R, inner, 0};
    if (x->dtype == KILN_DT_FLOAT32 && kind != S_HARD) {
        if (inner == 1) {
            kiln__parallel_for(ctx->pool, ctx->nthreads, outer, grain_for(R * 4), sm_rows_f32, &j);
        } else {
            j.nchunk = (inner + CHUNK - 1) / CHUNK;
            int64_t per = R * (inner < CHUNK ? inner : CHUNK) * 4;
            kiln__parallel_for(ctx->pool, ctx->nthreads, outer * j.nchunk, grain_for(per), sm_cols_f32, &j);
        }
        return KILN_OK;
    }
    kiln__parallel_for(ctx->pool, ctx->nthreads, outer * inner, grain_for(R * 8), sm_lines_gen, &j);
    return KILN_OK;
}

static kiln_status k_softmax(kiln_kctx *ctx) { return softmax_like(ctx, S_SOFTMAX); }
static kiln_status k_logsoftmax(kiln_kctx *ctx) { return softmax_like(ctx, S_LOG); }
static kiln_status k_hardmax(kiln_kctx *ctx) { return softmax_like(ctx, S_HARD); }

const kiln_kernel_reg kiln__ref_reduce[] = {
    {KILN_OP_ReduceL1, k_reduce_l1},
    {KILN_OP_ReduceL2, k_reduce_l2},
    {KILN_OP_ReduceLogSum, k_reduce_logsum},
    {KILN_OP_ReduceLogSumExp, k_reduce_lse},
    {KILN_OP_ReduceMax, k_reduce_max},
    {KILN_OP_ReduceMin, k_reduce_min},
    {KILN_OP_ReduceMean, k_reduce_mean},
    {KILN_OP_ReduceProd, k_reduce_prod},
    {KILN_OP_ReduceSum, k_reduce_sum},
    {KILN_OP_ReduceSumSquare, k_reduce_sumsq},
    {KILN_OP_Softmax, k_softmax},
    {KILN_OP_LogSoftmax, k_logsoftmax},
    {KILN_OP_Hardmax, k_hardmax},
    {KILN_OP_COUNT, NULL},
};
