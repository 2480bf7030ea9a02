/* The CUDA backend's shared state and helpers (module-internal). */
#ifndef KILN_BACKEND_CUDA_INTERNAL_H
#define KILN_BACKEND_CUDA_INTERNAL_H
#include "cuda_module.h"
#include "../../core/devtac.h"
#include "kernels.h"
#include <cublasLt.h>
#include <cudnn.h>
#include <string.h>
#include <time.h>

typedef struct cu_block {
    void *p;
    size_t n;
} cu_block;

/* Per-layer state (descriptors, chosen algorithms) for one node at one input shape. */
typedef struct cu_state {
    const kiln_node *node;
    int64_t key[24];
    void *st;
    void (*destroy)(void *st);
} cu_state;

#define CU_FP8_KEPT 4   /* quantized activations kept at once (cu_be.fp8_kept) */
#define CU_FP8_STORED 8 /* outputs held only as E4M3 at once (cu_be.fp8_stored) */
enum { CU_ATTN_FEED = 0, CU_ATTN_PIECES = 1, CU_ATTN_ROWS = 2 };   /* cu_be.attn_store */

typedef struct cu_be {
    kiln_backend base;             /* base.state == this */
    const kiln_devmod_host *host;
    int device;
    bool tf32;
    bool poison;                   /* KILN_CUDA_POISON=1: fresh device memory is filled with 0xFF (NaN) */
    kiln_dtype force_act;          /* KILN_CUDA_ACT=fp16|bf16: every float activation in that storage (tests) */
    kiln_dtype fp8_out;            /* KILN_CUDA_FP8_OUT=fp32|fp16|bf16: FP8 GEMMs' output storage (FP16) */
    kiln_dtype int8_out;           /* KILN_CUDA_INT8_OUT=fp32|fp16|bf16: INT8 layers' float outputs (float32) */
    int fp8_fast_accum;            /* cuBLASLt's FP8 fast accumulation: 1 (the default) in FP8 MatMul / Gemm layers,
                                    * 2 (KILN_CUDA_FP8_FAST_ACCUM=1) in FP8 1x1 convolutions as GEMMs too, 0 (=0) none */
    bool fp8_feed;                 /* producers write FP8 layers' inputs beside their outputs (KILN_CUDA_FP8_FEED=0:
                                    * off) */
    int fp8_lt_gelu;               /* an E4M3-stored GELU output (FP8 storage) written by cuBLASLt's GEMM itself, GELU in
                                    * its epilogue (tanh form): 2 (the default) for exact and tanh GELU, 1
                                    * (KILN_CUDA_FP8_LT_GELU=tanh) for tanh GELU only, 0 (=0) never (cuda_fp8.c) */
    int nhwc;                      /* half 2-D convolutions channels-last from this batch size on (KILN_CUDA_NHWC) */
    bool profile;                  /* KILN_CUDA_PROFILE=1: per-op GPU time, printed to stderr at the end */
    bool profile_layers;           /* KILN_CUDA_PROFILE=layers: also each layer's time of the first profiled run */
    cudaEvent_t prof[2];
    double *op_ms;                 /* [KILN_OP_COUNT] */
    long *op_n;
    char (*op_name)[32];
    long runs;                     /* synchronize calls (top-level runs); the profile skips the first 3 */
    double part_ms[8];             /* profile of layers' parts: [0..3) Attention's QK^T, softmax, PV; [4..6) the
                                    * FP8 GEMMs' activation quantization and GEMM (+ epilogue) */
    cudaEvent_t part_ev[4];
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cudnnHandle_t dnn;
    void *ws;                      /* workspace shared by the layers (used in stream order) */
    size_t ws_size;
    void *pinned;                  /* host staging for copies: two halves, used in turn */
    size_t pinned_size;
    cudaEvent_t staged[2];         /* recorded after each half's last copy */
    int *bad;                      /* device flag for out-of-range Gather indices */
    cu_block *pool;                /* freed device blocks kept for reuse */
    int n_pool, cap_pool;
    cu_block *live;                /* open-addressing map of live blocks: pointer -> size */
    int n_live, cap_live;
    cu_state *states;
    int n_states, cap_states;
    /* CUDA graph capture (cuda_graph.c) */
    bool capturing;
    bool unverified;              /* KILN_CUDA_UNVERIFIED=1: also code no GPU has run yet (none at the moment) */
    kiln_status cap_status;        /* the first failure during the capture */
    char *cap_stage;               /* pinned memory of the capture's uploads */
    size_t cap_stage_size, cap_used;
    unsigned mem_gen;              /* bumped when memory a graph may use is freed (workspace, cached blocks) */
    /* fused half convolutions through cuDNN's graph API (cuda_conv_graph.c) */
    bool conv_graph;               /* KILN_CUDA_CONV_GRAPH unset or not "0" */
    bool conv_verbose;             /* KILN_CUDA_CONV_GRAPH=2: convolution tactics and graph choices on stderr */
    bool conv_smallc;              /* half convolutions over < 8 channels by kiln's kernel (KILN_CUDA_SMALLC != 0) */
    bool fused_attn;               /* half attention in one kernel (off: KILN_CUDA_FUSED_ATTN=0) */
    int attn_grid;                 /* its grid (cuk_attn_opts): KILN_CUDA_ATTN_GRID=N blocks, =jobs one a job */
    int attn_store;                /* its output (KILN_CUDA_ATTN_STORE): CU_ATTN_FEED 16-byte pieces and the FP8 feed
                                    * where marked (unset), CU_ATTN_PIECES no feed (=pieces), CU_ATTN_ROWS from
                                    * registers, no feed (=rows) */
    int lt_candidates;             /* cuBLASLt heuristic candidates timed per GEMM (KILN_CUDA_GEMM_CANDIDATES, 8) */
    /* where choosing the convolutions' cuDNN engines spent its time (KILN_CUDA_CONV_GRAPH=2 prints it at the end) */
    double cg_heur_s, cg_fin_s, cg_time_s;
    int cg_configs, cg_plans;
    uint64_t own_weight_bytes;     /* device memory of weights in this instance's own forms (FP8, 4-bit) */
    /* Quantized activations kept for the next FP8 layers that read the same device data with the same scale
     * (cuda_fp8.c): BERT's Q, K and V GEMMs read one tensor; a ResNet block's input is read by its first
     * convolution and its downsampling one, with the first one's feed written between. An entry is valid until a
     * layer's output overlaps its data or anything else writes device memory (copies, graphs: cu_fp8_forget). */
    struct cu_fp8_kept {
        bool valid;
        bool fresh;                /* written by the layer now running beside its own output (a feed) */
        bool feed;                 /* written by its producer (cu_fp8_fed), not by an FP8 layer */
        const void *src;
        size_t bytes;              /* of src */
        float scale;
        int fdt;
        unsigned long long used;   /* when last made or read (b->fp8_clock): the oldest is replaced first */
        kiln_tensor q;             /* E4M3, numel bytes (scratch of this instance) */
    } fp8_kept[CU_FP8_KEPT];
    struct cu_fp8_kept fp8_stored[CU_FP8_STORED];   /* outputs held only as E4M3 (q: their own bytes) */
    int fp8_pin;                   /* 1 + the entry the running layer reads (never replaced by its feed), 0: none */
    int fp8_new;                   /* 1 + the entry cu_fp8_feed made for the running layer's output, 0: none */
    unsigned long long fp8_clock;
    unsigned long long fp8_passes, fp8_fed, fp8_held;   /* kiln_devmod.fp8_counts */
    unsigned long long fp8_lt_gelu_n;   /* exact GELUs run as cuBLASLt's tanh form (cuda_fp8.c), kiln_devmod.fp8_counts */
    struct cu_tc *tc;              /* timed choices (device tactics, cuda_tcache.c), or NULL (out of memory) */
    struct cu_cg **cg;             /* plans per configuration */
    int n_cg, cap_cg;
    /* device time of the last CUDA graph launch (events around it, cuda_graph.c) */
    cudaEvent_t launch_ev[3];      /* before the graph's uploads, after them (the compute starts), after the graph */
    bool launch_timed;
    char desc[256];
} cu_be;

static inline cu_be *cu_of(const kiln_backend *be) { return (cu_be *)be->state; }

/* Seconds of a monotonic clock (the tactic timing's own accounting) */
static inline double cu_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

kiln_status cu_err(const cu_be *b, kiln_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Error prefixed with the node (op and name). */
kiln_status cu_kerr(const cu_be *b, const kiln_kctx *ctx, kiln_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
kiln_status cu_check(const cu_be *b, cudaError_t e, const char *what);
kiln_status cu_check_dnn(const cu_be *b, cudnnStatus_t e, const char *what);
kiln_status cu_check_lt(const cu_be *b, cublasStatus_t e, const char *what);

kiln_status cu_alloc(cu_be *b, size_t n, void **p);
void cu_free(cu_be *b, void *p);
/* The shared workspace, grown to at least n bytes. */
kiln_status cu_workspace(cu_be *b, size_t n, void **p);
/* Output i of the layer on the device: its arena slot when the runtime has one, else device memory. */
kiln_status cu_out(cu_be *b, kiln_kctx *ctx, int i, kiln_dtype dt, int ndim, const int64_t *dims);
/* Output i as a FLOAT32 tensor held in storage sdt (FLOAT32, FLOAT16 or BFLOAT16: the DEV_F16 / DEV_BF16
 * flags); other dtypes are their own storage. */
kiln_status cu_out_s(cu_be *b, kiln_kctx *ctx, int i, kiln_dtype dt, kiln_dtype sdt, int ndim, const int64_t *dims);
/* Output i with the dtype and storage of x. */
kiln_status cu_out_like(cu_be *b, kiln_kctx *ctx, int i, const kiln_tensor *x, int ndim, const int64_t *dims);
/* Storage dtype of a device tensor (FLOAT16 / BFLOAT16 for half-held float32), its element size, and
 * the kernels' code for a float storage (enum cuk_fdt; -1 for other dtypes). */
kiln_dtype cu_sdt(const kiln_tensor *t);
size_t cu_tes(const kiln_tensor *t);
int cu_fdt(kiln_dtype sdt);
/* The storage of a layer's float outputs: the forced one (KILN_CUDA_ACT), else the half storage of the
 * first input in mask held in half, else FLOAT32. */
kiln_dtype cu_act_sdt(const cu_be *b, const kiln_kctx *ctx, uint32_t mask);
/* x (a float32 tensor) in storage sdt: x itself, or a converted copy in *tmp (then tmp->data is set: free
 * it with cu_tmp_free after the layer's kernels are queued). Non-float tensors are returned as they are. */
kiln_status cu_as(cu_be *b, const kiln_tensor *x, kiln_dtype sdt, kiln_tensor *tmp, const kiln_tensor **out);
/* x (4-D) in NHWC (nhwc) or in its ONNX layout: x itself or a transposed copy in *tmp (free it
 * with cu_tmp_free). */
kiln_status cu_relayout(cu_be *b, const kiln_tensor *x, bool nhwc, kiln_tensor *tmp, const kiln_tensor **out);
static inline bool cu_is_nhwc(const kiln_tensor *t) { return t && (t->flags & KILN_TENSOR_DEV_NHWC); }
/* an 8-bit integer type (the INT8 layers' activations and zero points) */
static inline bool cu_is_q8(kiln_dtype t) { return t == KILN_DT_UINT8 || t == KILN_DT_INT8; }
/* d's x strides (xsn, xsc, xsh, xsw, elements) for the 4-D x as it is held: channels-last or NCHW */
static inline void cu_conv_x_strides(const kiln_tensor *x, cuk_conv_desc *d)
{
    int64_t C = x->dims[1], H = x->dims[2], W = x->dims[3];
    if (cu_is_nhwc(x)) {
        d->xsc = 1; d->xsw = C; d->xsh = W * C; d->xsn = H * W * C;
    } else {
        d->xsw = 1; d->xsh = W; d->xsc = H * W; d->xsn = C * H * W;
    }
}
/* A half storage by name ("fp16" / "bf16": an environment variable's or an engine attribute's value), else def. */
static inline kiln_dtype cu_half_dt(const char *name, kiln_dtype def)
{
    return name && !strcmp(name, "fp16") ? KILN_DT_FLOAT16 : name && !strcmp(name, "bf16") ? KILN_DT_BFLOAT16 : def;
}
/* Bumped whenever a shared (weight) block is freed: caches of transformed weights check it. */
unsigned long cu_weights_gen(void);
/* Scratch device tensor not owned by the runtime (freed with cu_tmp_free). */
kiln_status cu_tmp(cu_be *b, kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *dims);
void cu_tmp_free(cu_be *b, kiln_tensor *t);

/* Layer state for (node, key), or NULL. A node keeps one state per key[0] (a slot: layers with
 * several library calls use one each); a new key replaces the slot's old state. */
void *cu_state_get(cu_be *b, const kiln_node *n, const int64_t *key, int nkey);
kiln_status cu_state_put(cu_be *b, const kiln_node *n, const int64_t *key, int nkey, void *st, void (*destroy)(void *));
/* A float32 scalar v of the layer in device memory (a scale cuBLASLt / cuDNN read there), kept in state slot `slot`
 * and rewritten when v changes: *out; NULL (and KILN_OK) while capturing a CUDA graph before it was made, since its
 * copy cannot be captured -- the caller decides (an error, or another path). */
kiln_status cu_layer_scalar(cu_be *b, const kiln_kctx *ctx, int slot, float v, const float **out);

/* Maps a node's fused activation to a kernel activation; false if unknown. */
bool cu_fused_act(const cu_be *b, const kiln_node *n, int *act, float *alpha, float *beta);
int64_t cu_numel(const kiln_tensor *t);
/* s[d] = the element stride of dim d of a contiguous tensor of these dims */
void cu_contig_strides(int ndim, const int64_t *dims, int64_t *s);
size_t cu_es(kiln_dtype dt);
/* Normalizes axis for rank r; false when out of range. */
bool cu_axis(int64_t axis, int r, int *out);
/* Output shape of a multidirectional broadcast of n tensors; false if incompatible. */
bool cu_broadcast(int n, const kiln_tensor *const *ts, int *ndim, int64_t *dims);
/* Fills sh (dims = out dims, str[k] = strides of ts[k] over them); false if rank > CUK_MAX_DIMS. */
bool cu_shape_of(int n, const kiln_tensor *const *ts, int ndim, const int64_t *dims, cuk_shape *sh);
/* Reads host integer input i (int64 or int32) into v (up to cap values); returns the count or -1. */
int cu_host_ints(const kiln_kctx *ctx, int i, int64_t *v, int cap);

/* Window geometry of Conv / pooling over the spatial dims of x (rank 2 + nsp): kernel k, strides s,
 * dilations d, begin / end pads and output sizes, from the node's attributes (auto_pad, ceil_mode). */
typedef struct cu_geom {
    int nsp;
    int64_t k[3], s[3], d[3], pb[3], pe[3], out[3];
} cu_geom;
kiln_status cu_geometry(cu_be *b, const kiln_kctx *ctx, const kiln_tensor *x, const int64_t *kernel, bool ceil_ok,
                        cu_geom *g);

/* While capturing a CUDA graph: records what cannot be captured (the capture will fail) and returns an
 * error for it. */
kiln_status cu_not_in_capture(cu_be *b, const char *what);
kiln_status cu_graph_begin(kiln_backend *be, size_t stage_bytes);
kiln_status cu_graph_h2d(kiln_backend *be, void *dst, const void *src, size_t n, void **staged);
kiln_status cu_graph_end(kiln_backend *be, void **graph);
kiln_status cu_graph_launch(kiln_backend *be, void *graph);
void cu_graph_free(kiln_backend *be, void *graph);
double cu_graph_ms(kiln_backend *be, double *compute_ms);

/* Milliseconds of one call of run(arg) on the module's stream: the median of 3 after a warm-up, or < 0 when a call
 * returns false (an error it leaves is cleared). Tactic timing: cuDNN graph candidates, FP8 convolution kernels. */
float cu_time_median3(cu_be *b, bool (*run)(void *arg), void *arg);
/* Profile mark k of a layer with parts (KILN_CUDA_PROFILE): call with k = 0 .. n in order; part i's time
 * adds to part_ms[base + i]. */
void cu_part_mark(cu_be *b, int base, int k, int n);

/* A half 2-D convolution as one cuDNN operation graph (cuda_conv_graph.c): y = relu?(conv(x, w) + bias?
 * + residual?), logical NCHW dims, channels-last when nhwc; fp8: x and w are E4M3 and the convolution's
 * sum is multiplied by a float32 scalar s first (y = relu?(s * conv(x, w) + bias? + residual?), channels-last
 * only); feed: the graph also writes yq = E4M3(clamp(y * inv, +-448)) (the next FP8 layer's input, inv a float32
 * scalar: 1 / its activation scale) from y's float32 value. Zero it before filling it (compared bytewise). */
typedef struct cu_cg_key {
    int32_t ty, bias_ty;           /* cudnnDataType_t of (x, w unless fp8,) residual, y; of the bias */
    int32_t nhwc, bias, res, relu, fp8, feed;
    int64_t xd[4], wd[4], yd[4], pad[2], str[2], dil[2];
} cu_cg_key;
typedef struct cu_cg cu_cg;
/* *k zeroed, then a convolution's geometry: data type ty (cudnnDataType_t), layout, x / w / y dims, begin pads,
 * strides, dilations (g); nothing fused (the callers set bias / res / relu / fp8 / feed) */
void cu_cg_key_init(cu_cg_key *k, int32_t ty, bool nhwc, const int64_t xd[4], const int64_t wd[4],
                    const int64_t yd[4], const cu_geom *g);
/* The plan of configuration k (made on first use: the engine timed on the operands ptr = x, w, bias,
 * residual, y, s, inv, yq: CU_CG_OPERANDS pointers, NULL where k has none); *out NULL when no engine takes it
 * (remembered). */
#define CU_CG_OPERANDS 8
kiln_status cu_cg_get(cu_be *b, const cu_cg_key *k, const void *const *ptr, cu_cg **out);
kiln_status cu_cg_run(cu_be *b, const cu_cg *g, const void *const *ptr);
void cu_cg_free_all(cu_be *b);

/* FP8 GEMM layers (cuda_fp8.c): whether node n is one (kiln_wq / kiln_aq "fp8", its activation scale in
 * *ascale), whether the FP8 GEMM takes these operands (else the layer runs on the CPU), whether the engine's
 * CPU blob of such a layer is one this module runs from, and its run. */
bool cu_fp8_layer(const cu_be *b, const kiln_node *n, float *ascale);
bool cu_fp8_accepts(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in);
bool cu_fp8_reads_blob(const cu_be *b, const kiln_node *n, const void *blob, size_t size);
kiln_status cu_fp8_run(cu_be *b, kiln_kctx *ctx);
/* The storage of an FP8 layer's output (x its input); cu_fp8_act: *q, A's first numel values quantized to E4M3
 * with scale s (A's layout as it is), kept from an earlier layer or made now; valid while the layer runs. */
kiln_dtype cu_fp8_out_sdt(const cu_be *b, const kiln_tensor *x);
kiln_status cu_fp8_act(cu_be *b, const kiln_tensor *A, int64_t numel, float s, const kiln_tensor **q);
/* Drops the entry cu_fp8_act gave the running layer (its source a temporary copy) */
void cu_fp8_unpin(cu_be *b);
/* FP8 storage: y (channels-last, its float storage's buffer) now holds its E4M3 bytes with scale s, nothing else
 * (KILN_TENSOR_DEV_E4M3 set); cu_fp8_stored: those bytes of t and their scale, or NULL (not held so: an error for a
 * tensor with the flag). cu_fp8_act finds them for an FP8 layer's input. */
void cu_fp8_store(cu_be *b, kiln_tensor *y, float s);
const uint8_t *cu_fp8_stored(cu_be *b, const kiln_tensor *t, float *s);
/* FP8 convolutions (cuda_conv_fp8.c): the operands it takes (one group, 2-D, channels multiples of 16) and the
 * run (cuDNN graph: E4M3 x and w channels-last, scale, bias, residual, ReLU fused). cu_conv_accepts /
 * cu_conv_geom: the float convolution's checks and geometry (cuda_conv.c). */
bool cu_fp8_conv_accepts(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in);
kiln_status cu_fp8_conv_run(cu_be *b, kiln_kctx *ctx);
bool cu_conv_accepts(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in);
kiln_status cu_conv_geom(cu_be *b, const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w, cu_geom *g2);
/* 1x1 convolutions as cuBLASLt GEMMs (cuda_conv_gemm.c): whether the geometry is one (1x1 filter wd, stride 1, no
 * padding, one group), the KILN_CUDA_CONV_GEMM mode (-1 never, 1 always where it fits, 0 timed per layer), and the
 * GEMM over channels-last x [M, C] and the KRSC filter [K, C] (FP8: E4M3 both, *scale the combined scale). */
#define CU_CONV_GEMM_SLOT 70
typedef struct cu_conv_gemm_args {
    kiln_dtype sdt;   /* the output's (and residual's) storage */
    bool fp8;
    const float *scale;
    int64_t M, C, K;
    const void *x, *w, *res, *bias;   /* bias: float32 [K] or NULL */
    bool bias_w;                      /* the bias is a weight (its converted copy is kept) */
    void *y;
    bool relu;
} cu_conv_gemm_args;
bool cu_conv_gemm_fits(const int64_t *wd, const cu_geom *g, int64_t group);
int cu_conv_gemm_mode(void);
kiln_status cu_conv_gemm(cu_be *b, const kiln_kctx *ctx, const cu_conv_gemm_args *a);
/* Drop the kept quantized activations (see cu_be.fp8_kept); cu_fp8_wrote: after a layer (st its result), when it
 * failed or one of its outputs overlaps their source (a view of it, a shape op's output on the same data, is not a
 * write; nor is the feed the layer wrote beside its output) */
void cu_fp8_forget(cu_be *b);
void cu_fp8_wrote(cu_be *b, const kiln_kctx *ctx, kiln_status st);
/* Feeds: a layer whose output an FP8 layer quantizes next (the builder's KILN_ATTR_FP8_FEED, its scale) writes the
 * E4M3 copy in its own kernel. cu_fp8_feed: the buffer for the copy of output y (numel bytes) and its scale, or NULL
 * (no feed: off, not marked, y not float storage, no memory); after queuing the kernel that writes it,
 * cu_fp8_fed makes it a kept quantized activation of y (the FP8 layers reading y find it); a feed not fed is
 * dropped after the layer (cu_fp8_wrote). */
uint8_t *cu_fp8_feed(cu_be *b, const kiln_kctx *ctx, const kiln_tensor *y, float *scale);
void cu_fp8_fed(cu_be *b, const kiln_tensor *y, float scale);
/* 4-bit weight-only layers (cuda_fp4.c): NVFP4 / MXFP4 / INT4 weights with FP16 activations (*fmt: enum
 * cuk_qfmt), and Gathers over 4-bit embedding tables; whether the engine's CPU blob of such a layer is one this
 * module runs from. cu_fp4_gather runs such a Gather (the op a cu_fp4_layer Gather runs instead of the table's). */
bool cu_fp4_layer(const cu_be *b, const kiln_node *n, int *fmt);
bool cu_fp4_accepts(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in);
bool cu_fp4_reads_blob(const cu_be *b, const kiln_node *n, const void *blob, size_t size);
kiln_status cu_fp4_run(cu_be *b, kiln_kctx *ctx);
kiln_status cu_fp4_gather(cu_be *b, kiln_kctx *ctx);

/* The op tables of each file. */
typedef kiln_status (*cu_op_fn)(cu_be *b, kiln_kctx *ctx);
typedef struct cu_op {
    kiln_op op;
    cu_op_fn fn;
    /* dtype / attribute check (query) and shape check (accepts); NULL = anything */
    bool (*supports)(const kiln_bk_query *q);
    bool (*accepts)(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in);
    uint32_t host_inputs;          /* inputs read on the host */
} cu_op;
extern const cu_op cu_ops_basic[];
extern const cu_op cu_ops_shape[];
extern const cu_op cu_ops_nn[];
extern const cu_op cu_ops_conv[];
extern const cu_op cu_ops_gemm[];
extern const cu_op cu_ops_upsample[];
extern const cu_op cu_ops_int8[];
extern const cu_op cu_ops_convpool[];   /* cuda_convpool.c */
/* The instance's timed choices (cuda_tcache.c, core/devtac.h): opened with the GPU and library versions'
 * signature when the instance is created (and the KILN_CUDA_TIMING_CACHE file's choices, if set), closed (the file
 * written back if something was timed) when it is destroyed. cu_tc_get: the choice recorded for (kind, the n bytes
 * of key), -1 if none; cu_tc_put records one just timed; import / export: an engine's tactics text (import: the
 * number of choices read, -1 when of another signature); timed: how many choices this instance timed. */
void cu_tc_open(cu_be *b, const char *signature);
int cu_tc_get(const cu_be *b, char kind, const void *key, size_t n);
void cu_tc_put(cu_be *b, char kind, const void *key, size_t n, int choice);
int cu_tc_import(cu_be *b, const char *text, size_t n);
kiln_status cu_tc_export(cu_be *b, char **text, size_t *n);
int cu_tc_timed(const cu_be *b);
void cu_tc_close(cu_be *b);

/* float32 for inputs in mask (bits), from the query's dtypes */
bool cu_q_f32(const kiln_bk_query *q, uint32_t mask);
#endif
