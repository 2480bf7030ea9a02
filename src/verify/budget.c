/* Accuracy budgets: the parser of "cosine>=0.999", "snr>=30db", "top1>=99.5%", "maxrel<=1e-2", ...
 * and the check of a budget against a comparison summary. Grammar: docs/VERIFY.md. */
#include "../core/core.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    kiln_metric m;
    bool higher_is_better;
} METRICS[] = {
    {"cosine", KILN_METRIC_COSINE, true}, {"snr", KILN_METRIC_SNR, true},
    {"top1", KILN_METRIC_TOP1, true},     {"top5", KILN_METRIC_TOP5, true},
    {"maxrel", KILN_METRIC_MAXREL, false}, {"maxabs", KILN_METRIC_MAXABS, false},
    {"meanabs", KILN_METRIC_MEANABS, false},
};
#define N_METRICS ((int)(sizeof METRICS / sizeof METRICS[0]))
#define WANT "(want METRIC>=X or METRIC<=X: cosine>=0.999, snr>=30db, top1>=99.5%, top5>=99%, maxrel<=1e-2, " \
             "maxabs<=X, meanabs<=X)"

const char *kiln_metric_name(kiln_metric m)
{
    for (int i = 0; i < N_METRICS; i++)
        if (METRICS[i].m == m)
            return METRICS[i].name;
    return "?";
}

static bool higher_is_better(kiln_metric m)
{
    for (int i = 0; i < N_METRICS; i++)
        if (METRICS[i].m == m)
            return METRICS[i].higher_is_better;
    return false;
}

/* A decimal number (no hex, inf or nan) filling [s, end); false otherwise. */
static bool parse_number(const char *s, const char *end, double *out)
{
    char buf[64];
    size_t len = (size_t)(end - s);
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)buf[i]) && !strchr(".eE+-", buf[i]))
            return false;
    char *e;
    errno = 0;
    double v = strtod(buf, &e);
    if (*e || errno || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool ends_with_ci(const char *s, const char *end, const char *suffix, const char **cut)
{
    size_t n = strlen(suffix);
    if ((size_t)(end - s) < n || strncasecmp(end - n, suffix, n) != 0)
        return false;
    *cut = end - n;
    return true;
}

kiln_status kiln_budget_parse(const char *text, kiln_budget *out)
{
    if (!text || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_budget_parse: NULL argument");
    const char *op = strstr(text, ">=");
    const char *le = strstr(text, "<=");
    if (!op || (le && le < op))
        op = le;
    if (!op)
        return kiln__err(KILN_ERR_INVALID_ARG, "bad budget '%s': no >= or <= %s", text, WANT);
    bool ge = op[0] == '>';
    const char *a = text, *b = op;
    while (a < b && isspace((unsigned char)*a))
        a++;
    while (b > a && isspace((unsigned char)b[-1]))
        b--;
    int k = -1;
    for (int i = 0; i < N_METRICS; i++)
        if (strlen(METRICS[i].name) == (size_t)(b - a) && !strncasecmp(a, METRICS[i].name, (size_t)(b - a)))
            k = i;
    if (k < 0)
        return kiln__err(KILN_ERR_INVALID_ARG, "bad budget '%s': unknown metric '%.*s' %s", text, (int)(b - a), a, WANT);
    if (ge != METRICS[k].higher_is_better)
        return kiln__err(KILN_ERR_INVALID_ARG, "bad budget '%s': %s is %s, so its budget is %s%sX", text,
                         METRICS[k].name, ge ? "an error (lower is better)" : "a similarity (higher is better)",
                         METRICS[k].name, ge ? "<=" : ">=");
    const char *v = op + 2, *end = v + strlen(v), *cut;
    while (v < end && isspace((unsigned char)*v))
        v++;
    while (end > v && isspace((unsigned char)end[-1]))
        end--;
    kiln_metric m = METRICS[k].m;
    bool pct = false;
    if (m == KILN_METRIC_SNR && ends_with_ci(v, end, "db", &cut))
        end = cut;
    else if ((m == KILN_METRIC_TOP1 || m == KILN_METRIC_TOP5) && ends_with_ci(v, end, "%", &cut))
        end = cut, pct = true;
    while (end > v && isspace((unsigned char)end[-1]))
        end--;
    double x;
    if (!parse_number(v, end, &x))
        return kiln__err(KILN_ERR_INVALID_ARG, "bad budget '%s': '%s' is not a number %s", text, op + 2, WANT);
    if (pct)
        x /= 100;
    const char *range = NULL;
    if (m == KILN_METRIC_COSINE && (x < -1 || x > 1))
        range = "cosine is in [-1, 1]";
    else if ((m == KILN_METRIC_TOP1 || m == KILN_METRIC_TOP5) && (x < 0 || x > 1))
        range = pct ? "agreement is in [0%, 100%]" : "agreement without '%' is a fraction in [0, 1]";
    else if (!METRICS[k].higher_is_better && x < 0)
        range = "an error bound is >= 0";
    if (range)
        return kiln__err(KILN_ERR_INVALID_ARG, "bad budget '%s': out of range (%s)", text, range);
    out->metric = m;
    out->threshold = x;
    return KILN_OK;
}

double kiln_budget_value(const kiln_budget *b, const kiln_compare_summary *s, bool *passes)
{
    double v = NAN;
    if (b && s) {
        const kiln_compare_stats *w = &s->worst;
        switch (b->metric) {
        case KILN_METRIC_COSINE: v = w->cosine; break;
        case KILN_METRIC_SNR: v = w->snr_db; break;
        case KILN_METRIC_MAXREL: v = w->max_rel; break;
        case KILN_METRIC_MAXABS: v = w->max_abs; break;
        case KILN_METRIC_MEANABS: v = w->mean_abs; break;
        case KILN_METRIC_TOP1: v = s->rows ? (double)s->top1_agree / (double)s->rows : NAN; break;
        case KILN_METRIC_TOP5: v = s->rows ? (double)s->top5_agree / (double)s->rows : NAN; break;
        }
    }
    if (passes) {
        bool higher = b && higher_is_better(b->metric);
        bool empty = s && s->worst.count == 0;   /* no element at all (with none NaN/Inf below) */
        *passes = b && s && s->samples > 0 && s->nonfinite == 0 &&
                  (empty || (!isnan(v) && (higher ? v >= b->threshold : v <= b->threshold)));
    }
    return v;
}
