/* Per-thread reusable scratch buffers (see scratch.h). */
#include "scratch.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct tls_bufs {
    void *p[KILN_SCRATCH_SLOTS];
    size_t cap[KILN_SCRATCH_SLOTS];
} tls_bufs;

static _Thread_local tls_bufs bufs;
static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* thread exit: the key's value is the thread's tls_bufs */
static void release(void *v)
{
    tls_bufs *b = v;
    for (int i = 0; i < KILN_SCRATCH_SLOTS; i++) {
        free(b->p[i]);
        b->p[i] = NULL;
        b->cap[i] = 0;
    }
}

static void make_key(void) { (void)pthread_key_create(&key, release); }

void *kiln__scratch(int slot, size_t bytes)
{
    if (slot < 0 || slot >= KILN_SCRATCH_SLOTS)
        return NULL;
    if (bytes == 0)
        bytes = 1;
    if (bufs.cap[slot] >= bytes)
        return bufs.p[slot];
    pthread_once(&key_once, make_key);
    if (bytes > SIZE_MAX - 4095)
        return NULL;
    size_t cap = (bytes + 4095) & ~(size_t)4095;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap) != 0)
        return NULL;
    free(bufs.p[slot]);
    bufs.p[slot] = p;
    bufs.cap[slot] = cap;
    (void)pthread_setspecific(key, &bufs);
    return p;
}
