/* kiln verify --per-layer: the candidate's intermediate values against the reference's.
 * The candidate runs first (kiln_engine_run_values) and its float values are kept (quantized ones
 * arrive dequantized); then the reference runs (kiln_model_run_values) and each of its values that
 * the candidate also has is compared on the spot, in the reference's (ONNX) order. A candidate value
 * matches a reference value by (1) its name, (2) being the dequantized QuantizeLinear of it (both
 * get a row when both exist: the float value, then its quantized form), or (3) for a quantized
 * layer that took the place of float ones (QLinearConv from DQ -> Conv -> BN -> Q keeps the Conv's
 * name and lists the fused nodes), the last reference value those nodes produce; a Relu / Clip
 * right after them may have been folded into the quantization's saturation, so it is taken when
 * closer. Values fused away in the candidate are simply absent (docs/VERIFY.md). */
#include "verify.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NOISE_DB 80.0   /* a jump must also go below this SNR (FP32 rounding differences are above) */
#define MAX_PEND 8      /* layers matched by node name open at once (branches between their fused nodes) */

typedef struct cval {
    char *name, *quantizes, *layer, *op;
    char *fused;         /* ",layer,fused_from...," for membership tests */
    kiln_dtype dtype;
    kiln_tensor t;       /* float32 copy */
} cval;

/* A reference value matched by node name, held until a later value shows whether another reference value of the
 * same candidate layer (a later fused node, or a Relu / Clip folded into its quantization) stands for its output. */
typedef struct pending {
    const cval *c;
    kiln_compare_stats s;
    int layer;
    char *name, *node, *op;
} pending;

typedef struct lrun {
    cval *v;
    int n, cap;
    int ref_values, matched, shape_mismatch, jumps;
    int unreadable;      /* candidate values a device held only in E4M3 (not comparable) */
    double prev_snr;
    const vlayer_opts *o;
    json_t *rows;        /* JSON rows, or NULL: print */
    pending pend[MAX_PEND];   /* open layers (sorted by their value's place before rows are emitted) */
    int n_pend;
    bool oom;
} lrun;

/* What a row shows of the reference value. */
typedef struct row_id {
    int layer;
    const char *name, *node, *op;
} row_id;

static bool same_shape(const kiln_tensor *a, const kiln_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static kiln_status keep_candidate(void *user, const kiln_value_view *v)
{
    lrun *r = user;
    if (!v->value) {   /* held only in E4M3 on the device: counted, not compared */
        r->unreadable++;
        return KILN_OK;
    }
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
    size_t fl = strlen(v->node) + strlen(v->fused_from) + 4;
    if ((c->fused = malloc(fl)) != NULL)
        snprintf(c->fused, fl, ",%s,%s,", v->node, v->fused_from);
    c->dtype = v->dtype;
    r->n++;
    if (!c->t.data || !c->name || !c->layer || !c->op || !c->fused || (v->quantizes && !c->quantizes))
        goto oom;
    memcpy(c->t.data, v->value->data, v->value->nbytes);
    return KILN_OK;
oom:
    r->oom = true;
    return KILN_ERR_NOMEM;
}

/* The candidate value of name `name` (quantized false), or the dequantized QuantizeLinear output of
 * it (quantized true: what the next layer consumes); NULL if none. */
static const cval *find(const lrun *r, const char *name, bool quantized)
{
    for (int i = 0; i < r->n; i++)
        if (quantized ? r->v[i].quantizes && !strcmp(r->v[i].quantizes, name)
                      : !r->v[i].quantizes && !strcmp(r->v[i].name, name))
            return &r->v[i];
    return NULL;
}

/* Whether reference node `node` is the candidate's layer or one of the ONNX nodes fused into it. */
static bool in_layer(const cval *c, const char *node)
{
    size_t n = strlen(node);
    for (const char *p = c->fused; n && (p = strstr(p, node)) != NULL; p++)
        if (p[-1] == ',' && p[n] == ',')
            return true;
    return false;
}

/* A quantized candidate value (no reference value has its name) whose layer is, or fused, the
 * reference node `node`. */
static const cval *find_by_node(const lrun *r, const char *node, const kiln_tensor *t)
{
    for (int i = 0; node[0] && i < r->n; i++) {
        const cval *c = &r->v[i];
        if (c->dtype != KILN_DT_FLOAT32 && !c->quantizes && in_layer(c, node) && same_shape(&c->t, t))
            return c;
    }
    return NULL;
}

/* a metric, null where it is not a finite number (NaN: nothing compared) */
static json_t *num_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static void emit(lrun *r, const row_id *id, const cval *c, const kiln_compare_stats *s, const char *how)
{
    bool jump = s->nonfinite > 0 || (s->snr_db < NOISE_DB && r->prev_snr - s->snr_db > r->o->jump_db);
    r->jumps += jump;
    if (!isnan(s->snr_db))   /* a value with nothing compared (n/a) is no baseline for the next */
        r->prev_snr = s->snr_db;
    if (!r->rows) {
        char note[320] = "", cs[32] = "n/a", sn[32] = "n/a", ma[32] = "n/a";
        if (strcmp(how, "name"))
            snprintf(note, sizeof note, "  (%s %s)", !strcmp(how, "quantizes") ? "dequantized" : "by node name:",
                     cli_esc(c->name));
        if (s->count > 0) {
            snprintf(cs, sizeof cs, "%.8f", s->cosine);
            snprintf(sn, sizeof sn, "%.2f", s->snr_db);
            snprintf(ma, sizeof ma, "%.4g", s->max_abs);
        }
        printf("%5d  %-32s %-28s %-16s %12s %8s %12s%s%s%s\n", id->layer, cli_esc(id->name), cli_esc(id->node),
               cli_esc(id->op), cs, sn, ma, s->nonfinite ? "  NaN/Inf" : "", jump ? "  <-- jump" : "", note);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(id->layer));
    json_object_set_new(o, "value", cli_json_str(id->name));
    json_object_set_new(o, "node", cli_json_str(id->node));
    json_object_set_new(o, "op", cli_json_str(id->op));
    json_object_set_new(o, "matched_by", json_string(how));
    json_object_set_new(o, "candidate_value", cli_json_str(c->name));
    json_object_set_new(o, "candidate_layer", cli_json_str(c->layer));
    json_object_set_new(o, "candidate_op", cli_json_str(c->op));
    json_object_set_new(o, "candidate_dtype", json_string(kiln_dtype_name(c->dtype)));
    json_object_set_new(o, "dequantized_from", c->dtype != KILN_DT_FLOAT32 ? cli_json_str(c->name) : json_null());
    json_object_set_new(o, "cosine", num_or_null(s->cosine));
    json_object_set_new(o, "snr_db", num_or_null(s->snr_db));
    json_object_set_new(o, "max_abs", num_or_null(s->max_abs));
    json_object_set_new(o, "max_rel", num_or_null(s->max_rel));
    json_object_set_new(o, "mean_abs", num_or_null(s->mean_abs));
    json_object_set_new(o, "nonfinite", json_integer(s->nonfinite));
    json_object_set_new(o, "jump", json_boolean(jump));
    json_array_append_new(r->rows, o);
}

static void pending_free(pending *p)
{
    free(p->name);
    free(p->node);
    free(p->op);
    memset(p, 0, sizeof *p);
}

/* Emits open layers 0 .. k (the first k + 1 of the array) and closes them */
static void pending_flush_to(lrun *r, int k)
{
    if (k >= r->n_pend)
        k = r->n_pend - 1;
    for (int i = 0; i <= k; i++) {
        pending *p = &r->pend[i];
        emit(r, &(row_id){p->layer, p->name, p->node, p->op}, p->c, &p->s, "node");
        r->matched++;
        pending_free(p);
    }
    int left = r->n_pend - (k + 1);
    memmove(r->pend, r->pend + k + 1, sizeof *r->pend * (size_t)(left > 0 ? left : 0));
    for (int i = left > 0 ? left : 0; i < r->n_pend; i++)
        memset(&r->pend[i], 0, sizeof r->pend[i]);
    r->n_pend = left > 0 ? left : 0;
}

static void pending_sort(lrun *r)
{
    for (int a = 1; a < r->n_pend; a++)
        for (int b = a; b > 0 && r->pend[b - 1].layer > r->pend[b].layer; b--) {
            pending t = r->pend[b];
            r->pend[b] = r->pend[b - 1];
            r->pend[b - 1] = t;
        }
}

static void pending_flush(lrun *r)
{
    pending_sort(r);
    pending_flush_to(r, r->n_pend - 1);
}

/* Holds candidate c, compared (s) with reference value v, in open layer p (an existing one, or a new one
 * when p is NULL) until a later value closes it. */
static kiln_status pending_set(lrun *r, pending *p, const cval *c, const kiln_compare_stats *s,
                               const kiln_value_view *v)
{
    if (!p) {
        if (r->n_pend == MAX_PEND)
            pending_flush_to(r, 0);
        p = &r->pend[r->n_pend++];
    } else {
        pending_free(p);
    }
    *p = (pending){.c = c, .s = *s, .layer = v->layer, .name = strdup(v->name), .node = strdup(v->node),
                   .op = strdup(v->op)};
    if (!p->name || !p->node || !p->op) {
        r->oom = true;
        return KILN_ERR_NOMEM;
    }
    return KILN_OK;
}

static kiln_status compare_reference(void *user, const kiln_value_view *v)
{
    lrun *r = user;
    const kiln_tensor *t = v->value;
    row_id id = {v->layer, v->name, v->node, v->op};
    kiln_compare_stats s;
    kiln_status st;
    for (int i = 0; i < r->n_pend; i++) {
        /* an open layer's output stands for the last of the reference values its fused nodes produce; a Relu /
         * Clip right after them may be folded into its saturation (closer wins) */
        pending *p = &r->pend[i];
        bool member = in_layer(p->c, v->node) && same_shape(&p->c->t, t);
        bool act = (!strcmp(v->op, "Relu") || !strcmp(v->op, "Clip")) && v->input && !strcmp(v->input, p->name) &&
                   same_shape(&p->c->t, t);
        if ((member || act) && (st = kiln_compare(t, &p->c->t, &s)) != KILN_OK)
            return st;
        if (member || (act && s.snr_db > p->s.snr_db)) {
            r->ref_values++;
            return pending_set(r, p, p->c, &s, v);
        }
    }
    /* a reader of an open layer's value closes it (and those opened before it); values of another branch that do
     * not read it (a block's shortcut, computed between its last convolution and the add that a QLinearConvAdd
     * fuses with it) leave it open for its later members */
    for (int i = r->n_pend - 1; i >= 0; i--)
        if (v->input && !strcmp(v->input, r->pend[i].name)) {
            /* rows in reference order: the open layers by their value's place (a layer's value moves on as its
             * later members arrive), this one and every one before it */
            int at = r->pend[i].layer, k = 0;
            pending_sort(r);
            while (k + 1 < r->n_pend && r->pend[k + 1].layer <= at)
                k++;
            pending_flush_to(r, k);
            break;
        }
    r->ref_values++;
    const cval *byname = find(r, v->name, false), *byq = find(r, v->name, true), *c;
    if (!byname && !byq && (c = find_by_node(r, v->node, t)) != NULL) {
        if ((st = kiln_compare(t, &c->t, &s)) != KILN_OK)
            return st;
        return pending_set(r, NULL, c, &s, v);
    }
    /* the float value of that name, then (a second row) its quantized form */
    bool any = false;
    for (int k = 0; k < 2; k++) {
        if (!(c = k ? byq : byname))
            continue;
        if (!same_shape(&c->t, t)) {
            r->shape_mismatch++;
            continue;
        }
        if ((st = kiln_compare(t, &c->t, &s)) != KILN_OK)
            return st;
        emit(r, &id, c, &s, k ? "quantizes" : "name");
        any = true;
    }
    r->matched += any;
    return KILN_OK;
}

bool verify_layers(kiln_engine_t e, kiln_model_t ref, int nin, const char **names, const kiln_tensor *ins,
                   const vlayer_opts *o, json_t *json)
{
    lrun r = {.o = o, .prev_snr = KILN_SNR_MAX_DB, .rows = json ? json_array() : NULL};
    kiln_run_options ro = {.num_threads = o->threads};
    kiln_run_options cro = {.num_threads = o->threads, .device = o->device, .device_flags = o->device_flags};
    bool ok = false;
    kiln_status st = kiln_engine_run_values(e, nin, names, ins, &cro, keep_candidate, &r);
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
        if (r.oom)
            fprintf(stderr, "kiln verify: out of memory\n");
        else
            cli_die(st, "running the reference (per layer)");
        goto done;
    }
    pending_flush(&r);
    if (json) {
        json_object_set_new(json, "sample", json_integer(0));
        json_object_set_new(json, "reference_values", json_integer(r.ref_values));
        json_object_set_new(json, "candidate_values", json_integer(r.n));
        json_object_set_new(json, "matched", json_integer(r.matched));
        json_object_set_new(json, "shape_mismatch", json_integer(r.shape_mismatch));
        json_object_set_new(json, "jump_db", json_real(o->jump_db));
        json_object_set_new(json, "jumps", json_integer(r.jumps));
        json_object_set_new(json, "device_e4m3_values", json_integer(r.unreadable));
        json_object_set(json, "layers", r.rows);
    } else {
        printf("matched %d of %d reference float values (the candidate has %d; %d with another shape); %d jump%s\n",
               r.matched, r.ref_values, r.n, r.shape_mismatch, r.jumps, r.jumps == 1 ? "" : "s");
        if (r.unreadable)
            printf("%d more candidate value%s held only in E4M3 on the device (FP8 storage) not compared: build with "
                   "KILN_FP8_STORAGE=0 to see them\n", r.unreadable, r.unreadable == 1 ? "" : "s");
        printf("\n");
    }
    ok = true;
done:
    for (int i = 0; i < r.n; i++) {
        free(r.v[i].t.data);
        free(r.v[i].name);
        free(r.v[i].quantizes);
        free(r.v[i].layer);
        free(r.v[i].op);
        free(r.v[i].fused);
    }
    free(r.v);
    for (int i = 0; i < r.n_pend; i++)
        pending_free(&r.pend[i]);
    json_decref(r.rows);
    return ok;
}
