/* 64-bit content hashes for calibration (model, data): XXH3 from Debian's libxxhash (header-only use). */
#include "quant.h"
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t kiln__hash64(const void *p, size_t n, uint64_t seed)
{
    return XXH3_64bits_withSeed(p, n, seed);
}

uint64_t kiln__tensor_hash(const kiln_tensor *t)
{
    int64_t hdr[2 + KILN_MAX_DIMS] = {t->dtype, t->ndim};
    for (int d = 0; d < t->ndim && d < KILN_MAX_DIMS; d++)
        hdr[2 + d] = t->dims[d];
    size_t nb = (size_t)kiln__shape_numel(t->ndim, t->dims) * kiln_dtype_size(t->dtype);
    return kiln__hash64(t->data, t->data ? nb : 0, kiln__hash64(hdr, sizeof hdr, 0));
}
