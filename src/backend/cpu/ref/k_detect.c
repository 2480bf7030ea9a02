/* Reference kernels: NonMaxSuppression, RoiAlign. */
#include "../../kernel.h"
#include <math.h>
#include <stdlib.h>

/* ---- NonMaxSuppression ---- */

typedef struct nms_cand {
    float score;
    int64_t idx;
} nms_cand;

static int cand_cmp(const void *a, const void *b)
{
    const nms_cand *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

/* box as (ymin, xmin, ymax, xmax) */
static void nms_box(const float *b, int center, float out[4])
{
    if (center) {
        float xc = b[0], yc = b[1], w = b[2], h = b[3];
        out[0] = yc - h / 2.f;
        out[1] = xc - w / 2.f;
        out[2] = yc + h / 2.f;
        out[3] = xc + w / 2.f;
    } else {
        out[0] = fminf(b[0], b[2]);
        out[1] = fminf(b[1], b[3]);
        out[2] = fmaxf(b[0], b[2]);
        out[3] = fmaxf(b[1], b[3]);
    }
}

static bool nms_suppress(const float *a, const float *b, float thr)
{
    float iy0 = fmaxf(a[0], b[0]), ix0 = fmaxf(a[1], b[1]);
    float iy1 = fminf(a[2], b[2]), ix1 = fminf(a[3], b[3]);
    float ih = iy1 - iy0, iw = ix1 - ix0;
    if (!(ih > 0.f) || !(iw > 0.f))
        return false;
    float inter = ih * iw;
    float a1 = (a[2] - a[0]) * (a[3] - a[1]), a2 = (b[2] - b[0]) * (b[3] - b[1]);
    float uni = a1 + a2 - inter;
    if (a1 <= 0.f || a2 <= 0.f || uni <= 0.f)
        return false;
    return inter / uni > thr;
}

static kiln_status k_nms(kiln_kctx *ctx)
{
    const kiln_tensor *boxes = kiln__kin(ctx, 0), *scores = kiln__kin(ctx, 1);
    const kiln_tensor *tmax = kiln__kin(ctx, 2), *tiou = kiln__kin(ctx, 3), *tsc = kiln__kin(ctx, 4);
    if (!boxes || !scores)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!kiln__dtype_is_float(boxes->dtype) || !kiln__dtype_is_float(scores->dtype) ||
        kiln_dtype_size(boxes->dtype) == 0 || kiln_dtype_size(scores->dtype) == 0)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "boxes and scores must be float tensors");
    if (boxes->ndim != 3 || boxes->dims[2] != 4 || scores->ndim != 3 || scores->dims[0] != boxes->dims[0] ||
        scores->dims[2] != boxes->dims[1])
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "boxes must be [B,N,4] and scores [B,C,N]");
    int64_t nb = boxes->dims[0], ns = boxes->dims[1], nc = scores->dims[1];
    int64_t max_out = 0;
    if (tmax && kiln__knumel(tmax) > 0) {
        if (!kiln__dtype_is_int(tmax->dtype))
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "max_output_boxes_per_class must be an integer");
        max_out = kiln__get_i64(tmax->dtype, tmax->data, 0);
    }
    float iou_thr = 0.f, sc_thr = 0.f;
    bool has_sc = false;
    if (tiou && kiln__knumel(tiou) > 0) {
        if (!kiln__dtype_is_float(tiou->dtype) || kiln_dtype_size(tiou->dtype) == 0)
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "iou_threshold must be float");
        iou_thr = (float)kiln__get_f64(tiou->dtype, tiou->data, 0);
    }
    if (tsc && kiln__knumel(tsc) > 0) {
        if (!kiln__dtype_is_float(tsc->dtype) || kiln_dtype_size(tsc->dtype) == 0)
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "score_threshold must be float");
        sc_thr = (float)kiln__get_f64(tsc->dtype, tsc->data, 0);
        has_sc = true;
    }
    int64_t cpb = kiln__attr_i(ctx->node, "center_point_box", 0);
    if (cpb != 0 && cpb != 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "center_point_box must be 0 or 1");
    if (max_out < 0)
        max_out = 0;
    if (max_out > ns)
        max_out = ns;
    int64_t nbox = kiln__knumel(boxes);
    /* selections: at most nb * nc * max_out triples */
    double cap_d = (double)nb * (double)nc * (double)max_out;
    if (cap_d * 24.0 > (double)kiln__max_tensor_bytes())
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "too many possible selections");
    int64_t cap = (int64_t)cap_d;
    float *bx = kiln__malloc(sizeof(float) * (size_t)(nbox ? nbox : 1));
    nms_cand *cand = kiln__malloc(sizeof(nms_cand) * (size_t)(ns ? ns : 1));
    int64_t *sel = kiln__malloc(sizeof(int64_t) * 3 * (size_t)(cap ? cap : 1));
    int64_t *picked = kiln__malloc(sizeof(int64_t) * (size_t)(max_out ? max_out : 1));
    if (!bx || !cand || !sel || !picked) {
        kiln__free(bx);
        kiln__free(cand);
        kiln__free(sel);
        kiln__free(picked);
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < nbox / 4; i++) {
        float raw[4];
        for (int k = 0; k < 4; k++)
            raw[k] = (float)kiln__get_f64(boxes->dtype, boxes->data, i * 4 + k);
        nms_box(raw, (int)cpb, bx + i * 4);
    }
    int64_t nsel = 0;
    for (int64_t b = 0; b < nb && max_out > 0; b++) {
        for (int64_t c = 0; c < nc; c++) {
            int64_t nca = 0;
            for (int64_t i = 0; i < ns; i++) {
                float s = (float)kiln__get_f64(scores->dtype, scores->data, (b * nc + c) * ns + i);
                if (has_sc && !(s > sc_thr))
                    continue;
                if (s != s)
                    continue;
                cand[nca++] = (nms_cand){s, i};
            }
            qsort(cand, (size_t)nca, sizeof *cand, cand_cmp);
            int64_t np = 0;
            for (int64_t k = 0; k < nca && np < max_out; k++) {
                const float *cb = bx + (b * ns + cand[k].idx) * 4;
                bool keep = true;
                for (int64_t j = 0; j < np && keep; j++)
                    if (nms_suppress(cb, bx + (b * ns + picked[j]) * 4, iou_thr))
                        keep = false;
                if (!keep)
                    continue;
                picked[np++] = cand[k].idx;
                sel[nsel * 3] = b;
                sel[nsel * 3 + 1] = c;
                sel[nsel * 3 + 2] = cand[k].idx;
                nsel++;
            }
        }
    }
    int64_t od[2] = {nsel, 3};
    kiln_status st = kiln__kout(ctx, 0, KILN_DT_INT64, 2, od);
    if (st == KILN_OK && nsel)
        memcpy(ctx->out[0]->data, sel, sizeof(int64_t) * 3 * (size_t)nsel);
    kiln__free(bx);
    kiln__free(cand);
    kiln__free(sel);
    kiln__free(picked);
    return st;
}

/* ---- RoiAlign ---- */

typedef struct roi_pc {
    int64_t p1, p2, p3, p4;
    double w1, w2, w3, w4;
} roi_pc;

/* one roi's sampling grid: start (y0, x0), bin size, samples per bin (gh x gw) */
typedef struct roi_box {
    double y0, x0, bh, bw;
    int64_t gh, gw;
} roi_box;

typedef struct roi_cfg {
    bool is_max, half_pixel;
    int64_t oh, ow, sr;
    double scale;
} roi_cfg;

static kiln_status roi_read_attrs(kiln_kctx *ctx, roi_cfg *g)
{
    const kiln_node *nd = ctx->node;
    const char *mode = kiln__attr_s(nd, "mode", "avg");
    if (!strcmp(mode, "avg"))
        g->is_max = false;
    else if (!strcmp(mode, "max"))
        g->is_max = true;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown mode '%s'", mode);
    g->oh = kiln__attr_i(nd, "output_height", 1);
    g->ow = kiln__attr_i(nd, "output_width", 1);
    g->sr = kiln__attr_i(nd, "sampling_ratio", 0);
    g->scale = kiln__attr_f(nd, "spatial_scale", 1.0f);
    const char *ctm = kiln__attr_s(nd, "coordinate_transformation_mode", nd->opset >= 16 ? "half_pixel" : "output_half_pixel");
    if (!strcmp(ctm, "half_pixel"))
        g->half_pixel = true;
    else if (!strcmp(ctm, "output_half_pixel"))
        g->half_pixel = false;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown coordinate_transformation_mode '%s'", ctm);
    if (g->oh < 1 || g->ow < 1 || g->sr < 0 || g->oh > (1 << 20) || g->ow > (1 << 20) || g->sr > 4096)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid output size or sampling_ratio");
    return KILN_OK;
}

/* roi r's box in input pixels and its sample grid; an error for non-finite boxes or too many samples */
static kiln_status roi_make_box(kiln_kctx *ctx, const roi_cfg *g, const kiln_tensor *rois, int64_t r, roi_box *bx)
{
    double off = g->half_pixel ? 0.5 : 0.0;
    double v[4];
    for (int i = 0; i < 4; i++)
        v[i] = kiln__get_f64(rois->dtype, rois->data, r * 4 + i) * g->scale - off;
    double rw = v[2] - v[0], rh = v[3] - v[1];
    if (!g->half_pixel) {
        rw = fmax(rw, 1.0);
        rh = fmax(rh, 1.0);
    }
    if (!isfinite(rw) || !isfinite(rh) || !isfinite(v[0]) || !isfinite(v[1]))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "roi %lld is not finite", (long long)r);
    double gh_d = g->sr > 0 ? (double)g->sr : ceil(rh / (double)g->oh);
    double gw_d = g->sr > 0 ? (double)g->sr : ceil(rw / (double)g->ow);
    if (gh_d < 0)
        gh_d = 0;
    if (gw_d < 0)
        gw_d = 0;
    /* each factor on its own too: 0 * huge passes the product but not the cast to int64 */
    if (gh_d > 1e7 || gw_d > 1e7 || gh_d * gw_d * (double)g->oh * (double)g->ow > 1e7)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "roi %lld needs too many samples", (long long)r);
    *bx = (roi_box){v[1], v[0], rh / (double)g->oh, rw / (double)g->ow, (int64_t)gh_d, (int64_t)gw_d};
    return KILN_OK;
}

/* the bilinear taps of one sample point (all-zero weights outside [-1, H] x [-1, W]) */
static roi_pc roi_tap(double yy, double xx, int64_t H, int64_t W)
{
    if (yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W)
        return (roi_pc){0, 0, 0, 0, 0, 0, 0, 0};
    double y = yy <= 0 ? 0 : yy, xv = xx <= 0 ? 0 : xx;
    int64_t yl = (int64_t)y, xl = (int64_t)xv, yh, xh;
    if (yl >= H - 1) {
        yh = yl = H - 1;
        y = (double)yl;
    } else {
        yh = yl + 1;
    }
    if (xl >= W - 1) {
        xh = xl = W - 1;
        xv = (double)xl;
    } else {
        xh = xl + 1;
    }
    double ly = y - (double)yl, lx = xv - (double)xl, hy = 1. - ly, hx = 1. - lx;
    return (roi_pc){yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh, hy * hx, hy * lx, ly * hx, ly * lx};
}

/* taps for every (output cell, sample) of a box, in the order roi_pool reads them */
static void roi_fill_taps(roi_pc *pc, const roi_box *bx, int64_t oh, int64_t ow, int64_t H, int64_t W)
{
    size_t k = 0;
    for (int64_t ph = 0; ph < oh; ph++)
        for (int64_t pw = 0; pw < ow; pw++)
            for (int64_t iy = 0; iy < bx->gh; iy++) {
                double yy = bx->y0 + (double)ph * bx->bh + ((double)iy + 0.5) * bx->bh / (double)bx->gh;
                for (int64_t ix = 0; ix < bx->gw; ix++, k++) {
                    double xx = bx->x0 + (double)pw * bx->bw + ((double)ix + 0.5) * bx->bw / (double)bx->gw;
                    pc[k] = roi_tap(yy, xx, H, W);
                }
            }
}

/* one channel plane of one roi: average or max over each output cell's samples */
static void roi_pool(const kiln_tensor *x, int64_t base, kiln_tensor *out, int64_t obase, const roi_pc *pc,
                     const roi_box *bx, const roi_cfg *g)
{
    bool f32 = x->dtype == KILN_DT_FLOAT32;
    const float *xf = x->data;
    int64_t ns = bx->gh * bx->gw, cnt = ns > 1 ? ns : 1;
    size_t k = 0;
    for (int64_t q = 0; q < g->oh * g->ow; q++) {
        double acc = 0;
        bool first = true;
        for (int64_t s = 0; s < ns; s++, k++) {
            const roi_pc *p = &pc[k];
            double v1, v2, v3, v4;
            if (f32) {
                v1 = xf[base + p->p1];
                v2 = xf[base + p->p2];
                v3 = xf[base + p->p3];
                v4 = xf[base + p->p4];
            } else {
                v1 = kiln__get_f64(x->dtype, x->data, base + p->p1);
                v2 = kiln__get_f64(x->dtype, x->data, base + p->p2);
                v3 = kiln__get_f64(x->dtype, x->data, base + p->p3);
                v4 = kiln__get_f64(x->dtype, x->data, base + p->p4);
            }
            if (!g->is_max) {
                acc += p->w1 * v1 + p->w2 * v2 + p->w3 * v3 + p->w4 * v4;
            } else {
                double v = fmax(fmax(p->w1 * v1, p->w2 * v2), fmax(p->w3 * v3, p->w4 * v4));
                acc = first ? v : fmax(acc, v);
                first = false;
            }
        }
        if (!g->is_max)
            acc /= (double)cnt;
        if (f32)
            ((float *)out->data)[obase + q] = (float)acc;
        else
            kiln__set_f64(x->dtype, out->data, obase + q, acc);
    }
}

static kiln_status k_roialign(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *rois = kiln__kin(ctx, 1), *bi = kiln__kin(ctx, 2);
    if (!x || !rois || !bi)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!kiln__dtype_is_float(x->dtype) || kiln_dtype_size(x->dtype) == 0 || rois->dtype != x->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "X and rois must be the same float type");
    if (!kiln__dtype_is_int(bi->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "batch_indices must be an integer tensor");
    if (x->ndim != 4 || rois->ndim != 2 || rois->dims[1] != 4 || bi->ndim != 1 || bi->dims[0] != rois->dims[0])
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "expected X [N,C,H,W], rois [R,4], batch_indices [R]");
    roi_cfg g = {0};
    KILN_TRY(roi_read_attrs(ctx, &g));
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], R = rois->dims[0];
    int64_t od[4] = {R, C, g.oh, g.ow};
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, 4, od));
    if (kiln__shape_numel(4, od) == 0)
        return KILN_OK;
    for (int64_t r = 0; r < R; r++) {
        int64_t b = kiln__get_i64(bi->dtype, bi->data, r);
        if (b < 0 || b >= N)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "batch index %lld out of range [0,%lld)", (long long)b,
                              (long long)N);
    }
    if (H == 0 || W == 0)
        return KILN_OK; /* zero-filled */
    roi_pc *pc = NULL;
    size_t pc_cap = 0;
    kiln_status st = KILN_OK;
    for (int64_t r = 0; r < R && st == KILN_OK; r++) {
        int64_t b = kiln__get_i64(bi->dtype, bi->data, r);
        roi_box bx = {0};
        st = roi_make_box(ctx, &g, rois, r, &bx);
        if (st != KILN_OK)
            break;
        size_t need = (size_t)(g.oh * g.ow * bx.gh * bx.gw);
        if (need > pc_cap) {
            roi_pc *np = kiln__realloc(pc, need * sizeof *pc);
            if (!np) {
                st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
                break;
            }
            pc = np;
            pc_cap = need;
        }
        roi_fill_taps(pc, &bx, g.oh, g.ow, H, W);
        for (int64_t c = 0; c < C; c++)
            roi_pool(x, (b * C + c) * H * W, ctx->out[0], (r * C + c) * g.oh * g.ow, pc, &bx, &g);
    }
    kiln__free(pc);
    return st;
}

const kiln_kernel_reg kiln__ref_detect[] = {
    {KILN_OP_NonMaxSuppression, k_nms},
    {KILN_OP_RoiAlign, k_roialign},
    {KILN_OP_COUNT, NULL},
};
