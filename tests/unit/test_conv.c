/* Conv / ConvTranspose / ConvInteger / MaxPool / AveragePool / GlobalAveragePool kernels against naive loops
 * written here with double accumulation: many odd configurations (groups, depthwise,
 * kernels, strides, pads, dilations, batch 1..2, odd sizes, 1-D/2-D/3-D), several thread
 * counts, float32 fast paths plus float64 / float16 / integer paths. Ends with timings of a
 * ResNet-50-like conv stack (information only, not an assertion). */
#include "test.h"
#include "test_pool.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/prep.h"
#include "backend/cpu/ref/window.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* true: run_op runs the scalar reference kernels instead of the fastest the host has (cpu/x86) */
static bool scalar_ref;
/* >= 0: run_op runs the host's g_fast_at-th fast kernel of the op (kiln__cpu_fast_kernel_at) where
 * it has one, e.g. the AVX2 Conv on an AVX-512 host */
static int g_fast_at = -1;
/* true: run_op gives the kernel the weights (input 1) prepared as a built engine stores them
 * (prep.h: Winograd-transformed filters), 64-byte aligned */
static bool g_prepared;
/* FusedConv tolerance (relative, at least absolute): check_fused_conv */
static double g_fused_tol = 1e-4;
/* >= 0: check_fused_conv puts a NaN at this input element (modulo its size): the outputs it reaches stay NaN through
 * every activation, as the unfused layers keep it (a fused Relu once turned NaN into 0) */
static int64_t g_nan_at = -1;
/* float32 Conv tolerance: check_conv */
static double g_conv_tol = 1e-4;

/* ---------------------------------------------------------------------------------------
 * building a node by hand
 * --------------------------------------------------------------------------------------- */

typedef struct tattr {
    const char *name;
    int n;             /* number of ints; -1: a single INT; -2: a STRING; -3: a FLOAT */
    int64_t v[12];
    const char *s;
    float f;
} tattr;

typedef struct tnode {
    tattr a[12];
    int na;
} tnode;

static void add_ints(tnode *t, const char *name, int n, const int64_t *v)
{
    tattr *a = &t->a[t->na++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->n = n;
    memcpy(a->v, v, sizeof(int64_t) * (size_t)n);
}
static void add_int(tnode *t, const char *name, int64_t v)
{
    tattr *a = &t->a[t->na++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->n = -1;
    a->v[0] = v;
}
static void add_str(tnode *t, const char *name, const char *s)
{
    tattr *a = &t->a[t->na++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->n = -2;
    a->s = s;
}

static void add_float(tnode *t, const char *name, float f)
{
    tattr *a = &t->a[t->na++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->n = -3;
    a->f = f;
}

static kiln_status run_op(kiln_op op, const char *op_type, int opset, const tnode *t, int n_in,
                          const kiln_tensor *const *in, int n_out, kiln_tensor *out, int nthreads)
{
    kiln_attr attrs[12];
    memset(attrs, 0, sizeof attrs);
    for (int i = 0; i < t->na; i++) {
        attrs[i].name = (char *)t->a[i].name;
        if (t->a[i].n == -1) {
            attrs[i].type = KILN_ATTR_INT;
            attrs[i].i = t->a[i].v[0];
        } else if (t->a[i].n == -2) {
            attrs[i].type = KILN_ATTR_STRING;
            attrs[i].s = (char *)t->a[i].s;
            attrs[i].s_len = strlen(t->a[i].s);
        } else if (t->a[i].n == -3) {
            attrs[i].type = KILN_ATTR_FLOAT;
            attrs[i].f = t->a[i].f;
        } else {
            attrs[i].type = KILN_ATTR_INTS;
            attrs[i].n = t->a[i].n;
            attrs[i].ints = (int64_t *)t->a[i].v;
        }
    }
    kiln_node node;
    memset(&node, 0, sizeof node);
    node.name = (char *)"test";
    node.op_type = (char *)op_type;
    node.domain = (char *)"";
    node.op = op;
    node.opset = opset;
    node.n_attr = t->na;
    node.attrs = attrs;
    kiln_tensor *outp[4];
    for (int i = 0; i < n_out; i++)
        outp[i] = &out[i];
    kiln_kctx ctx = {.node = &node, .n_in = n_in, .in = in, .n_out = n_out, .out = outp, .pool = test_pool(nthreads), .nthreads = nthreads};
    kiln_kernel_fn fn = scalar_ref ? kiln__cpu_ref_kernel(op) : kiln__ref_kernel(op);
    const kiln_kernel_isa_reg *fast_at = kiln__cpu_fast_kernel_at(op, g_fast_at);
    if (fast_at)
        fn = fast_at->fn;
    if (!fn)
        return KILN_ERR_UNSUPPORTED;
    void *blob = NULL, *aligned = NULL;
    size_t size = 0;
    kiln_kernel_prep_fn prep = g_prepared && n_in > 1 ? kiln__cpu_prep_fn(op) : NULL;
    if (prep) {
        const kiln_tensor *consts[4] = {NULL, in[1], NULL, NULL};
        node.n_in = n_in;
        kiln_status st = prep(&node, n_in, consts, &blob, &size);
        if (st != KILN_OK)
            return st;
        if (blob) {
            CHECK(posix_memalign(&aligned, 64, size) == 0);
            memcpy(aligned, blob, size);
            ctx.prepared = aligned;
            ctx.prepared_size = size;
        }
    }
    kiln_status st = fn(&ctx);
    kiln__free(blob);
    free(aligned);
    return st;
}

static kiln_tensor mk(kiln_dtype dt, int ndim, const int64_t *dims, void *data)
{
    kiln_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = ndim;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)ndim);
    t.data = data;
    t.nbytes = (size_t)kiln_tensor_numel(&t) * kiln_dtype_size(dt);
    return t;
}

static float *rand_buf(int64_t n, unsigned long long *s)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = test_randf(s);
    return p;
}

static int64_t rnd(unsigned long long *s, int64_t lo, int64_t hi) /* [lo, hi] */
{
    return lo + (int64_t)(test_rng(s) % (unsigned long long)(hi - lo + 1));
}

/* ---------------------------------------------------------------------------------------
 * configurations (spatial dims padded to 3 with leading 1s in the naive loops)
 * --------------------------------------------------------------------------------------- */

typedef struct cfg {
    int nsp;
    int64_t N, C, M, G;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], op[3];
    bool bias;
} cfg;

static void pad3(const cfg *c, const int64_t *v, int64_t fill, int64_t *o3)
{
    int off = 3 - c->nsp;
    for (int i = 0; i < 3; i++)
        o3[i] = i < off ? fill : v[i - off];
}

static void conv_out(const cfg *c, int64_t *out)
{
    for (int i = 0; i < c->nsp; i++)
        out[i] = (c->in[i] + c->pb[i] + c->pe[i] - ((c->k[i] - 1) * c->d[i] + 1)) / c->s[i] + 1;
}
static void convt_out(const cfg *c, int64_t *out)
{
    for (int i = 0; i < c->nsp; i++)
        out[i] = c->s[i] * (c->in[i] - 1) + c->op[i] + (c->k[i] - 1) * c->d[i] + 1 - c->pb[i] - c->pe[i];
}

static int64_t prod(int n, const int64_t *v)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= v[i];
    return p;
}

static void naive_conv(const cfg *c, const double *x, const double *w, const double *b, double *y)
{
    int64_t o[3], in3[3], k3[3], s3[3], d3[3], pb3[3], o3[3];
    conv_out(c, o);
    pad3(c, c->in, 1, in3);
    pad3(c, c->k, 1, k3);
    pad3(c, c->s, 1, s3);
    pad3(c, c->d, 1, d3);
    pad3(c, c->pb, 0, pb3);
    pad3(c, o, 1, o3);
    int64_t Cg = c->C / c->G, Mg = c->M / c->G, isz = prod(3, in3), osz = prod(3, o3), ksz = prod(3, k3);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t a = 0; a < o3[0]; a++)
                for (int64_t bb = 0; bb < o3[1]; bb++)
                    for (int64_t cc = 0; cc < o3[2]; cc++) {
                        double acc = b ? b[m] : 0.0;
                        int64_t gi = m / Mg;
                        for (int64_t ci = 0; ci < Cg; ci++)
                            for (int64_t p = 0; p < k3[0]; p++)
                                for (int64_t q = 0; q < k3[1]; q++)
                                    for (int64_t r = 0; r < k3[2]; r++) {
                                        int64_t i0 = a * s3[0] - pb3[0] + p * d3[0];
                                        int64_t i1 = bb * s3[1] - pb3[1] + q * d3[1];
                                        int64_t i2 = cc * s3[2] - pb3[2] + r * d3[2];
                                        if (i0 < 0 || i0 >= in3[0] || i1 < 0 || i1 >= in3[1] || i2 < 0 ||
                                            i2 >= in3[2])
                                            continue;
                                        acc += x[(n * c->C + gi * Cg + ci) * isz + (i0 * in3[1] + i1) * in3[2] + i2] *
                                               w[(m * Cg + ci) * ksz + (p * k3[1] + q) * k3[2] + r];
                                    }
                        y[(n * c->M + m) * osz + (a * o3[1] + bb) * o3[2] + cc] = acc;
                    }
}

/* ConvTranspose: X [N, C, in], W [C, M/G, k], Y [N, M, out] */
static void naive_convt(const cfg *c, const double *x, const double *w, const double *b, double *y)
{
    int64_t o[3], in3[3], k3[3], s3[3], d3[3], pb3[3], o3[3];
    convt_out(c, o);
    pad3(c, c->in, 1, in3);
    pad3(c, c->k, 1, k3);
    pad3(c, c->s, 1, s3);
    pad3(c, c->d, 1, d3);
    pad3(c, c->pb, 0, pb3);
    pad3(c, o, 1, o3);
    int64_t Cg = c->C / c->G, Mg = c->M / c->G, isz = prod(3, in3), osz = prod(3, o3), ksz = prod(3, k3);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t i = 0; i < osz; i++)
                y[(n * c->M + m) * osz + i] = b ? b[m] : 0.0;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t ci = 0; ci < c->C; ci++) {
            int64_t gi = ci / Cg;
            for (int64_t a = 0; a < in3[0]; a++)
                for (int64_t bb = 0; bb < in3[1]; bb++)
                    for (int64_t cc = 0; cc < in3[2]; cc++) {
                        double xv = x[(n * c->C + ci) * isz + (a * in3[1] + bb) * in3[2] + cc];
                        for (int64_t mm = 0; mm < Mg; mm++)
                            for (int64_t p = 0; p < k3[0]; p++)
                                for (int64_t q = 0; q < k3[1]; q++)
                                    for (int64_t r = 0; r < k3[2]; r++) {
                                        int64_t o0 = a * s3[0] - pb3[0] + p * d3[0];
                                        int64_t o1 = bb * s3[1] - pb3[1] + q * d3[1];
                                        int64_t o2 = cc * s3[2] - pb3[2] + r * d3[2];
                                        if (o0 < 0 || o0 >= o3[0] || o1 < 0 || o1 >= o3[1] || o2 < 0 || o2 >= o3[2])
                                            continue;
                                        y[(n * c->M + gi * Mg + mm) * osz + (o0 * o3[1] + o1) * o3[2] + o2] +=
                                            xv * w[(ci * Mg + mm) * ksz + (p * k3[1] + q) * k3[2] + r];
                                    }
                    }
        }
}

static const char *g_auto_pad; /* when set, Conv gets auto_pad instead of pads */
static bool g_out_shape;       /* when set, ConvTranspose gets output_shape (its expected dims) instead of pads */

static void set_conv_attrs(const cfg *c, tnode *t, bool kshape)
{
    int64_t pads[6];
    for (int i = 0; i < c->nsp; i++) {
        pads[i] = c->pb[i];
        pads[c->nsp + i] = c->pe[i];
    }
    t->na = 0;
    add_ints(t, "strides", c->nsp, c->s);
    add_ints(t, "dilations", c->nsp, c->d);
    if (g_auto_pad)
        add_str(t, "auto_pad", g_auto_pad);
    else if (!g_out_shape)
        add_ints(t, "pads", 2 * c->nsp, pads);
    add_int(t, "group", c->G);
    if (kshape)
        add_ints(t, "kernel_shape", c->nsp, c->k);
}

static void describe(const cfg *c, char *buf, size_t n)
{
    snprintf(buf, n, "nsp=%d N=%lld C=%lld M=%lld G=%lld in=%lldx%lldx%lld k=%lldx%lldx%lld s=%lld,%lld,%lld "
             "d=%lld,%lld,%lld pb=%lld,%lld,%lld pe=%lld,%lld,%lld bias=%d", c->nsp, (long long)c->N,
             (long long)c->C, (long long)c->M, (long long)c->G, (long long)c->in[0], (long long)c->in[1],
             (long long)c->in[2], (long long)c->k[0], (long long)c->k[1], (long long)c->k[2], (long long)c->s[0],
             (long long)c->s[1], (long long)c->s[2], (long long)c->d[0], (long long)c->d[1], (long long)c->d[2],
             (long long)c->pb[0], (long long)c->pb[1], (long long)c->pb[2], (long long)c->pe[0],
             (long long)c->pe[1], (long long)c->pe[2], c->bias);
}

static int n_conv_cases;

/* Runs Conv (transpose = false) or ConvTranspose in dtype dt and compares with the naive loops. */
static void check_conv(const cfg *c, bool transpose, kiln_dtype dt, int nthreads, unsigned long long *seed)
{
    int nsp = c->nsp;
    int64_t xd[5] = {c->N, c->C}, wd[5], bd[1] = {c->M}, yd[5] = {c->N, c->M}, o[3];
    if (transpose) {
        wd[0] = c->C;
        wd[1] = c->M / c->G;
        convt_out(c, o);
    } else {
        wd[0] = c->M;
        wd[1] = c->C / c->G;
        conv_out(c, o);
    }
    for (int i = 0; i < nsp; i++) {
        xd[2 + i] = c->in[i];
        wd[2 + i] = c->k[i];
        yd[2 + i] = o[i];
    }
    int64_t nx = prod(nsp + 2, xd), nw = prod(nsp + 2, wd), ny = prod(nsp + 2, yd);
    float *fx = rand_buf(nx, seed), *fw = rand_buf(nw, seed), *fb = rand_buf(c->M, seed);
    double *dx = malloc(sizeof(double) * (size_t)nx), *dw = malloc(sizeof(double) * (size_t)nw);
    double *db = malloc(sizeof(double) * (size_t)c->M), *ref = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
    void *tx = NULL, *tw = NULL, *tb = NULL;
    if (dt == KILN_DT_FLOAT16) { /* round the inputs to half first so both sides see the same values */
        uint16_t *hx = malloc(2 * (size_t)nx), *hw = malloc(2 * (size_t)nw), *hb = malloc(2 * (size_t)c->M);
        for (int64_t i = 0; i < nx; i++)
            fx[i] = kiln__f16_to_f32(hx[i] = kiln__f32_to_f16(fx[i]));
        for (int64_t i = 0; i < nw; i++)
            fw[i] = kiln__f16_to_f32(hw[i] = kiln__f32_to_f16(fw[i]));
        for (int64_t i = 0; i < c->M; i++)
            fb[i] = kiln__f16_to_f32(hb[i] = kiln__f32_to_f16(fb[i]));
        tx = hx, tw = hw, tb = hb;
    }
    for (int64_t i = 0; i < nx; i++)
        dx[i] = fx[i];
    for (int64_t i = 0; i < nw; i++)
        dw[i] = fw[i];
    for (int64_t i = 0; i < c->M; i++)
        db[i] = fb[i];
    if (dt == KILN_DT_FLOAT32)
        tx = fx, tw = fw, tb = fb;
    else if (dt == KILN_DT_FLOAT64)
        tx = dx, tw = dw, tb = db;
    if (transpose)
        naive_convt(c, dx, dw, c->bias ? db : NULL, ref);
    else
        naive_conv(c, dx, dw, c->bias ? db : NULL, ref);

    kiln_tensor X = mk(dt, nsp + 2, xd, tx), W = mk(dt, nsp + 2, wd, tw), B = mk(dt, 1, bd, tb);
    const kiln_tensor *in[3] = {&X, &W, c->bias ? &B : NULL};
    kiln_tensor out[1];
    memset(out, 0, sizeof out);
    tnode t;
    set_conv_attrs(c, &t, (test_rng(seed) & 1) != 0);
    if (transpose) {
        bool any = false;
        for (int i = 0; i < nsp; i++)
            any |= c->op[i] != 0;
        if (any)
            add_ints(&t, "output_padding", nsp, c->op);
        if (g_out_shape)
            add_ints(&t, "output_shape", nsp, o);
    }
    kiln_status st = transpose ? run_op(KILN_OP_ConvTranspose, "ConvTranspose", 11, &t, 3, in, 1, out, nthreads)
                               : run_op(KILN_OP_Conv, "Conv", 11, &t, 3, in, 1, out, nthreads);
    char desc[400];
    describe(c, desc, sizeof desc);
    n_conv_cases++;
    CHECK_MSG(st == KILN_OK, "%s %s failed: %s [%s]", transpose ? "ConvTranspose" : "Conv", kiln_dtype_name(dt),
              kiln_last_error(), desc);
    if (st == KILN_OK) {
        bool shape_ok = out[0].ndim == nsp + 2 && !memcmp(out[0].dims, yd, sizeof(int64_t) * (size_t)(nsp + 2)) &&
                        out[0].dtype == dt;
        CHECK_MSG(shape_ok, "output shape mismatch [%s]", desc);
        double tol = dt == KILN_DT_FLOAT16 ? 2e-2 : dt == KILN_DT_FLOAT32 ? g_conv_tol : 1e-4;
        for (int64_t i = 0; shape_ok && i < ny; i++) {
            double got = kiln__get_f64(dt, out[0].data, i), want = ref[i];
            if (!(fabs(got - want) <= tol * fmax(1.0, fabs(want)))) {
                CHECK_MSG(0, "%s %s threads=%d: element %lld: got %g want %g [%s]",
                          transpose ? "ConvTranspose" : "Conv", kiln_dtype_name(dt), nthreads, (long long)i, got,
                          want, desc);
                break;
            }
        }
    }
    kiln__tensor_release(&out[0]);
    if (dt == KILN_DT_FLOAT16) {
        free(tx);
        free(tw);
        free(tb);
    }
    free(fx), free(fw), free(fb), free(dx), free(dw), free(db), free(ref);
}

static cfg random_cfg(unsigned long long *s, bool transpose)
{
    cfg c;
    memset(&c, 0, sizeof c);
    int64_t r = rnd(s, 0, 9);
    c.nsp = r < 2 ? 1 : r < 8 ? 2 : 3;
    c.N = rnd(s, 1, 2);
    int64_t kind = rnd(s, 0, 3);
    if (kind == 0) { /* depthwise (possibly with a channel multiplier) */
        c.G = rnd(s, 1, 9);
        c.C = c.G;
        c.M = c.G * (rnd(s, 0, 3) == 0 ? 2 : 1);
    } else {
        c.G = kind == 1 ? rnd(s, 2, 3) : 1;
        c.C = c.G * rnd(s, 1, 5);
        c.M = c.G * rnd(s, 1, 5);
    }
    for (int i = 0; i < c.nsp; i++) {
        c.k[i] = rnd(s, 1, c.nsp == 3 ? 3 : 5);
        c.s[i] = rnd(s, 1, 3);
        c.d[i] = rnd(s, 0, 3) == 0 ? 2 : 1;
        c.pb[i] = rnd(s, 0, c.k[i] - 1);
        c.pe[i] = rnd(s, 0, c.k[i] - 1);
        int64_t effk = (c.k[i] - 1) * c.d[i] + 1;
        if (transpose) {
            c.in[i] = rnd(s, 1, c.nsp == 3 ? 4 : 9);
            c.op[i] = rnd(s, 0, 2) == 0 ? rnd(s, 0, c.s[i] - 1) : 0;
            int64_t full = c.s[i] * (c.in[i] - 1) + c.op[i] + effk;
            while (c.pb[i] + c.pe[i] >= full) {
                if (c.pb[i])
                    c.pb[i]--;
                else
                    c.pe[i]--;
            }
        } else {
            int64_t lo = effk - c.pb[i] - c.pe[i];
            if (lo < 1)
                lo = 1;
            c.in[i] = lo + rnd(s, 0, c.nsp == 3 ? 4 : 10);
        }
    }
    c.bias = rnd(s, 0, 1) != 0;
    return c;
}

static cfg cfg2d(int64_t N, int64_t C, int64_t M, int64_t G, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p,
                 int64_t d, bool bias)
{
    cfg c;
    memset(&c, 0, sizeof c);
    c.nsp = 2;
    c.N = N, c.C = C, c.M = M, c.G = G;
    c.in[0] = H, c.in[1] = W;
    c.k[0] = c.k[1] = k;
    c.s[0] = c.s[1] = s;
    c.d[0] = c.d[1] = d;
    c.pb[0] = c.pb[1] = c.pe[0] = c.pe[1] = p;
    c.bias = bias;
    return c;
}

static void test_conv_configs(unsigned long long *seed)
{
    static const int threads[] = {1, 2, 4};
    /* hand-picked: ResNet / MobileNet shapes at small sizes, odd sizes, wide rows for the SIMD paths */
    cfg fixed[] = {
        cfg2d(1, 16, 16, 1, 7, 9, 3, 1, 1, 1, true),     /* 3x3, odd H/W */
        cfg2d(2, 8, 12, 1, 14, 14, 1, 1, 0, 1, true),    /* pointwise, batch 2 */
        cfg2d(1, 8, 12, 1, 15, 13, 1, 2, 0, 1, false),   /* 1x1 stride 2 (projection) */
        cfg2d(1, 9, 20, 1, 31, 57, 1, 2, 0, 1, true),    /* 1x1 stride 2, wide rows (vector subsample), odd H */
        cfg2d(2, 7, 12, 1, 30, 61, 1, 2, 0, 1, false),   /* the same, even H, batch 2 */
        cfg2d(1, 3, 8, 1, 23, 29, 7, 2, 3, 1, true),     /* 7x7 stride 2 stem */
        cfg2d(2, 12, 12, 12, 37, 45, 3, 1, 1, 1, true),  /* depthwise 3x3 s1 */
        cfg2d(1, 12, 12, 12, 37, 77, 3, 2, 1, 1, true),  /* depthwise 3x3 s2 */
        cfg2d(1, 6, 6, 6, 40, 83, 5, 1, 2, 1, false),    /* depthwise 5x5 s1 */
        cfg2d(1, 6, 6, 6, 41, 99, 5, 2, 2, 1, true),     /* depthwise 5x5 s2 */
        cfg2d(1, 4, 8, 4, 20, 70, 3, 1, 2, 2, true),     /* depthwise multiplier 2, dilation 2 */
        cfg2d(1, 5, 5, 5, 3, 3, 3, 1, 1, 1, true),       /* depthwise, tiny */
        cfg2d(1, 32, 24, 1, 28, 28, 3, 2, 1, 1, true),   /* 3x3 s2 */
        cfg2d(1, 7, 5, 1, 13, 71, 3, 2, 1, 1, true),     /* 3x3 s2, wide odd rows: three-tap im2col */
        cfg2d(1, 37, 6, 1, 9, 67, 3, 2, 0, 1, false),    /* 3x3 s2 unpadded, K = 333 over slices */
        cfg2d(1, 30, 5, 1, 17, 66, 3, 2, 1, 1, true),    /* 3x3 s2, even row: right-edge padding */
        cfg2d(1, 8, 8, 2, 11, 11, 3, 1, 2, 2, true),     /* grouped, dilated */
        cfg2d(1, 64, 64, 1, 14, 14, 3, 1, 1, 1, true),   /* ResNet 3x3 at 14x14 */
        /* planes of <= 64 floats: the register-permute im2col (AVX-512), K slices starting mid-channel */
        cfg2d(1, 60, 40, 1, 7, 7, 3, 1, 1, 1, true),     /* 3x3 at 7x7, K = 540 */
        cfg2d(1, 9, 33, 1, 8, 8, 3, 2, 1, 1, true),      /* 3x3 s2 on 8x8 */
        cfg2d(1, 5, 17, 1, 7, 9, 5, 1, 2, 2, false),     /* 5x5 dilated, 63-float plane */
        cfg2d(1, 4, 9, 1, 4, 9, 7, 1, 3, 1, true),       /* 49 taps on a 36-float plane */
        cfg2d(1, 2, 3, 1, 1, 1, 1, 1, 0, 1, true),       /* 1x1 on a 1x1 image */
        cfg2d(1, 2, 3, 1, 1, 1, 3, 1, 1, 1, true),       /* 3x3 with padding on a 1x1 image */
        cfg2d(1, 16, 16, 16, 1, 200, 3, 1, 1, 1, true),  /* depthwise on a 1-row image */
        /* the direct convolution's rows of 2-4 tiles, run row tile by row tile across the row (AVX-512): K in two
         * slices, edge row tiles, a 4-pixel last tile; stride 2 with 28 pixels last; groups, batch 2 */
        cfg2d(1, 16, 12, 1, 9, 100, 5, 1, 2, 1, true),
        cfg2d(1, 3, 20, 1, 30, 120, 7, 2, 3, 1, true),
        cfg2d(2, 8, 16, 2, 11, 70, 5, 1, 2, 1, false),
        /* rows of 32 q + 16 pixels: the direct convolution's flattened tiles, whose two halves may come from two
         * output rows (AVX-512): the stem's 7x7/2 with Wo = 48 and edge row tiles; Wo = 16 with K in two slices;
         * Wo = 80 grouped, batch 2; Wo = 112 dilated */
        cfg2d(1, 3, 20, 1, 29, 95, 7, 2, 3, 1, true),
        cfg2d(1, 16, 12, 1, 7, 16, 5, 1, 2, 1, false),
        cfg2d(2, 8, 16, 2, 9, 80, 5, 1, 2, 1, true),
        cfg2d(1, 6, 8, 1, 9, 116, 5, 1, 2, 2, true),
        /* 3x3 stride 2 over planes of > 64 floats through the GEMM (Wo < 16, or M too small for the direct
         * convolution's lane waste): the AVX-512 im2col assembling whole panel rows from 16-lane chunks (taps3_rows):
         * Wo = 7 (five segments a panel), Wo = 19 (chunks at odd lanes), K = 549 in two slices split inside a kernel
         * row, groups with batch 2, Wo = 1 (32 segments: more chunks than its table, the per-segment stores), and
         * Wo = 17 on odd W (panel 8 a 16-column segment ending the row: a full chunk's 33rd element is padding) */
        cfg2d(1, 40, 9, 1, 14, 14, 3, 2, 1, 1, true),
        cfg2d(1, 11, 40, 1, 37, 37, 3, 2, 1, 1, true),
        cfg2d(1, 61, 9, 1, 15, 29, 3, 2, 1, 1, true),
        cfg2d(2, 8, 8, 2, 23, 29, 3, 2, 1, 1, false),
        cfg2d(1, 6, 5, 1, 70, 2, 3, 2, 1, 1, true),
        cfg2d(1, 7, 40, 1, 35, 33, 3, 2, 1, 1, true),
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        for (int t = 0; t < 3; t++)
            check_conv(&fixed[i], false, KILN_DT_FLOAT32, threads[t], seed);
    /* depthwise on tall images: several row bands of the padded buffer */
    cfg tall = cfg2d(1, 3, 3, 3, 700, 100, 3, 2, 1, 1, true);
    check_conv(&tall, false, KILN_DT_FLOAT32, 2, seed);
    tall = cfg2d(2, 2, 4, 2, 611, 130, 5, 1, 2, 1, true);
    check_conv(&tall, false, KILN_DT_FLOAT32, 2, seed);
    /* depthwise 1-D with absurd padding: bounds-checked path without a buffer */
    cfg wide;
    memset(&wide, 0, sizeof wide);
    wide.nsp = 1, wide.N = 1, wide.C = wide.M = wide.G = 2;
    wide.in[0] = 1, wide.k[0] = 1, wide.s[0] = 1, wide.d[0] = 1, wide.pb[0] = wide.pe[0] = 2100000;
    wide.bias = true;
    check_conv(&wide, false, KILN_DT_FLOAT32, 2, seed);
    /* a column chunking case: many channels x large image (im2col buffer over the budget) */
    cfg big = cfg2d(1, 48, 8, 1, 70, 70, 3, 1, 1, 1, true);
    check_conv(&big, false, KILN_DT_FLOAT32, 2, seed);
    /* 3-D with column stride 2 over wide rows: the N-D im2col's stride-2 gathers (kiln_conv_isa.gather2) */
    cfg vol;
    memset(&vol, 0, sizeof vol);
    vol.nsp = 3, vol.N = 1, vol.C = 3, vol.M = 5, vol.G = 1, vol.bias = true;
    for (int d = 0; d < 3; d++) {
        vol.in[d] = d == 2 ? 53 : 4 + d;
        vol.k[d] = 3, vol.s[d] = d == 1 ? 1 : 2, vol.d[d] = 1, vol.pb[d] = 1, vol.pe[d] = d == 2 ? 2 : 1;
    }
    for (int t = 0; t < 3; t++)
        check_conv(&vol, false, KILN_DT_FLOAT32, threads[t], seed);
    for (int i = 0; i < 400; i++) {
        cfg c = random_cfg(seed, false);
        check_conv(&c, false, KILN_DT_FLOAT32, threads[i % 3], seed);
        if (i % 10 == 0)
            check_conv(&c, false, KILN_DT_FLOAT64, threads[i % 3], seed);
        if (i % 25 == 0)
            check_conv(&c, false, KILN_DT_FLOAT16, threads[i % 3], seed);
    }
    /* auto_pad SAME_UPPER / SAME_LOWER / VALID: pads computed here, passed as auto_pad */
    static const char *aps[3] = {"SAME_UPPER", "SAME_LOWER", "VALID"};
    for (int i = 0; i < 60; i++) {
        cfg c = random_cfg(seed, false);
        g_auto_pad = aps[i % 3];
        for (int d = 0; d < c.nsp; d++) {
            int64_t effk = (c.k[d] - 1) * c.d[d] + 1;
            if (i % 3 == 2) {
                c.pb[d] = c.pe[d] = 0;
                if (c.in[d] < effk)
                    c.in[d] = effk;
                continue;
            }
            int64_t o = (c.in[d] + c.s[d] - 1) / c.s[d], tot = (o - 1) * c.s[d] + effk - c.in[d];
            if (tot < 0)
                tot = 0;
            c.pb[d] = i % 3 == 0 ? tot / 2 : tot - tot / 2;
            c.pe[d] = tot - c.pb[d];
        }
        check_conv(&c, false, KILN_DT_FLOAT32, threads[i % 3], seed);
    }
    g_auto_pad = NULL;
    cfg tfixed[] = {
        cfg2d(1, 8, 4, 1, 7, 9, 3, 2, 1, 1, true),
        cfg2d(2, 6, 6, 3, 5, 6, 4, 2, 1, 1, false),
        cfg2d(1, 8, 8, 1, 9, 9, 1, 1, 0, 1, true),   /* 1x1: direct GEMM path */
        cfg2d(1, 4, 4, 4, 6, 5, 3, 1, 1, 2, true),   /* depthwise transpose, dilated */
        /* kernel = stride, no padding (ref/k_conv_transpose.c convt_tiled: each output pixel one tap): PP-OCR det's 2x2
         * stride 2 over input rows in three chunks; grouped 3x3 stride 3 without a bias */
        cfg2d(1, 8, 6, 1, 150, 151, 2, 2, 0, 1, true),
        cfg2d(2, 6, 9, 3, 7, 5, 3, 3, 0, 1, false),
        cfg2d(1, 5, 3, 1, 9, 13, 1, 2, 0, 1, true),   /* 1x2 stride (1, 2): set below */
    };
    cfg *k12 = &tfixed[sizeof tfixed / sizeof tfixed[0] - 1];
    k12->k[0] = k12->s[0] = 1;
    k12->k[1] = k12->s[1] = 2;
    for (size_t i = 0; i < sizeof tfixed / sizeof tfixed[0]; i++)
        for (int t = 0; t < 3; t++)
            check_conv(&tfixed[i], true, KILN_DT_FLOAT32, threads[t], seed);
    for (int i = 0; i < 200; i++) {
        cfg c = random_cfg(seed, true);
        check_conv(&c, true, KILN_DT_FLOAT32, threads[i % 3], seed);
        if (i % 10 == 0)
            check_conv(&c, true, KILN_DT_FLOAT64, threads[i % 3], seed);
        if (i % 25 == 0)
            check_conv(&c, true, KILN_DT_FLOAT16, threads[i % 3], seed);
    }
    /* output_shape instead of pads: the crop (full size - output_shape) splits as the ONNX spec says, the odd unit
     * at the end under SAME_UPPER and at the start otherwise (NOTSET, absent or spelled out, and SAME_LOWER), as
     * ONNX Runtime does; the naive loops get that split as pads. First the audit's case: stride 2, 3x3 kernel,
     * 3x3 input, output_shape 6x6 of the full 7x7 (with output_padding 1: 7x7 of 8x8) */
    static const char *oaps[4] = {NULL, "SAME_UPPER", "SAME_LOWER", "NOTSET"};
    g_out_shape = true;
    for (int i = 0; i < 8; i++) {
        cfg c = cfg2d(1, 2, 3, 1, 3, 3, 3, 2, 0, 1, i & 1);
        g_auto_pad = oaps[i % 4];
        for (int d = 0; d < 2; d++) {
            c.op[d] = i >= 4;
            c.pb[d] = i % 4 == 1 ? 0 : 1;
            c.pe[d] = 1 - c.pb[d];
        }
        check_conv(&c, true, KILN_DT_FLOAT32, threads[i % 3], seed);
    }
    for (int i = 0; i < 80; i++) {
        cfg c = random_cfg(seed, true);
        g_auto_pad = oaps[i % 4];
        for (int d = 0; d < c.nsp; d++) {
            int64_t tot = c.pb[d] + c.pe[d];
            c.pb[d] = i % 4 == 1 ? tot / 2 : tot - tot / 2;
            c.pe[d] = tot - c.pb[d];
        }
        check_conv(&c, true, KILN_DT_FLOAT32, threads[i % 3], seed);
        if (i % 10 == 0)
            check_conv(&c, true, KILN_DT_FLOAT64, threads[i % 3], seed);
    }
    g_out_shape = false;
    g_auto_pad = NULL;
}

/* ---------------------------------------------------------------------------------------
 * FusedConv (kiln domain): act(Conv(X, W, B) + R) through the fused float32 paths (GEMM
 * epilogue, direct convolution, depthwise rows) against naive loops in double
 * --------------------------------------------------------------------------------------- */

static const char *const fused_acts[] = {NULL, "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid",
                                         "HardSwish", "SiLU", "Gelu", "GeluTanh", "Tanh", "HardSwishAffine"};

static double act_ref(int a, double x)
{
    switch (a) {
    case 1: return x < 0 ? 0 : x;   /* NaN stays, as the Relu layer keeps it */
    case 2: return x < -0.5 ? -0.5 : x > 0.75 ? 0.75 : x;
    case 3: return x >= 0 ? x : 0.1 * x;
    case 4: return 1.0 / (1.0 + exp(-x));
    case 5: { double v = 0.2 * x + 0.5; return v < 0 ? 0 : v > 1 ? 1 : v; }
    case 6: { double v = x / 6.0 + 0.5; return x * (v < 0 ? 0 : v > 1 ? 1 : v); }
    case 7: return x / (1.0 + exp(-x));
    case 8: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case 9: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case 10: return tanh(x);
    case 11: { double v = x / 6.0 + 0.5; return -1.25 * (x * (v < 0 ? 0 : v > 1 ? 1 : v)) + 0.375; }
    default: return x;
    }
}

static void check_fused_conv(const cfg *c, int act, bool res, int nthreads, unsigned long long *seed)
{
    int nsp = c->nsp;
    int64_t xd[5] = {c->N, c->C}, wd[5] = {c->M, c->C / c->G}, bd[1] = {c->M}, yd[5] = {c->N, c->M}, o[3];
    conv_out(c, o);
    for (int i = 0; i < nsp; i++) {
        xd[2 + i] = c->in[i];
        wd[2 + i] = c->k[i];
        yd[2 + i] = o[i];
    }
    int64_t nx = prod(nsp + 2, xd), nw = prod(nsp + 2, wd), ny = prod(nsp + 2, yd);
    float *fx = rand_buf(nx, seed), *fw = rand_buf(nw, seed), *fb = rand_buf(c->M, seed), *fr = rand_buf(ny, seed);
    double *dx = malloc(sizeof(double) * (size_t)nx), *dw = malloc(sizeof(double) * (size_t)nw);
    double *db = malloc(sizeof(double) * (size_t)c->M), *ref = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
    if (g_nan_at >= 0 && nx > 0)
        fx[g_nan_at % nx] = NAN;
    for (int64_t i = 0; i < nx; i++)
        dx[i] = fx[i];
    for (int64_t i = 0; i < nw; i++)
        dw[i] = fw[i];
    for (int64_t i = 0; i < c->M; i++)
        db[i] = fb[i];
    naive_conv(c, dx, dw, c->bias ? db : NULL, ref);
    for (int64_t i = 0; i < ny; i++)
        ref[i] = act_ref(act, ref[i] + (res ? fr[i] : 0.0));
    kiln_tensor X = mk(KILN_DT_FLOAT32, nsp + 2, xd, fx), W = mk(KILN_DT_FLOAT32, nsp + 2, wd, fw),
                B = mk(KILN_DT_FLOAT32, 1, bd, fb), R = mk(KILN_DT_FLOAT32, nsp + 2, yd, fr);
    const kiln_tensor *in[4] = {&X, &W, c->bias ? &B : NULL, res ? &R : NULL};
    kiln_tensor out[1];
    memset(out, 0, sizeof out);
    tnode t;
    set_conv_attrs(c, &t, false);
    if (act) {
        add_str(&t, "activation", fused_acts[act]);
        /* alpha / beta: Clip's bounds, LeakyRelu's slope, HardSigmoid's line, HardSwishAffine's scale and shift */
        static const float alpha[12] = {[2] = -0.5f, [3] = 0.1f, [5] = 0.2f, [11] = -1.25f};
        static const float beta[12] = {[2] = 0.75f, [5] = 0.5f, [11] = 0.375f};
        if (act == 2 || act == 3 || act == 5 || act == 11)
            add_float(&t, "activation_alpha", alpha[act]);
        if (act == 2 || act == 5 || act == 11)
            add_float(&t, "activation_beta", beta[act]);
    }
    kiln_status st = run_op(KILN_OP_FusedConv, "FusedConv", 1, &t, 4, in, 1, out, nthreads);
    char desc[400];
    describe(c, desc, sizeof desc);
    n_conv_cases++;
    CHECK_MSG(st == KILN_OK, "FusedConv failed: %s [%s]", kiln_last_error(), desc);
    if (st == KILN_OK) {
        bool shape_ok = out[0].ndim == nsp + 2 && !memcmp(out[0].dims, yd, sizeof(int64_t) * (size_t)(nsp + 2));
        CHECK_MSG(shape_ok, "FusedConv output shape mismatch [%s]", desc);
        const float *y = out[0].data;
        for (int64_t i = 0; shape_ok && i < ny; i++) {
            bool ok = isnan(ref[i]) ? isnan(y[i]) : fabs(y[i] - ref[i]) <= g_fused_tol * fmax(1.0, fabs(ref[i]));
            if (!ok) {
                CHECK_MSG(0, "FusedConv act=%s res=%d threads=%d: element %lld: got %g want %g [%s]",
                          act ? fused_acts[act] : "none", res, nthreads, (long long)i, y[i], ref[i], desc);
                break;
            }
        }
    }
    kiln__tensor_release(&out[0]);
    free(fx), free(fw), free(fb), free(fr), free(dx), free(dw), free(db), free(ref);
}

static void test_fused_conv(unsigned long long *seed)
{
    /* ResNet-like fixed shapes (pointwise, strided 1x1, 3x3, stem) with residual and Relu */
    cfg fixed[] = {
        cfg2d(1, 16, 40, 1, 20, 20, 1, 1, 0, 1, true),  cfg2d(1, 24, 36, 1, 23, 21, 1, 2, 0, 1, true),
        cfg2d(1, 8, 16, 1, 40, 56, 3, 1, 1, 1, true),   cfg2d(2, 8, 64, 1, 12, 30, 3, 1, 1, 1, false),
        cfg2d(1, 3, 16, 1, 45, 70, 7, 2, 3, 1, true),   cfg2d(1, 16, 16, 1, 33, 57, 3, 2, 1, 1, true),
        cfg2d(1, 12, 12, 12, 30, 40, 3, 1, 1, 1, true), cfg2d(1, 32, 520, 1, 7, 7, 3, 1, 1, 1, true),
        cfg2d(1, 40, 17, 1, 9, 9, 3, 1, 1, 1, true),    cfg2d(1, 20, 24, 1, 50, 161, 3, 1, 1, 1, true),
        cfg2d(1, 24, 36, 1, 29, 47, 1, 2, 0, 1, true),
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        check_fused_conv(&fixed[i], 1 + (int)(i % 2) * 5, true, 1 + (int)(i % 3), seed);
    /* a NaN input through each activation (Relu and Clip first) on the GEMM, direct, stem and depthwise paths (not
     * Winograd's: its transforms spread a NaN over the tile, as any Winograd implementation does) */
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        if (fixed[i].k[0] == 3 && fixed[i].s[0] == 1 && fixed[i].G == 1 && fixed[i].C >= 16)
            continue;
        for (int a = 1; a < 12; a++) {
            g_nan_at = (int64_t)(i * 7919 + (size_t)a * 104729);
            check_fused_conv(&fixed[i], a, a % 2 == 0, 1 + (int)(i % 2), seed);
        }
    }
    g_nan_at = -1;
    /* Winograd F(2x2, 3x3): 3x3 stride 1 with >= 16 channels and >= 100 output tiles; odd
     * sizes, asymmetric pads, groups, batches, every epilogue */
    for (int i = 0; i < 24; i++) {
        cfg c;
        memset(&c, 0, sizeof c);
        c.nsp = 2;
        c.N = 1 + (i % 5 == 0);
        c.G = i % 7 == 3 ? 2 : 1;
        c.C = c.G * rnd(seed, 16, 40);
        c.M = c.G * rnd(seed, 16, 40);
        for (int d = 0; d < 2; d++) {
            c.k[d] = 3, c.s[d] = 1, c.d[d] = 1;
            c.pb[d] = rnd(seed, 0, 2);
            c.pe[d] = rnd(seed, 0, 2);
            c.in[d] = rnd(seed, 20, 75);
        }
        c.bias = i % 4 != 0;
        check_fused_conv(&c, i % 12, i % 3 != 0, 1 + i % 3, seed);
        if (i % 4 == 0)
            check_conv(&c, false, KILN_DT_FLOAT32, 1 + i % 2, seed);
    }
    /* random 1-D / 2-D shapes with wide rows (direct convolution tiles, edges), all activations */
    for (int i = 0; i < 150; i++) {
        cfg c;
        memset(&c, 0, sizeof c);
        c.nsp = i % 7 == 0 ? 1 : 2;
        c.N = rnd(seed, 1, 2);
        int64_t kind = rnd(seed, 0, 5);
        c.G = kind == 0 ? rnd(seed, 1, 6) : kind == 1 ? 2 : 1;
        c.C = c.G * (kind == 0 ? 1 : rnd(seed, 1, 12));
        c.M = c.G * (kind == 0 ? 1 : rnd(seed, 1, 44));
        for (int d = 0; d < c.nsp; d++) {
            bool last = d == c.nsp - 1;
            c.k[d] = rnd(seed, 1, 5);
            c.s[d] = rnd(seed, 1, 3);
            c.d[d] = rnd(seed, 0, 4) == 0 ? 2 : 1;
            c.pb[d] = rnd(seed, 0, c.k[d] - 1);
            c.pe[d] = rnd(seed, 0, c.k[d] - 1);
            int64_t lo = (c.k[d] - 1) * c.d[d] + 1 - c.pb[d] - c.pe[d];
            c.in[d] = (lo < 1 ? 1 : lo) + (last ? rnd(seed, 10, 140) : rnd(seed, 0, 9));
        }
        c.bias = rnd(seed, 0, 2) != 0;
        check_fused_conv(&c, i % 12, rnd(seed, 0, 2) != 0, 1 + i % 3, seed);
    }
}

/* Winograd with the filters prepared at build time, as engines run it: F(4x4, 3x3) up to 2^14
 * channel pairs, F(2x2, 3x3) above (x86/conv_wino.c; hosts of the AVX2 GEMM: F(4x4) up to 2^16). Odd sizes, pads 0..2 (asymmetric), groups,
 * batches, every epilogue. F(4x4) rounds more (transform coefficients up to 8 and 1/24): it gets
 * 5e-4 where every other path is held to 1e-4 (measured worst here below 2e-4; a wrong transform
 * coefficient gives errors of order 1). */
static void test_wino_prepared(unsigned long long *seed)
{
    g_prepared = true;
    for (int i = 0; i < 30; i++) {
        cfg c;
        memset(&c, 0, sizeof c);
        c.nsp = 2;
        c.N = 1 + (i % 6 == 0);
        c.G = i % 7 == 3 ? 2 : 1;
        bool wide = i % 5 == 4;   /* over 2^14 pairs: F(2x2) */
        c.C = c.G * (wide ? rnd(seed, 129, 140) : rnd(seed, 16, 70));
        c.M = c.G * (wide ? rnd(seed, 129, 140) : rnd(seed, 16, 70));
        for (int d = 0; d < 2; d++) {
            c.k[d] = 3, c.s[d] = 1, c.d[d] = 1;
            c.pb[d] = rnd(seed, 0, 2);
            c.pe[d] = rnd(seed, 0, 2);
            c.in[d] = rnd(seed, 3, wide ? 20 : 90);
        }
        c.bias = i % 4 != 0;
        g_fused_tol = wide && kiln__sgemm_kind() == 3 ? 1e-4 : 5e-4;   /* the AVX2 GEMM's host: all F(4x4) */
        check_fused_conv(&c, i % 12, i % 3 != 0, 1 + i % 3, seed);
    }
    g_fused_tol = 1e-4;
    g_prepared = false;
}

/* ConvInteger with uint8 x / int8 w and zero points against exact integer loops. */
static void test_conv_integer(unsigned long long *seed)
{
    for (int it = 0; it < 30; it++) {
        cfg c = random_cfg(seed, false);
        c.bias = false;
        int nsp = c.nsp;
        int64_t xd[5] = {c.N, c.C}, wd[5] = {c.M, c.C / c.G}, yd[5] = {c.N, c.M}, o[3];
        conv_out(&c, o);
        for (int i = 0; i < nsp; i++) {
            xd[2 + i] = c.in[i];
            wd[2 + i] = c.k[i];
            yd[2 + i] = o[i];
        }
        int64_t nx = prod(nsp + 2, xd), nw = prod(nsp + 2, wd), ny = prod(nsp + 2, yd);
        uint8_t *x = malloc((size_t)nx), xz = (uint8_t)rnd(seed, 0, 255);
        int8_t *w = malloc((size_t)nw), *wz = malloc((size_t)c.M);
        double *dx = malloc(sizeof(double) * (size_t)nx), *dw = malloc(sizeof(double) * (size_t)nw);
        double *ref = malloc(sizeof(double) * (size_t)ny);
        bool per_channel = it % 2 == 0;
        for (int64_t m = 0; m < c.M; m++)
            wz[m] = (int8_t)rnd(seed, -128, 127);
        for (int64_t i = 0; i < nx; i++) {
            x[i] = (uint8_t)rnd(seed, 0, 255);
            dx[i] = (double)x[i] - xz;
        }
        for (int64_t i = 0; i < nw; i++) {
            w[i] = (int8_t)rnd(seed, -128, 127);
            dw[i] = (double)w[i] - wz[per_channel ? i / (nw / c.M) : 0];
        }
        naive_conv(&c, dx, dw, NULL, ref);
        int64_t one = 1, md = c.M;
        kiln_tensor X = mk(KILN_DT_UINT8, nsp + 2, xd, x), W = mk(KILN_DT_INT8, nsp + 2, wd, w);
        kiln_tensor XZ = mk(KILN_DT_UINT8, 0, &one, &xz), WZ = mk(KILN_DT_INT8, 1, per_channel ? &md : &one, wz);
        const kiln_tensor *in[4] = {&X, &W, &XZ, &WZ};
        kiln_tensor out[1];
        memset(out, 0, sizeof out);
        tnode t;
        set_conv_attrs(&c, &t, false);
        kiln_status st = run_op(KILN_OP_ConvInteger, "ConvInteger", 10, &t, 4, in, 1, out, 2);
        CHECK_MSG(st == KILN_OK, "ConvInteger failed: %s", kiln_last_error());
        if (st == KILN_OK) {
            CHECK(out[0].dtype == KILN_DT_INT32 && kiln_tensor_numel(&out[0]) == ny);
            const int32_t *y = out[0].data;
            for (int64_t i = 0; i < ny; i++)
                if (y[i] != (int32_t)ref[i]) {
                    CHECK_MSG(0, "ConvInteger element %lld: got %d want %g", (long long)i, y[i], ref[i]);
                    break;
                }
        }
        kiln__tensor_release(&out[0]);
        free(x), free(w), free(wz), free(dx), free(dw), free(ref);
    }
}

/* ---------------------------------------------------------------------------------------
 * pools
 * --------------------------------------------------------------------------------------- */

typedef struct pcfg {
    int nsp;
    int64_t N, C, in[3], k[3], s[3], d[3], pb[3], pe[3];
    bool ceil, count_pad, col_major;
} pcfg;

static void pool_out(const pcfg *c, int64_t *o)
{
    for (int i = 0; i < c->nsp; i++) {
        int64_t span = c->in[i] + c->pb[i] + c->pe[i] - ((c->k[i] - 1) * c->d[i] + 1);
        o[i] = (c->ceil ? (span + c->s[i] - 1) / c->s[i] : span / c->s[i]) + 1;
        if (c->ceil && (o[i] - 1) * c->s[i] >= c->in[i] + c->pb[i])
            o[i]--;
    }
}

/* kind 0: max (+ index), 1: average */
static void naive_pool(const pcfg *c, int kind, const double *x, double *y, int64_t *idx)
{
    int64_t o[3];
    pool_out(c, o);
    int off = 3 - c->nsp;
    int64_t in3[3], o3[3], k3[3], s3[3], d3[3], pb3[3], pe3[3];
    for (int i = 0; i < 3; i++) {
        bool real = i >= off;
        in3[i] = real ? c->in[i - off] : 1;
        o3[i] = real ? o[i - off] : 1;
        k3[i] = real ? c->k[i - off] : 1;
        s3[i] = real ? c->s[i - off] : 1;
        d3[i] = real ? c->d[i - off] : 1;
        pb3[i] = real ? c->pb[i - off] : 0;
        pe3[i] = real ? c->pe[i - off] : 0;
    }
    int64_t isz = prod(3, in3), osz = prod(3, o3);
    for (int64_t pl = 0; pl < c->N * c->C; pl++)
        for (int64_t a = 0; a < o3[0]; a++)
            for (int64_t b = 0; b < o3[1]; b++)
                for (int64_t cc = 0; cc < o3[2]; cc++) {
                    double best = -INFINITY, sum = 0, cnt = 0;
                    int64_t bi = -1, n_inside = 0, n_nan = 0;
                    for (int64_t p = 0; p < k3[0]; p++)
                        for (int64_t q = 0; q < k3[1]; q++)
                            for (int64_t r = 0; r < k3[2]; r++) {
                                int64_t i0 = a * s3[0] - pb3[0] + p * d3[0], i1 = b * s3[1] - pb3[1] + q * d3[1],
                                        i2 = cc * s3[2] - pb3[2] + r * d3[2];
                                bool inside = i0 >= 0 && i0 < in3[0] && i1 >= 0 && i1 < in3[1] && i2 >= 0 &&
                                              i2 < in3[2];
                                bool in_pad = i0 >= -pb3[0] && i0 < in3[0] + pe3[0] && i1 >= -pb3[1] &&
                                              i1 < in3[1] + pe3[1] && i2 >= -pb3[2] && i2 < in3[2] + pe3[2];
                                if (inside) {
                                    int64_t li = (i0 * in3[1] + i1) * in3[2] + i2;
                                    double v = x[pl * isz + li];
                                    if (v > best) {
                                        best = v;
                                        bi = c->col_major ? (i2 * in3[1] + i1) * in3[0] + i0 : li;
                                        if (c->nsp == 2)
                                            bi = c->col_major ? i2 * in3[1] + i1 : li;
                                    }
                                    sum += v;
                                    cnt += 1;
                                    n_inside++;
                                    n_nan += isnan(v);
                                } else if (in_pad && c->count_pad) {
                                    cnt += 1;
                                }
                            }
                    int64_t oi = pl * osz + (a * o3[1] + b) * o3[2] + cc;
                    y[oi] = kind == 0 ? best : sum / cnt;
                    if (kind == 0 && bi < 0 && n_inside > 0 && n_nan == n_inside)
                        y[oi] = NAN; /* every element NaN (NaN and -inf only: -inf) */
                    if (idx)
                        idx[oi] = bi < 0 ? -1 : pl * isz + bi;
                }
}

/* want_idx: MaxPool also returns indices; nan_pct: percentage of NaN inputs (MaxPool only; one
 * in four of them -inf instead). */
static void check_pool_ex(const pcfg *c, int kind, int nthreads, bool want_idx, int nan_pct, unsigned long long *seed)
{
    int nsp = c->nsp;
    int64_t xd[5] = {c->N, c->C}, yd[5] = {c->N, c->C}, o[3];
    pool_out(c, o);
    for (int i = 0; i < nsp; i++) {
        xd[2 + i] = c->in[i];
        yd[2 + i] = o[i];
    }
    int64_t nx = prod(nsp + 2, xd), ny = prod(nsp + 2, yd);
    float *fx = rand_buf(nx, seed);
    double *dx = malloc(sizeof(double) * (size_t)nx), *ref = malloc(sizeof(double) * (size_t)ny);
    int64_t *ridx = malloc(sizeof(int64_t) * (size_t)ny);
    for (int64_t i = 0; i < nx; i++) {
        if (nan_pct && rnd(seed, 0, 99) < nan_pct)
            fx[i] = rnd(seed, 0, 3) ? NAN : -INFINITY;
        dx[i] = fx[i];
    }
    naive_pool(c, kind, dx, ref, ridx);
    tnode t;
    t.na = 0;
    int64_t pads[6];
    for (int i = 0; i < nsp; i++) {
        pads[i] = c->pb[i];
        pads[nsp + i] = c->pe[i];
    }
    add_ints(&t, "kernel_shape", nsp, c->k);
    add_ints(&t, "strides", nsp, c->s);
    add_ints(&t, "pads", 2 * nsp, pads);
    if (kind == 0) {
        add_ints(&t, "dilations", nsp, c->d);
        add_int(&t, "storage_order", c->col_major);
    } else {
        add_int(&t, "count_include_pad", c->count_pad);
    }
    add_int(&t, "ceil_mode", c->ceil);
    kiln_tensor X = mk(KILN_DT_FLOAT32, nsp + 2, xd, fx);
    const kiln_tensor *in[1] = {&X};
    kiln_tensor out[2];
    memset(out, 0, sizeof out);
    kiln_status st = kind == 0 ? run_op(KILN_OP_MaxPool, "MaxPool", 12, &t, 1, in, want_idx ? 2 : 1, out, nthreads)
                               : run_op(KILN_OP_AveragePool, "AveragePool", 11, &t, 1, in, 1, out, nthreads);
    CHECK_MSG(st == KILN_OK, "%s failed: %s", kind ? "AveragePool" : "MaxPool", kiln_last_error());
    if (st == KILN_OK) {
        bool shape_ok = out[0].ndim == nsp + 2 && !memcmp(out[0].dims, yd, sizeof(int64_t) * (size_t)(nsp + 2));
        CHECK_MSG(shape_ok, "pool output shape mismatch (nsp %d)", nsp);
        const float *y = out[0].data;
        for (int64_t i = 0; shape_ok && i < ny; i++) {
            if (!(y[i] == ref[i] || fabs(y[i] - ref[i]) <= 1e-5 * fmax(1.0, fabs(ref[i])) ||
                  (isnan(y[i]) && isnan(ref[i])))) {
                CHECK_MSG(0, "%s element %lld: got %g want %g (nsp %d ceil %d)", kind ? "AveragePool" : "MaxPool",
                          (long long)i, y[i], ref[i], nsp, c->ceil);
                break;
            }
            if (kind == 0 && want_idx && !nan_pct && ((const int64_t *)out[1].data)[i] != ridx[i]) {
                CHECK_MSG(0, "MaxPool index %lld: got %lld want %lld", (long long)i,
                          (long long)((const int64_t *)out[1].data)[i], (long long)ridx[i]);
                break;
            }
        }
    }
    kiln__tensor_release(&out[0]);
    kiln__tensor_release(&out[1]);
    free(fx), free(dx), free(ref), free(ridx);
}

static void check_pool(const pcfg *c, int kind, int nthreads, unsigned long long *seed)
{
    check_pool_ex(c, kind, nthreads, true, 0, seed);
}

static void test_pools(unsigned long long *seed)
{
    /* the float32 1-D / 2-D fast path: wide rows (vectorized interior, strides 1 and 2, masked
     * tails), MaxPool without indices, NaN inputs */
    for (int i = 0; i < 240; i++) {
        pcfg c;
        memset(&c, 0, sizeof c);
        c.nsp = i % 6 == 0 ? 1 : 2;
        c.N = 1;
        c.C = rnd(seed, 1, 3);
        c.ceil = rnd(seed, 0, 3) == 0;
        c.count_pad = rnd(seed, 0, 1) != 0;
        int kind = i % 2;
        for (int d = 0; d < c.nsp; d++) {
            bool last = d == c.nsp - 1;
            c.k[d] = rnd(seed, 1, 5);
            c.s[d] = last ? rnd(seed, 1, 2) + (rnd(seed, 0, 7) == 0) : rnd(seed, 1, 3);
            c.d[d] = kind == 0 && rnd(seed, 0, 4) == 0 ? 2 : 1;
            c.pb[d] = rnd(seed, 0, c.k[d] - 1);
            c.pe[d] = rnd(seed, 0, c.k[d] - 1);
            int64_t lo = (c.k[d] - 1) * c.d[d] + 1 - c.pb[d] - c.pe[d];
            c.in[d] = (lo < 1 ? 1 : lo) + (last ? rnd(seed, 0, 80) : rnd(seed, 0, 6));
        }
        check_pool_ex(&c, kind, 1 + i % 2, false, kind == 0 && i % 3 == 0 ? rnd(seed, 1, 30) : 0, seed);
    }

    /* MaxPool's whole-row path (dilation 1, column stride 1 or 2; ResNet's 3x3/2 pad 1 after the
     * stem first): odd widths around the 16-lane blocks, ceil_mode, NaN / -inf inputs up to
     * all-NaN windows, and rows wider than the path takes (KILN_POOL_MAXROW_W: the other path) */
    for (int i = 0; i < 120; i++) {
        pcfg c;
        memset(&c, 0, sizeof c);
        c.nsp = i % 8 == 0 || i >= 118 ? 1 : 2;
        c.N = 1;
        c.C = rnd(seed, 1, 3);
        c.ceil = rnd(seed, 0, 3) == 0;
        bool resnet = i < 60;
        for (int d = 0; d < c.nsp; d++) {
            bool last = d == c.nsp - 1;
            c.k[d] = resnet ? 3 : rnd(seed, 1, 5);
            c.s[d] = resnet ? 2 : rnd(seed, 1, 2);
            c.d[d] = 1;
            c.pb[d] = resnet ? 1 : rnd(seed, 0, c.k[d] - 1);
            c.pe[d] = resnet ? 1 : rnd(seed, 0, c.k[d] - 1);
            int64_t lo = c.k[d] - c.pb[d] - c.pe[d];
            c.in[d] = (lo < 1 ? 1 : lo) + (last ? rnd(seed, 0, 140) : rnd(seed, 0, 9));
        }
        if (i >= 118)
            c.in[0] = KILN_POOL_MAXROW_W - 8 + rnd(seed, 0, 16);
        check_pool_ex(&c, 0, 1 + i % 2, false, i % 3 == 0 ? rnd(seed, 1, 95) : 0, seed);
    }

    for (int i = 0; i < 300; i++) {
        pcfg c;
        memset(&c, 0, sizeof c);
        c.nsp = i % 5 == 0 ? 1 : i % 5 == 1 ? 3 : 2;
        c.N = rnd(seed, 1, 2);
        c.C = rnd(seed, 1, 4);
        c.ceil = rnd(seed, 0, 2) == 0;
        c.count_pad = rnd(seed, 0, 1) != 0;
        c.col_major = c.nsp == 2 && rnd(seed, 0, 2) == 0;
        int kind = i % 2;
        for (int d = 0; d < c.nsp; d++) {
            c.k[d] = rnd(seed, 1, 4);
            c.s[d] = rnd(seed, 1, 3);
            c.d[d] = kind == 0 && rnd(seed, 0, 3) == 0 ? 2 : 1;
            c.pb[d] = rnd(seed, 0, c.k[d] - 1);
            c.pe[d] = rnd(seed, 0, c.k[d] - 1);
            int64_t lo = (c.k[d] - 1) * c.d[d] + 1 - c.pb[d] - c.pe[d];
            c.in[d] = (lo < 1 ? 1 : lo) + rnd(seed, 0, c.nsp == 3 ? 4 : 9);
        }
        check_pool(&c, kind, 1 + i % 3, seed);
    }
}

/* GlobalAveragePool (float32: the fast kernel where the host has one, else the reference) against
 * a double mean, and bit-identical to the scalar reference (both sum each plane in order): odd
 * channel counts around the 16 planes of a vector, 1-D / 2-D / 3-D planes, batch 1..3, ResNet-50's
 * 2048 x 7 x 7; a NaN input stays in its own plane. */
static void test_global_avgpool(unsigned long long *seed)
{
    for (int i = 0; i < 90; i++) {
        int nsp = i % 6 == 0 ? 1 : i % 6 == 1 ? 3 : 2;
        int64_t xd[5] = {rnd(seed, 1, 3), rnd(seed, 1, 40)};
        for (int d = 0; d < nsp; d++)
            xd[2 + d] = rnd(seed, 1, nsp == 3 ? 5 : 13);
        if (i == 2)
            xd[0] = 1, xd[1] = 2048, xd[2] = xd[3] = 7;
        int64_t yd[5] = {xd[0], xd[1], 1, 1, 1};
        int64_t nx = prod(nsp + 2, xd), planes = xd[0] * xd[1], sz = nx / planes;
        float *fx = rand_buf(nx, seed);
        int64_t nan_at = i % 5 == 4 ? rnd(seed, 0, nx - 1) : -1;
        if (nan_at >= 0)
            fx[nan_at] = NAN;
        kiln_tensor X = mk(KILN_DT_FLOAT32, nsp + 2, xd, fx);
        const kiln_tensor *in[1] = {&X};
        kiln_tensor out[2];
        memset(out, 0, sizeof out);
        tnode t = {.na = 0};
        int nthreads = 1 + i % 3;
        kiln_status st = run_op(KILN_OP_GlobalAveragePool, "GlobalAveragePool", 1, &t, 1, in, 1, out, nthreads);
        bool was = scalar_ref;
        scalar_ref = true;
        kiln_status st2 = run_op(KILN_OP_GlobalAveragePool, "GlobalAveragePool", 1, &t, 1, in, 1, out + 1, nthreads);
        scalar_ref = was;
        CHECK_MSG(st == KILN_OK && st2 == KILN_OK, "GlobalAveragePool failed: %s", kiln_last_error());
        bool shape_ok = st == KILN_OK && out[0].ndim == nsp + 2 &&
                        !memcmp(out[0].dims, yd, sizeof(int64_t) * (size_t)(nsp + 2));
        CHECK_MSG(shape_ok, "GlobalAveragePool output shape mismatch (nsp %d)", nsp);
        for (int64_t p = 0; shape_ok && st2 == KILN_OK && p < planes; p++) {
            double ref = 0;
            for (int64_t k = 0; k < sz; k++)
                ref += fx[p * sz + k];
            ref /= (double)sz;
            float y = ((const float *)out[0].data)[p], yr = ((const float *)out[1].data)[p];
            bool nan_plane = nan_at >= 0 && nan_at / sz == p;
            if (nan_plane ? !isnan(y) : !(fabs(y - ref) <= 1e-5 * fmax(1.0, fabs(ref)))) {
                CHECK_MSG(0, "GlobalAveragePool plane %lld of %lld (size %lld): got %g want %g", (long long)p,
                          (long long)planes, (long long)sz, y, ref);
                break;
            }
            if (memcmp(&y, &yr, sizeof y) != 0) {
                CHECK_MSG(0, "GlobalAveragePool plane %lld: %.9g, the scalar reference %.9g", (long long)p, y, yr);
                break;
            }
        }
        kiln__tensor_release(&out[0]);
        kiln__tensor_release(&out[1]);
        free(fx);
    }
}

/* ---------------------------------------------------------------------------------------
 * the window geometry Conv and the pools share (cpu/ref/window.h), case by case against the
 * ONNX formulas, errors included
 * --------------------------------------------------------------------------------------- */

typedef struct wcase {
    int64_t in, k, s, d, pb, pe;   /* one spatial axis; pads given when pb >= 0 */
    const char *auto_pad;          /* NULL: not set */
    bool ceil;
    kiln_status st;                /* expected status */
    int64_t out, want_pb, want_pe;
} wcase;

static kiln_status win_run(const wcase *c, kiln_window *w)
{
    tnode t = {.na = 0};
    add_ints(&t, "strides", 1, &c->s);
    add_ints(&t, "dilations", 1, &c->d);
    if (c->pb >= 0)
        add_ints(&t, "pads", 2, (int64_t[]){c->pb, c->pe});
    if (c->auto_pad)
        add_str(&t, "auto_pad", c->auto_pad);
    kiln_attr attrs[12];
    memset(attrs, 0, sizeof attrs);
    for (int i = 0; i < t.na; i++) {
        attrs[i].name = (char *)t.a[i].name;
        attrs[i].type = t.a[i].n == -2 ? KILN_ATTR_STRING : KILN_ATTR_INTS;
        attrs[i].s = (char *)t.a[i].s;
        attrs[i].s_len = t.a[i].s ? strlen(t.a[i].s) : 0;
        attrs[i].n = t.a[i].n;
        attrs[i].ints = t.a[i].v;
    }
    kiln_node node = {.name = (char *)"w", .op_type = (char *)"MaxPool", .domain = (char *)"", .n_attr = t.na,
                      .attrs = attrs};
    kiln_kctx ctx = {.node = &node};
    memset(w, 0, sizeof *w);
    w->nsp = 1;
    w->in[0] = c->in;
    w->k[0] = c->k;
    return kiln__win_setup(&ctx, w, c->ceil);
}

static void test_window(void)
{
    const wcase cases[] = {
        {7, 3, 2, 1, 1, 2, NULL, false, KILN_OK, 4, 1, 2},          /* floor((7 + 3 - 3) / 2) + 1 */
        {7, 2, 2, 1, 0, 0, NULL, false, KILN_OK, 3, 0, 0},
        {7, 2, 2, 1, 0, 0, NULL, true, KILN_OK, 4, 0, 0},           /* ceil mode rounds up */
        {6, 2, 2, 1, 0, 1, NULL, true, KILN_OK, 3, 0, 1},           /* a 4th window would start in the end pad */
        {10, 1, 5, 1, -1, 0, "SAME_UPPER", false, KILN_OK, 2, 0, 0}, /* ceil(10 / 5); no padding needed */
        {5, 4, 1, 1, -1, 0, "SAME_UPPER", false, KILN_OK, 5, 1, 2},  /* odd padding at the end */
        {5, 4, 1, 1, -1, 0, "SAME_LOWER", false, KILN_OK, 5, 2, 1},  /* ... at the start */
        {9, 3, 2, 2, -1, 0, "SAME_UPPER", true, KILN_OK, 5, 2, 2},   /* dilated: effective 5; ceil ignored */
        {5, 3, 1, 2, 4, 4, "VALID", false, KILN_OK, 1, 0, 0},        /* VALID ignores pads */
        {4, 3, 1, 2, -1, 0, "VALID", false, KILN_ERR_SHAPE, 0, 0, 0},  /* effective kernel 5 > 4 */
        {2, 5, 1, 1, 1, 1, NULL, false, KILN_ERR_SHAPE, 0, 0, 0},
        {5, 3, 1, 1, -1, 0, "BOGUS", false, KILN_ERR_INVALID_ARG, 0, 0, 0},
        {5, 3, 0, 1, 0, 0, NULL, false, KILN_ERR_INVALID_ARG, 0, 0, 0},      /* stride 0 */
        {5, 3, 1, 1, -1, 0, NULL, false, KILN_OK, 3, 0, 0},                  /* no pads: zero */
        {5, 3, 1, 1, 0, (int64_t)1 << 40, NULL, false, KILN_ERR_INVALID_ARG, 0, 0, 0}, /* pad past 2^31 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const wcase *c = &cases[i];
        kiln_window w;
        kiln_status st = win_run(c, &w);
        kiln_clear_last_error();
        CHECK_MSG(st == c->st, "window case %zu: status %d, expected %d", i, (int)st, (int)c->st);
        if (st == KILN_OK && c->st == KILN_OK)
            CHECK_MSG(w.out[0] == c->out && w.pb[0] == c->want_pb && w.pe[0] == c->want_pe && w.out_sz == c->out &&
                          w.in_sz == c->in && w.k_sz == c->k,
                      "window case %zu: out %lld pads %lld %lld, expected %lld pads %lld %lld", i,
                      (long long)w.out[0], (long long)w.pb[0], (long long)w.pe[0], (long long)c->out,
                      (long long)c->want_pb, (long long)c->want_pe);
    }
    /* sizes past 2^48 elements are refused, not overflowed */
    kiln_window w = {.nsp = 3, .in = {LIM, LIM, LIM}, .out = {1, 1, 1}, .k = {1, 1, 1}};
    kiln_node node = {.name = (char *)"w", .op_type = (char *)"MaxPool", .domain = (char *)""};
    CHECK(kiln__win_sizes(&(kiln_kctx){.node = &node}, &w) == KILN_ERR_LIMIT);
    kiln_clear_last_error();
}

/* ---------------------------------------------------------------------------------------
 * timing (information only)
 * --------------------------------------------------------------------------------------- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Times one float32 Conv; returns the best of `reps` in seconds. */
static double time_conv(const cfg *c, int nthreads, int reps, unsigned long long *seed)
{
    int nsp = c->nsp;
    int64_t xd[5] = {c->N, c->C}, wd[5] = {c->M, c->C / c->G}, bd[1] = {c->M};
    for (int i = 0; i < nsp; i++) {
        xd[2 + i] = c->in[i];
        wd[2 + i] = c->k[i];
    }
    float *x = rand_buf(prod(nsp + 2, xd), seed), *w = rand_buf(prod(nsp + 2, wd), seed), *b = rand_buf(c->M, seed);
    kiln_tensor X = mk(KILN_DT_FLOAT32, nsp + 2, xd, x), W = mk(KILN_DT_FLOAT32, nsp + 2, wd, w),
                B = mk(KILN_DT_FLOAT32, 1, bd, b);
    const kiln_tensor *in[3] = {&X, &W, c->bias ? &B : NULL};
    tnode t;
    set_conv_attrs(c, &t, false);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        kiln_tensor out[1];
        memset(out, 0, sizeof out);
        double t0 = now();
        kiln_status st = run_op(KILN_OP_Conv, "Conv", 11, &t, 3, in, 1, out, nthreads);
        double dt = now() - t0;
        CHECK(st == KILN_OK);
        if (dt < best)
            best = dt;
        kiln__tensor_release(&out[0]);
    }
    free(x), free(w), free(b);
    return best;
}

static double conv_flops(const cfg *c)
{
    int64_t o[3];
    conv_out(c, o);
    return 2.0 * (double)c->N * (double)c->M * (double)prod(c->nsp, o) * (double)(c->C / c->G) *
           (double)prod(c->nsp, c->k);
}

static void bench(unsigned long long *seed)
{
    int nt = 2;
    cfg c = cfg2d(1, 64, 64, 1, 56, 56, 3, 1, 1, 1, true);
    double t = time_conv(&c, nt, 10, seed);
    printf("timing: Conv 3x3 64->64 56x56, %d threads: %.3f ms (%.1f GFLOP/s)\n", nt, t * 1e3,
           conv_flops(&c) / t * 1e-9);
    cfg dw = cfg2d(1, 96, 96, 96, 112, 112, 3, 1, 1, 1, true);
    t = time_conv(&dw, nt, 10, seed);
    printf("timing: depthwise 3x3 s1 96ch 112x112, %d threads: %.3f ms (%.1f GFLOP/s)\n", nt, t * 1e3,
           conv_flops(&dw) / t * 1e-9);
    dw = cfg2d(1, 96, 96, 96, 112, 112, 3, 2, 1, 1, true);
    t = time_conv(&dw, nt, 10, seed);
    printf("timing: depthwise 3x3 s2 96ch 112x112, %d threads: %.3f ms (%.1f GFLOP/s)\n", nt, t * 1e3,
           conv_flops(&dw) / t * 1e-9);
    dw = cfg2d(1, 240, 240, 240, 28, 28, 5, 1, 2, 1, true);
    t = time_conv(&dw, nt, 10, seed);
    printf("timing: depthwise 5x5 s1 240ch 28x28, %d threads: %.3f ms (%.1f GFLOP/s)\n", nt, t * 1e3,
           conv_flops(&dw) / t * 1e-9);

    /* the 53 convolutions of ResNet-50 (torchvision v1.5, 224x224, batch 1) */
    cfg net[64];
    int n = 0;
    net[n++] = cfg2d(1, 3, 64, 1, 224, 224, 7, 2, 3, 1, true);
    static const int blocks[4] = {3, 4, 6, 3};
    int64_t cin = 64, size = 56;
    for (int st = 0; st < 4; st++) {
        int64_t mid = 64 << st, cout = mid * 4;
        for (int bl = 0; bl < blocks[st]; bl++) {
            int64_t s = (bl == 0 && st > 0) ? 2 : 1, osz = size / s;
            net[n++] = cfg2d(1, cin, mid, 1, size, size, 1, 1, 0, 1, true);
            net[n++] = cfg2d(1, mid, mid, 1, size, size, 3, s, 1, 1, true);
            net[n++] = cfg2d(1, mid, cout, 1, osz, osz, 1, 1, 0, 1, true);
            if (bl == 0)
                net[n++] = cfg2d(1, cin, cout, 1, size, size, 1, s, 0, 1, true);
            cin = cout;
            size = osz;
        }
    }
    double total = 0, flops = 0;
    for (int i = 0; i < n; i++) {
        total += time_conv(&net[i], nt, 3, seed);
        flops += conv_flops(&net[i]);
    }
    printf("timing: ResNet-50 conv stack (%d convs, %.2f GFLOP), %d threads: %.1f ms (%.1f GFLOP/s)\n", n,
           flops * 1e-9, nt, total * 1e3, flops / total * 1e-9);
}

int main(int argc, char **argv)
{
    unsigned long long seed = 0x9E3779B97F4A7C15ull;
    test_window();
    test_conv_configs(&seed);
    test_fused_conv(&seed);
    test_wino_prepared(&seed);
    /* the configurations again with the weights prepared as an engine stores them (Winograd filters,
     * on the AVX2 GEMM's hosts as its packed A, for every eligible tile count) */
    g_prepared = true;
    g_conv_tol = 5e-4;   /* prepared 3x3 layers take Winograd F(4x4) (test_wino_prepared) */
    test_conv_configs(&seed);
    g_conv_tol = 1e-4;
    g_prepared = false;
    test_conv_integer(&seed);
    test_pools(&seed);
    test_global_avgpool(&seed);
    /* every fast kernel the host runs (cpu/x86) was tested above; now the scalar references */
    static const kiln_op fast_ops[] = {KILN_OP_Conv, KILN_OP_FusedConv, KILN_OP_MaxPool, KILN_OP_AveragePool,
                                       KILN_OP_GlobalAveragePool};
    for (size_t k = 0; k < sizeof fast_ops / sizeof fast_ops[0]; k++) {
        const kiln_kernel_isa_reg *f = kiln__cpu_fast_kernel(fast_ops[k]);
        printf("%s: %s, and the scalar reference\n", kiln__op_name(fast_ops[k]), f ? f->name : "reference only");
        CHECK(!f || f->fn != kiln__cpu_ref_kernel(fast_ops[k]));
    }
    /* the other fast convolution kernels the host runs (overridden by the fastest) */
    for (g_fast_at = 0; kiln__cpu_fast_kernel_at(KILN_OP_Conv, g_fast_at); g_fast_at++) {
        const kiln_kernel_isa_reg *f = kiln__cpu_fast_kernel_at(KILN_OP_Conv, g_fast_at);
        if (f == kiln__cpu_fast_kernel(KILN_OP_Conv))
            continue;
        printf("also: %s, %s\n", f->name, kiln__cpu_fast_kernel_at(KILN_OP_FusedConv, g_fast_at)->name);
        test_conv_configs(&seed);
        test_fused_conv(&seed);
    }
    /* the other fast pool kernels the host runs (AVX2 under AVX-512) */
    for (g_fast_at = 0; kiln__cpu_fast_kernel_at(KILN_OP_MaxPool, g_fast_at); g_fast_at++) {
        const kiln_kernel_isa_reg *f = kiln__cpu_fast_kernel_at(KILN_OP_MaxPool, g_fast_at);
        if (f == kiln__cpu_fast_kernel(KILN_OP_MaxPool))
            continue;
        printf("also: %s, %s\n", f->name, kiln__cpu_fast_kernel_at(KILN_OP_AveragePool, g_fast_at)->name);
        test_pools(&seed);
    }
    g_fast_at = -1;
    scalar_ref = true;
    test_conv_configs(&seed);
    test_fused_conv(&seed);
    test_wino_prepared(&seed);   /* the reference ignores the Winograd blob (it has the weights) */
    test_pools(&seed);
    scalar_ref = false;
    printf("%d conv cases\n", n_conv_cases);
    if (!(argc > 1 && !strcmp(argv[1], "--no-bench")))
        bench(&seed);
    return TEST_SUMMARY();
}
