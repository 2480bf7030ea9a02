/* The CPU backend: host buffers, and layers prepared by choosing a kernel from the CPU kernel
 * registry (ref/registry.c) and, at build time, packing the layer's constant inputs with the op's
 * prepare function (prep.c registry: GEMM panels, Winograd-transformed filters). A blob made by
 * `prepare` is owned by the layer (64-byte aligned copy); one restored by `load` is borrowed from
 * the engine (used in place) and never freed by `release`. */
#include "../backend.h"
#include "prep.h"

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

static kiln_status choose(const kiln_backend *be, const kiln_node *n, kiln_layer *out)
{
    kiln_kernel_fn fn = kiln__ref_kernel(n->op);
    if (!fn)
        return kiln__err(KILN_ERR_UNSUPPORTED, "no kernel for %s (domain '%s', opset %d) node '%s'", n->op_type,
                         n->domain[0] ? n->domain : "ai.onnx", n->opset, n->name);
    *out = (kiln_layer){.be = be, .node = n, .fn = fn, .kernel = (int)n->op};
    return KILN_OK;
}

/* A blob copied to a 64-byte aligned address (prepared payloads are read with aligned loads; the
 * engine stores blobs 64-byte aligned, so the layers it restores are aligned the same way). */
static kiln_status own_aligned(kiln_layer *l, void *blob, size_t size)
{
    if ((uintptr_t)blob % 64 == 0) {
        l->blob = l->blob_mem = blob;
        l->blob_size = size;
        return KILN_OK;
    }
    uint8_t *m = kiln__malloc(size + 64);
    if (!m) {
        kiln__free(blob);
        return kiln__err(KILN_ERR_NOMEM, "out of memory preparing node '%s'", l->node->name);
    }
    uint8_t *a = m + (64 - (uintptr_t)m % 64) % 64;
    memcpy(a, blob, size);
    kiln__free(blob);
    l->blob = a;
    l->blob_mem = m;
    l->blob_size = size;
    return KILN_OK;
}

/* consts == NULL (layers prepared on the fly by the interpreter): no packing, no allocation. */
static kiln_status cpu_prepare(const kiln_backend *be, const kiln_node *n, const kiln_tensor *const *consts,
                               kiln_layer *out)
{
    KILN_TRY(choose(be, n, out));
    kiln_kernel_prep_fn prep = consts ? kiln__cpu_prep_node(n) : NULL;
    if (!prep)
        return KILN_OK;
    void *blob = NULL;
    size_t size = 0;
    KILN_TRY(prep(n, n->n_in, consts, &blob, &size));
    if (!blob)
        return KILN_OK;
    kiln_prep_hdr h;
    if (!kiln__prep_header(blob, size, &h)) {
        kiln__free(blob);
        return kiln__err(KILN_ERR_INTERNAL, "node '%s': prepared data without a valid header", n->name);
    }
    out->replaces = h.replaces;
    out->needs_isa = h.engine_isa;
    return own_aligned(out, blob, size);
}

static kiln_status cpu_load(const kiln_backend *be, const kiln_node *n, int kernel, const void *blob, size_t size,
                            kiln_layer *out)
{
    KILN_TRY(choose(be, n, out));
    if (kernel != (int)n->op)
        return kiln__err(KILN_ERR_PARSE, "node '%s': the CPU backend has no kernel %d for %s", n->name, kernel,
                         n->op_type);
    if (!size)
        return KILN_OK;
    kiln_prep_hdr h;
    if (!kiln__prep_header(blob, size, &h) || !kiln__prep_fits_op(n->op, &h))
        return kiln__err(KILN_ERR_PARSE, "node '%s': invalid prepared data for the CPU backend (%zu bytes)", n->name,
                         size);
    out->replaces = h.replaces;
    out->needs_isa = h.engine_isa;
    /* GEMM panels of another host's GEMM family: repacked for this host's, owned by the layer */
    void *own = NULL;
    size_t own_size = 0;
    KILN_TRY(kiln__prep_gemm_b_rehost(blob, size, &own, &own_size));
    if (own)
        return own_aligned(out, own, own_size);
    /* borrowed: the blob stays where it is (an engine's read-only mapping), nothing is copied */
    out->blob = (void *)blob;
    out->blob_size = size;
    return KILN_OK;
}

static void cpu_release(const kiln_backend *be, kiln_layer *l)
{
    (void)be;
    kiln__free(l->blob_mem);   /* NULL for a borrowed blob */
    l->blob = l->blob_mem = NULL;
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
