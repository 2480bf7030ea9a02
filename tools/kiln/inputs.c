/* Input preparation shared by bench and inspect: an engine from a model or engine file, and
 * input tensors from files, else the library's synthetic inputs (--shapes, --batch, the engine's
 * profiles or the model's static dims). */
#include "cli.h"
#include <string.h>

kiln_status cli_open_engine(const char *path, unsigned load_flags, kiln_engine_t *e)
{
    return cli_open_engine_for(path, load_flags, KILN_DEVICE_CPU, e);
}

kiln_status cli_open_engine_for(const char *path, unsigned load_flags, kiln_device device, kiln_engine_t *e)
{
    if (kiln_is_engine_file(path))
        return kiln_engine_load_ex(path, load_flags, e);
    kiln_model_t m;
    kiln_status st = kiln_model_load(path, &m);
    if (st != KILN_OK)
        return st;
    kiln_build_options bo = {.device = device};
    st = kiln_build(m, &bo, e);
    kiln_free(bo.report);
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

bool cli_make_inputs(kiln_engine_t e, const cli_input_opts *o, kiln_tensor *ins, const char **names)
{
    for (int k = 0; k < o->n_files; k++)
        if (input_index(e, o->file_names[k]) < 0) {
            fprintf(stderr, "kiln: preparing inputs: --input names '%s', which is not an input of the model\n",
                    cli_esc(o->file_names[k]));
            return false;
        }
    for (int i = 0; i < kiln_engine_num_inputs(e); i++)
        names[i] = kiln_engine_input_name(e, i);
    for (int k = 0; k < o->n_files; k++) {
        kiln_status st = kiln_tensor_read(o->file_paths[k], &ins[input_index(e, o->file_names[k])]);
        if (st != KILN_OK)
            return !cli_die(st, "preparing inputs");
    }
    kiln_synth_options so = {.shapes = o->shapes, .batch = o->batch};
    kiln_status st = kiln_engine_synth_inputs(e, &so, ins);
    return st == KILN_OK || !cli_die(st, "preparing inputs");
}
