/* ONNX importer: ModelProto / TensorProto (protobuf-c, generated from onnx.proto) -> kiln IR. */
#ifndef KILN_ONNX_IMPORT_H
#define KILN_ONNX_IMPORT_H

#include "../ir/graph.h"

typedef struct kiln_onnx_model_info {
    int64_t ir_version;
    char *producer;    /* "name version" */
} kiln_onnx_model_info;

/* Parses an ONNX model from memory. base_dir is used for external data (may be NULL). */
kiln_status kiln__onnx_import(const void *buf, size_t len, const char *base_dir, kiln_graph **out,
                              kiln_onnx_model_info *info);
/* Parses a serialized TensorProto into a tensor (data owned by out). name_out may be NULL;
 * otherwise receives a copy of the tensor's name (or NULL). */
kiln_status kiln__onnx_tensor_parse(const void *buf, size_t len, kiln_tensor *out, char **name_out);

#endif
