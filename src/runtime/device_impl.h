/* The state behind kiln_dev (device.c, exec_device.c only). */
#ifndef KILN_RUNTIME_DEVICE_IMPL_H
#define KILN_RUNTIME_DEVICE_IMPL_H
#include "device.h"

struct kiln_dev {
    const kiln_devmod *mod;
    kiln_backend *be;
    char description[256];
    /* device copies of the top-level graph's initializers, by value id, made at first use; wsrc
     * holds the host data each was copied from (a different one is copied again) */
    const kiln_graph *wgraph;
    kiln_tensor *weights;
    const void **wsrc;
    int n_weights;
    /* the last run's counts */
    int n_device, n_host, n_fallback;
    unsigned long long h2d_bytes, d2h_bytes;
    char *fallback_ops;   /* op types that fell back to the host (grows, never shrinks) */
};

#endif
