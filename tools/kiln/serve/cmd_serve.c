/* kiln serve: a KServe v2 / Triton-compatible HTTP inference server (docs/SERVE.md). */
#include "serve.h"
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln serve --model-repository DIR [--http-port 8000] [--metrics-port P] [--device cpu|cuda]\n"
               "                  [--max-body-mb 64] [--threads N] [--http-threads N] [--drain-timeout S]\n"
               "  --http-port 0 picks a free port (printed as 'listening on port N')\n"
               "  --device cuda runs the instances of models whose instance_group kind is KIND_AUTO (or absent)\n"
               "  on the GPU (needs libkiln_cuda.so); KIND_GPU / KIND_CPU in config.pbtxt choose per model\n");
}

/* Strict integer option: the whole value must be a number in [lo, hi]. */
static bool opt_int(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (sv_parse_i64(v, lo, hi, out))
        return true;
    fprintf(stderr, "kiln serve: %s expects an integer in [%lld, %lld], got '%s'\n", name, (long long)lo, (long long)hi,
            v);
    return false;
}

int cmd_serve(int argc, char **argv)
{
    const char *repo_dir = NULL, *device = "cpu";
    int64_t port = 8000, metrics_port = -1, max_body_mb = 64, threads = 0, http_threads = 8, drain = 30;
    for (int i = 1; i < argc; i += 2) {   /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "kiln serve: '%s' %s\n", a, a[0] == '-' ? "needs a value" : "is not an option");
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--model-repository"))
            repo_dir = v;
        else if (!strcmp(a, "--device"))
            device = v;
        else if (!strcmp(a, "--http-port"))
            ok = opt_int(a, v, 0, 65535, &port);
        else if (!strcmp(a, "--metrics-port"))
            ok = opt_int(a, v, 0, 65535, &metrics_port);
        else if (!strcmp(a, "--max-body-mb"))
            ok = opt_int(a, v, 1, 4096, &max_body_mb);
        else if (!strcmp(a, "--threads"))
            ok = opt_int(a, v, 0, 1024, &threads);
        else if (!strcmp(a, "--http-threads"))
            ok = opt_int(a, v, 1, 256, &http_threads);
        else if (!strcmp(a, "--drain-timeout"))
            ok = opt_int(a, v, 0, 3600, &drain);
        else {
            fprintf(stderr, "kiln serve: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok)
            return 2;
    }
    if (!repo_dir) {
        usage(stderr);
        return 2;
    }
    kiln_device dev;
    if (!kiln_device_parse(device, &dev)) {
        fprintf(stderr, "kiln serve: --device %s: use cpu or cuda\n", device);
        return 2;
    }
    /* block the stop signals before any thread starts, then wait for them here */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[1024];
    sv_options o = {.threads = (int)threads, .max_body = max_body_mb << 20, .device = dev};
    sv_repo *repo = sv_repo_open(repo_dir, &o, err, sizeof err);
    if (!repo) {
        fprintf(stderr, "kiln serve: %s\n", err);
        return 1;
    }
    if (!sv_repo_load_all(repo))
        fprintf(stderr, "kiln serve: some models failed to load (see POST /v2/repository/index)\n");
    sv_server *s = sv_http_start(repo, (int)port, (int)metrics_port, (int)http_threads, o.max_body, err, sizeof err);
    if (!s) {
        fprintf(stderr, "kiln serve: %s\n", err);
        sv_repo_close(repo);
        return 1;
    }
    fprintf(stderr, "kiln serve: listening on port %d\n", sv_http_port(s));
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "kiln serve: %s: draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    sv_http_drain_and_stop(s, (int)drain);
    sv_repo_close(repo);
    fprintf(stderr, "kiln serve: stopped\n");
    return 0;
}
