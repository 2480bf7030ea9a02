/* Device execution (docs/CUDA.md): a context or run on `--device cuda` holds a kiln_dev, which
 * owns a backend instance of the dlopen()ed device module and the device copies of the weights.
 * The interpreter (exec.c) calls the three hooks below around every node and at the end of the
 * top-level graph; everything that knows about host/device residency lives here. */
#ifndef KILN_RUNTIME_DEVICE_H
#define KILN_RUNTIME_DEVICE_H
#include "../backend/cuda/cuda_module.h"

typedef struct kiln_dev kiln_dev;

/* KILN_ERR_INVALID_ARG (naming fn) where flags holds a bit other than KILN_DEVICE_ALLOW_TF32 | KILN_DEVICE_STRICT */
kiln_status kiln__dev_check_flags(const char *fn, unsigned flags);
/* Opens a backend instance on `kind` (KILN_DEVICE_CUDA). One clean error when no module or no GPU. */
kiln_status kiln__dev_open(kiln_device kind, unsigned flags, kiln_dev **out);
/* Resets the per-run counters (kiln_device_stats): at the start of a top-level run. */
void kiln__dev_run_begin(kiln_dev *d);
void kiln__dev_close(kiln_dev *d);
const kiln_backend *kiln__dev_backend(const kiln_dev *d);
/* Device memory for a context's activation arena. */
kiln_status kiln__dev_arena_alloc(kiln_dev *d, size_t n, void **p);
void kiln__dev_arena_free(kiln_dev *d, void *p);
/* Frees a tensor the device produced (KILN_TENSOR_ON_DEVICE) and clears it. */
void kiln__dev_tensor_free(kiln_dev *d, kiln_tensor *t);
void kiln__dev_stats(const kiln_dev *d, kiln_device_stats *s);
/* Where node i of g ran in the last interpreted run (kiln_layer_place; NONE if g is not the graph run). */
int kiln__dev_layer_place(const kiln_dev *d, const kiln_graph *g, int i);
/* How a device layer's first output was held in that run, where not as its dtype: a float32 value in FP16 / BF16
 * storage (KILN_TENSOR_DEV_F16 / _BF16: the layer computed in float32, stored half) or only in E4M3. */
typedef enum kiln_dev_store {
    KILN_STORE_AS_DTYPE = 0,
    KILN_STORE_F16,
    KILN_STORE_BF16,
    KILN_STORE_E4M3
} kiln_dev_store;
int kiln__dev_layer_store(const kiln_dev *d, const kiln_graph *g, int i);
/* Drops the device copies of the weights. A kiln_dev serves one graph (a context's engine, one
 * model run): call this before it runs another graph (tests) or when the graph is freed. */
void kiln__dev_weights_clear(kiln_dev *d);

/* Device tactics (core/devtac.h; docs/CUDA.md "Tactics in the engine"). export: the module's timed choices as a
 * tactics text (malloc()ed, freed with free(); *text NULL when none). import: an engine's tactics text for the
 * layers still to run: refused (KILN_ERR_UNSUPPORTED, nothing taken) when it was timed on another GPU; timed on
 * other driver or library versions it is ignored with a warning (they are timed again). */
kiln_status kiln__dev_tactics_export(kiln_dev *d, char **text, size_t *n);
kiln_status kiln__dev_tactics_import(kiln_dev *d, const char *text, size_t n);

/* Where one node runs, with its inputs moved there. */
typedef struct kiln_dev_node {
    const kiln_backend *be;        /* the device backend, or the CPU backend */
    bool on_host;                  /* runs on the CPU (shape arithmetic, or no device kernel) */
    int n_tmp;
    kiln_tensor tmp[16];           /* copies made for this node, freed by kiln__dev_node_end */
    bool tmp_dev[16];
    kiln_tensor *more;             /* copies past the 16th (a Concat of many inputs), one slot per input */
    bool *more_dev;
    int cap_more;
    const kiln_layer *blob_of;     /* the engine's CPU layer whose blob the device layer runs from, or NULL */
} kiln_dev_node;

/* Chooses where node n of g runs and rewrites in[] (n->n_in entries) to tensors resident there. host_layer:
 * the engine's CPU layer of n (its build-time blob, which the device module may run from), or NULL. */
kiln_status kiln__dev_node_begin(kiln_dev *d, const kiln_graph *g, const kiln_node *n, const kiln_tensor **in,
                                 const kiln_layer *host_layer, kiln_dev_node *dn);
/* After the node ran: frees the copies; outputs of a host-run node that device layers will want
 * (floats, large tensors) are moved to the device. */
kiln_status kiln__dev_node_end(kiln_dev *d, kiln_dev_node *dn, const kiln_node *n, kiln_tensor *const *out,
                               kiln_status st);
/* Host copy of device tensor t (FP16 / BF16-held float32 widened, channels-last brought back to its ONNX layout),
 * into spare's buffer (moved into out) when that holds exactly the bytes needed (spare may be NULL); an error for
 * a tensor held only in E4M3. out is freed with kiln__tensor_release. */
kiln_status kiln__dev_to_host(kiln_dev *d, const kiln_tensor *t, kiln_tensor *out, kiln_tensor *spare);
/* Top-level graph outputs resident on the device are copied into host tensors outputs[o]. */
/* CUDA graphs (device_graph.c, docs/CUDA.md), called by a context around each run at planned shapes:
 * replay: runs the graph captured for these inputs, if any (true: the run is done, *st its status,
 * outputs fetched into outs); arm: captures this run when it is the third at these shapes; retry:
 * after the run, true when a capture failed and the run must be made again layer by layer. */
bool kiln__dev_graph_replay(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *in, kiln_tensor *outs,
                            kiln_tensor *spare, kiln_status *st);
void kiln__dev_graph_arm(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *in);
bool kiln__dev_graph_retry(kiln_dev *d);
/* CUDA graph replays so far. */
long kiln__dev_graph_replays(const kiln_dev *d);
kiln_status kiln__dev_fetch_outputs(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *val,
                                    kiln_tensor *outputs);
/* The same copies without ending a capture: a subgraph's device outputs for the host-run control-flow
 * node (If / Loop / Scan) that ran it. */
kiln_status kiln__dev_fetch_values(kiln_dev *d, const kiln_graph *g, const kiln_tensor *const *val,
                                   kiln_tensor *outputs);

static inline bool kiln__on_device(const kiln_tensor *t)
{
    return t && (t->flags & KILN_TENSOR_ON_DEVICE);
}

#endif
