/* AVX-512 Attention: the reference kernel (cpu/ref/k_fused.c) with the row softmax vectorized
 * (kiln_v_exp, vmath.h), registered over it for hosts with AVX-512F/DQ and FMA. */
#include "../cpu_kernels.h"
#include "../fused.h"
#include "../vmath.h"
#include <math.h>

#if KILN_VMATH_X86
/* row = softmax(row) over n elements, 16 at a time (NaNs ignored by the maximum, like the scalar loop) */
__attribute__((target("avx512f,avx512dq,fma"))) static void softmax_row512(float *row, int64_t n)
{
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = kiln_v_mask16(n - k);
        vmx = _mm512_mask_max_ps(vmx, m, _mm512_maskz_loadu_ps(m, row + k), vmx); /* NaN keeps vmx */
    }
    __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmx)), vsum = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = kiln_v_mask16(n - k);
        __m512 e = kiln_v_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + k), vm));
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
