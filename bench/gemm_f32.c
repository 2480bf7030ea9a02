/* FP32 GEMMs of BERT-base's encoder (batch 1, sequence 128) through kiln__sgemm_ex as a built engine
 * runs them: A the activations read in place, B pre-packed (kiln__sgemm_bpack), the bias (and GELU
 * for FFN up, the residual for the output projections) fused in the epilogue. The layers run in
 * model order over L encoder layers with distinct weights (L = 4: ~113 MB, more than the L3), so
 * the weights stream from memory as in the model while the activations stay in cache. Per GEMM
 * class the table gives the sum over one encoder layer of each call's best and median time over R
 * rounds, GFLOP/s from the best, and the model's total (x12 layers).
 * Meant for A/B comparisons of the GEMM driver: run two builds alternately and compare.
 *
 * With mode 1, as in the model, each GEMM's A is first rewritten by a parallel loop over its rows
 * (like the LayerNorm / GEMM before it, so half of it comes from the other core's cache) and C
 * rotates over 8 buffers (an arena, not one hot block).
 *
 *   build/bench_gemm_f32 [rounds] [threads] [layers] [mode]   (built by CMake, not run by ctest) */
#include "backend/cpu/gemm.h"
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
    int64_t K, N;
    int count;          /* per encoder layer */
    kiln_act_kind act;
    bool res;
} shape;

/* one encoder layer: Q, K, V (768->768 + bias), output projection (+ bias + residual), FFN up
 * (+ bias + GELU), FFN down (+ bias + residual) */
static const shape shapes[] = {
    {"768->768 (+bias)", 768, 768, 3, KILN_ACT_NONE, false},
    {"768->768 (+bias+res)", 768, 768, 1, KILN_ACT_NONE, true},
    {"768->3072 (+bias+GELU)", 768, 3072, 1, KILN_ACT_GELU, false},
    {"3072->768 (+bias+res)", 3072, 768, 1, KILN_ACT_NONE, true},
};
enum { NS = sizeof shapes / sizeof shapes[0], M = 128, MAXL = 12 };

typedef struct touch {
    float *dst;
    const float *src;
    int64_t ld;
} touch;

/* rows [b, e) of dst = src + 1e-7 (the parallel op that produced A) */
static void touch_rows(void *ctx, int64_t b, int64_t e)
{
    const touch *t = ctx;
    for (int64_t i = b * t->ld; i < e * t->ld; i++)
        t->dst[i] = t->src[i] + 1e-7f;
}

static float *rnd(int64_t n, unsigned long long *seed)
{
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, (size_t)n * sizeof(float)) != 0)
        exit(1);
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ULL + 1;
        p[i] = (float)(*seed >> 40) / (float)(1 << 24) - 0.5f;
    }
    return p;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 10, th = argc > 2 ? atoi(argv[2]) : 2;
    int nl = argc > 3 ? atoi(argv[3]) : 4, mode = argc > 4 ? atoi(argv[4]) : 0;
    rounds = rounds < 1 ? 1 : rounds;
    th = th < 1 ? 1 : th;
    nl = nl < 1 ? 1 : nl > MAXL ? MAXL : nl;
    unsigned long long seed = 1;
    kiln_pool *pool = kiln__pool_create(th);
    float *a768 = rnd(M * 768, &seed), *a3072 = rnd(M * 3072, &seed), *res = rnd(M * 768, &seed);
    float *a768s = rnd(M * 768, &seed), *a3072s = rnd(M * 3072, &seed), *cs[8];
    for (int i = 0; i < 8; i++)
        cs[i] = rnd(M * 3072, &seed);
    int ci = 0;
    static float *bp[MAXL][NS][3], *bias[NS];
    for (int s = 0; s < NS; s++) {
        bias[s] = rnd(shapes[s].N, &seed);
        float *w = rnd(shapes[s].K * shapes[s].N, &seed);
        for (int l = 0; l < nl; l++)
            for (int r = 0; r < shapes[s].count; r++) {
                int64_t nf = kiln__sgemm_bpack_floats(shapes[s].K, shapes[s].N);
                if (posix_memalign((void **)&bp[l][s][r], 64, (size_t)nf * sizeof(float)) != 0 ||
                    !kiln__sgemm_bpack(false, shapes[s].K, shapes[s].N, w, shapes[s].N, bp[l][s][r]))
                    return 1;
            }
        free(w);
    }
    /* times[s][round * nl * count + ...] */
    int per = nl * 3;
    double *times = calloc((size_t)(NS * (rounds + 1) * per), sizeof(double));
    if (!times)
        return 1;
    for (int it = 0; it <= rounds; it++)   /* round 0: warm-up, not counted */
        for (int l = 0; l < nl; l++)
            for (int s = 0; s < NS; s++)
                for (int r = 0; r < shapes[s].count; r++) {
                    const shape *sh = &shapes[s];
                    kiln_epi e = {.bias = bias[s], .res = sh->res ? res : NULL, .ldr = sh->N, .act = {sh->act, 0, 0}};
                    float *a = sh->K == 768 ? a768 : a3072, *c = cs[mode ? ci++ % 8 : 0];
                    if (mode) {
                        touch tc = {a, sh->K == 768 ? a768s : a3072s, sh->K};
                        kiln__parallel_for(pool, th, M, 1, touch_rows, &tc);
                    }
                    kiln_gemm g = {.M = M, .N = sh->N, .K = sh->K, .alpha = 1.0f, .A = a, .lda = sh->K,
                                   .bpack = bp[l][s][r], .C = c, .ldc = sh->N, .epi = &e};
                    double t0 = now();
                    kiln__sgemm_ex(pool, th, &g);
                    times[(s * (rounds + 1) + it) * per + l * 3 + r] = now() - t0;
                }
    printf("%-24s %5s %9s %9s %8s %10s\n", "GEMM M=128 (per layer)", "calls", "best ms", "p50 ms", "GF/s", "model ms");
    double tot = 0;
    for (int s = 0; s < NS; s++) {
        const shape *sh = &shapes[s];
        double best = 0, med = 0;
        for (int l = 0; l < nl; l++)
            for (int r = 0; r < sh->count; r++) {
                double v[256], b = 1e30;
                int n = 0;
                for (int it = 1; it <= rounds && n < 256; it++) {
                    v[n] = times[(s * (rounds + 1) + it) * per + l * 3 + r];
                    b = v[n] < b ? v[n] : b;
                    n++;
                }
                for (int i = 1; i < n; i++)   /* insertion sort for the median */
                    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
                        double t = v[j];
                        v[j] = v[j - 1];
                        v[j - 1] = t;
                    }
                best += b / nl;
                med += v[n / 2] / nl;
            }
        double fl = 2.0 * M * (double)sh->K * (double)sh->N * sh->count;
        tot += med * 12;
        printf("%-24s %5d %9.3f %9.3f %8.1f %10.2f\n", sh->name, sh->count, best * 1e3, med * 1e3, fl / best * 1e-9,
               med * 12e3);
    }
    printf("%-24s %5s %9s %9s %8s %10.2f   (%d thread(s), %d rounds, %d distinct layers, mode %d)\n",
           "all (p50 x 12)", "", "", "", "", tot * 1e3, th, rounds, nl, mode);
    for (int s = 0; s < NS; s++) {
        free(bias[s]);
        for (int l = 0; l < nl; l++)
            for (int r = 0; r < shapes[s].count; r++)
                free(bp[l][s][r]);
    }
    for (int i = 0; i < 8; i++)
        free(cs[i]);
    free(times), free(a768), free(a3072), free(a768s), free(a3072s), free(res);
    kiln__pool_free(pool);
    return 0;
}
