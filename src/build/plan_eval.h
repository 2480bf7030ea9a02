/* Measurements for the precision planner (plan_eval.c): the data set, the float reference's
 * outputs on it, trial engines built with per-layer requests and compared against the reference
 * with the verify metrics under one budget, and per-layer kernel times. */
#ifndef KILN_BUILD_PLAN_EVAL_H
#define KILN_BUILD_PLAN_EVAL_H
#include "precision.h"

typedef struct kiln_plan_eval {
    kiln_model_t m;
    kiln_build_options trial;      /* the user's options for trial builds: no tactics, fallback on */
    kiln_calibration_t cal;        /* borrowed: int8 trials reuse it */
    kiln_budget budget;
    int n_in, n_out, n_batches;
    const char **in_names;
    kiln_tensor *ins;              /* [batch * n_in] */
    kiln_tensor **refs;            /* [batch][n_out]: the float model's outputs */
    int probe_batches, max_batches;
    int builds;                    /* trial engines built */
    kiln_bc_cache bias;            /* FP8 bias corrections, measured once for all trials */
} kiln_plan_eval;

typedef struct kiln_plan_score {
    double value;                  /* the budget's metric, worst over the outputs */
    double snr_db;                 /* the worst output's worst-sample SNR (a finer tie-break) */
    double mean_snr_db;            /* the lowest over the outputs of the mean SNR over the samples */
    bool pass;                     /* every output meets the budget (and is finite) */
    bool realized;                 /* every requested layer runs in its requested precision */
} kiln_plan_score;

/* Reads the data (o->val_dir, else o->calib->data_dir), cut into batches the model accepts, and
 * runs the reference on it. */
kiln_status kiln__peval_open(kiln_plan_eval *ev, kiln_model_t m, const kiln_build_options *o, kiln_calibration_t cal);
void kiln__peval_close(kiln_plan_eval *ev);
/* Builds a trial engine with requests req[node] (NULL entries: none); *realized as above. */
kiln_status kiln__peval_build(kiln_plan_eval *ev, const char *const *req, kiln_engine_t *e, bool *realized);
/* Runs e on the first `batches` batches (0: max_batches) and scores it against the reference. */
kiln_status kiln__peval_score(kiln_plan_eval *ev, kiln_engine_t e, int batches, kiln_plan_score *s);
/* Build + score. */
kiln_status kiln__peval_measure(kiln_plan_eval *ev, const char *const *req, int batches, kiln_plan_score *s);
/* Per-layer mean times (ms; kiln_engine_num_layers entries) of e on the first batch, `rounds`
 * profiles of `runs` runs each: layer_ms[i] becomes the minimum of its value and every round's
 * (start from +infinity). */
kiln_status kiln__peval_time(kiln_plan_eval *ev, kiln_engine_t e, int rounds, int runs, double *layer_ms);
/* A score's metric made "larger is better" (similarities as they are, errors negated, NaN -inf). */
double kiln__peval_goodness(const kiln_plan_eval *ev, double value);
#endif
