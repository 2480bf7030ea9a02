/* Synthetic input values: the one rule (synth.h) and its public per-tensor form. */
#include "synth.h"

static double rnd01(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* Dtypes with synthetic values: the common float types, integers and bool. */
static bool synth_dtype(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16 || dt == KILN_DT_FLOAT64 ||
           dt == KILN_DT_BOOL || kiln__dtype_is_int(dt);
}

kiln_status kiln__synth_fill(kiln_tensor *t, const char *name, uint64_t *rng)
{
    kiln_dtype dt = t->dtype;
    if (!synth_dtype(dt))
        return kiln__err(KILN_ERR_DTYPE, "input '%s' has dtype %s, which has no synthetic values", name,
                         kiln_dtype_name(dt));
    if (!*rng)
        *rng = KILN_SYNTH_SEED;
    bool type = strstr(name, "type") != NULL, ids = strstr(name, "ids") != NULL && !type;
    int64_t n = kiln_tensor_numel(t);
    for (int64_t k = 0; k < n; k++) {
        if (kiln__dtype_is_float(dt))
            kiln__set_f64(dt, t->data, k, rnd01(rng) * 2 - 1);
        else
            kiln__set_i64(dt, t->data, k, ids ? (int64_t)(rnd01(rng) * 100) : type ? 0 : 1);
    }
    return KILN_OK;
}

kiln_status kiln_tensor_fill_synthetic(kiln_tensor *t, const char *name, uint64_t seed)
{
    if (!t || !name)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_tensor_fill_synthetic: NULL argument");
    if (!synth_dtype(t->dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_tensor_fill_synthetic: '%s' has dtype %s, which has no synthetic values",
                         name, kiln_dtype_name(t->dtype));
    int64_t n = kiln_tensor_numel(t);
    if (n < 0 || (n > 0 && !t->data) || t->nbytes < (size_t)n * kiln_dtype_size(t->dtype))
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_tensor_fill_synthetic: '%s' has no data for its shape", name);
    uint64_t rng = seed ? seed : KILN_SYNTH_SEED;
    return kiln__synth_fill(t, name, &rng);
}
