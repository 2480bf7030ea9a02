/* The precision planner (docs/PRECISION.md, "Automatic mixed precision"):
 *   --precision auto      each candidate layer (Conv / MatMul / Gemm with a constant weight, not
 *                         named by a --layer-precision rule) is timed in every allowed precision
 *                         (speed objective: whole-model trial engines profiled per layer) and
 *                         probed alone (the model-output error when only it is lowered, on the
 *                         data, with the verify metrics); the options that are faster, realizable
 *                         and within the budget alone are ordered least sensitive first; the
 *                         largest prefix meeting the budget on the whole model is found by
 *                         bisection and then the next layers are tried one by one (backing off
 *                         each that breaks the budget);
 *   kiln debug precision  the same search from every candidate lowered: the layers left out of
 *                         the prefix, minimized one by one, are the set that must stay higher.
 * Measurements: plan_eval.c. */
#include "plan_search.h"
#include "../engine/engine.h"
#include "../runtime/model.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#define MAX_ALLOW KILN_PS_MAX_ALLOW
#define MAX_REFINE 8             /* layers tried one by one after the prefix */
#define MIN_GAIN_FRACTION 0.02   /* a lowering must save 2% of the layer's time (timing noise) */

static kiln_status nomem(void) { return kiln__err(KILN_ERR_NOMEM, "out of memory"); }

/* ---- --precision auto ---- */

typedef struct timing {
    kiln_engine_t e;
    double *ms;
    int n;
} timing;

/* Builds the trial engine of req for timing (layer times +infinity until timed). */
static kiln_status timing_build(kiln_plan_eval *ev, const char *const *req, timing *t)
{
    bool realized;
    KILN_TRY(kiln__peval_build(ev, req, &t->e, &realized));
    t->n = kiln_engine_num_layers(t->e);
    t->ms = kiln__calloc((size_t)t->n + 1, sizeof *t->ms);
    if (!t->ms)
        return nomem();
    for (int i = 0; i < t->n; i++)
        t->ms[i] = INFINITY;
    return KILN_OK;
}

/* Times two engines alternately (the machine's load changes between them), minimum per layer. */
static kiln_status time_pair(kiln_plan_eval *ev, timing *a, timing *b, int rounds)
{
    for (int r = 0; r < rounds; r++) {
        KILN_TRY(kiln__peval_time(ev, a->e, 1, 3, a->ms));
        KILN_TRY(kiln__peval_time(ev, b->e, 1, 3, b->ms));
    }
    return KILN_OK;
}

static void timing_free(timing *t)
{
    kiln_engine_free(t->e);
    kiln__free(t->ms);
    memset(t, 0, sizeof *t);
}

static double layer_ms(const timing *t, const char *name)
{
    int i = kiln__ps_find_layer(t->e, name);
    return i < 0 ? NAN : t->ms[i];
}

static bool is_qdq(const kiln_node *n) { return n->op == KILN_OP_QuantizeLinear || n->op == KILN_OP_DequantizeLinear; }

/* Charges the time of each QuantizeLinear / DequantizeLinear the lowering added to the layer it
 * serves (a Q to the layer reading its output, a DQ to the layer writing its input), so a layer's
 * time in a lower precision includes the conversions at the edges of the lowered region. */
static void charge_conversions(timing *t)
{
    const kiln_graph *g = t->e->g;
    for (int i = 0; i < g->n_nodes && i < t->n; i++) {
        const kiln_node *n = &g->nodes[i];
        if (!is_qdq(n) || n->n_in < 1 || n->n_out < 1 || n->in[0] < 0 || n->out[0] < 0)
            continue;
        int to = -1;
        if (n->op == KILN_OP_DequantizeLinear)
            to = g->values[n->in[0]].producer;
        for (int j = 0; n->op == KILN_OP_QuantizeLinear && j < g->n_nodes && to < 0; j++)
            for (int k = 0; k < g->nodes[j].n_in && !is_qdq(&g->nodes[j]); k++)
                if (g->nodes[j].in[k] == n->out[0])
                    to = j;
        if (to >= 0 && to < t->n && !is_qdq(&g->nodes[to])) {
            t->ms[to] += t->ms[i];
            t->ms[i] = 0;
        }
    }
}

/* Speed objective: each candidate's kernel time in the base and in every allowed precision (with
 * the conversions charged to it). */
static kiln_status time_options(search *s, const char *const *allow, int na, double (*t)[MAX_ALLOW + 1], double *t_model)
{
    const kiln_graph *g = s->ev->m->g;
    timing base = {0};
    kiln_status st = timing_build(s->ev, s->base, &base);
    for (int p = 0; st == KILN_OK && p < na; p++) {
        timing lo = {0};
        kiln__ps_progress(s->o, "timing the layers: fp32 and %s", allow[p]);
        memcpy(s->req, s->base, sizeof *s->req * (size_t)s->n_nodes);
        for (int k = 0; k < s->n; k++)
            s->req[s->c[k].node] = allow[p];
        if ((st = timing_build(s->ev, s->req, &lo)) == KILN_OK && (st = time_pair(s->ev, &base, &lo, 2)) == KILN_OK)
            charge_conversions(&lo);
        for (int k = 0; st == KILN_OK && k < s->n; k++)
            t[k][p + 1] = layer_ms(&lo, kiln__ps_label(&g->nodes[s->c[k].node]));
        timing_free(&lo);
    }
    /* the base's times: the minimum over its rounds next to every precision */
    *t_model = st == KILN_OK ? kiln__ps_total_ms(base.ms, base.n) : 0;
    for (int k = 0; st == KILN_OK && k < s->n; k++)
        t[k][0] = layer_ms(&base, kiln__ps_label(&g->nodes[s->c[k].node]));
    timing_free(&base);
    return st;
}

static bool faster(double hi, double lo)
{
    return isfinite(hi) && isfinite(lo) && hi - lo > MIN_GAIN_FRACTION * hi && hi - lo > 1e-4;
}

/* Picks each candidate's precision: the fastest (speed) or the narrowest (size) allowed option
 * that is realizable and meets the budget alone. */
static kiln_status probe_options(search *s, const char *const *allow, int na, double (*t)[MAX_ALLOW + 1], bool speed)
{
    const kiln_graph *g = s->ev->m->g;
    for (int k = 0; k < s->n; k++) {
        cand *c = &s->c[k];
        const char *name = kiln__ps_label(&g->nodes[c->node]);
        c->why = speed ? "no allowed precision measured faster" : "no allowed precision is realizable";
        double best = -INFINITY;
        for (int p = 0; p < na; p++) {
            double gain = t[k][0] - t[k][p + 1];
            if (speed && !faster(t[k][0], t[k][p + 1]))
                continue;
            kiln_plan_score sc;
            kiln__ps_progress(s->o, "probing layer %d/%d %s in %s", k + 1, s->n, name, allow[p]);
            KILN_TRY(kiln__ps_probe(s, k, allow[p], &sc));
            if (!sc.realized) {
                c->why = c->pick ? c->why : "cannot run in the allowed precisions";
                continue;
            }
            if (!sc.pass) {
                c->why = c->pick ? c->why : "misses the budget alone";
                if (!c->pick)
                    c->value = sc.value;
                continue;
            }
            /* speed: the largest gain; size: the narrowest format (int8 before 16-bit), then accuracy */
            double rank = speed ? gain : (strcmp(allow[p], "int8") ? 0 : 1e9) + kiln__peval_goodness(s->ev, sc.value);
            if (rank > best) {
                best = rank;
                c->pick = allow[p];
                c->why = NULL;
                c->value = sc.value;
                c->good = kiln__peval_goodness(s->ev, sc.value);
                c->snr = sc.snr_db;
                c->t_hi = t[k][0];
                c->t_lo = t[k][p + 1];
            }
        }
    }
    return KILN_OK;
}

/* Speed objective: times the plan as a whole (its layers with the conversions at the edges of
 * the lowered regions, which single-precision timing cannot see) and un-lowers every layer that
 * is not faster there than in the base, re-checking the budget, until none is; *est is the
 * speed-up the layers' times give, *meas the whole model's. */
static kiln_status time_plan(search *s, const kiln_plan_score *base, double t_model, double *est, double *meas)
{
    const kiln_graph *g = s->ev->m->g;
    timing tb = {0}, tp = {0};
    kiln__ps_progress(s->o, "timing the plan");
    kiln_status st = timing_build(s->ev, s->base, &tb);
    for (int round = 0; st == KILN_OK && round < 4; round++) {
        timing_free(&tp);
        kiln__ps_apply(s);
        if ((st = timing_build(s->ev, s->req, &tp)) != KILN_OK || (st = time_pair(s->ev, &tb, &tp, 2)) != KILN_OK)
            break;
        charge_conversions(&tp);
        int dropped = 0;
        for (int k = 0; k < s->n; k++) {
            cand *c = &s->c[k];
            if (!c->lowered)
                continue;
            const char *name = kiln__ps_label(&g->nodes[c->node]);
            c->t_hi = layer_ms(&tb, name);
            c->t_lo = layer_ms(&tp, name);
            if (!faster(c->t_hi, c->t_lo)) {
                c->lowered = false;
                c->why = "not faster inside the plan (with its conversions)";
                dropped++;
            }
        }
        if (!dropped)
            break;
        kiln_plan_score sc;
        if ((st = kiln__ps_check(s, "the plan without the slower layers", &sc)) != KILN_OK)
            break;
        if (!sc.pass) {   /* not expected (fewer layers lowered): give the plan up */
            for (int k = 0; k < s->n; k++)
                s->c[k].lowered = false;
            s->final = *base;
            break;
        }
        s->final = sc;
    }
    if (st == KILN_OK) {
        double saved = 0;
        for (int k = 0; k < s->n; k++)
            saved += s->c[k].lowered ? s->c[k].t_hi - s->c[k].t_lo : 0;
        *est = t_model > saved && t_model > 0 ? t_model / (t_model - saved) : 1;
        *meas = kiln__ps_total_ms(tb.ms, tb.n) / kiln__ps_total_ms(tp.ms, tp.n);
    }
    timing_free(&tb);
    timing_free(&tp);
    return st;
}

static void write_report(const search *s, text *r, const kiln_plan_score *base, double est, double meas, bool speed)
{
    const kiln_plan_eval *ev = s->ev;
    const kiln_graph *g = ev->m->g;
    const char *metric = kiln_metric_name(ev->budget.metric);
    int lowered = 0;
    for (int k = 0; k < s->n; k++)
        lowered += s->c[k].lowered;
    kiln__ps_printf(r, "auto: budget %s on %d batch%s of data: %.6g without lowering, %.6g with the plan\n",
            s->o->accuracy_budget, ev->n_batches, ev->n_batches == 1 ? "" : "es", base->value, s->final.value);
    kiln__ps_printf(r, "auto: %d of %d layers lowered", lowered, s->n);
    if (speed)
        kiln__ps_printf(r, "; estimated speed-up %.2fx (layer kernels), measured %.2fx (whole model, without tactics)\n", est, meas);
    else
        kiln__ps_printf(r, " (objective: size)\n");
    for (int k = 0; k < s->n; k++) {
        const cand *c = &s->c[k];
        const kiln_node *n = &g->nodes[c->node];
        if (c->lowered && speed)
            kiln__ps_printf(r, "auto: %s (%s) -> %s: alone %s %.6g, kernel %.3f -> %.3f ms\n", kiln__ps_label(n), n->op_type,
                    c->pick, metric, c->value, c->t_hi, c->t_lo);
        else if (c->lowered)
            kiln__ps_printf(r, "auto: %s (%s) -> %s: alone %s %.6g\n", kiln__ps_label(n), n->op_type, c->pick, metric, c->value);
        else
            kiln__ps_printf(r, "auto: %s (%s) kept in fp32: %s\n", kiln__ps_label(n), n->op_type, c->why ? c->why : "not tried");
    }
}

kiln_status kiln__plan_auto(kiln_model_t m, kiln_build_options *o, const char ***req_out, char **report,
                            kiln_calibration_t *cal)
{
    *req_out = NULL;
    *report = NULL;
    *cal = NULL;
    o->budget_unmet = false;
    o->auto_value = NAN;
    o->auto_speedup_est = o->auto_speedup = 1;
    o->auto_lowered = o->auto_candidates = 0;
    const char *allow[MAX_ALLOW];
    int na;
    bool calib, speed = o->auto_objective != KILN_AUTO_SIZE;
    if (o->auto_objective != KILN_AUTO_SPEED && o->auto_objective != KILN_AUTO_SIZE)
        return kiln__err(KILN_ERR_INVALID_ARG, "auto_objective %d: want KILN_AUTO_SPEED or KILN_AUTO_SIZE", o->auto_objective);
    KILN_TRY(kiln__ps_allowed(o, allow, &na, &calib));
    kiln_budget b;
    if (!o->accuracy_budget)
        return kiln__err(KILN_ERR_INVALID_ARG, "--precision auto needs --accuracy-budget (e.g. cosine>=0.99)");
    KILN_TRY(kiln_budget_parse(o->accuracy_budget, &b));
    KILN_TRY(kiln__ps_calibrate(m, o, calib, cal));
    kiln_plan_eval ev;
    search s;
    text r = {0};
    double (*t)[MAX_ALLOW + 1] = NULL;
    kiln_status st = kiln__peval_open(&ev, m, o, *cal);
    if (st == KILN_OK)
        st = kiln__ps_init(&s, &ev, o);
    else
        memset(&s, 0, sizeof s);
    kiln_plan_score base = {0};
    double t_model = 0, est = 1, meas = 1;
    if (st == KILN_OK) {
        kiln__ps_progress(o, "measuring the model without lowering");
        st = kiln__peval_measure(&ev, s.base, 0, &base);
        s.final = base;
    }
    if (st == KILN_OK && !(base.pass && base.realized)) {
        o->budget_unmet = true;
        st = kiln__err(KILN_ERR_UNSUPPORTED, "accuracy budget %s cannot be met: the model reaches %.6g without lowering any layer",
                       o->accuracy_budget, base.value);
    }
    if (st == KILN_OK && !(t = kiln__calloc((size_t)s.n + 1, sizeof *t)))
        st = nomem();
    for (int k = 0; st == KILN_OK && k < s.n; k++)
        for (int p = 0; p <= na; p++)
            t[k][p] = NAN;
    if (st == KILN_OK && speed)
        st = time_options(&s, allow, na, t, &t_model);
    if (st == KILN_OK)
        st = probe_options(&s, allow, na, t, speed);
    if (st == KILN_OK) {
        kiln__ps_order(&s);
        st = kiln__ps_search(&s, MAX_REFINE, NULL);
    }
    if (st == KILN_OK && speed)
        st = time_plan(&s, &base, t_model, &est, &meas);
    if (st == KILN_OK || o->budget_unmet) {
        if (st == KILN_OK)
            write_report(&s, &r, &base, est, meas, speed);
        else
            kiln__ps_printf(&r, "auto: budget %s: %.6g without lowering any layer\n", o->accuracy_budget, base.value);
    }
    if (st == KILN_OK) {
        kiln__ps_apply(&s);
        for (int k = 0; k < s.n; k++)   /* the engine records every planned layer: lowered or kept */
            if (!s.c[k].lowered)
                s.req[s.c[k].node] = "fp32";
        o->auto_value = s.final.value;
        o->auto_speedup_est = est;
        o->auto_speedup = meas;
        o->auto_candidates = s.n;
        for (int k = 0; k < s.n; k++)
            o->auto_lowered += s.c[k].lowered;
        *req_out = s.req;
        s.req = NULL;
    }
    if (r.oom && st == KILN_OK)
        st = nomem();
    *report = r.p;
    kiln__free(t);
    kiln__ps_free(&s);
    kiln__peval_close(&ev);
    if (st != KILN_OK && !o->budget_unmet) {
        kiln__free(*report);
        *report = NULL;
    }
    return st;
}
