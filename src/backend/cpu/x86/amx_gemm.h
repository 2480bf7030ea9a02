/* The AMX tile driver shared by the BF16 and INT8 GEMMs (x86/amx_gemm.c): rows [i0, i1) of C against one strip of up
 * to 6 packed panels of 16 columns, in bytes, so the same driver runs tdpbf16ps (BF16 pairs), tdpbusd (u8 A x s8 B)
 * and tdpbsud (s8 A x u8 B). Both GEMMs' panels are already AMX's B layout: a k group (a BF16 pair, an INT8 quad)
 * of 16 columns is 64 contiguous bytes, so 64 bytes of an A row (32 BF16 / 64 INT8 k values) meet 16 such rows of a
 * panel, 1 KB further per step. C tiles (16 x 16 float32 or int32) are handed to the caller's `out` as they are done.
 * Only where the host has the tiles (kiln__cpu_has(KILN_CPU_AMX_BF16 / KILN_CPU_AMX_INT8)). */
#ifndef KILN_BACKEND_CPU_X86_AMX_GEMM_H
#define KILN_BACKEND_CPU_X86_AMX_GEMM_H
#include <stdbool.h>
#include <stdint.h>

typedef enum kiln_amx_dot { KILN_AMX_BF16, KILN_AMX_U8S8, KILN_AMX_S8U8 } kiln_amx_dot;

typedef struct kiln_amx_job {
    kiln_amx_dot dot;
    const uint8_t *a;   /* row i at a + i * lda, kb bytes of k, zero padded */
    int64_t lda;
    const uint8_t *b;   /* panel p at b + p * pstride */
    int64_t pstride;
    int64_t kb;         /* bytes of k in a row (a multiple of 4) */
    int ncols;          /* valid columns of the strip, 1 .. 96 (up to 6 panels) */
    /* a finished C tile: rows x 16 values (float32 or int32) at tile, 16 a row (64-byte aligned), for rows
     * [i, i + rows) of panel p, of which cols columns are C's */
    void (*out)(void *ctx, const void *tile, int rows, int64_t i, int p, int cols);
    /* (optional) C tile (i, p), 16 rows, is about to be computed: e.g. prefetch what `out` will read */
    void (*start)(void *ctx, int64_t i, int p);
    void *ctx;
} kiln_amx_job;

void kiln__amx_rows(const kiln_amx_job *j, int64_t i0, int64_t i1);

/* Whether the tiles pay for a GEMM of m rows (output channels) and kb bytes of k a row, against the AVX-512
 * (VNNI / BF16) tile: not for fewer than two 64-byte steps over at most 64 rows, where each C tile's store and
 * epilogue outweigh its few tile products. Measured in one process against AMX for every shape (bench/env_ab,
 * 2 threads): INT8 PP-OCRv4 det 0.967 (54/60 pairs), cls 0.943, rec 0.991, ResNet-50 0.985 (its 64 -> 64 1x1
 * layers; the 64 -> 256 ones, 256 rows, keep AMX); BF16 det 0.960, ResNet-50 and cls unchanged. Wider rules (INT8
 * K < 256 or M <= 128, BF16 K < 128) lost on ResNet-50 or cls. */
static inline bool kiln__amx_pays(int64_t m, int64_t kb) { return kb >= 128 || m > 64; }

#endif
