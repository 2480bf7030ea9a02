/* Indexing, selection and sorting kernels (k_index.c), registered from k_shape.c's table. */
#ifndef KILN_REF_K_INDEX_H
#define KILN_REF_K_INDEX_H
#include "../../kernel.h"

kiln_status kiln__k_gather(kiln_kctx *ctx);
kiln_status kiln__k_gather_elements(kiln_kctx *ctx);
kiln_status kiln__k_gather_nd(kiln_kctx *ctx);
kiln_status kiln__k_nonzero(kiln_kctx *ctx);
kiln_status kiln__k_onehot(kiln_kctx *ctx);
kiln_status kiln__k_reverse_sequence(kiln_kctx *ctx);
kiln_status kiln__k_scatter_elements(kiln_kctx *ctx);
kiln_status kiln__k_scatter_nd(kiln_kctx *ctx);
kiln_status kiln__k_compress(kiln_kctx *ctx);
kiln_status kiln__k_cumsum(kiln_kctx *ctx);
kiln_status kiln__k_topk(kiln_kctx *ctx);
kiln_status kiln__k_argmax(kiln_kctx *ctx);
kiln_status kiln__k_argmin(kiln_kctx *ctx);
kiln_status kiln__k_unique(kiln_kctx *ctx);

#endif
