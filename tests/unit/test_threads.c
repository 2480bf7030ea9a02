/* Concurrency: several execution contexts of one engine running at the same time, each with
 * several threads, on a model whose optimized graph has fused Attention (the fused-softmax path)
 * and on a CNN. Outputs are checked against the unoptimized model run on the main thread after
 * the workers are done. Built and run under ThreadSanitizer too (make test-tsan, label tsan). */
#include "engine/engine.h"
#include "runtime/model.h"
#include "kiln/kiln.h"
#include "test.h"
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NCTX 4
#define ITERS 4

typedef struct {
    kiln_engine_t e;
    int nin;
    const char *names[4];
    kiln_tensor in[4];
    kiln_tensor got;        /* copy of output 0 of the first run */
    kiln_pool_stats stats;  /* the context's thread pool after its runs */
    int bad;
    char err[256];
} ctx_arg;

static bool has_op(const kiln_graph *g, kiln_op op)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == op)
            return true;
    return false;
}

static double max_diff(const kiln_tensor *a, const kiln_tensor *b)
{
    if (!a || !b || a->nbytes != b->nbytes || a->dtype != KILN_DT_FLOAT32 || b->dtype != KILN_DT_FLOAT32)
        return 1e30;
    double m = 0;
    for (size_t i = 0; i < a->nbytes / 4; i++) {
        double d = fabs((double)((const float *)a->data)[i] - ((const float *)b->data)[i]);
        m = d > m ? d : m;
    }
    return m;
}

static void *run_ctx(void *p)
{
    ctx_arg *a = p;
    kiln_context_t c;
    if (kiln_context_create(a->e, &c) != KILN_OK) {
        a->bad++;
        snprintf(a->err, sizeof a->err, "create: %s", kiln_last_error());
        return NULL;
    }
    kiln_context_set_threads(c, 2);
    for (int i = 0; i < a->nin; i++)
        if (kiln_context_set_input(c, a->names[i], &a->in[i]) != KILN_OK)
            a->bad++;
    for (int it = 0; it < ITERS && !a->bad; it++) {
        if (kiln_context_run(c) != KILN_OK) {
            a->bad++;
            snprintf(a->err, sizeof a->err, "run: %s", kiln_last_error());
            break;
        }
        const kiln_tensor *o = kiln_context_output(c, 0);
        if (it == 0) {
            a->got = *o;
            a->got.data = malloc(o->nbytes);
            memcpy(a->got.data, o->data, o->nbytes);
        } else if (max_diff(o, &a->got) > 1e-5) {
            a->bad++;
            snprintf(a->err, sizeof a->err, "run %d differs from run 0 by %g", it, max_diff(o, &a->got));
        }
    }
    kiln__context_pool_stats(c, &a->stats);
    kiln_context_free(c);
    return NULL;
}

static kiln_tensor make_tensor(kiln_dtype dt, int ndim, const int64_t *dims)
{
    kiln_tensor t = {.dtype = dt, .ndim = ndim};
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)(t.dims[d] = dims[d]);
    t.nbytes = n * kiln_dtype_size(dt);
    t.data = calloc(n ? n : 1, kiln_dtype_size(dt));
    return t;
}

/* Inputs for context t: BERT (ids, mask, type ids) at a per-context sequence length, or a CNN image. */
static void make_inputs(kiln_model_t m, bool bert, int t, ctx_arg *a)
{
    unsigned long long seed = 100 + (unsigned long long)t;
    a->nin = kiln_model_num_inputs(m);
    for (int i = 0; i < a->nin; i++) {
        a->names[i] = kiln_model_input_name(m, i);
        if (bert) {
            int64_t dims[2] = {2, 32 + 8 * t};
            a->in[i] = make_tensor(KILN_DT_INT64, 2, dims);
            int64_t *v = a->in[i].data;
            for (int64_t k = 0; k < dims[0] * dims[1]; k++)
                v[k] = strstr(a->names[i], "ids") && !strstr(a->names[i], "type") ? (int64_t)(test_rng(&seed) % 100)
                       : strstr(a->names[i], "mask") ? 1 : 0;
        } else {
            /* large enough that a layer splits on every ISA: the float32 GEMM takes a second
             * thread only from 4 MFLOP (gemm.c, GEMM_MIN_FLOPS_PER_THREAD), which tiny_cnn's
             * convolutions reach at 2 x 112 x 128 pixels; at 2 x 56 x 64 an AVX2 host (no
             * AVX-512 direct convolution) split no layer of context 0 (MaxPool from 64 rows) */
            int64_t dims[4] = {2, 3, 112 + 16 * t, 128};
            a->in[i] = make_tensor(KILN_DT_FLOAT32, 4, dims);
            float *v = a->in[i].data;
            for (int64_t k = 0; k < kiln_tensor_numel(&a->in[i]); k++)
                v[k] = test_randf(&seed);
        }
    }
}

/* NCTX contexts of one optimized engine run concurrently; nothing runs the engine before them
 * (a dynamic-shape build does no calibration run), so lazily initialised state is first touched
 * by the concurrent contexts themselves. */
static void concurrent_contexts(const char *path, bool bert, kiln_op must_have)
{
    kiln_model_t m;
    if (kiln_model_load(path, &m) != KILN_OK) {
        printf("SKIP %s: %s\n", path, kiln_last_error());
        return;
    }
    kiln_engine_t e;
    CHECK(kiln_build(m, NULL, &e) == KILN_OK);
    CHECK_MSG(has_op(e->g, must_have), "%s: optimized graph lacks %s", path, kiln__op_name(must_have));
    ctx_arg args[NCTX];
    pthread_t th[NCTX];
    memset(args, 0, sizeof args);
    for (int t = 0; t < NCTX; t++) {
        args[t].e = e;
        make_inputs(m, bert, t, &args[t]);
    }
    for (int t = 0; t < NCTX; t++)
        CHECK(pthread_create(&th[t], NULL, run_ctx, &args[t]) == 0);
    for (int t = 0; t < NCTX; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < NCTX; t++) {
        CHECK_MSG(args[t].bad == 0, "%s context %d: %s", path, t, args[t].err);
        /* each context ran its layers on its own two threads, never inline for lack of a pool */
        const kiln_pool_stats *s = &args[t].stats;
        printf("%s context %d: %d threads, %llu parallel jobs (up to %d threads), %llu worker joins, %llu busy\n",
               path, t, s->threads, s->jobs_parallel, s->max_threads_offered, s->worker_joins, s->jobs_inline_busy);
        CHECK_MSG(s->threads == 2 && s->workers_started == 1, "%s context %d: pool of %d threads, %d started", path,
                  t, s->threads, s->workers_started);
        CHECK_MSG(s->jobs_parallel > 0 && s->max_threads_offered == 2 && s->jobs_inline_busy == 0,
                  "%s context %d: %llu parallel jobs, %llu run inline because the pool was busy", path, t,
                  s->jobs_parallel, s->jobs_inline_busy);
        kiln_tensor *ref;
        int nref;
        CHECK(kiln_model_run(m, args[t].nin, args[t].names, args[t].in, NULL, &nref, &ref) == KILN_OK);
        CHECK_MSG(max_diff(&ref[0], &args[t].got) < 1e-4, "%s context %d vs model: %g", path, t,
                  max_diff(&ref[0], &args[t].got));
        kiln_tensors_free(ref, nref);
        free(args[t].got.data);
        for (int i = 0; i < args[t].nin; i++)
            free(args[t].in[i].data);
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Pools of several owners run jobs at the same time, each on its own threads: every index of a
 * job waits until all `need` threads of its pool have arrived, which only completes when the
 * pool's workers really run this job while the other pools run theirs (a pool that ran the job
 * inline, as the old process-wide pool did for a second concurrent caller, times out). */
typedef struct {
    atomic_int arrived;
    int need;
    atomic_int timed_out;
} rendezvous;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void rendezvous_task(void *p, int64_t begin, int64_t end)
{
    rendezvous *r = p;
    for (int64_t i = begin; i < end; i++) {
        atomic_fetch_add(&r->arrived, 1);
        double t0 = now_s();
        while (atomic_load(&r->arrived) < r->need)
            if (now_s() - t0 > 10) {
                atomic_store(&r->timed_out, 1);
                return;
            }
    }
}

typedef struct {
    int nthreads;
    int timed_out;
    kiln_pool_stats stats;
} owner_arg;

static void *pool_owner(void *p)
{
    owner_arg *a = p;
    kiln_pool *pool = kiln__pool_create(a->nthreads);
    for (int rep = 0; rep < 3 && pool; rep++) {
        rendezvous r = {.need = a->nthreads};
        kiln__parallel_for(pool, 0, a->nthreads, 1, rendezvous_task, &r);
        a->timed_out |= atomic_load(&r.timed_out);
    }
    kiln__pool_stats_get(pool, &a->stats);
    kiln__pool_free(pool);
    return NULL;
}

static void concurrent_pools(void)
{
    owner_arg args[NCTX];
    pthread_t th[NCTX];
    for (int t = 0; t < NCTX; t++) {
        args[t] = (owner_arg){.nthreads = 2 + t % 2};
        CHECK(pthread_create(&th[t], NULL, pool_owner, &args[t]) == 0);
    }
    for (int t = 0; t < NCTX; t++) {
        pthread_join(th[t], NULL);
        CHECK_MSG(!args[t].timed_out && args[t].stats.worker_joins == 3 * (unsigned)(args[t].nthreads - 1),
                  "pool %d: timed out %d, %llu worker joins", t, args[t].timed_out, args[t].stats.worker_joins);
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(kiln__resolve_threads(0) == (ncpu < 1 ? 1 : ncpu > 64 ? 64 : ncpu));
    CHECK(kiln__resolve_threads(-5) == kiln__resolve_threads(0) && kiln__resolve_threads(3) == 3);
    CHECK(kiln__resolve_threads(1000) == 64);
    CHECK(kiln__pool_threads(NULL) == 1);
}

/* kiln__parallel_for's guided chunks: every index run exactly once, every chunk but the one that ends at n at
 * least `grain` long, on pools of 2 and 3 threads and inline */
typedef struct {
    atomic_int *hits;
    int64_t n, grain;
    atomic_int short_chunks;
} cover_job;

static void cover_task(void *p, int64_t begin, int64_t end)
{
    cover_job *j = p;
    if (end - begin < j->grain && end != j->n)
        atomic_fetch_add(&j->short_chunks, 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&j->hits[i], 1);
}

static void chunk_cover(void)
{
    static const int64_t ns[] = {1, 2, 7, 100, 1000, 4099};
    static const int64_t grains[] = {1, 3, 64};
    for (int nt = 1; nt <= 3; nt++) {
        kiln_pool *pool = kiln__pool_create(nt);
        CHECK(pool != NULL);
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof grains / sizeof grains[0]; b++) {
                cover_job j = {.hits = calloc((size_t)ns[a], sizeof(atomic_int)), .n = ns[a], .grain = grains[b]};
                kiln__parallel_for(pool, 0, j.n, j.grain, cover_task, &j);
                int bad = 0;
                for (int64_t i = 0; i < j.n; i++)
                    bad += atomic_load(&j.hits[i]) != 1;
                CHECK_MSG(bad == 0 && atomic_load(&j.short_chunks) == 0,
                          "parallel_for n=%lld grain=%lld threads=%d: %d indices not run once, %d short chunks",
                          (long long)j.n, (long long)j.grain, nt, bad, atomic_load(&j.short_chunks));
                free(j.hits);
            }
        kiln__pool_free(pool);
    }
}

int main(void)
{
    chunk_cover();
    concurrent_pools();
    concurrent_contexts("models/tiny_bert.onnx", true, KILN_OP_Attention);
    concurrent_contexts("models/tiny_cnn.onnx", false, KILN_OP_FusedConv);
    return TEST_SUMMARY();
}
