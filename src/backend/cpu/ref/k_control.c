/* Reference kernels: control. */
#include "../../kernel.h"

const kiln_kernel_reg kiln__ref_control[] = {
    {KILN_OP_COUNT, NULL},
};
