/* Static shape and dtype inference over symbolic dims (symdim.h).
 *
 * kiln__infer_shapes walks a graph in node order and gives every value a dtype, a rank and a
 * symbolic dim per axis, from the graph inputs' shapes (declared, or supplied by the caller)
 * and the initializers only: shapes the file declares for intermediates and outputs are never
 * read. Small integer tensors computed by shape subgraphs (Shape -> Gather -> Concat -> Reshape,
 * Range, ...) carry their element values symbolically, so Reshape/Expand/Slice/... targets
 * computed from shapes resolve. Data-dependent sizes (NonZero, Unique, a runtime TopK k, Loop
 * trip counts) become fresh unknown dims. Inconsistent models (rank mismatch, incompatible
 * known dims under broadcasting, ...) fail with KILN_ERR_SHAPE naming the node. */
#ifndef KILN_IR_SHAPE_H
#define KILN_IR_SHAPE_H

#include "graph.h"
#include "symdim.h"

#define KILN_SHAPE_MAXVAL 64   /* most elements whose values are tracked */

typedef struct kiln_vshape {
    kiln_value_kind kind;     /* KILN_VAL_TENSOR, or a non-tensor value (sequence, ...) */
    kiln_dtype dtype;         /* UNDEFINED if unknown */
    int rank;                 /* -1 if unknown */
    kiln_sdim dims[KILN_MAX_DIMS];
    bool hv;                  /* element values known (then nval == numel <= KILN_SHAPE_MAXVAL) */
    int nval;
    /* .i for integer and bool dtypes (symbolic), .f for floating-point dtypes (concrete) */
    union { kiln_sdim i; double f; } val[KILN_SHAPE_MAXVAL];
} kiln_vshape;

/* Infers the whole graph. in (may be NULL) has g->n_inputs entries; in[i] (may be NULL)
 * replaces the declared type of graph input i. *out receives g->n_values entries indexed by
 * value id (caller frees with kiln__free). Dims live in st. */
kiln_status kiln__infer_shapes(const kiln_graph *g, kiln_symtab *st, const kiln_vshape *const *in, kiln_vshape **out);

/* The declared type of a graph input: dim_param names become symbols, unnamed dynamic dims
 * the symbol "<value name>.<axis>", an unknown rank -1. */
void kiln__vshape_declared(kiln_symtab *st, const kiln_value *v, kiln_vshape *out);

/* Integer or bool dtypes: their values are tracked symbolically (val[].i); others in val[].f. */
bool kiln__dt_int_like(kiln_dtype dt);

/* A constant tensor's dtype, shape and (when small) values. */
void kiln__vs_from_tensor(kiln_symtab *st, const kiln_tensor *t, kiln_vshape *o);

/* True if every dim of s is known (rank known, no fresh unknowns). */
bool kiln__vshape_complete(const kiln_symtab *st, const kiln_vshape *s);

/* Evaluates s's dims with symbol bindings into dims[]; false if some dim does not evaluate. */
bool kiln__vshape_eval(const kiln_symtab *st, const kiln_vshape *s, int n, const char *const *names,
                       const int64_t *vals, int64_t *dims);

/* True if the op has an inference function (every op in ops.def should). */
bool kiln__shape_has_infer(kiln_op op);

#endif
