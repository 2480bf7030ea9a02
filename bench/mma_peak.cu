// Developer micro-benchmark (docs/CUDA.md): the tensor-core rate of the warp-level mma.sync instructions kiln's
// own kernels can use on this GPU, FP16 (m16n8k16), E4M3 (m16n8k32) and INT8 (m16n8k32), each warp running
// independent accumulators back to back. On Hopper the full rate needs wgmma; this says what mma.sync gets.
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -O2 -o mma_peak bench/mma_peak.cu && ./mma_peak
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#define ACC 8
#define ITERS 4096

template <int KIND> __global__ void k_mma(float *out)
{
    uint32_t a[4], b[2];
    for (int i = 0; i < 4; i++) a[i] = 0x3c003c00u ^ (threadIdx.x * 2654435761u & 0x00ff00ffu);
    for (int i = 0; i < 2; i++) b[i] = 0x38003800u ^ (threadIdx.x * 40503u & 0x00ff00ffu);
    float acc[ACC][4] = {};
    int iacc[ACC][4] = {};
    for (int it = 0; it < ITERS; it++) {
#pragma unroll
        for (int j = 0; j < ACC; j++) {
            if (KIND == 0)
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
            else if (KIND == 1)
                asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
            else
                asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+r"(iacc[j][0]), "+r"(iacc[j][1]), "+r"(iacc[j][2]), "+r"(iacc[j][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
        }
    }
    float s = 0;
    for (int j = 0; j < ACC; j++)
        for (int i = 0; i < 4; i++) s += acc[j][i] + (float)iacc[j][i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

template <int KIND> static void run(const char *name, int flops_k, int sms)
{
    float *out;
    int blocks = sms * 4, threads = 256;
    cudaMalloc(&out, (size_t)blocks * threads * sizeof(float));
    k_mma<KIND><<<blocks, threads>>>(out);
    cudaDeviceSynchronize();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0);
    k_mma<KIND><<<blocks, threads>>>(out);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    double warps = (double)blocks * threads / 32;
    double flop = warps * ITERS * ACC * 2.0 * 16 * 8 * flops_k;
    printf("%-28s %8.1f TFLOP/s (%.3f ms) %s\n", name, flop / ms / 1e9, ms, cudaGetErrorString(cudaGetLastError()));
    cudaFree(out);
}

int main(void)
{
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
    run<0>("mma.sync f16 m16n8k16", 16, p.multiProcessorCount);
    run<1>("mma.sync e4m3 m16n8k32", 32, p.multiProcessorCount);
    run<2>("mma.sync s8 m16n8k32", 32, p.multiProcessorCount);
    return 0;
}
