/* The model object behind the public kiln_model_t handle. */
#ifndef KILN_RUNTIME_MODEL_H
#define KILN_RUNTIME_MODEL_H
#include "../onnx/onnx_import.h"

struct kiln_model {
    kiln_graph *g;
    kiln_onnx_model_info info;
};

kiln_status kiln__graph_check_supported(const kiln_graph *g);
/* Validates a fed tensor against the declared type/shape of graph value v. */
kiln_status kiln__check_input(const kiln_value *v, const kiln_tensor *t);
kiln_status kiln__engine_check_profiles(const struct kiln_engine *e, int n, const char *const *names,
                                        const kiln_tensor *ts);
struct kiln_layer;
/* layers: g's layers restored from an engine's layer plan (layers.h), or NULL. */
kiln_status kiln__graph_run_named(const kiln_graph *g, const struct kiln_layer *layers, int num_inputs,
                                  const char *const *input_names, const kiln_tensor *inputs,
                                  const kiln_run_options *opts, int *num_outputs, kiln_tensor **outputs);

/* kiln__graph_run_named over an engine's graph with its layer plan (restored for this run). */
kiln_status kiln__engine_run_named(const struct kiln_engine *e, int num_inputs, const char *const *input_names,
                                   const kiln_tensor *inputs, const kiln_run_options *opts, int *num_outputs,
                                   kiln_tensor **outputs);

/* The same with instrumentation (exec.h's kiln_hooks, e.g. an observe callback; NULL = none). */
struct kiln_hooks;
kiln_status kiln__graph_run_hooked(const kiln_graph *g, const struct kiln_layer *layers, int num_inputs,
                                   const char *const *input_names, const kiln_tensor *inputs,
                                   const kiln_run_options *opts, const struct kiln_hooks *hooks,
                                   int *num_outputs, kiln_tensor **outputs);

kiln_status kiln__context_enable_profiling(kiln_context_t c);
/* Per-node timing off again (kiln_context_profile's runs only: later runs are not timed, and capture CUDA graphs) */
void kiln__context_disable_profiling(kiln_context_t c);
const double *kiln__context_node_ns(kiln_context_t c);
/* Ignore the engine's stored plan so the first run records shapes (for inspect). */
void kiln__context_replan_on_first_run(kiln_context_t c);
/* Per value id: dtype and shape recorded by the last planning run (data NULL), or NULL. */
const kiln_tensor *kiln__context_value_meta(kiln_context_t c);
kiln_engine_t kiln__context_engine(kiln_context_t c);
/* Counters of the context's thread pool (all zero before its first run). */
void kiln__context_pool_stats(kiln_context_t c, kiln_pool_stats *out);

#endif
