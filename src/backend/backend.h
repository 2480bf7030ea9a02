/* The backend interface (in the style of ggml-backend): what the builder and the runtime know of a
 * device that runs layers. A backend is a vtable plus its state:
 *
 *   supports     can it run this op with these input dtypes, at this precision, in this layout?
 *   buf_*        buffers in the backend's memory (host memory for the CPU; device memory later)
 *   prepare      build time: choose the kernel (tactic) for one layer and optionally transform its
 *                constant inputs (weights) into the backend's layout; the result is a kiln_layer
 *                whose `blob` is opaque bytes the engine can store and `load` can restore
 *   load         restore a prepared layer from its blob (engine load; no re-preparation)
 *   run          run a prepared layer on buffers already placed (kernel context)
 *   synchronize  wait until everything queued on the backend is done (a no-op on the CPU)
 *
 * The interpreter (src/runtime/exec.c) reaches kernels only through this interface. The CPU
 * backend (cpu/cpu_backend.c) is the first implementation, over the CPU kernel registry. */
#ifndef KILN_BACKEND_BACKEND_H
#define KILN_BACKEND_BACKEND_H

#include "kernel.h"

typedef struct kiln_backend kiln_backend;

/* Memory layout of a layer's activations. */
typedef enum kiln_layout {
    KILN_LAYOUT_ANY = 0,   /* whatever the op's ONNX definition says (NCHW for images) */
    KILN_LAYOUT_NCHW,
    KILN_LAYOUT_NHWC,
} kiln_layout;

/* A capability question: node (op, attributes, opset), its input dtypes, the precision it is to
 * compute in and the layout of its activations. */
typedef struct kiln_bk_query {
    const kiln_node *node;
    int n_in;
    const kiln_dtype *in_dtype;   /* n_in entries (KILN_DT_UNDEFINED: absent); NULL: not asked */
    kiln_dtype precision;         /* compute precision; KILN_DT_UNDEFINED: that of the inputs */
    kiln_layout layout;
} kiln_bk_query;

/* A buffer in a backend's memory. */
typedef struct kiln_buffer {
    void *data;                   /* host-addressable on the CPU; a device handle elsewhere */
    size_t size;
    const kiln_backend *be;
} kiln_buffer;

/* A prepared layer: the backend's choice for one node, made at build time (prepare) or restored
 * from an engine (load). Owned by whoever prepared it; freed with the backend's `release`. */
typedef struct kiln_layer {
    const kiln_backend *be;
    const kiln_node *node;
    kiln_kernel_fn fn;            /* CPU: the chosen kernel */
    int kernel;                   /* backend-specific id of the chosen kernel / tactic */
    void *blob;                   /* backend-owned prepared data (packed weights ...), or NULL */
    size_t blob_size;             /* bytes of blob, as stored in an engine */
    void *blob_mem;               /* the allocation behind blob that `release` frees, or NULL: blob is
                                   * borrowed (restored by `load` from an engine's mapping, used in place) */
    uint32_t replaces;            /* bit i: the layer never reads input i's data (its blob holds it in the
                                   * backend's layout), so an engine need not store that constant */
    uint32_t needs_isa;           /* what a host needs to use blob (CPU: KILN_ISA_* bits of the engine
                                   * header), recorded in the engine when a replaced constant is dropped */
} kiln_layer;

typedef struct kiln_backend_ops {
    const char *name;
    bool (*supports)(const kiln_backend *be, const kiln_bk_query *q);
    kiln_status (*buf_alloc)(const kiln_backend *be, size_t size, kiln_buffer *buf);
    void (*buf_free)(const kiln_backend *be, kiln_buffer *buf);
    /* Copies n bytes from src to dst, each host memory or the data of one of this backend's buffers. */
    kiln_status (*buf_copy)(const kiln_backend *be, void *dst, const void *src, size_t n);
    /* consts[i]: input i's value when it is a constant (weights) the backend may transform, else
     * NULL; consts may be NULL. Must not allocate when it transforms nothing (the interpreter
     * prepares layers without stored blobs on the fly). */
    kiln_status (*prepare)(const kiln_backend *be, const kiln_node *n, const kiln_tensor *const *consts,
                           kiln_layer *out);
    /* Restores a layer from the blob `prepare` made (kernel: the id it chose), without copying: the
     * layer borrows blob, which must outlive it (an engine's mapping). */
    kiln_status (*load)(const kiln_backend *be, const kiln_node *n, int kernel, const void *blob, size_t size,
                        kiln_layer *out);
    void (*release)(const kiln_backend *be, kiln_layer *l);
    kiln_status (*run)(const kiln_backend *be, const kiln_layer *l, kiln_kctx *ctx);
    kiln_status (*synchronize)(const kiln_backend *be);
} kiln_backend_ops;

struct kiln_backend {
    const kiln_backend_ops *ops;
    void *state;                  /* backend-specific (device, streams ...); NULL for the CPU */
};

/* The CPU backend (process-wide, read-only). */
const kiln_backend *kiln__cpu_backend(void);

/* Convenience wrappers. */
static inline kiln_status kiln__layer_run(const kiln_layer *l, kiln_kctx *ctx)
{
    return l->be->ops->run(l->be, l, ctx);
}

/* True if be has a kernel for n (whatever its dtypes: kernels check those when they run). */
static inline bool kiln__backend_has_op(const kiln_backend *be, const kiln_node *n)
{
    kiln_bk_query q = {.node = n};
    return be->ops->supports(be, &q);
}

#endif
