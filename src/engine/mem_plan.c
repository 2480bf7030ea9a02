/* The engine's memory plan: which ops may compute in place, freeing, and the check of a plan read
 * from an engine file (mem_plan.h). */
#include "mem_plan.h"

/* Ops whose kernels compute out[i] from in[i] (same index) and may therefore overwrite an input; the
 * reshaping ops among them then move no bytes at all (their kernels skip the copy onto itself). */
bool kiln__plan_inplace_op(kiln_op op)
{
    switch (op) {
    case KILN_OP_Relu: case KILN_OP_Sigmoid: case KILN_OP_Tanh: case KILN_OP_Clip: case KILN_OP_LeakyRelu:
    case KILN_OP_HardSigmoid: case KILN_OP_HardSwish: case KILN_OP_Elu: case KILN_OP_Selu: case KILN_OP_Exp:
    case KILN_OP_Erf: case KILN_OP_Sqrt: case KILN_OP_Neg: case KILN_OP_Abs: case KILN_OP_Add: case KILN_OP_Sub:
    case KILN_OP_Mul: case KILN_OP_Div: case KILN_OP_Gelu: case KILN_OP_Softplus: case KILN_OP_Mish:
    case KILN_OP_Reshape: case KILN_OP_Flatten: case KILN_OP_Squeeze: case KILN_OP_Unsqueeze:
        return true;
    default:
        return false;
    }
}

void kiln__plan_free(kiln_plan *p)
{
    kiln__free(p->offset);
    kiln__free(p->cap);
    kiln__free(p->inplace);
    memset(p, 0, sizeof *p);
}

/* ---- validation of a plan read from an engine file ---- */

typedef struct live_slot {
    uint64_t off, end;   /* bytes [off, end) */
    int v;
} live_slot;

/* Whether op computes its output 0 in place (over one of its first two inputs; a FusedConv over its residual,
 * input 3: runtime/plan.c). */
static bool inplace_capable(kiln_op op)
{
    return kiln__plan_inplace_op(op) || op == KILN_OP_FusedConv;
}

/* True if v may share u's bytes: v is computed in place over u by an op that allows it (the way
 * kiln__plan_make pairs them): v is output 0 of an in-place op, u one of its first two inputs
 * (a FusedConv's residual, input 3) and dies there, and both occupy the same bytes. */
static bool inplace_pair(const kiln_graph *g, const kiln_plan *p, const int *last, int u, int v)
{
    int i = g->values[v].producer;
    const kiln_node *n = &g->nodes[i];
    if (p->inplace[v] != KILN_SLOT_INPLACE || !inplace_capable(n->op) || n->n_out < 1 || n->out[0] != v || last[u] != i ||
        p->offset[u] != p->offset[v] || p->cap[u] != p->cap[v])
        return false;
    if (n->op == KILN_OP_FusedConv)
        return n->n_in >= 4 && n->in[3] == u;
    for (int j = 0; j < n->n_in && j < 2; j++)
        if (n->in[j] == u)
            return true;
    return false;
}

/* For v marked KILN_SLOT_CONCAT: v is the output of Concat node n, and each of n's inputs (distinct, all planned) lies
 * exactly where its bytes go in v -- the way kiln__plan_make places them (contiguous pieces, in order). */
static bool concat_slot_ok(const kiln_plan *p, const kiln_node *n, int v)
{
    if (n->op != KILN_OP_Concat || n->n_out != 1 || n->out[0] != v || n->n_in < 1)
        return false;
    uint64_t off = (uint64_t)p->offset[v];
    for (int k = 0; k < n->n_in; k++) {
        int u = n->in[k];
        if (u < 0 || u >= p->n_values || p->offset[u] < 0 || (uint64_t)p->offset[u] != off)
            return false;
        for (int j = 0; j < k; j++)
            if (n->in[j] == u)
                return false;
        off += p->cap[u];
    }
    return off == (uint64_t)p->offset[v] + p->cap[v];
}

/* True if u is an input of v's Concat, computed into v's slot ahead of it (KILN_SLOT_CONCAT, checked above). */
static bool concat_piece(const kiln_graph *g, const kiln_plan *p, int u, int v)
{
    if (p->inplace[v] != KILN_SLOT_CONCAT)
        return false;
    const kiln_node *n = &g->nodes[g->values[v].producer];
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] == u)
            return true;
    return false;
}

kiln_status kiln__plan_validate(const kiln_graph *g, const kiln_plan *p)
{
    int nv = g->n_values;
    if (p->n_values != nv)
        return kiln__err(KILN_ERR_PARSE, "memory plan covers %d values, the graph has %d", p->n_values, nv);
    int *last = kiln__malloc(sizeof(int) * ((size_t)nv + 1));
    live_slot *live = kiln__malloc(sizeof(live_slot) * ((size_t)nv + 1));
    kiln_status st = KILN_OK;
    if (!last || !live) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory validating the memory plan");
        goto done;
    }
    /* lifetimes: from the producing node to the last consuming node (graph outputs: to the end) */
    for (int v = 0; v < nv; v++)
        last[v] = g->values[v].producer;
    kiln__mark_last_uses(g, last);
    for (int o = 0; o < g->n_outputs; o++)
        last[g->outputs[o]] = g->n_nodes;
    /* the planner puts each block at the lowest offset clear of the blocks it overlaps in time, so its arena
     * never exceeds the sum of the (aligned) slots: a larger one is corrupt, and would be allocated */
    uint64_t slots = 0;
    for (int v = 0; v < nv; v++) {
        if (p->inplace[v] > KILN_SLOT_CONCAT)
            goto bad_value;
        if (p->offset[v] < 0) {
            if (p->inplace[v] || p->offset[v] != -1)
                goto bad_value;
            continue;
        }
        uint64_t c = ((uint64_t)p->cap[v] + KILN_PLAN_ALIGN - 1) / KILN_PLAN_ALIGN * KILN_PLAN_ALIGN;
        slots = c < p->cap[v] || slots + c < slots ? UINT64_MAX : slots + c;
        /* only values computed by a node of this graph live in the arena, inside it */
        int i = g->values[v].producer;
        if (i < 0 || i >= g->n_nodes || g->values[v].init || p->cap[v] == 0 || p->cap[v] > p->arena_size ||
            (uint64_t)p->offset[v] > p->arena_size - p->cap[v])
            goto bad_value;
    }
    if ((uint64_t)p->arena_size > slots) {
        st = kiln__err(KILN_ERR_PARSE, "corrupted engine: memory plan's arena (%zu bytes) exceeds the sum of its slots "
                       "(%llu)", p->arena_size, (unsigned long long)slots);
        goto done;
    }
    /* sweep the nodes in order, keeping the slots live at the current node: a new slot must not
     * share a byte with any of them unless it is computed in place over that one */
    int nlive = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        int k = 0;
        for (int q = 0; q < nlive; q++)
            if (last[live[q].v] >= i)
                live[k++] = live[q];
        nlive = k;
        const kiln_node *n = &g->nodes[i];
        for (int o = 0; o < n->n_out; o++) {
            int v = n->out[o];
            if (v < 0 || v >= nv || p->offset[v] < 0 || g->values[v].producer != i)
                continue;
            uint64_t off = (uint64_t)p->offset[v], end = off + p->cap[v];
            if (p->inplace[v] == KILN_SLOT_CONCAT && !(o == 0 && concat_slot_ok(p, n, v)))
                goto bad_value;
            for (int q = 0; q < nlive; q++)
                if (live[q].off < end && off < live[q].end && !inplace_pair(g, p, last, live[q].v, v) &&
                    !concat_piece(g, p, live[q].v, v)) {
                    st = kiln__err(KILN_ERR_PARSE,
                                   "corrupted engine: memory plan places '%s' over '%s' while both are live",
                                   g->values[v].name, g->values[live[q].v].name);
                    goto done;
                }
            if (p->inplace[v] == KILN_SLOT_INPLACE && !(o == 0 && inplace_capable(n->op)))
                goto bad_value;
            live[nlive++] = (live_slot){off, end, v};
        }
    }
    goto done;
bad_value:
    st = kiln__err(KILN_ERR_PARSE, "corrupted engine: invalid memory plan entry");
done:
    kiln__free(last);
    kiln__free(live);
    return st;
}
