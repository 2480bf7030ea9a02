/* A FusedConv computed in place over its residual (runtime/plan.c KILN_PLAN_CONV_RES, k_fused.c; host plans have it
 * with KILN_PLAN_CONV_RES=1 in the environment, which main sets, and not without: the last cases): hand-built
 * act(Conv(X, W, B) + Relu(R)) graphs, whose residual Relu(R) dies at the conv, built into engines and run on the
 * CPU against the unoptimized model. A 1x1 stride-1 conv runs in place (the GEMM reads the residual as C); a 1x1
 * stride-2 or padded one is planned in place too but its kernel works from a copy of the residual (the direct
 * convolution stores partial sums first); a 3x3 one is not
 * planned in place. The in-place runs match kiln_engine_run's (planned on the heap) bit for bit.
 * A Transpose after the conv keeps its output off the graph's outputs
 * (which the plan does not place). Odd channel counts and sizes, one and two threads; every ISA the host has (and, in ctest, capped
 * at AVX2). */
#include "engine/engine.h"
#include "kiln/kiln.h"
#include "runtime/model.h"
#include "test.h"
#include "test_graph.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct conv_case {
    int64_t C, M, H, W, k, s, p;
} conv_case;

/* Transpose(act(Conv(X, W, B) + Relu(R))) as an ONNX-domain graph (the builder fuses the conv, the Add and the Relu
 * into one FusedConv) */
static kiln_model_t conv_model(const conv_case *c, unsigned long long *seed)
{
    kiln_graph *g = test_graph_onnx("conv_res");
    int64_t Ho = (c->H + 2 * c->p - c->k) / c->s + 1, Wo = (c->W + 2 * c->p - c->k) / c->s + 1;
    int64_t xd[4] = {1, c->C, c->H, c->W}, rd[4] = {1, c->M, Ho, Wo}, wd[4] = {c->M, c->C, c->k, c->k};
    int x = test_graph_input(g, "X", 4, xd), r = test_graph_input(g, "R", 4, rd);
    int w = test_graph_const(g, "W", test_tensor_f32(4, wd, 1.0f, seed));
    int b = test_graph_const(g, "B", test_tensor_f32(1, &c->M, 1.0f, seed));
    int rr = test_graph_value(g, "r"), y = test_graph_value(g, "y"), s = test_graph_value(g, "s");
    int a = test_graph_value(g, "a"), out = test_graph_value(g, "out");
    test_graph_node(g, KILN_OP_Relu, "relu_r", 1, &r, rr);
    int cin[3] = {x, w, b};
    int ci = test_graph_node(g, KILN_OP_Conv, "conv", 3, cin, y);
    int64_t st[2] = {c->s, c->s}, pads[4] = {c->p, c->p, c->p, c->p};
    CHECK(kiln__node_set_attr_ints(&g->nodes[ci], "strides", 2, st) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(&g->nodes[ci], "pads", 4, pads) == KILN_OK);
    int ain[2] = {y, rr};
    test_graph_node(g, KILN_OP_Add, "add", 2, ain, s);
    test_graph_node(g, KILN_OP_Relu, "relu", 1, &s, a);
    int ti = test_graph_node(g, KILN_OP_Transpose, "transpose", 1, &a, out);   /* the conv's output is no graph output */
    int64_t perm[4] = {0, 1, 3, 2};
    CHECK(kiln__node_set_attr_ints(&g->nodes[ti], "perm", 4, perm) == KILN_OK);
    test_graph_output(g, out);
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    return m;
}

/* Whether the engine's plan computes its FusedConv in place (over its residual). */
static bool conv_in_place(kiln_engine_t e)
{
    const kiln_graph *g = e->g;
    int n = 0;
    for (int v = 0; e->has_plan && v < e->plan.n_values; v++)
        n += e->plan.inplace[v] && g->values[v].producer >= 0 &&
             g->nodes[g->values[v].producer].op == KILN_OP_FusedConv;
    return n == 1;
}

static void run_case(const conv_case *c, bool want_in_place, unsigned long long *seed)
{
    kiln_model_t m = conv_model(c, seed);
    const kiln_graph *g = m->g;
    kiln_tensor ins[2];
    const char *names[2] = {"X", "R"};
    test_graph_random_inputs(g, 2, ins, seed);
    kiln_tensor *ref = NULL;
    int nref = 0;
    CHECK_MSG(kiln_model_run(m, 2, names, ins, NULL, &nref, &ref) == KILN_OK, "%s", kiln_last_error());
    kiln_engine_t e = NULL;
    kiln_build_options o = {.no_tactics = true};
    CHECK_MSG(kiln_build(m, &o, &e) == KILN_OK, "build: %s", kiln_last_error());
    if (e) {
        CHECK_MSG(conv_in_place(e) == want_in_place, "C=%lld M=%lld %lldx%lld k=%lld s=%lld p=%lld: in place %d",
                  (long long)c->C, (long long)c->M, (long long)c->H, (long long)c->W, (long long)c->k,
                  (long long)c->s, (long long)c->p, conv_in_place(e));
        /* the plan passes the engine loader's check (a FusedConv in place over its residual, input 3) */
        void *buf = NULL;
        size_t len = 0;
        kiln_engine_t e2 = NULL;
        CHECK(kiln_engine_serialize(e, &buf, &len) == KILN_OK);
        CHECK_MSG(kiln_engine_load_buffer(buf, len, &e2) == KILN_OK, "%s", kiln_last_error());
        CHECK(!e2 || conv_in_place(e2) == want_in_place);
        kiln_engine_free(e2);
        kiln_free(buf);
        /* a --device cuda engine (built here without a GPU) plans no such pair: the CUDA module's kernels write
         * their output while other blocks still read the residual */
        kiln_build_options od = {.no_tactics = true, .device = KILN_DEVICE_CUDA};
        kiln_engine_t ed = NULL;
        CHECK_MSG(kiln_build(m, &od, &ed) == KILN_OK, "device build: %s", kiln_last_error());
        CHECK_MSG(!ed || (ed->has_plan && !conv_in_place(ed)), "device engine: plan %d, in place %d",
                  ed ? ed->has_plan : -1, ed ? conv_in_place(ed) : -1);
        kiln_engine_free(ed);
        kiln_tensor *heap = NULL;
        int nheap = 0;
        CHECK_MSG(kiln_engine_run(e, 2, names, ins, NULL, &nheap, &heap) == KILN_OK, "%s", kiln_last_error());
        CHECK(nheap == 1);
        for (int nt = 1; nt <= 2; nt++) {
            kiln_context_t cx = NULL;
            CHECK(kiln_context_create(e, &cx) == KILN_OK);
            kiln_context_set_threads(cx, nt);
            for (int i = 0; cx && i < 2; i++)
                CHECK(kiln_context_set_input(cx, names[i], &ins[i]) == KILN_OK);
            for (int run = 0; cx && run < 2; run++) {   /* the second run reuses the arena */
                CHECK_MSG(kiln_context_run(cx) == KILN_OK, "%s", kiln_last_error());
                const kiln_tensor *y = kiln_context_output(cx, 0);
                CHECK(y && nref == 1 && kiln_tensor_numel(y) == kiln_tensor_numel(&ref[0]));
                /* bit for bit as kiln_engine_run's run, which plans (tensors on the heap, nothing in place) */
                if (y && nheap == 1 && y->nbytes == heap[0].nbytes)
                    CHECK_MSG(!memcmp(heap[0].data, y->data, y->nbytes), "C=%lld M=%lld k=%lld s=%lld p=%lld "
                              "threads %d: the in-place run differs from the one on the heap", (long long)c->C,
                              (long long)c->M, (long long)c->k, (long long)c->s, (long long)c->p, nt);
                double worst = y && nref == 1 ? test_worst_f32(y->data, ref[0].data, kiln_tensor_numel(y), 1e-4, 1e-4)
                                              : 0;
                CHECK_MSG(worst <= 1.0, "C=%lld M=%lld %lldx%lld k=%lld s=%lld p=%lld threads %d run %d: error %g",
                          (long long)c->C, (long long)c->M, (long long)c->H, (long long)c->W, (long long)c->k,
                          (long long)c->s, (long long)c->p, nt, run, worst);
            }
            kiln_context_free(cx);
        }
        kiln_tensors_free(heap, nheap);
        kiln_engine_free(e);
    }
    kiln_tensors_free(ref, nref);
    for (int i = 0; i < 2; i++)
        kiln__tensor_release(&ins[i]);
    kiln_model_free(m);
}

int main(void)
{
    unsigned long long seed = 0x9E3779B97F4A7C15ull;
    setenv("KILN_PLAN_CONV_RES", "1", 1);
    static const conv_case in_place[] = {
        {64, 256, 14, 14, 1, 1, 0}, {37, 45, 9, 11, 1, 1, 0}, {300, 24, 7, 13, 1, 1, 0},
        {600, 40, 5, 9, 1, 1, 0},   {5, 3, 2, 3, 1, 1, 0},    {19, 77, 17, 5, 1, 1, 0},
        /* planned in place, the kernel copies: strided, padded (the last one by the direct convolution, AVX-512,
         * in two K slices that would store over the residual before reading it) */
        {24, 40, 15, 15, 1, 2, 0},  {13, 21, 6, 7, 1, 1, 1},  {300, 24, 30, 30, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof in_place / sizeof in_place[0]; i++)
        run_case(&in_place[i], true, &seed);
    static const conv_case not_in_place[] = {{16, 16, 12, 12, 3, 1, 1}, {24, 33, 11, 9, 3, 2, 1}};
    for (size_t i = 0; i < sizeof not_in_place / sizeof not_in_place[0]; i++)
        run_case(&not_in_place[i], false, &seed);
    /* without KILN_PLAN_CONV_RES (the default, runtime/plan.h kiln__plan_host_flags) nothing is planned in place */
    static const conv_case off[] = {{64, 256, 14, 14, 1, 1, 0}, {37, 45, 9, 11, 1, 1, 0}};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0)
            setenv("KILN_PLAN_CONV_RES", "0", 1);
        else
            unsetenv("KILN_PLAN_CONV_RES");
        for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
            run_case(&off[i], false, &seed);
    }
    return TEST_SUMMARY();
}
