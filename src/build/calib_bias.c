/* FP8 bias correction (precision.h; docs/PRECISION.md, "FP8 bias correction"): the float graph
 * runs on the calibration data; for every fp8 layer the mean of its input at each tap (what each
 * weight multiplies, zero padding included), in float32 and rounded to FP8 with the layer's scale,
 * gives the mean output error the layer's rounding causes per output channel,
 *   E[W x] - E[Wq xq] = sum_taps W * mean(x) - Wq * mean(xq),
 * which is added to its bias (Nagel et al. 2019, "empirical bias correction"). On the same run each
 * layer's weight-scale granularity is chosen (calib_wq.c) before its shift is computed. */
#include "build.h"
#include "precision.h"
#include "../quant/quant.h"
#include "../core/numfmt.h"
#include "../backend/cpu/lowbit.h"
#include <math.h>

enum { BC_CONV, BC_GEMM };

/* One layer corrected: its geometry and the sums of its input at each tap. */
struct kiln_bc_layer {
    int node, x, kind;
    int64_t C, KH, KW, sh, sw, ph, pw, dh, dw;   /* conv (2-D): input channels, kernel, strides, begin pads, dilations */
    int64_t taps;                                /* C * KH * KW (conv), K (gemm) */
    float s;                                     /* the FP8 activation scale */
    double *sx, *sq;                             /* [taps]: sums of x and of fp8(x) */
    double count;                                /* output positions (conv) or rows (gemm) summed */
    bool choose;                                 /* the weight-scale granularity is chosen here */
    kiln_wq_meas *meas;                          /* its measurement (calib_wq.c), or NULL */
};
typedef struct kiln_bc_layer bc_layer;

/* The calibration run: the graph and its corrected layers. */
typedef struct bc_run {
    const kiln_graph *g;
    bc_layer **l;
    int n;
    const kiln_run_env *env;
} bc_run;

static float fp8_round(float x, float s)
{
    return kiln__fp8_to_f32(KILN_DT_FP8E4M3, kiln__f32_to_fp8(KILN_DT_FP8E4M3, x / s, true)) * s;
}

static const kiln_tensor *const_f32(const kiln_graph *g, int v)
{
    const kiln_tensor *t = v >= 0 ? g->values[v].init : NULL;
    return t && t->data && t->dtype == KILN_DT_FLOAT32 ? t : NULL;
}

static int64_t ints_at(const kiln_node *n, const char *name, int i, int64_t def)
{
    const int64_t *v;
    int k = kiln__attr_ints(n, name, &v);
    return i < k ? v[i] : def;
}

/* The layer node i can be corrected as (false: it is left alone). */
static bool bc_layer_of(const kiln_graph *g, int i, bc_layer *l)
{
    const kiln_node *n = &g->nodes[i];
    memset(l, 0, sizeof *l);
    l->node = i;
    l->s = kiln__attr_f(n, KILN_ATTR_AQ_SCALE, NAN);
    if (n->dead || !(l->s > 0 && isfinite(l->s)) || n->n_in < 2 || n->in[0] < 0)
        return false;
    const kiln_tensor *w = const_f32(g, n->in[1]);
    if (!w)
        return false;
    l->x = n->in[0];
    if (n->op == KILN_OP_Conv) {
        if (w->ndim != 4 || strcmp(kiln__attr_s(n, "auto_pad", "NOTSET"), "NOTSET"))
            return false;
        int64_t grp = kiln__attr_i(n, "group", 1);
        l->kind = BC_CONV;
        l->C = w->dims[1] * grp, l->KH = w->dims[2], l->KW = w->dims[3];
        l->sh = ints_at(n, "strides", 0, 1), l->sw = ints_at(n, "strides", 1, 1);
        l->ph = ints_at(n, "pads", 0, 0), l->pw = ints_at(n, "pads", 1, 0);
        l->dh = ints_at(n, "dilations", 0, 1), l->dw = ints_at(n, "dilations", 1, 1);
        l->taps = l->C * l->KH * l->KW;
        return grp >= 1 && w->dims[0] % grp == 0 && l->sh > 0 && l->sw > 0 && l->dh > 0 && l->dw > 0;
    }
    bool gemm = n->op == KILN_OP_Gemm;
    if ((n->op != KILN_OP_MatMul && !gemm) || w->ndim != 2 || (gemm && kiln__attr_i(n, "transA", 0)))
        return false;
    l->kind = BC_GEMM;
    l->taps = gemm && kiln__attr_i(n, "transB", 0) ? w->dims[1] : w->dims[0];
    return true;
}

/* Adds one input tensor's tap sums to a conv layer. */
static kiln_status bc_conv_add(const kiln_graph *g, bc_layer *l, const kiln_tensor *x)
{
    if (x->ndim != 4 || x->dims[1] != l->C)
        return kiln__err(KILN_ERR_SHAPE, "fp8 bias correction: unexpected input shape of node '%s'",
                         g->nodes[l->node].name);
    int64_t N = x->dims[0], H = x->dims[2], W = x->dims[3], hw = H * W;
    int64_t ph_end = ints_at(&g->nodes[l->node], "pads", 2, 0), pw_end = ints_at(&g->nodes[l->node], "pads", 3, 0);
    int64_t OH = (H + l->ph + ph_end - l->dh * (l->KH - 1) - 1) / l->sh + 1;
    int64_t OW = (W + l->pw + pw_end - l->dw * (l->KW - 1) - 1) / l->sw + 1;
    if (OH <= 0 || OW <= 0)
        return KILN_OK;
    float *q = kiln__malloc(sizeof(float) * (size_t)(hw > 0 ? hw : 1));   /* one plane rounded to FP8 */
    if (!q)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < l->C; c++) {
            const float *p = (const float *)x->data + (b * l->C + c) * hw;
            for (int64_t j = 0; j < hw; j++)
                q[j] = fp8_round(p[j], l->s);
            for (int64_t kh = 0; kh < l->KH; kh++)
                for (int64_t kw = 0; kw < l->KW; kw++) {
                    double sx = 0, sq = 0;
                    for (int64_t oh = 0; oh < OH; oh++) {
                        int64_t ih = oh * l->sh - l->ph + kh * l->dh;
                        if (ih < 0 || ih >= H)
                            continue;
                        for (int64_t ow = 0; ow < OW; ow++) {
                            int64_t iw = ow * l->sw - l->pw + kw * l->dw;
                            if (iw >= 0 && iw < W)
                                sx += p[ih * W + iw], sq += q[ih * W + iw];
                        }
                    }
                    int64_t t = (c * l->KH + kh) * l->KW + kw;
                    l->sx[t] += sx, l->sq[t] += sq;
                }
        }
    kiln__free(q);
    l->count += (double)(N * OH * OW);
    return KILN_OK;
}

static kiln_status bc_gemm_add(const kiln_graph *g, bc_layer *l, const kiln_tensor *x)
{
    if (x->ndim < 1 || x->dims[x->ndim - 1] != l->taps)
        return kiln__err(KILN_ERR_SHAPE, "fp8 bias correction: unexpected input shape of node '%s'",
                         g->nodes[l->node].name);
    int64_t rows = kiln_tensor_numel(x) / l->taps;
    const float *p = x->data;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < l->taps; k++) {
            float v = p[i * l->taps + k];
            l->sx[k] += v, l->sq[k] += fp8_round(v, l->s);
        }
    l->count += (double)rows;
    return KILN_OK;
}

static kiln_status bc_value(bc_run *r, int v, const kiln_tensor *t)
{
    for (int i = 0; i < r->n; i++)
        if (r->l[i]->x == v) {
            KILN_TRY(kiln__bc_add(r->g, r->l[i], t));
            if (r->l[i]->choose)
                KILN_TRY(kiln__wq_meas_add(r->g, r->l[i]->node, t, r->env->pool, r->env->nthreads, &r->l[i]->meas));
        }
    return KILN_OK;
}

static kiln_status bc_observe(void *user, const kiln_node *n, const kiln_tensor *const *outputs)
{
    for (int o = 0; o < n->n_out; o++)
        if (n->out[o] >= 0)
            KILN_TRY(bc_value(user, n->out[o], outputs[o]));
    return KILN_OK;
}

/* Runs g on every sample of the calibration set, feeding the tap sums. */
static kiln_status bc_collect(bc_run *r, const kiln_calib_set *set, const kiln_run_env *env)
{
    const kiln_graph *g = r->g;
    kiln_tensor *in = kiln__calloc((size_t)g->n_inputs + 1, sizeof *in), *outs = kiln__calloc((size_t)g->n_outputs + 1, sizeof *outs);
    const kiln_tensor **feed = kiln__calloc((size_t)g->n_inputs + 1, sizeof *feed);
    kiln_status st = in && outs && feed ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_hooks hooks = {.observe = bc_observe, .observe_user = r};
    for (int s = 0; st == KILN_OK && s < set->n; s++) {
        for (int i = 0; st == KILN_OK && i < g->n_inputs; i++) {
            st = kiln_npy_read(set->s[s].path[i], &in[i]);
            feed[i] = &in[i];
            if (st == KILN_OK)
                st = bc_value(r, g->inputs[i], &in[i]);
        }
        if (st == KILN_OK)
            st = kiln__exec_graph_ex(g, NULL, feed, outs, env, 0, NULL, &hooks);
        for (int o = 0; st == KILN_OK && o < g->n_outputs; o++)
            kiln__tensor_release(&outs[o]);
        for (int i = 0; i < g->n_inputs; i++) {
            kiln__free(in[i].data);
            in[i].data = NULL;
        }
    }
    kiln__free(in);
    kiln__free(outs);
    kiln__free(feed);
    return st;
}

/* The weight of node n as the fp8 layer will multiply it: quantized and dequantized by the CPU
 * backend's own reference (the kernel's function), on a copy of n marked fp8. */
static kiln_status weight_dq(const kiln_node *n, const kiln_tensor *w, float *y)
{
    kiln_node tmp;
    KILN_TRY(kiln__fp8_node(n, false, &tmp));   /* n's own KILN_ATTR_WQ_TENSOR, if any, decides */
    kiln_status st = kiln__lowbit_ref_weight(&tmp, w, y);
    kiln__free(tmp.attrs);
    return st;
}

kiln_status kiln__bc_begin(const kiln_graph *g, int node, kiln_bc_layer **out)
{
    *out = NULL;
    bc_layer l;
    if (!bc_layer_of(g, node, &l))
        return KILN_OK;
    l.sx = kiln__calloc((size_t)l.taps, sizeof *l.sx);
    l.sq = kiln__calloc((size_t)l.taps, sizeof *l.sq);
    bc_layer *p = kiln__malloc(sizeof *p);
    if (!l.sx || !l.sq || !p) {
        kiln__free(l.sx), kiln__free(l.sq), kiln__free(p);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    *p = l;
    *out = p;
    return KILN_OK;
}

void kiln__bc_free(kiln_bc_layer *l)
{
    if (l) {
        kiln__free(l->sx);
        kiln__free(l->sq);
        kiln__wq_meas_free(l->meas);
        kiln__free(l);
    }
}

kiln_status kiln__bc_add(const kiln_graph *g, kiln_bc_layer *l, const kiln_tensor *x)
{
    if (x->dtype != KILN_DT_FLOAT32)
        return kiln__err(KILN_ERR_DTYPE, "fp8 bias correction: input of node '%s' is not float32",
                         g->nodes[l->node].name);
    return l->kind == BC_CONV ? bc_conv_add(g, l, x) : bc_gemm_add(g, l, x);
}

kiln_status kiln__bc_shift(const kiln_graph *g, const kiln_bc_layer *l, double *shift, int64_t *rows)
{
    const kiln_node *n = &g->nodes[l->node];
    const kiln_tensor *w = const_f32(g, n->in[1]);
    int64_t numel = kiln_tensor_numel(w);
    bool kn = l->kind == BC_GEMM && !(n->op == KILN_OP_Gemm && kiln__attr_i(n, "transB", 0));   /* w is [K, N] */
    int64_t R = l->kind == BC_CONV ? w->dims[0] : kn ? w->dims[1] : w->dims[0], per_row = numel / R;
    int64_t grp = l->kind == BC_CONV ? kiln__attr_i(n, "group", 1) : 1;
    double scale = n->op == KILN_OP_Gemm ? kiln__attr_f(n, "alpha", 1.0f) : 1.0;
    *rows = R;
    if (!shift)
        return KILN_OK;
    float *wq = kiln__malloc(sizeof(float) * (size_t)numel);
    if (!wq)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = weight_dq(n, w, wq);
    const float *wf = w->data;
    for (int64_t m = 0; st == KILN_OK && m < R; m++) {
        int64_t base = (m / (R / grp)) * per_row;   /* the first input tap of m's group */
        double acc = 0;
        for (int64_t t = 0; t < per_row; t++) {
            int64_t i = kn ? t * R + m : m * per_row + t;
            acc += (double)wf[i] * l->sx[base + t] - (double)wq[i] * l->sq[base + t];
        }
        shift[m] = l->count > 0 ? scale * acc / l->count : 0;
    }
    kiln__free(wq);
    return st;
}

/* A float32 constant [rows] (or [1, rows] for Gemm's C) that reads `base` (or 0) plus shift. */
static int shifted_const(kiln_graph *g, const char *hint, const kiln_tensor *base, const double *shift, int64_t rows)
{
    kiln_tensor t;
    int64_t d = rows;
    if (kiln__tensor_alloc(&t, KILN_DT_FLOAT32, base ? base->ndim : 1, base ? base->dims : &d) != KILN_OK)
        return -1;
    float *y = t.data;
    for (int64_t i = 0; i < rows; i++)
        y[i] = (float)((base ? (double)((const float *)base->data)[i] : 0.0) + shift[i]);
    int v = kiln__graph_add_const(g, hint, &t);
    if (v < 0)
        kiln__tensor_release(&t);
    return v;
}

/* The input slot holding node i's per-output-channel bias (*node = the node that reads it: i, or
 * the Add after a MatMul), or -1 when there is no place for one; *base = its constant or NULL. */
static int bias_slot(const kiln_graph *g, int i, int64_t rows, int *node, const kiln_tensor **base)
{
    const kiln_node *n = &g->nodes[i];
    *node = i, *base = NULL;
    if (n->op == KILN_OP_Conv || n->op == KILN_OP_Gemm) {
        if (n->op == KILN_OP_Gemm && kiln__attr_f(n, "beta", 1.0f) != 1.0f)
            return -1;
        if (n->n_in < 3 || n->in[2] < 0)
            return 2;
        *base = const_f32(g, n->in[2]);
        bool vec = *base && kiln_tensor_numel(*base) == rows && (*base)->ndim >= 1 && (*base)->ndim <= 2 &&
                   (*base)->dims[(*base)->ndim - 1] == rows;
        return vec ? 2 : -1;
    }
    /* MatMul: its only reader is Add(y, b) with b a constant [.., rows] of rows elements */
    int y = n->out[0], reader = -1, readers = 0;
    if (y < 0 || kiln__value_is_output(g, y))
        return -1;
    for (int k = 0; k < g->n_nodes; k++)
        for (int j = 0; !g->nodes[k].dead && j < g->nodes[k].n_in; j++)
            if (g->nodes[k].in[j] == y)
                reader = k, readers++;
    const kiln_node *a = readers == 1 ? &g->nodes[reader] : NULL;
    if (!a || a->op != KILN_OP_Add || a->n_in != 2)
        return -1;
    int slot = a->in[0] == y ? 1 : 0;
    *base = const_f32(g, a->in[slot]);
    if (!*base || kiln_tensor_numel(*base) != rows || (*base)->dims[(*base)->ndim - 1] != rows)
        return -1;
    *node = reader;
    return slot;
}

/* Gives node i's bias the shift (rows values); *done = whether it had a place for one. */
static kiln_status apply_shift(kiln_graph *g, int i, const double *shift, int64_t rows, bool *done)
{
    *done = false;
    int node;
    const kiln_tensor *base;
    int slot = bias_slot(g, i, rows, &node, &base);
    if (slot < 0)
        return KILN_OK;
    char hint[256];
    snprintf(hint, sizeof hint, "%s_fp8_bias", g->nodes[i].name);
    int v = shifted_const(g, hint, base, shift, rows);
    if (v < 0)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    KILN_TRY(slot < g->nodes[node].n_in ? kiln__node_set_input(g, node, slot, v) : kiln__node_add_input(g, node, v));
    *done = true;
    return KILN_OK;
}

void kiln__bc_cache_free(kiln_bc_cache *c)
{
    for (int i = 0; i < c->n; i++) {
        kiln__free(c->name[i]);
        kiln__free(c->shift[i]);
    }
    kiln__free(c->name);
    kiln__free(c->rows);
    kiln__free(c->shift);
    kiln__free(c->tensor);
    memset(c, 0, sizeof *c);
}

static int cache_find(const kiln_bc_cache *c, const char *name)
{
    for (int i = 0; c && i < c->n; i++)
        if (!strcmp(c->name[i], name))
            return i;
    return -1;
}

/* Moves shift (rows values) into the cache under name, with the layer's weight-scale choice. */
static kiln_status cache_put(kiln_bc_cache *c, const char *name, double *shift, int64_t rows, bool tensor)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        char **nn = kiln__realloc(c->name, sizeof *nn * (size_t)cap);
        if (nn)
            c->name = nn;
        int64_t *nr = nn ? kiln__realloc(c->rows, sizeof *nr * (size_t)cap) : NULL;
        if (nr)
            c->rows = nr;
        double **ns = nr ? kiln__realloc(c->shift, sizeof *ns * (size_t)cap) : NULL;
        if (ns)
            c->shift = ns;
        bool *nt = ns ? kiln__realloc(c->tensor, sizeof *nt * (size_t)cap) : NULL;
        if (!nt) {
            kiln__free(shift);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        c->tensor = nt;
        c->cap = cap;
    }
    if (!(c->name[c->n] = kiln__strdup(name))) {
        kiln__free(shift);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    c->rows[c->n] = rows;
    c->tensor[c->n] = tensor;
    c->shift[c->n++] = shift;
    return KILN_OK;
}

/* Layer l's weight scaled per tensor: keeps the granularity with the smaller output error left
 * after bias correction (calib_wq.c) when it was measured, else what the node says. */
static kiln_status choose_wq(kiln_graph *g, const kiln_bc_layer *l, int64_t rows, bool *tensor)
{
    kiln_node *n = &g->nodes[l->node];
    if (l->choose && l->meas) {
        int node;
        const kiln_tensor *base;
        double err[2];
        kiln__wq_meas_error(l->meas, bias_slot(g, l->node, rows, &node, &base) >= 0, err);
        if (err[KILN_WQ_TENSOR] < err[KILN_WQ_CHANNEL])
            KILN_TRY(kiln__node_set_attr_i(n, KILN_ATTR_WQ_TENSOR, 1));
    }
    *tensor = kiln__attr_i(n, KILN_ATTR_WQ_TENSOR, 0) != 0;
    return KILN_OK;
}

/* The shift of layer l, measured (then kept in the cache when there is one) and applied, after
 * its weight-scale granularity is chosen. */
static kiln_status correct_layer(kiln_graph *g, const kiln_bc_layer *l, kiln_bc_cache *cache, bool *done)
{
    int64_t rows;
    bool tensor;
    KILN_TRY(kiln__bc_shift(g, l, NULL, &rows));
    KILN_TRY(choose_wq(g, l, rows, &tensor));
    double *shift = kiln__malloc(sizeof(double) * (size_t)rows);
    if (!shift)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = kiln__bc_shift(g, l, shift, &rows);
    if (st == KILN_OK)
        st = apply_shift(g, l->node, shift, rows, done);
    if (st == KILN_OK && cache)
        return cache_put(cache, g->nodes[l->node].name, shift, rows, tensor);
    kiln__free(shift);
    return st;
}

kiln_status kiln__fp8_bias_correct(kiln_graph *g, const char *calib_dir, int nthreads, kiln_bc_cache *cache,
                                   bool choose, int *corrected, int64_t *samples)
{
    *corrected = 0, *samples = 0;
    bc_run r = {.g = g, .l = kiln__calloc((size_t)g->n_nodes + 1, sizeof *r.l)};
    if (!r.l)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = KILN_OK;
    for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
        kiln_bc_layer *l = NULL;
        st = kiln__bc_begin(g, i, &l);
        int k = l ? cache_find(cache, g->nodes[i].name) : -1;
        bool done = false;
        if (k >= 0) {   /* measured before (another trial build of the planner): the same choice and shift */
            kiln__bc_free(l);
            if (st == KILN_OK && cache->tensor[k])
                st = kiln__node_set_attr_i(&g->nodes[i], KILN_ATTR_WQ_TENSOR, 1);
            if (st == KILN_OK)
                st = apply_shift(g, i, cache->shift[k], cache->rows[k], &done);
            *corrected += done;
        } else if (l) {
            l->choose = choose && !kiln__attr_i(&g->nodes[i], KILN_ATTR_WQ_TENSOR, 0);
            r.l[r.n++] = l;
        }
    }
    kiln_calib_set set = {0};
    const char **names = kiln__calloc((size_t)g->n_inputs + 1, sizeof *names);
    if (st == KILN_OK && !names)
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; st == KILN_OK && i < g->n_inputs; i++)
        names[i] = g->values[g->inputs[i]].name;
    if (st == KILN_OK && r.n > 0)
        st = kiln__calib_set_open(calib_dir, g->n_inputs, names, &set);
    kiln__free(names);
    kiln_pool *pool = st == KILN_OK && r.n > 0 ? kiln__pool_create(nthreads) : NULL;
    if (st == KILN_OK && r.n > 0) {
        kiln_run_ctl ctl = kiln__run_ctl(NULL, 0);
        kiln_run_env renv = {.pool = pool, .nthreads = pool ? kiln__pool_threads(pool) : 1, .ctl = &ctl};
        r.env = &renv;
        st = bc_collect(&r, &set, &renv);
        *samples = set.rows;
        if (cache)
            cache->samples = set.rows;
    }
    kiln__pool_free(pool);
    kiln__calib_set_free(&set);
    for (int i = 0; i < r.n; i++) {
        bool done = false;
        if (st == KILN_OK)
            st = correct_layer(g, r.l[i], cache, &done);
        *corrected += done;
        kiln__bc_free(r.l[i]);
    }
    kiln__free(r.l);
    return st;
}
