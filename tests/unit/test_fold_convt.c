/* fold-scale-shift and fold-batchnorm on ConvTranspose (passes/p_scale_shift.c, passes/p_fold_bn.c):
 * PaddleOCR's detection head writes ConvTranspose -> Add (bias) -> BatchNormalization -> Relu. Hand-built
 * ConvTranspose (groups 1 / 2 / 3, odd channel counts, with and without a bias) -> Mul (per channel or one value)
 * -> Add (per channel) -> BatchNormalization graphs, built into CPU engines: the Mul, Add and BatchNormalization
 * must be gone (one ConvTranspose left) and the outputs must match the unoptimized model on random inputs. */
#include "engine/engine.h"
#include "kiln/kiln.h"
#include "runtime/model.h"
#include "test.h"
#include "test_engines.h"
#include "test_graph.h"
#include <string.h>

typedef struct convt_case {
    int64_t cin, cout, group, k, stride;
    bool bias, scalar_mul;
} convt_case;

/* positive random values (BatchNormalization's variance) */
static kiln_tensor positive(int64_t n, unsigned long long *seed)
{
    kiln_tensor t = test_tensor_f32(1, &n, 1.0f, seed);
    for (int64_t i = 0; i < n; i++)
        ((float *)t.data)[i] = 0.1f + fabsf(((float *)t.data)[i]);
    return t;
}

static kiln_model_t convt_model(const convt_case *c, unsigned long long *seed)
{
    kiln_graph *g = test_graph_onnx("convt_fold");
    int64_t xd[4] = {2, c->cin, 5, 7}, wd[4] = {c->cin, c->cout / c->group, c->k, c->k};
    int64_t md[4] = {1, c->cout, 1, 1}, ad[3] = {c->cout, 1, 1}, one = 1;
    int x = test_graph_input(g, "x", 4, xd);
    int w = test_graph_const(g, "W", test_tensor_f32(4, wd, 1.0f, seed));
    int b = c->bias ? test_graph_const(g, "B", test_tensor_f32(1, &c->cout, 1.0f, seed)) : -1;
    int mk = test_graph_const(g, "scale", c->scalar_mul ? test_tensor_f32(0, &one, 1.0f, seed)
                                                         : test_tensor_f32(4, md, 1.0f, seed));
    int ak = test_graph_const(g, "shift", test_tensor_f32(3, ad, 1.0f, seed));
    int gam = test_graph_const(g, "gamma", test_tensor_f32(1, &c->cout, 1.0f, seed));
    int bet = test_graph_const(g, "beta", test_tensor_f32(1, &c->cout, 1.0f, seed));
    int mea = test_graph_const(g, "mean", test_tensor_f32(1, &c->cout, 1.0f, seed));
    int var = test_graph_const(g, "var", positive(c->cout, seed));
    int y = test_graph_value(g, "y"), ym = test_graph_value(g, "ym"), ya = test_graph_value(g, "ya");
    int out = test_graph_value(g, "out");
    int in[3] = {x, w, b};
    int ct = test_graph_node(g, KILN_OP_ConvTranspose, "convt", c->bias ? 3 : 2, in, y);
    int64_t st[2] = {c->stride, c->stride};
    CHECK(kiln__node_set_attr_ints(&g->nodes[ct], "strides", 2, st) == KILN_OK);
    CHECK(kiln__node_set_attr_i(&g->nodes[ct], "group", c->group) == KILN_OK);
    test_graph_node(g, KILN_OP_Mul, "mul", 2, (int[]){mk, y}, ym);
    test_graph_node(g, KILN_OP_Add, "add", 2, (int[]){ym, ak}, ya);
    test_graph_node(g, KILN_OP_BatchNormalization, "bn", 5, (int[]){ya, gam, bet, mea, var}, out);
    test_graph_output(g, out);
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    return m;
}

static void convt_run(const convt_case *c, unsigned long long *seed)
{
    kiln_model_t m = convt_model(c, seed);
    kiln_tensor in;
    const char *name = "x";
    test_graph_random_inputs(m->g, 1, &in, seed);
    kiln_tensor *ref = NULL, *got = NULL;
    int nref = 0, ngot = 0;
    CHECK_MSG(kiln_model_run(m, 1, &name, &in, NULL, &nref, &ref) == KILN_OK, "%s", kiln_last_error());
    kiln_engine_t e = NULL;
    kiln_build_options o = {.no_tactics = true};
    CHECK_MSG(kiln_build(m, &o, &e) == KILN_OK, "build: %s", kiln_last_error());
    CHECK_MSG(e && test_engine_count_op(e, KILN_OP_ConvTranspose) == 1 && test_engine_count_op(e, KILN_OP_Mul) == 0 &&
                  test_engine_count_op(e, KILN_OP_Add) == 0 && test_engine_count_op(e, KILN_OP_BatchNormalization) == 0,
              "cin %lld cout %lld group %lld: %d nodes left (want one ConvTranspose)", (long long)c->cin,
              (long long)c->cout, (long long)c->group, e ? e->g->n_nodes : -1);
    CHECK_MSG(e && kiln_engine_run(e, 1, &name, &in, NULL, &ngot, &got) == KILN_OK, "%s", kiln_last_error());
    if (got && ref && ngot == 1 && nref == 1 && got[0].nbytes == ref[0].nbytes) {
        double worst = test_worst_f32(got[0].data, ref[0].data, kiln_tensor_numel(&ref[0]), 1e-5, 1e-4);
        CHECK_MSG(worst <= 1.0, "cin %lld cout %lld group %lld k %lld stride %lld bias %d scalar %d: error %g",
                  (long long)c->cin, (long long)c->cout, (long long)c->group, (long long)c->k,
                  (long long)c->stride, c->bias, c->scalar_mul, worst);
    } else {
        CHECK_MSG(0, "outputs missing or of different sizes");
    }
    kiln_tensors_free(got, ngot);
    kiln_tensors_free(ref, nref);
    kiln__tensor_release(&in);
    kiln_engine_free(e);
    kiln_model_free(m);
}

int main(void)
{
    unsigned long long seed = 0x5eed;
    static const convt_case cases[] = {
        {24, 24, 1, 2, 2, false, false},   /* PP-OCRv4 det's head shape */
        {5, 7, 1, 3, 2, true, false},
        {6, 4, 2, 2, 2, true, false},
        {6, 9, 3, 3, 1, false, true},
        {4, 6, 2, 3, 3, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        convt_run(&cases[i], &seed);
    return TEST_SUMMARY();
}
