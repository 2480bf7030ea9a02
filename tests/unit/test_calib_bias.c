/* FP8 bias correction (src/build/calib_bias.c) against a scalar reference: the mean per output
 * channel of layer(x, W) - layer(xq, Wq) computed here by brute force (direct convolution / GEMM
 * in double over every output position, xq = e4m3(x / s) * s, Wq = e4m3(W / sw) * sw with
 * sw = amax / 448 of each output channel), for 2-D convolutions with odd shapes, padding (asymmetric), strides,
 * dilations and groups (depthwise included), Gemm (transB, alpha) and MatMul, over several input
 * tensors of different batch and spatial sizes; then the whole step on a graph run on .npy
 * calibration files: the new bias equals the old one plus the reference shift (a Conv without a
 * bias gets one, a MatMul's shift goes into the constant of the Add reading it), a layer it cannot
 * take keeps its inputs, and bad data is a clean error. */
#include "build/precision.h"
#include "test_fp8_ref.h"
#include "test_tensor.h"
#include <string.h>
#include <unistd.h>

static unsigned long long seed = 77;
static kiln_graph *g;

static int val(const char *name) { return test_graph_value(g, name); }

static int cst(const char *name, kiln_tensor t) { return test_graph_const(g, name, t); }

static int node(kiln_op op, const char *name, int n_in, const int *in, int out)
{
    return test_graph_node(g, op, name, n_in, in, out);
}

static void set_ints(int i, const char *name, int n, const int64_t *v) { test_set_ints(g, i, name, n, v); }

static float *wq_of(const kiln_tensor *w, int64_t rows, bool kn) { return test_wq_of(w, rows, kn, false); }

typedef test_geo geo;

/* sum over n, oh, ow of conv(x, w)[n, m, oh, ow] into acc[m] (x rounded with s when s > 0) */
static double conv_sums(const kiln_tensor *x, const float *w, const int64_t *wd, const geo *q, float s, double *acc)
{
    int64_t per = (int64_t)test_conv_out(x, w, wd, q, s, NULL), M = wd[0], N = x->dims[0];
    double *y = kiln__malloc(sizeof(double) * (size_t)(per * M));
    test_conv_out(x, w, wd, q, s, y);
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < per / N; j++)
                acc[m] += y[(n * M + m) * (per / N) + j];
    kiln__free(y);
    return (double)per;
}

/* one convolution: random x tensors of several shapes, shift vs reference */
static void conv_case(int64_t C, int64_t M, int64_t KH, int64_t KW, geo q, float xscale)
{
    g = kiln__graph_new(NULL);
    int64_t wd[4] = {M, C / q.grp, KH, KW};
    kiln_tensor w = test_tensor_f32(4, wd, 1.0f, &seed);
    float *wf = w.data;
    for (int64_t m = 0; m < M; m++)   /* channel ranges over orders of magnitude, as BN-folded filters */
        for (int64_t i = 0; i < C / q.grp * KH * KW; i++)
            wf[m * (C / q.grp) * KH * KW + i] *= powf(10.0f, (float)(m % 4) - 2.0f);
    float *wq = wq_of(&w, M, false);
    int x = val("x"), y = val("y"), wv = cst("w", w);
    int i = node(KILN_OP_Conv, "conv", 2, (int[]){x, wv}, y);
    CHECK(kiln__node_set_attr_i(&g->nodes[i], "group", q.grp) == KILN_OK);
    set_ints(i, "strides", 2, (int64_t[]){q.sh, q.sw});
    set_ints(i, "dilations", 2, (int64_t[]){q.dh, q.dw});
    set_ints(i, "pads", 4, q.pads);
    float s = xscale * 1.3f / 448.0f;
    CHECK(kiln__node_set_attr_f(&g->nodes[i], KILN_ATTR_AQ_SCALE, s) == KILN_OK);
    kiln_bc_layer *l = NULL;
    CHECK(kiln__bc_begin(g, i, &l) == KILN_OK && l);
    double *ref = kiln__calloc((size_t)M, sizeof *ref), *refq = kiln__calloc((size_t)M, sizeof *refq), count = 0;
    const float *wconst = g->values[wv].init->data;
    for (int t = 0; l && t < 3; t++) {
        int64_t xd[4] = {1 + t, C, 5 + 2 * t, 7 + 3 * t};
        kiln_tensor xt = test_tensor_f32(4, xd, xscale, &seed);
        for (int64_t k = 0; k < kiln_tensor_numel(&xt); k++)   /* mostly positive, as after HardSwish */
            ((float *)xt.data)[k] += 0.4f * xscale;
        CHECK(kiln__bc_add(g, l, &xt) == KILN_OK);
        count += conv_sums(&xt, wconst, wd, &q, 0, ref);
        conv_sums(&xt, wq, wd, &q, s, refq);
        kiln__tensor_release(&xt);
    }
    double *got = kiln__calloc((size_t)M, sizeof *got);
    int64_t rows = -1;
    CHECK(l && kiln__bc_shift(g, l, got, &rows) == KILN_OK && rows == M);
    int bad = 0;
    double big = 0;
    for (int64_t m = 0; m < M; m++) {
        double want = (ref[m] - refq[m]) / count;
        big = fabs(want) > big ? fabs(want) : big;
        if (!(fabs(got[m] - want) <= 1e-9 + 1e-6 * fabs(ref[m] / count)))
            bad++;
    }
    CHECK_MSG(bad == 0 && big > 0, "conv C=%lld M=%lld %lldx%lld group %lld: %d channels off (largest shift %g)",
              (long long)C, (long long)M, (long long)KH, (long long)KW, (long long)q.grp, bad, big);
    kiln__free(ref), kiln__free(refq), kiln__free(got), kiln__free(wq);
    kiln__bc_free(l);
    kiln__graph_free(g);
}


/* y[n] += alpha * sum over rows of (x B)[n] (x rounded with s when s > 0); B [K, N], or [N, K] when tb */
static double gemm_sums(const kiln_tensor *x, const float *b, int64_t K, int64_t N, bool tb, float alpha, float s,
                        double *acc)
{
    int64_t rows = kiln_tensor_numel(x) / K;
    double *y = kiln__malloc(sizeof(double) * (size_t)(rows * N + 1));
    test_gemm_out(x, b, K, N, tb, alpha, s, y);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t n = 0; n < N; n++)
            acc[n] += y[r * N + n];
    kiln__free(y);
    return (double)rows;
}

static void gemm_case(kiln_op op, int64_t K, int64_t N, bool tb, float alpha)
{
    g = kiln__graph_new(NULL);
    int64_t bd[2] = {tb ? N : K, tb ? K : N};
    kiln_tensor b = test_tensor_f32(2, bd, 0.5f, &seed);
    float *bq = wq_of(&b, N, !tb);
    int x = val("x"), y = val("y"), bv = cst("b", b);
    int i = node(op, "mm", 2, (int[]){x, bv}, y);
    if (op == KILN_OP_Gemm) {
        CHECK(kiln__node_set_attr_i(&g->nodes[i], "transB", tb) == KILN_OK);
        CHECK(kiln__node_set_attr_f(&g->nodes[i], "alpha", alpha) == KILN_OK);
    }
    float s = 2.5f / 448.0f;
    CHECK(kiln__node_set_attr_f(&g->nodes[i], KILN_ATTR_AQ_SCALE, s) == KILN_OK);
    kiln_bc_layer *l = NULL;
    CHECK(kiln__bc_begin(g, i, &l) == KILN_OK && l);
    double *ref = kiln__calloc((size_t)N, sizeof *ref), *refq = kiln__calloc((size_t)N, sizeof *refq), count = 0;
    const float *bc = g->values[bv].init->data;
    for (int t = 0; l && t < 3; t++) {
        int64_t xd[3] = {2, 3 + 2 * t, K};
        int nd = op == KILN_OP_MatMul && t == 1 ? 3 : 2;
        kiln_tensor xt = test_tensor_f32(nd, nd == 3 ? xd : xd + 1, 2.0f, &seed);
        for (int64_t k = 0; k < kiln_tensor_numel(&xt); k++)
            ((float *)xt.data)[k] += 0.7f * (float)(k % K) / (float)K;
        CHECK(kiln__bc_add(g, l, &xt) == KILN_OK);
        count += gemm_sums(&xt, bc, K, N, tb, op == KILN_OP_Gemm ? alpha : 1.0f, 0, ref);
        gemm_sums(&xt, bq, K, N, tb, op == KILN_OP_Gemm ? alpha : 1.0f, s, refq);
        kiln__tensor_release(&xt);
    }
    double *got = kiln__calloc((size_t)N, sizeof *got);
    int64_t rows = -1;
    CHECK(l && kiln__bc_shift(g, l, got, &rows) == KILN_OK && rows == N);
    int bad = 0;
    for (int64_t n = 0; n < N; n++)
        if (!(fabs(got[n] - (ref[n] - refq[n]) / count) <= 1e-9 + 1e-6 * fabs(ref[n] / count)))
            bad++;
    CHECK_MSG(bad == 0, "%s K=%lld N=%lld transB %d: %d columns off", kiln__op_name(op), (long long)K, (long long)N,
              tb, bad);
    /* a wrong input shape is a clean error */
    int64_t wrong[2] = {3, K + 1};
    kiln_tensor xt = test_tensor_f32(2, wrong, 1.0f, &seed);
    CHECK(l && kiln__bc_add(g, l, &xt) == KILN_ERR_SHAPE);
    kiln__tensor_release(&xt);
    kiln__free(ref), kiln__free(refq), kiln__free(got), kiln__free(bq);
    kiln__bc_free(l);
    kiln__graph_free(g);
}


static void set_io(int in, int n_out, const int *outs)
{
    g->inputs = kiln__malloc(sizeof(int));
    g->inputs[0] = in;
    g->n_inputs = 1;
    g->outputs = kiln__malloc(sizeof(int) * (size_t)n_out);
    memcpy(g->outputs, outs, sizeof(int) * (size_t)n_out);
    g->n_outputs = n_out;
    g->values[in].dtype = KILN_DT_FLOAT32;
}

/* writes n random tensors (dims[0] and the last dim varied when vary) as dir/bK.npy */
static void write_set(const char *dir, int n, int nd, const int64_t *dims, bool vary, kiln_tensor *keep)
{
    for (int k = 0; k < n; k++) {
        int64_t d[4];
        memcpy(d, dims, sizeof(int64_t) * (size_t)nd);
        d[0] += k;
        if (vary)
            d[nd - 1] += 2 * k;
        keep[k] = test_tensor_f32(nd, d, 1.5f, &seed);
        for (int64_t i = 0; i < kiln_tensor_numel(&keep[k]); i++)
            ((float *)keep[k].data)[i] += 0.5f;
        char path[512];
        snprintf(path, sizeof path, "%s/b%d.npy", dir, k);
        CHECK(kiln_npy_write(path, &keep[k]) == KILN_OK);
    }
}

static void remove_set(const char *dir, int n, kiln_tensor *keep)
{
    for (int k = 0; k < n; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/b%d.npy", dir, k);
        unlink(path);
        kiln__tensor_release(&keep[k]);
    }
    rmdir(dir);
}

static const float *const_of(int node, int slot)
{
    const kiln_node *n = &g->nodes[node];
    return slot < n->n_in && n->in[slot] >= 0 && g->values[n->in[slot]].init ? g->values[n->in[slot]].init->data : NULL;
}

/* The whole step on a graph: Conv with a bias, depthwise Conv without, run on .npy files. */
static void driver_conv(void)
{
    char dir[] = "/tmp/kiln_bc_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    g = kiln__graph_new(NULL);
    int64_t C = 3, M = 4, wd[4] = {M, C, 3, 3}, dd[4] = {C, 1, 3, 3}, bd = M;
    kiln_tensor w = test_tensor_f32(4, wd, 1.0f, &seed), dw = test_tensor_f32(4, dd, 1.0f, &seed);
    kiln_tensor b = test_tensor_f32(1, &bd, 1.0f, &seed);
    float b0[4];
    memcpy(b0, b.data, sizeof b0);
    int x = val("x"), y1 = val("y1"), y2 = val("y2"), wv = cst("w", w), dv = cst("dw", dw), bv = cst("b", b);
    int c1 = node(KILN_OP_Conv, "conv", 3, (int[]){x, wv, bv}, y1), c2 = node(KILN_OP_Conv, "dw", 2, (int[]){x, dv}, y2);
    set_ints(c1, "pads", 4, (int64_t[]){1, 1, 1, 1});
    CHECK(kiln__node_set_attr_i(&g->nodes[c2], "group", C) == KILN_OK);
    set_ints(c2, "strides", 2, (int64_t[]){2, 2});
    float s1 = 3.0f / 448.0f, s2 = 2.0f / 448.0f;
    CHECK(kiln__node_set_attr_f(&g->nodes[c1], KILN_ATTR_AQ_SCALE, s1) == KILN_OK);
    CHECK(kiln__node_set_attr_f(&g->nodes[c2], KILN_ATTR_AQ_SCALE, s2) == KILN_OK);
    set_io(x, 2, (int[]){y1, y2});
    kiln_tensor data[2];
    write_set(dir, 2, 4, (int64_t[]){2, C, 6, 9}, true, data);
    float *wq = wq_of(g->values[wv].init, M, false), *dq = wq_of(g->values[dv].init, C, false);
    double r1[4] = {0}, q1[4] = {0}, r2[3] = {0}, q2[3] = {0}, n1 = 0, n2 = 0;
    geo g1 = {.grp = 1, .sh = 1, .sw = 1, .pads = {1, 1, 1, 1}, .dh = 1, .dw = 1}, g2 = g1;
    g2.grp = C, g2.sh = g2.sw = 2, memset(g2.pads, 0, sizeof g2.pads);
    for (int k = 0; k < 2; k++) {
        n1 += conv_sums(&data[k], g->values[wv].init->data, wd, &g1, 0, r1);
        conv_sums(&data[k], wq, wd, &g1, s1, q1);
        n2 += conv_sums(&data[k], g->values[dv].init->data, dd, &g2, 0, r2);
        conv_sums(&data[k], dq, dd, &g2, s2, q2);
    }
    int done = -1;
    int64_t rows = -1;
    CHECK(kiln__fp8_bias_correct(g, dir, 1, NULL, false, &done, &rows) == KILN_OK);
    CHECK(done == 2 && rows == 5);
    const float *nb1 = const_of(c1, 2), *nb2 = const_of(c2, 2);
    CHECK(nb1 && nb2 && g->nodes[c2].n_in == 3);
    for (int m = 0; nb1 && m < M; m++)
        CHECK_CLOSE(nb1[m], b0[m] + (r1[m] - q1[m]) / n1, 1e-5);
    for (int m = 0; nb2 && m < C; m++)
        CHECK_CLOSE(nb2[m], (r2[m] - q2[m]) / n2, 1e-5);
    CHECK(((const float *)g->values[bv].init->data)[0] == b0[0]);   /* the old constant is left as it was */
    CHECK(kiln__fp8_bias_correct(g, "/nonexistent/kiln_bc", 1, NULL, false, &done, &rows) != KILN_OK);
    kiln__free(wq), kiln__free(dq);
    remove_set(dir, 2, data);
    kiln__graph_free(g);
}

/* MatMul + Add(constant): the shift goes into the Add's constant; a MatMul read twice is left alone;
 * a Gemm without C gets one. */
static void driver_gemm(void)
{
    char dir[] = "/tmp/kiln_bc_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    g = kiln__graph_new(NULL);
    int64_t K = 6, N = 5, bd[2] = {K, N}, td[2] = {N, K}, cd[1] = {N};
    kiln_tensor b = test_tensor_f32(2, bd, 1.0f, &seed), b2 = test_tensor_f32(2, td, 1.0f, &seed);
    kiln_tensor b3 = test_tensor_f32(2, bd, 1.0f, &seed), c = test_tensor_f32(1, cd, 1.0f, &seed);
    float c0[5];
    memcpy(c0, c.data, sizeof c0);
    int x = val("x"), t = val("t"), y = val("y"), y3 = val("y3"), t4 = val("t4"), y4 = val("y4");
    int bv = cst("B", b), b2v = cst("B2", b2), b3v = cst("B3", b3), cv = cst("c", c);
    int mm = node(KILN_OP_MatMul, "mm", 2, (int[]){x, bv}, t), add = node(KILN_OP_Add, "add", 2, (int[]){t, cv}, y);
    int gm = node(KILN_OP_Gemm, "gemm", 2, (int[]){x, b2v}, y3);
    int m2 = node(KILN_OP_MatMul, "mm2", 2, (int[]){x, b3v}, t4);
    node(KILN_OP_Add, "add2", 2, (int[]){t4, t4}, y4);
    CHECK(kiln__node_set_attr_i(&g->nodes[gm], "transB", 1) == KILN_OK);
    float s = 2.5f / 448.0f;
    for (int i = 0; i < 3; i++)
        CHECK(kiln__node_set_attr_f(&g->nodes[(int[]){mm, gm, m2}[i]], KILN_ATTR_AQ_SCALE, s) == KILN_OK);
    set_io(x, 2, (int[]){y, y3});
    g->outputs = kiln__realloc(g->outputs, 3 * sizeof(int));
    g->outputs[2] = y4, g->n_outputs = 3;
    kiln_tensor data[3];
    write_set(dir, 3, 2, (int64_t[]){4, K}, false, data);
    float *bq = wq_of(g->values[bv].init, N, true), *b2q = wq_of(g->values[b2v].init, N, false);
    double r[5] = {0}, q[5] = {0}, r2[5] = {0}, q2[5] = {0}, n = 0;
    for (int k = 0; k < 3; k++) {
        n += gemm_sums(&data[k], g->values[bv].init->data, K, N, false, 1, 0, r);
        gemm_sums(&data[k], bq, K, N, false, 1, s, q);
        gemm_sums(&data[k], g->values[b2v].init->data, K, N, true, 1, 0, r2);
        gemm_sums(&data[k], b2q, K, N, true, 1, s, q2);
    }
    int done = -1;
    int64_t rows = -1;
    kiln_bc_cache cache = {0};
    CHECK(kiln__fp8_bias_correct(g, dir, 2, &cache, false, &done, &rows) == KILN_OK);
    CHECK(done == 2 && rows == 15 && cache.n == 3);
    const float *nc = const_of(add, 1), *gc = const_of(gm, 2);
    CHECK(nc && gc && g->nodes[m2].n_in == 2 && g->nodes[add].in[0] == t);
    for (int j = 0; nc && gc && j < N; j++) {
        CHECK_CLOSE(nc[j], c0[j] + (r[j] - q[j]) / n, 1e-5);
        CHECK_CLOSE(gc[j], (r2[j] - q2[j]) / n, 1e-5);
    }
    /* again with the cache: no data read (the directory is gone), the same shifts added once more */
    CHECK(kiln__fp8_bias_correct(g, "/nonexistent/kiln_bc", 1, &cache, false, &done, &rows) == KILN_OK);
    CHECK(done == 2 && rows == 0 && cache.n == 3);
    nc = const_of(add, 1), gc = const_of(gm, 2);
    for (int j = 0; nc && gc && j < N; j++) {
        CHECK_CLOSE(nc[j], c0[j] + 2 * (r[j] - q[j]) / n, 1e-5);
        CHECK_CLOSE(gc[j], 2 * (r2[j] - q2[j]) / n, 1e-5);
    }
    kiln__bc_cache_free(&cache);
    kiln__free(bq), kiln__free(b2q);
    remove_set(dir, 3, data);
    kiln__graph_free(g);
}

/* Two Gemms (transB) with per-tensor and per-channel weights chosen per layer (choose): on integer
 * activations 0..16 with one 448 (scale 1: every value exact in E4M3), "pt"'s weight [[448, 1],
 * [5, 3.25]] is exact with one scale for the tensor (1) but not per channel (3.25 / (5 / 448) =
 * 291.2 rounds to 288), so its per-tensor error is 0 and it goes per tensor, with a zero shift;
 * "pc"'s second row [0.0013, 0.001] falls below E4M3's normal range with the tensor's scale (both
 * round to 2^-9) but not with its own, so it stays per channel. Without choose neither changes;
 * a second graph takes the choices from the cache. */
static kiln_graph *choice_graph(int *pt, int *pc)
{
    g = kiln__graph_new(NULL);
    int64_t wd[2] = {2, 2};
    kiln_tensor w1 = test_tensor(KILN_DT_FLOAT32, 2, wd), w2 = test_tensor(KILN_DT_FLOAT32, 2, wd);
    memcpy(w1.data, (float[]){448, 1, 5, 3.25f}, 4 * sizeof(float));
    memcpy(w2.data, (float[]){448, 1, 0.0013f, 0.001f}, 4 * sizeof(float));
    int x = val("x"), y1 = val("y1"), y2 = val("y2");
    *pt = node(KILN_OP_Gemm, "pt", 2, (int[]){x, cst("w1", w1)}, y1);
    *pc = node(KILN_OP_Gemm, "pc", 2, (int[]){x, cst("w2", w2)}, y2);
    for (int i = 0; i < 2; i++) {
        CHECK(kiln__node_set_attr_i(&g->nodes[i ? *pc : *pt], "transB", 1) == KILN_OK);
        CHECK(kiln__node_set_attr_f(&g->nodes[i ? *pc : *pt], KILN_ATTR_AQ_SCALE, 1.0f) == KILN_OK);
    }
    set_io(x, 2, (int[]){y1, y2});
    return g;
}

static void driver_choice(void)
{
    char dir[] = "/tmp/kiln_bc_XXXXXX", path[600];
    CHECK(mkdtemp(dir) != NULL);
    int64_t xd[2] = {7, 2};
    kiln_tensor data = test_tensor(KILN_DT_FLOAT32, 2, xd);
    for (int64_t i = 0; i < 14; i++)
        ((float *)data.data)[i] = i ? (float)((i * 5) % 17) : 448.0f;
    snprintf(path, sizeof path, "%s/b0.npy", dir);
    CHECK(kiln_npy_write(path, &data) == KILN_OK);
    kiln__tensor_release(&data);
    int pt, pc, done = -1;
    int64_t rows = -1;
    kiln_bc_cache cache = {0};
    for (int choose = 0; choose < 2; choose++) {
        choice_graph(&pt, &pc);
        CHECK(kiln__fp8_bias_correct(g, dir, 2, choose ? &cache : NULL, choose, &done, &rows) == KILN_OK);
        CHECK(done == 2 && rows == 7);
        CHECK(kiln__attr_i(&g->nodes[pt], KILN_ATTR_WQ_TENSOR, 0) == choose);
        CHECK(!kiln__attr(&g->nodes[pc], KILN_ATTR_WQ_TENSOR));
        const float *b = const_of(pt, 2);
        CHECK_MSG(b && (choose ? b[0] == 0 && b[1] == 0 : b[1] != 0), "choose %d: pt's shift %g", choose, b ? b[1] : NAN);
        kiln__graph_free(g);
    }
    CHECK(cache.n == 2 && cache.samples == 7);
    choice_graph(&pt, &pc);   /* from the cache: no data read, the same choices */
    CHECK(kiln__fp8_bias_correct(g, "/nonexistent/kiln_bc", 1, &cache, false, &done, &rows) == KILN_OK);
    CHECK(done == 2 && rows == 0 && kiln__attr_i(&g->nodes[pt], KILN_ATTR_WQ_TENSOR, 0) == 1);
    CHECK(!kiln__attr(&g->nodes[pc], KILN_ATTR_WQ_TENSOR));
    kiln__graph_free(g);
    kiln__bc_cache_free(&cache);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    conv_case(5, 7, 3, 3, (geo){.grp = 1, .sh = 1, .sw = 1, .pads = {1, 1, 1, 1}, .dh = 1, .dw = 1}, 1.0f);
    conv_case(6, 6, 5, 5, (geo){.grp = 6, .sh = 2, .sw = 1, .pads = {2, 1, 2, 3}, .dh = 1, .dw = 1}, 3.0f);
    conv_case(4, 6, 3, 2, (geo){.grp = 2, .sh = 1, .sw = 2, .pads = {0, 1, 1, 0}, .dh = 2, .dw = 1}, 0.01f);
    conv_case(3, 5, 1, 1, (geo){.grp = 1, .sh = 1, .sw = 1, .pads = {0, 0, 0, 0}, .dh = 1, .dw = 1}, 20.0f);
    gemm_case(KILN_OP_Gemm, 13, 9, true, 0.75f);
    gemm_case(KILN_OP_Gemm, 7, 11, false, 1.0f);
    gemm_case(KILN_OP_MatMul, 17, 5, false, 1.0f);
    driver_conv();
    driver_gemm();
    driver_choice();
    return TEST_SUMMARY();
}
