/* kiln run: run a model on .npy / .pb inputs and write every output as .npy (file names from
 * outnames.c, listed in DIR/outputs.json). */
#include "cli.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* An output file must not replace the model or an input file (by any spelling or link). */
static bool clobbers(const char *path, const char *model_path, const cli_input_opts *io)
{
    const char *what = kiln_same_file(path, model_path) ? "the model" : NULL;
    for (int k = 0; !what && k < io->n_files; k++)
        if (kiln_same_file(path, io->file_paths[k]))
            what = "an input file";
    if (what)
        fprintf(stderr, "kiln run: output file '%s' is %s; refusing to overwrite it (choose another --output-dir)\n",
                cli_esc(path), what);
    return what != NULL;
}

static int write_outputs(const char *out_dir, int nout, const char **onames, const kiln_tensor *outs,
                         const char *model_path, const cli_input_opts *io)
{
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kiln run: cannot create '%s': %s\n", out_dir, strerror(errno));
        return 1;
    }
    char **files = cli_output_files(nout, onames);
    if (!files) {
        fprintf(stderr, "kiln run: out of memory\n");
        return 1;
    }
    int rc = 0;
    char path[4096];
    for (int o = 0; o < nout && !rc; o++) {   /* checked before anything is written */
        snprintf(path, sizeof path, "%s/%s", out_dir, files[o]);
        rc = clobbers(path, model_path, io);
    }
    for (int o = 0; o < nout && !rc; o++) {
        snprintf(path, sizeof path, "%s/%s", out_dir, files[o]);
        kiln_status st = kiln_npy_write(path, &outs[o]);
        if (st != KILN_OK)
            rc = cli_die(st, "writing output");
        else
            printf("%s -> %s\n", cli_esc(onames[o]), cli_esc(path));
    }
    if (!rc)
        rc = cli_write_output_index(out_dir, nout, onames, files);
    for (int o = 0; o < nout; o++)
        free(files[o]);
    free(files);
    return rc;
}

static const char usage[] =
    "usage: kiln run MODEL.onnx|M.kiln --input NAME=FILE ... --output-dir DIR [--threads N] [--no-optimize] [--no-mmap]\n"
    "                [--device cpu|cuda] [--tf32] [--strict-device]\n" CLI_DEVICE_USAGE;

int cmd_run(int argc, char **argv)
{
    const char *model_path = NULL, *out_dir = NULL;
    int threads = 0, rc = 1;
    bool no_opt = false;
    cli_device_opts dev = {KILN_DEVICE_CPU, 0};
    int dr;
    unsigned load_flags = KILN_ENGINE_LOAD_DEFAULT;
    cli_input_opts io = {0};
    io.file_names = calloc((size_t)argc, sizeof(char *));
    io.file_paths = calloc((size_t)argc, sizeof(char *));
    kiln_tensor *ins = calloc((size_t)argc, sizeof *ins);
    const char **onames = NULL;
    kiln_model_t m = NULL;
    kiln_engine_t e = NULL;
    kiln_tensor *outs = NULL;
    int nout = 0, nloaded = 0;
    if (!io.file_names || !io.file_paths || !ins)
        goto done;
    cli_catch_sigint();
    rc = 2;   /* until the arguments are parsed, an error is a usage error (exit status 2, as every command) */
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            rc = cli_help(usage);
            goto done;
        } else if (!strcmp(argv[i], "--input") && i + 1 < argc) {
            if (!cli_input_arg("run", argv[++i], &io, argc))
                goto done;
        } else if (!strcmp(argv[i], "--output-dir") && i + 1 < argc) {
            out_dir = argv[++i];
        } else if (!strcmp(argv[i], "--no-optimize")) {
            no_opt = true;
        } else if (!strcmp(argv[i], "--no-mmap")) {
            load_flags = KILN_ENGINE_LOAD_COPY;
        } else if ((dr = cli_device_arg("run", argc, argv, &i, &dev)) != 0) {
            if (dr < 0)
                goto done;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!cli_int_opt("--threads", argv[++i], 0, CLI_MAX_THREADS, &threads))
                goto done;
        } else if (argv[i][0] != '-' && !model_path) {
            model_path = argv[i];
        } else {
            static const char *const value_opts[] = {"--input", "--output-dir", "--threads", "--device", NULL};
            cli_bad_arg("run", argc, argv, i, value_opts);
            goto done;
        }
    }
    if (!model_path || !out_dir) {
        fputs(usage, stderr);
        goto done;
    }
    if (!cli_device_flags_ok("run", &dev))
        goto done;
    rc = 1;
    for (; nloaded < io.n_files; nloaded++) {
        kiln_status st = kiln_tensor_read(io.file_paths[nloaded], &ins[nloaded]);
        if (st != KILN_OK) {
            rc = cli_die(st, "reading input");
            goto done;
        }
    }
    bool is_engine = cli_is_engine_path(model_path);
    kiln_status st = is_engine ? kiln_engine_load_ex(model_path, load_flags, &e) : kiln_model_load(model_path, &m);
    if (st != KILN_OK) {
        rc = cli_die(st, is_engine ? "loading engine" : "loading model");
        goto done;
    }
    if (!is_engine && !no_opt) {
        /* optimize in memory, exactly as `kiln build` would */
        kiln_build_options bo = {.device = dev.device};
        st = kiln_build(m, &bo, &e);
        kiln_free(bo.report);
        kiln_free(bo.precision_report);
        if (st != KILN_OK) {
            rc = cli_die(st, "optimizing model");
            goto done;
        }
    }
    kiln_run_options opts = {.num_threads = threads, .device = dev.device, .device_flags = dev.flags};
    st = cli_interrupted() ? KILN_ERR_CANCELLED
       : e ? kiln_engine_run(e, io.n_files, io.file_names, ins, &opts, &nout, &outs)
       : kiln_model_run(m, io.n_files, io.file_names, ins, &opts, &nout, &outs);
    if (st != KILN_OK || cli_interrupted()) {
        rc = cli_die(st, "running model");
        goto done;
    }
    onames = calloc((size_t)nout + 1, sizeof *onames);
    if (!onames)
        goto done;
    for (int o = 0; o < nout; o++)
        onames[o] = e ? kiln_engine_output_name(e, o) : kiln_model_output_name(m, o);
    rc = write_outputs(out_dir, nout, onames, outs, model_path, &io);
done:
    for (int i = 0; i < nloaded; i++)
        kiln_free(ins[i].data);
    free(ins);
    free(io.file_names);
    free(io.file_paths);
    free(onames);
    kiln_tensors_free(outs, nout);
    kiln_model_free(m);
    kiln_engine_free(e);
    return rc;
}
