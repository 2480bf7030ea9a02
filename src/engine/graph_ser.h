/* Serialization of a kiln_graph (with subgraphs) for engine files. */
#ifndef KILN_ENGINE_GRAPH_SER_H
#define KILN_ENGINE_GRAPH_SER_H
#include "../ir/graph.h"
#include "bytes.h"

/* Writes g's structure to gw and its initializer data (64-byte aligned) to weights. */
kiln_status kiln__graph_write(kiln_wbuf *gw, kiln_wbuf *weights, const kiln_graph *g);
/* Reads a graph. Initializer data is copied out of `weights`, or, when weights->lasting, used in
 * place (the tensors borrow it: its owner keeps it alive longer than the graph). Everything is
 * validated. */
kiln_status kiln__graph_read(kiln_rbuf *r, const kiln_rbuf *weights, kiln_graph *parent, int depth, kiln_graph **out);
#endif
