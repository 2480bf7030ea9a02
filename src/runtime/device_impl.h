/* The state behind kiln_dev (device.c, exec_device.c only). */
#ifndef KILN_RUNTIME_DEVICE_IMPL_H
#define KILN_RUNTIME_DEVICE_IMPL_H
#include "device.h"

struct kiln_dev {
    const kiln_devmod *mod;
    kiln_backend *be;
    char description[256];
    struct kiln_dev_weights *weights;   /* the graph's weights on the device, shared (device.c) */
    /* the last run's counts */
    int n_device, n_host, n_fallback;
    unsigned long long h2d_bytes, d2h_bytes;
    unsigned long long fp8_base[KILN_FP8_COUNTS];   /* the module's FP8 counts (kiln_devmod.fp8_counts) when the run
                                                     * began */
    unsigned long long g_fp8[KILN_FP8_COUNTS];      /* the captured run's */
    char *fallback_ops;   /* op types that fell back to the host (grows, never shrinks) */
    int tactics_loaded;   /* kiln_device_stats.tactics_loaded */
    unsigned arena_gen;   /* bumped by every arena allocation / free */
    /* CUDA graph of the current input shapes (device_graph.c) */
    bool graphs;                  /* enabled (KILN_CUDA_GRAPHS unset or not "0") */
    bool strict;                  /* KILN_DEVICE_STRICT: no CPU fallback */
    bool cap_open;                /* this run is being captured */
    bool no_capture;              /* a capture at these shapes failed: run layer by layer */
    bool cap_failed;              /* this run's capture failed: make the run again */
    int cap_input;                /* graph input index of the upload being made (-1: none) */
    const kiln_graph *cap_g;      /* the graph being captured / of `graph` */
    void *graph;                  /* the module's graph for key, or NULL */
    unsigned graph_arena_gen;
    int same_runs;                /* runs at key in a row */
    int n_key;
    kiln_tensor *key;             /* the inputs' dtypes and dims (no data) */
    struct kiln_dev_up { int input; void *staged; size_t n; } *up;   /* uploads the graph replays */
    int n_up, cap_up;
    int n_gout;
    kiln_tensor *gout;            /* the graph outputs on the device, as the capture left them */
    /* device blocks the graph touches outside its own launch -- its outputs (read after it) and its inputs'
     * uploads (written just before it) -- kept while the graph lives: the captured run's end would free them
     * into the module's pool, where the next allocation of the same size (an output's relayout at the next
     * replay) took the output's own block; freed by kiln__dev_graph_drop (owned: the run let go of it) */
    struct kiln_dev_held { void *p; bool owned; } *held;
    int n_held, cap_held;
    int g_device, g_host;
    unsigned long long g_h2d;
    long replays;
    bool replayed;                /* the last run was a replay (graph_ms) */
    double replay_host_ms[3];     /* its host wall time: inputs into pinned memory, waiting, outputs back */
    uint16_t *scratch;            /* half outputs on their way to the host (half_to_host), kept between runs */
    size_t scratch_cap;
    /* where each node of the top-level graph ran in the last interpreted run (kiln_layer_place values) */
    const kiln_graph *place_g;
    uint8_t *place;
    uint8_t *store;               /* and the storage its first output had there (kiln_dev_store), place + n_place */
    int n_place;
    bool place_run;               /* this run's first node was seen (place reset for it) */
};

/* Capture hooks (device_graph.c): the upload of graph input k (-1: another host tensor) during a
 * capture; the end of a captured run (before its outputs are fetched); freeing the graph state. */
kiln_status kiln__dev_graph_upload(kiln_dev *d, const kiln_tensor *h, kiln_tensor *out);
kiln_status kiln__dev_graph_finish(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *val);
void kiln__dev_graph_drop(kiln_dev *d);
/* Whether device block p is one the graph keeps (kiln_dev.held): then it is the graph's from now on and the
 * caller must not free it. */
bool kiln__dev_graph_keeps(kiln_dev *d, void *p);
/* The graph input index of value v of g, or -1. */
int kiln__dev_input_index(const kiln_graph *g, int v);

/* fn(arg, lo, hi) over [0, n) in up to 8 threads when the work moves `bytes` >= 8 MiB (parts a multiple of
 * grain), else on this thread (host_par.c). */
void kiln__host_par(size_t n, size_t bytes, size_t grain, void (*fn)(void *arg, size_t lo, size_t hi), void *arg);
/* Bytes of the shared device copies of the graph's weights d is bound to. */
uint64_t kiln__dev_weights_bytes(const kiln_dev *d);
/* The device copy of initializer v of g, made at its first use by any kiln_dev on g. */
kiln_status kiln__dev_weight(kiln_dev *d, const kiln_graph *g, int v, const kiln_tensor **out);
/* A device copy of host tensor h: from the instance's pool, or (shared) plain device memory that
 * outlives the instance (freed with kiln__dev_shared_free). */
kiln_status kiln__dev_upload(kiln_dev *d, const kiln_tensor *h, kiln_tensor *out, bool shared);
/* The module's FP8 counts (passes, fed) since this run began. */
void kiln__dev_fp8_counts(const kiln_dev *d, unsigned long long c[KILN_FP8_COUNTS]);
#endif
