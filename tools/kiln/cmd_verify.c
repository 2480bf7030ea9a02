/* kiln verify: runs a candidate (engine file, or a model built in memory) and a float reference model
 * on the same inputs and compares every output (max abs/rel, mean abs, cosine, SNR, top-1/top-5
 * agreement), checks accuracy budgets (exit status 3 when one is violated), and with --per-layer
 * compares every intermediate value both have. Uses kiln.h only; metrics: docs/VERIFY.md. */
#include "verify.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BUDGETS 32
#define MAX_FILES 64

static const char *usage =
    "usage: kiln verify ENGINE|MODEL --reference MODEL.onnx [--data DIR [--batch N] | --input NAME=FILE ...\n"
    "                   | --shapes NAME:DIMS,... --seed S] [--samples N] [--budget METRIC ...]\n"
    "                   [--per-layer [--jump-db X]] [--json] [--threads N] [--no-mmap]\n"
    "                   [--device cpu|cuda] [--tf32] [--strict-device]\n\n"
    "Runs the candidate (an engine file, or a model optimized in memory) and the reference model\n"
    "(kiln's float interpreter, unoptimized) on the same inputs; per output prints the worst and\n"
    "mean over the samples of max abs / max rel / mean abs error, cosine similarity and SNR (dB),\n"
    "and top-1/top-5 agreement when the last dim has >= 2 classes.\n\n"
    "  --reference MODEL  the float reference (ONNX)\n"
    "  --data DIR         .npy files batched along axis 0: any *.npy for a one-input model,\n"
    "                     NAME_KEY.npy per input NAME for several; every file group is a sample\n"
    "  --batch N          cut data files into runs of N rows (each run is a sample)\n"
    "  --input NAME=FILE  a .npy/.pb input (one sample; other inputs synthetic)\n"
    "  --shapes S         input shapes for synthetic samples; --seed S their seed (default 1,\n"
    "                     sample k uses seed S+k)\n"
    "  --samples N        at most N samples (default: 4 synthetic, every data sample)\n"
    "  --budget METRIC    cosine>=0.999 | snr>=30db | top1>=99.5% | top5>=99% | maxrel<=1e-2 |\n"
    "                     maxabs<=X | meanabs<=X, checked on every output (repeatable)\n"
    "  --per-layer        also compare every intermediate value the candidate shares (by name)\n"
    "                     with the reference, on the first sample, marking where the error jumps\n"
    "                     (on --device cuda each value is copied back from the GPU after its layer)\n"
    "  --jump-db X        an SNR drop above X dB vs the previous value is a jump (default 10)\n"
    "  --json             machine-readable output (docs/CLI.md)\n"
    "The candidate runs on --device (the reference always on the CPU, in float32):\n" CLI_DEVICE_USAGE
    "Exit status: 0 within every budget, 3 a budget violated or a NaN/Inf output, 1 error, 2 usage.\n";

typedef struct vout {
    int cand, ref;                 /* output indices */
    kiln_compare_summary sum;
    kiln_tensor shape;             /* last sample's dtype and dims (no data) */
} vout;

typedef struct vargs {
    const char *cand, *ref;
    cli_input_opts io;
    const char *file_names[MAX_FILES], *file_paths[MAX_FILES];
    long long seed;
    int samples, batch, threads, nbudgets;
    const char *dir;
    kiln_budget budgets[MAX_BUDGETS];
    const char *budget_text[MAX_BUDGETS];
    bool per_layer, json;
    double jump_db;
    unsigned load_flags;
    cli_device_opts dev;
} vargs;

static int parse_args(int argc, char **argv, vargs *a)
{
    a->io.file_names = a->file_names;
    a->io.file_paths = a->file_paths;
    a->seed = 1;
    a->jump_db = 10;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        bool v = i + 1 < argc;
        int dr;
        if (cli_is_help(s))
            return cli_help(usage) - 1;   /* -1: done, exit 0 */
        if ((dr = cli_device_arg("verify", argc, argv, &i, &a->dev)) != 0) {
            if (dr < 0)
                return 2;
        } else if (!strcmp(s, "--json"))
            a->json = true;
        else if (!strcmp(s, "--per-layer"))
            a->per_layer = true;
        else if (!strcmp(s, "--no-mmap"))
            a->load_flags = KILN_ENGINE_LOAD_COPY;
        else if (!strcmp(s, "--reference") && v)
            a->ref = argv[++i];
        else if (!strcmp(s, "--data") && v)
            a->dir = argv[++i];
        else if (!strcmp(s, "--input") && v) {
            if (!cli_input_arg("verify", argv[++i], &a->io, MAX_FILES))
                return 2;
        } else if (!strcmp(s, "--shapes") && v) {
            if (a->io.shapes) {
                fprintf(stderr, "kiln verify: --shapes given twice\n");
                return 2;
            }
            if (!cli_shapes_parse("--shapes", argv[++i], &a->io.shapes))
                return 2;
        } else if (!strcmp(s, "--seed") && v) {
            if (!cli_int_arg("--seed", argv[++i], 0, (1LL << 62), &a->seed))
                return 2;
        } else if (!strcmp(s, "--samples") && v) {
            if (!cli_int_opt("--samples", argv[++i], 1, 1 << 24, &a->samples))
                return 2;
        } else if (!strcmp(s, "--batch") && v) {
            if (!cli_int_opt("--batch", argv[++i], 1, 1 << 24, &a->batch))
                return 2;
        } else if (!strcmp(s, "--threads") && v) {
            if (!cli_int_opt("--threads", argv[++i], 1, CLI_MAX_THREADS, &a->threads))
                return 2;
        } else if (!strcmp(s, "--jump-db") && v) {
            if (!cli_num_arg("--jump-db", argv[++i], 0, 1000, &a->jump_db))
                return 2;
        } else if (!strcmp(s, "--budget") && v) {
            if (a->nbudgets == MAX_BUDGETS) {
                fprintf(stderr, "kiln verify: at most %d --budget options\n", MAX_BUDGETS);
                return 2;
            }
            a->budget_text[a->nbudgets] = argv[++i];
            if (kiln_budget_parse(argv[i], &a->budgets[a->nbudgets]) != KILN_OK) {
                fprintf(stderr, "kiln verify: --budget: %s\n", kiln_last_error());
                return 2;
            }
            a->nbudgets++;
        } else if (s[0] == '-') {
            static const char *const value_opts[] = {"--reference", "--data", "--input", "--shapes", "--seed",
                                                     "--samples", "--batch", "--threads", "--jump-db", "--budget",
                                                     "--device", NULL};
            return cli_bad_arg("verify", argc, argv, i, value_opts);
        } else if (!a->cand) {
            a->cand = s;
        } else {
            fprintf(stderr, "kiln verify: more than one candidate given ('%s')\n", cli_esc(s));
            return 2;
        }
    }
    const char *why = !a->cand ? "need a candidate ENGINE or MODEL"
                      : !a->ref ? "need --reference MODEL.onnx"
                      : a->dir && (a->io.n_files || a->io.shapes) ? "--data excludes --input and --shapes"
                      : a->batch && !a->dir ? "--batch applies to --data only"
                      : NULL;
    if (why) {
        fprintf(stderr, "kiln verify: %s\n%s", why, usage);
        return 2;
    }
    if (!cli_device_flags_ok("verify", &a->dev))
        return 2;
    if (!a->samples)
        a->samples = a->dir ? 1 << 24 : a->io.n_files ? 1 : 4;
    return 0;
}

/* Pairs every candidate output with the reference output of the same name, else (same count) the
 * one at the same position. */
static bool match_outputs(kiln_engine_t e, kiln_model_t m, vout *outs, int n)
{
    int nr = kiln_model_num_outputs(m);
    for (int i = 0; i < n; i++) {
        outs[i].cand = i;
        outs[i].ref = -1;
        for (int j = 0; j < nr; j++)
            if (!strcmp(kiln_engine_output_name(e, i), kiln_model_output_name(m, j)))
                outs[i].ref = j;
        if (outs[i].ref < 0 && n == nr)
            outs[i].ref = i;
        if (outs[i].ref < 0) {
            fprintf(stderr, "kiln verify: the reference has no output '%s' (and %d outputs, the candidate %d)\n",
                    cli_esc(kiln_engine_output_name(e, i)), nr, n);
            return false;
        }
    }
    return true;
}

/* Runs both on one sample and adds each output's comparison. The candidate runs in context cc, the same for every
 * sample, as a serving context runs request after request: on cuda the third sample's run is captured as a CUDA
 * graph and later samples replay it, so verify checks replays too. Returns 0 or an exit status. */
static int run_sample(kiln_engine_t e, kiln_context_t cc, kiln_model_t m, const vargs *a, const char **names,
                      const kiln_tensor *ins, int nin, vout *outs, int nout)
{
    kiln_run_options ro = {.num_threads = a->threads};
    kiln_tensor *rf = NULL;
    int nr = 0, rc = 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < nin && st == KILN_OK; i++)
        st = kiln_context_set_input(cc, names[i], &ins[i]);
    if (st == KILN_OK)
        st = kiln_context_run(cc);
    if (st != KILN_OK)
        return cli_die(st, "running the candidate");
    if ((st = kiln_model_run(m, nin, names, ins, &ro, &nr, &rf)) != KILN_OK) {
        rc = cli_die(st, "running the reference");
        goto done;
    }
    for (int i = 0; i < nout; i++) {
        kiln_compare_stats cs;
        const kiln_tensor *c = kiln_context_output(cc, outs[i].cand), *r = &rf[outs[i].ref];
        if (!c) {
            fprintf(stderr, "kiln verify: the candidate produced no output '%s'\n",
                    cli_esc(kiln_engine_output_name(e, outs[i].cand)));
            rc = 1;
            goto done;
        }
        if ((st = kiln_compare(r, c, &cs)) != KILN_OK) {
            fprintf(stderr, "kiln verify: output '%s': %s\n", cli_esc(kiln_engine_output_name(e, outs[i].cand)),
                    kiln_last_error());
            rc = 1;
            goto done;
        }
        kiln_compare_summary_add(&outs[i].sum, &cs);
        outs[i].shape = *c;
        outs[i].shape.data = NULL;
    }
done:
    kiln_tensors_free(rf, nr);
    return rc;
}

static const char *dims_str(const kiln_tensor *t)
{
    static char buf[8 * 24];
    return t->ndim ? cli_dims_text(t->ndim, t->dims, buf, sizeof buf) : "scalar";
}

/* v as "%.*g" (fixed: "%.*f"), or "n/a" when it is NaN (a metric over no compared element) */
static const char *metric_text(char *buf, size_t n, double v, int prec, bool fixed)
{
    if (isnan(v))
        snprintf(buf, n, "n/a");
    else
        snprintf(buf, n, fixed ? "%.*f" : "%.*g", prec, v);
    return buf;
}

static void metric_row(const char *name, double worst, double mean, int prec, bool fixed)
{
    char a[64], b[64];
    printf("  %-10s %14s %14s\n", name, metric_text(a, sizeof a, worst, prec, fixed),
           metric_text(b, sizeof b, mean, prec, fixed));
}

static void print_output(kiln_engine_t e, const vout *o)
{
    const kiln_compare_summary *s = &o->sum;
    printf("output '%s' [%s]: %d sample%s\n", cli_esc(kiln_engine_output_name(e, o->cand)), dims_str(&o->shape),
           s->samples, s->samples == 1 ? "" : "s");
    printf("  %-10s %14s %14s\n", "metric", "worst", "mean");
    metric_row("max_abs", s->worst.max_abs, s->mean_max_abs, 6, false);
    metric_row("max_rel", s->worst.max_rel, s->mean_max_rel, 6, false);
    metric_row("mean_abs", s->worst.mean_abs, s->mean_mean_abs, 6, false);
    metric_row("cosine", s->worst.cosine, s->mean_cosine, 9, true);
    metric_row("snr_db", s->worst.snr_db, s->mean_snr_db, 2, true);
    if (s->worst.count == 0)
        printf("  (n/a: no element where both are finite)\n");
    if (s->rows)
        printf("  top1 agreement %.4f%% (%lld/%lld rows), top5 %.4f%%\n", 100.0 * (double)s->top1_agree / (double)s->rows,
               (long long)s->top1_agree, (long long)s->rows, 100.0 * (double)s->top5_agree / (double)s->rows);
    if (s->nonfinite)
        printf("  NaN/Inf: %lld elements\n", (long long)s->nonfinite);
}

static json_t *json_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *output_json(kiln_engine_t e, kiln_model_t m, const vout *o)
{
    const kiln_compare_summary *s = &o->sum;
    json_t *j = json_object(), *shape = json_array(), *w = json_object(), *mean = json_object();
    json_object_set_new(j, "name", cli_json_str(kiln_engine_output_name(e, o->cand)));
    json_object_set_new(j, "reference_name", cli_json_str(kiln_model_output_name(m, o->ref)));
    for (int d = 0; d < o->shape.ndim; d++)
        json_array_append_new(shape, json_integer(o->shape.dims[d]));
    json_object_set_new(j, "shape", shape);
    json_object_set_new(j, "samples", json_integer(s->samples));
    json_object_set_new(w, "max_abs", json_num(s->worst.max_abs));
    json_object_set_new(w, "max_rel", json_num(s->worst.max_rel));
    json_object_set_new(w, "mean_abs", json_num(s->worst.mean_abs));
    json_object_set_new(w, "cosine", json_num(s->worst.cosine));
    json_object_set_new(w, "snr_db", json_num(s->worst.snr_db));
    json_object_set_new(mean, "max_abs", json_num(s->mean_max_abs));
    json_object_set_new(mean, "max_rel", json_num(s->mean_max_rel));
    json_object_set_new(mean, "mean_abs", json_num(s->mean_mean_abs));
    json_object_set_new(mean, "cosine", json_num(s->mean_cosine));
    json_object_set_new(mean, "snr_db", json_num(s->mean_snr_db));
    json_object_set_new(j, "worst", w);
    json_object_set_new(j, "mean", mean);
    json_object_set_new(j, "rows", json_integer(s->rows));
    json_object_set_new(j, "top1", s->rows ? json_real((double)s->top1_agree / (double)s->rows) : json_null());
    json_object_set_new(j, "top5", s->rows ? json_real((double)s->top5_agree / (double)s->rows) : json_null());
    json_object_set_new(j, "nonfinite", json_integer(s->nonfinite));
    return j;
}

/* Checks every budget on every output; prints (or records) each check. Returns the violations. */
static int check_budgets(kiln_engine_t e, const vargs *a, const vout *outs, int nout, json_t *jb)
{
    int bad = 0;
    for (int i = 0; i < nout; i++) {
        if (outs[i].sum.nonfinite) {
            bad++;
            if (!a->json)
                printf("FAIL output '%s': %lld NaN/Inf elements\n", cli_esc(kiln_engine_output_name(e, outs[i].cand)),
                       (long long)outs[i].sum.nonfinite);
        }
        for (int b = 0; b < a->nbudgets; b++) {
            bool pass;
            double v = kiln_budget_value(&a->budgets[b], &outs[i].sum, &pass);
            bad += !pass;
            bool pct = a->budgets[b].metric == KILN_METRIC_TOP1 || a->budgets[b].metric == KILN_METRIC_TOP5;
            if (jb) {
                json_t *o = json_object();
                json_object_set_new(o, "budget", cli_json_str(a->budget_text[b]));
                json_object_set_new(o, "metric", json_string(kiln_metric_name(a->budgets[b].metric)));
                json_object_set_new(o, "threshold", json_real(a->budgets[b].threshold));
                json_object_set_new(o, "output", cli_json_str(kiln_engine_output_name(e, outs[i].cand)));
                json_object_set_new(o, "value", json_num(v));
                json_object_set_new(o, "pass", json_boolean(pass));
                json_array_append_new(jb, o);
            } else {
                char vt[64];
                const kiln_tensor *sh = &outs[i].shape;
                const char *why = !isnan(v)                                  ? ""
                                  : outs[i].sum.worst.count == 0               ? " (no element where both are finite)"
                                  : sh->ndim < 1 || sh->dims[sh->ndim - 1] < 2 ? " (not classifier-like: last dim < 2)"
                                                                               : " (no row with a finite reference)";
                printf("%s budget %s on '%s': %s%s%s\n", pass ? "pass" : "FAIL", cli_esc(a->budget_text[b]),
                       cli_esc(kiln_engine_output_name(e, outs[i].cand)),
                       metric_text(vt, sizeof vt, pct ? 100 * v : v, 6, false), pct && !isnan(v) ? "%" : "", why);
            }
        }
    }
    return bad;
}

static const char *device_name(const vargs *a)
{
    return a->dev.device == KILN_DEVICE_CUDA ? "cuda" : "cpu";
}

/* ds: the candidate context's device stats after its last sample (NULL on the CPU) */
static int report(kiln_engine_t e, kiln_model_t m, const vargs *a, const vout *outs, int nout, int samples,
                  json_t *layers, const kiln_device_stats *ds)
{
    json_t *root = a->json ? json_object() : NULL, *jo = a->json ? json_array() : NULL;
    json_t *jb = a->json ? json_array() : NULL;
    if (!a->json) {
        printf("candidate %s (on %s), reference %s: %d sample%s (%s)\n", cli_esc(a->cand), device_name(a),
               cli_esc(a->ref), samples, samples == 1 ? "" : "s",
               a->dir ? "data" : a->io.n_files ? "input files" : "synthetic");
        if (ds)   /* part of what the error below measures: said */
            cli_print_half_storage(ds->half_storage_layers, false);
    }
    for (int i = 0; i < nout; i++) {
        if (jo)
            json_array_append_new(jo, output_json(e, m, &outs[i]));
        else
            print_output(e, &outs[i]);
    }
    int bad = check_budgets(e, a, outs, nout, jb);
    if (root) {
        json_object_set_new(root, "candidate", cli_json_str(a->cand));
        json_object_set_new(root, "reference", cli_json_str(a->ref));
        json_object_set_new(root, "device", json_string(device_name(a)));
        if (ds)
            json_object_set_new(root, "half_storage_layers", json_integer(ds->half_storage_layers));
        json_object_set_new(root, "inputs", json_string(a->dir ? "data" : a->io.n_files ? "files" : "synthetic"));
        json_object_set_new(root, "samples", json_integer(samples));
        json_object_set_new(root, "outputs", jo);
        json_object_set_new(root, "budgets", jb);
        json_object_set_new(root, "pass", json_boolean(bad == 0));
        json_object_set_new(root, "verdict", json_string(bad ? "fail" : a->nbudgets ? "pass" : "compared"));
        if (layers)
            json_object_set(root, "per_layer", layers);
        int rc = json_dumpf(root, stdout, JSON_INDENT(2)) == 0 ? 0 : 1;
        printf("\n");
        json_decref(root);
        if (rc)
            return rc;
    } else if (bad) {
        printf("FAIL: %d check%s violated\n", bad, bad == 1 ? "" : "s");
    } else if (a->nbudgets == 0) {   /* nothing was checked but NaN/Inf: no PASS claimed (exit status 0 still) */
        printf("COMPARED ONLY: no --budget given, only NaN/Inf checked (e.g. --budget 'snr>=30db' to check "
               "accuracy)\n");
    } else {
        printf("PASS\n");
    }
    return bad ? VERIFY_EXIT_BUDGET : 0;
}

int cmd_verify(int argc, char **argv)
{
    vargs a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    cli_catch_sigint();
    kiln_engine_t e = NULL;
    kiln_model_t m = NULL;
    kiln_context_t cc = NULL;
    vsrc src = {0};
    vout *outs = NULL;
    kiln_tensor *ins = NULL;
    json_t *layers = NULL;
    kiln_status st = cli_open_engine_for(a.cand, a.load_flags, a.dev.device, &e);
    if (st != KILN_OK) {
        rc = cli_die(st, "loading the candidate");
        goto done;
    }
    if ((st = kiln_model_load(a.ref, &m)) != KILN_OK) {
        rc = cli_die(st, "loading the reference");
        goto done;
    }
    int nin = kiln_engine_num_inputs(e), nout = kiln_engine_num_outputs(e), samples = 0;
    rc = 1;
    src = (vsrc){.e = e, .nin = nin, .io = &a.io, .seed = (uint64_t)a.seed, .dir = a.dir, .batch = a.batch};
    src.names = calloc((size_t)nin + 1, sizeof *src.names);
    outs = calloc((size_t)nout + 1, sizeof *outs);
    ins = calloc((size_t)nin + 1, sizeof *ins);
    if (!src.names || !outs || !ins) {
        fprintf(stderr, "kiln verify: out of memory\n");
        goto done;
    }
    for (int i = 0; i < nin; i++)
        src.names[i] = kiln_engine_input_name(e, i);
    if (!match_outputs(e, m, outs, nout) || !vsrc_open(&src))
        goto done;
    if ((st = kiln_context_create(e, &cc)) != KILN_OK ||
        (a.dev.device != KILN_DEVICE_CPU && (st = kiln_context_set_device(cc, a.dev.device, a.dev.flags)) != KILN_OK)) {
        rc = cli_die(st, "creating the candidate's context");
        goto done;
    }
    if (a.threads > 0)
        kiln_context_set_threads(cc, a.threads);
    bool tty = isatty(2);
    for (int k = 0; k < a.samples; k++) {
        int got = vsrc_next(&src, k, ins);
        if (got < 0) {
            rc = got == -2 ? 2 : 1;
            goto done;
        }
        if (got == 0)
            break;
        if (tty)
            fprintf(stderr, "\rverify: sample %d", k + 1);
        if (a.per_layer && k == 0) {
            vlayer_opts lo = {.jump_db = a.jump_db, .threads = a.threads, .device = a.dev.device,
                              .device_flags = a.dev.flags};
            layers = a.json ? json_object() : NULL;
            if (!verify_layers(e, m, nin, src.names, ins, &lo, layers))
                goto done;
        }
        if ((rc = run_sample(e, cc, m, &a, src.names, ins, nin, outs, nout)) != 0)
            goto done;
        rc = 1;
        samples++;
    }
    if (tty)
        fputc('\n', stderr);
    if (samples == 0) {
        fprintf(stderr, "kiln verify: no sample to run\n");
        goto done;
    }
    kiln_device_stats ds;
    bool dev = a.dev.device != KILN_DEVICE_CPU && kiln_context_device_stats(cc, &ds) == KILN_OK;
    rc = report(e, m, &a, outs, nout, samples, layers, dev ? &ds : NULL);
done:
    json_decref(layers);
    kiln_context_free(cc);
    vsrc_close(&src);
    free(src.names);
    free(outs);
    free(ins);
    kiln_model_free(m);
    kiln_engine_free(e);
    kiln_shapes_free(a.io.shapes);
    return rc;
}
