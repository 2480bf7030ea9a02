/* Shared declarations of the kiln command-line tool: one file per subcommand. */
#ifndef KILN_CLI_H
#define KILN_CLI_H
#include "kiln/kiln.h"
#include <jansson.h>
#include <stdio.h>

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_conformance(int argc, char **argv);
int cmd_ops(int argc, char **argv);
int cmd_build(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

/* Shape specs "NAME:1x3x224x224,..." through the library's one parser (kiln_shapes_parse):
 * on a malformed spec prints its error naming the option `opt` and returns false (*s NULL). */
bool cli_shapes_parse(const char *opt, const char *spec, kiln_shapes_t *s);

/* argv[i] is no argument the command takes: prints "kiln CMD: missing value for OPT" when it is the last argument
 * and one of value_opts (NULL-terminated: the options that take a value), else "unknown option" (or "unexpected
 * argument" for one not starting with '-'); returns 2. */
int cli_bad_arg(const char *cmd, int argc, char **argv, int i, const char *const *value_opts);
#define CLI_CALIB_VALUE_OPTS "--calib", "--calib-cache", "--calib-method", "--calib-images", "--preprocess"

/* --help / -h: every command prints its usage to stdout and exits 0. */
bool cli_is_help(const char *arg);
int cli_help(const char *usage);

typedef struct cli_input_opts {
    kiln_shapes_t shapes;          /* --shapes, or NULL */
    int batch;                     /* > 0: overrides dim 0 of every input */
    int n_files;
    const char **file_names, **file_paths;
} cli_input_opts;
/* Whether path is read as an engine: it starts with the engine magic, or it is named *.kiln (an empty or damaged
 * engine file then gets the engine loader's message, not the ONNX parser's "model has no graph"). */
bool cli_is_engine_path(const char *path);
/* Opens an engine file, or builds an engine in memory from an ONNX model. */
/* load_flags: KILN_ENGINE_LOAD_* (--no-mmap: KILN_ENGINE_LOAD_COPY); ignored for a model, which is built */
kiln_status cli_open_engine(const char *path, unsigned load_flags, kiln_engine_t *e);
/* Same, a model built for `device` (kiln_build_options.device). */
kiln_status cli_open_engine_for(const char *path, unsigned load_flags, kiln_device device, kiln_engine_t *e);
/* Fills ins[]/names[] (engine input order) with file data or the library's synthetic data: 0, else the exit
 * status after printing the error. A --input or --shapes name that is not an input of the model is an error (1);
 * --shapes or --batch contradicting an --input file's shape is a usage error (2). */
int cli_make_inputs(kiln_engine_t e, const cli_input_opts *o, kiln_tensor *ins, const char **names);
/* The --input file `t` read for input `name` against o->shapes and o->batch: true (the conflict printed) when either
 * gives it other dims, which would be silently ignored since the file's shape is what runs. */
bool cli_input_conflicts(const cli_input_opts *o, const char *name, const kiln_tensor *t);
/* kiln build --device cuda (device_check.c): runs e once on the GPU and warns about the layers that would fall
 * back to the CPU; 1 when strict and some did, or nothing could be checked (no GPU, no shapes), else 0. */
int cli_device_check(kiln_engine_t e, bool strict);

/* Strict option values (args.c): the whole text must be a number in [lo, hi] (finite, no trailing
 * text); otherwise an error naming `opt` is printed and false returned. */
bool cli_parse_ll(const char *text, long long lo, long long hi, long long *out);   /* silent */
bool cli_int_arg(const char *opt, const char *text, long long lo, long long hi, long long *out);
bool cli_int_opt(const char *opt, const char *text, int lo, int hi, int *out);
bool cli_num_arg(const char *opt, const char *text, double lo, double hi, double *out);
#define CLI_MAX_THREADS 1024
/* --device cpu|cuda, --tf32, --strict-device (run, bench, verify): 1 when argv[*i] (and its value, *i
 * advanced) was one of them, 0 when not, -1 after printing a usage error ("kiln CMD: ...") */
typedef struct cli_device_opts {
    kiln_device device;
    unsigned flags;   /* KILN_DEVICE_ALLOW_TF32 | KILN_DEVICE_STRICT */
} cli_device_opts;
int cli_device_arg(const char *cmd, int argc, char **argv, int *i, cli_device_opts *d);
/* After parsing: --tf32 / --strict-device without --device cuda is a usage error (printed; false). */
bool cli_device_flags_ok(const char *cmd, const cli_device_opts *d);
#define CLI_DEVICE_USAGE \
    "  --device cuda  run the layers on the NVIDIA GPU (needs libkiln_cuda.so and a GPU; docs/CUDA.md)\n" \
    "  --tf32         on cuda: FP32 convolutions / GEMMs may use TF32 tensor cores\n" \
    "  --strict-device  on cuda: a layer without a CUDA kernel is an error instead of a CPU fallback\n"
/* --input NAME=FILE into o (at most cap): malformed, or a NAME given twice, is an error. */
bool cli_input_arg(const char *cmd, char *spec, cli_input_opts *o, int cap);

/* --calib-images DIR --preprocess SPEC (calib_images.c): arguments, then the images as a
 * temporary .npy directory set as o->data_dir (printing any error), removed by cli_images_done. */
typedef struct cli_images {
    const char *dir, *spec;
    char tmp[512], file[544];
} cli_images;
bool cli_images_arg(cli_images *im, int argc, char **argv, int *i);   /* consumed argv[*i] (and its value) */
bool cli_images_prepare(const char *cmd, cli_images *im, kiln_calib_options *o);
/* --calib DIR, --calib-cache FILE, --calib-method M, --calib-images DIR, --preprocess SPEC into o / im:
 * 1 when argv[*i] (and its value, *i advanced) was one of them, 0 when not, -1 after printing an
 * error ("kiln CMD: ...") for a bad method */
int cli_calib_arg(const char *cmd, kiln_calib_options *o, cli_images *im, int argc, char **argv, int *i);
void cli_images_done(cli_images *im);

/* An engine's precision as kiln bench reports it (precision_summary.c): `name` is the realized
 * precision of the layers the build gave a precision request ("fp16", "int8", ...; "mixed" when they
 * realize several; "fp32" when no layer had a request, "tf32" when, with tf32, some of them did use TF32);
 * `layers` lists the realized precision of every layer with its count, most first ("fp16 51, fp32 22"),
 * also as kinds[]. With tf32 (--tf32 on --device cuda) only the float32 convolutions and GEMMs that ran on the
 * GPU in context c (NULL: any) count as tf32. */
typedef struct cli_precision {
    char name[16], layers[256];
    struct { const char *name; int layers; } kinds[16];
    int nkinds;
} cli_precision;
void cli_precision_summary(kiln_engine_t e, kiln_context_t c, bool tf32, cli_precision *out);
/* The `half storage: N layers ...` line of a device run (kiln_device_stats.half_storage_layers) on stdout: only when
 * n > 0, or always with `always` (kiln inspect). */
void cli_print_half_storage(int n, bool always);

/* Latency statistics in bounded memory (latency.c): exact count/sum/min/max, percentiles from at
 * most LAT_MAX_SAMPLES stored samples (a uniform random sample once there are more). */
#define LAT_MAX_SAMPLES ((int64_t)1 << 20)
typedef struct lat_stats {
    double *s, sum, min, max;
    int64_t n, kept, cap;
    uint64_t rng;
} lat_stats;
bool lat_add(lat_stats *l, double v);   /* false when out of memory */
void lat_percentiles(lat_stats *l, double *p50, double *p90, double *p99);   /* sorts the sample */
void lat_free(lat_stats *l);

/* Output files of a run (outnames.c): an injective map from output names to file names. */
char **cli_output_files(int n, const char *const *names);
/* Writes DIR/outputs.json atomically; prints any error and returns the exit status (0 = ok). */
int cli_write_output_index(const char *dir, int n, const char *const *names, char *const *files);
/* Terminal-safe text for printing model-supplied strings (a ring of 8 buffers: valid until 8 more calls). */
const char *cli_esc(const char *s);
/* dims as "1x3x224x224" into buf (cap bytes; "" for rank 0); returns buf */
const char *cli_dims_text(int ndim, const int64_t *dims, char *buf, size_t cap);
/* Milliseconds of a monotonic clock (timings the commands print) */
double cli_now_ms(void);
/* A JSON string; jansson refuses text that is not UTF-8, which is then stored escaped. */
json_t *cli_json_str(const char *s);
void cli_print_escaped_lines(const char *text);
/* Prints the error; returns the exit status (1, or 130 after SIGINT / cancellation). */
int cli_die(kiln_status st, const char *what);
/* Installs a SIGINT handler that cancels the runs in progress (kiln_cancel_all). */
void cli_catch_sigint(void);
bool cli_interrupted(void);
#endif
