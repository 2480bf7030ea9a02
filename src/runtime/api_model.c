/* Public model introspection: interface types, producer/opsets, parameters, op histogram,
 * unsupported ops; and the operator listing. */
#include "api.h"
#include "exec.h"
#include "model.h"
#include "../backend/kernel.h"
#include <stdlib.h>

kiln_status kiln__index_err(const char *fn, const char *what, int i, int n)
{
    return kiln__err(KILN_ERR_INVALID_ARG, "%s: %s %d out of range [0, %d)", fn, what, i, n);
}

/* Graph input/output i of g, after checking io and i. */
static kiln_status io_value(const char *fn, const kiln_graph *g, kiln_io io, int i, const kiln_value **v)
{
    if (io != KILN_IO_INPUT && io != KILN_IO_OUTPUT)
        return kiln__err(KILN_ERR_INVALID_ARG, "%s: io %d is neither KILN_IO_INPUT nor KILN_IO_OUTPUT", fn, (int)io);
    int n = io == KILN_IO_INPUT ? g->n_inputs : g->n_outputs;
    if (i < 0 || i >= n)
        return kiln__index_err(fn, io == KILN_IO_INPUT ? "input" : "output", i, n);
    *v = &g->values[io == KILN_IO_INPUT ? g->inputs[i] : g->outputs[i]];
    return KILN_OK;
}

static int64_t dim_size(const kiln_dim *d)
{
    return d->value >= 0 && !d->param ? d->value : -1;
}

kiln_status kiln__graph_io_type(const char *fn, const kiln_graph *g, kiln_io io, int i, kiln_type_info *out)
{
    const kiln_value *v = NULL;
    if (!out)
        return kiln__err(KILN_ERR_INVALID_ARG, "%s: NULL argument", fn);
    KILN_TRY(io_value(fn, g, io, i, &v));
    memset(out, 0, sizeof *out);
    out->is_tensor = v->kind == KILN_VAL_TENSOR;
    out->dtype = out->is_tensor ? v->dtype : KILN_DT_UNDEFINED;
    out->rank = v->ndim;
    if (v->ndim < 0 && v->init) {   /* an initializer the graph outputs: its own type (none recorded for it) */
        out->is_tensor = true;
        out->dtype = v->init->dtype;
        out->rank = v->init->ndim;
        memcpy(out->dims, v->init->dims, sizeof v->init->dims);
        return KILN_OK;
    }
    for (int d = 0; d < v->ndim && d < KILN_MAX_DIMS; d++) {
        out->dims[d] = dim_size(&v->dims[d]);
        out->dim_names[d] = v->dims[d].param;
    }
    return KILN_OK;
}

kiln_status kiln__graph_io_dim(const char *fn, const kiln_graph *g, kiln_io io, int i, int d, int64_t *size,
                               const char **name)
{
    const kiln_value *v = NULL;
    KILN_TRY(io_value(fn, g, io, i, &v));
    if (v->ndim < 0 && v->init) {   /* an initializer the graph outputs (kiln__graph_io_type) */
        if (d < 0 || d >= v->init->ndim)
            return kiln__index_err(fn, "dim", d, v->init->ndim);
        if (size)
            *size = v->init->dims[d];
        if (name)
            *name = NULL;
        return KILN_OK;
    }
    if (d < 0 || d >= v->ndim)
        return kiln__index_err(fn, "dim", d, v->ndim < 0 ? 0 : v->ndim);
    if (size)
        *size = dim_size(&v->dims[d]);
    if (name)
        *name = v->dims[d].param;
    return KILN_OK;
}

#define NEED_MODEL(fn, ret) do { if (!m) { kiln__err(KILN_ERR_INVALID_ARG, "%s: NULL model", fn); return ret; } } while (0)

kiln_status kiln_model_io_type(kiln_model_t m, kiln_io io, int i, kiln_type_info *out)
{
    NEED_MODEL("kiln_model_io_type", KILN_ERR_INVALID_ARG);
    return kiln__graph_io_type("kiln_model_io_type", m->g, io, i, out);
}

kiln_status kiln_model_io_dim(kiln_model_t m, kiln_io io, int i, int d, int64_t *size, const char **name)
{
    NEED_MODEL("kiln_model_io_dim", KILN_ERR_INVALID_ARG);
    return kiln__graph_io_dim("kiln_model_io_dim", m->g, io, i, d, size, name);
}

const char *kiln_model_producer(kiln_model_t m)
{
    NEED_MODEL("kiln_model_producer", NULL);
    return m->info.producer ? m->info.producer : "";
}

int64_t kiln_model_ir_version(kiln_model_t m)
{
    NEED_MODEL("kiln_model_ir_version", -1);
    return m->info.ir_version;
}

int kiln_model_num_nodes(kiln_model_t m)
{
    NEED_MODEL("kiln_model_num_nodes", -1);
    return m->g->n_nodes;
}

int kiln_model_num_opsets(kiln_model_t m)
{
    NEED_MODEL("kiln_model_num_opsets", -1);
    return m->g->n_opsets;
}

kiln_status kiln_model_opset(kiln_model_t m, int i, const char **domain, int64_t *version)
{
    NEED_MODEL("kiln_model_opset", KILN_ERR_INVALID_ARG);
    if (i < 0 || i >= m->g->n_opsets)
        return kiln__index_err("kiln_model_opset", "opset", i, m->g->n_opsets);
    const kiln_opset *o = &m->g->opsets[i];
    if (domain)
        *domain = o->domain && o->domain[0] ? o->domain : "ai.onnx";
    if (version)
        *version = o->version;
    return KILN_OK;
}

kiln_status kiln_model_parameters(kiln_model_t m, int64_t *count, int64_t *bytes, int64_t *num_initializers)
{
    NEED_MODEL("kiln_model_parameters", KILN_ERR_INVALID_ARG);
    int64_t c = 0, b = 0, n = 0;
    for (int v = 0; v < m->g->n_values; v++)
        if (m->g->values[v].init) {
            c += kiln_tensor_numel(m->g->values[v].init);
            b += (int64_t)m->g->values[v].init->nbytes;
            n++;
        }
    if (count)
        *count = c;
    if (bytes)
        *bytes = b;
    if (num_initializers)
        *num_initializers = n;
    return KILN_OK;
}

typedef struct { kiln_op_count *v; int n, cap; } histo;

static kiln_status count_ops(const kiln_graph *g, histo *h)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        int k = 0;
        while (k < h->n && strcmp(h->v[k].op, n->op_type) != 0)
            k++;
        if (k == h->n) {
            if (h->n == h->cap) {
                int cap = h->cap ? 2 * h->cap : 64;
                kiln_op_count *v = kiln__realloc(h->v, sizeof *v * (size_t)cap);
                if (!v)
                    return kiln__err(KILN_ERR_NOMEM, "out of memory");
                h->v = v;
                h->cap = cap;
            }
            h->v[h->n++] = (kiln_op_count){n->op_type, 0};
        }
        h->v[k].count++;
        for (int a = 0; a < n->n_attr; a++)
            if (n->attrs[a].g)
                KILN_TRY(count_ops(n->attrs[a].g, h));
    }
    return KILN_OK;
}

static int by_count(const void *a, const void *b)
{
    const kiln_op_count *x = a, *y = b;
    return x->count != y->count ? y->count - x->count : strcmp(x->op, y->op);
}

kiln_status kiln_model_op_histogram(kiln_model_t m, int *num_ops, kiln_op_count **ops)
{
    NEED_MODEL("kiln_model_op_histogram", KILN_ERR_INVALID_ARG);
    if (!num_ops || !ops)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_model_op_histogram: NULL argument");
    histo h = {0};
    kiln_status st = count_ops(m->g, &h);
    if (st != KILN_OK) {
        kiln__free(h.v);
        return st;
    }
    if (h.n)
        qsort(h.v, (size_t)h.n, sizeof h.v[0], by_count);
    *num_ops = h.n;
    *ops = h.v;
    return KILN_OK;
}

kiln_status kiln_model_unsupported(kiln_model_t m, int *count, char **text)
{
    NEED_MODEL("kiln_model_unsupported", KILN_ERR_INVALID_ARG);
    if (!count || !text)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_model_unsupported: NULL argument");
    size_t cap = 1 << 16;
    char *buf = kiln__calloc(cap, 1);
    if (!buf)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    *count = kiln__list_unsupported(m->g, buf, cap);
    *text = buf;
    return KILN_OK;
}

int kiln_num_ops(void)
{
    return KILN_OP_COUNT;
}

const char *kiln_op_name(int op)
{
    if (op < 0 || op >= KILN_OP_COUNT) {
        kiln__index_err("kiln_op_name", "op", op, KILN_OP_COUNT);
        return NULL;
    }
    return kiln__op_name((kiln_op)op);
}

bool kiln_op_has_kernel(int op)
{
    if (op < 0 || op >= KILN_OP_COUNT) {
        kiln__index_err("kiln_op_has_kernel", "op", op, KILN_OP_COUNT);
        return false;
    }
    return kiln__ref_kernel((kiln_op)op) != NULL;
}
