/* Per-thread reusable scratch buffers for CPU kernels (GEMM packing panels, conv staging).
 *
 * Networks call the same kernels with the same sizes over and over; allocating a fresh
 * megabyte-sized buffer per call costs page faults (glibc serves such sizes with mmap). These
 * buffers are grow-only, 64-byte aligned, owned by the calling thread and freed when it exits
 * (a thread still alive at process exit keeps them reachable). They come from the C library
 * allocator, not the hookable kiln allocator, since a cached buffer may outlive a change of
 * allocator. A buffer stays valid until the same thread asks for the same slot again, so a
 * slot must not be used by two nested users: each user has its own slot. */
#ifndef KILN_BACKEND_CPU_SCRATCH_H
#define KILN_BACKEND_CPU_SCRATCH_H
#include <stddef.h>

enum { KILN_SCRATCH_GEMM, KILN_SCRATCH_GEMM_A, KILN_SCRATCH_GEMM_B, KILN_SCRATCH_CONV, KILN_SCRATCH_WINO, KILN_SCRATCH_LOWBIT_W, KILN_SCRATCH_LOWBIT_X, KILN_SCRATCH_BF16_X,
       KILN_SCRATCH_SLOTS };

/* A buffer of at least `bytes` bytes for this thread's `slot`, or NULL if out of memory. */
void *kiln__scratch(int slot, size_t bytes);

#endif
