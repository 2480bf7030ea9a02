/* dead-nodes: removes nodes none of whose outputs are read (by a node, a graph output or a
 * subgraph), and drops initializers nothing reads. Iterates until nothing changes. */
#include "passes.h"

kiln_status kiln__pass_dead_nodes(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    (void)pc;
    *changed = 0;
    bool again = true;
    while (again) {
        /* backwards: killing a node releases its inputs, so a dead chain goes in one sweep */
        again = false;
        for (int i = g->n_nodes - 1; i >= 0; i--) {
            const kiln_node *n = &g->nodes[i];
            bool live = n->dead;
            for (int o = 0; o < n->n_out && !live; o++)
                live = n->out[o] >= 0 && kiln__value_uses(g, n->out[o]) > 0;
            if (!live) {
                kiln__node_kill(g, i);
                (*changed)++;
                again = true;
            }
        }
        if (again)
            KILN_TRY(kiln__graph_remove_dead(g));
    }
    /* unread initializers (not graph inputs): release their data (the value entry stays, harmlessly) */
    bool *input = kiln__calloc((size_t)g->n_values + 1, sizeof *input);
    if (!input)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < g->n_inputs; k++)
        if (g->inputs[k] >= 0 && g->inputs[k] < g->n_values)
            input[g->inputs[k]] = true;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].init && !kiln__value_uses(g, v) && !input[v]) {
            kiln__tensor_release(g->values[v].init);
            kiln__free(g->values[v].init);
            g->values[v].init = NULL;
        }
    kiln__free(input);
    return KILN_OK;
}
