/* The engine a served model runs: model.kiln as is (read into memory), or model.onnx built on load
 * (for the model's device, in the precision its config asks for, int8 calibrated on a directory
 * beside it) and cached beside the model as <version>/.kiln-cache-<hash>-<size>.kiln, written atomically. The
 * hash covers the model bytes, the build options, the calibration data and kiln's version, so a
 * change of any of them builds anew. */
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

/* Folds the names and bytes of the calibration directory's .npy files (in name order) into *h. */
static bool hash_calibration(const char *dir, uint64_t *h, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return snprintf(err, errlen, "calibration directory %s: %s", dir, strerror(errno)), false;
    char **names = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    for (struct dirent *de; ok && (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 4, ".npy") || de->d_name[0] == '.')
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
    if (ok && n == 0) {
        snprintf(err, errlen, "calibration directory %s has no .npy files", dir);
        ok = false;
    } else if (!ok) {
        snprintf(err, errlen, "out of memory");
    }
    if (ok)
        qsort(names, n, sizeof *names, cmp_str);
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
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
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
