/* Reference kernels: pool. */
#include "../../kernel.h"

const kiln_kernel_reg kiln__ref_pool[] = {
    {KILN_OP_COUNT, NULL},
};
