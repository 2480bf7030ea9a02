/* Weights on the device, one copy per graph shared by every kiln_dev running it (the contexts of
 * one engine): a registry of stores keyed by graph, reference-counted by the kiln_devs bound to
 * them, each initializer copied at its first use by a device layer (under the store's lock, so
 * contexts running at once copy it once). A kiln_dev runs one graph at a time: binding it to
 * another (or kiln__dev_weights_clear) drops its reference, and the last reference frees the
 * store. An entry remembers the host data it was copied from and is copied again if that changed. */
#include "device_impl.h"
#include <pthread.h>

typedef struct kiln_dev_weights {
    const kiln_graph *g;
    const kiln_devmod *mod;
    int refs;
    pthread_mutex_t lock;
    int n;
    kiln_tensor *w;              /* by value id */
    const void **src;            /* host data each was copied from */
    struct kiln_dev_weights *next;
} kiln_dev_weights;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static kiln_dev_weights *registry;

static void store_free(kiln_dev_weights *s)
{
    for (int v = 0; v < s->n; v++)
        if (s->w[v].data)
            s->mod->shared_free(s->w[v].data);
    pthread_mutex_destroy(&s->lock);
    kiln__free(s->w);
    kiln__free(s->src);
    kiln__free(s);
}

static void drop_ref(kiln_dev *d)
{
    kiln_dev_weights *s = d->weights;
    if (!s)
        return;
    d->weights = NULL;
    pthread_mutex_lock(&registry_lock);
    bool last = --s->refs == 0;
    if (last)
        for (kiln_dev_weights **p = &registry; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
    pthread_mutex_unlock(&registry_lock);
    if (last)
        store_free(s);
}

void kiln__dev_weights_clear(kiln_dev *d)
{
    drop_ref(d);
    /* the graph may go away: the module's forms of host weights it keyed by address (INT8 filters, cuda_int8.c)
     * must not be taken for those of a later graph at the same addresses (shared_free(NULL) frees nothing and moves
     * the module's weights generation on) */
    d->mod->shared_free(NULL);
}

static kiln_status bind(kiln_dev *d, const kiln_graph *g)
{
    drop_ref(d);
    pthread_mutex_lock(&registry_lock);
    kiln_dev_weights *s = registry;
    while (s && s->g != g)
        s = s->next;
    if (!s && (s = kiln__calloc(1, sizeof *s))) {
        s->g = g;
        s->mod = d->mod;
        s->n = g->n_values;
        s->w = kiln__calloc((size_t)g->n_values + 1, sizeof *s->w);
        s->src = kiln__calloc((size_t)g->n_values + 1, sizeof *s->src);
        if (!s->w || !s->src || pthread_mutex_init(&s->lock, NULL)) {
            kiln__free(s->w);
            kiln__free(s->src);
            kiln__free(s);
            s = NULL;
        } else {
            s->next = registry;
            registry = s;
        }
    }
    if (s)
        s->refs++;
    pthread_mutex_unlock(&registry_lock);
    d->weights = s;
    return s ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
}

uint64_t kiln__dev_weights_bytes(const kiln_dev *d)
{
    kiln_dev_weights *s = d->weights;
    if (!s)
        return 0;
    uint64_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (int v = 0; v < s->n; v++)
        n += s->w[v].data ? s->w[v].nbytes : 0;
    pthread_mutex_unlock(&s->lock);
    return n;
}

kiln_status kiln__dev_weight(kiln_dev *d, const kiln_graph *g, int v, const kiln_tensor **out)
{
    if (!d->weights || d->weights->g != g)
        KILN_TRY(bind(d, g));
    kiln_dev_weights *s = d->weights;
    if (v < 0 || v >= s->n)
        return kiln__err(KILN_ERR_INTERNAL, "weight %d outside the graph's %d values", v, s->n);
    const kiln_tensor *h = g->values[v].init;
    kiln_status st = KILN_OK;
    pthread_mutex_lock(&s->lock);
    if (s->w[v].data && (s->src[v] != h->data || s->w[v].nbytes != h->nbytes)) {
        s->mod->shared_free(s->w[v].data);
        memset(&s->w[v], 0, sizeof s->w[v]);
    }
    if (!s->w[v].data && (st = kiln__dev_upload(d, h, &s->w[v], true)) == KILN_OK) {
        s->src[v] = h->data;
        s->w[v].flags |= KILN_TENSOR_DEV_WEIGHT;
    }
    pthread_mutex_unlock(&s->lock);
    *out = &s->w[v];
    return st;
}
