/* Op registry: names and lookup, generated from ops.def. */
#include "graph.h"

static const char *const op_names[] = {
#define X(name, ...) #name,
#include "ops.def"
#undef X
};
_Static_assert(sizeof op_names / sizeof op_names[0] == KILN_OP_COUNT, "op name table out of sync");

const char *kiln__op_name(kiln_op op)
{
    return (op >= 0 && op < KILN_OP_COUNT) ? op_names[op] : "?";
}

/* 1 for ops of kiln's own domain, 0 for ONNX ops */
static const unsigned char op_is_kiln[] = {
#define X(name, ...) 0,
#define K(name, ...) 1,
#include "ops.def"
#undef K
#undef X
};

static const kiln_op_arity op_arity[] = {
#define X(name, min_in, max_in, min_out, max_out) {min_in, max_in, min_out, max_out},
#include "ops.def"
#undef X
};
_Static_assert(sizeof op_arity / sizeof op_arity[0] == KILN_OP_COUNT, "op arity table out of sync");

const kiln_op_arity *kiln__op_arity(kiln_op op) { return op >= 0 && op < KILN_OP_COUNT ? &op_arity[op] : NULL; }

bool kiln__op_is_kiln(kiln_op op) { return op >= 0 && op < KILN_OP_COUNT && op_is_kiln[op]; }

kiln_op kiln__op_lookup(const char *domain, const char *op_type)
{
    bool kiln_domain = domain && !strcmp(domain, KILN_DOMAIN);
    if (domain && domain[0] && strcmp(domain, "ai.onnx") != 0 && !kiln_domain)
        return KILN_OP_UNKNOWN;
    for (int i = 0; i < KILN_OP_COUNT; i++)
        if (op_is_kiln[i] == kiln_domain && strcmp(op_names[i], op_type) == 0)
            return (kiln_op)i;
    return KILN_OP_UNKNOWN;
}
