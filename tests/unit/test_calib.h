/* Test helper: calibration data (docs/CALIBRATION.md) made of an engine's synthetic inputs. */
#ifndef KILN_TEST_CALIB_H
#define KILN_TEST_CALIB_H
#include "kiln/kiln.h"
#include <stdio.h>

/* n samples of e's synthetic inputs at shapes (seeds seed0 .. seed0 + n - 1) as NAME_K.npy in dir */
static inline kiln_status test_calib_samples(kiln_engine_t e, kiln_shapes_t shapes, const char *dir, int n,
                                             uint64_t seed0)
{
    kiln_status st = KILN_OK;
    int nin = kiln_engine_num_inputs(e);
    for (int k = 0; st == KILN_OK && k < n; k++) {
        kiln_tensor in[8] = {0};
        kiln_synth_options so = {.shapes = shapes, .seed = seed0 + (uint64_t)k};
        st = nin > 8 ? KILN_ERR_UNSUPPORTED : kiln_engine_synth_inputs(e, &so, in);
        for (int i = 0; i < nin && st == KILN_OK; i++) {
            char path[600];
            snprintf(path, sizeof path, "%s/%s_%d.npy", dir, kiln_engine_input_name(e, i), k);
            st = kiln_npy_write(path, &in[i]);
        }
        for (int i = 0; i < nin && i < 8; i++)
            kiln_free(in[i].data);
    }
    return st;
}
#endif
