/* Reference kernels: rnn. */
#include "../../kernel.h"

const kiln_kernel_reg kiln__ref_rnn[] = {
    {KILN_OP_COUNT, NULL},
};
