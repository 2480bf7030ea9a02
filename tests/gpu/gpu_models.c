/* test_gpu: whole-model checks (CPU vs GPU, CUDA graph replays, second contexts, low-bit weight bytes). */
#include "gpu_harness.h"

/* ---- model checks */

/* One model check: the engine, a CPU and a CUDA context, their synthetic inputs. */
typedef struct model_run {
    const char *path;
    kiln_engine_t e;
    kiln_context_t cc, gc;   /* CPU, CUDA */
    kiln_tensor in[8];
    int nin;
    double worst;            /* max rel err over every comparison */
    double cos_min;          /* min cosine over every comparison */
} model_run;

/* Sets inputs in[0..nin) on contexts a and b (b may be NULL); the error, or NULL. */
static const char *set_inputs(const model_run *r, kiln_context_t a, kiln_context_t b, const kiln_tensor *in)
{
    for (int i = 0; i < r->nin; i++)
        if (kiln_context_set_input(a, kiln_engine_input_name(r->e, i), &in[i]) != KILN_OK ||
            (b && kiln_context_set_input(b, kiln_engine_input_name(r->e, i), &in[i]) != KILN_OK))
            return kiln_last_error();
    return NULL;
}

/* What a failed comparison saw: each tensor's dtype and dims, its NaN / Inf / zero counts and first values. */
static void describe_mismatch(const kiln_tensor *got, const kiln_tensor *want)
{
    const kiln_tensor *t[2] = {got, want};
    for (int k = 0; k < 2; k++) {
        char dims[80] = "";
        for (int d = 0, n = 0; d < t[k]->ndim && n < 64; d++)
            n += snprintf(dims + n, sizeof dims - (size_t)n, "%s%lld", d ? "x" : "", (long long)t[k]->dims[d]);
        int64_t n = kiln_tensor_numel(t[k]), nan = 0, inf = 0, zero = 0;
        const float *x = t[k]->dtype == KILN_DT_FLOAT32 ? t[k]->data : NULL;
        for (int64_t i = 0; x && i < n; i++) {
            nan += isnan(x[i]);
            inf += isinf(x[i]);
            zero += x[i] == 0.0f;
        }
        printf("       %s: dtype %d dims %s, %lld NaN, %lld Inf, %lld zeros of %lld; first %g %g %g %g\n",
               k ? "CPU" : "GPU", (int)t[k]->dtype, dims, (long long)nan, (long long)inf, (long long)zero,
               (long long)n, x && n > 0 ? x[0] : 0.0, x && n > 1 ? x[1] : 0.0, x && n > 2 ? x[2] : 0.0,
               x && n > 3 ? x[3] : 0.0);
    }
}

/* Compares every output of context c with the CPU context's, printing each with label. */
static void compare_outputs(model_run *r, kiln_context_t c, const char *label)
{
    for (int o = 0; o < kiln_engine_num_outputs(r->e); o++) {
        double err = compare(kiln_context_output(c, o), kiln_context_output(r->cc, o));
        double cs = cosine(kiln_context_output(c, o), kiln_context_output(r->cc, o));
        r->worst = fmax(r->worst, err);
        r->cos_min = fmin(r->cos_min, cs);
        if (label)
            printf("     %-28s %s output %-20s max rel err %.3g cosine %.6f\n", r->path, label,
                   kiln_engine_output_name(r->e, o), err, cs);
        if (!(err < 1.0) || cs < 0.5)
            describe_mismatch(kiln_context_output(c, o), kiln_context_output(r->cc, o));
    }
}

/* The first run plans memory, the second uses the arena, the third is captured as a CUDA graph,
 * the fourth replays it; *h2d_first: the bytes the first run copied to the GPU. */
static const char *model_runs(model_run *r, unsigned long long *h2d_first)
{
    for (int rep = 0; rep < 4; rep++) {
        if (kiln_context_run(r->gc) != KILN_OK)
            return kiln_last_error();
        if (rep == 0) {
            kiln_device_stats s1;
            kiln_context_device_stats(r->gc, &s1);
            *h2d_first = s1.h2d_bytes;
        }
        char label[16];
        snprintf(label, sizeof label, "run %d", rep + 1);
        compare_outputs(r, r->gc, label);
    }
    return NULL;
}

/* A replay on new inputs: the graph must read them, not the captured ones. Both contexts get the
 * first inputs back after. */
static const char *model_new_inputs(model_run *r, const kiln_synth_options *base)
{
    kiln_tensor in2[8] = {0};
    kiln_synth_options so2 = *base;
    so2.seed = 8;
    const char *why = kiln_engine_synth_inputs(r->e, &so2, in2) != KILN_OK ? kiln_last_error() : NULL;
    if (!why)
        why = set_inputs(r, r->cc, r->gc, in2);
    if (!why && (kiln_context_run(r->cc) != KILN_OK || kiln_context_run(r->gc) != KILN_OK))
        why = kiln_last_error();
    if (!why)
        compare_outputs(r, r->gc, "new inputs");
    if (!why)   /* the contexts below use the first inputs again */
        why = set_inputs(r, r->cc, r->gc, r->in);
    if (!why && kiln_context_run(r->cc) != KILN_OK)
        why = kiln_last_error();
    for (int i = 0; i < r->nin; i++)
        kiln_free(in2[i].data);
    return why;
}

/* Another batch size, then the first again: the run at the new shape replaces per-shape layer state (a Resize's tap
 * tables, a channels-last filter copy) that the first shape's captured CUDA graph may read, so the first shape's next
 * run must not replay that graph over freed memory (cu_state_put bumps mem_gen). Both shapes against the CPU. Engines
 * whose inputs do not take batch + 1 (a static batch) skip it. Both contexts end on the first inputs. */
static const char *model_other_shape(model_run *r)
{
    kiln_shapes_t sh = NULL;
    kiln_tensor in2[8] = {0};
    const char *why = kiln_shapes_new(&sh) != KILN_OK ? kiln_last_error() : NULL;
    for (int i = 0; !why && i < r->nin; i++) {
        int64_t d[KILN_MAX_DIMS];
        memcpy(d, r->in[i].dims, sizeof d);
        d[0] += 1;
        if (kiln_shapes_add(sh, kiln_engine_input_name(r->e, i), r->in[i].ndim, d) != KILN_OK)
            why = kiln_last_error();
    }
    kiln_synth_options so = {.shapes = sh, .seed = 9};
    if (!why && kiln_engine_synth_inputs(r->e, &so, in2) != KILN_OK)
        why = kiln_last_error();
    bool took = !why && !set_inputs(r, r->cc, r->gc, in2) && kiln_context_run(r->cc) == KILN_OK;
    if (took) {
        if (kiln_context_run(r->gc) != KILN_OK)
            why = kiln_last_error();
        else
            compare_outputs(r, r->gc, "batch + 1");
    } else if (!why) {
        printf("     %-28s batch + 1 not taken (%s): skipped\n", r->path, kiln_last_error());
    }
    const char *back = set_inputs(r, r->cc, r->gc, r->in);
    if (!why && back)
        why = back;
    if (!why && (kiln_context_run(r->cc) != KILN_OK || kiln_context_run(r->gc) != KILN_OK))
        why = kiln_last_error();
    if (!why && took)
        compare_outputs(r, r->gc, "first batch again");
    for (int i = 0; i < r->nin; i++)
        kiln_free(in2[i].data);
    kiln_shapes_free(sh);
    return why;
}

/* A second context of the engine shares the weights already on the GPU: its first run copies
 * only the inputs (and shape data). */
static const char *model_second_context(model_run *r, unsigned long long h2d_first)
{
    kiln_context_t gc2 = NULL;
    const char *why = NULL;
    if (kiln_context_create(r->e, &gc2) != KILN_OK || kiln_context_set_device(gc2, KILN_DEVICE_CUDA, 0) != KILN_OK)
        why = kiln_last_error();
    if (!why)
        why = set_inputs(r, gc2, NULL, r->in);
    if (!why && kiln_context_run(gc2) != KILN_OK)
        why = kiln_last_error();
    if (!why) {
        kiln_device_stats s2;
        kiln_context_device_stats(gc2, &s2);
        compare_outputs(r, gc2, NULL);
        printf("     %-28s first run copied %llu bytes to the GPU, a second context's %llu\n", r->path, h2d_first,
               s2.h2d_bytes);
        if (s2.h2d_bytes >= h2d_first)
            why = "the second context copied the weights again";
    }
    kiln_context_free(gc2);
    return why;
}

/* Every layer ran on the GPU and the fourth run replayed a CUDA graph (unless KILN_CUDA_GRAPHS=0). */
static const char *model_device_stats(const model_run *r)
{
    kiln_device_stats ds;
    kiln_context_device_stats(r->gc, &ds);
    printf("     %-28s %d layers on the GPU, %d on the host (shapes), %d fallbacks %s, %ld CUDA graph replays, "
           "%.1f MB of weights on the GPU, %d layers with half-stored float32 outputs\n", r->path, ds.device_layers,
           ds.host_layers, ds.fallback_layers, ds.fallback_ops, ds.graph_replays, (double)ds.weight_bytes / 1e6,
           ds.half_storage_layers);
    if (ds.fallback_layers)
        return "layers fell back to the CPU";
    /* kiln_context_layer_place agrees with the counts (these models have no subgraphs), and a CPU context
     * has no places */
    int count[4] = {0}, half = 0;
    for (int i = 0; i < kiln_engine_num_layers(r->e); i++) {
        kiln_layer_place p = KILN_PLACE_NONE, q = KILN_PLACE_DEVICE;
        if (kiln_context_layer_place(r->gc, i, &p) != KILN_OK || kiln_context_layer_place(r->cc, i, &q) != KILN_OK ||
            q != KILN_PLACE_NONE || p > KILN_PLACE_FALLBACK)
            return "kiln_context_layer_place failed";
        count[p]++;
        /* the storage the GPU realized: half ones counted in the stats, none on a host layer or a CPU context */
        const char *s = NULL, *cs = NULL;
        if (kiln_context_layer_storage(r->gc, i, &s) != KILN_OK ||
            kiln_context_layer_storage(r->cc, i, &cs) != KILN_OK || cs[0] || (s[0] && p != KILN_PLACE_DEVICE))
            return "kiln_context_layer_storage failed";
        half += !strcmp(s, "fp16") || !strcmp(s, "bf16");
    }
    if (half != ds.half_storage_layers)
        return "kiln_context_layer_storage disagrees with kiln_device_stats.half_storage_layers";
    if (count[KILN_PLACE_DEVICE] != ds.device_layers || count[KILN_PLACE_HOST] != ds.host_layers ||
        count[KILN_PLACE_FALLBACK] != 0 || count[KILN_PLACE_NONE] != 0)
        return "kiln_context_layer_place disagrees with kiln_device_stats";
    const char *graphs = getenv("KILN_CUDA_GRAPHS");
    if (ds.graph_replays < 1 && (!graphs || strcmp(graphs, "0")))
        return "the fourth run did not replay a CUDA graph";
    return NULL;
}

/* A low-bit engine (FP8, 4-bit) holds its low-bit layers' weights on the GPU only packed (the CPU backend's
 * blobs, cuda_lowbit.c), never beside a float32 copy: the device's weight bytes (kiln_device_stats, as `kiln
 * bench --json` reports them) are at most the float32 bytes of all the engine's weights less 2 bytes for each
 * low-bit weight element (FP8 keeps 1 of its 4 bytes, a 4-bit format about 0.56). NULL when so. */
static const char *lowbit_weight_bytes(const model_run *r)
{
    const kiln_graph *g = r->e->g;
    uint64_t all = 0, lowbit = 0;
    for (int v = 0; v < g->n_values; v++) {
        const kiln_tensor *t = g->values[v].init;
        if (t)
            all += (uint64_t)kiln_tensor_numel(t) * kiln_dtype_size(t->dtype);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        int wi = n->op == KILN_OP_Gather ? 0 : 1;   /* a 4-bit embedding table: input 0 */
        if (kiln__attr_s(n, KILN_ATTR_WQ, NULL) && n->n_in > wi && n->in[wi] >= 0 && g->values[n->in[wi]].init)
            lowbit += (uint64_t)kiln_tensor_numel(g->values[n->in[wi]].init);
    }
    kiln_device_stats ds;
    kiln_context_device_stats(r->gc, &ds);
    printf("     %-28s %.1f MB of weights on the GPU: float32 weights %.1f MB, %.1f M low-bit weight elements\n",
           r->path, (double)ds.weight_bytes / 1e6, (double)all / 1e6, (double)lowbit / 1e6);
    if (!lowbit)
        return "no low-bit layers";
    return ds.weight_bytes + 2 * lowbit <= all ? NULL : "the low-bit layers' weights are held beyond their packed bytes";
}

/* Calibration data for an fp8 or int8 build (its activation scales): 4 samples of synthetic inputs (seeds 100 to
 * 103) as NAME_K.npy in a fresh directory, removed by calib_rm; *e32: the float32 engine they came from
 * (the accuracy reference of lowp_accuracy; the caller frees it). */
static kiln_status fp8_calib(kiln_model_t m, kiln_shapes_t shapes, char *dir, size_t cap, kiln_engine_t *e32)
{
    snprintf(dir, cap, "/tmp/kiln_fp8_calib_XXXXXX");
    if (!mkdtemp(dir))
        return KILN_ERR_IO;
    kiln_engine_t e = NULL;
    kiln_build_options bo = {.no_tactics = true, .device = KILN_DEVICE_CUDA};
    kiln_status st = kiln_build(m, &bo, &e);
    *e32 = e;
    if (st == KILN_OK)
        st = test_calib_samples(e, shapes, dir, 4, 100);
    return st;
}

/* An fp8 engine's FP8 layers read inputs their producers wrote in FP8 (feeds, the builder's marks): at least one in
 * the last run (a CUDA graph replay: its capture's counts). */
static const char *fp8_feed_counts(const model_run *r, const char *path)
{
    kiln_device_stats ds;
    if (kiln_context_device_stats(r->gc, &ds) != KILN_OK)
        return kiln_last_error();
    printf("     %-28s FP8 layers' inputs: %llu fed by their producers, %llu quantized in passes of their own; %llu "
           "outputs held only in E4M3 (%llu of them GELUs in cuBLASLt's tanh form)\n", path, ds.fp8_fed_inputs,
           ds.fp8_quant_passes, ds.fp8_held_outputs, ds.fp8_gelu_tanh);
    /* the layers that write feeds are LayerNormalization and the FP8 GEMMs' activation epilogue: a model with a
     * LayerNormalization (the BERTs) must read some; ResNet-50's FP8 convolutions quantize their inputs themselves */
    bool has_ln = false;
    for (int i = 0; i < kiln_engine_num_layers(r->e) && !has_ln; i++) {
        kiln_layer_info li;
        has_ln = kiln_engine_layer(r->e, i, &li) == KILN_OK && !strcmp(li.op, "LayerNormalization");
    }
    if (!ds.fp8_quant_passes && !ds.fp8_fed_inputs)
        return "no FP8 layer ran on the GPU";
    return ds.fp8_fed_inputs || !has_ln ? NULL : "no FP8 layer read a feed";
}

/* An fp8 / int8 engine on the GPU must be as accurate as the CPU's run of it (FP8: its emulation): per output, its
 * cosine to the float32 engine's output (a CPU context on the same inputs) at most 1e-3 below the CPU's (cc's).
 * NULL when it is, else why not. */
static const char *lowp_accuracy(kiln_engine_t e32, kiln_engine_t e, const kiln_tensor *in, int nin,
                                 kiln_context_t cc, kiln_context_t gc, const char *path, const char *prec)
{
    kiln_context_t rc = NULL;
    const char *why = NULL;
    if (kiln_context_create(e32, &rc) != KILN_OK)
        return kiln_last_error();
    for (int i = 0; !why && i < nin; i++)
        if (kiln_context_set_input(rc, kiln_engine_input_name(e, i), &in[i]) != KILN_OK)
            why = kiln_last_error();
    if (!why && (kiln_engine_num_outputs(e32) != kiln_engine_num_outputs(e) || kiln_context_run(rc) != KILN_OK))
        why = kiln_engine_num_outputs(e32) != kiln_engine_num_outputs(e) ? "fp32 and low-precision outputs differ" : kiln_last_error();
    for (int o = 0; !why && o < kiln_engine_num_outputs(e); o++) {
        const kiln_tensor *ref = kiln_context_output(rc, o);
        double cg = cosine(kiln_context_output(gc, o), ref), ce = cosine(kiln_context_output(cc, o), ref);
        printf("     %-28s output %-20s cosine to fp32: GPU %s %.6f, CPU %s %.6f\n", path,
               kiln_engine_output_name(e, o), prec, cg, prec, ce);
        if (!(cg >= ce - 1e-3))
            why = "the GPU's low precision is less accurate than the CPU's";
    }
    kiln_context_free(rc);
    return why;
}

static void calib_rm(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_gpu: could not remove %s\n", dir);
}

/* MODEL.onnx[@SHAPES][#PRECISION[+fp16|+bf16]]: the engine built for CUDA (+: kiln_build_options.float_activations),
 * run on the GPU against the CPU. */
void model_case(const char *spec)
{
    char path[512];
    snprintf(path, sizeof path, "%s", spec);
    char *hash = strchr(path, '#');   /* MODEL.onnx@SHAPES#PRECISION */
    const char *prec = NULL;
    if (hash) {
        *hash = 0;
        prec = hash + 1;
    }
    /* PREC+fp16 / +bf16: with kiln_build_options.float_activations (INT8 layers' float outputs held in half) */
    char *plus = prec ? strchr(prec, '+') : NULL;
    const char *float_act = plus ? plus + 1 : NULL;
    if (plus)
        *plus = 0;
    /* fp16 / bf16 engines: max |gpu - cpu| / max(1, max |cpu|) within these */
    /* fp8: an activation that lands on the other side of an E4M3 rounding midpoint on the GPU (other sums'
     * order, FP16 storage between layers) moves by a whole E4M3 step (6-12%) and carries that through the
     * layers (BERT-base, H200: max rel err 0.12, cosine 0.9985 GPU vs CPU emulation, each 0.9974 to fp32):
     * fp8 engines get a looser max error and a cosine bound against the emulation, and must be as accurate
     * as the emulation against the float32 engine (lowp_accuracy) */
    /* int8: the integer layers are the CPU's bytes, but the FP16 layers kept around them (the first and last) and
     * the float Adds between them round otherwise on the GPU, so a value near a quantization midpoint lands one
     * step away: as fp8 */
    bool fp8 = prec && !strcmp(prec, "fp8"), int8 = prec && !strcmp(prec, "int8"), calib = fp8 || int8;
    double tol = !prec || !strcmp(prec, "fp32") ? 1e-4 : !strcmp(prec, "fp16") ? 1e-2 : calib ? 0.25 : 5e-2;
    double cos_tol = calib ? 0.99 : -1.0;
    kiln_engine_t e32 = NULL;
    char *colon = strchr(path, '@');   /* MODEL.onnx@SHAPES */
    const char *shapes_spec = NULL;
    if (colon) {
        *colon = 0;
        shapes_spec = colon + 1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("skip %-28s (not present)\n", path);
        return;
    }
    fclose(f);
    model_run r = {.path = path, .cos_min = 1.0};
    kiln_model_t m = NULL;
    kiln_shapes_t shapes = NULL;
    const char *why = NULL;
    unsigned long long h2d_first = 0;
    kiln_build_options bo = {.no_tactics = true, .device = KILN_DEVICE_CUDA, .precision = prec,
                             .float_activations = float_act};
    kiln_synth_options so = {.shapes = NULL, .seed = 7};
    char cdir[64] = "";
    kiln_calib_options co = {.data_dir = cdir, .method = KILN_CALIB_MINMAX};
    if (kiln_model_load(path, &m) != KILN_OK || (shapes_spec && kiln_shapes_parse(shapes_spec, &shapes) != KILN_OK)) {
        why = kiln_last_error();
        goto done;
    }
    if (calib) {   /* calibrated activation scales, and the float32 engine as the accuracy reference */
        kiln_status cs = fp8_calib(m, shapes, cdir, sizeof cdir, &e32);
        bo.calib = &co;
        if (cs != KILN_OK) {
            why = cs == KILN_ERR_IO ? "could not make a calibration directory" : kiln_last_error();
            goto done;
        }
    }
    kiln_status bs = kiln_build(m, &bo, &r.e);
    if (cdir[0])
        calib_rm(cdir);
    if (bs != KILN_OK) {
        why = kiln_last_error();
        goto done;
    }
    r.nin = kiln_engine_num_inputs(r.e);
    so.shapes = shapes;
    if (r.nin > 8 || kiln_engine_synth_inputs(r.e, &so, r.in) != KILN_OK || kiln_context_create(r.e, &r.cc) != KILN_OK ||
        kiln_context_create(r.e, &r.gc) != KILN_OK || kiln_context_set_device(r.gc, KILN_DEVICE_CUDA, 0) != KILN_OK) {
        why = kiln_last_error();
        goto done;
    }
    why = set_inputs(&r, r.cc, r.gc, r.in);
    if (!why && kiln_context_run(r.cc) != KILN_OK)
        why = kiln_last_error();
    if (!why)
        why = model_runs(&r, &h2d_first);
    if (!why && fp8)
        why = fp8_feed_counts(&r, path);
    if (!why && e32)
        why = lowp_accuracy(e32, r.e, r.in, r.nin, r.cc, r.gc, path, prec);
    if (!why)
        why = model_new_inputs(&r, &so);
    if (!why)
        why = model_other_shape(&r);
    if (!why)
        why = model_second_context(&r, h2d_first);
    const char *stats = model_device_stats(&r);
    if (!why)
        why = stats;
    if (!why && float_act) {   /* the engine's half float activations were realized on the GPU */
        kiln_device_stats ds;
        kiln_context_device_stats(r.gc, &ds);
        if (ds.half_storage_layers < 1)
            why = "float activations asked in half, none held so on the GPU";
    }
    bool lowbit = prec && (fp8 || !strcmp(prec, "nvfp4") || !strcmp(prec, "mxfp4") || !strcmp(prec, "int4"));
    const char *wb = lowbit && r.gc ? lowbit_weight_bytes(&r) : NULL;
    if (!why)
        why = wb;
done:;
    bool ok = !why && r.worst <= tol && r.cos_min >= cos_tol;
    printf("%s %-28s %-4s%s%s max rel err %.3g (tol %.0e), cosine >= %.6f%s%s\n", ok ? "ok  " : "FAIL", path,
           prec ? prec : "fp32", float_act ? "+" : "", float_act ? float_act : "", r.worst, tol, r.cos_min,
           why ? ": " : "", why ? why : "");
    test_checks++;
    test_failures += !ok;
    for (int i = 0; i < r.nin && i < 8; i++)
        kiln_free(r.in[i].data);
    kiln_context_free(r.cc);
    kiln_context_free(r.gc);
    kiln_engine_free(r.e);
    kiln_engine_free(e32);
    kiln_model_free(m);
    kiln_shapes_free(shapes);
}
