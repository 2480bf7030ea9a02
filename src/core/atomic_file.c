/* Crash- and concurrency-safe file writing: every file kiln writes goes through here.
 * The data goes to a new temporary file in the destination's directory (".NAME.tmp-XXXXXX"),
 * is flushed and fsync'ed, and only when complete is renamed over the destination; then the
 * directory is fsync'ed. Readers see the old file or the new one, never a partial one; a failed
 * write leaves the old file byte-identical and removes the temporary (a process killed mid-write
 * can leave the temporary behind, never a partial NAME). A destination that is a symlink is
 * written through (the link's target is replaced); one that exists and is not a regular file
 * (directory, device, FIFO) is refused. */
#include "core.h"
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The file a write to `path` replaces: the path itself, or a symlink's resolved target. */
static kiln_status resolve_target(const char *path, char **out, mode_t *mode, bool *exists)
{
    struct stat sb;
    *exists = false;
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT)
            return kiln__err(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        *out = kiln__strdup(path);
        return *out ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    if (S_ISLNK(sb.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real)
            return kiln__err(KILN_ERR_IO, "cannot write '%s': cannot resolve symlink: %s", path, strerror(errno));
        *out = kiln__strdup(real);
        free(real);
        if (!*out)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        if (stat(*out, &sb) != 0) {
            kiln__free(*out);
            return kiln__err(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        }
    } else if (!(*out = kiln__strdup(path))) {
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    if (!S_ISREG(sb.st_mode)) {
        kiln__free(*out);
        return kiln__err(KILN_ERR_IO, "refusing to write '%s': it exists and is not a regular file", path);
    }
    *exists = true;
    *mode = sb.st_mode & 07777;
    return KILN_OK;
}

/* Creates a new file from `tmpl` (ending in XXXXXX) with O_EXCL; mode 0666 less the umask, as
 * fopen(path, "w") would give (mkstemp would give 0600). */
static int open_temp(char *tmpl)
{
    static const char abc[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    static atomic_ulong counter;
    size_t l = strlen(tmpl);
    for (int tries = 0; tries < 1000; tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t r = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 40 ^
                     (uint64_t)atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull;
        r ^= r >> 31;
        r *= 0xBF58476D1CE4E5B9ull;
        r ^= r >> 29;
        for (size_t i = 0; i < 6; i++, r /= 62)
            tmpl[l - 6 + i] = abc[r % 62];
        int fd = open(tmpl, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

kiln_status kiln__afile_open(kiln__afile *af, const char *path)
{
    memset(af, 0, sizeof *af);
    if (!path || !*path)
        return kiln__err(KILN_ERR_INVALID_ARG, "cannot write a file with an empty name");
    mode_t mode = 0;
    bool exists;
    KILN_TRY(resolve_target(path, &af->path, &mode, &exists));
    const char *slash = strrchr(af->path, '/');
    const char *base = slash ? slash + 1 : af->path;
    int dlen = slash ? (int)(slash - af->path) + 1 : 0;
    size_t n = strlen(af->path) + 32;
    af->tmp = kiln__malloc(n);
    if (!af->tmp) {
        kiln__free(af->path);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    /* the base name is cut so that the temporary's name stays within NAME_MAX */
    snprintf(af->tmp, n, "%.*s.%.200s.tmp-XXXXXX", dlen, af->path, base);
    int fd = open_temp(af->tmp);
    if (fd < 0) {
        kiln_status st = kiln__err(KILN_ERR_IO, "cannot create a temporary file next to '%s': %s", path, strerror(errno));
        kiln__free(af->tmp);
        kiln__free(af->path);
        return st;
    }
    if (exists)
        (void)fchmod(fd, mode);   /* the replacement keeps the old file's permissions */
    af->f = fdopen(fd, "wb");
    if (!af->f) {
        kiln_status st = kiln__err(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        close(fd);
        unlink(af->tmp);
        kiln__free(af->tmp);
        kiln__free(af->path);
        return st;
    }
    return KILN_OK;
}

void kiln__afile_abort(kiln__afile *af)
{
    if (af->f)
        fclose(af->f);
    if (af->tmp)
        unlink(af->tmp);
    kiln__free(af->tmp);
    kiln__free(af->path);
    memset(af, 0, sizeof *af);
}

static void fsync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);   /* best effort: some file systems do not sync directories */
        close(fd);
    }
}

kiln_status kiln__afile_commit(kiln__afile *af)
{
    if (!af->f)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln__afile_commit: no open file");
    errno = 0;
    bool ok = fflush(af->f) == 0 && !ferror(af->f) && fsync(fileno(af->f)) == 0;
    int err = errno;
    if (fclose(af->f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    af->f = NULL;
    if (ok && rename(af->tmp, af->path) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        kiln_status st = kiln__err(KILN_ERR_IO, "write error on '%s': %s (the old file, if any, is unchanged)",
                                   af->path, err ? strerror(err) : "stream error");
        kiln__afile_abort(af);
        return st;
    }
    fsync_dir(af->path);
    kiln__free(af->tmp);
    kiln__free(af->path);
    memset(af, 0, sizeof *af);
    return KILN_OK;
}

kiln_status kiln__write_file_atomic(const char *path, const void *data, size_t len)
{
    kiln__afile af;
    KILN_TRY(kiln__afile_open(&af, path));
    if (len && fwrite(data, 1, len, af.f) != len) {
        kiln_status st = kiln__err(KILN_ERR_IO, "write error on '%s': %s (the old file, if any, is unchanged)", path,
                                   strerror(errno));
        kiln__afile_abort(&af);
        return st;
    }
    return kiln__afile_commit(&af);
}
