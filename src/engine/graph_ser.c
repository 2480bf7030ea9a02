/* Graph <-> bytes. The reader trusts nothing: ids, counts, dtypes, shapes and offsets are all
 * checked, and the result goes through the same topological validation as an imported model. */
#include "graph_ser.h"

#define MAX_DEPTH 32
#define MAX_COUNT 10000000u

static void write_tensor_header(kiln_wbuf *w, const kiln_tensor *t)
{
    kiln__w_i32(w, t->dtype);
    kiln__w_i32(w, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        kiln__w_i64(w, t->dims[d]);
}

static void write_inline_tensor(kiln_wbuf *w, const kiln_tensor *t)
{
    write_tensor_header(w, t);
    kiln__w_u64(w, t->nbytes);
    kiln__w_bytes(w, t->data, t->nbytes);
}

static kiln_status write_graph(kiln_wbuf *w, kiln_wbuf *wt, const kiln_graph *g);

static kiln_status write_attr(kiln_wbuf *w, kiln_wbuf *wt, const kiln_attr *a)
{
    kiln__w_str(w, a->name);
    kiln__w_u32(w, (uint32_t)a->type);
    kiln__w_f32(w, a->f);
    kiln__w_i64(w, a->i);
    kiln__w_str(w, a->s);
    kiln__w_u8(w, a->t != NULL);
    if (a->t)
        write_inline_tensor(w, a->t);
    kiln__w_u8(w, a->g != NULL);
    if (a->g)
        KILN_TRY(write_graph(w, wt, a->g));
    kiln__w_u32(w, (uint32_t)a->n);
    kiln__w_u8(w, a->floats ? 1 : a->ints ? 2 : a->strings ? 3 : a->graphs ? 4 : 0);
    for (int k = 0; k < a->n; k++) {
        if (a->floats)
            kiln__w_f32(w, a->floats[k]);
        else if (a->ints)
            kiln__w_i64(w, a->ints[k]);
        else if (a->strings)
            kiln__w_str(w, a->strings[k]);
        else if (a->graphs)
            KILN_TRY(write_graph(w, wt, a->graphs[k]));
    }
    return KILN_OK;
}

static kiln_status write_graph(kiln_wbuf *w, kiln_wbuf *wt, const kiln_graph *g)
{
    kiln__w_str(w, g->name);
    kiln__w_u32(w, (uint32_t)g->n_values);
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        kiln__w_str(w, v->name);
        kiln__w_u8(w, (uint8_t)v->kind);
        kiln__w_i32(w, v->dtype);
        kiln__w_i32(w, v->ndim);
        for (int d = 0; d < v->ndim; d++) {
            kiln__w_i64(w, v->dims[d].value);
            kiln__w_str(w, v->dims[d].param);
        }
        kiln__w_u8(w, v->is_outer);
        /* 2: a constant stored only in packed form (dtype and dims here, the data in a layer's
         * prepared blob) */
        bool packed_only = v->init && !v->init->data && v->init->nbytes == 0;
        kiln__w_u8(w, packed_only ? 2 : v->init != NULL);
        if (packed_only) {
            write_tensor_header(w, v->init);
        } else if (v->init) {
            write_tensor_header(w, v->init);
            kiln__w_align(wt, 64);
            kiln__w_u64(w, wt->len);
            kiln__w_u64(w, v->init->nbytes);
            kiln__w_bytes(wt, v->init->data, v->init->nbytes);
        }
    }
    kiln__w_u32(w, (uint32_t)g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        kiln__w_str(w, n->name);
        kiln__w_str(w, n->op_type);
        kiln__w_str(w, n->domain);
        kiln__w_i32(w, n->opset);
        kiln__w_u32(w, (uint32_t)n->n_in);
        for (int k = 0; k < n->n_in; k++)
            kiln__w_i32(w, n->in[k]);
        kiln__w_u32(w, (uint32_t)n->n_out);
        for (int k = 0; k < n->n_out; k++)
            kiln__w_i32(w, n->out[k]);
        kiln__w_str(w, n->fused_from);
        kiln__w_i32(w, n->precision);
        kiln__w_str(w, n->tactic);
        kiln__w_u32(w, (uint32_t)n->n_attr);
        for (int a = 0; a < n->n_attr; a++)
            KILN_TRY(write_attr(w, wt, &n->attrs[a]));
    }
    kiln__w_u32(w, (uint32_t)g->n_inputs);
    for (int i = 0; i < g->n_inputs; i++)
        kiln__w_i32(w, g->inputs[i]);
    kiln__w_u32(w, (uint32_t)g->n_outputs);
    for (int i = 0; i < g->n_outputs; i++)
        kiln__w_i32(w, g->outputs[i]);
    kiln__w_u32(w, (uint32_t)g->n_opsets);
    for (int i = 0; i < g->n_opsets; i++) {
        kiln__w_str(w, g->opsets[i].domain);
        kiln__w_i64(w, g->opsets[i].version);
    }
    return (w->oom || wt->oom) ? kiln__err(KILN_ERR_NOMEM, "out of memory serializing engine") : KILN_OK;
}

kiln_status kiln__graph_write(kiln_wbuf *gw, kiln_wbuf *weights, const kiln_graph *g)
{
    return write_graph(gw, weights, g);
}

/* ------------------------------------------------------------------ reading */

static kiln_status bad(kiln_rbuf *r, const char *what) { return kiln__r_error(r, what); }

static kiln_status read_tensor_header(kiln_rbuf *r, kiln_tensor *t)
{
    memset(t, 0, sizeof *t);
    int32_t dt = kiln__r_i32(r), nd = kiln__r_i32(r);
    if (r->bad || dt <= 0 || dt >= KILN_DT_COUNT || kiln_dtype_size((kiln_dtype)dt) == 0 || nd < 0 || nd > KILN_MAX_DIMS)
        return bad(r, "tensor type");
    t->dtype = (kiln_dtype)dt;
    t->ndim = nd;
    for (int d = 0; d < nd; d++)
        t->dims[d] = kiln__r_i64(r);
    int64_t n = kiln_tensor_numel(t);
    if (r->bad || n < 0 || (uint64_t)n > SIZE_MAX / 16)
        return bad(r, "tensor shape");
    return KILN_OK;
}

/* `nbytes` of data for tensor shape t must be exactly its size and lie within `avail` bytes. */
static kiln_status check_data(kiln_rbuf *r, const kiln_tensor *t, uint64_t nbytes, size_t avail)
{
    if (nbytes != (uint64_t)kiln_tensor_numel(t) * kiln_dtype_size(t->dtype))
        return bad(r, "tensor size");
    if (nbytes > avail)
        return bad(r, "tensor data range");
    return KILN_OK;
}

/* Reads `nbytes` for tensor t from src at the current position of src (inline attribute tensors). */
static kiln_status fill_tensor(kiln_rbuf *r, kiln_tensor *t, uint64_t nbytes, kiln_rbuf *src)
{
    kiln_tensor shape = *t;
    KILN_TRY(check_data(r, &shape, nbytes, kiln__r_left(src)));
    KILN_TRY(kiln__tensor_alloc(t, shape.dtype, shape.ndim, shape.dims));
    kiln__r_bytes(src, t->data, (size_t)nbytes);
    return KILN_OK;
}

static kiln_status read_graph(kiln_rbuf *r, const kiln_rbuf *wt, kiln_graph *g, int depth);

static kiln_status read_sub(kiln_rbuf *r, const kiln_rbuf *wt, kiln_graph *parent, int depth, kiln_graph **out)
{
    if (depth > MAX_DEPTH)
        return bad(r, "subgraph nesting");
    kiln_graph *sg = kiln__graph_new(parent);
    if (!sg)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = read_graph(r, wt, sg, depth);
    if (st != KILN_OK) {
        kiln__graph_free(sg);
        return st;
    }
    *out = sg;
    return KILN_OK;
}

static kiln_status read_attr(kiln_rbuf *r, const kiln_rbuf *wt, kiln_graph *g, int depth, kiln_attr *a)
{
    a->name = kiln__r_str(r);
    a->type = (kiln_attr_type)kiln__r_u32(r);
    a->f = kiln__r_f32(r);
    a->i = kiln__r_i64(r);
    a->s = kiln__r_str(r);
    if (r->bad || !a->name)
        return bad(r, "attribute");
    a->s_len = a->s ? strlen(a->s) : 0;
    if (kiln__r_u8(r)) {
        if (!(a->t = kiln__calloc(1, sizeof *a->t)))
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        KILN_TRY(read_tensor_header(r, a->t));
        uint64_t nb = kiln__r_u64(r);
        KILN_TRY(fill_tensor(r, a->t, nb, r));
    }
    if (kiln__r_u8(r))
        KILN_TRY(read_sub(r, wt, g, depth + 1, &a->g));
    uint32_t n = kiln__r_count(r, 0, MAX_COUNT);
    uint8_t kind = kiln__r_u8(r);
    if (r->bad || kind > 4 || (n && !kind) || (kind && n > kiln__r_left(r)))
        return bad(r, "attribute list");
    size_t esz = kind == 1 ? sizeof(float) : kind == 2 ? sizeof(int64_t) : sizeof(void *);
    void *arr = kind ? kiln__calloc(n ? n : 1, esz) : NULL;
    if (kind && !arr)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    if (kind == 1) a->floats = arr;
    if (kind == 2) a->ints = arr;
    if (kind == 3) a->strings = arr;
    if (kind == 4) a->graphs = arr;
    for (uint32_t k = 0; k < n; k++) {
        if (kind == 1)
            a->floats[k] = kiln__r_f32(r);
        else if (kind == 2)
            a->ints[k] = kiln__r_i64(r);
        else if (kind == 3) {
            a->strings[k] = kiln__r_str(r);
            a->n = (int)k + 1;
        } else {
            a->n = (int)k;
            KILN_TRY(read_sub(r, wt, g, depth + 1, &a->graphs[k]));
        }
        a->n = (int)k + 1;
        if (r->bad)
            return bad(r, "attribute list");
    }
    return KILN_OK;
}

static kiln_status read_value(kiln_rbuf *r, const kiln_rbuf *wt, kiln_graph *g)
{
    char *name = kiln__r_str(r);
    if (r->bad || !name) {
        kiln__free(name);
        return bad(r, "value name");
    }
    if (kiln__graph_find(g, name) >= 0) {
        kiln__free(name);
        return bad(r, "duplicate value name");
    }
    int id = kiln__graph_add_value(g, name);
    kiln__free(name);
    if (id < 0)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_value *v = &g->values[id];
    v->kind = (kiln_value_kind)kiln__r_u8(r);
    int32_t dt = kiln__r_i32(r), nd = kiln__r_i32(r);
    if (r->bad || v->kind > KILN_VAL_OTHER || dt < 0 || dt >= KILN_DT_COUNT || nd < -1 || nd > 64)
        return bad(r, "value type");
    v->dtype = (kiln_dtype)dt;
    if (nd >= 0) {
        if (!(v->dims = kiln__calloc((size_t)nd + 1, sizeof *v->dims)))
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        v->ndim = nd;
        for (int d = 0; d < nd; d++) {
            v->dims[d].value = kiln__r_i64(r);
            v->dims[d].param = kiln__r_str(r);
        }
    }
    v->is_outer = kiln__r_u8(r) != 0;
    uint8_t has = kiln__r_u8(r);
    if (has > 2 || (has == 2 && (g->parent || v->is_outer)))
        return bad(r, "weights kind");
    if (has == 2) {   /* dtype and dims only: the data lives in a layer's prepared blob */
        kiln_tensor t;
        KILN_TRY(read_tensor_header(r, &t));
        if (kiln_tensor_numel(&t) <= 0)
            return bad(r, "packed-only constant");
        if (!(v->init = kiln__calloc(1, sizeof *v->init)))
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        *v->init = t;
        v->init->data = NULL;
        v->init->nbytes = 0;
        v->init->flags = KILN_TENSOR_BORROWED;
    } else if (has) {
        kiln_tensor t;
        KILN_TRY(read_tensor_header(r, &t));
        uint64_t off = kiln__r_u64(r), nb = kiln__r_u64(r);
        if (r->bad || off > wt->len || off % 64)
            return bad(r, "weight offset");
        if (!(v->init = kiln__calloc(1, sizeof *v->init)))
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        *v->init = t;
        kiln_status st;
        if (wt->lasting) {   /* used in place (memory-mapped file or the engine's own copy) */
            st = check_data(r, &t, nb, wt->len - (size_t)off);
            if (st == KILN_OK)
                st = kiln__tensor_borrow(v->init, t.dtype, t.ndim, t.dims, wt->p + off, (size_t)nb);
        } else {
            kiln_rbuf src = {.p = wt->p, .len = wt->len, .pos = (size_t)off, .what = "weights"};
            st = fill_tensor(r, v->init, nb, &src);
        }
        if (st != KILN_OK) {
            kiln__free(v->init);
            v->init = NULL;
            return st;
        }
    }
    return r->bad ? bad(r, "value") : KILN_OK;
}

static bool valid_id(const kiln_graph *g, int32_t id, bool allow_empty)
{
    return (allow_empty && id == -1) || (id >= 0 && id < g->n_values);
}

static kiln_status read_node(kiln_rbuf *r, const kiln_rbuf *wt, kiln_graph *g, int depth, kiln_node *n)
{
    n->name = kiln__r_str(r);
    n->op_type = kiln__r_str(r);
    n->domain = kiln__r_str(r);
    n->opset = kiln__r_i32(r);
    if (r->bad || !n->name || !n->op_type || !n->domain)
        return bad(r, "node");
    n->op = kiln__op_lookup(n->domain, n->op_type);
    uint32_t ni = kiln__r_count(r, 4, 1u << 20);
    if (!(n->in = kiln__calloc(ni ? ni : 1, sizeof(int))))
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t k = 0; k < ni; k++) {
        n->in[k] = kiln__r_i32(r);
        if (!valid_id(g, n->in[k], true))
            return bad(r, "node input id");
    }
    n->n_in = (int)ni;
    uint32_t no = kiln__r_count(r, 4, 1u << 20);
    if (!(n->out = kiln__calloc(no ? no : 1, sizeof(int))))
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t k = 0; k < no; k++) {
        n->out[k] = kiln__r_i32(r);
        if (!valid_id(g, n->out[k], true))
            return bad(r, "node output id");
    }
    n->n_out = (int)no;
    n->fused_from = kiln__r_str(r);
    n->precision = kiln__r_i32(r);
    n->tactic = kiln__r_str(r);
    uint32_t na = kiln__r_count(r, 8, 1u << 16);
    if (r->bad)
        return bad(r, "node");
    if (!(n->attrs = kiln__calloc(na ? na : 1, sizeof(kiln_attr))))
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t a = 0; a < na; a++) {
        n->n_attr = (int)a + 1;
        KILN_TRY(read_attr(r, wt, g, depth, &n->attrs[a]));
    }
    return KILN_OK;
}

static kiln_status read_graph(kiln_rbuf *r, const kiln_rbuf *wt, kiln_graph *g, int depth)
{
    g->name = kiln__r_str(r);
    uint32_t nv = kiln__r_count(r, 14, MAX_COUNT);
    if (r->bad)
        return bad(r, "graph header");
    for (uint32_t i = 0; i < nv; i++)
        KILN_TRY(read_value(r, wt, g));
    uint32_t nn = kiln__r_count(r, 24, MAX_COUNT);
    if (r->bad)
        return bad(r, "node count");
    for (uint32_t i = 0; i < nn; i++) {
        int idx = kiln__graph_add_node(g);
        if (idx < 0)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        KILN_TRY(read_node(r, wt, g, depth, &g->nodes[idx]));
    }
    uint32_t nin = kiln__r_count(r, 4, MAX_COUNT);
    g->inputs = kiln__calloc(nin + 1, sizeof(int));
    if (!g->inputs)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < nin; i++) {
        g->inputs[i] = kiln__r_i32(r);
        if (!valid_id(g, g->inputs[i], false))
            return bad(r, "graph input id");
        g->n_inputs = (int)i + 1;
    }
    uint32_t nout = kiln__r_count(r, 4, MAX_COUNT);
    g->outputs = kiln__calloc(nout + 1, sizeof(int));
    if (!g->outputs)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < nout; i++) {
        g->outputs[i] = kiln__r_i32(r);
        if (!valid_id(g, g->outputs[i], false))
            return bad(r, "graph output id");
        g->n_outputs = (int)i + 1;
    }
    uint32_t nos = kiln__r_count(r, 12, 1024);
    g->opsets = kiln__calloc(nos + 1, sizeof(kiln_opset));
    if (!g->opsets)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < nos; i++) {
        g->opsets[i].domain = kiln__r_str(r);
        g->opsets[i].version = kiln__r_i64(r);
        g->n_opsets = (int)i + 1;
    }
    if (r->bad)
        return bad(r, "graph");
    /* producers: each value written by at most one node; inputs/initializers by none */
    for (int i = 0; i < g->n_nodes; i++)
        for (int o = 0; o < g->nodes[i].n_out; o++) {
            int v = g->nodes[i].out[o];
            if (v < 0)
                continue;
            if (g->values[v].producer >= 0 || g->values[v].init)
                return bad(r, "value written twice");
            g->values[v].producer = i;
        }
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].is_outer) {
            bool found = false;
            for (kiln_graph *p = g->parent; p && !found; p = p->parent)
                found = kiln__graph_find(p, g->values[v].name) >= 0;
            if (!found)
                return bad(r, "outer-scope reference");
        }
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v < 0 || g->values[v].producer >= 0 || g->values[v].init || g->values[v].is_outer)
                continue;
            bool is_input = false;
            for (int j = 0; j < g->n_inputs; j++)
                is_input |= g->inputs[j] == v;
            if (!is_input)
                return bad(r, "node input without a source");
        }
    return kiln__graph_toposort(g);
}

kiln_status kiln__graph_read(kiln_rbuf *r, const kiln_rbuf *weights, kiln_graph *parent, int depth, kiln_graph **out)
{
    *out = NULL;
    return read_sub(r, weights, parent, depth, out);
}
