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

/* Shape specs "NAME:1x3x224x224,..." (shapespec.c: the one parser for every option taking them). */
#define CLI_MAX_SHAPES 64
typedef struct cli_shape {
    char *name;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
} cli_shape;
typedef struct cli_shape_set {
    int n;
    cli_shape v[CLI_MAX_SHAPES];
} cli_shape_set;
/* Prints one error naming `opt` and returns false on any malformed spec (s is then empty). */
bool cli_shapes_parse(const char *opt, const char *spec, cli_shape_set *s);
const cli_shape *cli_shapes_find(const cli_shape_set *s, const char *name);
void cli_shapes_free(cli_shape_set *s);

typedef struct cli_input_opts {
    const cli_shape_set *shapes;   /* --shapes, or NULL */
    int batch;                     /* > 0: overrides dim 0 of every input */
    int n_files;
    const char **file_names, **file_paths;
} cli_input_opts;
/* Opens an engine file, or builds an engine in memory from an ONNX model. */
kiln_status cli_open_engine(const char *path, kiln_engine_t *e);
/* Fills ins[]/names[] (engine input order) with file data or random data of the right shape.
 * A --input or --shapes name that is not an input of the model is an error. */
kiln_status cli_make_inputs(kiln_engine_t e, const cli_input_opts *o, kiln_tensor *ins, const char **names);

/* Strict option values (args.c): the whole text must be a number in [lo, hi] (finite, no trailing
 * text); otherwise an error naming `opt` is printed and false returned. */
bool cli_parse_ll(const char *text, long long lo, long long hi, long long *out);   /* silent */
bool cli_int_arg(const char *opt, const char *text, long long lo, long long hi, long long *out);
bool cli_int_opt(const char *opt, const char *text, int lo, int hi, int *out);
bool cli_num_arg(const char *opt, const char *text, double lo, double hi, double *out);
#define CLI_MAX_THREADS 1024
/* --input NAME=FILE into o (at most cap): malformed, or a NAME given twice, is an error. */
bool cli_input_arg(const char *cmd, char *spec, cli_input_opts *o, int cap);

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

/* Loads a tensor from .npy or ONNX TensorProto .pb (by extension). */
kiln_status cli_load_tensor(const char *path, kiln_tensor *t);
/* Output files of a run (outnames.c): an injective map from output names to file names. */
char **cli_output_files(int n, const char *const *names);
kiln_status cli_write_output_index(const char *dir, int n, const char *const *names, char *const *files);
/* Terminal-safe text for printing model-supplied strings (a ring of 8 buffers: valid until 8 more calls). */
const char *cli_esc(const char *s);
/* A JSON string; jansson refuses text that is not UTF-8, which is then stored escaped. */
json_t *cli_json_str(const char *s);
void cli_print_escaped_lines(const char *text);
/* Prints the error; returns the exit status (1, or 130 after SIGINT / cancellation). */
int cli_die(kiln_status st, const char *what);
/* Installs a SIGINT handler that cancels the runs in progress (kiln_cancel_all). */
void cli_catch_sigint(void);
bool cli_interrupted(void);
#endif
