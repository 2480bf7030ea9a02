/* dead-nodes: removes nodes none of whose outputs are read (by a node, a graph output or a
 * subgraph), and drops initializers nothing reads. Iterates until nothing changes. */
#include "passes.h"

kiln_status kiln__pass_dead_nodes(kiln_graph *g, int *changed)
{
    *changed = 0;
    int *uses = kiln__calloc((size_t)g->n_values + 1, sizeof(int));
    if (!uses)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    bool sub = kiln__graph_has_subgraphs(g);
    bool again = true;
    while (again) {
        again = false;
        memset(uses, 0, sizeof(int) * (size_t)g->n_values);
        for (int i = 0; i < g->n_nodes; i++)
            for (int j = 0; j < g->nodes[i].n_in; j++)
                if (g->nodes[i].in[j] >= 0)
                    uses[g->nodes[i].in[j]]++;
        for (int o = 0; o < g->n_outputs; o++)
            uses[g->outputs[o]]++;
        for (int i = g->n_nodes - 1; i >= 0; i--) {
            kiln_node *n = &g->nodes[i];
            bool live = false;
            for (int o = 0; o < n->n_out && !live; o++) {
                int v = n->out[o];
                live = v >= 0 && (uses[v] > 0 || (sub && kiln__value_uses(g, v) > 0));
            }
            if (!live) {
                for (int j = 0; j < n->n_in; j++)
                    if (n->in[j] >= 0)
                        uses[n->in[j]]--;
                n->dead = true;
                (*changed)++;
                again = true;
            }
        }
        if (again)
            kiln__graph_remove_dead(g);
    }
    /* unread initializers: release their data (the value entry stays, harmlessly) */
    memset(uses, 0, sizeof(int) * (size_t)g->n_values);
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] >= 0)
                uses[g->nodes[i].in[j]]++;
    for (int o = 0; o < g->n_outputs; o++)
        uses[g->outputs[o]]++;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].init && !uses[v] && !(sub && kiln__value_uses(g, v) > 0)) {
            bool is_input = false;
            for (int k = 0; k < g->n_inputs; k++)
                is_input |= g->inputs[k] == v;
            if (is_input)
                continue;
            kiln__tensor_release(g->values[v].init);
            kiln__free(g->values[v].init);
            g->values[v].init = NULL;
        }
    kiln__free(uses);
    return KILN_OK;
}
