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
    int64_t tiles = d->Ho * j.tw;
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
