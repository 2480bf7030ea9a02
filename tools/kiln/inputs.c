/* Input preparation shared by bench and inspect: an engine from a model or engine file, and
 * input tensors from files, --shapes, --batch, the engine's profiles or the model's static dims. */
#include "cli.h"
#include "engine/engine.h"
#include "runtime/model.h"
#include <stdlib.h>
#include <string.h>

kiln_status cli_open_engine(const char *path, kiln_engine_t *e)
{
    if (kiln_is_engine_file(path))
        return kiln_engine_load(path, e);
    kiln_model_t m;
    KILN_TRY(kiln_model_load(path, &m));
    kiln_build_options bo = {0};
    kiln_status st = kiln_build(m, &bo, e);
    kiln_free(bo.report);
    kiln_model_free(m);
    return st;
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Every --input and --shapes name must be an input of the model. */
static kiln_status check_names(const kiln_graph *g, const cli_input_opts *o)
{
    int ns = o->shapes ? o->shapes->n : 0;
    for (int k = 0; k < o->n_files + ns; k++) {
        const char *name = k < o->n_files ? o->file_names[k] : o->shapes->v[k - o->n_files].name;
        bool found = false;
        for (int i = 0; i < g->n_inputs && !found; i++)
            found = !strcmp(g->values[g->inputs[i]].name, name);
        if (!found)
            return kiln__err(KILN_ERR_INVALID_ARG, "%s names '%s', which is not an input of the model",
                             k < o->n_files ? "--input" : "--shapes", name);
    }
    return KILN_OK;
}

kiln_status cli_make_inputs(kiln_engine_t e, const cli_input_opts *o, kiln_tensor *ins, const char **names)
{
    const kiln_graph *g = e->g;
    KILN_TRY(check_names(g, o));
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        names[i] = v->name;
        for (int k = 0; k < o->n_files; k++)
            if (!strcmp(o->file_names[k], v->name)) {
                KILN_TRY(cli_load_tensor(o->file_paths[k], &ins[i]));
                goto next;
            }
        int64_t dims[KILN_MAX_DIMS];
        const cli_shape *given = cli_shapes_find(o->shapes, v->name);
        int nd = given ? given->ndim : -1;
        if (given)
            memcpy(dims, given->dims, sizeof dims);
        if (nd < 0 && e->n_profiles > 0)
            for (int k = 0; k < e->profiles[0].n_inputs; k++)
                if (!strcmp(e->profiles[0].names[k], v->name)) {
                    nd = e->profiles[0].ndim[k];
                    memcpy(dims, e->profiles[0].opt[k], sizeof(int64_t) * (size_t)nd);
                }
        if (nd < 0) {
            if (v->ndim < 0)
                return kiln__err(KILN_ERR_INVALID_ARG, "input '%s' has no declared shape: give --shapes %s:DIMS", v->name,
                                 v->name);
            nd = v->ndim;
            for (int d = 0; d < nd; d++) {
                dims[d] = v->dims[d].value >= 0 && !v->dims[d].param ? v->dims[d].value : -1;
                if (dims[d] < 0 && d == 0)
                    dims[d] = 1;   /* a dynamic batch defaults to 1 */
                if (dims[d] < 0)
                    return kiln__err(KILN_ERR_INVALID_ARG, "input '%s' dim %d is dynamic (%s): give --shapes %s:DIMS",
                                     v->name, d, v->dims[d].param ? v->dims[d].param : "?", v->name);
            }
        }
        if (o->batch > 0 && nd > 0)
            dims[0] = o->batch;
        kiln_dtype dt = v->dtype != KILN_DT_UNDEFINED ? v->dtype : KILN_DT_FLOAT32;
        KILN_TRY(kiln__tensor_alloc(&ins[i], dt, nd, dims));
        int64_t n = kiln_tensor_numel(&ins[i]);
        bool mask = strstr(v->name, "mask") != NULL, type = strstr(v->name, "type") != NULL;
        for (int64_t k = 0; k < n; k++) {
            if (kiln__dtype_is_float(dt))
                kiln__set_f64(dt, ins[i].data, k, (double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            else
                kiln__set_i64(dt, ins[i].data, k, mask || dt == KILN_DT_BOOL ? 1 : type ? 0 : (int64_t)(rnd() % 100));
        }
    next:;
    }
    return KILN_OK;
}
