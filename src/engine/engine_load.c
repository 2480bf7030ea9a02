/* Loading engine files: memory-mapped read-only (MAP_PRIVATE, PROT_READ) with the weights used in
 * place, or read into memory (KILN_ENGINE_LOAD_COPY). Either way the engine owns the bytes its
 * initializers borrow and releases them in kiln_engine_free. Format and the integrity contract:
 * docs/ENGINE_FORMAT.md. */
#include "engine.h"
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Maps the whole file privately and read-only; its size is taken once, from the open descriptor,
 * and the header must agree with it (checked by the parser) before anything is trusted.
 * MAP_POPULATE: the checksums read every page anyway, and populating the page tables in one call
 * is cheaper than a fault per page (about 20% of the load time of a 100 MB engine). */
static kiln_status map_file(const char *path, void **p, size_t *len)
{
    *p = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return kiln__err(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    kiln_status st = KILN_OK;
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        st = kiln__err(KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = kiln__err(KILN_ERR_IO, "'%s' is not a regular file", path);
    else if (sb.st_size < 0 || (uint64_t)sb.st_size > SIZE_MAX / 2)
        st = kiln__err(KILN_ERR_LIMIT, "'%s' is too large to map (%lld bytes)", path, (long long)sb.st_size);
    else if (sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (m == MAP_FAILED)
            st = kiln__err(KILN_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
        else {
            *p = m;
            *len = (size_t)sb.st_size;
        }
    }
    close(fd);
    return st;
}

kiln_status kiln_engine_load_ex(const char *path, unsigned flags, kiln_engine_t *out)
{
    if (!path || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_load: NULL argument");
    *out = NULL;
    if (flags & ~KILN_ENGINE_LOAD_COPY)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_load_ex: unknown flags 0x%x", flags & ~KILN_ENGINE_LOAD_COPY);
    bool mapped = !(flags & KILN_ENGINE_LOAD_COPY);
    void *buf;
    size_t len;
    KILN_TRY(mapped ? map_file(path, &buf, &len) : kiln__read_file(path, &buf, &len));
    static const uint8_t empty[1];
    kiln_status st = kiln__engine_parse(buf ? buf : empty, len, true, out);
    if (st == KILN_OK) {
        (*out)->backing = buf;
        (*out)->backing_len = len;
        (*out)->backing_mapped = mapped;
        return KILN_OK;
    }
    kiln__err_prefix("%s", path);
    if (mapped && buf)
        munmap(buf, len);
    else if (!mapped)
        kiln__free(buf);
    return st;
}

kiln_status kiln_engine_load(const char *path, kiln_engine_t *out)
{
    return kiln_engine_load_ex(path, KILN_ENGINE_LOAD_DEFAULT, out);
}

void kiln_engine_free(kiln_engine_t e)
{
    if (!e)
        return;
    kiln__graph_free(e->g);   /* before the bytes its initializers borrow */
    kiln__free(e->manifest);
    kiln__engine_free_profiles(e);
    kiln__plan_free(&e->plan);
    kiln__free(e->plan_ndim);
    kiln__free(e->plan_dims);
    if (e->backing_mapped)
        munmap(e->backing, e->backing_len);
    else
        kiln__free(e->backing);
    kiln__free(e);
}
