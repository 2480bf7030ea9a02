/* Element types: names, sizes and generic element access (conversions of the reduced-precision
 * formats live in numfmt_float.c). */
#include "core.h"
#include <math.h>

static const struct { const char *name; size_t size; } dt_info[KILN_DT_COUNT] = {
    [KILN_DT_UNDEFINED] = {"undefined", 0}, [KILN_DT_FLOAT32] = {"float32", 4},
    [KILN_DT_UINT8] = {"uint8", 1},         [KILN_DT_INT8] = {"int8", 1},
    [KILN_DT_UINT16] = {"uint16", 2},       [KILN_DT_INT16] = {"int16", 2},
    [KILN_DT_INT32] = {"int32", 4},         [KILN_DT_INT64] = {"int64", 8},
    [KILN_DT_STRING] = {"string", 0},       [KILN_DT_BOOL] = {"bool", 1},
    [KILN_DT_FLOAT16] = {"float16", 2},     [KILN_DT_FLOAT64] = {"float64", 8},
    [KILN_DT_UINT32] = {"uint32", 4},       [KILN_DT_UINT64] = {"uint64", 8},
    [KILN_DT_COMPLEX64] = {"complex64", 0}, [KILN_DT_COMPLEX128] = {"complex128", 0},
    [KILN_DT_BFLOAT16] = {"bfloat16", 2},   [KILN_DT_FP8E4M3] = {"fp8e4m3", 1},
    [KILN_DT_FP8E4M3FNUZ] = {"fp8e4m3fnuz", 1}, [KILN_DT_FP8E5M2] = {"fp8e5m2", 1},
    [KILN_DT_FP8E5M2FNUZ] = {"fp8e5m2fnuz", 1}, [KILN_DT_UINT4] = {"uint4", 0},
    [KILN_DT_INT4] = {"int4", 0},           [KILN_DT_FP4E2M1] = {"fp4e2m1", 0},
};

const char *kiln_dtype_name(kiln_dtype dt)
{
    return ((unsigned)dt < KILN_DT_COUNT) ? dt_info[dt].name : "?";
}

size_t kiln_dtype_size(kiln_dtype dt)
{
    return ((unsigned)dt < KILN_DT_COUNT) ? dt_info[dt].size : 0;
}

bool kiln__dtype_is_float(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_FLOAT32: case KILN_DT_FLOAT16: case KILN_DT_FLOAT64: case KILN_DT_BFLOAT16:
    case KILN_DT_FP8E4M3: case KILN_DT_FP8E4M3FNUZ: case KILN_DT_FP8E5M2:
    case KILN_DT_FP8E5M2FNUZ: case KILN_DT_FP4E2M1:
        return true;
    default:
        return false;
    }
}

bool kiln__dtype_is_int(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_UINT8: case KILN_DT_INT8: case KILN_DT_UINT16: case KILN_DT_INT16:
    case KILN_DT_INT32: case KILN_DT_INT64: case KILN_DT_UINT32: case KILN_DT_UINT64:
        return true;
    default:
        return false;
    }
}

bool kiln__dtype_is_signed(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_INT8: case KILN_DT_INT16: case KILN_DT_INT32: case KILN_DT_INT64:
        return true;
    default:
        return kiln__dtype_is_float(dt);
    }
}

double kiln__get_f64(kiln_dtype dt, const void *d, int64_t i)
{
    switch (dt) {
    case KILN_DT_FLOAT32: return ((const float *)d)[i];
    case KILN_DT_FLOAT64: return ((const double *)d)[i];
    case KILN_DT_FLOAT16: return kiln__f16_to_f32(((const uint16_t *)d)[i]);
    case KILN_DT_BFLOAT16: return kiln__bf16_to_f32(((const uint16_t *)d)[i]);
    case KILN_DT_FP8E4M3: case KILN_DT_FP8E4M3FNUZ: case KILN_DT_FP8E5M2: case KILN_DT_FP8E5M2FNUZ:
        return kiln__fp8_to_f32(dt, ((const uint8_t *)d)[i]);
    case KILN_DT_INT8: return ((const int8_t *)d)[i];
    case KILN_DT_UINT8: return ((const uint8_t *)d)[i];
    case KILN_DT_INT16: return ((const int16_t *)d)[i];
    case KILN_DT_UINT16: return ((const uint16_t *)d)[i];
    case KILN_DT_INT32: return ((const int32_t *)d)[i];
    case KILN_DT_UINT32: return ((const uint32_t *)d)[i];
    case KILN_DT_INT64: return (double)((const int64_t *)d)[i];
    case KILN_DT_UINT64: return (double)((const uint64_t *)d)[i];
    case KILN_DT_BOOL: return ((const uint8_t *)d)[i] ? 1.0 : 0.0;
    default: return 0.0;
    }
}

int64_t kiln__get_i64(kiln_dtype dt, const void *d, int64_t i)
{
    switch (dt) {
    case KILN_DT_INT8: return ((const int8_t *)d)[i];
    case KILN_DT_UINT8: return ((const uint8_t *)d)[i];
    case KILN_DT_INT16: return ((const int16_t *)d)[i];
    case KILN_DT_UINT16: return ((const uint16_t *)d)[i];
    case KILN_DT_INT32: return ((const int32_t *)d)[i];
    case KILN_DT_UINT32: return ((const uint32_t *)d)[i];
    case KILN_DT_INT64: return ((const int64_t *)d)[i];
    case KILN_DT_UINT64: return (int64_t)((const uint64_t *)d)[i];
    case KILN_DT_BOOL: return ((const uint8_t *)d)[i] ? 1 : 0;
    default: {
        double v = kiln__get_f64(dt, d, i);
        if (isnan(v)) return 0;
        if (v >= 9.2233720368547758e18) return INT64_MAX;
        if (v <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)v;
    }
    }
}

void kiln__set_f64(kiln_dtype dt, void *d, int64_t i, double v)
{
    switch (dt) {
    case KILN_DT_FLOAT32: ((float *)d)[i] = (float)v; break;
    case KILN_DT_FLOAT64: ((double *)d)[i] = v; break;
    case KILN_DT_FLOAT16: ((uint16_t *)d)[i] = kiln__f32_to_f16((float)v); break;
    case KILN_DT_BFLOAT16: ((uint16_t *)d)[i] = kiln__f32_to_bf16((float)v); break;
    case KILN_DT_FP8E4M3: case KILN_DT_FP8E4M3FNUZ: case KILN_DT_FP8E5M2: case KILN_DT_FP8E5M2FNUZ:
        ((uint8_t *)d)[i] = kiln__f32_to_fp8(dt, (float)v, true);
        break;
    case KILN_DT_BOOL: ((uint8_t *)d)[i] = v != 0.0; break;
    case KILN_DT_INT8: case KILN_DT_UINT8: case KILN_DT_INT16: case KILN_DT_UINT16: case KILN_DT_INT32:
    case KILN_DT_UINT32: case KILN_DT_INT64: case KILN_DT_UINT64: {
        /* float -> int: truncate toward zero like C casts; NaN -> 0 */
        int64_t iv = 0;
        if (!isnan(v)) {
            if (dt == KILN_DT_UINT64 && v >= 9.2233720368547758e18)
                iv = v >= 1.8446744073709552e19 ? (int64_t)UINT64_MAX : (int64_t)(uint64_t)v;
            else if (v >= 9.2233720368547758e18) iv = INT64_MAX;
            else if (v <= -9.2233720368547758e18) iv = INT64_MIN;
            else iv = (int64_t)v;
        }
        kiln__set_i64(dt, d, i, iv);
        break;
    }
    default: break;   /* no numeric element (undefined, string, 4-bit types): nothing stored -- not a call back into
                       * kiln__set_i64, whose default comes here (the two called each other for ever) */
    }
}

void kiln__set_i64(kiln_dtype dt, void *d, int64_t i, int64_t v)
{
    switch (dt) {
    case KILN_DT_INT8: ((int8_t *)d)[i] = (int8_t)v; break;
    case KILN_DT_UINT8: ((uint8_t *)d)[i] = (uint8_t)v; break;
    case KILN_DT_INT16: ((int16_t *)d)[i] = (int16_t)v; break;
    case KILN_DT_UINT16: ((uint16_t *)d)[i] = (uint16_t)v; break;
    case KILN_DT_INT32: ((int32_t *)d)[i] = (int32_t)v; break;
    case KILN_DT_UINT32: ((uint32_t *)d)[i] = (uint32_t)v; break;
    case KILN_DT_INT64: ((int64_t *)d)[i] = v; break;
    case KILN_DT_UINT64: ((uint64_t *)d)[i] = (uint64_t)v; break;
    case KILN_DT_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    default: kiln__set_f64(dt, d, i, (double)v); break;
    }
}

/* numeric dtypes with a byte-addressable element (FP8 included; not the 4-bit types) */
static bool convertible(kiln_dtype dt)
{
    return kiln_dtype_size(dt) != 0 && (dt < KILN_DT_FP8E4M3 || kiln__dtype_is_fp8(dt));
}

kiln_status kiln__convert(kiln_dtype dst_dt, void *dst, kiln_dtype src_dt, const void *src, int64_t n)
{
    if (!convertible(dst_dt) || !convertible(src_dt))
        return kiln__err(KILN_ERR_UNSUPPORTED, "conversion %s -> %s is not supported",
                         kiln_dtype_name(src_dt), kiln_dtype_name(dst_dt));
    if (dst_dt == src_dt) {
        memmove(dst, src, (size_t)n * kiln_dtype_size(dst_dt));
        return KILN_OK;
    }
    if (src_dt == KILN_DT_FLOAT32 && dst_dt == KILN_DT_FLOAT16) {
        kiln__f32_to_f16_array(dst, src, n);
        return KILN_OK;
    }
    if (src_dt == KILN_DT_FLOAT16 && dst_dt == KILN_DT_FLOAT32) {
        kiln__f16_to_f32_array(dst, src, n);
        return KILN_OK;
    }
    if (src_dt == KILN_DT_FLOAT32 && dst_dt == KILN_DT_BFLOAT16) {
        kiln__f32_to_bf16_array(dst, src, n);
        return KILN_OK;
    }
    if (src_dt == KILN_DT_BFLOAT16 && dst_dt == KILN_DT_FLOAT32) {
        kiln__bf16_to_f32_array(dst, src, n);
        return KILN_OK;
    }
    if (src_dt == KILN_DT_FLOAT32 && kiln__dtype_is_fp8(dst_dt)) {
        kiln__f32_to_fp8_array(dst_dt, dst, src, n, true);
        return KILN_OK;
    }
    if (kiln__dtype_is_fp8(src_dt) && dst_dt == KILN_DT_FLOAT32) {
        kiln__fp8_to_f32_array(src_dt, dst, src, n);
        return KILN_OK;
    }
    bool src_int = kiln__dtype_is_int(src_dt) || src_dt == KILN_DT_BOOL;
    bool dst_int = kiln__dtype_is_int(dst_dt) || dst_dt == KILN_DT_BOOL;
    if (src_int && dst_int) {
        for (int64_t i = 0; i < n; i++)
            kiln__set_i64(dst_dt, dst, i, kiln__get_i64(src_dt, src, i));
    } else if (src_dt == KILN_DT_UINT64 && !dst_int) {
        for (int64_t i = 0; i < n; i++)
            kiln__set_f64(dst_dt, dst, i, (double)((const uint64_t *)src)[i]);
    } else {
        for (int64_t i = 0; i < n; i++)
            kiln__set_f64(dst_dt, dst, i, kiln__get_f64(src_dt, src, i));
    }
    return KILN_OK;
}
