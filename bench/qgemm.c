/* GEMM throughput by precision, side by side in one run: FP32 sgemm, INT8 (u8 x s8 -> s32,
 * AVX512-VNNI, requantized to u8) and BF16 (vdpbf16ps, float32 out) at ResNet-50-like and
 * BERT-base-like shapes, 1 and 2 threads. The constant operand (weights) is packed once, as a
 * prepared layer would be; the other operand's packing (FP32: the sgemm's own; INT8: rows copied
 * and summed; BF16: rows rounded to BF16) is inside the timed call. Rounds alternate between the
 * precisions so that load changes hit all of them alike; the best round is reported.
 *
 *   build/bench_qgemm [rounds]          (built by CMake, not run by ctest) */
#include "backend/cpu/qgemm_bf16.h"
#include "core/numfmt.h"
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
    kiln__pool_free(pool);
    return 0;
}
