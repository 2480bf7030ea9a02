/* Public getters for an engine's declared inputs/outputs and its optimization profiles
 * (kiln.h, "engine I/O and profile info"): lets tools describe an engine without src/ headers. */
#include "../engine/engine.h"
#include <string.h>

kiln_status kiln_engine_io_info(kiln_engine_t e, bool output, int i, kiln_io_info *out)
{
    if (!e || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_io_info: NULL argument");
    const kiln_graph *g = e->g;
    int n = output ? g->n_outputs : g->n_inputs;
    if (i < 0 || i >= n)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_io_info: %s index %d out of range (0..%d)",
                         output ? "output" : "input", i, n - 1);
    const kiln_value *v = &g->values[output ? g->outputs[i] : g->inputs[i]];
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->dtype = v->dtype;
    out->ndim = v->ndim > KILN_MAX_DIMS ? -1 : v->ndim;
    for (int d = 0; d < out->ndim; d++)
        out->dims[d] = v->dims[d].value >= 0 && !v->dims[d].param ? v->dims[d].value : -1;
    return KILN_OK;
}

int kiln_engine_num_profiles(kiln_engine_t e) { return e ? e->n_profiles : 0; }

kiln_status kiln_engine_profile_shape(kiln_engine_t e, int p, const char *input, int *ndim, int64_t *min,
                                      int64_t *opt, int64_t *max)
{
    if (!e || !input || !ndim || !min || !opt || !max)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_profile_shape: NULL argument");
    if (p < 0 || p >= e->n_profiles)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_profile_shape: profile %d out of range (%d profiles)", p,
                         e->n_profiles);
    const kiln_profile_dims *pd = &e->profiles[p];
    for (int k = 0; k < pd->n_inputs; k++)
        if (!strcmp(pd->names[k], input)) {
            *ndim = pd->ndim[k];
            memcpy(min, pd->min[k], sizeof(int64_t) * (size_t)pd->ndim[k]);
            memcpy(opt, pd->opt[k], sizeof(int64_t) * (size_t)pd->ndim[k]);
            memcpy(max, pd->max[k], sizeof(int64_t) * (size_t)pd->ndim[k]);
            return KILN_OK;
        }
    return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_profile_shape: input '%s' not in profile %d", input, p);
}
