/* Calibration threshold methods (src/quant/calib.c) on synthetic distributions whose answer is known
 * or bounded: minmax is amax; percentile is within one bin of NumPy's percentile (python3-numpy, run
 * from the test); entropy stays near amax for uniform data and clips heavy tails; MSE matches a brute
 * force search over the raw samples, also on the uint8 grids of bounded activations (255 steps over
 * [0, T] after a Relu, over [lo, T] with a zero point after a HardSwish), whose thresholds differ
 * from int8's. */
#include "quant/quant.h"
#include "test.h"
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define B KILN_CALIB_BINS

typedef struct dist { const char *name; float *x; int64_t n; double amax; uint64_t h[B]; } dist;

static double gauss(unsigned long long *s)
{
    double u1 = (test_rng(s) >> 11) * (1.0 / 9007199254740992.0) + 1e-300, u2 = (test_rng(s) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static void finish(dist *d)
{
    d->amax = 0;
    for (int64_t i = 0; i < d->n; i++)
        d->amax = fmax(d->amax, fabs((double)d->x[i]));
    memset(d->h, 0, sizeof d->h);
    kiln__hist_add(d->h, B, d->amax, d->x, d->n);
}

static void make(dist *d, const char *name, int kind, int64_t n)
{
    unsigned long long s = 0x9e3779b97f4a7c15ull + (unsigned)kind;
    d->name = name;
    d->n = n;
    d->x = malloc((size_t)n * sizeof *d->x);
    for (int64_t i = 0; i < n; i++) {
        if (kind == 0)
            d->x[i] = test_randf(&s);                       /* uniform [-1, 1) */
        else if (kind == 1)
            d->x[i] = (float)gauss(&s);                     /* N(0, 1) */
        else {                                              /* Laplace(0, 1) with rare outliers */
            double u = (test_rng(&s) >> 11) * (1.0 / 9007199254740992.0) - 0.5;
            d->x[i] = (float)(-copysign(1.0, u) * log(1 - 2 * fabs(u) + 1e-300));
            if (i % 10007 == 0)
                d->x[i] = (float)(60 + 40 * test_randf(&s));
        }
    }
    finish(d);
}

/* NumPy's percentiles pct[0..n) of |x| for the samples of d (written to a .npy file). */
static void numpy_percentiles(const dist *d, const double *pct, int n, double *out)
{
    for (int i = 0; i < n; i++)
        out[i] = NAN;
    char path[] = "/tmp/kiln_calib_XXXXXX.npy";
    int fd = mkstemps(path, 4);
    if (fd < 0)
        return;
    close(fd);
    kiln_tensor t = {.dtype = KILN_DT_FLOAT32, .ndim = 1, .dims = {d->n}, .data = d->x, .nbytes = (size_t)d->n * 4};
    if (kiln_npy_write(path, &t) == KILN_OK) {
        char cmd[512], list[128] = "";
        for (int i = 0; i < n; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%.10g", i ? "," : "", pct[i]);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import numpy as np\nfor v in np.percentile(np.abs(np.load(\"%s\")).astype(np.float64), [%s]): print(repr(float(v)))'",
                 path, list);
        FILE *p = popen(cmd, "r");
        if (p) {
            for (int i = 0; i < n; i++)
                if (fscanf(p, "%lf", &out[i]) != 1)
                    out[i] = NAN;
            pclose(p);
        }
    }
    unlink(path);
}

/* Mean squared error of symmetric INT8 quantization with threshold t over the raw samples. */
static double sample_mse(const dist *d, double t)
{
    double s = t / 127, e = 0;
    for (int64_t i = 0; i < d->n; i++) {
        double x = d->x[i], q = fmax(-127, fmin(127, nearbyint(x / s))) * s;
        e += (x - q) * (x - q);
    }
    return e / d->n;
}

static void test_methods(dist *d, int kind)
{
    double w = d->amax / B;
    CHECK(kiln__calib_minmax(d->h, B, d->amax) == d->amax);
    CHECK(kiln__calib_threshold(KILN_CALIB_MINMAX, 0, d->h, B, d->amax) == d->amax);
    const double pcts[] = {99.99, 99.9, 50};
    double np[3];
    numpy_percentiles(d, pcts, 3, np);
    for (int k = 0; k < 3; k++) {
        double t = kiln__calib_percentile(d->h, B, d->amax, pcts[k]);
        CHECK_MSG(fabs(t - np[k]) <= w * 1.0001, "%s percentile %g: kiln %g numpy %g (bin %g)", d->name, pcts[k], t, np[k], w);
    }
    CHECK(kiln__calib_threshold(KILN_CALIB_PERCENTILE, 0, d->h, B, d->amax) ==
          kiln__calib_percentile(d->h, B, d->amax, 99.99));

    double te = kiln__calib_entropy(d->h, B, d->amax);
    CHECK(te > 0 && te <= d->amax);
    if (kind == 0)
        CHECK_MSG(te >= 0.9 * d->amax, "uniform: entropy threshold %g vs amax %g", te, d->amax);
    if (kind == 2)
        CHECK_MSG(te < 0.25 * d->amax, "heavy tail: entropy threshold %g vs amax %g", te, d->amax);

    /* MSE: brute force over every bin edge on the raw samples */
    double tm = kiln__calib_mse(d->h, B, d->amax), best = INFINITY, best_t = 0;
    for (int k = 1; k <= B; k++) {
        double e = sample_mse(d, d->amax * k / B);
        if (e < best) {
            best = e;
            best_t = d->amax * k / B;
        }
    }
    double got = sample_mse(d, tm);
    CHECK_MSG(got <= best * 1.02, "%s: mse threshold %g has error %g, brute force %g at %g", d->name, tm, got, best, best_t);
    CHECK_MSG(fabs(tm - best_t) <= 0.05 * d->amax, "%s: mse threshold %g, brute force %g", d->name, tm, best_t);
    /* the histogram's error model agrees with the samples */
    double model = kiln__calib_sq_error(d->h, B, d->amax, tm) / d->n;
    CHECK_MSG(fabs(model - got) <= 0.05 * got, "%s: modelled error %g, measured %g", d->name, model, got);
    if (kind == 0)
        CHECK_MSG(tm >= 0.95 * d->amax, "uniform: mse threshold %g", tm);
    printf("%-10s amax %-9.4g entropy %-9.4g mse %-9.4g (brute force %.4g) p99.99 %.4g\n", d->name, d->amax, te, tm,
           best_t, kiln__calib_percentile(d->h, B, d->amax, 99.99));
}

/* Mean squared error of the builder's uint8 quantization over [lo, T] (lo <= 0; scale (T - lo) / 255,
 * zero point rint(-lo / scale): kiln__int8_act_params) over the raw samples. */
static double sample_mse_u8(const dist *d, double t, double lo)
{
    double s = (t - lo) / 255, zp = nearbyint(-lo / s), e = 0;
    for (int64_t i = 0; i < d->n; i++) {
        double x = d->x[i], q = (fmax(0, fmin(255, nearbyint(x / s) + zp)) - zp) * s;
        e += (x - q) * (x - q);
    }
    return e / d->n;
}

/* uint8 grids: relu(Laplace with outliers) on [0, T], hardswish(3 N(0, 1)) on [-0.375, T] */
static void test_grids(void)
{
    static dist d;
    for (int kind = 0; kind < 2; kind++) {
        make(&d, kind ? "hardswish" : "relu", kind ? 1 : 2, 40000);
        double lo = kind ? -0.375 : 0;
        for (int64_t i = 0; i < d.n; i++) {
            double x = kind ? 3 * d.x[i] : d.x[i];
            d.x[i] = (float)(kind ? x * fmin(fmax(x + 3, 0), 6) / 6 : fmax(x, 0));
        }
        finish(&d);
        double tg = kiln__calib_mse_grid(d.h, B, d.amax, 255, lo), t8 = kiln__calib_mse(d.h, B, d.amax);
        CHECK(kiln__calib_threshold_grid(KILN_CALIB_MSE, 0, d.h, B, d.amax, 255, lo) == tg);
        CHECK(kiln__calib_threshold_grid(KILN_CALIB_MSE, 0, d.h, B, d.amax, 127, 0) == t8);
        CHECK(kiln__calib_threshold_grid(KILN_CALIB_PERCENTILE, 99.9, d.h, B, d.amax, 255, lo) ==
              kiln__calib_percentile(d.h, B, d.amax, 99.9));
        double best = INFINITY, best_t = 0;
        for (int k = 1; k <= B; k++) {
            double t = d.amax * k / B;
            if (t <= -lo)
                continue;
            double e = sample_mse_u8(&d, t, lo);
            if (e < best)
                best = e, best_t = t;
        }
        double got = sample_mse_u8(&d, tg, lo), model = kiln__calib_sq_error_grid(d.h, B, d.amax, tg, 255, lo) / d.n;
        CHECK_MSG(got <= best * 1.03, "%s: uint8 mse threshold %g has error %g, brute force %g at %g", d.name, tg, got,
                  best, best_t);
        /* (Relu's zeros, half the samples, are modelled as uniform over the first bin: a little more error) */
        CHECK_MSG(fabs(model - got) <= (kind ? 0.05 : 0.1) * got, "%s: modelled uint8 error %g, measured %g", d.name,
                  model, got);
        /* the 127-step search picks another threshold, worse on the uint8 grid */
        CHECK_MSG(fabs(t8 - tg) > 2 * d.amax / B && sample_mse_u8(&d, t8, lo) > got, "%s: int8 %g vs uint8 %g", d.name,
                  t8, tg);
        printf("%-10s amax %-9.4g mse int8 grid %-9.4g uint8 grid %-9.4g (brute force %.4g)\n", d.name, d.amax, t8, tg,
               best_t);
        free(d.x);
    }
}

static void test_edges(void)
{
    static uint64_t h[B];
    memset(h, 0, sizeof h);
    /* no data / all zero */
    CHECK(kiln__calib_entropy(h, B, 0) == 0 && kiln__calib_mse(h, B, 0) == 0 && kiln__calib_percentile(h, B, 0, 99) == 0);
    CHECK(kiln__calib_scale(0) == 1.0f);
    CHECK(kiln__calib_scale(127) == 1.0f);
    h[0] = 1000;
    CHECK(kiln__calib_entropy(h, B, 0) == 0 && kiln__calib_mse(h, B, 0) == 0);
    /* non-finite values are left out; values above amax land in the last bin */
    memset(h, 0, sizeof h);
    float x[] = {NAN, INFINITY, -INFINITY, 2.0f, -1.0f, 0.0f, 5.0f};
    kiln__hist_add(h, B, 2.0, x, 7);
    uint64_t total = 0;
    for (int i = 0; i < B; i++)
        total += h[i];
    CHECK(total == 4 && h[B - 1] == 2 && h[0] == 1 && h[B / 2] == 1);
    /* a dense bulk and one far outlier (the last group of bins otherwise empty): entropy clips it */
    memset(h, 0, sizeof h);
    for (int i = 0; i < 60; i++)
        h[i] = 1000 + 37 * (uint64_t)((i * 7) % 13);
    h[B - 1] = 1;
    double t = kiln__calib_entropy(h, B, 1.0);
    CHECK_MSG(t > 0.02 && t < 0.1, "bulk + outlier: %g", t);
    /* a single spike: all of its mass is represented at any threshold that keeps it */
    memset(h, 0, sizeof h);
    h[5] = 100;
    t = kiln__calib_entropy(h, B, 1.0);
    CHECK_MSG(t >= 6.0 / B && t <= 1.0, "spike: %g", t);
    char m[64];
    kiln__calib_method_str(KILN_CALIB_PERCENTILE, 99.9, m, sizeof m);
    CHECK(!strcmp(m, "percentile:99.9"));
    kiln__calib_method_str(KILN_CALIB_PERCENTILE, 0, m, sizeof m);
    CHECK(!strcmp(m, "percentile:99.99"));
    kiln_calib_method me;
    double p;
    CHECK(kiln_calib_method_parse("percentile:99.5", &me, &p) == KILN_OK && me == KILN_CALIB_PERCENTILE && p == 99.5);
    CHECK(kiln_calib_method_parse("percentile", &me, &p) == KILN_OK && p == 99.99);
    CHECK(kiln_calib_method_parse("mse", &me, &p) == KILN_OK && me == KILN_CALIB_MSE);
    CHECK(kiln_calib_method_parse("percentile:0", &me, &p) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_calib_method_parse("percentile:101", &me, &p) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_calib_method_parse("percentile:9x", &me, &p) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_calib_method_parse("kl", &me, &p) == KILN_ERR_INVALID_ARG);
}

int main(void)
{
    static dist d[3];
    const char *names[] = {"uniform", "gaussian", "laplace+out"};
    for (int k = 0; k < 3; k++) {
        make(&d[k], names[k], k, 40000);
        test_methods(&d[k], k);
        free(d[k].x);
    }
    test_edges();
    test_grids();
    return TEST_SUMMARY();
}
