/* The memory plan's byte sizes from shape inference (ir/shape.h) instead of a run: a build that times no tactics
 * needs no run of the model at all (docs/ARCHITECTURE.md, "The one extra arrow"). */
#include "build.h"
#include "../ir/shape.h"

bool kiln__plan_bytes_inferred(const kiln_graph *g, const kiln_tensor *shapes, size_t *bytes, kiln_tensor *meta)
{
    kiln_symtab *st = kiln__symtab_new();
    kiln_vshape *in = kiln__calloc((size_t)g->n_inputs + 1, sizeof *in), *vs = NULL;
    const kiln_vshape **pin = kiln__calloc((size_t)g->n_inputs + 1, sizeof *pin);
    bool ok = st && in && pin;
    for (int i = 0; ok && i < g->n_inputs; i++) {
        kiln_tensor in_meta = shapes[i];
        in_meta.data = NULL;   /* shapes only */
        kiln__vs_from_tensor(st, &in_meta, &in[i]);
        in[i].hv = false;
        pin[i] = &in[i];
    }
    ok = ok && kiln__infer_shapes(g, st, pin, &vs) == KILN_OK;
    for (int i = 0; ok && i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int o = 0; ok && o < n->n_out; o++) {
            int v = n->out[o];
            if (v < 0)
                continue;
            const kiln_vshape *s = &vs[v];
            size_t es = s->kind == KILN_VAL_TENSOR && s->rank >= 0 ? kiln_dtype_size(s->dtype) : 0;
            int64_t dims[KILN_MAX_DIMS], numel;
            for (int d = 0; es && d < s->rank; d++)
                if (!kiln__sd_is_const(st, s->dims[d], &dims[d]))
                    es = 0;   /* a data-dependent size: only a run knows it */
            if (!es || (numel = kiln__shape_numel(s->rank, dims)) < 0 || (uint64_t)numel > SIZE_MAX / es)
                ok = false;
            else {
                bytes[v] = (size_t)numel * es;
                if (meta) {   /* dtype and shape, no data */
                    memset(&meta[v], 0, sizeof meta[v]);
                    meta[v].dtype = s->dtype;
                    meta[v].ndim = s->rank;
                    memcpy(meta[v].dims, dims, sizeof(int64_t) * (size_t)s->rank);
                    meta[v].nbytes = bytes[v];
                }
            }
        }
    }
    if (!ok)
        kiln_clear_last_error();   /* not an error: the builder runs the model instead */
    kiln__free(vs);
    kiln__free(in);
    kiln__free(pin);
    kiln__symtab_free(st);
    return ok;
}
