/* The graph interpreter: runs a kiln_graph node by node through a backend (backend.h). */
#ifndef KILN_RUNTIME_EXEC_H
#define KILN_RUNTIME_EXEC_H

#include "../backend/backend.h"
#include <stdatomic.h>

typedef struct kiln_frame kiln_frame;

/* Planned activation memory for one top-level graph execution (see plan.c). */
typedef struct kiln_mem {
    uint8_t *arena;
    size_t arena_size;
    const int64_t *offset;    /* per value id: byte offset in the arena, -1 = not planned */
    const size_t *cap;        /* per value id: planned bytes */
    const uint8_t *inplace;   /* per value id: 1 if it shares its slot with a dying input */
    size_t *record;           /* if non-NULL: receives each produced value's byte size */
    kiln_tensor *record_meta; /* if non-NULL: receives each produced value's dtype and shape (no data) */
} kiln_mem;

/* Tactic tuning hook (builder): runs `layer` on ctx (kiln__layer_run) as often as it likes; the last
 * run's outputs stay. */
typedef kiln_status (*kiln_tune_fn)(void *user, kiln_kctx *ctx, const kiln_layer *layer);

/* Observation hook (calibration): called after node n of the top-level graph ran successfully;
 * outputs[o] is its o-th output where n->out[o] >= 0 (read-only, valid during the call). A non-OK
 * return stops the run with that status. */
typedef kiln_status (*kiln_observe_fn)(void *user, const kiln_node *n, const kiln_tensor *const *outputs);

/* Optional instrumentation of a top-level execution (zero-initialize it: fields are added). */
typedef struct kiln_hooks {
    double *node_ns;           /* per node, accumulated nanoseconds (profiling) */
    kiln_tune_fn tune;
    void *tune_user;
    kiln_observe_fn observe;   /* NULL: none */
    void *observe_user;
    bool observe_host;         /* on a device run: outputs held on the device are handed to observe as host copies
                                * (float32 where the device holds half storage, in ONNX layout where it holds them
                                * channels-last); one that cannot be copied (held only in E4M3) is handed as NULL */
} kiln_hooks;

/* When a run must stop early: checked between nodes and at every subgraph run (each Loop / Scan
 * iteration). */
typedef struct kiln_run_ctl {
    const atomic_int *cancel;  /* nonzero: cancelled (a context's flag), or NULL */
    unsigned generation;       /* kiln_cancel_all() generation when the run started */
    int64_t deadline_ns;       /* CLOCK_MONOTONIC; 0 = no time budget */
    double budget_s;           /* for the message */
} kiln_run_ctl;

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t kiln__now_ns(void);
/* A control for a run starting now: cancel flag (or NULL) and a budget (<= 0: none). */
kiln_run_ctl kiln__run_ctl(const atomic_int *cancel, double budget_s);
/* KILN_ERR_CANCELLED / KILN_ERR_LIMIT with a message once the run must stop, else KILN_OK. */
kiln_status kiln__run_check(const kiln_run_ctl *c);

/* What one top-level execution runs on: the owner's thread pool (a context's, a model run's, a
 * build's), how many of its threads a layer may use, and when to stop. */
typedef struct kiln_run_env {
    kiln_pool *pool;           /* NULL: single-threaded */
    int nthreads;              /* >= 1, at most the pool's threads */
    const kiln_run_ctl *ctl;   /* NULL: runs to the end */
    const kiln_backend *backend; /* NULL: the CPU backend */
    /* the layers of an engine's top-level graph `layers_of`, restored from its layer plan (node i:
     * layers[i], with its prepared data), or NULL: every layer is prepared on the fly */
    const kiln_layer *layers;
    const kiln_graph *layers_of;
    struct kiln_dev *dev;      /* device run (device.h: residency hooks), NULL: host only */
} kiln_run_env;

/* The interpreter's state behind a kernel context (kiln_kctx.rt_user). */
typedef struct kiln_exec {
    int nthreads;
    const kiln_frame *frame;   /* frame of the graph the current node belongs to */
    int depth;                 /* subgraph nesting depth, to stop runaway recursion */
    kiln_mem *mem;             /* NULL: every tensor on the heap */
    const kiln_run_env *env;   /* NULL: single-threaded */
} kiln_exec;

static inline bool kiln__in_arena(const kiln_mem *m, const void *p)
{
    return m && m->arena && (const uint8_t *)p >= m->arena && (const uint8_t *)p < m->arena + m->arena_size;
}

/* Runs graph g. inputs[i] feeds g->inputs[i] (borrowed). On success outputs[0..g->n_outputs)
 * receive tensors owned by the caller. `parent` resolves outer-scope names (NULL at top). */
kiln_status kiln__exec_graph(const kiln_graph *g, const kiln_frame *parent, const kiln_tensor *const *inputs,
                             kiln_tensor *outputs, const kiln_run_env *env, int depth);
/* Same, with planned memory and/or per-node timing (either may be NULL). */
kiln_status kiln__exec_graph_ex(const kiln_graph *g, const kiln_frame *parent, const kiln_tensor *const *inputs,
                                kiln_tensor *outputs, const kiln_run_env *env, int depth, kiln_mem *mem,
                                const kiln_hooks *hooks);

/* Appends "op_type (domain, opset N) node 'name'" for each node without a kernel, recursing
 * into subgraphs. Returns the count. buf may be NULL. */
int kiln__list_unsupported(const kiln_graph *g, char *buf, size_t buflen);

#endif
