/* Block-quantized row-major matrices: NVFP4, MXFP4, INT4 weight-only, INT8 per-channel and
 * per-tensor. Scale recipes, packed layouts and the handling of zero blocks, partial last blocks
 * and non-finite inputs are specified in docs/PRECISION.md ("Block formats"). */
#include "core.h"
#include <float.h>
#include <math.h>
#include <pthread.h>

#define NVFP4_BLOCK 16
#define MXFP4_BLOCK 32
#define FP4_MAX 6.0f
#define E4M3_MAX 448.0f
#define E4M3_NAN 0x7fu
#define E8M0_NAN 0xffu
#define INT4_QMAX 7
#define INT8_QMAX 127

static bool mul_ok(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

kiln_status kiln__qlayout_init(kiln__qlayout *L, kiln__qfmt fmt, int64_t rows, int64_t k, int64_t block,
                               kiln_dtype scale_dt)
{
    memset(L, 0, sizeof *L);
    if (rows < 0 || k < 0)
        return kiln__err(KILN_ERR_INVALID_ARG, "quantized matrix: negative shape %lld x %lld", (long long)rows,
                         (long long)k);
    L->fmt = fmt;
    L->rows = rows;
    L->k = k;
    size_t ssize = 4, tensor_bytes = 0;
    switch (fmt) {
    case KILN_QF_NVFP4:
        L->block = NVFP4_BLOCK, L->scale_dt = KILN_DT_FP8E4M3, ssize = 1, tensor_bytes = 4;
        break;
    case KILN_QF_MXFP4:
        L->block = MXFP4_BLOCK, L->scale_dt = KILN_DT_UINT8, ssize = 1;
        break;
    case KILN_QF_INT4:
        if (block < 1)
            return kiln__err(KILN_ERR_INVALID_ARG, "INT4 block size must be >= 1, got %lld", (long long)block);
        if (scale_dt != KILN_DT_FLOAT16 && scale_dt != KILN_DT_FLOAT32)
            return kiln__err(KILN_ERR_DTYPE, "INT4 scales must be float16 or float32, got %s",
                             kiln_dtype_name(scale_dt));
        L->block = block, L->scale_dt = scale_dt, ssize = kiln_dtype_size(scale_dt);
        break;
    case KILN_QF_INT8_CHANNEL:
    case KILN_QF_INT8_TENSOR:
    case KILN_QF_FP8:
        L->block = k > 0 ? k : 1, L->scale_dt = KILN_DT_FLOAT32;
        tensor_bytes = fmt == KILN_QF_INT8_CHANNEL ? 0 : 4;
        break;
    default:
        return kiln__err(KILN_ERR_INVALID_ARG, "unknown quantized format %d", (int)fmt);
    }
    bool four = fmt == KILN_QF_NVFP4 || fmt == KILN_QF_MXFP4 || fmt == KILN_QF_INT4;
    L->nblk = (k + L->block - 1) / L->block;
    L->row_bytes = four ? (k + 1) / 2 : k;
    size_t nscales = 0, nelem;
    bool ok = mul_ok((size_t)rows, (size_t)k, &nelem) && nelem <= (size_t)INT64_MAX &&
              mul_ok((size_t)rows, (size_t)L->row_bytes, &L->data_bytes);
    if (fmt != KILN_QF_INT8_TENSOR && fmt != KILN_QF_FP8)
        ok = ok && mul_ok((size_t)rows, (size_t)L->nblk, &nscales) && mul_ok(nscales, ssize, &L->scale_bytes);
    ok = ok && !__builtin_add_overflow(L->data_bytes, L->scale_bytes, &L->total_bytes) &&
         !__builtin_add_overflow(L->total_bytes, tensor_bytes, &L->total_bytes);
    if (!ok)
        return kiln__err(KILN_ERR_INVALID_ARG, "quantized matrix %lld x %lld is too large", (long long)rows,
                         (long long)k);
    return KILN_OK;
}

/* ---- helpers */

static inline void nib_put(uint8_t *row, int64_t i, uint8_t code)
{
    row[i >> 1] |= (uint8_t)((code & 0xfu) << ((i & 1) * 4));
}

static inline uint8_t nib_get(const uint8_t *row, int64_t i)
{
    return (row[i >> 1] >> ((i & 1) * 4)) & 0xfu;
}

/* max |x| over n values; *finite is false when any value is NaN or +-Inf */
static float block_amax(const float *x, int64_t n, bool *finite)
{
    float m = 0;
    *finite = true;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= FLT_MAX))
            *finite = false;
        else if (a > m)
            m = a;
    }
    return m;
}

/* round to nearest even and clamp to [lo, hi]; NaN -> 0 */
static inline int32_t sat_rne(float v, int32_t lo, int32_t hi)
{
    if (v != v)
        return 0;
    if (v <= (float)lo)
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int32_t)rintf(v);
}

static float load_scale(kiln_dtype dt, const void *scales, int64_t i)
{
    switch (dt) {
    case KILN_DT_FP8E4M3: return kiln__fp8_to_f32(KILN_DT_FP8E4M3, ((const uint8_t *)scales)[i]);
    case KILN_DT_UINT8: return kiln__e8m0_to_f32(((const uint8_t *)scales)[i]);
    case KILN_DT_FLOAT16: return kiln__f16_to_f32(((const uint16_t *)scales)[i]);
    default: return ((const float *)scales)[i];
    }
}

/* Stores the symmetric integer scale amax/qmax (FP16 saturates at 65504); a block that is all
 * zero (or whose scale underflows to 0) gets scale 1; a non-finite block gets NaN. Returns the
 * stored (decoded) scale, which is what quantization divides by. */
static float int_scale_store(kiln_dtype dt, void *scales, int64_t i, float amax, bool finite, int qmax)
{
    float s = finite ? amax / (float)qmax : NAN;
    if (dt == KILN_DT_FLOAT16) {
        uint16_t h = kiln__f32_to_f16(s);
        if ((h & 0x7fff) == 0x7c00)
            h = 0x7bff;   /* 65504 */
        if ((h & 0x7fff) == 0)
            h = 0x3c00;   /* 1.0 */
        ((uint16_t *)scales)[i] = h;
    } else {
        ((float *)scales)[i] = s == 0 ? 1.0f : s;
    }
    return load_scale(dt, scales, i);
}

/* ---- pack */

static void pack_nvfp4_row(const kiln__qlayout *L, const float *x, uint8_t *row, uint8_t *sc, float ts)
{
    for (int64_t b = 0; b < L->nblk; b++) {
        int64_t lo = b * L->block, n = L->k - lo < L->block ? L->k - lo : L->block;
        bool finite;
        float amax = block_amax(x + lo, n, &finite);
        if (!finite) {
            sc[b] = E4M3_NAN;
            continue;
        }
        sc[b] = kiln__f32_to_fp8(KILN_DT_FP8E4M3, amax / FP4_MAX / ts, true);
        float S = kiln__fp8_to_f32(KILN_DT_FP8E4M3, sc[b]) * ts;
        if (S > 0)
            for (int64_t i = 0; i < n; i++)
                nib_put(row, lo + i, kiln__f32_to_fp4(x[lo + i] / S));
    }
}

static void pack_mxfp4_row(const kiln__qlayout *L, const float *x, uint8_t *row, uint8_t *sc)
{
    for (int64_t b = 0; b < L->nblk; b++) {
        int64_t lo = b * L->block, n = L->k - lo < L->block ? L->k - lo : L->block;
        bool finite;
        float amax = block_amax(x + lo, n, &finite);
        if (!finite) {
            sc[b] = E8M0_NAN;
            continue;
        }
        if (amax == 0) {
            sc[b] = 0;
            continue;
        }
        int e;
        frexpf(amax, &e);
        int X = (e - 1) - 2;   /* floor(log2(amax)) - emax(E2M1) */
        X = X < -127 ? -127 : X;
        sc[b] = (uint8_t)(X + 127);
        for (int64_t i = 0; i < n; i++)
            nib_put(row, lo + i, kiln__f32_to_fp4(ldexpf(x[lo + i], -X)));
    }
}

static void pack_int4_row(const kiln__qlayout *L, const float *x, uint8_t *row, void *scales, int64_t r)
{
    for (int64_t b = 0; b < L->nblk; b++) {
        int64_t lo = b * L->block, n = L->k - lo < L->block ? L->k - lo : L->block;
        bool finite;
        float amax = block_amax(x + lo, n, &finite);
        float s = int_scale_store(L->scale_dt, scales, r * L->nblk + b, amax, finite, INT4_QMAX);
        if (finite)
            for (int64_t i = 0; i < n; i++)
                nib_put(row, lo + i, (uint8_t)sat_rne(x[lo + i] / s, -INT4_QMAX, INT4_QMAX));
    }
}

static void pack_int8_row(const float *x, int64_t k, int8_t *row, float s, int lo, int hi)
{
    for (int64_t i = 0; i < k; i++)
        row[i] = (int8_t)sat_rne(x[i] / s, lo, hi);
}

kiln_status kiln__qpack(const kiln__qlayout *L, const float *x, uint8_t *data, void *scales, float *tensor_scale)
{
    float ts = 1.0f;
    if (L->fmt == KILN_QF_INT8_TENSOR) {
        ts = tensor_scale ? *tensor_scale : NAN;
        if (!(ts > 0 && ts <= FLT_MAX))
            return kiln__err(KILN_ERR_INVALID_ARG, "INT8 per-tensor scale must be finite and > 0, got %g", (double)ts);
    }
    if (L->fmt == KILN_QF_NVFP4 || L->fmt == KILN_QF_FP8) {
        bool finite;
        float amax = block_amax(x, L->rows * L->k, &finite);
        ts = amax / (L->fmt == KILN_QF_FP8 ? E4M3_MAX : FP4_MAX * E4M3_MAX);
        if (!(ts > 0))
            ts = 1.0f;   /* all-zero (or all non-finite) tensor */
        if (tensor_scale)
            *tensor_scale = ts;
    }
    memset(data, 0, L->data_bytes);
    for (int64_t r = 0; r < L->rows; r++) {
        const float *xr = x + r * L->k;
        uint8_t *row = data + r * L->row_bytes;
        switch (L->fmt) {
        case KILN_QF_NVFP4: pack_nvfp4_row(L, xr, row, (uint8_t *)scales + r * L->nblk, ts); break;
        case KILN_QF_MXFP4: pack_mxfp4_row(L, xr, row, (uint8_t *)scales + r * L->nblk); break;
        case KILN_QF_INT4: pack_int4_row(L, xr, row, scales, r); break;
        case KILN_QF_INT8_CHANNEL: {
            bool finite;
            float amax = block_amax(xr, L->k, &finite);
            float s = int_scale_store(KILN_DT_FLOAT32, scales, r, amax, finite, INT8_QMAX);
            if (finite)
                pack_int8_row(xr, L->k, (int8_t *)row, s, -INT8_QMAX, INT8_QMAX);
            break;
        }
        case KILN_QF_INT8_TENSOR: pack_int8_row(xr, L->k, (int8_t *)row, ts, -128, 127); break;
        case KILN_QF_FP8:
            for (int64_t i = 0; i < L->k; i++)
                row[i] = kiln__f32_to_fp8(KILN_DT_FP8E4M3, xr[i] / ts, true);
            break;
        }
    }
    return KILN_OK;
}

/* ---- unpack */

float kiln__qblock_scale(const kiln__qlayout *L, const void *scales, float tensor_scale, int64_t r, int64_t b)
{
    switch (L->fmt) {
    case KILN_QF_NVFP4: return load_scale(L->scale_dt, scales, r * L->nblk + b) * tensor_scale;
    case KILN_QF_INT8_TENSOR:
    case KILN_QF_FP8: return tensor_scale;
    default: return load_scale(L->scale_dt, scales, r * L->nblk + b);
    }
}

/* The unscaled element values of each 4-bit / 8-bit code, built once. */
static float lut_fp4[16], lut_int4[16], lut_fp8[256];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void)
{
    for (int c = 0; c < 16; c++) {
        lut_fp4[c] = kiln__fp4_to_f32((uint8_t)c);
        lut_int4[c] = (float)((c ^ 8) - 8);   /* sign-extended nibble */
    }
    for (int c = 0; c < 256; c++)
        lut_fp8[c] = kiln__fp8_to_f32(KILN_DT_FP8E4M3, (uint8_t)c);
}

void kiln__qunpack_span(const kiln__qlayout *L, const uint8_t *data, const void *scales, float tensor_scale, int64_t r,
                        int64_t k0, int64_t k1, float *y)
{
    pthread_once(&lut_once, lut_init);
    const uint8_t *row = data + r * L->row_bytes;
    bool four = L->fmt == KILN_QF_NVFP4 || L->fmt == KILN_QF_MXFP4 || L->fmt == KILN_QF_INT4;
    const float *lut = L->fmt == KILN_QF_INT4 ? lut_int4 : four ? lut_fp4 : lut_fp8;
    for (int64_t i = k0; i < k1;) {
        int64_t b = i / L->block, end = (b + 1) * L->block < k1 ? (b + 1) * L->block : k1;
        float S = kiln__qblock_scale(L, scales, tensor_scale, r, b);
        if (four)
            for (; i < end; i++)
                y[i - k0] = lut[nib_get(row, i)] * S;
        else if (L->fmt == KILN_QF_FP8)
            for (; i < end; i++)
                y[i - k0] = lut[row[i]] * S;
        else
            for (; i < end; i++)
                y[i - k0] = (float)(int8_t)row[i] * S;
    }
}

void kiln__qunpack_rows(const kiln__qlayout *L, const uint8_t *data, const void *scales, float tensor_scale,
                        int64_t r0, int64_t r1, float *y)
{
    for (int64_t r = r0; r < r1; r++, y += L->k)
        kiln__qunpack_span(L, data, scales, tensor_scale, r, 0, L->k, y);
}

void kiln__qunpack(const kiln__qlayout *L, const uint8_t *data, const void *scales, float tensor_scale, float *y)
{
    kiln__qunpack_rows(L, data, scales, tensor_scale, 0, L->rows, y);
}

/* ---- layers with reduced-precision weights */

static const struct { const char *name; kiln__qfmt fmt; } lowbit_names[] = {
    {"fp8", KILN_QF_FP8}, {"nvfp4", KILN_QF_NVFP4}, {"fp4", KILN_QF_NVFP4}, {"mxfp4", KILN_QF_MXFP4},
    {"int4", KILN_QF_INT4}};

bool kiln__lowbit_parse(const char *name, kiln__qfmt *fmt)
{
    for (size_t i = 0; name && i < sizeof lowbit_names / sizeof lowbit_names[0]; i++)
        if (!strcmp(name, lowbit_names[i].name)) {
            *fmt = lowbit_names[i].fmt;
            return true;
        }
    return false;
}

const char *kiln__lowbit_name(kiln__qfmt fmt)
{
    for (size_t i = 0; i < sizeof lowbit_names / sizeof lowbit_names[0]; i++)
        if (lowbit_names[i].fmt == fmt)
            return lowbit_names[i].name;
    return NULL;
}

kiln_status kiln__lowbit_layout(kiln__qlayout *L, kiln__qfmt fmt, int64_t rows, int64_t k)
{
    if (!kiln__lowbit_name(fmt))
        return kiln__err(KILN_ERR_INVALID_ARG, "format %d is not a layer weight format", (int)fmt);
    return kiln__qlayout_init(L, fmt, rows, k, KILN_INT4_BLOCK, KILN_DT_FLOAT16);
}
