/* Output files that appear whole or not at all, and never destroy what was there.
 *
 * Every file mgraph writes (metrics, DOT, datasets, caches, checkpoints, traces,
 * TensorBoard events) goes through this: the data is written to a new temporary
 * file in the target's directory, created exclusively (O_CREAT | O_EXCL |
 * O_NOFOLLOW, mode 0666 & ~umask, an unpredictable name), and renamed over the target
 * only when every write, the flush and the close succeeded. A failure removes the
 * temporary file and nothing else: the program never removes or truncates a path it
 * did not create.
 *
 * A target that exists and is not a regular file (/dev/null, /dev/stdout, a FIFO)
 * cannot be replaced by a rename; it is opened for writing as it is (no O_CREAT, no
 * O_TRUNC) and written directly. Directories and dangling symlinks are refused.
 */
#ifndef MGRAPH_OUTFILE_H
#define MGRAPH_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

#include "mgraph/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_outfile mg_outfile;

typedef struct mg_outfile_options {
    bool fsync;          /* fsync the file (and its directory after the rename): checkpoints */
    bool binary;         /* informational: the stream is the same either way on POSIX */
} mg_outfile_options;

/* Removes every temporary file of an mg_outfile not yet committed or aborted, in this
 * process. Async-signal-safe: for a program's fatal-signal or watchdog path, so that a
 * job stopped by SIGTERM, SIGINT, SIGHUP or a timeout leaves no temporary files (the
 * targets are untouched). */
void mg_outfile_discard_temps(void);

/* Starts writing `path`. what names the file in messages ("--metrics-file"). opt may
 * be NULL (no fsync). MG_ERR_IO naming the path and the reason on failure. */
int mg_outfile_open(const char *path, const char *what, const mg_outfile_options *opt, mg_outfile **out,
                    mg_error *err);
/* The stream to write to (valid until commit or abort). */
FILE *mg_outfile_stream(mg_outfile *f);
/* The path being written (the target, not the temporary name). */
const char *mg_outfile_path(const mg_outfile *f);
/* The temporary file being written, or NULL when a device is written in place. A
 * long-running writer may show it (to follow progress) or, from a signal handler,
 * rename() it into place to keep what it flushed so far. */
const char *mg_outfile_temp_path(const mg_outfile *f);
/* Flushes; reports a write error seen so far (ENOSPC, EIO...) as MG_ERR_IO without
 * closing, so long-running writers can stop early. */
int mg_outfile_flush(mg_outfile *f, mg_error *err);
/* Flushes, closes and renames into place. The handle is freed whatever the outcome;
 * on failure the temporary file is removed. */
int mg_outfile_commit(mg_outfile *f, mg_error *err);
/* Discards: closes and removes the temporary file (only that). Frees the handle;
 * NULL is a no-op. */
void mg_outfile_abort(mg_outfile *f);

/* Writes a whole buffer to `path` through the above. */
int mg_write_file_atomic(const char *path, const char *what, const void *data, size_t len,
                         const mg_outfile_options *opt, mg_error *err);

#ifdef __cplusplus
}
#endif
#endif
