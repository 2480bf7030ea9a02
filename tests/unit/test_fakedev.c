/* The runtime's device paths without a GPU, through tests/fakedev (a device module on host memory loaded as the
 * CUDA module): layers on the device with channels-last 4-D outputs, weights uploaded once, CUDA graphs captured at
 * the third run and replayed (on new inputs too), a second context, a CPU fallback between device layers. Every
 * run must equal the CPU's. Session 23's defect -- a replay's NHWC output freed into the pool, then taken by its own
 * relayout to the host, all NaN at every replay -- fails here (the fake module pools and poisons as the CUDA one). */
#include "kiln/kiln.h"
#include "runtime/model.h"
#include "engine/engine.h"
#include "test.h"
#include "test_graph.h"
#include <stdlib.h>
#include <string.h>

#ifndef KILN_FAKEDEV_PATH
#error "KILN_FAKEDEV_PATH: the fake device module's path (tests/CMakeLists.txt)"
#endif

/* Sigmoid(Relu(X) * C) + X, and with `fallback` a Transpose (no kernel on the fake device) in the middle */
static kiln_model_t model(bool fallback, unsigned long long *seed)
{
    kiln_graph *g = test_graph_onnx(fallback ? "fakedev_fallback" : "fakedev");
    int64_t xd[4] = {2, 3, 5, 4}, cd[4] = {1, 3, 1, 1};
    int x = test_graph_input(g, "X", 4, xd);
    int c = test_graph_const(g, "C", test_tensor_f32(4, cd, 1.0f, seed));
    int r = test_graph_value(g, "r"), m = test_graph_value(g, "m"), s = test_graph_value(g, "s");
    int y = test_graph_value(g, "y");
    test_graph_node(g, KILN_OP_Relu, "relu", 1, &x, r);
    int min[2] = {r, c};
    test_graph_node(g, KILN_OP_Mul, "mul", 2, min, m);
    if (fallback) {
        int t = test_graph_value(g, "t");
        int ti = test_graph_node(g, KILN_OP_Transpose, "transpose", 1, &m, t);
        int64_t perm[4] = {0, 1, 3, 2};
        CHECK(kiln__node_set_attr_ints(&g->nodes[ti], "perm", 4, perm) == KILN_OK);
        int t2 = test_graph_value(g, "t2");
        int ti2 = test_graph_node(g, KILN_OP_Transpose, "transpose_back", 1, &t, t2);
        CHECK(kiln__node_set_attr_ints(&g->nodes[ti2], "perm", 4, perm) == KILN_OK);
        m = t2;
    }
    test_graph_node(g, KILN_OP_Sigmoid, "sigmoid", 1, &m, s);
    int ain[2] = {s, x};
    test_graph_node(g, KILN_OP_Add, "add", 2, ain, y);
    test_graph_output(g, y);
    test_graph_output(g, s);   /* a second output */
    struct kiln_model *mo = kiln__calloc(1, sizeof *mo);
    mo->g = g;
    return mo;
}

/* max |a - b| over two float32 tensors of one shape (test_worst_f32); INFINITY when they differ in shape or hold NaN */
static double diff(const kiln_tensor *a, const kiln_tensor *b)
{
    if (!a || !b || a->dtype != KILN_DT_FLOAT32 || b->dtype != KILN_DT_FLOAT32 || a->ndim != b->ndim ||
        memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim))
        return INFINITY;
    double w = test_worst_f32(a->data, b->data, kiln_tensor_numel(a), 1.0, 0.0);
    return isnan(w) ? INFINITY : w;
}

/* Runs context gc `runs` times on input x against the CPU context cc; the worst difference */
static double runs_against_cpu(kiln_context_t cc, kiln_context_t gc, const kiln_tensor *x, int runs)
{
    double worst = 0;
    if (kiln_context_set_input(cc, "X", x) != KILN_OK || kiln_context_set_input(gc, "X", x) != KILN_OK ||
        kiln_context_run(cc) != KILN_OK)
        return INFINITY;
    for (int r = 0; r < runs; r++) {
        if (kiln_context_run(gc) != KILN_OK)
            return INFINITY;
        for (int o = 0; o < 2; o++) {
            double d = diff(kiln_context_output(gc, o), kiln_context_output(cc, o));
            worst = d > worst ? d : worst;
        }
    }
    return worst;
}

static void check_model(bool fallback)
{
    unsigned long long seed = 23;
    kiln_model_t m = model(fallback, &seed);
    kiln_engine_t e = NULL;
    kiln_build_options bo = {.no_tactics = true, .no_optimize = true};
    CHECK_MSG(kiln_build(m, &bo, &e) == KILN_OK, "build: %s", kiln_last_error());
    kiln_context_t cc = NULL, gc = NULL, gc2 = NULL;
    CHECK(kiln_context_create(e, &cc) == KILN_OK && kiln_context_create(e, &gc) == KILN_OK &&
          kiln_context_create(e, &gc2) == KILN_OK);
    CHECK_MSG(kiln_context_set_device(gc, KILN_DEVICE_CUDA, 0) == KILN_OK, "%s", kiln_last_error());
    CHECK_MSG(kiln_context_set_device(gc2, KILN_DEVICE_CUDA, 0) == KILN_OK, "%s", kiln_last_error());
    kiln_tensor x[2];
    test_graph_random_inputs(m->g, 1, &x[0], &seed);
    test_graph_random_inputs(m->g, 1, &x[1], &seed);
    /* six runs: the first plans, the third is captured, the rest replay (unless a fallback forbids graphs) */
    double d = runs_against_cpu(cc, gc, &x[0], 6);
    CHECK_MSG(d <= 1e-6, "%s: six runs against the CPU: max diff %g", fallback ? "fallback" : "device", d);
    kiln_device_stats ds;
    CHECK(kiln_context_device_stats(gc, &ds) == KILN_OK);
    if (fallback) {
        CHECK_MSG(ds.fallback_layers == 2 && ds.graph_replays == 0, "fallbacks %d, replays %ld", ds.fallback_layers,
                  ds.graph_replays);
    } else {
        CHECK_MSG(ds.device_layers == 4 && ds.fallback_layers == 0 && ds.graph_replays >= 3,
                  "device layers %d, fallbacks %d, replays %ld", ds.device_layers, ds.fallback_layers,
                  ds.graph_replays);
    }
    d = runs_against_cpu(cc, gc, &x[1], 3);   /* replays on new inputs */
    CHECK_MSG(d <= 1e-6, "%s: new inputs: max diff %g", fallback ? "fallback" : "device", d);
    d = runs_against_cpu(cc, gc2, &x[1], 4);   /* a second context on the same engine */
    CHECK_MSG(d <= 1e-6, "%s: second context: max diff %g", fallback ? "fallback" : "device", d);
    d = runs_against_cpu(cc, gc, &x[0], 2);   /* the first context again */
    CHECK_MSG(d <= 1e-6, "%s: first context again: max diff %g", fallback ? "fallback" : "device", d);
    for (int i = 0; i < 2; i++)
        kiln_free(x[i].data);
    kiln_context_free(cc);
    kiln_context_free(gc);
    kiln_context_free(gc2);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* A context of engine e on the fake device: its device stats after one run on x, checked against the CPU context cc */
static kiln_device_stats device_run(kiln_engine_t e, kiln_context_t cc, const kiln_tensor *x, kiln_status *st)
{
    kiln_device_stats ds;
    memset(&ds, 0, sizeof ds);
    kiln_context_t gc = NULL;
    *st = kiln_context_create(e, &gc);
    if (*st == KILN_OK)
        *st = kiln_context_set_device(gc, KILN_DEVICE_CUDA, 0);
    if (*st == KILN_OK) {
        double d = runs_against_cpu(cc, gc, x, 1);
        CHECK_MSG(d <= 1e-6, "device tactics: run against the CPU: max diff %g", d);
        CHECK(kiln_context_device_stats(gc, &ds) == KILN_OK);
    }
    kiln_context_free(gc);
    return ds;
}

/* Device tactics through an engine: the fake module "times" a choice per op and dims at a layer's first run; the
 * engine stores them, a saved and loaded engine hands them to a new context, which then times nothing; other driver
 * or library versions time again, another GPU is refused, a damaged section is a clean load error. */
static void check_tactics(void)
{
    unsigned long long seed = 24;
    kiln_model_t m = model(false, &seed);
    kiln_engine_t e = NULL, e2 = NULL;
    kiln_build_options bo = {.no_tactics = true, .no_optimize = true};
    CHECK_MSG(kiln_build(m, &bo, &e) == KILN_OK, "build: %s", kiln_last_error());
    kiln_context_t cc = NULL, gc = NULL;
    CHECK(kiln_context_create(e, &cc) == KILN_OK && kiln_context_create(e, &gc) == KILN_OK);
    kiln_tensor x;
    test_graph_random_inputs(m->g, 1, &x, &seed);
    char sig[128];
    CHECK(kiln_engine_device_tactics(e, sig, sizeof sig) == 0 && sig[0] == '\0');
    CHECK(kiln_engine_store_device_tactics(e, gc) == KILN_ERR_INVALID_ARG);   /* not on a device */
    CHECK(kiln_context_set_device(gc, KILN_DEVICE_CUDA, 0) == KILN_OK);
    CHECK(runs_against_cpu(cc, gc, &x, 2) <= 1e-6);
    kiln_device_stats ds;
    CHECK(kiln_context_device_stats(gc, &ds) == KILN_OK);
    CHECK_MSG(ds.tactics_loaded == 0 && ds.tactics_timed == 4, "fresh engine: loaded %d, timed %d", ds.tactics_loaded,
              ds.tactics_timed);
    CHECK_MSG(kiln_engine_store_device_tactics(e, gc) == KILN_OK, "%s", kiln_last_error());
    int n = kiln_engine_device_tactics(e, sig, sizeof sig);
    CHECK_MSG(n == 4 && !strcmp(sig, "fake device (host memory, tests/fakedev)"), "%d tactics, signature '%s'", n, sig);
    kiln_context_free(gc);
    void *buf = NULL;
    size_t len = 0;
    CHECK(kiln_engine_serialize(e, &buf, &len) == KILN_OK);
    CHECK_MSG(kiln_engine_load_buffer(buf, len, &e2) == KILN_OK, "%s", kiln_last_error());
    CHECK(kiln_engine_device_tactics(e2, sig, sizeof sig) == 4);
    kiln_status st;
    ds = device_run(e2, cc, &x, &st);   /* the loaded engine's choices: nothing timed */
    CHECK_MSG(st == KILN_OK && ds.tactics_loaded == 4 && ds.tactics_timed == 0, "loaded engine: %s, loaded %d, timed %d",
              kiln_status_str(st), ds.tactics_loaded, ds.tactics_timed);
    setenv("KILN_FAKEDEV_SIGNATURE", "fake device (host memory, tests/fakedev), driver 2", 1);
    ds = device_run(e2, cc, &x, &st);   /* other versions: timed again, with a warning */
    CHECK_MSG(st == KILN_OK && ds.tactics_loaded == -1 && ds.tactics_timed == 4, "other versions: %s, loaded %d, "
              "timed %d", kiln_status_str(st), ds.tactics_loaded, ds.tactics_timed);
    setenv("KILN_FAKEDEV_SIGNATURE", "another fake GPU", 1);
    ds = device_run(e2, cc, &x, &st);   /* another GPU: refused */
    CHECK_MSG(st == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "rebuild"), "another GPU: %s (%s)",
              kiln_status_str(st), kiln_last_error());
    unsetenv("KILN_FAKEDEV_SIGNATURE");
    kiln_engine_free(e2);
    kiln_free(buf);
    /* a section that is not a tactics text: the load fails cleanly */
    kiln__free(e->dev_tactics);
    e->dev_tactics = kiln__strndup("not tactics\n", 12);
    e->dev_tactics_len = 12;
    CHECK(kiln_engine_serialize(e, &buf, &len) == KILN_OK);
    e2 = NULL;
    CHECK(kiln_engine_load_buffer(buf, len, &e2) == KILN_ERR_PARSE && !e2 &&
          strstr(kiln_last_error(), "device tactics section"));
    kiln_free(buf);
    kiln_free(x.data);
    kiln_context_free(cc);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* The storage each layer's output had on the device (kiln_context_layer_storage, kiln_device_stats
 * .half_storage_layers): the fake module flags Relu's output as FP16-held and Mul's as E4M3-held (flags only; both
 * are read by the fake device's own layers), through the capture and the replays; nothing before a run or on the
 * CPU; bad arguments refused. */
static void check_storage(void)
{
    unsigned long long seed = 25;
    kiln_model_t m = model(false, &seed);
    kiln_engine_t e = NULL;
    kiln_build_options bo = {.no_tactics = true, .no_optimize = true};
    CHECK_MSG(kiln_build(m, &bo, &e) == KILN_OK, "build: %s", kiln_last_error());
    kiln_context_t cc = NULL, gc = NULL;
    CHECK(kiln_context_create(e, &cc) == KILN_OK && kiln_context_create(e, &gc) == KILN_OK);
    CHECK_MSG(kiln_context_set_device(gc, KILN_DEVICE_CUDA, 0) == KILN_OK, "%s", kiln_last_error());
    const char *s = "x";
    CHECK(kiln_context_layer_storage(gc, 0, &s) == KILN_OK && !strcmp(s, ""));   /* before a run */
    kiln_tensor x;
    test_graph_random_inputs(m->g, 1, &x, &seed);
    setenv("KILN_FAKEDEV_F16", "Relu", 1);
    setenv("KILN_FAKEDEV_E4M3", "Mul", 1);
    double d = runs_against_cpu(cc, gc, &x, 5);   /* plan, run, capture, two replays */
    unsetenv("KILN_FAKEDEV_F16");
    unsetenv("KILN_FAKEDEV_E4M3");
    CHECK_MSG(d <= 1e-6, "storage flags: max diff %g", d);
    static const char *const want[4] = {"fp16", "e4m3", "", ""};   /* relu, mul, sigmoid, add */
    for (int i = 0; i < 4; i++) {
        s = NULL;
        CHECK_MSG(kiln_context_layer_storage(gc, i, &s) == KILN_OK && s && !strcmp(s, want[i]),
                  "layer %d: storage '%s', want '%s'", i, s ? s : "(null)", want[i]);
        CHECK(kiln_context_layer_storage(cc, i, &s) == KILN_OK && !strcmp(s, ""));   /* the CPU context */
    }
    kiln_device_stats ds;
    CHECK(kiln_context_device_stats(gc, &ds) == KILN_OK);
    CHECK_MSG(ds.half_storage_layers == 1 && ds.graph_replays >= 2, "half storage layers %d, replays %ld",
              ds.half_storage_layers, ds.graph_replays);
    CHECK(kiln_context_layer_storage(gc, 4, &s) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_context_layer_storage(gc, -1, &s) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_context_layer_storage(NULL, 0, &s) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_context_layer_storage(gc, 0, NULL) == KILN_ERR_INVALID_ARG);
    kiln_free(x.data);
    kiln_context_free(cc);
    kiln_context_free(gc);
    kiln_engine_free(e);
    kiln_model_free(m);
}

int main(void)
{
    setenv("KILN_CUDA_MODULE", KILN_FAKEDEV_PATH, 1);
    check_model(false);
    check_model(true);
    check_tactics();
    check_storage();
    return TEST_SUMMARY();
}
