/* Reference kernels: resize. */
#include "../../kernel.h"

const kiln_kernel_reg kiln__ref_resize[] = {
    {KILN_OP_COUNT, NULL},
};
