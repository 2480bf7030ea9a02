/* kiln__sgemm against the double-accumulating reference: odd sizes, all transpose combos,
 * alpha/beta variants, padded leading dimensions, several thread counts, concurrent callers;
 * plus a GFLOP/s printout (skipped with the argument "q"). */
#include "test.h"
#include "backend/kernel.h"
#include <time.h>
#include <pthread.h>

void kiln__sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

static float *rand_buf(size_t n, unsigned long long *s)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = test_randf(s);
    return p;
}

static int n_cases;

/* One comparison; returns 0 on mismatch (CHECK records it). */
static int run_case(int nthreads, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                    int64_t pad, unsigned long long *seed)
{
    int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    int64_t arows = ta ? K : M, brows = tb ? N : K;
    float *A = rand_buf((size_t)(arows * lda), seed);
    float *B = rand_buf((size_t)(brows * ldb), seed);
    float *C0 = rand_buf((size_t)(M * ldc), seed);
    float *C = rand_buf((size_t)(M * ldc), seed);
    float *R = rand_buf((size_t)(M * ldc), seed);
    for (int64_t i = 0; i < M * ldc; i++) {
        C[i] = beta == 0.0f ? NAN : C0[i];
        R[i] = C[i];
    }
    kiln__sgemm(nthreads, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    kiln__sgemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    int ok = 1;
    for (int64_t i = 0; i < M && ok; i++) {
        for (int64_t j = 0; j < ldc; j++) {
            float got = C[i * ldc + j], want = R[i * ldc + j];
            if (j >= N) {
                /* padding columns must be untouched */
                bool same = (isnan(got) && isnan(want)) || got == want;
                if (!same) {
                    CHECK_MSG(same, "pad clobbered at (%lld,%lld): M=%lld N=%lld K=%lld ta=%d tb=%d",
                              (long long)i, (long long)j, (long long)M, (long long)N, (long long)K, ta, tb);
                    ok = 0;
                    break;
                }
                continue;
            }
            /* error bound relative to sum |a||b| */
            double mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                mag += fabs(a * b);
            }
            double tol = 2e-7 * (double)(K + 8) * (fabs(alpha) * mag + fabs(beta) * fabs(C0[i * ldc + j])) + 1e-6;
            if (!(fabs((double)got - (double)want) <= tol)) {
                CHECK_MSG(0, "M=%lld N=%lld K=%lld ta=%d tb=%d alpha=%g beta=%g pad=%lld nt=%d at (%lld,%lld): "
                          "%g vs %g", (long long)M, (long long)N, (long long)K, ta, tb, alpha, beta,
                          (long long)pad, nthreads, (long long)i, (long long)j, got, want);
                ok = 0;
                break;
            }
        }
    }
    test_checks++;
    n_cases++;
    free(A);
    free(B);
    free(C0);
    free(C);
    free(R);
    return ok;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prints GFLOP/s (best single call over ~0.25 s of calls); a printout, not an assertion. */
static void bench(int nthreads, bool ta, bool tb, int64_t M, int64_t N, int64_t K)
{
    unsigned long long seed = 42;
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    float *A = rand_buf((size_t)(M * K), &seed), *B = rand_buf((size_t)(K * N), &seed);
    float *C = rand_buf((size_t)(M * N), &seed);
    double flop = 2.0 * (double)M * (double)N * (double)K;
    kiln__sgemm(nthreads, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N); /* warm up */
    double best = 1e30, start = now_s();
    for (int i = 0; i < 1000 && (i < 5 || now_s() - start < 0.25); i++) {
        double t0 = now_s();
        kiln__sgemm(nthreads, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
        double t = now_s() - t0;
        if (t < best)
            best = t;
    }
    printf("sgemm %s%s M=%lld N=%lld K=%lld threads=%d: %.1f GFLOP/s (%.3f ms)\n", ta ? "T" : "N", tb ? "T" : "N",
           (long long)M, (long long)N, (long long)K, nthreads, flop / best * 1e-9, best * 1e3);
    free(A);
    free(B);
    free(C);
}

/* Several application threads calling sgemm at once (the pool is then busy: inline fallback). */
typedef struct conc_arg {
    int64_t M, N, K;
    unsigned long long seed;
    int ok;
} conc_arg;

static void *conc_thread(void *p)
{
    conc_arg *a = p;
    float *A = rand_buf((size_t)(a->M * a->K), &a->seed), *B = rand_buf((size_t)(a->K * a->N), &a->seed);
    float *C = rand_buf((size_t)(a->M * a->N), &a->seed), *R = rand_buf((size_t)(a->M * a->N), &a->seed);
    a->ok = 1;
    for (int rep = 0; rep < 4; rep++) {
        kiln__sgemm(2, false, false, a->M, a->N, a->K, 1.0f, A, a->K, B, a->N, 0.0f, C, a->N);
        if (rep == 0)
            kiln__sgemm_ref(false, false, a->M, a->N, a->K, 1.0f, A, a->K, B, a->N, 0.0f, R, a->N);
        for (int64_t i = 0; i < a->M * a->N; i++)
            if (!(fabs((double)C[i] - (double)R[i]) <= 1e-4 * (double)a->K))
                a->ok = 0;
    }
    free(A);
    free(B);
    free(C);
    free(R);
    return NULL;
}

int main(int argc, char **argv)
{
    unsigned long long seed = 0x9E3779B97F4A7C15ull;
    static const int64_t sizes[] = {1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 47, 64, 65};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    int fails = 0;

    /* small / odd sizes: all transpose combos, several M, N, K */
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = (t >> 1) & 1;
        for (int mi = 0; mi < ns; mi += 2)
            for (int ni = 0; ni < ns; ni++)
                for (int ki = 0; ki < ns; ki += 3)
                    fails += !run_case(1, ta, tb, sizes[mi], sizes[ni], sizes[ki], 1.0f, 0.0f, 0, &seed);
    }

    /* medium / large odd sizes through the packed path: all combos, alpha/beta, pads, threads */
    static const int64_t shapes[][3] = {
        {17, 255, 129}, {255, 17, 300}, {97, 131, 513}, {64, 49, 576}, {130, 196, 64}, {3, 1000, 77},
        {200, 3, 257}, {1, 1000, 512}, {513, 1, 100}, {48, 96, 27}, {129, 161, 1}, {70, 33, 40},
        {9, 65, 300}, {40, 81, 33}, {23, 113, 47},
    };
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.75f, 0.5f}, {-2.0f, 0.0f}};
    static const int threads[] = {1, 2, 4};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 4; v++)
                for (int th = 0; th < 3; th++) {
                    bool ta = t & 1, tb = (t >> 1) & 1;
                    int64_t pad = (s + (size_t)t + (size_t)v) % 3 == 0 ? 0 : 3 + (int64_t)s;
                    fails += !run_case(threads[th], ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], ab[v][0],
                                       ab[v][1], pad, &seed);
                }

    /* a few bigger ones spanning several cache blocks */
    fails += !run_case(2, false, false, 300, 2100, 700, 1.0f, 0.0f, 5, &seed);
    fails += !run_case(4, true, true, 257, 333, 1030, 0.5f, 0.5f, 1, &seed);
    fails += !run_case(2, false, true, 128, 768, 768, 1.0f, 1.0f, 0, &seed);
    fails += !run_case(3, true, false, 77, 3000, 65, 1.0f, 0.0f, 2, &seed);
    /* thread grids split along M, along both, and the threaded direct (GEMV) path */
    fails += !run_case(4, false, false, 1000, 49, 200, 1.0f, 0.5f, 3, &seed);
    fails += !run_case(4, true, true, 1001, 81, 150, -1.0f, 0.0f, 0, &seed);
    fails += !run_case(2, false, true, 2, 3000, 900, 1.0f, 0.0f, 1, &seed);
    fails += !run_case(3, false, false, 1, 5000, 700, 1.0f, 1.0f, 0, &seed);
    fails += !run_case(3, true, true, 3000, 1, 700, 2.0f, 0.0f, 4, &seed);

    /* concurrent callers */
    {
        conc_arg args[3] = {{131, 200, 97, 1, 0}, {64, 300, 150, 2, 0}, {200, 45, 260, 3, 0}};
        pthread_t th[3];
        for (int i = 0; i < 3; i++)
            pthread_create(&th[i], NULL, conc_thread, &args[i]);
        for (int i = 0; i < 3; i++) {
            pthread_join(th[i], NULL);
            CHECK_MSG(args[i].ok, "concurrent caller %d", i);
        }
    }

    /* alpha == 0: C = beta * C without touching A or B */
    {
        float C[4] = {1, 2, 3, 4};
        kiln__sgemm(1, false, false, 2, 2, 5, 0.0f, NULL, 5, NULL, 2, 2.0f, C, 2);
        CHECK(C[0] == 2.0f && C[3] == 8.0f);
    }

    /* K == 0: C = beta * C, with beta == 0 never reading C */
    {
        float C[6] = {NAN, NAN, NAN, NAN, NAN, NAN}, A[1] = {1}, B[1] = {1};
        kiln__sgemm(1, false, false, 2, 3, 0, 1.0f, A, 1, B, 3, 0.0f, C, 3);
        for (int i = 0; i < 6; i++)
            CHECK(C[i] == 0.0f);
        float D[4] = {1, 2, 3, 4};
        kiln__sgemm(2, false, false, 2, 2, 0, 1.0f, A, 1, B, 2, 0.5f, D, 2);
        CHECK(D[0] == 0.5f && D[3] == 2.0f);
    }
    printf("%d gemm cases compared, %d mismatched\n", n_cases, fails);

    if (argc < 2 || argv[1][0] != 'q') {
        bench(2, false, false, 256, 3136, 576);   /* ResNet-50 conv2_x 3x3 (im2col) */
        bench(2, false, false, 128, 768, 768);    /* BERT-base attention projection */
        bench(2, false, false, 128, 3072, 768);   /* BERT-base FFN up */
        bench(2, false, false, 64, 12544, 147);   /* ResNet-50 stem 7x7 */
        bench(2, false, false, 512, 49, 4608);    /* ResNet-50 conv5_x 3x3 */
        bench(2, false, true, 128, 768, 768);     /* Gemm with transB */
        bench(1, false, false, 256, 3136, 576);
    }
    return TEST_SUMMARY();
}
