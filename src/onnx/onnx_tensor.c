/* TensorProto -> kiln_tensor, with every size and count checked against the declared shape
 * before anything is allocated, and external data confined to the model directory. */
#include "onnx_tensor.h"
#include "onnx_wire.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define TNAME(tp) ((tp)->name ? (tp)->name : "")

/* Strict decimal parse of an external-data offset/length: digits only, no overflow. */
static bool parse_size(const char *s, int64_t *out)
{
    if (!s || !*s)
        return false;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (INT64_MAX - (*s - '0')) / 10)
            return false;
        v = v * 10 + (*s - '0');
    }
    *out = v;
    return true;
}

static kiln_status symlink_err(const char *tname, const char *loc, const char *comp)
{
    return kiln__err(KILN_ERR_PARSE, "tensor '%s': external data location '%s' goes through the symbolic link '%s' "
                     "(refused: it could point outside the model directory)", tname, loc, comp);
}

/* Opens `loc` (relative, '/'-separated) below the directory base_dir, one component at a time
 * with O_NOFOLLOW: a symbolic link anywhere in `loc` is refused, so the file cannot lie outside
 * the model directory, and the check cannot be raced by swapping a component for a link.
 * Only regular files are accepted (no devices, FIFOs or directories; nothing is opened for
 * reading before its type is known). On success *fd is open for reading and *st describes it. */
static kiln_status open_inside(const char *base_dir, const char *loc, const char *tname, int *fd, struct stat *st)
{
    *fd = -1;
    if (loc[0] == '/')
        return kiln__err(KILN_ERR_PARSE, "tensor '%s': external data location '%s' is an absolute path outside the "
                         "model directory", tname, loc);
    int dfd = open(base_dir && base_dir[0] ? base_dir : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return kiln__err(KILN_ERR_IO, "tensor '%s': cannot open the model directory '%s': %s", tname,
                         base_dir && base_dir[0] ? base_dir : ".", strerror(errno));
    kiln_status s = KILN_OK;
    const char *p = loc;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        char comp[NAME_MAX + 1];
        if (len > NAME_MAX) {
            s = kiln__err(KILN_ERR_PARSE, "tensor '%s': external data location '%s' has a component longer than %d "
                          "bytes", tname, loc, NAME_MAX);
            break;
        }
        memcpy(comp, p, len);
        comp[len] = 0;
        if (len == 2 && comp[0] == '.' && comp[1] == '.') {
            s = kiln__err(KILN_ERR_PARSE, "tensor '%s': external data location '%s' escapes the model directory",
                          tname, loc);
            break;
        }
        if (slash && (len == 0 || (len == 1 && comp[0] == '.'))) {
            p = slash + 1;   /* "a//b", "./a" */
            continue;
        }
        int nfd = openat(dfd, len ? comp : ".", O_PATH | O_NOFOLLOW | O_CLOEXEC | (slash ? O_DIRECTORY : 0));
        if (nfd < 0) {
            int e = errno;
            if (e == ELOOP || (e == ENOTDIR && fstatat(dfd, comp, st, AT_SYMLINK_NOFOLLOW) == 0 &&
                               S_ISLNK(st->st_mode)))
                s = symlink_err(tname, loc, comp);
            else
                s = kiln__err(KILN_ERR_IO, "tensor '%s': cannot open external data '%s' in '%s': %s", tname, loc,
                              base_dir && base_dir[0] ? base_dir : ".", strerror(e));
            break;
        }
        if (slash) {
            close(dfd);
            dfd = nfd;
            p = slash + 1;
            continue;
        }
        /* last component: check its type through the O_PATH descriptor, then open that file */
        if (fstat(nfd, st) != 0 || !S_ISREG(st->st_mode)) {
            bool link = S_ISLNK(st->st_mode);
            close(nfd);
            s = link ? symlink_err(tname, loc, comp)
                     : kiln__err(KILN_ERR_PARSE, "tensor '%s': external data '%s' is not a regular file", tname, loc);
            break;
        }
        struct stat st2;
        int rfd = openat(dfd, comp, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        close(nfd);
        if (rfd < 0 || fstat(rfd, &st2) != 0 || st2.st_dev != st->st_dev || st2.st_ino != st->st_ino) {
            if (rfd >= 0)
                close(rfd);
            s = kiln__err(KILN_ERR_IO, "tensor '%s': external data '%s' changed while being opened", tname, loc);
            break;
        }
        *fd = rfd;
        break;
    }
    close(dfd);
    return s;
}

/* Opens and checks a tensor's external data: the location is confined to the model directory,
 * and offset/length must fit in the file and equal the tensor's nbytes. Nothing is read yet,
 * so a huge declared shape without data is refused before its buffer is allocated. */
static kiln_status open_external(const Onnx__TensorProto *tp, const char *base_dir, size_t nbytes, int *fd,
                                 int64_t *offset_out)
{
    const char *loc = NULL, *tname = TNAME(tp);
    int64_t offset = 0, length = -1;
    *fd = -1;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        if (!e->key || !e->value)
            continue;
        if (strcmp(e->key, "location") == 0)
            loc = e->value;
        else if ((strcmp(e->key, "offset") == 0 && !parse_size(e->value, &offset)) ||
                 (strcmp(e->key, "length") == 0 && !parse_size(e->value, &length)))
            return kiln__err(KILN_ERR_PARSE, "tensor '%s': external data %s '%s' is not a non-negative integer",
                             tname, e->key, e->value);
    }
    if (!loc || !loc[0])
        return kiln__err(KILN_ERR_PARSE, "tensor '%s' has external data without a location", tname);
    if (length >= 0 && (uint64_t)length != nbytes)
        return kiln__err(KILN_ERR_PARSE, "tensor '%s': external data length %lld does not match its %zu bytes",
                         tname, (long long)length, nbytes);
    struct stat st;
    KILN_TRY(open_inside(base_dir, loc, tname, fd, &st));
    if ((uint64_t)st.st_size < (uint64_t)offset || (uint64_t)st.st_size - (uint64_t)offset < nbytes) {
        close(*fd);
        *fd = -1;
        return kiln__err(KILN_ERR_PARSE, "tensor '%s': external data '%s' is too short (%lld bytes; need %zu at "
                         "offset %lld)", tname, loc, (long long)st.st_size, nbytes, (long long)offset);
    }
    *offset_out = offset;
    return KILN_OK;
}

static kiln_status read_fd(int fd, int64_t offset, void *dst, size_t nbytes, const char *tname)
{
    size_t done = 0;
    while (done < nbytes) {
        ssize_t r = pread(fd, (char *)dst + done, nbytes - done, (off_t)offset + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return kiln__err(KILN_ERR_IO, "tensor '%s': reading external data failed: %s", tname,
                             r < 0 ? strerror(errno) : "unexpected end of file");
        done += (size_t)r;
    }
    return KILN_OK;
}

/* Number of values stored in the typed field that holds dtype dt (-1: no typed field). */
static int64_t typed_count(const Onnx__TensorProto *tp, kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_FLOAT32: return (int64_t)tp->n_float_data;
    case KILN_DT_FLOAT64: return (int64_t)tp->n_double_data;
    case KILN_DT_INT64: return (int64_t)tp->n_int64_data;
    case KILN_DT_INT32: case KILN_DT_INT16: case KILN_DT_INT8: case KILN_DT_UINT16: case KILN_DT_FLOAT16:
    case KILN_DT_BFLOAT16: case KILN_DT_UINT8: case KILN_DT_BOOL: case KILN_DT_FP8E4M3: case KILN_DT_FP8E4M3FNUZ:
    case KILN_DT_FP8E5M2: case KILN_DT_FP8E5M2FNUZ:
        return (int64_t)tp->n_int32_data;
    case KILN_DT_UINT32: case KILN_DT_UINT64: return (int64_t)tp->n_uint64_data;
    default: return -1;
    }
}

#define COPY_FIELD(field, ctype)                                                                   \
    do {                                                                                           \
        for (int64_t i = 0; i < n; i++)                                                            \
            ((ctype *)out->data)[i] = (ctype)tp->field[i];                                         \
    } while (0)

static void copy_typed(const Onnx__TensorProto *tp, int64_t n, kiln_tensor *out)
{
    switch (out->dtype) {
    case KILN_DT_FLOAT32: COPY_FIELD(float_data, float); break;
    case KILN_DT_FLOAT64: COPY_FIELD(double_data, double); break;
    case KILN_DT_INT64: COPY_FIELD(int64_data, int64_t); break;
    case KILN_DT_INT32: COPY_FIELD(int32_data, int32_t); break;
    case KILN_DT_INT16: COPY_FIELD(int32_data, int16_t); break;
    case KILN_DT_INT8: COPY_FIELD(int32_data, int8_t); break;
    case KILN_DT_UINT16: case KILN_DT_FLOAT16: case KILN_DT_BFLOAT16: COPY_FIELD(int32_data, uint16_t); break;
    case KILN_DT_UINT32: COPY_FIELD(uint64_data, uint32_t); break;
    case KILN_DT_UINT64: COPY_FIELD(uint64_data, uint64_t); break;
    default: COPY_FIELD(int32_data, uint8_t); break;   /* UINT8, BOOL, FP8 (typed_count checked the type) */
    }
}

kiln_status kiln__onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *base_dir, kiln_tensor *out)
{
    memset(out, 0, sizeof *out);
    const char *name = TNAME(tp);
    kiln_dtype dt = (kiln_dtype)tp->data_type;
    if (!tp->has_data_type || dt <= KILN_DT_UNDEFINED || dt >= KILN_DT_COUNT)
        return kiln__err(KILN_ERR_PARSE, "tensor '%s' has invalid data type %d", name, (int)tp->data_type);
    size_t es = kiln_dtype_size(dt);
    if (es == 0)
        return kiln__err(KILN_ERR_UNSUPPORTED, "tensor '%s' has data type %s, which kiln does not support", name,
                         kiln_dtype_name(dt));
    if (tp->n_dims > KILN_MAX_DIMS)
        return kiln__err(KILN_ERR_LIMIT, "tensor '%s' has rank %zu (kiln supports up to %d)", name, tp->n_dims,
                         KILN_MAX_DIMS);
    for (size_t i = 0; i < tp->n_dims; i++)
        if (tp->dims[i] < 0)
            return kiln__err(KILN_ERR_PARSE, "tensor '%s' has negative dimension %lld", name, (long long)tp->dims[i]);
    if (tp->segment)
        return kiln__err(KILN_ERR_UNSUPPORTED, "tensor '%s' is segmented, which kiln does not support", name);
    /* the element and byte counts, overflow-checked; the data must be there before we allocate */
    int64_t n = kiln__shape_numel((int)tp->n_dims, tp->dims);
    if (n < 0 || (uint64_t)n > SIZE_MAX / es)
        return kiln__err(KILN_ERR_LIMIT, "tensor '%s': the element count of its shape overflows", name);
    size_t nbytes = (size_t)n * es;
    bool external = tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    int fd = -1;
    int64_t offset = 0;
    if (external) {
        KILN_TRY(open_external(tp, base_dir, nbytes, &fd, &offset));
    } else if (tp->has_raw_data) {
        if (tp->raw_data.len != nbytes)
            return kiln__err(KILN_ERR_PARSE, "tensor '%s': raw_data has %zu bytes but shape and %s need %zu", name,
                             tp->raw_data.len, kiln_dtype_name(dt), nbytes);
    } else {
        int64_t have = typed_count(tp, dt);
        if (have < 0)
            return kiln__err(KILN_ERR_UNSUPPORTED, "tensor '%s': data type %s is not supported", name,
                             kiln_dtype_name(dt));
        if (have != n)
            return kiln__err(KILN_ERR_PARSE, "tensor '%s': number of stored values (%lld) does not match its shape "
                             "(%lld elements)", name, (long long)have, (long long)n);
    }
    kiln_status st = kiln__tensor_alloc(out, dt, (int)tp->n_dims, tp->dims);
    if (st == KILN_OK) {
        if (external)
            st = read_fd(fd, offset, out->data, out->nbytes, name);
        else if (tp->has_raw_data && out->nbytes)
            memcpy(out->data, tp->raw_data.data, out->nbytes);
        else if (!tp->has_raw_data)
            copy_typed(tp, n, out);
    } else {
        kiln__err_prefix("tensor '%s'", name);
    }
    if (fd >= 0)
        close(fd);
    if (st != KILN_OK)
        kiln__tensor_release(out);
    return st;
}

kiln_status kiln__onnx_tensor_parse(const void *buf, size_t len, kiln_tensor *out, char **name_out)
{
    if (name_out)
        *name_out = NULL;
    KILN_TRY(kiln__onnx_wire_check(&onnx__tensor_proto__descriptor, buf, len, KILN_ONNX_MAX_MESSAGE_DEPTH,
                                   "ONNX TensorProto"));
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, len, buf);
    if (!tp)
        return kiln__err(KILN_ERR_PARSE, "not a valid ONNX TensorProto (protobuf decoding failed)");
    kiln_status st = kiln__onnx_tensor_from_proto(tp, NULL, out);
    if (st == KILN_OK && name_out && tp->name && tp->name[0])
        *name_out = kiln__strdup(tp->name);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return st;
}

kiln_status kiln_tensor_pb_read(const char *path, kiln_tensor *out)
{
    if (!path || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_tensor_pb_read: NULL argument");
    void *buf;
    size_t len;
    KILN_TRY(kiln__read_file(path, &buf, &len));
    kiln_status st = kiln__onnx_tensor_parse(buf, len, out, NULL);
    if (st != KILN_OK)
        kiln__err_prefix("%s", path);
    kiln__free(buf);
    return st;
}
