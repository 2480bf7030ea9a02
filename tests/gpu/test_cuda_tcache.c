/* The CUDA module's timing cache (src/backend/cuda/cuda_tcache.c) on the host, no GPU: entries round-trip through
 * the file, two instances merge what they learned, a file of another signature is not read, malformed lines are
 * skipped, and without KILN_CUDA_TIMING_CACHE nothing is kept. Built where the CUDA module is (its headers). */
#include "backend/cuda/cuda_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char CACHE[64];   /* this process's file in /tmp */

int main(void)
{
    snprintf(CACHE, sizeof CACHE, "/tmp/kiln_test_cuda_tcache.%ld", (long)getpid());
    remove(CACHE);
    setenv("KILN_CUDA_TIMING_CACHE", CACHE, 1);
    static cu_be b1, b2, b3;
    cu_tc_open(&b1, "GPU X, cuDNN 1");
    int64_t k1[3] = {1, 2, 3}, k2[3] = {4, 5, 6};
    if (cu_tc_get(&b1, 'g', k1, sizeof k1) != -1) return 1;
    cu_tc_put(&b1, 'g', k1, sizeof k1, 7);
    cu_tc_put(&b1, 'm', k1, sizeof k1, 2);
    if (cu_tc_get(&b1, 'g', k1, sizeof k1) != 7 || cu_tc_get(&b1, 'm', k1, sizeof k1) != 2) return 2;
    cu_tc_open(&b2, "GPU X, cuDNN 1");   /* opened before b1 writes */
    cu_tc_put(&b2, 'g', k2, sizeof k2, 3);
    cu_tc_close(&b1);
    cu_tc_close(&b2);   /* merges b1's entries */
    cu_tc_open(&b3, "GPU X, cuDNN 1");
    if (cu_tc_get(&b3, 'g', k1, sizeof k1) != 7 || cu_tc_get(&b3, 'g', k2, sizeof k2) != 3 || cu_tc_get(&b3, 'm', k1, sizeof k1) != 2) return 3;
    cu_tc_close(&b3);
    static cu_be b4;
    cu_tc_open(&b4, "GPU Y, cuDNN 2");   /* another signature: not read (warning) */
    if (cu_tc_get(&b4, 'g', k1, sizeof k1) != -1) return 4;
    cu_tc_close(&b4);   /* nothing learned: the file stays */
    static cu_be b5;
    cu_tc_open(&b5, "GPU X, cuDNN 1");
    if (cu_tc_get(&b5, 'g', k1, sizeof k1) != 7) return 5;
    cu_tc_close(&b5);
    FILE *f = fopen(CACHE, "a");   /* garbage lines are skipped */
    fputs("zz\ng nothex 3\nm 0102 -1\n", f);
    fclose(f);
    static cu_be b6;
    cu_tc_open(&b6, "GPU X, cuDNN 1");
    if (cu_tc_get(&b6, 'g', k1, sizeof k1) != 7) return 6;
    cu_tc_close(&b6);
    unsetenv("KILN_CUDA_TIMING_CACHE");
    static cu_be b7;
    cu_tc_open(&b7, "x");
    cu_tc_put(&b7, 'g', k1, sizeof k1, 1);
    if (b7.tc || cu_tc_get(&b7, 'g', k1, sizeof k1) != -1) return 7;
    remove(CACHE);
    printf("ok\n");
    return 0;
}
