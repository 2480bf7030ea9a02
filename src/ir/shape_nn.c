/* Shape inference of reductions, linear algebra, convolution, pooling, resampling, recurrent,
 * detection, losses, signal processing, and kiln's fused ops (same geometry as the kernels in
 * src/backend/cpu/ref: k_conv.c, k_pool.c, k_resize.c, k_fused.c, ...). */
#include "shape_impl.h"
#include "fused.h"
#include <math.h>

#define SP_MAX (KILN_MAX_DIMS - 2)
#define GEOM_LIM (INT64_C(1) << 31)   /* bound on kernel/stride/pad/dilation values (no overflow) */

/* ---- reductions ---- */

static bool reduce_values(kiln_ictx *c, const kiln_vshape *x, kiln_vshape *o)
{
    if (!x->hv || x->rank != 1 || !kiln__dt_int_like(x->dtype) || o->rank > 1)
        return false;
    kiln_sdim r = KILN_SDIM_NONE;
    for (int k = 0; k < x->nval; k++) {
        kiln_sdim v = x->val[k].i;
        switch (c->n->op) {
        case KILN_OP_ReduceProd: r = k ? kiln__sd_mul(c->st, r, v) : v; break;
        case KILN_OP_ReduceSum: r = k ? kiln__sd_add(c->st, r, v) : v; break;
        case KILN_OP_ReduceMax: r = k ? kiln__sd_max(c->st, r, v) : v; break;
        case KILN_OP_ReduceMin: r = k ? kiln__sd_min(c->st, r, v) : v; break;
        default: return false;
        }
    }
    if (x->nval == 0)
        return false;
    o->hv = true;
    o->nval = 1;
    o->val[0].i = r;
    return true;
}

kiln_status kiln__si_reduce(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    bool keep = kiln__attr_i(c->n, "keepdims", 1) != 0;
    int64_t ax[KILN_MAX_DIMS];
    const int64_t *a;
    int n = kiln__attr_ints(c->n, "axes", &a);
    if (n > KILN_MAX_DIMS)
        return kiln__ierr(c, KILN_ERR_SHAPE, "%d axes", n);
    if (n >= 0)
        memcpy(ax, a, sizeof *a * (size_t)n);
    else if (IN(c, 1))
        n = kiln__in_ints(c, 1, ax, KILN_MAX_DIMS);
    else
        n = 0;
    if (x->rank < 0)
        return KILN_OK;
    if (n < 0)
        return keep ? (kiln__vs_fresh(c, o, x->dtype, x->rank), KILN_OK) : KILN_OK;
    bool m[KILN_MAX_DIMS] = {0};
    if (n == 0 && kiln__attr_i(c->n, "noop_with_empty_axes", 0)) {
        kiln__vs_set(o, x->dtype, x->rank, x->dims);
        return KILN_OK;
    }
    for (int k = 0; k < n; k++) {
        int d;
        KILN_TRY(kiln__norm_ax(c, ax[k], x->rank, &d));
        m[d] = true;
    }
    o->rank = 0;
    for (int d = 0; d < x->rank; d++)
        if (!(n == 0 || m[d]) || keep)
            o->dims[o->rank++] = (n == 0 || m[d]) ? kiln__C(c, 1) : x->dims[d];
    reduce_values(c, x, o);
    return KILN_OK;
}

/* ---- matmul family ---- */

/* Shape of MatMul(a, b) with numpy semantics (1-D operands promoted and the dim removed). */
static kiln_status matmul_shape(kiln_ictx *c, const kiln_vshape *a, const kiln_vshape *b, kiln_dtype dt, kiln_vshape *o)
{
    kiln__vs_unknown(o, dt);
    if (a->rank < 0 || b->rank < 0)
        return KILN_OK;
    if (a->rank == 0 || b->rank == 0)
        return kiln__ierr(c, KILN_ERR_SHAPE, "MatMul of a scalar");
    kiln_vshape ab, bb;
    kiln_sdim one = kiln__C(c, 1);
    kiln__vs_set(&ab, dt, a->rank, a->dims);
    kiln__vs_set(&bb, dt, b->rank, b->dims);
    if (a->rank == 1) {
        ab.rank = 2;
        ab.dims[0] = one;
        ab.dims[1] = a->dims[0];
    }
    if (b->rank == 1) {
        bb.rank = 2;
        bb.dims[0] = b->dims[0];
        bb.dims[1] = one;
    }
    kiln_sdim k1 = ab.dims[ab.rank - 1], k2 = bb.dims[bb.rank - 2];
    int64_t x, y;
    if (kiln__sd_is_const(c->st, k1, &x) && kiln__sd_is_const(c->st, k2, &y) && x != y)
        return kiln__ierr(c, KILN_ERR_SHAPE, "inner dims differ: %lld vs %lld", (long long)x, (long long)y);
    kiln_vshape ba = ab, bbb = bb;
    ba.rank -= 2;
    bbb.rank -= 2;
    const kiln_vshape *both[2] = {&ba, &bbb};
    KILN_TRY(kiln__bcast(c, 2, both, o));
    if (o->rank + 2 > KILN_MAX_DIMS)
        return kiln__ierr(c, KILN_ERR_LIMIT, "output rank %d", o->rank + 2);
    if (a->rank > 1)
        o->dims[o->rank++] = ab.dims[ab.rank - 2];
    if (b->rank > 1)
        o->dims[o->rank++] = bb.dims[bb.rank - 1];
    return KILN_OK;
}

kiln_status kiln__si_matmul(kiln_ictx *c)
{
    const kiln_vshape *a, *b;
    KILN_TRY(kiln__need(c, 0, &a));
    KILN_TRY(kiln__need(c, 1, &b));
    return matmul_shape(c, a, b, a->dtype, c->out[0]);
}

kiln_status kiln__si_matmulint(kiln_ictx *c)
{
    const kiln_vshape *a, *b;
    KILN_TRY(kiln__need(c, 0, &a));
    KILN_TRY(kiln__need(c, 1, &b));
    return matmul_shape(c, a, b, KILN_DT_INT32, c->out[0]);
}

/* The output dtype of a quantized node: float32 with the internal attribute kiln_out_float
 * (docs/PRECISION.md, INT8 kernels), else that of y_zero_point (input yz), else of x. */
static kiln_dtype q_out_dtype(const kiln_ictx *c, int yz, kiln_dtype x)
{
    const kiln_vshape *zp = IN(c, yz);
    return kiln__attr_i(c->n, "kiln_out_float", 0) ? KILN_DT_FLOAT32 : zp ? zp->dtype : x;
}

kiln_status kiln__si_qlinearmatmul(kiln_ictx *c)
{
    const kiln_vshape *a, *b;
    KILN_TRY(kiln__need(c, 0, &a));
    KILN_TRY(kiln__need(c, 3, &b));
    return matmul_shape(c, a, b, q_out_dtype(c, 7, a->dtype), c->out[0]);
}

/* Gemm's [M, N] from A and B (transA / transB), output dtype dt */
static kiln_status gemm_shape(kiln_ictx *c, const kiln_vshape *a, const kiln_vshape *b, kiln_dtype dt)
{
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, dt);
    if (a->rank < 0 || b->rank < 0)
        return kiln__vs_fresh(c, o, dt, 2), KILN_OK;
    if (a->rank != 2 || b->rank != 2)
        return kiln__ierr(c, KILN_ERR_SHAPE, "inputs of rank %d and %d, expected 2", a->rank, b->rank);
    bool ta = kiln__attr_i(c->n, "transA", 0) != 0, tb = kiln__attr_i(c->n, "transB", 0) != 0;
    kiln_sdim d[2] = {a->dims[ta ? 1 : 0], b->dims[tb ? 0 : 1]};
    int64_t x, y;
    if (kiln__sd_is_const(c->st, a->dims[ta ? 0 : 1], &x) && kiln__sd_is_const(c->st, b->dims[tb ? 1 : 0], &y) && x != y)
        return kiln__ierr(c, KILN_ERR_SHAPE, "inner dims differ: %lld vs %lld", (long long)x, (long long)y);
    kiln__vs_set(o, dt, 2, d);
    return KILN_OK;
}

kiln_status kiln__si_gemm(kiln_ictx *c)
{
    const kiln_vshape *a, *b;
    KILN_TRY(kiln__need(c, 0, &a));
    KILN_TRY(kiln__need(c, 1, &b));
    return gemm_shape(c, a, b, a->dtype);
}

/* com.microsoft QGemm: Gemm of A (input 0) and B (input 3); float32 without y_scale (input 7) */
kiln_status kiln__si_qgemm(kiln_ictx *c)
{
    const kiln_vshape *a, *b;
    KILN_TRY(kiln__need(c, 0, &a));
    KILN_TRY(kiln__need(c, 3, &b));
    return gemm_shape(c, a, b, IN(c, 7) ? q_out_dtype(c, 8, a->dtype) : KILN_DT_FLOAT32);
}

/* Parses one einsum term at *p (up to ',', "->" or the end) into labels: letters, -1 for "...".
 * Returns the count, or -1 if malformed (bad character, lone '.', two ellipses, too long). */
static int einsum_term(const char **p, int *lab)
{
    int n = 0, ell = 0;
    const char *q = *p;
    for (; *q && *q != ',' && !(q[0] == '-' && q[1] == '>'); q++) {
        if (*q == ' ')
            continue;
        if (n >= 2 * KILN_MAX_DIMS)
            return -1;
        if (*q == '.') {
            if (q[1] != '.' || q[2] != '.' || ell++)
                return -1;
            lab[n++] = -1;
            q += 2;
        } else if ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')) {
            lab[n++] = (unsigned char)*q;
        } else {
            return -1;
        }
    }
    *p = q;
    return n;
}

kiln_status kiln__si_einsum(kiln_ictx *c)
{
    const char *eq = kiln__attr_s(c->n, "equation", NULL);
    const kiln_vshape *x0;
    KILN_TRY(kiln__need(c, 0, &x0));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x0->dtype);
    if (!eq)
        return kiln__ierr(c, KILN_ERR_SHAPE, "no equation");
    kiln_sdim letter[128];
    int count[128] = {0}, lab[2 * KILN_MAX_DIMS];
    kiln_vshape ell[16];
    const kiln_vshape *ellp[16];
    int nell = 0;
    const char *p = eq;
    for (int term = 0;; term++) {
        int nl = einsum_term(&p, lab);
        if (nl < 0)
            return kiln__ierr(c, KILN_ERR_SHAPE, "malformed equation '%s'", eq);
        const kiln_vshape *x = IN(c, term);
        if (!x || term >= 16)
            return kiln__ierr(c, KILN_ERR_SHAPE, "equation '%s' has more terms than inputs", eq);
        if (x->rank < 0)
            return KILN_OK;
        bool has_ell = false;
        for (int k = 0; k < nl; k++)
            has_ell |= lab[k] < 0;
        int nel = x->rank - (nl - has_ell), d = 0;
        if (nel < 0 || (nel > 0 && !has_ell))
            return kiln__ierr(c, KILN_ERR_SHAPE, "term %d has %d labels for rank %d", term, nl, x->rank);
        for (int k = 0; k < nl; k++) {
            if (lab[k] < 0) {
                kiln__vs_set(&ell[nell], x->dtype, nel, x->dims + d);
                ellp[nell] = &ell[nell];
                nell++;
                d += nel;
                continue;
            }
            if (!count[lab[k]] || kiln__is_c(c, letter[lab[k]], 1))
                letter[lab[k]] = x->dims[d];
            count[lab[k]]++;
            d++;
        }
        if (*p != ',')
            break;
        p++;
    }
    kiln_vshape eb;
    kiln__vs_unknown(&eb, x0->dtype);
    eb.rank = 0;
    if (nell)
        KILN_TRY(kiln__bcast(c, nell, ellp, &eb));
    o->rank = 0;
    if (*p) {   /* explicit output after "->" */
        p += 2;
        int nl = einsum_term(&p, lab);
        if (nl < 0 || *p)
            return kiln__ierr(c, KILN_ERR_SHAPE, "malformed equation '%s'", eq);
        for (int k = 0; k < nl; k++) {
            if (lab[k] >= 0 && !count[lab[k]])
                return kiln__ierr(c, KILN_ERR_SHAPE, "output label '%c' not in the inputs", lab[k]);
            for (int j = 0; j < (lab[k] < 0 ? eb.rank : 1); j++) {
                if (o->rank >= KILN_MAX_DIMS)
                    return kiln__ierr(c, KILN_ERR_LIMIT, "output rank above %d", KILN_MAX_DIMS);
                o->dims[o->rank++] = lab[k] < 0 ? eb.dims[j] : letter[lab[k]];
            }
        }
    } else {   /* implicit: broadcast dims, then the labels used once, alphabetically */
        for (int k = 0; k < eb.rank; k++)
            o->dims[o->rank++] = eb.dims[k];
        for (int ch = 0; ch < 128; ch++)
            if (count[ch] == 1 && o->rank < KILN_MAX_DIMS)
                o->dims[o->rank++] = letter[ch];
    }
    return KILN_OK;
}

/* ---- convolution and pooling ---- */

enum { AP_NOTSET, AP_VALID, AP_SAME_UPPER, AP_SAME_LOWER };

static int auto_pad(const kiln_node *n)
{
    const char *s = kiln__attr_s(n, "auto_pad", "NOTSET");
    return !strcmp(s, "VALID") ? AP_VALID : !strcmp(s, "SAME_UPPER") ? AP_SAME_UPPER
         : !strcmp(s, "SAME_LOWER") ? AP_SAME_LOWER : AP_NOTSET;
}

/* attribute ints of length n (or def) */
static kiln_status geom_ints(const kiln_ictx *c, const char *name, int n, int64_t def, int64_t *v)
{
    const int64_t *a;
    int k = kiln__attr_ints(c->n, name, &a);
    if (k >= 0 && k != n)
        return kiln__ierr(c, KILN_ERR_SHAPE, "attribute '%s' has %d values, expected %d", name, k, n);
    for (int i = 0; i < n; i++) {
        v[i] = k >= 0 ? a[i] : def;
        if (v[i] < -GEOM_LIM || v[i] > GEOM_LIM)
            return kiln__ierr(c, KILN_ERR_SHAPE, "attribute '%s' value %lld is out of range", name, (long long)v[i]);
    }
    return KILN_OK;
}

/* Spatial output sizes of a sliding window over x's dims 2.. with kernel k[]. */
static kiln_status window_out(kiln_ictx *c, const kiln_vshape *x, const int64_t *k, bool ceil_mode, kiln_sdim *out)
{
    int nsp = x->rank - 2;
    int64_t s[SP_MAX], d[SP_MAX], pads[2 * SP_MAX];
    KILN_TRY(geom_ints(c, "strides", nsp, 1, s));
    KILN_TRY(geom_ints(c, "dilations", nsp, 1, d));
    KILN_TRY(geom_ints(c, "pads", 2 * nsp, 0, pads));
    int ap = auto_pad(c->n);
    for (int i = 0; i < nsp; i++) {
        if (s[i] < 1 || d[i] < 1 || k[i] < 1)
            return kiln__ierr(c, KILN_ERR_SHAPE, "stride %lld, dilation %lld, kernel %lld on axis %d", (long long)s[i],
                              (long long)d[i], (long long)k[i], i + 2);
        kiln_sdim in = x->dims[2 + i], S = kiln__C(c, s[i]);
        if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
            out[i] = kiln__sd_cdiv(c->st, in, S);
            continue;
        }
        int64_t pb = ap == AP_VALID ? 0 : pads[i], pe = ap == AP_VALID ? 0 : pads[nsp + i];
        kiln_sdim span = kiln__sd_addc(c->st, in, pb + pe - ((k[i] - 1) * d[i] + 1));
        int64_t sv;
        if (kiln__sd_is_const(c->st, span, &sv) && sv < 0)
            return kiln__ierr(c, KILN_ERR_SHAPE, "kernel is larger than the padded input on axis %d", i + 2);
        if (ceil_mode && ap == AP_NOTSET) {
            kiln_sdim o = kiln__sd_addc(c->st, kiln__sd_cdiv(c->st, span, S), 1);
            /* a window may not start inside the end padding */
            out[i] = kiln__sd_min(c->st, o, kiln__sd_max(c->st, kiln__C(c, 1),
                                                         kiln__sd_cdiv(c->st, kiln__sd_addc(c->st, in, pb), S)));
        } else {
            out[i] = kiln__sd_addc(c->st, kiln__sd_div(c->st, span, S), 1);
        }
    }
    return KILN_OK;
}

static kiln_status conv_shape(kiln_ictx *c, int xi, int wi, kiln_dtype dt, kiln_vshape *o)
{
    const kiln_vshape *x, *w;
    KILN_TRY(kiln__need(c, xi, &x));
    KILN_TRY(kiln__need(c, wi, &w));
    kiln__vs_unknown(o, dt);
    if (x->rank < 0 || w->rank < 0) {
        int r = x->rank >= 0 ? x->rank : w->rank;
        if (r >= 0)
            kiln__vs_fresh(c, o, dt, r);
        return KILN_OK;
    }
    if (x->rank < 3 || w->rank != x->rank)
        return kiln__ierr(c, KILN_ERR_SHAPE, "X of rank %d, W of rank %d", x->rank, w->rank);
    int nsp = x->rank - 2;
    int64_t k[SP_MAX], g = kiln__attr_i(c->n, "group", 1), cw, cx;
    for (int i = 0; i < nsp; i++)
        if (!kiln__sd_is_const(c->st, w->dims[2 + i], &k[i]) || k[i] > GEOM_LIM)
            return kiln__vs_fresh(c, o, dt, x->rank), KILN_OK;
    if (g < 1 || g > GEOM_LIM)
        return kiln__ierr(c, KILN_ERR_SHAPE, "group %lld", (long long)g);
    if (kiln__sd_is_const(c->st, w->dims[1], &cw) && kiln__sd_is_const(c->st, x->dims[1], &cx) && cw <= GEOM_LIM &&
        cw * g != cx)
        return kiln__ierr(c, KILN_ERR_SHAPE, "X has %lld channels, W expects %lld x group %lld", (long long)cx,
                          (long long)cw, (long long)g);
    o->rank = x->rank;
    o->dims[0] = x->dims[0];
    o->dims[1] = w->dims[0];
    return window_out(c, x, k, false, o->dims + 2);
}

kiln_status kiln__si_conv(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    return conv_shape(c, 0, 1, x->dtype, c->out[0]);
}

kiln_status kiln__si_convint(kiln_ictx *c) { return conv_shape(c, 0, 1, KILN_DT_INT32, c->out[0]); }

kiln_status kiln__si_qlinearconv(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    return conv_shape(c, 0, 3, q_out_dtype(c, 7, x->dtype), c->out[0]);
}

/* QLinearConvAdd: QLinearConv's shape; float32 with kiln_res_float, else C_zero_point's dtype (13), else that of
 * input 7 (y_zero_point; with kiln_res_once C's own) */
kiln_status kiln__si_qlinearconv_add(kiln_ictx *c)
{
    const kiln_vshape *x, *cz = IN(c, 13);
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_dtype dt = kiln__attr_i(c->n, "kiln_res_float", 0) ? KILN_DT_FLOAT32 : cz ? cz->dtype : q_out_dtype(c, 7, x->dtype);
    return conv_shape(c, 0, 3, dt, c->out[0]);
}

/* QLinearConvSum: QLinearConv's shape (the second convolution's output has it: the kernels check), C_zero_point's
 * dtype (7), else x's */
kiln_status kiln__si_qlinearconv_sum(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    return conv_shape(c, 0, 3, q_out_dtype(c, 7, x->dtype), c->out[0]);
}

kiln_status kiln__si_convtranspose(kiln_ictx *c)
{
    const kiln_vshape *x, *w;
    KILN_TRY(kiln__need(c, 0, &x));
    KILN_TRY(kiln__need(c, 1, &w));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank < 0)
        return KILN_OK;
    if (x->rank < 3 || w->rank != x->rank)
        return kiln__ierr(c, KILN_ERR_SHAPE, "X of rank %d, W of rank %d", x->rank, w->rank);
    int nsp = x->rank - 2, ap = auto_pad(c->n);
    int64_t k[SP_MAX], s[SP_MAX], d[SP_MAX], pads[2 * SP_MAX], opad[SP_MAX];
    KILN_TRY(geom_ints(c, "strides", nsp, 1, s));
    KILN_TRY(geom_ints(c, "dilations", nsp, 1, d));
    KILN_TRY(geom_ints(c, "pads", 2 * nsp, 0, pads));
    KILN_TRY(geom_ints(c, "output_padding", nsp, 0, opad));
    /* the kernel's check (ref/k_conv_transpose.c convt_setup), here so that a model with it fails at load; before the
     * kernel dims are needed, as it does not depend on them */
    for (int i = 0; i < nsp; i++)
        if (s[i] >= 1 && d[i] >= 1 && opad[i] >= (s[i] > d[i] ? s[i] : d[i]))
            return kiln__ierr(c, KILN_ERR_INVALID_ARG,
                              "attribute 'output_padding' value %lld on axis %d must be less than the stride (%lld) "
                              "or the dilation (%lld)",
                              (long long)opad[i], i + 2, (long long)s[i], (long long)d[i]);
    for (int i = 0; i < nsp; i++)
        if (!kiln__sd_is_const(c->st, w->dims[2 + i], &k[i]) || k[i] > GEOM_LIM)
            return kiln__vs_fresh(c, o, x->dtype, x->rank), KILN_OK;
    const int64_t *os;
    int nos = kiln__attr_ints(c->n, "output_shape", &os);
    if (nos >= 0 && nos != nsp && nos != nsp + 2)
        return kiln__ierr(c, KILN_ERR_SHAPE, "output_shape has %d values", nos);
    o->rank = x->rank;
    o->dims[0] = x->dims[0];
    o->dims[1] = kiln__sd_mulc(c->st, w->dims[1], kiln__attr_i(c->n, "group", 1));
    for (int i = 0; i < nsp; i++) {
        kiln_sdim in = x->dims[2 + i];
        if (nos >= 0)
            o->dims[2 + i] = kiln__C(c, os[nos - nsp + i]);
        else if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER)
            o->dims[2 + i] = kiln__sd_mulc(c->st, in, s[i]);
        else {
            int64_t pb = ap == AP_VALID ? 0 : pads[i] + pads[nsp + i];
            kiln_sdim full = kiln__sd_addc(c->st, kiln__sd_mulc(c->st, kiln__sd_addc(c->st, in, -1), s[i]),
                                           opad[i] + (k[i] - 1) * d[i] + 1);
            o->dims[2 + i] = kiln__sd_addc(c->st, full, -pb);
        }
    }
    return KILN_OK;
}

kiln_status kiln__si_pool(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank >= 0) {
        if (x->rank < 3)
            return kiln__ierr(c, KILN_ERR_SHAPE, "input rank %d, expected >= 3", x->rank);
        int64_t k[SP_MAX];
        const int64_t *ks;
        if (kiln__attr_ints(c->n, "kernel_shape", &ks) != x->rank - 2)
            return kiln__ierr(c, KILN_ERR_SHAPE, "kernel_shape missing or of the wrong length");
        KILN_TRY(geom_ints(c, "kernel_shape", x->rank - 2, 1, k));
        o->rank = x->rank;
        o->dims[0] = x->dims[0];
        o->dims[1] = x->dims[1];
        KILN_TRY(window_out(c, x, k, kiln__attr_i(c->n, "ceil_mode", 0) != 0, o->dims + 2));
    }
    if (c->n_out > 1)
        kiln__vs_set(c->out[1], KILN_DT_INT64, o->rank, o->dims);
    return KILN_OK;
}

kiln_status kiln__si_globalpool(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln__vs_set(c->out[0], x->dtype, x->rank, x->dims);
    if (x->rank >= 0 && x->rank < 2)
        return kiln__ierr(c, KILN_ERR_SHAPE, "input rank %d, expected >= 2", x->rank);
    for (int d = 2; d < x->rank; d++)
        c->out[0]->dims[d] = kiln__C(c, 1);
    return KILN_OK;
}

kiln_status kiln__si_maxunpool(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (IN(c, 2)) {
        o->rank = kiln__in_shape(c, 2, o->dims);
        return KILN_OK;
    }
    if (x->rank < 3)
        return x->rank < 0 ? KILN_OK : kiln__ierr(c, KILN_ERR_SHAPE, "input rank %d", x->rank);
    int nsp = x->rank - 2;
    int64_t k[SP_MAX], s[SP_MAX], pads[2 * SP_MAX];
    KILN_TRY(geom_ints(c, "kernel_shape", nsp, 1, k));
    KILN_TRY(geom_ints(c, "strides", nsp, 1, s));
    KILN_TRY(geom_ints(c, "pads", 2 * nsp, 0, pads));
    kiln__vs_set(o, x->dtype, x->rank, x->dims);
    for (int i = 0; i < nsp; i++)
        o->dims[2 + i] = kiln__sd_addc(c->st, kiln__sd_mulc(c->st, kiln__sd_addc(c->st, x->dims[2 + i], -1), s[i]),
                                       k[i] - pads[i] - pads[nsp + i]);
    return KILN_OK;
}

/* ---- resampling ---- */

/* floor(D * scale) for a float scale: exact through a small rational p/q when there is one. */
static kiln_sdim scale_dim(kiln_ictx *c, kiln_sdim D, double scale)
{
    int64_t v;
    if (kiln__sd_is_const(c->st, D, &v)) {
        double r = floor((double)v * scale);
        return fabs(r) < 9e18 ? kiln__C(c, (int64_t)r) : kiln__sd_unknown(c->st);
    }
    for (int64_t q = 1; q <= 64; q++) {
        double p = scale * (double)q;
        if (fabs(p - nearbyint(p)) < 1e-9 && fabs(p) < 1e9)
            return kiln__sd_div(c->st, kiln__sd_mulc(c->st, D, (int64_t)nearbyint(p)), kiln__C(c, q));
    }
    return kiln__sd_unknown(c->st);
}

static bool in_floats(const kiln_ictx *c, int i, double *v, int *n)
{
    const kiln_vshape *s = IN(c, i);
    if (!s || !s->hv || kiln__dt_int_like(s->dtype))
        return false;
    *n = s->nval;
    for (int k = 0; k < s->nval; k++)
        v[k] = s->val[k].f;
    return true;
}

kiln_status kiln__si_resize(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank < 0)
        return KILN_OK;
    kiln__vs_set(o, x->dtype, x->rank, x->dims);
    int64_t ax[KILN_MAX_DIMS];
    const int64_t *a;
    int na = kiln__attr_ints(c->n, "axes", &a);
    if (na > x->rank)
        return kiln__ierr(c, KILN_ERR_SHAPE, "%d axes for rank %d", na, x->rank);
    int n = na >= 0 ? na : x->rank;
    for (int k = 0; k < n; k++) {
        int d;
        KILN_TRY(kiln__norm_ax(c, na >= 0 ? a[k] : k, x->rank, &d));
        ax[k] = d;
    }
    kiln_sdim sizes[KILN_MAX_DIMS];
    double sc[KILN_SHAPE_MAXVAL];
    int ns;
    const kiln_vshape *szin = c->n->opset >= 11 ? IN(c, 3) : NULL;
    const char *policy = kiln__attr_s(c->n, "keep_aspect_ratio_policy", "stretch");
    /* the spec allows only one of scales and sizes (an empty tensor stands for absent); ONNX
     * Runtime rejects both, and the kernel would silently use sizes */
    const kiln_vshape *scin = c->n->opset >= 11 ? IN(c, 2) : NULL;
    int64_t scn, szn;
    if (scin && szin && scin->rank == 1 && szin->rank == 1 && kiln__sd_is_const(c->st, scin->dims[0], &scn) &&
        kiln__sd_is_const(c->st, szin->dims[0], &szn) && scn > 0 && szn > 0)
        return kiln__ierr(c, KILN_ERR_SHAPE, "only one of 'scales' and 'sizes' may be given, got both");
    if (szin && szin->rank == 1 && !kiln__is_c(c, szin->dims[0], 0)) {
        ns = kiln__in_shape(c, 3, sizes);
        if (ns != n || strcmp(policy, "stretch"))
            return kiln__vs_fresh(c, o, x->dtype, x->rank), KILN_OK;
        for (int k = 0; k < n; k++)
            o->dims[ax[k]] = sizes[k];
        return KILN_OK;
    }
    if (!in_floats(c, c->n->opset >= 11 ? 2 : 1, sc, &ns) || ns != n)
        return kiln__vs_fresh(c, o, x->dtype, x->rank), KILN_OK;
    for (int k = 0; k < n; k++)
        o->dims[ax[k]] = scale_dim(c, x->dims[ax[k]], sc[k]);
    return KILN_OK;
}

kiln_status kiln__si_upsample(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_set(o, x->dtype, x->rank, x->dims);
    double sc[KILN_SHAPE_MAXVAL];
    int ns = -1;
    const float *fa;
    int nf = kiln__attr_floats(c->n, "scales", &fa);
    if (nf >= 0 && nf <= KILN_SHAPE_MAXVAL)
        for (ns = 0; ns < nf; ns++)
            sc[ns] = fa[ns];
    else if (!in_floats(c, 1, sc, &ns))
        ns = -1;
    if (x->rank < 0)
        return KILN_OK;
    if (ns != x->rank)
        return kiln__vs_fresh(c, o, x->dtype, x->rank), KILN_OK;
    for (int k = 0; k < x->rank; k++)
        o->dims[k] = scale_dim(c, x->dims[k], sc[k]);
    return KILN_OK;
}

/* ---- recurrent ---- */

kiln_status kiln__si_rnn(kiln_ictx *c)
{
    const kiln_vshape *x, *w;
    KILN_TRY(kiln__need(c, 0, &x));
    KILN_TRY(kiln__need(c, 1, &w));
    bool layout = kiln__attr_i(c->n, "layout", 0) != 0;
    int64_t hs = kiln__attr_i(c->n, "hidden_size", -1);
    kiln_sdim nd = kiln__C(c, !strcmp(kiln__attr_s(c->n, "direction", "forward"), "bidirectional") ? 2 : 1);
    kiln_sdim H = hs > 0 ? kiln__C(c, hs) : KILN_SDIM_NONE;
    if (hs <= 0 && w->rank == 3) {
        int gates = c->n->op == KILN_OP_LSTM ? 4 : c->n->op == KILN_OP_GRU ? 3 : 1;
        H = kiln__sd_div(c->st, w->dims[1], kiln__C(c, gates));
    }
    for (int k = 0; k < c->n_out; k++)
        kiln__vs_unknown(c->out[k], x->dtype);
    if (x->rank < 0 || H < 0)
        return KILN_OK;
    if (x->rank != 3)
        return kiln__ierr(c, KILN_ERR_SHAPE, "X has rank %d, expected 3", x->rank);
    kiln_sdim seq = x->dims[layout ? 1 : 0], batch = x->dims[layout ? 0 : 1];
    kiln_sdim y[4] = {seq, nd, batch, H}, yl[4] = {batch, seq, nd, H};
    kiln_sdim yh[3] = {nd, batch, H}, yhl[3] = {batch, nd, H};
    kiln__vs_set(c->out[0], x->dtype, 4, layout ? yl : y);
    for (int k = 1; k < c->n_out && k < 3; k++)
        kiln__vs_set(c->out[k], x->dtype, 3, layout ? yhl : yh);
    return KILN_OK;
}

/* ---- detection, losses, signal, misc ---- */

kiln_status kiln__si_nms(kiln_ictx *c)
{
    kiln__vs_fresh(c, c->out[0], KILN_DT_INT64, 2);
    c->out[0]->dims[1] = kiln__C(c, 3);
    return KILN_OK;
}

kiln_status kiln__si_roialign(kiln_ictx *c)
{
    const kiln_vshape *x, *rois;
    KILN_TRY(kiln__need(c, 0, &x));
    KILN_TRY(kiln__need(c, 1, &rois));
    kiln_sdim d[4] = {rois->rank >= 1 ? rois->dims[0] : kiln__sd_unknown(c->st),
                      x->rank >= 2 ? x->dims[1] : kiln__sd_unknown(c->st),
                      kiln__C(c, kiln__attr_i(c->n, "output_height", 1)), kiln__C(c, kiln__attr_i(c->n, "output_width", 1))};
    kiln__vs_set(c->out[0], x->dtype, 4, d);
    return KILN_OK;
}

static kiln_status loss_shape(kiln_ictx *c, kiln_vshape *o)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln__vs_unknown(o, x->dtype);
    if (strcmp(kiln__attr_s(c->n, "reduction", "mean"), "none")) {
        o->rank = 0;
        return KILN_OK;
    }
    if (x->rank < 2)
        return x->rank < 0 ? KILN_OK : kiln__ierr(c, KILN_ERR_SHAPE, "input rank %d", x->rank);
    o->rank = x->rank - 1;
    o->dims[0] = x->dims[0];
    for (int d = 2; d < x->rank; d++)
        o->dims[d - 1] = x->dims[d];
    return KILN_OK;
}

kiln_status kiln__si_nllloss(kiln_ictx *c) { return loss_shape(c, c->out[0]); }

kiln_status kiln__si_sceloss(kiln_ictx *c)
{
    KILN_TRY(loss_shape(c, c->out[0]));
    if (c->n_out > 1)
        kiln__vs_set(c->out[1], IN(c, 0)->dtype, IN(c, 0)->rank, IN(c, 0)->dims);
    return KILN_OK;
}

kiln_status kiln__si_gridsample(kiln_ictx *c)
{
    const kiln_vshape *x, *g;
    KILN_TRY(kiln__need(c, 0, &x));
    KILN_TRY(kiln__need(c, 1, &g));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank < 0 || g->rank < 0)
        return KILN_OK;
    if (x->rank < 3 || g->rank != x->rank)
        return kiln__ierr(c, KILN_ERR_SHAPE, "X of rank %d, grid of rank %d", x->rank, g->rank);
    o->rank = x->rank;
    o->dims[0] = x->dims[0];
    o->dims[1] = x->dims[1];
    for (int d = 1; d < g->rank - 1; d++)
        o->dims[d + 1] = g->dims[d];
    return KILN_OK;
}

kiln_status kiln__si_dft(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_set(o, x->dtype, x->rank, x->dims);
    if (x->rank < 2)
        return x->rank < 0 ? KILN_OK : kiln__ierr(c, KILN_ERR_SHAPE, "input rank %d", x->rank);
    int64_t axv = kiln__attr_i(c->n, "axis", 1);
    if (c->n->opset >= 20) {
        int64_t t;
        axv = IN(c, 2) ? (kiln__in_ints(c, 2, &t, 1) == 1 ? t : INT64_MIN) : -2;
        if (axv == INT64_MIN)
            return kiln__vs_fresh(c, o, x->dtype, x->rank), KILN_OK;
    }
    int ax;
    KILN_TRY(kiln__norm_ax(c, axv, x->rank, &ax));
    kiln_sdim n = x->dims[ax];
    if (IN(c, 1) && kiln__in_syms(c, 1, &n, 1) != 1)
        n = kiln__sd_unknown(c->st);
    bool onesided = kiln__attr_i(c->n, "onesided", 0) != 0;
    o->dims[ax] = onesided ? kiln__sd_addc(c->st, kiln__sd_div(c->st, n, kiln__C(c, 2)), 1) : n;
    o->dims[x->rank - 1] = kiln__C(c, 2);
    return KILN_OK;
}

kiln_status kiln__si_stft(kiln_ictx *c)
{
    const kiln_vshape *x, *win = IN(c, 2);
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_vshape *o = c->out[0];
    kiln__vs_fresh(c, o, x->dtype, 4);
    o->dims[3] = kiln__C(c, 2);
    if (x->rank != 3)
        return x->rank < 0 ? KILN_OK : kiln__ierr(c, KILN_ERR_SHAPE, "signal rank %d, expected 3", x->rank);
    o->dims[0] = x->dims[0];
    kiln_sdim step, fl;
    if (kiln__in_syms(c, 1, &step, 1) != 1)
        return KILN_OK;
    if (IN(c, 3) ? kiln__in_syms(c, 3, &fl, 1) != 1 : !(win && win->rank == 1))
        return KILN_OK;
    if (!IN(c, 3))
        fl = win->dims[0];
    o->dims[1] = kiln__sd_addc(c->st, kiln__sd_div(c->st, kiln__sd_sub(c->st, x->dims[1], fl), step), 1);
    o->dims[2] = kiln__attr_i(c->n, "onesided", 1) ? kiln__sd_addc(c->st, kiln__sd_div(c->st, fl, kiln__C(c, 2)), 1) : fl;
    return KILN_OK;
}

kiln_status kiln__si_window(kiln_ictx *c)
{
    kiln_sdim n;
    if (kiln__in_syms(c, 0, &n, 1) != 1)
        n = kiln__sd_unknown(c->st);
    kiln__vs_set(c->out[0], kiln__attr_dt(c->n, "output_datatype", KILN_DT_FLOAT32), 1, &n);
    return KILN_OK;
}

kiln_status kiln__si_melweight(kiln_ictx *c)
{
    kiln_sdim bins, dl;
    if (kiln__in_syms(c, 0, &bins, 1) != 1)
        bins = kiln__sd_unknown(c->st);
    if (kiln__in_syms(c, 1, &dl, 1) != 1)
        dl = kiln__sd_unknown(c->st);
    kiln_sdim d[2] = {kiln__sd_addc(c->st, kiln__sd_div(c->st, dl, kiln__C(c, 2)), 1), bins};
    kiln__vs_set(c->out[0], kiln__attr_dt(c->n, "output_datatype", KILN_DT_FLOAT32), 2, d);
    return KILN_OK;
}

kiln_status kiln__si_det(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    if (x->rank >= 0 && x->rank < 2)
        return kiln__ierr(c, KILN_ERR_SHAPE, "input rank %d, expected >= 2", x->rank);
    kiln__vs_set(c->out[0], x->dtype, x->rank < 0 ? -1 : x->rank - 2, x->dims);
    return KILN_OK;
}

/* ---- kiln's fused ops (k_fused.c) ---- */

/* o = broadcast(o, r) (a residual or mask added to the main result) */
static kiln_status add_bcast(kiln_ictx *c, kiln_vshape *o, const kiln_vshape *r)
{
    if (!r)
        return KILN_OK;
    kiln_vshape m = *o;
    const kiln_vshape *both[2] = {&m, r};
    return kiln__bcast(c, 2, both, o);
}

kiln_status kiln__si_fusedconv(kiln_ictx *c)
{
    KILN_TRY(kiln__si_conv(c));
    return add_bcast(c, c->out[0], IN(c, 3));
}

/* FusedConvPool(X, W, B?, y_scale?, y_zero_point?): the convolution's shape, then the max pool's (kiln_pool_kernel,
 * kiln_pool_strides: 2 values, kiln_pool_pads: 4; floor); with y_scale the dtype of y_zero_point (uint8 without one),
 * else X's (passes/p_convpool.c) */
kiln_status kiln__si_fusedconvpool(kiln_ictx *c)
{
    const kiln_vshape *x;
    KILN_TRY(kiln__need(c, 0, &x));
    kiln_dtype dt = !IN(c, 3) ? x->dtype : IN(c, 4) ? IN(c, 4)->dtype : KILN_DT_UINT8;
    kiln_vshape *o = c->out[0];
    KILN_TRY(conv_shape(c, 0, 1, dt, o));
    if (o->rank < 0)
        return KILN_OK;
    const int64_t *k, *s, *p;
    if (o->rank != 4 || kiln__attr_ints(c->n, "kiln_pool_kernel", &k) != 2 ||
        kiln__attr_ints(c->n, "kiln_pool_strides", &s) != 2 || kiln__attr_ints(c->n, "kiln_pool_pads", &p) != 4)
        return kiln__ierr(c, KILN_ERR_SHAPE, "a 2-D convolution with kiln_pool_kernel, kiln_pool_strides (2 values) "
                                             "and kiln_pool_pads (4)");
    for (int i = 0; i < 2; i++) {
        if (k[i] < 1 || s[i] < 1 || k[i] > GEOM_LIM || s[i] > GEOM_LIM || p[i] < 0 || p[i + 2] < 0 || p[i] >= k[i] ||
            p[i + 2] >= k[i])
            return kiln__ierr(c, KILN_ERR_SHAPE, "pool kernel %lld, stride %lld, pads %lld, %lld on axis %d",
                              (long long)k[i], (long long)s[i], (long long)p[i], (long long)p[i + 2], i + 2);
        kiln_sdim span = kiln__sd_addc(c->st, o->dims[2 + i], p[i] + p[i + 2] - k[i]);
        int64_t sv;
        if (kiln__sd_is_const(c->st, span, &sv) && sv < 0)
            return kiln__ierr(c, KILN_ERR_SHAPE, "pool kernel larger than the padded convolution output on axis %d",
                              i + 2);
        o->dims[2 + i] = kiln__sd_addc(c->st, kiln__sd_div(c->st, span, kiln__C(c, s[i])), 1);
    }
    return KILN_OK;
}

/* FusedConvSum(X, X2, W, B?): [N, M, spatial of X], M = W's rows (k_convsum.c) */
kiln_status kiln__si_fusedconvsum(kiln_ictx *c)
{
    const kiln_vshape *x, *w;
    KILN_TRY(kiln__need(c, 0, &x));
    KILN_TRY(kiln__need(c, 2, &w));
    kiln_vshape *o = c->out[0];
    kiln__vs_unknown(o, x->dtype);
    if (x->rank < 0 || w->rank < 0)
        return KILN_OK;
    if (x->rank < 3 || w->rank != x->rank)
        return kiln__ierr(c, KILN_ERR_SHAPE, "X of rank %d, W of rank %d", x->rank, w->rank);
    kiln_sdim d[KILN_MAX_DIMS];
    memcpy(d, x->dims, sizeof(kiln_sdim) * (size_t)x->rank);
    d[1] = w->dims[0];
    kiln__vs_set(o, x->dtype, x->rank, d);
    return KILN_OK;
}

kiln_status kiln__si_fusedmatmul(kiln_ictx *c)
{
    KILN_TRY(kiln__si_matmul(c));
    return add_bcast(c, c->out[0], IN(c, 3));
}

kiln_status kiln__si_fusedgemm(kiln_ictx *c) { return kiln__si_gemm(c); }

/* o = Transpose(x, Attention's permutation `which`): o.dims[j] = x.dims[perm[j]] (x when its rank is unknown) */
static kiln_status attn_permute(kiln_ictx *c, int which, const kiln_vshape *x, kiln_vshape *o)
{
    if (x->rank < 0) {
        kiln__vs_unknown(o, x->dtype);
        return KILN_OK;
    }
    int p[KILN_MAX_DIMS];
    if (!kiln__attn_perm(c->n, which, x->rank, p))
        return kiln__ierr(c, KILN_ERR_INVALID_ARG, "%s is not a permutation of 0..%d", kiln__attn_perm_names[which],
                          x->rank - 1);
    kiln_sdim d[KILN_MAX_DIMS];
    for (int j = 0; j < x->rank; j++)
        d[j] = x->dims[p[j]];
    kiln__vs_set(o, x->dtype, x->rank, d);
    return KILN_OK;
}

kiln_status kiln__si_attention(kiln_ictx *c)
{
    const kiln_vshape *in[3];
    kiln_vshape lg[3], s, y;
    for (int i = 0; i < 3; i++) {
        KILN_TRY(kiln__need(c, i, &in[i]));
        KILN_TRY(attn_permute(c, i, in[i], &lg[i]));   /* the logical Q, K^T, V */
    }
    KILN_TRY(matmul_shape(c, &lg[0], &lg[1], in[0]->dtype, &s));
    KILN_TRY(add_bcast(c, &s, IN(c, 3)));   /* additive mask, or Where(mask, scores, fill) */
    KILN_TRY(matmul_shape(c, &s, &lg[2], in[0]->dtype, &y));
    return attn_permute(c, KILN_ATTN_Y, &y, c->out[0]);
}
