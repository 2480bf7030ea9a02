/* kiln calibrate: post-training INT8 calibration of a model on a directory of .npy samples; prints
 * each activation's range and scale, reads or writes a calibration cache. Uses kiln.h only. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kiln calibrate MODEL.onnx --calib DIR [--calib-method M] [--calib-cache FILE]\n"
            "                      [--calib-images DIR --preprocess SPEC] [--batch N] [--threads N] [--json]\n\n"
            "  --calib DIR          .npy files batched along axis 0: any *.npy for a one-input model,\n"
            "                       NAME_KEY.npy per input NAME for several inputs (one KEY = one sample)\n"
            "  --calib-images DIR   PNG / JPEG files instead (one-input image models), preprocessed by\n"
            "  --preprocess SPEC    resize=HxW[,keep-ratio,pad][,mean=V[,V,V]][,std=V[,V,V]][,bgr][,nhwc]\n"
            "  --calib-method M     mse (default) | percentile[:P] (P = 99.99 if not given) | entropy | minmax\n"
            "  --calib-cache FILE   reuse FILE when its header matches (model, data, method, kiln\n"
            "                       version); otherwise calibrate and write it (a stale cache is an error)\n"
            "  --batch N            samples per run where the batch dim is dynamic (default 32)\n"
            "  --threads N          threads (default: all CPUs)\n"
            "  --json               machine-readable output\n"
            "Without --calib, a matching --calib-cache is used on its own. See docs/CALIBRATION.md.\n");
}

static void progress(int pass, int64_t done, int64_t total, void *user)
{
    (void)user;
    fprintf(stderr, "\rcalibrating: pass %d/2 (%s) %lld/%lld samples", pass, pass == 1 ? "ranges" : "histograms",
            (long long)done, (long long)total);
    if (pass == 2 && done == total)
        fputc('\n', stderr);
}

static void print_text(kiln_calibration_t r)
{
    printf("method %s, %lld samples%s, model %s, data %s\n", kiln_calib_method_name(r),
           (long long)kiln_calib_num_samples(r), kiln_calib_from_cache(r) ? " (from cache)" : "",
           kiln_calib_model_hash(r), kiln_calib_data_hash(r));
    printf("%-40s %14s %14s %14s\n", "tensor", "amax", "threshold", "scale");
    for (int i = 0; i < kiln_calib_num_tensors(r); i++) {
        float s = kiln_calib_scale(r, i), a = kiln_calib_amax(r, i);
        printf("%-40s %14.6g %14.6g %14.6g\n", cli_esc(kiln_calib_tensor_name(r, i)), (double)a,
               a > 0 ? (double)s * 127 : 0.0, (double)s);
    }
}

static int print_json(kiln_calibration_t r)
{
    json_t *o = json_object(), *ts = json_array();
    json_object_set_new(o, "method", json_string(kiln_calib_method_name(r)));
    json_object_set_new(o, "samples", json_integer(kiln_calib_num_samples(r)));
    json_object_set_new(o, "from_cache", json_boolean(kiln_calib_from_cache(r)));
    json_object_set_new(o, "model_hash", json_string(kiln_calib_model_hash(r)));
    json_object_set_new(o, "data_hash", json_string(kiln_calib_data_hash(r)));
    for (int i = 0; i < kiln_calib_num_tensors(r); i++) {
        float s = kiln_calib_scale(r, i), a = kiln_calib_amax(r, i);
        json_t *t = json_object();
        json_object_set_new(t, "name", cli_json_str(kiln_calib_tensor_name(r, i)));
        json_object_set_new(t, "amax", json_real(a));
        json_object_set_new(t, "threshold", json_real(a > 0 ? (double)s * 127 : 0.0));
        json_object_set_new(t, "scale", json_real(s));
        json_array_append_new(ts, t);
    }
    json_object_set_new(o, "tensors", ts);
    int rc = json_dumpf(o, stdout, JSON_INDENT(2)) == 0 ? 0 : 1;
    printf("\n");
    json_decref(o);
    return rc;
}

int cmd_calibrate(int argc, char **argv)
{
    const char *model = NULL;
    kiln_calib_options o = {.method = KILN_CALIB_MSE};   /* see the help text */
    bool json = false;
    cli_images im = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        int ca;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if ((ca = cli_calib_arg("calibrate", &o, &im, argc, argv, &i)) != 0) {
            if (ca < 0)
                return 2;
        } else if (!strcmp(a, "--batch") && has_val) {
            if (!cli_int_opt("--batch", argv[++i], 1, 1 << 20, &o.max_batch))
                return 2;
        } else if (!strcmp(a, "--threads") && has_val) {
            if (!cli_int_opt("--threads", argv[++i], 1, CLI_MAX_THREADS, &o.num_threads))
                return 2;
        } else if (a[0] == '-') {
            static const char *const value_opts[] = {"--batch", "--threads", CLI_CALIB_VALUE_OPTS, NULL};
            return cli_bad_arg("calibrate", argc, argv, i, value_opts);
        } else if (!model) {
            model = a;
        } else {
            fprintf(stderr, "kiln calibrate: more than one model given ('%s')\n", cli_esc(a));
            return 2;
        }
    }
    if (!model || (!o.data_dir && !im.dir && !o.cache_path)) {
        fprintf(stderr, "kiln calibrate: need MODEL.onnx and --calib DIR (or an existing --calib-cache)\n");
        usage(stderr);
        return 2;
    }
    if (!cli_images_prepare("calibrate", &im, &o))
        return 2;
    if (isatty(2))
        o.progress = progress;
    cli_catch_sigint();
    kiln_model_t m;
    kiln_status st = kiln_model_load(model, &m);
    if (st != KILN_OK) {
        cli_images_done(&im);
        return cli_die(st, "loading the model");
    }
    kiln_calibration_t r;
    st = kiln_calibrate(m, &o, &r);
    kiln_model_free(m);
    cli_images_done(&im);
    if (st != KILN_OK)
        return cli_die(st, "calibration");
    int rc = 0;
    if (json)
        rc = print_json(r);
    else
        print_text(r);
    kiln_calibration_free(r);
    return rc;
}
