/* Graph building shared by the unit tests that assemble kiln_graphs by hand. */
#ifndef KILN_TEST_GRAPH_H
#define KILN_TEST_GRAPH_H
#include "ir/graph.h"
#include "runtime/exec.h"
#include "test.h"
#include "test_tensor.h"
#include <math.h>

/* Appends op(in...) named `name` (domain "", opset 17) writing value `out`; returns the node index. */
static inline int test_graph_node(kiln_graph *g, kiln_op op, const char *name, int n_in, const int *in, int out)
{
    int i = kiln__graph_add_node(g);
    CHECK(i >= 0);
    kiln_node *n = &g->nodes[i];
    n->op = op;
    n->op_type = kiln__strdup(kiln__op_name(op));
    n->name = kiln__strdup(name);
    n->domain = kiln__strdup("");
    n->opset = 17;
    n->out = kiln__malloc(sizeof(int));
    n->n_out = 1;
    n->out[0] = -1;
    CHECK(kiln__node_set_inputs(g, i, n_in, in) == KILN_OK);
    kiln__node_set_output(g, i, 0, out);
    return i;
}

/* A new value named `name` of g. */
static inline int test_graph_value(kiln_graph *g, const char *name)
{
    int v = kiln__graph_add_value(g, name);
    CHECK(v >= 0);
    return v;
}

/* A new constant of g holding t (moved in). */
static inline int test_graph_const(kiln_graph *g, const char *name, kiln_tensor t)
{
    int v = kiln__graph_add_const(g, name, &t);
    CHECK(v >= 0);
    return v;
}

/* A new ONNX-domain graph (opset 17) named `name`. */
static inline kiln_graph *test_graph_onnx(const char *name)
{
    kiln_graph *g = kiln__graph_new(NULL);
    g->name = kiln__strdup(name);
    g->opsets = kiln__calloc(1, sizeof *g->opsets);
    g->opsets[0] = (kiln_opset){kiln__strdup(""), 17};
    g->n_opsets = 1;
    return g;
}

/* A new float32 graph input of g with fixed dims. */
static inline int test_graph_input(kiln_graph *g, const char *name, int nd, const int64_t *dims)
{
    int v = test_graph_value(g, name);
    kiln_value *x = &g->values[v];
    x->dtype = KILN_DT_FLOAT32;
    x->ndim = nd;
    x->dims = kiln__calloc((size_t)nd, sizeof *x->dims);
    for (int d = 0; d < nd; d++)
        x->dims[d].value = dims[d];
    g->inputs = kiln__realloc(g->inputs, sizeof(int) * (size_t)(g->n_inputs + 1));
    g->inputs[g->n_inputs++] = v;
    return v;
}

/* Value v becomes (the next) graph output of g. */
static inline void test_graph_output(kiln_graph *g, int v)
{
    g->outputs = kiln__realloc(g->outputs, sizeof(int) * (size_t)(g->n_outputs + 1));
    g->outputs[g->n_outputs++] = v;
}

/* ins[i]: random float32 values in [-1, 1) in the dims of g's input i, for its first n inputs. */
static inline void test_graph_random_inputs(const kiln_graph *g, int n, kiln_tensor *ins, unsigned long long *seed)
{
    for (int i = 0; i < n; i++) {
        const kiln_value *x = &g->values[g->inputs[i]];
        int64_t d[KILN_MAX_DIMS];
        for (int k = 0; k < x->ndim; k++)
            d[k] = x->dims[k].value;
        ins[i] = test_tensor_f32(x->ndim, d, 1.0f, seed);
    }
}

/* The largest |got - want| / (atol + rtol |want|) over two float32 tensors of n values (NaN wins). */
static inline double test_worst_f32(const float *got, const float *want, int64_t n, double atol, double rtol)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]) / (atol + rtol * fabs((double)want[i]));
        worst = err > worst || isnan(err) ? err : worst;
    }
    return worst;
}

/* Runs g (one output) on one thread with inputs feed: the status must be want and the message contain what */
static inline void test_graph_expect(const kiln_graph *g, const kiln_tensor *const *feed, kiln_status want,
                                     const char *what)
{
    kiln_tensor got[1] = {0};
    kiln_run_env env = {.nthreads = 1};
    kiln_status st = kiln__exec_graph(g, NULL, feed, got, &env, 0);
    const char *msg = kiln_last_error();
    CHECK_MSG(st == want && msg && strstr(msg, what), "%s: status %d, message '%s'", what, st, msg ? msg : "");
    kiln__tensor_release(&got[0]);
}

#endif
