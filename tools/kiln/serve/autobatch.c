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

/* Fastest of RUNS runs (us) of one batch of b rows; 0 when the engine's profiles do not take b (*skip), or on a
 * failure, with its reason in why. */
static double measure(sv_model *m, int64_t b, uint64_t *seed, bool *skip, char *why, size_t whylen)
{
    sv_req *r = calloc(1, sizeof *r);
    *skip = false;
    snprintf(why, whylen, "out of memory");
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
    if (!sv_batch_fits(&m->cfg, r->in, b)) {
        *skip = true;
        goto done;
    }
    for (int i = -1; i < RUNS; i++) {   /* i = -1: warm-up (plans the shapes) */
        for (int o = 0; o < SV_MAX_IO; o++) {
            free(r->out[o].data);
            r->out[o].data = NULL;
        }
        uint64_t t0 = sv_now_ns();
        if (sv_run_batch(m, m->ctxs[0], &r, 1) != KILN_OK) {
            snprintf(why, whylen, "%s", r->err);
            goto done;
        }
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

/* Whether batching is off, given or not measurable (dynamic dims): then info says so and the sizes are set. */
static bool not_measured(sv_config *c, json_t *info)
{
    if (!c->dynamic_batching) {
        json_object_set_new(info, "source", json_string("off"));
        json_object_set_new(info, "reason", json_string(c->max_batch_size > 0 ? "config.pbtxt has no dynamic_batching"
                                                                               : "the model does not batch"));
        return true;
    }
    if (c->sizes_given && c->delay_given) {
        json_object_set_new(info, "source", json_string("config"));
        json_object_set_new(info, "reason", json_string("preferred_batch_size and max_queue_delay_microseconds given"));
        return true;
    }
    for (int k = 0; k < c->n_inputs; k++)
        for (int d = 0; d < c->inputs[k].ndim; d++)
            if (c->inputs[k].dims[d] < 0) {
                char why[256];
                snprintf(why, sizeof why, "input '%s' has a dynamic dimension: give dims in config.pbtxt to let kiln "
                         "measure the engine", c->inputs[k].name);
                fallback(c, info, why);
                return true;
            }
    return false;
}

typedef struct curve {
    int n;
    int64_t sizes[64];
    double lat[64], per_item[64];
    int64_t failed_at;    /* the batch whose probe run failed (0: none) */
    char why[512];        /* and why */
} curve;

/* Latencies of batches 1, 2, 4, ... max_batch_size (those the engine's profiles take), up to the first failure. */
static void probe(sv_model *m, json_t *info, curve *cv)
{
    const sv_config *c = &m->cfg;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    json_t *lat = json_object(), *per = json_object();
    json_object_set_new(info, "latency_us", lat);
    json_object_set_new(info, "per_item_us", per);
    cv->n = 0;
    cv->failed_at = 0;
    for (int64_t b = 1; b <= c->max_batch_size && cv->n < 64;
         b = b * 2 > c->max_batch_size && b < c->max_batch_size ? c->max_batch_size : b * 2) {
        bool skip;
        double l = measure(m, b, &seed, &skip, cv->why, sizeof cv->why);
        if (l <= 0 && !skip) {
            cv->failed_at = b;
            break;
        }
        if (l > 0) {
            char key[32];
            snprintf(key, sizeof key, "%lld", (long long)b);
            json_object_set_new(lat, key, json_real(l));
            json_object_set_new(per, key, json_real(l / (double)b));
            cv->sizes[cv->n] = b;
            cv->lat[cv->n] = l;
            cv->per_item[cv->n++] = l / (double)b;
        }
        if (b == c->max_batch_size)
            break;
    }
    memset(&m->metrics, 0, sizeof m->metrics);   /* the probe is not traffic */
}

void sv_autobatch(sv_model *m)
{
    sv_config *c = &m->cfg;
    json_t *info = json_object();
    c->batching_info = info;
    if (not_measured(c, info))
        return;
    curve cv;
    probe(m, info, &cv);
    char why[1024];
    if (cv.n == 0) {
        if (cv.failed_at)
            snprintf(why, sizeof why, "the probe run failed at load time (batch %lld: %s)", (long long)cv.failed_at,
                     cv.why);
        else
            snprintf(why, sizeof why, "the engine's optimization profiles take none of the probed batches");
        fallback(c, info, why);
        return;
    }
    int lo = 0;
    for (int i = 1; i < cv.n; i++)
        if (cv.per_item[i] < cv.per_item[lo])
            lo = i;
    int pick = 0;
    while (cv.per_item[pick] > SLACK * cv.per_item[lo])
        pick++;
    int best = (int)cv.sizes[pick];
    char failed[640] = "";
    if (cv.failed_at) {   /* a batch that failed with random inputs at load fails with a client's too: never merge it */
        c->merge_max = (int)cv.sizes[cv.n - 1];
        snprintf(failed, sizeof failed, "; the probe run failed at batch %lld (%s), so merged batches stay at or below "
                 "%d rows", (long long)cv.failed_at, cv.why, c->merge_max);
        fprintf(stderr, "kiln serve: warning: model '%s': the load-time probe failed at batch %lld: %s; merged batches "
                "stay at or below %d rows\n", m->name, (long long)cv.failed_at, cv.why, c->merge_max);
    }
    snprintf(why, sizeof why,
             "batch %d is the smallest whose time per item is within %.0f%% of the best measured (batch %lld: %.1f us per "
             "item)%s; queue delay = %.0f%% of the batch-%lld latency (%.0f us)%s",
             best, (SLACK - 1) * 100, (long long)cv.sizes[lo], cv.per_item[lo],
             best == c->max_batch_size ? " (= max_batch_size)" : "", DELAY_FRACTION * 100, (long long)cv.sizes[0],
             cv.lat[0], failed);
    if (!c->sizes_given) {
        c->n_preferred = 1;
        c->preferred[0] = best;
    }
    if (!c->delay_given)
        c->max_queue_delay_us = (int64_t)(cv.lat[0] * DELAY_FRACTION);
    json_object_set_new(info, "source", json_string("measured"));
    json_object_set_new(info, "reason", json_string(why));
}
