/* The pass pipeline scales (issue 6 item 9): building a generated 200k-node chain of mixed ops
 * with fusable patterns must take seconds, not the quadratic minutes the per-node reader scans
 * of the passes used to cost. The chain repeats one cycle of seven blocks (every value
 * [1,2,4,4] float32; weights shared by all cycles, so some constants have tens of thousands of
 * readers):
 *   MatMul+Relu                        -> FusedMatMul(Relu)
 *   Add(const) Identity Mul(const)     -> Add, Mul
 *   Transpose Relu Transpose Transpose -> Transpose, Relu          (the pair cancels)
 *   Conv+BatchNormalization+Relu       -> FusedConv(Relu)
 *   MatMul+Add(bias)+GELU(erf form)    -> FusedMatMul(bias, Gelu)
 *   MatMul+Add(block input)            -> FusedMatMul(residual)
 *   Conv, x*Sigmoid(x)                 -> FusedConv(SiLU)
 * On a small instance the built engine must compute what the model computes, and the use index
 * must stay consistent through every pass; on the big one the fused-op counts must be exact.
 * KILN_SCALING_NODES overrides the big instance's size (to measure other sizes). */
#include "build/build.h"
#include "runtime/model.h"
#include "passes/passes.h"
#include "kiln/kiln.h"
#include "test.h"
#include <string.h>
#include <time.h>

#define CYCLE_NODES 24
enum { C = 2, S = 4 };

static int new_value(kiln_graph *g, const char *prefix)
{
    char name[64];
    snprintf(name, sizeof name, "%s%d", prefix, g->n_values);
    return kiln__graph_add_value(g, name);
}

static int constant(kiln_graph *g, int ndim, const int64_t *dims, const float *data)
{
    kiln_tensor t;
    if (kiln__tensor_alloc(&t, KILN_DT_FLOAT32, ndim, dims) != KILN_OK)
        return -1;
    memcpy(t.data, data, t.nbytes);
    return kiln__graph_add_const(g, "w", &t);
}

static void attr_ints(kiln_node *n, const char *name, int count, const int64_t *v)
{
    n->attrs = kiln__realloc(n->attrs, sizeof *n->attrs * (size_t)(n->n_attr + 1));
    kiln_attr *a = &n->attrs[n->n_attr++];
    memset(a, 0, sizeof *a);
    a->name = kiln__strdup(name);
    a->type = KILN_ATTR_INTS;
    a->n = count;
    a->ints = kiln__malloc(sizeof(int64_t) * (size_t)count);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)count);
}

/* Appends op(in...) with one new output value; returns the node index (its output: out_of). */
static int node(kiln_graph *g, kiln_op op, int n_in, const int *in)
{
    int y = new_value(g, "v"), i = kiln__graph_add_node(g);
    kiln_node *n = &g->nodes[i];
    char name[64];
    snprintf(name, sizeof name, "%s_%d", kiln__op_name(op), i);
    n->name = kiln__strdup(name);
    n->op_type = kiln__strdup(kiln__op_name(op));
    n->domain = kiln__strdup("");
    n->op = op;
    n->opset = 17;
    n->n_in = n_in;
    n->in = kiln__malloc(sizeof(int) * (size_t)n_in);
    memcpy(n->in, in, sizeof(int) * (size_t)n_in);
    n->n_out = 1;
    n->out = kiln__malloc(sizeof(int));
    n->out[0] = y;
    g->values[y].producer = i;
    return i;
}

static int out_of(const kiln_graph *g, int i) { return g->nodes[i].out[0]; }

static int op1(kiln_graph *g, kiln_op op, int a) { return out_of(g, node(g, op, 1, &a)); }
static int op2(kiln_graph *g, kiln_op op, int a, int b) { return out_of(g, node(g, op, 2, (int[]){a, b})); }

typedef struct weights { int w44, bias, scale, wc, gamma, beta, mean, var, sqrt2, one, half; } weights;

static void make_weights(kiln_graph *g, weights *w)
{
    unsigned long long seed = 7;
    float buf[C * C * 9];
    for (int k = 0; k < C * C * 9; k++)
        buf[k] = 0.4f * test_randf(&seed);
    w->w44 = constant(g, 2, (int64_t[]){S, S}, buf);
    w->bias = constant(g, 1, (int64_t[]){S}, buf + 16);
    w->wc = constant(g, 4, (int64_t[]){C, C, 3, 3}, buf);
    w->gamma = constant(g, 1, (int64_t[]){C}, (float[]){1.1f, 0.9f});
    w->beta = constant(g, 1, (int64_t[]){C}, (float[]){0.1f, -0.2f});
    w->mean = constant(g, 1, (int64_t[]){C}, (float[]){0.05f, -0.1f});
    w->var = constant(g, 1, (int64_t[]){C}, (float[]){0.8f, 1.3f});
    w->scale = constant(g, 0, NULL, (float[]){0.9f});
    w->sqrt2 = constant(g, 0, NULL, (float[]){1.41421356f});
    w->one = constant(g, 0, NULL, (float[]){1.0f});
    w->half = constant(g, 0, NULL, (float[]){0.5f});
}

static int conv(kiln_graph *g, int x, int wc)
{
    int i = node(g, KILN_OP_Conv, 2, (int[]){x, wc});
    attr_ints(&g->nodes[i], "kernel_shape", 2, (int64_t[]){3, 3});
    attr_ints(&g->nodes[i], "pads", 4, (int64_t[]){1, 1, 1, 1});
    return out_of(g, i);
}

static int transpose(kiln_graph *g, int x)
{
    int i = node(g, KILN_OP_Transpose, 1, &x);
    attr_ints(&g->nodes[i], "perm", 4, (int64_t[]){0, 1, 3, 2});
    return out_of(g, i);
}

/* One cycle of the seven blocks (CYCLE_NODES nodes) reading x; returns its output. */
static int cycle(kiln_graph *g, const weights *w, int x)
{
    x = op1(g, KILN_OP_Relu, op2(g, KILN_OP_MatMul, x, w->w44));
    x = op2(g, KILN_OP_Mul, op1(g, KILN_OP_Identity, op2(g, KILN_OP_Add, x, w->bias)), w->scale);
    x = transpose(g, transpose(g, op1(g, KILN_OP_Relu, transpose(g, x))));
    int bn = node(g, KILN_OP_BatchNormalization, 5, (int[]){conv(g, x, w->wc), w->gamma, w->beta, w->mean, w->var});
    x = op1(g, KILN_OP_Relu, out_of(g, bn));
    int h = op2(g, KILN_OP_Add, op2(g, KILN_OP_MatMul, x, w->w44), w->bias);
    int erf1 = op2(g, KILN_OP_Add, op1(g, KILN_OP_Erf, op2(g, KILN_OP_Div, h, w->sqrt2)), w->one);
    x = op2(g, KILN_OP_Mul, op2(g, KILN_OP_Mul, h, erf1), w->half);
    x = op2(g, KILN_OP_Add, op2(g, KILN_OP_MatMul, x, w->w44), x);
    int c = conv(g, x, w->wc);
    return op2(g, KILN_OP_Mul, c, op1(g, KILN_OP_Sigmoid, c));
}

static kiln_model_t make_model(int cycles)
{
    kiln_graph *g = kiln__graph_new(NULL);
    g->name = kiln__strdup("scaling");
    g->opsets = kiln__calloc(1, sizeof *g->opsets);
    g->opsets[0] = (kiln_opset){kiln__strdup(""), 17};
    g->n_opsets = 1;
    int x = kiln__graph_add_value(g, "x");
    kiln_value *xv = &g->values[x];
    xv->dtype = KILN_DT_FLOAT32;
    xv->ndim = 4;
    xv->dims = kiln__calloc(4, sizeof *xv->dims);
    int64_t dims[4] = {1, C, S, S};
    for (int d = 0; d < 4; d++)
        xv->dims[d].value = dims[d];
    g->inputs = kiln__malloc(sizeof(int));
    g->inputs[g->n_inputs++] = x;
    weights w;
    make_weights(g, &w);
    for (int k = 0; k < cycles; k++)
        x = cycle(g, &w, x);
    g->outputs = kiln__malloc(sizeof(int));
    g->outputs[g->n_outputs++] = x;
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    return m;
}

/* CPU seconds of this process: the bound holds on a loaded machine too. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The optimized graph must hold exactly these ops, `cycles` times each. */
static void check_ops(const kiln_graph *g, int cycles, const char *what)
{
    static const struct { kiln_op op; int per_cycle; } want[] = {
        {KILN_OP_FusedMatMul, 3}, {KILN_OP_FusedConv, 2}, {KILN_OP_Add, 1},
        {KILN_OP_Mul, 1}, {KILN_OP_Transpose, 1}, {KILN_OP_Relu, 1},
    };
    int total = 0, acts[4] = {0};   /* Relu, Gelu, SiLU, residual */
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int n = 0;
        for (int i = 0; i < g->n_nodes; i++)
            n += g->nodes[i].op == want[k].op;
        CHECK_MSG(n == want[k].per_cycle * cycles, "%s: %d %s, want %d", what, n, kiln__op_name(want[k].op),
                  want[k].per_cycle * cycles);
        total += n;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const char *a = kiln__attr_s(&g->nodes[i], "activation", "");
        acts[0] += !strcmp(a, "Relu");
        acts[1] += !strcmp(a, "Gelu");
        acts[2] += !strcmp(a, "SiLU");
        acts[3] += g->nodes[i].op == KILN_OP_FusedMatMul && g->nodes[i].n_in == 4;
    }
    CHECK_MSG(total == g->n_nodes, "%s: %d nodes, %d expected", what, g->n_nodes, total);
    CHECK_MSG(acts[0] == 2 * cycles && acts[1] == cycles && acts[2] == cycles && acts[3] == cycles,
              "%s: fused activations Relu %d, Gelu %d, SiLU %d, residual %d (want %d each, Relu twice)", what,
              acts[0], acts[1], acts[2], acts[3], cycles);
}

static double max_rel_err(const kiln_tensor *a, const kiln_tensor *b)
{
    if (a->dtype != b->dtype || a->nbytes != b->nbytes)
        return 1e30;
    double worst = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(a); i++) {
        double x = ((const float *)a->data)[i], y = ((const float *)b->data)[i];
        double e = fabs(x - y) / (1e-4 + fabs(y));
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Small instance: outputs before/after, and the use index checked after every pass. */
static void check_small(void)
{
    kiln_model_t m = make_model(3);
    CHECK(m->g->n_nodes == 3 * CYCLE_NODES);
    kiln_tensor x;
    int64_t dims[4] = {1, C, S, S};
    CHECK(kiln__tensor_alloc(&x, KILN_DT_FLOAT32, 4, dims) == KILN_OK);
    unsigned long long seed = 11;
    for (int64_t i = 0; i < kiln_tensor_numel(&x); i++)
        ((float *)x.data)[i] = test_randf(&seed);
    const char *names[1] = {"x"};
    kiln_tensor *ref, *out;
    int nref, nout;
    CHECK_MSG(kiln_model_run(m, 1, names, &x, NULL, &nref, &ref) == KILN_OK, "%s", kiln_last_error());
    for (int checked = 0; checked < 2; checked++) {
        kiln_engine_t e;
        kiln_build_options o = {.no_optimize = checked, .no_tactics = true};
        CHECK_MSG(kiln_build(m, &o, &e) == KILN_OK, "%s", kiln_last_error());
        if (checked) {   /* the pipeline again by hand, verifying the use index after each pass */
            kiln_pass_ctx pc = *kiln__builder_pass_ctx();
            pc.check = true;
            CHECK_MSG(kiln__optimize(e->g, &pc, NULL) == KILN_OK, "%s", kiln_last_error());
        }
        check_ops(e->g, 3, checked ? "small, checked pipeline" : "small");
        CHECK_MSG(kiln_engine_run(e, 1, names, &x, NULL, &nout, &out) == KILN_OK, "%s", kiln_last_error());
        CHECK(nout == 1 && nref == 1);
        double err = max_rel_err(&out[0], &ref[0]);
        CHECK_MSG(err < 1e-4, "optimized output differs (rel err %g)", err);
        kiln_tensors_free(out, nout);
        kiln_engine_free(e);
    }
    kiln_tensors_free(ref, nref);
    kiln__tensor_release(&x);
    kiln_model_free(m);
}

/* The checker notices edits that bypass the edit functions. */
static void check_checker(void)
{
    kiln_model_t m = make_model(1);
    kiln_graph *g = m->g;
    CHECK(kiln__uses_build(g) == KILN_OK);
    CHECK(kiln__uses_check(g) == KILN_OK);
    CHECK(kiln__single_consumer(g, out_of(g, 0)) == 1 && kiln__value_uses(g, g->outputs[0]) == 1);
    int saved = g->nodes[1].in[0];
    g->nodes[1].in[0] = g->inputs[0];   /* a direct write */
    CHECK(kiln__uses_check(g) == KILN_ERR_INTERNAL);
    g->nodes[1].in[0] = saved;
    CHECK(kiln__uses_check(g) == KILN_OK);
    g->nodes[1].dead = true;   /* a direct kill */
    CHECK(kiln__uses_check(g) == KILN_ERR_INTERNAL);
    g->nodes[1].dead = false;
    CHECK(kiln__node_set_input(g, 1, 0, g->inputs[0]) == KILN_OK && kiln__uses_check(g) == KILN_OK);
    kiln__node_kill(g, 1);
    CHECK(kiln__uses_check(g) == KILN_OK && kiln__value_uses(g, g->inputs[0]) == 1);
    CHECK(kiln__graph_remove_dead(g) == KILN_OK && kiln__uses_check(g) == KILN_OK);
    kiln_clear_last_error();
    kiln__uses_free(g);
    kiln_model_free(m);
}

int main(void)
{
    check_checker();
    check_small();
    const char *env = getenv("KILN_SCALING_NODES");
    int cycles = (env ? atoi(env) : 200000) / CYCLE_NODES + 1;
    double t0 = now();
    kiln_model_t m = make_model(cycles);
    double t1 = now();
    kiln_engine_t e = NULL;
    kiln_build_options o = {.no_tactics = true};
    CHECK_MSG(kiln_build(m, &o, &e) == KILN_OK, "%s", kiln_last_error());
    double t2 = now();
    printf("%d nodes: generated in %.2f s, built in %.2f s CPU (%d nodes after the passes)\n", m->g->n_nodes, t1 - t0,
           t2 - t1, e ? e->g->n_nodes : -1);
    if (e)
        check_ops(e->g, cycles, "big");
    CHECK_MSG(t2 - t1 < 60.0, "building %d nodes took %.1f s (quadratic passes?)", m->g->n_nodes, t2 - t1);
    kiln_engine_free(e);
    /* the parts alone, on the model's own graph: the pass pipeline, then shape inference over
     * the optimized graph (fold-shapes at the declared shapes) */
    kiln_pass_ctx pc = *kiln__builder_pass_ctx();
    int folded = -1;
    CHECK_MSG(kiln__optimize(m->g, &pc, NULL) == KILN_OK, "%s", kiln_last_error());
    double t3 = now();
    CHECK_MSG(kiln__pass_fold_shapes(m->g, NULL, &folded) == KILN_OK, "%s", kiln_last_error());
    double t4 = now();
    printf("pass pipeline %.2f s CPU, fold-shapes (shape inference) %.2f s CPU\n", t3 - t2, t4 - t3);
    check_ops(m->g, cycles, "big, pipeline alone");
    CHECK(folded == 0);
    kiln_model_free(m);
    return TEST_SUMMARY();
}
