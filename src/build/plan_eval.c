/* Measurements for the precision planner (docs/PRECISION.md, "Automatic mixed precision"): the
 * data set cut into batches the model accepts, the float model's outputs on it (the reference,
 * as kiln verify runs it: kiln's interpreter, unoptimized), trial engines built with per-layer
 * requests and scored with the verify metrics against one budget, and per-layer kernel times. */
#include "plan_eval.h"
#include "../engine/engine.h"
#include "../quant/quant.h"
#include "../runtime/model.h"
#include <math.h>

#define DEFAULT_BATCH_ROWS 32
#define DEFAULT_MAX_BATCHES 8

static kiln_status nomem(void) { return kiln__err(KILN_ERR_NOMEM, "out of memory"); }

/* Rows per batch: a profile's or the model's fixed batch dim, else the calibration batch. */
static int64_t batch_rows(const kiln_plan_eval *ev, const kiln_build_options *o, bool *fixed)
{
    *fixed = true;
    const kiln_graph *g = ev->m->g;
    for (int p = 0; p < o->num_profiles && o->profiles; p++)
        for (int r = 0; r < o->profiles[p].num_ranges; r++) {
            const kiln_shape_range *sr = &o->profiles[p].ranges[r];
            if (sr->ndim > 0 && sr->min[0] == sr->max[0])
                return sr->min[0];
        }
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        if (v->ndim > 0 && v->dims[0].value > 0 && !v->dims[0].param)
            return v->dims[0].value;
    }
    *fixed = false;
    return o->calib && o->calib->max_batch > 0 ? o->calib->max_batch : DEFAULT_BATCH_ROWS;
}

/* Rows [r0, r0 + n) of t as a new tensor. */
static kiln_status slice_rows(const kiln_tensor *t, int64_t r0, int64_t n, kiln_tensor *out)
{
    size_t row = t->dims[0] ? t->nbytes / (size_t)t->dims[0] : 0;
    *out = *t;
    out->dims[0] = n;
    out->nbytes = row * (size_t)n;
    out->flags = 0;
    out->data = kiln__malloc(out->nbytes + 1);
    if (!out->data)
        return nomem();
    memcpy(out->data, (const char *)t->data + row * (size_t)r0, out->nbytes);
    return KILN_OK;
}

static kiln_status add_sample(kiln_plan_eval *ev, const kiln_calib_sample *s, int64_t rows, bool fixed, int cap)
{
    kiln_tensor *file = kiln__calloc((size_t)ev->n_in, sizeof *file);
    if (!file)
        return nomem();
    kiln_status st = KILN_OK;
    for (int i = 0; i < ev->n_in && st == KILN_OK; i++)
        st = kiln_npy_read(s->path[i], &file[i]);
    for (int64_t r0 = 0; st == KILN_OK && r0 < s->rows && ev->n_batches < cap; r0 += rows) {
        int64_t n = s->rows - r0 < rows ? s->rows - r0 : rows;
        if (fixed && n < rows)
            break;   /* a fixed batch size: the rest cannot run */
        kiln_tensor *b = ev->ins + (size_t)ev->n_batches * (size_t)ev->n_in;
        for (int i = 0; i < ev->n_in && st == KILN_OK; i++)
            st = slice_rows(&file[i], r0, n, &b[i]);
        ev->n_batches++;   /* counted even when partly filled: close frees what is there */
    }
    for (int i = 0; i < ev->n_in; i++)
        kiln_free(file[i].data);
    kiln__free(file);
    return st;
}

static kiln_status load_data(kiln_plan_eval *ev, const kiln_build_options *o)
{
    const char *dir = o->val_dir ? o->val_dir : o->calib ? o->calib->data_dir : NULL;
    if (!dir)
        return kiln__err(KILN_ERR_INVALID_ARG, "the precision planner needs data to measure accuracy on: give "
                                               "calibration data (--calib DIR) or --val DIR");
    bool fixed;
    int64_t rows = batch_rows(ev, o, &fixed);
    int cap = ev->max_batches > ev->probe_batches ? ev->max_batches : ev->probe_batches;
    kiln_calib_set set;
    KILN_TRY(kiln__calib_set_open(dir, ev->n_in, ev->in_names, &set));
    ev->ins = kiln__calloc((size_t)cap * (size_t)ev->n_in + 1, sizeof *ev->ins);
    kiln_status st = ev->ins ? KILN_OK : nomem();
    for (int k = 0; k < set.n && st == KILN_OK && ev->n_batches < cap; k++)
        st = add_sample(ev, &set.s[k], rows, fixed, cap);
    kiln__calib_set_free(&set);
    if (st == KILN_OK && ev->n_batches == 0)
        st = kiln__err(KILN_ERR_INVALID_ARG, "data in '%s': no sample has the %lld rows of the model's fixed batch size",
                       dir, (long long)rows);
    return st;
}

kiln_status kiln__peval_open(kiln_plan_eval *ev, kiln_model_t m, const kiln_build_options *o, kiln_calibration_t cal)
{
    memset(ev, 0, sizeof *ev);
    ev->m = m;
    ev->cal = cal;
    ev->trial = *o;
    ev->trial.precision = NULL;
    ev->trial.no_tactics = true;
    ev->trial.want_report = false;
    ev->trial.timing_cache = NULL;
    ev->trial.precision_fallback = true;   /* trials tell what is realizable; the final build is strict */
    if (ev->trial.run_budget_s == 0)
        ev->trial.run_budget_s = 600;   /* trial builds' own runs: a loaded machine is not a hung model */
    ev->probe_batches = o->auto_probe_batches > 0 ? o->auto_probe_batches : 1;
    ev->max_batches = o->auto_max_batches > 0 ? o->auto_max_batches : DEFAULT_MAX_BATCHES;
    if (!o->accuracy_budget)
        return kiln__err(KILN_ERR_INVALID_ARG, "precision planning needs an accuracy budget (e.g. cosine>=0.99)");
    KILN_TRY(kiln_budget_parse(o->accuracy_budget, &ev->budget));
    const kiln_graph *g = m->g;
    ev->n_in = g->n_inputs;
    ev->n_out = g->n_outputs;
    ev->in_names = kiln__calloc((size_t)ev->n_in + 1, sizeof *ev->in_names);
    if (!ev->in_names)
        return nomem();
    for (int i = 0; i < ev->n_in; i++)
        ev->in_names[i] = g->values[g->inputs[i]].name;
    KILN_TRY(load_data(ev, o));
    ev->refs = kiln__calloc((size_t)ev->n_batches + 1, sizeof *ev->refs);
    if (!ev->refs)
        return nomem();
    kiln_run_options ro = {.num_threads = o->num_threads};
    for (int b = 0; b < ev->n_batches; b++) {
        kiln_tensor *outs = NULL;
        int n = 0;
        KILN_TRY(kiln_model_run(m, ev->n_in, ev->in_names, ev->ins + (size_t)b * (size_t)ev->n_in, &ro, &n, &outs));
        ev->refs[b] = outs;
    }
    return KILN_OK;
}

void kiln__peval_close(kiln_plan_eval *ev)
{
    for (int b = 0; ev->refs && b < ev->n_batches; b++)
        kiln_tensors_free(ev->refs[b], ev->n_out);
    for (size_t k = 0; ev->ins && k < (size_t)ev->n_batches * (size_t)ev->n_in; k++)
        kiln__free(ev->ins[k].data);
    kiln__free(ev->refs);
    kiln__free(ev->ins);
    kiln__free(ev->in_names);
    kiln__bc_cache_free(&ev->bias);
    memset(ev, 0, sizeof *ev);
}

kiln_status kiln__peval_build(kiln_plan_eval *ev, const char *const *req, kiln_engine_t *e, bool *realized)
{
    kiln_build_options o = ev->trial;
    kiln_prec_plan plan = {.n_nodes = ev->m->g->n_nodes, .req = req, .cal = ev->cal, .bias = &ev->bias};
    kiln_status st = kiln__build_planned(ev->m, &o, &plan, e);
    kiln__free(o.report);
    kiln__free(o.precision_report);
    ev->builds++;
    *realized = true;
    for (int i = 0; st == KILN_OK && i < kiln_engine_num_layers(*e); i++) {
        const char *rq = NULL, *rl = NULL;
        if ((st = kiln_engine_layer_precision(*e, i, &rq, &rl)) == KILN_OK && rq[0] && strcmp(rq, rl))
            *realized = false;
    }
    if (st != KILN_OK) {
        kiln_engine_free(*e);
        *e = NULL;
    }
    return st;
}

static bool higher_is_better(kiln_metric m)
{
    return m == KILN_METRIC_COSINE || m == KILN_METRIC_SNR || m == KILN_METRIC_TOP1 || m == KILN_METRIC_TOP5;
}

double kiln__peval_goodness(const kiln_plan_eval *ev, double value)
{
    if (isnan(value))
        return -INFINITY;
    return higher_is_better(ev->budget.metric) ? value : -value;
}

kiln_status kiln__peval_score(kiln_plan_eval *ev, kiln_engine_t e, int batches, kiln_plan_score *s)
{
    if (batches <= 0 || batches > ev->n_batches)
        batches = ev->n_batches;
    kiln_compare_summary *sum = kiln__calloc((size_t)ev->n_out + 1, sizeof *sum);
    if (!sum)
        return nomem();
    kiln_run_options ro = {.num_threads = ev->trial.num_threads};
    kiln_status st = KILN_OK;
    for (int b = 0; b < batches && st == KILN_OK; b++) {
        kiln_tensor *outs = NULL;
        int n = 0;
        st = kiln_engine_run(e, ev->n_in, ev->in_names, ev->ins + (size_t)b * (size_t)ev->n_in, &ro, &n, &outs);
        for (int o = 0; st == KILN_OK && o < ev->n_out; o++) {
            kiln_compare_stats cs;
            if (o >= n)
                st = kiln__err(KILN_ERR_INTERNAL, "trial engine has %d outputs, the model %d", n, ev->n_out);
            else if ((st = kiln_compare(&ev->refs[b][o], &outs[o], &cs)) == KILN_OK)
                kiln_compare_summary_add(&sum[o], &cs);
        }
        kiln_tensors_free(outs, n);
    }
    s->pass = true;
    s->value = NAN;
    s->snr_db = s->mean_snr_db = INFINITY;
    for (int o = 0; st == KILN_OK && o < ev->n_out; o++) {
        bool pass;
        double v = kiln_budget_value(&ev->budget, &sum[o], &pass);
        s->pass = s->pass && pass;
        if (o == 0 || kiln__peval_goodness(ev, v) < kiln__peval_goodness(ev, s->value))
            s->value = v;
        double snr = sum[o].nonfinite ? -INFINITY : sum[o].worst.snr_db;
        s->snr_db = snr < s->snr_db ? snr : s->snr_db;
        double mean = sum[o].nonfinite ? -INFINITY : sum[o].mean_snr_db;
        s->mean_snr_db = mean < s->mean_snr_db ? mean : s->mean_snr_db;
    }
    kiln__free(sum);
    return st;
}

kiln_status kiln__peval_measure(kiln_plan_eval *ev, const char *const *req, int batches, kiln_plan_score *s)
{
    kiln_engine_t e = NULL;
    KILN_TRY(kiln__peval_build(ev, req, &e, &s->realized));
    kiln_status st = kiln__peval_score(ev, e, batches, s);
    kiln_engine_free(e);
    return st;
}

kiln_status kiln__peval_time(kiln_plan_eval *ev, kiln_engine_t e, int rounds, int runs, double *layer_ms)
{
    int n = kiln_engine_num_layers(e);
    double *t = kiln__calloc((size_t)n + 1, sizeof *t);
    kiln_context_t c = NULL;
    kiln_status st = t ? kiln_context_create(e, &c) : nomem();
    if (st == KILN_OK && ev->trial.num_threads > 0)
        kiln_context_set_threads(c, ev->trial.num_threads);
    for (int i = 0; st == KILN_OK && i < ev->n_in; i++)
        st = kiln_context_set_input(c, ev->in_names[i], &ev->ins[i]);
    if (st == KILN_OK)
        st = kiln_context_run(c);   /* warm-up: weights restored, memory planned */
    for (int r = 0; st == KILN_OK && r < rounds; r++) {
        if ((st = kiln_context_profile(c, runs, t)) != KILN_OK)
            break;
        for (int i = 0; i < n; i++)
            layer_ms[i] = t[i] < layer_ms[i] ? t[i] : layer_ms[i];
    }
    kiln_context_free(c);
    kiln__free(t);
    return st;
}
