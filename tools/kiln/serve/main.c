/* kiln-serve: the HTTP server and its load generator, a program of their own so that the main
 * `kiln` binary does not load libmicrohttpd, libcurl and their TLS stacks (about 35 shared
 * libraries) at every start. `kiln serve ...` and `kiln loadgen ...` exec this program
 * (tools/kiln/main.c); it can also be run directly: `kiln-serve serve|loadgen ...`. */
#include "cmds.h"
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "serve"))
        return cmd_serve(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "loadgen"))
        return cmd_loadgen(argc - 1, argv + 1);
    fprintf(stderr, "usage: kiln-serve serve|loadgen [options]   (kiln-serve serve --help, kiln-serve loadgen --help)\n");
    return 2;
}
