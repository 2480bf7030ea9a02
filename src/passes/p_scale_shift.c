/* fold-scale-shift: a Conv or ConvTranspose followed by a per-channel (or per-tensor) constant
 * multiply and/or add is one Conv (ConvTranspose) with rescaled weights and bias:
 *     Mul(Conv(x, W, B), s) -> Conv(x, W*s, B*s)       Add(Conv(x, W, B), t) -> Conv(x, W, B + t)
 * (s, t: one value, or C values shaped [C,1,...] / [1,C,1,...]). PaddleOCR's learnable affine
 * blocks and exported BatchNorm-as-Mul/Add look like this, and so do PaddleOCR's ConvTranspose + Add
 * (bias) + BatchNormalization heads (the Add folded here, fold-batchnorm then takes the BN).
 * ConvTranspose weights are [Cin][Cout/group][k...]: output channel oc of weight row (i, j) is
 * (i / (Cin/group)) * (Cout/group) + j. */
#include "rewrite.h"

/* The per-channel view of constant c for a conv with `cout` channels and `spatial` dims:
 * returns 1 (scalar), cout (per channel), or 0 (not applicable). */
static int64_t channel_count(const kiln_tensor *c, int64_t cout, int spatial)
{
    if (!c || c->dtype != KILN_DT_FLOAT32)
        return 0;
    int64_t n = kiln_tensor_numel(c);
    if (n == 1 && c->ndim <= spatial + 2)
        return 1;
    if (n != cout || c->ndim < spatial + 1 || c->ndim > spatial + 2)
        return 0;
    for (int d = 0; d < c->ndim; d++)
        if (d != c->ndim - spatial - 1 && c->dims[d] != 1)
            return 0;
    return cout;
}

static kiln_status try_fold(kiln_graph *g, int i, bool *done)
{
    *done = false;
    kiln_node *n = &g->nodes[i];
    bool transpose = n->op == KILN_OP_ConvTranspose;
    if (n->dead || (n->op != KILN_OP_Conv && !transpose) || n->n_out != 1 || n->out[0] < 0 || n->n_in < 2)
        return KILN_OK;
    const kiln_tensor *W = kiln__const_of(g, n->in[1]);
    const kiln_tensor *B = n->n_in > 2 && n->in[2] >= 0 ? kiln__const_of(g, n->in[2]) : NULL;
    if (!W || W->dtype != KILN_DT_FLOAT32 || W->ndim < 3 || (n->n_in > 2 && n->in[2] >= 0 && !B))
        return KILN_OK;
    int64_t group = transpose ? kiln__attr_i(n, "group", 1) : 1;
    if (group < 1 || W->dims[0] % group)
        return KILN_OK;
    int64_t cout = transpose ? W->dims[1] * group : W->dims[0];
    if (B && (B->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(B) != cout))
        return KILN_OK;
    int c = kiln__single_consumer(g, n->out[0]);
    if (c < 0)
        return KILN_OK;
    kiln_node *m = &g->nodes[c];
    if ((m->op != KILN_OP_Mul && m->op != KILN_OP_Add) || m->n_in != 2)
        return KILN_OK;
    int cv = m->in[0] == n->out[0] ? m->in[1] : m->in[1] == n->out[0] ? m->in[0] : -1;
    const kiln_tensor *k = kiln__const_of(g, cv);
    int64_t kc = channel_count(k, cout, W->ndim - 2);
    if (!kc)
        return KILN_OK;
    bool mul = m->op == KILN_OP_Mul;
    kiln_tensor nw = {0}, nb;
    int64_t c1 = cout;
    if (mul)
        KILN_TRY(kiln__tensor_clone(&nw, W));
    kiln_status st = kiln__tensor_alloc(&nb, KILN_DT_FLOAT32, 1, &c1);
    if (st != KILN_OK) {
        kiln__tensor_release(&nw);
        return st;
    }
    const float *kd = k->data;
    for (int64_t o = 0; o < cout; o++) {
        float kv = kd[kc == 1 ? 0 : o], b = B ? ((const float *)B->data)[o] : 0.0f;
        ((float *)nb.data)[o] = mul ? b * kv : b + kv;
    }
    if (mul) {   /* weight rows (d0, d1) of `per` elements each; their output channel as the header says */
        int64_t per = kiln_tensor_numel(W) / (W->dims[0] * W->dims[1]);
        for (int64_t d0 = 0; d0 < W->dims[0]; d0++)
            for (int64_t d1 = 0; d1 < W->dims[1]; d1++) {
                int64_t oc = transpose ? (d0 / (W->dims[0] / group)) * W->dims[1] + d1 : d0;
                float kv = kd[kc == 1 ? 0 : oc], *w = (float *)nw.data + (d0 * W->dims[1] + d1) * per;
                for (int64_t e = 0; e < per; e++)
                    w[e] *= kv;
            }
    }
    int wv = mul ? kiln__graph_add_const(g, g->values[n->in[1]].name, &nw) : n->in[1];
    int bv = wv >= 0 ? kiln__graph_add_const(g, m->name[0] ? m->name : "conv_bias", &nb) : -1;
    if (wv < 0 || bv < 0) {
        kiln__tensor_release(&nw);
        kiln__tensor_release(&nb);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    while (g->nodes[i].n_in < 3)
        KILN_TRY(kiln__node_add_input(g, i, -1));
    KILN_TRY(kiln__node_set_input(g, i, 1, wv));
    KILN_TRY(kiln__node_set_input(g, i, 2, bv));
    KILN_TRY(kiln__move_node_into(g, i, c));
    *done = true;
    return KILN_OK;
}

kiln_status kiln__pass_fold_scale_shift(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        bool done;
        KILN_TRY(try_fold(g, i, &done));
        *changed += done;
    }
    (void)pc;
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}
