/* Whole-file reading with clear errors. */
#include "core.h"
#include <errno.h>
#include <stdio.h>

kiln_status kiln__read_file(const char *path, void **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kiln__err(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    kiln_status st = KILN_OK;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        st = kiln__err(KILN_ERR_IO, "cannot seek '%s'", path);
        goto done;
    }
    long sz = ftell(f);
    if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = kiln__err(KILN_ERR_IO, "cannot size '%s' (not a regular file?)", path);
        goto done;
    }
    buf = kiln__malloc((size_t)sz + 1);
    if (!buf) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory reading '%s' (%ld bytes)", path, sz);
        goto done;
    }
    if (sz && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        st = kiln__err(KILN_ERR_IO, "short read on '%s'", path);
        kiln__free(buf);
        buf = NULL;
        goto done;
    }
    buf[sz] = 0;
    *data = buf;
    *len = (size_t)sz;
done:
    fclose(f);
    return st;
}
