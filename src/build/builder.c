/* The builder: clones the model graph, runs the optimization passes, attaches profiles and a
 * build manifest, and yields an engine. Output is deterministic for the same model and options
 * (no wall-clock time is recorded unless SOURCE_DATE_EPOCH or KILN_BUILD_TIMESTAMP is set). */
#include "build.h"
#include "../engine/bytes.h"
#include "../engine/graph_ser.h"
#include "precision.h"
#include "../passes/passes.h"
#include "../runtime/exec.h"
#include "../runtime/layers.h"
#include "../runtime/model.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#define KILN_BUILD_RUN_BUDGET_S 60.0   /* default time budget of the builder's own runs */

/* Deep copy through the serializer; also yields a content hash of the source graph. */
static kiln_status clone_graph(const kiln_graph *src, kiln_graph **out, char *hash, size_t hlen)
{
    kiln_wbuf gw = {0}, ww = {0};
    kiln_status st = kiln__graph_write(&gw, &ww, src);
    if (st == KILN_OK) {
        uLong c1 = crc32(0L, gw.p, (uInt)gw.len), c2 = adler32(1L, gw.p, (uInt)gw.len);
        uLong c3 = crc32(0L, Z_NULL, 0);
        for (size_t off = 0; off < ww.len; off += 1u << 30)
            c3 = crc32(c3, ww.p + off, (uInt)(ww.len - off > (1u << 30) ? (1u << 30) : ww.len - off));
        snprintf(hash, hlen, "%08lx%08lx%08lx-%zu", c1, c2, c3, gw.len + ww.len);
        kiln_rbuf r = {.p = gw.p, .len = gw.len, .what = "graph"}, w = {.p = ww.p, .len = ww.len, .what = "weights"};
        st = kiln__graph_read(&r, &w, NULL, 0, out);
    }
    kiln__w_free(&gw);
    kiln__w_free(&ww);
    return st;
}

static kiln_status set_profiles(struct kiln_engine *e, const kiln_build_options *o)
{
    if (!o || o->num_profiles <= 0)
        return KILN_OK;
    if (!o->profiles || o->num_profiles > 64)
        return kiln__err(KILN_ERR_INVALID_ARG, "invalid optimization profiles");
    e->profiles = kiln__calloc((size_t)o->num_profiles, sizeof *e->profiles);
    if (!e->profiles)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    const kiln_graph *g = e->g;
    for (int p = 0; p < o->num_profiles; p++) {
        const kiln_profile *pr = &o->profiles[p];
        kiln_profile_dims *pd = &e->profiles[p];
        e->n_profiles = p + 1;
        int n = pr->num_ranges;
        if (n < 0 || n > 4096 || (n && !pr->ranges))
            return kiln__err(KILN_ERR_INVALID_ARG, "profile %d: invalid ranges", p);
        pd->names = kiln__calloc((size_t)n + 1, sizeof(char *));
        pd->ndim = kiln__calloc((size_t)n + 1, sizeof(int));
        pd->min = kiln__calloc((size_t)n + 1, sizeof *pd->min);
        pd->opt = kiln__calloc((size_t)n + 1, sizeof *pd->opt);
        pd->max = kiln__calloc((size_t)n + 1, sizeof *pd->max);
        if (!pd->names || !pd->ndim || !pd->min || !pd->opt || !pd->max)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n; i++) {
            const kiln_shape_range *r = &pr->ranges[i];
            int k = -1;
            for (int j = 0; j < g->n_inputs; j++)
                if (r->input && !strcmp(g->values[g->inputs[j]].name, r->input))
                    k = j;
            if (k < 0)
                return kiln__err(KILN_ERR_INVALID_ARG, "profile %d: model has no input named '%s'", p,
                                 r->input ? r->input : "(null)");
            const kiln_value *v = &g->values[g->inputs[k]];
            if (r->ndim < 0 || r->ndim > KILN_MAX_DIMS || (v->ndim >= 0 && v->ndim != r->ndim))
                return kiln__err(KILN_ERR_SHAPE, "profile %d: input '%s' has rank %d, the profile gives rank %d", p,
                                 r->input, v->ndim, r->ndim);
            for (int d = 0; d < r->ndim; d++) {
                if (r->min[d] < 0 || r->min[d] > r->opt[d] || r->opt[d] > r->max[d])
                    return kiln__err(KILN_ERR_SHAPE, "profile %d: input '%s' dim %d needs 0 <= min <= opt <= max", p,
                                     r->input, d);
                if (v->ndim > 0 && v->dims[d].value >= 0 && !v->dims[d].param &&
                    (r->min[d] != v->dims[d].value || r->max[d] != v->dims[d].value))
                    return kiln__err(KILN_ERR_SHAPE, "profile %d: input '%s' dim %d is fixed to %lld by the model", p,
                                     r->input, d, (long long)v->dims[d].value);
                pd->min[i][d] = r->min[d];
                pd->opt[i][d] = r->opt[d];
                pd->max[i][d] = r->max[d];
            }
            pd->ndim[i] = r->ndim;
            pd->names[i] = kiln__strdup(r->input);
            pd->n_inputs = i + 1;
            if (!pd->names[i])
                return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
    }
    return KILN_OK;
}

static char *make_manifest(const char *hash, const kiln_build_options *o, const kiln_pass_report *rep, bool optimized)
{
    json_t *m = json_object();
    json_object_set_new(m, "kiln_version", json_string(KILN_VERSION_STRING));
    json_object_set_new(m, "format_version", json_integer(KILN_ENGINE_FORMAT_VERSION));
    json_object_set_new(m, "model_hash", json_string(hash));
    json_t *opts = json_object();
    json_object_set_new(opts, "optimize", json_boolean(optimized));
    json_object_set_new(opts, "profiles", json_integer(o ? o->num_profiles : 0));
    json_object_set_new(opts, "timing_cache", o && o->timing_cache ? json_string(o->timing_cache) : json_null());
    /* what the engine's layers were prepared for: "cpu" (packed weights in the CPU kernels' layouts,
     * each blob tagged with the ISA it needs) or "cuda" (weights as the model has them, in the
     * requested precision; GPU algorithms are chosen per context at run time, docs/CUDA.md) */
    json_object_set_new(opts, "target", json_string(o && o->device == KILN_DEVICE_CUDA ? "cuda" : "cpu"));
    if (o && o->float_activations && strcmp(o->float_activations, "fp32"))   /* GPU INT8 engines' half activations */
        json_object_set_new(opts, "float_activations", json_string(o->float_activations));
    json_object_set_new(m, "options", opts);
    const char *epoch = getenv("SOURCE_DATE_EPOCH");
    if (!epoch)
        epoch = getenv("KILN_BUILD_TIMESTAMP");
    if (epoch) {
        time_t t = (time_t)strtoll(epoch, NULL, 10);
        if (t == 0 && strcmp(epoch, "0") != 0)
            t = time(NULL);
        char buf[64];
        strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
        json_object_set_new(m, "build_time", json_string(buf));
    }
    if (optimized && rep) {
        json_t *passes = json_array();
        for (int i = 0; i < rep->n; i++) {
            json_t *p = json_object();
            json_object_set_new(p, "pass", json_string(rep->entry[i].name));
            json_object_set_new(p, "changed", json_integer(rep->entry[i].changed));
            json_array_append_new(passes, p);
        }
        json_object_set_new(m, "passes", passes);
        json_object_set_new(m, "nodes_before", json_integer(rep->nodes_before));
        json_object_set_new(m, "nodes_after", json_integer(rep->nodes_after));
    }
    char *s = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(m);
    char *r = s ? kiln__strdup(s) : NULL;
    free(s);
    return r;
}

static char *make_report(const kiln_pass_report *rep, const kiln_calib_result *cr, const kiln_plan *plan)
{
    size_t cap = 512 + (size_t)rep->n * 64;
    char *s = kiln__malloc(cap);
    if (!s)
        return NULL;
    size_t o = (size_t)snprintf(s, cap, "%-26s %s\n", "pass", "nodes changed");
    for (int i = 0; i < rep->n && o < cap; i++)
        o += (size_t)snprintf(s + o, cap - o, "%-26s %d\n", rep->entry[i].name, rep->entry[i].changed);
    if (o < cap)
        o += (size_t)snprintf(s + o, cap - o, "nodes: %d -> %d\n", rep->nodes_before, rep->nodes_after);
    if (o < cap && cr->calibrated)
        snprintf(s + o, cap - o, "tactics: %d layers timed, %d from the timing cache\n"
                                 "memory plan: %.2f MB arena for %.2f MB of intermediates (%s)\n",
                 cr->tuned, cr->from_cache, plan->arena_size / 1e6, plan->naive_bytes / 1e6,
                 cr->inferred ? "sizes from shape inference" : "sizes from a run");
    else if (o < cap && cr->skipped[0])   /* shapes there were, but they could not be used */
        snprintf(s + o, cap - o, "tactics/memory plan: none (%s)\n", cr->skipped);
    else if (o < cap)
        snprintf(s + o, cap - o, "tactics/memory plan: no fixed calibration shapes (give a profile)\n");
    return s;
}

/* Constant folding evaluates nodes with the reference kernels (passes know no backend). */
/* A layer with low-bit weights (FP8 / NVFP4 / MXFP4 / INT4): packed at build time in device engines too.
 * The CUDA module runs FP8 (per-tensor scale) and 4-bit layers from that blob (kiln_devmod.reads_blob), and
 * a layer it does not take falls back to the CPU, which reads the same blob. */
static bool packed_lowbit(const kiln_node *n)
{
    kiln__qfmt f;
    return kiln__lowbit_parse(kiln__attr_s(n, KILN_ATTR_WQ, NULL), &f);
}

static kiln_status eval_node(void *user, const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out)
{
    (void)user;
    kiln_kernel_fn k = kiln__ref_kernel(n->op);
    kiln_tensor *outp[16];
    if (!k || n->n_out > 16)
        return kiln__err(KILN_ERR_UNSUPPORTED, "no kernel to evaluate %s", n->op_type);
    for (int o = 0; o < n->n_out; o++)
        outp[o] = &out[o];
    /* no runtime services: outputs on the heap, single-threaded, no subgraphs (control flow is not folded) */
    kiln_kctx ctx = {.node = n, .n_in = n->n_in, .in = in, .n_out = n->n_out, .out = outp, .nthreads = 1};
    return k(&ctx);
}

const kiln_pass_ctx *kiln__builder_pass_ctx(void)
{
    static const kiln_pass_ctx pc = {.eval_node = eval_node};
    return &pc;
}

/* With fixed input shapes: Shape/Size become constants (by shape inference, no run), then the
 * pipeline runs again so the shape-computing chains fold away. */
static kiln_status fold_shapes(struct kiln_engine *e, kiln_pass_report *rep)
{
    kiln_tensor *meta = kiln__calloc((size_t)e->g->n_inputs + 1, sizeof *meta);
    if (!meta)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    if (!kiln__builder_input_shapes(e, meta)) {
        kiln__free(meta);
        return KILN_OK;
    }
    /* folding unlocks more folding (a Slice bound computed from a Shape becomes constant, so its
     * output shape no longer depends on data): repeat until nothing changes */
    int total = 0;
    kiln_status st = KILN_OK;
    for (int round = 0; round < 200 && st == KILN_OK; round++) {
        int changed = 0;
        st = kiln__pass_fold_shapes(e->g, meta, &changed);
        if (getenv("KILN_DEBUG_SHAPES"))
            fprintf(stderr, "fold-shapes round %d: %d folded (%s)\n", round, changed, kiln_status_str(st));
        if (st != KILN_OK || !changed)
            break;
        total += changed;
        kiln_pass_report again;
        st = kiln__optimize(e->g, kiln__builder_pass_ctx(), &again);
        for (int i = 0; st == KILN_OK && i < again.n && i < rep->n; i++)
            rep->entry[i].changed += again.entry[i].changed;
    }
    kiln__free(meta);
    if (st != KILN_OK || !total)
        return st;
    if (rep->n < 64) {
        rep->entry[rep->n].name = "fold-shapes";
        rep->entry[rep->n].changed = total;
        rep->n++;
    }
    rep->nodes_after = e->g->n_nodes;
    return KILN_OK;
}

/* A pass the builder runs after the precision decisions (not in the default pipeline), then dead-nodes (when dce:
 * weights it replaced), reported under the pass's name. */
static kiln_status build_pass(kiln_graph *g, const kiln_pass_info *p, bool dce, kiln_pass_report *rep)
{
    static const kiln_pass_info dead = {"dead-nodes", kiln__pass_dead_nodes};
    int changed = 0, dropped = 0;
    KILN_TRY(kiln__pass_run(p, g, kiln__builder_pass_ctx(), &changed));
    if (changed && dce)
        KILN_TRY(kiln__pass_run(&dead, g, kiln__builder_pass_ctx(), &dropped));
    if (changed && rep->n < 64) {
        rep->entry[rep->n].name = p->name;
        rep->entry[rep->n].changed = changed;
        rep->n++;
        rep->nodes_after = g->n_nodes;
    }
    return KILN_OK;
}

/* CPU engines: a 1x1 conv shortcut summed into the block's last conv (FusedConvSum, passes/p_shortcut.c), once the
 * precision decisions are made (it fuses float32 convolutions only); the separate weights dropped after. */
static const kiln_pass_info fuse_shortcut = {"fuse-shortcut", kiln__pass_fuse_shortcut};
/* Device engines: an INT8 block's last convolution and its residual QLinearAdd as one QLinearConvAdd
 * (passes/p_qres.c), whose GPU epilogue adds the residual while the convolution's output is in registers. */
static const kiln_pass_info fuse_qconv_add = {"fuse-qconv-add", kiln__pass_fuse_qconv_add};
static const kiln_pass_info fuse_qconv_once = {"fuse-qconv-once", kiln__pass_fuse_qconv_once};
/* Device engines: a network's stem, its max pool and the pool's quantization as one FusedConvPool (passes/p_convpool.c),
 * one kernel on the GPU. */
static const kiln_pass_info fuse_conv_pool = {"fuse-conv-pool", kiln__pass_fuse_conv_pool};
/* An INT8 value's DequantizeLinear -> elementwise float ops -> QuantizeLinear as one 256-byte table (QLookup,
 * passes/p_qlookup.c), after the precision decisions: CPU engines, and device engines unless KILN_QLOOKUP=0 at build
 * time (the CUDA module's QLookup, cuda_int8.c acc_qlookup: PP-OCRv4 det int8 on an H100 1.9 ms a run against 7.6 with
 * the tables' layers as CPU round trips, session 44). */
static const kiln_pass_info fold_qdq_lookup = {"fold-qdq-lookup", kiln__pass_fold_qdq_lookup};
static bool qlookup_on_device(void)
{
    const char *v = getenv("KILN_QLOOKUP");
    return !(v && !strcmp(v, "0"));
}

/* Moves the calibration plan (and the shapes it is valid for) into the engine. */
static kiln_status adopt_plan(struct kiln_engine *e, kiln_calib_result *cr)
{
    e->plan_ndim = kiln__calloc((size_t)cr->n_inputs + 1, sizeof(int));
    e->plan_dims = kiln__calloc((size_t)cr->n_inputs + 1, sizeof *e->plan_dims);
    if (!e->plan_ndim || !e->plan_dims || cr->n_inputs > KILN_MAX_CALIB_INPUTS)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    e->plan_n_inputs = cr->n_inputs;
    for (int i = 0; i < cr->n_inputs; i++) {
        e->plan_ndim[i] = cr->ndim[i];
        memcpy(e->plan_dims[i], cr->dims[i], sizeof cr->dims[i]);
    }
    e->plan = cr->plan;
    memset(&cr->plan, 0, sizeof cr->plan);
    e->has_plan = true;
    return KILN_OK;
}

/* The options' counts, enums and paths that no later step would refuse (each of these built silently before) */
static kiln_status check_options(const kiln_build_options *o)
{
    if (!o)
        return KILN_OK;
    if (o->num_profiles < 0 || o->num_layer_precisions < 0 || o->num_allow < 0)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_build: invalid number of options (a negative count: num_profiles "
                         "%d, num_layer_precisions %d, num_allow %d)", o->num_profiles, o->num_layer_precisions,
                         o->num_allow);
    if (o->device != KILN_DEVICE_CPU && o->device != KILN_DEVICE_CUDA)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_build: unknown device %d", (int)o->device);
    if (o->timing_cache) {   /* written at the end of a build that timed something: its directory must exist */
        const char *slash = strrchr(o->timing_cache, '/');
        char dir[4096];
        struct stat sb;
        if (!o->timing_cache[0])
            return kiln__err(KILN_ERR_INVALID_ARG, "kiln_build: empty timing cache path");
        if (slash && slash != o->timing_cache) {
            size_t n = (size_t)(slash - o->timing_cache);
            if (n >= sizeof dir)
                return kiln__err(KILN_ERR_INVALID_ARG, "kiln_build: timing cache path too long");
            memcpy(dir, o->timing_cache, n);
            dir[n] = 0;
            if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
                return kiln__err(KILN_ERR_IO, "timing cache '%s': its directory does not exist", o->timing_cache);
        }
    }
    return KILN_OK;
}

kiln_status kiln_build(kiln_model_t m, kiln_build_options *o, kiln_engine_t *out)
{
    if (!m || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_build: NULL argument");
    *out = NULL;
    if (o)
        o->report = o->precision_report = NULL;
    KILN_TRY(check_options(o));
    KILN_TRY(kiln__float_activations_check(o));
    if (kiln__fp8_wq_applies(o))   /* fp8: the weight-scale recipe measured per model (precision_wq.c) */
        return kiln__build_fp8(m, o, out);
    if (!o || !o->precision || strcmp(o->precision, "auto"))
        return kiln__build_planned(m, o, NULL, out);
    /* --precision auto: the planner measures and chooses each layer's precision (precision_plan.c) */
    const char **req = NULL;
    char *report = NULL;
    kiln_calibration_t cal = NULL;
    kiln_status st = kiln__plan_auto(m, o, &req, &report, &cal);
    if (st == KILN_OK) {
        kiln_build_options fo = *o;
        fo.precision = NULL;
        kiln_prec_plan plan = {.n_nodes = m->g->n_nodes, .req = req, .mark_auto = true, .cal = cal, .report = report};
        st = kiln__build_planned(m, &fo, &plan, out);
        o->report = fo.report;
        o->precision_report = fo.precision_report;
    } else if (report) {
        o->precision_report = report;   /* what the planner found (an unmet budget) */
        report = NULL;
    }
    kiln__free(req);
    kiln__free(report);
    kiln_calibration_free(cal);
    return st;
}

kiln_status kiln__build_planned(kiln_model_t m, kiln_build_options *o, const kiln_prec_plan *plan, kiln_engine_t *out)
{
    *out = NULL;
    if (o)
        o->report = o->precision_report = NULL;
    KILN_TRY(kiln__graph_check_supported(m->g));
    struct kiln_engine *e = kiln__calloc(1, sizeof *e);
    if (!e)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    e->target_kind = KILN_TARGET_CPU;
    e->target_arch = KILN_ISA_X86_64;   /* kernels pick AVX2/AVX-512 at run time */
    char hash[64];
    kiln_pass_report rep;
    memset(&rep, 0, sizeof rep);
    bool optimize = !(o && o->no_optimize);
    kiln_status st = clone_graph(m->g, &e->g, hash, sizeof hash);
    if (st == KILN_OK)
        st = set_profiles(e, o);
    if (st == KILN_OK)
        st = kiln__precision_before_passes(e->g, m, o, plan);
    if (st == KILN_OK && optimize)
        st = kiln__optimize(e->g, kiln__builder_pass_ctx(), &rep);
    /* each run the builder makes on its own gets the time budget */
    double budget = !o || o->run_budget_s == 0 ? KILN_BUILD_RUN_BUDGET_S : o->run_budget_s;
    kiln_run_ctl ctl = kiln__run_ctl(NULL, budget);
    if (st == KILN_OK && optimize && kiln__engine_shapes_fixed(e))
        st = fold_shapes(e, &rep);
    if (st == KILN_OK)
        st = kiln__precision_after_passes(e->g, o);
    /* a device engine's plan leaves out the CPU-only in-place FusedConv over its residual (a CUDA context would
     * not take such a plan and would plan again at its first run) */
    bool device = o && o->device != KILN_DEVICE_CPU;
    if (st == KILN_OK && optimize && !device)
        st = build_pass(e->g, &fuse_shortcut, true, &rep);
    if (st == KILN_OK && optimize && (!device || qlookup_on_device()))
        st = build_pass(e->g, &fold_qdq_lookup, true, &rep);
    if (st == KILN_OK && optimize && device)
        st = build_pass(e->g, &fuse_qconv_add, false, &rep);
    if (st == KILN_OK && optimize && device)
        st = build_pass(e->g, &fuse_conv_pool, false, &rep);
    /* CPU engines: the implicit INT8 blocks one rounding fuses (the same function as a device engine's layer) */
    if (st == KILN_OK && optimize && !device)
        st = build_pass(e->g, &fuse_qconv_once, false, &rep);
    if (st == KILN_OK)
        st = kiln__precision_half_report(e->g, o);
    ctl = kiln__run_ctl(NULL, budget);
    kiln_calib_result cr;
    memset(&cr, 0, sizeof cr);
    /* tactics are the CPU kernels' (threads per layer): a device engine's layers choose their kernels on the GPU at
     * their first run, so its build times none (and sizes its plan by shape inference: no run of the model) */
    if (st == KILN_OK)
        st = kiln__builder_calibrate(e, o ? o->timing_cache : NULL, o ? o->num_threads : 0,
                                     !(o && o->no_tactics) && !device, !device, &cr, &ctl);
    if (st == KILN_OK && cr.calibrated)
        st = adopt_plan(e, &cr);
    /* the layer plan: each layer prepared once, weights packed for the engine (--no-optimize keeps
     * the model's graph and weights as they are: no plan, layers prepared on the fly). Device engines keep
     * their weights as they are but for low-bit (FP8, 4-bit) layers, whose packed weights the CUDA module
     * runs from */
    if (st == KILN_OK && optimize)
        st = kiln__layers_prepare(e, kiln__cpu_backend(), device ? packed_lowbit : NULL);
    if (st == KILN_OK && !(e->manifest = make_manifest(hash, o, &rep, optimize)))
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
    if (st == KILN_OK && o && o->want_report)
        o->report = make_report(&rep, &cr, &e->plan);
    kiln__plan_free(&cr.plan);
    if (st != KILN_OK) {
        kiln_engine_free(e);
        return st;
    }
    *out = e;
    return KILN_OK;
}
