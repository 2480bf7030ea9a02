/* Thread pools for data-parallel loops (kiln__parallel_for).
 *
 * Each pool belongs to one owner (an execution context, one kiln_model_run, one build) and runs
 * one job at a time; several pools run at once without sharing threads, so concurrent contexts
 * each keep their threads. A nested call (a task that itself calls kiln__parallel_for on the
 * pool it runs on) runs its loop inline. The pool's workers start at its first parallel job and
 * end when it is freed.
 *
 * The caller offers the job (on its stack) to the workers it wants, works on chunks itself, then
 * settles with each worker: a worker that has not taken the offer yet (still asleep, or
 * descheduled on a busy machine) is simply withdrawn, so the caller never waits for a thread
 * to wake up just to find no work left; a worker that did take it is waited for. Chunks are
 * claimed with an atomic counter, guided (each a share of what is left, see run_chunks).
 *
 * Workers spin briefly after a job before sleeping on a condition variable, and the caller
 * spins briefly before sleeping while it waits: networks issue many short parallel loops back
 * to back, and a futex wake-up per loop costs more than the work of a small layer. Spinning
 * yields the CPU now and then, so an oversubscribed machine (more runnable threads than
 * CPUs) still runs the thread being waited for. Sleep / wake use the store-then-check pattern
 * on sequentially consistent atomics on both sides, so no wake-up is lost. */
#include "core.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define MAX_THREADS 64
/* how long a worker spins for the next job, and the caller for its workers, before sleeping */
#ifndef WORKER_SPIN_NS
#define WORKER_SPIN_NS 200000
#endif
#define CALLER_SPIN_NS 2000000
/* once a spin has lasted this long, it yields the CPU every 64 iterations */
#define YIELD_AFTER_NS 50000

enum { SLOT_IDLE, SLOT_OFFERED, SLOT_RUNNING };

typedef struct par_job {
    kiln__par_fn fn;
    void *ctx;
    int64_t n, grain;
    int64_t div;            /* a claim takes ceil(rest / div) items, at least grain (guided) */
    atomic_llong next;      /* next chunk start */
} par_job;

typedef struct worker_slot {
    pthread_t thread;
    struct kiln_pool *pool;
    atomic_ullong ticket;   /* bumped by the caller for each offer (a wake-up signal) */
    par_job *_Atomic job;   /* the offered job, valid while state != SLOT_IDLE */
    atomic_int state;       /* SLOT_IDLE -> OFFERED (caller) -> RUNNING (worker) -> IDLE (worker),
                             * or OFFERED -> IDLE (caller withdraws the offer) */
    atomic_int sleeping;
    atomic_bool stop;       /* set by kiln__pool_free */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} worker_slot;

struct kiln_pool {
    int nthreads;           /* threads a job may use, caller included */
    int nstarted;           /* worker threads started (at most nthreads - 1) */
    worker_slot *slots;     /* nthreads - 1 */
    pthread_mutex_t job_mu; /* one job at a time; held by the caller while its job runs */
    atomic_int caller_sleeping;
    pthread_mutex_t done_mu;
    pthread_cond_t done_cv;
    kiln_pool_stats stats;  /* written by the job's caller only (under job_mu) */
    atomic_ullong joined;   /* worker participations */
    atomic_ullong busy;     /* jobs run inline because the pool was running another job */
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One spin step: a pause, and a yield of the CPU now and then once spinning took a while. */
static inline void spin_step(int i, int64_t t0, int64_t *now)
{
    CPU_RELAX();
    if ((i & 63) == 0) {
        *now = now_ns();
        if (*now - t0 > YIELD_AFTER_NS)
            sched_yield();
    }
}

/* Guided chunks: each claim takes 1 / (2 x threads) of what is left (at least grain), so the first chunks
 * are large (few claims) and the last ones small: the threads finish within a small chunk of each other
 * even when one of them ran slower (a busy or shared core) or started late. Fixed chunks of n / (4 x
 * threads) left one thread waiting for the other's last chunk: ResNet-50's stem (448 tiles, 56 per
 * chunk) kept the caller waiting ~90 us per inference at 2 threads. */
static void run_chunks(par_job *j)
{
    long long b = atomic_load_explicit(&j->next, memory_order_relaxed);   /* atomic_llong's type, not int64_t */
    for (;;) {
        if (b >= j->n)
            return;
        long long c = (j->n - b + j->div - 1) / j->div;
        if (c < j->grain)
            c = j->grain;
        /* on failure b is reloaded with the current start */
        if (!atomic_compare_exchange_weak_explicit(&j->next, &b, b + c, memory_order_relaxed, memory_order_relaxed))
            continue;
        int64_t e = b + c < j->n ? (int64_t)(b + c) : j->n;
        j->fn(j->ctx, (int64_t)b, e);
        b = atomic_load_explicit(&j->next, memory_order_relaxed);
    }
}

static void *worker(void *arg)
{
    worker_slot *s = arg;
    struct kiln_pool *pool = s->pool;
    unsigned long long seen = 0;
    for (;;) {
        /* wait for a new ticket: spin, then sleep */
        unsigned long long t = atomic_load_explicit(&s->ticket, memory_order_acquire);
        if (t == seen) {
            int64_t t0 = now_ns(), now = t0;
            for (int i = 1;; i++) {
                spin_step(i, t0, &now);
                t = atomic_load_explicit(&s->ticket, memory_order_acquire);
                if (t != seen || now - t0 > WORKER_SPIN_NS)
                    break;
            }
        }
        if (t == seen) {
            pthread_mutex_lock(&s->mu);
            atomic_store(&s->sleeping, 1);
            while ((t = atomic_load(&s->ticket)) == seen)
                pthread_cond_wait(&s->cv, &s->mu);
            atomic_store(&s->sleeping, 0);
            pthread_mutex_unlock(&s->mu);
        }
        seen = t;
        if (atomic_load(&s->stop))
            return NULL;
        /* take the offer unless the caller withdrew it (or it was taken for an earlier ticket) */
        int expect = SLOT_OFFERED;
        if (!atomic_compare_exchange_strong(&s->state, &expect, SLOT_RUNNING))
            continue;
        par_job *j = atomic_load(&s->job);
        atomic_fetch_add_explicit(&pool->joined, 1, memory_order_relaxed);
        run_chunks(j);
        /* the job lives on the caller's stack: no access to it after this store */
        atomic_store(&s->state, SLOT_IDLE);
        if (atomic_load(&pool->caller_sleeping)) {
            pthread_mutex_lock(&pool->done_mu);
            pthread_cond_signal(&pool->done_cv);
            pthread_mutex_unlock(&pool->done_mu);
        }
    }
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
}

int kiln__resolve_threads(int requested)
{
    if (requested <= 0)
        return default_threads();
    return requested > MAX_THREADS ? MAX_THREADS : requested;
}

kiln_pool *kiln__pool_create(int nthreads)
{
    struct kiln_pool *p = kiln__calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->nthreads = kiln__resolve_threads(nthreads);
    p->slots = kiln__calloc((size_t)p->nthreads, sizeof *p->slots);
    if (!p->slots) {
        kiln__free(p);
        return NULL;
    }
    pthread_mutex_init(&p->job_mu, NULL);
    pthread_mutex_init(&p->done_mu, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->caller_sleeping, 0);
    atomic_init(&p->joined, 0);
    atomic_init(&p->busy, 0);
    return p;
}

void kiln__pool_free(kiln_pool *p)
{
    if (!p)
        return;
    for (int w = 0; w < p->nstarted; w++) {
        worker_slot *s = &p->slots[w];
        atomic_store(&s->stop, true);
        pthread_mutex_lock(&s->mu);
        atomic_fetch_add(&s->ticket, 1);
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    pthread_mutex_destroy(&p->job_mu);
    pthread_mutex_destroy(&p->done_mu);
    pthread_cond_destroy(&p->done_cv);
    kiln__free(p->slots);
    kiln__free(p);
}

int kiln__pool_threads(const kiln_pool *p)
{
    return p ? p->nthreads : 1;
}

int kiln__pool_clamp(const kiln_pool *p, int nthreads)
{
    int cap = kiln__pool_threads(p);
    return nthreads <= 0 || nthreads > cap ? cap : nthreads;
}

void kiln__pool_stats_get(kiln_pool *p, kiln_pool_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!p)
        return;
    pthread_mutex_lock(&p->job_mu);   /* no job runs while the counters are read */
    *out = p->stats;
    out->threads = p->nthreads;
    out->workers_started = p->nstarted;
    out->worker_joins = atomic_load(&p->joined);
    out->jobs_inline_busy = atomic_load(&p->busy);
    pthread_mutex_unlock(&p->job_mu);
}

/* Starts workers up to `want` (called with job_mu held). */
static int ensure_workers(struct kiln_pool *p, int want)
{
    while (p->nstarted < want && p->nstarted < p->nthreads - 1) {
        worker_slot *s = &p->slots[p->nstarted];
        s->pool = p;
        atomic_init(&s->ticket, 0);
        atomic_init(&s->job, NULL);
        atomic_init(&s->state, SLOT_IDLE);
        atomic_init(&s->sleeping, 0);
        atomic_init(&s->stop, false);
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        if (pthread_create(&s->thread, NULL, worker, s) != 0) {
            pthread_mutex_destroy(&s->mu);
            pthread_cond_destroy(&s->cv);
            break;
        }
        p->nstarted++;
    }
    return p->nstarted;
}

/* Waits until worker slot s is idle again (it took the offer and is running the job). */
static void wait_idle(struct kiln_pool *p, worker_slot *s)
{
    int64_t t0 = now_ns(), now = t0;
    for (int i = 1; atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_IDLE; i++) {
        spin_step(i, t0, &now);
        if (now - t0 > CALLER_SPIN_NS) {
            pthread_mutex_lock(&p->done_mu);
            atomic_store(&p->caller_sleeping, 1);
            while (atomic_load(&s->state) != SLOT_IDLE)
                pthread_cond_wait(&p->done_cv, &p->done_mu);
            atomic_store(&p->caller_sleeping, 0);
            pthread_mutex_unlock(&p->done_mu);
            return;
        }
    }
}

void kiln__parallel_for(kiln_pool *pool, int nthreads, int64_t n, int64_t grain, kiln__par_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    nthreads = kiln__pool_clamp(pool, nthreads);
    int64_t max_par = (n + grain - 1) / grain;
    if (nthreads > max_par)
        nthreads = (int)max_par;
    /* no pool or one thread: inline */
    if (nthreads <= 1) {
        fn(ctx, 0, n);
        return;
    }
    /* a nested call from a task of this pool's running job: inline */
    if (pthread_mutex_trylock(&pool->job_mu) != 0) {
        atomic_fetch_add_explicit(&pool->busy, 1, memory_order_relaxed);
        fn(ctx, 0, n);
        return;
    }
    int have = ensure_workers(pool, nthreads - 1);
    int workers = have < nthreads - 1 ? have : nthreads - 1;
    pool->stats.jobs_parallel += workers > 0;
    par_job j = {.fn = fn, .ctx = ctx, .n = n};
    j.grain = grain;
    j.div = (int64_t)(workers + 1) * 2;
    atomic_init(&j.next, 0);
    for (int w = 0; w < workers; w++) {
        worker_slot *s = &pool->slots[w];
        atomic_store(&s->job, &j);
        atomic_store(&s->state, SLOT_OFFERED);
        atomic_fetch_add(&s->ticket, 1); /* seq_cst: the offer is visible, then the check below */
        if (atomic_load(&s->sleeping)) {
            pthread_mutex_lock(&s->mu);
            pthread_cond_signal(&s->cv);
            pthread_mutex_unlock(&s->mu);
        }
    }
    run_chunks(&j);
    /* settle: withdraw offers not taken yet, wait for the workers that took theirs */
    for (int w = 0; w < workers; w++) {
        worker_slot *s = &pool->slots[w];
        int expect = SLOT_OFFERED;
        if (atomic_compare_exchange_strong(&s->state, &expect, SLOT_IDLE))
            continue;
        wait_idle(pool, s);
    }
    if (workers + 1 > pool->stats.max_threads_offered)
        pool->stats.max_threads_offered = workers + 1;
    pthread_mutex_unlock(&pool->job_mu);
}
