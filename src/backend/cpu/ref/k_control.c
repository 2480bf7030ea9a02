/* Reference kernels: If, Loop, Scan (control flow with subgraphs). */
#include "../../kernel.h"

/* Loop iterations allowed before giving up (protects against unbounded loops). */
#define LOOP_MAX_ITERS 10000000LL

static const kiln_graph *get_graph(kiln_kctx *ctx, const char *name)
{
    const kiln_attr *a = kiln__attr(ctx->node, name);
    return a && a->type == KILN_ATTR_GRAPH ? a->g : NULL;
}

static void release_all(kiln_tensor *ts, int n)
{
    for (int i = 0; ts && i < n; i++)
        kiln__tensor_release(&ts[i]);
}

/* Moves a tensor into output slot i (takes ownership of *t). */
static void move_out(kiln_kctx *ctx, int i, kiln_tensor *t)
{
    if (i < ctx->n_out && ctx->out[i]) {
        kiln__kout_release(ctx, ctx->out[i]);
        *ctx->out[i] = *t;
    } else {
        kiln__tensor_release(t);
    }
    memset(t, 0, sizeof *t);
}

static kiln_status tensor_truth(kiln_kctx *ctx, const kiln_tensor *t, const char *what, bool *v)
{
    if (!t || kiln__knumel(t) < 1 || kiln_dtype_size(t->dtype) == 0)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "%s must be a tensor with one element", what);
    if (kiln__dtype_is_float(t->dtype))
        *v = kiln__get_f64(t->dtype, t->data, 0) != 0.0;
    else
        *v = kiln__get_i64(t->dtype, t->data, 0) != 0;
    return KILN_OK;
}

/* Declared shape of a graph value if every dimension is known. */
static bool declared_shape(const kiln_graph *g, int v, int *ndim, int64_t *dims)
{
    if (v < 0 || v >= g->n_values)
        return false;
    const kiln_value *val = &g->values[v];
    if (val->ndim < 0 || val->ndim > KILN_MAX_DIMS)
        return false;
    for (int d = 0; d < val->ndim; d++) {
        if (!val->dims || val->dims[d].value < 0)
            return false;
        dims[d] = val->dims[d].value;
    }
    *ndim = val->ndim;
    return true;
}

static kiln_dtype declared_dtype(const kiln_graph *g, int v)
{
    if (v < 0 || v >= g->n_values || kiln_dtype_size(g->values[v].dtype) == 0)
        return KILN_DT_FLOAT32;
    return g->values[v].dtype;
}

static bool same_shape(const kiln_tensor *a, const kiln_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    return true;
}

/* ---- If ---- */

static kiln_status k_if(kiln_kctx *ctx)
{
    bool c = false;
    KILN_TRY(tensor_truth(ctx, kiln__kin(ctx, 0), "cond", &c));
    const kiln_graph *g = get_graph(ctx, c ? "then_branch" : "else_branch");
    if (!g)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing %s subgraph", c ? "then_branch" : "else_branch");
    if (g->n_inputs != 0)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "branch subgraph must not declare inputs");
    if (g->n_outputs != ctx->n_out)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "branch has %d outputs but the node has %d", g->n_outputs,
                          ctx->n_out);
    kiln_tensor *outs = kiln__calloc((size_t)g->n_outputs + 1, sizeof *outs);
    if (!outs)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = kiln__ksubgraph(ctx, g, NULL, outs);
    if (st == KILN_OK)
        for (int i = 0; i < g->n_outputs; i++)
            move_out(ctx, i, &outs[i]);
    else
        kiln__err_prefix("If node '%s' %s", ctx->node->name, c ? "then_branch" : "else_branch");
    release_all(outs, g->n_outputs);
    kiln__free(outs);
    return st;
}

/* ---- Loop ---- */

typedef struct scan_acc {
    kiln_tensor first;   /* shape/dtype of the first iteration's value (data unused) */
    bool have;
    unsigned char *buf;
    size_t per, len, cap; /* bytes per iteration, bytes used, bytes allocated */
    int64_t count;
} scan_acc;

static kiln_status acc_push(kiln_kctx *ctx, scan_acc *a, const kiln_tensor *t, int k)
{
    if (!a->have) {
        a->first = *t;
        a->first.data = NULL;
        a->per = t->nbytes;
        a->have = true;
    } else if (!same_shape(&a->first, t)) {
        char s1[128], s2[128];
        kiln__shape_str(&a->first, s1, sizeof s1);
        kiln__shape_str(t, s2, sizeof s2);
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "scan output %d changes shape across iterations (%s vs %s)", k, s1, s2);
    }
    if (a->len + a->per > kiln__max_tensor_bytes())
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "scan output %d exceeds the tensor size limit", k);
    if (a->len + a->per > a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        while (nc < a->len + a->per)
            nc *= 2;
        unsigned char *nb = kiln__realloc(a->buf, nc);
        if (!nb)
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        a->buf = nb;
        a->cap = nc;
    }
    if (a->per)
        memcpy(a->buf + a->len, t->data, a->per);
    a->len += a->per;
    a->count++;
    return KILN_OK;
}

/* Loop's signature against its body (N carried values, K scan outputs), trip count M and cond */
static kiln_status loop_read_inputs(kiln_kctx *ctx, const kiln_graph *g, int *pN, int *pK, int64_t *trip, bool *cond)
{
    if (ctx->n_in < 2)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "Loop needs inputs M and cond (possibly empty)");
    int N = ctx->n_in - 2;
    int K = g->n_outputs - 1 - N;
    if (g->n_inputs != N + 2 || K < 0)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG,
                          "body has %d inputs and %d outputs, expected %d inputs and at least %d outputs", g->n_inputs,
                          g->n_outputs, N + 2, N + 1);
    if (ctx->n_out > N + K)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "node has %d outputs, body provides %d", ctx->n_out, N + K);
    const kiln_tensor *tm = kiln__kin(ctx, 0), *tc = kiln__kin(ctx, 1);
    *trip = INT64_MAX;
    if (tm) {
        if (kiln__knumel(tm) < 1 || !kiln__dtype_is_int(tm->dtype))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "M must be an integer tensor with one element");
        *trip = kiln__get_i64(tm->dtype, tm->data, 0);
    }
    *cond = true;
    if (tc)
        KILN_TRY(tensor_truth(ctx, tc, "cond", cond));
    for (int n = 0; n < N; n++)
        if (!kiln__kin(ctx, 2 + n))
            return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "loop-carried value %d is absent (optional types)", n);
    *pN = N;
    *pK = K;
    return KILN_OK;
}

/* scan output k (node output N + k): the iterations' values stacked along a new axis 0; with no
 * iteration, an empty tensor of the body's declared dtype and shape */
static kiln_status loop_emit_scan(kiln_kctx *ctx, const kiln_graph *g, const scan_acc *acc, int N, int k)
{
    int64_t dims[KILN_MAX_DIMS];
    int nd;
    kiln_dtype dt;
    if (acc->have) {
        if (acc->first.ndim + 1 > KILN_MAX_DIMS)
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "scan output rank too large");
        nd = acc->first.ndim + 1;
        dt = acc->first.dtype;
        for (int d = 1; d < nd; d++)
            dims[d] = acc->first.dims[d - 1];
    } else {
        int dn;
        int64_t dd[KILN_MAX_DIMS];
        dt = declared_dtype(g, g->outputs[1 + N + k]);
        if (declared_shape(g, g->outputs[1 + N + k], &dn, dd) && dn + 1 <= KILN_MAX_DIMS) {
            nd = dn + 1;
            for (int d = 0; d < dn; d++)
                dims[d + 1] = dd[d];
        } else {
            nd = 1;
        }
    }
    dims[0] = acc->count;
    KILN_TRY(kiln__kout(ctx, N + k, dt, nd, dims));
    if (acc->len)
        memcpy(ctx->out[N + k]->data, acc->buf, acc->len);
    return KILN_OK;
}

static kiln_status k_loop(kiln_kctx *ctx)
{
    const kiln_graph *g = get_graph(ctx, "body");
    if (!g)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing body subgraph");
    int N = 0, K = 0;
    int64_t trip = 0;
    bool cond = false;
    KILN_TRY(loop_read_inputs(ctx, g, &N, &K, &trip, &cond));
    kiln_status st = KILN_OK;
    int nbo = g->n_outputs;
    const kiln_tensor **ins = kiln__calloc((size_t)N + 2, sizeof *ins);
    const kiln_tensor **cur = kiln__calloc((size_t)N + 1, sizeof *cur);
    kiln_tensor *own = kiln__calloc((size_t)N + 1, sizeof *own);
    kiln_tensor *outs = kiln__calloc((size_t)nbo + 1, sizeof *outs);
    scan_acc *acc = kiln__calloc((size_t)K + 1, sizeof *acc);
    kiln_tensor it_t, cond_t;
    memset(&it_t, 0, sizeof it_t);
    memset(&cond_t, 0, sizeof cond_t);
    if (!ins || !cur || !own || !outs || !acc) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = kiln__tensor_alloc(&it_t, KILN_DT_INT64, 0, NULL)) != KILN_OK ||
        (st = kiln__tensor_alloc(&cond_t, KILN_DT_BOOL, 0, NULL)) != KILN_OK)
        goto done;
    for (int n = 0; n < N; n++)
        cur[n] = kiln__kin(ctx, 2 + n);
    for (int64_t i = 0; i < trip && cond; i++) {
        if (i >= LOOP_MAX_ITERS) {
            st = kiln__kerr(ctx, KILN_ERR_LIMIT, "more than %lld iterations", (long long)LOOP_MAX_ITERS);
            goto done;
        }
        *(int64_t *)it_t.data = i;
        *(uint8_t *)cond_t.data = 1;
        ins[0] = &it_t;
        ins[1] = &cond_t;
        for (int n = 0; n < N; n++)
            ins[2 + n] = cur[n];
        st = kiln__ksubgraph(ctx, g, ins, outs);
        if (st != KILN_OK) {
            kiln__err_prefix("Loop node '%s' iteration %lld", ctx->node->name, (long long)i);
            goto done;
        }
        st = tensor_truth(ctx, &outs[0], "body output cond", &cond);
        if (st != KILN_OK)
            goto done;
        for (int n = 0; n < N; n++) {
            kiln__tensor_release(&own[n]);
            own[n] = outs[1 + n];
            memset(&outs[1 + n], 0, sizeof outs[1 + n]);
            cur[n] = &own[n];
        }
        for (int k = 0; k < K; k++)
            if ((st = acc_push(ctx, &acc[k], &outs[1 + N + k], k)) != KILN_OK)
                goto done;
        release_all(outs, nbo);
    }
    /* final carried values */
    for (int n = 0; n < N && n < ctx->n_out; n++) {
        if (cur[n] == &own[n]) {
            move_out(ctx, n, &own[n]);
        } else if (ctx->out[n]) {
            kiln__tensor_release(ctx->out[n]);
            if ((st = kiln__tensor_clone(ctx->out[n], cur[n])) != KILN_OK)
                goto done;
        }
    }
    /* scan outputs: stacked along a new axis 0 */
    for (int k = 0; k < K && N + k < ctx->n_out; k++)
        if ((st = loop_emit_scan(ctx, g, &acc[k], N, k)) != KILN_OK)
            goto done;
done:
    if (own)
        release_all(own, N);
    if (outs)
        release_all(outs, nbo);
    if (acc)
        for (int k = 0; k < K; k++)
            kiln__free(acc[k].buf);
    kiln__tensor_release(&it_t);
    kiln__tensor_release(&cond_t);
    kiln__free(ins);
    kiln__free(cur);
    kiln__free(own);
    kiln__free(outs);
    kiln__free(acc);
    return st;
}

/* ---- Scan ---- */

/* Copies index idx along axis of x into out (allocated with the reduced shape). */
static void slice_axis(const kiln_tensor *x, int axis, int64_t idx, kiln_tensor *out)
{
    size_t es = kiln_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= x->dims[d];
    for (int d = axis + 1; d < x->ndim; d++)
        inner *= x->dims[d];
    int64_t n = x->dims[axis];
    size_t ib = (size_t)inner * es;
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)out->data + (size_t)o * ib, (const char *)x->data + (size_t)(o * n + idx) * ib, ib);
}

/* Copies src into index idx along axis of dst. */
static void place_axis(kiln_tensor *dst, int axis, int64_t idx, const kiln_tensor *src)
{
    size_t es = kiln_dtype_size(dst->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= dst->dims[d];
    for (int d = axis + 1; d < dst->ndim; d++)
        inner *= dst->dims[d];
    int64_t n = dst->dims[axis];
    size_t ib = (size_t)inner * es;
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)dst->data + (size_t)(o * n + idx) * ib, (const char *)src->data + (size_t)o * ib, ib);
}

typedef struct scan_spec {
    const kiln_graph *g;
    int N, M, K;
    const int *in_axes;       /* M, normalized for each scan input */
    const int64_t *in_dirs;   /* M */
    const int64_t *out_axes;  /* K, raw (normalized against rank+1 here) */
    const int64_t *out_dirs;  /* K */
} scan_spec;

/* Runs L iterations of the body. states: N borrowed; xs: M scan inputs. On success final[N]
 * and souts[K] hold owned tensors (souts with Tout entries along the scan axis; entries
 * beyond L stay zero). */
static kiln_status scan_core(kiln_kctx *ctx, const scan_spec *sp, const kiln_tensor *const *states,
                             const kiln_tensor *const *xs, int64_t L, int64_t Tout, kiln_tensor *final,
                             kiln_tensor *souts)
{
    const kiln_graph *g = sp->g;
    int N = sp->N, M = sp->M, K = sp->K;
    kiln_status st = KILN_OK;
    const kiln_tensor **ins = kiln__calloc((size_t)(N + M) + 1, sizeof *ins);
    kiln_tensor *slices = kiln__calloc((size_t)M + 1, sizeof *slices);
    kiln_tensor *outs = kiln__calloc((size_t)g->n_outputs + 1, sizeof *outs);
    kiln_tensor *own = kiln__calloc((size_t)N + 1, sizeof *own);
    int *oax = kiln__calloc((size_t)K + 1, sizeof *oax);
    const kiln_tensor **cur = kiln__calloc((size_t)N + 1, sizeof *cur);
    if (!ins || !slices || !outs || !own || !oax || !cur) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int m = 0; m < M; m++) {
        int64_t sd[KILN_MAX_DIMS];
        const kiln_tensor *x = xs[m];
        for (int d = 0, j = 0; d < x->ndim; d++)
            if (d != sp->in_axes[m])
                sd[j++] = x->dims[d];
        if ((st = kiln__tensor_alloc(&slices[m], x->dtype, x->ndim - 1, sd)) != KILN_OK)
            goto done;
    }
    for (int n = 0; n < N; n++)
        cur[n] = states[n];
    for (int64_t t = 0; t < L; t++) {
        for (int m = 0; m < M; m++) {
            int64_t idx = sp->in_dirs[m] ? L - 1 - t : t;
            slice_axis(xs[m], sp->in_axes[m], idx, &slices[m]);
            ins[N + m] = &slices[m];
        }
        for (int n = 0; n < N; n++)
            ins[n] = cur[n];
        st = kiln__ksubgraph(ctx, g, ins, outs);
        if (st != KILN_OK) {
            kiln__err_prefix("Scan node '%s' iteration %lld", ctx->node->name, (long long)t);
            goto done;
        }
        for (int n = 0; n < N; n++) {
            kiln__tensor_release(&own[n]);
            own[n] = outs[n];
            memset(&outs[n], 0, sizeof outs[n]);
            cur[n] = &own[n];
        }
        for (int k = 0; k < K; k++) {
            const kiln_tensor *y = &outs[N + k];
            if (t == 0) {
                int r = y->ndim + 1;
                if (r > KILN_MAX_DIMS || kiln_dtype_size(y->dtype) == 0) {
                    st = kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "scan output %d: rank/dtype not supported", k);
                    goto done;
                }
                int64_t ax = sp->out_axes ? sp->out_axes[k] : 0;
                if ((st = kiln__norm_axis(ctx, ax, r, &oax[k])) != KILN_OK)
                    goto done;
                int64_t od[KILN_MAX_DIMS];
                for (int d = 0, j = 0; d < r; d++)
                    od[d] = d == oax[k] ? Tout : y->dims[j++];
                if ((st = kiln__tensor_alloc(&souts[k], y->dtype, r, od)) != KILN_OK)
                    goto done;
            } else {
                bool ok = y->dtype == souts[k].dtype && y->ndim + 1 == souts[k].ndim;
                for (int d = 0, j = 0; ok && d < souts[k].ndim; d++)
                    if (d != oax[k])
                        ok = souts[k].dims[d] == y->dims[j++];
                if (!ok) {
                    st = kiln__kerr(ctx, KILN_ERR_SHAPE, "scan output %d changes shape across iterations", k);
                    goto done;
                }
            }
            int64_t idx = (sp->out_dirs && sp->out_dirs[k]) ? L - 1 - t : t;
            place_axis(&souts[k], oax[k], idx, y);
        }
        release_all(outs, g->n_outputs);
    }
    for (int n = 0; n < N; n++) {
        if (cur[n] == &own[n]) {
            final[n] = own[n];
            memset(&own[n], 0, sizeof own[n]);
        } else if ((st = kiln__tensor_clone(&final[n], cur[n])) != KILN_OK) {
            goto done;
        }
    }
done:
    if (st != KILN_OK) {
        release_all(final, N);
        release_all(souts, K);
    }
    if (slices)
        release_all(slices, M);
    if (outs)
        release_all(outs, g->n_outputs);
    if (own)
        release_all(own, N);
    kiln__free(ins);
    kiln__free(slices);
    kiln__free(outs);
    kiln__free(own);
    kiln__free(oax);
    kiln__free(cur);
    return st;
}

/* Shape for a scan output when no iteration ran: the declared body output shape with the
 * scan axis (size 0) inserted, or [0] if unknown. */
static kiln_status empty_scan_out(kiln_kctx *ctx, const scan_spec *sp, int k, int64_t lead, kiln_tensor *t)
{
    int v = sp->g->outputs[sp->N + k];
    int dn;
    int64_t dd[KILN_MAX_DIMS], od[KILN_MAX_DIMS];
    int r = 1, off = lead >= 0 ? 1 : 0;
    if (lead >= 0)
        od[0] = lead;
    if (declared_shape(sp->g, v, &dn, dd) && dn + 1 + off <= KILN_MAX_DIMS) {
        int ax;
        int64_t a = sp->out_axes ? sp->out_axes[k] : 0;
        KILN_TRY(kiln__norm_axis(ctx, a, dn + 1, &ax));
        for (int d = 0, j = 0; d < dn + 1; d++)
            od[off + d] = d == ax ? 0 : dd[j++];
        r = dn + 1;
    } else {
        od[off] = 0;
    }
    return kiln__tensor_alloc(t, declared_dtype(sp->g, v), r + off, od);
}

/* Scan buffers shared by the opset 8 and 9+ paths (k_scan owns and frees them). */
typedef struct scan_bufs {
    int first;                  /* the first state input (opset 8: 1, after sequence_lens) */
    int *in_axes;               /* M */
    const kiln_tensor **states; /* N */
    const kiln_tensor **xs;     /* M */
    kiln_tensor *final, *souts; /* N final states, K scan outputs */
    kiln_tensor *bst, *res;     /* opset 8: per-batch slices (N + M), assembled outputs (N + K) */
} scan_bufs;

/* Opset 9+: scan inputs along their scan_input_axes, one sequence length for all. */
static kiln_status scan_v9(kiln_kctx *ctx, const scan_spec *sp, scan_bufs *b, const int64_t *in_axes_raw, int n_ia)
{
    int N = sp->N, M = sp->M, K = sp->K;
    int64_t T = -1;
    for (int m = 0; m < M; m++) {
        const kiln_tensor *x = kiln__kin(ctx, b->first + N + m);
        if (x->ndim < 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "scan input %d must have rank >= 1", m);
        KILN_TRY(kiln__norm_axis(ctx, n_ia > 0 ? in_axes_raw[m] : 0, x->ndim, &b->in_axes[m]));
        int64_t tl = x->dims[b->in_axes[m]];
        if (T >= 0 && tl != T)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "scan inputs have different sequence lengths (%lld vs %lld)",
                              (long long)T, (long long)tl);
        T = tl;
        b->xs[m] = x;
    }
    for (int n = 0; n < N; n++)
        b->states[n] = kiln__kin(ctx, b->first + n);
    KILN_TRY(scan_core(ctx, sp, b->states, b->xs, T, T, b->final, b->souts));
    for (int k = 0; k < K && T == 0; k++)
        KILN_TRY(empty_scan_out(ctx, sp, k, -1, &b->souts[k]));
    for (int n = 0; n < N; n++)
        move_out(ctx, n, &b->final[n]);
    for (int k = 0; k < K; k++)
        move_out(ctx, N + k, &b->souts[k]);
    return KILN_OK;
}

/* Opset 8: the batch size B and sequence length T every input agrees on (states [B, ...], scan
 * inputs [B, T, ...]) and a valid sequence_lens. */
static kiln_status scan_v8_dims(kiln_kctx *ctx, const scan_spec *sp, int64_t *B, int64_t *T)
{
    const kiln_tensor *sl = kiln__kin(ctx, 0);
    *B = *T = -1;
    for (int i = 0; i < sp->N + sp->M; i++) {
        const kiln_tensor *t = kiln__kin(ctx, 1 + i);
        int need = i < sp->N ? 1 : 2;
        if (t->ndim < need || (*B >= 0 && t->dims[0] != *B))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "input %d must have a batch dimension matching the others", 1 + i);
        *B = t->dims[0];
        if (i >= sp->N) {
            if (*T >= 0 && t->dims[1] != *T)
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "scan inputs have different sequence lengths");
            *T = t->dims[1];
        }
    }
    if (sl && (!kiln__dtype_is_int(sl->dtype) || sl->ndim != 1 || sl->dims[0] != *B))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "sequence_lens must be an integer tensor [batch]");
    return KILN_OK;
}

/* Opset 8: puts batch entry b's result r (a final state or scan output) into res = [B, r's shape],
 * allocated at the first entry that produced one; later entries must have the same shape. */
static kiln_status scan_v8_place(kiln_kctx *ctx, int j, int64_t B, int64_t b, const kiln_tensor *r, kiln_tensor *res)
{
    if (!res->data) {
        int64_t od[KILN_MAX_DIMS];
        if (r->ndim + 1 > KILN_MAX_DIMS)
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "output rank too large");
        od[0] = B;
        for (int d = 0; d < r->ndim; d++)
            od[d + 1] = r->dims[d];
        KILN_TRY(kiln__tensor_alloc(res, r->dtype, r->ndim + 1, od));
    } else {
        bool ok = res->dtype == r->dtype && res->ndim == r->ndim + 1;
        for (int d = 0; ok && d < r->ndim; d++)
            ok = res->dims[d + 1] == r->dims[d];
        if (!ok)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "output %d shape differs between batch entries", j);
    }
    place_axis(res, 0, b, r);
    return KILN_OK;
}

/* Opset 8: every input has a leading batch dimension; each batch entry scans its own
 * sequence_lens[b] steps along axis 1, and the results are stacked along the batch. */
static kiln_status scan_v8(kiln_kctx *ctx, const scan_spec *sp, scan_bufs *bf)
{
    int N = sp->N, M = sp->M, K = sp->K;
    const kiln_tensor *sl = kiln__kin(ctx, 0);
    int64_t B, T;
    KILN_TRY(scan_v8_dims(ctx, sp, &B, &T));
    for (int m = 0; m < M; m++)
        bf->in_axes[m] = 0;
    for (int i = 0; i < N + M; i++) {
        const kiln_tensor *t = kiln__kin(ctx, 1 + i);
        int64_t sd[KILN_MAX_DIMS];
        for (int d = 1; d < t->ndim; d++)
            sd[d - 1] = t->dims[d];
        KILN_TRY(kiln__tensor_alloc(&bf->bst[i], t->dtype, t->ndim - 1, sd));
        if (i < N)
            bf->states[i] = &bf->bst[i];
        else
            bf->xs[i - N] = &bf->bst[i];
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t L = sl ? kiln__get_i64(sl->dtype, sl->data, b) : T;
        if (L < 0 || L > T)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "sequence_lens[%lld]=%lld out of range", (long long)b,
                              (long long)L);
        for (int i = 0; i < N + M; i++)
            slice_axis(kiln__kin(ctx, 1 + i), 0, b, &bf->bst[i]);
        KILN_TRY(scan_core(ctx, sp, bf->states, bf->xs, L, T, bf->final, bf->souts));
        for (int j = 0; j < N + K; j++) {
            const kiln_tensor *r = j < N ? &bf->final[j] : &bf->souts[j - N];
            if (r->data) /* else L == 0: scan output not produced for this batch entry */
                KILN_TRY(scan_v8_place(ctx, j, B, b, r, &bf->res[j]));
        }
        release_all(bf->final, N);
        release_all(bf->souts, K);
    }
    for (int j = 0; j < N + K; j++) {
        if (!bf->res[j].data) {
            if (j < N) /* B == 0: states keep their (empty) input shape */
                KILN_TRY(kiln__tensor_clone(&bf->res[j], kiln__kin(ctx, 1 + j)));
            else
                KILN_TRY(empty_scan_out(ctx, sp, j - N, B, &bf->res[j]));
        }
        move_out(ctx, j, &bf->res[j]);
    }
    return KILN_OK;
}

/* Checks the node against its body; sets *M (scan inputs), *N (states), *K (scan outputs). */
static kiln_status scan_counts(kiln_kctx *ctx, const kiln_graph *g, int first, int *N, int *M, int *K)
{
    int64_t M64 = kiln__attr_i(ctx->node, "num_scan_inputs", -1);
    int nin = ctx->n_in - first;
    if (M64 < 1 || M64 > nin)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid num_scan_inputs %lld", (long long)M64);
    *M = (int)M64;
    *N = nin - *M;
    *K = g->n_outputs - *N;
    if (g->n_inputs != *N + *M || *K < 0)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "body has %d inputs / %d outputs, expected %d inputs", g->n_inputs,
                          g->n_outputs, *N + *M);
    if (ctx->n_out > *N + *K)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "node has %d outputs, body provides %d", ctx->n_out, *N + *K);
    for (int i = 0; i < nin; i++) {
        const kiln_tensor *t = kiln__kin(ctx, first + i);
        if (!t)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "input %d is absent", first + i);
        if (kiln_dtype_size(t->dtype) == 0)
            return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "dtype %s not supported", kiln_dtype_name(t->dtype));
    }
    return KILN_OK;
}

static kiln_status k_scan(kiln_kctx *ctx)
{
    const kiln_node *nd = ctx->node;
    const kiln_graph *g = get_graph(ctx, "body");
    if (!g)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing body subgraph");
    bool v8 = nd->opset < 9;
    int first = v8 ? 1 : 0; /* opset 8: input 0 is sequence_lens */
    int N = 0, M = 0, K = 0;
    KILN_TRY(scan_counts(ctx, g, first, &N, &M, &K));
    const int64_t *in_dirs = NULL, *out_axes = NULL, *out_dirs = NULL, *in_axes_raw = NULL;
    int n_id = kiln__attr_ints(nd, v8 ? "directions" : "scan_input_directions", &in_dirs);
    int n_ia = v8 ? -1 : kiln__attr_ints(nd, "scan_input_axes", &in_axes_raw);
    int n_oa = v8 ? -1 : kiln__attr_ints(nd, "scan_output_axes", &out_axes);
    int n_od = v8 ? -1 : kiln__attr_ints(nd, "scan_output_directions", &out_dirs);
    if ((n_id >= 0 && n_id != M) || (n_ia >= 0 && n_ia != M) || (n_oa >= 0 && n_oa != K) || (n_od >= 0 && n_od != K))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "scan axes/directions attribute lengths do not match");
    for (int i = 0; n_id > 0 && i < M; i++)
        if (in_dirs[i] != 0 && in_dirs[i] != 1)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "directions must be 0 or 1");
    for (int i = 0; n_od > 0 && i < K; i++)
        if (out_dirs[i] != 0 && out_dirs[i] != 1)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "scan_output_directions must be 0 or 1");

    kiln_status st = KILN_OK;
    int64_t *zdirs = kiln__calloc((size_t)M + 1, sizeof *zdirs);
    scan_bufs b = {
        .first = first,
        .in_axes = kiln__calloc((size_t)M + 1, sizeof *b.in_axes),
        .states = kiln__calloc((size_t)N + 1, sizeof *b.states),
        .xs = kiln__calloc((size_t)M + 1, sizeof *b.xs),
        .final = kiln__calloc((size_t)N + 1, sizeof *b.final),
        .souts = kiln__calloc((size_t)K + 1, sizeof *b.souts),
        .bst = kiln__calloc((size_t)(N + M) + 1, sizeof *b.bst),
        .res = kiln__calloc((size_t)(N + K) + 1, sizeof *b.res),
    };
    if (!zdirs || !b.in_axes || !b.states || !b.xs || !b.final || !b.souts || !b.bst || !b.res) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    } else {
        scan_spec sp = {.g = g, .N = N, .M = M, .K = K, .in_axes = b.in_axes, .in_dirs = n_id > 0 ? in_dirs : zdirs,
                        .out_axes = n_oa > 0 ? out_axes : NULL, .out_dirs = n_od > 0 ? out_dirs : NULL};
        st = v8 ? scan_v8(ctx, &sp, &b) : scan_v9(ctx, &sp, &b, in_axes_raw, n_ia);
    }
    if (b.final)
        release_all(b.final, N);
    if (b.souts)
        release_all(b.souts, K);
    if (b.bst)
        release_all(b.bst, N + M);
    if (b.res)
        release_all(b.res, N + K);
    kiln__free(b.in_axes);
    kiln__free(zdirs);
    kiln__free(b.states);
    kiln__free(b.xs);
    kiln__free(b.final);
    kiln__free(b.souts);
    kiln__free(b.bst);
    kiln__free(b.res);
    return st;
}

const kiln_kernel_reg kiln__ref_control[] = {
    {KILN_OP_If, k_if},
    {KILN_OP_Loop, k_loop},
    {KILN_OP_Scan, k_scan},
    {KILN_OP_COUNT, NULL},
};
