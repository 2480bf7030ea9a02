/* Helpers shared by the CLI subcommands. */
#include "cli.h"
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t interrupted;

/* SIGINT: cancel the runs in progress (async-signal-safe); a second SIGINT kills as usual. */
static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
    kiln_cancel_all();
}

void cli_catch_sigint(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = (int)SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

bool cli_interrupted(void) { return interrupted != 0; }

const char *cli_dims_text(int ndim, const int64_t *dims, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? "x" : "", (long long)dims[d]);
    return buf;
}

const char *cli_esc(const char *s)
{
    /* a ring of buffers so that one printf can escape several arguments */
    static char *ring[8];
    static size_t cap[8];
    static int next;
    int k = next;
    next = (next + 1) % 8;
    size_t need = kiln_escape(NULL, 0, s) + 1;
    if (need > cap[k]) {
        char *p = realloc(ring[k], need);
        if (!p)
            return "(out of memory)";
        ring[k] = p;
        cap[k] = need;
    }
    kiln_escape(ring[k], need, s);
    return ring[k];
}

void cli_print_escaped_lines(const char *text)
{
    /* a multi-line report: its own line breaks are kept, anything else unsafe is escaped */
    for (const char *p = text; p && *p;) {
        size_t n = strcspn(p, "\n");
        char *line = strndup(p, n);
        printf("%s%s", line ? cli_esc(line) : "", p[n] ? "\n" : "");
        free(line);
        p += n + (p[n] != 0);
    }
}

int cli_die(kiln_status st, const char *what)
{
    if (st == KILN_ERR_CANCELLED || interrupted) {
        fprintf(stderr, "kiln: interrupted (%s)\n", what);
        return 130;
    }
    /* kiln_last_error() is already escaped by the library */
    fprintf(stderr, "kiln: %s: %s (%s)\n", what, kiln_last_error(), kiln_status_str(st));
    return 1;
}

json_t *cli_json_str(const char *s)
{
    json_t *j = json_string(s ? s : "");
    return j ? j : json_string(cli_esc(s));
}

double cli_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}
