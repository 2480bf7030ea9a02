/* Reference kernels: normalizations (BatchNormalization, InstanceNormalization,
 * LayerNormalization, GroupNormalization, LpNormalization, LRN, MeanVarianceNormalization).
 *
 * float32 has fast paths built from 4-wide vector loops (GCC/Clang vector extensions):
 * BatchNormalization folds scale/bias/mean/var into a per-channel y = x*a + b;
 * Layer/Group/InstanceNormalization compute two-pass statistics over contiguous blocks.
 * Other float dtypes go through double arithmetic with the generic element accessors. */
#include "../../kernel.h"
#include "../fused.h"
#include "v4f.h"
#include <math.h>

static bool is_floatish(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16;
}

static int64_t grain_for(int64_t work_per_task)
{
    int64_t g = 32768 / (work_per_task > 0 ? work_per_task : 1);
    return g < 1 ? 1 : g;
}

static double sum_f32(const float *x, int64_t n)
{
    v4f a0 = vset(0.0f), a1 = a0, a2 = a0, a3 = a0;
    double s = 0.0;
    int64_t i = 0;
    /* flush the float lanes into a double every 4096 elements to bound rounding growth */
    while (i + 16 <= n) {
        int64_t end = i + 4096 < n ? i + 4096 : n;
        for (; i + 16 <= end; i += 16) {
            a0 += vld(x + i);
            a1 += vld(x + i + 4);
            a2 += vld(x + i + 8);
            a3 += vld(x + i + 12);
        }
        s += (double)vhsum((a0 + a1) + (a2 + a3));
        a0 = a1 = a2 = a3 = vset(0.0f);
    }
    for (; i < n; i++)
        s += x[i];
    return s;
}

/* sum of (x - m)^2 */
static double sqdev_f32(const float *x, int64_t n, float m)
{
    v4f a0 = vset(0.0f), a1 = a0, a2 = a0, a3 = a0, vm = vset(m);
    double s = 0.0;
    int64_t i = 0;
    while (i + 16 <= n) {
        int64_t end = i + 4096 < n ? i + 4096 : n;
        for (; i + 16 <= end; i += 16) {
            v4f d0 = vld(x + i) - vm, d1 = vld(x + i + 4) - vm, d2 = vld(x + i + 8) - vm,
                d3 = vld(x + i + 12) - vm;
            a0 += d0 * d0;
            a1 += d1 * d1;
            a2 += d2 * d2;
            a3 += d3 * d3;
        }
        s += (double)vhsum((a0 + a1) + (a2 + a3));
        a0 = a1 = a2 = a3 = vset(0.0f);
    }
    for (; i < n; i++) {
        float d = x[i] - m;
        s += d * d;
    }
    return s;
}

/* y = (x - m) * a + b */
static void affine_f32(const float *x, float *y, int64_t n, float m, float a, float b)
{
    v4f vm = vset(m), va = vset(a), vb = vset(b);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        vst(y + i, (vld(x + i) - vm) * va + vb);
        vst(y + i + 4, (vld(x + i + 4) - vm) * va + vb);
    }
    for (; i < n; i++)
        y[i] = (x[i] - m) * a + b;
}

/* generic (any float dtype) mean / population variance of data[off .. off+n) */
static void stats_gen(kiln_dtype dt, const void *d, int64_t off, int64_t n, double *mean, double *var)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += kiln__get_f64(dt, d, off + i);
    double m = n > 0 ? s / (double)n : 0.0;
    double q = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double t = kiln__get_f64(dt, d, off + i) - m;
        q += t * t;
    }
    *mean = m;
    *var = n > 0 ? q / (double)n : 0.0;
}

static void stats_f32(const float *x, int64_t n, float *mean, float *var)
{
    double m = n > 0 ? sum_f32(x, n) / (double)n : 0.0;
    *mean = (float)m;
    *var = n > 0 ? (float)(sqdev_f32(x, n, (float)m) / (double)n) : 0.0f;
}

/* Reads a small 1-D parameter tensor of any float dtype into doubles. */
static kiln_status read_param(const kiln_kctx *ctx, const kiln_tensor *t, const char *what, int64_t want,
                              double *out)
{
    if (!t)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input %s", what);
    if (!is_floatish(t->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "%s has unsupported dtype %s", what, kiln_dtype_name(t->dtype));
    if (kiln__knumel(t) != want)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s has %lld elements, expected %lld", what,
                          (long long)kiln__knumel(t), (long long)want);
    for (int64_t i = 0; i < want; i++)
        out[i] = kiln__get_f64(t->dtype, t->data, i);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* BatchNormalization                                                                          */

typedef struct bnjob {
    kiln_dtype dt;
    const void *x;
    void *y;
    int64_t P, inner;   /* planes are (n, p) for p < P, each `inner` long */
    const double *m, *a, *b;
    const float *mf, *af, *bf;
} bnjob;

static void bn_planes(void *pv, int64_t b, int64_t e)
{
    const bnjob *j = pv;
    for (int64_t t = b; t < e; t++) {
        int64_t p = t % j->P, off = t * j->inner;
        if (j->dt == KILN_DT_FLOAT32) {
            affine_f32((const float *)j->x + off, (float *)j->y + off, j->inner, j->mf[p], j->af[p], j->bf[p]);
        } else {
            for (int64_t i = 0; i < j->inner; i++)
                kiln__set_f64(j->dt, j->y, off + i, (kiln__get_f64(j->dt, j->x, off + i) - j->m[p]) * j->a[p] + j->b[p]);
        }
    }
}

typedef struct bnstat {
    kiln_dtype dt;
    const void *x;
    int64_t N, C, S;
    double *mean, *var;
} bnstat;

static void bn_stats(void *pv, int64_t b, int64_t e)
{
    const bnstat *j = pv;
    for (int64_t c = b; c < e; c++) {
        double s = 0.0, cnt = (double)(j->N * j->S);
        for (int64_t n = 0; n < j->N; n++) {
            int64_t off = (n * j->C + c) * j->S;
            if (j->dt == KILN_DT_FLOAT32)
                s += sum_f32((const float *)j->x + off, j->S);
            else
                for (int64_t i = 0; i < j->S; i++)
                    s += kiln__get_f64(j->dt, j->x, off + i);
        }
        double m = cnt > 0 ? s / cnt : 0.0, q = 0.0;
        for (int64_t n = 0; n < j->N; n++) {
            int64_t off = (n * j->C + c) * j->S;
            if (j->dt == KILN_DT_FLOAT32)
                q += sqdev_f32((const float *)j->x + off, j->S, (float)m);
            else
                for (int64_t i = 0; i < j->S; i++) {
                    double d = kiln__get_f64(j->dt, j->x, off + i) - m;
                    q += d * d;
                }
        }
        j->mean[c] = m;
        j->var[c] = cnt > 0 ? q / cnt : 0.0;
    }
}

static kiln_status write_vec(kiln_kctx *ctx, int o, kiln_dtype dt, int64_t n, const double *v)
{
    if (ctx->n_out <= o || !ctx->out[o])
        return KILN_OK;
    KILN_TRY(kiln__kout(ctx, o, dt, 1, &n));
    for (int64_t i = 0; i < n; i++)
        kiln__set_f64(dt, ctx->out[o]->data, i, v[i]);
    return KILN_OK;
}

static kiln_status k_batchnorm(kiln_kctx *ctx)
{
    const kiln_node *nd = ctx->node;
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input X");
    if (!is_floatish(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    if (x->ndim < 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "X must have rank >= 2, got %d", x->ndim);
    const int64_t N = x->dims[0], C = x->dims[1];
    int64_t S = 1;
    for (int d = 2; d < x->ndim; d++)
        if (!kiln__mul_nonneg(S, x->dims[d], &S))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
    const double eps = kiln__attr_f(nd, "epsilon", 1e-5f);
    const double momentum = kiln__attr_f(nd, "momentum", 0.9f);
    const bool training = nd->opset >= 14 && kiln__attr_i(nd, "training_mode", 0) != 0;
    const bool spatial = nd->opset >= 9 || kiln__attr_i(nd, "spatial", 1) != 0;
    /* opset < 9 with spatial=0: statistics per (C, D1, ...) position */
    int64_t P = C, inner = S;
    if (!spatial && !training) {
        if (!kiln__mul_nonneg(C, S, &P))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
        inner = 1;
    }
    const kiln_tensor *mean_t = kiln__kin(ctx, 3), *var_t = kiln__kin(ctx, 4);
    /* check the parameter sizes before allocating anything of size P */
    static const char *const pname[4] = {"scale", "B", "input_mean", "input_var"};
    for (int i = 1; i <= 4; i++) {
        const kiln_tensor *t = kiln__kin(ctx, i);
        if (!t)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input %s", pname[i - 1]);
        if (kiln__knumel(t) != P)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s has %lld elements, expected %lld", pname[i - 1],
                              (long long)kiln__knumel(t), (long long)P);
    }
    double *buf = kiln__calloc((size_t)(P > 0 ? P : 1) * 8, sizeof(double));
    float *fbuf = kiln__calloc((size_t)(P > 0 ? P : 1) * 3, sizeof(float));
    if (!buf || !fbuf) {
        kiln__free(buf);
        kiln__free(fbuf);
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    double *sc = buf, *bi = buf + P, *mu = buf + 2 * P, *va = buf + 3 * P, *a = buf + 4 * P, *b = buf + 5 * P,
           *bm = buf + 6 * P, *bv = buf + 7 * P;
    kiln_status st = read_param(ctx, kiln__kin(ctx, 1), "scale", P, sc);
    if (st == KILN_OK)
        st = read_param(ctx, kiln__kin(ctx, 2), "B", P, bi);
    if (st == KILN_OK)
        st = read_param(ctx, mean_t, "input_mean", P, mu);
    if (st == KILN_OK)
        st = read_param(ctx, var_t, "input_var", P, va);
    if (st == KILN_OK)
        st = kiln__kout(ctx, 0, x->dtype, x->ndim, x->dims);
    if (st != KILN_OK)
        goto done;
    if (training) {
        bnstat sj = {x->dtype, x->data, N, C, S, bm, bv};
        int64_t per = N * S * 2;
        kiln__parallel_for(ctx->pool, ctx->nthreads, C, grain_for(per), bn_stats, &sj);
    }
    for (int64_t p = 0; p < P; p++) {
        double m = training ? bm[p] : mu[p], v = training ? bv[p] : va[p];
        a[p] = sc[p] / sqrt(v + eps);
        b[p] = m; /* the shift; y = (x - m) * a + B */
        fbuf[p] = (float)m;
        fbuf[P + p] = (float)a[p];
        fbuf[2 * P + p] = (float)bi[p];
    }
    int64_t planes;
    if (!kiln__mul_nonneg(N, P, &planes)) {
        st = kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
        goto done;
    }
    bnjob j = {x->dtype, x->data, ctx->out[0]->data, P, inner, b, a, bi, fbuf, fbuf + P, fbuf + 2 * P};
    kiln__parallel_for(ctx->pool, ctx->nthreads, planes, grain_for(inner), bn_planes, &j);
    if (training) {
        /* running_mean = input_mean * momentum + batch_mean * (1 - momentum); same for var */
        for (int64_t p = 0; p < P; p++) {
            bm[p] = mu[p] * momentum + bm[p] * (1.0 - momentum);
            bv[p] = va[p] * momentum + bv[p] * (1.0 - momentum);
        }
        st = write_vec(ctx, 1, mean_t->dtype, P, bm);
        if (st == KILN_OK)
            st = write_vec(ctx, 2, var_t->dtype, P, bv);
    } else if (ctx->n_out > 1) {
        /* inference: running statistics pass through unchanged */
        for (int o = 1; o < ctx->n_out && o < 5 && st == KILN_OK; o++)
            st = write_vec(ctx, o, (o % 2) ? mean_t->dtype : var_t->dtype, P, (o % 2) ? mu : va);
    }
done:
    kiln__free(buf);
    kiln__free(fbuf);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Group / Instance normalization: per (n, group) statistics over a contiguous block of
 * (C/G) channels x S, then a per-channel affine transform.                                    */

typedef struct gnjob {
    kiln_dtype dt;
    const void *x;
    void *y;
    int64_t C, G, cpg, S;
    double eps;
    const double *sc, *bi;  /* per channel */
} gnjob;

static void gn_blocks(void *pv, int64_t b, int64_t e)
{
    const gnjob *j = pv;
    const int64_t blk = j->cpg * j->S;
    for (int64_t t = b; t < e; t++) {
        int64_t g = t % j->G, off = t * blk;
        double mean, var;
        if (j->dt == KILN_DT_FLOAT32) {
            float fm, fv;
            stats_f32((const float *)j->x + off, blk, &fm, &fv);
            mean = fm;
            var = fv;
        } else {
            stats_gen(j->dt, j->x, off, blk, &mean, &var);
        }
        double inv = 1.0 / sqrt(var + j->eps);
        for (int64_t k = 0; k < j->cpg; k++) {
            int64_t c = g * j->cpg + k, o2 = off + k * j->S;
            double a = j->sc[c] * inv, bb = j->bi[c];
            if (j->dt == KILN_DT_FLOAT32) {
                affine_f32((const float *)j->x + o2, (float *)j->y + o2, j->S, (float)mean, (float)a, (float)bb);
            } else {
                for (int64_t i = 0; i < j->S; i++)
                    kiln__set_f64(j->dt, j->y, o2 + i, (kiln__get_f64(j->dt, j->x, o2 + i) - mean) * a + bb);
            }
        }
    }
}

/* groups == 0: instance normalization (one group per channel, per-channel scale) */
static kiln_status group_norm(kiln_kctx *ctx, bool instance)
{
    const kiln_node *nd = ctx->node;
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!is_floatish(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    if (x->ndim < 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have rank >= 2, got %d", x->ndim);
    const int64_t N = x->dims[0], C = x->dims[1];
    int64_t S = 1;
    for (int d = 2; d < x->ndim; d++)
        if (!kiln__mul_nonneg(S, x->dims[d], &S))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
    const double eps = kiln__attr_f(nd, "epsilon", 1e-5f);
    int64_t G = C;
    if (!instance) {
        G = kiln__attr_i(nd, "num_groups", -1);
        if (G <= 0 || C % G != 0)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "num_groups %lld does not divide %lld channels",
                              (long long)G, (long long)C);
    }
    const kiln_tensor *st_ = kiln__kin(ctx, 1), *bt = kiln__kin(ctx, 2);
    if (!st_ || !bt)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing scale or bias");
    /* scale/bias: per channel [C] (InstanceNormalization, GroupNormalization-21) or per group
     * [num_groups] (GroupNormalization-18) */
    int64_t ns = kiln__knumel(st_);
    if (kiln__knumel(x) <= 0)
        return kiln__kout(ctx, 0, x->dtype, x->ndim, x->dims);
    bool per_group = !instance && ns == G && (ns != C || nd->opset < 21);
    int64_t want = per_group ? G : C;
    double *buf = kiln__calloc((size_t)(C > 0 ? C : 1) * 2 + (size_t)(want > 0 ? want : 1) * 2, sizeof(double));
    if (!buf)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    double *sc = buf, *bi = buf + C, *ps = buf + 2 * C, *pb = ps + want;
    kiln_status s = read_param(ctx, st_, "scale", want, ps);
    if (s == KILN_OK)
        s = read_param(ctx, bt, "bias", want, pb);
    if (s == KILN_OK)
        s = kiln__kout(ctx, 0, x->dtype, x->ndim, x->dims);
    if (s == KILN_OK && N > 0 && C > 0) {
        int64_t cpg = C / G;
        for (int64_t c = 0; c < C; c++) {
            sc[c] = per_group ? ps[c / cpg] : ps[c];
            bi[c] = per_group ? pb[c / cpg] : pb[c];
        }
        gnjob j = {x->dtype, x->data, ctx->out[0]->data, C, G, cpg, S, eps, sc, bi};
        kiln__parallel_for(ctx->pool, ctx->nthreads, N * G, grain_for(cpg * S * 3), gn_blocks, &j);
    }
    kiln__free(buf);
    return s;
}

static kiln_status k_instancenorm(kiln_kctx *ctx) { return group_norm(ctx, true); }
static kiln_status k_groupnorm(kiln_kctx *ctx) { return group_norm(ctx, false); }

/* ------------------------------------------------------------------------------------------ */
/* LayerNormalization                                                                          */

typedef struct lnjob {
    kiln_dtype dt, sdt;    /* X dtype, stash (Mean/InvStdDev) dtype */
    const void *x;
    void *y, *mean, *istd; /* mean/istd may be NULL */
    int64_t rows, M;
    double eps;
    const float *sf, *bf;  /* float32 path: scale/bias (bias may be NULL) */
    const double *sd, *bd; /* generic path */
    int64_t srow, brow;    /* per-row stride of the expanded scale/bias (0 = shared) */
    kiln_layernorm_row_fn row; /* float32 rows (NULL: the 4-wide loops below) */
} lnjob;

/* one float32 row: y = (x - mean) * inv * s + b (b may be NULL), inv = 1 / sqrt(var + eps) */
static void ln_row_f32(const float *x, float *y, int64_t M, float eps, const float *s, const float *bb, float *mean,
                       float *inv)
{
    float fm, fv;
    stats_f32(x, M, &fm, &fv);
    float fi = 1.0f / sqrtf(fv + eps);
    *mean = fm;
    *inv = fi;
    v4f vm = vset(fm), vi = vset(fi);
    int64_t i = 0;
    if (bb) {
        for (; i + 4 <= M; i += 4)
            vst(y + i, (vld(x + i) - vm) * vi * vld(s + i) + vld(bb + i));
        for (; i < M; i++)
            y[i] = (x[i] - fm) * fi * s[i] + bb[i];
    } else {
        for (; i + 4 <= M; i += 4)
            vst(y + i, (vld(x + i) - vm) * vi * vld(s + i));
        for (; i < M; i++)
            y[i] = (x[i] - fm) * fi * s[i];
    }
}

static void ln_rows(void *pv, int64_t b, int64_t e)
{
    const lnjob *j = pv;
    const int64_t M = j->M;
    for (int64_t r = b; r < e; r++) {
        int64_t off = r * M;
        double mean, inv;
        if (j->dt == KILN_DT_FLOAT32) {
            const float *x = (const float *)j->x + off;
            float *y = (float *)j->y + off;
            const float *s = j->sf + r * j->srow, *bb = j->bf ? j->bf + r * j->brow : NULL;
            float fm, fi;
            j->row(x, y, M, (float)j->eps, s, bb, &fm, &fi);
            mean = fm;
            inv = fi;
        } else {
            double var;
            stats_gen(j->dt, j->x, off, M, &mean, &var);
            inv = 1.0 / sqrt(var + j->eps);
            const double *s = j->sd + r * j->srow, *bb = j->bd ? j->bd + r * j->brow : NULL;
            for (int64_t i = 0; i < M; i++) {
                double v = (kiln__get_f64(j->dt, j->x, off + i) - mean) * inv * s[i] + (bb ? bb[i] : 0.0);
                kiln__set_f64(j->dt, j->y, off + i, v);
            }
        }
        if (j->mean)
            kiln__set_f64(j->sdt, j->mean, r, mean);
        if (j->istd)
            kiln__set_f64(j->sdt, j->istd, r, inv);
    }
}

/* Expands a Scale/B tensor, broadcast against X (numpy rules), into `count` values following
 * X's dims from `start` on. Writes floats (f != NULL) or doubles. */
static void expand_param(const kiln_tensor *t, const kiln_tensor *x, int start, int64_t count, float *f, double *d)
{
    int64_t str[KILN_MAX_DIMS], idx[KILN_MAX_DIMS] = {0};
    kiln__broadcast_strides(t, x->ndim, x->dims, str);
    int64_t off = 0;
    for (int64_t i = 0; i < count; i++) {
        double v = kiln__get_f64(t->dtype, t->data, off);
        if (f)
            f[i] = (float)v;
        else
            d[i] = v;
        for (int k = x->ndim - 1; k >= start; k--) {
            off += str[k];
            if (++idx[k] < x->dims[k])
                break;
            off -= str[k] * x->dims[k];
            idx[k] = 0;
        }
    }
}

kiln_status kiln__layernorm(kiln_kctx *ctx, kiln_layernorm_row_fn row)
{
    const kiln_node *nd = ctx->node;
    const kiln_tensor *x = kiln__kin(ctx, 0), *sc = kiln__kin(ctx, 1), *bi = kiln__kin(ctx, 2);
    if (!x || !sc)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing X or Scale");
    if (!is_floatish(x->dtype) || !is_floatish(sc->dtype) || (bi && !is_floatish(bi->dtype)))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype");
    const int rank = x->ndim;
    int axis;
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(nd, "axis", -1), rank, &axis));
    const double eps = kiln__attr_f(nd, "epsilon", 1e-5f);
    int64_t stash = kiln__attr_i(nd, "stash_type", 1);
    if (stash != KILN_DT_FLOAT32 && stash != KILN_DT_FLOAT64 && stash != KILN_DT_FLOAT16 &&
        stash != KILN_DT_BFLOAT16)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unsupported stash_type %lld", (long long)stash);
    int64_t rows = 1, M = 1;
    for (int d = 0; d < rank; d++)
        if (!kiln__mul_nonneg(d < axis ? rows : M, x->dims[d], d < axis ? &rows : &M))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
    /* Scale and B must broadcast to X's shape; they may vary over the leading dims */
    bool row_var = false;
    const kiln_tensor *ps[2] = {sc, bi};
    for (int k = 0; k < 2; k++) {
        const kiln_tensor *t = ps[k];
        if (!t)
            continue;
        if (t->ndim > rank)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s has rank %d > %d", k ? "B" : "Scale", t->ndim, rank);
        for (int d = 0; d < t->ndim; d++) {
            int xd = rank - t->ndim + d;
            if (t->dims[d] != x->dims[xd] && t->dims[d] != 1)
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s does not broadcast to X", k ? "B" : "Scale");
            if (xd < axis && t->dims[d] != 1)
                row_var = true;
        }
    }
    int64_t odims[KILN_MAX_DIMS];
    for (int d = 0; d < rank; d++)
        odims[d] = d < axis ? x->dims[d] : 1;
    /* ln_rows writes every element of the outputs (rows x M, and one mean / istd per row): no zero fill, which
     * for BERT-base's [128, 768] cost the calling thread 15-40 us per layer (a serial 384 KB memset) */
    KILN_TRY(kiln__kout_uninit(ctx, 0, x->dtype, rank, x->dims));
    void *mean = NULL, *istd = NULL;
    if (ctx->n_out > 1 && ctx->out[1]) {
        KILN_TRY(kiln__kout_uninit(ctx, 1, (kiln_dtype)stash, rank, odims));
        mean = ctx->out[1]->data;
    }
    if (ctx->n_out > 2 && ctx->out[2]) {
        KILN_TRY(kiln__kout_uninit(ctx, 2, (kiln_dtype)stash, rank, odims));
        istd = ctx->out[2]->data;
    }
    if (rows == 0 || M == 0)
        return KILN_OK;
    const bool f32 = x->dtype == KILN_DT_FLOAT32;
    const int64_t cnt = row_var ? rows * M : M; /* <= numel(X) */
    const int start = row_var ? 0 : axis;
    lnjob j = {x->dtype, (kiln_dtype)stash, x->data, ctx->out[0]->data, mean, istd, rows, M, eps,
               NULL, NULL, NULL, NULL, row_var ? M : 0, row_var ? M : 0, row ? row : ln_row_f32};
    void *sbuf = NULL, *bbuf = NULL;
    size_t es = f32 ? sizeof(float) : sizeof(double);
    /* direct use when Scale/B are float32 with exactly the normalized shape's elements */
    bool s_direct = f32 && !row_var && sc->dtype == KILN_DT_FLOAT32 && kiln__knumel(sc) == M;
    bool b_direct = f32 && bi && !row_var && bi->dtype == KILN_DT_FLOAT32 && kiln__knumel(bi) == M;
    if (!s_direct && !(sbuf = kiln__malloc((size_t)cnt * es)))
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    if (bi && !b_direct && !(bbuf = kiln__malloc((size_t)cnt * es))) {
        kiln__free(sbuf);
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    if (f32) {
        j.sf = s_direct ? sc->data : sbuf;
        if (!s_direct)
            expand_param(sc, x, start, cnt, sbuf, NULL);
        if (bi) {
            j.bf = b_direct ? bi->data : bbuf;
            if (!b_direct)
                expand_param(bi, x, start, cnt, bbuf, NULL);
        }
    } else {
        j.sd = sbuf;
        expand_param(sc, x, start, cnt, NULL, sbuf);
        if (bi) {
            j.bd = bbuf;
            expand_param(bi, x, start, cnt, NULL, bbuf);
        }
    }
    kiln__parallel_for(ctx->pool, ctx->nthreads, rows, grain_for(M * 3), ln_rows, &j);
    kiln__free(sbuf);
    kiln__free(bbuf);
    return KILN_OK;
}

static kiln_status k_layernorm(kiln_kctx *ctx) { return kiln__layernorm(ctx, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* LpNormalization                                                                             */

typedef struct lpjob {
    kiln_dtype dt;
    const void *x;
    void *y;
    int64_t R, inner;
    int p;
} lpjob;

static void lp_lines(void *pv, int64_t b, int64_t e)
{
    const lpjob *j = pv;
    const int64_t R = j->R, inner = j->inner;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / inner, i = t % inner, base = o * R * inner + i;
        if (j->dt == KILN_DT_FLOAT32 && inner == 1) {
            const float *x = (const float *)j->x + base;
            float *y = (float *)j->y + base;
            double nrm;
            if (j->p == 2) {
                nrm = sqrt(sqdev_f32(x, R, 0.0f));
            } else {
                nrm = 0.0;
                for (int64_t r = 0; r < R; r++)
                    nrm += fabsf(x[r]);
            }
            affine_f32(x, y, R, 0.0f, nrm != 0.0 ? (float)(1.0 / nrm) : 0.0f, 0.0f);
            continue;
        }
        double nrm = 0.0;
        for (int64_t r = 0; r < R; r++) {
            double v = kiln__get_f64(j->dt, j->x, base + r * inner);
            nrm += j->p == 2 ? v * v : fabs(v);
        }
        if (j->p == 2)
            nrm = sqrt(nrm);
        for (int64_t r = 0; r < R; r++) {
            double v = kiln__get_f64(j->dt, j->x, base + r * inner);
            kiln__set_f64(j->dt, j->y, base + r * inner, nrm != 0.0 ? v / nrm : 0.0);
        }
    }
}

static kiln_status k_lpnorm(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!is_floatish(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    int64_t p = kiln__attr_i(ctx->node, "p", 2);
    if (p != 1 && p != 2)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "p must be 1 or 2, got %lld", (long long)p);
    int axis;
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", -1), x->ndim, &axis));
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, x->dims));
    int64_t numel = kiln__knumel(x);
    if (numel <= 0)
        return KILN_OK;
    int64_t outer = 1, R = 1, inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis)
            outer *= x->dims[d];
        else if (d == axis)
            R = x->dims[d];
        else
            inner *= x->dims[d];
    }
    lpjob j = {x->dtype, x->data, ctx->out[0]->data, R, inner, (int)p};
    kiln__parallel_for(ctx->pool, ctx->nthreads, outer * inner, grain_for(R * 2), lp_lines, &j);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* LRN: y = x / (bias + alpha/size * sum over a window of channels of x^2)^beta                */

typedef struct lrnjob {
    kiln_dtype dt;
    const void *x;
    void *y;
    int64_t C, S, lo, hi; /* window [c - lo, c + hi] */
    float alpha_n, beta, bias;
} lrnjob;

static void lrn_planes(void *pv, int64_t b, int64_t e)
{
    const lrnjob *j = pv;
    const int64_t S = j->S, C = j->C;
    enum { CH = 512 };
    float sq[CH];
    for (int64_t t = b; t < e; t++) {
        int64_t n = t / C, c = t % C;
        int64_t c0 = c - j->lo < 0 ? 0 : c - j->lo, c1 = c + j->hi > C - 1 ? C - 1 : c + j->hi;
        for (int64_t s0 = 0; s0 < S; s0 += CH) {
            int64_t len = S - s0 < CH ? S - s0 : CH;
            for (int64_t i = 0; i < len; i++)
                sq[i] = 0.0f;
            for (int64_t cc = c0; cc <= c1; cc++) {
                int64_t off = (n * C + cc) * S + s0;
                if (j->dt == KILN_DT_FLOAT32) {
                    const float *x = (const float *)j->x + off;
                    int64_t i = 0;
                    for (; i + 4 <= len; i += 4) {
                        v4f v = vld(x + i);
                        vst(sq + i, vld(sq + i) + v * v);
                    }
                    for (; i < len; i++)
                        sq[i] += x[i] * x[i];
                } else {
                    for (int64_t i = 0; i < len; i++) {
                        float v = (float)kiln__get_f64(j->dt, j->x, off + i);
                        sq[i] += v * v;
                    }
                }
            }
            int64_t off = (n * C + c) * S + s0;
            for (int64_t i = 0; i < len; i++) {
                float base = j->bias + j->alpha_n * sq[i];
                float f = j->beta == 0.75f ? 1.0f / sqrtf(base * sqrtf(base)) : powf(base, -j->beta);
                if (j->dt == KILN_DT_FLOAT32)
                    ((float *)j->y)[off + i] = ((const float *)j->x)[off + i] * f;
                else
                    kiln__set_f64(j->dt, j->y, off + i, kiln__get_f64(j->dt, j->x, off + i) * f);
            }
        }
    }
}

static kiln_status k_lrn(kiln_kctx *ctx)
{
    const kiln_node *nd = ctx->node;
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!is_floatish(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    if (x->ndim < 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have rank >= 2, got %d", x->ndim);
    int64_t size = kiln__attr_i(nd, "size", -1);
    if (size < 1 || size > (1 << 20))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "size must be a positive integer, got %lld", (long long)size);
    const int64_t N = x->dims[0], C = x->dims[1];
    int64_t S = 1;
    for (int d = 2; d < x->ndim; d++)
        if (!kiln__mul_nonneg(S, x->dims[d], &S))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, x->dims));
    if (kiln__knumel(x) <= 0)
        return KILN_OK;
    lrnjob j = {x->dtype, x->data, ctx->out[0]->data, C, S, (size - 1) / 2, size / 2,
                kiln__attr_f(nd, "alpha", 1e-4f) / (float)size, kiln__attr_f(nd, "beta", 0.75f),
                kiln__attr_f(nd, "bias", 1.0f)};
    int64_t win = size < C ? size : C;
    kiln__parallel_for(ctx->pool, ctx->nthreads, N * C, grain_for(S * (win + 2)), lrn_planes, &j);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* MeanVarianceNormalization: y = (x - mean) / (sqrt(var) + 1e-9) over `axes`                 */

typedef struct mvnjob {
    kiln_dtype dt;
    const void *x;
    void *y;
    int nk, nr;
    int64_t kd[KILN_MAX_DIMS], ks[KILN_MAX_DIMS], rd[KILN_MAX_DIMS], rs[KILN_MAX_DIMS];
    int64_t R;
} mvnjob;

/* Calls BODY for every reduced element offset OFF of kept position `base`. */
#define MVN_FOR(j, base, OFF, ...)                                                              \
    do {                                                                                        \
        int64_t idx_[KILN_MAX_DIMS] = {0};                                                      \
        int64_t OFF = (base);                                                                   \
        if ((j)->R > 0)                                                                         \
            for (;;) {                                                                          \
                __VA_ARGS__;                                                                    \
                int d_ = (j)->nr - 1;                                                           \
                for (; d_ >= 0; d_--) {                                                         \
                    OFF += (j)->rs[d_];                                                         \
                    if (++idx_[d_] < (j)->rd[d_])                                               \
                        break;                                                                  \
                    OFF -= (j)->rs[d_] * (j)->rd[d_];                                           \
                    idx_[d_] = 0;                                                               \
                }                                                                               \
                if (d_ < 0)                                                                     \
                    break;                                                                      \
            }                                                                                   \
    } while (0)

static void mvn_rows(void *pv, int64_t b, int64_t e)
{
    const mvnjob *j = pv;
    const bool f32 = j->dt == KILN_DT_FLOAT32;
    const float *xf = j->x;
    float *yf = j->y;
    for (int64_t o = b; o < e; o++) {
        int64_t base = 0, rem = o;
        for (int d = j->nk - 1; d >= 0; d--) {
            base += (rem % j->kd[d]) * j->ks[d];
            rem /= j->kd[d];
        }
        double s = 0.0, q = 0.0;
        MVN_FOR(j, base, off, s += f32 ? (double)xf[off] : kiln__get_f64(j->dt, j->x, off));
        double mean = s / (double)j->R;
        MVN_FOR(j, base, off, {
            double dv = (f32 ? (double)xf[off] : kiln__get_f64(j->dt, j->x, off)) - mean;
            q += dv * dv;
        });
        double inv = 1.0 / (sqrt(q / (double)j->R) + 1e-9);
        MVN_FOR(j, base, off, {
            double v = ((f32 ? (double)xf[off] : kiln__get_f64(j->dt, j->x, off)) - mean) * inv;
            if (f32)
                yf[off] = (float)v;
            else
                kiln__set_f64(j->dt, j->y, off, v);
        });
    }
}

static kiln_status k_mvn(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!is_floatish(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    const int rank = x->ndim;
    static const int64_t def_axes[3] = {0, 2, 3};
    const int64_t *axes = NULL;
    int nax = kiln__attr_ints(ctx->node, "axes", &axes);
    if (nax < 0) {
        axes = def_axes;
        nax = 3;
    }
    if (nax > (rank > 0 ? rank : 1))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "%d axes for a rank-%d input", nax, rank);
    bool red[KILN_MAX_DIMS] = {false};
    for (int i = 0; i < nax; i++) {
        int a;
        KILN_TRY(kiln__norm_axis(ctx, axes[i], rank, &a));
        if (rank == 0)
            continue;
        if (red[a])
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "duplicate axis %lld", (long long)axes[i]);
        red[a] = true;
    }
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, rank, x->dims));
    if (kiln__knumel(x) <= 0)
        return KILN_OK;
    mvnjob j;
    memset(&j, 0, sizeof j);
    j.dt = x->dtype;
    j.x = x->data;
    j.y = ctx->out[0]->data;
    j.R = 1;
    int64_t nout = 1, s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        if (x->dims[d] != 1) {
            if (red[d]) {
                j.rd[j.nr] = x->dims[d];
                j.rs[j.nr++] = s;
                j.R *= x->dims[d];
            } else {
                j.kd[j.nk] = x->dims[d];
                j.ks[j.nk++] = s;
                nout *= x->dims[d];
            }
        }
        s *= x->dims[d];
    }
    /* collected innermost-first: reverse into outer-to-inner order */
    for (int a = 0, b = j.nr - 1; a < b; a++, b--) {
        int64_t t = j.rd[a]; j.rd[a] = j.rd[b]; j.rd[b] = t;
        t = j.rs[a]; j.rs[a] = j.rs[b]; j.rs[b] = t;
    }
    for (int a = 0, b = j.nk - 1; a < b; a++, b--) {
        int64_t t = j.kd[a]; j.kd[a] = j.kd[b]; j.kd[b] = t;
        t = j.ks[a]; j.ks[a] = j.ks[b]; j.ks[b] = t;
    }
    if (j.nr == 0) {
        j.nr = 1;
        j.rd[0] = 1;
        j.rs[0] = 0;
    }
    kiln__parallel_for(ctx->pool, ctx->nthreads, nout, grain_for(j.R * 3), mvn_rows, &j);
    return KILN_OK;
}

const kiln_kernel_reg kiln__ref_norm[] = {
    {KILN_OP_BatchNormalization, k_batchnorm},
    {KILN_OP_InstanceNormalization, k_instancenorm},
    {KILN_OP_LayerNormalization, k_layernorm},
    {KILN_OP_GroupNormalization, k_groupnorm},
    {KILN_OP_LpNormalization, k_lpnorm},
    {KILN_OP_LRN, k_lrn},
    {KILN_OP_MeanVarianceNormalization, k_mvn},
    {KILN_OP_COUNT, NULL},
};
