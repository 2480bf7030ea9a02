/* TensorProto -> kiln_tensor, with every size and count checked against the declared shape. */
#include "onnx_tensor.h"
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

static kiln_status read_external(const Onnx__TensorProto *tp, const char *base_dir, void *dst, size_t nbytes)
{
    const char *loc = NULL;
    int64_t offset = 0, length = -1;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        if (!e->key || !e->value)
            continue;
        if (strcmp(e->key, "location") == 0)
            loc = e->value;
        else if (strcmp(e->key, "offset") == 0)
            offset = strtoll(e->value, NULL, 10);
        else if (strcmp(e->key, "length") == 0)
            length = strtoll(e->value, NULL, 10);
    }
    if (!loc || !loc[0])
        return kiln__err(KILN_ERR_PARSE, "tensor '%s' has external data without a location", tp->name ? tp->name : "");
    /* like ONNX: the file must stay inside the model directory */
    if (loc[0] == '/' || strstr(loc, ".."))
        return kiln__err(KILN_ERR_PARSE, "tensor '%s': external data location '%s' escapes the model directory",
                         tp->name ? tp->name : "", loc);
    if (offset < 0 || (length >= 0 && (uint64_t)length != nbytes))
        return kiln__err(KILN_ERR_PARSE, "tensor '%s': external data offset/length (%lld/%lld) do not match its %zu bytes",
                         tp->name ? tp->name : "", (long long)offset, (long long)length, nbytes);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", base_dir && base_dir[0] ? base_dir : ".", loc);
    FILE *f = fopen(path, "rb");
    if (!f)
        return kiln__err(KILN_ERR_IO, "tensor '%s': cannot open external data '%s': %s", tp->name ? tp->name : "",
                         path, strerror(errno));
    kiln_status st = KILN_OK;
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0 || fread(dst, 1, nbytes, f) != nbytes)
        st = kiln__err(KILN_ERR_IO, "tensor '%s': external data '%s' is too short (need %zu bytes at offset %lld)",
                       tp->name ? tp->name : "", path, nbytes, (long long)offset);
    fclose(f);
    return st;
}

#define COPY_FIELD(field, n_field, ctype)                                                          \
    do {                                                                                           \
        if ((int64_t)tp->n_field != n)                                                             \
            goto count_mismatch;                                                                   \
        for (int64_t i = 0; i < n; i++)                                                            \
            ((ctype *)out->data)[i] = (ctype)tp->field[i];                                         \
    } while (0)

kiln_status kiln__onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *base_dir, kiln_tensor *out)
{
    memset(out, 0, sizeof *out);
    const char *name = tp->name ? tp->name : "";
    kiln_dtype dt = (kiln_dtype)tp->data_type;
    if (!tp->has_data_type || dt <= KILN_DT_UNDEFINED || dt >= KILN_DT_COUNT)
        return kiln__err(KILN_ERR_PARSE, "tensor '%s' has invalid data type %d", name, (int)tp->data_type);
    if (kiln_dtype_size(dt) == 0)
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
    kiln_status st = kiln__tensor_alloc(out, dt, (int)tp->n_dims, tp->dims);
    if (st != KILN_OK) {
        kiln__err_prefix("tensor '%s'", name);
        return st;
    }
    int64_t n = kiln_tensor_numel(out);
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        st = read_external(tp, base_dir, out->data, out->nbytes);
        if (st != KILN_OK)
            kiln__tensor_release(out);
        return st;
    }
    if (tp->has_raw_data) {
        if (tp->raw_data.len != out->nbytes) {
            kiln__tensor_release(out);
            return kiln__err(KILN_ERR_PARSE, "tensor '%s': raw_data has %zu bytes but shape and %s need %zu", name,
                             tp->raw_data.len, kiln_dtype_name(dt), (size_t)n * kiln_dtype_size(dt));
        }
        if (out->nbytes)
            memcpy(out->data, tp->raw_data.data, out->nbytes);
        return KILN_OK;
    }
    switch (dt) {
    case KILN_DT_FLOAT32: COPY_FIELD(float_data, n_float_data, float); break;
    case KILN_DT_FLOAT64: COPY_FIELD(double_data, n_double_data, double); break;
    case KILN_DT_INT64: COPY_FIELD(int64_data, n_int64_data, int64_t); break;
    case KILN_DT_INT32: COPY_FIELD(int32_data, n_int32_data, int32_t); break;
    case KILN_DT_INT16: COPY_FIELD(int32_data, n_int32_data, int16_t); break;
    case KILN_DT_INT8: COPY_FIELD(int32_data, n_int32_data, int8_t); break;
    case KILN_DT_UINT16: case KILN_DT_FLOAT16: case KILN_DT_BFLOAT16:
        COPY_FIELD(int32_data, n_int32_data, uint16_t); break;
    case KILN_DT_UINT8: case KILN_DT_BOOL: case KILN_DT_FP8E4M3: case KILN_DT_FP8E4M3FNUZ:
    case KILN_DT_FP8E5M2: case KILN_DT_FP8E5M2FNUZ:
        COPY_FIELD(int32_data, n_int32_data, uint8_t); break;
    case KILN_DT_UINT32: COPY_FIELD(uint64_data, n_uint64_data, uint32_t); break;
    case KILN_DT_UINT64: COPY_FIELD(uint64_data, n_uint64_data, uint64_t); break;
    default:
        kiln__tensor_release(out);
        return kiln__err(KILN_ERR_UNSUPPORTED, "tensor '%s': data type %s is not supported", name, kiln_dtype_name(dt));
    }
    return KILN_OK;
count_mismatch:
    kiln__tensor_release(out);
    return kiln__err(KILN_ERR_PARSE, "tensor '%s': number of stored values does not match its shape (%lld elements)",
                     name, (long long)n);
}

kiln_status kiln__onnx_tensor_parse(const void *buf, size_t len, kiln_tensor *out, char **name_out)
{
    if (name_out)
        *name_out = NULL;
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
