/* kiln info: a model's interface, opsets, op histogram, parameter count, unsupported ops.
 * kiln ops: the operators kiln implements. */
#include "cli.h"
#include "runtime/exec.h"
#include "runtime/model.h"
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

int cmd_info(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: kiln info MODEL.onnx\n");
        return 2;
    }
    kiln_model_t m;
    kiln_status st = kiln_model_load(argv[1], &m);
    if (st != KILN_OK)
        return cli_die(st, "loading model");
    const kiln_graph *g = m->g;
    printf("model: %s\nproducer: %s\nir_version: %lld\nopsets:", cli_esc(argv[1]), cli_esc(m->info.producer),
           (long long)m->info.ir_version);
    for (int i = 0; i < g->n_opsets; i++)
        printf(" %s=%lld", cli_esc(g->opsets[i].domain[0] ? g->opsets[i].domain : "ai.onnx"), (long long)g->opsets[i].version);
    printf("\ninputs (%d):\n", g->n_inputs);
    for (int i = 0; i < g->n_inputs; i++)
        print_value(&g->values[g->inputs[i]]);
    printf("outputs (%d):\n", g->n_outputs);
    for (int i = 0; i < g->n_outputs; i++)
        print_value(&g->values[g->outputs[i]]);
    int64_t params = 0, bytes = 0, ninit = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].init) {
            params += kiln_tensor_numel(g->values[v].init);
            bytes += (int64_t)g->values[v].init->nbytes;
            ninit++;
        }
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
    kiln_model_free(m);
    return 0;
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
