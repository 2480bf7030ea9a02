/* Reference kernels: extra. */
#include "../../kernel.h"

const kiln_kernel_reg kiln__ref_extra[] = {
    {KILN_OP_COUNT, NULL},
};
