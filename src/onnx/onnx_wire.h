/* Internal: a check of protobuf wire data that runs before protobuf-c decodes it. */
#ifndef KILN_ONNX_WIRE_H
#define KILN_ONNX_WIRE_H
#include "../core/core.h"
#include <protobuf-c/protobuf-c.h>

/* Deepest message nesting accepted in an ONNX file. A subgraph level costs 3 levels
 * (GraphProto > NodeProto > AttributeProto > GraphProto), so this admits the importer's
 * own subgraph limit with room for tensors and nested types, while protobuf-c's recursive
 * decoder stays far from the end of any thread's stack. */
#define KILN_ONNX_MAX_MESSAGE_DEPTH 160

/* Walks `buf` as a serialized message of type `desc` without recursion and fails with
 * KILN_ERR_LIMIT if submessages are nested more than max_depth levels deep, or with
 * KILN_ERR_PARSE if the wire format is malformed; `what` names the data in messages
 * ("ONNX model"). Run it before protobuf_c_message_unpack,
 * whose recursion is otherwise bounded only by the input. */
kiln_status kiln__onnx_wire_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                                  int max_depth, const char *what);
#endif
