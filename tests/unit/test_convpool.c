/* FusedConvPool (passes/p_convpool.c, ref/k_convpool.c): a network's stem, its max pool and the pool's quantization
 * as one layer for the GPU's kernel.
 *  - fuse-conv-pool makes it from FusedConv (7x7 stride 2 pad 3, <= 4 channels, FP16 / BF16 filter, 64 * k outputs,
 *    Relu or none) -> MaxPool (3x3 stride 2 pad 1) [-> QuantizeLinear per tensor], and the graph computes the same
 *    bytes before and after, over odd image sizes, uint8 / int8 / no quantization;
 *  - not for another filter, stride or pool, 5 channels, 48 outputs, a float32 filter, a residual, a convolution
 *    output read twice or a graph output, a pool with an FP8 feed, KILN_CONV_POOL=0; a per-channel QuantizeLinear
 *    stays apart (the convolution and pool still fuse);
 *  - malformed nodes (no pool attributes, a zero point without a scale, a 3-D input) are clean errors;
 *  - its op number is after every op engines already record. */
#include "core/numfmt.h"
#include "passes/passes.h"
#include "test.h"
#include "test_graph.h"
#include <stdlib.h>
#include <string.h>

typedef struct stem_case {
    int64_t H, W;      /* the image */
    int C, K, ks, s;   /* channels, outputs, filter size, stride */
    int pool_s;        /* the pool's stride */
    kiln_dtype wdt;    /* the filter's type */
    int quant;         /* 0: no QuantizeLinear, 1: uint8, 2: int8, 3: per channel */
    const char *act;   /* "" or "Relu" */
    bool residual, twice, graph_out, fp8_feed;
} stem_case;

static int64_t numel4(const int64_t *d) { return d[0] * d[1] * d[2] * d[3]; }

/* The stem as the builder leaves it; *last: the value the graph outputs */
static kiln_graph *stem_graph(const stem_case *k, unsigned long long *seed)
{
    kiln_graph *g = test_graph_onnx("stem");
    int64_t xd[4] = {2, k->C, k->H, k->W}, wd[4] = {k->K, k->C, k->ks, k->ks}, kd = k->K;
    int x = test_graph_input(g, "x", 4, xd);
    kiln_tensor wf = test_tensor_f32(4, wd, 0.2f, seed), w = wf;
    if (k->wdt != KILN_DT_FLOAT32) {
        w = test_tensor(k->wdt, 4, wd);
        (k->wdt == KILN_DT_FLOAT16 ? kiln__f32_to_f16_array : kiln__f32_to_bf16_array)(w.data, wf.data, numel4(wd));
        kiln__tensor_release(&wf);
    }
    int in[4] = {x, test_graph_const(g, "w", w), test_graph_const(g, "b", test_tensor_f32(1, &kd, 0.3f, seed)), -1};
    int y = test_graph_value(g, "y"), p = test_graph_value(g, "p");
    if (k->residual) {
        int64_t yd[4] = {2, k->K, (k->H - 1) / k->s + 1, (k->W - 1) / k->s + 1};
        in[3] = test_graph_const(g, "r", test_tensor_f32(4, yd, 1.0f, seed));
    }
    int cn = test_graph_node(g, KILN_OP_FusedConv, "conv", k->residual ? 4 : 3, in, y);
    int64_t st[2] = {k->s, k->s}, pads[4] = {k->ks / 2, k->ks / 2, k->ks / 2, k->ks / 2};
    CHECK(kiln__node_set_attr_ints(&g->nodes[cn], "strides", 2, st) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(&g->nodes[cn], "pads", 4, pads) == KILN_OK);
    if (k->act[0])
        CHECK(kiln__node_set_attr_s(&g->nodes[cn], "kiln_act", k->act) == KILN_OK);
    int pn = test_graph_node(g, KILN_OP_MaxPool, "pool", 1, &y, p);
    int64_t pk[2] = {3, 3}, ps[2] = {k->pool_s, k->pool_s}, pp[4] = {1, 1, 1, 1};
    CHECK(kiln__node_set_attr_ints(&g->nodes[pn], "kernel_shape", 2, pk) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(&g->nodes[pn], "strides", 2, ps) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(&g->nodes[pn], "pads", 4, pp) == KILN_OK);
    if (k->fp8_feed)
        CHECK(kiln__node_set_attr_f(&g->nodes[pn], KILN_ATTR_FP8_FEED, 0.01f) == KILN_OK);
    int out = p;
    if (k->quant) {
        out = test_graph_value(g, "q");
        kiln_tensor sc = test_scalar(KILN_DT_FLOAT32, 0.013), zp = test_scalar(k->quant == 2 ? KILN_DT_INT8 : KILN_DT_UINT8, k->quant == 2 ? -3 : 7);
        if (k->quant == 3) {   /* one scale per channel (axis 1) */
            kiln__tensor_release(&sc);
            kiln__tensor_release(&zp);
            sc = test_tensor_f32(1, &kd, 0.004f, seed);
            for (int i = 0; i < k->K; i++)
                ((float *)sc.data)[i] = 0.012f + fabsf(((float *)sc.data)[i]);
            zp = test_tensor(KILN_DT_UINT8, 1, &kd);
        }
        int qin[3] = {p, test_graph_const(g, "qs", sc), test_graph_const(g, "qz", zp)};
        test_graph_node(g, KILN_OP_QuantizeLinear, "quant", 3, qin, out);
    }
    test_graph_output(g, out);
    if (k->graph_out)
        test_graph_output(g, y);
    if (k->twice) {   /* a second reader of the convolution's output */
        int r = test_graph_value(g, "relu");
        test_graph_node(g, KILN_OP_Relu, "second", 1, &y, r);
        test_graph_output(g, r);
    }
    return g;
}

static int count_op(const kiln_graph *g, kiln_op op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead && g->nodes[i].op == op;
    return n;
}

/* Builds the case, runs it, fuses, runs again: the pass must fuse `want` layers (and the QuantizeLinear iff q_in)
 * and every output byte stay */
static void run_case(const stem_case *k, int want, bool q_in, const char *what)
{
    unsigned long long seed = 0x5eed + (unsigned long long)k->H * 131 + (unsigned long long)k->quant;
    kiln_graph *g = stem_graph(k, &seed);
    kiln_tensor x;
    test_graph_random_inputs(g, 1, &x, &seed);
    const kiln_tensor *feed[1] = {&x};
    kiln_run_env env = {.nthreads = 2};
    int nout = g->n_outputs;
    kiln_tensor before[3] = {{0}}, after[3] = {{0}};
    CHECK_MSG(kiln__exec_graph(g, NULL, feed, before, &env, 0) == KILN_OK, "%s: %s", what, kiln_last_error());
    int changed = -1;
    const kiln_pass_info pass = {"fuse-conv-pool", kiln__pass_fuse_conv_pool};
    CHECK_MSG(kiln__pass_run(&pass, g, NULL, &changed) == KILN_OK, "%s: %s", what, kiln_last_error());
    CHECK_MSG(changed == want && count_op(g, KILN_OP_FusedConvPool) == want, "%s: fused %d layers, expected %d", what,
              changed, want);
    if (want)
        CHECK_MSG(count_op(g, KILN_OP_QuantizeLinear) == (k->quant && !q_in) && count_op(g, KILN_OP_MaxPool) == 0 &&
                      count_op(g, KILN_OP_FusedConv) == 0,
                  "%s: the layers left beside the fused one", what);
    CHECK_MSG(kiln__exec_graph(g, NULL, feed, after, &env, 0) == KILN_OK, "%s: %s", what, kiln_last_error());
    for (int o = 0; o < nout; o++)
        CHECK_MSG(before[o].data && after[o].data && before[o].dtype == after[o].dtype &&
                      before[o].nbytes == after[o].nbytes && before[o].ndim == after[o].ndim &&
                      !memcmp(before[o].dims, after[o].dims, sizeof(int64_t) * (size_t)before[o].ndim) &&
                      !memcmp(before[o].data, after[o].data, before[o].nbytes),
                  "%s: output %d differs after the fusion", what, o);
    for (int o = 0; o < nout; o++) {
        kiln__tensor_release(&before[o]);
        kiln__tensor_release(&after[o]);
    }
    kiln__tensor_release(&x);
    kiln__graph_free(g);
}

static void test_fuses(void)
{
    const stem_case base = {.H = 37, .W = 45, .C = 3, .K = 64, .ks = 7, .s = 2, .pool_s = 2,
                            .wdt = KILN_DT_FLOAT16, .quant = 1, .act = "Relu"};
    run_case(&base, 1, true, "stem u8 37x45");
    stem_case k = base;
    k.quant = 2, k.H = 32, k.W = 29, k.act = "";
    run_case(&k, 1, true, "stem s8 32x29 no activation");
    k = base;
    k.quant = 0, k.C = 4, k.K = 128, k.wdt = KILN_DT_BFLOAT16, k.H = 9, k.W = 1;
    run_case(&k, 1, false, "stem bf16 4 channels 128 outputs 9x1, float output");
    k = base;
    k.C = 1, k.H = 64, k.W = 64;
    run_case(&k, 1, true, "stem one channel 64x64");
    k = base;
    k.quant = 3;
    run_case(&k, 1, false, "per-channel QuantizeLinear left apart");
}

static void test_declines(void)
{
    const stem_case base = {.H = 21, .W = 19, .C = 3, .K = 64, .ks = 7, .s = 2, .pool_s = 2,
                            .wdt = KILN_DT_FLOAT16, .quant = 1, .act = "Relu"};
    stem_case k = base;
    k.ks = 3;
    run_case(&k, 0, false, "3x3 filter");
    k = base;
    k.s = 1;
    run_case(&k, 0, false, "stride 1");
    k = base;
    k.pool_s = 1;
    run_case(&k, 0, false, "pool stride 1");
    k = base;
    k.C = 5;
    run_case(&k, 0, false, "5 channels");
    k = base;
    k.K = 48;
    run_case(&k, 0, false, "48 outputs");
    k = base;
    k.wdt = KILN_DT_FLOAT32;
    run_case(&k, 0, false, "float32 filter");
    k = base;
    k.act = "Sigmoid";
    run_case(&k, 0, false, "Sigmoid");
    k = base;
    k.residual = true;
    run_case(&k, 0, false, "residual");
    k = base;
    k.twice = true;
    run_case(&k, 0, false, "convolution output read twice");
    k = base;
    k.graph_out = true;
    run_case(&k, 0, false, "convolution output a graph output");
    k = base;
    k.fp8_feed = true;
    run_case(&k, 0, false, "pool with an FP8 feed");
    setenv("KILN_CONV_POOL", "0", 1);
    run_case(&base, 0, false, "KILN_CONV_POOL=0");
    unsetenv("KILN_CONV_POOL");
}

/* A FusedConvPool node made by hand: X [2, 3, 16, 16] (or 3-D), W [64, 3, 7, 7] FP16, then what the case gives */
static void malformed(bool pool_attrs, bool zp_only, bool three_d, const char *what)
{
    unsigned long long seed = 99;
    kiln_graph *g = test_graph_onnx("bad");
    int64_t xd[4] = {2, 3, 16, 16}, wd[4] = {64, 3, 7, 7};
    int x = test_graph_input(g, "x", three_d ? 3 : 4, three_d ? xd + 1 : xd);
    kiln_tensor wf = test_tensor_f32(4, wd, 0.2f, &seed), w = test_tensor(KILN_DT_FLOAT16, 4, wd);
    kiln__f32_to_f16_array(w.data, wf.data, numel4(wd));
    kiln__tensor_release(&wf);
    int in[5] = {x, test_graph_const(g, "w", w), -1, -1, test_graph_const(g, "z", test_scalar(KILN_DT_UINT8, 3))};
    int y = test_graph_value(g, "y");
    int n = test_graph_node(g, KILN_OP_FusedConvPool, "fcp", zp_only ? 5 : 2, in, y);
    int64_t st[2] = {2, 2}, pads[4] = {3, 3, 3, 3}, pk[2] = {3, 3}, pp[4] = {1, 1, 1, 1};
    CHECK(kiln__node_set_attr_ints(&g->nodes[n], "strides", 2, st) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(&g->nodes[n], "pads", 4, pads) == KILN_OK);
    if (pool_attrs) {
        CHECK(kiln__node_set_attr_ints(&g->nodes[n], "kiln_pool_kernel", 2, pk) == KILN_OK);
        CHECK(kiln__node_set_attr_ints(&g->nodes[n], "kiln_pool_strides", 2, st) == KILN_OK);
        CHECK(kiln__node_set_attr_ints(&g->nodes[n], "kiln_pool_pads", 4, pp) == KILN_OK);
    }
    test_graph_output(g, y);
    kiln_tensor xt = test_tensor_f32(three_d ? 3 : 4, three_d ? xd + 1 : xd, 1.0f, &seed);
    const kiln_tensor *feed[1] = {&xt};
    test_graph_expect(g, feed, three_d ? KILN_ERR_SHAPE : KILN_ERR_INVALID_ARG, what);
    kiln__tensor_release(&xt);
    kiln__graph_free(g);
}

int main(void)
{
    test_fuses();
    test_declines();
    malformed(false, false, false, "kiln_pool_kernel");
    malformed(true, true, false, "y_zero_point without y_scale");
    malformed(true, false, true, "rank 4");
    CHECK(KILN_OP_FusedConvPool > KILN_OP_QLinearConvSum && KILN_OP_FusedConvPool < KILN_OP_COUNT);
    return TEST_SUMMARY();
}
