// Launch shapes shared by kiln's elementwise and row kernels (kernels.cu, kernels_rows.cu): grid-stride loops of
// 256 threads a block, at most 65535 x 32 blocks (the loop covers the rest); a block a row (block_reduce).
#ifndef KILN_BACKEND_CUDA_KERNELS_GRID_CUH
#define KILN_BACKEND_CUDA_KERNELS_GRID_CUH
#include "kernels_common.cuh"

#define THREADS 256

static inline unsigned grid_for(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    if (b < 1)
        b = 1;
    return (unsigned)(b > 65535LL * 32 ? 65535LL * 32 : b);
}

#define GRID_LOOP(i, n) for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                             i += (int64_t)gridDim.x * blockDim.x)

// block-wide reduction (blockDim.x a multiple of 32, at most 1024); every thread gets the result
static __device__ float block_reduce(float v, bool is_max)
{
    __shared__ float part[32];
    __shared__ float result;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = lane < nw ? part[lane] : (is_max ? -INFINITY : 0.f);
        t = is_max ? warp_max(t) : warp_sum(t);
        if (lane == 0)
            result = t;
    }
    __syncthreads();
    float r = result;
    __syncthreads();   // part / result reused by the next call
    return r;
}

// threads for a block a row: a power of two >= 32, up to 1024
static inline int row_threads(int64_t cols)
{
    int t = 32;
    while (t < 1024 && t < cols)
        t *= 2;
    return t;
}

#endif
