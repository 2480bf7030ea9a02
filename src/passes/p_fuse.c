/* Epilogue fusion into Conv / MatMul / Gemm:
 *   fuse-bias      MatMul(A, W const) + Add(bias const [N])      -> FusedMatMul(A, W, bias)
 *                  Conv(X, W) + Add(const [C,1,1] / [1,C,1,1])    -> Conv(X, W, B)
 *   fuse-residual  Conv / MatMul output + Add(other tensor)       -> FusedConv/FusedMatMul(..., R)
 *   fuse-activation  ... followed by Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Tanh,
 *                  Gelu, or x*Sigmoid(x) (SiLU)                   -> fused node with "activation"
 *   fuse-post-affine  a FusedConv with HardSwish followed by Mul / Add of a float32 scalar constant (PP-LCNet's
 *                  learnable affine blocks: s * hardswish(y) + t) -> activation HardSwishAffine (alpha s, beta t)
 * The fused node takes the slot of the last node it absorbs, which keeps the order topological. */
#include "rewrite.h"
#include "../ir/fused.h"
#include <float.h>
#include <math.h>

static bool is_conv_like(const kiln_node *n) { return n->op == KILN_OP_Conv || n->op == KILN_OP_FusedConv; }
static bool is_mm_like(const kiln_node *n) { return n->op == KILN_OP_MatMul || n->op == KILN_OP_FusedMatMul; }
static bool has_act(const kiln_node *n) { return kiln__attr_s(n, "activation", NULL) != NULL; }

/* Converts Conv/MatMul/Gemm to their fused form (no-op if already fused). */
static kiln_status make_fused(kiln_node *n)
{
    if (n->op == KILN_OP_Conv)
        return kiln__node_set_op(n, KILN_OP_FusedConv, KILN_DOMAIN, n->opset);
    if (n->op == KILN_OP_MatMul)
        return kiln__node_set_op(n, KILN_OP_FusedMatMul, KILN_DOMAIN, n->opset);
    if (n->op == KILN_OP_Gemm)
        return kiln__node_set_op(n, KILN_OP_FusedGemm, KILN_DOMAIN, n->opset);
    return KILN_OK;
}

/* The other input of a binary node whose input `v` is one side; -1 if v is not an input. */
static int other_input(const kiln_node *n, int v)
{
    if (n->n_in != 2)
        return -1;
    if (n->in[0] == v && n->in[1] != v)
        return n->in[1];
    if (n->in[1] == v && n->in[0] != v)
        return n->in[0];
    return -1;
}

kiln_status kiln__pass_fuse_bias(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead || n->n_out != 1 || n->out[0] < 0)
            continue;
        bool mm = n->op == KILN_OP_MatMul && n->n_in == 2;
        bool conv = n->op == KILN_OP_Conv && (n->n_in == 2 || (n->n_in == 3 && n->in[2] < 0));
        if (!mm && !conv)
            continue;
        const kiln_tensor *w = kiln__const_of(g, n->in[1]);
        if (!w || w->dtype != KILN_DT_FLOAT32 || (mm && w->ndim != 2) || (conv && w->ndim < 3))
            continue;
        int c = kiln__single_consumer(g, n->out[0]);
        if (c < 0 || g->nodes[c].op != KILN_OP_Add)
            continue;
        int bv = other_input(&g->nodes[c], n->out[0]);
        const kiln_tensor *b = kiln__const_of(g, bv);
        int64_t ch = mm ? w->dims[1] : w->dims[0];
        if (!b || b->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(b) != ch)
            continue;
        /* the bias must broadcast along the channel (conv: [C,1,1] or [1,C,1,1]) / last (matmul) axis */
        bool ok = true;
        if (mm)
            for (int d = 0; d < b->ndim - 1; d++)
                ok &= b->dims[d] == 1;
        else {
            int spatial = w->ndim - 2;
            ok = b->ndim >= spatial + 1 && b->ndim <= spatial + 2 && b->dims[b->ndim - spatial - 1] == ch;
            for (int d = 0; d < b->ndim; d++)
                ok &= d == b->ndim - spatial - 1 || b->dims[d] == 1;
        }
        if (!ok)
            continue;
        kiln_tensor flat;
        int64_t dims1 = ch;
        KILN_TRY(kiln__tensor_alloc(&flat, KILN_DT_FLOAT32, 1, &dims1));
        memcpy(flat.data, b->data, flat.nbytes);
        int fv = kiln__graph_add_const(g, g->values[bv].name, &flat);
        if (fv < 0) {
            kiln__tensor_release(&flat);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        n = &g->nodes[i];
        if (n->n_in == 3)
            KILN_TRY(kiln__node_set_input(g, i, 2, fv));
        else
            KILN_TRY(kiln__node_add_input(g, i, fv));
        if (mm)
            KILN_TRY(make_fused(&g->nodes[i]));
        KILN_TRY(kiln__move_node_into(g, i, c));
        (*changed)++;
    }
    (void)pc;
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}

kiln_status kiln__pass_fuse_residual(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead || n->n_out != 1 || n->out[0] < 0 || has_act(n) || !(is_conv_like(n) || is_mm_like(n)))
            continue;
        int max_in = is_conv_like(n) ? 3 : 3;   /* X, W, B (bias slot) before R */
        if (n->n_in > max_in)
            continue;   /* already has a residual */
        int c = kiln__single_consumer(g, n->out[0]);
        if (c < 0 || g->nodes[c].op != KILN_OP_Add)
            continue;
        int r = other_input(&g->nodes[c], n->out[0]);
        if (r < 0 || kiln__const_of(g, r))
            continue;   /* constants are biases, handled by fuse-bias */
        KILN_TRY(make_fused(n));
        while (g->nodes[i].n_in < 3)
            KILN_TRY(kiln__node_add_input(g, i, -1));
        KILN_TRY(kiln__node_add_input(g, i, r));
        KILN_TRY(kiln__move_node_into(g, i, c));
        (*changed)++;
    }
    (void)pc;
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}

bool kiln__activation_of(const kiln_graph *g, const kiln_node *a, kiln_fused_act *out)
{
    memset(out, 0, sizeof *out);
    switch (a->op) {
    case KILN_OP_Relu: out->kind = KILN_FUSED_RELU; return a->n_in == 1;
    case KILN_OP_Sigmoid: out->kind = KILN_FUSED_SIGMOID; return a->n_in == 1;
    case KILN_OP_Tanh: out->kind = KILN_FUSED_TANH; return a->n_in == 1;
    case KILN_OP_HardSwish: out->kind = KILN_FUSED_HARDSWISH; return a->n_in == 1;
    case KILN_OP_LeakyRelu:
        out->kind = KILN_FUSED_LEAKYRELU;
        out->alpha = kiln__attr_f(a, "alpha", 0.01f);
        return a->n_in == 1;
    case KILN_OP_HardSigmoid:
        out->kind = KILN_FUSED_HARDSIGMOID;
        out->alpha = kiln__attr_f(a, "alpha", 0.2f);
        out->beta = kiln__attr_f(a, "beta", 0.5f);
        return a->n_in == 1;
    case KILN_OP_Gelu: {
        const char *ap = kiln__attr_s(a, "approximate", "none");
        out->kind = !strcmp(ap, "tanh") ? KILN_FUSED_GELU_TANH : KILN_FUSED_GELU;
        return a->n_in == 1;
    }
    case KILN_OP_Clip: {
        out->kind = KILN_FUSED_CLIP;
        out->alpha = -FLT_MAX;
        out->beta = FLT_MAX;
        if (a->opset < 11) {
            out->alpha = kiln__attr_f(a, "min", -FLT_MAX);
            out->beta = kiln__attr_f(a, "max", FLT_MAX);
            return true;
        }
        double v;
        if (a->n_in > 1 && a->in[1] >= 0) {
            if (!kiln__const_scalar(g, a->in[1], &v))
                return false;
            out->alpha = (float)v;
        }
        if (a->n_in > 2 && a->in[2] >= 0) {
            if (!kiln__const_scalar(g, a->in[2], &v))
                return false;
            out->beta = (float)v;
        }
        return true;
    }
    default:
        return false;
    }
}

/* SiLU: y feeds exactly Sigmoid(y) -> s and Mul(y, s); returns the Mul's index or -1. */
static int silu_mul(kiln_graph *g, int y, int *sig)
{
    int readers[2];
    if (kiln__value_uses(g, y) != 2 || kiln__value_is_output(g, y) || kiln__value_readers(g, y, readers, 2) != 2)
        return -1;
    int s = -1, m = -1;
    for (int k = 0; k < 2; k++) {
        const kiln_node *n = &g->nodes[readers[k]];
        if (n->op == KILN_OP_Sigmoid && n->n_in == 1 && n->in[0] == y)
            s = readers[k];
        else if (n->op == KILN_OP_Mul && n->n_in == 2 && (n->in[0] == y || n->in[1] == y))
            m = readers[k];
    }
    if (s < 0 || m < 0 || g->nodes[s].out[0] < 0 || other_input(&g->nodes[m], y) != g->nodes[s].out[0] ||
        kiln__single_consumer(g, g->nodes[s].out[0]) != m)
        return -1;
    *sig = s;
    return m;
}

kiln_status kiln__pass_fuse_activation(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        bool gemm = n->op == KILN_OP_Gemm || n->op == KILN_OP_FusedGemm;
        if (n->dead || n->n_out != 1 || n->out[0] < 0 || has_act(n) || !(is_conv_like(n) || is_mm_like(n) || gemm))
            continue;
        kiln_fused_act act;
        int c = kiln__single_consumer(g, n->out[0]), sig = -1;
        if (c >= 0 && kiln__activation_of(g, &g->nodes[c], &act) && g->nodes[c].in[0] == n->out[0]) {
            KILN_TRY(make_fused(&g->nodes[i]));
            KILN_TRY(kiln__node_set_fused_act(&g->nodes[i], &act));
            KILN_TRY(kiln__move_node_into(g, i, c));
            (*changed)++;
        } else if (c < 0 && (c = silu_mul(g, n->out[0], &sig)) >= 0) {
            act = (kiln_fused_act){.kind = KILN_FUSED_SILU};
            KILN_TRY(make_fused(&g->nodes[i]));
            KILN_TRY(kiln__node_set_fused_act(&g->nodes[i], &act));
            KILN_TRY(kiln__absorb(g, i, sig));
            KILN_TRY(kiln__move_node_into(g, i, c));
            (*changed)++;
        }
    }
    (void)pc;
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}

/* The float32 scalar constant operand of binary node m whose other operand is y, no wider in rank than `rank` (so
 * the node's output has y's shape); false when there is none. */
static bool scalar_operand(const kiln_graph *g, const kiln_node *m, int y, int rank, float *v)
{
    int cv = other_input(m, y);
    const kiln_tensor *k = cv >= 0 ? kiln__const_of(g, cv) : NULL;
    if (!k || k->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(k) != 1 || k->ndim > rank)
        return false;
    *v = ((const float *)k->data)[0];
    return isfinite(*v);
}

kiln_status kiln__pass_fuse_post_affine(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        kiln_fused_act act;
        if (n->dead || n->op != KILN_OP_FusedConv || n->n_out != 1 || n->out[0] < 0 || n->n_in < 2 ||
            !kiln__fused_act_of(n, &act) ||
            (act.kind != KILN_FUSED_HARDSWISH && act.kind != KILN_FUSED_HARDSWISH_AFFINE))
            continue;
        const kiln_tensor *W = kiln__const_of(g, n->in[1]);
        int c = kiln__single_consumer(g, n->out[0]);
        float v;
        if (!W || c < 0 || (g->nodes[c].op != KILN_OP_Mul && g->nodes[c].op != KILN_OP_Add) ||
            !scalar_operand(g, &g->nodes[c], n->out[0], W->ndim, &v))
            continue;
        if (act.kind == KILN_FUSED_HARDSWISH)
            act = (kiln_fused_act){.kind = KILN_FUSED_HARDSWISH_AFFINE, .alpha = 1.0f, .beta = 0.0f};
        if (g->nodes[c].op == KILN_OP_Mul) {   /* s (a h + b) = (s a) h + s b */
            act.alpha *= v;
            act.beta *= v;
        } else {
            act.beta += v;
        }
        KILN_TRY(kiln__node_set_fused_act(&g->nodes[i], &act));
        KILN_TRY(kiln__move_node_into(g, i, c));
        (*changed)++;   /* the node, now in c's later slot, may take the next Mul / Add when the loop gets there */
    }
    (void)pc;
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}
