// kiln's own CUDA kernels: elementwise math with broadcasting, casts, strided copies (Transpose,
// Slice, Expand), Gather, pooling, fused epilogues (row kernels -- Softmax, LayerNorm -- in kernels_rows.cu).
// FP32 first, written for correctness: grid-stride loops, 64-bit indices, warp reductions.
#include "kernels_act.cuh"
#include "kernels_grid.cuh"

template <typename T> __global__ void k_unary(int act, const T *x, T *y, int64_t n, float a, float b)
{
    GRID_LOOP(i, n) stf(y, i, act_apply(act, ldf(x, i), a, b));
}

// Elements VW at a time, one 16-byte load / store each (4 float32 or 8 half values); the same arithmetic per
// element as the scalar kernels, so the results are identical.
template <typename T> struct vw {
    static constexpr int N = 16 / sizeof(T);
};
static bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

// ACT >= 0: that activation, resolved at compile time (the hot ones); -1: act at run time
template <typename T, int ACT> __global__ void k_unary_v(int act, const T *x, T *y, int64_t nv, float a, float b)
{
    constexpr int V = vw<T>::N;
    GRID_LOOP(i, nv) {
        uint4 u = ((const uint4 *)x)[i];
        T *h = (T *)&u;
#pragma unroll
        for (int k = 0; k < V; k++)
            stf(h, k, act_apply(ACT < 0 ? act : ACT, ldf(h, k), a, b));
        ((uint4 *)y)[i] = u;
    }
}

// the launch of a vector kernel K<T, ACT> over nv vectors, ACT chosen from act
#define ACT_DISPATCH(K, act, nv, ...)                                                                          \
    do {                                                                                                       \
        const unsigned g_ = grid_for(nv);                                                                      \
        switch (act) {                                                                                         \
        case CUK_IDENTITY: K<T, CUK_IDENTITY><<<g_, THREADS, 0, s>>>(__VA_ARGS__); break;                      \
        case CUK_RELU: K<T, CUK_RELU><<<g_, THREADS, 0, s>>>(__VA_ARGS__); break;                              \
        case CUK_GELU: K<T, CUK_GELU><<<g_, THREADS, 0, s>>>(__VA_ARGS__); break;                              \
        default: K<T, -1><<<g_, THREADS, 0, s>>>(__VA_ARGS__); break;                                          \
        }                                                                                                      \
    } while (0)

template <typename T>
static void unary_launch(int act, const void *x, void *y, int64_t n, float alpha, float beta, cudaStream_t s)
{
    const int64_t V = vw<T>::N;
    if (n % V == 0 && aligned16(x) && aligned16(y))
        ACT_DISPATCH(k_unary_v, act, n / V, act, (const T *)x, (T *)y, n / V, alpha, beta);
    else
        k_unary<T><<<grid_for(n), THREADS, 0, s>>>(act, (const T *)x, (T *)y, n, alpha, beta);
}

extern "C" cudaError_t cuk_unary(int fdt, int act, const void *x, void *y, int64_t n, float alpha, float beta,
                                 cudaStream_t s)
{
    if (n > 0)
        FDT_DISPATCH(fdt, unary_launch<T>(act, x, y, n, alpha, beta, s));
    return cudaGetLastError();
}

template <typename T> __device__ __forceinline__ T bin_apply(int op, T a, T b)
{
    switch (op) {
    case CUK_ADD: return a + b;
    case CUK_SUB: return a - b;
    case CUK_MUL: return a * b;
    case CUK_DIV: return b == T(0) ? T(0) : a / b;   // integer division by zero: 0 (floats below)
    case CUK_MAX: return a > b ? a : b;
    case CUK_MIN: return a < b ? a : b;
    case CUK_POW: return (T)pow((double)a, (double)b);
    }
    return a;
}
template <> __device__ __forceinline__ float bin_apply<float>(int op, float a, float b)
{
    switch (op) {
    case CUK_ADD: return a + b;
    case CUK_SUB: return a - b;
    case CUK_MUL: return a * b;
    case CUK_DIV: return a / b;
    case CUK_MAX: return a != a || b != b ? (a + b) : fmaxf(a, b);   // NaN propagates
    case CUK_MIN: return a != a || b != b ? (a + b) : fminf(a, b);
    case CUK_POW: return powf(a, b);
    }
    return a;
}

// Index decomposition in I (uint32_t when the element count allows it: 64-bit integer division is
// many times slower on the GPU), offsets accumulated in 64 bits (strides may be negative).
template <typename I>
__device__ __forceinline__ void offsets(const shape_arg &sh, int64_t i64, int64_t *o0, int64_t *o1, int64_t *o2)
{
    int64_t a = 0, b = 0, c = 0;
    I i = (I)i64;
    for (int d = sh.ndim - 1; d >= 0; d--) {
        I dim = (I)sh.dims[d];
        I k = i % dim;
        i /= dim;
        a += (int64_t)k * sh.str[0][d];
        b += (int64_t)k * sh.str[1][d];
        c += (int64_t)k * sh.str[2][d];
    }
    *o0 = a;
    *o1 = b;
    *o2 = c;
}

static inline bool small_index(int64_t n)
{
    return n <= (int64_t)UINT32_MAX;
}

template <typename T> __global__ void k_binary_same(int op, const T *a, const T *b, T *y, int64_t n)
{
    GRID_LOOP(i, n) y[i] = bin_apply<T>(op, a[i], b[i]);
}

template <typename T, typename I>
__global__ void k_binary_bc(int op, const T *a, const T *b, T *y, int64_t n, shape_arg sh)
{
    GRID_LOOP(i, n) {
        int64_t oa, ob, oc;
        offsets<I>(sh, i, &oa, &ob, &oc);
        y[i] = bin_apply<T>(op, a[oa], b[ob]);
    }
}

// float storage (float32 / FP16 / BF16): computed in float32
template <typename T> __global__ void k_binary_same_f(int op, const T *a, const T *b, T *y, int64_t n)
{
    GRID_LOOP(i, n) stf(y, i, bin_apply<float>(op, ldf(a, i), ldf(b, i)));
}

template <typename T, typename I>
__global__ void k_binary_bc_f(int op, const T *a, const T *b, T *y, int64_t n, shape_arg sh)
{
    GRID_LOOP(i, n) {
        int64_t oa, ob, oc;
        offsets<I>(sh, i, &oa, &ob, &oc);
        stf(y, i, bin_apply<float>(op, ldf(a, oa), ldf(b, ob)));
    }
}

// 16 bytes of each operand a thread (V values), operand k's vector index i modulo its period p_k (in vectors: y's
// count for an operand of y's shape, fewer for one repeated over leading dimensions), kept incrementally over the
// grid-stride loop (one 64-bit modulo a thread, not one a vector). H200, BERT-base FP16 embeddings' Adds (128 x 128
// x 768, one of them the [1, 128, 768] position table): 0.068 / 0.079 ms with the scalar kernels.
template <typename T>
__global__ void k_binary_v(int op, const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ y, int64_t nv,
                           int64_t pa, int64_t pb)
{
    constexpr int V = 16 / sizeof(T);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nv)
        return;
    int64_t ia = i % pa, ib = i % pb;
    const int64_t sa = stride % pa, sb = stride % pb;
    for (; i < nv; i += stride) {
        const uint4 ua = ((const uint4 *)a)[ia], ub = ((const uint4 *)b)[ib];
        const T *ha = (const T *)&ua, *hb = (const T *)&ub;
        uint4 uy;
        T *hy = (T *)&uy;
#pragma unroll
        for (int k = 0; k < V; k++)
            stf(hy, k, bin_apply<float>(op, ldf(ha, k), ldf(hb, k)));
        ((uint4 *)y)[i] = uy;
        ia += sa;
        ia -= ia >= pa ? pa : 0;
        ib += sb;
        ib -= ib >= pb ? pb : 0;
    }
}

// The period (in elements) of operand k's offsets when they are y's index modulo it: strides contiguous over
// trailing dimensions (size-1 dimensions take any stride) and 0 over the leading ones; 0 when not so.
static int64_t bc_period(const cuk_shape *sh, int k)
{
    int64_t p = 1;
    int d = sh->ndim - 1;
    for (; d >= 0 && (sh->str[k][d] == p || sh->dims[d] == 1); d--)
        p *= sh->dims[d];
    for (; d >= 0; d--)
        if (sh->str[k][d] != 0 && sh->dims[d] != 1)
            return 0;
    return p;
}

// k_binary_v when every count is whole 16-byte vectors and the buffers are aligned to them.
template <typename T>
static bool binary_vec(int op, const void *a, const void *b, void *y, int64_t n, const cuk_shape *sh, cudaStream_t s)
{
    constexpr int V = 16 / sizeof(T);
    const int64_t pa = sh ? bc_period(sh, 0) : n, pb = sh ? bc_period(sh, 1) : n;
    if (n % V || pa <= 0 || pb <= 0 || pa % V || pb % V || ((uintptr_t)a | (uintptr_t)b | (uintptr_t)y) % 16)
        return false;
    const int64_t nv = n / V;
    k_binary_v<T><<<grid_for(nv), THREADS, 0, s>>>(op, (const T *)a, (const T *)b, (T *)y, nv, pa / V, pb / V);
    return true;
}

template <typename T>
static void launch_binary_f(int op, const void *a, const void *b, void *y, int64_t n, const cuk_shape *sh,
                            cudaStream_t s)
{
    if (binary_vec<T>(op, a, b, y, n, sh, s))
        return;
    if (!sh)
        k_binary_same_f<T><<<grid_for(n), THREADS, 0, s>>>(op, (const T *)a, (const T *)b, (T *)y, n);
    else if (small_index(n))
        k_binary_bc_f<T, uint32_t><<<grid_for(n), THREADS, 0, s>>>(op, (const T *)a, (const T *)b, (T *)y, n,
                                                                   to_arg(sh));
    else
        k_binary_bc_f<T, uint64_t><<<grid_for(n), THREADS, 0, s>>>(op, (const T *)a, (const T *)b, (T *)y, n,
                                                                   to_arg(sh));
}

template <typename T>
static void launch_binary(int op, const void *a, const void *b, void *y, int64_t n, const cuk_shape *sh, cudaStream_t s)
{
    if (!sh)
        k_binary_same<T><<<grid_for(n), THREADS, 0, s>>>(op, (const T *)a, (const T *)b, (T *)y, n);
    else if (small_index(n))
        k_binary_bc<T, uint32_t><<<grid_for(n), THREADS, 0, s>>>(op, (const T *)a, (const T *)b, (T *)y, n, to_arg(sh));
    else
        k_binary_bc<T, uint64_t><<<grid_for(n), THREADS, 0, s>>>(op, (const T *)a, (const T *)b, (T *)y, n, to_arg(sh));
}

extern "C" cudaError_t cuk_binary(int dtype, int op, const void *a, const void *b, void *y, int64_t n,
                                  const cuk_shape *sh, cudaStream_t s)
{
    if (n <= 0)
        return cudaGetLastError();
    if (dtype == 0)
        launch_binary_f<float>(op, a, b, y, n, sh, s);
    else if (dtype == 3)
        launch_binary_f<__half>(op, a, b, y, n, sh, s);
    else if (dtype == 4)
        launch_binary_f<__nv_bfloat16>(op, a, b, y, n, sh, s);
    else if (dtype == 1)
        launch_binary<long long>(op, a, b, y, n, sh, s);
    else
        launch_binary<int>(op, a, b, y, n, sh, s);
    return cudaGetLastError();
}

template <typename T>
__global__ void k_where(const bool *c, const T *a, const T *b, T *y, int64_t n, shape_arg sh)
{
    GRID_LOOP(i, n) {
        int64_t oc, oa, ob;
        offsets<uint64_t>(sh, i, &oc, &oa, &ob);
        y[i] = c[oc] ? a[oa] : b[ob];
    }
}

extern "C" cudaError_t cuk_where(size_t es, const bool *cond, const void *a, const void *b, void *y, int64_t n,
                                 const cuk_shape *sh, cudaStream_t s)
{
    if (n <= 0)
        return cudaGetLastError();
    if (es == 8)
        k_where<long long><<<grid_for(n), THREADS, 0, s>>>(cond, (const long long *)a, (const long long *)b,
                                                            (long long *)y, n, to_arg(sh));
    else if (es == 2)
        k_where<unsigned short><<<grid_for(n), THREADS, 0, s>>>(cond, (const unsigned short *)a,
                                                                (const unsigned short *)b, (unsigned short *)y, n,
                                                                to_arg(sh));
    else if (es == 4)
        k_where<int><<<grid_for(n), THREADS, 0, s>>>(cond, (const int *)a, (const int *)b, (int *)y, n, to_arg(sh));
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

// ---- casts (ONNX dtype ids)
__device__ __forceinline__ double load_as(int dt, const void *x, int64_t i)
{
    switch (dt) {
    case 1: return (double)((const float *)x)[i];
    case 2: return (double)((const unsigned char *)x)[i];
    case 3: return (double)((const signed char *)x)[i];
    case 6: return (double)((const int *)x)[i];
    case 7: return (double)((const long long *)x)[i];
    case 9: return ((const bool *)x)[i] ? 1.0 : 0.0;
    case 10: return (double)__half2float(((const __half *)x)[i]);
    case 16: return (double)__bfloat162float(((const __nv_bfloat16 *)x)[i]);
    }
    return 0;
}

__device__ __forceinline__ long long to_int_trunc(double v)
{
    return v != v ? 0 : (long long)v;
}

__global__ void k_cast(int sdt, const void *x, int ddt, void *y, int64_t n)
{
    GRID_LOOP(i, n) {
        if (sdt == 7 && ddt == 7) {   // exact for large int64
            ((long long *)y)[i] = ((const long long *)x)[i];
            continue;
        }
        if (sdt == 7 && ddt == 6) {
            ((int *)y)[i] = (int)((const long long *)x)[i];
            continue;
        }
        double v = load_as(sdt, x, i);
        switch (ddt) {
        case 1: ((float *)y)[i] = sdt == 7 ? (float)((const long long *)x)[i] : (float)v; break;
        case 2: ((unsigned char *)y)[i] = (unsigned char)to_int_trunc(v); break;
        case 3: ((signed char *)y)[i] = (signed char)to_int_trunc(v); break;
        case 6: ((int *)y)[i] = (int)to_int_trunc(v); break;
        case 7: ((long long *)y)[i] = to_int_trunc(v); break;
        case 9: ((bool *)y)[i] = v != 0.0; break;
        case 10: ((__half *)y)[i] = __float2half_rn(sdt == 7 ? (float)((const long long *)x)[i] : (float)v); break;
        case 16:
            ((__nv_bfloat16 *)y)[i] = __float2bfloat16_rn(sdt == 7 ? (float)((const long long *)x)[i] : (float)v);
            break;
        }
    }
}

extern "C" cudaError_t cuk_cast(int src_dt, const void *x, int dst_dt, void *y, int64_t n, cudaStream_t s)
{
    if (n > 0)
        k_cast<<<grid_for(n), THREADS, 0, s>>>(src_dt, x, dst_dt, y, n);
    return cudaGetLastError();
}

// ---- strided copies
template <typename T, typename I> __global__ void k_strided(const T *x, int64_t base, T *y, int64_t n, shape_arg sh)
{
    GRID_LOOP(i, n) {
        int64_t o = base;
        I r = (I)i;
        for (int d = sh.ndim - 1; d >= 0; d--) {
            I dim = (I)sh.dims[d];
            I k = r % dim;
            r /= dim;
            o += (int64_t)k * sh.str[0][d];
        }
        y[i] = x[o];
    }
}

template <typename T>
static void launch_strided(const void *x, int64_t base, void *y, int64_t n, const shape_arg &a, cudaStream_t s)
{
    if (small_index(n))
        k_strided<T, uint32_t><<<grid_for(n), THREADS, 0, s>>>((const T *)x, base, (T *)y, n, a);
    else
        k_strided<T, uint64_t><<<grid_for(n), THREADS, 0, s>>>((const T *)x, base, (T *)y, n, a);
}

// Batched 2-D transpose through shared memory, for an output whose innermost dim q walks x with stride sq
// and whose next dim p walks it with stride 1: y[(b * P + p) * Q + q] = x[base + b * sb + p + q * sq].
// 32 x 32 tiles: reads coalesced along p, writes along q (the strided kernel's reads would be 2-4 bytes
// a lane, sq apart).
#define TT 32
template <typename T>
__global__ void k_transpose_tiles(const T *x, int64_t base, T *y, int64_t P, int64_t Q, int64_t sb, int64_t sq,
                                  int64_t tiles_p, int64_t tiles_q)
{
    __shared__ T tile[TT][TT + 1];
    for (int64_t t = blockIdx.x; t < tiles_p * tiles_q; t += gridDim.x) {
        int64_t tq = t % tiles_q, tp = t / tiles_q;
        int64_t b = blockIdx.y;
        const T *xb = x + base + b * sb;
        int64_t p0 = tp * TT, q0 = tq * TT;
        for (int r = threadIdx.y; r < TT; r += blockDim.y) {   // rows of the tile: q
            int64_t q = q0 + r, p = p0 + threadIdx.x;
            if (q < Q && p < P)
                tile[r][threadIdx.x] = xb[p + q * sq];
        }
        __syncthreads();
        for (int r = threadIdx.y; r < TT; r += blockDim.y) {   // rows of the output tile: p
            int64_t p = p0 + r, q = q0 + threadIdx.x;
            if (q < Q && p < P)
                y[(b * P + p) * Q + q] = tile[threadIdx.x][r];
        }
        __syncthreads();
    }
}

extern "C" cudaError_t cuk_strided_copy(size_t es, const void *x, int64_t base, void *y, int64_t n,
                                        const cuk_shape *sh, cudaStream_t s)
{
    if (n <= 0)
        return cudaGetLastError();
    shape_arg a = to_arg(sh);
    // [nb,] P, Q with Q's input stride > 1 and P's 1: a (batched) 2-D transpose, tiled
    int m = sh->ndim;
    if ((m == 2 || m == 3) && sh->str[0][m - 1] != 1 && sh->str[0][m - 2] == 1 && (es == 2 || es == 4) &&
        (m == 2 || sh->dims[0] <= 65535)) {
        int64_t nb = m == 3 ? sh->dims[0] : 1, sb = m == 3 ? sh->str[0][0] : 0;
        int64_t P = sh->dims[m - 2], Q = sh->dims[m - 1], sq = sh->str[0][m - 1];
        int64_t tp = (P + TT - 1) / TT, tq = (Q + TT - 1) / TT, tiles = tp * tq;
        dim3 grid((unsigned)(tiles < 65535 * 32 ? tiles : 65535 * 32), (unsigned)nb), blk(TT, 8);
        if (es == 2)
            k_transpose_tiles<unsigned short><<<grid, blk, 0, s>>>((const unsigned short *)x, base, (unsigned short *)y,
                                                                    P, Q, sb, sq, tp, tq);
        else
            k_transpose_tiles<unsigned int><<<grid, blk, 0, s>>>((const unsigned int *)x, base, (unsigned int *)y, P,
                                                                  Q, sb, sq, tp, tq);
        return cudaGetLastError();
    }
    switch (es) {
    case 1: launch_strided<unsigned char>(x, base, y, n, a, s); break;
    case 2: launch_strided<unsigned short>(x, base, y, n, a, s); break;
    case 4: launch_strided<unsigned int>(x, base, y, n, a, s); break;
    case 8: launch_strided<unsigned long long>(x, base, y, n, a, s); break;
    case 16: launch_strided<uint4>(x, base, y, n, a, s); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

// ---- gather
template <typename T, typename I>
__global__ void k_gather(const T *x, const void *idx, bool idx64, T *y, int64_t outer, int64_t axis_len, int64_t n_idx,
                         int64_t inner, int *bad)
{
    int64_t n = outer * n_idx * inner;
    GRID_LOOP(i, n) {
        I in_ = (I)i % (I)inner, r = (I)i / (I)inner;
        I j = r % (I)n_idx, o = r / (I)n_idx;
        int64_t k = idx64 ? ((const long long *)idx)[j] : (int64_t)((const int *)idx)[j];
        if (k < 0)
            k += axis_len;
        if (k < 0 || k >= axis_len) {
            *bad = 1;
            y[i] = T{};
        } else {
            y[i] = x[((int64_t)o * axis_len + k) * inner + (int64_t)in_];
        }
    }
}

template <typename T>
static void launch_gather(const void *x, const void *idx, bool idx64, void *y, int64_t outer, int64_t axis_len,
                          int64_t n_idx, int64_t inner, int *bad, cudaStream_t s)
{
    int64_t n = outer * n_idx * inner;
    if (small_index(n))
        k_gather<T, uint32_t><<<grid_for(n), THREADS, 0, s>>>((const T *)x, idx, idx64, (T *)y, outer, axis_len, n_idx,
                                                              inner, bad);
    else
        k_gather<T, uint64_t><<<grid_for(n), THREADS, 0, s>>>((const T *)x, idx, idx64, (T *)y, outer, axis_len, n_idx,
                                                              inner, bad);
}

extern "C" cudaError_t cuk_gather(size_t es, const void *x, const void *idx, bool idx64, void *y, int64_t outer,
                                  int64_t axis_len, int64_t n_idx, int64_t inner, int *bad, cudaStream_t s)
{
    int64_t n = outer * n_idx * inner;
    if (n <= 0)
        return cudaGetLastError();
    // rows of 16-byte multiples (BERT's embedding tables: 768 x 4 bytes) copied as 16-byte pieces: the same kernel
    // over uint4 elements, inner / (16 / es) of them a row (one index lookup and division per 16 bytes, not per 4)
    if ((size_t)inner * es % 16 == 0 && aligned16(x) && aligned16(y)) {
        launch_gather<uint4>(x, idx, idx64, y, outer, axis_len, n_idx, (int64_t)((size_t)inner * es / 16), bad, s);
        return cudaGetLastError();
    }
    switch (es) {
    case 1: launch_gather<unsigned char>(x, idx, idx64, y, outer, axis_len, n_idx, inner, bad, s); break;
    case 2: launch_gather<unsigned short>(x, idx, idx64, y, outer, axis_len, n_idx, inner, bad, s); break;
    case 4: launch_gather<unsigned int>(x, idx, idx64, y, outer, axis_len, n_idx, inner, bad, s); break;
    case 8: launch_gather<unsigned long long>(x, idx, idx64, y, outer, axis_len, n_idx, inner, bad, s); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

// ---- pooling
struct pool_arg {
    int kind;
    int64_t nc, h, w, oh, ow;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int peh, pew;
    bool cip;
    int64_t c;   // NHWC channels (0: NCHW)
};

template <typename T> __global__ void k_pool2d(pool_arg p, const T *x, T *y)
{
    GRID_LOOP(i, p.nc * p.oh * p.ow) {
        // NCHW: i over (plane, oy, ox); NHWC: i over (n, oy, ox, c), elements C apart
        int64_t ox, oy, step;
        const T *xp;
        if (p.c) {
            int64_t r = i / p.c, ch = i % p.c;
            ox = r % p.ow;
            oy = (r / p.ow) % p.oh;
            xp = x + (r / (p.ow * p.oh)) * p.h * p.w * p.c + ch;
            step = p.c;
        } else {
            ox = i % p.ow;
            oy = (i / p.ow) % p.oh;
            xp = x + (i / (p.ow * p.oh)) * p.h * p.w;
            step = 1;
        }
        int64_t y0 = oy * p.sh - p.ph, x0 = ox * p.sw - p.pw;
        float acc = p.kind == 0 ? -INFINITY : 0.f;
        int cnt = 0;
        for (int ky = 0; ky < p.kh; ky++) {
            int64_t yy = y0 + (int64_t)ky * p.dh;
            if (yy < 0 || yy >= p.h)
                continue;
            for (int kx = 0; kx < p.kw; kx++) {
                int64_t xx = x0 + (int64_t)kx * p.dw;
                if (xx < 0 || xx >= p.w)
                    continue;
                float v = ldf(xp, (yy * p.w + xx) * step);
                if (p.kind == 0)
                    acc = (v > acc || v != v) ? v : acc;
                else
                    acc += v;
                cnt++;
            }
        }
        if (p.kind == 1) {
            int64_t div = cnt;
            if (p.cip) {   // the window clipped to the padded input
                int64_t ye = y0 + (int64_t)(p.kh - 1) * p.dh + 1, xe = x0 + (int64_t)(p.kw - 1) * p.dw + 1;
                int64_t yl = ye < p.h + p.peh ? ye : p.h + p.peh, xl = xe < p.w + p.pew ? xe : p.w + p.pew;
                int64_t hy = (yl - y0 + p.dh - 1) / p.dh, wx = (xl - x0 + p.dw - 1) / p.dw;
                div = hy * wx;
            }
            acc = div > 0 ? acc / (float)div : 0.f;
        }
        stf(y, i, acc);
    }
}

// Max pooling over NHWC half data, 8 channels (16 bytes) a thread, 32-bit indexing: the NHWC path of
// k_pool2d for C % 8 == 0 (ResNet's stem pool), same results (NaN propagates, -inf for empty windows).
// q (may be NULL): the E4M3 bytes of y as stored too, scale qs (an FP8 layer's feed: cuk_fp8_quant's bytes).
template <typename T, typename T2>
__global__ void k_maxpool_nhwc8(pool_arg p, const T *x, T *y, uint32_t groups, uint8_t *q, float qs)
{
    uint32_t c8 = (uint32_t)p.c / 8, ow = (uint32_t)p.ow, oh = (uint32_t)p.oh;
    for (uint32_t g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
        uint32_t cg = g % c8, r = g / c8, ox = r % ow, r2 = r / ow, oy = r2 % oh, n = r2 / oh;
        int y0 = (int)oy * p.sh - p.ph, x0 = (int)ox * p.sw - p.pw;
        const T *xn = x + (size_t)n * (uint32_t)p.h * (uint32_t)p.w * (uint32_t)p.c + cg * 8;
        T2 m[4];
        for (int k = 0; k < 4; k++)
            m[k] = T2(T(-INFINITY), T(-INFINITY));
        for (int ky = 0; ky < p.kh; ky++) {
            int yy = y0 + ky * p.dh;
            if (yy < 0 || yy >= (int)p.h)
                continue;
            for (int kx = 0; kx < p.kw; kx++) {
                int xx = x0 + kx * p.dw;
                if (xx < 0 || xx >= (int)p.w)
                    continue;
                uint4 v = *(const uint4 *)(xn + ((size_t)yy * (uint32_t)p.w + (uint32_t)xx) * (uint32_t)p.c);
                const T2 *h = (const T2 *)&v;
                for (int k = 0; k < 4; k++)
                    m[k] = __hmax2_nan(m[k], h[k]);
            }
        }
        *(uint4 *)(y + (size_t)g * 8) = *(const uint4 *)m;
        if (q)
            stq<T, 8>(q + (size_t)g * 8, (const T *)m, qs);
    }
}

// The NHWC max pool of 8 half channels a thread (k_maxpool_nhwc8) runs these operands.
static bool pool_vec(int fdt, const cuk_pool *p, const void *x, const void *y)
{
    int64_t n = p->nc * p->oh * p->ow;
    return p->kind == 0 && fdt != CUK_F32 && p->c > 0 && p->c % 8 == 0 && n < INT32_MAX &&
           p->nc * p->h * p->w < INT32_MAX && p->h < INT32_MAX / 4 && p->w < INT32_MAX / 4 &&
           ((uintptr_t)x | (uintptr_t)y) % 16 == 0;
}

extern "C" bool cuk_pool2d_feeds(int fdt, const cuk_pool *p, const void *x, const void *y)
{
    return pool_vec(fdt, p, x, y);
}

extern "C" cudaError_t cuk_pool2d(int fdt, const cuk_pool *p, const void *x, void *y, uint8_t *q, float qs,
                                  cudaStream_t s)
{
    pool_arg a = {p->kind, p->nc, p->h, p->w, p->oh, p->ow, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw, p->dh, p->dw,
                  p->peh, p->pew, p->count_include_pad, p->c};
    int64_t n = p->nc * p->oh * p->ow;
    if (n <= 0)
        return cudaGetLastError();
    bool vec = pool_vec(fdt, p, x, y);
    if (q && (!vec || (uintptr_t)q % 8))
        return cudaErrorInvalidValue;   /* only the vector path writes a feed (cuk_pool2d_feeds) */
    if (vec && fdt == CUK_F16)
        k_maxpool_nhwc8<__half, __half2><<<grid_for(n / 8), THREADS, 0, s>>>(a, (const __half *)x, (__half *)y,
                                                                              (uint32_t)(n / 8), q, qs);
    else if (vec)
        k_maxpool_nhwc8<__nv_bfloat16, __nv_bfloat162><<<grid_for(n / 8), THREADS, 0, s>>>(
            a, (const __nv_bfloat16 *)x, (__nv_bfloat16 *)y, (uint32_t)(n / 8), q, qs);
    else
        FDT_DISPATCH(fdt, k_pool2d<T><<<grid_for(n), THREADS, 0, s>>>(a, (const T *)x, (T *)y));
    return cudaGetLastError();
}

template <typename T> __global__ void k_gap(const T *x, T *y, int64_t hw)
{
    const T *xr = x + blockIdx.x * hw;
    float s = 0.f;
    for (int64_t k = threadIdx.x; k < hw; k += blockDim.x)
        s += ldf(xr, k);
    s = block_reduce(s, false);
    if (threadIdx.x == 0)
        stf(y, blockIdx.x, s / (float)hw);
}

extern "C" cudaError_t cuk_global_avgpool(int fdt, const void *x, void *y, int64_t nc, int64_t hw, cudaStream_t s)
{
    if (nc > 0 && hw > 0)
        FDT_DISPATCH(fdt, k_gap<T><<<(unsigned)nc, row_threads(hw), 0, s>>>((const T *)x, (T *)y, hw));
    return cudaGetLastError();
}

// NHWC: blocks of 32 channels x 8 pixel rows, each over one slice of an image's pixels (gap_nhwc_slices: enough
// blocks to fill the GPU even for one image of few channels), writing float partial sums part[n][slice][c]; then
// k_gap_nhwc_sum adds an image's slices. One thread a channel over all pixels took 2.3 ms for PP-OCRv4 det's
// 1x96x160x160 (session 23).
#define GAP_CH 32
#define GAP_ROWS 8
static int64_t gap_nhwc_slices(int64_t n, int64_t c, int64_t hw)
{
    int64_t blocks = n * ((c + GAP_CH - 1) / GAP_CH), s = (264 + blocks - 1) / blocks, most = (hw + 63) / 64;
    if (s > most)
        s = most;
    return s < 1 ? 1 : s > 1024 ? 1024 : s;
}

template <typename T>
__global__ void k_gap_nhwc_part(const T *x, float *part, int64_t c, int64_t hw, int64_t slices)
{
    __shared__ float red[GAP_ROWS][GAP_CH + 1];
    int64_t img = blockIdx.y, sl = blockIdx.z, ch = (int64_t)blockIdx.x * GAP_CH + threadIdx.x;
    int64_t per = (hw + slices - 1) / slices, p0 = sl * per, p1 = p0 + per < hw ? p0 + per : hw;
    float s = 0.f;
    if (ch < c) {
        const T *xp = x + img * hw * c + ch;
        for (int64_t p = p0 + threadIdx.y; p < p1; p += GAP_ROWS)
            s += ldf(xp, p * c);
    }
    red[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && ch < c) {
        for (int r = 1; r < GAP_ROWS; r++)
            s += red[r][threadIdx.x];
        part[(img * slices + sl) * c + ch] = s;
    }
}

template <typename T> __global__ void k_gap_nhwc_sum(const float *part, T *y, int64_t n, int64_t c, int64_t hw,
                                                     int64_t slices)
{
    GRID_LOOP(i, n * c) {
        int64_t img = i / c, ch = i % c;
        float s = 0.f;
        for (int64_t k = 0; k < slices; k++)
            s += part[(img * slices + k) * c + ch];
        stf(y, i, s / (float)hw);
    }
}

extern "C" size_t cuk_global_avgpool_nhwc_scratch(int64_t n, int64_t c, int64_t hw)
{
    return n * c > 0 && hw > 0 ? (size_t)(n * c * gap_nhwc_slices(n, c, hw)) * sizeof(float) : 0;
}

extern "C" cudaError_t cuk_global_avgpool_nhwc(int fdt, const void *x, void *y, int64_t n, int64_t c, int64_t hw,
                                               float *scratch, cudaStream_t s)
{
    if (n * c <= 0 || hw <= 0)
        return cudaGetLastError();
    if (n > 65535)
        return cudaErrorInvalidValue;
    int64_t slices = gap_nhwc_slices(n, c, hw);
    dim3 grid((unsigned)((c + GAP_CH - 1) / GAP_CH), (unsigned)n, (unsigned)slices), block(GAP_CH, GAP_ROWS);
    FDT_DISPATCH(fdt, k_gap_nhwc_part<T><<<grid, block, 0, s>>>((const T *)x, scratch, c, hw, slices));
    FDT_DISPATCH(fdt, k_gap_nhwc_sum<T><<<grid_for(n * c), THREADS, 0, s>>>(scratch, (T *)y, n, c, hw, slices));
    return cudaGetLastError();
}

template <typename T, typename I>
__global__ void k_epilogue(T *y, int64_t n, int64_t channels, int64_t inner, const float *bias, const T *res, int act,
                           float a, float b)
{
    GRID_LOOP(i, n) {
        float v = ldf(y, i);
        if (bias)
            v += bias[((I)i / (I)inner) % (I)channels];
        if (res)
            v += ldf(res, i);
        stf(y, i, act_apply(act, v, a, b));
    }
}

// k_epilogue over vectors of V elements that share one bias value (inner % V == 0) or take V consecutive ones
// (inner == 1, channels % V == 0). With inner == 1 the column of a thread's vector is kept incrementally over its
// grid-stride loop (no 64-bit division per vector) and the bias read as 16-byte vectors where it is aligned.
// q (may be NULL): also the E4M3 bytes of y as stored, with scale qs (an FP8 layer's input, cuda_fp8.c "feeds").
// wy false: y is not written back (cuk_epilogue_e4m3: only the E4M3 bytes are wanted).
template <typename T, int ACT>
__global__ void k_epilogue_v(T *y, int64_t nv, int64_t channels, int64_t inner, const float *bias, const T *res,
                             int act, float a, float b, uint8_t *q, float qs, bool wy)
{
    constexpr int V = vw<T>::N;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t cv = bias && inner == 1 ? channels / V : 1, step = stride % cv;
    int64_t col = i % cv;
    const bool b16 = bias && inner == 1 && (uintptr_t)bias % 16 == 0;
    for (; i < nv; i += stride) {
        uint4 u = ((const uint4 *)y)[i];
        T *h = (T *)&u;
        float v[V];
#pragma unroll
        for (int k = 0; k < V; k++)
            v[k] = ldf(h, k);
        if (bias) {
            if (inner == 1) {
                const float *bc = bias + col * V;
                if (b16) {
#pragma unroll
                    for (int k = 0; k < V; k += 4) {
                        const float4 f = *(const float4 *)(bc + k);
                        v[k] += f.x;
                        v[k + 1] += f.y;
                        v[k + 2] += f.z;
                        v[k + 3] += f.w;
                    }
                } else {
#pragma unroll
                    for (int k = 0; k < V; k++)
                        v[k] += bc[k];
                }
            } else {
                const float bv = bias[(i * V / inner) % channels];
#pragma unroll
                for (int k = 0; k < V; k++)
                    v[k] += bv;
            }
        }
        if (res) {
            uint4 r = ((const uint4 *)res)[i];
            const T *rh = (const T *)&r;
#pragma unroll
            for (int k = 0; k < V; k++)
                v[k] += ldf(rh, k);
        }
#pragma unroll
        for (int k = 0; k < V; k++)
            stf(h, k, act_apply(ACT < 0 ? act : ACT, v[k], a, b));
        if (wy)
            ((uint4 *)y)[i] = u;
        if (q)
            stq<T, V>(q + i * V, h, qs);
        col += step;
        if (col >= cv)
            col -= cv;
    }
}

#define EPI_BLOCKS 4096
template <typename T>
static bool epilogue_vec(void *y, int64_t n, int64_t channels, int64_t inner, const float *bias, const void *res,
                         int act, float alpha, float beta, uint8_t *q, float qs, bool wy, cudaStream_t s)
{
    const int64_t V = vw<T>::N;
    if (n % V || !aligned16(y) || (res && !aligned16(res)) || (q && (uintptr_t)q % V) ||
        (bias && !(inner % V == 0 || (inner == 1 && channels % V == 0))))
        return false;
    // a few grid-stride iterations a thread (the column kept incrementally): at most EPI_BLOCKS blocks
    const int64_t nv = n / V;
    ACT_DISPATCH(k_epilogue_v, act, nv < (int64_t)EPI_BLOCKS * THREADS ? nv : (int64_t)EPI_BLOCKS * THREADS, (T *)y, nv,
                 channels, inner, bias, (const T *)res, act, alpha, beta, q, qs, wy);
    return true;
}

extern "C" cudaError_t cuk_epilogue(int fdt, void *y, int64_t n, int64_t channels, int64_t inner, const float *bias,
                                    const void *res, int act, float alpha, float beta, cudaStream_t s)
{
    return cuk_epilogue_q(fdt, y, n, channels, inner, bias, res, act, alpha, beta, NULL, 0.f, s);
}

extern "C" cudaError_t cuk_epilogue_q(int fdt, void *y, int64_t n, int64_t channels, int64_t inner,
                                      const float *bias, const void *res, int act, float alpha, float beta,
                                      uint8_t *q, float qs, cudaStream_t s)
{
    channels = channels > 0 ? channels : 1;
    inner = inner > 0 ? inner : 1;
    bool done = false;
    if (n > 0)
        FDT_DISPATCH(fdt, done = epilogue_vec<T>(y, n, channels, inner, bias, res, act, alpha, beta, q, qs, true, s));
    if (done || n <= 0)
        return cudaGetLastError();
    if (small_index(n))
        FDT_DISPATCH(fdt, k_epilogue<T, uint32_t><<<grid_for(n), THREADS, 0, s>>>((T *)y, n, channels, inner, bias,
                                                                                  (const T *)res, act, alpha, beta));
    else
        FDT_DISPATCH(fdt, k_epilogue<T, uint64_t><<<grid_for(n), THREADS, 0, s>>>((T *)y, n, channels, inner, bias,
                                                                                  (const T *)res, act, alpha, beta));
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess && q ? cuk_fp8_quant(fdt, y, q, n, qs, s) : e;
}

extern "C" cudaError_t cuk_epilogue_e4m3(int fdt, void *x, int64_t n, int64_t channels, const float *bias, int act,
                                         float alpha, float beta, uint8_t *q, float qs, cudaStream_t s)
{
    bool done = false;
    if (n > 0)
        FDT_DISPATCH(fdt, done = epilogue_vec<T>(x, n, channels, 1, bias, NULL, act, alpha, beta, q, qs, false, s));
    if (done || n <= 0)
        return cudaGetLastError();
    return cuk_epilogue_q(fdt, x, n, channels, 1, bias, NULL, act, alpha, beta, q, qs, s);   /* in place over x */
}

template <typename T> __global__ void k_fill(T *y, int64_t n, float v)
{
    GRID_LOOP(i, n) stf(y, i, v);
}

extern "C" cudaError_t cuk_fill(int fdt, void *y, int64_t n, float v, cudaStream_t s)
{
    if (n > 0)
        FDT_DISPATCH(fdt, k_fill<T><<<grid_for(n), THREADS, 0, s>>>((T *)y, n, v));
    return cudaGetLastError();
}
