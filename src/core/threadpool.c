/* A small persistent thread pool for data-parallel loops (kiln__parallel_for).
 *
 * One job runs at a time (a second concurrent or nested caller runs its loop inline). The
 * caller offers the job (on its stack) to the workers it wants, works on chunks itself, then
 * settles with each worker: a worker that has not taken the offer yet (still asleep, or
 * descheduled on a busy machine) is simply withdrawn, so the caller never waits for a thread
 * to wake up just to find no work left; a worker that did take it is waited for. Chunks are
 * claimed with an atomic counter.
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
    int64_t n, chunk;
    atomic_llong next;      /* next chunk start */
} par_job;

typedef struct worker_slot {
    pthread_t thread;
    atomic_ullong ticket;   /* bumped by the caller for each offer (a wake-up signal) */
    par_job *_Atomic job;   /* the offered job, valid while state != SLOT_IDLE */
    atomic_int state;       /* SLOT_IDLE -> OFFERED (caller) -> RUNNING (worker) -> IDLE (worker),
                             * or OFFERED -> IDLE (caller withdraws the offer) */
    atomic_int sleeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} worker_slot;

static struct {
    pthread_mutex_t mu;     /* protects worker creation */
    int nthreads;           /* worker threads started (caller excluded) */
    worker_slot slots[MAX_THREADS];
    atomic_int caller_sleeping;
    pthread_mutex_t done_mu;
    pthread_cond_t done_cv;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .done_mu = PTHREAD_MUTEX_INITIALIZER,
          .done_cv = PTHREAD_COND_INITIALIZER};

static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */

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

static void run_chunks(par_job *j)
{
    for (;;) {
        int64_t b = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (b >= j->n)
            return;
        int64_t e = b + j->chunk < j->n ? b + j->chunk : j->n;
        j->fn(j->ctx, b, e);
    }
}

static void *worker(void *arg)
{
    worker_slot *s = arg;
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
        /* take the offer unless the caller withdrew it (or it was taken for an earlier ticket) */
        int expect = SLOT_OFFERED;
        if (!atomic_compare_exchange_strong(&s->state, &expect, SLOT_RUNNING))
            continue;
        par_job *j = atomic_load(&s->job);
        run_chunks(j);
        /* the job lives on the caller's stack: no access to it after this store */
        atomic_store(&s->state, SLOT_IDLE);
        if (atomic_load(&pool.caller_sleeping)) {
            pthread_mutex_lock(&pool.done_mu);
            pthread_cond_signal(&pool.done_cv);
            pthread_mutex_unlock(&pool.done_mu);
        }
    }
    return NULL;
}

int kiln__default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
}

static int ensure_workers(int want)
{
    pthread_mutex_lock(&pool.mu);
    while (pool.nthreads < want && pool.nthreads < MAX_THREADS - 1) {
        worker_slot *s = &pool.slots[pool.nthreads];
        atomic_init(&s->ticket, 0);
        atomic_init(&s->job, NULL);
        atomic_init(&s->state, SLOT_IDLE);
        atomic_init(&s->sleeping, 0);
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        if (pthread_create(&s->thread, NULL, worker, s) != 0)
            break;
        pthread_detach(s->thread);
        pool.nthreads++;
    }
    int n = pool.nthreads;
    pthread_mutex_unlock(&pool.mu);
    return n;
}

/* Waits until worker slot s is idle again (it took the offer and is running the job). */
static void wait_idle(worker_slot *s)
{
    int64_t t0 = now_ns(), now = t0;
    for (int i = 1; atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_IDLE; i++) {
        spin_step(i, t0, &now);
        if (now - t0 > CALLER_SPIN_NS) {
            pthread_mutex_lock(&pool.done_mu);
            atomic_store(&pool.caller_sleeping, 1);
            while (atomic_load(&s->state) != SLOT_IDLE)
                pthread_cond_wait(&pool.done_cv, &pool.done_mu);
            atomic_store(&pool.caller_sleeping, 0);
            pthread_mutex_unlock(&pool.done_mu);
            return;
        }
    }
}

void kiln__parallel_for(int nthreads, int64_t n, int64_t grain, kiln__par_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    if (nthreads <= 0)
        nthreads = kiln__default_threads();
    int64_t max_par = (n + grain - 1) / grain;
    if (nthreads > max_par)
        nthreads = (int)max_par;
    /* nested parallel_for or a busy pool: run inline */
    if (nthreads <= 1 || pthread_mutex_trylock(&job_mu) != 0) {
        fn(ctx, 0, n);
        return;
    }
    int have = ensure_workers(nthreads - 1);
    int workers = have < nthreads - 1 ? have : nthreads - 1;
    par_job j = {.fn = fn, .ctx = ctx, .n = n};
    int64_t chunks = (int64_t)(workers + 1) * 4;
    j.chunk = (n + chunks - 1) / chunks;
    if (j.chunk < grain)
        j.chunk = grain;
    atomic_init(&j.next, 0);
    for (int w = 0; w < workers; w++) {
        worker_slot *s = &pool.slots[w];
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
        worker_slot *s = &pool.slots[w];
        int expect = SLOT_OFFERED;
        if (atomic_compare_exchange_strong(&s->state, &expect, SLOT_IDLE))
            continue;
        wait_idle(s);
    }
    pthread_mutex_unlock(&job_mu);
}
