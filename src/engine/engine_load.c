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
/* Opens path for reading: a regular file of at most SIZE_MAX / 2 bytes (what = "map" or "read",
 * for the message). On success *fd is open and *size its size. */
static kiln_status open_engine_file(const char *path, const char *what, int *fd, size_t *size)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0)
        return kiln__err(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    kiln_status st = KILN_OK;
    struct stat sb;
    if (fstat(*fd, &sb) != 0)
        st = kiln__err(KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = kiln__err(KILN_ERR_IO, "'%s' is not a regular file", path);
    else if (sb.st_size < 0 || (uint64_t)sb.st_size > SIZE_MAX / 2)
        st = kiln__err(KILN_ERR_LIMIT, "'%s' is too large to %s (%lld bytes)", path, what, (long long)sb.st_size);
    if (st != KILN_OK) {
        close(*fd);
        *fd = -1;
        return st;
    }
    *size = (size_t)sb.st_size;
    return KILN_OK;
}

static kiln_status map_file(const char *path, void **p, size_t *len)
{
    *p = NULL;
    *len = 0;
    int fd;
    size_t size;
    KILN_TRY(open_engine_file(path, "map", &fd, &size));
    kiln_status st = KILN_OK;
    if (size > 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (m == MAP_FAILED)
            st = kiln__err(KILN_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
        else {
            *p = m;
            *len = size;
        }
    }
    close(fd);
    return st;
}

/* KILN_ENGINE_LOAD_COPY: the file read into one page-aligned allocation, so that its sections are
 * aligned in memory as in a mapping (prepared blobs are read with aligned loads). *mem is what
 * kiln_engine_free releases, *p the file's first byte. */
static kiln_status read_aligned(const char *path, void **mem, void **p, size_t *len)
{
    *mem = *p = NULL;
    *len = 0;
    int fd;
    size_t want;
    KILN_TRY(open_engine_file(path, "read", &fd, &want));
    kiln_status st = KILN_OK;
    if (!(*mem = kiln__malloc(want + KILN_ENGINE_SECTION_ALIGN)))
        st = kiln__err(KILN_ERR_NOMEM, "out of memory reading '%s' (%zu bytes)", path, want);
    if (st == KILN_OK) {
        uint8_t *b = (uint8_t *)*mem + (KILN_ENGINE_SECTION_ALIGN - (uintptr_t)*mem % KILN_ENGINE_SECTION_ALIGN) %
                                            KILN_ENGINE_SECTION_ALIGN;
        size_t got = 0;
        while (got < want) {
            ssize_t k = read(fd, b + got, want - got);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                st = k < 0 ? kiln__err(KILN_ERR_IO, "cannot read '%s': %s", path, strerror(errno))
                           : kiln__err(KILN_ERR_PARSE, "engine file '%s' shrank while being read", path);
                break;
            }
            got += (size_t)k;
        }
        *p = b;
        *len = want;
    }
    close(fd);
    if (st != KILN_OK) {
        kiln__free(*mem);
        *mem = *p = NULL;
    }
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
    void *buf, *mem = NULL;
    size_t len;
    KILN_TRY(mapped ? map_file(path, &buf, &len) : read_aligned(path, &mem, &buf, &len));
    static const uint8_t empty[1];
    kiln_status st = kiln__engine_parse(buf ? buf : empty, len, true, out);
    if (st == KILN_OK) {
        (*out)->backing = mapped ? buf : mem;
        (*out)->backing_len = mapped ? len : len + KILN_ENGINE_SECTION_ALIGN;   /* the allocation */
        (*out)->backing_mapped = mapped;
        return KILN_OK;
    }
    kiln__err_prefix("%s", path);
    if (mapped && buf)
        munmap(buf, len);
    else if (!mapped)
        kiln__free(mem);
    return st;
}

kiln_status kiln_engine_load(const char *path, kiln_engine_t *out)
{
    return kiln_engine_load_ex(path, KILN_ENGINE_LOAD_DEFAULT, out);
}

void kiln_engine_free(kiln_engine_t e)
{
    if (e)
        kiln__engine_release(e);
}

void kiln__engine_release(struct kiln_engine *e)
{
    /* the release that takes the count below 0 is the last holder's (acq_rel: every holder's accesses before it) */
    if (atomic_fetch_sub_explicit(&e->holders, 1, memory_order_acq_rel) > 0)
        return;
    kiln__graph_free(e->g);   /* before the bytes its initializers borrow */
    kiln__free(e->manifest);
    kiln__engine_free_profiles(e);
    kiln__plan_free(&e->plan);
    kiln__free(e->plan_ndim);
    kiln__free(e->plan_dims);
    kiln__free(e->layers);
    kiln__free(e->packed_mem);
    kiln__free(e->dev_tactics);
    if (e->backing_mapped)
        munmap(e->backing, e->backing_len);
    else
        kiln__free(e->backing);
    kiln__free(e);
}
