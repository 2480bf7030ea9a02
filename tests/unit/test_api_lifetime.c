/* The public API under misuse a C embedder can make (session 45's audit of kiln.h): an engine freed before its
 * contexts, allocation failures inside kiln_context_create and while reading an engine, inputs that fit different
 * profiles one by one but no profile together, options and arguments that used to be accepted silently. Each case
 * fails on the code before its fix (under ASan for the lifetime ones). */
#include "kiln/kiln.h"
#include "test.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool err_has(const char *s) { return strstr(kiln_last_error(), s) != NULL; }

/* ---- an allocator that fails the n-th request (0: never) ---- */
static long alloc_count, fail_at;
static void *f_malloc(size_t n, void *u)
{
    (void)u;
    return ++alloc_count == fail_at ? NULL : malloc(n);
}
static void *f_realloc(void *p, size_t n, void *u)
{
    (void)u;
    return ++alloc_count == fail_at ? NULL : realloc(p, n);
}
static void f_free(void *p, void *u)
{
    (void)u;
    free(p);
}
static const kiln_allocator failing = {f_malloc, f_realloc, f_free, NULL};

/* One call of `make` with its n-th allocation failing: kiln's allocator is the failing one for the call and, where it
 * succeeded, for `drop` of what it made (an object is freed with the allocator that made it), libc's again after */
static kiln_status with_nth_failing(long n, kiln_status (*make)(void *arg, void **obj), void (*drop)(void *obj),
                                    void *arg, void **obj)
{
    alloc_count = 0, fail_at = n;
    kiln_set_allocator(&failing);
    kiln_status st = make(arg, obj);
    fail_at = 0;
    if (st == KILN_OK)
        drop(*obj);
    kiln_set_allocator(NULL);
    return st;
}

static kiln_engine_t build(const char *path, const kiln_build_options *o)
{
    kiln_model_t m = NULL;
    kiln_engine_t e = NULL;
    kiln_build_options d = {.no_tactics = true};
    CHECK_MSG(kiln_model_load(path, &m) == KILN_OK, "%s", kiln_last_error());
    if (m)
        CHECK_MSG(kiln_build(m, (kiln_build_options *)(o ? o : &d), &e) == KILN_OK, "%s", kiln_last_error());
    kiln_model_free(m);
    return e;
}

/* the engine of the model at path, serialized (kiln_free it), or NULL (a failed check) */
static void *engine_bytes(const char *path, const kiln_build_options *o, size_t *len)
{
    kiln_engine_t e = build(path, o);
    void *buf = NULL;
    if (!e || kiln_engine_serialize(e, &buf, len) != KILN_OK) {
        CHECK_MSG(0, "serialize: %s", kiln_last_error());
        buf = NULL;
    }
    kiln_engine_free(e);
    return buf;
}

static kiln_tensor cnn_input(float *buf)
{
    kiln_tensor t = {.dtype = KILN_DT_FLOAT32, .ndim = 4, .dims = {1, 3, 8, 8}, .data = buf,
                     .nbytes = 3 * 8 * 8 * sizeof(float)};
    for (int i = 0; i < 3 * 8 * 8; i++)
        buf[i] = (float)(i % 7) * 0.25f - 0.5f;
    return t;
}

/* the engine freed first: its contexts keep it until the last of them is freed */
static void test_engine_freed_first(void)
{
    kiln_engine_t e = build("models/tiny_cnn.onnx", NULL);
    if (!e)
        return;
    kiln_context_t c = NULL, c2 = NULL;
    float buf[3 * 8 * 8];
    kiln_tensor in = cnn_input(buf);
    CHECK(kiln_context_create(e, &c) == KILN_OK && kiln_context_create(e, &c2) == KILN_OK);
    CHECK(kiln_context_set_input(c, "input", &in) == KILN_OK && kiln_context_run(c) == KILN_OK);
    const kiln_tensor *o = kiln_context_output(c, 0);
    kiln_tensor ref = {0};
    if (o) {
        ref = *o;
        ref.data = malloc(o->nbytes);
        memcpy(ref.data, o->data, o->nbytes);
    }
    kiln_engine_free(e);   /* the caller's reference: both contexts still run */
    CHECK(kiln_context_run(c) == KILN_OK);
    o = kiln_context_output(c, 0);
    CHECK(o && ref.data && o->nbytes == ref.nbytes && !memcmp(o->data, ref.data, o->nbytes));
    kiln_context_free(c);
    CHECK(kiln_context_set_input(c2, "input", &in) == KILN_OK && kiln_context_run(c2) == KILN_OK);
    o = kiln_context_output(c2, 0);
    CHECK(o && ref.data && o->nbytes == ref.nbytes && !memcmp(o->data, ref.data, o->nbytes));
    kiln_context_free(c2);   /* the last holder: the engine goes with it (ASan: no leak, no use after free) */
    free(ref.data);
}

static kiln_status make_context(void *e, void **obj)
{
    kiln_context_t c = NULL;
    kiln_status st = kiln_context_create(e, &c);
    *obj = c;
    return st;
}
static void drop_context(void *c) { kiln_context_free(c); }

/* every allocation inside kiln_context_create failing in turn: an error, never a crash or a leak */
static void test_context_create_oom(void)
{
    kiln_engine_t e = build("models/tiny_cnn.onnx", NULL);
    if (!e)
        return;
    int fails = 0;
    for (long n = 1; n < 400; n++) {
        void *c = NULL;
        kiln_status st = with_nth_failing(n, make_context, drop_context, e, &c);
        if (st == KILN_OK)
            break;
        CHECK_MSG(st == KILN_ERR_NOMEM && c == NULL, "allocation %ld: %d %s", n, st, kiln_last_error());
        fails++;
    }
    CHECK_MSG(fails > 5, "only %d allocation points in kiln_context_create", fails);
    kiln_engine_free(e);
}

struct engine_bytes {
    const void *buf;
    size_t len;
};
static kiln_status load_engine(void *b, void **obj)
{
    const struct engine_bytes *eb = b;
    kiln_engine_t l = NULL;
    kiln_status st = kiln_engine_load_buffer(eb->buf, eb->len, &l);
    *obj = l;
    return st;
}
static void drop_engine(void *l) { kiln_engine_free(l); }

/* every allocation while loading an engine from memory failing in turn: out of memory, never "corrupted" */
static void test_engine_load_oom(void)
{
    size_t len = 0;
    void *buf = engine_bytes("models/tiny_bert.onnx", NULL, &len);
    if (!buf)
        return;
    int fails = 0, wrong = 0;
    struct engine_bytes bytes = {buf, len};
    for (long n = 1; n < 20000; n++) {
        void *l = NULL;
        kiln_status st = with_nth_failing(n, load_engine, drop_engine, &bytes, &l);
        if (st == KILN_OK)
            break;
        fails++;
        if (st != KILN_ERR_NOMEM && wrong++ < 3)
            CHECK_MSG(0, "allocation %ld failed: status %d, %s", n, st, kiln_last_error());
    }
    CHECK_MSG(fails > 100 && wrong == 0, "%d allocation points, %d reported as something else", fails, wrong);
    kiln_free(buf);
}

/* token ids (v 0) or ones (a mask, token types) */
static kiln_tensor ids(int64_t b, int64_t s, int64_t *buf, int v)
{
    for (int64_t i = 0; i < b * s; i++)
        buf[i] = v ? 1 : i % 5 + 1;
    kiln_tensor t = {.dtype = KILN_DT_INT64, .ndim = 2, .dims = {b, s}, .data = buf,
                     .nbytes = (size_t)(b * s) * sizeof(int64_t)};
    return t;
}

/* inputs that each fit some profile but no profile together: a context refuses them as kiln_engine_run does */
static void test_joint_profiles(void)
{
    static const char *const names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    kiln_shape_range r0[3], r1[3];
    for (int i = 0; i < 3; i++) {
        r0[i] = (kiln_shape_range){.input = names[i], .ndim = 2, .min = {1, 1}, .opt = {1, 8}, .max = {1, 8}};
        r1[i] = (kiln_shape_range){.input = names[i], .ndim = 2, .min = {2, 16}, .opt = {2, 32}, .max = {2, 64}};
    }
    kiln_profile p[2] = {{3, r0}, {3, r1}};
    kiln_build_options o = {.num_profiles = 2, .profiles = p, .no_tactics = true};
    kiln_engine_t e = build("models/tiny_bert.onnx", &o);
    if (!e)
        return;
    static int64_t big[2 * 64], small[1 * 4], small_id[1 * 4];
    kiln_tensor tb = ids(2, 64, big, 0), ts = ids(1, 4, small, 1), tid = ids(1, 4, small_id, 0);
    kiln_context_t c = NULL;
    CHECK(kiln_context_create(e, &c) == KILN_OK);
    CHECK(kiln_context_set_input(c, names[0], &tb) == KILN_OK);   /* alone, each fits a profile */
    CHECK(kiln_context_set_input(c, names[1], &ts) == KILN_OK);
    CHECK(kiln_context_set_input(c, names[2], &ts) == KILN_OK);
    CHECK_MSG(kiln_context_run(c) == KILN_ERR_SHAPE && err_has("fit no optimization profile"), "%s",
              kiln_last_error());
    kiln_tensor in3[3] = {tb, ts, ts};
    int no = 0;
    kiln_tensor *outs = NULL;
    CHECK(kiln_engine_run(e, 3, names, in3, NULL, &no, &outs) == KILN_ERR_SHAPE);   /* as the engine refuses them */
    /* consistent inputs run through the same context */
    CHECK(kiln_context_set_input(c, names[0], &tid) == KILN_OK);
    CHECK_MSG(kiln_context_run(c) == KILN_OK, "%s", kiln_last_error());
    kiln_context_free(c);
    kiln_engine_free(e);
}

/* arguments and options that were accepted silently */
static void test_refused_arguments(void)
{
    kiln_model_t m = NULL;
    kiln_engine_t e = NULL;
    CHECK(kiln_model_load("models/tiny_cnn.onnx", &m) == KILN_OK);
    kiln_build_options o = {.no_tactics = true, .num_profiles = -1};
    CHECK(kiln_build(m, &o, &e) == KILN_ERR_INVALID_ARG && err_has("a negative count") && !e);
    o = (kiln_build_options){.no_tactics = true, .num_layer_precisions = -1};
    CHECK(kiln_build(m, &o, &e) == KILN_ERR_INVALID_ARG && err_has("a negative count"));
    o = (kiln_build_options){.no_tactics = true, .device = (kiln_device)9};
    CHECK(kiln_build(m, &o, &e) == KILN_ERR_INVALID_ARG && err_has("unknown device 9"));
    o = (kiln_build_options){.timing_cache = "/nonexistent-kiln-dir/tc.json"};
    CHECK(kiln_build(m, &o, &e) == KILN_ERR_IO && err_has("its directory does not exist"));
    o = (kiln_build_options){.no_tactics = true};
    CHECK(kiln_build(m, &o, &e) == KILN_OK);
    kiln_model_free(m);
    if (!e)
        return;
    float buf[3 * 8 * 8];
    kiln_tensor in[2] = {cnn_input(buf), cnn_input(buf)};
    const char *twice[2] = {"input", "input"};
    int no = 0;
    kiln_tensor *outs = NULL;
    CHECK(kiln_engine_run(e, 2, twice, in, NULL, &no, &outs) == KILN_ERR_INVALID_ARG && err_has("given twice"));
    CHECK(kiln_engine_run(e, -3, twice, in, NULL, &no, &outs) == KILN_ERR_INVALID_ARG &&
          err_has("negative number of inputs"));
    kiln_context_t c = NULL;
    CHECK(kiln_context_create(e, &c) == KILN_OK);
    CHECK(kiln_context_set_device(c, KILN_DEVICE_CPU, 0xffff) == KILN_ERR_INVALID_ARG && err_has("unknown flags"));
    kiln_context_free(c);
    CHECK(kiln_engine_save(NULL, "/tmp/x.kiln") == KILN_ERR_INVALID_ARG && err_has("kiln_engine_save: NULL engine"));
    kiln_engine_free(e);
}

/* a flipped kind in the PROFILES entry of the section table (not checksummed) used to drop the engine's profiles
 * silently; the checksummed manifest's profile count now refuses it */
static void test_profiles_entry_flip(void)
{
    kiln_shape_range r = {.input = "input", .ndim = 4, .min = {1, 3, 8, 8}, .opt = {1, 3, 8, 8}, .max = {1, 3, 8, 8}};
    kiln_profile p = {1, &r};
    kiln_build_options o = {.num_profiles = 1, .profiles = &p, .no_tactics = true};
    size_t len = 0;
    void *buf = engine_bytes("models/tiny_cnn.onnx", &o, &len);
    if (!buf)
        return;
    uint8_t *b = buf;
    uint32_t n = 0;
    memcpy(&n, b + 40, 4);
    int hit = 0;
    for (uint32_t i = 0; i < n && 64 + 32 * (i + 1) <= len; i++) {
        uint32_t kind;
        memcpy(&kind, b + 64 + 32 * i, 4);
        if (kind == 4) {   /* PROFILES */
            b[64 + 32 * i + 3] ^= 0x80;
            hit++;
        }
    }
    CHECK(hit == 1);
    kiln_engine_t l = NULL;
    CHECK_MSG(kiln_engine_load_buffer(buf, len, &l) == KILN_ERR_PARSE && !l && err_has("lists 1 optimization profiles"),
              "%s", kiln_last_error());
    kiln_engine_free(l);
    kiln_free(buf);
}

int main(void)
{
    test_profiles_entry_flip();
    test_engine_freed_first();
    test_context_create_oom();
    test_engine_load_oom();
    test_joint_profiles();
    test_refused_arguments();
    return TEST_SUMMARY();
}
