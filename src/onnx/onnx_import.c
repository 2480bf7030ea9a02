/* ONNX ModelProto -> kiln_graph. Every reference is resolved and checked here, so later
 * stages can trust value ids. Subgraphs (If/Loop/Scan bodies) are imported recursively and
 * may refer to values of enclosing graphs by name. */
#include "onnx_tensor.h"
#include "onnx_wire.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GRAPH_DEPTH 32

typedef struct import_ctx {
    const char *base_dir;
    const Onnx__OperatorSetIdProto *const *opsets;
    size_t n_opsets;
} import_ctx;

static kiln_status import_graph(import_ctx *ic, const Onnx__GraphProto *gp, kiln_graph *parent, int depth,
                                kiln_graph **out);

static int opset_for(const import_ctx *ic, const char *domain)
{
    bool dflt = !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
    for (size_t i = 0; i < ic->n_opsets; i++) {
        const char *d = ic->opsets[i]->domain;
        bool idflt = !d || !d[0] || strcmp(d, "ai.onnx") == 0;
        if ((dflt && idflt) || (!dflt && !idflt && strcmp(d, domain) == 0))
            return (int)ic->opsets[i]->version;
    }
    return 0;
}

/* The opset versions published for ONNX's own domains: 1 up to the newest release's
 * (ONNX 1.20: ai.onnx 25, ai.onnx.ml 5). Other domains are not checked. */
static const struct { const char *domain; int64_t max; } known_opsets[] = {
    {"", 25}, {"ai.onnx", 25}, {"ai.onnx.ml", 5}, {"ai.onnx.training", 1}, {"ai.onnx.preview.training", 1},
};

static kiln_status check_opsets(const Onnx__ModelProto *mp)
{
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const char *d = mp->opset_import[i]->domain ? mp->opset_import[i]->domain : "";
        int64_t v = mp->opset_import[i]->version;
        for (size_t k = 0; k < sizeof known_opsets / sizeof known_opsets[0]; k++)
            if (strcmp(d, known_opsets[k].domain) == 0 && (v < 1 || v > known_opsets[k].max))
                return kiln__err(KILN_ERR_PARSE, "opset_import: version %lld of domain '%s' does not exist (ONNX "
                                 "defines 1 to %lld)", (long long)v, d[0] ? d : "ai.onnx",
                                 (long long)known_opsets[k].max);
    }
    return KILN_OK;
}

/* Value lookup through enclosing graphs; creates an outer-scope reference in g if found above. */
static int resolve(kiln_graph *g, const char *name)
{
    int v = kiln__graph_find(g, name);
    if (v >= 0)
        return v;
    for (kiln_graph *p = g->parent; p; p = p->parent)
        if (kiln__graph_find(p, name) >= 0) {
            v = kiln__graph_add_value(g, name);
            if (v >= 0)
                g->values[v].is_outer = true;
            return v;
        }
    return -2;
}

static void set_type(kiln_value *v, const Onnx__TypeProto *tp)
{
    if (!tp)
        return;
    switch (tp->value_case) {
    case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE: {
        const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
        v->kind = KILN_VAL_TENSOR;
        if (!tt)
            return;
        if (tt->has_elem_type && tt->elem_type > 0 && tt->elem_type < KILN_DT_COUNT)
            v->dtype = (kiln_dtype)tt->elem_type;
        if (tt->shape && tt->shape->n_dim <= 64) {
            v->dims = kiln__calloc(tt->shape->n_dim ? tt->shape->n_dim : 1, sizeof(kiln_dim));
            if (!v->dims)
                return;
            v->ndim = (int)tt->shape->n_dim;
            for (size_t i = 0; i < tt->shape->n_dim; i++) {
                const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
                v->dims[i].value = -1;
                if (d && d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
                    v->dims[i].value = d->dim_value;
                else if (d && d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
                    v->dims[i].param = kiln__strdup(d->dim_param);
            }
        }
        break;
    }
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE: v->kind = KILN_VAL_SEQUENCE; break;
    case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: v->kind = KILN_VAL_MAP; break;
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: v->kind = KILN_VAL_OPTIONAL; break;
    default: v->kind = KILN_VAL_OTHER; break;
    }
}

static kiln_status import_attr(import_ctx *ic, const Onnx__AttributeProto *ap, kiln_graph *g, int depth,
                               kiln_attr *a)
{
    memset(a, 0, sizeof *a);
    a->name = kiln__strdup(ap->name ? ap->name : "");
    if (!a->name)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    a->type = ap->has_type ? (kiln_attr_type)ap->type : KILN_ATTR_UNDEFINED;
    if (ap->ref_attr_name && ap->ref_attr_name[0])
        return kiln__err(KILN_ERR_UNSUPPORTED, "attribute '%s' refers to a function attribute", a->name);
    a->f = ap->f;
    a->i = ap->i;
    switch (a->type) {
    case KILN_ATTR_STRING:
        a->s = kiln__strndup((const char *)ap->s.data ? (const char *)ap->s.data : "", ap->s.len);
        a->s_len = ap->s.len;
        if (!a->s)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        break;
    case KILN_ATTR_TENSOR:
        if (!ap->t)
            return kiln__err(KILN_ERR_PARSE, "tensor attribute '%s' has no tensor", a->name);
        a->t = kiln__calloc(1, sizeof *a->t);
        if (!a->t)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        KILN_TRY(kiln__onnx_tensor_from_proto(ap->t, ic->base_dir, a->t));
        break;
    case KILN_ATTR_GRAPH:
        if (!ap->g)
            return kiln__err(KILN_ERR_PARSE, "graph attribute '%s' has no graph", a->name);
        KILN_TRY(import_graph(ic, ap->g, g, depth + 1, &a->g));
        break;
    case KILN_ATTR_FLOATS:
        a->n = (int)ap->n_floats;
        a->floats = kiln__calloc(ap->n_floats ? ap->n_floats : 1, sizeof(float));
        if (!a->floats)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        if (ap->n_floats)
            memcpy(a->floats, ap->floats, ap->n_floats * sizeof(float));
        break;
    case KILN_ATTR_INTS:
        a->n = (int)ap->n_ints;
        a->ints = kiln__calloc(ap->n_ints ? ap->n_ints : 1, sizeof(int64_t));
        if (!a->ints)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        if (ap->n_ints)
            memcpy(a->ints, ap->ints, ap->n_ints * sizeof(int64_t));
        break;
    case KILN_ATTR_STRINGS:
        a->strings = kiln__calloc(ap->n_strings ? ap->n_strings : 1, sizeof(char *));
        if (!a->strings)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < ap->n_strings; i++) {
            a->strings[i] = kiln__strndup(ap->strings[i].data ? (const char *)ap->strings[i].data : "",
                                          ap->strings[i].len);
            if (!a->strings[i])
                return kiln__err(KILN_ERR_NOMEM, "out of memory");
            a->n = (int)i + 1;
        }
        break;
    case KILN_ATTR_GRAPHS:
        a->graphs = kiln__calloc(ap->n_graphs ? ap->n_graphs : 1, sizeof(kiln_graph *));
        if (!a->graphs)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < ap->n_graphs; i++) {
            KILN_TRY(import_graph(ic, ap->graphs[i], g, depth + 1, &a->graphs[i]));
            a->n = (int)i + 1;
        }
        break;
    default:
        break;   /* FLOAT, INT: already copied; others are kept as type only */
    }
    return KILN_OK;
}

static kiln_status add_declared(kiln_graph *g, const Onnx__ValueInfoProto *vi, const char *what, int *id)
{
    if (!vi || !vi->name || !vi->name[0])
        return kiln__err(KILN_ERR_PARSE, "graph %s without a name", what);
    int v = kiln__graph_find(g, vi->name);
    if (v < 0) {
        v = kiln__graph_add_value(g, vi->name);
        if (v < 0)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    if (g->values[v].ndim < 0 && g->values[v].dtype == KILN_DT_UNDEFINED)
        set_type(&g->values[v], vi->type);
    *id = v;
    return KILN_OK;
}

static kiln_status count_err(const kiln_node *n, size_t have, const char *what, int lo, int hi)
{
    char range[48];
    if (lo == hi)
        snprintf(range, sizeof range, "exactly %d", lo);
    else if (hi == INT_MAX)
        snprintf(range, sizeof range, "at least %d", lo);
    else
        snprintf(range, sizeof range, "%d to %d", lo, hi);
    return kiln__err(KILN_ERR_PARSE, "node '%s' (%s) has %zu %ss; %s takes %s", n->name, n->op_type, have, what,
                     n->op_type, range);
}

/* The operator's input and output counts (ops.def, from the ONNX specification). */
static kiln_status check_arity(const kiln_node *n, size_t n_in, size_t n_out)
{
    const kiln_op_arity *a = kiln__op_arity(n->op);
    if (!a)
        return KILN_OK;   /* unknown ops are reported by the support check */
    if (n_in < (size_t)a->min_in || n_in > (size_t)a->max_in)
        return count_err(n, n_in, "input", a->min_in, a->max_in);
    if (n_out < (size_t)a->min_out || n_out > (size_t)a->max_out)
        return count_err(n, n_out, "output", a->min_out, a->max_out);
    return KILN_OK;
}

/* Attribute types of the default-domain ONNX operators (onnx_attrs.def, generated from the ONNX
 * schemas). The kernels read attributes through kiln__attr_i and friends, which return the default
 * for an attribute of another type, so e.g. Softmax axis=1.0 (a FLOAT) would silently run with
 * axis -1; ONNX Runtime rejects such a model, and so does the importer. */
typedef struct {
    const char *op, *name;
    kiln_attr_type type;
} onnx_attr_type;

static const onnx_attr_type onnx_attr_types[] = {
#define A(op, name, t) {op, name, KILN_ATTR_##t},
#include "onnx_attrs.def"
#undef A
};

static const char *attr_type_name(kiln_attr_type t)
{
    static const char *const names[] = {"UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR", "GRAPH", "FLOATS", "INTS",
                                        "STRINGS", "TENSORS", "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS",
                                        "TYPE_PROTO", "TYPE_PROTOS"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

static int attr_type_cmp(const void *key, const void *elem)
{
    const onnx_attr_type *k = key, *e = elem;
    int c = strcmp(k->op, e->op);
    return c ? c : strcmp(k->name, e->name);
}

static kiln_status check_attr_types(const kiln_node *n)
{
    if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
        return KILN_OK;   /* other domains: no schema here */
    const size_t count = sizeof onnx_attr_types / sizeof onnx_attr_types[0];
    for (int i = 0; i < n->n_attr; i++) {
        const kiln_attr *a = &n->attrs[i];
        if (a->type == KILN_ATTR_UNDEFINED)
            continue;   /* untyped (very old writers): nothing to compare */
        onnx_attr_type key = {n->op_type, a->name, a->type};
        const onnx_attr_type *hit = bsearch(&key, onnx_attr_types, count, sizeof key, attr_type_cmp);
        if (!hit)
            continue;   /* an attribute the schema does not list (or an op it does not know) */
        /* an (op, attribute) whose type changed between opsets has one entry per type */
        while (hit > onnx_attr_types && attr_type_cmp(&key, hit - 1) == 0)
            hit--;
        bool ok = false;
        const onnx_attr_type *first = hit;
        for (; hit < onnx_attr_types + count && attr_type_cmp(&key, hit) == 0; hit++)
            /* an INT for a FLOAT is kept: kiln__attr_f converts it, so nothing is dropped, and some
             * exporters write e.g. alpha=1 that way */
            ok |= hit->type == a->type || (hit->type == KILN_ATTR_FLOAT && a->type == KILN_ATTR_INT);
        if (!ok)
            return kiln__err(KILN_ERR_PARSE, "node '%s' (%s): attribute '%s' is %s, but %s takes %s", n->name,
                             n->op_type, a->name, attr_type_name(a->type), n->op_type, attr_type_name(first->type));
    }
    return KILN_OK;
}

/* Graph inputs: each name once. Inputs that an initializer also defines are constants with a
 * default and not fed by the caller. */
static kiln_status import_inputs(const Onnx__GraphProto *gp, kiln_graph *g)
{
    int n_init = g->n_values;   /* only initializers so far */
    bool *seen = kiln__calloc((size_t)n_init + gp->n_input + 1, sizeof(bool));
    if (!seen)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = KILN_OK;
    for (size_t i = 0; i < gp->n_input && st == KILN_OK; i++) {
        int v = -1;
        st = add_declared(g, gp->input[i], "input", &v);
        if (st != KILN_OK)
            break;
        if (seen[v])
            st = kiln__err(KILN_ERR_PARSE, "graph input '%s' is declared more than once", g->values[v].name);
        seen[v] = true;
        if (!g->values[v].init)
            g->inputs[g->n_inputs++] = v;
    }
    kiln__free(seen);
    return st;
}

static kiln_status import_node(import_ctx *ic, const Onnx__NodeProto *np, kiln_graph *g, int depth, int idx)
{
    kiln_node *n = &g->nodes[idx];
    n->name = kiln__strdup(np->name && np->name[0] ? np->name : "");
    n->op_type = kiln__strdup(np->op_type ? np->op_type : "");
    n->domain = kiln__strdup(np->domain ? np->domain : "");
    if (!n->name || !n->op_type || !n->domain)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    if (!n->op_type[0])
        return kiln__err(KILN_ERR_PARSE, "node %d ('%s') has no op_type", idx, n->name);
    n->op = kiln__op_lookup(n->domain, n->op_type);
    n->opset = opset_for(ic, n->domain);
    KILN_TRY(check_arity(n, np->n_input, np->n_output));
    n->in = kiln__calloc(np->n_input ? np->n_input : 1, sizeof(int));
    n->attrs = kiln__calloc(np->n_attribute ? np->n_attribute : 1, sizeof(kiln_attr));
    if (!n->in || !n->attrs)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < np->n_input; i++) {
        const char *nm = np->input[i];
        int v = -1;
        if (nm && nm[0]) {
            v = resolve(g, nm);
            if (v == -2)
                return kiln__err(KILN_ERR_PARSE, "node '%s' (%s) reads '%s', which no node, input or initializer defines",
                                 n->name, n->op_type, nm);
            if (v < 0)
                return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        n->in[i] = v;
        n->n_in = (int)i + 1;
    }
    for (size_t i = 0; i < np->n_attribute; i++) {
        kiln_status st = import_attr(ic, np->attribute[i], g, depth, &n->attrs[i]);
        n->n_attr = (int)i + 1;
        if (st != KILN_OK) {
            kiln__err_prefix("node '%s' (%s)", n->name, n->op_type);
            return st;
        }
    }
    return check_attr_types(n);
}

/* Single static assignment: a node output is a new name, not an initializer, a graph input,
 * another node's output or a value of an enclosing graph (initializers and inputs, and the
 * outputs of earlier nodes, are declared before). */
static kiln_status check_ssa(const kiln_graph *g, const Onnx__NodeProto *np, const char *nm)
{
    const char *what = NULL;
    int v = kiln__graph_find(g, nm);
    if (v >= 0)
        what = g->values[v].producer >= 0 ? "the output of another node (or of this one twice)"
               : g->values[v].init        ? "an initializer"
                                          : "a graph input";
    for (const kiln_graph *p = g->parent; p && !what; p = p->parent)
        if (kiln__graph_find(p, nm) >= 0)
            what = "a value of an enclosing graph";
    if (!what)
        return KILN_OK;
    return kiln__err(KILN_ERR_PARSE, "node '%s' (%s) writes '%s', which is already %s", np->name ? np->name : "",
                     np->op_type ? np->op_type : "", nm, what);
}

/* Creates a value for every node output first, so inputs can be resolved in any node order. */
static kiln_status declare_outputs(const Onnx__GraphProto *gp, kiln_graph *g)
{
    for (size_t k = 0; k < gp->n_node; k++) {
        int idx = kiln__graph_add_node(g);
        if (idx < 0)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        const Onnx__NodeProto *np = gp->node[k];
        kiln_node *n = &g->nodes[idx];
        n->out = kiln__calloc(np->n_output ? np->n_output : 1, sizeof(int));
        if (!n->out)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < np->n_output; i++) {
            const char *nm = np->output[i];
            int v = -1;
            if (nm && nm[0]) {
                KILN_TRY(check_ssa(g, np, nm));
                v = kiln__graph_add_value(g, nm);
                if (v < 0)
                    return kiln__err(KILN_ERR_NOMEM, "out of memory");
                g->values[v].producer = idx;
            }
            n->out[i] = v;
            n->n_out = (int)i + 1;
        }
    }
    return KILN_OK;
}

static kiln_status import_graph_body(import_ctx *ic, const Onnx__GraphProto *gp, kiln_graph *g, int depth)
{
    g->name = kiln__strdup(gp->name ? gp->name : "");
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->name || !tp->name[0])
            return kiln__err(KILN_ERR_PARSE, "initializer %zu has no name", i);
        int v = kiln__graph_find(g, tp->name);
        if (v >= 0)
            return kiln__err(KILN_ERR_PARSE, "initializer '%s' is defined twice", tp->name);
        v = kiln__graph_add_value(g, tp->name);
        if (v < 0 || !(g->values[v].init = kiln__calloc(1, sizeof(kiln_tensor))))
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        kiln_status st = kiln__onnx_tensor_from_proto(tp, ic->base_dir, g->values[v].init);
        if (st != KILN_OK) {
            kiln__free(g->values[v].init);
            g->values[v].init = NULL;
            kiln__err_prefix("initializer");
            return st;
        }
        g->values[v].dtype = g->values[v].init->dtype;
    }
    if (gp->n_sparse_initializer)
        return kiln__err(KILN_ERR_UNSUPPORTED, "sparse initializers are not supported");
    g->inputs = kiln__calloc(gp->n_input ? gp->n_input : 1, sizeof(int));
    g->outputs = kiln__calloc(gp->n_output ? gp->n_output : 1, sizeof(int));
    if (!g->inputs || !g->outputs)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    KILN_TRY(import_inputs(gp, g));
    KILN_TRY(declare_outputs(gp, g));
    for (size_t i = 0; i < gp->n_value_info; i++) {
        const Onnx__ValueInfoProto *vi = gp->value_info[i];
        int v = vi && vi->name ? kiln__graph_find(g, vi->name) : -1;
        if (v >= 0 && g->values[v].ndim < 0)
            set_type(&g->values[v], vi->type);
    }
    for (size_t k = 0; k < gp->n_node; k++)
        KILN_TRY(import_node(ic, gp->node[k], g, depth, (int)k));
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = gp->output[i];
        if (!vi || !vi->name || !vi->name[0])
            return kiln__err(KILN_ERR_PARSE, "graph output %zu has no name", i);
        int v = resolve(g, vi->name);
        if (v == -2)
            return kiln__err(KILN_ERR_PARSE, "graph output '%s' is not produced by any node, input or initializer",
                             vi->name);
        if (v < 0)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        if (g->values[v].ndim < 0 && g->values[v].dtype == KILN_DT_UNDEFINED)
            set_type(&g->values[v], vi->type);
        else if (g->values[v].kind == KILN_VAL_TENSOR && vi->type &&
                 vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
            set_type(&g->values[v], vi->type);
        g->outputs[g->n_outputs++] = v;
    }
    return kiln__graph_toposort(g);
}

static kiln_status import_graph(import_ctx *ic, const Onnx__GraphProto *gp, kiln_graph *parent, int depth,
                                kiln_graph **out)
{
    *out = NULL;
    if (depth > MAX_GRAPH_DEPTH)
        return kiln__err(KILN_ERR_LIMIT, "subgraphs nested deeper than %d levels", MAX_GRAPH_DEPTH);
    kiln_graph *g = kiln__graph_new(parent);
    if (!g)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = import_graph_body(ic, gp, g, depth);
    if (st != KILN_OK) {
        kiln__graph_free(g);
        return st;
    }
    *out = g;
    return KILN_OK;
}

kiln_status kiln__onnx_import(const void *buf, size_t len, const char *base_dir, kiln_graph **out,
                              kiln_onnx_model_info *info)
{
    *out = NULL;
    KILN_TRY(kiln__onnx_wire_check(&onnx__model_proto__descriptor, buf, len, KILN_ONNX_MAX_MESSAGE_DEPTH,
                                   "ONNX model"));
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, buf);
    if (!mp)
        return kiln__err(KILN_ERR_PARSE, "not a valid ONNX model (protobuf decoding failed)");
    kiln_status st = check_opsets(mp);
    if (st != KILN_OK)
        goto done;
    if (!mp->graph) {
        st = kiln__err(KILN_ERR_PARSE, "ONNX model has no graph");
        goto done;
    }
    import_ctx ic = {.base_dir = base_dir, .opsets = (const Onnx__OperatorSetIdProto *const *)mp->opset_import,
                     .n_opsets = mp->n_opset_import};
    st = import_graph(&ic, mp->graph, NULL, 0, out);
    if (st != KILN_OK)
        goto done;
    kiln_graph *g = *out;
    g->opsets = kiln__calloc(mp->n_opset_import ? mp->n_opset_import : 1, sizeof(kiln_opset));
    if (!g->opsets) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        g->opsets[i].domain = kiln__strdup(mp->opset_import[i]->domain ? mp->opset_import[i]->domain : "");
        g->opsets[i].version = mp->opset_import[i]->version;
        g->n_opsets++;
    }
    if (info) {
        char prod[256];
        snprintf(prod, sizeof prod, "%s %s", mp->producer_name ? mp->producer_name : "",
                 mp->producer_version ? mp->producer_version : "");
        info->ir_version = mp->ir_version;
        info->producer = kiln__strdup(prod);
    }
done:
    if (st != KILN_OK && *out) {
        kiln__graph_free(*out);
        *out = NULL;
    }
    onnx__model_proto__free_unpacked(mp, NULL);
    return st;
}
