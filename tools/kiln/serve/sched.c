/* Dynamic batching scheduler: one queue per model, N instance threads (one execution context
 * each). An instance takes the oldest request, waits up to max_queue_delay for compatible
 * requests (same dtype and non-batch dims) to reach a preferred batch size, concatenates them
 * along axis 0, runs once, and splits every output back by rows. */
#include "serve.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void sv_req_free(sv_req *r)
{
    if (!r)
        return;
    for (int i = 0; i < SV_MAX_IO; i++) {
        free(r->in[i].data);
        free(r->out[i].data);
    }
    free(r);
}

static void fail_all(sv_req **rs, int n, kiln_status st, const char *msg)
{
    for (int i = 0; i < n; i++) {
        rs[i]->status = st;
        snprintf(rs[i]->err, sizeof rs[i]->err, "%s", msg);
    }
}

/* Output o of the run, split into the requests by rows (or copied whole when not batching). */
static kiln_status split_output(const sv_model *m, const kiln_tensor *t, int o, sv_req **rs, int n, int64_t total)
{
    bool batched = m->cfg.max_batch_size > 0;
    if (batched && (t->ndim < 1 || t->dims[0] != total)) {
        char msg[256];
        snprintf(msg, sizeof msg, "output '%s' does not have the batch (%lld) as its first dimension",
                 m->cfg.outputs[o].name, (long long)total);
        fail_all(rs, n, KILN_ERR_SHAPE, msg);
        return KILN_ERR_SHAPE;
    }
    size_t row = batched && total > 0 ? t->nbytes / (size_t)total : t->nbytes;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        kiln_tensor *d = &rs[i]->out[o];
        *d = *t;
        if (batched)
            d->dims[0] = rs[i]->batch;
        d->nbytes = batched ? row * (size_t)rs[i]->batch : t->nbytes;
        d->data = malloc(d->nbytes ? d->nbytes : 1);
        if (!d->data) {
            fail_all(rs, n, KILN_ERR_NOMEM, "out of memory");
            return KILN_ERR_NOMEM;
        }
        memcpy(d->data, (const char *)t->data + off, d->nbytes);
        if (batched)
            off += d->nbytes;
    }
    return KILN_OK;
}

/* One execution of rs[0..n) as one batch: every request's status (and, on success, outputs) set. Only a successful
 * execution counts in the metrics (as Triton's: failures count in nv_inference_request_failure alone). */
static kiln_status run_once(sv_model *m, kiln_context_t c, sv_req **rs, int n)
{
    const sv_config *cfg = &m->cfg;
    uint64_t t0 = sv_now_ns();
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += rs[i]->batch;
    kiln_tensor merged[SV_MAX_IO];
    memset(merged, 0, sizeof merged);
    kiln_status st = KILN_OK;
    for (int k = 0; k < cfg->n_inputs && st == KILN_OK; k++) {
        const kiln_tensor *src = &rs[0]->in[k];
        if (n > 1) {
            int64_t dims[KILN_MAX_DIMS];
            memcpy(dims, src->dims, sizeof dims);
            dims[0] = total;
            if (!sv_tensor_alloc(&merged[k], src->dtype, src->ndim, dims)) {
                st = KILN_ERR_NOMEM;
                break;
            }
            size_t off = 0;
            for (int i = 0; i < n; i++) {
                memcpy((char *)merged[k].data + off, rs[i]->in[k].data, rs[i]->in[k].nbytes);
                off += rs[i]->in[k].nbytes;
            }
            src = &merged[k];
        }
        st = kiln_context_set_input(c, cfg->inputs[k].name, src);
    }
    uint64_t t1 = sv_now_ns();
    if (st == KILN_OK)
        st = kiln_context_run(c);
    uint64_t t2 = sv_now_ns();
    if (st != KILN_OK)
        fail_all(rs, n, st, kiln_last_error()[0] ? kiln_last_error() : kiln_status_str(st));
    for (int o = 0; o < cfg->n_outputs && st == KILN_OK; o++) {
        const kiln_tensor *t = kiln_context_output(c, o);
        st = t ? split_output(m, t, o, rs, n, total) : KILN_ERR_INTERNAL;
    }
    for (int i = 0; i < n; i++) {
        rs[i]->n_out = cfg->n_outputs;
        if (st == KILN_OK)
            rs[i]->status = KILN_OK;
    }
    for (int k = 0; k < cfg->n_inputs; k++)
        free(merged[k].data);
    uint64_t t3 = sv_now_ns();
    if (st != KILN_OK)
        return st;
    sv_metrics *mt = &m->metrics;
    atomic_fetch_add(&mt->exec_count, 1);
    for (int i = 0; i < n; i++) {
        atomic_fetch_add(&mt->inference_count, (unsigned long long)rs[i]->batch);
        atomic_fetch_add(&mt->input_us, (t1 - t0) / 1000);
        atomic_fetch_add(&mt->infer_us, (t2 - t1) / 1000);
        atomic_fetch_add(&mt->output_us, (t3 - t2) / 1000);
    }
    return KILN_OK;
}

kiln_status sv_run_batch(sv_model *m, kiln_context_t c, sv_req **rs, int n)
{
    kiln_status st = run_once(m, c, rs, n);
    if (st == KILN_OK || n == 1)
        return st;
    /* One request can make the merged batch fail (a token id out of range, a value a kernel refuses): each request
     * then runs again by itself, so that only one that fails alone fails, with its own error, not its batch-mates. */
    st = KILN_OK;
    for (int i = 0; i < n; i++) {
        for (int o = 0; o < SV_MAX_IO; o++) {
            free(rs[i]->out[o].data);
            rs[i]->out[o].data = NULL;
        }
        rs[i]->err[0] = 0;
        kiln_status s = run_once(m, c, &rs[i], 1);
        st = s != KILN_OK ? s : st;
    }
    return st;
}

/* Whether b can share a batch with a (same dtype and dims except axis 0, for every input). */
static bool compatible(const sv_model *m, const sv_req *a, const sv_req *b)
{
    for (int k = 0; k < m->cfg.n_inputs; k++) {
        const kiln_tensor *x = &a->in[k], *y = &b->in[k];
        if (x->ndim < 1 || x->dtype != y->dtype || x->ndim != y->ndim || memcmp(x->dims + 1, y->dims + 1, sizeof(int64_t) * (size_t)(x->ndim - 1)))
            return false;
    }
    return true;
}

bool sv_batch_fits(const sv_config *c, const kiln_tensor *in, int64_t rows)
{
    if (c->n_profiles == 0)
        return true;
    for (int p = 0; p < c->n_profiles; p++) {
        bool ok = true;
        for (int k = 0; k < c->n_ranges && ok; k++) {
            const sv_range *r = &c->ranges[k];
            if (r->profile != p)
                continue;
            const kiln_tensor *t = &in[r->input];
            ok = t->ndim == r->ndim;
            for (int d = 0; d < t->ndim && ok; d++) {
                int64_t v = d == 0 && c->max_batch_size > 0 ? rows : t->dims[d];
                ok = v >= r->min[d] && v <= r->max[d];
            }
        }
        if (ok)
            return true;
    }
    return false;
}

static int target_batch(const sv_config *c)
{
    int t = 0;
    for (int i = 0; i < c->n_preferred; i++)
        if (c->preferred[i] > t)
            t = c->preferred[i];
    t = t > 0 ? t : c->max_batch_size;
    return t < c->merge_max ? t : c->merge_max;
}

/* Whether r joins a batch of `rows` rows that head starts: compatible with it, at most `limit` rows in all (never more
 * than merge_max), and a merged batch the engine's optimization profiles take. The head itself always runs. */
static bool joins(const sv_model *m, const sv_req *head, const sv_req *r, int64_t rows, int64_t limit)
{
    if (r == head)
        return true;
    int64_t total = rows + r->batch;
    return compatible(m, head, r) && total <= limit && total <= m->cfg.merge_max && sv_batch_fits(&m->cfg, head->in, total);
}

/* Rows that take() would unlink now: the head, then requests that join it, up to `limit` rows. */
static int64_t ready_rows(const sv_model *m, int64_t limit)
{
    int64_t rows = 0;
    for (sv_req *r = m->head; r && rows < limit; r = r->next)
        if (joins(m, m->head, r, rows, limit))
            rows += r->batch;
    return rows;
}

/* Unlinks the head and then requests that join it, in arrival order, up to `limit` rows. */
static int take(sv_model *m, int64_t limit, sv_req **out, int cap)
{
    sv_req *head = m->head, **pp = &m->head;
    int n = 0;
    int64_t rows = 0;
    while (*pp && n < cap) {
        sv_req *r = *pp;
        if (joins(m, head, r, rows, limit)) {
            rows += r->batch;
            out[n++] = r;
            *pp = r->next;
            r->next = NULL;
        } else {
            pp = &r->next;
        }
    }
    m->tail = NULL;
    for (sv_req *r = m->head; r; r = r->next)
        m->tail = r;
    return n;
}

static void deadline_ts(uint64_t ns_mono, struct timespec *ts)
{
    ts->tv_sec = (time_t)(ns_mono / 1000000000ull);
    ts->tv_nsec = (long)(ns_mono % 1000000000ull);
}

typedef struct inst_arg { sv_model *m; int idx; } inst_arg;

static void *instance_main(void *p)
{
    inst_arg *a = p;
    sv_model *m = a->m;
    kiln_context_t ctx = m->ctxs[a->idx];
    free(a);
    const sv_config *c = &m->cfg;
    int cap = c->max_batch_size > 0 ? c->max_batch_size : 1;
    sv_req **batch = calloc((size_t)cap, sizeof *batch);
    if (!batch)
        return NULL;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->stop && !m->head)
            pthread_cond_wait(&m->cv, &m->mu);
        if (!m->head)
            break;   /* stopping with an empty queue */
        int64_t limit = c->max_batch_size > 0 ? c->max_batch_size : 1;
        if (c->dynamic_batching) {
            int64_t want = target_batch(c);
            uint64_t deadline = m->head->t_enqueue + (uint64_t)c->max_queue_delay_us * 1000u;
            while (m->head && !m->stop && ready_rows(m, want) < want && sv_now_ns() < deadline) {
                struct timespec ts;
                deadline_ts(deadline, &ts);
                pthread_cond_timedwait(&m->cv, &m->mu, &ts);
            }
            if (!m->head)
                continue;   /* another instance took them */
            if (ready_rows(m, want) >= want)
                limit = want;
        } else if (c->max_batch_size > 0) {
            limit = c->max_batch_size;   /* a request may carry up to max_batch_size rows by itself */
        }
        int n = c->dynamic_batching ? take(m, limit, batch, cap) : take(m, limit, batch, 1);
        pthread_mutex_unlock(&m->mu);
        uint64_t start = sv_now_ns();
        sv_run_batch(m, ctx, batch, n);
        for (int i = 0; i < n; i++) {
            bool ok = batch[i]->status == KILN_OK;
            atomic_fetch_add(ok ? &m->metrics.success : &m->metrics.failure, 1);
            if (ok)   /* durations are charged to successful requests only */
                atomic_fetch_add(&m->metrics.queue_us, (start - batch[i]->t_enqueue) / 1000);
            batch[i]->done(batch[i], batch[i]->user);
        }
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    free(batch);
    return NULL;
}

bool sv_sched_start(sv_model *m, char *err, size_t errlen)
{
    m->n_threads = 0;
    int n = m->cfg.instance_count;
    m->threads = calloc((size_t)n, sizeof *m->threads);
    if (!m->ctxs || !m->threads) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    for (int i = 0; i < n; i++) {
        inst_arg *a = malloc(sizeof *a);
        if (a)
            *a = (inst_arg){m, i};
        if (!a || pthread_create(&m->threads[i], NULL, instance_main, a) != 0) {
            free(a);
            snprintf(err, errlen, "cannot start instance thread %d", i);
            return false;
        }
        m->n_threads++;
    }
    return true;
}

void sv_sched_submit(sv_model *m, sv_req *r)
{
    r->t_enqueue = sv_now_ns();
    r->next = NULL;
    pthread_mutex_lock(&m->mu);
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

void sv_sched_stop(sv_model *m)
{
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    for (int i = 0; i < m->n_threads; i++)
        pthread_join(m->threads[i], NULL);
    m->n_threads = 0;
    free(m->threads);
    m->threads = NULL;
}
