/* Whether two threads of this machine run on separate cores right now (a host check for the CPU benchmarks).
 *
 * A fixed in-register FMA loop (8 independent chains: throughput-bound, no memory) runs on the first two CPUs
 * of the process's affinity mask at the same time, then on each of them alone; prints
 *
 *     RATIO PAIR_MS ALONE0_MS ALONE1_MS
 *
 * RATIO = the pair's time / the faster lone run's (best of R each). ~1.0: the two CPUs compute independently at
 * the same speed; ~2: they share one core (a VM's two vCPUs scheduled on one physical core by the host, or SMT
 * siblings), so any 2-thread benchmark then runs at about one core's speed; in between: one CPU is slower than
 * the other (e.g. its SMT sibling busy with another tenant's work), which a 2-thread run waits for. The
 * absolute times show a slowdown of both CPUs alike (the ratio does not). On the 2-vCPU Zen 4 VM of bench/notes
 * (session 16) the ratio went from 1.0 to 2.0 for seconds at a time, and ResNet-50's `kiln bench --threads 2`
 * p50 from ~40 to 66-69 ms with it, ONNX Runtime's alike. Prints "1.00 0 0 0" when fewer than 2 CPUs are allowed.
 *
 *   build/host_probe [iterations (default 1000000, ~2-4 ms)] [rounds (default 3)]   (bench/cpu_vs_ort.sh runs it) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PROBE_X86 1
#else
#define PROBE_X86 0
#endif

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

#if PROBE_X86
/* 8 chains of 256-bit FMAs: 2 FMA units x 4 cycles of latency are kept busy on Zen 4 and recent Intel cores */
__attribute__((target("avx2,fma"))) static float fma_loop_avx2(long n)
{
    __m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(1.001f), a2 = _mm256_set1_ps(1.002f),
           a3 = _mm256_set1_ps(1.003f), a4 = _mm256_set1_ps(1.004f), a5 = _mm256_set1_ps(1.005f),
           a6 = _mm256_set1_ps(1.006f), a7 = _mm256_set1_ps(1.007f);
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (long i = 0; i < n; i++) {
        a0 = _mm256_fmadd_ps(a0, b, c);
        a1 = _mm256_fmadd_ps(a1, b, c);
        a2 = _mm256_fmadd_ps(a2, b, c);
        a3 = _mm256_fmadd_ps(a3, b, c);
        a4 = _mm256_fmadd_ps(a4, b, c);
        a5 = _mm256_fmadd_ps(a5, b, c);
        a6 = _mm256_fmadd_ps(a6, b, c);
        a7 = _mm256_fmadd_ps(a7, b, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}
#endif

/* the same without FMA: 8 independent multiply-add chains of doubles */
static float mad_loop(long n)
{
    double a[8] = {1.0, 1.001, 1.002, 1.003, 1.004, 1.005, 1.006, 1.007};
    for (long i = 0; i < n; i++)
        for (int j = 0; j < 8; j++)
            a[j] = a[j] * 0.999999 + 1e-7;
    return (float)(a[0] + a[7]);
}

static long iters;
static int cpus[2];
static pthread_barrier_t bar;
static double took[2];
static volatile float sink, pair_sink[2];   /* results kept so the loops are not optimized away */

static float work(long n)
{
#if PROBE_X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return fma_loop_avx2(n);
#endif
    return mad_loop(n);
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *pair_thread(void *arg)
{
    int id = (int)(long)arg;
    pin(cpus[id]);
    pthread_barrier_wait(&bar);
    double t0 = now_ms();
    pair_sink[id] += work(iters);   /* each thread its own slot: no shared write */
    took[id] = now_ms() - t0;
    return NULL;
}

int main(int argc, char **argv)
{
    iters = argc > 1 ? atol(argv[1]) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (iters < 1 || rounds < 1) {
        fprintf(stderr, "usage: host_probe [iterations > 0] [rounds > 0]\n");
        return 2;
    }
    cpu_set_t mask;
    int n = 0;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0)
        for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
            if (CPU_ISSET(c, &mask))
                cpus[n++] = c;
    if (n < 2) {
        printf("1.00 0 0 0\n");
        return 0;
    }
    sink += work(iters / 4);   /* warm up (clock ramp, first use of the vector units) */
    double pair = 1e30, alone[2] = {1e30, 1e30};
    pthread_barrier_init(&bar, NULL, 2);
    for (int r = 0; r < rounds; r++) {
        pthread_t t[2];
        for (long i = 0; i < 2; i++)
            if (pthread_create(&t[i], NULL, pair_thread, (void *)i) != 0) {
                fprintf(stderr, "host_probe: cannot start a thread\n");
                return 1;
            }
        pthread_join(t[0], NULL);
        pthread_join(t[1], NULL);
        double m = took[0] > took[1] ? took[0] : took[1];
        pair = m < pair ? m : pair;
    }
    for (int c = 0; c < 2; c++) {
        pin(cpus[c]);
        for (int r = 0; r < rounds; r++) {
            double t0 = now_ms();
            sink += work(iters);
            double d = now_ms() - t0;
            alone[c] = d < alone[c] ? d : alone[c];
        }
    }
    double best = alone[0] < alone[1] ? alone[0] : alone[1];
    printf("%.2f %.3f %.3f %.3f\n", pair / best, pair, alone[0], alone[1]);
    return 0;
}
