/* Checkpoints: logical tensors in safetensors files, one file per rank, any layout in,
 * any layout out.
 *
 * The module knows nothing of graphs or plans. A rank describes what it holds as
 * pieces: a block of a logical tensor (offset + shape inside the logical shape),
 * optionally only a flat range [lo, hi) of that block's row-major order (the
 * distributed optimizer holds flat segments of a tensor-parallel block). The writer
 * stores each rank's pieces in its own safetensors file; the reader fills any set of
 * pieces, in any other layout, from them: that is resharding.
 *
 * Layout of a checkpoint root DIR (Megatron's names):
 *   DIR/latest_checkpointed_iteration.txt    the tracker: "100\n", written last
 *   DIR/iter_0000100/index.json              what is where, plus the caller's metadata
 *   DIR/iter_0000100/rank_00000.safetensors  rank 0's pieces
 * A save goes to DIR/iter_0000100.partial/, every file written to a temporary name,
 * fsynced and renamed; the directory is renamed to iter_0000100/ when whole, then the
 * tracker is replaced. A crash at any moment leaves the previous checkpoint loadable.
 *
 * Safetensors files: u64 little-endian header length, a JSON header
 * {key: {dtype, shape, data_offsets}, "__metadata__": {...}}, raw little-endian data.
 * Each entry's geometry (logical name, logical shape, block, flat range) and a
 * checksum of its bytes are in __metadata__["mgraph"] (a JSON string, as the format
 * wants string values), so every rank writes its file without talking to others.
 * The reader checks every header field, the file size and the checksums: a
 * truncated, corrupt or inconsistent checkpoint is MG_ERR_IO with a message naming the
 * file and the field.
 */
#ifndef MGRAPH_CHECKPOINT_H
#define MGRAPH_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A part of a logical tensor a rank holds (or wants). hi == 0 means the whole block
 * (lo = 0, hi = numel(block)). data holds hi - lo elements of dtype. */
typedef struct mg_ckpt_piece {
    const char *name;               /* logical name, e.g. "h.0.attn.c_attn.weight.exp_avg" */
    mg_dtype dtype;
    int ndim;
    int64_t shape[MG_MAX_DIMS];     /* logical shape */
    int64_t offset[MG_MAX_DIMS];    /* block start inside the logical tensor */
    int64_t block[MG_MAX_DIMS];     /* block shape */
    int64_t lo, hi;                 /* flat range inside the block (hi == 0: all of it) */
    void *data;
} mg_ckpt_piece;

/* Number of elements a piece holds. */
int64_t mg_ckpt_piece_numel(const mg_ckpt_piece *p);

/* "DIR/iter_0000100" into buf. */
void mg_ckpt_iter_dir(const char *root, int64_t iteration, char *buf, size_t len);

/* ---- writing (one save = begin on rank 0, write_rank on every rank, finish on rank 0,
 * with barriers between the steps when ranks are separate processes) ----------------- */
/* Creates DIR (if missing) and an empty DIR/iter_N.partial/ (removing a stale one this
 * module wrote). */
int mg_ckpt_begin(const char *root, int64_t iteration, mg_error *err);
/* Writes this rank's pieces to DIR/iter_N.partial/rank_R.safetensors (fsynced).
 * held[0..n_held) names every logical tensor the rank holds, whether or not it is the
 * rank that writes it (the pieces' own names need not be repeated; NULL, 0 when the
 * pieces are all it holds): finish checks that some rank wrote each of them. */
int mg_ckpt_write_rank(const char *root, int64_t iteration, int rank, const mg_ckpt_piece *pieces, int n,
                       const char *const *held, int n_held, mg_error *err);
/* A save that failed on some rank: removes DIR/iter_N.partial/ (what this module wrote in
 * it) so that no half-written iteration stays behind. Rank 0, after every rank is done. */
void mg_ckpt_abort(const char *root, int64_t iteration);
/* Reads back the headers of ranks [0, nranks) and checks that the save is whole: every
 * tensor a rank holds was written, and the pieces of each tensor cover it exactly once
 * (otherwise MG_ERR_RUNTIME naming the tensor, and nothing is put in place). Then writes
 * index.json (which embeds meta_json, a JSON object given by the caller), renames the
 * directory into place, updates the tracker, then deletes all but the newest `retain`
 * iteration directories (retain <= 0 keeps all; only directories this module recognises
 * are removed). */
int mg_ckpt_finish(const char *root, int64_t iteration, int nranks, const char *meta_json, int retain,
                   mg_error *err);

/* Removes the DIR/iter_N.partial/ of a save this process has under way (what this
 * module wrote in it, then the directory if that emptied it). Async-signal-safe: for a
 * program's fatal-signal or watchdog path, so that a job stopped mid-save leaves the
 * previous checkpoint and no half-written one (the next save would remove it too). */
void mg_ckpt_discard_partial(void);

/* ---- one writer per checkpoint directory ------------------------------------------ */
/* Two jobs saving into one directory would delete and replace each other's iterations
 * (retention, stale .partial directories). A job that saves takes DIR's lock first and
 * holds it until it ends: an flock on DIR/.mgraph-save.lock (created if missing, and
 * DIR with it; never removed: removing a lock file races with its next taker), released
 * by the kernel however the process ends. A lock another process holds is
 * MG_ERR_INVALID naming it (its pid and host, as it wrote them). On a file system
 * without flock (some NFS and Lustre mounts) the lock is not taken and
 * mg_ckpt_lock_warning says so: the caller goes on, warned. */
typedef struct mg_ckpt_lock mg_ckpt_lock;
int mg_ckpt_lock_take(const char *root, mg_ckpt_lock **out, mg_error *err);
/* NULL, or why the lock could not be taken on this file system. */
const char *mg_ckpt_lock_warning(const mg_ckpt_lock *l);
void mg_ckpt_lock_release(mg_ckpt_lock *l);

/* ---- reading ---------------------------------------------------------------------- */
typedef struct mg_ckpt mg_ckpt;

/* Opens the checkpoint the tracker of `path` names, or `path` itself when it is an
 * iteration directory (holds index.json). Validates the index and every rank file's
 * header and size (not yet the data checksums: mg_ckpt_fill checks what it reads).
 * MG_ERR_IO with a message for anything missing, truncated or malformed. */
int mg_ckpt_open(const char *path, mg_ckpt **out, mg_error *err);
void mg_ckpt_close(mg_ckpt *c);
int64_t mg_ckpt_iteration(const mg_ckpt *c);
/* The caller's metadata object as compact JSON text (owned by c). */
const char *mg_ckpt_meta(const mg_ckpt *c);
/* The directory opened (DIR/iter_N). */
const char *mg_ckpt_dir(const mg_ckpt *c);
/* Whether the checkpoint has logical tensor `name`; its dtype and shape if so. */
bool mg_ckpt_has(const mg_ckpt *c, const char *name, mg_dtype *dtype, int *ndim, int64_t shape[MG_MAX_DIMS]);
/* Number of logical tensors and the i-th name (sorted order). */
int mg_ckpt_n_tensors(const mg_ckpt *c);
const char *mg_ckpt_tensor_name(const mg_ckpt *c, int i);

/* Fills every requested piece from whatever pieces the checkpoint holds. A requested
 * tensor that is missing, has another dtype or logical shape, or is not wholly
 * covered is MG_ERR_INVALID naming it; a checksum mismatch is MG_ERR_IO. */
int mg_ckpt_fill(mg_ckpt *c, const mg_ckpt_piece *want, int n, mg_error *err);

#ifdef __cplusplus
}
#endif
#endif
