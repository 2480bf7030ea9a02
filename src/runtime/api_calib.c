/* Public calibration API (kiln_calibrate): reads the calibration set, runs the model on it in
 * batches twice through the interpreter's observe hook (pass 1: amax per tensor, pass 2: histograms),
 * picks thresholds (src/quant/calib.c) and reads or writes the calibration cache. */
#include "model.h"
#include "exec.h"
#include "../engine/graph_ser.h"
#include "../quant/quant.h"
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#define DEFAULT_MAX_BATCH 32
#define MAX_BATCH_BYTES ((size_t)256 << 20)   /* a dynamic batch holds at most this much input (>= 1 sample) */

struct kiln_calibration {
    kiln_calib_table t;
    bool from_cache;
    char model_hex[17], data_hex[17];
};

static kiln_status model_hash(const kiln_graph *g, uint64_t *out)
{
    kiln_wbuf gw = {0}, ww = {0};
    kiln_status st = kiln__graph_write(&gw, &ww, g);
    if (st == KILN_OK)
        *out = kiln__hash64(ww.p, ww.len, kiln__hash64(gw.p, gw.len, 0));
    kiln__w_free(&gw);
    kiln__w_free(&ww);
    return st;
}

/* One calibration run over the set: its graph, statistics, threads and batch geometry. */
typedef struct calib_run {
    const kiln_graph *g;
    kiln_calib_stats stats;
    kiln_pool *pool;
    kiln_run_ctl ctl;
    kiln_run_env env;
    bool fixed;            /* the model's batch dim is fixed: every run has exactly `rows` rows */
    int64_t rows;          /* rows per run (for the current sample shape) */
    int64_t max_rows;      /* dynamic batch: the most rows per run asked for */
    kiln_tensor *batch;    /* per input: the batch being filled (dims[0] = rows so far) */
    int64_t done, total;
    const kiln_calib_options *o;
    int pass;
} calib_run;

static kiln_status observe(void *user, const kiln_node *n, const kiln_tensor *const *outputs)
{
    calib_run *r = user;
    for (int o = 0; o < n->n_out; o++)
        if (n->out[o] >= 0)
            KILN_TRY(kiln__stats_add(&r->stats, n->out[o], outputs[o]));
    return KILN_OK;
}

/* Runs the model on the filled batch and empties it. */
static kiln_status flush(calib_run *r)
{
    const kiln_graph *g = r->g;
    int64_t rows = r->batch[0].dims[0];
    if (rows == 0)
        return KILN_OK;
    if (r->fixed && rows != r->rows)
        return kiln__err(KILN_ERR_SHAPE, "calibration data: %lld samples of one shape are left over, but the model's "
                         "batch size is fixed at %lld", (long long)rows, (long long)r->rows);
    const kiln_tensor **feed = kiln__calloc((size_t)g->n_inputs, sizeof *feed);
    kiln_tensor *outs = kiln__calloc((size_t)g->n_outputs + 1, sizeof *outs);
    kiln_status st = feed && outs ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; st == KILN_OK && i < g->n_inputs; i++) {
        feed[i] = &r->batch[i];
        if ((st = kiln__check_input(&g->values[g->inputs[i]], feed[i])) == KILN_OK)
            st = kiln__stats_add(&r->stats, g->inputs[i], feed[i]);
    }
    kiln_hooks hooks = {.observe = observe, .observe_user = r};
    if (st == KILN_OK)
        st = kiln__exec_graph_ex(g, NULL, feed, outs, &r->env, 0, NULL, &hooks);
    if (st == KILN_OK)
        for (int o = 0; o < g->n_outputs; o++)
            kiln__tensor_release(&outs[o]);
    kiln__free(outs);
    kiln__free(feed);
    for (int i = 0; i < g->n_inputs; i++)
        r->batch[i].dims[0] = 0;
    r->done += rows;
    if (st == KILN_OK && r->o->progress)
        r->o->progress(r->pass, r->done, r->total, r->o->progress_user);
    return st;
}

static bool same_row_shape(const kiln_tensor *a, const kiln_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int d = 1; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    return true;
}

static size_t row_bytes(const kiln_tensor *t)
{
    return (size_t)kiln__shape_numel(t->ndim - 1, t->dims + 1) * kiln_dtype_size(t->dtype);
}

/* Makes the batch buffers fit the sample's row shape, flushing a batch of another shape. */
static kiln_status batch_reshape(calib_run *r, const kiln_tensor *sample)
{
    int n = r->g->n_inputs;
    bool same = r->batch[0].data != NULL;
    for (int i = 0; same && i < n; i++)
        same = same_row_shape(&r->batch[i], &sample[i]);
    if (same)
        return KILN_OK;
    KILN_TRY(flush(r));
    if (!r->fixed) {
        size_t bytes = 0;
        for (int i = 0; i < n; i++)
            bytes += row_bytes(&sample[i]);
        r->rows = bytes ? (int64_t)(MAX_BATCH_BYTES / bytes) : r->max_rows;
        r->rows = r->rows < 1 ? 1 : r->rows > r->max_rows ? r->max_rows : r->rows;
    }
    for (int i = 0; i < n; i++) {
        kiln__tensor_release(&r->batch[i]);
        if (kiln_dtype_size(sample[i].dtype) == 0)
            return kiln__err(KILN_ERR_DTYPE, "calibration data: dtype %s is not supported", kiln_dtype_name(sample[i].dtype));
        kiln_tensor shape = sample[i];
        shape.dims[0] = r->rows;
        KILN_TRY(kiln__tensor_alloc(&r->batch[i], sample[i].dtype, sample[i].ndim, shape.dims));
        r->batch[i].dims[0] = 0;
    }
    return KILN_OK;
}

/* Appends the rows of one sample (one tensor per input), running full batches. */
static kiln_status add_sample(calib_run *r, const kiln_tensor *sample)
{
    KILN_TRY(batch_reshape(r, sample));
    int64_t rows = sample[0].dims[0];
    for (int64_t at = 0; at < rows;) {
        int64_t have = r->batch[0].dims[0], take = rows - at < r->rows - have ? rows - at : r->rows - have;
        for (int i = 0; i < r->g->n_inputs; i++) {
            size_t rb = row_bytes(&sample[i]);
            memcpy((uint8_t *)r->batch[i].data + (size_t)have * rb, (const uint8_t *)sample[i].data + (size_t)at * rb,
                   (size_t)take * rb);
            r->batch[i].dims[0] = have + take;
        }
        at += take;
        if (r->batch[0].dims[0] == r->rows)
            KILN_TRY(flush(r));
    }
    return KILN_OK;
}

static kiln_status run_pass(calib_run *r, const kiln_calib_set *set, int pass)
{
    r->pass = r->stats.pass = pass;
    r->done = 0;
    int n = r->g->n_inputs;
    kiln_tensor *ts = kiln__calloc((size_t)n, sizeof *ts);
    if (!ts)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = KILN_OK;
    for (int s = 0; st == KILN_OK && s < set->n; s++) {
        for (int i = 0; st == KILN_OK && i < n; i++)
            st = kiln_npy_read(set->s[s].path[i], &ts[i]);
        if (st == KILN_OK && kiln__calib_sample_hash(ts, n) != set->s[s].hash)
            st = kiln__err(KILN_ERR_IO, "calibration file '%s' changed during calibration", set->s[s].path[0]);
        if (st == KILN_OK)
            st = add_sample(r, ts);
        for (int i = 0; i < n; i++) {
            kiln__free(ts[i].data);
            ts[i].data = NULL;
        }
    }
    if (st == KILN_OK)
        st = flush(r);
    kiln__free(ts);
    return st;
}

typedef struct thresh_job {
    const kiln_graph *g;
    const kiln_calib_stats *s;
    const kiln_calib_options *o;
    const int *slots;
    kiln_calib_table *t;
} thresh_job;

static void thresholds(void *ctx, int64_t begin, int64_t end)
{
    thresh_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        int k = j->slots[i];
        double amax = j->s->amax[k], lo;
        int steps;
        kiln__calib_grid(j->g, j->s->value[k], &steps, &lo);   /* uint8 tensors: their 255-step grid */
        double t = kiln__calib_threshold_grid(j->o->method, j->o->param, j->s->hist + (size_t)k * KILN_CALIB_BINS,
                                              KILN_CALIB_BINS, amax, steps, lo);
        j->t->scale[i] = kiln__calib_scale(t);
        j->t->amax[i] = (float)amax;
    }
}

/* Finite values slot k held over the data (its histogram's counts: pass 2 adds exactly those). */
static uint64_t finite_count(const kiln_calib_stats *s, int k)
{
    uint64_t n = 0;
    for (int b = 0; b < KILN_CALIB_BINS; b++)
        n += s->hist[(size_t)k * KILN_CALIB_BINS + b];
    return n;
}

/* A tensor that held NaN/Inf and not one finite value has no range to calibrate: an error naming the first such
 * tensor (graph value order) and counting the others, where scale 1 (an all-zero tensor's) was silently used. */
static kiln_status no_range(const calib_run *r)
{
    const kiln_calib_stats *s = &r->stats;
    int first = -1, more = 0;
    for (int k = 0; k < s->n; k++)
        if (s->seen[k] && s->nonfinite[k] > 0 && finite_count(s, k) == 0) {
            if (first < 0)
                first = k;
            else
                more++;
        }
    if (first < 0)
        return KILN_OK;
    char others[64] = "";
    if (more)
        snprintf(others, sizeof others, " (nor %d other tensor%s)", more, more == 1 ? "" : "s");
    return kiln__err(KILN_ERR_INVALID_ARG,
                     "tensor '%s' held no finite value in the calibration data (%lld values, all NaN or "
                     "Inf), so it has no range to calibrate%s; check the data",
                     r->g->values[s->value[first]].name, (long long)s->nonfinite[first], others);
}

/* The table of every tensor seen as float, in graph value order. */
static kiln_status make_table(calib_run *r, const kiln_calib_options *o, kiln_calib_table *t)
{
    const kiln_calib_stats *s = &r->stats;
    KILN_TRY(no_range(r));
    int *slots = kiln__calloc((size_t)s->n + 1, sizeof *slots);
    t->name = kiln__calloc((size_t)s->n + 1, sizeof *t->name);
    t->scale = kiln__calloc((size_t)s->n + 1, sizeof *t->scale);
    t->amax = kiln__calloc((size_t)s->n + 1, sizeof *t->amax);
    if (!slots || !t->name || !t->scale || !t->amax) {
        kiln__free(slots);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    int n = 0;
    for (int k = 0; k < s->n; k++) {
        if (!s->seen[k])
            continue;
        const char *name = r->g->values[s->value[k]].name;
        if (s->nonfinite[k])
            kiln__log(KILN_LOG_WARN, "calibration: tensor '%s' has %lld NaN/Inf values (left out of its range)", name,
                      (long long)s->nonfinite[k]);
        if (!(t->name[n] = kiln__strdup(name))) {
            kiln__free(slots);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        t->n = n + 1;
        slots[n++] = k;
    }
    thresh_job job = {.g = r->g, .s = s, .o = o, .slots = slots, .t = t};
    kiln__parallel_for(r->pool, 0, n, 1, thresholds, &job);
    kiln__free(slots);
    return KILN_OK;
}

static kiln_status calibrate_data(const kiln_graph *g, const kiln_calib_options *o, const kiln_calib_set *set,
                                  kiln_calib_table *t)
{
    calib_run r = {.g = g, .o = o, .total = set->rows, .max_rows = o->max_batch > 0 ? o->max_batch : DEFAULT_MAX_BATCH};
    for (int i = 0; i < g->n_inputs; i++) {   /* a fixed batch dim sets the rows of every run */
        const kiln_value *v = &g->values[g->inputs[i]];
        if (v->ndim >= 1 && !v->dims[0].param && v->dims[0].value > 0) {
            r.fixed = true;
            r.rows = v->dims[0].value;
            break;
        }
    }
    KILN_TRY(kiln__stats_init(&r.stats, g));
    r.batch = kiln__calloc((size_t)g->n_inputs, sizeof *r.batch);
    r.pool = kiln__pool_create(o->num_threads);
    kiln_status st = r.batch && r.pool ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    r.ctl = kiln__run_ctl(NULL, 0);
    r.env = (kiln_run_env){.pool = r.pool, .nthreads = kiln__pool_threads(r.pool), .ctl = &r.ctl};
    for (int pass = 1; st == KILN_OK && pass <= 2; pass++)
        st = run_pass(&r, set, pass);
    if (st == KILN_OK)
        st = make_table(&r, o, t);
    for (int i = 0; r.batch && i < g->n_inputs; i++)
        kiln__tensor_release(&r.batch[i]);
    kiln__free(r.batch);
    kiln__pool_free(r.pool);
    kiln__stats_free(&r.stats);
    return st;
}

kiln_status kiln_calib_method_parse(const char *text, kiln_calib_method *method, double *param)
{
    if (!text || !method || !param)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_calib_method_parse: NULL argument");
    *param = 0;
    static const struct { const char *name; kiln_calib_method m; } names[] = {
        {"entropy", KILN_CALIB_ENTROPY}, {"minmax", KILN_CALIB_MINMAX}, {"mse", KILN_CALIB_MSE},
        {"percentile", KILN_CALIB_PERCENTILE}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(text, names[i].name)) {
            *method = names[i].m;
            *param = names[i].m == KILN_CALIB_PERCENTILE ? 99.99 : 0;
            return KILN_OK;
        }
    if (!strncmp(text, "percentile:", 11)) {
        char *end;
        double p = strtod(text + 11, &end);
        if (end != text + 11 && !*end && p > 0 && p <= 100) {
            *method = KILN_CALIB_PERCENTILE;
            *param = p;
            return KILN_OK;
        }
    }
    return kiln__err(KILN_ERR_INVALID_ARG, "unknown calibration method '%s' (entropy, minmax, percentile[:P] with "
                     "0 < P <= 100, mse)", text);
}

kiln_status kiln_calibrate(kiln_model_t m, const kiln_calib_options *o, kiln_calibration_t *out)
{
    if (!m || !o || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_calibrate: NULL argument");
    *out = NULL;
    if (o->method < KILN_CALIB_ENTROPY || o->method > KILN_CALIB_MSE ||
        (o->method == KILN_CALIB_PERCENTILE && !(o->param == 0 || (o->param > 0 && o->param <= 100))))
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_calibrate: invalid method or percentile");
    if (!o->data_dir && !o->cache_path)
        return kiln__err(KILN_ERR_INVALID_ARG, "calibration needs data (a directory of .npy files) or a cache");
    const kiln_graph *g = m->g;
    KILN_TRY(kiln__graph_check_supported(g));
    struct kiln_calibration *r = kiln__calloc(1, sizeof *r);
    if (!r)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    char method[64];
    kiln__calib_method_str(o->method, o->param, method, sizeof method);
    uint64_t mh = 0;
    kiln_calib_set set = {0};
    kiln_status st = model_hash(g, &mh);
    if (st == KILN_OK && o->data_dir) {
        const char **names = kiln__calloc((size_t)g->n_inputs + 1, sizeof *names);
        for (int i = 0; names && i < g->n_inputs; i++)
            names[i] = g->values[g->inputs[i]].name;
        st = names ? kiln__calib_set_open(o->data_dir, g->n_inputs, names, &set)
                   : kiln__err(KILN_ERR_NOMEM, "out of memory");
        kiln__free(names);
    }
    bool cached = false;
    if (st == KILN_OK && o->cache_path)
        st = kiln__calib_cache_read(o->cache_path, mh, o->data_dir != NULL, set.hash, method, &r->t, &cached);
    if (st == KILN_OK && !cached) {
        if (!o->data_dir) {
            st = kiln__err(KILN_ERR_INVALID_ARG, "calibration cache '%s' does not exist and no calibration data was "
                           "given", o->cache_path);
        } else {
            r->t.model_hash = mh;
            r->t.data_hash = set.hash;
            r->t.rows = set.rows;
            snprintf(r->t.method, sizeof r->t.method, "%s", method);
            st = calibrate_data(g, o, &set, &r->t);
            if (st == KILN_OK && o->cache_path)
                st = kiln__calib_cache_write(o->cache_path, &r->t);
        }
    }
    kiln__calib_set_free(&set);
    if (st != KILN_OK) {
        kiln_calibration_free(r);
        return st;
    }
    r->from_cache = cached;
    snprintf(r->model_hex, sizeof r->model_hex, "%016" PRIx64, r->t.model_hash);
    snprintf(r->data_hex, sizeof r->data_hex, "%016" PRIx64, r->t.data_hash);
    *out = r;
    return KILN_OK;
}

void kiln_calibration_free(kiln_calibration_t r)
{
    if (!r)
        return;
    kiln__calib_table_free(&r->t);
    kiln__free(r);
}

static bool in_range(kiln_calibration_t r, int i) { return r && i >= 0 && i < r->t.n; }
int kiln_calib_num_tensors(kiln_calibration_t r) { return r ? r->t.n : 0; }
const char *kiln_calib_tensor_name(kiln_calibration_t r, int i) { return in_range(r, i) ? r->t.name[i] : NULL; }
float kiln_calib_scale(kiln_calibration_t r, int i) { return in_range(r, i) ? r->t.scale[i] : NAN; }
float kiln_calib_amax(kiln_calibration_t r, int i) { return in_range(r, i) ? r->t.amax[i] : NAN; }
const char *kiln_calib_method_name(kiln_calibration_t r) { return r ? r->t.method : NULL; }
int64_t kiln_calib_num_samples(kiln_calibration_t r) { return r ? r->t.rows : 0; }
bool kiln_calib_from_cache(kiln_calibration_t r) { return r && r->from_cache; }
const char *kiln_calib_model_hash(kiln_calibration_t r) { return r ? r->model_hex : NULL; }
const char *kiln_calib_data_hash(kiln_calibration_t r) { return r ? r->data_hex : NULL; }
