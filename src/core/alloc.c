/* The one hookable allocator every kiln allocation goes through. */
#include "core.h"
#include <stdlib.h>
#include <sys/mman.h>

static kiln_allocator cur;   /* all NULL = libc */
static size_t max_tensor_bytes = (size_t)8 << 30;

void kiln_set_allocator(const kiln_allocator *a)
{
    if (a)
        cur = *a;
    else
        memset(&cur, 0, sizeof cur);
}

void kiln_set_max_tensor_bytes(size_t bytes) { max_tensor_bytes = bytes; }
size_t kiln__max_tensor_bytes(void) { return max_tensor_bytes; }

void *kiln__malloc(size_t n)
{
    if (n == 0)
        n = 1;
    return cur.malloc_fn ? cur.malloc_fn(n, cur.user) : malloc(n);
}

void *kiln__malloc_large(size_t n)
{
#ifdef MADV_HUGEPAGE
    const size_t huge = (size_t)1 << 21;
    if (!cur.malloc_fn && n >= huge && n <= SIZE_MAX - huge) {
        size_t sz = (n + huge - 1) & ~(huge - 1);
        void *p = NULL;
        if (posix_memalign(&p, huge, sz) == 0) {
            (void)madvise(p, sz, MADV_HUGEPAGE);   /* advice only: 4 KB pages where it is not taken */
            return p;
        }
    }
#endif
    return kiln__malloc(n);
}

void *kiln__calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    size_t n = count * size;
    void *p = kiln__malloc(n);
    if (p)
        memset(p, 0, n ? n : 1);
    return p;
}

void *kiln__realloc(void *p, size_t n)
{
    if (n == 0)
        n = 1;
    return cur.realloc_fn ? cur.realloc_fn(p, n, cur.user) : realloc(p, n);
}

void kiln__free(void *p)
{
    if (!p)
        return;
    if (cur.free_fn)
        cur.free_fn(p, cur.user);
    else
        free(p);
}

void kiln_free(void *p) { kiln__free(p); }

char *kiln__strndup(const char *s, size_t n)
{
    char *d = kiln__malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *kiln__strdup(const char *s) { return s ? kiln__strndup(s, strlen(s)) : NULL; }
