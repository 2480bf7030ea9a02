/* kiln inspect: per-layer view of an engine (fused nodes, precision, tactic, shapes, optional
 * measured time, with --device where each layer ran) and its memory plan; --json emits one object with a
 * top-level "layers" array. */
#include "cli.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln inspect ENGINE|MODEL [--json] [--profile] [--iterations N] [--threads N] [--shapes NAME:DIMS,...]\n"
    "                    [--no-mmap] [--device cpu|cuda] [--tf32] [--strict-device]\n"
    "  runs the engine once on synthetic inputs (shapes, memory plan); --profile times each layer on the CPU\n"
    "  (on --threads threads, 0: one per CPU); with --device cuda a column says where each layer ran: gpu, host\n"
    "  (shape arithmetic) or cpu (no CUDA kernel: a counted fallback); per-layer GPU times:\n"
    "  KILN_CUDA_PROFILE=1 kiln bench ENGINE --device cuda (per op type; =layers: per layer too)\n"
    CLI_DEVICE_USAGE;

static const char *place_name(kiln_layer_place p)
{
    switch (p) {
    case KILN_PLACE_DEVICE: return "gpu";
    case KILN_PLACE_HOST: return "host";
    case KILN_PLACE_FALLBACK: return "cpu";
    default: return "-";
    }
}

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

static json_t *layer_json(int i, const kiln_layer_info *L, const char *req, const char *store, const char *fused,
                          json_t *ji, json_t *jo)
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
    json_object_set_new(o, "output_storage", store[0] ? json_string(store) : json_null());
    return o;
}

/* Prints (text) or collects (JSON) every layer; ms: per-layer times or NULL; dev: show where each ran. */
static json_t *layers(kiln_engine_t e, kiln_context_t c, const double *ms, double total, bool json, bool dev)
{
    json_t *arr = json_array();
    if (!json)
        printf("%-4s %-28s %-22s %-5s %-5s %-9s %s%-34s %-24s %s\n", "#", "layer", "op", "req", "prec", "tactic",
               dev ? "dev  " : "", "inputs", "outputs", ms ? "time ms (share)  fused from" : "fused from");
    for (int i = 0; i < kiln_engine_num_layers(e); i++) {
        kiln_layer_info L;
        const char *req = "", *store = "";
        kiln_engine_layer(e, i, &L);
        kiln_engine_layer_precision(e, i, &req, NULL);
        kiln_engine_layer_storage(e, i, &store);
        const char *held = "";   /* on a device: the storage its run realized (FP16 / BF16 / E4M3), not the plan */
        if (dev && kiln_context_layer_storage(c, i, &held) == KILN_OK)
            store = held;
        char insb[256] = "", outsb[256] = "", fused[512];
        json_t *ji = layer_shapes(c, i, KILN_IO_INPUT, L.num_inputs, insb, sizeof insb);
        json_t *jo = layer_shapes(c, i, KILN_IO_OUTPUT, L.num_outputs, outsb, sizeof outsb);
        if (store[0])   /* held on the GPU in that format */
            snprintf(outsb + strlen(outsb), sizeof outsb - strlen(outsb), " %s", store);
        snprintf(fused, sizeof fused, "%s%s%s", L.name[0] ? L.name : L.op, L.fused_from[0] ? "," : "", L.fused_from);
        json_t *o = layer_json(i, &L, req, store, fused, ji, jo);
        kiln_layer_place pl = KILN_PLACE_NONE;
        if (dev && kiln_context_layer_place(c, i, &pl) == KILN_OK)
            json_object_set_new(o, "device", pl == KILN_PLACE_NONE ? json_null() : json_string(place_name(pl)));
        if (ms) {
            json_object_set_new(o, "time_ms", json_real(ms[i]));
            json_object_set_new(o, "share", json_real(total > 0 ? ms[i] / total : 0));
        }
        json_array_append_new(arr, o);
        if (!json) {
            char t[48] = "";
            if (ms)
                snprintf(t, sizeof t, "%8.3f (%4.1f%%)  ", ms[i], total > 0 ? 100 * ms[i] / total : 0);
            char where[8] = "";
            if (dev)
                snprintf(where, sizeof where, "%-4s ", place_name(pl));
            printf("%-4d %-28.28s %-22.22s %-5s %-5s %-9s %s%-34s %-24s %s%s\n", i,
                   L.name[0] ? cli_esc(L.name) : "-", cli_esc(L.op), req[0] ? req : "-", L.precision, cli_esc(L.tactic),
                   where, insb, outsb, t, cli_esc(fused));
        }
    }
    return arr;
}

static int report(const char *path, kiln_engine_t e, kiln_context_t c, const double *ms, int iters, bool json,
                  kiln_device device)
{
    bool dev = device != KILN_DEVICE_CPU;
    double total = 0;
    for (int i = 0; ms && i < kiln_engine_num_layers(e); i++)
        total += ms[i];
    size_t arena = 0, naive = 0;
    kiln_context_memory(c, &arena, &naive);
    json_t *root = json_object(), *mem = json_object();
    json_object_set_new(root, "engine", cli_json_str(path));
    json_object_set_new(root, "layers", layers(e, c, ms, total, json, dev));
    kiln_device_stats ds;
    if (dev && kiln_context_device_stats(c, &ds) == KILN_OK) {
        json_t *jd = json_object();
        json_object_set_new(jd, "gpu", cli_json_str(ds.description));
        json_object_set_new(jd, "device_layers", json_integer(ds.device_layers));
        json_object_set_new(jd, "host_layers", json_integer(ds.host_layers));
        json_object_set_new(jd, "fallback_layers", json_integer(ds.fallback_layers));
        json_object_set_new(jd, "fallback_ops", cli_json_str(ds.fallback_ops));
        json_object_set_new(jd, "half_storage_layers", json_integer(ds.half_storage_layers));
        json_object_set_new(root, "device", jd);
        if (!json) {
            printf("gpu: %s\nlayers: %d on the device, %d on the host (shape arithmetic), %d fallen back to the "
                   "CPU%s%s\n", cli_esc(ds.description), ds.device_layers, ds.host_layers, ds.fallback_layers,
                   ds.fallback_layers ? ": " : "", cli_esc(ds.fallback_ops));
            cli_print_half_storage(ds.half_storage_layers, true);
        }
    }
    json_object_set_new(mem, "peak_activation_bytes", json_integer((json_int_t)arena));
    json_object_set_new(mem, "naive_activation_bytes", json_integer((json_int_t)naive));
    json_object_set_new(mem, "ratio", json_real(naive ? (double)arena / (double)naive : 0));
    json_object_set_new(root, "memory", mem);
    if (ms)
        json_object_set_new(root, "total_ms", json_real(total));
    char tsig[256];
    int ntac = kiln_engine_device_tactics(e, tsig, sizeof tsig);
    if (ntac > 0) {   /* kernel choices timed on a GPU at build time (docs/CUDA.md) */
        json_t *jt = json_object();
        json_object_set_new(jt, "choices", json_integer(ntac));
        json_object_set_new(jt, "timed_on", cli_json_str(tsig));
        json_object_set_new(root, "device_tactics", jt);
    }
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
        if (ntac > 0)
            printf("device tactics: %d kernel choice%s timed on %s\n", ntac, ntac == 1 ? "" : "s", cli_esc(tsig));
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
    int iters = 20, threads = 0, rc = 1, dr;
    cli_input_opts io = {0};
    cli_device_opts dev = {KILN_DEVICE_CPU, 0};
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
        } else if ((dr = cli_device_arg("inspect", argc, argv, &i, &dev)) != 0) {
            if (dr < 0)
                goto bad_args;
        } else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            static const char *const value_opts[] = {"--iterations", "--threads", "--shapes", "--device", NULL};
            cli_bad_arg("inspect", argc, argv, i, value_opts);
            goto bad_args;
        }
    }
    if (!path) {
        fputs(usage, stderr);
        goto bad_args;
    }
    if (!cli_device_flags_ok("inspect", &dev))
        goto bad_args;
    if (profile && dev.device != KILN_DEVICE_CPU) {
        fprintf(stderr, "kiln inspect: --profile times layers on the CPU; per-layer GPU times: KILN_CUDA_PROFILE=1 "
                        "kiln bench ENGINE --device cuda\n");
        goto bad_args;
    }
    kiln_engine_t e = NULL;
    kiln_context_t c = NULL;
    kiln_tensor *ins = NULL;
    const char **names = NULL;
    double *ms = NULL;
    int nin = 0;
    kiln_status st = cli_open_engine_for(path, load_flags, dev.device, &e);
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
    if ((rc = cli_make_inputs(e, &io, ins, names)) != 0)
        goto done;
    rc = 1;
    if ((st = kiln_context_create(e, &c)) != KILN_OK || (st = kiln_context_record_shapes(c)) != KILN_OK) {
        rc = cli_die(st, "preparing inputs");
        goto done;
    }
    kiln_context_set_threads(c, threads);
    if (dev.device != KILN_DEVICE_CPU && (st = kiln_context_set_device(c, dev.device, dev.flags)) != KILN_OK) {
        rc = cli_die(st, "opening the device");
        goto done;
    }
    for (int i = 0; i < nin; i++)
        if ((st = kiln_context_set_input(c, names[i], &ins[i])) != KILN_OK) {
            rc = cli_die(st, "binding input");
            goto done;
        }
    if ((st = kiln_context_run(c)) != KILN_OK || (profile && (st = kiln_context_profile(c, iters, ms)) != KILN_OK)) {
        rc = cli_die(st, "running");   /* the first run records shapes and plans memory */
        goto done;
    }
    rc = report(path, e, c, ms, iters, json, dev.device);
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
