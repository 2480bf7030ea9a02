/* kiln debug precision (kiln_precision_debug; docs/PRECISION.md, "Which layers must stay higher"):
 * every candidate layer lowered to o->precision, the minimal set that must stay in `keep` for the
 * model to meet the budget, found with the planner's search (plan_search.c): candidates ordered
 * least sensitive first, the largest prefix that can be lowered found by bisection, then each
 * remaining layer tried lowered once more; what is left is the set, 1-minimal. */
#include "plan_search.h"
#include "../engine/engine.h"
#include "../runtime/model.h"
#include <limits.h>
#include <math.h>

struct kiln_precision_debug {
    kiln_precision_debug_info info;
    kiln_precision_debug_layer *layers;
    char **owned;   /* 3 strings per layer: name, op, rule */
};

static kiln_status nomem(void) { return kiln__err(KILN_ERR_NOMEM, "out of memory"); }

/* "NAME:PREC" with the glob characters of NAME escaped (fnmatch without FNM_NOESCAPE). */
static char *make_rule(const char *name, const char *prec)
{
    size_t n = strlen(name), k = 0;
    char *r = kiln__malloc(2 * n + strlen(prec) + 2);
    if (!r)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (strchr("*?[]\\", name[i]))
            r[k++] = '\\';
        r[k++] = name[i];
    }
    r[k++] = ':';
    strcpy(r + k, prec);
    return r;
}

static int first_last_weight_layer(const kiln_graph *g, bool last)
{
    int f = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (kiln__precision_weight_layer(g, i) && (f < 0 || last))
            f = i;
    return f;
}

/* Fills the result's layers (model order) from the search. */
static kiln_status fill(struct kiln_precision_debug *r, const search *s, const char *low, const char *keep,
                        const bool *realizable)
{
    const kiln_graph *g = s->ev->m->g;
    int n = s->n;
    r->layers = kiln__calloc((size_t)n + 1, sizeof *r->layers);
    r->owned = kiln__calloc(3 * (size_t)n + 1, sizeof *r->owned);
    if (!r->layers || !r->owned)
        return nomem();
    r->info.num_layers = n;
    int first = first_last_weight_layer(g, false), last = first_last_weight_layer(g, true);
    bool ends = strcmp(low, "fp16") && strcmp(low, "bf16");   /* quantized: --precision keeps first / last */
    int j = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < n; k++) {
            const cand *c = &s->c[k];
            if (c->node != i)
                continue;
            kiln_precision_debug_layer *L = &r->layers[j];
            const kiln_node *nd = &g->nodes[i];
            char **own = &r->owned[3 * j++];
            L->realizable = realizable[k];
            L->keep = !c->lowered;
            L->value = c->pick || L->realizable ? c->value : NAN;
            own[0] = kiln__strdup(kiln__ps_label(nd));
            own[1] = kiln__strdup(nd->op_type);
            /* a rule where plain --precision LOW would differ from what was measured */
            if (L->keep)
                own[2] = make_rule(kiln__ps_label(nd), keep);
            else if (ends && (i == first || i == last))
                own[2] = make_rule(kiln__ps_label(nd), low);
            if (!own[0] || !own[1] || ((L->keep || (ends && (i == first || i == last))) && !own[2]))
                return nomem();
            L->name = own[0];
            L->op = own[1];
            L->rule = own[2];
            r->info.num_keep += L->keep;
        }
    return KILN_OK;
}

/* The engine with every candidate lowered: which candidates it realizes in `low`, and its score. */
static kiln_status lowered_all(search *s, const char *low, bool *realizable, kiln_plan_score *sc)
{
    const kiln_graph *g = s->ev->m->g;
    memcpy(s->req, s->base, sizeof *s->req * (size_t)s->n_nodes);
    for (int k = 0; k < s->n; k++)
        s->req[s->c[k].node] = low;
    kiln_engine_t e = NULL;
    bool all;
    KILN_TRY(kiln__peval_build(s->ev, s->req, &e, &all));
    for (int k = 0; k < s->n; k++) {
        int L = kiln__ps_find_layer(e, kiln__ps_label(&g->nodes[s->c[k].node]));
        const char *rq = NULL, *rl = NULL;
        realizable[k] = L >= 0 && kiln_engine_layer_precision(e, L, &rq, &rl) == KILN_OK && !strcmp(rl, low);
    }
    kiln_status st = kiln__peval_score(s->ev, e, 0, sc);
    kiln_engine_free(e);
    return st;
}

static kiln_status run(struct kiln_precision_debug *r, kiln_model_t m, kiln_build_options *o, const char *low,
                       const char *keep, kiln_calibration_t cal)
{
    kiln_plan_eval ev;
    search s;
    memset(&s, 0, sizeof s);
    bool *realizable = NULL;
    kiln_status st = kiln__peval_open(&ev, m, o, cal);
    if (st == KILN_OK)
        st = kiln__ps_init(&s, &ev, o);
    r->info.budget = ev.budget;
    if (st == KILN_OK && !(realizable = kiln__calloc((size_t)s.n + 1, sizeof *realizable)))
        st = nomem();
    for (int k = 0; st == KILN_OK && k < s.n; k++)
        s.base[s.c[k].node] = keep;
    kiln_plan_score sc, all = {0};
    if (st == KILN_OK) {
        kiln__ps_progress(o, "measuring the model with every layer in %s", keep);
        st = kiln__peval_measure(&ev, s.base, 0, &sc);
        r->info.value_baseline = sc.value;
        s.final = sc;
        r->info.met = sc.pass && sc.realized;
    }
    if (st == KILN_OK && r->info.met) {
        kiln__ps_progress(o, "measuring the model with every layer in %s", low);
        st = lowered_all(&s, low, realizable, &sc);
        r->info.value_lowered = sc.value;
        all = sc;
        all.pass = all.pass && all.realized;
    }
    /* every layer lowered already meets the budget: the set is empty, no probe needed */
    bool probe = st == KILN_OK && r->info.met && !all.pass;
    for (int k = 0; probe && k < s.n; k++) {
        if (!realizable[k])
            continue;
        kiln__ps_progress(o, "probing layer %d/%d %s", k + 1, s.n, kiln__ps_label(&m->g->nodes[s.c[k].node]));
        kiln_plan_score p;
        if ((st = kiln__ps_probe(&s, k, low, &p)) != KILN_OK)
            break;
        s.c[k].value = p.value;
        s.c[k].good = kiln__peval_goodness(&ev, p.value);
        s.c[k].snr = p.snr_db;
    }
    for (int k = 0; k < s.n && realizable; k++)
        if (realizable[k]) {
            s.c[k].pick = low;
            s.c[k].value = probe ? s.c[k].value : NAN;
            s.c[k].good = probe ? s.c[k].good : 0;
        }
    if (st == KILN_OK && r->info.met) {
        /* order() moves candidates: carry realizable along through the pick (NULL: not realizable) */
        kiln__ps_order(&s);
        for (int k = 0; k < s.n; k++)
            realizable[k] = s.c[k].pick != NULL;
        st = kiln__ps_search(&s, INT_MAX, &all);
    }
    if (st == KILN_OK) {
        r->info.value_final = s.final.value;
        r->info.met = s.final.pass && s.final.realized;
        st = fill(r, &s, low, keep, realizable);
    }
    r->info.builds = ev.builds;
    kiln__free(realizable);
    kiln__ps_free(&s);
    kiln__peval_close(&ev);
    return st;
}

kiln_status kiln_precision_debug(kiln_model_t m, kiln_build_options *o, const char *keep, kiln_precision_debug_t *out)
{
    if (!m || !o || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_precision_debug: NULL argument");
    *out = NULL;
    const char *low = kiln__precision_name(kiln__precision_code(o->precision));
    const char *hi = kiln__precision_name(kiln__precision_code(keep ? keep : "fp32"));
    if (!low || !strcmp(low, "fp32"))
        return kiln__err(KILN_ERR_INVALID_ARG, "precision debugging: --precision '%s': want fp16, bf16, int8, fp8, nvfp4, mxfp4 or int4",
                         o->precision ? o->precision : "(null)");
    if (!hi || hi == low)
        return kiln__err(KILN_ERR_INVALID_ARG, "precision debugging: --keep '%s': want a precision other than %s",
                         keep ? keep : "(null)", low);
    if (!o->accuracy_budget)
        return kiln__err(KILN_ERR_INVALID_ARG, "precision debugging needs a budget (e.g. cosine>=0.99)");
    kiln_budget b;
    KILN_TRY(kiln_budget_parse(o->accuracy_budget, &b));
    struct kiln_precision_debug *r = kiln__calloc(1, sizeof *r);
    if (!r)
        return nomem();
    kiln_calibration_t cal = NULL;
    kiln_status st = kiln__ps_calibrate(m, o, kiln__ps_needs_calib(low) || kiln__ps_needs_calib(hi), &cal);
    if (st == KILN_OK)
        st = run(r, m, o, low, hi, cal);
    kiln_calibration_free(cal);
    if (st != KILN_OK) {
        kiln_precision_debug_free(r);
        return st;
    }
    *out = r;
    return KILN_OK;
}

kiln_status kiln_precision_debug_info_get(kiln_precision_debug_t r, kiln_precision_debug_info *out)
{
    if (!r || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_precision_debug_info_get: NULL argument");
    *out = r->info;
    return KILN_OK;
}

kiln_status kiln_precision_debug_layer_get(kiln_precision_debug_t r, int i, kiln_precision_debug_layer *out)
{
    if (!r || !out || i < 0 || i >= r->info.num_layers)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_precision_debug_layer_get: %s",
                         !r || !out ? "NULL argument" : "layer index out of range");
    *out = r->layers[i];
    return KILN_OK;
}

void kiln_precision_debug_free(kiln_precision_debug_t r)
{
    if (!r)
        return;
    for (int k = 0; r->owned && k < 3 * r->info.num_layers; k++)
        kiln__free(r->owned[k]);
    kiln__free(r->owned);
    kiln__free(r->layers);
    kiln__free(r);
}
