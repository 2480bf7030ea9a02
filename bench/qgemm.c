/* GEMM throughput by precision, side by side in one run: FP32 sgemm, INT8 (u8 x s8 -> s32,
 * AVX512-VNNI, requantized to u8) and BF16 (vdpbf16ps, float32 out) at ResNet-50-like and
 * BERT-base-like shapes, 1 and 2 threads. The constant operand (weights) is packed once, as a
 * prepared layer would be; the other operand's packing (FP32: the sgemm's own; INT8: rows copied
 * and summed; BF16: rows rounded to BF16) is inside the timed call. Rounds alternate between the
 * precisions so that load changes hit all of them alike; the best round is reported.
 *
 * A second table times whole Conv layers through the kernels the registry picks (FP32 Conv,
 * QLinearConv u8 x s8 with a fused Relu and its weights prepared by kiln__qprep_conv as a built
 * engine's layer would have them, Conv with BF16 weights), the activations' packing included.
 *
 *   build/bench_qgemm [rounds]          (built by CMake, not run by ctest) */
#include "backend/cpu/qgemm_bf16.h"
#include "core/numfmt.h"
#include "ir/graph.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/qgemm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct shape {
    const char *name;
    int64_t M, N, K;
} shape;

/* M: rows of the activation operand (tokens / output pixels' role), N: output features, K */
static const shape shapes[] = {
    {"resnet50 3x3 conv (256 ch, 56x56)", 3136, 256, 1152}, {"resnet50 1x1 conv (64->256, 56x56)", 3136, 256, 64},
    {"resnet50 3x3 conv (512 ch, 7x7)", 49, 512, 4608},     {"bert-base qkv/out (768->768, 128 tok)", 128, 768, 768},
    {"bert-base ffn1 (768->3072, 128 tok)", 128, 3072, 768}, {"bert-base ffn2 (3072->768, 128 tok)", 128, 768, 3072},
};

static void *xalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* ---- whole layers through the kernels the registry picks (FP32 Conv, QLinearConv u8, Conv with
 * BF16 weights): im2col / packing included, weights packed per run (no prepared blob yet) ---- */

typedef struct conv_shape {
    const char *name;
    int64_t C, M, H, W, k, s;
} conv_shape;

static const conv_shape convs[] = {
    {"conv 3x3 64->64 56x56", 64, 64, 56, 56, 3, 1},      {"conv 1x1 64->256 56x56", 64, 256, 56, 56, 1, 1},
    {"conv 3x3 128->128 28x28", 128, 128, 28, 28, 3, 1}, {"conv 3x3 256->256 14x14", 256, 256, 14, 14, 3, 1},
    {"conv 1x1 1024->256 14x14", 1024, 256, 14, 14, 1, 1}, {"conv 3x3 512->512 7x7", 512, 512, 7, 7, 3, 1},
    {"stem 7x7/2 3->64 224x224", 3, 64, 224, 224, 7, 2},    {"conv 3x3/2 128->128 56x56", 128, 128, 56, 56, 3, 2},
    {"conv 1x1/2 512->1024 28x28", 512, 1024, 28, 28, 1, 2},
};

static kiln_tensor tens(kiln_dtype dt, int nd, const int64_t *dims, unsigned long long *seed)
{
    kiln_tensor t;
    memset(&t, 0, sizeof t);
    if (kiln__tensor_alloc(&t, dt, nd, dims) != KILN_OK)
        exit(1);
    for (size_t i = 0; i < t.nbytes; i++) {
        *seed = *seed * 6364136223846793005ULL + 1;
        ((uint8_t *)t.data)[i] = (uint8_t)(*seed >> 33);
    }
    if (dt == KILN_DT_FLOAT32)
        for (int64_t i = 0; i < kiln_tensor_numel(&t); i++)
            ((float *)t.data)[i] = (float)(((uint8_t *)t.data)[4 * i] % 64) / 64.0f - 0.5f;
    if (dt == KILN_DT_BFLOAT16)
        for (int64_t i = 0; i < kiln_tensor_numel(&t); i++)
            ((uint16_t *)t.data)[i] = kiln__f32_to_bf16((float)(((uint8_t *)t.data)[2 * i] % 64) / 64.0f - 0.5f);
    return t;
}

static double run_layer(kiln_op op, kiln_pool *pool, int th, const kiln_tensor **in, int nin, kiln_attr *attrs, int na,
                        bool prep)
{
    int ids[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    kiln_node node = {.name = (char *)"l", .op_type = (char *)kiln__op_name(op), .domain = (char *)"", .op = op,
                      .opset = 13, .n_in = nin, .n_out = 1, .in = ids, .out = ids + 9, .attrs = attrs, .n_attr = na};
    kiln_tensor y;
    memset(&y, 0, sizeof y);
    kiln_tensor *o[1] = {&y};
    kiln_kctx c = {.node = &node, .n_in = nin, .in = in, .n_out = 1, .out = o, .pool = pool, .nthreads = th};
    void *blob = NULL;
    size_t size = 0;
    if (prep && kiln__qprep_conv(&node, nin, in, &blob, &size) == KILN_OK) /* as a built engine would have it */
        c.prepared = blob, c.prepared_size = size;
    double t0 = now();
    kiln_status st = kiln__ref_kernel(op)(&c);
    double t = now() - t0;
    kiln__free(blob);
    if (st != KILN_OK) {
        fprintf(stderr, "%s: %s\n", kiln__op_name(op), kiln_last_error());
        exit(1);
    }
    kiln__tensor_release(&y);
    return t;
}

static void bench_layers(kiln_pool *pool, int rounds)
{
    printf("\n%-40s %3s %10s %10s %10s %7s %7s\n", "layer (batch 1, INT8 weights prepared)", "thr", "FP32 ms",
           "INT8 ms", "BF16w ms", "FP/INT8", "FP/BF16");
    unsigned long long seed = 5;
    for (size_t ci = 0; ci < sizeof convs / sizeof convs[0]; ci++) {
        const conv_shape *cs = &convs[ci];
        int64_t xd[4] = {1, cs->C, cs->H, cs->W}, wd[4] = {cs->M, cs->C, cs->k, cs->k}, one = 1;
        kiln_tensor xf = tens(KILN_DT_FLOAT32, 4, xd, &seed), wf = tens(KILN_DT_FLOAT32, 4, wd, &seed);
        kiln_tensor wb = tens(KILN_DT_BFLOAT16, 4, wd, &seed);
        kiln_tensor xq = tens(KILN_DT_UINT8, 4, xd, &seed), wq = tens(KILN_DT_INT8, 4, wd, &seed);
        kiln_tensor sc = tens(KILN_DT_FLOAT32, 1, &one, &seed), zq = tens(KILN_DT_UINT8, 1, &one, &seed);
        kiln_tensor zw = tens(KILN_DT_INT8, 1, &one, &seed);
        ((float *)sc.data)[0] = 0.01f;
        ((int8_t *)zw.data)[0] = 0;
        int64_t pads[4] = {cs->k / 2, cs->k / 2, cs->k / 2, cs->k / 2}, st[2] = {cs->s, cs->s};
        kiln_attr attrs[3] = {{.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = pads},
                              {.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = 2, .ints = st},
                              {.name = (char *)"kiln_act", .type = KILN_ATTR_STRING, .s = (char *)"Relu", .s_len = 4}};
        const kiln_tensor *inf[2] = {&xf, &wf}, *inb[2] = {&xf, &wb};
        const kiln_tensor *inq[8] = {&xq, &sc, &zq, &wq, &sc, &zw, &sc, &zq};
        for (int th = 1; th <= 2; th++) {
            double best[3] = {1e30, 1e30, 1e30};
            for (int r = 0; r < rounds; r++) {
                double t = run_layer(KILN_OP_Conv, pool, th, inf, 2, attrs, 2, false);
                best[0] = t < best[0] ? t : best[0];
                t = run_layer(KILN_OP_QLinearConv, pool, th, inq, 8, attrs, 3, true);
                best[1] = t < best[1] ? t : best[1];
                t = run_layer(KILN_OP_Conv, pool, th, inb, 2, attrs, 2, false);
                best[2] = t < best[2] ? t : best[2];
            }
            printf("%-40s %3d %10.3f %10.3f %10.3f %7.2f %7.2f\n", cs->name, th, best[0] * 1e3, best[1] * 1e3,
                   best[2] * 1e3, best[0] / best[1], best[0] / best[2]);
        }
        kiln__tensor_release(&xf), kiln__tensor_release(&wf), kiln__tensor_release(&wb), kiln__tensor_release(&xq);
        kiln__tensor_release(&wq), kiln__tensor_release(&sc), kiln__tensor_release(&zq), kiln__tensor_release(&zw);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1)
        rounds = 1;
    kiln_pool *pool = kiln__pool_create(2);
    bool vnni = kiln__qgemm_vnni_available(), bf16 = kiln__bgemm_available();
    printf("AVX512-VNNI: %s, AVX512-BF16: %s; best of %d alternating rounds\n", vnni ? "yes" : "no (portable C)",
           bf16 ? "yes" : "no (float32 fallback)", rounds);
    printf("%-40s %3s %10s %10s %10s %7s %7s\n", "shape (M x N x K)", "thr", "FP32 GF/s", "INT8 GOP/s", "BF16 GF/s",
           "INT8/FP", "BF16/FP");
    unsigned long long seed = 1;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        int64_t M = s->M, N = s->N, K = s->K;
        float *A = xalloc(sizeof(float) * (size_t)(M * K)), *B = xalloc(sizeof(float) * (size_t)(K * N));
        float *C = xalloc(sizeof(float) * (size_t)(M * N));
        uint8_t *Aq = xalloc((size_t)(M * K)), *Bq = xalloc((size_t)(K * N)), *Cq = xalloc((size_t)(M * N));
        for (int64_t i = 0; i < M * K; i++) {
            seed = seed * 6364136223846793005ULL + 1;
            A[i] = (float)(seed >> 40) / (float)(1 << 24) - 0.5f;
            Aq[i] = (uint8_t)(seed >> 33);
        }
        for (int64_t i = 0; i < K * N; i++) {
            seed = seed * 6364136223846793005ULL + 1;
            B[i] = (float)(seed >> 40) / (float)(1 << 24) - 0.5f;
            Bq[i] = (uint8_t)(seed >> 33);
        }
        /* FP32: B pre-packed in the sgemm's panel layout */
        int nr = kiln__sgemm_nr();
        int64_t np = (N + nr - 1) / nr;
        float *bpack = xalloc(sizeof(float) * (size_t)(np * nr * K));
        memset(bpack, 0, sizeof(float) * (size_t)(np * nr * K));
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                bpack[(j / nr) * K * nr + k * nr + j % nr] = B[k * N + j];
        /* INT8: B packed as panels with column sums; A's rows packed per call */
        int64_t kp = kiln__qgemm_kp(K);
        uint8_t *bq = xalloc((size_t)kiln__qgemm_panel_bytes(K, N)), *ap = xalloc((size_t)(M * kp));
        int32_t *bsum = xalloc(sizeof(int32_t) * (size_t)(N + 16));
        kiln__qpack_panels(Bq, N, 1, K, N, false, bq);
        kiln__qpanel_sums(bq, K, N, true, bsum);
        float *sc = xalloc(sizeof(float) * (size_t)N), *mu = xalloc(sizeof(float) * (size_t)N);
        for (int64_t j = 0; j < N; j++)
            sc[j] = 1e-4f, mu[j] = 1e-3f;
        kiln_act relu = {KILN_ACT_RELU, 0, 0};
        kiln_qepi e;
        kiln__qepi_init(&e, KILN_QOUT_U8, &relu, 0.1f, 3, 0, 255);
        e.scale = sc, e.mult = mu;
        /* BF16: B packed once */
        kiln_bgemm_b *bb = NULL;
        uint16_t *B16 = xalloc(sizeof(uint16_t) * (size_t)(K * N));
        kiln__f32_to_bf16_array(B16, B, K * N);
        if (kiln__bgemm_pack_b(B16, N, 1, K, N, &bb) != KILN_OK) {
            fprintf(stderr, "bf16 pack failed\n");
            return 1;
        }
        for (int th = 1; th <= 2; th++) {
            double best[3] = {1e30, 1e30, 1e30};
            for (int r = 0; r < rounds; r++) {
                double t0 = now();
                kiln_gemm g = {.M = M, .N = N, .K = K, .alpha = 1, .A = A, .lda = K, .bpack = bpack, .C = C, .ldc = N};
                kiln__sgemm_ex(pool, th, &g);
                double t1 = now();
                kiln__qpack_rows(Aq, K, M, K, false, false, ap, NULL);
                kiln_qgemm q = {.M = M, .N = N, .K = K, .a = ap, .lda = kp, .a_zp0 = 7, .b = bq, .b_sum = bsum,
                                .c = Cq, .ldc = N, .epi = e};
                kiln__qgemm(pool, th, &q);
                double t2 = now();
                kiln_bgemm bg = {.M = M, .N = N, .K = K, .A = A, .lda = K, .b = bb, .C = C, .ldc = N};
                kiln__bgemm(pool, th, &bg);
                double t3 = now();
                best[0] = t1 - t0 < best[0] ? t1 - t0 : best[0];
                best[1] = t2 - t1 < best[1] ? t2 - t1 : best[1];
                best[2] = t3 - t2 < best[2] ? t3 - t2 : best[2];
            }
            double ops = 2.0 * (double)M * (double)N * (double)K * 1e-9;
            char nm[80];
            snprintf(nm, sizeof nm, "%s", s->name);
            printf("%-40s %3d %10.1f %10.1f %10.1f %7.2f %7.2f\n", nm, th, ops / best[0], ops / best[1], ops / best[2],
                   best[0] / best[1], best[0] / best[2]);
        }
        kiln__bgemm_free_b(bb);
        free(B16);
        free(A), free(B), free(C), free(Aq), free(Bq), free(Cq), free(bpack), free(bq), free(ap), free(bsum);
        free(sc), free(mu);
    }
    bench_layers(pool, rounds);
    kiln__pool_free(pool);
    return 0;
}
