// Developer micro-benchmark (docs/CUDA.md): kiln's FP8 convolutions (mma.sync and every wgmma tile configuration)
// alone at ResNet-50 batch-256 shapes, in the storages the FP8 engine gives them (FP16 output + E4M3 feed with an
// FP16 residual, or E4M3 residual and output held only in E4M3), CUDA events around 20 launches; GB/s over the
// bytes a layer must move (input, filter, residual, outputs), TFLOP/s over its MMAs. Build and run on a GPU machine:
//   nvcc -std=c++17 -Iinclude -Isrc -gencode=arch=compute_90a,code=sm_90a -O3 -o conv_fp8 bench/conv_fp8.cu \
//        src/backend/cuda/kernels_conv_fp8.cu src/backend/cuda/kernels_conv_fp8_wg.cu && ./conv_fp8 [FILTER]
// FILTER: run only the shapes whose name contains it (e.g. for ncu: `ncu -k regex:wg --launch-skip 3
// --launch-count 1 ./conv_fp8 l3c3`).
#include "backend/cuda/kernels.h"
#include <cuda_fp16.h>
#include <stdio.h>
#include <string.h>

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
    cudaMemset(x, 0x31, cap); cudaMemset(w, 0x2a, 2048 * 512 * 9); cudaMemset(res, 0x11, cap);
    cudaMemset(resq, 0x22, cap); cudaMemset(bias, 0, 2048 * 4);
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
        const int ncfg = cuk_conv_fp8_wg_configs();
        for (int cfg = -1; cfg < ncfg; cfg++) {
            auto launch = [&]() {
                const void *r = sh.res && !sh.e4m3 ? res : NULL;
                const uint8_t *rq = sh.res && sh.e4m3 ? resq : NULL;
                void *yy = sh.e4m3 ? NULL : y;
                if (cfg < 0)
                    return cuk_conv_fp8(CUK_F16, x, w, scale, bias, r, yy, inv, yq, rq, rq ? rs : NULL, &d, 0);
                return cuk_conv_fp8_wg(cfg, CUK_F16, x, w, scale, bias, r, yy, inv, yq, rq, rq ? rs : NULL, &d, 0);
            };
            cudaError_t err = launch();
            cudaDeviceSynchronize();
            if (err == cudaSuccess)
                err = cudaGetLastError();
            if (err != cudaSuccess) {
                printf("%-34s %-7s %s\n", sh.name, cfg < 0 ? "mma" : "wg", cudaGetErrorString(err));
                continue;
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
            snprintf(tag, sizeof tag, cfg < 0 ? "mma" : "wg%d", cfg);
            printf("%-34s %-5s %8.1f us %6.0f GB/s %5.0f TFLOP/s\n", sh.name, tag, us, bytes / us / 1e3,
                   flop / us / 1e6);
        }
    }
    printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
