/* Tensor makers shared by the unit tests that use kiln's private tensor allocation: an allocated
 * (zeroed) tensor, random bytes, or float32 values uniform in [-scale, scale). A failed allocation
 * is a CHECK failure (the tensor then has no data). */
#ifndef KILN_TEST_TENSOR_H
#define KILN_TEST_TENSOR_H
#include "core/core.h"
#include "test.h"
#include <string.h>

static inline kiln_tensor test_tensor(kiln_dtype dt, int nd, const int64_t *dims)
{
    kiln_tensor t;
    memset(&t, 0, sizeof t);
    CHECK(kiln__tensor_alloc(&t, dt, nd, dims) == KILN_OK);
    return t;
}

/* A 0-d tensor of dtype dt holding v (float32, or an integer type: v truncated) */
static inline kiln_tensor test_scalar(kiln_dtype dt, double v)
{
    kiln_tensor t = test_tensor(dt, 0, NULL);
    if (!t.data)
        return t;
    if (dt == KILN_DT_FLOAT32)
        *(float *)t.data = (float)v;
    else
        kiln__set_i64(dt, t.data, 0, (int64_t)v);
    return t;
}

static inline kiln_tensor test_tensor_bytes(kiln_dtype dt, int nd, const int64_t *dims, unsigned long long *seed)
{
    kiln_tensor t = test_tensor(dt, nd, dims);
    for (size_t i = 0; t.data && i < t.nbytes; i++)
        ((uint8_t *)t.data)[i] = (uint8_t)test_rng(seed);
    return t;
}

static inline kiln_tensor test_tensor_f32(int nd, const int64_t *dims, float scale, unsigned long long *seed)
{
    kiln_tensor t = test_tensor(KILN_DT_FLOAT32, nd, dims);
    for (int64_t i = 0; t.data && i < kiln_tensor_numel(&t); i++)
        ((float *)t.data)[i] = test_randf(seed) * scale;
    return t;
}
#endif
