/* kiln bench: throughput and latency percentiles of an engine (or a model, built in memory). */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln bench MODEL|ENGINE [--shapes NAME:DIMS,...] [--batch N] [--threads N] [--warmup N]\n"
    "                  [--iterations N | --duration S] [--input NAME=FILE] [--json] [--no-mmap]\n"
    "                  [--device cpu|cuda] [--tf32] [--strict-device]\n" CLI_DEVICE_USAGE;

/* Everything on kiln bench's command line. */
typedef struct bench_args {
    const char *path;
    cli_input_opts io;
    const char *fnames[64], *fpaths[64];
    kiln_shapes_t shapes;
    int threads, warmup;
    long long iters;
    double duration;
    bool json;
    cli_device_opts dev;
    unsigned load_flags;
} bench_args;

/* argv into b: 0 to go on, else the exit code (*done: --help answered). */
static int parse_bench_args(int argc, char **argv, bench_args *b, bool *done)
{
    b->io.file_names = b->fnames;
    b->io.file_paths = b->fpaths;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc, ok = true;
        int dr;
        if (cli_is_help(a)) {
            *done = true;
            return cli_help(usage);
        } else if (!strcmp(a, "--shapes") && has && !b->io.shapes)
            ok = cli_shapes_parse("--shapes", argv[++i], &b->shapes), b->io.shapes = b->shapes;
        else if (!strcmp(a, "--batch") && has)
            ok = cli_int_opt("--batch", argv[++i], 1, INT32_MAX, &b->io.batch);
        else if (!strcmp(a, "--threads") && has)
            ok = cli_int_opt("--threads", argv[++i], 0, CLI_MAX_THREADS, &b->threads);
        else if (!strcmp(a, "--warmup") && has)
            ok = cli_int_opt("--warmup", argv[++i], 0, 1000000000, &b->warmup);
        else if (!strcmp(a, "--iterations") && has)
            ok = cli_int_arg("--iterations", argv[++i], 1, (long long)1 << 50, &b->iters);
        else if (!strcmp(a, "--duration") && has)
            ok = cli_num_arg("--duration", argv[++i], 1e-6, 1e9, &b->duration);
        else if (!strcmp(a, "--json"))
            b->json = true;
        else if ((dr = cli_device_arg("bench", argc, argv, &i, &b->dev)) != 0)
            ok = dr > 0;
        else if (!strcmp(a, "--no-mmap"))
            b->load_flags = KILN_ENGINE_LOAD_COPY;
        else if (!strcmp(a, "--input") && has)
            ok = cli_input_arg("bench", argv[++i], &b->io, 64);
        else if (a[0] != '-' && !b->path)
            b->path = a;
        else {
            static const char *const value_opts[] = {"--shapes", "--batch", "--threads", "--warmup", "--iterations",
                                                     "--duration", "--device", "--input", NULL};
            return cli_bad_arg("bench", argc, argv, i, value_opts);
        }
        if (!ok)
            return 2;
    }
    if (b->iters && b->duration) {   /* say why, not only the usage */
        fprintf(stderr, "kiln bench: --iterations and --duration exclude each other (give one)\n");
        return 2;
    }
    if (!b->path) {
        fputs(usage, stderr);
        return 2;
    }
    if (!cli_device_flags_ok("bench", &b->dev))
        return 2;
    if (!b->iters && !b->duration)
        b->iters = 50;
    return 0;
}

/* The warm-up runs, then the timed ones into ls (and the device time of CUDA graph replays into
 * gs[0], its compute part without the input uploads into gs[1]): the exit code on failure, 0 when done
 * (*t_start: when timing began). */
static int timed_runs(kiln_context_t c, const bench_args *b, lat_stats *ls, lat_stats *gs, double *t_start)
{
    kiln_status st;
    /* --warmup 0: the first timed run is the context's first run (memory planning, CUDA tuning
     * included), so `--iterations 1 --warmup 0` measures exactly one inference */
    for (int i = 0; i < b->warmup; i++)
        if ((st = kiln_context_run(c)) != KILN_OK || cli_interrupted())
            return cli_die(st, "running");
    *t_start = cli_now_ms();
    for (;;) {
        if (b->iters && ls->n >= b->iters)
            break;
        if (!b->iters && cli_now_ms() - *t_start >= b->duration * 1e3)
            break;
        double t0 = cli_now_ms();
        if ((st = kiln_context_run(c)) != KILN_OK || cli_interrupted())
            return cli_die(st, "running");
        double dt = cli_now_ms() - t0;
        kiln_device_stats rs;
        bool gok = b->dev.device == KILN_DEVICE_CPU || kiln_context_device_stats(c, &rs) != KILN_OK || rs.graph_ms <= 0 ||
                   (lat_add(&gs[0], rs.graph_ms) && lat_add(&gs[1], rs.graph_compute_ms) &&
                    lat_add(&gs[2], rs.replay_host_ms[0]) && lat_add(&gs[3], rs.replay_host_ms[1]) &&
                    lat_add(&gs[4], rs.replay_host_ms[2]));
        if (!lat_add(ls, dt) || !gok) {
            fprintf(stderr, "kiln bench: out of memory recording latencies\n");
            return 1;
        }
    }
    return 0;
}

/* The results, as one JSON object (--json) or as text. */
static void print_results(const bench_args *b, kiln_engine_t e, kiln_context_t c, lat_stats *ls, lat_stats *gs, double total, int batch,
                          const kiln_device_stats *ds)
{
    int64_t n = ls->n;
    double sum = ls->sum, p50, p90, p99;
    lat_percentiles(ls, &p50, &p90, &p99);
    double g50 = 0, g90, g99, c50 = 0, c90, c99, h50[3] = {0}, h90, h99;
    if (gs[0].n) {
        lat_percentiles(&gs[0], &g50, &g90, &g99);
        lat_percentiles(&gs[1], &c50, &c90, &c99);
        for (int k = 0; k < 3; k++)
            lat_percentiles(&gs[2 + k], &h50[k], &h90, &h99);
    }
    double thr = n ? (double)batch * (double)n / (total / 1e3) : 0;
    int th = kiln_resolve_threads(b->threads);
    const char *dev = b->dev.device == KILN_DEVICE_CUDA ? "cuda" : "cpu";
    cli_precision pr;
    cli_precision_summary(e, c, b->dev.flags & KILN_DEVICE_ALLOW_TF32, &pr);
    const char *prec = pr.name;
    if (b->json) {
        printf("{\"throughput\": %.3f, \"latency_ms\": {\"mean\": %.4f, \"p50\": %.4f, \"p90\": %.4f, \"p99\": %.4f, "
               "\"min\": %.4f, \"max\": %.4f}, \"batch\": %d, \"iterations\": %lld, \"precision\": \"%s\", "
               "\"device\": \"%s\", \"threads\": %d, \"cpu_isa\": \"%s\"",
               thr, sum / (double)n, p50, p90, p99, ls->min, ls->max, batch, (long long)n, prec, dev, th,
               kiln_cpu_isa());
        if (b->dev.device != KILN_DEVICE_CPU)
            printf(", \"gpu\": \"%s\", \"device_layers\": %d, \"host_layers\": %d, \"fallback_layers\": %d, "
                   "\"fallback_ops\": \"%s\", \"graph_replays\": %ld, \"weight_bytes\": %llu, \"fp8\": "
                   "{\"fed_inputs\": %llu, \"quant_passes\": %llu, \"held_outputs\": %llu, \"gelu_tanh\": %llu}, "
                   "\"tactics\": {\"loaded\": %d, \"timed\": %d}, \"half_storage_layers\": %d",
                   cli_esc(ds->description), ds->device_layers, ds->host_layers, ds->fallback_layers,
                   cli_esc(ds->fallback_ops), ds->graph_replays, ds->weight_bytes, ds->fp8_fed_inputs,
                   ds->fp8_quant_passes, ds->fp8_held_outputs, ds->fp8_gelu_tanh, ds->tactics_loaded,
                   ds->tactics_timed, ds->half_storage_layers);
        if (gs[0].n) {   /* device time of the replays: kiln's work with the inputs already in pinned memory */
            printf(", \"graph_ms\": {\"p50\": %.4f, \"p90\": %.4f, \"n\": %lld}, \"device_throughput\": %.3f", g50, g90,
                   (long long)gs[0].n, g50 > 0 ? (double)batch * 1e3 / g50 : 0.0);
            printf(", \"compute_ms\": {\"p50\": %.4f, \"p90\": %.4f, \"n\": %lld}, \"compute_throughput\": %.3f", c50,
                   c90, (long long)gs[1].n, c50 > 0 ? (double)batch * 1e3 / c50 : 0.0);
            printf(", \"replay_host_ms\": {\"inputs\": %.4f, \"launch_wait\": %.4f, \"outputs\": %.4f}", h50[0], h50[1],
                   h50[2]);
        }
        printf(", \"layer_precisions\": {");
        for (int k = 0; k < pr.nkinds; k++)
            printf("%s\"%s\": %d", k ? ", " : "", cli_esc(pr.kinds[k].name), pr.kinds[k].layers);
        printf("}}\n");
        return;
    }
    printf("model: %s\ndevice: %s, threads: %d, precision: %s (layers: %s), batch: %d\ncpu: %s\n", cli_esc(b->path),
           dev, th, prec, cli_esc(pr.layers), batch, kiln_cpu_isa()[0] ? kiln_cpu_isa() : "portable kernels");
    if (b->dev.device != KILN_DEVICE_CPU)
        printf("gpu: %s\nlayers: %d on the device, %d on the host (shape arithmetic), %d fallen back to the CPU%s%s\n"
               "CUDA graph replays: %ld\nweights in device memory: %.1f MB\n"
               "kernel choices: %d from the engine's device tactics%s, %d timed here\n",
               cli_esc(ds->description), ds->device_layers, ds->host_layers, ds->fallback_layers,
               ds->fallback_layers ? ": " : "", cli_esc(ds->fallback_ops), ds->graph_replays,
               (double)ds->weight_bytes / 1e6, ds->tactics_loaded > 0 ? ds->tactics_loaded : 0,
               ds->tactics_loaded < 0 ? " (timed on other versions: not used)" : "", ds->tactics_timed);
    if (b->dev.device != KILN_DEVICE_CPU)
        cli_print_half_storage(ds->half_storage_layers, false);
    if (b->dev.device != KILN_DEVICE_CPU && (ds->fp8_fed_inputs || ds->fp8_quant_passes)) {
        printf("fp8 layers (last run): %llu inputs fed by their producers, %llu quantized in passes, %llu outputs held "
               "only in E4M3", ds->fp8_fed_inputs, ds->fp8_quant_passes, ds->fp8_held_outputs);
        if (ds->fp8_gelu_tanh)
            printf(" (%llu of them exact GELUs computed in cuBLASLt's tanh form: KILN_CUDA_FP8_LT_GELU=tanh keeps "
                   "them exact)", ds->fp8_gelu_tanh);
        printf("\n");
    }
    printf("iterations: %lld (after %d warm-up)\nthroughput: %.2f items/s\n", (long long)n, b->warmup, thr);
    printf("latency ms: mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  min %.3f  max %.3f\n", sum / (double)n, p50, p90, p99,
           ls->min, ls->max);
    if (gs[0].n) {
        printf("device time of the CUDA graph replays ms: p50 %.3f  p90 %.3f  (%lld replays; %.2f items/s)\n", g50,
               g90, (long long)gs[0].n, g50 > 0 ? (double)batch * 1e3 / g50 : 0.0);
        printf("GPU compute time (without the input uploads) ms: p50 %.3f  p90 %.3f  (%.2f items/s)\n", c50, c90,
               c50 > 0 ? (double)batch * 1e3 / c50 : 0.0);
        printf("host time of a replay ms (p50): inputs into pinned memory %.3f, launch + wait %.3f, outputs back %.3f\n",
               h50[0], h50[1], h50[2]);
    }
}

int cmd_bench(int argc, char **argv)
{
    bench_args b = {.warmup = 5, .dev = {KILN_DEVICE_CPU, 0}, .load_flags = KILN_ENGINE_LOAD_DEFAULT};
    bool done = false;
    int rc = parse_bench_args(argc, argv, &b, &done);
    if (done || rc) {
        kiln_shapes_free(b.shapes);
        return rc;
    }
    rc = 1;
    kiln_engine_t e = NULL;
    kiln_context_t c = NULL;
    int nin = 0;
    kiln_tensor *ins = NULL;
    const char **names = NULL;
    lat_stats ls = {.rng = 0x9E3779B97F4A7C15ull};
    lat_stats gs[5];   /* CUDA graph replays: device time, compute time, host inputs / wait / outputs */
    for (int k = 0; k < 5; k++)
        gs[k] = (lat_stats){.rng = 0x9E3779B97F4A7C15ull};
    cli_catch_sigint();
    kiln_status st = cli_open_engine_for(b.path, b.load_flags, b.dev.device, &e);
    if (st != KILN_OK) {
        rc = cli_die(st, "loading");
        goto done;
    }
    nin = kiln_engine_num_inputs(e);
    ins = calloc((size_t)nin + 1, sizeof *ins);
    names = calloc((size_t)nin + 1, sizeof *names);
    if (!ins || !names) {
        fprintf(stderr, "kiln bench: out of memory\n");
        goto done;
    }
    if ((rc = cli_make_inputs(e, &b.io, ins, names)) != 0)
        goto done;
    rc = 1;
    if ((st = kiln_context_create(e, &c)) != KILN_OK) {
        rc = cli_die(st, "preparing inputs");
        goto done;
    }
    kiln_context_set_threads(c, b.threads);
    if (b.dev.device != KILN_DEVICE_CPU && (st = kiln_context_set_device(c, b.dev.device, b.dev.flags)) != KILN_OK) {
        rc = cli_die(st, "opening the device");
        goto done;
    }
    for (int i = 0; i < nin; i++)
        if ((st = kiln_context_set_input(c, names[i], &ins[i])) != KILN_OK) {
            rc = cli_die(st, "binding input");
            goto done;
        }
    double t_start = 0;
    if ((rc = timed_runs(c, &b, &ls, gs, &t_start)) != 0)
        goto done;
    rc = 1;
    if (ls.n == 0) {
        fprintf(stderr, "kiln bench: no iteration completed within --duration %g s\n", b.duration);
        goto done;
    }
    double total = cli_now_ms() - t_start;
    kiln_device_stats ds;
    if ((st = kiln_context_device_stats(c, &ds)) != KILN_OK) {
        rc = cli_die(st, "reading device statistics");
        goto done;
    }
    print_results(&b, e, c, &ls, gs, total, nin && ins[0].ndim > 0 ? (int)ins[0].dims[0] : 1, &ds);
    rc = 0;
done:
    for (int i = 0; i < nin && ins; i++)
        kiln_free(ins[i].data);
    free(ins);
    free(names);
    lat_free(&ls);
    for (int k = 0; k < 5; k++)
        lat_free(&gs[k]);
    kiln_shapes_free(b.shapes);
    kiln_context_free(c);
    kiln_engine_free(e);
    return rc;
}
