/* Shape inference of shape and data-movement ops: Shape/Size/Constant, Concat, Gather*,
 * Reshape/Flatten/Squeeze/Unsqueeze/Transpose, Expand/Tile/Pad/Slice/Split, Range,
 * ConstantOfShape, OneHot, and the data-dependent ones (NonZero, Compress, TopK, Unique). */
#include "shape_impl.h"

/* Element values of input i (small and known) are copied unchanged into o (reinterpreting ops). */
static void keep_values(const kiln_ictx *c, const kiln_vshape *x, kiln_vshape *o)
{
    if (x->hv && kiln__vs_can_hold(c, o) && kiln__const_numel(c, o) == x->nval) {
        o->hv = true;
        o->nval = x->nval;
        memcpy(o->val, x->val, sizeof o->val[0] * (size_t)x->nval);
    }
}

/* Integer list from attribute `name` (older opsets) or from input i (newer); -1: not known,
 * -2: neither given. */
static int ints_attr_or_input(const kiln_ictx *c, const char *name, int i, int64_t *v, int max)
{
    const int64_t *a;
    int n = kiln__attr_ints(c->n, name, &a);
    if (n >= 0) {
        if (n > max)
            return -1;
        memcpy(v, a, sizeof *a * (size_t)n);
        return n;
    }
    if (!IN(c, i))
        return -2;
    return kiln__in_ints(c, i, v, max);
}

kiln_status kiln__si_shape(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    if (x->rank < 0) {
        kiln__vs_fresh(c, o, KILN_DT_INT64, 1);
        return KILN_OK;
    }
    int64_t s = kiln__attr_i(c->n, "start", 0), e = kiln__attr_i(c->n, "end", x->rank);
    s = s < 0 ? s + x->rank : s;
    e = e < 0 ? e + x->rank : e;
    s = s < 0 ? 0 : s > x->rank ? x->rank : s;
    e = e < s ? s : e > x->rank ? x->rank : e;
    kiln_sdim n = kiln__C(c, e - s);
    kiln__vs_set(o, KILN_DT_INT64, 1, &n);
    o->hv = true;
    o->nval = (int)(e - s);
    for (int64_t k = s; k < e; k++)
        o->val[k - s].i = x->dims[k];
    return KILN_OK;
}

kiln_status kiln__si_size(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln__vs_set(c->out[0], KILN_DT_INT64, 0, NULL);
    c->out[0]->hv = true;
    c->out[0]->nval = 1;
    c->out[0]->val[0].i = kiln__numel(c, x);
    return KILN_OK;
}

kiln_status kiln__si_constant(kiln_ictx *c)
{
    kiln_vshape *o = c->out[0];
    const kiln_attr *a = c->n->n_attr ? &c->n->attrs[0] : NULL;
    if (!a)
        return kiln__ierr(c, KILN_ERR_SHAPE, "no value attribute");
    kiln_sdim len = kiln__C(c, a->n);
    if (a->t) {
        kiln__vs_from_tensor(c->st, a->t, o);
    } else if (!strcmp(a->name, "value_int") || !strcmp(a->name, "value_ints")) {
        bool one = !strcmp(a->name, "value_int");
        kiln__vs_set(o, KILN_DT_INT64, one ? 0 : 1, &len);
        o->nval = one ? 1 : a->n;
        o->hv = o->nval <= KILN_SHAPE_MAXVAL;
        for (int k = 0; o->hv && k < o->nval; k++)
            o->val[k].i = kiln__C(c, one ? a->i : a->ints[k]);
    } else if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_floats")) {
        bool one = !strcmp(a->name, "value_float");
        kiln__vs_set(o, KILN_DT_FLOAT32, one ? 0 : 1, &len);
        o->nval = one ? 1 : a->n;
        o->hv = o->nval <= KILN_SHAPE_MAXVAL;
        for (int k = 0; o->hv && k < o->nval; k++)
            o->val[k].f = one ? a->f : a->floats[k];
    } else if (!strcmp(a->name, "value_string") || !strcmp(a->name, "value_strings")) {
        kiln__vs_set(o, KILN_DT_STRING, strcmp(a->name, "value_string") ? 1 : 0, &len);
    } else {
        kiln__vs_unknown(o, KILN_DT_UNDEFINED);
    }
    return KILN_OK;
}

kiln_status kiln__si_constofshape(kiln_ictx *c)
{
    const kiln_attr *a = kiln__attr(c->n, "value");
    kiln_vshape fill;
    kiln__vs_unknown(&fill, KILN_DT_FLOAT32);
    if (a && a->t)
        kiln__vs_from_tensor(c->st, a->t, &fill);
    kiln_vshape *o = c->out[0];
    kiln_sdim d[KILN_MAX_DIMS];
    int r = kiln__in_shape(c, 0, d);
    if (r < 0) {
        kiln__vs_unknown(o, fill.dtype);
        return KILN_OK;
    }
    kiln__vs_set(o, fill.dtype, r, d);
    if (fill.hv && fill.nval == 1 && kiln__vs_can_hold(c, o)) {
        o->nval = (int)kiln__const_numel(c, o);
        o->hv = true;
        for (int k = 0; k < o->nval; k++)
            o->val[k] = fill.val[0];
    }
    return KILN_OK;
}

kiln_status kiln__si_concat(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    int rank = -1;
    for (int i = 0; i < c->n_in; i++) {
        if (IN(c, i) && IN(c, i)->rank >= 0) {
            if (rank >= 0 && IN(c, i)->rank != rank)
                return kiln__ierr(c, KILN_ERR_SHAPE, "inputs of rank %d and %d", rank, IN(c, i)->rank);
            rank = IN(c, i)->rank;
        }
    }
    if (rank < 0)
        return KILN_OK;
    for (int i = 0; i < c->n_in; i++)
        if (!IN(c, i) || IN(c, i)->rank < 0)
            return kiln__vs_fresh(c, o, x->dtype, rank), KILN_OK;
    int ax;
    KILN_TRY(kiln__norm_ax(c, kiln__attr_i(c->n, "axis", 0), rank, &ax));
    o->rank = rank;
    for (int d = 0; d < rank; d++) {
        o->dims[d] = d == ax ? kiln__C(c, 0) : x->dims[d];
        for (int i = 0; i < c->n_in; i++) {
            kiln_sdim y = IN(c, i)->dims[d];
            if (d == ax) {
                o->dims[d] = kiln__sd_add(c->st, o->dims[d], y);
            } else if (y != o->dims[d]) {
                int64_t a, b;
                bool ka = kiln__sd_is_const(c->st, o->dims[d], &a), kb = kiln__sd_is_const(c->st, y, &b);
                if (ka && kb)
                    return kiln__ierr(c, KILN_ERR_SHAPE, "inputs disagree on axis %d: %lld vs %lld", d, (long long)a,
                                      (long long)b);
                if (kb || kiln__sd_has_unknown(c->st, o->dims[d]))
                    o->dims[d] = y;   /* prefer the known / named dim */
            }
        }
    }
    /* values: concatenation along axis 0 of 1-D tensors (shape vectors) */
    if (rank != 1 || !kiln__vs_can_hold(c, o))
        return KILN_OK;
    int n = 0;
    for (int i = 0; i < c->n_in; i++) {
        if (!IN(c, i)->hv || n + IN(c, i)->nval > KILN_SHAPE_MAXVAL)
            return KILN_OK;
        for (int k = 0; k < IN(c, i)->nval; k++)
            o->val[n++] = IN(c, i)->val[k];
    }
    o->hv = true;
    o->nval = n;
    return KILN_OK;
}

kiln_status kiln__si_gather(kiln_ictx *c)
{
    const kiln_vshape *x, *ind;
    KILN_TRY(kiln__need(c, 0, &x));
    KILN_TRY(kiln__need(c, 1, &ind));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank < 0 || ind->rank < 0)
        return KILN_OK;
    int ax;
    KILN_TRY(kiln__norm_ax(c, kiln__attr_i(c->n, "axis", 0), x->rank, &ax));
    if (x->rank + ind->rank - 1 > KILN_MAX_DIMS)
        return kiln__ierr(c, KILN_ERR_LIMIT, "output rank %d", x->rank + ind->rank - 1);
    o->rank = 0;
    for (int d = 0; d < x->rank; d++) {
        if (d == ax)
            for (int k = 0; k < ind->rank; k++)
                o->dims[o->rank++] = ind->dims[k];
        else
            o->dims[o->rank++] = x->dims[d];
    }
    int64_t idx[KILN_SHAPE_MAXVAL], n = kiln__in_ints(c, 1, idx, KILN_SHAPE_MAXVAL);
    if (!x->hv || n < 0 || !kiln__vs_can_hold(c, o))
        return KILN_OK;
    int64_t outer = 1, len, inner = 1, v;
    for (int d = 0; d < x->rank; d++) {
        kiln__sd_is_const(c->st, x->dims[d], &v);
        if (d < ax)
            outer *= v;
        else if (d > ax)
            inner *= v;
    }
    kiln__sd_is_const(c->st, x->dims[ax], &len);
    int m = 0;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t k = 0; k < n; k++) {
            int64_t j = idx[k] < 0 ? idx[k] + len : idx[k];
            if (j < 0 || j >= len)
                return kiln__ierr(c, KILN_ERR_SHAPE, "index %lld out of range for a dim of %lld", (long long)idx[k],
                                  (long long)len);
            for (int64_t b = 0; b < inner; b++)
                o->val[m++] = x->val[(a * len + j) * inner + b];
        }
    o->hv = true;
    o->nval = m;
    return KILN_OK;
}

kiln_status kiln__si_gatherelem(kiln_ictx *c)
{
    const kiln_vshape *x, *ind;
    KILN_TRY(kiln__need(c, 0, &x));
    KILN_TRY(kiln__need(c, 1, &ind));
    kiln__vs_set(c->out[0], x->dtype, ind->rank, ind->dims);
    return KILN_OK;
}

kiln_status kiln__si_gathernd(kiln_ictx *c)
{
    const kiln_vshape *x, *ind;
    KILN_TRY(kiln__need(c, 0, &x));
    KILN_TRY(kiln__need(c, 1, &ind));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    int64_t b = kiln__attr_i(c->n, "batch_dims", 0), k;
    if (x->rank < 0 || ind->rank < 1 || !kiln__sd_is_const(c->st, ind->dims[ind->rank - 1], &k))
        return KILN_OK;
    if (b < 0 || b > x->rank || k < 0 || k > x->rank - b)
        return kiln__ierr(c, KILN_ERR_SHAPE, "index depth %lld with %lld batch dims on rank %d", (long long)k,
                          (long long)b, x->rank);
    int r = ind->rank - 1 + x->rank - (int)(b + k);
    if (r > KILN_MAX_DIMS)
        return kiln__ierr(c, KILN_ERR_LIMIT, "output rank %d", r);
    o->rank = 0;
    for (int d = 0; d < ind->rank - 1; d++)
        o->dims[o->rank++] = ind->dims[d];
    for (int d = (int)(b + k); d < x->rank; d++)
        o->dims[o->rank++] = x->dims[d];
    return KILN_OK;
}

kiln_status kiln__si_reshape(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    kiln_sdim t[KILN_MAX_DIMS];
    int r;
    const int64_t *sa;
    if (!IN(c, 1) && (r = kiln__attr_ints(c->n, "shape", &sa)) >= 0) {   /* opset 1-4 */
        if (r > KILN_MAX_DIMS)
            return kiln__ierr(c, KILN_ERR_LIMIT, "rank %d", r);
        for (int d = 0; d < r; d++)
            t[d] = kiln__C(c, sa[d]);
    } else {
        r = kiln__in_shape(c, 1, t);
    }
    if (r < 0)
        return KILN_OK;
    bool allowzero = kiln__attr_i(c->n, "allowzero", 0) != 0;
    int infer = -1;
    kiln_sdim known = kiln__C(c, 1);
    for (int d = 0; d < r; d++) {
        int64_t v;
        if (kiln__sd_is_const(c->st, t[d], &v)) {
            if (v == 0 && !allowzero) {
                if (x->rank >= 0 && d >= x->rank)
                    return kiln__ierr(c, KILN_ERR_SHAPE, "target dim %d copies a dim the rank-%d input lacks", d, x->rank);
                t[d] = x->rank >= 0 ? x->dims[d] : kiln__sd_unknown(c->st);
            } else if (v == -1) {
                if (infer >= 0)
                    return kiln__ierr(c, KILN_ERR_SHAPE, "more than one -1 in the target shape");
                infer = d;
                continue;
            } else if (v < 0) {
                return kiln__ierr(c, KILN_ERR_SHAPE, "target dim %d is %lld", d, (long long)v);
            }
        }
        known = kiln__sd_mul(c->st, known, t[d]);
    }
    kiln_sdim total = kiln__numel(c, x);
    if (infer >= 0)
        t[infer] = kiln__sd_div(c->st, total, known);
    else {
        int64_t a, b;
        if (kiln__sd_is_const(c->st, total, &a) && kiln__sd_is_const(c->st, known, &b) && a != b)
            return kiln__ierr(c, KILN_ERR_SHAPE, "cannot reshape %lld elements into %lld", (long long)a, (long long)b);
    }
    kiln__vs_set(o, x->dtype, r, t);
    keep_values(c, x, o);
    return KILN_OK;
}

kiln_status kiln__si_flatten(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank < 0)
        return kiln__vs_fresh(c, o, x->dtype, 2), KILN_OK;
    int64_t ax = kiln__attr_i(c->n, "axis", 1);
    if (ax < -x->rank || ax > x->rank)
        return kiln__ierr(c, KILN_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, x->rank);
    ax = ax < 0 ? ax + x->rank : ax;
    kiln_sdim d[2] = {kiln__C(c, 1), kiln__C(c, 1)};
    for (int k = 0; k < x->rank; k++)
        d[k >= ax] = kiln__sd_mul(c->st, d[k >= ax], x->dims[k]);
    kiln__vs_set(o, x->dtype, 2, d);
    keep_values(c, x, o);
    return KILN_OK;
}

/* Sorted normalized axes (unique) for an op on rank `rank`; error on bad or repeated axes. */
static kiln_status norm_axes(const kiln_ictx *c, int n, const int64_t *ax, int rank, bool *mask)
{
    memset(mask, 0, sizeof(bool) * KILN_MAX_DIMS);
    for (int k = 0; k < n; k++) {
        int a;
        KILN_TRY(kiln__norm_ax(c, ax[k], rank, &a));
        if (mask[a])
            return kiln__ierr(c, KILN_ERR_SHAPE, "axis %lld repeated", (long long)ax[k]);
        mask[a] = true;
    }
    return KILN_OK;
}

kiln_status kiln__si_squeeze(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    int64_t ax[KILN_MAX_DIMS];
    int n = ints_attr_or_input(c, "axes", 1, ax, KILN_MAX_DIMS);
    if (x->rank < 0 || n == -1)
        return KILN_OK;
    bool m[KILN_MAX_DIMS];
    KILN_TRY(norm_axes(c, n < 0 ? 0 : n, ax, x->rank, m));
    o->rank = 0;
    for (int d = 0; d < x->rank; d++) {
        bool one = kiln__is_c(c, x->dims[d], 1);
        if (n >= 0 && m[d] && !one && kiln__sd_is_const(c->st, x->dims[d], NULL))
            return kiln__ierr(c, KILN_ERR_SHAPE, "cannot squeeze axis %d: its dim is not 1", d);
        if (!(n >= 0 ? m[d] : one))
            o->dims[o->rank++] = x->dims[d];
    }
    keep_values(c, x, o);
    return KILN_OK;
}

kiln_status kiln__si_unsqueeze(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    int64_t ax[KILN_MAX_DIMS];
    int n = ints_attr_or_input(c, "axes", 1, ax, KILN_MAX_DIMS);
    if (x->rank < 0 || n < 0)
        return KILN_OK;
    int r = x->rank + n;
    if (r > KILN_MAX_DIMS)
        return kiln__ierr(c, KILN_ERR_LIMIT, "output rank %d", r);
    bool m[KILN_MAX_DIMS];
    KILN_TRY(norm_axes(c, n, ax, r, m));
    o->rank = r;
    for (int d = 0, k = 0; d < r; d++)
        o->dims[d] = m[d] ? kiln__C(c, 1) : x->dims[k++];
    keep_values(c, x, o);
    return KILN_OK;
}

kiln_status kiln__si_transpose(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    const int64_t *p;
    int n = kiln__attr_ints(c->n, "perm", &p);
    if (x->rank < 0)
        return n >= 0 && n <= KILN_MAX_DIMS ? (kiln__vs_fresh(c, o, x->dtype, n), KILN_OK) : KILN_OK;
    if (n >= 0 && n != x->rank)
        return kiln__ierr(c, KILN_ERR_SHAPE, "perm has %d entries for rank %d", n, x->rank);
    bool seen[KILN_MAX_DIMS] = {0};
    o->rank = x->rank;
    for (int d = 0; d < x->rank; d++) {
        int64_t s = n >= 0 ? p[d] : x->rank - 1 - d;
        if (s < 0 || s >= x->rank || seen[s])
            return kiln__ierr(c, KILN_ERR_SHAPE, "perm is not a permutation of 0..%d", x->rank - 1);
        seen[s] = true;
        o->dims[d] = x->dims[s];
    }
    if (x->rank <= 1)
        keep_values(c, x, o);
    return KILN_OK;
}

kiln_status kiln__si_expand(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0], t;
    kiln__vs_unknown(o, x->dtype);
    kiln__vs_unknown(&t, x->dtype);
    t.rank = kiln__in_shape(c, 1, t.dims);
    if (t.rank < 0)
        return KILN_OK;
    const kiln_vshape *both[2] = {x, &t};
    KILN_TRY(kiln__bcast(c, 2, both, o));
    kiln__elem_values(c, 1, &x, o);
    return KILN_OK;
}

kiln_status kiln__si_tile(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    kiln_sdim rep[KILN_MAX_DIMS];
    int n = kiln__in_shape(c, 1, rep);
    if (x->rank < 0)
        return n >= 0 ? (kiln__vs_fresh(c, o, x->dtype, n), KILN_OK) : KILN_OK;
    if (n >= 0 && n != x->rank)
        return kiln__ierr(c, KILN_ERR_SHAPE, "%d repeats for rank %d", n, x->rank);
    if (n < 0)
        return kiln__vs_fresh(c, o, x->dtype, x->rank), KILN_OK;
    o->rank = x->rank;
    for (int d = 0; d < x->rank; d++)
        o->dims[d] = kiln__sd_mul(c->st, x->dims[d], rep[d]);
    return KILN_OK;
}

/* Clamps a Slice bound b (already known) for a dim of size D. */
static kiln_sdim clamp_bound(kiln_ictx *c, kiln_sdim b, kiln_sdim D, bool neg_step)
{
    kiln_symtab *st = c->st;
    int64_t v;
    if (kiln__sd_is_const(st, b, &v)) {
        if (v >= (INT64_C(1) << 31))
            return neg_step ? kiln__sd_addc(st, D, -1) : D;
        if (v < -(INT64_C(1) << 31))
            return neg_step ? kiln__C(c, -1) : kiln__C(c, 0);
        if (v < 0)
            b = kiln__sd_addc(st, D, v);
    } else if (!kiln__sd_nonneg(st, b)) {
        return KILN_SDIM_NONE;
    }
    if (neg_step)
        return kiln__sd_min(st, kiln__sd_max(st, b, kiln__C(c, -1)), kiln__sd_addc(st, D, -1));
    return kiln__sd_min(st, kiln__sd_max(st, b, kiln__C(c, 0)), D);
}

kiln_status kiln__si_slice(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank < 0)
        return KILN_OK;
    kiln_sdim s[KILN_MAX_DIMS], e[KILN_MAX_DIMS], stp[KILN_MAX_DIMS];
    int64_t ax[KILN_MAX_DIMS];
    int ns, ne, na, nst;
    const int64_t *a;
    if (kiln__attr_ints(c->n, "starts", &a) >= 0) {   /* opset 1-9: attributes */
        ns = kiln__attr_ints(c->n, "starts", &a);
        for (int k = 0; k < ns && k < KILN_MAX_DIMS; k++)
            s[k] = kiln__C(c, a[k]);
        ne = kiln__attr_ints(c->n, "ends", &a);
        for (int k = 0; k < ne && k < KILN_MAX_DIMS; k++)
            e[k] = kiln__C(c, a[k]);
        na = ints_attr_or_input(c, "axes", 99, ax, KILN_MAX_DIMS);
        nst = -2;
    } else {
        ns = kiln__in_syms(c, 1, s, KILN_MAX_DIMS);
        ne = kiln__in_syms(c, 2, e, KILN_MAX_DIMS);
        na = IN(c, 3) ? kiln__in_ints(c, 3, ax, KILN_MAX_DIMS) : -2;
        nst = IN(c, 4) ? kiln__in_syms(c, 4, stp, KILN_MAX_DIMS) : -2;
    }
    if (ns < 0 || ne != ns || na == -1 || nst == -1 || (na >= 0 && na != ns) || (nst >= 0 && nst != ns) ||
        ns > x->rank)
        return kiln__vs_fresh(c, o, x->dtype, x->rank), KILN_OK;
    kiln__vs_set(o, x->dtype, x->rank, x->dims);
    int64_t step1[KILN_MAX_DIMS] = {0}, start1[KILN_MAX_DIMS] = {0};
    bool ok_vals = x->rank == 1 && x->hv;
    if (ok_vals)
        step1[0] = 1;
    bool seen[KILN_MAX_DIMS] = {0};
    for (int k = 0; k < ns; k++) {
        int d;
        KILN_TRY(kiln__norm_ax(c, na >= 0 ? ax[k] : k, x->rank, &d));
        if (seen[d])
            return kiln__ierr(c, KILN_ERR_SHAPE, "axis %d sliced twice", d);
        seen[d] = true;
        int64_t st = 1;
        if (nst >= 0 && !kiln__sd_is_const(c->st, stp[k], &st)) {
            o->dims[d] = kiln__sd_unknown(c->st);
            ok_vals = false;
            continue;
        }
        if (st == 0)
            return kiln__ierr(c, KILN_ERR_SHAPE, "step 0 on axis %d", d);
        kiln_sdim D = x->dims[d], b = clamp_bound(c, s[k], D, st < 0), en = clamp_bound(c, e[k], D, st < 0);
        if (b < 0 || en < 0) {
            o->dims[d] = kiln__sd_unknown(c->st);
            ok_vals = false;
            continue;
        }
        kiln_sdim span = st > 0 ? kiln__sd_sub(c->st, en, b) : kiln__sd_sub(c->st, b, en);
        o->dims[d] = kiln__sd_max(c->st, kiln__C(c, 0), kiln__sd_cdiv(c->st, span, kiln__C(c, st > 0 ? st : -st)));
        ok_vals &= kiln__sd_is_const(c->st, b, &start1[d]);
        step1[d] = st;
    }
    int64_t len;
    if (ok_vals && kiln__sd_is_const(c->st, o->dims[0], &len) && len <= KILN_SHAPE_MAXVAL) {
        for (int64_t k = 0; k < len; k++)
            o->val[k] = x->val[start1[0] + k * step1[0]];
        o->hv = true;
        o->nval = (int)len;
    }
    return KILN_OK;
}

kiln_status kiln__si_pad(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank < 0)
        return KILN_OK;
    kiln_sdim p[2 * KILN_MAX_DIMS];
    const int64_t *a;
    int np = kiln__attr_ints(c->n, "pads", &a);
    if (np >= 0 && np <= 2 * KILN_MAX_DIMS)
        for (int k = 0; k < np; k++)
            p[k] = kiln__C(c, a[k]);
    else
        np = kiln__in_syms(c, 1, p, 2 * KILN_MAX_DIMS);
    int64_t ax[KILN_MAX_DIMS];
    int na = IN(c, 3) ? kiln__in_ints(c, 3, ax, KILN_MAX_DIMS) : -2;
    if (np < 0 || na == -1)
        return kiln__vs_fresh(c, o, x->dtype, x->rank), KILN_OK;
    int n = na >= 0 ? na : x->rank;
    if (np != 2 * n)
        return kiln__ierr(c, KILN_ERR_SHAPE, "%d pads for %d axes", np, n);
    kiln__vs_set(o, x->dtype, x->rank, x->dims);
    for (int k = 0; k < n; k++) {
        int d;
        KILN_TRY(kiln__norm_ax(c, na >= 0 ? ax[k] : k, x->rank, &d));
        o->dims[d] = kiln__sd_add(c->st, o->dims[d], kiln__sd_add(c->st, p[k], p[k + n]));
    }
    return KILN_OK;
}

kiln_status kiln__si_split(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    int no = c->n_out;
    for (int k = 0; k < no; k++)
        kiln__vs_unknown(c->out[k], x->dtype);
    if (x->rank < 0)
        return KILN_OK;
    int ax;
    KILN_TRY(kiln__norm_ax(c, kiln__attr_i(c->n, "axis", 0), x->rank, &ax));
    kiln_sdim parts[KILN_SHAPE_MAXVAL];
    const int64_t *a;
    int n = kiln__attr_ints(c->n, "split", &a);
    if (n > KILN_SHAPE_MAXVAL)
        n = -1;
    else if (n >= 0)
        for (int k = 0; k < n; k++)
            parts[k] = kiln__C(c, a[k]);
    else if (IN(c, 1))
        n = kiln__in_syms(c, 1, parts, KILN_SHAPE_MAXVAL);
    else
        n = -2;
    if (n >= 0 && n != no)
        return kiln__ierr(c, KILN_ERR_SHAPE, "%d split sizes for %d outputs", n, no);
    if (no > KILN_SHAPE_MAXVAL)
        n = -1;   /* too many outputs to track: unknown sizes */
    kiln_sdim D = x->dims[ax];
    if (n == -2 && no > 0) {
        bool uneven = kiln__attr(c->n, "num_outputs") != NULL;   /* opset 18: the last chunk may be smaller */
        kiln_sdim chunk = uneven ? kiln__sd_cdiv(c->st, D, kiln__C(c, no)) : kiln__sd_div(c->st, D, kiln__C(c, no));
        for (int k = 0; k < no; k++)
            parts[k] = k < no - 1 || !uneven ? chunk : kiln__sd_sub(c->st, D, kiln__sd_mulc(c->st, chunk, no - 1));
    }
    for (int k = 0; k < no; k++) {
        kiln__vs_set(c->out[k], x->dtype, x->rank, x->dims);
        c->out[k]->dims[ax] = n == -1 ? kiln__sd_unknown(c->st) : parts[k];
    }
    return KILN_OK;
}

static kiln_status space_depth(kiln_ictx *c, bool to_space)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank < 0)
        return kiln__vs_fresh(c, o, x->dtype, 4), KILN_OK;
    if (x->rank != 4)
        return kiln__ierr(c, KILN_ERR_SHAPE, "input rank %d, expected 4", x->rank);
    int64_t b = kiln__attr_i(c->n, "blocksize", 0);
    if (b <= 0)
        return kiln__ierr(c, KILN_ERR_SHAPE, "blocksize %lld", (long long)b);
    kiln_sdim bs = kiln__C(c, b), bb = kiln__sd_mul(c->st, bs, bs);
    kiln__vs_set(o, x->dtype, 4, x->dims);
    if (to_space) {
        o->dims[1] = kiln__sd_div(c->st, x->dims[1], bb);
        o->dims[2] = kiln__sd_mul(c->st, x->dims[2], bs);
        o->dims[3] = kiln__sd_mul(c->st, x->dims[3], bs);
    } else {
        o->dims[1] = kiln__sd_mul(c->st, x->dims[1], bb);
        o->dims[2] = kiln__sd_div(c->st, x->dims[2], bs);
        o->dims[3] = kiln__sd_div(c->st, x->dims[3], bs);
    }
    return KILN_OK;
}

kiln_status kiln__si_d2s(kiln_ictx *c) { return space_depth(c, true); }
kiln_status kiln__si_s2d(kiln_ictx *c) { return space_depth(c, false); }

kiln_status kiln__si_range(kiln_ictx *c)
{
    const kiln_vshape *s0;
    KILN_TRY(kiln__need(c, 0, &s0));
    kiln_vshape *o = c->out[0];
    kiln_sdim a[3];
    int64_t step;
    kiln__vs_fresh(c, o, s0->dtype, 1);
    for (int k = 0; k < 3; k++)
        if (kiln__in_syms(c, k, &a[k], 1) != 1)
            return KILN_OK;
    if (!kiln__sd_is_const(c->st, a[2], &step) || step == 0)
        return KILN_OK;
    kiln_sdim span = kiln__sd_sub(c->st, a[1], a[0]);
    o->dims[0] = kiln__sd_max(c->st, kiln__C(c, 0), kiln__sd_cdiv(c->st, span, a[2]));
    int64_t n;
    if (kiln__dt_int_like(o->dtype) && kiln__sd_is_const(c->st, o->dims[0], &n) && n <= KILN_SHAPE_MAXVAL) {
        for (int64_t k = 0; k < n; k++)
            o->val[k].i = kiln__sd_add(c->st, a[0], kiln__sd_mulc(c->st, a[2], k));
        o->hv = true;
        o->nval = (int)n;
    }
    return KILN_OK;
}

kiln_status kiln__si_onehot(kiln_ictx *c)
{
    const kiln_vshape *ind, *vals;
    KILN_TRY(kiln__need(c, 0, &ind));
    KILN_TRY(kiln__need(c, 2, &vals));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, vals->dtype);
    kiln_sdim depth;
    if (ind->rank < 0)
        return KILN_OK;
    if (ind->rank + 1 > KILN_MAX_DIMS)
        return kiln__ierr(c, KILN_ERR_LIMIT, "output rank %d", ind->rank + 1);
    if (kiln__in_syms(c, 1, &depth, 1) != 1)
        depth = kiln__sd_unknown(c->st);
    int ax;
    KILN_TRY(kiln__norm_ax(c, kiln__attr_i(c->n, "axis", -1), ind->rank + 1, &ax));
    o->rank = ind->rank + 1;
    for (int d = 0, k = 0; d < o->rank; d++)
        o->dims[d] = d == ax ? depth : ind->dims[k++];
    return KILN_OK;
}

/* Number of nonzero elements of a tensor whose values are known; else a fresh unknown. */
static kiln_sdim count_nonzero(kiln_ictx *c, const kiln_vshape *s)
{
    if (!s || !s->hv)
        return kiln__sd_unknown(c->st);
    int64_t n = 0, v;
    for (int k = 0; k < s->nval; k++) {
        if (!kiln__dt_int_like(s->dtype))
            n += s->val[k].f != 0;
        else if (kiln__sd_is_const(c->st, s->val[k].i, &v))
            n += v != 0;
        else
            return kiln__sd_unknown(c->st);
    }
    return kiln__C(c, n);
}

kiln_status kiln__si_nonzero(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln__vs_fresh(c, c->out[0], KILN_DT_INT64, 2);
    if (x->rank >= 0)
        c->out[0]->dims[0] = kiln__C(c, x->rank);
    c->out[0]->dims[1] = count_nonzero(c, x);
    return KILN_OK;
}

kiln_status kiln__si_compress(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln_sdim n = count_nonzero(c, IN(c, 1));
    if (!kiln__attr(c->n, "axis"))
        return kiln__vs_set(o, x->dtype, 1, &n), KILN_OK;
    kiln__vs_set(o, x->dtype, x->rank, x->dims);
    if (x->rank < 0)
        return KILN_OK;
    int ax;
    KILN_TRY(kiln__norm_ax(c, kiln__attr_i(c->n, "axis", 0), x->rank, &ax));
    o->dims[ax] = n;
    return KILN_OK;
}

kiln_status kiln__si_topk(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_sdim k;
    if (IN(c, 1) ? kiln__in_syms(c, 1, &k, 1) != 1 : !kiln__attr(c->n, "k"))
        k = kiln__sd_unknown(c->st);
    else if (!IN(c, 1))
        k = kiln__C(c, kiln__attr_i(c->n, "k", 0));
    kiln__vs_set(c->out[0], x->dtype, x->rank, x->dims);
    if (x->rank >= 0) {
        int ax;
        KILN_TRY(kiln__norm_ax(c, kiln__attr_i(c->n, "axis", -1), x->rank, &ax));
        c->out[0]->dims[ax] = k;
    }
    if (c->n_out > 1)
        kiln__vs_set(c->out[1], KILN_DT_INT64, c->out[0]->rank, c->out[0]->dims);
    return KILN_OK;
}

kiln_status kiln__si_argmax(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, KILN_DT_INT64);
    if (x->rank < 0)
        return KILN_OK;
    int ax;
    KILN_TRY(kiln__norm_ax(c, kiln__attr_i(c->n, "axis", 0), x->rank, &ax));
    bool keep = kiln__attr_i(c->n, "keepdims", 1) != 0;
    o->rank = 0;
    for (int d = 0; d < x->rank; d++)
        if (d != ax || keep)
            o->dims[o->rank++] = d == ax ? kiln__C(c, 1) : x->dims[d];
    return KILN_OK;
}

kiln_status kiln__si_unique(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_sdim u = kiln__sd_unknown(c->st), len;
    bool has_axis = kiln__attr(c->n, "axis") != NULL;
    if (has_axis && x->rank >= 0) {
        int ax;
        KILN_TRY(kiln__norm_ax(c, kiln__attr_i(c->n, "axis", 0), x->rank, &ax));
        kiln__vs_set(c->out[0], x->dtype, x->rank, x->dims);
        c->out[0]->dims[ax] = u;
        len = x->dims[ax];
    } else {
        kiln__vs_set(c->out[0], x->dtype, has_axis ? -1 : 1, &u);
        len = kiln__numel(c, x);
    }
    for (int k = 1; k < c->n_out; k++)
        kiln__vs_set(c->out[k], KILN_DT_INT64, 1, k == 2 ? &len : &u);
    return KILN_OK;
}
