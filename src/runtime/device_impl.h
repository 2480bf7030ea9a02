/* The state behind kiln_dev (device.c, exec_device.c only). */
#ifndef KILN_RUNTIME_DEVICE_IMPL_H
#define KILN_RUNTIME_DEVICE_IMPL_H
#include "device.h"

struct kiln_dev {
    const kiln_devmod *mod;
    kiln_backend *be;
    char description[256];
    struct kiln_dev_weights *weights;   /* the graph's weights on the device, shared (device.c) */
    /* the last run's counts */
    int n_device, n_host, n_fallback;
    unsigned long long h2d_bytes, d2h_bytes;
    char *fallback_ops;   /* op types that fell back to the host (grows, never shrinks) */
};

/* The device copy of initializer v of g, made at its first use by any kiln_dev on g. */
kiln_status kiln__dev_weight(kiln_dev *d, const kiln_graph *g, int v, const kiln_tensor **out);
/* A device copy of host tensor h: from the instance's pool, or (shared) plain device memory that
 * outlives the instance (freed with kiln__dev_shared_free). */
kiln_status kiln__dev_upload(kiln_dev *d, const kiln_tensor *h, kiln_tensor *out, bool shared);
#endif
