/* A small persistent thread pool for data-parallel loops (kiln__parallel_for). */
#include "core.h"
#include <pthread.h>
#include <unistd.h>

#define MAX_THREADS 64

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    pthread_t threads[MAX_THREADS];
    int nthreads;            /* worker threads started (caller excluded) */
    uint64_t generation;     /* bumped for each job */
    /* current job */
    kiln__par_fn fn;
    void *ctx;
    int64_t n, chunk, next;  /* next chunk start, protected by mu */
    int active_workers;      /* workers allowed on this job */
    int pending;             /* workers still running this job */
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .work_cv = PTHREAD_COND_INITIALIZER,
          .done_cv = PTHREAD_COND_INITIALIZER};

static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */

static bool grab(int64_t *b, int64_t *e)
{
    if (pool.next >= pool.n)
        return false;
    *b = pool.next;
    *e = *b + pool.chunk < pool.n ? *b + pool.chunk : pool.n;
    pool.next = *e;
    return true;
}

static void run_chunks(void)
{
    int64_t b, e;
    for (;;) {
        pthread_mutex_lock(&pool.mu);
        bool ok = grab(&b, &e);
        pthread_mutex_unlock(&pool.mu);
        if (!ok)
            return;
        pool.fn(pool.ctx, b, e);
    }
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.work_cv, &pool.mu);
        seen = pool.generation;
        if (id >= pool.active_workers)
            continue;
        pthread_mutex_unlock(&pool.mu);
        run_chunks();
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done_cv);
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

static void ensure_workers(int want)
{
    while (pool.nthreads < want && pool.nthreads < MAX_THREADS - 1) {
        if (pthread_create(&pool.threads[pool.nthreads], NULL, worker, (void *)(intptr_t)pool.nthreads) != 0)
            break;
        pthread_detach(pool.threads[pool.nthreads]);
        pool.nthreads++;
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
    pthread_mutex_lock(&pool.mu);
    ensure_workers(nthreads - 1);
    int workers = pool.nthreads < nthreads - 1 ? pool.nthreads : nthreads - 1;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    int64_t chunks = (int64_t)(workers + 1) * 4;
    pool.chunk = (n + chunks - 1) / chunks;
    if (pool.chunk < grain)
        pool.chunk = grain;
    pool.next = 0;
    pool.active_workers = workers;
    pool.pending = workers;
    pool.generation++;
    pthread_cond_broadcast(&pool.work_cv);
    pthread_mutex_unlock(&pool.mu);
    run_chunks();
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done_cv, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&job_mu);
}
