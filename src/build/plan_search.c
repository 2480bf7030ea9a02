/* The search shared by --precision auto and kiln debug precision (plan_search.h). */
#include "plan_search.h"
#include "../engine/engine.h"
#include "../runtime/model.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static kiln_status nomem(void) { return kiln__err(KILN_ERR_NOMEM, "out of memory"); }

/* ---- text: the report and progress lines ---- */

void kiln__ps_printf(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->oom || n < 0)
        return;
    if (t->len + (size_t)n + 1 > t->cap) {
        size_t cap = (t->len + (size_t)n + 1) * 2;
        char *p = kiln__realloc(t->p, cap);
        if (!p) {
            t->oom = true;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

void kiln__ps_progress(const kiln_build_options *o, const char *fmt, ...)
{
    if (!o->auto_progress)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->auto_progress(line, o->auto_progress_user);
}

const char *kiln__ps_label(const kiln_node *n) { return n->name && n->name[0] ? n->name : n->op_type; }

/* ---- the search shared by the planner and the debugger ---- */



void kiln__ps_apply(search *s)
{
    memcpy(s->req, s->base, sizeof *s->req * (size_t)s->n_nodes);
    for (int k = 0; k < s->n; k++)
        if (s->c[k].lowered)
            s->req[s->c[k].node] = s->c[k].pick;
}

kiln_status kiln__ps_check(search *s, const char *what, kiln_plan_score *sc)
{
    kiln__ps_apply(s);
    int lowered = 0;
    for (int k = 0; k < s->n; k++)
        lowered += s->c[k].lowered;
    kiln__ps_progress(s->o, "checking %s: %d layer%s lowered", what, lowered, lowered == 1 ? "" : "s");
    KILN_TRY(kiln__peval_measure(s->ev, s->req, 0, sc));
    sc->pass = sc->pass && sc->realized;
    return KILN_OK;
}

/* Probes candidate k lowered to prec alone (every other candidate at its base). */
kiln_status kiln__ps_probe(search *s, int k, const char *prec, kiln_plan_score *sc)
{
    memcpy(s->req, s->base, sizeof *s->req * (size_t)s->n_nodes);
    s->req[s->c[k].node] = prec;
    return kiln__peval_measure(s->ev, s->req, s->ev->probe_batches, sc);
}

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (!x->pick != !y->pick)
        return x->pick ? -1 : 1;
    if (x->good != y->good)
        return x->good > y->good ? -1 : 1;
    if (x->snr != y->snr)
        return x->snr > y->snr ? -1 : 1;
    double gx = x->t_hi - x->t_lo, gy = y->t_hi - y->t_lo;
    if (gx != gy)
        return gx > gy ? -1 : 1;
    return x->node - y->node;
}

void kiln__ps_order(search *s)
{
    qsort(s->c, (size_t)s->n, sizeof *s->c, cmp_cand);
    s->n_order = 0;
    while (s->n_order < s->n && s->c[s->n_order].pick)
        s->n_order++;
}

/* Lowers the largest prefix of the order that meets the budget (bisection: the first k pass, the
 * first k+1 do not), then tries the next `refine` layers one by one. s->final: the last passing
 * score (the caller has measured the base, which passes, into it). */
kiln_status kiln__ps_search(search *s, int refine, const kiln_plan_score *all)
{
    int lo = 0, hi = s->n_order;
    kiln_plan_score sc;
    for (int k = 0; k < s->n; k++)
        s->c[k].lowered = k < hi;
    if (hi == 0)
        return KILN_OK;
    if (all && hi == s->n)
        sc = *all;
    else
        KILN_TRY(kiln__ps_check(s, "every layer", &sc));
    if (sc.pass) {
        s->final = sc;
        return KILN_OK;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        for (int k = 0; k < s->n; k++)
            s->c[k].lowered = k < mid;
        KILN_TRY(kiln__ps_check(s, "a prefix", &sc));
        if (sc.pass) {
            lo = mid;
            s->final = sc;
        } else
            hi = mid;
    }
    for (int k = 0; k < s->n; k++)
        s->c[k].lowered = k < lo;
    for (int k = lo; k < s->n_order && refine-- > 0; k++) {
        s->c[k].lowered = true;
        char what[300];
        snprintf(what, sizeof what, "%s", kiln__ps_label(&s->ev->m->g->nodes[s->c[k].node]));
        KILN_TRY(kiln__ps_check(s, what, &sc));
        if (sc.pass)
            s->final = sc;
        else {
            s->c[k].lowered = false;
            s->c[k].why = "the whole model misses the budget with it";
        }
    }
    for (int k = lo; k < s->n_order; k++)
        if (!s->c[k].lowered && !s->c[k].why)
            s->c[k].why = "more sensitive than the layers that used up the budget";
    return KILN_OK;
}

kiln_status kiln__ps_init(search *s, kiln_plan_eval *ev, const kiln_build_options *o)
{
    memset(s, 0, sizeof *s);
    s->ev = ev;
    s->o = o;
    const kiln_graph *g = ev->m->g;
    s->n_nodes = g->n_nodes;
    s->c = kiln__calloc((size_t)g->n_nodes + 1, sizeof *s->c);
    s->base = kiln__calloc((size_t)g->n_nodes + 1, sizeof *s->base);
    s->req = kiln__calloc((size_t)g->n_nodes + 1, sizeof *s->req);
    if (!s->c || !s->base || !s->req)
        return nomem();
    for (int i = 0; i < g->n_nodes; i++)
        if (kiln__precision_weight_layer(g, i) && !kiln__precision_rule_names(o, &g->nodes[i]))
            s->c[s->n++].node = i;
    return KILN_OK;
}

void kiln__ps_free(search *s)
{
    kiln__free(s->c);
    kiln__free(s->base);
    kiln__free(s->req);
}

/* The allowed precisions (default fp16, bf16, int8), validated. */
bool kiln__ps_needs_calib(const char *precision)
{
    return precision && (!strcmp(precision, "int8") || !strcmp(precision, "fp8"));
}

kiln_status kiln__ps_allowed(const kiln_build_options *o, const char **out, int *n, bool *calib)
{
    static const char *const def[] = {"fp16", "bf16", "int8"};
    const char *const *a = o->num_allow > 0 ? o->allow : def;
    int na = o->num_allow > 0 ? o->num_allow : 3;
    if (o->num_allow < 0 || na > KILN_PS_MAX_ALLOW || !a)
        return kiln__err(KILN_ERR_INVALID_ARG, "--allow: between 1 and %d precisions", KILN_PS_MAX_ALLOW);
    *n = 0;
    *calib = false;
    for (int k = 0; k < na; k++) {
        int code = kiln__precision_code(a[k]);
        const char *name = kiln__precision_name(code);
        /* every precision the planner can lower to (the list said fp16, bf16, int8 alone, though the 8- and 4-bit
         * floats and int4 are accepted too) */
        static const char lower[] = "fp16, bf16, int8, fp8, nvfp4 (or fp4), mxfp4, int4";
        if (code < 0 || !strcmp(name, "fp32") || !strcmp(name, "int16"))   /* int16: Q/DQ only, no layer kernel */
            return kiln__err(KILN_ERR_INVALID_ARG, "--allow '%s': %s%s", a[k] ? a[k] : "(null)",
                             code == -2 ? "precision not supported yet; want lower precisions among "
                                        : "want lower precisions among ", lower);
        bool dup = false;
        for (int j = 0; j < *n; j++)
            dup |= out[j] == name;
        if (!dup)
            out[(*n)++] = name;
        *calib |= kiln__ps_needs_calib(name);
    }
    return KILN_OK;
}

kiln_status kiln__ps_calibrate(kiln_model_t m, const kiln_build_options *o, bool need, kiln_calibration_t *cal)
{
    *cal = NULL;
    if (!need)
        return KILN_OK;
    if (!o->calib || (!o->calib->data_dir && !o->calib->cache_path))
        return kiln__err(KILN_ERR_INVALID_ARG, "int8 and fp8 layers need calibration data: give --calib DIR (or a calibration cache)");
    return kiln_calibrate(m, o->calib, cal);
}

/* The engine layer standing for model node `name` (its own name, or one it fused), or -1. */
int kiln__ps_find_layer(kiln_engine_t e, const char *name)
{
    int n = kiln_engine_num_layers(e);
    size_t len = strlen(name);
    for (int i = 0; i < n; i++) {
        kiln_layer_info L;
        if (kiln_engine_layer(e, i, &L) != KILN_OK)
            continue;
        if (!strcmp(L.name, name))
            return i;
        for (const char *f = L.fused_from; f && *f;) {
            const char *end = strchr(f, ',');
            size_t fl = end ? (size_t)(end - f) : strlen(f);
            if (fl == len && !strncmp(f, name, len))
                return i;
            f = end ? end + 1 : f + fl;
        }
    }
    return -1;
}

double kiln__ps_total_ms(const double *t, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += t[i];
    return s;
}

