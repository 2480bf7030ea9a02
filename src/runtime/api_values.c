/* Debugging runs (kiln_model_run_values, kiln_engine_run_values): a normal run through the
 * interpreter's observe hook, which hands every float value a top-level node produces to the
 * caller as float32; quantized outputs (QuantizeLinear, QLinearConv, QLinearMatMul, QGemm, and ops that
 * move quantized data without changing its scale) are dequantized with their constant scale and
 * zero point, so INT8 / FP8 layers compare against a float reference meaningfully. */
#include "model.h"
#include "exec.h"
#include "../engine/engine.h"
#include "../core/numfmt.h"
#include "layers.h"

/* Quantization parameters of an 8-bit (or FP8) value: the constant scale and zero point (zp may be
 * NULL) and the axis of a per-axis scale. */
typedef struct qparams {
    const kiln_tensor *scale, *zp;
    int64_t axis;
    kiln_dtype dt;         /* the quantized value's dtype */
} qparams;

typedef struct values_run {
    const kiln_graph *g;
    kiln_value_fn fn;
    void *user;
    qparams *q;            /* per value id: set for quantized values seen so far */
} values_run;

/* The constant tensor behind input k of n, or NULL (absent, or computed at run time). */
static const kiln_tensor *const_input(const kiln_graph *g, const kiln_node *n, int k)
{
    return k < n->n_in && n->in[k] >= 0 ? g->values[n->in[k]].init : NULL;
}

/* Ops that move or select quantized integers without changing their scale. */
static bool keeps_scale(kiln_op op)
{
    switch (op) {
    case KILN_OP_Reshape: case KILN_OP_Transpose: case KILN_OP_Flatten: case KILN_OP_Squeeze:
    case KILN_OP_Unsqueeze: case KILN_OP_MaxPool: case KILN_OP_Identity: case KILN_OP_Slice:
        return true;
    default:
        return false;
    }
}

/* The quantization parameters of output 0 of n: QuantizeLinear (scale, zero point = inputs 1, 2),
 * QLinearConv / QLinearMatMul / QLinearAdd (y_scale, y_zero_point = inputs 6, 7), QGemm (7, 8), kiln's QLinearConvAdd
 * (C_scale, C_zero_point = 12, 13; with kiln_res_once 6, 7), or an op that
 * keeps the scale of its quantized input 0 (per-tensor only: a per-axis scale may not follow a
 * reshape). */
static bool find_qparams(const values_run *r, const kiln_node *n, kiln_dtype out_dt, qparams *q)
{
    const kiln_graph *g = r->g;
    int si = -1;
    if (n->op == KILN_OP_QuantizeLinear)
        si = 1;
    else if (n->op == KILN_OP_QLinearConv || n->op == KILN_OP_QLinearMatMul || n->op == KILN_OP_QLinearAdd)
        si = 6;
    else if (n->op == KILN_OP_QGemm)   /* com.microsoft: y_scale, y_zero_point = inputs 7, 8 */
        si = 7;
    else if (n->op == KILN_OP_QLinearConvAdd)
        si = kiln__attr_i(n, "kiln_res_once", 0) == 1 ? 6 : 12;
    else if (n->op == KILN_OP_QLinearConvSum)   /* C_scale, C_zero_point */
        si = 6;
    else if (n->op == KILN_OP_FusedConvPool && n->n_in > 3 && n->in[3] >= 0)   /* y_scale, y_zero_point */
        si = 3;
    if (si > 0) {
        *q = (qparams){.scale = const_input(g, n, si), .zp = const_input(g, n, si + 1),
                       .axis = n->op == KILN_OP_QuantizeLinear ? kiln__attr_i(n, "axis", 1) : 0};
        bool zp_missing = si + 1 < n->n_in && n->in[si + 1] >= 0 && !q->zp;
        return q->scale && !zp_missing && (n->op != KILN_OP_QuantizeLinear || kiln__attr_i(n, "block_size", 0) == 0);
    }
    if (!keeps_scale(n->op) || n->n_in < 1 || n->in[0] < 0 || !r->q[n->in[0]].scale)
        return false;
    *q = r->q[n->in[0]];
    return kiln_tensor_numel(q->scale) == 1 && out_dt == q->dt;
}

/* y = (q - zero_point) * scale, per tensor or per axis; false when the parameters do not fit q. */
static bool dequantize(const qparams *p, const kiln_tensor *q, float *y)
{
    const kiln_tensor *sc = p->scale, *zp = p->zp;
    if (kiln_dtype_size(q->dtype) == 0 || kiln_dtype_size(sc->dtype) == 0 || (zp && kiln_dtype_size(zp->dtype) == 0))
        return false;
    int64_t ns = kiln_tensor_numel(sc), nq = kiln_tensor_numel(q), axis = p->axis, inner = 1, len = 1;
    if ((zp && kiln_tensor_numel(zp) != ns) || ns < 1)
        return false;
    if (ns > 1) {
        if (axis < 0)
            axis += q->ndim;
        if (axis < 0 || axis >= q->ndim || q->dims[axis] != ns)
            return false;
        for (int d = (int)axis + 1; d < q->ndim; d++)
            inner *= q->dims[d];
        len = ns;
    }
    for (int64_t i = 0; i < nq; i++) {
        int64_t c = (i / inner) % len;
        double z = zp ? kiln__get_f64(zp->dtype, zp->data, c) : 0;
        y[i] = (float)((kiln__get_f64(q->dtype, q->data, i) - z) * kiln__get_f64(sc->dtype, sc->data, c));
    }
    return true;
}

/* What a view of output o of node n says of where the value comes from (no dtype, quantization or data yet) */
static kiln_value_view view_of(const values_run *r, const kiln_node *n, int o)
{
    return (kiln_value_view){
        .name = r->g->values[n->out[o]].name,
        .node = n->name ? n->name : "",
        .op = n->op_type,
        .fused_from = n->fused_from ? n->fused_from : "",
        .input = n->n_in > 0 && n->in[0] >= 0 ? r->g->values[n->in[0]].name : NULL,
        .layer = (int)(n - r->g->nodes),
    };
}

static kiln_status report(values_run *r, const kiln_node *n, int o, const kiln_tensor *t)
{
    qparams qp = {0};
    bool coded = !kiln__dtype_is_float(t->dtype) || kiln__dtype_is_fp8(t->dtype);   /* int8/uint8, fp8 */
    bool quant = o == 0 && coded && find_qparams(r, n, t->dtype, &qp);
    if (quant) {
        qp.dt = t->dtype;
        r->q[n->out[0]] = qp;
    }
    else if (!kiln__dtype_is_float(t->dtype) || kiln_dtype_size(t->dtype) == 0)
        return KILN_OK;
    int64_t numel = kiln_tensor_numel(t);
    kiln_tensor f = *t;
    f.flags = KILN_TENSOR_BORROWED;
    float *buf = NULL;
    if (t->dtype != KILN_DT_FLOAT32) {
        if (numel < 0 || !(buf = kiln__calloc((size_t)numel + 1, sizeof *buf)))
            return kiln__err(KILN_ERR_NOMEM, "out of memory converting value '%s' to float", r->g->values[n->out[o]].name);
        bool ok = quant ? dequantize(&qp, t, buf) : kiln__convert(KILN_DT_FLOAT32, buf, t->dtype, t->data, numel) == KILN_OK;
        if (!ok) {
            kiln__free(buf);
            kiln_clear_last_error();
            return KILN_OK;
        }
        f.dtype = KILN_DT_FLOAT32;
        f.data = buf;
        f.nbytes = (size_t)numel * sizeof(float);
    }
    kiln_value_view v = view_of(r, n, o);
    v.quantizes = quant && n->op == KILN_OP_QuantizeLinear && n->in[0] >= 0 ? r->g->values[n->in[0]].name : NULL;
    v.dtype = t->dtype;
    v.value = &f;
    kiln_status st = r->fn(r->user, &v);
    kiln__free(buf);
    return st;
}

/* A value the device holds only as E4M3 (observe_host hands it as NULL): reported with value NULL */
static kiln_status report_unreadable(values_run *r, const kiln_node *n, int o)
{
    kiln_value_view v = view_of(r, n, o);
    v.dtype = KILN_DT_FLOAT32;
    return r->fn(r->user, &v);
}

static kiln_status observe(void *user, const kiln_node *n, const kiln_tensor *const *outputs)
{
    for (int o = 0; o < n->n_out; o++)
        if (n->out[o] >= 0)
            KILN_TRY(outputs[o] ? report(user, n, o, outputs[o]) : report_unreadable(user, n, o));
    return KILN_OK;
}

static kiln_status run_values(const kiln_graph *g, const kiln_layer *layers, int num_inputs, const char *const *input_names,
                              const kiln_tensor *inputs, const kiln_run_options *opts, kiln_value_fn fn, void *user)
{
    values_run r = {.g = g, .fn = fn, .user = user, .q = kiln__calloc((size_t)g->n_values + 1, sizeof *r.q)};
    if (!r.q)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    /* on a device run (opts->device) each value the device holds is copied to the host for the callback */
    kiln_hooks hooks = {.observe = observe, .observe_user = &r, .observe_host = true};
    kiln_tensor *outs = NULL;
    int nout = 0;
    kiln_status st = kiln__graph_run_hooked(g, layers, num_inputs, input_names, inputs, opts, &hooks, &nout, &outs);
    if (st == KILN_OK)
        kiln_tensors_free(outs, nout);
    kiln__free(r.q);
    return st;
}

kiln_status kiln_model_run_values(kiln_model_t m, int num_inputs, const char *const *input_names,
                                  const kiln_tensor *inputs, const kiln_run_options *opts, kiln_value_fn fn,
                                  void *user)
{
    if (!m || !fn)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_model_run_values: NULL argument");
    return run_values(m->g, NULL, num_inputs, input_names, inputs, opts, fn, user);
}

kiln_status kiln_engine_run_values(kiln_engine_t e, int num_inputs, const char *const *input_names,
                                   const kiln_tensor *inputs, const kiln_run_options *opts, kiln_value_fn fn,
                                   void *user)
{
    if (!e || !fn)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_run_values: NULL argument");
    if (num_inputs > 0 && (!input_names || !inputs))
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_run_values: NULL inputs");
    KILN_TRY(kiln__engine_check_profiles(e, num_inputs, input_names, inputs));
    kiln_layer *layers;   /* the engine's layer plan (prepared weights), as kiln_engine_run uses it */
    KILN_TRY(kiln__layers_restore(e, &layers));
    kiln_status st = run_values(e->g, layers, num_inputs, input_names, inputs, opts, fn, user);
    kiln__layers_release(layers, e->n_layers);
    return st;
}
