/* kiln build: ONNX model -> optimized engine file (.kiln). */
#include "cli.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PROFILES 16
#define MAX_RANGES KILN_MAX_SHAPES

static const char usage[] =
    "usage: kiln build MODEL.onnx -o OUT.kiln [--passes-report] [--no-optimize] [--no-tactics]\n"
    "       [--shapes NAME:DIMS,...] [--min-shapes ... --opt-shapes ... --max-shapes ...]\n"
    "       [--timing-cache FILE] [--build-run-budget SECONDS (default 60)]\n"
    "       [--precision fp32|fp16|bf16|int8|fp8|nvfp4|mxfp4|int4|auto] [--layer-precision PATTERN:PREC ...] [--precision-fallback]\n"
    "       [--calib DIR] [--calib-method mse|percentile[:P]|entropy|minmax] [--calib-cache FILE]\n"
    "       [--calib-images DIR --preprocess SPEC]\n"
    "       [--allow fp16,bf16,int8] [--accuracy-budget METRIC] [--val DIR] [--auto-objective speed|size]\n"
    "       [--auto-probe-batches N] [--auto-max-batches N]\n"
    "       [--device cpu|cuda]\n"
    "       (repeat --min/--opt/--max-shapes or --shapes for more profiles)\n"
    "  --precision P          precision requested for every Conv, MatMul and Gemm with a constant\n"
    "                         weight (fp4 = nvfp4; int8, fp8, nvfp4, mxfp4 and int4 keep the first\n"
    "                         and last of them in fp32; int8 and fp8 need --calib or --calib-cache)\n"
    "  --layer-precision R    PATTERN:PREC, a glob on layer names and op types (repeatable, later\n"
    "                         rules win); a layer that cannot run as requested fails the build\n"
    "  --precision-fallback   build such layers in the precision they can run in, listing each\n"
    "  --calib DIR ...        calibration data for int8 / fp8 (as kiln calibrate; docs/CALIBRATION.md)\n"
    "  --calib-images DIR     PNG / JPEG calibration images, with --preprocess resize=HxW[,keep-ratio,pad]\n"
    "                         [,mean=V[,V,V]][,std=V[,V,V]][,bgr][,nhwc] (as kiln calibrate)\n"
    "  --precision auto       plan each layer's precision: lower the least sensitive layers whose kernels\n"
    "                         measured faster to the --allow precisions (default fp16,bf16,int8; any\n"
    "                         of those above) while the model meets --accuracy-budget (cosine>=0.99,\n"
    "                         snr>=30db, top1>=99%%, ...)\n"
    "                         against the float model on the data (--val DIR, else --calib DIR); exit 3\n"
    "                         when no plan meets it (docs/PRECISION.md)\n"
    "  --auto-objective size  lower every layer the budget allows, faster or not (default speed)\n"
    "  --auto-probe-batches N batches of data each per-layer probe runs (default 1); --auto-max-batches N\n"
    "                         batches the whole-model checks run (default 8)\n";

static void progress_line(const char *line, void *user)
{
    (void)user;
    fprintf(stderr, "\r\033[K%s", cli_esc(line));
}

/* "a,b,c" into at most cap strings (text is modified). */
static int split_list(char *text, const char **out, int cap)
{
    int n = 0;
    for (char *t = strtok(text, ","); t && n < cap; t = strtok(NULL, ","))
        out[n++] = t;
    return n;
}
    kiln_device device = KILN_DEVICE_CPU;

#define MAX_LAYER_RULES 256

/* Entry k of s: name and dims. */
static const char *entry(kiln_shapes_t s, int k, int *ndim, int64_t *dims)
{
    const char *name = NULL;
    kiln_shapes_get(s, k, &name, ndim, dims);
    return name;
}

/* Fills r from the min/opt/max sets of one profile for input k of `mins` (opts may be NULL: opt = max). */
static bool make_range(kiln_shapes_t mins, kiln_shapes_t opts, kiln_shapes_t maxs, int k, kiln_shape_range *r)
{
    int64_t dims[KILN_MAX_DIMS];
    memset(r, 0, sizeof *r);
    r->input = entry(mins, k, &r->ndim, r->min);
    int km = kiln_shapes_find(maxs, r->input), ko = opts ? kiln_shapes_find(opts, r->input) : -1, nd = -1;
    bool ok = km >= 0 && (!opts || ko >= 0);
    if (ok && (entry(maxs, km, &nd, r->max), nd != r->ndim))
        ok = false;
    if (ok && ko >= 0 && (entry(opts, ko, &nd, dims), nd != r->ndim))
        ok = false;
    if (!ok) {
        fprintf(stderr, "kiln build: input '%s' needs min, opt and max shapes of the same rank\n", cli_esc(r->input));
        return false;
    }
    for (int d = 0; d < r->ndim; d++)
        r->opt[d] = ko >= 0 ? dims[d] : r->max[d];
    return true;
}

int cmd_build(int argc, char **argv)
{
    const char *model_path = NULL, *out_path = NULL, *cache = NULL, *precision = NULL, *budget_text = NULL;
    const char *rules[MAX_LAYER_RULES], *allow[16], *val_dir = NULL;
    int nrules = 0, nallow = 0, objective = KILN_AUTO_SPEED, probe_batches = 0, max_batches = 0;
    kiln_calib_options calib = {.method = KILN_CALIB_MSE};   /* as kiln calibrate */
    cli_images im = {0};
    bool report = false, no_opt = false, no_tactics = false, fallback = false, use_calib = false;
    double budget = 0;
    kiln_shapes_t mins[MAX_PROFILES] = {0}, opts_[MAX_PROFILES] = {0}, maxs[MAX_PROFILES] = {0}, fixed[MAX_PROFILES] = {0};
    int nmin = 0, nopt = 0, nmax = 0, nfixed = 0, rc = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (cli_is_help(a)) {
            rc = cli_help(usage);
            goto done;
        } else if (!strcmp(a, "-o") && has)
            out_path = argv[++i];
        else if (!strcmp(a, "--passes-report"))
            report = true;
        else if (!strcmp(a, "--no-optimize"))
            no_opt = true;
        else if (!strcmp(a, "--no-tactics"))
            no_tactics = true;
        else if (!strcmp(a, "--timing-cache") && has)
            cache = argv[++i];
        else if (!strcmp(a, "--precision") && has)
            precision = argv[++i];
        else if (!strcmp(a, "--layer-precision") && has && nrules < MAX_LAYER_RULES)
            rules[nrules++] = argv[++i];
        else if (!strcmp(a, "--precision-fallback"))
            fallback = true;
        else if (!strcmp(a, "--allow") && has) {
            if ((nallow = split_list(argv[++i], allow, 16)) == 0) {
                fprintf(stderr, "kiln build: --allow needs a list of precisions (e.g. int8,fp16)\n");
                goto done;
            }
        } else if (!strcmp(a, "--accuracy-budget") && has)
            budget_text = argv[++i];
        else if (!strcmp(a, "--val") && has)
            val_dir = argv[++i];
        else if (!strcmp(a, "--auto-objective") && has) {
            const char *v = argv[++i];
            if (strcmp(v, "speed") && strcmp(v, "size")) {
                fprintf(stderr, "kiln build: --auto-objective '%s': want speed or size\n", cli_esc(v));
                goto done;
            }
            objective = strcmp(v, "size") ? KILN_AUTO_SPEED : KILN_AUTO_SIZE;
        } else if (!strcmp(a, "--auto-probe-batches") && has) {
            if (!cli_int_opt("--auto-probe-batches", argv[++i], 1, 1 << 16, &probe_batches))
                goto done;
        } else if (!strcmp(a, "--auto-max-batches") && has) {
            if (!cli_int_opt("--auto-max-batches", argv[++i], 1, 1 << 16, &max_batches))
                goto done;
        } else if (!strcmp(a, "--device") && has) {
            if (!kiln_device_parse(argv[++i], &device)) {
                fprintf(stderr, "kiln build: --device takes cpu or cuda, not '%s'\n", cli_esc(argv[i]));
                rc = 2;
                goto done;
            }
        }
        else if (cli_images_arg(&im, argc, argv, &i))
            use_calib = true;
        else if (!strcmp(a, "--calib") && has)
            calib.data_dir = argv[++i], use_calib = true;
        else if (!strcmp(a, "--calib-cache") && has)
            calib.cache_path = argv[++i], use_calib = true;
        else if (!strcmp(a, "--calib-method") && has) {
            if (kiln_calib_method_parse(argv[++i], &calib.method, &calib.param) != KILN_OK) {
                fprintf(stderr, "kiln build: %s\n", kiln_last_error());
                goto done;
            }
            use_calib = true;
        }
        else if (!strcmp(a, "--build-run-budget") && has) {
            if (!cli_num_arg("--build-run-budget", argv[++i], 1e-3, 1e9, &budget))
                goto done;
        }
        else if (!strcmp(a, "--min-shapes") && has && nmin < MAX_PROFILES) {
            if (!cli_shapes_parse("--min-shapes", argv[++i], &mins[nmin++]))
                goto done;
        } else if (!strcmp(a, "--opt-shapes") && has && nopt < MAX_PROFILES) {
            if (!cli_shapes_parse("--opt-shapes", argv[++i], &opts_[nopt++]))
                goto done;
        } else if (!strcmp(a, "--max-shapes") && has && nmax < MAX_PROFILES) {
            if (!cli_shapes_parse("--max-shapes", argv[++i], &maxs[nmax++]))
                goto done;
        } else if (!strcmp(a, "--shapes") && has && nfixed < MAX_PROFILES) {
            if (!cli_shapes_parse("--shapes", argv[++i], &fixed[nfixed++]))
                goto done;
        } else if (a[0] != '-' && !model_path)
            model_path = a;
        else {
            fprintf(stderr, "kiln build: unexpected argument '%s'\n", a);
            goto done;
        }
    }
    if (!model_path || !out_path) {
        fputs(usage, stderr);
        goto done;
    }
    bool is_auto = precision && !strcmp(precision, "auto");
    if (!is_auto && (budget_text || nallow || val_dir || objective != KILN_AUTO_SPEED || probe_batches || max_batches)) {
        fprintf(stderr, "kiln build: --allow, --accuracy-budget, --val and --auto-* go with --precision auto\n");
        goto done;
    }
    if (is_auto && !budget_text) {
        fprintf(stderr, "kiln build: --precision auto needs --accuracy-budget METRIC (e.g. cosine>=0.99)\n");
        goto done;
    }
    if (nmin != nmax || (nopt && nopt != nmin)) {
        fprintf(stderr, "kiln build: give --min-shapes and --max-shapes (and optionally --opt-shapes) the same number of times\n");
        goto done;
    }
    kiln_profile profiles[2 * MAX_PROFILES];
    kiln_shape_range ranges[2 * MAX_PROFILES][MAX_RANGES];
    int np = 0;
    for (int p = 0; p < nmin; p++, np++) {
        int n = kiln_shapes_count(mins[p]);
        if (n != kiln_shapes_count(maxs[p]) || (nopt && kiln_shapes_count(opts_[p]) != n)) {
            fprintf(stderr, "kiln build: profile %d: min/opt/max name different inputs\n", p);
            goto done;
        }
        for (int k = 0; k < n; k++)
            if (!make_range(mins[p], nopt ? opts_[p] : NULL, maxs[p], k, &ranges[np][k]))
                goto done;
        profiles[np] = (kiln_profile){n, ranges[np]};
    }
    for (int p = 0; p < nfixed; p++, np++) {
        int n = kiln_shapes_count(fixed[p]);
        for (int k = 0; k < n; k++) {
            kiln_shape_range *r = &ranges[np][k];
            memset(r, 0, sizeof *r);
            r->input = entry(fixed[p], k, &r->ndim, r->min);
            memcpy(r->opt, r->min, sizeof r->min);
            memcpy(r->max, r->min, sizeof r->min);
        }
        profiles[np] = (kiln_profile){n, ranges[np]};
    }
    /* the engine replaces -o atomically: it must not name the model or the timing cache (by any
     * spelling, hard link or symlink) */
    if (kiln_same_file(out_path, model_path) || (cache && (kiln_same_file(out_path, cache) || !strcmp(out_path, cache)))) {
        fprintf(stderr, "kiln build: -o '%s' names the %s; refusing to overwrite it\n", out_path,
                kiln_same_file(out_path, model_path) ? "input model" : "timing cache");
        goto done;
    }
    if (calib.cache_path && (kiln_same_file(out_path, calib.cache_path) || !strcmp(out_path, calib.cache_path))) {
        fprintf(stderr, "kiln build: -o '%s' names the calibration cache; refusing to overwrite it\n", out_path);
        goto done;
    }
    if (!cli_images_prepare("build", &im, &calib))
        goto done;
    kiln_model_t m = NULL;
    kiln_engine_t e = NULL;
    kiln_status st = kiln_model_load(model_path, &m);
    if (st != KILN_OK) {
        rc = cli_die(st, "loading model");
        goto done;
    }
    kiln_build_options bo = {.no_optimize = no_opt, .num_profiles = np, .profiles = profiles, .timing_cache = cache,
                             .want_report = true, .no_tactics = no_tactics, .run_budget_s = budget,
                             .precision = precision, .num_layer_precisions = nrules, .layer_precisions = rules,
                             .precision_fallback = fallback, .calib = use_calib ? &calib : NULL,
                             .accuracy_budget = budget_text, .num_allow = nallow, .allow = allow, .val_dir = val_dir,
                             .auto_objective = objective, .auto_probe_batches = probe_batches,
                             .auto_max_batches = max_batches, .device = device};
    bool tty = isatty(2);
    if (is_auto && tty)
        bo.auto_progress = progress_line;   /* progress on a terminal, quiet in pipes */
    st = kiln_build(m, &bo, &e);
    if (is_auto && tty)
        fprintf(stderr, "\r\033[K");
    kiln_model_free(m);
    cli_print_escaped_lines(bo.precision_report);   /* layers kept in fp32, fallbacks */
    kiln_free(bo.precision_report);
    if (st != KILN_OK) {
        rc = cli_die(st, "building engine");
        if (bo.budget_unmet)
            rc = 3;   /* as kiln verify: a budget violated */
        goto done;
    }
    if (is_auto)
        printf("auto: budget %s reached: %.6g; %d of %d layers lowered; estimated speed-up %.2fx (measured %.2fx)\n",
               cli_esc(budget_text), bo.auto_value, bo.auto_lowered, bo.auto_candidates, bo.auto_speedup_est,
               bo.auto_speedup);
    if (report && bo.report) {
        cli_print_escaped_lines(bo.report);
    } else if (bo.report && strstr(bo.report, "nodes:")) {
        char *line = strndup(strstr(bo.report, "nodes:"), strcspn(strstr(bo.report, "nodes:"), "\n"));
        printf("%s\n", line ? cli_esc(line) : "");
        free(line);
    }
    kiln_free(bo.report);
    st = kiln_engine_save(e, out_path);
    kiln_engine_free(e);
    if (st != KILN_OK) {
        rc = cli_die(st, "saving engine");
        goto done;
    }
    printf("engine written to %s\n", out_path);
    rc = 0;
done:
    cli_images_done(&im);
    for (int p = 0; p < MAX_PROFILES; p++) {
        kiln_shapes_free(mins[p]);
        kiln_shapes_free(opts_[p]);
        kiln_shapes_free(maxs[p]);
        kiln_shapes_free(fixed[p]);
    }
    return rc;
}
