/* CUDA graphs of whole runs (docs/CUDA.md). A context's third run at the same input shapes (and the
 * same activation arena) is captured on the backend instance's stream instead of executed: every
 * device layer's launches, and the uploads of host tensors through pinned memory the graph owns.
 * Then the graph is launched, and later runs at those shapes only rewrite the graph inputs' bytes
 * in that pinned memory, launch the graph and copy the outputs back, without the interpreter.
 *
 * What makes a run capturable: every layer runs on the device (a fallback's copies synchronize),
 * nothing is chosen or allocated that synchronizes (algorithm searches happen in the first runs),
 * the graph outputs are device tensors, and no host computation reads a graph input's data (its
 * result would be baked into the graph): during a capture, layers reading a graph input run on the
 * device. Anything else fails the capture: the run is made again layer by layer and these shapes
 * are not captured again. */
#include "device_impl.h"
#include "exec.h"
#include <stdlib.h>

static double now_ms(void)
{
    return (double)kiln__now_ns() / 1e6;
}

#define STAGE_EXTRA ((size_t)4 << 20)    /* pinned bytes for host tensors other than the inputs */
#define STAGE_MAX ((size_t)256 << 20)    /* larger inputs: no graph (ResNet-50 at batch 256 takes 154 MB) */

int kiln__dev_input_index(const kiln_graph *g, int v)
{
    for (int k = 0; k < g->n_inputs; k++)
        if (g->inputs[k] == v)
            return k;
    return -1;
}

/* The index of device block p in kiln_dev.held, or -1 */
static int held_index(const kiln_dev *d, const void *p)
{
    for (int i = 0; i < d->n_held; i++)
        if (d->held[i].p == p)
            return i;
    return -1;
}

/* Records device block p as one the graph keeps (kiln_dev.held); false when out of memory. */
static bool hold(kiln_dev *d, void *p)
{
    if (held_index(d, p) >= 0)
        return true;
    if (d->n_held == d->cap_held) {
        int cap = d->cap_held ? d->cap_held * 2 : 8;
        struct kiln_dev_held *h = kiln__realloc(d->held, sizeof *h * (size_t)cap);
        if (!h)
            return false;
        d->held = h;
        d->cap_held = cap;
    }
    d->held[d->n_held++] = (struct kiln_dev_held){p, false};
    return true;
}

bool kiln__dev_graph_keeps(kiln_dev *d, void *p)
{
    int i = held_index(d, p);
    if (i >= 0)
        d->held[i].owned = true;
    return i >= 0;
}

void kiln__dev_graph_drop(kiln_dev *d)
{
    if (d->graph)
        d->mod->graph_free(d->be, d->graph);
    for (int i = 0; i < d->n_held; i++)
        if (d->held[i].owned)
            d->mod->free(d->be, d->held[i].p);
    kiln__free(d->held);
    d->held = NULL;
    d->n_held = d->cap_held = 0;
    d->graph = NULL;
    kiln__free(d->gout);
    d->gout = NULL;
    d->n_gout = 0;
    d->n_up = 0;
}

static bool key_same(const kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *in)
{
    if (d->cap_g != g || d->n_key != g->n_inputs || d->graph_arena_gen != d->arena_gen)
        return false;
    for (int k = 0; k < g->n_inputs; k++) {
        const kiln_tensor *a = &d->key[k], *b = in[k];
        if (!b || a->dtype != b->dtype || a->ndim != b->ndim ||
            memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim))
            return false;
    }
    return true;
}

static void key_set(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *in)
{
    kiln__dev_graph_drop(d);
    d->cap_g = g;
    d->graph_arena_gen = d->arena_gen;
    d->same_runs = 1;
    d->no_capture = false;
    kiln_tensor *k = kiln__realloc(d->key, sizeof *k * (size_t)(g->n_inputs ? g->n_inputs : 1));
    if (!k) {
        d->n_key = -1;   /* never matches */
        return;
    }
    d->key = k;
    d->n_key = g->n_inputs;
    for (int i = 0; i < g->n_inputs; i++) {
        memset(&k[i], 0, sizeof k[i]);
        if (in[i]) {
            k[i].dtype = in[i]->dtype;
            k[i].ndim = in[i]->ndim;
            memcpy(k[i].dims, in[i]->dims, sizeof k[i].dims);
        }
    }
}

/* memcpy in parallel for large inputs (ResNet-50 at batch 256: 154 MB into the graph's pinned memory before
 * each replay) */
typedef struct par_copy {
    char *dst;
    const char *src;
} par_copy;

static void par_copy_part(void *a, size_t lo, size_t hi)
{
    par_copy *c = a;
    memcpy(c->dst + lo, c->src + lo, hi - lo);
}

static void copy_input(void *dst, const void *src, size_t n)
{
    par_copy c = {dst, src};
    kiln__host_par(n, n, 4096, par_copy_part, &c);
}

bool kiln__dev_graph_replay(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *in, kiln_tensor *outs,
                            kiln_tensor *spare, kiln_status *st)
{
    if (!d->graph || !key_same(d, g, in))
        return false;
    double t0 = now_ms();
    for (int i = 0; i < d->n_up; i++) {
        const kiln_tensor *t = in[d->up[i].input];
        if (t->nbytes < d->up[i].n)
            return false;
        copy_input(d->up[i].staged, t->data, d->up[i].n);
    }
    if (d->mod->graph_launch(d->be, d->graph) != KILN_OK) {   /* memory it used was reallocated */
        kiln__dev_graph_drop(d);
        d->same_runs = 1;
        return false;
    }
    double t1 = now_ms();
    *st = d->be->ops->synchronize(d->be);   /* the outputs' copies would wait for it anyway: timed apart */
    double t2 = now_ms();
    int o = 0;
    for (; o < d->n_gout && *st == KILN_OK; o++)
        *st = kiln__dev_to_host(d, &d->gout[o], &outs[o], spare ? &spare[o] : NULL);
    d->replay_host_ms[0] = t1 - t0;
    d->replay_host_ms[1] = t2 - t1;
    d->replay_host_ms[2] = now_ms() - t2;
    d->n_device = d->g_device;
    d->n_host = d->g_host;
    d->n_fallback = 0;
    d->h2d_bytes = d->g_h2d;
    d->replays++;
    d->replayed = true;
    return true;
}

void kiln__dev_graph_arm(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *in)
{
    d->cap_open = d->cap_failed = false;
    if (!d->graphs)
        return;
    if (!key_same(d, g, in)) {
        key_set(d, g, in);
        return;
    }
    if (++d->same_runs < 2 || d->no_capture)
        return;
    kiln__dev_graph_drop(d);   /* one whose launch was refused */
    size_t stage = STAGE_EXTRA;
    for (int k = 0; k < g->n_inputs; k++)
        stage += in[k] ? in[k]->nbytes : 0;
    if (stage > STAGE_MAX || d->mod->graph_begin(d->be, stage) != KILN_OK) {
        d->no_capture = true;
        return;
    }
    d->cap_open = true;
    d->cap_input = -1;
}

bool kiln__dev_graph_retry(kiln_dev *d)
{
    if (!d->cap_open && !d->cap_failed)
        return false;
    void *gr = NULL;
    if (d->cap_open && d->mod->graph_end(d->be, &gr) == KILN_OK)
        d->mod->graph_free(d->be, gr);
    d->cap_open = false;
    d->cap_failed = false;
    d->no_capture = true;
    kiln__dev_graph_drop(d);
    return true;
}

kiln_status kiln__dev_graph_upload(kiln_dev *d, const kiln_tensor *h, kiln_tensor *out)
{
    if (d->n_up == d->cap_up) {
        int cap = d->cap_up ? d->cap_up * 2 : 16;
        struct kiln_dev_up *u = kiln__realloc(d->up, sizeof *u * (size_t)cap);
        if (!u)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        d->up = u;
        d->cap_up = cap;
    }
    *out = *h;
    out->data = NULL;
    KILN_TRY(d->mod->alloc(d->be, h->nbytes ? h->nbytes : 1, &out->data));
    void *staged = NULL;
    kiln_status st = h->nbytes ? d->mod->graph_h2d(d->be, out->data, h->data, h->nbytes, &staged) : KILN_OK;
    if (st != KILN_OK) {
        d->mod->free(d->be, out->data);
        memset(out, 0, sizeof *out);
        return st;
    }
    out->flags = KILN_TENSOR_BORROWED | KILN_TENSOR_ON_DEVICE;
    d->h2d_bytes += h->nbytes;
    if (d->cap_input >= 0 && h->nbytes) {   /* rewritten before every replay: the graph keeps its block */
        if (!hold(d, out->data)) {
            d->mod->free(d->be, out->data);
            memset(out, 0, sizeof *out);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        d->up[d->n_up++] = (struct kiln_dev_up){d->cap_input, staged, h->nbytes};
    }
    return KILN_OK;
}

kiln_status kiln__dev_graph_finish(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *val)
{
    kiln_status st = KILN_OK;
    for (int o = 0; o < g->n_outputs && st == KILN_OK; o++)
        if (!val[g->outputs[o]] || !kiln__on_device(val[g->outputs[o]]))
            st = kiln__err(KILN_ERR_UNSUPPORTED, "output '%s' is computed on the host: no CUDA graph",
                           g->values[g->outputs[o]].name);
    if (st == KILN_OK && !(d->gout = kiln__calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *d->gout)))
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
    void *gr = NULL;
    kiln_status end = d->mod->graph_end(d->be, &gr);   /* always ends the capture */
    d->cap_open = false;
    if (st == KILN_OK)
        st = end;
    else if (end == KILN_OK)
        d->mod->graph_free(d->be, gr);
    if (st == KILN_OK) {
        d->graph = gr;
        d->n_gout = g->n_outputs;
        for (int o = 0; o < g->n_outputs && st == KILN_OK; o++) {
            d->gout[o] = *val[g->outputs[o]];
            if (!hold(d, d->gout[o].data))   /* read after every replay */
                st = kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
    }
    if (st == KILN_OK) {
        d->g_device = d->n_device;
        d->g_host = d->n_host;
        d->g_h2d = d->h2d_bytes;
        kiln__dev_fp8_counts(d, d->g_fp8);
        st = d->mod->graph_launch(d->be, d->graph);   /* this run's results */
    }
    if (st != KILN_OK) {   /* the run is made again without a capture (kiln__dev_graph_retry) */
        kiln__dev_graph_drop(d);
        d->no_capture = true;
        d->cap_failed = true;
    }
    return st;
}

long kiln__dev_graph_replays(const kiln_dev *d) { return d->replays; }
