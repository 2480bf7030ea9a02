/* Graph editing primitives used by the optimization passes. */
#include "graph.h"
#include <stdio.h>

bool kiln__value_is_output(const kiln_graph *g, int v)
{
    for (int o = 0; o < g->n_outputs; o++)
        if (g->outputs[o] == v)
            return true;
    return false;
}

static bool read_by_subgraph(const kiln_graph *g, const char *name);

/* Is `name` read as an outer-scope value by a subgraph of node n (at any depth)? */
static bool node_subgraphs_read(const kiln_node *n, const char *name)
{
    for (int a = 0; a < n->n_attr; a++) {
        const kiln_attr *at = &n->attrs[a];
        int cnt = at->g ? 1 : (at->graphs ? at->n : 0);
        for (int k = 0; k < cnt; k++) {
            const kiln_graph *sg = at->g ? at->g : at->graphs[k];
            int v = kiln__graph_find(sg, name);
            if ((v >= 0 && sg->values[v].is_outer) || read_by_subgraph(sg, name))
                return true;
        }
    }
    return false;
}

/* Is `name` read as an outer-scope value by any subgraph below g? */
static bool read_by_subgraph(const kiln_graph *g, const char *name)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (node_subgraphs_read(&g->nodes[i], name))
            return true;
    return false;
}

/* One scan over the nodes: direct reads by live nodes (*first: the first such reader, or -1),
 * and whether a subgraph reads the value by name. */
static int direct_uses(const kiln_graph *g, int v, int *first, bool *sub)
{
    int uses = 0;
    *first = -1;
    *sub = false;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (!*sub && n->n_attr && node_subgraphs_read(n, g->values[v].name))
            *sub = true;   /* dead nodes included, as before: their subgraphs are still attached */
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == v) {
                uses++;
                if (*first < 0)
                    *first = i;
            }
    }
    return uses;
}

int kiln__value_uses(const kiln_graph *g, int v)
{
    int first;
    bool sub;
    int uses = direct_uses(g, v, &first, &sub);
    for (int o = 0; o < g->n_outputs; o++)
        uses += g->outputs[o] == v;
    return uses + sub;
}

int kiln__single_consumer(const kiln_graph *g, int v)
{
    int first;
    bool sub;
    if (direct_uses(g, v, &first, &sub) != 1 || sub || kiln__value_is_output(g, v))
        return -1;
    return first;
}

void kiln__graph_replace_uses(kiln_graph *g, int from, int to)
{
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] == from)
                g->nodes[i].in[j] = to;
}

void kiln__graph_remove_dead(kiln_graph *g)
{
    int w = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead) {
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
        for (int a = 0; a < g->nodes[i].n_attr; a++)
            if (g->nodes[i].attrs[a].g || g->nodes[i].attrs[a].graphs)
                return true;
    return false;
}
