/* Reference kernels: linalg. */
#include "../../kernel.h"

const kiln_kernel_reg kiln__ref_linalg[] = {
    {KILN_OP_COUNT, NULL},
};
