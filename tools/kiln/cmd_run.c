/* kiln run: run a model on .npy / .pb inputs and write every output as .npy. */
#include "cli.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cmd_run(int argc, char **argv)
{
    const char *model_path = NULL, *out_dir = NULL;
    int threads = 0, nin = 0, rc = 1;
    bool no_opt = false;
    const char **names = calloc((size_t)argc, sizeof *names);
    kiln_tensor *ins = calloc((size_t)argc, sizeof *ins);
    kiln_model_t m = NULL;
    kiln_engine_t e = NULL;
    kiln_tensor *outs = NULL;
    int nout = 0;
    if (!names || !ins)
        goto done;
    cli_catch_sigint();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--input") && i + 1 < argc) {
            char *spec = argv[++i], *eq = strchr(spec, '=');
            if (!eq) {
                fprintf(stderr, "kiln run: --input expects NAME=FILE, got '%s'\n", spec);
                goto done;
            }
            *eq = 0;
            names[nin] = spec;
            kiln_status st = cli_load_tensor(eq + 1, &ins[nin]);
            if (st != KILN_OK) {
                rc = cli_die(st, "reading input");
                goto done;
            }
            nin++;
        } else if (!strcmp(argv[i], "--output-dir") && i + 1 < argc) {
            out_dir = argv[++i];
        } else if (!strcmp(argv[i], "--no-optimize")) {
            no_opt = true;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (argv[i][0] != '-' && !model_path) {
            model_path = argv[i];
        } else {
            fprintf(stderr, "kiln run: unexpected argument '%s'\n", argv[i]);
            goto done;
        }
    }
    if (!model_path || !out_dir) {
        fprintf(stderr, "usage: kiln run MODEL.onnx|M.kiln --input NAME=FILE ... --output-dir DIR [--threads N] [--no-optimize]\n");
        goto done;
    }
    bool is_engine = kiln_is_engine_file(model_path);
    kiln_status st = is_engine ? kiln_engine_load(model_path, &e) : kiln_model_load(model_path, &m);
    if (st != KILN_OK) {
        rc = cli_die(st, is_engine ? "loading engine" : "loading model");
        goto done;
    }
    if (!is_engine && !no_opt) {
        /* optimize in memory, exactly as `kiln build` would */
        kiln_build_options bo = {0};
        st = kiln_build(m, &bo, &e);
        kiln_free(bo.report);
        if (st != KILN_OK) {
            rc = cli_die(st, "optimizing model");
            goto done;
        }
    }
    kiln_run_options opts = {.num_threads = threads};
    st = cli_interrupted() ? KILN_ERR_CANCELLED
       : e ? kiln_engine_run(e, nin, names, ins, &opts, &nout, &outs)
       : kiln_model_run(m, nin, names, ins, &opts, &nout, &outs);
    if (st != KILN_OK || cli_interrupted()) {
        rc = cli_die(st, "running model");
        goto done;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kiln run: cannot create '%s': %s\n", out_dir, strerror(errno));
        goto done;
    }
    for (int o = 0; o < nout; o++) {
        char safe[256], path[4096];
        const char *oname = e ? kiln_engine_output_name(e, o) : kiln_model_output_name(m, o);
        cli_safe_name(oname, safe, sizeof safe);
        snprintf(path, sizeof path, "%s/%s.npy", out_dir, safe);
        st = kiln_npy_write(path, &outs[o]);
        if (st != KILN_OK) {
            rc = cli_die(st, "writing output");
            goto done;
        }
        printf("%s -> %s\n", oname, path);
    }
    rc = 0;
done:
    for (int i = 0; i < nin; i++)
        kiln_free(ins[i].data);
    free(ins);
    free(names);
    kiln_tensors_free(outs, nout);
    kiln_model_free(m);
    kiln_engine_free(e);
    return rc;
}
