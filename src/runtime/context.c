/* Execution contexts: bound inputs/outputs, a per-shape memory plan with its arena, outputs. */
#include "model.h"
#include "layers.h"
#include "plan.h"
#include "device.h"
#include "../engine/engine.h"
#include "../core/devtac.h"
#include <stdio.h>
#include <stdlib.h>

struct kiln_context {
    kiln_engine_t e;
    int nthreads;                  /* as requested (0 = default); the pool resolves it */
    kiln_pool *pool;               /* this context's threads, created at the first run */
    atomic_int cancel;             /* set by kiln_context_cancel, cleared by the run it stops */
    const kiln_tensor **bound;     /* per graph input: &fed[i] once set */
    kiln_tensor *fed;              /* shallow copies of the caller's tensors, nbytes made exact */
    void **out_buf;                /* per graph output: caller buffer or NULL */
    size_t *out_cap;
    kiln_tensor *outs;             /* last run's outputs (heap, owned) */
    kiln_tensor *spare;            /* on a device: the run before's outputs, their buffers reused by a replay */
    /* plan cache: valid for one set of input shapes */
    bool planned;
    int64_t (*key)[KILN_MAX_DIMS];
    int *key_ndim;
    kiln_plan plan;
    uint8_t *arena;
    double *node_ns;               /* profiling accumulators (NULL = off) */
    kiln_tensor *meta;             /* per value: dtype/shape seen in the planning run */
    bool use_engine_plan;          /* the engine's build-time plan applies until shapes differ */
    kiln_layer *layers;            /* the engine's layers, restored once (blobs used in place), or NULL */
    kiln_dev *dev;                 /* layers run on a device (device.h), NULL: on the host */
};

/* The activation arena: host memory, or device memory on a device context. */
static void *arena_alloc(struct kiln_context *c, size_t n)
{
    void *p = NULL;
    if (c->dev)
        return kiln__dev_arena_alloc(c->dev, n, &p) == KILN_OK ? p : NULL;
    return kiln__malloc_large(n ? n : 1);   /* 2 MB pages where the host gives them (core.h) */
}

static void arena_free(struct kiln_context *c)
{
    if (c->dev)
        kiln__dev_arena_free(c->dev, c->arena);
    else
        kiln__free(c->arena);
    c->arena = NULL;
}

/* Adopts the engine's build-time plan when the bound shapes are the ones it was made for. */
static bool take_engine_plan(struct kiln_context *c)
{
    const struct kiln_engine *e = c->e;
    const kiln_graph *g = e->g;
    if (!c->use_engine_plan)
        return false;
    for (int i = 0; i < g->n_inputs; i++) {
        if (c->bound[i]->ndim != e->plan_ndim[i])
            return false;
        for (int d = 0; d < e->plan_ndim[i]; d++)
            if (c->bound[i]->dims[d] != e->plan_dims[i][d])
                return false;
    }
    const kiln_plan *p = &e->plan;
    if (c->dev)   /* a FusedConv in place over its residual, a Concat's inputs in its output: for the CPU kernels only */
        for (int v = 0; v < p->n_values; v++)
            if (p->inplace[v] == KILN_SLOT_CONCAT || (p->inplace[v] && g->values[v].producer >= 0 &&
                                                      g->nodes[g->values[v].producer].op == KILN_OP_FusedConv))
                return false;
    kiln_plan q = {.n_values = p->n_values, .arena_size = p->arena_size, .naive_bytes = p->naive_bytes,
                   .n_planned = p->n_planned, .n_inplace = p->n_inplace};
    q.offset = kiln__malloc(sizeof(int64_t) * ((size_t)p->n_values + 1));
    q.cap = kiln__malloc(sizeof(size_t) * ((size_t)p->n_values + 1));
    q.inplace = kiln__malloc((size_t)p->n_values + 1);
    uint8_t *arena = q.offset && q.cap && q.inplace ? arena_alloc(c, p->arena_size) : NULL;
    if (!arena) {
        kiln__plan_free(&q);
        return false;
    }
    memcpy(q.offset, p->offset, sizeof(int64_t) * (size_t)p->n_values);
    memcpy(q.cap, p->cap, sizeof(size_t) * (size_t)p->n_values);
    memcpy(q.inplace, p->inplace, (size_t)p->n_values);
    kiln__plan_free(&c->plan);
    arena_free(c);
    c->plan = q;
    c->arena = arena;
    for (int i = 0; i < g->n_inputs; i++) {
        c->key_ndim[i] = c->bound[i]->ndim;
        memcpy(c->key[i], c->bound[i]->dims, sizeof(int64_t) * (size_t)c->bound[i]->ndim);
    }
    c->planned = true;
    return true;
}

kiln_status kiln_context_create(kiln_engine_t e, kiln_context_t *out)
{
    if (!e || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_create: NULL argument");
    *out = NULL;
    const kiln_graph *g = e->g;
    KILN_TRY(kiln__graph_check_supported(g));
    struct kiln_context *c = kiln__calloc(1, sizeof *c);
    if (!c)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    c->e = e;
    kiln__engine_hold(e);   /* released by kiln_context_free: the engine may be freed first */
    c->bound = kiln__calloc((size_t)g->n_inputs + 1, sizeof *c->bound);
    c->fed = kiln__calloc((size_t)g->n_inputs + 1, sizeof *c->fed);
    c->key = kiln__calloc((size_t)g->n_inputs + 1, sizeof *c->key);
    c->key_ndim = kiln__calloc((size_t)g->n_inputs + 1, sizeof(int));
    c->out_buf = kiln__calloc((size_t)g->n_outputs + 1, sizeof(void *));
    c->out_cap = kiln__calloc((size_t)g->n_outputs + 1, sizeof(size_t));
    c->outs = kiln__calloc((size_t)g->n_outputs + 1, sizeof(kiln_tensor));
    c->spare = kiln__calloc((size_t)g->n_outputs + 1, sizeof(kiln_tensor));
    if (!c->bound || !c->fed || !c->key || !c->key_ndim || !c->out_buf || !c->out_cap || !c->outs || !c->spare) {
        kiln_context_free(c);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    kiln_status st = kiln__layers_restore(e, &c->layers);
    if (st != KILN_OK) {
        kiln_context_free(c);
        return st;
    }
    if (e->has_plan && e->plan_n_inputs == g->n_inputs)
        c->use_engine_plan = true;
    *out = c;
    return KILN_OK;
}

/* The last run's outputs go (valid until the next run): on a device context their buffers are kept as
 * spares for the next CUDA graph replay to write into (large outputs: no fresh pages to fault in). */
static void drop_outputs(struct kiln_context *c)
{
    for (int o = 0; o < c->e->g->n_outputs; o++) {
        if (c->out_buf && c->out_buf[o] && c->outs[o].data == c->out_buf[o]) {
            memset(&c->outs[o], 0, sizeof c->outs[o]);
        } else if (c->dev && c->spare && c->outs[o].data && !(c->outs[o].flags & KILN_TENSOR_BORROWED)) {
            kiln__tensor_release(&c->spare[o]);
            c->spare[o] = c->outs[o];
            memset(&c->outs[o], 0, sizeof c->outs[o]);
        } else {
            kiln__tensor_release(&c->outs[o]);
        }
    }
}

static void drop_spares(struct kiln_context *c)
{
    for (int o = 0; c->spare && o < c->e->g->n_outputs; o++)
        kiln__tensor_release(&c->spare[o]);
}

void kiln_context_free(kiln_context_t c)
{
    if (!c)
        return;
    if (c->outs)
        drop_outputs(c);
    drop_spares(c);
    kiln__free(c->outs);
    kiln__free(c->spare);
    kiln__free(c->bound);
    kiln__free(c->fed);
    kiln__free(c->key);
    kiln__free(c->key_ndim);
    kiln__free(c->out_buf);
    kiln__free(c->out_cap);
    kiln__plan_free(&c->plan);
    arena_free(c);
    kiln__dev_close(c->dev);
    kiln__free(c->node_ns);
    kiln__free(c->meta);
    kiln__pool_free(c->pool);
    kiln__layers_release(c->layers, c->e->n_layers);
    struct kiln_engine *e = c->e;
    kiln__free(c);
    kiln__engine_release(e);   /* this context's reference: the engine goes with the last holder */
}

void kiln_context_set_threads(kiln_context_t c, int n)
{
    if (!c || n == c->nthreads)
        return;
    c->nthreads = n;
    kiln__pool_free(c->pool);   /* a new pool of the new size is made at the next run */
    c->pool = NULL;
}

kiln_status kiln_context_set_input(kiln_context_t c, const char *name, const kiln_tensor *t)
{
    if (!c || !name || !t)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_set_input: NULL argument");
    const kiln_graph *g = c->e->g;
    for (int i = 0; i < g->n_inputs; i++)
        if (!strcmp(g->values[g->inputs[i]].name, name)) {
            KILN_TRY(kiln__check_input(&g->values[g->inputs[i]], t));
            const char *nm = name;
            KILN_TRY(kiln__engine_check_profiles(c->e, 1, &nm, t));
            c->fed[i] = *t;
            c->fed[i].nbytes = (size_t)kiln_tensor_numel(t) * kiln_dtype_size(t->dtype);
            c->bound[i] = &c->fed[i];
            return KILN_OK;
        }
    return kiln__err(KILN_ERR_INVALID_ARG, "engine has no input named '%s'", name);
}

kiln_status kiln_context_set_output_buffer(kiln_context_t c, const char *name, void *buf, size_t capacity)
{
    if (!c || !name)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_set_output_buffer: NULL argument");
    const kiln_graph *g = c->e->g;
    for (int o = 0; o < g->n_outputs; o++)
        if (!strcmp(g->values[g->outputs[o]].name, name)) {
            c->out_buf[o] = buf;
            c->out_cap[o] = buf ? capacity : 0;
            return KILN_OK;
        }
    return kiln__err(KILN_ERR_INVALID_ARG, "engine has no output named '%s'", name);
}

static bool same_key(const struct kiln_context *c)
{
    const kiln_graph *g = c->e->g;
    if (!c->planned)
        return false;
    for (int i = 0; i < g->n_inputs; i++) {
        if (c->bound[i]->ndim != c->key_ndim[i])
            return false;
        for (int d = 0; d < c->key_ndim[i]; d++)
            if (c->bound[i]->dims[d] != c->key[i][d])
                return false;
    }
    return true;
}

/* Runs once with heap tensors while recording every value's size, then plans for these shapes. */
static kiln_status plan_for_shapes(struct kiln_context *c, const kiln_run_env *env)
{
    const kiln_graph *g = c->e->g;
    kiln__plan_free(&c->plan);
    arena_free(c);
    c->planned = false;
    size_t *rec = kiln__calloc((size_t)g->n_values + 1, sizeof(size_t));
    if (!rec)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln__free(c->meta);
    c->meta = kiln__calloc((size_t)g->n_values + 1, sizeof(kiln_tensor));
    if (c->meta)
        for (int i = 0; i < g->n_inputs; i++) {
            c->meta[g->inputs[i]] = *c->bound[i];
            c->meta[g->inputs[i]].data = NULL;
        }
    kiln_mem m = {.record = rec, .record_meta = c->meta};
    kiln_hooks h = {.node_ns = c->node_ns};
    kiln_status st = kiln__exec_graph_ex(g, NULL, c->bound, c->outs, env, 0, &m, &h);
    if (st == KILN_OK)
        st = kiln__plan_make(g, rec, c->meta, c->dev ? 0 : kiln__plan_host_flags(), &c->plan);
    kiln__free(rec);
    if (st != KILN_OK)
        return st;
    c->arena = arena_alloc(c, c->plan.arena_size);
    if (!c->arena) {
        kiln__plan_free(&c->plan);
        return kiln__err(KILN_ERR_NOMEM, "out of memory allocating a %zu-byte activation arena", c->plan.arena_size);
    }
    for (int i = 0; i < g->n_inputs; i++) {
        c->key_ndim[i] = c->bound[i]->ndim;
        for (int d = 0; d < c->bound[i]->ndim; d++)
            c->key[i][d] = c->bound[i]->dims[d];
    }
    c->planned = true;
    return KILN_OK;
}

static kiln_status deliver_outputs(struct kiln_context *c)
{
    const kiln_graph *g = c->e->g;
    for (int o = 0; o < g->n_outputs; o++) {
        if (!c->out_buf[o])
            continue;
        kiln_tensor *t = &c->outs[o];
        if (t->nbytes > c->out_cap[o])
            return kiln__err(KILN_ERR_SHAPE, "output '%s' needs %zu bytes but its bound buffer holds %zu",
                             g->values[g->outputs[o]].name, t->nbytes, c->out_cap[o]);
        memcpy(c->out_buf[o], t->data, t->nbytes);
        kiln__free(t->data);
        t->data = c->out_buf[o];
    }
    return KILN_OK;
}

/* The bound inputs together fit one profile, as kiln_engine_run checks them (kiln_context_set_input checks each
 * alone: with several profiles each input may fit a different one) */
static kiln_status check_bound_profiles(const struct kiln_context *c)
{
    const kiln_graph *g = c->e->g;
    if (c->e->n_profiles < 2 || g->n_inputs < 2)
        return KILN_OK;
    const char **names = kiln__malloc(sizeof *names * (size_t)g->n_inputs);
    kiln_tensor *ts = kiln__malloc(sizeof *ts * (size_t)g->n_inputs);
    kiln_status st = KILN_OK;
    if (!names || !ts) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
    } else {
        for (int i = 0; i < g->n_inputs; i++) {
            names[i] = g->values[g->inputs[i]].name;
            ts[i] = *c->bound[i];
        }
        st = kiln__engine_check_profiles(c->e, g->n_inputs, names, ts);
    }
    kiln__free(names);
    kiln__free(ts);
    return st;
}

kiln_status kiln_context_run(kiln_context_t c)
{
    if (!c)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_run: NULL context");
    const kiln_graph *g = c->e->g;
    for (int i = 0; i < g->n_inputs; i++)
        if (!c->bound[i])
            return kiln__err(KILN_ERR_INVALID_ARG, "input '%s' was not set", g->values[g->inputs[i]].name);
    const bool same = same_key(c);   /* the shapes of the last planned run: their profile check passed then */
    if (!same)
        KILN_TRY(check_bound_profiles(c));
    drop_outputs(c);
    if (!c->pool && !(c->pool = kiln__pool_create(c->nthreads)))
        return kiln__err(KILN_ERR_NOMEM, "out of memory creating the context's thread pool");
    kiln_run_ctl ctl = kiln__run_ctl(&c->cancel, 0);
    kiln_run_env env = {.pool = c->pool, .nthreads = kiln__pool_threads(c->pool), .ctl = &ctl, .layers = c->layers,
                        .layers_of = g};
    if (c->dev) {
        env.dev = c->dev;
        env.backend = kiln__dev_backend(c->dev);
        kiln__dev_run_begin(c->dev);
    }
    kiln_status st = KILN_OK;
    if (!same && !take_engine_plan(c)) {
        st = plan_for_shapes(c, &env);
    } else if (!c->dev || !kiln__dev_graph_replay(c->dev, g, c->bound, c->outs, c->spare, &st)) {
        /* on a device, the third run at these shapes is captured as a CUDA graph (device_graph.c) */
        if (c->dev && !c->node_ns)
            kiln__dev_graph_arm(c->dev, g, c->bound);
        for (int attempt = 0; attempt < 2; attempt++) {
            kiln_mem m;
            kiln__plan_mem(&c->plan, c->arena, &m);
            kiln_hooks h = {.node_ns = c->node_ns};
            st = kiln__exec_graph_ex(g, NULL, c->bound, c->outs, &env, 0, &m, &h);
            if (!c->dev || !kiln__dev_graph_retry(c->dev))
                break;
            drop_outputs(c);   /* the capture failed: the same run layer by layer */
        }
    }
    if (st == KILN_ERR_CANCELLED)
        atomic_store(&c->cancel, 0);
    if (st == KILN_OK)
        st = deliver_outputs(c);
    return st;
}

void kiln_context_cancel(kiln_context_t c)
{
    if (c)
        atomic_store(&c->cancel, 1);
}

const kiln_tensor *kiln_context_output(kiln_context_t c, int i)
{
    return c && i >= 0 && i < c->e->g->n_outputs && c->outs[i].data ? &c->outs[i] : NULL;
}

void kiln_context_memory(kiln_context_t c, size_t *arena_bytes, size_t *naive_bytes)
{
    if (arena_bytes)
        *arena_bytes = c && c->planned ? c->plan.arena_size : 0;
    if (naive_bytes)
        *naive_bytes = c && c->planned ? c->plan.naive_bytes : 0;
}

void kiln__context_disable_profiling(kiln_context_t c)
{
    kiln__free(c->node_ns);
    c->node_ns = NULL;
}

kiln_status kiln__context_enable_profiling(kiln_context_t c)
{
    kiln__free(c->node_ns);
    c->node_ns = kiln__calloc((size_t)c->e->g->n_nodes + 1, sizeof(double));
    return c->node_ns ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
}

const double *kiln__context_node_ns(kiln_context_t c) { return c->node_ns; }
void kiln__context_replan_on_first_run(kiln_context_t c) { c->use_engine_plan = false; }
const kiln_tensor *kiln__context_value_meta(kiln_context_t c) { return c->meta; }
kiln_engine_t kiln__context_engine(kiln_context_t c) { return c->e; }
void kiln__context_pool_stats(kiln_context_t c, kiln_pool_stats *out) { kiln__pool_stats_get(c->pool, out); }

kiln_status kiln_context_set_device(kiln_context_t c, kiln_device d, unsigned flags)
{
    if (!c)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_set_device: NULL context");
    if (d != KILN_DEVICE_CPU && d != KILN_DEVICE_CUDA)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_set_device: unknown device %d", (int)d);
    KILN_TRY(kiln__dev_check_flags("kiln_context_set_device", flags));   /* (on the CPU too, as the device would) */
    kiln_dev *dev = NULL;
    if (d != KILN_DEVICE_CPU)
        KILN_TRY(kiln__dev_open(d, flags, &dev));
    if (dev && c->e->dev_tactics) {   /* the kernels the build timed on this GPU (docs/CUDA.md) */
        kiln_status st = kiln__dev_tactics_import(dev, c->e->dev_tactics, c->e->dev_tactics_len);
        if (st != KILN_OK) {
            kiln__dev_close(dev);
            return st;
        }
    }
    /* the plan and arena belong to the old device: the next run plans again */
    drop_outputs(c);
    kiln__plan_free(&c->plan);
    arena_free(c);
    c->planned = false;
    kiln__dev_close(c->dev);
    c->dev = dev;
    return KILN_OK;
}

kiln_status kiln_engine_store_device_tactics(kiln_engine_t e, kiln_context_t c)
{
    if (!e || !c)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_store_device_tactics: NULL argument");
    if (c->e != e || !c->dev)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_store_device_tactics: the context is not one of this "
                         "engine's on a device");
    char *text = NULL;
    size_t n = 0;
    KILN_TRY(kiln__dev_tactics_export(c->dev, &text, &n));
    char *copy = NULL;
    if (text && n > KILN_ENGINE_MAX_TACTICS) {
        free(text);
        return kiln__err(KILN_ERR_UNSUPPORTED, "device tactics of %zu bytes: more than an engine holds", n);
    }
    if (text && !(copy = kiln__strndup(text, n))) {
        free(text);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    free(text);   /* the module's allocation */
    kiln__free(e->dev_tactics);
    e->dev_tactics = copy;
    e->dev_tactics_len = copy ? n : 0;
    return KILN_OK;
}

int kiln_engine_device_tactics(kiln_engine_t e, char *signature, size_t cap)
{
    if (signature && cap)
        signature[0] = '\0';
    char sig[512];
    if (!e || !e->dev_tactics || !kiln__devtac_text_signature(e->dev_tactics, e->dev_tactics_len, sig, sizeof sig))
        return 0;
    if (signature && cap)
        snprintf(signature, cap, "%s", sig);
    /* the choices as the device module will read them (malformed lines skipped) */
    kiln_devtac *t = kiln__devtac_new(sig);
    int n = t ? kiln__devtac_parse(t, e->dev_tactics, e->dev_tactics_len) : 0;
    kiln__devtac_free(t);
    return n > 0 ? n : 0;
}

kiln_status kiln_context_layer_place(kiln_context_t c, int i, kiln_layer_place *out)
{
    if (!c || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_layer_place: NULL argument");
    if (i < 0 || i >= c->e->g->n_nodes)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_layer_place: layer %d out of range [0, %d)", i,
                         c->e->g->n_nodes);
    *out = c->dev ? (kiln_layer_place)kiln__dev_layer_place(c->dev, c->e->g, i) : KILN_PLACE_NONE;
    return KILN_OK;
}

kiln_status kiln_context_layer_storage(kiln_context_t c, int i, const char **storage)
{
    if (!c || !storage)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_layer_storage: NULL argument");
    if (i < 0 || i >= c->e->g->n_nodes)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_layer_storage: layer %d out of range [0, %d)", i,
                         c->e->g->n_nodes);
    static const char *const names[] = {"", "fp16", "bf16", "e4m3"};
    int s = c->dev ? kiln__dev_layer_store(c->dev, c->e->g, i) : KILN_STORE_AS_DTYPE;
    *storage = s >= 0 && s < (int)(sizeof names / sizeof names[0]) ? names[s] : "";
    return KILN_OK;
}

kiln_status kiln_context_device_stats(kiln_context_t c, kiln_device_stats *out)
{
    if (!c || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_device_stats: NULL argument");
    if (c->dev) {
        kiln__dev_stats(c->dev, out);
    } else {
        memset(out, 0, sizeof *out);
        out->device = KILN_DEVICE_CPU;
        snprintf(out->description, sizeof out->description, "cpu");
    }
    return KILN_OK;
}
