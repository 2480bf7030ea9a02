/* Engine files (.kiln): an optimized graph with weights in final form plus build metadata.
 * Layout and rules: docs/ENGINE_FORMAT.md. */
#ifndef KILN_ENGINE_H
#define KILN_ENGINE_H
#include <stdatomic.h>
#include "../ir/graph.h"
#include "mem_plan.h"

#define KILN_ENGINE_MAGIC "KILNENG\0"
/* Version written; versions read: KILN_ENGINE_FORMAT_MIN_READ .. KILN_ENGINE_FORMAT_VERSION (4 only adds plans with a
 * FusedConv in place over its residual, which a version-3 reader's plan check would call corrupted; 5 only adds
 * FusedConvSum nodes, which a version-4 reader has no kernel for; 6 only adds plans with a Concat's inputs computed
 * into its output's slot, in_place mark 2, which a version-5 reader's plan check would call corrupted) */
#define KILN_ENGINE_FORMAT_VERSION 6u
#define KILN_ENGINE_FORMAT_MIN_READ 3u
#define KILN_ENGINE_HEADER_BYTES 64u
#define KILN_ENGINE_SECTION_ALIGN 4096u   /* sections start at page boundaries (mmap, docs/ENGINE_FORMAT.md) */
#define KILN_ENGINE_BLOB_ALIGN 64u        /* weight blobs inside WEIGHTS, prepared blobs inside PACKED */
#define KILN_ENGINE_MAX_TACTICS (16u << 20)   /* bytes of a DEVICE_TACTICS section */

enum kiln_section_kind {
    KILN_SEC_MANIFEST = 1,  /* JSON: kiln version, model hash, options, build time, pass report */
    KILN_SEC_GRAPH = 2,     /* binary graph structure (src/engine/graph_ser.c) */
    KILN_SEC_WEIGHTS = 3,   /* initializer data, 64-byte aligned blobs */
    KILN_SEC_PROFILES = 4,  /* optimization profiles: per input min/opt/max shapes */
    KILN_SEC_PLAN = 5,      /* memory plan */
    KILN_SEC_LAYERS = 6,    /* per top-level node: backend, kernel, precisions, prepared blob (layers.c) */
    KILN_SEC_PACKED = 7,    /* prepared blobs (packed weights), 64-byte aligned, used in place */
    KILN_SEC_DEVICE_TACTICS = 8,   /* a device's kernel choices timed on it (core/devtac.h text), optional */
};

/* One layer of the engine's layer plan (LAYERS section): what the builder's backend chose for
 * one top-level node. Precisions are kiln_dtype codes (KILN_DT_UNDEFINED = not recorded):
 * `requested` is what the build asked the layer to compute in (today: what it computes in; the
 * precision planner will set it from the node), `realized` what the chosen kernel computes in. */
typedef struct kiln_layer_rec {
    char backend[16];        /* backend name, NUL-terminated ("cpu") */
    int32_t kernel;          /* backend-specific kernel id */
    int32_t requested, realized;
    const void *blob;        /* prepared data inside the PACKED bytes, or NULL */
    uint64_t blob_off, blob_size;
} kiln_layer_rec;

enum kiln_target_kind { KILN_TARGET_CPU = 1, KILN_TARGET_CUDA = 2 };

typedef struct kiln_profile_dims {
    int n_inputs;
    char **names;
    int *ndim;
    int64_t (*min)[KILN_MAX_DIMS], (*opt)[KILN_MAX_DIMS], (*max)[KILN_MAX_DIMS];
} kiln_profile_dims;

struct kiln_engine {
    kiln_graph *g;
    char *manifest;          /* JSON text */
    uint32_t target_kind;    /* enum kiln_target_kind */
    uint32_t target_arch;    /* CPU: required ISA bits (KILN_ISA_*); CUDA: SM version */
    int n_profiles;
    kiln_profile_dims *profiles;
    /* memory plan computed at build time for one set of input shapes (PLAN section) */
    bool has_plan;
    kiln_plan plan;
    int plan_n_inputs;
    int *plan_ndim;
    int64_t (*plan_dims)[KILN_MAX_DIMS];
    /* layer plan (LAYERS + PACKED sections): n_layers == g->n_nodes, or 0 when the engine has none
     * (every layer is then prepared on the fly, without packed weights) */
    int n_layers;
    kiln_layer_rec *layers;
    const uint8_t *packed;   /* PACKED bytes: in backing (loaded engine) or packed_mem (built engine) */
    size_t packed_len;
    void *packed_mem;        /* the builder's allocation of the PACKED bytes, freed by kiln_engine_free */
    /* DEVICE_TACTICS section: the device tactics text (core/devtac.h, NUL-terminated, heap), or NULL */
    char *dev_tactics;
    size_t dev_tactics_len;
    /* the bytes the initializer tensors borrow (KILN_TENSOR_BORROWED), released by kiln_engine_free */
    void *backing;           /* mmap()ed file, or heap allocation (file read, or copy of the WEIGHTS and PACKED sections) */
    size_t backing_len;
    bool backing_mapped;     /* true: munmap(backing, backing_len); false: kiln__free(backing) */
    /* contexts holding the engine: kiln_engine_free and the last kiln_context_free release it in either order
     * (kiln__engine_release; 0 = the caller's reference alone) */
    atomic_int holders;
};

/* One reference to e given back (kiln_engine_free: the caller's; kiln_context_free: its context's): the engine
 * is freed with the last. */
void kiln__engine_release(struct kiln_engine *e);
/* A context takes a reference to e (released by kiln__engine_release). */
static inline void kiln__engine_hold(struct kiln_engine *e) { atomic_fetch_add_explicit(&e->holders, 1, memory_order_relaxed); }

/* Validates an engine image (header, section table, bounds, alignment, checksums) and parses it.
 * weights_in_place: the initializers borrow their bytes from `buf`, which the caller must hand to
 * the engine (e->backing) on success; false: the WEIGHTS section is copied into one allocation
 * owned by the engine and `buf` may go away after the call. */
kiln_status kiln__engine_parse(const void *buf, size_t len, bool weights_in_place, struct kiln_engine **out);

#define KILN_ISA_X86_64 1u
#define KILN_ISA_AVX2 2u
#define KILN_ISA_AVX512 4u

/* Every prepared blob in PACKED starts with the header src/backend/prep_blob.h defines
 * (docs/ENGINE_FORMAT.md, PACKED): its magic, and at this offset the KILN_ISA_* bits a host needs
 * to use it (u32). The loader reads them, from checksummed bytes, for the blobs that hold weights
 * stored only packed (runtime/layers.c asserts the offset against the struct). */
#define KILN_ENGINE_BLOB_MAGIC "KILNPRP1"
#define KILN_ENGINE_BLOB_ISA_AT 16u
#define KILN_ENGINE_BLOB_HDR_BYTES 128u

/* Most graph inputs a PLAN section records shapes for (the calibration shapes of the build). */
#define KILN_MAX_CALIB_INPUTS 64

uint32_t kiln__host_isa(void);

/* True for an initializer stored only in packed form (no data: a prepared blob holds it). */
static inline bool kiln__value_packed_only(const kiln_value *v)
{
    return v->init && !v->init->data && v->init->nbytes == 0;
}
/* Constants stored only packed: read only by top-level nodes that have prepared data (the
 * backend checks, when it restores the layers, that the blob replaces exactly those inputs), never
 * a graph output, never read by a subgraph. */
kiln_status kiln__engine_check_packed_only(const struct kiln_engine *e);
/* The KILN_ISA_* bits the blobs of layers reading a constant stored only packed need (read from
 * their headers in PACKED): a host without them cannot run those layers, whose weights exist only
 * in those blobs. What the builder adds to the header's target arch (runtime/layers.c), recomputed
 * from checksummed bytes, since the header itself has no checksum. */
uint32_t kiln__engine_packed_isa(const struct kiln_engine *e);
void kiln__engine_free_profiles(struct kiln_engine *e);

#endif
