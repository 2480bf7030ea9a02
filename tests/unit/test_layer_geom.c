/* The layer geometry device modules take from the library (backend/layer_geom.h: kiln__resize_plan,
 * kiln__convt_geom), checked without a GPU: for Resize / Upsample in several modes and ConvTranspose with
 * groups, output padding, dilations, asymmetric / SAME pads and output_shape, a host emulation of the CUDA
 * kernels' loops over the plan (kernels_upsample.cu: separable taps, innermost axis first; the direct
 * ConvTranspose gather) must reproduce the CPU kernel's output on random inputs, and the plan's output dims
 * must be the CPU's. Bad attributes are the CPU's errors. */
#include "backend/layer_geom.h"
#include "ir/shape.h"
#include "kiln/kiln.h"
#include "runtime/model.h"
#include "test.h"
#include "test_graph.h"
#include <string.h>

#define D4(a, b, c, d) ((const int64_t[]){a, b, c, d})

static kiln_tensor floats(int n, const float *v)
{
    int64_t d = n;
    kiln_tensor t = test_tensor(KILN_DT_FLOAT32, 1, &d);
    if (n)
        memcpy(t.data, v, sizeof(float) * (size_t)n);
    return t;
}

static kiln_tensor int64s(int n, const int64_t *v)
{
    int64_t d = n;
    kiln_tensor t = test_tensor(KILN_DT_INT64, 1, &d);
    memcpy(t.data, v, sizeof(int64_t) * (size_t)n);
    return t;
}

/* One-node model: op(x, consts...) -> y; returns the node */
static kiln_model_t one_node(kiln_op op, int opset, int nd, const int64_t *xd, int nc, kiln_tensor *consts,
                             kiln_node **node)
{
    kiln_graph *g = test_graph_onnx("geom");
    g->opsets[0].version = opset;
    int in[5] = {test_graph_input(g, "x", nd, xd)};
    for (int i = 0; i < nc; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", i);
        in[1 + i] = test_graph_const(g, name, consts[i]);
    }
    int y = test_graph_value(g, "y");
    int n = test_graph_node(g, op, "node", 1 + nc, in, y);
    g->nodes[n].opset = opset;
    test_graph_output(g, y);
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    *node = &g->nodes[n];
    return m;
}

static kiln_tensor *run_cpu(kiln_model_t m, const kiln_tensor *x)
{
    const char *name = "x";
    kiln_tensor *out = NULL;
    int n = 0;
    CHECK_MSG(kiln_model_run(m, 1, &name, x, NULL, &n, &out) == KILN_OK, "%s", kiln_last_error());
    return n == 1 ? out : NULL;
}

/* kernels_upsample.cu's k_resize over the plan, on the host (NCHW, rank padded in front to 4) */
static void emulate_resize(const kiln_resize_plan *p, const kiln_tensor *x, float *y)
{
    int off = 4 - p->ndim;
    int64_t in[4] = {1, 1, 1, 1}, out[4] = {1, 1, 1, 1}, xs[4], nt[4];
    const int64_t *idx[4];
    const float *w[4];
    static const int64_t zero = 0;
    static const float one = 1.0f;
    for (int d = 0; d < 4; d++) {
        const kiln_resize_axis *a = d >= off ? &p->ax[d - off] : NULL;
        in[d] = a ? a->in : 1;
        out[d] = a ? a->out : 1;
        nt[d] = a ? a->ntaps : 1;
        idx[d] = a ? a->idx : &zero;
        w[d] = a ? a->w : &one;
    }
    xs[3] = 1, xs[2] = in[3], xs[1] = in[2] * in[3], xs[0] = in[1] * in[2] * in[3];
    const float *xf = x->data;
    int64_t i = 0;
    for (int64_t o0 = 0; o0 < out[0]; o0++)
        for (int64_t o1 = 0; o1 < out[1]; o1++)
            for (int64_t o2 = 0; o2 < out[2]; o2++)
                for (int64_t o3 = 0; o3 < out[3]; o3++, i++) {
                    int64_t o[4] = {o0, o1, o2, o3};
                    bool outside = false;
                    for (int d = off; d < 4; d++)
                        outside |= p->ax[d - off].any_outside && p->ax[d - off].outside[o[d]];
                    if (outside) {
                        y[i] = p->extrapolation;
                        continue;
                    }
                    float acc0 = 0;
                    for (int64_t t0 = 0; t0 < nt[0]; t0++) {
                        float acc1 = 0;
                        for (int64_t t1 = 0; t1 < nt[1]; t1++) {
                            float acc2 = 0;
                            for (int64_t t2 = 0; t2 < nt[2]; t2++) {
                                float acc3 = 0;
                                for (int64_t t3 = 0; t3 < nt[3]; t3++)
                                    acc3 += w[3][o3 * nt[3] + t3] *
                                            xf[idx[0][o0 * nt[0] + t0] * xs[0] + idx[1][o1 * nt[1] + t1] * xs[1] +
                                               idx[2][o2 * nt[2] + t2] * xs[2] + idx[3][o3 * nt[3] + t3]];
                                acc2 += w[2][o2 * nt[2] + t2] * acc3;
                            }
                            acc1 += w[1][o1 * nt[1] + t1] * acc2;
                        }
                        acc0 += w[0][o0 * nt[0] + t0] * acc1;
                    }
                    y[i] = acc0;
                }
}

typedef struct rz_case {
    const char *mode, *ctm, *nearest;
    int nd;
    int64_t x[4];
    float scales[4];
    int64_t sizes[4];   /* sizes[0] == 0: scales */
    bool roi;
    double tol;
} rz_case;

static void resize_case(const rz_case *c, unsigned long long *seed)
{
    static const float roi[8] = {0, 0, 0.2f, -0.3f, 1, 1, 0.9f, 1.4f};
    kiln_tensor consts[3];
    int nc;
    consts[0] = floats(c->roi ? 2 * c->nd : 0, roi);
    if (c->sizes[0]) {
        consts[1] = floats(0, NULL);
        consts[2] = int64s(c->nd, c->sizes);
        nc = 3;
    } else {
        consts[1] = floats(c->nd, c->scales);
        nc = 2;
    }
    kiln_node *n;
    kiln_model_t m = one_node(KILN_OP_Resize, 13, c->nd, c->x, nc, consts, &n);
    CHECK(kiln__node_set_attr_s(n, "mode", c->mode) == KILN_OK);
    if (c->ctm)
        CHECK(kiln__node_set_attr_s(n, "coordinate_transformation_mode", c->ctm) == KILN_OK);
    if (c->nearest)
        CHECK(kiln__node_set_attr_s(n, "nearest_mode", c->nearest) == KILN_OK);
    CHECK(kiln__node_set_attr_f(n, "extrapolation_value", 7.5f) == KILN_OK);
    kiln_tensor x = test_tensor_f32(c->nd, c->x, 1.0f, seed);
    kiln_tensor *ref = run_cpu(m, &x);
    const kiln_tensor *in[4] = {&x, m->g->values[n->in[1]].init, m->g->values[n->in[2]].init,
                                nc > 2 ? m->g->values[n->in[3]].init : NULL};
    kiln_resize_plan p;
    kiln_status st = kiln__resize_plan(n, 1 + nc, in, &p);
    CHECK_MSG(st == KILN_OK, "%s %s: %s", c->mode, c->ctm ? c->ctm : "", kiln_last_error());
    if (st == KILN_OK && ref) {
        bool same_dims = p.ndim == ref->ndim;
        for (int d = 0; d < p.ndim && same_dims; d++)
            same_dims = p.ax[d].out == ref->dims[d];
        CHECK_MSG(same_dims, "%s %s: plan dims differ from the CPU's", c->mode, c->ctm ? c->ctm : "");
        CHECK(p.nearest == !strcmp(c->mode, "nearest"));
        if (same_dims) {
            int64_t n_out = kiln_tensor_numel(ref);
            float *y = kiln__malloc(sizeof(float) * (size_t)(n_out ? n_out : 1));
            emulate_resize(&p, &x, y);
            double worst = test_worst_f32(y, ref->data, n_out, 1e-6, c->tol);
            CHECK_MSG(c->tol ? worst <= 1.0 : !memcmp(y, ref->data, sizeof(float) * (size_t)n_out),
                      "%s %s: emulated kernel differs from the CPU (%g)", c->mode, c->ctm ? c->ctm : "", worst);
            kiln__free(y);
        }
    }
    kiln__resize_plan_free(&p);
    if (ref)
        kiln_tensors_free(ref, 1);
    kiln__tensor_release(&x);
    kiln_model_free(m);
}

/* kernels_upsample.cu's k_convt on the host, NCHW (rank 3 as height 1) */
static void emulate_convt(const kiln_convt_geom *g, const kiln_tensor *x, const kiln_tensor *w, const float *bias,
                          float *y)
{
    bool d1 = x->ndim == 3;
    int64_t N = x->dims[0], cin = x->dims[1], H = d1 ? 1 : x->dims[2], W = x->dims[x->ndim - 1];
    int64_t cout = g->ydims[1], OH = d1 ? 1 : g->ydims[2], OW = g->ydims[x->ndim - 1];
    int64_t kh = d1 ? 1 : w->dims[2], kw = w->dims[w->ndim - 1], sh = d1 ? 1 : g->s[0], sw = g->s[g->nsp - 1];
    int64_t dh = d1 ? 1 : g->d[0], dw = g->d[g->nsp - 1], ph = d1 ? 0 : g->pb[0], pw = g->pb[g->nsp - 1];
    int64_t coutg = cout / g->group, cing = cin / g->group;
    const float *xf = x->data, *wf = w->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t co = 0; co < cout; co++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    int64_t gi = co / coutg, col = co % coutg;
                    float acc = bias ? bias[co] : 0.0f;
                    for (int64_t ky = 0; ky < kh; ky++) {
                        int64_t ty = oy + ph - ky * dh;
                        if (ty < 0 || ty % sh || ty / sh >= H)
                            continue;
                        for (int64_t kx = 0; kx < kw; kx++) {
                            int64_t tx = ox + pw - kx * dw;
                            if (tx < 0 || tx % sw || tx / sw >= W)
                                continue;
                            for (int64_t ci = gi * cing; ci < (gi + 1) * cing; ci++)
                                acc += xf[((n * cin + ci) * H + ty / sh) * W + tx / sw] *
                                       wf[((ci * coutg + col) * kh + ky) * kw + kx];
                        }
                    }
                    y[((n * cout + co) * OH + oy) * OW + ox] = acc;
                }
}

typedef struct convt_case {
    int nd;
    int64_t x[4], w[4], group;
    bool bias;
    int64_t strides[2], pads[4], opad[2], dil[2], oshape[2];   /* 0 in [0]: absent */
    const char *auto_pad;
} convt_case;

static void convt_case_run(const convt_case *c, unsigned long long *seed)
{
    int nsp = c->nd - 2;
    kiln_tensor consts[2] = {test_tensor_f32(c->nd, c->w, 1.0f, seed)};
    int64_t cout = c->w[1] * c->group;
    if (c->bias)
        consts[1] = test_tensor_f32(1, &cout, 1.0f, seed);
    kiln_node *n;
    kiln_model_t m = one_node(KILN_OP_ConvTranspose, 11, c->nd, c->x, c->bias ? 2 : 1, consts, &n);
    CHECK(kiln__node_set_attr_i(n, "group", c->group) == KILN_OK);
    if (c->strides[0])
        CHECK(kiln__node_set_attr_ints(n, "strides", nsp, c->strides) == KILN_OK);
    if (c->pads[0] || c->pads[1] || c->pads[2] || c->pads[3])
        CHECK(kiln__node_set_attr_ints(n, "pads", 2 * nsp, c->pads) == KILN_OK);
    if (c->opad[0])
        CHECK(kiln__node_set_attr_ints(n, "output_padding", nsp, c->opad) == KILN_OK);
    if (c->dil[0])
        CHECK(kiln__node_set_attr_ints(n, "dilations", nsp, c->dil) == KILN_OK);
    if (c->oshape[0])
        CHECK(kiln__node_set_attr_ints(n, "output_shape", nsp, c->oshape) == KILN_OK);
    if (c->auto_pad)
        CHECK(kiln__node_set_attr_s(n, "auto_pad", c->auto_pad) == KILN_OK);
    kiln_tensor x = test_tensor_f32(c->nd, c->x, 1.0f, seed);
    kiln_tensor *ref = run_cpu(m, &x);
    const kiln_tensor *w = m->g->values[n->in[1]].init, *b = c->bias ? m->g->values[n->in[2]].init : NULL;
    kiln_convt_geom g;
    kiln_status st = kiln__convt_geom(n, c->nd, c->x, c->w, &g);
    CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
    if (st == KILN_OK && ref) {
        CHECK_MSG(!memcmp(g.ydims, ref->dims, sizeof(int64_t) * (size_t)c->nd), "geometry dims differ from the CPU's");
        int64_t n_out = kiln_tensor_numel(ref);
        float *y = kiln__malloc(sizeof(float) * (size_t)n_out);
        emulate_convt(&g, &x, w, b ? b->data : NULL, y);
        double worst = test_worst_f32(y, ref->data, n_out, 1e-5, 1e-4);
        CHECK_MSG(worst <= 1.0, "x %lldx%lld group %lld: emulated kernel differs from the CPU (%g)",
                  (long long)c->x[1], (long long)c->x[2], (long long)c->group, worst);
        kiln__free(y);
    }
    if (ref)
        kiln_tensors_free(ref, 1);
    kiln__tensor_release(&x);
    kiln_model_free(m);
}

/* ConvTranspose 3x3 over X [1, 2, 4, 5], strides (2, 1), dilations (1, 2), output_padding opad: the geometry
 * the CUDA module takes, shape inference and a CPU run must all give status want (naming output_padding when an
 * error) */
static void convt_opad_case(const int64_t *opad, kiln_status want, unsigned long long *seed)
{
    kiln_tensor consts[1] = {test_tensor_f32(4, D4(2, 3, 3, 3), 1.0f, seed)};
    kiln_node *n;
    kiln_model_t m = one_node(KILN_OP_ConvTranspose, 11, 4, D4(1, 2, 4, 5), 1, consts, &n);
    CHECK(kiln__node_set_attr_ints(n, "strides", 2, (const int64_t[]){2, 1}) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(n, "dilations", 2, (const int64_t[]){1, 2}) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(n, "output_padding", 2, opad) == KILN_OK);
    const char *what = want == KILN_OK ? "" : "output_padding";
    kiln_convt_geom g;
    kiln_status st = kiln__convt_geom(n, 4, D4(1, 2, 4, 5), D4(2, 3, 3, 3), &g);
    CHECK_MSG(st == want && (!want || strstr(kiln_last_error(), what)), "output_padding %lld,%lld: geometry %d %s",
              (long long)opad[0], (long long)opad[1], (int)st, kiln_last_error());
    kiln_symtab *tab = kiln__symtab_new();
    kiln_vshape *inf = NULL;
    st = kiln__infer_shapes(m->g, tab, NULL, &inf);
    CHECK_MSG(st == want && (!want || strstr(kiln_last_error(), what)), "output_padding %lld,%lld: inference %d %s",
              (long long)opad[0], (long long)opad[1], (int)st, kiln_last_error());
    kiln__free(inf);
    kiln__symtab_free(tab);
    kiln_tensor x = test_tensor_f32(4, D4(1, 2, 4, 5), 1.0f, seed);
    const char *name = "x";
    kiln_tensor *out = NULL;
    int nout = 0;
    st = kiln_model_run(m, 1, &name, &x, NULL, &nout, &out);
    CHECK_MSG(st == want && (!want || strstr(kiln_last_error(), what)), "output_padding %lld,%lld: run %d %s",
              (long long)opad[0], (long long)opad[1], (int)st, kiln_last_error());
    if (st == KILN_OK && nout == 1)
        CHECK(out[0].dims[2] == 2 * 3 + opad[0] + 3 && out[0].dims[3] == 4 + opad[1] + 5);
    if (out)
        kiln_tensors_free(out, nout);
    kiln__tensor_release(&x);
    kiln_model_free(m);
}

int main(void)
{
    unsigned long long seed = 0x9e0;
    static const rz_case rz[] = {
        {"nearest", "asymmetric", "floor", 4, {2, 5, 7, 9}, {1, 1, 2, 2}, {0}, false, 0},
        {"nearest", NULL, NULL, 4, {1, 3, 10, 13}, {0}, {1, 3, 17, 8}, false, 0},
        {"nearest", "tf_half_pixel_for_nn", "round_prefer_ceil", 3, {3, 6, 10}, {1, 1, 4}, {0}, false, 0},
        {"linear", NULL, NULL, 4, {2, 3, 11, 14}, {1, 1, 1.7f, 0.6f}, {0}, false, 1e-5},
        {"linear", "align_corners", NULL, 4, {2, 3, 5, 8}, {0}, {2, 3, 9, 21}, false, 1e-5},
        {"linear", "pytorch_half_pixel", NULL, 3, {3, 6, 10}, {1, 1.5f, 2}, {0}, false, 1e-5},
        {"cubic", "pytorch_half_pixel", NULL, 4, {1, 2, 7, 9}, {1, 1, 2.5f, 1.5f}, {0}, false, 1e-5},
        {"linear", "tf_crop_and_resize", NULL, 4, {1, 3, 9, 8}, {0}, {1, 3, 7, 11}, true, 1e-5},
        {"linear", NULL, NULL, 4, {2, 6, 5, 4}, {1, 0.5f, 2, 1}, {0}, false, 1e-5},   /* the channel axis too */
    };
    for (size_t i = 0; i < sizeof rz / sizeof *rz; i++)
        resize_case(&rz[i], &seed);
    static const convt_case ct[] = {
        {4, {2, 24, 9, 11}, {24, 24, 2, 2}, 1, true, {2, 2}, {0}, {0}, {0}, {0}, NULL},
        {4, {2, 6, 5, 7}, {6, 4, 3, 3}, 2, true, {2, 2}, {1, 1, 1, 1}, {1, 1}, {0}, {0}, NULL},
        {4, {1, 5, 6, 4}, {5, 3, 3, 2}, 1, false, {1, 2}, {0, 1, 2, 0}, {0}, {2, 2}, {0}, NULL},
        {4, {1, 4, 5, 5}, {4, 2, 3, 3}, 1, true, {2, 2}, {0}, {0}, {0}, {0}, "SAME_UPPER"},
        {4, {1, 4, 5, 5}, {4, 2, 3, 3}, 1, false, {2, 2}, {0}, {0}, {0}, {0}, "SAME_LOWER"},
        {4, {1, 2, 4, 4}, {2, 3, 3, 3}, 1, false, {2, 2}, {0}, {0}, {0}, {9, 10}, NULL},
        {3, {2, 3, 11}, {3, 2, 3}, 3, true, {2}, {0}, {0}, {0}, {0}, NULL},
    };
    for (size_t i = 0; i < sizeof ct / sizeof *ct; i++)
        convt_case_run(&ct[i], &seed);
    /* the CPU's errors: a bad mode, a negative size, W not matching X's channels */
    {
        kiln_tensor consts[2] = {floats(0, NULL), floats(4, (const float[]){1, 1, 2, 2})};
        kiln_node *n;
        kiln_model_t m = one_node(KILN_OP_Resize, 13, 4, D4(1, 2, 3, 4), 2, consts, &n);
        CHECK(kiln__node_set_attr_s(n, "mode", "area") == KILN_OK);
        kiln_tensor x = test_tensor_f32(4, D4(1, 2, 3, 4), 1.0f, &seed);
        const kiln_tensor *in[3] = {&x, m->g->values[n->in[1]].init, m->g->values[n->in[2]].init};
        kiln_resize_plan p;
        CHECK(kiln__resize_plan(n, 3, in, &p) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "mode"));
        kiln__resize_plan_free(&p);
        kiln_convt_geom g;
        CHECK(kiln__convt_geom(n, 4, D4(1, 3, 5, 5), D4(4, 2, 3, 3), &g) != KILN_OK);
        CHECK(kiln__convt_geom(n, 2, D4(1, 4, 5, 5), D4(4, 2, 3, 3), &g) == KILN_ERR_SHAPE);
        kiln__tensor_release(&x);
        kiln_model_free(m);
    }
    /* the spec's constraint output_padding < stride or dilation (ONNX Runtime's error): 1 on both axes is allowed
     * (the second only below its dilation), 2 on either is not */
    convt_opad_case((const int64_t[]){1, 1}, KILN_OK, &seed);
    convt_opad_case((const int64_t[]){2, 0}, KILN_ERR_INVALID_ARG, &seed);
    convt_opad_case((const int64_t[]){0, 2}, KILN_ERR_INVALID_ARG, &seed);
    return TEST_SUMMARY();
}
