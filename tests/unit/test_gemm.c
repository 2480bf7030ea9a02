/* kiln__sgemm against the double-accumulating reference: odd sizes, all transpose combos,
 * alpha/beta variants, padded leading dimensions, several thread counts, concurrent callers;
 * plus a GFLOP/s printout (skipped with the argument "q"). */
#include "test.h"
#include "test_pool.h"
#include "backend/kernel.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/gemm.h"
#include <time.h>
#include <pthread.h>
#include <string.h>
#include <stdlib.h>

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
    kiln__sgemm(test_pool(nthreads), nthreads, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
    kiln__sgemm(test_pool(nthreads), nthreads, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N); /* warm up */
    double best = 1e30, start = now_s();
    for (int i = 0; i < 1000 && (i < 5 || now_s() - start < 0.25); i++) {
        double t0 = now_s();
        kiln__sgemm(test_pool(nthreads), nthreads, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
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

/* Several application threads calling sgemm at once, each on its own two-thread pool. */
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
    kiln_pool *pool = kiln__pool_create(2);
    a->ok = pool != NULL;
    for (int rep = 0; rep < 4; rep++) {
        kiln__sgemm(pool, 2, false, false, a->M, a->N, a->K, 1.0f, A, a->K, B, a->N, 0.0f, C, a->N);
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
    kiln__pool_free(pool);
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * kiln__sgemm_ex: fused epilogue (bias per row / column, residual, activation) and a
 * caller-supplied B packer, against the reference GEMM followed by the epilogue in double
 * --------------------------------------------------------------------------------------- */

static double act_ref(const kiln_act *a, double x)
{
    switch (a->kind) {
    case KILN_ACT_RELU: return x > 0 ? x : 0;
    case KILN_ACT_CLIP: return x < a->alpha ? a->alpha : x > a->beta ? a->beta : x;
    case KILN_ACT_LEAKYRELU: return x >= 0 ? x : a->alpha * x;
    case KILN_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case KILN_ACT_HARDSIGMOID: { double v = a->alpha * x + a->beta; return v < 0 ? 0 : v > 1 ? 1 : v; }
    case KILN_ACT_HARDSWISH: { double v = x / 6.0 + 0.5; return x * (v < 0 ? 0 : v > 1 ? 1 : v); }
    case KILN_ACT_SILU: return x / (1.0 + exp(-x));
    case KILN_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case KILN_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case KILN_ACT_TANH: return tanh(x);
    case KILN_ACT_HARDSWISH_AFFINE: { double v = x / 6.0 + 0.5; return a->alpha * (x * (v < 0 ? 0 : v > 1 ? 1 : v)) + a->beta; }
    default: return x;
    }
}

typedef struct pk_ctx {
    const float *B;
    int64_t ldb;
    bool tb;
} pk_ctx;

/* a caller-supplied packer with the documented layout (reads op(B) element by element) */
static void test_packb(void *vctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr, float *dst)
{
    const pk_ctx *c = vctx;
    for (int64_t p = 0; p * nr < nc; p++)
        for (int64_t k = 0; k < kc; k++)
            for (int r = 0; r < nr; r++) {
                int64_t j = p * nr + r;
                float v = 0.0f;
                if (j < nc)
                    v = c->tb ? c->B[(j0 + j) * c->ldb + k0 + k] : c->B[(k0 + k) * c->ldb + j0 + j];
                dst[p * kc * nr + k * nr + r] = v;
            }
}

/* op(B) [K, N] (B transposed when tb) pre-packed over the whole K in the documented panel layout (bpack), NaN in
 * the padding columns (they must be ignored); free() it */
static float *prepack_b(const float *B, int64_t ldb, bool tb, int64_t N, int64_t K)
{
    int nr = kiln__sgemm_nr();
    int64_t np = (N + nr - 1) / nr;
    float *bp = aligned_alloc(64, (sizeof(float) * (size_t)(np * (K > 0 ? K : 1) * nr) + 63) / 64 * 64);
    for (int64_t p = 0; p < np; p++)
        for (int64_t k = 0; k < K; k++)
            for (int r = 0; r < nr; r++) {
                int64_t j = p * nr + r;
                bp[(p * K + k) * nr + r] = j < N ? (tb ? B[j * ldb + k] : B[k * ldb + j]) : NAN;
            }
    return bp;
}

/* kiln__sgemm_ex(g) with op(B) (pc) handed over as packer says: 0 in memory, 1 through test_packb, 2 pre-packed */
static void sgemm_packer(kiln_gemm *g, int packer, pk_ctx *pc, int nthreads)
{
    g->B = packer ? NULL : pc->B;
    g->ldb = pc->ldb;
    g->trans_b = pc->tb;
    g->packb = packer == 1 ? test_packb : NULL;
    g->packb_ctx = pc;
    float *bp = packer == 2 ? prepack_b(pc->B, pc->ldb, pc->tb, g->N, g->K) : NULL;
    g->bpack = bp;
    kiln__sgemm_ex(test_pool(nthreads), nthreads, g);
    free(bp);
}

static int n_epi_cases;

/* packer: 0 built-in packing, 1 a packing callback, 2 op(B) pre-packed (bpack); A's leading
 * dimension is its row length plus apad */
static int run_epi_case_lda(int nthreads, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                            int bias_kind, bool res, kiln_act act, int packer, int64_t apad, unsigned long long *seed)
{
    int64_t lda = (ta ? M : K) + apad, ldb = (tb ? K : N) + 2, ldc = N + 3, ldr = N + 5;
    float *A = rand_buf((size_t)((ta ? K : M) * lda), seed), *B = rand_buf((size_t)((tb ? N : K) * ldb), seed);
    float *C = rand_buf((size_t)(M * ldc), seed), *R = rand_buf((size_t)(M * ldc), seed);
    float *bias = rand_buf((size_t)(M > N ? M : N), seed), *res_m = rand_buf((size_t)(M * ldr), seed);
    for (int64_t i = 0; i < M * ldc; i++)
        R[i] = C[i] = beta == 0.0f ? NAN : C[i] * 2.0f;
    kiln__sgemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    kiln_epi e = {.bias = bias_kind ? bias : NULL, .row_bias = bias_kind == 1, .res = res ? res_m : NULL, .ldr = ldr,
                  .act = act};
    pk_ctx pc = {B, ldb, tb};
    kiln_gemm g = {.M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .trans_a = ta, .A = A, .lda = lda, .C = C,
                   .ldc = ldc, .epi = &e};
    sgemm_packer(&g, packer, &pc, nthreads);
    int ok = 1;
    for (int64_t i = 0; i < M && ok; i++)
        for (int64_t j = 0; j < ldc; j++) {
            float got = C[i * ldc + j];
            if (j >= N) {
                if (!(isnan(got) && isnan(R[i * ldc + j])) && got != R[i * ldc + j]) {
                    CHECK_MSG(0, "epi: pad clobbered at (%lld,%lld)", (long long)i, (long long)j);
                    ok = 0;
                    break;
                }
                continue;
            }
            double v = R[i * ldc + j];
            if (bias_kind)
                v += bias[bias_kind == 1 ? i : j];
            if (res)
                v += res_m[i * ldr + j];
            double want = act_ref(&act, v);
            double mag = 1.0;
            for (int64_t k = 0; k < K; k++)
                mag += fabs((double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]));
            double tol = 1e-6 * (double)(K + 8) * mag + 1e-5 * fabs(want);
            if (!(fabs((double)got - want) <= tol)) {
                CHECK_MSG(0, "epi M=%lld N=%lld K=%lld ta=%d tb=%d a=%g b=%g bias=%d res=%d act=%d packer=%d nt=%d "
                          "at (%lld,%lld): %g vs %g", (long long)M, (long long)N, (long long)K, ta, tb, alpha, beta,
                          bias_kind, res, act.kind, packer, nthreads, (long long)i, (long long)j, got, want);
                ok = 0;
                break;
            }
        }
    test_checks++;
    n_epi_cases++;
    free(A), free(B), free(C), free(R), free(bias), free(res_m);
    return ok;
}

static int run_epi_case(int nthreads, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                        int bias_kind, bool res, kiln_act act, int packer, unsigned long long *seed)
{
    return run_epi_case_lda(nthreads, ta, tb, M, N, K, alpha, beta, bias_kind, res, act, packer, 1, seed);
}

/* The residual at C's own addresses (epi.res == C, ldr == ldc, beta == 0: a FusedConv computed in place over its
 * residual): C = act(alpha op(A) op(B) + bias + C_before), every path reading an element of C before it stores over
 * it: the direct path (tiny, M == 1, N == 1), one K slice, several (K above 512), edge rows read in place (M not a
 * multiple of 8 with K above 256), the three B packers, one and two threads. */
static int run_res_in_place(int nthreads, int64_t M, int64_t N, int64_t K, float alpha, int bias_kind, kiln_act act,
                            int packer, unsigned long long *seed)
{
    int64_t lda = K + 1, ldb = N + 2, ldc = N + 3;
    float *A = rand_buf((size_t)(M * lda), seed), *B = rand_buf((size_t)(K * ldb), seed);
    float *C = rand_buf((size_t)(M * ldc), seed), *R = malloc(sizeof(float) * (size_t)(M * ldc));
    float *P = malloc(sizeof(float) * (size_t)(M * ldc));
    float *bias = rand_buf((size_t)(M > N ? M : N), seed);
    for (int64_t i = 0; i < M * ldc; i++)
        R[i] = P[i] = C[i];
    kiln__sgemm_ref(false, false, M, N, K, alpha, A, lda, B, ldb, 0.0f, R, ldc);
    kiln_epi e = {.bias = bias_kind ? bias : NULL, .row_bias = bias_kind == 1, .res = C, .ldr = ldc, .act = act};
    pk_ctx pc = {B, ldb, false};
    kiln_gemm g = {.M = M, .N = N, .K = K, .alpha = alpha, .beta = 0.0f, .A = A, .lda = lda, .C = C, .ldc = ldc,
                   .epi = &e};
    sgemm_packer(&g, packer, &pc, nthreads);
    int ok = 1;
    for (int64_t i = 0; i < M && ok; i++)
        for (int64_t j = 0; j < ldc; j++) {
            float got = C[i * ldc + j];
            if (j >= N) {
                if (got != P[i * ldc + j]) {
                    CHECK_MSG(0, "res in place: pad clobbered at (%lld,%lld)", (long long)i, (long long)j);
                    ok = 0;
                    break;
                }
                continue;
            }
            double v = (double)R[i * ldc + j] + P[i * ldc + j];
            if (bias_kind)
                v += bias[bias_kind == 1 ? i : j];
            double want = act_ref(&act, v);
            double mag = 1.0 + fabs((double)P[i * ldc + j]);
            for (int64_t k = 0; k < K; k++)
                mag += fabs((double)A[i * lda + k] * B[k * ldb + j]);
            double tol = 1e-6 * (double)(K + 8) * mag + 1e-5 * fabs(want);
            if (!(fabs((double)got - want) <= tol)) {
                CHECK_MSG(0, "res in place M=%lld N=%lld K=%lld a=%g bias=%d act=%d packer=%d nt=%d at (%lld,%lld): "
                          "%g vs %g", (long long)M, (long long)N, (long long)K, alpha, bias_kind, act.kind, packer,
                          nthreads, (long long)i, (long long)j, got, want);
                ok = 0;
                break;
            }
        }
    test_checks++;
    n_epi_cases++;
    free(A), free(B), free(C), free(R), free(P), free(bias);
    return ok;
}

static int test_res_in_place(unsigned long long *seed)
{
    static const int64_t shapes[][3] = {{1, 37, 5},   {23, 1, 40},    {3, 4, 5},     {1, 300, 700}, {64, 3136, 64},
                                        {256, 201, 64}, {37, 601, 1024}, {13, 97, 513}, {100, 50, 300}, {45, 99, 700},
                                        {8, 33, 257},  {131, 257, 512}, {29, 17, 1000}, {16, 4, 2048}};
    int fails = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        kiln_act act = {.kind = i % 3 == 0 ? KILN_ACT_RELU : i % 3 == 1 ? KILN_ACT_NONE : KILN_ACT_GELU};
        fails += !run_res_in_place(1 + (int)(i % 2), shapes[i][0], shapes[i][1], shapes[i][2], i % 4 == 3 ? 0.5f : 1.0f,
                                   (int)(i % 3), act, (int)(i % 3), seed);
        fails += !run_res_in_place(2 - (int)(i % 2), shapes[i][0], shapes[i][1], shapes[i][2], 1.0f, 1, act, 0, seed);
    }
    return fails;
}

/* Row-major A read in place: the 12-row tiles of pre-packed B (mixed with 8-row ones so that
 * every height is covered: 12a + 8b and a partial last tile), wide and narrow last column panels,
 * one K slice (K <= 256: row tiles outside the panels for the other packers) or several, and A
 * rows 2 KB apart (lda a multiple of 512 floats, read in place) or 4 KB apart (lda 1024, which the
 * GEMM first copies to a padded stride when N >= 512). */
static int test_tall_tiles(unsigned long long *seed)
{
    int fails = 0;
    static const int64_t ms[] = {9, 12, 13, 16, 20, 23, 24, 28, 36, 44, 100, 131};
    static const int64_t ns[] = {17, 18, 31, 32, 33, 50, 65, 97};
    static const int64_t ks[] = {1, 7, 64, 201, 300, 512, 1024};
    int i = 0;
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++, i++) {
            int64_t K = ks[(a + b) % (sizeof ks / sizeof ks[0])];
            kiln_act act = {.kind = i % 3 == 0 ? KILN_ACT_GELU : i % 3 == 1 ? KILN_ACT_RELU : KILN_ACT_NONE};
            int packer = (int)((a + b) % 3);
            fails += !run_epi_case_lda(1 + i % 2, false, false, ms[a], ns[b], K, i % 5 ? 1.0f : 0.5f,
                                       i % 4 ? 0.0f : 0.75f, i % 3, i % 2 == 0, act, packer, K % 512 ? 3 : 0, seed);
        }
    /* BERT-base's FFN down-projection (lda 3072) and a 1x1 conv's weights (lda 1024), pre-packed B */
    kiln_act none = {.kind = KILN_ACT_NONE}, relu = {.kind = KILN_ACT_RELU};
    fails += !run_epi_case_lda(2, false, false, 128, 768, 3072, 1.0f, 0.0f, 2, true, none, 2, 0, seed);
    fails += !run_epi_case_lda(1, false, false, 256, 196, 1024, 1.0f, 0.0f, 1, false, relu, 0, 0, seed);
    /* wide C: rows 2 KB apart read in place (1x1 512->128 @28), 4 KB apart copied to a padded stride */
    fails += !run_epi_case_lda(2, false, false, 128, 784, 512, 1.0f, 0.0f, 1, false, relu, 0, 0, seed);
    fails += !run_epi_case_lda(2, false, false, 37, 601, 1024, 1.0f, 0.5f, 1, true, relu, 1, 0, seed);
    /* pre-packed B with K <= 768 runs K in one slice (768: BERT's FFN up with GELU; 700 with beta), 769 in two */
    kiln_act gelu = {.kind = KILN_ACT_GELU};
    fails += !run_epi_case_lda(2, false, false, 131, 257, 768, 1.0f, 0.0f, 2, false, gelu, 2, 3, seed);
    fails += !run_epi_case_lda(1, false, false, 45, 99, 700, 0.5f, 0.75f, 2, true, none, 2, 5, seed);
    fails += !run_epi_case_lda(2, false, false, 37, 130, 769, 1.0f, 0.0f, 2, true, gelu, 2, 1, seed);
    /* slices longer than 256 (the tall tiles prefetch their own rows ahead, past the row's end near the slice's end):
     * odd heights, widths, K (a last partial 16-step chunk) and row strides, 1-3 threads */
    fails += !run_epi_case_lda(3, false, false, 121, 83, 451, 1.0f, 0.0f, 2, true, gelu, 2, 7, seed);
    fails += !run_epi_case_lda(1, false, false, 59, 45, 1283, 0.75f, 0.5f, 1, false, none, 2, 3, seed);
    fails += !run_epi_case_lda(2, false, false, 133, 99, 3077, 1.0f, 0.0f, 2, true, none, 2, 11, seed);
    return fails;
}

/* A caller's packer in a grid that the cost alone would split along M, with more panels of op(B) than a core's L2
 * holds and at least three panels a thread: split along N instead, each task packing its own columns (ResNet-50's
 * 3x3/2 conv at 28x28 through implicit im2col); a 5-column last panel, beta, bias, residual, Relu, 2 and 3 threads;
 * the same just under the size (0.9 MB: M-split, op(B) packed once and shared). */
static int test_packb_nsplit(unsigned long long *seed)
{
    int fails = 0;
    kiln_act relu = {.kind = KILN_ACT_RELU};
    fails += !run_epi_case(2, false, false, 256, 197, 1201, 1.0f, 0.5f, 1, true, relu, 1, seed);
    fails += !run_epi_case(2, false, false, 264, 200, 1300, 1.0f, 0.0f, 2, false, relu, 1, seed);
    fails += !run_epi_case(3, false, false, 250, 300, 1100, 1.0f, 0.0f, 1, true, relu, 1, seed);
    fails += !run_epi_case(2, false, false, 256, 197, 1000, 1.0f, 0.0f, 1, true, relu, 1, seed);
    return fails;
}

/* One K slice and a C of >= 256K elements (1x1 convs of few input channels over a large image:
 * ResNet-50's 64->256 @56): each row tile runs across all the panels of its block (rows_outer),
 * with A read in place or packed (transposed A: packed on every ISA), the built-in packer or a
 * caller's, odd heights and widths, beta, bias, residual and Relu, one and two threads. */
static int test_rows_outer(unsigned long long *seed)
{
    int fails = 0;
    kiln_act relu = {.kind = KILN_ACT_RELU}, none = {.kind = KILN_ACT_NONE};
    fails += !run_epi_case(1, false, false, 250, 1100, 61, 1.0f, 0.0f, 1, true, relu, 0, seed);
    fails += !run_epi_case(2, true, false, 131, 2003, 128, 1.0f, 0.75f, 1, true, relu, 1, seed);
    fails += !run_epi_case(2, false, false, 256, 1031, 64, 0.5f, 0.0f, 2, false, none, 1, seed);
    fails += !run_epi_case(1, true, true, 257, 1025, 3, 1.0f, 0.0f, 1, true, relu, 0, seed);
    return fails;
}

/* B read in place by the AVX-512 tiles (rows of N >= 512 columns, N % 16 == 0, M a multiple of 8: gemm.c b_direct_ok;
 * elsewhere the same calls take the packed path): grids split along N and along M, a last panel of 16 columns, K in
 * one slice or several, beta and alpha, row and column bias, a residual elsewhere or at C's own addresses, 1-4
 * threads; and the shapes next to them that keep packing (N = 520, M = 60). */
static int test_direct_b(unsigned long long *seed)
{
    int fails = 0;
    kiln_act relu = {.kind = KILN_ACT_RELU}, none = {.kind = KILN_ACT_NONE};
    fails += !run_epi_case(2, false, false, 64, 3136, 64, 1.0f, 0.0f, 1, true, relu, 0, seed);     /* N-split */
    fails += !run_epi_case(2, false, false, 512, 784, 128, 1.0f, 0.0f, 1, true, relu, 0, seed);    /* M-split */
    fails += !run_epi_case(1, false, false, 16, 528, 1100, 0.75f, 0.5f, 2, false, none, 0, seed);  /* 16 last, 3 K */
    fails += !run_epi_case(2, false, false, 24, 1040, 700, 1.0f, 0.0f, 1, true, relu, 0, seed);
    fails += !run_epi_case(4, false, false, 40, 2048, 33, -1.0f, 0.0f, 0, false, none, 0, seed);
    fails += !run_epi_case(3, false, false, 136, 1552, 257, 1.0f, 1.0f, 2, true, relu, 0, seed);
    fails += !run_epi_case(2, false, false, 8, 512, 5, 1.0f, 0.0f, 1, false, relu, 0, seed);
    fails += !run_epi_case(2, false, false, 64, 520, 64, 1.0f, 0.0f, 1, true, relu, 0, seed);      /* packed */
    fails += !run_epi_case(2, false, false, 60, 784, 64, 1.0f, 0.0f, 1, true, relu, 0, seed);      /* packed */
    fails += !run_res_in_place(2, 128, 784, 256, 1.0f, 1, relu, 0, seed);
    fails += !run_res_in_place(1, 256, 1552, 64, 1.0f, 2, none, 0, seed);
    return fails;
}

/* One row (M == 1) against pre-packed B (a classifier's last Gemm: the AVX-512 GEMV over the
 * panels): every K remainder of its 4-step loop, narrow / wide / partial last panels, A
 * transposed (a column with a stride), alpha / beta, row or column bias, residual, activations,
 * 1-3 threads; and the other packers for comparison. */
static int test_row_bpack(unsigned long long *seed)
{
    int fails = 0;
    static const int64_t ns[] = {1, 5, 16, 17, 31, 32, 33, 100, 1000};
    static const int64_t ks[] = {1, 2, 3, 4, 5, 7, 64, 301, 768, 2048};
    int i = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++, i++) {
            kiln_act act = {.kind = i % 4 == 0 ? KILN_ACT_GELU : i % 4 == 1 ? KILN_ACT_RELU : KILN_ACT_NONE};
            fails += !run_epi_case_lda(1 + i % 3, i % 5 == 1, false, 1, ns[a], ks[b], i % 6 ? 1.0f : 0.5f,
                                       i % 4 == 3 ? 0.75f : 0.0f, i % 3, i % 2 == 0, act, i % 7 == 6 ? i % 2 : 2,
                                       i % 5 == 1 ? 2 : 1, seed);
        }
    return fails;
}

/* Grids split along M (M large, N small) at 2-3 threads, where op(B) is packed once for all the
 * tasks (a packing callback, or K <= 512): odd N (partial last panel), B transposed or not, one
 * and several K slices, every epilogue; K > 512 with the built-in packer for comparison. */
static int test_shared_b(unsigned long long *seed)
{
    int fails = 0;
    static const int64_t ns[] = {1, 17, 33, 49, 100, 196};
    static const int64_t ks[] = {3, 64, 257, 512, 700};
    int i = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++, i++) {
            kiln_act act = {.kind = i % 3 == 0 ? KILN_ACT_RELU : KILN_ACT_NONE};
            int64_t M = 200 + 37 * (i % 4);
            fails += !run_epi_case(2 + i % 2, false, i % 3 == 1, M, ns[a], ks[b], 1.0f, i % 5 == 0 ? 0.5f : 0.0f,
                                   i % 3, i % 2 == 1, act, i % 2, seed);
        }
    return fails;
}

/* Partial last panels whose columns the tiles read side by side (A in place: 17 columns, and 1-4 columns through the
 * dot-product tile: N = 17, 49, 196), copied by panel_at once per call, panel slice and buffer, then reused by the
 * task's later row blocks: M-split grids over B packed once (K <= 512, a packing callback, pre-packed), several K
 * slices, several row blocks a task (M = 800: 3), partial last row tiles, bias, residual and Relu, 2 threads. */
static int test_panel_cols(unsigned long long *seed)
{
    int fails = 0;
    kiln_act relu = {.kind = KILN_ACT_RELU}, none = {.kind = KILN_ACT_NONE};
    fails += !run_epi_case(2, false, false, 37, 17, 3600, 1.0f, 0.0f, 1, true, relu, 1, seed);
    fails += !run_epi_case(2, false, false, 128, 49, 400, 1.0f, 0.5f, 2, false, none, 0, seed);
    fails += !run_epi_case(2, false, false, 1024, 196, 256, 1.0f, 0.0f, 1, true, relu, 0, seed);
    fails += !run_epi_case(2, false, false, 515, 49, 1100, 0.5f, 0.0f, 1, false, relu, 1, seed);
    fails += !run_epi_case(2, false, false, 512, 196, 512, 1.0f, 0.0f, 1, true, relu, 0, seed);
    fails += !run_epi_case(2, false, true, 203, 196, 2000, 1.0f, 0.0f, 2, true, relu, 2, seed);
    fails += !run_epi_case(2, false, false, 300, 196, 700, 1.0f, 0.0f, 1, false, relu, 2, seed);
    fails += !run_epi_case(2, false, false, 800, 196, 700, 1.0f, 0.25f, 1, true, relu, 0, seed);
    return fails;
}

/* The 49-column tile (AVX-512, A read in place: a block's last 32 + 17 columns as one tile, column 48 as dot products):
 * N = 49 (a 7x7 map), 81 and 113 (a full panel or two before it), 17 (no such tile) and 145; heights with edge rows
 * (M not a multiple of 8: those tiles run as the 32- and 17-column ones), K of 1, 15 (no full 16-step block), 17, one
 * slice and several (K above 512: later slices accumulate), every packer, A with a padded row stride and transposed
 * (packed: no such tile), B transposed, alpha / beta, bias per row or column, residual, activations, 1-3 threads; and
 * the residual in place over C. */
static int test_w49(unsigned long long *seed)
{
    int fails = 0;
    static const int64_t ms[] = {8, 13, 64, 203};
    static const int64_t ns[] = {49, 81, 113, 17, 145};
    static const int64_t ks[] = {1, 15, 17, 300, 1100};
    int i = 0;
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
            for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++, i++) {
                kiln_act act = {.kind = i % 3 == 0 ? KILN_ACT_RELU : i % 3 == 1 ? KILN_ACT_NONE : KILN_ACT_GELU};
                fails += !run_epi_case_lda(1 + i % 3, i % 11 == 5, i % 7 == 3, ms[a], ns[b], ks[c],
                                           i % 5 == 2 ? -0.5f : 1.0f, i % 4 == 1 ? 0.5f : 0.0f, i % 3, i % 2 == 0, act,
                                           i % 3, i % 2 ? 5 : 0, seed);
            }
    kiln_act relu = {.kind = KILN_ACT_RELU};
    fails += !run_res_in_place(2, 512, 49, 4608, 1.0f, 1, relu, 1, seed);
    fails += !run_res_in_place(2, 37, 81, 700, 1.0f, 2, relu, 0, seed);
    fails += !run_res_in_place(1, 2048, 49, 512, 1.0f, 1, relu, 2, seed);
    return fails;
}

/* Grids with several tasks along N (N >> M, 2-3 threads), where op(A) is packed once for all the
 * tasks where the micro-kernel reads packed A (AVX2, portable C; AVX-512: A transposed): M not a
 * multiple of any kernel's height (a partial last row panel), A transposed or not and with a
 * padded leading dimension, one K slice or several (K > 256), every packer, bias, residual and
 * activations; BERT-base's shapes (M = 128, N = 768 / 3072, pre-packed B) at 2 threads. */
static int test_shared_a(unsigned long long *seed)
{
    int fails = 0;
    static const int64_t ms[] = {5, 7, 13, 25, 37, 128};
    static const int64_t ks[] = {1, 9, 256, 300, 700};
    int i = 0;
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++, i++) {
            kiln_act act = {.kind = i % 3 == 0 ? KILN_ACT_GELU : i % 3 == 1 ? KILN_ACT_RELU : KILN_ACT_NONE};
            int64_t N = 500 + 97 * (i % 5);
            fails += !run_epi_case_lda(2 + i % 2, i % 4 == 1, i % 3 == 2, ms[a], N, ks[b], i % 5 ? 1.0f : -0.5f,
                                       i % 4 == 3 ? 0.5f : 0.0f, i % 3, i % 2 == 0, act, i % 3, i % 2 ? 3 : 0, seed);
        }
    kiln_act none = {.kind = KILN_ACT_NONE}, gelu = {.kind = KILN_ACT_GELU};
    fails += !run_epi_case_lda(2, false, false, 128, 768, 768, 1.0f, 0.0f, 2, true, none, 2, 0, seed);
    fails += !run_epi_case_lda(2, false, false, 128, 3072, 768, 1.0f, 0.0f, 2, false, gelu, 2, 0, seed);
    return fails;
}

/* N-split grids at 2-4 threads (one task a thread, each a contiguous run of panels): heights that are not a
 * multiple of any tile's (a partial last row tile), widths with a partial last panel, one K slice or several, every
 * packer, bias (per row or column), residual, activations. */
static int test_nsplit(unsigned long long *seed)
{
    int fails = 0;
    static const int64_t ms[] = {40, 128, 131, 203};
    static const int64_t ks[] = {64, 257, 520, 1100};
    int i = 0;
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++, i++) {
            kiln_act act = {.kind = i % 3 == 0 ? KILN_ACT_GELU : i % 3 == 1 ? KILN_ACT_RELU : KILN_ACT_NONE};
            int64_t N = 1000 + 61 * (i % 7);
            fails += !run_epi_case(2 + i % 3, false, i % 5 == 4, ms[a], N, ks[b], 1.0f, i % 4 == 3 ? 0.5f : 0.0f,
                                   i % 3, i % 2 == 0, act, i % 3, seed);
        }
    return fails;
}

/* A pre-packed over the whole K (kiln_gemm.apack, kiln__sgemm_apack: the AVX2 Winograd filters)
 * against packing A per call: bit-identical where the GEMM packs, odd M (partial last panel), one and several K slices,
 * row bias + Relu epilogue, 1-3 threads. Hosts whose GEMM takes no packed A: the entry refuses. */
static int test_apack(unsigned long long *seed)
{
    int fails = 0;
    /* every shape through the packed path (>= 65536 flops, M and N > 1: smaller ones the GEMM computes
     * unpacked, where apack takes the packed path and rounds differently) */
    static const int64_t shapes[][3] = {{2, 200, 300}, {7, 33, 160}, {13, 100, 257}, {64, 49, 576}, {200, 17, 300}, {37, 196, 513}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
        float *bias = malloc(sizeof(float) * (size_t)M), *C0 = malloc(sizeof(float) * (size_t)(M * N));
        float *C1 = malloc(sizeof(float) * (size_t)(M * N));
        int64_t nap = kiln__sgemm_apack_floats(M, K);
        float *ap = malloc(sizeof(float) * (size_t)(nap > 0 ? nap : 1));
        for (int64_t i = 0; i < M * K; i++)
            A[i] = (float)(test_rng(seed) % 2001) / 1000.0f - 1.0f;
        for (int64_t i = 0; i < K * N; i++)
            B[i] = (float)(test_rng(seed) % 2001) / 1000.0f - 1.0f;
        for (int64_t i = 0; i < M; i++)
            bias[i] = (float)(test_rng(seed) % 201) / 100.0f - 1.0f;
        bool packed = kiln__sgemm_apack(M, K, A, K, ap);
        CHECK(packed == (kiln__sgemm_apack_mr() > 0) && (nap > 0) == packed);
        kiln_epi e = {.bias = bias, .row_bias = true, .act = {.kind = KILN_ACT_RELU}};
        for (int th = 1; th <= 3; th++) {
            kiln_gemm g = {.M = M, .N = N, .K = K, .alpha = 1.0f, .A = A, .lda = K, .B = B, .ldb = N, .C = C0,
                           .ldc = N, .epi = &e};
            kiln__sgemm_ex(test_pool(th), th, &g);
            g.C = C1;
            g.apack = packed ? ap : NULL;
            kiln__sgemm_ex(test_pool(th), th, &g);
            bool same = !memcmp(C0, C1, sizeof(float) * (size_t)(M * N));
            CHECK_MSG(same, "apack %lld x %lld x %lld, %d threads: differs from packing A per call", (long long)M,
                      (long long)N, (long long)K, th);
            fails += !same;
        }
        free(A), free(B), free(bias), free(C0), free(C1), free(ap);
    }
    return fails;
}

static int test_epilogues(unsigned long long *seed)
{
    int fails = 0;
    static const int64_t dims[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 49, 64, 65, 100, 130, 197, 300};
    const int nd = (int)(sizeof dims / sizeof dims[0]);
    for (int i = 0; i < 500; i++) {
        int64_t M = dims[test_rng(seed) % (unsigned)nd], N = dims[test_rng(seed) % (unsigned)nd];
        int64_t K = dims[test_rng(seed) % (unsigned)nd];
        if (i % 50 == 0)
            K = 0;
        bool ta = (test_rng(seed) % 5) == 0, tb = (test_rng(seed) % 3) == 0;
        float alpha = i % 7 == 0 ? 0.5f : 1.0f, beta = i % 5 == 0 ? 0.75f : 0.0f;
        kiln_act act = {.kind = (kiln_act_kind)(i % 11)};
        act.alpha = act.kind == KILN_ACT_CLIP ? -0.5f : act.kind == KILN_ACT_LEAKYRELU ? 0.1f : 0.2f;
        act.beta = act.kind == KILN_ACT_CLIP ? 0.75f : 0.5f;
        int bias_kind = (int)(test_rng(seed) % 3);
        bool res = (test_rng(seed) % 2) == 0;
        int packer = (int)(test_rng(seed) % 6);
        packer = packer == 1 ? 1 : packer == 2 ? 2 : 0;
        fails += !run_epi_case(1 + i % 3, ta, tb, M, N, K, alpha, beta, bias_kind, res, act, packer, seed);
    }
    /* shapes of the networks: 17-column edge panels, thread grids along M and N, deep K */
    static const int64_t net[][3] = {{512, 49, 4608}, {128, 3072, 768}, {256, 196, 1024}, {24, 1600, 864},
                                     {1000, 1, 2048}, {1, 1000, 512}, {96, 49, 300}};
    for (size_t i = 0; i < sizeof net / sizeof net[0]; i++) {
        kiln_act act = {.kind = i % 2 ? KILN_ACT_GELU : KILN_ACT_RELU};
        fails += !run_epi_case(2, false, false, net[i][0], net[i][1], net[i][2], 1.0f, 0.0f, 1 + (int)(i % 2), i % 3 != 0,
                               act, i == 3 ? 1 : i == 4 ? 2 : 0, seed);
    }
    return fails;
}

/* Vectorized activations (and the bias / residual row path) against the scalar ones: each ISA
 * the host has (AVX-512, AVX2 + FMA, scalar), through kiln__epi_apply_f32 (a row bias, a column
 * bias, a residual) and kiln__act_apply_f32. */
static void test_act_accuracy(void)
{
    enum { NV = 4096 + 13 };
    static float x[NV], y[NV], r[NV], bc[NV];
    unsigned long long s = 7;
    for (int i = 0; i < NV; i++) {
        double t = (double)i / NV;
        x[i] = (float)(i % 3 == 0 ? (t - 0.5) * 40.0 : i % 3 == 1 ? (t - 0.5) * 6.0 : test_randf(&s) * 1e-3);
        r[i] = test_randf(&s);
        bc[i] = test_randf(&s) * 0.5f;
    }
    x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = 0.0f, x[4] = -0.0f, x[5] = 1e-30f, x[6] = -88.0f,
    x[7] = 90.0f, x[8] = -104.0f, x[9] = 1.0f, x[10] = -1.0f, x[11] = 0.625f, x[12] = 4.0f;
    /* odd lengths and offsets: the masked tails */
    static const int lens[] = {NV, NV - 6, 7, 1};
    for (int cap = 2; cap >= 0; cap--) {
        kiln__epi_set_isa_cap(cap);
        for (int kind = 0; kind <= 10; kind++) {
            kiln_act a = {.kind = (kiln_act_kind)kind, .alpha = kind == KILN_ACT_CLIP ? -1.0f : 0.2f,
                          .beta = kind == KILN_ACT_CLIP ? 2.0f : 0.5f};
            for (int mode = 0; mode < 5; mode++) {   /* act only, +residual, +row bias, +column bias, act_apply */
                if (kind == 0 && (mode == 0 || mode == 4))
                    continue;
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                    int n = lens[li], off = li == 1 ? 3 : 0;
                    memcpy(y, x, sizeof y);
                    kiln_epi e = {.res = mode == 1 ? r : NULL, .ldr = NV, .act = a,
                                  .bias = mode == 2 ? bc + 5 : mode == 3 ? bc : NULL, .row_bias = mode == 2};
                    if (mode == 4)
                        kiln__act_apply_f32(&a, y + off, n, test_pool(2), 2);
                    else
                        kiln__epi_apply_f32(&e, y + off, NV, 1, n, 0, off);
                    for (int i = 0; i < NV; i++) {
                        bool in_range = i >= off && i < off + n;
                        float in = x[i];
                        if (in_range && mode == 1)
                            in += r[i];
                        else if (in_range && mode == 2)
                            in += bc[5];
                        else if (in_range && mode == 3)
                            in += bc[i];
                        float want = in_range ? kiln__act_scalar(&a, in) : x[i];
                        bool ok = (isnan(want) && isnan(y[i])) || y[i] == want ||
                                  (in_range && fabs((double)y[i] - (double)want) <= 4e-7 * fabs((double)want) + 2e-7);
                        if (!ok) {
                            CHECK_MSG(0, "isa cap %d, mode %d, n %d: act %s(%.9g) [%d] = %.9g, scalar %.9g", cap, mode,
                                      n, a.kind ? kiln__act_name(a.kind) : "none", in, i, y[i], want);
                            goto next_kind;
                        }
                    }
                }
            }
        next_kind:;
        }
    }
    kiln__epi_set_isa_cap(2);
    test_checks++;
}

/* ---------------------------------------------------------------------------------------
 * FusedMatMul / FusedGemm kernels (float32 fast paths) against loops in double
 * --------------------------------------------------------------------------------------- */

static kiln_status run_fused_fn(kiln_kernel_fn fn, kiln_op op, const char *type, kiln_attr *attrs, int na, int n_in,
                                const kiln_tensor *const *in, kiln_tensor *out, int nthreads)
{
    kiln_node node;
    memset(&node, 0, sizeof node);
    node.name = (char *)"test";
    node.op_type = (char *)type;
    node.domain = (char *)"kiln";
    node.op = op;
    node.opset = 1;
    node.n_attr = na;
    node.attrs = attrs;
    kiln_tensor *outp[1] = {out};
    kiln_kctx ctx = {.node = &node, .n_in = n_in, .in = in, .n_out = 1, .out = outp, .pool = test_pool(nthreads), .nthreads = nthreads};
    return fn(&ctx);
}

static kiln_status run_fused(kiln_op op, const char *type, kiln_attr *attrs, int na, int n_in,
                             const kiln_tensor *const *in, kiln_tensor *out, int nthreads)
{
    return run_fused_fn(kiln__ref_kernel(op), op, type, attrs, na, n_in, in, out, nthreads);
}

static kiln_tensor tens(int ndim, const int64_t *dims, float *data)
{
    kiln_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = KILN_DT_FLOAT32;
    t.ndim = ndim;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)ndim);
    t.data = data;
    t.nbytes = (size_t)kiln_tensor_numel(&t) * sizeof(float);
    return t;
}

static void test_fused_kernels(unsigned long long *seed)
{
    static const char *const acts[] = {NULL, "Relu", "Gelu", "Tanh", "Sigmoid", "HardSwish", "SiLU",
                                       "HardSwishAffine"};
    static const kiln_act_kind kinds[] = {KILN_ACT_NONE, KILN_ACT_RELU, KILN_ACT_GELU, KILN_ACT_TANH,
                                          KILN_ACT_SIGMOID, KILN_ACT_HARDSWISH, KILN_ACT_SILU,
                                          KILN_ACT_HARDSWISH_AFFINE};
    for (int it = 0; it < 60; it++) {
        bool gemm = it % 3 == 2;
        int64_t B0 = gemm ? 1 : 1 + (int64_t)(test_rng(seed) % 3), M = 1 + (int64_t)(test_rng(seed) % 70);
        int64_t N = 1 + (int64_t)(test_rng(seed) % 90), K = 1 + (int64_t)(test_rng(seed) % 80);
        bool ta = gemm && test_rng(seed) % 2, tb = gemm && test_rng(seed) % 2, has_bias = test_rng(seed) % 3 != 0;
        bool has_res = !gemm && test_rng(seed) % 2;
        int ai = it % 8;
        float alpha = gemm && it % 5 == 0 ? 0.5f : 1.0f;
        float *A = rand_buf((size_t)(B0 * M * K), seed), *Bm = rand_buf((size_t)(K * N), seed);
        float *bias = rand_buf((size_t)N, seed), *R = rand_buf((size_t)(B0 * M * N), seed);
        int64_t ad[3] = {B0, M, K}, bd[2] = {K, N}, nd[1] = {N}, rd[3] = {B0, M, N};
        if (ta)
            ad[1] = K, ad[2] = M;
        if (tb)
            bd[0] = N, bd[1] = K;
        kiln_tensor At = gemm ? tens(2, ad + 1, A) : tens(3, ad, A), Bt = tens(2, bd, Bm), bt = tens(1, nd, bias),
                    Rt = tens(3, rd, R);
        const kiln_tensor *in[4] = {&At, &Bt, has_bias ? &bt : NULL, has_res ? &Rt : NULL};
        kiln_attr at[6];
        memset(at, 0, sizeof at);
        int na = 0;
        if (ai) {
            at[na].name = (char *)"activation";
            at[na].type = KILN_ATTR_STRING;
            at[na].s = (char *)acts[ai];
            at[na].s_len = strlen(acts[ai]);
            na++;
        }
        if (kinds[ai] == KILN_ACT_HARDSWISH_AFFINE) {   /* 0.75 * HardSwish(x) - 0.25 */
            at[na].name = (char *)"activation_alpha", at[na].type = KILN_ATTR_FLOAT, at[na].f = 0.75f, na++;
            at[na].name = (char *)"activation_beta", at[na].type = KILN_ATTR_FLOAT, at[na].f = -0.25f, na++;
        }
        if (gemm) {
            at[na].name = (char *)"transA", at[na].type = KILN_ATTR_INT, at[na].i = ta, na++;
            at[na].name = (char *)"transB", at[na].type = KILN_ATTR_INT, at[na].i = tb, na++;
            at[na].name = (char *)"alpha", at[na].type = KILN_ATTR_FLOAT, at[na].f = alpha, na++;
        }
        kiln_tensor out;
        memset(&out, 0, sizeof out);
        kiln_status st = gemm ? run_fused(KILN_OP_FusedGemm, "FusedGemm", at, na, has_bias ? 3 : 2, in, &out, 1 + it % 3)
                              : run_fused(KILN_OP_FusedMatMul, "FusedMatMul", at, na, 4, in, &out, 1 + it % 3);
        CHECK_MSG(st == KILN_OK, "fused kernel failed: %s", kiln_last_error());
        kiln_act act = {.kind = kinds[ai]};
        if (act.kind == KILN_ACT_HARDSWISH_AFFINE)
            act.alpha = 0.75f, act.beta = -0.25f;
        for (int64_t b = 0; st == KILN_OK && b < B0; b++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double acc = 0, mag = 1;
                    for (int64_t k = 0; k < K; k++) {
                        double x = ta ? A[k * M + i] : A[(b * M + i) * K + k], y = tb ? Bm[j * K + k] : Bm[k * N + j];
                        acc += x * y;
                        mag += fabs(x * y);
                    }
                    acc *= alpha;
                    if (has_bias)
                        acc += bias[j];
                    if (has_res)
                        acc += R[(b * M + i) * N + j];
                    double want = act_ref(&act, acc), got = ((float *)out.data)[(b * M + i) * N + j];
                    if (!(fabs(got - want) <= 1e-5 * mag + 1e-5 * fabs(want))) {
                        CHECK_MSG(0, "%s B=%lld M=%lld N=%lld K=%lld act=%s bias=%d res=%d: (%lld,%lld,%lld) %g vs %g",
                                  gemm ? "FusedGemm" : "FusedMatMul", (long long)B0, (long long)M, (long long)N,
                                  (long long)K, ai ? acts[ai] : "none", has_bias, has_res, (long long)b, (long long)i,
                                  (long long)j, got, want);
                        b = B0, i = M;
                        break;
                    }
                }
        test_checks++;
        kiln__tensor_release(&out);
        free(A), free(Bm), free(bias), free(R);
    }
}

/* Attention = Softmax(Q KT * scale + mask) V against loops in double: odd sizes, an additive mask
 * broadcast over the batch (or none), 1-208 keys; the fastest kernel the host runs (x86/attn_avx512.c: the
 * vectorized row softmax) and the scalar reference (cpu/ref/k_attention.c). */
static void test_attention(unsigned long long *seed)
{
    for (int it = 0; it < 64; it++) {
        bool scalar = it % 2;
        int64_t B0 = 1 + (int64_t)(test_rng(seed) % 3), S = 1 + (int64_t)(test_rng(seed) % 40);
        int64_t Sk = 1 + (int64_t)(test_rng(seed) % 70), D = 1 + (int64_t)(test_rng(seed) % 33);
        if (it % 4 >= 2)   /* longer rows: up to 128 keys the AVX-512 row softmax holds a row in registers, beyond loops */
            Sk = it % 8 >= 6 ? 129 + (int64_t)(test_rng(seed) % 80) : 71 + (int64_t)(test_rng(seed) % 58);
        int64_t Dv = 1 + (int64_t)(test_rng(seed) % 29);
        bool has_mask = it % 3 != 0;
        float scale = 0.125f + (float)(it % 4);
        float *Q = rand_buf((size_t)(B0 * S * D), seed), *KT = rand_buf((size_t)(B0 * D * Sk), seed);
        float *V = rand_buf((size_t)(B0 * Sk * Dv), seed), *Mk = rand_buf((size_t)(S * Sk), seed);
        int64_t qd[3] = {B0, S, D}, kd[3] = {B0, D, Sk}, vd[3] = {B0, Sk, Dv}, md[2] = {S, Sk};
        kiln_tensor Qt = tens(3, qd, Q), Kt = tens(3, kd, KT), Vt = tens(3, vd, V), Mt = tens(2, md, Mk);
        const kiln_tensor *in[4] = {&Qt, &Kt, &Vt, has_mask ? &Mt : NULL};
        kiln_attr at[1];
        memset(at, 0, sizeof at);
        at[0].name = (char *)"scale", at[0].type = KILN_ATTR_FLOAT, at[0].f = scale;
        kiln_tensor out;
        memset(&out, 0, sizeof out);
        kiln_kernel_fn fn = scalar ? kiln__cpu_ref_kernel(KILN_OP_Attention) : kiln__ref_kernel(KILN_OP_Attention);
        kiln_status st = run_fused_fn(fn, KILN_OP_Attention, "Attention", at, 1, has_mask ? 4 : 3, in, &out, 1 + it % 3);
        CHECK_MSG(st == KILN_OK, "Attention failed: %s", kiln_last_error());
        double *p = malloc(sizeof(double) * (size_t)Sk);
        for (int64_t b = 0; st == KILN_OK && b < B0; b++)
            for (int64_t i = 0; i < S; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t k = 0; k < Sk; k++) {
                    double acc = 0;
                    for (int64_t d = 0; d < D; d++)
                        acc += (double)Q[(b * S + i) * D + d] * KT[(b * D + d) * Sk + k];
                    p[k] = acc * scale + (has_mask ? Mk[i * Sk + k] : 0.0);
                    mx = p[k] > mx ? p[k] : mx;
                }
                for (int64_t k = 0; k < Sk; k++)
                    sum += p[k] = exp(p[k] - mx);
                for (int64_t j = 0; j < Dv; j++) {
                    double want = 0;
                    for (int64_t k = 0; k < Sk; k++)
                        want += p[k] / sum * V[(b * Sk + k) * Dv + j];
                    double got = ((float *)out.data)[(b * S + i) * Dv + j];
                    if (!(fabs(got - want) <= 1e-5 + 1e-4 * fabs(want))) {
                        CHECK_MSG(0, "Attention (%s) B=%lld S=%lld Sk=%lld D=%lld Dv=%lld mask=%d: (%lld,%lld,%lld) %g vs %g",
                                  scalar ? "scalar reference" : "fastest", (long long)B0, (long long)S, (long long)Sk,
                                  (long long)D, (long long)Dv, has_mask, (long long)b, (long long)i, (long long)j, got,
                                  want);
                        b = B0, i = S;
                        break;
                    }
                }
            }
        test_checks++;
        free(p);
        kiln__tensor_release(&out);
        free(Q), free(KT), free(V), free(Mk);
    }
    const kiln_kernel_isa_reg *f = kiln__cpu_fast_kernel(KILN_OP_Attention);
    printf("Attention: %s, and the scalar reference\n", f ? f->name : "reference only");
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
        kiln__sgemm(NULL, 1, false, false, 2, 2, 5, 0.0f, NULL, 5, NULL, 2, 2.0f, C, 2);
        CHECK(C[0] == 2.0f && C[3] == 8.0f);
    }

    /* K == 0: C = beta * C, with beta == 0 never reading C */
    {
        float C[6] = {NAN, NAN, NAN, NAN, NAN, NAN}, A[1] = {1}, B[1] = {1};
        kiln__sgemm(NULL, 1, false, false, 2, 3, 0, 1.0f, A, 1, B, 3, 0.0f, C, 3);
        for (int i = 0; i < 6; i++)
            CHECK(C[i] == 0.0f);
        float D[4] = {1, 2, 3, 4};
        kiln__sgemm(test_pool(2), 2, false, false, 2, 2, 0, 1.0f, A, 1, B, 2, 0.5f, D, 2);
        CHECK(D[0] == 0.5f && D[3] == 2.0f);
    }
    fails += test_epilogues(&seed);
    fails += test_tall_tiles(&seed);
    fails += test_res_in_place(&seed);
    fails += test_row_bpack(&seed);
    fails += test_rows_outer(&seed);
    fails += test_direct_b(&seed);
    fails += test_shared_b(&seed);
    fails += test_panel_cols(&seed);
    fails += test_w49(&seed);
    fails += test_packb_nsplit(&seed);
    fails += test_shared_a(&seed);
    fails += test_nsplit(&seed);
    fails += test_apack(&seed);
    test_act_accuracy();
    test_fused_kernels(&seed);
    test_attention(&seed);
    printf("%d gemm cases compared, %d with epilogues, %d mismatched\n", n_cases, n_epi_cases, fails);

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
