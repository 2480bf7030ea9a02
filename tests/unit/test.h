/* Minimal unit-test helpers: CHECK records a failure and continues; TEST_MAIN prints a summary. */
#ifndef KILN_TEST_H
#define KILN_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

#ifdef KILN_TEST_SHARED_COUNTERS
extern int test_failures, test_checks;   /* a test of several files defines them once (tests/gpu/gpu_harness.c) */
#else
static int test_failures, test_checks;
#endif
#define CHECK(cond) do { test_checks++; if (!(cond)) { test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { test_checks++; if (!(cond)) { test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_CLOSE(a, b, tol) CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g", (double)(a), (double)(b))
#define TEST_SUMMARY() (printf("%d checks, %d failed\n", test_checks, test_failures), test_failures ? 1 : 0)

/* deterministic PRNG for tests */
static inline unsigned long long test_rng(unsigned long long *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s;
}
static inline float test_randf(unsigned long long *s) /* [-1, 1) */
{
    return (float)((test_rng(s) >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
#endif
