/* FusedConvSum (cpu/ref/k_convsum.c, passes/p_shortcut.c): a residual block's 1x1 shortcut conv summed into its last
 * conv by one GEMM over the stacked K.
 *  - kiln__sgemm_ex with B's rows >= kb2 read from B2 (kiln_gemm.B2) against the same GEMM over one stacked copy
 *    of B (bit for bit: the same packed panels) and a double reference, odd sizes, K across the K slices and
 *    across a slice, one and two threads;
 *  - hand-built Transpose(Relu(Conv(H, W, B) + Conv(X, Wd, Bd, strides))) graphs built into CPU engines (the
 *    builder fuses the pair into one FusedConvSum) against the unoptimized model, odd channel counts and sizes,
 *    strides 1, 2, 3 and 2x1, with and without biases; the cases the fusion must leave alone (a padded or 3x3
 *    shortcut, a strided last conv, a --device cuda engine) keep their two convs;
 *  - a FusedConvSum node with operands that do not fit (a corrupted engine's) is a clean error, not a crash.
 * Every ISA the host has (and, in ctest, capped at AVX2). */
#include "backend/cpu/gemm.h"
#include "engine/engine.h"
#include "kiln/kiln.h"
#include "runtime/model.h"
#include "test.h"
#include "test_engines.h"
#include "test_graph.h"
#include "test_pool.h"
#include <math.h>
#include <string.h>

#define D4(a, b, c, d) ((const int64_t[]){a, b, c, d})

static void fill(float *p, int64_t n, unsigned long long *seed)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = test_randf(seed);
}

/* C = relu(A [M, K] x [B (kb2 rows) ; B2 (K - kb2 rows)] + bias) */
static void gemm_case(int64_t M, int64_t N, int64_t K, int64_t kb2, int nt, unsigned long long *seed)
{
    float *A = kiln__malloc(sizeof(float) * (size_t)(M * K + 1)), *B = kiln__malloc(sizeof(float) * (size_t)(K * N + 1));
    float *bias = kiln__malloc(sizeof(float) * (size_t)M);
    float *C1 = kiln__malloc(sizeof(float) * (size_t)(M * N)), *C2 = kiln__malloc(sizeof(float) * (size_t)(M * N));
    float *Bsplit = kiln__malloc(sizeof(float) * (size_t)((K - kb2) * N + 1));
    fill(A, M * K, seed);
    fill(B, K * N, seed);
    fill(bias, M, seed);
    memcpy(Bsplit, B + kb2 * N, sizeof(float) * (size_t)((K - kb2) * N));
    kiln_epi e = {.bias = bias, .row_bias = true, .act = {.kind = KILN_ACT_RELU}};
    kiln_gemm one = {.M = M, .N = N, .K = K, .alpha = 1.0f, .A = A, .lda = K, .B = B, .ldb = N, .C = C1, .ldc = N,
                     .epi = &e};
    kiln_gemm two = one;
    two.B2 = Bsplit;
    two.kb2 = kb2;
    two.C = C2;
    kiln__sgemm_ex(test_pool(nt), nt, &one);
    kiln__sgemm_ex(test_pool(nt), nt, &two);
    /* the tiny and GEMV shapes of `one` run unpacked, `two` always packed: the same values in another order */
    bool exact = 2.0 * (double)(M * N * K) >= 65536.0 && M > 1 && N > 1;
    double worst = 0;
    int64_t differ = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double ref = bias[i];
            for (int64_t k = 0; k < K; k++)
                ref += (double)A[i * K + k] * B[k * N + j];
            ref = ref > 0 ? ref : 0;
            double err = fabs(C2[i * N + j] - ref) / (1e-5 * (1.0 + sqrt((double)K)));
            worst = err > worst || isnan(err) ? err : worst;
            differ += memcmp(&C1[i * N + j], &C2[i * N + j], sizeof(float)) != 0;
        }
    CHECK_MSG(worst <= 1.0, "M=%lld N=%lld K=%lld kb2=%lld threads %d: error %g", (long long)M, (long long)N,
              (long long)K, (long long)kb2, nt, worst);
    CHECK_MSG(!exact || !differ, "M=%lld N=%lld K=%lld kb2=%lld threads %d: %lld elements differ from the stacked B",
              (long long)M, (long long)N, (long long)K, (long long)kb2, nt, (long long)differ);
    kiln__free(A), kiln__free(B), kiln__free(bias), kiln__free(C1), kiln__free(C2), kiln__free(Bsplit);
}

typedef struct sum_case {
    int64_t C1, C2, M, H, W;   /* H x W: the output's (and H's) size */
    int64_t sh, sw;            /* the shortcut's strides (X is (H-1)*sh+1+extra high) */
    int64_t k, p, s3;          /* the shortcut's kernel and padding, the last conv's stride (1 1 0 1: fusable) */
    bool bias;                 /* both convs with biases, else neither */
} sum_case;

/* Transpose(Relu(Conv(H, W, B) + Conv(X, Wd, Bd))) (the builder's passes make the first a FusedConv over the
 * second's output) */
static kiln_model_t sum_model(const sum_case *c, unsigned long long *seed)
{
    kiln_graph *g = test_graph_onnx("conv_sum");
    int64_t Ho = c->H, Wo = c->W;
    /* the last conv's input: Ho x Wo, or larger where it is strided */
    int64_t hd[4] = {1, c->C1, (Ho - 1) * c->s3 + 1, (Wo - 1) * c->s3 + 1};
    /* X: the shortcut's input, giving Ho x Wo (one spare row / column where the stride leaves one) */
    int64_t xd[4] = {1, c->C2, (Ho - 1) * c->sh + c->k - 2 * c->p + (c->sh > 1), (Wo - 1) * c->sw + c->k - 2 * c->p};
    int64_t wd3[4] = {c->M, c->C1, 1, 1}, wdd[4] = {c->M, c->C2, c->k, c->k};
    int h = test_graph_input(g, "H", 4, hd), x = test_graph_input(g, "X", 4, xd);
    int w3 = test_graph_const(g, "W3", test_tensor_f32(4, wd3, 1.0f, seed));
    int wds = test_graph_const(g, "Wd", test_tensor_f32(4, wdd, 1.0f, seed));
    int b3 = c->bias ? test_graph_const(g, "B3", test_tensor_f32(1, &c->M, 1.0f, seed)) : -1;
    int bd = c->bias ? test_graph_const(g, "Bd", test_tensor_f32(1, &c->M, 1.0f, seed)) : -1;
    int y3 = test_graph_value(g, "y3"), yd = test_graph_value(g, "yd"), s = test_graph_value(g, "s");
    int a = test_graph_value(g, "a"), out = test_graph_value(g, "out");
    int in3[3] = {h, w3, b3}, ind[3] = {x, wds, bd};
    int c3 = test_graph_node(g, KILN_OP_Conv, "conv3", c->bias ? 3 : 2, in3, y3);
    int cd = test_graph_node(g, KILN_OP_Conv, "downsample", c->bias ? 3 : 2, ind, yd);
    int64_t st3[2] = {c->s3, c->s3}, std_[2] = {c->sh, c->sw}, pads[4] = {c->p, c->p, c->p, c->p};
    CHECK(kiln__node_set_attr_ints(&g->nodes[c3], "strides", 2, st3) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(&g->nodes[cd], "strides", 2, std_) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(&g->nodes[cd], "pads", 4, pads) == KILN_OK);
    int ain[2] = {y3, yd};
    test_graph_node(g, KILN_OP_Add, "add", 2, ain, s);
    test_graph_node(g, KILN_OP_Relu, "relu", 1, &s, a);
    int ti = test_graph_node(g, KILN_OP_Transpose, "transpose", 1, &a, out);
    int64_t perm[4] = {0, 1, 3, 2};
    CHECK(kiln__node_set_attr_ints(&g->nodes[ti], "perm", 4, perm) == KILN_OK);
    test_graph_output(g, out);
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    return m;
}

static void sum_run(const sum_case *c, bool want_fused, unsigned long long *seed)
{
    kiln_model_t m = sum_model(c, seed);
    const kiln_graph *g = m->g;
    kiln_tensor ins[2];
    const char *names[2] = {"H", "X"};
    test_graph_random_inputs(g, 2, ins, seed);
    kiln_tensor *ref = NULL;
    int nref = 0;
    CHECK_MSG(kiln_model_run(m, 2, names, ins, NULL, &nref, &ref) == KILN_OK, "%s", kiln_last_error());
    kiln_engine_t e = NULL;
    kiln_build_options o = {.no_tactics = true};
    CHECK_MSG(kiln_build(m, &o, &e) == KILN_OK, "build: %s", kiln_last_error());
    CHECK_MSG(test_engine_count_op(e, KILN_OP_FusedConvSum) == want_fused, "C1=%lld C2=%lld M=%lld s=%lldx%lld k=%lld p=%lld "
              "s3=%lld: %d FusedConvSum", (long long)c->C1, (long long)c->C2, (long long)c->M, (long long)c->sh,
              (long long)c->sw, (long long)c->k, (long long)c->p, (long long)c->s3, test_engine_count_op(e, KILN_OP_FusedConvSum));
    /* a --device cuda engine keeps both convs (FusedConvSum is a CPU kernel) */
    kiln_build_options od = {.no_tactics = true, .device = KILN_DEVICE_CUDA};
    kiln_engine_t ed = NULL;
    CHECK_MSG(kiln_build(m, &od, &ed) == KILN_OK, "device build: %s", kiln_last_error());
    CHECK(!ed || test_engine_count_op(ed, KILN_OP_FusedConvSum) == 0);
    kiln_engine_free(ed);
    for (int nt = 1; e && nt <= 2; nt++) {
        kiln_context_t cx = NULL;
        CHECK(kiln_context_create(e, &cx) == KILN_OK);
        kiln_context_set_threads(cx, nt);
        for (int i = 0; cx && i < 2; i++)
            CHECK(kiln_context_set_input(cx, names[i], &ins[i]) == KILN_OK);
        CHECK_MSG(cx && kiln_context_run(cx) == KILN_OK, "%s", kiln_last_error());
        const kiln_tensor *y = cx ? kiln_context_output(cx, 0) : NULL;
        CHECK(y && nref == 1 && kiln_tensor_numel(y) == kiln_tensor_numel(&ref[0]));
        double worst = y && nref == 1 ? test_worst_f32(y->data, ref[0].data, kiln_tensor_numel(y), 1e-4, 1e-4) : 0;
        CHECK_MSG(worst <= 1.0, "C1=%lld C2=%lld M=%lld %lldx%lld s=%lldx%lld threads %d: error %g", (long long)c->C1,
                  (long long)c->C2, (long long)c->M, (long long)c->H, (long long)c->W, (long long)c->sh,
                  (long long)c->sw, nt, worst);
        kiln_context_free(cx);
    }
    kiln_engine_free(e);
    kiln_tensors_free(ref, nref);
    for (int i = 0; i < 2; i++)
        kiln__tensor_release(&ins[i]);
    kiln_model_free(m);
}

/* FusedConvSum(X, X2, W) run directly with dims or attributes that do not fit: want st and a message naming what */
static void bad_case(const int64_t *xd, const int64_t *x2d, const int64_t *wd, int ns, const int64_t *strides,
                     kiln_status want, const char *what, unsigned long long *seed)
{
    kiln_graph *g = test_graph_onnx("bad_sum");
    int in[3] = {test_graph_input(g, "X", 4, xd), test_graph_input(g, "X2", 4, x2d),
                 test_graph_const(g, "W", test_tensor_f32(4, wd, 1.0f, seed))};
    int y = test_graph_value(g, "y");
    int n = test_graph_node(g, KILN_OP_FusedConvSum, "sum", 3, in, y);
    if (ns)
        CHECK(kiln__node_set_attr_ints(&g->nodes[n], "strides", ns, strides) == KILN_OK);
    test_graph_output(g, y);
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    kiln_tensor ins[2];
    test_graph_random_inputs(g, 2, ins, seed);
    const char *names[2] = {"X", "X2"};
    kiln_tensor *out = NULL;
    int nout = 0;
    kiln_status st = kiln_model_run(m, 2, names, ins, NULL, &nout, &out);
    CHECK_MSG(st == want && strstr(kiln_last_error(), what), "%s: status %d, '%s'", what, (int)st, kiln_last_error());
    kiln_tensors_free(out, nout);
    for (int i = 0; i < 2; i++)
        kiln__tensor_release(&ins[i]);
    kiln_model_free(m);
}

int main(void)
{
    unsigned long long seed = 0x2545F4914F6CDD1Dull;
    /* M, N, K, kb2: slices of one (K <= 512), two and three kc; kb2 at a slice's edge, inside one, 0, K - 1 */
    static const int64_t gc[][4] = {
        {37, 45, 23, 9},      {64, 200, 320, 64},  {19, 77, 700, 300}, {40, 33, 1100, 512},
        {8, 129, 600, 0},     {13, 31, 257, 256},  {3, 5, 7, 3},       {1, 70, 90, 45},
        {70, 1, 90, 44},      {256, 100, 384, 128}, {33, 196, 1536, 513},
        /* ResNet-50's shapes at 56x56 and 28x28 (N >= 512; B and B2 were read in place by the AVX-512 tiles until
         * session 40, now packed, a slice across kb2 panel by panel): kb2 inside one slice (layer1_0 and layer2_0),
         * inside and at the edge of a slice of three, kb2 = 0; a 16-column last panel */
        {64, 3136, 320, 64},  {512, 784, 384, 128}, {16, 528, 1100, 300}, {24, 1040, 1100, 734}, {40, 512, 600, 0},
    };
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++)
        for (int nt = 1; nt <= 2; nt++)
            gemm_case(gc[i][0], gc[i][1], gc[i][2], gc[i][3], nt, &seed);
    static const sum_case fused[] = {
        {64, 256, 256, 14, 14, 1, 1, 1, 0, 1, true}, {37, 45, 29, 9, 11, 2, 2, 1, 0, 1, true},
        {13, 300, 24, 7, 13, 2, 2, 1, 0, 1, false},  {600, 40, 17, 5, 9, 3, 3, 1, 0, 1, true},
        {5, 3, 2, 2, 3, 2, 1, 1, 0, 1, true},        {19, 77, 50, 17, 5, 1, 1, 1, 0, 1, false},
        {29, 67, 40, 9, 19, 2, 2, 1, 0, 1, true},    {500, 90, 33, 6, 17, 2, 2, 1, 0, 1, true},
        {11, 130, 70, 3, 37, 1, 2, 1, 0, 1, false},
    };
    for (size_t i = 0; i < sizeof fused / sizeof fused[0]; i++)
        sum_run(&fused[i], true, &seed);
    /* left as two convs: a padded 1x1 shortcut, a 3x3 one, a strided last conv */
    static const sum_case apart[] = {
        {16, 24, 20, 7, 7, 1, 1, 1, 1, 1, true},
        {16, 24, 20, 7, 7, 2, 2, 3, 1, 1, true},
        {16, 24, 20, 7, 7, 2, 2, 1, 0, 2, true},
    };
    for (size_t i = 0; i < sizeof apart / sizeof apart[0]; i++)
        sum_run(&apart[i], false, &seed);
    /* W's columns not C1 + C2; X2 not giving X's size at the strides; a stride count off the spatial rank */
    bad_case(D4(1, 4, 5, 5), D4(1, 3, 5, 5), D4(6, 8, 1, 1), 0, NULL, KILN_ERR_SHAPE, "do not fit", &seed);
    bad_case(D4(1, 4, 5, 5), D4(1, 3, 7, 7), D4(6, 7, 1, 1), 2, D4(1, 1, 0, 0), KILN_ERR_SHAPE, "do not fit", &seed);
    bad_case(D4(1, 4, 5, 5), D4(1, 3, 9, 9), D4(6, 7, 1, 1), 1, D4(2, 0, 0, 0), KILN_ERR_INVALID_ARG, "strides has",
             &seed);
    return TEST_SUMMARY();
}
