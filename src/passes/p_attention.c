/* fuse-attention: scaled dot-product attention written out as
 *     MatMul(Q, K^T) -> Div(c) | Mul(c) -> [Add(mask) | Where(cond, ., fill)] -> Softmax(axis=-1) -> MatMul(., V)
 * becomes one Attention(Q, K^T, V, mask?) node with scale = 1/c (or c); a Where mask is kept as a
 * boolean input with attributes mask_kind (2: keep where true, 3: fill where true) and mask_fill.
 *
 * attention-transpose: an Attention reads its operands and writes its output through the
 * permutations of src/ir/fused.h, so the Transposes around it become attributes:
 *   - a Transpose(x, p) producing input i (0..2) of which the Attention is the only reader (and not
 *     a graph output): the Attention reads x with perm'[j] = p[perm[j]];
 *   - a Transpose(., p) that is the only reader of the Attention's output (not a graph output):
 *     the Attention writes the Transpose's output with y_perm'[j] = y_perm[p[j]].
 * BERT's Reshape -> Transpose -> Attention -> Transpose -> Reshape keeps no copy. */
#include "rewrite.h"
#include "../ir/fused.h"

static kiln_node *only_reader_prod(kiln_graph *g, int v, kiln_op op)
{
    kiln_node *p = kiln__producer(g, v);
    if (!p || p->op != op || kiln__value_uses(g, v) != 1 || kiln__value_is_output(g, v))
        return NULL;
    return p;
}

static kiln_status try_attention(kiln_graph *g, int i, bool *done)
{
    *done = false;
    kiln_node *sm = &g->nodes[i];
    if (sm->op != KILN_OP_Softmax || sm->n_in != 1 || sm->n_out != 1 || sm->out[0] < 0)
        return KILN_OK;
    if (sm->opset < 13 || kiln__attr_i(sm, "axis", -1) != -1)
        return KILN_OK;
    int c = kiln__single_consumer(g, sm->out[0]);
    if (c < 0)
        return KILN_OK;
    kiln_node *pv = &g->nodes[c];
    if (pv->op != KILN_OP_MatMul || pv->n_in != 2 || pv->in[0] != sm->out[0] || pv->in[1] == sm->out[0])
        return KILN_OK;
    int s = sm->in[0], mask = -1, mask_kind = 0;
    double fill = 0;
    kiln_node *add = only_reader_prod(g, s, KILN_OP_Add), *scl = NULL, *qk = NULL;
    kiln_node *wh = only_reader_prod(g, s, KILN_OP_Where);
    kiln_node *chain[3];
    int nchain = 0;
    if (wh && wh->n_in == 3) {
        /* Where(cond, scores, fill) keeps scores where cond; Where(cond, fill, scores) masks them */
        for (int k = 1; k <= 2 && mask < 0; k++) {
            kiln_node *p0 = kiln__producer(g, wh->in[k]);
            if (p0 && (p0->op == KILN_OP_Div || p0->op == KILN_OP_Mul || p0->op == KILN_OP_MatMul) &&
                kiln__value_uses(g, wh->in[k]) == 1 && kiln__const_scalar(g, wh->in[3 - k], &fill)) {
                s = wh->in[k];
                mask = wh->in[0];
                mask_kind = k == 1 ? 2 : 3;
            }
        }
        if (mask < 0)
            return KILN_OK;
        chain[nchain++] = wh;
    } else if (add && add->n_in == 2) {
        for (int k = 0; k < 2 && !scl && !qk; k++) {
            kiln_node *p = kiln__producer(g, add->in[k]);
            if (p && (p->op == KILN_OP_Div || p->op == KILN_OP_Mul || p->op == KILN_OP_MatMul) &&
                kiln__value_uses(g, add->in[k]) == 1) {
                s = add->in[k];
                mask = add->in[1 - k];
                break;
            }
        }
        if (mask < 0)
            return KILN_OK;
        mask_kind = 1;
        chain[nchain++] = add;
    }
    double scale = 1.0, cst;
    kiln_node *p = kiln__producer(g, s);
    if (p && (p->op == KILN_OP_Div || p->op == KILN_OP_Mul) && p->n_in == 2 && kiln__value_uses(g, s) == 1 &&
        !kiln__value_is_output(g, s)) {
        int mmv;
        if (p->op == KILN_OP_Div && kiln__const_scalar(g, p->in[1], &cst) && cst != 0.0) {
            scale = 1.0 / cst;
            mmv = p->in[0];
        } else if (p->op == KILN_OP_Mul && kiln__const_scalar(g, p->in[1], &cst)) {
            scale = cst;
            mmv = p->in[0];
        } else if (p->op == KILN_OP_Mul && kiln__const_scalar(g, p->in[0], &cst)) {
            scale = cst;
            mmv = p->in[1];
        } else {
            return KILN_OK;
        }
        scl = p;
        chain[nchain++] = scl;
        s = mmv;
    }
    qk = only_reader_prod(g, s, KILN_OP_MatMul);
    if (!qk || qk->n_in != 2 || kiln__const_of(g, qk->in[1]))
        return KILN_OK;
    chain[nchain++] = qk;
    int q = qk->in[0], kt = qk->in[1], v = pv->in[1];
    int in[4] = {q, kt, v, mask};
    for (int k = nchain - 1; k >= 0; k--)
        KILN_TRY(kiln__absorb(g, c, (int)(chain[k] - g->nodes)));
    KILN_TRY(kiln__absorb(g, c, i));
    pv = &g->nodes[c];
    KILN_TRY(kiln__node_set_op(pv, KILN_OP_Attention, KILN_DOMAIN, 13));
    KILN_TRY(kiln__node_set_inputs(g, c, mask >= 0 ? 4 : 3, in));
    pv = &g->nodes[c];
    KILN_TRY(kiln__node_set_attr_f(pv, "scale", (float)scale));
    if (mask_kind >= 2) {
        KILN_TRY(kiln__node_set_attr_i(pv, "mask_kind", mask_kind));
        KILN_TRY(kiln__node_set_attr_f(pv, "mask_fill", (float)fill));
    }
    KILN_TRY(kiln__node_set_attr_i(pv, "axis", -1));
    *done = true;
    return KILN_OK;
}

kiln_status kiln__pass_fuse_attention(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead)
            continue;
        bool done;
        KILN_TRY(try_attention(g, i, &done));
        *changed += done;
    }
    (void)pc;
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}

/* The perm attribute of Transpose t as ints (n entries, a permutation of 0..n-1), else 0. */
static int transpose_perm(const kiln_node *t, int *p)
{
    const int64_t *v;
    int n = kiln__attr_ints(t, "perm", &v);
    if (t->op != KILN_OP_Transpose || t->n_in < 1 || t->n_out != 1 || n <= 0 || n > KILN_MAX_DIMS)
        return 0;
    bool seen[KILN_MAX_DIMS] = {0};
    for (int j = 0; j < n; j++) {
        if (v[j] < 0 || v[j] >= n || seen[v[j]])
            return 0;
        seen[v[j]] = true;
        p[j] = (int)v[j];
    }
    return n;
}

static kiln_status set_perm(kiln_node *n, int which, int rank, const int *p)
{
    int64_t v[KILN_MAX_DIMS];
    for (int j = 0; j < rank; j++)
        v[j] = p[j];
    return kiln__node_set_attr_ints(n, kiln__attn_perm_names[which], rank, v);
}

/* Absorbs the Transposes around Attention node a; *done counts them. */
static kiln_status absorb_transposes(kiln_graph *g, int a, int *done)
{
    int tp[KILN_MAX_DIMS], old[KILN_MAX_DIMS], nw[KILN_MAX_DIMS];
    for (int i = 0; i < 3 && i < g->nodes[a].n_in; i++) {
        kiln_node *t = only_reader_prod(g, g->nodes[a].in[i], KILN_OP_Transpose);
        int r = t ? transpose_perm(t, tp) : 0;
        if (!r || !kiln__attn_perm(&g->nodes[a], i, r, old))
            continue;
        for (int j = 0; j < r; j++)
            nw[j] = tp[old[j]];
        int x = t->in[0], ti = (int)(t - g->nodes);
        KILN_TRY(set_perm(&g->nodes[a], i, r, nw));
        KILN_TRY(kiln__node_set_input(g, a, i, x));
        KILN_TRY(kiln__absorb(g, a, ti));
        (*done)++;
    }
    int y = g->nodes[a].n_out == 1 ? g->nodes[a].out[0] : -1;
    int c = y >= 0 && !kiln__value_is_output(g, y) ? kiln__single_consumer(g, y) : -1;
    int r = c >= 0 && g->nodes[c].in[0] == y ? transpose_perm(&g->nodes[c], tp) : 0;
    if (!r || g->nodes[c].out[0] < 0 || !kiln__attn_perm(&g->nodes[a], KILN_ATTN_Y, r, old))
        return KILN_OK;
    for (int j = 0; j < r; j++)
        nw[j] = old[tp[j]];
    int w = g->nodes[c].out[0];
    KILN_TRY(set_perm(&g->nodes[a], KILN_ATTN_Y, r, nw));
    KILN_TRY(kiln__absorb(g, a, c));
    kiln__node_set_output(g, a, 0, w);
    (*done)++;
    return KILN_OK;
}

kiln_status kiln__pass_attention_transpose(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == KILN_OP_Attention)
            KILN_TRY(absorb_transposes(g, i, changed));
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}
