/* Large host-side copies of a device context (graph inputs into pinned memory, half outputs widened
 * into float32) split over up to 8 threads: one thread moves them at a fraction of the memory
 * bandwidth (ResNet-50 at batch 256: 154 MB of input per run; BERT-base at batch 128: 50 MB of output). */
#include "device_impl.h"
#include <pthread.h>
#include <unistd.h>

#define PAR_MIN_BYTES ((size_t)8 << 20)
#define PAR_THREADS 8

typedef struct par_part {
    void (*fn)(void *arg, size_t lo, size_t hi);
    void *arg;
    size_t lo, hi;
} par_part;

static void *par_run(void *a)
{
    par_part *p = a;
    if (p->hi > p->lo)
        p->fn(p->arg, p->lo, p->hi);
    return NULL;
}

void kiln__host_par(size_t n, size_t bytes, size_t grain, void (*fn)(void *arg, size_t lo, size_t hi), void *arg)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu < 2 ? 1 : ncpu > PAR_THREADS ? PAR_THREADS : (int)ncpu;
    if (bytes < PAR_MIN_BYTES || nt < 2 || grain == 0) {
        fn(arg, 0, n);
        return;
    }
    pthread_t th[PAR_THREADS];
    par_part part[PAR_THREADS];
    bool started[PAR_THREADS] = {false};
    size_t step = (n / (size_t)nt + grain - 1) / grain * grain;
    for (int i = 0; i < nt; i++) {
        size_t lo = step * (size_t)i;
        part[i] = (par_part){fn, arg, lo > n ? n : lo, lo + step > n ? n : lo + step};
        /* part 0 runs on this thread; a thread that cannot start has its part run here too */
        started[i] = i > 0 && part[i].hi > part[i].lo && pthread_create(&th[i], NULL, par_run, &part[i]) == 0;
    }
    for (int i = 0; i < nt; i++)
        if (!started[i])
            par_run(&part[i]);
    for (int i = 1; i < nt; i++)
        if (started[i])
            pthread_join(th[i], NULL);
}
