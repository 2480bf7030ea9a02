// TMA (cp.async.bulk.tensor) on Hopper: a 2-D box copy into shared memory completing on an mbarrier, and the
// tensor maps of row-major byte / element matrices (the encoder comes from the driver at run time), shared by the FP8
// (kernels_conv_fp8_tma.cu) and INT8 (kernels_gemm_i8_tma.cu) 1x1 convolutions; TMA's im2col mode (an NHWC image's
// rows of the implicit GEMM of a convolution, one filter tap at a time) for the INT8 ones of any filter.
#ifndef KILN_BACKEND_CUDA_KERNELS_TMA_CUH
#define KILN_BACKEND_CUDA_KERNELS_TMA_CUH
#include "wgmma.cuh"
#include <cuda.h>   // CUtensorMap and its encoder's signature
#include <cuda_runtime.h>

namespace {

#if KILN_WGMMA
// The mbarriers of a producer / consumer pipeline, 8 bytes each from bar0 in shared memory: full[stages],
// empty[stages] per operand stage, rfull[rbuf], rempty[rbuf] per residual buffer
struct tma_bars {
    uint32_t bar0;
    int stages, rbuf;
    __device__ __forceinline__ uint32_t full(int i) const { return bar0 + 8 * i; }
    __device__ __forceinline__ uint32_t empty(int i) const { return bar0 + 8 * (stages + i); }
    __device__ __forceinline__ uint32_t rfull(int i) const { return bar0 + 8 * (2 * stages + i); }
    __device__ __forceinline__ uint32_t rempty(int i) const { return bar0 + 8 * (2 * stages + rbuf + i); }
    // (one thread) full / rfull complete on the producer's arrival and TMA's bytes, empty / rempty on `consumers`
    // threads' arrivals
    __device__ __forceinline__ void init(int consumers) const
    {
        for (int i = 0; i < stages; i++) {
            mbar_init(full(i), 1);
            mbar_init(empty(i), consumers);
        }
        for (int i = 0; i < rbuf; i++) {
            mbar_init(rfull(i), 1);
            mbar_init(rempty(i), consumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
};

// a box of the tensor map at (c0 innermost, c1) into shared memory at dst, completing bytes on the barrier mbar
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, uint32_t mbar, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(mbar)
                 : "memory");
}

// im2col mode: `pixelsPerColumn` consecutive output pixels (the implicit GEMM's rows, walking W, H, then N of the
// map's bounding box at its traversal strides) of an NHWC image, each the channels [c, c + channelsPerPixel) of the
// input pixel at (w, h, n) + the pixel's offset in the walk + the tap's offset (ow, oh); zeros outside the image
__device__ __forceinline__ void tma_load_im2col(uint32_t dst, const CUtensorMap *map, uint32_t mbar, int c, int w, int h,
                                                int n, uint16_t ow, uint16_t oh)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4, %5}], [%6], {%7, %8};"
                 ::"r"(dst), "l"((uint64_t)map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(mbar), "h"(ow), "h"(oh)
                 : "memory");
}
#endif

typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                              const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// a driver entry point (the tensor-map encoders: the runtime library does not export them), NULL where there is none
template <typename F> inline F driver_entry(const char *name)
{
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    return cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
                   q == cudaDriverEntryPointSuccess
               ? (F)p
               : (F)NULL;
}

inline encode_fn tma_encoder(void)
{
    static const encode_fn fn = driver_entry<encode_fn>("cuTensorMapEncodeTiled");   // once (C++ statics: thread-safe)
    return fn;
}

typedef CUresult (*encode_im2col_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const int *, const int *, cuuint32_t, cuuint32_t,
                                     const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline encode_im2col_fn tma_encoder_im2col(void)
{
    static const encode_im2col_fn fn = driver_entry<encode_im2col_fn>("cuTensorMapEncodeIm2col");
    return fn;
}

// A row-major [rows][cols] matrix of elements of dt (es bytes; row stride cols * es, a multiple of 16) as boxes of
// [box_rows][box_cols], in the given swizzle; zeros outside.
inline bool tma_map(CUtensorMap *m, CUtensorMapDataType dt, int es, const void *p, int64_t rows, int64_t cols,
                    int box_rows, int box_cols, CUtensorMapSwizzle swz)
{
    encode_fn enc = tma_encoder();
    if (!enc || ((uintptr_t)p & 15) || (cols * es) % 16)
        return false;
    const cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)(cols * es)};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows}, estr[2] = {1, 1};
    return enc(m, dt, 2, (void *)p, dim, stride, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, swz,
               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A byte image NHWC [n][h][w][c] (c a multiple of 16) as im2col columns of `pixels` pixels x `chans` channels: the
// walk's bounding box from (lo, lo) to (h - 1 + hi, w - 1 + hi) (the top-left taps of the output pixels, lo = -pad)
// at stride (sh, sw), in the given swizzle; zeros outside the image
inline bool tma_map_im2col(CUtensorMap *m, const void *p, int n, int h, int w, int c, int lo, int hi, int sh, int sw,
                           int pixels, int chans, CUtensorMapSwizzle swz)
{
    encode_im2col_fn enc = tma_encoder_im2col();
    if (!enc || ((uintptr_t)p & 15) || c % 16)
        return false;
    const cuuint64_t dim[4] = {(cuuint64_t)c, (cuuint64_t)w, (cuuint64_t)h, (cuuint64_t)n};
    const cuuint64_t stride[3] = {(cuuint64_t)c, (cuuint64_t)c * w, (cuuint64_t)c * w * h};
    const int lower[2] = {lo, lo}, upper[2] = {hi, hi};
    const cuuint32_t estr[4] = {1, (cuuint32_t)sw, (cuuint32_t)sh, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, (void *)p, dim, stride, lower, upper, (cuuint32_t)chans,
               (cuuint32_t)pixels, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, swz, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

} // namespace
#endif
