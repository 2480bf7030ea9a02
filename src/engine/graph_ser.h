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

/* LAYERS section (layers_ser.c): writes e's layer records; reads and validates them against the
 * graph (one per top-level node) and the PACKED bytes (blobs inside, 64-byte aligned, not
 * overlapping). */
struct kiln_engine;
void kiln__layers_write(kiln_wbuf *w, const struct kiln_engine *e);
kiln_status kiln__layers_read(kiln_rbuf *r, struct kiln_engine *e);
#endif
