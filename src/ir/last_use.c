/* Where each value of a graph is last read: by a node's inputs, or by name from a subgraph of a
 * node (If / Loop / Scan bodies, at any depth of nesting), which reads it while that node runs. */
#include "graph.h"

/* Is `name` defined by a graph strictly between sg and g (so sg's reference resolves there)? */
static bool defined_between(const kiln_graph *g, const kiln_graph *sg, const char *name)
{
    for (const kiln_graph *p = sg->parent; p && p != g; p = p->parent) {
        int v = kiln__graph_find(p, name);
        if (v >= 0 && !p->values[v].is_outer)
            return true;
    }
    return false;
}

/* Marks the values of g that subgraph sg (below node `node` of g) reads from outside. */
static void mark_outer_reads(const kiln_graph *g, const kiln_graph *sg, int node, int *last)
{
    for (int v = 0; v < sg->n_values; v++) {
        if (!sg->values[v].is_outer || defined_between(g, sg, sg->values[v].name))
            continue;
        int u = kiln__graph_find(g, sg->values[v].name);
        if (u >= 0 && last[u] < node)
            last[u] = node;
    }
    for (int i = 0; i < sg->n_nodes; i++) {
        const kiln_node *n = &sg->nodes[i];
        for (int a = 0; a < n->n_attr; a++) {
            if (n->attrs[a].g)
                mark_outer_reads(g, n->attrs[a].g, node, last);
            for (int k = 0; n->attrs[a].graphs && k < n->attrs[a].n; k++)
                mark_outer_reads(g, n->attrs[a].graphs[k], node, last);
        }
    }
}

void kiln__mark_last_uses(const kiln_graph *g, int *last)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0 && n->in[j] < g->n_values && last[n->in[j]] < i)
                last[n->in[j]] = i;
        for (int a = 0; a < n->n_attr; a++) {
            if (n->attrs[a].g)
                mark_outer_reads(g, n->attrs[a].g, i, last);
            for (int k = 0; n->attrs[a].graphs && k < n->attrs[a].n; k++)
                mark_outer_reads(g, n->attrs[a].graphs[k], i, last);
        }
    }
}
