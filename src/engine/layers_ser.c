/* The LAYERS section: the engine's layer plan, one record per top-level node (backend, kernel,
 * requested / realized precision, prepared blob in the PACKED section). The engine only checks
 * the structure; the backend named by a record checks its blob when the runtime restores the
 * layer (src/runtime/layers.c). Format: docs/ENGINE_FORMAT.md. */
#include "engine.h"
#include "graph_ser.h"
#include <stdlib.h>

#define LAYER_REC_BYTES 48u

void kiln__layers_write(kiln_wbuf *w, const struct kiln_engine *e)
{
    kiln__w_u32(w, (uint32_t)e->n_layers);
    kiln__w_u32(w, 0);
    for (int i = 0; i < e->n_layers; i++) {
        const kiln_layer_rec *l = &e->layers[i];
        kiln__w_bytes(w, l->backend, sizeof l->backend);
        kiln__w_i32(w, l->kernel);
        kiln__w_i32(w, l->requested);
        kiln__w_i32(w, l->realized);
        kiln__w_u32(w, 0);   /* flags, reserved */
        kiln__w_u64(w, l->blob_size ? l->blob_off : 0);
        kiln__w_u64(w, l->blob_size);
    }
}

static int cmp_off(const void *a, const void *b)
{
    const kiln_layer_rec *x = *(const kiln_layer_rec *const *)a, *y = *(const kiln_layer_rec *const *)b;
    return x->blob_off < y->blob_off ? -1 : x->blob_off > y->blob_off;
}

/* Blobs must not share bytes: each layer owns its prepared data (sorted by offset, O(n log n)). *oom: the check's
 * own allocation failed (not a verdict on the bytes). */
static bool blobs_disjoint(const struct kiln_engine *e, bool *oom)
{
    const kiln_layer_rec **s = kiln__calloc((size_t)e->n_layers + 1, sizeof *s);
    *oom = !s;
    if (!s)
        return false;
    int n = 0;
    for (int i = 0; i < e->n_layers; i++)
        if (e->layers[i].blob_size)
            s[n++] = &e->layers[i];
    qsort(s, (size_t)n, sizeof *s, cmp_off);
    bool ok = true;
    for (int i = 1; i < n && ok; i++)
        ok = s[i]->blob_off >= s[i - 1]->blob_off + s[i - 1]->blob_size;
    kiln__free(s);
    return ok;
}

static kiln_status bad(const char *what)
{
    return kiln__err(KILN_ERR_PARSE, "corrupted engine: layers section: invalid %s", what);
}

kiln_status kiln__layers_read(kiln_rbuf *r, struct kiln_engine *e)
{
    uint32_t n = kiln__r_u32(r), reserved = kiln__r_u32(r);
    if (r->bad || reserved || n != (uint32_t)e->g->n_nodes || kiln__r_left(r) / LAYER_REC_BYTES < n ||
        kiln__r_left(r) != (size_t)n * LAYER_REC_BYTES)
        return bad("layer count (one record per top-level node)");
    e->layers = kiln__calloc((size_t)n + 1, sizeof *e->layers);
    if (!e->layers)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    e->n_layers = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        kiln_layer_rec *l = &e->layers[i];
        kiln__r_bytes(r, l->backend, sizeof l->backend);
        l->kernel = kiln__r_i32(r);
        l->requested = kiln__r_i32(r);
        l->realized = kiln__r_i32(r);
        uint32_t flags = kiln__r_u32(r);
        l->blob_off = kiln__r_u64(r);
        l->blob_size = kiln__r_u64(r);
        if (r->bad)
            return bad("layer record");
        if (!memchr(l->backend, 0, sizeof l->backend) || !l->backend[0])
            return bad("backend name");
        if (l->requested < 0 || l->requested >= KILN_DT_COUNT || l->realized < 0 || l->realized >= KILN_DT_COUNT ||
            flags)
            return bad("layer precision");
        if (l->blob_off % KILN_ENGINE_BLOB_ALIGN || l->blob_off > e->packed_len ||
            l->blob_size > e->packed_len - l->blob_off || (!l->blob_size && l->blob_off))
            return bad("prepared blob offset or size");
        l->blob = l->blob_size ? e->packed + l->blob_off : NULL;
    }
    bool oom;
    if (!blobs_disjoint(e, &oom))
        return oom ? kiln__err(KILN_ERR_NOMEM, "out of memory") : bad("prepared blobs (they overlap)");
    return KILN_OK;
}

/* True if g or any subgraph below it refers to `name` as an outer-scope value. */
static bool subgraphs_read(const kiln_graph *g, const char *name, bool self)
{
    if (self)
        for (int v = 0; v < g->n_values; v++)
            if (g->values[v].is_outer && !strcmp(g->values[v].name, name))
                return true;
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attr; a++) {
            const kiln_attr *at = &g->nodes[i].attrs[a];
            if (at->g && subgraphs_read(at->g, name, true))
                return true;
            for (int k = 0; at->graphs && k < at->n; k++)
                if (subgraphs_read(at->graphs[k], name, true))
                    return true;
        }
    return false;
}

uint32_t kiln__engine_packed_isa(const struct kiln_engine *e)
{
    const kiln_graph *g = e->g;
    uint32_t isa = 0;
    for (int i = 0; i < g->n_nodes && i < e->n_layers; i++) {
        const kiln_layer_rec *l = &e->layers[i];
        if (l->blob_size < KILN_ENGINE_BLOB_HDR_BYTES || memcmp(l->blob, KILN_ENGINE_BLOB_MAGIC, 8))
            continue;   /* no header: the backend refuses the blob when it restores the layer */
        bool packed_only = false;
        for (int k = 0; k < g->nodes[i].n_in; k++)
            packed_only |= g->nodes[i].in[k] >= 0 && kiln__value_packed_only(&g->values[g->nodes[i].in[k]]);
        if (!packed_only)
            continue;
        const uint8_t *p = (const uint8_t *)l->blob + KILN_ENGINE_BLOB_ISA_AT;
        isa |= (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    return isa;
}

kiln_status kiln__engine_check_packed_only(const struct kiln_engine *e)
{
    const kiln_graph *g = e->g;
    bool any = false;
    for (int v = 0; v < g->n_values; v++)
        any |= kiln__value_packed_only(&g->values[v]);
    if (!any)
        return KILN_OK;
    for (int o = 0; o < g->n_outputs; o++)
        if (kiln__value_packed_only(&g->values[g->outputs[o]]))
            return bad("graph output stored only in packed form");
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v >= 0 && kiln__value_packed_only(&g->values[v]) && (i >= e->n_layers || !e->layers[i].blob_size))
                return bad("constant stored only in packed form, read by a layer without prepared data");
        }
    for (int v = 0; v < g->n_values; v++)
        if (kiln__value_packed_only(&g->values[v]) && subgraphs_read(g, g->values[v].name, false))
            return bad("constant stored only in packed form, read by a subgraph");
    return KILN_OK;
}
