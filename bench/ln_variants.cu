// Developer micro-benchmark (docs/CUDA.md, session 16): candidate LayerNorm kernels for BERT-base's 16384 x 768 FP16
// rows against kiln's cuk_layernorm (27.4 us on the H200, ~1.8 TB/s of the ~50 MB it moves; ~12 us would be the
// bytes' time). Each candidate is checked against cuk_layernorm's output on random rows (max |difference|) and
// timed (CUDA events, 50 launches). Candidates: R rows a warp with all R rows' loads issued before the reductions
// (more bytes in flight per warp; scale and bias read once per R rows), with a cap on registers (MINB blocks an SM).
// Build and run on a GPU machine:
//   nvcc -std=c++17 -Iinclude -Isrc -gencode=arch=compute_90a,code=sm_90a -O2 -o ln_variants bench/ln_variants.cu \
//        src/backend/cuda/kernels.cu src/backend/cuda/kernels_rows.cu src/backend/cuda/kernels_fp8.cu && ./ln_variants
#include "backend/cuda/kernels_common.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <vector>

// cols == CH * 256 (32 lanes x 8 values x CH); a warp normalizes rows [R w, R w + R).
template <int CH, int R, int MINB>
__global__ void __launch_bounds__(256, MINB) k_ln(const __half *x, const float *scale, const float *bias, __half *y,
                                                  int64_t rows, float eps)
{
    const int cols = CH * 256, lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32 * R;
    if (r0 >= rows)
        return;
    float v[R][CH][8];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < CH; j++)
            if (r0 + r < rows)
                ld8(x + (r0 + r) * cols + (lane + j * 32) * 8, v[r][j]);
    float mean[R], inv[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < CH; j++)
#pragma unroll
            for (int k = 0; k < 8; k++)
                s += v[r][j][k];
        mean[r] = warp_sum(s) / (float)cols;
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        float q = 0.f;
#pragma unroll
        for (int j = 0; j < CH; j++)
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float d = v[r][j][k] - mean[r];
                q += d * d;
            }
        inv[r] = 1.0f / sqrtf(warp_sum(q) / (float)cols + eps);
    }
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c = (lane + j * 32) * 8;
        float g[8], b[8];
        *(float4 *)&g[0] = *(const float4 *)(scale + c);
        *(float4 *)&g[4] = *(const float4 *)(scale + c + 4);
        *(float4 *)&b[0] = *(const float4 *)(bias + c);
        *(float4 *)&b[4] = *(const float4 *)(bias + c + 4);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r0 + r >= rows)
                break;
            float o[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                o[k] = (v[r][j][k] - mean[r]) * inv[r] * g[k] + b[k];
            st8(y + (r0 + r) * cols + c, o);
        }
    }
}

static float time_it(void (*fn)(void *), void *a, int reps)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    fn(a);
    cudaDeviceSynchronize();
    cudaEventRecord(e0);
    for (int i = 0; i < reps; i++)
        fn(a);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms * 1000.f / reps;
}

struct ln_arg {
    const __half *x;
    const float *scale, *bias;
    __half *y;
    int64_t rows;
};

static void run_kiln(void *p)
{
    ln_arg *a = (ln_arg *)p;
    cuk_layernorm(CUK_F16, a->x, a->scale, a->bias, a->y, a->rows, 768, 1e-12f, NULL, 0.f, 0);
}

template <int R, int MINB> static void run_var(void *p)
{
    ln_arg *a = (ln_arg *)p;
    const int64_t warps = (a->rows + R - 1) / R;
    k_ln<3, R, MINB><<<(unsigned)((warps * 32 + 255) / 256), 256>>>(a->x, a->scale, a->bias, a->y, a->rows, 1e-12f);
}

int main()
{
    const int64_t rows = 16384, cols = 768, n = rows * cols;
    std::vector<__half> hx(n);
    std::vector<float> hs(cols), hb(cols);
    srand(1);
    for (int64_t i = 0; i < n; i++)
        hx[i] = __float2half((float)rand() / RAND_MAX * 4.0f - 1.5f);
    for (int c = 0; c < cols; c++) {
        hs[c] = 0.5f + (float)rand() / RAND_MAX;
        hb[c] = (float)rand() / RAND_MAX - 0.5f;
    }
    __half *x, *y, *ref;
    float *s, *b;
    cudaMalloc(&x, n * 2);
    cudaMalloc(&y, n * 2);
    cudaMalloc(&ref, n * 2);
    cudaMalloc(&s, cols * 4);
    cudaMalloc(&b, cols * 4);
    cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(s, hs.data(), cols * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb.data(), cols * 4, cudaMemcpyHostToDevice);
    ln_arg a = {x, s, b, ref, rows};
    printf("kiln cuk_layernorm %lldx%lld: %.1f us\n", (long long)rows, (long long)cols, time_it(run_kiln, &a, 50));
    std::vector<__half> hr(n), hy(n);
    cudaMemcpy(hr.data(), ref, n * 2, cudaMemcpyDeviceToHost);
    struct {
        const char *name;
        void (*fn)(void *);
    } vs[] = {{"1 row a warp", run_var<1, 1>},        {"1 row a warp, 4 blocks an SM", run_var<1, 4>},
              {"2 rows a warp", run_var<2, 1>},       {"2 rows a warp, 3 blocks an SM", run_var<2, 3>},
              {"4 rows a warp", run_var<4, 1>},       {"4 rows a warp, 2 blocks an SM", run_var<4, 2>}};
    for (auto &v : vs) {
        a.y = y;
        cudaMemset(y, 0xff, n * 2);
        float us = time_it(v.fn, &a, 50);
        cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost);
        double d = 0;
        for (int64_t i = 0; i < n; i++)
            d = fmax(d, fabs((double)__half2float(hy[i]) - (double)__half2float(hr[i])));
        printf("%-32s %.1f us (%.0f GB/s)  max |d| to kiln's %.3g  %s\n", v.name, us, 4.0 * n / us / 1e3, d,
               cudaGetErrorString(cudaGetLastError()));
    }
    return 0;
}
