/* kiln bench's latency statistics (tools/kiln/latency.c) keep bounded memory for any number of
 * iterations: exact count/mean/min/max, exact percentiles up to LAT_MAX_SAMPLES samples, unbiased
 * estimates from a uniform reservoir beyond. */
#include "cli.h"
#include "../unit/test.h"

int main(void)
{
    lat_stats l = {0};
    for (int i = 1; i <= 1001; i++)   /* few samples: exact percentiles */
        CHECK(lat_add(&l, (double)((i * 7919) % 1001 + 1)));
    double p50, p90, p99;
    lat_percentiles(&l, &p50, &p90, &p99);
    CHECK(p50 == 501 && p90 == 901 && p99 == 991 && l.min == 1 && l.max == 1001 && l.n == 1001);
    lat_free(&l);

    /* 3.5 x LAT_MAX_SAMPLES samples of a linear ramp in a scrambled order: memory stays at the cap */
    const int64_t n = LAT_MAX_SAMPLES * 7 / 2;
    lat_stats big = {0};
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = (double)((i * 2654435761u) % (uint64_t)n);
        sum += v;
        CHECK(lat_add(&big, v));
    }
    CHECK(big.n == n && big.kept == LAT_MAX_SAMPLES && big.cap == LAT_MAX_SAMPLES);
    CHECK(big.sum == sum && big.min == 0 && big.max == (double)(n - 1));
    lat_percentiles(&big, &p50, &p90, &p99);
    CHECK_CLOSE(p50 / (double)n, 0.50, 0.005);
    CHECK_CLOSE(p90 / (double)n, 0.90, 0.005);
    CHECK_CLOSE(p99 / (double)n, 0.99, 0.005);
    lat_free(&big);
    return TEST_SUMMARY();
}
