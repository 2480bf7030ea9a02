// Developer micro-benchmark (docs/CUDA.md): kiln's FP8 convolutions (mma.sync and every wgmma tile configuration)
// alone at ResNet-50 batch-256 shapes, in the storages the FP8 engine gives them (FP16 output + E4M3 feed with an
// FP16 residual, or E4M3 residual and output held only in E4M3), CUDA events around 20 launches; GB/s over the
// bytes a layer must move (input, filter, residual, outputs), TFLOP/s over its MMAs. Build and run on a GPU machine:
//   nvcc -std=c++17 -Iinclude -Isrc -gencode=arch=compute_90a,code=sm_90a -O3 -o conv_fp8 bench/conv_fp8.cu \
//        src/backend/cuda/kernels_conv_fp8.cu src/backend/cuda/kernels_conv_fp8_wg.cu \
//        src/backend/cuda/kernels_conv_fp8_tma.cu && ./conv_fp8 [FILTER]
// FILTER: run only the shapes whose name contains it (e.g. for ncu: `ncu -k regex:wg --launch-skip 3
// --launch-count 1 ./conv_fp8 l3c3`). The 1x1 stride-1 shapes also run kernels_conv_fp8_tma.cu's configurations,
// each checked against the wgmma configuration of its tile (tma c against wg 4 + c: the same MMAs and epilogue, so the
// same bytes) on random operands; "MISMATCH" and exit status 1 otherwise. Build with kernels_conv_fp8_tma.cu too.
#include "backend/cuda/kernels.h"
#include <cuda_fp16.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#include <vector>

struct shape {
    const char *name;
    int n, c, h, w, k, r, stride, pad;
    int e4m3;   // 1: E4M3 residual, output held only in E4M3; 0: FP16 residual, FP16 output + E4M3 feed
    int res;
};

static const shape shapes[] = {
    {"l1c3 1x1 64->256 @56 res e4m3", 256, 64, 56, 56, 256, 1, 1, 0, 1, 1},
    {"l1c3 1x1 64->256 @56 res f16", 256, 64, 56, 56, 256, 1, 1, 0, 0, 1},
    {"l2c3 1x1 128->512 @28 res e4m3", 256, 128, 28, 28, 512, 1, 1, 0, 1, 1},
    {"l2c3 1x1 128->512 @28 res f16", 256, 128, 28, 28, 512, 1, 1, 0, 0, 1},
    {"l3c3 1x1 256->1024 @14 res f16", 256, 256, 14, 14, 1024, 1, 1, 0, 0, 1},
    {"l3c3 1x1 256->1024 @14 res e4m3", 256, 256, 14, 14, 1024, 1, 1, 0, 1, 1},
    {"l4c3 1x1 512->2048 @7 res f16", 256, 512, 7, 7, 2048, 1, 1, 0, 0, 1},
    {"l1c1 1x1 256->64 @56 f16", 256, 256, 56, 56, 64, 1, 1, 0, 0, 0},
    {"l1c2 3x3 64->64 @56 f16", 256, 64, 56, 56, 64, 3, 1, 1, 0, 0},
    {"l2c2 3x3 128->128 @28 f16", 256, 128, 28, 28, 128, 3, 1, 1, 0, 0},
    {"l3c2 3x3 256->256 @14 f16", 256, 256, 14, 14, 256, 3, 1, 1, 0, 0},
};

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    const size_t cap = (size_t)256 * 256 * 56 * 56 * 2;   // the largest tensor (l1c3's FP16 output)
    uint8_t *x, *w, *yq, *resq;
    __half *y, *res;
    float *scale, *bias, *inv, *rs;
    cudaMalloc(&x, cap); cudaMalloc(&w, 2048 * 512 * 9); cudaMalloc(&yq, cap); cudaMalloc(&resq, cap);
    cudaMalloc(&y, cap); cudaMalloc(&res, cap);
    cudaMalloc(&scale, 4); cudaMalloc(&inv, 4); cudaMalloc(&rs, 4); cudaMalloc(&bias, 2048 * 4);
    {   // random operands: E4M3 bytes of magnitude < 2 (no NaN), residuals in [-1, 1], small biases
        std::vector<uint8_t> hb(cap);
        unsigned long long st = 88172645463325252ull;
        auto rnd = [&]() { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return st; };
        for (size_t i = 0; i < cap; i++) hb[i] = (uint8_t)(rnd() & 0xBF);
        cudaMemcpy(x, hb.data(), cap, cudaMemcpyHostToDevice);
        cudaMemcpy(resq, hb.data() + 7, cap - 7, cudaMemcpyHostToDevice);
        cudaMemcpy(w, hb.data() + 13, 2048 * 512 * 9, cudaMemcpyHostToDevice);
        std::vector<__half> hh(cap / 2);
        for (size_t i = 0; i < hh.size(); i++) hh[i] = __float2half((float)(rnd() % 2001) / 1000.f - 1.f);
        cudaMemcpy(res, hh.data(), cap, cudaMemcpyHostToDevice);
        std::vector<float> hbias(2048);
        for (int i = 0; i < 2048; i++) hbias[i] = (float)(rnd() % 201) / 100.f - 1.f;
        cudaMemcpy(bias, hbias.data(), 2048 * 4, cudaMemcpyHostToDevice);
    }
    uint8_t *yq_ref;
    __half *y_ref;
    cudaMalloc(&yq_ref, cap); cudaMalloc(&y_ref, cap);
    int bad = 0;
    const float one = 0.01f;
    cudaMemcpy(scale, &one, 4, cudaMemcpyHostToDevice); cudaMemcpy(inv, &one, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(rs, &one, 4, cudaMemcpyHostToDevice);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (const shape &sh : shapes) {
        if (filter && !strstr(sh.name, filter))
            continue;
        cuk_conv_desc d;
        memset(&d, 0, sizeof d);
        d.n = sh.n; d.c = sh.c; d.h = sh.h; d.w = sh.w; d.k = sh.k; d.r = d.s = sh.r;
        d.sh = d.sw = sh.stride; d.ph = d.pw = sh.pad; d.dh = d.dw = 1;
        d.p = (sh.h + 2 * sh.pad - sh.r) / sh.stride + 1; d.q = (sh.w + 2 * sh.pad - sh.r) / sh.stride + 1;
        d.y_nhwc = 1; d.relu = 1;
        const double M = (double)d.n * d.p * d.q, outs = M * d.k;
        const double bytes = (double)d.n * d.h * d.w * d.c + (double)d.k * d.c * d.r * d.r +
                             (sh.res ? outs * (sh.e4m3 ? 1 : 2) : 0) + outs * (sh.e4m3 ? 1 : 3);
        const double flop = 2.0 * outs * d.c * d.r * d.r;
        const int ncfg = cuk_conv_fp8_wg_configs(), ntma = sh.r == 1 && sh.stride == 1 ? cuk_conv_fp8_tma_configs() : 0;
        const size_t ybytes = (size_t)outs * 2;
        for (int cfg = -1; cfg < ncfg + ntma; cfg++) {
            const bool tma = cfg >= ncfg;
            auto launch = [&]() {
                const void *r = sh.res && !sh.e4m3 ? res : NULL;
                const uint8_t *rq = sh.res && sh.e4m3 ? resq : NULL;
                void *yy = sh.e4m3 ? NULL : y;
                if (cfg < 0)
                    return cuk_conv_fp8(CUK_F16, x, w, scale, bias, r, yy, inv, yq, rq, rq ? rs : NULL, &d, 0);
                if (tma)
                    return cuk_conv_fp8_tma(cfg - ncfg, CUK_F16, x, w, scale, bias, r, yy, inv, yq, rq, rq ? rs : NULL,
                                            &d, 0);
                return cuk_conv_fp8_wg(cfg, CUK_F16, x, w, scale, bias, r, yy, inv, yq, rq, rq ? rs : NULL, &d, 0);
            };
            if (tma || (cfg >= 4 && cfg < 4 + ntma)) {   // the pair to compare: wg 4 + c first, tma c later
                cudaMemset(y, 0xEE, ybytes);
                cudaMemset(yq, 0xEE, (size_t)outs);
            }
            cudaError_t err = launch();
            cudaDeviceSynchronize();
            if (err == cudaSuccess)
                err = cudaGetLastError();
            if (err != cudaSuccess) {
                printf("%-34s %-7s %s\n", sh.name, cfg < 0 ? "mma" : "wg", cudaGetErrorString(err));
                continue;
            }
            if (cfg >= 4 && cfg < 4 + ntma) {   // keep the reference outputs of wg 4 + c
                cudaMemcpy(y_ref, y, ybytes, cudaMemcpyDeviceToDevice);
                cudaMemcpy(yq_ref, yq, (size_t)outs, cudaMemcpyDeviceToDevice);
            }
            if (tma) {   // the same bytes as wg 4 + c?
                const int rc = cfg - ncfg;
                (void)rc;
                std::vector<uint8_t> a((size_t)outs), b((size_t)outs);
                size_t diff_q = 0, diff_y = 0;
                cudaMemcpy(a.data(), yq, (size_t)outs, cudaMemcpyDeviceToHost);
                cudaMemcpy(b.data(), yq_ref, (size_t)outs, cudaMemcpyDeviceToHost);
                for (size_t i = 0; i < a.size(); i++) diff_q += a[i] != b[i];
                if (!sh.e4m3) {
                    std::vector<uint16_t> ya((size_t)outs), yb((size_t)outs);
                    cudaMemcpy(ya.data(), y, ybytes, cudaMemcpyDeviceToHost);
                    cudaMemcpy(yb.data(), y_ref, ybytes, cudaMemcpyDeviceToHost);
                    for (size_t i = 0; i < ya.size(); i++) diff_y += ya[i] != yb[i];
                }
                printf("%-34s tma%d against wg%d: %zu of %.0f feed bytes and %zu outputs differ%s\n", sh.name, rc,
                       4 + rc, diff_q, outs, diff_y, diff_q || diff_y ? "  MISMATCH" : "");
                bad += diff_q || diff_y;
            }
            for (int i = 0; i < 3; i++)
                launch();
            cudaEventRecord(e0);
            for (int i = 0; i < 20; i++)
                launch();
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            const double us = ms * 1000.0 / 20;
            char tag[16];
            snprintf(tag, sizeof tag, cfg < 0 ? "mma" : tma ? "tma%d" : "wg%d", tma ? cfg - ncfg : cfg);
            printf("%-34s %-5s %8.1f us %6.0f GB/s %5.0f TFLOP/s\n", sh.name, tag, us, bytes / us / 1e3,
                   flop / us / 1e6);
        }
    }
    printf("err %s; %d mismatching pairs\n", cudaGetErrorString(cudaGetLastError()), bad);
    return bad ? 1 : 0;
}
