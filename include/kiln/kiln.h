/*
 * kiln.h — the public C API of libkiln, an ONNX inference optimizer and runtime.
 *
 * Usage (error handling shortened):
 *
 *     kiln_model_t m;
 *     if (kiln_model_load("model.onnx", &m) != KILN_OK)
 *         fprintf(stderr, "%s\n", kiln_last_error());
 *     kiln_tensor in = { .dtype = KILN_DT_FLOAT32, .ndim = 4, .dims = {1,3,224,224}, .data = buf };
 *     const char *in_names[] = { kiln_model_input_name(m, 0) };
 *     kiln_tensor *outs; int nout;
 *     kiln_model_run(m, 1, in_names, &in, NULL, &nout, &outs);
 *     ... use outs[i] (owned by the caller) ...
 *     kiln_tensors_free(outs, nout);
 *     kiln_model_free(m);
 *
 * Every function returns a kiln_status (0 = ok, negative = error) unless it is a pure getter.
 * On error a human-readable message is available from kiln_last_error() (per thread) and is
 * also sent to the log callback. The library never exits or aborts on bad input.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARG = -1,  /* caller passed something wrong (NULL, bad name, bad shape) */
    KILN_ERR_NOMEM = -2,        /* allocation failed */
    KILN_ERR_IO = -3,           /* file could not be opened / read / written */
    KILN_ERR_PARSE = -4,        /* malformed model or data file */
    KILN_ERR_UNSUPPORTED = -5,  /* valid input that kiln does not implement */
    KILN_ERR_SHAPE = -6,        /* shapes are inconsistent */
    KILN_ERR_DTYPE = -7,        /* data types are inconsistent */
    KILN_ERR_LIMIT = -8,        /* a size limit was exceeded (absurd shapes, recursion) */
    KILN_ERR_INTERNAL = -9,     /* a bug in kiln */
    KILN_ERR_CANCELLED = -10    /* the run was cancelled (kiln_context_cancel, kiln_cancel_all) */
} kiln_status;

/* Element types. The numeric codes equal ONNX TensorProto.DataType so they can be
 * stored in files and compared with ONNX directly. */
typedef enum kiln_dtype {
    KILN_DT_UNDEFINED = 0,
    KILN_DT_FLOAT32 = 1,
    KILN_DT_UINT8 = 2,
    KILN_DT_INT8 = 3,
    KILN_DT_UINT16 = 4,
    KILN_DT_INT16 = 5,
    KILN_DT_INT32 = 6,
    KILN_DT_INT64 = 7,
    KILN_DT_STRING = 8,
    KILN_DT_BOOL = 9,
    KILN_DT_FLOAT16 = 10,
    KILN_DT_FLOAT64 = 11,
    KILN_DT_UINT32 = 12,
    KILN_DT_UINT64 = 13,
    KILN_DT_COMPLEX64 = 14,
    KILN_DT_COMPLEX128 = 15,
    KILN_DT_BFLOAT16 = 16,
    KILN_DT_FP8E4M3 = 17,      /* E4M3FN: no infinities, one NaN */
    KILN_DT_FP8E4M3FNUZ = 18,
    KILN_DT_FP8E5M2 = 19,
    KILN_DT_FP8E5M2FNUZ = 20,
    KILN_DT_UINT4 = 21,
    KILN_DT_INT4 = 22,
    KILN_DT_FP4E2M1 = 23,
    KILN_DT_COUNT
} kiln_dtype;

#define KILN_MAX_DIMS 8

/* A dense, C-order tensor. `data` is owned by whoever allocated it; tensors returned by
 * kiln (outputs) are owned by the caller and freed with kiln_tensors_free. */
typedef struct kiln_tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    void *data;
    size_t nbytes;
    uint32_t flags;   /* KILN_TENSOR_* bits; 0 for tensors the caller creates */
} kiln_tensor;
/* The tensor does not own `data` (e.g. weights that point into a memory-mapped engine): nothing
 * frees it through this tensor (kiln_tensors_free included) and it must not be written. */
#define KILN_TENSOR_BORROWED 1u

typedef struct kiln_model *kiln_model_t;

/* ---- errors and logging ---- */
const char *kiln_status_str(kiln_status s);
const char *kiln_last_error(void);   /* message of the last error on this thread ("" if none) */
void kiln_clear_last_error(void);
typedef enum kiln_log_level { KILN_LOG_ERROR, KILN_LOG_WARN, KILN_LOG_INFO, KILN_LOG_DEBUG } kiln_log_level;
typedef void (*kiln_log_fn)(kiln_log_level level, const char *msg, void *user);
void kiln_set_log_callback(kiln_log_fn fn, void *user);   /* NULL restores the default (silent) */

/* ---- allocator hooks (for embedding and failure-injection tests) ---- */
typedef struct kiln_allocator {
    void *(*malloc_fn)(size_t size, void *user);
    void *(*realloc_fn)(void *ptr, size_t size, void *user);
    void (*free_fn)(void *ptr, void *user);
    void *user;
} kiln_allocator;
/* NULL restores libc. Set it before any kiln object exists and keep it until the last one is freed: an object is
 * freed with the allocator that made it (changing it in between frees memory the other one allocated). */
void kiln_set_allocator(const kiln_allocator *a);
/* Largest single tensor kiln will allocate (default 8 GiB); protects against absurd shapes. */
void kiln_set_max_tensor_bytes(size_t bytes);
/* The CPU features kiln's kernels use on this host, space-separated, in a fixed order: "avx2 fma f16c avx512f
 * avx512dq avx512vnni avx512bf16 avx512vbmi amx-bf16 amx-int8", those present in that order ("" for the portable
 * kernels), after KILN_MAX_CPU_ISA's cap. AMX appears where the process was granted the tiles. Static storage. */
const char *kiln_cpu_isa(void);

/* ---- dtypes and tensors ---- */
const char *kiln_dtype_name(kiln_dtype dt);   /* "float32", ..., "?" */
size_t kiln_dtype_size(kiln_dtype dt);        /* bytes per element, 0 if sub-byte/unsupported */
int64_t kiln_tensor_numel(const kiln_tensor *t);
void kiln_tensors_free(kiln_tensor *ts, int n);  /* frees the data of each and the array */

/* ---- .npy files (NumPy format v1/v2, little-endian, C order) ---- */
kiln_status kiln_npy_read(const char *path, kiln_tensor *out);          /* out->data is owned by the caller (free with kiln_free) */
kiln_status kiln_npy_write(const char *path, const kiln_tensor *t);
/* ONNX TensorProto file (.pb), as used by the ONNX backend test suite */
kiln_status kiln_tensor_pb_read(const char *path, kiln_tensor *out);
void kiln_free(void *p);

/* ---- models ---- */
kiln_status kiln_model_load(const char *path, kiln_model_t *out);
kiln_status kiln_model_load_buffer(const void *buf, size_t len, const char *base_dir, kiln_model_t *out);
void kiln_model_free(kiln_model_t m);
int kiln_model_num_inputs(kiln_model_t m);
int kiln_model_num_outputs(kiln_model_t m);
const char *kiln_model_input_name(kiln_model_t m, int i);
const char *kiln_model_output_name(kiln_model_t m, int i);
/* Checks that every node has a kernel; on failure the message lists all unsupported nodes. */
kiln_status kiln_model_check_supported(kiln_model_t m);

/* Where layers run (docs/CUDA.md). KILN_DEVICE_CUDA needs the CUDA module (libkiln_cuda.so, next
 * to the executable or named by the KILN_CUDA_MODULE environment variable) and an NVIDIA GPU;
 * without them, choosing it is one clean KILN_ERR_UNSUPPORTED. */
typedef enum kiln_device { KILN_DEVICE_CPU = 0, KILN_DEVICE_CUDA = 1 } kiln_device;
#define KILN_DEVICE_ALLOW_TF32 1u   /* device flag: FP32 convolutions / GEMMs may use TF32 */
#define KILN_DEVICE_STRICT 2u       /* device flag: a layer without a device kernel is a run error (no CPU fallback) */

typedef struct kiln_run_options {
    int num_threads;   /* 0 = default (number of online CPUs, at most 64); the run uses threads of
                        * its own, so concurrent runs do not share or wait for each other's threads */
    kiln_device device;      /* KILN_DEVICE_CPU (0) by default */
    unsigned device_flags;   /* KILN_DEVICE_* flags */
} kiln_run_options;

/* Runs the model. Inputs are matched by name; every graph input without an initializer
 * must be given. On success *outputs is an array of *num_outputs tensors, in graph output
 * order, owned by the caller (kiln_tensors_free). */
kiln_status kiln_model_run(kiln_model_t m, int num_inputs, const char *const *input_names,
                           const kiln_tensor *inputs, const kiln_run_options *opts,
                           int *num_outputs, kiln_tensor **outputs);

/* ---- engines: build, save, load ---- */
typedef struct kiln_engine *kiln_engine_t;

/* Shape range of one input inside an optimization profile. */
typedef struct kiln_shape_range {
    const char *input;
    int ndim;
    int64_t min[KILN_MAX_DIMS], opt[KILN_MAX_DIMS], max[KILN_MAX_DIMS];
} kiln_shape_range;

typedef struct kiln_profile {
    int num_ranges;
    const kiln_shape_range *ranges;
} kiln_profile;

typedef struct kiln_build_options {
    bool no_optimize;              /* skip graph optimization passes */
    int num_profiles;              /* 0 = any shape the model accepts */
    const kiln_profile *profiles;
    const char *timing_cache;      /* path of a timing cache to read/update, or NULL */
    int num_threads;               /* for tactic timing; 0 = default */
    bool no_tactics;               /* skip tactic timing (default tactics) */
    bool want_report;              /* fill `report` */
    double run_budget_s;           /* time budget in seconds of each run the builder makes on its
                                    * own (shape recording; calibration with tactic timing):
                                    * 0 = default (60 s), < 0 = none. Past it kiln_build stops
                                    * with KILN_ERR_LIMIT (e.g. a Loop with a huge trip count). */
    char *report;                  /* out: with want_report, a text report of passes, tactics and
                                    * memory plan (free with kiln_free); NULL otherwise */
    /* Precision (docs/PRECISION.md, "Requested and realized precision"). Every layer a request
     * names runs in that precision or the build fails naming it (KILN_ERR_UNSUPPORTED), unless
     * precision_fallback allows it. NULL / 0 everywhere: fp32, no requests. */
    const char *precision;         /* "fp32", "fp16", "bf16" or "int8": requested for every Conv,
                                    * MatMul and Gemm with a constant weight (int8 keeps the first and the last of them in
                                    * fp32); NULL = fp32 */
    int num_layer_precisions;      /* rules "PATTERN:PRECISION" applied in order after `precision`
                                    * (PATTERN: a glob on node names and op types; a rule matching
                                    * no layer is an error) */
    const char *const *layer_precisions;
    bool precision_fallback;       /* build layers that cannot run as requested in what they can */
    const struct kiln_calib_options *calib;   /* int8 layers: calibration data, method and cache */
    char *precision_report;        /* out: text lines saying which layers were kept in fp32, each
                                    * fallback, and explicit Q/DQ layers left float -- set by any build
                                    * that has such lines, not only with precision options (NULL
                                    * otherwise; free with kiln_free) */
    kiln_device device;            /* the device the engine is for: KILN_DEVICE_CUDA keeps every weight
                                    * as the model has it (no CPU layer plan with packed weights; layers
                                    * that fall back to the CPU are prepared on the fly) */
    /* precision "auto" (docs/PRECISION.md, "Automatic mixed precision"): a planner measures each
     * candidate layer's sensitivity (the model-output error when only it is lowered) and what
     * lowering it saves in time, lowers the least sensitive first and checks the whole model
     * against accuracy_budget on the data (backing off when it is violated). Layers named by
     * --layer-precision rules are not planned. Also used by kiln_precision_debug. */
    const char *accuracy_budget;   /* a budget of kiln_budget_parse ("cosine>=0.99"); required */
    int num_allow;                 /* precisions the planner may lower to ("fp16", "bf16", "int8");
                                    * 0 = fp16, bf16, int8 */
    const char *const *allow;
    int auto_objective;            /* KILN_AUTO_SPEED (0): only layers whose kernel measured faster
                                    * in the lower precision; KILN_AUTO_SIZE: any layer the budget allows */
    const char *val_dir;           /* .npy data the accuracy is measured on (the layout of calibration
                                    * data); NULL = calib->data_dir */
    int auto_probe_batches;        /* batches of data each per-layer probe runs (0 = 1) */
    int auto_max_batches;          /* batches the whole-model checks run (0 = 8) */
    void (*auto_progress)(const char *line, void *user);   /* progress lines, or NULL */
    void *auto_progress_user;
    double auto_value;             /* out: the budget's metric the plan reaches (worst output) */
    double auto_speedup_est;       /* out: model time / time with the lowered layers' measured kernel
                                    * times (1 when nothing is lowered) */
    double auto_speedup;           /* out: measured whole-model speed-up of the plan (trial engines) */
    int auto_lowered, auto_candidates;   /* out: layers lowered / planned */
    bool budget_unmet;             /* out: the build failed because no plan meets the budget */
    const char *float_activations; /* "fp16" / "bf16" (device KILN_DEVICE_CUDA only): the float32 outputs of the
                                    * engine's INT8 layers (DequantizeLinear, QLinear layers with float outputs) are
                                    * held on the GPU in that format, so the float layers between INT8 layers run in
                                    * half storage as in FP16 engines (TensorRT's INT8 + FP16);
                                    * kiln_engine_layer_storage says which; the CPU keeps them float32. NULL / "fp32":
                                    * float32 */
} kiln_build_options;
#define KILN_AUTO_SPEED 0
#define KILN_AUTO_SIZE 1

/* Optimizes a model into an engine. The model is not modified. */
kiln_status kiln_build(kiln_model_t m, kiln_build_options *opts, kiln_engine_t *out);
kiln_status kiln_engine_save(kiln_engine_t e, const char *path);
kiln_status kiln_engine_serialize(kiln_engine_t e, void **buf, size_t *len);   /* buf: kiln_free */
/* Loads an engine file: it is memory-mapped read-only (private) and its weights are used in place
 * (no copy; processes that load the same engine share those pages), after the file's size,
 * section table and per-section checksums have been verified. Same as
 * kiln_engine_load_ex(path, KILN_ENGINE_LOAD_DEFAULT, out). The file must not be truncated while
 * the engine is alive (the process would get SIGBUS on the next access to a lost page); replacing
 * it (rename, as `kiln build` and kiln_engine_save do) is safe. See docs/ENGINE_FORMAT.md. */
kiln_status kiln_engine_load(const char *path, kiln_engine_t *out);
#define KILN_ENGINE_LOAD_DEFAULT 0u
#define KILN_ENGINE_LOAD_COPY 1u   /* read() the file into memory instead of mapping it */
kiln_status kiln_engine_load_ex(const char *path, unsigned flags, kiln_engine_t *out);
/* An engine already in memory: `buf` is only read during the call (the weights are copied into
 * one allocation owned by the engine), so the caller may free it as soon as this returns. */
kiln_status kiln_engine_load_buffer(const void *buf, size_t len, kiln_engine_t *out);
/* Gives back the caller's reference: each context made from e holds one too (contexts and the engine may be freed
 * in any order, from any thread; the engine is freed with the last). Using e itself after this call is not allowed. */
void kiln_engine_free(kiln_engine_t e);
int kiln_engine_num_inputs(kiln_engine_t e);
int kiln_engine_num_outputs(kiln_engine_t e);
const char *kiln_engine_input_name(kiln_engine_t e, int i);
const char *kiln_engine_output_name(kiln_engine_t e, int i);
/* Same contract as kiln_model_run; also checks shapes against the engine's profiles. */
kiln_status kiln_engine_run(kiln_engine_t e, int num_inputs, const char *const *input_names,
                            const kiln_tensor *inputs, const kiln_run_options *opts,
                            int *num_outputs, kiln_tensor **outputs);
/* ---- execution contexts: per-thread execution state over a shared engine ----
 * Several contexts of one engine may run at the same time from different threads; the engine
 * (graph and weights) is shared read-only, each context owns its activation arena and its worker
 * threads: contexts running at once each keep their full thread count (N contexts of T threads
 * use N*T threads; size T accordingly). One context runs one kiln_context_run at a time. */
typedef struct kiln_context *kiln_context_t;
kiln_status kiln_context_create(kiln_engine_t e, kiln_context_t *out);
void kiln_context_free(kiln_context_t c);   /* also ends the context's worker threads */
/* Threads the context's runs use, the calling thread included: 0 (the default) = the number of
 * online CPUs (at most 64). The workers start at the first run that needs them, sleep between
 * runs, and end with kiln_context_free (or when the count changes). */
void kiln_context_set_threads(kiln_context_t c, int num_threads);
/* Binds input `name` to a caller-owned tensor; it must stay valid until kiln_context_run returns. */
kiln_status kiln_context_set_input(kiln_context_t c, const char *name, const kiln_tensor *t);
/* Optionally binds output `name` to a caller-owned buffer of `capacity` bytes; run writes the
 * result there (and fails with KILN_ERR_SHAPE if it does not fit). */
kiln_status kiln_context_set_output_buffer(kiln_context_t c, const char *name, void *buf, size_t capacity);
kiln_status kiln_context_run(kiln_context_t c);
/* Cancels the context's run in progress (or, if none is, its next run): the run stops between
 * two layers or Loop/Scan iterations and returns KILN_ERR_CANCELLED. Async-signal-safe and
 * callable from any thread (e.g. a SIGINT handler). */
void kiln_context_cancel(kiln_context_t c);
/* Cancels every run in progress in this process (contexts, kiln_model_run, kiln_engine_run and
 * the builder's own runs); they return KILN_ERR_CANCELLED. Runs started afterwards are not
 * affected. Async-signal-safe. */
void kiln_cancel_all(void);
/* Output i of the last successful run (owned by the context, valid until the next run or free); after a failed run
 * its value is unspecified (it may be NULL or hold part of the failed run's results). */
const kiln_tensor *kiln_context_output(kiln_context_t c, int i);
/* Activation memory of the current plan: arena bytes, and the sum of all planned tensors. */
void kiln_context_memory(kiln_context_t c, size_t *arena_bytes, size_t *naive_bytes);
/* Runs the context's layers on device d (before its first run; KILN_DEVICE_CPU goes back to the
 * host). On a device the activation arena is device memory, the weights are copied there once,
 * inputs and outputs move through pinned buffers, and a layer without a device kernel runs on
 * the CPU with explicit copies (counted in kiln_device_stats). */
kiln_status kiln_context_set_device(kiln_context_t c, kiln_device d, unsigned flags);
typedef struct kiln_device_stats {
    kiln_device device;
    int device_layers;       /* layer runs on the device, last run */
    int host_layers;         /* layer runs on the host by design (shape arithmetic), last run */
    int fallback_layers;     /* layer runs on the host for want of a device kernel, last run */
    const char *fallback_ops;   /* comma-separated op types of those (owned by the context) */
    unsigned long long h2d_bytes, d2h_bytes;   /* copied during the last run */
    char description[256];   /* GPU, compute capability, driver and library versions */
    long graph_replays;      /* runs made by replaying a captured CUDA graph, so far */
    double graph_ms;         /* device time of the last run when it was a replay (CUDA events around the graph
                              * launch: the graph's own uploads of the inputs included, the host copies into
                              * pinned memory and of the outputs not); 0 otherwise */
    double graph_compute_ms; /* the same without the uploads of the graph inputs that begin the run (trtexec's
                              * "GPU compute time"; equal to graph_ms when no upload comes first); 0 otherwise */
    double replay_host_ms[3];   /* host wall time of the last run when it was a replay: copying the inputs into
                                 * pinned memory, launching and waiting for the GPU, copying the outputs back
                                 * (into new host tensors, half storage widened); 0 otherwise */
    unsigned long long weight_bytes;   /* device memory holding the engine's weights: the copies shared by its
                                        * contexts plus this context's own forms of them (FP8 / 4-bit weights,
                                        * channels-last filters); 0 on the CPU */
    unsigned long long fp8_quant_passes;   /* last run: FP8 layers' activation quantizations run as passes of their
                                            * own (a CUDA graph replay repeats its capture's) */
    unsigned long long fp8_fed_inputs;     /* last run: FP8 layers that read their input in FP8 as the producing
                                            * layer wrote it beside its output (feeds: docs/CUDA.md) */
    unsigned long long fp8_held_outputs;   /* last run: layer outputs held only in E4M3 (FP8 storage: docs/CUDA.md) */
    unsigned long long fp8_gelu_tanh;      /* last run: FP8 layers whose exact (erf) GELU ran as the tanh form in
                                            * cuBLASLt's epilogue, writing their E4M3-held output directly
                                            * (docs/CUDA.md; KILN_CUDA_FP8_LT_GELU=0 or =tanh: never) */
    int tactics_loaded;      /* device tactics (kernel choices timed on the GPU) the context took from its engine's
                              * DEVICE_TACTICS section: 0 when it has none, -1 when they were timed on other driver
                              * or library versions (then timed again; a warning says so) */
    int tactics_timed;       /* kernel choices the context's device has timed itself so far (0 when the engine's
                              * tactics covered every layer at the shapes run) */
    int half_storage_layers; /* last interpreted run (a replay repeats its capture's): device layers whose float32
                              * first output was held in FP16 or BF16 storage (float32 arithmetic, the value rounded
                              * to half when stored): an FP16 / BF16 engine's layers and, by default, the layers
                              * between an FP8 engine's GEMMs (docs/CUDA.md); kiln_context_layer_storage names them */
} kiln_device_stats;
kiln_status kiln_context_device_stats(kiln_context_t c, kiln_device_stats *out);
/* Device tactics (docs/CUDA.md, "Tactics in the engine"): the kernel choices context c's device has made by timing
 * on the GPU so far (cuDNN engine configurations of fused convolutions, FP8 convolution kernels, cuBLASLt or cuDNN
 * for 1x1 convolutions), with the GPU and driver / library versions they were timed on, are stored into e (c's
 * engine), replacing any it held; kiln_engine_save writes them (DEVICE_TACTICS section). A context of the loaded
 * engine set on a device takes them instead of timing (kiln_device_stats.tactics_loaded); on another GPU
 * kiln_context_set_device refuses the engine (rebuild it there), with other driver or library versions it times
 * again and warns. `kiln build --device cuda` stores them after running the engine at each profile's min and opt
 * shapes. Not while other contexts of e run. KILN_ERR_INVALID_ARG when c is not e's or has no device. */
kiln_status kiln_engine_store_device_tactics(kiln_engine_t e, kiln_context_t c);
/* The number of device tactics e holds (0: none) and, when signature is not NULL, the GPU and versions they were
 * timed on (NUL-terminated, cut to cap - 1 bytes; "" when none). */
int kiln_engine_device_tactics(kiln_engine_t e, char *signature, size_t cap);
/* Where layer i ran in the context's last interpreted run on its device (a CUDA graph replay repeats the run
 * it captured): on the device, on the host by design (shape arithmetic), or on the CPU for want of a
 * device kernel (control flow included). KILN_PLACE_NONE on a CPU context or before the first run. */
typedef enum kiln_layer_place {
    KILN_PLACE_NONE = 0,
    KILN_PLACE_DEVICE = 1,
    KILN_PLACE_HOST = 2,
    KILN_PLACE_FALLBACK = 3
} kiln_layer_place;
kiln_status kiln_context_layer_place(kiln_context_t c, int i, kiln_layer_place *out);
/* How layer i's first output was held on the device in the context's last interpreted run, where not as its dtype:
 * "fp16" / "bf16" (a float32 value in half storage: computed in float32, rounded to half when stored), "e4m3" (held
 * only in FP8 E4M3); "" otherwise (as its dtype, a layer run on the host, a CPU context, before the first run). The
 * storage the GPU realized, where kiln_engine_layer_storage is what the engine planned. */
kiln_status kiln_context_layer_storage(kiln_context_t c, int i, const char **storage);
/* Parses "cpu" / "cuda"; false for anything else. */
bool kiln_device_parse(const char *name, kiln_device *out);

/* True if the file starts with the engine magic. */
bool kiln_is_engine_file(const char *path);

/* ==== introspection and tooling (what the kiln CLI uses; every tool can) ====
 * Getters that return a kiln_status validate their arguments: a NULL handle or out pointer, or
 * an index out of range, gives KILN_ERR_INVALID_ARG with a message naming the function. Getters
 * that return a pointer return NULL (and set the error) on such arguments. Strings returned as
 * `const char *` belong to the object they came from and stay valid while it lives. */

/* ---- text and files ---- */
/* Terminal-safe copy of `in` into `out` (n bytes, always NUL-terminated when n > 0): control
 * characters, DEL, C1 controls and bytes that are not valid UTF-8 become \n, \t, \r or \xNN;
 * other text (valid UTF-8 included) is unchanged. Idempotent. Returns the length the whole
 * escaped text needs, excluding the NUL (like snprintf); out may be NULL when n is 0. */
size_t kiln_escape(char *out, size_t n, const char *in);
/* Reads a tensor file by extension: ".pb" an ONNX TensorProto, anything else .npy. */
kiln_status kiln_tensor_read(const char *path, kiln_tensor *out);
/* True when both paths exist and name the same file (same device and inode: other spellings,
 * hard links and symlinks count). */
bool kiln_same_file(const char *a, const char *b);
/* Replaces `path` atomically: the data goes to a temporary file in the same directory, is
 * fsync'ed and renamed over `path`, so readers see the old or the new file, never a partial one,
 * and a failure leaves the old file unchanged. A symlink is written through; an existing path that
 * is not a regular file is refused. */
kiln_status kiln_write_file_atomic(const char *path, const void *data, size_t len);
/* The same, streamed: open (fails early if `path` cannot be written), write any number of
 * times, then commit (replaces `path`; releases f also on failure) or abort (releases f, leaves
 * `path` untouched). A write error is reported by write or at the latest by commit. */
typedef struct kiln_atomic_file *kiln_atomic_file_t;
kiln_status kiln_atomic_file_open(const char *path, kiln_atomic_file_t *out);
kiln_status kiln_atomic_file_write(kiln_atomic_file_t f, const void *data, size_t len);
kiln_status kiln_atomic_file_commit(kiln_atomic_file_t f);
void kiln_atomic_file_abort(kiln_atomic_file_t f);
/* The threads a run asking for `requested` uses: requested > 0 is kept (capped at 64), 0 (or less)
 * the number of online CPUs. */
int kiln_resolve_threads(int requested);

/* ---- shape sets: input name -> dims ----
 * Parsed from the one spec syntax every tool takes, "NAME:1x3x224x224,NAME2:8x128": the last ':'
 * of an entry separates the name from the dims (names may contain ':'), "NAME:" alone is a scalar,
 * dims are decimal integers in [0, 2^63-1], at most KILN_MAX_DIMS of them, at most KILN_MAX_SHAPES
 * entries, each name once. A malformed spec fails with KILN_ERR_INVALID_ARG and one message of the form
 * "bad shape 'ENTRY': WHAT IS WRONG (want NAME:DIMS, e.g. input:1x3x224x224)". */
#define KILN_MAX_SHAPES 64
typedef struct kiln_shapes *kiln_shapes_t;
kiln_status kiln_shapes_parse(const char *spec, kiln_shapes_t *out);
kiln_status kiln_shapes_new(kiln_shapes_t *out);   /* an empty set, filled with kiln_shapes_add */
kiln_status kiln_shapes_add(kiln_shapes_t s, const char *name, int ndim, const int64_t *dims);
void kiln_shapes_free(kiln_shapes_t s);
int kiln_shapes_count(kiln_shapes_t s);                    /* 0 for NULL */
int kiln_shapes_find(kiln_shapes_t s, const char *name);   /* index of `name`, or -1 */
/* Entry i: its name (valid while s lives), rank, and dims (KILN_MAX_DIMS room); outs may be NULL. */
kiln_status kiln_shapes_get(kiln_shapes_t s, int i, const char **name, int *ndim, int64_t *dims);

/* ---- synthetic inputs (benchmarks, calibration, tests) ----
 * Deterministic for a given seed. Values: floating point uniform in [-1, 1); integers: token ids
 * (the input's name contains "ids" but not "type") small random values in [0, 100), type ids
 * (name contains "type") 0, every other integer or bool input (masks, sizes, indices, counts) 1.
 * The engine builder's calibration run uses the same rule. Other dtypes (strings, complex,
 * fp8/fp4, 4-bit integers) have no synthetic values: KILN_ERR_DTYPE. */
kiln_status kiln_tensor_fill_synthetic(kiln_tensor *t, const char *name, uint64_t seed);   /* seed 0 = default */
typedef struct kiln_synth_options {
    kiln_shapes_t shapes;   /* dims per input (NULL = none); naming a non-input is an error */
    int64_t batch;          /* > 0: replaces dim 0 of every input of rank >= 1 */
    uint64_t seed;          /* 0 = the default seed */
} kiln_synth_options;
/* Fills inputs[0 .. num_inputs) in input order. An entry whose dtype is not KILN_DT_UNDEFINED is
 * the caller's and kept (zero the array first); every other one gets a new tensor (free its data
 * with kiln_free) whose shape comes from o->shapes, else (engines) the first profile's opt
 * shapes, else the declared dims, a dynamic first dim defaulting to 1; any other dynamic dim is
 * an error asking for the shape. On error no new tensor is left allocated. o may be NULL. */
kiln_status kiln_model_synth_inputs(kiln_model_t m, const kiln_synth_options *o, kiln_tensor *inputs);
kiln_status kiln_engine_synth_inputs(kiln_engine_t e, const kiln_synth_options *o, kiln_tensor *inputs);

/* ---- value types: declared interface and inferred shapes ---- */
typedef enum kiln_io { KILN_IO_INPUT = 0, KILN_IO_OUTPUT = 1 } kiln_io;
typedef struct kiln_type_info {
    bool is_tensor;                        /* false: a sequence, map or optional value */
    kiln_dtype dtype;                      /* KILN_DT_UNDEFINED if unknown */
    int rank;                              /* -1 if unknown */
    int64_t dims[KILN_MAX_DIMS];           /* a dim's size, or -1 if it is not a known integer */
    const char *dim_names[KILN_MAX_DIMS];  /* for a dim that is not a known integer: its symbolic
                                            * name ("batch") or expression ("seq*2"), else NULL */
} kiln_type_info;
/* Declared type of input or output i (dims[d] -1 with dim_names[d] the dim_param, or NULL when
 * the file gives neither). A file may declare a rank above KILN_MAX_DIMS (kiln cannot run such a
 * model): out->rank is then that rank, dims/dim_names hold the first KILN_MAX_DIMS dims, and
 * kiln_*_io_dim gives every dim. */
kiln_status kiln_model_io_type(kiln_model_t m, kiln_io io, int i, kiln_type_info *out);
kiln_status kiln_engine_io_type(kiln_engine_t e, kiln_io io, int i, kiln_type_info *out);
/* Declared dim d (any d < rank) of input or output i: *size (-1 if not a fixed size) and *name
 * (the dim_param or NULL); outs may be NULL. */
kiln_status kiln_model_io_dim(kiln_model_t m, kiln_io io, int i, int d, int64_t *size, const char **name);
kiln_status kiln_engine_io_dim(kiln_engine_t e, kiln_io io, int i, int d, int64_t *size, const char **name);

/* Static shape inference over the whole model: every value's dtype and shape from the graph
 * inputs (their declared types, or the dims `given` names, which must be inputs and agree with
 * the declared rank and fixed dims; NULL = none) and the initializers only. Without `given`,
 * dims are symbolic (names and expressions such as "(h+31)/32"); inconsistent models fail with
 * KILN_ERR_SHAPE naming the node. The result lists graph inputs, every node output (node order)
 * and graph outputs, each value once. */
typedef struct kiln_value_shapes *kiln_value_shapes_t;
kiln_status kiln_model_infer_shapes(kiln_model_t m, kiln_shapes_t given, kiln_value_shapes_t *out);
int kiln_value_shapes_count(kiln_value_shapes_t v);   /* 0 for NULL */
kiln_status kiln_value_shapes_get(kiln_value_shapes_t v, int i, const char **name, kiln_type_info *type);
void kiln_value_shapes_free(kiln_value_shapes_t v);

/* ---- model information ---- */
const char *kiln_model_producer(kiln_model_t m);    /* "name version", "" if absent */
int64_t kiln_model_ir_version(kiln_model_t m);      /* -1 for NULL */
int kiln_model_num_nodes(kiln_model_t m);           /* top-level nodes; -1 for NULL */
int kiln_model_num_opsets(kiln_model_t m);          /* -1 for NULL */
/* Opset import i: its domain ("ai.onnx" for the default domain) and version. */
kiln_status kiln_model_opset(kiln_model_t m, int i, const char **domain, int64_t *version);
/* Initializers: total element count, bytes, and how many there are (outs may be NULL). */
kiln_status kiln_model_parameters(kiln_model_t m, int64_t *count, int64_t *bytes, int64_t *num_initializers);
typedef struct kiln_op_count { const char *op; int count; } kiln_op_count;
/* Nodes per op type, subgraphs included, most frequent first (ties by name): *ops is an array of
 * *num_ops entries (free with kiln_free; op names valid while m lives). */
kiln_status kiln_model_op_histogram(kiln_model_t m, int *num_ops, kiln_op_count **ops);
/* Nodes without a kernel: *count of them, and *text (free with kiln_free) describing each
 * unsupported op type with an example node ("" when none). */
kiln_status kiln_model_unsupported(kiln_model_t m, int *count, char **text);

/* ---- operators ---- */
int kiln_num_ops(void);                  /* registered operators, ids 0 .. kiln_num_ops()-1 */
const char *kiln_op_name(int op);        /* NULL if out of range */
bool kiln_op_has_kernel(int op);         /* false if out of range */

/* ---- engine information ---- */
int kiln_engine_num_profiles(kiln_engine_t e);   /* 0 for NULL */
int kiln_engine_profile_num_ranges(kiln_engine_t e, int profile);   /* -1 on a bad argument */
/* Range k of a profile; out->input is valid while e lives. */
kiln_status kiln_engine_profile_range(kiln_engine_t e, int profile, int k, kiln_shape_range *out);
const char *kiln_engine_manifest(kiln_engine_t e);   /* build manifest (JSON text), NULL if none */
/* The build-time memory plan: whether there is one, the arena it needs and what separate
 * allocations of every planned tensor would hold (outs may be NULL). */
kiln_status kiln_engine_memory_plan(kiln_engine_t e, bool *has_plan, size_t *arena_bytes, size_t *naive_bytes);

/* Layers: the engine's nodes in execution order. */
typedef struct kiln_layer_info {
    const char *name;          /* "" if unnamed */
    const char *op;            /* op type, e.g. "FusedConv" */
    const char *domain;        /* "ai.onnx" for the default domain */
    const char *fused_from;    /* comma-separated ONNX nodes fused into this layer, "" if none */
    const char *precision;     /* "fp32", "fp16", "int8", ... */
    const char *tactic;        /* chosen kernel variant, "ref" for the default */
    int num_inputs, num_outputs;
} kiln_layer_info;
int kiln_engine_num_layers(kiln_engine_t e);   /* -1 for NULL */
kiln_status kiln_engine_layer(kiln_engine_t e, int i, kiln_layer_info *out);
/* Layer i's requested precision ("" when the build asked for none) and realized precision (what
 * it computes in: "fp32", "fp16", "bf16", "int8"; fp16/bf16 on the CPU are weights stored in that
 * format and computed in fp32). Strings live as long as e. */
kiln_status kiln_engine_layer_precision(kiln_engine_t e, int i, const char **requested, const char **realized);
/* How a --device cuda engine holds layer i's output on the GPU when not as its dtype: "e4m3" when it is held only in
 * FP8 E4M3 with its readers' scale (FP8 storage, docs/CUDA.md "E4M3 storage"; the CPU emulation rounds it so too),
 * "fp16" / "bf16" for an INT8 layer's float32 output held in half (kiln_build_options.float_activations; the CPU
 * keeps it float32), else "". */
kiln_status kiln_engine_layer_storage(kiln_engine_t e, int i, const char **storage);

/* ---- context introspection ---- */
/* Call before the context's first run: that run then plans memory itself (instead of adopting
 * the engine's build-time plan) and records every value's dtype and shape, for
 * kiln_context_layer_type. */
kiln_status kiln_context_record_shapes(kiln_context_t c);
/* Type of input or output k of layer i as recorded by the context's last planning run (weights:
 * their constant shape; dtype KILN_DT_UNDEFINED if not recorded or the input is omitted).
 * *is_weight (may be NULL) tells whether it is a constant. dim_names are all NULL. */
kiln_status kiln_context_layer_type(kiln_context_t c, int i, kiln_io io, int k, kiln_type_info *out, bool *is_weight);
/* Per-layer profiling: runs the context `runs` times (inputs must be bound) and stores in
 * layer_ms[i] the mean time of layer i in milliseconds (kiln_engine_num_layers entries). Only those runs are timed
 * layer by layer (the context's later runs are not, and capture CUDA graphs again). */
kiln_status kiln_context_profile(kiln_context_t c, int runs, double *layer_ms);


/* ---- post-training calibration (implemented in src/runtime/api_calib.c and src/quant/) ----
 * Runs the model on calibration data and chooses, for every float activation (graph inputs and
 * node outputs, named as in the ONNX model), a clipping threshold and the symmetric INT8 scale
 * threshold / 127. docs/CALIBRATION.md describes the data layout, the methods and the cache. */
typedef enum kiln_calib_method {
    KILN_CALIB_ENTROPY = 0,     /* minimal KL divergence to the 128-level quantized histogram */
    KILN_CALIB_MINMAX = 1,      /* the largest |x| seen */
    KILN_CALIB_PERCENTILE = 2,  /* the given percentile of |x| (param, default 99.99) */
    KILN_CALIB_MSE = 3          /* minimal expected squared quantization error */
} kiln_calib_method;

/* Progress of a calibration: pass 1 (ranges) or 2 (histograms), samples done of total. */
typedef void (*kiln_calib_progress_fn)(int pass, int64_t done, int64_t total, void *user);

typedef struct kiln_calib_options {
    const char *data_dir;      /* directory of .npy files batched along axis 0: one-input models
                                * any *.npy, several inputs NAME_KEY.npy per input NAME (the files
                                * of one KEY are one sample); NULL: only a matching cache is used */
    kiln_calib_method method;
    double param;              /* percentile in (0, 100] for KILN_CALIB_PERCENTILE; 0 = 99.99 */
    const char *cache_path;    /* calibration cache to reuse or write, or NULL */
    int max_batch;             /* samples per run where the model's batch dim is dynamic; 0 = 32 */
    int num_threads;           /* 0 = default */
    kiln_calib_progress_fn progress;   /* or NULL */
    void *progress_user;
} kiln_calib_options;

typedef struct kiln_calibration *kiln_calibration_t;
/* Parses "entropy", "minmax", "percentile", "percentile:P" or "mse". */
kiln_status kiln_calib_method_parse(const char *text, kiln_calib_method *method, double *param);
/* Calibrates m. A cache whose header matches (model, data, method, kiln version) is reused without
 * running the model; a stale or foreign one is refused (KILN_ERR_INVALID_ARG) and left untouched;
 * otherwise the result is written to cache_path atomically. The same data in any file order gives
 * the same result and a byte-identical cache. */
kiln_status kiln_calibrate(kiln_model_t m, const kiln_calib_options *opts, kiln_calibration_t *out);
void kiln_calibration_free(kiln_calibration_t r);
int kiln_calib_num_tensors(kiln_calibration_t r);
const char *kiln_calib_tensor_name(kiln_calibration_t r, int i);   /* owned by r */
float kiln_calib_scale(kiln_calibration_t r, int i);      /* INT8 scale = threshold / 127 */
float kiln_calib_amax(kiln_calibration_t r, int i);       /* largest |x| seen */
/* "entropy", "minmax", "percentile:99.99", "mse" (owned by r). */
const char *kiln_calib_method_name(kiln_calibration_t r);
int64_t kiln_calib_num_samples(kiln_calibration_t r);    /* samples (rows along axis 0) calibrated on */
bool kiln_calib_from_cache(kiln_calibration_t r);         /* true when the cache was reused */
/* Model and data hashes of the result, as 16 hex digits (owned by r). */
const char *kiln_calib_model_hash(kiln_calibration_t r);
const char *kiln_calib_data_hash(kiln_calibration_t r);
/* Images as model input (calibration data from PNG / JPEG files: kiln calibrate / build
 * --calib-images DIR --preprocess SPEC; docs/CALIBRATION.md, "Images"). Decoded to 8-bit RGB
 * (PNG alpha composited over white), resized bilinearly (OpenCV's INTER_LINEAR: half-pixel
 * centres, no antialiasing) to height x width, or with keep_ratio to height x min(width,
 * ceil(height * w / h)) and zero padding on the right (PaddleOCR's resize_norm_img), then
 * (x / 255 - mean[c]) / std[c] per channel, in RGB or BGR order, NCHW or NHWC. */
typedef struct kiln_image_preprocess {
    int height, width;
    bool keep_ratio;
    bool bgr;                  /* channel 0 is blue (OpenCV's order) */
    bool nhwc;                 /* [N, H, W, 3] instead of [N, 3, H, W] */
    float mean[3], std[3];     /* of x / 255 per channel (after the bgr reordering) */
} kiln_image_preprocess;
/* "resize=HxW[,keep-ratio,pad][,mean=V[,V,V]][,std=V[,V,V]][,rgb|bgr][,nchw|nhwc]" (one value
 * applies to every channel; defaults mean 0, std 1, rgb, nchw; keep-ratio needs pad). */
kiln_status kiln_image_preprocess_parse(const char *spec, kiln_image_preprocess *out);
/* One image file into height * width * 3 floats in the layout of p (one row of the tensor). */
kiln_status kiln_image_read(const char *path, const kiln_image_preprocess *p, float *out);
/* Every *.png, *.jpg, *.jpeg of dir (names starting with '.' skipped), in file name order, as one
 * float32 tensor [N, 3, H, W] (or [N, H, W, 3]); out->data is freed with kiln_free. */
kiln_status kiln_images_read(const char *dir, const kiln_image_preprocess *p, kiln_tensor *out);
/* ---- end of calibration ---- */

/* ---- accuracy: a candidate's tensors against a reference (kiln verify; src/verify/, docs/VERIFY.md) ----
 * Both tensors must have the same shape and a float dtype (float32/16/64, bfloat16, fp8; converted
 * to double). Elements where either side is NaN or infinite are counted (and never pass a budget)
 * and left out of the other metrics. */
#define KILN_SNR_MAX_DB 300.0   /* the SNR reported for identical tensors (no error at all) */
typedef struct kiln_compare_stats {
    int64_t count;            /* elements compared (both finite) */
    int64_t nonfinite;        /* elements where the candidate or the reference is NaN or +-Inf */
    double max_abs;           /* max |c - r| */
    double max_rel;           /* max |c - r| / max(|r|, 1e-3 * max|r|): references below 0.1% of the
                               * tensor's largest magnitude count as that much (no blow-up near 0) */
    double mean_abs;          /* mean |c - r| */
    double cosine;            /* <c,r> / (|c| |r|); 1 when both are all zero, 0 when only one is */
    double snr_db;            /* 10 log10(sum r^2 / sum (c - r)^2), at most KILN_SNR_MAX_DB */
                              /* count 0 (no element where both are finite): the five metrics above are NaN */
    int64_t rows;             /* classifier-like (last dim >= 2): the rows compared, those where the
                               * reference has a finite value (elements / last dim when all do); else 0 */
    int64_t top1_agree;       /* rows whose arg max is the same */
    int64_t top5_agree;       /* rows where the reference's arg max is among the candidate's top 5 */
} kiln_compare_stats;
kiln_status kiln_compare(const kiln_tensor *reference, const kiln_tensor *candidate, kiln_compare_stats *out);

/* Several comparisons of one tensor (one per sample) summed up: the worst and the mean of each
 * metric over the samples that compared any element (count > 0; NaN when none did); agreement pooled
 * over all rows. Zero-initialize, then add. */
typedef struct kiln_compare_summary {
    int samples;
    int64_t nonfinite;                                   /* over all samples */
    kiln_compare_stats worst;                            /* max of errors, min of cosine / SNR; count summed */
    double mean_max_abs, mean_max_rel, mean_mean_abs, mean_cosine, mean_snr_db;
    int64_t rows, top1_agree, top5_agree;                /* pooled over the samples */
    int compared;                                        /* samples with count > 0 (the means' samples) */
} kiln_compare_summary;
void kiln_compare_summary_add(kiln_compare_summary *s, const kiln_compare_stats *one);

/* Accuracy budgets: "cosine>=0.999", "snr>=30db", "top1>=99.5%", "top5>=0.99", "maxrel<=1e-2",
 * "maxabs<=0.05", "meanabs<=1e-3" (spaces around the operator allowed; SNR in dB with or without
 * the "db" suffix; agreement as a percentage with '%' or a fraction in [0, 1] without). Similarity
 * metrics take >=, error metrics <=. A malformed budget fails with KILN_ERR_INVALID_ARG and one
 * message naming what is wrong. */
typedef enum kiln_metric {
    KILN_METRIC_COSINE, KILN_METRIC_SNR, KILN_METRIC_TOP1, KILN_METRIC_TOP5,
    KILN_METRIC_MAXREL, KILN_METRIC_MAXABS, KILN_METRIC_MEANABS
} kiln_metric;
typedef struct kiln_budget {
    kiln_metric metric;
    double threshold;      /* top1/top5 as a fraction; snr in dB */
} kiln_budget;
kiln_status kiln_budget_parse(const char *text, kiln_budget *out);
const char *kiln_metric_name(kiln_metric m);   /* "cosine", "snr", ... ("?" if out of range) */
/* The value a budget checks in a summary: the worst sample for cosine, SNR and the errors; the
 * pooled rate for top1/top5 (NaN when the tensor is not classifier-like, or nothing was compared).
 * *passes is false when the value misses the threshold, is NaN, or any element was not finite --
 * except for a tensor without any element (count 0 and no NaN/Inf in every sample: nothing to
 * compare, nothing wrong), which passes every budget. */
double kiln_budget_value(const kiln_budget *b, const kiln_compare_summary *s, bool *passes);

/* ---- debugging runs: every intermediate value (kiln verify --per-layer) ----
 * Runs a model or an engine like kiln_model_run / kiln_engine_run and calls `fn` after each node
 * of the top-level graph, in execution order, once for each float output it produced, given as a
 * float32 tensor valid only during the call. Quantized outputs are reported dequantized,
 * (q - zero_point) * scale with constant parameters: QuantizeLinear (inputs 1, 2; per tensor or
 * per axis), QLinearConv / QLinearMatMul / QGemm (y_scale, y_zero_point), and Reshape, Transpose, Flatten,
 * Squeeze, Unsqueeze, MaxPool, Identity, Slice of a per-tensor quantized input (same scale). A
 * non-OK return from fn stops the run with that status. Outputs of other types (shapes, indices,
 * masks) are not reported. With opts->device (KILN_DEVICE_CUDA) the layers run on the device and each value it
 * holds is copied to the host for fn (widened from FP16 / BF16 storage, back from channels-last); a value held
 * only in E4M3 on the device (FP8 storage) cannot be copied: fn gets it with value NULL. */
typedef struct kiln_value_view {
    const char *name;        /* the value's name in the graph */
    const char *node;        /* producing node (layer) name, "" if unnamed */
    const char *op;          /* its op type */
    const char *fused_from;  /* ONNX nodes fused into that layer, "" if none */
    const char *quantizes;   /* a dequantized QuantizeLinear output: the float value it quantizes
                              * (its input's name); NULL otherwise */
    const char *input;       /* the node's first input (NULL if none) */
    kiln_dtype dtype;        /* the dtype as produced (before conversion; not float: dequantized) */
    int layer;               /* index of the node in execution order */
    const kiln_tensor *value;   /* float32; NULL for a value a device holds only as E4M3 (not readable) */
} kiln_value_view;
typedef kiln_status (*kiln_value_fn)(void *user, const kiln_value_view *v);
kiln_status kiln_model_run_values(kiln_model_t m, int num_inputs, const char *const *input_names,
                                  const kiln_tensor *inputs, const kiln_run_options *opts,
                                  kiln_value_fn fn, void *user);
kiln_status kiln_engine_run_values(kiln_engine_t e, int num_inputs, const char *const *input_names,
                                   const kiln_tensor *inputs, const kiln_run_options *opts,
                                   kiln_value_fn fn, void *user);
/* ---- precision debugging (kiln debug precision; docs/PRECISION.md) ----
 * Lowers every candidate layer (Conv / MatMul / Gemm with a constant weight, not named by a
 * --layer-precision rule) to o->precision and finds a minimal set of them that must stay in
 * `keep` (e.g. "fp32") for the model to meet o->accuracy_budget on the data (o->val_dir, else the
 * calibration data): layers ordered by their sensitivity (the metric when only that layer is
 * lowered), the smallest such prefix found by bisection, then each kept layer tried lowered once
 * more (the set is 1-minimal: lowering any one of them violates the budget). When even keeping
 * every layer misses the budget, the result says so (met false). */
typedef struct kiln_precision_debug *kiln_precision_debug_t;
kiln_status kiln_precision_debug(kiln_model_t m, kiln_build_options *o, const char *keep, kiln_precision_debug_t *out);
typedef struct kiln_precision_debug_info {
    kiln_budget budget;
    double value_lowered;      /* the metric with every candidate lowered */
    double value_final;        /* with the minimal set kept */
    double value_baseline;     /* nothing lowered */
    bool met;                  /* value_final meets the budget */
    int num_layers;            /* candidates (kiln_precision_debug_layer) */
    int num_keep;              /* the minimal set */
    int builds;                /* trial engines built and measured */
} kiln_precision_debug_info;
typedef struct kiln_precision_debug_layer {
    const char *name, *op;     /* the ONNX node */
    double value;              /* the metric with only this layer lowered (NaN: not measured) */
    bool realizable;           /* the layer runs in the lower precision (else it stays in keep) */
    bool keep;                 /* in the minimal set */
    const char *rule;          /* "NAME:PREC" for --layer-precision reproducing the measured build, or NULL */
} kiln_precision_debug_layer;
kiln_status kiln_precision_debug_info_get(kiln_precision_debug_t r, kiln_precision_debug_info *out);
kiln_status kiln_precision_debug_layer_get(kiln_precision_debug_t r, int i, kiln_precision_debug_layer *out);
void kiln_precision_debug_free(kiln_precision_debug_t r);

/* ---- end of accuracy ---- */

#ifdef __cplusplus
}
#endif
#endif /* KILN_H */
