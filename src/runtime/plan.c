/* Liveness-based arena planning (greedy by size, first fit in address order among the blocks
 * whose lifetimes overlap), with in-place reuse for elementwise ops. */
#include "plan.h"
#include <stdlib.h>

#define ALIGN 64

typedef struct block {
    size_t size;
    int start, end;       /* node index range during which the block is live */
    int64_t offset;
} block;

static int by_size_desc(const void *a, const void *b)
{
    const block *x = *(block *const *)a, *y = *(block *const *)b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->start - y->start;
}

void kiln__plan_mem(const kiln_plan *p, uint8_t *arena, kiln_mem *m)
{
    memset(m, 0, sizeof *m);
    m->arena = arena;
    m->arena_size = p->arena_size;
    m->offset = p->offset;
    m->cap = p->cap;
    m->inplace = p->inplace;
}

kiln_status kiln__plan_make(const kiln_graph *g, const size_t *bytes, kiln_plan *p)
{
    memset(p, 0, sizeof *p);
    int nv = g->n_values;
    p->n_values = nv;
    p->offset = kiln__malloc(sizeof(int64_t) * ((size_t)nv + 1));
    p->cap = kiln__calloc((size_t)nv + 1, sizeof(size_t));
    p->inplace = kiln__calloc((size_t)nv + 1, 1);
    int *last = kiln__malloc(sizeof(int) * ((size_t)nv + 1));
    int *blk_of = kiln__malloc(sizeof(int) * ((size_t)nv + 1));
    block *blocks = kiln__calloc((size_t)nv + 1, sizeof(block));
    block **order = kiln__calloc((size_t)nv + 1, sizeof(block *));
    kiln_status st = KILN_OK;
    if (!p->offset || !p->cap || !p->inplace || !last || !blk_of || !blocks || !order) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory planning memory");
        goto done;
    }
    for (int v = 0; v < nv; v++) {
        p->offset[v] = -1;
        blk_of[v] = -1;
        last[v] = g->values[v].producer;
    }
    kiln__mark_last_uses(g, last);
    bool *is_out = kiln__calloc((size_t)nv + 1, sizeof(bool));
    if (!is_out) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory planning memory");
        goto done;
    }
    for (int o = 0; o < g->n_outputs; o++)
        is_out[g->outputs[o]] = true;
    int nb = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int o = 0; o < n->n_out; o++) {
            int v = n->out[o];
            if (v < 0 || is_out[v] || !bytes[v] || g->values[v].producer != i)
                continue;
            size_t sz = (bytes[v] + ALIGN - 1) / ALIGN * ALIGN;
            p->cap[v] = bytes[v];
            p->naive_bytes += bytes[v];
            p->n_planned++;
            int donor = -1;
            if (o == 0 && kiln__plan_inplace_op(n->op))
                for (int j = 0; j < n->n_in && j < 2 && donor < 0; j++) {
                    int u = n->in[j];
                    if (u >= 0 && blk_of[u] >= 0 && last[u] == i && bytes[u] == bytes[v] &&
                        blocks[blk_of[u]].end == i)
                        donor = u;
                }
            if (donor >= 0) {
                blk_of[v] = blk_of[donor];
                block *b = &blocks[blk_of[v]];
                if (last[v] > b->end)
                    b->end = last[v];
                p->inplace[v] = 1;
                p->n_inplace++;
            } else {
                blocks[nb] = (block){.size = sz, .start = i, .end = last[v] > i ? last[v] : i, .offset = -1};
                blk_of[v] = nb++;
            }
        }
    }
    kiln__free(is_out);
    for (int b = 0; b < nb; b++)
        order[b] = &blocks[b];
    qsort(order, (size_t)nb, sizeof(block *), by_size_desc);
    /* place each block at the lowest offset that clashes with no placed, time-overlapping block */
    block **placed = kiln__calloc((size_t)nb + 1, sizeof(block *));
    if (!placed) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory planning memory");
        goto done;
    }
    int np = 0;
    for (int k = 0; k < nb; k++) {
        block *b = order[k];
        size_t off = 0;
        bool moved = true;
        while (moved) {
            moved = false;
            for (int q = 0; q < np; q++) {
                block *c = placed[q];
                bool overlap_t = !(c->end < b->start || b->end < c->start);
                bool overlap_m = (size_t)c->offset < off + b->size && off < (size_t)c->offset + c->size;
                if (overlap_t && overlap_m) {
                    off = (size_t)c->offset + c->size;
                    moved = true;
                }
            }
        }
        b->offset = (int64_t)off;
        placed[np++] = b;
        if (off + b->size > p->arena_size)
            p->arena_size = off + b->size;
    }
    kiln__free(placed);
    for (int v = 0; v < nv; v++)
        if (blk_of[v] >= 0)
            p->offset[v] = blocks[blk_of[v]].offset;
done:
    kiln__free(last);
    kiln__free(blk_of);
    kiln__free(blocks);
    kiln__free(order);
    if (st != KILN_OK)
        kiln__plan_free(p);
    return st;
}
