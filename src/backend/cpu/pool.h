/* float32 MaxPool / AveragePool shared by the reference kernels (cpu/ref/k_pool.c) and their
 * vectorized variants (cpu/x86/pool_avx512.c, pool_avx2.c), which differ only in how a row's interior is done. */
#ifndef KILN_BACKEND_CPU_POOL_H
#define KILN_BACKEND_CPU_POOL_H

#include "../kernel.h"

/* Interior outputs [oxa, oxb) of one output row of a 2-D (or 1-D) float32 pool, column stride
 * sw 1 or 2, every window column inside the row: max, or sum / cnt_f. rows[0..nr) (nr <= 64)
 * are the window's valid input rows, offset by -pw. Returns true when some max is -inf (an
 * all-NaN window, or true -inf inputs): the caller redoes those outputs with the scalar loop. */
typedef bool (*kiln_pool_row_fn)(bool is_max, const float *const *rows, int nr, int64_t kw, int64_t dw, int64_t sw,
                                 int64_t oxa, int64_t oxb, float cnt_f, float *yo);

/* Every output of one output row of a 2-D (or 1-D) float32 MaxPool with dilation 1 and column
 * stride sw 1 or 2: yo[ox] = the max over rows[0..nr) (the window's valid input rows, nr <= 64) and
 * columns [ox * sw - pw, ox * sw - pw + kw) within [0, W), NaN ignored; needs pw + W and
 * (Wo - 1) * sw + kw <= KILN_POOL_MAXROW_W.
 * Done as the max over the rows (once per input column), then over the kw columns. Returns true
 * when some output is -inf (an all-NaN window, or true -inf inputs): the caller redoes those. */
enum { KILN_POOL_MAXROW_W = 4096 };
typedef bool (*kiln_pool_maxrow_fn)(const float *const *rows, int nr, int64_t W, int64_t kw, int64_t sw, int64_t pw,
                                    int64_t Wo, float *yo);

/* MaxPool / AveragePool; row: the vectorized interior, or NULL for the scalar reference; maxrow:
 * the vectorized whole-row MaxPool (used where it applies, before row), or NULL. */
kiln_status kiln__maxpool(kiln_kctx *ctx, kiln_pool_row_fn row, kiln_pool_maxrow_fn maxrow);
kiln_status kiln__avgpool(kiln_kctx *ctx, kiln_pool_row_fn row);

#endif
