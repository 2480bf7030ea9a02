/* Numeric formats (src/core/numfmt*): every representable value of FP16, BF16, the four FP8
 * types, FP4 E2M1 and E8M0; encoding at, just above and just below every rounding boundary,
 * overflow / saturation, NaN, +-Inf, subnormals, +-0 -- all against an independent
 * double-precision reference written here from the format definitions. Then the F16C / AVX-512
 * array paths against the scalar code, and the block formats (NVFP4, MXFP4, INT4, INT8). */
#include "core/core.h"
#include "test.h"
#include <float.h>
#include <stdint.h>
#include <string.h>

static uint32_t fbits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static float bitsf(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* ================================================================ reference */

typedef enum { SP_IEEE, SP_FN, SP_FNUZ, SP_NONE } special;   /* Inf+NaNs / NaN=all ones / NaN=0x80 / none */

typedef struct rfmt {
    const char *name;
    int ebits, mbits, bias;
    special sp;
    kiln_dtype dt;   /* FP8 dtype, or FLOAT16 / BFLOAT16 / FP4E2M1 */
} rfmt;

/* value of code c from the definition: (-1)^s 2^(E-bias) 1.M, or 2^(1-bias) 0.M for E = 0 */
static double ref_decode(const rfmt *f, uint32_t c)
{
    int nb = 1 + f->ebits + f->mbits;
    uint32_t s = (c >> (nb - 1)) & 1, E = (c >> f->mbits) & ((1u << f->ebits) - 1), M = c & ((1u << f->mbits) - 1);
    uint32_t eall = (1u << f->ebits) - 1, mall = (1u << f->mbits) - 1;
    if (f->sp == SP_IEEE && E == eall)
        return M ? NAN : (s ? -INFINITY : INFINITY);
    if (f->sp == SP_FN && E == eall && M == mall)
        return NAN;
    if (f->sp == SP_FNUZ && s && E == 0 && M == 0)
        return NAN;
    double v = E ? ldexp(1.0 + ldexp((double)M, -f->mbits), (int)E - f->bias) : ldexp((double)M, 1 - f->bias - f->mbits);
    return s ? -v : v;
}

/* sorted table of the non-negative finite values and their codes */
typedef struct rtab {
    const rfmt *f;
    int n;
    double *v;
    uint32_t *c;
} rtab;

typedef struct vc { double v; uint32_t c; } vc;
static int vc_cmp(const void *a, const void *b)
{
    double x = ((const vc *)a)->v, y = ((const vc *)b)->v;
    return x < y ? -1 : x > y;
}

static rtab rtab_make(const rfmt *f)
{
    int nb = 1 + f->ebits + f->mbits;
    uint32_t half = 1u << (nb - 1);
    vc *tmp = malloc(sizeof(vc) * half);
    int n = 0;
    for (uint32_t c = 0; c < half; c++) {
        double v = ref_decode(f, c);
        if (isfinite(v))
            tmp[n++] = (vc){v, c};
    }
    qsort(tmp, (size_t)n, sizeof(vc), vc_cmp);
    rtab t = {f, n, malloc(sizeof(double) * (size_t)n), malloc(sizeof(uint32_t) * (size_t)n)};
    for (int i = 0; i < n; i++)
        t.v[i] = tmp[i].v, t.c[i] = tmp[i].c;
    free(tmp);
    return t;
}

static void rtab_free(rtab *t)
{
    free(t->v);
    free(t->c);
}

/* the documented NaN code for an encoder result (FP16/BF16 keep a payload: not used for them) */
static uint32_t ref_nan(const rfmt *f, bool neg)
{
    int nb = 1 + f->ebits + f->mbits;
    switch (f->sp) {
    case SP_FNUZ: return 1u << (nb - 1);
    case SP_NONE: return 0x7;   /* FP4: NaN -> +6 */
    default: return (neg ? 1u << (nb - 1) : 0) | ((1u << (nb - 1)) - 1);
    }
}

/* round x to nearest, ties to the even code, then overflow / saturation rules */
static uint32_t ref_encode(const rtab *t, double x, bool sat)
{
    const rfmt *f = t->f;
    int nb = 1 + f->ebits + f->mbits;
    bool neg = signbit(x);
    if (isnan(x))
        return ref_nan(f, neg);
    double a = fabs(x);
    bool over = isinf(a);
    uint32_t mag = 0;
    if (!over) {
        int lo = 0, hi = t->n - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (t->v[mid] <= a)
                lo = mid;
            else
                hi = mid - 1;
        }
        bool virt = lo + 1 == t->n;   /* above max: the next value would be the overflow */
        double v0 = t->v[lo], v1 = virt ? v0 + (v0 - t->v[lo - 1]) : t->v[lo + 1];
        uint32_t c0 = t->c[lo], c1 = virt ? c0 + 1 : t->c[lo + 1];
        double mid = (v0 + v1) / 2;
        bool up = a > mid || (a == mid && (c0 & 1));
        if (a == v0)
            up = false;
        mag = up ? c1 : c0;
        over = up && virt;
    }
    if (over) {
        if (sat || f->sp == SP_NONE)
            mag = t->c[t->n - 1];
        else if (f->sp == SP_IEEE)
            mag = ((1u << f->ebits) - 1) << f->mbits;
        else
            return ref_nan(f, neg);
    }
    if (mag == 0 && f->sp == SP_FNUZ)
        return 0;
    return (neg ? 1u << (nb - 1) : 0) | mag;
}

/* ================================================================ code under test, uniformly */

static uint32_t enc(const rfmt *f, float x, bool sat)
{
    switch (f->dt) {
    case KILN_DT_FLOAT16: return kiln__f32_to_f16(x);
    case KILN_DT_BFLOAT16: return kiln__f32_to_bf16(x);
    case KILN_DT_FP4E2M1: return kiln__f32_to_fp4(x);
    default: return kiln__f32_to_fp8(f->dt, x, sat);
    }
}

static float dec(const rfmt *f, uint32_t c)
{
    switch (f->dt) {
    case KILN_DT_FLOAT16: return kiln__f16_to_f32((uint16_t)c);
    case KILN_DT_BFLOAT16: return kiln__bf16_to_f32((uint16_t)c);
    case KILN_DT_FP4E2M1: return kiln__fp4_to_f32((uint8_t)c);
    default: return kiln__fp8_to_f32(f->dt, (uint8_t)c);
    }
}

static const rfmt FMTS[] = {
    {"fp16", 5, 10, 15, SP_IEEE, KILN_DT_FLOAT16},       {"bf16", 8, 7, 127, SP_IEEE, KILN_DT_BFLOAT16},
    {"e4m3fn", 4, 3, 7, SP_FN, KILN_DT_FP8E4M3},         {"e4m3fnuz", 4, 3, 8, SP_FNUZ, KILN_DT_FP8E4M3FNUZ},
    {"e5m2", 5, 2, 15, SP_IEEE, KILN_DT_FP8E5M2},        {"e5m2fnuz", 5, 2, 16, SP_FNUZ, KILN_DT_FP8E5M2FNUZ},
    {"e2m1", 2, 1, 1, SP_NONE, KILN_DT_FP4E2M1},
};

static bool is_half(const rfmt *f)
{
    return f->dt == KILN_DT_FLOAT16 || f->dt == KILN_DT_BFLOAT16;
}

/* every code: decode equals the reference; encode(decode(c)) gives c back (NaNs: quieted) */
static void test_all_codes(const rfmt *f)
{
    int nb = 1 + f->ebits + f->mbits;
    uint32_t quiet = 1u << (f->mbits - 1);
    for (uint32_t c = 0; c < (1u << nb); c++) {
        double r = ref_decode(f, c);
        float d = dec(f, c);
        if (isnan(r)) {
            CHECK_MSG(isnan(d), "%s decode(0x%x) = %g, want NaN", f->name, c, (double)d);
            for (int sat = 0; sat < 2; sat++) {
                uint32_t e = enc(f, d, sat);
                uint32_t want = is_half(f) ? c | quiet : ref_nan(f, signbit(d));
                CHECK_MSG(e == want, "%s NaN 0x%x -> 0x%x, want 0x%x", f->name, c, e, want);
            }
            if (f->dt == KILN_DT_BFLOAT16)
                CHECK_MSG(fbits(d) == c << 16, "bf16 NaN 0x%x widens to 0x%08x", c, fbits(d));
            continue;
        }
        CHECK_MSG(fbits(d) == fbits((float)r), "%s decode(0x%x) = %a, want %a", f->name, c, (double)d, r);
        for (int sat = 0; sat < (isinf(d) ? 1 : 2); sat++) {   /* +-Inf saturates to +-max: boundary tests */
            uint32_t e = enc(f, d, sat);
            CHECK_MSG(e == c, "%s round trip 0x%x -> %a -> 0x%x (sat %d)", f->name, c, (double)d, e, sat);
        }
    }
}

static void check_enc(const rtab *t, float x, int *bad)
{
    for (int sat = 0; sat < 2; sat++) {
        if (sat && is_half(t->f))
            break;   /* FP16/BF16 have no saturating mode */
        for (int s = 0; s < 2; s++) {
            float p = s ? -x : x;
            uint32_t got = enc(t->f, p, sat), want = ref_encode(t, (double)p, sat);
            if (isnan(p) && is_half(t->f)) {
                double d = (double)dec(t->f, got);
                test_checks++;
                if (!isnan(d) || !signbit(d) != !signbit(p)) {
                    test_failures++;
                    if ((*bad)++ < 10)
                        fprintf(stderr, "%s encode(NaN 0x%08x) = 0x%x\n", t->f->name, fbits(p), got);
                }
                continue;
            }
            test_checks++;
            if (got != want) {
                test_failures++;
                if ((*bad)++ < 10)
                    fprintf(stderr, "%s encode(%a, sat=%d) = 0x%x, want 0x%x\n", t->f->name, (double)p, sat, got, want);
            }
        }
    }
}

/* at, and one float ulp either side of, every representable value and every midpoint */
static void test_boundaries(const rfmt *f)
{
    rtab t = rtab_make(f);
    int bad = 0;
    for (int i = 0; i < t.n; i++) {
        double v0 = t.v[i], v1 = i + 1 < t.n ? t.v[i + 1] : v0 + (v0 - t.v[i - 1]);
        double pts[2] = {v0, (v0 + v1) / 2};
        for (int j = 0; j < 2; j++) {
            float p = (float)pts[j];
            CHECK_MSG((double)p == pts[j], "%s: %a is not a float", f->name, pts[j]);
            check_enc(&t, p, &bad);
            check_enc(&t, nextafterf(p, INFINITY), &bad);
            check_enc(&t, nextafterf(p, -INFINITY), &bad);
        }
    }
    const float specials[] = {0.0f, FLT_TRUE_MIN, bitsf(0x007fffff), FLT_MIN, 1e-30f, 1e30f, FLT_MAX, INFINITY, NAN};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++)
        check_enc(&t, specials[i], &bad);
    for (int e = -150; e < 129; e++)   /* every power of two of FP32 */
        check_enc(&t, ldexpf(1.0f, e), &bad);
    unsigned long long seed = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++)    /* random FP32 bit patterns */
        check_enc(&t, bitsf((uint32_t)test_rng(&seed)), &bad);
    CHECK_MSG(bad == 0, "%s: %d encode mismatches", f->name, bad);
    rtab_free(&t);
}

/* known values from the format specifications (guards the reference itself) */
static void test_known_values(void)
{
    CHECK(kiln__f32_to_f16(1.0f) == 0x3c00 && kiln__f32_to_f16(65504.0f) == 0x7bff);
    CHECK(kiln__f32_to_f16(65520.0f) == 0x7c00 && kiln__f32_to_f16(65519.996f) == 0x7bff);
    CHECK(kiln__f32_to_f16(ldexpf(1, -24)) == 0x0001 && kiln__f32_to_f16(ldexpf(1, -25)) == 0x0000);
    CHECK(kiln__f32_to_f16(-0.0f) == 0x8000 && kiln__f32_to_bf16(1.0f) == 0x3f80);
    CHECK(kiln__f32_to_bf16(bitsf(0x3f808000)) == 0x3f80 && kiln__f32_to_bf16(bitsf(0x3f818000)) == 0x3f82);
    CHECK(kiln__f32_to_bf16(FLT_MAX) == 0x7f80);   /* rounds up to Inf */
    const kiln_dtype E4 = KILN_DT_FP8E4M3, E4UZ = KILN_DT_FP8E4M3FNUZ, E5 = KILN_DT_FP8E5M2, E5UZ = KILN_DT_FP8E5M2FNUZ;
    CHECK(kiln__fp8_max(E4) == 448 && kiln__fp8_max(E4UZ) == 240 && kiln__fp8_max(E5) == 57344 &&
          kiln__fp8_max(E5UZ) == 57344);
    CHECK(kiln__f32_to_fp8(E4, 448, false) == 0x7e && kiln__f32_to_fp8(E4, 464, false) == 0x7e);
    CHECK(kiln__f32_to_fp8(E4, 465, false) == 0x7f && kiln__f32_to_fp8(E4, 465, true) == 0x7e);
    CHECK(kiln__f32_to_fp8(E4, -INFINITY, true) == 0xfe && kiln__f32_to_fp8(E4, INFINITY, false) == 0x7f);
    CHECK(kiln__f32_to_fp8(E4, ldexpf(1, -9), true) == 0x01 && kiln__f32_to_fp8(E4, ldexpf(1, -10), true) == 0x00);
    CHECK(kiln__f32_to_fp8(E4, 1.0f, true) == 0x38 && kiln__f32_to_fp8(E4UZ, 1.0f, true) == 0x40);
    CHECK(kiln__f32_to_fp8(E4UZ, -0.0f, true) == 0x00 && kiln__f32_to_fp8(E4UZ, NAN, true) == 0x80);
    CHECK(kiln__f32_to_fp8(E4UZ, 1000, false) == 0x80 && kiln__f32_to_fp8(E4UZ, -INFINITY, true) == 0xff);
    CHECK(kiln__f32_to_fp8(E5, 57344, false) == 0x7b && kiln__f32_to_fp8(E5, 61439, false) == 0x7b);
    CHECK(kiln__f32_to_fp8(E5, 61440, false) == 0x7c && kiln__f32_to_fp8(E5, 61440, true) == 0x7b);
    CHECK(kiln__f32_to_fp8(E5, -INFINITY, false) == 0xfc && kiln__f32_to_fp8(E5, -INFINITY, true) == 0xfb);
    CHECK(kiln__f32_to_fp8(E5, ldexpf(1, -16), true) == 0x01 && kiln__f32_to_fp8(E5UZ, ldexpf(1, -17), true) == 0x01);
    CHECK(kiln__f32_to_fp8(E5UZ, 1e6f, false) == 0x80 && kiln__f32_to_fp8(E5UZ, 1e6f, true) == 0x7f);
    CHECK(isinf(kiln__fp8_to_f32(E5, 0x7c)) && isnan(kiln__fp8_to_f32(E5, 0x7d)) && isnan(kiln__fp8_to_f32(E4, 0xff)));
    static const float fp4[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int c = 0; c < 16; c++)
        CHECK(kiln__fp4_to_f32((uint8_t)c) == (c & 8 ? -fp4[c & 7] : fp4[c & 7]));
    CHECK(kiln__f32_to_fp4(2.5f) == 0x4 && kiln__f32_to_fp4(3.5f) == 0x6 && kiln__f32_to_fp4(5.0f) == 0x6);
    CHECK(kiln__f32_to_fp4(0.25f) == 0x0 && kiln__f32_to_fp4(0.75f) == 0x2 && kiln__f32_to_fp4(1.25f) == 0x2);
    CHECK(kiln__f32_to_fp4(-100.0f) == 0xf && kiln__f32_to_fp4(INFINITY) == 0x7 && kiln__f32_to_fp4(NAN) == 0x7);
    CHECK(kiln__f32_to_fp4(-0.0f) == 0x8 && kiln__f32_to_fp4(-0.2f) == 0x8);
}

static void test_e8m0(void)
{
    for (int c = 0; c < 256; c++) {
        float v = kiln__e8m0_to_f32((uint8_t)c);
        if (c == 255) {
            CHECK(isnan(v));
            continue;
        }
        CHECK_MSG((double)v == ldexp(1.0, c - 127), "e8m0 0x%x -> %a", c, (double)v);
        CHECK(kiln__f32_to_e8m0(v) == c);
        CHECK(kiln__f32_to_e8m0(nextafterf(v, INFINITY)) == c);
        CHECK(kiln__f32_to_e8m0(v * 1.999f) == c);
        if (c > 0)
            CHECK_MSG(kiln__f32_to_e8m0(nextafterf(v, 0)) == c - 1, "e8m0 below 2^%d", c - 127);
    }
    CHECK(kiln__f32_to_e8m0(FLT_MAX) == 254 && kiln__f32_to_e8m0(FLT_TRUE_MIN) == 0);
    CHECK(kiln__f32_to_e8m0(0.0f) == 0 && kiln__f32_to_e8m0(-4.0f) == 0);
    CHECK(kiln__f32_to_e8m0(NAN) == 0xff && kiln__f32_to_e8m0(INFINITY) == 0xff);
}

/* ================================================================ fast paths */

static void test_arrays(void)
{
    printf("fast paths: f16c=%d avx512=%d\n", kiln__numfmt_has_f16c(), kiln__numfmt_has_avx512());
    unsigned long long seed = 12345;
    enum { N = 10007 };
    float *f = malloc(4 * N), *a = malloc(4 * N), *b = malloc(4 * N);
    uint16_t *h = malloc(2 * N), *ha = malloc(2 * N), *hb = malloc(2 * N);
    uint8_t *q = malloc(N), *qa = malloc(N), *qb = malloc(N);
    for (int i = 0; i < N; i++) {
        uint32_t r = (uint32_t)test_rng(&seed);
        /* mix random bit patterns (NaN, Inf, subnormals) with values near the FP16 range */
        f[i] = i % 3 ? bitsf(r) : test_randf(&seed) * ldexpf(1, (int)(r % 40) - 26);
        h[i] = (uint16_t)r;
        q[i] = (uint8_t)(r >> 16);
    }
    static const int sizes[] = {0, 1, 7, 15, 17, 31, 33, 63, 257, N};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int n = sizes[s], off = n < N ? 3 : 0;   /* unaligned starts too */
        kiln__f32_to_f16_array(ha, f + off, n);
        kiln__f32_to_f16_array_ref(hb, f + off, n);
        CHECK_MSG(memcmp(ha, hb, 2 * (size_t)n) == 0, "f32->f16 array n=%d", n);
        kiln__f32_to_bf16_array(ha, f + off, n);
        kiln__f32_to_bf16_array_ref(hb, f + off, n);
        CHECK_MSG(memcmp(ha, hb, 2 * (size_t)n) == 0, "f32->bf16 array n=%d", n);
        kiln__f16_to_f32_array(a, h + off, n);
        kiln__f16_to_f32_array_ref(b, h + off, n);
        CHECK_MSG(memcmp(a, b, 4 * (size_t)n) == 0, "f16->f32 array n=%d", n);
        kiln__bf16_to_f32_array(a, h + off, n);
        kiln__bf16_to_f32_array_ref(b, h + off, n);
        CHECK_MSG(memcmp(a, b, 4 * (size_t)n) == 0, "bf16->f32 array n=%d", n);
        /* the BF16 round trip, out of place and in place, against the scalar pair */
        kiln__f32_round_bf16_array(a, f + off, n);
        memcpy(b, f + off, 4 * (size_t)n);
        kiln__f32_round_bf16_array(b, b, n);
        int rbad = 0;
        for (int i = 0; i < n; i++) {
            float w = kiln__bf16_to_f32(kiln__f32_to_bf16(f[off + i]));
            rbad += fbits(a[i]) != fbits(w) || fbits(b[i]) != fbits(w);
        }
        CHECK_MSG(rbad == 0, "f32 bf16 round trip n=%d: %d mismatches", n, rbad);
        static const kiln_dtype f8[] = {KILN_DT_FP8E4M3, KILN_DT_FP8E4M3FNUZ, KILN_DT_FP8E5M2, KILN_DT_FP8E5M2FNUZ};
        for (int t = 0; t < 4; t++) {
            kiln__fp8_to_f32_array(f8[t], a, q + off, n);
            kiln__f32_to_fp8_array(f8[t], qa, f + off, n, t & 1);
            int bad = 0;
            for (int i = 0; i < n; i++) {
                float w = kiln__fp8_to_f32(f8[t], q[off + i]);
                bad += fbits(a[i]) != fbits(w) && !(isnan(a[i]) && isnan(w));
                bad += qa[i] != kiln__f32_to_fp8(f8[t], f[off + i], t & 1);
            }
            CHECK_MSG(bad == 0, "fp8 %s arrays n=%d: %d mismatches", kiln_dtype_name(f8[t]), n, bad);
        }
    }
    /* kiln__convert routes FP8 through the same code (saturating, as ONNX Cast's default) */
    CHECK(kiln__convert(KILN_DT_FP8E4M3, qb, KILN_DT_FLOAT32, f, N) == KILN_OK);
    kiln__f32_to_fp8_array(KILN_DT_FP8E4M3, qa, f, N, true);
    CHECK(memcmp(qa, qb, N) == 0);
    double d[3] = {1000.0, -0.3, 2.0};
    CHECK(kiln__convert(KILN_DT_FP8E5M2, qb, KILN_DT_FLOAT64, d, 3) == KILN_OK);
    CHECK(qb[0] == kiln__f32_to_fp8(KILN_DT_FP8E5M2, 1000.0f, true) && qb[2] == 0x40);
    CHECK(kiln__convert(KILN_DT_FLOAT64, d, KILN_DT_FP8E5M2, qb, 3) == KILN_OK && d[0] == 1024.0 && d[2] == 2.0);
    CHECK(kiln__convert(KILN_DT_FP4E2M1, qb, KILN_DT_FLOAT32, f, 2) == KILN_ERR_UNSUPPORTED);
    free(f), free(a), free(b), free(h), free(ha), free(hb), free(q), free(qa), free(qb);
}

/* ================================================================ block formats */

typedef struct qbuf {
    kiln__qlayout L;
    uint8_t *data;
    void *scales;
    float ts;
    float *y;
} qbuf;

static kiln_status qrun(qbuf *b, kiln__qfmt fmt, int64_t rows, int64_t k, int64_t block, kiln_dtype sdt,
                        const float *x, float ts)
{
    memset(b, 0, sizeof *b);
    KILN_TRY(kiln__qlayout_init(&b->L, fmt, rows, k, block, sdt));
    b->data = malloc(b->L.data_bytes + 1);
    b->scales = malloc(b->L.scale_bytes + 1);
    b->y = malloc(sizeof(float) * (size_t)(rows * k) + 1);
    b->ts = ts;
    kiln_status st = kiln__qpack(&b->L, x, b->data, b->scales, &b->ts);
    if (st == KILN_OK)
        kiln__qunpack(&b->L, b->data, b->scales, b->ts, b->y);
    return st;
}

static void qfree(qbuf *b)
{
    free(b->data), free(b->scales), free(b->y);
}

/* half the spacing of the element grid at |v| (in units of the block scale) and its max */
static double half_step(kiln__qfmt fmt, double v, double *qmax)
{
    switch (fmt) {
    case KILN_QF_NVFP4: case KILN_QF_MXFP4: *qmax = 6; return v < 2 ? 0.25 : v < 4 ? 0.5 : 1.0;
    case KILN_QF_INT4: *qmax = 7; return 0.5;
    case KILN_QF_INT8_CHANNEL: *qmax = 127; return 0.5;
    case KILN_QF_FP8: {   /* E4M3: 3 mantissa bits, subnormal step 2^-9 */
        int e;
        frexp(v, &e);
        *qmax = 448;
        return v < ldexp(1, -6) ? ldexp(1, -10) : ldexp(1, e - 1 - 4);
    }
    default: *qmax = 127; return 0.5;
    }
}

/* every element within half a quantization step (times its block's scale) of the input, or,
 * when |x| exceeds the grid (saturation), exactly at the clamped value */
static int check_error_bound(const qbuf *b, const float *x)
{
    int bad = 0;
    for (int64_t r = 0; r < b->L.rows; r++)
        for (int64_t i = 0; i < b->L.k; i++) {
            double S = kiln__qblock_scale(&b->L, b->scales, b->ts, r, i / b->L.block), qmax;
            double xv = x[r * b->L.k + i], yv = b->y[r * b->L.k + i], v = S > 0 ? fabs(xv) / S : 0;
            double bound = half_step(b->L.fmt, v, &qmax) * S;
            if (v > qmax)
                bound = fabs(xv) - qmax * S;
            bound += 1e-6 * (fabs(xv) + S);   /* float rounding of x/S and q*S */
            if (S == 0)
                bound = fabs(xv);             /* block scale underflowed: zero */
            if (!(fabs(xv - yv) <= bound) && bad++ < 5)
                fprintf(stderr, "fmt %d r %lld i %lld: x=%g y=%g S=%g bound=%g\n", (int)b->L.fmt, (long long)r,
                        (long long)i, xv, yv, S, bound);
        }
    return bad;
}

/* the scale recipes of docs/PRECISION.md, recomputed in double from the definitions */
static int check_scales(const qbuf *b, const float *x)
{
    int bad = 0;
    const kiln__qlayout *L = &b->L;
    double tamax = 0;
    for (int64_t i = 0; i < L->rows * L->k; i++)
        tamax = fmax(tamax, fabs(x[i]));
    if (L->fmt == KILN_QF_NVFP4 && tamax > 0)
        bad += fabs(b->ts - tamax / 2688.0) > 1e-6 * b->ts;
    if (L->fmt == KILN_QF_FP8)
        bad += fabs(b->ts - (tamax > 0 ? tamax / 448.0 : 1.0)) > 1e-6 * b->ts;
    for (int64_t r = 0; r < L->rows; r++)
        for (int64_t bk = 0; bk < L->nblk && L->fmt != KILN_QF_INT8_TENSOR && L->fmt != KILN_QF_FP8; bk++) {
            double amax = 0;
            for (int64_t i = bk * L->block; i < L->k && i < (bk + 1) * L->block; i++)
                amax = fmax(amax, fabs(x[r * L->k + i]));
            double S = kiln__qblock_scale(L, b->scales, b->ts, r, bk), want;
            switch (L->fmt) {
            case KILN_QF_NVFP4:   /* E4M3 rounding: within 1/16 relative of amax/6 (or its subnormal step) */
                want = amax / 6;
                bad += fabs(S - want) > want / 16 + ldexp(1, -10) * b->ts;
                break;
            case KILN_QF_MXFP4:
                want = amax > 0 ? ldexp(1.0, (int)floor(log2(amax)) - 2) : ldexp(1.0, -127);
                bad += S != want;
                break;
            default:
                want = amax > 0 ? amax / (L->fmt == KILN_QF_INT4 ? 7 : 127) : 1.0;
                bad += fabs(S - want) > want * (L->scale_dt == KILN_DT_FLOAT16 ? 1.0 / 2048 : 1e-7);
                break;
            }
        }
    return bad;
}

static void test_block_bounds(void)
{
    static const int64_t ks[] = {1, 2, 15, 16, 17, 31, 32, 33, 64, 100, 129};
    static const struct { kiln__qfmt fmt; int64_t block; kiln_dtype sdt; } cfg[] = {
        {KILN_QF_NVFP4, 0, 0}, {KILN_QF_MXFP4, 0, 0}, {KILN_QF_INT4, 32, KILN_DT_FLOAT16},
        {KILN_QF_INT4, 64, KILN_DT_FLOAT32}, {KILN_QF_INT4, 128, KILN_DT_FLOAT16}, {KILN_QF_INT4, 7, KILN_DT_FLOAT32},
        {KILN_QF_INT8_CHANNEL, 0, 0}, {KILN_QF_INT8_TENSOR, 0, 0}, {KILN_QF_FP8, 0, 0},
    };
    unsigned long long seed = 777;
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (int dist = 0; dist < 2; dist++) {
            int64_t rows = 3, k = ks[ki];
            float *x = malloc(sizeof(float) * (size_t)(rows * k));
            for (int64_t i = 0; i < rows * k; i++)   /* uniform, or a wide dynamic range */
                x[i] = dist ? test_randf(&seed) * ldexpf(1, (int)(test_rng(&seed) % 24) - 12) : test_randf(&seed) * 3;
            for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
                qbuf b;
                CHECK(qrun(&b, cfg[c].fmt, rows, k, cfg[c].block, cfg[c].sdt, x, 0.01f) == KILN_OK);
                int e = check_error_bound(&b, x), s = check_scales(&b, x);
                CHECK_MSG(e == 0 && s == 0, "fmt %d block %lld k %lld dist %d: %d errors over bound, %d bad scales",
                          (int)cfg[c].fmt, (long long)b.L.block, (long long)k, dist, e, s);
                if ((k & 1) && cfg[c].fmt != KILN_QF_INT8_CHANNEL && cfg[c].fmt != KILN_QF_INT8_TENSOR &&
                    cfg[c].fmt != KILN_QF_FP8)   /* 4-bit, odd k: padding nibble 0 */
                    for (int64_t r = 0; r < rows; r++)
                        CHECK((b.data[r * b.L.row_bytes + b.L.row_bytes - 1] >> 4) == 0);
                qfree(&b);
            }
            free(x);
        }
}

/* values on the grid of their block come back bit-exact */
static void test_block_exact(void)
{
    static const float fp4[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    unsigned long long seed = 99;
    enum { R = 4, K = 45 };   /* 3 NVFP4 blocks (last partial), 2 MXFP4 blocks (last partial) */
    float x[R * K];
    qbuf b;
    /* NVFP4: tensor amax 6*448*2^-3 gives tensor scale 2^-3; block scales d*2^-3 with d in E4M3 */
    for (int r = 0; r < R; r++)
        for (int bk = 0; bk < 3; bk++) {
            float d = (r == 0 && bk == 0) ? 448 : kiln__fp8_to_f32(KILN_DT_FP8E4M3, (uint8_t)(8 + test_rng(&seed) % 110));
            for (int i = bk * 16; i < K && i < bk * 16 + 16; i++) {
                float c = i == bk * 16 ? 6 : fp4[test_rng(&seed) % 8];
                x[r * K + i] = (test_rng(&seed) & 1 ? -c : c) * d * 0.125f;
            }
        }
    CHECK(qrun(&b, KILN_QF_NVFP4, R, K, 0, 0, x, 0) == KILN_OK && b.ts == 0.125f);
    CHECK(memcmp(b.y, x, sizeof x) == 0);
    qfree(&b);
    /* MXFP4: each block's largest |element| is 4 or 6 times its power-of-two scale */
    for (int r = 0; r < R; r++)
        for (int bk = 0; bk < 2; bk++) {
            int X = (int)(test_rng(&seed) % 60) - 30;
            for (int i = bk * 32; i < K && i < bk * 32 + 32; i++) {
                float c = i == bk * 32 ? (r & 1 ? 4 : 6) : fp4[test_rng(&seed) % 8];
                x[r * K + i] = ldexpf(test_rng(&seed) & 1 ? -c : c, X);
            }
        }
    CHECK(qrun(&b, KILN_QF_MXFP4, R, K, 0, 0, x, 0) == KILN_OK);
    CHECK(memcmp(b.y, x, sizeof x) == 0);
    qfree(&b);
    /* INT4 (FP16 scale) and INT8 per-channel: q*s with an exactly representable s and max |q| */
    for (int fmt = 0; fmt < 2; fmt++) {
        int qmax = fmt ? 127 : 7;
        int64_t block = fmt ? K : 16;
        for (int r = 0; r < R; r++) {
            float s = 0;
            for (int i = 0; i < K; i++) {
                if (i % block == 0)
                    s = kiln__f16_to_f32((uint16_t)(0x1000 + test_rng(&seed) % 0x4000));
                int q = i % block == 0 ? qmax : (int)(test_rng(&seed) % (2 * qmax + 1)) - qmax;
                x[r * K + i] = (float)q * s;
            }
        }
        CHECK(qrun(&b, fmt ? KILN_QF_INT8_CHANNEL : KILN_QF_INT4, R, K, block, KILN_DT_FLOAT16, x, 0) == KILN_OK);
        CHECK_MSG(memcmp(b.y, x, sizeof x) == 0, "%s exact", fmt ? "int8" : "int4");
        qfree(&b);
    }
    /* INT8 per-tensor: multiples of the given scale, including the range ends */
    for (int i = 0; i < R * K; i++)
        x[i] = (float)((int)(test_rng(&seed) % 256) - 128) * 0.375f;
    x[0] = -128 * 0.375f, x[1] = 127 * 0.375f;
    CHECK(qrun(&b, KILN_QF_INT8_TENSOR, R, K, 0, 0, x, 0.375f) == KILN_OK);
    CHECK(memcmp(b.y, x, sizeof x) == 0);
    qfree(&b);
}

/* partial last block gets its own scale; zero blocks; NaN / Inf poison only their block */
static void test_block_edges(void)
{
    enum { K = 40 };   /* NVFP4 blocks 16+16+8, MXFP4 32+8, INT4/32 32+8 */
    float x[2 * K];
    for (int i = 0; i < 2 * K; i++)
        x[i] = i < 32 ? 1000.0f + (float)i : (i < K ? 0.001f * (float)(i - 31) : 0.0f);   /* row 1 all zero */
    static const kiln__qfmt fmts[] = {KILN_QF_NVFP4, KILN_QF_MXFP4, KILN_QF_INT4, KILN_QF_INT8_CHANNEL};
    for (int f = 0; f < 4; f++) {
        qbuf b;
        CHECK(qrun(&b, fmts[f], 2, K, 32, KILN_DT_FLOAT16, x, 0) == KILN_OK);
        if (fmts[f] != KILN_QF_INT8_CHANNEL)   /* the tail of row 0 is accurate relative to itself */
            for (int i = 32; i < K; i++)
                CHECK_MSG(fabsf(b.y[i] - x[i]) <= 0.26f * x[i], "fmt %d tail %d: %g vs %g", f, i, (double)b.y[i],
                          (double)x[i]);
        for (int i = K; i < 2 * K; i++)
            CHECK(b.y[i] == 0 && !signbit(b.y[i]));
        for (int64_t bk = 0; bk < b.L.nblk; bk++) {
            float S = kiln__qblock_scale(&b.L, b.scales, b.ts, 1, bk);
            CHECK_MSG(fmts[f] == KILN_QF_NVFP4 ? S == 0 : fmts[f] == KILN_QF_MXFP4 ? S == ldexpf(1, -127) : S == 1,
                      "zero block scale %g (fmt %d)", (double)S, f);
        }
        for (size_t i = 0; i < b.L.data_bytes / 2; i++)
            CHECK(b.data[b.L.data_bytes / 2 + i] == 0);
        qfree(&b);
    }
    /* NaN in block 0 of row 0, +Inf in block 0 of row 1: those blocks decode NaN, the rest finite */
    float z[2 * K];
    unsigned long long seed = 5;
    for (int i = 0; i < 2 * K; i++)
        z[i] = test_randf(&seed);
    z[3] = NAN, z[K + 5] = INFINITY;
    for (int f = 0; f < 4; f++) {
        qbuf b;
        CHECK(qrun(&b, fmts[f], 2, K, 16, KILN_DT_FLOAT32, z, 0) == KILN_OK);
        CHECK(isfinite(b.ts));
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < K; i++) {
                bool poisoned = i < b.L.block;
                CHECK_MSG(poisoned ? isnan(b.y[r * K + i]) : fabsf(b.y[r * K + i] - z[r * K + i]) < 0.5f,
                          "fmt %d r %d i %d: %g", f, r, i, (double)b.y[r * K + i]);
            }
        qfree(&b);
    }
    /* INT8 per-tensor: NaN -> 0, +-Inf and overflow saturate to the int8 range */
    float t[5] = {NAN, INFINITY, -INFINITY, 1e9f, -1e9f};
    qbuf b;
    CHECK(qrun(&b, KILN_QF_INT8_TENSOR, 1, 5, 0, 0, t, 2.0f) == KILN_OK);
    int8_t *q = (int8_t *)b.data;
    CHECK(q[0] == 0 && q[1] == 127 && q[2] == -128 && q[3] == 127 && q[4] == -128);
    qfree(&b);
    /* packed nibble order: element 2i in the low nibble of byte i */
    float p[3] = {1.0f, -6.0f, 0.5f};
    CHECK(qrun(&b, KILN_QF_MXFP4, 1, 3, 0, 0, p, 0) == KILN_OK);
    CHECK(b.data[0] == ((0xf << 4) | 0x2) && b.data[1] == 0x01 && ((uint8_t *)b.scales)[0] == 127);
    qfree(&b);
    CHECK(qrun(&b, KILN_QF_INT4, 1, 3, 4, KILN_DT_FLOAT32, (float[]){7, -7, -1}, 0) == KILN_OK);
    CHECK(b.data[0] == 0x97 && b.data[1] == 0x0f && ((float *)b.scales)[0] == 1.0f);
    qfree(&b);
}

static void test_block_sizes_and_errors(void)
{
    const size_t n = 2048 * 2048, rows = 2048;
    kiln__qlayout L;
    CHECK(kiln__qlayout_init(&L, KILN_QF_NVFP4, 2048, 2048, 0, 0) == KILN_OK);
    CHECK(L.total_bytes == n / 2 + n / 16 + 4);   /* 0.5 B/elt + 1 B per 16 + FP32 tensor scale */
    CHECK(kiln__qlayout_init(&L, KILN_QF_MXFP4, 2048, 2048, 0, 0) == KILN_OK);
    CHECK(L.total_bytes == n / 2 + n / 32);
    CHECK(kiln__qlayout_init(&L, KILN_QF_INT4, 2048, 2048, 32, KILN_DT_FLOAT16) == KILN_OK);
    CHECK(L.total_bytes == n / 2 + n / 32 * 2);
    CHECK(kiln__qlayout_init(&L, KILN_QF_INT4, 2048, 2048, 128, KILN_DT_FLOAT32) == KILN_OK);
    CHECK(L.total_bytes == n / 2 + n / 128 * 4);
    CHECK(kiln__qlayout_init(&L, KILN_QF_INT8_CHANNEL, 2048, 2048, 0, 0) == KILN_OK);
    CHECK(L.total_bytes == n + rows * 4);
    CHECK(kiln__qlayout_init(&L, KILN_QF_INT8_TENSOR, 2048, 2048, 0, 0) == KILN_OK);
    CHECK(L.total_bytes == n + 4 && L.scale_bytes == 0);
    CHECK(kiln__qlayout_init(&L, KILN_QF_NVFP4, 3, 17, 0, 0) == KILN_OK);   /* partial blocks round up */
    CHECK(L.row_bytes == 9 && L.nblk == 2 && L.total_bytes == 27 + 6 + 4);
    CHECK(kiln__qlayout_init(&L, KILN_QF_INT4, 2, 8, 0, KILN_DT_FLOAT16) == KILN_ERR_INVALID_ARG);
    CHECK(kiln__qlayout_init(&L, KILN_QF_INT4, 2, 8, 4, KILN_DT_INT8) == KILN_ERR_DTYPE);
    CHECK(kiln__qlayout_init(&L, KILN_QF_NVFP4, -1, 8, 0, 0) == KILN_ERR_INVALID_ARG);
    CHECK(kiln__qlayout_init(&L, KILN_QF_INT8_CHANNEL, INT64_MAX / 2, INT64_MAX / 2, 0, 0) == KILN_ERR_INVALID_ARG);
    /* rows*k past INT64_MAX although the packed bytes would fit (4-bit) */
    CHECK(kiln__qlayout_init(&L, KILN_QF_NVFP4, 3ll << 30, 1ll << 32, 0, 0) == KILN_ERR_INVALID_ARG);
    CHECK(kiln__qlayout_init(&L, (kiln__qfmt)99, 1, 1, 0, 0) == KILN_ERR_INVALID_ARG);
    float x[4] = {1, 2, 3, 4};
    qbuf b;
    CHECK(qrun(&b, KILN_QF_INT8_TENSOR, 1, 4, 0, 0, x, 0.0f) == KILN_ERR_INVALID_ARG);
    qfree(&b);
    CHECK(qrun(&b, KILN_QF_INT8_TENSOR, 1, 4, 0, 0, x, NAN) == KILN_ERR_INVALID_ARG);
    qfree(&b);
    CHECK(qrun(&b, KILN_QF_NVFP4, 0, 0, 0, 0, x, 0) == KILN_OK && b.L.total_bytes == 4);
    qfree(&b);
}

/* FP8 per-tensor weights; round-to-nearest-even ties of every block format (elements and
 * scales); subnormal E4M3 block scales; the E8M0 clamp; span dequantization */
static void test_block_fp8_ties_spans(void)
{
    kiln__qlayout L;
    CHECK(kiln__qlayout_init(&L, KILN_QF_FP8, 2048, 2048, 0, 0) == KILN_OK);
    CHECK(L.total_bytes == 2048u * 2048 + 4 && L.scale_bytes == 0 && L.row_bytes == 2048);
    qbuf b;
    /* FP8: values on the E4M3 grid times 2^-3 with amax 448 * 2^-3 come back exact */
    float x[64];
    for (int i = 0; i < 64; i++)
        x[i] = kiln__fp8_to_f32(KILN_DT_FP8E4M3, (uint8_t)(i * 4 + (i & 1) * 128)) * 0.125f;
    x[63] = 448 * 0.125f;
    CHECK(qrun(&b, KILN_QF_FP8, 4, 16, 0, 0, x, 0) == KILN_OK && b.ts == 0.125f);
    CHECK(memcmp(b.y, x, sizeof x) == 0);
    qfree(&b);
    /* FP8: NaN stays NaN, +-Inf and overflow saturate (not counted in amax), -0 kept, zero tensor */
    float f[6] = {NAN, INFINITY, -INFINITY, -0.0f, 448.0f, 1.0f};
    CHECK(qrun(&b, KILN_QF_FP8, 1, 6, 0, 0, f, 0) == KILN_OK && b.ts == 1.0f);
    CHECK(isnan(b.y[0]) && b.y[1] == 448 && b.y[2] == -448 && b.y[3] == 0 && signbit(b.y[3]) && b.y[5] == 1);
    qfree(&b);
    float z[3] = {0, 0, 0};
    CHECK(qrun(&b, KILN_QF_FP8, 1, 3, 0, 0, z, 0) == KILN_OK && b.ts == 1.0f && b.y[0] == 0);
    qfree(&b);
    /* FP8: ties of x / ts (ts = 1): 1.0625 -> 1 (even), 1.1875 -> 1.25, 464 -> 448 */
    float t8[4] = {1.0625f, 1.1875f, 448, -1.0625f};
    CHECK(qrun(&b, KILN_QF_FP8, 1, 4, 0, 0, t8, 0) == KILN_OK && b.ts == 1.0f);
    CHECK(b.y[0] == 1.0f && b.y[1] == 1.25f && b.y[3] == -1.0f);
    qfree(&b);
    /* INT4 (scale 1) and INT8 per-tensor: integer ties to even, signed */
    float t4[6] = {7, 2.5f, -2.5f, 3.5f, 0.5f, -1.5f};
    CHECK(qrun(&b, KILN_QF_INT4, 1, 6, 8, KILN_DT_FLOAT32, t4, 0) == KILN_OK);
    CHECK(b.y[1] == 2 && b.y[2] == -2 && b.y[3] == 4 && b.y[4] == 0 && b.y[5] == -2);
    qfree(&b);
    CHECK(qrun(&b, KILN_QF_INT8_TENSOR, 1, 6, 0, 0, t4, 1.0f) == KILN_OK);
    CHECK(b.y[1] == 2 && b.y[2] == -2 && b.y[3] == 4 && b.y[4] == 0 && b.y[5] == -2);
    qfree(&b);
    /* MXFP4: amax 6 -> X = 0, element ties 2.5 -> 2, 3.5 -> 4, 5 -> 4, 0.25 -> 0, 0.75 -> 1 */
    float tm[6] = {6, 2.5f, 3.5f, 5, 0.25f, 0.75f};
    CHECK(qrun(&b, KILN_QF_MXFP4, 1, 6, 0, 0, tm, 0) == KILN_OK && ((uint8_t *)b.scales)[0] == 127);
    CHECK(b.y[1] == 2 && b.y[2] == 4 && b.y[3] == 4 && b.y[4] == 0 && b.y[5] == 1);
    qfree(&b);
    /* MXFP4: a block below 2^-125 clamps its exponent at -127 (code 0) and rounds to zero */
    float tiny[2] = {ldexpf(1, -140), -ldexpf(1, -141)};
    CHECK(qrun(&b, KILN_QF_MXFP4, 1, 2, 0, 0, tiny, 0) == KILN_OK && ((uint8_t *)b.scales)[0] == 0);
    CHECK(b.y[0] == 0 && b.y[1] == 0 && signbit(b.y[1]));
    qfree(&b);
    /* NVFP4 with tensor scale 1 (amax 2688): block scales at E4M3 ties round to even
     * (6.375 / 6 = 1.0625 -> 1.0 = 0x38; 7.125 / 6 = 1.1875 -> 1.25 = 0x3a); subnormal block
     * scales (6 * 2^-8 -> 2^-8 = 0x02, exact); a block whose scale underflows is zero */
    float tn[5 * 16] = {0};
    tn[0] = 2688, tn[16] = 6.375f, tn[32] = 7.125f, tn[48] = 6 * ldexpf(1, -8), tn[49] = -3 * ldexpf(1, -8);
    tn[64] = 6 * ldexpf(1, -11);
    CHECK(qrun(&b, KILN_QF_NVFP4, 1, 80, 0, 0, tn, 0) == KILN_OK && b.ts == 1.0f);
    const uint8_t *sc = b.scales;
    CHECK(sc[0] == 0x7e && sc[1] == 0x38 && sc[2] == 0x3a && sc[3] == 0x02 && sc[4] == 0x00);
    CHECK(b.y[0] == 2688 && b.y[16] == 6 && b.y[32] == 7.5f && b.y[48] == tn[48] && b.y[49] == tn[49] && b.y[64] == 0);
    qfree(&b);
    /* kiln__qunpack_span equals the matching slice of the full dequantization, any range */
    unsigned long long seed = 31;
    static const kiln__qfmt fmts[] = {KILN_QF_NVFP4, KILN_QF_MXFP4, KILN_QF_INT4, KILN_QF_INT8_CHANNEL,
                                      KILN_QF_INT8_TENSOR, KILN_QF_FP8};
    enum { R = 3, K = 77 };
    float w[R * K], y[K];
    for (int i = 0; i < R * K; i++)
        w[i] = test_randf(&seed) * 4;
    for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++) {
        CHECK(qrun(&b, fmts[fi], R, K, 32, KILN_DT_FLOAT16, w, 0.05f) == KILN_OK);
        int bad = 0;
        for (int t = 0; t < 200; t++) {
            int64_t r = (int64_t)(test_rng(&seed) % R), k0 = (int64_t)(test_rng(&seed) % K);
            int64_t k1 = k0 + (int64_t)(test_rng(&seed) % (uint64_t)(K - k0 + 1));
            kiln__qunpack_span(&b.L, b.data, b.scales, b.ts, r, k0, k1, y);
            bad += memcmp(y, b.y + r * K + k0, sizeof(float) * (size_t)(k1 - k0)) != 0;
        }
        CHECK_MSG(bad == 0, "fmt %d: %d spans differ", (int)fmts[fi], bad);
        qfree(&b);
    }
    /* the layer formats' names and layouts */
    kiln__qfmt q;
    CHECK(kiln__lowbit_parse("fp4", &q) && q == KILN_QF_NVFP4 && kiln__lowbit_parse("mxfp4", &q) && q == KILN_QF_MXFP4);
    CHECK(!kiln__lowbit_parse("int8", &q) && !kiln__lowbit_parse(NULL, &q));
    CHECK(!strcmp(kiln__lowbit_name(KILN_QF_NVFP4), "nvfp4") && kiln__lowbit_name(KILN_QF_INT8_TENSOR) == NULL);
    CHECK(kiln__lowbit_layout(&L, KILN_QF_INT4, 5, 70) == KILN_OK && L.block == KILN_INT4_BLOCK &&
          L.scale_dt == KILN_DT_FLOAT16 && L.nblk == 3);
    CHECK(kiln__lowbit_layout(&L, KILN_QF_INT8_CHANNEL, 5, 70) == KILN_ERR_INVALID_ARG);
}

/* kiln__set_i64 / kiln__set_f64 with a dtype that has no numeric element store nothing and return (they called each
 * other for ever: a malformed node's undefined dtype hung the process); integer and float types round-trip */
static void test_set_any(void)
{
    uint8_t buf[8];
    memset(buf, 0xA5, sizeof buf);
    kiln__set_i64(KILN_DT_UNDEFINED, buf, 0, 5);
    kiln__set_f64(KILN_DT_UNDEFINED, buf, 0, 5.0);
    kiln__set_f64(KILN_DT_STRING, buf, 0, 5.0);
    bool kept = true;
    for (size_t i = 0; i < sizeof buf; i++)
        kept &= buf[i] == 0xA5;
    CHECK_MSG(kept, "a store of an undefined dtype wrote bytes");
    kiln__set_f64(KILN_DT_INT16, buf, 1, -7.9);
    CHECK(kiln__get_i64(KILN_DT_INT16, buf, 1) == -7);
    kiln__set_i64(KILN_DT_FLOAT32, buf, 1, 12);
    CHECK(kiln__get_f64(KILN_DT_FLOAT32, buf, 1) == 12.0);
}

int main(void)
{
    test_set_any();
    test_known_values();
    for (size_t i = 0; i < sizeof FMTS / sizeof *FMTS; i++) {
        test_all_codes(&FMTS[i]);
        test_boundaries(&FMTS[i]);
    }
    test_e8m0();
    test_arrays();
    test_block_bounds();
    test_block_exact();
    test_block_edges();
    test_block_sizes_and_errors();
    test_block_fp8_ties_spans();
    return TEST_SUMMARY();
}
