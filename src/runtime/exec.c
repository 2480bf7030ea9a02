/* Interpreter: executes nodes in topological order, frees each intermediate after its last use. */
#include "exec.h"
#include "device.h"
#include <limits.h>
#include <stdio.h>
#include <time.h>

#define MAX_EXEC_DEPTH 64

struct kiln_frame {
    const kiln_graph *g;
    const kiln_tensor **val;   /* current tensor of each value (borrowed or owned) */
    kiln_tensor *owned;        /* storage for tensors produced by nodes, one per value */
    const kiln_frame *parent;
};

static const kiln_tensor *lookup_outer(const kiln_frame *f, const char *name)
{
    for (; f; f = f->parent) {
        int v = kiln__graph_find(f->g, name);
        if (v >= 0 && f->val[v])
            return f->val[v];
    }
    return NULL;
}

typedef struct unsup {
    const kiln_node *first;
    int count;
} unsup;

static void collect_unsupported(const kiln_graph *g, unsup *u, int *nu, int cap, int *total)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (!kiln__backend_has_op(kiln__cpu_backend(), n)) {
            (*total)++;
            int k = 0;
            while (k < *nu && !(strcmp(u[k].first->op_type, n->op_type) == 0 &&
                                strcmp(u[k].first->domain, n->domain) == 0 && u[k].first->opset == n->opset))
                k++;
            if (k == *nu && *nu < cap)
                u[(*nu)++] = (unsup){n, 0};
            if (k < *nu)
                u[k].count++;
        }
        for (int a = 0; a < n->n_attr; a++) {
            if (n->attrs[a].g)
                collect_unsupported(n->attrs[a].g, u, nu, cap, total);
            for (int k = 0; k < n->attrs[a].n && n->attrs[a].graphs; k++)
                collect_unsupported(n->attrs[a].graphs[k], u, nu, cap, total);
        }
    }
}

int kiln__list_unsupported(const kiln_graph *g, char *buf, size_t buflen)
{
    unsup u[64];
    int nu = 0, total = 0;
    collect_unsupported(g, u, &nu, 64, &total);
    for (int k = 0; buf && k < nu; k++) {
        size_t o = strlen(buf);
        const kiln_node *n = u[k].first;
        if (o + 1 < buflen)
            snprintf(buf + o, buflen - o, "%s%s (domain '%s', opset %d) x%d, e.g. node '%s'", o ? "; " : "",
                     n->op_type, n->domain[0] ? n->domain : "ai.onnx", n->opset, u[k].count, n->name);
    }
    return total;
}

/* ---- what the interpreter provides kernels (kiln_krt): placement in the plan, subgraphs */

/* Output i of the node in its planned arena slot, when the plan has one large enough. */
static void *rt_place(void *user, const kiln_kctx *ctx, int i, size_t nbytes, bool *fresh)
{
    const kiln_exec *ex = user;
    const kiln_mem *m = ex->mem;
    if (!m || !m->arena || !ctx->node->out || i >= ctx->node->n_out)
        return NULL;
    int v = ctx->node->out[i];
    if (v < 0 || m->offset[v] < 0 || nbytes > m->cap[v])
        return NULL;
    *fresh = !m->inplace[v];
    return m->arena + m->offset[v];
}

static bool rt_owns(void *user, const void *p)
{
    return kiln__in_arena(((const kiln_exec *)user)->mem, p);
}

static kiln_status rt_run_graph(void *user, const kiln_kctx *ctx, const kiln_graph *g, const kiln_tensor *const *inputs,
                                kiln_tensor *outputs)
{
    (void)ctx;
    const kiln_exec *ex = user;
    return kiln__exec_graph(g, ex->frame, inputs, outputs, ex->env, ex->depth + 1);
}

static const kiln_krt exec_rt = {.place = rt_place, .owns = rt_owns, .run_graph = rt_run_graph};

/* Releases a value's tensor unless it lives in the planned arena (device tensors: device.h). */
static void release(kiln_mem *mem, const kiln_run_env *env, kiln_tensor *t)
{
    if (kiln__in_arena(mem, t->data))
        memset(t, 0, sizeof *t);
    else if (kiln__on_device(t) && env && env->dev)
        kiln__dev_tensor_free(env->dev, t);
    else
        kiln__tensor_release(t);
}

/* The observe hook of a device run that wants host values (kiln_hooks.observe_host): the node's outputs held on the
 * device are copied to the host for the call (NULL for one that cannot be: held only in E4M3), then freed. */
static kiln_status observe_host(kiln_dev *dev, const kiln_hooks *hooks, const kiln_node *n, kiln_tensor *const *out)
{
    enum { MAX_OBS = 16 };
    const kiln_tensor *view_buf[MAX_OBS], **view = view_buf;
    kiln_tensor host_buf[MAX_OBS], *host = host_buf;
    if (n->n_out > MAX_OBS) {   /* e.g. a Split into many parts */
        view = kiln__calloc((size_t)n->n_out, sizeof *view);
        host = kiln__calloc((size_t)n->n_out, sizeof *host);
        if (!view || !host) {
            kiln__free(view);
            kiln__free(host);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
    }
    for (int o = 0; o < n->n_out; o++) {
        view[o] = out[o];
        if (n->out[o] < 0 || !kiln__on_device(out[o]))
            continue;
        view[o] = NULL;
        if (kiln__dev_to_host(dev, out[o], &host[o], NULL) == KILN_OK)
            view[o] = &host[o];
        else
            kiln_clear_last_error();   /* not readable on the host (E4M3 storage): handed as NULL */
    }
    kiln_status st = hooks->observe(hooks->observe_user, n, view);
    for (int o = 0; o < n->n_out; o++)
        if (view[o] == &host[o])
            kiln__tensor_release(&host[o]);
    if (view != view_buf) {
        kiln__free(view);
        kiln__free(host);
    }
    return st;
}

static kiln_status run_node(kiln_frame *f, int idx, const kiln_run_env *env, int depth, kiln_mem *mem,
                            const kiln_hooks *hooks)
{
    const kiln_graph *g = f->g;
    const kiln_node *n = &g->nodes[idx];
    /* the backend is settled after the device hook below */
    const kiln_backend *be = env && env->backend ? env->backend : kiln__cpu_backend();
    kiln_layer layer;
    const kiln_tensor *in_buf[16];
    kiln_tensor *out_buf[16];
    kiln_tensor scratch_buf[16];
    const kiln_tensor **in = in_buf;
    kiln_tensor **out = out_buf;
    kiln_tensor *scratch = scratch_buf;
    kiln_status st = KILN_OK;
    if (n->n_in > 16 || n->n_out > 16) {
        in = kiln__calloc((size_t)n->n_in + 1, sizeof *in);
        out = kiln__calloc((size_t)n->n_out + 1, sizeof *out);
        scratch = kiln__calloc((size_t)n->n_out + 1, sizeof *scratch);
        if (!in || !out || !scratch) {
            st = kiln__err(KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        in[i] = v >= 0 ? f->val[v] : NULL;
        if (v >= 0 && !in[i]) {
            st = kiln__err(KILN_ERR_INTERNAL, "node '%s' (%s): input '%s' has no value", n->name, n->op_type,
                           g->values[v].name);
            goto done;
        }
    }
    for (int o = 0; o < n->n_out; o++) {
        memset(&scratch[o], 0, sizeof scratch[o]);
        out[o] = n->out[o] >= 0 ? &f->owned[n->out[o]] : &scratch[o];
    }
    /* device hook: where the node runs, its inputs moved there (host-run nodes get no arena) */
    kiln_dev_node dn = {.be = be};
    const kiln_layer *host_layer = env && env->layers && g == env->layers_of ? &env->layers[idx] : NULL;
    if (env && env->dev && (st = kiln__dev_node_begin(env->dev, g, n, in, host_layer, &dn)) != KILN_OK)
        goto done;
    be = dn.be;
    /* an engine's layers come from its layer plan (prepared at build time, blobs used in place);
     * others, and layers a device runs, are prepared on the fly (no packing, no allocation) */
    if (env && env->layers && g == env->layers_of && env->layers[idx].be == be) {
        layer = env->layers[idx];
    } else if ((st = be->ops->prepare(be, n, NULL, &layer)) != KILN_OK) {
        if (env && env->dev)
            kiln__dev_node_end(env->dev, &dn, n, out, st);
        goto done;
    }
    be = layer.be;
    if (dn.blob_of && !dn.on_host) {   /* the device layer runs from the CPU layer's build-time blob */
        layer.blob = dn.blob_of->blob;
        layer.blob_size = dn.blob_of->blob_size;
        layer.replaces = dn.blob_of->replaces;
    }
    /* a constant an engine stores only packed reaches only a layer whose blob replaces it */
    for (int i = 0; i < n->n_in && st == KILN_OK; i++)
        if (in[i] && !in[i]->data && !in[i]->nbytes && kiln_tensor_numel(in[i]) > 0 &&
            (i >= 32 || !(layer.replaces >> i & 1u)))
            st = kiln__err(KILN_ERR_UNSUPPORTED, "node '%s' (%s): input '%s' is stored only in packed form and this "
                           "layer has no prepared data for it", n->name, n->op_type, g->values[n->in[i]].name);
    if (st != KILN_OK) {
        if (env && env->dev)
            kiln__dev_node_end(env->dev, &dn, n, out, st);
        goto done;
    }
    int nthreads = env ? env->nthreads : 1;
    kiln_exec ex = {.nthreads = nthreads, .frame = f, .depth = depth, .mem = dn.on_host ? NULL : mem, .env = env};
    kiln_kctx ctx = {.node = n, .n_in = n->n_in, .in = in, .n_out = n->n_out, .out = out,
                     .pool = env ? env->pool : NULL, .nthreads = nthreads, .rt = &exec_rt, .rt_user = &ex};
    /* tactic "st": this layer runs single-threaded (chosen by the builder when faster) */
    if (n->tactic && !strcmp(n->tactic, "st"))
        ctx.nthreads = 1;
    double *node_ns = hooks ? hooks->node_ns : NULL;
    struct timespec t0, t1;
    if (node_ns)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    st = hooks && hooks->tune ? hooks->tune(hooks->tune_user, &ctx, &layer) : be->ops->run(be, &layer, &ctx);
    if (node_ns) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        node_ns[idx] += (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    }
    if (env && env->dev)   /* device hook: drop the moved copies, move host results over */
        st = kiln__dev_node_end(env->dev, &dn, n, out, st);
    for (int o = 0; o < n->n_out; o++) {
        if (n->out[o] < 0) {
            release(mem, env, &scratch[o]);
        } else if (st == KILN_OK) {
            if (mem && mem->record)
                mem->record[n->out[o]] = out[o]->nbytes;
            if (mem && mem->record_meta) {
                mem->record_meta[n->out[o]] = *out[o];
                mem->record_meta[n->out[o]].data = NULL;
            }
            if (!out[o]->data) {
                st = kiln__err(KILN_ERR_INTERNAL, "node '%s' (%s) did not produce output %d", n->name, n->op_type, o);
                continue;
            }
            f->val[n->out[o]] = out[o];
        }
    }
    if (st == KILN_OK && hooks && hooks->observe)
        st = env && env->dev && hooks->observe_host ? observe_host(env->dev, hooks, n, out)
                                                    : hooks->observe(hooks->observe_user, n, (const kiln_tensor *const *)out);
done:
    if (in != in_buf) {
        kiln__free(in);
        kiln__free(out);
        kiln__free(scratch);
    }
    return st;
}

kiln_status kiln__exec_graph(const kiln_graph *g, const kiln_frame *parent, const kiln_tensor *const *inputs,
                             kiln_tensor *outputs, const kiln_run_env *env, int depth)
{
    return kiln__exec_graph_ex(g, parent, inputs, outputs, env, depth, NULL, NULL);
}

kiln_status kiln__exec_graph_ex(const kiln_graph *g, const kiln_frame *parent, const kiln_tensor *const *inputs,
                                kiln_tensor *outputs, const kiln_run_env *env, int depth, kiln_mem *mem,
                                const kiln_hooks *hooks)
{
    if (depth > MAX_EXEC_DEPTH)
        return kiln__err(KILN_ERR_LIMIT, "subgraph execution nested deeper than %d", MAX_EXEC_DEPTH);
    if (env && env->ctl)
        KILN_TRY(kiln__run_check(env->ctl));   /* also once per Loop / Scan iteration */
    kiln_status st = KILN_OK;
    int nv = g->n_values;
    kiln_frame f = {.g = g, .parent = parent};
    int *last_use = kiln__calloc((size_t)nv + 1, sizeof(int));
    f.val = kiln__calloc((size_t)nv + 1, sizeof *f.val);
    f.owned = kiln__calloc((size_t)nv + 1, sizeof *f.owned);
    if (!last_use || !f.val || !f.owned) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int o = 0; o < g->n_outputs; o++)
        memset(&outputs[o], 0, sizeof outputs[o]);
    for (int v = 0; v < nv; v++) {
        last_use[v] = -1;
        if (g->values[v].init)
            f.val[v] = g->values[v].init;
        else if (g->values[v].is_outer) {
            f.val[v] = lookup_outer(parent, g->values[v].name);
            if (!f.val[v] && g->values[v].producer < 0) {
                st = kiln__err(KILN_ERR_INVALID_ARG, "outer-scope value '%s' is not available", g->values[v].name);
                goto done;
            }
        }
    }
    for (int i = 0; i < g->n_inputs; i++)
        f.val[g->inputs[i]] = inputs[i];
    kiln__mark_last_uses(g, last_use);   /* subgraphs read outer values while their node runs */
    for (int o = 0; o < g->n_outputs; o++)
        last_use[g->outputs[o]] = INT_MAX;
    for (int i = 0; i < g->n_nodes; i++) {
        if (env && env->ctl && (st = kiln__run_check(env->ctl)) != KILN_OK)
            goto done;
        st = run_node(&f, i, env, depth, mem, hooks);
        if (st != KILN_OK)
            goto done;
        /* free intermediates whose last consumer was this node: its inputs, and for a node with
         * subgraphs (rare) also the values they read by name */
        const kiln_node *n = &g->nodes[i];
        bool has_subgraphs = false;
        for (int a = 0; a < n->n_attr; a++)
            has_subgraphs |= n->attrs[a].g || n->attrs[a].graphs;
        for (int j = 0; j < (has_subgraphs ? nv : n->n_in); j++) {
            int v = has_subgraphs ? j : n->in[j];
            if (v >= 0 && last_use[v] == i && f.val[v] == &f.owned[v]) {
                release(mem, env, &f.owned[v]);
                f.val[v] = NULL;
            }
        }
        for (int o = 0; o < n->n_out; o++) {
            int v = n->out[o];
            if (v >= 0 && last_use[v] < 0) {  /* never used */
                release(mem, env, &f.owned[v]);
                f.val[v] = NULL;
            }
        }
    }
    if (depth == 0) {   /* the outputs are read on the host next */
        const kiln_backend *be = env && env->backend ? env->backend : kiln__cpu_backend();
        if ((st = be->ops->synchronize(be)) != KILN_OK)
            goto done;
        /* device hook: outputs resident on the device are copied to host tensors in outputs[] */
        if (env && env->dev && (st = kiln__dev_fetch_outputs(env->dev, g, f.val, outputs)) != KILN_OK)
            goto done;
    } else if (env && env->dev && (st = kiln__dev_fetch_values(env->dev, g, f.val, outputs)) != KILN_OK) {
        goto done;   /* a subgraph of a control-flow node, which runs on the host */
    }
    for (int o = 0; o < g->n_outputs; o++) {
        int v = g->outputs[o];
        if (!f.val[v]) {
            st = kiln__err(KILN_ERR_INTERNAL, "graph output '%s' was not computed", g->values[v].name);
            goto done;
        }
        if (outputs[o].data)
            continue;   /* fetched from the device */
        if (f.val[v] == &f.owned[v] && !kiln__in_arena(mem, f.owned[v].data)) {
            /* move, unless another output slot refers to the same value */
            bool dup = false;
            for (int p = o + 1; p < g->n_outputs; p++)
                dup |= g->outputs[p] == v;
            if (dup) {
                st = kiln__tensor_clone(&outputs[o], f.val[v]);
            } else {
                outputs[o] = f.owned[v];
                memset(&f.owned[v], 0, sizeof f.owned[v]);
                f.val[v] = NULL;
            }
        } else {
            st = kiln__tensor_clone(&outputs[o], f.val[v]);
        }
        if (st != KILN_OK)
            goto done;
    }
done:
    if (st != KILN_OK && outputs)
        for (int o = 0; o < g->n_outputs; o++)
            kiln__tensor_release(&outputs[o]);
    if (f.owned)
        for (int v = 0; v < nv; v++)
            release(mem, env, &f.owned[v]);
    kiln__free(f.owned);
    kiln__free(f.val);
    kiln__free(last_use);
    return st;
}
