/* Reference kernels: MaxPool, AveragePool, LpPool, their Global variants, and MaxUnpool.
 *
 * Pooling works per (image, channel) plane, multithreaded over planes. float32 1-D/2-D
 * MaxPool/AveragePool have a direct scalar path; its vectorized variant (cpu/x86/pool_avx512.c,
 * registered over these by ISA) does whole output rows of MaxPool with dilation 1 (max over the
 * rows first, then over the columns), else the interior columns of each output row, for column
 * strides 1 and 2 (pool.h). Every other case (3-D, other dtypes, LpPool) converts to double and
 * runs a generic N-D loop. Global pools are pools whose kernel is the whole plane. */
#include "../pool.h"
#include "window.h"
#include <math.h>

enum { P_MAX, P_AVG, P_LP };

typedef kiln_window pool_geom;   /* M = G = 0 */

static kiln_status check_x(const kiln_kctx *ctx, const kiln_tensor *x)
{
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input X");
    if (x->ndim < 3)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "X must have rank >= 3, got %d", x->ndim);
    return kiln__win_check_dims(ctx, x, "X");
}

/* Geometry of a windowed pool from X and the attributes. */
static kiln_status pool_setup(const kiln_kctx *ctx, const kiln_tensor *x, pool_geom *g)
{
    memset(g, 0, sizeof *g);
    KILN_TRY(check_x(ctx, x));
    g->nsp = x->ndim - 2;
    g->N = x->dims[0];
    g->C = x->dims[1];
    for (int i = 0; i < g->nsp; i++)
        g->in[i] = x->dims[2 + i];
    bool has_k;
    KILN_TRY(kiln__win_ints(ctx, "kernel_shape", g->nsp, 1, 1, g->k, &has_k));
    if (!has_k)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "attribute 'kernel_shape' is required");
    return kiln__win_setup(ctx, g, kiln__attr_i(ctx->node, "ceil_mode", 0) != 0);
}

/* Global pools: one window covering the whole plane. */
static kiln_status global_setup(const kiln_kctx *ctx, const kiln_tensor *x, pool_geom *g)
{
    memset(g, 0, sizeof *g);
    KILN_TRY(check_x(ctx, x));
    g->nsp = x->ndim - 2;
    g->N = x->dims[0];
    g->C = x->dims[1];
    for (int i = 0; i < g->nsp; i++) {
        g->in[i] = x->dims[2 + i];
        g->k[i] = g->in[i] > 0 ? g->in[i] : 1;
        g->s[i] = g->d[i] = 1;
        g->out[i] = 1;
    }
    return kiln__win_sizes(ctx, g);
}

typedef struct pool_job {
    const pool_geom *g;
    int kind;
    bool count_pad, col_major;
    double p, lowest;
    const double *x;   /* generic path */
    double *y;
    const float *xf;   /* float32 fast path */
    float *yf;
    int64_t *idx;      /* MaxPool indices or NULL */
    kiln_pool_row_fn row; /* float32 path: vectorized row interiors, or NULL (scalar) */
    kiln_pool_maxrow_fn maxrow; /* float32 MaxPool: vectorized whole rows, or NULL */
} pool_job;

/* Flat index within a plane -> the index reported by MaxPool (plane offset added by caller). */
static int64_t plane_index(const pool_geom *g, int64_t flat, bool col_major)
{
    if (!col_major)
        return flat;
    int64_t c[SP_MAX], r = 0, st = 1;
    for (int d = g->nsp - 1; d >= 0; d--) {
        c[d] = flat % g->in[d];
        flat /= g->in[d];
    }
    for (int d = 0; d < g->nsp; d++) {
        r += c[d] * st;
        st *= g->in[d];
    }
    return r;
}

static void pool_generic_task(void *vctx, int64_t b, int64_t e)
{
    const pool_job *j = vctx;
    const pool_geom *g = j->g;
    int nsp = g->nsp;
    for (int64_t pl = b; pl < e; pl++) {
        const double *xp = j->x + pl * g->in_sz;
        double *yp = j->y + pl * g->out_sz;
        int64_t o[SP_MAX] = {0};
        for (int64_t op = 0; op < g->out_sz; op++) {
            int64_t st[SP_MAX], ka[SP_MAX], kb[SP_MAX], kk[SP_MAX];
            double cnt = 1.0;
            bool empty = false;
            for (int d = 0; d < nsp; d++) {
                st[d] = o[d] * g->s[d] - g->pb[d];
                valid_range(st[d], g->d[d], g->in[d], g->k[d], &ka[d], &kb[d]);
                if (ka[d] >= kb[d])
                    empty = true;
                if (j->count_pad) {
                    int64_t a2, b2;
                    valid_range(st[d] + g->pb[d], g->d[d], g->in[d] + g->pb[d] + g->pe[d], g->k[d], &a2, &b2);
                    cnt *= (double)(b2 - a2);
                } else {
                    cnt *= (double)(kb[d] - ka[d]);
                }
                kk[d] = ka[d];
            }
            for (int d = nsp - 1; d >= 0; d--) {
                if (++o[d] < g->out[d])
                    break;
                o[d] = 0;
            }
            if (empty) {
                yp[op] = j->kind == P_MAX ? j->lowest : 0.0;
                if (j->idx)
                    j->idx[pl * g->out_sz + op] = -1;
                continue;
            }
            double best = j->lowest, sum = 0.0;
            int64_t bi = -1, first = -1;
            for (;;) {
                int64_t idx = 0;
                for (int d = 0; d < nsp; d++)
                    idx = idx * g->in[d] + st[d] + kk[d] * g->d[d];
                double v = xp[idx];
                if (first < 0)
                    first = idx;
                if (j->kind == P_MAX) {
                    if (v > best || (bi < 0 && v == v)) {
                        best = v;
                        bi = idx;
                    }
                } else if (j->kind == P_AVG) {
                    sum += v;
                } else {
                    double a = fabs(v);
                    sum += j->p == 2.0 ? a * a : j->p == 1.0 ? a : pow(a, j->p);
                }
                int d = nsp - 1;
                for (; d >= 0; d--) {
                    if (++kk[d] < kb[d])
                        break;
                    kk[d] = ka[d];
                }
                if (d < 0)
                    break;
            }
            if (j->kind == P_MAX) {
                if (bi < 0) { /* all NaN */
                    bi = first;
                    best = xp[first];
                }
                yp[op] = best;
                if (j->idx)
                    j->idx[pl * g->out_sz + op] = pl * g->in_sz + plane_index(g, bi, j->col_major);
            } else if (j->kind == P_AVG) {
                yp[op] = cnt > 0 ? sum / cnt : 0.0;
            } else {
                yp[op] = j->p == 2.0 ? sqrt(sum) : j->p == 1.0 ? sum : pow(sum, 1.0 / j->p);
            }
        }
    }
}


/* One float32 MaxPool / AveragePool output (scalar reference loop). */
static inline void pool_one(const pool_job *j, const float *xp, int64_t H, int64_t W, int64_t hs, int64_t kia,
                            int64_t kib, int64_t ca, int64_t cb, int64_t ox, int64_t kw, int64_t sw, int64_t dh,
                            int64_t dw, int64_t pw, int64_t pew, float *yo, int64_t *io, int64_t pl, int64_t in_sz)
{
    int64_t ws = ox * sw - pw, kja, kjb;
    valid_range(ws, dw, W, kw, &kja, &kjb);
    if (j->kind == P_MAX) {
        float best = -INFINITY;
        int64_t bi = -1;
        for (int64_t ki = kia; ki < kib; ki++) {
            const float *xr = xp + (hs + ki * dh) * W + ws;
            for (int64_t kj = kja; kj < kjb; kj++) {
                float v = xr[kj * dw];
                if (v > best || (bi < 0 && v == v)) {
                    best = v;
                    bi = (hs + ki * dh) * W + ws + kj * dw;
                }
            }
        }
        if (bi < 0 && kia < kib && kja < kjb) { /* all NaN */
            best = xp[(hs + kia * dh) * W + ws + kja * dw];
            bi = (hs + kia * dh) * W + ws + kja * dw;
        }
        *yo = best;
        if (io) {
            int64_t r = bi;
            if (bi >= 0 && j->col_major)
                r = (bi % W) * H + bi / W;
            *io = bi >= 0 ? pl * in_sz + r : -1;
        }
    } else {
        float sum = 0.0f;
        for (int64_t ki = kia; ki < kib; ki++) {
            const float *xr = xp + (hs + ki * dh) * W + ws;
            for (int64_t kj = kja; kj < kjb; kj++)
                sum += xr[kj * dw];
        }
        int64_t cnt;
        if (j->count_pad) {
            int64_t c2a, c2b;
            valid_range(ws + pw, dw, W + pw + pew, kw, &c2a, &c2b);
            cnt = (cb - ca) * (c2b - c2a);
        } else {
            cnt = (kib - kia) * (kjb - kja);
        }
        *yo = cnt > 0 ? sum / (float)cnt : 0.0f;
    }
}

/* float32 MaxPool / AveragePool, 1-D or 2-D (1-D as H = 1). */
static void pool_f32_task(void *vctx, int64_t b, int64_t e)
{
    const pool_job *j = vctx;
    const pool_geom *g = j->g;
    bool two = g->nsp == 2;
    int L = g->nsp - 1;
    int64_t H = two ? g->in[0] : 1, W = g->in[L], kh = two ? g->k[0] : 1, kw = g->k[L];
    int64_t sh = two ? g->s[0] : 1, sw = g->s[L], dh = two ? g->d[0] : 1, dw = g->d[L];
    int64_t ph = two ? g->pb[0] : 0, pw = g->pb[L], peh = two ? g->pe[0] : 0, pew = g->pe[L];
    int64_t Ho = two ? g->out[0] : 1, Wo = g->out[L];
    for (int64_t pl = b; pl < e; pl++) {
        const float *xp = j->xf + pl * g->in_sz;
        float *yp = j->yf + pl * g->out_sz;
        int64_t *ip = j->idx ? j->idx + pl * g->out_sz : NULL;
        for (int64_t oy = 0; oy < Ho; oy++) {
            int64_t hs = oy * sh - ph, kia, kib, ca = 0, cb = 0;
            valid_range(hs, dh, H, kh, &kia, &kib);
            if (j->count_pad)
                valid_range(hs + ph, dh, H + ph + peh, kh, &ca, &cb);
            float *yr = yp + oy * Wo;
            int64_t *ir = ip ? ip + oy * Wo : NULL;
            const float *rows[64];
            int nr = 0;
            if (kib - kia <= 64)
                for (int64_t ki = kia; ki < kib; ki++)
                    rows[nr++] = xp + (hs + ki * dh) * W;
            /* outputs [oxa, oxb) done by a vectorized function, the rest by the scalar loop */
            int64_t oxa = Wo, oxb = Wo;
            bool redo = false;   /* some vectorized output is -inf: NaN windows, redone below */
            if (j->maxrow && j->kind == P_MAX && !ip && nr > 0 && dw == 1 && (sw == 1 || sw == 2) &&
                pw + W <= KILN_POOL_MAXROW_W && (Wo - 1) * sw + kw <= KILN_POOL_MAXROW_W) {
                oxa = 0;
                redo = j->maxrow(rows, nr, W, kw, sw, pw, Wo, yr);
            } else if (j->row && !ip && (sw == 1 || sw == 2) && nr > 0) {
                /* interior columns: every window column inside the row */
                oxa = pw > 0 ? (pw + sw - 1) / sw : 0;
                int64_t last = W - 1 - (kw - 1) * dw + pw; /* ox * sw <= last */
                oxb = last < 0 ? 0 : last / sw + 1;
                if (oxb > Wo)
                    oxb = Wo;
                if (oxa > oxb)
                    oxa = oxb;
                if (oxa < oxb) {
                    for (int r = 0; r < nr; r++)
                        rows[r] -= pw;
                    int64_t cnt = j->count_pad ? (cb - ca) * kw : (kib - kia) * kw;
                    redo = j->row(j->kind == P_MAX, rows, nr, kw, dw, sw, oxa, oxb, (float)cnt, yr);
                }
            }
            for (int64_t ox = 0; ox < oxa; ox++)
                pool_one(j, xp, H, W, hs, kia, kib, ca, cb, ox, kw, sw, dh, dw, pw, pew, yr + ox, ir ? ir + ox : NULL, pl,
                         g->in_sz);
            for (int64_t ox = oxa; redo && ox < oxb; ox++)
                if (yr[ox] == -INFINITY) /* all-NaN windows (or a true -inf): the scalar loop */
                    pool_one(j, xp, H, W, hs, kia, kib, ca, cb, ox, kw, sw, dh, dw, pw, pew, yr + ox, NULL, pl, g->in_sz);
            for (int64_t ox = oxb; ox < Wo; ox++)
                pool_one(j, xp, H, W, hs, kia, kib, ca, cb, ox, kw, sw, dh, dw, pw, pew, yr + ox, ir ? ir + ox : NULL, pl,
                         g->in_sz);
        }
    }
}

static double dtype_lowest(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_INT8: return -128.0;
    case KILN_DT_INT16: return -32768.0;
    case KILN_DT_INT32: return -2147483648.0;
    case KILN_DT_INT64: return -9223372036854775808.0;
    case KILN_DT_UINT8: case KILN_DT_UINT16: case KILN_DT_UINT32: case KILN_DT_UINT64: return 0.0;
    default: return -INFINITY;
    }
}

static bool is_float_dt(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16;
}

/* Allocates the output(s) and runs the pool. */
static kiln_status run_pool(kiln_kctx *ctx, const kiln_tensor *x, const pool_geom *g, pool_job *j, bool want_idx)
{
    int64_t dims[KILN_MAX_DIMS] = {g->N, g->C};
    for (int i = 0; i < g->nsp; i++)
        dims[2 + i] = g->out[i];
    /* the float32 1-D / 2-D path writes every output (and index) element */
    bool f32_fast = x->dtype == KILN_DT_FLOAT32 && g->nsp <= 2 && j->kind != P_LP;
    KILN_TRY((f32_fast ? kiln__kout_uninit : kiln__kout)(ctx, 0, x->dtype, x->ndim, dims));
    if (want_idx) {
        KILN_TRY((f32_fast ? kiln__kout_uninit : kiln__kout)(ctx, 1, KILN_DT_INT64, x->ndim, dims));
        j->idx = ctx->out[1]->data;
    }
    j->g = g;
    j->lowest = dtype_lowest(x->dtype);
    int64_t planes = g->N * g->C;
    if (planes == 0 || g->out_sz == 0)
        return KILN_OK;
    int64_t kw = 1;
    for (int i = 0; i < g->nsp; i++)
        kw = mul_chk(kw, g->k[i] < g->in[i] ? g->k[i] : g->in[i]);
    int64_t per = mul_chk(g->out_sz, kw < 1 ? 1 : kw);
    int64_t grain = per >= 0 && per < 32768 ? 32768 / (per + 1) + 1 : 1;
    if (f32_fast) {
        j->xf = x->data;
        j->yf = ctx->out[0]->data;
        kiln__parallel_for(ctx->pool, ctx->nthreads, planes, grain, pool_f32_task, j);
        return KILN_OK;
    }
    int64_t nx = kiln_tensor_numel(x), ny = kiln_tensor_numel(ctx->out[0]);
    double *bx = NULL, *by = NULL;
    kiln_status st = KILN_OK;
    if (x->dtype == KILN_DT_FLOAT64) {
        j->x = x->data;
        j->y = ctx->out[0]->data;
    } else {
        st = kiln__win_scratch(ctx, nx, sizeof(double), (void **)&bx);
        if (st == KILN_OK)
            st = kiln__win_scratch(ctx, ny, sizeof(double), (void **)&by);
        if (st == KILN_OK)
            st = kiln__convert(KILN_DT_FLOAT64, bx, x->dtype, x->data, nx);
        j->x = bx;
        j->y = by;
    }
    if (st == KILN_OK)
        kiln__parallel_for(ctx->pool, ctx->nthreads, planes, grain, pool_generic_task, j);
    if (st == KILN_OK && by)
        st = kiln__convert(x->dtype, ctx->out[0]->data, KILN_DT_FLOAT64, by, ny);
    kiln__free(bx);
    kiln__free(by);
    return st;
}

static kiln_status check_pool_dtype(const kiln_kctx *ctx, const kiln_tensor *x, bool ints_ok)
{
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input X");
    if (is_float_dt(x->dtype) || (ints_ok && kiln__dtype_is_int(x->dtype)))
        return KILN_OK;
    return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
}

kiln_status kiln__maxpool(kiln_kctx *ctx, kiln_pool_row_fn row, kiln_pool_maxrow_fn maxrow)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    KILN_TRY(check_pool_dtype(ctx, x, true));
    pool_geom g;
    KILN_TRY(pool_setup(ctx, x, &g));
    int64_t so = kiln__attr_i(ctx->node, "storage_order", 0);
    if (so != 0 && so != 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "storage_order must be 0 or 1, got %lld", (long long)so);
    pool_job j = {.kind = P_MAX, .col_major = so == 1, .row = row, .maxrow = maxrow};
    return run_pool(ctx, x, &g, &j, ctx->n_out > 1 && ctx->out[1]);
}

kiln_status kiln__avgpool(kiln_kctx *ctx, kiln_pool_row_fn row)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    KILN_TRY(check_pool_dtype(ctx, x, false));
    pool_geom g;
    KILN_TRY(pool_setup(ctx, x, &g));
    pool_job j = {.kind = P_AVG, .count_pad = kiln__attr_i(ctx->node, "count_include_pad", 0) != 0, .row = row};
    return run_pool(ctx, x, &g, &j, false);
}

static kiln_status k_maxpool(kiln_kctx *ctx) { return kiln__maxpool(ctx, NULL, NULL); }
static kiln_status k_avgpool(kiln_kctx *ctx) { return kiln__avgpool(ctx, NULL); }

static kiln_status get_p(const kiln_kctx *ctx, double *p)
{
    const kiln_attr *a = kiln__attr(ctx->node, "p");
    *p = 2.0;
    if (a && a->type == KILN_ATTR_INT)
        *p = (double)a->i;
    else if (a && a->type == KILN_ATTR_FLOAT)
        *p = a->f;
    if (!(*p > 0.0) || *p > 1e6)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "p must be positive, got %g", *p);
    return KILN_OK;
}

static kiln_status k_lppool(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    KILN_TRY(check_pool_dtype(ctx, x, false));
    pool_geom g;
    KILN_TRY(pool_setup(ctx, x, &g));
    pool_job j = {.kind = P_LP};
    KILN_TRY(get_p(ctx, &j.p));
    return run_pool(ctx, x, &g, &j, false);
}

static kiln_status global_pool(kiln_kctx *ctx, int kind)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    KILN_TRY(check_pool_dtype(ctx, x, kind == P_MAX));
    pool_geom g;
    KILN_TRY(global_setup(ctx, x, &g));
    pool_job j = {.kind = kind};
    if (kind == P_LP)
        KILN_TRY(get_p(ctx, &j.p));
    return run_pool(ctx, x, &g, &j, false);
}

static kiln_status k_global_avgpool(kiln_kctx *ctx) { return global_pool(ctx, P_AVG); }
static kiln_status k_global_maxpool(kiln_kctx *ctx) { return global_pool(ctx, P_MAX); }
static kiln_status k_global_lppool(kiln_kctx *ctx) { return global_pool(ctx, P_LP); }

static kiln_status k_maxunpool(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *ind = kiln__kin(ctx, 1), *os = kiln__kin(ctx, 2);
    KILN_TRY(check_x(ctx, x));
    if (!ind)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input I");
    size_t es = kiln_dtype_size(x->dtype);
    if (es == 0 || x->dtype == KILN_DT_STRING)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    if (ind->dtype != KILN_DT_INT64)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "I must be int64, got %s", kiln_dtype_name(ind->dtype));
    if (ind->ndim != x->ndim || memcmp(ind->dims, x->dims, sizeof(int64_t) * (size_t)x->ndim))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "I must have the shape of X");
    int nsp = x->ndim - 2;
    int64_t k[SP_MAX], s[SP_MAX], pads[2 * SP_MAX], dims[KILN_MAX_DIMS];
    bool has_k;
    KILN_TRY(kiln__win_ints(ctx, "kernel_shape", nsp, 1, 1, k, &has_k));
    if (!has_k)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "attribute 'kernel_shape' is required");
    KILN_TRY(kiln__win_ints(ctx, "strides", nsp, 1, 1, s, NULL));
    KILN_TRY(kiln__win_ints(ctx, "pads", 2 * nsp, 0, 0, pads, NULL));
    /* Indices refer to the inferred output shape; an explicit output_shape places that
     * result at the origin of the requested shape (padding at the end, cropping if smaller). */
    int64_t inf[KILN_MAX_DIMS] = {x->dims[0], x->dims[1]};
    for (int i = 0; i < nsp; i++) {
        int64_t o = (x->dims[2 + i] - 1) * s[i] + k[i] - pads[i] - pads[nsp + i];
        if (x->dims[2 + i] == 0)
            o = 0;
        if (o < 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "output size on axis %d is negative", i + 2);
        inf[2 + i] = o;
    }
    memcpy(dims, inf, sizeof inf);
    if (os) {
        if (os->dtype != KILN_DT_INT64 || os->ndim != 1 || os->dims[0] != x->ndim)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "output_shape must be an int64 vector of %d values", x->ndim);
        const int64_t *v = os->data;
        for (int i = 0; i < x->ndim; i++) {
            if (v[i] < 0 || v[i] > LIM)
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "output_shape value %lld is out of range",
                                  (long long)v[i]);
            dims[i] = v[i];
        }
    }
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, dims));
    int64_t nx = kiln_tensor_numel(x), ninf = kiln__shape_numel(x->ndim, inf);
    bool same = !memcmp(inf, dims, sizeof(int64_t) * (size_t)x->ndim);
    const int64_t *iv = ind->data;
    const char *src = x->data;
    char *dst = ctx->out[0]->data;
    for (int64_t i = 0; i < nx; i++) {
        int64_t t = iv[i];
        if (t < 0 || t >= ninf)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "index %lld is out of range [0, %lld)", (long long)t,
                              (long long)ninf);
        if (!same) {
            int64_t r = 0, st = 1, u = t;
            bool ok = true;
            for (int d = x->ndim - 1; d >= 0; d--) {
                int64_t c = u % inf[d];
                u /= inf[d];
                if (c >= dims[d])
                    ok = false;
                r += c * st;
                st *= dims[d];
            }
            if (!ok)
                continue;
            t = r;
        }
        memcpy(dst + (size_t)t * es, src + (size_t)i * es, es);
    }
    return KILN_OK;
}

const kiln_kernel_reg kiln__ref_pool[] = {
    {KILN_OP_MaxPool, k_maxpool},
    {KILN_OP_AveragePool, k_avgpool},
    {KILN_OP_LpPool, k_lppool},
    {KILN_OP_GlobalAveragePool, k_global_avgpool},
    {KILN_OP_GlobalMaxPool, k_global_maxpool},
    {KILN_OP_GlobalLpPool, k_global_lppool},
    {KILN_OP_MaxUnpool, k_maxunpool},
    {KILN_OP_COUNT, NULL},
};
