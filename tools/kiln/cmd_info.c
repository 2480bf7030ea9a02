/* kiln info: a model's interface, opsets, op histogram, parameter count, unsupported ops, and
 * every value's inferred dtype and shape (symbolic, or concrete with --shapes).
 * kiln ops: the operators kiln implements. */
#include "cli.h"
#include "ir/shape.h"
#include "runtime/exec.h"
#include "runtime/model.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void print_value(const kiln_value *v)
{
    printf("  %-32s %-8s [", cli_esc(v->name), v->kind == KILN_VAL_TENSOR ? kiln_dtype_name(v->dtype) : "non-tensor");
    if (v->ndim < 0)
        printf("?");
    for (int d = 0; d < v->ndim; d++) {
        if (d)
            printf(", ");
        if (v->dims[d].param)
            printf("%s", cli_esc(v->dims[d].param));
        else if (v->dims[d].value >= 0)
            printf("%lld", (long long)v->dims[d].value);
        else
            printf("?");
    }
    printf("]\n");
}

typedef struct { const char *op; int count; } op_count;

static int by_count(const void *a, const void *b)
{
    const op_count *x = a, *y = b;
    return x->count != y->count ? y->count - x->count : strcmp(x->op, y->op);
}

static void histogram(const kiln_graph *g, op_count *h, int *nh, int cap)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        int k = 0;
        while (k < *nh && strcmp(h[k].op, n->op_type) != 0)
            k++;
        if (k == *nh && *nh < cap)
            h[(*nh)++] = (op_count){n->op_type, 0};
        if (k < *nh)
            h[k].count++;
        for (int a = 0; a < n->n_attr; a++)
            if (n->attrs[a].g)
                histogram(n->attrs[a].g, h, nh, cap);
    }
}

/* Inferred shapes of every value: graph inputs take --shapes dims where given (their declared
 * dims otherwise). *vs is indexed by value id. */
static kiln_status infer_values(const kiln_graph *g, const cli_shape_set *spec, kiln_symtab *st, kiln_vshape **vs)
{
    kiln_vshape *in = calloc((size_t)g->n_inputs + 1, sizeof *in);
    const kiln_vshape **pin = calloc((size_t)g->n_inputs + 1, sizeof *pin);
    kiln_status s = in && pin ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; s == KILN_OK && i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        const cli_shape *given = spec ? cli_shapes_find(spec, v->name) : NULL;
        int nd = given ? given->ndim : -1;
        const int64_t *dims = given ? given->dims : NULL;
        kiln__vshape_declared(st, v, &in[i]);
        pin[i] = &in[i];
        if (nd < 0)
            continue;
        if (v->ndim >= 0 && v->ndim != nd) {
            s = kiln__err(KILN_ERR_SHAPE, "--shapes gives input '%s' rank %d, the model declares rank %d", v->name, nd,
                          v->ndim);
            break;
        }
        in[i].rank = nd;
        for (int d = 0; d < nd; d++) {
            if (v->ndim >= 0 && v->dims[d].value >= 0 && !v->dims[d].param && v->dims[d].value != dims[d]) {
                s = kiln__err(KILN_ERR_SHAPE, "--shapes gives input '%s' dim %d = %lld, the model declares %lld",
                              v->name, d, (long long)dims[d], (long long)v->dims[d].value);
                break;
            }
            in[i].dims[d] = kiln__sd_const(st, dims[d]);
        }
    }
    for (int k = 0; spec && s == KILN_OK && k < spec->n; k++) {   /* every name in --shapes must be an input */
        bool found = false;
        for (int i = 0; i < g->n_inputs; i++)
            found |= !strcmp(g->values[g->inputs[i]].name, spec->v[k].name);
        if (!found)
            s = kiln__err(KILN_ERR_INVALID_ARG, "--shapes: the model has no input '%s'", spec->v[k].name);
    }
    if (s == KILN_OK)
        s = kiln__infer_shapes(g, st, pin, vs);
    free(in);
    free(pin);
    return s;
}

/* Value ids in listing order: graph inputs, node outputs (node order), graph outputs; each once. */
static int value_order(const kiln_graph *g, int *ids)
{
    int n = 0;
    bool *seen = calloc((size_t)g->n_values + 1, sizeof *seen);
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
    free(seen);
    return n;
}

static const char *dtype_str(const kiln_vshape *s)
{
    return s->kind != KILN_VAL_TENSOR ? "non-tensor" : s->dtype == KILN_DT_UNDEFINED ? "?" : kiln_dtype_name(s->dtype);
}

static json_t *dims_json(kiln_symtab *st, const kiln_vshape *s)
{
    if (s->kind != KILN_VAL_TENSOR || s->rank < 0)
        return json_null();
    json_t *a = json_array();
    for (int d = 0; d < s->rank; d++) {
        int64_t c;
        char buf[256];
        if (kiln__sd_is_const(st, s->dims[d], &c)) {
            json_array_append_new(a, json_integer(c));
        } else {
            kiln__sd_str(st, s->dims[d], buf, sizeof buf);
            json_array_append_new(a, cli_json_str(buf));
        }
    }
    return a;
}

static void print_shape(kiln_symtab *st, const kiln_vshape *s)
{
    if (s->kind != KILN_VAL_TENSOR || s->rank < 0) {
        printf("?");
        return;
    }
    printf("[");
    for (int d = 0; d < s->rank; d++) {
        char buf[256];
        kiln__sd_str(st, s->dims[d], buf, sizeof buf);
        printf("%s%s", d ? ", " : "", buf);
    }
    printf("]");
}

static int info_json(const char *path, const kiln_model_t m, const int *ids, int nids, kiln_symtab *st,
                     const kiln_vshape *vs, int64_t params)
{
    const kiln_graph *g = m->g;
    json_t *root = json_object(), *ops = json_object(), *vals = json_array();
    json_object_set_new(root, "model", cli_json_str(path));
    json_object_set_new(root, "producer", cli_json_str(m->info.producer));
    json_object_set_new(root, "ir_version", json_integer(m->info.ir_version));
    for (int i = 0; i < g->n_opsets; i++)
        json_object_set_new(ops, g->opsets[i].domain[0] ? g->opsets[i].domain : "ai.onnx",
                            json_integer(g->opsets[i].version));
    json_object_set_new(root, "opsets", ops);
    json_object_set_new(root, "nodes", json_integer(g->n_nodes));
    json_object_set_new(root, "parameters", json_integer(params));
    for (int k = 0; k < nids; k++) {
        json_t *v = json_object();
        json_object_set_new(v, "name", cli_json_str(g->values[ids[k]].name));
        json_object_set_new(v, "dtype", json_string(dtype_str(&vs[ids[k]])));
        json_object_set_new(v, "shape", dims_json(st, &vs[ids[k]]));
        json_array_append_new(vals, v);
    }
    json_object_set_new(root, "values", vals);
    char *txt = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(root);
    if (!txt)
        return cli_die(KILN_ERR_NOMEM, "writing JSON");
    printf("%s\n", txt);
    free(txt);
    return 0;
}

int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    cli_shape_set shapes = {0}, *spec = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc && !spec) {
            if (!cli_shapes_parse("--shapes", argv[++i], &shapes)) {
                cli_shapes_free(&shapes);
                return 2;
            }
            spec = &shapes;
        }
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            path = NULL, argc = 0;
    }
    if (!path) {
        fprintf(stderr, "usage: kiln info MODEL.onnx [--shapes NAME:DIMS,...] [--json]\n");
        cli_shapes_free(&shapes);
        return 2;
    }
    kiln_model_t m;
    kiln_status st = kiln_model_load(path, &m);
    if (st != KILN_OK) {
        cli_shapes_free(&shapes);
        return cli_die(st, "loading model");
    }
    const kiln_graph *g = m->g;
    kiln_symtab *sym = kiln__symtab_new();
    kiln_vshape *vs = NULL;
    int *ids = calloc((size_t)g->n_values + 1, sizeof *ids);
    st = sym && ids ? infer_values(g, spec, sym, &vs) : kiln__err(KILN_ERR_NOMEM, "out of memory");
    int nids = st == KILN_OK ? value_order(g, ids) : 0;
    if (nids < 0)
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
    int64_t params = 0, bytes = 0, ninit = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].init) {
            params += kiln_tensor_numel(g->values[v].init);
            bytes += (int64_t)g->values[v].init->nbytes;
            ninit++;
        }
    int rc = st != KILN_OK ? cli_die(st, "shape inference") : 0;
    if (st == KILN_OK && json) {
        rc = info_json(path, m, ids, nids, sym, vs, params);
    } else if (st == KILN_OK) {
        printf("model: %s\nproducer: %s\nir_version: %lld\nopsets:", cli_esc(path), cli_esc(m->info.producer),
               (long long)m->info.ir_version);
        for (int i = 0; i < g->n_opsets; i++)
            printf(" %s=%lld", cli_esc(g->opsets[i].domain[0] ? g->opsets[i].domain : "ai.onnx"),
                   (long long)g->opsets[i].version);
        printf("\ninputs (%d):\n", g->n_inputs);
        for (int i = 0; i < g->n_inputs; i++)
            print_value(&g->values[g->inputs[i]]);
        printf("outputs (%d):\n", g->n_outputs);
        for (int i = 0; i < g->n_outputs; i++)
            print_value(&g->values[g->outputs[i]]);
        printf("parameters: %lld in %lld initializers (%.2f MB)\n", (long long)params, (long long)ninit, bytes / 1e6);
        op_count h[512];
        int nh = 0;
        histogram(g, h, &nh, 512);
        qsort(h, (size_t)nh, sizeof h[0], by_count);
        printf("nodes: %d\nop histogram:\n", g->n_nodes);
        for (int i = 0; i < nh; i++)
            printf("  %-24s %d\n", cli_esc(h[i].op), h[i].count);
        char buf[4096] = "";
        int nu = kiln__list_unsupported(g, buf, sizeof buf);
        if (nu)
            printf("unsupported: %d node(s): %s\n", nu, cli_esc(buf));
        else
            printf("unsupported: none\n");
        printf("values (%d, inferred%s):\n", nids, spec ? " with --shapes" : "");
        for (int k = 0; k < nids; k++) {
            printf("  %-32s %-8s ", cli_esc(g->values[ids[k]].name), dtype_str(&vs[ids[k]]));
            print_shape(sym, &vs[ids[k]]);
            printf("\n");
        }
    }
    kiln__free(vs);
    free(ids);
    kiln__symtab_free(sym);
    cli_shapes_free(&shapes);
    kiln_model_free(m);
    return rc;
}

int cmd_ops(int argc, char **argv)
{
    int have = 0;
    for (int op = 0; op < KILN_OP_COUNT; op++) {
        bool k = kiln__ref_kernel((kiln_op)op) != NULL;
        have += k;
        if (argc < 2 || strcmp(argv[1], "--missing") != 0 || !k)
            printf("%-28s %s\n", kiln__op_name((kiln_op)op), k ? "ref" : "-");
    }
    printf("%d of %d registered ops have a kernel\n", have, KILN_OP_COUNT);
    return 0;
}
