/* The tools' fatal paths (tool_signals.h). Everything here runs in signal handlers:
 * async-signal-safe calls only (write, rename, unlink, _exit, sigaction, raise). */
#include "tool_signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/checkpoint.h"
#include "mgraph/infile.h"
#include "mgraph/outfile.h"

static const char *g_prog = "mgraph";
static void (*g_keep)(void);

void mg_tool_fatal_cleanup(void) {
    if (g_keep) g_keep();
    mg_outfile_discard_temps();
    mg_ckpt_discard_partial();
}

static void say(const char *s) {
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void on_stop(int sig) {
    mg_tool_fatal_cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_bus(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    const char *path = si ? mg_input_mapped_at(si->si_addr) : NULL;
    if (!path) { /* not an input's page: the default action (a core, exit 135) */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    say(g_prog);
    say(": failed: ");
    say(path);
    say(" was truncated or rewritten while ");
    say(g_prog);
    say(" read it (cp over it, or a preprocessing rerun?): rerun when it is whole\n");
    mg_tool_fatal_cleanup();
    _exit(1);
}

void mg_tool_install_fatal_handlers(const char *prog, void (*keep)(void)) {
    g_prog = prog;
    g_keep = keep;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}
