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
    "       [--device cpu|cuda] [--strict-device] [--float-activations fp16|bf16|fp32]\n"
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
    "                         snr>=30db, top1>=99%, ...)\n"
    "                         against the float model on the data (--val DIR, else --calib DIR); exit 3\n"
    "                         when no plan meets it (docs/PRECISION.md)\n"
    "  --device cuda          prepare the engine for the GPU (weights as the model has them); when a GPU is here,\n"
    "                         one run on it (first profile's min shapes) warns about layers without a CUDA kernel,\n"
    "                         runs at each profile's opt shapes and stores the kernel choices timed on the GPU\n"
    "                         in the engine (device tactics; KILN_CUDA_TIMING_CACHE=FILE reuses a file's)\n"
    "  --strict-device        such a layer (or no GPU to check on) fails the build; no engine is written\n"
    "  --float-activations F  with --device cuda: the float32 outputs of the INT8 layers are held in F (fp16 or\n"
    "                         bf16) on the GPU, so the float layers between INT8 layers run in half storage as\n"
    "                         in FP16 engines (TensorRT's --int8 --fp16); kiln inspect shows which (default fp32)\n"
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

/* Everything on kiln build's command line. */
typedef struct build_args {
    const char *model_path, *out_path, *cache, *precision, *budget_text, *val_dir;
    const char *rules[MAX_LAYER_RULES], *allow[16];
    int nrules, nallow, objective, probe_batches, max_batches;
    kiln_calib_options calib;
    cli_images im;
    bool report, no_opt, no_tactics, fallback, use_calib, strict_device;
    const char *calib_opt;   /* the first calibration option given (for the warning when nothing calibrates) */
    const char *float_act;   /* --float-activations */
    double budget;
    kiln_device device;
    kiln_shapes_t mins[MAX_PROFILES], opts[MAX_PROFILES], maxs[MAX_PROFILES], fixed[MAX_PROFILES];
    int nmin, nopt, nmax, nfixed;
} build_args;

/* The shape options: --min/--opt/--max-shapes and --shapes (1 consumed, 0 not one, -1 error). */
static int shapes_arg(build_args *b, int argc, char **argv, int *i)
{
    static const char *const names[] = {"--min-shapes", "--opt-shapes", "--max-shapes", "--shapes"};
    kiln_shapes_t *sets[] = {b->mins, b->opts, b->maxs, b->fixed};
    int *counts[] = {&b->nmin, &b->nopt, &b->nmax, &b->nfixed};
    if (*i + 1 >= argc)
        return 0;
    for (int k = 0; k < 4; k++)
        if (!strcmp(argv[*i], names[k]) && *counts[k] < MAX_PROFILES) {
            ++*i;
            return cli_shapes_parse(names[k], argv[*i], &sets[k][(*counts[k])++]) ? 1 : -1;
        }
    return 0;
}

/* The --precision auto options (1 consumed, 0 not one, -1 error). */
static int auto_arg(build_args *b, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (*i + 1 >= argc)
        return 0;
    if (!strcmp(a, "--allow")) {
        if ((b->nallow = split_list(argv[++*i], b->allow, 16)) == 0) {
            fprintf(stderr, "kiln build: --allow needs a list of precisions (e.g. int8,fp16)\n");
            return -1;
        }
    } else if (!strcmp(a, "--accuracy-budget"))
        b->budget_text = argv[++*i];
    else if (!strcmp(a, "--val"))
        b->val_dir = argv[++*i];
    else if (!strcmp(a, "--auto-objective")) {
        const char *v = argv[++*i];
        if (strcmp(v, "speed") && strcmp(v, "size")) {
            fprintf(stderr, "kiln build: --auto-objective '%s': want speed or size\n", cli_esc(v));
            return -1;
        }
        b->objective = strcmp(v, "size") ? KILN_AUTO_SPEED : KILN_AUTO_SIZE;
    } else if (!strcmp(a, "--auto-probe-batches")) {
        if (!cli_int_opt("--auto-probe-batches", argv[++*i], 1, 1 << 16, &b->probe_batches))
            return -1;
    } else if (!strcmp(a, "--auto-max-batches")) {
        if (!cli_int_opt("--auto-max-batches", argv[++*i], 1, 1 << 16, &b->max_batches))
            return -1;
    } else
        return 0;
    return 1;
}

/* Parses argv into b: 0 to go on, else the exit code: 2 for every usage error (bad, missing or conflicting
 * options), as the other commands (help printed: 0 through *done). */
static int parse_build_args(int argc, char **argv, build_args *b, bool *done)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        int r;
        if (cli_is_help(a)) {
            *done = true;
            return cli_help(usage);
        } else if (!strcmp(a, "-o") && has)
            b->out_path = argv[++i];
        else if (!strcmp(a, "--passes-report"))
            b->report = true;
        else if (!strcmp(a, "--no-optimize"))
            b->no_opt = true;
        else if (!strcmp(a, "--no-tactics"))
            b->no_tactics = true;
        else if (!strcmp(a, "--timing-cache") && has)
            b->cache = argv[++i];
        else if (!strcmp(a, "--precision") && has)
            b->precision = argv[++i];
        else if (!strcmp(a, "--layer-precision") && has && b->nrules < MAX_LAYER_RULES)
            b->rules[b->nrules++] = argv[++i];
        else if (!strcmp(a, "--precision-fallback"))
            b->fallback = true;
        else if ((r = auto_arg(b, argc, argv, &i)) != 0) {
            if (r < 0)
                return 2;
        } else if (!strcmp(a, "--strict-device")) {
            b->strict_device = true;
        } else if (!strcmp(a, "--float-activations") && has) {
            b->float_act = argv[++i];
            if (strcmp(b->float_act, "fp16") && strcmp(b->float_act, "bf16") && strcmp(b->float_act, "fp32")) {
                fprintf(stderr, "kiln build: --float-activations takes fp16, bf16 or fp32, not '%s'\n",
                        cli_esc(b->float_act));
                return 2;
            }
        } else if (!strcmp(a, "--device") && has) {
            if (!kiln_device_parse(argv[++i], &b->device)) {
                fprintf(stderr, "kiln build: --device takes cpu or cuda, not '%s'\n", cli_esc(argv[i]));
                return 2;
            }
        } else if ((r = cli_calib_arg("build", &b->calib, &b->im, argc, argv, &i)) != 0) {
            if (r < 0)
                return 2;
            b->use_calib = true;
            if (!b->calib_opt)
                b->calib_opt = a;
        } else if (!strcmp(a, "--build-run-budget") && has) {
            if (!cli_num_arg("--build-run-budget", argv[++i], 1e-3, 1e9, &b->budget))
                return 2;
        } else if ((r = shapes_arg(b, argc, argv, &i)) != 0) {
            if (r < 0)
                return 2;
        } else if (a[0] != '-' && !b->model_path)
            b->model_path = a;
        else {
            static const char *const value_opts[] = {
                "-o", "--timing-cache", "--precision", "--layer-precision", "--float-activations", "--device",
                "--build-run-budget", "--min-shapes", "--opt-shapes", "--max-shapes", "--shapes", "--allow",
                "--accuracy-budget", "--val", "--auto-objective", "--auto-probe-batches", "--auto-max-batches",
                CLI_CALIB_VALUE_OPTS, NULL};
            return cli_bad_arg("build", argc, argv, i, value_opts);
        }
    }
    if (!b->model_path || !b->out_path) {
        fputs(usage, stderr);
        return 2;
    }
    bool is_auto = b->precision && !strcmp(b->precision, "auto");
    if (!is_auto && (b->budget_text || b->nallow || b->val_dir || b->objective != KILN_AUTO_SPEED || b->probe_batches ||
                     b->max_batches)) {
        fprintf(stderr, "kiln build: --allow, --accuracy-budget, --val and --auto-* go with --precision auto\n");
        return 2;
    }
    if (is_auto && !b->budget_text) {
        fprintf(stderr, "kiln build: --precision auto needs --accuracy-budget METRIC (e.g. cosine>=0.99)\n");
        return 2;
    }
    if (b->nmin != b->nmax || (b->nopt && b->nopt != b->nmin)) {
        fprintf(stderr, "kiln build: give --min-shapes and --max-shapes (and optionally --opt-shapes) the same number of times\n");
        return 2;
    }
    return 0;
}

/* Whether the build calibrates: --precision int8 / fp8 / auto (whose planner may lower to int8 / fp8, and whose data
 * is --calib's when there is no --val), or a --layer-precision rule asking for int8 / fp8. */
static bool build_calibrates(const build_args *b)
{
    static const char *const calibrated[] = {"int8", "fp8", "auto"};
    for (int r = -1; r < b->nrules; r++) {
        const char *p = r < 0 ? b->precision : strrchr(b->rules[r], ':');
        if (!p)
            continue;
        p += r >= 0;   /* a rule's precision follows its last ':' */
        for (size_t k = 0; k < sizeof calibrated / sizeof calibrated[0]; k++)
            if (!strcmp(p, calibrated[k]))
                return true;
    }
    return false;
}

/* One profile per --min/--opt/--max-shapes set, then one fixed profile per --shapes. */
static bool make_profiles(const build_args *b, kiln_profile *profiles, kiln_shape_range (*ranges)[MAX_RANGES], int *np)
{
    *np = 0;
    for (int p = 0; p < b->nmin; p++, ++*np) {
        int n = kiln_shapes_count(b->mins[p]);
        if (n != kiln_shapes_count(b->maxs[p]) || (b->nopt && kiln_shapes_count(b->opts[p]) != n)) {
            fprintf(stderr, "kiln build: profile %d: min/opt/max name different inputs\n", p);
            return false;
        }
        for (int k = 0; k < n; k++)
            if (!make_range(b->mins[p], b->nopt ? b->opts[p] : NULL, b->maxs[p], k, &ranges[*np][k]))
                return false;
        profiles[*np] = (kiln_profile){n, ranges[*np]};
    }
    for (int p = 0; p < b->nfixed; p++, ++*np) {
        int n = kiln_shapes_count(b->fixed[p]);
        for (int k = 0; k < n; k++) {
            kiln_shape_range *r = &ranges[*np][k];
            memset(r, 0, sizeof *r);
            r->input = entry(b->fixed[p], k, &r->ndim, r->min);
            memcpy(r->opt, r->min, sizeof r->min);
            memcpy(r->max, r->min, sizeof r->min);
        }
        profiles[*np] = (kiln_profile){n, ranges[*np]};
    }
    return true;
}

/* The engine replaces -o atomically: it must not name the model, the timing cache or the
 * calibration cache (by any spelling, hard link or symlink). */
static bool out_path_ok(const build_args *b)
{
    const char *out = b->out_path;
    if (kiln_same_file(out, b->model_path) || (b->cache && (kiln_same_file(out, b->cache) || !strcmp(out, b->cache)))) {
        fprintf(stderr, "kiln build: -o '%s' names the %s; refusing to overwrite it\n", out,
                kiln_same_file(out, b->model_path) ? "input model" : "timing cache");
        return false;
    }
    const char *cc = b->calib.cache_path;
    if (cc && (kiln_same_file(out, cc) || !strcmp(out, cc))) {
        fprintf(stderr, "kiln build: -o '%s' names the calibration cache; refusing to overwrite it\n", out);
        return false;
    }
    return true;
}

/* What the build says on stdout: the auto plan's result and the passes report (or its summary). */
static void print_build_result(const build_args *b, const kiln_build_options *bo, bool is_auto)
{
    if (is_auto)
        printf("auto: budget %s reached: %.6g; %d of %d layers lowered; estimated speed-up %.2fx (measured %.2fx)\n",
               cli_esc(b->budget_text), bo->auto_value, bo->auto_lowered, bo->auto_candidates, bo->auto_speedup_est,
               bo->auto_speedup);
    if (b->report && bo->report) {
        cli_print_escaped_lines(bo->report);
    } else if (bo->report && strstr(bo->report, "nodes:")) {
        const char *nodes = strstr(bo->report, "nodes:");
        char *line = strndup(nodes, strcspn(nodes, "\n"));
        printf("%s\n", line ? cli_esc(line) : "");
        free(line);
    }
}

/* Load, build with the given profiles, save: the exit code. */
static int run_build(build_args *b, kiln_profile *profiles, int np)
{
    kiln_model_t m = NULL;
    kiln_engine_t e = NULL;
    kiln_status st = kiln_model_load(b->model_path, &m);
    if (st != KILN_OK)
        return cli_die(st, "loading model");
    bool is_auto = b->precision && !strcmp(b->precision, "auto");
    kiln_build_options bo = {.no_optimize = b->no_opt, .num_profiles = np, .profiles = profiles, .timing_cache = b->cache,
                             .want_report = true, .no_tactics = b->no_tactics, .run_budget_s = b->budget,
                             .precision = b->precision, .num_layer_precisions = b->nrules, .layer_precisions = b->rules,
                             .precision_fallback = b->fallback, .calib = b->use_calib ? &b->calib : NULL,
                             .accuracy_budget = b->budget_text, .num_allow = b->nallow, .allow = b->allow,
                             .val_dir = b->val_dir, .auto_objective = b->objective,
                             .auto_probe_batches = b->probe_batches, .auto_max_batches = b->max_batches,
                             .device = b->device, .float_activations = b->float_act};
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
        kiln_free(bo.report);
        int rc = cli_die(st, "building engine");
        return bo.budget_unmet ? 3 : rc;   /* 3 as kiln verify: a budget violated */
    }
    print_build_result(b, &bo, is_auto);
    kiln_free(bo.report);
    if (b->device == KILN_DEVICE_CUDA && cli_device_check(e, b->strict_device)) {
        kiln_engine_free(e);
        return 1;
    }
    st = kiln_engine_save(e, b->out_path);
    kiln_engine_free(e);
    if (st != KILN_OK)
        return cli_die(st, "saving engine");
    printf("engine written to %s\n", b->out_path);
    return 0;
}

int cmd_build(int argc, char **argv)
{
    build_args *b = calloc(1, sizeof *b);
    if (!b) {
        fprintf(stderr, "kiln build: out of memory\n");
        return 1;
    }
    b->objective = KILN_AUTO_SPEED;
    b->device = KILN_DEVICE_CPU;
    b->calib = (kiln_calib_options){.method = KILN_CALIB_MSE};   /* as kiln calibrate */
    bool done = false;
    int rc = parse_build_args(argc, argv, b, &done);
    if (!done && rc == 0 && b->strict_device && b->device != KILN_DEVICE_CUDA) {
        fprintf(stderr, "kiln build: --strict-device needs --device cuda\n");
        rc = 2;
    }
    if (!done && rc == 0 && b->float_act && strcmp(b->float_act, "fp32") && b->device != KILN_DEVICE_CUDA) {
        fprintf(stderr, "kiln build: --float-activations %s needs --device cuda (the CPU holds INT8 layers' float "
                "outputs in float32)\n", cli_esc(b->float_act));
        rc = 2;
    }
    /* the calibration options are used by int8 / fp8 / auto builds alone: an fp32 or fp16 build would ignore them
     * silently, which hides a forgotten --precision int8 */
    if (!done && rc == 0 && b->use_calib && !build_calibrates(b))
        fprintf(stderr, "kiln build: warning: %s has no effect without an int8, fp8 or auto precision (--precision or "
                "--layer-precision): nothing is calibrated\n", b->calib_opt);
    if (!done && rc == 0) {
        kiln_profile profiles[2 * MAX_PROFILES];
        kiln_shape_range ranges[2 * MAX_PROFILES][MAX_RANGES];
        int np = 0;
        rc = 2;   /* min/opt/max shapes that do not make a profile, -o naming an input: usage errors */
        if (make_profiles(b, profiles, ranges, &np) && out_path_ok(b))
            rc = cli_images_prepare("build", &b->im, &b->calib) ? run_build(b, profiles, np) : 1;
    }
    cli_images_done(&b->im);
    for (int p = 0; p < MAX_PROFILES; p++) {
        kiln_shapes_free(b->mins[p]);
        kiln_shapes_free(b->opts[p]);
        kiln_shapes_free(b->maxs[p]);
        kiln_shapes_free(b->fixed[p]);
    }
    free(b);
    return rc;
}
