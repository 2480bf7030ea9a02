/* The builder's memory plan sized by shape inference (build/plan_infer.c) instead of a run: for the reference models
 * (at their opt shapes, CPU and --device cuda builds) and a hand-built graph, an engine built without tactic timing
 * -- whose plan now comes from inference -- must be byte for byte the engine built with KILN_BUILD_PLAN_RUN=1 (the
 * plan recorded by running the model), and its report must say where the sizes came from. A graph with a
 * data-dependent size (NonZero) falls back to the run. kiln__plan_bytes_inferred itself: every node output's size,
 * false on the NonZero graph. A --device cuda build times no CPU tactics even when asked (no run either). Models
 * missing from models/: skipped. */
#include "build/build.h"
#include "kiln/kiln.h"
#include "runtime/model.h"
#include "test.h"
#include "test_graph.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool exists(const char *p)
{
    struct stat s;
    return stat(p, &s) == 0;
}

/* Builds m twice (sizes inferred / recorded by a run) and compares the serialized engines; *inferred: whether the
 * first build's report says its sizes came from inference. */
static void same_engines(kiln_model_t m, const kiln_build_options *base, const char *what, bool want_inferred)
{
    kiln_build_options o = *base;
    o.no_tactics = true;
    o.want_report = true;
    kiln_engine_t a = NULL, b = NULL;
    unsetenv("KILN_BUILD_PLAN_RUN");
    CHECK_MSG(kiln_build(m, &o, &a) == KILN_OK, "%s: build: %s", what, kiln_last_error());
    char *report = o.report;
    setenv("KILN_BUILD_PLAN_RUN", "1", 1);
    o.report = NULL;
    CHECK_MSG(kiln_build(m, &o, &b) == KILN_OK, "%s: build with a run: %s", what, kiln_last_error());
    kiln_free(o.report);
    unsetenv("KILN_BUILD_PLAN_RUN");
    if (a && b) {
        CHECK_MSG(a->has_plan && b->has_plan, "%s: plans %d / %d", what, a->has_plan, b->has_plan);
        void *ba = NULL, *bb = NULL;
        size_t la = 0, lb = 0;
        CHECK(kiln_engine_serialize(a, &ba, &la) == KILN_OK && kiln_engine_serialize(b, &bb, &lb) == KILN_OK);
        CHECK_MSG(ba && bb && la == lb && !memcmp(ba, bb, la), "%s: engines differ (%zu / %zu bytes; arenas %zu / %zu)",
                  what, la, lb, a->plan.arena_size, b->plan.arena_size);
        kiln_free(ba);
        kiln_free(bb);
        bool inferred = report && strstr(report, "sizes from shape inference");
        CHECK_MSG(inferred == want_inferred, "%s: report says %s", what, report ? report : "(none)");
        printf("%s: %zu-byte arena, %d values planned, %s\n", what, a->plan.arena_size, a->plan.n_planned,
               inferred ? "sizes inferred" : "sizes from a run");
    }
    kiln_free(report);
    kiln_engine_free(a);
    kiln_engine_free(b);
}

typedef struct { const char *path; int n_in; const char *in[3]; int nd; int64_t shape[4]; } model_case;

static const model_case models[] = {
    {"models/resnet50.onnx", 1, {"input"}, 4, {2, 3, 224, 224}},
    {"models/bert_base.onnx", 3, {"input_ids", "attention_mask", "token_type_ids"}, 2, {2, 128}},
    {"models/ocr/ch_PP-OCRv4_det_infer.onnx", 1, {"x"}, 4, {1, 3, 320, 320}},
    {"models/ocr/ch_PP-OCRv4_rec_infer.onnx", 1, {"x"}, 4, {2, 3, 48, 320}},
    {"models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", 1, {"x"}, 4, {3, 3, 48, 192}},
};

static void test_models(void)
{
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        const model_case *mc = &models[i];
        if (!exists(mc->path)) {
            printf("%s: skipped (missing)\n", mc->path);
            continue;
        }
        kiln_model_t m = NULL;
        CHECK_MSG(kiln_model_load(mc->path, &m) == KILN_OK, "%s: %s", mc->path, kiln_last_error());
        if (!m)
            continue;
        kiln_shape_range r[3];
        memset(r, 0, sizeof r);
        for (int k = 0; k < mc->n_in; k++) {
            r[k].input = mc->in[k];
            r[k].ndim = mc->nd;
            memcpy(r[k].min, mc->shape, sizeof(int64_t) * (size_t)mc->nd);
            memcpy(r[k].opt, mc->shape, sizeof(int64_t) * (size_t)mc->nd);
            memcpy(r[k].max, mc->shape, sizeof(int64_t) * (size_t)mc->nd);
        }
        kiln_profile p = {mc->n_in, r};
        kiln_build_options o = {.num_profiles = 1, .profiles = &p};
        same_engines(m, &o, mc->path, true);
        if (i == 0) {   /* a device engine's plan (no FusedConv over its residual): built here without a GPU */
            o.device = KILN_DEVICE_CUDA;
            same_engines(m, &o, "models/resnet50.onnx (--device cuda)", true);
            /* with tactic timing asked for: a device engine times no CPU tactics, so still no run */
            o.want_report = true;
            kiln_engine_t t = NULL;
            CHECK_MSG(kiln_build(m, &o, &t) == KILN_OK, "device build with tactics: %s", kiln_last_error());
            CHECK_MSG(o.report && strstr(o.report, "tactics: 0 layers timed") &&
                          strstr(o.report, "sizes from shape inference"),
                      "device build with tactics: report %s", o.report ? o.report : "(none)");
            kiln_free(o.report);
            kiln_engine_free(t);
        }
        kiln_model_free(m);
    }
}

/* Y = Relu(Conv(X, W) + B) -> Transpose, and with `nonzero` also NonZero(Y) -> Cast (a data-dependent size) */
static kiln_model_t small_model(bool nonzero, unsigned long long *seed)
{
    kiln_graph *g = test_graph_onnx(nonzero ? "nonzero" : "conv");
    int64_t xd[4] = {2, 5, 9, 11}, wd[4] = {7, 5, 3, 3}, bd[1] = {7};
    int x = test_graph_input(g, "X", 4, xd);
    int w = test_graph_const(g, "W", test_tensor_f32(4, wd, 1.0f, seed));
    int b = test_graph_const(g, "B", test_tensor_f32(1, bd, 1.0f, seed));
    int y = test_graph_value(g, "y"), r = test_graph_value(g, "r"), t = test_graph_value(g, "t");
    int cin[3] = {x, w, b};
    test_graph_node(g, KILN_OP_Conv, "conv", 3, cin, y);
    test_graph_node(g, KILN_OP_Relu, "relu", 1, &y, r);
    int ti = test_graph_node(g, KILN_OP_Transpose, "transpose", 1, &r, t);
    int64_t perm[4] = {0, 2, 3, 1};
    CHECK(kiln__node_set_attr_ints(&g->nodes[ti], "perm", 4, perm) == KILN_OK);
    if (nonzero) {
        int nz = test_graph_value(g, "nz"), c = test_graph_value(g, "c");
        test_graph_node(g, KILN_OP_NonZero, "nonzero", 1, &t, nz);
        int ci = test_graph_node(g, KILN_OP_Cast, "cast", 1, &nz, c);
        CHECK(kiln__node_set_attr_i(&g->nodes[ci], "to", KILN_DT_FLOAT32) == KILN_OK);
        test_graph_output(g, c);
    } else {
        test_graph_output(g, t);
    }
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    return m;
}

static void test_small(void)
{
    unsigned long long seed = 5;
    for (int nz = 0; nz < 2; nz++) {
        kiln_model_t m = small_model(nz, &seed);
        /* the function itself on the unoptimized graph */
        const kiln_graph *g = m->g;
        kiln_tensor shape[1];
        memset(shape, 0, sizeof shape);
        shape[0].dtype = KILN_DT_FLOAT32;
        shape[0].ndim = 4;
        int64_t xd[4] = {2, 5, 9, 11};
        memcpy(shape[0].dims, xd, sizeof xd);
        size_t *bytes = kiln__calloc((size_t)g->n_values + 1, sizeof(size_t));
        bool ok = kiln__plan_bytes_inferred(g, shape, bytes, NULL);
        CHECK_MSG(ok == !nz, "%s graph: inferred %d", nz ? "NonZero" : "conv", ok);
        if (ok) {
            size_t conv = 0;
            for (int i = 0; i < g->n_nodes; i++)
                if (g->nodes[i].op == KILN_OP_Conv)
                    conv = bytes[g->nodes[i].out[0]];
            CHECK_MSG(conv == 2 * 7 * 7 * 9 * 4, "conv output: %zu bytes, want %d", conv, 2 * 7 * 7 * 9 * 4);
        }
        kiln__free(bytes);
        kiln_build_options o = {0};
        same_engines(m, &o, nz ? "NonZero graph" : "conv graph", !nz);
        kiln_model_free(m);
    }
}

int main(void)
{
    test_small();
    test_models();
    return TEST_SUMMARY();
}
