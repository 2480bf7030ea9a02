/* Reference kernels: detect. */
#include "../../kernel.h"

const kiln_kernel_reg kiln__ref_detect[] = {
    {KILN_OP_COUNT, NULL},
};
