/* remove-identity: drops Identity and inference-mode Dropout nodes by rewiring their readers to
 * the input. A node whose output is a graph output is kept (the output name must survive). */
#include "passes.h"

kiln_status kiln__pass_remove_identity(kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;   /* outer-scope reads by name would break; stay conservative */
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead || n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0)
            continue;
        if (n->op == KILN_OP_Dropout) {
            /* only when the mask is not used and training_mode is absent or constant false */
            if (n->n_out > 1 && n->out[1] >= 0 && kiln__value_uses(g, n->out[1]) > 0)
                continue;
            if (n->n_in > 2 && n->in[2] >= 0) {
                const kiln_tensor *t = kiln__const_of(g, n->in[2]);
                if (!t || t->nbytes < 1 || ((const uint8_t *)t->data)[0])
                    continue;
            }
        } else if (n->op != KILN_OP_Identity) {
            continue;
        }
        if (kiln__value_is_output(g, n->out[0]))
            continue;
        KILN_TRY(kiln__graph_replace_uses(g, n->out[0], n->in[0]));
        kiln__node_kill(g, i);
        (*changed)++;
    }
    (void)pc;
    return *changed ? kiln__graph_remove_dead(g) : KILN_OK;
}
