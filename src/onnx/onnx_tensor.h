/* Internal: conversion of protobuf-c ONNX messages. Only src/onnx includes this. */
#ifndef KILN_ONNX_TENSOR_H
#define KILN_ONNX_TENSOR_H
#include "onnx_import.h"
#include "onnx.pb-c.h"
#include <stdlib.h>

kiln_status kiln__onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *base_dir, kiln_tensor *out);
#endif
