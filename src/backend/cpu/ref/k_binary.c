/* Reference kernels: binary. */
#include "../../kernel.h"

const kiln_kernel_reg kiln__ref_binary[] = {
    {KILN_OP_COUNT, NULL},
};
