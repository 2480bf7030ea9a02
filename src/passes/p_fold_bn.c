/* fold-batchnorm: Conv/ConvTranspose followed by an inference BatchNormalization with constant
 * parameters becomes one Conv with scaled weights and a new bias:
 *   s = gamma / sqrt(var + eps);  W'[oc] = W[oc] * s[oc];  B'[oc] = (B[oc] - mean[oc]) * s[oc] + beta[oc] */
#include "rewrite.h"
#include <math.h>

static bool is_f32_vec(const kiln_tensor *t, int64_t n)
{
    return t && t->dtype == KILN_DT_FLOAT32 && kiln_tensor_numel(t) == n && t->ndim == 1;
}

/* Node n (Conv / ConvTranspose / Gemm) takes the folded weight w and bias b as inputs 1 and 2 and
 * writes the BatchNormalization bn's output; bn dies, its name (and precision request, kiln_prec_fused)
 * carried by n. */
static kiln_status absorb_bn(kiln_graph *g, int n, int bn, int w, int b)
{
    while (g->nodes[n].n_in < 3)
        KILN_TRY(kiln__node_add_input(g, n, -1));
    KILN_TRY(kiln__node_set_input(g, n, 1, w));
    KILN_TRY(kiln__node_set_input(g, n, 2, b));
    int y = g->nodes[bn].out[0];
    kiln__node_kill(g, bn);
    kiln__node_set_output(g, n, 0, y);
    return kiln__node_add_fused_node(&g->nodes[n], &g->nodes[bn]);
}

static kiln_status fold_one(kiln_graph *g, int ci, int bi, bool *done)
{
    kiln_node *conv = &g->nodes[ci], *bn = &g->nodes[bi];
    *done = false;
    if (bn->n_in < 5 || bn->in[0] != conv->out[0])
        return KILN_OK;
    for (int o = 1; o < bn->n_out; o++)
        if (bn->out[o] >= 0 && kiln__value_uses(g, bn->out[o]) > 0)
            return KILN_OK;
    if (kiln__attr_i(bn, "training_mode", 0) != 0 || (bn->opset < 7 && kiln__attr_i(bn, "is_test", 1) == 0))
        return KILN_OK;
    const kiln_tensor *W = kiln__const_of(g, conv->in[1]);
    const kiln_tensor *B = conv->n_in > 2 ? kiln__const_of(g, conv->in[2]) : NULL;
    if (conv->n_in > 2 && conv->in[2] >= 0 && !B)
        return KILN_OK;
    if (!W || W->dtype != KILN_DT_FLOAT32 || W->ndim < 3)
        return KILN_OK;
    bool transpose = conv->op == KILN_OP_ConvTranspose;
    int64_t group = kiln__attr_i(conv, "group", 1);
    if (group < 1 || W->dims[0] % (transpose ? group : 1))
        return KILN_OK;
    int64_t cout = transpose ? W->dims[1] * group : W->dims[0];
    const kiln_tensor *gam = kiln__const_of(g, bn->in[1]), *beta = kiln__const_of(g, bn->in[2]),
                      *mean = kiln__const_of(g, bn->in[3]), *var = kiln__const_of(g, bn->in[4]);
    if (!is_f32_vec(gam, cout) || !is_f32_vec(beta, cout) || !is_f32_vec(mean, cout) || !is_f32_vec(var, cout))
        return KILN_OK;
    if (B && !is_f32_vec(B, cout))
        return KILN_OK;
    float eps = kiln__attr_f(bn, "epsilon", 1e-5f);
    kiln_tensor nw, nb;
    KILN_TRY(kiln__tensor_clone(&nw, W));
    int64_t one = cout;
    kiln_status st = kiln__tensor_alloc(&nb, KILN_DT_FLOAT32, 1, &one);
    if (st != KILN_OK) {
        kiln__tensor_release(&nw);
        return st;
    }
    const float *gs = gam->data, *bs = beta->data, *ms = mean->data, *vs = var->data;
    float *w = nw.data, *b = nb.data;
    for (int64_t c = 0; c < cout; c++) {
        float s = gs[c] / sqrtf(vs[c] + eps);
        b[c] = ((B ? ((const float *)B->data)[c] : 0.0f) - ms[c]) * s + bs[c];
    }
    int64_t per = kiln_tensor_numel(W) / (W->dims[0] * W->dims[1]);   /* kernel spatial size */
    for (int64_t d0 = 0; d0 < W->dims[0]; d0++)
        for (int64_t d1 = 0; d1 < W->dims[1]; d1++) {
            int64_t oc = transpose ? (d0 / (W->dims[0] / group)) * W->dims[1] + d1 : d0;
            float s = gs[oc] / sqrtf(vs[oc] + eps);
            float *p = w + (d0 * W->dims[1] + d1) * per;
            for (int64_t k = 0; k < per; k++)
                p[k] *= s;
        }
    int wv = kiln__graph_add_const(g, g->values[conv->in[1]].name, &nw);
    int bv = wv >= 0 ? kiln__graph_add_const(g, bn->name[0] ? bn->name : "bn_bias", &nb) : -1;
    if (wv < 0 || bv < 0) {
        kiln__tensor_release(&nw);
        kiln__tensor_release(&nb);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    KILN_TRY(absorb_bn(g, ci, bi, wv, bv));
    *done = true;
    return KILN_OK;
}

/* Gemm(A, B, C) with constant B (and C absent or of N elements) followed by BatchNormalization
 * over the N output columns: B's columns are scaled, C becomes beta*C*s - mean*s + b, beta = 1. */
static kiln_status fold_gemm(kiln_graph *g, int gi, int bi, bool *done)
{
    kiln_node *gm = &g->nodes[gi], *bn = &g->nodes[bi];
    *done = false;
    if (bn->n_in < 5 || bn->in[0] != gm->out[0] || kiln__attr_i(bn, "training_mode", 0) != 0)
        return KILN_OK;
    for (int o = 1; o < bn->n_out; o++)
        if (bn->out[o] >= 0 && kiln__value_uses(g, bn->out[o]) > 0)
            return KILN_OK;
    const kiln_tensor *B = kiln__const_of(g, gm->in[1]);
    const kiln_tensor *C = gm->n_in > 2 && gm->in[2] >= 0 ? kiln__const_of(g, gm->in[2]) : NULL;
    if (!B || B->dtype != KILN_DT_FLOAT32 || B->ndim != 2 || (gm->n_in > 2 && gm->in[2] >= 0 && !C))
        return KILN_OK;
    bool tb = kiln__attr_i(gm, "transB", 0) != 0;
    int64_t N = tb ? B->dims[0] : B->dims[1], K = tb ? B->dims[1] : B->dims[0];
    if (C && (C->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(C) != N || (C->ndim == 2 && C->dims[0] != 1)))
        return KILN_OK;
    const kiln_tensor *gam = kiln__const_of(g, bn->in[1]), *bb = kiln__const_of(g, bn->in[2]),
                      *mean = kiln__const_of(g, bn->in[3]), *var = kiln__const_of(g, bn->in[4]);
    if (!is_f32_vec(gam, N) || !is_f32_vec(bb, N) || !is_f32_vec(mean, N) || !is_f32_vec(var, N))
        return KILN_OK;
    float eps = kiln__attr_f(bn, "epsilon", 1e-5f), alpha = kiln__attr_f(gm, "alpha", 1.0f),
          beta = kiln__attr_f(gm, "beta", 1.0f);
    kiln_tensor nw, nc;
    KILN_TRY(kiln__tensor_clone(&nw, B));
    int64_t n1 = N;
    kiln_status st = kiln__tensor_alloc(&nc, KILN_DT_FLOAT32, 1, &n1);
    if (st != KILN_OK) {
        kiln__tensor_release(&nw);
        return st;
    }
    const float *gs = gam->data, *bs = bb->data, *ms = mean->data, *vs = var->data;
    float *w = nw.data, *c = nc.data;
    for (int64_t n = 0; n < N; n++) {
        float s = gs[n] / sqrtf(vs[n] + eps);
        c[n] = (C ? beta * ((const float *)C->data)[n] : 0.0f) * s - ms[n] * s + bs[n];
        for (int64_t k = 0; k < K; k++)
            w[tb ? n * K + k : k * N + n] *= s;
    }
    (void)alpha;   /* alpha multiplies A*B'; B' already carries s */
    int wv = kiln__graph_add_const(g, g->values[gm->in[1]].name, &nw);
    int cv = wv >= 0 ? kiln__graph_add_const(g, bn->name[0] ? bn->name : "bn_bias", &nc) : -1;
    if (wv < 0 || cv < 0) {
        kiln__tensor_release(&nw);
        kiln__tensor_release(&nc);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    KILN_TRY(kiln__node_set_attr_f(&g->nodes[gi], "beta", 1.0f));
    KILN_TRY(absorb_bn(g, gi, bi, wv, cv));
    *done = true;
    return KILN_OK;
}

kiln_status kiln__pass_fold_batchnorm(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        bool gemm = n->op == KILN_OP_Gemm;
        if (n->dead || (n->op != KILN_OP_Conv && n->op != KILN_OP_ConvTranspose && !gemm) || n->n_in < 2 ||
            n->n_out != 1 || n->out[0] < 0)
            continue;
        int c = kiln__single_consumer(g, n->out[0]);
        if (c < 0 || g->nodes[c].op != KILN_OP_BatchNormalization)
            continue;
        bool done;
        KILN_TRY(gemm ? fold_gemm(g, i, c, &done) : fold_one(g, i, c, &done));
        *changed += done;
    }
    (void)pc;
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}
