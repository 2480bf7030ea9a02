/* The graph interpreter: runs a kiln_graph node by node with the reference kernels. */
#ifndef KILN_RUNTIME_EXEC_H
#define KILN_RUNTIME_EXEC_H

#include "../backend/kernel.h"

typedef struct kiln_frame kiln_frame;

typedef struct kiln_exec {
    int nthreads;
    const kiln_frame *frame;   /* frame of the graph the current node belongs to */
    int depth;                 /* subgraph nesting depth, to stop runaway recursion */
} kiln_exec;

/* Runs graph g. inputs[i] feeds g->inputs[i] (borrowed). On success outputs[0..g->n_outputs)
 * receive tensors owned by the caller. `parent` resolves outer-scope names (NULL at top). */
kiln_status kiln__exec_graph(const kiln_graph *g, const kiln_frame *parent, const kiln_tensor *const *inputs,
                             kiln_tensor *outputs, int nthreads, int depth);

/* For control-flow kernels: runs a subgraph of the node being executed. */
kiln_status kiln__exec_subgraph(kiln_kctx *ctx, const kiln_graph *g, const kiln_tensor *const *inputs,
                                kiln_tensor *outputs);

/* Appends "op_type (domain, opset N) node 'name'" for each node without a kernel, recursing
 * into subgraphs. Returns the count. buf may be NULL. */
int kiln__list_unsupported(const kiln_graph *g, char *buf, size_t buflen);

#endif
