/* Shape inference of elementwise ops: unary (shape and dtype of the input), broadcasting
 * binary/variadic ops, comparisons, Where, Cast, normalizations that keep their input's shape,
 * quantization. Small integer values (shape arithmetic) are computed symbolically, small float
 * values concretely. */
#include "shape_impl.h"
#include <math.h>

/* Element k of s as a double (float values, or constant integer values). */
static bool get_f(const kiln_ictx *c, const kiln_vshape *s, int k, double *x)
{
    if (!kiln__dt_int_like(s->dtype)) {
        *x = s->val[k].f;
        return true;
    }
    int64_t v;
    if (!kiln__sd_is_const(c->st, s->val[k].i, &v))
        return false;
    *x = (double)v;
    return true;
}

static bool sym_compare(kiln_ictx *c, kiln_op op, kiln_sdim a, kiln_sdim b, kiln_sdim *r)
{
    kiln_sdim d = kiln__sd_sub(c->st, a, b);
    int64_t x;
    int res = -1;
    bool ge = kiln__sd_nonneg(c->st, d), le = kiln__sd_nonneg(c->st, kiln__sd_mulc(c->st, d, -1));
    if (kiln__sd_is_const(c->st, d, &x)) {
        switch (op) {
        case KILN_OP_Equal: res = x == 0; break;
        case KILN_OP_Less: res = x < 0; break;
        case KILN_OP_Greater: res = x > 0; break;
        case KILN_OP_LessOrEqual: res = x <= 0; break;
        case KILN_OP_GreaterOrEqual: res = x >= 0; break;
        default: return false;
        }
    } else if ((op == KILN_OP_Less && ge) || (op == KILN_OP_Greater && le)) {
        res = 0;
    } else if ((op == KILN_OP_LessOrEqual && le) || (op == KILN_OP_GreaterOrEqual && ge)) {
        res = 1;
    }
    if (res < 0)
        return false;
    *r = kiln__C(c, res);
    return true;
}

/* One integer element: op over args a[0..n). */
static bool int_elem(kiln_ictx *c, kiln_op op, int n, const kiln_sdim *a, kiln_sdim *r)
{
    kiln_symtab *st = c->st;
    int64_t x;
    switch (op) {
    case KILN_OP_Identity: case KILN_OP_Cast: case KILN_OP_CastLike: case KILN_OP_Expand: *r = a[0]; return true;
    case KILN_OP_Neg: *r = kiln__sd_mulc(st, a[0], -1); return true;
    case KILN_OP_Abs:
        if (kiln__sd_is_const(st, a[0], &x))
            *r = kiln__C(c, x < 0 ? -x : x);
        else if (kiln__sd_nonneg(st, a[0]))
            *r = a[0];
        else
            return false;
        return true;
    case KILN_OP_Add: case KILN_OP_Sum: case KILN_OP_Sub: case KILN_OP_Mul: case KILN_OP_Max: case KILN_OP_Min:
        *r = a[0];
        for (int i = 1; i < n; i++)
            *r = op == KILN_OP_Sub ? kiln__sd_sub(st, *r, a[i]) : op == KILN_OP_Mul ? kiln__sd_mul(st, *r, a[i])
               : op == KILN_OP_Max ? kiln__sd_max(st, *r, a[i]) : op == KILN_OP_Min ? kiln__sd_min(st, *r, a[i])
               : kiln__sd_add(st, *r, a[i]);
        return true;
    case KILN_OP_Div:
        if (kiln__sd_is_const(st, a[1], &x) && x == 0)
            return false;
        *r = kiln__sd_tdiv(st, a[0], a[1]);
        return !kiln__sd_has_unknown(st, *r) || kiln__sd_has_unknown(st, a[0]) || kiln__sd_has_unknown(st, a[1]);
    case KILN_OP_Mod:
        if ((kiln__sd_is_const(st, a[1], &x) && x == 0) ||
            (kiln__attr_i(c->n, "fmod", 0) && !(kiln__sd_nonneg(st, a[0]) && kiln__sd_nonneg(st, a[1]))))
            return false;
        *r = kiln__sd_mod(st, a[0], a[1]);
        return true;
    case KILN_OP_Not:
        if (!kiln__sd_is_const(st, a[0], &x))
            return false;
        *r = kiln__C(c, !x);
        return true;
    case KILN_OP_And: case KILN_OP_Or: {
        int64_t y;
        if (!kiln__sd_is_const(st, a[0], &x) || !kiln__sd_is_const(st, a[1], &y))
            return false;
        *r = kiln__C(c, op == KILN_OP_And ? (x && y) : (x || y));
        return true;
    }
    case KILN_OP_Where:
        if (!kiln__sd_is_const(st, a[0], &x))
            return false;
        *r = x ? a[1] : a[2];
        return true;
    case KILN_OP_Equal: case KILN_OP_Less: case KILN_OP_Greater: case KILN_OP_LessOrEqual:
    case KILN_OP_GreaterOrEqual:
        return n == 2 && sym_compare(c, op, a[0], a[1], r);
    default:
        return false;
    }
}

static bool float_elem(kiln_op op, int n, const double *a, double *r)
{
    switch (op) {
    case KILN_OP_Identity: case KILN_OP_Cast: case KILN_OP_CastLike: case KILN_OP_Expand: *r = a[0]; return true;
    case KILN_OP_Neg: *r = -a[0]; return true;
    case KILN_OP_Abs: *r = fabs(a[0]); return true;
    case KILN_OP_Floor: *r = floor(a[0]); return true;
    case KILN_OP_Ceil: *r = ceil(a[0]); return true;
    case KILN_OP_Round: *r = nearbyint(a[0]); return true;
    case KILN_OP_Sqrt: *r = sqrt(a[0]); return true;
    case KILN_OP_Reciprocal: *r = 1.0 / a[0]; return true;
    case KILN_OP_Add: case KILN_OP_Sum: *r = 0; for (int i = 0; i < n; i++) *r += a[i]; return true;
    case KILN_OP_Sub: *r = a[0] - a[1]; return true;
    case KILN_OP_Mul: *r = a[0] * a[1]; return true;
    case KILN_OP_Div: *r = a[0] / a[1]; return true;
    case KILN_OP_Pow: *r = pow(a[0], a[1]); return true;
    case KILN_OP_Max: *r = a[0]; for (int i = 1; i < n; i++) *r = a[i] > *r ? a[i] : *r; return true;
    case KILN_OP_Min: *r = a[0]; for (int i = 1; i < n; i++) *r = a[i] < *r ? a[i] : *r; return true;
    case KILN_OP_Equal: *r = a[0] == a[1]; return true;
    case KILN_OP_Less: *r = a[0] < a[1]; return true;
    case KILN_OP_Greater: *r = a[0] > a[1]; return true;
    case KILN_OP_LessOrEqual: *r = a[0] <= a[1]; return true;
    case KILN_OP_GreaterOrEqual: *r = a[0] >= a[1]; return true;
    case KILN_OP_Where: *r = a[0] != 0 ? a[1] : a[2]; return true;
    default: return false;
    }
}

/* Computes o's values elementwise from ins (broadcast) when all are known and small. */
void kiln__elem_values(kiln_ictx *c, int n, const kiln_vshape *const *ins, kiln_vshape *o)
{
    if (!kiln__vs_can_hold(c, o) || n > 8)
        return;
    bool all_int = kiln__dt_int_like(o->dtype);
    for (int i = 0; i < n; i++) {
        if (!ins[i] || !ins[i]->hv || ins[i]->rank > o->rank)
            return;
        all_int &= kiln__dt_int_like(ins[i]->dtype);
    }
    int64_t od[KILN_MAX_DIMS], total = kiln__const_numel(c, o);
    for (int d = 0; d < o->rank; d++)
        kiln__sd_is_const(c->st, o->dims[d], &od[d]);
    for (int64_t k = 0; k < total; k++) {
        kiln_sdim ai[8];
        double af[8];
        for (int i = 0; i < n; i++) {
            const kiln_vshape *s = ins[i];
            int64_t idx = 0, rem = k, stride = 1;
            for (int d = o->rank - 1; d >= 0; d--) {
                int64_t coord = rem % od[d], sd = 1;
                rem /= od[d];
                int sdx = d - (o->rank - s->rank);
                if (sdx < 0)
                    continue;
                kiln__sd_is_const(c->st, s->dims[sdx], &sd);
                idx += (sd == 1 ? 0 : coord) * stride;
                stride *= sd;
            }
            if (all_int)
                ai[i] = s->val[idx].i;
            else if (!get_f(c, s, (int)idx, &af[i]))
                return;
        }
        if (all_int) {
            if (!int_elem(c, c->n->op, n, ai, &o->val[k].i))
                return;
        } else {
            double r;
            if (!float_elem(c->n->op, n, af, &r))
                return;
            if (kiln__dt_int_like(o->dtype)) {
                if (!(fabs(r) < 9e18))
                    return;
                o->val[k].i = kiln__C(c, (int64_t)r);
            } else {
                o->val[k].f = r;
            }
        }
    }
    o->hv = true;
    o->nval = (int)total;
}

kiln_status kiln__si_unary(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln__vs_set(c->out[0], x->dtype, x->rank, x->dims);
    kiln__elem_values(c, 1, &x, c->out[0]);
    return KILN_OK;
}

/* Softmax, LogSoftmax: the spec needs rank >= 1 (there is no axis to normalize over in a scalar;
 * ONNX Runtime rejects it) */
kiln_status kiln__si_softmax(kiln_ictx *c)
{
    KILN_TRY(kiln__si_unary(c));
    if (c->out[0]->rank == 0)
        return kiln__ierr(c, KILN_ERR_SHAPE, "input is a scalar (rank 0); %s needs rank >= 1", c->n->op_type);
    return KILN_OK;
}

kiln_status kiln__si_isx(kiln_ictx *c)
{
    KILN_TRY(kiln__si_unary(c));
    c->out[0]->dtype = KILN_DT_BOOL;
    c->out[0]->hv = false;
    return KILN_OK;
}

static kiln_status convert_to(kiln_ictx *c, kiln_dtype to)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_set(o, to, x->rank, x->dims);
    if (!x->hv)
        return KILN_OK;
    for (int k = 0; k < x->nval; k++) {
        if (kiln__dt_int_like(to) && kiln__dt_int_like(x->dtype)) {
            int64_t v;
            if (to == KILN_DT_BOOL)
                o->val[k].i = kiln__sd_is_const(c->st, x->val[k].i, &v) ? kiln__C(c, v != 0) : kiln__sd_unknown(c->st);
            else
                o->val[k].i = x->val[k].i;   /* shape arithmetic stays in range */
        } else if (kiln__dt_int_like(to)) {
            double f = x->val[k].f;
            if (!(fabs(f) < 9e18))
                return KILN_OK;
            o->val[k].i = kiln__C(c, to == KILN_DT_BOOL ? f != 0 : (int64_t)f);
        } else if (!get_f(c, x, k, &o->val[k].f)) {
            return KILN_OK;
        }
    }
    o->hv = x->hv;
    o->nval = x->nval;
    return KILN_OK;
}

kiln_status kiln__si_cast(kiln_ictx *c) { return convert_to(c, kiln__attr_dt(c->n, "to", KILN_DT_UNDEFINED)); }

kiln_status kiln__si_castlike(kiln_ictx *c)
{
    const kiln_vshape *t;
    KILN_TRY(kiln__need(c, 1, &t));
    return convert_to(c, t->dtype);
}

kiln_status kiln__si_dropout(kiln_ictx *c)
{
    KILN_TRY(kiln__si_unary(c));
    if (c->n_out > 1)
        kiln__vs_set(c->out[1], KILN_DT_BOOL, c->out[0]->rank, c->out[0]->dims);
    return KILN_OK;
}

static kiln_status bcast_to(kiln_ictx *c, int first, kiln_dtype dt)
{
    int n = c->n_in - first;
    if (n < 1)
        return kiln__ierr(c, KILN_ERR_SHAPE, "no inputs");
    for (int i = first; i < c->n_in; i++)
        if (!IN(c, i))
            return kiln__ierr(c, KILN_ERR_SHAPE, "input %d is missing", i);
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, dt);
    KILN_TRY(kiln__bcast(c, n, c->in + first, o));
    kiln__elem_values(c, c->n_in, c->in, o);
    return KILN_OK;
}

kiln_status kiln__si_bcast(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    return bcast_to(c, 0, x->dtype);
}

/* Mod: the spec requires fmod=1 for floating-point inputs (ONNX Runtime rejects fmod=0 there) */
kiln_status kiln__si_mod(kiln_ictx *c)
{
    KILN_TRY(kiln__si_bcast(c));
    const kiln_vshape *x = IN(c, 0);
    if (x && kiln__dtype_is_float(x->dtype) && kiln__attr_i(c->n, "fmod", 0) == 0)
        return kiln__ierr(c, KILN_ERR_SHAPE, "fmod=0 is not allowed for %s inputs; floating-point Mod needs fmod=1",
                          kiln_dtype_name(x->dtype));
    return KILN_OK;
}

/* com.microsoft QLinearAdd: A (input 0) and B (input 3) broadcast; C_zero_point's type, else A's */
kiln_status kiln__si_qlinearadd(kiln_ictx *c)
{
    const kiln_vshape *a, *b;
    KILN_TRY(kiln__need(c, 0, &a));
    KILN_TRY(kiln__need(c, 3, &b));
    const kiln_vshape *zp = IN(c, 7), *ab[2] = {a, b};
    kiln__vs_unknown(c->out[0], zp ? zp->dtype : a->dtype);
    return kiln__bcast(c, 2, ab, c->out[0]);
}

kiln_status kiln__si_compare(kiln_ictx *c) { return bcast_to(c, 0, KILN_DT_BOOL); }

kiln_status kiln__si_where(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 1, &x));
    return bcast_to(c, 0, x->dtype);
}

kiln_status kiln__si_batchnorm(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln__vs_set(c->out[0], x->dtype, x->rank, x->dims);
    for (int o = 1; o < c->n_out; o++) {   /* training mode: running/saved mean and variance [C] */
        const kiln_vshape *s = IN(c, 1);
        kiln__vs_set(c->out[o], s ? s->dtype : x->dtype, s ? s->rank : -1, s ? s->dims : NULL);
    }
    return KILN_OK;
}

kiln_status kiln__si_layernorm(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln__vs_set(c->out[0], x->dtype, x->rank, x->dims);
    if (c->n_out < 2 || x->rank < 0)
        return KILN_OK;
    int ax;
    KILN_TRY(kiln__norm_ax(c, kiln__attr_i(c->n, "axis", -1), x->rank, &ax));
    kiln_sdim d[KILN_MAX_DIMS];
    for (int k = 0; k < x->rank; k++)
        d[k] = k < ax ? x->dims[k] : kiln__C(c, 1);
    kiln_dtype st = kiln__attr_dt(c->n, "stash_type", KILN_DT_FLOAT32);
    for (int o = 1; o < c->n_out; o++)
        kiln__vs_set(c->out[o], st, x->rank, d);
    return KILN_OK;
}

kiln_status kiln__si_quantize(kiln_ictx *c)
{
    const kiln_vshape *x, *zp = IN(c, 2);
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_dtype dt = zp ? zp->dtype : kiln__attr_dt(c->n, "output_dtype", KILN_DT_UINT8);
    kiln__vs_set(c->out[0], dt, x->rank, x->dims);
    return KILN_OK;
}

kiln_status kiln__si_dequantize(kiln_ictx *c)
{
    const kiln_vshape *x, *scale = IN(c, 1);
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_dtype dt = scale && kiln__dtype_is_float(scale->dtype) ? scale->dtype : KILN_DT_FLOAT32;
    kiln__vs_set(c->out[0], kiln__attr_dt(c->n, "output_dtype", dt), x->rank, x->dims);
    return KILN_OK;
}

/* QLookup: X's shape, the table's element type */
kiln_status kiln__si_qlookup(kiln_ictx *c)
{
    const kiln_vshape *x, *t;
    KILN_TRY(kiln__need(c, 0, &x));
    KILN_TRY(kiln__need(c, 1, &t));
    kiln__vs_set(c->out[0], t->dtype, x->rank, x->dims);
    return KILN_OK;
}

kiln_status kiln__si_dynquant(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln__vs_set(c->out[0], KILN_DT_UINT8, x->rank, x->dims);
    if (c->n_out > 1)
        kiln__vs_set(c->out[1], KILN_DT_FLOAT32, 0, NULL);
    if (c->n_out > 2)
        kiln__vs_set(c->out[2], KILN_DT_UINT8, 0, NULL);
    return KILN_OK;
}

kiln_status kiln__si_eyelike(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln__vs_set(c->out[0], kiln__attr_dt(c->n, "dtype", x->dtype), x->rank, x->dims);
    return KILN_OK;
}
