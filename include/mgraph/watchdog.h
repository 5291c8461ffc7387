/* Bounded waits: Megatron's --distributed-timeout-minutes (torch's process-group timeout).
 *
 * A rank that stops (SIGSTOP, a frozen node, a hung driver) without dying leaves its
 * peers waiting in a collective or a transfer forever: MPI has no timeout of its own.
 * Every blocking wait of mgraph's communication announces itself here (mg_wait_begin /
 * mg_wait_end: the collectives and transfers of mg_comm, the pipeline's posted
 * transfers, and the tools' own agreements over MPI_COMM_WORLD); a watchdog thread,
 * started by the program, checks the waits under way once a second. When one has
 * lasted longer than the timeout, the program's expiry function gets a message naming
 * the wait, its group and the peers it waits for; it reports and ends the process, and
 * the launcher (mpirun) then ends every rank. The waits are process-wide state by
 * nature: one watchdog per process, whatever the number of communicators.
 *
 * Without a started watchdog, begin/end cost a mutex and nothing expires.
 */
#ifndef MGRAPH_WATCHDOG_H
#define MGRAPH_WATCHDOG_H

#include "mgraph/comm.h"
#include "mgraph/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Called once, from the watchdog thread, with a one-line message (no newline). It must
 * not return to the waits (they may never end): report, then end the process. */
typedef void (*mg_watchdog_expired_fn)(const char *msg, void *ctx);

/* Starts the watchdog: a wait longer than timeout_s seconds calls on_expiry.
 * `flag` names the setting in messages (e.g. "--distributed-timeout-minutes 10"),
 * `rank` this process's world rank.
 * MG_ERR_INVALID for a timeout <= 0 or a missing function; starting twice replaces the
 * timeout and function. */
int mg_watchdog_start(double timeout_s, const char *flag, int rank, mg_watchdog_expired_fn on_expiry, void *ctx,
                      mg_error *err);
void mg_watchdog_stop(void);

/* A wait of this thread begins: `what` (e.g. "MPI_Allreduce"), over group grp of mesh
 * (NULL: no mesh known; the message then names no peers), waiting for `peer` (a world
 * rank; -1: every other member of the group). Returns a token for mg_wait_end (-1
 * when every slot is busy: that wait goes unwatched, the others still are). */
int mg_wait_begin(const char *what, const mg_mesh *mesh, mg_group grp, int peer);
void mg_wait_end(int token);

#ifdef __cplusplus
}
#endif
#endif
