/* Pass registry and the default optimization pipeline. */
#include "passes.h"

const kiln_pass_info kiln__passes[] = {
    {"remove-identity", kiln__pass_remove_identity},
    {"constant-fold", kiln__pass_constant_fold},
    {"fold-batchnorm", kiln__pass_fold_batchnorm},
    {"fold-scale-shift", kiln__pass_fold_scale_shift},
    {"cancel-transpose-reshape", kiln__pass_cancel_transpose_reshape},
    {"fuse-layernorm", kiln__pass_fuse_layernorm},
    {"fuse-gelu", kiln__pass_fuse_gelu},
    {"fuse-hardswish", kiln__pass_fuse_hardswish},
    {"fuse-attention", kiln__pass_fuse_attention},
    {"fuse-bias", kiln__pass_fuse_bias},
    {"fuse-residual", kiln__pass_fuse_residual},
    {"fuse-activation", kiln__pass_fuse_activation},
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

kiln_status kiln__optimize(kiln_graph *g, kiln_pass_report *report)
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
    for (int round = 0; round < 4; round++) {
        int total = 0, i = 0;
        for (const kiln_pass_info *p = kiln__passes; p->name; p++, i++) {
            int changed = 0;
            kiln_status st = p->fn(g, &changed);
            if (st != KILN_OK) {
                kiln__err_prefix("pass %s", p->name);
                return st;
            }
            report->entry[i].changed += changed;
            total += changed;
        }
        if (!total)
            break;
    }
    report->nodes_after = g->n_nodes;
    return KILN_OK;
}
