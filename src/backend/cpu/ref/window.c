/* Window geometry for the convolution and pooling kernels (window.h). */
#include "window.h"

kiln_status kiln__win_scratch(const kiln_kctx *ctx, int64_t count, size_t elsize, void **p)
{
    *p = NULL;
    if (count < 0 || (uint64_t)count > kiln__max_tensor_bytes() / elsize)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "scratch buffer of %lld elements is too large", (long long)count);
    *p = kiln__malloc((size_t)(count ? count : 1) * elsize);
    if (!*p)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (scratch buffer of %lld elements)", (long long)count);
    return KILN_OK;
}

kiln_status kiln__win_ints(const kiln_kctx *ctx, const char *name, int n, int64_t def, int64_t lo, int64_t *out,
                           bool *present)
{
    const int64_t *v;
    int c = kiln__attr_ints(ctx->node, name, &v);
    if (present)
        *present = c >= 0;
    if (c < 0) {
        for (int i = 0; i < n; i++)
            out[i] = def;
        return KILN_OK;
    }
    if (c != n)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "attribute '%s' has %d values, expected %d", name, c, n);
    for (int i = 0; i < n; i++) {
        if (v[i] < lo || v[i] > LIM)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "attribute '%s' value %lld is out of range", name,
                              (long long)v[i]);
        out[i] = v[i];
    }
    return KILN_OK;
}

kiln_status kiln__win_auto_pad(const kiln_kctx *ctx, int *ap)
{
    const char *s = kiln__attr_s(ctx->node, "auto_pad", "NOTSET");
    if (!strcmp(s, "NOTSET") || !*s)
        *ap = AP_NOTSET;
    else if (!strcmp(s, "VALID"))
        *ap = AP_VALID;
    else if (!strcmp(s, "SAME_UPPER"))
        *ap = AP_SAME_UPPER;
    else if (!strcmp(s, "SAME_LOWER"))
        *ap = AP_SAME_LOWER;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown auto_pad '%s'", s);
    return KILN_OK;
}

kiln_status kiln__win_check_dims(const kiln_kctx *ctx, const kiln_tensor *t, const char *what)
{
    for (int i = 0; i < t->ndim; i++)
        if (t->dims[i] < 0 || t->dims[i] > LIM)
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "%s dimension %d (%lld) is out of range", what, i,
                              (long long)t->dims[i]);
    return KILN_OK;
}

kiln_status kiln__win_sizes(const kiln_kctx *ctx, kiln_window *w)
{
    w->in_sz = w->out_sz = w->k_sz = 1;
    for (int i = 0; i < w->nsp; i++) {
        w->in_sz = mul_chk(w->in_sz, w->in[i]);
        w->out_sz = mul_chk(w->out_sz, w->out[i]);
        w->k_sz = mul_chk(w->k_sz, w->k[i]);
        if (w->in_sz < 0 || w->out_sz < 0 || w->k_sz < 0 || w->in_sz > ((int64_t)1 << 48) ||
            w->out_sz > ((int64_t)1 << 48) || w->k_sz > ((int64_t)1 << 48))
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "spatial size is too large");
    }
    return KILN_OK;
}

kiln_status kiln__win_setup(const kiln_kctx *ctx, kiln_window *w, bool ceil_mode)
{
    int nsp = w->nsp, ap = AP_NOTSET;
    int64_t pads[2 * SP_MAX];
    KILN_TRY(kiln__win_ints(ctx, "strides", nsp, 1, 1, w->s, NULL));
    KILN_TRY(kiln__win_ints(ctx, "dilations", nsp, 1, 1, w->d, NULL));
    KILN_TRY(kiln__win_ints(ctx, "pads", 2 * nsp, 0, 0, pads, NULL));
    KILN_TRY(kiln__win_auto_pad(ctx, &ap));
    for (int i = 0; i < nsp; i++) {
        int64_t effk = (w->k[i] - 1) * w->d[i] + 1;
        if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
            /* out = ceil(in / s); the padding that takes, split with the odd one at the end (UPPER) */
            int64_t o = cdiv(w->in[i], w->s[i]);
            int64_t tot = (o - 1) * w->s[i] + effk - w->in[i];
            if (tot < 0)
                tot = 0;
            w->pb[i] = ap == AP_SAME_UPPER ? tot / 2 : tot - tot / 2;
            w->pe[i] = tot - w->pb[i];
            w->out[i] = o;
            continue;
        }
        w->pb[i] = ap == AP_VALID ? 0 : pads[i];
        w->pe[i] = ap == AP_VALID ? 0 : pads[nsp + i];
        int64_t span = w->in[i] + w->pb[i] + w->pe[i] - effk;
        if (span < 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE,
                              "kernel (effective size %lld) is larger than the padded input (%lld) on axis %d",
                              (long long)effk, (long long)(w->in[i] + w->pb[i] + w->pe[i]), i + 2);
        int64_t o = (ceil_mode && ap == AP_NOTSET ? cdiv(span, w->s[i]) : span / w->s[i]) + 1;
        /* ceil mode: a window may not start inside the end padding */
        if (ceil_mode && o > 1 && (o - 1) * w->s[i] >= w->in[i] + w->pb[i])
            o--;
        w->out[i] = o;
    }
    return kiln__win_sizes(ctx, w);
}
