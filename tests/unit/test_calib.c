/* Calibration end to end (kiln_calibrate) and its cache: calibration sets generated here for
 * models/tiny_cnn.onnx, the PaddleOCR cls model and the three-input tiny_bert; the cache round-trips
 * any tensor name; the same data under shuffled file names gives a byte-identical cache; a matching
 * cache is reused without running the model; stale, foreign, garbage and non-regular caches are
 * refused and left untouched; bad data sets get clean errors. */
#include "core/core.h"
#include "quant/quant.h"
#include "test.h"
#include <float.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[] = "/tmp/kiln_calib_XXXXXX";

/* root/a[/b] in one of 64 rotating buffers: copy what must live longer */
static char *path_of(const char *a, const char *b)
{
    static char buf[64][1024];
    static int k;
    char *p = buf[k++ % 64];
    snprintf(p, sizeof buf[0], "%s/%s%s%s", root, a, b ? "/" : "", b ? b : "");
    return p;
}

static void write_npy(const char *path, kiln_dtype dt, int ndim, const int64_t *dims, unsigned long long seed,
                      double scale)
{
    kiln_tensor t = {.dtype = dt, .ndim = ndim};
    memcpy(t.dims, dims, (size_t)ndim * sizeof *dims);
    int64_t n = kiln__shape_numel(ndim, dims);
    t.nbytes = (size_t)n * kiln_dtype_size(dt);
    t.data = malloc(t.nbytes);
    for (int64_t i = 0; i < n; i++) {
        if (dt == KILN_DT_FLOAT32)
            ((float *)t.data)[i] = (float)(scale * test_randf(&seed));
        else
            ((int64_t *)t.data)[i] = (int64_t)(test_rng(&seed) % (uint64_t)scale);   /* ids below `scale` */
    }
    CHECK(kiln_npy_write(path, &t) == KILN_OK);
    free(t.data);
}

/* a float32 .npy of NaN only */
static void write_nan_npy(const char *path, const int64_t *dims)
{
    kiln_tensor t = {.dtype = KILN_DT_FLOAT32, .ndim = 4};
    memcpy(t.dims, dims, 4 * sizeof *dims);
    int64_t n = kiln__shape_numel(4, dims);
    t.nbytes = (size_t)n * sizeof(float);
    t.data = malloc(t.nbytes);
    for (int64_t i = 0; i < n; i++)
        ((float *)t.data)[i] = i % 3 ? NAN : INFINITY;
    CHECK(kiln_npy_write(path, &t) == KILN_OK);
    free(t.data);
}

static char *slurp(const char *path, size_t *len)
{
    void *d = NULL;
    size_t n = 0;
    if (kiln__read_file(path, &d, &n) != KILN_OK)
        return NULL;
    if (len)
        *len = n;
    return d;
}

static bool same_file_text(const char *path, const char *text)
{
    char *now = slurp(path, NULL);
    bool same = now && text && !strcmp(now, text);
    kiln_free(now);
    return same;
}

static kiln_status calibrate(kiln_model_t m, const char *dir, const char *cache, kiln_calib_method meth,
                             int max_batch, kiln_calibration_t *r)
{
    kiln_calib_options o = {.data_dir = dir, .cache_path = cache, .method = meth, .max_batch = max_batch, .num_threads = 2};
    kiln_status st = kiln_calibrate(m, &o, r);
    if (getenv("CALIB_DEBUG") && st) fprintf(stderr, "calibrate: %s\n", kiln_last_error());
    return st;
}

/* --- the cache file on its own --- */
static void test_cache_roundtrip(void)
{
    const char *names[] = {"plain", "with space", "quote\"s and \\back\\slash", "new\nline\ttab\x01", "utf8 \xc3\xa9\xe2\x82\xac",
                           "\"", ""};
    int n = (int)(sizeof names / sizeof names[0]);
    kiln_calib_table t = {.n = n, .model_hash = 0x0123456789abcdefull, .data_hash = 42, .rows = 7};
    snprintf(t.method, sizeof t.method, "percentile:99.9");
    t.name = (char **)names;
    /* scales a calibration can give for these amax (the reader refuses others): threshold / 127 for a threshold
     * in [amax / 2048, amax] (the lower edge for 1/3), 1 for amax 0; float extremes included */
    float scales[] = {1.0f / 127, 0.1f, 3.4e38f / 127, 1e-30f, (float)(1.0 / 3 / 127 / 2048), 1, 2};
    float amaxs[] = {1, 12.7f, FLT_MAX, 1.27e-28f, 1.0f / 3, 0, 254};
    t.scale = scales;
    t.amax = amaxs;
    const char *p = path_of("cache.txt", NULL);
    CHECK(kiln__calib_cache_write(p, &t) == KILN_OK);
    kiln_calib_table r;
    bool exists;
    CHECK(kiln__calib_cache_read(p, t.model_hash, true, 42, "percentile:99.9", &r, &exists) == KILN_OK && exists);
    CHECK(r.n == n && r.rows == 7);
    for (int i = 0; i < n && i < r.n; i++) {
        CHECK_MSG(!strcmp(r.name[i], names[i]), "name %d", i);
        CHECK(r.scale[i] == scales[i] && r.amax[i] == amaxs[i]);
    }
    kiln__calib_table_free(&r);
    /* no data given: the header's data hash is not checked */
    CHECK(kiln__calib_cache_read(p, t.model_hash, false, 0, "percentile:99.9", &r, &exists) == KILN_OK);
    kiln__calib_table_free(&r);
    char *orig = slurp(p, NULL);
    /* stale or foreign: refused, with a message naming what differs, file untouched */
    CHECK(kiln__calib_cache_read(p, 1, true, 42, "percentile:99.9", &r, &exists) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "model hash") != NULL);
    CHECK(kiln__calib_cache_read(p, t.model_hash, true, 43, "percentile:99.9", &r, &exists) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "data hash") != NULL);
    CHECK(kiln__calib_cache_read(p, t.model_hash, true, 42, "entropy", &r, &exists) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "method") != NULL);
    CHECK(same_file_text(p, orig));
    /* another kiln version, garbage, truncation, trailing text, a bad number: refused */
    const char *bad[] = {"kiln 0.1.0", "kiln 9.9.9", "tensors 7", "tensors 8", "\"plain\" 0.00787401572", "\"plain\" -1",
                         "\"plain\" 0.00787401572", "\"plain\" nan", "version 1", "version 2"};
    size_t olen = strlen(orig);
    for (size_t k = 0; k + 1 < sizeof bad / sizeof bad[0]; k += 2) {
        char *copy = malloc(olen + 64), *at = strstr(orig, bad[k]);
        CHECK(at != NULL);
        if (!at) {
            free(copy);
            continue;
        }
        size_t pre = (size_t)(at - orig);
        snprintf(copy, olen + 64, "%.*s%s%s", (int)pre, orig, bad[k + 1], at + strlen(bad[k]));
        CHECK(kiln__write_file_atomic(p, copy, strlen(copy)) == KILN_OK);
        kiln_status st = kiln__calib_cache_read(p, t.model_hash, true, 42, "percentile:99.9", &r, &exists);
        CHECK_MSG(st != KILN_OK, "edit %zu accepted", k / 2);
        CHECK(same_file_text(p, copy));
        free(copy);
    }
    /* values a calibration cannot have written: a scale far from its amax (above amax / 127, below amax / 2048 /
     * 127), a scale other than 1 with amax 0, a tensor named on two lines; refused naming the line, untouched */
    const struct { const char *from, *to, *msg; } edit[] = {
        {"\"plain\" 0.00787401572 1", "\"plain\" 1e30 1", "tensor line 1 (\"plain\"): scale 1.00000002e+30 does not fit amax 1"},
        {"\"plain\" 0.00787401572 1", "\"plain\" 1e-45 1", "tensor line 1 (\"plain\"): scale 1.40129846e-45 does not fit"},
        {"\"plain\" 0.00787401572 1", "\"plain\" 0.00787401572 0", "scale 0.00787401572 does not fit amax 0"},
        {"\"\\\"\" 1 0", "\"\\\"\" 1 1e-3", "tensor line 6 (\"\"\"): scale 1 does not fit amax 0.001"},
        {"\"with space\"", "\"plain\"", "tensor lines 1 and 2 both name \"plain\""},
        {"\"\" 2 254", "\"with space\" 2 254", "tensor lines 2 and 7 both name \"with space\""},
    };
    for (size_t k = 0; k < sizeof edit / sizeof edit[0]; k++) {
        char *copy = malloc(olen + 64), *at = strstr(orig, edit[k].from);
        CHECK_MSG(at != NULL, "edit %zu: '%s' not in the cache", k, edit[k].from);
        if (!at) {
            free(copy);
            continue;
        }
        snprintf(copy, olen + 64, "%.*s%s%s", (int)(at - orig), orig, edit[k].to, at + strlen(edit[k].from));
        CHECK(kiln__write_file_atomic(p, copy, strlen(copy)) == KILN_OK);
        kiln_status st = kiln__calib_cache_read(p, t.model_hash, true, 42, "percentile:99.9", &r, &exists);
        CHECK_MSG(st == KILN_ERR_PARSE && strstr(kiln_last_error(), edit[k].msg), "edit %zu: %s", k, kiln_last_error());
        CHECK(same_file_text(p, copy));
        free(copy);
    }
    const char *garbage[] = {"", "hello\n", "# kiln calibration cache\n", "\177ELF\x01\x02"};
    for (size_t k = 0; k < sizeof garbage / sizeof garbage[0]; k++) {
        CHECK(kiln__write_file_atomic(p, garbage[k], strlen(garbage[k])) == KILN_OK);
        CHECK(kiln__calib_cache_read(p, t.model_hash, true, 42, "percentile:99.9", &r, &exists) == KILN_ERR_PARSE);
        CHECK(same_file_text(p, garbage[k]));
    }
    /* random byte edits, truncations and insertions never crash the parser; an accepted text is a
     * well-formed table */
    unsigned long long seed = 99;
    char *buf = malloc(olen + 8);
    int accepted = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, orig, olen + 1);
        size_t len = olen;
        int edits = 1 + (int)(test_rng(&seed) % 3);
        for (int k = 0; k < edits; k++) {
            size_t at = (size_t)(test_rng(&seed) % len);
            switch (test_rng(&seed) % 3) {
            case 0: buf[at] = (char)(test_rng(&seed) % 255 + 1); break;
            case 1: len = at; buf[len] = 0; break;
            default: memmove(buf + at + 1, buf + at, len - at + 1); buf[at] = "\"\\ \nx0-e9"[test_rng(&seed) % 10]; len++;
            }
            if (!len)
                break;
        }
        kiln_status st = kiln__calib_cache_parse("fuzz", buf, len, t.model_hash, true, 42, "percentile:99.9", &r);
        if (st == KILN_OK) {
            accepted++;
            for (int i = 0; i < r.n; i++) {
                double hi = (double)r.amax[i] / 127;
                CHECK(r.name[i] && r.scale[i] > 0 && r.amax[i] >= 0);
                CHECK(r.amax[i] == 0 ? r.scale[i] == 1
                                     : r.scale[i] <= hi * (1 + 1e-6) && r.scale[i] >= hi / 2048 * (1 - 1e-6));
                for (int j = 0; j < i; j++)
                    CHECK(strcmp(r.name[i], r.name[j]));
            }
            kiln__calib_table_free(&r);
        }
    }
    CHECK(accepted < 3000);
    free(buf);
    kiln__write_file_atomic(p, orig, olen);
    CHECK(kiln__write_file_atomic(p, orig, olen - 5) == KILN_OK);   /* truncated last line */
    CHECK(kiln__calib_cache_read(p, t.model_hash, true, 42, "percentile:99.9", &r, &exists) != KILN_OK);
    free(orig);
    /* a directory, a FIFO: not regular files */
    const char *d = path_of("cachedir", NULL);
    mkdir(d, 0700);
    CHECK(kiln__calib_cache_read(d, 1, true, 42, "entropy", &r, &exists) == KILN_ERR_IO && exists);
    const char *fifo = path_of("cachefifo", NULL);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(kiln__calib_cache_read(fifo, 1, true, 42, "entropy", &r, &exists) == KILN_ERR_IO && exists);
    /* absent: not an error */
    CHECK(kiln__calib_cache_read(path_of("nothing", NULL), 1, true, 42, "entropy", &r, &exists) == KILN_OK && !exists);
}

/* --- end to end on tiny_cnn: shuffled names, reuse, stale data, batching --- */
static void test_tiny_cnn(void)
{
    kiln_model_t m;
    CHECK(kiln_model_load("models/tiny_cnn.onnx", &m) == KILN_OK);
    char a[1024], b[1024], ca[1024], cb[1024];
    snprintf(a, sizeof a, "%s", path_of("cnn_a", NULL));
    snprintf(b, sizeof b, "%s", path_of("cnn_b", NULL));
    snprintf(ca, sizeof ca, "%s", path_of("cnn_a.cache", NULL));
    snprintf(cb, sizeof cb, "%s", path_of("cnn_b.cache", NULL));
    mkdir(a, 0700);
    mkdir(b, 0700);
    enum { NF = 9 };
    int perm[NF] = {4, 7, 0, 8, 2, 6, 1, 3, 5};
    for (int i = 0; i < NF; i++) {
        int64_t dims[] = {1 + i % 4, 3, 16, 16};   /* 1..4 samples a file: runs cross file boundaries */
        char fa[64], fb[64];
        snprintf(fa, sizeof fa, "sample_%02d.npy", i);
        snprintf(fb, sizeof fb, "%c_other_name.npy", 'a' + perm[i]);
        write_npy(path_of("cnn_a", fa), KILN_DT_FLOAT32, 4, dims, 1000 + (unsigned)i, 1.0 + i);
        write_npy(path_of("cnn_b", fb), KILN_DT_FLOAT32, 4, dims, 1000 + (unsigned)i, 1.0 + i);
    }
    kiln_calibration_t r = NULL, r2 = NULL;
    CHECK(calibrate(m, a, ca, KILN_CALIB_ENTROPY, 4, &r) == KILN_OK);
    CHECK(r && !kiln_calib_from_cache(r) && kiln_calib_num_samples(r) == 1 + 2 + 3 + 4 + 1 + 2 + 3 + 4 + 1);
    CHECK(r && kiln_calib_num_tensors(r) > 20);
    CHECK(r && !strcmp(kiln_calib_tensor_name(r, 0), "input") && kiln_calib_amax(r, 0) <= 9.0f &&
          kiln_calib_amax(r, 0) > 8.9f);
    for (int i = 0; r && i < kiln_calib_num_tensors(r); i++)
        CHECK(kiln_calib_scale(r, i) > 0 && kiln_calib_scale(r, i) * 127 <= kiln_calib_amax(r, i) * 1.0001f + 1e-30f);
    CHECK(calibrate(m, b, cb, KILN_CALIB_ENTROPY, 4, &r2) == KILN_OK);
    size_t la = 0, lb = 0;
    char *ta = slurp(ca, &la), *tb = slurp(cb, &lb);
    CHECK_MSG(ta && tb && la == lb && !memcmp(ta, tb, la), "caches differ under shuffled file names");
    kiln_calibration_free(r2);
    /* reused: no data run (the data directory may even be gone) */
    r2 = NULL;
    CHECK(calibrate(m, NULL, ca, KILN_CALIB_ENTROPY, 0, &r2) == KILN_OK && kiln_calib_from_cache(r2));
    CHECK(r2 && r && kiln_calib_num_tensors(r2) == kiln_calib_num_tensors(r));
    for (int i = 0; r && r2 && i < kiln_calib_num_tensors(r); i++)
        CHECK(kiln_calib_scale(r, i) == kiln_calib_scale(r2, i) && kiln_calib_amax(r, i) == kiln_calib_amax(r2, i) &&
              !strcmp(kiln_calib_tensor_name(r, i), kiln_calib_tensor_name(r2, i)));
    kiln_calibration_free(r2);
    CHECK(calibrate(m, a, ca, KILN_CALIB_ENTROPY, 0, &r2) == KILN_OK && kiln_calib_from_cache(r2));
    kiln_calibration_free(r2);
    /* other data, other method: refused, untouched */
    write_npy(path_of("cnn_a", "extra.npy"), KILN_DT_FLOAT32, 4, (int64_t[]){1, 3, 16, 16}, 77, 1);
    CHECK(calibrate(m, a, ca, KILN_CALIB_ENTROPY, 0, &r2) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "data hash") != NULL);
    CHECK(calibrate(m, b, ca, KILN_CALIB_MINMAX, 0, &r2) == KILN_ERR_INVALID_ARG);
    CHECK(same_file_text(ca, ta));
    /* another model: refused */
    kiln_model_t cls;
    CHECK(kiln_model_load("models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", &cls) == KILN_OK);
    CHECK(calibrate(cls, NULL, ca, KILN_CALIB_ENTROPY, 0, &r2) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "model hash") != NULL);
    CHECK(same_file_text(ca, ta));
    kiln_model_free(cls);
    /* the batch size does not change which samples are seen: minmax is the same for runs of 1 and 32
     * up to the rounding of differently blocked kernels */
    kiln_calibration_t r1 = NULL, r32 = NULL;
    CHECK(calibrate(m, b, NULL, KILN_CALIB_MINMAX, 1, &r1) == KILN_OK);
    CHECK(calibrate(m, b, NULL, KILN_CALIB_MINMAX, 32, &r32) == KILN_OK);
    for (int i = 0; r1 && r32 && i < kiln_calib_num_tensors(r1); i++)
        CHECK_CLOSE(kiln_calib_amax(r1, i), kiln_calib_amax(r32, i), 1e-4 * kiln_calib_amax(r1, i));
    kiln_calibration_free(r1);
    kiln_calibration_free(r32);
    kiln_free(ta);
    kiln_free(tb);
    kiln_calibration_free(r);
    /* bad data sets */
    const char *e = path_of("empty", NULL);
    mkdir(e, 0700);
    CHECK(calibrate(m, e, NULL, KILN_CALIB_MINMAX, 0, &r2) == KILN_ERR_INVALID_ARG);
    CHECK(calibrate(m, path_of("missing", NULL), NULL, KILN_CALIB_MINMAX, 0, &r2) == KILN_ERR_IO);
    const char *g = path_of("garbage", NULL);
    mkdir(g, 0700);
    kiln__write_file_atomic(path_of("garbage", "x.npy"), "\x93NUMPY\x01\x00{'descr'", 17);
    CHECK(calibrate(m, g, NULL, KILN_CALIB_MINMAX, 0, &r2) == KILN_ERR_PARSE);
    const char *s = path_of("scalar", NULL);
    mkdir(s, 0700);
    write_npy(path_of("scalar", "x.npy"), KILN_DT_FLOAT32, 0, (int64_t[]){0}, 1, 1);
    CHECK(calibrate(m, s, NULL, KILN_CALIB_MINMAX, 0, &r2) == KILN_ERR_SHAPE);
    const char *w = path_of("wrongshape", NULL);
    mkdir(w, 0700);
    write_npy(path_of("wrongshape", "x.npy"), KILN_DT_FLOAT32, 3, (int64_t[]){2, 16, 16}, 1, 1);
    CHECK(calibrate(m, w, NULL, KILN_CALIB_MINMAX, 0, &r2) == KILN_ERR_SHAPE);
    CHECK(calibrate(m, NULL, path_of("absent.cache", NULL), KILN_CALIB_MINMAX, 0, &r2) == KILN_ERR_INVALID_ARG);
    /* a tensor that held NaN/Inf only has no range: an error naming it (it got scale 1, an all-zero tensor's);
     * an all-NaN sample next to finite ones only leaves its values out (a warning) */
    const char *nd = path_of("allnan", NULL);
    mkdir(nd, 0700);
    write_nan_npy(path_of("allnan", "x.npy"), (int64_t[]){2, 3, 16, 16});
    CHECK(calibrate(m, nd, path_of("allnan.cache", NULL), KILN_CALIB_MSE, 0, &r2) == KILN_ERR_INVALID_ARG);
    CHECK_MSG(strstr(kiln_last_error(), "tensor 'input' held no finite value in the calibration data (1536 values, "
                                        "all NaN or Inf)") && strstr(kiln_last_error(), "other tensors)"),
              "%s", kiln_last_error());
    CHECK(access(path_of("allnan.cache", NULL), F_OK) != 0);   /* no cache written */
    write_npy(path_of("allnan", "y.npy"), KILN_DT_FLOAT32, 4, (int64_t[]){1, 3, 16, 16}, 5, 1);
    CHECK(calibrate(m, nd, NULL, KILN_CALIB_MSE, 0, &r2) == KILN_OK);
    CHECK(r2 && !strcmp(kiln_calib_tensor_name(r2, 0), "input") && kiln_calib_amax(r2, 0) > 0 &&
          kiln_calib_amax(r2, 0) <= 1);
    kiln_calibration_free(r2);
    kiln_model_free(m);
}

/* --- PaddleOCR cls (x: Nx3x48x192) --- */
static void test_ocr_cls(void)
{
    kiln_model_t m;
    CHECK(kiln_model_load("models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", &m) == KILN_OK);
    const char *d = path_of("cls", NULL);
    mkdir(d, 0700);
    for (int i = 0; i < 3; i++) {
        char f[32];
        snprintf(f, sizeof f, "batch%d.npy", i);
        write_npy(path_of("cls", f), KILN_DT_FLOAT32, 4, (int64_t[]){4, 3, 48, 192}, 5 + (unsigned)i, 1);
    }
    kiln_calibration_t r = NULL;
    CHECK(calibrate(m, d, path_of("cls.cache", NULL), KILN_CALIB_PERCENTILE, 8, &r) == KILN_OK);
    CHECK(r && kiln_calib_num_samples(r) == 12 && kiln_calib_num_tensors(r) > 100);
    CHECK(r && !strcmp(kiln_calib_method_name(r), "percentile:99.99"));
    int found = 0;
    for (int i = 0; r && i < kiln_calib_num_tensors(r); i++) {
        CHECK(kiln_calib_scale(r, i) > 0 && kiln_calib_amax(r, i) >= 0);
        found += !strcmp(kiln_calib_tensor_name(r, i), "softmax_0.tmp_0");
        CHECK(strncmp(kiln_calib_tensor_name(r, i), "batch_norm_0.b_0", 16));   /* constants are not activations */
    }
    CHECK(found == 1);
    kiln_calibration_free(r);
    kiln_model_free(m);
}

/* --- three int64 inputs, NAME_KEY.npy, different sequence lengths --- */
static void test_multi_input(void)
{
    kiln_model_t m;
    CHECK(kiln_model_load("models/tiny_bert.onnx", &m) == KILN_OK);
    const char *d = path_of("bert", NULL), *names[] = {"input_ids", "attention_mask", "token_type_ids"};
    mkdir(d, 0700);
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 3; i++) {
            char f[64];
            snprintf(f, sizeof f, "%s_%d.npy", names[i], k);
            write_npy(path_of("bert", f), KILN_DT_INT64, 2, (int64_t[]){2, 8 + 4 * (k % 2)}, 9 + (unsigned)(k * 3 + i),
                      i == 0 ? 100 : 2);
        }
    kiln_calibration_t r = NULL;
    CHECK(calibrate(m, d, NULL, KILN_CALIB_MSE, 0, &r) == KILN_OK);
    CHECK(r && kiln_calib_num_samples(r) == 8 && kiln_calib_num_tensors(r) > 10);
    for (int i = 0; r && i < kiln_calib_num_tensors(r); i++)
        CHECK(strcmp(kiln_calib_tensor_name(r, i), "input_ids"));   /* integer tensors are not calibrated */
    kiln_calibration_free(r);
    unlink(path_of("bert", "attention_mask_3.npy"));
    CHECK(calibrate(m, d, NULL, KILN_CALIB_MSE, 0, &r) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "attention_mask_3.npy") != NULL);
    write_npy(path_of("bert", "stray.npy"), KILN_DT_INT64, 2, (int64_t[]){2, 8}, 1, 1);
    CHECK(calibrate(m, d, NULL, KILN_CALIB_MSE, 0, &r) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "stray.npy") != NULL);
    kiln_model_free(m);
}

int main(void)
{
    if (!mkdtemp(root))
        return 1;
    test_cache_roundtrip();
    test_tiny_cnn();
    test_ocr_cls();
    test_multi_input();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return TEST_SUMMARY();
}
