/* Where each node runs on a device context, and moving its tensors there (docs/CUDA.md):
 *   - Shape / Size read only dims: they run on the host whatever their input's residency;
 *   - a node whose inputs are all on the host, integer and small (shape arithmetic) runs on the host;
 *   - else on the device when the module has a kernel, else on the host ("fallback"), its device
 *     inputs copied to the host and its outputs copied back;
 *   - inputs a device layer reads on the host (kiln_devmod.host_inputs) are handed as host tensors;
 *   - initializers are copied to the device once per graph (device_weights.c); other host tensors a device
 *     layer reads are copied for that layer, and host-run outputs that device layers will want
 *     (floating point, or large) move to the device at once. */
#include "device_impl.h"
#include "../core/numfmt.h"

#define SMALL_NUMEL 4096   /* at most this many elements: shape data, kept on the host */

static kiln_status to_device(kiln_dev *d, const kiln_tensor *h, kiln_tensor *out)
{
    return kiln__dev_upload(d, h, out, false);
}

static kiln_status to_host(kiln_dev *d, const kiln_tensor *t, kiln_tensor *out, kiln_tensor *spare);

kiln_status kiln__dev_to_host(kiln_dev *d, const kiln_tensor *t, kiln_tensor *out, kiln_tensor *spare)
{
    return to_host(d, t, out, spare);
}

/* A host tensor of dtype dt and shape dims in *out: spare's buffer (moved into out) when it owns exactly the
 * bytes needed, so repeated runs do not map and fault in fresh pages for large outputs; else a new one. */
static kiln_status host_alloc(kiln_tensor *out, kiln_dtype dt, int ndim, const int64_t *dims, kiln_tensor *spare)
{
    if (!spare || !spare->data || (spare->flags & KILN_TENSOR_BORROWED) || ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln__tensor_alloc(out, dt, ndim, dims);
    int64_t n = kiln__shape_numel(ndim, dims);
    size_t es = kiln_dtype_size(dt);
    if (!es || n < 0 || spare->nbytes != (size_t)n * es)
        return kiln__tensor_alloc(out, dt, ndim, dims);
    *out = *spare;
    memset(spare, 0, sizeof *spare);
    out->dtype = dt;
    out->ndim = ndim;
    for (int k = 0; k < ndim; k++)
        out->dims[k] = dims[k];
    return KILN_OK;
}

typedef struct widen_job {
    float *dst;
    const uint16_t *src;
    bool f16;
} widen_job;

static void widen_part(void *a, size_t lo, size_t hi)
{
    widen_job *j = a;
    if (j->f16)
        kiln__f16_to_f32_array(j->dst + lo, j->src + lo, (int64_t)(hi - lo));
    else
        kiln__bf16_to_f32_array(j->dst + lo, j->src + lo, (int64_t)(hi - lo));
}

/* A float32 tensor the device holds as FP16 / BF16 (KILN_TENSOR_DEV_HALF): copied (into the instance's
 * scratch, kept between runs), then widened (in parallel when large). */
static kiln_status half_to_host(kiln_dev *d, const kiln_tensor *t, kiln_tensor *out, kiln_tensor *spare)
{
    KILN_TRY(host_alloc(out, KILN_DT_FLOAT32, t->ndim, t->dims, spare));
    int64_t n = kiln_tensor_numel(out);
    if ((size_t)n * 2 > d->scratch_cap) {
        uint16_t *h = kiln__malloc((size_t)n * 2);
        if (!h) {
            kiln__tensor_release(out);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        kiln__free(d->scratch);
        d->scratch = h;
        d->scratch_cap = (size_t)n * 2;
    }
    uint16_t *h = d->scratch;
    kiln_status st = n ? d->mod->d2h(d->be, h, t->data, (size_t)n * 2) : KILN_OK;
    widen_job j = {out->data, h, (t->flags & KILN_TENSOR_DEV_F16) != 0};
    if (st == KILN_OK)
        kiln__host_par((size_t)n, (size_t)n * 6, 64, widen_part, &j);
    if (st != KILN_OK)
        kiln__tensor_release(out);
    d->d2h_bytes += (unsigned long long)n * 2;
    return st;
}

static kiln_status to_host(kiln_dev *d, const kiln_tensor *t, kiln_tensor *out, kiln_tensor *spare)
{
    if (t->flags & KILN_TENSOR_DEV_E4M3)
        return kiln__err(KILN_ERR_UNSUPPORTED, "a tensor held only in E4M3 on the device (FP8 storage) cannot be "
                                               "copied to the host; build with KILN_FP8_STORAGE=0 to read it");
    if (t->flags & KILN_TENSOR_DEV_NHWC) {   /* held channels-last: back to its ONNX layout first */
        kiln_tensor c;
        KILN_TRY(d->mod->canonical(d->be, t, &c));
        c.flags &= ~KILN_TENSOR_DEV_NHWC;
        kiln_status st = to_host(d, &c, out, spare);
        d->mod->free(d->be, c.data);
        return st;
    }
    if (t->dtype == KILN_DT_FLOAT32 && (t->flags & KILN_TENSOR_DEV_HALF))
        return half_to_host(d, t, out, spare);
    KILN_TRY(host_alloc(out, t->dtype, t->ndim, t->dims, spare));
    size_t n = t->nbytes < out->nbytes ? t->nbytes : out->nbytes;
    kiln_status st = n ? d->mod->d2h(d->be, out->data, t->data, n) : KILN_OK;
    if (st != KILN_OK)
        kiln__tensor_release(out);
    d->d2h_bytes += n;
    return st;
}

static bool has_subgraphs(const kiln_node *n)
{
    for (int a = 0; a < n->n_attr; a++)
        if (n->attrs[a].g || n->attrs[a].graphs)
            return true;
    return false;
}

/* During a capture, a layer that reads a graph input's data runs on the device: the graph replays it
 * on each run's inputs (a host result would be baked into the graph). */
static bool reads_graph_input(const kiln_dev *d, const kiln_graph *g, const kiln_node *n)
{
    if (!d->cap_open || g != d->cap_g)
        return false;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] >= 0 && kiln__dev_input_index(g, n->in[i]) >= 0)
            return true;
    return false;
}

static bool runs_on_host(const kiln_dev *d, const kiln_graph *g, const kiln_node *n, const kiln_tensor *const *in)
{
    if (n->op == KILN_OP_Shape || n->op == KILN_OP_Size)
        return true;
    if (reads_graph_input(d, g, n))
        return false;
    int64_t total = 0;
    for (int i = 0; i < n->n_in; i++) {
        if (!in[i])
            continue;
        if (kiln__on_device(in[i]) || kiln__dtype_is_float(in[i]->dtype))
            return false;
        total += kiln_tensor_numel(in[i]);
    }
    return total <= SMALL_NUMEL;
}

static void note_fallback(kiln_dev *d, const kiln_node *n)
{
    d->n_fallback++;
    size_t have = d->fallback_ops ? strlen(d->fallback_ops) : 0, add = strlen(n->op_type);
    for (const char *p = d->fallback_ops; p && *p;) {   /* already listed? */
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == add && !strncmp(p, n->op_type, l))
            return;
        p = e ? e + 1 : p + l;
    }
    char *s = kiln__realloc(d->fallback_ops, have + add + 2);
    if (!s)
        return;
    snprintf(s + have, add + 2, "%s%s", have ? "," : "", n->op_type);
    d->fallback_ops = s;
    kiln__log(KILN_LOG_WARN, "cuda: %s layers run on the CPU (no CUDA kernel for them yet), e.g. node '%s'",
              n->op_type, n->name);
}

/* A slot for a copy made for node n: the first 16 in dn itself, the others in an array of one slot per input made
 * at the 17th (never grown: the slots handed out stay where they are) */
static kiln_status add_tmp(kiln_dev_node *dn, const kiln_node *n, kiln_tensor **slot, bool dev)
{
    if (dn->n_tmp < 16) {
        dn->tmp_dev[dn->n_tmp] = dev;
        *slot = &dn->tmp[dn->n_tmp++];
        return KILN_OK;
    }
    if (!dn->more) {
        int cap = n->n_in > 16 ? n->n_in : 16;
        dn->more = kiln__calloc((size_t)cap, sizeof *dn->more);
        dn->more_dev = kiln__calloc((size_t)cap, sizeof *dn->more_dev);
        if (!dn->more || !dn->more_dev) {
            kiln__free(dn->more);
            kiln__free(dn->more_dev);
            dn->more = NULL;
            dn->more_dev = NULL;
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        dn->cap_more = cap;
    }
    int k = dn->n_tmp - 16;
    if (k >= dn->cap_more)
        return kiln__err(KILN_ERR_INTERNAL, "node '%s' (%s): more copies than inputs", n->name, n->op_type);
    dn->more_dev[k] = dev;
    *slot = &dn->more[k];
    dn->n_tmp++;
    return KILN_OK;
}

/* Records where node n of the run's top-level graph ran (the first node a run sees is that graph's). */
static void note_place(kiln_dev *d, const kiln_graph *g, const kiln_node *n, kiln_layer_place p)
{
    if (!d->place_run) {
        d->place_run = true;
        d->place_g = g;
        if (d->n_place != g->n_nodes || !d->place) {
            kiln__free(d->place);
            d->place = kiln__calloc(2 * (size_t)g->n_nodes + 1, 1);
            d->n_place = d->place ? g->n_nodes : 0;
            d->store = d->place ? d->place + d->n_place : NULL;
        }
        if (d->place)
            memset(d->place, 0, 2 * (size_t)d->n_place);   /* KILN_PLACE_NONE, KILN_STORE_AS_DTYPE */
    }
    long i = (long)(n - g->nodes);
    if (g == d->place_g && d->place && i >= 0 && i < d->n_place)
        d->place[i] = (uint8_t)p;
}

/* Records how device layer n of the run's top-level graph held its first output t (kiln_dev_store). */
static void note_store(kiln_dev *d, const kiln_node *n, const kiln_tensor *t)
{
    const kiln_graph *g = d->place_g;
    if (!d->place_run || !g || !d->store || !t || !kiln__on_device(t) || n < g->nodes || n >= g->nodes + d->n_place)
        return;
    kiln_dev_store s = KILN_STORE_AS_DTYPE;
    if (t->flags & KILN_TENSOR_DEV_E4M3)
        s = KILN_STORE_E4M3;
    else if (t->dtype == KILN_DT_FLOAT32 && (t->flags & KILN_TENSOR_DEV_F16))
        s = KILN_STORE_F16;
    else if (t->dtype == KILN_DT_FLOAT32 && (t->flags & KILN_TENSOR_DEV_BF16))
        s = KILN_STORE_BF16;
    d->store[n - g->nodes] = (uint8_t)s;
}

/* Inputs of n that the engine keeps only packed (for its CPU layer's blob). */
static uint32_t packed_inputs(const kiln_graph *g, const kiln_node *n)
{
    uint32_t m = 0;
    for (int i = 0; i < n->n_in && i < 32; i++) {
        int v = n->in[i];
        if (v >= 0 && v < g->n_values && g->values[v].init && !g->values[v].init->data)
            m |= 1u << i;
    }
    return m;
}

static kiln_status node_begin(kiln_dev *d, const kiln_graph *g, const kiln_node *n, const kiln_tensor **in,
                              const kiln_layer *host_layer, kiln_dev_node *dn)
{
    /* control flow (If / Loop / Scan) runs on the CPU, a counted fallback: its subgraphs' layers still go
     * through these hooks (device or host each), and their outputs come back to the host for it */
    bool control = has_subgraphs(n);
    dn->on_host = !control && runs_on_host(d, g, n, in);
    if (dn->on_host) {
        d->n_host++;
        note_place(d, g, n, KILN_PLACE_HOST);
    } else {
        bool ok = !control && n->n_in <= 16;
        /* a weight the engine keeps only packed, for its CPU layer: the device layer needs to run from that
         * layer's blob (one the module reads, replacing it) */
        if (ok && host_layer && host_layer->blob && d->mod->reads_blob &&
            d->mod->reads_blob(d->be, n, host_layer->blob, host_layer->blob_size))
            dn->blob_of = host_layer;
        uint32_t packed = packed_inputs(g, n);
        ok = ok && (packed & ~(dn->blob_of ? dn->blob_of->replaces : 0u)) == 0;
        kiln_dtype dts[16];
        int nq = n->n_in < 16 ? n->n_in : 16;
        for (int i = 0; i < nq; i++)
            dts[i] = in[i] ? in[i]->dtype : KILN_DT_UNDEFINED;
        kiln_bk_query q = {.node = n, .n_in = nq, .in_dtype = dts};
        if (!ok || !d->be->ops->supports(d->be, &q) || !d->mod->accepts(d->be, n, n->n_in, in)) {
            if (d->strict)
                return kiln__err(KILN_ERR_UNSUPPORTED,
                                 "node '%s' (%s) has no CUDA kernel for these inputs and --strict-device forbids the "
                                 "CPU fallback", n->name, n->op_type);
            if (reads_graph_input(d, g, n))
                return kiln__err(KILN_ERR_UNSUPPORTED, "node '%s' (%s) reads a graph input on the host: no CUDA graph",
                                 n->name, n->op_type);
            dn->on_host = true;
            dn->blob_of = NULL;
            note_fallback(d, n);
            note_place(d, g, n, KILN_PLACE_FALLBACK);
        } else {
            d->n_device++;
            note_place(d, g, n, KILN_PLACE_DEVICE);
        }
    }
    dn->be = dn->on_host ? kiln__cpu_backend() : d->be;
    uint32_t host_mask = dn->on_host ? 0xFFFFFFFFu : d->mod->host_inputs(d->be, n);
    bool dims_only = n->op == KILN_OP_Shape || n->op == KILN_OP_Size;
    for (int i = 0; i < n->n_in; i++) {
        if (!in[i])
            continue;
        bool want_host = i < 32 ? (host_mask >> i) & 1u : dn->on_host;
        bool is_dev = kiln__on_device(in[i]);
        kiln_tensor *t = NULL;
        int gi = d->cap_open && g == d->cap_g && !dims_only ? kiln__dev_input_index(g, n->in[i]) : -1;
        if (want_host && !is_dev && gi >= 0)   /* its data read on the host would be baked into the graph */
            return kiln__err(KILN_ERR_UNSUPPORTED, "node '%s' reads graph input data on the host: no CUDA graph",
                             n->name);
        if (want_host && is_dev && !dims_only) {
            KILN_TRY(add_tmp(dn, n, &t, false));
            KILN_TRY(to_host(d, in[i], t, NULL));
            in[i] = t;
        } else if (!want_host && !is_dev) {
            int v = n->in[i];
            if (v >= 0 && v < g->n_values && g->values[v].init && in[i] == g->values[v].init) {
                KILN_TRY(kiln__dev_weight(d, g, v, &in[i]));
            } else {
                KILN_TRY(add_tmp(dn, n, &t, true));
                d->cap_input = gi;   /* a graph input's upload is refreshed before each replay */
                kiln_status st = to_device(d, in[i], t);
                d->cap_input = -1;
                KILN_TRY(st);
                in[i] = t;
            }
        }
    }
    return KILN_OK;
}

kiln_status kiln__dev_node_begin(kiln_dev *d, const kiln_graph *g, const kiln_node *n, const kiln_tensor **in,
                                 const kiln_layer *host_layer, kiln_dev_node *dn)
{
    memset(dn, 0, sizeof *dn);
    kiln_status st = node_begin(d, g, n, in, host_layer, dn);
    return st == KILN_OK ? st : kiln__dev_node_end(d, dn, n, NULL, st);   /* frees the copies made */
}

kiln_status kiln__dev_node_end(kiln_dev *d, kiln_dev_node *dn, const kiln_node *n, kiln_tensor *const *out,
                               kiln_status st)
{
    for (int k = 0; k < dn->n_tmp; k++) {
        kiln_tensor *t = k < 16 ? &dn->tmp[k] : &dn->more[k - 16];
        if (k < 16 ? dn->tmp_dev[k] : dn->more_dev[k - 16])
            kiln__dev_tensor_free(d, t);
        else
            kiln__tensor_release(t);
    }
    dn->n_tmp = 0;
    kiln__free(dn->more);
    kiln__free(dn->more_dev);
    dn->more = NULL;
    dn->more_dev = NULL;
    dn->cap_more = 0;
    if (st == KILN_OK && !dn->on_host && out)
        note_store(d, n, n->n_out > 0 ? out[0] : NULL);
    if (st != KILN_OK || !dn->on_host)
        return st;
    for (int o = 0; o < n->n_out; o++) {
        kiln_tensor *t = out[o];
        if (!t || !t->data || kiln__on_device(t) || n->out[o] < 0)
            continue;
        if (!kiln__dtype_is_float(t->dtype) && kiln_tensor_numel(t) <= SMALL_NUMEL)
            continue;   /* shape data stays on the host */
        kiln_tensor dt;
        KILN_TRY(to_device(d, t, &dt));
        kiln__tensor_release(t);
        *t = dt;
    }
    return KILN_OK;
}

kiln_status kiln__dev_fetch_outputs(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *val,
                                    kiln_tensor *outputs)
{
    if (d->cap_open)   /* a captured run: its graph is launched now, then the outputs come back as usual */
        KILN_TRY(kiln__dev_graph_finish(d, g, val));
    return kiln__dev_fetch_values(d, g, val, outputs);
}

kiln_status kiln__dev_fetch_values(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *val,
                                   kiln_tensor *outputs)
{
    for (int o = 0; o < g->n_outputs; o++) {
        const kiln_tensor *t = val[g->outputs[o]];
        if (kiln__on_device(t))
            KILN_TRY(to_host(d, t, &outputs[o], NULL));
    }
    return KILN_OK;
}
