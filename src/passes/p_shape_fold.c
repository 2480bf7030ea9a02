/* fold-shapes: Shape and Size of every value whose shape static inference (src/ir/shape.c)
 * determines completely at the given input shapes become constants, so constant folding can
 * then collapse the Shape/Gather/Unsqueeze/Concat chains that exporters write to compute Reshape
 * targets. Values whose shape depends on data (NonZero, Loop, ...) keep unknown dims and are left
 * alone. No run of the model is needed. */
#include "rewrite.h"
#include "../ir/shape.h"

/* A constant int64 tensor from a fully known value (dims and element values constant). */
static bool const_value(kiln_symtab *st, const kiln_vshape *s, kiln_tensor *t)
{
    if (!s->hv || s->rank < 0 || s->dtype != KILN_DT_INT64)
        return false;
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < s->rank; d++)
        if (!kiln__sd_is_const(st, s->dims[d], &dims[d]))
            return false;
    for (int k = 0; k < s->nval; k++)
        if (!kiln__sd_is_const(st, s->val[k].i, NULL))
            return false;
    if (kiln__tensor_alloc(t, KILN_DT_INT64, s->rank, dims) != KILN_OK)
        return false;
    for (int k = 0; k < s->nval; k++)
        kiln__sd_is_const(st, s->val[k].i, &((int64_t *)t->data)[k]);
    return true;
}

kiln_status kiln__pass_fold_shapes(kiln_graph *g, const kiln_tensor *in_shapes, int *changed)
{
    *changed = 0;
    kiln_symtab *st = kiln__symtab_new();
    kiln_vshape *in = kiln__calloc((size_t)g->n_inputs + 1, sizeof *in), *vs = NULL;
    const kiln_vshape **pin = kiln__calloc((size_t)g->n_inputs + 1, sizeof *pin);
    kiln_status s = st && in && pin ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; s == KILN_OK && in_shapes && i < g->n_inputs; i++) {
        if (in_shapes[i].ndim < 0)
            continue;   /* declared shape */
        kiln_tensor meta = in_shapes[i];
        meta.data = NULL;   /* shapes only: input values are runtime data */
        kiln__vs_from_tensor(st, &meta, &in[i]);
        in[i].hv = false;
        pin[i] = &in[i];
    }
    if (s == KILN_OK)
        s = kiln__infer_shapes(g, st, pin, &vs);
    for (int i = 0; s == KILN_OK && i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        kiln_tensor c;
        if ((n->op != KILN_OP_Shape && n->op != KILN_OP_Size) || n->n_out != 1 || n->out[0] < 0 ||
            !const_value(st, &vs[n->out[0]], &c))
            continue;
        s = kiln__value_set_const(g, n->out[0], &c);
        kiln__tensor_release(&c);   /* moved out unless out of memory */
        if (s != KILN_OK)
            break;
        kiln__node_kill(g, i);
        (*changed)++;
    }
    kiln__free(vs);
    kiln__free(in);
    kiln__free(pin);
    kiln__symtab_free(st);
    if (s == KILN_OK && *changed)
        s = kiln__graph_remove_dead(g);
    return s;
}
