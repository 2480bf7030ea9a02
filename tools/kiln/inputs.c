/* Input preparation shared by bench and inspect: an engine from a model or engine file, and
 * input tensors from files, else the library's synthetic inputs (--shapes, --batch, the engine's
 * profiles or the model's static dims). */
#include "cli.h"
#include <string.h>

bool cli_is_engine_path(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return kiln_is_engine_file(path) || (n > 5 && !strcmp(path + n - 5, ".kiln"));
}

kiln_status cli_open_engine(const char *path, unsigned load_flags, kiln_engine_t *e)
{
    return cli_open_engine_for(path, load_flags, KILN_DEVICE_CPU, e);
}

kiln_status cli_open_engine_for(const char *path, unsigned load_flags, kiln_device device, kiln_engine_t *e)
{
    if (cli_is_engine_path(path))
        return kiln_engine_load_ex(path, load_flags, e);
    kiln_model_t m;
    kiln_status st = kiln_model_load(path, &m);
    if (st != KILN_OK)
        return st;
    kiln_build_options bo = {.device = device};
    st = kiln_build(m, &bo, e);
    kiln_free(bo.report);
    kiln_free(bo.precision_report);   /* (kiln build prints it) */
    kiln_model_free(m);
    return st;
}

static int input_index(kiln_engine_t e, const char *name)
{
    for (int i = 0; i < kiln_engine_num_inputs(e); i++)
        if (!strcmp(kiln_engine_input_name(e, i), name))
            return i;
    return -1;
}

/* dims as "1x3x16x16", or "a scalar" */
static const char *dims_text(int ndim, const int64_t *dims, char *buf, size_t cap)
{
    return ndim ? cli_dims_text(ndim, dims, buf, cap) : "a scalar";
}

/* A file input whose shape --shapes or --batch contradicts: the file's shape is what runs, so the option would be
 * silently ignored (bench then reported the file's batch); as trtexec checks --loadInputs against --shapes, a
 * conflict is a usage error, an agreeing option is fine. */
bool cli_input_conflicts(const cli_input_opts *o, const char *name, const kiln_tensor *t)
{
    char have[256], want[256];
    int k = o->shapes ? kiln_shapes_find(o->shapes, name) : -1, nd = 0;
    int64_t dims[KILN_MAX_DIMS];
    if (k >= 0 && kiln_shapes_get(o->shapes, k, NULL, &nd, dims) == KILN_OK &&
        (nd != t->ndim || memcmp(dims, t->dims, sizeof(int64_t) * (size_t)nd))) {
        fprintf(stderr, "kiln: --shapes gives '%s' %s, but its --input file holds %s (give one or the other)\n",
                cli_esc(name), dims_text(nd, dims, want, sizeof want), dims_text(t->ndim, t->dims, have, sizeof have));
        return true;
    }
    if (o->batch > 0 && (t->ndim == 0 || t->dims[0] != o->batch)) {
        fprintf(stderr, "kiln: --batch %d conflicts with --input '%s', a file of shape %s (its dim 0 is the batch)\n",
                o->batch, cli_esc(name), dims_text(t->ndim, t->dims, have, sizeof have));
        return true;
    }
    return false;
}

int cli_make_inputs(kiln_engine_t e, const cli_input_opts *o, kiln_tensor *ins, const char **names)
{
    for (int k = 0; k < o->n_files; k++)
        if (input_index(e, o->file_names[k]) < 0) {
            fprintf(stderr, "kiln: preparing inputs: --input names '%s', which is not an input of the model\n",
                    cli_esc(o->file_names[k]));
            return 1;
        }
    for (int i = 0; i < kiln_engine_num_inputs(e); i++)
        names[i] = kiln_engine_input_name(e, i);
    for (int k = 0; k < o->n_files; k++) {
        kiln_tensor *t = &ins[input_index(e, o->file_names[k])];
        kiln_status st = kiln_tensor_read(o->file_paths[k], t);
        if (st != KILN_OK)
            return cli_die(st, "preparing inputs");
        if (cli_input_conflicts(o, o->file_names[k], t))
            return 2;
    }
    kiln_synth_options so = {.shapes = o->shapes, .batch = o->batch};
    kiln_status st = kiln_engine_synth_inputs(e, &so, ins);
    return st == KILN_OK ? 0 : cli_die(st, "preparing inputs");
}
