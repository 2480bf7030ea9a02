/* Engines: build -> save -> load -> run equals the model; reproducible bytes; refusal of
 * truncated / corrupted / foreign files; >= 1,000 mutated engines without a crash; profiles;
 * several contexts running concurrently over one engine. Uses models/tiny_cnn.onnx (bootstrap). */
#include "kiln/kiln.h"
#include "test.h"
#include "backend/cpu/gemm.h"
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include "engine/engine.h"
#include "backend/prep_blob.h"
#include "runtime/exec.h"

#define MODEL "models/tiny_cnn.onnx"

static kiln_tensor make_input(int n, int h, int w, unsigned long long seed)
{
    kiln_tensor t = {.dtype = KILN_DT_FLOAT32, .ndim = 4, .dims = {n, 3, h, w}};
    size_t cnt = (size_t)n * 3 * h * w;
    float *d = malloc(cnt * sizeof(float));
    for (size_t i = 0; i < cnt; i++)
        d[i] = test_randf(&seed);
    t.data = d;
    t.nbytes = cnt * sizeof(float);
    return t;
}

static double max_diff(const kiln_tensor *a, const kiln_tensor *b)
{
    if (a->nbytes != b->nbytes || a->dtype != b->dtype)
        return 1e30;
    double m = 0;
    for (size_t i = 0; i < a->nbytes / 4; i++) {
        double d = fabs((double)((float *)a->data)[i] - ((float *)b->data)[i]);
        m = d > m ? d : m;
    }
    return m;
}

static void on_alarm(int s)
{
    (void)s;
    static const char msg[] = "test_engine: HANG\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    _exit(2);
}

/* Recomputes the section checksums (XXH3-64) so that mutations reach the structure parser. */
static void fix_crcs(unsigned char *b, size_t len)
{
    if (len < 64)
        return;
    uint32_t ns = b[40] | b[41] << 8 | b[42] << 16 | (uint32_t)b[43] << 24;
    for (uint32_t i = 0; i < ns && i < 32 && 64 + (size_t)i * 32 + 32 <= len; i++) {
        unsigned char *e = b + 64 + i * 32;
        uint64_t off = 0, size = 0;
        for (int k = 0; k < 8; k++) {
            off |= (uint64_t)e[8 + k] << (8 * k);
            size |= (uint64_t)e[16 + k] << (8 * k);
        }
        if (off > len || size > len - off)
            continue;
        uint64_t c = (uint64_t)XXH3_64bits(b + off, (size_t)size);
        for (int k = 0; k < 8; k++)
            e[24 + k] = (unsigned char)(c >> (8 * k));
    }
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int k = 0; k < n; k++)
        v |= (uint64_t)p[k] << (8 * k);
    return v;
}

/* Damages the engine's PLAN section (CRCs are left stale): moves every planned slot to arena
 * offset 0, so values live at the same time share bytes, or (in_place) marks every planned slot
 * as computed in place, also where the op does not allow it. Returns the number of slots changed. */
static int damage_plan(unsigned char *b, size_t len, bool in_place)
{
    uint32_t ns = (uint32_t)get_le(b + 40, 4);
    for (uint32_t i = 0; i < ns && 64 + (size_t)i * 32 + 32 <= len; i++) {
        const unsigned char *e = b + 64 + i * 32;
        if (get_le(e, 4) != 5)   /* KILN_SEC_PLAN */
            continue;
        unsigned char *p = b + get_le(e + 8, 8);
        uint32_t ni = (uint32_t)get_le(p, 4);
        p += 4;
        for (uint32_t k = 0; k < ni; k++)
            p += 4 + 8 * get_le(p, 4);
        p += 8 + 8 + 4 + 4;   /* arena, naive bytes, planned, in place */
        uint32_t nv = (uint32_t)get_le(p, 4);
        p += 4;
        int moved = 0;
        for (uint32_t v = 0; v < nv; v++, p += 17)
            if (in_place ? (int64_t)get_le(p, 8) >= 0 && !p[16] : (int64_t)get_le(p, 8) > 0) {
                if (in_place)
                    p[16] = 1;
                else
                    memset(p, 0, 8);
                moved++;
            }
        return moved;
    }
    return 0;
}

/* A byte offset inside the section of `kind` of a valid engine image, chosen by r. */
static size_t section_byte(const unsigned char *b, uint32_t kind, uint64_t r)
{
    uint32_t ns = (uint32_t)get_le(b + 40, 4);
    for (uint32_t i = 0; i < ns; i++) {
        const unsigned char *e = b + 64 + i * 32;
        if (get_le(e, 4) == kind && get_le(e + 16, 8) > 0)
            return (size_t)(get_le(e + 8, 8) + r % get_le(e + 16, 8));
    }
    return 0;
}

static bool write_bytes(const char *path, const void *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(b, 1, len, f) == len;
    return (f && fclose(f) == 0) && ok;
}

/* A (possibly damaged) engine image loaded one of three ways: 0 kiln_engine_load_buffer, 1 the
 * memory-mapped file (kiln_engine_load), 2 the file read into memory (KILN_ENGINE_LOAD_COPY). */
static kiln_status load_as(const unsigned char *b, size_t len, int mode, const char *path, kiln_engine_t *out)
{
    if (mode == 0)
        return kiln_engine_load_buffer(b, len, out);
    if (!write_bytes(path, b, len))
        return KILN_ERR_IO;
    return mode == 1 ? kiln_engine_load(path, out) : kiln_engine_load_ex(path, KILN_ENGINE_LOAD_COPY, out);
}

/* Every initializer of a loaded engine borrows its bytes from the engine's backing (mapping, file
 * copy or weights copy): none owned, none outside, each `align`-byte aligned; so does every
 * prepared blob of its layer plan. Constants stored only packed (no data) are not counted. */
static int borrowed_weights(kiln_engine_t e, size_t align)
{
    const kiln_graph *g = e->g;
    const char *lo = e->backing, *hi = lo + e->backing_len;
    int n = 0;
    for (int v = 0; v < g->n_values; v++) {
        const kiln_tensor *t = g->values[v].init;
        if (!t || kiln__value_packed_only(&g->values[v]))
            continue;
        const char *d = t->data;
        if (!(t->flags & KILN_TENSOR_BORROWED) || d < lo || d + t->nbytes > hi || (uintptr_t)d % align)
            return -1;
        n++;
    }
    for (int i = 0; i < e->n_layers; i++) {
        const char *d = e->layers[i].blob;
        if (d && (d < lo || d + e->layers[i].blob_size > hi || (uintptr_t)d % 64))
            return -1;
    }
    return n;
}

static void set_le(unsigned char *p, uint64_t v, int n)
{
    for (int k = 0; k < n; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

/* Offset of the section of `kind` in a valid engine image (0 if absent). */
static size_t section_at(const unsigned char *b, uint32_t kind)
{
    uint32_t ns = (uint32_t)get_le(b + 40, 4);
    for (uint32_t i = 0; i < ns; i++)
        if (get_le(b + 64 + i * 32, 4) == kind)
            return (size_t)get_le(b + 64 + i * 32 + 8, 8);
    return 0;
}

/* A damaged copy of engine image b (checksums repaired) must be refused with `want` and a message
 * containing `msg`, by the loader or, for what only the backend can judge (blob contents, kernel,
 * backend name), when the runtime restores the layers; in all three load modes. */
static void expect_refused(const unsigned char *c, size_t len, const char *fpath, const char *in_name,
                           const kiln_tensor *x, kiln_status want, const char *msg, const char *what)
{
    for (int mode = 0; mode <= 2; mode++) {
        kiln_engine_t e = NULL;
        kiln_status st = load_as(c, len, mode, fpath, &e);
        if (st == KILN_OK) {
            kiln_tensor *out = NULL;
            int nout = 0;
            st = kiln_engine_run(e, 1, &in_name, x, NULL, &nout, &out);
            if (st == KILN_OK)
                kiln_tensors_free(out, nout);
            kiln_context_t ctx = NULL;
            kiln_status sc = kiln_context_create(e, &ctx);
            /* the same refusal when a context restores the layers (the kernel's own checks come at run) */
            CHECK_MSG(sc == st || (sc == KILN_OK && want == KILN_ERR_UNSUPPORTED), "%s: context creation says %s, run %s",
                      what, kiln_status_str(sc), kiln_status_str(st));
            kiln_context_free(ctx);
            kiln_engine_free(e);
        }
        CHECK_MSG(st == want && strstr(kiln_last_error(), msg), "%s (mode %d): %s: %s", what, mode, kiln_status_str(st),
                  kiln_last_error());
        kiln_clear_last_error();
    }
}

static void check_layer_plan(kiln_engine_t e, const unsigned char *b1, size_t l1, const char *fpath,
                             const char *in_name, const kiln_tensor *x)
{
    const kiln_graph *g = e->g;
    int blobs = 0, first = -1, second = -1, packed_only = -1, reader = -1;
    for (int i = 0; i < e->n_layers; i++)
        if (e->layers[i].blob_size) {
            blobs++;
            first = first < 0 ? i : first;
        }
    second = first == 0 ? 1 : 0;   /* another layer, made to claim the same bytes */
    for (int i = 0; i < g->n_nodes && packed_only < 0; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0 && kiln__value_packed_only(&g->values[g->nodes[i].in[k]]))
                packed_only = g->nodes[i].in[k], reader = i;
    CHECK_MSG(e->n_layers == g->n_nodes && blobs >= 1 && g->n_nodes >= 2, "%d layers for %d nodes, %d blobs", e->n_layers, g->n_nodes,
              blobs);
    CHECK(e->packed && e->packed_len > 0 && !strcmp(e->layers[0].backend, "cpu"));
    CHECK(e->layers[0].realized == KILN_DT_FLOAT32 && e->layers[0].requested == e->layers[0].realized);
    CHECK_MSG(packed_only >= 0 || kiln__sgemm_nr() != 32, "no constant is stored only packed");
    if (packed_only >= 0) {   /* run without the layer plan: refused before any kernel reads it */
        const kiln_tensor *feed[1] = {x};
        kiln_tensor outs[4];
        CHECK(g->n_inputs == 1 && g->n_outputs <= 4);
        CHECK(kiln__exec_graph(g, NULL, feed, outs, NULL, 0) == KILN_ERR_UNSUPPORTED &&
              strstr(kiln_last_error(), "stored only in packed form"));
        kiln_clear_last_error();
    }
    if (first < 0 || second < 0)
        return;
    size_t lay = section_at(b1, 6), pk = section_at(b1, 7);
    CHECK(lay && pk);
    unsigned char *c = malloc(l1);
#define REC(i) (c + lay + 8 + (size_t)(i) * 48)
    const struct { int field; uint64_t value; const char *msg, *what; } recs[] = {
        {32, 4, "prepared blob offset", "misaligned blob offset"},
        {32, 1u << 30, "prepared blob offset", "blob offset outside PACKED"},
        {40, 1u << 30, "prepared blob offset", "blob size past PACKED"},
        {28, 1, "layer precision", "reserved flags set"},
        {20, 999, "layer precision", "precision out of range"},
    };
    for (size_t k = 0; k < sizeof recs / sizeof recs[0]; k++) {
        memcpy(c, b1, l1);
        set_le(REC(first) + recs[k].field, recs[k].value, recs[k].field < 32 ? 4 : 8);
        fix_crcs(c, l1);
        expect_refused(c, l1, fpath, in_name, x, KILN_ERR_PARSE, recs[k].msg, recs[k].what);
    }
    memcpy(c, b1, l1);   /* two layers claiming one blob */
    memcpy(REC(second) + 32, REC(first) + 32, 16);
    fix_crcs(c, l1);
    expect_refused(c, l1, fpath, in_name, x, KILN_ERR_PARSE, "overlap", "overlapping blobs");
    memcpy(c, b1, l1);   /* one record short */
    set_le(c + lay, (uint64_t)(g->n_nodes - 1), 4);
    fix_crcs(c, l1);
    expect_refused(c, l1, fpath, in_name, x, KILN_ERR_PARSE, "layer count", "record count");
    memcpy(c, b1, l1);   /* the blob's layout id (header bytes 8..11) */
    size_t blob = pk + (size_t)e->layers[first].blob_off;
    set_le(c + blob + 8, get_le(c + blob + 8, 4) ^ 3, 4);
    fix_crcs(c, l1);
    expect_refused(c, l1, fpath, in_name, x, KILN_ERR_PARSE, "invalid prepared data", "wrong layout id");
    memcpy(c, b1, l1);   /* the blob's magic */
    c[blob] ^= 1;
    fix_crcs(c, l1);
    expect_refused(c, l1, fpath, in_name, x, KILN_ERR_PARSE, "invalid prepared data", "bad blob magic");
    memcpy(c, b1, l1);   /* a kernel the backend does not have for the node */
    set_le(REC(first) + 16, 100000, 4);
    fix_crcs(c, l1);
    expect_refused(c, l1, fpath, in_name, x, KILN_ERR_PARSE, "no kernel", "wrong kernel id");
    memcpy(c, b1, l1);   /* a backend this kiln lacks */
    memcpy(REC(first), "gpu", 4);
    fix_crcs(c, l1);
    expect_refused(c, l1, fpath, in_name, x, KILN_ERR_UNSUPPORTED, "backend 'gpu'", "unknown backend");
    if (packed_only >= 0) {
        memcpy(c, b1, l1);   /* the reader of a packed-only constant loses its blob */
        memset(REC(reader) + 32, 0, 16);
        fix_crcs(c, l1);
        expect_refused(c, l1, fpath, in_name, x, KILN_ERR_PARSE, "packed form", "packed-only constant without blob");
        memcpy(c, b1, l1);   /* its blob no longer replaces the weights (header `replaces`, bytes 20..23) */
        size_t rb = pk + (size_t)e->layers[reader].blob_off;
        set_le(c + rb + 20, 0, 4);
        fix_crcs(c, l1);
        expect_refused(c, l1, fpath, in_name, x, KILN_ERR_PARSE, "packed form", "blob not replacing the constant");
        memcpy(c, b1, l1);   /* its dims no longer fit the layer: the kernel refuses cleanly */
        set_le(c + rb + 32, get_le(c + rb + 32, 8) + 1, 8);
        fix_crcs(c, l1);
        expect_refused(c, l1, fpath, in_name, x, KILN_ERR_UNSUPPORTED, "packed layout", "blob of other dims");
    }
#undef REC
    free(c);
}

typedef struct {
    kiln_engine_t e;
    kiln_tensor in;
    const kiln_tensor *expect;
    int iters, bad;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    kiln_context_t c;
    if (kiln_context_create(a->e, &c) != KILN_OK) {
        a->bad = 1;
        return NULL;
    }
    kiln_context_set_threads(c, 1);
    for (int i = 0; i < a->iters; i++) {
        if (kiln_context_set_input(c, kiln_engine_input_name(a->e, 0), &a->in) != KILN_OK ||
            kiln_context_run(c) != KILN_OK || max_diff(kiln_context_output(c, 0), a->expect) != 0.0)
            a->bad++;
    }
    kiln_context_free(c);
    return NULL;
}

int main(void)
{
    kiln_model_t m;
    if (kiln_model_load(MODEL, &m) != KILN_OK) {
        printf("SKIP: %s missing (run scripts/bootstrap.sh): %s\n", MODEL, kiln_last_error());
        return 77;
    }
    signal(SIGALRM, on_alarm);
    const char *in_name = kiln_model_input_name(m, 0);
    kiln_tensor x = make_input(2, 32, 40, 1);
    kiln_tensor *ref;
    int nref;
    CHECK(kiln_model_run(m, 1, &in_name, &x, NULL, &nref, &ref) == KILN_OK);

    /* 1. optimized engine: save, load, same outputs (BN folding changes rounding only) */
    kiln_engine_t e;
    kiln_build_options bo = {0};
    CHECK(kiln_build(m, &bo, &e) == KILN_OK);
    kiln_free(bo.report);
    CHECK(kiln_engine_save(e, "build/test_engine.kiln") == KILN_OK);
    kiln_engine_t e2;
    CHECK(kiln_engine_load("build/test_engine.kiln", &e2) == KILN_OK);
    kiln_tensor *out;
    int nout;
    CHECK(kiln_engine_run(e2, 1, &in_name, &x, NULL, &nout, &out) == KILN_OK);
    CHECK(nout == nref);
    CHECK_MSG(max_diff(&out[0], &ref[0]) < 1e-4, "engine vs model: %g", max_diff(&out[0], &ref[0]));
    kiln_tensors_free(out, nout);

    /* 2. unoptimized engine gives bit-identical outputs */
    kiln_engine_t e3;
    kiln_build_options raw = {.no_optimize = true};
    CHECK(kiln_build(m, &raw, &e3) == KILN_OK);
    CHECK(kiln_engine_run(e3, 1, &in_name, &x, NULL, &nout, &out) == KILN_OK);
    CHECK_MSG(max_diff(&out[0], &ref[0]) == 0.0, "unoptimized engine vs model: %g", max_diff(&out[0], &ref[0]));
    kiln_tensors_free(out, nout);
    kiln_engine_free(e3);

    /* 3. reproducible: two builds serialize to the same bytes */
    void *b1, *b2;
    size_t l1, l2;
    kiln_engine_t e4;
    CHECK(kiln_build(m, NULL, &e4) == KILN_OK);
    CHECK(kiln_engine_serialize(e, &b1, &l1) == KILN_OK);
    CHECK(kiln_engine_serialize(e4, &b2, &l2) == KILN_OK);
    CHECK(l1 == l2 && memcmp(b1, b2, l1) == 0);
    kiln_free(b2);
    kiln_engine_free(e4);

    /* 4. refusals with a message saying which */
    kiln_engine_t bad;
    unsigned char *c = malloc(l1);
    memcpy(c, b1, l1);
    CHECK(kiln_engine_load_buffer(c, l1 / 2, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "truncated"));
    CHECK(c[8] == 6); /* format version 6 written */
    c[8] = 99; /* format version */
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "format version"));
    c[8] = 7; /* the next version: refused */
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "format version"));
    /* versions 3 to 5 (the same sections; no FusedConv in place over its residual, no FusedConvSum, no Concat's
     * inputs in its output) still read */
    for (int v = 3; v <= 5; v++) {
        c[8] = (unsigned char)v;
        CHECK_MSG(kiln_engine_load_buffer(c, l1, &bad) == KILN_OK, "version %d: %s", v, kiln_last_error());
        if (bad)
            kiln_engine_free(bad);
        bad = NULL;
    }
    memcpy(c, b1, l1);
    c[32] = 2; /* target kind: CUDA */
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "CUDA"));
    /* the header's target arch has no checksum: what the weights stored only packed need is read again from their
     * blobs (the loader's copy of the blob magic is the backend's) */
    CHECK(memcmp(KILN_PREP_MAGIC, KILN_ENGINE_BLOB_MAGIC, sizeof KILN_PREP_MAGIC) == 0);
    memcpy(c, b1, l1);
    set_le(c + 36, 0, 4);
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_OK);
    CHECK_MSG((bad->target_arch | KILN_ISA_X86_64) == (e->target_arch | KILN_ISA_X86_64), "target arch %u, built %u",
              bad->target_arch, e->target_arch);
    kiln_engine_free(bad);
    bad = NULL;
    memcpy(c, b1, l1);
    size_t woff = (size_t)get_le(c + 64 + 2 * 32 + 8, 8), wlen = (size_t)get_le(c + 64 + 2 * 32 + 16, 8);
    CHECK(get_le(c + 64 + 2 * 32, 4) == 3 && wlen > 100); /* the third section is WEIGHTS */
    c[woff + wlen - 100] ^= 0x40; /* a weight bit */
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "checksum"));
    memcpy(c, b1, l1);
    c[woff + wlen] = 1; /* the page padding after the weights is covered too */
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "padding"));
    memcpy(c, b1, l1);
    c[0] = 'X';
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "magic"));
    memcpy(c, b1, l1);
    c[8] = 1; /* a version-1 engine (64-byte aligned sections, CRC-32): rebuild it */
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "rebuild"));
    /* the section table is validated before any section is trusted (checksums repaired) */
    memcpy(c, b1, l1);
    set_le(c + 64 + 8, get_le(c + 64 + 8, 8) + 64, 8); /* MANIFEST off its page boundary */
    fix_crcs(c, l1);
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "misplaced"));
    memcpy(c, b1, l1);
    set_le(c + 64 + 8, 0, 8); /* MANIFEST over the header and table */
    fix_crcs(c, l1);
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "misplaced"));
    memcpy(c, b1, l1);
    memcpy(c + 96 + 8, c + 64 + 8, 8); /* GRAPH at MANIFEST's offset */
    fix_crcs(c, l1);
    CHECK(kiln_engine_load_buffer(c, l1, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "overlaps"));

    /* 4b. files: memory-mapped (default) and read (KILN_ENGINE_LOAD_COPY) engines use their weights
     * in place, borrowed from the engine's backing; both run like the buffer-loaded engine */
    char fpath[64];
    snprintf(fpath, sizeof fpath, "build/test_engine_%d.kiln", (int)getpid());
    for (int mode = 1; mode <= 2; mode++) {
        kiln_engine_t ef;
        CHECK(load_as(b1, l1, mode, fpath, &ef) == KILN_OK);
        /* mapped or read into a page-aligned buffer: blobs 64-byte aligned like in the file */
        CHECK(ef->backing_mapped == (mode == 1) && borrowed_weights(ef, 64) > 0);
        CHECK(kiln_engine_run(ef, 1, &in_name, &x, NULL, &nout, &out) == KILN_OK);
        CHECK_MSG(max_diff(&out[0], &ref[0]) < 1e-4, "mode %d: engine vs model: %g", mode, max_diff(&out[0], &ref[0]));
        kiln_tensors_free(out, nout);
        kiln_engine_free(ef);
        CHECK(load_as(b1, l1 - 4096, mode, fpath, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "truncated"));
        CHECK(load_as(b1, 0, mode, fpath, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "magic"));
        CHECK(load_as(b1, 40, mode, fpath, &bad) == KILN_ERR_PARSE && strstr(kiln_last_error(), "truncated"));
    }
    kiln_engine_t eb;   /* from a buffer the weights are copied: the buffer may go away */
    memcpy(c, b1, l1);
    CHECK(kiln_engine_load_buffer(c, l1, &eb) == KILN_OK && !eb->backing_mapped && borrowed_weights(eb, 64) > 0);
    memset(c, 0, l1);
    CHECK(kiln_engine_run(eb, 1, &in_name, &x, NULL, &nout, &out) == KILN_OK);
    CHECK(max_diff(&out[0], &ref[0]) < 1e-4);
    kiln_tensors_free(out, nout);
    kiln_engine_free(eb);

    /* 4c. the layer plan: a record per node, prepared blobs in PACKED, constants stored only packed */
    check_layer_plan(e, b1, l1, fpath, in_name, &x);
    {   /* requested / realized precision of every record: what kiln_engine_layer_precision says */
        kiln_build_options ho = {.precision = "fp16"};
        kiln_engine_t eh;
        CHECK_MSG(kiln_build(m, &ho, &eh) == KILN_OK, "%s", kiln_last_error());
        kiln_free(ho.report);
        kiln_free(ho.precision_report);
        int half = 0;
        for (int i = 0; i < eh->n_layers; i++) {
            const char *req, *real;
            CHECK(kiln_engine_layer_precision(eh, i, &req, &real) == KILN_OK);
            kiln_dtype want_real = !strcmp(real, "fp16") ? KILN_DT_FLOAT16 : !strcmp(real, "fp32") ? KILN_DT_FLOAT32
                                                                                                   : KILN_DT_UNDEFINED;
            CHECK_MSG(eh->layers[i].realized == (int32_t)want_real, "layer %d realized %d (%s)", i,
                      eh->layers[i].realized, real);
            CHECK(eh->layers[i].requested == (*req ? (int32_t)KILN_DT_FLOAT16 : eh->layers[i].realized));
            half += *req && eh->layers[i].requested == KILN_DT_FLOAT16;
        }
        CHECK(eh->n_layers == eh->g->n_nodes && half > 0);
        kiln_engine_free(eh);
    }

    /* 5. mutation: >= 1,000 damaged engines, half with repaired checksums so the parser sees them;
     * every other one starts from an engine with profile and memory-plan sections */
    kiln_shape_range mr = {.input = in_name, .ndim = 4, .min = {2, 3, 32, 40}, .opt = {2, 3, 32, 40}, .max = {2, 3, 32, 40}};
    kiln_profile mp = {1, &mr};
    kiln_build_options mo = {.num_profiles = 1, .profiles = &mp, .no_tactics = true};
    kiln_engine_t em;
    void *bp;
    size_t lp;
    CHECK(kiln_build(m, &mo, &em) == KILN_OK);
    kiln_free(mo.report);
    CHECK(kiln_engine_serialize(em, &bp, &lp) == KILN_OK);
    kiln_engine_free(em);
    unsigned char *mbuf = malloc(lp > l1 ? lp : l1);
    unsigned long long rng = 42;
    int loaded = 0, ran = 0, errors = 0, silent = 0;
    kiln_set_max_tensor_bytes((size_t)256 << 20);
    for (int k = 0; k < 1200; k++) {
        bool with_plan = (k / 2) % 2;
        unsigned char *src = with_plan ? bp : b1;
        size_t l0 = with_plan ? lp : l1;
        memcpy(mbuf, src, l0);
        size_t len = l0;
        unsigned char *cbuf = mbuf;
        int kind = (int)(test_rng(&rng) % 4);
        if (kind == 0)
            len = (size_t)(test_rng(&rng) % l0);
        else
            for (int j = 0, nflip = 1 + (int)(test_rng(&rng) % 6); j < nflip; j++) {
                /* bias towards the header and table, the graph section and the tail (profiles and
                 * plan sections), not the zero padding between the page-aligned sections */
                uint64_t pick = test_rng(&rng) % 5;
                size_t at = pick == 0 ? test_rng(&rng) % (64 + 32 * (size_t)get_le(src + 40, 4))
                          : pick == 1 ? section_byte(src, 2, test_rng(&rng))
                          : pick == 2 ? section_byte(src, with_plan ? 5 : 4, test_rng(&rng))
                          : pick == 3 ? section_byte(src, 1 + (uint32_t)(test_rng(&rng) % 7), test_rng(&rng))
                          : test_rng(&rng) % l0;
                cbuf[at] = kind == 1 ? (unsigned char)(cbuf[at] ^ (1u << (test_rng(&rng) % 8)))
                                     : kind == 2 ? (unsigned char)test_rng(&rng) : (unsigned char)(cbuf[at] + 1);
            }
        if (k % 2)
            fix_crcs(cbuf, len);
        alarm(20);
        /* one of the three load paths runs it; the other two must judge it the same way */
        int mode = k % 3;
        kiln_status other[2];
        for (int j = 0; j < 2; j++) {
            kiln_engine_t eo = NULL;
            other[j] = load_as(cbuf, len, (mode + 1 + j) % 3, fpath, &eo);
            kiln_engine_free(eo);
        }
        kiln_clear_last_error();
        kiln_status st = load_as(cbuf, len, mode, fpath, &bad);
        CHECK_MSG(other[0] == st && other[1] == st, "mutant %d: load modes disagree (%d %d %d)", k, st, other[0], other[1]);
        if (st == KILN_OK) {
            loaded++;
            kiln_context_t mc = NULL;
            st = kiln_context_create(bad, &mc);
            if (st == KILN_OK && (st = kiln_context_set_input(mc, in_name, &x)) == KILN_OK &&
                (st = kiln_context_run(mc)) == KILN_OK && (st = kiln_context_run(mc)) == KILN_OK)
                ran++;
            kiln_context_free(mc);
            kiln_engine_free(bad);
        }
        alarm(0);
        if (st != KILN_OK)
            errors++, silent += kiln_last_error()[0] == 0;
    }
    printf("1200 mutated engines: %d loaded, %d ran, %d clean errors, %d silent\n", loaded, ran, errors, silent);
    CHECK(silent == 0);
    kiln_set_max_tensor_bytes((size_t)8 << 30);
    remove(fpath);
    free(c);
    free(mbuf);
    kiln_free(b1);
    kiln_free(bp);

    /* 6. profiles: shapes inside run, outside are refused clearly */
    kiln_shape_range r = {.input = in_name, .ndim = 4, .min = {1, 3, 16, 16}, .opt = {2, 3, 32, 32}, .max = {4, 3, 64, 64}};
    kiln_profile prof = {1, &r};
    kiln_build_options po = {.num_profiles = 1, .profiles = &prof};
    kiln_engine_t ep;
    CHECK(kiln_build(m, &po, &ep) == KILN_OK);
    kiln_free(po.report);
    CHECK(kiln_engine_run(ep, 1, &in_name, &x, NULL, &nout, &out) == KILN_OK);
    kiln_tensors_free(out, nout);
    kiln_tensor big = make_input(8, 32, 40, 3);
    CHECK(kiln_engine_run(ep, 1, &in_name, &big, NULL, &nout, &out) == KILN_ERR_SHAPE &&
          strstr(kiln_last_error(), "profile"));
    kiln_tensor wrong = x;
    wrong.dtype = KILN_DT_INT32;
    CHECK(kiln_engine_run(ep, 1, &in_name, &wrong, NULL, &nout, &out) == KILN_ERR_DTYPE);
    wrong = x;
    wrong.ndim = 3;
    CHECK(kiln_engine_run(ep, 1, &in_name, &wrong, NULL, &nout, &out) == KILN_ERR_SHAPE);
    free(big.data);
    kiln_engine_free(ep);

    /* 6b. fixed-shape profile: tactics timed, timing cache written; a rebuild with the same cache
     * is byte-identical; the engine's build-time memory plan serves runs at those shapes */
    remove("build/test_engine_cache.json");
    kiln_shape_range fr = {.input = in_name, .ndim = 4, .min = {2, 3, 32, 40}, .opt = {2, 3, 32, 40}, .max = {2, 3, 32, 40}};
    kiln_profile fp = {1, &fr};
    kiln_build_options c1 = {.num_profiles = 1, .profiles = &fp, .timing_cache = "build/test_engine_cache.json",
                             .want_report = true};
    kiln_build_options c2 = c1;
    kiln_engine_t ef1, ef2;
    CHECK(kiln_build(m, &c1, &ef1) == KILN_OK);
    CHECK(kiln_build(m, &c2, &ef2) == KILN_OK);
    CHECK(c2.report && strstr(c2.report, "0 layers timed"));
    kiln_free(c1.report);
    kiln_free(c2.report);
    void *f1 = NULL, *f2 = NULL;
    size_t fl1 = 0, fl2 = 0;
    CHECK(kiln_engine_serialize(ef1, &f1, &fl1) == KILN_OK && kiln_engine_serialize(ef2, &f2, &fl2) == KILN_OK);
    CHECK(fl1 == fl2 && memcmp(f1, f2, fl1) == 0);
    kiln_engine_t ef3;
    CHECK(kiln_engine_load_buffer(f1, fl1, &ef3) == KILN_OK);
    kiln_context_t pc;
    CHECK(kiln_context_create(ef3, &pc) == KILN_OK);
    CHECK(kiln_context_set_input(pc, in_name, &x) == KILN_OK && kiln_context_run(pc) == KILN_OK);
    size_t pa = 0, pn = 0;
    kiln_context_memory(pc, &pa, &pn);
    CHECK(pa > 0 && pa < pn);   /* the stored plan is in use from the first run */
    CHECK(max_diff(kiln_context_output(pc, 0), &ref[0]) < 1e-4);
    kiln_context_free(pc);

    /* 6c. a memory plan whose slots overlap, or that computes in place where the op does not allow
     * it (checksums repaired), is refused at load, not run into silently wrong outputs */
    unsigned char *ov = malloc(fl1);
    for (int in_place = 0; in_place < 2; in_place++) {
        memcpy(ov, f1, fl1);
        CHECK(damage_plan(ov, fl1, in_place) > 1);
        fix_crcs(ov, fl1);
        kiln_engine_t eo;
        kiln_status so = kiln_engine_load_buffer(ov, fl1, &eo);
        CHECK_MSG(so == KILN_ERR_PARSE && strstr(kiln_last_error(), "memory plan"), "damaged plan %d: %s (%s)",
                  in_place, kiln_status_str(so), kiln_last_error());
        if (so == KILN_OK) {
            kiln_tensor *oo;
            int no;
            if (kiln_engine_run(eo, 1, &in_name, &x, NULL, &no, &oo) == KILN_OK) {
                kiln_context_t oc;
                if (kiln_context_create(eo, &oc) == KILN_OK && kiln_context_set_input(oc, in_name, &x) == KILN_OK &&
                    kiln_context_run(oc) == KILN_OK)
                    printf("damaged plan (%s) accepted; context output differs from the model by %g\n",
                           in_place ? "in place" : "overlap", max_diff(kiln_context_output(oc, 0), &ref[0]));
                kiln_context_free(oc);
                kiln_tensors_free(oo, no);
            }
            kiln_engine_free(eo);
        }
    }
    free(ov);
    kiln_free(f1);
    kiln_free(f2);
    kiln_engine_free(ef1);
    kiln_engine_free(ef2);
    kiln_engine_free(ef3);

    /* 7. contexts: 4 threads, one engine, each checks its outputs every run; memory plan used */
    kiln_tensor *expect[4];
    worker_arg args[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        args[t] = (worker_arg){.e = e2, .in = make_input(1 + t % 2, 24 + 8 * t, 32, 10 + (unsigned)t), .iters = 6};
        int ne;
        CHECK(kiln_engine_run(e2, 1, &in_name, &args[t].in, NULL, &ne, &expect[t]) == KILN_OK);
        args[t].expect = &expect[t][0];
    }
    for (int t = 0; t < 4; t++)
        pthread_create(&th[t], NULL, worker, &args[t]);
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK_MSG(args[t].bad == 0, "context %d: %d bad runs", t, args[t].bad);
        kiln_tensors_free(expect[t], 1);
        free(args[t].in.data);
    }
    kiln_context_t ctx;
    CHECK(kiln_context_create(e2, &ctx) == KILN_OK);
    CHECK(kiln_context_run(ctx) == KILN_ERR_INVALID_ARG);   /* input not set */
    CHECK(kiln_context_set_input(ctx, "nope", &x) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_context_set_input(ctx, in_name, &x) == KILN_OK);
    float small[4];
    CHECK(kiln_context_set_output_buffer(ctx, kiln_engine_output_name(e2, 0), small, sizeof small) == KILN_OK);
    CHECK(kiln_context_run(ctx) == KILN_ERR_SHAPE);          /* caller buffer too small */
    size_t need = ref[0].nbytes;
    float *buf = malloc(need);
    CHECK(kiln_context_set_output_buffer(ctx, kiln_engine_output_name(e2, 0), buf, need) == KILN_OK);
    CHECK(kiln_context_run(ctx) == KILN_OK && kiln_context_output(ctx, 0)->data == buf);
    CHECK(kiln_context_run(ctx) == KILN_OK);                 /* second run uses the memory plan */
    size_t arena, naive;
    kiln_context_memory(ctx, &arena, &naive);
    CHECK(arena > 0 && arena <= naive);
    CHECK(max_diff(kiln_context_output(ctx, 0), &ref[0]) < 1e-4);
    kiln_context_free(ctx);
    free(buf);

    kiln_engine_free(e2);
    kiln_engine_free(e);
    kiln_tensors_free(ref, nref);
    free(x.data);
    kiln_model_free(m);
    return TEST_SUMMARY();
}
