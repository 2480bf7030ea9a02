/* The CUDA backend (docs/CUDA.md): one instance per execution context with its own stream, cuBLASLt
 * and cuDNN handles, workspace, pinned staging buffer and cache of freed device blocks. Layers are
 * "prepared" by looking the op up in the op tables (cuda_ops_*.c, cuda_conv.c, cuda_gemm.c); their
 * per-shape state (descriptors, algorithms) is kept per node. Built into libkiln_cuda.so only. */
#include "cuda_internal.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define PINNED_BYTES ((size_t)32 << 20)   /* two halves of 16 MiB */
#define NHWC_MIN_BATCH 16

/* ---- errors */

static kiln_status verr(const cu_be *b, kiln_status s, const char *prefix, const char *fmt, va_list ap)
{
    char msg[1024];
    int o = snprintf(msg, sizeof msg, "%s", prefix);
    if (o < 0)
        o = 0;
    vsnprintf(msg + o, sizeof msg - (size_t)o, fmt, ap);
    return b->host->err(s, msg);
}

kiln_status cu_err(const cu_be *b, kiln_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_status r = verr(b, s, "cuda: ", fmt, ap);
    va_end(ap);
    return r;
}

kiln_status cu_kerr(const cu_be *b, const kiln_kctx *ctx, kiln_status s, const char *fmt, ...)
{
    char prefix[300];
    snprintf(prefix, sizeof prefix, "cuda: node '%.120s' (%.60s): ", ctx->node->name, ctx->node->op_type);
    va_list ap;
    va_start(ap, fmt);
    kiln_status r = verr(b, s, prefix, fmt, ap);
    va_end(ap);
    return r;
}

kiln_status cu_check(const cu_be *b, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return KILN_OK;
    return cu_err(b, e == cudaErrorMemoryAllocation ? KILN_ERR_NOMEM : KILN_ERR_INTERNAL, "%s: %s", what,
                  cudaGetErrorString(e));
}

kiln_status cu_check_dnn(const cu_be *b, cudnnStatus_t e, const char *what)
{
    if (e == CUDNN_STATUS_SUCCESS)
        return KILN_OK;
    return cu_err(b, KILN_ERR_INTERNAL, "%s: %s", what, cudnnGetErrorString(e));
}

kiln_status cu_check_lt(const cu_be *b, cublasStatus_t e, const char *what)
{
    if (e == CUBLAS_STATUS_SUCCESS)
        return KILN_OK;
    return cu_err(b, KILN_ERR_INTERNAL, "%s: cuBLAS status %d", what, (int)e);
}

/* ---- device memory: a map of live blocks (pointer -> size); freed blocks are kept by size */

static size_t live_slot(const cu_be *b, const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (size_t)(b->cap_live - 1);
}

static bool live_put(cu_be *b, void *p, size_t n)
{
    if ((b->n_live + 1) * 2 > b->cap_live) {
        int cap = b->cap_live ? b->cap_live * 2 : 256;
        cu_block *old = b->live;
        int oldcap = b->cap_live;
        cu_block *nw = calloc((size_t)cap, sizeof *nw);
        if (!nw)
            return false;
        b->live = nw;
        b->cap_live = cap;
        b->n_live = 0;
        for (int i = 0; i < oldcap; i++)
            if (old[i].p)
                live_put(b, old[i].p, old[i].n);
        free(old);
    }
    size_t i = live_slot(b, p);
    while (b->live[i].p)
        i = (i + 1) & (size_t)(b->cap_live - 1);
    b->live[i] = (cu_block){p, n};
    b->n_live++;
    return true;
}

/* Removes p; returns its size (0 if unknown). Backward-shift deletion keeps probe chains intact. */
static size_t live_take(cu_be *b, const void *p)
{
    if (!b->cap_live)
        return 0;
    size_t m = (size_t)(b->cap_live - 1), i = live_slot(b, p);
    while (b->live[i].p && b->live[i].p != p)
        i = (i + 1) & m;
    if (!b->live[i].p)
        return 0;
    size_t n = b->live[i].n;
    b->live[i] = (cu_block){0};
    b->n_live--;
    for (size_t j = (i + 1) & m; b->live[j].p; j = (j + 1) & m) {
        cu_block e = b->live[j];
        b->live[j] = (cu_block){0};
        b->n_live--;
        live_put(b, e.p, e.n);
    }
    return n;
}

static void pool_release_all(cu_be *b)
{
    b->mem_gen++;   /* captured graphs may use these blocks as scratch */
    for (int i = 0; i < b->n_pool; i++)
        cudaFree(b->pool[i].p);
    b->n_pool = 0;
}

static kiln_status alloc_block(cu_be *b, size_t n, void **p);

/* Device memory; with KILN_CUDA_POISON set every block handed out is filled with 0xFF bytes
 * (float NaN), so that the GPU tests catch outputs a kernel does not write in full. */
kiln_status cu_alloc(cu_be *b, size_t n, void **p)
{
    KILN_TRY(alloc_block(b, n, p));
    if (b->poison)
        return cu_check(b, cudaMemsetAsync(*p, 0xFF, n ? n : 1, b->stream), "poisoning");
    return KILN_OK;
}

static kiln_status alloc_block(cu_be *b, size_t n, void **p)
{
    n = n ? (n + 255) / 256 * 256 : 256;
    *p = NULL;
    for (int i = b->n_pool - 1; i >= 0; i--)
        if (b->pool[i].n == n) {
            void *q = b->pool[i].p;
            b->pool[i] = b->pool[--b->n_pool];
            if (!live_put(b, q, n)) {
                cudaFree(q);
                return cu_err(b, KILN_ERR_NOMEM, "out of memory");
            }
            *p = q;
            return KILN_OK;
        }
    cudaError_t e = cudaMalloc(p, n);
    if (e == cudaErrorMemoryAllocation && b->n_pool) {   /* hand the cached blocks back and retry */
        cudaGetLastError();
        pool_release_all(b);
        e = cudaMalloc(p, n);
    }
    if (e != cudaSuccess) {
        *p = NULL;
        return cu_check(b, e, "allocating device memory");
    }
    if (!live_put(b, *p, n)) {
        cudaFree(*p);
        *p = NULL;
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    }
    return KILN_OK;
}

void cu_free(cu_be *b, void *p)
{
    if (!p)
        return;
    size_t n = live_take(b, p);
    if (n && b->n_pool < 4096) {
        if (b->n_pool == b->cap_pool) {
            int cap = b->cap_pool ? b->cap_pool * 2 : 64;
            cu_block *nw = realloc(b->pool, (size_t)cap * sizeof *nw);
            if (nw) {
                b->pool = nw;
                b->cap_pool = cap;
            }
        }
        if (b->n_pool < b->cap_pool) {
            b->pool[b->n_pool++] = (cu_block){p, n};
            return;
        }
    }
    b->mem_gen++;
    cudaFree(p);
}

kiln_status cu_workspace(cu_be *b, size_t n, void **p)
{
    if (n > b->ws_size) {
        if (b->capturing)
            return cu_not_in_capture(b, "growing the workspace");
        b->mem_gen++;
        /* the old workspace may still be in use by queued work: wait before freeing it */
        if (b->ws) {
            cudaStreamSynchronize(b->stream);
            cudaFree(b->ws);
            b->ws = NULL;
            b->ws_size = 0;
        }
        size_t sz = n < ((size_t)32 << 20) ? ((size_t)32 << 20) : n;
        KILN_TRY(cu_check(b, cudaMalloc(&b->ws, sz), "allocating the workspace"));
        b->ws_size = sz;
    }
    *p = b->ws;
    return KILN_OK;
}

size_t cu_es(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_FLOAT32: case KILN_DT_INT32: case KILN_DT_UINT32: return 4;
    case KILN_DT_INT64: case KILN_DT_UINT64: case KILN_DT_FLOAT64: return 8;
    case KILN_DT_FLOAT16: case KILN_DT_BFLOAT16: case KILN_DT_INT16: case KILN_DT_UINT16: return 2;
    case KILN_DT_UINT8: case KILN_DT_INT8: case KILN_DT_BOOL: return 1;
    default: return 0;
    }
}

void cu_contig_strides(int ndim, const int64_t *dims, int64_t *s)
{
    int64_t acc = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        s[d] = acc;
        acc *= dims[d];
    }
}

int64_t cu_numel(const kiln_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->dims[d];
    return n;
}

static int64_t shape_numel(int ndim, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0 || (dims[d] && n > INT64_MAX / dims[d]))
            return -1;
        n *= dims[d];
    }
    return n;
}

static uint32_t half_flag(kiln_dtype dt, kiln_dtype sdt)
{
    if (dt != KILN_DT_FLOAT32)
        return 0;
    return sdt == KILN_DT_FLOAT16 ? KILN_TENSOR_DEV_F16 : sdt == KILN_DT_BFLOAT16 ? KILN_TENSOR_DEV_BF16 : 0;
}

static kiln_status make_tensor(cu_be *b, const kiln_kctx *ctx, kiln_tensor *t, kiln_dtype dt, kiln_dtype sdt,
                               int ndim, const int64_t *dims, void *data)
{
    int64_t n = shape_numel(ndim, dims);
    uint32_t half = half_flag(dt, sdt);
    size_t es = half ? 2 : cu_es(dt);
    if (n < 0 || !es || ndim > KILN_MAX_DIMS)
        return ctx ? cu_kerr(b, ctx, KILN_ERR_SHAPE, "bad output shape or dtype")
                   : cu_err(b, KILN_ERR_SHAPE, "bad tensor shape or dtype");
    t->dtype = dt;
    t->ndim = ndim;
    memset(t->dims, 0, sizeof t->dims);
    for (int d = 0; d < ndim; d++)
        t->dims[d] = dims[d];
    t->nbytes = (size_t)n * es;
    t->flags = KILN_TENSOR_BORROWED | KILN_TENSOR_ON_DEVICE | half;
    t->data = data;
    return KILN_OK;
}

kiln_status cu_out_s(cu_be *b, kiln_kctx *ctx, int i, kiln_dtype dt, kiln_dtype sdt, int ndim, const int64_t *dims)
{
    kiln_tensor *t = ctx->out[i];
    if (!t)
        return cu_kerr(b, ctx, KILN_ERR_INTERNAL, "output %d has no tensor", i);
    KILN_TRY(make_tensor(b, ctx, t, dt, sdt, ndim, dims, NULL));
    bool fresh = true;
    void *p = ctx->rt && ctx->rt->place ? ctx->rt->place(ctx->rt_user, ctx, i, t->nbytes, &fresh) : NULL;
    if (!p) {
        kiln_status st = cu_alloc(b, t->nbytes, &p);
        if (st != KILN_OK) {
            memset(t, 0, sizeof *t);
            return st;
        }
    }
    t->data = p;
    return KILN_OK;
}

kiln_status cu_out(cu_be *b, kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims)
{
    return cu_out_s(b, ctx, i, dt, dt, ndim, dims);
}

kiln_status cu_out_like(cu_be *b, kiln_kctx *ctx, int i, const kiln_tensor *x, int ndim, const int64_t *dims)
{
    return cu_out_s(b, ctx, i, x->dtype, cu_sdt(x), ndim, dims);
}

kiln_dtype cu_sdt(const kiln_tensor *t)
{
    if (t->flags & KILN_TENSOR_DEV_F16)
        return KILN_DT_FLOAT16;
    if (t->flags & KILN_TENSOR_DEV_BF16)
        return KILN_DT_BFLOAT16;
    return t->dtype;
}

size_t cu_tes(const kiln_tensor *t)
{
    return cu_es(cu_sdt(t));
}

int cu_fdt(kiln_dtype sdt)
{
    return sdt == KILN_DT_FLOAT32 ? CUK_F32 : sdt == KILN_DT_FLOAT16 ? CUK_F16 : sdt == KILN_DT_BFLOAT16 ? CUK_BF16 : -1;
}

kiln_dtype cu_act_sdt(const cu_be *b, const kiln_kctx *ctx, uint32_t mask)
{
    if (b->force_act != KILN_DT_UNDEFINED)
        return b->force_act;
    for (int i = 0; i < ctx->n_in && i < 32; i++)
        if ((mask >> i & 1u) && ctx->in[i] && ctx->in[i]->dtype == KILN_DT_FLOAT32 &&
            (ctx->in[i]->flags & KILN_TENSOR_DEV_HALF))
            return cu_sdt(ctx->in[i]);
    return KILN_DT_FLOAT32;
}

kiln_status cu_as(cu_be *b, const kiln_tensor *x, kiln_dtype sdt, kiln_tensor *tmp, const kiln_tensor **out)
{
    memset(tmp, 0, sizeof *tmp);
    *out = x;
    if (!x || x->dtype != KILN_DT_FLOAT32 || cu_sdt(x) == sdt)
        return KILN_OK;
    KILN_TRY(make_tensor(b, NULL, tmp, KILN_DT_FLOAT32, sdt, x->ndim, x->dims, NULL));
    tmp->flags |= x->flags & KILN_TENSOR_DEV_NHWC;   /* an elementwise conversion keeps the layout */
    void *p;
    KILN_TRY(cu_alloc(b, tmp->nbytes, &p));
    tmp->data = p;
    *out = tmp;
    return cu_check(b, cuk_cast((int)cu_sdt(x), x->data, (int)sdt, p, cu_numel(x), b->stream), "converting");
}

kiln_status cu_relayout(cu_be *b, const kiln_tensor *x, bool nhwc, kiln_tensor *tmp, const kiln_tensor **out)
{
    memset(tmp, 0, sizeof *tmp);
    *out = x;
    if (!x || x->ndim != 4 || cu_is_nhwc(x) == nhwc)
        return KILN_OK;
    KILN_TRY(make_tensor(b, NULL, tmp, x->dtype, cu_sdt(x), 4, x->dims, NULL));
    void *p;
    KILN_TRY(cu_alloc(b, tmp->nbytes, &p));
    tmp->data = p;
    if (nhwc)
        tmp->flags |= KILN_TENSOR_DEV_NHWC;
    *out = tmp;
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    /* NCHW -> NHWC: y[n,h,w,c] = x[n,c,h,w]; NHWC -> NCHW: y[n,c,h,w] = x[n,h,w,c] */
    cuk_shape sh = {.ndim = 4};
    int64_t d_nhwc[4] = {N, H, W, C}, s_nhwc[4] = {C * H * W, W, 1, H * W};
    int64_t d_nchw[4] = {N, C, H, W}, s_nchw[4] = {H * W * C, 1, W * C, C};
    for (int i = 0; i < 4; i++) {
        sh.dims[i] = nhwc ? d_nhwc[i] : d_nchw[i];
        sh.str[0][i] = nhwc ? s_nhwc[i] : s_nchw[i];
    }
    return cu_check(b, cuk_strided_copy(cu_tes(x), x->data, 0, p, cu_numel(x), &sh, b->stream), "relayout");
}

kiln_status cu_tmp(cu_be *b, kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *dims)
{
    memset(t, 0, sizeof *t);
    KILN_TRY(make_tensor(b, NULL, t, dt, dt, ndim, dims, NULL));
    void *p;
    KILN_TRY(cu_alloc(b, t->nbytes, &p));
    t->data = p;
    return KILN_OK;
}

void cu_tmp_free(cu_be *b, kiln_tensor *t)
{
    if (t->data)
        cu_free(b, t->data);
    memset(t, 0, sizeof *t);
}

/* ---- per-layer state */

void *cu_state_get(cu_be *b, const kiln_node *n, const int64_t *key, int nkey)
{
    for (int i = 0; i < b->n_states; i++) {
        cu_state *s = &b->states[i];
        if (s->node == n && !memcmp(s->key, key, sizeof(int64_t) * (size_t)nkey))
            return s->st;
    }
    return NULL;
}

typedef struct layer_scalar {
    float *dev;
    float val;
} layer_scalar;

static void layer_scalar_free(void *p)
{
    layer_scalar *s = p;
    if (s->dev)
        cudaFree(s->dev);
    free(s);
}

kiln_status cu_layer_scalar(cu_be *b, const kiln_kctx *ctx, int slot, float v, const float **out)
{
    const int64_t key[1] = {slot};
    layer_scalar *s = cu_state_get(b, ctx->node, key, 1);
    *out = NULL;
    if (s && s->val == v) {
        *out = s->dev;
        return KILN_OK;
    }
    if (b->capturing)
        return KILN_OK;
    if (!s) {
        if (!(s = calloc(1, sizeof *s)))
            return cu_err(b, KILN_ERR_NOMEM, "out of memory");
        kiln_status st = cu_check(b, cudaMalloc((void **)&s->dev, sizeof(float)), "allocating a layer's scalar");
        if (st != KILN_OK) {
            layer_scalar_free(s);
            return st;
        }
        KILN_TRY(cu_state_put(b, ctx->node, key, 1, s, layer_scalar_free));   /* freed there on failure */
    }
    KILN_TRY(cu_check(b, cudaMemcpy(s->dev, &v, sizeof v, cudaMemcpyHostToDevice), "setting a layer's scalar"));
    s->val = v;
    *out = s->dev;
    return KILN_OK;
}

kiln_status cu_state_put(cu_be *b, const kiln_node *n, const int64_t *key, int nkey, void *st, void (*destroy)(void *))
{
    if (nkey > 24) {
        destroy(st);
        return cu_err(b, KILN_ERR_INTERNAL, "layer state key too long");
    }
    for (int i = 0; i < b->n_states; i++)   /* one state per (node, key[0]): a new shape replaces the old */
        if (b->states[i].node == n && b->states[i].key[0] == key[0]) {
            b->mem_gen++;   /* the old state's device memory (a Resize's tables, a filter copy) may be in a captured graph */
            b->states[i].destroy(b->states[i].st);
            b->states[i] = b->states[--b->n_states];
            break;
        }
    if (b->n_states == b->cap_states) {
        int cap = b->cap_states ? b->cap_states * 2 : 64;
        cu_state *nw = realloc(b->states, (size_t)cap * sizeof *nw);
        if (!nw) {
            destroy(st);
            return cu_err(b, KILN_ERR_NOMEM, "out of memory");
        }
        b->states = nw;
        b->cap_states = cap;
    }
    cu_state *s = &b->states[b->n_states++];
    memset(s, 0, sizeof *s);
    s->node = n;
    memcpy(s->key, key, sizeof(int64_t) * (size_t)nkey);
    s->st = st;
    s->destroy = destroy;
    return KILN_OK;
}

/* ---- small shared helpers */

bool cu_fused_act(const cu_be *b, const kiln_node *n, int *act, float *alpha, float *beta)
{
    kiln_fused_act a;
    if (!b->host->fused_act(n, &a))
        return false;
    static const int map[KILN_FUSED_ACT_COUNT] = {
        [KILN_FUSED_NONE] = CUK_IDENTITY, [KILN_FUSED_RELU] = CUK_RELU, [KILN_FUSED_CLIP] = CUK_CLIP,
        [KILN_FUSED_LEAKYRELU] = CUK_LEAKYRELU, [KILN_FUSED_SIGMOID] = CUK_SIGMOID,
        [KILN_FUSED_HARDSIGMOID] = CUK_HARDSIGMOID, [KILN_FUSED_HARDSWISH] = CUK_HARDSWISH,
        [KILN_FUSED_SILU] = CUK_SILU, [KILN_FUSED_GELU] = CUK_GELU, [KILN_FUSED_GELU_TANH] = CUK_GELU_TANH,
        [KILN_FUSED_TANH] = CUK_TANH, [KILN_FUSED_HARDSWISH_AFFINE] = CUK_HARDSWISH_AFFINE,
    };
    if ((int)a.kind < 0 || a.kind >= KILN_FUSED_ACT_COUNT)
        return false;
    *act = map[a.kind];
    *alpha = a.alpha;
    *beta = a.beta;
    return true;
}

bool cu_axis(int64_t axis, int r, int *out)
{
    if (axis < -r || axis >= (r ? r : 1))
        return false;
    *out = (int)(axis < 0 ? axis + r : axis);
    return true;
}

bool cu_broadcast(int n, const kiln_tensor *const *ts, int *ndim, int64_t *dims)
{
    int r = 0;
    for (int k = 0; k < n; k++)
        r = ts[k]->ndim > r ? ts[k]->ndim : r;
    for (int d = 0; d < r; d++) {
        int64_t v = 1;
        for (int k = 0; k < n; k++) {
            int off = r - ts[k]->ndim;
            if (d < off)
                continue;
            int64_t x = ts[k]->dims[d - off];
            if (x == 1)
                continue;
            if (v != 1 && v != x)
                return false;
            v = x;
        }
        /* a zero-size dim among ones */
        for (int k = 0; k < n; k++) {
            int off = r - ts[k]->ndim;
            if (d >= off && ts[k]->dims[d - off] == 0)
                v = 0;
        }
        dims[d] = v;
    }
    *ndim = r;
    return true;
}

bool cu_shape_of(int n, const kiln_tensor *const *ts, int ndim, const int64_t *dims, cuk_shape *sh)
{
    memset(sh, 0, sizeof *sh);
    /* merge adjacent dims where every operand is contiguous or broadcast the same way */
    int64_t md[KILN_MAX_DIMS], ms[3][KILN_MAX_DIMS];
    int m = 0;
    int64_t str[3][KILN_MAX_DIMS];
    for (int k = 0; k < n; k++) {
        int off = ndim - ts[k]->ndim;
        int64_t s = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            int64_t x = d >= off ? ts[k]->dims[d - off] : 1;
            str[k][d] = x == 1 ? 0 : s;
            s *= x;
        }
    }
    for (int d = 0; d < ndim; d++) {
        if (dims[d] == 1)
            continue;
        bool merge = m > 0;
        for (int k = 0; k < n && merge; k++)
            merge = str[k][d] * dims[d] == ms[k][m - 1] || (str[k][d] == 0 && ms[k][m - 1] == 0);
        if (merge) {
            md[m - 1] *= dims[d];
            for (int k = 0; k < n; k++)
                ms[k][m - 1] = str[k][d];
        } else {
            md[m] = dims[d];
            for (int k = 0; k < n; k++)
                ms[k][m] = str[k][d];
            m++;
        }
    }
    if (m > CUK_MAX_DIMS)
        return false;
    sh->ndim = m ? m : 1;
    if (!m) {
        sh->dims[0] = 1;
        return true;
    }
    for (int d = 0; d < m; d++) {
        sh->dims[d] = md[d];
        for (int k = 0; k < n; k++)
            sh->str[k][d] = ms[k][d];
    }
    return true;
}

int cu_host_ints(const kiln_kctx *ctx, int i, int64_t *v, int cap)
{
    const kiln_tensor *t = i < ctx->n_in ? ctx->in[i] : NULL;
    if (!t || (t->flags & KILN_TENSOR_ON_DEVICE))
        return -1;
    int64_t n = cu_numel(t);
    if (n > cap)
        return -1;
    for (int64_t k = 0; k < n; k++) {
        if (t->dtype == KILN_DT_INT64)
            v[k] = ((const int64_t *)t->data)[k];
        else if (t->dtype == KILN_DT_INT32)
            v[k] = ((const int32_t *)t->data)[k];
        else
            return -1;
    }
    return (int)n;
}

bool cu_q_f32(const kiln_bk_query *q, uint32_t mask)
{
    if (!q->in_dtype)
        return true;
    for (int i = 0; i < q->n_in && i < 32; i++)
        if (((mask >> i) & 1u) && q->in_dtype[i] != KILN_DT_UNDEFINED && q->in_dtype[i] != KILN_DT_FLOAT32)
            return false;
    return true;
}

/* ---- the op tables */

static const cu_op *const tables[] = {cu_ops_basic, cu_ops_shape,    cu_ops_nn,   cu_ops_conv,
                                      cu_ops_gemm,  cu_ops_upsample, cu_ops_int8, cu_ops_convpool};

static const cu_op *find_op(kiln_op op)
{
    for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
        for (const cu_op *o = tables[t]; o->fn; o++)
            if (o->op == op)
                return o;
    return NULL;
}

/* A layer the builder marked for an emulated low-bit format (core/numfmt.h: "kiln_wq" weight format,
 * "kiln_aq" activation rounding; FP8 / NVFP4 / MXFP4 / INT4) that this module has no kernel for (all but
 * the FP8 layers of cuda_fp8.c and the 4-bit GEMMs and Gathers of cuda_fp4.c): running its float weights
 * here would silently compute another precision, so it stays on the CPU backend (a visible CPU fallback). */
static bool lowbit_layer(const cu_be *b, const kiln_node *n)
{
    return (b->host->attr_s(n, "kiln_wq", NULL) != NULL || b->host->attr_s(n, "kiln_aq", NULL) != NULL) &&
           !cu_fp8_layer(b, n, NULL) && !cu_fp4_layer(b, n, NULL);
}

/* A Gather over a 4-bit embedding table runs cu_fp4_gather (the table read only packed: input 0 on the host) */
static const cu_op fp4_gather_op = {KILN_OP_Gather, cu_fp4_gather, NULL, NULL, 1u};

/* The op a layer runs */
static const cu_op *layer_op(const cu_be *b, const kiln_node *n)
{
    return n->op == KILN_OP_Gather && cu_fp4_layer(b, n, NULL) ? &fp4_gather_op : find_op(n->op);
}

static bool cuda_supports(const kiln_backend *be, const kiln_bk_query *q)
{
    const cu_op *o = q->node ? find_op(q->node->op) : NULL;
    if (!o || lowbit_layer(cu_of(be), q->node))
        return false;
    if (q->layout != KILN_LAYOUT_ANY && q->layout != KILN_LAYOUT_NCHW)
        return false;
    if (q->precision != KILN_DT_UNDEFINED && q->precision != KILN_DT_FLOAT32)
        return false;
    return !o->supports || o->supports(q);
}

static bool mod_accepts(kiln_backend *be, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    const cu_op *o = find_op(n->op);
    cu_be *b = cu_of(be);
    if (!o || lowbit_layer(b, n) ||
        (cu_fp8_layer(b, n, NULL) && !cu_fp8_accepts(b, n, n_in, in)))
        return false;
    if (cu_fp4_layer(b, n, NULL))
        return cu_fp4_accepts(b, n, n_in, in);
    return !o->accepts || o->accepts(b, n, n_in, in);
}

static uint32_t mod_host_inputs(kiln_backend *be, const kiln_node *n)
{
    const cu_op *o = find_op(n->op);
    /* an FP8 or 4-bit layer runs from its weight packed by the CPU backend: the engine's blob, else packed on
     * the host from the float32 weight (cuda_lowbit.c), which is then never copied to the device (a 4-bit
     * Gather's table: input 0) */
    cu_be *b = cu_of(be);
    if (cu_fp4_layer(b, n, NULL) && n->op == KILN_OP_Gather)
        return fp4_gather_op.host_inputs;
    return (o ? o->host_inputs : 0) | (cu_fp8_layer(b, n, NULL) || cu_fp4_layer(b, n, NULL) ? 2u : 0u);
}

static bool mod_reads_blob(kiln_backend *be, const kiln_node *n, const void *blob, size_t size)
{
    return cu_fp8_reads_blob(cu_of(be), n, blob, size) || cu_fp4_reads_blob(cu_of(be), n, blob, size);
}

static uint64_t mod_own_weight_bytes(kiln_backend *be) { return cu_of(be)->own_weight_bytes; }
static void mod_fp8_counts(kiln_backend *be, unsigned long long c[KILN_FP8_COUNTS])
{
    c[0] = cu_of(be)->fp8_passes;
    c[1] = cu_of(be)->fp8_fed;
    c[2] = cu_of(be)->fp8_held;
    c[3] = cu_of(be)->fp8_lt_gelu_n;
}

static kiln_status cuda_buf_alloc(const kiln_backend *be, size_t size, kiln_buffer *buf)
{
    cu_be *b = cu_of(be);
    buf->be = be;
    buf->size = size;
    return cu_alloc(b, size, &buf->data);
}

static void cuda_buf_free(const kiln_backend *be, kiln_buffer *buf)
{
    cu_free(cu_of(be), buf->data);
    buf->data = NULL;
    buf->size = 0;
}

static kiln_status cuda_buf_copy(const kiln_backend *be, void *dst, const void *src, size_t n)
{
    cu_be *b = cu_of(be);
    if (!n)
        return KILN_OK;
    if (b->capturing)
        return cu_not_in_capture(b, "a synchronous copy");
    KILN_TRY(cu_check(b, cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, b->stream), "copying"));
    return cu_check(b, cudaStreamSynchronize(b->stream), "copying");
}

static kiln_status cuda_prepare(const kiln_backend *be, const kiln_node *n, const kiln_tensor *const *consts,
                                kiln_layer *out)
{
    (void)consts;
    const cu_op *o = find_op(n->op);
    if (!o)
        return cu_err(cu_of(be), KILN_ERR_UNSUPPORTED, "no CUDA kernel for %s node '%s'", n->op_type, n->name);
    *out = (kiln_layer){.be = be, .node = n, .kernel = (int)n->op};
    return KILN_OK;
}

static kiln_status cuda_load(const kiln_backend *be, const kiln_node *n, int kernel, const void *blob, size_t size,
                             kiln_layer *out)
{
    (void)kernel;
    (void)blob;
    if (size)
        return cu_err(cu_of(be), KILN_ERR_PARSE, "node '%s': the CUDA backend stores no prepared data yet", n->name);
    return cuda_prepare(be, n, NULL, out);
}

static void cuda_release(const kiln_backend *be, kiln_layer *l)
{
    (void)be;
    l->blob = NULL;
    l->blob_size = 0;
}

/* The inputs an op reads in NHWC (bit i: input i); every other NHWC input is handed over in its
 * ONNX layout. Elementwise ops keep the layout (k_binary when both inputs share it). */
static uint32_t nhwc_inputs(kiln_op op)
{
    switch (op) {
    case KILN_OP_Conv: case KILN_OP_FusedConv: return 1u | 8u;
    case KILN_OP_FusedConvPool: return 1u;   /* cuda_convpool.c reads x by its strides */
    case KILN_OP_MaxPool: case KILN_OP_AveragePool: case KILN_OP_GlobalAveragePool: return 1u;
    case KILN_OP_Resize: case KILN_OP_Upsample: case KILN_OP_ConvTranspose: return 1u;
    case KILN_OP_Add: case KILN_OP_Sub: case KILN_OP_Mul: case KILN_OP_Div: case KILN_OP_Max: case KILN_OP_Min:
    case KILN_OP_Pow: return 3u;
    case KILN_OP_Relu: case KILN_OP_Sigmoid: case KILN_OP_Tanh: case KILN_OP_Exp: case KILN_OP_Log: case KILN_OP_Sqrt:
    case KILN_OP_Neg: case KILN_OP_Abs: case KILN_OP_Erf: case KILN_OP_Reciprocal: case KILN_OP_Floor:
    case KILN_OP_Ceil: case KILN_OP_Softplus: case KILN_OP_Sin: case KILN_OP_Cos: case KILN_OP_Round:
    case KILN_OP_Sign: case KILN_OP_HardSwish: case KILN_OP_HardSigmoid: case KILN_OP_LeakyRelu: case KILN_OP_Elu:
    case KILN_OP_Selu: case KILN_OP_Gelu: case KILN_OP_Clip: return 1u;
    /* the INT8 layers (cuda_int8.c): Q / DQ keep the layout, QLinearAdd takes B as A holds it, the convolutions
     * read channels-last (and QLinearConvAdd its residual, input 9; QLinearConvSum its second input, 9) */
    case KILN_OP_QuantizeLinear: case KILN_OP_DequantizeLinear: case KILN_OP_QLinearConv: case KILN_OP_QLookup:
        return 1u;
    case KILN_OP_QLinearAdd: return 1u | 8u;
    case KILN_OP_QLinearConvAdd: return 1u | (1u << 9);
    case KILN_OP_QLinearConvSum: return 1u | (1u << 9);   /* x and x2 */
    default: return 0;
    }
}

/* Runs the op on its inputs in the storage and layout it takes: NHWC inputs it does not read so are
 * transposed back first. With KILN_CUDA_ACT set (tests), a float32 input 0 held in float32 (a graph
 * input, a host result) is first converted to the forced storage (and, 4-D for an op that reads
 * NHWC, to NHWC), so that every op's half and channels-last paths are exercised. */
static kiln_status run_forced(cu_be *b, const cu_op *o, kiln_kctx *ctx)
{
    uint32_t aware = nhwc_inputs(ctx->node->op);
    bool change = false;
    for (int i = 0; i < ctx->n_in && i < 16; i++)
        change |= cu_is_nhwc(ctx->in[i]) && !(aware >> i & 1u);
    const kiln_tensor *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    bool to_nhwc = (aware & 1u) && b->nhwc == 1 && x && x->ndim == 4 && !cu_is_nhwc(x);
    bool force = b->force_act != KILN_DT_UNDEFINED && x && x->dtype == KILN_DT_FLOAT32 &&
                 (x->flags & KILN_TENSOR_ON_DEVICE) && (cu_sdt(x) != b->force_act || to_nhwc);
    if ((!change && !force) || ctx->n_in > 16)
        return o->fn(b, ctx);
    const kiln_tensor *in[16];
    kiln_tensor tmp[17];
    memset(tmp, 0, sizeof tmp);
    kiln_status st = KILN_OK;
    for (int i = 0; i < ctx->n_in; i++) {
        in[i] = ctx->in[i];
        if (st == KILN_OK && cu_is_nhwc(in[i]) && !(aware >> i & 1u))
            st = cu_relayout(b, in[i], false, &tmp[i], &in[i]);
    }
    if (st == KILN_OK && force) {
        st = cu_as(b, in[0], b->force_act, &tmp[16], &in[0]);
        if (st == KILN_OK && to_nhwc) {
            kiln_tensor t2;
            st = cu_relayout(b, in[0], true, &t2, &in[0]);
            if (t2.data) {   /* keep one scratch per slot: free the storage copy now (stream order) */
                cu_tmp_free(b, &tmp[16]);
                tmp[16] = t2;
                in[0] = &tmp[16];
            }
        }
    }
    kiln_kctx c2 = *ctx;
    c2.in = in;
    if (st == KILN_OK)
        st = o->fn(b, &c2);
    for (int i = 0; i < 17; i++)
        cu_tmp_free(b, &tmp[i]);
    return st;
}

/* KILN_CUDA_PROFILE=layers: one line per layer of the first profiled run (name, op, output 0's dims, ms) */
static void print_layer(const kiln_layer *l, const kiln_kctx *ctx, float ms)
{
    char dims[96] = "";
    const kiln_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    for (int i = 0, n = 0; y && i < y->ndim && n < (int)sizeof dims - 12; i++)
        n += snprintf(dims + n, sizeof dims - (size_t)n, "%s%lld", i ? "x" : "", (long long)y->dims[i]);
    fprintf(stderr, "kiln cuda layer %-40s %-14s %-22s %9.3f ms\n", l->node->name ? l->node->name : "?",
            l->node->op_type, dims, ms);
}

static kiln_status cuda_run(const kiln_backend *be, const kiln_layer *l, kiln_kctx *ctx)
{
    cu_be *b = cu_of(be);
    const cu_op *o = layer_op(b, l->node);
    if (!o)
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "no CUDA kernel");
    bool prof = b->profile && b->runs >= 3 && !b->capturing;   /* past the planning run and algorithm searches */
    ctx->prepared = l->blob;   /* a blob of the engine's CPU layer this module runs from (reads_blob) */
    ctx->prepared_size = l->blob_size;
    if (prof)
        cudaEventRecord(b->prof[0], b->stream);
    kiln_status st = run_forced(b, o, ctx);
    cu_fp8_wrote(b, ctx, st);   /* also after a failure: the outputs may be half written */
    KILN_TRY(st);
    if (prof) {   /* developer tool: serializes the layers */
        float ms = 0;
        cudaEventRecord(b->prof[1], b->stream);
        if (cudaEventSynchronize(b->prof[1]) == cudaSuccess &&
            cudaEventElapsedTime(&ms, b->prof[0], b->prof[1]) == cudaSuccess) {
            b->op_ms[l->node->op] += ms;
            if (b->profile_layers && b->runs == 3)
                print_layer(l, ctx, ms);
            if (!b->op_n[l->node->op]++)
                snprintf(b->op_name[l->node->op], sizeof b->op_name[0], "%s", l->node->op_type);
        }
    }
    /* launch errors surface at once (asynchronous faults at the next synchronize) */
    return cu_check(b, cudaGetLastError(), ctx->node->op_type);
}

float cu_time_median3(cu_be *b, bool (*run)(void *arg), void *arg)
{
    cudaEvent_t ev[2] = {NULL, NULL};
    float t[3] = {-1, -1, -1};
    if (cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess && run(arg))
        for (int i = 0; i < 3; i++) {
            cudaEventRecord(ev[0], b->stream);
            if (!run(arg))
                break;
            cudaEventRecord(ev[1], b->stream);
            if (cudaEventSynchronize(ev[1]) != cudaSuccess || cudaEventElapsedTime(&t[i], ev[0], ev[1]) != cudaSuccess) {
                t[i] = -1;
                break;
            }
        }
    for (int i = 0; i < 2; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    cudaGetLastError();   /* a failed attempt leaves nothing behind */
    if (t[0] < 0 || t[1] < 0 || t[2] < 0)
        return -1;
    float lo = fminf(t[0], fminf(t[1], t[2])), hi = fmaxf(t[0], fmaxf(t[1], t[2]));
    return t[0] + t[1] + t[2] - lo - hi;
}

void cu_part_mark(cu_be *b, int base, int k, int n)
{
    if (!b->profile || b->runs < 3 || b->capturing)
        return;
    cudaEventRecord(b->part_ev[k], b->stream);
    if (k == n) {
        cudaEventSynchronize(b->part_ev[k]);
        for (int i = 0; i < n; i++) {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, b->part_ev[i], b->part_ev[i + 1]) == cudaSuccess)
                b->part_ms[base + i] += ms;
        }
    }
}

static kiln_status cuda_synchronize(const kiln_backend *be)
{
    cu_be *b = cu_of(be);
    if (b->capturing)   /* the end of a captured run: the runtime ends the capture and launches the graph */
        return b->cap_status;
    b->runs++;
    return cu_check(b, cudaStreamSynchronize(b->stream), "synchronizing");
}

static const kiln_backend_ops cuda_ops = {
    .name = "cuda",
    .supports = cuda_supports,
    .buf_alloc = cuda_buf_alloc,
    .buf_free = cuda_buf_free,
    .buf_copy = cuda_buf_copy,
    .prepare = cuda_prepare,
    .load = cuda_load,
    .release = cuda_release,
    .run = cuda_run,
    .synchronize = cuda_synchronize,
};

/* ---- the module's entry points */

static void print_profile(const cu_be *b)
{
    double total = 0;
    for (int op = 0; op < KILN_OP_COUNT; op++)
        total += b->op_ms[op];
    fprintf(stderr, "kiln cuda profile (GPU time per op type, all runs of this context):\n");
    for (int op = 0; op < KILN_OP_COUNT; op++)
        if (b->op_n[op])
            fprintf(stderr, "  %-22s %8ld layers %10.3f ms  %5.1f%%\n", b->op_name[op], b->op_n[op], b->op_ms[op],
                    total > 0 ? 100.0 * b->op_ms[op] / total : 0.0);
    fprintf(stderr, "  %-22s %8s        %10.3f ms   (%ld runs after the first 3)\n", "total", "", total,
            b->runs > 3 ? b->runs - 3 : 0);
    fprintf(stderr, "  Attention parts: QK^T %.3f ms, softmax %.3f ms, PV %.3f ms\n", b->part_ms[0], b->part_ms[1],
            b->part_ms[2]);
    if (b->part_ms[4] > 0 || b->part_ms[5] > 0)
        fprintf(stderr, "  FP8 GEMM parts: activation quantization %.3f ms, GEMM %.3f ms\n", b->part_ms[4],
                b->part_ms[5]);
}

static void mod_destroy(kiln_backend *be)
{
    if (!be)
        return;
    cu_be *b = cu_of(be);
    cu_tc_close(b);
    if (b->profile && b->op_ms)
        print_profile(b);
    for (int i = 0; i < 2; i++)
        if (b->prof[i])
            cudaEventDestroy(b->prof[i]);
    for (int i = 0; i < 4; i++)
        if (b->part_ev[i])
            cudaEventDestroy(b->part_ev[i]);
    free(b->op_ms);
    free(b->op_n);
    free(b->op_name);
    if (b->stream)
        cudaStreamSynchronize(b->stream);
    cu_fp8_forget(b);
    for (int i = 0; i < b->n_states; i++)
        b->states[i].destroy(b->states[i].st);
    free(b->states);
    cu_cg_free_all(b);
    for (int i = 0; i < 3; i++)
        if (b->launch_ev[i])
            cudaEventDestroy(b->launch_ev[i]);
    pool_release_all(b);
    free(b->pool);
    for (int i = 0; i < b->cap_live; i++)
        if (b->live[i].p)
            cudaFree(b->live[i].p);
    free(b->live);
    if (b->ws)
        cudaFree(b->ws);
    if (b->bad)
        cudaFree(b->bad);
    if (b->pinned)
        cudaFreeHost(b->pinned);
    for (int i = 0; i < 2; i++)
        if (b->staged[i])
            cudaEventDestroy(b->staged[i]);
    if (b->conv_verbose && b->cg_configs)
        fprintf(stderr, "kiln cuda: cuDNN graph engines chosen for %d configurations: heuristics %.2f s, %d plans "
                "finalized in %.2f s, timed in %.2f s\n", b->cg_configs, b->cg_heur_s, b->cg_plans, b->cg_fin_s,
                b->cg_time_s);
    if (b->lt)
        cublasLtDestroy(b->lt);
    if (b->dnn)
        cudnnDestroy(b->dnn);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    free(b);
}

static void mod_describe(kiln_backend *be, char *buf, size_t n);

static kiln_status mod_create(const kiln_devmod_host *host, const kiln_devmod_opts *o, kiln_backend **out)
{
    *out = NULL;
    cu_be *b = calloc(1, sizeof *b);
    if (!b)
        return host->err(KILN_ERR_NOMEM, "out of memory");
    b->host = host;
    b->base.ops = &cuda_ops;
    b->base.state = b;
    b->device = o->device;
    b->tf32 = o->allow_tf32;
    const char *poison = getenv("KILN_CUDA_POISON");
    b->poison = poison && poison[0] && strcmp(poison, "0");
    const char *unv = getenv("KILN_CUDA_UNVERIFIED");   /* code no GPU has run yet (INT8 layers): test_gpu */
    b->unverified = unv && !strcmp(unv, "1");
    /* channels-last half convolutions: measured faster at batch 256, slower at batch 1 (docs/CUDA.md);
     * KILN_CUDA_NHWC=0 never, =1 always, unset from batch NHWC_MIN_BATCH on */
    const char *cg = getenv("KILN_CUDA_CONV_GRAPH");   /* half convolutions through cuDNN's graph API */
    b->conv_graph = !cg || strcmp(cg, "0");
    b->conv_verbose = cg && !strcmp(cg, "2");
    const char *sc = getenv("KILN_CUDA_SMALLC");   /* kiln's own kernel for half convolutions over few channels */
    b->conv_smallc = !sc || strcmp(sc, "0");
    /* with the graph API NHWC won at batch 1 too (0.38 against 0.91 ms, ResNet-50 FP16) */
    const char *nhwc = getenv("KILN_CUDA_NHWC");
    b->nhwc = !nhwc || !nhwc[0] ? (b->conv_graph ? 1 : NHWC_MIN_BATCH) : !strcmp(nhwc, "0") ? 0 : 1;
    /* half attention in one kernel (KILN_CUDA_FUSED_ATTN=0: two GEMMs and the softmax) */
    const char *lc = getenv("KILN_CUDA_GEMM_CANDIDATES");   /* float / half GEMMs (FP8: 24) */
    b->lt_candidates = lc && atoi(lc) >= 1 ? (atoi(lc) > 32 ? 32 : atoi(lc)) : 8;
    const char *fa = getenv("KILN_CUDA_FUSED_ATTN");
    b->fused_attn = !fa || strcmp(fa, "0");
    const char *ag = getenv("KILN_CUDA_ATTN_GRID");   /* unset: as many blocks as fit at once, each walking jobs */
    b->attn_grid = ag && !strcmp(ag, "jobs") ? -1 : ag && atoi(ag) > 0 ? atoi(ag) : 0;
    /* its output: unset 16-byte pieces through shared memory with the FP8 feed where marked, =pieces without the feed,
     * =rows from registers two values at a time (no feed) */
    const char *as = getenv("KILN_CUDA_ATTN_STORE");
    b->attn_store = as && !strcmp(as, "rows") ? CU_ATTN_ROWS : as && !strcmp(as, "pieces") ? CU_ATTN_PIECES
                                                                                          : CU_ATTN_FEED;
    const char *act = getenv("KILN_CUDA_ACT");
    b->force_act = cu_half_dt(act, KILN_DT_UNDEFINED);
    const char *f8 = getenv("KILN_CUDA_FP8_OUT");   /* FP8 GEMMs' output storage (cuda_fp8.c) */
    b->fp8_out = f8 && !strcmp(f8, "fp32") ? KILN_DT_FLOAT32 : cu_half_dt(f8, KILN_DT_FLOAT16);
    const char *i8 = getenv("KILN_CUDA_INT8_OUT");   /* INT8 layers' float outputs (cuda_int8.c) */
    b->int8_out = cu_half_dt(i8, KILN_DT_FLOAT32);
    if (b->int8_out != KILN_DT_FLOAT32 && host->log)   /* a precision no engine asked for: said, not silent */
        host->log(KILN_LOG_WARN, b->int8_out == KILN_DT_FLOAT16
                                     ? "KILN_CUDA_INT8_OUT=fp16: INT8 layers' float32 outputs are held in FP16 on the GPU"
                                     : "KILN_CUDA_INT8_OUT=bf16: INT8 layers' float32 outputs are held in BF16 on the GPU");
    const char *fa8 = getenv("KILN_CUDA_FP8_FAST_ACCUM");
    /* docs/CUDA.md "FP8 GEMMs": 1 (in FP8 MatMul / Gemm layers) by default, 0 with =0, 2 with =1 (also in the GEMMs
     * of FP8 1x1 convolutions) */
    b->fp8_fast_accum = fa8 && !strcmp(fa8, "0") ? 0 : fa8 && !strcmp(fa8, "1") ? 2 : 1;
    const char *feed = getenv("KILN_CUDA_FP8_FEED");
    b->fp8_feed = !(feed && !strcmp(feed, "0"));
    const char *ltg = getenv("KILN_CUDA_FP8_LT_GELU");
    b->fp8_lt_gelu = ltg && !strcmp(ltg, "0") ? 0 : ltg && !strcmp(ltg, "tanh") ? 1 : 2;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= o->device) {
        kiln_status st = cu_err(b, KILN_ERR_UNSUPPORTED, "no usable NVIDIA GPU (%s)",
                                e != cudaSuccess ? cudaGetErrorString(e) : "no device with that ordinal");
        free(b);
        return st;
    }
    kiln_status st = cu_check(b, cudaSetDevice(o->device), "selecting the GPU");
    if (st == KILN_OK)
        st = cu_check(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "creating a stream");
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtCreate(&b->lt), "cublasLtCreate");
    if (st == KILN_OK)
        st = cu_check_dnn(b, cudnnCreate(&b->dnn), "cudnnCreate");
    if (st == KILN_OK)
        st = cu_check_dnn(b, cudnnSetStream(b->dnn, b->stream), "cudnnSetStream");
    if (st == KILN_OK)
        st = cu_check(b, cudaMallocHost(&b->pinned, PINNED_BYTES), "allocating pinned memory");
    for (int i = 0; i < 2 && st == KILN_OK; i++)
        st = cu_check(b, cudaEventCreateWithFlags(&b->staged[i], cudaEventDisableTiming), "creating an event");
    if (st == KILN_OK) {
        b->pinned_size = PINNED_BYTES;
        st = cu_check(b, cudaMalloc((void **)&b->bad, sizeof(int)), "allocating device memory");
    }
    if (st == KILN_OK)
        st = cu_check(b, cudaMemsetAsync(b->bad, 0, sizeof(int), b->stream), "clearing");
    const char *prof = getenv("KILN_CUDA_PROFILE");
    if (st == KILN_OK && prof && prof[0] && strcmp(prof, "0")) {
        b->op_ms = calloc(KILN_OP_COUNT, sizeof *b->op_ms);
        b->op_n = calloc(KILN_OP_COUNT, sizeof *b->op_n);
        b->op_name = calloc(KILN_OP_COUNT, sizeof *b->op_name);
        b->profile = b->op_ms && b->op_n && b->op_name;
        b->profile_layers = !strcmp(prof, "layers");
        for (int i = 0; i < 2 && st == KILN_OK; i++)
            st = cu_check(b, cudaEventCreate(&b->prof[i]), "creating an event");
        for (int i = 0; i < 4 && st == KILN_OK; i++)
            st = cu_check(b, cudaEventCreate(&b->part_ev[i]), "creating an event");
    }
    if (st != KILN_OK) {
        mod_destroy(&b->base);
        return st;
    }
    char sig[512];
    mod_describe(&b->base, sig, sizeof sig);
    cu_tc_open(b, sig);
    *out = &b->base;
    return KILN_OK;
}

static kiln_status mod_alloc(kiln_backend *be, size_t n, void **p) { return cu_alloc(cu_of(be), n, p); }

static kiln_status mod_shared_alloc(kiln_backend *be, size_t n, void **p)
{
    return cu_check(cu_of(be), cudaMalloc(p, n ? n : 1), "allocating device memory for weights");
}

static unsigned long weights_gen;

unsigned long cu_weights_gen(void) { return __atomic_load_n(&weights_gen, __ATOMIC_ACQUIRE); }

static kiln_status mod_canonical(kiln_backend *be, const kiln_tensor *t, kiln_tensor *out)
{
    const kiln_tensor *r;
    KILN_TRY(cu_relayout(cu_of(be), t, false, out, &r));
    if (r == t) {   /* already in its ONNX layout: a plain copy */
        cu_be *b = cu_of(be);
        *out = *t;
        KILN_TRY(cu_alloc(b, t->nbytes ? t->nbytes : 1, &out->data));
        return cu_check(b, cudaMemcpyAsync(out->data, t->data, t->nbytes, cudaMemcpyDeviceToDevice, b->stream), "copy");
    }
    return KILN_OK;
}

static void mod_shared_free(void *p)
{
    __atomic_add_fetch(&weights_gen, 1, __ATOMIC_ACQ_REL);
    if (p)
        cudaFree(p);
}
static void mod_free(kiln_backend *be, void *p) { cu_free(cu_of(be), p); }

/* Host <-> device through the pinned staging buffer, double-buffered: the host copies one half
 * while the DMA engine moves the other. Both return once the whole copy is done. */
static kiln_status mod_h2d(kiln_backend *be, void *dst, const void *src, size_t n)
{
    cu_be *b = cu_of(be);
    cu_fp8_forget(b);
    if (b->capturing)
        return cu_not_in_capture(b, "a copy to the GPU");
    size_t half = b->pinned_size / 2;
    int i = 0;
    for (size_t o = 0; o < n; o += half, i++) {
        size_t c = n - o < half ? n - o : half;
        char *stage = (char *)b->pinned + (size_t)(i & 1) * half;
        if (i >= 2)   /* the copy that last used this half is done */
            KILN_TRY(cu_check(b, cudaEventSynchronize(b->staged[i & 1]), "copying to the GPU"));
        memcpy(stage, (const char *)src + o, c);
        KILN_TRY(cu_check(b, cudaMemcpyAsync((char *)dst + o, stage, c, cudaMemcpyHostToDevice, b->stream),
                          "copying to the GPU"));
        KILN_TRY(cu_check(b, cudaEventRecord(b->staged[i & 1], b->stream), "copying to the GPU"));
    }
    return cu_check(b, cudaStreamSynchronize(b->stream), "copying to the GPU");
}

static kiln_status mod_d2h(kiln_backend *be, void *dst, const void *src, size_t n)
{
    cu_be *b = cu_of(be);
    if (b->capturing)
        return cu_not_in_capture(b, "a copy from the GPU");
    size_t half = b->pinned_size / 2, prev_o = 0, prev_c = 0;
    int i = 0;
    for (size_t o = 0; o < n; o += half, i++) {
        size_t c = n - o < half ? n - o : half;
        KILN_TRY(cu_check(b, cudaMemcpyAsync((char *)b->pinned + (size_t)(i & 1) * half, (const char *)src + o, c,
                                             cudaMemcpyDeviceToHost, b->stream), "copying from the GPU"));
        KILN_TRY(cu_check(b, cudaEventRecord(b->staged[i & 1], b->stream), "copying from the GPU"));
        if (i > 0) {   /* drain the previous chunk while this one moves */
            KILN_TRY(cu_check(b, cudaEventSynchronize(b->staged[(i - 1) & 1]), "copying from the GPU"));
            memcpy((char *)dst + prev_o, (char *)b->pinned + (size_t)((i - 1) & 1) * half, prev_c);
        }
        prev_o = o;
        prev_c = c;
    }
    if (i > 0) {
        KILN_TRY(cu_check(b, cudaEventSynchronize(b->staged[(i - 1) & 1]), "copying from the GPU"));
        memcpy((char *)dst + prev_o, (char *)b->pinned + (size_t)((i - 1) & 1) * half, prev_c);
    }
    return KILN_OK;
}

static kiln_status mod_tactics_export(kiln_backend *be, char **text, size_t *n)
{
    return cu_tc_export(cu_of(be), text, n);
}

static int mod_tactics_import(kiln_backend *be, const char *text, size_t n)
{
    return cu_tc_import(cu_of(be), text, n);
}

static int mod_tactics_timed(kiln_backend *be) { return cu_tc_timed(cu_of(be)); }

static void mod_describe(kiln_backend *be, char *buf, size_t n)
{
    cu_be *b = cu_of(be);
    struct cudaDeviceProp p;
    int drv = 0, rt = 0, ltv = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    ltv = (int)cublasLtGetVersion();
    if (cudaGetDeviceProperties(&p, b->device) != cudaSuccess)
        snprintf(p.name, sizeof p.name, "?");
    snprintf(buf, n, "%s (sm_%d%d, %d SMs, %.0f GiB), driver %d.%d, runtime %d.%d, cuDNN %zu, cuBLASLt %d%s", p.name,
             p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30), drv / 1000,
             (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10, cudnnGetVersion(), ltv, b->tf32 ? ", TF32 on" : "");
}

static const kiln_devmod cuda_module = {
    .abi = KILN_DEVMOD_ABI,
    .name = "cuda",
    .create = mod_create,
    .destroy = mod_destroy,
    .host_inputs = mod_host_inputs,
    .reads_blob = mod_reads_blob,
    .own_weight_bytes = mod_own_weight_bytes,
    .fp8_counts = mod_fp8_counts,
    .tactics_export = mod_tactics_export,
    .tactics_import = mod_tactics_import,
    .tactics_timed = mod_tactics_timed,
    .accepts = mod_accepts,
    .alloc = mod_alloc,
    .free = mod_free,
    .shared_alloc = mod_shared_alloc,
    .shared_free = mod_shared_free,
    .h2d = mod_h2d,
    .d2h = mod_d2h,
    .describe = mod_describe,
    .canonical = mod_canonical,
    .graph_begin = cu_graph_begin,
    .graph_h2d = cu_graph_h2d,
    .graph_end = cu_graph_end,
    .graph_launch = cu_graph_launch,
    .graph_free = cu_graph_free,
    .graph_ms = cu_graph_ms,
};

__attribute__((visibility("default"))) const kiln_devmod *kiln_devmod_entry(void);
const kiln_devmod *kiln_devmod_entry(void)
{
    return &cuda_module;
}
