/* Table-driven differential test of the reference kernels, in the spirit of ggml's
 * test-backend-ops: for many ops, random inputs with fixed seeds and odd sizes (1, 3, 7, 17,
 * 33, 255 and sizes past the kernels' multi-threading threshold), each kernel is called
 * through a hand-built kiln_kctx (nthreads 1 and 2, and 3 where a tensor is past the threading
 * thresholds) and every output element is compared with a scalar reference written here in
 * double precision (libm).
 *
 * Comparison classes:
 *   exact  - integer / bool / data-movement outputs, and float ops whose result is exact
 *            (Relu, Abs, Max, Clip, ...): bit-for-bit (data movement) or value equality;
 *   rel    - float32 "exact-ish" ops: |got - want| <= 1e-5 * s;
 *   trans  - kiln's fast exp/tanh/erf paths: |got - want| <= 2e-6 + 1e-5 * s;
 * where s is |want|, or, for ops whose float32 evaluation cancels (sums, dot products,
 * normalisations, HardSwish/HardSigmoid near their knees), the magnitude of the terms that
 * make up the result (sum |a_k b_k| for a dot product, sum |x| for ReduceSum, ...) - the scale
 * float32 rounding errors are proportional to. The reference is rounded to the output dtype
 * first; float16 outputs may additionally differ by one float16 ulp (kiln rounds a float32
 * result, the reference an exact one), except in the exact class.
 *
 * Structure: a small node builder (make_node + add_attr_*), per-family problem builders that
 * create the inputs and the expected outputs, one generic runner (run_case) and one table of
 * cases (k_cases). One line is printed per failing case, with the worst error and its index. */
#include "test.h"
#include "test_pool.h"
#include "backend/kernel.h"
#include <float.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define F32 KILN_DT_FLOAT32
#define F16 KILN_DT_FLOAT16
#define I64 KILN_DT_INT64
#define I32 KILN_DT_INT32
#define U8 KILN_DT_UINT8
#define BOOL KILN_DT_BOOL

/* ---------------------------------------------------------------------------------------
 * node builder
 * --------------------------------------------------------------------------------------- */

#define NODE_MAX_ATTR 12

typedef struct tnode {
    kiln_node node;
    kiln_attr attrs[NODE_MAX_ATTR];
    int64_t ints[NODE_MAX_ATTR][2 * KILN_MAX_DIMS];
    char strs[NODE_MAX_ATTR][48];
    int ids[32];
} tnode;

static tnode *make_node(kiln_op op, int n_in, int n_out)
{
    tnode *t = calloc(1, sizeof *t);
    if (!t) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (int i = 0; i < 32; i++)
        t->ids[i] = i;
    t->node.name = (char *)"kt";
    t->node.op_type = (char *)kiln__op_name(op);
    t->node.domain = (char *)"";
    t->node.op = op;
    t->node.opset = 13;
    t->node.n_in = n_in;
    t->node.n_out = n_out;
    t->node.in = t->ids;
    t->node.out = t->ids + 16;
    t->node.attrs = t->attrs;
    return t;
}

static kiln_attr *new_attr(tnode *t, const char *name, kiln_attr_type type)
{
    if (t->node.n_attr >= NODE_MAX_ATTR) {
        fprintf(stderr, "test_kernels: too many attributes\n");
        exit(2);
    }
    kiln_attr *a = &t->attrs[t->node.n_attr++];
    memset(a, 0, sizeof *a);
    a->name = (char *)name;
    a->type = type;
    return a;
}

static void add_attr_i(tnode *t, const char *name, int64_t v)
{
    new_attr(t, name, KILN_ATTR_INT)->i = v;
}

static void add_attr_f(tnode *t, const char *name, float v)
{
    new_attr(t, name, KILN_ATTR_FLOAT)->f = v;
}

static void add_attr_ints(tnode *t, const char *name, int n, const int64_t *v)
{
    int slot = t->node.n_attr;
    kiln_attr *a = new_attr(t, name, KILN_ATTR_INTS);
    if (n > 2 * KILN_MAX_DIMS)
        n = 2 * KILN_MAX_DIMS;
    memcpy(t->ints[slot], v, sizeof(int64_t) * (size_t)n);
    a->n = n;
    a->ints = t->ints[slot];
}

static void add_attr_s(tnode *t, const char *name, const char *s)
{
    int slot = t->node.n_attr;
    kiln_attr *a = new_attr(t, name, KILN_ATTR_STRING);
    snprintf(t->strs[slot], sizeof t->strs[slot], "%s", s);
    a->s = t->strs[slot];
    a->s_len = strlen(a->s);
}

/* ---------------------------------------------------------------------------------------
 * element access (float16 conversions written here, independent of kiln's)
 * --------------------------------------------------------------------------------------- */

/* the nearest float16 value of v (ties to even), as a double */
static double round_h(double v)
{
    if (!isfinite(v) || v == 0)
        return v;
    double a = fabs(v);
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int ex = e - 1 < -14 ? -14 : e - 1;
    double q = ldexp(1.0, ex - 10);
    double r = nearbyint(a / q) * q;
    return copysign(r > 65504.0 ? INFINITY : r, v);
}

/* spacing of float16 values at the magnitude of r */
static double ulp_h(double r)
{
    double a = fabs(r);
    if (!(a >= 0x1p-14))
        return 0x1p-24;
    int e;
    frexp(a, &e);
    return ldexp(1.0, e - 11);
}

static uint16_t d2h(double v)
{
    if (isnan(v))
        return 0x7e00;
    double r = round_h(v);
    uint16_t s = signbit(r) ? 0x8000 : 0;
    double a = fabs(r);
    if (isinf(a))
        return s | 0x7c00;
    if (a < 0x1p-14)
        return s | (uint16_t)(a * 0x1p24);
    int e;
    double f = frexp(a, &e);
    return (uint16_t)(s | ((e - 1 + 15) << 10) | (int)((f * 2.0 - 1.0) * 1024.0));
}

static double h2d(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* the nearest float32 value of v, as a double (no out-of-range double->float conversion) */
static double round_f(double v)
{
    if (isfinite(v) && fabs(v) > FLT_MAX)
        return fabs(v) >= 0x1.ffffffp127 ? copysign(INFINITY, v) : copysign(FLT_MAX, v);
    return (double)(float)v;
}

static int64_t numel_of(const kiln_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->dims[d];
    return n;
}

static int64_t geti(const kiln_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case KILN_DT_INT64: return ((const int64_t *)t->data)[i];
    case KILN_DT_INT32: return ((const int32_t *)t->data)[i];
    case KILN_DT_INT16: return ((const int16_t *)t->data)[i];
    case KILN_DT_INT8: return ((const int8_t *)t->data)[i];
    case KILN_DT_UINT8:
    case KILN_DT_BOOL: return ((const uint8_t *)t->data)[i];
    case KILN_DT_UINT16: return ((const uint16_t *)t->data)[i];
    case KILN_DT_UINT32: return ((const uint32_t *)t->data)[i];
    default: return 0;
    }
}

static double getd(const kiln_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case KILN_DT_FLOAT32: return ((const float *)t->data)[i];
    case KILN_DT_FLOAT64: return ((const double *)t->data)[i];
    case KILN_DT_FLOAT16: return h2d(((const uint16_t *)t->data)[i]);
    default: return (double)geti(t, i);
    }
}

static void seti(kiln_tensor *t, int64_t i, int64_t v)
{
    uint64_t u = (uint64_t)v;
    switch (t->dtype) {
    case KILN_DT_INT64: ((int64_t *)t->data)[i] = v; break;
    case KILN_DT_INT32: ((int32_t *)t->data)[i] = (int32_t)(uint32_t)u; break;
    case KILN_DT_INT16: ((int16_t *)t->data)[i] = (int16_t)(uint16_t)u; break;
    case KILN_DT_INT8: ((int8_t *)t->data)[i] = (int8_t)(uint8_t)u; break;
    case KILN_DT_UINT8: ((uint8_t *)t->data)[i] = (uint8_t)u; break;
    case KILN_DT_BOOL: ((uint8_t *)t->data)[i] = u != 0; break;
    case KILN_DT_UINT16: ((uint16_t *)t->data)[i] = (uint16_t)u; break;
    case KILN_DT_UINT32: ((uint32_t *)t->data)[i] = (uint32_t)u; break;
    default: break;
    }
}

/* stores v rounded to t's dtype (float types) or as an integer */
static void setd(kiln_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case KILN_DT_FLOAT32: ((float *)t->data)[i] = (float)round_f(v); break;
    case KILN_DT_FLOAT64: ((double *)t->data)[i] = v; break;
    case KILN_DT_FLOAT16: ((uint16_t *)t->data)[i] = d2h(v); break;
    default: seti(t, i, (int64_t)v); break;
    }
}

static bool is_float(kiln_dtype dt)
{
    return dt == F32 || dt == F16 || dt == KILN_DT_FLOAT64;
}

/* ---------------------------------------------------------------------------------------
 * random numbers
 * --------------------------------------------------------------------------------------- */

static double urand(unsigned long long *s) /* [0, 1) */
{
    return (double)(test_rng(s) >> 11) * 0x1p-53;
}

static double uni(unsigned long long *s, double lo, double hi)
{
    return lo + (hi - lo) * urand(s);
}

static int64_t irand(unsigned long long *s, int64_t lo, int64_t hi) /* [lo, hi] */
{
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1;
    uint64_t r = test_rng(s);
    return (int64_t)((uint64_t)lo + (span ? r % span : r));
}

/* random contents for data-movement tests: any bit pattern for integers, finite values for floats */
static void fill_rand(kiln_tensor *t, unsigned long long *s)
{
    int64_t n = numel_of(t);
    for (int64_t i = 0; i < n; i++) {
        if (is_float(t->dtype))
            setd(t, i, uni(s, -100.0, 100.0));
        else
            seti(t, i, (int64_t)test_rng(s));
    }
}

static void fill_uni(kiln_tensor *t, unsigned long long *s, double lo, double hi)
{
    int64_t n = numel_of(t);
    for (int64_t i = 0; i < n; i++)
        setd(t, i, uni(s, lo, hi));
}

/* ---------------------------------------------------------------------------------------
 * problems: inputs and expected outputs
 * --------------------------------------------------------------------------------------- */

typedef struct ilist {
    int n;
    int64_t v[KILN_MAX_DIMS];
} ilist;

/* an int list / shape literal; SCALAR is the rank-0 shape (and the empty list) */
#define SH(...) {(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}}
#define SCALAR {0, {0}}
#define SWEEP {-1, {0}} /* replaced by [n] for each n in sweep_sizes */

static const int64_t sweep_sizes[] = {1, 3, 7, 17, 33, 255, 70001};

enum { EK_FLOAT, EK_INT, EK_MAP };
enum { TOL_EXACT, TOL_REL, TOL_TRANS };
static const char *const tol_name[] = {"exact", "rel", "trans"};

#define MAP(k, i) (((int64_t)(k) << 40) | (int64_t)(i)) /* element i of input k */

typedef struct expect {
    int kind, tol;
    kiln_dtype dt;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    int64_t n;
    double *v;      /* EK_FLOAT: exact reference value */
    double *scale;  /* EK_FLOAT: optional error scale (else |v|) */
    int64_t *iv;    /* EK_INT */
    uint8_t *skip;  /* EK_INT: optional, elements not compared */
    int64_t *map;   /* EK_MAP: MAP(input, element) */
} expect;

#define MAX_IN 8

typedef struct prob {
    tnode *nd;
    int n_in;
    kiln_tensor in[MAX_IN];
    bool has[MAX_IN];
    int n_out;
    expect ex[3];
} prob;

static void *xcalloc(size_t n, size_t es)
{
    void *p = calloc(n ? n : 1, es);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static kiln_tensor *in_new(prob *p, int k, kiln_dtype dt, int ndim, const int64_t *dims)
{
    kiln_tensor *t = &p->in[k];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->dims[d] = dims[d];
    int64_t n = numel_of(t);
    t->data = xcalloc((size_t)n, kiln_dtype_size(dt));
    t->nbytes = (size_t)n * kiln_dtype_size(dt);
    p->has[k] = true;
    return t;
}

static kiln_tensor *in_shape(prob *p, int k, kiln_dtype dt, const ilist *s)
{
    return in_new(p, k, dt, s->n, s->v);
}

/* a 1-D int64 input holding the list l */
static kiln_tensor *in_ints(prob *p, int k, const ilist *l)
{
    int64_t n = l->n;
    kiln_tensor *t = in_new(p, k, I64, 1, &n);
    for (int i = 0; i < l->n; i++)
        seti(t, i, l->v[i]);
    return t;
}

static kiln_tensor *in_scalar(prob *p, int k, kiln_dtype dt, double v)
{
    kiln_tensor *t = in_new(p, k, dt, 0, NULL);
    setd(t, 0, v);
    return t;
}

static expect *ex_new(prob *p, int o, int kind, int tol, kiln_dtype dt, int ndim, const int64_t *dims)
{
    expect *e = &p->ex[o];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->tol = tol;
    e->dt = dt;
    e->ndim = ndim;
    e->n = 1;
    for (int d = 0; d < ndim; d++) {
        e->dims[d] = dims[d];
        e->n *= dims[d];
    }
    if (kind == EK_FLOAT)
        e->v = xcalloc((size_t)e->n, sizeof(double));
    else if (kind == EK_INT)
        e->iv = xcalloc((size_t)e->n, sizeof(int64_t));
    else
        e->map = xcalloc((size_t)e->n, sizeof(int64_t));
    if (o + 1 > p->n_out)
        p->n_out = o + 1;
    return e;
}

static double *ex_scale(expect *e)
{
    if (!e->scale)
        e->scale = xcalloc((size_t)e->n, sizeof(double));
    return e->scale;
}

static void prob_free(prob *p)
{
    for (int k = 0; k < MAX_IN; k++)
        if (p->has[k])
            free(p->in[k].data);
    for (int o = 0; o < 3; o++) {
        free(p->ex[o].v);
        free(p->ex[o].scale);
        free(p->ex[o].iv);
        free(p->ex[o].skip);
        free(p->ex[o].map);
    }
    free(p->nd);
}

/* ---------------------------------------------------------------------------------------
 * index helpers
 * --------------------------------------------------------------------------------------- */

static void unravel(int64_t i, int nd, const int64_t *dims, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = dims[d] ? i % dims[d] : 0;
        i = dims[d] ? i / dims[d] : 0;
    }
}

static int64_t ravel(int nd, const int64_t *dims, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < nd; d++)
        off = off * dims[d] + idx[d];
    return off;
}

/* numpy broadcast of the given shapes (assumed compatible) */
static void bcast_shape(int n, const kiln_tensor *const *ts, int *nd, int64_t *dims)
{
    int r = 0;
    for (int i = 0; i < n; i++)
        if (ts[i]->ndim > r)
            r = ts[i]->ndim;
    for (int d = 0; d < r; d++)
        dims[d] = 1;
    for (int i = 0; i < n; i++)
        for (int d = 0; d < ts[i]->ndim; d++) {
            int od = r - ts[i]->ndim + d;
            if (ts[i]->dims[d] != 1)
                dims[od] = ts[i]->dims[d];
        }
    *nd = r;
}

/* element offset in a tensor of shape (tnd, tdims) broadcast to an output multi-index of rank nd */
static int64_t boff(int tnd, const int64_t *tdims, int nd, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < tnd; d++) {
        int64_t i = tdims[d] == 1 ? 0 : idx[nd - tnd + d];
        off = off * tdims[d] + i;
    }
    return off;
}

static int norm_axis(int64_t a, int r)
{
    return (int)(a < 0 ? a + r : a);
}

/* ---------------------------------------------------------------------------------------
 * the case table entry
 * --------------------------------------------------------------------------------------- */

typedef struct kcase kcase;
typedef void (*build_fn)(prob *p, const kcase *c, unsigned long long *seed);

struct kcase {
    const char *name;  /* tag printed with failures */
    build_fn build;
    kiln_op op;
    kiln_dtype dt;
    int opset;         /* 0: 13 */
    int nsh;           /* shapes used, where the family needs it (Concat; Gemm: 3 = C given) */
    ilist sh[3];       /* input shapes */
    ilist iv[4];       /* int lists (perm, axes, starts/ends/axes/steps, target shape, ...) */
    int64_t k[4];      /* int parameters (axis, keepdims, flags, M/N/K) */
    int nf;
    double f[4];       /* float parameters (alpha, beta, epsilon, scales, ...) */
    double lo, hi;     /* input range; both 0: the family's default */
    const char *s[3];  /* string parameters */
};

static void set_opset(prob *p, const kcase *c, int def)
{
    p->nd->node.opset = c->opset ? c->opset : def;
}

/* ---------------------------------------------------------------------------------------
 * unary elementwise
 * --------------------------------------------------------------------------------------- */

static double clamp01(double v)
{
    return v < 0.0 ? 0.0 : v > 1.0 ? 1.0 : v;
}

static int unary_tol(kiln_op op)
{
    switch (op) {
    case KILN_OP_Relu: case KILN_OP_Abs: case KILN_OP_Neg: case KILN_OP_Clip:
        return TOL_EXACT;
    case KILN_OP_Sigmoid: case KILN_OP_Tanh: case KILN_OP_Exp: case KILN_OP_Erf: case KILN_OP_Gelu:
        return TOL_TRANS;
    default:
        return TOL_REL;
    }
}

/* reference value; *sc gets an error scale where the float32 evaluation cancels (else NAN) */
static double uref(kiln_op op, double x, double a, double b, bool gelu_tanh, double *sc)
{
    *sc = NAN;
    switch (op) {
    case KILN_OP_Relu: return x < 0 ? 0.0 : x;
    case KILN_OP_Sigmoid: return 1.0 / (1.0 + exp(-x));
    case KILN_OP_Tanh: return tanh(x);
    case KILN_OP_Exp: return exp(x);
    case KILN_OP_Log: return log(x);
    case KILN_OP_Sqrt: return sqrt(x);
    case KILN_OP_Erf: return erf(x);
    case KILN_OP_Gelu:
        if (gelu_tanh)
            return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
        return 0.5 * x * erfc(-x * 0.70710678118654752440);
    case KILN_OP_HardSigmoid: *sc = fabs(a * x) + fabs(b); return clamp01(a * x + b);
    case KILN_OP_HardSwish: *sc = fabs(x) * (fabs(x) / 6.0 + 0.5); return x * clamp01(x / 6.0 + 0.5);
    case KILN_OP_LeakyRelu: return x < 0 ? a * x : x;
    case KILN_OP_Elu: return x < 0 ? a * expm1(x) : x;
    case KILN_OP_Softplus: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    case KILN_OP_Abs: return fabs(x);
    case KILN_OP_Neg: return -x;
    case KILN_OP_Clip: return x < a ? a : x > b ? b : x; /* a = min, b = max */
    default: return NAN;
    }
}

/* special inputs written over the first elements with k[1] = 1 (the infinities only where k[1] = 2) */
static const double specials[] = {0.0, -0.0, NAN, 1e30, -1e30, 1e-40, -1e-40, 88.7, -87.5, -103.0, 0.625, -4.0,
                                  4.0, 1e-3, INFINITY, -INFINITY};

/* k[0] (Clip): bit 0 = min input given (f[0]), bit 1 = max input given (f[1]).
 * k[1]: 1 = special values first, 2 = also infinities.
 * f[0], f[1] (others, with nf): alpha, beta attributes. s[0]: Gelu approximate. */
static void fam_unary(prob *p, const kcase *c, unsigned long long *seed)
{
    kiln_op op = c->op;
    bool clip = op == KILN_OP_Clip;
    int n_in = !clip ? 1 : (c->k[0] & 2) ? 3 : (c->k[0] & 1) ? 2 : 1;
    p->nd = make_node(op, n_in, 1);
    p->n_in = n_in;
    set_opset(p, c, 13);
    double a = 0, b = 0;
    if (op == KILN_OP_Elu)
        a = 1.0;
    if (op == KILN_OP_LeakyRelu)
        a = 0.01f;
    if (op == KILN_OP_HardSigmoid)
        a = 0.2f, b = 0.5f;
    if (!clip && c->nf >= 1) {
        add_attr_f(p->nd, "alpha", (float)c->f[0]);
        a = (float)c->f[0];
    }
    if (!clip && c->nf >= 2) {
        add_attr_f(p->nd, "beta", (float)c->f[1]);
        b = (float)c->f[1];
    }
    bool gelu_tanh = c->s[0] && !strcmp(c->s[0], "tanh");
    if (c->s[0])
        add_attr_s(p->nd, "approximate", c->s[0]);
    kiln_tensor *x = in_shape(p, 0, c->dt, &c->sh[0]);
    double lo = c->lo, hi = c->hi;
    if (lo == 0 && hi == 0) {
        lo = -5, hi = 5;
        if (op == KILN_OP_Log)
            lo = -7, hi = 5; /* log-uniform over [e^-7, e^5] */
        if (op == KILN_OP_Sqrt)
            lo = 0, hi = 100;
    }
    int64_t n = numel_of(x);
    for (int64_t i = 0; i < n; i++) {
        double v = uni(seed, lo, hi);
        setd(x, i, op == KILN_OP_Log ? exp(v) : v);
    }
    if (op == KILN_OP_Sqrt && n > 1)
        setd(x, 1, 0.0);
    if (c->k[1]) {
        int ns = (int)(sizeof specials / sizeof specials[0]) - (c->k[1] == 2 ? 0 : 2);
        for (int64_t i = 0; i < n && i < ns; i++)
            setd(x, i, specials[i]);
    }
    if (clip) {
        a = -INFINITY, b = INFINITY;
        if (c->k[0] & 1)
            a = getd(in_scalar(p, 1, c->dt, c->f[0]), 0);
        if (c->k[0] & 2)
            b = getd(in_scalar(p, 2, c->dt, c->f[1]), 0);
    }
    expect *e = ex_new(p, 0, EK_FLOAT, unary_tol(op), c->dt, x->ndim, x->dims);
    for (int64_t i = 0; i < n; i++) {
        double sc;
        e->v[i] = uref(op, getd(x, i), a, b, gelu_tanh, &sc);
        if (!isnan(sc))
            ex_scale(e)[i] = sc;
    }
    if (e->scale) /* elements without a special scale use |v| */
        for (int64_t i = 0; i < n; i++)
            if (e->scale[i] == 0)
                e->scale[i] = fabs(e->v[i]);
}

/* ---------------------------------------------------------------------------------------
 * binary elementwise with broadcasting
 * --------------------------------------------------------------------------------------- */

static bool is_cmp(kiln_op op)
{
    return op == KILN_OP_Equal || op == KILN_OP_Less || op == KILN_OP_Greater;
}

/* nf = 1: Pow with the exponent (a scalar input) fixed to f[0]; lo/hi: range of A */
static void fam_binary(prob *p, const kcase *c, unsigned long long *seed)
{
    kiln_op op = c->op;
    kiln_dtype dt = c->dt;
    p->nd = make_node(op, 2, 1);
    p->n_in = 2;
    set_opset(p, c, 13);
    kiln_tensor *A = in_shape(p, 0, dt, &c->sh[0]), *B = in_shape(p, 1, dt, &c->sh[1]);
    int64_t na = numel_of(A), nb = numel_of(B);
    bool fl = is_float(dt);
    bool i64 = dt == I64;
    for (int64_t i = 0; i < na; i++) {
        if (is_cmp(op))
            setd(A, i, (double)irand(seed, -2, 2));
        else if (fl)
            setd(A, i, op == KILN_OP_Pow && !c->nf ? uni(seed, 0.1, 4.0)
                       : (c->lo != 0 || c->hi != 0) ? uni(seed, c->lo, c->hi) : uni(seed, -5.0, 5.0));
        else if (op == KILN_OP_Mul)
            seti(A, i, i64 ? irand(seed, -(1LL << 31), 1LL << 31) : irand(seed, -(1 << 15), 1 << 15));
        else if (op == KILN_OP_Div)
            seti(A, i, i64 ? irand(seed, -(1LL << 62), 1LL << 62) : irand(seed, -INT32_MAX, INT32_MAX));
        else
            seti(A, i, i64 ? irand(seed, -(1LL << 61), 1LL << 61) : irand(seed, -(1 << 30), 1 << 30));
    }
    for (int64_t i = 0; i < nb; i++) {
        if (is_cmp(op))
            setd(B, i, (double)irand(seed, -2, 2));
        else if (fl && op == KILN_OP_Div)
            setd(B, i, uni(seed, 0.25, 4.0) * (test_rng(seed) & 1 ? -1.0 : 1.0));
        else if (fl && op == KILN_OP_Pow)
            setd(B, i, c->nf ? c->f[0] : uni(seed, -3.0, 3.0));
        else if (fl)
            setd(B, i, uni(seed, -5.0, 5.0));
        else if (op == KILN_OP_Mul)
            seti(B, i, i64 ? irand(seed, -(1LL << 31), 1LL << 31) : irand(seed, -(1 << 15), 1 << 15));
        else if (op == KILN_OP_Div)
            seti(B, i, irand(seed, 1, 20) * (test_rng(seed) & 1 ? -1 : 1)); /* 0 is an error: test_int_div_zero */
        else
            seti(B, i, i64 ? irand(seed, -(1LL << 61), 1LL << 61) : irand(seed, -(1 << 30), 1 << 30));
    }
    const kiln_tensor *ts[2] = {A, B};
    int nd;
    int64_t dims[KILN_MAX_DIMS] = {0}, idx[KILN_MAX_DIMS];
    bcast_shape(2, ts, &nd, dims);
    bool cmp = is_cmp(op);
    int tol = (op == KILN_OP_Max || op == KILN_OP_Min) ? TOL_EXACT : TOL_REL;
    expect *e = ex_new(p, 0, cmp || !fl ? EK_INT : EK_FLOAT, cmp || !fl ? TOL_EXACT : tol, cmp ? BOOL : dt, nd,
                       dims);
    if (!fl && op == KILN_OP_Div)
        e->skip = xcalloc((size_t)e->n, 1);
    for (int64_t i = 0; i < e->n; i++) {
        unravel(i, nd, dims, idx);
        int64_t ia = boff(A->ndim, A->dims, nd, idx), ib = boff(B->ndim, B->dims, nd, idx);
        if (cmp) {
            double x = getd(A, ia), y = getd(B, ib);
            e->iv[i] = op == KILN_OP_Equal ? x == y : op == KILN_OP_Less ? x < y : x > y;
        } else if (fl) {
            double x = getd(A, ia), y = getd(B, ib), r = NAN;
            switch (op) {
            case KILN_OP_Add: r = x + y; break;
            case KILN_OP_Sub: r = x - y; break;
            case KILN_OP_Mul: r = x * y; break;
            case KILN_OP_Div: r = x / y; break;
            case KILN_OP_Pow: r = pow(x, y); break;
            case KILN_OP_Max: r = x > y ? x : y; break;
            case KILN_OP_Min: r = x < y ? x : y; break;
            default: break;
            }
            e->v[i] = r;
        } else {
            int64_t x = geti(A, ia), y = geti(B, ib), r = 0;
            switch (op) {
            case KILN_OP_Add: r = x + y; break;
            case KILN_OP_Sub: r = x - y; break;
            case KILN_OP_Mul: r = x * y; break;
            case KILN_OP_Div:
                if (y == 0)
                    e->skip[i] = 1;
                else
                    r = x / y; /* C division truncates toward zero, as ONNX requires */
                break;
            default: break;
            }
            e->iv[i] = r;
        }
    }
}

/* Where: sh = {cond, X, Y}; X and Y of dtype dt */
static void fam_where(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_Where, 3, 1);
    p->n_in = 3;
    set_opset(p, c, 16);
    kiln_tensor *C = in_shape(p, 0, BOOL, &c->sh[0]);
    kiln_tensor *X = in_shape(p, 1, c->dt, &c->sh[1]), *Y = in_shape(p, 2, c->dt, &c->sh[2]);
    int64_t nc = numel_of(C);
    for (int64_t i = 0; i < nc; i++)
        seti(C, i, (int64_t)(test_rng(seed) & 1));
    fill_rand(X, seed);
    fill_rand(Y, seed);
    const kiln_tensor *ts[3] = {C, X, Y};
    int nd;
    int64_t dims[KILN_MAX_DIMS] = {0}, idx[KILN_MAX_DIMS];
    bcast_shape(3, ts, &nd, dims);
    expect *e = ex_new(p, 0, EK_MAP, TOL_EXACT, c->dt, nd, dims);
    for (int64_t i = 0; i < e->n; i++) {
        unravel(i, nd, dims, idx);
        bool cond = geti(C, boff(C->ndim, C->dims, nd, idx)) != 0;
        const kiln_tensor *s = cond ? X : Y;
        e->map[i] = MAP(cond ? 1 : 2, boff(s->ndim, s->dims, nd, idx));
    }
}

/* ---------------------------------------------------------------------------------------
 * data movement: Transpose, Concat, Slice, Gather, Reshape, Expand, Tile
 * --------------------------------------------------------------------------------------- */

/* iv[0]: perm (empty: attribute omitted, dims reversed) */
static void fam_transpose(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_Transpose, 1, 1);
    p->n_in = 1;
    set_opset(p, c, 13);
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_rand(X, seed);
    int r = X->ndim;
    int64_t perm[KILN_MAX_DIMS] = {0}, dims[KILN_MAX_DIMS] = {0}, oi[KILN_MAX_DIMS], ii[KILN_MAX_DIMS];
    if (c->iv[0].n) {
        add_attr_ints(p->nd, "perm", c->iv[0].n, c->iv[0].v);
        memcpy(perm, c->iv[0].v, sizeof(int64_t) * (size_t)r);
    } else {
        for (int d = 0; d < r; d++)
            perm[d] = r - 1 - d;
    }
    for (int d = 0; d < r; d++)
        dims[d] = X->dims[perm[d]];
    expect *e = ex_new(p, 0, EK_MAP, TOL_EXACT, c->dt, r, dims);
    for (int64_t i = 0; i < e->n; i++) {
        unravel(i, r, dims, oi);
        for (int d = 0; d < r; d++)
            ii[perm[d]] = oi[d];
        e->map[i] = MAP(0, ravel(r, X->dims, ii));
    }
}

/* nsh inputs sh[0..nsh-1], k[0]: axis */
static void fam_concat(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_Concat, c->nsh, 1);
    p->n_in = c->nsh;
    set_opset(p, c, 13);
    add_attr_i(p->nd, "axis", c->k[0]);
    int r = c->sh[0].n, ax = norm_axis(c->k[0], r);
    int64_t dims[KILN_MAX_DIMS] = {0}, idx[KILN_MAX_DIMS];
    for (int d = 0; d < r; d++)
        dims[d] = c->sh[0].v[d];
    dims[ax] = 0;
    for (int k = 0; k < c->nsh; k++) {
        fill_rand(in_shape(p, k, c->dt, &c->sh[k]), seed);
        dims[ax] += c->sh[k].v[ax];
    }
    expect *e = ex_new(p, 0, EK_MAP, TOL_EXACT, c->dt, r, dims);
    for (int64_t i = 0; i < e->n; i++) {
        unravel(i, r, dims, idx);
        int k = 0;
        while (idx[ax] >= p->in[k].dims[ax]) {
            idx[ax] -= p->in[k].dims[ax];
            k++;
        }
        e->map[i] = MAP(k, ravel(r, p->in[k].dims, idx));
    }
}

/* iv = {starts, ends, axes (empty: absent), steps (empty: absent)} */
static void fam_slice(prob *p, const kcase *c, unsigned long long *seed)
{
    bool has_axes = c->iv[2].n > 0, has_steps = c->iv[3].n > 0;
    int n_in = has_steps ? 5 : has_axes ? 4 : 3;
    p->nd = make_node(KILN_OP_Slice, n_in, 1);
    p->n_in = n_in;
    set_opset(p, c, 13);
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_rand(X, seed);
    in_ints(p, 1, &c->iv[0]);
    in_ints(p, 2, &c->iv[1]);
    if (has_axes)
        in_ints(p, 3, &c->iv[2]);
    if (has_steps)
        in_ints(p, 4, &c->iv[3]);
    int r = X->ndim;
    int64_t start[KILN_MAX_DIMS] = {0}, step[KILN_MAX_DIMS] = {0}, dims[KILN_MAX_DIMS] = {0}, idx[KILN_MAX_DIMS];
    for (int d = 0; d < r; d++) {
        start[d] = 0;
        step[d] = 1;
        dims[d] = X->dims[d];
    }
    for (int j = 0; j < c->iv[0].n; j++) {
        int ax = has_axes ? norm_axis(c->iv[2].v[j], r) : j;
        int64_t dim = X->dims[ax], st = has_steps ? c->iv[3].v[j] : 1;
        int64_t s = c->iv[0].v[j], en = c->iv[1].v[j], len;
        if (s < 0)
            s += dim;
        if (en < 0)
            en += dim;
        if (st > 0) {
            s = s < 0 ? 0 : s > dim ? dim : s;
            en = en < 0 ? 0 : en > dim ? dim : en;
            len = en > s ? (en - s + st - 1) / st : 0;
        } else {
            s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
            en = en < -1 ? -1 : en > dim - 1 ? dim - 1 : en;
            len = s > en ? (s - en - st - 1) / -st : 0;
        }
        start[ax] = s;
        step[ax] = st;
        dims[ax] = len;
    }
    expect *e = ex_new(p, 0, EK_MAP, TOL_EXACT, c->dt, r, dims);
    for (int64_t i = 0; i < e->n; i++) {
        unravel(i, r, dims, idx);
        for (int d = 0; d < r; d++)
            idx[d] = start[d] + idx[d] * step[d];
        e->map[i] = MAP(0, ravel(r, X->dims, idx));
    }
}

/* sh = {data, indices}, k[0]: axis, k[1]: 1 = int32 indices */
static void fam_gather(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_Gather, 2, 1);
    p->n_in = 2;
    set_opset(p, c, 13);
    add_attr_i(p->nd, "axis", c->k[0]);
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_rand(X, seed);
    int r = X->ndim, ax = norm_axis(c->k[0], r), q = c->sh[1].n;
    kiln_tensor *I = in_shape(p, 1, c->k[1] ? I32 : I64, &c->sh[1]);
    int64_t ni = numel_of(I), dim = X->dims[ax];
    for (int64_t i = 0; i < ni; i++)
        seti(I, i, irand(seed, -dim, dim - 1)); /* negative indices count from the end */
    int64_t dims[KILN_MAX_DIMS] = {0}, oi[KILN_MAX_DIMS], xi[KILN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < ax; d++)
        dims[nd++] = X->dims[d];
    for (int d = 0; d < q; d++)
        dims[nd++] = I->dims[d];
    for (int d = ax + 1; d < r; d++)
        dims[nd++] = X->dims[d];
    expect *e = ex_new(p, 0, EK_MAP, TOL_EXACT, c->dt, nd, dims);
    for (int64_t i = 0; i < e->n; i++) {
        unravel(i, nd, dims, oi);
        for (int d = 0; d < ax; d++)
            xi[d] = oi[d];
        int64_t v = geti(I, ravel(q, I->dims, oi + ax));
        xi[ax] = v < 0 ? v + dim : v;
        for (int d = ax + 1; d < r; d++)
            xi[d] = oi[q + d - 1];
        e->map[i] = MAP(0, ravel(r, X->dims, xi));
    }
}

/* iv[0]: the shape input (0 copies the input dim, -1 is inferred) */
static void fam_reshape(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_Reshape, 2, 1);
    p->n_in = 2;
    set_opset(p, c, 14);
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_rand(X, seed);
    in_ints(p, 1, &c->iv[0]);
    int64_t dims[KILN_MAX_DIMS] = {0}, known = 1;
    int infer = -1, r = c->iv[0].n;
    for (int d = 0; d < r; d++) {
        int64_t v = c->iv[0].v[d];
        dims[d] = v == 0 ? X->dims[d] : v;
        if (v == -1)
            infer = d;
        else
            known *= dims[d];
    }
    if (infer >= 0)
        dims[infer] = numel_of(X) / known;
    expect *e = ex_new(p, 0, EK_MAP, TOL_EXACT, c->dt, r, dims);
    for (int64_t i = 0; i < e->n; i++)
        e->map[i] = MAP(0, i);
}

/* iv[0]: the shape input (bidirectional broadcast with the input shape) */
static void fam_expand(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_Expand, 2, 1);
    p->n_in = 2;
    set_opset(p, c, 13);
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_rand(X, seed);
    in_ints(p, 1, &c->iv[0]);
    kiln_tensor shp;
    memset(&shp, 0, sizeof shp);
    shp.ndim = c->iv[0].n;
    memcpy(shp.dims, c->iv[0].v, sizeof(int64_t) * (size_t)shp.ndim);
    const kiln_tensor *ts[2] = {X, &shp};
    int nd;
    int64_t dims[KILN_MAX_DIMS] = {0}, idx[KILN_MAX_DIMS];
    bcast_shape(2, ts, &nd, dims);
    expect *e = ex_new(p, 0, EK_MAP, TOL_EXACT, c->dt, nd, dims);
    for (int64_t i = 0; i < e->n; i++) {
        unravel(i, nd, dims, idx);
        e->map[i] = MAP(0, boff(X->ndim, X->dims, nd, idx));
    }
}

/* iv[0]: repeats */
static void fam_tile(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_Tile, 2, 1);
    p->n_in = 2;
    set_opset(p, c, 13);
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_rand(X, seed);
    in_ints(p, 1, &c->iv[0]);
    int r = X->ndim;
    int64_t dims[KILN_MAX_DIMS] = {0}, idx[KILN_MAX_DIMS];
    for (int d = 0; d < r; d++)
        dims[d] = X->dims[d] * c->iv[0].v[d];
    expect *e = ex_new(p, 0, EK_MAP, TOL_EXACT, c->dt, r, dims);
    for (int64_t i = 0; i < e->n; i++) {
        unravel(i, r, dims, idx);
        for (int d = 0; d < r; d++)
            idx[d] %= X->dims[d];
        e->map[i] = MAP(0, ravel(r, X->dims, idx));
    }
}

/* ---------------------------------------------------------------------------------------
 * reductions and normalisations
 * --------------------------------------------------------------------------------------- */

/* iv[0]: axes (empty: none given = all), k[0]: keepdims. Axes are an input for ReduceSum-13
 * and for every op from opset 18, else an attribute. k[1] = 1: NaNs in a third of the outputs'
 * reduced sets, at varying positions (ReduceMax/Min must give NaN there, as np.maximum.reduce
 * does). k[2] = 1: noop_with_empty_axes=1 (iv[0] must be empty): each element reduced alone. */
static void fam_reduce(prob *p, const kcase *c, unsigned long long *seed)
{
    kiln_op op = c->op;
    int opset = c->opset ? c->opset : 13;
    bool axes_input = (op == KILN_OP_ReduceSum && opset >= 13) || opset >= 18;
    int n_in = axes_input && c->iv[0].n ? 2 : 1;
    p->nd = make_node(op, n_in, 1);
    p->n_in = n_in;
    set_opset(p, c, 13);
    add_attr_i(p->nd, "keepdims", c->k[0]);
    if (c->k[2])
        add_attr_i(p->nd, "noop_with_empty_axes", 1);
    if (c->iv[0].n) {
        if (axes_input)
            in_ints(p, 1, &c->iv[0]);
        else
            add_attr_ints(p->nd, "axes", c->iv[0].n, c->iv[0].v);
    }
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_uni(X, seed, -5.0, 5.0);
    int r = X->ndim;
    int64_t n = numel_of(X);
    if (c->k[2]) {
        /* the reduction of each element alone: the elementwise part of the op, else the identity */
        expect *e = ex_new(p, 0, EK_FLOAT, TOL_REL, c->dt, r, X->dims);
        for (int64_t i = 0; i < n; i++) {
            double x = getd(X, i);
            if (op == KILN_OP_ReduceLogSum)   /* positive inputs, and one zero (log 0 = -inf) */
                x = i == 0 ? 0.0 : fabs(x) + 0.125;
            if (i == 1 || (i == 2 && op != KILN_OP_ReduceLogSum))   /* +inf, -inf (LogSumExp: themselves) */
                x = i == 1 ? INFINITY : -INFINITY;
            if (i == 3)
                x = NAN;
            setd(X, i, x);
            x = getd(X, i);
            switch (op) {
            case KILN_OP_ReduceSumSquare: x = x * x; break;
            case KILN_OP_ReduceL1: case KILN_OP_ReduceL2: x = fabs(x); break;
            case KILN_OP_ReduceLogSum: x = log(x); break;
            default: break;   /* Sum, Mean, Max, Min, Prod, LogSumExp (log exp x = x) */
            }
            e->v[i] = x;
        }
        return;
    }
    bool red[KILN_MAX_DIMS];
    for (int d = 0; d < r; d++)
        red[d] = c->iv[0].n == 0;
    for (int j = 0; j < c->iv[0].n; j++)
        red[norm_axis(c->iv[0].v[j], r)] = true;
    int64_t dims[KILN_MAX_DIMS] = {0}, kdims[KILN_MAX_DIMS], idx[KILN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < r; d++) {
        kdims[d] = red[d] ? 1 : X->dims[d];
        if (!red[d] || c->k[0])
            dims[nd++] = kdims[d];
    }
    bool mx = op == KILN_OP_ReduceMax, mn = op == KILN_OP_ReduceMin;
    expect *e = ex_new(p, 0, EK_FLOAT, mx || mn ? TOL_EXACT : TOL_REL, c->dt, nd, dims);
    double *sc = ex_scale(e);
    int64_t *cnt = xcalloc((size_t)e->n, sizeof(int64_t));
    for (int64_t o = 0; o < e->n; o++)
        e->v[o] = mx ? -INFINITY : mn ? INFINITY : 0.0;
    const int64_t per = e->n ? n / e->n : 0;   /* elements per output */
    for (int64_t i = 0; i < n; i++) {
        unravel(i, r, X->dims, idx);
        for (int d = 0; d < r; d++)
            if (red[d])
                idx[d] = 0;
        int64_t o = ravel(r, kdims, idx);
        if (c->k[1] && o % 3 == 0 && cnt[o] == (o / 3 * 7) % per)
            setd(X, i, NAN);
        double x = getd(X, i);
        /* NaN propagates (np.maximum.reduce / np.minimum.reduce) */
        if (mx)
            e->v[o] = (x > e->v[o] || isnan(x)) ? x : e->v[o];
        else if (mn)
            e->v[o] = (x < e->v[o] || isnan(x)) ? x : e->v[o];
        else
            e->v[o] += x;
        sc[o] += fabs(x);
        cnt[o]++;
    }
    if (op == KILN_OP_ReduceMean)
        for (int64_t o = 0; o < e->n; o++) {
            e->v[o] /= (double)cnt[o];
            sc[o] /= (double)cnt[o];
        }
    if (mx || mn)
        for (int64_t o = 0; o < e->n; o++)
            sc[o] = fabs(e->v[o]);
    free(cnt);
}

/* Softmax / LogSoftmax: k[0]: axis, k[1] = 1: every third element along the axis is -inf (masking).
 * k[2] = 1: special lines, by line number mod 5: all -inf, one NaN, one +inf, one -inf, plain
 * (numpy's exp(x - max) / sum: NaN for the first three, the max propagating NaN).
 * Before opset 13 the input is coerced to 2-D at axis. */
static void fam_softmax(prob *p, const kcase *c, unsigned long long *seed)
{
    kiln_op op = c->op;
    p->nd = make_node(op, 1, 1);
    p->n_in = 1;
    set_opset(p, c, 13);
    add_attr_i(p->nd, "axis", c->k[0]);
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_uni(X, seed, c->lo || c->hi ? c->lo : -10.0, c->lo || c->hi ? c->hi : 10.0);
    int r = X->ndim, ax = norm_axis(c->k[0], r);
    bool old = p->nd->node.opset < 13;
    int64_t outer = 1, len = 1, inner = 1;
    for (int d = 0; d < r; d++) {
        if (d < ax)
            outer *= X->dims[d];
        else if (d == ax || old)
            len *= X->dims[d];
        else
            inner *= X->dims[d];
    }
    if (c->k[1])
        for (int64_t i = 0; i < numel_of(X); i++)
            if ((i / inner) % len % 3 == 1)
                setd(X, i, -INFINITY);
    if (c->k[2])
        for (int64_t o = 0; o < outer; o++)
            for (int64_t in = 0; in < inner; in++) {
                int64_t line = o * inner + in, base = o * len * inner + in, at = (line * 7 + 3) % len;
                static const double special[5] = {-INFINITY, NAN, INFINITY, -INFINITY, 0};
                int kind = (int)(line % 5);
                for (int64_t j = 0; j < len; j++)
                    if (kind == 0 || (kind < 4 && j == at))
                        setd(X, base + j * inner, special[kind]);
            }
    bool lg = op == KILN_OP_LogSoftmax;
    expect *e = ex_new(p, 0, EK_FLOAT, TOL_TRANS, c->dt, r, X->dims);
    double *sc = lg ? ex_scale(e) : NULL;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            int64_t base = o * len * inner + in;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < len; j++) {   /* NaN propagates, as in np.max */
                double x = getd(X, base + j * inner);
                m = (x > m || isnan(x)) ? x : m;
            }
            for (int64_t j = 0; j < len; j++)
                s += exp(getd(X, base + j * inner) - m);
            double ls = log(s);
            for (int64_t j = 0; j < len; j++) {
                double x = getd(X, base + j * inner);
                if (lg) {
                    e->v[base + j * inner] = x - m - ls;
                    sc[base + j * inner] = isinf(x) ? 0 : fabs(x - m) + ls;
                } else {
                    e->v[base + j * inner] = exp(x - m) / s;
                }
            }
        }
}

/* k[0]: axis, k[1]: with bias, k[2]: also check the Mean / InvStdDev outputs;
 * nf = 1: epsilon f[0]; lo/hi: input range (default [-3, 3]) */
static void fam_layernorm(prob *p, const kcase *c, unsigned long long *seed)
{
    int n_out = c->k[2] ? 3 : 1, n_in = c->k[1] ? 3 : 2;
    p->nd = make_node(KILN_OP_LayerNormalization, n_in, n_out);
    p->n_in = n_in;
    set_opset(p, c, 17);
    add_attr_i(p->nd, "axis", c->k[0]);
    double eps = 1e-5f;
    if (c->nf) {
        add_attr_f(p->nd, "epsilon", (float)c->f[0]);
        eps = (float)c->f[0];
    }
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_uni(X, seed, c->lo || c->hi ? c->lo : -3.0, c->lo || c->hi ? c->hi : 3.0);
    int r = X->ndim, ax = norm_axis(c->k[0], r);
    int64_t rows = 1, M = 1;
    for (int d = 0; d < r; d++)
        *(d < ax ? &rows : &M) *= X->dims[d];
    kiln_tensor *S = in_new(p, 1, c->dt, r - ax, X->dims + ax);
    fill_uni(S, seed, -2.0, 2.0);
    kiln_tensor *B = NULL;
    if (c->k[1]) {
        B = in_new(p, 2, c->dt, r - ax, X->dims + ax);
        fill_uni(B, seed, -1.0, 1.0);
    }
    expect *e = ex_new(p, 0, EK_FLOAT, TOL_REL, c->dt, r, X->dims);
    double *sc = ex_scale(e);
    expect *em = NULL, *ei = NULL;
    if (n_out == 3) {
        int64_t sd[KILN_MAX_DIMS];
        for (int d = 0; d < r; d++)
            sd[d] = d < ax ? X->dims[d] : 1;
        em = ex_new(p, 1, EK_FLOAT, TOL_REL, F32, r, sd);
        ei = ex_new(p, 2, EK_FLOAT, TOL_REL, F32, r, sd);
        ex_scale(em);
    }
    for (int64_t row = 0; row < rows; row++) {
        double mean = 0, var = 0, amean = 0;
        for (int64_t j = 0; j < M; j++) {
            mean += getd(X, row * M + j);
            amean += fabs(getd(X, row * M + j));
        }
        mean /= (double)M;
        amean /= (double)M;
        for (int64_t j = 0; j < M; j++) {
            double dx = getd(X, row * M + j) - mean;
            var += dx * dx;
        }
        var /= (double)M;
        double inv = 1.0 / sqrt(var + eps);
        for (int64_t j = 0; j < M; j++) {
            double x = getd(X, row * M + j), s = getd(S, j), b = B ? getd(B, j) : 0.0;
            e->v[row * M + j] = (x - mean) * inv * s + b;
            sc[row * M + j] = (fabs(x) + fabs(mean)) * inv * fabs(s) + fabs(b);
        }
        if (em) {
            em->v[row] = mean;
            em->scale[row] = amean;
            ei->v[row] = inv;
        }
    }
}

/* BatchNormalization, inference mode; nf = 1: epsilon f[0] */
static void fam_batchnorm(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_BatchNormalization, 5, 1);
    p->n_in = 5;
    set_opset(p, c, 15);
    double eps = 1e-5f;
    if (c->nf) {
        add_attr_f(p->nd, "epsilon", (float)c->f[0]);
        eps = (float)c->f[0];
    }
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    fill_uni(X, seed, -3.0, 3.0);
    int64_t C = X->dims[1], inner = 1;
    for (int d = 2; d < X->ndim; d++)
        inner *= X->dims[d];
    kiln_tensor *S = in_new(p, 1, c->dt, 1, &C), *B = in_new(p, 2, c->dt, 1, &C);
    kiln_tensor *Mn = in_new(p, 3, c->dt, 1, &C), *V = in_new(p, 4, c->dt, 1, &C);
    fill_uni(S, seed, -2.0, 2.0);
    fill_uni(B, seed, -1.0, 1.0);
    fill_uni(Mn, seed, -1.0, 1.0);
    fill_uni(V, seed, 0.1, 2.0);
    expect *e = ex_new(p, 0, EK_FLOAT, TOL_REL, c->dt, X->ndim, X->dims);
    double *sc = ex_scale(e);
    for (int64_t i = 0; i < e->n; i++) {
        int64_t ch = (i / inner) % C;
        double x = getd(X, i), m = getd(Mn, ch), s = getd(S, ch), b = getd(B, ch);
        double inv = 1.0 / sqrt(getd(V, ch) + eps);
        e->v[i] = (x - m) * inv * s + b;
        sc[i] = (fabs(x) + fabs(m)) * inv * fabs(s) + fabs(b);
    }
}

/* ---------------------------------------------------------------------------------------
 * Einsum
 * --------------------------------------------------------------------------------------- */

/* s[0] = equation over lowercase letters (no ellipsis), sh[0..nsh) the inputs: the sum over
 * every assignment of the labels of the product of the operands, by brute force. Dims of size 1
 * broadcast against the label's size; without "->" the output is the letters seen once, sorted. */
static void fam_einsum(prob *p, const kcase *c, unsigned long long *seed)
{
    int nops = c->nsh;
    p->nd = make_node(KILN_OP_Einsum, nops, 1);
    p->n_in = nops;
    set_opset(p, c, 12);
    add_attr_s(p->nd, "equation", c->s[0]);
    const kiln_tensor *in[3];
    int lab[3][KILN_MAX_DIMS], out[26], n_out = 0, seen[26] = {0};
    int64_t size[26];
    for (int l = 0; l < 26; l++)
        size[l] = 1;
    const char *q = c->s[0];
    for (int i = 0; i < nops; i++) {
        kiln_tensor *t = in_shape(p, i, c->dt, &c->sh[i]);
        if (is_float(c->dt))
            fill_uni(t, seed, -1.0, 1.0);
        else
            fill_uni(t, seed, -9.0, 9.0);
        in[i] = t;
        for (int d = 0; d < t->ndim; d++, q++) {
            lab[i][d] = *q - 'a';
            seen[lab[i][d]]++;
            if (t->dims[d] != 1)
                size[lab[i][d]] = t->dims[d];
        }
        if (*q == ',')
            q++;
    }
    if (q[0] == '-' && q[1] == '>')   /* explicit output; else implicit (never read past the string's end) */
        for (q += 2; *q; q++)
            out[n_out++] = *q - 'a';
    else
        for (int l = 0; l < 26; l++)
            if (seen[l] == 1)
                out[n_out++] = l;
    int64_t dims[KILN_MAX_DIMS];
    for (int j = 0; j < n_out; j++)
        dims[j] = size[out[j]];
    bool fl = is_float(c->dt);
    expect *e = ex_new(p, 0, fl ? EK_FLOAT : EK_INT, fl ? TOL_REL : TOL_EXACT, c->dt, n_out, dims);
    double *sc = fl ? ex_scale(e) : NULL;
    int used[26], nu = 0;
    for (int l = 0; l < 26; l++)
        if (seen[l])
            used[nu++] = l;
    int64_t total = 1, idx[26] = {0};
    for (int k = 0; k < nu; k++)
        total *= size[used[k]];
    for (int64_t a = 0; a < total; a++) {
        int64_t r = a;
        for (int k = nu - 1; k >= 0; k--) {
            idx[used[k]] = r % size[used[k]];
            r /= size[used[k]];
        }
        double pr = 1;
        int64_t pi = 1;
        for (int i = 0; i < nops; i++) {
            int64_t off = 0;
            for (int d = 0; d < in[i]->ndim; d++)
                off = off * in[i]->dims[d] + (in[i]->dims[d] == 1 ? 0 : idx[lab[i][d]]);
            pr *= getd(in[i], off);
            pi *= geti(in[i], off);
        }
        int64_t o = 0;
        for (int j = 0; j < n_out; j++)
            o = o * dims[j] + idx[out[j]];
        if (fl) {
            e->v[o] += pr;
            sc[o] += fabs(pr);
        } else {
            e->iv[o] += pi;
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * MatMul, Gemm
 * --------------------------------------------------------------------------------------- */

/* sh = {A, B}: numpy matmul semantics (1-D promotion, batch broadcasting) */
static void fam_matmul(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_MatMul, 2, 1);
    p->n_in = 2;
    set_opset(p, c, 13);
    kiln_tensor *A = in_shape(p, 0, c->dt, &c->sh[0]), *B = in_shape(p, 1, c->dt, &c->sh[1]);
    fill_uni(A, seed, -1.0, 1.0);
    fill_uni(B, seed, -1.0, 1.0);
    /* promoted shapes */
    int an = A->ndim, bn = B->ndim;
    int64_t ad[KILN_MAX_DIMS + 1], bd[KILN_MAX_DIMS + 1];
    if (an == 1) {
        ad[0] = 1, ad[1] = A->dims[0], an = 2;
    } else {
        memcpy(ad, A->dims, sizeof(int64_t) * (size_t)an);
    }
    if (bn == 1) {
        bd[0] = B->dims[0], bd[1] = 1, bn = 2;
    } else {
        memcpy(bd, B->dims, sizeof(int64_t) * (size_t)bn);
    }
    int64_t M = ad[an - 2], K = ad[an - 1], N = bd[bn - 1];
    int abn = an - 2, bbn = bn - 2, nb = abn > bbn ? abn : bbn;
    int64_t bdims[KILN_MAX_DIMS] = {0}, dims[KILN_MAX_DIMS] = {0}, bi[KILN_MAX_DIMS];
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - abn), db = d - (nb - bbn);
        int64_t x = da >= 0 ? ad[da] : 1, y = db >= 0 ? bd[db] : 1;
        bdims[d] = x == 1 ? y : x;
    }
    int nd = 0;
    for (int d = 0; d < nb; d++)
        dims[nd++] = bdims[d];
    if (A->ndim != 1)
        dims[nd++] = M;
    if (B->ndim != 1)
        dims[nd++] = N;
    expect *e = ex_new(p, 0, EK_FLOAT, TOL_REL, c->dt, nd, dims);
    double *sc = ex_scale(e);
    int64_t nbatch = 1;
    for (int d = 0; d < nb; d++)
        nbatch *= bdims[d];
    for (int64_t bt = 0; bt < nbatch; bt++) {
        unravel(bt, nb, bdims, bi);
        int64_t ao = boff(abn, ad, nb, bi) * M * K, bo = boff(bbn, bd, nb, bi) * K * N;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0, a = 0;
                for (int64_t k = 0; k < K; k++) {
                    double t = getd(A, ao + m * K + k) * getd(B, bo + k * N + n);
                    s += t;
                    a += fabs(t);
                }
                e->v[(bt * M + m) * N + n] = s;
                sc[(bt * M + m) * N + n] = a;
            }
    }
}

/* k = {M, N, K, flags (1: transA, 2: transB)}; nsh == 3: C of shape sh[2];
 * nf >= 1: alpha f[0], nf >= 2: beta f[1] */
static void fam_gemm(prob *p, const kcase *c, unsigned long long *seed)
{
    bool ta = c->k[3] & 1, tb = c->k[3] & 2, hc = c->nsh == 3;
    int64_t M = c->k[0], N = c->k[1], K = c->k[2];
    p->nd = make_node(KILN_OP_Gemm, hc ? 3 : 2, 1);
    p->n_in = hc ? 3 : 2;
    set_opset(p, c, 13);
    if (ta)
        add_attr_i(p->nd, "transA", 1);
    if (tb)
        add_attr_i(p->nd, "transB", 1);
    double alpha = 1, beta = 1;
    if (c->nf >= 1) {
        add_attr_f(p->nd, "alpha", (float)c->f[0]);
        alpha = (float)c->f[0];
    }
    if (c->nf >= 2) {
        add_attr_f(p->nd, "beta", (float)c->f[1]);
        beta = (float)c->f[1];
    }
    int64_t adims[2] = {ta ? K : M, ta ? M : K}, bdims[2] = {tb ? N : K, tb ? K : N}, dims[2] = {M, N};
    kiln_tensor *A = in_new(p, 0, c->dt, 2, adims), *B = in_new(p, 1, c->dt, 2, bdims), *C = NULL;
    fill_uni(A, seed, -1.0, 1.0);
    fill_uni(B, seed, -1.0, 1.0);
    if (hc) {
        C = in_shape(p, 2, c->dt, &c->sh[2]);
        fill_uni(C, seed, -1.0, 1.0);
    }
    expect *e = ex_new(p, 0, EK_FLOAT, TOL_REL, c->dt, 2, dims);
    double *sc = ex_scale(e);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, a = 0;
            for (int64_t k = 0; k < K; k++) {
                double t = getd(A, ta ? k * M + m : m * K + k) * getd(B, tb ? n * K + k : k * N + n);
                s += t;
                a += fabs(t);
            }
            int64_t idx[2] = {m, n};
            double cv = C ? beta * getd(C, boff(C->ndim, C->dims, 2, idx)) : 0.0;
            e->v[m * N + n] = alpha * s + cv;
            sc[m * N + n] = fabs(alpha) * a + fabs(cv);
        }
}

/* ---------------------------------------------------------------------------------------
 * Resize (scales input)
 * --------------------------------------------------------------------------------------- */

/* f[0..r-1]: scales, s[0]: mode, s[1]: coordinate_transformation_mode (NULL: default
 * half_pixel), s[2]: nearest_mode (NULL: default round_prefer_floor) */
static void fam_resize(prob *p, const kcase *c, unsigned long long *seed)
{
    p->nd = make_node(KILN_OP_Resize, 3, 1);
    p->n_in = 3;
    set_opset(p, c, 13);
    const char *mode = c->s[0], *ctm = c->s[1] ? c->s[1] : "half_pixel";
    const char *nm = c->s[2] ? c->s[2] : "round_prefer_floor";
    add_attr_s(p->nd, "mode", mode);
    if (c->s[1])
        add_attr_s(p->nd, "coordinate_transformation_mode", c->s[1]);
    if (c->s[2])
        add_attr_s(p->nd, "nearest_mode", c->s[2]);
    kiln_tensor *X = in_shape(p, 0, c->dt, &c->sh[0]);
    if (is_float(c->dt))
        fill_uni(X, seed, -5.0, 5.0);
    else
        fill_rand(X, seed);
    int r = X->ndim;
    int64_t rn = r;
    kiln_tensor *S = in_new(p, 2, F32, 1, &rn);
    double scale[KILN_MAX_DIMS];
    int64_t dims[KILN_MAX_DIMS] = {0}, idx[KILN_MAX_DIMS];
    for (int d = 0; d < r; d++) {
        setd(S, d, c->f[d]);
        scale[d] = getd(S, d); /* the float32 value the kernel sees */
        dims[d] = (int64_t)floor((double)X->dims[d] * scale[d]);
    }
    bool nearest = !strcmp(mode, "nearest");
    expect *e = ex_new(p, 0, nearest ? EK_MAP : EK_FLOAT, nearest ? TOL_EXACT : TOL_REL, c->dt, r, dims);
    double *sc = nearest ? NULL : ex_scale(e);
    /* per axis and output coordinate: source coordinate */
    double *xo[KILN_MAX_DIMS];
    for (int d = 0; d < r; d++) {
        xo[d] = xcalloc((size_t)dims[d], sizeof(double));
        for (int64_t o = 0; o < dims[d]; o++) {
            double x;
            if (!strcmp(ctm, "asymmetric"))
                x = (double)o / scale[d];
            else if (!strcmp(ctm, "align_corners"))
                x = dims[d] == 1 ? 0.0 : (double)o * (double)(X->dims[d] - 1) / (double)(dims[d] - 1);
            else if (!strcmp(ctm, "pytorch_half_pixel"))
                x = dims[d] > 1 ? ((double)o + 0.5) / scale[d] - 0.5 : 0.0;
            else /* half_pixel */
                x = ((double)o + 0.5) / scale[d] - 0.5;
            xo[d][o] = x;
        }
    }
    for (int64_t i = 0; i < e->n; i++) {
        unravel(i, r, dims, idx);
        if (nearest) {
            int64_t si[KILN_MAX_DIMS];
            for (int d = 0; d < r; d++) {
                double x = xo[d][idx[d]], fl = floor(x), v;
                if (!strcmp(nm, "floor"))
                    v = fl;
                else if (!strcmp(nm, "ceil"))
                    v = ceil(x);
                else if (x - fl == 0.5)
                    v = !strcmp(nm, "round_prefer_ceil") ? fl + 1 : fl;
                else
                    v = round(x);
                int64_t j = (int64_t)v;
                si[d] = j < 0 ? 0 : j > X->dims[d] - 1 ? X->dims[d] - 1 : j;
            }
            e->map[i] = MAP(0, ravel(r, X->dims, si));
        } else {
            int64_t i0[KILN_MAX_DIMS], i1[KILN_MAX_DIMS], si[KILN_MAX_DIMS];
            double w1[KILN_MAX_DIMS];
            for (int d = 0; d < r; d++) {
                double x = xo[d][idx[d]], hi = (double)(X->dims[d] - 1);
                x = x < 0 ? 0 : x > hi ? hi : x;
                i0[d] = (int64_t)floor(x);
                i1[d] = i0[d] + 1 > X->dims[d] - 1 ? X->dims[d] - 1 : i0[d] + 1;
                w1[d] = x - (double)i0[d];
            }
            double v = 0, a = 0;
            for (int corner = 0; corner < (1 << r); corner++) {
                double w = 1;
                for (int d = 0; d < r; d++) {
                    bool up = (corner >> d) & 1;
                    si[d] = up ? i1[d] : i0[d];
                    w *= up ? w1[d] : 1.0 - w1[d];
                }
                if (w == 0)
                    continue;
                double t = w * getd(X, ravel(r, X->dims, si));
                v += t;
                a += fabs(t);
            }
            e->v[i] = v;
            sc[i] = a;
        }
    }
    for (int d = 0; d < r; d++)
        free(xo[d]);
}

/* ---------------------------------------------------------------------------------------
 * the table
 * --------------------------------------------------------------------------------------- */

#define UN(OP, DT, L_, H_) {.build = fam_unary, .op = KILN_OP_##OP, .dt = DT, .sh = {SWEEP}, .lo = L_, .hi = H_}
#define UNA(OP, DT, NF, A_, B_)                                                                                \
    {.build = fam_unary, .op = KILN_OP_##OP, .dt = DT, .sh = {SWEEP}, .nf = NF, .f = {A_, B_}}
#define CLIP(DT, WHICH, MIN_, MAX_)                                                                            \
    {.build = fam_unary, .op = KILN_OP_Clip, .dt = DT, .sh = {SWEEP}, .k = {WHICH}, .f = {MIN_, MAX_}}
#define UNS(OP, DT, INF) {.build = fam_unary, .op = KILN_OP_##OP, .dt = DT, .sh = {SWEEP}, .k = {0, INF ? 2 : 1}}
#define UNX(OP, DT, S_) {.build = fam_unary, .op = KILN_OP_##OP, .dt = DT, .sh = {S_}}
#define GELU(DT, APPROX, L_, H_)                                                                               \
    {.build = fam_unary, .op = KILN_OP_Gelu, .dt = DT, .sh = {SWEEP}, .s = {APPROX}, .lo = L_, .hi = H_}

#define BIN(OP, DT, A_, B_) {.build = fam_binary, .op = KILN_OP_##OP, .dt = DT, .sh = {A_, B_}}
/* the broadcasting patterns every float32 binary op runs through */
#define BIN_SHAPES(OP, DT)                                                                                     \
    BIN(OP, DT, SWEEP, SWEEP), BIN(OP, DT, SH(2, 3, 5, 7), SCALAR), BIN(OP, DT, SCALAR, SH(255)),             \
    BIN(OP, DT, SH(2, 3, 17, 33), SH(1, 3, 1, 1)), BIN(OP, DT, SH(2, 16, 47, 47), SH(1, 16, 1, 1)),          \
    BIN(OP, DT, SH(2, 7, 768), SH(768)), BIN(OP, DT, SH(3, 33, 768), SH(768)),                                \
    BIN(OP, DT, SH(3, 1, 5), SH(1, 4, 1)), BIN(OP, DT, SH(7, 1, 3), SH(5, 1)), BIN(OP, DT, SH(1), SH(17, 1)), \
    BIN(OP, DT, SH(2, 1, 33), SH(1, 9, 1)), BIN(OP, DT, SH(257, 1), SH(1, 257)),                              \
    BIN(OP, DT, SH(1, 255), SH(33, 1)), BIN(OP, DT, SH(5, 1, 1, 7), SH(3, 1))
#define BIN_INT_SHAPES(OP, DT)                                                                                 \
    BIN(OP, DT, SWEEP, SWEEP), BIN(OP, DT, SH(7, 1, 3), SH(5, 1)), BIN(OP, DT, SH(33, 17), SCALAR),           \
    BIN(OP, DT, SH(257, 1), SH(1, 257)), BIN(OP, DT, SH(3, 1, 5), SH(1, 4, 1))
#define BIN_F16_SHAPES(OP)                                                                                     \
    BIN(OP, F16, SWEEP, SWEEP), BIN(OP, F16, SH(2, 3, 17, 33), SH(1, 3, 1, 1)),                                \
    BIN(OP, F16, SH(3, 1, 5), SH(1, 4, 1)), BIN(OP, F16, SH(3, 33, 768), SH(768))
#define POWS(E_) {.build = fam_binary, .op = KILN_OP_Pow, .dt = F32, .sh = {SWEEP, SCALAR}, .nf = 1, .f = {E_}, \
                  .lo = -3, .hi = 3}

#define WHERE(DT, C_, X_, Y_) {.build = fam_where, .op = KILN_OP_Where, .dt = DT, .sh = {C_, X_, Y_}}
#define TRANSP(DT, S_, P_) {.build = fam_transpose, .op = KILN_OP_Transpose, .dt = DT, .sh = {S_}, .iv = {P_}}
#define CONCAT(DT, AX, N_, ...)                                                                                \
    {.build = fam_concat, .op = KILN_OP_Concat, .dt = DT, .nsh = N_, .sh = {__VA_ARGS__}, .k = {AX}}
#define SLICE(DT, S_, ST, EN, AX, STEP)                                                                        \
    {.build = fam_slice, .op = KILN_OP_Slice, .dt = DT, .sh = {S_}, .iv = {ST, EN, AX, STEP}}
#define GATHER(DT, S_, I_, AX, I32_)                                                                           \
    {.build = fam_gather, .op = KILN_OP_Gather, .dt = DT, .sh = {S_, I_}, .k = {AX, I32_}}
#define RESHAPE(DT, S_, T_) {.build = fam_reshape, .op = KILN_OP_Reshape, .dt = DT, .sh = {S_}, .iv = {T_}}
#define EXPAND(DT, S_, T_) {.build = fam_expand, .op = KILN_OP_Expand, .dt = DT, .sh = {S_}, .iv = {T_}}
#define TILE(DT, S_, R_) {.build = fam_tile, .op = KILN_OP_Tile, .dt = DT, .sh = {S_}, .iv = {R_}}

#define RED(OP, S_, AX, KEEP) {.build = fam_reduce, .op = KILN_OP_##OP, .dt = F32, .sh = {S_}, .iv = {AX}, .k = {KEEP}}
#define RED18(OP, S_, AX, KEEP)                                                                                \
    {.build = fam_reduce, .op = KILN_OP_##OP, .dt = F32, .opset = 18, .sh = {S_}, .iv = {AX}, .k = {KEEP}}
#define SMAX(OP, S_, AX) {.build = fam_softmax, .op = KILN_OP_##OP, .dt = F32, .sh = {S_}, .k = {AX}}
#define LN(S_, AX, BIAS, STATS) {.build = fam_layernorm, .op = KILN_OP_LayerNormalization, .dt = F32, .sh = {S_}, \
                                 .k = {AX, BIAS, STATS}}
#define BN(S_) {.build = fam_batchnorm, .op = KILN_OP_BatchNormalization, .dt = F32, .sh = {S_}}
#define MM(DT, A_, B_) {.build = fam_matmul, .op = KILN_OP_MatMul, .dt = DT, .sh = {A_, B_}}
#define GEMM(M_, N_, K_, FL) {.build = fam_gemm, .op = KILN_OP_Gemm, .dt = F32, .k = {M_, N_, K_, FL}}
#define GEMMC(M_, N_, K_, FL, C_, AL, BE)                                                                      \
    {.build = fam_gemm, .op = KILN_OP_Gemm, .dt = F32, .nsh = 3, .sh = {SCALAR, SCALAR, C_}, .k = {M_, N_, K_, FL}, \
     .nf = 2, .f = {AL, BE}}
#define RESIZE(DT, S_, MODE, CTM, NM, S0, S1, S2, S3)                                                          \
    {.build = fam_resize, .op = KILN_OP_Resize, .dt = DT, .sh = {S_}, .s = {MODE, CTM, NM}, .f = {S0, S1, S2, S3}}

static const kcase k_cases[] = {
    /* ---- unary float32 ---- */
    UN(Relu, F32, 0, 0), UN(Sigmoid, F32, -20, 20), UN(Tanh, F32, -10, 10), UN(Tanh, F32, -1, 1),
    UN(Exp, F32, -20, 20), UN(Exp, F32, -100, 89), UN(Log, F32, 0, 0), UN(Sqrt, F32, 0, 0), UN(Erf, F32, -5, 5),
    UN(Erf, F32, -1.5, 1.5), GELU(F32, NULL, -8, 8), GELU(F32, "none", -3, 3), GELU(F32, "tanh", -8, 8),
    UN(HardSigmoid, F32, -6, 6), UNA(HardSigmoid, F32, 2, 0.3, 0.6), UN(HardSwish, F32, -6, 6),
    UN(LeakyRelu, F32, 0, 0), UNA(LeakyRelu, F32, 1, 0.2, 0), UN(Elu, F32, 0, 0), UNA(Elu, F32, 1, 0.7, 0),
    UN(Softplus, F32, -20, 20), UN(Abs, F32, 0, 0), UN(Neg, F32, 0, 0),
    CLIP(F32, 3, -1.5, 2.25), CLIP(F32, 1, -0.5, 0), CLIP(F32, 2, 0, 1.75), CLIP(F32, 0, 0, 0),
    /* ---- unary float16 ---- */
    UN(Relu, F16, 0, 0), UN(Sigmoid, F16, -10, 10), UN(Tanh, F16, -5, 5), UN(Exp, F16, -8, 8), UN(Abs, F16, 0, 0),
    UN(Neg, F16, 0, 0), UN(HardSwish, F16, -6, 6), GELU(F16, NULL, -6, 6), GELU(F16, "tanh", -6, 6),
    UN(Erf, F16, -3, 3), CLIP(F16, 3, -1.5, 2.25), UN(Exp, F16, -8, 12), UN(Exp, F16, -20, 2),
    UN(Sigmoid, F16, -20, 20), UN(LeakyRelu, F16, 0, 0),
    /* ---- special values (signed zeros, NaN, huge, denormal, thresholds, +-inf) ---- */
    UNS(Relu, F32, 1), UNS(Sigmoid, F32, 1), UNS(Tanh, F32, 1), UNS(Exp, F32, 1), UNS(Log, F32, 1),
    UNS(Sqrt, F32, 1), UNS(Erf, F32, 1), UNS(HardSigmoid, F32, 1), UNS(HardSwish, F32, 1), UNS(LeakyRelu, F32, 1),
    UNS(Elu, F32, 1), UNS(Softplus, F32, 1), UNS(Abs, F32, 1), UNS(Neg, F32, 1), UNS(Gelu, F32, 0),
    {.build = fam_unary, .op = KILN_OP_Gelu, .dt = F32, .sh = {SWEEP}, .k = {0, 1}, .s = {"tanh"}},
    {.build = fam_unary, .op = KILN_OP_Clip, .dt = F32, .sh = {SWEEP}, .k = {3, 2}, .f = {-1.5, 2.25}},
    UNS(Relu, F16, 1), UNS(Sigmoid, F16, 1), UNS(Tanh, F16, 1), UNS(Exp, F16, 1), UNS(Abs, F16, 1),
    /* ---- empty tensors ---- */
    UNX(Relu, F32, SH(0)), UNX(Exp, F32, SH(3, 0)), UNX(Tanh, F16, SH(0, 7)),

    /* ---- binary float32 with broadcasting ---- */
    BIN_SHAPES(Add, F32), BIN_SHAPES(Sub, F32), BIN_SHAPES(Mul, F32), BIN_SHAPES(Div, F32), BIN_SHAPES(Pow, F32),
    BIN_SHAPES(Max, F32), BIN_SHAPES(Min, F32), BIN_SHAPES(Equal, F32), BIN_SHAPES(Less, F32),
    BIN(Greater, F32, SH(3, 1, 5), SH(1, 4, 1)), POWS(2.0), POWS(3.0), POWS(0.5), POWS(1.0), POWS(-1.0),
    /* more broadcast patterns, large enough for several threads to start mid-row */
    BIN(Add, F32, SH(5, 1, 7, 2003), SH(5, 3, 1, 1)), BIN(Mul, F32, SH(3, 70001), SH(3, 1)),
    BIN(Sub, F32, SH(263, 257), SH(263, 1)), BIN(Div, F32, SH(1), SH(70001)), BIN(Max, F32, SH(70001, 1), SH(1)),
    BIN(Add, F32, SH(2, 1, 3, 1, 5), SH(1, 4, 1, 6, 1)), BIN(Mul, F32, SH(4, 1, 3, 1, 5, 1, 2), SH(1, 2, 1, 3, 1, 4, 1)),
    BIN(Min, F32, SH(3, 1, 257, 1), SH(1, 5, 1, 61)), BIN(Less, F32, SH(1, 255, 1), SH(300, 1, 1)),
    BIN(Pow, F32, SH(2, 1, 70001), SH(1, 2, 1)), BIN(Equal, F32, SH(70001), SCALAR),
    BIN(Add, F32, SH(0, 3), SH(3)), BIN(Mul, F32, SH(2, 0, 5), SH(1, 1, 5)), BIN(Add, F32, SH(1, 5), SH(0, 1)),
    /* ---- binary integer (Div by zero must not crash; those elements are not compared) ---- */
    BIN_INT_SHAPES(Add, I64), BIN_INT_SHAPES(Mul, I64), BIN_INT_SHAPES(Div, I64), BIN_INT_SHAPES(Sub, I64),
    BIN_INT_SHAPES(Add, I32), BIN_INT_SHAPES(Mul, I32), BIN_INT_SHAPES(Div, I32),
    BIN(Equal, I64, SH(7, 1, 3), SH(5, 1)), BIN(Less, I32, SWEEP, SWEEP), BIN(Add, I64, SH(3, 70001), SH(70001)),
    BIN(Div, I32, SH(257, 263), SH(263)), BIN(Mul, I32, SH(263, 1), SH(1, 257)), BIN(Div, I64, SH(5, 1, 7, 2003), SH(5, 3, 1, 1)),
    /* ---- binary float16 ---- */
    BIN_F16_SHAPES(Add), BIN_F16_SHAPES(Mul), BIN_F16_SHAPES(Div), BIN_F16_SHAPES(Sub), BIN_F16_SHAPES(Max),
    BIN(Add, F16, SH(5, 1, 7, 2003), SH(5, 3, 1, 1)), BIN(Pow, F16, SH(7, 33), SH(33)),
    /* ---- Where ---- */
    WHERE(F32, SWEEP, SWEEP, SWEEP), WHERE(F32, SH(3, 1, 5), SH(1, 4, 1), SH(5)),
    WHERE(F32, SH(2, 3, 17, 33), SH(1, 3, 1, 1), SCALAR), WHERE(F32, SH(768), SH(3, 33, 768), SH(3, 33, 1)),
    WHERE(I64, SH(257, 1), SH(1, 257), SH(257, 257)), WHERE(F16, SH(7, 1, 3), SH(5, 1), SH(1)),
    WHERE(U8, SWEEP, SWEEP, SCALAR), WHERE(I32, SCALAR, SH(17, 3), SH(3)),
    WHERE(F32, SH(3, 1, 70001), SH(3, 2, 1), SH(70001)), WHERE(BOOL, SH(2, 1, 33), SH(1, 9, 1), SH(9, 33)),
    WHERE(F32, SH(0, 3), SH(3), SH(1)),

    /* ---- Transpose ---- */
    TRANSP(F32, SH(2, 37, 5, 19), SH(0, 2, 1, 3)), TRANSP(F32, SH(33, 17), SH(1, 0)),
    TRANSP(F32, SH(3, 5, 7), SH(2, 0, 1)), TRANSP(F32, SH(3, 5, 7), SH(1, 2, 0)),
    TRANSP(F32, SH(3, 5, 7), SH(2, 1, 0)), TRANSP(F32, SH(3, 5, 7), SCALAR), TRANSP(F32, SH(1, 1, 1), SH(2, 0, 1)),
    TRANSP(F32, SH(17), SH(0)), TRANSP(F32, SH(257, 263), SH(1, 0)), TRANSP(F32, SH(4, 33, 17, 31), SH(0, 3, 1, 2)),
    TRANSP(F32, SH(2, 33, 37, 31), SH(0, 2, 1, 3)), TRANSP(F32, SH(2, 3, 4, 5, 6, 7), SH(5, 4, 3, 2, 1, 0)),
    TRANSP(F32, SH(1, 7, 1, 9), SH(3, 1, 2, 0)), TRANSP(F32, SH(2, 3, 1, 5, 1, 7, 3), SH(6, 0, 4, 1, 3, 2, 5)),
    TRANSP(I64, SH(2, 37, 5, 19), SH(0, 2, 1, 3)), TRANSP(I64, SH(255, 3), SH(1, 0)),
    TRANSP(F16, SH(3, 17, 33), SH(0, 2, 1)), TRANSP(U8, SH(7, 255, 3), SH(2, 0, 1)),
    TRANSP(U8, SH(300, 257), SH(1, 0)), TRANSP(F16, SH(257, 263), SH(1, 0)),
    TRANSP(F32, SH(3, 5, 67, 71), SH(3, 2, 0, 1)), TRANSP(I64, SH(2, 3, 5, 7, 11, 31), SH(1, 3, 5, 0, 2, 4)),
    TRANSP(F32, SH(0, 5), SH(1, 0)), TRANSP(F32, SH(33, 1, 2003), SH(2, 1, 0)),
    /* ---- Concat ---- */
    CONCAT(F32, 0, 3, SH(3, 5, 7), SH(2, 5, 7), SH(1, 5, 7)), CONCAT(F32, 1, 2, SH(4, 1, 6), SH(4, 3, 6)),
    CONCAT(F32, -1, 3, SH(2, 3, 1), SH(2, 3, 17), SH(2, 3, 7)), CONCAT(F32, 1, 2, SH(2, 300, 100), SH(2, 60, 100)),
    CONCAT(F32, -1, 2, SH(255, 200), SH(255, 77)), CONCAT(F32, 1, 2, SH(3, 0, 7), SH(3, 5, 7)),
    CONCAT(F32, 0, 2, SH(17), SH(33)), CONCAT(I64, -2, 2, SH(3, 5, 7), SH(3, 2, 7)),
    CONCAT(F16, 2, 3, SH(2, 3, 5), SH(2, 3, 1), SH(2, 3, 4)), CONCAT(U8, 1, 2, SH(7, 3), SH(7, 255)),
    /* ---- Slice (starts, ends, axes, steps) ---- */
    SLICE(F32, SH(20, 33), SH(-1), SH(-1000), SH(1), SH(-1)),
    SLICE(F32, SH(17, 9, 7), SH(15, -2), SH(1, 0), SH(0, 2), SH(-3, -2)),
    SLICE(F32, SH(17, 9, 7), SH(1), SH(INT64_MAX), SH(-2), SH(2)),
    SLICE(F32, SH(17, 9, 7), SH(2, 1), SH(-3, 100), SCALAR, SCALAR),
    SLICE(F32, SH(33, 17, 5), SH(5, -100, 3), SH(1000, 100, 4), SH(0, 1, -1), SH(7, 3, 1)),
    SLICE(F32, SH(300, 257), SH(-1), SH(INT64_MIN), SH(0), SH(-1)),
    SLICE(F32, SH(3, 257, 129), SH(256, 100), SH(-258, 0), SH(1, 2), SH(-2, -3)),
    SLICE(F32, SH(7, 7), SH(5), SH(2), SH(0), SH(1)), /* empty result */
    SLICE(I64, SH(2, 37, 5, 19), SH(1, -1, 3), SH(36, -20, 0), SH(1, 3, 2), SH(4, -2, -1)),
    SLICE(U8, SH(255), SH(254), SH(-256), SH(0), SH(-7)),
    SLICE(F32, SH(400, 300), SH(1, 299), SH(400, -400), SH(0, 1), SH(1, -1)),
    /* ---- Gather (data, indices, axis, int32 indices) ---- */
    GATHER(F32, SH(5, 7), SH(3), 0, 0), GATHER(F32, SH(5, 7), SH(2, 3), 1, 0), GATHER(F32, SH(2, 37, 5), SH(4, 2), 1, 1),
    GATHER(F32, SH(2, 37, 5), SCALAR, -1, 0), GATHER(F32, SH(1000, 80), SH(900), 0, 0),
    GATHER(F32, SH(33, 255, 3), SH(17, 5), 1, 0), GATHER(I64, SH(17, 3), SH(7, 1), 0, 1),
    GATHER(F16, SH(3, 33), SH(33), -1, 0), GATHER(U8, SH(7), SH(3, 5, 7), 0, 0),
    GATHER(F32, SH(33, 255, 17), SH(300), 1, 1), GATHER(F32, SH(5, 7), SH(0), 1, 0),
    /* ---- Reshape / Expand / Tile ---- */
    RESHAPE(F32, SH(2, 3, 4), SH(4, -1)), RESHAPE(F32, SH(2, 3, 4), SH(0, -1)), RESHAPE(F32, SH(2, 3, 4), SH(24)),
    RESHAPE(F32, SH(2, 3, 4), SH(2, 3, 4, 1)), RESHAPE(F32, SH(1), SCALAR), RESHAPE(I64, SH(7, 11, 13), SH(0, 0, -1)),
    RESHAPE(F32, SH(70007), SH(-1, 7)),
    EXPAND(F32, SH(3, 1), SH(2, 3, 5)), EXPAND(F32, SH(1, 4, 1), SH(3, 1, 5)), EXPAND(F32, SH(1), SH(7, 1, 3)),
    EXPAND(F32, SH(17, 1, 1), SH(17, 33, 129)), EXPAND(F32, SH(5, 7), SH(1, 1)), EXPAND(F32, SCALAR, SH(3, 3)),
    EXPAND(I64, SH(33, 1), SH(2, 1, 255)), EXPAND(F16, SH(1, 3, 1), SH(7, 1, 5)), EXPAND(U8, SH(1), SH(70001)),
    EXPAND(F32, SH(1, 255, 1), SH(3, 255, 97)), EXPAND(F32, SH(3, 1), SH(3, 0)),
    TILE(F32, SH(2, 3), SH(3, 2)), TILE(F32, SH(1, 5, 1), SH(2, 1, 7)), TILE(F32, SH(3), SH(1)),
    TILE(F32, SH(33, 17), SH(15, 9)), TILE(F32, SH(3, 5), SH(1, 0)), TILE(I64, SH(2, 1, 3), SH(1, 17, 2)),
    TILE(F16, SH(7), SH(5)), TILE(U8, SH(255, 1), SH(1, 300)),

    /* ---- reductions (axes, keepdims) ---- */
    RED(ReduceMean, SH(3, 5, 7), SH(-1), 1), RED(ReduceMean, SH(3, 5, 7), SH(-1), 0),
    RED(ReduceMean, SH(3, 5, 7), SH(1), 1), RED(ReduceMean, SH(3, 5, 7), SH(1), 0),
    RED(ReduceMean, SH(3, 5, 7), SH(0, 2), 1), RED(ReduceMean, SH(3, 5, 7), SCALAR, 0),
    RED(ReduceMean, SH(2, 33, 17, 5), SH(1, 2), 0), RED(ReduceMean, SH(300, 257), SH(1), 1),
    RED(ReduceMean, SH(257, 300), SH(0), 0), RED(ReduceMean, SH(7, 70001), SH(-1), 1),
    RED(ReduceMean, SH(1, 255, 1), SH(1), 0), RED(ReduceMean, SH(2, 768, 49), SH(2), 1),
    RED18(ReduceMean, SH(3, 17, 33), SH(-2), 0),
    RED(ReduceSum, SH(3, 5, 7), SH(-1), 1), RED(ReduceSum, SH(3, 5, 7), SH(-1), 0),
    RED(ReduceSum, SH(3, 5, 7), SH(1), 0), RED(ReduceSum, SH(3, 5, 7), SH(1), 1),
    RED(ReduceSum, SH(3, 5, 7), SCALAR, 1), RED(ReduceSum, SH(2, 33, 17, 5), SH(1, 2), 1),
    RED(ReduceSum, SH(300, 257), SH(1), 0), RED(ReduceSum, SH(257, 300), SH(0), 1),
    RED(ReduceSum, SH(7, 70001), SH(-1), 0), RED(ReduceSum, SH(4, 129, 131), SH(0, 2), 0),
    RED(ReduceMax, SH(3, 5, 7), SH(-1), 1), RED(ReduceMax, SH(3, 5, 7), SH(-1), 0),
    RED(ReduceMax, SH(3, 5, 7), SH(1), 0), RED(ReduceMax, SH(3, 5, 7), SH(1), 1),
    RED(ReduceMax, SH(3, 5, 7), SCALAR, 0), RED(ReduceMax, SH(2, 33, 17, 5), SH(1, 2), 1),
    RED(ReduceMax, SH(300, 257), SH(1), 0), RED(ReduceMax, SH(257, 300), SH(0), 1),
    RED(ReduceMax, SH(7, 70001), SH(-1), 1), RED(ReduceMax, SH(2, 3, 5, 7), SH(0, 3), 0),
    RED(ReduceSum, SH(64, 33, 40), SH(0, 2), 1), RED(ReduceMax, SH(64, 33, 40), SH(1), 0),
    RED(ReduceMean, SH(2, 3, 4, 5, 6, 7, 8), SH(1, 3, 5), 0), RED(ReduceMean, SH(64, 33, 40), SH(-3, -1), 0),
    RED(ReduceSum, SH(3, 0, 5), SH(1), 1), RED(ReduceMax, SH(255, 300), SH(-1), 0),
    /* NaN in the reduced set: ReduceMax/Min give NaN (row, column, strided and float16 paths) */
#define RED_NAN(OP, DT, S_, AX) {.build = fam_reduce, .op = KILN_OP_##OP, .dt = DT, .sh = {S_}, .iv = {AX}, .k = {0, 1}}
    RED_NAN(ReduceMax, F32, SH(30, 3), SH(-1)), RED_NAN(ReduceMax, F32, SH(30, 37), SH(-1)),
    RED_NAN(ReduceMax, F32, SH(3, 37, 20), SH(1)), RED_NAN(ReduceMax, F32, SH(6, 5, 7), SH(0, 2)),
    RED_NAN(ReduceMax, F32, SH(6, 50), SCALAR), RED_NAN(ReduceMax, F16, SH(30, 37), SH(-1)),
    RED_NAN(ReduceMin, F32, SH(30, 3), SH(-1)), RED_NAN(ReduceMin, F32, SH(30, 37), SH(-1)),
    RED_NAN(ReduceMin, F32, SH(3, 37, 20), SH(1)), RED_NAN(ReduceMin, F32, SH(6, 5, 7), SH(0, 2)),
    RED_NAN(ReduceMin, F32, SH(6, 50), SCALAR), RED_NAN(ReduceMin, F16, SH(30, 37), SH(-1)),
    /* noop_with_empty_axes=1, no axes (opset 18): each element reduced alone */
#define RED_NOOP(OP, DT, S_) {.build = fam_reduce, .op = KILN_OP_##OP, .dt = DT, .opset = 18, .sh = {S_}, .k = {1, 0, 1}}
    RED_NOOP(ReduceSumSquare, F32, SH(3, 37)), RED_NOOP(ReduceL1, F32, SH(3, 37)), RED_NOOP(ReduceL2, F32, SH(3, 37)),
    RED_NOOP(ReduceLogSum, F32, SH(3, 37)), RED_NOOP(ReduceLogSumExp, F32, SH(3, 37)),
    RED_NOOP(ReduceSum, F32, SH(3, 37)), RED_NOOP(ReduceMean, F32, SH(3, 37)), RED_NOOP(ReduceMax, F32, SH(3, 37)),
    RED_NOOP(ReduceMin, F32, SH(3, 37)), RED_NOOP(ReduceProd, F32, SH(3, 37)),
    RED_NOOP(ReduceSumSquare, F16, SH(5, 7)), RED_NOOP(ReduceL2, F16, SH(5, 7)), RED_NOOP(ReduceLogSum, F16, SH(5, 7)),
    RED_NOOP(ReduceSumSquare, F32, SCALAR), RED_NOOP(ReduceL1, F32, SCALAR),
    /* ---- Softmax / LogSoftmax (opset 13 unless given) ---- */
    SMAX(Softmax, SH(3, 5, 7), -1), SMAX(Softmax, SH(3, 5, 7), 1), SMAX(Softmax, SH(3, 5, 7), 0),
    SMAX(Softmax, SH(1, 1), -1), SMAX(Softmax, SH(7, 255), -1), SMAX(Softmax, SH(2, 12, 33, 33), -1),
    SMAX(Softmax, SH(64, 1200), -1), SMAX(Softmax, SH(4, 1000, 17), 1), SMAX(Softmax, SH(17), 0),
    {.build = fam_softmax, .op = KILN_OP_Softmax, .dt = F32, .opset = 11, .sh = {SH(2, 3, 17)}, .k = {1}},
    {.build = fam_softmax, .op = KILN_OP_Softmax, .dt = F32, .sh = {SH(5, 33)}, .k = {-1}, .lo = -80, .hi = 80},
    SMAX(LogSoftmax, SH(3, 5, 7), -1), SMAX(LogSoftmax, SH(3, 5, 7), 1), SMAX(LogSoftmax, SH(1, 1), -1),
    SMAX(LogSoftmax, SH(7, 255), -1), SMAX(LogSoftmax, SH(64, 1200), -1), SMAX(LogSoftmax, SH(4, 1000, 17), 1),
    {.build = fam_softmax, .op = KILN_OP_LogSoftmax, .dt = F32, .opset = 11, .sh = {SH(2, 3, 17)}, .k = {1}},
    {.build = fam_softmax, .op = KILN_OP_LogSoftmax, .dt = F32, .opset = 11, .sh = {SH(4, 17, 1000)}, .k = {1}},
    {.build = fam_softmax, .op = KILN_OP_Softmax, .dt = F32, .opset = 11, .sh = {SH(4, 17, 1000)}, .k = {-1}},
    SMAX(Softmax, SH(0, 5), -1), SMAX(Softmax, SH(255, 300), 0), SMAX(LogSoftmax, SH(3, 70001), -1),
    {.build = fam_softmax, .op = KILN_OP_Softmax, .dt = F32, .sh = {SH(2, 4, 7, 33)}, .k = {-1, 1}},
    {.build = fam_softmax, .op = KILN_OP_Softmax, .dt = F32, .sh = {SH(64, 1200)}, .k = {-1, 1}},
    {.build = fam_softmax, .op = KILN_OP_Softmax, .dt = F32, .sh = {SH(3, 7, 5)}, .k = {1, 1}},
    {.build = fam_softmax, .op = KILN_OP_LogSoftmax, .dt = F32, .sh = {SH(5, 255)}, .k = {-1, 1}},
    /* NaN / all -inf / +inf lines: every path (rows with and without a vector part, columns, float16) */
#define SMAX_SPECIAL(OP, DT, S_, AX, OPSET) {.build = fam_softmax, .op = KILN_OP_##OP, .dt = DT, .opset = OPSET, \
                                             .sh = {S_}, .k = {AX, 0, 1}}
    SMAX_SPECIAL(Softmax, F32, SH(10, 3), -1, 0), SMAX_SPECIAL(Softmax, F32, SH(10, 33), -1, 0),
    SMAX_SPECIAL(Softmax, F32, SH(10, 255), -1, 0), SMAX_SPECIAL(Softmax, F32, SH(2, 33, 17), 1, 0),
    SMAX_SPECIAL(Softmax, F32, SH(5, 3, 17), 1, 11), SMAX_SPECIAL(Softmax, F16, SH(10, 33), -1, 0),
    SMAX_SPECIAL(Softmax, F16, SH(2, 5, 3), 1, 0),
    SMAX_SPECIAL(LogSoftmax, F32, SH(10, 3), -1, 0), SMAX_SPECIAL(LogSoftmax, F32, SH(10, 33), -1, 0),
    SMAX_SPECIAL(LogSoftmax, F32, SH(10, 255), -1, 0), SMAX_SPECIAL(LogSoftmax, F32, SH(2, 33, 17), 1, 0),
    SMAX_SPECIAL(LogSoftmax, F32, SH(5, 3, 17), 1, 11), SMAX_SPECIAL(LogSoftmax, F16, SH(10, 33), -1, 0),
    /* ---- LayerNormalization (axis, bias, stats outputs) / BatchNormalization ---- */
    LN(SH(7, 33), -1, 1, 0), LN(SH(2, 5, 768), -1, 0, 0), LN(SH(3, 4, 5), 1, 1, 0), LN(SH(1, 1), -1, 1, 0),
    LN(SH(100, 768), -1, 1, 0), LN(SH(3, 17, 33), -1, 1, 1), LN(SH(255, 3), 0, 1, 1), LN(SH(17), 0, 0, 0),
    {.build = fam_layernorm, .op = KILN_OP_LayerNormalization, .dt = F32, .sh = {SH(13, 7, 17)}, .k = {-1, 1},
     .nf = 1, .f = {1e-3}},
    {.build = fam_layernorm, .op = KILN_OP_LayerNormalization, .dt = F32, .sh = {SH(9, 255)}, .k = {-1, 1},
     .lo = 47, .hi = 53},
    BN(SH(2, 3, 5, 7)), BN(SH(1, 17, 1, 1)), BN(SH(4, 8)), BN(SH(2, 16, 47, 47)), BN(SH(3, 5, 7, 3, 2)),
    {.build = fam_batchnorm, .op = KILN_OP_BatchNormalization, .dt = F32, .sh = {SH(2, 7, 33)}, .nf = 1,
     .f = {1e-2}},

    /* ---- Einsum: the fast float32 two-operand path, and the generic loop ---- */
#define ES(DT, EQ, N, ...) {.build = fam_einsum, .op = KILN_OP_Einsum, .dt = DT, .nsh = N, .sh = {__VA_ARGS__}, .s = {EQ}}
    ES(F32, "ij,jk->ik", 2, SH(7, 17), SH(17, 5)), ES(F32, "bij,bjk->bik", 2, SH(3, 7, 17), SH(3, 17, 5)),
    ES(F32, "ij,kj->ik", 2, SH(33, 7), SH(3, 7)), ES(F32, "ij,ij->", 2, SH(5, 7), SH(5, 7)),
    ES(F32, "i,j->ij", 2, SH(7), SH(3)), ES(F32, "ij,jk", 2, SH(3, 4), SH(4, 5)),
    ES(F32, "bhqd,bhkd->bhqk", 2, SH(1, 3, 7, 5), SH(1, 3, 9, 5)), ES(F32, "ii->i", 1, SH(7, 7)),
    ES(F32, "ij->ji", 1, SH(3, 17)), ES(F32, "ij->", 1, SH(3, 17)), ES(F32, "ii", 1, SH(5, 5)),
    ES(F32, "ij,jk,kl->il", 3, SH(3, 4), SH(4, 5), SH(5, 2)), ES(F32, "ij,ij->ij", 2, SH(1, 7), SH(3, 7)),
    ES(F32, "bij,bjk->bik", 2, SH(1, 3, 4), SH(2, 4, 5)), ES(F32, "ij,jk->ik", 2, SH(3, 0), SH(0, 4)),
    ES(KILN_DT_FLOAT64, "ij,jk->ki", 2, SH(3, 4), SH(4, 5)), ES(F16, "ij,jk->ik", 2, SH(5, 7), SH(7, 3)),
    ES(I64, "ij,jk->ik", 2, SH(3, 4), SH(4, 5)), ES(I32, "iij->j", 1, SH(3, 3, 4)),
#undef ES

    /* ---- MatMul ---- */
    MM(F32, SH(3, 5), SH(5, 7)), MM(F32, SH(1, 1), SH(1, 1)), MM(F32, SH(17, 33), SH(33, 1)),
    MM(F32, SH(1, 255), SH(255, 3)), MM(F32, SH(33), SH(33, 7)), MM(F32, SH(7, 33), SH(33)), MM(F32, SH(33), SH(33)),
    MM(F32, SH(5), SH(2, 5, 3)), MM(F32, SH(2, 3, 5), SH(5)), MM(F32, SH(2, 3, 5, 7), SH(7, 4)),
    MM(F32, SH(2, 1, 5, 7), SH(3, 7, 6)), MM(F32, SH(1, 17, 33), SH(4, 33, 9)), MM(F32, SH(4, 33, 9), SH(9, 17)),
    MM(F32, SH(2, 65, 129), SH(129, 97)), MM(F32, SH(300, 257), SH(257, 3)), MM(F32, SH(127, 255), SH(255, 129)),
    MM(F32, SH(3, 1, 64), SH(64, 255)), MM(F32, SH(7, 1), SH(1, 9)), MM(F32, SH(2, 2, 3, 1, 3), SH(2, 1, 3, 5)),
    MM(F16, SH(17, 33), SH(33, 9)), MM(F16, SH(2, 7, 65), SH(65, 31)),
    MM(F32, SH(0, 5), SH(5, 3)), MM(F32, SH(3, 0), SH(0, 4)), MM(F32, SH(2, 1, 255), SH(255, 255)),
    MM(F32, SH(1, 768), SH(768, 97)), MM(F32, SH(4, 3, 17), SH(1, 17, 5)), MM(F32, SH(3, 4097), SH(4097, 5)),
    /* ---- Gemm (M, N, K, 1 = transA | 2 = transB; C shape, alpha, beta) ---- */
    GEMM(7, 5, 3, 0), GEMM(7, 5, 3, 1), GEMM(7, 5, 3, 2), GEMM(7, 5, 3, 3), GEMM(1, 1, 1, 0),
    GEMM(33, 17, 65, 3), GEMM(129, 65, 257, 0), GEMM(129, 65, 257, 1), GEMM(129, 65, 257, 2),
    GEMMC(33, 17, 65, 0, SH(33, 17), 1.0, 1.0), GEMMC(33, 17, 65, 1, SH(17), 0.5, 2.0),
    GEMMC(33, 17, 65, 2, SH(1, 17), 1.0, -1.0), GEMMC(33, 17, 65, 3, SH(33, 1), -2.0, 0.25),
    GEMMC(33, 17, 65, 0, SCALAR, 1.0, 1.0), GEMMC(33, 17, 65, 0, SH(1, 1), 0.5, 3.0),
    GEMMC(33, 17, 65, 2, SH(33, 17), 1.0, 0.0), GEMMC(1, 255, 33, 2, SH(255), 1.0, 1.0),
    GEMMC(255, 1, 33, 1, SH(255, 1), 0.75, 1.5), GEMMC(127, 131, 97, 3, SH(131), 1.0, 1.0),
    GEMMC(3, 4, 0, 0, SH(3, 4), 1.0, 2.0), GEMMC(0, 4, 5, 0, SH(4), 1.0, 1.0), GEMMC(5, 3, 7, 0, SH(3), 0.0, 1.0),
    /* ---- Resize (mode, coordinate_transformation_mode, nearest_mode, scales) ---- */
    RESIZE(F32, SH(1, 3, 5, 7), "nearest", NULL, NULL, 1, 1, 2, 3),
    RESIZE(F32, SH(1, 3, 5, 7), "nearest", "asymmetric", NULL, 1, 1, 2, 2),
    RESIZE(F32, SH(2, 3, 17, 33), "nearest", "asymmetric", "floor", 1, 1, 0.5, 0.6),
    RESIZE(F32, SH(2, 3, 17, 33), "nearest", NULL, NULL, 1, 1, 0.5, 0.75),
    RESIZE(F32, SH(1, 3, 5, 7), "nearest", NULL, "round_prefer_ceil", 1, 1, 1.5, 2.5),
    RESIZE(F32, SH(1, 3, 5, 7), "linear", NULL, NULL, 1, 1, 2, 2),
    RESIZE(F32, SH(1, 3, 5, 7), "linear", "asymmetric", NULL, 1, 1, 1.7, 2.3),
    RESIZE(F32, SH(2, 3, 17, 33), "linear", NULL, NULL, 1, 1, 1.5, 0.75),
    RESIZE(F32, SH(2, 3, 17, 33), "linear", "asymmetric", NULL, 1, 1, 0.5, 0.6),
    RESIZE(F32, SH(1, 4, 65, 67), "nearest", NULL, NULL, 1, 1, 2, 2),
    RESIZE(F32, SH(1, 4, 65, 67), "linear", NULL, NULL, 1, 1, 2, 2),
    RESIZE(F32, SH(1, 4, 65, 67), "linear", "asymmetric", NULL, 1, 1, 2, 2),
    RESIZE(F32, SH(1, 1, 1, 1), "linear", NULL, NULL, 1, 1, 3, 3),
    RESIZE(U8, SH(1, 3, 7, 9), "nearest", NULL, NULL, 1, 1, 3, 0.5),
    RESIZE(F32, SH(2, 3, 5, 7), "nearest", NULL, NULL, 1, 2, 2, 1),
    RESIZE(F32, SH(2, 3, 5, 7), "linear", NULL, NULL, 2, 1, 1.5, 1),
    /* align_corners: in * scale kept integral - for a fractional in * scale, ORT divides by the integer
     * output length, the ONNX reference implementation by in * scale; the spec is ambiguous */
    RESIZE(F32, SH(1, 3, 5, 7), "linear", "align_corners", NULL, 1, 1, 2, 3),
    RESIZE(F32, SH(1, 3, 4, 7), "linear", "pytorch_half_pixel", NULL, 1, 1, 0.25, 2),
    /* a length-1 output axis from 5 * 0.2f: the spec (length_resized > 1 ? ... : 0), ORT and the ONNX
     * reference implementation (float32 5 * 0.2f == 1) all sample row 0 */
    RESIZE(F32, SH(1, 3, 5, 7), "linear", "pytorch_half_pixel", NULL, 1, 1, 0.2, 2),
    RESIZE(F32, SH(1, 3, 5, 7), "nearest", "align_corners", NULL, 1, 1, 2, 2),
    RESIZE(F32, SH(1, 3, 9, 7), "nearest", NULL, "ceil", 1, 1, 0.5, 1.5),
    RESIZE(F32, SH(1, 3, 9, 7), "nearest", "asymmetric", "round_prefer_ceil", 1, 1, 0.5, 2),
    RESIZE(F16, SH(1, 3, 5, 7), "linear", NULL, NULL, 1, 1, 2, 2),
    RESIZE(F32, SH(2, 5, 7), "linear", NULL, NULL, 1, 2, 3, 0),
    RESIZE(F32, SH(2, 5, 7), "nearest", NULL, NULL, 1, 2, 3, 0),
};

/* ---------------------------------------------------------------------------------------
 * the runner
 * --------------------------------------------------------------------------------------- */

static int n_cases, n_runs;

static void shape_str(int nd, const int64_t *dims, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < nd && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? "," : "", (long long)dims[d]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static void describe(const prob *p, const kcase *c, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "%s %s", kiln__op_name(c->op), kiln_dtype_name(c->dt));
    for (int k = 0; k < p->n_in && o < n; k++) {
        char s[128];
        if (p->has[k])
            shape_str(p->in[k].ndim, p->in[k].dims, s, sizeof s);
        else
            snprintf(s, sizeof s, "-");
        o += (size_t)snprintf(buf + o, n - o, " %s", s);
    }
    for (int k = 0; k < p->nd->node.n_attr && o < n; k++) {
        const kiln_attr *a = &p->nd->attrs[k];
        if (a->type == KILN_ATTR_INT)
            o += (size_t)snprintf(buf + o, n - o, " %s=%lld", a->name, (long long)a->i);
        else if (a->type == KILN_ATTR_FLOAT)
            o += (size_t)snprintf(buf + o, n - o, " %s=%g", a->name, (double)a->f);
        else if (a->type == KILN_ATTR_STRING)
            o += (size_t)snprintf(buf + o, n - o, " %s=%s", a->name, a->s);
        else if (a->type == KILN_ATTR_INTS) {
            char s[128];
            shape_str(a->n, a->ints, s, sizeof s);
            o += (size_t)snprintf(buf + o, n - o, " %s=%s", a->name, s);
        }
    }
    if (c->name && o < n)
        snprintf(buf + o, n - o, " (%s)", c->name);
}

/* Compares output o with its expectation; returns the number of bad elements. */
static int64_t compare_out(const prob *p, int o, const kiln_tensor *g, const char *desc, int nthreads)
{
    const expect *e = &p->ex[o];
    if (g->dtype != e->dt || g->ndim != e->ndim || memcmp(g->dims, e->dims, sizeof(int64_t) * (size_t)e->ndim) ||
        (e->n > 0 && !g->data)) {
        char gs[128], ws[128];
        shape_str(g->ndim, g->dims, gs, sizeof gs);
        shape_str(e->ndim, e->dims, ws, sizeof ws);
        test_checks++;
        test_failures++;
        fprintf(stderr, "FAIL %s | threads=%d out%d: got %s%s, want %s%s\n", desc, nthreads, o,
                kiln_dtype_name(g->dtype), gs, kiln_dtype_name(e->dt), ws);
        return 1;
    }
    int64_t bad = 0, worst_i = -1, compared = 0;
    double worst_ratio = -1, worst_err = 0, worst_allowed = 0, worst_got = 0, worst_want = 0;
    size_t es = kiln_dtype_size(e->dt);
    for (int64_t i = 0; i < e->n; i++) {
        double got, want, allowed = 0, err;
        bool ok;
        if (e->kind == EK_MAP) {
            const kiln_tensor *src = &p->in[e->map[i] >> 40];
            int64_t j = e->map[i] & ((1LL << 40) - 1);
            ok = !memcmp((const char *)g->data + i * (int64_t)es, (const char *)src->data + j * (int64_t)es, es);
            got = getd(g, i);
            want = getd(src, j);
            err = ok ? 0 : fabs(got - want);
            if (!ok && !(err > 0))
                err = INFINITY; /* different bits, equal or NaN values */
        } else if (e->kind == EK_INT) {
            if (e->skip && e->skip[i])
                continue;
            int64_t gi = geti(g, i), wi = e->iv[i];
            ok = gi == wi;
            got = (double)gi;
            want = (double)wi;
            err = ok ? 0 : fabs(got - want) > 0 ? fabs(got - want) : 1;
        } else {
            bool half = e->dt == F16;
            got = getd(g, i);
            want = half ? round_h(e->v[i]) : round_f(e->v[i]);
            double s = e->scale ? e->scale[i] : fabs(e->v[i]);
            if (e->tol == TOL_REL)
                allowed = 1e-5 * s;
            else if (e->tol == TOL_TRANS)
                allowed = 2e-6 + 1e-5 * s;
            if (half && e->tol != TOL_EXACT)
                allowed += ulp_h(want);
            if (isnan(want) || isnan(got) || isinf(want) || isinf(got)) { /* must match exactly */
                ok = (isnan(want) && isnan(got)) || got == want;
                err = ok ? 0 : INFINITY;
            } else {
                err = fabs(got - want);
                ok = err <= allowed;
            }
        }
        compared++;
        double ratio = err / (allowed > 0 ? allowed : 1e-300);
        if (!ok) {
            bad++;
            if (ratio > worst_ratio) {
                worst_ratio = ratio;
                worst_i = i;
                worst_err = err;
                worst_allowed = allowed;
                worst_got = got;
                worst_want = want;
            }
        }
    }
    test_checks += (int)compared;
    if (bad) {
        test_failures++;
        int64_t wi[KILN_MAX_DIMS];
        char ws[128];
        unravel(worst_i, e->ndim, e->dims, wi);
        shape_str(e->ndim, wi, ws, sizeof ws);
        fprintf(stderr,
                "FAIL %s | threads=%d out%d [%s]: %lld/%lld bad, worst |err| %.3g (allowed %.3g) at index %lld %s: "
                "got %.9g want %.9g\n",
                desc, nthreads, o, tol_name[e->tol], (long long)bad, (long long)compared, worst_err, worst_allowed,
                (long long)worst_i, ws, worst_got, worst_want);
    }
    return bad;
}

static void run_case(const kcase *c0, int ci, int64_t sweep_n)
{
    kcase c = *c0;
    for (int k = 0; k < 3; k++)
        if (c.sh[k].n == -1) {
            c.sh[k].n = 1;
            c.sh[k].v[0] = sweep_n;
        }
    prob p;
    memset(&p, 0, sizeof p);
    unsigned long long seed = 0x9E3779B97F4A7C15ULL * (unsigned long long)(ci + 1) ^ (unsigned long long)sweep_n;
    if (!seed)
        seed = 1;
    c.build(&p, &c, &seed);
    n_cases++;
    char desc[512];
    describe(&p, &c, desc, sizeof desc);
    kiln_kernel_fn fn = kiln__ref_kernel(c.op);
    if (!fn) {
        CHECK_MSG(fn != NULL, "%s: no reference kernel", desc);
        prob_free(&p);
        return;
    }
    /* nthreads 1 and 2; 3 too where a tensor is past the kernels' threading thresholds (64Ki elements) */
    static const int threads[] = {1, 2, 3};
    int64_t big = 0;
    for (int k = 0; k < MAX_IN; k++)
        if (p.has[k] && numel_of(&p.in[k]) > big)
            big = numel_of(&p.in[k]);
    for (int o = 0; o < p.n_out; o++)
        if (p.ex[o].n > big)
            big = p.ex[o].n;
    int nthr = big >= 65536 ? 3 : 2;
    for (int ti = 0; ti < nthr; ti++) {
        kiln_tensor outs[3];
        memset(outs, 0, sizeof outs);
        kiln_tensor *outp[3] = {&outs[0], &outs[1], &outs[2]};
        const kiln_tensor *inp[MAX_IN];
        for (int k = 0; k < MAX_IN; k++)
            inp[k] = p.has[k] ? &p.in[k] : NULL;
        kiln_kctx ctx = {.node = &p.nd->node, .n_in = p.n_in, .in = inp, .n_out = p.n_out, .out = outp,
                         .pool = test_pool(threads[ti]), .nthreads = threads[ti]};
        kiln_clear_last_error();
        kiln_status st = fn(&ctx);
        n_runs++;
        if (st != KILN_OK) {
            test_checks++;
            test_failures++;
            fprintf(stderr, "FAIL %s | threads=%d: kernel returned %s: %s\n", desc, threads[ti], kiln_status_str(st),
                    kiln_last_error());
        } else {
            for (int o = 0; o < p.n_out; o++)
                compare_out(&p, o, &outs[o], desc, threads[ti]);
        }
        for (int o = 0; o < 3; o++)
            kiln__tensor_release(&outs[o]);
    }
    prob_free(&p);
}

/* Integer Div / Mod by zero is refused (KILN_ERR_INVALID_ARG naming the node, as ONNX Runtime
 * fails), also where only one broadcast divisor element is zero; an empty output, a float
 * divisor of 0 (IEEE: inf / NaN) and a nonzero integer divisor are fine. */
static void test_int_div_zero(void)
{
    static const struct { kiln_op op; kiln_dtype dt; int64_t fmod; int64_t nb; int64_t na; bool zero; bool err; } cs[] = {
        {KILN_OP_Div, I64, -1, 3, 3, true, true}, {KILN_OP_Div, I32, -1, 1, 5, true, true},
        {KILN_OP_Div, U8, -1, 5, 5, true, true}, {KILN_OP_Mod, I64, 0, 3, 3, true, true},
        {KILN_OP_Mod, I32, 1, 3, 3, true, true}, {KILN_OP_Div, I64, -1, 3, 0, true, false},
        {KILN_OP_Div, F32, -1, 3, 3, true, false}, {KILN_OP_Mod, F32, 1, 3, 3, true, false},
        {KILN_OP_Div, I64, -1, 3, 3, false, false}, {KILN_OP_Mod, I64, 0, 3, 3, false, false},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        prob p;
        memset(&p, 0, sizeof p);
        p.nd = make_node(cs[k].op, 2, 1);
        p.nd->node.name = (char *)"div_node";
        p.n_in = 2;
        p.n_out = 1;
        if (cs[k].fmod >= 0)
            add_attr_i(p.nd, "fmod", cs[k].fmod);
        int64_t da[2] = {cs[k].na, cs[k].nb}, db[1] = {cs[k].nb};
        kiln_tensor *A = in_new(&p, 0, cs[k].dt, 2, da), *B = in_new(&p, 1, cs[k].dt, 1, db);
        for (int64_t i = 0; i < numel_of(A); i++)
            setd(A, i, (double)(i % 7 + 1));
        for (int64_t i = 0; i < cs[k].nb; i++)   /* the last element is the zero */
            setd(B, i, cs[k].zero && i == cs[k].nb - 1 ? 0.0 : (double)(i + 2));
        kiln_tensor out;
        memset(&out, 0, sizeof out);
        kiln_tensor *outp[1] = {&out};
        const kiln_tensor *inp[2] = {A, B};
        kiln_kctx ctx = {.node = &p.nd->node, .n_in = 2, .in = inp, .n_out = 1, .out = outp, .pool = test_pool(1),
                         .nthreads = 1};
        kiln_clear_last_error();
        kiln_status st = kiln__ref_kernel(cs[k].op)(&ctx);
        const char *msg = kiln_last_error();
        if (cs[k].err)
            CHECK_MSG(st == KILN_ERR_INVALID_ARG && msg && strstr(msg, "integer division") && strstr(msg, "by zero") &&
                          strstr(msg, "div_node"),
                      "case %zu: %s: %s", k, kiln_status_str(st), msg ? msg : "");
        else
            CHECK_MSG(st == KILN_OK, "case %zu: %s: %s", k, kiln_status_str(st), msg ? msg : "");
        kiln__tensor_release(&out);
        prob_free(&p);
    }
}

int main(void)
{
    test_int_div_zero();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int nc = (int)(sizeof k_cases / sizeof k_cases[0]);
    for (int ci = 0; ci < nc; ci++) {
        const kcase *c = &k_cases[ci];
        bool sweep = c->sh[0].n == -1 || c->sh[1].n == -1 || c->sh[2].n == -1;
        if (sweep)
            for (size_t s = 0; s < sizeof sweep_sizes / sizeof sweep_sizes[0]; s++)
                run_case(c, ci, sweep_sizes[s]);
        else
            run_case(c, ci, 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("test_kernels: %d table rows, %d cases, %d kernel runs, %.2f s\n", nc, n_cases, n_runs, secs);
    return TEST_SUMMARY();
}
