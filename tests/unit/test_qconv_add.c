/* QLinearConvAdd (passes/p_qres.c, cpu/qadd.h kiln__qconv_add): an INT8 block's last convolution and its residual
 * QLinearAdd as one layer.
 *  - float residual blocks (Relu(Conv(Relu(Conv(X))) + S) with S the block input or a 1x1 shortcut conv computed
 *    after the block's last conv, between a first and a last conv (which int8 keeps float), the add's operands in either order, with and without the Relu after it, odd
 *    channel counts and sizes) built as --precision int8 --device cuda engines: the builder fuses each pair, and the
 *    engine's outputs on the CPU equal, byte for byte, those of the same build with KILN_QCONV_ADD=0 (two separate
 *    layers), with one and two threads (KILN_QCONV_ADD_ONCE=0: the two-rounding form). Kiln calibrated those models
 *    (implicit INT8), so the default build fuses each block with one rounding (kiln_res_once): its output must be no
 *    farther from FP32's than the two-rounding build's (where the shortcut is a 1x1 convolution the device build takes
 *    it in too: one QLinearConvSum, test_qconv_sum.c); a CPU engine (fuse-qconv-once: its blocks' pointwise last
 *    convolutions) fuses the same blocks, no farther from FP32 than the CPU engine with two roundings;
 *  - fuse-qconv-add picks one rounding only for a pair kiln quantized (kiln_q_auto on both), never for a model's own
 *    Q/DQ; a one-rounding node run directly gives every byte as the correctly rounded real sum (computed here in
 *    double), which two roundings miss;
 *  - a QLinearConvAdd node with a residual of another shape or type, none, no C_scale, an unknown activation, or a
 *    float32 convolution output, is a clean error (so is a one-rounding node with a non-linear activation, a float
 *    form or a bad R scale);
 *  - the op numbers engines record did not move (QLinearConvAdd was added after the others). */
#include "core/numfmt.h"
#include "engine/engine.h"
#include "passes/passes.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/qgemm.h"
#include "test_pool.h"
#include "kiln/kiln.h"
#include "runtime/exec.h"
#include "runtime/model.h"
#include "test.h"
#include "test_calib.h"
#include "test_engines.h"
#include "test_graph.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct blk_case {
    int64_t C, M, H, W;   /* block input channels = output channels C; the inner conv's M */
    bool shortcut_conv;   /* S = a 1x1 conv of X computed after the block's last conv, else S = X */
    bool res_first;       /* Add(S, Y) instead of Add(Y, S) */
    bool relu;            /* Relu after the add */
    bool float_tail;      /* the sum read by the last conv (kept float): the add stays float, between two
                           * DequantizeLinear and the Relu (ResNet-50's last block): kiln_res_float */
} blk_case;

static int conv_node(kiln_graph *g, const char *name, int x, int64_t cin, int64_t cout, int64_t k, int out,
                     unsigned long long *seed)
{
    char wn[64], bn[64];
    snprintf(wn, sizeof wn, "%s_W", name);
    snprintf(bn, sizeof bn, "%s_B", name);
    int64_t wd[4] = {cout, cin, k, k};
    int w = test_graph_const(g, wn, test_tensor_f32(4, wd, 0.5f, seed));
    int b = test_graph_const(g, bn, test_tensor_f32(1, &cout, 0.2f, seed));
    int in[3] = {x, w, b};
    int n = test_graph_node(g, KILN_OP_Conv, name, 3, in, out);
    int64_t pads[4] = {k / 2, k / 2, k / 2, k / 2};
    CHECK(kiln__node_set_attr_ints(&g->nodes[n], "pads", 4, pads) == KILN_OK);
    return n;
}

/* X -> Conv + Relu (the first layer, kept float) -> the block -> Conv + Relu -> Conv (the last, kept float) */
static kiln_model_t blk_model(const blk_case *c, unsigned long long *seed)
{
    kiln_graph *g = test_graph_onnx("qconv_add");
    int64_t xd[4] = {1, c->C, c->H, c->W};
    int x0 = test_graph_input(g, "X", 4, xd);
    int h0 = test_graph_value(g, "h0"), x = test_graph_value(g, "h");
    conv_node(g, "conv0", x0, c->C, c->C, 3, h0, seed);
    test_graph_node(g, KILN_OP_Relu, "relu0", 1, &h0, x);
    int a = test_graph_value(g, "a"), ar = test_graph_value(g, "ar"), y = test_graph_value(g, "y");
    int s = c->shortcut_conv ? test_graph_value(g, "s") : x, sum = test_graph_value(g, "sum");
    int bo = c->relu ? test_graph_value(g, "bo") : sum, out = test_graph_value(g, "out");
    conv_node(g, "conv1", x, c->C, c->M, 3, a, seed);
    test_graph_node(g, KILN_OP_Relu, "relu1", 1, &a, ar);
    conv_node(g, "conv2", ar, c->M, c->C, 1, y, seed);
    if (c->shortcut_conv)   /* after conv2 in node order: the fused layer must take conv2's place at the add */
        conv_node(g, "shortcut", x, c->C, c->C, 1, s, seed);
    int ain[2] = {c->res_first ? s : y, c->res_first ? y : s};
    test_graph_node(g, KILN_OP_Add, "add", 2, ain, sum);
    if (c->relu)
        test_graph_node(g, KILN_OP_Relu, "relu2", 1, &sum, bo);
    int nr = bo;
    if (!c->float_tail) {   /* an int8 reader: the add quantized */
        int nx = test_graph_value(g, "nx");
        nr = test_graph_value(g, "nr");
        conv_node(g, "conv_next", bo, c->C, c->C, 3, nx, seed);
        test_graph_node(g, KILN_OP_Relu, "relu_next", 1, &nx, nr);
    }
    conv_node(g, "conv_last", nr, c->C, c->C, 1, out, seed);
    test_graph_output(g, out);
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    return m;
}

static kiln_status build(kiln_model_t m, const char *cdir, kiln_device dev, kiln_engine_t *e)
{
    kiln_calib_options co = {.data_dir = cdir, .method = KILN_CALIB_MINMAX};
    kiln_build_options o = {.no_tactics = true, .precision = "int8", .calib = &co, .device = dev};
    kiln_status st = kiln_build(m, &o, e);
    kiln_free(o.precision_report);   /* the kept-float layers' lines */
    return st;
}

/* QLinearConvAdd layers of e with kiln_res_once = 1 */
static int count_once(kiln_engine_t e)
{
    int n = 0;
    for (int i = 0; e && i < e->g->n_nodes; i++)
        n += !e->g->nodes[i].dead && e->g->nodes[i].op == KILN_OP_QLinearConvAdd &&
             kiln__attr_i(&e->g->nodes[i], "kiln_res_once", 0) == 1;
    return n;
}

static void blk_run(const blk_case *c, unsigned long long *seed)
{
    kiln_model_t m = blk_model(c, seed);
    char cdir[] = "/tmp/kiln_qconv_add_XXXXXX";
    CHECK(mkdtemp(cdir) != NULL);
    kiln_engine_t e32 = NULL, once = NULL, fused = NULL, apart = NULL, cpu = NULL, cpu2 = NULL;
    kiln_build_options o32 = {.no_tactics = true};
    CHECK_MSG(kiln_build(m, &o32, &e32) == KILN_OK, "%s", kiln_last_error());
    CHECK(e32 && test_calib_samples(e32, NULL, cdir, 4, 100) == KILN_OK);
    /* kiln calibrated the model (implicit INT8): its blocks fuse with one rounding, unless KILN_QCONV_ADD_ONCE=0 */
    CHECK_MSG(build(m, cdir, KILN_DEVICE_CUDA, &once) == KILN_OK, "once build: %s", kiln_last_error());
    setenv("KILN_QCONV_ADD_ONCE", "0", 1);
    CHECK_MSG(build(m, cdir, KILN_DEVICE_CUDA, &fused) == KILN_OK, "fused build: %s", kiln_last_error());
    unsetenv("KILN_QCONV_ADD_ONCE");
    setenv("KILN_QCONV_ADD", "0", 1);
    CHECK_MSG(build(m, cdir, KILN_DEVICE_CUDA, &apart) == KILN_OK, "apart build: %s", kiln_last_error());
    unsetenv("KILN_QCONV_ADD");
    CHECK_MSG(build(m, cdir, KILN_DEVICE_CPU, &cpu) == KILN_OK, "cpu build: %s", kiln_last_error());
    setenv("KILN_QCONV_ADD_ONCE", "0", 1);
    CHECK_MSG(build(m, cdir, KILN_DEVICE_CPU, &cpu2) == KILN_OK, "cpu build (two roundings): %s", kiln_last_error());
    unsetenv("KILN_QCONV_ADD_ONCE");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cdir);
    CHECK(system(cmd) == 0);
    /* the float tail: no QLinearAdd in any build; fused when the shortcut is an INT8 conv's output (its
     * DequantizeLinear read as bytes), not when it is the block input X, a float value (the first layer's output) */
    kiln_op add = c->float_tail ? KILN_OP_Add : KILN_OP_QLinearAdd;
    int want = c->float_tail && !c->shortcut_conv ? 0 : 1;
    CHECK_MSG(test_engine_count_op(fused, KILN_OP_QLinearConvAdd) == want && test_engine_count_op(fused, add) == 1 - want &&
                  test_engine_count_op(fused, KILN_OP_QLinearAdd) == 0,
              "C=%lld M=%lld float_tail %d: %d QLinearConvAdd, %d Add, %d QLinearAdd", (long long)c->C, (long long)c->M,
              c->float_tail, test_engine_count_op(fused, KILN_OP_QLinearConvAdd), test_engine_count_op(fused, KILN_OP_Add),
              test_engine_count_op(fused, KILN_OP_QLinearAdd));
    CHECK(test_engine_count_op(apart, KILN_OP_QLinearConvAdd) == 0 && test_engine_count_op(apart, add) == 1);
    /* a device engine's one-rounding block whose shortcut is a 1x1 convolution takes it in too (QLinearConvSum,
     * test_qconv_sum.c); CPU engines keep the QLinearConvAdd */
    int sums = !c->float_tail && c->shortcut_conv;
    CHECK_MSG(count_once(once) == (c->float_tail ? 0 : 1) - sums && test_engine_count_op(once, KILN_OP_QLinearConvSum) == sums &&
                  count_once(fused) == 0 && test_engine_count_op(fused, KILN_OP_QLinearConvSum) == 0 &&
                  count_once(cpu) == (c->float_tail ? 0 : 1) && test_engine_count_op(cpu, KILN_OP_QLinearConvSum) == 0 &&
                  count_once(cpu2) == 0,
              "C=%lld M=%lld float_tail %d: %d / %d / %d one-rounding layers (once, two roundings, cpu), %d QLinearConvSum",
              (long long)c->C, (long long)c->M, c->float_tail, count_once(once), count_once(fused), count_once(cpu),
              test_engine_count_op(once, KILN_OP_QLinearConvSum));
    if (want && c->float_tail)   /* the Relu and both DequantizeLinear absorbed */
        CHECK_MSG(test_engine_count_op(fused, KILN_OP_Relu) == 0 &&
                      test_engine_count_op(apart, KILN_OP_DequantizeLinear) ==
                          test_engine_count_op(fused, KILN_OP_DequantizeLinear) + 2,
                  "float tail: %d Relu, DequantizeLinear %d fused / %d apart", test_engine_count_op(fused, KILN_OP_Relu),
                  test_engine_count_op(fused, KILN_OP_DequantizeLinear), test_engine_count_op(apart, KILN_OP_DequantizeLinear));
    kiln_tensor x;
    int64_t xd[4] = {1, c->C, c->H, c->W};
    CHECK(kiln__tensor_alloc(&x, KILN_DT_FLOAT32, 4, xd) == KILN_OK);
    for (int64_t i = 0; i < kiln_tensor_numel(&x); i++)
        ((float *)x.data)[i] = test_randf(seed) * 2.0f;
    for (int nt = 1; fused && apart && nt <= 2; nt++) {
        kiln_tensor a, b;
        test_engine_run(fused, "X", &x, nt, &a);
        test_engine_run(apart, "X", &x, nt, &b);
        bool same = a.data && b.data && a.dtype == b.dtype && a.nbytes == b.nbytes && !memcmp(a.data, b.data, a.nbytes);
        double mx = 0;
        for (int64_t i = 0; b.data && b.dtype == KILN_DT_FLOAT32 && i < kiln_tensor_numel(&b); i++)
            mx = fmax(mx, fabs(((float *)b.data)[i]));
        CHECK_MSG(same && mx > 0, "C=%lld M=%lld %lldx%lld shortcut_conv %d res_first %d relu %d threads %d: "
                  "fused and separate layers differ (or all zero)", (long long)c->C, (long long)c->M,
                  (long long)c->H, (long long)c->W, c->shortcut_conv, c->res_first, c->relu, nt);
        /* one rounding: the model's output no farther from FP32's than with two (mean absolute error, 2% slack for
         * the errors' own noise; a wrong scale or zero point in the fused layer moves it by far more) */
        kiln_tensor o, f;
        test_engine_run(once, "X", &x, nt, &o);
        test_engine_run(e32, "X", &x, nt, &f);
        double eo = 0, eb = 0;
        int64_t ne = kiln_tensor_numel(&b);
        bool sized = o.data && f.data && o.nbytes == b.nbytes && f.nbytes == b.nbytes;
        for (int64_t i = 0; sized && i < ne; i++) {
            eo += fabs((double)((float *)o.data)[i] - ((float *)f.data)[i]);
            eb += fabs((double)((float *)b.data)[i] - ((float *)f.data)[i]);
        }
        CHECK_MSG(sized && eo <= 1.02 * eb + 1e-6 * (double)ne,
                  "C=%lld M=%lld shortcut_conv %d res_first %d relu %d: mean error to FP32 %g with one rounding, %g with two",
                  (long long)c->C, (long long)c->M, c->shortcut_conv, c->res_first, c->relu, eo / (double)ne,
                  eb / (double)ne);
        kiln__tensor_release(&f);
        /* the CPU engine fuses the same blocks with one rounding (its pointwise convolutions): no farther from FP32
         * than the CPU engine with two (its float layers are the same kernels in both) */
        kiln_tensor pc, p2;
        test_engine_run(cpu, "X", &x, nt, &pc);
        test_engine_run(cpu2, "X", &x, nt, &p2);
        test_engine_run(e32, "X", &x, nt, &f);
        double ec = 0, e2 = 0;
        sized = pc.data && p2.data && f.data && pc.nbytes == b.nbytes && p2.nbytes == b.nbytes && f.nbytes == b.nbytes;
        for (int64_t i = 0; sized && i < ne; i++) {
            ec += fabs((double)((float *)pc.data)[i] - ((float *)f.data)[i]);
            e2 += fabs((double)((float *)p2.data)[i] - ((float *)f.data)[i]);
        }
        CHECK_MSG(sized && ec <= 1.02 * e2 + 1e-6 * (double)ne,
                  "C=%lld M=%lld CPU engines: mean error to FP32 %g with one rounding, %g with two", (long long)c->C,
                  (long long)c->M, ec / (double)ne, e2 / (double)ne);
        kiln__tensor_release(&f);
        kiln__tensor_release(&pc);
        kiln__tensor_release(&p2);
        kiln__tensor_release(&o);
        kiln__tensor_release(&a);
        kiln__tensor_release(&b);
    }
    kiln__tensor_release(&x);
    kiln_engine_free(e32);
    kiln_engine_free(once);
    kiln_engine_free(fused);
    kiln_engine_free(apart);
    kiln_engine_free(cpu);
    kiln_engine_free(cpu2);
    kiln_model_free(m);
}


/* QLinearConv's inputs 0-7 of a test node: x (a graph input of dims xd), scales 0.1 / 0.01 / 0.2, zero points 0, w */
static void qconv_inputs(kiln_graph *g, const int64_t *xd, kiln_tensor w, int *in)
{
    in[0] = test_graph_input(g, "x", 4, xd);
    in[1] = test_graph_const(g, "xs", test_scalar(KILN_DT_FLOAT32, 0.1));
    in[2] = test_graph_const(g, "xz", test_scalar(KILN_DT_UINT8, 0));
    in[3] = test_graph_const(g, "w", w);
    in[4] = test_graph_const(g, "ws", test_scalar(KILN_DT_FLOAT32, 0.01));
    in[5] = test_graph_const(g, "wz", test_scalar(KILN_DT_INT8, 0));
    in[6] = test_graph_const(g, "ys", test_scalar(KILN_DT_FLOAT32, 0.2));
    in[7] = test_graph_const(g, "yz", test_scalar(KILN_DT_INT8, 0));
}

/* A QLinearConvAdd node run directly: R of dims rd and dtype rdt (the convolution gives [1, 8, 5, 5]); float_out:
 * kiln_out_float; input `empty` left empty (0: none); res_act: kiln_res_act (NULL: none) */
static bool bad_res_float;   /* bad_case_ex's node has kiln_res_float = 1 (the float tail) */
static bool bad_once;        /* kiln_res_once = 1 (one rounding: 12 inputs, res_act as kiln_act) */
static int bad_ks = 3;       /* the filter's size (1: a pointwise layer, which the fast kernel takes; pads 0) */

static void bad_case_ex(const int64_t *rd, kiln_dtype rdt, bool float_out, int empty, const char *res_act,
                        kiln_status want, const char *what)
{
    unsigned long long seed = 7;
    kiln_graph *g = kiln__graph_new(NULL);
    int64_t xd[4] = {1, 4, 5, 5}, wd[4] = {8, 4, bad_ks, bad_ks};
    kiln_tensor xt, wt, rt;
    CHECK(kiln__tensor_alloc(&xt, KILN_DT_UINT8, 4, xd) == KILN_OK);
    CHECK(kiln__tensor_alloc(&wt, KILN_DT_INT8, 4, wd) == KILN_OK);
    CHECK(kiln__tensor_alloc(&rt, rdt, 4, rd) == KILN_OK);
    for (int64_t i = 0; i < kiln_tensor_numel(&wt); i++)
        ((int8_t *)wt.data)[i] = (int8_t)(test_randf(&seed) * 100);
    int in[13];
    qconv_inputs(g, xd, wt, in);
    in[8] = -1;
    in[9] = test_graph_input(g, "r", 4, rd);
    in[10] = test_graph_const(g, "rs", test_scalar(KILN_DT_FLOAT32, 0.3));
    in[11] = test_graph_const(g, "rz", test_scalar(KILN_DT_UINT8, 0));
    in[12] = test_graph_const(g, "cs", test_scalar(KILN_DT_FLOAT32, 0.4));
    if (empty)
        in[empty] = -1;
    int out = test_graph_value(g, "c");
    int n = test_graph_node(g, KILN_OP_QLinearConvAdd, "qca", bad_once ? 12 : 13, in, out);
    if (res_act)
        CHECK(kiln__node_set_attr_s(&g->nodes[n], bad_once ? "kiln_act" : "kiln_res_act", res_act) == KILN_OK);
    if (bad_once)
        CHECK(kiln__node_set_attr_i(&g->nodes[n], "kiln_res_once", 1) == KILN_OK);
    int64_t pads[4] = {bad_ks / 2, bad_ks / 2, bad_ks / 2, bad_ks / 2};
    CHECK(kiln__node_set_attr_ints(&g->nodes[n], "pads", 4, pads) == KILN_OK);
    if (float_out)
        CHECK(kiln__node_set_attr_i(&g->nodes[n], "kiln_out_float", 1) == KILN_OK);
    if (bad_res_float)
        CHECK(kiln__node_set_attr_i(&g->nodes[n], "kiln_res_float", 1) == KILN_OK);
    test_graph_output(g, out);
    const kiln_tensor *feed[2] = {&xt, &rt};
    test_graph_expect(g, feed, want, what);
    kiln__tensor_release(&xt);
    kiln__tensor_release(&rt);
    kiln__graph_free(g);
}

static void bad_case(const int64_t *rd, bool float_out, kiln_status want, const char *what)
{
    bad_case_ex(rd, KILN_DT_UINT8, float_out, 0, NULL, want, what);
}

/* One rounding (kiln_res_once) run directly: x u8 [2, 4, 5, 6], a 3x3 padded convolution to 8 channels (per-channel
 * weight scales, a bias), R of type rdt (zero point rz), C of type cdt (zero point cz), activation act ("" or
 * "Relu"). Every byte must be the real sum's correctly rounded value, computed here in double from the integers (the
 * float32 multipliers are within a few 1e-7 of it: elements within 1e-3 of a tie may go either way). The same
 * operands through two roundings (conv requantized to y_scale first: the form explicit Q/DQ models keep) miss it in
 * some elements -- what one rounding is for. */
/* Node n of g (a QLinearConvAdd) run by the fastest registered kernel (fast) or the reference, on 2 threads, with
 * inputs 0 and 9 fed (x, r) and the rest the graph's constants: *out (zeroed first) gets the output */
static kiln_status run_node(const kiln_graph *g, int n, const kiln_tensor *x, const kiln_tensor *r, bool fast,
                            kiln_tensor *out)
{
    const kiln_node *nd = &g->nodes[n];
    const kiln_tensor *in[14] = {0};
    for (int i = 0; i < nd->n_in && i < 14; i++)
        in[i] = nd->in[i] < 0 ? NULL : i == 0 ? x : i == 9 ? r : g->values[nd->in[i]].init;
    memset(out, 0, sizeof *out);
    kiln_tensor *o[1] = {out};
    kiln_kctx c = {.node = nd, .n_in = nd->n_in, .in = in, .n_out = 1, .out = o, .pool = test_pool(2), .nthreads = 2};
    return (fast ? kiln__ref_kernel(KILN_OP_QLinearConvAdd) : kiln__cpu_ref_kernel(KILN_OP_QLinearConvAdd))(&c);
}

static void once_case(int ks, kiln_dtype rdt, int rz, kiln_dtype cdt, int cz, const char *act, unsigned long long *seed)
{
    enum { N = 2, C = 4, H = 5, W = 6, M = 8 };
    const float xs = 0.1f, cs = 0.4f, rs = 0.3f, ys = 0.35f;
    int64_t xd[4] = {N, C, H, W}, wd[4] = {M, C, ks, ks}, od[4] = {N, M, H, W}, md = M;
    kiln_tensor xt, wt, wst, bt, rt;
    CHECK(kiln__tensor_alloc(&xt, KILN_DT_UINT8, 4, xd) == KILN_OK);
    CHECK(kiln__tensor_alloc(&wt, KILN_DT_INT8, 4, wd) == KILN_OK);
    CHECK(kiln__tensor_alloc(&wst, KILN_DT_FLOAT32, 1, &md) == KILN_OK);
    CHECK(kiln__tensor_alloc(&bt, KILN_DT_INT32, 1, &md) == KILN_OK);
    CHECK(kiln__tensor_alloc(&rt, rdt, 4, od) == KILN_OK);
    uint8_t *x = xt.data;
    int8_t *w = wt.data;
    float *ws = wst.data;
    int32_t *bias = bt.data;
    for (int64_t i = 0; i < kiln_tensor_numel(&xt); i++)
        x[i] = (uint8_t)(test_randf(seed) * 127.5f + 127.5f);
    for (int64_t i = 0; i < kiln_tensor_numel(&wt); i++)
        w[i] = (int8_t)(test_randf(seed) * 127.0f);
    for (int m = 0; m < M; m++) {
        ws[m] = 0.0015f + 0.0005f * (float)m;
        bias[m] = (int32_t)(test_randf(seed) * 3000.0f);
    }
    for (int64_t i = 0; i < kiln_tensor_numel(&rt); i++)
        kiln__set_i64(rdt, rt.data, i, (int64_t)(test_randf(seed) * 127.5f + (rdt == KILN_DT_UINT8 ? 127.5f : 0.0f)));
    kiln_tensor got[2] = {{0}};
    for (int two = 0; two < 2; two++) {
        kiln_graph *g = kiln__graph_new(NULL);
        int in[14];
        in[0] = test_graph_input(g, "x", 4, xd);
        in[1] = test_graph_const(g, "xs", test_scalar(KILN_DT_FLOAT32, xs));
        in[2] = test_graph_const(g, "xz", test_scalar(KILN_DT_UINT8, 0));
        kiln_tensor wc = {0}, wsc = {0}, bc = {0};
        CHECK(kiln__tensor_clone(&wc, &wt) == KILN_OK);
        CHECK(kiln__tensor_clone(&wsc, &wst) == KILN_OK);
        CHECK(kiln__tensor_clone(&bc, &bt) == KILN_OK);
        in[3] = test_graph_const(g, "w", wc);
        in[4] = test_graph_const(g, "ws", wsc);
        in[5] = -1;
        /* one rounding: C's scale and zero point at 6, 7; two: Y's (int8, 0), C's at 12, 13 */
        in[6] = test_graph_const(g, "ys", test_scalar(KILN_DT_FLOAT32, two ? ys : cs));
        in[7] = test_graph_const(g, "yz", two ? test_scalar(KILN_DT_INT8, 0) : test_scalar(cdt, cz));
        in[8] = test_graph_const(g, "b", bc);
        in[9] = test_graph_input(g, "r", 4, od);
        in[10] = test_graph_const(g, "rs", test_scalar(KILN_DT_FLOAT32, rs));
        in[11] = test_graph_const(g, "rz", test_scalar(rdt, rz));
        in[12] = test_graph_const(g, "cs", test_scalar(KILN_DT_FLOAT32, cs));
        in[13] = test_graph_const(g, "cz", test_scalar(cdt, cz));
        int out = test_graph_value(g, "c");
        int n = test_graph_node(g, KILN_OP_QLinearConvAdd, "qca", two ? 14 : 12, in, out);
        int64_t pads[4] = {ks / 2, ks / 2, ks / 2, ks / 2};
        CHECK(kiln__node_set_attr_ints(&g->nodes[n], "pads", 4, pads) == KILN_OK);
        if (!two)
            CHECK(kiln__node_set_attr_i(&g->nodes[n], "kiln_res_once", 1) == KILN_OK);
        if (act[0])
            CHECK(kiln__node_set_attr_s(&g->nodes[n], two ? "kiln_res_act" : "kiln_act", act) == KILN_OK);
        test_graph_output(g, out);
        const kiln_tensor *feed[2] = {&xt, &rt};
        kiln_run_env env = {.nthreads = 2};
        CHECK_MSG(kiln__exec_graph(g, NULL, feed, &got[two], &env, 0) == KILN_OK, "%s", kiln_last_error());
        if (!two) {   /* the fastest kernel (a 1x1 layer: the INT8 GEMM's epilogue adds R) and the reference agree */
            kiln_tensor f, r;
            CHECK_MSG(run_node(g, n, &xt, &rt, true, &f) == KILN_OK && run_node(g, n, &xt, &rt, false, &r) == KILN_OK,
                      "%s", kiln_last_error());
            CHECK_MSG(f.data && r.data && f.nbytes == r.nbytes && !memcmp(f.data, r.data, f.nbytes) &&
                          f.nbytes == got[0].nbytes && !memcmp(f.data, got[0].data, f.nbytes),
                      "one rounding %dx%d: the fastest kernel and the reference differ", ks, ks);
            kiln__tensor_release(&f);
            kiln__tensor_release(&r);
        }
        kiln__graph_free(g);
    }
    int lo = cdt == KILN_DT_UINT8 ? 0 : -128, hi = cdt == KILN_DT_UINT8 ? 255 : 127;
    int64_t miss[2] = {0, 0}, ties = 0, n = kiln_tensor_numel(&rt);
    for (int64_t i = 0; got[0].data && got[1].data && got[0].dtype == cdt && got[1].dtype == cdt && i < n; i++) {
        int64_t wo = i % W, ho = i / W % H, m = i / (W * H) % M, b = i / (W * H * M);
        int64_t acc = bias[m];
        for (int c = 0; c < C; c++)
            for (int kh = 0; kh < ks; kh++)
                for (int kw = 0; kw < ks; kw++) {
                    int64_t ih = ho + kh - ks / 2, iw = wo + kw - ks / 2;
                    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                        acc += (int64_t)x[((b * C + c) * H + ih) * W + iw] * w[((m * C + c) * ks + kh) * ks + kw];
                }
        double v = (double)acc * xs * ws[m] / cs + (double)(kiln__get_i64(rdt, rt.data, i) - rz) * rs / cs;
        if (act[0])
            v = fmax(v, 0.0);
        double fl = floor(v);
        bool tie = fabs(v - fl - 0.5) < 1e-3;
        ties += tie;
        int64_t want = (int64_t)nearbyint(v) + cz;
        want = want < lo ? lo : want > hi ? hi : want;
        for (int k = 0; k < 2; k++) {
            int64_t q = kiln__get_i64(cdt, got[k].data, i);
            miss[k] += tie ? llabs(q - want) > 1 : q != want;
        }
    }
    CHECK_MSG(got[0].data && got[0].dtype == cdt && miss[0] == 0,
              "one rounding (R %s, C %s, %s): %lld of %lld bytes not the sum's rounding (%lld near ties)",
              kiln_dtype_name(rdt), kiln_dtype_name(cdt), act[0] ? act : "none", (long long)miss[0], (long long)n,
              (long long)ties);
    CHECK_MSG(miss[1] > 0, "two roundings matched the exact rounding everywhere: the check would not see a change");
    kiln__tensor_release(&got[0]);
    kiln__tensor_release(&got[1]);
    kiln__tensor_release(&xt);
    kiln__tensor_release(&wt);
    kiln__tensor_release(&wst);
    kiln__tensor_release(&bt);
    kiln__tensor_release(&rt);
}

/* fuse-qconv-add's choice on a QLinearConv -> QLinearAdd [Relu] pair (as fuse-qdq leaves them): one rounding only
 * where kiln quantized both layers (kiln_q_auto on each: implicit INT8) and the convolution has no activation, else the
 * two roundings explicit Q/DQ models asked for */
static void pass_case(bool auto_conv, bool auto_add, const char *conv_act, bool want_once)
{
    kiln_graph *g = test_graph_onnx("qres_pass");
    int64_t xd[4] = {1, 4, 5, 5}, wd[4] = {8, 4, 1, 1}, yd[4] = {1, 8, 5, 5};
    kiln_tensor wt;
    CHECK(kiln__tensor_alloc(&wt, KILN_DT_INT8, 4, wd) == KILN_OK);
    memset(wt.data, 3, wt.nbytes);
    int in[9], y = test_graph_value(g, "y"), c = test_graph_value(g, "c");
    qconv_inputs(g, xd, wt, in);
    int cn = test_graph_node(g, KILN_OP_QLinearConv, "conv", 8, in, y);
    int ain[8] = {y, in[6], in[7], test_graph_input(g, "r", 4, yd), test_graph_const(g, "rs", test_scalar(KILN_DT_FLOAT32, 0.3)),
                  test_graph_const(g, "rz", test_scalar(KILN_DT_UINT8, 0)), test_graph_const(g, "cs", test_scalar(KILN_DT_FLOAT32, 0.4)),
                  test_graph_const(g, "cz", test_scalar(KILN_DT_UINT8, 0))};
    int an = test_graph_node(g, KILN_OP_QLinearAdd, "add", 8, ain, c);
    CHECK(kiln__node_set_attr_s(&g->nodes[an], "kiln_act", "Relu") == KILN_OK);
    if (auto_conv)
        CHECK(kiln__node_set_attr_i(&g->nodes[cn], KILN_ATTR_Q_AUTO, 1) == KILN_OK);
    if (auto_add)
        CHECK(kiln__node_set_attr_i(&g->nodes[an], KILN_ATTR_Q_AUTO, 1) == KILN_OK);
    if (conv_act)
        CHECK(kiln__node_set_attr_s(&g->nodes[cn], "kiln_act", conv_act) == KILN_OK);
    test_graph_output(g, c);
    int changed = 0;
    const kiln_pass_info pass = {"fuse-qconv-add", kiln__pass_fuse_qconv_add};
    CHECK_MSG(kiln__pass_run(&pass, g, NULL, &changed) == KILN_OK && changed == 1, "%s", kiln_last_error());
    const kiln_node *f = NULL;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == KILN_OP_QLinearConvAdd)
            f = &g->nodes[i];
    const char *fa = f ? kiln__attr_s(f, "kiln_act", NULL) : NULL, *ra = f ? kiln__attr_s(f, "kiln_res_act", NULL) : NULL;
    bool once = f && kiln__attr_i(f, "kiln_res_once", 0) == 1;
    CHECK_MSG(f && once == want_once, "q_auto conv %d add %d, conv act %s: one rounding %d, expected %d", auto_conv,
              auto_add, conv_act ? conv_act : "none", once, want_once);
    if (f && want_once)   /* C's quantization at 6, 7, the add's Relu as the layer's activation */
        CHECK(f->n_in == 12 && f->in[6] == ain[6] && f->in[7] == ain[7] && fa && !strcmp(fa, "Relu") && !ra);
    else if (f)
        CHECK(f->n_in == 14 && f->in[6] == in[6] && f->in[12] == ain[6] && ra && !strcmp(ra, "Relu"));
    kiln__graph_free(g);
}

int main(void)
{
    unsigned long long seed = 0x9E3779B97F4A7C15ull;
    /* engines record their layers' op numbers: ops are added at the end of ops.def (an op inserted before these
     * renumbered them, and int8 engines built before no longer loaded) */
    CHECK_MSG(KILN_OP_QGemm == 169 && KILN_OP_QLinearAdd == 170 && KILN_OP_QLinearConvAdd == 171,
              "op numbers moved: QGemm %d, QLinearAdd %d, QLinearConvAdd %d", KILN_OP_QGemm, KILN_OP_QLinearAdd,
              KILN_OP_QLinearConvAdd);
    static const blk_case cases[] = {
        {16, 8, 7, 9, false, false, true, false}, {16, 8, 7, 9, false, true, false, false},
        {24, 12, 6, 5, true, false, true, false}, {24, 12, 6, 5, true, true, true, false},
        {5, 7, 4, 11, false, false, true, false}, {33, 17, 9, 3, true, false, false, false},
        {16, 8, 7, 9, false, false, true, true},  {24, 12, 6, 5, true, true, false, true},
        {40, 12, 5, 7, true, false, true, true},  {5, 7, 4, 11, false, true, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        blk_run(&cases[i], &seed);
    pass_case(true, true, NULL, true);
    pass_case(false, false, NULL, false);   /* explicit Q/DQ */
    pass_case(true, false, NULL, false);
    pass_case(false, true, NULL, false);
    pass_case(true, true, "Relu", false);   /* the convolution's own activation: not one rounding's form */
    setenv("KILN_QCONV_ADD_ONCE", "0", 1);
    pass_case(true, true, NULL, false);
    unsetenv("KILN_QCONV_ADD_ONCE");
    for (int ks = 1; ks <= 3; ks += 2) {
        once_case(ks, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, "Relu", &seed);
        once_case(ks, KILN_DT_INT8, -5, KILN_DT_INT8, 3, "", &seed);
        once_case(ks, KILN_DT_UINT8, 9, KILN_DT_INT8, -7, "Relu", &seed);
    }
    /* the GEMM's other tiles (AVX2: its residual epilogue is the portable one; portable C) */
    for (int cap = 1; cap >= 0; cap--) {
        kiln__qgemm_set_isa_cap(cap);
        once_case(1, KILN_DT_INT8, -5, KILN_DT_UINT8, 4, "Relu", &seed);
    }
    kiln__qgemm_set_isa_cap(3);
    bad_case((const int64_t[]){1, 8, 5, 4}, false, KILN_ERR_SHAPE, "R must have the convolution output's shape");
    bad_case((const int64_t[]){1, 8, 5, 5}, true, KILN_ERR_INVALID_ARG, "must have a quantized output");
    static const int64_t y[4] = {1, 8, 5, 5};
    bad_case_ex(y, KILN_DT_FLOAT32, false, 0, NULL, KILN_ERR_DTYPE, "R must be uint8/int8");
    bad_case_ex(y, KILN_DT_UINT8, false, 12, NULL, KILN_ERR_INVALID_ARG, "missing C_scale");
    bad_case_ex(y, KILN_DT_UINT8, false, 9, NULL, KILN_ERR_DTYPE, "R must be uint8/int8");
    bad_case_ex(y, KILN_DT_UINT8, false, 0, "Bogus", KILN_ERR_INVALID_ARG, "unknown kiln_res_act activation");
    /* the float tail's node: clean errors too */
    bad_res_float = true;
    bad_case_ex(y, KILN_DT_FLOAT32, false, 0, NULL, KILN_ERR_DTYPE, "R must be uint8/int8");
    bad_case_ex(y, KILN_DT_UINT8, false, 0, "Clip", KILN_ERR_UNSUPPORTED, "activation is none or Relu");
    bad_case_ex(y, KILN_DT_UINT8, false, 10, NULL, KILN_ERR_INVALID_ARG, "missing B_scale");
    bad_case((const int64_t[]){1, 8, 5, 4}, false, KILN_ERR_SHAPE, "R must have the convolution output's shape");
    bad_case((const int64_t[]){1, 8, 5, 5}, true, KILN_ERR_INVALID_ARG, "must have a quantized output");
    bad_res_float = false;
    /* the one-rounding node: clean errors too */
    bad_once = true;
    bad_case_ex(y, KILN_DT_FLOAT32, false, 0, NULL, KILN_ERR_SHAPE, "R must be uint8/int8");
    bad_case_ex(y, KILN_DT_UINT8, false, 0, "Sigmoid", KILN_ERR_UNSUPPORTED, "needs an 8-bit output and a linear");
    bad_case_ex(y, KILN_DT_UINT8, false, 10, NULL, KILN_ERR_INVALID_ARG, "R_scale must be a float32 scalar");
    bad_case_ex(y, KILN_DT_UINT8, false, 9, NULL, KILN_ERR_SHAPE, "R must be uint8/int8");
    bad_case((const int64_t[]){1, 8, 5, 4}, false, KILN_ERR_SHAPE, "R must be uint8/int8 of the convolution output's shape");
    bad_case((const int64_t[]){1, 8, 5, 5}, true, KILN_ERR_INVALID_ARG, "a quantized output (no float form)");
    bad_res_float = true;
    bad_case((const int64_t[]){1, 8, 5, 5}, false, KILN_ERR_INVALID_ARG, "(no float form)");
    bad_res_float = false;
    /* a pointwise one (the fast kernel's GEMM takes it): the same clean errors */
    bad_ks = 1;
    bad_case((const int64_t[]){1, 8, 5, 5}, true, KILN_ERR_INVALID_ARG, "a quantized output (no float form)");
    bad_case((const int64_t[]){1, 8, 5, 4}, false, KILN_ERR_SHAPE, "R must be uint8/int8 of the convolution output's shape");
    bad_case_ex(y, KILN_DT_UINT8, false, 10, NULL, KILN_ERR_INVALID_ARG, "R_scale must be a float32 scalar");
    bad_case_ex(y, KILN_DT_UINT8, false, 6, NULL, KILN_ERR_INVALID_ARG, "missing input");
    bad_case_ex(y, KILN_DT_UINT8, true, 6, NULL, KILN_ERR_INVALID_ARG, "missing input");
    bad_case_ex(y, KILN_DT_UINT8, false, 0, "Sigmoid", KILN_ERR_UNSUPPORTED, "needs an 8-bit output and a linear");
    bad_ks = 3;
    bad_once = false;
    return TEST_SUMMARY();
}
