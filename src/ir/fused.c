/* Fused-activation attributes of kiln's fused ops and Attention's permutations (see fused.h). */
#include "fused.h"

static const char *const act_names[KILN_FUSED_ACT_COUNT] = {NULL, "Relu", "Clip", "LeakyRelu", "Sigmoid",
                                                            "HardSigmoid", "HardSwish", "SiLU", "Gelu", "GeluTanh",
                                                            "Tanh", "HardSwishAffine"};

const char *kiln__fused_act_name(kiln_fused_act_kind k)
{
    return (unsigned)k < KILN_FUSED_ACT_COUNT ? act_names[k] : NULL;
}

bool kiln__fused_act_of(const kiln_node *n, kiln_fused_act *a)
{
    memset(a, 0, sizeof *a);
    const char *s = kiln__attr_s(n, "activation", NULL);
    if (!s || !s[0])
        return true;
    for (int k = 1; k < KILN_FUSED_ACT_COUNT; k++)
        if (!strcmp(s, act_names[k])) {
            a->kind = (kiln_fused_act_kind)k;
            a->alpha = kiln__attr_f(n, "activation_alpha", 0.0f);
            a->beta = kiln__attr_f(n, "activation_beta", 0.0f);
            return true;
        }
    return false;
}

kiln_status kiln__node_set_fused_act(kiln_node *n, const kiln_fused_act *a)
{
    const char *name = kiln__fused_act_name(a->kind);
    if (!name)
        return kiln__err(KILN_ERR_INTERNAL, "no fused activation %d", (int)a->kind);
    KILN_TRY(kiln__node_set_attr_s(n, "activation", name));
    KILN_TRY(kiln__node_set_attr_f(n, "activation_alpha", a->alpha));
    return kiln__node_set_attr_f(n, "activation_beta", a->beta);
}

const char *const kiln__attn_perm_names[KILN_ATTN_NPERM] = {"q_perm", "kt_perm", "v_perm", "y_perm"};

bool kiln__attn_perm(const kiln_node *n, int which, int rank, int *perm)
{
    if (which < 0 || which >= KILN_ATTN_NPERM || rank < 0 || rank > KILN_MAX_DIMS)
        return false;
    const kiln_attr *a = kiln__attr(n, kiln__attn_perm_names[which]);
    for (int j = 0; j < rank; j++)
        perm[j] = j;
    if (!a)
        return true;
    if (a->type != KILN_ATTR_INTS || a->n != rank)
        return false;
    bool seen[KILN_MAX_DIMS] = {0};
    for (int j = 0; j < rank; j++) {
        int64_t p = a->ints[j];
        if (p < 0 || p >= rank || seen[p])
            return false;
        seen[p] = true;
        perm[j] = (int)p;
    }
    return true;
}
