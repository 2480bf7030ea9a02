/* Helpers shared by the public introspection files (api_*.c). */
#ifndef KILN_RUNTIME_API_H
#define KILN_RUNTIME_API_H
#include "../ir/graph.h"

/* Declared type of graph input/output i of g into *out; `fn` names the public function in errors. */
kiln_status kiln__graph_io_type(const char *fn, const kiln_graph *g, kiln_io io, int i, kiln_type_info *out);
/* Declared dim d of graph input/output i of g. */
kiln_status kiln__graph_io_dim(const char *fn, const kiln_graph *g, kiln_io io, int i, int d, int64_t *size,
                               const char **name);
/* An out-of-range index error: "fn: what i out of range [0, n)". */
kiln_status kiln__index_err(const char *fn, const char *what, int i, int n);

#endif
