/* The builder's precision hooks (precision.c; docs/PRECISION.md). */
#ifndef KILN_BUILD_PRECISION_H
#define KILN_BUILD_PRECISION_H
#include "../ir/graph.h"

/* Before the optimization passes: sets each layer's requested precision (attribute
 * kiln_prec_req) from o->precision / o->layer_precisions and, for int8 layers, calibrates m and
 * inserts Q/DQ nodes. Starts o->precision_report. No-op without precision options. */
kiln_status kiln__precision_before_passes(kiln_graph *g, kiln_model_t m, kiln_build_options *o);
/* After the passes: stores fp16/bf16 layers' weights in that format, sets every node's realized
 * precision (node->precision) and fails, naming the layers, where it differs from the request
 * (unless o->precision_fallback: then each is listed in o->precision_report). o may be NULL. */
kiln_status kiln__precision_after_passes(kiln_graph *g, kiln_build_options *o);
#endif
