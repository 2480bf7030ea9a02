/* The int8 parameters of an activation (precision.h, docs/PRECISION.md "Implicit INT8"): uint8
 * over [lo, T] with a zero point where the value cannot go below lo (src/quant/range.c), which
 * wastes none of the codes int8 would spend below lo. */
#include "build.h"
#include "precision.h"
#include "../quant/quant.h"
#include <math.h>

void kiln__int8_act_params(const kiln_graph *g, int v, float t, bool *u8, float *scale, int *zp)
{
    float lo;
    *u8 = kiln__value_lower_bound(g, v, &lo) && lo > -t;
    *zp = 0;
    *scale = t / (*u8 ? 255.f : 127.f);
    if (*u8 && lo < 0) {
        *scale = (t - lo) / 255.f;
        float z = rintf(-lo / *scale);
        *zp = z < 0 ? 0 : z > 255 ? 255 : (int)z;
    }
}
