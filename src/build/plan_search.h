/* The search shared by the precision planner (precision_plan.c, --precision auto) and the
 * precision debugger (precision_debug.c): candidates, their probes, the ordering and the prefix
 * bisection (plan_search.c; docs/PRECISION.md, "Automatic mixed precision"). */
#ifndef KILN_BUILD_PLAN_SEARCH_H
#define KILN_BUILD_PLAN_SEARCH_H
#include "plan_eval.h"

#define KILN_PS_MAX_ALLOW 8

/* A growing text (reports). */
typedef struct text { char *p; size_t len, cap; bool oom; } text;
void kiln__ps_printf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One progress line through o->auto_progress (when set). */
void kiln__ps_progress(const kiln_build_options *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *kiln__ps_label(const kiln_node *n);

typedef struct cand {
    int node;
    const char *pick;       /* the precision it is lowered to (NULL: not a candidate for lowering) */
    double good, snr;       /* its probe: the metric made larger-is-better, and SNR (tie-break) */
    double value;           /* the probe's metric */
    double t_hi, t_lo;      /* kernel ms in the higher and in the picked precision (speed objective) */
    const char *why;        /* why it is not lowered (NULL: lowered or not decided) */
    bool lowered;
} cand;

typedef struct search {
    kiln_plan_eval *ev;
    const kiln_build_options *o;
    int n_nodes, n;
    cand *c;                /* candidates; after ordering, the lowerable ones first, least sensitive first */
    int n_order;            /* how many of c can be lowered */
    const char **base;      /* per node: the request when not lowered (NULL: none) */
    const char **req;       /* per node: the request being measured */
    kiln_plan_score final;
} search;

/* Candidates: the weight layers of the model that no --layer-precision rule names. */
kiln_status kiln__ps_init(search *s, kiln_plan_eval *ev, const kiln_build_options *o);
void kiln__ps_free(search *s);
/* s->req = the base with every lowered candidate at its pick. */
void kiln__ps_apply(search *s);
/* Measures the plan (kiln__ps_apply) on the data; pass includes "realized"; `what` for progress. */
kiln_status kiln__ps_check(search *s, const char *what, kiln_plan_score *sc);
/* Measures candidate k lowered to prec alone on the probe batches. */
kiln_status kiln__ps_probe(search *s, int k, const char *prec, kiln_plan_score *sc);
/* Orders the candidates: those with a pick first, least sensitive (best probe) first. */
void kiln__ps_order(search *s);
/* Lowers the largest prefix of the order meeting the budget (bisection), then tries the next
 * `refine` candidates one by one; s->final holds the last passing score (the caller measured the
 * base, which passes, into it); the rest get a reason in `why`. `all` (or NULL): the score
 * already measured with every candidate lowered, used when every candidate is in the order. */
kiln_status kiln__ps_search(search *s, int refine, const kiln_plan_score *all);
/* The allowed precisions of o (default fp16, bf16, int8) as canonical names, validated. */
kiln_status kiln__ps_allowed(const kiln_build_options *o, const char **out, int *n, bool *calib);
/* The precision (a canonical name) takes its activation scales from calibration: int8, fp8. */
bool kiln__ps_needs_calib(const char *precision);
/* Calibrates m with o->calib when `need` (int8 or fp8 among the precisions), else *cal = NULL. */
kiln_status kiln__ps_calibrate(kiln_model_t m, const kiln_build_options *o, bool need, kiln_calibration_t *cal);
/* The engine layer standing for model node `name` (its own name or a node it fused), or -1. */
int kiln__ps_find_layer(kiln_engine_t e, const char *name);
double kiln__ps_total_ms(const double *t, int n);
#endif
