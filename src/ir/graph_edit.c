/* Graph editing primitives used by the optimization passes; they keep the use index (uses.c)
 * up to date when it is built. */
#include "uses.h"
#include <stdio.h>

static kiln_status nomem(void) { return kiln__err(KILN_ERR_NOMEM, "out of memory"); }

kiln_status kiln__node_set_input(kiln_graph *g, int node, int slot, int v)
{
    kiln__uses_detach(g, node, slot);
    g->nodes[node].in[slot] = v;
    return kiln__uses_attach(g, node, slot);
}

/* Makes room for n inputs (the array keeps its contents). */
static kiln_status reserve_inputs(kiln_node *n, int count)
{
    int *ni = kiln__realloc(n->in, sizeof(int) * (size_t)(count > 0 ? count : 1));
    if (!ni)
        return nomem();
    n->in = ni;
    return KILN_OK;
}

kiln_status kiln__node_set_inputs(kiln_graph *g, int node, int n_in, const int *v)
{
    if (n_in > g->nodes[node].n_in)
        KILN_TRY(reserve_inputs(&g->nodes[node], n_in));
    kiln__uses_detach_node(g, node);
    kiln_node *n = &g->nodes[node];
    memmove(n->in, v, sizeof(int) * (size_t)n_in);
    n->n_in = n_in;
    return kiln__uses_attach_node(g, node);
}

kiln_status kiln__node_add_input(kiln_graph *g, int node, int v)
{
    kiln_node *n = &g->nodes[node];
    KILN_TRY(reserve_inputs(n, n->n_in + 1));
    n->in[n->n_in++] = v;
    return kiln__uses_attach(g, node, n->n_in - 1);
}

void kiln__node_set_output(kiln_graph *g, int node, int slot, int v)
{
    kiln_node *n = &g->nodes[node];
    int old = n->out[slot];
    if (old >= 0 && g->values[old].producer == node)
        g->values[old].producer = -1;
    n->out[slot] = v;
    if (v >= 0)
        g->values[v].producer = node;
}

void kiln__node_kill(kiln_graph *g, int node)
{
    kiln__uses_detach_node(g, node);
    g->nodes[node].dead = true;
}

kiln_status kiln__graph_replace_uses(kiln_graph *g, int from, int to)
{
    if (from < 0 || from == to)
        return KILN_OK;
    if (!g->uses) {
        for (int i = 0; i < g->n_nodes; i++)
            for (int j = 0; j < g->nodes[i].n_in; j++)
                if (g->nodes[i].in[j] == from)
                    g->nodes[i].in[j] = to;
        return KILN_OK;
    }
    KILN_TRY(kiln__uses_reserve_value(g, to));
    int n = kiln__value_uses(g, from), *readers = kiln__malloc(sizeof(int) * (size_t)(n + 1));
    if (!readers)
        return nomem();
    n = kiln__value_readers(g, from, readers, n);
    kiln_status st = KILN_OK;
    for (int k = 0; k < n && st == KILN_OK; k++)
        for (int j = 0; j < g->nodes[readers[k]].n_in && st == KILN_OK; j++)
            if (g->nodes[readers[k]].in[j] == from)
                st = kiln__node_set_input(g, readers[k], j, to);
    kiln__free(readers);
    return st;
}

kiln_status kiln__graph_move_node_into(kiln_graph *g, int a, int b)
{
    kiln__uses_detach_node(g, a);
    kiln__uses_detach_node(g, b);
    kiln_node na = g->nodes[a], nb = g->nodes[b];
    /* the survivor: a's op, attributes and inputs; b's outputs and slot */
    kiln_node res = na;
    res.out = nb.out;
    res.n_out = nb.n_out;
    /* the dead husk in a's slot owns b's leftovers and a's old outputs */
    kiln_node husk = nb;
    husk.out = na.out;
    husk.n_out = na.n_out;
    husk.dead = true;
    g->nodes[b] = res;
    g->nodes[a] = husk;
    for (int o = 0; o < res.n_out; o++)
        if (res.out[o] >= 0)
            g->values[res.out[o]].producer = b;
    for (int o = 0; o < husk.n_out; o++)
        if (husk.out[o] >= 0 && g->values[husk.out[o]].producer == a)
            g->values[husk.out[o]].producer = -1;
    return kiln__uses_attach_node(g, b);
}

kiln_status kiln__value_set_const(kiln_graph *g, int v, kiln_tensor *t)
{
    kiln_tensor *c = kiln__malloc(sizeof *c);
    if (!c)
        return nomem();
    *c = *t;
    memset(t, 0, sizeof *t);
    if (g->values[v].init) {
        kiln__tensor_release(g->values[v].init);
        kiln__free(g->values[v].init);
    }
    g->values[v].init = c;
    g->values[v].dtype = c->dtype;
    g->values[v].producer = -1;
    return KILN_OK;
}

static bool has_subgraph(const kiln_node *n)
{
    for (int a = 0; a < n->n_attr; a++)
        if (n->attrs[a].g || n->attrs[a].graphs)
            return true;
    return false;
}

static void node_free(kiln_node *n)
{
    kiln__free(n->name);
    kiln__free(n->op_type);
    kiln__free(n->domain);
    kiln__free(n->fused_from);
    kiln__free(n->tactic);
    kiln__free(n->in);
    kiln__free(n->out);
    for (int a = 0; a < n->n_attr; a++)
        kiln__attr_free(&n->attrs[a]);
    kiln__free(n->attrs);
}

kiln_status kiln__graph_remove_dead(kiln_graph *g)
{
    int *map = g->uses ? kiln__malloc(sizeof(int) * ((size_t)g->n_nodes + 1)) : NULL;
    if (g->uses && !map)
        return nomem();
    int w = 0;
    bool subgraphs = false;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (map)
            map[i] = n->dead ? -1 : w;
        if (n->dead) {
            subgraphs |= has_subgraph(n);
            node_free(n);
            continue;
        }
        g->nodes[w++] = *n;
    }
    g->n_nodes = w;
    for (int v = 0; v < g->n_values; v++)
        g->values[v].producer = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int o = 0; o < g->nodes[i].n_out; o++)
            if (g->nodes[i].out[o] >= 0)
                g->values[g->nodes[i].out[o]].producer = i;
    kiln__uses_renumber(g, map, subgraphs);
    kiln__free(map);
    return KILN_OK;
}

kiln_status kiln__node_add_fused(kiln_node *n, const char *text)
{
    size_t a = n->fused_from ? strlen(n->fused_from) : 0, b = strlen(text);
    char *s = kiln__realloc(n->fused_from, a + b + 2);
    if (!s)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    if (a)
        s[a++] = ',';
    memcpy(s + a, text, b + 1);
    n->fused_from = s;
    return KILN_OK;
}

static kiln_attr *attr_slot(kiln_node *n, const char *name, kiln_attr_type type)
{
    for (int i = 0; i < n->n_attr; i++)
        if (!strcmp(n->attrs[i].name, name)) {
            kiln__attr_free(&n->attrs[i]);
            memset(&n->attrs[i], 0, sizeof n->attrs[i]);
            n->attrs[i].name = kiln__strdup(name);
            n->attrs[i].type = type;
            return n->attrs[i].name ? &n->attrs[i] : NULL;
        }
    kiln_attr *na = kiln__realloc(n->attrs, sizeof *na * (size_t)(n->n_attr + 1));
    if (!na)
        return NULL;
    n->attrs = na;
    kiln_attr *a = &n->attrs[n->n_attr];
    memset(a, 0, sizeof *a);
    a->name = kiln__strdup(name);
    if (!a->name)
        return NULL;
    a->type = type;
    n->n_attr++;
    return a;
}

void kiln__node_drop_attr(kiln_node *n, const char *name)
{
    for (int i = 0; i < n->n_attr; i++)
        if (n->attrs[i].name && !strcmp(n->attrs[i].name, name)) {
            kiln__attr_free(&n->attrs[i]);
            memmove(&n->attrs[i], &n->attrs[i + 1], sizeof *n->attrs * (size_t)(n->n_attr - i - 1));
            n->n_attr--;
            return;
        }
}

kiln_status kiln__node_set_attr_i(kiln_node *n, const char *name, int64_t v)
{
    kiln_attr *a = attr_slot(n, name, KILN_ATTR_INT);
    if (!a)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    a->i = v;
    return KILN_OK;
}

kiln_status kiln__node_set_attr_f(kiln_node *n, const char *name, float v)
{
    kiln_attr *a = attr_slot(n, name, KILN_ATTR_FLOAT);
    if (!a)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    a->f = v;
    return KILN_OK;
}

kiln_status kiln__node_set_attr_ints(kiln_node *n, const char *name, int count, const int64_t *v)
{
    kiln_attr *a = attr_slot(n, name, KILN_ATTR_INTS);
    if (!a || (count > 0 && !(a->ints = kiln__malloc(sizeof(int64_t) * (size_t)count))))
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    if (count > 0)
        memcpy(a->ints, v, sizeof(int64_t) * (size_t)count);
    a->n = count;
    return KILN_OK;
}

kiln_status kiln__node_set_attr_s(kiln_node *n, const char *name, const char *v)
{
    kiln_attr *a = attr_slot(n, name, KILN_ATTR_STRING);
    if (!a || !(a->s = kiln__strdup(v)))
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    a->s_len = strlen(v);
    return KILN_OK;
}

int kiln__graph_add_const(kiln_graph *g, const char *name_hint, kiln_tensor *t)
{
    char name[256];
    do   /* one counter per graph: adding n constants with one hint stays linear */
        snprintf(name, sizeof name, "%s__kiln%d", name_hint, g->n_added_consts++);
    while (kiln__graph_find(g, name) >= 0);
    int v = kiln__graph_add_value(g, name);
    if (v < 0)
        return -1;
    kiln_tensor *c = kiln__malloc(sizeof *c);
    if (!c)
        return -1;
    *c = *t;
    memset(t, 0, sizeof *t);
    g->values[v].init = c;
    g->values[v].dtype = c->dtype;
    return v;
}

bool kiln__graph_has_subgraphs(const kiln_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (has_subgraph(&g->nodes[i]))
            return true;
    return false;
}
