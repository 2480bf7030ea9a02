/* The ABI between kiln's runtime and a separately loadable device module (libkiln_cuda.so).
 *
 * libkiln never links CUDA: the runtime (src/runtime/device.c) dlopen()s the module on
 * `--device cuda`, resolves KILN_DEVMOD_ENTRY and checks `abi`. The module calls back into
 * libkiln only through the host services table it is given (errors, node attributes), so it
 * needs no symbols from the executable. Its kiln_backend runs layers on tensors whose `data` are
 * device pointers (flag KILN_TENSOR_ON_DEVICE); dims always stay on the host. */
#ifndef KILN_BACKEND_CUDA_MODULE_H
#define KILN_BACKEND_CUDA_MODULE_H
#include "../backend.h"
#include "../../ir/fused.h"
#include "../layer_geom.h"

#define KILN_DEVMOD_ABI 12u   /* 12: qepi_setup / qadd_params (11: device tactics; 10: resize_plan / convt_geom) */
#define KILN_DEVMOD_ENTRY "kiln_devmod_entry"
#define KILN_FP8_COUNTS 4   /* kiln_devmod.fp8_counts: passes, fed, held, tanh GELUs */

/* A tensor whose data is device memory. Always set together with KILN_TENSOR_BORROWED, so that
 * host code that does not know about devices never frees it; the runtime frees it through the
 * module (kiln_devmod.free) unless it lies in a context's device arena. */
#define KILN_TENSOR_ON_DEVICE (1u << 8)
/* A device tensor of dtype FLOAT32 whose data the module holds as FP16 / BF16 (half activations,
 * docs/CUDA.md): numel * 2 bytes. The runtime widens it when it copies it to the host. */
#define KILN_TENSOR_DEV_F16 (1u << 9)
#define KILN_TENSOR_DEV_BF16 (1u << 10)
#define KILN_TENSOR_DEV_HALF (KILN_TENSOR_DEV_F16 | KILN_TENSOR_DEV_BF16)
/* A 4-D device tensor whose dims say NCHW but whose data the module holds channels-last (NHWC):
 * copies to the host go through kiln_devmod.canonical first. */
#define KILN_TENSOR_DEV_NHWC (1u << 11)
/* The device copy of one of the graph's weights (the runtime's shared copies): its data stay as they are while the
 * weights are bound, so the module may keep forms derived from it (a converted bias), checked against its pointer
 * and the weights' generation (freeing shared memory bumps it). */
#define KILN_TENSOR_DEV_WEIGHT (1u << 12)
/* A device tensor the module holds only as E4M3 bytes (numel bytes, its scale kept by the module: FP8 storage,
 * docs/CUDA.md), which only FP8 layers read: the runtime cannot copy it to the host (an error, never a reading of
 * those bytes as another type). */
#define KILN_TENSOR_DEV_E4M3 (1u << 13)

struct kiln_qepi;   /* backend/cpu/qgemm.h */
struct kiln_qadd;   /* backend/cpu/qadd.h */

/* What libkiln provides the module (filled by the runtime). */
typedef struct kiln_devmod_host {
    kiln_status (*err)(kiln_status s, const char *msg);   /* records msg as the thread's last error */
    void (*log)(kiln_log_level lvl, const char *msg);
    int64_t (*attr_i)(const kiln_node *n, const char *name, int64_t def);
    float (*attr_f)(const kiln_node *n, const char *name, float def);
    const char *(*attr_s)(const kiln_node *n, const char *name, const char *def);
    int (*attr_ints)(const kiln_node *n, const char *name, const int64_t **v);   /* -1 if absent */
    bool (*fused_act)(const kiln_node *n, kiln_fused_act *a);                     /* false: unknown */
    /* The CPU backend's build-time preparation of a low-bit layer (a KILN_PREP_LOWBIT_W blob: the weight,
     * consts[1], packed as docs/PRECISION.md says), for a layer run without an engine's blob; *blob == NULL
     * when there is nothing to pack. The blob is freed with free_blob. */
    kiln_status (*lowbit_prep)(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                               size_t *size);
    void (*free_blob)(void *blob);
    /* Attention's operand permutation `which` (KILN_ATTN_Q .. KILN_ATTN_Y, ir/fused.h) for rank: the CPU's
     * own reading of it (kiln__attn_perm: the identity when absent; false when not a permutation). */
    bool (*attn_perm)(const kiln_node *n, int which, int rank, int *perm);
    /* Resize / Upsample's output dims and tap tables, ConvTranspose's geometry: the CPU kernels' own reading
     * (backend/layer_geom.h), so a device layer resizes and pads exactly as the CPU does. */
    kiln_status (*resize_plan)(const kiln_node *n, int n_in, const kiln_tensor *const *in, kiln_resize_plan *p);
    void (*resize_plan_free)(kiln_resize_plan *p);
    kiln_status (*convt_geom)(const kiln_node *n, int ndim, const int64_t *xdims, const int64_t *wdims,
                              kiln_convt_geom *g);
    /* The INT8 layers' epilogue parameters, the CPU kernels' own reading (backend/cpu/qgemm.h kiln__qepi_setup,
     * cpu/qadd.h kiln__qadd_params: the 8 operands of an add, its activation's attribute; host tensors are read), so a device INT8 layer requantizes exactly as the CPU
     * does. qepi_setup's *buf is freed with free_blob. */
    kiln_status (*qepi_setup)(const kiln_kctx *ctx, struct kiln_qepi *e, kiln_dtype odt, bool ch_row, int64_t nch,
                              float a_scale, const kiln_tensor *w_scale, float alpha, const kiln_tensor *ys,
                              const kiln_tensor *yz, float **buf);
    kiln_status (*qadd_params)(const kiln_kctx *ctx, const kiln_tensor *const q[8], const char *act_attr,
                               struct kiln_qadd *p);
} kiln_devmod_host;

/* Options of one backend instance (one per execution context: its own stream and handles). */
typedef struct kiln_devmod_opts {
    int device;            /* GPU ordinal */
    bool allow_tf32;       /* FP32 convolutions / GEMMs may use TF32 tensor cores */
} kiln_devmod_opts;

typedef struct kiln_devmod {
    uint32_t abi;          /* KILN_DEVMOD_ABI */
    const char *name;      /* "cuda" */
    /* A backend instance on a GPU; a clean error (host->err) when there is none. */
    kiln_status (*create)(const kiln_devmod_host *host, const kiln_devmod_opts *o, kiln_backend **out);
    void (*destroy)(kiln_backend *be);
    /* Bit i set: the layer reads input i on the host (shape tensors, Reshape targets, Slice
     * starts ...): the runtime hands it a host tensor there. */
    uint32_t (*host_inputs)(kiln_backend *be, const kiln_node *n);
    /* Whether the layer of node n runs from the blob the engine's CPU layer holds for it (build-time
     * packed weights the module reads, e.g. KILN_PREP_LOWBIT_W): then the runtime hands it over in
     * kiln_kctx.prepared (host memory, read-only, valid while the engine lives) and the inputs the blob
     * replaces need no data. NULL: never. */
    bool (*reads_blob)(kiln_backend *be, const kiln_node *n, const void *blob, size_t size);
    /* After supports(): can the layer run on these inputs (shapes, broadcasts, attribute values
     * seen with the data)? false: the runtime runs it on the host instead. Reads dims only. */
    bool (*accepts)(kiln_backend *be, const kiln_node *n, int n_in, const kiln_tensor *const *in);
    /* Device memory of this instance (freed blocks are cached for reuse by size). */
    kiln_status (*alloc)(kiln_backend *be, size_t n, void **p);
    void (*free)(kiln_backend *be, void *p);
    /* Device memory shared by instances (weights shared by the contexts of one engine): plain
     * allocations, not pooled by any instance. shared_free(NULL) frees nothing: it says that weights (device
     * copies or host data) went or may go away, so that forms of them cached by address are made again. */
    kiln_status (*shared_alloc)(kiln_backend *be, size_t n, void **p);
    void (*shared_free)(void *p);
    /* Copies through the instance's pinned staging buffer; both return when the copy is done. */
    kiln_status (*h2d)(kiln_backend *be, void *dst, const void *src, size_t n);
    kiln_status (*d2h)(kiln_backend *be, void *dst, const void *src, size_t n);
    /* One line: GPU name, compute capability, driver / runtime / cuDNN / cuBLASLt versions. */
    void (*describe)(kiln_backend *be, char *buf, size_t n);
    /* CUDA graphs (docs/CUDA.md): graph_begin starts capturing the instance's stream (stage_bytes of
     * pinned memory for the uploads made during the capture); while capturing, host<->device copies
     * and synchronizations fail (the runtime then runs the layers again without a capture), except
     * graph_h2d, which copies src into the capture's pinned memory (*staged: where, for the caller to
     * refresh before each launch) and records the upload. graph_end ends the capture: a launchable
     * graph, or an error (the capture is discarded). graph_launch runs it on the stream (in order with
     * later d2h); it fails when memory the graph uses was reallocated since (drop it). */
    /* An NHWC-held tensor (KILN_TENSOR_DEV_NHWC) in its ONNX layout: a device copy in out, freed
     * with `free` (its data) after use. */
    kiln_status (*canonical)(kiln_backend *be, const kiln_tensor *t, kiln_tensor *out);
    kiln_status (*graph_begin)(kiln_backend *be, size_t stage_bytes);
    kiln_status (*graph_h2d)(kiln_backend *be, void *dst, const void *src, size_t n, void **staged);
    kiln_status (*graph_end)(kiln_backend *be, void **graph);
    kiln_status (*graph_launch)(kiln_backend *be, void *graph);
    void (*graph_free)(kiln_backend *be, void *graph);
    /* Device time in ms of the last graph_launch (CUDA events around it; waits for it to end), or -1;
     * *compute_ms (may be NULL): the same without the uploads of the graph inputs that began it, or -1. */
    double (*graph_ms)(kiln_backend *be, double *compute_ms);
    /* Bytes of device memory holding weights in forms of this instance's own (FP8 / 4-bit weights,
     * channels-last filter copies, converted biases), beyond the shared copies of the graph's weights. */
    uint64_t (*own_weight_bytes)(kiln_backend *be);
    /* Since the instance was created: FP8 layers' activation quantizations run as passes of their own, FP8 layers
     * whose input the producing layer had written in FP8 beside its output (feeds, docs/CUDA.md), layer outputs held
     * only in E4M3, and exact GELUs run as cuBLASLt's tanh form (kiln_device_stats, same order). */
    void (*fp8_counts)(kiln_backend *be, unsigned long long c[KILN_FP8_COUNTS]);
    /* Device tactics (core/devtac.h, docs/CUDA.md "Tactics in the engine"): the choices the instance made by
     * timing on the GPU, or took from a tactics text. tactics_export: all of them as a tactics text whose signature
     * is describe()'s line, malloc()ed into *text (the caller frees it with free()), *n its length; *text NULL when
     * there are none. tactics_import: takes a text's choices for the layers it has yet to run, instead of timing
     * them: how many it read, or -1 when the text is of another signature (nothing taken). tactics_timed: how many
     * choices the instance timed itself so far. */
    kiln_status (*tactics_export)(kiln_backend *be, char **text, size_t *n);
    int (*tactics_import)(kiln_backend *be, const char *text, size_t n);
    int (*tactics_timed)(kiln_backend *be);
} kiln_devmod;

typedef const kiln_devmod *(*kiln_devmod_entry_fn)(void);

#endif
