/* Whole-file reading with clear errors, and file identity. Only regular files are read, and
 * their size is known (and checked) before anything is allocated: a directory, device or FIFO
 * is refused instead of being "sized" by seeking. */
#include "core.h"
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) || S_ISBLK(m) ? "a device"
           : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

kiln_status kiln__read_file(const char *path, void **data, size_t *len)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return kiln__err(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    kiln_status st = KILN_OK;
    char *buf = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = kiln__err(KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = kiln__err(KILN_ERR_IO, "'%s' is not a regular file (it is %s)", path, file_kind(sb.st_mode));
        goto done;
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size >= SIZE_MAX / 2) {
        st = kiln__err(KILN_ERR_LIMIT, "'%s' is too large to read (%lld bytes)", path, (long long)sb.st_size);
        goto done;
    }
    size_t sz = (size_t)sb.st_size, got = 0;
    buf = kiln__malloc(sz + 1);
    if (!buf) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory reading '%s' (%zu bytes)", path, sz);
        goto done;
    }
    while (got < sz) {
        ssize_t k = read(fd, buf + got, sz - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            st = k < 0 ? kiln__err(KILN_ERR_IO, "cannot read '%s': %s", path, strerror(errno))
                       : kiln__err(KILN_ERR_IO, "short read on '%s' (the file shrank while being read)", path);
            kiln__free(buf);
            buf = NULL;
            goto done;
        }
        got += (size_t)k;
    }
    buf[sz] = 0;
    *data = buf;
    *len = sz;
done:
    close(fd);
    return st;
}

bool kiln__same_file(const char *a, const char *b)
{
    struct stat x, y;
    return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}
