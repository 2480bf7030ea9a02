/* constant-fold: evaluates every node whose inputs are all constants (with the builder's
 * eval_node callback, i.e. the reference kernels) and turns its outputs into initializers. Constant nodes become initializers this way too.
 * Skips nodes with subgraphs, nondeterministic ops, and outputs larger than a size cap (folding
 * those would bloat the engine, e.g. a huge ConstantOfShape). */
#include "passes.h"

#define FOLD_MAX_BYTES ((size_t)64 << 20)

static bool foldable(const kiln_graph *g, const bool *is_input, const kiln_node *n)
{
    if (n->dead || n->op == KILN_OP_UNKNOWN)
        return false;
    switch (n->op) {
    case KILN_OP_If: case KILN_OP_Loop: case KILN_OP_Scan:
        return false;
    default:
        break;
    }
    for (int a = 0; a < n->n_attr; a++)
        if (n->attrs[a].g || n->attrs[a].graphs)
            return false;
    for (int j = 0; j < n->n_in; j++) {
        int v = n->in[j];
        if (v < 0)
            continue;
        /* an input with an initializer default can be overridden by the caller */
        if (!g->values[v].init || is_input[v])
            return false;
    }
    return true;
}

static kiln_status fold_node(kiln_graph *g, const kiln_pass_ctx *pc, int idx, bool *folded)
{
    kiln_node *n = &g->nodes[idx];
    *folded = false;
    const kiln_tensor *in[16];
    kiln_tensor outs[16];
    if (n->n_in > 16 || n->n_out > 16)
        return KILN_OK;
    for (int j = 0; j < n->n_in; j++)
        in[j] = n->in[j] >= 0 ? g->values[n->in[j]].init : NULL;
    memset(outs, 0, sizeof outs);
    kiln_status st = pc->eval_node(pc->user, n, in, outs);
    bool ok = st == KILN_OK;
    for (int o = 0; ok && o < n->n_out; o++)
        ok = outs[o].data && outs[o].nbytes <= FOLD_MAX_BYTES;
    if (!ok) {
        /* leave the node to fail (or succeed) at run time with its real inputs */
        for (int o = 0; o < n->n_out; o++)
            kiln__tensor_release(&outs[o]);
        kiln_clear_last_error();
        return KILN_OK;
    }
    kiln_status st2 = KILN_OK;
    for (int o = 0; o < n->n_out; o++) {
        if (n->out[o] >= 0 && st2 == KILN_OK)
            st2 = kiln__value_set_const(g, n->out[o], &outs[o]);
        kiln__tensor_release(&outs[o]);   /* moved out unless unused or out of memory */
    }
    KILN_TRY(st2);
    kiln__node_kill(g, idx);
    *folded = true;
    return KILN_OK;
}

kiln_status kiln__pass_constant_fold(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (!pc || !pc->eval_node)
        return KILN_OK;
    bool *is_input = kiln__calloc((size_t)g->n_values + 1, sizeof *is_input);
    if (!is_input)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < g->n_inputs; k++)
        if (g->inputs[k] >= 0 && g->inputs[k] < g->n_values)
            is_input[g->inputs[k]] = true;
    /* nodes are topologically sorted, so one sweep folds whole constant chains */
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        bool folded = false;
        if (foldable(g, is_input, &g->nodes[i]))
            st = fold_node(g, pc, i, &folded);
        *changed += folded;
    }
    kiln__free(is_input);
    KILN_TRY(st);
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}
