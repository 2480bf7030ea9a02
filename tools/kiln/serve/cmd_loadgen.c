#include "serve.h"
int cmd_loadgen(int argc, char **argv) { (void)argc; (void)argv; return 2; }
