/* Small helpers of kiln serve/loadgen: time, dtype names, strict integers, FP16/BF16, random data. */
#include "serve.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

bool sv_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

uint64_t sv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const struct { kiln_dtype dt; const char *kserve, *triton; } DT[] = {
    {KILN_DT_BOOL, "BOOL", "TYPE_BOOL"},       {KILN_DT_UINT8, "UINT8", "TYPE_UINT8"},
    {KILN_DT_UINT16, "UINT16", "TYPE_UINT16"}, {KILN_DT_UINT32, "UINT32", "TYPE_UINT32"},
    {KILN_DT_UINT64, "UINT64", "TYPE_UINT64"}, {KILN_DT_INT8, "INT8", "TYPE_INT8"},
    {KILN_DT_INT16, "INT16", "TYPE_INT16"},    {KILN_DT_INT32, "INT32", "TYPE_INT32"},
    {KILN_DT_INT64, "INT64", "TYPE_INT64"},    {KILN_DT_FLOAT16, "FP16", "TYPE_FP16"},
    {KILN_DT_BFLOAT16, "BF16", "TYPE_BF16"},   {KILN_DT_FLOAT32, "FP32", "TYPE_FP32"},
    {KILN_DT_FLOAT64, "FP64", "TYPE_FP64"},    {KILN_DT_STRING, "BYTES", "TYPE_STRING"},
};
#define NDT (sizeof DT / sizeof DT[0])

const char *sv_dtype_kserve(kiln_dtype dt)
{
    for (size_t i = 0; i < NDT; i++)
        if (DT[i].dt == dt)
            return DT[i].kserve;
    return NULL;
}
kiln_dtype sv_dtype_from_kserve(const char *s)
{
    for (size_t i = 0; s && i < NDT; i++)
        if (!strcmp(DT[i].kserve, s))
            return DT[i].dt;
    return KILN_DT_UNDEFINED;
}
kiln_dtype sv_dtype_from_triton(const char *s)
{
    for (size_t i = 0; s && i < NDT; i++)
        if (!strcmp(DT[i].triton, s))
            return DT[i].dt;
    return KILN_DT_UNDEFINED;
}
const char *sv_dtype_triton(kiln_dtype dt)
{
    for (size_t i = 0; i < NDT; i++)
        if (DT[i].dt == dt)
            return DT[i].triton;
    return "TYPE_INVALID";
}

bool sv_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= SV_NAME_MAX || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.')
            return false;
    return true;
}

bool sv_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

uint64_t sv_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

float sv_half_to_float(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

uint16_t sv_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    if (isnan(f))
        return sign | 0x7e00;
    float a = fabsf(f);
    if (a >= 65520.0f)
        return sign | 0x7c00;
    if (a < ldexpf(1.0f, -14)) {   /* subnormal: round to nearest even multiple of 2^-24 */
        float q = nearbyintf(a * ldexpf(1.0f, 24));
        return sign | (uint16_t)q;
    }
    uint32_t ax;
    memcpy(&ax, &a, 4);
    uint32_t rounded = ax + 0xfff + ((ax >> 13) & 1);   /* round to nearest even at bit 13 */
    return sign | (uint16_t)(((rounded >> 13) - ((127 - 15) << 10)) & 0x7fff);
}

float sv_bf16_to_float(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t sv_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if (isnan(f))
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

bool sv_tensor_alloc(kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *dims)
{
    memset(t, 0, sizeof *t);
    size_t es = kiln_dtype_size(dt);
    if (es == 0 || ndim < 0 || ndim > KILN_MAX_DIMS)
        return false;
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0 || (dims[d] > 0 && n > SIZE_MAX / 2 / es / (size_t)dims[d]))
            return false;
        n *= (size_t)dims[d];
        t->dims[d] = dims[d];
    }
    t->dtype = dt;
    t->ndim = ndim;
    t->nbytes = n * es;
    t->data = calloc(1, t->nbytes ? t->nbytes : 1);
    return t->data != NULL;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void sv_fill_random(kiln_tensor *t, uint64_t *seed)
{
    size_t es = kiln_dtype_size(t->dtype), n = es ? t->nbytes / es : 0;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(xorshift(seed) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        int64_t k = (int64_t)(xorshift(seed) % 100);
        switch (t->dtype) {
        case KILN_DT_FLOAT32: ((float *)t->data)[i] = (float)u; break;
        case KILN_DT_FLOAT64: ((double *)t->data)[i] = u; break;
        case KILN_DT_FLOAT16: ((uint16_t *)t->data)[i] = sv_float_to_half((float)u); break;
        case KILN_DT_BFLOAT16: ((uint16_t *)t->data)[i] = sv_float_to_bf16((float)u); break;
        case KILN_DT_BOOL: ((uint8_t *)t->data)[i] = 1; break;
        case KILN_DT_UINT8: case KILN_DT_INT8: ((uint8_t *)t->data)[i] = (uint8_t)k; break;
        case KILN_DT_UINT16: case KILN_DT_INT16: ((uint16_t *)t->data)[i] = (uint16_t)k; break;
        case KILN_DT_UINT32: case KILN_DT_INT32: ((uint32_t *)t->data)[i] = (uint32_t)k; break;
        case KILN_DT_UINT64: case KILN_DT_INT64: ((uint64_t *)t->data)[i] = (uint64_t)k; break;
        default: break;
        }
    }
}
