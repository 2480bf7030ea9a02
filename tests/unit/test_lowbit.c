/* Layers with FP8 / NVFP4 / MXFP4 / INT4 weights (backend/cpu/lowbit.h) against their scalar
 * reference: the weight quantized and dequantized element by element (numfmt, checked
 * exhaustively by test_numfmt), the activations rounded element by element, then the float32
 * kernel of the op on a node without the low-bit attributes. Odd sizes, 1 and 2 threads, every
 * path (dequantizing GEMM packer, blocked convolution, whole dequantized copy); the blob path and
 * the on-the-fly path give identical results, a dropped weight runs from the blob alone, and
 * corrupted blobs are refused cleanly. */
#include "test.h"
#include "test_tensor.h"
#include "backend/cpu/lowbit.h"
#include "backend/cpu/prep.h"
#include "backend/lowbit_blob.h"
#include "backend/kernel.h"
#include "test_pool.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long seed = 2024;

static kiln_tensor rnd(int ndim, const int64_t *dims, float scale) { return test_tensor_f32(ndim, dims, scale, &seed); }

#define MAX_ATTR 12
typedef struct layer {
    kiln_node node;
    kiln_attr attrs[MAX_ATTR];
    int ids[8];
    int n_plain;   /* attributes before the low-bit ones */
} layer;

static void add_i(layer *l, const char *name, int64_t v)
{
    l->attrs[l->node.n_attr++] = (kiln_attr){.name = (char *)name, .type = KILN_ATTR_INT, .i = v};
}
static void add_f(layer *l, const char *name, float v)
{
    l->attrs[l->node.n_attr++] = (kiln_attr){.name = (char *)name, .type = KILN_ATTR_FLOAT, .f = v};
}
static void add_s(layer *l, const char *name, const char *v)
{
    l->attrs[l->node.n_attr++] =
        (kiln_attr){.name = (char *)name, .type = KILN_ATTR_STRING, .s = (char *)v, .s_len = strlen(v)};
}

static void layer_init(layer *l, kiln_op op, int n_in)
{
    memset(l, 0, sizeof *l);
    for (int i = 0; i < 8; i++)
        l->ids[i] = i;
    l->node = (kiln_node){.name = (char *)"L", .op_type = (char *)kiln__op_name(op), .domain = (char *)"", .op = op,
                          .opset = 17, .n_in = n_in, .n_out = 1, .in = l->ids, .out = l->ids + 7, .attrs = l->attrs};
}

/* appends the low-bit attributes of format fmt (fp8: activation scale s) */
static void lowbit(layer *l, const char *fmt, float s)
{
    l->n_plain = l->node.n_attr;
    add_s(l, KILN_ATTR_WQ, fmt);
    add_s(l, KILN_ATTR_AQ, strcmp(fmt, "fp8") ? "fp16" : "fp8");
    if (!strcmp(fmt, "fp8"))
        add_f(l, KILN_ATTR_AQ_SCALE, s);
}

static kiln_status run(const kiln_node *n, int n_in, const kiln_tensor *const *in, const void *blob, size_t size,
                       int nt, kiln_tensor *y)
{
    kiln_tensor *out[1] = {y};
    memset(y, 0, sizeof *y);
    kiln_kctx c = {.node = n, .n_in = n_in, .in = in, .n_out = 1, .out = out, .pool = test_pool(nt), .nthreads = nt,
                   .prepared = blob, .prepared_size = size};
    return kiln__ref_kernel(n->op)(&c);
}

/* a 64-byte aligned copy of a blob (engines store them aligned) */
static void *aligned_copy(const void *b, size_t size)
{
    void *p = aligned_alloc(64, (size + 63) / 64 * 64);
    memcpy(p, b, size);
    return p;
}

static bool same_bits(const kiln_tensor *a, const kiln_tensor *b)
{
    return a->data && b->data && a->nbytes == b->nbytes && a->ndim == b->ndim &&
           !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim) && !memcmp(a->data, b->data, a->nbytes);
}

/* the layer against its reference, with and without a blob, on nt threads */
static void check_layer(const char *what, layer *l, const kiln_tensor *const *in, int nt)
{
    kiln_node *n = &l->node;
    const kiln_tensor *x = in[0], *w = in[1];
    /* reference: rounded activations, quantized-dequantized weight, float32 kernel */
    kiln_tensor xr = rnd(x->ndim, x->dims, 0), wr = rnd(w->ndim, w->dims, 0), yr, yb, yf, yd;
    memcpy(xr.data, x->data, x->nbytes);
    CHECK(kiln__lowbit_ref_act(n, xr.data, kiln_tensor_numel(x)) == KILN_OK);
    CHECK(kiln__lowbit_ref_weight(n, w, wr.data) == KILN_OK);
    kiln_node plain = *n;
    plain.n_attr = l->n_plain;
    const kiln_tensor *rin[8];
    for (int i = 0; i < n->n_in; i++)
        rin[i] = in[i];
    rin[0] = &xr, rin[1] = &wr;
    CHECK(run(&plain, n->n_in, rin, NULL, 0, 1, &yr) == KILN_OK);
    /* blob */
    void *blob = NULL;
    size_t size = 0;
    CHECK(kiln__cpu_prep_node(n) == kiln__lowbit_prep);
    CHECK(kiln__lowbit_prep(n, n->n_in, in, &blob, &size) == KILN_OK && blob);
    kiln_prep_hdr h;
    CHECK(kiln__prep_header(blob, size, &h) && kiln__prep_fits_op(n->op, &h) && h.replaces == 2 && h.gemm_kind == 0);
    void *ab = aligned_copy(blob, size);
    kiln__free(blob);
    CHECK_MSG(run(n, n->n_in, in, ab, size, nt, &yb) == KILN_OK, "%s: %s", what, kiln_last_error());
    CHECK_MSG(run(n, n->n_in, in, NULL, 0, nt, &yf) == KILN_OK, "%s: %s", what, kiln_last_error());
    CHECK_MSG(same_bits(&yb, &yf), "%s: blob and on-the-fly results differ", what);
    /* the weight dropped from the engine: the blob alone */
    kiln_tensor wd = *w;
    wd.data = NULL, wd.nbytes = 0;
    const kiln_tensor *din[8];
    memcpy(din, in, sizeof(kiln_tensor *) * (size_t)n->n_in);
    din[1] = &wd;
    CHECK_MSG(run(n, n->n_in, din, ab, size, nt, &yd) == KILN_OK, "%s: %s", what, kiln_last_error());
    CHECK_MSG(same_bits(&yb, &yd), "%s: dropped-weight result differs", what);
    /* against the reference: the same products, summed in another order */
    double amax = 1, err = 0;
    int64_t ny = kiln_tensor_numel(&yr);
    CHECK_MSG(yb.data && yb.nbytes == yr.nbytes && !memcmp(yb.dims, yr.dims, sizeof(int64_t) * (size_t)yr.ndim),
              "%s: output shape", what);
    for (int64_t i = 0; yb.data && yb.nbytes == yr.nbytes && i < ny; i++) {
        double a = ((float *)yr.data)[i], b = ((float *)yb.data)[i];
        double d = isnan(a) != isnan(b) ? INFINITY : isnan(a) ? 0 : fabs(a - b);
        amax = fabs(a) > amax ? fabs(a) : amax;
        err = d > err ? d : err;
    }
    CHECK_MSG(err <= 2e-5 * amax, "%s (threads %d): max |diff| %g vs reference (max |ref| %g)", what, nt, err, amax);
    /* corrupted blobs: refused (the dropped weight then cannot run), never read */
    for (int k = 0; k < 6; k++) {
        void *bad = aligned_copy(ab, size);
        kiln_prep_hdr *bh = bad;
        size_t bsize = size;
        switch (k) {
        case 0: bh->layout = KILN_PREP_GEMM_B; break;
        case 1: bh->dims[1]++; break;
        case 2: bh->dims[0] = bh->dims[0] == KILN_QF_FP8 ? KILN_QF_NVFP4 : KILN_QF_FP8; break;
        case 3: bh->gemm_kind = 3; break;
        case 4: bsize -= 64; break;
        case 5: bh->payload_bytes += 64; break;
        }
        kiln_tensor yc;
        kiln_status st = run(n, n->n_in, din, bad, bsize, nt, &yc);
        CHECK_MSG(st == KILN_ERR_UNSUPPORTED, "%s: corrupted blob %d accepted (%d)", what, k, (int)st);
        kiln__tensor_release(&yc);
        if (k == 3)   /* what the engine's load refuses too */
            CHECK(!kiln__prep_fits_op(n->op, bh));
        free(bad);
    }
    free(ab);
    kiln__tensor_release(&xr);
    kiln__tensor_release(&wr);
    kiln__tensor_release(&yr);
    kiln__tensor_release(&yb);
    kiln__tensor_release(&yf);
    kiln__tensor_release(&yd);
}

static const char *const FMTS[] = {"fp8", "nvfp4", "mxfp4", "int4"};

static void case_matmul(const char *fmt, int nt)
{
    static const struct { int xnd; int64_t xd[3], K, N; bool fused; } c[] = {
        {3, {3, 5, 37}, 37, 19, false}, {1, {37}, 37, 19, false}, {2, {7, 45}, 45, 33, true}, {2, {1, 1}, 1, 5, false}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        layer l;
        layer_init(&l, c[i].fused ? KILN_OP_FusedMatMul : KILN_OP_MatMul, c[i].fused ? 4 : 2);
        if (c[i].fused)
            add_s(&l, "activation", "Relu");
        lowbit(&l, fmt, 0.01f);
        int64_t wd[2] = {c[i].K, c[i].N}, od[2] = {c[i].xd[0], c[i].N};
        kiln_tensor x = rnd(c[i].xnd, c[i].xd, 3), w = rnd(2, wd, 1), b = rnd(1, wd + 1, 1), r = rnd(2, od, 1);
        ((float *)x.data)[0] = 10.0f;   /* past the FP8 range at scale 0.01: saturates */
        const kiln_tensor *in[4] = {&x, &w, &b, &r};
        char what[96];
        snprintf(what, sizeof what, "%s %s case %zu", fmt, l.node.op_type, i);
        check_layer(what, &l, in, nt);
        kiln__tensor_release(&x), kiln__tensor_release(&w), kiln__tensor_release(&b), kiln__tensor_release(&r);
    }
}

static void case_gemm(const char *fmt, int nt)
{
    /* transA, transB, C shape (0 none, 1 [N], 2 [1, N], 3 [M, N]: the whole-copy path), alpha, beta, fused */
    static const struct { int ta, tb, c; float alpha, beta; bool fused; } c[] = {
        {0, 1, 1, 0.5f, 1, false}, {1, 0, 2, 1, 1, false}, {0, 0, 3, 1, 0.7f, false}, {0, 1, 0, 1, 1, true},
        {0, 1, 1, 1, 2, false}};
    const int64_t M = 9, K = 50, N = 23;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        layer l;
        layer_init(&l, c[i].fused ? KILN_OP_FusedGemm : KILN_OP_Gemm, c[i].c ? 3 : 2);
        add_i(&l, "transA", c[i].ta);
        add_i(&l, "transB", c[i].tb);
        add_f(&l, "alpha", c[i].alpha);
        add_f(&l, "beta", c[i].beta);
        if (c[i].fused)
            add_s(&l, "activation", "Relu");
        lowbit(&l, fmt, 0.02f);
        int64_t xd[2] = {c[i].ta ? K : M, c[i].ta ? M : K}, wd[2] = {c[i].tb ? N : K, c[i].tb ? K : N};
        int64_t cd[2] = {c[i].c == 3 ? M : 1, N};
        kiln_tensor x = rnd(2, xd, 2), w = rnd(2, wd, 1),
                    cc = c[i].c == 1 ? rnd(1, &N, 1) : rnd(2, cd, 1);
        const kiln_tensor *in[3] = {&x, &w, &cc};
        char what[96];
        snprintf(what, sizeof what, "%s %s case %zu", fmt, l.node.op_type, i);
        check_layer(what, &l, in, nt);
        kiln__tensor_release(&x), kiln__tensor_release(&w), kiln__tensor_release(&cc);
    }
}

static void case_conv(const char *fmt, int nt)
{
    static const struct {
        int nd;
        int64_t xd[5], wd[5];
        int group, stride, pad;
        bool bias, fused;
    } c[] = {
        {4, {2, 6, 13, 11}, {37, 6, 3, 3}, 1, 1, 1, true, false},    /* blocks of 16 + 16 + 5 channels */
        {4, {2, 6, 13, 11}, {37, 6, 3, 3}, 1, 1, 1, true, true},     /* + residual and Relu */
        {4, {1, 6, 9, 9}, {33, 6, 1, 1}, 1, 2, 0, false, false},     /* strided 1x1 */
        {3, {2, 4, 29, 0}, {21, 4, 5, 0}, 1, 1, 2, true, false},     /* 1-D */
        {5, {1, 3, 5, 6, 7}, {19, 3, 2, 2, 2}, 1, 1, 0, true, false}, /* 3-D */
        {4, {2, 6, 9, 9}, {20, 3, 3, 3}, 2, 1, 1, true, false},      /* grouped: whole copy */
        {4, {1, 8, 7, 7}, {8, 1, 3, 3}, 8, 1, 1, false, true},       /* depthwise */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        layer l;
        layer_init(&l, c[i].fused ? KILN_OP_FusedConv : KILN_OP_Conv, c[i].fused ? 4 : c[i].bias ? 3 : 2);
        int nsp = c[i].nd - 2;
        int64_t st[3] = {c[i].stride, c[i].stride, c[i].stride}, pads[6];
        for (int k = 0; k < 6; k++)
            pads[k] = c[i].pad;
        l.attrs[l.node.n_attr++] = (kiln_attr){.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = nsp, .ints = st};
        l.attrs[l.node.n_attr++] = (kiln_attr){.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 2 * nsp, .ints = pads};
        add_i(&l, "group", c[i].group);
        if (c[i].fused)
            add_s(&l, "activation", "Relu");
        lowbit(&l, fmt, 0.01f);
        kiln_tensor x = rnd(c[i].nd, c[i].xd, 2), w = rnd(c[i].nd, c[i].wd, 0.5f), b = rnd(1, c[i].wd, 1), r;
        /* the residual has the output's shape: the float32 kernel tells it */
        kiln_tensor y0;
        const kiln_tensor *in0[3] = {&x, &w, c[i].bias ? &b : NULL};
        layer p = l;
        p.node.attrs = p.attrs;
        p.node.op = KILN_OP_Conv, p.node.n_in = 3, p.node.n_attr = l.n_plain - (c[i].fused ? 1 : 0);
        CHECK(run(&p.node, 3, in0, NULL, 0, 1, &y0) == KILN_OK);
        r = rnd(y0.ndim, y0.dims, 1);
        kiln__tensor_release(&y0);
        const kiln_tensor *in[4] = {&x, &w, c[i].bias ? &b : NULL, &r};
        char what[96];
        snprintf(what, sizeof what, "%s %s case %zu", fmt, l.node.op_type, i);
        l.node.attrs = l.attrs;
        check_layer(what, &l, in, nt);
        kiln__tensor_release(&x), kiln__tensor_release(&w), kiln__tensor_release(&b), kiln__tensor_release(&r);
    }
}

/* bad attributes and inputs: clean errors */
static void case_errors(void)
{
    int64_t xd[2] = {3, 8}, wd[2] = {8, 5}, w3[3] = {2, 4, 5};
    kiln_tensor x = rnd(2, xd, 1), w = rnd(2, wd, 1), wbad = rnd(3, w3, 1), y;
    const kiln_tensor *in[2] = {&x, &w}, *inb[2] = {&x, &wbad};
    layer l;
    layer_init(&l, KILN_OP_MatMul, 2);
    add_s(&l, KILN_ATTR_WQ, "fp3");
    CHECK(run(&l.node, 2, in, NULL, 0, 1, &y) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "unknown weight format 'fp3'") != NULL);
    layer_init(&l, KILN_OP_MatMul, 2);
    lowbit(&l, "fp8", 0);   /* FP8 without a valid activation scale */
    CHECK(run(&l.node, 2, in, NULL, 0, 1, &y) == KILN_ERR_INVALID_ARG);
    layer_init(&l, KILN_OP_MatMul, 2);
    lowbit(&l, "nvfp4", 0);
    l.attrs[l.node.n_attr - 1].s = (char *)"int2";
    CHECK(run(&l.node, 2, in, NULL, 0, 1, &y) == KILN_ERR_INVALID_ARG);
    layer_init(&l, KILN_OP_MatMul, 2);
    lowbit(&l, "mxfp4", 0);
    CHECK(run(&l.node, 2, inb, NULL, 0, 1, &y) == KILN_ERR_SHAPE);   /* a 3-D weight */
    kiln_tensor wd0 = w;
    wd0.data = NULL, wd0.nbytes = 0;
    const kiln_tensor *ind[2] = {&x, &wd0};
    CHECK(run(&l.node, 2, ind, NULL, 0, 1, &y) == KILN_ERR_UNSUPPORTED);   /* dropped weight, no blob */
    kiln__tensor_release(&y);
    kiln__tensor_release(&x), kiln__tensor_release(&w), kiln__tensor_release(&wbad);
}

/* An FP8 MatMul on the identity (1 is exact in FP8 at activation scale 1/256): x [K, K] = I, w [K, N]
 * random with column n scaled by 10^(-1.2 n); *y the layer's output (the dequantized weight) through
 * its blob, *y_fly (if not NULL) on the fly. tensor: KILN_ATTR_WQ_TENSOR. Returns the blob copy. */
enum { ID_K = 11, ID_N = 6 };
static void *fp8_identity(bool tensor, kiln_tensor *w, kiln_tensor *x, kiln_tensor *y, kiln_tensor *y_fly)
{
    layer l;
    layer_init(&l, KILN_OP_MatMul, 2);
    lowbit(&l, "fp8", 1.0f / 256);
    if (tensor)
        add_i(&l, KILN_ATTR_WQ_TENSOR, 1);
    int64_t wd[2] = {ID_K, ID_N}, xd[2] = {ID_K, ID_K};
    *w = rnd(2, wd, 1), *x = rnd(2, xd, 0);
    float *wf = w->data, *xf = x->data;
    for (int64_t k = 0; k < ID_K; k++) {
        xf[k * ID_K + k] = 1;
        for (int64_t n = 0; n < ID_N; n++)
            wf[k * ID_N + n] *= powf(10.0f, -(float)n * 1.2f);   /* column n ~ 10^(-1.2 n) */
    }
    void *blob = NULL;
    size_t size = 0;
    const kiln_tensor *in[2] = {x, w};
    CHECK(kiln__lowbit_prep(&l.node, 2, in, &blob, &size) == KILN_OK && blob);
    void *ab = blob ? aligned_copy(blob, size) : NULL;
    kiln__free(blob);
    memset(y, 0, sizeof *y);
    CHECK(ab && run(&l.node, 2, in, ab, size, 1, y) == KILN_OK);
    if (y_fly)
        CHECK(run(&l.node, 2, in, NULL, 0, 1, y_fly) == KILN_OK);
    return ab;
}

/* FP8 weights have one scale per output channel: a MatMul on the identity (1 is exact in FP8 at
 * activation scale 1/256) returns the dequantized weight; each column's largest |w| comes back
 * (to float rounding of amax / 448 * 448) and columns 10^6 smaller than others keep E4M3's relative precision (a scale for the
 * whole tensor would flush them to 0). */
static void case_fp8_channels(void)
{
    kiln_tensor w, x, y;
    void *ab = fp8_identity(false, &w, &x, &y, NULL);
    const float *yf = y.data, *wf = w.data;
    for (int64_t n = 0; yf && n < ID_N; n++) {
        float wmax = 0, ymax = 0;
        double rel = 0;
        for (int64_t k = 0; k < ID_K; k++) {
            wmax = fmaxf(wmax, fabsf(wf[k * ID_N + n])), ymax = fmaxf(ymax, fabsf(yf[k * ID_N + n]));
            rel = fmax(rel, fabs(yf[k * ID_N + n] - wf[k * ID_N + n]) / fabs(wf[k * ID_N + n]));
        }
        CHECK_MSG(fabsf(wmax - ymax) <= 1e-6f * wmax, "column %lld: largest |w| %g comes back as %g", (long long)n,
                  (double)wmax, (double)ymax);
        CHECK_MSG(rel <= 1.0 / 16 + 1e-6, "column %lld: relative error %g", (long long)n, rel);
    }
    kiln__tensor_release(&y), kiln__tensor_release(&x), kiln__tensor_release(&w);
    free(ab);
}

/* A --device cuda build marks FP8 layers KILN_ATTR_WQ_TENSOR (the GPU's GEMM scales the weight per
 * tensor): the CPU then emulates exactly that, every element e4m3(w / s) * s with s = amax / 448 over
 * the whole tensor, both through the blob and on the fly (the columns 10^6 below the largest flush). */
static void case_fp8_tensor(void)
{
    kiln_tensor w, x, y1, y2 = {0};
    void *ab = fp8_identity(true, &w, &x, &y1, &y2);
    const float *wf = w.data;
    float amax = 0;
    for (int64_t i = 0; i < ID_K * ID_N; i++)
        amax = fmaxf(amax, fabsf(wf[i]));
    float sc = amax / 448.0f;
    int bad = 0;
    for (int64_t i = 0; y1.data && y2.data && i < ID_K * ID_N; i++) {
        float want = kiln__fp8_to_f32(KILN_DT_FP8E4M3, kiln__f32_to_fp8(KILN_DT_FP8E4M3, wf[i] / sc, true)) * sc;
        bad += ((float *)y1.data)[i] != want || ((float *)y2.data)[i] != want;
    }
    CHECK_MSG(y1.data && y2.data && bad == 0, "%d of %d elements differ from the per-tensor FP8 rule", bad, ID_K * ID_N);
    kiln__tensor_release(&y1), kiln__tensor_release(&y2), kiln__tensor_release(&x), kiln__tensor_release(&w);
    free(ab);
}

/* The blob format (backend/lowbit_blob.h, shared with the CUDA module) against numfmt's packed layout and
 * the blobs kiln__lowbit_prep makes: elements and scales where numfmt puts them, every blob parses to the
 * layer's format, rows, k and flags, and a header that lies (flags, format, dtype, size) is refused. */
static void case_blob_format(void)
{
    static const int64_t KS[] = {1, 15, 16, 17, 33, 64, 100};
    for (int f = 0; f < 4; f++)
        for (int t = 0; t < 2; t++)
            for (size_t ki = 0; ki < sizeof KS / sizeof *KS; ki++) {
                kiln__qfmt fmt;
                CHECK(kiln__lowbit_parse(FMTS[f], &fmt));
                int64_t rows = 3 + (int64_t)ki, k = KS[ki];
                kiln__qlayout Q;
                kiln_lowbit_blob B = {0};
                CHECK(kiln__lowbit_layout(&Q, fmt, rows, k) == KILN_OK);
                CHECK(kiln__lowbit_blob_layout(fmt, rows, k, true, t, &B));
                uint64_t scales = fmt == KILN_QF_FP8 ? (t ? 0 : 4 * (uint64_t)rows) : Q.scale_bytes;
                CHECK_MSG(B.data_bytes == Q.data_bytes && B.off_s == (Q.data_bytes + 63) / 64 * 64 &&
                              B.off_t == (B.off_s + scales + 63) / 64 * 64 && B.total == B.off_t + 64 &&
                              B.tensor == (t && fmt == KILN_QF_FP8),
                          "%s %lld x %lld tensor %d", FMTS[f], (long long)rows, (long long)k, t);
                /* the blob of a MatMul with this weight */
                layer l;
                layer_init(&l, KILN_OP_MatMul, 2);
                lowbit(&l, FMTS[f], 0.01f);
                if (t)
                    add_i(&l, KILN_ATTR_WQ_TENSOR, 1);
                int64_t wd[2] = {k, rows};
                kiln_tensor w = rnd(2, wd, 1);
                const kiln_tensor *in[2] = {NULL, &w};
                void *blob = NULL;
                size_t size = 0;
                kiln_lowbit_blob P = {0};
                CHECK(kiln__lowbit_prep(&l.node, 2, in, &blob, &size) == KILN_OK && blob);
                CHECK(kiln__lowbit_blob_parse(blob, size, &P) == (const uint8_t *)blob + KILN_PREP_HDR_BYTES &&
                      P.fmt == fmt && P.rows == rows && P.k == k && P.trans && P.tensor == B.tensor &&
                      P.total == B.total);
                kiln_prep_hdr h;
                for (int bad = 0; blob && bad < 6; bad++) {
                    memcpy(&h, blob, sizeof h);
                    size_t sz = size;
                    switch (bad) {
                    case 0: h.dims[3] |= 4; break;                                          /* unknown flag */
                    case 1: h.dims[3] ^= 2; break;                                          /* tensor flag flipped */
                    case 2: h.dims[0] = KILN_QF_INT8_CHANNEL; break;                        /* not a layer format */
                    case 3: h.dtype = KILN_DT_FLOAT32; break;                               /* element type */
                    case 4: h.payload_bytes += 64; break;                                   /* sizes do not add up */
                    case 5: sz = KILN_PREP_HDR_BYTES + (size_t)h.payload_bytes - 1; break;  /* truncated */
                    }
                    if (bad == 1 && fmt == KILN_QF_FP8 && !t)
                        continue;   /* per row -> per tensor: another valid layout, refused by its size */
                    void *c = malloc(size);
                    memcpy(c, blob, size);
                    memcpy(c, &h, sizeof h);
                    CHECK_MSG(!kiln__lowbit_blob_parse(c, sz, &P), "%s tensor %d: lie %d accepted", FMTS[f], t, bad);
                    free(c);
                }
                kiln__free(blob);
                kiln__tensor_release(&w);
            }
}

/* E4M3 as cuda_fp8.h's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) (what the GPU's activation
 * quantizer and its former weight quantizer use) defines it, written from the format: the nearest finite
 * code (ties to the even one), +-448 beyond (and for +-Inf), 0x7f for NaN. */
static uint8_t e4m3_satfinite(float x)
{
    if (isnan(x))
        return 0x7f;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    double a = fabs((double)x), best_d = INFINITY;
    if (a >= 448)
        return sign | 0x7e;
    int best = 0;
    for (int c = 0; c <= 0x7e; c++) {
        double v = c >> 3 ? ldexp(8 + (c & 7), (c >> 3) - 10) : ldexp(c & 7, -9), d = fabs(v - a);
        if (d < best_d || (d == best_d && !(c & 1)))
            best_d = d, best = c;
    }
    return sign | (uint8_t)best;
}

/* The per-tensor FP8 blob of a --device cuda build's layer is what the GPU's FP8 GEMM needs, bit for bit
 * the GPU's former weight quantizer (kernels_fp8.cu k_amax / k_scale / k_quant_weight, replaced by this
 * blob): E4M3 bytes [N, K] (from MatMul's [K, N] and from Gemm's transB [N, K]), q = e4m3(w / s) with the
 * float division, s = amax / 448 over the finite |w| (1 when that is 0) at the tensor scale's offset.
 * Weights with +-Inf, NaN, zeros of both signs, E4M3 subnormals and values beyond the scale; a negative
 * NaN is the one difference (the CPU keeps its sign, 0xff; the GPU writes 0x7f): both are NaN. */
static void case_fp8_gpu_rule(void)
{
    enum { K = 48, N = 32 };
    for (int z = 0; z < 2; z++)
        for (int gemm = 0; gemm < 2; gemm++) {
            layer l;
            layer_init(&l, gemm ? KILN_OP_Gemm : KILN_OP_MatMul, 2);
            if (gemm)
                add_i(&l, "transB", 1);
            lowbit(&l, "fp8", 0.01f);
            add_i(&l, KILN_ATTR_WQ_TENSOR, 1);
            int64_t wd[2] = {gemm ? N : K, gemm ? K : N};
            kiln_tensor w = rnd(2, wd, 3);
            float *wf = w.data;
            if (z)
                memset(wf, 0, w.nbytes);   /* all zero: scale 1 */
            else {
                wf[1] = INFINITY, wf[2] = -INFINITY, wf[3] = NAN, wf[4] = -0.0f, wf[5] = 0.0f, wf[6] = -NAN;
                for (int i = 7; i < 40; i++)
                    wf[i] = ldexpf(wf[i], -12);   /* E4M3 subnormals and below, after the scale */
            }
            float amax = 0;   /* k_amax: finite |w| only */
            for (int i = 0; i < K * N; i++)
                amax = fabsf(wf[i]) <= FLT_MAX && fabsf(wf[i]) > amax ? fabsf(wf[i]) : amax;
            float s = amax / 448.0f;   /* k_scale */
            s = s > 0.0f ? s : 1.0f;
            const kiln_tensor *in[2] = {NULL, &w};
            void *blob = NULL;
            size_t size = 0;
            kiln_lowbit_blob B = {0};
            CHECK(kiln__lowbit_prep(&l.node, 2, in, &blob, &size) == KILN_OK);
            const uint8_t *p = kiln__lowbit_blob_parse(blob, size, &B);
            CHECK(p && B.tensor && B.rows == N && B.k == K && B.trans == !gemm);
            if (!p) {
                kiln__free(blob);
                kiln__tensor_release(&w);
                continue;
            }
            float ts;
            memcpy(&ts, p + B.off_t, sizeof ts);
            CHECK_MSG(ts == s, "scale %g, the GPU's rule %g", (double)ts, (double)s);
            int bad = 0;
            for (int n = 0; n < N; n++)   /* k_quant_weight: q[n][k] = e4m3(w[k][n] / s) (trans) or w[n][k] */
                for (int k = 0; k < K; k++) {
                    float v = wf[gemm ? n * K + k : k * N + n];
                    uint8_t want = e4m3_satfinite(v / s), got = p[n * K + k];
                    bad += got != want && !(isnan(v) && (got & 0x7f) == 0x7f);
                }
            CHECK_MSG(bad == 0, "%s%s: %d of %d bytes differ from the GPU's rule", gemm ? "Gemm transB" : "MatMul",
                      z ? " (zeros)" : "", bad, K * N);
            kiln__free(blob);
            kiln__tensor_release(&w);
        }
}

int main(void)
{
    case_fp8_channels();
    case_fp8_tensor();
    case_fp8_gpu_rule();
    case_blob_format();
    kiln__lowbit_set_block_floats(1);   /* 16-channel convolution blocks: the blocked path on small layers */
    for (int f = 0; f < 4; f++)
        for (int nt = 1; nt <= 2; nt++) {
            case_matmul(FMTS[f], nt);
            case_gemm(FMTS[f], nt);
            case_conv(FMTS[f], nt);
        }
    kiln__lowbit_set_block_floats(0);
    case_conv("nvfp4", 2);   /* default blocks: one block per layer here */
    case_errors();
    return TEST_SUMMARY();
}
