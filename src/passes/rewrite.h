/* Helpers shared by the fusion passes. */
#ifndef KILN_PASSES_REWRITE_H
#define KILN_PASSES_REWRITE_H
#include "passes.h"
#include "../ir/fused.h"
#include "../ir/shape.h"

/* Value id of n's input i, -1 where n has no such input or it is empty. */
static inline int kiln__in_at(const kiln_node *n, int i) { return i < n->n_in ? n->in[i] : -1; }
/* The node producing v, or NULL (graph input, constant, or dead producer). */
kiln_node *kiln__producer(kiln_graph *g, int v);
/* Value of a constant scalar (any numeric dtype, one element). */
bool kiln__const_scalar(const kiln_graph *g, int v, double *out);
/* kiln__graph_move_node_into, recording b's old node in the survivor's fused_from. Keeps the
 * node list topologically sorted. */
kiln_status kiln__move_node_into(kiln_graph *g, int a, int b);
/* Renames a node's op to kiln's fused op (domain "kiln"). */
kiln_status kiln__node_set_op(kiln_node *n, kiln_op op, const char *domain, int opset);
/* Records node n (and what it absorbed) in into->fused_from. */
kiln_status kiln__node_add_fused_node(kiln_node *into, const kiln_node *n);
/* Marks node idx dead and records its name in `into`'s fused_from. */
kiln_status kiln__absorb(kiln_graph *g, int into, int idx);
/* Maps an activation node (Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu) to
 * (kind, alpha, beta) of src/ir/fused.h; false if it is not one kiln fuses (p_fuse.c). */
bool kiln__activation_of(const kiln_graph *g, const kiln_node *a, kiln_fused_act *out);
/* Whether a and b have the same inferred shape (symbolic dims are hash-consed: equal ids, equal dims). */
bool kiln__vshape_same(const kiln_vshape *a, const kiln_vshape *b);
/* A pass that needs the values' dtypes and shapes (inferred at the graph inputs' declared shapes): runs fuse(g, vs,
 * changed) with them, nothing when the graph has subgraphs or shapes cannot be inferred (the error is not the
 * build's), then removes the nodes it killed. */
kiln_status kiln__pass_with_shapes(kiln_graph *g, kiln_status (*fuse)(kiln_graph *g, const kiln_vshape *vs, int *changed),
                                   int *changed);
/* The same with a pointer passed through to fuse (e.g. the pass context) */
kiln_status kiln__pass_with_shapes_u(kiln_graph *g,
                                     kiln_status (*fuse)(kiln_graph *g, const kiln_vshape *vs, void *user, int *changed),
                                     void *user, int *changed);
#endif
