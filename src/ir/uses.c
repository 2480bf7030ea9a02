/* The use index: for every value, the live node input slots that read it.
 * Each registered (node, slot) carries a stamp, and a value's reader list holds entries
 * {node, slot, stamp}: an entry is current while the slot still carries its stamp. Unregistering
 * clears the slot's stamp (O(1)); stale entries are dropped when a list is compacted, which
 * happens when it holds more than twice as many entries as live readers (amortized O(1)).
 * Node indices change only in kiln__graph_remove_dead, which renumbers the index (O(N + E)). */
#include "uses.h"
#include "../core/core.h"
#include <assert.h>

typedef struct use_ent { int node, slot; uint64_t stamp; } use_ent;
typedef struct use_list { use_ent *e; int n, cap, live; } use_list;
typedef struct slot_stamps { uint64_t *s; int n; } slot_stamps;   /* 0: slot not registered */

struct kiln_uses {
    int nv, cap_v;        /* values covered by rd / out_slots / sub */
    use_list *rd;
    int *out_slots;       /* graph-output slots naming the value */
    bool *sub;            /* read by name by a subgraph (of any node, live or dead) */
    int nn, cap_n;        /* nodes covered by ns */
    slot_stamps *ns;
    uint64_t next_stamp;
};

static kiln_status nomem(void) { return kiln__err(KILN_ERR_NOMEM, "out of memory"); }

static bool grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return true;
    int nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *q = kiln__realloc(*p, elem * (size_t)nc);
    if (!q)
        return false;
    memset((char *)q + elem * (size_t)*cap, 0, elem * (size_t)(nc - *cap));
    *p = q;
    *cap = nc;
    return true;
}

kiln_status kiln__uses_reserve_value(kiln_graph *g, int v)
{
    struct kiln_uses *U = g->uses;
    if (!U || v < U->nv)
        return KILN_OK;
    int cap = U->cap_v;
    if (!grow((void **)&U->rd, &cap, v + 1, sizeof *U->rd))
        return nomem();
    cap = U->cap_v;
    if (!grow((void **)&U->out_slots, &cap, v + 1, sizeof *U->out_slots))
        return nomem();
    cap = U->cap_v;
    if (!grow((void **)&U->sub, &cap, v + 1, sizeof *U->sub))
        return nomem();
    U->cap_v = cap;
    U->nv = v + 1;
    return KILN_OK;
}

static bool current(const struct kiln_uses *U, const use_ent *e)
{
    return e->node < U->nn && e->slot < U->ns[e->node].n && U->ns[e->node].s[e->slot] == e->stamp;
}

static void compact(const struct kiln_uses *U, use_list *l)
{
    int w = 0;
    for (int k = 0; k < l->n; k++)
        if (current(U, &l->e[k]))
            l->e[w++] = l->e[k];
    l->n = w;
}

/* The reader list of v with its stale entries bounded by its live ones (NULL if none). */
static use_list *list_of(const kiln_graph *g, int v)
{
    const struct kiln_uses *U = g->uses;
    assert(U && "the use index must be built (kiln__uses_build)");
    if (v < 0 || v >= U->nv)
        return NULL;
    use_list *l = &U->rd[v];
    if (l->n > 2 * l->live + 8)
        compact(U, l);
    return l;
}

kiln_status kiln__uses_attach(kiln_graph *g, int node, int slot)
{
    struct kiln_uses *U = g->uses;
    const kiln_node *n = &g->nodes[node];
    int v = n->in[slot];
    if (!U || n->dead || v < 0)
        return KILN_OK;
    KILN_TRY(kiln__uses_reserve_value(g, v));
    if (node >= U->nn) {
        if (!grow((void **)&U->ns, &U->cap_n, node + 1, sizeof *U->ns))
            return nomem();
        U->nn = node + 1;
    }
    slot_stamps *ss = &U->ns[node];
    if (slot >= ss->n) {
        uint64_t *s = kiln__realloc(ss->s, sizeof *s * (size_t)n->n_in);
        if (!s)
            return nomem();
        memset(s + ss->n, 0, sizeof *s * (size_t)(n->n_in - ss->n));
        ss->s = s;
        ss->n = n->n_in;
    }
    assert(!ss->s[slot] && "input slot registered twice");
    use_list *l = &U->rd[v];
    if (l->n == l->cap && l->n > 2 * l->live)
        compact(U, l);
    if (!grow((void **)&l->e, &l->cap, l->n + 1, sizeof *l->e))
        return nomem();
    ss->s[slot] = ++U->next_stamp;
    l->e[l->n++] = (use_ent){node, slot, ss->s[slot]};
    l->live++;
    return KILN_OK;
}

void kiln__uses_detach(kiln_graph *g, int node, int slot)
{
    struct kiln_uses *U = g->uses;
    if (!U || node >= U->nn || slot >= U->ns[node].n || !U->ns[node].s[slot])
        return;
    U->ns[node].s[slot] = 0;
    U->rd[g->nodes[node].in[slot]].live--;
}

kiln_status kiln__uses_attach_node(kiln_graph *g, int node)
{
    for (int j = 0; j < g->nodes[node].n_in; j++)
        KILN_TRY(kiln__uses_attach(g, node, j));
    return KILN_OK;
}

void kiln__uses_detach_node(kiln_graph *g, int node)
{
    for (int j = 0; j < g->nodes[node].n_in; j++)
        kiln__uses_detach(g, node, j);
}

void kiln__uses_free(kiln_graph *g)
{
    struct kiln_uses *U = g->uses;
    if (!U)
        return;
    for (int v = 0; v < U->nv; v++)
        kiln__free(U->rd[v].e);
    for (int i = 0; i < U->nn; i++)
        kiln__free(U->ns[i].s);
    kiln__free(U->rd);
    kiln__free(U->out_slots);
    kiln__free(U->sub);
    kiln__free(U->ns);
    kiln__free(U);
    g->uses = NULL;
}

/* Marks in sub[] the values of `top` that subgraph sg (or any graph nested in it) reads by name. */
static void mark_subgraph_reads(const kiln_graph *top, const kiln_graph *sg, bool *sub)
{
    for (int v = 0; v < sg->n_values; v++)
        if (sg->values[v].is_outer) {
            int tv = kiln__graph_find(top, sg->values[v].name);
            if (tv >= 0)
                sub[tv] = true;
        }
    for (int i = 0; i < sg->n_nodes; i++)
        for (int a = 0; a < sg->nodes[i].n_attr; a++) {
            const kiln_attr *at = &sg->nodes[i].attrs[a];
            for (int k = 0; k < (at->g ? 1 : at->graphs ? at->n : 0); k++)
                mark_subgraph_reads(top, at->g ? at->g : at->graphs[k], sub);
        }
}

/* Graph-output slots and subgraph reads per value (n_values entries each). */
static void static_uses(const kiln_graph *g, int *out_slots, bool *sub)
{
    for (int o = 0; o < g->n_outputs; o++)
        if (g->outputs[o] >= 0 && g->outputs[o] < g->n_values)
            out_slots[g->outputs[o]]++;
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attr; a++) {
            const kiln_attr *at = &g->nodes[i].attrs[a];
            for (int k = 0; k < (at->g ? 1 : at->graphs ? at->n : 0); k++)
                mark_subgraph_reads(g, at->g ? at->g : at->graphs[k], sub);
        }
}

kiln_status kiln__uses_build(kiln_graph *g)
{
    kiln__uses_free(g);
    struct kiln_uses *U = kiln__calloc(1, sizeof *U);
    if (!U)
        return nomem();
    g->uses = U;
    kiln_status st = kiln__uses_reserve_value(g, g->n_values);   /* one spare entry */
    if (st == KILN_OK && g->n_nodes && !grow((void **)&U->ns, &U->cap_n, g->n_nodes, sizeof *U->ns))
        st = nomem();
    if (st == KILN_OK) {
        U->nn = g->n_nodes;
        static_uses(g, U->out_slots, U->sub);
    }
    for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
        st = kiln__uses_attach_node(g, i);
    if (st != KILN_OK)
        kiln__uses_free(g);
    return st;
}

void kiln__uses_renumber(kiln_graph *g, const int *map, bool subgraphs_removed)
{
    struct kiln_uses *U = g->uses;
    if (!U)
        return;
    for (int v = 0; v < U->nv; v++) {
        use_list *l = &U->rd[v];
        compact(U, l);   /* current entries are of live nodes, which all stay */
        for (int k = 0; k < l->n; k++)
            l->e[k].node = map[l->e[k].node];
    }
    int w = 0;
    for (int i = 0; i < U->nn; i++) {
        if (map[i] < 0) {
            kiln__free(U->ns[i].s);
            continue;
        }
        U->ns[w++] = U->ns[i];
    }
    memset(U->ns + w, 0, sizeof *U->ns * (size_t)(U->nn - w));
    U->nn = w;
    if (subgraphs_removed) {   /* what the removed nodes' subgraphs read is read no more */
        memset(U->out_slots, 0, sizeof *U->out_slots * (size_t)U->cap_v);
        memset(U->sub, 0, sizeof *U->sub * (size_t)U->cap_v);
        static_uses(g, U->out_slots, U->sub);
    }
}

kiln_status kiln__uses_ensure(kiln_graph *g, bool *own)
{
    *own = !g->uses;
    return *own ? kiln__uses_build(g) : KILN_OK;
}

/* ---- queries ---- */

int kiln__value_uses(const kiln_graph *g, int v)
{
    const use_list *l = list_of(g, v);
    return l ? l->live + g->uses->out_slots[v] + g->uses->sub[v] : 0;
}

bool kiln__value_is_output(const kiln_graph *g, int v)
{
    if (g->uses)
        return list_of(g, v) && g->uses->out_slots[v] > 0;
    for (int o = 0; o < g->n_outputs; o++)   /* O(outputs) without the index */
        if (g->outputs[o] == v)
            return true;
    return false;
}

int kiln__value_readers(const kiln_graph *g, int v, int *nodes, int max)
{
    const use_list *l = list_of(g, v);
    int k = 0;
    for (int e = 0; l && e < l->n && k < max; e++)
        if (current(g->uses, &l->e[e]))
            nodes[k++] = l->e[e].node;
    return l ? l->live : 0;
}

int kiln__single_consumer(const kiln_graph *g, int v)
{
    int node;
    if (kiln__value_uses(g, v) != 1 || kiln__value_readers(g, v, &node, 1) != 1)
        return -1;   /* zero or several readers, or the one use is a graph output or a subgraph */
    return node;
}

/* ---- consistency check ---- */

static kiln_status bad(const kiln_graph *g, int node, const char *what)
{
    return kiln__err(KILN_ERR_INTERNAL, "use index out of date: node %d (%s): %s", node,
                     node >= 0 && node < g->n_nodes ? g->nodes[node].op_type : "-", what);
}

/* Every live input slot is registered, no dead or vanished slot is; producers match. */
static kiln_status check_slots(const kiln_graph *g, int *cnt)
{
    const struct kiln_uses *U = g->uses;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        int ns = i < U->nn ? U->ns[i].n : 0;
        for (int j = 0; j < ns; j++) {
            bool want = !n->dead && j < n->n_in && n->in[j] >= 0;
            if (want != (U->ns[i].s[j] != 0))
                return bad(g, i, want ? "input not registered" : "stale input registered");
        }
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++) {
            if (n->in[j] >= g->n_values)
                return bad(g, i, "input out of range");
            if (n->in[j] >= 0 && j >= ns)
                return bad(g, i, "input not registered");
            if (n->in[j] >= 0)
                cnt[n->in[j]]++;
        }
        for (int o = 0; o < n->n_out; o++)
            if (n->out[o] >= 0 && g->values[n->out[o]].producer != i)
                return bad(g, i, "output's producer is another node");
    }
    for (int i = g->n_nodes; i < U->nn; i++)
        for (int j = 0; j < U->ns[i].n; j++)
            if (U->ns[i].s[j])
                return bad(g, i, "removed node still registered");
    return KILN_OK;
}

static kiln_status check_values(const kiln_graph *g, const int *cnt, const int *outs, const bool *sub)
{
    const struct kiln_uses *U = g->uses;
    for (int v = 0; v < g->n_values; v++) {
        const use_list *l = v < U->nv ? &U->rd[v] : NULL;
        int cur = 0;
        for (int e = 0; l && e < l->n; e++)
            if (current(U, &l->e[e])) {
                if (g->nodes[l->e[e].node].in[l->e[e].slot] != v)
                    return bad(g, l->e[e].node, "registered input reads another value");
                cur++;
            }
        if (cur != cnt[v] || (l ? l->live : 0) != cnt[v])
            return kiln__err(KILN_ERR_INTERNAL, "use index out of date: value '%s' has %d readers, index says %d (%d listed)",
                             g->values[v].name, cnt[v], l ? l->live : 0, cur);
        if ((l ? U->out_slots[v] : 0) != outs[v] || (l ? U->sub[v] : false) != sub[v])
            return kiln__err(KILN_ERR_INTERNAL, "use index out of date: graph-output or subgraph reads of '%s'",
                             g->values[v].name);
        int p = g->values[v].producer;
        if (p >= g->n_nodes)
            return kiln__err(KILN_ERR_INTERNAL, "value '%s': producer %d out of range", g->values[v].name, p);
    }
    return KILN_OK;
}

kiln_status kiln__uses_check(const kiln_graph *g)
{
    if (!g->uses)
        return kiln__err(KILN_ERR_INTERNAL, "use index not built");
    int *cnt = kiln__calloc((size_t)g->n_values + 1, sizeof *cnt), *outs = kiln__calloc((size_t)g->n_values + 1, sizeof *outs);
    bool *sub = kiln__calloc((size_t)g->n_values + 1, sizeof *sub);
    kiln_status st = cnt && outs && sub ? KILN_OK : nomem();
    if (st == KILN_OK) {
        static_uses(g, outs, sub);
        st = check_slots(g, cnt);
    }
    if (st == KILN_OK)
        st = check_values(g, cnt, outs, sub);
    kiln__free(cnt);
    kiln__free(outs);
    kiln__free(sub);
    return st;
}
