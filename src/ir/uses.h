/* Private to src/ir: maintenance of the use index (uses.c) by the edit functions (graph_edit.c). */
#ifndef KILN_IR_USES_H
#define KILN_IR_USES_H
#include "graph.h"

/* Registers input `slot` of node `node` as a reader of the value it reads (no-op without an
 * index, for dead nodes, or for an empty input). */
kiln_status kiln__uses_attach(kiln_graph *g, int node, int slot);
/* Unregisters input `slot` of `node` (call before changing it). */
void kiln__uses_detach(kiln_graph *g, int node, int slot);
kiln_status kiln__uses_attach_node(kiln_graph *g, int node);
void kiln__uses_detach_node(kiln_graph *g, int node);
/* Makes sure value v has a reader list (values added since the index was built). */
kiln_status kiln__uses_reserve_value(kiln_graph *g, int v);
/* After kiln__graph_remove_dead compacted the node list: node i is now map[i] (-1: removed, it
 * was dead). subgraphs_removed: a removed node had subgraphs (subgraph reads are recounted). */
void kiln__uses_renumber(kiln_graph *g, const int *map, bool subgraphs_removed);
#endif
