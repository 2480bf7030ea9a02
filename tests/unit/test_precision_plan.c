/* The precision planner through the public API (kiln_build with precision "auto",
 * kiln_precision_debug) on models/tiny_cnn.onnx with calibration data generated here: the plan
 * meets its budget when checked independently (engine against model, kiln_compare), every planned
 * layer is recorded as requested "auto" with the precision it runs in, a budget no plan can meet
 * is a clean KILN_ERR_UNSUPPORTED with budget_unmet, the debugger's set meets the budget and bad
 * arguments of both are clean errors. */
#include "kiln/kiln.h"
#include "test.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *MODEL = "models/tiny_cnn.onnx";
static char dir[] = "/tmp/kiln_plan_XXXXXX";
static char files[3][256];

static void write_data(void)
{
    unsigned long long seed = 7;
    for (int k = 0; k < 3; k++) {
        kiln_tensor t = {.dtype = KILN_DT_FLOAT32, .ndim = 4, .dims = {2, 3, 32, 32}};
        t.nbytes = 2 * 3 * 32 * 32 * sizeof(float);
        float *x = malloc(t.nbytes);
        for (size_t i = 0; i < t.nbytes / sizeof(float); i++)
            x[i] = 2 * test_randf(&seed);
        t.data = x;
        snprintf(files[k], sizeof files[k], "%s/s%d.npy", dir, k);
        CHECK(kiln_npy_write(files[k], &t) == KILN_OK);
        free(x);
    }
}

/* Worst cosine of the engine against the model over the data files. */
static double worst_cosine(kiln_engine_t e, kiln_model_t m)
{
    double worst = 1;
    for (int k = 0; k < 3; k++) {
        kiln_tensor in;
        CHECK(kiln_npy_read(files[k], &in) == KILN_OK);
        const char *name = kiln_model_input_name(m, 0);
        kiln_tensor *a = NULL, *b = NULL;
        int na = 0, nb = 0;
        CHECK(kiln_engine_run(e, 1, &name, &in, NULL, &na, &a) == KILN_OK);
        CHECK(kiln_model_run(m, 1, &name, &in, NULL, &nb, &b) == KILN_OK);
        kiln_compare_stats s;
        if (na == 1 && nb == 1 && kiln_compare(&b[0], &a[0], &s) == KILN_OK)
            worst = s.cosine < worst ? s.cosine : worst;
        else
            worst = -1;
        kiln_tensors_free(a, na);
        kiln_tensors_free(b, nb);
        kiln_free(in.data);
    }
    return worst;
}

static void test_auto(kiln_model_t m, kiln_calib_options *cal)
{
    const char *allow[] = {"int8", "fp16"};
    kiln_build_options o = {.precision = "auto", .accuracy_budget = "cosine>=0.9999", .allow = allow, .num_allow = 2,
                            .calib = cal, .auto_objective = KILN_AUTO_SIZE, .no_tactics = true};
    kiln_engine_t e = NULL;
    CHECK_MSG(kiln_build(m, &o, &e) == KILN_OK && e, "%s", kiln_last_error());
    CHECK(o.precision_report && strstr(o.precision_report, "auto: budget cosine>=0.9999"));
    CHECK(o.auto_candidates == 10 && o.auto_lowered > 0 && o.auto_value >= 0.9999 && !o.budget_unmet);
    if (e) {
        int planned = 0, lowered = 0;
        for (int i = 0; i < kiln_engine_num_layers(e); i++) {
            const char *req, *real;
            CHECK(kiln_engine_layer_precision(e, i, &req, &real) == KILN_OK);
            if (!strcmp(req, "auto")) {
                planned++;
                lowered += strcmp(real, "fp32") != 0;
                CHECK_MSG(!strcmp(real, "fp32") || !strcmp(real, "int8") || !strcmp(real, "fp16"), "%s", real);
            } else
                CHECK_MSG(!req[0], "%s", req);
        }
        CHECK(planned == 10 && lowered == o.auto_lowered);
        double c = worst_cosine(e, m);
        CHECK_MSG(c >= 0.9999, "independent cosine %.8f", c);
    }
    kiln_free(o.precision_report);
    kiln_engine_free(e);

    /* every Conv forced to int8 by a rule and a budget it cannot meet: no plan, a clean error */
    const char *rule[] = {"*Conv*:int8"};
    o = (kiln_build_options){.precision = "auto", .accuracy_budget = "cosine>=0.99999999", .calib = cal,
                             .num_layer_precisions = 1, .layer_precisions = rule, .no_tactics = true};
    e = NULL;
    CHECK(kiln_build(m, &o, &e) == KILN_ERR_UNSUPPORTED && !e && o.budget_unmet);
    CHECK_MSG(strstr(kiln_last_error(), "cannot be met"), "%s", kiln_last_error());
    kiln_free(o.precision_report);

    /* bad options */
    const char *fp32[] = {"fp32"}, *bad[] = {"int3"};
    struct { kiln_build_options o; const char *msg; } cases[] = {
        {{.precision = "auto", .calib = cal}, "accuracy-budget"},
        {{.precision = "auto", .calib = cal, .accuracy_budget = "cosine>=2"}, "cosine"},
        {{.precision = "auto", .calib = cal, .accuracy_budget = "cosine>=0.9", .allow = fp32, .num_allow = 1}, "want lower"},
        {{.precision = "auto", .calib = cal, .accuracy_budget = "cosine>=0.9", .allow = bad, .num_allow = 1}, "want lower"},
        {{.precision = "auto", .calib = cal, .accuracy_budget = "cosine>=0.9", .allow = fp32, .num_allow = 9}, "between 1 and"},
        {{.precision = "auto", .calib = cal, .accuracy_budget = "cosine>=0.9", .auto_objective = 7}, "auto_objective"},
        {{.precision = "auto", .accuracy_budget = "cosine>=0.9"}, "need calibration data"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        e = NULL;
        kiln_status st = kiln_build(m, &cases[k].o, &e);
        CHECK_MSG(st == KILN_ERR_INVALID_ARG && !e, "case %zu: %d", k, (int)st);
        CHECK_MSG(strstr(kiln_last_error(), cases[k].msg), "case %zu: %s", k, kiln_last_error());
        kiln_free(cases[k].o.precision_report);
        kiln_engine_free(e);
    }
}

static void test_debug(kiln_model_t m, kiln_calib_options *cal)
{
    kiln_build_options o = {.precision = "int8", .accuracy_budget = "cosine>=0.99999", .calib = cal, .no_tactics = true};
    kiln_precision_debug_t r = NULL;
    CHECK_MSG(kiln_precision_debug(m, &o, "fp32", &r) == KILN_OK && r, "%s", kiln_last_error());
    kiln_precision_debug_info in = {0};
    CHECK(kiln_precision_debug_info_get(r, &in) == KILN_OK);
    CHECK(in.met && in.num_layers == 10 && in.value_final >= 0.99999 && in.value_baseline >= in.value_final);
    CHECK(in.builds > in.num_layers);
    int keep = 0;
    const char *rules[16];
    int nr = 0;
    for (int i = 0; i < in.num_layers; i++) {
        kiln_precision_debug_layer L;
        CHECK(kiln_precision_debug_layer_get(r, i, &L) == KILN_OK);
        keep += L.keep;
        CHECK(!L.keep || (L.rule && strstr(L.rule, ":fp32")));
        if (L.rule && nr < 16)
            rules[nr++] = L.rule;
    }
    CHECK(keep == in.num_keep);
    /* the rules reproduce the measured build, which meets the budget */
    kiln_build_options b = {.precision = "int8", .calib = cal, .num_layer_precisions = nr, .layer_precisions = rules};
    kiln_engine_t e = NULL;
    CHECK_MSG(kiln_build(m, &b, &e) == KILN_OK, "%s", kiln_last_error());
    if (e)
        CHECK_MSG(worst_cosine(e, m) >= 0.99999, "%.8f", worst_cosine(e, m));
    kiln_free(b.precision_report);
    kiln_engine_free(e);
    /* getters and bad arguments */
    kiln_precision_debug_layer L;
    CHECK(kiln_precision_debug_layer_get(r, in.num_layers, &L) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_precision_debug_layer_get(r, -1, &L) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_precision_debug_layer_get(NULL, 0, &L) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_precision_debug_info_get(NULL, &in) == KILN_ERR_INVALID_ARG);
    kiln_precision_debug_free(r);
    kiln_precision_debug_free(NULL);
    r = NULL;
    CHECK(kiln_precision_debug(NULL, &o, "fp32", &r) == KILN_ERR_INVALID_ARG && !r);
    o.precision = "fp32";
    CHECK(kiln_precision_debug(m, &o, "fp32", &r) == KILN_ERR_INVALID_ARG && !r);
    o.precision = "int8";
    CHECK(kiln_precision_debug(m, &o, "int8", &r) == KILN_ERR_INVALID_ARG && !r);
    CHECK(kiln_precision_debug(m, &o, "bogus", &r) == KILN_ERR_INVALID_ARG && !r);
    o.accuracy_budget = NULL;
    CHECK(kiln_precision_debug(m, &o, "fp32", &r) == KILN_ERR_INVALID_ARG && !r);
}

int main(void)
{
    kiln_model_t m;
    if (kiln_model_load(MODEL, &m) != KILN_OK) {
        printf("SKIP: %s missing\n", MODEL);
        return 77;
    }
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    write_data();
    kiln_calib_options cal = {.data_dir = dir, .method = KILN_CALIB_MINMAX};
    test_auto(m, &cal);
    test_debug(m, &cal);
    for (int k = 0; k < 3; k++)
        unlink(files[k]);
    rmdir(dir);
    kiln_model_free(m);
    return TEST_SUMMARY();
}
