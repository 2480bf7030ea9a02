/* Build-time calibration run: at the first profile's opt shapes (or the model's static shapes)
 * the builder executes the optimized graph once on synthetic inputs, timing the candidate tactics
 * of every heavy layer (results cached in an optional JSON timing cache, so rebuilding with the
 * same cache reproduces the same choices byte for byte) and recording every tensor's size for the
 * engine's memory plan. */
#include "build.h"
#include "tactic_time.h"
#include "../core/synth.h"
#include "../runtime/exec.h"
#include "../runtime/plan.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

typedef struct tune_state {
    json_t *entries;     /* timing cache: key -> {"tactic", "ms"} */
    bool dirty;
    int tuned, from_cache;
} tune_state;

static bool heavy(kiln_op op)
{
    switch (op) {
    case KILN_OP_Conv: case KILN_OP_FusedConv: case KILN_OP_ConvTranspose: case KILN_OP_MatMul:
    case KILN_OP_FusedMatMul: case KILN_OP_Gemm: case KILN_OP_FusedGemm: case KILN_OP_Attention:
    case KILN_OP_FusedConvSum:
    case KILN_OP_MaxPool: case KILN_OP_AveragePool: case KILN_OP_Resize: case KILN_OP_LayerNormalization:
    case KILN_OP_Softmax:
        return true;
    default:
        return false;
    }
}

static const char *const tactics[] = {"mt", "st"};   /* all threads / one thread */
_Static_assert(sizeof tactics / sizeof tactics[0] == 2, "kiln__tactic_pick_threads picks among mt and st");

/* One run of a layer with tactic t of tactics[] (tactic_time.h's run function). */
typedef struct tactic_run {
    const kiln_layer *layer;
    kiln_kctx *ctx;
    int full;   /* all threads */
} tactic_run;

static kiln_status run_tactic(void *user, int t)
{
    tactic_run *r = user;
    r->ctx->nthreads = t == 1 ? 1 : r->full;
    return kiln__layer_run(r->layer, r->ctx);
}

static void key_of(const kiln_kctx *ctx, char *k, size_t n)
{
    const kiln_node *nd = ctx->node;
    size_t o = (size_t)snprintf(k, n, "%s.%s|", nd->domain, nd->op_type);
    for (int a = 0; a < nd->n_attr && o < n; a++) {
        const kiln_attr *at = &nd->attrs[a];
        o += (size_t)snprintf(k + o, n - o, "%s=", at->name);
        if (at->type == KILN_ATTR_INT)
            o += (size_t)snprintf(k + o, n - o, "%lld", (long long)at->i);
        else if (at->type == KILN_ATTR_FLOAT)
            o += (size_t)snprintf(k + o, n - o, "%g", at->f);
        else if (at->type == KILN_ATTR_STRING)
            o += (size_t)snprintf(k + o, n - o, "%s", at->s);
        for (int j = 0; at->ints && j < at->n && o < n; j++)
            o += (size_t)snprintf(k + o, n - o, "%lld,", (long long)at->ints[j]);
        if (o < n)
            k[o++] = ';';
    }
    for (int i = 0; i < ctx->n_in && o < n; i++) {
        char s[128] = "-";
        if (ctx->in[i])
            kiln__shape_str(ctx->in[i], s, sizeof s);
        o += (size_t)snprintf(k + o, n - o, "|%s", s);
    }
    if (o < n)
        snprintf(k + o, n - o, "|t%d|isa%u", ctx->nthreads, kiln__host_isa());
}

int kiln__tactic_pick_threads(const double *ns, int rounds)
{
    int pick = kiln__tactic_pick(ns, 2, rounds, KILN_TACTIC_MARGIN);
    return pick == 1 && kiln__tactic_min(ns, 2, rounds, 1) >= KILN_TACTIC_ST_MAX_NS ? 0 : pick;
}

static kiln_status tune(void *user, kiln_kctx *ctx, const kiln_layer *layer)
{
    tune_state *ts = user;
    kiln_node *node = (kiln_node *)ctx->node;   /* the builder owns the graph */
    if (!heavy(node->op) || ctx->nthreads <= 1)
        return kiln__layer_run(layer, ctx);
    char key[2048];
    key_of(ctx, key, sizeof key);
    int full = ctx->nthreads;
    const char *choice = ts->entries ? kiln__timing_cache_tactic(ts->entries, key) : NULL;
    double best_ms = 0;
    if (choice) {
        ts->from_cache++;
    } else {
        enum { NT = sizeof tactics / sizeof tactics[0] };
        double ns[KILN_TACTIC_ROUNDS * NT];
        tactic_run tr = {layer, ctx, full};
        kiln_status ts_st = kiln__tactic_time(NT, KILN_TACTIC_ROUNDS, run_tactic, &tr, NULL, NULL, ns);
        ctx->nthreads = full;
        KILN_TRY(ts_st);
        int pick = kiln__tactic_pick_threads(ns, KILN_TACTIC_ROUNDS);
        choice = tactics[pick];
        best_ms = kiln__tactic_min(ns, NT, KILN_TACTIC_ROUNDS, pick) / 1e6;
        ts->tuned++;
        if (ts->entries) {
            json_t *e = json_object();
            json_object_set_new(e, "tactic", json_string(choice));
            json_object_set_new(e, "ms", json_real(best_ms));
            json_t *all = json_object();   /* every candidate's fastest run, for the record */
            for (int t = 0; t < NT; t++)
                json_object_set_new(all, tactics[t], json_real(kiln__tactic_min(ns, NT, KILN_TACTIC_ROUNDS, t) / 1e6));
            json_object_set_new(e, "candidates_ms", all);
            json_object_set_new(ts->entries, key, e);
            ts->dirty = true;
        }
    }
    kiln__free(node->tactic);
    node->tactic = kiln__strdup(choice);
    ctx->nthreads = !strcmp(choice, "st") ? 1 : full;
    kiln_status st = kiln__layer_run(layer, ctx);   /* the outputs the rest of the graph sees */
    ctx->nthreads = full;
    return st;
}

bool kiln__builder_input_shapes(const struct kiln_engine *e, kiln_tensor *shapes)
{
    const kiln_graph *g = e->g;
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        int nd = -1;
        memset(&shapes[i], 0, sizeof shapes[i]);
        for (int k = 0; e->n_profiles && k < e->profiles[0].n_inputs; k++)
            if (!strcmp(e->profiles[0].names[k], v->name)) {
                nd = e->profiles[0].ndim[k];
                memcpy(shapes[i].dims, e->profiles[0].opt[k], sizeof(int64_t) * (size_t)nd);
            }
        if (nd < 0) {
            if (v->ndim < 0)
                return false;
            nd = v->ndim;
            for (int d = 0; d < nd; d++) {
                if (v->dims[d].value < 0 || v->dims[d].param)
                    return false;
                shapes[i].dims[d] = v->dims[d].value;
            }
        }
        shapes[i].ndim = nd;
        shapes[i].dtype = v->dtype ? v->dtype : KILN_DT_FLOAT32;
    }
    return true;
}

/* Synthetic inputs at the calibration shapes (values by the one rule of core/synth.h); false if
 * some input has no concrete shape, or (why: the reason) one cannot be made at its shape, e.g. over the tensor size
 * limit. */
static bool make_inputs(const struct kiln_engine *e, kiln_tensor *ins, char *why, size_t cap)
{
    const kiln_graph *g = e->g;
    if (!kiln__builder_input_shapes(e, ins))
        return false;
    uint64_t rng = KILN_SYNTH_SEED;
    for (int i = 0; i < g->n_inputs; i++) {
        kiln_tensor shape = ins[i];
        if (kiln__tensor_alloc(&ins[i], shape.dtype, shape.ndim, shape.dims) != KILN_OK ||
            kiln__synth_fill(&ins[i], g->values[g->inputs[i]].name, &rng) != KILN_OK) {
            /* the shapes were given: say why they could not be used (this read "no fixed calibration shapes") */
            size_t o = (size_t)snprintf(why, cap, "no synthetic input '%s' at ", g->values[g->inputs[i]].name);
            for (int d = 0; d < shape.ndim && o < cap; d++)
                o += (size_t)snprintf(why + o, cap - o, "%s%lld", d ? "x" : "", (long long)shape.dims[d]);
            if (o < cap)
                snprintf(why + o, cap - o, ": %s", kiln_last_error());
            kiln_clear_last_error();   /* no calibration: the engine plans memory when it runs */
            return false;
        }
    }
    return true;
}

/* True when every input has exactly one possible shape (static dims, or a single profile with
 * min == max), i.e. when a recorded run's shapes hold for every run of the engine. */
bool kiln__engine_shapes_fixed(const struct kiln_engine *e)
{
    const kiln_graph *g = e->g;
    if (e->n_profiles > 1)
        return false;
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        bool in_profile = false;
        for (int k = 0; e->n_profiles && k < e->profiles[0].n_inputs; k++)
            if (!strcmp(e->profiles[0].names[k], v->name)) {
                in_profile = true;
                for (int d = 0; d < e->profiles[0].ndim[k]; d++)
                    if (e->profiles[0].min[k][d] != e->profiles[0].max[k][d])
                        return false;
            }
        if (in_profile)
            continue;
        if (v->ndim < 0)
            return false;
        for (int d = 0; d < v->ndim; d++)
            if (v->dims[d].value < 0 || v->dims[d].param)
                return false;
    }
    return true;
}

json_t *kiln__timing_cache_parse(const char *buf, size_t len)
{
    json_error_t err;
    json_t *root = json_loadb(buf, len, 0, &err);
    json_t *ver = root ? json_object_get(root, "kiln_timing_cache") : NULL, *ent = json_object_get(root, "entries");
    bool ok = json_is_object(root) && json_is_integer(ver) && json_integer_value(ver) == 1 && json_is_object(ent);
    const char *key;
    json_t *v;
    if (ok)
        json_object_foreach(ent, key, v)
            ok &= json_is_object(v) && json_is_string(json_object_get(v, "tactic"));
    json_t *entries = ok ? json_incref(ent) : NULL;
    json_decref(root);
    return entries;
}

/* The timing cache named by --timing-cache: absent -> empty (created when saved); a kiln timing
 * cache -> its entries. Anything else (another file, garbage, a directory) is an error, so that the
 * save at the end of the build cannot replace a file that is not a timing cache. */
static kiln_status load_cache(const char *path, json_t **entries)
{
    *entries = NULL;
    struct stat sb;
    if (!path || (lstat(path, &sb) != 0 && errno == ENOENT)) {
        *entries = json_object();
        return *entries ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    void *buf;
    size_t len;
    kiln_status st = kiln__read_file(path, &buf, &len);
    if (st != KILN_OK) {
        kiln__err_prefix("timing cache");
        return st;
    }
    *entries = kiln__timing_cache_parse(buf, len);
    kiln__free(buf);
    if (!*entries)
        return kiln__err(KILN_ERR_PARSE, "'%s' exists and is not a kiln timing cache (left untouched; name a new "
                         "file or an existing timing cache)", path);
    return KILN_OK;
}

static kiln_status save_cache(const char *path, json_t *entries)
{
    json_t *root = json_object();
    json_object_set_new(root, "kiln_timing_cache", json_integer(1));
    json_object_set(root, "entries", entries);
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(root);
    if (!text)
        return kiln__err(KILN_ERR_NOMEM, "out of memory writing timing cache '%s'", path);
    kiln_status st = kiln__write_file_atomic(path, text, strlen(text));
    free(text);
    if (st != KILN_OK)
        kiln__err_prefix("timing cache");
    return st;
}

const char *kiln__timing_cache_tactic(json_t *entries, const char *key)
{
    json_t *hit = json_object_get(entries, key);
    const char *c = json_string_value(json_object_get(hit, "tactic"));
    for (size_t t = 0; c && t < sizeof tactics / sizeof tactics[0]; t++)
        if (!strcmp(c, tactics[t]))
            return tactics[t];
    return NULL;
}

/* The memory plan from each value's byte size (rec) at the input shapes ins, and those shapes, into res */
static kiln_status plan_at(const kiln_graph *g, const size_t *rec, const kiln_tensor *meta, bool host,
                           const kiln_tensor *ins, kiln_calib_result *res)
{
    for (int i = 0; i < g->n_inputs && i < KILN_MAX_CALIB_INPUTS; i++) {
        res->ndim[i] = ins[i].ndim;
        memcpy(res->dims[i], ins[i].dims, sizeof ins[i].dims);
    }
    res->n_inputs = g->n_inputs;
    return kiln__plan_make(g, rec, meta, host ? kiln__plan_host_flags() : 0, &res->plan);
}

kiln_status kiln__builder_calibrate(struct kiln_engine *e, const char *cache_path, int nthreads, bool tune_tactics,
                                    bool host, kiln_calib_result *res, const kiln_run_ctl *ctl)
{
    memset(res, 0, sizeof *res);
    const kiln_graph *g = e->g;
    kiln_tensor *ins = kiln__calloc((size_t)g->n_inputs + 1, sizeof *ins);
    const kiln_tensor **feed = kiln__calloc((size_t)g->n_inputs + 1, sizeof *feed);
    kiln_tensor *outs = kiln__calloc((size_t)g->n_outputs + 1, sizeof *outs);
    size_t *rec = kiln__calloc((size_t)g->n_values + 1, sizeof(size_t));
    kiln_tensor *meta = kiln__calloc((size_t)g->n_values + 1, sizeof(kiln_tensor));   /* shapes, for the plan */
    kiln_status st = KILN_OK;
    tune_state ts = {0};
    if (!ins || !feed || !outs || !rec || !meta) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (tune_tactics && (st = load_cache(cache_path, &ts.entries)) != KILN_OK)
        goto done;
    const char *force_run = getenv("KILN_BUILD_PLAN_RUN");
    if (!tune_tactics && !(force_run && !strcmp(force_run, "1")) && kiln__builder_input_shapes(e, ins) &&
        kiln__plan_bytes_inferred(g, ins, rec, meta)) {
        res->calibrated = res->inferred = true;
        st = plan_at(g, rec, meta, host, ins, res);
        goto done;
    }
    if (!make_inputs(e, ins, res->skipped, sizeof res->skipped)) {
        /* dynamic shapes without a profile: nothing to calibrate at; shapes that cannot be used: warned about
         * whether or not the passes report is asked for */
        if (res->skipped[0])
            kiln__log(KILN_LOG_WARN, "no tactics timed and no memory plan at build time (%s); the engine plans "
                      "memory when it runs", res->skipped);
        goto done;
    }
    for (int i = 0; i < g->n_inputs; i++)
        feed[i] = &ins[i];
    kiln_mem m = {.record = rec, .record_meta = meta};
    kiln_hooks h = {.tune = tune_tactics ? tune : NULL, .tune_user = &ts};
    kiln_pool *pool = kiln__pool_create(nthreads);
    kiln_run_env env = {.pool = pool, .nthreads = kiln__pool_threads(pool), .ctl = ctl};
    kiln_status rs = kiln__exec_graph_ex(g, NULL, feed, outs, &env, 0, &m, &h);
    kiln__pool_free(pool);
    if (rs == KILN_OK) {
        res->calibrated = true;
        res->tuned = ts.tuned;
        res->from_cache = ts.from_cache;
        st = plan_at(g, rec, meta, host, ins, res);
        if (st == KILN_OK && cache_path && ts.dirty)
            st = save_cache(cache_path, ts.entries);
    } else if ((st = kiln__run_check(ctl)) != KILN_OK) {
        kiln__err_prefix("build-time run on synthetic data (budget: --build-run-budget SECONDS)");
    } else {
        /* synthetic data can be invalid for some models (e.g. ids out of a vocabulary, or a Reshape
         * target that is an input): the engine is still correct, it just keeps default tactics and
         * plans memory at run time. The wording is docs/CLI.md's, and says the failure is the
         * synthetic run's: it is not a calibration (fp32 builds have none) and not the user's run. */
        snprintf(res->skipped, sizeof res->skipped, "the run on synthetic data failed: %s", kiln_last_error());
        kiln__log(KILN_LOG_WARN, "no tactics timed and no memory plan at build time (%s); the engine plans "
                  "memory when it runs", res->skipped);
        kiln_clear_last_error();
        for (int i = 0; i < g->n_nodes; i++) {
            kiln__free(g->nodes[i].tactic);
            g->nodes[i].tactic = NULL;
        }
    }
done:
    json_decref(ts.entries);
    for (int i = 0; ins && i < g->n_inputs; i++)
        kiln__tensor_release(&ins[i]);
    for (int o = 0; outs && o < g->n_outputs; o++)
        kiln__tensor_release(&outs[o]);
    kiln__free(ins);
    kiln__free(feed);
    kiln__free(outs);
    kiln__free(rec);
    kiln__free(meta);
    return st;
}
