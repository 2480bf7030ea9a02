/* src/backend/qexact.h (the GPU INT8 epilogues' conversions without conversion instructions): each shortcut against
 * the CPU's definition, bit for bit, over the ranges its comment claims.
 *
 * 1. kq_i2f: every integer of [-2^22, 2^22] against (float)n.
 * 2. kq_rint: every quarter of [-2^22, 2^22) (the ties included), the floats next to each tie, and random floats of
 *    every exponent below 2^22, against (int32_t)rintf(x).
 * 3. kq_clamp_rint: kiln__qepi_q's clamp and rounding (cpu/qgemm.c) for random, NaN and infinite t; kq_rint_plus
 *    and kq_byte_minus (the QLinearConvAdd epilogue's operands of the add) against integer arithmetic.
 * 4. kq_qadd: cpu/qadd.h kiln__qadd1 for every (a, b) of u8 x u8 and s8 x u8 under random scales (typical, and from
 *    2^-40 to 2^40), zero points and activations (none / Relu / Clip): where it answers, its answer is the CPU's;
 *    and it answers for almost every element (the division it replaces must stay rare: the point of it), also for
 *    scales chosen so that many quotients are exactly k + 0.5 (there it must decline or be right).
 * 5. kq_qadd_round as QuantizeLinear (ref/k_quant.c: sat(rintf(x / s) + z), NaN -> 0) for random, tie, NaN, infinite
 *    and extreme x and scales. */
#include "test.h"
#include "backend/qexact.h"
#include "backend/cpu/qadd.h"
#include <stdint.h>
#include <string.h>

static unsigned long long seed = 31;

static float bits_f(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static void test_i2f(void)
{
    long bad = 0;
    for (int32_t n = -(1 << 22); n <= (1 << 22); n++)
        bad += kq_i2f(n) != (float)n;
    CHECK_MSG(bad == 0, "kq_i2f: %ld of 2^23 + 1 integers differ from (float)n", bad);
}

static long rint_bad(float x) { return kq_rint(x) != (int32_t)rintf(x); }

static void test_rint(void)
{
    long bad = 0, n = 0;
    for (int32_t k = -(1 << 24); k < (1 << 24); k++, n++) {   /* k / 4: integers, quarters and every tie */
        const float x = (float)k * 0.25f;
        bad += rint_bad(x);
        if ((k & 3) == 2) {   /* a tie: the floats on either side of it */
            bad += rint_bad(nextafterf(x, -INFINITY)) + rint_bad(nextafterf(x, INFINITY));
            n += 2;
        }
    }
    for (int i = 0; i < 4000000; i++, n++) {   /* random bits of every exponent below 2^22 */
        const uint32_t b = (uint32_t)test_rng(&seed);
        const float x = bits_f((b & 0x807fffffu) | (uint32_t)(test_rng(&seed) % 149) << 23);   /* exponents 0 .. 148 */
        if (fabsf(x) < 4194304.0f)
            bad += rint_bad(x);
    }
    CHECK_MSG(bad == 0, "kq_rint: %ld of %ld values differ from rintf", bad, n);
}

static void test_rint_plus_byte(void)
{
    long bad = 0, n = 0;
    for (int i = 0; i < 3000000; i++, n++) {   /* rint(x) + d: ties, random, near the range's ends */
        const float x = i % 3 == 0 ? (float)((int)(test_rng(&seed) % 1000) - 500) + 0.5f
                        : i % 3 == 1 ? test_randf(&seed) * 4194303.f : test_randf(&seed) * 300.f;
        const int32_t d = (int32_t)(test_rng(&seed) % 1021) - 510;
        bad += kq_rint_plus(x, (float)d) != (float)((int32_t)rintf(x) + d);
    }
    for (int32_t zb = -128; zb <= 383; zb++)   /* every byte against every zero point (s8 ones shifted by 128) */
        for (uint32_t b = 0; b < 256; b++, n++)
            bad += kq_byte_minus(kq_float((int32_t)(KQ_MAGIC_BITS | b)), zb) != (float)((int32_t)b - zb);
    CHECK_MSG(bad == 0, "kq_rint_plus / kq_byte_minus: %ld of %ld values differ", bad, n);
}

/* kiln__qepi_q's last steps (cpu/qgemm.c) for t and the clamp bounds lo, hi (the type's range less the zero point) */
static int32_t qepi_ref(float t, float lo, float hi)
{
    if (!(t >= lo))
        t = lo;
    if (t > hi)
        t = hi;
    return (int32_t)rintf(t);
}

static void test_clamp_rint(void)
{
    long bad = 0;
    for (int i = 0; i < 2000000; i++) {
        const int zp = (int)(test_rng(&seed) % 256) - (i & 1 ? 128 : 0);   /* u8 / s8 zero points */
        float lo = (float)((i & 1 ? -128 : 0) - zp), hi = (float)((i & 1 ? 127 : 255) - zp);
        if (i % 3 == 0)   /* a Clip narrowing the range to non-integer bounds */
            lo = lo + (hi - lo) * (float)(test_rng(&seed) % 1000) / 3000.f, hi = hi - 0.37f;
        float t;
        switch (i % 7) {
        case 0: t = NAN; break;
        case 1: t = (i & 2) ? INFINITY : -INFINITY; break;
        case 2: t = (float)((int)(test_rng(&seed) % 800) - 400) + 0.5f; break;   /* ties */
        default: t = test_randf(&seed) * 600.f; break;
        }
        bad += kq_clamp_rint(t, lo, hi) != qepi_ref(t, lo, hi);
    }
    CHECK_MSG(bad == 0, "kq_clamp_rint: %ld of 2e6 differ from kiln__qepi_q's rounding", bad);
}

/* 2^e, e in [lo, hi], times a random mantissa in [1, 2) */
static float rnd_scale(int lo, int hi)
{
    const int e = lo + (int)(test_rng(&seed) % (unsigned)(hi - lo + 1));
    return ldexpf(1.f + (float)(test_rng(&seed) % 8388608u) / 8388608.f, e);
}

typedef struct {
    long checked, answered, bad;
} qadd_count;

static void qadd_case(const kiln_qadd *p, bool a_s8, qadd_count *n)
{
    const float isc = kq_inv(p->sc);   /* as cuda_int8.c passes it */
    const int act = p->act.kind != KILN_ACT_NONE;
    const float flo = p->act.kind == KILN_ACT_RELU ? 0.f : p->act.kind == KILN_ACT_CLIP ? p->act.alpha : -INFINITY;
    const float fhi = p->act.kind == KILN_ACT_CLIP ? p->act.beta : INFINITY;
    for (int ia = 0; ia < 256; ia++)
        for (int b = 0; b < 256; b++) {
            const int32_t a = a_s8 ? ia - 128 : ia, want = kiln__qadd1(p, a, b);
            int32_t c = -999;
            float v;
            n->checked++;
            if (kq_qadd(a, p->za, p->sa, b, p->zb, p->sb, act, flo, fhi, isc, p->zc, p->lo, p->hi, &c, &v)) {
                n->answered++;
                if (c != want && n->bad++ < 5)
                    fprintf(stderr, "kq_qadd(a %d, b %d; sa %a sb %a sc %a za %d zb %d zc %d act %d) = %d, CPU %d\n", a,
                            b, (double)p->sa, (double)p->sb, (double)p->sc, p->za, p->zb, p->zc, (int)p->act.kind, c,
                            want);
            } else {   /* declined: the caller divides the v it returned (kernels_int8.cuh qadd1) */
                const float r = rintf(v / p->sc) + (float)p->zc;
                c = r != r ? 0 : r < (float)p->lo ? p->lo : r > (float)p->hi ? p->hi : (int32_t)r;
                if (c != want && n->bad++ < 5)
                    fprintf(stderr, "kq_qadd declined (a %d, b %d): the division of its v gives %d, CPU %d\n", a, b, c,
                            want);
            }
        }
}

static kiln_qadd qadd_params(float sa, float sb, float sc, bool a_s8, bool c_s8, int act)
{
    kiln_qadd p = {.sa = sa, .sb = sb, .sc = sc};
    p.za = a_s8 ? (int32_t)(test_rng(&seed) % 256) - 128 : (int32_t)(test_rng(&seed) % 256);
    p.zb = (int32_t)(test_rng(&seed) % 256);
    p.zc = c_s8 ? (int32_t)(test_rng(&seed) % 256) - 128 : (int32_t)(test_rng(&seed) % 256);
    p.lo = c_s8 ? -128 : 0;
    p.hi = c_s8 ? 127 : 255;
    p.act.kind = act == 0 ? KILN_ACT_NONE : act == 1 ? KILN_ACT_RELU : KILN_ACT_CLIP;
    if (act == 2) {
        p.act.alpha = -sc * 20.f;
        p.act.beta = sc * 90.3f;
    }
    p.cdt = c_s8 ? KILN_DT_INT8 : KILN_DT_UINT8;
    return p;
}

static void test_qadd(void)
{
    qadd_count typ = {0}, wide = {0}, ties = {0};
    for (int i = 0; i < 60; i++) {   /* typical activation scales: 2^-9 .. 2^-2 */
        const kiln_qadd p = qadd_params(rnd_scale(-9, -2), rnd_scale(-9, -2), rnd_scale(-9, -2), i & 1, i & 2, i % 3);
        qadd_case(&p, i & 1, &typ);
    }
    for (int i = 0; i < 40; i++) {   /* anything: quotients from 0 to far past the range, subnormal and huge scales */
        const kiln_qadd p = qadd_params(rnd_scale(-40, 40), rnd_scale(-40, 40), rnd_scale(-140, 100), i & 1, i & 2,
                                        i % 3);
        qadd_case(&p, i & 1, &wide);
    }
    for (int i = 0; i < 20; i++) {   /* sa = sb = sc / 2 (or / 4): every odd (or 2 mod 4) sum is a tie */
        const float sc = rnd_scale(-8, -3), s = i & 4 ? sc * 0.25f : sc * 0.5f;
        const kiln_qadd p = qadd_params(s, s, sc, i & 1, i & 2, i % 3);
        qadd_case(&p, i & 1, &ties);
    }
    CHECK_MSG(typ.bad + wide.bad + ties.bad == 0, "kq_qadd: %ld / %ld / %ld answers differ from kiln__qadd1",
              typ.bad, wide.bad, ties.bad);
    /* the quick path must carry the typical case (it replaces a division an element on the GPU) */
    CHECK_MSG(typ.answered >= typ.checked * 995 / 1000, "kq_qadd answered %ld of %ld typical elements", typ.answered,
              typ.checked);
    /* and must decline the exact ties it cannot decide from a product */
    CHECK_MSG(ties.answered < ties.checked, "kq_qadd answered every one of %ld constructed ties", ties.checked);
    printf("kq_qadd: answered %ld of %ld typical, %ld of %ld wide-range, %ld of %ld tie-heavy elements\n",
           typ.answered, typ.checked, wide.answered, wide.checked, ties.answered, ties.checked);
}

/* QuantizeLinear (ref/k_quant.c): sat(rintf(x / s) + z), NaN -> 0 -- the GPU's k_quantize decides it by kq_qadd_round
 * with isc = kq_inv(s) and divides where that declines */
static void test_quantize(void)
{
    long n = 0, answered = 0, bad = 0;
    for (int i = 0; i < 3000000; i++, n++) {
        const bool s8 = i & 1;
        const int32_t z = s8 ? (int32_t)(test_rng(&seed) % 256) - 128 : (int32_t)(test_rng(&seed) % 256);
        const float lo = s8 ? -128.f : 0.f, hi = s8 ? 127.f : 255.f;
        const float s = i % 5 == 0 ? rnd_scale(-140, 120) : rnd_scale(-12, 2);
        float x;
        switch (i % 11) {
        case 0: x = NAN; break;
        case 1: x = (i & 2) ? INFINITY : -INFINITY; break;
        case 2: x = ((float)((int)(test_rng(&seed) % 600) - 300) + 0.5f) * s; break;   /* quotients near ties */
        case 3: x = rnd_scale(-149, 127) * ((i & 4) ? 1.f : -1.f); break;          /* any magnitude */
        default: x = test_randf(&seed) * 200.f * s; break;
        }
        float r = rintf(x / s) + (float)z;
        r = r != r ? 0.f : r < lo ? lo : r > hi ? hi : r;
        int32_t c;
        if (kq_qadd_round(x, kq_inv(s), z, (int32_t)lo, (int32_t)hi, &c)) {
            answered++;
            if (c != (int32_t)r && bad++ < 5)
                fprintf(stderr, "quantize x %a s %a z %d: %d, CPU %d\n", (double)x, (double)s, z, c, (int32_t)r);
        }
    }
    CHECK_MSG(bad == 0, "kq_qadd_round as QuantizeLinear: %ld of %ld answers differ", bad, n);
    CHECK_MSG(answered >= n * 85 / 100, "kq_qadd_round as QuantizeLinear answered %ld of %ld", answered, n);
}

int main(void)
{
    test_i2f();
    test_rint();
    test_clamp_rint();
    test_rint_plus_byte();
    test_qadd();
    test_quantize();
    return TEST_SUMMARY();
}
