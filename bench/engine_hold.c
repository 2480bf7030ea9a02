/* Loads an engine and holds it until stdin closes or a line arrives: bench/engine_load.sh reads
 * /proc/PID/smaps_rollup of two such processes to measure what a second process mapping the same
 * engine adds. Prints "loaded" once the engine is loaded (its weights verified, so every weight
 * page has been touched).   usage: engine_hold ENGINE [--no-mmap] */
#include "kiln/kiln.h"
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2 || (argc == 3 && strcmp(argv[2], "--no-mmap")) || argc > 3) {
        fprintf(stderr, "usage: engine_hold ENGINE [--no-mmap]\n");
        return 2;
    }
    kiln_engine_t e;
    if (kiln_engine_load_ex(argv[1], argc == 3 ? KILN_ENGINE_LOAD_COPY : KILN_ENGINE_LOAD_DEFAULT, &e) != KILN_OK) {
        fprintf(stderr, "engine_hold: %s\n", kiln_last_error());
        return 1;
    }
    printf("loaded\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        line[0] = 0;
    kiln_engine_free(e);
    return 0;
}
