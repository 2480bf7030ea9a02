/* kiln — command-line entry point; dispatches to one subcommand per file. */
#include "cli.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_calibrate(int argc, char **argv);   /* cmd_calibrate.c */
int cmd_verify(int argc, char **argv);      /* cmd_verify.c */
int cmd_debug(int argc, char **argv);       /* cmd_debug.c */

static void usage(FILE *f)
{
    fprintf(f,
            "kiln %s — ONNX inference optimizer and runtime\n\n"
            "usage: kiln <command> [options]      (kiln <command> --help: the usage of one command)\n\n"
            "commands:\n"
            "  run MODEL.onnx|M.kiln --input NAME=FILE.npy|.pb ... --output-dir DIR [--threads N]\n"
            "                      run a model, write DIR/<output>.npy for every output\n"
            "  build MODEL.onnx -o M.kiln [--passes-report] [--shapes ...|--min/opt/max-shapes ...]\n"
            "                      optimize a model into an engine file\n"
            "  bench MODEL|ENGINE [--shapes ...] [--batch N] [--threads N] [--warmup N]\n"
            "        [--iterations N | --duration S] [--input NAME=FILE] [--json]\n"
            "                      throughput and latency percentiles\n"
            "  calibrate MODEL.onnx --calib DIR [--calib-method entropy|minmax|percentile[:P]|mse]\n"
            "        [--calib-cache FILE] [--json]\n"
            "                      INT8 calibration: per-activation ranges and scales (docs/CALIBRATION.md)\n"
            "  verify ENGINE|MODEL --reference MODEL.onnx [--data DIR] [--budget METRIC] [--per-layer] [--json]\n"
            "                      accuracy against a float reference: per output error, cosine, SNR,\n"
            "                      top-1/5 agreement; exit 3 when a budget is violated (docs/VERIFY.md)\n"
            "  debug precision MODEL.onnx --precision int8 --budget METRIC [--calib DIR] [--json]\n"
            "                      the minimal set of layers that must stay in higher precision\n"
            "  inspect M.kiln [--json] [--profile] [--shapes ...]\n"
            "                      layers, fused nodes, precision, tactics, shapes, memory plan\n"
            "  info MODEL.onnx     inputs/outputs, opsets, op histogram, parameters, unsupported ops\n"
            "  conformance DIR...  run ONNX backend test directories (model.onnx + test_data_set_*)\n"
            "  ops                 list the operators kiln implements\n"
            "  serve --model-repository DIR [--http-port 8000] [--metrics-port P] ...\n"
            "                      KServe v2 / Triton-compatible HTTP server (docs/SERVE.md)\n"
            "  loadgen --url http://127.0.0.1:PORT -m MODEL [--concurrency 1,8,32 | --request-rate R] ...\n"
            "                      load generator for kiln serve (throughput, p50/p90/p95/p99)\n",
            KILN_VERSION_STRING);
}

/* `kiln serve|loadgen ...` runs kiln-serve (the program beside this one, else on the PATH) with
 * the same arguments, in this process (exec: same PID, signals and exit status). */
static int exec_serve(int argc, char **argv)
{
    char self[4096], path[4096 + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    const char *prog = "kiln-serve";
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, sizeof path, "%s/kiln-serve", self);
            if (access(path, X_OK) == 0)
                prog = path;
        }
    }
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) {
        fprintf(stderr, "kiln %s: out of memory\n", argv[1]);
        return 1;
    }
    args[0] = "kiln-serve";
    for (int i = 1; i < argc; i++)
        args[i] = argv[i];
    fflush(NULL);
    if (prog == path)
        execv(prog, args);
    else
        execvp(prog, args);
    fprintf(stderr, "kiln %s: cannot run %s: %s (it is built with kiln: make build)\n", argv[1], prog, strerror(errno));
    free(args);
    return 1;
}

/* The library's warnings (a layer kept on the CPU, device tactics not used, ...) on stderr; its errors come back as
 * statuses and the commands print them */
static void log_warnings(kiln_log_level lvl, const char *msg, void *user)
{
    (void)user;
    if (lvl == KILN_LOG_WARN)
        fprintf(stderr, "kiln: warning: %s\n", msg);
}

int main(int argc, char **argv)
{
    kiln_set_log_callback(log_warnings, NULL);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "run"))
        return cmd_run(argc - 1, argv + 1);
    if (!strcmp(c, "info"))
        return cmd_info(argc - 1, argv + 1);
    if (!strcmp(c, "conformance"))
        return cmd_conformance(argc - 1, argv + 1);
    if (!strcmp(c, "build"))
        return cmd_build(argc - 1, argv + 1);
    if (!strcmp(c, "bench"))
        return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(c, "calibrate"))
        return cmd_calibrate(argc - 1, argv + 1);
    if (!strcmp(c, "verify"))
        return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(c, "debug"))
        return cmd_debug(argc - 1, argv + 1);
    if (!strcmp(c, "inspect"))
        return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(c, "serve") || !strcmp(c, "loadgen"))
        return exec_serve(argc, argv);
    if (!strcmp(c, "ops"))
        return cmd_ops(argc - 1, argv + 1);
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c, "--version")) {
        printf("kiln %s\n", KILN_VERSION_STRING);
        return 0;
    }
    fprintf(stderr, "kiln: unknown command '%s'\n\n", c);
    usage(stderr);
    return 2;
}
