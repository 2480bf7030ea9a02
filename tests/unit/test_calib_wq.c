/* FP8 weight-scale granularity per layer (src/build/calib_wq.c) against a scalar reference: for
 * a layer run on several inputs of different shapes, the error of its FP8 output against the
 * float32 one, per output channel, with the weight scaled per output channel and per tensor,
 * computed here by brute force in double (direct convolution / GEMM, xq = e4m3(x / s) * s, Wq =
 * e4m3(W / sw) * sw, sw = amax / 448 of the channel or of the tensor); the error left after bias
 * correction (each channel's mean removed) and without it, for 2-D convolutions with odd shapes,
 * padding, strides, dilations and groups, Gemm (transB, alpha, bias) and MatMul, single-threaded
 * and on a pool; a layer whose other input is not a constant is a clean error. */
#include "build/precision.h"
#include "test_fp8_ref.h"
#include "test_tensor.h"

static unsigned long long seed = 91;

/* Reference errors of one input: y (float) against yq[v] (fp8 variant v), n_out elements laid
 * out [outer, rows, inner]; sums per channel into s1[v][r], s2[v][r]. */
static void ref_acc(const double *y, double *const yq[2], int64_t n_out, int64_t rows, int64_t inner, double *s1[2],
                    double *s2[2])
{
    for (int v = 0; v < 2; v++)
        for (int64_t i = 0; i < n_out; i++) {
            int64_t r = i / inner % rows;
            double e = yq[v][i] - y[i];
            s1[v][r] += e, s2[v][r] += e * e;
        }
}

/* err[v] from the sums, as kiln__wq_meas_error defines it. */
static void ref_err(double *s1[2], double *s2[2], int64_t rows, double count, bool corrected, double err[2])
{
    for (int v = 0; v < 2; v++) {
        err[v] = 0;
        for (int64_t r = 0; r < rows; r++) {
            double left = s2[v][r] - (corrected ? s1[v][r] * s1[v][r] / count : 0);
            err[v] += left > 0 ? left : 0;
        }
    }
}

typedef struct wcase {
    kiln_graph *g;
    int node;
    int64_t rows;
    float *wq[2];   /* the weight as each variant stores it */
    double *s1[2], *s2[2], count;
} wcase;

static void wcase_free(wcase *c)
{
    for (int v = 0; v < 2; v++)
        kiln__free(c->wq[v]), kiln__free(c->s1[v]), kiln__free(c->s2[v]);
    kiln__graph_free(c->g);
}

static void wcase_init(wcase *c, int64_t rows, const kiln_tensor *w, bool kn)
{
    c->rows = rows;
    for (int v = 0; v < 2; v++) {
        c->wq[v] = test_wq_of(w, rows, kn, v == KILN_WQ_TENSOR);
        c->s1[v] = kiln__calloc((size_t)rows, sizeof(double));
        c->s2[v] = kiln__calloc((size_t)rows, sizeof(double));
    }
}

/* Compares m with the reference sums, with and without bias correction. */
static void wcase_check(const wcase *c, const kiln_wq_meas *m, const char *what)
{
    for (int corrected = 0; corrected < 2; corrected++) {
        double got[2], want[2];
        kiln__wq_meas_error(m, corrected, got);
        ref_err((double **)c->s1, (double **)c->s2, c->rows, c->count, corrected, want);
        for (int v = 0; v < 2; v++)
            CHECK_MSG(want[v] > 0 && fabs(got[v] - want[v]) <= 1e-3 * want[v], "%s variant %d corrected %d: %g vs %g",
                      what, v, corrected, got[v], want[v]);
    }
    double a[2], b[2];
    kiln__wq_meas_error(m, true, a);
    kiln__wq_meas_error(m, false, b);
    CHECK_MSG(a[0] != a[1] && a[0] < b[0] && a[1] < b[1], "%s: the variants and the correction must differ", what);
}

static void conv_case(int64_t C, int64_t M, int64_t KH, int64_t KW, test_geo q, kiln_pool *pool)
{
    wcase c = {.g = kiln__graph_new(NULL)};
    int64_t wd[4] = {M, C / q.grp, KH, KW}, bd = M;
    kiln_tensor w = test_tensor_f32(4, wd, 1.0f, &seed), b = test_tensor_f32(1, &bd, 2.0f, &seed);
    float *wf = w.data;
    for (int64_t i = 0; i < kiln_tensor_numel(&w); i++)   /* channels over orders of magnitude, as BN-folded filters */
        wf[i] *= powf(10.0f, (float)(i / (wd[1] * KH * KW) % 3) - 1.0f);
    wcase_init(&c, M, &w, false);
    int x = test_graph_value(c.g, "x"), y = test_graph_value(c.g, "y");
    int wv = test_graph_const(c.g, "w", w), bv = test_graph_const(c.g, "b", b);
    c.node = test_graph_node(c.g, KILN_OP_Conv, "conv", 3, (int[]){x, wv, bv}, y);
    CHECK(kiln__node_set_attr_i(&c.g->nodes[c.node], "group", q.grp) == KILN_OK);
    test_set_ints(c.g, c.node, "strides", 2, (int64_t[]){q.sh, q.sw});
    test_set_ints(c.g, c.node, "dilations", 2, (int64_t[]){q.dh, q.dw});
    test_set_ints(c.g, c.node, "pads", 4, q.pads);
    float s = 2.6f / 448.0f;
    CHECK(kiln__node_set_attr_f(&c.g->nodes[c.node], KILN_ATTR_AQ_SCALE, s) == KILN_OK);
    const float *wconst = c.g->values[wv].init->data;
    kiln_wq_meas *m = NULL;
    for (int t = 0; t < 3; t++) {
        int64_t xd[4] = {1 + t % 2, C, 6 + 3 * t, 9 + 2 * t};
        kiln_tensor xt = test_tensor_f32(4, xd, 1.0f, &seed);
        for (int64_t k = 0; k < kiln_tensor_numel(&xt); k++)   /* mostly positive, as after HardSwish */
            ((float *)xt.data)[k] += 0.5f;
        CHECK(kiln__wq_meas_add(c.g, c.node, &xt, pool, pool ? kiln__pool_threads(pool) : 1, &m) == KILN_OK);
        int64_t per = (int64_t)test_conv_out(&xt, wconst, wd, &q, 0, NULL), n_out = per * M;
        double *yf = kiln__malloc(sizeof(double) * (size_t)n_out), *yq[2];
        test_conv_out(&xt, wconst, wd, &q, 0, yf);
        for (int v = 0; v < 2; v++) {
            yq[v] = kiln__malloc(sizeof(double) * (size_t)n_out);
            test_conv_out(&xt, c.wq[v], wd, &q, s, yq[v]);
        }
        ref_acc(yf, yq, n_out, M, per / xd[0], c.s1, c.s2);
        c.count += (double)per;
        kiln__free(yf), kiln__free(yq[0]), kiln__free(yq[1]);
        kiln__tensor_release(&xt);
    }
    char what[96];
    snprintf(what, sizeof what, "conv C=%lld M=%lld %lldx%lld group %lld", (long long)C, (long long)M, (long long)KH,
             (long long)KW, (long long)q.grp);
    wcase_check(&c, m, what);
    kiln__wq_meas_free(m);
    wcase_free(&c);
}

static void gemm_case(kiln_op op, int64_t K, int64_t N, bool tb, float alpha, kiln_pool *pool)
{
    wcase c = {.g = kiln__graph_new(NULL)};
    int64_t bd[2] = {tb ? N : K, tb ? K : N}, cd = N;
    kiln_tensor b = test_tensor_f32(2, bd, 0.5f, &seed), bias = test_tensor_f32(1, &cd, 1.0f, &seed);
    float *bf = b.data;
    for (int64_t i = 0; i < kiln_tensor_numel(&b); i++)   /* columns over orders of magnitude */
        bf[i] *= powf(10.0f, (float)((tb ? i / K : i % N) % 3) - 1.0f);
    wcase_init(&c, N, &b, !tb);
    int x = test_graph_value(c.g, "x"), y = test_graph_value(c.g, "y"), bv = test_graph_const(c.g, "B", b);
    bool gemm = op == KILN_OP_Gemm;
    int in[3] = {x, bv, gemm ? test_graph_const(c.g, "C", bias) : -1};
    if (!gemm)
        kiln__tensor_release(&bias);
    c.node = test_graph_node(c.g, op, "mm", gemm ? 3 : 2, in, y);
    if (gemm) {
        CHECK(kiln__node_set_attr_i(&c.g->nodes[c.node], "transB", tb) == KILN_OK);
        CHECK(kiln__node_set_attr_f(&c.g->nodes[c.node], "alpha", alpha) == KILN_OK);
    }
    float s = 3.1f / 448.0f;
    CHECK(kiln__node_set_attr_f(&c.g->nodes[c.node], KILN_ATTR_AQ_SCALE, s) == KILN_OK);
    const float *bconst = c.g->values[bv].init->data;
    kiln_wq_meas *m = NULL;
    for (int t = 0; t < 3; t++) {
        int64_t xd[3] = {2, 3 + 2 * t, K};
        int nd = !gemm && t == 1 ? 3 : 2;
        kiln_tensor xt = test_tensor_f32(nd, nd == 3 ? xd : xd + 1, 1.5f, &seed);
        CHECK(kiln__wq_meas_add(c.g, c.node, &xt, pool, pool ? kiln__pool_threads(pool) : 1, &m) == KILN_OK);
        int64_t rows = kiln_tensor_numel(&xt) / K, n_out = rows * N;
        double *yf = kiln__malloc(sizeof(double) * (size_t)n_out), *yq[2];
        test_gemm_out(&xt, bconst, K, N, tb, gemm ? alpha : 1.0f, 0, yf);
        for (int v = 0; v < 2; v++) {
            yq[v] = kiln__malloc(sizeof(double) * (size_t)n_out);
            test_gemm_out(&xt, c.wq[v], K, N, tb, gemm ? alpha : 1.0f, s, yq[v]);
        }
        ref_acc(yf, yq, n_out, N, 1, c.s1, c.s2);
        c.count += (double)rows;
        kiln__free(yf), kiln__free(yq[0]), kiln__free(yq[1]);
        kiln__tensor_release(&xt);
    }
    char what[64];
    snprintf(what, sizeof what, "%s K=%lld N=%lld transB %d", kiln__op_name(op), (long long)K, (long long)N, tb);
    wcase_check(&c, m, what);
    /* another output width for the same layer, and a weight that is not a constant, are errors */
    int64_t wrong[2] = {2, K + 1};
    kiln_tensor xt = test_tensor_f32(2, wrong, 1.0f, &seed);
    CHECK(kiln__wq_meas_add(c.g, c.node, &xt, pool, 1, &m) != KILN_OK);
    kiln__tensor_release(&xt);
    c.g->nodes[c.node].in[1] = x;
    int64_t ok[2] = {2, K};
    xt = test_tensor_f32(2, ok, 1.0f, &seed);
    kiln_wq_meas *m2 = NULL;
    CHECK(kiln__wq_meas_add(c.g, c.node, &xt, pool, 1, &m2) == KILN_ERR_INVALID_ARG && !m2);
    c.g->nodes[c.node].in[1] = bv;
    kiln__tensor_release(&xt);
    kiln__wq_meas_free(m);
    wcase_free(&c);
}

int main(void)
{
    kiln_pool *pool = kiln__pool_create(3);
    for (int p = 0; p < 2; p++) {
        kiln_pool *use = p ? pool : NULL;
        conv_case(5, 7, 3, 3, (test_geo){.grp = 1, .sh = 1, .sw = 1, .pads = {1, 1, 1, 1}, .dh = 1, .dw = 1}, use);
        conv_case(6, 6, 5, 5, (test_geo){.grp = 6, .sh = 2, .sw = 1, .pads = {2, 1, 2, 3}, .dh = 1, .dw = 1}, use);
        conv_case(4, 6, 3, 2, (test_geo){.grp = 2, .sh = 1, .sw = 2, .pads = {0, 1, 1, 0}, .dh = 2, .dw = 1}, use);
        conv_case(3, 17, 1, 1, (test_geo){.grp = 1, .sh = 1, .sw = 1, .pads = {0, 0, 0, 0}, .dh = 1, .dw = 1}, use);
        gemm_case(KILN_OP_Gemm, 13, 9, true, 0.75f, use);
        gemm_case(KILN_OP_Gemm, 7, 11, false, 1.0f, use);
        gemm_case(KILN_OP_MatMul, 17, 5, false, 1.0f, use);
    }
    double err[2];
    kiln__wq_meas_error(NULL, true, err);   /* nothing measured: zeros */
    CHECK(err[0] == 0 && err[1] == 0);
    kiln__pool_free(pool);
    return TEST_SUMMARY();
}
