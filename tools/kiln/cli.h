/* Shared declarations of the kiln command-line tool: one file per subcommand. */
#ifndef KILN_CLI_H
#define KILN_CLI_H
#include "kiln/kiln.h"
#include <stdio.h>

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_conformance(int argc, char **argv);
int cmd_ops(int argc, char **argv);
int cmd_build(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

typedef struct cli_input_opts {
    const char *shapes;         /* "NAME:1x3x224x224,..." or NULL */
    int batch;                  /* > 0: overrides dim 0 of every input */
    int n_files;
    const char **file_names, **file_paths;
} cli_input_opts;
/* Opens an engine file, or builds an engine in memory from an ONNX model. */
kiln_status cli_open_engine(const char *path, kiln_engine_t *e);
/* Fills ins[]/names[] (engine input order) with file data or random data of the right shape. */
kiln_status cli_make_inputs(kiln_engine_t e, const cli_input_opts *o, kiln_tensor *ins, const char **names);

/* Loads a tensor from .npy or ONNX TensorProto .pb (by extension). */
kiln_status cli_load_tensor(const char *path, kiln_tensor *t);
/* Replaces characters unsafe in file names with '_'. */
void cli_safe_name(const char *in, char *out, size_t n);
/* Prints the error; returns the exit status (1, or 130 after SIGINT / cancellation). */
int cli_die(kiln_status st, const char *what);
/* Installs a SIGINT handler that cancels the runs in progress (kiln_cancel_all). */
void cli_catch_sigint(void);
bool cli_interrupted(void);
#endif
