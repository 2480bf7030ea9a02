/* Scalar float formats: FP16, BF16, the four ONNX FP8 types, FP4 E2M1, E8M0.
 *
 * FP16/BF16 have dedicated bit-twiddling conversions (hot paths); FP4 (8 magnitudes) compares
 * against its 7 rounding boundaries. The FP8 types share one parameterised "minifloat" encoder: the FP32 significand is shifted right to the target
 * precision (more for target subnormals) and rounded to nearest even on the exact remainder,
 * producing a magnitude code that counts representable values upward, so a rounding carry
 * moves into the next binade naturally and overflow is a single comparison with the largest
 * finite code. See docs/PRECISION.md for the encodings. */
#include "core.h"
#include <math.h>

static inline uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static inline float bits_f32(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* ------------------------------------------------------------------ FP16 / BF16 */

float kiln__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) { /* Inf, or NaN: payload kept, quiet bit set (as F16C does) */
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return bits_f32(bits);
}

uint16_t kiln__f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)   /* inf or nan (quiet, top payload bits kept) */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u)   /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) {  /* subnormal or zero in f16 */
        if (ax < 0x33000000u)
            return (uint16_t)sign;   /* <= half of the smallest subnormal: ties to even (0) */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;    /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u;   /* rebias exponent 127 -> 15 */
    uint32_t lsb = (r >> 13) & 1;
    r += 0xfff + lsb;
    return (uint16_t)(sign | (r >> 13));
}

float kiln__bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t kiln__f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);   /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

void kiln__f16_to_f32_array_ref(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = kiln__f16_to_f32(src[i]);
}

void kiln__f32_to_f16_array_ref(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = kiln__f32_to_f16(src[i]);
}

void kiln__bf16_to_f32_array_ref(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = kiln__bf16_to_f32(src[i]);
}

void kiln__f32_to_bf16_array_ref(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = kiln__f32_to_bf16(src[i]);
}

/* ------------------------------------------------------------------ minifloats (FP8, FP4) */

typedef struct minifmt {
    int nbits, mbits, bias;
    uint32_t maxcode;   /* largest finite magnitude code */
    uint32_t infcode;   /* magnitude code of Inf; 0 = no Inf */
    uint32_t nanmag;    /* magnitude code of NaN (sign kept); 0 for uz */
    bool uz;            /* FNUZ: no -0; the lone sign bit (0x80) is the only NaN */
} minifmt;

static const minifmt MF_E4M3FN = {8, 3, 7, 0x7e, 0, 0x7f, false};
static const minifmt MF_E4M3FNUZ = {8, 3, 8, 0x7f, 0, 0, true};
static const minifmt MF_E5M2 = {8, 2, 15, 0x7b, 0x7c, 0x7f, false};
static const minifmt MF_E5M2FNUZ = {8, 2, 16, 0x7f, 0, 0, true};

static uint32_t mini_nan(const minifmt *f, uint32_t sign)
{
    return f->uz ? 1u << (f->nbits - 1) : (sign << (f->nbits - 1)) | f->nanmag;
}

static uint32_t mini_overflow(const minifmt *f, uint32_t sign, bool sat)
{
    if (sat)
        return (sign << (f->nbits - 1)) | f->maxcode;
    if (f->infcode)
        return (sign << (f->nbits - 1)) | f->infcode;
    return mini_nan(f, sign);
}

static inline uint32_t mini_encode(const minifmt *f, float x, bool sat)
{
    uint32_t b = f32_bits(x), sign = b >> 31, ax = b & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return mini_nan(f, sign);
    if (ax == 0x7f800000u)
        return mini_overflow(f, sign, sat);
    int e = (int)(ax >> 23);
    uint32_t m = ax & 0x7fffffu;
    if (e)
        m |= 0x800000u;
    else
        e = 1;   /* FP32 subnormal: exponent -126, no implicit bit */
    int E = e - 127, emin = 1 - f->bias;
    int shift = 23 - f->mbits + (E < emin ? emin - E : 0);
    uint32_t mag = E > emin ? (uint32_t)(E - emin) << f->mbits : 0;
    if (shift <= 25) {   /* otherwise below a quarter of the smallest subnormal: rounds to 0 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        mag += r + ((rem > half) | ((rem == half) & r & 1u));   /* branch-free ties-to-even */
    }
    if (mag > f->maxcode)
        return mini_overflow(f, sign, sat);
    if (mag == 0 && f->uz)
        return 0;
    return (sign << (f->nbits - 1)) | mag;
}

static float mini_decode(const minifmt *f, uint32_t v)
{
    uint32_t sign = (v >> (f->nbits - 1)) & 1, mag = v & ((1u << (f->nbits - 1)) - 1);
    if (f->uz && sign && mag == 0)
        return NAN;
    if (mag > f->maxcode) {
        float r = (f->infcode && mag == f->infcode) ? INFINITY : NAN;
        return sign ? -r : r;
    }
    int ef = (int)(mag >> f->mbits);
    int mf = (int)(mag & ((1u << f->mbits) - 1));
    float val = ef ? ldexpf((float)(mf + (1 << f->mbits)), ef - f->bias - f->mbits)
                   : ldexpf((float)mf, 1 - f->bias - f->mbits);
    return sign ? -val : val;
}

static const minifmt *fp8_fmt(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_FP8E4M3: return &MF_E4M3FN;
    case KILN_DT_FP8E4M3FNUZ: return &MF_E4M3FNUZ;
    case KILN_DT_FP8E5M2: return &MF_E5M2;
    case KILN_DT_FP8E5M2FNUZ: return &MF_E5M2FNUZ;
    default: return NULL;
    }
}

bool kiln__dtype_is_fp8(kiln_dtype dt)
{
    return fp8_fmt(dt) != NULL;
}

uint8_t kiln__f32_to_fp8(kiln_dtype dt, float f, bool saturate)
{
    const minifmt *m = fp8_fmt(dt);
    return m ? (uint8_t)mini_encode(m, f, saturate) : 0;
}

float kiln__fp8_to_f32(kiln_dtype dt, uint8_t v)
{
    const minifmt *m = fp8_fmt(dt);
    return m ? mini_decode(m, v) : NAN;
}

float kiln__fp8_max(kiln_dtype dt)
{
    const minifmt *m = fp8_fmt(dt);
    return m ? mini_decode(m, m->maxcode) : NAN;
}

/* one loop per format so that the format constants fold into the inlined encoder */
#define FP8_ENCODE_LOOP(F)                                                                                   \
    for (int64_t i = 0; i < n; i++)                                                                          \
        dst[i] = (uint8_t)mini_encode(&(F), src[i], saturate);

void kiln__f32_to_fp8_array(kiln_dtype dt, uint8_t *dst, const float *src, int64_t n, bool saturate)
{
    switch (dt) {
    case KILN_DT_FP8E4M3: FP8_ENCODE_LOOP(MF_E4M3FN) break;
    case KILN_DT_FP8E4M3FNUZ: FP8_ENCODE_LOOP(MF_E4M3FNUZ) break;
    case KILN_DT_FP8E5M2: FP8_ENCODE_LOOP(MF_E5M2) break;
    case KILN_DT_FP8E5M2FNUZ: FP8_ENCODE_LOOP(MF_E5M2FNUZ) break;
    default: memset(dst, 0, (size_t)(n > 0 ? n : 0)); break;
    }
}

void kiln__fp8_to_f32_array(kiln_dtype dt, float *dst, const uint8_t *src, int64_t n)
{
    const minifmt *m = fp8_fmt(dt);
    if (!m) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = NAN;
        return;
    }
    if (n < 256) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = mini_decode(m, src[i]);
        return;
    }
    float lut[256];
    for (int c = 0; c < 256; c++)
        lut[c] = mini_decode(m, (uint32_t)c);
    for (int64_t i = 0; i < n; i++)
        dst[i] = lut[src[i]];
}

/* E2M1 magnitudes 0 .5 1 1.5 2 3 4 6 (codes 0..7); the boundaries between neighbours are 0.25,
 * 0.75, 1.25, 1.75, 2.5, 3.5, 5, and a tie goes to the even code: '>' where the lower neighbour
 * has the even code, '>=' where the upper one has. Above 6 (and Inf) saturates to code 7. */
uint8_t kiln__f32_to_fp4(float f)
{
    if (f != f)
        return 0x7;   /* no NaN in E2M1: +6 (documented choice) */
    float a = fabsf(f);
    unsigned c = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
    return (uint8_t)((signbit(f) ? 8u : 0u) | c);
}

float kiln__fp4_to_f32(uint8_t v)
{
    static const float lut[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    return lut[v & 0xfu];
}

/* ------------------------------------------------------------------ E8M0 */

uint8_t kiln__f32_to_e8m0(float f)
{
    if (!isfinite(f))
        return 0xff;
    if (!(f > 0))
        return 0;
    int e;
    frexpf(f, &e);   /* f = m * 2^e, m in [0.5, 1): floor(log2 f) = e - 1 */
    int x = e - 1;
    if (x < -127)
        x = -127;
    if (x > 127)
        x = 127;
    return (uint8_t)(x + 127);
}

float kiln__e8m0_to_f32(uint8_t v)
{
    return v == 0xff ? NAN : ldexpf(1.0f, (int)v - 127);
}
