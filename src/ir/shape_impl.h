/* Internals of shape inference shared by the shape_*.c files: the per-node context, error
 * reporting, and helpers every op family uses. */
#ifndef KILN_IR_SHAPE_IMPL_H
#define KILN_IR_SHAPE_IMPL_H

#include "shape.h"

typedef struct kiln_sframe {
    const kiln_graph *g;
    kiln_vshape *v;                 /* per value id */
    const struct kiln_sframe *parent;
    int depth;
} kiln_sframe;

typedef struct kiln_ictx {
    kiln_symtab *st;
    const kiln_node *n;
    const kiln_sframe *f;
    int n_in, n_out;
    const kiln_vshape *const *in;   /* NULL where the optional input is absent */
    kiln_vshape *const *out;        /* never NULL (scratch for outputs not requested) */
} kiln_ictx;

typedef kiln_status (*kiln_infer_fn)(kiln_ictx *c);

/* registry (shape_table.c) */
kiln_infer_fn kiln__infer_fn(kiln_op op);

/* driver (shape.c) */
kiln_status kiln__infer_frame(kiln_sframe *f, kiln_symtab *st, const kiln_vshape *const *in);

/* families */
#define F(name) kiln_status kiln__si_##name(kiln_ictx *c);
#include "shape_fns.def"
#undef F

/* ---- helpers (shape.c) ---- */
kiln_status kiln__ierr(const kiln_ictx *c, kiln_status s, const char *fmt, ...) KILN_PRINTF(3, 4);
static inline const kiln_vshape *IN(const kiln_ictx *c, int i) { return i < c->n_in ? c->in[i] : NULL; }
/* Input i, which must be present with a known rank (else an error, or *ok false when rank unknown). */
kiln_status kiln__need(const kiln_ictx *c, int i, const kiln_vshape **s);
void kiln__vs_unknown(kiln_vshape *o, kiln_dtype dt);             /* unknown rank */
void kiln__vs_set(kiln_vshape *o, kiln_dtype dt, int rank, const kiln_sdim *dims);
void kiln__vs_fresh(kiln_ictx *c, kiln_vshape *o, kiln_dtype dt, int rank);  /* rank fresh unknown dims */
kiln_status kiln__norm_ax(const kiln_ictx *c, int64_t axis, int rank, int *out);
/* Constant int64 list from input i's tracked values (all constant); -1 if not known. */
int kiln__in_ints(const kiln_ictx *c, int i, int64_t *v, int max);
/* Symbolic values of input i (int dtype); -1 if not tracked. */
int kiln__in_syms(const kiln_ictx *c, int i, kiln_sdim *v, int max);
/* Shape given by the symbolic values of input i (a 1-D shape tensor): rank or -1 if unknown length. */
int kiln__in_shape(kiln_ictx *c, int i, kiln_sdim *dims);
kiln_sdim kiln__C(const kiln_ictx *c, int64_t v);
bool kiln__is_c(const kiln_ictx *c, kiln_sdim d, int64_t v);
/* numel as a constant, or -1 if symbolic. */
int64_t kiln__const_numel(const kiln_ictx *c, const kiln_vshape *s);
kiln_sdim kiln__numel(const kiln_ictx *c, const kiln_vshape *s);
/* ONNX multidirectional broadcast of n inputs (absent ones skipped) into o's rank/dims. */
kiln_status kiln__bcast(kiln_ictx *c, int n, const kiln_vshape *const *ins, kiln_vshape *o);
/* Sets o's values (int or float per o->dtype) when it is small with constant dims. */
bool kiln__vs_can_hold(const kiln_ictx *c, const kiln_vshape *o);
/* Computes o's values elementwise from ins (broadcast, op = the node's op) when all are small and known. */
void kiln__elem_values(kiln_ictx *c, int n, const kiln_vshape *const *ins, kiln_vshape *o);
/* Output dtype attribute `to`-style helper: attribute value if present, else def. */
kiln_dtype kiln__attr_dt(const kiln_node *n, const char *name, kiln_dtype def);

#endif
