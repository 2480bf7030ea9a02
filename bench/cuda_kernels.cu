// Developer micro-benchmark (docs/CUDA.md): kiln's fused attention, LayerNorm, GELU epilogue, FP8 activation
// quantization and 4-bit weight-only GEMM kernels alone at BERT-base batch-128 shapes, CUDA events around 20
// launches. Build and run on a GPU machine:
//   nvcc -std=c++17 -Iinclude -Isrc -gencode=arch=compute_90a,code=sm_90a -O2 -o cuda_kernels bench/cuda_kernels.cu \
//        src/backend/cuda/kernels.cu src/backend/cuda/kernels_rows.cu src/backend/cuda/kernels_attn.cu \
//        src/backend/cuda/kernels_fp4.cu src/backend/cuda/kernels_fp8.cu && ./cuda_kernels
#include "backend/cuda/kernels.h"
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static float time_it(void (*fn)(void *), void *a, int reps)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    fn(a); cudaDeviceSynchronize();
    cudaEventRecord(e0);
    for (int i = 0; i < reps; i++) fn(a);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    return ms * 1000.f / reps;
}
struct attn_arg { cuk_attn_io io; const void *mask; cuk_shape sh; };
static cuk_attn_opts attn_opts;   // grid -1: one block a job, 0: as many as fit (blocks walking jobs); scatter; feed
static void run_attn(void *p) { attn_arg *a = (attn_arg *)p; cuk_attn_fused(CUK_F16, &a->io, 0.125f, a->mask, 1, 0.f, &a->sh, &attn_opts, 0); }
struct gemm_arg { const void *a; const uint8_t *w; const void *s; void *y; int64_t M, N, K; int fmt; float *ws; };
static void run_gemm(void *p) { gemm_arg *g = (gemm_arg *)p; cuk_fp4_gemm(CUK_F16, g->a, g->K, g->M, g->K, g->w, g->s, g->fmt, g->fmt == CUK_Q_NVFP4 ? 16 : 32, 1.0f, g->y, g->N, g->ws, cuk_fp4_gemm_splits(g->M, g->N, g->K), 0); }
struct ew_arg { void *x, *y; uint8_t *q; float *scale, *bias; int64_t rows, cols; };
static void run_ln(void *p) { ew_arg *a = (ew_arg *)p; cuk_layernorm(CUK_F16, a->x, a->scale, a->bias, a->y, a->rows, a->cols, 1e-12f, NULL, 0.f, 0); }
static void run_gelu(void *p) { ew_arg *a = (ew_arg *)p; cuk_epilogue(CUK_F16, a->y, a->rows * a->cols, a->cols, 1, a->bias, NULL, CUK_GELU, 0.f, 0.f, 0); }
// with the FP8 feed (the E4M3 copy written beside the output)
static void run_ln_q(void *p) { ew_arg *a = (ew_arg *)p; cuk_layernorm(CUK_F16, a->x, a->scale, a->bias, a->y, a->rows, a->cols, 1e-12f, a->q, 0.05f, 0); }
static void run_gelu_nb(void *p) { ew_arg *a = (ew_arg *)p; cuk_epilogue(CUK_F16, a->y, a->rows * a->cols, a->cols, 1, NULL, NULL, CUK_GELU, 0.f, 0.f, 0); }
static void run_gelu_q(void *p) { ew_arg *a = (ew_arg *)p; cuk_epilogue_q(CUK_F16, a->y, a->rows * a->cols, a->cols, 1, a->bias, NULL, CUK_GELU, 0.f, 0.f, a->q, 0.05f, 0); }
// E4M3 storage: only the E4M3 bytes written (the FP8 GEMM's GELU output held only as E4M3)
static void run_gelu_e4m3(void *p) { ew_arg *a = (ew_arg *)p; cuk_epilogue_e4m3(CUK_F16, a->y, a->rows * a->cols, a->cols, a->bias, CUK_GELU, 0.f, 0.f, a->q, 0.05f, 0); }
static void run_quant(void *p) { ew_arg *a = (ew_arg *)p; cuk_fp8_quant(CUK_F16, a->x, a->q, a->rows * a->cols, 0.05f, 0); }
// rows x cols half values, read and / or written: GB/s over the bytes moved
static void ew_report(const char *what, void (*fn)(void *), ew_arg *a, double bytes_per_elem)
{
    float us = time_it(fn, a, 20);
    printf("%s %lldx%lld: %.1f us (%.0f GB/s)  err %s\n", what, (long long)a->rows, (long long)a->cols, us,
           bytes_per_elem * a->rows * a->cols / us / 1e3, cudaGetErrorString(cudaGetLastError()));
}
int main()
{
    const int64_t B = 128, H = 12, S = 128, D = 64;
    size_t n = (size_t)(B * H * S * D);
    void *q, *k, *v, *y; float *mask;
    cudaMalloc(&q, n * 2); cudaMalloc(&k, n * 2); cudaMalloc(&v, n * 2); cudaMalloc(&y, n * 2); cudaMalloc(&mask, B * S * 4);
    cudaMemset(q, 0x21, n * 2); cudaMemset(k, 0x22, n * 2); cudaMemset(v, 0x23, n * 2); cudaMemset(mask, 0, B * S * 4);
    uint8_t *fq; cudaMalloc((void **)&fq, n);
    for (int gi = 0; gi < 8; gi++) for (int layout = 0; layout < 2; layout++) for (int m = 0; m < 2; m++) {
        // twice: one block a job, scattered stores; as many as fit, scattered; 16-byte pieces; pieces + FP8 feed
        attn_opts.grid = gi % 4 ? 0 : -1;
        attn_opts.scatter = gi % 4 < 2;
        attn_opts.feed = gi % 4 == 3 ? fq : NULL;
        attn_opts.feed_scale = 0.01f;
        attn_arg a; memset(&a, 0, sizeof a);
        a.io.q = q; a.io.k = k; a.io.v = v; a.io.y = y; a.io.nlead = 2; a.io.lead[0] = B; a.io.lead[1] = H;
        a.io.S = S; a.io.Sk = S; a.io.D = D; a.io.Dv = D;
        if (layout == 0) {   // [B,H,S,D] Q, V, Y; K^T [B,H,D,S]
            a.io.ql[0] = H*S*D; a.io.ql[1] = S*D; a.io.qs = D; a.io.qd = 1;
            a.io.kl[0] = H*S*D; a.io.kl[1] = S*D; a.io.kd = S; a.io.ks = 1;
            memcpy(a.io.vl, a.io.ql, sizeof a.io.vl); a.io.vs = D; a.io.vd = 1;
            memcpy(a.io.yl, a.io.ql, sizeof a.io.yl); a.io.ys = D; a.io.yd = 1;
        } else {   // all [B,S,H,D]
            a.io.ql[0] = S*H*D; a.io.ql[1] = D; a.io.qs = H*D; a.io.qd = 1;
            memcpy(a.io.kl, a.io.ql, sizeof a.io.kl); a.io.ks = H*D; a.io.kd = 1;
            memcpy(a.io.vl, a.io.ql, sizeof a.io.vl); a.io.vs = H*D; a.io.vd = 1;
            memcpy(a.io.yl, a.io.ql, sizeof a.io.yl); a.io.ys = H*D; a.io.yd = 1;
        }
        if (m) { a.mask = mask; a.sh.ndim = 4; a.sh.dims[0] = B; a.sh.dims[1] = H; a.sh.dims[2] = S; a.sh.dims[3] = S;
                 a.sh.str[0][0] = S; a.sh.str[0][1] = 0; a.sh.str[0][2] = 0; a.sh.str[0][3] = 1; }
        float us = time_it(run_attn, &a, 20);
        printf("attention b128 %s %s grid %s %s%s: %.1f us (%.0f GB/s of Q K V Y)  err %s\n", layout ? "BSHD" : "BHSD/KT", m ? "mask" : "nomask",
               attn_opts.grid ? "jobs" : "fit", attn_opts.scatter ? "scatter" : "pieces", attn_opts.feed ? " +feed" : "", us,
               4.0 * n * 2 / us / 1e3, cudaGetErrorString(cudaGetLastError()));
    }
    {
        ew_arg e; memset(&e, 0, sizeof e);
        cudaMalloc(&e.x, 16384 * 3072 * 2); cudaMalloc(&e.y, 16384 * 3072 * 2); cudaMalloc((void **)&e.q, 16384 * 3072);
        cudaMalloc((void **)&e.scale, 3072 * 4); cudaMalloc((void **)&e.bias, 3072 * 4);
        cudaMemset(e.x, 0x31, 16384 * 3072 * 2); cudaMemset(e.y, 0x31, 16384 * 3072 * 2);
        cudaMemset(e.scale, 0, 3072 * 4); cudaMemset(e.bias, 0, 3072 * 4);
        e.rows = 16384; e.cols = 768;
        ew_report("layernorm", run_ln, &e, 4);
        ew_report("layernorm +fp8 feed", run_ln_q, &e, 5);
        ew_report("fp8 quant", run_quant, &e, 3);
        e.cols = 3072;
        ew_report("fp8 quant", run_quant, &e, 3);
        ew_report("gelu epilogue (no bias)", run_gelu_nb, &e, 4);
        ew_report("bias+gelu epilogue", run_gelu, &e, 4);
        ew_report("bias+gelu epilogue +fp8 feed", run_gelu_q, &e, 5);
        ew_report("bias+gelu epilogue, E4M3 only", run_gelu_e4m3, &e, 3);
        cudaFree(e.x); cudaFree(e.y); cudaFree(e.q); cudaFree(e.scale); cudaFree(e.bias);
    }
    int64_t shapes[6][3] = {{16384, 768, 768}, {16384, 3072, 768}, {16384, 768, 3072}, {128, 768, 768}, {128, 3072, 768}, {128, 768, 3072}};
    void *a, *w, *s, *yy;
    cudaMalloc(&a, 16384 * 3072 * 2); cudaMalloc(&w, 3072 * 3072); cudaMalloc(&s, 3072 * 3072); cudaMalloc(&yy, 16384 * 3072 * 2);
    void *ws4; cudaMalloc(&ws4, 128 * 3072 * 4);
    cudaMemset(a, 0x11, 16384 * 3072 * 2); cudaMemset(w, 0x35, 3072 * 3072); cudaMemset(s, 0x38, 3072 * 3072);
    for (int i = 0; i < 6; i++) {
        gemm_arg g = {a, (const uint8_t *)w, s, yy, shapes[i][0], shapes[i][1], shapes[i][2], CUK_Q_NVFP4, (float *)ws4};
        float us = time_it(run_gemm, &g, 20);
        printf("nvfp4 gemm M %lld N %lld K %lld: %.1f us = %.0f TFLOP/s  err %s\n", (long long)g.M, (long long)g.N, (long long)g.K, us,
               2.0 * g.M * g.N * g.K / us / 1e6, cudaGetErrorString(cudaGetLastError()));
    }
    return 0;
}
