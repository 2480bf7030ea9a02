/* kiln bench: throughput and latency percentiles of an engine (or a model, built in memory). */
#include "cli.h"
#include "core/core.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *s, int n, double p)
{
    double r = p / 100.0 * (n - 1);
    int lo = (int)floor(r), hi = (int)ceil(r);
    return s[lo] + (s[hi] - s[lo]) * (r - lo);
}

int cmd_bench(int argc, char **argv)
{
    const char *path = NULL;
    cli_input_opts io = {0};
    int threads = 0, warmup = 5, iters = 0, rc = 1;
    double duration = 0;
    bool json = false;
    const char *fnames[64], *fpaths[64];
    io.file_names = fnames;
    io.file_paths = fpaths;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--shapes") && has)
            io.shapes = argv[++i];
        else if (!strcmp(a, "--batch") && has)
            io.batch = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && has)
            threads = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && has)
            warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--iterations") && has)
            iters = atoi(argv[++i]);
        else if (!strcmp(a, "--duration") && has)
            duration = atof(argv[++i]);
        else if (!strcmp(a, "--json"))
            json = true;
        else if (!strcmp(a, "--input") && has && io.n_files < 64) {
            char *spec = argv[++i], *eq = strchr(spec, '=');
            if (!eq) {
                fprintf(stderr, "kiln bench: --input expects NAME=FILE\n");
                return 2;
            }
            *eq = 0;
            fnames[io.n_files] = spec;
            fpaths[io.n_files++] = eq + 1;
        } else if (a[0] != '-' && !path)
            path = a;
        else {
            fprintf(stderr, "kiln bench: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!path || warmup < 0 || iters < 0 || duration < 0) {
        fprintf(stderr, "usage: kiln bench MODEL|ENGINE [--shapes NAME:DIMS,...] [--batch N] [--threads N] [--warmup N]\n"
                        "                  [--iterations N | --duration S] [--input NAME=FILE] [--json]\n");
        return 2;
    }
    if (!iters && !duration)
        iters = 50;
    kiln_engine_t e = NULL;
    kiln_context_t c = NULL;
    int nin = 0;
    kiln_tensor *ins = NULL;
    const char **names = NULL;
    double *lat = NULL;
    cli_catch_sigint();
    kiln_status st = cli_open_engine(path, &e);
    if (st != KILN_OK) {
        rc = cli_die(st, "loading");
        goto done;
    }
    nin = kiln_engine_num_inputs(e);
    ins = calloc((size_t)nin + 1, sizeof *ins);
    names = calloc((size_t)nin + 1, sizeof *names);
    if ((st = cli_make_inputs(e, &io, ins, names)) != KILN_OK || (st = kiln_context_create(e, &c)) != KILN_OK) {
        rc = cli_die(st, "preparing inputs");
        goto done;
    }
    kiln_context_set_threads(c, threads);
    for (int i = 0; i < nin; i++)
        if ((st = kiln_context_set_input(c, names[i], &ins[i])) != KILN_OK) {
            rc = cli_die(st, "binding input");
            goto done;
        }
    for (int i = 0; i < warmup + 1; i++)   /* the first run also plans memory */
        if ((st = kiln_context_run(c)) != KILN_OK || cli_interrupted()) {
            rc = cli_die(st, "running");
            goto done;
        }
    int cap = iters ? iters : 1024, n = 0;
    lat = malloc(sizeof(double) * (size_t)cap);
    double t_start = now_ms();
    for (;;) {
        if (iters && n >= iters)
            break;
        if (!iters && now_ms() - t_start >= duration * 1e3)
            break;
        if (n == cap) {
            cap *= 2;
            lat = realloc(lat, sizeof(double) * (size_t)cap);
        }
        double t0 = now_ms();
        if ((st = kiln_context_run(c)) != KILN_OK || cli_interrupted()) {
            rc = cli_die(st, "running");
            goto done;
        }
        lat[n++] = now_ms() - t0;
    }
    if (n == 0) {
        fprintf(stderr, "kiln bench: no iteration completed within --duration %g s\n", duration);
        goto done;
    }
    double total = now_ms() - t_start, sum = 0;
    for (int i = 0; i < n; i++)
        sum += lat[i];
    qsort(lat, (size_t)n, sizeof(double), cmp_d);
    int batch = nin && ins[0].ndim > 0 ? (int)ins[0].dims[0] : 1;
    double thr = n ? batch * n / (total / 1e3) : 0;
    int th = kiln__resolve_threads(threads);
    if (json) {
        printf("{\"throughput\": %.3f, \"latency_ms\": {\"mean\": %.4f, \"p50\": %.4f, \"p90\": %.4f, \"p99\": %.4f, "
               "\"min\": %.4f, \"max\": %.4f}, \"batch\": %d, \"iterations\": %d, \"precision\": \"fp32\", "
               "\"device\": \"cpu\", \"threads\": %d}\n",
               thr, sum / n, pct(lat, n, 50), pct(lat, n, 90), pct(lat, n, 99), lat[0], lat[n - 1], batch, n, th);
    } else {
        printf("model: %s\ndevice: cpu, threads: %d, precision: fp32, batch: %d\n", path, th, batch);
        printf("iterations: %d (after %d warm-up)\nthroughput: %.2f items/s\n", n, warmup, thr);
        printf("latency ms: mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  min %.3f  max %.3f\n", sum / n, pct(lat, n, 50),
               pct(lat, n, 90), pct(lat, n, 99), lat[0], lat[n - 1]);
    }
    rc = 0;
done:
    for (int i = 0; i < nin && ins; i++)
        kiln_free(ins[i].data);
    free(ins);
    free(names);
    free(lat);
    kiln_context_free(c);
    kiln_engine_free(e);
    return rc;
}
