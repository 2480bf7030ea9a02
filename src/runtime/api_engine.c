/* Public engine introspection: interface types, profiles, manifest, memory plan, layers; and
 * per-context layer shapes and per-layer profiling. */
#include "api.h"
#include "model.h"
#include "../engine/engine.h"

#define NEED(x, fn, ret) do { if (!(x)) { kiln__err(KILN_ERR_INVALID_ARG, "%s: NULL argument", fn); return ret; } } while (0)

kiln_status kiln_engine_io_type(kiln_engine_t e, kiln_io io, int i, kiln_type_info *out)
{
    NEED(e, "kiln_engine_io_type", KILN_ERR_INVALID_ARG);
    return kiln__graph_io_type("kiln_engine_io_type", e->g, io, i, out);
}

kiln_status kiln_engine_io_dim(kiln_engine_t e, kiln_io io, int i, int d, int64_t *size, const char **name)
{
    NEED(e, "kiln_engine_io_dim", KILN_ERR_INVALID_ARG);
    return kiln__graph_io_dim("kiln_engine_io_dim", e->g, io, i, d, size, name);
}

int kiln_engine_num_profiles(kiln_engine_t e) { return e ? e->n_profiles : 0; }

int kiln_engine_profile_num_ranges(kiln_engine_t e, int profile)
{
    NEED(e, "kiln_engine_profile_num_ranges", -1);
    if (profile < 0 || profile >= e->n_profiles) {
        kiln__index_err("kiln_engine_profile_num_ranges", "profile", profile, e->n_profiles);
        return -1;
    }
    return e->profiles[profile].n_inputs;
}

kiln_status kiln_engine_profile_range(kiln_engine_t e, int profile, int k, kiln_shape_range *out)
{
    NEED(e && out, "kiln_engine_profile_range", KILN_ERR_INVALID_ARG);
    if (profile < 0 || profile >= e->n_profiles)
        return kiln__index_err("kiln_engine_profile_range", "profile", profile, e->n_profiles);
    const kiln_profile_dims *p = &e->profiles[profile];
    if (k < 0 || k >= p->n_inputs)
        return kiln__index_err("kiln_engine_profile_range", "range", k, p->n_inputs);
    memset(out, 0, sizeof *out);
    out->input = p->names[k];
    out->ndim = p->ndim[k];
    size_t sz = sizeof(int64_t) * (size_t)p->ndim[k];
    memcpy(out->min, p->min[k], sz);
    memcpy(out->opt, p->opt[k], sz);
    memcpy(out->max, p->max[k], sz);
    return KILN_OK;
}

const char *kiln_engine_manifest(kiln_engine_t e)
{
    NEED(e, "kiln_engine_manifest", NULL);
    return e->manifest;
}

kiln_status kiln_engine_memory_plan(kiln_engine_t e, bool *has_plan, size_t *arena_bytes, size_t *naive_bytes)
{
    NEED(e, "kiln_engine_memory_plan", KILN_ERR_INVALID_ARG);
    if (has_plan)
        *has_plan = e->has_plan;
    if (arena_bytes)
        *arena_bytes = e->has_plan ? e->plan.arena_size : 0;
    if (naive_bytes)
        *naive_bytes = e->has_plan ? e->plan.naive_bytes : 0;
    return KILN_OK;
}

int kiln_engine_num_layers(kiln_engine_t e)
{
    NEED(e, "kiln_engine_num_layers", -1);
    return e->g->n_nodes;
}

static const char *precision_name(int p)
{
    static const char *const names[] = {"fp32", "tf32", "fp16", "bf16", "int8", "fp8", "nvfp4", "int4", "mxfp4", "int16"};
    return p >= 0 && p < (int)(sizeof names / sizeof names[0]) ? names[p] : "?";
}

kiln_status kiln_engine_layer(kiln_engine_t e, int i, kiln_layer_info *out)
{
    NEED(e && out, "kiln_engine_layer", KILN_ERR_INVALID_ARG);
    if (i < 0 || i >= e->g->n_nodes)
        return kiln__index_err("kiln_engine_layer", "layer", i, e->g->n_nodes);
    const kiln_node *n = &e->g->nodes[i];
    *out = (kiln_layer_info){
        .name = n->name ? n->name : "",
        .op = n->op_type,
        .domain = n->domain && n->domain[0] ? n->domain : "ai.onnx",
        .fused_from = n->fused_from ? n->fused_from : "",
        .precision = precision_name(n->precision),
        .tactic = n->tactic ? n->tactic : "ref",
        .num_inputs = n->n_in,
        .num_outputs = n->n_out,
    };
    return KILN_OK;
}

kiln_status kiln_context_record_shapes(kiln_context_t c)
{
    NEED(c, "kiln_context_record_shapes", KILN_ERR_INVALID_ARG);
    kiln__context_replan_on_first_run(c);
    return KILN_OK;
}

kiln_status kiln_context_layer_type(kiln_context_t c, int i, kiln_io io, int k, kiln_type_info *out, bool *is_weight)
{
    NEED(c && out, "kiln_context_layer_type", KILN_ERR_INVALID_ARG);
    const kiln_graph *g = kiln__context_engine(c)->g;
    if (i < 0 || i >= g->n_nodes)
        return kiln__index_err("kiln_context_layer_type", "layer", i, g->n_nodes);
    if (io != KILN_IO_INPUT && io != KILN_IO_OUTPUT)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_layer_type: io %d is neither input nor output", (int)io);
    const kiln_node *n = &g->nodes[i];
    int cnt = io == KILN_IO_INPUT ? n->n_in : n->n_out;
    if (k < 0 || k >= cnt)
        return kiln__index_err("kiln_context_layer_type", io == KILN_IO_INPUT ? "input" : "output", k, cnt);
    int v = io == KILN_IO_INPUT ? n->in[k] : n->out[k];
    const kiln_tensor *meta = kiln__context_value_meta(c);
    const kiln_tensor *t = v < 0 ? NULL : g->values[v].init ? g->values[v].init : meta ? &meta[v] : NULL;
    memset(out, 0, sizeof *out);
    out->is_tensor = true;
    out->rank = -1;
    if (is_weight)
        *is_weight = v >= 0 && g->values[v].init;
    if (t && t->dtype != KILN_DT_UNDEFINED) {
        out->dtype = t->dtype;
        out->rank = t->ndim;
        memcpy(out->dims, t->dims, sizeof t->dims);
    }
    return KILN_OK;
}

kiln_status kiln_context_profile(kiln_context_t c, int runs, double *layer_ms)
{
    NEED(c && layer_ms, "kiln_context_profile", KILN_ERR_INVALID_ARG);
    if (runs < 1)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_context_profile: runs %d is not positive", runs);
    KILN_TRY(kiln__context_enable_profiling(c));   /* fresh accumulators */
    kiln_status st = KILN_OK;
    for (int r = 0; r < runs && st == KILN_OK; r++)
        st = kiln_context_run(c);
    if (st == KILN_OK) {
        const double *ns = kiln__context_node_ns(c);
        int n = kiln__context_engine(c)->g->n_nodes;
        for (int i = 0; i < n; i++)
            layer_ms[i] = ns[i] / 1e6 / runs;
    }
    kiln__context_disable_profiling(c);   /* the context's later runs untimed again */
    return st;
}
