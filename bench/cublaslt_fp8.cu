// Developer micro-benchmark (docs/CUDA.md, "FP8 GEMMs"): cuBLASLt's FP16 and FP8 GEMMs alone at BERT-base batch-128
// shapes (M = 16384 tokens), with the output and epilogue variants kiln could use: FP16 or E4M3 output (D scale),
// bias, GELU, fast accumulation. Each variant times up to 24 of cuBLASLt's heuristic candidates (CUDA events, 20
// launches after one) and prints the best. It also prints which GELU cuBLASLt's epilogue computes (exact erf or
// the tanh approximation), from an FP16 GEMM by the identity. Build and run on a GPU machine:
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -O2 -o cublaslt_fp8 bench/cublaslt_fp8.cu -lcublasLt -lcublas
//   ./cublaslt_fp8
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 64u << 20;

struct variant {
    const char *name;
    cudaDataType_t ab, c, d;   // A/B type, C type, D type
    cublasLtEpilogue_t epi;
    int fast;                 // fast accumulation (FP8)
    int bscale;               // FP8: also a B (activation) scale pointer, not only A's (the weight's)
};

// D[M, N] (row-major) = X[M, K] (row-major) * W[N, K]^T, as cuBLASLt's column-major TN: D^T (N x M) = W (K x N)^T X^T
static float run_variant(const variant &v, int64_t M, int64_t N, int64_t K, void *x, void *w, void *y, void *bias,
                         float *scales, int *n_algo, void *cbuf = NULL)
{
    // C must not alias D when their types differ (an E4M3 D with an FP16 C): cuBLASLt refuses in-place then
    void *c = v.c != v.d && cbuf ? cbuf : y;
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    bool fp8 = v.ab == CUDA_R_8F_E4M3;
    if (fp8) {
        const float *sa = scales, *sb = scales + 1, *sd = scales + 2;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
        if (v.bscale)
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
        if (v.d == CUDA_R_8F_E4M3)
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &sd, sizeof sd);
        int8_t fa = (int8_t)v.fast;
        if (fa)
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof fa);
    }
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &v.epi, sizeof v.epi);
    if (v.epi & CUBLASLT_EPILOGUE_BIAS) {
        cudaDataType_t bt = v.c == CUDA_R_16BF ? CUDA_R_16BF : CUDA_R_16F;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatrixLayoutCreate(&la, v.ab, K, N, K);
    cublasLtMatrixLayoutCreate(&lb, v.ab, K, M, K);
    cublasLtMatrixLayoutCreate(&lc, v.c, N, M, N);
    cublasLtMatrixLayoutCreate(&ld, v.d, N, M, N);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t wsz = WS;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
    cublasLtMatmulHeuristicResult_t h[24];
    int nh = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 24, h, &nh);
    *n_algo = hs == CUBLAS_STATUS_SUCCESS ? nh : -(int)hs;
    float alpha = 1.0f, beta = 0.0f, best = INFINITY;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < nh && hs == CUBLAS_STATUS_SUCCESS; i++) {
        cublasStatus_t mst = cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, c, lc, y, ld, &h[i].algo, ws, WS, 0);
        if (mst != CUBLAS_STATUS_SUCCESS) {
            if (i == 0)
                printf("    %s: cublasLtMatmul status %d (%s), workspace %zu\n", v.name, (int)mst,
                       cublasGetStatusString(mst), h[i].workspaceSize);
            continue;
        }
        cudaEventRecord(e0);
        for (int r = 0; r < 20; r++)
            cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, c, lc, y, ld, &h[i].algo, ws, WS, 0);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms / 20 < best)
            best = ms / 20;
    }
    CK(cudaGetLastError());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return best * 1000.f;   // us
}

// which GELU: X = x values [16, 16] FP16, W = identity, epilogue GELU, D FP16
static void gelu_kind(void)
{
    const int n = 16;
    std::vector<__half> hx(n * n), hw(n * n);
    float xs[n];
    for (int i = 0; i < n; i++)
        xs[i] = -4.0f + 0.5f * (float)i;
    for (int r = 0; r < n; r++)
        for (int c = 0; c < n; c++) {
            hx[r * n + c] = __float2half(xs[c]);
            hw[r * n + c] = __float2half(r == c ? 1.0f : 0.0f);
        }
    void *x, *w, *y;
    CK(cudaMalloc(&x, n * n * 2));
    CK(cudaMalloc(&w, n * n * 2));
    CK(cudaMalloc(&y, n * n * 2));
    cudaMemcpy(x, hx.data(), n * n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(w, hw.data(), n * n * 2, cudaMemcpyHostToDevice);
    variant v = {"gelu", CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_GELU, 0};
    int na;
    run_variant(v, n, n, n, x, w, y, NULL, NULL, &na);
    std::vector<__half> hy(n * n);
    cudaMemcpy(hy.data(), y, n * n * 2, cudaMemcpyDeviceToHost);
    double de = 0, dt = 0;
    for (int c = 0; c < n; c++) {
        double g = __half2float(hy[c]), xv = xs[c];
        double ge = 0.5 * xv * (1 + erf(xv / sqrt(2.0)));
        double gt = 0.5 * xv * (1 + tanh(sqrt(2 / M_PI) * (xv + 0.044715 * xv * xv * xv)));
        de = fmax(de, fabs(g - ge));
        dt = fmax(dt, fabs(g - gt));
        if (c % 4 == 1)
            printf("  gelu(%.1f): cuBLASLt %.6f, erf %.6f, tanh %.6f\n", xv, g, ge, gt);
    }
    printf("cuBLASLt GELU (%d algos): max |d| to erf GELU %.2e, to tanh GELU %.2e -> %s\n", na, de, dt,
           de < dt ? "erf" : "tanh approximation");
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
}

int main()
{
    cublasLtCreate(&lt);
    CK(cudaMalloc(&ws, WS));
    gelu_kind();
    const int64_t M = 16384;
    const int64_t shapes[][2] = {{3072, 768}, {768, 3072}, {768, 768}, {2304, 768}};
    const char *names[] = {"FFN up", "FFN down", "proj / Q", "QKV fused"};
    size_t big = (size_t)M * 3072 * 2;
    void *x, *w, *y, *bias, *cbuf;
    float *scales;
    CK(cudaMalloc(&x, big));
    CK(cudaMalloc(&cbuf, big));
    CK(cudaMalloc(&w, 3072 * 3072 * 2));
    CK(cudaMalloc(&y, big));
    CK(cudaMalloc(&bias, 3072 * 2));
    CK(cudaMalloc(&scales, 16));
    // small values in every type: 0x22 bytes are E4M3 ~0.0195 and FP16 ~0.0034 pairs
    cudaMemset(x, 0x22, big);
    cudaMemset(w, 0x22, 3072 * 3072 * 2);
    cudaMemset(bias, 0, 3072 * 2);
    float hs[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    cudaMemcpy(scales, hs, 16, cudaMemcpyHostToDevice);
    const variant vs[] = {
        {"fp16 -> fp16", CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_DEFAULT, 0},
        {"fp16 -> fp16 bias", CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_BIAS, 0},
        {"fp16 -> fp16 bias gelu", CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_GELU_BIAS, 0},
        {"e4m3 -> fp16 (A, B scales)", CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_DEFAULT, 0, 1},
        {"e4m3 -> fp16", CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_DEFAULT, 0},
        {"e4m3 -> fp16 bias", CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_BIAS, 0},
        {"e4m3 -> fp16 bias fast", CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_BIAS, 1},
        {"e4m3 -> fp16 bias gelu", CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_GELU_BIAS, 0},
        {"e4m3 -> e4m3 bias", CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_8F_E4M3, CUBLASLT_EPILOGUE_BIAS, 0},
        {"e4m3 -> e4m3 bias gelu", CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_8F_E4M3, CUBLASLT_EPILOGUE_GELU_BIAS, 0},
        {"e4m3 -> e4m3 bias gelu fast", CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_8F_E4M3, CUBLASLT_EPILOGUE_GELU_BIAS, 1},
        {"e4m3 -> e4m3 (bf16 C)", CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_8F_E4M3, CUBLASLT_EPILOGUE_DEFAULT, 0},
        {"e4m3 -> e4m3 bias gelu fast bf16C", CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_8F_E4M3, CUBLASLT_EPILOGUE_GELU_BIAS, 1},
        {"e4m3 -> fp16 bias gelu fast", CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_GELU_BIAS, 1},
    };
    for (int s = 0; s < 4; s++) {
        int64_t N = shapes[s][0], K = shapes[s][1];
        double gflop = 2.0 * M * N * K / 1e9;
        printf("%s: M %lld N %lld K %lld (%.1f GFLOP)\n", names[s], (long long)M, (long long)N, (long long)K, gflop);
        for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
            int na = 0;
            float us = run_variant(vs[i], M, N, K, x, w, y, bias, scales, &na, cbuf);
            if (na > 0 && isfinite(us))
                printf("  %-30s %8.1f us  %6.0f TFLOP/s  (%d algos)\n", vs[i].name, us, gflop / us * 1e3,
                       na);
            else
                printf("  %-30s no algorithm (%d)\n", vs[i].name, na);
        }
    }
    return 0;
}
