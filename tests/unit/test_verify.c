/* Accuracy metrics (kiln_compare, summaries), the budget parser and checks (src/verify/), and the
 * debugging run that reports every intermediate value (kiln_model_run_values). The metrics are
 * checked on hand-computed cases and against naive double loops on random odd-sized tensors,
 * float16 candidates included. */
#include "kiln/kiln.h"
#include "core/numfmt.h"
#include "test.h"
#include <string.h>

static kiln_tensor vec(float *x, int64_t n)
{
    return (kiln_tensor){.dtype = KILN_DT_FLOAT32, .ndim = 1, .dims = {n}, .data = x, .nbytes = sizeof(float) * (size_t)n};
}

static void test_hand(void)
{
    float r[4] = {1, 2, 3, 4}, c[4] = {1, 2, 3, 5};
    kiln_tensor tr = vec(r, 4), tc = vec(c, 4);
    kiln_compare_stats s;
    CHECK(kiln_compare(&tr, &tc, &s) == KILN_OK);
    CHECK(s.count == 4 && s.nonfinite == 0);
    CHECK_CLOSE(s.max_abs, 1, 0);
    CHECK_CLOSE(s.max_rel, 0.25, 1e-15);
    CHECK_CLOSE(s.mean_abs, 0.25, 1e-15);
    CHECK_CLOSE(s.cosine, 34 / (sqrt(30) * sqrt(39)), 1e-15);
    CHECK_CLOSE(s.snr_db, 10 * log10(30.0), 1e-12);
    CHECK(s.rows == 1 && s.top1_agree == 1 && s.top5_agree == 1);   /* 1-D with 4 classes: one row */
    /* identical: SNR at its cap, cosine 1 */
    CHECK(kiln_compare(&tr, &tr, &s) == KILN_OK);
    CHECK(s.snr_db == KILN_SNR_MAX_DB && s.cosine == 1 && s.max_abs == 0);
    /* top-1 / top-5: 2 rows of 6 classes */
    float R[12] = {0, 1, 2, 3, 4, 9, /**/ 9, 1, 2, 3, 4, 5};
    float C[12] = {0, 1, 2, 3, 10, 9, /**/ 0, 1, 2, 3, 4, 5};   /* row 0: argmax moves (in top 5); row 1: ref top-1 is last */
    kiln_tensor a = {.dtype = KILN_DT_FLOAT32, .ndim = 2, .dims = {2, 6}, .data = R, .nbytes = sizeof R};
    kiln_tensor b = a;
    b.data = C;
    CHECK(kiln_compare(&a, &b, &s) == KILN_OK);
    CHECK(s.rows == 2 && s.top1_agree == 0 && s.top5_agree == 1);
    /* a row whose reference holds no finite value is not compared (not counted as a disagreement) */
    float Rn[12] = {NAN, NAN, NAN, NAN, NAN, NAN, /**/ 9, 1, 2, 3, 4, 5};
    a.data = Rn;
    CHECK(kiln_compare(&a, &b, &s) == KILN_OK);
    CHECK(s.rows == 1 && s.top1_agree == 0 && s.top5_agree == 0 && s.nonfinite == 6);
    a.data = R;
    /* NaN / Inf counted, left out of the metrics */
    float n1[3] = {1, 2, 3}, n2[3] = {1, NAN, INFINITY};
    kiln_tensor t1 = vec(n1, 3), t2 = vec(n2, 3);
    CHECK(kiln_compare(&t1, &t2, &s) == KILN_OK);
    CHECK(s.nonfinite == 2 && s.count == 1 && s.max_abs == 0);
    /* near-zero references: max_rel uses the floor 1e-3 * max|r| */
    float z1[2] = {1000, 0}, z2[2] = {1000, 0.5f};
    kiln_tensor u1 = vec(z1, 2), u2 = vec(z2, 2);
    CHECK(kiln_compare(&u1, &u2, &s) == KILN_OK);
    CHECK_CLOSE(s.max_rel, 0.5, 1e-12);
    /* errors: shape, dtype, NULL */
    kiln_tensor short3 = vec(r, 3);
    CHECK(kiln_compare(&tr, &short3, &s) == KILN_ERR_SHAPE);
    kiln_tensor str = tr;
    str.dtype = KILN_DT_STRING;
    CHECK(kiln_compare(&str, &tr, &s) == KILN_ERR_DTYPE);
    kiln_tensor small = tr;
    small.nbytes = 4;
    CHECK(kiln_compare(&small, &tr, &s) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_compare(NULL, &tr, &s) == KILN_ERR_INVALID_ARG);
}

/* Library metrics against naive loops, float32 and float16 candidates, odd sizes. */
static void test_random(void)
{
    unsigned long long seed = 12345;
    for (int rep = 0; rep < 20; rep++) {
        int64_t rows = 1 + (int64_t)(test_rng(&seed) % 7), cls = 1 + (int64_t)(test_rng(&seed) % 37), n = rows * cls;
        float *r = malloc(sizeof(float) * (size_t)n), *c = malloc(sizeof(float) * (size_t)n);
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
        double noise = rep % 2 ? 1e-3 : 0.3;
        for (int64_t i = 0; i < n; i++) {
            r[i] = test_randf(&seed) * 4;
            c[i] = r[i] + (float)(noise * test_randf(&seed));
            h[i] = kiln__f32_to_f16(c[i]);
        }
        kiln_tensor tr = {.dtype = KILN_DT_FLOAT32, .ndim = 2, .dims = {rows, cls}, .data = r, .nbytes = sizeof(float) * (size_t)n};
        kiln_tensor tc = tr, th = tr;
        tc.data = c;
        th.dtype = KILN_DT_FLOAT16;
        th.data = h;
        th.nbytes = sizeof(uint16_t) * (size_t)n;
        for (int half = 0; half < 2; half++) {
            kiln_compare_stats s;
            CHECK(kiln_compare(&tr, half ? &th : &tc, &s) == KILN_OK);
            double rmax = 0, mx = 0, mr = 0, sa = 0, dot = 0, rr = 0, cc = 0, ee = 0;
            for (int64_t i = 0; i < n; i++)
                rmax = fmax(rmax, fabs(r[i]));
            int64_t t1 = 0;
            for (int64_t i = 0; i < n; i++) {
                double cv = half ? kiln__f16_to_f32(h[i]) : c[i], e = fabs(cv - r[i]);
                mx = fmax(mx, e);
                mr = fmax(mr, e / fmax(fabs(r[i]), 1e-3 * rmax));
                sa += e;
                dot += cv * r[i];
                rr += (double)r[i] * r[i];
                cc += cv * cv;
                ee += e * e;
            }
            for (int64_t k = 0; k < rows && cls >= 2; k++) {
                int64_t ar = 0, ac = 0;
                for (int64_t j = 1; j < cls; j++) {
                    if (r[k * cls + j] > r[k * cls + ar])
                        ar = j;
                    double cj = half ? kiln__f16_to_f32(h[k * cls + j]) : c[k * cls + j];
                    double ca = half ? kiln__f16_to_f32(h[k * cls + ac]) : c[k * cls + ac];
                    if (cj > ca)
                        ac = j;
                }
                t1 += ar == ac;
            }
            CHECK_CLOSE(s.max_abs, mx, 1e-12);
            CHECK_CLOSE(s.max_rel, mr, 1e-9);
            CHECK_CLOSE(s.mean_abs, sa / (double)n, 1e-12);
            CHECK_CLOSE(s.cosine, dot / sqrt(rr * cc), 1e-12);
            CHECK_CLOSE(s.snr_db, 10 * log10(rr / ee), 1e-9);
            CHECK(s.rows == (cls >= 2 ? rows : 0) && s.top1_agree == t1 && s.top5_agree >= s.top1_agree);
        }
        free(r);
        free(c);
        free(h);
    }
}

static void test_summary_and_budgets(void)
{
    kiln_compare_summary sum = {0};
    kiln_compare_stats a = {.count = 10, .max_abs = 0.1, .max_rel = 0.01, .mean_abs = 0.01, .cosine = 0.9999,
                            .snr_db = 40, .rows = 100, .top1_agree = 100, .top5_agree = 100};
    kiln_compare_stats b = {.count = 10, .max_abs = 0.3, .max_rel = 0.02, .mean_abs = 0.02, .cosine = 0.999,
                            .snr_db = 30, .rows = 100, .top1_agree = 98, .top5_agree = 100};
    kiln_compare_summary_add(&sum, &a);
    kiln_compare_summary_add(&sum, &b);
    CHECK(sum.samples == 2 && sum.rows == 200 && sum.top1_agree == 198);
    CHECK_CLOSE(sum.worst.max_abs, 0.3, 0);
    CHECK_CLOSE(sum.worst.cosine, 0.999, 0);
    CHECK_CLOSE(sum.worst.snr_db, 30, 0);
    CHECK_CLOSE(sum.mean_snr_db, 35, 1e-12);
    CHECK_CLOSE(sum.mean_max_abs, 0.2, 1e-12);
    struct { const char *text; kiln_metric m; double thr; bool pass; } ok[] = {
        {"cosine>=0.999", KILN_METRIC_COSINE, 0.999, true},
        {"cosine>=0.9995", KILN_METRIC_COSINE, 0.9995, false},
        {"snr>=30db", KILN_METRIC_SNR, 30, true},
        {" SNR >= 30.5 dB ", KILN_METRIC_SNR, 30.5, false},
        {"snr>=25", KILN_METRIC_SNR, 25, true},
        {"top1>=99%", KILN_METRIC_TOP1, 0.99, true},
        {"top1>=99.5%", KILN_METRIC_TOP1, 0.995, false},
        {"top1>=0.98", KILN_METRIC_TOP1, 0.98, true},
        {"top5>=100%", KILN_METRIC_TOP5, 1, true},
        {"maxrel<=1e-2", KILN_METRIC_MAXREL, 0.01, false},
        {"maxrel<=2e-2", KILN_METRIC_MAXREL, 0.02, true},
        {"maxabs<=0.3", KILN_METRIC_MAXABS, 0.3, true},
        {"meanabs<=0.001", KILN_METRIC_MEANABS, 0.001, false},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        kiln_budget b2;
        CHECK_MSG(kiln_budget_parse(ok[i].text, &b2) == KILN_OK, "%s: %s", ok[i].text, kiln_last_error());
        CHECK_MSG(b2.metric == ok[i].m && fabs(b2.threshold - ok[i].thr) < 1e-12, "%s", ok[i].text);
        bool pass;
        kiln_budget_value(&b2, &sum, &pass);
        CHECK_MSG(pass == ok[i].pass, "%s", ok[i].text);
    }
    const char *bad[] = {"", "cosine", "cosine>0.9", "cosine<=0.9", "maxrel>=1", "cos>=0.9", "cosine>=",
                         "cosine>=0.9x", "cosine>=nan", "cosine>=inf", "cosine>=0x1p-1", "cosine>=1.5",
                         "top1>=101%", "top1>=99", "snr>=30 dbx", "maxabs<=-1", "snr>=30%", "top1>=99db",
                         "cosine>=0.9>=0.8", ">=0.9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_budget b2;
        CHECK_MSG(kiln_budget_parse(bad[i], &b2) == KILN_ERR_INVALID_ARG, "'%s' accepted", bad[i]);
        CHECK_MSG(strstr(kiln_last_error(), "bad budget") != NULL, "'%s': %s", bad[i], kiln_last_error());
    }
    CHECK(kiln_budget_parse(NULL, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(!strcmp(kiln_metric_name(KILN_METRIC_SNR), "snr") && !strcmp(kiln_metric_name((kiln_metric)99), "?"));
    /* any NaN/Inf fails every budget; not classifier-like: agreement budgets fail (NaN value) */
    kiln_budget cb;
    CHECK(kiln_budget_parse("cosine>=0", &cb) == KILN_OK);
    bool pass;
    kiln_compare_summary nf = sum;
    nf.nonfinite = 1;
    kiln_budget_value(&cb, &nf, &pass);
    CHECK(!pass);
    kiln_compare_summary nr = sum;
    nr.rows = 0;
    CHECK(kiln_budget_parse("top1>=0%", &cb) == KILN_OK);
    CHECK(isnan(kiln_budget_value(&cb, &nr, &pass)) && !pass);
}

/* Nothing comparable (every element NaN/Inf, or no element at all): every metric is NaN, never the 0 / 1 / 300 dB
 * of a perfect match; the summary's worst and means skip such samples; budgets fail on NaN/Inf, and a tensor
 * without elements passes them (nothing to compare) */
static void test_nothing_compared(void)
{
    float r[3] = {1, 2, 3}, c[3] = {NAN, INFINITY, -INFINITY};
    kiln_tensor tr = vec(r, 3), tc = vec(c, 3), e = vec(r, 0);
    kiln_compare_stats s, empty, good;
    CHECK(kiln_compare(&tr, &tc, &s) == KILN_OK);
    CHECK(s.count == 0 && s.nonfinite == 3);
    CHECK(isnan(s.max_abs) && isnan(s.max_rel) && isnan(s.mean_abs) && isnan(s.cosine) && isnan(s.snr_db));
    CHECK(kiln_compare(&tc, &tc, &s) == KILN_OK && s.count == 0 && isnan(s.cosine) && isnan(s.snr_db));
    CHECK(kiln_compare(&e, &e, &empty) == KILN_OK);
    CHECK(empty.count == 0 && empty.nonfinite == 0 && isnan(empty.cosine) && isnan(empty.snr_db) &&
          isnan(empty.max_abs));
    float c2[3] = {1, 2, 4};
    kiln_tensor t2 = vec(c2, 3);
    CHECK(kiln_compare(&tr, &t2, &good) == KILN_OK && good.count == 3);
    /* a sample that compared nothing, first or later, leaves the worst and the means to the others */
    kiln_compare_summary sum = {0};
    kiln_compare_summary_add(&sum, &s);
    CHECK(sum.compared == 0 && isnan(sum.mean_cosine) && isnan(sum.worst.snr_db) && isnan(sum.mean_max_abs));
    kiln_compare_summary_add(&sum, &good);
    kiln_compare_summary_add(&sum, &s);
    CHECK(sum.samples == 3 && sum.compared == 1 && sum.nonfinite == 6 && sum.worst.count == 3);
    CHECK(sum.worst.cosine == good.cosine && sum.mean_cosine == good.cosine && sum.worst.snr_db == good.snr_db &&
          sum.mean_snr_db == good.snr_db && sum.worst.max_abs == 1 && sum.mean_max_abs == 1);
    kiln_budget cb;
    bool pass = true;
    CHECK(kiln_budget_parse("cosine>=-1", &cb) == KILN_OK);
    kiln_budget_value(&cb, &sum, &pass);
    CHECK(!pass);   /* NaN/Inf elements */
    kiln_compare_summary only_nan = {0};
    kiln_compare_summary_add(&only_nan, &s);
    CHECK(isnan(kiln_budget_value(&cb, &only_nan, &pass)) && !pass);
    kiln_compare_summary none = {0};
    kiln_compare_summary_add(&none, &empty);
    kiln_compare_summary_add(&none, &empty);
    CHECK(none.samples == 2 && none.compared == 0 && isnan(none.mean_snr_db));
    CHECK(isnan(kiln_budget_value(&cb, &none, &pass)) && pass);
    CHECK(kiln_budget_parse("maxabs<=0", &cb) == KILN_OK);
    CHECK(isnan(kiln_budget_value(&cb, &none, &pass)) && pass);
}

typedef struct seen { int n, last_layer; bool ordered; kiln_tensor last; } seen;

static kiln_status on_value(void *user, const kiln_value_view *v)
{
    seen *s = user;
    s->ordered &= v->layer >= s->last_layer && v->value->dtype == KILN_DT_FLOAT32 && v->quantizes == NULL;
    s->last_layer = v->layer;
    free(s->last.data);
    s->last = *v->value;
    s->last.data = malloc(v->value->nbytes);
    memcpy(s->last.data, v->value->data, v->value->nbytes);
    s->n++;
    return s->n == 1000 ? KILN_ERR_CANCELLED : KILN_OK;
}

static kiln_status stop_at_3(void *user, const kiln_value_view *v)
{
    (void)v;
    return ++*(int *)user == 3 ? KILN_ERR_LIMIT : KILN_OK;
}

static void test_run_values(void)
{
    kiln_model_t m;
    if (kiln_model_load("models/tiny_cnn.onnx", &m) != KILN_OK) {
        printf("skip run_values: models/tiny_cnn.onnx missing\n");
        return;
    }
    float x[2 * 3 * 16 * 16];
    unsigned long long sd = 5;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = test_randf(&sd);
    kiln_tensor in = {.dtype = KILN_DT_FLOAT32, .ndim = 4, .dims = {2, 3, 16, 16}, .data = x, .nbytes = sizeof x};
    const char *names[] = {"input"};
    seen s = {.ordered = true};
    CHECK(kiln_model_run_values(m, 1, names, &in, NULL, on_value, &s) == KILN_OK);
    CHECK(s.ordered && s.n >= 10);
    kiln_tensor *outs;
    int nout;
    CHECK(kiln_model_run(m, 1, names, &in, NULL, &nout, &outs) == KILN_OK);
    kiln_compare_stats cs;
    CHECK(kiln_compare(&outs[0], &s.last, &cs) == KILN_OK && cs.max_abs == 0);   /* the last value is the output */
    kiln_tensors_free(outs, nout);
    free(s.last.data);
    int calls = 0;
    CHECK(kiln_model_run_values(m, 1, names, &in, NULL, stop_at_3, &calls) == KILN_ERR_LIMIT && calls == 3);
    CHECK(kiln_model_run_values(m, 1, names, &in, NULL, NULL, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_engine_run_values(NULL, 1, names, &in, NULL, on_value, &s) == KILN_ERR_INVALID_ARG);
    kiln_model_free(m);
}

int main(void)
{
    test_hand();
    test_random();
    test_summary_and_budgets();
    test_nothing_compared();
    test_run_values();
    return TEST_SUMMARY();
}
