/* Pass registry and the default optimization pipeline. */
#include "passes.h"
#include <stdlib.h>

const kiln_pass_info kiln__passes[] = {
    {"remove-identity", kiln__pass_remove_identity},
    {"fuse-qdq", kiln__pass_fuse_qdq},   /* before constant-fold turns DQ(weight) into float */
    {"constant-fold", kiln__pass_constant_fold},
    {"fold-batchnorm", kiln__pass_fold_batchnorm},
    {"fold-scale-shift", kiln__pass_fold_scale_shift},
    {"cancel-transpose-reshape", kiln__pass_cancel_transpose_reshape},
    {"fuse-layernorm", kiln__pass_fuse_layernorm},
    {"fuse-gelu", kiln__pass_fuse_gelu},
    {"fuse-hardswish", kiln__pass_fuse_hardswish},
    {"fuse-attention", kiln__pass_fuse_attention},
    {"attention-transpose", kiln__pass_attention_transpose},   /* Transposes around Attention -> its perms */
    {"fuse-bias", kiln__pass_fuse_bias},
    {"fuse-residual", kiln__pass_fuse_residual},
    {"fuse-activation", kiln__pass_fuse_activation},
    {"fuse-post-affine", kiln__pass_fuse_post_affine},   /* HardSwish then a scalar Mul / Add -> HardSwishAffine */
    {"dead-nodes", kiln__pass_dead_nodes},
    {NULL, NULL},
};

const kiln_pass_info *kiln__pass_find(const char *name)
{
    for (const kiln_pass_info *p = kiln__passes; p->name; p++)
        if (!strcmp(p->name, name))
            return p;
    return NULL;
}

static bool check_wanted(const kiln_pass_ctx *pc)
{
    const char *e = getenv("KILN_CHECK_IR");
    return (pc && pc->check) || (e && e[0] == '1');
}

/* One pass on a graph whose use index is built. */
static kiln_status run_indexed(const kiln_pass_info *p, kiln_graph *g, const kiln_pass_ctx *pc, bool check,
                               int *changed)
{
    *changed = 0;
    kiln_status st = p->fn(g, pc, changed);
    if (st == KILN_OK && check)
        st = kiln__uses_check(g);
    if (st != KILN_OK)
        kiln__err_prefix("pass %s", p->name);
    return st;
}

kiln_status kiln__pass_run(const kiln_pass_info *p, kiln_graph *g, const kiln_pass_ctx *pc, int *changed)
{
    bool own;
    KILN_TRY(kiln__uses_ensure(g, &own));
    kiln_status st = run_indexed(p, g, pc, check_wanted(pc), changed);
    if (own)
        kiln__uses_free(g);
    return st;
}

kiln_status kiln__optimize(kiln_graph *g, const kiln_pass_ctx *pc, kiln_pass_report *report)
{
    kiln_pass_report local;
    if (!report)
        report = &local;
    memset(report, 0, sizeof *report);
    report->nodes_before = g->n_nodes;
    for (const kiln_pass_info *p = kiln__passes; p->name; p++) {
        report->entry[report->n].name = p->name;
        report->n++;
    }
    bool own, check = check_wanted(pc);
    KILN_TRY(kiln__uses_ensure(g, &own));
    kiln_status st = KILN_OK;
    for (int round = 0; round < 4 && st == KILN_OK; round++) {
        int total = 0, i = 0;
        for (const kiln_pass_info *p = kiln__passes; p->name && st == KILN_OK; p++, i++) {
            int changed = 0;
            st = run_indexed(p, g, pc, check, &changed);
            report->entry[i].changed += changed;
            total += changed;
        }
        if (!total)
            break;
    }
    if (own)
        kiln__uses_free(g);
    report->nodes_after = g->n_nodes;
    return st;
}
