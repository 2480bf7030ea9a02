/* Reference kernels: RNN, GRU, LSTM (ONNX opsets 7..17, layout attribute from opset 14).
 *
 * The cell loop is written once and instantiated for float and double: this file includes
 * itself with RNN_T defined (see the end of the first part). */
#ifndef RNN_T

#include "../../kernel.h"
#include <ctype.h>
#include <math.h>

enum { A_SIGMOID, A_TANH, A_RELU, A_AFFINE, A_LEAKYRELU, A_THRELU, A_SCALEDTANH, A_HARDSIGMOID, A_ELU, A_SOFTSIGN,
       A_SOFTPLUS };

typedef struct rnn_act {
    int kind;
    double alpha, beta;
} rnn_act;

static double act_apply(const rnn_act *a, double x)
{
    switch (a->kind) {
    case A_SIGMOID: return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case A_TANH: return tanh(x);
    case A_RELU: return x > 0 ? x : 0;
    case A_AFFINE: return a->alpha * x + a->beta;
    case A_LEAKYRELU: return x >= 0 ? x : a->alpha * x;
    case A_THRELU: return x > a->alpha ? x : 0;
    case A_SCALEDTANH: return a->alpha * tanh(a->beta * x);
    case A_HARDSIGMOID: {
        double v = a->alpha * x + a->beta;
        return v < 0 ? 0 : (v > 1 ? 1 : v);
    }
    case A_ELU: return x >= 0 ? x : a->alpha * (exp(x) - 1.0);
    case A_SOFTSIGN: return x / (1.0 + fabs(x));
    case A_SOFTPLUS: return x > 30 ? x : log1p(exp(x));
    default: return x;
    }
}

typedef enum { CELL_RNN, CELL_GRU, CELL_LSTM } cell_kind;

typedef struct rnn_cfg {
    cell_kind kind;
    int G;                  /* gates: 1, 3, 4 */
    int64_t seq, batch, input, H;
    int ndir;
    bool reverse[2];
    int layout;
    bool has_clip;
    double clip;
    bool lbr, input_forget;
    rnn_act act[2][3];
    const int64_t *lens;    /* [batch] */
    const void *X, *W, *R, *B, *h0, *c0, *P;   /* B, h0, c0, P may be NULL */
    void *Y, *Yh, *Yc;      /* NULL if not wanted */
    kiln_pool *pool;
    int nthreads;
} rnn_cfg;

static double clipv(const rnn_cfg *c, double v)
{
    if (!c->has_clip)
        return v;
    return v < -c->clip ? -c->clip : (v > c->clip ? c->clip : v);
}

/* C[M,N] = A[M,K] * B[N,K]^T (row-major, leading dims) for double */
static void gemm_nt_f64(kiln_pool *pool, int nthreads, int64_t M, int64_t N, int64_t K, const double *A, int64_t lda, const double *B,
                        int64_t ldb, double *C, int64_t ldc)
{
    (void)nthreads;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const double *a = A + i * lda, *b = B + j * ldb;
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += a[k] * b[k];
            C[i * ldc + j] = s;
        }
}

static void gemm_nt_f32(kiln_pool *pool, int nthreads, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        for (int64_t i = 0; i < M; i++)
            memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
        return;
    }
    kiln__sgemm(pool, nthreads, false, true, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
}

#define RNN_T float
#define RNN_SFX f32
#include "k_rnn.c"
#undef RNN_T
#undef RNN_SFX
#define RNN_T double
#define RNN_SFX f64
#include "k_rnn.c"
#undef RNN_T
#undef RNN_SFX

static bool parse_act(const char *s, rnn_act *a)
{
    char nm[32];
    size_t n = 0;
    for (; s[n] && n + 1 < sizeof nm; n++)
        nm[n] = (char)tolower((unsigned char)s[n]);
    nm[n] = 0;
    static const struct { const char *name; int kind; int na, nb; double da, db; } tab[] = {
        {"sigmoid", A_SIGMOID, 0, 0, 0, 0},         {"tanh", A_TANH, 0, 0, 0, 0},
        {"relu", A_RELU, 0, 0, 0, 0},               {"affine", A_AFFINE, 1, 1, 1.0, 0.0},
        {"leakyrelu", A_LEAKYRELU, 1, 0, 0.01, 0},  {"thresholdedrelu", A_THRELU, 1, 0, 1.0, 0},
        {"scaledtanh", A_SCALEDTANH, 1, 1, 1.0, 1.0}, {"hardsigmoid", A_HARDSIGMOID, 1, 1, 0.2, 0.5},
        {"elu", A_ELU, 1, 0, 1.0, 0},               {"softsign", A_SOFTSIGN, 0, 0, 0, 0},
        {"softplus", A_SOFTPLUS, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(nm, tab[i].name)) {
            a->kind = tab[i].kind;
            a->alpha = tab[i].na ? tab[i].da : 0;
            a->beta = tab[i].nb ? tab[i].db : 0;
            return true;
        }
    return false;
}

static void act_arg_usage(int kind, int *na, int *nb)
{
    *na = *nb = 0;
    switch (kind) {
    case A_AFFINE: case A_SCALEDTANH: case A_HARDSIGMOID: *na = *nb = 1; break;
    case A_LEAKYRELU: case A_THRELU: case A_ELU: *na = 1; break;
    default: break;
    }
}

static bool float_dtype_ok(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64;
}

/* direction, layout and the shapes of X, W, R, B, initial_h/c and P into c */
static kiln_status rnn_read_shapes(kiln_kctx *ctx, rnn_cfg *c, const kiln_tensor *const in[8])
{
    const kiln_node *nd = ctx->node;
    const kiln_tensor *X = in[0], *W = in[1], *R = in[2], *B = in[3], *h0 = in[5], *c0 = in[6], *P = in[7];
    c->layout = nd->opset >= 14 ? (int)kiln__attr_i(nd, "layout", 0) : 0;
    if (c->layout != 0 && c->layout != 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "layout must be 0 or 1");
    const char *dir = kiln__attr_s(nd, "direction", "forward");
    if (!strcmp(dir, "forward")) {
        c->ndir = 1;
    } else if (!strcmp(dir, "reverse")) {
        c->ndir = 1;
        c->reverse[0] = true;
    } else if (!strcmp(dir, "bidirectional")) {
        c->ndir = 2;
        c->reverse[1] = true;
    } else {
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown direction '%s'", dir);
    }
    if (X->ndim != 3)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "X must be rank 3");
    c->seq = c->layout ? X->dims[1] : X->dims[0];
    c->batch = c->layout ? X->dims[0] : X->dims[1];
    c->input = X->dims[2];
    if (W->ndim != 3 || R->ndim != 3)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "W and R must be rank 3");
    int64_t H = kiln__attr_i(nd, "hidden_size", R->dims[2]);
    if (H < 0 || H > ((int64_t)1 << 30))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid hidden_size");
    c->H = H;
    int64_t GH = c->G * H;
    if (W->dims[0] != c->ndir || W->dims[1] != GH || W->dims[2] != c->input)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "W must be [%d,%lld,%lld]", c->ndir, (long long)GH, (long long)c->input);
    if (R->dims[0] != c->ndir || R->dims[1] != GH || R->dims[2] != H)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "R must be [%d,%lld,%lld]", c->ndir, (long long)GH, (long long)H);
    if (B && (B->ndim != 2 || B->dims[0] != c->ndir || B->dims[1] != 2 * GH))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "B must be [%d,%lld]", c->ndir, (long long)(2 * GH));
    const kiln_tensor *states[2] = {h0, c0};
    for (int i = 0; i < 2; i++) {
        const kiln_tensor *s = states[i];
        if (!s)
            continue;
        int64_t e0 = c->layout ? c->batch : c->ndir, e1 = c->layout ? c->ndir : c->batch;
        if (s->ndim != 3 || s->dims[0] != e0 || s->dims[1] != e1 || s->dims[2] != H)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s has the wrong shape", i ? "initial_c" : "initial_h");
    }
    if (P && (P->ndim != 2 || P->dims[0] != c->ndir || P->dims[1] != 3 * H))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "P must be [%d,%lld]", c->ndir, (long long)(3 * H));
    return KILN_OK;
}

/* clip, linear_before_reset, input_forget and the activations (defaults, then the attribute) */
static kiln_status rnn_read_attrs(kiln_kctx *ctx, rnn_cfg *c)
{
    const kiln_node *nd = ctx->node;
    int nact = c->kind == CELL_RNN ? 1 : (c->kind == CELL_GRU ? 2 : 3);
    const kiln_attr *ca = kiln__attr(nd, "clip");
    if (ca) {
        c->has_clip = true;
        c->clip = ca->f;
        if (!(c->clip >= 0))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "clip must be non-negative");
    }
    c->lbr = c->kind == CELL_GRU && kiln__attr_i(nd, "linear_before_reset", 0) != 0;
    c->input_forget = c->kind == CELL_LSTM && kiln__attr_i(nd, "input_forget", 0) != 0;
    for (int d = 0; d < 2; d++) {
        if (c->kind == CELL_RNN) {
            c->act[d][0] = (rnn_act){A_TANH, 0, 0};
        } else {
            c->act[d][0] = (rnn_act){A_SIGMOID, 0, 0};
            c->act[d][1] = (rnn_act){A_TANH, 0, 0};
            c->act[d][2] = (rnn_act){A_TANH, 0, 0};
        }
    }
    const kiln_attr *aa = kiln__attr(nd, "activations");
    if (!aa || aa->n <= 0)
        return KILN_OK;
    if (aa->type != KILN_ATTR_STRINGS || !aa->strings)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "activations must be a list of strings");
    if (aa->n != nact * c->ndir && aa->n != nact)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "expected %d activations, got %d", nact * c->ndir, aa->n);
    const float *al = NULL, *be = NULL;
    int nal = kiln__attr_floats(nd, "activation_alpha", &al);
    int nbe = kiln__attr_floats(nd, "activation_beta", &be);
    int ia = 0, ib = 0;
    for (int d = 0; d < c->ndir; d++)
        for (int k = 0; k < nact; k++) {
            int idx = aa->n == nact ? k : d * nact + k;
            const char *s = aa->strings[idx] ? aa->strings[idx] : "";
            rnn_act *a = &c->act[d][k];
            if (!parse_act(s, a))
                return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "unsupported activation '%s'", s);
            if (aa->n == nact && d == 1) {
                *a = c->act[0][k];
                continue;
            }
            int na, nb;
            act_arg_usage(a->kind, &na, &nb);
            if (na && ia < nal)
                a->alpha = al[ia++];
            if (nb && ib < nbe)
                a->beta = be[ib++];
        }
    return KILN_OK;
}

/* per-batch sequence lengths (seq without sequence_lens); *out is freed by the caller */
static kiln_status rnn_read_lens(kiln_kctx *ctx, const rnn_cfg *c, const kiln_tensor *SL, int64_t **out)
{
    int64_t *lens = kiln__calloc((size_t)(c->batch > 0 ? c->batch : 1), sizeof(int64_t));
    if (!lens)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    *out = lens;
    for (int64_t b = 0; b < c->batch; b++)
        lens[b] = c->seq;
    if (!SL)
        return KILN_OK;
    if (!kiln__dtype_is_int(SL->dtype) || SL->ndim != 1 || SL->dims[0] != c->batch)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "sequence_lens must be an integer tensor [batch]");
    for (int64_t b = 0; b < c->batch; b++) {
        int64_t l = kiln__get_i64(SL->dtype, SL->data, b);
        if (l < 0 || l > c->seq)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "sequence_lens[%lld]=%lld out of range [0,%lld]",
                              (long long)b, (long long)l, (long long)c->seq);
        lens[b] = l;
    }
    return KILN_OK;
}

/* Y [seq, dir, batch, H] (layout 1: [batch, seq, dir, H]), Y_h and Y_c [dir, batch, H] (layout 1:
 * [batch, dir, H]), each only where the node has that output */
static kiln_status rnn_place_outputs(kiln_kctx *ctx, rnn_cfg *c, kiln_dtype dt)
{
    int64_t yd[4], hd[3];
    if (c->layout) {
        yd[0] = c->batch, yd[1] = c->seq, yd[2] = c->ndir, yd[3] = c->H;
        hd[0] = c->batch, hd[1] = c->ndir, hd[2] = c->H;
    } else {
        yd[0] = c->seq, yd[1] = c->ndir, yd[2] = c->batch, yd[3] = c->H;
        hd[0] = c->ndir, hd[1] = c->batch, hd[2] = c->H;
    }
    void **dst[3] = {&c->Y, &c->Yh, &c->Yc};
    int nout = c->kind == CELL_LSTM ? 3 : 2;
    for (int i = 0; i < nout && i < ctx->n_out; i++) {
        if (!ctx->out[i])
            continue;
        kiln_status st = i == 0 ? kiln__kout(ctx, 0, dt, 4, yd) : kiln__kout(ctx, i, dt, 3, hd);
        if (st != KILN_OK)
            return st;
        *dst[i] = ctx->out[i]->data;
    }
    return KILN_OK;
}

static kiln_status rnn_common(kiln_kctx *ctx, cell_kind kind)
{
    const kiln_tensor *in[8] = {kiln__kin(ctx, 0), kiln__kin(ctx, 1), kiln__kin(ctx, 2), kiln__kin(ctx, 3),
                                kiln__kin(ctx, 4), kiln__kin(ctx, 5), NULL, NULL};
    if (kind == CELL_LSTM) {
        in[6] = kiln__kin(ctx, 6);
        in[7] = kiln__kin(ctx, 7);
    }
    if (!in[0] || !in[1] || !in[2])
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    kiln_dtype dt = in[0]->dtype;
    if (!float_dtype_ok(dt))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(dt));
    for (int i = 1; i < 8; i++)
        if (i != 4 && in[i] && in[i]->dtype != dt)
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "inputs must all be %s", kiln_dtype_name(dt));
    rnn_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.G = kind == CELL_RNN ? 1 : (kind == CELL_GRU ? 3 : 4);
    kiln_status st = rnn_read_shapes(ctx, &c, in);
    if (st == KILN_OK)
        st = rnn_read_attrs(ctx, &c);
    if (st != KILN_OK)
        return st;
    int64_t *lens = NULL;
    st = rnn_read_lens(ctx, &c, in[4], &lens);
    c.lens = lens;
    c.X = in[0]->data;
    c.W = in[1]->data;
    c.R = in[2]->data;
    c.B = in[3] ? in[3]->data : NULL;
    c.h0 = in[5] ? in[5]->data : NULL;
    c.c0 = in[6] ? in[6]->data : NULL;
    c.P = in[7] ? in[7]->data : NULL;
    c.pool = ctx->pool;
    c.nthreads = ctx->nthreads;
    if (st == KILN_OK)
        st = rnn_place_outputs(ctx, &c, dt);
    /* work size check: seq*batch*GH elements */
    if (st == KILN_OK) {
        double work = (double)c.seq * (double)c.batch * (double)(c.G * c.H) * (double)kiln_dtype_size(dt);
        if (work > (double)kiln__max_tensor_bytes())
            st = kiln__kerr(ctx, KILN_ERR_LIMIT, "recurrent work buffer too large");
    }
    if (st == KILN_OK && c.seq > 0 && c.batch > 0 && c.H > 0) {
        st = dt == KILN_DT_FLOAT32 ? rnn_run_f32(&c) : rnn_run_f64(&c);
        if (st != KILN_OK)
            st = kiln__kerr(ctx, st, "out of memory");
    }
    kiln__free(lens);
    return st;
}

static kiln_status k_rnn(kiln_kctx *ctx)
{
    return rnn_common(ctx, CELL_RNN);
}

static kiln_status k_gru(kiln_kctx *ctx)
{
    return rnn_common(ctx, CELL_GRU);
}

static kiln_status k_lstm(kiln_kctx *ctx)
{
    return rnn_common(ctx, CELL_LSTM);
}

const kiln_kernel_reg kiln__ref_rnn[] = {
    {KILN_OP_RNN, k_rnn},
    {KILN_OP_GRU, k_gru},
    {KILN_OP_LSTM, k_lstm},
    {KILN_OP_COUNT, NULL},
};

#else /* RNN_T: the typed cell loop */

#define RNN_CAT2(a, b) a##_##b
#define RNN_CAT(a, b) RNN_CAT2(a, b)
#define RNN_FN(name) RNN_CAT(name, RNN_SFX)

#define T RNN_T

/* One direction's weights and activations. */
typedef struct RNN_FN(rnn_dir) {
    int d;
    const T *W, *R, *Wb, *Rb, *P;   /* Wb, Rb (the biases), P (peepholes) may be NULL */
    const rnn_act *af, *ag, *ah;
    bool rev;
} RNN_FN(rnn_dir);

/* XW[row] = X[row] * W^T + the biases (the recurrent ones too, but GRU's linear-before-reset
 * h-gate bias); row order follows X's layout. */
static void RNN_FN(rnn_xw)(const rnn_cfg *c, const RNN_FN(rnn_dir) *dr, T *XW)
{
    const int64_t H = c->H, GH = c->G * H, rows = c->seq * c->batch;
    RNN_FN(gemm_nt)(c->pool, c->nthreads, rows, GH, c->input, c->X, c->input, dr->W, c->input, XW, GH);
    if (!dr->Wb)
        return;
    for (int64_t r = 0; r < rows; r++) {
        T *xw = XW + r * GH;
        for (int64_t j = 0; j < GH; j++) {
            T b = dr->Wb[j];
            if (!(c->kind == CELL_GRU && c->lbr && j >= 2 * H))
                b += dr->Rb[j];
            xw[j] += b;
        }
    }
}

/* Row of X (in XW) of batch entry b at step s, or -1 past its sequence length. */
static int64_t RNN_FN(rnn_row)(const rnn_cfg *c, const RNN_FN(rnn_dir) *dr, int64_t s, int64_t b)
{
    if (s >= c->lens[b])
        return -1;
    int64_t t = dr->rev ? c->lens[b] - 1 - s : s;
    return c->layout ? b * c->seq + t : t * c->batch + b;
}

/* GRU without linear-before-reset, step s: HR's z gates become z, and its h gates
 * (r .* Hprev) * Rh^T (tmp: r .* Hprev). */
static void RNN_FN(rnn_gru_reset)(const rnn_cfg *c, const RNN_FN(rnn_dir) *dr, int64_t s, const T *XW, T *HR,
                                  const T *Hs, T *tmp)
{
    const int64_t H = c->H, GH = c->G * H;
    for (int64_t b = 0; b < c->batch; b++) {
        T *hr = HR + b * GH;
        int64_t row = RNN_FN(rnn_row)(c, dr, s, b);
        if (row < 0) {
            memset(tmp + b * H, 0, sizeof(T) * (size_t)H);
            continue;
        }
        const T *xw = XW + row * GH;
        for (int64_t j = 0; j < H; j++) {
            hr[j] = (T)act_apply(dr->af, clipv(c, (double)(xw[j] + hr[j])));                 /* z */
            T r = (T)act_apply(dr->af, clipv(c, (double)(xw[H + j] + hr[H + j])));            /* r */
            tmp[b * H + j] = r * Hs[b * H + j];
        }
    }
    RNN_FN(gemm_nt)(c->pool, c->nthreads, c->batch, H, H, tmp, H, dr->R + 2 * H * H, H, HR + 2 * H, GH);
}

/* One cell step of one batch entry: the new hidden state hs (and cell state cs) from the input
 * projections xw and the recurrent ones hr. */
static void RNN_FN(rnn_cell)(const rnn_cfg *c, const RNN_FN(rnn_dir) *dr, const T *xw, const T *hr, T *hs, T *cs)
{
    const int64_t H = c->H;
    const rnn_act *af = dr->af, *ag = dr->ag;
    const T *P = dr->P;
    switch (c->kind) {
    case CELL_RNN:
        for (int64_t j = 0; j < H; j++)
            hs[j] = (T)act_apply(af, clipv(c, (double)(xw[j] + hr[j])));
        break;
    case CELL_GRU:
        for (int64_t j = 0; j < H; j++) {
            T z, h;
            if (c->lbr) {
                z = (T)act_apply(af, clipv(c, (double)(xw[j] + hr[j])));
                T r = (T)act_apply(af, clipv(c, (double)(xw[H + j] + hr[H + j])));
                T rbh = dr->Rb ? dr->Rb[2 * H + j] : 0;
                h = (T)act_apply(ag, clipv(c, (double)(xw[2 * H + j] + r * (hr[2 * H + j] + rbh))));
            } else {
                z = hr[j];
                h = (T)act_apply(ag, clipv(c, (double)(xw[2 * H + j] + hr[2 * H + j])));
            }
            hs[j] = (1 - z) * h + z * hs[j];
        }
        break;
    case CELL_LSTM:
        for (int64_t j = 0; j < H; j++) {
            T cp = cs[j];
            T gi = xw[j] + hr[j], go = xw[H + j] + hr[H + j];
            T gf = xw[2 * H + j] + hr[2 * H + j], gc = xw[3 * H + j] + hr[3 * H + j];
            if (P) {
                gi += P[j] * cp;
                gf += P[2 * H + j] * cp;
            }
            T i = (T)act_apply(af, clipv(c, (double)gi));
            T f = c->input_forget ? 1 - i : (T)act_apply(af, clipv(c, (double)gf));
            T cc = (T)act_apply(ag, clipv(c, (double)gc));
            T cn = f * cp + i * cc;
            if (P)
                go += P[H + j] * cn;
            T o = (T)act_apply(af, clipv(c, (double)go));
            cs[j] = cn;
            hs[j] = o * (T)act_apply(dr->ah, (double)cn); /* no clip on h() input (as ONNX Runtime) */
        }
        break;
    }
}

/* The states of direction d: read from the initial ones (h0, c0; zero when absent) into Hs, Cs
 * (out == false), or Hs, Cs written to the final ones Yh, Yc (zero for empty sequences). */
static void RNN_FN(rnn_states)(const rnn_cfg *c, int d, T *Hs, T *Cs, bool out)
{
    const int64_t H = c->H, NB = c->batch;
    const T *h0 = c->h0, *c0 = c->c0;
    T *Yh = c->Yh, *Yc = c->Yc;
    for (int64_t b = 0; b < NB; b++) {
        int64_t si = c->layout ? (b * c->ndir + d) * H : ((int64_t)d * NB + b) * H;
        bool zero = c->lens[b] == 0;
        for (int64_t j = 0; j < H; j++) {
            if (!out) {
                Hs[b * H + j] = h0 ? h0[si + j] : 0;
                Cs[b * H + j] = c0 ? c0[si + j] : 0;
                continue;
            }
            if (Yh)
                Yh[si + j] = zero ? 0 : Hs[b * H + j];
            if (Yc)
                Yc[si + j] = zero ? 0 : Cs[b * H + j];
        }
    }
}

/* One direction: the input projections, then the steps (recurrent GEMM, cells, Y rows). */
static void RNN_FN(rnn_direction)(const rnn_cfg *c, const RNN_FN(rnn_dir) *dr, T *XW, T *HR, T *Hs, T *Cs, T *tmp)
{
    const int64_t H = c->H, GH = c->G * H, NB = c->batch, S = c->seq;
    T *Y = c->Y;
    RNN_FN(rnn_xw)(c, dr, XW);
    RNN_FN(rnn_states)(c, dr->d, Hs, Cs, false);
    bool gru_reset = c->kind == CELL_GRU && !c->lbr;
    for (int64_t s = 0; s < S; s++) {
        RNN_FN(gemm_nt)(c->pool, c->nthreads, NB, gru_reset ? 2 * H : GH, H, Hs, H, dr->R, H, HR, GH);
        if (gru_reset)
            RNN_FN(rnn_gru_reset)(c, dr, s, XW, HR, Hs, tmp);
        for (int64_t b = 0; b < NB; b++) {
            int64_t row = RNN_FN(rnn_row)(c, dr, s, b);
            if (row < 0)
                continue;
            T *hs = Hs + b * H;
            RNN_FN(rnn_cell)(c, dr, XW + row * GH, HR + b * GH, hs, Cs + b * H);
            if (Y) {
                int64_t t = dr->rev ? c->lens[b] - 1 - s : s;
                int64_t yi = c->layout ? ((b * S + t) * c->ndir + dr->d) * H : ((t * c->ndir + dr->d) * NB + b) * H;
                memcpy(Y + yi, hs, sizeof(T) * (size_t)H);
            }
        }
    }
    RNN_FN(rnn_states)(c, dr->d, Hs, Cs, true);
}

/* Runs all directions. Returns KILN_ERR_NOMEM on allocation failure (caller adds context). */
static kiln_status RNN_FN(rnn_run)(const rnn_cfg *c)
{
    const int64_t H = c->H, GH = c->G * H, NB = c->batch, S = c->seq, I = c->input;
    T *XW = kiln__malloc(sizeof(T) * (size_t)(S * NB * GH));
    T *HR = kiln__malloc(sizeof(T) * (size_t)(NB * GH));
    T *Hs = kiln__calloc((size_t)(NB * H), sizeof(T));
    T *Cs = kiln__calloc((size_t)(NB * H), sizeof(T));
    T *tmp = kiln__calloc((size_t)(NB * H), sizeof(T));
    kiln_status st = XW && HR && Hs && Cs && tmp ? KILN_OK : KILN_ERR_NOMEM;
    for (int d = 0; st == KILN_OK && d < c->ndir; d++) {
        const T *Ball = c->B, *Pall = c->P;
        RNN_FN(rnn_dir) dr = {.d = d, .W = (const T *)c->W + (int64_t)d * GH * I,
                              .R = (const T *)c->R + (int64_t)d * GH * H,
                              .Wb = Ball ? Ball + (int64_t)d * 2 * GH : NULL, .P = Pall ? Pall + (int64_t)d * 3 * H : NULL,
                              .af = &c->act[d][0], .ag = &c->act[d][1], .ah = &c->act[d][2], .rev = c->reverse[d]};
        dr.Rb = dr.Wb ? dr.Wb + GH : NULL;
        RNN_FN(rnn_direction)(c, &dr, XW, HR, Hs, Cs, tmp);
    }
    kiln__free(XW);
    kiln__free(HR);
    kiln__free(Hs);
    kiln__free(Cs);
    kiln__free(tmp);
    return st;
}

#undef T
#undef RNN_FN
#undef RNN_CAT
#undef RNN_CAT2

#endif
