/* The prepared-weights blob every prepared layer's data starts with (docs/ENGINE_FORMAT.md): the
 * 128-byte header and the layout ids. Backend-neutral and header-only: the CPU backend makes and reads
 * these blobs (cpu/prep.h: allocation, checks, the prepare registry), and a device module that runs a
 * layer from the engine's CPU blob (kiln_devmod.reads_blob: lowbit_blob.h) reads the same definition. */
#ifndef KILN_BACKEND_PREP_BLOB_H
#define KILN_BACKEND_PREP_BLOB_H

#include <stdint.h>

#define KILN_PREP_MAGIC "KILNPRP1"
#define KILN_PREP_HDR_BYTES 128u
#define KILN_PREP_MAX_DIMS 8

enum kiln_prep_layout {
    /* op(B) of a GEMM packed over the whole K in nr-wide panels (kiln_gemm.bpack):
     * dims = {K, N, nr}; payload = ceil(N/nr)*K*nr floats */
    KILN_PREP_GEMM_B = 1,
    /* Winograd F(2x2, 3x3) transformed filters U = (G (x) G) x W^T per group:
     * dims = {M, C/group, group}; payload = group*16*(M/group)*(C/group) floats, [g][16][Mg][Cg] */
    KILN_PREP_WINO_F23 = 2,
    /* INT8 B of QLinearMatMul / MatMulInteger / QGemm as s8 VNNI panels (qgemm.h):
     * dims = {K, N, 1}; payload = panels, then N int32 column sums at a 64-byte offset. Plain
     * bytes (gemm_kind 0): the VNNI tile and the portable one read the same panels */
    KILN_PREP_QGEMM_B = 3,
    /* INT8 weights of QLinearConv / ConvInteger as s8 rows of ceil4(K) bytes (qgemm.h):
     * dims = {K, M/group, group}; payload = M rows, then M int32 row sums at a 64-byte offset.
     * Plain bytes (gemm_kind 0) */
    KILN_PREP_QCONV_W = 4,
    /* BF16 B of MatMul / Gemm / FusedMatMul / FusedGemm as the BF16 GEMM's panels (qgemm_bf16.h):
     * dims = {K, N, kp2, transB}; payload = ceil(N/16)*kp2*16 BF16 values. Plain bytes (gemm_kind 0):
     * the AVX512-BF16 tile and the portable one read the same panels, on every host */
    KILN_PREP_BGEMM_B = 5,
    /* BF16 weights of Conv / FusedConv (2-D) as the BF16 conv's rows (qgemm_bf16.h): M rows of kp2
     * BF16 values (K = C/group * kh * kw, zero padded to even): dims = {K, M, kp2}. Plain bytes
     * (gemm_kind 0), like KILN_PREP_BGEMM_B */
    KILN_PREP_BCONV_W = 6,
    /* FP8 / NVFP4 / MXFP4 / INT4 weights of Conv / MatMul / Gemm and their fused forms
     * (cpu/lowbit.h): dims = {kiln__qfmt, rows, k, trans | tensor << 1}, the weight as a rows x k
     * matrix (rows = output channels; trans: stored transposed from the tensor's [k, rows]; tensor:
     * FP8 with one scale per tensor); payload = packed elements, block scales at the next 64-byte
     * offset, then the FP32 tensor scale at the next 64-byte offset (64 bytes): lowbit_blob.h.
     * Plain bytes: gemm_kind 0, every host reads them (and the CUDA module runs from them). */
    KILN_PREP_LOWBIT_W = 7,
    /* Winograd F(4x4, 3x3) transformed filters U = (G (x) G) x W^T per group (x86/wino.h):
     * dims = {M, C/group, group}; payload = group*36*(M/group)*(C/group) floats, [g][36][Mg][Cg] */
    KILN_PREP_WINO_F43 = 8,
};

/* What the header's isa field records: the GEMM micro-kernel family (kiln__sgemm_kind()) the
 * payload was packed for, and the engine ISA bits (KILN_ISA_*: 1 x86-64, 2 AVX2+FMA, 4 AVX-512)
 * a host needs to use it. */
typedef struct kiln_prep_hdr {
    char magic[8];
    uint32_t layout;                    /* enum kiln_prep_layout */
    uint32_t gemm_kind;                 /* kiln__sgemm_kind() at packing time */
    uint32_t engine_isa;                /* KILN_ISA_* bits the host needs */
    uint32_t replaces;                  /* bit i: the kernel never reads input i's data when it has
                                         * this blob (the engine may drop that constant) */
    int32_t dtype;                      /* element type of the payload (kiln_dtype) */
    uint32_t ndims;
    int64_t dims[KILN_PREP_MAX_DIMS];
    uint64_t payload_bytes;
    uint8_t reserved[KILN_PREP_HDR_BYTES - 40 - 8 * KILN_PREP_MAX_DIMS];
} kiln_prep_hdr;

#endif
