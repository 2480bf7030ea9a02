/* FP8 weight scales chosen per model (precision.h; docs/PRECISION.md, "FP8 weight scales"): a CPU
 * `--precision fp8` build with calibration data builds one trial engine per weight-scale recipe
 * (one scale per output channel, one per tensor), each with its own bias correction, runs each on
 * the calibration data (or --val DIR) against the float model, and builds the engine with the
 * recipe whose outputs have the highest mean SNR over the samples (the lowest over the outputs);
 * a tie keeps per channel. The final build reuses the winner's calibration and bias shifts. The
 * per-layer recipe (calib_wq.c) is not a candidate: its layer-local criterion did not track the
 * network's output error (PRECISION.md); KILN_FP8_WQ=layer builds it. */
#include "plan_eval.h"
#include "../engine/engine.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

static const char *const wq_names[] = {"per output channel", "per tensor", "per layer"};
#define N_WQ 3
static const int candidates[] = {KILN_WQ_CHANNEL, KILN_WQ_TENSOR};   /* the trials, in tie-break order */
#define N_CAND ((int)(sizeof candidates / sizeof candidates[0]))

/* The recipe KILN_FP8_WQ asks for (-1: choose), or -2 for a value it does not know. */
static int wq_forced(void)
{
    static const char *const keys[] = {"channel", "tensor", "layer"};
    const char *env = getenv("KILN_FP8_WQ");
    if (!env || !env[0] || !strcmp(env, "auto"))
        return -1;
    for (int v = 0; v < N_WQ; v++)
        if (!strcmp(env, keys[v]))
            return v;
    return -2;
}

bool kiln__fp8_wq_applies(const kiln_build_options *o)
{
    return o && o->precision && !strcmp(o->precision, "fp8") && o->device != KILN_DEVICE_CUDA && o->calib &&
           o->calib->data_dir;
}

/* Builds the trial engine of recipe v and scores it (*snr: its mean output SNR in dB). */
static kiln_status trial(kiln_plan_eval *ev, const kiln_build_options *o, kiln_calibration_t cal, int v,
                         kiln_bc_cache *bias, double *snr)
{
    kiln_build_options t = ev->trial;
    t.precision = o->precision;   /* the user's request, rules included */
    kiln_prec_plan plan = {.cal = cal, .bias = bias, .fp8_wq = v};
    kiln_engine_t e = NULL;
    kiln_status st = kiln__build_planned(ev->m, &t, &plan, &e);
    kiln__free(t.report);
    kiln__free(t.precision_report);
    kiln_plan_score s;
    if (st == KILN_OK)
        st = kiln__peval_score(ev, e, 0, &s);
    if (st == KILN_OK)
        *snr = isnan(s.mean_snr_db) ? -INFINITY : s.mean_snr_db;
    kiln_engine_free(e);
    return st;
}

/* Appends one formatted line to the report *s (*len bytes); out of memory loses only the line. */
static void report_line(char **s, size_t *len, const char *fmt, ...) KILN_PRINTF(3, 4);
static void report_line(char **s, size_t *len, const char *fmt, ...)
{
    char line[200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    n = n < 0 ? 0 : n >= (int)sizeof line ? (int)sizeof line - 1 : n;
    char *p = kiln__realloc(*s, *len + (size_t)n + 1);
    if (!p)
        return;
    memcpy(p + *len, line, (size_t)n + 1);
    *s = p, *len += (size_t)n;
}

kiln_status kiln__build_fp8(kiln_model_t m, kiln_build_options *o, kiln_engine_t *out)
{
    int forced = wq_forced();
    if (forced == -2)
        return kiln__err(KILN_ERR_INVALID_ARG, "KILN_FP8_WQ='%s': want auto, channel, tensor or layer",
                         getenv("KILN_FP8_WQ"));
    kiln_calibration_t cal = NULL;
    KILN_TRY(kiln_calibrate(m, o->calib, &cal));
    char line[160];
    kiln__calib_describe(cal, line, sizeof line);
    kiln_bc_cache bias[N_WQ];
    memset(bias, 0, sizeof bias);
    kiln_plan_eval ev;
    memset(&ev, 0, sizeof ev);
    kiln_build_options eo = *o;
    eo.accuracy_budget = "snr>=0db";   /* the planner's scoring wants a budget: only the SNR is read */
    kiln_status st = forced >= 0 ? KILN_OK : kiln__peval_open(&ev, m, &eo, cal);
    int best = forced >= 0 ? forced : KILN_WQ_CHANNEL;
    double snr[N_WQ] = {-INFINITY, -INFINITY, -INFINITY};
    char *rep = NULL;
    size_t len = 0;
    report_line(&rep, &len, "%s", line);
    for (int c = 0; forced < 0 && st == KILN_OK && c < N_CAND; c++) {
        int v = candidates[c];
        st = trial(&ev, o, cal, v, &bias[v], &snr[v]);
        if (st == KILN_OK && snr[v] > snr[best])
            best = v;
        if (st == KILN_OK)
            report_line(&rep, &len, "fp8 weight scales %s: mean output SNR %.2f dB on %d batches of the data\n",
                        wq_names[v], snr[v], ev.n_batches);
    }
    if (st == KILN_OK)
        report_line(&rep, &len, "fp8 weight scales: %s%s\n", wq_names[best],
                    forced >= 0 ? " (KILN_FP8_WQ)" : " (the highest SNR)");
    kiln__peval_close(&ev);
    if (st == KILN_OK) {
        kiln_prec_plan plan = {.cal = cal, .bias = &bias[best], .fp8_wq = best, .report = rep};
        st = kiln__build_planned(m, o, &plan, out);
    }
    for (int v = 0; v < N_WQ; v++)
        kiln__bc_cache_free(&bias[v]);
    kiln__free(rep);
    kiln_calibration_free(cal);
    return st;
}
