/* Op-pattern recognition: decomposed subgraphs written by exporters become one node.
 *   fuse-layernorm  ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta
 *                   -> LayerNormalization(axis=-1)
 *   fuse-gelu       x * 0.5 * (1 + Erf(x / sqrt 2))  (any operand order)          -> Gelu
 *                   0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))       -> Gelu(tanh)
 *   fuse-hardswish  x * HardSigmoid(x; 1/6, 0.5), x * Clip(x + 3, 0, 6) / 6 (any order) -> HardSwish */
#include "rewrite.h"
#include <math.h>

static bool near(double a, double b) { return fabs(a - b) <= 1e-4 * fabs(b) + 1e-6; }

/* Node producing v if it is `op` and v has exactly one reader; NULL otherwise. */
static kiln_node *single_prod(kiln_graph *g, int v, kiln_op op)
{
    kiln_node *p = kiln__producer(g, v);
    if (!p || p->op != op || kiln__value_uses(g, v) != 1 || kiln__value_is_output(g, v))
        return NULL;
    return p;
}

static int node_index(const kiln_graph *g, const kiln_node *n) { return (int)(n - g->nodes); }

/* For a binary node with one constant scalar operand: the other operand, and the scalar. */
static bool bin_const(const kiln_graph *g, const kiln_node *n, int *other, double *c)
{
    if (n->n_in != 2)
        return false;
    if (kiln__const_scalar(g, n->in[1], c)) {
        *other = n->in[0];
        return true;
    }
    if (kiln__const_scalar(g, n->in[0], c)) {
        *other = n->in[1];
        return true;
    }
    return false;
}

/* ReduceMean over the last axis only (attribute axes = [-1]), keepdims = 1. */
static bool mean_last(const kiln_node *n)
{
    const int64_t *ax;
    if (n->op != KILN_OP_ReduceMean || n->n_in != 1 || kiln__attr_i(n, "keepdims", 1) != 1)
        return false;
    return kiln__attr_ints(n, "axes", &ax) == 1 && ax[0] == -1;
}

static kiln_status finish(kiln_graph *g, int final_idx, kiln_node **absorbed, int n_abs, kiln_op op, int opset)
{
    kiln_node *f = &g->nodes[final_idx];
    for (int k = 0; k < n_abs; k++)
        KILN_TRY(kiln__absorb(g, final_idx, node_index(g, absorbed[k])));
    for (int a = 0; a < f->n_attr; a++)
        kiln__attr_free(&f->attrs[a]);
    f->n_attr = 0;
    return kiln__node_set_op(f, op, "", opset);
}

static kiln_status try_layernorm(kiln_graph *g, int i, bool *done)
{
    *done = false;
    kiln_node *add2 = &g->nodes[i];   /* Add(Mul(Div(d, s), gamma), beta) */
    int mg, beta_v;
    if (add2->op != KILN_OP_Add || add2->n_in != 2)
        return KILN_OK;
    kiln_node *mul = NULL;
    for (int k = 0; k < 2 && !mul; k++)
        if ((mul = single_prod(g, add2->in[k], KILN_OP_Mul)))
            beta_v = add2->in[1 - k], mg = add2->in[k];
    if (!mul || !kiln__const_of(g, beta_v))
        return KILN_OK;
    (void)mg;
    kiln_node *div = NULL;
    int gamma_v = -1;
    for (int k = 0; k < 2 && !div; k++)
        if ((div = single_prod(g, mul->in[k], KILN_OP_Div)))
            gamma_v = mul->in[1 - k];
    if (!div || !kiln__const_of(g, gamma_v) || div->n_in != 2)
        return KILN_OK;
    int d = div->in[0];
    kiln_node *sq = single_prod(g, div->in[1], KILN_OP_Sqrt);
    kiln_node *sub = kiln__producer(g, d);
    if (!sq || !sub || sub->op != KILN_OP_Sub || sub->n_in != 2 || kiln__value_uses(g, d) != 2)
        return KILN_OK;
    kiln_node *addeps = single_prod(g, sq->in[0], KILN_OP_Add);
    int vv;
    double eps;
    if (!addeps || !bin_const(g, addeps, &vv, &eps))
        return KILN_OK;
    kiln_node *rm2 = single_prod(g, vv, KILN_OP_ReduceMean);
    if (!rm2 || !mean_last(rm2))
        return KILN_OK;
    kiln_node *pw = single_prod(g, rm2->in[0], KILN_OP_Pow);
    double two;
    if (!pw || pw->in[0] != d || !kiln__const_scalar(g, pw->in[1], &two) || two != 2.0)
        return KILN_OK;
    int x = sub->in[0];
    kiln_node *rm1 = single_prod(g, sub->in[1], KILN_OP_ReduceMean);
    if (!rm1 || !mean_last(rm1) || rm1->in[0] != x)
        return KILN_OK;
    /* rewrite the final Add into LayerNormalization(x, gamma, beta) */
    kiln_node *abs[] = {rm1, sub, pw, rm2, addeps, sq, div, mul};
    int in[3] = {x, gamma_v, beta_v};
    KILN_TRY(finish(g, i, abs, 8, KILN_OP_LayerNormalization, 17));
    KILN_TRY(kiln__node_set_inputs(g, i, 3, in));
    add2 = &g->nodes[i];
    KILN_TRY(kiln__node_set_attr_i(add2, "axis", -1));
    KILN_TRY(kiln__node_set_attr_f(add2, "epsilon", (float)eps));
    *done = true;
    return KILN_OK;
}

/* Matches x * 0.5 * (1 + Erf(x / sqrt2)) ending at Mul node i. */
static kiln_status try_gelu(kiln_graph *g, int i, bool *done)
{
    *done = false;
    kiln_node *top = &g->nodes[i];
    if (top->op != KILN_OP_Mul || top->n_in != 2)
        return KILN_OK;
    /* find the (1 + erf) or (1 + tanh) factor among the operands, possibly one level down */
    for (int k = 0; k < 2; k++) {
        kiln_node *inner = NULL, *half = NULL, *onep;
        int other = top->in[1 - k];
        double c;
        onep = single_prod(g, top->in[k], KILN_OP_Add);
        if (!onep) {
            /* top = Mul(Mul(x, 1+erf), 0.5) */
            kiln_node *m2 = single_prod(g, top->in[k], KILN_OP_Mul);
            if (!m2 || !kiln__const_scalar(g, other, &c) || !near(c, 0.5))
                continue;
            for (int j = 0; j < 2 && !onep; j++)
                if ((onep = single_prod(g, m2->in[j], KILN_OP_Add)))
                    other = m2->in[1 - j];
            if (!onep)
                continue;
            half = m2;   /* x is `other` */
        }
        int ev;
        if (!bin_const(g, onep, &ev, &c) || !near(c, 1.0))
            continue;
        int x = -1;
        if (!half) {
            /* other is x*0.5 (a Mul with const 0.5) */
            kiln_node *hm = single_prod(g, other, KILN_OP_Mul);
            if (!hm || !bin_const(g, hm, &x, &c) || !near(c, 0.5))
                continue;
            half = hm;
        } else {
            x = other;
        }
        bool tanh_form = false;
        inner = single_prod(g, ev, KILN_OP_Erf);
        if (inner) {
            kiln_node *sc = kiln__producer(g, inner->in[0]);
            int xs;
            if (!sc || kiln__value_uses(g, inner->in[0]) != 1 || !bin_const(g, sc, &xs, &c) || xs != x)
                continue;
            if (!((sc->op == KILN_OP_Div && near(c, sqrt(2.0)) && sc->in[0] == x) ||
                  (sc->op == KILN_OP_Mul && near(c, 1.0 / sqrt(2.0)))))
                continue;
            kiln_node *abs[] = {sc, inner, onep, half};
            KILN_TRY(finish(g, i, abs, 4, KILN_OP_Gelu, 20));
        } else if ((inner = single_prod(g, ev, KILN_OP_Tanh))) {
            /* tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) */
            kiln_node *m1 = single_prod(g, inner->in[0], KILN_OP_Mul);
            int sv, pv;
            if (!m1 || !bin_const(g, m1, &sv, &c) || !near(c, sqrt(2.0 / M_PI)))
                continue;
            kiln_node *a1 = single_prod(g, sv, KILN_OP_Add);
            if (!a1 || a1->n_in != 2)
                continue;
            int cube = a1->in[0] == x ? a1->in[1] : a1->in[1] == x ? a1->in[0] : -1;
            kiln_node *m3 = cube >= 0 ? single_prod(g, cube, KILN_OP_Mul) : NULL;
            if (!m3 || !bin_const(g, m3, &pv, &c) || !near(c, 0.044715))
                continue;
            kiln_node *pw = single_prod(g, pv, KILN_OP_Pow);
            double three;
            if (!pw || pw->in[0] != x || !kiln__const_scalar(g, pw->in[1], &three) || three != 3.0)
                continue;
            kiln_node *abs[] = {pw, m3, a1, m1, inner, onep, half};
            KILN_TRY(finish(g, i, abs, 7, KILN_OP_Gelu, 20));
            tanh_form = true;
        } else {
            continue;
        }
        KILN_TRY(kiln__node_set_inputs(g, i, 1, &x));
        top = &g->nodes[i];
        if (tanh_form)
            KILN_TRY(kiln__node_set_attr_s(top, "approximate", "tanh"));
        *done = true;
        return KILN_OK;
    }
    return KILN_OK;
}

static kiln_status try_hardswish(kiln_graph *g, int i, bool *done)
{
    *done = false;
    kiln_node *m = &g->nodes[i];
    if (m->op != KILN_OP_Mul || m->n_in != 2)
        return KILN_OK;
    for (int k = 0; k < 2; k++) {
        kiln_node *hs = single_prod(g, m->in[k], KILN_OP_HardSigmoid);
        if (!hs || hs->in[0] != m->in[1 - k] || !near(kiln__attr_f(hs, "alpha", 0.2f), 1.0 / 6.0) ||
            !near(kiln__attr_f(hs, "beta", 0.5f), 0.5))
            continue;
        int x = m->in[1 - k];
        kiln_node *abs[] = {hs};
        KILN_TRY(finish(g, i, abs, 1, KILN_OP_HardSwish, 14));
        KILN_TRY(kiln__node_set_inputs(g, i, 1, &x));
        *done = true;
        return KILN_OK;
    }
    return KILN_OK;
}

/* Clip(Add(x, 3), 0, 6) producing v: returns x (and the two nodes), or -1. */
static int relu6_plus3(kiln_graph *g, int v, kiln_node **clip_out, kiln_node **add_out)
{
    kiln_node *cl = single_prod(g, v, KILN_OP_Clip);
    if (!cl || cl->n_in < 1)
        return -1;
    double lo, hi;
    if (cl->opset < 11) {
        lo = kiln__attr_f(cl, "min", -1e30f);
        hi = kiln__attr_f(cl, "max", 1e30f);
    } else if (cl->n_in != 3 || !kiln__const_scalar(g, cl->in[1], &lo) || !kiln__const_scalar(g, cl->in[2], &hi)) {
        return -1;
    }
    if (lo != 0.0 || hi != 6.0)
        return -1;
    kiln_node *ad = single_prod(g, cl->in[0], KILN_OP_Add);
    int x;
    double three;
    if (!ad || !bin_const(g, ad, &x, &three) || three != 3.0)
        return -1;
    *clip_out = cl;
    *add_out = ad;
    return x;
}

/* x * Clip(x + 3, 0, 6) / 6, in the orders exporters write it -> HardSwish(x) */
static kiln_status try_hardswish_relu6(kiln_graph *g, int i, bool *done)
{
    *done = false;
    kiln_node *f = &g->nodes[i], *cl = NULL, *ad = NULL, *mid = NULL;
    double six;
    int x = -1;
    if (f->op == KILN_OP_Div && f->n_in == 2 && kiln__const_scalar(g, f->in[1], &six) && six == 6.0) {
        mid = single_prod(g, f->in[0], KILN_OP_Mul);   /* Div(Mul(x, clip), 6) */
        for (int k = 0; mid && k < 2 && x < 0; k++) {
            int xx = relu6_plus3(g, mid->in[k], &cl, &ad);
            if (xx >= 0 && xx == mid->in[1 - k])
                x = xx;
        }
    } else if (f->op == KILN_OP_Mul && f->n_in == 2) {
        for (int k = 0; k < 2 && x < 0; k++) {   /* Mul(x, Div(clip, 6)) */
            mid = single_prod(g, f->in[k], KILN_OP_Div);
            if (!mid || mid->n_in != 2 || !kiln__const_scalar(g, mid->in[1], &six) || six != 6.0)
                continue;
            int xx = relu6_plus3(g, mid->in[0], &cl, &ad);
            if (xx >= 0 && xx == f->in[1 - k])
                x = xx;
        }
    }
    if (x < 0)
        return KILN_OK;
    kiln_node *abs[] = {ad, cl, mid};
    KILN_TRY(finish(g, i, abs, 3, KILN_OP_HardSwish, 14));
    KILN_TRY(kiln__node_set_inputs(g, i, 1, &x));
    *done = true;
    return KILN_OK;
}

typedef kiln_status (*matcher)(kiln_graph *g, int i, bool *done);

static kiln_status run_matcher(kiln_graph *g, int *changed, matcher fn)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead)
            continue;
        bool done;
        KILN_TRY(fn(g, i, &done));
        *changed += done;
    }
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}

kiln_status kiln__pass_fuse_layernorm(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    return run_matcher(g, changed, try_layernorm);
}

kiln_status kiln__pass_fuse_gelu(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    return run_matcher(g, changed, try_gelu);
}

static kiln_status try_any_hardswish(kiln_graph *g, int i, bool *done)
{
    KILN_TRY(try_hardswish(g, i, done));
    if (!*done)
        KILN_TRY(try_hardswish_relu6(g, i, done));
    return KILN_OK;
}

kiln_status kiln__pass_fuse_hardswish(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    return run_matcher(g, changed, try_any_hardswish);
}
