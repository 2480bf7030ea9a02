/* fold-qdq-lookup: a quantized value's detour through float as one byte table
 *   F0 = DequantizeLinear(X, xs, xz?)          X uint8 / int8; one-element scale (float32) and zero point
 *   F1 = op1(F0, c...) ... Fk = opk(Fk-1, c...)  elementwise float32 ops whose other inputs are one-element
 *                                                constants (Mul / Add / Sub / Div / Pow / Max / Min / PRelu, Clip,
 *                                                the activations; k may be 0)
 *   Y  = QuantizeLinear(Fk, ys, yz?)            one-element scale and zero point: uint8 / int8
 *   -> Y = QLookup(X, T), T[b] = the chain computed at build time on the byte b (the builder's eval_node: the
 *      reference kernels), for all 256 bytes.
 * Each element of Y depends only on the same element of X, through the same float32 operations in the same order, so
 * the table holds exactly the chain's bytes: the fused layer is exact, not an approximation. F0 ... Fk must each be
 * read by the next node only and not be graph outputs, and keep X's inferred shape. PP-OCR's INT8 engines: after
 * each convolution DequantizeLinear -> Mul -> Add (the learnable affine block) -> QuantizeLinear, four layers that
 * read and write the activation in float32, now one that reads and writes bytes. Not in the default pipeline: the
 * builder runs it for CPU engines after the precision decisions (builder.c; the CUDA module has no QLookup kernel);
 * KILN_QLOOKUP=0 at build time leaves the chains as they are. */
#include "rewrite.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAIN_MAX 16

static bool is_q8(kiln_dtype dt) { return dt == KILN_DT_UINT8 || dt == KILN_DT_INT8; }

/* v is a constant of one element (of dtype dt, or any dtype when dt < 0) */
static bool one_const(const kiln_graph *g, int v, int dt)
{
    const kiln_tensor *t = v >= 0 ? kiln__const_of(g, v) : NULL;
    return t && t->data && kiln_tensor_numel(t) == 1 && (dt < 0 || t->dtype == (kiln_dtype)dt);
}

/* DequantizeLinear or QuantizeLinear node n with one-element parameters; x: the quantized side's dtype */
static bool qparams_ok(const kiln_graph *g, const kiln_node *n, kiln_dtype x)
{
    if (n->n_in < 2 || n->n_in > 3 || n->n_out != 1 || !is_q8(x) || !one_const(g, n->in[1], KILN_DT_FLOAT32) ||
        kiln__attr_i(n, "block_size", 0) != 0)
        return false;
    return n->n_in < 3 || n->in[2] < 0 || one_const(g, n->in[2], (int)x);
}

static bool unary_elementwise(kiln_op op)
{
    switch (op) {
    case KILN_OP_Relu: case KILN_OP_Sigmoid: case KILN_OP_Tanh: case KILN_OP_HardSigmoid: case KILN_OP_HardSwish:
    case KILN_OP_LeakyRelu: case KILN_OP_Elu: case KILN_OP_Selu: case KILN_OP_Celu: case KILN_OP_Softplus:
    case KILN_OP_Softsign: case KILN_OP_Gelu: case KILN_OP_Mish: case KILN_OP_Erf: case KILN_OP_Neg: case KILN_OP_Abs:
    case KILN_OP_Exp: case KILN_OP_Log: case KILN_OP_Sqrt: case KILN_OP_Reciprocal: case KILN_OP_Floor:
    case KILN_OP_Ceil: case KILN_OP_Round: case KILN_OP_Identity: case KILN_OP_ThresholdedRelu: case KILN_OP_Shrink:
        return true;
    default:
        return false;
    }
}

static bool binary_elementwise(kiln_op op)
{
    switch (op) {
    case KILN_OP_Add: case KILN_OP_Sub: case KILN_OP_Mul: case KILN_OP_Div: case KILN_OP_Pow: case KILN_OP_Max:
    case KILN_OP_Min: case KILN_OP_PRelu:
        return true;
    default:
        return false;
    }
}

/* Node c, reading float32 value v, continues a chain: an elementwise op whose other inputs are v itself, empty (Clip's
 * bounds) or one-element constants, writing one float32 value of v's shape */
static bool chain_node(const kiln_graph *g, const kiln_vshape *vs, const kiln_node *c, int v)
{
    bool unary = unary_elementwise(c->op) && c->n_in == 1;
    bool ok = unary || (c->op == KILN_OP_Clip && c->n_in >= 1 && c->n_in <= 3) ||
              (binary_elementwise(c->op) && c->n_in == 2);
    if (!ok || c->n_out != 1 || c->out[0] < 0 || (c->domain && c->domain[0] && strcmp(c->domain, "ai.onnx")))
        return false;
    for (int i = 0; i < c->n_in; i++) {
        int u = c->in[i];
        if (u == v || (u < 0 && c->op == KILN_OP_Clip && i > 0))
            continue;
        if (!one_const(g, u, KILN_DT_FLOAT32))
            return false;
    }
    const kiln_vshape *o = &vs[c->out[0]];
    return o->dtype == KILN_DT_FLOAT32 && kiln__vshape_same(o, &vs[v]);
}

typedef struct chain {
    int n;
    int node[CHAIN_MAX + 2];   /* in order: the DequantizeLinear, the ops, the QuantizeLinear (node[n - 1]) */
} chain;

/* The chain starting at DequantizeLinear node d, ending at a QuantizeLinear; false if there is none */
static bool find_chain(const kiln_graph *g, const kiln_vshape *vs, int d, chain *ch)
{
    const kiln_node *n = &g->nodes[d];
    if (n->dead || n->op != KILN_OP_DequantizeLinear || n->n_in < 2 || n->in[0] < 0 || n->out[0] < 0 ||
        !qparams_ok(g, n, vs[n->in[0]].dtype) || vs[n->out[0]].dtype != KILN_DT_FLOAT32)
        return false;
    ch->node[0] = d;
    ch->n = 1;
    for (int v = n->out[0];;) {
        int c = kiln__single_consumer(g, v);   /* -1 for a graph output too */
        if (c < 0)
            return false;
        const kiln_node *m = &g->nodes[c];
        if (m->op == KILN_OP_QuantizeLinear && m->in[0] == v && m->out[0] >= 0 &&
            qparams_ok(g, m, vs[m->out[0]].dtype)) {
            ch->node[ch->n++] = c;
            return true;
        }
        if (ch->n == CHAIN_MAX + 1 || !chain_node(g, vs, m, v))
            return false;
        ch->node[ch->n++] = c;
        v = m->out[0];
    }
}

/* Node idx of g with the chain's value cur at its non-constant inputs (the DequantizeLinear: at X) and its
 * constants elsewhere, into *out */
static kiln_status eval_step(const kiln_graph *g, const kiln_pass_ctx *pc, int idx, bool dq, const kiln_tensor *cur,
                             kiln_tensor *out)
{
    const kiln_node *n = &g->nodes[idx];
    const kiln_tensor *in[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < n->n_in && i < 4; i++) {
        const kiln_tensor *c = n->in[i] >= 0 ? kiln__const_of(g, n->in[i]) : NULL;
        in[i] = (dq && i == 0) || (n->in[i] >= 0 && !c) ? cur : c;
    }
    memset(out, 0, sizeof *out);
    return pc->eval_node(pc->user, n, in, out);
}

/* T: the chain's output for each of the 256 bytes, as a [256] tensor of Y's type; false (T empty) when evaluation
 * failed or gave something else */
static bool table_of(const kiln_graph *g, const kiln_pass_ctx *pc, const kiln_vshape *vs, const chain *ch,
                     kiln_tensor *t)
{
    memset(t, 0, sizeof *t);
    int64_t n256 = 256;
    kiln_tensor cur, next;
    if (kiln__tensor_alloc(&cur, vs[g->nodes[ch->node[0]].in[0]].dtype, 1, &n256) != KILN_OK)
        return false;
    for (int b = 0; b < 256; b++)
        ((uint8_t *)cur.data)[b] = (uint8_t)b;
    bool ok = true;
    for (int s = 0; s < ch->n && ok; s++) {
        ok = eval_step(g, pc, ch->node[s], s == 0, &cur, &next) == KILN_OK && next.data && kiln_tensor_numel(&next) == 256;
        kiln__tensor_release(&cur);
        cur = next;
    }
    kiln_dtype ydt = vs[g->nodes[ch->node[ch->n - 1]].out[0]].dtype;
    if (!ok || cur.dtype != ydt) {
        kiln__tensor_release(&cur);
        kiln_clear_last_error();
        return false;
    }
    cur.ndim = 1;   /* [..., 256] of one-element broadcasts: the same bytes */
    cur.dims[0] = 256;
    *t = cur;
    return true;
}

/* The chain's QuantizeLinear becomes QLookup(X, T), absorbing the DequantizeLinear and the ops between */
static kiln_status fold(kiln_graph *g, const chain *ch, kiln_tensor *t)
{
    int q = ch->node[ch->n - 1], x = g->nodes[ch->node[0]].in[0];
    char hint[128];
    snprintf(hint, sizeof hint, "%s_lookup", g->nodes[q].name ? g->nodes[q].name : "q");
    int tv = kiln__graph_add_const(g, hint, t);
    if (tv < 0)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    int in[2] = {x, tv};
    KILN_TRY(kiln__node_set_inputs(g, q, 2, in));
    KILN_TRY(kiln__node_set_op(&g->nodes[q], KILN_OP_QLookup, KILN_DOMAIN, g->nodes[q].opset));
    for (int i = 0; i + 1 < ch->n; i++)
        KILN_TRY(kiln__absorb(g, q, ch->node[i]));
    return KILN_OK;
}

static kiln_status fold_all(kiln_graph *g, const kiln_vshape *vs, void *user, int *changed)
{
    const kiln_pass_ctx *pc = user;
    for (int i = 0; i < g->n_nodes; i++) {
        chain ch;
        kiln_tensor t;
        if (!find_chain(g, vs, i, &ch) || !table_of(g, pc, vs, &ch, &t))
            continue;
        kiln_status st = fold(g, &ch, &t);
        kiln__tensor_release(&t);   /* moved into the graph unless fold failed first */
        KILN_TRY(st);
        (*changed)++;
    }
    return KILN_OK;
}

static bool enabled(void)
{
    const char *e = getenv("KILN_QLOOKUP");
    return !e || strcmp(e, "0");
}

kiln_status kiln__pass_fold_qdq_lookup(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (!pc || !pc->eval_node || !enabled())
        return KILN_OK;
    return kiln__pass_with_shapes_u(g, fold_all, (void *)pc, changed);
}
