/* Per-tensor calibration statistics: pass 1 the largest |x|, pass 2 a histogram of |x| over
 * [0, amax]. Counts and maxima do not depend on the order in which batches arrive. */
#include "quant.h"
#include <math.h>

kiln_status kiln__stats_init(kiln_calib_stats *s, const kiln_graph *g)
{
    memset(s, 0, sizeof *s);
    s->pass = 1;
    s->slot = kiln__calloc((size_t)g->n_values + 1, sizeof *s->slot);
    if (!s->slot)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    /* activations: the graph inputs and what is computed from them (not constants, nor what is
     * computed from constants alone) */
    bool *act = kiln__calloc((size_t)g->n_values + 1, sizeof *act);
    if (!act)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_inputs; i++)
        act[g->inputs[i]] = true;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *nd = &g->nodes[i];
        bool a = false;
        for (int j = 0; j < nd->n_in; j++)
            a |= nd->in[j] >= 0 && act[nd->in[j]];
        for (int j = 0; j < nd->n_attr; j++)
            a |= nd->attrs[j].g || nd->attrs[j].graphs;   /* subgraphs may read activations by name */
        for (int o = 0; o < nd->n_out; o++)
            if (nd->out[o] >= 0)
                act[nd->out[o]] = a;
    }
    for (int v = 0; v < g->n_values; v++) {
        const kiln_value *val = &g->values[v];
        bool tracked = act[v] && !val->init && val->kind == KILN_VAL_TENSOR &&
                       (val->dtype == KILN_DT_UNDEFINED || kiln__dtype_is_float(val->dtype));
        s->slot[v] = tracked ? s->n++ : -1;
    }
    kiln__free(act);
    size_t n = (size_t)s->n + 1;
    s->value = kiln__calloc(n, sizeof *s->value);
    s->seen = kiln__calloc(n, sizeof *s->seen);
    s->amax = kiln__calloc(n, sizeof *s->amax);
    s->nonfinite = kiln__calloc(n, sizeof *s->nonfinite);
    s->hist = kiln__calloc(n * KILN_CALIB_BINS, sizeof *s->hist);
    if (!s->value || !s->seen || !s->amax || !s->nonfinite || !s->hist) {
        kiln__stats_free(s);
        return kiln__err(KILN_ERR_NOMEM, "out of memory for calibration statistics of %d tensors", g->n_values);
    }
    for (int v = 0; v < g->n_values; v++)
        if (s->slot[v] >= 0)
            s->value[s->slot[v]] = v;
    return KILN_OK;
}

void kiln__stats_free(kiln_calib_stats *s)
{
    kiln__free(s->slot);
    kiln__free(s->value);
    kiln__free(s->seen);
    kiln__free(s->amax);
    kiln__free(s->nonfinite);
    kiln__free(s->hist);
    memset(s, 0, sizeof *s);
}

kiln_status kiln__stats_add(kiln_calib_stats *s, int v, const kiln_tensor *t)
{
    int k = v >= 0 ? s->slot[v] : -1;
    if (k < 0 || !kiln__dtype_is_float(t->dtype))
        return KILN_OK;
    int64_t n = kiln_tensor_numel(t);
    const float *x = t->data;
    float *tmp = NULL;
    if (t->dtype != KILN_DT_FLOAT32 && n > 0) {   /* f16 / bf16 / f64 / fp8: through float32 */
        tmp = kiln__malloc((size_t)n * sizeof *tmp);
        if (!tmp)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        kiln_status st = kiln__convert(KILN_DT_FLOAT32, tmp, t->dtype, t->data, n);
        if (st != KILN_OK) {
            kiln__free(tmp);
            return st;
        }
        x = tmp;
    }
    s->seen[k] = true;
    if (s->pass == 1) {
        double m = s->amax[k];
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(x[i]))
                bad++;
            else if (fabs((double)x[i]) > m)
                m = fabs((double)x[i]);
        }
        s->amax[k] = m;
        s->nonfinite[k] += bad;
    } else {
        kiln__hist_add(s->hist + (size_t)k * KILN_CALIB_BINS, KILN_CALIB_BINS, s->amax[k], x, n);
    }
    kiln__free(tmp);
    return KILN_OK;
}
