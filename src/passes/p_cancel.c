/* cancel-transpose-reshape:
 *   Transpose(p1) -> Transpose(p2): removed when p1[p2[i]] == i, else merged into one Transpose;
 *   Reshape(x, s1) -> Reshape(., s2 const without 0 entries): the second reads x directly. */
#include "rewrite.h"

static kiln_status try_transpose(kiln_graph *g, int i, bool *done)
{
    *done = false;
    kiln_node *t1 = &g->nodes[i];
    const int64_t *p1, *p2;
    int r1 = kiln__attr_ints(t1, "perm", &p1);
    if (t1->op != KILN_OP_Transpose || t1->n_out != 1 || t1->out[0] < 0 || r1 <= 0)
        return KILN_OK;
    int c = kiln__single_consumer(g, t1->out[0]);
    if (c < 0 || g->nodes[c].op != KILN_OP_Transpose)
        return KILN_OK;
    kiln_node *t2 = &g->nodes[c];
    int r2 = kiln__attr_ints(t2, "perm", &p2);
    if (r2 != r1)
        return KILN_OK;
    int64_t comp[KILN_MAX_DIMS];
    bool identity = true;
    if (r1 > KILN_MAX_DIMS)
        return KILN_OK;
    for (int k = 0; k < r1; k++) {
        if (p2[k] < 0 || p2[k] >= r1 || p1[p2[k]] < 0 || p1[p2[k]] >= r1)
            return KILN_OK;
        comp[k] = p1[p2[k]];
        identity &= comp[k] == k;
    }
    int x = t1->in[0];
    if (identity && !kiln__value_is_output(g, t2->out[0])) {
        KILN_TRY(kiln__graph_replace_uses(g, t2->out[0], x));
        kiln__node_kill(g, i);
        kiln__node_kill(g, c);
    } else {
        /* t2 reads x with the composed permutation */
        kiln_attr *a = NULL;
        for (int k = 0; k < t2->n_attr; k++)
            if (!strcmp(t2->attrs[k].name, "perm"))
                a = &t2->attrs[k];
        for (int k = 0; k < r1; k++)
            a->ints[k] = comp[k];
        KILN_TRY(kiln__node_set_input(g, c, 0, x));
        KILN_TRY(kiln__absorb(g, c, i));
    }
    *done = true;
    return KILN_OK;
}

static kiln_status try_reshape(kiln_graph *g, int i, bool *done)
{
    *done = false;
    kiln_node *r1 = &g->nodes[i];
    if (r1->op != KILN_OP_Reshape || r1->n_out != 1 || r1->out[0] < 0 || r1->n_in < 1)
        return KILN_OK;
    int c = kiln__single_consumer(g, r1->out[0]);
    if (c < 0 || g->nodes[c].op != KILN_OP_Reshape || g->nodes[c].n_in != 2 || g->nodes[c].in[0] != r1->out[0])
        return KILN_OK;
    const kiln_tensor *s2 = kiln__const_of(g, g->nodes[c].in[1]);
    if (!s2 || (s2->dtype != KILN_DT_INT64 && s2->dtype != KILN_DT_INT32))
        return KILN_OK;
    for (int64_t k = 0; k < kiln_tensor_numel(s2); k++)
        if (kiln__get_i64(s2->dtype, s2->data, k) == 0)
            return KILN_OK;
    KILN_TRY(kiln__node_set_input(g, c, 0, r1->in[0]));
    KILN_TRY(kiln__absorb(g, c, i));
    *done = true;
    return KILN_OK;
}

kiln_status kiln__pass_cancel_transpose_reshape(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead)
            continue;
        bool done;
        KILN_TRY(try_transpose(g, i, &done));
        if (!done)
            KILN_TRY(try_reshape(g, i, &done));
        *changed += done;
    }
    (void)pc;
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}
