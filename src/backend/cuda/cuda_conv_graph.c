/* Half (FP16 / BF16) 2-D convolutions through cuDNN 9's graph (backend) API: convolution, + bias,
 * + residual, ReLU as one operation graph, so cuDNN's engines for Hopper (runtime fusion) apply
 * the epilogue inside the convolution instead of kiln's separate pass (docs/CUDA.md). Intermediate
 * values are virtual float32 tensors; x, w, residual and y are in the half format (NCHW or NHWC,
 * by strides), the bias float32 (or half when no engine takes a float32 bias).
 *
 * Plans are kept per configuration (dims, layout, format, what is fused) by the backend instance,
 * so nodes of the same shape share one; its engine is the fastest of heuristics' first candidates
 * that finalize, timed once on the layer's own operands (KILN_CUDA_CONV_CANDIDATES, default 16). A
 * configuration no engine takes is remembered as such: the caller falls back. */
#include "cuda_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { UID_X = 1, UID_W, UID_B, UID_R, UID_Y, UID_C, UID_CB, UID_CBR, UID_S, UID_CS, UID_I, UID_Q, UID_F, UID_G };
#define MAX_DESC 64
#define MAX_CFG 16

struct cu_cg {
    cu_cg_key key;
    cudnnBackendDescriptor_t plan;   /* NULL: no engine takes this configuration */
    int64_t ws;
    cudnnBackendDescriptor_t d[MAX_DESC];   /* the graph's descriptors, kept alive with the plan */
    int nd;
    int pick, timed;   /* the chosen heuristics candidate, of how many timed (KILN_CUDA_CONV_GRAPH=2 prints them) */
};

typedef struct cg_build {
    cudnnStatus_t st;
    cu_cg *g;
} cg_build;

static cudnnBackendDescriptor_t mk(cg_build *c, cudnnBackendDescriptorType_t type)
{
    cudnnBackendDescriptor_t d = NULL;
    if (c->st != CUDNN_STATUS_SUCCESS)
        return NULL;
    if (c->g->nd == MAX_DESC) {
        c->st = CUDNN_STATUS_INTERNAL_ERROR;
        return NULL;
    }
    c->st = cudnnBackendCreateDescriptor(type, &d);
    if (c->st == CUDNN_STATUS_SUCCESS)
        c->g->d[c->g->nd++] = d;
    return c->st == CUDNN_STATUS_SUCCESS ? d : NULL;
}

static void set(cg_build *c, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                int64_t n, const void *v)
{
    if (c->st == CUDNN_STATUS_SUCCESS)
        c->st = cudnnBackendSetAttribute(d, a, t, n, v);
}

static void fin(cg_build *c, cudnnBackendDescriptor_t d)
{
    if (c->st == CUDNN_STATUS_SUCCESS)
        c->st = cudnnBackendFinalize(d);
}

/* A 4-D tensor of logical dims [N, C, H, W], laid out NCHW or NHWC (strides). */
static cudnnBackendDescriptor_t tensor(cg_build *c, int64_t uid, cudnnDataType_t ty, const int64_t *dims, bool nhwc,
                                       bool virt)
{
    int64_t str[4];
    if (nhwc) {
        str[1] = 1;
        str[3] = dims[1];
        str[2] = dims[3] * dims[1];
        str[0] = dims[2] * str[2];
    } else {
        str[3] = 1;
        str[2] = dims[3];
        str[1] = dims[2] * dims[3];
        str[0] = dims[1] * str[1];
    }
    int64_t align = 16;
    bool v = virt;
    cudnnBackendDescriptor_t d = mk(c, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    set(c, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ty);
    set(c, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    set(c, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
    set(c, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(c, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(c, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    fin(c, d);
    return d;
}

/* y = mode(x [, b]) as a pointwise operation (float32 math); clip: a RELU_FWD that clamps to [-clip, clip] */
static cudnnBackendDescriptor_t pointwise_c(cg_build *c, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                            cudnnBackendDescriptor_t bt, cudnnBackendDescriptor_t y, double clip)
{
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t pw = mk(c, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(c, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(c, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (clip > 0) {
        double lo = -clip, hi = clip;
        set(c, pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &lo);
        set(c, pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &hi);
    }
    fin(c, pw);
    cudnnBackendDescriptor_t op = mk(c, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(c, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    set(c, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (bt)
        set(c, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bt);
    set(c, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    fin(c, op);
    return op;
}

static cudnnBackendDescriptor_t pointwise(cg_build *c, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t bt, cudnnBackendDescriptor_t y)
{
    return pointwise_c(c, mode, x, bt, y, 0);
}

/* The operation graph of k; its descriptors go into c->g. */
static cudnnBackendDescriptor_t op_graph(cu_be *b, cg_build *c)
{
    const cu_cg_key *k = &c->g->key;
    cudnnDataType_t ty = (cudnnDataType_t)k->ty, f32 = CUDNN_DATA_FLOAT;
    cudnnDataType_t xty = k->fp8 ? CUDNN_DATA_FP8_E4M3 : ty;
    int nsteps = !!k->fp8 + !!k->bias + !!k->res + !!k->relu;
    cudnnBackendDescriptor_t x = tensor(c, UID_X, xty, k->xd, k->nhwc, false);
    cudnnBackendDescriptor_t w = tensor(c, UID_W, xty, k->wd, k->nhwc, false);
    cudnnBackendDescriptor_t yo = tensor(c, UID_Y, ty, k->yd, k->nhwc, false);
    /* with a feed the epilogue ends in a virtual float32 F, written to y and, scaled and clamped, to yq */
    cudnnBackendDescriptor_t y = k->feed ? tensor(c, UID_F, f32, k->yd, k->nhwc, true) : yo;
    /* the convolution's output: y itself, or a virtual float32 tensor the epilogue reads */
    cudnnBackendDescriptor_t cur = nsteps ? tensor(c, UID_C, f32, k->yd, k->nhwc, true) : y;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t sp = 2;
    cudnnBackendDescriptor_t conv = mk(c, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    set(c, conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    set(c, conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    set(c, conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sp);
    set(c, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, k->dil);
    set(c, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, k->str);
    set(c, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, k->pad);
    set(c, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, k->pad);
    fin(c, conv);
    float one = 1.0f, zero = 0.0f;
    cudnnBackendDescriptor_t ops[9];
    int n = 0;
    cudnnBackendDescriptor_t cv = mk(c, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    set(c, cv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one);
    set(c, cv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero);
    set(c, cv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    set(c, cv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    set(c, cv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(c, cv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cur);
    fin(c, cv);
    ops[n++] = cv;
    int left = nsteps;
    if (k->fp8) {   /* the E4M3 sum times the scalar s (the activation's scale times the weight's) */
        static const int64_t sd[4] = {1, 1, 1, 1};
        cudnnBackendDescriptor_t st = tensor(c, UID_S, f32, sd, false, false);
        cudnnBackendDescriptor_t out = --left ? tensor(c, UID_CS, f32, k->yd, k->nhwc, true) : y;
        ops[n++] = pointwise(c, CUDNN_POINTWISE_MUL, cur, st, out);
        cur = out;
    }
    if (k->bias) {
        int64_t bd[4] = {1, k->yd[1], 1, 1};
        cudnnBackendDescriptor_t bt = tensor(c, UID_B, (cudnnDataType_t)k->bias_ty, bd, false, false);
        cudnnBackendDescriptor_t out = --left ? tensor(c, UID_CB, f32, k->yd, k->nhwc, true) : y;
        ops[n++] = pointwise(c, CUDNN_POINTWISE_ADD, cur, bt, out);
        cur = out;
    }
    if (k->res) {
        cudnnBackendDescriptor_t rt = tensor(c, UID_R, ty, k->yd, k->nhwc, false);
        cudnnBackendDescriptor_t out = --left ? tensor(c, UID_CBR, f32, k->yd, k->nhwc, true) : y;
        ops[n++] = pointwise(c, CUDNN_POINTWISE_ADD, cur, rt, out);
        cur = out;
    }
    if (k->relu)
        ops[n++] = pointwise(c, CUDNN_POINTWISE_RELU_FWD, cur, NULL, y);
    if (k->feed) {
        static const int64_t sd[4] = {1, 1, 1, 1};
        cudnnBackendDescriptor_t it = tensor(c, UID_I, f32, sd, false, false);
        cudnnBackendDescriptor_t gt = tensor(c, UID_G, f32, k->yd, k->nhwc, true);
        cudnnBackendDescriptor_t qt = tensor(c, UID_Q, CUDNN_DATA_FP8_E4M3, k->yd, k->nhwc, false);
        ops[n++] = pointwise(c, CUDNN_POINTWISE_IDENTITY, y, NULL, yo);
        ops[n++] = pointwise(c, CUDNN_POINTWISE_MUL, y, it, gt);
        ops[n++] = pointwise_c(c, CUDNN_POINTWISE_RELU_FWD, gt, NULL, qt, 448.0);
    }
    cudnnBackendDescriptor_t g = mk(c, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(c, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops);
    set(c, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &b->dnn);
    fin(c, g);
    return g;
}

/* Binds the operands (x, w, bias, residual, y, s; NULL where the key has none) and runs plan p. */
static cudnnStatus_t execute(cu_be *b, cudnnBackendDescriptor_t p, const cu_cg_key *k, const void *const *ptr,
                             void *ws)
{
    int64_t uid[CU_CG_OPERANDS];
    void *dp[CU_CG_OPERANDS];
    int n = 0;
    static const int64_t uids[CU_CG_OPERANDS] = {UID_X, UID_W, UID_B, UID_R, UID_Y, UID_S, UID_I, UID_Q};
    for (int i = 0; i < CU_CG_OPERANDS; i++) {
        if ((i == 2 && !k->bias) || (i == 3 && !k->res) || (i == 5 && !k->fp8) || (i >= 6 && !k->feed))
            continue;
        uid[n] = uids[i];
        dp[n++] = (void *)ptr[i];
    }
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, dp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendExecute(b->dnn, p, vp);
    if (vp)
        cudnnBackendDestroyDescriptor(vp);
    return st;
}

/* Milliseconds of one run of plan p (median of 3 after a warm-up); < 0 when it fails to run. */
typedef struct plan_run {
    cu_be *b;
    cudnnBackendDescriptor_t p;
    const cu_cg_key *k;
    const void *const *ptr;
    void *ws;
} plan_run;

static bool plan_exec(void *arg)
{
    plan_run *r = arg;
    return execute(r->b, r->p, r->k, r->ptr, r->ws) == CUDNN_STATUS_SUCCESS;
}

static float time_plan(cu_be *b, cudnnBackendDescriptor_t p, const cu_cg_key *k, const void *const *ptr, void *ws)
{
    plan_run r = {b, p, k, ptr, ws};
    return cu_time_median3(b, plan_exec, &r);
}

/* ---- FP8 candidates checked against the first: an engine configuration whose output disagrees with the
 * heuristics' first working one is dropped (seen once on an H100: one FP8 engine with float32 outputs returned
 * values off by ~100%, docs/CUDA.md). A strided sample of at most 2^20 outputs is compared. */
typedef struct cand_check {
    float *ref, *cur;
    int64_t n, stride;
    bool have_ref;
} cand_check;

static float half_f(uint16_t h, bool bf)
{
    uint32_t u;
    if (bf) {
        u = (uint32_t)h << 16;
    } else {
        uint32_t sgn = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
        if (e == 31)
            u = sgn | 0x7f800000u | (m << 13);
        else if (e)
            u = sgn | ((e + 112) << 23) | (m << 13);
        else {   /* zero / subnormal: m * 2^-24 */
            float f = (float)m * 5.9604645e-8f;
            return sgn ? -f : f;
        }
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The sample of y (ptr[4]) into out; false when it cannot be read. */
static bool cand_read(cu_be *b, const cu_cg_key *k, const void *y, const cand_check *c, float *out)
{
    size_t es = k->ty == CUDNN_DATA_FLOAT ? 4 : 2;
    void *raw = malloc((size_t)c->n * es);
    if (!raw)
        return false;
    bool ok = cudaStreamSynchronize(b->stream) == cudaSuccess &&
              cudaMemcpy2D(raw, es, y, es * (size_t)c->stride, es, (size_t)c->n, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int64_t i = 0; ok && i < c->n; i++) {
        if (es == 4) {
            memcpy(&out[i], (char *)raw + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, (char *)raw + 2 * i, 2);
            out[i] = half_f(h, k->ty == CUDNN_DATA_BFLOAT16);
        }
    }
    free(raw);
    cudaGetLastError();
    return ok;
}

/* Whether the candidate just timed agrees with the first (which becomes the reference): max |cur - ref| within 2%
 * of max |ref| (other summation orders differ by far less), no NaN where the reference has none. */
static bool cand_agrees(cu_be *b, const cu_cg_key *k, const void *y, cand_check *c)
{
    if (!c->ref)
        return true;   /* unchecked (no memory for it) */
    if (!cand_read(b, k, y, c, c->have_ref ? c->cur : c->ref))
        return false;
    if (!c->have_ref) {
        c->have_ref = true;
        return true;
    }
    double amax = 0, dmax = 0;
    for (int64_t i = 0; i < c->n; i++) {
        double r = c->ref[i], d = fabs((double)c->cur[i] - r);
        if (isnan(c->cur[i]) && !isnan(c->ref[i]))
            return false;
        if (!isnan(d)) {
            amax = fmax(amax, fabs(r));
            dmax = fmax(dmax, d);
        }
    }
    return dmax <= 0.02 * amax + 1e-6;
}

static void cand_init(const cu_cg_key *k, cand_check *c)
{
    memset(c, 0, sizeof *c);
    if (!k->fp8)
        return;
    int64_t n = k->yd[0] * k->yd[1] * k->yd[2] * k->yd[3];
    c->stride = n > ((int64_t)1 << 20) ? (n >> 20) | 1 : 1;   /* odd: the sample walks across channels */
    c->n = (n + c->stride - 1) / c->stride;
    c->ref = malloc(sizeof(float) * (size_t)c->n);
    c->cur = malloc(sizeof(float) * (size_t)c->n);
    if (!c->ref || !c->cur) {
        free(c->ref);
        free(c->cur);
        c->ref = c->cur = NULL;
    }
}

static int candidates(void)
{
    const char *e = getenv("KILN_CUDA_CONV_CANDIDATES");
    int n = e && *e ? atoi(e) : 16;   /* 16 vs 4: ResNet-50 FP16 b256 9.72 vs 9.94 ms, first run no longer */
    return n < 1 ? 1 : n > MAX_CFG ? MAX_CFG : n;
}

/* The fastest plan among the engine configurations of heuristics mode `mode`; *best stays NULL if none
 * finalizes and runs. */
static kiln_status pick(cu_be *b, cg_build *c, cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                        const void *const *ptr)
{
    cu_cg *g = c->g;
    cudnnBackendDescriptor_t heur = NULL, cfg[MAX_CFG] = {0};
    int64_t count = 0;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                      &graph);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    double th0 = cu_now_s();
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(heur);
    b->cg_heur_s += cu_now_s() - th0;
    b->cg_configs++;
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                      NULL);
    if (count > MAX_CFG)
        count = MAX_CFG;
    for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < count; i++)
        st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]);
    int64_t got = 0;
    if (st == CUDNN_STATUS_SUCCESS && count > 0)
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                      cfg);
    kiln_status ks = KILN_OK;
    cand_check chk;
    cand_init(&g->key, &chk);
    float best_ms = -1;
    int best = -1, want = candidates(), timed = 0;
    /* the timing cache's choice for this configuration and heuristics mode: that candidate alone (all of them again
     * if it no longer runs) */
    struct { cu_cg_key k; int32_t mode, want; } tk;
    memset(&tk, 0, sizeof tk);
    tk.k = g->key;
    tk.mode = (int32_t)mode;
    tk.want = want;
    int cached = cu_tc_get(b, 'g', &tk, sizeof tk);
    if (cached >= got)
        cached = -1;
again:
    /* finalizing a plan compiles a runtime-fusion engine's kernels, ~40 ms a plan: most of a build's tactic timing
     * (H200, ResNet-50 FP16 batch 256: 223 plans in 9.2-10.9 s of 11.6-13.6 s of device runs; 16 threads finalizing
     * at once were no faster, cuDNN serializes them) */
    for (int i = 0; st == CUDNN_STATUS_SUCCESS && ks == KILN_OK && i < got && timed < want; i++) {
        if (cached >= 0 && i != cached)
            continue;
        cudnnBackendDescriptor_t p = NULL;
        int64_t ws = 0;
        double t0 = cu_now_s();
        cudnnStatus_t e = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p);
        if (e == CUDNN_STATUS_SUCCESS)
            e = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &b->dnn);
        if (e == CUDNN_STATUS_SUCCESS)
            e = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                         &cfg[i]);
        if (e == CUDNN_STATUS_SUCCESS)
            e = cudnnBackendFinalize(p);
        b->cg_fin_s += cu_now_s() - t0;
        b->cg_plans++;
        int64_t nws = 0;
        if (e == CUDNN_STATUS_SUCCESS)
            e = cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &nws, &ws);
        float ms = -1;
        if (e == CUDNN_STATUS_SUCCESS && ws >= 0 && ws <= ((int64_t)1 << 30)) {
            void *wsp = NULL;
            ks = ws ? cu_workspace(b, (size_t)ws, &wsp) : KILN_OK;
            if (ks == KILN_OK) {
                double t1 = cu_now_s();
                ms = time_plan(b, p, &g->key, ptr, wsp);
                b->cg_time_s += cu_now_s() - t1;
                timed++;
                if (ms >= 0 && !cand_agrees(b, &g->key, ptr[4], &chk)) {
                    if (b->conv_verbose)
                        fprintf(stderr, "kiln cuda: conv graph candidate %d disagrees with the first: dropped\n", i);
                    ms = -1;
                }
            }
        }
        if (ms >= 0 && (best_ms < 0 || ms < best_ms)) {
            if (g->plan)
                cudnnBackendDestroyDescriptor(g->plan);
            g->plan = p;
            g->ws = ws;
            best_ms = ms;
            best = i;
            g->pick = i;
        } else if (p) {
            cudnnBackendDestroyDescriptor(p);
        }
    }
    if (cached >= 0 && best < 0 && st == CUDNN_STATUS_SUCCESS && ks == KILN_OK) {
        cached = -1;
        goto again;
    }
    if (cached < 0 && best >= 0)
        cu_tc_put(b, 'g', &tk, sizeof tk, best);
    g->timed = timed;
    free(chk.ref);
    free(chk.cur);
    /* the chosen engine configuration stays alive with the graph's descriptors (the plan was made of it) */
    for (int i = 0; i < count; i++) {
        if (i == best && g->nd < MAX_DESC)
            g->d[g->nd++] = cfg[i];
        else if (cfg[i] && i != best)
            cudnnBackendDestroyDescriptor(cfg[i]);
    }
    if (heur)
        cudnnBackendDestroyDescriptor(heur);
    return ks;
}

static void cg_free(cu_cg *g)
{
    if (g->plan)
        cudnnBackendDestroyDescriptor(g->plan);
    for (int i = g->nd - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(g->d[i]);
    free(g);
}

void cu_cg_free_all(cu_be *b)
{
    for (int i = 0; i < b->n_cg; i++)
        cg_free(b->cg[i]);
    free(b->cg);
    b->cg = NULL;
    b->n_cg = b->cap_cg = 0;
}

void cu_cg_key_init(cu_cg_key *k, int32_t ty, bool nhwc, const int64_t xd[4], const int64_t wd[4],
                    const int64_t yd[4], const cu_geom *g)
{
    memset(k, 0, sizeof *k);   /* the key is compared byte for byte */
    k->ty = ty;
    k->nhwc = nhwc;
    for (int i = 0; i < 4; i++) {
        k->xd[i] = xd[i];
        k->wd[i] = wd[i];
        k->yd[i] = yd[i];
    }
    for (int i = 0; i < 2; i++) {
        k->pad[i] = g->pb[i];
        k->str[i] = g->s[i];
        k->dil[i] = g->d[i];
    }
}

kiln_status cu_cg_get(cu_be *b, const cu_cg_key *k, const void *const *ptr, cu_cg **out)
{
    *out = NULL;
    for (int i = 0; i < b->n_cg; i++)
        if (!memcmp(&b->cg[i]->key, k, sizeof *k)) {
            *out = b->cg[i]->plan ? b->cg[i] : NULL;
            return KILN_OK;
        }
    if (b->capturing)
        return cu_not_in_capture(b, "choosing a convolution engine");
    if (b->n_cg == b->cap_cg) {
        int cap = b->cap_cg ? 2 * b->cap_cg : 16;
        cu_cg **a = realloc(b->cg, sizeof *a * (size_t)cap);
        if (!a)
            return cu_err(b, KILN_ERR_NOMEM, "out of memory");
        b->cg = a;
        b->cap_cg = cap;
    }
    cu_cg *g = calloc(1, sizeof *g);
    if (!g)
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    g->key = *k;
    cg_build c = {.st = CUDNN_STATUS_SUCCESS, .g = g};
    cudnnBackendDescriptor_t graph = op_graph(b, &c);
    kiln_status st = KILN_OK;
    if (c.st == CUDNN_STATUS_SUCCESS) {
        st = pick(b, &c, graph, CUDNN_HEUR_MODE_A, ptr);
        if (st == KILN_OK && !g->plan)
            st = pick(b, &c, graph, CUDNN_HEUR_MODE_FALLBACK, ptr);
    }
    if (st != KILN_OK) {
        cg_free(g);
        return st;
    }
    if (!g->plan) {   /* remembered: this configuration takes the other path */
        for (int i = g->nd - 1; i >= 0; i--)
            cudnnBackendDestroyDescriptor(g->d[i]);
        g->nd = 0;
    }
    b->cg[b->n_cg++] = g;
    *out = g->plan ? g : NULL;
    if (b->conv_verbose)   /* which configurations an engine takes (developer tool) */
        fprintf(stderr, "kiln cuda: conv graph x %lldx%lldx%lldx%lld w %lldx%lldx%lldx%lld %s%s%s%s%s%s bias %s: %s (ws %lld, candidate %d of %d timed)\n",
                (long long)k->xd[0], (long long)k->xd[1], (long long)k->xd[2], (long long)k->xd[3],
                (long long)k->wd[0], (long long)k->wd[1], (long long)k->wd[2], (long long)k->wd[3],
                k->nhwc ? "NHWC" : "NCHW", k->fp8 ? " fp8" : "", k->ty == CUDNN_DATA_HALF ? " fp16" : k->ty == CUDNN_DATA_FLOAT ? " fp32" : " bf16", k->bias ? " +bias" : "",
                k->res ? " +res" : "", k->relu ? (k->feed ? " relu feed" : " relu") : k->feed ? " feed" : "", k->bias_ty == CUDNN_DATA_FLOAT ? "f32" : "half",
                g->plan ? "engine" : "no engine", (long long)g->ws, g->pick, g->timed);
    return KILN_OK;
}

kiln_status cu_cg_run(cu_be *b, const cu_cg *g, const void *const *ptr)
{
    void *ws = NULL;
    if (g->ws)
        KILN_TRY(cu_workspace(b, (size_t)g->ws, &ws));
    return cu_check_dnn(b, execute(b, g->plan, &g->key, ptr, ws), "cudnnBackendExecute (fused convolution)");
}
