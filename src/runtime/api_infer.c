/* Public static shape inference (kiln_model_infer_shapes): the IR's inference (ir/shape.h) from
 * the declared or given input shapes, flattened into value name / dtype / dims, each dim an
 * integer or the text of its symbolic expression. */
#include "api.h"
#include "model.h"
#include "../ir/shape.h"
#include <stdlib.h>

typedef struct value_shape {
    const char *name;      /* points into exprs */
    kiln_type_info t;      /* dim_names point into exprs */
    char *exprs;           /* NUL-separated: the name, then the dim texts */
} value_shape;

struct kiln_value_shapes {
    int n;
    value_shape *v;
};

/* Declared input types, replaced by the dims `given` names (checked against the declaration). */
static kiln_status input_shapes(const kiln_graph *g, kiln_shapes_t given, kiln_symtab *st, kiln_vshape *in)
{
    for (int k = 0; k < kiln_shapes_count(given); k++) {
        const char *name;
        KILN_TRY(kiln_shapes_get(given, k, &name, NULL, NULL));
        bool found = false;
        for (int i = 0; i < g->n_inputs && !found; i++)
            found = !strcmp(g->values[g->inputs[i]].name, name);
        if (!found)
            return kiln__err(KILN_ERR_INVALID_ARG, "the model has no input '%s' (a shape is given for it)", name);
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        kiln__vshape_declared(st, v, &in[i]);
        int k = kiln_shapes_find(given, v->name), nd;
        int64_t dims[KILN_MAX_DIMS];
        if (k < 0)
            continue;
        KILN_TRY(kiln_shapes_get(given, k, NULL, &nd, dims));
        if (v->ndim >= 0 && v->ndim != nd)
            return kiln__err(KILN_ERR_SHAPE, "the shape given for input '%s' has rank %d, the model declares rank %d",
                             v->name, nd, v->ndim);
        in[i].rank = nd;
        for (int d = 0; d < nd; d++) {
            if (v->ndim >= 0 && v->dims[d].value >= 0 && !v->dims[d].param && v->dims[d].value != dims[d])
                return kiln__err(KILN_ERR_SHAPE, "the shape given for input '%s' has dim %d = %lld, the model declares %lld",
                                 v->name, d, (long long)dims[d], (long long)v->dims[d].value);
            in[i].dims[d] = kiln__sd_const(st, dims[d]);
        }
    }
    return KILN_OK;
}

/* Value ids in listing order: graph inputs, node outputs (node order), graph outputs; each once. */
static int value_order(const kiln_graph *g, int *ids)
{
    int n = 0;
    bool *seen = kiln__calloc((size_t)g->n_values + 1, sizeof *seen);
    if (!seen)
        return -1;
#define ADD(v) do { if ((v) >= 0 && !seen[v]) { seen[v] = true; ids[n++] = (v); } } while (0)
    for (int i = 0; i < g->n_inputs; i++)
        ADD(g->inputs[i]);
    for (int i = 0; i < g->n_nodes; i++)
        for (int o = 0; o < g->nodes[i].n_out; o++)
            ADD(g->nodes[i].out[o]);
    for (int i = 0; i < g->n_outputs; i++)
        ADD(g->outputs[i]);
#undef ADD
    kiln__free(seen);
    return n;
}

/* One value's result: integer dims as numbers, the others as their expression text. */
static kiln_status flatten(const kiln_symtab *st, const kiln_value *val, const kiln_vshape *s, value_shape *o)
{
    o->t.is_tensor = s->kind == KILN_VAL_TENSOR;
    o->t.dtype = o->t.is_tensor ? s->dtype : KILN_DT_UNDEFINED;
    o->t.rank = o->t.is_tensor ? s->rank : -1;
    char text[KILN_MAX_DIMS][256];
    size_t len = strlen(val->name) + 1;
    for (int d = 0; d < o->t.rank; d++) {
        o->t.dims[d] = -1;
        text[d][0] = 0;
        if (!kiln__sd_is_const(st, s->dims[d], &o->t.dims[d])) {
            o->t.dims[d] = -1;
            kiln__sd_str(st, s->dims[d], text[d], sizeof text[d]);
        }
        len += strlen(text[d]) + 1;
    }
    if (!(o->exprs = kiln__malloc(len + 1)))
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    char *p = o->exprs;
    memcpy(p, val->name, strlen(val->name) + 1);
    o->name = p;
    p += strlen(val->name) + 1;
    for (int d = 0; d < o->t.rank; d++) {
        size_t l = strlen(text[d]) + 1;
        memcpy(p, text[d], l);
        o->t.dim_names[d] = o->t.dims[d] < 0 ? p : NULL;
        p += l;
    }
    return KILN_OK;
}

static kiln_status infer(const kiln_graph *g, kiln_shapes_t given, struct kiln_value_shapes *r)
{
    kiln_symtab *st = kiln__symtab_new();
    kiln_vshape *in = kiln__calloc((size_t)g->n_inputs + 1, sizeof *in), *vs = NULL;
    const kiln_vshape **pin = kiln__calloc((size_t)g->n_inputs + 1, sizeof *pin);
    int *ids = kiln__calloc((size_t)g->n_values + 1, sizeof *ids);
    kiln_status s = st && in && pin && ids ? input_shapes(g, given, st, in) : kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_inputs; i++)
        pin[i] = in ? &in[i] : NULL;
    if (s == KILN_OK)
        s = kiln__infer_shapes(g, st, pin, &vs);
    int n = s == KILN_OK ? value_order(g, ids) : 0;
    if (n < 0 || (s == KILN_OK && !(r->v = kiln__calloc((size_t)n + 1, sizeof *r->v))))
        s = kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; s == KILN_OK && k < n; k++, r->n++)
        s = flatten(st, &g->values[ids[k]], &vs[ids[k]], &r->v[k]);
    kiln__free(vs);
    kiln__free(ids);
    kiln__free(pin);
    kiln__free(in);
    kiln__symtab_free(st);
    return s;
}

kiln_status kiln_model_infer_shapes(kiln_model_t m, kiln_shapes_t given, kiln_value_shapes_t *out)
{
    if (!m || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_model_infer_shapes: NULL argument");
    *out = NULL;
    struct kiln_value_shapes *r = kiln__calloc(1, sizeof *r);
    if (!r)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status s = infer(m->g, given, r);
    if (s != KILN_OK) {
        kiln_value_shapes_free(r);
        return s;
    }
    *out = r;
    return KILN_OK;
}

int kiln_value_shapes_count(kiln_value_shapes_t v)
{
    return v ? v->n : 0;
}

kiln_status kiln_value_shapes_get(kiln_value_shapes_t v, int i, const char **name, kiln_type_info *type)
{
    if (!v)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_value_shapes_get: NULL argument");
    if (i < 0 || i >= v->n)
        return kiln__index_err("kiln_value_shapes_get", "value", i, v->n);
    if (name)
        *name = v->v[i].name;
    if (type)
        *type = v->v[i].t;
    return KILN_OK;
}

void kiln_value_shapes_free(kiln_value_shapes_t v)
{
    for (int i = 0; v && i < v->n; i++)
        kiln__free(v->v[i].exprs);
    if (v)
        kiln__free(v->v);
    kiln__free(v);
}
