/* Threshold selection for symmetric INT8 calibration: pure functions over a histogram of |x|. */
#include "quant.h"
#include <math.h>

void kiln__hist_add(uint64_t *h, int nbins, double amax, const float *x, int64_t n)
{
    double inv = amax > 0 ? nbins / amax : 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            continue;
        double b = fabs((double)x[i]) * inv;
        h[b < nbins ? (int)b : nbins - 1]++;
    }
}

static double total_count(const uint64_t *h, int nbins)
{
    double t = 0;
    for (int i = 0; i < nbins; i++)
        t += (double)h[i];
    return t;
}

double kiln__calib_minmax(const uint64_t *h, int nbins, double amax)
{
    (void)h, (void)nbins;
    return amax;
}

double kiln__calib_percentile(const uint64_t *h, int nbins, double amax, double pct)
{
    double total = total_count(h, nbins), target = total * pct / 100.0, cum = 0;
    if (total <= 0)
        return 0;
    for (int i = 0; i < nbins; i++) {
        cum += (double)h[i];
        if (cum >= target)
            return amax * (i + 1) / nbins;
    }
    return amax;
}

/* Entropy calibration, as TensorRT's entropy calibrator describes it: for each candidate number of
 * kept bins `keep` (KILN_CALIB_LEVELS..nbins), P is the histogram clipped at bin keep-1 (the counts
 * above it added to that bin) and Q is h[0..keep) merged into KILN_CALIB_LEVELS groups, each group's
 * count spread evenly over the bins of the group where P is non-empty; the candidate with the smallest
 * KL(P || Q) wins (ties: the smaller threshold). With prefix sums (counts, non-empty bins, h log h)
 * each candidate costs O(levels):
 *   KL = (sum_j P_j log P_j - sum_k GP_k log(Q_k)) / SP + log(SQ / SP)
 * where G_k is group k's count in h, GP_k its count in P (the last group also holds the outliers),
 * n_k its non-empty P bins and Q_k = G_k / n_k the Q count of each, SP = sum P, SQ = sum Q. When the
 * last group is empty in h but outliers were clipped into it, Q would be 0 where P is not; as the
 * reference's smoothing does, that bin gets Q mass CALIB_EPS (relative to SQ) instead. */
#define CALIB_EPS 1e-4

static double xlogx(double x) { return x > 0 ? x * log(x) : 0; }

static double clip_divergence(const uint64_t *h, int nbins, int keep, const double *cum, const int *nz,
                              const double *hlogh)
{
    double sp = cum[nbins], outliers = sp - cum[keep], sq = cum[keep], sq_extra = 0;
    double last = (double)h[keep - 1] + outliers;
    double plogp = hlogh[keep - 1] + xlogx(last), plogq = 0;
    for (int k = 0; k < KILN_CALIB_LEVELS; k++) {
        int b0 = (int)((int64_t)k * keep / KILN_CALIB_LEVELS), b1 = (int)((int64_t)(k + 1) * keep / KILN_CALIB_LEVELS);
        double g = cum[b1] - cum[b0], gp = g;
        int n = nz[b1] - nz[b0];
        if (b1 == keep) {
            gp += outliers;
            n += !h[keep - 1] && outliers > 0;
        }
        if (gp <= 0)
            continue;
        if (g <= 0) {   /* only the outliers' bin is non-empty in this group */
            sq_extra = CALIB_EPS * sq;
            plogq += gp * log(sq_extra);
        } else {
            plogq += gp * log(g / n);
        }
    }
    return (plogp - plogq) / sp + log((sq + sq_extra) / sp);
}

double kiln__calib_entropy(const uint64_t *h, int nbins, double amax)
{
    if (nbins <= KILN_CALIB_LEVELS || total_count(h, nbins) <= 0)
        return amax;
    double *cum = kiln__calloc((size_t)nbins + 1, sizeof *cum), *hlogh = kiln__calloc((size_t)nbins + 1, sizeof *hlogh);
    int *nz = kiln__calloc((size_t)nbins + 1, sizeof *nz);
    int best = nbins;
    if (cum && hlogh && nz) {
        for (int j = 0; j < nbins; j++) {
            cum[j + 1] = cum[j] + (double)h[j];
            hlogh[j + 1] = hlogh[j] + xlogx((double)h[j]);
            nz[j + 1] = nz[j] + (h[j] != 0);
        }
        double best_kl = INFINITY;
        for (int keep = KILN_CALIB_LEVELS; keep <= nbins; keep++) {
            double kl = clip_divergence(h, nbins, keep, cum, nz, hlogh);
            if (kl < best_kl) {
                best_kl = kl;
                best = keep;
            }
        }
    }
    kiln__free(cum);
    kiln__free(hlogh);
    kiln__free(nz);
    return amax * best / nbins;
}

/* Integral over [0, x] of the squared rounding error to the grid s*Z (period s, s^3/12 per period). */
static double round_err_integral(double x, double s)
{
    double periods = floor(x / s), u = x - periods * s, part;
    if (u <= s / 2)
        part = u * u * u / 3;
    else
        part = s * s * s / 24 + ((u - s) * (u - s) * (u - s) + s * s * s / 8) / 3;
    return periods * s * s * s / 12 + part;
}

/* Squared rounding error summed over bins [0, k) of h, values uniform inside each bin, grid step s. */
static double rounding_error(const uint64_t *h, int k, double w, double s)
{
    double err = 0, f_hi = -1;   /* F at the upper edge of the previous bin, reused as this bin's lower edge */
    for (int j = 0; j < k; j++) {
        if (!h[j]) {
            f_hi = -1;
            continue;
        }
        double f_lo = f_hi >= 0 ? f_hi : round_err_integral(j * w, s);
        f_hi = round_err_integral((j + 1) * w, s);
        err += (double)h[j] * (f_hi - f_lo);
    }
    return err / w;
}

/* Mean of (x - t)^2 for x uniform on bin j is m2_j - 2 t m1_j + t^2 with m1 the bin's mean and m2 its
 * mean square; the clipping error of bins [k, nbins) is then a quadratic in t over suffix sums. */
static void bin_moments(int j, double w, double *m1, double *m2)
{
    double a = j * w, b = a + w;
    *m1 = (a + b) / 2;
    *m2 = (a * a + a * b + b * b) / 3;
}

/* The grid step for threshold t: (t - lo) / steps, or int8's t / 127 when t does not reach above -lo. */
static double grid_step(double t, int steps, double lo)
{
    return t > -lo ? (t - lo) / steps : t / (KILN_CALIB_LEVELS - 1);
}

double kiln__calib_sq_error_grid(const uint64_t *h, int nbins, double amax, double t, int steps, double lo)
{
    double w = amax / nbins, err = 0;
    int k = t > 0 ? (int)ceil(t / w - 1e-9) : 0;   /* bins [0, k) lie below t (t is a bin edge) */
    if (k > nbins)
        k = nbins;
    if (k > 0)
        err += rounding_error(h, k, w, grid_step(t, steps, lo));
    for (int j = k; j < nbins; j++) {
        double m1, m2;
        bin_moments(j, w, &m1, &m2);
        err += (double)h[j] * (m2 - 2 * t * m1 + t * t);
    }
    return err;
}

double kiln__calib_sq_error(const uint64_t *h, int nbins, double amax, double t)
{
    return kiln__calib_sq_error_grid(h, nbins, amax, t, KILN_CALIB_LEVELS - 1, 0);
}

double kiln__calib_mse_grid(const uint64_t *h, int nbins, double amax, int steps, double lo)
{
    if (amax <= 0 || total_count(h, nbins) <= 0 || steps < 1 || !(lo <= 0))
        return amax;
    int last = nbins;   /* thresholds above the last non-empty bin only add rounding error */
    while (last > 1 && !h[last - 1])
        last--;
    double *s0 = kiln__calloc((size_t)nbins + 1, sizeof *s0), *s1 = kiln__calloc((size_t)nbins + 1, sizeof *s1),
           *s2 = kiln__calloc((size_t)nbins + 1, sizeof *s2);
    double w = amax / nbins, best_err = INFINITY;
    int best = last;
    for (int j = nbins - 1; s0 && s1 && s2 && j >= 0; j--) {   /* suffix sums of the clipping moments */
        double m1, m2;
        bin_moments(j, w, &m1, &m2);
        s0[j] = s0[j + 1] + (double)h[j];
        s1[j] = s1[j + 1] + (double)h[j] * m1;
        s2[j] = s2[j + 1] + (double)h[j] * m2;
    }
    for (int k = 1; s0 && s1 && s2 && k <= last; k++) {
        double t = k * w;
        double e = rounding_error(h, k, w, grid_step(t, steps, lo)) + s2[k] - 2 * t * s1[k] + t * t * s0[k];
        if (e < best_err) {
            best_err = e;
            best = k;
        }
    }
    kiln__free(s0);
    kiln__free(s1);
    kiln__free(s2);
    return amax * best / nbins;
}

double kiln__calib_mse(const uint64_t *h, int nbins, double amax)
{
    return kiln__calib_mse_grid(h, nbins, amax, KILN_CALIB_LEVELS - 1, 0);
}

double kiln__calib_threshold(kiln_calib_method m, double param, const uint64_t *h, int nbins, double amax)
{
    switch (m) {
    case KILN_CALIB_MINMAX: return kiln__calib_minmax(h, nbins, amax);
    case KILN_CALIB_PERCENTILE: return kiln__calib_percentile(h, nbins, amax, param > 0 ? param : 99.99);
    case KILN_CALIB_MSE: return kiln__calib_mse(h, nbins, amax);
    case KILN_CALIB_ENTROPY: break;
    }
    return kiln__calib_entropy(h, nbins, amax);
}

double kiln__calib_threshold_grid(kiln_calib_method m, double param, const uint64_t *h, int nbins, double amax,
                                  int steps, double lo)
{
    return m == KILN_CALIB_MSE ? kiln__calib_mse_grid(h, nbins, amax, steps, lo)
                               : kiln__calib_threshold(m, param, h, nbins, amax);
}

void kiln__calib_method_str(kiln_calib_method m, double param, char *buf, size_t n)
{
    switch (m) {
    case KILN_CALIB_MINMAX: snprintf(buf, n, "minmax"); return;
    case KILN_CALIB_PERCENTILE: snprintf(buf, n, "percentile:%.10g", param > 0 ? param : 99.99); return;
    case KILN_CALIB_MSE: snprintf(buf, n, "mse"); return;
    case KILN_CALIB_ENTROPY: break;
    }
    snprintf(buf, n, "entropy");
}

float kiln__calib_scale(double t)
{
    return t > 0 ? (float)(t / (KILN_CALIB_LEVELS - 1)) : 1.0f;
}
