/* GPU tests of the CUDA backend (docs/CUDA.md): `make test-gpu` on a machine with an NVIDIA GPU;
 * the CTest entry gpu/test_gpu exits 77 (skipped) with a message where there is no CUDA module or
 * no GPU, so CI passes.
 *
 * 1. Per-layer checks: one-node graphs over random, odd-sized inputs run by the interpreter on the
 *    CPU (the reference kernels) and with --device cuda; every layer must run on the device (not
 *    fall back) and match: max |gpu - cpu| <= tol * max(1, max |cpu|), NaN never passes, and
 *    integer / data-movement outputs exactly. Device memory is poisoned (KILN_CUDA_POISON: every
 *    block the CUDA backend hands out is filled with NaN), so unwritten elements fail.
 * 2. Model checks: the models given on the command line (default: models/tiny_cnn.onnx,
 *    models/tiny_bert.onnx, and models/resnet50.onnx, models/bert_base.onnx when present) built
 *    and run on the CPU and on the GPU from the same synthetic inputs; the max relative error is
 *    printed per output, and the whole model must run on the device; the fourth run must replay the
 *    context's CUDA graph, and a replay on new inputs must match the CPU on those.
 * 3. FP16 / BF16: layers with FP16 / BF16 weights, and every layer case again with the module holding
 *    float activations in FP16, then BF16 (KILN_CUDA_ACT), half convolutions channels-last; models
 *    given as MODEL.onnx@SHAPES#fp16|bf16 are built in that precision (#fp8, #nvfp4, #mxfp4, #int4 too:
 *    those hold their low-bit weights on the GPU only packed, checked by their weight bytes).
 * Usage: test_gpu [--require-gpu] [MODEL.onnx@SHAPES ...]; test_gpu --cpu-only runs the one-node cases on
 * the CPU alone (CI: checks the cases themselves). */
#include "test.h"
#include "test_calib.h"
#include "engine/engine.h"
#include "ir/fused.h"
#include "runtime/device.h"
#include "runtime/exec.h"
#include "core/numfmt.h"
#include <float.h>
#include <stdint.h>
#include <string.h>

static unsigned long long rng = 0x2545F4914F6CDD1Dull;
static kiln_dev *dev;
/* Half pass (KILN_CUDA_ACT=fp16|bf16: the module holds every float activation in that format): the
 * float inputs and weights of each case are rounded to it first, so the GPU's error is its own
 * rounding of results; half_tol is then the tolerance of every float output. */
static kiln_dtype half_mode = KILN_DT_UNDEFINED;
static double half_tol;

/* Rounds the float32 values of t to FP16 / BF16 (round to nearest even) in place. */
static void round_half(kiln_tensor *t, kiln_dtype h)
{
    if (t->dtype != KILN_DT_FLOAT32 || !t->data)
        return;
    float *x = t->data;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++)
        x[i] = h == KILN_DT_FLOAT16 ? kiln__f16_to_f32(kiln__f32_to_f16(x[i])) : kiln__bf16_to_f32(kiln__f32_to_bf16(x[i]));
}

/* ---- one-node graphs */

typedef struct tgraph {
    kiln_graph *g;
    int node;
    int n_feed;
    kiln_tensor feed[8];
} tgraph;

static kiln_tensor rand_tensor(kiln_dtype dt, int nd, const int64_t *dims, double lo, double hi)
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

static kiln_tensor ints_tensor(int n, const int64_t *v)
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

static tgraph tg_new(kiln_op op, int opset)
{
    tgraph t = {.g = kiln__graph_new(NULL)};
    t.node = tg_add_node(t.g, op, opset, "case");
    return t;
}

/* Gives node nd one output, a new value named name; returns the value. */
static int tg_out1(kiln_graph *g, int nd, const char *name)
{
    int v = kiln__graph_add_value(g, name);
    g->nodes[nd].out = kiln__calloc(1, sizeof(int));
    g->nodes[nd].n_out = 1;
    kiln__node_set_output(g, nd, 0, v);
    return v;
}

/* A node of op reading values in[0 .. nin) with one output value named out; returns the node. */
static int tg_node_add(kiln_graph *g, kiln_op op, int opset, const char *name, int nin, const int *in, const char *out)
{
    int nd = tg_add_node(g, op, opset, name);
    for (int i = 0; i < nin; i++)
        kiln__node_add_input(g, nd, in[i]);
    tg_out1(g, nd, out);
    return nd;
}

/* An initializer value named name holding x (moved in). */
static int tg_const(kiln_graph *g, const char *name, kiln_tensor x)
{
    int v = kiln__graph_add_value(g, name);
    g->values[v].init = kiln__calloc(1, sizeof(kiln_tensor));
    *g->values[v].init = x;
    return v;
}

/* Appends node nd's output 0 to the graph outputs. */
static void tg_output(kiln_graph *g, int nd)
{
    g->outputs = kiln__realloc(g->outputs, sizeof(int) * (size_t)(g->n_outputs + 1));
    g->outputs[g->n_outputs++] = g->nodes[nd].out[0];
}

/* Ends the current node with one output and appends a node of op reading it; tg_in / tg_outs / attributes
 * then apply to the new node. */
static void tg_then(tgraph *t, kiln_op op, int opset)
{
    int v = tg_out1(t->g, t->node, "mid");
    t->node = tg_add_node(t->g, op, opset, "next");
    kiln__node_add_input(t->g, t->node, v);
}

static kiln_node *tg_node(tgraph *t) { return &t->g->nodes[t->node]; }

/* Appends an input: a graph input fed with `x` (moved in) or, const_, an initializer. */
static void tg_in(tgraph *t, kiln_tensor x, bool const_)
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

static void tg_outs(tgraph *t, int n)
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

static void attr_ints(tgraph *t, const char *name, int n, const int64_t *v)
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

static void set_act(tgraph *t, kiln_fused_act_kind k, float a, float b)
{
    kiln_fused_act fa = {k, a, b};
    kiln__node_set_fused_act(tg_node(t), &fa);
}

static void tg_free(tgraph *t)
{
    for (int i = 0; i < t->n_feed; i++)
        kiln__tensor_release(&t->feed[i]);
    kiln__graph_free(t->g);
}

/* max |a - b| / max(1, max |b|); INFINITY on NaN mismatch or shape / dtype difference */
static double compare(const kiln_tensor *a, const kiln_tensor *b)
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

/* cosine similarity of two float32 tensors of one shape (-1 when they differ or hold NaN) */
static double cosine(const kiln_tensor *a, const kiln_tensor *b)
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
static void tg_round_half(tgraph *t)
{
    if (half_mode == KILN_DT_UNDEFINED)
        return;
    for (int i = 0; i < t->n_feed; i++)
        round_half(&t->feed[i], half_mode);
    for (int v = 0; v < t->g->n_values; v++)
        if (t->g->values[v].init)
            round_half(t->g->values[v].init, half_mode);
}

/* One run of t's graph on the GPU against the CPU (t stays: run_case frees it). */
static void check_case(const char *name, tgraph *t, double tol)
{
    kiln_graph *g = t->g;
    tg_round_half(t);
    if (half_mode != KILN_DT_UNDEFINED)
        tol = fmax(tol, half_tol);
    const kiln_tensor *feed[8];
    for (int i = 0; i < t->n_feed; i++)
        feed[i] = &t->feed[i];
    kiln_tensor ref[4] = {0}, got[4] = {0};
    kiln_run_env cpu = {.nthreads = 1};
    kiln_status s = kiln__exec_graph(g, NULL, feed, ref, &cpu, 0);
    test_checks++;
    if (s != KILN_OK || !dev) {   /* --cpu-only: the cases themselves are checked */
        if (s != KILN_OK)
            printf("FAIL %-28s CPU reference failed: %s\n", name, kiln_last_error());
        else
            printf("cpu  %-28s\n", name);
        test_failures += s != KILN_OK;
        for (int o = 0; o < g->n_outputs; o++)
            kiln__tensor_release(&ref[o]);
        return;
    }
    kiln_run_env gpu = {.nthreads = 1, .dev = dev, .backend = kiln__dev_backend(dev)};
    kiln__dev_run_begin(dev);
    s = kiln__exec_graph(g, NULL, feed, got, &gpu, 0);
    kiln__dev_weights_clear(dev);   /* this graph goes away: the next one may reuse its addresses */
    kiln_device_stats st;
    kiln__dev_stats(dev, &st);
    double worst = 0;
    const char *why = NULL;
    if (s != KILN_OK)
        why = kiln_last_error();
    else if (st.device_layers != g->n_nodes)
        why = "a layer did not run on the GPU";
    for (int o = 0; !why && o < g->n_outputs; o++)
        worst = fmax(worst, compare(&got[o], &ref[o]));
    bool ok = !why && worst <= tol;
    printf("%s %-28s max rel err %.3g (tol %.1g)%s%s\n", ok ? "ok  " : "FAIL", name, worst, tol, why ? ": " : "",
           why ? why : "");
    test_failures += !ok;
    for (int o = 0; o < g->n_outputs; o++) {
        kiln__tensor_release(&ref[o]);
        kiln__tensor_release(&got[o]);
    }
}

static void run_case(const char *name, tgraph *t, double tol)
{
    check_case(name, t, tol);
    tg_free(t);
}

#define F32 KILN_DT_FLOAT32
#define D(...) ((const int64_t[]){__VA_ARGS__})
#define RT(nd, ...) rand_tensor(F32, nd, D(__VA_ARGS__), -1, 1)

static void binary_cases(void)
{
    static const kiln_op ops[] = {KILN_OP_Add, KILN_OP_Sub, KILN_OP_Mul, KILN_OP_Div, KILN_OP_Max, KILN_OP_Min};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        tgraph t = tg_new(ops[k], 13);
        tg_in(&t, RT(3, 3, 1, 7), false);
        tg_in(&t, ops[k] == KILN_OP_Div ? rand_tensor(F32, 2, D(5, 7), 0.5, 2) : RT(2, 5, 7), false);
        tg_outs(&t, 1);
        char name[64];
        snprintf(name, sizeof name, "%s broadcast", kiln__op_name(ops[k]));
        run_case(name, &t, 1e-6);
    }
    tgraph t = tg_new(KILN_OP_Add, 13);
    tg_in(&t, RT(2, 17, 33), false);
    tg_in(&t, RT(2, 17, 33), false);
    tg_outs(&t, 1);
    run_case("Add same shape", &t, 1e-6);
    t = tg_new(KILN_OP_Mul, 13);
    tg_in(&t, RT(4, 2, 3, 5, 7), false);
    tg_in(&t, RT(1, 7), true);
    tg_outs(&t, 1);
    run_case("Mul by const row", &t, 1e-6);
    t = tg_new(KILN_OP_Pow, 13);
    tg_in(&t, rand_tensor(F32, 2, D(9, 11), 0.1, 3), false);
    tg_in(&t, rand_tensor(F32, 1, D(11), -2, 2), false);
    tg_outs(&t, 1);
    run_case("Pow", &t, 1e-5);
    t = tg_new(KILN_OP_Add, 13);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 2, D(65, 67), -1000, 1000), false);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 1, D(67), -1000, 1000), false);
    tg_outs(&t, 1);
    run_case("Add int64", &t, 0);
}

static void unary_cases(void)
{
    static const kiln_op ops[] = {KILN_OP_Relu, KILN_OP_Sigmoid, KILN_OP_Tanh, KILN_OP_Exp, KILN_OP_Erf, KILN_OP_Neg,
                                  KILN_OP_Abs, KILN_OP_HardSwish, KILN_OP_Softplus, KILN_OP_Floor};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        tgraph t = tg_new(ops[k], 13);
        tg_in(&t, rand_tensor(F32, 3, D(3, 17, 129), -4, 4), false);
        tg_outs(&t, 1);
        run_case(kiln__op_name(ops[k]), &t, 1e-5);
        /* a size of whole 16-byte vectors: the vector kernel (the size above takes the scalar one) */
        t = tg_new(ops[k], 13);
        tg_in(&t, rand_tensor(F32, 3, D(4, 8, 40), -4, 4), false);
        tg_outs(&t, 1);
        char name[64];
        snprintf(name, sizeof name, "%s 4x8x40", kiln__op_name(ops[k]));
        run_case(name, &t, 1e-5);
    }
    tgraph t = tg_new(KILN_OP_Gelu, 20);
    tg_in(&t, rand_tensor(F32, 2, D(16, 24), -4, 4), false);
    tg_outs(&t, 1);
    run_case("Gelu 16x24", &t, 1e-5);
    t = tg_new(KILN_OP_Sqrt, 13);
    tg_in(&t, rand_tensor(F32, 2, D(31, 37), 0, 9), false);
    tg_outs(&t, 1);
    run_case("Sqrt", &t, 1e-6);
    t = tg_new(KILN_OP_LeakyRelu, 13);
    tg_in(&t, RT(2, 31, 37), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "alpha", 0.13f);
    run_case("LeakyRelu", &t, 1e-6);
    t = tg_new(KILN_OP_Gelu, 20);
    tg_in(&t, rand_tensor(F32, 2, D(31, 37), -4, 4), false);
    tg_outs(&t, 1);
    run_case("Gelu", &t, 1e-5);
    t = tg_new(KILN_OP_Clip, 13);
    tg_in(&t, RT(2, 31, 37), false);
    float lo = -0.3f, hi = 0.45f;
    kiln_tensor a, b;
    kiln__tensor_alloc(&a, F32, 0, NULL);
    kiln__tensor_alloc(&b, F32, 0, NULL);
    *(float *)a.data = lo;
    *(float *)b.data = hi;
    tg_in(&t, a, true);
    tg_in(&t, b, true);
    tg_outs(&t, 1);
    run_case("Clip (min/max inputs)", &t, 0);
}

static void cast_where_cases(void)
{
    tgraph t = tg_new(KILN_OP_Cast, 13);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 2, D(65, 67), -5000, 5000), false);   /* > 4096: not shape data */
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "to", KILN_DT_FLOAT32);
    run_case("Cast int64->float", &t, 0);
    t = tg_new(KILN_OP_Cast, 13);
    tg_in(&t, rand_tensor(F32, 2, D(7, 13), -50, 50), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "to", KILN_DT_INT64);
    run_case("Cast float->int64", &t, 0);
    t = tg_new(KILN_OP_Where, 13);
    tg_in(&t, rand_tensor(KILN_DT_BOOL, 2, D(1, 19), -1, 1), false);
    tg_in(&t, RT(2, 11, 19), false);
    tg_in(&t, RT(2, 11, 1), false);
    tg_outs(&t, 1);
    run_case("Where broadcast", &t, 0);
}

static void shape_cases(void)
{
    tgraph t = tg_new(KILN_OP_Reshape, 13);
    tg_in(&t, RT(3, 3, 5, 7), false);
    tg_in(&t, ints_tensor(2, D(0, -1)), true);
    tg_outs(&t, 1);
    run_case("Reshape 0,-1", &t, 0);
    t = tg_new(KILN_OP_Flatten, 13);
    tg_in(&t, RT(4, 3, 5, 7, 2), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 2);
    run_case("Flatten axis 2", &t, 0);
    for (int axis = -4; axis <= -1; axis++) {   /* negative: counted from the rank (ONNX range [-r, r]) */
        char name[32];
        snprintf(name, sizeof name, "Flatten axis %d", axis);
        t = tg_new(KILN_OP_Flatten, 13);
        tg_in(&t, RT(4, 3, 5, 7, 2), false);
        tg_outs(&t, 1);
        kiln__node_set_attr_i(tg_node(&t), "axis", axis);
        run_case(name, &t, 0);
    }
    t = tg_new(KILN_OP_Unsqueeze, 13);
    tg_in(&t, RT(2, 3, 5), false);
    tg_in(&t, ints_tensor(2, D(0, -1)), true);
    tg_outs(&t, 1);
    run_case("Unsqueeze", &t, 0);
    t = tg_new(KILN_OP_Squeeze, 13);
    tg_in(&t, RT(4, 3, 1, 5, 1), false);
    tg_in(&t, ints_tensor(1, D(-1)), true);
    tg_outs(&t, 1);
    run_case("Squeeze", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);
    tg_in(&t, RT(4, 3, 5, 7, 2), false);
    tg_outs(&t, 1);
    attr_ints(&t, "perm", 4, D(2, 0, 3, 1));
    run_case("Transpose 2031", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);
    tg_in(&t, RT(4, 2, 17, 12, 9), false);
    tg_outs(&t, 1);
    attr_ints(&t, "perm", 4, D(0, 2, 1, 3));
    run_case("Transpose 0213 (heads)", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);
    tg_in(&t, RT(4, 2, 17, 12, 64), false);
    tg_outs(&t, 1);
    attr_ints(&t, "perm", 4, D(0, 2, 1, 3));
    run_case("Transpose 0213 (16-byte runs)", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);   /* K^T of attention: a batched 2-D transpose (tiles) */
    tg_in(&t, RT(4, 2, 37, 3, 40), false);
    tg_outs(&t, 1);
    attr_ints(&t, "perm", 4, D(0, 2, 3, 1));
    run_case("Transpose 0231 (tiles)", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);
    tg_in(&t, RT(2, 67, 45), false);
    tg_outs(&t, 1);
    run_case("Transpose 2-D (tiles)", &t, 0);
    t = tg_new(KILN_OP_Slice, 13);
    tg_in(&t, RT(3, 5, 7, 34), false);
    tg_in(&t, ints_tensor(1, D(2)), true);
    tg_in(&t, ints_tensor(1, D(32)), true);
    tg_in(&t, ints_tensor(1, D(2)), true);
    tg_outs(&t, 1);
    run_case("Slice inner (8-byte runs)", &t, 0);
    t = tg_new(KILN_OP_Slice, 13);
    tg_in(&t, RT(3, 9, 11, 13), false);
    tg_in(&t, ints_tensor(2, D(-2, 1)), true);
    tg_in(&t, ints_tensor(2, D(0, 100)), true);
    tg_in(&t, ints_tensor(2, D(1, 2)), true);
    tg_in(&t, ints_tensor(2, D(-3, 2)), true);
    tg_outs(&t, 1);
    run_case("Slice steps -3, 2", &t, 0);
    t = tg_new(KILN_OP_Expand, 13);
    tg_in(&t, RT(2, 5, 1), false);
    tg_in(&t, ints_tensor(3, D(3, 5, 7)), true);
    tg_outs(&t, 1);
    run_case("Expand", &t, 0);
    t = tg_new(KILN_OP_Concat, 13);
    tg_in(&t, RT(3, 3, 2, 5), false);
    tg_in(&t, RT(3, 3, 7, 5), false);
    tg_in(&t, RT(3, 3, 1, 5), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 1);
    run_case("Concat axis 1", &t, 0);
    t = tg_new(KILN_OP_Gather, 13);
    tg_in(&t, RT(3, 5, 9, 3), false);
    tg_in(&t, ints_tensor(4, D(0, -1, 4, 2)), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 1);
    run_case("Gather axis 1", &t, 0);
    t = tg_new(KILN_OP_Gather, 13);
    tg_in(&t, RT(2, 1000, 33), true);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 2, D(3, 129), 0, 999), false);
    tg_outs(&t, 1);
    run_case("Gather embedding", &t, 0);
}

static void nn_cases(void)
{
    tgraph t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 3, D(3, 17, 129), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax last axis", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 3, D(3, 17, 13), -5, 5), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 1);
    run_case("Softmax axis 1 (strided)", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 2, D(5, 2001), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax 2001 cols (block)", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 2, D(37, 31), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax 31 cols", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 2, D(37, 136), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax 136 cols", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 2, D(5, 40), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax 40 cols", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 3, D(3, 17, 769), -3, 3), false);
    tg_in(&t, RT(1, 769), true);
    tg_in(&t, RT(1, 769), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 3, D(3, 17, 768), -3, 3), false);
    tg_in(&t, RT(1, 768), true);
    tg_in(&t, RT(1, 768), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization 768", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 2, D(5, 200), -3, 3), false);
    tg_in(&t, RT(1, 200), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization 200 no bias", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 2, D(9, 1501), -3, 3), false);
    tg_in(&t, RT(1, 1501), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization 1501 (block)", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 3, D(4, 3, 50), -3, 3), false);
    tg_in(&t, RT(2, 3, 50), true);
    tg_in(&t, RT(2, 3, 50), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 1);
    run_case("LayerNormalization axis 1", &t, 1e-5);
    t = tg_new(KILN_OP_MaxPool, 13);
    tg_in(&t, RT(4, 2, 5, 17, 19), false);
    tg_outs(&t, 1);
    attr_ints(&t, "kernel_shape", 2, D(3, 3));
    attr_ints(&t, "strides", 2, D(2, 2));
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    run_case("MaxPool 3x3 s2 p1", &t, 0);
    for (int cip = 0; cip < 2; cip++) {
        t = tg_new(KILN_OP_AveragePool, 13);
        tg_in(&t, RT(4, 2, 3, 15, 14), false);
        tg_outs(&t, 1);
        attr_ints(&t, "kernel_shape", 2, D(3, 2));
        attr_ints(&t, "strides", 2, D(2, 3));
        attr_ints(&t, "pads", 4, D(1, 0, 2, 1));
        kiln__node_set_attr_i(tg_node(&t), "ceil_mode", 1);
        kiln__node_set_attr_i(tg_node(&t), "count_include_pad", cip);
        run_case(cip ? "AveragePool ceil, incl pad" : "AveragePool ceil, excl pad", &t, 1e-6);
    }
    t = tg_new(KILN_OP_GlobalAveragePool, 13);
    tg_in(&t, RT(4, 3, 33, 7, 9), false);
    tg_outs(&t, 1);
    run_case("GlobalAveragePool", &t, 1e-6);
}

static void conv_cases(void)
{
    tgraph t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 2, 6, 15, 13), false);
    tg_in(&t, RT(4, 8, 3, 3, 3), true);
    tg_in(&t, RT(1, 8), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "group", 2);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    attr_ints(&t, "strides", 2, D(2, 1));
    run_case("Conv 3x3 group 2 s(2,1)", &t, 1e-5);
    t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 3, 17, 9, 11), false);
    tg_in(&t, RT(4, 5, 17, 1, 1), true);
    tg_outs(&t, 1);
    run_case("Conv 1x1 no bias", &t, 1e-5);
    t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 1, 4, 19, 23), false);
    tg_in(&t, RT(4, 6, 4, 3, 3), true);
    tg_outs(&t, 1);
    attr_ints(&t, "dilations", 2, D(2, 2));
    kiln__node_set_attr_s(tg_node(&t), "auto_pad", "SAME_UPPER");
    run_case("Conv dilated SAME_UPPER", &t, 1e-5);
    t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(3, 2, 5, 31), false);
    tg_in(&t, RT(3, 7, 5, 3), true);
    tg_in(&t, RT(1, 7), true);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 2, D(1, 1));
    run_case("Conv 1-D", &t, 1e-5);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 3, 16, 14, 14), false);
    tg_in(&t, RT(4, 32, 16, 3, 3), true);
    tg_in(&t, RT(1, 32), true);
    tg_in(&t, RT(4, 3, 32, 14, 14), false);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    run_case("FusedConv bias+res+Relu", &t, 1e-5);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 16, 9, 9), false);
    tg_in(&t, RT(4, 8, 16, 1, 1), true);
    tg_in(&t, RT(1, 8), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    run_case("FusedConv bias+Relu", &t, 1e-5);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 16, 9, 9), false);
    tg_in(&t, RT(4, 8, 16, 3, 3), true);
    tg_in(&t, RT(1, 8), true);
    tg_outs(&t, 1);
    attr_ints(&t, "strides", 2, D(2, 2));
    set_act(&t, KILN_FUSED_SILU, 0, 0);
    run_case("FusedConv SiLU s2", &t, 1e-5);
}

static void gemm_cases(void)
{
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(3, 3, 17, 33), false);
    tg_in(&t, RT(2, 33, 9), true);
    tg_outs(&t, 1);
    run_case("MatMul [3,17,33]x[33,9]", &t, 1e-5);
    t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(4, 2, 3, 5, 7), false);
    tg_in(&t, RT(4, 2, 3, 7, 4), false);
    tg_outs(&t, 1);
    run_case("MatMul batched", &t, 1e-5);
    t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(2, 5, 7), false);
    tg_in(&t, RT(3, 3, 7, 4), false);
    tg_outs(&t, 1);
    run_case("MatMul broadcast A", &t, 1e-5);
    t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(1, 7), false);
    tg_in(&t, RT(3, 2, 7, 5), false);
    tg_outs(&t, 1);
    run_case("MatMul 1-D A", &t, 1e-5);
    t = tg_new(KILN_OP_FusedMatMul, 1);
    tg_in(&t, RT(3, 2, 17, 65), false);
    tg_in(&t, RT(2, 65, 33), true);
    tg_in(&t, RT(1, 33), true);
    tg_in(&t, RT(3, 2, 17, 33), false);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_GELU, 0, 0);
    run_case("FusedMatMul bias+res+Gelu", &t, 1e-5);
    t = tg_new(KILN_OP_FusedMatMul, 1);
    tg_in(&t, RT(3, 2, 17, 65), false);
    tg_in(&t, RT(2, 65, 33), true);
    tg_in(&t, RT(1, 33), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    run_case("FusedMatMul bias+Relu", &t, 1e-5);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 7, 130), false);
    tg_in(&t, RT(2, 33, 130), true);
    tg_in(&t, RT(1, 33), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transB", 1);
    kiln__node_set_attr_f(tg_node(&t), "alpha", 0.5f);
    run_case("Gemm transB bias alpha", &t, 1e-5);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 130, 7), false);
    tg_in(&t, RT(2, 130, 33), true);
    tg_in(&t, RT(2, 7, 1), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transA", 1);
    kiln__node_set_attr_f(tg_node(&t), "beta", 0.3f);
    run_case("Gemm transA C[M,1] beta", &t, 1e-5);
    t = tg_new(KILN_OP_FusedGemm, 1);
    tg_in(&t, RT(2, 5, 64), false);
    tg_in(&t, RT(2, 64, 48), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_TANH, 0, 0);
    run_case("FusedGemm Tanh", &t, 1e-5);
}

/* Attention reading its operands through perms (the attention-transpose pass folds the Transposes around it):
 * BERT's [B, S, H, D] layout with K key-major, K^T d-major, a lead-axis swap, a Q whose head dim is not the
 * innermost axis (no 16-byte rows), 3-D, a per-row mask; each against the CPU's strided reference */
static void perm_case(const char *name, const int64_t *dq, const int64_t *dk, const int64_t *dv, int r,
                      const int64_t *pq, const int64_t *pk, const int64_t *pv, const int64_t *py, kiln_tensor mask)
{
    tgraph t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, rand_tensor(F32, r, dq, -1, 1), false);
    tg_in(&t, rand_tensor(F32, r, dk, -1, 1), false);
    tg_in(&t, rand_tensor(F32, r, dv, -1, 1), false);
    if (mask.data)
        tg_in(&t, mask, false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.3f);
    if (pq)
        kiln__node_set_attr_ints(tg_node(&t), "q_perm", r, pq);
    if (pk)
        kiln__node_set_attr_ints(tg_node(&t), "kt_perm", r, pk);
    if (pv)
        kiln__node_set_attr_ints(tg_node(&t), "v_perm", r, pv);
    if (py)
        kiln__node_set_attr_ints(tg_node(&t), "y_perm", r, py);
    run_case(name, &t, 1e-5);
}

static void attention_perm_cases(void)
{
    static const int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1}, p0132[4] = {0, 1, 3, 2},
                         p1023[4] = {1, 0, 2, 3}, p102[3] = {1, 0, 2}, p120[3] = {1, 2, 0};
    kiln_tensor none = {0};
    perm_case("Attention BSHD BERT 2x128x12x64", D(2, 128, 12, 64), D(2, 128, 12, 64), D(2, 128, 12, 64), 4, p0213,
              p0231, p0213, p0213, rand_tensor(F32, 4, D(2, 1, 1, 128), -3, 0));
    perm_case("Attention BSHD 17x19 d8 dv5", D(2, 17, 3, 8), D(2, 3, 19, 8), D(2, 19, 3, 5), 4, p0213, p0132, p0213,
              p0213, rand_tensor(F32, 4, D(2, 1, 17, 19), -2, 1));
    perm_case("Attention lead swap, K^T", D(3, 2, 70, 40), D(2, 3, 40, 141), D(3, 2, 141, 40), 4, p1023, NULL, p1023,
              p1023, rand_tensor(F32, 4, D(2, 1, 1, 141), -3, 0));
    perm_case("Attention Q d-major (strided)", D(2, 16, 3, 33), D(2, 3, 33, 16), D(2, 3, 33, 16), 4, p0231, p0132,
              NULL, NULL, none);
    perm_case("Attention 3-D SHD", D(37, 4, 32), D(45, 4, 32), D(45, 4, 24), 3, p102, p120, p102, p102,
              rand_tensor(F32, 3, D(4, 37, 45), -2, 1));
}

/* in FP16 / BF16 (the KILN_CUDA_ACT passes) these run the fused attention kernel (KILN_CUDA_FUSED_ATTN=1),
 * and again the two-GEMM path (=0, the default) */
static void attention_cases(void)
{
    tgraph t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(4, 2, 3, 17, 8), false);
    tg_in(&t, RT(4, 2, 3, 8, 19), false);
    tg_in(&t, RT(4, 2, 3, 19, 5), false);
    tg_in(&t, rand_tensor(F32, 4, D(2, 1, 1, 19), -3, 0), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.35f);
    run_case("Attention additive mask", &t, 1e-5);
    for (int kind = 2; kind <= 3; kind++) {
        t = tg_new(KILN_OP_Attention, 1);
        tg_in(&t, RT(4, 2, 2, 9, 16), false);
        tg_in(&t, RT(4, 2, 2, 16, 130), false);
        tg_in(&t, RT(4, 2, 2, 130, 7), false);
        kiln_tensor m = rand_tensor(KILN_DT_BOOL, 4, D(2, 1, 9, 130), -0.3, 1);   /* mostly true */
        tg_in(&t, m, false);
        tg_outs(&t, 1);
        kiln__node_set_attr_f(tg_node(&t), "scale", 0.25f);
        kiln__node_set_attr_i(tg_node(&t), "mask_kind", kind);
        kiln__node_set_attr_f(tg_node(&t), "mask_fill", -1e4f);
        run_case(kind == 2 ? "Attention bool keep mask" : "Attention bool fill mask", &t, 1e-5);
    }
    /* BERT-base's shape (heads of 64, sequence 128, mask over the keys), sizes off the 16-grid (several
     * key chunks, query rows past the block's 64, head sizes of 40 and 128), no mask */
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(4, 2, 12, 128, 64), false);
    tg_in(&t, RT(4, 2, 12, 64, 128), false);
    tg_in(&t, RT(4, 2, 12, 128, 64), false);
    tg_in(&t, rand_tensor(F32, 4, D(2, 1, 1, 128), -3, 0), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.125f);
    run_case("Attention BERT 12x128x64", &t, 1e-5);
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(3, 3, 77, 40), false);
    tg_in(&t, RT(3, 3, 40, 141), false);
    tg_in(&t, RT(3, 3, 141, 40), false);
    tg_in(&t, rand_tensor(F32, 3, D(3, 77, 141), -2, 1), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.16f);
    run_case("Attention 77x141 d40 full mask", &t, 1e-5);
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(3, 2, 70, 128), false);
    tg_in(&t, RT(3, 2, 128, 33), false);
    tg_in(&t, RT(3, 2, 33, 128), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.09f);
    run_case("Attention d128 no mask", &t, 1e-5);
    /* key counts that are multiples of 8 (half storage: 16-byte rows in the softmax), 4 and 32 lanes a row */
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(4, 2, 3, 11, 16), false);
    tg_in(&t, RT(4, 2, 3, 16, 24), false);
    tg_in(&t, RT(4, 2, 3, 24, 8), false);
    tg_in(&t, rand_tensor(KILN_DT_BOOL, 4, D(2, 1, 11, 24), -0.3, 1), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.25f);
    kiln__node_set_attr_i(tg_node(&t), "mask_kind", 3);
    kiln__node_set_attr_f(tg_node(&t), "mask_fill", -1e4f);
    run_case("Attention Sk 24 fill mask", &t, 1e-5);
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(4, 2, 5, 9, 32), false);
    tg_in(&t, RT(4, 2, 5, 32, 264), false);
    tg_in(&t, RT(4, 2, 5, 264, 16), false);
    tg_in(&t, rand_tensor(F32, 4, D(2, 1, 1, 264), -3, 0), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.2f);
    run_case("Attention Sk 264 additive mask", &t, 1e-5);
    attention_perm_cases();
}

/* ---- FP16 / BF16 weights (what `--precision fp16|bf16` engines hold): the layer computes in that
 * format on the GPU, FP32 accumulation, half output; the CPU reference computes in float32 from the
 * same (pre-rounded) activations */

static kiln_tensor half_weight(kiln_dtype h, int nd, const int64_t *dims)
{
    kiln_tensor f = rand_tensor(F32, nd, dims, -1, 1), t;
    if (kiln__tensor_alloc(&t, h, nd, dims) != KILN_OK)
        exit(2);
    const float *x = f.data;
    uint16_t *o = t.data;
    for (int64_t i = 0; i < kiln_tensor_numel(&f); i++)
        o[i] = h == KILN_DT_FLOAT16 ? kiln__f32_to_f16(x[i]) : kiln__f32_to_bf16(x[i]);
    kiln__tensor_release(&f);
    return t;
}

static kiln_tensor half_act(kiln_dtype h, int nd, const int64_t *dims)
{
    kiln_tensor t = rand_tensor(F32, nd, dims, -1, 1);
    round_half(&t, h);
    return t;
}

static void half_weight_cases(void)
{
    static const kiln_dtype hs[2] = {KILN_DT_FLOAT16, KILN_DT_BFLOAT16};
    for (int k = 0; k < 2; k++) {
        kiln_dtype h = hs[k];
        double tol = h == KILN_DT_FLOAT16 ? 2e-3 : 1.6e-2;
        char name[64];
        const char *hn = h == KILN_DT_FLOAT16 ? "fp16" : "bf16";
        tgraph t = tg_new(KILN_OP_Conv, 13);
        tg_in(&t, half_act(h, 4, D(2, 16, 15, 13)), false);
        tg_in(&t, half_weight(h, 4, D(24, 16, 3, 3)), true);
        tg_in(&t, RT(1, 24), true);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        snprintf(name, sizeof name, "Conv %s W bias", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(3, 8, 9, 11)), false);
        tg_in(&t, half_weight(h, 4, D(16, 8, 3, 3)), true);
        tg_in(&t, RT(1, 16), true);
        tg_in(&t, half_act(h, 4, D(3, 16, 5, 6)), false);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        attr_ints(&t, "strides", 2, D(2, 2));
        set_act(&t, KILN_FUSED_RELU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W bias+res+Relu", hn);
        run_case(name, &t, tol);
        /* ResNet's shapes: 1x1 stride-2 projection (bias, no activation), 3x3 bias + ReLU, channels
         * multiples of 8; then odd channel counts (engines may refuse them: another path runs) */
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(2, 32, 14, 14)), false);
        tg_in(&t, half_weight(h, 4, D(64, 32, 1, 1)), true);
        tg_in(&t, RT(1, 64), true);
        tg_outs(&t, 1);
        attr_ints(&t, "strides", 2, D(2, 2));
        snprintf(name, sizeof name, "FusedConv %s W 1x1 s2 bias", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(3, 64, 7, 9)), false);
        tg_in(&t, half_weight(h, 4, D(64, 64, 3, 3)), true);
        tg_in(&t, RT(1, 64), true);
        tg_in(&t, half_act(h, 4, D(3, 64, 7, 9)), false);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        set_act(&t, KILN_FUSED_RELU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W 3x3 64 bias+res+Relu", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(1, 5, 11, 7)), false);
        tg_in(&t, half_weight(h, 4, D(7, 5, 3, 3)), true);
        tg_in(&t, RT(1, 7), true);
        tg_in(&t, half_act(h, 4, D(1, 7, 11, 7)), false);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        set_act(&t, KILN_FUSED_RELU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W odd C bias+res+Relu", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(2, 8, 10, 10)), false);
        tg_in(&t, half_weight(h, 4, D(16, 8, 3, 3)), true);
        tg_in(&t, RT(1, 16), true);
        tg_outs(&t, 1);
        set_act(&t, KILN_FUSED_SILU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W bias+SiLU", hn);
        run_case(name, &t, tol);
        /* a half convolution writes NHWC: the max pools after it take the 8-channel vector path */
        t = tg_new(KILN_OP_Conv, 13);
        tg_in(&t, half_act(h, 4, D(2, 8, 15, 13)), false);
        tg_in(&t, half_weight(h, 4, D(16, 8, 1, 1)), true);
        tg_then(&t, KILN_OP_MaxPool, 13);
        tg_outs(&t, 1);
        attr_ints(&t, "kernel_shape", 2, D(3, 3));
        attr_ints(&t, "strides", 2, D(2, 2));
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        snprintf(name, sizeof name, "Conv %s -> MaxPool 3x3 s2 NHWC", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_Conv, 13);
        tg_in(&t, half_act(h, 4, D(3, 8, 11, 9)), false);
        tg_in(&t, half_weight(h, 4, D(24, 8, 3, 3)), true);
        tg_then(&t, KILN_OP_MaxPool, 13);
        tg_outs(&t, 1);
        attr_ints(&t, "kernel_shape", 2, D(2, 3));
        attr_ints(&t, "dilations", 2, D(2, 1));
        attr_ints(&t, "pads", 4, D(0, 1, 1, 0));
        snprintf(name, sizeof name, "Conv %s -> MaxPool 2x3 d2 NHWC", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_MatMul, 13);
        tg_in(&t, half_act(h, 3, D(3, 17, 65)), false);
        tg_in(&t, half_weight(h, 2, D(65, 33)), true);
        tg_outs(&t, 1);
        snprintf(name, sizeof name, "MatMul %s W", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedMatMul, 1);
        tg_in(&t, half_act(h, 3, D(2, 19, 64)), false);
        tg_in(&t, half_weight(h, 2, D(64, 40)), true);
        tg_in(&t, RT(1, 40), true);
        tg_in(&t, half_act(h, 3, D(2, 19, 40)), false);
        tg_outs(&t, 1);
        set_act(&t, KILN_FUSED_GELU, 0, 0);
        snprintf(name, sizeof name, "FusedMatMul %s W bias+res+Gelu", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedMatMul, 1);
        tg_in(&t, half_act(h, 2, D(37, 96)), false);
        tg_in(&t, half_weight(h, 2, D(96, 72)), true);
        tg_in(&t, RT(1, 72), true);
        tg_outs(&t, 1);
        set_act(&t, KILN_FUSED_RELU, 0, 0);
        snprintf(name, sizeof name, "FusedMatMul %s W bias+Relu", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_Gemm, 13);
        tg_in(&t, half_act(h, 2, D(7, 130)), false);
        tg_in(&t, half_weight(h, 2, D(33, 130)), true);
        tg_in(&t, RT(1, 33), true);
        tg_outs(&t, 1);
        kiln__node_set_attr_i(tg_node(&t), "transB", 1);
        snprintf(name, sizeof name, "Gemm %s W transB bias", hn);
        run_case(name, &t, tol);
    }
}

/* --strict-device (KILN_DEVICE_STRICT): a layer the GPU does not run is an error instead of a CPU
 * fallback; without it the same graph runs with one fallback and matches the CPU exactly (the CPU ran it) */
static void strict_check(const char *what, tgraph (*make)(void))
{
    for (int strict = 0; strict < 2; strict++) {
        kiln_dev *sd = NULL;
        test_checks++;
        if (kiln__dev_open(KILN_DEVICE_CUDA, strict ? KILN_DEVICE_STRICT : 0, &sd) != KILN_OK) {
            printf("FAIL opening the device: %s\n", kiln_last_error());
            test_failures++;
            return;
        }
        tgraph t = make();
        const kiln_tensor *feed[8];
        for (int i = 0; i < t.n_feed; i++)
            feed[i] = &t.feed[i];
        kiln_tensor got[1] = {0}, ref[1] = {0};
        kiln_run_env cpu = {.nthreads = 1};
        kiln_status rs = kiln__exec_graph(t.g, NULL, feed, ref, &cpu, 0);
        kiln_run_env gpu = {.nthreads = 1, .dev = sd, .backend = kiln__dev_backend(sd)};
        kiln__dev_run_begin(sd);
        kiln_status s = kiln__exec_graph(t.g, NULL, feed, got, &gpu, 0);
        kiln_device_stats st;
        kiln__dev_stats(sd, &st);
        bool ok = strict ? s == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "--strict-device")
                         : s == KILN_OK && rs == KILN_OK && st.fallback_layers == 1 && compare(&got[0], &ref[0]) == 0;
        printf("%s %s %s: %s\n", ok ? "ok  " : "FAIL", what, strict ? "--strict-device refused" : "fell back to the CPU",
               s == KILN_OK ? "ran" : kiln_last_error());
        test_failures += !ok;
        kiln__tensor_release(&got[0]);
        kiln__tensor_release(&ref[0]);
        kiln__dev_weights_clear(sd);
        tg_free(&t);
        kiln__dev_close(sd);
    }
}

static tgraph reduce_mean_graph(void)
{
    tgraph t = tg_new(KILN_OP_ReduceMean, 13);
    tg_in(&t, RT(3, 2, 5, 7), false);
    tg_outs(&t, 1);
    attr_ints(&t, "axes", 1, D(1));
    return t;
}

/* ---- FP8 layers (what `--precision fp8` engines hold): kiln_wq / kiln_aq "fp8" and the activation's
 * scale; the CPU reference is the CPU's FP8 emulation (both operands quantize-dequantized, float32 sums),
 * the GPU runs cuBLASLt's FP8 GEMM with the same quantization */

static void mark_fp8(tgraph *t, float amax)
{
    kiln__node_set_attr_s(tg_node(t), KILN_ATTR_WQ, "fp8");
    kiln__node_set_attr_s(tg_node(t), KILN_ATTR_AQ, "fp8");
    kiln__node_set_attr_f(tg_node(t), KILN_ATTR_AQ_SCALE, amax / 448.0f);
    kiln__node_set_attr_i(tg_node(t), KILN_ATTR_WQ_TENSOR, 1);   /* as a --device cuda build marks them */
}

/* mark_fp8 on node nd of t's graph */
static void mark_fp8_node(tgraph *t, int nd, float amax)
{
    int keep = t->node;
    t->node = nd;
    mark_fp8(t, amax);
    t->node = keep;
}

/* An fp8 MatMul [5, k] x [k, 16] (constant weight). */
static tgraph fp8_matmul(int64_t k)
{
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(2, 5, k), false);
    tg_in(&t, RT(2, k, 16), true);
    tg_outs(&t, 1);
    mark_fp8(&t, 1.0f);
    return t;
}

/* FP8 weights with one scale per output channel (a CPU engine's FP8): not what the GPU's GEMM computes */
static tgraph fp8_per_channel_graph(void)
{
    tgraph t = fp8_matmul(32);
    kiln__node_set_attr_i(tg_node(&t), KILN_ATTR_WQ_TENSOR, 0);
    return t;
}

/* K = 33: not a multiple of 16, so cuBLASLt's FP8 GEMM cannot take it */
static tgraph fp8_illegal_graph(void) { return fp8_matmul(33); }

static tgraph fp8_trans_a_graph(void)
{
    tgraph t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 32, 7), false);
    tg_in(&t, RT(2, 32, 16), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transA", 1);
    mark_fp8(&t, 1.0f);
    return t;
}

/* inputs in [-1, 1]: amax 0.8 saturates the largest fifth of them, amax 50 puts small ones in E4M3's
 * subnormals; odd M, K and N multiples of 16 (what cuBLASLt's FP8 kernels take) */
static void fp8_shared_input_case(double tol);
static void fp8_feed_case(double tol);
static void fp8_midpoint_case(double tol);

/* FP8 convolutions (cuda_conv_fp8.c: cuDNN's E4M3 convolution, channels-last, scale + bias + residual + ReLU in
 * its graph): 3x3 with everything fused, 1x1 stride 2 saturating, 3x3 stride 2 with small inputs in E4M3's
 * subnormals, SiLU (kiln's epilogue after the graph) */
static void fp8_conv_cases(double tol)
{
    tgraph t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 32, 9, 11), false);
    tg_in(&t, RT(4, 48, 32, 3, 3), true);
    tg_in(&t, RT(1, 48), true);
    tg_in(&t, RT(4, 2, 48, 9, 11), false);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 1.0f);
    run_case("FP8 FusedConv 3x3 bias+res+Relu", &t, tol);
    t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 3, 64, 14, 13), false);
    tg_in(&t, RT(4, 32, 64, 1, 1), true);
    tg_outs(&t, 1);
    attr_ints(&t, "strides", 2, D(2, 2));
    mark_fp8(&t, 0.8f);
    run_case("FP8 Conv 1x1 s2 saturating", &t, tol);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 16, 15, 15), false);
    tg_in(&t, RT(4, 16, 16, 3, 3), true);
    tg_in(&t, RT(1, 16), true);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    attr_ints(&t, "strides", 2, D(2, 2));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 50.0f);
    run_case("FP8 FusedConv 3x3 s2 subnormal", &t, tol);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 1, 32, 8, 8), false);
    tg_in(&t, RT(4, 16, 32, 3, 3), true);
    tg_in(&t, RT(1, 16), true);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_SILU, 0, 0);
    mark_fp8(&t, 1.0f);
    run_case("FP8 FusedConv bias+SiLU", &t, tol);
}

/* 17 input channels: cuDNN's FP8 convolution wants multiples of 16, so the layer stays on the CPU */
static tgraph fp8_conv_illegal_graph(void)
{
    tgraph t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 1, 17, 6, 6), false);
    tg_in(&t, RT(4, 16, 17, 3, 3), true);
    tg_outs(&t, 1);
    mark_fp8(&t, 1.0f);
    return t;
}

static void fp8_cases(double tol)
{
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(3, 3, 17, 48), false);
    tg_in(&t, RT(2, 48, 32), true);
    tg_outs(&t, 1);
    mark_fp8(&t, 0.8f);
    run_case("FP8 MatMul saturating", &t, tol);
    t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(1, 64), false);
    tg_in(&t, RT(2, 64, 16), true);
    tg_outs(&t, 1);
    mark_fp8(&t, 1.0f);
    run_case("FP8 MatMul 1-D A", &t, tol);
    t = tg_new(KILN_OP_FusedMatMul, 1);
    tg_in(&t, RT(3, 2, 19, 64), false);
    tg_in(&t, RT(2, 64, 80), true);
    tg_in(&t, RT(1, 80), true);
    tg_in(&t, RT(3, 2, 19, 80), false);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_GELU, 0, 0);
    mark_fp8(&t, 1.0f);
    run_case("FP8 FusedMatMul bias+res+Gelu", &t, tol);
    t = tg_new(KILN_OP_FusedMatMul, 1);
    tg_in(&t, RT(2, 37, 96), false);
    tg_in(&t, RT(2, 96, 48), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 50.0f);
    run_case("FP8 FusedMatMul bias+Relu subnormal", &t, tol);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 7, 128), false);
    tg_in(&t, RT(2, 48, 128), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transB", 1);
    kiln__node_set_attr_f(tg_node(&t), "alpha", 0.5f);
    mark_fp8(&t, 1.0f);
    run_case("FP8 Gemm transB bias alpha", &t, tol);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 9, 32), false);
    tg_in(&t, RT(2, 32, 16), true);
    tg_in(&t, RT(2, 9, 16), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "beta", 0.3f);
    mark_fp8(&t, 0.9f);
    run_case("FP8 Gemm C[M,N] beta", &t, tol);
    t = tg_new(KILN_OP_FusedGemm, 1);
    tg_in(&t, RT(2, 5, 64), false);
    tg_in(&t, RT(2, 64, 48), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_TANH, 0, 0);
    mark_fp8(&t, 1.0f);
    run_case("FP8 FusedGemm Tanh", &t, tol);
    fp8_conv_cases(tol);
    fp8_shared_input_case(tol);
    fp8_midpoint_case(tol ? tol : 1);
    fp8_feed_case(tol);
}

/* The GPU's activation quantization byte for byte (the kernels skip the IEEE division where the product with the
 * reciprocal decides the byte, kernels_common.cuh to_e4m3): an FP8 MatMul with an identity weight returns its
 * quantized activations. Activations at E4M3 rounding midpoints (times the scale, +-1 ulp or exact), and random
 * ones, in one binade range so that one E4M3 step is >= 0.9% of the largest output: with float32 outputs any byte
 * that differs from the CPU's emulation fails the 1e-5 tolerance (FP16 outputs: 2e-3). */
static void fp8_midpoint_case(double tol)
{
    const char *out = getenv("KILN_CUDA_FP8_OUT");
    if (out && !strcmp(out, "fp32"))
        tol = fmin(tol, 1e-5);
    const float amax = 3.7f, s = amax / 448.0f;
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    kiln_tensor x = RT(2, 37, 64), w = rand_tensor(F32, 2, D(64, 64), 0, 0);
    float *xv = x.data, *wv = w.data;
    for (int k = 0; k < 64; k++)
        wv[k * 64 + k] = 1.0f;
    for (int i = 0; i < 37 * 64; i++) {
        double u = (test_randf(&rng) + 1.0) * 0.5;
        if (i % 5 == 4) {   /* a random value in range */
            xv[i] = (float)((u * 352 + 64) * s) * (i % 2 ? -1.0f : 1.0f);
            continue;
        }
        uint8_t c = (uint8_t)(0x60 + (int)(u * 29));   /* 64 .. 416 */
        float e = kiln__fp8_to_f32(KILN_DT_FP8E4M3, c), e1 = kiln__fp8_to_f32(KILN_DT_FP8E4M3, (uint8_t)(c + 1));
        float v = ((e + e1) * 0.5f) * s;
        v = i % 3 == 0 ? nextafterf(v, INFINITY) : i % 3 == 1 ? nextafterf(v, -INFINITY) : v;
        xv[i] = i % 2 ? -v : v;
    }
    tg_in(&t, x, false);
    tg_in(&t, w, true);
    tg_outs(&t, 1);
    mark_fp8(&t, amax);
    run_case("FP8 activations at E4M3 midpoints", &t, tol);
}

/* FP8 layers reading one tensor (BERT's Q, K and V GEMMs): the GPU quantizes it once and the next layers with the
 * same scale reuse it; a layer with another scale quantizes again. Run twice with other data in the same graph
 * input (the kept quantization must not outlive the upload), each run against the CPU. */
static void fp8_shared_input_case(double tol)
{
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(3, 2, 9, 64), false);
    tg_in(&t, RT(2, 64, 32), true);
    mark_fp8(&t, 1.0f);
    int x = tg_node(&t)->in[0];
    const float amax[2] = {1.0f, 0.5f};   /* the second scale saturates: results differ if it reused the first */
    for (int k = 0; k < 2; k++) {
        int in[2] = {x, tg_const(t.g, k ? "w_other" : "w_same", RT(2, 64, 48))};
        int nd = tg_node_add(t.g, KILN_OP_MatMul, 13, k ? "other_scale" : "same_scale", 2, in, k ? "y_other" : "y_same");
        mark_fp8_node(&t, nd, amax[k]);
    }
    tg_outs(&t, 1);   /* the first node's output, then the other two as graph outputs */
    for (int n = 1; n <= 2; n++)
        tg_output(t.g, n);
    for (int run = 0; run < 2; run++) {
        if (run) {   /* other data in the same input for the second run */
            kiln__tensor_release(&t.feed[0]);
            t.feed[0] = rand_tensor(F32, 3, D(2, 9, 64), -1, 1);
        }
        char name[64];
        snprintf(name, sizeof name, "FP8 shared input, run %d", run + 1);
        check_case(name, &t, tol);
    }
    tg_free(&t);
}

/* ---- FP8 feeds (docs/CUDA.md, "FP8 GEMMs"): a layer marked KILN_ATTR_FP8_FEED (the builder marks the producers of
 * FP8 layers' inputs; LayerNormalization and the FP8 GEMMs' GELU epilogue honour it) writes the E4M3 copy of its
 * output in its own kernel and the FP8 layers reading it skip their
 * quantization pass. The outputs must be bit-identical to a device whose FP8 layers quantize every input themselves
 * (KILN_CUDA_FP8_FEED=0), the device's counts must show the feeds read and no pass run, and both must match the CPU. */
static void mark_feed(kiln_graph *g, int nd, float amax)
{
    kiln__node_set_attr_f(&g->nodes[nd], KILN_ATTR_FP8_FEED, amax / 448.0f);
}

/* LayerNormalization -> FP8 MatMul (a first reader of its feed) and FP8 FusedMatMul bias + GELU -> FP8 MatMul (the
 * GELU epilogue's feed), as in a BERT layer: 3 FP8 layers fed, 0 passes (2 without feeds). */
static tgraph feed_graph(void)
{
    tgraph t = tg_new(KILN_OP_LayerNormalization, 17);
    kiln_graph *g = t.g;
    int h;
    tg_in(&t, RT(3, 2, 9, 64), false);
    tg_in(&t, rand_tensor(F32, 1, D(64), 0.5, 1.5), true);
    tg_in(&t, RT(1, 64), true);
    h = tg_out1(g, t.node, "h1");
    kiln__node_set_attr_i(tg_node(&t), "axis", -1);
    mark_feed(g, t.node, 4.0f);
    int in1[2] = {h, tg_const(g, "w1", RT(2, 64, 32))};
    int n1 = tg_node_add(g, KILN_OP_MatMul, 13, "side", 2, in1, "y1");
    mark_fp8_node(&t, n1, 4.0f);
    int in2[3] = {h, tg_const(g, "w2", RT(2, 64, 96)), tg_const(g, "b2", RT(1, 96))};
    int n2 = tg_node_add(g, KILN_OP_FusedMatMul, 1, "ffn1", 3, in2, "h2");
    int keep = t.node;
    t.node = n2;
    set_act(&t, KILN_FUSED_GELU, 0, 0);
    t.node = keep;
    mark_fp8_node(&t, n2, 4.0f);
    mark_feed(g, n2, 2.0f);
    int in3[2] = {g->nodes[n2].out[0], tg_const(g, "w3", RT(2, 96, 48))};
    int n3 = tg_node_add(g, KILN_OP_MatMul, 13, "ffn2", 2, in3, "y0");
    mark_fp8_node(&t, n3, 2.0f);
    tg_output(g, n3);
    tg_output(g, n1);
    return t;
}

/* Two runs of t on device d (the first uploads the weights, which drops any kept quantization): the second's outputs
 * into got, its counts into st; false (and a message) on failure. */
static bool feed_run(kiln_dev *d, tgraph *t, kiln_tensor *got, kiln_device_stats *st)
{
    const kiln_tensor *feed[8];
    for (int i = 0; i < t->n_feed; i++)
        feed[i] = &t->feed[i];
    kiln_run_env gpu = {.nthreads = 1, .dev = d, .backend = kiln__dev_backend(d)};
    kiln_status s = KILN_OK;
    for (int run = 0; run < 2 && s == KILN_OK; run++) {
        for (int o = 0; run && o < t->g->n_outputs; o++)
            kiln__tensor_release(&got[o]);
        kiln__dev_run_begin(d);
        s = kiln__exec_graph(t->g, NULL, feed, got, &gpu, 0);
    }
    kiln__dev_stats(d, st);
    kiln__dev_weights_clear(d);
    if (s != KILN_OK)
        printf("FAIL FP8 feeds: %s\n", kiln_last_error());
    return s == KILN_OK && st->device_layers == t->g->n_nodes;
}

static void fp8_feed_case(double tol)
{
    tgraph t = feed_graph();
    kiln_graph *g = t.g;
    tg_round_half(&t);
    const kiln_tensor *feed[8];
    for (int i = 0; i < t.n_feed; i++)
        feed[i] = &t.feed[i];
    kiln_tensor ref[4] = {0}, got[4] = {0}, off[4] = {0};
    kiln_run_env cpu = {.nthreads = 1};
    test_checks++;
    bool ok = kiln__exec_graph(g, NULL, feed, ref, &cpu, 0) == KILN_OK;
    const char *name = "FP8 feeds: LayerNorm, GELU";
    if (!ok || !dev) {
        printf("%s %s%s\n", ok ? "cpu " : "FAIL", name, ok ? "" : ": CPU reference failed");
        test_failures += !ok;
    } else {
        kiln_device_stats on, no;
        kiln_dev *d0 = NULL;
        setenv("KILN_CUDA_FP8_FEED", "0", 1);
        bool opened = kiln__dev_open(KILN_DEVICE_CUDA, 0, &d0) == KILN_OK;
        unsetenv("KILN_CUDA_FP8_FEED");
        ok = opened && feed_run(dev, &t, got, &on) && feed_run(d0, &t, off, &no);
        double worst = 0, cos = 1, same = 0;
        for (int o = 0; ok && o < g->n_outputs; o++) {
            worst = fmax(worst, compare(&got[o], &ref[o]));
            cos = fmin(cos, cosine(&got[o], &ref[o]));
            same = fmax(same, got[o].nbytes == off[o].nbytes && !memcmp(got[o].data, off[o].data, got[o].nbytes)
                                  ? 0.0 : 1.0);
        }
        /* with half storage (of the activations, or of the FP8 GEMMs' outputs: KILN_CUDA_FP8_OUT fp16 / bf16, FP16
         * unset) the CPU quantizes float32 values the GPU holds rounded to half: some land on the other side of an
         * E4M3 rounding midpoint (one E4M3 step), so the cosine decides there */
        const char *fo = getenv("KILN_CUDA_FP8_OUT");
        bool half_store = half_mode != KILN_DT_UNDEFINED || !fo || strcmp(fo, "fp32");
        bool near = !half_store ? worst <= tol : cos >= 0.999 && worst <= 0.1;
        const unsigned long long want_fed = 3, want_off = 2;
        bool counts = ok && on.fp8_fed_inputs == want_fed && on.fp8_quant_passes == 0 && no.fp8_fed_inputs == 0 &&
                      no.fp8_quant_passes == want_off;
        bool good = ok && near && same == 0 && counts;
        printf("%s %-28s max rel err %.3g cosine %.6f (tol %.1g); bit-identical to no feeds: %s; fed %llu passes %llu "
               "(without feeds: %llu / %llu)\n", good ? "ok  " : "FAIL", name, worst, cos, tol, same == 0 ? "yes" : "NO",
               on.fp8_fed_inputs, on.fp8_quant_passes, no.fp8_fed_inputs, no.fp8_quant_passes);
        test_failures += !good;
        if (d0)
            kiln__dev_close(d0);
    }
    for (int o = 0; o < 4; o++) {
        kiln__tensor_release(&ref[o]);
        kiln__tensor_release(&got[o]);
        kiln__tensor_release(&off[o]);
    }
    tg_free(&t);
}

/* ---- 4-bit weight-only layers (`--precision nvfp4|mxfp4|int4` engines): kiln_wq the format, kiln_aq "fp16".
 * The GPU decodes the CPU backend's packing of the weight to the emulation's FP16 weights exactly and
 * multiplies FP16-rounded activations with FP32 sums; its output is FP16 (one rounding: 2e-3). Sizes off
 * every tile: K not a multiple of the 16 / 32-element blocks, several 128-row / 128-column tiles, N odd. */
static void mark_fp4(tgraph *t, const char *fmt)
{
    kiln__node_set_attr_s(tg_node(t), KILN_ATTR_WQ, fmt);
    kiln__node_set_attr_s(tg_node(t), KILN_ATTR_AQ, "fp16");
}

/* 4-bit embedding tables (PRECISION.md "4-bit embedding tables"): a Gather so marked keeps only the CPU backend's
 * packing of its table on the GPU and decodes the gathered rows as the GEMM decodes its weights, to the emulation's
 * FP16 values exactly, in float32 storage (tol 0; the half passes: that storage's rounding). Row lengths odd, below
 * one block and of several blocks; int64 and int32 indices of ranks 1 to 3 with negative ones (they wrap). */
static void fp4_gather_cases(void)
{
    static const char *fmts[3] = {"nvfp4", "mxfp4", "int4"};
    char name[64];
    for (int f = 0; f < 3; f++) {
        tgraph t = tg_new(KILN_OP_Gather, 13);
        tg_in(&t, rand_tensor(F32, 2, D(1000, 77), -0.2, 0.2), true);
        tg_in(&t, rand_tensor(KILN_DT_INT64, 2, D(3, 129), -1000, 999), false);
        tg_outs(&t, 1);
        mark_fp4(&t, fmts[f]);
        snprintf(name, sizeof name, "%s Gather 1000x77 int64", fmts[f]);
        run_case(name, &t, 0);
        t = tg_new(KILN_OP_Gather, 13);
        tg_in(&t, RT(2, 50, 7), true);
        tg_in(&t, rand_tensor(KILN_DT_INT32, 1, D(33), -50, 49), false);
        tg_outs(&t, 1);
        mark_fp4(&t, fmts[f]);
        snprintf(name, sizeof name, "%s Gather 50x7 int32", fmts[f]);
        run_case(name, &t, 0);
    }
    tgraph t = tg_new(KILN_OP_Gather, 13);
    tg_in(&t, RT(2, 300, 768), true);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 3, D(2, 3, 40), -300, 299), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", -2);
    mark_fp4(&t, "nvfp4");
    run_case("nvfp4 Gather 300x768 axis -2", &t, 0);
}

static void fp4_cases(void)
{
    static const char *fmts[3] = {"nvfp4", "mxfp4", "int4"};
    char name[64];
    for (int f = 0; f < 3; f++) {
        tgraph t = tg_new(KILN_OP_MatMul, 13);
        tg_in(&t, RT(3, 3, 17, 70), false);
        tg_in(&t, RT(2, 70, 33), true);
        tg_outs(&t, 1);
        mark_fp4(&t, fmts[f]);
        snprintf(name, sizeof name, "%s MatMul K 70 N 33", fmts[f]);
        run_case(name, &t, 2e-3);
        t = tg_new(KILN_OP_FusedMatMul, 1);
        tg_in(&t, RT(3, 2, 150, 768), false);
        tg_in(&t, RT(2, 768, 200), true);
        tg_in(&t, RT(1, 200), true);
        tg_in(&t, RT(3, 2, 150, 200), false);
        tg_outs(&t, 1);
        set_act(&t, KILN_FUSED_GELU, 0, 0);
        mark_fp4(&t, fmts[f]);
        snprintf(name, sizeof name, "%s FusedMatMul 300x768x200 Gelu", fmts[f]);
        run_case(name, &t, 2e-3);
    }
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(1, 64), false);
    tg_in(&t, RT(2, 64, 16), true);
    tg_outs(&t, 1);
    mark_fp4(&t, "nvfp4");
    run_case("nvfp4 MatMul 1-D A", &t, 2e-3);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 7, 130), false);
    tg_in(&t, RT(2, 48, 130), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transB", 1);
    mark_fp4(&t, "mxfp4");
    run_case("mxfp4 Gemm transB bias", &t, 2e-3);
    t = tg_new(KILN_OP_FusedGemm, 1);
    tg_in(&t, RT(2, 5, 64), false);
    tg_in(&t, RT(2, 64, 48), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp4(&t, "int4");
    run_case("int4 FusedGemm bias Relu", &t, 2e-3);
    fp4_gather_cases();
}

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
           "%.1f MB of weights on the GPU\n", r->path, ds.device_layers, ds.host_layers, ds.fallback_layers,
           ds.fallback_ops, ds.graph_replays, (double)ds.weight_bytes / 1e6);
    if (ds.fallback_layers)
        return "layers fell back to the CPU";
    /* kiln_context_layer_place agrees with the counts (these models have no subgraphs), and a CPU context
     * has no places */
    int count[4] = {0};
    for (int i = 0; i < kiln_engine_num_layers(r->e); i++) {
        kiln_layer_place p = KILN_PLACE_NONE, q = KILN_PLACE_DEVICE;
        if (kiln_context_layer_place(r->gc, i, &p) != KILN_OK || kiln_context_layer_place(r->cc, i, &q) != KILN_OK ||
            q != KILN_PLACE_NONE || p > KILN_PLACE_FALLBACK)
            return "kiln_context_layer_place failed";
        count[p]++;
    }
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

/* Calibration data for an fp8 build (its activation scales): 4 samples of synthetic inputs (seeds 100 to
 * 103) as NAME_K.npy in a fresh directory, removed by calib_rm; *e32: the float32 engine they came from
 * (the accuracy reference of fp8_accuracy; the caller frees it). */
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
    printf("     %-28s FP8 layers' inputs: %llu fed by their producers, %llu quantized in passes of their own\n", path,
           ds.fp8_fed_inputs, ds.fp8_quant_passes);
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

/* An fp8 engine on the GPU must be as accurate as the CPU's FP8 emulation: per output, its cosine to the
 * float32 engine's output (a CPU context on the same inputs) at most 1e-3 below the emulation's (cc's).
 * NULL when it is, else why not. */
static const char *fp8_accuracy(kiln_engine_t e32, kiln_engine_t e, const kiln_tensor *in, int nin,
                                kiln_context_t cc, kiln_context_t gc, const char *path)
{
    kiln_context_t rc = NULL;
    const char *why = NULL;
    if (kiln_context_create(e32, &rc) != KILN_OK)
        return kiln_last_error();
    for (int i = 0; !why && i < nin; i++)
        if (kiln_context_set_input(rc, kiln_engine_input_name(e, i), &in[i]) != KILN_OK)
            why = kiln_last_error();
    if (!why && (kiln_engine_num_outputs(e32) != kiln_engine_num_outputs(e) || kiln_context_run(rc) != KILN_OK))
        why = kiln_engine_num_outputs(e32) != kiln_engine_num_outputs(e) ? "fp32 and fp8 outputs differ" : kiln_last_error();
    for (int o = 0; !why && o < kiln_engine_num_outputs(e); o++) {
        const kiln_tensor *ref = kiln_context_output(rc, o);
        double cg = cosine(kiln_context_output(gc, o), ref), ce = cosine(kiln_context_output(cc, o), ref);
        printf("     %-28s output %-20s cosine to fp32: GPU fp8 %.6f, CPU fp8 emulation %.6f\n", path,
               kiln_engine_output_name(e, o), cg, ce);
        if (!(cg >= ce - 1e-3))
            why = "the GPU's FP8 is less accurate than the CPU's emulation";
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

/* MODEL.onnx[@SHAPES][#PRECISION]: the engine built for CUDA, run on the GPU against the CPU. */
static void model_case(const char *spec)
{
    char path[512];
    snprintf(path, sizeof path, "%s", spec);
    char *hash = strchr(path, '#');   /* MODEL.onnx@SHAPES#PRECISION */
    const char *prec = NULL;
    if (hash) {
        *hash = 0;
        prec = hash + 1;
    }
    /* fp16 / bf16 engines: max |gpu - cpu| / max(1, max |cpu|) within these */
    /* fp8: an activation that lands on the other side of an E4M3 rounding midpoint on the GPU (other sums'
     * order, FP16 storage between layers) moves by a whole E4M3 step (6-12%) and carries that through the
     * layers (BERT-base, H200: max rel err 0.12, cosine 0.9985 GPU vs CPU emulation, each 0.9974 to fp32):
     * fp8 engines get a looser max error and a cosine bound against the emulation, and must be as accurate
     * as the emulation against the float32 engine (fp8_accuracy) */
    bool fp8 = prec && !strcmp(prec, "fp8");
    double tol = !prec || !strcmp(prec, "fp32") ? 1e-4 : !strcmp(prec, "fp16") ? 1e-2 : fp8 ? 0.25 : 5e-2;
    double cos_tol = fp8 ? 0.99 : -1.0;
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
    kiln_build_options bo = {.no_tactics = true, .device = KILN_DEVICE_CUDA, .precision = prec};
    kiln_synth_options so = {.shapes = NULL, .seed = 7};
    char cdir[64] = "";
    kiln_calib_options co = {.data_dir = cdir, .method = KILN_CALIB_MINMAX};
    if (kiln_model_load(path, &m) != KILN_OK || (shapes_spec && kiln_shapes_parse(shapes_spec, &shapes) != KILN_OK)) {
        why = kiln_last_error();
        goto done;
    }
    if (fp8) {   /* calibrated activation scales, and the float32 engine as the accuracy reference */
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
        why = fp8_accuracy(e32, r.e, r.in, r.nin, r.cc, r.gc, path);
    if (!why)
        why = model_new_inputs(&r, &so);
    if (!why)
        why = model_second_context(&r, h2d_first);
    const char *stats = model_device_stats(&r);
    if (!why)
        why = stats;
    bool lowbit = prec && (fp8 || !strcmp(prec, "nvfp4") || !strcmp(prec, "mxfp4") || !strcmp(prec, "int4"));
    const char *wb = lowbit && r.gc ? lowbit_weight_bytes(&r) : NULL;
    if (!why)
        why = wb;
done:;
    bool ok = !why && r.worst <= tol && r.cos_min >= cos_tol;
    printf("%s %-28s %-4s max rel err %.3g (tol %.0e), cosine >= %.6f%s%s\n", ok ? "ok  " : "FAIL", path,
           prec ? prec : "fp32", r.worst, tol, r.cos_min, why ? ": " : "", why ? why : "");
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

static void layer_cases(void)
{
    binary_cases();
    unary_cases();
    cast_where_cases();
    shape_cases();
    nn_cases();
    conv_cases();
    gemm_cases();
    attention_cases();
}

int main(int argc, char **argv)
{
    bool require = false, cpu_only = false;
    int first_model = argc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--require-gpu"))
            require = true;
        else if (!strcmp(argv[i], "--cpu-only"))
            cpu_only = true;
        else if (first_model == argc)
            first_model = i;
    }
    if (cpu_only) {   /* the one-node cases on the CPU alone (checks this harness without a GPU) */
        layer_cases();
        half_weight_cases();
        fp8_cases(0);
        fp4_cases();
        printf("test_gpu --cpu-only: ");
        return TEST_SUMMARY();
    }
    setenv("KILN_CUDA_POISON", "1", 1);
    if (!getenv("KILN_CUDA_NHWC"))   /* half convolutions channels-last at every batch size (the cases are small) */
        setenv("KILN_CUDA_NHWC", "1", 1);
    if (kiln__dev_open(KILN_DEVICE_CUDA, 0, &dev) != KILN_OK) {
        printf("test_gpu: SKIP: %s\n", kiln_last_error());
        return require ? 1 : 77;
    }
    kiln_device_stats st;
    kiln__dev_stats(dev, &st);
    printf("test_gpu: %s\n", st.description);
    layer_cases();
    half_weight_cases();
    strict_check("ReduceMean", reduce_mean_graph);
    strict_check("FP8 MatMul K 33", fp8_illegal_graph);
    strict_check("FP8 Gemm transA", fp8_trans_a_graph);
    strict_check("FP8 MatMul per-channel weight scales", fp8_per_channel_graph);
    strict_check("FP8 Conv 17 channels", fp8_conv_illegal_graph);
    fp4_cases();
    /* FP8 GEMMs with each output storage: float32, FP16 (the default) and BF16 (plus their rounding of the
     * output). The quantized operands are the CPU's exactly; the sums differ: Hopper's FP8 tensor cores add
     * inside each MMA keeping about 14 bits (DeepSeek-V3 report, sec. 3.3.2). These cases sum up to 96
     * products of operands in [-1, 1] to partial sums of magnitude ~8, whose 14-bit ulp is 4.9e-4: a few
     * such roundings per output. Measured on the H200: up to 3.6e-4 on one draw of the data, 1.04e-3 on
     * another (float32 outputs), so float32 outputs get 2e-3 (4 ulps), like FP16's own rounding */
    static const char *outs[3] = {"fp32", "fp16", "bf16"};
    static const double out_tol[3] = {2e-3, 2e-3, 1.6e-2};
    const char *fp8_out = getenv("KILN_CUDA_FP8_OUT");   /* the models below run with the caller's */
    char fp8_keep[16];
    snprintf(fp8_keep, sizeof fp8_keep, "%s", fp8_out ? fp8_out : "");
    for (int k = 0; k < 3; k++) {
        kiln__dev_close(dev);
        setenv("KILN_CUDA_FP8_OUT", outs[k], 1);
        if (kiln__dev_open(KILN_DEVICE_CUDA, 0, &dev) != KILN_OK) {
            printf("FAIL reopening the device: %s\n", kiln_last_error());
            return 1;
        }
        printf("test_gpu: FP8 GEMMs with %s outputs (KILN_CUDA_FP8_OUT=%s)\n", outs[k], outs[k]);
        fp8_cases(out_tol[k]);
    }
    if (fp8_keep[0])
        setenv("KILN_CUDA_FP8_OUT", fp8_keep, 1);
    else
        unsetenv("KILN_CUDA_FP8_OUT");
    /* the half convolutions again through cuDNN's legacy API (the graph API's fallback) */
    kiln__dev_close(dev);
    setenv("KILN_CUDA_CONV_GRAPH", "0", 1);
    if (kiln__dev_open(KILN_DEVICE_CUDA, 0, &dev) != KILN_OK) {
        printf("FAIL reopening the device: %s\n", kiln_last_error());
        return 1;
    }
    printf("test_gpu: half convolutions through cuDNN's legacy API (KILN_CUDA_CONV_GRAPH=0)\n");
    half_weight_cases();
    unsetenv("KILN_CUDA_CONV_GRAPH");
    /* every layer again with its float activations held in FP16, then BF16 */
    for (int h = 0; h < 2; h++) {
        kiln__dev_close(dev);
        setenv("KILN_CUDA_ACT", h ? "bf16" : "fp16", 1);
        setenv("KILN_CUDA_FUSED_ATTN", "1", 1);   /* the fused kernel, whatever the default */
        if (kiln__dev_open(KILN_DEVICE_CUDA, 0, &dev) != KILN_OK) {
            printf("FAIL reopening the device: %s\n", kiln_last_error());
            return 1;
        }
        half_mode = h ? KILN_DT_BFLOAT16 : KILN_DT_FLOAT16;
        half_tol = h ? 1.6e-2 : 2e-3;
        printf("test_gpu: float activations held as %s (tol %.1g)\n", h ? "BF16" : "FP16", half_tol);
        layer_cases();
        fp4_gather_cases();
        fp8_feed_case(half_tol);
        kiln__dev_close(dev);
        setenv("KILN_CUDA_FUSED_ATTN", "0", 1);
        if (kiln__dev_open(KILN_DEVICE_CUDA, 0, &dev) != KILN_OK) {
            printf("FAIL reopening the device: %s\n", kiln_last_error());
            return 1;
        }
        printf("test_gpu: %s attention as two GEMMs and a softmax (KILN_CUDA_FUSED_ATTN=0)\n", h ? "BF16" : "FP16");
        attention_cases();
        unsetenv("KILN_CUDA_FUSED_ATTN");
    }
    half_mode = KILN_DT_UNDEFINED;
    unsetenv("KILN_CUDA_ACT");
    kiln__dev_close(dev);
    static const char *defaults[] = {
        "models/tiny_cnn.onnx@input:2x3x32x32",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16",
        "models/resnet50.onnx@input:2x3x224x224",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128",
        "models/tiny_cnn.onnx@input:2x3x32x32#fp16",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16#bf16",
        "models/resnet50.onnx@input:2x3x224x224#fp16",
        "models/resnet50.onnx@input:2x3x224x224#bf16",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#fp16",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#bf16",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16#fp8",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#fp8",
        "models/resnet50.onnx@input:2x3x224x224#fp8",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16#nvfp4",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16#mxfp4",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#nvfp4"};
    if (first_model < argc) {
        for (int i = first_model; i < argc; i++)
            if (strcmp(argv[i], "--require-gpu"))
                model_case(argv[i]);
    } else {
        for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
            model_case(defaults[i]);
    }
    printf("test_gpu: ");
    return TEST_SUMMARY();
}
