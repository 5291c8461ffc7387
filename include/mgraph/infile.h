/* Input files, opened one way (the counterpart of outfile.h).
 *
 * Every file a user names as input (text, datasets, plans, vocabularies, checkpoints,
 * configs, cluster files) is opened through these:
 * - the open never blocks: O_NONBLOCK, so a FIFO or a device named by mistake does not
 *   hang the program in open(); the type is checked on the open descriptor (no race
 *   with a rename between a stat and the open), and anything but a regular file is
 *   refused, naming the flag or file kind (`what`) and the path;
 * - errors carry strerror's reason ("Too many levels of symbolic links" for a loop, not
 *   "missing");
 * - mapped inputs are registered, so that a SIGBUS (the file truncated in place while
 *   mapped: `cp` over it, a preprocessing rerun) can be turned into a message naming the
 *   file by the program's handler (mg_input_mapped_at is async-signal-safe).
 * Errors are MG_ERR_IO (input errors: exit 2 in the tools).
 */
#ifndef MGRAPH_INFILE_H
#define MGRAPH_INFILE_H

#include <stddef.h>
#include <stdio.h>

#include "mgraph/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A read-only descriptor of the regular file `path` (O_CLOEXEC, blocking again once
 * checked). `what` names it in messages ("--plan", "checkpoint index"). */
int mg_input_open(const char *path, const char *what, int *fd, mg_error *err);
/* The same as a stdio stream ("rb"). */
int mg_input_fopen(const char *path, const char *what, FILE **f, mg_error *err);
/* Checks that `path` opens as a regular file without blocking, for readers that open
 * it themselves (SentencePiece's loader). */
int mg_input_check(const char *path, const char *what, mg_error *err);

/* Maps `path` read-only (MAP_SHARED: pages shared with other ranks on the node). An
 * empty file maps to NULL with size 0. Release with mg_input_unmap. */
int mg_input_map(const char *path, const char *what, const void **map, size_t *size, mg_error *err);
void mg_input_unmap(const void *map, size_t size);
/* The path of the mapped input holding addr, or NULL. Async-signal-safe (a SIGBUS
 * handler's question: which file was cut short under us). */
const char *mg_input_mapped_at(const void *addr);

#ifdef __cplusplus
}
#endif
#endif
