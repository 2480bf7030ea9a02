/* Symbolic dimensions: integer expressions over named dims (dim_param such as `batch`, `seq`)
 * kept in a canonical form, so that equal expressions are the same id.
 *
 * Every expression is a polynomial with integer coefficients over "atoms"; an atom is a named
 * symbol, a fresh unknown (a data-dependent dim), or an opaque node floor(a/b), min(a,b),
 * max(a,b) over polynomials. Polynomials are kept sorted and merged, and every node is
 * hash-consed in a kiln_symtab, so `seq*2` built two ways gets one id and comparing dims is
 * comparing ids. Simplifications: constant folding, exact division by a constant or a monomial
 * ((2*s+1)/2 = s, (b*h)/h = b), nested constant division, min/max of expressions whose difference
 * is provably signed (symbols and unknowns are dims, so >= 0), a mod b = a - b*floor(a/b).
 *
 * Allocation failure or coefficient overflow never crashes: the result is KILN_SDIM_NONE, which
 * every operation propagates; kiln__symtab_failed() says whether it happened. */
#ifndef KILN_IR_SYMDIM_H
#define KILN_IR_SYMDIM_H

#include "../core/core.h"

typedef int32_t kiln_sdim;
#define KILN_SDIM_NONE ((kiln_sdim)-1)

typedef struct kiln_symtab kiln_symtab;

kiln_symtab *kiln__symtab_new(void);
void kiln__symtab_free(kiln_symtab *t);
/* True if an allocation failed in this table (some result was KILN_SDIM_NONE). */
bool kiln__symtab_failed(const kiln_symtab *t);

kiln_sdim kiln__sd_const(kiln_symtab *t, int64_t c);
kiln_sdim kiln__sd_sym(kiln_symtab *t, const char *name);
/* A fresh unknown dim, different from every other (printed "?N"). */
kiln_sdim kiln__sd_unknown(kiln_symtab *t);

kiln_sdim kiln__sd_add(kiln_symtab *t, kiln_sdim a, kiln_sdim b);
kiln_sdim kiln__sd_sub(kiln_symtab *t, kiln_sdim a, kiln_sdim b);
kiln_sdim kiln__sd_mul(kiln_symtab *t, kiln_sdim a, kiln_sdim b);
kiln_sdim kiln__sd_addc(kiln_symtab *t, kiln_sdim a, int64_t c);
kiln_sdim kiln__sd_mulc(kiln_symtab *t, kiln_sdim a, int64_t c);
/* floor(a / b); b == 0 gives a fresh unknown. */
kiln_sdim kiln__sd_div(kiln_symtab *t, kiln_sdim a, kiln_sdim b);
/* a / b rounded toward zero (ONNX integer Div). Equal to floor division when a, b >= 0. */
kiln_sdim kiln__sd_tdiv(kiln_symtab *t, kiln_sdim a, kiln_sdim b);
/* ceil(a / b) */
kiln_sdim kiln__sd_cdiv(kiln_symtab *t, kiln_sdim a, kiln_sdim b);
/* a - b*floor(a/b) (sign of the divisor, like Python and ONNX Mod with fmod=0) */
kiln_sdim kiln__sd_mod(kiln_symtab *t, kiln_sdim a, kiln_sdim b);
kiln_sdim kiln__sd_min(kiln_symtab *t, kiln_sdim a, kiln_sdim b);
kiln_sdim kiln__sd_max(kiln_symtab *t, kiln_sdim a, kiln_sdim b);

/* True (and *c set when c != NULL) if a is a constant. */
bool kiln__sd_is_const(const kiln_symtab *t, kiln_sdim a, int64_t *c);
/* True if a depends on a fresh unknown (or is KILN_SDIM_NONE). */
bool kiln__sd_has_unknown(const kiln_symtab *t, kiln_sdim a);
/* True if a is provably >= 0 (symbols and unknowns count as >= 0). */
bool kiln__sd_nonneg(const kiln_symtab *t, kiln_sdim a);
/* Sign of a - b when provable: -1, 0, 1 (1 also for >= with a != b), or 2 when unknown. */
int kiln__sd_cmp(kiln_symtab *t, kiln_sdim a, kiln_sdim b);

/* Writes the expression ("2*seq+1", "(h+31)/32", "batch*heads", "?3"); returns its length
 * (snprintf-like: the text is truncated to n-1 characters if needed). */
int kiln__sd_str(const kiln_symtab *t, kiln_sdim a, char *buf, size_t n);
/* Evaluates a with the symbols bound to values; KILN_ERR_SHAPE naming the first unbound symbol
 * (or an unknown dim), KILN_ERR_LIMIT on overflow or division by zero. */
kiln_status kiln__sd_eval(const kiln_symtab *t, kiln_sdim a, int n, const char *const *names, const int64_t *vals,
                          int64_t *out);

#endif
