/* The builder (src/build): ONNX model -> optimized graph -> engine (kiln_build, builder.c), tactic
 * timing and the calibration run (tactics.c), precision planning (precision.c). The builder runs
 * the interpreter for tactic timing and the calibration run's memory plan: the one arrow
 * build -> runtime (docs/ARCHITECTURE.md). */
#ifndef KILN_BUILD_BUILD_H
#define KILN_BUILD_BUILD_H
#include "../engine/engine.h"
#include "../runtime/exec.h"

typedef struct kiln_calib_result {
    bool calibrated;            /* false: no concrete shapes (or synthetic data invalid) */
    char skipped[384];          /* with concrete shapes and no plan: why (warned about; the passes report says it) */
    bool inferred;              /* the plan sized by shape inference: the model was not run */
    int tuned, from_cache;      /* layers timed now / taken from the timing cache */
    kiln_plan plan;             /* memory plan at the calibration shapes */
    int n_inputs;
    int ndim[KILN_MAX_CALIB_INPUTS];
    int64_t dims[KILN_MAX_CALIB_INPUTS][KILN_MAX_DIMS];
} kiln_calib_result;

/* The memory plan (host: an engine the CPU runs, whose plan may compute a FusedConv in place over its residual --
 * runtime/plan.h KILN_PLAN_CONV_RES; not for device engines) at the opt shapes, and tactic timing (+ timing cache).
 * Without tactic timing the plan's sizes come from shape inference where every node output's size resolves
 * (kiln__plan_bytes_inferred; KILN_BUILD_PLAN_RUN=1 forces the run, for tests); else the optimized graph runs once
 * on synthetic inputs. A run stopped by `ctl` (time budget, cancellation) is an error; other run failures only skip
 * the calibration. */
kiln_status kiln__builder_calibrate(struct kiln_engine *e, const char *cache_path, int nthreads, bool tune_tactics,
                                    bool host, kiln_calib_result *res, const kiln_run_ctl *ctl);

/* Each node output's byte size (bytes[value id]) at the input shapes given (dtype and dims; data unused) by shape
 * inference, and where meta is not NULL its dtype and dims (meta[value id], no data: the planner's Concat check);
 * false (no error set) where some output's size or dtype does not resolve without data. */
bool kiln__plan_bytes_inferred(const kiln_graph *g, const kiln_tensor *shapes, size_t *bytes, kiln_tensor *meta);

/* Each graph input's dtype and dims (data NULL) at the calibration shapes (the first profile's
 * opt shapes, else static dims); false if some input has no concrete shape. */
bool kiln__builder_input_shapes(const struct kiln_engine *e, kiln_tensor *shapes);
bool kiln__engine_shapes_fixed(const struct kiln_engine *e);
/* What the optimization passes need from the builder (constant evaluation by the reference kernels). */
const struct kiln_pass_ctx *kiln__builder_pass_ctx(void);

/* Timing cache (tactics.c): the "entries" object of a cache document held in memory (a new
 * reference), or NULL when buf is not a kiln timing cache; and the tactic an entry selects (one of
 * kiln's tactic names, or NULL). */
struct json_t;
struct json_t *kiln__timing_cache_parse(const char *buf, size_t len);
const char *kiln__timing_cache_tactic(struct json_t *entries, const char *key);
/* The thread tactic of a layer (tactics.c): 0 "mt" (all threads) or 1 "st" (one thread) from the
 * samples of kiln__tactic_time over these two: kiln__tactic_pick's choice, except that a layer
 * whose fastest one-thread run takes KILN_TACTIC_ST_MAX_NS or more keeps all threads. Splitting
 * such a layer costs a fork and a join (microseconds) against a milliseconds-long loop; when one
 * thread still measured faster, another process held a core during the build (a loaded machine),
 * and the engine must not keep that: BERT-base's FFN GEMMs built so ran on one thread. */
#define KILN_TACTIC_ST_MAX_NS 250e3
int kiln__tactic_pick_threads(const double *ns, int rounds);

#endif
