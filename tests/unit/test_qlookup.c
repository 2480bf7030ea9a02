/* kiln's QLookup and the fold-qdq-lookup pass (passes/p_qlookup.c).
 *
 * 1. The kernel the host runs (AVX-512 VBMI where present) against the scalar reference on random lengths (tails of
 *    1-63 bytes), u8 / s8 inputs and tables, 1-3 threads: every byte equal; malformed inputs (float X, a table of 255
 *    or float values, no table) a clean error from both.
 * 2. The pass against the graph it replaces: X -> QuantizeLinear -> DequantizeLinear -> a chain of elementwise float
 *    ops with one-element constants -> QuantizeLinear -> DequantizeLinear -> Y, built as CPU engines with the pass on
 *    and off (KILN_QLOOKUP=0): the chain becomes one QLookup exactly where it should, and the outputs are equal
 *    byte for byte (1 and 2 threads) -- for chains of Mul / Add (PP-OCR's affine block), Sub and Div with the chain
 *    at either operand, Relu, Clip, HardSwish, HardSigmoid, Sigmoid, Tanh, LeakyRelu, none at all (a requantization),
 *    u8 and s8 on both sides. Left apart: a per-channel constant, an intermediate that is also a graph output, one
 *    read twice. */
#include "runtime/model.h"
#include "backend/cpu/cpu_kernels.h"
#include "test.h"
#include "test_engines.h"
#include "test_graph.h"
#include "test_pool.h"
#include <stdlib.h>
#include <string.h>

static unsigned long long seed = 4242;
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(test_rng(&seed) % (uint64_t)(hi - lo + 1)); }

static kiln_status run_lookup(const kiln_tensor *x, const kiln_tensor *t, int th, bool fast, kiln_tensor *y)
{
    int ids[3] = {0, 1, 2};
    kiln_node node = {.name = (char *)"lut", .op_type = (char *)"QLookup", .domain = (char *)"kiln",
                      .op = KILN_OP_QLookup, .opset = 1, .n_in = 2, .n_out = 1, .in = ids, .out = ids + 2};
    const kiln_tensor *in[2] = {x, t};
    memset(y, 0, sizeof *y);
    kiln_tensor *o[1] = {y};
    kiln_kctx c = {.node = &node, .n_in = t ? 2 : 1, .in = in, .n_out = 1, .out = o, .pool = test_pool(th),
                   .nthreads = th};
    return (fast ? kiln__ref_kernel(KILN_OP_QLookup) : kiln__cpu_ref_kernel(KILN_OP_QLookup))(&c);
}

static void test_kernel(int iter)
{
    int64_t n = iter % 5 == 0 ? rnd(1, 130) : rnd(1, 100000), n256 = 256;
    kiln_dtype xdt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8, tdt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8;
    kiln_tensor x = test_tensor_bytes(xdt, 1, &n, &seed), t = test_tensor_bytes(tdt, 1, &n256, &seed), a, b;
    int th = (int)rnd(1, 3);
    CHECK(run_lookup(&x, &t, th, true, &a) == KILN_OK && run_lookup(&x, &t, 1, false, &b) == KILN_OK);
    CHECK_MSG(a.dtype == tdt && b.dtype == tdt && a.nbytes == (size_t)n && b.nbytes == (size_t)n &&
              !memcmp(a.data, b.data, (size_t)n), "QLookup n=%lld th=%d: fast and reference differ", (long long)n, th);
    for (int64_t i = 0; i < n; i += 61)   /* and the definition */
        CHECK(((uint8_t *)b.data)[i] == ((uint8_t *)t.data)[((uint8_t *)x.data)[i]]);
    kiln__tensor_release(&a), kiln__tensor_release(&b), kiln__tensor_release(&x), kiln__tensor_release(&t);
}

static void test_errors(void)
{
    int64_t n = 10, n255 = 255, n256 = 256;
    kiln_tensor xf = test_tensor(KILN_DT_FLOAT32, 1, &n), x = test_tensor(KILN_DT_UINT8, 1, &n);
    kiln_tensor t255 = test_tensor(KILN_DT_UINT8, 1, &n255), tf = test_tensor(KILN_DT_FLOAT32, 1, &n256);
    kiln_tensor t = test_tensor(KILN_DT_INT8, 1, &n256), y;
    for (int fast = 0; fast <= 1; fast++) {
        CHECK(run_lookup(&xf, &t, 1, fast, &y) == KILN_ERR_DTYPE);
        CHECK(run_lookup(&x, &t255, 1, fast, &y) == KILN_ERR_SHAPE);
        CHECK(run_lookup(&x, &tf, 1, fast, &y) == KILN_ERR_SHAPE);
        CHECK(run_lookup(&x, NULL, 1, fast, &y) == KILN_ERR_INVALID_ARG);
        CHECK(run_lookup(&x, &t, 2, fast, &y) == KILN_OK && y.dtype == KILN_DT_INT8);
        kiln__tensor_release(&y);
    }
    kiln__tensor_release(&xf), kiln__tensor_release(&x), kiln__tensor_release(&t255), kiln__tensor_release(&tf);
    kiln__tensor_release(&t);
}

/* ---- the pass ---- */

typedef struct step {
    kiln_op op;
    int nconst;        /* one-element float constants after (or, chain_second, before) the chain value */
    bool chain_second; /* Sub(c, F) / Div(c, F) */
    float c0, c1;
} step;

typedef enum { APART_NONE, APART_PER_CHANNEL, APART_OUTPUT, APART_TWO_READERS } apart_kind;

static int scalar_q(kiln_graph *g, const char *name, kiln_dtype dt, double v)
{
    kiln_tensor t;
    CHECK(kiln__tensor_alloc(&t, dt, 0, NULL) == KILN_OK);
    if (dt == KILN_DT_FLOAT32)
        *(float *)t.data = (float)v;
    else
        kiln__set_i64(dt, t.data, 0, (int64_t)v);
    return test_graph_const(g, name, t);
}

static int fconst(kiln_graph *g, const char *name, float v, int64_t n)
{
    kiln_tensor t;
    int64_t d4[4] = {1, n, 1, 1};
    CHECK(kiln__tensor_alloc(&t, KILN_DT_FLOAT32, n > 1 ? 4 : 0, d4) == KILN_OK);
    for (int64_t i = 0; i < n; i++)
        ((float *)t.data)[i] = v + 0.01f * (float)i;
    return test_graph_const(g, name, t);
}

/* X [1, C, H, W] -> Q(sx, zx) -> DQ -> steps -> Q(sy, zy) -> DQ -> Y (and, for APART_OUTPUT / _TWO_READERS, a second
 * output reading the first step's value) */
static kiln_model_t chain_model(const step *s, int ns, kiln_dtype xdt, kiln_dtype ydt, apart_kind apart, int64_t C)
{
    kiln_graph *g = test_graph_onnx("qlookup");
    int64_t xd[4] = {1, C, 5, 7};
    int x = test_graph_input(g, "X", 4, xd);
    int sx = scalar_q(g, "sx", KILN_DT_FLOAT32, 0.037), zx = scalar_q(g, "zx", xdt, xdt == KILN_DT_UINT8 ? 121 : -9);
    int sy = scalar_q(g, "sy", KILN_DT_FLOAT32, 0.029), zy = scalar_q(g, "zy", ydt, ydt == KILN_DT_UINT8 ? 97 : 5);
    int q = test_graph_value(g, "xq"), f = test_graph_value(g, "f0");
    int qin[3] = {x, sx, zx};
    test_graph_node(g, KILN_OP_QuantizeLinear, "q_in", 3, qin, q);
    int dqin[3] = {q, sx, zx};
    test_graph_node(g, KILN_OP_DequantizeLinear, "dq_in", 3, dqin, f);
    int first = -1;
    for (int i = 0; i < ns; i++) {
        char nm[32], vn[32], c0n[32], c1n[32];
        snprintf(nm, sizeof nm, "op%d", i);
        snprintf(vn, sizeof vn, "f%d", i + 1);
        snprintf(c0n, sizeof c0n, "c%d_0", i);
        snprintf(c1n, sizeof c1n, "c%d_1", i);
        int out = test_graph_value(g, vn), in[3] = {f, -1, -1}, nin = 1;
        if (s[i].nconst >= 1) {
            int c = fconst(g, c0n, s[i].c0, apart == APART_PER_CHANNEL && i == 0 ? C : 1);
            in[0] = s[i].chain_second ? c : f, in[1] = s[i].chain_second ? f : c, nin = 2;
        }
        if (s[i].nconst == 2)
            in[2] = fconst(g, c1n, s[i].c1, 1), nin = 3;
        int n = test_graph_node(g, s[i].op, nm, nin, in, out);
        if (s[i].op == KILN_OP_LeakyRelu)
            CHECK(kiln__node_set_attr_f(&g->nodes[n], "alpha", 0.13f) == KILN_OK);
        if (s[i].op == KILN_OP_HardSigmoid)
            CHECK(kiln__node_set_attr_f(&g->nodes[n], "alpha", 0.25f) == KILN_OK);
        f = out;
        if (i == 0)
            first = out;
    }
    int yq = test_graph_value(g, "yq"), y = test_graph_value(g, "Y");
    int yqin[3] = {f, sy, zy};
    test_graph_node(g, KILN_OP_QuantizeLinear, "q_out", 3, yqin, yq);
    int ydqin[3] = {yq, sy, zy};
    test_graph_node(g, KILN_OP_DequantizeLinear, "dq_out", 3, ydqin, y);
    test_graph_output(g, y);
    if (apart == APART_OUTPUT && first >= 0)
        test_graph_output(g, first);
    if (apart == APART_TWO_READERS && first >= 0) {
        int r = test_graph_value(g, "r");
        test_graph_node(g, KILN_OP_Relu, "reader2", 1, &first, r);
        test_graph_output(g, r);
    }
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    return m;
}

static void chain_case(const char *what, const step *s, int ns, apart_kind apart)
{
    for (int types = 0; types < 4; types++) {
        kiln_dtype xdt = types & 1 ? KILN_DT_INT8 : KILN_DT_UINT8, ydt = types & 2 ? KILN_DT_INT8 : KILN_DT_UINT8;
        int64_t C = 3;
        kiln_model_t m = chain_model(s, ns, xdt, ydt, apart, C);
        kiln_build_options o = {.no_tactics = true};
        kiln_engine_t on = NULL, off = NULL;
        CHECK_MSG(kiln_build(m, &o, &on) == KILN_OK, "%s: %s", what, kiln_last_error());
        setenv("KILN_QLOOKUP", "0", 1);
        CHECK_MSG(kiln_build(m, &o, &off) == KILN_OK, "%s: %s", what, kiln_last_error());
        unsetenv("KILN_QLOOKUP");
        int want = apart == APART_NONE ? 1 : 0;
        CHECK_MSG(test_engine_count_op(on, KILN_OP_QLookup) == want && test_engine_count_op(off, KILN_OP_QLookup) == 0,
                  "%s (x %s, y %s): %d QLookup layers, want %d", what, kiln_dtype_name(xdt), kiln_dtype_name(ydt),
                  test_engine_count_op(on, KILN_OP_QLookup), want);
        kiln_tensor x;
        int64_t xd[4] = {1, C, 5, 7};
        CHECK(kiln__tensor_alloc(&x, KILN_DT_FLOAT32, 4, xd) == KILN_OK);
        for (int64_t i = 0; i < kiln_tensor_numel(&x); i++)   /* the whole quantized range and past it */
            ((float *)x.data)[i] = (float)rnd(-6000, 6000) / 1000.0f;
        for (int nt = 1; on && off && nt <= 2; nt++) {
            kiln_tensor a, b;
            test_engine_run(on, "X", &x, nt, &a);
            test_engine_run(off, "X", &x, nt, &b);
            CHECK_MSG(a.data && b.data && a.nbytes == b.nbytes && !memcmp(a.data, b.data, a.nbytes),
                      "%s (x %s, y %s, %d threads): the folded chain's output differs", what, kiln_dtype_name(xdt),
                      kiln_dtype_name(ydt), nt);
            kiln__tensor_release(&a), kiln__tensor_release(&b);
        }
        kiln__tensor_release(&x);
        kiln_engine_free(on), kiln_engine_free(off);
        kiln_model_free(m);
    }
}

int main(void)
{
    printf("QLookup kernel: %s\n", kiln__cpu_fast_kernel(KILN_OP_QLookup) ? kiln__cpu_fast_kernel(KILN_OP_QLookup)->name
                                                                            : "the reference");
    for (int i = 0; i < 300; i++)
        test_kernel(i);
    test_errors();

    static const step affine[] = {{KILN_OP_Mul, 1, false, 1.7f, 0}, {KILN_OP_Add, 1, false, -0.3f, 0}};
    chain_case("Mul, Add", affine, 2, APART_NONE);
    static const step sub_div[] = {{KILN_OP_Sub, 1, true, 0.5f, 0}, {KILN_OP_Div, 1, false, 1.3f, 0},
                                   {KILN_OP_Div, 1, true, 2.0f, 0}};
    chain_case("Sub(c, F), Div(F, c), Div(c, F)", sub_div, 3, APART_NONE);
    static const step acts[] = {{KILN_OP_HardSwish, 0, false, 0, 0}, {KILN_OP_Clip, 2, false, -0.2f, 2.5f},
                                {KILN_OP_Relu, 0, false, 0, 0}};
    chain_case("HardSwish, Clip, Relu", acts, 3, APART_NONE);
    static const step smooth[] = {{KILN_OP_Sigmoid, 0, false, 0, 0}, {KILN_OP_Mul, 1, false, 3.0f, 0},
                                  {KILN_OP_Tanh, 0, false, 0, 0}, {KILN_OP_HardSigmoid, 0, false, 0, 0},
                                  {KILN_OP_LeakyRelu, 0, false, 0, 0}};
    chain_case("Sigmoid, Mul, Tanh, HardSigmoid, LeakyRelu", smooth, 5, APART_NONE);
    chain_case("no op (a requantization)", NULL, 0, APART_NONE);
    chain_case("a per-channel Mul", affine, 2, APART_PER_CHANNEL);
    chain_case("an intermediate graph output", affine, 2, APART_OUTPUT);
    chain_case("an intermediate read twice", affine, 2, APART_TWO_READERS);
    return TEST_SUMMARY();
}
