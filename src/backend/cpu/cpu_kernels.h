/* The CPU kernel registry: scalar reference kernels (cpu/ref/, one per op) and ISA-specific fast
 * kernels (cpu/x86/) registered over them by op and ISA. kiln__ref_kernel() (kernel.h) returns
 * the fastest kernel the host can run; the differential tests also run the scalar reference. */
#ifndef KILN_BACKEND_CPU_KERNELS_H
#define KILN_BACKEND_CPU_KERNELS_H

#include "../kernel.h"

/* A fast kernel: runs op when the host has every feature in isa (a kiln__cpu_has() set). Each
 * cpu/x86 file exports a table terminated by {KILN_OP_COUNT, NULL, 0, NULL}; later entries of
 * an op win over earlier ones. */
typedef struct kiln_kernel_isa_reg {
    kiln_op op;
    kiln_kernel_fn fn;
    unsigned isa;
    const char *name;   /* "MaxPool/avx512f" */
} kiln_kernel_isa_reg;

/* The scalar reference kernel for op, or NULL. */
kiln_kernel_fn kiln__cpu_ref_kernel(kiln_op op);
/* The fast kernel for op the host runs, or NULL (then kiln__ref_kernel is the reference). */
const kiln_kernel_isa_reg *kiln__cpu_fast_kernel(kiln_op op);
/* The i-th fast kernel for op the host runs, in registration order (the last is
 * kiln__cpu_fast_kernel's), or NULL past the end: the tests run each one. */
const kiln_kernel_isa_reg *kiln__cpu_fast_kernel_at(kiln_op op, int i);

#endif
