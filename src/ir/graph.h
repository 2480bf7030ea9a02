/* The IR: a graph of nodes connected by values. Built by the ONNX importer, transformed by
 * passes, executed by the runtime. Values are referenced by index into graph->values. */
#ifndef KILN_IR_GRAPH_H
#define KILN_IR_GRAPH_H

#include "../core/core.h"

typedef enum kiln_op {
#define X(name, ...) KILN_OP_##name,
#include "ops.def"
#undef X
    KILN_OP_COUNT,
    KILN_OP_UNKNOWN = -1
} kiln_op;

#define KILN_DOMAIN "kiln"
#define KILN_MS_DOMAIN "com.microsoft"   /* ONNX Runtime contrib ops (ops.def MS lines) */
const char *kiln__op_name(kiln_op op);
/* True for kiln's own fused ops (domain "kiln"). */
bool kiln__op_is_kiln(kiln_op op);
/* Looks up an op by ONNX (domain, op_type); KILN_OP_UNKNOWN if kiln does not know it. */
kiln_op kiln__op_lookup(const char *domain, const char *op_type);
/* Input and output counts the operator specification allows (ops.def); max = INT_MAX if variadic. */
typedef struct kiln_op_arity { int min_in, max_in, min_out, max_out; } kiln_op_arity;
/* NULL for KILN_OP_UNKNOWN. */
const kiln_op_arity *kiln__op_arity(kiln_op op);
/* Shape-only ops: output 0 holds input 0's values under new dims (the memory plan computes the reshaping ones in
 * place, moving no bytes). Header-only: the device module uses it too. */
static inline bool kiln__op_is_view(kiln_op op)
{
    return op == KILN_OP_Reshape || op == KILN_OP_Flatten || op == KILN_OP_Squeeze || op == KILN_OP_Unsqueeze ||
           op == KILN_OP_Identity;
}

typedef enum kiln_attr_type {
    KILN_ATTR_UNDEFINED = 0, KILN_ATTR_FLOAT = 1, KILN_ATTR_INT = 2, KILN_ATTR_STRING = 3,
    KILN_ATTR_TENSOR = 4, KILN_ATTR_GRAPH = 5, KILN_ATTR_FLOATS = 6, KILN_ATTR_INTS = 7,
    KILN_ATTR_STRINGS = 8, KILN_ATTR_TENSORS = 9, KILN_ATTR_GRAPHS = 10,
    KILN_ATTR_SPARSE_TENSOR = 11, KILN_ATTR_SPARSE_TENSORS = 12, KILN_ATTR_TYPE_PROTO = 13,
    KILN_ATTR_TYPE_PROTOS = 14
} kiln_attr_type;

struct kiln_graph;

typedef struct kiln_attr {
    char *name;
    kiln_attr_type type;
    float f;
    int64_t i;
    char *s;            /* STRING (NUL-terminated; s_len excludes the NUL) */
    size_t s_len;
    kiln_tensor *t;     /* TENSOR */
    struct kiln_graph *g; /* GRAPH */
    int n;              /* element count for the list types */
    float *floats;
    int64_t *ints;
    char **strings;
    struct kiln_graph **graphs;
} kiln_attr;

typedef struct kiln_node {
    char *name;
    char *op_type;
    char *domain;       /* "" for the default ONNX domain */
    kiln_op op;         /* KILN_OP_UNKNOWN if not in the registry */
    int opset;          /* opset version of the node's domain in the model */
    int n_in, n_out;
    int *in;            /* value ids; -1 = optional input left empty */
    int *out;           /* value ids; -1 = optional output not requested */
    int n_attr;
    kiln_attr *attrs;
    bool dead;          /* marked for removal by a pass; see kiln__graph_remove_dead */
    char *fused_from;   /* comma-separated names/op types of the ONNX nodes fused into this one */
    int precision;      /* kiln_precision chosen by the builder (0 = fp32) */
    char *tactic;       /* kernel variant chosen by the builder, NULL = default */
} kiln_node;

/* One dimension of a declared shape: a number, or a symbol (dim_param), or unknown. */
typedef struct kiln_dim {
    int64_t value;      /* >= 0 if known */
    char *param;        /* symbolic name or NULL */
} kiln_dim;

typedef enum kiln_value_kind { KILN_VAL_TENSOR = 0, KILN_VAL_SEQUENCE, KILN_VAL_MAP, KILN_VAL_OPTIONAL,
                               KILN_VAL_OTHER } kiln_value_kind;

typedef struct kiln_value {
    char *name;
    kiln_value_kind kind;
    kiln_dtype dtype;   /* declared element type, UNDEFINED if unknown */
    int ndim;           /* declared rank, -1 if unknown */
    kiln_dim *dims;
    kiln_tensor *init;  /* constant data (initializer), or NULL */
    int producer;       /* node index, -1 for graph inputs / initializers / outer-scope */
    bool is_outer;      /* subgraph reference to a value of an enclosing graph (by name) */
} kiln_value;

typedef struct kiln_opset { char *domain; int64_t version; } kiln_opset;

typedef struct kiln_graph {
    char *name;
    int n_values, cap_values;
    kiln_value *values;
    int n_nodes, cap_nodes;
    kiln_node *nodes;     /* topologically sorted after import */
    int n_inputs, n_outputs;
    int *inputs;          /* graph inputs that the caller feeds (initializers excluded) */
    int *outputs;
    int n_opsets;
    kiln_opset *opsets;
    struct kiln_graph *parent;   /* enclosing graph for subgraphs */
    /* name -> value id hash table */
    int *hash;
    int hash_cap;
    int n_added_consts;   /* suffix counter of kiln__graph_add_const */
    struct kiln_uses *uses;   /* reader index while passes edit the graph (graph_edit.c), else NULL */
} kiln_graph;

kiln_graph *kiln__graph_new(kiln_graph *parent);
void kiln__graph_free(kiln_graph *g);
/* Finds a value by name in this graph only; -1 if absent. */
int kiln__graph_find(const kiln_graph *g, const char *name);
/* Adds a value (name copied). Returns its id, or -1 on allocation failure. */
int kiln__graph_add_value(kiln_graph *g, const char *name);
/* Adds an empty node; returns its index or -1. */
int kiln__graph_add_node(kiln_graph *g);
/* Sorts nodes topologically; error naming a node on a cycle or an undefined input. */
kiln_status kiln__graph_toposort(kiln_graph *g);
void kiln__attr_free(kiln_attr *a);
/* Raises last[v] to the index of the last node of g that reads value v: as an input, or by name
 * from one of its subgraphs at any depth (outer-scope reads). Callers initialize `last`
 * (last_use.c; liveness for the memory planner and the plan check). */
void kiln__mark_last_uses(const kiln_graph *g, int *last);

/* editing (src/ir/graph_edit.c)
 * The use index maps every value to the live node input slots reading it, so the reader queries
 * below cost O(1) (amortized). While it is built, a graph must be edited only through the edit
 * functions here (kiln__uses_check detects any other write to node inputs, outputs or `dead`). */
kiln_status kiln__uses_build(kiln_graph *g);
void kiln__uses_free(kiln_graph *g);
/* Builds the index unless present; *own tells whether it was built here (free it then). */
kiln_status kiln__uses_ensure(kiln_graph *g, bool *own);
/* Rebuilds the index from scratch and compares it (and value producers) with the maintained one;
 * KILN_ERR_INTERNAL naming the first difference. */
kiln_status kiln__uses_check(const kiln_graph *g);

/* queries (need the index, except kiln__value_is_output) */
/* Number of live node inputs that read v (+1 per graph-output slot, +1 if a subgraph reads it by name). */
int kiln__value_uses(const kiln_graph *g, int v);
bool kiln__value_is_output(const kiln_graph *g, int v);
/* The single node reading v, or -1 if v has zero or several readers or is a graph output. */
int kiln__single_consumer(const kiln_graph *g, int v);
/* Fills nodes[0..max) with the live nodes reading v (one entry per input slot, unordered);
 * returns the number of such slots. */
int kiln__value_readers(const kiln_graph *g, int v, int *nodes, int max);

/* edits (keep the index, when built, up to date) */
kiln_status kiln__node_set_input(kiln_graph *g, int node, int slot, int v);
/* Replaces all inputs of a node by v[0..n). */
kiln_status kiln__node_set_inputs(kiln_graph *g, int node, int n, const int *v);
/* Appends an input (value id, may be -1). */
kiln_status kiln__node_add_input(kiln_graph *g, int node, int v);
/* Makes the node write value v at output `slot` (v's producer becomes the node). */
void kiln__node_set_output(kiln_graph *g, int node, int slot, int v);
/* Marks a node dead (it no longer reads anything); kiln__graph_remove_dead frees it. */
void kiln__node_kill(kiln_graph *g, int node);
/* Rewires every live node input reading `from` to read `to` (graph outputs are left alone). */
kiln_status kiln__graph_replace_uses(kiln_graph *g, int from, int to);
/* Moves node `a` into the slot of the later node `b`: the result computes a's op on a's inputs but
 * writes b's outputs; a's slot keeps a dead husk (b's name, op and attributes, a's old outputs). */
kiln_status kiln__graph_move_node_into(kiln_graph *g, int a, int b);
/* Turns value v into a constant holding `t` (moved in, as kiln__graph_add_const); its producer,
 * if any, should then be killed. */
kiln_status kiln__value_set_const(kiln_graph *g, int v, kiln_tensor *t);
/* Frees and removes nodes marked dead; recomputes producers and renumbers the index, if built. */
kiln_status kiln__graph_remove_dead(kiln_graph *g);
/* Appends "text" to node->fused_from (comma separated). */
kiln_status kiln__node_add_fused(kiln_node *n, const char *text);
/* Builder attributes that fusion keeps (src/passes/rewrite.c): KILN_ATTR_PREC_REQ is a node's
 * requested precision ("fp16", "int8", ...); when a node absorbs another that had one, the absorbed
 * request is appended to the survivor's KILN_ATTR_PREC_FUSED as "label\tdomain\top\tprecision" lines, so
 * the builder can check that every request was honoured (src/build/precision.c, realize). KILN_ATTR_PREC_EXACT
 * (int 1) marks a request a --layer-precision rule without glob characters set (the node named exactly); its
 * line then ends in a fifth field "\t1". */
#define KILN_ATTR_PREC_REQ "kiln_prec_req"
#define KILN_ATTR_PREC_FUSED "kiln_prec_fused"
#define KILN_ATTR_PREC_EXACT "kiln_prec_exact"
/* string on a Conv / MatMul / Gemm that reads the model's DequantizeLinear but fuse-qdq could not make an integer
 * layer: why (src/passes/p_qdq.c); the builder says it where the layer is realized in float, then drops it */
#define KILN_ATTR_QDQ_UNFUSED "kiln_qdq_unfused"
/* Sets (or replaces) an attribute on a node. */
kiln_status kiln__node_set_attr_i(kiln_node *n, const char *name, int64_t v);
kiln_status kiln__node_set_attr_f(kiln_node *n, const char *name, float v);
kiln_status kiln__node_set_attr_s(kiln_node *n, const char *name, const char *v);
kiln_status kiln__node_set_attr_ints(kiln_node *n, const char *name, int count, const int64_t *v);
/* Removes attribute `name` of n (nothing if it has none) */
void kiln__node_drop_attr(kiln_node *n, const char *name);
/* Adds a new constant value holding `t` (moved in: the graph takes ownership of t->data). */
int kiln__graph_add_const(kiln_graph *g, const char *name_hint, kiln_tensor *t);
/* True if any node has a subgraph attribute (control flow). */
bool kiln__graph_has_subgraphs(const kiln_graph *g);

/* attribute access */
const kiln_attr *kiln__attr(const kiln_node *n, const char *name);
int64_t kiln__attr_i(const kiln_node *n, const char *name, int64_t def);
float kiln__attr_f(const kiln_node *n, const char *name, float def);
const char *kiln__attr_s(const kiln_node *n, const char *name, const char *def);
/* Returns the number of ints and sets *v, or -1 if the attribute is absent. */
int kiln__attr_ints(const kiln_node *n, const char *name, const int64_t **v);
int kiln__attr_floats(const kiln_node *n, const char *name, const float **v);

#endif
