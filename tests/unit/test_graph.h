/* Graph building shared by the unit tests that assemble kiln_graphs by hand. */
#ifndef KILN_TEST_GRAPH_H
#define KILN_TEST_GRAPH_H
#include "ir/graph.h"
#include "test.h"

/* Appends op(in...) named `name` (domain "", opset 17) writing value `out`; returns the node index. */
static inline int test_graph_node(kiln_graph *g, kiln_op op, const char *name, int n_in, const int *in, int out)
{
    int i = kiln__graph_add_node(g);
    CHECK(i >= 0);
    kiln_node *n = &g->nodes[i];
    n->op = op;
    n->op_type = kiln__strdup(kiln__op_name(op));
    n->name = kiln__strdup(name);
    n->domain = kiln__strdup("");
    n->opset = 17;
    n->out = kiln__malloc(sizeof(int));
    n->n_out = 1;
    n->out[0] = -1;
    CHECK(kiln__node_set_inputs(g, i, n_in, in) == KILN_OK);
    kiln__node_set_output(g, i, 0, out);
    return i;
}

/* A new value named `name` of g. */
static inline int test_graph_value(kiln_graph *g, const char *name)
{
    int v = kiln__graph_add_value(g, name);
    CHECK(v >= 0);
    return v;
}

/* A new constant of g holding t (moved in). */
static inline int test_graph_const(kiln_graph *g, const char *name, kiln_tensor t)
{
    int v = kiln__graph_add_const(g, name, &t);
    CHECK(v >= 0);
    return v;
}

#endif
