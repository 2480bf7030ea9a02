/* An engine's layer plan: prepared once by the builder (kiln__layers_prepare), restored by each
 * context through the backends without copying (kiln__layers_restore). See layers.h and
 * docs/ENGINE_FORMAT.md (LAYERS, PACKED). */
#include "layers.h"
#include "model.h"
#include "../backend/prep_blob.h"
#include <stddef.h>
#include <stdio.h>

/* the loader reads the blob header's magic and ISA bits itself (engine.h: kiln__engine_packed_isa) */
_Static_assert(offsetof(kiln_prep_hdr, engine_isa) == KILN_ENGINE_BLOB_ISA_AT, "blob header: engine_isa offset");
_Static_assert(sizeof(kiln_prep_hdr) == KILN_ENGINE_BLOB_HDR_BYTES, "blob header size");
_Static_assert(sizeof KILN_PREP_MAGIC == sizeof KILN_ENGINE_BLOB_MAGIC, "blob magic length");   /* text: test_engine */

#define PACK_ALIGN KILN_ENGINE_BLOB_ALIGN

static const kiln_backend *backend_named(const char *name)
{
    const kiln_backend *cpu = kiln__cpu_backend();
    return !strcmp(name, cpu->ops->name) ? cpu : NULL;
}

/* True if g or a subgraph below it reads `name` as an outer-scope value. */
static bool sub_reads(const kiln_graph *g, const char *name)
{
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].is_outer && !strcmp(g->values[v].name, name))
            return true;
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attr; a++) {
            const kiln_attr *at = &g->nodes[i].attrs[a];
            if (at->g && sub_reads(at->g, name))
                return true;
            for (int k = 0; at->graphs && k < at->n; k++)
                if (sub_reads(at->graphs[k], name))
                    return true;
        }
    return false;
}

/* True if the top-level value v is a graph output or read by a subgraph: its data must stay. */
static bool needed_elsewhere(const kiln_graph *g, int v)
{
    for (int o = 0; o < g->n_outputs; o++)
        if (g->outputs[o] == v)
            return true;
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attr; a++) {
            const kiln_attr *at = &g->nodes[i].attrs[a];
            if (at->g && sub_reads(at->g, g->values[v].name))
                return true;
            for (int k = 0; at->graphs && k < at->n; k++)
                if (sub_reads(at->graphs[k], g->values[v].name))
                    return true;
        }
    return false;
}

static bool has_data(const kiln_value *v)
{
    return v->init && v->init->data;
}

/* A precision name of kiln_engine_layer_precision as the dtype it computes in (UNDEFINED: none). */
static kiln_dtype prec_dtype(const char *s)
{
    static const struct { const char *name; kiln_dtype dt; } map[] = {
        {"fp32", KILN_DT_FLOAT32}, {"tf32", KILN_DT_FLOAT32}, {"fp16", KILN_DT_FLOAT16}, {"bf16", KILN_DT_BFLOAT16},
        {"int8", KILN_DT_INT8},    {"fp8", KILN_DT_FP8E4M3},  {"fp4", KILN_DT_FP4E2M1},  {"int4", KILN_DT_INT4},
        {"nvfp4", KILN_DT_FP4E2M1}, {"mxfp4", KILN_DT_FP4E2M1}, {"int16", KILN_DT_INT16}};
    for (size_t k = 0; s && k < sizeof map / sizeof map[0]; k++)
        if (!strcmp(s, map[k].name))
            return map[k].dt;
    return KILN_DT_UNDEFINED;
}

/* Layer i's precisions as dtypes: realized = what the builder's precision step found the layer
 * computes in (node->precision), requested = what the build asked for it (--precision /
 * --layer-precision), or the realized one when nothing was asked. */
static void layer_precisions(struct kiln_engine *e, int i, kiln_layer_rec *r)
{
    const char *req = NULL, *real = NULL;
    if (kiln_engine_layer_precision(e, i, &req, &real) != KILN_OK)
        kiln_clear_last_error();
    r->realized = (int32_t)prec_dtype(real);
    r->requested = req && *req ? (int32_t)prec_dtype(req) : r->realized;
}

/* Drops the data of constants read only through inputs that their layers' blobs replace. */
static kiln_status drop_replaced(struct kiln_engine *e, const kiln_layer *l)
{
    kiln_graph *g = e->g;
    int *readers = kiln__calloc((size_t)g->n_values + 1, sizeof(int));
    int *replaced = kiln__calloc((size_t)g->n_values + 1, sizeof(int));
    if (!readers || !replaced) {
        kiln__free(readers);
        kiln__free(replaced);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v < 0 || !has_data(&g->values[v]))
                continue;
            readers[v]++;
            if (k < 32 && l[i].blob && (l[i].replaces >> k & 1u))
                replaced[v]++;
        }
    for (int v = 0; v < g->n_values; v++) {
        if (!readers[v] || replaced[v] != readers[v] || needed_elsewhere(g, v))
            continue;
        kiln_tensor *t = g->values[v].init;
        if (!(t->flags & KILN_TENSOR_BORROWED))
            kiln__free(t->data);
        t->data = NULL;
        t->nbytes = 0;
        t->flags = KILN_TENSOR_BORROWED;
        for (int i = 0; i < g->n_nodes; i++)   /* a host must be able to use the blobs holding it */
            for (int k = 0; k < g->nodes[i].n_in; k++)
                if (g->nodes[i].in[k] == v)
                    e->target_arch |= l[i].needs_isa;
    }
    kiln__free(readers);
    kiln__free(replaced);
    return KILN_OK;
}

/* Copies the layers' blobs into one 64-byte aligned PACKED buffer and fills the records. */
static kiln_status gather(struct kiln_engine *e, const kiln_layer *l)
{
    const kiln_graph *g = e->g;
    size_t total = 0;
    for (int i = 0; i < g->n_nodes; i++)
        total += (l[i].blob_size + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN;
    e->layers = kiln__calloc((size_t)g->n_nodes + 1, sizeof *e->layers);
    e->packed_mem = kiln__malloc(total + PACK_ALIGN);
    if (!e->layers || !e->packed_mem)
        return kiln__err(KILN_ERR_NOMEM, "out of memory gathering %zu bytes of prepared weights", total);
    uint8_t *p = (uint8_t *)e->packed_mem + (PACK_ALIGN - (uintptr_t)e->packed_mem % PACK_ALIGN) % PACK_ALIGN;
    size_t off = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_layer_rec *r = &e->layers[i];
        snprintf(r->backend, sizeof r->backend, "%s", l[i].be->ops->name);
        r->kernel = l[i].kernel;
        layer_precisions(e, i, r);
        if (l[i].blob_size) {
            memcpy(p + off, l[i].blob, l[i].blob_size);
            size_t pad = (l[i].blob_size + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN - l[i].blob_size;
            memset(p + off + l[i].blob_size, 0, pad);
            r->blob = p + off;
            r->blob_off = off;
            r->blob_size = l[i].blob_size;
            off += l[i].blob_size + pad;
        }
    }
    e->packed = p;
    e->packed_len = off;
    e->n_layers = g->n_nodes;
    return KILN_OK;
}

kiln_status kiln__layers_prepare(struct kiln_engine *e, const kiln_backend *be, bool (*want)(const kiln_node *n))
{
    kiln_graph *g = e->g;
    int n = g->n_nodes, max_in = 1;
    for (int i = 0; i < n; i++)
        max_in = g->nodes[i].n_in > max_in ? g->nodes[i].n_in : max_in;
    kiln_layer *l = kiln__calloc((size_t)n + 1, sizeof *l);
    const kiln_tensor **consts = kiln__calloc((size_t)max_in + 1, sizeof *consts);
    kiln_status st = l && consts ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    int done = 0;
    for (; st == KILN_OK && done < n; done++) {
        const kiln_node *nd = &g->nodes[done];
        for (int k = 0; k < nd->n_in; k++)
            consts[k] = nd->in[k] >= 0 && has_data(&g->values[nd->in[k]]) ? g->values[nd->in[k]].init : NULL;
        st = be->ops->prepare(be, nd, !want || want(nd) ? consts : NULL, &l[done]);
        if (st != KILN_OK)
            break;
    }
    if (st == KILN_OK)
        st = drop_replaced(e, l);
    if (st == KILN_OK)
        st = gather(e, l);
    for (int i = 0; l && i < done; i++)
        l[i].be->ops->release(l[i].be, &l[i]);
    kiln__free(l);
    kiln__free(consts);
    return st;
}

void kiln__layers_release(kiln_layer *l, int n)
{
    for (int i = 0; l && i < n; i++)
        if (l[i].be)
            l[i].be->ops->release(l[i].be, &l[i]);
    kiln__free(l);
}

kiln_status kiln__layers_restore(const struct kiln_engine *e, kiln_layer **out)
{
    *out = NULL;
    const kiln_graph *g = e->g;
    if (!e->n_layers)
        return KILN_OK;
    if (e->n_layers != g->n_nodes)   /* the loader checks it; a graph edited after the build fails here */
        return kiln__err(KILN_ERR_INTERNAL, "the engine's layer plan has %d layers for %d nodes", e->n_layers,
                         g->n_nodes);
    kiln_layer *l = kiln__calloc((size_t)e->n_layers + 1, sizeof *l);
    if (!l)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = KILN_OK;
    for (int i = 0; i < e->n_layers && st == KILN_OK; i++) {
        const kiln_layer_rec *r = &e->layers[i];
        const kiln_node *n = &g->nodes[i];
        const kiln_backend *be = backend_named(r->backend);
        if (!be) {
            st = kiln__err(KILN_ERR_UNSUPPORTED, "layer '%s' was built for backend '%s', which this kiln lacks", n->name,
                           r->backend);
            break;
        }
        st = be->ops->load(be, n, r->kernel, r->blob, (size_t)r->blob_size, &l[i]);
        /* a constant stored only packed must be read only through inputs the layer's blob replaces */
        for (int k = 0; st == KILN_OK && k < n->n_in; k++) {
            int v = n->in[k];
            if (v >= 0 && kiln__value_packed_only(&g->values[v]) && (k >= 32 || !(l[i].replaces >> k & 1u)))
                st = kiln__err(KILN_ERR_PARSE,
                               "corrupted engine: layer '%s' reads constant '%s', stored only in packed form, "
                               "without prepared data for it",
                               n->name, g->values[v].name);
        }
    }
    if (st != KILN_OK) {
        kiln__layers_release(l, e->n_layers);
        return st;
    }
    *out = l;
    return KILN_OK;
}

kiln_status kiln__engine_run_named(const struct kiln_engine *e, int num_inputs, const char *const *input_names,
                                   const kiln_tensor *inputs, const kiln_run_options *opts, int *num_outputs,
                                   kiln_tensor **outputs)
{
    kiln_layer *layers;
    KILN_TRY(kiln__layers_restore(e, &layers));
    kiln_status st = kiln__graph_run_named(e->g, layers, num_inputs, input_names, inputs, opts, num_outputs, outputs);
    kiln__layers_release(layers, e->n_layers);
    return st;
}
