/* Reference kernels: unary. */
#include "../../kernel.h"

const kiln_kernel_reg kiln__ref_unary[] = {
    {KILN_OP_COUNT, NULL},
};
