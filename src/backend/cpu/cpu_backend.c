/* The CPU backend: host buffers, and layers prepared by choosing a kernel from the CPU kernel
 * registry (ref/registry.c). Nothing is transformed yet, so a prepared layer has no blob; packed
 * weights (GEMM panels, Winograd-transformed filters) will travel in it. */
#include "../backend.h"

static bool cpu_supports(const kiln_backend *be, const kiln_bk_query *q)
{
    (void)be;
    if (!q->node || !kiln__ref_kernel(q->node->op))
        return false;
    /* activations in ONNX's own layout; the kernels compute in their inputs' precision */
    if (q->layout != KILN_LAYOUT_ANY && q->layout != KILN_LAYOUT_NCHW)
        return false;
    if (q->precision == KILN_DT_UNDEFINED || !q->in_dtype)
        return true;
    for (int i = 0; i < q->n_in; i++)
        if (q->in_dtype[i] == q->precision)
            return true;
    return false;
}

static kiln_status cpu_buf_alloc(const kiln_backend *be, size_t size, kiln_buffer *buf)
{
    buf->be = be;
    buf->size = size;
    buf->data = kiln__malloc(size ? size : 1);
    return buf->data ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory allocating a %zu-byte buffer", size);
}

static void cpu_buf_free(const kiln_backend *be, kiln_buffer *buf)
{
    (void)be;
    kiln__free(buf->data);
    buf->data = NULL;
    buf->size = 0;
}

static kiln_status cpu_buf_copy(const kiln_backend *be, void *dst, const void *src, size_t n)
{
    (void)be;
    if (n)
        memmove(dst, src, n);
    return KILN_OK;
}

static kiln_status cpu_prepare(const kiln_backend *be, const kiln_node *n, const kiln_tensor *const *consts,
                               kiln_layer *out)
{
    (void)consts;
    kiln_kernel_fn fn = kiln__ref_kernel(n->op);
    if (!fn)
        return kiln__err(KILN_ERR_UNSUPPORTED, "no kernel for %s (domain '%s', opset %d) node '%s'", n->op_type,
                         n->domain[0] ? n->domain : "ai.onnx", n->opset, n->name);
    *out = (kiln_layer){.be = be, .node = n, .fn = fn, .kernel = (int)n->op};
    return KILN_OK;
}

static kiln_status cpu_load(const kiln_backend *be, const kiln_node *n, const void *blob, size_t size,
                            kiln_layer *out)
{
    (void)blob;
    if (size)
        return kiln__err(KILN_ERR_PARSE, "node '%s': the CPU backend stores no prepared data (got %zu bytes)",
                         n->name, size);
    return cpu_prepare(be, n, NULL, out);
}

static void cpu_release(const kiln_backend *be, kiln_layer *l)
{
    (void)be;
    kiln__free(l->blob);
    l->blob = NULL;
    l->blob_size = 0;
}

static kiln_status cpu_run(const kiln_backend *be, const kiln_layer *l, kiln_kctx *ctx)
{
    (void)be;
    ctx->prepared = l->blob;
    ctx->prepared_size = l->blob_size;
    return l->fn(ctx);
}

static kiln_status cpu_synchronize(const kiln_backend *be)
{
    (void)be;
    return KILN_OK;   /* kernels return when their work is done */
}

static const kiln_backend_ops cpu_ops = {
    .name = "cpu",
    .supports = cpu_supports,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .buf_copy = cpu_buf_copy,
    .prepare = cpu_prepare,
    .load = cpu_load,
    .release = cpu_release,
    .run = cpu_run,
    .synchronize = cpu_synchronize,
};

static const kiln_backend cpu_backend = {.ops = &cpu_ops, .state = NULL};

const kiln_backend *kiln__cpu_backend(void)
{
    return &cpu_backend;
}
