/* FP8 weight-scale granularity chosen per layer (precision.h; docs/PRECISION.md, "FP8 weight
 * scales per layer"): on every calibration input of an fp8 layer, the layer runs three times
 * through the CPU kernels -- in float32, and in FP8 (activations rounded with the layer's scale)
 * with its weight scaled per output channel and per tensor -- and the error of each FP8 output
 * against the float32 one is summed per output channel, with its square. Bias correction then
 * removes each channel's mean error, so what the layer keeps of it is, per channel,
 *   sum(e^2) - sum(e)^2 / count
 * (the whole sum(e^2) for a layer bias correction cannot shift); the builder keeps the scale
 * granularity with the smaller total. */
#include "precision.h"
#include "../core/numfmt.h"
#include "../backend/kernel.h"
#include <math.h>

struct kiln_wq_meas {
    int64_t rows;           /* output channels */
    double count;           /* outputs summed per channel */
    double *sum[2], *sq[2]; /* [KILN_WQ_CHANNEL or KILN_WQ_TENSOR][rows]: sums of e and of e^2 */
};

kiln_status kiln__fp8_node(const kiln_node *n, bool tensor, kiln_node *tmp)
{
    int extra = 2 + tensor;
    kiln_attr *a = kiln__calloc((size_t)(n->n_attr + extra), sizeof *a);
    if (!a)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    /* the new attributes first: a lookup finds them before any of n's own */
    a[0] = (kiln_attr){.name = (char *)KILN_ATTR_WQ, .type = KILN_ATTR_STRING, .s = (char *)"fp8", .s_len = 3};
    a[1] = (kiln_attr){.name = (char *)KILN_ATTR_AQ, .type = KILN_ATTR_STRING, .s = (char *)"fp8", .s_len = 3};
    if (tensor)
        a[2] = (kiln_attr){.name = (char *)KILN_ATTR_WQ_TENSOR, .type = KILN_ATTR_INT, .i = 1};
    if (n->n_attr > 0)
        memcpy(a + extra, n->attrs, sizeof *a * (size_t)n->n_attr);
    *tmp = *n;
    tmp->attrs = a;
    tmp->n_attr = n->n_attr + extra;
    return KILN_OK;
}

/* Runs node n (its attributes as given) on the inputs `in`, the output into *y (heap). */
static kiln_status run_layer(const kiln_node *n, const kiln_tensor *const *in, kiln_pool *pool, int nthreads,
                             kiln_tensor *y)
{
    kiln_kernel_fn k = kiln__ref_kernel(n->op);
    if (!k)
        return kiln__err(KILN_ERR_UNSUPPORTED, "no kernel to run %s node '%s'", n->op_type, n->name);
    kiln_tensor *out[1] = {y};
    kiln_kctx ctx = {.node = n, .n_in = n->n_in, .in = in, .n_out = 1, .out = out, .pool = pool,
                     .nthreads = nthreads > 0 ? nthreads : 1};
    return k(&ctx);
}

/* The output channel axis of node n's output y: 1 for a convolution, the last one otherwise;
 * *inner = elements after it. */
static int64_t channel_axis(const kiln_node *n, const kiln_tensor *y, int64_t *inner)
{
    int ax = n->op == KILN_OP_Conv ? 1 : y->ndim - 1;
    *inner = ax >= 0 ? kiln__shape_numel(y->ndim - ax - 1, y->dims + ax + 1) : 1;
    return ax >= 0 && ax < y->ndim ? y->dims[ax] : -1;
}

static kiln_status meas_alloc(int64_t rows, kiln_wq_meas **out)
{
    kiln_wq_meas *m = kiln__calloc(1, sizeof *m);
    bool ok = m != NULL;
    for (int v = 0; ok && v < 2; v++)
        ok = (m->sum[v] = kiln__calloc((size_t)rows, sizeof(double))) && (m->sq[v] = kiln__calloc((size_t)rows, sizeof(double)));
    if (!ok) {
        kiln__wq_meas_free(m);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    m->rows = rows;
    *out = m;
    return KILN_OK;
}

/* Adds variant v's error yq - y (both [outer, rows, inner]) to m. */
static void meas_acc(kiln_wq_meas *m, int v, const kiln_tensor *y, const kiln_tensor *yq, int64_t inner)
{
    const float *a = y->data, *b = yq->data;
    int64_t outer = kiln_tensor_numel(y) / (m->rows * inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t r = 0; r < m->rows; r++) {
            double s = 0, s2 = 0;
            for (int64_t j = 0, base = (o * m->rows + r) * inner; j < inner; j++) {
                double e = (double)b[base + j] - (double)a[base + j];
                s += e, s2 += e * e;
            }
            m->sum[v][r] += s, m->sq[v][r] += s2;
        }
}

static bool same_shape(const kiln_tensor *a, const kiln_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim) &&
           a->dtype == KILN_DT_FLOAT32 && b->dtype == KILN_DT_FLOAT32;
}

kiln_status kiln__wq_meas_add(const kiln_graph *g, int node, const kiln_tensor *x, kiln_pool *pool, int nthreads,
                              kiln_wq_meas **m)
{
    const kiln_node *n = &g->nodes[node];
    const kiln_tensor *in[8] = {x};
    if (n->n_in < 2 || n->n_in > 8)
        return kiln__err(KILN_ERR_INVALID_ARG, "fp8 weight scales: node '%s' has %d inputs", n->name, n->n_in);
    for (int i = 1; i < n->n_in; i++) {
        in[i] = n->in[i] >= 0 ? g->values[n->in[i]].init : NULL;
        if (n->in[i] >= 0 && !in[i])
            return kiln__err(KILN_ERR_INVALID_ARG, "fp8 weight scales: input %d of node '%s' is not a constant", i,
                             n->name);
    }
    kiln_tensor y = {0}, yq[2] = {{0}};
    kiln_node q[2] = {{0}};
    kiln_status st = run_layer(n, in, pool, nthreads, &y);
    for (int v = 0; st == KILN_OK && v < 2; v++) {
        st = kiln__fp8_node(n, v == KILN_WQ_TENSOR, &q[v]);
        if (st == KILN_OK)
            st = run_layer(&q[v], in, pool, nthreads, &yq[v]);
        if (st == KILN_OK && !same_shape(&y, &yq[v]))
            st = kiln__err(KILN_ERR_INTERNAL, "fp8 weight scales: node '%s' changed shape in fp8", n->name);
    }
    int64_t inner = 1, rows = st == KILN_OK ? channel_axis(n, &y, &inner) : -1;
    if (st == KILN_OK && (rows <= 0 || (*m && (*m)->rows != rows)))
        st = kiln__err(KILN_ERR_SHAPE, "fp8 weight scales: unexpected output shape of node '%s'", n->name);
    if (st == KILN_OK && !*m)
        st = meas_alloc(rows, m);
    for (int v = 0; st == KILN_OK && v < 2; v++)
        meas_acc(*m, v, &y, &yq[v], inner);
    if (st == KILN_OK)
        (*m)->count += (double)(kiln_tensor_numel(&y) / rows);
    kiln__tensor_release(&y);
    for (int v = 0; v < 2; v++) {
        kiln__tensor_release(&yq[v]);
        kiln__free(q[v].attrs);
    }
    return st;
}

void kiln__wq_meas_error(const kiln_wq_meas *m, bool corrected, double err[2])
{
    for (int v = 0; v < 2; v++) {
        err[v] = 0;
        for (int64_t r = 0; m && r < m->rows; r++) {
            double left = m->sq[v][r] - (corrected && m->count > 0 ? m->sum[v][r] * m->sum[v][r] / m->count : 0);
            err[v] += left > 0 ? left : 0;
        }
    }
}

void kiln__wq_meas_free(kiln_wq_meas *m)
{
    if (!m)
        return;
    for (int v = 0; v < 2; v++) {
        kiln__free(m->sum[v]);
        kiln__free(m->sq[v]);
    }
    kiln__free(m);
}
