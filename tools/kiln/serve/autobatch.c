/* Batching derived from the engine: when the config gives no preferred batch sizes or no queue
 * delay, measure the latency of batches 1, 2, 4, ... max_batch_size on one execution context at
 * load time, prefer the smallest batch whose time per item is within 10% of the best measured
 * one (a larger batch would add latency for little gain), and bound the queue delay by half of
 * the batch-1 latency. The measurements and the reason are
 * kept in cfg.batching_info and shown by GET /v2/models/<m>/config. */
#include "serve.h"
#include <stdlib.h>
#include <string.h>

#define SLACK 1.1         /* the preferred batch: time per item at most 10% above the best */
#define DELAY_FRACTION 0.5
#define RUNS 5

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Fastest of RUNS runs (us) of one batch of b rows; 0 on failure. */
static double measure(sv_model *m, int64_t b, uint64_t *seed)
{
    sv_req *r = calloc(1, sizeof *r);
    if (!r)
        return 0;
    r->batch = b;
    for (int k = 0; k < m->cfg.n_inputs; k++) {
        const sv_io *x = &m->cfg.inputs[k];
        int64_t dims[KILN_MAX_DIMS];
        dims[0] = b;
        memcpy(dims + 1, x->dims, sizeof(int64_t) * (size_t)x->ndim);
        if (!sv_tensor_alloc(&r->in[k], x->dtype, x->ndim + 1, dims)) {
            sv_req_free(r);
            return 0;
        }
        sv_fill_random(&r->in[k], seed);
    }
    uint64_t t[RUNS];
    double med = 0;
    for (int i = -1; i < RUNS; i++) {   /* i = -1: warm-up (plans the shapes) */
        for (int o = 0; o < SV_MAX_IO; o++) {
            free(r->out[o].data);
            r->out[o].data = NULL;
        }
        uint64_t t0 = sv_now_ns();
        if (sv_run_batch(m, m->ctxs[0], &r, 1) != KILN_OK)
            goto done;
        if (i >= 0)
            t[i] = sv_now_ns() - t0;
    }
    qsort(t, RUNS, sizeof t[0], cmp_u64);
    med = (double)t[0] / 1000.0;
done:
    sv_req_free(r);
    return med;
}

static void fallback(sv_config *c, json_t *info, const char *why)
{
    if (!c->sizes_given) {
        c->n_preferred = 1;
        c->preferred[0] = c->max_batch_size;
    }
    if (!c->delay_given)
        c->max_queue_delay_us = 100;
    json_object_set_new(info, "source", json_string("default"));
    json_object_set_new(info, "reason", json_string(why));
}

void sv_autobatch(sv_model *m)
{
    sv_config *c = &m->cfg;
    json_t *info = json_object();
    c->batching_info = info;
    if (!c->dynamic_batching) {
        json_object_set_new(info, "source", json_string("off"));
        json_object_set_new(info, "reason", json_string(c->max_batch_size > 0 ? "config.pbtxt has no dynamic_batching"
                                                                               : "the model does not batch"));
        return;
    }
    if (c->sizes_given && c->delay_given) {
        json_object_set_new(info, "source", json_string("config"));
        json_object_set_new(info, "reason", json_string("preferred_batch_size and max_queue_delay_microseconds given"));
        return;
    }
    for (int k = 0; k < c->n_inputs; k++)
        for (int d = 0; d < c->inputs[k].ndim; d++)
            if (c->inputs[k].dims[d] < 0) {
                char why[256];
                snprintf(why, sizeof why, "input '%s' has a dynamic dimension: give dims in config.pbtxt to let kiln "
                         "measure the engine", c->inputs[k].name);
                fallback(c, info, why);
                return;
            }
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    json_t *lat = json_object(), *per = json_object();
    json_object_set_new(info, "latency_us", lat);
    json_object_set_new(info, "per_item_us", per);
    double lat1 = 0, per_item[64];
    int64_t sizes[64];
    int n = 0;
    for (int64_t b = 1; b <= c->max_batch_size && n < 64; b = b * 2 > c->max_batch_size && b < c->max_batch_size ? c->max_batch_size : b * 2) {
        double l = measure(m, b, &seed);
        if (l <= 0) {
            fallback(c, info, "the probe run failed at load time");
            memset(&m->metrics, 0, sizeof m->metrics);
            return;
        }
        char key[32];
        snprintf(key, sizeof key, "%lld", (long long)b);
        json_object_set_new(lat, key, json_real(l));
        json_object_set_new(per, key, json_real(l / (double)b));
        if (b == 1)
            lat1 = l;
        sizes[n] = b;
        per_item[n++] = l / (double)b;
        if (b == c->max_batch_size)
            break;
    }
    memset(&m->metrics, 0, sizeof m->metrics);   /* the probe is not traffic */
    if (n == 0) {
        fallback(c, info, "max_batch_size is 0: nothing to measure");
        return;
    }
    int lo = 0;
    for (int i = 1; i < n; i++)
        if (per_item[i] < per_item[lo])
            lo = i;
    int pick = 0;
    while (per_item[pick] > SLACK * per_item[lo])
        pick++;
    int best = (int)sizes[pick];
    char why[512];
    snprintf(why, sizeof why,
             "batch %d is the smallest whose time per item is within %.0f%% of the best measured (batch %lld: %.1f us per "
             "item)%s; queue delay = %.0f%% of the batch-1 latency (%.0f us)",
             best, (SLACK - 1) * 100, (long long)sizes[lo], per_item[lo],
             best == c->max_batch_size ? " (= max_batch_size)" : "", DELAY_FRACTION * 100, lat1);
    if (!c->sizes_given) {
        c->n_preferred = 1;
        c->preferred[0] = best;
    }
    if (!c->delay_given)
        c->max_queue_delay_us = (int64_t)(lat1 * DELAY_FRACTION);
    json_object_set_new(info, "source", json_string("measured"));
    json_object_set_new(info, "reason", json_string(why));
}
