/* Graph construction, lookup, topological sort and attribute access. */
#include "graph.h"

kiln_graph *kiln__graph_new(kiln_graph *parent)
{
    kiln_graph *g = kiln__calloc(1, sizeof *g);
    if (g)
        g->parent = parent;
    return g;
}

void kiln__attr_free(kiln_attr *a)
{
    kiln__free(a->name);
    kiln__free(a->s);
    if (a->t) {
        kiln__tensor_release(a->t);
        kiln__free(a->t);
    }
    kiln__graph_free(a->g);
    kiln__free(a->floats);
    kiln__free(a->ints);
    if (a->strings)
        for (int i = 0; i < a->n; i++)
            kiln__free(a->strings[i]);
    kiln__free(a->strings);
    if (a->graphs)
        for (int i = 0; i < a->n; i++)
            kiln__graph_free(a->graphs[i]);
    kiln__free(a->graphs);
}

void kiln__graph_free(kiln_graph *g)
{
    if (!g)
        return;
    kiln__uses_free(g);   /* a use index left by a pipeline that stopped on an error */
    for (int i = 0; i < g->n_values; i++) {
        kiln_value *v = &g->values[i];
        kiln__free(v->name);
        if (v->dims)
            for (int d = 0; d < v->ndim; d++)
                kiln__free(v->dims[d].param);
        kiln__free(v->dims);
        if (v->init) {
            kiln__tensor_release(v->init);
            kiln__free(v->init);
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
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
    for (int i = 0; i < g->n_opsets; i++)
        kiln__free(g->opsets[i].domain);
    kiln__free(g->opsets);
    kiln__free(g->values);
    kiln__free(g->nodes);
    kiln__free(g->inputs);
    kiln__free(g->outputs);
    kiln__free(g->hash);
    kiln__free(g->name);
    kiln__free(g);
}

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

static bool rehash(kiln_graph *g, int cap)
{
    int *h = kiln__malloc(sizeof(int) * (size_t)cap);
    if (!h)
        return false;
    for (int i = 0; i < cap; i++)
        h[i] = -1;
    for (int v = 0; v < g->n_values; v++) {
        uint32_t k = hash_str(g->values[v].name) & (uint32_t)(cap - 1);
        while (h[k] >= 0)
            k = (k + 1) & (uint32_t)(cap - 1);
        h[k] = v;
    }
    kiln__free(g->hash);
    g->hash = h;
    g->hash_cap = cap;
    return true;
}

int kiln__graph_find(const kiln_graph *g, const char *name)
{
    if (!g->hash_cap || !name)
        return -1;
    uint32_t k = hash_str(name) & (uint32_t)(g->hash_cap - 1);
    while (g->hash[k] >= 0) {
        if (strcmp(g->values[g->hash[k]].name, name) == 0)
            return g->hash[k];
        k = (k + 1) & (uint32_t)(g->hash_cap - 1);
    }
    return -1;
}

int kiln__graph_add_value(kiln_graph *g, const char *name)
{
    if (g->n_values == g->cap_values) {
        int cap = g->cap_values ? g->cap_values * 2 : 64;
        kiln_value *nv = kiln__realloc(g->values, sizeof *nv * (size_t)cap);
        if (!nv)
            return -1;
        g->values = nv;
        g->cap_values = cap;
    }
    kiln_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = kiln__strdup(name ? name : "");
    if (!v->name)
        return -1;
    v->ndim = -1;
    v->producer = -1;
    g->n_values++;
    if (g->n_values * 2 > g->hash_cap) {
        if (!rehash(g, g->hash_cap ? g->hash_cap * 2 : 128)) {
            kiln__free(v->name);
            g->n_values--;
            return -1;
        }
    } else {
        uint32_t k = hash_str(v->name) & (uint32_t)(g->hash_cap - 1);
        while (g->hash[k] >= 0)
            k = (k + 1) & (uint32_t)(g->hash_cap - 1);
        g->hash[k] = g->n_values - 1;
    }
    return g->n_values - 1;
}

int kiln__graph_add_node(kiln_graph *g)
{
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        kiln_node *nn = kiln__realloc(g->nodes, sizeof *nn * (size_t)cap);
        if (!nn)
            return -1;
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    kiln_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = KILN_OP_UNKNOWN;
    return g->n_nodes++;
}

/* Min-heap of node indices: the ready node that comes first in the original order. */
static void heap_push(int *h, int *n, int v)
{
    int i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int heap_pop(int *h, int *n)
{
    int top = h[0], v = h[--(*n)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = v;
    return top;
}

/* Kahn's algorithm, stable with respect to the original order (always emits the first ready
 * node), in O(E log N): edges producer -> reader are laid out once in a CSR array. */
kiln_status kiln__graph_toposort(kiln_graph *g)
{
    int nn = g->n_nodes, nv = g->n_values;
    if (nn == 0)
        return KILN_OK;
    kiln_status st = KILN_OK;
    size_t nedge = 0;
    for (int i = 0; i < nn; i++)
        nedge += (size_t)g->nodes[i].n_in;
    int *prod = kiln__malloc(sizeof(int) * (size_t)(nv ? nv : 1));   /* value -> producing node */
    int *indeg = kiln__calloc((size_t)nn, sizeof(int));
    int *first = kiln__calloc((size_t)nn + 1, sizeof(int));            /* CSR offsets per producer */
    int *edge = kiln__malloc(sizeof(int) * (nedge ? nedge : 1));        /* readers, grouped by producer */
    int *heap = kiln__malloc(sizeof(int) * (size_t)nn);
    int *order = kiln__malloc(sizeof(int) * (size_t)nn);
    kiln_node *sorted = kiln__malloc(sizeof(kiln_node) * (size_t)nn);
    if (!prod || !indeg || !first || !edge || !heap || !order || !sorted) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory sorting graph");
        goto done;
    }
    for (int v = 0; v < nv; v++)
        prod[v] = -1;
    for (int i = 0; i < nn; i++)
        for (int o = 0; o < g->nodes[i].n_out; o++)
            if (g->nodes[i].out[o] >= 0)
                prod[g->nodes[i].out[o]] = i;
    for (int i = 0; i < nn; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++) {
            int v = g->nodes[i].in[j];
            if (v >= 0 && prod[v] >= 0) {
                indeg[i]++;
                first[prod[v] + 1]++;
            }
        }
    for (int i = 0; i < nn; i++)
        first[i + 1] += first[i];
    for (int i = 0; i < nn; i++)   /* heap is free here: use it as the fill cursor per producer */
        heap[i] = first[i];
    for (int i = 0; i < nn; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++) {
            int v = g->nodes[i].in[j];
            if (v >= 0 && prod[v] >= 0)
                edge[heap[prod[v]]++] = i;
        }
    int nheap = 0, count = 0;
    for (int i = 0; i < nn; i++)
        if (indeg[i] == 0)
            heap_push(heap, &nheap, i);
    while (nheap) {
        int pick = heap_pop(heap, &nheap);
        order[count++] = pick;
        for (int e = first[pick]; e < first[pick + 1]; e++)
            if (--indeg[edge[e]] == 0)
                heap_push(heap, &nheap, edge[e]);
    }
    if (count < nn) {
        for (int i = 0; i < nn; i++)
            if (indeg[i] > 0) {
                st = kiln__err(KILN_ERR_PARSE, "graph has a cycle through node '%s' (%s)", g->nodes[i].name,
                               g->nodes[i].op_type);
                break;
            }
        goto done;
    }
    for (int i = 0; i < nn; i++)
        sorted[i] = g->nodes[order[i]];
    memcpy(g->nodes, sorted, sizeof(kiln_node) * (size_t)nn);
    for (int i = 0; i < nn; i++)
        for (int o = 0; o < g->nodes[i].n_out; o++)
            if (g->nodes[i].out[o] >= 0)
                g->values[g->nodes[i].out[o]].producer = i;
done:
    kiln__free(prod);
    kiln__free(indeg);
    kiln__free(first);
    kiln__free(edge);
    kiln__free(heap);
    kiln__free(order);
    kiln__free(sorted);
    return st;
}

const kiln_attr *kiln__attr(const kiln_node *n, const char *name)
{
    for (int i = 0; i < n->n_attr; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

int64_t kiln__attr_i(const kiln_node *n, const char *name, int64_t def)
{
    const kiln_attr *a = kiln__attr(n, name);
    return a && a->type == KILN_ATTR_INT ? a->i : def;
}

float kiln__attr_f(const kiln_node *n, const char *name, float def)
{
    const kiln_attr *a = kiln__attr(n, name);
    if (a && a->type == KILN_ATTR_FLOAT)
        return a->f;
    if (a && a->type == KILN_ATTR_INT)
        return (float)a->i;
    return def;
}

const char *kiln__attr_s(const kiln_node *n, const char *name, const char *def)
{
    const kiln_attr *a = kiln__attr(n, name);
    return a && a->type == KILN_ATTR_STRING ? a->s : def;
}

int kiln__attr_ints(const kiln_node *n, const char *name, const int64_t **v)
{
    const kiln_attr *a = kiln__attr(n, name);
    if (!a || a->type != KILN_ATTR_INTS)
        return -1;
    *v = a->ints;
    return a->n;
}

int kiln__attr_floats(const kiln_node *n, const char *name, const float **v)
{
    const kiln_attr *a = kiln__attr(n, name);
    if (!a || a->type != KILN_ATTR_FLOATS)
        return -1;
    *v = a->floats;
    return a->n;
}
