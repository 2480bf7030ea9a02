/* Accuracy metrics of a candidate tensor against a reference (kiln_compare), and their summary over
 * several samples (kiln_compare_summary_add). Definitions: docs/VERIFY.md. */
#include "../core/core.h"
#include <math.h>
#include <string.h>

#define REL_FLOOR 1e-3   /* max_rel: |r| below this fraction of max|r| counts as that fraction */
#define TOPK 5

static bool comparable(kiln_dtype dt)
{
    return kiln_dtype_size(dt) != 0 && dt != KILN_DT_STRING && dt != KILN_DT_COMPLEX64 &&
           dt != KILN_DT_COMPLEX128;
}

static kiln_status check_tensor(const char *which, const kiln_tensor *t, int64_t *numel)
{
    if (!comparable(t->dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_compare: the %s has dtype %s, which has no numeric values", which,
                         kiln_dtype_name(t->dtype));
    if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS || (*numel = kiln__shape_numel(t->ndim, t->dims)) < 0)
        return kiln__err(KILN_ERR_SHAPE, "kiln_compare: the %s has an invalid shape", which);
    size_t need = (size_t)*numel * kiln_dtype_size(t->dtype);
    if (*numel > 0 && (!t->data || (t->nbytes && t->nbytes < need)))
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_compare: the %s holds %zu bytes, its shape needs %zu", which,
                         t->data ? t->nbytes : 0, need);
    return KILN_OK;
}

static double snr_db(double signal, double noise)
{
    if (noise <= 0)
        return KILN_SNR_MAX_DB;
    if (signal <= 0)
        return -KILN_SNR_MAX_DB;
    double s = 10.0 * log10(signal / noise);
    return s > KILN_SNR_MAX_DB ? KILN_SNR_MAX_DB : s < -KILN_SNR_MAX_DB ? -KILN_SNR_MAX_DB : s;
}

/* Index of the largest finite element of row x[0..n) (first on ties), -1 if none is finite. */
static int64_t row_argmax(kiln_dtype dt, const void *x, int64_t off, int64_t n)
{
    int64_t best = -1;
    double bv = 0;
    for (int64_t j = 0; j < n; j++) {
        double v = kiln__get_f64(dt, x, off + j);
        if (isfinite(v) && (best < 0 || v > bv)) {
            best = j;
            bv = v;
        }
    }
    return best;
}

/* Whether element k of the row is among its TOPK largest (ties ranked by index). */
static bool in_topk(kiln_dtype dt, const void *x, int64_t off, int64_t n, int64_t k)
{
    double v = kiln__get_f64(dt, x, off + k);
    if (!isfinite(v))
        return false;
    int64_t above = 0;
    for (int64_t j = 0; j < n && above < TOPK; j++) {
        double u = kiln__get_f64(dt, x, off + j);
        above += isfinite(u) && (u > v || (u == v && j < k));
    }
    return above < TOPK;
}

static void agreement(const kiln_tensor *r, const kiln_tensor *c, int64_t numel, kiln_compare_stats *o)
{
    int64_t cls = r->ndim >= 1 ? r->dims[r->ndim - 1] : 0;
    if (cls < 2)
        return;
    for (int64_t row = 0; row < numel / cls; row++) {
        int64_t off = row * cls, ra = row_argmax(r->dtype, r->data, off, cls);
        if (ra < 0)
            continue;   /* no finite reference value: nothing to agree with, not a row compared */
        o->rows++;
        o->top1_agree += row_argmax(c->dtype, c->data, off, cls) == ra;
        o->top5_agree += in_topk(c->dtype, c->data, off, cls, ra);
    }
}

kiln_status kiln_compare(const kiln_tensor *reference, const kiln_tensor *candidate, kiln_compare_stats *out)
{
    if (!reference || !candidate || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_compare: NULL argument");
    memset(out, 0, sizeof *out);
    int64_t n, nc;
    KILN_TRY(check_tensor("reference", reference, &n));
    KILN_TRY(check_tensor("candidate", candidate, &nc));
    if (reference->ndim != candidate->ndim ||
        memcmp(reference->dims, candidate->dims, sizeof(int64_t) * (size_t)reference->ndim) != 0)
        return kiln__err(KILN_ERR_SHAPE, "kiln_compare: the candidate's shape differs from the reference's");
    const kiln_dtype rd = reference->dtype, cd = candidate->dtype;
    const void *rp = reference->data, *cp = candidate->data;
    double rmax = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = fabs(kiln__get_f64(rd, rp, i));
        if (isfinite(r) && r > rmax)
            rmax = r;
    }
    double floor = REL_FLOOR * rmax, dot = 0, rr = 0, cc = 0, ee = 0, sum_abs = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = kiln__get_f64(rd, rp, i), c = kiln__get_f64(cd, cp, i);
        if (!isfinite(r) || !isfinite(c)) {
            out->nonfinite++;
            continue;
        }
        double e = fabs(c - r), den = fabs(r) > floor ? fabs(r) : floor;
        out->count++;
        if (e > out->max_abs)
            out->max_abs = e;
        double rel = e == 0 ? 0 : den > 0 ? e / den : INFINITY;
        if (rel > out->max_rel)
            out->max_rel = rel;
        sum_abs += e;
        dot += c * r;
        rr += r * r;
        cc += c * c;
        ee += e * e;
    }
    if (out->count == 0) {   /* nothing compared (every element NaN/Inf, or none): no metric is defined */
        out->max_abs = out->max_rel = out->mean_abs = out->cosine = out->snr_db = NAN;
    } else {
        out->mean_abs = sum_abs / (double)out->count;
        out->cosine = rr == 0 && cc == 0 ? 1.0 : rr == 0 || cc == 0 ? 0.0 : dot / (sqrt(rr) * sqrt(cc));
        if (out->cosine > 1)
            out->cosine = 1;
        out->snr_db = snr_db(rr, ee);
    }
    agreement(reference, candidate, n, out);
    return KILN_OK;
}

/* The mean of k values m and one more, x (x alone when k is 0) */
static double mean_add(double m, int k, double x)
{
    return k ? (m * k + x) / (k + 1) : x;
}

void kiln_compare_summary_add(kiln_compare_summary *s, const kiln_compare_stats *one)
{
    if (!s || !one)
        return;
    kiln_compare_stats *w = &s->worst;
    if (s->samples == 0) {
        *w = *one;
    } else {
        w->count += one->count;
        w->nonfinite += one->nonfinite;
        /* fmax / fmin take the other operand where one is NaN: the worst of the samples that compared anything */
        w->max_abs = fmax(w->max_abs, one->max_abs);
        w->max_rel = fmax(w->max_rel, one->max_rel);
        w->mean_abs = fmax(w->mean_abs, one->mean_abs);
        w->cosine = fmin(w->cosine, one->cosine);
        w->snr_db = fmin(w->snr_db, one->snr_db);
        /* the worst sample's agreement rate */
        if (one->rows && (!w->rows || (double)one->top1_agree / (double)one->rows < (double)w->top1_agree / (double)w->rows)) {
            w->rows = one->rows;
            w->top1_agree = one->top1_agree;
            w->top5_agree = one->top5_agree;
        }
    }
    int k = s->compared;
    if (one->count > 0) {   /* the means: over the samples that compared anything (NaN while there is none) */
        s->mean_max_abs = mean_add(s->mean_max_abs, k, one->max_abs);
        s->mean_max_rel = mean_add(s->mean_max_rel, k, one->max_rel);
        s->mean_mean_abs = mean_add(s->mean_mean_abs, k, one->mean_abs);
        s->mean_cosine = mean_add(s->mean_cosine, k, one->cosine);
        s->mean_snr_db = mean_add(s->mean_snr_db, k, one->snr_db);
        s->compared++;
    } else if (k == 0) {
        s->mean_max_abs = s->mean_max_rel = s->mean_mean_abs = s->mean_cosine = s->mean_snr_db = NAN;
    }
    s->nonfinite += one->nonfinite;
    s->rows += one->rows;
    s->top1_agree += one->top1_agree;
    s->top5_agree += one->top5_agree;
    s->samples++;
}
