/* Shared helpers for kernels: output allocation, errors, broadcasting, axes. */
#include "../../kernel.h"
#include <stdio.h>

/* Sanitizer builds fill "uninitialized" outputs with 0xFF bytes (NaN for floats), so a kernel
 * that leaves an element unwritten fails its tests instead of reading stale data. */
#if defined(__SANITIZE_ADDRESS__)
#define KOUT_POISON 1
#else
#define KOUT_POISON 0
#endif

/* Places output i where the runtime puts it (its planned arena slot), if the runtime does. */
static bool place_by_runtime(kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims, bool zero)
{
    if (!ctx->rt || !ctx->rt->place || ndim < 0 || ndim > KILN_MAX_DIMS)
        return false;
    size_t es = kiln_dtype_size(dt);
    int64_t n = kiln__shape_numel(ndim, dims);
    if (!es || n < 0 || (uint64_t)n > SIZE_MAX / es)
        return false;
    bool fresh = true;
    void *p = ctx->rt->place(ctx->rt_user, ctx, i, (size_t)n * es, &fresh);
    if (!p)
        return false;
    kiln_tensor *t = ctx->out[i];
    t->dtype = dt;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->dims[d] = dims[d];
    t->nbytes = (size_t)n * es;
    t->data = p;
    if (zero && fresh)
        memset(t->data, 0, t->nbytes);
    else if (KOUT_POISON && !zero && fresh)
        memset(t->data, 0xFF, t->nbytes);
    return true;
}

bool kiln__kout_over(const kiln_kctx *ctx, int i, const kiln_tensor *t)
{
    if (!t || !t->data || !t->nbytes || !ctx->rt || !ctx->rt->place || i < 0 || i >= ctx->n_out)
        return false;
    bool fresh = true;
    void *p = ctx->rt->place(ctx->rt_user, ctx, i, t->nbytes, &fresh);
    return p && !fresh && p == t->data;
}

void kiln__kout_release(const kiln_kctx *ctx, kiln_tensor *t)
{
    if (ctx->rt && ctx->rt->owns && t->data && ctx->rt->owns(ctx->rt_user, t->data))
        memset(t, 0, sizeof *t);
    else
        kiln__tensor_release(t);
}

kiln_status kiln__ksubgraph(const kiln_kctx *ctx, const kiln_graph *g, const kiln_tensor *const *inputs,
                            kiln_tensor *outputs)
{
    if (!ctx->rt || !ctx->rt->run_graph)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "subgraphs cannot run here (no runtime)");
    return ctx->rt->run_graph(ctx->rt_user, ctx, g, inputs, outputs);
}

static kiln_status kout(kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims, bool zero)
{
    if (i < 0 || i >= ctx->n_out || !ctx->out[i])
        return kiln__kerr(ctx, KILN_ERR_INTERNAL, "output %d is not bound", i);
    kiln__kout_release(ctx, ctx->out[i]);
    if (place_by_runtime(ctx, i, dt, ndim, dims, zero))
        return KILN_OK;
    kiln_status st = KILN_OK;
    if (zero) {
        st = kiln__tensor_alloc(ctx->out[i], dt, ndim, dims);
    } else {
        /* kiln__tensor_alloc's checks, without its zero fill */
        kiln_tensor *t = ctx->out[i];
        memset(t, 0, sizeof *t);
        size_t es = kiln_dtype_size(dt);
        int64_t n = ndim >= 0 && ndim <= KILN_MAX_DIMS ? kiln__shape_numel(ndim, dims) : -1;
        if (!es || n < 0 || (uint64_t)n > kiln__max_tensor_bytes() / es)
            return kout(ctx, i, dt, ndim, dims, true); /* reports the error */
        t->data = kiln__malloc(n > 0 ? (size_t)n * es : 1);
        if (!t->data) {
            st = kiln__err(KILN_ERR_NOMEM, "out of memory allocating %zu bytes", (size_t)n * es);
        } else {
            t->dtype = dt;
            t->ndim = ndim;
            for (int d = 0; d < ndim; d++)
                t->dims[d] = dims[d];
            t->nbytes = (size_t)n * es;
            if (KOUT_POISON)
                memset(t->data, 0xFF, t->nbytes);
        }
    }
    if (st != KILN_OK)
        kiln__err_prefix("%s node '%s' output %d", ctx->node->op_type, ctx->node->name, i);
    return st;
}

kiln_status kiln__kout(kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims)
{
    return kout(ctx, i, dt, ndim, dims, true);
}

kiln_status kiln__kout_uninit(kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims)
{
    return kout(ctx, i, dt, ndim, dims, false);
}

kiln_status kiln__kerr(const kiln_kctx *ctx, kiln_status s, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln__err(s, "%s node '%s': %s", ctx->node->op_type, ctx->node->name, msg);
}

kiln_status kiln__kneed(const kiln_kctx *ctx, int i, const kiln_tensor **t)
{
    *t = kiln__kin(ctx, i);
    if (!*t)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input %d", i);
    if ((*t)->ndim < 0 || (*t)->ndim > KILN_MAX_DIMS)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input %d has invalid rank %d", i, (*t)->ndim);
    return KILN_OK;
}

kiln_status kiln__kdata_es(const kiln_kctx *ctx, const kiln_tensor *t, size_t *es)
{
    *es = kiln_dtype_size(t->dtype);
    if (!*es)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(t->dtype));
    int64_t n = kiln__knumel(t);
    if (n < 0 || (uint64_t)n > t->nbytes / *es || (n && !t->data))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "tensor data does not match its shape");
    return KILN_OK;
}

kiln_status kiln__kcheck(const kiln_kctx *ctx, const kiln_tensor *t, int idx)
{
    if (!t)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input %d", idx);
    if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input %d has invalid rank %d", idx, t->ndim);
    size_t es;
    return kiln__kdata_es(ctx, t, &es);
}

kiln_status kiln__broadcast_shape(const kiln_kctx *ctx, int n, const kiln_tensor *const *ts, int *ndim,
                                  int64_t *dims)
{
    int r = 0;
    for (int i = 0; i < n; i++)
        if (ts[i] && ts[i]->ndim > r)
            r = ts[i]->ndim;
    for (int d = 0; d < r; d++)
        dims[d] = 1;
    for (int i = 0; i < n; i++) {
        if (!ts[i])
            continue;
        int off = r - ts[i]->ndim;
        for (int d = 0; d < ts[i]->ndim; d++) {
            int64_t a = dims[off + d], b = ts[i]->dims[d];
            if (a == b || b == 1)
                continue;
            if (a == 1) {
                dims[off + d] = b;
                continue;
            }
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "cannot broadcast dimension %lld with %lld (axis %d)",
                              (long long)a, (long long)b, off + d);
        }
    }
    *ndim = r;
    return KILN_OK;
}

void kiln__broadcast_strides(const kiln_tensor *t, int ndim, const int64_t *dims, int64_t *strides)
{
    int off = ndim - t->ndim;
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (d < off) {
            strides[d] = 0;
            continue;
        }
        int64_t td = t->dims[d - off];
        strides[d] = (td == 1 && dims[d] != 1) ? 0 : s;
        s *= td;
    }
}

kiln_status kiln__norm_axis(const kiln_kctx *ctx, int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= (rank ? rank : 1))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "axis %lld is out of range for rank %d", (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

kiln_status kiln__krun_with(kiln_kctx *ctx, kiln_kernel_fn fn, int i0, const kiln_tensor *t0, int i1,
                            const kiln_tensor *t1)
{
    const kiln_tensor *in[16];
    if (ctx->n_in > 16)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "too many inputs");
    for (int i = 0; i < ctx->n_in; i++)
        in[i] = i == i0 ? t0 : i == i1 ? t1 : ctx->in[i];
    kiln_kctx sub = *ctx;
    sub.in = in;
    sub.prepared = NULL, sub.prepared_size = 0;
    return fn(&sub);
}
