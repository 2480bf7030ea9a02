/* Latency statistics in bounded memory, for kiln bench: count, sum, min and max are exact;
 * percentiles come from the first LAT_MAX_SAMPLES latencies, then from a uniform random sample of
 * LAT_MAX_SAMPLES of all of them (reservoir sampling, algorithm R), so they are exact up to
 * LAT_MAX_SAMPLES iterations and unbiased estimates beyond, whatever --iterations/--duration is. */
#include "cli.h"
#include <math.h>
#include <stdlib.h>

bool lat_add(lat_stats *l, double v)
{
    l->sum += v;
    l->min = l->n == 0 || v < l->min ? v : l->min;
    l->max = l->n == 0 || v > l->max ? v : l->max;
    l->n++;
    if (l->kept < LAT_MAX_SAMPLES) {
        if (l->kept == l->cap) {
            int64_t cap = l->cap ? 2 * l->cap : 1024;
            cap = cap < LAT_MAX_SAMPLES ? cap : LAT_MAX_SAMPLES;
            double *p = realloc(l->s, sizeof(double) * (size_t)cap);
            if (!p)
                return false;
            l->s = p;
            l->cap = cap;
        }
        l->s[l->kept++] = v;
        return true;
    }
    l->rng = l->rng ? l->rng : 0x9E3779B97F4A7C15ull;
    l->rng ^= l->rng << 13;
    l->rng ^= l->rng >> 7;
    l->rng ^= l->rng << 17;
    uint64_t j = l->rng % (uint64_t)l->n;   /* keep v with probability LAT_MAX_SAMPLES / n */
    if (j < (uint64_t)LAT_MAX_SAMPLES)
        l->s[j] = v;
    return true;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *s, int64_t n, double p)
{
    double r = p / 100.0 * (double)(n - 1);
    int64_t lo = (int64_t)floor(r), hi = (int64_t)ceil(r);
    return s[lo] + (s[hi] - s[lo]) * (r - (double)lo);
}

void lat_percentiles(lat_stats *l, double *p50, double *p90, double *p99)
{
    *p50 = *p90 = *p99 = 0;
    if (!l->kept)
        return;
    qsort(l->s, (size_t)l->kept, sizeof(double), cmp_d);
    *p50 = pct(l->s, l->kept, 50);
    *p90 = pct(l->s, l->kept, 90);
    *p99 = pct(l->s, l->kept, 99);
}

void lat_free(lat_stats *l)
{
    free(l->s);
    l->s = NULL;
    l->kept = l->cap = 0;
}
