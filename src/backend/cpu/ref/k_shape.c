/* Reference kernels: shape manipulation and data movement.
 *
 * Shape, Size, Concat, ConstantOfShape, DepthToSpace, SpaceToDepth, Expand, EyeLike, Flatten, Pad,
 * Range, Reshape, Slice, Split, Squeeze, Tile, Transpose, Trilu, Unsqueeze live here; the indexing
 * ops (Gather*, Scatter*, NonZero, OneHot, ReverseSequence, Compress, CumSum, TopK, ArgMax/ArgMin,
 * Unique) live in k_index.c and are registered from this file's table.
 *
 * Every op moves bytes (kiln_dtype_size), so it works for any fixed-size dtype. Most data movement
 * goes through one strided-copy engine (strided_copy) that coalesces dimensions and copies
 * contiguous runs with memcpy, transposes with cache-blocked tiles, and splits large copies over
 * threads. */
#include "../../kernel.h"
#include "k_index.h"
#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif


#define MAXR KILN_MAX_DIMS

/* ------------------------------------------------------------------------------------------ */
/* small helpers                                                                              */

/* Reads a 0-D or 1-D int32/int64 tensor of at most max elements. */
static kiln_status read_ints(const kiln_kctx *ctx, const kiln_tensor *t, const char *what, int64_t *v, int64_t max,
                             int64_t *n)
{
    if (t->dtype != KILN_DT_INT64 && t->dtype != KILN_DT_INT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "%s must be int32 or int64, got %s", what, kiln_dtype_name(t->dtype));
    if (t->ndim > 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s must be 1-D (rank %d)", what, t->ndim);
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, t, &es));
    int64_t cnt = t->ndim ? t->dims[0] : 1;
    if (cnt > max)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s has %lld elements (at most %lld allowed)", what, (long long)cnt,
                          (long long)max);
    if (t->dtype == KILN_DT_INT64)
        memcpy(v, t->data, (size_t)cnt * sizeof(int64_t));
    else
        for (int64_t i = 0; i < cnt; i++)
            v[i] = ((const int32_t *)t->data)[i];
    *n = cnt;
    return KILN_OK;
}

/* Contiguous byte strides of a shape. */
static void cstrides(int nd, const int64_t *dims, int64_t es, int64_t *st)
{
    int64_t s = es;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
}

/* Fills n elements of es bytes each with the pattern val. */
static void fill_pattern(uint8_t *dst, int64_t n, const void *val, size_t es)
{
    if (n <= 0)
        return;
    bool zero = true;
    for (size_t i = 0; i < es; i++)
        if (((const uint8_t *)val)[i])
            zero = false;
    size_t total = (size_t)n * es;
    if (zero) {
        memset(dst, 0, total);
        return;
    }
    if (es == 1) {
        memset(dst, *(const uint8_t *)val, total);
        return;
    }
    memcpy(dst, val, es);
    size_t done = es;
    while (done < total) {
        size_t c = done < total - done ? done : total - done;
        memcpy(dst + done, dst, c);
        done += c;
    }
}

/* Copies the whole tensor x to output o, with a new shape of the same element count. */
static kiln_status copy_reshaped(kiln_kctx *ctx, const kiln_tensor *x, int nd, const int64_t *dims)
{
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int64_t n = kiln__shape_numel(nd, dims);
    if (n < 0 || n != kiln__shape_numel(x->ndim, x->dims))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "cannot reshape %lld elements to %lld",
                          (long long)kiln__shape_numel(x->ndim, x->dims), (long long)n);
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, nd, dims));
    if (n && ctx->out[0]->data != x->data)   /* planned in place: the bytes are already there */
        memcpy(ctx->out[0]->data, x->data, (size_t)n * es);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* strided copy engine                                                                        */

#define SC_MAXD 16
#define SC_TB 16

enum { SC_MEMCPY, SC_BCAST, SC_STRIDED, SC_TILE };

typedef struct {
    uint8_t *dst;
    const uint8_t *src;
    int64_t es;
    int mode;
    int nod;                       /* outer dims (units) */
    int64_t od[SC_MAXD], oss[SC_MAXD], ods[SC_MAXD];
    int64_t n, is, id;             /* inner row: count and byte strides */
    int64_t kn, ks, kd;            /* tile mode: the second (src-contiguous) dim */
} sc_plan;

static inline void copy_el(uint8_t *d, const uint8_t *s, int64_t es)
{
    switch (es) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    case 8: memcpy(d, s, 8); break;
    default: memcpy(d, s, (size_t)es); break;
    }
}

#define SC_ROW(T)                                                                                                  \
    do {                                                                                                           \
        const int64_t sst = is / (int64_t)sizeof(T), dst_ = id / (int64_t)sizeof(T);                               \
        T *dp = (T *)(void *)d;                                                                                    \
        const T *sp = (const T *)(const void *)s;                                                                  \
        for (int64_t j = 0; j < n; j++)                                                                            \
            dp[j * dst_] = sp[j * sst];                                                                            \
    } while (0)

static void sc_row(uint8_t *d, const uint8_t *s, int64_t n, int64_t is, int64_t id, int64_t es)
{
    /* aligned typed paths (strides are multiples of es; base pointers come from malloc) */
    if (((uintptr_t)d | (uintptr_t)s) % (uintptr_t)es == 0) {
        switch (es) {
        case 1: SC_ROW(uint8_t); return;
        case 2: SC_ROW(uint16_t); return;
        case 4: SC_ROW(uint32_t); return;
        case 8: SC_ROW(uint64_t); return;
        default: break;
        }
    }
    for (int64_t j = 0; j < n; j++)
        copy_el(d + j * id, s + j * is, es);
}

#define SC_TILE_T(T)                                                                                               \
    do {                                                                                                           \
        const int64_t sks = p->ks / (int64_t)sizeof(T), sis = p->is / (int64_t)sizeof(T);                          \
        const int64_t dks = p->kd / (int64_t)sizeof(T), dis = p->id / (int64_t)sizeof(T);                          \
        for (int64_t c0 = 0; c0 < p->n; c0 += SC_TB) {                                                             \
            int64_t c1 = c0 + SC_TB < p->n ? c0 + SC_TB : p->n;                                                    \
            for (int64_t r = 0; r < rows; r++) {                                                                   \
                T *dp = (T *)(void *)d + r * dks;                                                                  \
                const T *sp = (const T *)(const void *)s + r * sks;                                                \
                for (int64_t c = c0; c < c1; c++)                                                                  \
                    dp[c * dis] = sp[c * sis];                                                                     \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

#if defined(__SSE2__)
/* 4-byte elements, dst contiguous along columns (id == 4), src contiguous along rows (ks == 4):
 * 4x4 register transposes. */
static void sc_tile4_sse(const sc_plan *p, uint8_t *d, const uint8_t *s, int64_t rows)
{
    const int64_t sis = p->is / 4, dks = p->kd / 4;
    const float *sp = (const float *)(const void *)s;
    float *dp = (float *)(void *)d;
    int64_t r4 = rows & ~(int64_t)3, c4 = p->n & ~(int64_t)3;
    for (int64_t c0 = 0; c0 < c4; c0 += SC_TB) {
        int64_t c1 = c0 + SC_TB < c4 ? c0 + SC_TB : c4;
        for (int64_t r = 0; r < r4; r += 4)
            for (int64_t c = c0; c < c1; c += 4) {
                /* column c + j of the tile is src row sp[(c + j) * sis + r .. r + 3] */
                __m128 a0 = _mm_loadu_ps(sp + (c + 0) * sis + r), a1 = _mm_loadu_ps(sp + (c + 1) * sis + r);
                __m128 a2 = _mm_loadu_ps(sp + (c + 2) * sis + r), a3 = _mm_loadu_ps(sp + (c + 3) * sis + r);
                _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
                _mm_storeu_ps(dp + (r + 0) * dks + c, a0);
                _mm_storeu_ps(dp + (r + 1) * dks + c, a1);
                _mm_storeu_ps(dp + (r + 2) * dks + c, a2);
                _mm_storeu_ps(dp + (r + 3) * dks + c, a3);
            }
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = (r < r4 ? c4 : 0); c < p->n; c++)
            memcpy(dp + r * dks + c, sp + c * sis + r, 4);
}
#endif

static void sc_tile(const sc_plan *p, uint8_t *d, const uint8_t *s, int64_t rows)
{
#if defined(__SSE2__)
    if (p->es == 4 && p->id == 4 && p->ks == 4 && ((p->is | p->kd) & 3) == 0) {
        sc_tile4_sse(p, d, s, rows);
        return;
    }
#endif
    if (((uintptr_t)d | (uintptr_t)s) % (uintptr_t)p->es == 0) {
        switch (p->es) {
        case 1: SC_TILE_T(uint8_t); return;
        case 2: SC_TILE_T(uint16_t); return;
        case 4: SC_TILE_T(uint32_t); return;
        case 8: SC_TILE_T(uint64_t); return;
        default: break;
        }
    }
    for (int64_t r = 0; r < rows; r++)
        sc_row(d + r * p->kd, s + r * p->ks, p->n, p->is, p->id, p->es);
}

static void sc_unit(const sc_plan *p, uint8_t *d, const uint8_t *s, const int64_t *idx)
{
    switch (p->mode) {
    case SC_MEMCPY:
        memcpy(d, s, (size_t)(p->n * p->es));
        break;
    case SC_BCAST:
        if (p->es == 4 && ((uintptr_t)d % 4) == 0) {
            uint32_t v;
            memcpy(&v, s, 4);
            uint32_t *dp = (uint32_t *)(void *)d;
            for (int64_t j = 0; j < p->n; j++)
                dp[j] = v;
        } else {
            fill_pattern(d, p->n, s, (size_t)p->es);
        }
        break;
    case SC_STRIDED:
        sc_row(d, s, p->n, p->is, p->id, p->es);
        break;
    case SC_TILE: {
        int64_t kb = idx[p->nod - 1]; /* block index along the tile's row dim */
        int64_t rows = p->kn - kb * SC_TB;
        sc_tile(p, d, s, rows < SC_TB ? rows : SC_TB);
        break;
    }
    default:
        break;
    }
}

static void sc_run(void *vp, int64_t b, int64_t e)
{
    const sc_plan *p = vp;
    int64_t idx[SC_MAXD] = {0};
    int64_t so = 0, dof = 0, r = b;
    for (int d = p->nod - 1; d >= 0; d--) {
        idx[d] = r % p->od[d];
        r /= p->od[d];
        so += idx[d] * p->oss[d];
        dof += idx[d] * p->ods[d];
    }
    for (int64_t u = b; u < e; u++) {
        sc_unit(p, p->dst + dof, p->src + so, idx);
        for (int d = p->nod - 1; d >= 0; d--) {
            idx[d]++;
            so += p->oss[d];
            dof += p->ods[d];
            if (idx[d] < p->od[d])
                break;
            so -= p->od[d] * p->oss[d];
            dof -= p->od[d] * p->ods[d];
            idx[d] = 0;
        }
    }
}

/* dst[i] = src[i] for every index of the shape dims, with byte strides ds (dst) and ss (src; may be
 * 0 for broadcasting or negative). nd <= SC_MAXD. */
static void strided_copy(kiln_pool *pool, int nthreads, uint8_t *dst, const int64_t *ds_in, const uint8_t *src, const int64_t *ss_in,
                         int64_t es, int nd_in, const int64_t *dims_in)
{
    int64_t dims[SC_MAXD], ss[SC_MAXD], ds[SC_MAXD];
    int nd = 0;
    for (int d = 0; d < nd_in; d++) {
        if (dims_in[d] == 0)
            return;
        if (dims_in[d] == 1)
            continue;
        /* merge with the previous dim when it is contiguous over this one */
        if (nd > 0 && ss[nd - 1] == ss_in[d] * dims_in[d] && ds[nd - 1] == ds_in[d] * dims_in[d]) {
            dims[nd - 1] *= dims_in[d];
            ss[nd - 1] = ss_in[d];
            ds[nd - 1] = ds_in[d];
            continue;
        }
        dims[nd] = dims_in[d];
        ss[nd] = ss_in[d];
        ds[nd] = ds_in[d];
        nd++;
    }
    if (nd == 0) {
        memcpy(dst, src, (size_t)es);
        return;
    }
    sc_plan p;
    memset(&p, 0, sizeof p);
    p.dst = dst;
    p.src = src;
    p.es = es;
    int last = nd - 1;
    p.n = dims[last];
    p.is = ss[last];
    p.id = ds[last];
    int k = -1;
    if (ss[last] == es && ds[last] == es) {
        p.mode = SC_MEMCPY;
    } else if (ss[last] == 0 && ds[last] == es) {
        p.mode = SC_BCAST;
    } else {
        p.mode = SC_STRIDED;
        if (ds[last] == es && dims[last] >= 4)
            for (int d = last - 1; d >= 0; d--)
                if (ss[d] == es && dims[d] >= 4) {
                    k = d;
                    break;
                }
        if (k >= 0)
            p.mode = SC_TILE;
    }
    int64_t units = 1;
    for (int d = 0; d < last; d++) {
        if (d == k)
            continue;
        p.od[p.nod] = dims[d];
        p.oss[p.nod] = ss[d];
        p.ods[p.nod] = ds[d];
        p.nod++;
        units *= dims[d];
    }
    if (k >= 0) {
        p.kn = dims[k];
        p.ks = ss[k];
        p.kd = ds[k];
        int64_t nb = (dims[k] + SC_TB - 1) / SC_TB;
        p.od[p.nod] = nb;
        p.oss[p.nod] = ss[k] * SC_TB;
        p.ods[p.nod] = ds[k] * SC_TB;
        p.nod++;
        units *= nb;
    }
    int64_t unit_bytes = p.n * es * (k >= 0 ? SC_TB : 1);
    int64_t total = units * unit_bytes;
    if (nthreads != 1 && total >= (1 << 18) && units > 1) {
        int64_t grain = (1 << 16) / (unit_bytes ? unit_bytes : 1);
        kiln__parallel_for(pool, nthreads, units, grain < 1 ? 1 : grain, sc_run, &p);
    } else {
        sc_run(&p, 0, units);
    }
}

/* out[...] = in permuted: output dim i is input dim perm[i]. x is contiguous with the view shape vd. */
static void permute_copy(kiln_pool *pool, int nthreads, uint8_t *dst, const uint8_t *src, int64_t es, int nd, const int64_t *vd,
                         const int *perm)
{
    int64_t ist[SC_MAXD], od[SC_MAXD], ss[SC_MAXD], ds[SC_MAXD];
    cstrides(nd, vd, es, ist);
    for (int i = 0; i < nd; i++) {
        od[i] = vd[perm[i]];
        ss[i] = ist[perm[i]];
    }
    cstrides(nd, od, es, ds);
    strided_copy(pool, nthreads, dst, ds, src, ss, es, nd, od);
}

/* ------------------------------------------------------------------------------------------ */
/* Shape, Size                                                                                */

static kiln_status k_shape(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    int64_t r = x->ndim, start = 0, end = r;
    if (ctx->node->opset >= 15) {
        start = kiln__attr_i(ctx->node, "start", 0);
        end = kiln__attr_i(ctx->node, "end", r);
    }
    if (start < 0)
        start += r;
    if (end < 0)
        end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    int64_t n = end > start ? end - start : 0;
    KILN_TRY(kiln__kout(ctx, 0, KILN_DT_INT64, 1, &n));
    int64_t *o = ctx->out[0]->data;
    for (int64_t i = 0; i < n; i++)
        o[i] = x->dims[start + i];
    return KILN_OK;
}

static kiln_status k_size(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    int64_t n = kiln__shape_numel(x->ndim, x->dims);
    if (n < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid input shape");
    KILN_TRY(kiln__kout(ctx, 0, KILN_DT_INT64, 0, NULL));
    *(int64_t *)ctx->out[0]->data = n;
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Concat                                                                                     */

static kiln_status k_concat(kiln_kctx *ctx)
{
    const kiln_tensor *x0;
    KILN_TRY(kiln__kneed(ctx, 0, &x0));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x0, &es));
    int r = x0->ndim;
    if (r < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "Concat inputs must have rank >= 1");
    if (!kiln__attr(ctx->node, "axis") && ctx->node->opset >= 4)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing attribute 'axis'");
    int axis;
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", 1), r, &axis));
    int64_t dims[MAXR];
    memcpy(dims, x0->dims, sizeof(int64_t) * (size_t)r);
    dims[axis] = 0;
    for (int i = 0; i < ctx->n_in; i++) {
        const kiln_tensor *t;
        KILN_TRY(kiln__kneed(ctx, i, &t));
        if (t->dtype != x0->dtype)
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "input %d has dtype %s, expected %s", i, kiln_dtype_name(t->dtype),
                              kiln_dtype_name(x0->dtype));
        if (t->ndim != r)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "input %d has rank %d, expected %d", i, t->ndim, r);
        KILN_TRY(kiln__kdata_es(ctx, t, &es));
        for (int d = 0; d < r; d++)
            if (d != axis && t->dims[d] != x0->dims[d])
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "input %d dim %d is %lld, expected %lld", i, d,
                                  (long long)t->dims[d], (long long)x0->dims[d]);
        if (t->dims[axis] > INT64_MAX - dims[axis])
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "concatenated dimension overflows");
        dims[axis] += t->dims[axis];
    }
    KILN_TRY(kiln__kout_uninit(ctx, 0, x0->dtype, r, dims));   /* the inputs' copies cover it */
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    int64_t outer = 1, inner = (int64_t)es;
    for (int d = 0; d < axis; d++)
        outer *= dims[d];
    for (int d = axis + 1; d < r; d++)
        inner *= dims[d];
    uint8_t *out = ctx->out[0]->data;
    int64_t orow = dims[axis] * inner;
    if (outer == 1) {
        /* the memory plan may have computed inputs where they lie in the output (runtime/plan.h KILN_PLAN_CONCAT):
         * those are not copied. An input planned there at other shapes (a data-dependent size) lies at or after its
         * place, past the earlier inputs' places: moving them in order overwrites nothing unread. */
        for (int i = 0; i < ctx->n_in; i++) {
            const kiln_tensor *t = ctx->in[i];
            size_t nb = (size_t)(t->dims[axis] * inner);
            if (nb && t->data != out)
                memmove(out, t->data, nb);
            out += nb;
        }
        return KILN_OK;
    }
    /* an input inside the output (planned there at other shapes: a data-dependent size) is copied out first, as the
     * strided copies would overwrite it */
    const uint8_t **src = kiln__calloc((size_t)ctx->n_in, sizeof *src);
    uint8_t **held = kiln__calloc((size_t)ctx->n_in, sizeof *held);
    kiln_status st = src && held ? KILN_OK : kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < ctx->n_in && st == KILN_OK; i++) {
        const kiln_tensor *t = ctx->in[i];
        src[i] = t->data;
        if (!t->nbytes || src[i] >= out + ctx->out[0]->nbytes || out >= src[i] + t->nbytes)
            continue;
        if (!(held[i] = kiln__malloc(t->nbytes)))
            st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        else
            src[i] = memcpy(held[i], t->data, t->nbytes);
    }
    int64_t off = 0;
    for (int i = 0; i < ctx->n_in && st == KILN_OK; i++) {
        int64_t chunk = ctx->in[i]->dims[axis] * inner;
        if (chunk) {
            int64_t d2[2] = {outer, chunk / (int64_t)es}, ss[2] = {chunk, (int64_t)es}, ds[2] = {orow, (int64_t)es};
            strided_copy(ctx->pool, ctx->nthreads, out + off, ds, src[i], ss, (int64_t)es, 2, d2);
        }
        off += chunk;
    }
    for (int i = 0; held && i < ctx->n_in; i++)
        kiln__free(held[i]);
    kiln__free(held);
    kiln__free(src);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* ConstantOfShape, EyeLike                                                                   */

static kiln_status k_constant_of_shape(kiln_kctx *ctx)
{
    const kiln_tensor *s;
    KILN_TRY(kiln__kneed(ctx, 0, &s));
    int64_t dims[MAXR], nd;
    KILN_TRY(read_ints(ctx, s, "shape", dims, MAXR, &nd));
    for (int i = 0; i < nd; i++)
        if (dims[i] < 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "negative dimension %lld", (long long)dims[i]);
    const kiln_attr *a = kiln__attr(ctx->node, "value");
    kiln_dtype dt = KILN_DT_FLOAT32;
    uint8_t val[16] = {0};
    if (a) {
        if (a->type != KILN_ATTR_TENSOR || !a->t)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "attribute 'value' must be a tensor");
        size_t es;
        KILN_TRY(kiln__kdata_es(ctx, a->t, &es));
        if (kiln__shape_numel(a->t->ndim, a->t->dims) != 1 || es > sizeof val)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "attribute 'value' must have exactly one element");
        dt = a->t->dtype;
        memcpy(val, a->t->data, es);
    }
    KILN_TRY(kiln__kout(ctx, 0, dt, (int)nd, dims));
    fill_pattern(ctx->out[0]->data, kiln_tensor_numel(ctx->out[0]), val, kiln_dtype_size(dt));
    return KILN_OK;
}

/* Writes the value 1 of dtype dt at p (p is zero). */
static bool set_one(kiln_dtype dt, uint8_t *p)
{
    switch (dt) {
    case KILN_DT_FLOAT32: { float f = 1.0f; memcpy(p, &f, 4); return true; }
    case KILN_DT_FLOAT64: { double f = 1.0; memcpy(p, &f, 8); return true; }
    case KILN_DT_FLOAT16: { uint16_t h = 0x3C00; memcpy(p, &h, 2); return true; }
    case KILN_DT_BFLOAT16: { uint16_t h = 0x3F80; memcpy(p, &h, 2); return true; }
    case KILN_DT_UINT8: case KILN_DT_INT8: case KILN_DT_UINT16: case KILN_DT_INT16: case KILN_DT_INT32:
    case KILN_DT_INT64: case KILN_DT_UINT32: case KILN_DT_UINT64: case KILN_DT_BOOL:
        p[0] = 1; /* little-endian */
        return true;
    default:
        return false;
    }
}

static kiln_status k_eyelike(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    if (x->ndim != 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "EyeLike input must be 2-D (rank %d)", x->ndim);
    kiln_dtype dt = (kiln_dtype)kiln__attr_i(ctx->node, "dtype", x->dtype);
    uint8_t probe[16] = {0};
    if ((unsigned)dt >= KILN_DT_COUNT || !set_one(dt, probe))
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "EyeLike output dtype %d is not supported", (int)dt);
    int64_t k = kiln__attr_i(ctx->node, "k", 0);
    KILN_TRY(kiln__kout(ctx, 0, dt, 2, x->dims));
    int64_t R = x->dims[0], C = x->dims[1];
    size_t es = kiln_dtype_size(dt);
    uint8_t *o = ctx->out[0]->data;
    if (k >= C || k <= -R)
        return KILN_OK;
    for (int64_t i = k < 0 ? -k : 0; i < R; i++) {
        int64_t j = i + k;
        if (j >= C)
            break;
        set_one(dt, o + (size_t)(i * C + j) * es);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* DepthToSpace, SpaceToDepth                                                                 */

static kiln_status k_depth_to_space(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    if (x->ndim != 4)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must be 4-D (rank %d)", x->ndim);
    int64_t b = kiln__attr_i(ctx->node, "blocksize", 0);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    if (b < 1 || b > (1 << 20) || C % (b * b))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid blocksize %lld for %lld channels", (long long)b,
                          (long long)C);
    int64_t c2 = C / (b * b);
    if (H > INT64_MAX / b || W > INT64_MAX / b)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "output shape overflows");
    int64_t od[4] = {N, c2, H * b, W * b};
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, 4, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    const char *mode = kiln__attr_s(ctx->node, "mode", "DCR");
    if (!strcmp(mode, "DCR")) {
        int64_t vd[6] = {N, b, b, c2, H, W};
        int perm[6] = {0, 3, 4, 1, 5, 2};
        permute_copy(ctx->pool, ctx->nthreads, ctx->out[0]->data, x->data, (int64_t)es, 6, vd, perm);
    } else if (!strcmp(mode, "CRD")) {
        int64_t vd[6] = {N, c2, b, b, H, W};
        int perm[6] = {0, 1, 4, 2, 5, 3};
        permute_copy(ctx->pool, ctx->nthreads, ctx->out[0]->data, x->data, (int64_t)es, 6, vd, perm);
    } else {
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown mode '%s'", mode);
    }
    return KILN_OK;
}

static kiln_status k_space_to_depth(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    if (x->ndim != 4)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must be 4-D (rank %d)", x->ndim);
    int64_t b = kiln__attr_i(ctx->node, "blocksize", 0);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    if (b < 1 || b > (1 << 20) || H % b || W % b)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid blocksize %lld for spatial size %lldx%lld",
                          (long long)b, (long long)H, (long long)W);
    if (C > INT64_MAX / (b * b))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "output shape overflows");
    int64_t od[4] = {N, C * b * b, H / b, W / b};
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, 4, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    int64_t vd[6] = {N, C, H / b, b, W / b, b};
    int perm[6] = {0, 3, 5, 1, 2, 4};
    permute_copy(ctx->pool, ctx->nthreads, ctx->out[0]->data, x->data, (int64_t)es, 6, vd, perm);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Expand, Tile, Transpose                                                                    */

static kiln_status k_expand(kiln_kctx *ctx)
{
    const kiln_tensor *x, *s;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    KILN_TRY(kiln__kneed(ctx, 1, &s));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int64_t sh[MAXR], ns;
    KILN_TRY(read_ints(ctx, s, "shape", sh, MAXR, &ns));
    int r = x->ndim > (int)ns ? x->ndim : (int)ns;
    int64_t od[MAXR];
    for (int d = 0; d < r; d++) {
        int xa = d - (r - x->ndim), sa = d - (r - (int)ns);
        int64_t a = xa >= 0 ? x->dims[xa] : 1, b = sa >= 0 ? sh[sa] : 1;
        if (b < 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "negative dimension %lld in shape", (long long)b);
        if (a == b || b == 1)
            od[d] = a;
        else if (a == 1)
            od[d] = b;
        else
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "cannot broadcast dimension %lld to %lld", (long long)a,
                              (long long)b);
    }
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    int64_t ss[MAXR], ds[MAXR];
    kiln__broadcast_strides(x, r, od, ss);
    for (int d = 0; d < r; d++)
        ss[d] *= (int64_t)es;
    cstrides(r, od, (int64_t)es, ds);
    strided_copy(ctx->pool, ctx->nthreads, ctx->out[0]->data, ds, x->data, ss, (int64_t)es, r, od);
    return KILN_OK;
}

static kiln_status k_tile(kiln_kctx *ctx)
{
    const kiln_tensor *x, *rt;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    KILN_TRY(kiln__kneed(ctx, 1, &rt));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int64_t rep[MAXR], nr;
    KILN_TRY(read_ints(ctx, rt, "repeats", rep, MAXR, &nr));
    int r = x->ndim;
    if (nr != r)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "repeats has %lld elements for rank %d", (long long)nr, r);
    int64_t od[MAXR], ist[MAXR];
    for (int d = 0; d < r; d++) {
        if (rep[d] < 0)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "negative repeat %lld", (long long)rep[d]);
        if (x->dims[d] && rep[d] > INT64_MAX / x->dims[d])
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "output shape overflows");
        od[d] = x->dims[d] * rep[d];
    }
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    /* view the output as [rep0, d0, rep1, d1, ...] reading x with stride 0 over the repeats */
    int64_t vd[2 * MAXR], ss[2 * MAXR], ds[2 * MAXR];
    cstrides(r, x->dims, (int64_t)es, ist);
    for (int d = 0; d < r; d++) {
        vd[2 * d] = rep[d];
        vd[2 * d + 1] = x->dims[d];
        ss[2 * d] = 0;
        ss[2 * d + 1] = ist[d];
    }
    cstrides(2 * r, vd, (int64_t)es, ds);
    strided_copy(ctx->pool, ctx->nthreads, ctx->out[0]->data, ds, x->data, ss, (int64_t)es, 2 * r, vd);
    return KILN_OK;
}

static kiln_status k_transpose(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim;
    int perm[MAXR];
    const int64_t *pv;
    int np = kiln__attr_ints(ctx->node, "perm", &pv);
    if (np < 0) {
        for (int i = 0; i < r; i++)
            perm[i] = r - 1 - i;
    } else {
        if (np != r)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "perm has %d entries for rank %d", np, r);
        bool seen[MAXR] = {false};
        for (int i = 0; i < r; i++) {
            int64_t p = pv[i];
            if (p < 0)
                p += r;
            if (p < 0 || p >= r || seen[p])
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "perm is not a permutation");
            seen[p] = true;
            perm[i] = (int)p;
        }
    }
    int64_t od[MAXR];
    for (int i = 0; i < r; i++)
        od[i] = x->dims[perm[i]];
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    permute_copy(ctx->pool, ctx->nthreads, ctx->out[0]->data, x->data, (int64_t)es, r, x->dims, perm);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Flatten, Reshape, Squeeze, Unsqueeze                                                       */

static kiln_status k_flatten(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    int r = x->ndim;
    int64_t axis = kiln__attr_i(ctx->node, "axis", 1);
    if (axis < -r || axis > r)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "axis %lld is out of range for rank %d", (long long)axis, r);
    if (axis < 0)
        axis += r;
    int64_t od[2] = {kiln__shape_numel((int)axis, x->dims), kiln__shape_numel(r - (int)axis, x->dims + axis)};
    if (od[0] < 0 || od[1] < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid input shape");
    return copy_reshaped(ctx, x, 2, od);
}

static kiln_status k_reshape(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    int64_t sh[MAXR], ns;
    if (ctx->node->opset < 5) {
        const int64_t *v;
        int n = kiln__attr_ints(ctx->node, "shape", &v);
        if (n < 0 || n > MAXR)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing or too long 'shape' attribute");
        memcpy(sh, v, sizeof(int64_t) * (size_t)n);
        ns = n;
    } else {
        const kiln_tensor *s;
        KILN_TRY(kiln__kneed(ctx, 1, &s));
        KILN_TRY(read_ints(ctx, s, "shape", sh, MAXR, &ns));
    }
    bool allowzero = ctx->node->opset >= 14 && kiln__attr_i(ctx->node, "allowzero", 0) != 0;
    int64_t total = kiln__shape_numel(x->ndim, x->dims);
    if (total < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid input shape");
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ns; i++) {
        if (sh[i] == 0 && !allowzero) {
            if (i >= x->ndim)
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape[%d] = 0 copies a dimension the input lacks", i);
            sh[i] = x->dims[i];
        }
        if (sh[i] == -1) {
            if (infer >= 0)
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape has more than one -1");
            infer = i;
            continue;
        }
        if (sh[i] < 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid dimension %lld in shape", (long long)sh[i]);
        if (sh[i] && known > INT64_MAX / sh[i])
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "shape overflows");
        known *= sh[i];
    }
    if (infer >= 0) {
        if (known == 0 || total % known)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "cannot infer -1 dimension reshaping %lld elements",
                              (long long)total);
        sh[infer] = total / known;
    }
    return copy_reshaped(ctx, x, (int)ns, sh);
}

/* Reads the axes of Squeeze/Unsqueeze (attribute before opset 13, optional input after). Returns
 * the count, or -1 if absent. */
static kiln_status read_axes(kiln_kctx *ctx, int64_t *axes, int64_t *n)
{
    *n = -1;
    if (ctx->node->opset < 13) {
        const int64_t *v;
        int c = kiln__attr_ints(ctx->node, "axes", &v);
        if (c > MAXR)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "too many axes (%d)", c);
        if (c >= 0) {
            memcpy(axes, v, sizeof(int64_t) * (size_t)c);
            *n = c;
        }
        return KILN_OK;
    }
    const kiln_tensor *a = kiln__kin(ctx, 1);
    if (a)
        KILN_TRY(read_ints(ctx, a, "axes", axes, MAXR, n));
    return KILN_OK;
}

static kiln_status k_squeeze(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    int r = x->ndim;
    int64_t axes[MAXR], na;
    KILN_TRY(read_axes(ctx, axes, &na));
    bool drop[MAXR] = {false};
    if (na < 0) {
        for (int d = 0; d < r; d++)
            drop[d] = x->dims[d] == 1;
    } else {
        for (int i = 0; i < na; i++) {
            int a;
            KILN_TRY(kiln__norm_axis(ctx, axes[i], r, &a));
            if (r == 0 || drop[a])
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid or repeated axis %lld", (long long)axes[i]);
            if (x->dims[a] != 1)
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "cannot squeeze axis %d of size %lld", a,
                                  (long long)x->dims[a]);
            drop[a] = true;
        }
    }
    int64_t od[MAXR];
    int n = 0;
    for (int d = 0; d < r; d++)
        if (!drop[d])
            od[n++] = x->dims[d];
    return copy_reshaped(ctx, x, n, od);
}

static kiln_status k_unsqueeze(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    int64_t axes[MAXR], na;
    KILN_TRY(read_axes(ctx, axes, &na));
    if (na < 0)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing axes");
    int64_t ro = x->ndim + na;
    if (ro > MAXR)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "output rank %lld exceeds %d", (long long)ro, MAXR);
    bool ins[MAXR] = {false};
    for (int i = 0; i < na; i++) {
        int a;
        KILN_TRY(kiln__norm_axis(ctx, axes[i], (int)ro, &a));
        if (ins[a])
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "repeated axis %lld", (long long)axes[i]);
        ins[a] = true;
    }
    int64_t od[MAXR];
    for (int d = 0, j = 0; d < ro; d++)
        od[d] = ins[d] ? 1 : x->dims[j++];
    return copy_reshaped(ctx, x, (int)ro, od);
}

/* ------------------------------------------------------------------------------------------ */
/* Slice                                                                                      */

static kiln_status slice_param(kiln_kctx *ctx, int i, const char *attr, int64_t *v, int64_t *n)
{
    *n = -1;
    if (ctx->node->opset < 10) {
        const int64_t *a;
        int c = kiln__attr_ints(ctx->node, attr, &a);
        if (c > MAXR)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "too many entries in '%s'", attr);
        if (c >= 0) {
            memcpy(v, a, sizeof(int64_t) * (size_t)c);
            *n = c;
        }
        return KILN_OK;
    }
    const kiln_tensor *t = kiln__kin(ctx, i);
    if (t)
        KILN_TRY(read_ints(ctx, t, attr, v, MAXR, n));
    return KILN_OK;
}

static kiln_status k_slice(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim;
    int64_t starts[MAXR], ends[MAXR], axes[MAXR], steps[MAXR], ns, ne, na, nst;
    KILN_TRY(slice_param(ctx, 1, "starts", starts, &ns));
    KILN_TRY(slice_param(ctx, 2, "ends", ends, &ne));
    KILN_TRY(slice_param(ctx, 3, "axes", axes, &na));
    nst = -1;
    if (ctx->node->opset >= 10)
        KILN_TRY(slice_param(ctx, 4, "steps", steps, &nst));
    if (ns < 0 || ne < 0 || ns != ne)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "starts and ends must be given with equal lengths");
    if ((na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "axes/steps length differs from starts");
    int64_t st[MAXR], step[MAXR], od[MAXR];
    bool seen[MAXR] = {false};
    for (int d = 0; d < r; d++) {
        st[d] = 0;
        step[d] = 1;
        od[d] = x->dims[d];
    }
    for (int i = 0; i < ns; i++) {
        int a;
        if (na >= 0)
            KILN_TRY(kiln__norm_axis(ctx, axes[i], r, &a));
        else if (i < r)
            a = i;
        else
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "more starts than input dimensions");
        if (r == 0 || seen[a])
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "repeated or invalid axis %d", a);
        seen[a] = true;
        int64_t n = x->dims[a], s = starts[i], e = ends[i], p = nst >= 0 ? steps[i] : 1;
        if (p == 0)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "step must not be 0");
        if (p < -INT64_MAX)
            p = -INT64_MAX;
        if (s < 0)
            s += n;
        if (e < 0)
            e += n;
        int64_t cnt;
        if (p > 0) {
            s = s < 0 ? 0 : s > n ? n : s;
            e = e < 0 ? 0 : e > n ? n : e;
            cnt = e > s ? 1 + (e - s - 1) / p : 0;
        } else {
            s = s < 0 ? 0 : s > n - 1 ? n - 1 : s;
            e = e < -1 ? -1 : e > n - 1 ? n - 1 : e;
            cnt = s > e ? 1 + (s - e - 1) / (-p) : 0;
        }
        if (n == 0)
            cnt = 0;
        if (cnt <= 1)
            p = 1;
        st[a] = cnt ? s : 0;
        step[a] = p;
        od[a] = cnt;
    }
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    int64_t ist[MAXR], ss[MAXR], ds[MAXR], off = 0;
    cstrides(r, x->dims, (int64_t)es, ist);
    for (int d = 0; d < r; d++) {
        off += st[d] * ist[d];
        ss[d] = step[d] * ist[d];
    }
    cstrides(r, od, (int64_t)es, ds);
    strided_copy(ctx->pool, ctx->nthreads, ctx->out[0]->data, ds, (const uint8_t *)x->data + off, ss, (int64_t)es, r, od);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Split                                                                                      */

static kiln_status k_split(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim, no = ctx->n_out;
    if (r < 1 || no < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "Split needs a tensor of rank >= 1 and at least one output");
    int axis;
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", 0), r, &axis));
    int64_t D = x->dims[axis];
    int64_t *sp = kiln__calloc((size_t)no, sizeof(int64_t));
    if (!sp)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = KILN_OK;
    int64_t n = -1;
    if (ctx->node->opset < 13) {
        const int64_t *v;
        int c = kiln__attr_ints(ctx->node, "split", &v);
        if (c >= 0) {
            if (c != no) {
                st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "split has %d entries for %d outputs", c, no);
                goto done;
            }
            memcpy(sp, v, sizeof(int64_t) * (size_t)c);
            n = c;
        }
    } else if (kiln__kin(ctx, 1)) {
        st = read_ints(ctx, ctx->in[1], "split", sp, no, &n);
        if (st != KILN_OK)
            goto done;
        if (n != no) {
            st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "split has %lld entries for %d outputs", (long long)n, no);
            goto done;
        }
    }
    if (n >= 0) {
        int64_t sum = 0;
        for (int i = 0; i < no; i++) {
            if (sp[i] < 0 || sp[i] > D - sum) {
                st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid split sizes for dimension %lld", (long long)D);
                goto done;
            }
            sum += sp[i];
        }
        if (sum != D) {
            st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "split sizes sum to %lld, dimension is %lld", (long long)sum,
                            (long long)D);
            goto done;
        }
    } else {
        if (D % no) {
            if (ctx->node->opset < 18) {
                st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "dimension %lld is not divisible into %d parts",
                                (long long)D, no);
                goto done;
            }
            int64_t c = (D + no - 1) / no, left = D;
            for (int i = 0; i < no; i++) {
                sp[i] = left < c ? left : c;
                left -= sp[i];
            }
        } else {
            for (int i = 0; i < no; i++)
                sp[i] = D / no;
        }
    }
    for (int i = 0; i < no; i++) {
        int64_t od[MAXR];
        memcpy(od, x->dims, sizeof(int64_t) * (size_t)r);
        od[axis] = sp[i];
        st = kiln__kout(ctx, i, x->dtype, r, od);
        if (st != KILN_OK)
            goto done;
    }
    if (kiln__shape_numel(r, x->dims) > 0) {
        int64_t outer = 1, inner = (int64_t)es;
        for (int d = 0; d < axis; d++)
            outer *= x->dims[d];
        for (int d = axis + 1; d < r; d++)
            inner *= x->dims[d];
        int64_t off = 0, irow = D * inner;
        for (int i = 0; i < no; i++) {
            int64_t chunk = sp[i] * inner;
            if (chunk && outer) {
                int64_t d2[2] = {outer, chunk / (int64_t)es}, ss[2] = {irow, (int64_t)es},
                        ds[2] = {chunk, (int64_t)es};
                strided_copy(ctx->pool, ctx->nthreads, ctx->out[i]->data, ds, (const uint8_t *)x->data + off, ss, (int64_t)es,
                             2, d2);
            }
            off += chunk;
        }
    }
done:
    kiln__free(sp);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Pad                                                                                        */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

static inline int64_t pad_map(int64_t i, int64_t n, int mode)
{
    if (i >= 0 && i < n)
        return i;
    switch (mode) {
    case PAD_EDGE:
        return i < 0 ? 0 : n - 1;
    case PAD_WRAP: {
        int64_t m = i % n;
        return m < 0 ? m + n : m;
    }
    case PAD_REFLECT: {
        if (n == 1)
            return 0;
        int64_t p = 2 * (n - 1), m = i % p;
        if (m < 0)
            m += p;
        return m < n ? m : p - m;
    }
    default:
        return -1;
    }
}

/* opset < 11: pads (or paddings) and value are attributes */
static kiln_status pad_read_attrs(kiln_kctx *ctx, const kiln_tensor *x, int64_t *pads, uint8_t *cval)
{
    int r = x->ndim;
    const int64_t *v;
    int c = kiln__attr_ints(ctx->node, "pads", &v);
    if (c < 0)
        c = kiln__attr_ints(ctx->node, "paddings", &v);
    if (c != 2 * r)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "pads has %d entries for rank %d", c, r);
    memcpy(pads, v, sizeof(int64_t) * (size_t)c);
    float f = kiln__attr_f(ctx->node, "value", 0.0f);
    if (f != 0.0f) {
        if (!(kiln__dtype_is_int(x->dtype) || x->dtype == KILN_DT_BOOL || x->dtype == KILN_DT_FLOAT32 ||
              x->dtype == KILN_DT_FLOAT64 || x->dtype == KILN_DT_FLOAT16 || x->dtype == KILN_DT_BFLOAT16))
            return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "pad value for dtype %s", kiln_dtype_name(x->dtype));
        kiln__set_f64(x->dtype, cval, 0, f);
    }
    return KILN_OK;
}

/* opset >= 11: pads, constant_value and (opset 18) axes are inputs */
static kiln_status pad_read_inputs(kiln_kctx *ctx, const kiln_tensor *x, size_t es, int mode, int64_t *pads,
                                   uint8_t *cval)
{
    int r = x->ndim;
    const kiln_tensor *pt;
    KILN_TRY(kiln__kneed(ctx, 1, &pt));
    int64_t raw[2 * MAXR], np;
    KILN_TRY(read_ints(ctx, pt, "pads", raw, 2 * MAXR, &np));
    const kiln_tensor *axt = kiln__kin(ctx, 3);
    if (axt) {
        int64_t ax[MAXR], na;
        KILN_TRY(read_ints(ctx, axt, "axes", ax, MAXR, &na));
        if (np != 2 * na)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "pads has %lld entries for %lld axes", (long long)np,
                              (long long)na);
        bool seen[MAXR] = {false};
        for (int i = 0; i < na; i++) {
            int a;
            KILN_TRY(kiln__norm_axis(ctx, ax[i], r, &a));
            if (r == 0 || seen[a])
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "repeated axis %d", a);
            seen[a] = true;
            pads[a] = raw[i];
            pads[r + a] = raw[na + i];
        }
    } else {
        if (np != 2 * r)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "pads has %lld entries for rank %d", (long long)np, r);
        memcpy(pads, raw, sizeof(int64_t) * (size_t)np);
    }
    const kiln_tensor *cv = kiln__kin(ctx, 2);
    if (!cv || mode != PAD_CONSTANT)
        return KILN_OK;
    size_t ces;
    KILN_TRY(kiln__kdata_es(ctx, cv, &ces));
    if (cv->dtype != x->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "constant_value dtype %s differs from input %s",
                          kiln_dtype_name(cv->dtype), kiln_dtype_name(x->dtype));
    int64_t cn = kiln__shape_numel(cv->ndim, cv->dims);
    if (cn > 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "constant_value must be a scalar");
    if (cn == 1)
        memcpy(cval, cv->data, es);
    return KILN_OK;
}

/* output dims from pads, each pad within +-2^40 and no dimension negative */
static kiln_status pad_out_dims(kiln_kctx *ctx, const kiln_tensor *x, const int64_t *pads, int64_t *od)
{
    int r = x->ndim;
    for (int d = 0; d < 2 * r; d++)
        if (pads[d] > ((int64_t)1 << 40) || pads[d] < -((int64_t)1 << 40))
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "pad %lld is too large", (long long)pads[d]);
    for (int d = 0; d < r; d++) {
        int64_t lo = pads[d], hi = pads[r + d], o;
        if (__builtin_add_overflow(x->dims[d], lo, &o) || __builtin_add_overflow(o, hi, &o) || o < 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid pads %lld,%lld for dimension %lld", (long long)lo,
                              (long long)hi, (long long)x->dims[d]);
        od[d] = o;
    }
    return KILN_OK;
}

/* output positions [o0, o1) of one innermost row, each from the source element pad_map picks */
static void pad_row_edges(uint8_t *out, const uint8_t *srow, int64_t o0, int64_t o1, int64_t lo, int64_t n, int mode,
                          const uint8_t *cval, size_t es)
{
    for (int64_t o = o0; o < o1; o++) {
        int64_t si = pad_map(o - lo, n, mode);
        memcpy(out + o * (int64_t)es, si < 0 ? cval : srow + si * (int64_t)es, es);
    }
}

static kiln_status k_pad(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim;
    const char *ms = kiln__attr_s(ctx->node, "mode", "constant");
    int mode;
    if (!strcmp(ms, "constant"))
        mode = PAD_CONSTANT;
    else if (!strcmp(ms, "reflect"))
        mode = PAD_REFLECT;
    else if (!strcmp(ms, "edge"))
        mode = PAD_EDGE;
    else if (!strcmp(ms, "wrap"))
        mode = PAD_WRAP;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown pad mode '%s'", ms);
    int64_t pads[2 * MAXR] = {0};
    uint8_t cval[16] = {0};
    if (ctx->node->opset < 11)
        KILN_TRY(pad_read_attrs(ctx, x, pads, cval));
    else
        KILN_TRY(pad_read_inputs(ctx, x, es, mode, pads, cval));
    int64_t od[MAXR];
    KILN_TRY(pad_out_dims(ctx, x, pads, od));
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, od));
    int64_t total = kiln_tensor_numel(ctx->out[0]);
    if (!total)
        return KILN_OK;
    uint8_t *out = ctx->out[0]->data;
    const uint8_t *src = x->data;
    if (r == 0) {
        memcpy(out, src, es);
        return KILN_OK;
    }
    if (mode != PAD_CONSTANT)
        for (int d = 0; d < r; d++)
            if (x->dims[d] == 0)
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "cannot %s-pad an empty dimension", ms);
    int64_t ist[MAXR];
    cstrides(r, x->dims, (int64_t)es, ist);
    int last = r - 1;
    int64_t L = od[last], n = x->dims[last], lo = pads[last];
    int64_t rows = total / L;
    /* inner range copied contiguously: output [c0, c1) <- input [c0 - lo, c1 - lo) */
    int64_t c0 = lo > 0 ? lo : 0, c1 = lo + n < L ? lo + n : L;
    if (c0 > L)
        c0 = L;
    if (c1 < c0)
        c1 = c0;
    int64_t idx[MAXR] = {0};
    for (int64_t row = 0; row < rows; row++, out += L * (int64_t)es) {
        int64_t soff = 0;
        bool inside = true;
        for (int d = 0; d < last; d++) {
            int64_t si = pad_map(idx[d] - pads[d], x->dims[d], mode);
            if (si < 0) {
                inside = false;
                break;
            }
            soff += si * ist[d];
        }
        if (!inside) {
            fill_pattern(out, L, cval, es);
        } else {
            const uint8_t *srow = src + soff;
            pad_row_edges(out, srow, 0, c0, lo, n, mode, cval, es);
            if (c1 > c0)
                memcpy(out + c0 * (int64_t)es, srow + (c0 - lo) * (int64_t)es, (size_t)(c1 - c0) * es);
            pad_row_edges(out, srow, c1, L, lo, n, mode, cval, es);
        }
        for (int d = last - 1; d >= 0; d--) {
            if (++idx[d] < od[d])
                break;
            idx[d] = 0;
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Range                                                                                      */

static kiln_status k_range(kiln_kctx *ctx)
{
    const kiln_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        KILN_TRY(kiln__kneed(ctx, i, &t[i]));
        size_t es;
        KILN_TRY(kiln__kdata_es(ctx, t[i], &es));
        if (kiln__shape_numel(t[i]->ndim, t[i]->dims) != 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "input %d must be a scalar", i);
        if (t[i]->dtype != t[0]->dtype)
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "inputs must share one dtype");
    }
    kiln_dtype dt = t[0]->dtype;
    int64_t n;
    if (dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16) {
        double s = kiln__get_f64(dt, t[0]->data, 0), l = kiln__get_f64(dt, t[1]->data, 0),
               d = kiln__get_f64(dt, t[2]->data, 0);
        if (d == 0 || !isfinite(s) || !isfinite(l) || !isfinite(d))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid range (delta 0 or non-finite values)");
        double c = ceil((l - s) / d);
        if (!(c < 4e18))
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "range is too long");
        n = c > 0 ? (int64_t)c : 0;
        KILN_TRY(kiln__kout(ctx, 0, dt, 1, &n));
        void *o = ctx->out[0]->data;
        if (dt == KILN_DT_FLOAT32) {
            float *f = o;
            for (int64_t i = 0; i < n; i++)
                f[i] = (float)(s + (double)i * d);
        } else {
            for (int64_t i = 0; i < n; i++)
                kiln__set_f64(dt, o, i, s + (double)i * d);
        }
    } else if (kiln__dtype_is_int(dt)) {
        int64_t s = kiln__get_i64(dt, t[0]->data, 0), l = kiln__get_i64(dt, t[1]->data, 0),
                d = kiln__get_i64(dt, t[2]->data, 0);
        if (d == 0)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "delta must not be 0");
        __int128 diff = (__int128)l - s, dd = d, c;
        if ((diff > 0) != (dd > 0) || diff == 0)
            c = 0;
        else
            c = (diff + dd + (dd > 0 ? -1 : 1)) / dd;
        if (c > ((__int128)1 << 62))
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "range is too long");
        n = (int64_t)c;
        KILN_TRY(kiln__kout(ctx, 0, dt, 1, &n));
        void *o = ctx->out[0]->data;
        if (dt == KILN_DT_INT64) {
            for (int64_t i = 0; i < n; i++)
                ((int64_t *)o)[i] = (int64_t)((__int128)s + (__int128)i * d);
        } else if (dt == KILN_DT_INT32) {
            for (int64_t i = 0; i < n; i++)
                ((int32_t *)o)[i] = (int32_t)(s + i * d); /* |i * d| < |limit - start| + |d| < 2^33 */
        } else {
            for (int64_t i = 0; i < n; i++)
                kiln__set_i64(dt, o, i, (int64_t)((__int128)s + (__int128)i * d));
        }
    } else {
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(dt));
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Trilu                                                                                      */

static kiln_status k_trilu(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    if (x->ndim < 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "Trilu input must have rank >= 2");
    int64_t k = 0;
    const kiln_tensor *kt = kiln__kin(ctx, 1);
    if (kt) {
        int64_t v[1], n;
        KILN_TRY(read_ints(ctx, kt, "k", v, 1, &n));
        if (n != 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "k must be a scalar");
        k = v[0];
    }
    bool upper = kiln__attr_i(ctx->node, "upper", 1) != 0;
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, x->dims));
    size_t nb = ctx->out[0]->nbytes;
    if (!nb)
        return KILN_OK;
    memcpy(ctx->out[0]->data, x->data, nb);
    int64_t R = x->dims[x->ndim - 2], C = x->dims[x->ndim - 1];
    int64_t mats = (int64_t)(nb / es) / (R * C);
    int64_t lim = R + C + 1;
    if (k > lim)
        k = lim;
    if (k < -lim)
        k = -lim;
    uint8_t *o = ctx->out[0]->data;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < R; i++) {
            uint8_t *row = o + (size_t)((m * R + i) * C) * es;
            int64_t a, b; /* zero columns [a, b) */
            if (upper) {
                a = 0;
                b = i + k;
            } else {
                a = i + k + 1;
                b = C;
            }
            if (a < 0)
                a = 0;
            if (b > C)
                b = C;
            if (b > a)
                memset(row + (size_t)a * es, 0, (size_t)(b - a) * es);
        }
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */

const kiln_kernel_reg kiln__ref_shape[] = {
    {KILN_OP_Shape, k_shape},
    {KILN_OP_Size, k_size},
    {KILN_OP_Concat, k_concat},
    {KILN_OP_ConstantOfShape, k_constant_of_shape},
    {KILN_OP_DepthToSpace, k_depth_to_space},
    {KILN_OP_SpaceToDepth, k_space_to_depth},
    {KILN_OP_Expand, k_expand},
    {KILN_OP_EyeLike, k_eyelike},
    {KILN_OP_Flatten, k_flatten},
    {KILN_OP_Pad, k_pad},
    {KILN_OP_Range, k_range},
    {KILN_OP_Reshape, k_reshape},
    {KILN_OP_Slice, k_slice},
    {KILN_OP_Split, k_split},
    {KILN_OP_Squeeze, k_squeeze},
    {KILN_OP_Tile, k_tile},
    {KILN_OP_Transpose, k_transpose},
    {KILN_OP_Trilu, k_trilu},
    {KILN_OP_Unsqueeze, k_unsqueeze},
    {KILN_OP_Gather, kiln__k_gather},
    {KILN_OP_GatherElements, kiln__k_gather_elements},
    {KILN_OP_GatherND, kiln__k_gather_nd},
    {KILN_OP_NonZero, kiln__k_nonzero},
    {KILN_OP_OneHot, kiln__k_onehot},
    {KILN_OP_ReverseSequence, kiln__k_reverse_sequence},
    {KILN_OP_ScatterElements, kiln__k_scatter_elements},
    {KILN_OP_Scatter, kiln__k_scatter_elements},
    {KILN_OP_ScatterND, kiln__k_scatter_nd},
    {KILN_OP_Compress, kiln__k_compress},
    {KILN_OP_CumSum, kiln__k_cumsum},
    {KILN_OP_TopK, kiln__k_topk},
    {KILN_OP_ArgMax, kiln__k_argmax},
    {KILN_OP_ArgMin, kiln__k_argmin},
    {KILN_OP_Unique, kiln__k_unique},
    {KILN_OP_COUNT, NULL},
};
