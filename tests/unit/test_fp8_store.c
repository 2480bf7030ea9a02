/* FP8 storage (build/fp8_feed.c kiln__fp8_mark_store, docs/CUDA.md "E4M3 storage"): which FP8 convolutions of a
 * --device cuda build hold their output only as E4M3, and the CPU emulation's rounding of such an output.
 *
 * The graph: X -> c0 (1x1, ReLU) -> X1; X1 -> c1 (1x1, ReLU) -> h; c2 (1x1) = ReLU(conv(h) + X1) -> y (output).
 * X1 is read by c1 as its input (scale s1) and by c2 as its residual: c0 is marked with s1. c1's output h has no
 * residual reader: not marked. Variants that must not be marked: X1 also a graph output, 8 channels (the GPU's
 * FP8 convolution takes multiples of 16), c2 reading X1 as its input 0 with another scale, c0 a 3x3 convolution
 * over 64 channels (reduction 64 x 9 = 576 > FP8_STORE_MAX_K = 512), c2 reducing over 576 channels of h. Marked all
 * the same: X1 of 576 channels, so that c1, its input-0 reader, reduces over 576 (the limit is the residual readers'
 * and the writer's). */
#include "build/precision.h"
#include "core/numfmt.h"
#include "ir/fused.h"
#include "runtime/exec.h"
#include "test_graph.h"
#include "test_tensor.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { V_ORDINARY, V_OUTPUT, V_NARROW, V_OTHER_SCALE, V_WIDE_WRITER, V_WIDE_READER, V_WIDE_INPUT_READER };

static const float S0 = 2.0f / 448, S1 = 3.0f / 448, S2 = 4.0f / 448;

static void mark_fp8(kiln_node *n, float s)
{
    CHECK(kiln__node_set_attr_s(n, KILN_ATTR_WQ, "fp8") == KILN_OK);
    CHECK(kiln__node_set_attr_s(n, KILN_ATTR_AQ, "fp8") == KILN_OK);
    CHECK(kiln__node_set_attr_f(n, KILN_ATTR_AQ_SCALE, s) == KILN_OK);
    CHECK(kiln__node_set_attr_i(n, KILN_ATTR_WQ_TENSOR, 1) == KILN_OK);
    kiln_fused_act relu = {KILN_FUSED_RELU, 0, 0};
    CHECK(kiln__node_set_fused_act(n, &relu) == KILN_OK);
}

static int conv(kiln_graph *g, const char *name, int x, int64_t cin, int64_t cout, int64_t k, int res, int out,
                unsigned long long *seed)
{
    int64_t wd[4] = {cout, cin, k, k}, bd[1] = {cout};
    int in[4] = {x, test_graph_const(g, "w", test_tensor_f32(4, wd, 0.3f, seed)),
                 test_graph_const(g, "b", test_tensor_f32(1, bd, 0.1f, seed)), res};
    int n = test_graph_node(g, KILN_OP_FusedConv, name, res >= 0 ? 4 : 3, in, out);
    if (k == 3) {
        kiln_node *nd = &g->nodes[n];
        CHECK(kiln__node_set_attr_ints(nd, "pads", 4, (const int64_t[]){1, 1, 1, 1}) == KILN_OK);
    }
    return n;
}

/* A new graph whose one input is the float32 value "X" (*x). */
static kiln_graph *graph_x(int *x)
{
    kiln_graph *g = kiln__graph_new(NULL);
    *x = test_graph_value(g, "X");
    g->values[*x].dtype = KILN_DT_FLOAT32;
    g->inputs = kiln__malloc(sizeof(int));
    g->inputs[0] = *x;
    g->n_inputs = 1;
    return g;
}

/* The graph of variant v; *c0 / *c1 the two producers' node indices. */
static kiln_graph *block(int v, int *c0, int *c1, unsigned long long *seed)
{
    int x;
    kiln_graph *g = graph_x(&x);
    int64_t ch = v == V_NARROW ? 8 : 16, xc = v == V_WIDE_INPUT_READER ? 576 : ch;   /* xc: X1's channels */
    int x1 = test_graph_value(g, "X1"), h = test_graph_value(g, "h"), y = test_graph_value(g, "y");
    int64_t hc = v == V_WIDE_READER ? 576 : ch;   /* h's channels: c2's reduction */
    /* the wide writer: 3x3 over 64 channels (only c0's weights say X's channel count; these graphs are marked, not run) */
    *c0 = v == V_WIDE_WRITER ? conv(g, "c0", x, 64, xc, 3, -1, x1, seed) : conv(g, "c0", x, ch, xc, 1, -1, x1, seed);
    *c1 = conv(g, "c1", x1, xc, hc, 1, -1, h, seed);
    int c2 = v == V_OTHER_SCALE ? conv(g, "c2", x1, ch, ch, 1, h, y, seed) : conv(g, "c2", h, hc, xc, 1, x1, y, seed);
    mark_fp8(&g->nodes[*c0], S0);
    mark_fp8(&g->nodes[*c1], S1);
    mark_fp8(&g->nodes[c2], S2);
    int n_out = v == V_OUTPUT ? 2 : 1;
    g->outputs = kiln__malloc(sizeof(int) * 2);
    g->outputs[0] = y;
    g->outputs[1] = x1;
    g->n_outputs = n_out;
    return g;
}

static void test_marks(void)
{
    static const char *const names[] = {"ordinary", "X1 an output", "8 channels", "another scale",
                                        "writer K = 576", "residual reader K = 576", "input reader K = 576"};
    for (int v = V_ORDINARY; v <= V_WIDE_INPUT_READER; v++) {
        unsigned long long seed = 11;
        int c0, c1, feeds = 0, stored = 0;
        kiln_graph *g = block(v, &c0, &c1, &seed);
        CHECK(kiln__fp8_mark_feeds(g, &feeds) == KILN_OK);
        CHECK(kiln__fp8_mark_store(g, &stored) == KILN_OK);
        float f0 = kiln__attr_f(&g->nodes[c0], KILN_ATTR_FP8_FEED, 0), s0 = kiln__attr_f(&g->nodes[c0], KILN_ATTR_FP8_STORE, 0),
              s1 = kiln__attr_f(&g->nodes[c1], KILN_ATTR_FP8_STORE, 0);
        const float want_feed = S1;   /* c1 reads X1 first (node order), as its input 0 */
        CHECK_MSG(f0 == want_feed, "%s: c0's feed scale %g, want %g", names[v], (double)f0, (double)want_feed);
        bool want = v == V_ORDINARY || v == V_WIDE_INPUT_READER;
        CHECK_MSG(stored == want && (s0 == (want ? S1 : 0)) && s1 == 0,
                  "%s: %d stored, c0 %g (want %g), c1 %g (want 0)", names[v], stored, (double)s0,
                  (double)(want ? S1 : 0), (double)s1);
        kiln__graph_free(g);
    }
}

/* KILN_FP8_STORE_MAX_K (a build-time switch): at 576 the K = 576 writer and residual reader are marked too; a value
 * that is not a positive integer keeps the default (512: not marked). */
static void test_max_k_switch(void)
{
    static const struct { const char *val; bool marked; } cases[] = {{"576", true}, {"1024", true}, {"575", false},
                                                                   {"0", false}, {"abc", false}, {"576x", false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("KILN_FP8_STORE_MAX_K", cases[i].val, 1);
        for (int v = V_WIDE_WRITER; v <= V_WIDE_READER; v++) {
            unsigned long long seed = 11;
            int c0, c1, feeds = 0, stored = 0;
            kiln_graph *g = block(v, &c0, &c1, &seed);
            CHECK(kiln__fp8_mark_feeds(g, &feeds) == KILN_OK && kiln__fp8_mark_store(g, &stored) == KILN_OK);
            CHECK_MSG(stored == (cases[i].marked ? 1 : 0), "KILN_FP8_STORE_MAX_K=%s, variant %d: %d stored, want %d",
                      cases[i].val, v, stored, cases[i].marked ? 1 : 0);
            kiln__graph_free(g);
        }
    }
    unsetenv("KILN_FP8_STORE_MAX_K");
}

/* GEMM writers: X -> m0 = FusedMatMul(X, W0, b0) with GELU -> H; H -> m1 (MatMul, scale S1) -> y (output). m0 is
 * marked with S1: kiln's epilogue applies its GELU and can write only E4M3. Not marked: H also a graph output; a
 * second reader m2 of H with another scale; m0 with ReLU (cuBLASLt's GEMM writes that output itself); m1 with N = 24
 * (not a multiple of 16: it would run on the CPU, which cannot read E4M3-held bytes); m1 a FusedMatMul also reading H
 * as its residual; m1 an FP8 convolution's input instead (not a GEMM). */
enum { G_ORDINARY, G_OUTPUT, G_OTHER_SCALE, G_RELU, G_ODD_N, G_RESIDUAL, G_COUNT };

static kiln_graph *gemm_pair(int v, int *m0, unsigned long long *seed)
{
    int x;
    kiln_graph *g = graph_x(&x);
    int h = test_graph_value(g, "H"), y = test_graph_value(g, "y"), y2 = test_graph_value(g, "y2");
    int64_t w0d[2] = {16, 32}, b0d[1] = {32}, w1d[2] = {32, v == G_ODD_N ? 24 : v == G_RESIDUAL ? 32 : 16},
            b1d[1] = {w1d[1]};
    int in0[3] = {x, test_graph_const(g, "w0", test_tensor_f32(2, w0d, 0.3f, seed)),
                  test_graph_const(g, "b0", test_tensor_f32(1, b0d, 0.1f, seed))};
    *m0 = test_graph_node(g, KILN_OP_FusedMatMul, "m0", 3, in0, h);
    mark_fp8(&g->nodes[*m0], S0);
    kiln_fused_act act = {v == G_RELU ? KILN_FUSED_RELU : KILN_FUSED_GELU, 0, 0};
    CHECK(kiln__node_set_fused_act(&g->nodes[*m0], &act) == KILN_OK);
    int in1[4] = {h, test_graph_const(g, "w1", test_tensor_f32(2, w1d, 0.3f, seed)),
                  test_graph_const(g, "b1", test_tensor_f32(1, b1d, 0.1f, seed)), h};
    int m1 = v == G_RESIDUAL ? test_graph_node(g, KILN_OP_FusedMatMul, "m1", 4, in1, y)
                             : test_graph_node(g, KILN_OP_MatMul, "m1", 2, in1, y);
    mark_fp8(&g->nodes[m1], S1);   /* (its ReLU mark means nothing to a reader) */
    g->outputs = kiln__malloc(sizeof(int) * 2);
    g->outputs[0] = y;
    g->n_outputs = 1;
    if (v == G_OTHER_SCALE) {
        int in2[2] = {h, test_graph_const(g, "w2", test_tensor_f32(2, (int64_t[]){32, 16}, 0.3f, seed))};
        mark_fp8(&g->nodes[test_graph_node(g, KILN_OP_MatMul, "m2", 2, in2, y2)], S2);
        g->outputs[g->n_outputs++] = y2;
    }
    if (v == G_OUTPUT)
        g->outputs[g->n_outputs++] = h;
    return g;
}

static void test_gemm_marks(void)
{
    static const char *const names[] = {"ordinary", "H an output", "another reader's scale", "ReLU writer",
                                        "reader N = 24", "reader's residual"};
    for (int v = G_ORDINARY; v < G_COUNT; v++) {
        unsigned long long seed = 17;
        int m0, feeds = 0, stored = 0;
        kiln_graph *g = gemm_pair(v, &m0, &seed);
        CHECK(kiln__fp8_mark_feeds(g, &feeds) == KILN_OK);
        CHECK(kiln__fp8_mark_store(g, &stored) == KILN_OK);
        float f0 = kiln__attr_f(&g->nodes[m0], KILN_ATTR_FP8_FEED, 0),
              s0 = kiln__attr_f(&g->nodes[m0], KILN_ATTR_FP8_STORE, 0);
        CHECK_MSG(f0 == S1, "%s: m0's feed scale %g, want %g", names[v], (double)f0, (double)S1);
        bool want = v == G_ORDINARY;
        CHECK_MSG(stored == want && s0 == (want ? S1 : 0), "%s: %d stored, m0 %g (want %g)", names[v], stored,
                  (double)s0, (double)(want ? S1 : 0));
        kiln__graph_free(g);
    }
}

/* The CPU emulation rounds a stored output through E4M3 with its scale: every value of c0's output (X1, made a
 * graph output here to look at it) is s x an E4M3 value, within half an E4M3 step of the unmarked run's. */
static void test_emulation(void)
{
    unsigned long long seed = 5;
    int c0, c1;
    kiln_graph *g = block(V_OUTPUT, &c0, &c1, &seed);
    int64_t xd[4] = {1, 16, 7, 5};
    kiln_tensor x = test_tensor_f32(4, xd, 1.0f, &seed);
    const kiln_tensor *feed[1] = {&x};
    kiln_run_env env = {.nthreads = 2};
    kiln_tensor plain[2] = {{0}}, held[2] = {{0}};
    CHECK(kiln__exec_graph(g, NULL, feed, plain, &env, 0) == KILN_OK);
    CHECK(kiln__node_set_attr_f(&g->nodes[c0], KILN_ATTR_FP8_STORE, S1) == KILN_OK);
    CHECK(kiln__exec_graph(g, NULL, feed, held, &env, 0) == KILN_OK);
    int64_t n = kiln_tensor_numel(&plain[1]), off = 0, moved = 0, sat = 0;
    const float *a = plain[1].data, *b = held[1].data;
    for (int64_t i = 0; a && b && i < n; i++) {
        float q = b[i] / S1;
        uint8_t byte;
        float back;
        kiln__f32_to_fp8_array(KILN_DT_FP8E4M3, &byte, &q, 1, true);
        kiln__fp8_to_f32_array(KILN_DT_FP8E4M3, &back, &byte, 1);
        off += fabsf(back * S1 - b[i]) > 1e-6f * fabsf(b[i]);
        /* half an E4M3 step: 2^-4 relative for normals, 2^-10 x s absolute below; past 448 s: saturated */
        if (fabsf(a[i]) > 448 * S1)
            moved += b[i] != copysignf(448 * S1, a[i]);
        else
            moved += fabsf(a[i] - b[i]) > fmaxf(fabsf(a[i]) / 16.0f, S1 / 1024.0f) * 1.0001f;
        sat += fabsf(a[i]) > 448 * S1;
    }
    CHECK_MSG(n > 0 && off == 0 && moved == 0, "%lld values: %lld not on the E4M3 grid, %lld moved too far (%lld "
              "saturated)", (long long)n, (long long)off, (long long)moved, (long long)sat);
    double diff = 0;   /* the residual add reads the rounded values: y moves too */
    for (int64_t i = 0; i < kiln_tensor_numel(&plain[0]); i++)
        diff = fmax(diff, fabs(((float *)plain[0].data)[i] - ((float *)held[0].data)[i]));
    CHECK_MSG(diff > 0, "y unchanged by the rounding of its residual");
    for (int o = 0; o < 2; o++) {
        kiln__tensor_release(&plain[o]);
        kiln__tensor_release(&held[o]);
    }
    kiln__tensor_release(&x);
    kiln__graph_free(g);
}

int main(void)
{
    setenv("KILN_FP8_STORAGE", "0", 1);   /* the switch (docs/CUDA.md "E4M3 storage"): nothing marked with it off */
    unsigned long long seed = 3;
    int c0, c1, feeds = 0, stored = -1;
    kiln_graph *g = block(V_ORDINARY, &c0, &c1, &seed);
    CHECK(kiln__fp8_mark_feeds(g, &feeds) == KILN_OK && kiln__fp8_mark_store(g, &stored) == KILN_OK);
    CHECK_MSG(feeds == 2 && stored == 0, "with KILN_FP8_STORAGE=0: %d feeds, %d stored", feeds, stored);
    kiln__graph_free(g);
    unsetenv("KILN_FP8_STORAGE");   /* on by default */
    test_marks();
    test_max_k_switch();
    test_gemm_marks();
    test_emulation();
    return TEST_SUMMARY();
}
