/* Thread pools for tests that call kernels directly: one pool per thread count, kept for the
 * process (a kernel context without a pool runs single-threaded). */
#ifndef KILN_TEST_POOL_H
#define KILN_TEST_POOL_H
#include "core/core.h"

static inline kiln_pool *test_pool(int nthreads)
{
    static kiln_pool *pools[17];
    if (nthreads < 1 || nthreads > 16)
        return NULL;
    if (!pools[nthreads])
        pools[nthreads] = kiln__pool_create(nthreads);
    return pools[nthreads];
}
#endif
