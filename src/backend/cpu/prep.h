/* Prepared weights of the CPU backend: the blobs the per-op kiln_kernel_prep_fn make at build
 * time (stored verbatim in an engine's PACKED section, docs/ENGINE_FORMAT.md) and kernels read
 * through kiln_kctx.prepared.
 *
 * A blob is a 128-byte header followed by the payload (64-byte aligned when the blob is). The
 * header is little-endian x86-64 memory layout (the engine's byte order). A kernel trusts a blob
 * only after kiln__prep_check() accepted its magic, layout, micro-kernel family (the host's must
 * be the one the blob was packed for), dims (against the node's actual operands), payload size
 * and alignment; otherwise it takes its unprepared path, or fails cleanly when the weights it
 * would need were not stored (an engine drops a constant that only prepared layers read). */
#ifndef KILN_BACKEND_CPU_PREP_H
#define KILN_BACKEND_CPU_PREP_H

#include "../kernel.h"
#include "../prep_blob.h"   /* the header, the layouts (backend-neutral: the CUDA module reads some) */

/* Allocates a blob (kiln__malloc; header filled, payload uninitialized) and returns its payload. */
void *kiln__prep_alloc(uint32_t layout, uint32_t replaces, kiln_dtype dt, int ndims, const int64_t *dims,
                       uint64_t payload_bytes, void **blob, size_t *size);
/* kiln__prep_alloc for a payload of plain bytes that any host reads (gemm_kind 0, no ISA
 * needed), so the blob always replaces the inputs in `replaces`. */
void *kiln__prep_alloc_any(uint32_t layout, uint32_t replaces, kiln_dtype dt, int ndims, const int64_t *dims,
                           uint64_t payload_bytes, void **blob, size_t *size);
/* Whether a layout's payload is the same on every host (made with kiln__prep_alloc_any, read by a
 * portable kernel wherever the host has no faster one): the low-bit, BF16 and INT8 weights. Such a
 * blob replaces its weights whatever the host that built the engine. */
bool kiln__prep_portable(uint32_t layout);
/* The payload of ctx->prepared when it is a valid blob of this layout, element type and dims on
 * this host, else NULL (no error recorded). */
const void *kiln__prep_check(const kiln_kctx *ctx, uint32_t layout, kiln_dtype dt, int ndims, const int64_t *dims,
                             uint64_t payload_bytes);
/* Whether a header names a layout op's prepare function makes, replacing only the input it packs
 * (the weights, input 1): what `load` accepts from an engine. */
bool kiln__prep_fits_op(kiln_op op, const kiln_prep_hdr *h);
/* Reads a blob's header (for the backend's load and the builder); false when it is not one. */
bool kiln__prep_header(const void *blob, size_t size, kiln_prep_hdr *h);
/* A GEMM_B blob packed for another GEMM micro-kernel family (an engine built on a host of another
 * ISA, its float32 weights stored only packed) repacked into this host's panels: *out a new blob
 * (kiln__malloc, header of this host's family, the same `replaces`), or NULL when blob is not such
 * a blob. The kernels then compute exactly what they compute from the weights. */
kiln_status kiln__prep_gemm_b_rehost(const void *blob, size_t size, void **out, size_t *out_size);
/* Error for a kernel whose weights input was dropped from the engine (data NULL) while its
 * prepared data does not fit: the layer cannot run. */
kiln_status kiln__prep_missing(const kiln_kctx *ctx, int input);
/* True if input i is a tensor without data (a constant stored only in packed form). */
static inline bool kiln__prep_dropped(const kiln_tensor *t)
{
    return t && !t->data && t->nbytes == 0 && kiln_tensor_numel(t) > 0;
}

/* The prepare function of op (a kiln_kernel_prep_fn) for the kernel the host runs (a fast one
 * registered over the reference's, see below), or NULL when the op packs nothing. */
kiln_kernel_prep_fn kiln__cpu_prep_fn(kiln_op op);
/* The prepare function for node n: the low-bit weights' (lowbit.h) when n asks for them, else
 * kiln__cpu_prep_fn(n->op). */
kiln_kernel_prep_fn kiln__cpu_prep_node(const kiln_node *n);

/* The reference's prepare function of op (the one a fast prepare function may fall back to). */
kiln_kernel_prep_fn kiln__cpu_ref_prep_fn(kiln_op op);

/* A prepare function registered over the reference's for hosts with every feature in isa (a
 * kiln__cpu_has() set), next to the fast kernel that reads its blobs: cpu/x86 files export
 * kiln__x86_prep_<group>[] tables (terminated by {KILN_OP_COUNT, NULL, 0}), listed in prep.c. */
typedef struct kiln_prep_isa_reg {
    kiln_op op;
    kiln_kernel_prep_fn fn;
    unsigned isa;
} kiln_prep_isa_reg;

/* Registration: each kernel file with prepare functions exports a table terminated by
 * {KILN_OP_COUNT, NULL}. */
typedef struct kiln_prep_reg {
    kiln_op op;
    kiln_kernel_prep_fn fn;
} kiln_prep_reg;

#endif
