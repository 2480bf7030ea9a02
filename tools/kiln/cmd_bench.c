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

static double pct(const double *s, int64_t n, double p)
{
    double r = p / 100.0 * (double)(n - 1);
    int64_t lo = (int64_t)floor(r), hi = (int64_t)ceil(r);
    return s[lo] + (s[hi] - s[lo]) * (r - (double)lo);
}

/* Latency statistics in bounded memory: count, sum, min and max are exact; percentiles come from
 * the first MAX_SAMPLES latencies, then from a uniform random sample of MAX_SAMPLES of all of them
 * (reservoir sampling), so they are exact up to MAX_SAMPLES iterations and estimates beyond. */
#define MAX_SAMPLES ((int64_t)1 << 20)
typedef struct {
    double *s, sum, min, max;
    int64_t n, kept, cap;
    uint64_t rng;
} lat_stats;

static bool lat_add(lat_stats *l, double v)
{
    l->sum += v;
    l->min = l->n == 0 || v < l->min ? v : l->min;
    l->max = l->n == 0 || v > l->max ? v : l->max;
    l->n++;
    if (l->kept < MAX_SAMPLES) {
        if (l->kept == l->cap) {
            int64_t cap = l->cap ? 2 * l->cap : 1024;
            double *p = realloc(l->s, sizeof(double) * (size_t)(cap < MAX_SAMPLES ? cap : MAX_SAMPLES));
            if (!p)
                return false;
            l->s = p;
            l->cap = cap < MAX_SAMPLES ? cap : MAX_SAMPLES;
        }
        l->s[l->kept++] = v;
        return true;
    }
    l->rng ^= l->rng << 13;
    l->rng ^= l->rng >> 7;
    l->rng ^= l->rng << 17;
    uint64_t j = l->rng % (uint64_t)l->n;   /* keep v with probability MAX_SAMPLES / n */
    if (j < (uint64_t)MAX_SAMPLES)
        l->s[j] = v;
    return true;
}

int cmd_bench(int argc, char **argv)
{
    const char *path = NULL;
    cli_input_opts io = {0};
    int threads = 0, warmup = 5, rc = 1;
    long long iters = 0;
    double duration = 0;
    bool json = false;
    const char *fnames[64], *fpaths[64];
    cli_shape_set shapes = {0};
    io.file_names = fnames;
    io.file_paths = fpaths;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc, ok = true;
        if (!strcmp(a, "--shapes") && has && !io.shapes)
            ok = cli_shapes_parse("--shapes", argv[++i], &shapes), io.shapes = &shapes;
        else if (!strcmp(a, "--batch") && has)
            ok = cli_int_opt("--batch", argv[++i], 1, INT32_MAX, &io.batch);
        else if (!strcmp(a, "--threads") && has)
            ok = cli_int_opt("--threads", argv[++i], 0, CLI_MAX_THREADS, &threads);
        else if (!strcmp(a, "--warmup") && has)
            ok = cli_int_opt("--warmup", argv[++i], 0, 1000000000, &warmup);
        else if (!strcmp(a, "--iterations") && has)
            ok = cli_int_arg("--iterations", argv[++i], 1, (long long)1 << 50, &iters);
        else if (!strcmp(a, "--duration") && has)
            ok = cli_num_arg("--duration", argv[++i], 1e-6, 1e9, &duration);
        else if (!strcmp(a, "--json"))
            json = true;
        else if (!strcmp(a, "--input") && has)
            ok = cli_input_arg("bench", argv[++i], &io, 64);
        else if (a[0] != '-' && !path)
            path = a;
        else {
            fprintf(stderr, "kiln bench: unexpected argument '%s'\n", a);
            return 2;
        }
        if (!ok) {
            cli_shapes_free(&shapes);
            return 2;
        }
    }
    if (!path || (iters && duration)) {
        fprintf(stderr, "usage: kiln bench MODEL|ENGINE [--shapes NAME:DIMS,...] [--batch N] [--threads N] [--warmup N]\n"
                        "                  [--iterations N | --duration S] [--input NAME=FILE] [--json]\n");
        cli_shapes_free(&shapes);
        return 2;
    }
    if (!iters && !duration)
        iters = 50;
    kiln_engine_t e = NULL;
    kiln_context_t c = NULL;
    int nin = 0;
    kiln_tensor *ins = NULL;
    const char **names = NULL;
    lat_stats ls = {.rng = 0x9E3779B97F4A7C15ull};
    kiln_status st = cli_open_engine(path, &e);
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
        if ((st = kiln_context_run(c)) != KILN_OK) {
            rc = cli_die(st, "running");
            goto done;
        }
    double t_start = now_ms();
    for (;;) {
        if (iters && ls.n >= iters)
            break;
        if (!iters && now_ms() - t_start >= duration * 1e3)
            break;
        double t0 = now_ms();
        if ((st = kiln_context_run(c)) != KILN_OK) {
            rc = cli_die(st, "running");
            goto done;
        }
        if (!lat_add(&ls, now_ms() - t0)) {
            fprintf(stderr, "kiln bench: out of memory recording latencies\n");
            goto done;
        }
    }
    double *lat = ls.s;
    int64_t n = ls.n, k = ls.kept;
    if (n == 0) {
        fprintf(stderr, "kiln bench: no iteration completed within --duration %g s\n", duration);
        goto done;
    }
    double total = now_ms() - t_start, sum = ls.sum;
    qsort(lat, (size_t)k, sizeof(double), cmp_d);
    int batch = nin && ins[0].ndim > 0 ? (int)ins[0].dims[0] : 1;
    double thr = (double)batch * (double)n / (total / 1e3);
    int th = threads > 0 ? threads : kiln__default_threads();
    if (json) {
        printf("{\"throughput\": %.3f, \"latency_ms\": {\"mean\": %.4f, \"p50\": %.4f, \"p90\": %.4f, \"p99\": %.4f, "
               "\"min\": %.4f, \"max\": %.4f}, \"batch\": %d, \"iterations\": %lld, \"precision\": \"fp32\", "
               "\"device\": \"cpu\", \"threads\": %d}\n",
               thr, sum / (double)n, pct(lat, k, 50), pct(lat, k, 90), pct(lat, k, 99), ls.min, ls.max, batch, (long long)n,
               th);
    } else {
        printf("model: %s\ndevice: cpu, threads: %d, precision: fp32, batch: %d\n", cli_esc(path), th, batch);
        printf("iterations: %lld (after %d warm-up)\nthroughput: %.2f items/s\n", (long long)n, warmup, thr);
        printf("latency ms: mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  min %.3f  max %.3f\n", sum / (double)n,
               pct(lat, k, 50), pct(lat, k, 90), pct(lat, k, 99), ls.min, ls.max);
    }
    rc = 0;
done:
    for (int i = 0; i < nin && ins; i++)
        kiln_free(ins[i].data);
    free(ins);
    free(names);
    free(ls.s);
    cli_shapes_free(&shapes);
    kiln_context_free(c);
    kiln_engine_free(e);
    return rc;
}
