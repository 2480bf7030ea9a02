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

/* Loads a tensor from .npy or ONNX TensorProto .pb (by extension). */
kiln_status cli_load_tensor(const char *path, kiln_tensor *t);
/* Replaces characters unsafe in file names with '_'. */
void cli_safe_name(const char *in, char *out, size_t n);
int cli_die(kiln_status st, const char *what);
#endif
