/* Dense tensors: allocation with size limits, cloning, printing. */
#include "core.h"
#include <stdio.h>

int64_t kiln_tensor_numel(const kiln_tensor *t) { return kiln__shape_numel(t->ndim, t->dims); }

int64_t kiln__shape_numel(int ndim, const int64_t *dims)
{
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0)
            return -1;
        if (dims[i] && n > INT64_MAX / dims[i])
            return -1;
        n *= dims[i];
    }
    return n;
}

kiln_status kiln__tensor_alloc(kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *dims)
{
    memset(t, 0, sizeof *t);
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln__err(KILN_ERR_LIMIT, "tensor rank %d exceeds kiln's maximum of %d", ndim, KILN_MAX_DIMS);
    size_t es = kiln_dtype_size(dt);
    if (es == 0)
        return kiln__err(KILN_ERR_UNSUPPORTED, "tensors of dtype %s are not supported", kiln_dtype_name(dt));
    int64_t n = kiln__shape_numel(ndim, dims);
    if (n < 0)
        return kiln__err(KILN_ERR_SHAPE, "invalid tensor shape (negative dimension or overflow)");
    if ((uint64_t)n > kiln__max_tensor_bytes() / es)
        return kiln__err(KILN_ERR_LIMIT, "tensor of %lld %s elements exceeds the %zu-byte limit",
                         (long long)n, kiln_dtype_name(dt), kiln__max_tensor_bytes());
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->dims[i] = dims[i];
    t->nbytes = (size_t)n * es;
    t->data = kiln__calloc(t->nbytes ? t->nbytes : 1, 1);
    if (!t->data) {
        t->nbytes = 0;
        return kiln__err(KILN_ERR_NOMEM, "out of memory allocating %zu bytes", (size_t)n * es);
    }
    return KILN_OK;
}

void kiln__tensor_release(kiln_tensor *t)
{
    if (!t)
        return;
    if (!(t->flags & KILN_TENSOR_BORROWED))
        kiln__free(t->data);
    t->data = NULL;
    t->nbytes = 0;
    t->flags = 0;
}

kiln_status kiln__tensor_borrow(kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *dims, const void *data,
                                size_t nbytes)
{
    memset(t, 0, sizeof *t);
    size_t es = kiln_dtype_size(dt);
    int64_t n = kiln__shape_numel(ndim, dims);
    if (es == 0 || n < 0 || (uint64_t)n > SIZE_MAX / es || (size_t)n * es != nbytes)
        return kiln__err(KILN_ERR_SHAPE, "borrowed tensor: shape does not match its %zu bytes", nbytes);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->dims[i] = dims[i];
    t->nbytes = nbytes;
    t->data = (void *)(uintptr_t)data;   /* read-only by contract (KILN_TENSOR_BORROWED) */
    t->flags = KILN_TENSOR_BORROWED;
    return KILN_OK;
}

kiln_status kiln__tensor_clone(kiln_tensor *dst, const kiln_tensor *src)
{
    KILN_TRY(kiln__tensor_alloc(dst, src->dtype, src->ndim, src->dims));
    if (src->nbytes)
        memcpy(dst->data, src->data, src->nbytes < dst->nbytes ? src->nbytes : dst->nbytes);
    return KILN_OK;
}

void kiln_tensors_free(kiln_tensor *ts, int n)
{
    if (!ts)
        return;
    for (int i = 0; i < n; i++)
        kiln__tensor_release(&ts[i]);
    kiln__free(ts);
}

void kiln__shape_str(const kiln_tensor *t, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "%s[", kiln_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, i ? ",%lld" : "%lld", (long long)t->dims[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}
