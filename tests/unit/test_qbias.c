/* INT8 weights under a large bias (build/precision.c quantize_weight): a convolution with a channel of near-zero
 * weights and a bias of ordinary size (what a folded BatchNormalization leaves of a channel it nearly switched off)
 * would need an int32 bias beyond 2^31 at the channel's natural weight scale, so fuse-qdq could not make it an integer
 * layer and `--precision int8` failed ("cannot run in the requested precision", PP-OCRv4 det's p2o.Conv.22/30/31).
 * The channel's weight scale is raised until the bias fits 2^30: the build succeeds without --precision-fallback,
 * every convolution between the first and the last is a QLinearConv, and the output stays close to the float32
 * engine's -- with the near-zero channel on its own and beside ordinary ones, with and without a Relu after. */
#include "runtime/model.h"
#include "test.h"
#include "test_calib.h"
#include "test_engines.h"
#include "test_graph.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int conv(kiln_graph *g, const char *name, int x, int64_t cin, int64_t cout, int out, float tiny_bias,
                unsigned long long *seed)
{
    char wn[64], bn[64];
    snprintf(wn, sizeof wn, "%s_W", name);
    snprintf(bn, sizeof bn, "%s_B", name);
    int64_t wd[4] = {cout, cin, 3, 3};
    kiln_tensor w = test_tensor_f32(4, wd, 0.5f, seed), b = test_tensor_f32(1, &cout, 0.2f, seed);
    if (tiny_bias != 0) {   /* channel 0: weights ~1e-9, bias tiny_bias */
        for (int64_t i = 0; i < cin * 9; i++)
            ((float *)w.data)[i] *= 2e-9f;
        ((float *)b.data)[0] = tiny_bias;
    }
    int in[3] = {x, test_graph_const(g, wn, w), test_graph_const(g, bn, b)};
    int n = test_graph_node(g, KILN_OP_Conv, name, 3, in, out);
    int64_t pads[4] = {1, 1, 1, 1};
    CHECK(kiln__node_set_attr_ints(&g->nodes[n], "pads", 4, pads) == KILN_OK);
    return n;
}

/* X -> conv0 (first: float) -> Relu -> conv1 (channel 0 near zero, bias b0) [-> Relu] -> conv2 -> Relu -> conv3
 * (last: float) */
static kiln_model_t model(int64_t C, float b0, bool relu, unsigned long long *seed)
{
    kiln_graph *g = test_graph_onnx("qbias");
    int64_t xd[4] = {1, C, 9, 11};
    int x = test_graph_input(g, "X", 4, xd);
    int a = test_graph_value(g, "a"), ar = test_graph_value(g, "ar"), b = test_graph_value(g, "b");
    int br = relu ? test_graph_value(g, "br") : b, c = test_graph_value(g, "c"), cr = test_graph_value(g, "cr");
    int y = test_graph_value(g, "Y");
    conv(g, "conv0", x, C, C, a, 0, seed);
    test_graph_node(g, KILN_OP_Relu, "relu0", 1, &a, ar);
    conv(g, "conv1", ar, C, C, b, b0, seed);
    if (relu)
        test_graph_node(g, KILN_OP_Relu, "relu1", 1, &b, br);
    conv(g, "conv2", br, C, C, c, 0, seed);
    test_graph_node(g, KILN_OP_Relu, "relu2", 1, &c, cr);
    conv(g, "conv3", cr, C, C, y, 0, seed);
    test_graph_output(g, y);
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    return m;
}

static void run_case(int64_t C, float b0, bool relu)
{
    unsigned long long seed = 31 + (unsigned long long)C;
    kiln_model_t m = model(C, b0, relu, &seed);
    char dir[] = "/tmp/kiln_qbias_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    kiln_engine_t e32 = NULL, e8 = NULL;
    kiln_build_options o32 = {.no_tactics = true};
    CHECK_MSG(kiln_build(m, &o32, &e32) == KILN_OK, "%s", kiln_last_error());
    CHECK(e32 && test_calib_samples(e32, NULL, dir, 4, 7) == KILN_OK);
    kiln_calib_options co = {.data_dir = dir, .method = KILN_CALIB_MINMAX};
    kiln_build_options o8 = {.no_tactics = true, .precision = "int8", .calib = &co};
    kiln_status st = kiln_build(m, &o8, &e8);
    CHECK_MSG(st == KILN_OK, "C=%lld bias %g relu %d: int8 build: %s", (long long)C, b0, relu, kiln_last_error());
    kiln_free(o8.precision_report);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_MSG(test_engine_count_op(e8, KILN_OP_QLinearConv) == 2, "C=%lld: %d QLinearConv layers, want conv1 and conv2",
              (long long)C, test_engine_count_op(e8, KILN_OP_QLinearConv));
    kiln_tensor x, y32, y8;
    int64_t xd[4] = {1, C, 9, 11};
    CHECK(kiln__tensor_alloc(&x, KILN_DT_FLOAT32, 4, xd) == KILN_OK);
    for (int64_t i = 0; i < kiln_tensor_numel(&x); i++)
        ((float *)x.data)[i] = test_randf(&seed);
    test_engine_run(e32, "X", &x, 1, &y32);
    test_engine_run(e8, "X", &x, 1, &y8);
    double dot = 0, n32 = 0, n8 = 0;
    for (int64_t i = 0; y32.data && y8.data && i < kiln_tensor_numel(&y32); i++) {
        double a = ((float *)y32.data)[i], b = ((float *)y8.data)[i];
        dot += a * b, n32 += a * a, n8 += b * b;
    }
    double cos = n32 > 0 && n8 > 0 ? dot / sqrt(n32 * n8) : 0;
    CHECK_MSG(cos > 0.99, "C=%lld bias %g relu %d: int8 against float32 cosine %.6f", (long long)C, b0, relu, cos);
    kiln__tensor_release(&x), kiln__tensor_release(&y32), kiln__tensor_release(&y8);
    kiln_engine_free(e32), kiln_engine_free(e8);
    kiln_model_free(m);
}

int main(void)
{
    run_case(1, 3.0f, false);   /* the near-zero channel alone */
    run_case(6, 3.0f, true);
    run_case(6, -2.5f, false);
    run_case(13, 0.7f, true);
    return TEST_SUMMARY();
}
