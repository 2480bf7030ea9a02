// kiln's row kernels: Softmax (rows, strided, the attention scores' softmax) and LayerNorm, FP32 / FP16 / BF16 --
// one block a row, one warp a row (the row in registers), or 16-byte chunks of half rows; the LayerNorm writes the
// E4M3 copy of what it stores when an FP8 layer reads it (a feed, cuda_fp8.c).
#include "kernels_grid.cuh"

// ---- one block a row (block_reduce, row_threads: kernels_grid.cuh)
// softmax of one row (block per row); T the storage, float32 arithmetic
template <typename T> __global__ void k_softmax_rows(const T *x, T *y, int64_t cols)
{
    const T *xr = x + blockIdx.x * cols;
    T *yr = y + blockIdx.x * cols;
    float mx = -INFINITY;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
        mx = fmaxf(mx, ldf(xr, k));   // fmaxf ignores NaN like the CPU's maximum
    mx = block_reduce(mx, true);
    float sum = 0.f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
        sum += expf(ldf(xr, k) - mx);
    sum = block_reduce(sum, false);
    float inv = 1.0f / sum;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
        stf(yr, k, expf(ldf(xr, k) - mx) * inv);
}

// ---- one warp per row (cols <= 1024): the row lives in registers, reductions are warp shuffles
#define ROWS_PER_BLOCK 8

__device__ __forceinline__ int64_t warp_row(void)
{
    return (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
}

// softmax(x * scale (+ mask | masked fill)) per row
template <typename T, int VPT>
__global__ void k_softmax_warp(const T *x, T *y, int64_t rows, int cols, float scale, const void *mask, int kind,
                               float fill, shape_arg sh)
{
    int64_t row = warp_row();
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;   // the whole warp
    const T *xr = x + row * cols;
    T *yr = y + row * cols;
    int64_t moff = mask ? mask_row_off(sh, row) : 0, mk = mask ? sh.str[0][sh.ndim - 1] : 0;
    float v[VPT];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int k = lane + j * 32;
        float t = -INFINITY;
        if (k < cols) {
            t = ldf(xr, k) * scale;
            if (mask)
                t = masked(t, mask, kind, fill, moff + k * mk);
            mx = fmaxf(mx, t);
        }
        v[j] = t;
    }
    mx = warp_max(mx);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < VPT; j++)
        if (lane + j * 32 < cols) {
            v[j] = expf(v[j] - mx);
            sum += v[j];
        }
    float inv = 1.0f / warp_sum(sum);
#pragma unroll
    for (int j = 0; j < VPT; j++)
        if (lane + j * 32 < cols)
            stf(yr, lane + j * 32, v[j] * inv);
}

template <typename T, int VPT>
__global__ void k_layernorm_warp(const T *x, const float *scale, const float *bias, T *y, int64_t rows, int cols,
                                 float eps)
{
    int64_t row = warp_row();
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const T *xr = x + row * cols;
    T *yr = y + row * cols;
    float v[VPT];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int k = lane + j * 32;
        v[j] = k < cols ? ldf(xr, k) : 0.f;
        s += v[j];
    }
    float mean = warp_sum(s) / (float)cols, q = 0.f;
#pragma unroll
    for (int j = 0; j < VPT; j++)
        if (lane + j * 32 < cols) {
            float d = v[j] - mean;
            q += d * d;
        }
    float inv = 1.0f / sqrtf(warp_sum(q) / (float)cols + eps);
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int k = lane + j * 32;
        if (k < cols) {
            float t = (v[j] - mean) * inv * scale[k];
            stf(yr, k, bias ? t + bias[k] : t);
        }
    }
}

// Launches KERNEL<T, VPT> with the smallest VPT (values per lane) that holds cols; false if cols > 1024.
#define WARP_ROWS(KERNEL, T, rows, cols, s, ...)                                                                \
    ([&]() -> bool {                                                                                            \
        unsigned g_ = (unsigned)(((rows) + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);                              \
        if ((cols) <= 32) KERNEL<T, 1><<<g_, 32 * ROWS_PER_BLOCK, 0, s>>>(__VA_ARGS__);                      \
        else if ((cols) <= 64) KERNEL<T, 2><<<g_, 32 * ROWS_PER_BLOCK, 0, s>>>(__VA_ARGS__);                 \
        else if ((cols) <= 128) KERNEL<T, 4><<<g_, 32 * ROWS_PER_BLOCK, 0, s>>>(__VA_ARGS__);                \
        else if ((cols) <= 256) KERNEL<T, 8><<<g_, 32 * ROWS_PER_BLOCK, 0, s>>>(__VA_ARGS__);                \
        else if ((cols) <= 512) KERNEL<T, 16><<<g_, 32 * ROWS_PER_BLOCK, 0, s>>>(__VA_ARGS__);               \
        else if ((cols) <= 1024) KERNEL<T, 32><<<g_, 32 * ROWS_PER_BLOCK, 0, s>>>(__VA_ARGS__);              \
        else return false;                                                                                      \
        return true;                                                                                            \
    }())

static inline bool warp_rows_fit(int64_t rows)
{
    return rows > 0 && (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK <= 0x7fffffffLL;
}

// ---- half rows in 16-byte chunks (8 values a lane a load, ld8 / st8): G lanes a row (G divides 32), CH chunks a lane

// k_softmax_warp over 16-byte chunks. Every lane joins the shuffles (rows past the end compute the last row
// again and store nothing).
template <typename T, int G, int CH>
__global__ void k_softmax_vec(const T *x, T *y, int64_t rows, int cols, float scale, const void *mask, int kind,
                              float fill, shape_arg sh)
{
    int sub = threadIdx.x % G;
    int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G;
    bool active = row < rows;
    int64_t r = active ? row : rows - 1;
    const T *xr = x + r * cols;
    int64_t moff = mask ? mask_row_off(sh, r) : 0, mk = mask ? sh.str[0][sh.ndim - 1] : 0;
    float v[CH][8];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < CH; j++) {
        int c = (sub + j * G) * 8;
        if (c < cols) {
            ld8(xr + c, v[j]);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float t = v[j][k] * scale;
                if (mask)
                    t = masked(t, mask, kind, fill, moff + (int64_t)(c + k) * mk);
                v[j][k] = t;
                mx = fmaxf(mx, t);
            }
        }
    }
    mx = group_max<G>(mx);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < CH; j++)
        if ((sub + j * G) * 8 < cols)
#pragma unroll
            for (int k = 0; k < 8; k++) {
                v[j][k] = expf(v[j][k] - mx);
                sum += v[j][k];
            }
    float inv = 1.0f / group_sum<G>(sum);
#pragma unroll
    for (int j = 0; j < CH; j++) {
        int c = (sub + j * G) * 8;
        if (active && c < cols) {
#pragma unroll
            for (int k = 0; k < 8; k++)
                v[j][k] *= inv;
            st8(y + r * cols + c, v[j]);
        }
    }
}

// GV: scale and bias (float32) read as 16-byte vectors after the reductions, one chunk at a time (H200, 16384 x 768
// FP16, bench/ln_variants.cu: 26.7 us when they were read with the row before the reductions -- 96 registers, 2
// blocks an SM -- against 17.7 us this way; one value at a time after them 34.4 us); else one value at a time.
// FULL: cols == CH * 256, every lane's every chunk in the row (no bounds checks).
// fq (may be NULL): also the E4M3 bytes of y as stored, with scale qs (an FP8 layer's input, cuda_fp8.c "feeds").
template <typename T, int CH, bool GV, bool FULL>
__global__ void k_layernorm_vec(const T *x, const float *scale, const float *bias, T *y, int64_t rows, int cols,
                                float eps, uint8_t *fq, float qs)
{
    int lane = threadIdx.x & 31;
    int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (row >= rows)
        return;   // the whole warp (32 lanes a row)
    const T *xr = x + row * cols;
    float v[CH][8];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < CH; j++)
        if (FULL || (lane + j * 32) * 8 < cols)
            ld8(xr + (lane + j * 32) * 8, v[j]);
#pragma unroll
    for (int j = 0; j < CH; j++)
        if (FULL || (lane + j * 32) * 8 < cols)
#pragma unroll
            for (int k = 0; k < 8; k++)
                s += v[j][k];
    float mean = warp_sum(s) / (float)cols, q = 0.f;
#pragma unroll
    for (int j = 0; j < CH; j++)
        if (FULL || (lane + j * 32) * 8 < cols)
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float d = v[j][k] - mean;
                q += d * d;
            }
    float inv = 1.0f / sqrtf(warp_sum(q) / (float)cols + eps);
#pragma unroll
    for (int j = 0; j < CH; j++) {
        int c = (lane + j * 32) * 8;
        if (FULL || c < cols) {
            float g[8], bb[8];
            if constexpr (GV) {
                *(float4 *)&g[0] = *(const float4 *)(scale + c);
                *(float4 *)&g[4] = *(const float4 *)(scale + c + 4);
                if (bias) {
                    *(float4 *)&bb[0] = *(const float4 *)(bias + c);
                    *(float4 *)&bb[4] = *(const float4 *)(bias + c + 4);
                }
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    g[k] = scale[c + k];
                    bb[k] = bias ? bias[c + k] : 0.f;
                }
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float t = (v[j][k] - mean) * inv * g[k];
                v[j][k] = bias ? t + bb[k] : t;
            }
            const uint4 u = st8(y + row * cols + c, v[j]);
            if (fq)
                stq<T, 8>(fq + row * cols + c, (const T *)&u, qs);
        }
    }
}

// Whether rows of cols half values at x and y take the 16-byte kernels.
template <typename T> static bool vec_rows(const void *x, const void *y, int64_t rows, int64_t cols)
{
    return sizeof(T) == 2 && cols > 0 && cols % 8 == 0 && cols <= 1024 && rows > 0 && rows <= 0x3fffffffLL &&
           ((uintptr_t)x | (uintptr_t)y) % 16 == 0;
}

template <typename T>
static void softmax_vec(const T *x, T *y, int64_t rows, int cols, float scale, const void *mask, int kind, float fill,
                        const shape_arg &sh, cudaStream_t s)
{
    int chunks = cols / 8;
    auto go = [&](auto kern, int g) {
        int64_t threads = rows * g;
        kern<<<(unsigned)((threads + 255) / 256), 256, 0, s>>>(x, y, rows, cols, scale, mask, kind, fill, sh);
    };
    if (chunks <= 4) go(k_softmax_vec<T, 4, 1>, 4);
    else if (chunks <= 8) go(k_softmax_vec<T, 8, 1>, 8);
    else if (chunks <= 16) go(k_softmax_vec<T, 16, 1>, 16);
    else if (chunks <= 32) go(k_softmax_vec<T, 32, 1>, 32);
    else if (chunks <= 64) go(k_softmax_vec<T, 32, 2>, 32);
    else go(k_softmax_vec<T, 32, 4>, 32);
}

template <typename T, bool GV, int CH>
static void layernorm_vec_ch(const T *x, const float *scale, const float *bias, T *y, int64_t rows, int cols,
                             float eps, uint8_t *q, float qs, cudaStream_t s)
{
    unsigned g = (unsigned)((rows * 32 + 255) / 256);
    if (cols == CH * 256)
        k_layernorm_vec<T, CH, GV, true><<<g, 256, 0, s>>>(x, scale, bias, y, rows, cols, eps, q, qs);
    else
        k_layernorm_vec<T, CH, GV, false><<<g, 256, 0, s>>>(x, scale, bias, y, rows, cols, eps, q, qs);
}

template <typename T, bool GV>
static void layernorm_vec_gv(const T *x, const float *scale, const float *bias, T *y, int64_t rows, int cols,
                             float eps, uint8_t *q, float qs, cudaStream_t s)
{
    int chunks = cols / 8;
    if (chunks <= 32) layernorm_vec_ch<T, GV, 1>(x, scale, bias, y, rows, cols, eps, q, qs, s);
    else if (chunks <= 64) layernorm_vec_ch<T, GV, 2>(x, scale, bias, y, rows, cols, eps, q, qs, s);
    else if (chunks <= 96) layernorm_vec_ch<T, GV, 3>(x, scale, bias, y, rows, cols, eps, q, qs, s);
    else layernorm_vec_ch<T, GV, 4>(x, scale, bias, y, rows, cols, eps, q, qs, s);
}

template <typename T>
static void layernorm_vec(const T *x, const float *scale, const float *bias, T *y, int64_t rows, int cols, float eps,
                          uint8_t *q, float qs, cudaStream_t s)
{
    if (((uintptr_t)scale | (uintptr_t)bias) % 16 == 0)
        layernorm_vec_gv<T, true>(x, scale, bias, y, rows, cols, eps, q, qs, s);
    else
        layernorm_vec_gv<T, false>(x, scale, bias, y, rows, cols, eps, q, qs, s);
}

template <typename T> static void softmax_rows(const T *x, T *y, int64_t rows, int64_t cols, cudaStream_t s)
{
    shape_arg none;
    memset(&none, 0, sizeof none);
    if (vec_rows<T>(x, y, rows, cols)) {
        softmax_vec<T>(x, y, rows, (int)cols, 1.0f, nullptr, 0, 0.0f, none, s);
        return;
    }
    if (cols > 0 && cols <= 1024 && warp_rows_fit(rows) &&
        WARP_ROWS(k_softmax_warp, T, rows, cols, s, x, y, rows, (int)cols, 1.0f, nullptr, 0, 0.0f, none))
        return;
    for (int64_t r0 = 0; r0 < rows; r0 += 2147483647LL) {
        int64_t nr = rows - r0 < 2147483647LL ? rows - r0 : 2147483647LL;
        if (nr > 0 && cols > 0)
            k_softmax_rows<T><<<(unsigned)nr, row_threads(cols), 0, s>>>(x + r0 * cols, y + r0 * cols, cols);
    }
}

extern "C" cudaError_t cuk_softmax_rows(int fdt, const void *x, void *y, int64_t rows, int64_t cols, cudaStream_t s)
{
    FDT_DISPATCH(fdt, softmax_rows<T>((const T *)x, (T *)y, rows, cols, s));
    return cudaGetLastError();
}

template <typename T> __global__ void k_softmax_strided(const T *x, T *y, int64_t outer, int64_t axis, int64_t inner)
{
    GRID_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t % inner;
        const T *xr = x + o * axis * inner + i;
        T *yr = y + o * axis * inner + i;
        float mx = -INFINITY, sum = 0.f;
        for (int64_t k = 0; k < axis; k++)
            mx = fmaxf(mx, ldf(xr, k * inner));
        for (int64_t k = 0; k < axis; k++)
            sum += expf(ldf(xr, k * inner) - mx);
        float inv = 1.0f / sum;
        for (int64_t k = 0; k < axis; k++)
            stf(yr, k * inner, expf(ldf(xr, k * inner) - mx) * inv);
    }
}

extern "C" cudaError_t cuk_softmax_strided(int fdt, const void *x, void *y, int64_t outer, int64_t axis, int64_t inner,
                                           cudaStream_t s)
{
    if (outer * inner > 0 && axis > 0)
        FDT_DISPATCH(fdt, k_softmax_strided<T><<<grid_for(outer * inner), THREADS, 0, s>>>((const T *)x, (T *)y, outer,
                                                                                           axis, inner));
    return cudaGetLastError();
}

// rows longer than a warp holds: one block per row, the masked and scaled row kept in float32 (ws)
template <typename T>
__global__ void k_attn_softmax(T *sc, float *ws, int64_t cols, float scale, const void *mask, int kind, float fill,
                               shape_arg sh)
{
    int64_t row = blockIdx.x;
    T *r = sc + row * cols;
    float *w = ws + row * cols;
    int64_t moff = mask ? mask_row_off(sh, row) : 0, mk = mask ? sh.str[0][sh.ndim - 1] : 0;
    float mx = -INFINITY;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
        float v = ldf(r, k) * scale;
        if (mask)
            v = masked(v, mask, kind, fill, moff + k * mk);
        w[k] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_reduce(mx, true);
    float sum = 0.f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
        float e = expf(w[k] - mx);
        w[k] = e;
        sum += e;
    }
    sum = block_reduce(sum, false);
    float inv = 1.0f / sum;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
        stf(r, k, w[k] * inv);
}

extern "C" bool cuk_attn_softmax_fits(int64_t rows, int64_t cols)
{
    return cols > 0 && cols <= 1024 && warp_rows_fit(rows);
}

extern "C" cudaError_t cuk_attn_softmax(int fdt, void *sc, float *ws, int64_t rows, int64_t cols, float scale,
                                        const void *mask, int kind, float fill, const cuk_shape *sh, cudaStream_t s)
{
    bool done = false;
    if (cuk_attn_softmax_fits(rows, cols))
        FDT_DISPATCH(fdt, done = vec_rows<T>(sc, sc, rows, cols)
                                     ? (softmax_vec<T>((const T *)sc, (T *)sc, rows, (int)cols, scale, mask, kind, fill,
                                                       to_arg(sh), s), true)
                                     : WARP_ROWS(k_softmax_warp, T, rows, cols, s, (const T *)sc, (T *)sc, rows,
                                                 (int)cols, scale, mask, kind, fill, to_arg(sh)));
    if (done)
        return cudaGetLastError();
    if (!ws)
        return cudaErrorInvalidValue;
    if (rows > 0 && cols > 0)
        FDT_DISPATCH(fdt, k_attn_softmax<T><<<(unsigned)rows, row_threads(cols), 0, s>>>((T *)sc, ws, cols, scale, mask,
                                                                                         kind, fill, to_arg(sh)));
    return cudaGetLastError();
}

template <typename T>
__global__ void k_layernorm(const T *x, const float *scale, const float *bias, T *y, int64_t cols, float eps)
{
    const T *xr = x + blockIdx.x * cols;
    T *yr = y + blockIdx.x * cols;
    float s = 0.f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
        s += ldf(xr, k);
    float mean = block_reduce(s, false) / (float)cols;
    float v = 0.f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
        float d = ldf(xr, k) - mean;
        v += d * d;
    }
    float var = block_reduce(v, false) / (float)cols;
    float inv = 1.0f / sqrtf(var + eps);
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
        float t = (ldf(xr, k) - mean) * inv * scale[k];
        stf(yr, k, bias ? t + bias[k] : t);
    }
}

// true when q was written too (the 16-byte rows kernel), else the caller quantizes y
template <typename T>
static bool layernorm(const T *x, const float *scale, const float *bias, T *y, int64_t rows, int64_t cols, float eps,
                      uint8_t *q, float qs, cudaStream_t s)
{
    if constexpr (sizeof(T) == 2) {   // half rows only (vec_rows): no float instantiation of the 16-byte kernels
        if (vec_rows<T>(x, y, rows, cols) && (!q || (uintptr_t)q % 8 == 0)) {
            layernorm_vec<T>(x, scale, bias, y, rows, (int)cols, eps, q, qs, s);
            return true;
        }
    }
    if (cols > 0 && cols <= 1024 && warp_rows_fit(rows) &&
        WARP_ROWS(k_layernorm_warp, T, rows, cols, s, x, scale, bias, y, rows, (int)cols, eps))
        return false;
    if (rows > 0 && cols > 0)
        k_layernorm<T><<<(unsigned)rows, row_threads(cols), 0, s>>>(x, scale, bias, y, cols, eps);
    return false;
}

extern "C" cudaError_t cuk_layernorm(int fdt, const void *x, const float *scale, const float *bias, void *y,
                                     int64_t rows, int64_t cols, float eps, uint8_t *q, float qs, cudaStream_t s)
{
    bool fed = false;
    FDT_DISPATCH(fdt, fed = layernorm<T>((const T *)x, scale, bias, (T *)y, rows, cols, eps, q, qs, s));
    if (q && !fed && rows * cols > 0) {
        cudaError_t e = cudaGetLastError();
        return e != cudaSuccess ? e : cuk_fp8_quant(fdt, y, q, rows * cols, qs, s);
    }
    return cudaGetLastError();
}
