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
    int fp8_wq;                   /* FP8 weight scales: KILN_WQ_CHANNEL (0), KILN_WQ_TENSOR or KILN_WQ_LAYER */
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
/* A --device cuda build's report line on its INT8 layers that write float32 (held in half with
 * --float-activations, marked by kiln__precision_after_passes), counted once the device fusions are done */
kiln_status kiln__precision_half_report(kiln_graph *g, kiln_build_options *o);

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
    bool *tensor;   /* the layer's weight scaled per tensor (kiln__wq_meas_error's choice) */
    int64_t samples;   /* calibration rows the shifts were measured on */
} kiln_bc_cache;
void kiln__bc_cache_free(kiln_bc_cache *c);
kiln_status kiln__fp8_bias_correct(kiln_graph *g, const char *calib_dir, int nthreads, struct kiln_bc_cache *cache,
                                   bool choose, int *corrected, int64_t *samples);
/* Its steps for one layer (tests): the statistics of node `node` of g (*l = NULL when the layer is
 * not one bias correction takes), one input tensor added, and the shift per output channel
 * (shift may be NULL: *rows only). */
typedef struct kiln_bc_layer kiln_bc_layer;
kiln_status kiln__bc_begin(const kiln_graph *g, int node, kiln_bc_layer **l);
kiln_status kiln__bc_add(const kiln_graph *g, kiln_bc_layer *l, const kiln_tensor *x);
kiln_status kiln__bc_shift(const kiln_graph *g, const kiln_bc_layer *l, double *shift, int64_t *rows);
void kiln__bc_free(kiln_bc_layer *l);

/* FP8 weight-scale granularity per layer (calib_wq.c; docs/PRECISION.md, "FP8 weight scales per
 * layer"). During bias correction's float run, every fp8 layer that bias correction takes and whose
 * weight the build has not already tied to one scale per tensor (a --device cuda build) is also run
 * on its calibration input in float32 and in FP8 with its weight scaled per output channel
 * (KILN_WQ_CHANNEL, the default) and per tensor (KILN_WQ_TENSOR); the granularity whose output error
 * left after bias correction is smaller is kept (KILN_ATTR_WQ_TENSOR), ties per channel. A build
 * asks for it with kiln_prec_plan.fp8_wq = KILN_WQ_LAYER (kiln__fp8_bias_correct's `choose`). */
enum { KILN_WQ_CHANNEL = 0, KILN_WQ_TENSOR = 1, KILN_WQ_LAYER = 2 };
typedef struct kiln_wq_meas kiln_wq_meas;
/* Adds one input x of node `node` of g (its other inputs constants) to *m (allocated on the first
 * call, *m == NULL): runs the layer in float32 and in both FP8 variants on pool's threads. */
kiln_status kiln__wq_meas_add(const kiln_graph *g, int node, const kiln_tensor *x, kiln_pool *pool, int nthreads,
                              kiln_wq_meas **m);
/* err[v]: the summed squared output error of variant v, with each output channel's mean error
 * removed when `corrected` (the layer is bias-corrected). m may be NULL (zeros). */
void kiln__wq_meas_error(const kiln_wq_meas *m, bool corrected, double err[2]);
void kiln__wq_meas_free(kiln_wq_meas *m);
/* A copy of node n marked as an fp8 layer (KILN_ATTR_WQ and KILN_ATTR_AQ "fp8", and with tensor,
 * KILN_ATTR_WQ_TENSOR 1), n's own attributes after those; free tmp->attrs with kiln__free. */
kiln_status kiln__fp8_node(const kiln_node *n, bool tensor, kiln_node *tmp);

/* FP8 feeds of a --device cuda build (fp8_feed.c): marks every layer whose output 0 an FP8 layer quantizes next
 * (its input 0, directly or through shape-only views) with KILN_ATTR_FP8_FEED = the first such layer's activation
 * scale; *marked: how many. */
kiln_status kiln__fp8_mark_feeds(kiln_graph *g, int *marked);
/* E4M3 storage (docs/CUDA.md): after the feeds, marks KILN_ATTR_FP8_STORE (their feed scale) on FP8 convolutions
 * whose output only FP8 convolutions read, one at least as its residual, and on FP8 FusedMatMuls with an activation
 * kiln's epilogue applies (GELU...) whose output only FP8 GEMMs read as their input; *marked the number of outputs
 * held so. */
kiln_status kiln__fp8_mark_store(kiln_graph *g, int *marked);

/* The builder with planned requests (builder.c): kiln_build does this with plan NULL, after the
 * planner when o->precision is "auto". */
kiln_status kiln__build_planned(kiln_model_t m, kiln_build_options *o, const kiln_prec_plan *plan, kiln_engine_t *out);
/* FP8 weight scales chosen per model (precision_wq.c; docs/PRECISION.md, "FP8 weight scales"):
 * kiln__fp8_wq_applies says whether kiln_build takes this path (a CPU --precision fp8 build with
 * calibration data); kiln__build_fp8 builds a trial engine per recipe (KILN_WQ_CHANNEL,
 * KILN_WQ_TENSOR, KILN_WQ_LAYER), scores each on the data against the float model (mean output
 * SNR) and builds with the best. KILN_FP8_WQ=channel|tensor|layer skips the trials (measurements). */
bool kiln__fp8_wq_applies(const kiln_build_options *o);
/* The report line of a calibration ("calibration: METHOD, N samples[ (from cache)]\n") into buf. */
void kiln__calib_describe(kiln_calibration_t cal, char *buf, size_t n);
kiln_status kiln__build_fp8(kiln_model_t m, kiln_build_options *o, kiln_engine_t *out);
/* The planner behind --precision auto (precision_plan.c): measures, chooses and fills plan
 * (req owned by the caller through *req_out, free with kiln__free, and the report text). */
kiln_status kiln__plan_auto(kiln_model_t m, kiln_build_options *o, const char ***req_out, char **report,
                            kiln_calibration_t *cal);
/* kiln_build_options.float_activations: NULL / "fp32", or "fp16" / "bf16" with device KILN_DEVICE_CUDA; else
 * KILN_ERR_INVALID_ARG with the reason. */
kiln_status kiln__float_activations_check(const kiln_build_options *o);
#endif
