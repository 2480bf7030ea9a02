/* Prometheus text exposition of the per-model counters, named like Triton's metrics. */
#include "serve.h"
#include <stddef.h>
#include <stdlib.h>

typedef struct mdef { const char *name, *help; size_t off; } mdef;
#define M(n, f, h) {n, h, offsetof(sv_metrics, f)}
static const mdef METRICS[] = {
    M("nv_inference_request_success", success, "Number of successful inference requests, all batch sizes"),
    M("nv_inference_request_failure", failure, "Number of failed inference requests, all batch sizes"),
    M("nv_inference_count", inference_count, "Number of inferences performed (a batch of n counts n)"),
    M("nv_inference_exec_count", exec_count, "Number of model executions performed (a batch counts 1)"),
    M("nv_inference_queue_duration_us", queue_us, "Cumulative inference queuing duration in microseconds"),
    M("nv_inference_compute_input_duration_us", input_us, "Cumulative compute input duration in microseconds"),
    M("nv_inference_compute_infer_duration_us", infer_us, "Cumulative compute inference duration in microseconds"),
    M("nv_inference_compute_output_duration_us", output_us, "Cumulative inference compute output duration in microseconds"),
};

typedef struct emit { FILE *f; const mdef *d; } emit;

static void one_model(const sv_model *m, void *user)
{
    emit *e = user;
    const atomic_ullong *v = (const atomic_ullong *)((const char *)&m->metrics + e->d->off);
    fprintf(e->f, "%s{model=\"%s\",version=\"%lld\"} %llu\n", e->d->name, m->name, (long long)m->version,
            (unsigned long long)atomic_load(v));
}

char *sv_metrics_text(sv_repo *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    for (size_t k = 0; k < sizeof METRICS / sizeof METRICS[0]; k++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", METRICS[k].name, METRICS[k].help, METRICS[k].name);
        emit e = {f, &METRICS[k]};
        sv_repo_foreach_model(r, one_model, &e);
    }
    fclose(f);
    return buf;
}
