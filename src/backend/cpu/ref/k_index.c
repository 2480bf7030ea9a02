/* Reference kernels: indexing, selection and sorting ops.
 *
 * Gather, GatherElements, GatherND, NonZero, OneHot, ReverseSequence, ScatterElements (and the
 * deprecated Scatter), ScatterND, Compress, CumSum, TopK, ArgMax, ArgMin, Unique. The kernels are
 * non-static (kiln__k_*) and registered from k_shape.c's table (kiln__ref_shape).
 *
 * Index inputs may be int32 or int64; negative indices count from the end; an index out of range
 * is an error (never an out-of-bounds access). */
#include "../../kernel.h"
#include "k_index.h"
#include "../lowbit.h"
#include <math.h>


#define MAXR KILN_MAX_DIMS

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */

/* Checks an index tensor (int32 or int64). */
static kiln_status index_in(const kiln_kctx *ctx, int i, const kiln_tensor **t)
{
    KILN_TRY(kiln__kneed(ctx, i, t));
    if ((*t)->dtype != KILN_DT_INT64 && (*t)->dtype != KILN_DT_INT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "indices must be int32 or int64, got %s",
                          kiln_dtype_name((*t)->dtype));
    size_t es;
    return kiln__kdata_es(ctx, *t, &es);
}

static inline int64_t ix_get(const kiln_tensor *t, int64_t i)
{
    return t->dtype == KILN_DT_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* Normalizes index v for a dimension of size n; false if out of range. */
static inline bool ix_norm(int64_t *v, int64_t n)
{
    if (*v < 0)
        *v += n;
    return *v >= 0 && *v < n;
}

static kiln_status ix_err(const kiln_kctx *ctx, int64_t v, int64_t n)
{
    return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "index %lld is out of range for dimension %lld", (long long)v,
                      (long long)n);
}

static inline void copy_el(uint8_t *d, const uint8_t *s, size_t es)
{
    switch (es) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    case 8: memcpy(d, s, 8); break;
    default: memcpy(d, s, es); break;
    }
}

static void fill_pattern(uint8_t *dst, int64_t n, const void *val, size_t es)
{
    if (n <= 0)
        return;
    size_t total = (size_t)n * es;
    memcpy(dst, val, es);
    size_t done = es;
    while (done < total) {
        size_t c = done < total - done ? done : total - done;
        memcpy(dst + done, dst, c);
        done += c;
    }
}

static int64_t prod(const int64_t *d, int a, int b)
{
    int64_t p = 1;
    for (int i = a; i < b; i++)
        p *= d[i];
    return p;
}

static bool is_numeric(kiln_dtype dt)
{
    return kiln__dtype_is_int(dt) || dt == KILN_DT_BOOL || dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 ||
           dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16;
}

/* Order-preserving unsigned key of one element: a < b (numerically) iff key(a) < key(b). */
#define KSIGN ((uint64_t)1 << 63)
static inline uint64_t dkey(double d)
{
    if (d == 0)
        d = 0.0; /* -0 == +0 */
    uint64_t b;
    memcpy(&b, &d, 8);
    return (b & KSIGN) ? ~b : b | KSIGN;
}

static inline uint64_t key_of(kiln_dtype dt, const uint8_t *p, size_t es)
{
    switch (dt) {
    case KILN_DT_FLOAT32: { float f; memcpy(&f, p, 4); return dkey(f); }
    case KILN_DT_FLOAT64: { double f; memcpy(&f, p, 8); return dkey(f); }
    case KILN_DT_FLOAT16: { uint16_t h; memcpy(&h, p, 2); return dkey(kiln__f16_to_f32(h)); }
    case KILN_DT_BFLOAT16: { uint16_t h; memcpy(&h, p, 2); return dkey(kiln__bf16_to_f32(h)); }
    case KILN_DT_INT8: return (uint64_t)(int64_t)(int8_t)p[0] ^ KSIGN;
    case KILN_DT_INT16: { int16_t v; memcpy(&v, p, 2); return (uint64_t)(int64_t)v ^ KSIGN; }
    case KILN_DT_INT32: { int32_t v; memcpy(&v, p, 4); return (uint64_t)(int64_t)v ^ KSIGN; }
    case KILN_DT_INT64: { int64_t v; memcpy(&v, p, 8); return (uint64_t)v ^ KSIGN; }
    default: { /* unsigned, bool, others: raw little-endian bytes */
        uint64_t v = 0;
        memcpy(&v, p, es < 8 ? es : 8);
        return v;
    }
    }
}

/* (key, index) pairs sorted ascending by key, then index. */
typedef struct {
    uint64_t k;
    int64_t i;
} kpair;

static inline bool kp_lt(const kpair *a, const kpair *b) { return a->k < b->k || (a->k == b->k && a->i < b->i); }

/* The one stable sort of this file: insertion-sorted runs of `run` elements, then bottom-up
 * merges between a and tmp (n elements of es bytes each; tmp as large as a). lt(x, y, user):
 * x orders strictly before y. Always inlined, so each caller gets a copy specialized for its
 * element size and comparison. */
typedef bool (*msort_lt)(const void *x, const void *y, const void *user);

static inline __attribute__((always_inline)) void msort(void *va, void *vtmp, int64_t n, size_t es, msort_lt lt,
                                                        const void *user, int64_t run)
{
    uint8_t *a = va, v[16];
    for (int64_t s = 0; s < n; s += run) { /* insertion sort runs */
        int64_t e = s + run < n ? s + run : n;
        for (int64_t i = s + 1; i < e; i++) {
            memcpy(v, a + i * es, es);
            int64_t j = i - 1;
            while (j >= s && lt(v, a + j * es, user)) {
                memcpy(a + (j + 1) * es, a + j * es, es);
                j--;
            }
            memcpy(a + (j + 1) * es, v, es);
        }
    }
    uint8_t *src = a, *dst = vtmp;
    for (int64_t w = run; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                memcpy(dst + k++ * es, lt(src + j * es, src + i * es, user) ? src + j++ * es : src + i++ * es, es);
            memcpy(dst + k * es, src + i * es, (size_t)(mid - i) * es);
            k += mid - i;
            memcpy(dst + k * es, src + j * es, (size_t)(hi - j) * es);
        }
        uint8_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, es * (size_t)n);
}

static bool kp_lt_v(const void *x, const void *y, const void *user)
{
    (void)user;
    return kp_lt(x, y);
}

static void kp_sort(kpair *a, kpair *tmp, int64_t n)
{
    _Static_assert(sizeof(kpair) <= 16, "msort's element buffer");
    msort(a, tmp, n, sizeof *a, kp_lt_v, NULL, 16);
}

/* ------------------------------------------------------------------------------------------ */
/* Gather                                                                                     */

typedef struct {
    uint8_t *out;
    const uint8_t *src;
    const int64_t *ix;
    int64_t nidx, n, row;
} gather_job;

static void gather_run(void *vj, int64_t b, int64_t e)
{
    const gather_job *j = vj;
    for (int64_t u = b; u < e; u++) {
        int64_t o = u / j->nidx, k = u % j->nidx;
        const uint8_t *s = j->src + (o * j->n + j->ix[k]) * j->row;
        uint8_t *d = j->out + u * j->row;
        switch (j->row) {
        case 4: memcpy(d, s, 4); break;
        case 8: memcpy(d, s, 8); break;
        default: memcpy(d, s, (size_t)j->row); break;
        }
    }
}

kiln_status kiln__k_gather(kiln_kctx *ctx)
{
    if (kiln__lowbit_layer(ctx)) /* a 4-bit embedding table (lowbit.h) */
        return kiln__run_lowbit(ctx, kiln__k_gather);
    const kiln_tensor *x, *ind;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    KILN_TRY(index_in(ctx, 1, &ind));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim, q = ind->ndim;
    if (r < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "Gather data must have rank >= 1");
    int axis;
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", 0), r, &axis));
    if (r - 1 + q > MAXR)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "output rank %d exceeds %d", r - 1 + q, MAXR);
    int64_t od[MAXR];
    int no = 0;
    for (int d = 0; d < axis; d++)
        od[no++] = x->dims[d];
    for (int d = 0; d < q; d++)
        od[no++] = ind->dims[d];
    for (int d = axis + 1; d < r; d++)
        od[no++] = x->dims[d];
    int64_t nidx = kiln__shape_numel(q, ind->dims), n = x->dims[axis];
    int64_t sbuf[64], *ix = sbuf;
    if (nidx > 64) {
        ix = kiln__malloc(sizeof(int64_t) * (size_t)nidx);
        if (!ix)
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    kiln_status st = KILN_OK;
    for (int64_t k = 0; k < nidx; k++) {
        int64_t v = ix_get(ind, k);
        if (!ix_norm(&v, n)) {
            st = ix_err(ctx, ix_get(ind, k), n);
            goto done;
        }
        ix[k] = v;
    }
    /* gather_run writes every byte (units x row): no zero fill (a serial 384 KB memset per embedding lookup of
     * BERT-base) */
    st = kiln__kout_uninit(ctx, 0, x->dtype, no, od);
    if (st != KILN_OK || !ctx->out[0]->nbytes)
        goto done;
    {
        gather_job j = {.out = ctx->out[0]->data, .src = x->data, .ix = ix, .nidx = nidx, .n = n,
                        .row = prod(x->dims, axis + 1, r) * (int64_t)es};
        int64_t units = prod(x->dims, 0, axis) * nidx;
        if (ctx->nthreads != 1 && units > 1 && (int64_t)ctx->out[0]->nbytes >= (1 << 18)) {
            int64_t grain = (1 << 15) / j.row;
            kiln__parallel_for(ctx->pool, ctx->nthreads, units, grain < 1 ? 1 : grain, gather_run, &j);
        } else {
            gather_run(&j, 0, units);
        }
    }
done:
    if (ix != sbuf)
        kiln__free(ix);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* GatherElements, ScatterElements                                                            */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static kiln_status parse_reduction(kiln_kctx *ctx, kiln_dtype dt, int *red)
{
    const char *s = kiln__attr_s(ctx->node, "reduction", "none");
    if (!strcmp(s, "none"))
        *red = RED_NONE;
    else if (!strcmp(s, "add"))
        *red = RED_ADD;
    else if (!strcmp(s, "mul"))
        *red = RED_MUL;
    else if (!strcmp(s, "max"))
        *red = RED_MAX;
    else if (!strcmp(s, "min"))
        *red = RED_MIN;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown reduction '%s'", s);
    if (*red != RED_NONE && !is_numeric(dt))
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "reduction on dtype %s", kiln_dtype_name(dt));
    return KILN_OK;
}

#define RED_INT(T)                                                                                                 \
    do {                                                                                                           \
        T a, b;                                                                                                    \
        memcpy(&a, d, sizeof a);                                                                                   \
        memcpy(&b, s, sizeof b);                                                                                   \
        switch (red) {                                                                                             \
        case RED_ADD: a = (T)((uint64_t)a + (uint64_t)b); break;                                                   \
        case RED_MUL: a = (T)((uint64_t)a * (uint64_t)b); break;                                                   \
        case RED_MAX: a = b > a ? b : a; break;                                                                    \
        default: a = b < a ? b : a; break;                                                                         \
        }                                                                                                          \
        memcpy(d, &a, sizeof a);                                                                                   \
    } while (0)

#define RED_FLT(T)                                                                                                 \
    do {                                                                                                           \
        T a, b;                                                                                                    \
        memcpy(&a, d, sizeof a);                                                                                   \
        memcpy(&b, s, sizeof b);                                                                                   \
        switch (red) {                                                                                             \
        case RED_ADD: a = a + b; break;                                                                            \
        case RED_MUL: a = a * b; break;                                                                            \
        case RED_MAX: a = b > a ? b : a; break;                                                                    \
        default: a = b < a ? b : a; break;                                                                         \
        }                                                                                                          \
        memcpy(d, &a, sizeof a);                                                                                   \
    } while (0)

/* d = d (red) s for one element of dtype dt. */
static void red_apply(kiln_dtype dt, uint8_t *d, const uint8_t *s, int red, size_t es)
{
    if (red == RED_NONE) {
        copy_el(d, s, es);
        return;
    }
    switch (dt) {
    case KILN_DT_FLOAT32: RED_FLT(float); break;
    case KILN_DT_FLOAT64: RED_FLT(double); break;
    case KILN_DT_INT8: RED_INT(int8_t); break;
    case KILN_DT_UINT8: RED_INT(uint8_t); break;
    case KILN_DT_INT16: RED_INT(int16_t); break;
    case KILN_DT_UINT16: RED_INT(uint16_t); break;
    case KILN_DT_INT32: RED_INT(int32_t); break;
    case KILN_DT_UINT32: RED_INT(uint32_t); break;
    case KILN_DT_INT64: RED_INT(int64_t); break;
    case KILN_DT_UINT64: RED_INT(uint64_t); break;
    case KILN_DT_BOOL:
        *d = (red == RED_ADD || red == RED_MAX) ? (*d || *s) : (*d && *s);
        break;
    case KILN_DT_FLOAT16:
    case KILN_DT_BFLOAT16: {
        uint16_t ha, hb;
        memcpy(&ha, d, 2);
        memcpy(&hb, s, 2);
        bool bf = dt == KILN_DT_BFLOAT16;
        float a = bf ? kiln__bf16_to_f32(ha) : kiln__f16_to_f32(ha), b = bf ? kiln__bf16_to_f32(hb) : kiln__f16_to_f32(hb);
        switch (red) {
        case RED_ADD: a = a + b; break;
        case RED_MUL: a = a * b; break;
        case RED_MAX: a = b > a ? b : a; break;
        default: a = b < a ? b : a; break;
        }
        ha = bf ? kiln__f32_to_bf16(a) : kiln__f32_to_f16(a);
        memcpy(d, &ha, 2);
        break;
    }
    default:
        break;
    }
}

/* Shared by GatherElements (scatter = false) and ScatterElements. */
static kiln_status elements_op(kiln_kctx *ctx, bool scatter)
{
    const kiln_tensor *x, *ind, *upd = NULL;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    KILN_TRY(index_in(ctx, 1, &ind));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim;
    if (r < 1 || ind->ndim != r)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "data and indices must have the same rank >= 1 (%d vs %d)", r,
                          ind->ndim);
    int axis;
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", 0), r, &axis));
    int red = RED_NONE;
    if (scatter) {
        KILN_TRY(kiln__kneed(ctx, 2, &upd));
        size_t ues;
        KILN_TRY(kiln__kdata_es(ctx, upd, &ues));
        if (upd->dtype != x->dtype)
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "updates dtype %s differs from data %s",
                              kiln_dtype_name(upd->dtype), kiln_dtype_name(x->dtype));
        if (upd->ndim != r || memcmp(upd->dims, ind->dims, sizeof(int64_t) * (size_t)r))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "updates shape must equal indices shape");
        KILN_TRY(parse_reduction(ctx, x->dtype, &red));
    }
    for (int d = 0; d < r; d++)
        if (d != axis && ind->dims[d] > x->dims[d])
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "indices dim %d (%lld) exceeds data dim (%lld)", d,
                              (long long)ind->dims[d], (long long)x->dims[d]);
    int64_t total = kiln__shape_numel(r, ind->dims);
    if (scatter) {
        KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, x->dims));
        if (ctx->out[0]->nbytes)
            memcpy(ctx->out[0]->data, x->data, ctx->out[0]->nbytes);
    } else {
        KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, ind->dims));
    }
    if (!total)
        return KILN_OK;
    int64_t xst[MAXR];
    {
        int64_t s = (int64_t)es;
        for (int d = r - 1; d >= 0; d--) {
            xst[d] = s;
            s *= x->dims[d];
        }
    }
    int64_t n = x->dims[axis];
    int64_t idx[MAXR] = {0}, base = 0;
    const uint8_t *xs = x->data;
    uint8_t *out = ctx->out[0]->data;
    const uint8_t *us = scatter ? upd->data : NULL;
    for (int64_t lin = 0; lin < total; lin++) {
        int64_t v = ix_get(ind, lin);
        if (!ix_norm(&v, n))
            return ix_err(ctx, ix_get(ind, lin), n);
        int64_t off = base + v * xst[axis];
        if (scatter)
            red_apply(x->dtype, out + off, us + lin * (int64_t)es, red, es);
        else
            copy_el(out + lin * (int64_t)es, xs + off, es);
        for (int d = r - 1; d >= 0; d--) {
            idx[d]++;
            if (d != axis)
                base += xst[d];
            if (idx[d] < ind->dims[d])
                break;
            if (d != axis)
                base -= idx[d] * xst[d];
            idx[d] = 0;
        }
    }
    return KILN_OK;
}

kiln_status kiln__k_gather_elements(kiln_kctx *ctx) { return elements_op(ctx, false); }
kiln_status kiln__k_scatter_elements(kiln_kctx *ctx) { return elements_op(ctx, true); }

/* ------------------------------------------------------------------------------------------ */
/* GatherND, ScatterND                                                                        */

kiln_status kiln__k_gather_nd(kiln_kctx *ctx)
{
    const kiln_tensor *x, *ind;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    KILN_TRY(index_in(ctx, 1, &ind));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim, q = ind->ndim;
    int64_t b = kiln__attr_i(ctx->node, "batch_dims", 0);
    if (r < 1 || q < 1 || b < 0 || b >= r || b >= q)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid ranks (data %d, indices %d, batch_dims %lld)", r, q,
                          (long long)b);
    int64_t k = ind->dims[q - 1];
    if (k < 0 || k > r - b)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "indices last dimension %lld exceeds data rank %d - batch_dims",
                          (long long)k, r);
    for (int d = 0; d < b; d++)
        if (ind->dims[d] != x->dims[d])
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "batch dimension %d differs (%lld vs %lld)", d,
                              (long long)ind->dims[d], (long long)x->dims[d]);
    int no = (q - 1) + (r - (int)b - (int)k);
    if (no > MAXR)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "output rank %d exceeds %d", no, MAXR);
    int64_t od[MAXR];
    int c = 0;
    for (int d = 0; d < q - 1; d++)
        od[c++] = ind->dims[d];
    for (int d = (int)(b + k); d < r; d++)
        od[c++] = x->dims[d];
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, no, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    int64_t xst[MAXR];
    {
        int64_t s = (int64_t)es;
        for (int d = r - 1; d >= 0; d--) {
            xst[d] = s;
            s *= x->dims[d];
        }
    }
    int64_t B = prod(x->dims, 0, (int)b), T = prod(ind->dims, (int)b, q - 1);
    int64_t slice = prod(x->dims, (int)(b + k), r) * (int64_t)es;
    int64_t bstride = prod(x->dims, (int)b, r) * (int64_t)es;
    const uint8_t *xs = x->data;
    uint8_t *out = ctx->out[0]->data;
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t t = 0; t < T; t++) {
            int64_t tup = bi * T + t, off = bi * bstride;
            for (int j = 0; j < k; j++) {
                int64_t v = ix_get(ind, tup * k + j), n = x->dims[b + j];
                if (!ix_norm(&v, n))
                    return ix_err(ctx, ix_get(ind, tup * k + j), n);
                off += v * xst[b + j];
            }
            memcpy(out, xs + off, (size_t)slice);
            out += slice;
        }
    return KILN_OK;
}

kiln_status kiln__k_scatter_nd(kiln_kctx *ctx)
{
    const kiln_tensor *x, *ind, *upd;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    KILN_TRY(index_in(ctx, 1, &ind));
    KILN_TRY(kiln__kneed(ctx, 2, &upd));
    size_t es, ues;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    KILN_TRY(kiln__kdata_es(ctx, upd, &ues));
    if (upd->dtype != x->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "updates dtype %s differs from data %s", kiln_dtype_name(upd->dtype),
                          kiln_dtype_name(x->dtype));
    int r = x->ndim, q = ind->ndim;
    if (r < 1 || q < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "data and indices must have rank >= 1");
    int64_t k = ind->dims[q - 1];
    if (k < 0 || k > r)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "indices last dimension %lld exceeds data rank %d", (long long)k, r);
    /* updates shape = indices.shape[:-1] + data.shape[k:] */
    int nu = q - 1 + r - (int)k;
    bool ok = upd->ndim == nu;
    for (int d = 0; ok && d < q - 1; d++)
        ok = upd->dims[d] == ind->dims[d];
    for (int d = (int)k; ok && d < r; d++)
        ok = upd->dims[q - 1 + d - k] == x->dims[d];
    if (!ok)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "updates shape does not match indices and data");
    int red;
    KILN_TRY(parse_reduction(ctx, x->dtype, &red));
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, x->dims));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    memcpy(ctx->out[0]->data, x->data, ctx->out[0]->nbytes);
    int64_t xst[MAXR];
    {
        int64_t s = (int64_t)es;
        for (int d = r - 1; d >= 0; d--) {
            xst[d] = s;
            s *= x->dims[d];
        }
    }
    int64_t T = prod(ind->dims, 0, q - 1);
    int64_t slice_el = prod(x->dims, (int)k, r);
    const uint8_t *us = upd->data;
    uint8_t *out = ctx->out[0]->data;
    for (int64_t t = 0; t < T; t++) {
        int64_t off = 0;
        for (int j = 0; j < k; j++) {
            int64_t v = ix_get(ind, t * k + j), n = x->dims[j];
            if (!ix_norm(&v, n))
                return ix_err(ctx, ix_get(ind, t * k + j), n);
            off += v * xst[j];
        }
        const uint8_t *s = us + t * slice_el * (int64_t)es;
        if (red == RED_NONE) {
            memcpy(out + off, s, (size_t)slice_el * es);
        } else {
            for (int64_t e = 0; e < slice_el; e++)
                red_apply(x->dtype, out + off + e * (int64_t)es, s + e * (int64_t)es, red, es);
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* NonZero, Compress                                                                          */

static inline bool nz(kiln_dtype dt, const uint8_t *p, size_t es)
{
    switch (dt) {
    case KILN_DT_FLOAT32: { float f; memcpy(&f, p, 4); return f != 0.0f; }
    case KILN_DT_FLOAT64: { double f; memcpy(&f, p, 8); return f != 0.0; }
    case KILN_DT_FLOAT16:
    case KILN_DT_BFLOAT16: { uint16_t h; memcpy(&h, p, 2); return (h & 0x7fff) != 0; }
    default:
        for (size_t i = 0; i < es; i++)
            if (p[i])
                return true;
        return false;
    }
}

kiln_status kiln__k_nonzero(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim;
    int64_t n = kiln__shape_numel(r, x->dims), cnt = 0;
    const uint8_t *p = x->data;
    for (int64_t i = 0; i < n; i++)
        cnt += nz(x->dtype, p + i * (int64_t)es, es);
    int rr = r ? r : 1;
    int64_t od[2] = {rr, cnt};
    KILN_TRY(kiln__kout(ctx, 0, KILN_DT_INT64, 2, od));
    int64_t *o = ctx->out[0]->data;
    int64_t idx[MAXR] = {0}, c = 0;
    for (int64_t i = 0; i < n; i++) {
        if (nz(x->dtype, p + i * (int64_t)es, es)) {
            for (int d = 0; d < r; d++)
                o[d * cnt + c] = idx[d];
            c++;
        }
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < x->dims[d])
                break;
            idx[d] = 0;
        }
    }
    return KILN_OK;
}

kiln_status kiln__k_compress(kiln_kctx *ctx)
{
    const kiln_tensor *x, *cond;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    KILN_TRY(kiln__kneed(ctx, 1, &cond));
    size_t es, ces;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    KILN_TRY(kiln__kdata_es(ctx, cond, &ces));
    if (cond->ndim != 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "condition must be 1-D");
    const uint8_t *cp = cond->data;
    int64_t clen = cond->dims[0];
    bool has_axis = kiln__attr(ctx->node, "axis") != NULL;
    int r = x->ndim, axis = 0;
    int64_t outer, n, inner;
    if (has_axis) {
        if (r < 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have rank >= 1");
        KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", 0), r, &axis));
        n = x->dims[axis];
        outer = prod(x->dims, 0, axis);
        inner = prod(x->dims, axis + 1, r);
    } else {
        n = kiln__shape_numel(r, x->dims);
        outer = inner = 1;
    }
    int64_t sel = 0;
    for (int64_t i = 0; i < clen; i++)
        if (nz(cond->dtype, cp + i * (int64_t)ces, ces)) {
            if (i >= n)
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "condition selects index %lld beyond dimension %lld",
                                  (long long)i, (long long)n);
            sel++;
        }
    int64_t od[MAXR];
    int no;
    if (has_axis) {
        memcpy(od, x->dims, sizeof(int64_t) * (size_t)r);
        od[axis] = sel;
        no = r;
    } else {
        od[0] = sel;
        no = 1;
    }
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, no, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    int64_t row = inner * (int64_t)es;
    const uint8_t *xs = x->data;
    uint8_t *out = ctx->out[0]->data;
    int64_t lim = clen < n ? clen : n;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < lim; i++)
            if (nz(cond->dtype, cp + i * (int64_t)ces, ces)) {
                memcpy(out, xs + (o * n + i) * row, (size_t)row);
                out += row;
            }
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* OneHot, ReverseSequence                                                                    */

kiln_status kiln__k_onehot(kiln_kctx *ctx)
{
    const kiln_tensor *ind, *dep, *val;
    KILN_TRY(kiln__kneed(ctx, 0, &ind));
    KILN_TRY(kiln__kneed(ctx, 1, &dep));
    KILN_TRY(kiln__kneed(ctx, 2, &val));
    size_t ies, des, es;
    KILN_TRY(kiln__kdata_es(ctx, ind, &ies));
    KILN_TRY(kiln__kdata_es(ctx, dep, &des));
    KILN_TRY(kiln__kdata_es(ctx, val, &es));
    if (!is_numeric(ind->dtype) || !is_numeric(dep->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "indices and depth must be numeric");
    if (kiln__shape_numel(dep->ndim, dep->dims) != 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "depth must have one element");
    if (kiln__shape_numel(val->ndim, val->dims) != 2 || val->ndim > 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "values must have two elements");
    double dd = kiln__get_f64(dep->dtype, dep->data, 0);
    if (!(dd >= 1 && dd < 9e15))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid depth %g", dd);
    int64_t depth = (int64_t)dd;
    int r = ind->ndim;
    if (r + 1 > MAXR)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "output rank exceeds %d", MAXR);
    int axis;
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", -1), r + 1, &axis));
    int64_t od[MAXR];
    for (int d = 0, j = 0; d <= r; d++)
        od[d] = d == axis ? depth : ind->dims[j++];
    KILN_TRY(kiln__kout(ctx, 0, val->dtype, r + 1, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    const uint8_t *vs = val->data;
    uint8_t *out = ctx->out[0]->data;
    fill_pattern(out, kiln_tensor_numel(ctx->out[0]), vs, es);
    int64_t outer = prod(ind->dims, 0, axis), inner = prod(ind->dims, axis, r);
    bool fl = kiln__dtype_is_float(ind->dtype);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t lin = o * inner + i, v;
            if (fl) {
                double f = kiln__get_f64(ind->dtype, ind->data, lin);
                if (!(f > -9e15 && f < 9e15))
                    continue;
                v = (int64_t)f;
            } else {
                v = kiln__get_i64(ind->dtype, ind->data, lin);
            }
            if (v < 0 && v >= -depth)
                v += depth;
            if (v < 0 || v >= depth)
                continue;
            copy_el(out + ((o * depth + v) * inner + i) * (int64_t)es, vs + es, es);
        }
    return KILN_OK;
}

kiln_status kiln__k_reverse_sequence(kiln_kctx *ctx)
{
    const kiln_tensor *x, *sl;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    KILN_TRY(index_in(ctx, 1, &sl));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim;
    int64_t ta = kiln__attr_i(ctx->node, "time_axis", 0), ba = kiln__attr_i(ctx->node, "batch_axis", 1);
    if (r < 2 || !((ta == 0 && ba == 1) || (ta == 1 && ba == 0)))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "need rank >= 2 and time/batch axes 0 and 1");
    int64_t T = x->dims[ta], B = x->dims[ba];
    if (sl->ndim != 1 || sl->dims[0] != B)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "sequence_lens must have shape [%lld]", (long long)B);
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, x->dims));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    int64_t row = prod(x->dims, 2, r) * (int64_t)es;
    const uint8_t *xs = x->data;
    uint8_t *out = ctx->out[0]->data;
    for (int64_t b = 0; b < B; b++) {
        int64_t L = ix_get(sl, b);
        if (L < 0 || L > T)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "sequence length %lld out of range [0, %lld]",
                              (long long)L, (long long)T);
        for (int64_t t = 0; t < T; t++) {
            int64_t s = t < L ? L - 1 - t : t;
            int64_t doff = ta == 0 ? (t * B + b) : (b * T + t), soff = ta == 0 ? (s * B + b) : (b * T + s);
            memcpy(out + doff * row, xs + soff * row, (size_t)row);
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* CumSum                                                                                     */

#define CUMSUM_T(T, ACC)                                                                                           \
    do {                                                                                                           \
        const T *xp = (const T *)x->data;                                                                          \
        T *op = (T *)ctx->out[0]->data;                                                                            \
        for (int64_t o = 0; o < outer; o++) {                                                                      \
            const T *xb = xp + o * n * inner;                                                                      \
            T *ob = op + o * n * inner;                                                                            \
            for (int64_t s = 0; s < n; s++) {                                                                      \
                int64_t j = rev ? n - 1 - s : s, pj = rev ? j + 1 : j - 1;                                         \
                T *orow = ob + j * inner;                                                                          \
                const T *xr = xb + j * inner;                                                                      \
                if (s == 0) {                                                                                      \
                    for (int64_t i = 0; i < inner; i++)                                                            \
                        orow[i] = excl ? (T)0 : xr[i];                                                             \
                } else {                                                                                           \
                    const T *prow = ob + pj * inner;                                                               \
                    const T *add = excl ? xb + pj * inner : xr;                                                    \
                    for (int64_t i = 0; i < inner; i++)                                                            \
                        orow[i] = (T)((ACC)prow[i] + (ACC)add[i]);                                                 \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

kiln_status kiln__k_cumsum(kiln_kctx *ctx)
{
    const kiln_tensor *x, *at;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    KILN_TRY(index_in(ctx, 1, &at));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    if (kiln__shape_numel(at->ndim, at->dims) != 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "axis must be a scalar");
    int r = x->ndim, axis;
    if (r < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have rank >= 1");
    KILN_TRY(kiln__norm_axis(ctx, ix_get(at, 0), r, &axis));
    bool excl = kiln__attr_i(ctx->node, "exclusive", 0) != 0, rev = kiln__attr_i(ctx->node, "reverse", 0) != 0;
    if (!is_numeric(x->dtype) || x->dtype == KILN_DT_BOOL)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s", kiln_dtype_name(x->dtype));
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, x->dims));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    int64_t outer = prod(x->dims, 0, axis), n = x->dims[axis], inner = prod(x->dims, axis + 1, r);
    switch (x->dtype) {
    case KILN_DT_FLOAT32: CUMSUM_T(float, float); break;
    case KILN_DT_FLOAT64: CUMSUM_T(double, double); break;
    case KILN_DT_INT8: CUMSUM_T(int8_t, uint64_t); break;
    case KILN_DT_UINT8: CUMSUM_T(uint8_t, uint64_t); break;
    case KILN_DT_INT16: CUMSUM_T(int16_t, uint64_t); break;
    case KILN_DT_UINT16: CUMSUM_T(uint16_t, uint64_t); break;
    case KILN_DT_INT32: CUMSUM_T(int32_t, uint64_t); break;
    case KILN_DT_UINT32: CUMSUM_T(uint32_t, uint64_t); break;
    case KILN_DT_INT64: CUMSUM_T(int64_t, uint64_t); break;
    case KILN_DT_UINT64: CUMSUM_T(uint64_t, uint64_t); break;
    default: { /* float16 / bfloat16: accumulate in float */
        float *acc = kiln__malloc(sizeof(float) * (size_t)inner);
        if (!acc)
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        for (int64_t o = 0; o < outer; o++) {
            for (int64_t i = 0; i < inner; i++)
                acc[i] = 0;
            for (int64_t s = 0; s < n; s++) {
                int64_t j = rev ? n - 1 - s : s;
                for (int64_t i = 0; i < inner; i++) {
                    int64_t e = (o * n + j) * inner + i;
                    double v = kiln__get_f64(x->dtype, x->data, e);
                    if (excl) {
                        kiln__set_f64(x->dtype, ctx->out[0]->data, e, acc[i]);
                        acc[i] += (float)v;
                    } else {
                        acc[i] += (float)v;
                        kiln__set_f64(x->dtype, ctx->out[0]->data, e, acc[i]);
                    }
                }
            }
        }
        kiln__free(acc);
        break;
    }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* TopK                                                                                       */

kiln_status kiln__k_topk(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    if (ctx->n_out < 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "TopK needs an output");
    int r = x->ndim, axis;
    if (r < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have rank >= 1");
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", -1), r, &axis));
    int64_t k;
    if (ctx->node->opset < 10) {
        k = kiln__attr_i(ctx->node, "k", -1);
    } else {
        const kiln_tensor *kt;
        KILN_TRY(index_in(ctx, 1, &kt));
        if (kiln__shape_numel(kt->ndim, kt->dims) != 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "K must have one element");
        k = ix_get(kt, 0);
    }
    int64_t n = x->dims[axis];
    if (k < 0 || k > n)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "k = %lld is out of range for dimension %lld", (long long)k,
                          (long long)n);
    bool largest = kiln__attr_i(ctx->node, "largest", 1) != 0;
    int64_t od[MAXR];
    memcpy(od, x->dims, sizeof(int64_t) * (size_t)r);
    od[axis] = k;
    bool want_v = ctx->out[0] != NULL, want_i = ctx->n_out > 1 && ctx->out[1] != NULL;
    if (want_v)
        KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, od));
    if (want_i)
        KILN_TRY(kiln__kout(ctx, 1, KILN_DT_INT64, r, od));
    if (kiln__shape_numel(r, od) == 0 || (!want_v && !want_i))
        return KILN_OK;
    int64_t outer = prod(x->dims, 0, axis), inner = prod(x->dims, axis + 1, r);
    kpair *pr = kiln__malloc(sizeof(kpair) * 2 * (size_t)n);
    if (!pr)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    const uint8_t *xs = x->data;
    uint8_t *ov = want_v ? ctx->out[0]->data : NULL;
    int64_t *oi = want_i ? ctx->out[1]->data : NULL;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const uint8_t *base = xs + (o * n * inner + i) * (int64_t)es;
            for (int64_t j = 0; j < n; j++) {
                uint64_t key = key_of(x->dtype, base + j * inner * (int64_t)es, es);
                pr[j].k = largest ? ~key : key;
                pr[j].i = j;
            }
            if (k == 1) {
                int64_t best = 0;
                for (int64_t j = 1; j < n; j++)
                    if (pr[j].k < pr[best].k)
                        best = j;
                pr[0] = pr[best];
            } else {
                kp_sort(pr, pr + n, n);
            }
            for (int64_t j = 0; j < k; j++) {
                int64_t e = (o * k + j) * inner + i;
                if (ov)
                    copy_el(ov + e * (int64_t)es, base + pr[j].i * inner * (int64_t)es, es);
                if (oi)
                    oi[e] = pr[j].i;
            }
        }
    kiln__free(pr);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* ArgMax, ArgMin                                                                             */

static kiln_status arg_ext(kiln_kctx *ctx, bool is_max)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim, axis;
    if (r < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have rank >= 1");
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", 0), r, &axis));
    bool keep = kiln__attr_i(ctx->node, "keepdims", 1) != 0;
    bool last = ctx->node->opset >= 12 && kiln__attr_i(ctx->node, "select_last_index", 0) != 0;
    int64_t od[MAXR];
    int no = 0;
    for (int d = 0; d < r; d++) {
        if (d == axis) {
            if (keep)
                od[no++] = 1;
        } else {
            od[no++] = x->dims[d];
        }
    }
    int64_t outer = prod(x->dims, 0, axis), n = x->dims[axis], inner = prod(x->dims, axis + 1, r);
    if (n == 0 && outer * inner > 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "cannot reduce an empty axis");
    KILN_TRY(kiln__kout(ctx, 0, KILN_DT_INT64, no, od));
    if (!ctx->out[0]->nbytes)
        return KILN_OK;
    int64_t *oi = ctx->out[0]->data;
    if (x->dtype == KILN_DT_FLOAT32) {
        float *best = kiln__malloc(sizeof(float) * (size_t)inner);
        if (!best)
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        const float *xp = x->data;
        for (int64_t o = 0; o < outer; o++) {
            int64_t *io = oi + o * inner;
            const float *xb = xp + o * n * inner;
            memcpy(best, xb, sizeof(float) * (size_t)inner);
            for (int64_t j = 1; j < n; j++) {
                const float *row = xb + j * inner;
                for (int64_t i = 0; i < inner; i++) {
                    float v = row[i];
                    bool take = is_max ? (last ? v >= best[i] : v > best[i]) : (last ? v <= best[i] : v < best[i]);
                    if (take) {
                        best[i] = v;
                        io[i] = j;
                    }
                }
            }
        }
        kiln__free(best);
        return KILN_OK;
    }
    uint64_t *best = kiln__malloc(sizeof(uint64_t) * (size_t)inner);
    if (!best)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    const uint8_t *xs = x->data;
    for (int64_t o = 0; o < outer; o++) {
        int64_t *io = oi + o * inner;
        const uint8_t *xb = xs + o * n * inner * (int64_t)es;
        for (int64_t i = 0; i < inner; i++)
            best[i] = key_of(x->dtype, xb + i * (int64_t)es, es);
        for (int64_t j = 1; j < n; j++)
            for (int64_t i = 0; i < inner; i++) {
                uint64_t v = key_of(x->dtype, xb + (j * inner + i) * (int64_t)es, es);
                bool take = is_max ? (last ? v >= best[i] : v > best[i]) : (last ? v <= best[i] : v < best[i]);
                if (take) {
                    best[i] = v;
                    io[i] = j;
                }
            }
    }
    kiln__free(best);
    return KILN_OK;
}

kiln_status kiln__k_argmax(kiln_kctx *ctx) { return arg_ext(ctx, true); }
kiln_status kiln__k_argmin(kiln_kctx *ctx) { return arg_ext(ctx, false); }

/* ------------------------------------------------------------------------------------------ */
/* Unique                                                                                     */

/* Sorts item ids by their key rows (L keys each), then by id. */
static inline bool item_lt(const uint64_t *K, int64_t L, int64_t a, int64_t b)
{
    const uint64_t *ka = K + a * L, *kb = K + b * L;
    for (int64_t i = 0; i < L; i++)
        if (ka[i] != kb[i])
            return ka[i] < kb[i];
    return a < b;
}

typedef struct {
    const uint64_t *K;
    int64_t L;
} item_keys;

static bool item_lt_v(const void *x, const void *y, const void *user)
{
    const item_keys *k = user;
    int64_t a, b;
    memcpy(&a, x, sizeof a);
    memcpy(&b, y, sizeof b);
    return item_lt(k->K, k->L, a, b);
}

static void item_sort(int64_t *a, int64_t *tmp, int64_t n, const uint64_t *K, int64_t L)
{
    item_keys k = {K, L};
    msort(a, tmp, n, sizeof *a, item_lt_v, &k, 1);
}

kiln_status kiln__k_unique(kiln_kctx *ctx)
{
    const kiln_tensor *x;
    KILN_TRY(kiln__kneed(ctx, 0, &x));
    size_t es;
    KILN_TRY(kiln__kdata_es(ctx, x, &es));
    int r = x->ndim, axis = -1;
    bool sorted = kiln__attr_i(ctx->node, "sorted", 1) != 0;
    int64_t m, outer = 1, inner = 1;
    if (kiln__attr(ctx->node, "axis")) {
        if (r < 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have rank >= 1");
        KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", 0), r, &axis));
        m = x->dims[axis];
        outer = prod(x->dims, 0, axis);
        inner = prod(x->dims, axis + 1, r);
    } else {
        m = kiln__shape_numel(r, x->dims);
    }
    int64_t L = outer * inner; /* keys per item */
    int64_t total = kiln__shape_numel(r, x->dims);
    if (m > 0 && L == 0) /* items are empty: all equal */
        L = 0;
    uint64_t *K = kiln__malloc(sizeof(uint64_t) * (size_t)(total ? total : 1));
    int64_t *ord = kiln__malloc(sizeof(int64_t) * (size_t)(3 * m + 1));
    int64_t *cnt = kiln__malloc(sizeof(int64_t) * (size_t)(2 * m + 1));
    kiln_status st = KILN_OK;
    if (!K || !ord || !cnt) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    const uint8_t *xs = x->data;
    /* K[item][o * inner + i] = key of x[o, item, i] */
    for (int64_t o = 0; o < outer; o++)
        for (int64_t it = 0; it < m; it++)
            for (int64_t i = 0; i < inner; i++)
                K[it * L + o * inner + i] = key_of(x->dtype, xs + ((o * m + it) * inner + i) * (int64_t)es, es);
    for (int64_t i = 0; i < m; i++)
        ord[i] = i;
    item_sort(ord, ord + m, m, K, L);
    /* group: first[g] (smallest id), count[g]; grp_of[id] */
    int64_t *first = cnt + m, *grp_of = ord + m, u = 0;
    for (int64_t p = 0; p < m; p++) {
        int64_t id = ord[p];
        if (p == 0 || memcmp(K + ord[p - 1] * L, K + id * L, sizeof(uint64_t) * (size_t)L)) {
            first[u] = id;
            cnt[u] = 0;
            u++;
        }
        cnt[u - 1]++;
        grp_of[id] = u - 1;
    }
    /* output position of each group */
    int64_t *pos = ord + 2 * m;
    if (sorted) {
        for (int64_t g = 0; g < u; g++)
            pos[g] = g;
    } else {
        kpair *pp = kiln__malloc(sizeof(kpair) * (size_t)(2 * u + 1));
        if (!pp) {
            st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int64_t g = 0; g < u; g++) {
            pp[g].k = (uint64_t)first[g];
            pp[g].i = g;
        }
        kp_sort(pp, pp + u, u);
        for (int64_t p = 0; p < u; p++)
            pos[pp[p].i] = p;
        kiln__free(pp);
    }
    {
        int64_t od[MAXR];
        int no;
        if (axis >= 0) {
            memcpy(od, x->dims, sizeof(int64_t) * (size_t)r);
            od[axis] = u;
            no = r;
        } else {
            od[0] = u;
            no = 1;
        }
        st = kiln__kout(ctx, 0, x->dtype, no, od);
        if (st != KILN_OK)
            goto done;
        uint8_t *y = ctx->out[0]->data;
        int64_t row = inner * (int64_t)es;
        for (int64_t g = 0; g < u; g++)
            for (int64_t o = 0; o < outer; o++)
                memcpy(y + (o * u + pos[g]) * row, xs + (o * m + first[g]) * row, (size_t)row);
        if (ctx->n_out > 1 && ctx->out[1]) {
            st = kiln__kout(ctx, 1, KILN_DT_INT64, 1, &u);
            if (st != KILN_OK)
                goto done;
            for (int64_t g = 0; g < u; g++)
                ((int64_t *)ctx->out[1]->data)[pos[g]] = first[g];
        }
        if (ctx->n_out > 2 && ctx->out[2]) {
            st = kiln__kout(ctx, 2, KILN_DT_INT64, 1, &m);
            if (st != KILN_OK)
                goto done;
            for (int64_t i = 0; i < m; i++)
                ((int64_t *)ctx->out[2]->data)[i] = pos[grp_of[i]];
        }
        if (ctx->n_out > 3 && ctx->out[3]) {
            st = kiln__kout(ctx, 3, KILN_DT_INT64, 1, &u);
            if (st != KILN_OK)
                goto done;
            for (int64_t g = 0; g < u; g++)
                ((int64_t *)ctx->out[3]->data)[pos[g]] = cnt[g];
        }
    }
done:
    kiln__free(K);
    kiln__free(ord);
    kiln__free(cnt);
    return st;
}
