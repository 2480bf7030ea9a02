/* Public wrappers of core utilities the tools need (kiln.h "tooling" block): tensor files by
 * extension, terminal-safe escaping, same-file checks, atomic file writes, the default thread count. */
#include "core.h"
#include <stdlib.h>

kiln_status kiln_tensor_read(const char *path, kiln_tensor *out)
{
    if (!path || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_tensor_read: NULL argument");
    size_t l = strlen(path);
    if (l > 3 && strcmp(path + l - 3, ".pb") == 0)
        return kiln_tensor_pb_read(path, out);
    return kiln_npy_read(path, out);
}

size_t kiln_escape(char *out, size_t n, const char *in)
{
    return kiln__escape(n ? out : NULL, out ? n : 0, in ? in : "");
}

bool kiln_same_file(const char *a, const char *b)
{
    return a && b && kiln__same_file(a, b);
}

int kiln_resolve_threads(int requested)
{
    return kiln__resolve_threads(requested);
}

kiln_status kiln_write_file_atomic(const char *path, const void *data, size_t len)
{
    if (!path || (!data && len))
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_write_file_atomic: NULL argument");
    return kiln__write_file_atomic(path, data ? data : "", len);
}

struct kiln_atomic_file {
    kiln__afile af;
};

kiln_status kiln_atomic_file_open(const char *path, kiln_atomic_file_t *out)
{
    if (!path || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_atomic_file_open: NULL argument");
    *out = NULL;
    struct kiln_atomic_file *f = kiln__calloc(1, sizeof *f);
    if (!f)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = kiln__afile_open(&f->af, path);
    if (st != KILN_OK) {
        kiln__free(f);
        return st;
    }
    *out = f;
    return KILN_OK;
}

kiln_status kiln_atomic_file_write(kiln_atomic_file_t f, const void *data, size_t len)
{
    if (!f || (!data && len))
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_atomic_file_write: NULL argument");
    if (len && fwrite(data, 1, len, f->af.f) != len)
        return kiln__err(KILN_ERR_IO, "cannot write '%s'", f->af.path);
    return KILN_OK;
}

kiln_status kiln_atomic_file_commit(kiln_atomic_file_t f)
{
    if (!f)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_atomic_file_commit: NULL argument");
    kiln_status st = kiln__afile_commit(&f->af);
    kiln__free(f);
    return st;
}

void kiln_atomic_file_abort(kiln_atomic_file_t f)
{
    if (!f)
        return;
    kiln__afile_abort(&f->af);
    kiln__free(f);
}
