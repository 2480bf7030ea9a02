/* kiln serve: shared declarations of the KServe v2 / Triton-compatible HTTP server.
 * Everything under tools/kiln/serve/ uses only the public API (include/kiln/kiln.h); the build
 * compiles it without src/ on the include path so the boundary is enforced. */
#ifndef KILN_SERVE_H
#define KILN_SERVE_H
#include "kiln/kiln.h"
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define SV_NAME_MAX 128
#define SV_MAX_IO 32
#define SV_MAX_PREFERRED 16

/* ---- small helpers (util.c) ---- */
uint64_t sv_now_ns(void);
bool sv_is_file(const char *path);   /* a regular file (after symlinks) */
/* KServe datatype name ("FP32") of a kiln dtype, or NULL when KServe has none. */
const char *sv_dtype_kserve(kiln_dtype dt);
/* kiln dtype of a KServe datatype name; KILN_DT_STRING for BYTES, UNDEFINED if unknown. */
kiln_dtype sv_dtype_from_kserve(const char *s);
/* Triton config enum ("TYPE_FP32") <-> kiln dtype. */
kiln_dtype sv_dtype_from_triton(const char *s);
const char *sv_dtype_triton(kiln_dtype dt);
/* Model and version names: [A-Za-z0-9_.-], not starting with '.', at most SV_NAME_MAX-1 chars. */
bool sv_name_ok(const char *s);
/* Strict integer parse of the whole string within [lo, hi]. */
bool sv_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
uint64_t sv_fnv1a(uint64_t h, const void *p, size_t n);
float sv_half_to_float(uint16_t h);
uint16_t sv_float_to_half(float f);
float sv_bf16_to_float(uint16_t h);
uint16_t sv_float_to_bf16(float f);
/* Fills t (already allocated) with deterministic pseudo-random values suited to its dtype. */
void sv_fill_random(kiln_tensor *t, uint64_t *seed);
/* Allocates t->data for dtype/ndim/dims (zeroed); false on overflow or no memory. */
bool sv_tensor_alloc(kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *dims);

/* ---- config.pbtxt subset (pbtxt.c): text -> JSON object, every field an array of values ---- */
json_t *sv_pbtxt_parse(const char *text, char *err, size_t errlen);

/* ---- model configuration (config.c) ---- */
typedef struct sv_io {
    char name[SV_NAME_MAX];
    kiln_dtype dtype;
    int ndim;                     /* without the batch dimension when max_batch_size > 0 */
    int64_t dims[KILN_MAX_DIMS];  /* -1 = any */
} sv_io;

/* One input's range in one of the engine's optimization profiles (kiln_engine_profile_range), by config input. */
typedef struct sv_range {
    int profile, input, ndim;
    int64_t min[KILN_MAX_DIMS], max[KILN_MAX_DIMS];
} sv_range;

/* instance_group kind: KIND_AUTO (or none) runs where --device says, KIND_CPU / KIND_GPU force it. */
typedef enum sv_kind { SV_KIND_AUTO = 0, SV_KIND_CPU, SV_KIND_GPU } sv_kind;

typedef struct sv_config {
    char name[SV_NAME_MAX];
    int max_batch_size;           /* 0: the model does not batch (shapes are full shapes) */
    int n_inputs, n_outputs;
    sv_io inputs[SV_MAX_IO], outputs[SV_MAX_IO];
    bool dynamic_batching;
    int n_preferred;
    int preferred[SV_MAX_PREFERRED];
    int64_t max_queue_delay_us;
    bool sizes_given, delay_given;    /* from config.pbtxt; otherwise derived from the engine */
    int instance_count;
    sv_kind kind;                 /* instance_group kind: where the instances run */
    int threads_per_instance;
    char precision[8];            /* kiln: "fp32" (default), "fp16", "bf16" or "int8" */
    char calibration[SV_NAME_MAX];    /* kiln, int8: calibration data directory inside the model's */
    char calibration_method[32];  /* kiln, int8: as kiln calibrate --method (default percentile:99.99) */
    bool from_file;               /* a config.pbtxt existed */
    json_t *batching_info;        /* how batching was chosen (latency curve, reason) */
    /* the engine's optimization profiles (none: any shape): a set of inputs runs when it fits every range of one
     * profile. The scheduler never merges requests into a batch that fits none (sv_batch_fits). */
    int n_profiles, n_ranges;
    sv_range *ranges;
    int merge_max;                /* the most rows merged into one execution: max_batch_size, or the largest batch
                                   * the load-time probe ran where a larger one failed (autobatch.c) */
} sv_config;

/* The engine of version directory vdir of model directory mdir, for device dev: model.kiln as
 * is, or model.onnx built with cfg's precision (int8: calibrated on mdir/<cfg->calibration>) and
 * cached beside it, keyed by the model (its external data included), the build options, the
 * calibration data and kiln's version (engine.c). */
bool sv_open_engine(const char *mdir, const char *vdir, const sv_config *cfg, kiln_device dev, kiln_engine_t *e,
                    char *err, size_t errlen);

/* Reads DIR/config.pbtxt into cfg (defaults when absent). */
bool sv_config_read(const char *model_dir, const char *model_name, sv_config *cfg, char *err, size_t errlen);
/* Completes cfg from the engine (Triton's auto-complete) and checks that it agrees with it. */
bool sv_config_complete(sv_config *cfg, kiln_engine_t e, char *err, size_t errlen);
/* The device instances of cfg run on, given the server's --device. */
kiln_device sv_config_device(const sv_config *cfg, kiln_device server_default);
json_t *sv_config_json(const sv_config *cfg, kiln_device device);
void sv_config_free(sv_config *cfg);

/* ---- metrics (metrics.c) ---- */
typedef struct sv_metrics {
    atomic_ullong success, failure, inference_count, exec_count;
    atomic_ullong queue_us, input_us, infer_us, output_us;
} sv_metrics;

/* ---- requests and models ---- */
typedef struct sv_req {
    struct sv_req *next;
    kiln_tensor in[SV_MAX_IO];        /* in config input order; data owned by the request */
    kiln_tensor out[SV_MAX_IO];       /* results (data owned by the request) */
    int n_out;
    int64_t batch;                    /* rows along axis 0 (1 when the model does not batch) */
    uint64_t t_enqueue;
    kiln_status status;
    char err[512];
    void (*done)(struct sv_req *r, void *user);
    void *user;
} sv_req;
void sv_req_free(sv_req *r);

typedef struct sv_model {
    char name[SV_NAME_MAX];
    int64_t version;
    sv_config cfg;
    kiln_device device;               /* where its instances run */
    kiln_engine_t engine;
    atomic_int refs;
    sv_metrics metrics;
    /* scheduler (sched.c) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sv_req *head, *tail;
    bool stop;
    int n_threads;
    pthread_t *threads;
    kiln_context_t *ctxs;
} sv_model;

/* Starts cfg.instance_count execution contexts, each on its own thread. */
bool sv_sched_start(sv_model *m, char *err, size_t errlen);
/* Queues a validated request; r->done runs on an instance thread when it is finished. */
void sv_sched_submit(sv_model *m, sv_req *r);
/* Stops the instance threads (the queue must be empty: no references left) and frees contexts. */
void sv_sched_stop(sv_model *m);
/* Whether inputs shaped like `in` (config order), with `rows` rows along axis 0, fit one of the engine's
 * optimization profiles (always true for an engine without profiles). */
bool sv_batch_fits(const sv_config *c, const kiln_tensor *in, int64_t rows);
/* Runs requests of one batch now on context c (used by the scheduler and the load-time probe). */
kiln_status sv_run_batch(sv_model *m, kiln_context_t c, sv_req **rs, int n);

/* Derives preferred batch sizes and the queue delay from measured latencies (autobatch.c). */
void sv_autobatch(sv_model *m);

/* ---- repository (repo.c) ---- */
typedef struct sv_options {
    int threads;          /* per execution context; 0 = default */
    kiln_device device;   /* --device: where KIND_AUTO instances run */
    int64_t max_body;     /* bytes */
    bool verbose;
} sv_options;

typedef struct sv_repo sv_repo;
sv_repo *sv_repo_open(const char *root, const sv_options *o, char *err, size_t errlen);
void sv_repo_close(sv_repo *r);
/* Loads every model found in the repository; false if any failed (they stay listed as UNAVAILABLE). */
bool sv_repo_load_all(sv_repo *r);
/* HTTP status of the outcome (200, 400, 404, 500) with err filled. */
int sv_repo_load(sv_repo *r, const char *name, char *err, size_t errlen);
int sv_repo_unload(sv_repo *r, const char *name, char *err, size_t errlen);
json_t *sv_repo_index(sv_repo *r);
bool sv_repo_all_ready(sv_repo *r);
/* A reference to a ready model (version < 0: the newest), or NULL with the HTTP status in *status. */
sv_model *sv_repo_acquire(sv_repo *r, const char *name, int64_t version, int *status, char *err, size_t errlen);
void sv_model_release(sv_model *m);
/* Calls fn for every loaded model, with the repository locked. */
void sv_repo_foreach_model(sv_repo *r, void (*fn)(const sv_model *m, void *user), void *user);
/* Prometheus text for every loaded model into a malloc'd string (metrics.c). */
char *sv_metrics_text(sv_repo *r);
const sv_options *sv_repo_options(sv_repo *r);

/* ---- KServe v2 codec (codec.c) ---- */
/* Parses an infer request (JSON header + optional binary part) into r, validated against m.
 * Returns an HTTP status: 200 on success, 400 with err otherwise. *want_binary[i] tells, per
 * config output, whether it goes back binary; *wanted[i] whether it was requested at all. */
typedef struct sv_out_sel {
    bool wanted[SV_MAX_IO], binary[SV_MAX_IO];
    char *id;    /* the request's "id" in full (malloc'd; NULL when it has none): free with sv_out_sel_free */
} sv_out_sel;
void sv_out_sel_free(sv_out_sel *sel);
int sv_decode_infer(const sv_model *m, const char *body, size_t len, size_t header_len, sv_req *r, sv_out_sel *sel,
                    char *err, size_t errlen);
/* Encodes the response; *out is malloc'd, *json_len is the JSON header length (== *out_len when
 * nothing is binary). */
bool sv_encode_infer(const sv_model *m, const sv_req *r, const sv_out_sel *sel, char **out, size_t *out_len,
                     size_t *json_len, char *err, size_t errlen);
json_t *sv_model_metadata(const sv_model *m);
/* The elements of t as a flat JSON array (KServe "data"; non-finite floats become null; UINT64 values past
 * INT64_MAX, which jansson cannot hold as integers, as marks that sv_json_dumps writes as their digits). */
json_t *sv_tensor_json_data(const kiln_tensor *t);
/* json_dumps(j, JSON_COMPACT) with sv_tensor_json_data's UINT64 marks written as plain numbers (malloc'd). */
char *sv_json_dumps(const json_t *j);

/* ---- request Content-Encoding (encoding.c) ---- */
/* Decodes a request body sent with Content-Encoding `coding` in place: gzip (x-gzip), deflate (zlib, or raw
 * deflate) and identity; the decoded body is held to `limit` bytes. Returns an HTTP status: 200, 400 (a corrupt or
 * truncated stream), 413 (it inflates past limit), 415 (another coding), 500 (no memory), with err filled. */
int sv_content_decode(const char *coding, char **body, size_t *len, int64_t limit, char *err, size_t errlen);

/* ---- HTTP (http.c) ---- */
typedef struct sv_server sv_server;
sv_server *sv_http_start(sv_repo *repo, int port, int metrics_port, int threads, int64_t max_body, char *err,
                         size_t errlen);
/* Stops accepting, waits (at most timeout_s) for in-flight requests, then stops. */
void sv_http_drain_and_stop(sv_server *s, int timeout_s);
int sv_http_port(const sv_server *s);

int cmd_serve(int argc, char **argv);
int cmd_loadgen(int argc, char **argv);
#endif
