/* Node rewriting helpers for fusion passes. */
#include "rewrite.h"
#include <stdio.h>
#include <string.h>

kiln_node *kiln__producer(kiln_graph *g, int v)
{
    if (v < 0 || g->values[v].producer < 0 || g->values[v].init)
        return NULL;
    kiln_node *n = &g->nodes[g->values[v].producer];
    return n->dead ? NULL : n;
}

bool kiln__const_scalar(const kiln_graph *g, int v, double *out)
{
    const kiln_tensor *t = kiln__const_of(g, v);
    if (!t || kiln_tensor_numel(t) != 1 || kiln_dtype_size(t->dtype) == 0 || t->dtype >= KILN_DT_FP8E4M3)
        return false;
    *out = kiln__get_f64(t->dtype, t->data, 0);
    return true;
}

/* n's precision request (and those n carried) appended to into's KILN_ATTR_PREC_FUSED lines */
static kiln_status carry_prec_requests(kiln_node *into, const kiln_node *n)
{
    const char *req = kiln__attr_s(n, KILN_ATTR_PREC_REQ, NULL), *more = kiln__attr_s(n, KILN_ATTR_PREC_FUSED, NULL);
    if (!req && !more)
        return KILN_OK;
    const char *have = kiln__attr_s(into, KILN_ATTR_PREC_FUSED, NULL), *label = n->name[0] ? n->name : n->op_type;
    const char *dom = n->domain ? n->domain : "", *exact = kiln__attr_i(n, KILN_ATTR_PREC_EXACT, 0) ? "\t1" : "";
    size_t len = (have ? strlen(have) + 1 : 0) +
                 (req ? strlen(label) + strlen(dom) + strlen(n->op_type) + strlen(req) + strlen(exact) + 4 : 0) +
                 (more ? strlen(more) + 1 : 0) + 1;
    char *s = kiln__malloc(len);
    if (!s)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    size_t k = 0;
    if (have)
        k += (size_t)snprintf(s + k, len - k, "%s", have);
    if (req)
        k += (size_t)snprintf(s + k, len - k, "%s%s\t%s\t%s\t%s%s", k ? "\n" : "", label, dom, n->op_type, req, exact);
    if (more)
        k += (size_t)snprintf(s + k, len - k, "%s%s", k ? "\n" : "", more);
    kiln_status st = kiln__node_set_attr_s(into, KILN_ATTR_PREC_FUSED, s);
    kiln__free(s);
    return st;
}

kiln_status kiln__node_add_fused_node(kiln_node *into, const kiln_node *n)
{
    KILN_TRY(kiln__node_add_fused(into, n->name[0] ? n->name : n->op_type));
    if (n->fused_from)
        KILN_TRY(kiln__node_add_fused(into, n->fused_from));
    return carry_prec_requests(into, n);
}

kiln_status kiln__absorb(kiln_graph *g, int into, int idx)
{
    KILN_TRY(kiln__node_add_fused_node(&g->nodes[into], &g->nodes[idx]));
    kiln__node_kill(g, idx);
    return KILN_OK;
}

kiln_status kiln__move_node_into(kiln_graph *g, int a, int b)
{
    KILN_TRY(kiln__graph_move_node_into(g, a, b));
    return kiln__node_add_fused_node(&g->nodes[b], &g->nodes[a]);   /* the husk: b's old self */
}

kiln_status kiln__node_set_op(kiln_node *n, kiln_op op, const char *domain, int opset)
{
    char *t = kiln__strdup(kiln__op_name(op)), *d = kiln__strdup(domain);
    if (!t || !d) {
        kiln__free(t);
        kiln__free(d);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    kiln__free(n->op_type);
    kiln__free(n->domain);
    n->op_type = t;
    n->domain = d;
    n->op = op;
    n->opset = opset;
    return KILN_OK;
}

bool kiln__vshape_same(const kiln_vshape *a, const kiln_vshape *b)
{
    if (a->rank < 0 || a->rank != b->rank)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    return true;
}

kiln_status kiln__pass_with_shapes_u(kiln_graph *g,
                                     kiln_status (*fuse)(kiln_graph *g, const kiln_vshape *vs, void *user, int *changed),
                                     void *user, int *changed)
{
    *changed = 0;
    if (kiln__graph_has_subgraphs(g))
        return KILN_OK;
    kiln_symtab *st = kiln__symtab_new();
    kiln_vshape *vs = NULL;
    if (!st)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status s = kiln__infer_shapes(g, st, NULL, &vs);
    if (s == KILN_OK)
        s = fuse(g, vs, user, changed);
    else
        s = KILN_OK;   /* shapes not inferred: nothing fused */
    kiln__free(vs);
    kiln__symtab_free(st);
    return s == KILN_OK && *changed ? kiln__graph_remove_dead(g) : s;
}

typedef struct plain_fuse {
    kiln_status (*fuse)(kiln_graph *g, const kiln_vshape *vs, int *changed);
} plain_fuse;

static kiln_status call_plain(kiln_graph *g, const kiln_vshape *vs, void *user, int *changed)
{
    return ((const plain_fuse *)user)->fuse(g, vs, changed);
}

kiln_status kiln__pass_with_shapes(kiln_graph *g, kiln_status (*fuse)(kiln_graph *g, const kiln_vshape *vs, int *changed),
                                   int *changed)
{
    plain_fuse f = {fuse};
    return kiln__pass_with_shapes_u(g, call_plain, &f, changed);
}
