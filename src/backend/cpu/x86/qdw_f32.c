/* INT8 depthwise convolution planes through the float32 depthwise rows (conv_avx2.c), exactly.
 *
 * Each output is a sum of kh * kw products (x - zx) * (w - zw) of two 8-bit differences, each at most 255 in magnitude:
 * with at most KILN_QDW_F32_MAX_TAPS (258) taps every partial sum is an integer below 2^24, which float32 holds
 * exactly, so the FMA chain of the float row kernel computes the int32 sum without rounding. The plane's rows are
 * converted once into a zero-padded float band ((x - zx) = 0 is the quantized padding), the row kernel keeps its
 * accumulators in registers across all taps, and a band's sums go through the INT8 epilogue (qepi_vnni.h) at once. The
 * int32 rows of kiln__qdw_row_vnni loaded and stored the accumulator row at every tap: PP-OCRv4 det's 5x5 depthwise
 * layers ran 3.7x (stride 1) to 9x (stride 2, gathered pixels) their float32 time. */
#include "../qgemm.h"
#include "../vmath.h"
#include "conv_x86.h"

#if KILN_CONV_X86
#include "qepi_vnni.h"
#include <immintrin.h>

#define TQDW __attribute__((target("avx2,fma,avx512f,avx512dq,avx512vnni")))

/* Band rows [0, nrows) from input row r0 - ph on: pw zeros, the row's values (x - zx) as far as Wp holds them, zeros
 * to Wp (as kiln__conv_pad_row fills the float32 kernel's band) */
TQDW static void fill_band(const kiln_conv2d *p, const uint8_t *xp, bool s8, int32_t zx, int64_t r0, int64_t nrows,
                           float *buf)
{
    const __m512i vz = _mm512_set1_epi32(zx);
    int64_t lead = p->pw < p->Wp ? p->pw : p->Wp, ncopy = p->W < p->Wp - lead ? p->W : p->Wp - lead;
    for (int64_t r = 0; r < nrows; r++) {
        float *row = buf + r * p->Wp;
        int64_t iy = r0 + r - p->ph;
        memset(row, 0, sizeof(float) * (size_t)p->Wp);
        if (iy < 0 || iy >= p->H)
            continue;
        const uint8_t *src = xp + iy * p->W;
        for (int64_t j = 0; j < ncopy; j += 16)
            _mm512_mask_storeu_ps(row + lead + j, kiln_v_mask16(ncopy - j),
                                  _mm512_cvtepi32_ps(_mm512_sub_epi32(kiln_v_load16_8to32(src + j, ncopy - j, s8), vz)));
    }
}

TQDW void kiln__qdw_plane_f32(const struct kiln_conv2d *p, const uint8_t *xp, bool s8, int32_t zx, const float *wk,
                              float *buf, float *frow, const kiln_qepi *e, int64_t c, uint8_t *yp, size_t osz)
{
    /* the band's output rows are contiguous in the plane: their sums (exact integers, so cvtps_epi32 gives the int32
     * sum) go through the epilogue as one run of (rows x Wo) elements, channel c's scale set once -- per row it was
     * as costly as the rows' FMAs on PP-OCR det's 20x20 / 40x40 planes (a call, the epilogue's set-up, a partial
     * vector per row; env_ab det int8: its depthwise layers 1.05-1.32x slower that way) */
    kiln_qgemm g = {.K = 0, .c = NULL, .ldc = 0, .epi = *e};
    g.epi.ch_row = true;
    for (int64_t oy0 = 0; oy0 < p->Ho; oy0 += p->band) {
        int64_t oy1 = oy0 + p->band < p->Ho ? oy0 + p->band : p->Ho;
        fill_band(p, xp, s8, zx, oy0 * p->sh, (oy1 - oy0 - 1) * p->sh + (p->kh - 1) * p->dh + 1, buf);
        for (int64_t oy = oy0; oy < oy1; oy++)
            kiln__conv_dw_row_avx512(p, buf + (oy - oy0) * p->sh * p->Wp, wk, 0.0f, frow + (oy - oy0) * p->Wo);
        int64_t n = (oy1 - oy0) * p->Wo;
        g.c = yp + (size_t)(oy0 * p->Wo) * osz;
        for (int64_t j = 0; j < n; j += 16) {
            __mmask16 km = kiln_v_mask16(n - j);
            epi_store(&g, NULL, _mm512_cvtps_epi32(_mm512_maskz_loadu_ps(km, frow + j)), c, j, km);
        }
    }
}
#else
void kiln__qdw_plane_f32(const struct kiln_conv2d *p, const uint8_t *xp, bool s8, int32_t zx, const float *wk, float *buf,
                         float *frow, const kiln_qepi *e, int64_t c, uint8_t *yp, size_t osz)
{
    (void)p, (void)xp, (void)s8, (void)zx, (void)wk, (void)buf, (void)frow, (void)e, (void)c, (void)yp, (void)osz;
}
#endif
