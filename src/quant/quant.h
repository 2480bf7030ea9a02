/* Post-training quantization support: histogram threshold selection (calib.c), per-tensor statistics
 * (stats.c), calibration data sets (calib_data.c), calibration cache (calib_cache.c), hashing
 * (hash.c). May include ir, core and kiln.h only (scripts/layers.py). */
#ifndef KILN_QUANT_H
#define KILN_QUANT_H
#include "../ir/graph.h"

/* ---- threshold selection over a histogram of |x| (calib.c; pure functions) ----
 * h[0..nbins) counts |x| over [0, amax]: bin i holds [i*w, (i+1)*w), w = amax / nbins, the last bin
 * also holds amax. Each returns a clipping threshold T in [0, amax]; the INT8 scale is T / 127. */
#define KILN_CALIB_BINS 2048
#define KILN_CALIB_LEVELS 128   /* |q| in 0..127: the levels of symmetric INT8 */
/* Adds |x[i]| for the finite x[i] to h; values above amax go into the last bin. */
void kiln__hist_add(uint64_t *h, int nbins, double amax, const float *x, int64_t n);
double kiln__calib_minmax(const uint64_t *h, int nbins, double amax);
/* Smallest upper bin edge below which at least pct percent of the counts lie. */
double kiln__calib_percentile(const uint64_t *h, int nbins, double amax, double pct);
/* KL divergence minimisation (TensorRT's entropy calibrator, described in docs/CALIBRATION.md). */
double kiln__calib_entropy(const uint64_t *h, int nbins, double amax);
/* Threshold minimising the expected squared quantization error (values uniform inside a bin). */
double kiln__calib_mse(const uint64_t *h, int nbins, double amax);
/* Expected squared error, summed over h, of symmetric INT8 quantization with threshold t (a bin edge),
 * values uniform inside each bin: rounding error below t, clipping error above. */
double kiln__calib_sq_error(const uint64_t *h, int nbins, double amax, double t);
double kiln__calib_threshold(kiln_calib_method m, double param, const uint64_t *h, int nbins, double amax);
/* The same searches on the grid the value will be quantized on: `steps` grid steps over [lo, T]
 * (lo <= 0): 127 and 0 for symmetric int8 (the functions above), 255 and 0 for uint8 after a
 * Relu, 255 and lo for uint8 with a zero point; a threshold T <= -lo falls back to int8's grid
 * (the builder then uses int8, kiln__int8_act_params). Only mse depends on the grid. */
double kiln__calib_sq_error_grid(const uint64_t *h, int nbins, double amax, double t, int steps, double lo);
double kiln__calib_mse_grid(const uint64_t *h, int nbins, double amax, int steps, double lo);
double kiln__calib_threshold_grid(kiln_calib_method m, double param, const uint64_t *h, int nbins, double amax,
                                  int steps, double lo);
/* "entropy", "minmax", "percentile:P", "mse" (percentile's parameter printed canonically). */
void kiln__calib_method_str(kiln_calib_method m, double param, char *buf, size_t n);
/* INT8 scale of a threshold: t / 127, or 1 for t = 0 (an all-zero tensor is exact at any scale). */
float kiln__calib_scale(double t);

/* ---- activation ranges (range.c) ----
 * True and *lo when value v of g cannot be below lo, by what produces it (Relu, Clip, Sigmoid,
 * HardSigmoid, Softmax, Softplus, HardSwish, x * Sigmoid(x), x * k * Clip(x + c, 0, m), Gelu),
 * through ops that move or average values, Mul / Div by a positive scalar constant, Add / Sub of
 * a scalar constant, and the Q -> DQ pairs of the builder's int8 step. */
bool kiln__value_lower_bound(const kiln_graph *g, int v, float *lo);
/* The grid of the int8 step for value v (for kiln__calib_threshold_grid): 255 steps from
 * min(lo, 0) when v has a bound lo (uint8), else 127 steps from 0 (symmetric int8). */
void kiln__calib_grid(const kiln_graph *g, int v, int *steps, double *lo);

/* ---- hashing (hash.c: XXH3 from Debian's libxxhash) ---- */
uint64_t kiln__hash64(const void *p, size_t n, uint64_t seed);
/* Hash of a tensor's dtype, shape and data. */
uint64_t kiln__tensor_hash(const kiln_tensor *t);

/* ---- per-tensor statistics over the float values of a graph (stats.c) ---- */
typedef struct kiln_calib_stats {
    int n;                /* tracked values (graph inputs and top-level node outputs) */
    int *slot;            /* per value id: index into the arrays below, or -1 */
    int *value;           /* per slot: value id */
    bool *seen;           /* per slot: observed as a float tensor at least once */
    double *amax;         /* per slot: max |x| over the finite values (pass 1) */
    uint64_t *hist;       /* per slot: KILN_CALIB_BINS counts of |x| over [0, amax] (pass 2) */
    int64_t *nonfinite;   /* per slot: NaN / Inf values skipped */
    int pass;             /* 1: amax, 2: histograms */
} kiln_calib_stats;
kiln_status kiln__stats_init(kiln_calib_stats *s, const kiln_graph *g);
void kiln__stats_free(kiln_calib_stats *s);
/* Records tensor t as value v (ignored unless v is tracked and t is float). */
kiln_status kiln__stats_add(kiln_calib_stats *s, int v, const kiln_tensor *t);

/* ---- calibration data: a directory of .npy files batched along axis 0 (calib_data.c) ---- */
typedef struct kiln_calib_sample {
    int n_inputs;
    char **path;          /* per model input */
    int64_t rows;         /* dim 0, equal for every input */
    kiln_tensor *meta;    /* per input: dtype and shape (no data) */
    uint64_t hash;
} kiln_calib_sample;
typedef struct kiln_calib_set {
    int n_inputs, n;
    kiln_calib_sample *s;   /* sorted by (shape, content hash): any file order gives this order */
    uint64_t hash;          /* of the sorted per-sample hashes */
    int64_t rows;
} kiln_calib_set;
/* One-input models: every *.npy in dir; several inputs: NAME_KEY.npy for each input NAME, a
 * sample being the files of one KEY. Each file is read (sizes checked) and hashed. */
kiln_status kiln__calib_set_open(const char *dir, int n_inputs, const char *const *names, kiln_calib_set *out);
void kiln__calib_set_free(kiln_calib_set *set);
/* Content hash of one sample (its tensors in input order). */
uint64_t kiln__calib_sample_hash(const kiln_tensor *ts, int n);

/* ---- calibration cache (calib_cache.c) ---- */
typedef struct kiln_calib_table {
    int n;
    char **name;
    float *scale, *amax;
    uint64_t model_hash, data_hash;
    int64_t rows;
    char method[64];
} kiln_calib_table;
kiln_status kiln__calib_cache_write(const char *path, const kiln_calib_table *t);
/* Reads the cache at path into t. *exists = false (and KILN_OK) when there is no file. A cache
 * whose header does not match (model hash, method, kiln version; data hash unless data_known is
 * false) or that is not a well-formed cache is refused with a message and left untouched. */
kiln_status kiln__calib_cache_read(const char *path, uint64_t model_hash, bool data_known, uint64_t data_hash,
                                   const char *method, kiln_calib_table *t, bool *exists);
/* The same on the NUL-terminated text[0..len) of a cache (modified in place); path is for messages. */
kiln_status kiln__calib_cache_parse(const char *path, char *text, size_t len, uint64_t model_hash, bool data_known,
                                    uint64_t data_hash, const char *method, kiln_calib_table *t);
void kiln__calib_table_free(kiln_calib_table *t);
/* Quoted name: "..." with \\, \" and \xNN for bytes outside printable ASCII (round-trips any name). */
void kiln__calib_quote(FILE *f, const char *s);

#endif
