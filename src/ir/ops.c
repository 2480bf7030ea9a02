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

/* each op's domain: 0 ONNX, 1 kiln's own, 2 com.microsoft (ONNX Runtime contrib ops) */
enum { DOM_ONNX, DOM_KILN, DOM_MS };
static const unsigned char op_domain[] = {
#define X(name, ...) DOM_ONNX,
#define K(name, ...) DOM_KILN,
#define MS(name, ...) DOM_MS,
#include "ops.def"
#undef MS
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

bool kiln__op_is_kiln(kiln_op op) { return op >= 0 && op < KILN_OP_COUNT && op_domain[op] == DOM_KILN; }

kiln_op kiln__op_lookup(const char *domain, const char *op_type)
{
    int dom = DOM_ONNX;
    if (domain && !strcmp(domain, KILN_DOMAIN))
        dom = DOM_KILN;
    else if (domain && !strcmp(domain, KILN_MS_DOMAIN))
        dom = DOM_MS;
    else if (domain && domain[0] && strcmp(domain, "ai.onnx") != 0)
        return KILN_OP_UNKNOWN;
    for (int i = 0; i < KILN_OP_COUNT; i++)
        if (op_domain[i] == dom && strcmp(op_names[i], op_type) == 0)
            return (kiln_op)i;
    return KILN_OP_UNKNOWN;
}
