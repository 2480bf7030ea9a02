/* Entry points of `kiln serve` and `kiln loadgen` for the CLI dispatcher (tools/kiln/main.c). */
#ifndef KILN_SERVE_CMDS_H
#define KILN_SERVE_CMDS_H
int cmd_serve(int argc, char **argv);
int cmd_loadgen(int argc, char **argv);
#endif
