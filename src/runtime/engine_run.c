/* Running an engine: interface getters, profile checks, execution. */
#include "../engine/engine.h"
#include "model.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int kiln_engine_num_inputs(kiln_engine_t e) { return e ? e->g->n_inputs : 0; }
int kiln_engine_num_outputs(kiln_engine_t e) { return e ? e->g->n_outputs : 0; }

const char *kiln_engine_input_name(kiln_engine_t e, int i)
{
    return e && i >= 0 && i < e->g->n_inputs ? e->g->values[e->g->inputs[i]].name : NULL;
}

const char *kiln_engine_output_name(kiln_engine_t e, int i)
{
    return e && i >= 0 && i < e->g->n_outputs ? e->g->values[e->g->outputs[i]].name : NULL;
}

bool kiln_is_engine_file(const char *path)
{
    /* non-blocking and regular files only, as every other reader: a FIFO must not hang the probe */
    int fd = path ? open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) : -1;
    if (fd < 0)
        return false;
    struct stat sb;
    char m[8];
    bool ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && pread(fd, m, 8, 0) == 8 &&
              memcmp(m, KILN_ENGINE_MAGIC, 8) == 0;
    close(fd);
    return ok;
}

/* A set of inputs must fit entirely inside at least one profile (when profiles exist). When none
 * fits, the error says why for every profile (an engine built with --shapes and a min/opt/max range
 * has two, and naming only the last one's range hid the other). */
kiln_status kiln__engine_check_profiles(const struct kiln_engine *e, int n, const char *const *names,
                                        const kiln_tensor *ts)
{
    if (e->n_profiles == 0)
        return KILN_OK;
    char why[1536] = "";
    size_t len = 0;
    for (int p = 0; p < e->n_profiles; p++) {
        const kiln_profile_dims *pd = &e->profiles[p];
        char one[384] = "";
        for (int k = 0; k < pd->n_inputs && !one[0]; k++) {
            const kiln_tensor *t = NULL;
            for (int i = 0; i < n; i++)
                if (names[i] && !strcmp(names[i], pd->names[k]))
                    t = &ts[i];
            if (!t)
                continue;
            if (t->ndim != pd->ndim[k]) {
                snprintf(one, sizeof one, "input '%s' has rank %d, profile %d expects %d", pd->names[k], t->ndim, p,
                         pd->ndim[k]);
                break;
            }
            for (int d = 0; d < t->ndim; d++)
                if (t->dims[d] < pd->min[k][d] || t->dims[d] > pd->max[k][d]) {
                    snprintf(one, sizeof one, "input '%s' dim %d = %lld is outside profile %d's range [%lld, %lld]",
                             pd->names[k], d, (long long)t->dims[d], p, (long long)pd->min[k][d],
                             (long long)pd->max[k][d]);
                    break;
                }
        }
        if (!one[0])
            return KILN_OK;
        if (len < sizeof why) {
            int w = snprintf(why + len, sizeof why - len, "%s%s", len ? "; " : "", one);
            len += w > 0 ? (size_t)w : 0;
        }
    }
    return kiln__err(KILN_ERR_SHAPE, "input shapes fit no optimization profile of this engine: %s", why);
}

kiln_status kiln_engine_run(kiln_engine_t e, int num_inputs, const char *const *input_names,
                            const kiln_tensor *inputs, const kiln_run_options *opts, int *num_outputs,
                            kiln_tensor **outputs)
{
    if (!e)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_run: NULL engine");
    if (num_inputs > 0 && (!input_names || !inputs))
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_run: NULL inputs");
    KILN_TRY(kiln__engine_check_profiles(e, num_inputs, input_names, inputs));
    return kiln__engine_run_named(e, num_inputs, input_names, inputs, opts, num_outputs, outputs);
}
