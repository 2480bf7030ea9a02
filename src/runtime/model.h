/* The model object behind the public kiln_model_t handle. */
#ifndef KILN_RUNTIME_MODEL_H
#define KILN_RUNTIME_MODEL_H
#include "../onnx/onnx_import.h"

struct kiln_model {
    kiln_graph *g;
    kiln_onnx_model_info info;
};

#endif
