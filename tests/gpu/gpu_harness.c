/* test_gpu: the harness: one-node graphs, CPU vs GPU comparison (gpu_harness.h). */
#include "gpu_harness.h"

int test_failures, test_checks;

unsigned long long rng = 0x2545F4914F6CDD1Dull;
kiln_dev *dev;
/* Half pass (KILN_CUDA_ACT=fp16|bf16: the module holds every float activation in that format): the
 * float inputs and weights of each case are rounded to it first, so the GPU's error is its own
 * rounding of results; half_tol is then the tolerance of every float output. */
kiln_dtype half_mode = KILN_DT_UNDEFINED;
double half_tol;

/* Rounds the float32 values of t to FP16 / BF16 (round to nearest even) in place. */
void round_half(kiln_tensor *t, kiln_dtype h)
{
    if (t->dtype != KILN_DT_FLOAT32 || !t->data)
        return;
    float *x = t->data;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++)
        x[i] = h == KILN_DT_FLOAT16 ? kiln__f16_to_f32(kiln__f32_to_f16(x[i])) : kiln__bf16_to_f32(kiln__f32_to_bf16(x[i]));
}

/* ---- one-node graphs */


kiln_tensor rand_tensor(kiln_dtype dt, int nd, const int64_t *dims, double lo, double hi)
{
    kiln_tensor t;
    if (kiln__tensor_alloc(&t, dt, nd, dims) != KILN_OK) {
        fprintf(stderr, "test_gpu: out of memory\n");
        exit(2);
    }
    int64_t n = kiln_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) {
        double u = (test_randf(&rng) + 1.0) * 0.5;
        double v = lo + (hi - lo) * u;
        if (dt == KILN_DT_FLOAT32)
            ((float *)t.data)[i] = (float)v;
        else if (dt == KILN_DT_BOOL)
            ((uint8_t *)t.data)[i] = v > 0;
        else
            kiln__set_i64(dt, t.data, i, (int64_t)floor(v));
    }
    return t;
}

kiln_tensor ints_tensor(int n, const int64_t *v)
{
    int64_t d = n;
    kiln_tensor t;
    if (kiln__tensor_alloc(&t, KILN_DT_INT64, 1, &d) != KILN_OK)
        exit(2);
    memcpy(t.data, v, sizeof(int64_t) * (size_t)n);
    return t;
}

static int tg_add_node(kiln_graph *g, kiln_op op, int opset, const char *name)
{
    int i = kiln__graph_add_node(g);
    kiln_node *n = &g->nodes[i];
    n->name = kiln__strdup(name);
    n->op_type = kiln__strdup(kiln__op_name(op));
    n->domain = kiln__strdup(kiln__op_is_kiln(op) ? KILN_DOMAIN : "");
    n->op = op;
    n->opset = opset;
    return i;
}

tgraph tg_new(kiln_op op, int opset)
{
    tgraph t = {.g = kiln__graph_new(NULL)};
    t.node = tg_add_node(t.g, op, opset, "case");
    return t;
}

/* Gives node nd one output, a new value named name; returns the value. */
int tg_out1(kiln_graph *g, int nd, const char *name)
{
    int v = kiln__graph_add_value(g, name);
    g->nodes[nd].out = kiln__calloc(1, sizeof(int));
    g->nodes[nd].n_out = 1;
    kiln__node_set_output(g, nd, 0, v);
    return v;
}

/* A node of op reading values in[0 .. nin) with one output value named out; returns the node. */
int tg_node_add(kiln_graph *g, kiln_op op, int opset, const char *name, int nin, const int *in, const char *out)
{
    int nd = tg_add_node(g, op, opset, name);
    for (int i = 0; i < nin; i++)
        kiln__node_add_input(g, nd, in[i]);
    tg_out1(g, nd, out);
    return nd;
}

/* An initializer value named name holding x (moved in). */
int tg_const(kiln_graph *g, const char *name, kiln_tensor x)
{
    int v = kiln__graph_add_value(g, name);
    g->values[v].init = kiln__calloc(1, sizeof(kiln_tensor));
    *g->values[v].init = x;
    return v;
}

/* Appends node nd's output 0 to the graph outputs. */
void tg_output(kiln_graph *g, int nd)
{
    g->outputs = kiln__realloc(g->outputs, sizeof(int) * (size_t)(g->n_outputs + 1));
    g->outputs[g->n_outputs++] = g->nodes[nd].out[0];
}

/* Ends the current node with one output and appends a node of op reading it; tg_in / tg_outs / attributes
 * then apply to the new node. */
void tg_then(tgraph *t, kiln_op op, int opset)
{
    int v = tg_out1(t->g, t->node, "mid");
    t->node = tg_add_node(t->g, op, opset, "next");
    kiln__node_add_input(t->g, t->node, v);
}

kiln_node *tg_node(tgraph *t) { return &t->g->nodes[t->node]; }

/* Appends an input: a graph input fed with `x` (moved in) or, const_, an initializer. */
void tg_in(tgraph *t, kiln_tensor x, bool const_)
{
    char name[32];
    snprintf(name, sizeof name, "x%d", tg_node(t)->n_in);
    int v;
    if (const_) {
        v = tg_const(t->g, name, x);
    } else {
        v = kiln__graph_add_value(t->g, name);
        t->g->inputs = kiln__realloc(t->g->inputs, sizeof(int) * (size_t)(t->g->n_inputs + 1));
        t->g->inputs[t->g->n_inputs++] = v;
        t->feed[t->n_feed++] = x;
    }
    kiln__node_add_input(t->g, t->node, v);
}

void tg_outs(tgraph *t, int n)
{
    kiln_node *nd = tg_node(t);
    nd->out = kiln__calloc((size_t)n, sizeof(int));
    nd->n_out = n;
    t->g->outputs = kiln__calloc((size_t)n, sizeof(int));
    for (int o = 0; o < n; o++) {
        char name[32];
        snprintf(name, sizeof name, "y%d", o);
        int v = kiln__graph_add_value(t->g, name);
        nd = tg_node(t);
        kiln__node_set_output(t->g, t->node, o, v);
        t->g->outputs[t->g->n_outputs++] = v;
    }
}

void attr_ints(tgraph *t, const char *name, int n, const int64_t *v)
{
    kiln_node *nd = tg_node(t);
    kiln__node_set_attr_i(nd, name, 0);
    for (int a = 0; a < nd->n_attr; a++)
        if (!strcmp(nd->attrs[a].name, name)) {
            nd->attrs[a].type = KILN_ATTR_INTS;
            nd->attrs[a].ints = kiln__malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
            memcpy(nd->attrs[a].ints, v, sizeof(int64_t) * (size_t)n);
            nd->attrs[a].n = n;
        }
}

void set_act(tgraph *t, kiln_fused_act_kind k, float a, float b)
{
    kiln_fused_act fa = {k, a, b};
    kiln__node_set_fused_act(tg_node(t), &fa);
}

void tg_free(tgraph *t)
{
    for (int i = 0; i < t->n_feed; i++)
        kiln__tensor_release(&t->feed[i]);
    kiln__graph_free(t->g);
}

/* max |a - b| / max(1, max |b|); INFINITY on NaN mismatch or shape / dtype difference */
double compare(const kiln_tensor *a, const kiln_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim))
        return INFINITY;
    int64_t n = kiln_tensor_numel(a);
    if (a->dtype != KILN_DT_FLOAT32)
        return memcmp(a->data, b->data, a->nbytes) ? INFINITY : 0.0;
    const float *x = a->data, *y = b->data;
    double mx = 1.0, err = 0.0;
    for (int64_t i = 0; i < n; i++)
        mx = fabs(y[i]) > mx ? fabs(y[i]) : mx;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i]) != isnan(y[i]) || (isinf(y[i]) && x[i] != y[i]))
            return INFINITY;
        if (!isnan(y[i]) && !isinf(y[i]))
            err = fmax(err, fabs((double)x[i] - y[i]) / mx);
    }
    return err;
}

/* Where a failed case's output differs: how many elements, NaNs in each, and the first three (index, CPU, GPU) */
void print_diff(const kiln_tensor *got, const kiln_tensor *ref)
{
    if (got->dtype != ref->dtype || got->nbytes != ref->nbytes || !got->data || !ref->data) {
        printf("     output: %s of %zu bytes against the CPU's %s of %zu\n", kiln_dtype_name(got->dtype), got->nbytes,
               kiln_dtype_name(ref->dtype), ref->nbytes);
        return;
    }
    int64_t n = kiln_tensor_numel(ref), differ = 0, nan_got = 0, nan_ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = kiln__get_f64(ref->dtype, ref->data, i), b = kiln__get_f64(got->dtype, got->data, i);
        nan_ref += isnan(a);
        nan_got += isnan(b);
        if (a == b || (isnan(a) && isnan(b)))
            continue;
        if (differ++ < 3)
            printf("     [%lld] cpu %.9g gpu %.9g\n", (long long)i, a, b);
    }
    printf("     %lld of %lld elements differ; NaN: cpu %lld gpu %lld\n", (long long)differ, (long long)n,
           (long long)nan_ref, (long long)nan_got);
}

/* cosine similarity of two float32 tensors of one shape (-1 when they differ or hold NaN) */
double cosine(const kiln_tensor *a, const kiln_tensor *b)
{
    if (a->dtype != KILN_DT_FLOAT32 || b->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(a) != kiln_tensor_numel(b))
        return -1;
    const float *x = a->data, *y = b->data;
    double xy = 0, xx = 0, yy = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(a); i++) {
        xy += (double)x[i] * y[i];
        xx += (double)x[i] * x[i];
        yy += (double)y[i] * y[i];
    }
    double c = xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : xx == yy ? 1.0 : 0.0;
    return isnan(c) ? -1 : c;
}

/* In a half pass, t's float inputs and weights rounded to the half format first (round_half). */
void tg_round_half(tgraph *t)
{
    if (half_mode == KILN_DT_UNDEFINED)
        return;
    for (int i = 0; i < t->n_feed; i++)
        round_half(&t->feed[i], half_mode);
    for (int v = 0; v < t->g->n_values; v++)
        if (t->g->values[v].init)
            round_half(t->g->values[v].init, half_mode);
}

/* Runs t's graph on the CPU into ref and on device d into got (arrays of the graph's outputs, at most 4) and counts
 * the check. Returns 0 when both ran -- *why then NULL, or why the GPU's outputs do not count (its error, a layer that
 * did not run on the GPU); otherwise (the CPU reference failed: a failure; no device: --cpu-only) it has printed
 * the case, released ref and returns nonzero. */
int tg_run_both(kiln_dev *d, const char *name, tgraph *t, kiln_tensor *ref, kiln_tensor *got, const char **why)
{
    kiln_graph *g = t->g;
    const kiln_tensor *feed[8];
    for (int i = 0; i < t->n_feed; i++)
        feed[i] = &t->feed[i];
    kiln_run_env cpu = {.nthreads = 1};
    kiln_status s = kiln__exec_graph(g, NULL, feed, ref, &cpu, 0);
    test_checks++;
    *why = NULL;
    if (s != KILN_OK || !d) {   /* --cpu-only: the cases themselves are checked */
        if (s != KILN_OK)
            printf("FAIL %-28s CPU reference failed: %s\n", name, kiln_last_error());
        else
            printf("cpu  %-28s\n", name);
        test_failures += s != KILN_OK;
        for (int o = 0; o < g->n_outputs; o++)
            kiln__tensor_release(&ref[o]);
        return s != KILN_OK ? -1 : 1;
    }
    kiln_run_env gpu = {.nthreads = 1, .dev = d, .backend = kiln__dev_backend(d)};
    kiln__dev_run_begin(d);
    s = kiln__exec_graph(g, NULL, feed, got, &gpu, 0);
    kiln__dev_weights_clear(d);   /* this graph goes away: the next one may reuse its addresses */
    kiln_device_stats st;
    kiln__dev_stats(d, &st);
    if (s != KILN_OK)
        *why = kiln_last_error();
    else if (st.device_layers != g->n_nodes)
        *why = "a layer did not run on the GPU";
    return 0;
}

void tg_release(const tgraph *t, kiln_tensor *ref, kiln_tensor *got)
{
    for (int o = 0; o < t->g->n_outputs; o++) {
        kiln__tensor_release(&ref[o]);
        kiln__tensor_release(&got[o]);
    }
}

/* One run of t's graph on the GPU against the CPU (t stays: run_case frees it). */
void check_case(const char *name, tgraph *t, double tol)
{
    kiln_graph *g = t->g;
    tg_round_half(t);
    if (half_mode != KILN_DT_UNDEFINED)
        tol = fmax(tol, half_tol);
    kiln_tensor ref[4] = {0}, got[4] = {0};
    const char *why;
    if (tg_run_both(dev, name, t, ref, got, &why))
        return;
    double worst = 0;
    for (int o = 0; !why && o < g->n_outputs; o++)
        worst = fmax(worst, compare(&got[o], &ref[o]));
    bool ok = !why && worst <= tol;
    printf("%s %-28s max rel err %.3g (tol %.1g)%s%s\n", ok ? "ok  " : "FAIL", name, worst, tol, why ? ": " : "",
           why ? why : "");
    test_failures += !ok;
    for (int o = 0; !ok && !why && o < g->n_outputs; o++)
        print_diff(&got[o], &ref[o]);
    tg_release(t, ref, got);
}

void run_case(const char *name, tgraph *t, double tol)
{
    check_case(name, t, tol);
    tg_free(t);
}
