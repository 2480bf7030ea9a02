/* Precision requests through the public API (kiln_build_options, kiln_engine_layer_precision):
 * requested and realized precision per layer, their survival through engine serialization, the
 * error naming an unrealizable request and the fallback report, and every bad argument. */
#include "kiln/kiln.h"
#include "test.h"
#include <string.h>

static const char *MODEL = "models/tiny_cnn.onnx";

static bool is_weight_op(const char *op)
{
    return !strcmp(op, "Conv") || !strcmp(op, "FusedConv") || !strcmp(op, "Gemm") || !strcmp(op, "FusedGemm");
}

/* Every Conv/Gemm layer requested and realized `want`; the rest without a request. */
static void check_layers(kiln_engine_t e, const char *want)
{
    int n = kiln_engine_num_layers(e), weighted = 0;
    for (int i = 0; i < n; i++) {
        kiln_layer_info L;
        const char *req = NULL, *real = NULL;
        CHECK(kiln_engine_layer(e, i, &L) == KILN_OK);
        CHECK(kiln_engine_layer_precision(e, i, &req, &real) == KILN_OK);
        CHECK(req && real && !strcmp(real, L.precision));
        if (is_weight_op(L.op)) {
            weighted++;
            CHECK_MSG(!strcmp(req, want) && !strcmp(real, want), "%s: %s/%s", L.name, req, real);
        } else
            CHECK_MSG(!strcmp(req, ""), "%s (%s) requested %s", L.name, L.op, req);
    }
    CHECK(weighted == 10);
}

static kiln_status build(kiln_model_t m, kiln_build_options *o, kiln_engine_t *e)
{
    kiln_status st = kiln_build(m, o, e);
    kiln_free(o->precision_report);
    o->precision_report = NULL;
    return st;
}

int main(void)
{
    kiln_model_t m;
    if (kiln_model_load(MODEL, &m) != KILN_OK) {
        printf("SKIP: %s missing\n", MODEL);
        return 77;
    }
    kiln_engine_t e = NULL, e2 = NULL;
    kiln_build_options o = {.no_tactics = true, .precision = "bf16"};
    CHECK(build(m, &o, &e) == KILN_OK);
    if (e) {
        check_layers(e, "bf16");
        /* requests are node attributes and realized precisions node fields: both are serialized */
        void *buf = NULL;
        size_t len = 0;
        CHECK(kiln_engine_serialize(e, &buf, &len) == KILN_OK);
        CHECK(buf && kiln_engine_load_buffer(buf, len, &e2) == KILN_OK);
        kiln_free(buf);
        if (e2)
            check_layers(e2, "bf16");
        /* bad arguments */
        const char *s = NULL;
        int n = kiln_engine_num_layers(e);
        CHECK(kiln_engine_layer_precision(NULL, 0, &s, &s) == KILN_ERR_INVALID_ARG);
        CHECK(kiln_engine_layer_precision(e, -1, &s, &s) == KILN_ERR_INVALID_ARG);
        CHECK(kiln_engine_layer_precision(e, n, &s, &s) == KILN_ERR_INVALID_ARG);
        CHECK(strstr(kiln_last_error(), "kiln_engine_layer_precision") != NULL);
        CHECK(kiln_engine_layer_precision(e, 0, NULL, NULL) == KILN_OK);
        CHECK(kiln_engine_layer_storage(NULL, 0, &s) == KILN_ERR_INVALID_ARG);
        CHECK(kiln_engine_layer_storage(e, n, &s) == KILN_ERR_INVALID_ARG);
        CHECK(kiln_engine_layer_storage(e, 0, NULL) == KILN_ERR_INVALID_ARG);
        for (int i = 0; i < n; i++) {   /* a CPU bf16 engine holds every output as its dtype */
            s = NULL;
            CHECK(kiln_engine_layer_storage(e, i, &s) == KILN_OK && s && !s[0]);
        }
    }
    kiln_engine_free(e);
    kiln_engine_free(e2);

    /* a request no kernel or pattern realizes fails, naming the layer; fallback lists it */
    const char *rule[] = {"GlobalAveragePool*:fp16"};
    o = (kiln_build_options){.no_tactics = true, .num_layer_precisions = 1, .layer_precisions = rule};
    e = NULL;
    CHECK(kiln_build(m, &o, &e) == KILN_ERR_UNSUPPORTED && !e);
    CHECK_MSG(strstr(kiln_last_error(), "GlobalAveragePool_0 (GlobalAveragePool: fp32)") != NULL, "%s", kiln_last_error());
    kiln_free(o.precision_report);
    o.precision_fallback = true;
    o.precision_report = NULL;
    CHECK(kiln_build(m, &o, &e) == KILN_OK && e);
    CHECK_MSG(o.precision_report && strstr(o.precision_report, "fallback: GlobalAveragePool_0 (GlobalAveragePool) requested fp16, runs in fp32"),
              "%s", o.precision_report ? o.precision_report : "(null)");
    kiln_free(o.precision_report);
    kiln_engine_free(e);

    /* bad options: clean errors, no engine */
    const char *null_rule[] = {NULL}, *empty_pat[] = {":fp16"}, *no_prec[] = {"conv1_Conv_0"}, *tf32[] = {"*:tf32"};
    struct { kiln_build_options o; const char *msg; } bad[] = {
        {{.precision = "int3"}, "want one of fp32, fp16, bf16, int8, fp8, nvfp4 (or fp4), mxfp4, int4"},
        {{.precision = "auto"}, "needs --accuracy-budget"},
        {{.precision = "fp8"}, "int8 and fp8 layers need calibration data"},
        {{.precision = "int8"}, "need calibration data"},
        {{.precision = "int8", .calib = &(kiln_calib_options){.method = KILN_CALIB_MINMAX}}, "need calibration data"},
        {{.num_layer_precisions = 1, .layer_precisions = NULL}, "(null)"},
        {{.num_layer_precisions = 1, .layer_precisions = null_rule}, "(null)"},
        {{.num_layer_precisions = 1, .layer_precisions = empty_pat}, "want PATTERN:PRECISION"},
        {{.num_layer_precisions = 1, .layer_precisions = no_prec}, "want PATTERN:PRECISION"},
        {{.num_layer_precisions = 1, .layer_precisions = tf32}, "not supported yet"},
        {{.precision = "fp16", .num_layer_precisions = -1}, "invalid number"},
        {{.float_activations = "fp8", .device = KILN_DEVICE_CUDA}, "want fp16, bf16 or fp32"},
        {{.float_activations = "fp16"}, "for --device cuda engines only"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        e = NULL;
        kiln_status st = kiln_build(m, &bad[k].o, &e);
        CHECK_MSG(st == KILN_ERR_INVALID_ARG && !e, "case %zu: %d", k, (int)st);
        CHECK_MSG(strstr(kiln_last_error(), bad[k].msg) != NULL, "case %zu: %s", k, kiln_last_error());
        kiln_free(bad[k].o.precision_report);
        kiln_engine_free(e);
    }
    kiln_model_free(m);
    return TEST_SUMMARY();
}
