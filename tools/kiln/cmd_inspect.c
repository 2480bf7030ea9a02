/* kiln inspect: per-layer view of an engine (fused nodes, precision, tactic, shapes, optional
 * measured time) and its memory plan; --json emits one object with a top-level "layers" array. */
#include "cli.h"
#include "engine/engine.h"
#include "runtime/model.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *precision_name(int p)
{
    static const char *const names[] = {"fp32", "tf32", "fp16", "bf16", "int8", "fp8", "fp4", "int4"};
    return p >= 0 && p < 8 ? names[p] : "?";
}

static void shape_text(const kiln_tensor *t, char *buf, size_t n)
{
    if (!t || t->dtype == KILN_DT_UNDEFINED) {
        snprintf(buf, n, "?");
        return;
    }
    kiln__shape_str(t, buf, n);
}

static json_t *shape_json(const kiln_tensor *t)
{
    json_t *o = json_object();
    if (!t || t->dtype == KILN_DT_UNDEFINED)
        return o;
    json_object_set_new(o, "dtype", json_string(kiln_dtype_name(t->dtype)));
    json_t *d = json_array();
    for (int k = 0; k < t->ndim; k++)
        json_array_append_new(d, json_integer(t->dims[k]));
    json_object_set_new(o, "shape", d);
    return o;
}

/* Shape of value v: recorded at run time, or the constant's own shape. */
static const kiln_tensor *value_shape(const kiln_graph *g, const kiln_tensor *meta, int v)
{
    if (v < 0)
        return NULL;
    if (g->values[v].init)
        return g->values[v].init;
    return meta && meta[v].dtype != KILN_DT_UNDEFINED ? &meta[v] : NULL;
}

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false, profile = false;
    int iters = 20, rc = 1;
    cli_input_opts io = {0};
    cli_shape_set shapes = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--profile"))
            profile = true;
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) {
            if (!cli_int_opt("--iterations", argv[++i], 1, 1000000000, &iters))
                goto bad_args;
        } else if (!strcmp(argv[i], "--shapes") && i + 1 < argc && !io.shapes) {
            if (!cli_shapes_parse("--shapes", argv[++i], &shapes))
                return 2;
            io.shapes = &shapes;
        } else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr, "usage: kiln inspect ENGINE|MODEL [--json] [--profile] [--iterations N] [--shapes NAME:DIMS,...]\n");
            goto bad_args;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: kiln inspect ENGINE|MODEL [--json] [--profile] [--iterations N] [--shapes NAME:DIMS,...]\n");
        goto bad_args;
    }
    kiln_engine_t e = NULL;
    kiln_context_t c = NULL;
    kiln_tensor *ins = NULL;
    const char **names = NULL;
    json_t *root = NULL;
    int nin = 0;
    kiln_status st = cli_open_engine(path, &e);
    if (st != KILN_OK) {
        rc = cli_die(st, "loading");
        goto done;
    }
    const kiln_graph *g = e->g;
    nin = g->n_inputs;
    ins = calloc((size_t)nin + 1, sizeof *ins);
    names = calloc((size_t)nin + 1, sizeof *names);
    if ((st = cli_make_inputs(e, &io, ins, names)) != KILN_OK || (st = kiln_context_create(e, &c)) != KILN_OK) {
        rc = cli_die(st, "preparing inputs");
        goto done;
    }
    kiln__context_replan_on_first_run(c);
    for (int i = 0; i < nin; i++)
        if ((st = kiln_context_set_input(c, names[i], &ins[i])) != KILN_OK) {
            rc = cli_die(st, "binding input");
            goto done;
        }
    if ((st = kiln_context_run(c)) != KILN_OK) {   /* records shapes, plans memory */
        rc = cli_die(st, "running");
        goto done;
    }
    if (profile) {
        kiln__context_enable_profiling(c);
        for (int k = 0; k < iters; k++)
            if ((st = kiln_context_run(c)) != KILN_OK) {
                rc = cli_die(st, "running");
                goto done;
            }
    }
    const double *ns = profile ? kiln__context_node_ns(c) : NULL;
    const kiln_tensor *meta = kiln__context_value_meta(c);
    double total = 0;
    for (int i = 0; ns && i < g->n_nodes; i++)
        total += ns[i];
    size_t arena = 0, naive = 0;
    kiln_context_memory(c, &arena, &naive);
    root = json_object();
    json_t *layers = json_array();
    if (!json)
        printf("%-4s %-28s %-22s %-5s %-9s %-34s %-24s %s\n", "#", "layer", "op", "prec", "tactic", "inputs", "outputs",
               profile ? "time ms (share)  fused from" : "fused from");
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        char insb[256] = "", outsb[256] = "", tmp[96];
        json_t *L = json_object(), *ji = json_array(), *jo = json_array();
        for (int k = 0; k < n->n_in; k++) {
            const kiln_tensor *t = value_shape(g, meta, n->in[k]);
            if (n->in[k] >= 0 && g->values[n->in[k]].init)
                continue;   /* weights are listed as part of the layer, not as activations */
            shape_text(t, tmp, sizeof tmp);
            snprintf(insb + strlen(insb), sizeof insb - strlen(insb), "%s%s", insb[0] ? " " : "", tmp);
            json_array_append_new(ji, shape_json(t));
        }
        for (int k = 0; k < n->n_out; k++) {
            const kiln_tensor *t = value_shape(g, meta, n->out[k]);
            shape_text(t, tmp, sizeof tmp);
            snprintf(outsb + strlen(outsb), sizeof outsb - strlen(outsb), "%s%s", outsb[0] ? " " : "", tmp);
            json_array_append_new(jo, shape_json(t));
        }
        char fused[512];
        snprintf(fused, sizeof fused, "%s%s%s", n->name[0] ? n->name : n->op_type, n->fused_from ? "," : "",
                 n->fused_from ? n->fused_from : "");
        json_object_set_new(L, "index", json_integer(i));
        json_object_set_new(L, "name", cli_json_str(n->name));
        json_object_set_new(L, "op", cli_json_str(n->op_type));
        json_object_set_new(L, "domain", cli_json_str(n->domain[0] ? n->domain : "ai.onnx"));
        json_t *jf = json_array();
        char *save = NULL, *dup = strdup(fused);
        for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            json_array_append_new(jf, cli_json_str(tok));
        free(dup);
        json_object_set_new(L, "fused_from", jf);
        json_object_set_new(L, "precision", json_string(precision_name(n->precision)));
        json_object_set_new(L, "tactic", cli_json_str(n->tactic ? n->tactic : "ref"));
        json_object_set_new(L, "inputs", ji);
        json_object_set_new(L, "outputs", jo);
        if (ns) {
            json_object_set_new(L, "time_ms", json_real(ns[i] / 1e6 / iters));
            json_object_set_new(L, "share", json_real(total > 0 ? ns[i] / total : 0));
        }
        json_array_append_new(layers, L);
        if (!json) {
            char t[48] = "";
            if (ns)
                snprintf(t, sizeof t, "%8.3f (%4.1f%%)  ", ns[i] / 1e6 / iters, total > 0 ? 100 * ns[i] / total : 0);
            printf("%-4d %-28.28s %-22.22s %-5s %-9s %-34.34s %-24.24s %s%s\n", i, n->name[0] ? cli_esc(n->name) : "-",
                   cli_esc(n->op_type), precision_name(n->precision), cli_esc(n->tactic ? n->tactic : "ref"), insb,
                   outsb, t, cli_esc(fused));
        }
    }
    json_object_set_new(root, "engine", cli_json_str(path));
    json_object_set_new(root, "layers", layers);
    json_t *mem = json_object();
    json_object_set_new(mem, "peak_activation_bytes", json_integer((json_int_t)arena));
    json_object_set_new(mem, "naive_activation_bytes", json_integer((json_int_t)naive));
    json_object_set_new(mem, "ratio", json_real(naive ? (double)arena / (double)naive : 0));
    json_object_set_new(root, "memory", mem);
    if (profile)
        json_object_set_new(root, "total_ms", json_real(total / 1e6 / iters));
    json_error_t jerr;
    json_t *man = e->manifest ? json_loads(e->manifest, 0, &jerr) : NULL;
    if (man)
        json_object_set_new(root, "manifest", man);
    if (json) {
        char *s = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
        printf("%s\n", s ? s : "{}");
        free(s);
    } else {
        printf("layers: %d\n", g->n_nodes);
        printf("activation memory: peak %.2f MB planned vs %.2f MB naive (%.1f%%)\n", arena / 1e6, naive / 1e6,
               naive ? 100.0 * (double)arena / (double)naive : 0);
        if (profile)
            printf("total: %.3f ms per run (%d runs)\n", total / 1e6 / iters, iters);
    }
    rc = 0;
done:
    cli_shapes_free(&shapes);
    json_decref(root);
    for (int i = 0; i < nin && ins; i++)
        kiln_free(ins[i].data);
    free(ins);
    free(names);
    kiln_context_free(c);
    kiln_engine_free(e);
    return rc;
bad_args:
    cli_shapes_free(&shapes);
    return 2;
}
