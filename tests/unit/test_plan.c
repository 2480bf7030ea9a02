/* Memory planner (src/runtime/plan.c) against a pairwise reference on random graphs, and its
 * scaling: a 200k-value graph plans in well under a second.
 *
 * The reference below is the planner as it was before the segment tree: the same blocks (one per
 * planned value, in-place outputs sharing their donor's block), placed largest first, each at the
 * lowest offset that clashes with no placed block of overlapping lifetime, found by comparing it
 * with every placed block until nothing moves (quadratic). The planner must give the same offsets
 * (so arenas are never larger), and every plan must pass kiln__plan_validate. */
#include "test.h"
#include "runtime/plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static int rnd(uint64_t *s, int lo, int hi) { return lo + (int)(rng(s) % (uint64_t)(hi - lo + 1)); }

/* ---- building graphs ---- */

static int new_value(kiln_graph *g)
{
    char name[32];
    snprintf(name, sizeof name, "v%d", g->n_values);
    return kiln__graph_add_value(g, name);
}

/* Appends op(in) -> n_out new values; returns the first output's id. */
static int add_node(kiln_graph *g, kiln_op op, int n_in, const int *in, int n_out)
{
    int i = kiln__graph_add_node(g);
    kiln_node *n = &g->nodes[i];
    n->name = kiln__strdup("n");
    n->op_type = kiln__strdup(kiln__op_name(op));
    n->domain = kiln__strdup("");
    n->op = op;
    n->n_in = n_in;
    n->in = kiln__malloc(sizeof(int) * (size_t)n_in);
    memcpy(n->in, in, sizeof(int) * (size_t)n_in);
    n->n_out = n_out;
    n->out = kiln__malloc(sizeof(int) * (size_t)n_out);
    for (int o = 0; o < n_out; o++) {
        int v = new_value(g);
        g->nodes[i].out[o] = v;   /* values may have moved: re-take the node */
        g->values[v].producer = i;
    }
    return g->nodes[i].out[0];
}

static void set_outputs(kiln_graph *g, int n, const int *outs)
{
    g->n_outputs = n;
    g->outputs = kiln__malloc(sizeof(int) * (size_t)n);
    memcpy(g->outputs, outs, sizeof(int) * (size_t)n);
}

/* A random DAG of n nodes over one graph input: elementwise ops (in place when sizes allow),
 * Transpose, Concat, Split; inputs drawn mostly from recent values, some from far back. Byte
 * sizes from a few classes (so equal sizes and ties occur), some 0 (not planned). */
static kiln_graph *random_graph(uint64_t *s, int n, size_t **bytes_out)
{
    kiln_graph *g = kiln__graph_new(NULL);
    int x = new_value(g);
    g->n_inputs = 1;
    g->inputs = kiln__malloc(sizeof(int));
    g->inputs[0] = x;
    size_t *bytes = kiln__calloc((size_t)(4 * n + 8), sizeof(size_t));
    static const size_t classes[] = {0, 4, 64, 100, 256, 1000, 4096, 4096, 65536};
    bytes[x] = 4096;
    for (int i = 0; i < n; i++) {
        int nv = g->n_values, in[3];
        for (int k = 0; k < 3; k++)
            in[k] = rnd(s, 0, 3) ? nv - 1 - rnd(s, 0, nv - 1 < 4 ? nv - 1 : 4) : rnd(s, 0, nv - 1);
        int kind = rnd(s, 0, 5), v;
        if (kind == 0)
            v = add_node(g, KILN_OP_Relu, 1, in, 1);
        else if (kind == 1)
            v = add_node(g, KILN_OP_Add, 2, in, 1);
        else if (kind == 2)
            v = add_node(g, KILN_OP_Transpose, 1, in, 1);
        else if (kind == 3)
            v = add_node(g, KILN_OP_Concat, rnd(s, 2, 3), in, 1);
        else if (kind == 4)
            v = add_node(g, KILN_OP_Split, 1, in, 2);
        else
            v = add_node(g, KILN_OP_Mul, 2, in, 1);
        for (int o = v; o < g->n_values; o++)
            bytes[o] = (kind <= 1 || kind == 5) && rnd(s, 0, 1) ? bytes[in[0]]
                                                                 : classes[rnd(s, 0, (int)(sizeof classes / sizeof *classes) - 1)];
    }
    int outs[3] = {g->n_values - 1, rnd(s, 1, g->n_values - 1), rnd(s, 1, g->n_values - 1)};
    set_outputs(g, outs[1] == outs[0] || outs[2] == outs[0] || outs[1] == outs[2] ? 1 : 3, outs);
    *bytes_out = bytes;
    return g;
}

/* ---- the reference planner ---- */

typedef struct rblock {
    size_t size;
    int start, end, id;
    int64_t offset;
} rblock;

static bool ref_inplace(kiln_op op) { return kiln__plan_inplace_op(op); }

static int ref_order(const void *a, const void *b)
{
    const rblock *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->id - y->id;
}

/* off[v]: the reference offset of every value (-1: not planned); returns the arena size. */
static size_t ref_plan(const kiln_graph *g, const size_t *bytes, int64_t *off)
{
    int nv = g->n_values, nb = 0;
    int *last = malloc(sizeof(int) * (size_t)nv), *blk = malloc(sizeof(int) * (size_t)nv);
    bool *is_out = calloc((size_t)nv, 1);
    rblock *b = calloc((size_t)nv, sizeof *b);
    for (int v = 0; v < nv; v++) {
        last[v] = g->values[v].producer;
        blk[v] = -1;
        off[v] = -1;
    }
    kiln__mark_last_uses(g, last);
    for (int o = 0; o < g->n_outputs; o++)
        is_out[g->outputs[o]] = true;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int o = 0; o < n->n_out; o++) {
            int v = n->out[o], donor = -1;
            if (is_out[v] || !bytes[v])
                continue;
            for (int j = 0; o == 0 && ref_inplace(n->op) && j < n->n_in && j < 2 && donor < 0; j++) {
                int u = n->in[j];
                if (blk[u] >= 0 && last[u] == i && bytes[u] == bytes[v] && b[blk[u]].end == i)
                    donor = u;
            }
            if (donor >= 0) {
                blk[v] = blk[donor];
                if (last[v] > b[blk[v]].end)
                    b[blk[v]].end = last[v];
            } else {
                b[nb] = (rblock){(bytes[v] + 63) / 64 * 64, i, last[v] > i ? last[v] : i, nb, -1};
                blk[v] = nb++;
            }
        }
    }
    rblock *order = malloc(sizeof *order * (size_t)(nb + 1));
    memcpy(order, b, sizeof *order * (size_t)nb);
    qsort(order, (size_t)nb, sizeof *order, ref_order);
    size_t arena = 0;
    for (int k = 0; k < nb; k++) {
        size_t o = 0;
        for (bool moved = true; moved;) {
            moved = false;
            for (int q = 0; q < k; q++) {
                const rblock *c = &order[q];
                if (!(c->end < order[k].start || order[k].end < c->start) && (size_t)c->offset < o + order[k].size &&
                    o < (size_t)c->offset + c->size) {
                    o = (size_t)c->offset + c->size;
                    moved = true;
                }
            }
        }
        order[k].offset = (int64_t)o;
        b[order[k].id].offset = (int64_t)o;
        if (o + order[k].size > arena)
            arena = o + order[k].size;
    }
    for (int v = 0; v < nv; v++)
        if (blk[v] >= 0)
            off[v] = b[blk[v]].offset;
    free(last);
    free(blk);
    free(is_out);
    free(b);
    free(order);
    return arena;
}

static void test_random(void)
{
    uint64_t s = 0x2545F4914F6CDD1Dull;
    int same = 0;
    for (int t = 0; t < 300; t++) {
        size_t *bytes;
        kiln_graph *g = random_graph(&s, rnd(&s, 1, t < 250 ? 60 : 600), &bytes);
        kiln_plan p;
        CHECK(kiln__plan_make(g, bytes, NULL, 0, &p) == KILN_OK);
        CHECK_MSG(kiln__plan_validate(g, &p) == KILN_OK, "graph %d: %s", t, kiln_last_error());
        int64_t *off = malloc(sizeof(int64_t) * (size_t)g->n_values);
        size_t arena = ref_plan(g, bytes, off);
        CHECK_MSG(p.arena_size == arena, "graph %d: arena %zu, reference %zu", t, p.arena_size, arena);
        bool eq = true;
        for (int v = 0; v < g->n_values; v++)
            eq = eq && p.offset[v] == off[v];
        CHECK_MSG(eq, "graph %d: offsets differ from the reference", t);
        same += eq;
        free(off);
        kiln__plan_free(&p);
        kiln__free(bytes);
        kiln__graph_free(g);
    }
    printf("random graphs: %d of 300 planned exactly as the reference\n", same);
}

/* A chain of n values (Transpose, not in place; sizes vary) with a skip Add every 100 nodes,
 * planned in well under a second of CPU time. */
static void test_scaling(int n)
{
    kiln_graph *g = kiln__graph_new(NULL);
    int x = new_value(g);
    g->n_inputs = 1;
    g->inputs = kiln__malloc(sizeof(int));
    g->inputs[0] = x;
    size_t *bytes = kiln__calloc((size_t)n + 2, sizeof(size_t));
    int prev = x;
    for (int i = 0; i < n; i++) {
        int in[2] = {prev, i >= 50 ? prev - 50 : x};
        prev = i % 100 == 99 ? add_node(g, KILN_OP_Concat, 2, in, 1) : add_node(g, KILN_OP_Transpose, 1, in, 1);
        bytes[prev] = 64 * (size_t)(1 + i % 7);
    }
    set_outputs(g, 1, &prev);
    kiln_plan p;
    clock_t t0 = clock();
    CHECK(kiln__plan_make(g, bytes, NULL, 0, &p) == KILN_OK);
    double plan_s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    t0 = clock();
    CHECK_MSG(kiln__plan_validate(g, &p) == KILN_OK, "%s", kiln_last_error());
    double check_s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("%d-value chain: planned in %.3f s (CPU), validated in %.3f s; arena %zu bytes, %d planned\n",
           g->n_values, plan_s, check_s, p.arena_size, p.n_planned);
    CHECK_MSG(plan_s < 1.0, "planning %d values took %.3f s", n, plan_s);
    /* at most three values are live at a time (a chain link, its successor, one skip value) */
    CHECK_MSG(p.arena_size <= 4 * 64 * 7, "arena %zu", p.arena_size);
    kiln__plan_free(&p);
    kiln__free(bytes);
    kiln__graph_free(g);
}

int main(void)
{
    test_random();
    test_scaling(200000);
    return TEST_SUMMARY();
}
