/* The kernel interface every CPU kernel implements.
 *
 * A kernel receives the node (attributes, opset), its input tensors (NULL where an optional
 * input is absent) and computes its outputs. Shapes are concrete at run time, so a kernel
 * first derives its output shapes from its inputs, allocates each output with
 * kiln__kout(), then computes. Kernels never abort: malformed attributes or inconsistent
 * shapes are reported with kiln__err() and an error status. */
#ifndef KILN_BACKEND_KERNEL_H
#define KILN_BACKEND_KERNEL_H

#include "../ir/graph.h"

struct kiln_exec;

typedef struct kiln_kctx {
    const kiln_node *node;
    int n_in;
    const kiln_tensor *const *in;  /* in[i] == NULL: optional input absent */
    int n_out;
    kiln_tensor *const *out;       /* out[i] == NULL: optional output not wanted (may still
                                    * be computed into a scratch tensor by kiln__kout) */
    kiln_pool *pool;               /* the executing context's threads (NULL: run single-threaded) */
    int nthreads;                  /* threads this layer may use, >= 1 (at most the pool's) */
    struct kiln_exec *exec;        /* for control-flow kernels (subgraph execution) */
} kiln_kctx;

typedef kiln_status (*kiln_kernel_fn)(kiln_kctx *ctx);

/* Allocates output i with the given dtype and shape (zero-filled). */
kiln_status kiln__kout(kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims);
/* Same, but the data is left uninitialized (filled with 0xFF bytes in sanitizer builds): only
 * for kernels that provably write every element of the output. */
kiln_status kiln__kout_uninit(kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims);
/* Input i, or NULL if absent or beyond n_in. */
static inline const kiln_tensor *kiln__kin(const kiln_kctx *ctx, int i)
{
    return i < ctx->n_in ? ctx->in[i] : NULL;
}
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

/* Returns the reference kernel for op, or NULL if kiln has none. */
kiln_kernel_fn kiln__ref_kernel(kiln_op op);

#endif
