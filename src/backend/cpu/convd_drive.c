/* The direct convolution's driver (gemm.h kiln_convd: a 2-D convolution computed tile by tile from the image, no
 * im2col), shared by its ISA tiles: x86/gemm_avx512.c (32 pixels a tile), x86/convd_avx2.c (16). */
#include "gemm_impl.h"
#include <string.h>

bool kiln__conv_direct_available(void)
{
#if GEMM_X86
    return kiln__sgemm_kind() == 3;   /* the AVX-512 tiles */
#else
    return false;
#endif
}

void kiln__conv_direct_drive(kiln_pool *pool, int nthreads, const kiln_convd *d, int tile_w,
                             void (*task)(void *ctx, int64_t t0, int64_t t1))
{
    if (d->M <= 0 || d->Ho <= 0 || d->Wo <= 0)
        return;
    const kiln_epi *epi = kiln__epi_is_noop(d->epi) ? NULL : d->epi;
    kiln_convd dd = *d;
    dd.epi = epi;
    if (d->K <= 0) {
        for (int64_t i = 0; i < d->M; i++)
            memset(d->C + i * d->ldc, 0, sizeof(float) * (size_t)(d->Ho * d->Wo));
        if (epi)
            kiln__epi_apply_f32(epi, d->C, d->ldc, d->M, d->Ho * d->Wo, 0, 0);
        return;
    }
    kiln_convd_job j = {.d = &dd, .tw = ceil_div(d->Wo, tile_w)};
    /* The 32-pixel tiles of a row of 32 q + 16 pixels (ResNet-50's stem: 112) end in a 16-pixel one, which ran at ~84%
     * of the full tiles' rate (perf: 17% of the stem's tile time for 14% of its FMAs). Flattened, every tile but the
     * image's last is full, and there are 12.5% fewer of them. The stem: bench_conv_f32 20 2 stem 0.604-0.614 ms
     * against 0.631-0.639 (3 alternated runs); bench/env_ab (300 pairs, 2 threads) stem + MaxPool 1/1.039 (255/300).
     * Rows of up to 4 tiles only (x86/gemm_avx512.c CONVD_ROW_TILES: groups of 4 consecutive tiles then run row tile
     * by row tile). */
    j.flat = tile_w == 32 && d->Wo % 32 == 16 && j.tw <= 4;
    int64_t tiles = j.flat ? ceil_div(d->Ho * d->Wo, 32) : d->Ho * j.tw;
    double flops = 2.0 * (double)d->M * (double)d->K * 128.0;   /* per 128 pixels (4 tiles of 32, 8 of 16) */
    int64_t grain = flops >= GEMM_MIN_FLOPS_PER_THREAD ? 1 : (int64_t)(GEMM_MIN_FLOPS_PER_THREAD / flops) + 1;
    kiln__parallel_for(pool, nthreads, tiles, grain, task, &j);
}

void kiln__conv_direct_f32(kiln_pool *pool, int nthreads, const kiln_convd *d)
{
#if GEMM_X86
    kiln__conv_direct_drive(pool, nthreads, d, 32, kiln__gemm_convd_task);
#else
    (void)pool;
    (void)nthreads;
    (void)d;
#endif
}
