/* Op registry: names and lookup, generated from ops.def. */
#include "graph.h"

static const char *const op_names[] = {
#define X(name) #name,
#include "ops.def"
#undef X
};
_Static_assert(sizeof op_names / sizeof op_names[0] == KILN_OP_COUNT, "op name table out of sync");

const char *kiln__op_name(kiln_op op)
{
    return (op >= 0 && op < KILN_OP_COUNT) ? op_names[op] : "?";
}

kiln_op kiln__op_lookup(const char *domain, const char *op_type)
{
    if (domain && domain[0] && strcmp(domain, "ai.onnx") != 0)
        return KILN_OP_UNKNOWN;
    for (int i = 0; i < KILN_OP_COUNT; i++)
        if (strcmp(op_names[i], op_type) == 0)
            return (kiln_op)i;
    return KILN_OP_UNKNOWN;
}
