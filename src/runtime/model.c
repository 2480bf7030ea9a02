/* Public model API: load an ONNX model, inspect its interface, run it. */
#include "model.h"
#include "exec.h"
#include "device.h"
#include <stdio.h>

kiln_status kiln_model_load_buffer(const void *buf, size_t len, const char *base_dir, kiln_model_t *out)
{
    if (!buf || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_model_load_buffer: NULL argument");
    *out = NULL;
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    if (!m)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = kiln__onnx_import(buf, len, base_dir, &m->g, &m->info);
    if (st != KILN_OK) {
        kiln__free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

kiln_status kiln_model_load(const char *path, kiln_model_t *out)
{
    if (!path || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_model_load: NULL argument");
    *out = NULL;
    void *buf;
    size_t len;
    KILN_TRY(kiln__read_file(path, &buf, &len));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    kiln_status st = kiln_model_load_buffer(buf, len, dir, out);
    if (st != KILN_OK)
        kiln__err_prefix("%s", path);
    kiln__free(buf);
    return st;
}

void kiln_model_free(kiln_model_t m)
{
    if (!m)
        return;
    kiln__graph_free(m->g);
    kiln__free(m->info.producer);
    kiln__free(m);
}

int kiln_model_num_inputs(kiln_model_t m) { return m ? m->g->n_inputs : 0; }
int kiln_model_num_outputs(kiln_model_t m) { return m ? m->g->n_outputs : 0; }

const char *kiln_model_input_name(kiln_model_t m, int i)
{
    return m && i >= 0 && i < m->g->n_inputs ? m->g->values[m->g->inputs[i]].name : NULL;
}

const char *kiln_model_output_name(kiln_model_t m, int i)
{
    return m && i >= 0 && i < m->g->n_outputs ? m->g->values[m->g->outputs[i]].name : NULL;
}

kiln_status kiln_model_check_supported(kiln_model_t m)
{
    if (!m)
        return kiln__err(KILN_ERR_INVALID_ARG, "NULL model");
    return kiln__graph_check_supported(m->g);
}

kiln_status kiln__graph_check_supported(const kiln_graph *g)
{
    char buf[3072] = "";
    int n = kiln__list_unsupported(g, buf, sizeof buf);
    if (n)
        return kiln__err(KILN_ERR_UNSUPPORTED, "%d node%s without a kernel: %s", n, n > 1 ? "s" : "", buf);
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        if (v->kind != KILN_VAL_TENSOR)
            return kiln__err(KILN_ERR_UNSUPPORTED, "input '%s' is a sequence/map/optional; kiln supports tensors only",
                             v->name);
    }
    return KILN_OK;
}

/* Checks a fed tensor against the declared type of the input it feeds. */
kiln_status kiln__check_input(const kiln_value *v, const kiln_tensor *t)
{
    if (!t || (!t->data && kiln_tensor_numel(t) != 0))
        return kiln__err(KILN_ERR_INVALID_ARG, "input '%s': no data", v->name);
    if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS || kiln_tensor_numel(t) < 0)
        return kiln__err(KILN_ERR_SHAPE, "input '%s': invalid shape", v->name);
    if (v->dtype != KILN_DT_UNDEFINED && t->dtype != v->dtype)
        return kiln__err(KILN_ERR_DTYPE, "input '%s' expects %s but got %s", v->name, kiln_dtype_name(v->dtype),
                         kiln_dtype_name(t->dtype));
    size_t need = (size_t)kiln_tensor_numel(t) * kiln_dtype_size(t->dtype);
    if (kiln_dtype_size(t->dtype) == 0)
        return kiln__err(KILN_ERR_DTYPE, "input '%s': dtype %s is not supported", v->name, kiln_dtype_name(t->dtype));
    if (t->nbytes && t->nbytes < need)
        return kiln__err(KILN_ERR_SHAPE, "input '%s': buffer has %zu bytes, shape needs %zu", v->name, t->nbytes, need);
    if (v->ndim >= 0) {
        if (v->ndim != t->ndim)
            return kiln__err(KILN_ERR_SHAPE, "input '%s' expects rank %d but got rank %d", v->name, v->ndim, t->ndim);
        for (int d = 0; d < v->ndim; d++)
            if (v->dims[d].value >= 0 && !v->dims[d].param && v->dims[d].value != t->dims[d])
                return kiln__err(KILN_ERR_SHAPE, "input '%s' dimension %d must be %lld but got %lld", v->name, d,
                                 (long long)v->dims[d].value, (long long)t->dims[d]);
    }
    return KILN_OK;
}

kiln_status kiln_model_run(kiln_model_t m, int num_inputs, const char *const *input_names,
                           const kiln_tensor *inputs, const kiln_run_options *opts, int *num_outputs,
                           kiln_tensor **outputs)
{
    if (!m)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_model_run: NULL model");
    return kiln__graph_run_named(m->g, NULL, num_inputs, input_names, inputs, opts, num_outputs, outputs);
}

kiln_status kiln__graph_run_named(const kiln_graph *g, const kiln_layer *layers, int num_inputs,
                                  const char *const *input_names,
                                  const kiln_tensor *inputs, const kiln_run_options *opts, int *num_outputs,
                                  kiln_tensor **outputs)
{
    return kiln__graph_run_hooked(g, layers, num_inputs, input_names, inputs, opts, NULL, num_outputs, outputs);
}

kiln_status kiln__graph_run_hooked(const kiln_graph *g, const kiln_layer *layers, int num_inputs,
                                   const char *const *input_names, const kiln_tensor *inputs,
                                   const kiln_run_options *opts, const kiln_hooks *hooks, int *num_outputs,
                                   kiln_tensor **outputs)
{
    if (!g || !outputs || !num_outputs || (num_inputs > 0 && (!input_names || !inputs)))
        return kiln__err(KILN_ERR_INVALID_ARG, "run: NULL argument");
    if (num_inputs < 0)
        return kiln__err(KILN_ERR_INVALID_ARG, "run: negative number of inputs (%d)", num_inputs);
    *outputs = NULL;
    *num_outputs = 0;
    KILN_TRY(kiln__graph_check_supported(g));
    kiln_status st = KILN_OK;
    const kiln_tensor **feed = kiln__calloc((size_t)g->n_inputs + 1, sizeof *feed);
    kiln_tensor *outs = kiln__calloc((size_t)g->n_outputs + 1, sizeof *outs);
    kiln_tensor *fed = kiln__calloc((size_t)g->n_inputs + 1, sizeof *fed);
    if (!feed || !outs || !fed) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < num_inputs; i++) {
        int k = -1;
        for (int j = 0; j < g->n_inputs; j++)
            if (input_names[i] && strcmp(g->values[g->inputs[j]].name, input_names[i]) == 0)
                k = j;
        if (k < 0) {
            st = kiln__err(KILN_ERR_INVALID_ARG, "model has no input named '%s'", input_names[i] ? input_names[i] : "(null)");
            goto fail;
        }
        if (feed[k]) {   /* the same input given twice: one of them would be dropped silently */
            st = kiln__err(KILN_ERR_INVALID_ARG, "input '%s' given twice", input_names[i]);
            goto fail;
        }
        st = kiln__check_input(&g->values[g->inputs[k]], &inputs[i]);
        if (st != KILN_OK)
            goto fail;
        fed[k] = inputs[i];   /* shallow copy with nbytes made exact */
        fed[k].nbytes = (size_t)kiln_tensor_numel(&inputs[i]) * kiln_dtype_size(inputs[i].dtype);
        feed[k] = &fed[k];
    }
    for (int j = 0; j < g->n_inputs; j++)
        if (!feed[j]) {
            st = kiln__err(KILN_ERR_INVALID_ARG, "input '%s' was not given", g->values[g->inputs[j]].name);
            goto fail;
        }
    kiln_pool *pool = kiln__pool_create(opts ? opts->num_threads : 0);
    if (!pool) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory creating a thread pool");
        goto fail;
    }
    kiln_run_ctl ctl = kiln__run_ctl(NULL, 0);
    kiln_run_env env = {.pool = pool, .nthreads = kiln__pool_threads(pool), .ctl = &ctl, .layers = layers,
                        .layers_of = g};
    kiln_dev *dev = NULL;   /* a device run: its own backend instance, weights copied for this run */
    if (opts && opts->device != KILN_DEVICE_CPU) {
        st = kiln__dev_open(opts->device, opts->device_flags, &dev);
        env.dev = dev;
        env.backend = dev ? kiln__dev_backend(dev) : NULL;
    }
    if (st == KILN_OK)
        st = kiln__exec_graph_ex(g, NULL, feed, outs, &env, 0, NULL, hooks);
    kiln__dev_close(dev);
    kiln__pool_free(pool);
    if (st != KILN_OK)
        goto fail;
    kiln__free(feed);
    kiln__free(fed);
    *outputs = outs;
    *num_outputs = g->n_outputs;
    return KILN_OK;
fail:
    kiln__free(feed);
    kiln__free(fed);
    kiln__free(outs);
    return st;
}
