/* NumPy .npy reading and writing (format versions 1.0-3.0 read, 1.0 written; little-endian, C order). */
#include "core.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static const struct { const char *descr; kiln_dtype dt; } npy_types[] = {
    {"<f4", KILN_DT_FLOAT32}, {"<f8", KILN_DT_FLOAT64}, {"<f2", KILN_DT_FLOAT16}, {"<i8", KILN_DT_INT64},
    {"<i4", KILN_DT_INT32},   {"<i2", KILN_DT_INT16},   {"|i1", KILN_DT_INT8},    {"|u1", KILN_DT_UINT8},
    {"<u2", KILN_DT_UINT16},  {"<u4", KILN_DT_UINT32},  {"<u8", KILN_DT_UINT64},  {"|b1", KILN_DT_BOOL},
    {"<i1", KILN_DT_INT8},    {"<u1", KILN_DT_UINT8},   {"|V2", KILN_DT_BFLOAT16},
};

/* Finds the value text after 'key': in a Python dict literal; NULL if absent. */
static const char *dict_value(const char *hdr, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p)
        return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p)
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

static kiln_status parse_header(const char *path, const char *hdr, kiln_tensor *t)
{
    const char *d = dict_value(hdr, "descr"), *fo = dict_value(hdr, "fortran_order"), *sh = dict_value(hdr, "shape");
    if (!d || !fo || !sh || *d != '\'' || *sh != '(')
        return kiln__err(KILN_ERR_PARSE, "%s: malformed .npy header", path);
    t->dtype = KILN_DT_UNDEFINED;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++) {
        size_t l = strlen(npy_types[i].descr);
        if (strncmp(d + 1, npy_types[i].descr, l) == 0 && d[1 + l] == '\'') {
            t->dtype = npy_types[i].dt;
            break;
        }
    }
    if (t->dtype == KILN_DT_UNDEFINED) {
        /* the descr alone, 'X' (up to its closing quote, at most 16 characters): %.8s of the header ran on into the
         * next key ("'>f4', '") */
        int len = (int)strcspn(d + 1, "'");
        return kiln__err(KILN_ERR_UNSUPPORTED, "%s: unsupported .npy dtype '%.*s'%s (need little-endian numeric)", path,
                         len < 16 ? len : 16, d + 1, len > 16 ? "..." : "");
    }
    if (strncmp(fo, "True", 4) == 0)
        return kiln__err(KILN_ERR_UNSUPPORTED, "%s: Fortran-order arrays are not supported", path);
    const char *p = sh + 1;
    t->ndim = 0;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || errno)
            return kiln__err(KILN_ERR_PARSE, "%s: malformed shape in .npy header", path);
        if (t->ndim >= KILN_MAX_DIMS)
            return kiln__err(KILN_ERR_LIMIT, "%s: rank exceeds %d", path, KILN_MAX_DIMS);
        t->dims[t->ndim++] = v;
        p = end;
        while (*p == 'L')
            p++;
    }
    return KILN_OK;
}

kiln_status kiln_npy_read(const char *path, kiln_tensor *out)
{
    if (!path || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_npy_read: NULL argument");
    memset(out, 0, sizeof *out);
    void *buf;
    size_t len;
    KILN_TRY(kiln__read_file(path, &buf, &len));
    const unsigned char *b = buf;
    kiln_status st = KILN_OK;
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
        st = kiln__err(KILN_ERR_PARSE, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    size_t hlen, hoff;
    if (b[6] == 1) {
        hlen = b[8] | (size_t)b[9] << 8;
        hoff = 10;
    } else if ((b[6] == 2 || b[6] == 3) && len >= 12) {
        hlen = b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        hoff = 12;
    } else {
        st = kiln__err(KILN_ERR_PARSE, "%s: unsupported .npy version %d", path, b[6]);
        goto done;
    }
    if (hlen > len - hoff) {
        st = kiln__err(KILN_ERR_PARSE, "%s: truncated .npy header", path);
        goto done;
    }
    char *hdr = kiln__strndup((const char *)b + hoff, hlen);
    if (!hdr) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    kiln_tensor shape;
    memset(&shape, 0, sizeof shape);
    st = parse_header(path, hdr, &shape);
    kiln__free(hdr);
    if (st != KILN_OK)
        goto done;
    /* the data must be in the file before anything of the claimed size is allocated */
    size_t have = len - hoff - hlen, esize = kiln_dtype_size(shape.dtype);
    int64_t numel = kiln__shape_numel(shape.ndim, shape.dims);
    if (numel < 0 || esize == 0 || (uint64_t)numel > have / esize) {
        char need[32] = "more than that";
        if (numel >= 0 && esize && (uint64_t)numel <= SIZE_MAX / esize)
            snprintf(need, sizeof need, "%zu", (size_t)numel * esize);
        st = kiln__err(KILN_ERR_PARSE, "%s: data is truncated (%zu bytes, shape needs %s)", path, have, need);
        goto done;
    }
    st = kiln__tensor_alloc(out, shape.dtype, shape.ndim, shape.dims);
    if (st != KILN_OK) {
        kiln__err_prefix("%s", path);
        goto done;
    }
    memcpy(out->data, b + hoff + hlen, out->nbytes);
done:
    kiln__free(buf);
    return st;
}

kiln_status kiln_npy_write(const char *path, const kiln_tensor *t)
{
    if (!path || !t)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_npy_write: NULL argument");
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (npy_types[i].dt == t->dtype) {
            descr = npy_types[i].descr;
            break;
        }
    if (!descr)
        return kiln__err(KILN_ERR_UNSUPPORTED, "cannot write dtype %s to .npy", kiln_dtype_name(t->dtype));
    char hdr[512];
    int o = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->ndim; i++)
        o += snprintf(hdr + o, sizeof hdr - (size_t)o, "%lld,%s", (long long)t->dims[i],
                      i + 1 < t->ndim ? " " : "");
    if (t->ndim > 1)
        o--;  /* numpy writes (2, 3) but (5,) */
    o += snprintf(hdr + o, sizeof hdr - (size_t)o, "), }");
    /* pad with spaces so that magic+len+header is a multiple of 64, ending in '\n' */
    int total = 10 + o + 1;
    int pad = (64 - total % 64) % 64;
    memset(hdr + o, ' ', (size_t)pad);
    o += pad;
    hdr[o++] = '\n';
    kiln__afile af;
    KILN_TRY(kiln__afile_open(&af, path));
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(o & 0xff), (unsigned char)(o >> 8)};
    size_t n = (size_t)kiln_tensor_numel(t) * kiln_dtype_size(t->dtype);
    bool ok = fwrite(pre, 1, 10, af.f) == 10 && fwrite(hdr, 1, (size_t)o, af.f) == (size_t)o &&
              (n == 0 || fwrite(t->data, 1, n, af.f) == n);
    if (!ok) {
        kiln_status st = kiln__err(KILN_ERR_IO, "write error on '%s': %s", path, strerror(errno));
        kiln__afile_abort(&af);
        return st;
    }
    return kiln__afile_commit(&af);
}
