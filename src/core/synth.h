/* The one rule for synthetic input values (api_synth.c), shared by the builder's calibration run
 * and the public generator kiln_*_synth_inputs. */
#ifndef KILN_CORE_SYNTH_H
#define KILN_CORE_SYNTH_H
#include "core.h"

#define KILN_SYNTH_SEED 0x853c49e6748fea9bull   /* the default seed (deterministic inputs) */

/* Fills the allocated tensor t, the input called `name`: floating-point values uniform in [-1, 1);
 * integers: token ids (name contains "ids" but not "type") small random values in [0, 100), type
 * ids ("type") 0, anything else (masks, sizes, indices, counts) 1 — the value least likely to make
 * a run huge or invalid. *rng is the generator state (xorshift64, never 0), advanced. Other dtypes
 * (strings, complex, fp8/fp4, sub-byte) fail with KILN_ERR_DTYPE. */
kiln_status kiln__synth_fill(kiln_tensor *t, const char *name, uint64_t *rng);

#endif
