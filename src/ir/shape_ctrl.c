/* Shape inference of control flow: the subgraphs of If, Loop and Scan are inferred in a child
 * frame whose outer-scope names resolve through every enclosing frame. Where iterations or
 * branches may disagree, dims are generalized to fresh unknowns. */
#include "shape_impl.h"

/* Infers subgraph g with its inputs' shapes `in` (g->n_inputs entries); *vals receives the
 * per-value shapes (caller frees). */
static kiln_status infer_sub(kiln_ictx *c, const kiln_graph *g, const kiln_vshape *const *in, kiln_vshape **vals)
{
    *vals = kiln__calloc((size_t)g->n_values + 1, sizeof **vals);
    if (!*vals)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_sframe f = {.g = g, .v = *vals, .parent = c->f, .depth = c->f->depth + 1};
    kiln_status s = kiln__infer_frame(&f, c->st, in);
    if (s != KILN_OK) {
        kiln__err_prefix("in a subgraph of node '%s' (%s)", c->n->name, c->n->op_type);
        kiln__free(*vals);
        *vals = NULL;
    }
    return s;
}

/* a := the most specific shape that covers both a and b. */
static void generalize(kiln_ictx *c, kiln_vshape *a, const kiln_vshape *b)
{
    if (a->dtype == KILN_DT_UNDEFINED)
        a->dtype = b->dtype;
    if (a->hv && !(b->hv && b->nval == a->nval && !memcmp(a->val, b->val, sizeof a->val[0] * (size_t)a->nval)))
        a->hv = false;
    if (a->rank != b->rank) {
        a->rank = -1;
        return;
    }
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            a->dims[d] = kiln__sd_unknown(c->st);
}

static const kiln_graph *graph_attr(const kiln_ictx *c, const char *name)
{
    const kiln_attr *a = kiln__attr(c->n, name);
    return a ? a->g : NULL;
}

kiln_status kiln__si_if(kiln_ictx *c)
{
    const kiln_graph *br[2] = {graph_attr(c, "then_branch"), graph_attr(c, "else_branch")};
    if (!br[0] || !br[1])
        return kiln__ierr(c, KILN_ERR_SHAPE, "missing then_branch or else_branch");
    for (int b = 0; b < 2; b++)
        if (br[b]->n_outputs != c->n_out)
            return kiln__ierr(c, KILN_ERR_SHAPE, "%s branch has %d outputs, the node %d",
                              b ? "else" : "then", br[b]->n_outputs, c->n_out);
    int64_t cond;
    const kiln_vshape *cv = IN(c, 0);
    bool known = cv && cv->hv && cv->nval == 1 && kiln__dt_int_like(cv->dtype) && kiln__sd_is_const(c->st, cv->val[0].i, &cond);
    kiln_vshape *vals[2] = {NULL, NULL};
    kiln_status s = KILN_OK;
    for (int b = 0; b < 2 && s == KILN_OK; b++)
        if (!known || (b == 0) == (cond != 0))
            s = infer_sub(c, br[b], NULL, &vals[b]);
    for (int o = 0; s == KILN_OK && o < c->n_out; o++) {
        bool first = true;
        for (int b = 0; b < 2; b++) {
            if (!vals[b])
                continue;
            const kiln_vshape *r = &vals[b][br[b]->outputs[o]];
            if (first)
                *c->out[o] = *r;
            else
                generalize(c, c->out[o], r);
            first = false;
        }
    }
    kiln__free(vals[0]);
    kiln__free(vals[1]);
    return s;
}

/* Runs the body once with `in`, then once more with the carried inputs generalized to cover
 * the first iteration's outputs; carried (n_carry) body inputs start at in_off, outputs at out_off. */
static kiln_status infer_body(kiln_ictx *c, const kiln_graph *body, kiln_vshape *in, int in_off, int out_off,
                              int n_carry, kiln_vshape **vals)
{
    const kiln_vshape *inp[256];
    if (body->n_inputs > 256)
        return kiln__ierr(c, KILN_ERR_LIMIT, "body has %d inputs", body->n_inputs);
    for (int k = 0; k < body->n_inputs; k++)
        inp[k] = &in[k];
    KILN_TRY(infer_sub(c, body, inp, vals));
    bool again = false;
    for (int k = 0; k < n_carry; k++) {
        kiln_vshape before = in[in_off + k];
        generalize(c, &in[in_off + k], &(*vals)[body->outputs[out_off + k]]);
        again |= before.rank != in[in_off + k].rank || before.hv != in[in_off + k].hv ||
                 memcmp(before.dims, in[in_off + k].dims, sizeof before.dims[0] * (size_t)(before.rank > 0 ? before.rank : 0));
    }
    if (!again)
        return KILN_OK;
    kiln__free(*vals);
    return infer_sub(c, body, inp, vals);
}

kiln_status kiln__si_loop(kiln_ictx *c)
{
    const kiln_graph *body = graph_attr(c, "body");
    if (!body)
        return kiln__ierr(c, KILN_ERR_SHAPE, "missing body");
    int n_carry = c->n_in - 2;
    if (n_carry < 0 || body->n_inputs != n_carry + 2 || body->n_outputs < n_carry + 1 ||
        c->n_out != body->n_outputs - 1)
        return kiln__ierr(c, KILN_ERR_SHAPE, "body has %d inputs and %d outputs for %d loop-carried values",
                          body->n_inputs, body->n_outputs, n_carry);
    kiln_vshape *in = kiln__calloc((size_t)body->n_inputs + 1, sizeof *in);
    if (!in)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln__vs_set(&in[0], KILN_DT_INT64, 0, NULL);
    kiln__vs_set(&in[1], KILN_DT_BOOL, 0, NULL);
    for (int k = 0; k < n_carry; k++) {
        const kiln_vshape *x = IN(c, 2 + k);
        if (x)
            in[2 + k] = *x;
        else
            kiln__vshape_declared(c->st, &body->values[body->inputs[2 + k]], &in[2 + k]);
        in[2 + k].hv = false;
    }
    kiln_vshape *vals = NULL;
    kiln_status s = infer_body(c, body, in, 2, 1, n_carry, &vals);
    if (s == KILN_OK) {
        kiln_sdim trip = kiln__sd_unknown(c->st), m;
        const kiln_vshape *bc = &vals[body->outputs[0]];
        int64_t cv;
        if (kiln__in_syms(c, 0, &m, 1) == 1 && bc->hv && bc->nval == 1 && kiln__dt_int_like(bc->dtype) &&
            kiln__sd_is_const(c->st, bc->val[0].i, &cv) && cv)
            trip = m;
        for (int o = 0; o < c->n_out; o++) {
            const kiln_vshape *r = &vals[body->outputs[1 + o]];
            if (o < n_carry) {
                *c->out[o] = in[2 + o];
                generalize(c, c->out[o], r);
            } else if (r->rank >= 0 && r->rank < KILN_MAX_DIMS) {
                kiln__vs_set(c->out[o], r->dtype, 0, NULL);
                c->out[o]->rank = r->rank + 1;
                c->out[o]->dims[0] = trip;
                memcpy(c->out[o]->dims + 1, r->dims, sizeof r->dims[0] * (size_t)r->rank);
            } else {
                kiln__vs_unknown(c->out[o], r->dtype);
                c->out[o]->kind = r->kind;
            }
        }
    }
    kiln__free(vals);
    kiln__free(in);
    return s;
}

kiln_status kiln__si_scan(kiln_ictx *c)
{
    const kiln_graph *body = graph_attr(c, "body");
    if (!body)
        return kiln__ierr(c, KILN_ERR_SHAPE, "missing body");
    bool v8 = c->n->opset < 9;   /* opset 8: sequence_lens input first, a batch dim on everything */
    int first = v8 ? 1 : 0;
    int M = (int)kiln__attr_i(c->n, "num_scan_inputs", 0), N = c->n_in - first - M, K = body->n_outputs - N;
    if (M < 1 || N < 0 || K < 0 || body->n_inputs != N + M || c->n_out != N + K)
        return kiln__ierr(c, KILN_ERR_SHAPE, "body has %d inputs and %d outputs for %d scan inputs", body->n_inputs,
                          body->n_outputs, M);
    kiln_vshape *in = kiln__calloc((size_t)(N + M) + 1, sizeof *in);
    if (!in)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    const int64_t *ia, *oa;
    int nia = kiln__attr_ints(c->n, "scan_input_axes", &ia), noa = kiln__attr_ints(c->n, "scan_output_axes", &oa);
    kiln_sdim len = KILN_SDIM_NONE, batch = KILN_SDIM_NONE;
    kiln_status s = KILN_OK;
    for (int k = 0; k < N + M && s == KILN_OK; k++) {
        const kiln_vshape *x = IN(c, first + k);
        if (!x) {
            s = kiln__ierr(c, KILN_ERR_SHAPE, "input %d is missing", first + k);
            break;
        }
        in[k] = *x;
        in[k].hv = false;
        int drop = v8 ? 1 : 0;   /* v8: drop the batch dim (and the sequence dim of scan inputs) */
        if (v8 && x->rank == 0) {
            s = kiln__ierr(c, KILN_ERR_SHAPE, "input %d is a scalar, expected a batch dim", first + k);
            break;
        }
        if (x->rank >= 0 && v8) {
            batch = x->dims[0];
            memmove(in[k].dims, in[k].dims + 1, sizeof in[k].dims[0] * (size_t)(x->rank - 1));
            in[k].rank--;
        }
        if (k >= N && x->rank >= drop + 1) {
            int ax = 0;
            if (!v8 && nia >= 0 && k - N < nia)
                s = kiln__norm_ax(c, ia[k - N], x->rank, &ax);
            if (s == KILN_OK) {
                len = in[k].dims[ax];
                memmove(in[k].dims + ax, in[k].dims + ax + 1, sizeof in[k].dims[0] * (size_t)(in[k].rank - ax - 1));
                in[k].rank--;
            }
        }
    }
    kiln_vshape *vals = NULL;
    if (s == KILN_OK)
        s = infer_body(c, body, in, 0, 0, N, &vals);
    if (len < 0)
        len = kiln__sd_unknown(c->st);
    for (int o = 0; s == KILN_OK && o < N + K; o++) {
        const kiln_vshape *r = &vals[body->outputs[o]];
        kiln_vshape *y = c->out[o];
        if (o < N) {
            *y = in[o];
            generalize(c, y, r);
        } else if (r->rank >= 0 && r->rank + 1 + v8 <= KILN_MAX_DIMS) {
            int ax = 0;
            if (!v8 && noa >= 0 && o - N < noa)
                s = kiln__norm_ax(c, oa[o - N], r->rank + 1, &ax);
            kiln__vs_set(y, r->dtype, 0, NULL);
            for (int d = 0, j = 0; d <= r->rank; d++)
                y->dims[y->rank++] = d == ax ? len : r->dims[j++];
        } else {
            kiln__vs_unknown(y, r->dtype);
            continue;
        }
        if (v8 && y->rank >= 0 && y->rank < KILN_MAX_DIMS) {
            memmove(y->dims + 1, y->dims, sizeof y->dims[0] * (size_t)y->rank);
            y->dims[0] = batch >= 0 ? batch : kiln__sd_unknown(c->st);
            y->rank++;
        }
    }
    kiln__free(vals);
    kiln__free(in);
    return s;
}
