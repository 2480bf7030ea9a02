/* kiln inspect: per-layer view of an engine (fused nodes, precision, tactic, shapes, optional
 * measured time) and its memory plan; --json emits one object with a top-level "layers" array. */
#include "cli.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln inspect ENGINE|MODEL [--json] [--profile] [--iterations N] [--threads N] [--shapes NAME:DIMS,...]\n"
    "                    [--no-mmap]\n";

static void shape_text(const kiln_type_info *t, char *buf, size_t n)
{
    if (t->dtype == KILN_DT_UNDEFINED) {
        snprintf(buf, n, "?");
        return;
    }
    size_t o = (size_t)snprintf(buf, n, "%s[", kiln_dtype_name(t->dtype));
    for (int d = 0; d < t->rank && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? "," : "", (long long)t->dims[d]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static json_t *shape_json(const kiln_type_info *t)
{
    json_t *o = json_object();
    if (t->dtype == KILN_DT_UNDEFINED)
        return o;
    json_object_set_new(o, "dtype", json_string(kiln_dtype_name(t->dtype)));
    json_t *d = json_array();
    for (int k = 0; k < t->rank; k++)
        json_array_append_new(d, json_integer(t->dims[k]));
    json_object_set_new(o, "shape", d);
    return o;
}

/* The activation shapes of one side of layer i, as text (space separated) and a JSON array;
 * weights are listed as part of the layer, not as activations. */
static json_t *layer_shapes(kiln_context_t c, int i, kiln_io io, int n, char *text, size_t cap)
{
    json_t *a = json_array();
    for (int k = 0; k < n; k++) {
        kiln_type_info t;
        bool weight = false;
        char tmp[96];
        if (kiln_context_layer_type(c, i, io, k, &t, &weight) != KILN_OK || weight)
            continue;
        shape_text(&t, tmp, sizeof tmp);
        snprintf(text + strlen(text), cap - strlen(text), "%s%s", text[0] ? " " : "", tmp);
        json_array_append_new(a, shape_json(&t));
    }
    return a;
}

static json_t *layer_json(int i, const kiln_layer_info *L, const char *req, const char *fused, json_t *ji, json_t *jo)
{
    json_t *o = json_object(), *jf = json_array();
    json_object_set_new(o, "index", json_integer(i));
    json_object_set_new(o, "name", cli_json_str(L->name));
    json_object_set_new(o, "op", cli_json_str(L->op));
    json_object_set_new(o, "domain", cli_json_str(L->domain));
    char *save = NULL, *dup = strdup(fused);
    for (char *tok = dup ? strtok_r(dup, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save))
        json_array_append_new(jf, cli_json_str(tok));
    free(dup);
    json_object_set_new(o, "fused_from", jf);
    json_object_set_new(o, "precision", json_string(L->precision));
    json_object_set_new(o, "requested_precision", req[0] ? json_string(req) : json_null());
    json_object_set_new(o, "tactic", cli_json_str(L->tactic));
    json_object_set_new(o, "inputs", ji);
    json_object_set_new(o, "outputs", jo);
    return o;
}

/* Prints (text) or collects (JSON) every layer; ms: per-layer times or NULL. */
static json_t *layers(kiln_engine_t e, kiln_context_t c, const double *ms, double total, bool json)
{
    json_t *arr = json_array();
    if (!json)
        printf("%-4s %-28s %-22s %-5s %-5s %-9s %-34s %-24s %s\n", "#", "layer", "op", "req", "prec", "tactic", "inputs", "outputs",
               ms ? "time ms (share)  fused from" : "fused from");
    for (int i = 0; i < kiln_engine_num_layers(e); i++) {
        kiln_layer_info L;
        const char *req = "";
        kiln_engine_layer(e, i, &L);
        kiln_engine_layer_precision(e, i, &req, NULL);
        char insb[256] = "", outsb[256] = "", fused[512];
        json_t *ji = layer_shapes(c, i, KILN_IO_INPUT, L.num_inputs, insb, sizeof insb);
        json_t *jo = layer_shapes(c, i, KILN_IO_OUTPUT, L.num_outputs, outsb, sizeof outsb);
        snprintf(fused, sizeof fused, "%s%s%s", L.name[0] ? L.name : L.op, L.fused_from[0] ? "," : "", L.fused_from);
        json_t *o = layer_json(i, &L, req, fused, ji, jo);
        if (ms) {
            json_object_set_new(o, "time_ms", json_real(ms[i]));
            json_object_set_new(o, "share", json_real(total > 0 ? ms[i] / total : 0));
        }
        json_array_append_new(arr, o);
        if (!json) {
            char t[48] = "";
            if (ms)
                snprintf(t, sizeof t, "%8.3f (%4.1f%%)  ", ms[i], total > 0 ? 100 * ms[i] / total : 0);
            printf("%-4d %-28.28s %-22.22s %-5s %-5s %-9s %-34.34s %-24.24s %s%s\n", i, L.name[0] ? cli_esc(L.name) : "-",
                   cli_esc(L.op), req[0] ? req : "-", L.precision, cli_esc(L.tactic), insb, outsb, t, cli_esc(fused));
        }
    }
    return arr;
}

static int report(const char *path, kiln_engine_t e, kiln_context_t c, const double *ms, int iters, bool json)
{
    double total = 0;
    for (int i = 0; ms && i < kiln_engine_num_layers(e); i++)
        total += ms[i];
    size_t arena = 0, naive = 0;
    kiln_context_memory(c, &arena, &naive);
    json_t *root = json_object(), *mem = json_object();
    json_object_set_new(root, "engine", cli_json_str(path));
    json_object_set_new(root, "layers", layers(e, c, ms, total, json));
    json_object_set_new(mem, "peak_activation_bytes", json_integer((json_int_t)arena));
    json_object_set_new(mem, "naive_activation_bytes", json_integer((json_int_t)naive));
    json_object_set_new(mem, "ratio", json_real(naive ? (double)arena / (double)naive : 0));
    json_object_set_new(root, "memory", mem);
    if (ms)
        json_object_set_new(root, "total_ms", json_real(total));
    json_error_t jerr;
    const char *manifest = kiln_engine_manifest(e);
    json_t *man = manifest ? json_loads(manifest, 0, &jerr) : NULL;
    if (man)
        json_object_set_new(root, "manifest", man);
    if (json) {
        char *s = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
        printf("%s\n", s ? s : "{}");
        free(s);
    } else {
        printf("layers: %d\n", kiln_engine_num_layers(e));
        printf("activation memory: peak %.2f MB planned vs %.2f MB naive (%.1f%%)\n", arena / 1e6, naive / 1e6,
               naive ? 100.0 * (double)arena / (double)naive : 0);
        if (ms)
            printf("total: %.3f ms per run (%d runs)\n", total, iters);
    }
    json_decref(root);
    return 0;
}

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false, profile = false;
    unsigned load_flags = KILN_ENGINE_LOAD_DEFAULT;
    int iters = 20, threads = 0, rc = 1;
    cli_input_opts io = {0};
    kiln_shapes_t shapes = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            kiln_shapes_free(shapes);
            return cli_help(usage);
        } else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--profile"))
            profile = true;
        else if (!strcmp(argv[i], "--no-mmap"))
            load_flags = KILN_ENGINE_LOAD_COPY;
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) {
            if (!cli_int_opt("--iterations", argv[++i], 1, 1000000000, &iters))
                goto bad_args;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!cli_int_opt("--threads", argv[++i], 0, CLI_MAX_THREADS, &threads))
                goto bad_args;
        } else if (!strcmp(argv[i], "--shapes") && i + 1 < argc && !io.shapes) {
            if (!cli_shapes_parse("--shapes", argv[++i], &shapes))
                return 2;
            io.shapes = shapes;
        } else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fputs(usage, stderr);
            goto bad_args;
        }
    }
    if (!path) {
        fputs(usage, stderr);
        goto bad_args;
    }
    kiln_engine_t e = NULL;
    kiln_context_t c = NULL;
    kiln_tensor *ins = NULL;
    const char **names = NULL;
    double *ms = NULL;
    int nin = 0;
    kiln_status st = cli_open_engine(path, load_flags, &e);
    if (st != KILN_OK) {
        rc = cli_die(st, "loading");
        goto done;
    }
    nin = kiln_engine_num_inputs(e);
    ins = calloc((size_t)nin + 1, sizeof *ins);
    names = calloc((size_t)nin + 1, sizeof *names);
    ms = profile ? calloc((size_t)kiln_engine_num_layers(e) + 1, sizeof *ms) : NULL;
    if (!ins || !names || (profile && !ms)) {
        fprintf(stderr, "kiln inspect: out of memory\n");
        goto done;
    }
    if (!cli_make_inputs(e, &io, ins, names))
        goto done;
    if ((st = kiln_context_create(e, &c)) != KILN_OK || (st = kiln_context_record_shapes(c)) != KILN_OK) {
        rc = cli_die(st, "preparing inputs");
        goto done;
    }
    kiln_context_set_threads(c, threads);
    for (int i = 0; i < nin; i++)
        if ((st = kiln_context_set_input(c, names[i], &ins[i])) != KILN_OK) {
            rc = cli_die(st, "binding input");
            goto done;
        }
    if ((st = kiln_context_run(c)) != KILN_OK || (profile && (st = kiln_context_profile(c, iters, ms)) != KILN_OK)) {
        rc = cli_die(st, "running");   /* the first run records shapes and plans memory */
        goto done;
    }
    rc = report(path, e, c, ms, iters, json);
done:
    kiln_shapes_free(shapes);
    for (int i = 0; i < nin && ins; i++)
        kiln_free(ins[i].data);
    free(ins);
    free(names);
    free(ms);
    kiln_context_free(c);
    kiln_engine_free(e);
    return rc;
bad_args:
    kiln_shapes_free(shapes);
    return 2;
}
