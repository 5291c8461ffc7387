/* The tools' fatal paths: what a stopped or failed process leaves behind. */
#ifndef MG_TOOLS_TOOL_SIGNALS_H
#define MG_TOOLS_TOOL_SIGNALS_H

/* Installs the handlers every tool shares:
 * - SIGTERM, SIGINT, SIGHUP: run keep (may be NULL; async-signal-safe: mgraph-run puts
 *   its metrics' whole records in place), remove the temporary files of unfinished
 *   outputs and a checkpoint save under way, then die of the signal as before;
 * - SIGBUS in a mapped input (a dataset or checkpoint truncated in place while the
 *   program reads it, by cp or a preprocessing rerun): "PROG: failed: FILE was
 *   truncated or rewritten while PROG read it", the same clean-up, exit 1. A SIGBUS
 *   anywhere else is left to the default action. */
void mg_tool_install_fatal_handlers(const char *prog, void (*keep)(void));
/* The same clean-up, for a fatal path of the program's own (the watchdog's expiry). */
void mg_tool_fatal_cleanup(void);

#endif
