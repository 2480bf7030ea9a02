/* kiln's Attention (domain "kiln", built by the fuse-attention pass):
 *   Attention(Q, KT, V, M?) = Softmax(Q @ KT * scale + M) @ V   (softmax over the last axis)
 * with the operand permutations of src/ir/fused.h (q_perm, kt_perm, v_perm, y_perm, absorbed from
 * the Transposes around it by the attention-transpose pass): each operand is read in place
 * through its strides, so BERT's heads are read straight out of [B, S, H, D] and written back
 * into [B, S, H, Dv]. float32 runs one pair of GEMMs per head (attn_fast); anything else runs the
 * reference kernels on gathered operands. */
#include "../../../ir/fused.h"
#include "../../kernel.h"
#include "../fused.h"
#include "../gemm.h"
#include <math.h>

/* A logical [rows, cols] matrix of one head as sgemm reads it: in place (trans, ld) when one of
 * its two strides is 1, else gathered into contiguous scratch. */
typedef struct {
    int64_t rows, cols, rs, cs; /* element strides of rows and columns */
    bool direct, trans;
    int64_t ld;
} attn_mat;

/* One operand: the logical strides of every logical dim (physical strides through the perm). */
typedef struct {
    const float *base;
    int64_t lst[KILN_MAX_DIMS];
    attn_mat m;
} attn_opnd;

typedef struct {
    attn_opnd q, kt, v, y;
    const float *mask;
    const uint8_t *bmask;             /* boolean mask (Where forms) */
    int mask_kind;                    /* 1 additive, 2 keep where true, 3 fill where true */
    float fill;
    float *out;
    int64_t S, Sk, D, Dv;
    float scale;
    int rank;                         /* rank of the score tensor [lead..., S, Sk] */
    int64_t sdims[KILN_MAX_DIMS];     /* score dims */
    int64_t mstr[KILN_MAX_DIMS];      /* mask strides over score dims (0 = broadcast) */
    kiln_softmax_row_fn softmax;      /* in place over one score row */
    kiln_status st;
} attn_job;

/* row = softmax(row + add) over n elements (add NULL: softmax(row); NaNs ignored by the maximum) */
static void softmax_row_scalar(float *row, const float *add, int64_t n)
{
    float mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < n; k++) {
        if (add)
            row[k] += add[k];
        mx = row[k] > mx ? row[k] : mx;
    }
    for (int64_t k = 0; k < n; k++) {
        row[k] = expf(row[k] - mx);
        sum += row[k];
    }
    float inv = 1.0f / sum;
    for (int64_t k = 0; k < n; k++)
        row[k] *= inv;
}

/* How sgemm reads m in place: row-major with ld (cs == 1) or transposed (rs == 1); a dim of
 * size <= 1 has no stride that matters. */
static void mat_layout(attn_mat *m)
{
    int64_t rs = m->rows > 1 ? m->rs : 0, cs = m->cols > 1 ? m->cs : 0;
    int64_t cmin = m->cols > 1 ? m->cols : 1, rmin = m->rows > 1 ? m->rows : 1;
    m->direct = true;
    m->trans = false;
    if (cs <= 1 && (rs == 0 || rs >= cmin)) {
        m->ld = rs ? rs : cmin;
    } else if (rs <= 1 && (cs == 0 || cs >= rmin)) {
        m->trans = true;
        m->ld = cs ? cs : rmin;
    } else {
        m->direct = false;   /* gathered: contiguous [rows, cols] */
        m->ld = cmin;
    }
}

/* dst[r * cols + c] = src[r * rs + c * cs] (gather), or the reverse (scatter) */
static void copy_mat(const attn_mat *m, float *strided, float *dense, bool gather)
{
    for (int64_t r = 0; r < m->rows; r++)
        for (int64_t c = 0; c < m->cols; c++) {
            float *s = strided + r * m->rs + c * m->cs, *d = dense + r * m->cols + c;
            if (gather)
                *d = *s;
            else
                *s = *d;
        }
}

/* The head's matrix of o at element offset off: in place, or gathered into *buf (advanced) */
static const float *mat_at(const attn_opnd *o, int64_t off, float **buf)
{
    const float *p = o->base + off;
    if (o->m.direct)
        return p;
    float *d = *buf;
    copy_mat(&o->m, (float *)(uintptr_t)p, d, true);
    *buf += o->m.rows * o->m.cols;
    return d;
}

/* Floats of the packed B panels of the two products (Q KT: KT [D, Sk]; P V: V [Sk, Dv]), each rounded up to a
 * cache line so that the second one stays 64-byte aligned. */
static int64_t bpack_floats(const attn_job *j)
{
    return (kiln__sgemm_bpack_floats(j->D, j->Sk) + 15) / 16 * 16 +
           (kiln__sgemm_bpack_floats(j->Sk, j->Dv) + 15) / 16 * 16;
}

static int64_t scratch_floats(const attn_job *j)
{
    int64_t n = j->S * j->Sk + bpack_floats(j) + 16;
    const attn_opnd *ops[4] = {&j->q, &j->kt, &j->v, &j->y};
    for (int i = 0; i < 4; i++)
        n += ops[i]->m.direct ? 0 : ops[i]->m.rows * ops[i]->m.cols;
    return n > 0 ? n : 1;
}

/* element offset of head b's mask (its score (b, 0, 0)): b decomposed over the leading dims */
static int64_t mask_offset(const attn_job *j, int64_t b)
{
    int64_t moff = 0, rem = b;
    for (int d = j->rank - 3; d >= 0; d--) {
        moff += (rem % j->sdims[d]) * j->mstr[d];
        rem /= j->sdims[d];
    }
    return moff;
}

/* An additive mask contiguous along the keys (BERT's [B, 1, 1, Sk]): added by the row softmax as it reads the row. */
static bool mask_by_row(const attn_job *j) { return j->mask && j->mask_kind == 1 && j->mstr[j->rank - 1] == 1; }

/* the other masks, element by element before the softmax */
static void add_mask(const attn_job *j, int64_t b, float *sc)
{
    int64_t moff = mask_offset(j, b), ss = j->mstr[j->rank - 2], sk = j->mstr[j->rank - 1];
    for (int64_t s = 0; s < j->S; s++)
        for (int64_t k = 0; k < j->Sk; k++) {
            int64_t mi = moff + s * ss + k * sk;
            if (j->mask_kind == 1)
                sc[s * j->Sk + k] += j->mask[mi];
            else if ((j->bmask[mi] != 0) == (j->mask_kind == 3))
                sc[s * j->Sk + k] = j->fill;
        }
}

static void attn_task(void *p, int64_t b0, int64_t b1)
{
    attn_job *j = p;
    float *sc = kiln__malloc(sizeof(float) * (size_t)scratch_floats(j));
    if (!sc) {
        j->st = KILN_ERR_NOMEM;
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        /* element offsets of head b in each operand: b decomposed over the leading dims */
        int64_t oq = 0, ok = 0, ov = 0, oy = 0, rem = b;
        for (int d = j->rank - 3; d >= 0; d--) {
            int64_t i = rem % j->sdims[d];
            rem /= j->sdims[d];
            oq += i * j->q.lst[d];
            ok += i * j->kt.lst[d];
            ov += i * j->v.lst[d];
            oy += i * j->y.lst[d];
        }
        float *bpk = (float *)(((uintptr_t)(sc + j->S * j->Sk) + 63) & ~(uintptr_t)63);
        float *bpv = bpk + (kiln__sgemm_bpack_floats(j->D, j->Sk) + 15) / 16 * 16;
        float *buf = bpk + bpack_floats(j);
        const float *q = mat_at(&j->q, oq, &buf), *kt = mat_at(&j->kt, ok, &buf), *v = mat_at(&j->v, ov, &buf);
        /* B of both products packed here into full-K panels (the GEMM would pack it anyway) and given as
         * pre-packed: with row-major A read in place the AVX-512 GEMM then runs its 12-row tiles, one K slice */
        kiln__sgemm_bpack(j->kt.m.trans, j->D, j->Sk, kt, j->kt.m.ld, bpk);
        kiln_gemm g1 = {.M = j->S, .N = j->Sk, .K = j->D, .alpha = j->scale, .trans_a = j->q.m.trans, .A = q,
                        .lda = j->q.m.ld, .bpack = bpk, .C = sc, .ldc = j->Sk};
        kiln__sgemm_ex(NULL, 1, &g1);
        if (mask_by_row(j)) {
            const float *mr = j->mask + mask_offset(j, b);
            int64_t ss = j->mstr[j->rank - 2];
            for (int64_t s = 0; s < j->S; s++)
                j->softmax(sc + s * j->Sk, mr + s * ss, j->Sk);
        } else {
            if (j->mask || j->bmask)
                add_mask(j, b, sc);
            for (int64_t s = 0; s < j->S; s++)
                j->softmax(sc + s * j->Sk, NULL, j->Sk);
        }
        float *y = j->y.m.direct ? j->out + oy : buf;
        kiln__sgemm_bpack(j->v.m.trans, j->Sk, j->Dv, v, j->v.m.ld, bpv);
        kiln_gemm g2 = {.M = j->S, .N = j->Dv, .K = j->Sk, .alpha = 1.0f, .A = sc, .lda = j->Sk, .bpack = bpv,
                        .C = y, .ldc = j->y.m.ld};
        kiln__sgemm_ex(NULL, 1, &g2);
        if (!j->y.m.direct)
            copy_mat(&j->y.m, j->out + oy, buf, false);
    }
    kiln__free(sc);
}

/* Logical strides of a tensor of physical dims pd seen through perm (logical dim l = physical
 * dim perm[l]); inv: the tensor is the physical output, perm maps its dims to logical ones. */
static void perm_strides(int r, const int64_t *pd, const int *perm, bool inv, int64_t *lst)
{
    int64_t ps[KILN_MAX_DIMS], s = 1;
    for (int d = r - 1; d >= 0; d--) {
        ps[d] = s;
        s *= pd[d];
    }
    for (int d = 0; d < r; d++) {
        if (inv)
            lst[perm[d]] = ps[d];
        else
            lst[d] = ps[perm[d]];
    }
}

static void opnd_init(attn_opnd *o, const float *base, int r, const int64_t *pd, const int *perm, bool inv,
                      int64_t rows, int64_t cols)
{
    o->base = base;
    perm_strides(r, pd, perm, inv, o->lst);
    o->m = (attn_mat){.rows = rows, .cols = cols, .rs = o->lst[r - 2], .cs = o->lst[r - 1]};
    mat_layout(&o->m);
}

/* The fast path applies when Q, KT, V are float32 of one rank with identical logical leading
 * dims and the mask is float32 (bool for the Where forms) and broadcastable to the score shape. */
static bool attn_fast(kiln_kctx *ctx, kiln_softmax_row_fn softmax, const kiln_tensor *const *in, const kiln_tensor *m,
                      int perm[][KILN_MAX_DIMS], float scale, kiln_status *st)
{
    const kiln_tensor *q = in[0], *kt = in[1], *v = in[2];
    int kind = (int)kiln__attr_i(ctx->node, "mask_kind", 1);
    if (q->dtype != KILN_DT_FLOAT32 || kt->dtype != KILN_DT_FLOAT32 || v->dtype != KILN_DT_FLOAT32 ||
        (m && m->dtype != (kind == 1 ? KILN_DT_FLOAT32 : KILN_DT_BOOL)) || kind < 1 || kind > 3)
        return false;
    int r = q->ndim;
    if (r < 2 || kt->ndim != r || v->ndim != r || (m && m->ndim > r))
        return false;
    int64_t ld[3][KILN_MAX_DIMS];   /* logical dims of Q, KT, V */
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < r; d++)
            ld[i][d] = in[i]->dims[perm[i][d]];
    for (int d = 0; d < r - 2; d++)
        if (ld[0][d] != ld[1][d] || ld[0][d] != ld[2][d])
            return false;
    attn_job j = {.scale = scale, .rank = r, .mask_kind = kind, .softmax = softmax ? softmax : softmax_row_scalar,
                  .fill = kiln__attr_f(ctx->node, "mask_fill", 0.0f)};
    if (m && kind == 1)
        j.mask = m->data;
    else if (m)
        j.bmask = m->data;
    j.S = ld[0][r - 2];
    j.D = ld[0][r - 1];
    j.Sk = ld[1][r - 1];
    j.Dv = ld[2][r - 1];
    if (ld[1][r - 2] != j.D || ld[2][r - 2] != j.Sk || (j.S > 0 && j.Sk > INT64_MAX / 8 / j.S))
        return false;
    for (int d = 0; d < r; d++)
        j.sdims[d] = d < r - 2 ? ld[0][d] : d == r - 2 ? j.S : j.Sk;
    if (m) {
        int off = r - m->ndim;
        for (int d = 0; d < m->ndim; d++)
            if (m->dims[d] != 1 && m->dims[d] != j.sdims[off + d])
                return false;
        kiln__broadcast_strides(m, r, j.sdims, j.mstr);
    }
    int64_t lyd[KILN_MAX_DIMS], pyd[KILN_MAX_DIMS];   /* the output's logical and physical dims */
    memcpy(lyd, ld[0], sizeof(int64_t) * (size_t)r);
    lyd[r - 1] = j.Dv;
    for (int d = 0; d < r; d++)
        pyd[d] = lyd[perm[KILN_ATTN_Y][d]];
    *st = kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, r, pyd);
    if (*st != KILN_OK)
        return true;
    j.out = ctx->out[0]->data;
    opnd_init(&j.q, q->data, r, q->dims, perm[0], false, j.S, j.D);
    opnd_init(&j.kt, kt->data, r, kt->dims, perm[1], false, j.D, j.Sk);
    opnd_init(&j.v, v->data, r, v->dims, perm[2], false, j.Sk, j.Dv);
    opnd_init(&j.y, j.out, r, pyd, perm[KILN_ATTN_Y], true, j.S, j.Dv);
    if (j.y.m.trans)   /* sgemm writes C row-major only */
        j.y.m.direct = false;
    if (!j.y.m.direct)
        j.y.m.ld = j.Dv > 1 ? j.Dv : 1;
    int64_t nb = 1;
    for (int d = 0; d < r - 2; d++)
        nb *= ld[0][d];
    j.st = KILN_OK;
    kiln__parallel_for(ctx->pool, ctx->nthreads, nb, 1, attn_task, &j);
    *st = j.st == KILN_OK ? KILN_OK : kiln__kerr(ctx, j.st, "out of memory");
    return true;
}

static bool is_identity(int r, const int *perm)
{
    for (int d = 0; d < r; d++)
        if (perm[d] != d)
            return false;
    return true;
}

/* *out = Transpose(x, perm) through the Transpose kernel (a fresh heap tensor) */
static kiln_status transpose(kiln_kctx *ctx, const kiln_tensor *x, const int *perm, kiln_tensor *out)
{
    int64_t p[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        p[d] = perm[d];
    kiln_attr a = {.name = "perm", .type = KILN_ATTR_INTS, .n = x->ndim, .ints = p};
    kiln_node tn = *ctx->node;
    tn.op = KILN_OP_Transpose;
    tn.n_attr = 1;
    tn.attrs = &a;
    kiln_kctx sub = *ctx;
    sub.node = &tn;
    return kiln__kcall(&sub, KILN_OP_Transpose, x, NULL, out);
}

/* The composition through the reference kernels, on logical operands: Q KT, scale, mask,
 * softmax, times V, into *y (a fresh heap tensor). */
static kiln_status attn_generic(kiln_kctx *ctx, const kiln_tensor *q, const kiln_tensor *kt, const kiln_tensor *v,
                                const kiln_tensor *m, float scale, kiln_tensor *y)
{
    kiln_tensor s = {0}, t = {0}, p = {0};
    kiln_status st = kiln__kcall(ctx, KILN_OP_MatMul, q, kt, &s);
    if (st == KILN_OK && kiln__dtype_is_float(s.dtype)) {
        int64_t n = kiln_tensor_numel(&s);
        for (int64_t i = 0; i < n; i++)
            kiln__set_f64(s.dtype, s.data, i, kiln__get_f64(s.dtype, s.data, i) * scale);
    } else if (st == KILN_OK) {
        st = kiln__kerr(ctx, KILN_ERR_DTYPE, "attention on %s", kiln_dtype_name(s.dtype));
    }
    int kind = (int)kiln__attr_i(ctx->node, "mask_kind", 1);
    if (st == KILN_OK && m && kind == 1) {
        st = kiln__kcall(ctx, KILN_OP_Add, &s, m, &t);
        kiln__tensor_release(&s);
        s = t;
        memset(&t, 0, sizeof t);
    } else if (st == KILN_OK && m) {
        /* Where(cond, scores, fill) or Where(cond, fill, scores) through the Where kernel */
        kiln_tensor fillt;
        st = kiln__tensor_alloc(&fillt, s.dtype, 0, NULL);
        if (st == KILN_OK) {
            kiln__set_f64(s.dtype, fillt.data, 0, kiln__attr_f(ctx->node, "mask_fill", 0.0f));
            const kiln_tensor *in3[3] = {m, kind == 2 ? &s : &fillt, kind == 2 ? &fillt : &s};
            kiln_tensor *o1[1] = {&t};
            kiln_kctx sub = {.node = ctx->node, .n_in = 3, .in = in3, .n_out = 1, .out = o1, .pool = ctx->pool,
                              .nthreads = ctx->nthreads};
            st = kiln__ref_kernel(KILN_OP_Where)(&sub);
            kiln__tensor_release(&fillt);
            kiln__tensor_release(&s);
            s = t;
            memset(&t, 0, sizeof t);
        }
    }
    if (st == KILN_OK) {
        /* the softmax over the last axis whatever this node's opset says: kcall would hand the
         * Softmax kernel this node, and an opset below 13 means Softmax-1's flattening from axis 1
         * (a whole [S, Sk] matrix, NaN / -inf rows leaking into the others) */
        kiln_node sn = *ctx->node;
        sn.op = KILN_OP_Softmax;
        sn.opset = 13;
        sn.n_attr = 0;
        sn.attrs = NULL;
        kiln_kctx sub = *ctx;
        sub.node = &sn;
        st = kiln__kcall(&sub, KILN_OP_Softmax, &s, NULL, &p);
    }
    if (st == KILN_OK)
        st = kiln__kcall(ctx, KILN_OP_MatMul, &p, v, y);
    kiln__tensor_release(&s);
    kiln__tensor_release(&p);
    return st;
}

kiln_status kiln__attention(kiln_kctx *ctx, kiln_softmax_row_fn softmax)
{
    const kiln_tensor *in[3] = {kiln__kin(ctx, 0), kiln__kin(ctx, 1), kiln__kin(ctx, 2)}, *m = kiln__kin(ctx, 3);
    if (!in[0] || !in[1] || !in[2])
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "needs Q, K^T and V");
    int perm[KILN_ATTN_NPERM][KILN_MAX_DIMS];
    for (int i = 0; i < 3; i++)
        if (!kiln__attn_perm(ctx->node, i, in[i]->ndim, perm[i]))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "%s is not a permutation of 0..%d", kiln__attn_perm_names[i],
                              in[i]->ndim - 1);
    /* the output's rank is Q's on the fast path; the generic path checks y_perm on its result */
    bool y_ok = kiln__attn_perm(ctx->node, KILN_ATTN_Y, in[0]->ndim, perm[KILN_ATTN_Y]);
    float scale = kiln__attr_f(ctx->node, "scale", 1.0f);
    kiln_status st;
    if (y_ok && attn_fast(ctx, softmax, in, m, perm, scale, &st))
        return st;
    /* generic: logical operands gathered, the composition of the reference kernels, the result
     * permuted into the physical output */
    kiln_tensor lg[3] = {{0}}, y = {0}, py = {0};
    const kiln_tensor *op[3];
    st = KILN_OK;
    for (int i = 0; i < 3 && st == KILN_OK; i++) {
        op[i] = in[i];
        if (!is_identity(in[i]->ndim, perm[i])) {
            st = transpose(ctx, in[i], perm[i], &lg[i]);
            op[i] = &lg[i];
        }
    }
    if (st == KILN_OK)
        st = attn_generic(ctx, op[0], op[1], op[2], m, scale, &y);
    if (st == KILN_OK && !kiln__attn_perm(ctx->node, KILN_ATTN_Y, y.ndim, perm[KILN_ATTN_Y]))
        st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "y_perm is not a permutation of 0..%d", y.ndim - 1);
    kiln_tensor *res = &y;
    if (st == KILN_OK && !is_identity(y.ndim, perm[KILN_ATTN_Y])) {
        st = transpose(ctx, &y, perm[KILN_ATTN_Y], &py);
        res = &py;
    }
    if (st == KILN_OK)
        kiln__kreplace_out(ctx, res);
    for (int i = 0; i < 3; i++)
        kiln__tensor_release(&lg[i]);
    kiln__tensor_release(&y);
    kiln__tensor_release(&py);
    return st;
}
