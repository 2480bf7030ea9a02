/* The kernel interface every CPU kernel implements.
 *
 * A kernel receives the node (attributes, opset), its input tensors (NULL where an optional
 * input is absent) and computes its outputs. Shapes are concrete at run time, so a kernel
 * first derives its output shapes from its inputs, asks for each output with kiln__kout(),
 * then computes. Kernels compute, the runtime allocates: where an output lives (a slot of the
 * memory plan's arena, or the heap) is decided by the runtime through ctx->rt, and control-flow
 * kernels run their subgraphs through ctx->rt too; no kernel includes a runtime header.
 * Kernels never abort: malformed attributes or inconsistent shapes are reported with
 * kiln__err() and an error status. */
#ifndef KILN_BACKEND_KERNEL_H
#define KILN_BACKEND_KERNEL_H

#include "../ir/graph.h"

typedef struct kiln_kctx kiln_kctx;

/* What the runtime executing a kernel provides it (all through `user`, the runtime's state). */
typedef struct kiln_krt {
    /* Memory for output i of ctx's node, nbytes long, or NULL: the kernel's helper puts it on the
     * heap. *fresh is set false when the memory shares its slot with an input that dies here
     * (then it must not be cleared before the kernel reads that input). */
    void *(*place)(void *user, const kiln_kctx *ctx, int i, size_t nbytes, bool *fresh);
    /* True if p is memory the runtime owns (placed by `place`): a kernel never frees it. */
    bool (*owns)(void *user, const void *p);
    /* Runs subgraph g of ctx's node (outer-scope names resolve through the running frames).
     * outputs[0..g->n_outputs) receive tensors owned by the caller. */
    kiln_status (*run_graph)(void *user, const kiln_kctx *ctx, const kiln_graph *g, const kiln_tensor *const *inputs,
                             kiln_tensor *outputs);
} kiln_krt;

struct kiln_kctx {
    const kiln_node *node;
    int n_in;
    const kiln_tensor *const *in;  /* in[i] == NULL: optional input absent */
    int n_out;
    kiln_tensor *const *out;       /* out[i] == NULL: optional output not wanted (may still
                                    * be computed into a scratch tensor by kiln__kout) */
    kiln_pool *pool;               /* the executing context's threads (NULL: run single-threaded) */
    int nthreads;                  /* threads this layer may use, >= 1 (at most the pool's) */
    const kiln_krt *rt;            /* NULL: outputs on the heap, no subgraphs (constant folding, tests) */
    void *rt_user;                 /* the runtime's state for rt's functions */
    /* The layer's prepared data (kiln_layer.blob: weights packed at build time by the op's
     * kiln_kernel_prep_fn), or NULL: the kernel works from its inputs alone. Read-only, 64-byte
     * aligned, possibly memory-mapped from an engine file: a kernel validates its header before
     * trusting it and never writes to it. */
    const void *prepared;
    size_t prepared_size;
    /* Input 0 is read rounded to BF16 (set by kiln__run_mixed for a BF16 depthwise convolution, whose float32 rows
     * round each input row as they copy it); a kernel that cannot honour it fails rather than read it unrounded. */
    bool x_bf16;
};

/* Build-time preparation of one layer: from the node and its constant inputs (consts[i] == NULL
 * where input i is not a constant) makes opaque bytes that the kernel later reads through
 * ctx->prepared (packed GEMM panels, transformed filters, quantized weights ...). The bytes are
 * stored verbatim in the engine, so they hold no pointers, and start with a header naming their
 * layout (and the ISA it needs) so that a kernel can refuse data it does not understand.
 * *blob == NULL (KILN_OK) means nothing to prepare. *blob is allocated with kiln__malloc. */
typedef kiln_status (*kiln_kernel_prep_fn)(const kiln_node *n, int n_in, const kiln_tensor *const *consts,
                                           void **blob, size_t *size);

typedef kiln_status (*kiln_kernel_fn)(kiln_kctx *ctx);

/* Allocates output i with the given dtype and shape (zero-filled). */
kiln_status kiln__kout(kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims);
/* Whether the runtime places output i over input tensor t (t's bytes, computed in place over it: the plan pairs
 * them when t dies at this node; runtime/plan.c). */
bool kiln__kout_over(const kiln_kctx *ctx, int i, const kiln_tensor *t);
/* Same, but the data is left uninitialized (filled with 0xFF bytes in sanitizer builds): only
 * for kernels that provably write every element of the output. */
kiln_status kiln__kout_uninit(kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims);
/* Frees t's data unless the runtime owns it, and clears t. */
void kiln__kout_release(const kiln_kctx *ctx, kiln_tensor *t);
/* Runs subgraph g of the node through the runtime (error if the caller gave no runtime). */
kiln_status kiln__ksubgraph(const kiln_kctx *ctx, const kiln_graph *g, const kiln_tensor *const *inputs,
                            kiln_tensor *outputs);
/* Input i, or NULL if absent or beyond n_in. */
static inline const kiln_tensor *kiln__kin(const kiln_kctx *ctx, int i)
{
    return i < ctx->n_in ? ctx->in[i] : NULL;
}
/* Number of elements of t. */
static inline int64_t kiln__knumel(const kiln_tensor *t)
{
    return kiln__shape_numel(t->ndim, t->dims);
}
/* The kernels' input prelude: input i, which must be present and have a valid rank. */
kiln_status kiln__kneed(const kiln_kctx *ctx, int i, const kiln_tensor **t);
/* Element size of t's dtype (error for dtypes without one); checks that t's buffer holds every
 * element. */
kiln_status kiln__kdata_es(const kiln_kctx *ctx, const kiln_tensor *t, size_t *es);
/* Input tensor t (the node's input idx, NULL when absent) is present, has a valid rank, a dtype
 * with an element size, and a buffer holding every element: kiln__kneed + kiln__kdata_es on a
 * tensor at hand. */
kiln_status kiln__kcheck(const kiln_kctx *ctx, const kiln_tensor *t, int idx);
/* Runs fn on ctx with input i0 replaced by t0 (and i1 by t1; i1 -1: none) and no prepared blob: a kernel's reference
 * run on weights unpacked from the blob, or on rounded activations (ctx has at most 16 inputs, else an error) */
kiln_status kiln__krun_with(kiln_kctx *ctx, kiln_kernel_fn fn, int i0, const kiln_tensor *t0, int i1,
                            const kiln_tensor *t1);
/* Reports an error prefixed with the node's op and name. */
kiln_status kiln__kerr(const kiln_kctx *ctx, kiln_status s, const char *fmt, ...) KILN_PRINTF(3, 4);

/* Broadcasting helpers (ONNX multidirectional broadcasting). */
kiln_status kiln__broadcast_shape(const kiln_kctx *ctx, int n, const kiln_tensor *const *ts, int *ndim,
                                  int64_t *dims);
/* Element strides of t broadcast to (ndim, dims): 0 where t's dim is 1 (or missing). */
void kiln__broadcast_strides(const kiln_tensor *t, int ndim, const int64_t *dims, int64_t *strides);
/* Normalizes a possibly negative axis for a rank; error if out of range. */
kiln_status kiln__norm_axis(const kiln_kctx *ctx, int64_t axis, int rank, int *out);

/* sgemm: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with leading dims, on up to
 * nthreads threads of pool. */
void kiln__sgemm(kiln_pool *pool, int nthreads, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* Kernel registration: each kernel source file exports a table terminated by {KILN_OP_COUNT, NULL}. */
typedef struct kiln_kernel_reg {
    kiln_op op;
    kiln_kernel_fn fn;
} kiln_kernel_reg;

/* Returns the CPU kernel for op: the fastest the host runs (a cpu/x86 kernel registered over the
 * reference by ISA, else the cpu/ref reference; cpu/cpu_kernels.h), or NULL if kiln has none. */
kiln_kernel_fn kiln__ref_kernel(kiln_op op);

#endif
