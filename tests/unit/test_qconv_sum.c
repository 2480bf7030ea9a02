/* QLinearConvSum (passes/p_qres.c fuse_sum, ref/k_quant.c): a residual block's last convolution and its 1x1 shortcut
 * convolution requantized once.
 *  - run directly (the reference kernel): every byte is the correctly rounded real value of both products summed
 *    (computed here in double from the integers; elements within 1e-3 of a tie may go either way), for a 3x3 padded
 *    and a 1x1 main convolution, shortcut strides 1 and 2 over odd sizes, u8 / s8 activations and outputs, zero
 *    points, Relu and none; the same operands through the two layers it replaces (the shortcut requantized to R, then
 *    the one-rounding QLinearConvAdd) miss it in some elements -- the rounding the fusion removes;
 *  - fuse-qconv-add makes it from a one-rounding QLinearConvAdd whose R is a 1x1 QLinearConv kiln quantized, read by
 *    nothing else, without an activation; not from a 3x3 shortcut, one with an activation, one a model's own Q/DQ
 *    placed, one whose output has a second reader, nor with KILN_QCONV_SUM=0;
 *  - malformed nodes (a second convolution of another output shape, a 3x3 w2, a float output, a non-linear
 *    activation, bad strides) are clean errors;
 *  - its op number is after every op engines already record. */
#include "passes/passes.h"
#include "test.h"
#include "test_graph.h"
#include "runtime/exec.h"
#include <stdlib.h>
#include <string.h>


static kiln_tensor rand_q(kiln_dtype dt, int nd, const int64_t *dims, unsigned long long *seed)
{
    kiln_tensor t;
    CHECK(kiln__tensor_alloc(&t, dt, nd, dims) == KILN_OK);
    for (int64_t i = 0; i < kiln_tensor_numel(&t); i++)
        kiln__set_i64(dt, t.data, i,
                      dt == KILN_DT_UINT8 ? (int64_t)(test_randf(seed) * 127.5f + 127.5f)
                      : dt == KILN_DT_INT32 ? (int64_t)(test_randf(seed) * 3000.0f)
                                            : (int64_t)(test_randf(seed) * 127.0f));
    return t;
}

static kiln_tensor clone(const kiln_tensor *t)
{
    kiln_tensor c = {0};
    CHECK(kiln__tensor_clone(&c, t) == KILN_OK);
    return c;
}

typedef struct sum_case {
    int ks;          /* the main convolution's filter (padded ks / 2) */
    int s;           /* the shortcut's strides */
    int64_t H, W;    /* the shortcut's input; the main convolution's is the output's size */
    kiln_dtype xdt;  /* x's and x2's type, */
    int xz;          /* ... their zero point */
    kiln_dtype cdt;  /* C's type, */
    int cz;          /* ... its zero point */
    const char *act; /* "" or "Relu" */
} sum_case;

enum { N = 2, C1 = 4, C2 = 6, M = 8 };

/* Runs the case as one QLinearConvSum (got[0]) and as the two layers it replaces (got[1]) */
static void run_case(const sum_case *k, unsigned long long *seed)
{
    const float xs = 0.1f, x2s = 0.07f, cs = 0.4f, rs = 0.3f;
    int64_t P = (k->H - 1) / k->s + 1, Q = (k->W - 1) / k->s + 1, md = M;
    int64_t xd[4] = {N, C1, P, Q}, x2d[4] = {N, C2, k->H, k->W}, wd[4] = {M, C1, k->ks, k->ks}, w2d[4] = {M, C2, 1, 1};
    int64_t od[4] = {N, M, P, Q};
    kiln_tensor xt = rand_q(k->xdt, 4, xd, seed), x2t = rand_q(k->xdt, 4, x2d, seed);
    kiln_tensor wt = rand_q(KILN_DT_INT8, 4, wd, seed), w2t = rand_q(KILN_DT_INT8, 4, w2d, seed);
    kiln_tensor bt = rand_q(KILN_DT_INT32, 1, &md, seed), b2t = rand_q(KILN_DT_INT32, 1, &md, seed), wst, w2st;
    CHECK(kiln__tensor_alloc(&wst, KILN_DT_FLOAT32, 1, &md) == KILN_OK);
    CHECK(kiln__tensor_alloc(&w2st, KILN_DT_FLOAT32, 1, &md) == KILN_OK);
    for (int m = 0; m < M; m++) {
        ((float *)wst.data)[m] = 0.0015f + 0.0005f * (float)m;
        ((float *)w2st.data)[m] = 0.004f - 0.0003f * (float)m;
    }
    kiln_tensor got[2] = {{0}};
    for (int two = 0; two < 2; two++) {
        kiln_graph *g = kiln__graph_new(NULL);
        int in[16];
        in[0] = test_graph_input(g, "x", 4, xd);
        in[1] = test_graph_const(g, "xs", test_scalar(KILN_DT_FLOAT32, xs));
        in[2] = test_graph_const(g, "xz", test_scalar(k->xdt, k->xz));
        in[3] = test_graph_const(g, "w", clone(&wt));
        in[4] = test_graph_const(g, "ws", clone(&wst));
        in[5] = -1;
        in[6] = test_graph_const(g, "cs", test_scalar(KILN_DT_FLOAT32, cs));
        in[7] = test_graph_const(g, "cz", test_scalar(k->cdt, k->cz));
        in[8] = test_graph_const(g, "b", clone(&bt));
        int d[9] = {test_graph_input(g, "x2", 4, x2d), test_graph_const(g, "x2s", test_scalar(KILN_DT_FLOAT32, x2s)),
                    test_graph_const(g, "x2z", test_scalar(k->xdt, k->xz)), test_graph_const(g, "w2", clone(&w2t)),
                    test_graph_const(g, "w2s", clone(&w2st)), -1,
                    test_graph_const(g, "rs", test_scalar(KILN_DT_FLOAT32, rs)),
                    test_graph_const(g, "rz", test_scalar(KILN_DT_UINT8, 128)), test_graph_const(g, "b2", clone(&b2t))};
        int out = test_graph_value(g, "c"), n;
        if (!two) {
            for (int i = 0; i < 6; i++)
                in[9 + i] = d[i];
            in[15] = d[8];
            n = test_graph_node(g, KILN_OP_QLinearConvSum, "sum", 16, in, out);
            int64_t st[2] = {k->s, k->s};
            CHECK(kiln__node_set_attr_ints(&g->nodes[n], "kiln_sum_strides", 2, st) == KILN_OK);
        } else {   /* R = the shortcut requantized (u8, scale rs, zero point 128), then one-rounding QLinearConvAdd */
            int r = test_graph_value(g, "r");
            int dn = test_graph_node(g, KILN_OP_QLinearConv, "shortcut", 9, d, r);
            int64_t st[2] = {k->s, k->s};
            CHECK(kiln__node_set_attr_ints(&g->nodes[dn], "strides", 2, st) == KILN_OK);
            in[9] = r;
            in[10] = d[6];
            in[11] = d[7];
            n = test_graph_node(g, KILN_OP_QLinearConvAdd, "qca", 12, in, out);
            CHECK(kiln__node_set_attr_i(&g->nodes[n], "kiln_res_once", 1) == KILN_OK);
        }
        int64_t pads[4] = {k->ks / 2, k->ks / 2, k->ks / 2, k->ks / 2};
        CHECK(kiln__node_set_attr_ints(&g->nodes[n], "pads", 4, pads) == KILN_OK);
        if (k->act[0])
            CHECK(kiln__node_set_attr_s(&g->nodes[n], "kiln_act", k->act) == KILN_OK);
        test_graph_output(g, out);
        const kiln_tensor *feed[2] = {&xt, &x2t};
        kiln_run_env env = {.nthreads = 2};
        CHECK_MSG(kiln__exec_graph(g, NULL, feed, &got[two], &env, 0) == KILN_OK, "%s", kiln_last_error());
        kiln__graph_free(g);
    }
    int lo = k->cdt == KILN_DT_UINT8 ? 0 : -128, hi = k->cdt == KILN_DT_UINT8 ? 255 : 127;
    int64_t miss[2] = {0, 0}, ties = 0, n = N * M * P * Q;
    bool shaped = got[0].data && got[1].data && got[0].dtype == k->cdt && got[1].dtype == k->cdt &&
                  got[0].ndim == 4 && !memcmp(got[0].dims, od, sizeof od);
    for (int64_t i = 0; shaped && i < n; i++) {
        int64_t q = i % Q, p = i / Q % P, m = i / (Q * P) % M, b = i / (Q * P * M);
        int64_t acc = ((const int32_t *)bt.data)[m], acc2 = ((const int32_t *)b2t.data)[m];
        for (int c = 0; c < C1; c++)
            for (int kh = 0; kh < k->ks; kh++)
                for (int kw = 0; kw < k->ks; kw++) {
                    int64_t ih = p + kh - k->ks / 2, iw = q + kw - k->ks / 2;
                    if (ih >= 0 && ih < P && iw >= 0 && iw < Q)
                        acc += (kiln__get_i64(k->xdt, xt.data, ((b * C1 + c) * P + ih) * Q + iw) - k->xz) *
                               ((const int8_t *)wt.data)[((m * C1 + c) * k->ks + kh) * k->ks + kw];
                }
        for (int c = 0; c < C2; c++)
            acc2 += (kiln__get_i64(k->xdt, x2t.data, ((b * C2 + c) * k->H + p * k->s) * k->W + q * k->s) - k->xz) *
                    ((const int8_t *)w2t.data)[m * C2 + c];
        double v = (double)acc * xs * ((const float *)wst.data)[m] / cs +
                   (double)acc2 * x2s * ((const float *)w2st.data)[m] / cs;
        if (k->act[0])
            v = fmax(v, 0.0);
        bool tie = fabs(v - floor(v) - 0.5) < 1e-3;
        ties += tie;
        int64_t want = (int64_t)nearbyint(v) + k->cz;
        want = want < lo ? lo : want > hi ? hi : want;
        for (int t = 0; t < 2; t++) {
            int64_t got_q = kiln__get_i64(k->cdt, got[t].data, i);
            miss[t] += tie ? llabs(got_q - want) > 1 : got_q != want;
        }
    }
    CHECK_MSG(shaped && miss[0] == 0, "QLinearConvSum %dx%d s%d %lldx%lld x %s C %s %s: %lld of %lld bytes not the sum's rounding (%lld near ties)",
              k->ks, k->ks, k->s, (long long)k->H, (long long)k->W, kiln_dtype_name(k->xdt), kiln_dtype_name(k->cdt),
              k->act[0] ? k->act : "none", (long long)miss[0], (long long)n, (long long)ties);
    CHECK_MSG(miss[1] > 0, "the two layers matched the exact rounding everywhere: the check would not see a change");
    for (int t = 0; t < 2; t++)
        kiln__tensor_release(&got[t]);
    kiln_tensor *all[] = {&xt, &x2t, &wt, &w2t, &bt, &b2t, &wst, &w2st};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln__tensor_release(all[i]);
}

/* A block's end as fuse-qdq leaves it: R = QLinearConv(x2 ...) (the shortcut: ks2 x ks2, strides s, activation
 * d_act, kiln_q_auto d_auto), Y = QLinearConv(x ...) (kiln_q_auto), C = QLinearAdd(Y, R) (kiln_q_auto), R read by
 * a second node too where shared. fuse-qconv-add then fuses; returns the QLinearConvSum nodes made (-1: failed) */
static int pass_case(int ks2, int s, const char *d_act, bool d_auto, bool shared, const char *what)
{
    kiln_graph *g = test_graph_onnx("qsum_pass");
    int64_t xd[4] = {1, 16, 5, 5}, x2d[4] = {1, 32, 9, 9}, wd[4] = {8, 16, 1, 1}, w2d[4] = {8, 32, ks2, ks2};
    if (s == 1)
        x2d[2] = x2d[3] = 5;
    kiln_tensor wt, w2t;
    CHECK(kiln__tensor_alloc(&wt, KILN_DT_INT8, 4, wd) == KILN_OK);
    CHECK(kiln__tensor_alloc(&w2t, KILN_DT_INT8, 4, w2d) == KILN_OK);
    memset(wt.data, 3, wt.nbytes);
    memset(w2t.data, 2, w2t.nbytes);
    int y = test_graph_value(g, "y"), r = test_graph_value(g, "r"), c = test_graph_value(g, "c");
    int xin = test_graph_input(g, "x", 4, xd), x2in = test_graph_input(g, "x2", 4, x2d);
    int ys = test_graph_const(g, "ys", test_scalar(KILN_DT_FLOAT32, 0.2)), yz = test_graph_const(g, "yz", test_scalar(KILN_DT_UINT8, 0));
    int rs = test_graph_const(g, "rs", test_scalar(KILN_DT_FLOAT32, 0.3)), rz = test_graph_const(g, "rz", test_scalar(KILN_DT_UINT8, 0));
    int cin[8] = {xin, test_graph_const(g, "xs", test_scalar(KILN_DT_FLOAT32, 0.1)), test_graph_const(g, "xz", test_scalar(KILN_DT_UINT8, 0)),
                  test_graph_const(g, "w", wt), test_graph_const(g, "ws", test_scalar(KILN_DT_FLOAT32, 0.01)),
                  test_graph_const(g, "wz", test_scalar(KILN_DT_INT8, 0)), ys, yz};
    int din[8] = {x2in, test_graph_const(g, "x2s", test_scalar(KILN_DT_FLOAT32, 0.05)), test_graph_const(g, "x2z", test_scalar(KILN_DT_UINT8, 0)),
                  test_graph_const(g, "w2", w2t), test_graph_const(g, "w2s", test_scalar(KILN_DT_FLOAT32, 0.02)),
                  test_graph_const(g, "w2z", test_scalar(KILN_DT_INT8, 0)), rs, rz};
    int dn = test_graph_node(g, KILN_OP_QLinearConv, "shortcut", 8, din, r);
    int cn = test_graph_node(g, KILN_OP_QLinearConv, "conv", 8, cin, y);
    int ain[8] = {y, ys, yz, r, rs, rz, test_graph_const(g, "cs", test_scalar(KILN_DT_FLOAT32, 0.4)),
                  test_graph_const(g, "cz", test_scalar(KILN_DT_UINT8, 0))};
    int an = test_graph_node(g, KILN_OP_QLinearAdd, "add", 8, ain, c);
    CHECK(kiln__node_set_attr_s(&g->nodes[an], "kiln_act", "Relu") == KILN_OK);
    int64_t st[2] = {s, s}, pads[4] = {ks2 / 2, ks2 / 2, ks2 / 2, ks2 / 2};
    CHECK(kiln__node_set_attr_ints(&g->nodes[dn], "strides", 2, st) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(&g->nodes[dn], "pads", 4, pads) == KILN_OK);
    CHECK(kiln__node_set_attr_i(&g->nodes[cn], KILN_ATTR_Q_AUTO, 1) == KILN_OK);
    CHECK(kiln__node_set_attr_i(&g->nodes[an], KILN_ATTR_Q_AUTO, 1) == KILN_OK);
    if (d_auto)
        CHECK(kiln__node_set_attr_i(&g->nodes[dn], KILN_ATTR_Q_AUTO, 1) == KILN_OK);
    if (d_act)
        CHECK(kiln__node_set_attr_s(&g->nodes[dn], "kiln_act", d_act) == KILN_OK);
    test_graph_output(g, c);
    if (shared) {
        int r2 = test_graph_value(g, "r2");
        test_graph_node(g, KILN_OP_Identity, "reader", 1, &r, r2);
        test_graph_output(g, r2);
    }
    int changed = 0;
    const kiln_pass_info pass = {"fuse-qconv-add", kiln__pass_fuse_qconv_add};
    if (kiln__pass_run(&pass, g, NULL, &changed) != KILN_OK) {
        CHECK_MSG(false, "%s: %s", what, kiln_last_error());
        kiln__graph_free(g);
        return -1;
    }
    int sums = 0, convs = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        convs += n->op == KILN_OP_QLinearConv;
        if (n->op != KILN_OP_QLinearConvSum)
            continue;
        sums++;
        const int64_t *ss;
        CHECK_MSG(n->n_in == 15 && n->in[0] == xin && n->in[3] == cin[3] && n->in[6] == ain[6] && n->in[7] == ain[7] &&
                      n->in[9] == x2in && n->in[12] == din[3] && n->in[13] == din[4] &&
                      kiln__attr_ints(n, "kiln_sum_strides", &ss) == 2 && ss[0] == s && ss[1] == s &&
                      !kiln__attr(n, "kiln_res_once") && n->out[0] == c,
                  "%s: the fused node's inputs / attributes", what);
    }
    CHECK_MSG(sums == 0 || convs == 0, "%s: the shortcut convolution left beside the fused layer", what);
    kiln__graph_free(g);
    return sums;
}

/* A QLinearConvSum node built badly: a clean error (status want, message containing what) */
static void bad_case(int64_t x2h, int ks2, bool float_out, const char *act, int64_t stride_n, kiln_status want,
                     const char *what)
{
    unsigned long long seed = 11;
    kiln_graph *g = kiln__graph_new(NULL);
    int64_t xd[4] = {1, 4, 5, 5}, x2d[4] = {1, 6, x2h, 9}, wd[4] = {8, 4, 1, 1}, w2d[4] = {8, 6, ks2, ks2};
    kiln_tensor xt = rand_q(KILN_DT_UINT8, 4, xd, &seed), x2t = rand_q(KILN_DT_UINT8, 4, x2d, &seed);
    int in[16] = {test_graph_input(g, "x", 4, xd), test_graph_const(g, "xs", test_scalar(KILN_DT_FLOAT32, 0.1)), -1,
                  test_graph_const(g, "w", rand_q(KILN_DT_INT8, 4, wd, &seed)),
                  test_graph_const(g, "ws", test_scalar(KILN_DT_FLOAT32, 0.01)), -1,
                  test_graph_const(g, "cs", test_scalar(KILN_DT_FLOAT32, 0.4)),
                  test_graph_const(g, "cz", test_scalar(KILN_DT_UINT8, 0)), -1, test_graph_input(g, "x2", 4, x2d),
                  test_graph_const(g, "x2s", test_scalar(KILN_DT_FLOAT32, 0.1)), -1,
                  test_graph_const(g, "w2", rand_q(KILN_DT_INT8, 4, w2d, &seed)),
                  test_graph_const(g, "w2s", test_scalar(KILN_DT_FLOAT32, 0.01)), -1, -1};
    int out = test_graph_value(g, "c");
    int n = test_graph_node(g, KILN_OP_QLinearConvSum, "sum", 15, in, out);
    int64_t st[3] = {2, 2, 2};
    CHECK(kiln__node_set_attr_ints(&g->nodes[n], "kiln_sum_strides", (int)stride_n, st) == KILN_OK);
    if (float_out)
        CHECK(kiln__node_set_attr_i(&g->nodes[n], "kiln_out_float", 1) == KILN_OK);
    if (act)
        CHECK(kiln__node_set_attr_s(&g->nodes[n], "kiln_act", act) == KILN_OK);
    test_graph_output(g, out);
    const kiln_tensor *feed[2] = {&xt, &x2t};
    test_graph_expect(g, feed, want, what);
    kiln__tensor_release(&xt);
    kiln__tensor_release(&x2t);
    kiln__graph_free(g);
}

int main(void)
{
    unsigned long long seed = 0x2545F4914F6CDD1Dull;
    CHECK_MSG(KILN_OP_QLinearConvSum > KILN_OP_QLookup && KILN_OP_QLookup == 172,
              "op numbers moved: QLookup %d, QLinearConvSum %d", KILN_OP_QLookup, KILN_OP_QLinearConvSum);
    static const sum_case cases[] = {
        {1, 2, 9, 11, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, "Relu"},
        {1, 1, 5, 7, KILN_DT_UINT8, 3, KILN_DT_UINT8, 5, "Relu"},
        {3, 2, 10, 7, KILN_DT_UINT8, 0, KILN_DT_INT8, -3, ""},
        {3, 1, 6, 5, KILN_DT_INT8, -2, KILN_DT_INT8, 4, ""},
        {1, 2, 8, 8, KILN_DT_INT8, 0, KILN_DT_UINT8, 7, "Relu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_case(&cases[i], &seed);
    CHECK(pass_case(1, 2, NULL, true, false, "1x1 s2 shortcut") == 1);
    CHECK(pass_case(1, 1, NULL, true, false, "1x1 s1 shortcut") == 1);
    CHECK(pass_case(3, 2, NULL, true, false, "3x3 shortcut") == 0);
    CHECK(pass_case(1, 2, "Relu", true, false, "shortcut with an activation") == 0);
    CHECK(pass_case(1, 2, NULL, false, false, "a model's own Q/DQ shortcut") == 0);
    CHECK(pass_case(1, 2, NULL, true, true, "shortcut read twice") == 0);
    setenv("KILN_QCONV_SUM", "0", 1);
    CHECK(pass_case(1, 2, NULL, true, false, "KILN_QCONV_SUM=0") == 0);
    unsetenv("KILN_QCONV_SUM");
    bad_case(9, 1, false, NULL, 2, KILN_OK, "");   /* the well-formed node the others vary */
    bad_case(8, 1, false, NULL, 2, KILN_ERR_SHAPE, "must give the output's shape");
    bad_case(9, 3, false, NULL, 2, KILN_ERR_SHAPE, "must give the output's shape");
    bad_case(9, 1, true, NULL, 2, KILN_ERR_UNSUPPORTED, "an 8-bit output and a linear activation");
    bad_case(9, 1, false, "Sigmoid", 2, KILN_ERR_UNSUPPORTED, "an 8-bit output and a linear activation");
    bad_case(9, 1, false, NULL, 3, KILN_ERR_INVALID_ARG, "kiln_sum_strides: two strides");
    return TEST_SUMMARY();
}
