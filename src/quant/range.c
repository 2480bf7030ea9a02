/* Lower bounds of activations (quant.h): a value whose producer cannot go below lo (a Relu, a Clip,
 * HardSwish, Sigmoid, x * Sigmoid(x), x * Clip(x + c, 0, m), Gelu, ..., possibly through ops that
 * move or average values, Mul / Div by a positive scalar constant, Add / Sub of a scalar
 * constant). The int8 step of the builder quantizes such a value as uint8 over [lo, T] with a zero
 * point instead of int8 over [-T, T] (src/build/precision_range.c), and the calibration chooses
 * its MSE threshold for that grid (kiln__calib_grid). */
#include "quant.h"
#include <math.h>

/* Minima of the activations over all real inputs (attained or approached). */
#define HARDSWISH_MIN (-0.375f)          /* x (x + 3) / 6 at x = -1.5 */
#define SILU_MIN (-0.27846455f)          /* x sigmoid(x) at x = -1.27846 */
#define GELU_MIN (-0.16997121f)          /* x Phi(x) at x = -0.75179 */
#define GELU_TANH_MIN (-0.17004076f)     /* the tanh approximation, at x = -0.75246 */

/* The scalar float32 constant v holds (false when v is not one). */
static bool scalar_const(const kiln_graph *g, int v, float *c)
{
    const kiln_tensor *t = v >= 0 ? g->values[v].init : NULL;
    if (!t || !t->data || t->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(t) != 1)
        return false;
    *c = *(const float *)t->data;
    return isfinite(*c);
}

/* Ops whose outputs are input values moved or selected (the bound carries over) or averaged
 * (it carries over with zero padding counted: min(lo, 0)). */
static bool moves(kiln_op op)
{
    return op == KILN_OP_MaxPool || op == KILN_OP_GlobalMaxPool || op == KILN_OP_Reshape || op == KILN_OP_Flatten ||
           op == KILN_OP_Transpose || op == KILN_OP_Squeeze || op == KILN_OP_Unsqueeze || op == KILN_OP_Identity;
}

static bool averages(kiln_op op)
{
    return op == KILN_OP_AveragePool || op == KILN_OP_GlobalAveragePool || op == KILN_OP_ReduceMean;
}

static bool bound(const kiln_graph *g, int v, int depth, float *lo);

static const kiln_node *producer(const kiln_graph *g, int v)
{
    int p = v >= 0 ? g->values[v].producer : -1;
    return p >= 0 && !g->nodes[p].dead ? &g->nodes[p] : NULL;
}

/* The clip bound in x * k * Clip(x + c, 0, m) (HardSwish as opset < 14 exporters write it, with
 * k = 1/6, c = 3, m = 6; k from Mul / Div by positive scalars around the Clip): for x < 0 the
 * product is k x (x + c) on [-c, 0], smallest at x = -c/2: -k c^2 / 4 (when m >= c / 2). f is the
 * factor's value, x the other operand. */
static bool clip_product_bound(const kiln_graph *g, int f, int x, float *lo)
{
    double k = 1;
    const kiln_node *n = producer(g, f);
    for (int depth = 0; n && (n->op == KILN_OP_Mul || n->op == KILN_OP_Div) && depth < 4; depth++) {
        float c;
        if (n->n_in != 2 || !scalar_const(g, n->in[1], &c) || !(c > 0))
            return false;
        k = n->op == KILN_OP_Mul ? k * c : k / c;
        n = producer(g, n->in[0]);
    }
    float cmin, cmax, c;
    if (!n || n->op != KILN_OP_Clip || n->n_in < 1)
        return false;
    if (n->opset < 11)
        cmin = kiln__attr_f(n, "min", -INFINITY), cmax = kiln__attr_f(n, "max", INFINITY);
    else if (n->n_in < 3 || !scalar_const(g, n->in[1], &cmin) || !scalar_const(g, n->in[2], &cmax))
        return false;
    const kiln_node *a = producer(g, n->in[0]);
    if (cmin != 0 || !a || a->op != KILN_OP_Add || a->n_in != 2)
        return false;
    int xi = a->in[0] == x ? 1 : a->in[1] == x ? 0 : -1;
    if (xi < 0 || !scalar_const(g, a->in[xi], &c) || !(c >= 0) || !(cmax >= c / 2))
        return false;
    *lo = (float)(-k * c * c / 4);
    return true;
}

/* Mul(x, c) / Div(x, c) with c a positive scalar, Add(x, c) / Sub(x, c) with c a scalar:
 * the bound of x transformed; Mul(x, Sigmoid(x)) (SiLU, as exporters decompose it); Mul(x, k *
 * Clip(x + c, 0, m)) (decomposed HardSwish). */
static bool arith_bound(const kiln_graph *g, const kiln_node *n, int depth, float *lo)
{
    if (n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0)
        return false;
    if (n->op == KILN_OP_Mul)
        for (int k = 0; k < 2; k++) {
            const kiln_node *p = producer(g, n->in[k]);
            if (p && p->op == KILN_OP_Sigmoid && p->n_in == 1 && p->in[0] == n->in[1 - k]) {
                *lo = SILU_MIN;
                return true;
            }
            if (clip_product_bound(g, n->in[k], n->in[1 - k], lo))
                return true;
        }
    float c, x;
    bool commutes = n->op == KILN_OP_Mul || n->op == KILN_OP_Add;
    int xi = 0;
    if (!scalar_const(g, n->in[1], &c)) {
        if (!commutes || !scalar_const(g, n->in[0], &c))
            return false;
        xi = 1;
    }
    if (!bound(g, n->in[xi], depth + 1, &x))
        return false;
    switch (n->op) {
    case KILN_OP_Mul: *lo = x * c; return c >= 0;
    case KILN_OP_Div: *lo = x / c; return c > 0;
    case KILN_OP_Add: *lo = x + c; return true;
    case KILN_OP_Sub: *lo = x - c; return true;
    default: return false;
    }
}

static bool bound(const kiln_graph *g, int v, int depth, float *lo)
{
    int p = v >= 0 ? g->values[v].producer : -1;
    if (p < 0 || depth > 16 || g->nodes[p].dead)
        return false;
    const kiln_node *n = &g->nodes[p];
    if (moves(n->op) || averages(n->op) || n->op == KILN_OP_DequantizeLinear) {
        int src = n->n_in > 0 ? n->in[0] : -1;
        if (n->op == KILN_OP_DequantizeLinear) {   /* the DQ'd copy of a value this step quantized */
            int q = src >= 0 ? g->values[src].producer : -1;
            if (q < 0 || g->nodes[q].dead || g->nodes[q].op != KILN_OP_QuantizeLinear || g->nodes[q].n_in < 1)
                return false;
            src = g->nodes[q].in[0];
        }
        if (!bound(g, src, depth + 1, lo))
            return false;
        if (averages(n->op) && *lo > 0)
            *lo = 0;
        return true;
    }
    switch (n->op) {
    case KILN_OP_Relu: case KILN_OP_Sigmoid: case KILN_OP_HardSigmoid: case KILN_OP_Softmax: case KILN_OP_Softplus:
        *lo = 0;
        return true;
    case KILN_OP_HardSwish: *lo = HARDSWISH_MIN; return true;
    case KILN_OP_Gelu:
        *lo = strcmp(kiln__attr_s(n, "approximate", "none"), "tanh") ? GELU_MIN : GELU_TANH_MIN;
        return true;
    case KILN_OP_Clip:
        if (n->opset < 11) {
            *lo = kiln__attr_f(n, "min", -INFINITY);
            return isfinite(*lo);
        }
        return n->n_in > 1 && scalar_const(g, n->in[1], lo);
    case KILN_OP_Mul: case KILN_OP_Div: case KILN_OP_Add: case KILN_OP_Sub:
        return arith_bound(g, n, depth, lo);
    default:
        return false;
    }
}

bool kiln__value_lower_bound(const kiln_graph *g, int v, float *lo)
{
    return bound(g, v, 0, lo) && isfinite(*lo);
}


void kiln__calib_grid(const kiln_graph *g, int v, int *steps, double *lo)
{
    float b;
    *steps = KILN_CALIB_LEVELS - 1, *lo = 0;
    if (kiln__value_lower_bound(g, v, &b))
        *steps = 255, *lo = b < 0 ? b : 0;
}
