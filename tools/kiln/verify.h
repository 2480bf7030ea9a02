/* kiln verify (cmd_verify.c): a candidate engine or model against a float reference model. */
#ifndef KILN_CLI_VERIFY_H
#define KILN_CLI_VERIFY_H
#include "cli.h"

#define VERIFY_EXIT_BUDGET 3   /* a budget was violated, or a value was NaN / infinite */

/* The samples both sides run on (verify_inputs.c). */
typedef struct vsrc {
    kiln_engine_t e;
    int nin;
    const char **names;        /* engine input order */
    const cli_input_opts *io;  /* --shapes and --input files (synthetic samples) */
    uint64_t seed;             /* sample k uses seed + k */
    const char *dir;           /* --data, or NULL */
    int batch;                 /* --batch: rows per run from a data file (0 = the whole file) */
    /* state */
    kiln_tensor *owned, *group;
    char **keys;
    int nkeys, key;
    int64_t row;
} vsrc;
bool vsrc_open(vsrc *s);
/* Fills ins[0..nin) (valid until the next call) with sample `sample`: 1, 0 when the data is
 * exhausted, -1 on error, -2 on a usage error (printed; --shapes contradicting an --input file). */
int vsrc_next(vsrc *s, int sample, kiln_tensor *ins);
void vsrc_close(vsrc *s);

/* --per-layer (verify_layers.c): every float value of the candidate that also exists in the
 * reference, compared on one sample, in the reference's order. Prints a table (or fills `json`
 * when non-NULL). Returns false on error (printed). */
typedef struct vlayer_opts {
    double jump_db;          /* an SNR drop larger than this vs the previous value is a jump */
    int threads;
    kiln_device device;      /* where the candidate runs (its values copied to the host layer by layer) */
    unsigned device_flags;
} vlayer_opts;
bool verify_layers(kiln_engine_t e, kiln_model_t ref, int nin, const char **names, const kiln_tensor *ins,
                   const vlayer_opts *o, json_t *json);
#endif
