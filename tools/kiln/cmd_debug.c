/* kiln debug precision: which layers must stay in higher precision for a model lowered to
 * --precision to meet a budget (kiln_precision_debug; docs/PRECISION.md). Prints the minimal set
 * as ONNX node names and ready --layer-precision options; --json for tools (docs/CLI.md). */
#include "cli.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RULES 256

static const char usage[] =
    "usage: kiln debug precision MODEL.onnx --precision fp16|bf16|int8|fp8|... --budget METRIC [--keep fp32|fp16|bf16]\n"
    "       [--calib DIR | --calib-images DIR --preprocess SPEC] [--calib-method M] [--calib-cache FILE]\n"
    "       [--val DIR] [--shapes NAME:DIMS,...]\n"
    "       [--layer-precision PATTERN:PREC ...] [--probe-batches N] [--max-batches N]\n"
    "       [--build-run-budget SECONDS] [--json]\n\n"
    "Lowers every Conv / MatMul / Gemm with a constant weight to --precision and finds a minimal set of\n"
    "layers that must stay in --keep (default fp32) for the model to meet the budget against the float\n"
    "model on the data (--val DIR, else the calibration data): each layer's sensitivity is the metric\n"
    "when only it is lowered; the least sensitive are lowered first (bisection), then each remaining\n"
    "layer is tried once more. Prints the set as ONNX node names and a ready --layer-precision line.\n"
    "  --budget METRIC   cosine>=0.99 | snr>=30db | top1>=99% | maxrel<=1e-2 | ... (docs/VERIFY.md)\n"
    "  --layer-precision rules fix layers as in kiln build; those layers are not searched\n"
    "  --probe-batches N batches of data per single-layer probe (default 1); --max-batches N batches\n"
    "                    per whole-model check (default 8)\n"
    "Exit status: 0 a set was found, 3 the budget is missed even with every layer kept, 1 error, 2 usage.\n";

static void progress_line(const char *line, void *user)
{
    (void)user;
    fprintf(stderr, "\r\033[K%s", cli_esc(line));
}

static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* A shell word: single-quoted unless it is plain. */
static void print_shell_word(const char *w)
{
    if (w[0] && strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=,") == strlen(w)) {
        fputs(cli_esc(w), stdout);
        return;
    }
    putchar('\'');
    for (const char *p = w; *p; p++)
        fputs(*p == '\'' ? "'\\''" : (char[2]){*p, 0}, stdout);
    putchar('\'');
}

static int report(kiln_precision_debug_t r, const char *low, const char *keep, const char *budget, bool json)
{
    kiln_precision_debug_info in;
    kiln_precision_debug_info_get(r, &in);
    if (json) {
        json_t *root = json_object(), *layers = json_array(), *set = json_array(), *rules = json_array();
        json_object_set_new(root, "precision", json_string(low));
        json_object_set_new(root, "keep", json_string(keep));
        json_object_set_new(root, "budget", cli_json_str(budget));
        json_object_set_new(root, "metric", json_string(kiln_metric_name(in.budget.metric)));
        json_object_set_new(root, "met", json_boolean(in.met));
        json_object_set_new(root, "value_baseline", num(in.value_baseline));
        json_object_set_new(root, "value_lowered", num(in.value_lowered));
        json_object_set_new(root, "value_final", num(in.value_final));
        json_object_set_new(root, "builds", json_integer(in.builds));
        for (int i = 0; i < in.num_layers; i++) {
            kiln_precision_debug_layer L;
            kiln_precision_debug_layer_get(r, i, &L);
            json_t *o = json_object();
            json_object_set_new(o, "name", cli_json_str(L.name));
            json_object_set_new(o, "op", cli_json_str(L.op));
            json_object_set_new(o, "value_alone", num(L.value));
            json_object_set_new(o, "realizable", json_boolean(L.realizable));
            json_object_set_new(o, "keep", json_boolean(L.keep));
            json_array_append_new(layers, o);
            if (L.keep)
                json_array_append_new(set, cli_json_str(L.name));
            if (L.rule)
                json_array_append_new(rules, cli_json_str(L.rule));
        }
        json_object_set_new(root, "layers", layers);
        json_object_set_new(root, "keep_layers", set);
        json_object_set_new(root, "layer_precision", rules);
        int rc = json_dumpf(root, stdout, JSON_INDENT(2)) == 0 ? 0 : 1;
        printf("\n");
        json_decref(root);
        return rc ? rc : in.met ? 0 : 3;
    }
    const char *metric = kiln_metric_name(in.budget.metric);
    printf("budget %s: every layer in %s %.6g, every layer in %s %.6g\n", cli_esc(budget), keep, in.value_baseline, low,
           in.value_lowered);
    if (!in.met) {
        printf("FAIL: the budget is missed even with every layer in %s\n", keep);
        return 3;
    }
    printf("%d of %d layers must stay in %s (%s %.6g with them; %d engines measured):\n", in.num_keep, in.num_layers,
           keep, metric, in.value_final, in.builds);
    for (int i = 0; i < in.num_layers; i++) {
        kiln_precision_debug_layer L;
        kiln_precision_debug_layer_get(r, i, &L);
        if (!L.keep)
            continue;
        if (L.realizable)
            printf("  %s (%s): %s %.6g when only it is in %s\n", cli_esc(L.name), cli_esc(L.op), metric, L.value, low);
        else
            printf("  %s (%s): cannot run in %s\n", cli_esc(L.name), cli_esc(L.op), low);
    }
    printf("--precision %s", low);
    for (int i = 0; i < in.num_layers; i++) {
        kiln_precision_debug_layer L;
        kiln_precision_debug_layer_get(r, i, &L);
        if (L.rule) {
            fputs(" --layer-precision ", stdout);
            print_shell_word(L.rule);
        }
    }
    printf("\n");
    return 0;
}

static int debug_precision(int argc, char **argv)
{
    const char *model = NULL, *low = NULL, *keep = "fp32", *budget = NULL, *val = NULL, *rules[MAX_RULES];
    int nrules = 0, probe = 0, maxb = 0, rc = 2;
    double budget_s = 0;
    bool json = false, use_calib = false;
    kiln_calib_options calib = {.method = KILN_CALIB_MSE};   /* as kiln calibrate */
    kiln_shapes_t shapes = NULL;
    cli_images im = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        int ca;
        if (cli_is_help(a))
            return cli_help(usage);
        if (!strcmp(a, "--precision") && has)
            low = argv[++i];
        else if (!strcmp(a, "--keep") && has)
            keep = argv[++i];
        else if (!strcmp(a, "--budget") && has)
            budget = argv[++i];
        else if (!strcmp(a, "--val") && has)
            val = argv[++i];
        else if (!strcmp(a, "--json"))
            json = true;
        else if ((ca = cli_calib_arg("debug precision", &calib, &im, argc, argv, &i)) != 0) {
            if (ca < 0)
                goto done;
            use_calib = true;
        } else if (!strcmp(a, "--layer-precision") && has && nrules < MAX_RULES)
            rules[nrules++] = argv[++i];
        else if (!strcmp(a, "--probe-batches") && has) {
            if (!cli_int_opt("--probe-batches", argv[++i], 1, 1 << 16, &probe))
                goto done;
        } else if (!strcmp(a, "--max-batches") && has) {
            if (!cli_int_opt("--max-batches", argv[++i], 1, 1 << 16, &maxb))
                goto done;
        } else if (!strcmp(a, "--build-run-budget") && has) {
            if (!cli_num_arg("--build-run-budget", argv[++i], 1e-3, 1e9, &budget_s))
                goto done;
        } else if (!strcmp(a, "--shapes") && has && !shapes) {
            if (!cli_shapes_parse("--shapes", argv[++i], &shapes))
                goto done;
        } else if (a[0] != '-' && !model)
            model = a;
        else {
            static const char *const value_opts[] = {"--precision", "--keep", "--budget", "--val", "--layer-precision",
                                                     "--probe-batches", "--max-batches", "--build-run-budget",
                                                     "--shapes", CLI_CALIB_VALUE_OPTS, NULL};
            cli_bad_arg("debug precision", argc, argv, i, value_opts);
            goto done;
        }
    }
    if (!model || !low || !budget) {
        fprintf(stderr, "kiln debug precision: need MODEL, --precision and --budget\n%s", usage);
        goto done;
    }
    kiln_budget b;
    if (kiln_budget_parse(budget, &b) != KILN_OK) {
        fprintf(stderr, "kiln debug precision: --budget: %s\n", kiln_last_error());
        goto done;
    }
    /* fixed shapes as one profile (kiln build --shapes) */
    kiln_shape_range ranges[KILN_MAX_SHAPES];
    kiln_profile prof = {kiln_shapes_count(shapes), ranges};
    for (int k = 0; k < prof.num_ranges; k++) {
        kiln_shape_range *r = &ranges[k];
        memset(r, 0, sizeof *r);
        kiln_shapes_get(shapes, k, &r->input, &r->ndim, r->min);
        memcpy(r->opt, r->min, sizeof r->min);
        memcpy(r->max, r->min, sizeof r->min);
    }
    rc = 1;
    if (!cli_images_prepare("debug precision", &im, &calib))
        goto done;
    kiln_model_t m = NULL;
    kiln_status st = kiln_model_load(model, &m);
    if (st != KILN_OK) {
        rc = cli_die(st, "loading model");
        goto done;
    }
    cli_catch_sigint();
    kiln_build_options o = {.precision = low, .accuracy_budget = budget, .val_dir = val, .calib = use_calib ? &calib : NULL,
                            .num_layer_precisions = nrules, .layer_precisions = rules, .auto_probe_batches = probe,
                            .auto_max_batches = maxb, .run_budget_s = budget_s, .num_profiles = prof.num_ranges ? 1 : 0, .profiles = &prof};
    bool tty = isatty(2);
    if (tty)
        o.auto_progress = progress_line;
    kiln_precision_debug_t r = NULL;
    st = kiln_precision_debug(m, &o, keep, &r);
    if (tty)
        fprintf(stderr, "\r\033[K");
    if (st != KILN_OK)
        rc = cli_die(st, "debugging precision");
    else
        rc = report(r, low, keep, budget, json);
    kiln_precision_debug_free(r);
    kiln_model_free(m);
done:
    cli_images_done(&im);
    kiln_shapes_free(shapes);
    return rc;
}

int cmd_debug(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "precision"))
        return debug_precision(argc - 1, argv + 1);
    if (argc >= 2 && cli_is_help(argv[1]))
        return cli_help(usage);
    fprintf(stderr, "kiln debug: want a subcommand: precision\n%s", usage);
    return 2;
}
