/* The KILN_PREP_LOWBIT_W blob: a layer's FP8 / NVFP4 / MXFP4 / INT4 weight as the CPU backend packs it
 * (cpu/lowbit.c, at build time or, without an engine, through the devmod host service lowbit_prep) and
 * the CUDA module uploads it (cuda_lowbit.c). Defined once here, header-only (a module links nothing of
 * libkiln): docs/PRECISION.md, "FP8, NVFP4, MXFP4 and INT4 layers".
 *
 * Header dims = {kiln__qfmt, rows, k, trans | tensor << 1}: the weight as a rows x k row-major matrix
 * (rows = output channels; trans: the tensor is [k, rows], stored transposed; tensor: FP8 with one scale
 * for the whole tensor, KILN_ATTR_WQ_TENSOR). Payload, each part at a 64-byte offset:
 *   elements   rows * row_bytes (row_bytes = k for FP8, ceil(k / 2) for the 4-bit formats);
 *   scales     at off_s: NVFP4 one E4M3 byte per 16-element block, MXFP4 one E8M0 byte per 32, INT4
 *              one FP16 per KILN_INT4_BLOCK; FP8 one FP32 per row, or none with one scale per tensor;
 *   tensor     at off_t: the FP32 tensor scale (NVFP4, and FP8 per tensor: amax / 448), 64 bytes.
 * So an FP8 per-tensor blob holds the weight as [N, K] E4M3 bytes (what cuBLASLt's FP8 "TN" GEMM takes)
 * and its scale. */
#ifndef KILN_BACKEND_LOWBIT_BLOB_H
#define KILN_BACKEND_LOWBIT_BLOB_H

#include "prep_blob.h"
#include "../core/numfmt.h"
#include <stdbool.h>
#include <string.h>

typedef struct kiln_lowbit_blob {
    kiln__qfmt fmt;
    int64_t rows, k;
    bool trans, tensor;
    int64_t block, nblk, row_bytes;     /* elements sharing a scale along k; scales per row; bytes per row */
    uint64_t data_bytes, off_s, off_t, total;   /* payload: elements, scales at off_s, tensor scale at off_t */
} kiln_lowbit_blob;

static inline uint64_t kiln__lowbit_align64(uint64_t v) { return (v + 63) / 64 * 64; }

/* The payload layout of a rows x k weight in fmt (tensor: FP8 with one scale per tensor; ignored for the
 * 4-bit formats). False for a format that is not a layer weight format or sizes out of range. */
static inline bool kiln__lowbit_blob_layout(kiln__qfmt fmt, int64_t rows, int64_t k, bool trans, bool tensor,
                                            kiln_lowbit_blob *o)
{
    int64_t block, es;   /* block along k and scale bytes; es 0: no per-block scales */
    switch (fmt) {
    case KILN_QF_NVFP4: block = 16, es = 1; break;
    case KILN_QF_MXFP4: block = 32, es = 1; break;
    case KILN_QF_INT4: block = KILN_INT4_BLOCK, es = 2; break;
    case KILN_QF_FP8: block = k, es = tensor ? 0 : 4; break;
    default: return false;
    }
    if (rows <= 0 || k <= 0 || rows > ((int64_t)1 << 40) / k)
        return false;
    memset(o, 0, sizeof *o);
    o->fmt = fmt, o->rows = rows, o->k = k, o->trans = trans, o->tensor = fmt == KILN_QF_FP8 && tensor;
    o->block = block;
    o->nblk = (k + block - 1) / block;
    o->row_bytes = fmt == KILN_QF_FP8 ? k : (k + 1) / 2;
    o->data_bytes = (uint64_t)(rows * o->row_bytes);
    o->off_s = kiln__lowbit_align64(o->data_bytes);
    o->off_t = kiln__lowbit_align64(o->off_s + (uint64_t)(rows * o->nblk) * (uint64_t)es);
    o->total = o->off_t + 64;
    return true;
}

/* The header dims of such a blob. */
static inline void kiln__lowbit_blob_dims(const kiln_lowbit_blob *o, int64_t dims[4])
{
    dims[0] = o->fmt, dims[1] = o->rows, dims[2] = o->k, dims[3] = (int64_t)o->trans | (int64_t)o->tensor << 1;
}

/* The element dtype a blob of fmt records. */
static inline int32_t kiln__lowbit_blob_dtype(kiln__qfmt fmt)
{
    return fmt == KILN_QF_FP8 ? KILN_DT_FP8E4M3 : fmt == KILN_QF_INT4 ? KILN_DT_INT4 : KILN_DT_FP4E2M1;
}

/* Parses blob (size bytes): a KILN_PREP_LOWBIT_W blob whose sizes add up fills *o and returns its payload
 * (KILN_PREP_HDR_BYTES in); NULL for anything else. Reads the header by copy (any alignment). */
static inline const uint8_t *kiln__lowbit_blob_parse(const void *blob, size_t size, kiln_lowbit_blob *o)
{
    kiln_prep_hdr h;
    if (!blob || size < KILN_PREP_HDR_BYTES)
        return NULL;
    memcpy(&h, blob, sizeof h);
    if (memcmp(h.magic, KILN_PREP_MAGIC, 8) || h.layout != KILN_PREP_LOWBIT_W || h.ndims != 4 ||
        h.payload_bytes > size - KILN_PREP_HDR_BYTES || (h.dims[3] & ~(int64_t)3) || h.dims[0] < 0 ||
        h.dims[0] > KILN_QF_FP8)
        return NULL;
    kiln__qfmt fmt = (kiln__qfmt)h.dims[0];
    if (!kiln__lowbit_blob_layout(fmt, h.dims[1], h.dims[2], h.dims[3] & 1, (h.dims[3] & 2) != 0, o) ||
        (h.dims[3] & 2 && fmt != KILN_QF_FP8) || h.dtype != kiln__lowbit_blob_dtype(fmt) || h.payload_bytes != o->total)
        return NULL;
    return (const uint8_t *)blob + KILN_PREP_HDR_BYTES;
}

#endif
