/* kiln info: a model's interface, opsets, op histogram, parameter count, unsupported ops, and
 * every value's inferred dtype and shape (symbolic, or concrete with --shapes).
 * kiln ops: the operators kiln implements. */
#include "cli.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] = "usage: kiln info MODEL.onnx [--shapes NAME:DIMS,...] [--json]\n";

static const char *dtype_str(const kiln_type_info *t)
{
    return !t->is_tensor ? "non-tensor" : t->dtype == KILN_DT_UNDEFINED ? "?" : kiln_dtype_name(t->dtype);
}

/* Dim d as text: its size, else its name or expression, else "?". */
static const char *dim_str(const kiln_type_info *t, int d, char *buf, size_t n)
{
    if (t->dims[d] >= 0)
        snprintf(buf, n, "%lld", (long long)t->dims[d]);
    else
        snprintf(buf, n, "%s", t->dim_names[d] ? cli_esc(t->dim_names[d]) : "?");
    return buf;
}

static void print_shape(const kiln_type_info *t)
{
    if (!t->is_tensor || t->rank < 0) {
        printf("?");
        return;
    }
    printf("[");
    for (int d = 0; d < t->rank; d++) {
        char buf[512];
        printf("%s%s", d ? ", " : "", dim_str(t, d, buf, sizeof buf));
    }
    printf("]");
}

static void print_io(kiln_model_t m, kiln_io io, int n)
{
    printf("%s (%d):\n", io == KILN_IO_INPUT ? "inputs" : "outputs", n);
    for (int i = 0; i < n; i++) {
        kiln_type_info t;
        kiln_model_io_type(m, io, i, &t);
        const char *name = io == KILN_IO_INPUT ? kiln_model_input_name(m, i) : kiln_model_output_name(m, i);
        printf("  %-32s %-8s [", cli_esc(name), t.is_tensor ? kiln_dtype_name(t.dtype) : "non-tensor");
        if (t.rank < 0)
            printf("?");
        for (int d = 0; d < t.rank; d++) {   /* every declared dim, also past KILN_MAX_DIMS */
            int64_t size = -1;
            const char *dn = NULL;
            kiln_model_io_dim(m, io, i, d, &size, &dn);
            if (size >= 0)
                printf("%s%lld", d ? ", " : "", (long long)size);
            else
                printf("%s%s", d ? ", " : "", dn ? cli_esc(dn) : "?");
        }
        printf("]\n");
    }
}

static json_t *dims_json(const kiln_type_info *t)
{
    if (!t->is_tensor || t->rank < 0)
        return json_null();
    json_t *a = json_array();
    for (int d = 0; d < t->rank; d++)
        json_array_append_new(a, t->dims[d] >= 0 ? json_integer(t->dims[d]) : cli_json_str(t->dim_names[d]));
    return a;
}

static int info_json(const char *path, kiln_model_t m, kiln_value_shapes_t vs, int64_t params)
{
    json_t *root = json_object(), *ops = json_object(), *vals = json_array();
    json_object_set_new(root, "model", cli_json_str(path));
    json_object_set_new(root, "producer", cli_json_str(kiln_model_producer(m)));
    json_object_set_new(root, "ir_version", json_integer(kiln_model_ir_version(m)));
    for (int i = 0; i < kiln_model_num_opsets(m); i++) {
        const char *domain;
        int64_t version;
        kiln_model_opset(m, i, &domain, &version);
        json_object_set_new(ops, domain, json_integer(version));
    }
    json_object_set_new(root, "opsets", ops);
    json_object_set_new(root, "nodes", json_integer(kiln_model_num_nodes(m)));
    json_object_set_new(root, "parameters", json_integer(params));
    for (int k = 0; k < kiln_value_shapes_count(vs); k++) {
        const char *name;
        kiln_type_info t;
        kiln_value_shapes_get(vs, k, &name, &t);
        json_t *v = json_object();
        json_object_set_new(v, "name", cli_json_str(name));
        json_object_set_new(v, "dtype", json_string(dtype_str(&t)));
        json_object_set_new(v, "shape", dims_json(&t));
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

static int info_text(const char *path, kiln_model_t m, kiln_value_shapes_t vs, bool given)
{
    int64_t params = 0, bytes = 0, ninit = 0;
    kiln_model_parameters(m, &params, &bytes, &ninit);
    printf("model: %s\nproducer: %s\nir_version: %lld\nopsets:", cli_esc(path), cli_esc(kiln_model_producer(m)),
           (long long)kiln_model_ir_version(m));
    for (int i = 0; i < kiln_model_num_opsets(m); i++) {
        const char *domain;
        int64_t version;
        kiln_model_opset(m, i, &domain, &version);
        printf(" %s=%lld", cli_esc(domain), (long long)version);
    }
    printf("\n");
    print_io(m, KILN_IO_INPUT, kiln_model_num_inputs(m));
    print_io(m, KILN_IO_OUTPUT, kiln_model_num_outputs(m));
    printf("parameters: %lld in %lld initializers (%.2f MB)\n", (long long)params, (long long)ninit, bytes / 1e6);
    kiln_op_count *h = NULL;
    int nh = 0, nu = 0;
    char *unsup = NULL;
    kiln_status st = kiln_model_op_histogram(m, &nh, &h);
    if (st == KILN_OK)
        st = kiln_model_unsupported(m, &nu, &unsup);
    if (st != KILN_OK) {
        kiln_free(h);
        return cli_die(st, "model info");
    }
    printf("nodes: %d\nop histogram:\n", kiln_model_num_nodes(m));
    for (int i = 0; i < nh; i++)
        printf("  %-24s %d\n", cli_esc(h[i].op), h[i].count);
    if (nu)
        printf("unsupported: %d node(s): %s\n", nu, cli_esc(unsup));
    else
        printf("unsupported: none\n");
    int n = kiln_value_shapes_count(vs);
    printf("values (%d, inferred%s):\n", n, given ? " with --shapes" : "");
    for (int k = 0; k < n; k++) {
        const char *name;
        kiln_type_info t;
        kiln_value_shapes_get(vs, k, &name, &t);
        printf("  %-32s %-8s ", cli_esc(name), dtype_str(&t));
        print_shape(&t);
        printf("\n");
    }
    kiln_free(h);
    kiln_free(unsup);
    return 0;
}

int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    kiln_shapes_t spec = NULL;
    bool json = false, bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (cli_is_help(argv[i])) {
            kiln_shapes_free(spec);
            return cli_help(usage);
        } else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc && !spec) {
            if (!cli_shapes_parse("--shapes", argv[++i], &spec))
                return 2;
        } else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            bad = true;
    }
    if (!path || bad) {
        fputs(usage, stderr);
        kiln_shapes_free(spec);
        return 2;
    }
    kiln_model_t m;
    kiln_status st = kiln_model_load(path, &m);
    if (st != KILN_OK) {
        kiln_shapes_free(spec);
        return cli_die(st, "loading model");
    }
    kiln_value_shapes_t vs = NULL;
    int64_t params = 0;
    int rc;
    if ((st = kiln_model_infer_shapes(m, spec, &vs)) != KILN_OK)
        rc = cli_die(st, "shape inference");
    else if (json && (st = kiln_model_parameters(m, &params, NULL, NULL)) == KILN_OK)
        rc = info_json(path, m, vs, params);
    else
        rc = info_text(path, m, vs, spec != NULL);
    kiln_value_shapes_free(vs);
    kiln_shapes_free(spec);
    kiln_model_free(m);
    return rc;
}

int cmd_ops(int argc, char **argv)
{
    bool missing = false;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i]))
            return cli_help("usage: kiln ops [--missing]\n");
        if (!strcmp(argv[i], "--missing"))
            missing = true;
        else {
            fprintf(stderr, "usage: kiln ops [--missing]\n");
            return 2;
        }
    }
    int have = 0, n = kiln_num_ops();
    for (int op = 0; op < n; op++) {
        bool k = kiln_op_has_kernel(op);
        have += k;
        if (!missing || !k)
            printf("%-28s %s\n", kiln_op_name(op), k ? "ref" : "-");
    }
    printf("%d of %d registered ops have a kernel\n", have, n);
    return 0;
}
