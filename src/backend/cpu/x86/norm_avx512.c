/* AVX-512 LayerNormalization: the reference kernel (cpu/ref/k_norm.c) with its float32 row done
 * 16 lanes at a time (masked tails), registered over it for hosts with AVX-512F/DQ and FMA. The
 * statistics are the reference's two passes (sum, then squared deviations from the mean), the
 * float lanes flushed into a double every 4096 elements as there. */
#include "../cpu_kernels.h"
#include "../fused.h"
#include "../vmath.h"
#include <math.h>

#if KILN_VMATH_X86
#define T512 __attribute__((target("avx512f,avx512dq,fma")))

/* sum of x[0, n), or of (x - m)^2 over it (sq) */
static T512 double row_sum(const float *x, int64_t n, bool sq, float m)
{
    const __m512 vm = _mm512_set1_ps(m);
    double s = 0.0;
    int64_t i = 0;
    while (i < n) {
        int64_t end = i + 4096 < n ? i + 4096 : n;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (; i + 64 <= end; i += 64) {
            __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
            __m512 x2 = _mm512_loadu_ps(x + i + 32), x3 = _mm512_loadu_ps(x + i + 48);
            if (sq) {
                x0 = _mm512_sub_ps(x0, vm), x1 = _mm512_sub_ps(x1, vm);
                x2 = _mm512_sub_ps(x2, vm), x3 = _mm512_sub_ps(x3, vm);
                a0 = _mm512_fmadd_ps(x0, x0, a0), a1 = _mm512_fmadd_ps(x1, x1, a1);
                a2 = _mm512_fmadd_ps(x2, x2, a2), a3 = _mm512_fmadd_ps(x3, x3, a3);
            } else {
                a0 = _mm512_add_ps(a0, x0), a1 = _mm512_add_ps(a1, x1);
                a2 = _mm512_add_ps(a2, x2), a3 = _mm512_add_ps(a3, x3);
            }
        }
        for (; i < end; i += 16) {
            __mmask16 k = kiln_v_mask16(end - i);
            __m512 v = _mm512_maskz_loadu_ps(k, x + i);
            if (sq) {
                v = _mm512_maskz_sub_ps(k, v, vm);
                a0 = _mm512_fmadd_ps(v, v, a0);
            } else {
                a0 = _mm512_add_ps(a0, v);
            }
        }
        s += (double)_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    }
    return s;
}

static T512 void ln_row512(const float *x, float *y, int64_t M, float eps, const float *s, const float *b,
                           float *mean, float *inv)
{
    float fm = M > 0 ? (float)(row_sum(x, M, false, 0.0f) / (double)M) : 0.0f;
    float fv = M > 0 ? (float)(row_sum(x, M, true, fm) / (double)M) : 0.0f;
    float fi = 1.0f / sqrtf(fv + eps);
    *mean = fm;
    *inv = fi;
    const __m512 vm = _mm512_set1_ps(fm), vi = _mm512_set1_ps(fi);
    for (int64_t i = 0; i < M; i += 16) {
        __mmask16 k = kiln_v_mask16(M - i);
        __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), vi);
        __m512 sv = _mm512_maskz_loadu_ps(k, s + i);
        __m512 v = b ? _mm512_fmadd_ps(d, sv, _mm512_maskz_loadu_ps(k, b + i)) : _mm512_mul_ps(d, sv);
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}

static kiln_status k_layernorm_avx512(kiln_kctx *ctx) { return kiln__layernorm(ctx, ln_row512); }

const kiln_kernel_isa_reg kiln__x86_norm[] = {
    {KILN_OP_LayerNormalization, k_layernorm_avx512, KILN_CPU_AVX512_DQ_FMA, "LayerNormalization/avx512"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_norm[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif
