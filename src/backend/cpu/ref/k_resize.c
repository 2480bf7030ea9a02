/* Reference kernels: resize — Resize (opsets 10..18 semantics) and Upsample (opsets 7, 9).
 *
 * Resize is separable: for every axis a table maps each output index to a few input taps
 * (index + weight), built once from the coordinate transformation, the mode (nearest /
 * linear / cubic, optionally antialiased) and the per-axis scale. An output element is the
 * weighted sum over the product of its axes' taps; with tf_crop_and_resize, an output whose
 * source coordinate lies outside the input on any axis gets extrapolation_value.
 *
 * Fast path: float32 with only the last two axes resized (NCHW images), one task per output
 * row, specialised for nearest (gather) and bilinear (2x2 taps). Other cases (any rank, any
 * dtype) use a generic loop; nearest copies elements bit-exactly for every dtype. */
#include "../../kernel.h"
#include "../../layer_geom.h"
#include <math.h>

/* The row loops below are simple streams; let GCC vectorize them (-O2 uses a very cheap
 * vectorizer cost model that leaves them scalar). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#define RZ_MAX_WORK 4.0e9

enum { RZ_NEAREST, RZ_LINEAR, RZ_CUBIC };
enum { CT_HALF_PIXEL, CT_PYTORCH_HALF_PIXEL, CT_ALIGN_CORNERS, CT_ASYMMETRIC, CT_TF_CROP_AND_RESIZE,
       CT_TF_HALF_PIXEL_FOR_NN, CT_HALF_PIXEL_SYMMETRIC };
enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL, NM_SIMPLE };

typedef struct rz_params {
    int mode, ctm, nearest_mode;
    double cubic_a;
    bool exclude_outside, antialias;
    float extrapolation;
} rz_params;

typedef struct rz_axis {
    int64_t in, out;
    double scale;       /* scale used by the coordinate transformation */
    double out_len;     /* "length_resized" in the formulas: scale * in for scales, else out */
    double roi_start, roi_end;
    int ntaps;
    int64_t *idx;       /* [out * ntaps], clamped to [0, in) */
    double *wd;         /* [out * ntaps] */
    float *wf;          /* [out * ntaps] */
    uint8_t *outside;   /* [out]: extrapolate (tf_crop_and_resize) */
    bool any_outside;
    bool identity;      /* out == in and every output index maps to itself with weight 1 */
} rz_axis;

static void rz_free_axes(rz_axis *ax, int n)
{
    for (int d = 0; d < n; d++) {
        kiln__free(ax[d].idx);
        kiln__free(ax[d].wd);
        kiln__free(ax[d].wf);
        kiln__free(ax[d].outside);
        ax[d].idx = NULL;
        ax[d].wd = NULL;
        ax[d].wf = NULL;
        ax[d].outside = NULL;
    }
}

static double rz_source_coord(const rz_params *p, const rz_axis *a, int64_t x, bool *outside)
{
    double xr = (double)x, in = (double)a->in, s = a->scale, L = a->out_len;
    *outside = false;
    switch (p->ctm) {
    case CT_PYTORCH_HALF_PIXEL:
        return a->out > 1 ? (xr + 0.5) / s - 0.5 : 0.0;   /* integer output length, as ONNX Runtime */
    case CT_ALIGN_CORNERS:
        return L == 1.0 ? 0.0 : xr * (in - 1.0) / (L - 1.0);
    case CT_ASYMMETRIC:
        return xr / s;
    case CT_TF_HALF_PIXEL_FOR_NN:
        return (xr + 0.5) / s;
    case CT_HALF_PIXEL_SYMMETRIC: {
        double adj = (double)a->out / (s * in);
        double center = in / 2.0;
        double off = center * (1.0 - adj);
        return off + (xr + 0.5) / s - 0.5;
    }
    case CT_TF_CROP_AND_RESIZE: {
        double v;
        if (L == 1.0)
            v = (a->roi_end - a->roi_start) * (in - 1.0) / 2.0;
        else
            v = xr * (a->roi_end - a->roi_start) * (in - 1.0) / (L - 1.0);
        v += a->roi_start * (in - 1.0);
        if (v < 0.0 || v > in - 1.0 || isnan(v))
            *outside = true;
        return v;
    }
    default: /* half_pixel */
        return (xr + 0.5) / s - 0.5;
    }
}

static int64_t clamp_idx(double v, int64_t n)
{
    if (!(v > 0.0))
        return 0;
    if (v >= (double)(n - 1))
        return n - 1;
    return (int64_t)v;
}

static double cubic_w(double x, double A)
{
    x = fabs(x);
    if (x < 1.0)
        return ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    if (x < 2.0)
        return (((x - 5.0) * x + 8.0) * x - 4.0) * A;
    return 0.0;
}

/* Number of taps per output index for an axis (a double, so absurd scales can be rejected
 * before any integer conversion). */
static double rz_ntaps(const rz_params *p, const rz_axis *a)
{
    if (p->mode == RZ_NEAREST)
        return 1.0;
    double s = a->scale;
    bool aa = p->antialias && s < 1.0;
    if (!aa)
        return p->mode == RZ_LINEAR ? 2.0 : 4.0;
    if (!(s > 1.0e-6))
        return INFINITY;
    double start = floor((p->mode == RZ_LINEAR ? -1.0 : -2.0) / s) + 1.0;
    return 2.0 - 2.0 * start;
}

/* w[0..n) /= their sum (unless it is zero). */
static void rz_normalize(double *w, int64_t n)
{
    double sum = 0.0;
    for (int64_t t = 0; t < n; t++)
        sum += w[t];
    if (sum != 0.0)
        for (int64_t t = 0; t < n; t++)
            w[t] /= sum;
}

/* The source index of nearest mode at coordinate x (axis of I inputs). */
static int64_t rz_nearest_src(const rz_params *p, const rz_axis *a, double x)
{
    double f = floor(x), r = x - f, v;
    switch (p->nearest_mode) {
    case NM_ROUND_PREFER_CEIL: v = r == 0.0 ? f : (r < 0.5 ? f : f + 1.0); break;
    case NM_FLOOR: v = f; break;
    case NM_CEIL: v = ceil(x); break;
    case NM_SIMPLE: v = a->scale < 1.0 ? ceil(x) : f; break;
    default: v = r == 0.0 ? f : (r <= 0.5 ? f : f + 1.0); break;
    }
    return clamp_idx(v, a->in);
}

/* The nt linear / cubic weights w of the taps at offsets start, start + 1, ... from floor(x),
 * r = x - floor(x) (antialiased when downscaling with antialias); returns start. */
static int64_t rz_weights(const rz_params *p, const rz_axis *a, double r, int64_t nt, double *w)
{
    double s = a->scale;
    bool aa = p->antialias && s < 1.0;
    int64_t start;
    if (p->mode == RZ_LINEAR) {
        if (!aa) {
            w[0] = 1.0 - r;
            w[1] = r;
            return 0;
        }
        start = (int64_t)(floor(-1.0 / s) + 1.0);
        for (int64_t t = 0; t < nt; t++) {
            double c = 1.0 - fabs(((double)(start + t) - r) * s);
            w[t] = c > 0.0 ? (c < 1.0 ? c : 1.0) : 0.0;
        }
    } else {
        if (!aa) {
            double A = p->cubic_a;
            w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
            w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
            w[2] = ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1;
            w[3] = ((A * ((1 - r) + 1) - 5 * A) * ((1 - r) + 1) + 8 * A) * ((1 - r) + 1) - 4 * A;
            return -1;
        }
        start = (int64_t)(floor(-2.0 / s) + 1.0);
        for (int64_t t = 0; t < nt; t++)
            w[t] = cubic_w(((double)(start + t) - r) * s, p->cubic_a);
    }
    rz_normalize(w, nt);
    return start;
}

/* Whether a linear / cubic table is still the identity (e.g. scale 1 with half_pixel). */
static bool rz_table_identity(const rz_axis *a)
{
    int64_t nt = a->ntaps;
    if (a->out != a->in || a->any_outside)
        return false;
    for (int64_t o = 0; o < a->out; o++)
        for (int64_t t = 0; t < nt; t++) {
            double wt = a->wd[o * nt + t];
            if (!(wt == 0.0 || (wt == 1.0 && a->idx[o * nt + t] == o)))
                return false;
        }
    return true;
}

/* Builds one axis's tap table. */
static kiln_status rz_build_axis(const kiln_kctx *ctx, const rz_params *p, rz_axis *a)
{
    double ntd = rz_ntaps(p, a);
    int64_t O = a->out;
    if (!(ntd >= 1.0) || ntd > (double)(1 << 20) || ntd * (double)(O > 0 ? O : 1) > (double)(1 << 26))
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "resize kernel with %g taps is too large", ntd);
    int64_t nt = (int64_t)ntd;
    a->ntaps = (int)nt;
    size_t n = (size_t)((O > 0 ? O : 1) * nt);
    a->idx = kiln__malloc(n * sizeof(int64_t));
    a->wd = kiln__malloc(n * sizeof(double));
    a->wf = kiln__malloc(n * sizeof(float));
    a->outside = kiln__calloc((size_t)(O > 0 ? O : 1), 1);
    if (!a->idx || !a->wd || !a->wf || !a->outside)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    a->any_outside = false;
    a->identity = a->out == a->in && nt == 1;
    int64_t I = a->in;
    for (int64_t o = 0; o < O; o++) {
        bool outside;
        double x = rz_source_coord(p, a, o, &outside);
        int64_t *ix = a->idx + o * nt;
        double *w = a->wd + o * nt;
        if (outside) {
            a->outside[o] = 1;
            a->any_outside = true;
            a->identity = false;
        }
        if (!isfinite(x))
            x = 0.0;
        /* keep the coordinate in a sane range (taps are clamped anyway) */
        if (x < -1.0e15)
            x = -1.0e15;
        if (x > 1.0e15)
            x = 1.0e15;
        if (p->mode == RZ_NEAREST) {
            ix[0] = rz_nearest_src(p, a, x);
            w[0] = 1.0;
            if (ix[0] != o)
                a->identity = false;
            continue;
        }
        double f = floor(x);
        int64_t start = rz_weights(p, a, x - f, nt, w);
        for (int64_t t = 0; t < nt; t++) {
            int64_t src = (int64_t)f + start + t;
            if (p->exclude_outside && (src < 0 || src >= I))
                w[t] = 0.0;
            ix[t] = src < 0 ? 0 : (src >= I ? I - 1 : src);
        }
        if (p->exclude_outside)
            rz_normalize(w, nt);
    }
    for (int64_t i = 0; i < O * nt; i++)
        a->wf[i] = (float)a->wd[i];
    if (p->mode != RZ_NEAREST)
        a->identity = rz_table_identity(a);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------
 * Compute
 * ------------------------------------------------------------------------------------------ */

typedef struct rz_job {
    const rz_params *p;
    rz_axis *ax;
    int ndim;
    const kiln_tensor *x;
    kiln_tensor *y;
    int64_t P, H, W, OH, OW; /* fast path geometry */
    int64_t rep;             /* nearest: every input column repeated rep times (0: no) */
} rz_job;

/* Horizontal pass of one source row into h[0..OW). */
static void rz_f32_hrow(const rz_axis *axx, const float *restrict sr, int64_t OW, float *restrict h)
{
    int txn = axx->ntaps;
    const int64_t *ix = axx->idx;
    const float *wx = axx->wf;
    if (txn == 2) {
        for (int64_t ox = 0; ox < OW; ox++)
            h[ox] = wx[2 * ox] * sr[ix[2 * ox]] + wx[2 * ox + 1] * sr[ix[2 * ox + 1]];
    } else if (txn == 1) {
        for (int64_t ox = 0; ox < OW; ox++)
            h[ox] = wx[ox] * sr[ix[ox]];
    } else {
        for (int64_t ox = 0; ox < OW; ox++) {
            float acc = 0.0f;
            for (int tx = 0; tx < txn; tx++)
                acc += wx[ox * txn + tx] * sr[ix[ox * txn + tx]];
            h[ox] = acc;
        }
    }
}

#define RZ_SLOTS 32

/* Cache of horizontally interpolated source rows, keyed by plane * H + source row (-1: free). */
typedef struct rz_cache {
    float *rows;     /* [nslots][OW] */
    int nslots;
    int64_t key[RZ_SLOTS];
} rz_cache;

/* Nearest: output row dst from source row sr (each input column repeated j->rep times, or
 * through the column table). */
static void rz_nearest_row(const rz_job *j, const rz_axis *axx, const float *sr, float *dst)
{
    int64_t W = j->W, OW = j->OW;
    if (j->rep == 2) {
        float *restrict d = dst;
        for (int64_t i = 0; i < W; i++) {
            float v = sr[i];
            d[2 * i] = v;
            d[2 * i + 1] = v;
        }
    } else if (j->rep > 0) {
        int64_t k = j->rep;
        for (int64_t i = 0; i < W; i++) {
            float v = sr[i];
            for (int64_t q = 0; q < k; q++)
                dst[i * k + q] = v;
        }
    } else {
        const int64_t *ix = axx->idx;
        for (int64_t ox = 0; ox < OW; ox++)
            dst[ox] = sr[ix[ox]];
    }
}

/* h[ty]: the horizontally interpolated source rows iy[0..tyn) of plane pl, from the cache or
 * computed into a slot no tap of this output row uses (rows the previous output row shared
 * are kept). */
static void rz_cached_rows(const rz_job *j, const rz_axis *axx, rz_cache *c, const float *src, int64_t pl,
                           const int64_t *iy, int tyn, const float **h)
{
    int64_t OW = j->OW;
    bool used[RZ_SLOTS] = {false};
    for (int ty = 0; ty < tyn; ty++)
        for (int i = 0; i < c->nslots; i++)
            if (c->key[i] == pl * j->H + iy[ty]) {
                used[i] = true;
                break;
            }
    for (int ty = 0; ty < tyn; ty++) {
        int64_t kk = pl * j->H + iy[ty];
        int sl = -1;
        for (int i = 0; i < c->nslots && sl < 0; i++)
            if (c->key[i] == kk && used[i])
                sl = i;
        if (sl < 0) {
            sl = 0;
            while (sl < c->nslots && used[sl])
                sl++;
            /* nslots = 2 * tyn > taps of this row, so a free slot exists */
            used[sl] = true;
            c->key[sl] = kk;
            rz_f32_hrow(axx, src + iy[ty] * j->W, OW, c->rows + sl * OW);
        }
        h[ty] = c->rows + sl * OW;
    }
}

/* dst = sum over ty of wy[ty] * h[ty] */
static void rz_vblend(const float *const *h, const float *wy, int tyn, int64_t OW, float *dst)
{
    if (tyn == 2) {
        const float *restrict h0 = h[0], *restrict h1 = h[1];
        float *restrict d = dst;
        float w0 = wy[0], w1 = wy[1];
        for (int64_t ox = 0; ox < OW; ox++)
            d[ox] = w0 * h0[ox] + w1 * h1[ox];
        return;
    }
    for (int64_t ox = 0; ox < OW; ox++)
        dst[ox] = wy[0] * h[0][ox];
    for (int ty = 1; ty < tyn; ty++) {
        const float *hh = h[ty];
        float w = wy[ty];
        for (int64_t ox = 0; ox < OW; ox++)
            dst[ox] += w * hh[ox];
    }
}

/* Without a cache (too many taps): every output from its tyn x txn taps. */
static void rz_direct_row(const rz_job *j, const rz_axis *axx, const float *src, const int64_t *iy, const float *wy,
                          int tyn, float *dst)
{
    int txn = axx->ntaps;
    for (int64_t ox = 0; ox < j->OW; ox++) {
        const int64_t *ix = axx->idx + ox * txn;
        const float *wx = axx->wf + ox * txn;
        float acc = 0.0f;
        for (int ty = 0; ty < tyn; ty++) {
            const float *sr = src + iy[ty] * j->W;
            float hv = 0.0f;
            for (int tx = 0; tx < txn; tx++)
                hv += wx[tx] * sr[ix[tx]];
            acc += wy[ty] * hv;
        }
        dst[ox] = acc;
    }
}

static void rz_f32_rows(void *arg, int64_t begin, int64_t end)
{
    const rz_job *j = arg;
    const rz_axis *ay = &j->ax[j->ndim - 2], *axx = &j->ax[j->ndim - 1];
    const float *X = j->x->data;
    float *Y = j->y->data;
    const float ext = j->p->extrapolation;
    int64_t H = j->H, W = j->W, OH = j->OH, OW = j->OW;
    int tyn = ay->ntaps;
    bool nearest = tyn == 1 && axx->ntaps == 1;
    rz_cache cache = {.nslots = 2 * tyn};
    if (!nearest && cache.nslots <= RZ_SLOTS) {
        cache.rows = kiln__malloc(sizeof(float) * (size_t)(cache.nslots * OW));
        for (int i = 0; i < cache.nslots; i++)
            cache.key[i] = -1;
    }
    for (int64_t row = begin; row < end; row++) {
        int64_t pl = row / OH, oy = row % OH;
        const float *src = X + pl * H * W;
        float *dst = Y + row * OW;
        if (ay->outside[oy]) {
            for (int64_t ox = 0; ox < OW; ox++)
                dst[ox] = ext;
            continue;
        }
        const int64_t *iy = ay->idx + oy * tyn;
        const float *wy = ay->wf + oy * tyn;
        if (nearest && row > begin && oy > 0 && !ay->outside[oy - 1] && iy[-1] == iy[0]) {
            memcpy(dst, dst - OW, sizeof(float) * (size_t)OW);   /* the previous row, outside columns included */
            continue;
        }
        if (nearest) {
            rz_nearest_row(j, axx, src + iy[0] * W, dst);
        } else if (cache.rows) {
            const float *h[RZ_SLOTS];
            rz_cached_rows(j, axx, &cache, src, pl, iy, tyn, h);
            rz_vblend(h, wy, tyn, OW, dst);
        } else {
            rz_direct_row(j, axx, src, iy, wy, tyn, dst);
        }
        if (axx->any_outside)
            for (int64_t ox = 0; ox < OW; ox++)
                if (axx->outside[ox])
                    dst[ox] = ext;
    }
    kiln__free(cache.rows);
}

static bool rz_is_int(kiln_dtype dt)
{
    return kiln__dtype_is_int(dt) || dt == KILN_DT_BOOL;
}

/* Stores an interpolated value: floats as is, integers rounded and saturated. */
static void rz_store(kiln_dtype dt, void *data, int64_t i, double v)
{
    if (!rz_is_int(dt)) {
        kiln__set_f64(dt, data, i, v);
        return;
    }
    if (isnan(v))
        v = 0.0;
    v = nearbyint(v);
    double lo, hi;
    switch (dt) {
    case KILN_DT_INT8: lo = -128; hi = 127; break;
    case KILN_DT_UINT8: lo = 0; hi = 255; break;
    case KILN_DT_INT16: lo = -32768; hi = 32767; break;
    case KILN_DT_UINT16: lo = 0; hi = 65535; break;
    case KILN_DT_INT32: lo = -2147483648.0; hi = 2147483647.0; break;
    case KILN_DT_UINT32: lo = 0; hi = 4294967295.0; break;
    case KILN_DT_UINT64: lo = 0; hi = 1.8446744073709552e19; break;
    case KILN_DT_BOOL: lo = 0; hi = 1; break;
    default: lo = -9.2233720368547758e18; hi = 9.2233720368547758e18; break;
    }
    if (v < lo)
        v = lo;
    if (v > hi)
        v = hi;
    if (dt == KILN_DT_UINT64) {
        ((uint64_t *)data)[i] = v >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v;
        return;
    }
    if (dt == KILN_DT_INT64) {
        ((int64_t *)data)[i] = v >= 9.2233720368547758e18 ? INT64_MAX : (int64_t)v;
        return;
    }
    kiln__set_i64(dt, data, i, (int64_t)v);
}

/* Separable linear / cubic for any rank and dtype: one 1-D pass per resized axis (the most
 * shrinking axes first, to keep intermediates small), each pass a weighted sum of whole
 * contiguous inner blocks. float32 stays in float; other dtypes go through double. */
typedef struct rz_pass_job {
    const rz_axis *a;
    int64_t O, I, inner;
    const void *src;
    void *dst;
    bool f32;
} rz_pass_job;

static void rz_pass_range(void *arg, int64_t begin, int64_t end)
{
    const rz_pass_job *j = arg;
    int nt = j->a->ntaps;
    int64_t inner = j->inner;
    for (int64_t r = begin; r < end; r++) {
        int64_t o = r / j->O, i = r % j->O;
        const int64_t *ix = j->a->idx + i * nt;
        if (j->f32) {
            const float *wt = j->a->wf + i * nt;
            const float *sb = (const float *)j->src + o * j->I * inner;
            float *restrict d = (float *)j->dst + r * inner;
            const float *restrict s0 = sb + ix[0] * inner;
            float w0 = wt[0];
            for (int64_t k = 0; k < inner; k++)
                d[k] = w0 * s0[k];
            for (int t = 1; t < nt; t++) {
                const float *restrict st = sb + ix[t] * inner;
                float w = wt[t];
                for (int64_t k = 0; k < inner; k++)
                    d[k] += w * st[k];
            }
        } else {
            const double *wt = j->a->wd + i * nt;
            const double *sb = (const double *)j->src + o * j->I * inner;
            double *restrict d = (double *)j->dst + r * inner;
            const double *restrict s0 = sb + ix[0] * inner;
            double w0 = wt[0];
            for (int64_t k = 0; k < inner; k++)
                d[k] = w0 * s0[k];
            for (int t = 1; t < nt; t++) {
                const double *restrict st = sb + ix[t] * inner;
                double w = wt[t];
                for (int64_t k = 0; k < inner; k++)
                    d[k] += w * st[k];
            }
        }
    }
}

static kiln_status rz_separable(kiln_kctx *ctx, const rz_params *p, const rz_axis *ax, const kiln_tensor *x,
                                kiln_tensor *y, int nt)
{
    int nd = x->ndim;
    bool f32 = x->dtype == KILN_DT_FLOAT32;
    size_t es = f32 ? sizeof(float) : sizeof(double);
    int order[KILN_MAX_DIMS], na = 0;
    for (int d = 0; d < nd; d++)
        if (!ax[d].identity)
            order[na++] = d;
    /* most shrinking axis first (insertion sort on out / in) */
    for (int i = 1; i < na; i++)
        for (int k = i; k > 0; k--) {
            const rz_axis *u = &ax[order[k - 1]], *v = &ax[order[k]];
            if ((double)v->out * (double)u->in < (double)u->out * (double)v->in) {
                int t = order[k - 1];
                order[k - 1] = order[k];
                order[k] = t;
            } else {
                break;
            }
        }
    int64_t dims[KILN_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++)
        dims[d] = x->dims[d];
    int64_t xnum = kiln__shape_numel(nd, x->dims), ynum = kiln__shape_numel(nd, y->dims);
    double work = 0.0, maxbuf = (double)ynum;
    for (int q = 0; q < na; q++) {
        dims[order[q]] = ax[order[q]].out;
        double n = 1.0;
        for (int d = 0; d < nd; d++)
            n *= (double)dims[d];
        work += n * ax[order[q]].ntaps;
        if (n > maxbuf)
            maxbuf = n;
    }
    if (work > RZ_MAX_WORK)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "resize needs %.3g operations, over the work limit", work);
    if (maxbuf * (double)es > (double)kiln__max_tensor_bytes())
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "resize intermediate of %.3g elements is too large", maxbuf);
    if (na == 0) {
        if (y->nbytes)
            memcpy(y->data, x->data, y->nbytes);
    } else {
        void *buf[2] = {kiln__malloc((size_t)maxbuf * es), na > 1 || !f32 ? kiln__malloc((size_t)maxbuf * es) : NULL};
        double *xd = NULL;
        if (!buf[0] || ((na > 1 || !f32) && !buf[1])) {
            kiln__free(buf[0]);
            kiln__free(buf[1]);
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        }
        const void *src = x->data;
        if (!f32) {
            xd = kiln__malloc(sizeof(double) * (size_t)(xnum > 0 ? xnum : 1));
            if (!xd) {
                kiln__free(buf[0]);
                kiln__free(buf[1]);
                return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
            }
            for (int64_t i = 0; i < xnum; i++)
                xd[i] = kiln__get_f64(x->dtype, x->data, i);
            src = xd;
        }
        for (int d = 0; d < nd; d++)
            dims[d] = x->dims[d];
        for (int q = 0; q < na; q++) {
            int d = order[q];
            int64_t outer = 1, inner = 1;
            for (int e = 0; e < d; e++)
                outer *= dims[e];
            for (int e = d + 1; e < nd; e++)
                inner *= dims[e];
            void *dst = (q == na - 1 && f32) ? y->data : buf[q & 1];
            rz_pass_job j = {&ax[d], ax[d].out, dims[d], inner, src, dst, f32};
            int64_t grain = 16384 / (inner * ax[d].ntaps + 1) + 1;
            kiln__parallel_for(ctx->pool, nt, outer * ax[d].out, grain, rz_pass_range, &j);
            dims[d] = ax[d].out;
            src = dst;
        }
        if (!f32)
            for (int64_t i = 0; i < ynum; i++)
                rz_store(y->dtype, y->data, i, ((const double *)src)[i]);
        kiln__free(xd);
        kiln__free(buf[0]);
        kiln__free(buf[1]);
    }
    /* extrapolation: any axis outside the input */
    bool any = false;
    for (int d = 0; d < nd; d++)
        any = any || ax[d].any_outside;
    if (any) {
        int64_t c[KILN_MAX_DIMS] = {0};
        for (int64_t o = 0; o < ynum; o++) {
            bool out = false;
            for (int d = 0; d < nd; d++)
                if (ax[d].outside[c[d]])
                    out = true;
            if (out)
                rz_store(y->dtype, y->data, o, (double)p->extrapolation);
            for (int d = nd - 1; d >= 0; d--) {
                if (++c[d] < y->dims[d])
                    break;
                c[d] = 0;
            }
        }
    }
    return KILN_OK;
}

/* Nearest, any rank and dtype: one task per output row (all axes but the last), a
 * bit-exact gather along the last axis. */
static void rz_nearest_rows(void *arg, int64_t begin, int64_t end)
{
    const rz_job *j = arg;
    const rz_axis *ax = j->ax;
    int nd = j->ndim;
    const kiln_tensor *x = j->x;
    kiln_tensor *y = j->y;
    kiln_dtype dt = x->dtype;
    size_t es = kiln_dtype_size(dt);
    int64_t istr[KILN_MAX_DIMS];
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        istr[d] = s;
        s *= x->dims[d];
    }
    const rz_axis *al = &ax[nd - 1];
    int64_t OW = y->dims[nd - 1];
    int64_t c[KILN_MAX_DIMS] = {0};
    int64_t rem = begin;
    for (int d = nd - 2; d >= 0; d--) {
        c[d] = rem % y->dims[d];
        rem /= y->dims[d];
    }
    /* extrapolation value in the output dtype */
    unsigned char ext[16] = {0};
    rz_store(dt, ext, 0, (double)j->p->extrapolation);
    for (int64_t row = begin; row < end; row++) {
        bool outside = false;
        int64_t base = 0;
        for (int d = 0; d < nd - 1; d++) {
            if (ax[d].outside[c[d]])
                outside = true;
            base += ax[d].idx[c[d]] * istr[d];
        }
        char *dst = (char *)y->data + (size_t)(row * OW) * es;
        const char *src = (const char *)x->data + (size_t)base * es;
        const int64_t *ix = al->idx;
        if (outside) {
            for (int64_t o = 0; o < OW; o++)
                memcpy(dst + (size_t)o * es, ext, es);
        } else {
            switch (es) {
            case 1:
                for (int64_t o = 0; o < OW; o++)
                    ((uint8_t *)dst)[o] = ((const uint8_t *)src)[ix[o]];
                break;
            case 2:
                for (int64_t o = 0; o < OW; o++)
                    ((uint16_t *)dst)[o] = ((const uint16_t *)src)[ix[o]];
                break;
            case 4:
                for (int64_t o = 0; o < OW; o++)
                    ((uint32_t *)dst)[o] = ((const uint32_t *)src)[ix[o]];
                break;
            case 8:
                for (int64_t o = 0; o < OW; o++)
                    ((uint64_t *)dst)[o] = ((const uint64_t *)src)[ix[o]];
                break;
            default:
                for (int64_t o = 0; o < OW; o++)
                    memcpy(dst + (size_t)o * es, src + (size_t)ix[o] * es, es);
                break;
            }
            if (al->any_outside)
                for (int64_t o = 0; o < OW; o++)
                    if (al->outside[o])
                        memcpy(dst + (size_t)o * es, ext, es);
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++c[d] < y->dims[d])
                break;
            c[d] = 0;
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * Setup shared by Resize and Upsample
 * ------------------------------------------------------------------------------------------ */

/* ax[d].in / .out / .scale / .out_len / roi set; builds tables, allocates and computes Y. */
static kiln_status rz_out_dims(const kiln_kctx *ctx, int nd, const rz_axis *ax, int64_t *odims);

static kiln_status rz_run(kiln_kctx *ctx, const rz_params *p, const kiln_tensor *x, rz_axis *ax)
{
    int nd = x->ndim;
    int64_t odims[KILN_MAX_DIMS];
    double work = 1.0;
    KILN_TRY(rz_out_dims(ctx, nd, ax, odims));
    KILN_TRY(kiln__kout_uninit(ctx, 0, x->dtype, nd, odims));   /* every output element is computed */
    kiln_tensor *y = ctx->out[0];
    int64_t onum = kiln__shape_numel(nd, odims);
    if (onum == 0)
        return KILN_OK;
    kiln_status st = KILN_OK;
    for (int d = 0; d < nd; d++) {
        if ((st = rz_build_axis(ctx, p, &ax[d])) != KILN_OK)
            goto done;
    }
    {
        rz_job j = {p, ax, nd, x, y, 0, 0, 0, 0, 0, 0};
        int nt = ctx->nthreads;
        bool fast = x->dtype == KILN_DT_FLOAT32 && nd >= 2 && ax[nd - 2].ntaps * ax[nd - 1].ntaps <= 16;
        for (int d = 0; d < nd - 2 && fast; d++)
            if (!ax[d].identity || ax[d].any_outside)
                fast = false;
        if (fast) {
            work = (double)onum * ax[nd - 2].ntaps * ax[nd - 1].ntaps;
            if (work > RZ_MAX_WORK) {
                st = kiln__kerr(ctx, KILN_ERR_LIMIT, "resize needs %.3g operations, over the work limit", work);
                goto done;
            }
            j.H = x->dims[nd - 2];
            j.W = x->dims[nd - 1];
            j.OH = odims[nd - 2];
            j.OW = odims[nd - 1];
            j.P = onum / (j.OH * j.OW);
            const rz_axis *axx = &ax[nd - 1];
            if (axx->ntaps == 1 && !axx->any_outside && j.W > 0 && j.OW % j.W == 0) {
                j.rep = j.OW / j.W;
                for (int64_t ox = 0; ox < j.OW && j.rep; ox++)
                    if (axx->idx[ox] != ox / j.rep)
                        j.rep = 0;
            }
            int64_t per_row = j.OW * ax[nd - 2].ntaps * ax[nd - 1].ntaps;
            int64_t grain = per_row >= 16384 ? 1 : 16384 / (per_row + 1) + 1;
            kiln__parallel_for(ctx->pool, nt, j.P * j.OH, grain, rz_f32_rows, &j);
        } else if (p->mode == RZ_NEAREST) {
            int64_t OW = odims[nd - 1];
            int64_t grain = 16384 / (OW + 1) + 1;
            kiln__parallel_for(ctx->pool, nt, onum / OW, grain, rz_nearest_rows, &j);
        } else {
            st = rz_separable(ctx, p, ax, x, y, nt);
        }
    }
done:
    rz_free_axes(ax, nd);
    return st;
}

static bool rz_dtype_ok(kiln_dtype dt)
{
    return kiln_dtype_size(dt) > 0 && dt != KILN_DT_STRING && dt != KILN_DT_COMPLEX64 && dt != KILN_DT_COMPLEX128 &&
           dt <= KILN_DT_BFLOAT16;
}

/* Sets out size from a scale: floor(in * scale). */
static kiln_status rz_out_from_scale(const kiln_kctx *ctx, rz_axis *a, double s, int d)
{
    if (!(s > 0.0) || !isfinite(s))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "scale %g on axis %d must be positive", s, d);
    double o = floor((double)a->in * s);
    if (o > 9.0e15)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "output dimension too large on axis %d", d);
    a->out = (int64_t)o;
    a->scale = s;
    a->out_len = (double)a->in * s;
    return KILN_OK;
}

/* mode, coordinate transformation, nearest rounding and the numeric attributes */
static kiln_status rz_read_attrs(kiln_kctx *ctx, rz_params *p)
{
    const kiln_node *n = ctx->node;
    int opset = n->opset;
    memset(p, 0, sizeof *p);
    const char *mode = kiln__attr_s(n, "mode", "nearest");
    if (!strcmp(mode, "nearest"))
        p->mode = RZ_NEAREST;
    else if (!strcmp(mode, "linear") || !strcmp(mode, "bilinear"))
        p->mode = RZ_LINEAR;
    else if (!strcmp(mode, "cubic") && (opset <= 0 || opset >= 11))
        p->mode = RZ_CUBIC;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unsupported mode '%s'", mode);
    if (opset > 0 && opset < 11) {
        p->ctm = CT_ASYMMETRIC;
        p->nearest_mode = NM_SIMPLE;
    } else {
        const char *ctm = kiln__attr_s(n, "coordinate_transformation_mode", "half_pixel");
        static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                           "tf_crop_and_resize", "tf_half_pixel_for_nn", "half_pixel_symmetric"};
        p->ctm = -1;
        for (int i = 0; i < (int)(sizeof ctms / sizeof ctms[0]); i++)
            if (!strcmp(ctm, ctms[i]))
                p->ctm = i;
        if (p->ctm < 0)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unsupported coordinate_transformation_mode '%s'", ctm);
        const char *nm = kiln__attr_s(n, "nearest_mode", "round_prefer_floor");
        static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
        p->nearest_mode = -1;
        for (int i = 0; i < 4; i++)
            if (!strcmp(nm, nms[i]))
                p->nearest_mode = i;
        if (p->nearest_mode < 0)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unsupported nearest_mode '%s'", nm);
    }
    p->cubic_a = kiln__attr_f(n, "cubic_coeff_a", -0.75f);
    p->exclude_outside = kiln__attr_i(n, "exclude_outside", 0) != 0;
    p->extrapolation = kiln__attr_f(n, "extrapolation_value", 0.0f);
    p->antialias = kiln__attr_i(n, "antialias", 0) != 0;
    return KILN_OK;
}

/* the resized axes: the 'axes' attribute (opset 18), else all nd of them */
static kiln_status rz_read_axes(kiln_kctx *ctx, int nd, int *axes, int *nax)
{
    const int64_t *av = NULL;
    int an = kiln__attr_ints(ctx->node, "axes", &av);
    if (an < 0) {
        for (int i = 0; i < nd; i++)
            axes[i] = i;
        *nax = nd;
        return KILN_OK;
    }
    if (an < 1 || an > nd)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "bad 'axes' length %d for rank %d", an, nd);
    bool seen[KILN_MAX_DIMS] = {false};
    for (int i = 0; i < an; i++) {
        KILN_TRY(kiln__norm_axis(ctx, av[i], nd, &axes[i]));
        if (seen[axes[i]])
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "repeated axis %d", axes[i]);
        seen[axes[i]] = true;
    }
    *nax = an;
    return KILN_OK;
}

/* output sizes from the 'sizes' input, with keep_aspect_ratio_policy (opset 18) */
static kiln_status rz_from_sizes(kiln_kctx *ctx, const kiln_tensor *sizes, const int *axes, int nax, rz_axis *ax)
{
    if (kiln__shape_numel(sizes->ndim, sizes->dims) != nax || !kiln__dtype_is_int(sizes->dtype))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "sizes must be an integer tensor of %d values", nax);
    const char *pol = kiln__attr_s(ctx->node, "keep_aspect_ratio_policy", "stretch");
    int policy = !strcmp(pol, "not_larger") ? 1 : !strcmp(pol, "not_smaller") ? 2 : 0;
    if (!policy && strcmp(pol, "stretch"))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unsupported keep_aspect_ratio_policy '%s'", pol);
    double common = policy == 1 ? INFINITY : 0.0;
    for (int i = 0; i < nax; i++) {
        rz_axis *a = &ax[axes[i]];
        int64_t v = kiln__get_i64(sizes->dtype, sizes->data, i);
        if (v < 0 || v > ((int64_t)1 << 50))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid size %lld for axis %d", (long long)v, axes[i]);
        if (a->in == 0 && v > 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "cannot resize an empty axis %d", axes[i]);
        a->out = v;
        a->scale = a->in > 0 ? (double)v / (double)a->in : 1.0;
        a->out_len = (double)v;
        if (policy == 1 && a->scale < common)
            common = a->scale;
        if (policy == 2 && a->scale > common)
            common = a->scale;
    }
    if (!policy)
        return KILN_OK;
    for (int i = 0; i < nax; i++) {
        rz_axis *a = &ax[axes[i]];
        double o = floor(common * (double)a->in + 0.5);
        if (!(o >= 0.0) || o > 9.0e15)
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "output dimension too large");
        a->out = (int64_t)o;
        a->scale = common;
        a->out_len = (double)a->out;
    }
    return KILN_OK;
}

/* Resize's and Upsample's X: present, of a supported dtype, rank >= 1 */
static kiln_status rz_input(kiln_kctx *ctx, const kiln_tensor **px)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input X");
    if (!rz_dtype_ok(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    if (x->ndim < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "X must have rank >= 1");
    *px = x;
    return KILN_OK;
}

/* Resize's parameters and axes (sizes, scales; tables not built yet) for X = in[0] */
static kiln_status rz_setup_resize(kiln_kctx *ctx, const kiln_tensor *x, rz_params *pp, rz_axis *ax)
{
    int nd = x->ndim;
    int opset = ctx->node->opset;
    const kiln_tensor *roi = NULL, *scales = NULL, *sizes = NULL;
    if (opset > 0 && opset < 11) {
        scales = kiln__kin(ctx, 1);
    } else {
        roi = kiln__kin(ctx, 1);
        scales = kiln__kin(ctx, 2);
        sizes = kiln__kin(ctx, 3);
    }
    rz_params p;
    KILN_TRY(rz_read_attrs(ctx, &p));
    *pp = p;
    int axes[KILN_MAX_DIMS], nax = nd;
    KILN_TRY(rz_read_axes(ctx, nd, axes, &nax));
    memset(ax, 0, sizeof(rz_axis) * KILN_MAX_DIMS);
    for (int d = 0; d < nd; d++) {
        ax[d].in = x->dims[d];
        ax[d].out = x->dims[d];
        ax[d].scale = 1.0;
        ax[d].out_len = (double)x->dims[d];
        ax[d].roi_start = 0.0;
        ax[d].roi_end = 1.0;
    }
    /* roi: [starts..., ends...] over the resized axes; only tf_crop_and_resize uses it */
    if (p.ctm == CT_TF_CROP_AND_RESIZE && roi && kiln__shape_numel(roi->ndim, roi->dims) > 0) {
        int64_t rn = kiln__shape_numel(roi->ndim, roi->dims);
        if (rn != 2 * nax || !kiln__dtype_is_float(roi->dtype))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "roi must be a float tensor of %d values", 2 * nax);
        for (int i = 0; i < nax; i++) {
            ax[axes[i]].roi_start = kiln__get_f64(roi->dtype, roi->data, i);
            ax[axes[i]].roi_end = kiln__get_f64(roi->dtype, roi->data, nax + i);
        }
    }
    int64_t sn = scales ? kiln__shape_numel(scales->ndim, scales->dims) : 0;
    int64_t zn = sizes ? kiln__shape_numel(sizes->ndim, sizes->dims) : 0;
    /* the spec allows only one; ONNX Runtime rejects both, and silently preferring sizes would
     * hide a model error */
    if (zn > 0 && sn > 0)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "only one of 'scales' and 'sizes' may be given, got both");
    if (zn > 0) {
        KILN_TRY(rz_from_sizes(ctx, sizes, axes, nax, ax));
    } else if (sn > 0) {
        if (sn != nax || !kiln__dtype_is_float(scales->dtype))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "scales must be a float tensor of %d values", nax);
        for (int i = 0; i < nax; i++)
            KILN_TRY(rz_out_from_scale(ctx, &ax[axes[i]], kiln__get_f64(scales->dtype, scales->data, i), axes[i]));
    } else {
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "one of 'scales' and 'sizes' must be given");
    }
    return KILN_OK;
}


/* Upsample's (opsets 7, 9) parameters and axes for X = in[0] */
static kiln_status rz_setup_upsample(kiln_kctx *ctx, const kiln_tensor *x, rz_params *pp, rz_axis *ax)
{
    const kiln_node *n = ctx->node;
    int nd = x->ndim;
    rz_params p;
    memset(&p, 0, sizeof p);
    const char *mode = kiln__attr_s(n, "mode", "nearest");
    if (!strcmp(mode, "nearest"))
        p.mode = RZ_NEAREST;
    else if (!strcmp(mode, "linear") || !strcmp(mode, "bilinear"))
        p.mode = RZ_LINEAR;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unsupported mode '%s'", mode);
    p.ctm = CT_ASYMMETRIC;
    p.nearest_mode = NM_FLOOR;
    double sc[KILN_MAX_DIMS];
    const kiln_tensor *scales = kiln__kin(ctx, 1);
    if (scales) {
        int64_t sn = kiln__shape_numel(scales->ndim, scales->dims);
        if (sn != nd || !kiln__dtype_is_float(scales->dtype))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "scales must be a float tensor of %d values", nd);
        for (int d = 0; d < nd; d++)
            sc[d] = kiln__get_f64(scales->dtype, scales->data, d);
    } else {
        const float *fv = NULL;
        int fn = kiln__attr_floats(n, "scales", &fv);
        if (fn != nd)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "'scales' must have %d values", nd);
        for (int d = 0; d < nd; d++)
            sc[d] = fv[d];
    }
    memset(ax, 0, sizeof(rz_axis) * KILN_MAX_DIMS);
    for (int d = 0; d < nd; d++) {
        ax[d].in = x->dims[d];
        ax[d].roi_end = 1.0;
        KILN_TRY(rz_out_from_scale(ctx, &ax[d], sc[d], d));
    }
    *pp = p;
    return KILN_OK;
}

/* Resize (opsets 10..18) and Upsample (7, 9): their own setup, the same tables and loops */
static kiln_status k_resize(kiln_kctx *ctx)
{
    const kiln_tensor *x = NULL;
    KILN_TRY(rz_input(ctx, &x));
    rz_params p;
    rz_axis ax[KILN_MAX_DIMS];
    KILN_TRY(ctx->node->op == KILN_OP_Upsample ? rz_setup_upsample(ctx, x, &p, ax) : rz_setup_resize(ctx, x, &p, ax));
    return rz_run(ctx, &p, x, ax);
}

/* The output dims of axes ax (none empty where resized to non-empty, the count in range) */
static kiln_status rz_out_dims(const kiln_kctx *ctx, int nd, const rz_axis *ax, int64_t *odims)
{
    for (int d = 0; d < nd; d++) {
        odims[d] = ax[d].out;
        if (ax[d].out > 0 && ax[d].in == 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "cannot resize an empty axis %d to %lld", d,
                              (long long)ax[d].out);
    }
    if (kiln__shape_numel(nd, odims) < 0)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "output size overflows");
    return KILN_OK;
}

kiln_status kiln__resize_plan(const kiln_node *n, int n_in, const kiln_tensor *const *in, kiln_resize_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    kiln_kctx c = {.node = n, .n_in = n_in, .in = in};
    const kiln_tensor *x = NULL;
    KILN_TRY(rz_input(&c, &x));
    rz_params p;
    rz_axis ax[KILN_MAX_DIMS];
    KILN_TRY(n->op == KILN_OP_Upsample ? rz_setup_upsample(&c, x, &p, ax) : rz_setup_resize(&c, x, &p, ax));
    int nd = x->ndim;
    int64_t odims[KILN_MAX_DIMS];
    kiln_status st = rz_out_dims(&c, nd, ax, odims);
    for (int d = 0; d < nd && st == KILN_OK; d++)
        st = rz_build_axis(&c, &p, &ax[d]);
    plan->ndim = nd;
    plan->nearest = p.mode == RZ_NEAREST;
    plan->extrapolation = p.extrapolation;
    for (int d = 0; d < nd; d++) {   /* the tables move to the plan (freed with it, also after a failure) */
        kiln_resize_axis *a = &plan->ax[d];
        *a = (kiln_resize_axis){ax[d].in, ax[d].out, ax[d].ntaps, ax[d].idx, ax[d].wf, ax[d].outside,
                                ax[d].any_outside, ax[d].identity};
        kiln__free(ax[d].wd);
    }
    if (st != KILN_OK)
        kiln__resize_plan_free(plan);
    return st;
}

void kiln__resize_plan_free(kiln_resize_plan *p)
{
    for (int d = 0; d < KILN_MAX_DIMS; d++) {
        kiln__free(p->ax[d].idx);
        kiln__free(p->ax[d].w);
        kiln__free(p->ax[d].outside);
        p->ax[d].idx = NULL;
        p->ax[d].w = NULL;
        p->ax[d].outside = NULL;
    }
}

const kiln_kernel_reg kiln__ref_resize[] = {
    {KILN_OP_Resize, k_resize},
    {KILN_OP_Upsample, k_resize},
    {KILN_OP_COUNT, NULL},
};
