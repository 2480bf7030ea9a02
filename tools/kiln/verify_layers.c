/* kiln verify --per-layer: the candidate's intermediate values against the reference's, by name.
 * The candidate runs first (kiln_engine_run_values) and its float values are kept (QuantizeLinear
 * outputs arrive dequantized, standing for the float value they quantize); then the reference runs
 * (kiln_model_run_values) and each of its values that the candidate also has is compared on the
 * spot, in the reference's (ONNX) order. Values fused away in the candidate are simply absent. */
#include "verify.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NOISE_DB 80.0   /* a jump must also go below this SNR (FP32 rounding differences are above) */

typedef struct cval {
    char *name, *quantizes, *layer, *op;
    kiln_dtype dtype;
    kiln_tensor t;       /* float32 copy */
} cval;

typedef struct lrun {
    cval *v;
    int n, cap;
    int ref_values, matched, shape_mismatch, jumps;
    double prev_snr;
    const vlayer_opts *o;
    json_t *rows;        /* JSON rows, or NULL: print */
    bool oom;
} lrun;

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static kiln_status keep_candidate(void *user, const kiln_value_view *v)
{
    lrun *r = user;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        cval *nv = realloc(r->v, sizeof *nv * (size_t)cap);
        if (!nv)
            goto oom;
        r->v = nv;
        r->cap = cap;
    }
    cval *c = &r->v[r->n];
    memset(c, 0, sizeof *c);
    c->t = *v->value;
    c->t.flags = 0;
    c->t.data = malloc(v->value->nbytes ? v->value->nbytes : 1);
    c->name = strdup(v->name);
    c->quantizes = dup_or_null(v->quantizes);
    c->layer = strdup(v->node);
    c->op = strdup(v->op);
    c->dtype = v->dtype;
    r->n++;
    if (!c->t.data || !c->name || !c->layer || !c->op || (v->quantizes && !c->quantizes))
        goto oom;
    memcpy(c->t.data, v->value->data, v->value->nbytes);
    return KILN_OK;
oom:
    r->oom = true;
    return KILN_ERR_NOMEM;
}

/* The candidate value standing for reference value `name`: a dequantized QuantizeLinear output of
 * it first (what the next layer consumes), else the value of that name. */
static const cval *find(const lrun *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (r->v[i].quantizes && !strcmp(r->v[i].quantizes, name))
            return &r->v[i];
    for (int i = 0; i < r->n; i++)
        if (!r->v[i].quantizes && !strcmp(r->v[i].name, name))
            return &r->v[i];
    return NULL;
}

static void emit(lrun *r, const kiln_value_view *v, const cval *c, const kiln_compare_stats *s, bool jump)
{
    if (!r->rows) {
        char note[320] = "";
        if (c->quantizes)
            snprintf(note, sizeof note, "  (dequantized %s)", cli_esc(c->name));
        printf("%5d  %-32s %-28s %-16s %12.8f %8.2f %12.4g%s%s%s\n", v->layer, cli_esc(v->name), cli_esc(v->node),
               cli_esc(v->op), s->cosine, s->snr_db, s->max_abs, s->nonfinite ? "  NaN/Inf" : "",
               jump ? "  <-- jump" : "", note);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(v->layer));
    json_object_set_new(o, "value", cli_json_str(v->name));
    json_object_set_new(o, "node", cli_json_str(v->node));
    json_object_set_new(o, "op", cli_json_str(v->op));
    json_object_set_new(o, "candidate_layer", cli_json_str(c->layer));
    json_object_set_new(o, "candidate_op", cli_json_str(c->op));
    json_object_set_new(o, "candidate_dtype", json_string(kiln_dtype_name(c->dtype)));
    json_object_set_new(o, "dequantized_from", c->quantizes ? cli_json_str(c->name) : json_null());
    json_object_set_new(o, "cosine", json_real(s->cosine));
    json_object_set_new(o, "snr_db", json_real(s->snr_db));
    json_object_set_new(o, "max_abs", json_real(s->max_abs));
    json_object_set_new(o, "max_rel", isfinite(s->max_rel) ? json_real(s->max_rel) : json_null());
    json_object_set_new(o, "mean_abs", json_real(s->mean_abs));
    json_object_set_new(o, "nonfinite", json_integer(s->nonfinite));
    json_object_set_new(o, "jump", json_boolean(jump));
    json_array_append_new(r->rows, o);
}

static kiln_status compare_reference(void *user, const kiln_value_view *v)
{
    lrun *r = user;
    r->ref_values++;
    const cval *c = find(r, v->name);
    if (!c)
        return KILN_OK;
    const kiln_tensor *t = v->value;
    if (t->ndim != c->t.ndim || memcmp(t->dims, c->t.dims, sizeof(int64_t) * (size_t)t->ndim)) {
        r->shape_mismatch++;
        return KILN_OK;
    }
    kiln_compare_stats s;
    kiln_status st = kiln_compare(t, &c->t, &s);
    if (st != KILN_OK)
        return st;
    r->matched++;
    bool jump = s.nonfinite > 0 || (s.snr_db < NOISE_DB && r->prev_snr - s.snr_db > r->o->jump_db);
    r->jumps += jump;
    r->prev_snr = s.snr_db;
    emit(r, v, c, &s, jump);
    return KILN_OK;
}

bool verify_layers(kiln_engine_t e, kiln_model_t ref, int nin, const char **names, const kiln_tensor *ins,
                   const vlayer_opts *o, json_t *json)
{
    lrun r = {.o = o, .prev_snr = KILN_SNR_MAX_DB, .rows = json ? json_array() : NULL};
    kiln_run_options ro = {.num_threads = o->threads};
    bool ok = false;
    kiln_status st = kiln_engine_run_values(e, nin, names, ins, &ro, keep_candidate, &r);
    if (st != KILN_OK) {
        if (r.oom)
            fprintf(stderr, "kiln verify: out of memory keeping the candidate's values\n");
        else
            cli_die(st, "running the candidate (per layer)");
        goto done;
    }
    if (!json) {
        printf("per-layer, sample 1: the candidate's values compared with the reference's (ONNX order)\n");
        printf("%5s  %-32s %-28s %-16s %12s %8s %12s\n", "#", "value", "node", "op", "cosine", "snr_db", "max_abs");
    }
    if ((st = kiln_model_run_values(ref, nin, names, ins, &ro, compare_reference, &r)) != KILN_OK) {
        cli_die(st, "running the reference (per layer)");
        goto done;
    }
    if (json) {
        json_object_set_new(json, "sample", json_integer(0));
        json_object_set_new(json, "reference_values", json_integer(r.ref_values));
        json_object_set_new(json, "candidate_values", json_integer(r.n));
        json_object_set_new(json, "matched", json_integer(r.matched));
        json_object_set_new(json, "shape_mismatch", json_integer(r.shape_mismatch));
        json_object_set_new(json, "jump_db", json_real(o->jump_db));
        json_object_set_new(json, "jumps", json_integer(r.jumps));
        json_object_set(json, "layers", r.rows);
    } else {
        printf("matched %d of %d reference float values (the candidate has %d; %d with another shape); %d jump%s\n\n",
               r.matched, r.ref_values, r.n, r.shape_mismatch, r.jumps, r.jumps == 1 ? "" : "s");
    }
    ok = true;
done:
    for (int i = 0; i < r.n; i++) {
        free(r.v[i].t.data);
        free(r.v[i].name);
        free(r.v[i].quantizes);
        free(r.v[i].layer);
        free(r.v[i].op);
    }
    free(r.v);
    json_decref(r.rows);
    return ok;
}
