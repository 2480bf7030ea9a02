/* The engine a served model runs: model.kiln as is (read into memory), or model.onnx built on load
 * (for the model's device, in the precision its config asks for, int8 calibrated on a directory
 * beside it) and cached beside the model as <version>/.kiln-cache-<hash>-<size>.kiln, written
 * atomically. The hash covers the model bytes, the other files of the version directory (external
 * data), the build options, the calibration data and kiln's version, so a change of any of them
 * builds anew. */
#include "serve.h"
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)(n > 0 ? n : 0);
    return buf;
}

/* Writes buf to path atomically: a temporary file in the same directory, fsync, rename. */
static bool write_atomic(const char *path, const void *buf, size_t len)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return false;
    const char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, p + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    bool ok = done == len && fchmod(fd, 0644) == 0 && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
    return ok;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The entries of dir that keep(name) accepts, sorted by name (hashes must not depend on readdir's
 * order); "." and ".." never. false with err filled when dir cannot be read or memory runs out. */
static bool list_sorted(const char *dir, bool (*keep)(const char *name), char ***out, size_t *out_n, char *err,
                        size_t errlen)
{
    *out = NULL;
    *out_n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return snprintf(err, errlen, "%s: %s", dir, strerror(errno)), false;
    char **names = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    for (struct dirent *de; ok && (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !keep(de->d_name))
            continue;
        if (n == cap) {
            char **g = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
            ok = g != NULL;
            names = g ? g : names;
        }
        if (ok && !(names[n] = strdup(de->d_name)))
            ok = false;
        n += ok;
    }
    closedir(d);
    if (!ok) {
        free_names(names, n);
        return snprintf(err, errlen, "%s: out of memory", dir), false;
    }
    qsort(names, n, sizeof *names, cmp_str);
    *out = names;
    *out_n = n;
    return true;
}

static bool is_npy(const char *name)
{
    size_t l = strlen(name);
    return l >= 5 && !strcmp(name + l - 4, ".npy") && name[0] != '.';
}

/* Folds the names and bytes of the calibration directory's .npy files (in name order) into *h. */
static bool hash_calibration(const char *dir, uint64_t *h, char *err, size_t errlen)
{
    char **names;
    size_t n;
    char why[4600];
    if (!list_sorted(dir, is_npy, &names, &n, why, sizeof why))
        return snprintf(err, errlen, "calibration directory %s", why), false;
    bool ok = n > 0;
    if (!ok)
        snprintf(err, errlen, "calibration directory %s has no .npy files", dir);
    for (size_t i = 0; ok && i < n; i++) {
        char path[4400];
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char *bytes = read_all(path, &len);
        if (!bytes) {
            snprintf(err, errlen, "calibration file %s: cannot read", path);
            ok = false;
            break;
        }
        *h = sv_fnv1a(sv_fnv1a(*h, names[i], strlen(names[i]) + 1), bytes, len);
        free(bytes);
    }
    free_names(names, n);
    return ok;
}

/* Folds n bytes into h eight at a time (external data runs to gigabytes; byte-wise FNV-1a would
 * take seconds per load), the tail byte-wise. Not a cryptographic hash: it tells versions of a
 * file apart, it does not resist a forger. */
static uint64_t hash_words(uint64_t h, const unsigned char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    return sv_fnv1a(h, p + i, n - i);
}

/* Folds a regular file's size and bytes into *h, read in 1 MiB pieces; one that cannot be read
 * (whatever it is: the build reports it if the model needs it) folds its size and mtime instead. */
static void hash_file(const char *path, const struct stat *st, unsigned char *buf, size_t bufsize, uint64_t *h)
{
    uint64_t size = (uint64_t)st->st_size;
    *h = sv_fnv1a(*h, &size, sizeof size);
    FILE *f = fopen(path, "rb");
    size_t got;
    while (f && (got = fread(buf, 1, bufsize, f)) > 0)
        *h = hash_words(*h, buf, got);
    if (!f || ferror(f)) {
        int64_t t[2] = {(int64_t)st->st_mtim.tv_sec, (int64_t)st->st_mtim.tv_nsec};
        *h = sv_fnv1a(sv_fnv1a(*h, "?", 1), t, sizeof t);
    }
    if (f)
        fclose(f);
}

/* Not part of the key: kiln's cache files (and their temporaries), written beside the model. */
static bool not_cache(const char *name) { return strncmp(name, ".kiln-cache-", 12) != 0; }

/* Folds every regular file below dir (names relative to the version directory, sizes and bytes, in
 * name order; symbolic links and what is not a file or directory skipped, as the ONNX loader refuses
 * them) into *h, but model.onnx at the top, which the key already holds, and kiln's cache files. An
 * ONNX model's external data can only lie there (the loader confines it to the model's directory),
 * so new weights in an unchanged model.onnx build a new engine. */
static bool hash_tree(const char *dir, const char *rel, int depth, unsigned char *buf, size_t bufsize, uint64_t *h,
                      char *err, size_t errlen)
{
    char **names;
    size_t n;
    if (!list_sorted(dir, not_cache, &names, &n, err, errlen))
        return false;
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        char path[4400], sub[4400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
        if ((!rel[0] && !strcmp(names[i], "model.onnx")) || lstat(path, &st) != 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            *h = sv_fnv1a(*h, sub, strlen(sub) + 1);
            hash_file(path, &st, buf, bufsize, h);
        } else if (S_ISDIR(st.st_mode) && depth < 16) {
            *h = sv_fnv1a(*h, sub, strlen(sub) + 1);
            ok = hash_tree(path, sub, depth + 1, buf, bufsize, h, err, errlen);
        }
    }
    free_names(names, n);
    return ok;
}

/* hash_tree over the version directory vdir. */
static bool hash_version_dir(const char *vdir, uint64_t *h, char *err, size_t errlen)
{
    size_t bufsize = (size_t)1 << 20;
    unsigned char *buf = malloc(bufsize);
    if (!buf)
        return snprintf(err, errlen, "out of memory"), false;
    bool ok = hash_tree(vdir, "", 0, buf, bufsize, h, err, errlen);
    free(buf);
    return ok;
}

static kiln_status build(const char *bytes, size_t len, const char *mdir, const char *vdir, const sv_config *cfg,
                         kiln_device dev, kiln_engine_t *e)
{
    char calib_dir[4400];
    kiln_calib_options calib = {.method = KILN_CALIB_MSE};   /* as kiln calibrate */
    if (cfg->calibration[0]) {
        snprintf(calib_dir, sizeof calib_dir, "%s/%s", mdir, cfg->calibration);
        calib.data_dir = calib_dir;
        if (cfg->calibration_method[0])
            kiln_calib_method_parse(cfg->calibration_method, &calib.method, &calib.param);   /* checked by config.c */
    }
    kiln_model_t model = NULL;
    bool fp32 = !strcmp(cfg->precision, "fp32");
    kiln_build_options bo = {.device = dev, .precision = fp32 ? NULL : cfg->precision, .precision_fallback = !fp32,
                             .calib = cfg->calibration[0] ? &calib : NULL};
    kiln_status st = kiln_model_load_buffer(bytes, len, vdir, &model);
    if (st == KILN_OK)
        st = kiln_build(model, &bo, e);
    if (st == KILN_OK && bo.precision_report && bo.precision_report[0])
        fprintf(stderr, "kiln serve: %s: precision %s:\n%s", vdir, cfg->precision, bo.precision_report);
    kiln_free(bo.report);
    kiln_free(bo.precision_report);
    kiln_model_free(model);
    return st;
}

/* err = "path: msg", or msg alone when it names the path already (kiln_engine_load's messages do). */
static bool fail_at(const char *path, const char *msg, char *err, size_t errlen)
{
    if (strstr(msg, path))
        snprintf(err, errlen, "%s", msg);
    else
        snprintf(err, errlen, "%s: %s", path, msg);
    return false;
}

bool sv_open_engine(const char *mdir, const char *vdir, const sv_config *cfg, kiln_device dev, kiln_engine_t *e,
                    char *err, size_t errlen)
{
    char path[4200], cache[4300];
    snprintf(path, sizeof path, "%s/model.kiln", vdir);
    if (sv_is_file(path)) {
        /* read into memory, not mapped: a repository's model.kiln gets overwritten in place (cp, rsync
         * --inplace, a network volume), and a mapping would then read the new bytes past the load-time
         * checksums, or fault with SIGBUS when the file shrinks (docs/ENGINE_FORMAT.md, "Loading") */
        if (kiln_engine_load_ex(path, KILN_ENGINE_LOAD_COPY, e) != KILN_OK)
            return fail_at(path, kiln_last_error(), err, errlen);
        return true;
    }
    snprintf(path, sizeof path, "%s/model.onnx", vdir);
    size_t len;
    char *bytes = read_all(path, &len);
    if (!bytes)
        return snprintf(err, errlen, "%s: cannot read", path), false;
    /* the build options as text: what the cache is keyed by (fp32 CPU builds keep the key they had) */
    char opts[256];
    snprintf(opts, sizeof opts, "profiles=none;tactics=default%s%s%s%s%s", dev == KILN_DEVICE_CUDA ? ";device=cuda" : "",
             strcmp(cfg->precision, "fp32") ? ";precision=" : "", strcmp(cfg->precision, "fp32") ? cfg->precision : "",
             cfg->calibration_method[0] ? ";calibration_method=" : "", cfg->calibration_method);
    uint64_t h = sv_fnv1a(0xcbf29ce484222325ull, bytes, len);
    h = sv_fnv1a(h, opts, strlen(opts) + 1);
    h = sv_fnv1a(h, KILN_VERSION_STRING, sizeof KILN_VERSION_STRING);
    if (!hash_version_dir(vdir, &h, err, errlen)) {
        free(bytes);
        return false;
    }
    if (cfg->calibration[0]) {
        char dir[4400];
        snprintf(dir, sizeof dir, "%s/%s", mdir, cfg->calibration);
        if (!hash_calibration(dir, &h, err, errlen)) {
            free(bytes);
            return false;
        }
    }
    snprintf(cache, sizeof cache, "%s/.kiln-cache-%016llx-%zu.kiln", vdir, (unsigned long long)h, len);
    if (sv_is_file(cache) && kiln_engine_load(cache, e) == KILN_OK) {
        fprintf(stderr, "kiln serve: engine from cache %s\n", cache);
        free(bytes);
        return true;
    }
    kiln_status st = build(bytes, len, mdir, vdir, cfg, dev, e);
    free(bytes);
    if (st != KILN_OK)
        return fail_at(path, kiln_last_error(), err, errlen);
    void *buf;
    size_t blen;
    if (kiln_engine_serialize(*e, &buf, &blen) == KILN_OK) {
        if (!write_atomic(cache, buf, blen))
            fprintf(stderr, "kiln serve: warning: cannot write engine cache %s: %s\n", cache, strerror(errno));
        kiln_free(buf);
    }
    return true;
}
