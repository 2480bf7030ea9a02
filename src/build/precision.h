/* The builder's precision hooks (precision.c; docs/PRECISION.md). */
#ifndef KILN_BUILD_PRECISION_H
#define KILN_BUILD_PRECISION_H
#include "../ir/graph.h"
#include "../quant/quant.h"

/* Per-layer requests made by the precision planner (precision_plan.c) rather than by options:
 * req[i] is node i of the model graph's requested precision (a name kiln__precision_code accepts)
 * or NULL; with mark_auto, each node with a request is recorded as planned ("auto"). `cal` (or
 * NULL) is a calibration reused for int8 layers instead of calibrating again; `report` (or NULL)
 * starts the precision report; `bias` (or NULL) keeps the FP8 bias corrections from one trial
 * build to the next. Rules (--layer-precision) still apply after these requests. */
typedef struct kiln_prec_plan {
    int n_nodes;
    const char *const *req;
    bool mark_auto;
    kiln_calibration_t cal;
    const char *report;
    struct kiln_bc_cache *bias;   /* FP8 bias corrections measured by earlier trial builds, or NULL */
} kiln_prec_plan;

/* Before the optimization passes: sets each layer's requested precision (attribute
 * kiln_prec_req) from o->precision / o->layer_precisions (and plan, or NULL) and, for int8 layers,
 * calibrates m (or takes plan->cal) and inserts Q/DQ nodes. Starts o->precision_report. No-op
 * without precision options or plan. */
kiln_status kiln__precision_before_passes(kiln_graph *g, kiln_model_t m, kiln_build_options *o,
                                          const kiln_prec_plan *plan);
/* After the passes: stores fp16/bf16 layers' weights in that format, sets every node's realized
 * precision (node->precision) and fails, naming the layers, where it differs from the request
 * (unless o->precision_fallback: then each is listed in o->precision_report). o may be NULL. */
kiln_status kiln__precision_after_passes(kiln_graph *g, kiln_build_options *o);

/* What the planner needs to know of precisions: a precision name's code (>= 0), -2 for a name
 * kiln knows but cannot build yet, -1 otherwise; its canonical name (NULL if out of range). */
int kiln__precision_code(const char *name);
const char *kiln__precision_name(int code);
/* A layer --precision applies to (Conv / MatMul / Gemm with a constant weight). */
bool kiln__precision_weight_layer(const kiln_graph *g, int node);
/* True when one of o's --layer-precision rules names node n (by name or op type). */
bool kiln__precision_rule_names(const kiln_build_options *o, const kiln_node *n);

/* Int8 activations: kiln__value_lower_bound (src/quant/range.c, quant.h) tells the lower bound
 * of a value by what produces it. */
/* The int8 parameters of activation v with calibrated threshold t > 0 (PRECISION.md, "Implicit
 * INT8"): int8 over [-t, t] (scale t / 127, zero point 0); uint8 over [0, t] (t / 255, zero point
 * 0) when v cannot be negative; uint8 over [lo, t] when v cannot be below lo, -t < lo < 0: scale
 * (t - lo) / 255 and the zero point rint(-lo / scale) that puts 0 on the grid, so the codes int8
 * spends below lo (HardSwish, SiLU, Gelu, ...: nearly half of them) resolve [lo, t] instead. */
void kiln__int8_act_params(const kiln_graph *g, int v, float t, bool *u8, float *scale, int *zp);

/* FP8 bias correction (calib_bias.c; docs/PRECISION.md, "FP8 bias correction"). Runs g (float)
 * on the calibration set in calib_dir and shifts the bias of every Conv (2-D), Gemm (no transA,
 * beta 1) and MatMul (read by an Add of a constant vector) carrying an FP8 activation scale
 * (KILN_ATTR_AQ_SCALE) by the mean error its rounding causes per output channel on that data,
 * E[W x] - E[Wq xq], with Wq the weight as the fp8 kernel stores it and xq = fp8(x / s) * s,
 * means taken at each weight tap over the output positions (zero padding included). The layer
 * then reads a new bias constant. *corrected: layers shifted; *samples: rows of data used (0
 * when every layer's shift came from `cache`). `cache` (or NULL) keeps the shifts by layer name
 * for further builds of the same model, scales and data (the planner's trial builds): the shifts
 * are measured on the float graph, so they do not depend on which other layers are lowered. */
typedef struct kiln_bc_cache {
    int n, cap;
    char **name;
    int64_t *rows;
    double **shift;
} kiln_bc_cache;
void kiln__bc_cache_free(kiln_bc_cache *c);
kiln_status kiln__fp8_bias_correct(kiln_graph *g, const char *calib_dir, int nthreads, struct kiln_bc_cache *cache,
                                   int *corrected, int64_t *samples);
/* Its steps for one layer (tests): the statistics of node `node` of g (*l = NULL when the layer is
 * not one bias correction takes), one input tensor added, and the shift per output channel
 * (shift may be NULL: *rows only). */
typedef struct kiln_bc_layer kiln_bc_layer;
kiln_status kiln__bc_begin(const kiln_graph *g, int node, kiln_bc_layer **l);
kiln_status kiln__bc_add(const kiln_graph *g, kiln_bc_layer *l, const kiln_tensor *x);
kiln_status kiln__bc_shift(const kiln_graph *g, const kiln_bc_layer *l, double *shift, int64_t *rows);
void kiln__bc_free(kiln_bc_layer *l);

/* The builder with planned requests (builder.c): kiln_build does this with plan NULL, after the
 * planner when o->precision is "auto". */
kiln_status kiln__build_planned(kiln_model_t m, kiln_build_options *o, const kiln_prec_plan *plan, kiln_engine_t *out);
/* The planner behind --precision auto (precision_plan.c): measures, chooses and fills plan
 * (req owned by the caller through *req_out, free with kiln__free, and the report text). */
kiln_status kiln__plan_auto(kiln_model_t m, kiln_build_options *o, const char ***req_out, char **report,
                            kiln_calibration_t *cal);
#endif
