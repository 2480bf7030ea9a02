/* Shape inference driver (one graph frame at a time, subgraphs through shape_ctrl.c) and the
 * helpers the per-family inference functions share. */
#include "shape_impl.h"
#include <stdio.h>

#define MAX_INFER_DEPTH 64

kiln_status kiln__ierr(const kiln_ictx *c, kiln_status s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln__err(s, "shape inference: node '%s' (%s): %s", c->n->name, c->n->op_type, msg);
}

kiln_status kiln__need(const kiln_ictx *c, int i, const kiln_vshape **s)
{
    *s = IN(c, i);
    if (!*s)
        return kiln__ierr(c, KILN_ERR_SHAPE, "input %d is missing", i);
    return KILN_OK;
}

void kiln__vs_unknown(kiln_vshape *o, kiln_dtype dt)
{
    o->kind = KILN_VAL_TENSOR;
    o->dtype = dt;
    o->rank = -1;
    o->hv = false;
    o->nval = 0;
}

void kiln__vs_set(kiln_vshape *o, kiln_dtype dt, int rank, const kiln_sdim *dims)
{
    kiln__vs_unknown(o, dt);
    o->rank = rank;
    if (rank > 0)
        memmove(o->dims, dims, sizeof *dims * (size_t)rank);
}

void kiln__vs_fresh(kiln_ictx *c, kiln_vshape *o, kiln_dtype dt, int rank)
{
    kiln__vs_unknown(o, dt);
    o->rank = rank;
    for (int d = 0; d < rank; d++)
        o->dims[d] = kiln__sd_unknown(c->st);
}

kiln_status kiln__norm_ax(const kiln_ictx *c, int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= rank)
        return kiln__ierr(c, KILN_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

bool kiln__dt_int_like(kiln_dtype dt) { return kiln__dtype_is_int(dt) || dt == KILN_DT_BOOL; }

kiln_sdim kiln__C(const kiln_ictx *c, int64_t v) { return kiln__sd_const(c->st, v); }

bool kiln__is_c(const kiln_ictx *c, kiln_sdim d, int64_t v)
{
    int64_t x;
    return kiln__sd_is_const(c->st, d, &x) && x == v;
}

int kiln__in_syms(const kiln_ictx *c, int i, kiln_sdim *v, int max)
{
    const kiln_vshape *s = IN(c, i);
    if (!s || !s->hv || s->nval > max)
        return -1;
    for (int k = 0; k < s->nval; k++) {
        if (kiln__dt_int_like(s->dtype))
            v[k] = s->val[k].i;
        else if (s->val[k].f >= -0x1p63 && s->val[k].f < 0x1p63 &&   /* the cast below is defined */
                 s->val[k].f == (double)(int64_t)s->val[k].f)
            v[k] = kiln__C(c, (int64_t)s->val[k].f);
        else
            return -1;
    }
    return s->nval;
}

int kiln__in_ints(const kiln_ictx *c, int i, int64_t *v, int max)
{
    kiln_sdim s[KILN_SHAPE_MAXVAL];
    int n = kiln__in_syms(c, i, s, max < KILN_SHAPE_MAXVAL ? max : KILN_SHAPE_MAXVAL);
    for (int k = 0; k < n; k++)
        if (!kiln__sd_is_const(c->st, s[k], &v[k]))
            return -1;
    return n;
}

int kiln__in_shape(kiln_ictx *c, int i, kiln_sdim *dims)
{
    int n = kiln__in_syms(c, i, dims, KILN_MAX_DIMS);
    if (n >= 0)
        return n;
    const kiln_vshape *s = IN(c, i);
    int64_t len;
    if (s && s->rank == 1 && kiln__sd_is_const(c->st, s->dims[0], &len) && len <= KILN_MAX_DIMS) {
        for (int d = 0; d < len; d++)
            dims[d] = kiln__sd_unknown(c->st);
        return (int)len;
    }
    return -1;
}

int64_t kiln__const_numel(const kiln_ictx *c, const kiln_vshape *s)
{
    if (s->rank < 0)
        return -1;
    int64_t n = 1, d;
    for (int k = 0; k < s->rank; k++) {
        if (!kiln__sd_is_const(c->st, s->dims[k], &d) || d < 0 || __builtin_mul_overflow(n, d, &n))
            return -1;
    }
    return n;
}

kiln_sdim kiln__numel(const kiln_ictx *c, const kiln_vshape *s)
{
    if (s->rank < 0)
        return kiln__sd_unknown(c->st);
    kiln_sdim n = kiln__C(c, 1);
    for (int k = 0; k < s->rank; k++)
        n = kiln__sd_mul(c->st, n, s->dims[k]);
    return n;
}

bool kiln__vs_can_hold(const kiln_ictx *c, const kiln_vshape *o)
{
    int64_t n = kiln__const_numel(c, o);
    return n >= 0 && n <= KILN_SHAPE_MAXVAL && o->dtype != KILN_DT_STRING && o->dtype != KILN_DT_UNDEFINED;
}

void kiln__vs_from_tensor(kiln_symtab *st, const kiln_tensor *t, kiln_vshape *o)
{
    kiln__vs_unknown(o, t->dtype);
    o->rank = t->ndim;
    for (int d = 0; d < t->ndim; d++)
        o->dims[d] = kiln__sd_const(st, t->dims[d]);
    int64_t n = kiln_tensor_numel(t);
    if (n < 0 || n > KILN_SHAPE_MAXVAL || t->dtype == KILN_DT_STRING || (n > 0 && !t->data) ||
        (!kiln__dt_int_like(t->dtype) && !kiln__dtype_is_float(t->dtype)) || kiln_dtype_size(t->dtype) == 0)
        return;
    o->hv = true;
    o->nval = (int)n;
    for (int64_t k = 0; k < n; k++) {
        if (kiln__dt_int_like(t->dtype))
            o->val[k].i = kiln__sd_const(st, kiln__get_i64(t->dtype, t->data, k));
        else
            o->val[k].f = kiln__get_f64(t->dtype, t->data, k);
    }
}

kiln_dtype kiln__attr_dt(const kiln_node *n, const char *name, kiln_dtype def)
{
    int64_t v = kiln__attr_i(n, name, -1);
    return v > 0 && v < KILN_DT_COUNT ? (kiln_dtype)v : def;
}

kiln_status kiln__bcast(kiln_ictx *c, int n, const kiln_vshape *const *ins, kiln_vshape *o)
{
    int rank = 0;
    for (int i = 0; i < n; i++) {
        if (!ins[i])
            continue;
        if (ins[i]->rank < 0) {
            o->rank = -1;
            return KILN_OK;
        }
        rank = ins[i]->rank > rank ? ins[i]->rank : rank;
    }
    o->rank = rank;
    for (int d = 0; d < rank; d++) {
        kiln_sdim r = kiln__C(c, 1);
        int64_t rc = 1;   /* r's constant value, or -1 if symbolic */
        for (int i = 0; i < n; i++) {
            if (!ins[i] || d < rank - ins[i]->rank)
                continue;
            kiln_sdim x = ins[i]->dims[d - (rank - ins[i]->rank)];
            int64_t xc;
            bool xk = kiln__sd_is_const(c->st, x, &xc);
            if (x == r || (xk && xc == 1))
                continue;
            if (rc == 1) {
                r = x;
                rc = xk ? xc : -1;
            } else if (xk && rc >= 0) {
                return kiln__ierr(c, KILN_ERR_SHAPE, "cannot broadcast dim %lld with %lld (axis %d of %d)",
                                  (long long)rc, (long long)xc, d, rank);
            } else if (xk) {
                r = x;   /* a symbolic dim meets a known one != 1: it must equal it */
                rc = xc;
            } else if (rc < 0) {
                r = kiln__sd_max(c->st, r, x);   /* equal, or one of them is 1 */
            }
        }
        o->dims[d] = r;
    }
    return KILN_OK;
}

void kiln__vshape_declared(kiln_symtab *st, const kiln_value *v, kiln_vshape *out)
{
    kiln__vs_unknown(out, v->dtype);
    out->kind = v->kind;
    if (v->kind != KILN_VAL_TENSOR || v->ndim < 0 || v->ndim > KILN_MAX_DIMS)
        return;
    out->rank = v->ndim;
    for (int d = 0; d < v->ndim; d++) {
        if (v->dims[d].param && v->dims[d].param[0]) {
            out->dims[d] = kiln__sd_sym(st, v->dims[d].param);
        } else if (v->dims[d].value >= 0) {
            out->dims[d] = kiln__sd_const(st, v->dims[d].value);
        } else {
            char name[300];
            snprintf(name, sizeof name, "%s.%d", v->name, d);
            out->dims[d] = kiln__sd_sym(st, name);
        }
    }
}

bool kiln__vshape_complete(const kiln_symtab *st, const kiln_vshape *s)
{
    if (s->kind != KILN_VAL_TENSOR)
        return true;
    if (s->rank < 0)
        return false;
    for (int d = 0; d < s->rank; d++)
        if (kiln__sd_has_unknown(st, s->dims[d]))
            return false;
    return true;
}

bool kiln__vshape_eval(const kiln_symtab *st, const kiln_vshape *s, int n, const char *const *names,
                       const int64_t *vals, int64_t *dims)
{
    if (s->rank < 0)
        return false;
    for (int d = 0; d < s->rank; d++)
        if (kiln__sd_eval(st, s->dims[d], n, names, vals, &dims[d]) != KILN_OK)
            return false;
    return true;
}

bool kiln__shape_has_infer(kiln_op op) { return kiln__infer_fn(op) != NULL; }

static const kiln_vshape *lookup_outer(const kiln_sframe *f, const char *name)
{
    for (; f; f = f->parent) {
        int v = kiln__graph_find(f->g, name);
        if (v >= 0)
            return &f->v[v];
    }
    return NULL;
}

static kiln_status infer_node(kiln_sframe *f, kiln_symtab *st, const kiln_node *n)
{
    kiln_vshape *scratch = NULL;
    const kiln_vshape *ib[16], **in = ib;
    kiln_vshape *ob[16], **out = ob;
    kiln_status s = KILN_OK;
    if (n->n_in > 16 || n->n_out > 16) {
        in = kiln__calloc((size_t)n->n_in + 1, sizeof *in);
        out = kiln__calloc((size_t)n->n_out + 1, sizeof *out);
        if (!in || !out) {
            s = kiln__err(KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    for (int i = 0; i < n->n_in; i++)
        in[i] = n->in[i] >= 0 ? &f->v[n->in[i]] : NULL;
    for (int o = 0; o < n->n_out; o++) {
        if (n->out[o] < 0 && !scratch && !(scratch = kiln__calloc((size_t)n->n_out, sizeof *scratch))) {
            s = kiln__err(KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
        out[o] = n->out[o] >= 0 ? &f->v[n->out[o]] : &scratch[o];
        kiln__vs_unknown(out[o], KILN_DT_UNDEFINED);
    }
    kiln_ictx c = {.st = st, .n = n, .f = f, .n_in = n->n_in, .n_out = n->n_out, .in = in, .out = out};
    kiln_infer_fn fn = kiln__infer_fn(n->op);
    if (fn)
        s = fn(&c);
    for (int o = 0; s == KILN_OK && o < n->n_out; o++) {
        if (out[o]->rank > KILN_MAX_DIMS)
            s = kiln__ierr(&c, KILN_ERR_LIMIT, "output %d has rank %d (at most %d)", o, out[o]->rank, KILN_MAX_DIMS);
        if (out[o]->hv && !kiln__vs_can_hold(&c, out[o]))
            out[o]->hv = false;
    }
    if (s == KILN_OK && kiln__symtab_failed(st))
        s = kiln__err(KILN_ERR_NOMEM, "out of memory in shape inference");
done:
    if (in != ib) {
        kiln__free(in);
        kiln__free(out);
    }
    kiln__free(scratch);
    return s;
}

kiln_status kiln__infer_frame(kiln_sframe *f, kiln_symtab *st, const kiln_vshape *const *in)
{
    const kiln_graph *g = f->g;
    if (f->depth > MAX_INFER_DEPTH)
        return kiln__err(KILN_ERR_LIMIT, "subgraphs nested deeper than %d", MAX_INFER_DEPTH);
    for (int v = 0; v < g->n_values; v++) {
        const kiln_value *val = &g->values[v];
        kiln__vs_unknown(&f->v[v], val->kind == KILN_VAL_TENSOR ? KILN_DT_UNDEFINED : val->dtype);
        f->v[v].kind = val->kind;
        if (val->init) {
            kiln__vs_from_tensor(st, val->init, &f->v[v]);
        } else if (val->is_outer && val->producer < 0) {
            const kiln_vshape *o = lookup_outer(f->parent, val->name);
            if (o)
                f->v[v] = *o;
        }
    }
    for (int i = 0; i < g->n_inputs; i++) {
        kiln_vshape *d = &f->v[g->inputs[i]];
        if (in && in[i])
            *d = *in[i];
        else
            kiln__vshape_declared(st, &g->values[g->inputs[i]], d);
    }
    for (int i = 0; i < g->n_nodes; i++)
        KILN_TRY(infer_node(f, st, &g->nodes[i]));
    return kiln__symtab_failed(st) ? kiln__err(KILN_ERR_NOMEM, "out of memory in shape inference") : KILN_OK;
}

kiln_status kiln__infer_shapes(const kiln_graph *g, kiln_symtab *st, const kiln_vshape *const *in, kiln_vshape **out)
{
    *out = NULL;
    kiln_vshape *v = kiln__calloc((size_t)g->n_values + 1, sizeof *v);
    if (!v || !st)
        return kiln__free(v), kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_sframe f = {.g = g, .v = v};
    kiln_status s = kiln__infer_frame(&f, st, in);
    if (s != KILN_OK) {
        kiln__free(v);
        return s;
    }
    *out = v;
    return KILN_OK;
}
