/* Liveness-based arena planning, with in-place reuse for elementwise ops: greedy by size (largest
 * first), each block at the lowest offset where it clashes with no placed block whose lifetime
 * overlaps its own. The placed blocks are kept in a segment tree over node indices (time), so
 * finding the ones that overlap a lifetime costs O((K + 1) log N) for K of them, and placing a
 * block O(log N): O(B log B + sum of K log N) in all, instead of comparing every pair. */
#include "plan.h"
#include "../core/numfmt.h"
#include <stdlib.h>

#define ALIGN KILN_PLAN_ALIGN

typedef struct block {
    size_t size;
    int start, end;       /* node index range during which the block is live */
    int64_t offset;
} block;

/* Larger first; then earlier start; then creation order (a total order: the plan is the same
 * whatever the sort). */
static int by_size_desc(const void *a, const void *b)
{
    const block *x = *(block *const *)a, *y = *(block *const *)b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int by_offset(const void *a, const void *b)
{
    const block *x = *(block *const *)a, *y = *(block *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* ---- placed blocks by lifetime: a segment tree over node indices [0, n) ----
 * A block's lifetime [start, end] is stored at the O(log n) tree nodes that cover it exactly;
 * cnt[t] counts the entries in t's subtree, so a query skips empty subtrees. */
typedef struct tentry {
    block *b;
    int next;   /* next entry of the same tree node, -1 at the end */
} tentry;

typedef struct timeline {
    int n;             /* leaves: node indices 0..n-1 */
    int *head, *cnt;   /* per tree node (1-based heap layout over 4n slots) */
    tentry *e;
    int ne, cap;
    int *stamp;        /* per block index: the query that last reported it */
    int query;
} timeline;

static kiln_status tl_add(timeline *tl, int t, block *b)
{
    if (tl->ne == tl->cap) {
        int cap = tl->cap ? 2 * tl->cap : 1024;
        tentry *e = kiln__realloc(tl->e, sizeof *e * (size_t)cap);
        if (!e)
            return kiln__err(KILN_ERR_NOMEM, "out of memory planning memory");
        tl->e = e;
        tl->cap = cap;
    }
    tl->e[tl->ne] = (tentry){b, tl->head[t]};
    tl->head[t] = tl->ne++;
    return KILN_OK;
}

static kiln_status tl_insert(timeline *tl, int t, int lo, int hi, block *b)
{
    if (b->end < lo || hi < b->start)
        return KILN_OK;
    tl->cnt[t]++;
    if (b->start <= lo && hi <= b->end)
        return tl_add(tl, t, b);
    int mid = lo + (hi - lo) / 2;
    KILN_TRY(tl_insert(tl, 2 * t, lo, mid, b));
    return tl_insert(tl, 2 * t + 1, mid + 1, hi, b);
}

/* Appends to out[*n] every placed block whose lifetime overlaps [b->start, b->end], once. */
static void tl_query(timeline *tl, int t, int lo, int hi, const block *b, const block *base, block **out, int *n)
{
    if (!tl->cnt[t] || b->end < lo || hi < b->start)
        return;
    for (int k = tl->head[t]; k >= 0; k = tl->e[k].next) {
        block *c = tl->e[k].b;
        if (tl->stamp[c - base] != tl->query) {
            tl->stamp[c - base] = tl->query;
            out[(*n)++] = c;
        }
    }
    if (lo == hi)
        return;
    int mid = lo + (hi - lo) / 2;
    tl_query(tl, 2 * t, lo, mid, b, base, out, n);
    tl_query(tl, 2 * t + 1, mid + 1, hi, b, base, out, n);
}

/* Places blocks[0..nb) (lifetimes inside [0, n_times)) largest first, each at the lowest offset
 * that clashes with no placed block of overlapping lifetime; returns the arena size in *arena. */
static kiln_status place_blocks(block *blocks, int nb, int n_times, size_t *arena)
{
    *arena = 0;
    if (nb == 0)
        return KILN_OK;
    timeline tl = {.n = n_times > 0 ? n_times : 1, .query = 0};
    tl.head = kiln__malloc(sizeof(int) * 4 * (size_t)tl.n);
    tl.cnt = kiln__calloc(4 * (size_t)tl.n, sizeof(int));
    tl.stamp = kiln__malloc(sizeof(int) * (size_t)nb);
    block **order = kiln__malloc(sizeof(block *) * (size_t)nb);
    block **near = kiln__malloc(sizeof(block *) * (size_t)nb);
    kiln_status st = KILN_OK;
    if (!tl.head || !tl.cnt || !tl.stamp || !order || !near) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory planning memory");
        goto done;
    }
    for (int t = 0; t < 4 * tl.n; t++)
        tl.head[t] = -1;
    for (int k = 0; k < nb; k++) {
        tl.stamp[k] = -1;
        order[k] = &blocks[k];
    }
    qsort(order, (size_t)nb, sizeof(block *), by_size_desc);
    for (int k = 0; k < nb && st == KILN_OK; k++) {
        block *b = order[k];
        int nn = 0;
        tl.query = k;
        tl_query(&tl, 1, 0, tl.n - 1, b, blocks, near, &nn);
        qsort(near, (size_t)nn, sizeof(block *), by_offset);
        /* the first gap in address order that holds b */
        size_t off = 0;
        for (int q = 0; q < nn && (size_t)near[q]->offset < off + b->size; q++)
            if ((size_t)near[q]->offset + near[q]->size > off)
                off = (size_t)near[q]->offset + near[q]->size;
        b->offset = (int64_t)off;
        if (off + b->size > *arena)
            *arena = off + b->size;
        st = tl_insert(&tl, 1, 0, tl.n - 1, b);
    }
done:
    kiln__free(tl.head);
    kiln__free(tl.cnt);
    kiln__free(tl.e);
    kiln__free(tl.stamp);
    kiln__free(order);
    kiln__free(near);
    return st;
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

static bool f32_or_unknown(kiln_dtype t)
{
    return t == KILN_DT_FLOAT32 || t == KILN_DT_UNDEFINED;
}

/* Whether u (input 3 of node n, its residual) may be n's output v's memory as well (KILN_PLAN_CONV_RES): a float32
 * FusedConv with a 1x1 kernel and float32 weights (not stored in a low-bit format, KILN_ATTR_WQ), a residual of the
 * output's size. The CPU kernel (kiln__fused_conv) copies the residual first where its path would store over it
 * before reading it: other convs would gain nothing. */
static bool conv_res_pair(const kiln_graph *g, const kiln_node *n, int u, int v, const size_t *bytes)
{
    if (n->op != KILN_OP_FusedConv || n->n_in < 4 || n->in[3] != u || n->n_out < 1 || n->out[0] != v ||
        bytes[u] != bytes[v] || !f32_or_unknown(g->values[u].dtype) || !f32_or_unknown(g->values[v].dtype) ||
        kiln__attr(n, KILN_ATTR_WQ))
        return false;
    int w = n->in[1];
    const kiln_tensor *wt = w >= 0 ? g->values[w].init : NULL;
    if (!wt || wt->dtype != KILN_DT_FLOAT32 || wt->ndim < 3)
        return false;
    for (int d = 2; d < wt->ndim; d++)
        if (wt->dims[d] != 1)
            return false;
    return true;
}

unsigned kiln__plan_host_flags(void)
{
    const char *e = getenv("KILN_PLAN_CONV_RES"), *c = getenv("KILN_PLAN_CONCAT");
    return (e && *e && strcmp(e, "0") != 0 ? KILN_PLAN_CONV_RES : 0) | (c && !strcmp(c, "0") ? 0 : KILN_PLAN_CONCAT);
}

/* Concats whose inputs can be computed where they lie in the output (plan.h, KILN_PLAN_CONCAT): grp[u] = the Concat's
 * node index for each such input u and for its output, sub[u] = u's byte offset in the output. */
static void concat_groups(const kiln_graph *g, const size_t *bytes, const kiln_tensor *meta, const bool *is_out,
                          int *grp, size_t *sub)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        int v = n->n_out == 1 ? n->out[0] : -1;
        if (n->op != KILN_OP_Concat || v < 0 || is_out[v] || !bytes[v] || grp[v] >= 0 || g->values[v].producer != i ||
            n->n_in < 1 || meta[v].ndim < 1 || meta[v].ndim > KILN_MAX_DIMS)
            continue;
        int64_t axis = kiln__attr_i(n, "axis", 1), r = meta[v].ndim;
        if (axis < -r || axis >= r)
            continue;
        axis = axis < 0 ? axis + r : axis;
        bool ok = true;
        for (int d = 0; d < axis; d++)
            ok = ok && meta[v].dims[d] == 1;
        size_t off = 0;
        for (int k = 0; ok && k < n->n_in; k++) {
            int u = n->in[k];
            ok = u >= 0 && g->values[u].producer >= 0 && g->values[u].producer < i && !g->values[u].init &&
                 !is_out[u] && bytes[u] && grp[u] < 0 && off % KILN_PLAN_ALIGN == 0;
            for (int j = 0; ok && j < k; j++)
                ok = n->in[j] != u;
            off += ok ? bytes[u] : 0;
        }
        if (!ok || off != bytes[v])
            continue;
        off = 0;
        for (int k = 0; k < n->n_in; k++) {
            grp[n->in[k]] = i;
            sub[n->in[k]] = off;
            off += bytes[n->in[k]];
        }
        grp[v] = i;
        sub[v] = 0;
    }
}

kiln_status kiln__plan_make(const kiln_graph *g, const size_t *bytes, const kiln_tensor *meta, unsigned flags,
                            kiln_plan *p)
{
    memset(p, 0, sizeof *p);
    int nv = g->n_values;
    p->n_values = nv;
    p->offset = kiln__malloc(sizeof(int64_t) * ((size_t)nv + 1));
    p->cap = kiln__calloc((size_t)nv + 1, sizeof(size_t));
    p->inplace = kiln__calloc((size_t)nv + 1, 1);
    int *last = kiln__malloc(sizeof(int) * ((size_t)nv + 1));
    int *blk_of = kiln__malloc(sizeof(int) * ((size_t)nv + 1));
    int *grp = kiln__malloc(sizeof(int) * ((size_t)nv + 1));   /* the Concat a value's slot is part of, or -1 */
    int *grp_blk = kiln__malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
    size_t *sub = kiln__calloc((size_t)nv + 1, sizeof(size_t));
    block *blocks = kiln__calloc((size_t)nv + 1, sizeof(block));
    kiln_status st = KILN_OK;
    if (!p->offset || !p->cap || !p->inplace || !last || !blk_of || !grp || !grp_blk || !sub || !blocks) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory planning memory");
        goto done;
    }
    for (int v = 0; v < nv; v++) {
        p->offset[v] = -1;
        blk_of[v] = grp[v] = -1;
        last[v] = g->values[v].producer;
    }
    for (int i = 0; i < g->n_nodes; i++)
        grp_blk[i] = -1;
    kiln__mark_last_uses(g, last);
    bool *is_out = kiln__calloc((size_t)nv + 1, sizeof(bool));
    if (!is_out) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory planning memory");
        goto done;
    }
    for (int o = 0; o < g->n_outputs; o++)
        is_out[g->outputs[o]] = true;
    if ((flags & KILN_PLAN_CONCAT) && meta)
        concat_groups(g, bytes, meta, is_out, grp, sub);
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
            if (grp[v] >= 0) {   /* a piece of a Concat's output, or that output: one block for all */
                const kiln_node *c = &g->nodes[grp[v]];
                int *gb = &grp_blk[grp[v]];
                if (*gb < 0) {   /* its first piece computed: the block lives until the last of them dies */
                    int end = last[c->out[0]] > i ? last[c->out[0]] : i;
                    for (int k = 0; k < c->n_in; k++)
                        end = last[c->in[k]] > end ? last[c->in[k]] : end;
                    size_t csz = (bytes[c->out[0]] + ALIGN - 1) / ALIGN * ALIGN;
                    blocks[nb] = (block){.size = csz, .start = i, .end = end, .offset = -1};
                    *gb = nb++;
                }
                blk_of[v] = *gb;
                if (v == c->out[0])
                    p->inplace[v] = KILN_SLOT_CONCAT;
                continue;
            }
            int donor = -1;
            if (o == 0 && kiln__plan_inplace_op(n->op))
                for (int j = 0; j < n->n_in && j < 2 && donor < 0; j++) {
                    int u = n->in[j];
                    if (u >= 0 && blk_of[u] >= 0 && grp[u] < 0 && last[u] == i && bytes[u] == bytes[v] &&
                        blocks[blk_of[u]].end == i)
                        donor = u;
                }
            if (donor < 0 && o == 0 && (flags & KILN_PLAN_CONV_RES) && n->n_in >= 4) {
                int u = n->in[3];
                if (u >= 0 && blk_of[u] >= 0 && grp[u] < 0 && last[u] == i && blocks[blk_of[u]].end == i &&
                    conv_res_pair(g, n, u, v, bytes))
                    donor = u;
            }
            if (donor >= 0) {
                blk_of[v] = blk_of[donor];
                block *b = &blocks[blk_of[v]];
                if (last[v] > b->end)
                    b->end = last[v];
                p->inplace[v] = KILN_SLOT_INPLACE;
                p->n_inplace++;
            } else {
                blocks[nb] = (block){.size = sz, .start = i, .end = last[v] > i ? last[v] : i, .offset = -1};
                blk_of[v] = nb++;
            }
        }
    }
    kiln__free(is_out);
    st = place_blocks(blocks, nb, g->n_nodes, &p->arena_size);
    if (st != KILN_OK)
        goto done;
    for (int v = 0; v < nv; v++)
        if (blk_of[v] >= 0)
            p->offset[v] = blocks[blk_of[v]].offset + (int64_t)sub[v];
done:
    kiln__free(last);
    kiln__free(blk_of);
    kiln__free(grp);
    kiln__free(grp_blk);
    kiln__free(sub);
    kiln__free(blocks);
    if (st != KILN_OK)
        kiln__plan_free(p);
    return st;
}
