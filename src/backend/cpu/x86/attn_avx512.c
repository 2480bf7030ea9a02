/* AVX-512 Attention: the reference kernel (cpu/ref/k_attention.c) with the row softmax vectorized
 * (kiln_v_exp, vmath.h), registered over it for hosts with AVX-512F/DQ and FMA. */
#include "../cpu_kernels.h"
#include "../fused.h"
#include "../vmath.h"
#include <math.h>

#if KILN_VMATH_X86
#define T512 __attribute__((target("avx512f,avx512dq,fma")))
#define ROW_REGS 8   /* rows of up to 8 x 16 floats are held in registers (BERT's 128 keys) */

/* kiln_v_exp(x) for x <= 0 or NaN (x - max of the row): the same values without the overflow clamp and blend */
static inline __attribute__((always_inline)) T512 __m512 exp_le0(__m512 x)
{
    return kiln_v_exp_inrange(_mm512_max_ps(_mm512_set1_ps(-103.97f), x));   /* NaN stays NaN */
}

/* softmax_row512 for n <= 16 ROW_REGS: one load and one store per element, the same sums in the same order */
T512 static void softmax_regs512(float *row, const float *add, int64_t n)
{
    __m512 v[ROW_REGS], vmx = _mm512_set1_ps(-INFINITY);
#pragma GCC unroll 8
    for (int i = 0; i < ROW_REGS; i++) {
        __mmask16 m = kiln_v_mask16(n - 16 * i);
        v[i] = _mm512_maskz_loadu_ps(m, row + 16 * i);
        if (add)
            v[i] = _mm512_add_ps(v[i], _mm512_maskz_loadu_ps(m, add + 16 * i));
        vmx = _mm512_mask_max_ps(vmx, m, v[i], vmx); /* NaN keeps vmx */
    }
    __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmx)), vsum = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < ROW_REGS; i++) {
        __mmask16 m = kiln_v_mask16(n - 16 * i);
        v[i] = exp_le0(_mm512_sub_ps(v[i], vm));
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, v[i]));
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
#pragma GCC unroll 8
    for (int i = 0; i < ROW_REGS; i++)
        _mm512_mask_storeu_ps(row + 16 * i, kiln_v_mask16(n - 16 * i), _mm512_mul_ps(v[i], inv));
}

/* row = softmax(row + add) over n elements, 16 at a time (NaNs ignored by the maximum, like the scalar loop) */
T512 static void softmax_row512(float *row, const float *add, int64_t n)
{
    if (n <= 16 * ROW_REGS) {
        softmax_regs512(row, add, n);
        return;
    }
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = kiln_v_mask16(n - k);
        __m512 x = _mm512_maskz_loadu_ps(m, row + k);
        if (add) {
            x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, add + k));
            _mm512_mask_storeu_ps(row + k, m, x);
        }
        vmx = _mm512_mask_max_ps(vmx, m, x, vmx); /* NaN keeps vmx */
    }
    __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmx)), vsum = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = kiln_v_mask16(n - k);
        __m512 e = exp_le0(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + k), vm));
        _mm512_mask_storeu_ps(row + k, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = kiln_v_mask16(n - k);
        _mm512_mask_storeu_ps(row + k, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + k), inv));
    }
}

static kiln_status k_attention_avx512(kiln_kctx *ctx) { return kiln__attention(ctx, softmax_row512); }

const kiln_kernel_isa_reg kiln__x86_attn[] = {
    {KILN_OP_Attention, k_attention_avx512, KILN_CPU_AVX512_DQ_FMA, "Attention/avx512"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_attn[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif
