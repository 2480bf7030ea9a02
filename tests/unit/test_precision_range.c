/* Lower bounds of activations and the int8 parameters they give (src/build/precision_range.c):
 * each producer's bound against the activation's true minimum computed here by a dense scan; the
 * propagation through moving / averaging ops, scalar Mul / Div / Add / Sub and the Q -> DQ pairs
 * of the int8 step; values without a bound; and the scale / zero point of kiln__int8_act_params
 * against their definition (the grid covers [lo, t] within half a step and holds 0 exactly). */
#include "build/precision.h"
#include "test.h"
#include "test_graph.h"
#include <math.h>
#include <string.h>

static kiln_graph *g;

static int val(const char *name)
{
    int v = kiln__graph_add_value(g, name);
    CHECK(v >= 0);
    return v;
}

static int cst(const char *name, float c)
{
    kiln_tensor t;
    CHECK(kiln__tensor_alloc(&t, KILN_DT_FLOAT32, 0, NULL) == KILN_OK);
    *(float *)t.data = c;
    int v = kiln__graph_add_const(g, name, &t);
    CHECK(v >= 0);
    return v;
}

/* op(in...) -> a new value named name; returns the value. */
static int node(kiln_op op, const char *name, int n_in, const int *in)
{
    int out = val(name);
    test_graph_node(g, op, name, n_in, in, out);
    return out;
}

static int un(kiln_op op, const char *name, int x) { return node(op, name, 1, &x); }
static int bin(kiln_op op, const char *name, int a, int b) { return node(op, name, 2, (int[]){a, b}); }

static void expect(const char *what, int v, bool has, float want)
{
    float lo = NAN;
    bool got = kiln__value_lower_bound(g, v, &lo);
    CHECK_MSG(got == has && (!has || fabsf(lo - want) <= 1e-6f * (1 + fabsf(want))), "%s: %d %g (want %d %g)", what,
              got, (double)lo, has, (double)want);
}

/* min over a dense grid of f on [-20, 20] */
static double scan_min(double (*f)(double))
{
    double m = INFINITY;
    for (double x = -20; x <= 20; x += 1e-5)
        m = fmin(m, f(x));
    return m;
}
static double hswish(double x) { return x * fmin(fmax(x + 3, 0), 6) / 6; }
static double silu(double x) { return x / (1 + exp(-x)); }
static double gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2))); }
static double gelu_tanh(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x))); }

static void test_bounds(void)
{
    g = kiln__graph_new(NULL);
    int x = val("x");
    expect("graph input", x, false, 0);
    expect("relu", un(KILN_OP_Relu, "r", x), true, 0);
    expect("sigmoid", un(KILN_OP_Sigmoid, "s", x), true, 0);
    int hs = un(KILN_OP_HardSwish, "hs", x);
    expect("hardswish", hs, true, (float)scan_min(hswish));
    int sg = un(KILN_OP_Sigmoid, "sg", x);
    expect("x * sigmoid(x)", bin(KILN_OP_Mul, "silu", x, sg), true, (float)scan_min(silu));
    expect("sigmoid(x) * x", bin(KILN_OP_Mul, "silu2", sg, x), true, (float)scan_min(silu));
    int other = val("other");
    expect("y * sigmoid(x)", bin(KILN_OP_Mul, "notsilu", other, sg), false, 0);
    int ge = un(KILN_OP_Gelu, "gelu", x);
    expect("gelu", ge, true, (float)scan_min(gelu));
    CHECK(kiln__node_set_attr_s(&g->nodes[g->values[ge].producer], "approximate", "tanh") == KILN_OK);
    expect("gelu tanh", ge, true, (float)scan_min(gelu_tanh));
    /* the scans agree with the constants to 1e-6 (the grid step) */
    int clip = node(KILN_OP_Clip, "clip", 3, (int[]){x, cst("lo", -0.5f), cst("hi", 6)});
    expect("clip(-0.5, 6)", clip, true, -0.5f);
    expect("clip without min", node(KILN_OP_Clip, "clipn", 3, (int[]){x, -1, cst("hi2", 6)}), false, 0);
    /* through ops that move or average values, scalar arithmetic, and Q -> DQ */
    int mp = un(KILN_OP_MaxPool, "mp", hs), tr = un(KILN_OP_Transpose, "tr", mp);
    expect("maxpool, transpose", tr, true, -0.375f);
    expect("averagepool of relu", un(KILN_OP_AveragePool, "ap", un(KILN_OP_Relu, "r2", x)), true, 0);
    expect("averagepool of hardswish", un(KILN_OP_GlobalAveragePool, "gap", hs), true, -0.375f);
    expect("averagepool of relu + 1 (zero padding)",
           un(KILN_OP_AveragePool, "ap2", bin(KILN_OP_Add, "r1", un(KILN_OP_Relu, "r3", x), cst("one", 1))), true, 0);
    int aff = bin(KILN_OP_Add, "aff", bin(KILN_OP_Mul, "scaled", cst("two", 2), hs), cst("b", 0.25f));
    expect("2 * hardswish + 0.25", aff, true, -0.5f);
    expect("hardswish / 4 - 1", bin(KILN_OP_Sub, "sub", bin(KILN_OP_Div, "div", hs, cst("four", 4)), cst("c1", 1)),
           true, -0.375f / 4 - 1);
    expect("-1 * hardswish", bin(KILN_OP_Mul, "neg", hs, cst("m1", -1)), false, 0);
    expect("hardswish / -2", bin(KILN_OP_Div, "negd", hs, cst("m2", -2)), false, 0);
    expect("1 - hardswish", bin(KILN_OP_Sub, "rsub", cst("c2", 1), hs), false, 0);
    expect("hardswish * y", bin(KILN_OP_Mul, "mulv", hs, other), false, 0);
    int q = node(KILN_OP_QuantizeLinear, "q", 3, (int[]){hs, cst("qs", 0.1f), cst("qz", 0)});
    expect("DQ(Q(hardswish))", node(KILN_OP_DequantizeLinear, "dq", 3, (int[]){q, cst("ds", 0.1f), cst("dz", 0)}), true,
           -0.375f);
    expect("DQ of a stored tensor", node(KILN_OP_DequantizeLinear, "dqw", 3, (int[]){other, cst("ws", 1), cst("wz", 0)}),
           false, 0);
    expect("add of two activations", bin(KILN_OP_Add, "add2", hs, hs), false, 0);
    expect("tanh", un(KILN_OP_Tanh, "tanh", x), false, 0);
    /* a chain deeper than the walk's limit has no bound (never a wrong one) */
    int deep = un(KILN_OP_Relu, "d0", x);
    for (int k = 1; k < 40; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "d%d", k);
        deep = un(KILN_OP_Transpose, nm, deep);
    }
    expect("deep chain", deep, false, 0);

    /* HardSwish as opset < 14 exporters write it: x * Clip(x + 3, 0, 6) / 6, x * (Clip(x + 3, 0, 6) / 6) */
    int a3 = bin(KILN_OP_Add, "a3", x, cst("three", 3));
    int r6 = node(KILN_OP_Clip, "r6", 3, (int[]){a3, cst("z0", 0), cst("six", 6)});
    expect("x * clip(x + 3, 0, 6) / 6", bin(KILN_OP_Div, "hsd", bin(KILN_OP_Mul, "hsm", x, r6), cst("six2", 6)), true,
           (float)scan_min(hswish));
    expect("x * (clip(3 + x, 0, 6) / 6)",
           bin(KILN_OP_Mul, "hsm2", bin(KILN_OP_Div, "r6d", node(KILN_OP_Clip, "r6b", 3,
               (int[]){bin(KILN_OP_Add, "a3b", cst("three2", 3), x), cst("z1", 0), cst("six3", 6)}), cst("six4", 6)), x),
           true, (float)scan_min(hswish));
    int r6old = un(KILN_OP_Clip, "r6old", a3);   /* opset 6 Clip: bounds as attributes */
    g->nodes[g->values[r6old].producer].opset = 6;
    CHECK(kiln__node_set_attr_f(&g->nodes[g->values[r6old].producer], "min", 0) == KILN_OK);
    CHECK(kiln__node_set_attr_f(&g->nodes[g->values[r6old].producer], "max", 6) == KILN_OK);
    expect("x * clip6(x + 3) (opset 6)", bin(KILN_OP_Mul, "hsold", r6old, x), true, -2.25f);
    expect("y * clip(x + 3, 0, 6)", bin(KILN_OP_Mul, "noths", other, r6), false, 0);
    expect("x * clip(x + 3, -1, 6)",
           bin(KILN_OP_Mul, "noths2", x, node(KILN_OP_Clip, "r6c", 3, (int[]){a3, cst("m1b", -1), cst("six5", 6)})), false, 0);
    expect("x * clip(x + 3, 0, 1) (max below c / 2)",
           bin(KILN_OP_Mul, "noths3", x, node(KILN_OP_Clip, "r6e", 3, (int[]){a3, cst("z2", 0), cst("one2", 1)})), false, 0);
    expect("x * clip(x + 3, 0, 6) / -6",
           bin(KILN_OP_Mul, "noths4", x, bin(KILN_OP_Div, "r6n", r6, cst("m6", -6))), false, 0);

    /* the calibration's grid: 255 steps from the bound, else int8's 127 */
    int steps;
    double glo;
    kiln__calib_grid(g, x, &steps, &glo);
    CHECK(steps == 127 && glo == 0);
    kiln__calib_grid(g, hs, &steps, &glo);
    CHECK(steps == 255 && fabs(glo + 0.375) < 1e-7);
    kiln__calib_grid(g, un(KILN_OP_Relu, "r5", x), &steps, &glo);
    CHECK(steps == 255 && glo == 0);
    kiln__calib_grid(g, bin(KILN_OP_Add, "pos", un(KILN_OP_Relu, "r6f", x), cst("c3", 1)), &steps, &glo);
    CHECK(steps == 255 && glo == 0);   /* a bound above 0: uint8 over [0, T] */

    /* int8 parameters */
    bool u8;
    float s;
    int zp;
    kiln__int8_act_params(g, x, 4, &u8, &s, &zp);
    CHECK(!u8 && s == 4 / 127.f && zp == 0);
    kiln__int8_act_params(g, un(KILN_OP_Relu, "r4", x), 4, &u8, &s, &zp);
    CHECK(u8 && s == 4 / 255.f && zp == 0);
    static const float ts[] = {0.5f, 1, 3, 6, 17.5f, 1000};
    for (size_t k = 0; k < sizeof ts / sizeof *ts; k++) {
        kiln__int8_act_params(g, hs, ts[k], &u8, &s, &zp);
        /* [lo, t] inside [-zp s, (255 - zp) s] within half a step; 0 on the grid (zp integer) */
        CHECK_MSG(u8 && zp >= 0 && zp <= 255 && fabsf(s - (ts[k] + 0.375f) / 255) <= 1e-7f * s &&
                      -zp * s <= -0.375f + s / 2 && (255 - zp) * s >= ts[k] - s / 2,
                  "t %g: u8 %d scale %g zp %d", (double)ts[k], u8, (double)s, zp);
    }
    /* a bound below -t: symmetric int8 is no worse */
    kiln__int8_act_params(g, hs, 0.25f, &u8, &s, &zp);
    CHECK(!u8 && s == 0.25f / 127 && zp == 0);
    kiln__graph_free(g);
}

int main(void)
{
    test_bounds();
    return TEST_SUMMARY();
}
