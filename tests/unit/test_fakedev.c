/* The runtime's device paths without a GPU, through tests/fakedev (a device module on host memory loaded as the
 * CUDA module): layers on the device with channels-last 4-D outputs, weights uploaded once, CUDA graphs captured at
 * the third run and replayed (on new inputs too), a second context, a CPU fallback between device layers. Every
 * run must equal the CPU's. Session 23's defect -- a replay's NHWC output freed into the pool, then taken by its own
 * relayout to the host, all NaN at every replay -- fails here (the fake module pools and poisons as the CUDA one). */
#include "kiln/kiln.h"
#include "runtime/model.h"
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

int main(void)
{
    setenv("KILN_CUDA_MODULE", KILN_FAKEDEV_PATH, 1);
    check_model(false);
    check_model(true);
    return TEST_SUMMARY();
}
