/* The public synthetic-input generator (kiln_model_synth_inputs / kiln_engine_synth_inputs):
 * input shapes from the caller's shape set, else the engine's first profile (opt shapes), else
 * the declared static dims (a dynamic first dim, the batch, defaults to 1); values by the one
 * rule in core/synth.h, which the builder's calibration run uses too. */
#include "../core/synth.h"
#include "../engine/engine.h"
#include "model.h"

/* The input's dims from the first profile's opt shapes; -1 if the profile does not name it. */
static int profile_dims(const struct kiln_engine *e, const char *name, int64_t *dims)
{
    for (int k = 0; e && e->n_profiles > 0 && k < e->profiles[0].n_inputs; k++)
        if (!strcmp(e->profiles[0].names[k], name)) {
            memcpy(dims, e->profiles[0].opt[k], sizeof(int64_t) * (size_t)e->profiles[0].ndim[k]);
            return e->profiles[0].ndim[k];
        }
    return -1;
}

static kiln_status declared_dims(const kiln_value *v, int64_t *dims, int *nd)
{
    if (v->ndim < 0)
        return kiln__err(KILN_ERR_INVALID_ARG, "input '%s' has no declared shape: give its shape (--shapes %s:DIMS)",
                         v->name, v->name);
    *nd = v->ndim;
    for (int d = 0; d < v->ndim; d++) {
        dims[d] = v->dims[d].value >= 0 && !v->dims[d].param ? v->dims[d].value : -1;
        if (dims[d] < 0 && d == 0)
            dims[d] = 1;   /* a dynamic batch defaults to 1 */
        if (dims[d] < 0)
            return kiln__err(KILN_ERR_INVALID_ARG, "input '%s' dim %d is dynamic (%s): give its shape (--shapes %s:DIMS)",
                             v->name, d, v->dims[d].param ? v->dims[d].param : "?", v->name);
    }
    return KILN_OK;
}

static kiln_status synth(const kiln_graph *g, const struct kiln_engine *e, const kiln_synth_options *o,
                         kiln_tensor *ins)
{
    kiln_shapes_t shapes = o ? o->shapes : NULL;
    for (int k = 0; k < kiln_shapes_count(shapes); k++) {   /* every named shape must be an input */
        const char *name;
        KILN_TRY(kiln_shapes_get(shapes, k, &name, NULL, NULL));
        bool found = false;
        for (int i = 0; i < g->n_inputs && !found; i++)
            found = !strcmp(g->values[g->inputs[i]].name, name);
        if (!found)
            return kiln__err(KILN_ERR_INVALID_ARG, "the model has no input '%s' (a shape is given for it)", name);
    }
    uint64_t rng = o && o->seed ? o->seed : KILN_SYNTH_SEED;
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        if (ins[i].dtype != KILN_DT_UNDEFINED)
            continue;   /* supplied by the caller */
        int64_t dims[KILN_MAX_DIMS];
        int nd = -1, k = kiln_shapes_find(shapes, v->name);
        if (k >= 0)
            KILN_TRY(kiln_shapes_get(shapes, k, NULL, &nd, dims));
        if (nd < 0)
            nd = profile_dims(e, v->name, dims);
        if (nd < 0)
            KILN_TRY(declared_dims(v, dims, &nd));
        if (o && o->batch > 0 && nd > 0)
            dims[0] = o->batch;
        KILN_TRY(kiln__tensor_alloc(&ins[i], v->dtype != KILN_DT_UNDEFINED ? v->dtype : KILN_DT_FLOAT32, nd, dims));
        KILN_TRY(kiln__synth_fill(&ins[i], v->name, &rng));
    }
    return KILN_OK;
}

/* Runs synth; on failure frees what it allocated and leaves those entries zeroed. */
static kiln_status synth_all(const char *fn, const kiln_graph *g, const struct kiln_engine *e,
                             const kiln_synth_options *o, kiln_tensor *ins)
{
    if (!ins)
        return kiln__err(KILN_ERR_INVALID_ARG, "%s: NULL inputs array", fn);
    if (o && o->batch < 0)
        return kiln__err(KILN_ERR_INVALID_ARG, "%s: negative batch %lld", fn, (long long)o->batch);
    bool *given = kiln__calloc((size_t)g->n_inputs + 1, sizeof *given);
    if (!given)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_inputs; i++)
        given[i] = ins[i].dtype != KILN_DT_UNDEFINED;
    kiln_status st = synth(g, e, o, ins);
    for (int i = 0; st != KILN_OK && i < g->n_inputs; i++)
        if (!given[i]) {
            kiln__free(ins[i].data);
            memset(&ins[i], 0, sizeof ins[i]);
        }
    kiln__free(given);
    return st;
}

kiln_status kiln_model_synth_inputs(kiln_model_t m, const kiln_synth_options *o, kiln_tensor *inputs)
{
    if (!m)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_model_synth_inputs: NULL model");
    return synth_all("kiln_model_synth_inputs", m->g, NULL, o, inputs);
}

kiln_status kiln_engine_synth_inputs(kiln_engine_t e, const kiln_synth_options *o, kiln_tensor *inputs)
{
    if (!e)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_synth_inputs: NULL engine");
    return synth_all("kiln_engine_synth_inputs", e->g, e, o, inputs);
}
